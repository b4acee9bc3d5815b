//! Agents in one fleet (seed: "Agent fleet", the agent-control paragraphs
//! of "Run it on Node"), sans-IO: the `agents` module the model reaches
//! through `execute` (`send`, `recall`, `wait`, `read`), the decoding of its
//! calls, and what a target Agent answers a peer: its bounded Session read,
//! the exact settlement of one command as `agents.wait` returns it, and the
//! recall decision (cancel pending work, never abort running work, fence a
//! requestId nothing was admitted under). Mail itself (freezing, delivering,
//! receiving, replies) is `crate::mail`'s; the transport is the host's.
//!
//! With the host's directory (`fleet().directory`, `fleet().archive`) the
//! module also offers `create` and `list` (and `archive`, `unarchive`):
//! the rules are [`directory`]'s (held by one reserved Durable Object) and
//! [`member`]'s (the target's own facts and flags).
//!
//! The invoking Session of every call is the run's (`CallRef`), never model
//! input: every input schema is closed, so a `fromSessionId` or any other
//! key is refused before anything runs.

pub mod directory;
pub mod grant;
pub mod member;
pub mod sessions;
pub mod steps;

use crate::agent;
use crate::capability::{Module, ModuleSpec};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::limits::{
    AGENT_ID_BYTES_MAX, AGENT_NAME_CHARS_MAX, DIRECTORY_PAGE_DEFAULT, DIRECTORY_PAGE_MAX,
    FLEET_WAIT_TEXT_CHARS_MAX, FLEET_WAIT_TIMEOUT_MS_MAX, LIST_PAGE_SESSIONS_MAX,
    MODEL_ADDRESS_BYTES_MAX, PAGE_LIMIT_DEFAULT, READ_PAGE_MESSAGES_MAX, REQUEST_ID_BYTES_MAX,
    SESSION_ID_BYTES_MAX, TEXT_BYTES_MAX,
};
use crate::model::preference::Choice;
use crate::model::{Reasoning, Usage};
use crate::run::cancel::{self, CancelOutcome, Cancellation};
use crate::session::admission::{self, Withdrawal};
use crate::session::command::{validate_request_id, Delivery};
use crate::settlement::Settlement;
use crate::store::Terminal;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The module's id (and its grant key).
pub const MODULE_ID: &str = crate::capability::backend::own::AGENTS;

/// Why a fleet is refused in a build without the `fleet` feature.
pub const UNAVAILABLE: &str = "this wasm was built without the `fleet` Cargo feature (a lean \
    build, SHIITAKE_LEAN=1), which runs the host's fleet (fleet(): the agents module, mail, \
    peer calls, the directory); build with default features";

/// Whether this build runs a fleet: without the `fleet` feature a host's
/// fleet, a peer's call and the directory object are refused naming it (a
/// configuration error: 503 `host_misconfigured`).
pub fn available() -> Result<(), ApiError> {
    match cfg!(feature = "fleet") {
        true => Ok(()),
        false => Err(ApiError::HostMisconfigured(UNAVAILABLE.to_owned())),
    }
}

/// Which operations beyond `wait` and `read` the host authorizes
/// (`fleet().directory`, `fleet().archive`, `fleet().models`) or owns the
/// callbacks of (mail for `send` and `recall`, grants for `sessions.*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offer {
    /// `send` and `recall`: the host carries mail (`fleet().namespace`'s
    /// `receiveMail`, or its own `fleet().deliver`).
    pub mail: bool,
    /// `sessions.list`, `sessions.create`, `sessions.read` and
    /// `sessions.delete`: the host supplies the model's fleet grants
    /// (`fleet().grant`), which every such call needs.
    pub sessions: bool,
    /// `create` and `list`.
    pub directory: bool,
    /// `archive` and `unarchive`, and `list`'s `archived: true`.
    pub archive: bool,
    /// `setModel` and `models`.
    pub models: bool,
    /// Every operation also a direct tool (`agents_send`, ...), so a host
    /// without `execute` offers the fleet (`fleet().direct`).
    pub direct: bool,
}

