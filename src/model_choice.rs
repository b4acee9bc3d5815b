//! The stored layers of the model-preference resolver
//! (`crate::model::preference`): the Agent's explicit model (and reasoning)
//! and each Session's explicit model. One table, `shiitake_model_choice`,
//! a feature group (`store::schema::MODEL_CHOICE`) made with the first
//! choice set: most Agents never set one, and without it its readers
//! answer without a statement.
//!
//! Rows: `scope` = `agent`, or `session:<sessionId>`; `model` the
//! `provider/model` address as chosen (checked against the host's offer
//! when set, and again at every turn's start: an address the host stopped
//! offering is skipped, never called); `reasoning` a level or NULL.
//! Deleting a Session deletes its row (`agent::delete_session`).
//!
//! A second table, `shiitake_hosted_sessions` (its own group,
//! `store::schema::HOSTED_SESSIONS`, made with the first mark),
//! marks the Sessions ACP serves (seed: "Hosted ACP sessions use the Agent
//! and Team layers; they do not select a person's saved model
//! preference"): a turn of a marked Session never asks the host for the
//! person's last switch. The mark is written with the Session's creation
//! (`agent::create_hosted_session`) or by `session/load`, and deleted with
//! the Session.

use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::model::preference::{Choice, Policy};
use crate::model::Reasoning;
use crate::sql::{atomically, read_beside, write, Sql, SqlError};
use crate::store::schema::{HOSTED_SESSIONS, MODEL_CHOICE};

const TABLE: &str = "shiitake_model_choice";
const AGENT: &str = "agent";

fn session_scope(session_id: &str) -> String {
    format!("session:{session_id}")
}

/// Whether the store holds the table (no statement).
fn any(sql: &dyn Sql) -> bool {
    MODEL_CHOICE.exists(sql)
}

fn read_scope(sql: &dyn Sql, scope: &str) -> Result<Option<Choice>, SqlError> {
    let rows = read_beside(
        sql,
        &[TABLE],
        &format!("SELECT model, reasoning FROM {TABLE} WHERE scope = ?"),
        &[scope.into()],
    )?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let reasoning = match row.opt_text(1)? {
        // A level this build does not know reads as none.
        Some(level) => Reasoning::parse(&level).ok(),
        None => None,
    };
    Ok(Some(Choice {
        model: row.text(0)?,
        reasoning,
    }))
}

fn put(sql: &dyn Sql, scope: &str, choice: Option<&Choice>, now_ms: i64) -> Result<(), SqlError> {
    match choice {
        Some(choice) => {
            MODEL_CHOICE.ensure(sql)?;
            write(
                sql,
                &format!(
                    "INSERT INTO {TABLE} (scope, model, reasoning, updated_at) VALUES (?, ?, ?, ?)
                     ON CONFLICT (scope) DO UPDATE SET model = excluded.model,
                       reasoning = excluded.reasoning, updated_at = excluded.updated_at"
                ),
                vec![
                    scope.into(),
                    choice.model.as_str().into(),
                    choice.reasoning.map(Reasoning::name).into(),
                    now_ms.into(),
                ],
            )
        }
        // Without the table no choice is stored to clear.
        None if !any(sql) => Ok(()),
        None => write(
            sql,
            &format!("DELETE FROM {TABLE} WHERE scope = ?"),
            vec![scope.into()],
        ),
    }
}

/// The explicit layers for a turn of `session_id`: `(session, agent)`.
pub fn layers(
    sql: &dyn Sql,
    session_id: &str,
) -> Result<(Option<Choice>, Option<Choice>), SqlError> {
    if !any(sql) {
        return Ok((None, None));
    }
    Ok((
        read_scope(sql, &session_scope(session_id))?,
        read_scope(sql, AGENT)?,
    ))
}

/// The Agent's explicit model, if set.
pub fn agent(sql: &dyn Sql) -> Result<Option<Choice>, SqlError> {
    if !any(sql) {
        return Ok(None);
    }
    read_scope(sql, AGENT)
}

const HOSTED: &str = "shiitake_hosted_sessions";

/// Whether ACP serves `session_id` (its turns skip the last switch).
pub fn hosted(sql: &dyn Sql, session_id: &str) -> Result<bool, SqlError> {
    if !HOSTED_SESSIONS.exists(sql) {
        return Ok(false);
    }
    let rows = read_beside(
        sql,
        &[HOSTED],
        &format!("SELECT 1 FROM {HOSTED} WHERE session_id = ?"),
        &[session_id.into()],
    )?;
    Ok(!rows.is_empty())
}

