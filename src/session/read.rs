//! The bounded Session read: a page of at most 200 messages and
//! `READ_PAGE_BYTES_MAX` bytes, newest page first, each page oldest first,
//! plus the pending queue and the running command.

use super::admission::prompt_input;
use super::command::Image;
use super::queue::{pending, raw_json, PendingItem};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::limits::READ_PAGE_BYTES_MAX;
use serde::Serialize;
use serde_json::value::RawValue;

/// A transcript entry, serialised once when written and served as stored.
/// Roles: `user`, `operator`, `assistant` (with `toolCalls` when the model
/// called tools) and `tool` (one call's outcome: `text` is what the model
/// sees, `data` the display payload it never sees).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message<'a> {
    pub entry_id: &'a str,
    pub role: &'a str,
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
    pub usage: Option<crate::model::Usage>,
    /// The tool calls of an assistant step, as recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<&'a [crate::run::tools::RecordedCall]>,
    /// The execution protocol digest of the step that made the calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<&'a crate::run::tools::Protocol>,
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
    pub created_at: i64,
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

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    pub session_id: String,
    pub messages: Vec<Box<RawValue>>,
    pub pending: Vec<PendingItem>,
    pub running: Option<RunningItem>,
    pub cursor: Option<String>,
}

/// The Session's running turn, as readers see it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningItem {
    pub command_id: String,
    pub request_id: Option<String>,
    pub text: String,
    pub attempt: u32,
    pub started_at: Option<i64>,
}

/// Reads one page of the Session. `before` is the cursor of an earlier page.
pub fn page(
    ctx: &Ctx<'_>,
    session_id: &str,
    before: Option<i64>,
    limit: usize,
) -> Result<Page, ApiError> {
    let store = ctx.store;
    if !store.session_exists(session_id)? {
        return Err(ApiError::SessionNotFound(session_id.to_owned()));
    }
    // One extra row tells whether an older page exists.
    let sizes = store.message_sizes_before(session_id, before.unwrap_or(i64::MAX), limit + 1)?;
    let mut taken = 0;
    let mut bytes = 0;
    for &(_, size) in sizes.iter().take(limit) {
        if taken > 0 && bytes + size > READ_PAGE_BYTES_MAX {
            break;
        }
        bytes += size;
        taken += 1;
    }
    let messages = if taken == 0 {
        Vec::new()
    } else {
        let newest = sizes[0].0;
        let oldest = sizes[taken - 1].0;
        store
            .message_bodies(session_id, oldest, newest)?
            .into_iter()
            .map(raw_json)
            .collect::<Result<_, _>>()?
    };
    let cursor = (sizes.len() > taken).then(|| sizes[taken - 1].0.to_string());
    Ok(Page {
        session_id: session_id.to_owned(),
        messages,
        pending: pending(ctx, session_id)?,
        running: store
            .running_head(session_id)?
            .map(|head| -> Result<RunningItem, ApiError> {
                Ok(RunningItem {
                    text: prompt_input(&head.input)?.text,
                    command_id: head.command_id,
                    request_id: head.request_id,
                    attempt: head.attempt,
                    started_at: head.started_at,
                })
            })
            .transpose()?,
        cursor,
    })
}
