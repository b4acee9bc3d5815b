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
//! The lane's own durable state is one row ([`LANE`], [`Lane`]): a failed
//! pass persists its retry (`attempts`, `retry_at`, the bounded, redacted
//! `error`), kept until a pass succeeds (never given up); a success clears
//! it. The host schedules the lane from [`Lane::deadline`]; a pass's
//! batches, its tick and what each outcome writes are [`LanePass`]'s.
//!
//! Both tables are a feature group (`store::schema::DELIVERY`), made with
//! the first entry or failing pass: without it there is nothing to deliver.

use crate::limits::{
    DELIVERY_PENDING_MAX, DIAGNOSTIC_BYTES_MAX, HOST_DELIVERY_BATCH_MAX, HOST_PASS_BATCHES_MAX,
};
use crate::sql::{atomically, read, write, Sql, SqlError, SqlValue};
use crate::store::schema::DELIVERY;
use serde_json::Value;

const OUTBOX: &str = "shiitake_delivery";
/// The host work lane's retry state: at most one row (`id = 1`), present
/// only while the lane is failing.
pub const LANE: &str = "shiitake_host_lane";

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
    count_pending(sql, true)
}

/// [`pending_count`] in a transition that may have staged entries already:
/// the committed count, which the caller's own tally of its staging
/// completes (`extension/attention.rs`).
pub fn pending_count_committed(sql: &dyn Sql) -> Result<u64, SqlError> {
    count_pending(sql, false)
}

/// `checked`: refused after a write of the open transition (`sql::read`).
fn count_pending(sql: &dyn Sql, checked: bool) -> Result<u64, SqlError> {
    if !DELIVERY.exists(sql) {
        return Ok(0);
    }
    let query = format!("SELECT COUNT(*) FROM {OUTBOX}");
    let rows = match checked {
        true => read(sql, &query, &[])?,
        false => sql.query(&query, &[])?,
    };
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
    DELIVERY.ensure(sql)?;
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
    if !DELIVERY.exists(sql) {
        return Ok(Vec::new());
    }
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

/// When a failed pass is tried again: the ordinary retry policy, base,
/// 2·base, 4·base, ... capped at `max_ms`, never given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanePolicy {
    pub base_ms: u64,
    pub max_ms: u64,
}

impl Default for LanePolicy {
    fn default() -> Self {
        LanePolicy {
            base_ms: crate::limits::RETRY_BASE_MS_DEFAULT,
            max_ms: crate::limits::RETRY_MAX_MS_DEFAULT,
        }
    }
}

impl LanePolicy {
    /// The wait after `failures` consecutive failed passes (1-based).
    pub fn delay_ms(&self, failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(63);
        self.base_ms
            .saturating_mul(1u64 << doublings)
            .min(self.max_ms)
    }
}

/// The lane's durable state: the default (no row) is a healthy lane.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lane {
    /// Consecutive failed passes.
    pub attempts: u32,
    /// When the failed pass is tried again (ms since epoch).
    pub retry_at: Option<i64>,
    /// Why the last pass failed: bounded, redacted by the host.
    pub error: Option<String>,
}

impl Lane {
    /// Whether a pass may run now: no retry waiting.
    pub fn due(&self, now_ms: i64) -> bool {
        self.retry_at.is_none_or(|at| at <= now_ms)
    }

    /// The lane's deadline for the one alarm: its retry while failing;
    /// otherwise now when entries wait; else none.
    pub fn deadline(&self, pending: bool, now_ms: i64) -> Option<i64> {
        match self.retry_at {
            Some(at) => Some(at.max(now_ms)),
            None if pending => Some(now_ms),
            None => None,
        }
    }

    /// The state after a pass failed at `now_ms` with `error`.
    pub fn failed(&self, policy: &LanePolicy, now_ms: i64, error: &str) -> Lane {
        let attempts = self.attempts.saturating_add(1);
        let mut error = error.to_owned();
        crate::text::truncate(&mut error, DIAGNOSTIC_BYTES_MAX);
        Lane {
            attempts,
            retry_at: Some(now_ms.saturating_add(policy.delay_ms(attempts) as i64)),
            error: Some(error),
        }
    }
}

