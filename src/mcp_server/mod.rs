//! An Agent as an MCP server: `POST /mcp` speaks MCP's Streamable HTTP
//! transport (`docs/mcp-server.md`), sans-IO. [`handle`] checks the
//! transport's rules and decodes one JSON-RPC message. A `tools/call` is
//! mapped onto the HTTP route that does the same ([`Call::route`]), which
//! the host serves through the core like any request: host metadata,
//! identity, bounds and refusals are that route's, and a settlement wait
//! parks as `GET /sessions/:id/settlement` does. [`Call::answer`] turns
//! the route's response into the tool's result.
//!
//! Stateless: no `Mcp-Session-Id`, no server-initiated stream (GET is a
//! 405), every answer one `application/json` response.

use crate::error::ApiError;
use crate::http::{HttpRequest, HttpResponse};
use crate::limits::{
    BODY_BYTES_MAX, LIST_PAGE_SESSIONS_MAX, MCP_ALLOWED_HOSTS_MAX, READ_PAGE_MESSAGES_MAX,
    SETTLEMENT_TIMEOUT_MS_MAX,
};
use crate::rpc::{self, Message, RpcError};
use crate::text::{shorten, validate_session_id};
use serde_json::{json, Map, Value};

/// The protocol versions served (the client's, `crate::mcp`): an
/// `initialize` naming another is answered with the newest (MCP's
/// negotiation).
use crate::mcp::PROTOCOL_VERSIONS;

/// What an MCP client's model reads first.
const INSTRUCTIONS: &str = "A durable Agent. Each Session is a conversation: `prompt` admits \
    a prompt under your requestId (sending the same requestId again answers the same receipt, \
    never a second turn) and answers its commandId; `wait_for_settlement` waits for that \
    command's outcome; `read_session` pages the transcript.";

/// One `/mcp` request as the host hands it over.
pub struct Request<'a> {
    pub http: &'a HttpRequest,
    /// The `Origin` header, when the caller sent one (a browser does).
    pub origin: Option<&'a str>,
    /// The `MCP-Protocol-Version` header, when sent.
    pub protocol_version: Option<&'a str>,
    /// The request URL's authority, `host[:port]`.
    pub authority: &'a str,
    /// The host names a browser may reach `/mcp` at ([`allowed_hosts`]).
    pub allowed_hosts: &'a [String],
}

/// What to answer.
#[derive(Debug)]
pub enum Answer {
    /// One JSON-RPC response (a result or an error), `application/json`,
    /// 200.
    Json(String),
    /// The transport refusing the input: a JSON-RPC error response,
    /// `application/json`, with this 4xx status.
    Failed { status: u16, body: String },
    /// A notification: `202`, no body.
    Accepted,
    /// An HTTP-level refusal with the contract's error body (405, 400
    /// `invalid_query`, 413).
    Refused(ApiError),
}

/// What [`handle`] decided.
#[derive(Debug)]
pub enum Step {
    /// Answered without the store.
    Answer(Answer),
    /// A tool call: serve [`Call::route`] as any request, then answer
    /// [`Call::answer`] of its response.
    Call(Call),
}

/// A tool call, mapped onto its route.
#[derive(Debug)]
pub struct Call {
    id: Value,
    /// The route request that carries the call out, with the MCP request's
    /// host metadata.
    pub route: HttpRequest,
    /// The member the route's answer is put in (`wait_for_settlement`: a
    /// settlement or `null`, and `structuredContent` is an object).
    wrap: Option<&'static str>,
}

/// The JSON type of a tool argument.
#[derive(Clone, Copy)]
enum Kind {
    String,
    /// A non-negative integer; `min..=max` is stated in the schema and
    /// checked by the route (its refusal, its clamp).
    Integer {
        min: u64,
        max: u64,
    },
}

struct Param {
    name: &'static str,
    kind: Kind,
    required: bool,
    description: &'static str,
}

