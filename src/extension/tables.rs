//! The extensions' tables, a feature group (`store::schema::EXTENSIONS`)
//! made with the first status row (an Agent whose roster is empty has
//! none, and its readers answer empty without a statement): one status
//! row per extension, the timers, the settled-work log a stopped extension
//! replays, command request ids for replay, and one state table per
//! extension (so a transition may read one extension's state after writing
//! another's: `sql::read_beside`), made with its status row
//! ([`create_state`]). Every other write follows a status row. Every
//! statement on these tables is here: the readers run them, the write
//! builders return them for a call's effect set (`effects.rs`).

use crate::sql::{cached_read, read, read_beside, write, Row, Sql, SqlError, Write};
use crate::store::schema::{self, EXTENSIONS};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

const META: &str = "shiitake_extensions";
const TIMERS: &str = "shiitake_ext_timers";
const LOG: &str = "shiitake_ext_log";
const REQUESTS: &str = "shiitake_ext_requests";

/// The state table of extension `id` (a checked name: `[a-z][a-z0-9_]*`).
fn state_table(id: &str) -> String {
    schema::extension_state_table(id)
}

/// Stages the creation of extension `id`'s state table: a write of the
/// transition that records its first status row.
pub(super) fn create_state(sql: &dyn Sql, id: &str) -> Result<(), SqlError> {
    write(sql, &schema::extension_state(id), Vec::new())
}

/// One extension's status row.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MetaRow {
    pub revision: String,
    pub state_version: u32,
    pub stopped: Option<String>,
    pub stopped_at: Option<i64>,
    pub cursor: Option<i64>,
}

impl MetaRow {
    /// Stopped, or still replaying missed settled work.
    pub fn behind(&self) -> bool {
        self.stopped.is_some() || self.cursor.is_some()
    }
}

/// Every extension's status row. Kept between transitions (a turn asks
/// several times; the rows change when an extension stops, resumes or
/// catches up).
pub(super) fn meta_rows(sql: &dyn Sql) -> Result<Rc<BTreeMap<String, MetaRow>>, SqlError> {
    if !EXTENSIONS.exists(sql) {
        return Ok(Rc::default());
    }
    cached_read(sql, "extension status rows", META, || {
        read_beside(
            sql,
            &[META],
            &format!("SELECT id, revision, state_version, stopped, stopped_at, cursor FROM {META}"),
            &[],
        )?
        .iter()
        .map(|r| {
            Ok((
                r.text(0)?,
                MetaRow {
                    revision: r.text(1)?,
                    state_version: u32::try_from(r.int(2)?).unwrap_or(u32::MAX),
                    stopped: r.opt_text(3)?,
                    stopped_at: r.opt_int(4)?,
                    cursor: r.opt_int(5)?,
                },
            ))
        })
        .collect()
    })
}

pub(super) fn put_meta(sql: &dyn Sql, id: &str, m: &MetaRow, now_ms: i64) -> Result<(), SqlError> {
    EXTENSIONS.ensure(sql)?;
    write(
        sql,
        &format!(
            "INSERT OR REPLACE INTO {META}
                (id, revision, state_version, stopped, stopped_at, cursor, updated_at)
             VALUES (?, ?, ?, ?, ?, ?, ?)"
        ),
        vec![
            id.into(),
            m.revision.as_str().into(),
            i64::from(m.state_version).into(),
            m.stopped.clone().into(),
            m.stopped_at.into(),
            m.cursor.into(),
            now_ms.into(),
        ],
    )
}

/// Timer names by extension (kept between transitions).
pub(super) fn timer_names(
    sql: &dyn Sql,
) -> Result<Rc<BTreeMap<String, BTreeSet<String>>>, SqlError> {
    if !EXTENSIONS.exists(sql) {
        return Ok(Rc::default());
    }
    cached_read(sql, "extension timer names", TIMERS, || {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in read_beside(
            sql,
            &[TIMERS],
            &format!("SELECT ext, name FROM {TIMERS}"),
            &[],
        )? {
            out.entry(r.text(0)?).or_default().insert(r.text(1)?);
        }
        Ok(out)
    })
}