/// The `agents` module: `wait` and `read` over closed input schemas, and
/// those `offer` adds.
pub fn module(offer: Offer) -> Module {
    let agent_id = json!({ "type": "string", "minLength": 1, "maxLength": AGENT_ID_BYTES_MAX,
        "description": "The target Agent's id (the name its Durable Object is addressed by)." });
    let session_id = json!({ "type": "string", "minLength": 1, "maxLength": SESSION_ID_BYTES_MAX,
        "description": "The target Session in that Agent." });
    let request_id = json!({ "type": "string", "minLength": 1, "maxLength": REQUEST_ID_BYTES_MAX,
        "description": "Your own id for this send (1 to 256 UTF-8 bytes); reuse it to retry or recall the same send." });
    let spec = json!({
        "id": MODULE_ID,
        "operations": [
            {
                "name": "wait",
                "description": "Waits up to timeoutMs (1 to 30000) for one command of another Agent to settle: {status: \"pending\"}, or {status: \"settled\", terminal, text?, truncated?, diagnostic?, usage, toolCallCount}. A completed command returns its final text (at most 16,384 characters); failed, cancelled and interrupted commands return none, a failed one its diagnostic.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "agentId": agent_id, "sessionId": session_id,
                        "commandId": { "type": "string", "minLength": 1, "maxLength": 128 },
                        "timeoutMs": { "type": "integer", "minimum": 1, "maximum": FLEET_WAIT_TIMEOUT_MS_MAX }
                    },
                    "required": ["agentId", "sessionId", "commandId", "timeoutMs"],
                    "additionalProperties": false
                },
                "access": "read",
                "replaySafe": true
            },
            {
                "name": "read",
                "description": "Reads one page of another Agent's Session (newest messages first up to `limit`, at most 200; pass the page's `cursor` back to read older ones).",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "agentId": agent_id, "sessionId": session_id,
                        "limit": { "type": "integer", "minimum": 1, "maximum": READ_PAGE_MESSAGES_MAX },
                        "cursor": { "type": "string", "minLength": 1, "maxLength": 64 }
                    },
                    "required": ["agentId", "sessionId"],
                    "additionalProperties": false
                },
                "access": "read",
                "replaySafe": true
            }
        ]
    });
    let mut spec = spec;
    let ops = spec["operations"].as_array_mut().expect("operations");
    if offer.mail {
        ops.splice(0..0, mail_operations(&agent_id, &session_id, &request_id));
    }
    if offer.sessions {
        ops.extend(sessions_operations(&agent_id, &session_id));
    }
    if offer.directory {
        ops.extend(directory_operations(offer.archive));
    }
    if offer.directory && offer.archive {
        ops.extend(archive_operations());
    }
    if offer.models {
        ops.extend(model_operations(&agent_id));
    }
    let spec: ModuleSpec = serde_json::from_value(spec).expect("the agents module spec is valid");
    let module = Module::from_spec(spec).expect("the agents module is valid");
    if offer.direct {
        module.offered_direct()
    } else {
        module
    }
}

fn mail_operations(agent_id: &Value, session_id: &Value, request_id: &Value) -> Vec<Value> {
    let ops = json!([
            {
                "name": "send",
                "description": "Delegates work to another Agent: admits `text` as a prompt in its Session (created if absent; leave sessionId out for a new Session named after this send, answered as sessionId). A followUp send answers {status: \"accepted\", sessionId, commandId} once the target admitted it, or {status: \"pending\", sessionId} while delivery continues; the target's result arrives later in this Session as a <fungi_agent_reply> line. The same requestId answers the same send again.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "agentId": agent_id, "sessionId": session_id, "requestId": request_id,
                        "text": { "type": "string", "minLength": 1, "description": "The prompt for the target." },
                        "delivery": { "type": "string", "enum": ["followUp", "steer"],
                            "description": "followUp (default): queue behind the target's running work; steer: join it." }
                    },
                    "required": ["agentId", "requestId", "text"],
                    "additionalProperties": false
                },
                "access": "write",
                "replaySafe": true
            },
            {
                "name": "recall",
                "description": "Recalls a send by its requestId: pending work is cancelled ({status: \"accepted\", commandId}); running or settled work is not aborted ({status: \"too_late\", commandId}); when nothing was admitted the target refuses it from now on ({status: \"unknown\"}).",
                "inputSchema": {
                    "type": "object",
                    "properties": { "agentId": agent_id, "sessionId": session_id, "requestId": request_id },
                    "required": ["agentId", "sessionId", "requestId"],
                    "additionalProperties": false
                },
                "access": "write",
                "replaySafe": true
            }
    ]);
    match ops {
        Value::Array(ops) => ops,
        _ => unreachable!("an array"),
    }
}

/// `sessions.*`: another Agent's Sessions under the host's fleet grant
/// (guest `agents.sessions_list`, ...), each answered by the target
/// ([`sessions`]) as its HTTP route answers.
fn sessions_operations(agent_id: &Value, session_id: &Value) -> Vec<Value> {
    let cursor = json!({ "type": "string", "minLength": 1, "maxLength": 20 });
    let limit = json!({ "type": "integer", "minimum": 1, "maximum": LIST_PAGE_SESSIONS_MAX });
    let op = |name: &str, description: String, properties: Value, required: Value, access: &str| {
        json!({
            "name": name,
            "description": description,
            "inputSchema": { "type": "object", "properties": properties, "required": required, "additionalProperties": false },
            "access": access,
            "replaySafe": true
        })
    };
    vec![
        op("sessions.list",
            format!("Lists another Agent's Sessions, oldest first: {{sessions: [{{sessionId, createdAt}}], cursor}}. Pass the page's cursor back for the next page; limit 1 to {LIST_PAGE_SESSIONS_MAX} (default {PAGE_LIMIT_DEFAULT})."),
            json!({ "agentId": agent_id, "cursor": cursor, "limit": limit }), json!(["agentId"]), "read"),
        op("sessions.create",
            "Creates a Session in another Agent: {sessionId} (a new id unless you name one; a taken one is refused with session_exists).".to_owned(),
            json!({ "agentId": agent_id, "sessionId": session_id }), json!(["agentId"]), "write"),
        op("sessions.read",
            format!("Reads one page of another Agent's Session (newest messages first up to `limit`, at most {READ_PAGE_MESSAGES_MAX}; pass the page's `cursor` back to read older ones)."),
            json!({ "agentId": agent_id, "sessionId": session_id, "cursor": cursor, "limit": { "type": "integer", "minimum": 1, "maximum": READ_PAGE_MESSAGES_MAX } }),
            json!(["agentId", "sessionId"]), "read"),
        op("sessions.delete",
            "Deletes a Session of another Agent and all it holds: {sessionId, deleted: true}. A Session other Sessions were forked from is refused (session_has_forks).".to_owned(),
            json!({ "agentId": agent_id, "sessionId": session_id }), json!(["agentId", "sessionId"]), "write"),
    ]
}