/// A tool and the route it maps onto: `method /sessions[/:sessionId<suffix>]`,
/// its other arguments as the query (GET) or the body (POST, with `type`
/// when it is a command).
struct Tool {
    name: &'static str,
    description: &'static str,
    params: &'static [Param],
    method: &'static str,
    /// `sessionId` is the route's path segment, followed by this.
    session_path: Option<&'static str>,
    command: Option<&'static str>,
    read_only: bool,
    wrap: Option<&'static str>,
}

const SESSION_ID: Param = Param {
    name: "sessionId",
    kind: Kind::String,
    required: true,
    description: "The Session: 1..=128 bytes of [A-Za-z0-9._:-].",
};

const COMMAND_ID: Param = Param {
    name: "commandId",
    kind: Kind::String,
    required: true,
    description: "The command, as `prompt` answered it.",
};

const TOOLS: &[Tool] = &[
    Tool {
        name: "list_sessions",
        description: "The Agent's Sessions, newest first, a page at a time.",
        params: &[
            Param {
                name: "limit",
                kind: Kind::Integer {
                    min: 1,
                    max: LIST_PAGE_SESSIONS_MAX as u64,
                },
                required: false,
                description: "Sessions per page (default 50).",
            },
            Param {
                name: "cursor",
                kind: Kind::String,
                required: false,
                description: "The `cursor` a previous page answered.",
            },
        ],
        method: "GET",
        session_path: None,
        command: None,
        read_only: true,
        wrap: None,
    },
    Tool {
        name: "create_session",
        description: "Creates a Session and answers its sessionId.",
        params: &[Param {
            name: "sessionId",
            kind: Kind::String,
            required: false,
            description: "The new Session's id (generated when omitted).",
        }],
        method: "POST",
        session_path: None,
        command: None,
        read_only: false,
        wrap: None,
    },
    Tool {
        name: "prompt",
        description: "Admits a prompt into a Session's queue and answers its receipt \
            {status, commandId} once it is durable; the turn runs after the ones before it. \
            Sending the same requestId and text again answers the same receipt and never runs \
            it twice: retry with the same requestId.",
        params: &[
            SESSION_ID,
            Param {
                name: "requestId",
                kind: Kind::String,
                required: true,
                description: "Your id for this prompt (1..=256 bytes), the same on a retry.",
            },
            Param {
                name: "text",
                kind: Kind::String,
                required: true,
                description: "The prompt (at most 65,536 bytes).",
            },
        ],
        method: "POST",
        session_path: Some("/commands"),
        command: Some("prompt"),
        read_only: false,
        wrap: None,
    },
    Tool {
        name: "read_session",
        description: "A page of a Session's transcript, newest last, with its pending \
            prompts and its running turn.",
        params: &[
            SESSION_ID,
            Param {
                name: "limit",
                kind: Kind::Integer {
                    min: 1,
                    max: READ_PAGE_MESSAGES_MAX as u64,
                },
                required: false,
                description: "Messages per page (default 50).",
            },
            Param {
                name: "before",
                kind: Kind::String,
                required: false,
                description: "The `cursor` a previous page answered: the messages before it.",
            },
        ],
        method: "GET",
        session_path: Some(""),
        command: None,
        read_only: true,
        wrap: None,
    },
    Tool {
        name: "wait_for_settlement",
        description: "Waits until a command settles (completed, failed, cancelled or \
            interrupted) and answers {settlement}: its outcome, or null if it has not \
            settled when timeoutMs passes (call again to keep waiting).",
        params: &[
            SESSION_ID,
            COMMAND_ID,
            Param {
                name: "timeoutMs",
                kind: Kind::Integer {
                    min: 0,
                    max: SETTLEMENT_TIMEOUT_MS_MAX,
                },
                required: false,
                description: "How long to wait, in ms (default 0: look once; a longer wait is \
                    cut to 30000).",
            },
        ],
        method: "GET",
        session_path: Some("/settlement"),
        command: None,
        read_only: true,
        wrap: Some("settlement"),
    },
    Tool {
        name: "cancel",
        description: "Cancels a command: a queued prompt is withdrawn ({status: \
            \"cancelled\", text}), a running turn is stopped; {status: \"too_late\"} once it \
            has settled.",
        params: &[SESSION_ID, COMMAND_ID],
        method: "POST",
        session_path: Some("/commands"),
        command: Some("cancel"),
        read_only: false,
        wrap: None,
    },
];

