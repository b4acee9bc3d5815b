//! The mail tables, a feature group (`store::schema::MAIL`) made with the
//! first mail frozen or admitted. Most Agents never send one: without the
//! group every reader answers without a statement ([`holds_mail`]), and
//! every write makes it first.
//!
//! - [`OUTBOX`]: one row per mail this Agent froze (its sends, and the
//!   replies its settlements staged): the mail JSON, its delivery state
//!   (`pending` | `accepted` | `undeliverable` | `refused` | `recalled`),
//!   attempts, the next attempt (`next_at`, pending only), the recipient's
//!   receipt command id, the reason (refused: the recipient's;
//!   undeliverable: `recipient_offline` | `recipient_left`), the last
//!   delivery error, and, for a send that wants a reply, when the reply
//!   arrived (`replied_at`).
//! - [`INBOX`]: one row per mail this Agent admitted: its key, a digest of
//!   the mail (a replayed delivery must be the same mail), the Session and
//!   command it was admitted as, the sender, this Agent's id as the mail
//!   named it, `reply_to` (non-empty: a reply is owed when the command
//!   settles) and, for an authenticated reply (or a local undeliverable
//!   line), its verified facts (`facts`, a [`super::ReplyLine`] as JSON).

use crate::limits::MAIL_KEPT_MAX;
use crate::sql::{read, read_beside, write, Row, Sql, SqlError, SqlValue};
use crate::store::schema::MAIL;

pub(super) const OUTBOX: &str = "shiitake_mail_outbox";
pub(super) const INBOX: &str = "shiitake_mail_inbox";

/// Whether the store holds the mail tables (no statement).
pub(super) fn holds_mail(sql: &dyn Sql) -> bool {
    MAIL.exists(sql)
}

/// [`write`], making the mail tables first when the store lacks them.
fn write_mail(sql: &dyn Sql, statement: &str, params: Vec<SqlValue>) -> Result<(), SqlError> {
    MAIL.ensure(sql)?;
    write(sql, statement, params)
}

/// One outbox row.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct OutboxRow {
    pub key: String,
    pub mail: String,
    pub reply_to: String,
    pub state: String,
    pub attempts: u32,
    pub next_at: Option<i64>,
    pub receipt: Option<String>,
    pub reason: Option<String>,
}

const OUTBOX_COLUMNS: &str = "key, mail, reply_to, state, attempts, next_at, receipt, reason";

fn outbox_row(r: &Row) -> Result<OutboxRow, SqlError> {
    Ok(OutboxRow {
        key: r.text(0)?,
        mail: r.text(1)?,
        reply_to: r.text(2)?,
        state: r.text(3)?,
        attempts: u32::try_from(r.int(4)?).unwrap_or(u32::MAX),
        next_at: r.opt_int(5)?,
        receipt: r.opt_text(6)?,
        reason: r.opt_text(7)?,
    })
}

pub(super) fn outbox(sql: &dyn Sql, key: &str) -> Result<Option<OutboxRow>, SqlError> {
    if !holds_mail(sql) {
        return Ok(None);
    }
    read(
        sql,
        &format!("SELECT {OUTBOX_COLUMNS} FROM {OUTBOX} WHERE key = ?"),
        &[key.into()],
    )?
    .first()
    .map(outbox_row)
    .transpose()
}

pub(super) fn pending_count(sql: &dyn Sql) -> Result<usize, SqlError> {
    if !holds_mail(sql) {
        return Ok(0);
    }
    let rows = read(
        sql,
        &format!("SELECT count(*) FROM {OUTBOX} WHERE state = 'pending'"),
        &[],
    )?;
    Ok(rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0) as usize)
}

/// Pending mails, and accepted sends still owed their reply.
pub(super) fn waiting_count(sql: &dyn Sql) -> Result<usize, SqlError> {
    let rows = read(
        sql,
        &format!(
            "SELECT count(*) FROM {OUTBOX} WHERE state = 'pending'
                OR (state = 'accepted' AND reply_to <> '' AND replied_at IS NULL)"
        ),
        &[],
    )?;
    Ok(rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0) as usize)
}

