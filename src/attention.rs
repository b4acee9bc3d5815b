//! Attention (seed: "Extensions and authority"): items an extension holding
//! the `attention` grant sets on a Session for a person to look at, and the
//! inbox that orders Sessions by them. This module is the table and its
//! reads, below both the Session lifecycle (`agent.rs`: deleting a Session
//! removes its items) and the extensions (`extension/attention.rs`: the
//! rules of `context.attention.set/clear` inside owner transactions).
//!
//! The table is a feature group (`store::schema::ATTENTION`), made with
//! the first item; most Agents never set one, and without it every reader
//! answers empty without a statement.

use crate::delivery;
use crate::limits::{INBOX_ATTENTION_PER_ROW_MAX, SESSION_ID_BYTES_MAX};
use crate::sql::{read, write, Row, Sql, SqlError, SqlValue, Write};
use crate::store::schema::ATTENTION;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeSet;

const TABLE: &str = "shiitake_attention";

/// One open item as every public observation serves it: its id qualified
/// by the extension that owns it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    pub extension_id: String,
    pub id: String,
    pub kind: String,
    pub summary: String,
    pub since: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
}

const ITEM_COLUMNS: &str = "ext, id, kind, summary, since, expires_at";

fn item_of(r: &Row) -> Result<Item, SqlError> {
    Ok(Item {
        extension_id: r.text(0)?,
        id: r.text(1)?,
        kind: r.text(2)?,
        summary: r.text(3)?,
        since: r.int(4)?,
        expires_at: r.opt_int(5)?,
    })
}

/// `ext IN (?, ...)` over `owners` (never empty: callers check).
fn owners_in(owners: &[String]) -> (String, Vec<SqlValue>) {
    let marks = vec!["?"; owners.len()].join(", ");
    (
        format!("ext IN ({marks})"),
        owners.iter().map(|o| o.as_str().into()).collect(),
    )
}

/// The open items of `session_id` owned by `owners` (the counted owners:
/// see `Extensions::attention_owners`), newest first; `limit` bounds them.
/// Outside transitions (committed state).
pub fn of_session(
    sql: &dyn Sql,
    session_id: &str,
    owners: &[String],
    limit: usize,
) -> Result<Vec<Item>, SqlError> {
    if owners.is_empty() || !ATTENTION.exists(sql) {
        return Ok(Vec::new());
    }
    let (owned, mut params) = owners_in(owners);
    params.insert(0, session_id.into());
    params.push((limit as i64).into());
    read(
        sql,
        &format!(
            "SELECT {ITEM_COLUMNS} FROM {TABLE} WHERE session_id = ? AND {owned}
             ORDER BY since DESC, ext, id LIMIT ?"
        ),
        &params,
    )?
    .iter()
    .map(item_of)
    .collect()
}

/// One stored item, whatever its owner's standing (frames publish what a
/// transition committed).
pub fn item(
    sql: &dyn Sql,
    session_id: &str,
    ext: &str,
    id: &str,
) -> Result<Option<Item>, SqlError> {
    if !ATTENTION.exists(sql) {
        return Ok(None);
    }
    read(
        sql,
        &format!("SELECT {ITEM_COLUMNS} FROM {TABLE} WHERE session_id = ? AND ext = ? AND id = ?"),
        &[session_id.into(), ext.into(), id.into()],
    )?
    .first()
    .map(item_of)
    .transpose()
}

// The owner transactions' statements (`extension/attention.rs`): their
// reads see committed rows even after the transition wrote the table,
// which is sound only because the caller's transition cache holds every
// change it made (and every figure it read before them).

fn count_of(rows: &[Row]) -> Result<i64, SqlError> {
    Ok(rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0))
}

/// How many items `ext` holds across Sessions, as committed.
pub fn owned_count_committed(sql: &dyn Sql, ext: &str) -> Result<usize, SqlError> {
    if !ATTENTION.exists(sql) {
        return Ok(0);
    }
    let rows = sql.query(
        &format!("SELECT count(*) FROM {TABLE} WHERE ext = ?"),
        &[ext.into()],
    )?;
    Ok(count_of(&rows)? as usize)
}

/// A Session's items as `(ext, id)`, as committed; `None` when there is
/// no such Session.
pub fn session_items_committed(
    sql: &dyn Sql,
    session_id: &str,
) -> Result<Option<BTreeSet<(String, String)>>, SqlError> {
    let sessions = sql.query(
        "SELECT count(*) FROM sessions WHERE session_id = ?",
        &[session_id.into()],
    )?;
    if count_of(&sessions)? == 0 {
        return Ok(None);
    }
    if !ATTENTION.exists(sql) {
        return Ok(Some(BTreeSet::new()));
    }
    sql.query(
        &format!("SELECT ext, id FROM {TABLE} WHERE session_id = ?"),
        &[session_id.into()],
    )?
    .iter()
    .map(|r| Ok((r.text(0)?, r.text(1)?)))
    .collect::<Result<BTreeSet<_>, SqlError>>()
    .map(Some)
}

