//! The delivery outbox (seed: "Host metadata", `hostJobs`): facts a
//! transition commits for the host's work lane to deliver after commit,
//! such as attention changes. A transition stages an entry with its other
//! writes ([`stage`]); the lane reads the oldest entries ([`pending`]),
//! hands them to the host and, once the host took them, deletes them
//! ([`acknowledge`]). An entry is keyed: a newer change of the same key
//! replaces an undelivered older one (the host sees the latest), and always
//! takes a higher `seq` than every entry present, so acknowledging through
//! the `seq` a pass read never deletes a change committed during the pass.
//!
//! Created on first use, outside the versioned runtime schema.

use crate::limits::DELIVERY_PENDING_MAX;
use crate::sql::{atomically, read, write, Sql, SqlError, SqlValue};
use serde_json::Value;

pub const OUTBOX: &str = "shiitake_delivery";

/// Creates the outbox if missing; idempotent.
pub fn create(sql: &dyn Sql) -> Result<(), SqlError> {
    atomically(sql, || {
        write(
            sql,
            &format!(
                "CREATE TABLE IF NOT EXISTS {OUTBOX} (
                    seq INTEGER PRIMARY KEY,
                    key TEXT NOT NULL UNIQUE,
                    body TEXT NOT NULL,
                    at INTEGER NOT NULL
                )"
            ),
            Vec::new(),
        )
    })
}

/// One undelivered entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub seq: i64,
    pub key: String,
    pub body: Value,
    /// When the transition that staged it ran (ms since epoch).
    pub at: i64,
}

/// How many entries wait; read before a transition stages more, so it can
/// refuse past [`DELIVERY_PENDING_MAX`] (see [`room`]).
pub fn pending_count(sql: &dyn Sql) -> Result<u64, SqlError> {
    let rows = read(sql, &format!("SELECT COUNT(*) FROM {OUTBOX}"), &[])?;
    Ok(rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0) as u64)
}

/// Whether `adding` more entries fit beside `pending` ones; the refusal
/// names the bound and why it is reached.
pub fn room(pending: u64, adding: u64) -> Result<(), String> {
    if pending + adding > DELIVERY_PENDING_MAX {
        return Err(format!(
            "the delivery outbox holds {pending} undelivered entries; at most \
             {DELIVERY_PENDING_MAX} (the host's work lane is not delivering)"
        ));
    }
    Ok(())
}

/// Stages `body` under `key`, replacing an undelivered entry of the same
/// key, as a write of the open transition.
pub fn stage(sql: &dyn Sql, key: &str, body: &Value, now_ms: i64) -> Result<(), SqlError> {
    // The new seq is computed before REPLACE deletes the older entry, so
    // it is above every seq present, the replaced one included.
    write(
        sql,
        &format!(
            "INSERT OR REPLACE INTO {OUTBOX} (seq, key, body, at)
             VALUES ((SELECT COALESCE(MAX(seq), 0) + 1 FROM {OUTBOX}), ?, ?, ?)"
        ),
        vec![
            SqlValue::Text(key.to_owned()),
            SqlValue::Text(body.to_string()),
            SqlValue::Integer(now_ms),
        ],
    )
}

/// The oldest `limit` undelivered entries.
pub fn pending(sql: &dyn Sql, limit: usize) -> Result<Vec<Entry>, SqlError> {
    read(
        sql,
        &format!("SELECT seq, key, body, at FROM {OUTBOX} ORDER BY seq LIMIT ?"),
        &[SqlValue::Integer(limit as i64)],
    )?
    .iter()
    .map(|r| {
        Ok(Entry {
            seq: r.int(0)?,
            key: r.text(1)?,
            body: serde_json::from_str(&r.text(2)?)
                .map_err(|e| SqlError::Engine(format!("{OUTBOX}: a body is not JSON: {e}")))?,
            at: r.int(3)?,
        })
    })
    .collect()
}

/// Deletes the entries through `seq` (the host took them).
pub fn acknowledge(sql: &dyn Sql, through_seq: i64) -> Result<(), SqlError> {
    write(
        sql,
        &format!("DELETE FROM {OUTBOX} WHERE seq <= ?"),
        vec![SqlValue::Integer(through_seq)],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::native::NativeSql;
    use serde_json::json;

    #[test]
    fn a_newer_change_replaces_an_undelivered_one_above_every_seq() {
        let sql = NativeSql::open_in_memory();
        create(&sql).unwrap();
        create(&sql).unwrap();
        let stage_one = |key: &str, body: Value| {
            atomically(&sql, || stage(&sql, key, &body, 7)).unwrap();
        };
        stage_one("a", json!(1));
        stage_one("b", json!(2));
        stage_one("c", json!(3));
        // A pass reads through seq 3 ...
        let read_by_pass = pending(&sql, 10).unwrap();
        assert_eq!(
            read_by_pass.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        // ... while `c`, the newest, changes again: it must not reuse seq 3.
        stage_one("c", json!(4));
        stage_one("a", json!(5));
        assert_eq!(pending_count(&sql).unwrap(), 3);
        atomically(&sql, || acknowledge(&sql, 3)).unwrap();
        let left = pending(&sql, 10).unwrap();
        assert_eq!(
            left.iter()
                .map(|e| (e.key.as_str(), e.body.clone()))
                .collect::<Vec<_>>(),
            [("c", json!(4)), ("a", json!(5))]
        );
        assert!(left.iter().all(|e| e.seq > 3 && e.at == 7));
        assert_eq!(pending(&sql, 1).unwrap().len(), 1);
    }

    #[test]
    fn room_is_bounded() {
        assert!(room(DELIVERY_PENDING_MAX - 1, 1).is_ok());
        let e = room(DELIVERY_PENDING_MAX, 1).unwrap_err();
        assert!(e.contains(&DELIVERY_PENDING_MAX.to_string()), "{e}");
    }
}