/// The earliest timer of each extension that has one (kept between
/// transitions): what a pass with nothing due and the alarm read.
pub(super) fn earliest_timers(sql: &dyn Sql) -> Result<Rc<Vec<(String, i64)>>, SqlError> {
    if !EXTENSIONS.exists(sql) {
        return Ok(Rc::default());
    }
    cached_read(sql, "extension earliest timers", TIMERS, || {
        read_beside(
            sql,
            &[TIMERS],
            &format!("SELECT ext, min(due_at) FROM {TIMERS} GROUP BY ext"),
            &[],
        )?
        .iter()
        .map(|r| Ok((r.text(0)?, r.int(1)?)))
        .collect()
    })
}

/// The settled-work log's last seq (kept between transitions: written only
/// while an extension is behind).
pub(super) fn log_head(sql: &dyn Sql) -> Result<i64, SqlError> {
    if !EXTENSIONS.exists(sql) {
        return Ok(0);
    }
    let head = cached_read(sql, "extension log head", LOG, || {
        let rows = read_beside(
            sql,
            &[LOG],
            &format!("SELECT coalesce(max(seq), 0) FROM {LOG}"),
            &[],
        )?;
        rows.first().map(|r| r.int(0)).unwrap_or(Ok(0))
    })?;
    Ok(*head)
}

/// One extension's rows: collection -> key -> row.
pub(super) type Rows = BTreeMap<String, BTreeMap<String, Value>>;

pub(super) fn load_rows(sql: &dyn Sql, id: &str) -> Result<Rows, SqlError> {
    let table = state_table(id);
    let mut rows: Rows = BTreeMap::new();
    for r in read_beside(
        sql,
        &[&table],
        &format!("SELECT collection, key, value FROM {table}"),
        &[],
    )? {
        let value: Value = serde_json::from_str(&r.text(2)?)
            .map_err(|e| SqlError::Decode(format!("{table}: stored row: {e}")))?;
        rows.entry(r.text(0)?)
            .or_default()
            .insert(r.text(1)?, value);
    }
    Ok(rows)
}

/// A due timer.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TimerRow {
    pub ext: String,
    pub name: String,
    pub due_at: i64,
    pub session_id: Option<String>,
    pub payload: Value,
}

fn timer_row(r: &Row) -> Result<TimerRow, SqlError> {
    Ok(TimerRow {
        ext: r.text(0)?,
        name: r.text(1)?,
        due_at: r.int(2)?,
        session_id: r.opt_text(3)?,
        payload: serde_json::from_str(&r.text(4)?)
            .map_err(|e| SqlError::Decode(format!("{TIMERS}: payload: {e}")))?,
    })
}

