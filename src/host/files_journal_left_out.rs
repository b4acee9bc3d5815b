//! `files_journal.rs` in a lean build (no `files` Cargo feature): it has
//! no files module, so it writes no patch journal and has none to undo.

use super::files::Ports;
use super::Inner;
use crate::run::operation::CallRef;

pub(super) struct Sweep;

impl Sweep {
    pub(super) fn new() -> Sweep {
        Sweep
    }

    pub(super) fn due(&self) -> bool {
        false
    }
}

impl Inner {
    pub(super) async fn undo_call(
        &self,
        _: &impl Ports,
        _: &CallRef,
        _: &web_sys::AbortController,
    ) -> String {
        "not undone: this build has no files module".to_owned()
    }

    pub(super) async fn sweep_journals(&self, _: &impl Ports, _: &Sweep) {}
}
