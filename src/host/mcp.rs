//! Performs the MCP client's requests in the Durable Object. Which servers
//! connect or are listed again when, and which tools join the catalog, is
//! `crate::mcp::Hub`'s; the protocol is `crate::mcp::McpConnection`'s (both
//! sans-IO). This carries their requests through the host's fetch
//! (`js/do/hooks.mjs`: redirects not followed, bodies read to at most
//! `MCP_RESPONSE_BYTES_MAX + 1` bytes), each server's connection or listing
//! under the connect timeout, one handshake or listing of a connection at a
//! time. Header values live only in the connections, in memory: never
//! stored, logged or reported.

use super::bindings::{self, error_message, log_warn, JsTools};
use crate::mcp::hub::Round;
use crate::mcp::{
    CallProgress, Hub, McpConnection, McpError, McpResponse, McpTools, ServerConfig, Step,
};
use crate::model::Image;
use crate::outbound::Outbound;
use futures::future::{join_all, LocalBoxFuture, Shared};
use futures::lock::Mutex;
use futures::FutureExt;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// The connected servers' live connections, by module id.
pub struct Servers {
    by_module: RefCell<HashMap<String, Rc<Server>>>,
    /// The round in progress, which concurrent turns share.
    round: RefCell<Option<Shared<LocalBoxFuture<'static, ()>>>>,
    /// Bound on connecting (or listing again) one server.
    timeout_ms: u64,
}

impl Servers {
    pub fn new(timeout_ms: u64) -> Servers {
        Servers {
            by_module: RefCell::default(),
            round: RefCell::default(),
            timeout_ms,
        }
    }

    pub fn get(&self, module_id: &str) -> Option<Rc<Server>> {
        self.by_module.borrow().get(module_id).cloned()
    }
}

/// A connected server.
pub struct Server {
    connection: RefCell<McpConnection>,
    /// Held while the connection initializes or lists: one at a time, and
    /// calls wait for it (a call meeting a handshake midway would fail).
    renewing: Mutex<()>,
}

/// Performs the round the hub asks for now, or waits for the one in
/// progress: every server due connected or listed again at once, each
/// bounded by the connect timeout. Failures, and tools newly left out, are
/// reported to the log and the host's `onUnavailable`.
pub async fn connect_due(js: &JsTools, hub: &Rc<RefCell<Hub>>, servers: &Rc<Servers>, now_ms: i64) {
    let started = {
        let mut hub = hub.borrow_mut();
        for (module_id, server) in servers.by_module.borrow().iter() {
            hub.saw_version(module_id, server.connection.borrow().tools_version());
        }
        hub.start_round(now_ms)
    };
    if let Some(round) = started {
        let (js, hub, running) = (js.clone(), Rc::clone(hub), Rc::clone(servers));
        let round = async move {
            let servers = running;
            let outcomes = perform_round(&js, &servers, round).await;
            let mut listed = Vec::with_capacity(outcomes.len());
            for (config, outcome) in outcomes {
                listed.push((
                    config,
                    outcome.map(|(connection, listing)| {
                        if let Some(connection) = connection {
                            servers.by_module.borrow_mut().insert(
                                listing.module.id.clone(),
                                Rc::new(Server {
                                    connection: RefCell::new(connection),
                                    renewing: Mutex::new(()),
                                }),
                            );
                        }
                        listing
                    }),
                ));
            }
            let reports = hub.borrow_mut().end_round(bindings::now_ms(), listed);
            let hub = hub.borrow();
            servers
                .by_module
                .borrow_mut()
                .retain(|module_id, _| hub.is_server(module_id));
            for report in &reports {
                log_warn(report);
                if let Ok(json) = serde_json::to_string(report) {
                    js.on_unavailable(&json);
                }
            }
            servers.round.borrow_mut().take();
        }
        .boxed_local()
        .shared();
        *servers.round.borrow_mut() = Some(round);
    }
    let round = servers.round.borrow().clone();
    if let Some(round) = round {
        round.await;
    }
}

/// A round's outcome for one server: its listing, with the new connection
/// when it connected (a listing again keeps its connection).
type Outcome = Result<(Option<McpConnection>, McpTools), String>;

