//! ACP, the Agent Client Protocol (JSON-RPC 2.0), over HTTP (`POST /acp`,
//! `docs/acp.md`), sans-IO: [`handle`] decodes one message, runs it against
//! the Session rules and says what to answer; the host sends it and, for a
//! prompt, feeds the Session's published events to the answer's
//! [`Follow`] until the command settles.
//!
//! The mapping: an ACP `sessionId` is a Session id; `session/new` creates a
//! Session marked as hosted (`model_choice::hosted`: its turns use the
//! Agent and Team model layers, never a person's last switch);
//! `session/load` marks an existing one and replays its newest page;
//! `session/prompt` admits a `followUp` prompt with the request's host
//! metadata and streams that command; `session/cancel` is `abort` under the
//! request's metadata (identity rules included).

pub mod updates;

use crate::agent;
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::http::{admission_effects, cancellation_effects, Effects, HttpRequest};
use crate::limits::{ACP_PROMPT_BLOCKS_MAX, BODY_BYTES_MAX, READ_PAGE_MESSAGES_MAX};
use crate::model::Image;
use crate::model_choice;
use crate::rpc::{self, Message, RpcError};
use crate::run::cancel;
use crate::session::command::{validate_prompt, Delivery, Prompt};
use crate::session::{admission, read};
use serde_json::{json, Value};
pub use updates::Follow;

/// The ACP protocol version served (ACP v1).
pub const PROTOCOL_VERSION: u64 = 1;

/// The `_meta` key of a `session/prompt` carrying the caller's requestId
/// (retries with the same one replay the same command).
pub const REQUEST_ID_META: &str = "shiitake/requestId";

/// What to answer.
#[derive(Debug)]
pub enum Answer {
    /// One JSON-RPC response, `application/json`, 200.
    Json(String),
    /// One JSON-RPC error response, `application/json`, with the HTTP
    /// status of its cause (`RpcError::http_status`).
    Failed { status: u16, body: String },
    /// A notification was carried out: `202`, no body.
    Accepted,
    /// An HTTP-level refusal (the contract's error body): a request that is
    /// not an ACP message at all, or a notification the runtime refused.
    Refused(ApiError),
    /// `text/event-stream`: `messages` first (each one SSE event), then,
    /// with `follow`, what it makes of the Session's events until it is
    /// done.
    Stream {
        messages: Vec<String>,
        follow: Option<Follow>,
    },
}

/// An answer and the effects of the transition that made it.
#[derive(Debug)]
pub struct Served {
    pub answer: Answer,
    pub effects: Effects,
}

impl From<Answer> for Served {
    fn from(answer: Answer) -> Self {
        Served {
            answer,
            effects: Effects::default(),
        }
    }
}

/// Serves one `POST /acp`.
pub fn handle(ctx: &mut Ctx<'_>, req: &HttpRequest) -> Served {
    if req.method != "POST" {
        return Answer::Refused(ApiError::MethodNotAllowed("POST")).into();
    }
    if !req.query.is_empty() {
        return Answer::Refused(ApiError::InvalidQuery("/acp takes no query string".into())).into();
    }
    if req.body.len() > BODY_BYTES_MAX {
        return Answer::Refused(ApiError::PayloadTooLarge {
            bytes_max: BODY_BYTES_MAX,
        })
        .into();
    }
    match rpc::decode(&req.body) {
        Err(refused) => failed(&refused.id, &refused.error).into(),
        Ok(Message::Notification { method, params }) => match notify(ctx, req, &method, params) {
            Ok(effects) => Served {
                answer: Answer::Accepted,
                effects,
            },
            Err(e) => Answer::Refused(e).into(),
        },
        Ok(Message::Request { id, method, params }) => {
            request(ctx, req, &id, &method, params).unwrap_or_else(|e| failed(&id, &e).into())
        }
    }
}

fn failed(id: &Value, error: &RpcError) -> Answer {
    Answer::Failed {
        status: error.http_status(),
        body: rpc::error(id, error),
    }
}

// `params` is read member by member, not by serde derives: each derived
// struct costs the wasm its own decoder (the deployed size is bounded).
// Members ACP defines and this Agent does not use (`cwd`, ...) are accepted.

/// `params.<name>`, a required string.
fn string_param(raw: &Value, name: &str) -> Result<String, RpcError> {
    match &raw[name] {
        Value::String(s) => Ok(s.clone()),
        _ => Err(RpcError::params(format!(
            "params.{name}: a string is required"
        ))),
    }
}

