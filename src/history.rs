//! Producer history (seed shiitake.md "Client entries"), its rules and its
//! storage, below both `extension/` (which records it) and `agent.rs`
//! (which deletes it with a Session): an extension that
//! declares `.projection({ history: true })` keeps, per Session, the values
//! its Session projection took. Each owner transaction that changes the
//! extension's state projects the new state and records the value in that
//! same transaction (so a failing hook records nothing); an unchanged value
//! records nothing. At most [`EXTENSION_HISTORY_EVENTS_MAX`] events and
//! [`EXTENSION_HISTORY_BYTES_MAX`] bytes are kept, the oldest dropped and
//! counted in `omitted`. One row per (extension, Session) in one table,
//! read a Session at a time (every extension's row of it at once, so one
//! transition reads before it writes any) and deleted with the Session.

use crate::limits::{EXTENSION_HISTORY_BYTES_MAX, EXTENSION_HISTORY_EVENTS_MAX};
use crate::sql::{read_beside, write, Sql, SqlError, Write};
use crate::store::schema::HISTORY;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

pub const TABLE: &str = "shiitake_ext_history";

/// One Session's retained history, stored and served as this JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Oldest first.
    pub events: Vec<Event>,
    /// Events dropped to stay within the bounds.
    pub omitted: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The producer-local sequence (1, 2, ...), never reused: not a Session
    /// position.
    pub sequence: u64,
    /// ms since epoch, the transaction's time.
    pub at: i64,
    /// The Session projection after that transaction (`null`: none).
    pub value: Value,
}

impl History {
    /// Records `value` unless it equals the newest event's (or is the first
    /// and `null`), then drops the oldest events past the bounds. Answers
    /// whether it recorded.
    pub fn record(&mut self, value: Value, at: i64) -> bool {
        let unchanged = match self.events.last() {
            Some(last) => last.value == value,
            None => value.is_null(),
        };
        if unchanged {
            return false;
        }
        let sequence = self.events.last().map_or(self.omitted, |e| e.sequence) + 1;
        self.events.push(Event {
            sequence,
            at,
            value,
        });
        // The newest event always stays (a value is at most 16 KiB).
        while self.events.len() > 1
            && (self.events.len() > EXTENSION_HISTORY_EVENTS_MAX
                || self.bytes() > EXTENSION_HISTORY_BYTES_MAX)
        {
            self.events.remove(0);
            self.omitted += 1;
        }
        true
    }

    /// Bytes of the retained events, as JSON.
    pub fn bytes(&self) -> usize {
        serde_json::to_string(&self.events).map_or(0, |t| t.len())
    }
}

/// Every extension's history of `session_id`, by extension id.
pub fn load(sql: &dyn Sql, session_id: &str) -> Result<BTreeMap<String, History>, SqlError> {
    if !HISTORY.exists(sql) {
        return Ok(BTreeMap::new());
    }
    read_beside(
        sql,
        &[TABLE],
        &format!("SELECT ext, body FROM {TABLE} WHERE session_id = ?"),
        &[session_id.into()],
    )?
    .iter()
    .map(|r| {
        let body = crate::json::from_text(&r.text(1)?)
            .map_err(|e| SqlError::Decode(format!("{TABLE}: stored history: {e}")))?;
        Ok((r.text(0)?, body))
    })
    .collect()
}

/// The write that stores extension `id`'s `history` of `session_id` (its
/// transition makes the table first: `store::schema::HISTORY`).
pub fn store(id: &str, session_id: &str, history: &History) -> Write {
    let body = serde_json::to_string(history).unwrap_or_default();
    (
        format!("INSERT OR REPLACE INTO {TABLE} (session_id, ext, body) VALUES (?, ?, ?)"),
        vec![session_id.into(), id.into(), body.into()],
    )
}

/// Whether any history may be kept (most Agents keep none: no statement):
/// the deleting transition asks.
pub fn any(sql: &dyn Sql) -> bool {
    HISTORY.exists(sql)
}

/// Deletes every extension's history of a deleted Session (in the
/// deleting transition, after [`any`]).
pub fn forget_session(sql: &dyn Sql, session_id: &str) -> Result<(), SqlError> {
    write(
        sql,
        &format!("DELETE FROM {TABLE} WHERE session_id = ?"),
        vec![session_id.into()],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unchanged_values_record_nothing_and_the_bounds_count_what_they_drop() {
        let mut h = History::default();
        assert!(!h.record(Value::Null, 1), "a first null is no change");
        assert!(h.record(json!({"n": 0}), 1));
        assert!(!h.record(json!({"n": 0}), 2), "the same value again");
        for n in 1..EXTENSION_HISTORY_EVENTS_MAX as u64 {
            assert!(h.record(json!({ "n": n }), 3));
        }
        // At the limit: 32 events, none omitted.
        assert_eq!(
            (h.events.len(), h.omitted),
            (EXTENSION_HISTORY_EVENTS_MAX, 0)
        );
        // One past: the oldest goes, counted.
        assert!(h.record(Value::Null, 4));
        assert_eq!(
            (h.events.len(), h.omitted),
            (EXTENSION_HISTORY_EVENTS_MAX, 1)
        );
        assert_eq!(h.events[0].sequence, 2);
        assert_eq!(h.events.last().unwrap().sequence, 33);
        assert!(h
            .events
            .windows(2)
            .all(|w| w[1].sequence == w[0].sequence + 1));
    }

    #[test]
    fn the_byte_bound_drops_the_oldest_and_keeps_the_newest() {
        let mut h = History::default();
        let big = |c: char| json!({ "text": c.to_string().repeat(10_000) });
        for c in ['a', 'b', 'c'] {
            h.record(big(c), 1);
        }
        // Three 10 KB values fit in 32 KiB.
        assert_eq!((h.events.len(), h.omitted), (3, 0));
        assert!(h.bytes() <= EXTENSION_HISTORY_BYTES_MAX);
        h.record(big('d'), 2);
        assert_eq!((h.events.len(), h.omitted), (3, 1));
        assert_eq!(h.events[0].value, big('b'));
        assert!(h.bytes() <= EXTENSION_HISTORY_BYTES_MAX);
        // A sequence continues past dropped events (omitted + kept).
        assert_eq!(h.events.last().unwrap().sequence, 4);
    }
}
