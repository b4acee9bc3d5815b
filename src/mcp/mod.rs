//! An MCP client for the Streamable HTTP transport, sans-IO: [`McpConnection`]
//! produces the [`Outbound`]s to make and consumes the host's
//! [`McpResponse`]s. The host performs every request as given, with
//! redirects off (`redirect: "manual"`), and reads at most
//! `MCP_RESPONSE_BYTES_MAX + 1` bytes of a body.
//!
//! Protocol revision [`PROTOCOL_VERSION`] (`2025-11-25`); a server answering
//! an older one of [`PROTOCOL_VERSIONS`] (`2025-06-18`, `2025-03-26`) is
//! accepted too, any other version is refused.
//!
//! The flow, one request in flight at a time until the tools are listed:
//!
//! ```text
//! start()            -> initialize request
//! on_response(..)    -> Step::Send(notifications/initialized)
//! on_response(..)    -> Step::Send(tools/list)            (202 expected)
//! on_response(..)    -> Step::Send(tools/list, cursor) ... (≤ 20 pages)
//! on_response(..)    -> Step::Ready(McpTools)
//! call_tool(..)      -> ToolCall { id, request }          (any number in flight)
//! tool_result(id, ..) -> the result as a JSON value
//! ```
//!
//! A tool call's event stream is read as it arrives ([`CallProgress`]):
//! progress is reported, the server's requests answered, and a stream the
//! server closes before the call's response is resumed with a GET
//! carrying `Last-Event-ID` after the stream's `retry:`
//! ([`McpConnection::resume`], at most `MCP_SSE_RESUMES_MAX` times), so a
//! long call survives a dropped stream. This client holds no GET stream of
//! its own beyond that.
//!
//! `list_tools()` lists again once ready. A 404 while a session id is held
//! ends the session ([`McpError::SessionExpired`]); `start()` begins anew.
//! A 404 to a request sent in an earlier session says so without ending the
//! current one (concurrent calls may all meet the old session's end).
//!
//! [`McpConnection::tools_version`] counts what may have changed the
//! server's tools since: each `notifications/tools/list_changed` seen on a
//! response (a server may send it on any POST's event stream; this client
//! holds no GET stream, where servers send the rest) and each new session.
//! A listing carries the count it began at ([`McpTools::tools_version`]): a
//! higher count later means the listing may be stale.
//!
//! Tools become a [`ModuleSpec`](crate::capability::ModuleSpec)
//! `mcp.<name>` (see [`McpTools`]). A tool the capability model refuses (a
//! name mapping to a reserved word, two names mapping to one guest name, a
//! schema it cannot decode, one operation over the module's bounds) is
//! dropped alone and listed in [`McpTools::dropped`] with the reason: one
//! odd tool should not cost the Agent the server's other tools, and the
//! host can show the warning.
//! Listing more than `MCP_TOOLS_MAX` tools or `MCP_TOOLS_PAGES_MAX` pages is
//! an error (a bound on the work of one listing).
//!
//! Credentials: the host's extra headers go on every request and nowhere
//! else. [`Outbound`]'s and [`McpConnection`]'s `Debug` show no header
//! value but the protocol's own, and every error message has any extra
//! header value (whole, or any long fragment of a token in it: see
//! `crate::redact`) replaced by `<redacted>`, even when a server echoes it.

pub mod hub;
mod tools;
mod wire;

#[cfg(test)]
mod tests;

pub use hub::{
    parse_servers, DroppedTool, Hub, McpTools, OwnTools, ServerConfig, ServerInfo, ServersError,
    Unavailable,
};

use crate::capability::{check_payload, validate_module_id};
use crate::limits::{
    MCP_EVENT_ID_BYTES_MAX, MCP_RESPONSE_BYTES_MAX, MCP_SERVER_REQUESTS_MAX,
    MCP_SESSION_ID_BYTES_MAX, MCP_SSE_RESUMES_MAX, MCP_SSE_RETRY_MS, MCP_SSE_RETRY_MS_MAX,
    MCP_TOOLS_MAX, MCP_TOOLS_PAGES_MAX,
};
use crate::model::Image;
use crate::outbound::Outbound;
use crate::redact::Secrets;
use crate::sse::{SseDecoder, SseError};
use serde_json::{json, Value};
use std::fmt;
use tools::ToolsBuilder;

