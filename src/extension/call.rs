//! The protocol between the core and the authored callbacks: one JSON
//! request per call (the extension's state, the event), one JSON answer
//! (the writes it made, its timers, its sends, its result). The authoring
//! library (`js/extensions.mjs`, `runHook`) is the other side; native tests
//! answer with Rust closures.

use super::tables::Rows;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The authored callbacks. `call` runs one synchronously (commands and
/// hooks run inside the owner transaction) and answers JSON; it never
/// touches storage.
pub trait Host {
    fn call(&self, request: &str) -> String;
}

/// The Session a call runs for.
#[derive(Debug, Clone, Serialize)]
pub struct SessionRef<'a> {
    pub id: &'a str,
    /// The Session's committed position (its newest message's `seq`), read
    /// inside the calling transition; `null` where that read cannot run
    /// (a settled hook runs after the settling write's own appends).
    pub position: Option<i64>,
}

#[derive(Debug, Serialize)]
pub(super) struct Request<'a> {
    pub ext: &'a str,
    pub kind: &'a str,
    pub state: &'a Rows,
    pub config: &'a Value,
    pub now: i64,
    pub session: Option<SessionRef<'a>>,
    pub event: Value,
    /// Sessions a send of this call found absent while it required an
    /// existing one: `send` to them throws `AdmissionError` reason
    /// `closed` when the callback runs again.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub closed: &'a [String],
}

/// The answer to one call.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub ok: bool,
    #[serde(default)]
    pub error: Option<String>,
    /// The command's input was refused (a 400, not a failure).
    #[serde(default)]
    pub refused: bool,
    #[serde(default)]
    pub writes: Vec<RowWrite>,
    #[serde(default)]
    pub timers: Vec<TimerOp>,
    #[serde(default)]
    pub sends: Vec<SendOp>,
    /// `context.attention.set/clear`, in call order (`attention.rs`).
    #[serde(default)]
    pub attention: Vec<AttentionOp>,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub value: Option<Value>,
    #[serde(default)]
    pub sections: Option<Vec<String>>,
    #[serde(default)]
    pub tools: Option<Vec<ToolMarker>>,
}

/// A row written (`value` null: deleted).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowWrite {
    pub collection: String,
    pub key: String,
    pub value: Value,
}

/// A timer set (`at`) or cancelled.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimerOp {
    pub name: String,
    #[serde(default)]
    pub at: Option<f64>,
    #[serde(default)]
    pub cancel: bool,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub payload: Value,
}

/// A prompt sent into a Session.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendOp {
    pub session_id: String,
    pub text: String,
    /// Refuse an absent Session (`AdmissionError` reason `closed`) instead
    /// of creating it (the default, as the seed says).
    #[serde(default)]
    pub require_existing_session: bool,
}

/// A command offered to the model (`commands.tool(name, {description})`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolMarker {
    pub command: String,
    #[serde(default)]
    pub description: Option<String>,
}

/// An attention change (`context.attention.set/clear`).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
pub enum AttentionOp {
    #[serde(rename_all = "camelCase")]
    Set {
        session_id: String,
        item: AttentionItem,
    },
    #[serde(rename_all = "camelCase")]
    Clear { session_id: String, id: String },
}

/// An attention item as the extension gives it (unqualified: its owner is
/// the calling extension). Times are checked to be integers by `stage`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AttentionItem {
    pub id: String,
    pub kind: String,
    pub summary: String,
    pub since: f64,
    #[serde(default)]
    pub expires_at: Option<f64>,
}
