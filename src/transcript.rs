//! The transcript: the messages of a Session as they are stored (serialised
//! once when written, served as stored) and the records a message carries.
//! Shared by Sessions (admission writes `user` and `operator` messages, the
//! read serves them) and the run loop (assistant steps, tool results).

use crate::error::ApiError;
use crate::model::{Image, Usage};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A prompt's text, when its turn starts.
    #[default]
    User,
    /// An operator line: shown to the model as attributed user content.
    Operator,
    /// A model step's answer (with `toolCalls` when it called tools).
    Assistant,
    /// One tool call's outcome.
    Tool,
    /// A compaction entry: `text` is the summary that stands for the
    /// messages `compacted` names in every later model context.
    Compaction,
}

/// A transcript entry, serialised once when written and served as stored.
/// Roles: `user`, `operator`, `assistant` (with `toolCalls` when the model
/// called tools), `tool` (one call's outcome: `text` is what the model
/// sees, `data` the display payload it never sees) and `compaction` (a
/// summary, with what it stands for in `compacted`).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message<'a> {
    pub entry_id: &'a str,
    pub role: Role,
    pub text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_id: Option<&'a str>,
    #[serde(skip_serializing_if = "<[Image]>::is_empty")]
    pub images: &'a [Image],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<&'a RawValue>,
    /// Token usage of the model step that wrote an assistant message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The tool calls of an assistant step, as recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<&'a [RecordedCall]>,
    /// The execution protocol digest of the step that made the calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<&'a Protocol>,
    /// A `tool` message: the call it answers and the tool's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// A tool's display payload (seed: `SessionMessage.data`): never sent
    /// to the model, not host metadata, not under the metadata cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<&'a RawValue>,
    /// A compaction entry: the messages its summary stands for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compacted: Option<&'a Compacted>,
    /// A compaction entry: the instructions its command gave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<&'a str>,
    pub created_at: i64,
}

/// What a compaction entry's summary stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Compacted {
    /// Entry ids of the first and the last message summarised: the model
    /// context held them (the messages between them it had left out by its
    /// bounds, if any, are not).
    pub from: String,
    pub through: String,
    /// How many messages the summary stands for.
    pub messages: u32,
    /// The compaction entry whose summary the input began with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    pub trigger: Trigger,
}

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// A `compact` command.
    Command,
    /// A turn's estimated input passed the trigger of the model's window.
    Window,
    /// The provider refused a turn's model call as too long.
    Refusal,
}

/// The JSON body stored for a message.
pub fn message_body(m: &Message<'_>) -> Result<String, ApiError> {
    serde_json::to_string(m).map_err(|e| ApiError::Internal(e.to_string()))
}

/// Raw meta JSON as a borrowed `RawValue` for a [`Message`].
pub fn meta_raw(meta: Option<&str>) -> Result<Option<&RawValue>, ApiError> {
    meta.map(|m| {
        serde_json::from_str::<&RawValue>(m).map_err(|e| ApiError::Internal(e.to_string()))
    })
    .transpose()
}

/// A call as the assistant message records it (and the model sees it again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedCall {
    pub id: String,
    pub name: String,
    pub arguments: Map<String, Value>,
}

/// The execution protocol of a step (seed: direct tools' names are recorded
/// in the execution protocol digest): the tool names offered, sorted, and a
/// digest of them (FNV-1a 64, for change detection, not security).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Protocol {
    pub tools: Vec<String>,
    pub digest: String,
}

impl Protocol {
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Protocol {
        let mut tools: Vec<String> = names.into_iter().map(str::to_owned).collect();
        tools.sort();
        tools.dedup();
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in tools.iter().flat_map(|t| t.bytes().chain([b'\n'])) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Protocol {
            tools,
            digest: format!("fnv1a64:{hash:016x}"),
        }
    }
}

/// The entry id of a prompt's `user` message.
pub fn user_entry_id(command_id: &str) -> String {
    format!("msg_{command_id}")
}

/// The stored JSON of a prompt's `user` message.
pub fn user_message_body(
    command_id: &str,
    request_id: Option<&str>,
    text: &str,
    images: &[Image],
    meta: Option<&str>,
    now_ms: i64,
) -> Result<String, ApiError> {
    message_body(&Message {
        entry_id: &user_entry_id(command_id),
        role: Role::User,
        text,
        request_id,
        command_id: Some(command_id),
        images,
        meta: meta_raw(meta)?,
        usage: None,
        created_at: now_ms,
        ..Default::default()
    })
}