/// The protocol revisions spoken, newest first: the client asks for the
/// first and accepts a server answering any of them; the Agent's own MCP
/// server (`crate::mcp_server`) serves them all.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// The protocol revision this client asks for.
pub const PROTOCOL_VERSION: &str = PROTOCOL_VERSIONS[0];

const ACCEPT: &str = "Accept";
const CONTENT_TYPE: &str = "Content-Type";
const VERSION_HEADER: &str = "MCP-Protocol-Version";
const SESSION_HEADER: &str = "Mcp-Session-Id";
const LAST_EVENT_ID: &str = "Last-Event-ID";

/// What the host got back for one [`Outbound`].
#[derive(Debug, Clone, Copy)]
pub struct McpResponse<'a> {
    pub status: u16,
    /// The `Content-Type` header, parameters included.
    pub content_type: Option<&'a str>,
    /// All response headers (names in any case).
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// A failed exchange. Messages never hold a credential (see the module
/// documentation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// A 3xx: redirects are refused (a credential must not follow one).
    #[error(
        "MCP server answered HTTP {status}: redirects are refused; configure the \
         server's final URL"
    )]
    Redirect { status: u16 },
    /// A 401 or 403: the server refused the configured credentials.
    #[error(
        "MCP server refused the credentials (HTTP {status}); check the headers \
         configured for it"
    )]
    Credentials { status: u16 },
    /// A 404 for the session id: `start()` again.
    #[error("MCP session expired (HTTP 404 for the session id); connect again")]
    SessionExpired,
    /// Any other non-2xx status, with the server's JSON-RPC error message
    /// when its body had one.
    #[error("MCP server answered HTTP {status}{}", after_colon(.detail))]
    Status { status: u16, detail: String },
    /// A JSON-RPC error response: the server's code and (bounded) message.
    #[error("MCP server error {code}: {message}")]
    Rpc { code: i64, message: String },
    /// A malformed, oversized or unexpected response; an unsupported
    /// protocol version.
    #[error("MCP protocol error: {0}")]
    Protocol(String),
    /// A call the connection's state or configuration does not allow.
    #[error("{0}")]
    Usage(String),
}

impl From<SseError> for McpError {
    /// Worded as a model stream's error (`provider stream: ...`); the text is
    /// stable.
    fn from(e: SseError) -> Self {
        protocol(format!("malformed event stream: provider stream: {e}"))
    }
}