/// `params.<name>`, an array (empty when absent and not `required`).
fn array_param<'v>(raw: &'v Value, name: &str, required: bool) -> Result<&'v [Value], RpcError> {
    match raw.get(name) {
        Some(Value::Array(a)) => Ok(a),
        None if !required => Ok(&[]),
        _ => Err(RpcError::params(format!(
            "params.{name}: an array is required"
        ))),
    }
}

/// A notification: only `session/cancel` does anything; others (such as
/// `$/cancel_request`) are ignored, as JSON-RPC asks.
fn notify(
    ctx: &mut Ctx<'_>,
    req: &HttpRequest,
    method: &str,
    raw: Value,
) -> Result<Effects, ApiError> {
    if method != "session/cancel" {
        return Ok(Effects::default());
    }
    let session_id =
        string_param(&raw, "sessionId").map_err(|e| ApiError::InvalidRequest(e.message))?;
    agent::validate_session_id(&session_id)?;
    let meta = ctx.meta.check(req.meta.as_deref())?;
    let c = cancel::abort(ctx, &session_id, meta.as_deref())?;
    Ok(cancellation_effects(&session_id, c.stopped_turn, c.settled))
}

fn request(
    ctx: &mut Ctx<'_>,
    req: &HttpRequest,
    id: &Value,
    method: &str,
    raw: Value,
) -> Result<Served, RpcError> {
    match method {
        "initialize" => initialize(id, raw).map(|a| a.into()),
        "session/new" => new_session(ctx, id, raw).map(|a| a.into()),
        "session/load" => load_session(ctx, id, raw).map(|a| a.into()),
        "session/prompt" => prompt(ctx, req, id, raw),
        "session/cancel" => Err(RpcError::new(
            rpc::INVALID_REQUEST,
            "session/cancel is a notification: send it without an id",
        )),
        other => Err(RpcError::new(
            rpc::METHOD_NOT_FOUND,
            format!(
                "method `{}` is not served; served: initialize, session/new, session/load, \
                 session/prompt, and the notification session/cancel",
                crate::text::shorten(other)
            ),
        )),
    }
}

fn initialize(id: &Value, raw: Value) -> Result<Answer, RpcError> {
    // Any version the client names is answered with v1, the one served;
    // a client that cannot speak it disconnects (ACP's negotiation).
    if raw["protocolVersion"]
        .as_u64()
        .is_none_or(|v| v > u64::from(u16::MAX))
    {
        return Err(RpcError::params(
            "params.protocolVersion: an integer 0..=65535 is required",
        ));
    }
    Ok(Answer::Json(rpc::response(
        id,
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": { "image": true, "audio": false, "embeddedContext": false },
                "mcpCapabilities": { "http": false, "sse": false },
            },
            "authMethods": [],
            "agentInfo": { "name": "shiitake", "version": env!("CARGO_PKG_VERSION") },
        }),
    )))
}

/// The MCP servers an Agent uses are its host's (`tools().mcpServers`);
/// `cwd` is accepted and unused: the Agent's files are its host's.
fn no_mcp_servers(raw: &Value) -> Result<(), RpcError> {
    let list = array_param(raw, "mcpServers", false)?;
    if list.is_empty() {
        return Ok(());
    }
    Err(RpcError::params(format!(
        "params.mcpServers: this Agent connects only to the MCP servers its host configures; \
         send an empty list (got {})",
        list.len()
    )))
}

fn new_session(ctx: &mut Ctx<'_>, id: &Value, raw: Value) -> Result<Answer, RpcError> {
    no_mcp_servers(&raw)?;
    let session_id = agent::create_hosted_session(ctx)?;
    Ok(Answer::Json(rpc::response(
        id,
        json!({ "sessionId": session_id }),
    )))
}

fn session_id(raw: &Value) -> Result<String, RpcError> {
    let id = string_param(raw, "sessionId")?;
    agent::validate_session_id(&id).map_err(|e| RpcError::params(format!("params.{e}")))?;
    Ok(id)
}

/// Marks the Session hosted and replays its newest page (at most
/// `READ_PAGE_MESSAGES_MAX` messages and `READ_PAGE_BYTES_MAX` bytes).
fn load_session(ctx: &mut Ctx<'_>, id: &Value, raw: Value) -> Result<Answer, RpcError> {
    let sid = session_id(&raw)?;
    no_mcp_servers(&raw)?;
    model_choice::mark_hosted(ctx, &sid)?;
    let page = read::page(ctx, &sid, None, READ_PAGE_MESSAGES_MAX)?;
    let messages: Vec<Value> = page
        .messages
        .iter()
        .filter_map(|m| serde_json::from_str(m.get()).ok())
        .collect();
    let mut out = updates::replay(&sid, &messages);
    out.push(rpc::response(id, json!({})));
    Ok(Answer::Stream {
        messages: out,
        follow: None,
    })
}