/// Serves one `/mcp` request up to the route a tool call maps onto.
pub fn handle(req: &Request<'_>) -> Step {
    let http = req.http;
    // The transport's Origin rule: a page of another site must not drive
    // the Agent through the user's browser; nor a page of a name rebound
    // to this server (DNS rebinding: Host and Origin both name the
    // attacker), so a browser's request must also name an allowed host.
    if let Some(origin) = req.origin {
        let refused = if !same_authority(origin, req.authority) {
            Some(format!(
                "Origin `{}` is not this server's ({}): a page of another site is refused",
                shorten(origin),
                shorten(req.authority)
            ))
        } else if !req
            .allowed_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host_of(req.authority)))
        {
            Some(format!(
                "host `{}` is not one this server is reached at by a browser ({}; \
                 SHIITAKE_MCP_ALLOWED_HOSTS): a rebound name is refused",
                shorten(host_of(req.authority)),
                req.allowed_hosts.join(", ")
            ))
        } else {
            None
        };
        if let Some(message) = refused {
            return failed(
                403,
                &Value::Null,
                &RpcError::new(rpc::INVALID_REQUEST, message),
            );
        }
    }
    if http.method != "POST" {
        // No server-initiated stream (GET) and no transport session (DELETE).
        return Step::Answer(Answer::Refused(ApiError::MethodNotAllowed("POST")));
    }
    if !http.query.is_empty() {
        return Step::Answer(Answer::Refused(ApiError::InvalidQuery(
            "/mcp takes no query string".into(),
        )));
    }
    if http.body.len() > BODY_BYTES_MAX {
        return Step::Answer(Answer::Refused(ApiError::PayloadTooLarge {
            bytes_max: BODY_BYTES_MAX,
        }));
    }
    if let Some(version) = req.protocol_version {
        if !PROTOCOL_VERSIONS.contains(&version) {
            return failed(
                400,
                &Value::Null,
                &RpcError::new(
                    rpc::INVALID_REQUEST,
                    format!(
                        "MCP-Protocol-Version `{}` is not supported; supported: {}",
                        shorten(version),
                        PROTOCOL_VERSIONS.join(", ")
                    ),
                ),
            );
        }
    }
    match rpc::decode(&http.body) {
        Err(refused) => failed(refused.error.http_status(), &refused.id, &refused.error),
        // `notifications/initialized`, `notifications/cancelled` (a call
        // is answered in its own response: nothing to stop), any other.
        Ok(Message::Notification { .. }) => Step::Answer(Answer::Accepted),
        Ok(Message::Request { id, method, params }) => {
            let answered = match method.as_str() {
                "initialize" => initialize(&params),
                "ping" => Ok(json!({})),
                "tools/list" => Ok(tools()),
                "tools/call" => return call(http, id, &params),
                other => Err(RpcError::new(
                    rpc::METHOD_NOT_FOUND,
                    format!(
                        "method `{}` is not served; served: initialize, ping, tools/list, \
                         tools/call, and notifications",
                        shorten(other)
                    ),
                )),
            };
            match answered {
                Ok(result) => Step::Answer(Answer::Json(rpc::response(&id, result))),
                Err(e) => rpc_error(&id, &e),
            }
        }
    }
}

/// An error answer to a request the transport accepted: a JSON-RPC error
/// in a 200, as MCP's Streamable HTTP answers one (an SDK client surfaces
/// it as the call's error; a 4xx is the transport refusing the input).
fn rpc_error(id: &Value, error: &RpcError) -> Step {
    Step::Answer(Answer::Json(rpc::error(id, error)))
}

