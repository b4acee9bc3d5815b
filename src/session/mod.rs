//! Sessions: admission of caller work, the per-Session FIFO queue,
//! withdrawal fences, cancellation and the bounded read (seed `shiitake.md`,
//! "Recover an uncertain send" and "Accept, execute and observe").
//!
//! Invariants kept here, each inside one transaction:
//! - one `(sessionId, requestId)` names at most one command, forever;
//! - a fenced `(sessionId, requestId)` is never admitted;
//! - a receipt is returned only after the command's row commits;
//! - a Session's pending queue is bounded in count and bytes.

pub mod admission;
pub mod command;
pub mod meta;
pub mod queue;
pub mod read;

use crate::store::Store;

/// Source of fresh identifiers. The wasm host draws them from the platform's
/// CSPRNG; tests use a deterministic counter.
pub trait IdSource {
    /// A new unique id starting with `prefix` (for example `cmd_`).
    fn next_id(&mut self, prefix: &str) -> String;
}

/// Everything one operation needs from outside: the store, the current time
/// and an id source. The core never reads a clock or randomness itself.
pub struct Ctx<'a> {
    pub store: Store<'a>,
    pub now_ms: i64,
    pub ids: &'a mut dyn IdSource,
    /// The host's metadata schema and identity path.
    pub meta: &'a meta::MetaPolicy,
}

/// A deterministic [`IdSource`] for tests and tools.
#[derive(Debug, Default)]
pub struct CounterIds {
    next: u64,
}

impl IdSource for CounterIds {
    fn next_id(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{:08}", self.next)
    }
}