/// The prompt's content blocks as one prompt's text and images: `text`
/// blocks and `resource_link`s (as `name: uri`; ACP's baseline) joined by
/// newlines, `image` blocks as images. Audio and embedded resources are
/// not offered in `promptCapabilities` and are refused by position.
fn content(blocks: &[Value]) -> Result<(String, Vec<Image>), RpcError> {
    if blocks.len() > ACP_PROMPT_BLOCKS_MAX {
        return Err(RpcError::params(format!(
            "params.prompt: at most {ACP_PROMPT_BLOCKS_MAX} content blocks, got {}",
            blocks.len()
        )));
    }
    let mut lines = Vec::new();
    let mut images = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let field = |name: &str| {
            block[name].as_str().ok_or_else(|| {
                RpcError::params(format!("params.prompt[{i}].{name}: a string is required"))
            })
        };
        match block["type"].as_str() {
            Some("text") => lines.push(field("text")?.to_owned()),
            Some("resource_link") => lines.push(format!("{}: {}", field("name")?, field("uri")?)),
            Some("image") => images.push(Image {
                media_type: field("mimeType")?.to_owned(),
                data: field("data")?.to_owned(),
            }),
            Some(other @ ("audio" | "resource")) => {
                return Err(RpcError::params(format!(
                    "params.prompt[{i}].type: `{other}` content is not supported \
                     (see promptCapabilities); send text, image or resource_link"
                )))
            }
            _ => {
                return Err(RpcError::params(format!(
                    "params.prompt[{i}].type: expected text, image or resource_link"
                )))
            }
        }
    }
    Ok((lines.join("\n"), images))
}

/// Admits the prompt (a `followUp`, under the request's metadata) and
/// streams its command until it settles; a replayed requestId whose
/// command already settled answers its stop reason at once.
fn prompt(
    ctx: &mut Ctx<'_>,
    req: &HttpRequest,
    id: &Value,
    raw: Value,
) -> Result<Served, RpcError> {
    let sid = session_id(&raw)?;
    let (text, images) = content(array_param(&raw, "prompt", true)?)?;
    let meta = match raw.get("_meta") {
        None | Some(Value::Null) => None,
        Some(Value::Object(meta)) => meta.get(REQUEST_ID_META),
        Some(_) => return Err(RpcError::params("params._meta: an object is required")),
    };
    let request_id = match meta {
        None => ctx.ids.next_id("acp_"),
        Some(Value::String(r)) => r.clone(),
        Some(_) => {
            return Err(RpcError::params(format!(
                "params._meta.{REQUEST_ID_META}: must be a string"
            )))
        }
    };
    let command = Prompt {
        request_id,
        text,
        images: (!images.is_empty()).then_some(images),
        delivery: Delivery::FollowUp,
        after: None,
    };
    validate_prompt(&command).map_err(|e| RpcError::params(format!("params.prompt: {e}")))?;
    // Only a Session ACP created or loaded: its turns use the hosted layers.
    if !model_choice::hosted(ctx.store.sql(), &sid).map_err(ApiError::from)? {
        if !ctx.store.session_exists(&sid).map_err(ApiError::from)? {
            return Err(ApiError::SessionNotFound(sid).into());
        }
        return Err(RpcError::new(
            rpc::RESOURCE_NOT_FOUND,
            format!("session `{sid}` was not opened over ACP: session/load it first"),
        ));
    }
    let meta = ctx.meta.check(req.meta.as_deref())?;
    let admitted = admission::admit_prompt(ctx, &sid, &command, meta.as_deref())?;
    let effects = admission_effects(&sid, &command.request_id, &admitted);
    let command_id = &admitted.receipt.command_id;
    let answer = match crate::settlement::read(ctx.store, &sid, command_id)? {
        Some(settled) => Answer::Stream {
            messages: vec![updates::stop(id, &settled)],
            follow: None,
        },
        None => Answer::Stream {
            messages: Vec::new(),
            follow: Some(Follow::new(id.clone(), &sid, command_id)),
        },
    };
    Ok(Served { answer, effects })
}
