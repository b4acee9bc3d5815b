//! MCP servers in the Durable Object (seed `knapsack.md`, `mcpServers`): the
//! host's list of `{name, url, headers?}` becomes modules `mcp.<name>`. The
//! protocol is `crate::mcp` (sans-IO); this performs its requests through
//! the host's fetch (`js/do.mjs`: redirects not followed, bodies read to at
//! most `MCP_RESPONSE_BYTES_MAX + 1` bytes). Servers connect concurrently,
//! each under `MCP_CONNECT_TIMEOUT_MS`; one that fails is dropped and
//! reported (`Unavailable`) while the others stay. Header values live only
//! in the connections, in memory: never stored, logged or reported.

use super::js::{self, error_message};
use super::tools::JsTools;
use crate::limits::MCP_SERVERS_MAX;
use crate::mcp::{HttpRequest, McpConnection, McpError, McpResponse, McpTools, Step};
use futures::future::{join_all, select, Either};
use serde::Deserialize;
use serde_json::Value;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// One configured server, as the host gave it.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub name: String,
    pub url: String,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
}

/// Decodes the host's server list. Errors name the entry and the field,
/// never a value (header values are credentials).
pub fn parse_servers(json: &str) -> Result<Vec<ServerConfig>, String> {
    let entries: Vec<Value> = serde_json::from_str(json)
        .map_err(|_| "mcpServers: expected an array of {name, url, headers?}".to_owned())?;
    if entries.len() > MCP_SERVERS_MAX {
        return Err(format!(
            "mcpServers: {} servers; at most {MCP_SERVERS_MAX}",
            entries.len()
        ));
    }
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            serde_json::from_value(entry).map_err(|_| {
                format!(
                    "mcpServers[{i}]: expected {{name: string, url: string, headers?: \
                     {{[name]: string}}}} and nothing else"
                )
            })
        })
        .collect()
}

/// A server that could not be offered, and why (credential-free).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unavailable {
    pub name: String,
    pub reason: String,
}

/// A connected server.
pub struct Server {
    pub module_id: String,
    connection: RefCell<McpConnection>,
}

/// The host's connected servers, their tools, and the servers of the last
/// connection round that could not be offered.
#[derive(Default)]
pub struct Hub {
    pub servers: Vec<Rc<Server>>,
    pub tools: Vec<McpTools>,
    pub unavailable: Vec<Unavailable>,
}

impl Hub {
    pub fn server(&self, module_id: &str) -> Option<Rc<Server>> {
        self.servers
            .iter()
            .find(|s| s.module_id == module_id)
            .cloned()
    }

    /// This hub with the servers `round` connected added, and only the
    /// failures of `round` as unavailable.
    pub fn merged(&self, round: Hub) -> Hub {
        Hub {
            servers: self.servers.iter().cloned().chain(round.servers).collect(),
            tools: self.tools.iter().cloned().chain(round.tools).collect(),
            unavailable: round.unavailable,
        }
    }

    /// Drops a connected server after the fact (its module could not join
    /// the catalog), reporting why.
    pub fn drop_server(&mut self, module_id: &str, reason: String) {
        if let Some(at) = self.servers.iter().position(|s| s.module_id == module_id) {
            self.servers.remove(at);
            self.tools.retain(|t| t.module.id != module_id);
            let name = module_id
                .strip_prefix("mcp.")
                .unwrap_or(module_id)
                .to_owned();
            self.unavailable.push(Unavailable { name, reason });
        }
    }
}

/// Connects every server concurrently, each bounded by `timeout_ms`;
/// answers the hub and the configurations of the servers that failed.
pub async fn connect_all(
    js: &JsTools,
    configs: Vec<ServerConfig>,
    timeout_ms: u64,
) -> (Hub, Vec<ServerConfig>) {
    let attempts = configs.into_iter().map(|config| async move {
        let kept = config.clone();
        let controller = web_sys::AbortController::new().ok();
        let signal = controller.as_ref().map(|c| c.signal());
        let work = connect(js, config, signal.as_ref());
        let outcome = match select(Box::pin(work), js::sleep(timeout_ms)).await {
            Either::Left((outcome, _)) => outcome,
            Either::Right(_) => {
                if let Some(c) = &controller {
                    c.abort();
                }
                Err(format!(
                    "did not connect and list its tools within {timeout_ms} ms"
                ))
            }
        };
        (kept, outcome)
    });
    let mut hub = Hub::default();
    let mut failed = Vec::new();
    for (config, outcome) in join_all(attempts).await {
        match outcome {
            Ok((connection, tools)) => {
                hub.servers.push(Rc::new(Server {
                    module_id: tools.module.id.clone(),
                    connection: RefCell::new(connection),
                }));
                hub.tools.push(tools);
            }
            Err(reason) => {
                hub.unavailable.push(Unavailable {
                    name: config.name.clone(),
                    reason,
                });
                failed.push(config);
            }
        }
    }
    (hub, failed)
}

