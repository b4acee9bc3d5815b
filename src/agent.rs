//! The Agent: one Durable Object owning many Sessions. Creating, listing
//! (paged) and deleting Sessions.

use crate::attention;
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::limits::{REQUEST_ID_BYTES_MAX, SESSIONS_PER_AGENT_MAX};
use crate::session::branches;
use crate::sql::atomically;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub session_id: String,
    pub created_at: i64,
}

#[derive(Debug, Serialize)]
pub struct SessionList {
    pub sessions: Vec<SessionSummary>,
    pub cursor: Option<String>,
}

/// Session ids are path segments (the check lives in `text.rs`, below
/// every layer that names a Session).
pub use crate::text::validate_session_id;

pub fn create_session(ctx: &mut Ctx<'_>, session_id: Option<&str>) -> Result<String, ApiError> {
    create(ctx, session_id, false)
}

/// Where a fork starts: the path of Session `session_id` ending at entry
/// `entry_id`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkFrom {
    pub session_id: String,
    pub entry_id: String,
}

/// Creates a Session whose paths continue into the path of `from` ending
/// at its entry (`store::path`): its history is shared, not copied, so the
/// fork writes one row however long the history (finding the entry is a
/// scan of the messages newer than it).
pub fn fork_session(
    ctx: &mut Ctx<'_>,
    session_id: Option<&str>,
    from: &ForkFrom,
) -> Result<String, ApiError> {
    validate_session_id(&from.session_id)?;
    if from.entry_id.is_empty() || from.entry_id.len() > REQUEST_ID_BYTES_MAX {
        return Err(ApiError::InvalidRequest(format!(
            "from.entryId: an entry id of 1..={REQUEST_ID_BYTES_MAX} bytes"
        )));
    }
    let session_id = match session_id {
        Some(id) => {
            validate_session_id(id)?;
            id.to_owned()
        }
        None => ctx.ids.next_id("ses_"),
    };
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    atomically(store.sql(), || {
        let (exists, count) = store.session_and_count(&session_id)?;
        if exists {
            return Err(ApiError::SessionExists(session_id.clone()));
        }
        if count >= SESSIONS_PER_AGENT_MAX {
            return Err(ApiError::TooManySessions);
        }
        let chain = store.chain(&from.session_id)?;
        if chain.is_empty() {
            return Err(ApiError::SessionNotFound(from.session_id.clone()));
        }
        let entry = branches::locate(store, &chain, &from.entry_id)?;
        let (base, seq) = branches::fork_base(&chain, &entry)?;
        store.insert_fork(&session_id, &base, seq, now_ms)?;
        Ok(session_id.clone())
    })
}

/// Creates a Session ACP serves: its mark (`model_choice::hosted`) is
/// written with it, so its turns never select a person's saved model.
pub fn create_hosted_session(ctx: &mut Ctx<'_>) -> Result<String, ApiError> {
    create(ctx, None, true)
}

fn create(ctx: &mut Ctx<'_>, session_id: Option<&str>, hosted: bool) -> Result<String, ApiError> {
    let session_id = match session_id {
        Some(id) => {
            validate_session_id(id)?;
            id.to_owned()
        }
        None => ctx.ids.next_id("ses_"),
    };
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    atomically(store.sql(), || {
        let (exists, count) = store.session_and_count(&session_id)?;
        if exists {
            return Err(ApiError::SessionExists(session_id.clone()));
        }
        if count >= SESSIONS_PER_AGENT_MAX {
            return Err(ApiError::TooManySessions);
        }
        store.insert_session(&session_id, now_ms)?;
        if hosted {
            crate::model_choice::stage_hosted(store.sql(), &session_id)?;
        }
        Ok(session_id.clone())
    })
}

/// Sessions in creation order; `cursor` is the opaque cursor of an earlier page.
pub fn list_sessions(
    ctx: &Ctx<'_>,
    limit: usize,
    cursor: Option<i64>,
) -> Result<SessionList, ApiError> {
    let mut rows = ctx.store.sessions_after(cursor.unwrap_or(0), limit + 1)?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let cursor = more
        .then(|| rows.last().map(|r| r.seq.to_string()))
        .flatten();
    Ok(SessionList {
        sessions: rows
            .into_iter()
            .map(|r| SessionSummary {
                session_id: r.session_id,
                created_at: r.created_at,
            })
            .collect(),
        cursor,
    })
}

/// What deleting a Session did.
pub struct Deleted {
    /// The head of the turn it was running, whose model call the host stops.
    pub running: Option<String>,
    /// Its attention was cleared: the delivery outbox holds the clears.
    pub staged_delivery: bool,
    /// Replies it owed were staged in the mail outbox (due now).
    pub staged_mail: bool,
}

/// Deletes the Session and all it owns. Delegated work it received and
/// had not settled gets its `outcome_unknown` reply staged in the same
/// transaction (`mail::owed_replies`). A Session other Sessions were forked
/// from holds their history: refused (409 `session_has_forks`) until they
/// are deleted.
pub fn delete_session(ctx: &mut Ctx<'_>, session_id: &str) -> Result<Deleted, ApiError> {
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    atomically(store.sql(), || {
        if let Some(fork) = store.fork_of(session_id)? {
            return Err(ApiError::SessionHasForks {
                session: session_id.to_owned(),
                fork,
            });
        }
        let running = store.running_head(session_id)?.map(|h| h.command_id);
        // Its attention goes with it, releasing the owners' capacity.
        let attention = attention::removed_with(store.sql(), session_id)?;
        // Its received delegations that have not settled reply
        // `outcome_unknown` (staged in the mail outbox).
        let owed = crate::mail::owed_replies(store.sql(), session_id)?;
        // Its explicit model goes with it.
        let chosen = crate::model_choice::session_has(store.sql(), session_id)?;
        let hosted = crate::model_choice::hosted(store.sql(), session_id)?;
        // So does the producer history extensions kept of it.
        let history = crate::history::any(store.sql());
        // Its budget, counter and pause (the Agent's day keeps its spend).
        let budgeted = crate::budget::counted(store.sql());
        if store.delete_session(session_id)? {
            if chosen {
                crate::model_choice::forget_session(store.sql(), session_id)?;
            }
            if hosted {
                crate::model_choice::forget_hosted(store.sql(), session_id)?;
            }
            if history {
                crate::history::forget_session(store.sql(), session_id)?;
            }
            if budgeted {
                crate::budget::forget_session(store.sql(), session_id)?;
            }
            attention::remove_with(store.sql(), session_id, &attention, now_ms)?;
            owed.stage(store.sql(), now_ms)?;
            Ok(Deleted {
                running,
                staged_delivery: !attention.is_empty(),
                staged_mail: !owed.is_empty(),
            })
        } else {
            Err(ApiError::SessionNotFound(session_id.to_owned()))
        }
    })
}