/// Timers due at `now_ms`, earliest first.
pub(super) fn due_timers(
    sql: &dyn Sql,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<TimerRow>, SqlError> {
    read(
        sql,
        &format!(
            "SELECT ext, name, due_at, session_id, payload FROM {TIMERS}
             WHERE due_at <= ? ORDER BY due_at, ext, name LIMIT ?"
        ),
        &[now_ms.into(), (limit as i64).into()],
    )?
    .iter()
    .map(timer_row)
    .collect()
}

pub(super) fn timer(sql: &dyn Sql, ext: &str, name: &str) -> Result<Option<TimerRow>, SqlError> {
    read(
        sql,
        &format!(
            "SELECT ext, name, due_at, session_id, payload FROM {TIMERS} WHERE ext = ? AND name = ?"
        ),
        &[ext.into(), name.into()],
    )?
    .first()
    .map(timer_row)
    .transpose()
}

/// Logged settled work after `cursor`: `(seq, session_id, command_id)`.
pub(super) fn log_after(
    sql: &dyn Sql,
    cursor: i64,
    limit: usize,
) -> Result<Vec<(i64, String, String)>, SqlError> {
    read(
        sql,
        &format!(
            "SELECT seq, session_id, command_id FROM {LOG} WHERE seq > ? ORDER BY seq LIMIT ?"
        ),
        &[cursor.into(), (limit as i64).into()],
    )?
    .iter()
    .map(|r| Ok((r.int(0)?, r.text(1)?, r.text(2)?)))
    .collect()
}

/// A replayed command's stored `(command, input, result)`.
pub(super) fn request(
    sql: &dyn Sql,
    ext: &str,
    scope: &str,
    request_id: &str,
) -> Result<Option<(String, String, String)>, SqlError> {
    read(
        sql,
        &format!(
            "SELECT command, input, result FROM {REQUESTS}
             WHERE ext = ? AND scope = ? AND request_id = ?"
        ),
        &[ext.into(), scope.into(), request_id.into()],
    )?
    .first()
    .map(|r| Ok((r.text(0)?, r.text(1)?, r.text(2)?)))
    .transpose()
}

pub(super) fn request_count(sql: &dyn Sql, ext: &str) -> Result<usize, SqlError> {
    let rows = read(
        sql,
        &format!("SELECT count(*) FROM {REQUESTS} WHERE ext = ?"),
        &[ext.into()],
    )?;
    Ok(rows.first().map(|r| r.int(0)).unwrap_or(Ok(0))? as usize)
}

// Writes, for a call's effect set.

/// Puts row `key` of `collection` in extension `id`'s state.
pub(super) fn put_row(id: &str, collection: &str, key: &str, value: String) -> Write {
    (
        format!(
            "INSERT OR REPLACE INTO {} (collection, key, value) VALUES (?, ?, ?)",
            state_table(id)
        ),
        vec![collection.into(), key.into(), value.into()],
    )
}

/// Deletes row `key` of `collection` from extension `id`'s state.
pub(super) fn delete_row(id: &str, collection: &str, key: &str) -> Write {
    (
        format!(
            "DELETE FROM {} WHERE collection = ? AND key = ?",
            state_table(id)
        ),
        vec![collection.into(), key.into()],
    )
}

/// Sets timer `name` of extension `ext`.
pub(super) fn put_timer(
    ext: &str,
    name: &str,
    due_at: i64,
    session_id: Option<String>,
    payload: String,
) -> Write {
    (
        format!(
            "INSERT OR REPLACE INTO {TIMERS} (ext, name, due_at, session_id, payload)
             VALUES (?, ?, ?, ?, ?)"
        ),
        vec![
            ext.into(),
            name.into(),
            due_at.into(),
            session_id.into(),
            payload.into(),
        ],
    )
}

/// Deletes timer `name` of extension `ext` (cancelled, or fired).
pub(super) fn delete_timer(ext: &str, name: &str) -> Write {
    (
        format!("DELETE FROM {TIMERS} WHERE ext = ? AND name = ?"),
        vec![ext.into(), name.into()],
    )
}

/// Logs a settlement some extension missed, as `seq`.
pub(super) fn log(
    sql: &dyn Sql,
    seq: i64,
    session_id: &str,
    command_id: &str,
) -> Result<(), SqlError> {
    write(
        sql,
        &format!("INSERT INTO {LOG} (seq, session_id, command_id) VALUES (?, ?, ?)"),
        vec![seq.into(), session_id.into(), command_id.into()],
    )
}

/// Prunes the log up to `seq`, once no extension has it left to replay.
pub(super) fn prune_log(sql: &dyn Sql, seq: i64) -> Result<(), SqlError> {
    write(
        sql,
        &format!("DELETE FROM {LOG} WHERE seq <= ?"),
        vec![seq.into()],
    )
}

/// A command's request record, for replay: the oldest records of the
/// extension beyond `kept_max` go first (`kept`: how many it holds).
#[allow(clippy::too_many_arguments)]
pub(super) fn put_request(
    ext: &str,
    scope: &str,
    request_id: &str,
    command: &str,
    input: &str,
    result: &str,
    now_ms: i64,
    (kept, kept_max): (usize, usize),
) -> Vec<Write> {
    let mut writes = Vec::new();
    if kept >= kept_max {
        writes.push((
            format!(
                "DELETE FROM {REQUESTS} WHERE rowid IN
                    (SELECT rowid FROM {REQUESTS} WHERE ext = ? ORDER BY rowid LIMIT ?)"
            ),
            vec![ext.into(), ((kept + 1 - kept_max) as i64).into()],
        ));
    }
    writes.push((
        format!(
            "INSERT INTO {REQUESTS} (ext, scope, request_id, command, input, result, at)
             VALUES (?, ?, ?, ?, ?, ?, ?)"
        ),
        vec![
            ext.into(),
            scope.into(),
            request_id.into(),
            command.into(),
            input.into(),
            result.into(),
            now_ms.into(),
        ],
    ));
    writes
}
