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
pub mod branches;
pub mod command;
pub mod queue;
pub mod read;
