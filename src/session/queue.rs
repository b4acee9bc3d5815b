//! The per-Session FIFO queue: the pending view, `cancel` and `abort`.
//! Cancelled prompts keep their input (text, images) for resubmission.

use super::admission::prompt_input;
use super::command::Image;
use super::Ctx;
use crate::error::ApiError;
use crate::sql::atomically;
use crate::store::{CommandRow, Kind, State, Terminal};
use serde::Serialize;
use serde_json::value::RawValue;

/// A queued prompt as readers see it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingItem {
    pub command_id: String,
    pub request_id: Option<String>,
    pub text: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    pub delivery: super::command::Delivery,
    /// 1-based place in the queue.
    pub position: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Box<RawValue>>,
    pub accepted_at: i64,
}

/// The outcome of `cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CancelOutcome {
    /// The prompt will never run; its text is returned for resubmission.
    #[serde(rename_all = "camelCase")]
    Cancelled { command_id: String, text: String },
    /// The work can no longer be withdrawn (running, settled, or recorded).
    #[serde(rename_all = "camelCase")]
    TooLate { command_id: String },
}

/// One prompt cancelled by `abort`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cancelled {
    pub command_id: String,
    pub request_id: Option<String>,
    pub text: String,
}

/// The outcome of `abort`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AbortOutcome {
    pub status: &'static str,
    pub cancelled: Vec<Cancelled>,
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
    let input = prompt_input(&row.input)?;
    Ok(PendingItem {
        command_id: row.command_id,
        request_id: row.request_id,
        text: input.text,
        images: input.images,
        delivery: input.delivery,
        position,
        meta: row.meta.map(raw_json).transpose()?,
        accepted_at: row.accepted_at,
    })
}

pub(crate) fn raw_json(json: String) -> Result<Box<RawValue>, ApiError> {
    RawValue::from_string(json).map_err(|e| ApiError::Internal(format!("stored json: {e}")))
}

/// Cancels one accepted command of this Session.
pub fn cancel(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    _only_if_pending: bool,
) -> Result<CancelOutcome, ApiError> {
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    atomically(store.sql(), || {
        if !store.session_exists(session_id)? {
            return Err(ApiError::SessionNotFound(session_id.to_owned()));
        }
        let row = store
            .command(session_id, command_id)?
            .ok_or_else(|| ApiError::CommandNotFound(command_id.to_owned()))?;
        let command_id = row.command_id.clone();
        match (row.kind, row.state, row.terminal) {
            (Kind::Prompt, State::Pending, _) => {
                store.cancel_pending(&command_id, now_ms)?;
                let text = prompt_input(&row.input)?.text;
                Ok(CancelOutcome::Cancelled { command_id, text })
            }
            // Idempotent: a retried cancel sees the same outcome.
            (Kind::Prompt, State::Settled, Some(Terminal::Cancelled)) => {
                let text = prompt_input(&row.input)?.text;
                Ok(CancelOutcome::Cancelled { command_id, text })
            }
            _ => Ok(CancelOutcome::TooLate { command_id }),
        }
    })
}

/// Cancels every queued prompt of the Session in one atomic write.
pub fn abort(ctx: &mut Ctx<'_>, session_id: &str) -> Result<AbortOutcome, ApiError> {
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    atomically(store.sql(), || {
        if !store.session_exists(session_id)? {
            return Err(ApiError::SessionNotFound(session_id.to_owned()));
        }
        let mut cancelled = Vec::new();
        for row in store.pending(session_id)? {
            store.cancel_pending(&row.command_id, now_ms)?;
            cancelled.push(Cancelled {
                text: prompt_input(&row.input)?.text,
                command_id: row.command_id,
                request_id: row.request_id,
            });
        }
        Ok(AbortOutcome {
            status: "cancelled",
            cancelled,
        })
    })
}
