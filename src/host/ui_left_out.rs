//! The lean build's browser bridge (no `ui` Cargo feature): nothing to
//! perform. `tools().ui` is refused as it decodes (`crate::ui::Config`), so
//! no `HostUi` exists; the routes answer `crate::ui::refused`.

use super::bindings::JsTools;
use super::serve::to_response;
use super::Inner;
use crate::run::operation::OperationCall;
use crate::ui::{Config, Route};
use serde_json::Value;
use wasm_bindgen::prelude::*;

/// Never built: there is no `Config` to build it from.
pub enum HostUi {}

impl HostUi {
    pub fn new(config: Config, _js: JsTools) -> HostUi {
        match config {}
    }

    pub fn borrow(&self, _session: &str, _head: &str) {
        match *self {}
    }

    pub fn give_back(&self, _head: &str) {
        match *self {}
    }
}

impl Inner {
    pub(super) async fn ui_fetch(
        &self,
        _request: &web_sys::Request,
        _session: &str,
        _route: Route,
        _query: &str,
    ) -> Result<web_sys::Response, JsValue> {
        to_response(&crate::ui::refused().into())
    }

    /// Unreached: a run only calls `ui` through a `HostUi`.
    pub(super) async fn ui_call(
        &self,
        _op: &OperationCall,
        _signal: &web_sys::AbortSignal,
        _tool_timeout_ms: u64,
    ) -> Result<Value, String> {
        Err(crate::ui::UNAVAILABLE.to_owned())
    }

    pub(super) fn ui_session_ended(&self, _session: &str) {}

    pub(super) fn close_ui(&self, _why: &str) {}
}
