//! The model context of a step: what the model sees, rebuilt from the
//! stored transcript at each step.

use super::tools::RecordedCall;
use super::{internal, Pending};
use crate::error::ApiError;
use crate::model::{ModelItem, ModelMessage, Role, ToolCall};
use crate::session::command::Image;
use crate::store::Store;
use serde::Deserialize;
use serde_json::Value;

/// Most messages of the transcript a model call sees (newest kept).
pub const CONTEXT_MESSAGES_MAX: usize = 200;

/// What the model sees: the newest stored messages plus `unwritten` ones
/// (this transition's writes), starting at a user message. Tool turns are
/// replayed as both providers require: every call of a step answered by
/// exactly one result, all of them right after the step and in call order,
/// before any later message (an operator line written while the calls ran
/// follows them). A call with no result reads as ended with its outcome
/// unknown (a turn settled before its calls were closed, in a store written
/// before settling closed them); results without their call (outside the
/// window) and repeated results are dropped; display payloads (`data`) never
/// reach the model.
pub(crate) fn context(
    store: Store<'_>,
    session_id: &str,
    unwritten: &[Pending],
) -> Result<Vec<ModelItem>, ApiError> {
    let keep = CONTEXT_MESSAGES_MAX.saturating_sub(unwritten.len());
    let stored = store.recent_messages(session_id, keep)?;
    let mut messages = stored
        .iter()
        .map(String::as_str)
        .chain(unwritten.iter().map(|p| p.body.as_str()))
        .map(|body| serde_json::from_str::<Stored>(body).map(Some))
        .collect::<Result<Vec<_>, _>>()
        .map_err(internal)?;
    let mut items: Vec<ModelItem> = Vec::new();
    for at in 0..messages.len() {
        // `None`: a result already placed after its step.
        let Some(m) = messages[at].take() else {
            continue;
        };
        if m.role == "tool" {
            continue; // its step is outside the window, or it repeats one
        }
        for (call_id, name) in push_message(&mut items, m) {
            // A step's results are written after it and before the turn's
            // next model message: look no further than the next user or
            // assistant message.
            let result = messages[at + 1..]
                .iter_mut()
                .take_while(|m| {
                    m.as_ref()
                        .is_none_or(|m| m.role != "user" && m.role != "assistant")
                })
                .find(|m| {
                    m.as_ref().is_some_and(|m| {
                        m.role == "tool" && m.tool_call_id.as_deref() == Some(call_id.as_str())
                    })
                })
                .and_then(Option::take);
            items.push(match result {
                Some(r) => ModelItem::ToolResult {
                    call_id,
                    name: r.tool_name.unwrap_or(name),
                    content: r.text,
                    is_error: r.is_error,
                },
                None => ModelItem::ToolResult {
                    call_id,
                    name,
                    content: "outcome unknown: the turn ended before this call finished; \
                              it was not run again"
                        .to_owned(),
                    is_error: true,
                },
            });
        }
    }
    Ok(items)
}

/// A stored message as the model context reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    role: String,
    text: String,
    #[serde(default)]
    images: Vec<Image>,
    #[serde(default)]
    tool_calls: Vec<RecordedCall>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    is_error: bool,
}

/// Appends a non-tool message; returns the calls `(id, name)` of a tool
/// step it appended, which its results must follow.
fn push_message(items: &mut Vec<ModelItem>, m: Stored) -> Vec<(String, String)> {
    let (role, text) = match m.role.as_str() {
        "assistant" => (Role::Assistant, m.text),
        // Operator lines reach the model as attributed user content.
        "operator" => (Role::User, format!("[operator] {}", m.text)),
        _ => (Role::User, m.text),
    };
    if items.is_empty() && role == Role::Assistant {
        return Vec::new(); // a context starts with the user
    }
    if !m.tool_calls.is_empty() {
        let calls = m
            .tool_calls
            .iter()
            .map(|c| (c.id.clone(), c.name.clone()))
            .collect();
        items.push(ModelItem::ToolCalls {
            text,
            calls: m
                .tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: Value::Object(c.arguments).to_string(),
                })
                .collect(),
        });
        return calls;
    }
    if !(text.is_empty() && m.images.is_empty()) {
        // An empty answer says nothing; providers refuse empty content.
        items.push(ModelItem::Message(ModelMessage {
            role,
            text,
            images: m.images,
        }));
    }
    Vec::new()
}