/// The lane's state (outside any transition).
pub fn lane(sql: &dyn Sql) -> Result<Lane, SqlError> {
    if !DELIVERY.exists(sql) {
        return Ok(Lane::default());
    }
    let rows = read(
        sql,
        &format!("SELECT attempts, retry_at, error FROM {LANE} WHERE id = 1"),
        &[],
    )?;
    let Some(row) = rows.first() else {
        return Ok(Lane::default());
    };
    Ok(Lane {
        attempts: u32::try_from(row.int(0)?).unwrap_or(u32::MAX),
        retry_at: Some(row.int(1)?),
        error: Some(row.text(2)?),
    })
}

/// Persists `state` as a write of the open transition: a failing state as
/// the row, a healthy one by deleting it.
pub fn set_lane(sql: &dyn Sql, state: &Lane) -> Result<(), SqlError> {
    match state.retry_at {
        Some(at) => {
            DELIVERY.ensure(sql)?;
            write(
                sql,
                &format!(
                    "INSERT OR REPLACE INTO {LANE} (id, attempts, retry_at, error) VALUES (1, ?, ?, ?)"
                ),
                vec![
                    SqlValue::Integer(i64::from(state.attempts)),
                    SqlValue::Integer(at),
                    SqlValue::Text(state.error.clone().unwrap_or_default()),
                ],
            )
        }
        // Without the group there is no row to delete.
        None if !DELIVERY.exists(sql) => Ok(()),
        None => write(sql, &format!("DELETE FROM {LANE}"), Vec::new()),
    }
}

/// The lane's deadline from the store (see [`Lane::deadline`]).
pub fn next_deadline(sql: &dyn Sql, now_ms: i64) -> Result<Option<i64>, SqlError> {
    let state = lane(sql)?;
    if state.retry_at.is_some() {
        return Ok(state.deadline(false, now_ms));
    }
    let pending = !pending(sql, 1)?.is_empty();
    Ok(state.deadline(pending, now_ms))
}

/// What a lane pass does next ([`LanePass::next`]).
#[derive(Debug, Clone, PartialEq)]
pub enum LaneStep {
    /// Hand these entries to the host, then tell [`LanePass::delivered`].
    Deliver(Vec<Entry>),
    /// Call the host's `tick`, then ask again.
    Tick,
    /// The pass's work is done; `more`: entries are left past its bound.
    Done { more: bool },
}

/// One pass of the host work lane as a sans-IO machine: the oldest
/// entries in batches of `HOST_DELIVERY_BATCH_MAX`, each acknowledged
/// through its last `seq` in its own transition once the host took it, at
/// most `HOST_PASS_BATCHES_MAX` batches, then the host's `tick` (if it has
/// one). The host performs each step and ends the pass with
/// [`LanePass::succeeded`] or [`LanePass::failed`], which writes the
/// lane's retry state; a batch not acknowledged comes again (at least
/// once, same `seq`).
#[derive(Debug)]
pub struct LanePass {
    state: Lane,
    tick: bool,
    batches: usize,
    /// Set once the batches are done: `Some(more)`.
    finished: Option<bool>,
    ticked: bool,
}

impl LanePass {
    /// A pass at `now_ms`, or none while a retry waits. `tick`: the host
    /// has a `tick` to call after delivering.
    pub fn start(sql: &dyn Sql, now_ms: i64, tick: bool) -> Result<Option<LanePass>, SqlError> {
        let state = lane(sql)?;
        Ok(state.due(now_ms).then_some(LanePass {
            state,
            tick,
            batches: 0,
            finished: None,
            ticked: false,
        }))
    }

    /// The lane's state the pass started from.
    pub fn state(&self) -> &Lane {
        &self.state
    }