/// The transport refusing the input: an HTTP error status whose body is a
/// JSON-RPC error.
fn failed(status: u16, id: &Value, error: &RpcError) -> Step {
    Step::Answer(Answer::Failed {
        status,
        body: rpc::error(id, error),
    })
}

/// The host names allowed by default: loopback's.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The host names a browser may reach `/mcp` at: `SHIITAKE_MCP_ALLOWED_HOSTS`
/// (comma-separated names, no port, an IPv6 address in brackets; at most
/// `MCP_ALLOWED_HOSTS_MAX`), else [`LOOPBACK_HOSTS`]. Or why the setting is
/// refused.
pub fn allowed_hosts(setting: Option<&str>) -> Result<Vec<String>, String> {
    let Some(setting) = setting else {
        return Ok(LOOPBACK_HOSTS.map(str::to_owned).to_vec());
    };
    let names: Vec<String> = setting
        .split(',')
        .map(|name| name.trim().to_ascii_lowercase())
        .collect();
    if names.len() > MCP_ALLOWED_HOSTS_MAX {
        return Err(format!(
            "SHIITAKE_MCP_ALLOWED_HOSTS: {} names; at most {MCP_ALLOWED_HOSTS_MAX}",
            names.len()
        ));
    }
    for name in &names {
        let bracketed = name.starts_with('[') && name.ends_with(']') && name.len() > 2;
        let plain = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        let ipv6 = bracketed
            && name[1..name.len() - 1]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        if !(plain || ipv6) {
            return Err(format!(
                "SHIITAKE_MCP_ALLOWED_HOSTS: `{}` is not a host name (a name or address \
                 without port, an IPv6 address in brackets)",
                shorten(name)
            ));
        }
    }
    Ok(names)
}

/// The host of `authority` (`host[:port]`), its port left out.
fn host_of(authority: &str) -> &str {
    match authority.rfind(':') {
        // Not inside an IPv6 address's brackets.
        Some(i) if !authority[i..].contains(']') => &authority[..i],
        _ => authority,
    }
}

/// Whether `origin` (`scheme://host[:port]`) names `authority`. A browser
/// leaves a default port out of both; `null` (an opaque origin) never
/// matches.
fn same_authority(origin: &str, authority: &str) -> bool {
    origin
        .split_once("://")
        .is_some_and(|(_, host)| host.eq_ignore_ascii_case(authority))
}

fn initialize(params: &Value) -> Result<Value, RpcError> {
    let Some(asked) = params["protocolVersion"].as_str() else {
        return Err(RpcError::params(
            "params.protocolVersion: a string is required",
        ));
    };
    let version = PROTOCOL_VERSIONS
        .into_iter()
        .find(|v| *v == asked)
        .unwrap_or(PROTOCOL_VERSIONS[0]);
    Ok(json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false } },
        "serverInfo": { "name": "shiitake", "version": env!("CARGO_PKG_VERSION") },
        "instructions": INSTRUCTIONS,
    }))
}

/// `tools/list`: every tool in one page, its `inputSchema` written from
/// the table [`check`] enforces.
fn tools() -> Value {
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|tool| {
            let mut properties = Map::new();
            for p in tool.params {
                let mut schema = match p.kind {
                    Kind::String => json!({ "type": "string" }),
                    Kind::Integer { min, max } => {
                        json!({ "type": "integer", "minimum": min, "maximum": max })
                    }
                };
                schema["description"] = p.description.into();
                properties.insert(p.name.into(), schema);
            }
            let required: Vec<&str> = tool
                .params
                .iter()
                .filter(|p| p.required)
                .map(|p| p.name)
                .collect();
            json!({
                "name": tool.name,
                "description": tool.description,
                "inputSchema": {
                    "type": "object",
                    "properties": properties,
                    "required": required,
                    "additionalProperties": false,
                },
                "annotations": {
                    "readOnlyHint": tool.read_only,
                    "destructiveHint": tool.command == Some("cancel"),
                    "idempotentHint": tool.read_only || tool.command == Some("prompt"),
                    "openWorldHint": false,
                },
            })
        })
        .collect();
    json!({ "tools": tools })
}