/// `": detail"`, or nothing for an empty detail.
fn after_colon(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

impl McpError {
    fn map_text(self, f: impl Fn(String) -> String) -> McpError {
        match self {
            McpError::Status { status, detail } => McpError::Status {
                status,
                detail: f(detail),
            },
            McpError::Rpc { code, message } => McpError::Rpc {
                code,
                message: f(message),
            },
            McpError::Protocol(m) => McpError::Protocol(f(m)),
            McpError::Usage(m) => McpError::Usage(f(m)),
            other => other,
        }
    }
}

/// What to do after a handshake or listing response.
#[derive(Debug)]
pub enum Step {
    Send(Outbound),
    Ready(McpTools),
}

/// One `tools/call` to make; pass `id` back to
/// [`McpConnection::tool_result`] with its response. Its progress token is
/// its id.
#[derive(Debug)]
pub struct ToolCall {
    pub id: u64,
    pub request: Outbound,
}

/// What a server sends on one tool call's event stream, read as it
/// arrives (a JSON response carries nothing live): the
/// `notifications/progress` naming the call's token, the server's own
/// requests (each answered: [`CallChunk::replies`]), and whether the
/// call's response came. The stream's last event id and `retry:` carry
/// over to a resumption ([`McpConnection::resume`]). A stream this cannot
/// read further yields nothing more and is not resumed; its result is
/// still read whole ([`McpConnection::tool_result`]).
#[derive(Debug)]
pub struct CallProgress {
    id: u64,
    decoder: Option<SseDecoder>,
    answered: bool,
    resumes: usize,
    replies: usize,
    /// The call's own request: a reply goes the same way (URL, session,
    /// credentials).
    request: Outbound,
}

/// What one chunk of a call's stream held.
#[derive(Debug, Default)]
pub struct CallChunk {
    /// Each progress notification's params but the token
    /// (`{progress, total?, message?}`), as JSON.
    pub reports: Vec<String>,
    /// The answers to the server's requests, to POST now (the server may
    /// wait for one before it goes on): `ping` answered, anything else a
    /// JSON-RPC error -32601 (this client declares no sampling,
    /// elicitation or roots capability). At most `MCP_SERVER_REQUESTS_MAX`
    /// a call.
    pub replies: Vec<Outbound>,
    /// The call's response has arrived: the rest need not be read.
    pub answered: bool,
}

impl CallProgress {
    pub fn new(call: &ToolCall) -> CallProgress {
        CallProgress {
            id: call.id,
            decoder: Some(SseDecoder::default()),
            answered: false,
            resumes: 0,
            replies: 0,
            request: call.request.clone(),
        }
    }

    /// The next `chunk` of the stream.
    pub fn push(&mut self, chunk: &[u8]) -> CallChunk {
        let mut out = CallChunk::default();
        let events = self.decoder.as_mut().map(|d| d.push(chunk));
        let Some(Ok(events)) = events else {
            self.decoder = None;
            out.answered = self.answered;
            return out;
        };
        for event in events {
            if !matches!(event.event.as_deref(), None | Some("message")) {
                continue;
            }
            let Ok(Value::Object(mut message)) = serde_json::from_str(&event.data) else {
                continue;
            };
            let method = message.get("method").and_then(Value::as_str);
            match (method, message.get("id")) {
                (Some("notifications/progress"), None) => {
                    let Some(Value::Object(mut params)) = message.remove("params") else {
                        continue;
                    };
                    if params.remove("progressToken") == Some(json!(self.id)) {
                        out.reports.push(Value::Object(params).to_string());
                    }
                }
                (Some(method), Some(id @ (Value::String(_) | Value::Number(_))))
                    if self.replies < MCP_SERVER_REQUESTS_MAX =>
                {
                    self.replies += 1;
                    out.replies.push(self.reply(method, id));
                }
                // The call's response; an error with a null id counts too
                // (the server could not read the call's id: `wire`).
                (None, Some(id))
                    if id.as_u64() == Some(self.id)
                        || (id.is_null() && message.contains_key("error")) =>
                {
                    self.answered = true;
                }
                _ => {}
            }
        }
        out.answered = self.answered;
        out
    }

    /// Whether the call's stream was resumed: the server had accepted the
    /// call, so it must not be sent again (in a new session either).
    pub fn resumed(&self) -> bool {
        self.resumes > 0
    }

    /// The answer to the server's request `id`.
    fn reply(&self, method: &str, id: &Value) -> Outbound {
        let answer = if method == "ping" {
            json!({ "jsonrpc": "2.0", "id": id, "result": {} })
        } else {
            let message = format!(
                "method not found: this client declares no capability for `{}`",
                crate::text::shorten(method)
            );
            json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": message } })
        };
        Outbound {
            body: answer.to_string(),
            ..self.request.clone()
        }
    }
}

/// A GET that resumes a call's stream ([`McpConnection::resume`]).
#[derive(Debug)]
pub struct Resume {
    /// Wait this long first: the stream's `retry:`, bounded.
    pub after_ms: u64,
    pub request: Outbound,
}

#[derive(Debug)]
enum State {
    Idle,
    Initializing { id: u64 },
    Notifying { tools: bool },
    Listing(Box<Listing>),
    Ready,
    Expired,
}

#[derive(Debug)]
struct Listing {
    id: u64,
    pages: usize,
    tools: usize,
    builder: ToolsBuilder,
}

/// One connection to one MCP server (see the module documentation).
pub struct McpConnection {
    url: String,
    module_id: String,
    client_version: String,
    extra_headers: Vec<(String, String)>,
    /// The extra header values, for [`Self::scrub`].
    secrets: Secrets,
    state: State,
    next_id: u64,
    version: Option<&'static str>,
    session_id: Option<String>,
    /// The id of the current session's `initialize`: a response to an
    /// earlier request is from an earlier session.
    session_from: u64,
    server: ServerInfo,
    /// See [`McpConnection::tools_version`].
    tools_version: u64,
    /// `tools_version` when the last listing began.
    listing_version: u64,
    /// The server declared `tools.listChanged`.
    list_changed: bool,
}

impl fmt::Debug for McpConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.extra_headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("McpConnection")
            .field("url", &crate::outbound::without_query(&self.url))
            .field("module_id", &self.module_id)
            .field("extra_header_names", &names)
            .field("state", &self.state)
            .field("version", &self.version)
            .field("has_session", &self.session_id.is_some())
            .field("server", &self.server)
            .finish()
    }
}

