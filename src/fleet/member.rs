//! This Agent as a member of a fleet with a directory
//! (`crate::fleet::directory`), in its own storage: whether it registered
//! itself (so it asks the directory once), and whether its creator archived
//! it (so its mail answers `Left` without asking the directory). One table,
//! `shiitake_fleet_member` (key, value), a feature group
//! (`store::schema::FLEET_MEMBER`) made with the first mark; without it
//! its readers answer without a statement.
//!
//! [`set_archived`] is the target's side of `agents.archive`: one
//! transition that reads this Agent's facts (a running command:
//! `running`; pending prompts, mail still to deliver or delegated work
//! still waiting for its reply: `pending`) and, when none refuses, persists
//! the flag.

use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::mail::{Acceptance, Mail};
use crate::sql::{atomically, read, write, Sql, SqlError};
use crate::store::schema::FLEET_MEMBER;
use serde::{Deserialize, Serialize};

const TABLE: &str = "shiitake_fleet_member";

fn get(sql: &dyn Sql, key: &str) -> Result<Option<String>, SqlError> {
    if !FLEET_MEMBER.exists(sql) {
        return Ok(None);
    }
    read(
        sql,
        &format!("SELECT value FROM {TABLE} WHERE key = ?"),
        &[key.into()],
    )?
    .first()
    .map(|r| r.text(0))
    .transpose()
}

fn put(sql: &dyn Sql, key: &str, value: &str) -> Result<(), SqlError> {
    FLEET_MEMBER.ensure(sql)?;
    write(
        sql,
        &format!(
            "INSERT INTO {TABLE} (key, value) VALUES (?, ?)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        ),
        vec![key.into(), value.into()],
    )
}

/// Whether this Agent already registered itself in the directory.
pub fn registered(sql: &dyn Sql) -> Result<bool, SqlError> {
    Ok(get(sql, "registered")?.is_some())
}

/// Remembers that the directory holds this Agent (its own transition).
pub fn mark_registered(sql: &dyn Sql, now_ms: i64) -> Result<(), SqlError> {
    atomically(sql, || put(sql, "registered", &now_ms.to_string()))
}

/// Whether this Agent's creator archived it.
pub fn archived(sql: &dyn Sql) -> Result<bool, SqlError> {
    Ok(get(sql, "archived").is_ok_and(|v| v.as_deref() == Some("1")))
}

/// The decision on a received mail: an archived Agent answers every send
/// `Left` (the sender's model sees `recipient_left`), whatever its host
/// decided; replies to work it delegated still land.
pub fn acceptance(sql: &dyn Sql, mail: &Mail, host: Acceptance) -> Result<Acceptance, SqlError> {
    if mail.reply.is_none() && archived(sql)? {
        return Ok(Acceptance::Left);
    }
    Ok(host)
}

/// What the target answers `agents.archive` / `agents.unarchive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum MemberAnswer {
    /// The flag is now as asked (it may have been already).
    Archived,
    Unarchived,
    /// Refused: `reason` is `running` or `pending`.
    Busy {
        reason: String,
        message: String,
    },
}

/// The target's side, one transition: archiving is refused while a
/// command runs (`running`) or while prompts are pending, mail waits for
/// delivery or delegated work waits for its reply (`pending`); otherwise
/// the flag is persisted. Unarchiving always clears it.
pub fn set_archived(ctx: &mut Ctx<'_>, archived: bool) -> Result<MemberAnswer, ApiError> {
    let store = ctx.store;
    let sql = store.sql();
    atomically(sql, || {
        if archived {
            let (running, pending) = store.unsettled_counts()?;
            if running > 0 {
                return Ok(MemberAnswer::Busy {
                    reason: "running".into(),
                    message: format!("the Agent has {running} running command(s)"),
                });
            }
            let waiting = crate::mail::waiting(sql)?;
            if pending > 0 || waiting > 0 {
                return Ok(MemberAnswer::Busy {
                    reason: "pending".into(),
                    message: format!(
                        "the Agent has {pending} pending prompt(s) and {waiting} mail(s) \
                         or delegated work still waiting"
                    ),
                });
            }
        }
        put(sql, "archived", if archived { "1" } else { "0" })?;
        Ok(if archived {
            MemberAnswer::Archived
        } else {
            MemberAnswer::Unarchived
        })
    })
}
