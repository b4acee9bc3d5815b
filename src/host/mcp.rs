//! Performs the MCP client's requests in the Durable Object. Which servers
//! connect when, and which tools join the catalog, is `crate::mcp::Hub`'s;
//! the protocol is `crate::mcp::McpConnection`'s (both sans-IO). This
//! carries their requests through the host's fetch (`js/do.mjs`: redirects
//! not followed, bodies read to at most `MCP_RESPONSE_BYTES_MAX + 1` bytes),
//! each server's connection under the connect timeout. Header values live
//! only in the connections, in memory: never stored, logged or reported.

use super::bindings::{self, error_message, log_warn, JsTools};
use super::Inner;
use crate::mcp::{
    CallProgress, McpConnection, McpError, McpResponse, McpTools, ServerConfig, Step,
};
use crate::model::Image;
use crate::outbound::Outbound;
use futures::future::{join_all, LocalBoxFuture, Shared};
use futures::FutureExt;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// The connected servers' live connections, by module id.
#[derive(Default)]
pub struct Servers {
    by_module: RefCell<HashMap<String, Rc<Server>>>,
    /// The connection round in progress, which concurrent turns share.
    round: RefCell<Option<Shared<LocalBoxFuture<'static, ()>>>>,
}

impl Servers {
    pub fn get(&self, module_id: &str) -> Option<Rc<Server>> {
        self.by_module.borrow().get(module_id).cloned()
    }
}

/// A connected server.
pub struct Server {
    connection: RefCell<McpConnection>,
}

/// Performs the connection round the hub asks for now, or waits for the
/// one in progress: every server at once, each bounded by the connect
/// timeout. Failures are reported to the log and the host's
/// `onUnavailable`.
pub async fn connect_due(me: Rc<Inner>, now_ms: i64) {
    let Ok(Some(tools)) = &me.tools else { return };
    let started = tools.hub.borrow_mut().start_round(now_ms);
    if let Some(configs) = started {
        let inner = Rc::clone(&me);
        let round = async move {
            let Ok(Some(tools)) = &inner.tools else {
                return;
            };
            let outcomes = connect_all(&tools.js, configs, tools.mcp_timeout_ms).await;
            let mut listed = Vec::with_capacity(outcomes.len());
            for (config, outcome) in outcomes {
                listed.push((
                    config,
                    outcome.map(|(connection, listing)| {
                        tools.servers.by_module.borrow_mut().insert(
                            listing.module.id.clone(),
                            Rc::new(Server {
                                connection: RefCell::new(connection),
                            }),
                        );
                        listing
                    }),
                ));
            }
            let reports = tools.hub.borrow_mut().end_round(bindings::now_ms(), listed);
            let hub = tools.hub.borrow();
            tools
                .servers
                .by_module
                .borrow_mut()
                .retain(|module_id, _| hub.is_server(module_id));
            for report in &reports {
                log_warn(format!(
                    "MCP server `{}` is unavailable: {}",
                    report.name, report.reason
                ));
                if let Ok(json) = serde_json::to_string(report) {
                    tools.js.on_unavailable(&json);
                }
            }
            tools.servers.round.borrow_mut().take();
        }
        .boxed_local()
        .shared();
        *tools.servers.round.borrow_mut() = Some(round);
    }
    let round = tools.servers.round.borrow().clone();
    if let Some(round) = round {
        round.await;
    }
}

/// Connects every server concurrently, each bounded by `timeout_ms`.
async fn connect_all(
    js: &JsTools,
    configs: Vec<ServerConfig>,
    timeout_ms: u64,
) -> Vec<(ServerConfig, Result<(McpConnection, McpTools), String>)> {
    let attempts = configs.into_iter().map(|config| async move {
        let Ok(controller) = web_sys::AbortController::new() else {
            return (config, Err("could not start the connection".to_owned()));
        };
        let signal = controller.signal();
        let work = connect(js, &config, Some(&signal));
        let outcome = bindings::within(work, timeout_ms, &controller, 0)
            .await
            .unwrap_or_else(|| {
                Err(format!(
                    "did not connect and list its tools within {timeout_ms} ms"
                ))
            });
        (config, outcome)
    });
    join_all(attempts).await
}

async fn connect(
    js: &JsTools,
    config: &ServerConfig,
    signal: Option<&web_sys::AbortSignal>,
) -> Result<(McpConnection, McpTools), String> {
    let headers: Vec<(String, String)> = config
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
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
    Ok((connection.into_inner(), tools))
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
        let response = perform(js, &request, signal, None).await?;
        let step = connection.borrow_mut().on_response(response.view())?;
        match step {
            Step::Send(next) => request = next,
            Step::Ready(tools) => return Ok(tools),
        }
    }
}

impl Server {
    /// Calls tool `name` (its source name) and answers its result: the
    /// tool's `structuredContent`, or `{isError, content}`, and the images
    /// of its content. The progress the server reports while it runs goes
    /// to `report` (the call's `progress(data)`, JSON). A session the
    /// server forgot is re-established once.
    pub async fn call(
        &self,
        js: &JsTools,
        name: &str,
        arguments: &Value,
        signal: &web_sys::AbortSignal,
        report: &js_sys::Function,
    ) -> Result<(Value, Vec<Image>), String> {
        for attempt in 0..2 {
            let call = self
                .connection
                .borrow_mut()
                .call_tool(name, arguments)
                .map_err(|e| e.to_string())?;
            let mut progress = CallProgress::new(&call);
            let report = report.clone();
            let on_chunk =
                Closure::<dyn FnMut(js_sys::Uint8Array)>::new(move |chunk: js_sys::Uint8Array| {
                    for data in progress.push(&chunk.to_vec()) {
                        // A report the gate refuses (too large) is dropped.
                        let _ = report.call1(&JsValue::NULL, &JsValue::from_str(&data));
                    }
                });
            let response = perform(
                js,
                &call.request,
                Some(signal),
                Some(on_chunk.as_ref().unchecked_ref()),
            )
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
/// `on_chunk`: handed each chunk of an event-stream body as it arrives.
async fn perform(
    js: &JsTools,
    request: &Outbound,
    signal: Option<&web_sys::AbortSignal>,
    on_chunk: Option<&js_sys::Function>,
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
        on_chunk,
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
