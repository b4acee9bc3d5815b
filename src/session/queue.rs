//! The per-Session FIFO queue: the pending view and the newest pending
//! prompt of a principal (`latest_pending`, never a compaction).

use super::command::queued_input;
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::model::Image;
use crate::store::{CommandRow, Kind};
use serde::Serialize;
use serde_json::value::RawValue;

/// A queued prompt (or compaction) as readers see it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingItem {
    pub command_id: String,
    pub request_id: Option<String>,
    /// `compact` for a compaction (absent for a prompt).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// A prompt's text; a compaction's instructions (empty for none).
    pub text: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    pub delivery: super::command::Delivery,
    /// The entry its branch continues after (`""`: the start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// A retry: the user message whose answer it generates again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
    /// 1-based place in the queue.
    pub position: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Box<RawValue>>,
    pub accepted_at: i64,
}

pub fn pending(ctx: &Ctx<'_>, session_id: &str) -> Result<Vec<PendingItem>, ApiError> {
    ctx.store
        .pending(session_id)?
        .into_iter()
        .enumerate()
        .map(|(i, row)| pending_item(row, i + 1))
        .collect()
}

fn pending_item(row: CommandRow, position: usize) -> Result<PendingItem, ApiError> {
    let input = queued_input(&row)?;
    let kind = (row.kind == Kind::Compact).then_some("compact");
    Ok(PendingItem {
        command_id: row.command_id,
        request_id: row.request_id,
        kind,
        text: input.text,
        images: input.images,
        delivery: input.delivery,
        after: input.after,
        retry: input.retry,
        position,
        meta: row.meta.map(raw_json).transpose()?,
        accepted_at: row.accepted_at,
    })
}

pub(crate) fn raw_json(json: String) -> Result<Box<RawValue>, ApiError> {
    RawValue::from_string(json).map_err(|e| ApiError::Internal(format!("stored json: {e}")))
}

/// The newest pending prompt of the principal that `meta` names (under the
/// host's identity path), with its exact text, images, metadata and queue
/// position; for an unbound request, the newest pending prompt. Lookup does
/// not reserve the work: a claim can still win before a cancel.
pub fn latest_pending(
    ctx: &Ctx<'_>,
    session_id: &str,
    meta: Option<&str>,
) -> Result<Option<PendingItem>, ApiError> {
    let store = ctx.store;
    if !store.session_exists(session_id)? {
        return Err(ApiError::SessionNotFound(session_id.to_owned()));
    }
    let principal = match ctx.meta.identity_path() {
        Some(path) => store.principal(meta, path)?.map(|who| (path, who)),
        None => None,
    };
    let Some((latest, position)) = store.latest_pending(
        session_id,
        principal.as_ref().map(|(p, w)| (*p, w.as_str())),
    )?
    else {
        return Ok(None);
    };
    pending_item(latest, position).map(Some)
}