async fn connect(
    js: &JsTools,
    config: ServerConfig,
    signal: Option<&web_sys::AbortSignal>,
) -> Result<(McpConnection, McpTools), String> {
    let headers: Vec<(String, String)> = config.headers.into_iter().collect();
    let connection = RefCell::new(
        McpConnection::new(
            &config.url,
            &config.name,
            env!("CARGO_PKG_VERSION"),
            headers,
        )
        .map_err(|e| e.to_string())?,
    );
    let tools = handshake(js, &connection, signal)
        .await
        .map_err(|e| e.to_string())?;
    let connection = connection.into_inner();
    if tools.module.operations.is_empty() {
        let dropped: Vec<String> = tools
            .dropped
            .iter()
            .map(|d| format!("{}: {}", d.name, d.reason))
            .collect();
        return Err(format!(
            "advertised no usable tool{}",
            if dropped.is_empty() {
                String::new()
            } else {
                format!(" ({})", dropped.join("; "))
            }
        ));
    }
    Ok((connection, tools))
}

/// `initialize`, `initialized`, the paginated `tools/list`. The connection
/// is borrowed only between awaits.
async fn handshake(
    js: &JsTools,
    connection: &RefCell<McpConnection>,
    signal: Option<&web_sys::AbortSignal>,
) -> Result<McpTools, McpError> {
    let mut request = connection.borrow_mut().start();
    loop {
        let response = perform(js, &request, signal).await?;
        let step = connection.borrow_mut().on_response(response.view())?;
        match step {
            Step::Send(next) => request = next,
            Step::Ready(tools) => return Ok(tools),
        }
    }
}

impl Server {
    /// Calls tool `name` (its source name) and answers its result: the
    /// tool's `structuredContent`, or `{isError, content}`. A session the
    /// server forgot is re-established once.
    pub async fn call(
        &self,
        js: &JsTools,
        name: &str,
        arguments: &Value,
        signal: &web_sys::AbortSignal,
    ) -> Result<Value, String> {
        for attempt in 0..2 {
            let call = self
                .connection
                .borrow_mut()
                .call_tool(name, arguments)
                .map_err(|e| e.to_string())?;
            let response = perform(js, &call.request, Some(signal))
                .await
                .map_err(|e| e.to_string())?;
            let result = self
                .connection
                .borrow_mut()
                .tool_result(call.id, response.view());
            match result {
                Err(McpError::SessionExpired) if attempt == 0 => {
                    handshake(js, &self.connection, Some(signal))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                other => return other.map_err(|e| e.to_string()),
            }
        }
        Err("MCP session expired twice in a row".to_owned())
    }
}

/// A response read by the shim.
struct Response {
    status: u16,
    content_type: Option<String>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn view(&self) -> McpResponse<'_> {
        McpResponse {
            status: self.status,
            content_type: self.content_type.as_deref(),
            headers: &self.headers,
            body: &self.body,
        }
    }
}

/// Performs one request through the host's fetch (`redirect: "manual"`).
async fn perform(
    js: &JsTools,
    request: &HttpRequest,
    signal: Option<&web_sys::AbortSignal>,
) -> Result<Response, McpError> {
    let headers = js_sys::Array::new();
    for (name, value) in &request.headers {
        headers.push(&js_sys::Array::of2(&name.into(), &value.into()));
    }
    let promise = js.mcp_fetch(
        &request.method,
        &request.url,
        &headers,
        &request.body,
        signal,
    );
    let answer = JsFuture::from(promise).await.map_err(|e| {
        // A network error names no header; the URL's query is left out.
        McpError::Protocol(format!("request failed: {}", error_message(&e)))
    })?;
    let field = |name: &str| js_sys::Reflect::get(&answer, &name.into()).unwrap_or(JsValue::NULL);
    let status = field("status").as_f64().unwrap_or(0.0) as u16;
    let content_type = field("contentType").as_string();
    let mut response_headers = Vec::new();
    for pair in js_sys::Array::from(&field("headers")).iter() {
        let pair = js_sys::Array::from(&pair);
        if let (Some(name), Some(value)) = (pair.get(0).as_string(), pair.get(1).as_string()) {
            response_headers.push((name, value));
        }
    }
    let body = js_sys::Uint8Array::new(&field("body")).to_vec();
    Ok(Response {
        status,
        content_type,
        headers: response_headers,
        body,
    })
}