/// Connects and lists every server of `round` concurrently, each bounded by
/// the connect timeout.
async fn perform_round(
    js: &JsTools,
    servers: &Servers,
    round: Round,
) -> Vec<(ServerConfig, Outcome)> {
    let timeout_ms = servers.timeout_ms;
    let connects = round.connect.into_iter().map(|config| (config, None));
    // A server listed again on its connection (were it gone: connected anew).
    let relists = round.relist.into_iter().map(|config| {
        let server = servers.get(&format!("mcp.{}", config.name));
        (config, server)
    });
    let attempts = connects.chain(relists).map(|(config, server)| async move {
        let Ok(controller) = web_sys::AbortController::new() else {
            return (config, Err("could not start the connection".to_owned()));
        };
        let signal = controller.signal();
        let work = async {
            match server {
                Some(server) => server
                    .relist(js, Some(&signal))
                    .await
                    .map(|tools| (None, tools)),
                None => connect(js, &config, Some(&signal))
                    .await
                    .map(|(connection, tools)| (Some(connection), tools)),
            }
        };
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
    let first = connection.borrow_mut().start();
    let tools = steps(js, &connection, first, signal)
        .await
        .map_err(|e| e.to_string())?;
    Ok((connection.into_inner(), tools))
}

/// Performs `request` and the requests each response leads to, up to the
/// listing (`initialize`, `initialized`, the paginated `tools/list`). The
/// connection is borrowed only between awaits.
async fn steps(
    js: &JsTools,
    connection: &RefCell<McpConnection>,
    mut request: Outbound,
    signal: Option<&web_sys::AbortSignal>,
) -> Result<McpTools, McpError> {
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
    /// to `report` (the call's `progress(data)`, JSON); the server's
    /// requests on it are answered at once; a stream the server closes
    /// before the result is resumed (`McpConnection::resume`). A session
    /// the server forgot is renewed once.
    pub async fn call(
        &self,
        js: &JsTools,
        name: &str,
        arguments: &Value,
        signal: &web_sys::AbortSignal,
        report: &js_sys::Function,
    ) -> Result<(Value, Vec<Image>), String> {
        for _ in 0..2 {
            self.ready(js, signal).await?;
            let call = self
                .connection
                .borrow_mut()
                .call_tool(name, arguments)
                .map_err(|e| e.to_string())?;
            let progress = Rc::new(RefCell::new(CallProgress::new(&call)));
            let on_chunk = {
                let (progress, report, js) = (Rc::clone(&progress), report.clone(), js.clone());
                let signal = signal.clone();
                Closure::<dyn FnMut(js_sys::Uint8Array) -> bool>::new(
                    move |chunk: js_sys::Uint8Array| {
                        let chunk = progress.borrow_mut().push(&chunk.to_vec());
                        for data in chunk.reports {
                            // A report the gate refuses (too large) is dropped.
                            let _ = report.call1(&JsValue::NULL, &JsValue::from_str(&data));
                        }
                        for reply in chunk.replies {
                            let (js, signal) = (js.clone(), signal.clone());
                            wasm_bindgen_futures::spawn_local(async move {
                                if let Err(e) = perform(&js, &reply, Some(&signal), None).await {
                                    log_warn(format!("MCP: answering a server's request: {e}"));
                                }
                            });
                        }
                        // The call's response came: the host stops reading.
                        chunk.answered
                    },
                )
            };
            let on_chunk = Some(on_chunk.as_ref().unchecked_ref());
            let mut response = perform(js, &call.request, Some(signal), on_chunk)
                .await
                .map_err(|e| e.to_string())?;
            // A stream closed before the response: resumed, bounded.
            loop {
                let resume = self
                    .connection
                    .borrow()
                    .resume(&mut progress.borrow_mut(), response.view());
                let Some(resume) = resume else { break };
                bindings::sleep(resume.after_ms).await;
                response = perform(js, &resume.request, Some(signal), on_chunk)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let result = self
                .connection
                .borrow_mut()
                .tool_result(call.id, response.view());
            match result {
                // A call the server accepted (its stream was resumed) is
                // never sent again: only one it never saw.
                Err(McpError::SessionExpired) if !progress.borrow().resumed() => continue,
                other => return other.map_err(|e| e.to_string()),
            }
        }
        Err("MCP session expired twice in a row".to_owned())
    }

    /// Waits out a renewal in progress, and renews the session when none
    /// is held (the server forgot it, or a renewal failed). The new
    /// session's listing is left to the next turn's round: the connection's
    /// tools version says it is due.
    async fn ready(&self, js: &JsTools, signal: &web_sys::AbortSignal) -> Result<(), String> {
        let _alone = self.renewing.lock().await;
        if self.connection.borrow().is_ready() {
            return Ok(());
        }
        let first = self.connection.borrow_mut().start();
        steps(js, &self.connection, first, Some(signal))
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// The server's tools listed again, in a new session when the server
    /// forgot this one.
    async fn relist(
        &self,
        js: &JsTools,
        signal: Option<&web_sys::AbortSignal>,
    ) -> Result<McpTools, String> {
        let _alone = self.renewing.lock().await;
        // Not ready: the session ended, or its renewal failed.
        let first = self.connection.borrow_mut().list_tools();
        let outcome = match first {
            Ok(first) => steps(js, &self.connection, first, signal).await,
            Err(_) => Err(McpError::SessionExpired),
        };
        match outcome {
            Err(McpError::SessionExpired) => {
                let first = self.connection.borrow_mut().start();
                steps(js, &self.connection, first, signal).await
            }
            other => other,
        }
        .map_err(|e| e.to_string())
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
