//! The lean build's `POST /acp` (no `acp` Cargo feature): refused, naming
//! the feature (`crate::acp::refused`).

use super::Inner;
use crate::http::HttpRequest;
use wasm_bindgen::prelude::*;

impl Inner {
    pub(super) fn acp(&self, _req: &HttpRequest) -> Result<web_sys::Response, JsValue> {
        super::serve::to_response(&crate::acp::refused().into())
    }
}