/// Pending mails due at `now_ms`, earliest first.
pub(super) fn due(sql: &dyn Sql, now_ms: i64, limit: usize) -> Result<Vec<String>, SqlError> {
    read(
        sql,
        &format!(
            "SELECT mail FROM {OUTBOX} WHERE state = 'pending' AND next_at <= ?
             ORDER BY next_at, key LIMIT ?"
        ),
        &[now_ms.into(), (limit as i64).into()],
    )?
    .iter()
    .map(|r| r.text(0))
    .collect()
}

pub(super) fn earliest(sql: &dyn Sql) -> Result<Option<i64>, SqlError> {
    read(
        sql,
        &format!("SELECT min(next_at) FROM {OUTBOX} WHERE state = 'pending'"),
        &[],
    )?
    .first()
    .map(|r| r.opt_int(0))
    .unwrap_or(Ok(None))
}

/// Inserts a pending mail (ignored when its key is present).
pub(super) fn insert_pending(
    sql: &dyn Sql,
    key: &str,
    mail: &str,
    reply_to: &str,
    now_ms: i64,
) -> Result<(), SqlError> {
    write_mail(
        sql,
        &format!(
            "INSERT OR IGNORE INTO {OUTBOX}
                (key, mail, reply_to, state, attempts, next_at, created_at, updated_at)
             VALUES (?, ?, ?, 'pending', 0, ?, ?, ?)"
        ),
        vec![
            key.into(),
            mail.into(),
            reply_to.into(),
            now_ms.into(),
            now_ms.into(),
            now_ms.into(),
        ],
    )
}

/// Moves a row to `state`; `next_at` is cleared unless still pending.
#[allow(clippy::too_many_arguments)]
pub(super) fn update(
    sql: &dyn Sql,
    key: &str,
    state: &str,
    attempts: u32,
    next_at: Option<i64>,
    receipt: Option<&str>,
    reason: Option<&str>,
    error: Option<&str>,
    now_ms: i64,
) -> Result<(), SqlError> {
    write_mail(
        sql,
        &format!(
            "UPDATE {OUTBOX} SET state = ?, attempts = ?, next_at = ?, receipt = ?, reason = ?,
                error = coalesce(?, error), updated_at = ?
             WHERE key = ?"
        ),
        vec![
            state.into(),
            i64::from(attempts).into(),
            next_at.into(),
            receipt.into(),
            reason.into(),
            error.into(),
            now_ms.into(),
            key.into(),
        ],
    )
}

pub(super) fn mark_replied(sql: &dyn Sql, key: &str, now_ms: i64) -> Result<(), SqlError> {
    write_mail(
        sql,
        &format!(
            "UPDATE {OUTBOX} SET replied_at = ?, updated_at = ? WHERE key = ? AND replied_at IS NULL"
        ),
        vec![now_ms.into(), now_ms.into(), key.into()],
    )
}

/// Keeps the newest [`MAIL_KEPT_MAX`] outbox rows that need nothing more:
/// not pending, and not a send still owed its reply.
pub(super) fn prune_outbox(sql: &dyn Sql) -> Result<(), SqlError> {
    write_mail(
        sql,
        &format!(
            "DELETE FROM {OUTBOX} WHERE key IN (
                SELECT key FROM {OUTBOX}
                WHERE state <> 'pending'
                  AND NOT (state = 'accepted' AND reply_to <> '' AND replied_at IS NULL)
                ORDER BY updated_at DESC, key DESC LIMIT -1 OFFSET ?)"
        ),
        vec![(MAIL_KEPT_MAX as i64).into()],
    )
}

/// One inbox row.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct InboxRow {
    pub key: String,
    pub digest: String,
    pub session_id: String,
    pub command_id: String,
    pub from_agent: String,
    pub from_session: String,
    pub to_agent: String,
    pub reply_to: String,
    pub facts: Option<String>,
}

const INBOX_COLUMNS: &str =
    "key, digest, session_id, command_id, from_agent, from_session, to_agent, reply_to, facts";

fn inbox_row(r: &Row) -> Result<InboxRow, SqlError> {
    Ok(InboxRow {
        key: r.text(0)?,
        digest: r.text(1)?,
        session_id: r.text(2)?,
        command_id: r.text(3)?,
        from_agent: r.text(4)?,
        from_session: r.text(5)?,
        to_agent: r.text(6)?,
        reply_to: r.text(7)?,
        facts: r.opt_text(8)?,
    })
}