/// The arguments' JSON types against the tool's table: a required one
/// missing, an unknown one or a wrong type is refused like a route's
/// closed body (400 `invalid_request` naming the argument). Values are the
/// route's to check.
fn check(tool: &Tool, args: &Map<String, Value>) -> Result<(), ApiError> {
    let refuse = |m: String| Err(ApiError::InvalidRequest(m));
    if let Some(unknown) = args
        .keys()
        .find(|k| !tool.params.iter().any(|p| p.name == *k))
    {
        let names: Vec<&str> = tool.params.iter().map(|p| p.name).collect();
        return refuse(format!(
            "arguments.{}: unknown; {} takes {}",
            shorten(unknown),
            tool.name,
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        ));
    }
    for p in tool.params {
        match (args.get(p.name), p.kind) {
            (None, _) if !p.required => {}
            (None, _) => return refuse(format!("arguments.{}: required", p.name)),
            (Some(Value::String(_)), Kind::String) => {}
            (Some(v), Kind::Integer { .. }) if v.is_u64() => {}
            (Some(_), Kind::String) => {
                return refuse(format!("arguments.{}: a string is required", p.name))
            }
            (Some(_), Kind::Integer { min, max }) => {
                return refuse(format!(
                    "arguments.{}: an integer in {min}..={max} is required",
                    p.name
                ))
            }
        }
    }
    Ok(())
}

/// `tools/call {name, arguments}`: the call mapped onto its route.
fn call(http: &HttpRequest, id: Value, params: &Value) -> Step {
    let Some(name) = params["name"].as_str() else {
        return rpc_error(&id, &RpcError::params("params.name: a string is required"));
    };
    let Some(tool) = TOOLS.iter().find(|t| t.name == name) else {
        let names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
        return rpc_error(
            &id,
            &RpcError::params(format!(
                "unknown tool `{}`; tools: {}",
                shorten(name),
                names.join(", ")
            )),
        );
    };
    let empty = Map::new();
    let args = match params.get("arguments") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(args)) => args,
        Some(_) => {
            return rpc_error(
                &id,
                &RpcError::params("params.arguments: an object is required"),
            )
        }
    };
    match route(tool, http, args) {
        Ok(route) => Step::Call(Call {
            id,
            route,
            wrap: tool.wrap,
        }),
        Err(e) => Step::Answer(Answer::Json(rpc::response(&id, refusal(&e)))),
    }
}

/// The route request carrying the call out, with the MCP request's host
/// metadata.
fn route(
    tool: &Tool,
    http: &HttpRequest,
    args: &Map<String, Value>,
) -> Result<HttpRequest, ApiError> {
    check(tool, args)?;
    let path = match tool.session_path {
        None => "/sessions".to_owned(),
        Some(suffix) => {
            // A path segment: checked before it is one, as the route checks it.
            let id = args["sessionId"].as_str().unwrap_or_default();
            validate_session_id(id)?;
            format!("/sessions/{id}{suffix}")
        }
    };
    let rest = args
        .iter()
        .filter(|(k, _)| tool.session_path.is_none() || *k != "sessionId");
    let (query, body) = if tool.method == "GET" {
        let pairs: Vec<String> = rest
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={}", percent_encode(s)),
                other => format!("{k}={other}"),
            })
            .collect();
        (pairs.join("&"), Vec::new())
    } else {
        let mut body: Map<String, Value> = rest.map(|(k, v)| (k.clone(), v.clone())).collect();
        if let Some(command) = tool.command {
            body.insert("type".into(), command.into());
        }
        (String::new(), Value::Object(body).to_string().into_bytes())
    };
    Ok(HttpRequest {
        method: tool.method.into(),
        path,
        query,
        meta: http.meta.clone(),
        body,
        waited: false,
    })
}

