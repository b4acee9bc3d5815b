//! The Files port: what a host supplies so the `files` module can reach its
//! files (seed: "Knapsack.files({ port }) builds a Files module and direct
//! tools from one port"). The port owns its root and its authority; the
//! module hands it canonical root-relative paths only ([`super::path`]).
//!
//! The project ships two ports: the Agent's own SQLite
//! ([`super::workspace::Workspace`]) and an R2 bucket (`js/files-r2.mjs`,
//! reached through the wasm host). A host may write its own in JS.

use serde::{Deserialize, Serialize};

pub use super::search::Entry;

/// What a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    File { size: u64 },
    Dir,
    Missing,
}

/// One page of a recursive listing of the files under a directory, sorted by
/// path; `cursor` asks for the next page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Page {
    pub entries: Vec<Entry>,
    #[serde(default)]
    pub cursor: Option<String>,
}

/// One file write of a [`Port::replace`]: `expected` is the content the write
/// was computed from (`None`: the file must not exist), `content` the new
/// content (`None`: delete the file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub path: String,
    pub expected: Option<String>,
    pub content: Option<String>,
}

/// A [`Port::replace`]'s outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replaced {
    Done,
    /// A file no longer holds what the change expected: nothing was written.
    Conflict {
        path: String,
    },
}

/// A port failure, shown to the model as the tool's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PortError(pub String);

/// A host's files. Methods are async because most ports do I/O; the wasm
/// host is single-threaded, so the futures need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait Port {
    /// The file's content, `None` when there is no such file.
    async fn read(&self, path: &str) -> Result<Option<String>, PortError>;
    async fn stat(&self, path: &str) -> Result<Stat, PortError>;
    /// The files under directory `dir` (`""` = the root), recursively.
    async fn list(&self, dir: &str, cursor: Option<&str>) -> Result<Page, PortError>;
    /// Creates or overwrites a file.
    async fn write(&self, path: &str, content: &str) -> Result<(), PortError>;
    /// Applies every change or none: a change whose file no longer holds
    /// its `expected` content refuses them all. One change is the seed's
    /// `port.replace`; several are one patch.
    async fn replace(&self, changes: &[Change]) -> Result<Replaced, PortError>;
    /// Whether the port supplies the patch engine (`apply_patch` offered).
    fn patches(&self) -> bool;
}