/// The write that sets `item` (its owner's) in `session_id`, replacing
/// the owner's item of the same id.
pub fn put(session_id: &str, item: &Item, now_ms: i64) -> Write {
    (
        format!(
            "INSERT OR REPLACE INTO {TABLE}
                (session_id, ext, id, kind, summary, since, expires_at, updated_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        vec![
            session_id.into(),
            item.extension_id.as_str().into(),
            item.id.as_str().into(),
            item.kind.as_str().into(),
            item.summary.as_str().into(),
            item.since.into(),
            item.expires_at.into(),
            now_ms.into(),
        ],
    )
}

/// The write that clears `ext`'s item `id` from `session_id`.
pub fn delete(session_id: &str, ext: &str, id: &str) -> Write {
    (
        format!("DELETE FROM {TABLE} WHERE session_id = ? AND ext = ? AND id = ?"),
        vec![session_id.into(), ext.into(), id.into()],
    )
}

/// The delivery outbox key of one item.
pub fn delivery_key(ext: &str, session_id: &str, id: &str) -> String {
    format!("attention:{ext}:{session_id}:{id}")
}

/// The delivery outbox body of a change: `item` for a set, `None` for a
/// clear.
pub fn delivery_body(ext: &str, session_id: &str, id: &str, item: Option<&Item>) -> Value {
    json!({
        "type": "attention",
        "op": if item.is_some() { "set" } else { "clear" },
        "extensionId": ext,
        "sessionId": session_id,
        "id": id,
        "item": item,
    })
}

/// What deleting a Session removes: every item it carries, whoever owns
/// it, as `(ext, id)`. A read for the deleting transition's read phase.
pub fn removed_with(sql: &dyn Sql, session_id: &str) -> Result<Vec<(String, String)>, SqlError> {
    if !ATTENTION.exists(sql) {
        return Ok(Vec::new());
    }
    read(
        sql,
        &format!("SELECT ext, id FROM {TABLE} WHERE session_id = ? ORDER BY ext, id"),
        &[session_id.into()],
    )?
    .iter()
    .map(|r| Ok((r.text(0)?, r.text(1)?)))
    .collect()
}

/// The deleting transition's writes: the items read by [`removed_with`]
/// go (their owners' capacity released), each staged as a `clear` for
/// delivery. Not refused at the outbox bound: deleting a Session always
/// works, and stages at most one Session's items beyond it.
pub fn remove_with(
    sql: &dyn Sql,
    session_id: &str,
    removed: &[(String, String)],
    now_ms: i64,
) -> Result<(), SqlError> {
    if removed.is_empty() {
        return Ok(());
    }
    write(
        sql,
        &format!("DELETE FROM {TABLE} WHERE session_id = ?"),
        vec![session_id.into()],
    )?;
    for (ext, id) in removed {
        delivery::stage(
            sql,
            &delivery_key(ext, session_id, id),
            &delivery_body(ext, session_id, id, None),
            now_ms,
        )?;
    }
    Ok(())
}

/// A Session's place in the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InboxState {
    /// Open attention from a counted owner.
    NeedsYou,
    /// A command running or pending.
    Running,
    /// Everything else.
    Settled,
}

impl InboxState {
    fn rank(self) -> i64 {
        match self {
            InboxState::NeedsYou => 0,
            InboxState::Running => 1,
            InboxState::Settled => 2,
        }
    }

    fn of_rank(rank: i64) -> Option<InboxState> {
        match rank {
            0 => Some(InboxState::NeedsYou),
            1 => Some(InboxState::Running),
            2 => Some(InboxState::Settled),
            _ => None,
        }
    }
}

/// One inbox row.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxRow {
    pub session_id: String,
    pub state: InboxState,
    /// The open items of counted owners, newest first, at most
    /// [`INBOX_ATTENTION_PER_ROW_MAX`].
    pub attention: Vec<Item>,
    /// How many items of counted owners are open.
    pub attention_count: u64,
    /// The Session's latest activity (ms since epoch): its creation, its
    /// newest command's admission or settlement, a counted owner's latest
    /// attention change.
    pub updated_at: i64,
    /// Its turn, paused by a budget (the Session needs you too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<crate::budget::Paused>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxPage {
    pub sessions: Vec<InboxRow>,
    pub next_cursor: Option<String>,
}

/// Where a page ends: the last row's sort key. Opaque to clients:
/// `<rank>.<updatedAt>.<sessionId>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxCursor {
    rank: i64,
    updated_at: i64,
    session_id: String,
}

impl InboxCursor {
    pub fn parse(text: &str) -> Option<InboxCursor> {
        let mut parts = text.splitn(3, '.');
        let rank: i64 = parts.next()?.parse().ok()?;
        let updated = parts.next()?;
        let session_id = parts.next()?.to_owned();
        InboxState::of_rank(rank)?;
        let updated_at: i64 = updated.parse().ok()?;
        let id_ok = crate::text::is_id(&session_id, SESSION_ID_BYTES_MAX);
        (id_ok && updated_at.to_string() == updated).then_some(InboxCursor {
            rank,
            updated_at,
            session_id,
        })
    }

