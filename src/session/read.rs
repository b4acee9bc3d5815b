//! The bounded Session read: a page of at most 200 messages and
//! `READ_PAGE_BYTES_MAX` bytes, newest page first, each page oldest first,
//! plus the pending queue and the running command.

use super::admission::queued_input;
use super::queue::{pending, raw_json, PendingItem};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::limits::READ_PAGE_BYTES_MAX;
use serde::Serialize;
use serde_json::value::RawValue;

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
    /// `compact` for a compaction (absent for a turn).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub text: String,
    pub attempt: u32,
    pub started_at: Option<i64>,
}

/// A stored message (a JSON object, served verbatim) with its committed
/// Session position first: clients anchor timeline cells on it
/// (`afterSequence`).
fn with_sequence(body: &str, seq: i64) -> String {
    debug_assert!(
        body.starts_with('{') && body.len() > 2,
        "a stored message is a non-empty object"
    );
    format!("{{\"sequence\":{seq},{}", &body[1..])
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
        // Positions are contiguous per Session (`Store::insert_message`).
        store
            .message_bodies(session_id, oldest, newest)?
            .into_iter()
            .zip(oldest..)
            .map(|(body, seq)| raw_json(with_sequence(&body, seq)))
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
                    text: queued_input(&head)?.text,
                    kind: (head.kind == crate::store::Kind::Compact).then_some("compact"),
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