fn model_operations(agent_id: &Value) -> Vec<Value> {
    vec![
        json!({
            "name": "setModel",
            "description": "Sets another Agent's explicit model (and reasoning level) for its next turns: `model` is a provider/model address its host offers (see agents.models); `reasoning` (minimal, low, medium, high, max) needs a model. Answers {agentId, model, reasoning?}. A host refusal throws `model:rejected: <why>`.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "agentId": agent_id,
                    "model": { "type": "string", "minLength": 1, "maxLength": MODEL_ADDRESS_BYTES_MAX,
                        "description": "provider/model, e.g. openai/gpt-4o-mini." },
                    "reasoning": { "type": "string", "enum": ["minimal", "low", "medium", "high", "max"] }
                },
                "required": ["agentId", "model"],
                "additionalProperties": false
            },
            "access": "write",
            "replaySafe": true
        }),
        json!({
            "name": "models",
            "description": "Lists the provider/model addresses this host offers from signed-in or configured providers (at most 200): {models: [...]}.",
            "inputSchema": { "type": "object", "properties": {}, "additionalProperties": false },
            "access": "read",
            "replaySafe": true
        }),
    ]
}

fn directory_operations(archive: bool) -> Vec<Value> {
    let levels: Vec<&str> = Reasoning::LEVELS.iter().map(|l| l.name()).collect();
    let archived_note = if archive {
        " Pass archived: true to list only the archived Agents instead."
    } else {
        ""
    };
    vec![
        json!({
            "name": "create",
            "description": "Creates a new Agent in this fleet: {agentId, name, model?, reasoning?, workingDirectory}. The same requestId answers the same Agent again (retry with it after a lost answer); other input under it is refused (create:conflict). `name` labels the Agent; `model` (provider/model spelling, e.g. openai/gpt-5) and `reasoning` (needs a model) are its stored default.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "requestId": { "type": "string", "minLength": 1, "maxLength": REQUEST_ID_BYTES_MAX,
                        "description": "Your own id for this create (1 to 256 UTF-8 bytes); reuse it to retry." },
                    "name": { "type": "string", "minLength": 1, "maxLength": AGENT_NAME_CHARS_MAX },
                    "model": { "type": "string", "minLength": 3, "maxLength": MODEL_ADDRESS_BYTES_MAX,
                        "description": "provider/model" },
                    "reasoning": { "type": "string", "enum": levels }
                },
                "required": ["requestId"],
                "additionalProperties": false
            },
            "access": "write",
            "replaySafe": true
        }),
        json!({
            "name": "list",
            "description": format!("Lists the Agents of this fleet, oldest first: {{agents: [{{agentId, name, model?, reasoning?, workingDirectory, archived, creator?}}], cursor?}}. Archived Agents are left out.{archived_note} Pass a page's cursor back for the next page; limit 1 to {DIRECTORY_PAGE_MAX} (default {DIRECTORY_PAGE_DEFAULT})."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "archived": { "type": "boolean" },
                    "cursor": { "type": "string", "minLength": 1, "maxLength": 20 },
                    "limit": { "type": "integer", "minimum": 1, "maximum": DIRECTORY_PAGE_MAX }
                },
                "additionalProperties": false
            },
            "access": "read",
            "replaySafe": true
        }),
    ]
}

fn archive_operations() -> Vec<Value> {
    let agent_id = json!({ "type": "string", "minLength": 1, "maxLength": AGENT_ID_BYTES_MAX });
    vec![
        json!({
            "name": "archive",
            "description": "Archives an Agent this Agent created: hidden from lists and delegation (a send to it is undeliverable, recipient_left), nothing deleted. Refused (archive:not_creator, archive:self, archive:running, archive:pending, archive:unreadable, archive:archived) with the reason.",
            "inputSchema": {
                "type": "object",
                "properties": { "agentId": agent_id },
                "required": ["agentId"],
                "additionalProperties": false
            },
            "access": "write",
            "replaySafe": true
        }),
        json!({
            "name": "unarchive",
            "description": "Unarchives an Agent this Agent created and archived: listed and reachable again. Refused (unarchive:not_creator, unarchive:self, unarchive:not_archived) with the reason.",
            "inputSchema": {
                "type": "object",
                "properties": { "agentId": agent_id },
                "required": ["agentId"],
                "additionalProperties": false
            },
            "access": "write",
            "replaySafe": true
        }),
    ]
}

