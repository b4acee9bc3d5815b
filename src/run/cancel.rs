//! Stopping work (seed: "cancel" and "abort"): a pending prompt never
//! runs; a running turn stops, settling every command of it `cancelled`
//! (its open tool calls closed in the same write). A request bound to an
//! identity stops only its principal's work. Cancelled prompts keep their
//! input (text, images) for resubmission.

use super::settle_with_meta;
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::session::command::queued_input;
use crate::settlement::Settlement;
use crate::sql::atomically;
use crate::store::{CommandRow, Kind, State, Store, Terminal};
use serde::Serialize;

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

/// What a cancellation changed, for the host to act on after the commit.
#[derive(Debug, Clone, PartialEq)]
pub struct Cancellation<T> {
    /// The answer to the caller.
    pub outcome: T,
    /// The head of a running turn that was cancelled: stop its model call.
    pub stopped_turn: Option<String>,
    /// Settlements this transition wrote.
    pub settled: Vec<Settlement>,
}

/// Cancels one accepted command of this Session. A pending prompt never
/// runs; a running one stops its whole turn (unless `only_if_pending`);
/// anything else is `too_late`.
pub fn cancel(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    only_if_pending: bool,
    meta: Option<&str>,
) -> Result<Cancellation<CancelOutcome>, ApiError> {
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    let identity = ctx.meta.identity_path();
    atomically(store.sql(), || {
        if !store.session_exists(session_id)? {
            return Err(ApiError::SessionNotFound(session_id.to_owned()));
        }
        let row = store
            .command(session_id, command_id)?
            .ok_or_else(|| ApiError::CommandNotFound(command_id.to_owned()))?;
        // Identity (seed: "The same identity check protects cancel"): a
        // request bound to a principal cancels only that principal's work,
        // replays included; an unbound owner keeps full authority.
        let canceller = bound_principal(store, identity, meta)?;
        if let Some((path, who)) = &canceller {
            if !owned_by(store, std::slice::from_ref(&row), path, who)? {
                return Err(ApiError::NotOwner(row.command_id.clone()));
            }
        }
        let command_id = row.command_id.clone();
        let mut result = Cancellation {
            outcome: CancelOutcome::TooLate {
                command_id: command_id.clone(),
            },
            stopped_turn: None,
            settled: Vec::new(),
        };
        let cancelled = || -> Result<CancelOutcome, ApiError> {
            Ok(CancelOutcome::Cancelled {
                command_id: command_id.clone(),
                text: queued_input(&row)?.text,
            })
        };
        match (row.kind, row.state, row.terminal) {
            (Kind::Prompt | Kind::Retry | Kind::Compact, State::Pending, _) => {
                result.settled = settle_with_meta(
                    store,
                    std::slice::from_ref(&row),
                    Terminal::Cancelled,
                    None,
                    None,
                    meta,
                    now_ms,
                )?;
                result.outcome = cancelled()?;
            }
            (Kind::Prompt | Kind::Retry | Kind::Compact, State::Running, _) if !only_if_pending => {
                let head = row.turn_id.clone().unwrap_or_else(|| command_id.clone());
                let turn = store.turn(session_id, &head)?;
                // A running command cannot leave its turn (its text is in
                // the transcript), and stopping the turn settles every
                // command in it: a bound principal may do that only when
                // all of them are theirs, else the command is `too_late`.
                if let Some((path, who)) = &canceller {
                    if !owned_by(store, &turn, path, who)? {
                        return Ok(result);
                    }
                }
                result.settled =
                    settle_with_meta(store, &turn, Terminal::Cancelled, None, None, meta, now_ms)?;
                result.stopped_turn = Some(head);
                result.outcome = cancelled()?;
            }
            // Idempotent: a retried cancel sees the same outcome.
            (
                Kind::Prompt | Kind::Retry | Kind::Compact,
                State::Settled,
                Some(Terminal::Cancelled),
            ) => {
                result.outcome = cancelled()?;
            }
            _ => {}
        }
        Ok(result)
    })
}

/// Cancels the running turn and every queued prompt of the Session in one
/// atomic write; for a request bound to a principal, only that principal's
/// (see the body). The answer lists exactly the commands it cancelled.
pub fn abort(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    meta: Option<&str>,
) -> Result<Cancellation<AbortOutcome>, ApiError> {
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    let identity = ctx.meta.identity_path();
    atomically(store.sql(), || {
        if !store.session_exists(session_id)? {
            return Err(ApiError::SessionNotFound(session_id.to_owned()));
        }
        let canceller = bound_principal(store, identity, meta)?;
        let mut head = store.running_head(session_id)?;
        let mut commands = match &head {
            Some(h) => store.turn(session_id, &h.command_id)?,
            None => Vec::new(),
        };
        let mut pending = store.pending(session_id)?;
        // A bound principal aborts only their own work: their queued
        // prompts, and the running turn only when every command in it is
        // theirs (the same rule as `cancel`).
        if let Some((path, who)) = &canceller {
            if !owned_by(store, &commands, path, who)? {
                head = None;
                commands.clear();
            }
            let mut own = Vec::with_capacity(pending.len());
            for row in pending {
                if owned_by(store, std::slice::from_ref(&row), path, who)? {
                    own.push(row);
                }
            }
            pending = own;
        }
        commands.extend(pending);
        let mut cancelled = Vec::with_capacity(commands.len());
        for row in &commands {
            cancelled.push(Cancelled {
                text: queued_input(row)?.text,
                command_id: row.command_id.clone(),
                request_id: row.request_id.clone(),
            });
        }
        let settled = settle_with_meta(
            store,
            &commands,
            Terminal::Cancelled,
            None,
            None,
            meta,
            now_ms,
        )?;
        Ok(Cancellation {
            outcome: AbortOutcome {
                status: "cancelled",
                cancelled,
            },
            stopped_turn: head.map(|h| h.command_id),
            settled,
        })
    })
}

/// The principal a request is bound to, under the host's identity path:
/// `None` for an unbound request (no path, or metadata without one).
fn bound_principal<'p>(
    store: Store<'_>,
    identity: Option<&'p str>,
    meta: Option<&str>,
) -> Result<Option<(&'p str, String)>, ApiError> {
    let Some(path) = identity else {
        return Ok(None);
    };
    Ok(store.principal(meta, path)?.map(|who| (path, who)))
}

/// Whether every command of `rows` belongs to principal `who` (a command
/// admitted without one belongs to nobody).
fn owned_by(
    store: Store<'_>,
    rows: &[CommandRow],
    path: &str,
    who: &str,
) -> Result<bool, ApiError> {
    for row in rows {
        if store.principal(row.meta.as_deref(), path)?.as_deref() != Some(who) {
            return Ok(false);
        }
    }
    Ok(true)
}
