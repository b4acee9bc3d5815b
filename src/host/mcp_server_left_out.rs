//! The lean build's `/mcp` (no `mcp-server` Cargo feature): refused,
//! naming the feature (`crate::mcp_server::refused`).

use super::serve::{to_response, Served};
use super::Inner;
use crate::http::HttpRequest;
use wasm_bindgen::prelude::*;

impl Inner {
    pub(super) fn mcp(
        &self,
        _request: &web_sys::Request,
        _req: HttpRequest,
    ) -> Result<Served, JsValue> {
        to_response(&crate::mcp_server::refused().into()).map(Served::Now)
    }
}