/// One decoded call of the `agents` module.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Send {
        agent_id: String,
        /// `None`: a Session named after the send (`mail::omitted_session`).
        session_id: Option<String>,
        request_id: String,
        text: String,
        delivery: Delivery,
    },
    Recall {
        agent_id: String,
        session_id: String,
        request_id: String,
    },
    Wait {
        agent_id: String,
        session_id: String,
        command_id: String,
        timeout_ms: u64,
    },
    Read {
        agent_id: String,
        session_id: String,
        query: ReadQuery,
    },
    Create(CreateArgs),
    List {
        archived: bool,
        cursor: Option<String>,
        limit: Option<usize>,
    },
    /// `archived: false`: unarchive.
    Archive {
        agent_id: String,
        archived: bool,
    },
    /// Sets the target's explicit model (checked by the target's host).
    SetModel {
        agent_id: String,
        choice: Choice,
    },
    /// This host's offered models.
    Models,
    /// `sessions.*` at the target Agent ([`sessions`]).
    Sessions {
        agent_id: String,
        op: sessions::Op,
    },
}

impl Call {
    /// The fleet grant action this call needs ([`grant::ACTIONS`]).
    pub fn action(&self) -> &'static str {
        match self {
            Call::Send { .. } => "send",
            Call::Recall { .. } => "recall",
            Call::Wait { .. } => "wait",
            Call::Read { .. } => "read",
            Call::Create(_) => "create",
            Call::List { .. } => "list",
            Call::Archive { archived: true, .. } => "archive",
            Call::Archive {
                archived: false, ..
            } => "unarchive",
            Call::SetModel { .. } => "setModel",
            Call::Models => "models",
            Call::Sessions { op, .. } => op.action(),
        }
    }

    /// The Agent the call reaches, if one.
    pub fn target(&self) -> Option<&str> {
        match self {
            Call::Send { agent_id, .. }
            | Call::Recall { agent_id, .. }
            | Call::Wait { agent_id, .. }
            | Call::Read { agent_id, .. }
            | Call::Archive { agent_id, .. }
            | Call::SetModel { agent_id, .. }
            | Call::Sessions { agent_id, .. } => Some(agent_id),
            Call::Create(_) | Call::List { .. } | Call::Models => None,
        }
    }
}