/// Stages the mark (a write of the caller's transition).
pub fn stage_hosted(sql: &dyn Sql, session_id: &str) -> Result<(), SqlError> {
    HOSTED_SESSIONS.ensure(sql)?;
    write(
        sql,
        &format!("INSERT OR IGNORE INTO {HOSTED} (session_id) VALUES (?)"),
        vec![session_id.into()],
    )
}

/// Marks an existing Session as served by ACP; idempotent.
pub fn mark_hosted(ctx: &mut Ctx<'_>, session_id: &str) -> Result<(), ApiError> {
    let store = ctx.store;
    atomically(store.sql(), || {
        if !store.session_exists(session_id)? {
            return Err(ApiError::SessionNotFound(session_id.to_owned()));
        }
        if !hosted(store.sql(), session_id)? {
            stage_hosted(store.sql(), session_id)?;
        }
        Ok(())
    })
}

/// Stages the deletion of the Session's hosted mark.
pub fn forget_hosted(sql: &dyn Sql, session_id: &str) -> Result<(), SqlError> {
    write(
        sql,
        &format!("DELETE FROM {HOSTED} WHERE session_id = ?"),
        vec![session_id.into()],
    )
}

/// Why a choice is refused (`model:rejected: <why>` to an `agents` caller).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SetError {
    #[error("{0}")]
    Rejected(String),
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl From<SqlError> for SetError {
    fn from(e: SqlError) -> Self {
        SetError::Api(e.into())
    }
}

/// Checks `choice` against the host's `policy` (the address offered, its
/// provider signed in and allowed by the key sources) and answers it in
/// its canonical spelling.
pub fn check(policy: &Policy, choice: &Choice) -> Result<Choice, SetError> {
    let spec = policy
        .check(&choice.model)
        .map_err(|e| SetError::Rejected(e.to_string()))?;
    Ok(Choice {
        model: crate::model::preference::address(&spec),
        reasoning: choice.reasoning,
    })
}

/// Sets (or with `None` clears) the Agent's explicit model, checked against
/// `policy`; the next turn of every Session resolves it. One transition
/// (with the table, on first use).
pub fn set_agent(
    ctx: &mut Ctx<'_>,
    policy: &Policy,
    choice: Option<&Choice>,
) -> Result<Option<Choice>, SetError> {
    let checked = choice.map(|c| check(policy, c)).transpose()?;
    let sql = ctx.store.sql();
    let now_ms = ctx.now_ms;
    atomically(sql, || put(sql, AGENT, checked.as_ref(), now_ms))?;
    Ok(checked)
}

/// Sets (or clears) one Session's explicit model, checked against
/// `policy`; the Session must exist. Its next turn resolves it.
pub fn set_session(
    ctx: &mut Ctx<'_>,
    policy: &Policy,
    session_id: &str,
    choice: Option<&Choice>,
) -> Result<Option<Choice>, SetError> {
    let checked = choice.map(|c| check(policy, c)).transpose()?;
    let store = ctx.store;
    let sql = store.sql();
    if !store.session_exists(session_id)? {
        return Err(ApiError::SessionNotFound(session_id.to_owned()).into());
    }
    let now_ms = ctx.now_ms;
    atomically(sql, || {
        // Deleted meanwhile? Then nothing is stored for it.
        if !store.session_exists(session_id)? {
            return Err(SetError::Api(ApiError::SessionNotFound(
                session_id.to_owned(),
            )));
        }
        put(sql, &session_scope(session_id), checked.as_ref(), now_ms)?;
        Ok(())
    })?;
    Ok(checked)
}

/// Inside a transition deleting `session_id` (its reads phase): whether a
/// Session choice is stored, so [`forget_session`] is staged.
pub fn session_has(sql: &dyn Sql, session_id: &str) -> Result<bool, SqlError> {
    Ok(any(sql) && read_scope(sql, &session_scope(session_id))?.is_some())
}

/// Stages the deletion of the Session's choice (a write of its transition).
pub fn forget_session(sql: &dyn Sql, session_id: &str) -> Result<(), SqlError> {
    write(
        sql,
        &format!("DELETE FROM {TABLE} WHERE scope = ?"),
        vec![session_scope(session_id).into()],
    )
}