pub(super) fn inbox(sql: &dyn Sql, key: &str) -> Result<Option<InboxRow>, SqlError> {
    if !holds_mail(sql) {
        return Ok(None);
    }
    read(
        sql,
        &format!("SELECT {INBOX_COLUMNS} FROM {INBOX} WHERE key = ?"),
        &[key.into()],
    )?
    .first()
    .map(inbox_row)
    .transpose()
}

/// The inbox row of the command `command_id` of the Session, read beside
/// the writes of a settling transition (no transition that settles writes
/// the inbox).
pub(super) fn inbox_of_command(
    sql: &dyn Sql,
    session_id: &str,
    command_id: &str,
) -> Result<Option<InboxRow>, SqlError> {
    read_beside(
        sql,
        &[INBOX],
        &format!("SELECT {INBOX_COLUMNS} FROM {INBOX} WHERE session_id = ? AND command_id = ?"),
        &[session_id.into(), command_id.into()],
    )?
    .first()
    .map(inbox_row)
    .transpose()
}

/// The Session's received delegations still owed a reply: a non-empty
/// `reply_to` and a command not yet settled.
pub(super) fn owed_in(sql: &dyn Sql, session_id: &str) -> Result<Vec<InboxRow>, SqlError> {
    let columns = INBOX_COLUMNS
        .split(',')
        .map(|c| format!("i.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    read(
        sql,
        &format!(
            "SELECT {columns} FROM {INBOX} i
             JOIN commands c ON c.session_id = i.session_id AND c.request_id = i.key
             WHERE i.session_id = ? AND i.reply_to <> '' AND c.settled_at IS NULL
             ORDER BY i.received_at, i.key"
        ),
        &[session_id.into()],
    )?
    .iter()
    .map(inbox_row)
    .collect()
}

/// `(command_id, facts)` of the Session's reply lines among `command_ids`.
pub(super) fn facts_of(
    sql: &dyn Sql,
    session_id: &str,
    command_ids: &[&str],
) -> Result<Vec<(String, String)>, SqlError> {
    if command_ids.is_empty() {
        return Ok(Vec::new());
    }
    // One statement text whatever the number of ids (workerd keeps every
    // distinct text prepared for the object's life): the ids go as one
    // JSON array.
    let ids = serde_json::json!(command_ids).to_string();
    read_beside(
        sql,
        &[INBOX],
        &format!(
            "SELECT command_id, facts FROM {INBOX}
             WHERE session_id = ? AND facts IS NOT NULL
               AND command_id IN (SELECT value FROM json_each(?))"
        ),
        &[session_id.into(), ids.into()],
    )?
    .iter()
    .map(|r| Ok((r.text(0)?, r.text(1)?)))
    .collect()
}

/// Records an admitted mail.
pub(super) fn insert_inbox(sql: &dyn Sql, row: &InboxRow, now_ms: i64) -> Result<(), SqlError> {
    write_mail(
        sql,
        &format!(
            "INSERT OR IGNORE INTO {INBOX} ({INBOX_COLUMNS}, received_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        vec![
            row.key.as_str().into(),
            row.digest.as_str().into(),
            row.session_id.as_str().into(),
            row.command_id.as_str().into(),
            row.from_agent.as_str().into(),
            row.from_session.as_str().into(),
            row.to_agent.as_str().into(),
            row.reply_to.as_str().into(),
            row.facts.clone().into(),
            now_ms.into(),
        ],
    )
}

/// Keeps the newest [`MAIL_KEPT_MAX`] inbox rows no reply is owed for (an
/// owed row, whose command has not settled, stays).
pub(super) fn prune_inbox(sql: &dyn Sql) -> Result<(), SqlError> {
    write_mail(
        sql,
        &format!(
            "DELETE FROM {INBOX} WHERE key IN (
                SELECT i.key FROM {INBOX} i
                WHERE NOT (i.reply_to <> '' AND EXISTS (
                    SELECT 1 FROM commands c
                    WHERE c.session_id = i.session_id AND c.request_id = i.key
                      AND c.settled_at IS NULL))
                ORDER BY i.received_at DESC, i.key DESC LIMIT -1 OFFSET ?)"
        ),
        vec![(MAIL_KEPT_MAX as i64).into()],
    )
}