/// `agents.create`'s input (the creator is the calling Agent).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateArgs {
    pub request_id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub reasoning: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    archived: Option<bool>,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ArchiveArgs {
    agent_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SetModelArgs {
    agent_id: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelsArgs {}

/// What `agents.read` asks a target for (also the RPC's query JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SendArgs {
    agent_id: String,
    #[serde(default)]
    session_id: Option<String>,
    request_id: String,
    text: String,
    #[serde(default)]
    delivery: Delivery,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RecallArgs {
    agent_id: String,
    session_id: String,
    request_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WaitArgs {
    agent_id: String,
    session_id: String,
    command_id: String,
    timeout_ms: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReadArgs {
    agent_id: String,
    session_id: String,
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    cursor: Option<String>,
}

/// Why a call's arguments are refused: `agents.<operation>: <why>`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("agents.{operation}: {why}")]
pub struct Invalid {
    /// The operation as the module names it (`setModel`).
    pub operation: String,
    pub why: ArgError,
}

/// What is wrong with a call's arguments.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgError {
    /// serde's message: an unknown or missing key, a wrong type.
    #[error("{0}")]
    Shape(String),
    /// An id or a read's bounds, as the HTTP API refuses them.
    #[error("{0}")]
    Api(ApiError),
    #[error("{0}")]
    Input(directory::InputError),
    #[error("{0}")]
    Model(crate::model::Refusal),
    /// The text's length in bytes.
    #[error("text: 1..={TEXT_BYTES_MAX} UTF-8 bytes, got {0}")]
    Text(usize),
    #[error("commandId: 1..=128 bytes")]
    CommandId,
    #[error("timeoutMs: 1..={FLEET_WAIT_TIMEOUT_MS_MAX}, got {0}")]
    TimeoutMs(u64),
    #[error(
        "archived: this host does not archive Agents, so it lists no archived ones \
         (leave `archived` out)"
    )]
    ArchivedNotOffered,
    #[error("limit: 1..={DIRECTORY_PAGE_MAX}, got {0}")]
    Limit(usize),
    #[error("reasoning needs a model")]
    ReasoningWithoutModel,
    #[error("model: required (provider/model)")]
    ModelRequired,
    /// Unknown, or not offered by this host.
    #[error("no such operation")]
    NoSuchOperation,
}

impl From<ApiError> for ArgError {
    fn from(e: ApiError) -> ArgError {
        ArgError::Api(e)
    }
}

impl From<directory::InputError> for ArgError {
    fn from(e: directory::InputError) -> ArgError {
        ArgError::Input(e)
    }
}

impl From<crate::model::Refusal> for ArgError {
    fn from(e: crate::model::Refusal) -> ArgError {
        ArgError::Model(e)
    }
}

/// Decodes one call of operation `operation` with `args` (already checked
/// against the input schema, checked again here: the schema's lengths
/// count characters, requestIds are bounded in bytes).
pub fn decode(operation: &str, args: &Value, offer: Offer) -> Result<Call, Invalid> {
    decode_args(operation, args, offer).map_err(|why| Invalid {
        operation: operation.to_owned(),
        why,
    })
}

fn decode_args(operation: &str, args: &Value, offer: Offer) -> Result<Call, ArgError> {
    fn parse<T: serde::de::DeserializeOwned>(args: &Value) -> Result<T, ArgError> {
        serde_json::from_value(args.clone()).map_err(|e| ArgError::Shape(e.to_string()))
    }
    let checked = |agent_id: &str, session_id: &str| -> Result<(), ArgError> {
        validate_agent_id(agent_id)?;
        Ok(agent::validate_session_id(session_id)?)
    };
    match operation {
        "send" if offer.mail => {
            let a: SendArgs = parse(args)?;
            checked(&a.agent_id, a.session_id.as_deref().unwrap_or("omitted"))?;
            validate_request_id(&a.request_id)?;
            if a.text.is_empty() || a.text.len() > TEXT_BYTES_MAX {
                return Err(ArgError::Text(a.text.len()));
            }
            Ok(Call::Send {
                agent_id: a.agent_id,
                session_id: a.session_id,
                request_id: a.request_id,
                text: a.text,
                delivery: a.delivery,
            })
        }
        "recall" if offer.mail => {
            let a: RecallArgs = parse(args)?;
            checked(&a.agent_id, &a.session_id)?;
            validate_request_id(&a.request_id)?;
            Ok(Call::Recall {
                agent_id: a.agent_id,
                session_id: a.session_id,
                request_id: a.request_id,
            })
        }
        "wait" => {
            let a: WaitArgs = parse(args)?;
            checked(&a.agent_id, &a.session_id)?;
            if a.command_id.is_empty() || a.command_id.len() > 128 {
                return Err(ArgError::CommandId);
            }
            if !(1..=FLEET_WAIT_TIMEOUT_MS_MAX).contains(&a.timeout_ms) {
                return Err(ArgError::TimeoutMs(a.timeout_ms));
            }
            Ok(Call::Wait {
                agent_id: a.agent_id,
                session_id: a.session_id,
                command_id: a.command_id,
                timeout_ms: a.timeout_ms,
            })
        }
        "read" => {
            let a: ReadArgs = parse(args)?;
            checked(&a.agent_id, &a.session_id)?;
            let query = ReadQuery {
                limit: a.limit,
                cursor: a.cursor,
            };
            query.check()?;
            Ok(Call::Read {
                agent_id: a.agent_id,
                session_id: a.session_id,
                query,
            })
        }
        "create" if offer.directory => {
            let a: CreateArgs = parse(args)?;
            validate_request_id(&a.request_id)?;
            if let Some(name) = &a.name {
                directory::validate_name(name)?;
            }
            if let Some(model) = &a.model {
                directory::validate_model(model)?;
            }
            directory::validate_reasoning(a.model.as_deref(), a.reasoning.as_deref())?;
            Ok(Call::Create(a))
        }
        "list" if offer.directory => {
            let a: ListArgs = parse(args)?;
            let archived = a.archived.unwrap_or(false);
            if archived && !offer.archive {
                return Err(ArgError::ArchivedNotOffered);
            }
            if let Some(limit) = a.limit {
                if !(1..=DIRECTORY_PAGE_MAX).contains(&limit) {
                    return Err(ArgError::Limit(limit));
                }
            }
            if let Some(cursor) = &a.cursor {
                directory::parse_cursor(cursor)?;
            }
            Ok(Call::List {
                archived,
                cursor: a.cursor,
                limit: a.limit,
            })
        }
        "archive" | "unarchive" if offer.directory && offer.archive => {
            let a: ArchiveArgs = parse(args)?;
            validate_agent_id(&a.agent_id)?;
            Ok(Call::Archive {
                agent_id: a.agent_id,
                archived: operation == "archive",
            })
        }
        "setModel" if offer.models => {
            let a: SetModelArgs = parse(args)?;
            validate_agent_id(&a.agent_id)?;
            let Some(model) = a.model else {
                return Err(match a.reasoning {
                    Some(_) => ArgError::ReasoningWithoutModel,
                    None => ArgError::ModelRequired,
                });
            };
            let spec = crate::model::preference::parse_address(&model)?;
            let reasoning = a.reasoning.as_deref().map(Reasoning::parse).transpose()?;
            Ok(Call::SetModel {
                agent_id: a.agent_id,
                choice: Choice {
                    model: crate::model::preference::address(&spec),
                    reasoning,
                },
            })
        }
        "models" if offer.models => {
            let _: ModelsArgs = parse(args)?;
            Ok(Call::Models)
        }
        op if op.starts_with("sessions.") && offer.sessions => {
            let mut args = args.clone();
            let agent_id = match args.as_object_mut().and_then(|o| o.remove("agentId")) {
                Some(Value::String(id)) => id,
                _ => return Err(ArgError::Shape("missing field `agentId`".to_owned())),
            };
            validate_agent_id(&agent_id)?;
            let op = sessions::Op::decode(op, &args)?;
            Ok(Call::Sessions { agent_id, op })
        }
        _ => Err(ArgError::NoSuchOperation),
    }
}

impl ReadQuery {
    /// The bounds of a read: `limit` 1..=200, `cursor` a page cursor.
    pub fn check(&self) -> Result<(), ApiError> {
        if let Some(limit) = self.limit {
            if !(1..=READ_PAGE_MESSAGES_MAX).contains(&limit) {
                return Err(ApiError::InvalidRequest(format!(
                    "limit: 1..={READ_PAGE_MESSAGES_MAX}, got {limit}"
                )));
            }
        }
        if let Some(cursor) = &self.cursor {
            if cursor.len() > 64 || !cursor.parse::<i64>().is_ok_and(|n| n > 0) {
                return Err(ApiError::InvalidRequest(format!(
                    "cursor: not a cursor returned by a read: `{}`",
                    crate::text::shorten(cursor)
                )));
            }
        }
        Ok(())
    }

    fn before(&self) -> Option<i64> {
        self.cursor.as_deref().and_then(|c| c.parse().ok())
    }
}

/// An Agent id: what a mail may carry (`mail::valid_agent_id`), never the
/// directory's reserved id.
pub fn validate_agent_id(id: &str) -> Result<(), ApiError> {
    if !crate::mail::valid_agent_id(id) {
        return Err(ApiError::InvalidRequest(format!(
            "agentId: 1..={AGENT_ID_BYTES_MAX} bytes of [A-Za-z0-9._:-]"
        )));
    }
    if directory::is_reserved(id) {
        return Err(ApiError::InvalidRequest(format!(
            "agentId: `{id}` is reserved (the fleet's directory), never an Agent"
        )));
    }
    Ok(())
}

/// The working directory an Agent's tools use, as `agents.create` and
/// `agents.list` report it: the host's `fleet().workingDirectory(agentId)`
/// when it names an absolute path (`/…`, at most
/// `WORKING_DIRECTORY_BYTES_MAX` bytes, no control characters), else `/`
/// (the root of the Agent's own files).
pub fn working_directory(host: Option<&str>) -> String {
    match host {
        Some(path)
            if path.starts_with('/')
                && path.len() <= crate::limits::WORKING_DIRECTORY_BYTES_MAX
                && !path.chars().any(char::is_control) =>
        {
            path.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// A target's bounded Session read: the page the HTTP read serves.
pub fn read(
    ctx: &mut Ctx<'_>,
    ext: Option<&crate::extension::Extensions>,
    session_id: &str,
    query: &ReadQuery,
) -> Result<Value, ApiError> {
    agent::validate_session_id(session_id)?;
    query.check()?;
    let limit = query.limit.unwrap_or(crate::limits::PAGE_LIMIT_DEFAULT);
    let page = crate::session::read::page(ctx, session_id, query.before(), limit)?;
    let page = crate::http::with_projections(ctx, ext, session_id, page)?;
    crate::json::from_text(page.get()).map_err(|e| ApiError::Internal(e.to_string()))
}

/// What `agents.wait` answers about one command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum WaitAnswer {
    /// Not settled yet (the wait's deadline passed).
    #[serde(rename_all = "camelCase")]
    Pending { command_id: String },
    #[serde(rename_all = "camelCase")]
    Settled {
        command_id: String,
        terminal: Terminal,
        /// A completed command's final text, at most
        /// `FLEET_WAIT_TEXT_CHARS_MAX` characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        truncated: bool,
        /// A failed run's bounded diagnostic.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diagnostic: Option<String>,
        usage: Option<Usage>,
        tool_call_count: u32,
    },
}

impl WaitAnswer {
    /// The answer for `command_id` from its settlement, if any.
    pub fn of(command_id: &str, settlement: Option<Settlement>) -> WaitAnswer {
        let Some(s) = settlement else {
            return WaitAnswer::Pending {
                command_id: command_id.to_owned(),
            };
        };
        let (text, truncated) = match (s.terminal, s.answer) {
            (Terminal::Completed, Some(answer)) => {
                match answer.char_indices().nth(FLEET_WAIT_TEXT_CHARS_MAX) {
                    Some((cut, _)) => (Some(answer[..cut].to_owned()), true),
                    None => (Some(answer), false),
                }
            }
            _ => (None, false),
        };
        let diagnostic = match s.terminal {
            Terminal::Failed | Terminal::Interrupted => s.diagnostic,
            _ => None,
        };
        WaitAnswer::Settled {
            command_id: s.command_id,
            terminal: s.terminal,
            text,
            truncated,
            diagnostic,
            usage: s.usage,
            tool_call_count: s.tool_call_count,
        }
    }
}

/// A target's settlement read for `agents.wait` (no waiting: the host
/// parks the call until the command settles or the deadline passes).
pub fn settlement(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
) -> Result<WaitAnswer, ApiError> {
    agent::validate_session_id(session_id)?;
    let found = crate::settlement::read(ctx.store, session_id, command_id)?;
    Ok(WaitAnswer::of(command_id, found))
}

/// What a recall did at the target (seed: "Recall cancels only pending
/// work").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RecallAnswer {
    /// The pending command was cancelled: it never runs.
    #[serde(rename_all = "camelCase")]
    Accepted { command_id: String },
    /// Running or settled: left alone.
    #[serde(rename_all = "camelCase")]
    TooLate { command_id: String },
    /// Nothing was admitted; a fence refuses a late delivery.
    Unknown,
}

/// The target's side of a recall of the send keyed `key` (the requestId
/// its mail was admitted under): the admitted command, if pending, is
/// cancelled (`onlyIfPending`); otherwise a withdrawal fence is put so a
/// late delivery is refused. An absent Session is created first so the
/// fence can hold (a delivery in flight would otherwise create it and be
/// admitted). Answers the cancellation too, for the host's effects.
pub fn recall(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    key: &str,
) -> Result<(RecallAnswer, Option<Cancellation<CancelOutcome>>), ApiError> {
    agent::validate_session_id(session_id)?;
    validate_request_id(key)?;
    if !ctx.store.session_exists(session_id)? {
        match agent::create_session(ctx, Some(session_id)) {
            Ok(_) | Err(ApiError::SessionExists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    match admission::withdraw(ctx, session_id, key)? {
        Withdrawal::Unknown => Ok((RecallAnswer::Unknown, None)),
        Withdrawal::Accepted { command_id } => {
            let cancelled = cancel::cancel(ctx, session_id, &command_id, true, None)?;
            let answer = match &cancelled.outcome {
                CancelOutcome::Cancelled { command_id, .. } => RecallAnswer::Accepted {
                    command_id: command_id.clone(),
                },
                CancelOutcome::TooLate { command_id } => RecallAnswer::TooLate {
                    command_id: command_id.clone(),
                },
            };
            Ok((answer, Some(cancelled)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_is_closed_and_named() {
        let m = module(MAIL);
        assert_eq!(m.id, "agents");
        let names: Vec<_> = m.operations.iter().map(|o| o.guest_name.as_str()).collect();
        assert_eq!(names, ["send", "recall", "wait", "read"]);
        let send = m.operation("send").unwrap();
        let extra = json!({"agentId": "a", "sessionId": "s", "requestId": "r", "text": "t", "fromSessionId": "x"});
        assert!(send.check_arguments(&extra).is_err(), "closed schema");
    }

    const MODELS: Offer = Offer {
        mail: true,
        sessions: false,
        directory: false,
        archive: false,
        models: true,
        direct: false,
    };

    const MAIL: Offer = Offer {
        mail: true,
        sessions: false,
        directory: false,
        archive: false,
        models: false,
        direct: false,
    };

    #[test]
    fn send_and_recall_need_mail_and_sessions_need_grants() {
        let names = |m: Module| -> Vec<String> {
            m.operations.iter().map(|o| o.guest_name.clone()).collect()
        };
        // No mail callback: send and recall are absent, and refused.
        assert_eq!(names(module(Offer::default())), ["wait", "read"]);
        let send = json!({"agentId": "a", "requestId": "r", "text": "t"});
        let e = decode("send", &send, Offer::default()).unwrap_err();
        assert_eq!(e.why, ArgError::NoSuchOperation);
        let recall = json!({"agentId": "a", "sessionId": "s", "requestId": "r"});
        assert!(decode("recall", &recall, Offer::default()).is_err());
        assert!(decode("send", &send, MAIL).is_ok());
        // With the host's grants: the sessions operations.
        let granted = Offer {
            sessions: true,
            ..Offer::default()
        };
        assert_eq!(
            names(module(granted)),
            [
                "wait",
                "read",
                "sessions_list",
                "sessions_create",
                "sessions_read",
                "sessions_delete"
            ]
        );
        let list = json!({"agentId": "b", "limit": 3});
        assert!(decode("sessions.list", &list, Offer::default()).is_err());
        let call = decode("sessions.list", &list, granted).unwrap();
        assert_eq!((call.action(), call.target()), ("sessions.list", Some("b")));
        let e = decode("sessions.delete", &json!({"agentId": "b"}), granted)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sessionId"), "{e}");
        let e = decode("sessions.read", &json!({"sessionId": "s"}), granted)
            .unwrap_err()
            .to_string();
        assert!(e.contains("agentId"), "{e}");
        let m = module(granted);
        let op = m.operation("sessions_read").unwrap();
        assert!(op
            .check_arguments(&json!({"agentId": "b", "sessionId": "s", "extra": 1}))
            .is_err());
    }

    #[test]
    fn model_operations_are_offered_only_when_authorized() {
        let names = |m: Module| -> Vec<String> {
            m.operations.iter().map(|o| o.guest_name.clone()).collect()
        };
        assert_eq!(names(module(MAIL)), ["send", "recall", "wait", "read"]);
        assert_eq!(
            names(module(MODELS)),
            ["send", "recall", "wait", "read", "set_model", "models"]
        );
        let m = module(MODELS);
        let set = m.operation("set_model").unwrap();
        assert!(set
            .check_arguments(&json!({"agentId": "a", "model": "openai/x", "extra": 1}))
            .is_err());
        assert!(set
            .check_arguments(&json!({"agentId": "a", "reasoning": "high"}))
            .is_err());
        assert!(set
            .check_arguments(&json!({"agentId": "a", "model": "openai/x", "reasoning": "huge"}))
            .is_err());
        assert!(m
            .operation("models")
            .unwrap()
            .check_arguments(&json!({"x": 1}))
            .is_err());
    }

    #[test]
    fn decode_set_model_and_models() {
        let ok = decode(
            "setModel",
            &json!({"agentId": "b", "model": "anthropic/claude", "reasoning": "max"}),
            MODELS,
        )
        .unwrap();
        assert_eq!(
            ok,
            Call::SetModel {
                agent_id: "b".into(),
                choice: Choice {
                    model: "anthropic/claude".into(),
                    reasoning: Some(Reasoning::Max)
                }
            }
        );
        let e = decode(
            "setModel",
            &json!({"agentId": "b", "reasoning": "low"}),
            MODELS,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("reasoning needs a model"), "{e}");
        let e = decode(
            "setModel",
            &json!({"agentId": "b", "model": "nope"}),
            MODELS,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("provider/model"), "{e}");
        let e = decode(
            "setModel",
            &json!({"agentId": "b", "model": "openai/x", "reasoning": "x"}),
            MODELS,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("reasoning"), "{e}");
        assert!(decode(
            "setModel",
            &json!({"agentId": "b", "model": "openai/x", "sessionId": "s"}),
            MODELS
        )
        .is_err());
        assert_eq!(decode("models", &json!({}), MODELS).unwrap(), Call::Models);
        assert!(decode("models", &json!({"all": true}), MODELS).is_err());
        assert!(
            decode("models", &json!({}), Offer::default()).is_err(),
            "not offered"
        );
    }

    #[test]
    fn decode_bounds_request_ids_in_bytes() {
        let long = "é".repeat(129); // 258 bytes, 129 characters
        let args = json!({"agentId": "a", "sessionId": "s", "requestId": long, "text": "t"});
        let e = decode("send", &args, MAIL).unwrap_err().to_string();
        assert!(e.contains("requestId"), "{e}");
        let ok =
            json!({"agentId": "a", "sessionId": "s", "requestId": "é".repeat(128), "text": "t"});
        assert!(decode("send", &ok, MAIL).is_ok());
        let empty = json!({"agentId": "a", "sessionId": "s", "requestId": ""});
        assert!(decode("recall", &empty, MAIL).is_err());
    }

    #[test]
    fn decode_refuses_foreign_keys_and_bad_bounds() {
        let sneaky = json!({"agentId": "a", "sessionId": "s", "requestId": "r", "text": "t", "fromSessionId": "x"});
        assert!(decode("send", &sneaky, MAIL)
            .unwrap_err()
            .to_string()
            .contains("fromSessionId"));
        for t in [0, 30_001] {
            let w = json!({"agentId": "a", "sessionId": "s", "commandId": "c", "timeoutMs": t});
            assert!(decode("wait", &w, MAIL)
                .unwrap_err()
                .to_string()
                .contains("timeoutMs"));
        }
        let bad_session = json!({"agentId": "a", "sessionId": "no spaces"});
        assert!(decode("read", &bad_session, MAIL).is_err());
        let bad_agent = json!({"agentId": "a\u{0}b", "sessionId": "s"});
        assert!(decode("read", &bad_agent, MAIL).is_err());
        for cursor in ["x", "0", "-3", ""] {
            let bad_cursor = json!({"agentId": "a", "sessionId": "s", "cursor": cursor});
            assert!(decode("read", &bad_cursor, MAIL).is_err(), "{cursor}");
        }
    }

    fn settled(terminal: Terminal, answer: Option<&str>, diagnostic: Option<&str>) -> Settlement {
        Settlement::new(
            "cmd_1",
            terminal,
            answer.map(|a| (Some(a), None, 2)),
            diagnostic,
        )
    }

    #[test]
    fn wait_answers_text_only_for_completed_work() {
        assert_eq!(
            serde_json::to_value(WaitAnswer::of("cmd_1", None)).unwrap(),
            json!({"status": "pending", "commandId": "cmd_1"})
        );
        let done = WaitAnswer::of(
            "cmd_1",
            Some(settled(Terminal::Completed, Some("hi"), None)),
        );
        assert_eq!(
            serde_json::to_value(done).unwrap(),
            json!({"status": "settled", "commandId": "cmd_1", "terminal": "completed", "text": "hi", "usage": null, "toolCallCount": 2})
        );
        let failed = WaitAnswer::of(
            "cmd_1",
            Some(settled(
                Terminal::Failed,
                Some("partial"),
                Some("model: 401"),
            )),
        );
        let v = serde_json::to_value(failed).unwrap();
        assert_eq!(v["diagnostic"], "model: 401");
        assert!(v.get("text").is_none());
        let cancelled =
            WaitAnswer::of("cmd_1", Some(settled(Terminal::Cancelled, Some("x"), None)));
        assert!(serde_json::to_value(cancelled)
            .unwrap()
            .get("text")
            .is_none());
    }

    #[test]
    fn wait_cuts_text_at_16384_characters() {
        let long = "ü".repeat(FLEET_WAIT_TEXT_CHARS_MAX + 5);
        let WaitAnswer::Settled {
            text, truncated, ..
        } = WaitAnswer::of("c", Some(settled(Terminal::Completed, Some(&long), None)))
        else {
            panic!("settled")
        };
        assert!(truncated);
        assert_eq!(text.unwrap().chars().count(), FLEET_WAIT_TEXT_CHARS_MAX);
        let exact = "a".repeat(FLEET_WAIT_TEXT_CHARS_MAX);
        let WaitAnswer::Settled { truncated, .. } =
            WaitAnswer::of("c", Some(settled(Terminal::Completed, Some(&exact), None)))
        else {
            panic!("settled")
        };
        assert!(!truncated);
    }
}

/// The lean build (no `fleet` feature) refuses a fleet naming the feature:
/// the host's `fleet()` is a configuration error (503 `host_misconfigured`),
/// and so is every peer call and directory request it gets.
#[cfg(all(test, not(feature = "fleet")))]
#[test]
fn a_lean_build_refuses_a_fleet_naming_the_feature() {
    let e = available().unwrap_err();
    assert_eq!((e.status(), e.code()), (503, "host_misconfigured"));
    assert!(e.to_string().contains("`fleet` Cargo feature"), "{e}");
}