/// A query value: every byte but the unreserved ones as `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A refusal as the tool's error result: the route's status, code and
/// message.
fn refusal(e: &ApiError) -> Value {
    error_result(e.status(), e.code(), &e.to_string())
}

fn error_result(status: u16, code: &str, message: &str) -> Value {
    json!({
        "content": [{ "type": "text", "text": format!("{status} {code}: {message}") }],
        "structuredContent": { "error": { "code": code, "message": message, "status": status } },
        "isError": true,
    })
}

impl Call {
    /// The tool's result from its route's response: a 2xx answer as
    /// `structuredContent` and as its JSON text, any other as an error
    /// result naming the route's code and message.
    pub fn answer(&self, response: &HttpResponse) -> Answer {
        let body = response.body.as_deref().unwrap_or("null");
        let result = if (200..300).contains(&response.status) {
            // Spliced as text: a page of messages is not parsed again.
            let structured = match self.wrap {
                Some(key) => format!("{{{}:{body}}}", Value::from(key)),
                None => body.to_owned(),
            };
            let text = Value::from(structured.as_str());
            format!(
                r#"{{"content":[{{"type":"text","text":{text}}}],"structuredContent":{structured}}}"#
            )
        } else {
            let body: Value = serde_json::from_str(body).unwrap_or(Value::Null);
            let error = &body["error"];
            error_result(
                response.status,
                error["code"].as_str().unwrap_or("internal_error"),
                error["message"].as_str().unwrap_or(""),
            )
            .to_string()
        };
        Answer::Json(rpc::response(&self.id, result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_matches_only_its_own_authority() {
        assert!(same_authority("http://localhost:8787", "localhost:8787"));
        assert!(same_authority(
            "https://Agents.Example.com",
            "agents.example.com"
        ));
        assert!(!same_authority("http://localhost:8788", "localhost:8787"));
        assert!(!same_authority("http://evil.example", "localhost"));
        assert!(!same_authority("null", "localhost"));
    }

    #[test]
    fn allowed_hosts_default_to_loopback_and_are_checked() {
        assert_eq!(allowed_hosts(None).unwrap(), LOOPBACK_HOSTS);
        assert_eq!(
            allowed_hosts(Some(" Agents.Example.com,[::1] ,10.0.0.2")).unwrap(),
            ["agents.example.com", "[::1]", "10.0.0.2"]
        );
        for bad in [
            "",
            "a,,b",
            "localhost:8787",
            "http://x",
            "[]",
            "[zz]",
            "a b",
        ] {
            let e = allowed_hosts(Some(bad)).unwrap_err();
            assert!(e.contains("SHIITAKE_MCP_ALLOWED_HOSTS"), "{bad}: {e}");
        }
        let many = vec!["a"; MCP_ALLOWED_HOSTS_MAX + 1].join(",");
        assert!(allowed_hosts(Some(&many)).unwrap_err().contains("at most"));
        assert_eq!(host_of("localhost:8787"), "localhost");
        assert_eq!(host_of("[::1]:8787"), "[::1]");
        assert_eq!(host_of("[::1]"), "[::1]");
        assert_eq!(host_of("agents.example.com"), "agents.example.com");
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(percent_encode("a-Z_0.~"), "a-Z_0.~");
        assert_eq!(percent_encode("a b&c=d+é"), "a%20b%26c%3Dd%2B%C3%A9");
    }

    /// The schemas `tools/list` states are the table `check` enforces.
    #[test]
    fn every_tool_states_a_closed_schema_with_its_required_arguments() {
        let listed = tools();
        let tools = listed["tools"].as_array().unwrap();
        assert_eq!(tools.len(), TOOLS.len());
        for (listed, tool) in tools.iter().zip(TOOLS) {
            let schema = &listed["inputSchema"];
            assert_eq!(schema["additionalProperties"], false);
            for p in tool.params {
                assert!(schema["properties"][p.name].is_object(), "{}", p.name);
                let required = schema["required"].as_array().unwrap();
                assert_eq!(required.contains(&p.name.into()), p.required);
            }
        }
    }
}