    pub fn next(&mut self, sql: &dyn Sql) -> Result<LaneStep, SqlError> {
        let more = match self.finished {
            Some(more) => more,
            None => {
                let entries = pending(sql, HOST_DELIVERY_BATCH_MAX)?;
                if !entries.is_empty() && self.batches < HOST_PASS_BATCHES_MAX {
                    return Ok(LaneStep::Deliver(entries));
                }
                // Entries left past the bound wait for the next pass,
                // after this one's tick.
                let more = !entries.is_empty();
                self.finished = Some(more);
                more
            }
        };
        if self.tick && !std::mem::replace(&mut self.ticked, true) {
            return Ok(LaneStep::Tick);
        }
        Ok(LaneStep::Done { more })
    }

    /// The host took the batch ending at `through_seq`: acknowledged in
    /// one transition.
    pub fn delivered(&mut self, sql: &dyn Sql, through_seq: i64) -> Result<(), SqlError> {
        atomically(sql, || acknowledge(sql, through_seq))?;
        self.batches += 1;
        Ok(())
    }

    /// The pass succeeded: a failing lane's retry is cleared.
    pub fn succeeded(self, sql: &dyn Sql) -> Result<(), SqlError> {
        if self.state == Lane::default() {
            return Ok(());
        }
        atomically(sql, || set_lane(sql, &Lane::default()))
    }

    /// The pass failed at `now_ms` with `error` (redacted by the host):
    /// its retry is persisted; answers the state written.
    pub fn failed(
        self,
        sql: &dyn Sql,
        policy: &LanePolicy,
        now_ms: i64,
        error: &str,
    ) -> Result<Lane, SqlError> {
        let failed = self.state.failed(policy, now_ms, error);
        atomically(sql, || set_lane(sql, &failed))?;
        Ok(failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::atomically;
    use crate::sql::native::NativeSql;
    use serde_json::json;

    #[test]
    fn a_failing_pass_makes_the_delivery_tables_of_a_fresh_store() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let failed = Lane::default().failed(&LanePolicy::default(), 10, "refused");
        atomically(&sql, || set_lane(&sql, &failed)).unwrap();
        assert!(DELIVERY.exists(&sql));
        assert_eq!(lane(&sql).unwrap(), failed);
    }

    #[test]
    fn a_newer_change_replaces_an_undelivered_one_above_every_seq() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
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

    #[test]
    fn the_retry_doubles_from_base_to_the_cap_and_never_gives_up() {
        let policy = LanePolicy::default();
        let delays: Vec<u64> = (1..=8).map(|n| policy.delay_ms(n)).collect();
        assert_eq!(
            delays,
            [3_000, 6_000, 12_000, 24_000, 48_000, 60_000, 60_000, 60_000]
        );
        assert_eq!(policy.delay_ms(u32::MAX), 60_000);
        let short = LanePolicy {
            base_ms: 100,
            max_ms: 250,
        };
        assert_eq!(
            [short.delay_ms(1), short.delay_ms(2), short.delay_ms(3)],
            [100, 200, 250]
        );
    }

    #[test]
    fn lane_transitions_and_deadline() {
        let healthy = Lane::default();
        assert!(healthy.due(0));
        assert_eq!(healthy.deadline(false, 10), None);
        assert_eq!(healthy.deadline(true, 10), Some(10));
        let policy = LanePolicy::default();
        let once = healthy.failed(&policy, 1_000, "boom");
        assert_eq!(once.attempts, 1);
        assert_eq!(once.retry_at, Some(4_000));
        assert_eq!(once.error.as_deref(), Some("boom"));
        assert!(!once.due(3_999));
        assert!(once.due(4_000));
        // While failing, the retry is the deadline, entries or not.
        assert_eq!(once.deadline(true, 2_000), Some(4_000));
        assert_eq!(once.deadline(false, 2_000), Some(4_000));
        assert_eq!(once.deadline(false, 9_000), Some(9_000));
        let twice = once.failed(&policy, 4_000, &"x".repeat(5_000));
        assert_eq!(twice.attempts, 2);
        assert_eq!(twice.retry_at, Some(10_000));
        assert!(twice.error.as_ref().unwrap().len() <= DIAGNOSTIC_BYTES_MAX);
    }

    #[test]
    fn lane_state_persists_and_a_success_clears_it() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        // A fresh store has no delivery tables: every read answers without
        // a statement (one would fail), a healthy lane writes nothing.
        assert_eq!(lane(&sql).unwrap(), Lane::default());
        assert_eq!(next_deadline(&sql, 5).unwrap(), None);
        assert_eq!(pending_count(&sql).unwrap(), 0);
        atomically(&sql, || set_lane(&sql, &Lane::default())).unwrap();
        assert!(!DELIVERY.exists(&sql));
        // The first entry makes them.
        atomically(&sql, || stage(&sql, "k", &json!({"a": 1}), 5)).unwrap();
        assert!(DELIVERY.exists(&sql));
        assert_eq!(next_deadline(&sql, 6).unwrap(), Some(6));
        let failed = Lane::default().failed(&LanePolicy::default(), 10, "refused");
        atomically(&sql, || set_lane(&sql, &failed)).unwrap();
        assert_eq!(lane(&sql).unwrap(), failed);
        assert_eq!(next_deadline(&sql, 11).unwrap(), Some(3_010));
        let again = lane(&sql)
            .unwrap()
            .failed(&LanePolicy::default(), 3_010, "refused");
        atomically(&sql, || set_lane(&sql, &again)).unwrap();
        assert_eq!(lane(&sql).unwrap().attempts, 2);
        atomically(&sql, || set_lane(&sql, &Lane::default())).unwrap();
        assert_eq!(lane(&sql).unwrap(), Lane::default());
        assert_eq!(next_deadline(&sql, 20).unwrap(), Some(20));
        atomically(&sql, || acknowledge(&sql, i64::MAX)).unwrap();
        assert_eq!(next_deadline(&sql, 21).unwrap(), None);
    }