    fn text(&self) -> String {
        format!("{}.{}.{}", self.rank, self.updated_at, self.session_id)
    }
}

/// One inbox page: the Agent's Sessions, needs_you ahead of running ahead
/// of settled, within a state the latest activity first, then by
/// sessionId. `owners`: the counted owners. One bounded query over the
/// Sessions (at most `SESSIONS_PER_AGENT_MAX`, each ranked through its
/// indexes), then each row's items: only the page's are read.
pub fn inbox(
    sql: &dyn Sql,
    owners: &[String],
    limit: usize,
    after: Option<&InboxCursor>,
) -> Result<InboxPage, SqlError> {
    let counted = !owners.is_empty() && ATTENTION.exists(sql);
    let mut params: Vec<SqlValue> = Vec::new();
    let (needs_you, attention_at) = if counted {
        let (owned, owner_params) = owners_in(owners);
        params.extend(owner_params.iter().cloned());
        params.extend(owner_params);
        (
            format!(
                "WHEN EXISTS (SELECT 1 FROM {TABLE} a
                     WHERE a.session_id = s.session_id AND a.{owned}) THEN 0"
            ),
            format!(
                "coalesce((SELECT max(a.updated_at) FROM {TABLE} a
                     WHERE a.session_id = s.session_id AND a.{owned}), 0)"
            ),
        )
    } else {
        (String::new(), "0".to_owned())
    };
    // A turn a budget paused needs you as well.
    let budgeted = crate::budget::counted(sql);
    let needs_you = if budgeted {
        format!(
            "WHEN EXISTS (SELECT 1 FROM shiitake_paused p WHERE p.session_id = s.session_id)
                 THEN 0 {needs_you}"
        )
    } else {
        needs_you
    };
    let mut filter = String::new();
    if let Some(c) = after {
        filter =
            "WHERE rank > ? OR (rank = ? AND (updated < ? OR (updated = ? AND session_id > ?)))"
                .to_owned();
        params.extend([
            c.rank.into(),
            c.rank.into(),
            c.updated_at.into(),
            c.updated_at.into(),
            c.session_id.as_str().into(),
        ]);
    }
    params.push(((limit + 1) as i64).into());
    let rows = read(
        sql,
        &format!(
            "SELECT session_id, rank, updated FROM (
                SELECT s.session_id AS session_id,
                    CASE {needs_you}
                        WHEN EXISTS (SELECT 1 FROM commands AS c INDEXED BY commands_unsettled
                            WHERE c.session_id = s.session_id AND c.settled_at IS NULL) THEN 1
                        ELSE 2 END AS rank,
                    max(s.created_at,
                        coalesce((SELECT max(c.accepted_at, coalesce(c.settled_at, 0))
                            FROM commands c WHERE c.session_id = s.session_id
                            ORDER BY c.seq DESC LIMIT 1), 0),
                        {attention_at}) AS updated
                FROM sessions s)
             {filter}
             ORDER BY rank, updated DESC, session_id LIMIT ?"
        ),
        &params,
    )?;
    let more = rows.len() > limit;
    let mut sessions = Vec::with_capacity(limit.min(rows.len()));
    for r in rows.iter().take(limit) {
        let session_id = r.text(0)?;
        let state = InboxState::of_rank(r.int(1)?)
            .ok_or_else(|| SqlError::Decode("inbox: a rank out of range".into()))?;
        let (attention, attention_count) = if state == InboxState::NeedsYou {
            let items = of_session(sql, &session_id, owners, INBOX_ATTENTION_PER_ROW_MAX)?;
            let count = if items.len() < INBOX_ATTENTION_PER_ROW_MAX {
                items.len() as u64
            } else {
                count(sql, &session_id, owners)?
            };
            (items, count)
        } else {
            (Vec::new(), 0)
        };
        let paused = match state {
            InboxState::NeedsYou if budgeted => crate::budget::paused_of(sql, &session_id)?,
            _ => None,
        };
        sessions.push(InboxRow {
            paused,
            session_id,
            state,
            attention,
            attention_count,
            updated_at: r.int(2)?,
        });
    }
    let next_cursor = match (more, sessions.last()) {
        (true, Some(last)) => Some(
            InboxCursor {
                rank: last.state.rank(),
                updated_at: last.updated_at,
                session_id: last.session_id.clone(),
            }
            .text(),
        ),
        _ => None,
    };
    Ok(InboxPage {
        sessions,
        next_cursor,
    })
}

/// How many items of `owners` `session_id` carries.
fn count(sql: &dyn Sql, session_id: &str, owners: &[String]) -> Result<u64, SqlError> {
    let (owned, mut params) = owners_in(owners);
    params.insert(0, session_id.into());
    let rows = read(
        sql,
        &format!("SELECT count(*) FROM {TABLE} WHERE session_id = ? AND {owned}"),
        &params,
    )?;
    Ok(rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0) as u64)
}
