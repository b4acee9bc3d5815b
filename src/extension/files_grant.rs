//! The exclusive files grant (seed: "An extension may request the exclusive
//! files grant and return Knapsack-minted FileTools from files(context,
//! run). Core captures the tools once per run, passes them to Mycelium
//! beside execute, and records their names in the execution protocol
//! digest."). Sans-IO: which extension builds the run's files tools, its
//! builder's answer (a description of the port; the port itself stays with
//! the host), and the tools those are: the files module's operations as
//! direct tools only, granted by the key `files`, never a module `execute`
//! or `forage` reaches.

use super::{tables, Extensions};
use crate::capability::door::Toolset;
use crate::capability::{CapabilityError, Module};
use crate::files::module::{module, MODULE_ID};
use crate::store::Store;
use serde::Deserialize;
use serde_json::Value;

/// The grant key of the holder's files tools (seed: "Files direct tools by
/// files"), whatever the holder's own grant key is.
pub const FILES_GRANT_KEY: &str = "files";

/// The port the holder's `files(context, run)` returned, as the shim
/// describes it: the Agent's own SQLite workspace (its bounds) or a JS port
/// (whether it supplies the patch engine, and is stepwise). The shim keeps
/// the port object for the run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FilesPort {
    #[serde(default)]
    pub workspace: Option<Value>,
    #[serde(default)]
    pub patches: bool,
    #[serde(default)]
    pub stepwise: bool,
}

impl FilesPort {
    /// Whether `apply_patch` is offered: the workspace always patches.
    pub fn patches(&self) -> bool {
        self.workspace.is_some() || self.patches
    }
}

/// What the files holder gave for one run.
#[derive(Debug, Clone, PartialEq)]
pub struct FilesTools {
    /// The holder's extension id.
    pub holder: String,
    /// Its port (`None`: no files tools this run), or why the builder
    /// failed (logged; the run goes on without them).
    pub port: Result<Option<FilesPort>, String>,
}

impl Extensions {
    /// Runs the files holder's `files(context, run)` for the run headed by
    /// `command_id` (read-only, over committed state, like the prompt and
    /// tools builders). `None` when no extension holds the files grant, its
    /// definition has no files hook, or it is not running (stopped, or not
    /// opened yet). The host calls this once per run and keeps the answer
    /// for the whole run.
    pub fn files_tools(
        &self,
        store: Store<'_>,
        session_id: &str,
        command_id: &str,
    ) -> Option<FilesTools> {
        let holder = self.roster.files_holder()?;
        if !holder.manifest.files {
            return None;
        }
        let meta = tables::meta_rows(store.sql()).ok()?;
        let running = meta.get(holder.id()).is_some_and(|m| m.stopped.is_none());
        if !running {
            return None;
        }
        let id = holder.id();
        let port = self
            .built(store, holder, "files", session_id, command_id)
            .and_then(|answer| match answer.value {
                None | Some(Value::Null) => Ok(None),
                Some(value) => crate::json::decode::<FilesPort>(value)
                    .map(Some)
                    .map_err(|e| format!("extension {id}: the files hook's port: {e}")),
            });
        Some(FilesTools {
            holder: id.to_owned(),
            port,
        })
    }
}

/// The files module over the holder's port, granted by `files`.
pub fn files_module(patches: bool) -> Result<Module, CapabilityError> {
    Ok(module(MODULE_ID, patches)?.granted_by(FILES_GRANT_KEY))
}

/// `toolset` plus the holder's files tools: direct tools beside `execute`
/// (in the protocol digest), not in the catalog `execute` reaches.
pub fn with_files_tools(toolset: &Toolset, patches: bool) -> Result<Toolset, CapabilityError> {
    toolset.clone().with_direct_only(files_module(patches)?)
}

#[cfg(all(test, not(feature = "files")))]
mod lean_tests {
    /// The lean build (no `files` feature) refuses the files grant's module,
    /// naming the feature; the host refuses a roster with a holder of the
    /// grant on it (`host/files_grant.rs`, 503 `host_misconfigured`).
    #[test]
    fn a_lean_build_refuses_the_files_grant_naming_the_feature() {
        let e = super::files_module(true).unwrap_err().0;
        assert!(e.contains("`files` Cargo feature"), "{e}");
    }
}
