//! Replay: a resumed extension's settled hook runs over the settlements it
//! missed, each exactly once, in order, through its cursor; the log keeps
//! only what some extension still has to replay.

use super::effects::{Outcome, Stop};
use super::settled::{settled_event, CommandRef};
use super::{tables, Cache, Entry, Extensions};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::limits::EXTENSION_REPLAY_PER_PASS_MAX;
use crate::sql::{atomically, Sql, SqlError};
use crate::store::Store;

/// One logged settlement: its seq, its Session, its command, the
/// settlement (`None`: its Session was deleted, and its work with it).
type Logged = (i64, String, String, Option<String>);

impl Extensions {
    /// Replays settled work a resumed extension missed: at most
    /// [`EXTENSION_REPLAY_PER_PASS_MAX`] settlements of one extension per
    /// transition, in order, each hook's effects with its cursor. A hook
    /// that fails stops it again at that settlement. Answers whether more
    /// is left.
    pub fn catch_up(&self, ctx: &mut Ctx<'_>) -> Result<bool, ApiError> {
        if self.settled_hooks().next().is_none() {
            return Ok(false);
        }
        let store = ctx.store;
        let sql = store.sql();
        let now_ms = ctx.now_ms;
        atomically(sql, || {
            self.with_cache(sql, |cache| {
                let Some((entry, cursor)) = self.settled_hooks().find_map(|e| {
                    let m = cache.meta.get(e.id())?;
                    (m.stopped.is_none()).then_some((e, m.cursor?))
                }) else {
                    return Ok(false);
                };
                let work = self.replay_reads(store, cache, entry, cursor)?;
                let full = work.len() >= EXTENSION_REPLAY_PER_PASS_MAX;
                let (at, failed) = self.replay(sql, cache, entry, cursor, work, now_ms)?;
                let done = !failed && !full;
                self.advance(sql, cache, entry, (done, at), now_ms)
            })
            .map_err(ApiError::from)
        })
    }

    /// The replay's reads, before any write: the log after `cursor`, each
    /// settlement, the extension's state and (when it keeps one) each
    /// replayed Session's history.
    fn replay_reads(
        &self,
        store: Store<'_>,
        cache: &mut Cache,
        entry: &Entry,
        cursor: i64,
    ) -> Result<Vec<Logged>, SqlError> {
        let sql = store.sql();
        let logged = tables::log_after(sql, cursor, EXTENSION_REPLAY_PER_PASS_MAX)?;
        let mut work = Vec::with_capacity(logged.len());
        for (seq, session_id, command_id) in logged {
            let settlement = store
                .command(&session_id, &command_id)?
                .and_then(|c| c.settlement);
            work.push((seq, session_id, command_id, settlement));
        }
        Self::state(sql, cache, entry)?;
        if entry.manifest.projection.history {
            for (_, session_id, _, _) in &work {
                Self::history(sql, cache, entry, session_id)?;
            }
        }
        Ok(work)
    }

    /// Runs the hook over `work` from `cursor`: the seq it reached, and
    /// whether a hook failed (and stopped the extension there).
    fn replay(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        cursor: i64,
        work: Vec<Logged>,
        now_ms: i64,
    ) -> Result<(i64, bool), SqlError> {
        let mut at = cursor;
        for (seq, session_id, command_id, settlement) in work {
            if let Some(settlement) = settlement {
                let event = settled_event(&session_id, &settlement)?;
                let command = CommandRef {
                    session_id: &session_id,
                    command_id: &command_id,
                };
                match self.call_settled(sql, cache, entry, &command, event, now_ms)? {
                    Ok(effects) => {
                        let done = Outcome::Done(Box::new(effects));
                        self.commit(sql, cache, entry, Some(&session_id), done)?;
                    }
                    Err(failure) => {
                        // Stopped at this settlement, its cursor before it.
                        let stop = Outcome::Stopped(Stop {
                            reason: failure.reason(),
                            cursor: Some(at),
                            at: now_ms,
                        });
                        self.commit(sql, cache, entry, Some(&session_id), stop)?;
                        return Ok((at, true));
                    }
                }
            }
            at = seq;
        }
        Ok((at, false))
    }

    /// Moves `entry`'s cursor to `at` (cleared when `done`) and prunes the
    /// log: answers whether some running extension still has work.
    fn advance(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        (done, at): (bool, i64),
        now_ms: i64,
    ) -> Result<bool, SqlError> {
        let cursor = if done { None } else { Some(at) };
        // A failed hook's stop recorded the cursor already.
        if let Some(meta) = cache
            .meta
            .get_mut(entry.id())
            .filter(|m| m.cursor != cursor)
        {
            meta.cursor = cursor;
            tables::put_meta(sql, entry.id(), meta, now_ms)?;
        }
        // The log keeps what some extension still has to replay.
        let keep_after = self
            .settled_hooks()
            .filter_map(|e| cache.meta.get(e.id())?.cursor)
            .min()
            .unwrap_or(cache.log_head);
        tables::prune_log(sql, keep_after)?;
        Ok(!done
            || self.settled_hooks().any(|e| {
                cache
                    .meta
                    .get(e.id())
                    .is_some_and(|m| m.stopped.is_none() && m.cursor.is_some())
            }))
    }
}