impl McpConnection {
    /// A connection to the server at `url`, offered as module `mcp.<name>`.
    /// `extra_headers` (credentials) go on every request; their names must
    /// be HTTP tokens other than the protocol's own headers, their values
    /// free of control characters. Errors name the header, never its value.
    pub fn new(
        url: impl Into<String>,
        name: &str,
        client_version: impl Into<String>,
        extra_headers: Vec<(String, String)>,
    ) -> Result<McpConnection, McpError> {
        let module_id = format!("mcp.{name}");
        validate_module_id(&module_id)
            .map_err(|e| McpError::Usage(format!("MCP server name: {e}")))?;
        for (name, value) in &extra_headers {
            let token = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return Err(McpError::Usage(format!(
                    "extra header name `{}` is not an HTTP token",
                    crate::text::shorten(name)
                )));
            }
            let own = [
                ACCEPT,
                CONTENT_TYPE,
                VERSION_HEADER,
                SESSION_HEADER,
                LAST_EVENT_ID,
            ]
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name));
            if own {
                return Err(McpError::Usage(format!(
                    "extra header `{name}` is set by the MCP client itself"
                )));
            }
            if value.chars().any(|c| c.is_control()) {
                return Err(McpError::Usage(format!(
                    "extra header `{name}` has a control character in its value"
                )));
            }
        }
        let secrets = Secrets::new(extra_headers.iter().map(|(_, v)| v.as_str()));
        Ok(McpConnection {
            url: url.into(),
            module_id,
            client_version: client_version.into(),
            extra_headers,
            secrets,
            state: State::Idle,
            next_id: 1,
            version: None,
            session_id: None,
            session_from: 0,
            server: ServerInfo::default(),
            tools_version: 0,
            listing_version: 0,
            list_changed: false,
        })
    }

    /// The negotiated protocol version, once initialized.
    pub fn protocol_version(&self) -> Option<&'static str> {
        self.version
    }

    /// Whether the server assigned a session id.
    pub fn has_session(&self) -> bool {
        self.session_id.is_some()
    }

    /// Whether the connection is initialized: tools may be called and
    /// listed.
    pub fn is_ready(&self) -> bool {
        self.version.is_some() && matches!(self.state, State::Ready | State::Listing(_))
    }

    /// How many times the server's tools may have changed: each
    /// `notifications/tools/list_changed` seen on a response, and each
    /// session initialized.
    pub fn tools_version(&self) -> u64 {
        self.tools_version
    }

    /// The `initialize` request; (re)starts the connection from scratch.
    pub fn start(&mut self) -> Outbound {
        self.version = None;
        self.session_id = None;
        let id = self.take_id();
        self.session_from = id;
        self.state = State::Initializing { id };
        self.post(json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": { "name": "shiitake", "version": self.client_version },
            },
        }))
    }

    /// A fresh `tools/list` once ready (e.g. after the server's tools
    /// changed).
    pub fn list_tools(&mut self) -> Result<Outbound, McpError> {
        if !matches!(self.state, State::Ready) {
            return Err(McpError::Usage(
                "MCP connection is not ready to list tools".into(),
            ));
        }
        let builder = ToolsBuilder::new(self.module_id.clone());
        self.listing_version = self.tools_version;
        Ok(self.list_page(None, 0, 0, builder))
    }

    /// The response to the last request of `start`, a `Step::Send` or
    /// `list_tools`.
    pub fn on_response(&mut self, response: McpResponse<'_>) -> Result<Step, McpError> {
        let was_listing = matches!(self.state, State::Listing(_));
        let outcome = self.advance(response);
        if outcome.is_err() && !matches!(self.state, State::Expired) {
            // A failed handshake leaves nothing to resume; a failed listing
            // leaves a ready connection that may list again.
            self.state = if was_listing && self.version.is_some() {
                State::Ready
            } else {
                State::Idle
            };
        }
        outcome.map_err(|e| self.scrub(e))
    }

    fn advance(&mut self, response: McpResponse<'_>) -> Result<Step, McpError> {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Initializing { id } => {
                let result = self.exchange(Some(id), &response)?;
                let tools = self.on_initialize(&result, &response)?;
                self.state = State::Notifying { tools };
                Ok(Step::Send(self.post(json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/initialized",
                }))))
            }
            State::Notifying { tools } => {
                self.exchange(None, &response)?;
                let builder = ToolsBuilder::new(self.module_id.clone());
                self.listing_version = self.tools_version;
                if tools {
                    Ok(Step::Send(self.list_page(None, 0, 0, builder)))
                } else {
                    // No `tools` capability: nothing to list.
                    self.state = State::Ready;
                    self.finish(builder)
                }
            }
            State::Listing(listing) => {
                let Listing {
                    id,
                    pages,
                    mut tools,
                    mut builder,
                } = *listing;
                let result = self.exchange(Some(id), &response)?;
                let page = result
                    .get("tools")
                    .and_then(Value::as_array)
                    .ok_or_else(|| protocol("tools/list result has no `tools` array"))?;
                if tools + page.len() > MCP_TOOLS_MAX {
                    return Err(protocol(format!(
                        "server lists more than {MCP_TOOLS_MAX} tools"
                    )));
                }
                for tool in page {
                    builder.push(tools, tool);
                    tools += 1;
                }
                match result.get("nextCursor") {
                    None | Some(Value::Null) => {
                        self.state = State::Ready;
                        self.finish(builder)
                    }
                    Some(Value::String(cursor)) => {
                        if pages + 1 >= MCP_TOOLS_PAGES_MAX {
                            return Err(protocol(format!(
                                "server lists tools over more than {MCP_TOOLS_PAGES_MAX} pages"
                            )));
                        }
                        Ok(Step::Send(self.list_page(
                            Some(cursor),
                            pages + 1,
                            tools,
                            builder,
                        )))
                    }
                    Some(_) => Err(protocol("tools/list `nextCursor` is not a string")),
                }
            }
            state @ (State::Idle | State::Ready | State::Expired) => {
                self.state = state;
                Err(McpError::Usage(
                    "MCP connection expects no handshake or listing response".into(),
                ))
            }
        }
    }

    fn finish(&self, builder: ToolsBuilder) -> Result<Step, McpError> {
        let (module, dropped) = builder
            .finish()
            .map_err(|e| protocol(format!("tools do not form a module: {e}")))?;
        Ok(Step::Ready(McpTools {
            server: self.server.clone(),
            tools_version: self.listing_version,
            list_changed: self.list_changed,
            module,
            dropped,
        }))
    }

    /// Checks the initialize result and takes the session id; whether the
    /// server offers tools.
    fn on_initialize(
        &mut self,
        result: &Value,
        response: &McpResponse<'_>,
    ) -> Result<bool, McpError> {
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| protocol("initialize result has no `protocolVersion`"))?;
        let Some(known) = PROTOCOL_VERSIONS.iter().find(|v| **v == version) else {
            return Err(protocol(format!(
                "server speaks protocol version `{}`; this client supports {}",
                crate::text::shorten(version),
                PROTOCOL_VERSIONS.join(", ")
            )));
        };
        self.version = Some(known);
        let session = response
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(SESSION_HEADER));
        if let Some((_, id)) = session {
            let visible = id.bytes().all(|b| (0x21..=0x7e).contains(&b));
            if id.is_empty() || id.len() > MCP_SESSION_ID_BYTES_MAX || !visible {
                self.version = None;
                return Err(protocol(format!(
                    "server's {SESSION_HEADER} is not 1 to {MCP_SESSION_ID_BYTES_MAX} \
                     visible ASCII characters"
                )));
            }
            self.session_id = Some(id.clone());
        }
        let info = result.get("serverInfo");
        let text = |key: &str| {
            let mut s = info
                .and_then(|i| i.get(key))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            crate::text::truncate(&mut s, 256);
            s
        };
        self.server = ServerInfo {
            name: text("name"),
            version: text("version"),
        };
        // A new session: the tools listed in another may have changed.
        self.tools_version += 1;
        let tools = result
            .get("capabilities")
            .and_then(|c| c.get("tools"))
            .filter(|t| !t.is_null());
        self.list_changed = tools
            .and_then(|t| t.get("listChanged"))
            .and_then(Value::as_bool)
            == Some(true);
        Ok(tools.is_some())
    }

    /// A `tools/call` request for the tool's source name (as listed).
    /// `arguments` must be an object within the capability payload bounds.
    pub fn call_tool(&mut self, name: &str, arguments: &Value) -> Result<ToolCall, McpError> {
        if self.version.is_none() || !matches!(self.state, State::Ready | State::Listing(_)) {
            return Err(McpError::Usage(
                "MCP connection is not initialized; call tools once it is ready".into(),
            ));
        }
        if !arguments.is_object() {
            return Err(McpError::Usage(
                "tool arguments must be a JSON object".into(),
            ));
        }
        check_payload(arguments).map_err(|e| McpError::Usage(format!("tool arguments: {e}")))?;
        let id = self.take_id();
        let request = self.post(json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": { "name": name, "arguments": arguments, "_meta": { "progressToken": id } },
        }));
        Ok(ToolCall { id, request })
    }

    /// The result of tool call `id`: its `structuredContent` when it has one
    /// and `isError` is not true, else `{"isError": bool, "content": [...]}`
    /// (content as returned, but image blocks: their data is taken out to
    /// the images beside it, which the model sees), within the capability
    /// payload bounds.
    pub fn tool_result(
        &mut self,
        id: u64,
        response: McpResponse<'_>,
    ) -> Result<(Value, Vec<Image>), McpError> {
        let outcome = self
            .exchange(Some(id), &response)
            .and_then(tools::call_result);
        outcome.map_err(|e| self.scrub(e))
    }

    /// The resumption of a tool call's event stream that ended without
    /// the call's response (a server may close it at any time once it
    /// sent an event id: SEP-1699): a GET with `Last-Event-ID`, after the
    /// stream's `retry:`. `None` when `response` is no such stream, the
    /// stream gave no usable event id, or the call was resumed
    /// `MCP_SSE_RESUMES_MAX` times: [`Self::tool_result`] then says why.
    pub fn resume(&self, progress: &mut CallProgress, response: McpResponse<'_>) -> Option<Resume> {
        let stream = response.content_type.is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
        let ended = (200..300).contains(&response.status)
            && stream
            && !progress.answered
            && response.body.len() <= MCP_RESPONSE_BYTES_MAX
            && progress.resumes < MCP_SSE_RESUMES_MAX
            && self.version.is_some();
        let decoder = progress.decoder.as_mut().filter(|_| ended)?;
        let last = decoder.last_event_id().filter(|id| {
            id.len() <= MCP_EVENT_ID_BYTES_MAX && id.bytes().all(|b| (0x20..=0x7e).contains(&b))
        })?;
        let mut headers = vec![
            (ACCEPT.to_owned(), "text/event-stream".to_owned()),
            (LAST_EVENT_ID.to_owned(), last.to_owned()),
        ];
        headers.extend(self.common_headers());
        let after_ms = decoder
            .retry_ms()
            .unwrap_or(MCP_SSE_RETRY_MS)
            .min(MCP_SSE_RETRY_MS_MAX);
        decoder.reconnected();
        progress.resumes += 1;
        Some(Resume {
            after_ms,
            request: Outbound {
                method: "GET".to_owned(),
                url: self.url.clone(),
                headers,
                body: String::new(),
            },
        })
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn list_page(
        &mut self,
        cursor: Option<&str>,
        pages: usize,
        tools: usize,
        builder: ToolsBuilder,
    ) -> Outbound {
        let id = self.take_id();
        let params = match cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        self.state = State::Listing(Box::new(Listing {
            id,
            pages,
            tools,
            builder,
        }));
        self.post(json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/list",
            "params": params,
        }))
    }

    fn post(&self, body: Value) -> Outbound {
        let mut headers = vec![
            (
                ACCEPT.to_owned(),
                "application/json, text/event-stream".to_owned(),
            ),
            (CONTENT_TYPE.to_owned(), "application/json".to_owned()),
        ];
        headers.extend(self.common_headers());
        Outbound {
            method: "POST".to_owned(),
            url: self.url.clone(),
            headers,
            body: body.to_string(),
        }
    }

    /// The negotiated version, the session and the host's extra headers.
    fn common_headers(&self) -> Vec<(String, String)> {
        let mut headers = Vec::new();
        if let Some(version) = self.version {
            headers.push((VERSION_HEADER.to_owned(), version.to_owned()));
        }
        if let Some(session) = &self.session_id {
            headers.push((SESSION_HEADER.to_owned(), session.clone()));
        }
        headers.extend(self.extra_headers.iter().cloned());
        headers
    }

    /// Status, size and framing of one response: the result of request
    /// `id`, or `Null` for a notification (`id` None).
    fn exchange(&mut self, id: Option<u64>, response: &McpResponse<'_>) -> Result<Value, McpError> {
        let status = response.status;
        if (300..400).contains(&status) {
            return Err(McpError::Redirect { status });
        }
        if status == 401 || status == 403 {
            return Err(McpError::Credentials { status });
        }
        if response.body.len() > MCP_RESPONSE_BYTES_MAX {
            return Err(protocol(format!(
                "response exceeds {MCP_RESPONSE_BYTES_MAX} bytes"
            )));
        }
        if status == 404 && id.is_some_and(|id| id < self.session_from) {
            // The end of an earlier session, already replaced.
            return Err(McpError::SessionExpired);
        }
        if status == 404 && self.session_id.is_some() {
            self.session_id = None;
            self.version = None;
            self.state = State::Expired;
            return Err(McpError::SessionExpired);
        }
        if !(200..300).contains(&status) {
            return Err(McpError::Status {
                status,
                detail: wire::error_detail(response.body),
            });
        }
        let Some(id) = id else {
            return Ok(Value::Null);
        };
        let mut tools_changed = false;
        let result = wire::result_of(id, response, &mut tools_changed);
        if tools_changed {
            self.tools_version += 1;
        }
        result
    }

    /// Redacts every extra header value (whole, and any long fragment of
    /// one of its tokens: `crate::redact`) in an error's text.
    fn scrub(&self, error: McpError) -> McpError {
        error.map_text(|text| self.secrets.redact(&text))
    }
}

fn protocol(message: impl Into<String>) -> McpError {
    McpError::Protocol(message.into())
}
