//! Files (seed knapsack: `Knapsack.files`, apply_patch, files-patch,
//! files-search), sans-IO: path validation, the patch engine, search
//! visibility, the `files` module's operations and the journal that makes a
//! patch all or none over a port atomic for one file only. The host
//! performs the reads and writes through a port.
//!
//! The module is behind the `files` Cargo feature (default). Without it (the
//! lean build) `module` is the stub in `module_left_out.rs`: the module
//! cannot be built and no operation runs, each refused naming the feature,
//! so nothing of the patch engine, search or the workspace's port is left in
//! the wasm.

pub mod journal;
#[cfg(feature = "files")]
pub mod module;
#[cfg(not(feature = "files"))]
#[path = "module_left_out.rs"]
pub mod module;
pub mod patch;
pub mod path;
pub mod port;
pub mod search;
pub mod visibility;
pub mod workspace;

/// Runs a future that never waits (a port over synchronous storage) to its
/// end, for native callers and tests.
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => {
            panic!("block_on: the future waited; only synchronous ports run here")
        }
    }
}
