//! The lean build's MCP (no `mcp` Cargo feature): nothing to perform. A
//! non-empty `tools().mcpServers` is refused as it decodes
//! (`crate::mcp::parse_servers`), so no server connects.

use super::bindings::JsTools;
use crate::mcp::Hub;
use crate::model::Image;
use serde_json::Value;
use std::cell::RefCell;
use std::rc::Rc;

/// No server connects: none is ever found.
pub struct Servers;

impl Servers {
    pub fn new(_timeout_ms: u64) -> Servers {
        Servers
    }

    pub fn get(&self, _module_id: &str) -> Option<Rc<Server>> {
        None
    }
}

/// Never built.
pub enum Server {}

impl Server {
    pub async fn call(
        &self,
        _js: &JsTools,
        _name: &str,
        _arguments: &Value,
        _signal: &web_sys::AbortSignal,
        _report: &js_sys::Function,
    ) -> Result<(Value, Vec<Image>), String> {
        match *self {}
    }
}

/// No server to connect.
pub async fn connect_due(
    _js: &JsTools,
    _hub: &Rc<RefCell<Hub>>,
    _servers: &Rc<Servers>,
    _now_ms: i64,
) {
}