    #[test]
    fn a_pass_delivers_bounded_batches_then_ticks_and_its_outcome_sets_the_retry() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let total = HOST_DELIVERY_BATCH_MAX * HOST_PASS_BATCHES_MAX + 1;
        atomically(&sql, || {
            for n in 0..total {
                stage(&sql, &format!("k{n}"), &json!(n), 1)?;
            }
            Ok::<_, SqlError>(())
        })
        .unwrap();
        let mut pass = LanePass::start(&sql, 5, true).unwrap().expect("due");
        let mut batches = 0;
        loop {
            match pass.next(&sql).unwrap() {
                LaneStep::Deliver(entries) => {
                    assert_eq!(entries.len(), HOST_DELIVERY_BATCH_MAX);
                    batches += 1;
                    pass.delivered(&sql, entries.last().unwrap().seq).unwrap();
                }
                LaneStep::Tick => break,
                LaneStep::Done { .. } => panic!("a host with a tick is ticked"),
            }
        }
        assert_eq!(batches, HOST_PASS_BATCHES_MAX);
        // One entry is left past the bound, for the next pass.
        assert_eq!(pass.next(&sql).unwrap(), LaneStep::Done { more: true });
        assert_eq!(pending_count(&sql).unwrap(), 1);
        // The pass fails after all: its retry is persisted; a pass before
        // the retry is none; the next one delivers the batch again and its
        // success clears the retry.
        let policy = LanePolicy {
            base_ms: 100,
            max_ms: 100,
        };
        let failed = pass.failed(&sql, &policy, 10, "refused").unwrap();
        assert_eq!(lane(&sql).unwrap(), failed);
        assert!(LanePass::start(&sql, 109, false).unwrap().is_none());
        let mut pass = LanePass::start(&sql, 110, false).unwrap().expect("due");
        let LaneStep::Deliver(again) = pass.next(&sql).unwrap() else {
            panic!("the batch comes again");
        };
        assert_eq!(again.len(), 1);
        // Not acknowledged: the pass ends without a tick (the host has
        // none), entries left.
        pass.succeeded(&sql).unwrap();
        assert_eq!(lane(&sql).unwrap(), Lane::default());
        assert_eq!(pending_count(&sql).unwrap(), 1);
    }
}
