//! Timers: they ride the Agent's one alarm ([`Extensions::next_deadline`]);
//! a due timer fires once, in its own transition with its hook's effect
//! set and sends ([`Extensions::fire_due`]); a settled hook's staged send
//! rides the same rows and is admitted there (`send.rs`).

use super::effects::{Outcome, Stop};
use super::send::{self, Admit, Sent};
use super::tables::{self, TimerRow};
use super::{Entry, Extensions, Refusal, SessionRef};
use crate::ctx::Ctx;
use crate::ctx::IdSource;
use crate::error::ApiError;
use crate::limits::EXTENSION_TIMERS_PER_PASS_MAX;
use crate::sql::atomically;
use crate::store::Store;
use serde_json::json;

/// What one pass of timers did (`A`: what the caller's admission answers
/// for each send).
#[derive(Debug)]
pub struct Fired<A> {
    pub timers: usize,
    pub sent: Vec<Sent<A>>,
}

impl<A> Default for Fired<A> {
    fn default() -> Self {
        Fired {
            timers: 0,
            sent: Vec::new(),
        }
    }
}

/// What one extension pass did ([`Extensions::pass`]): each half's
/// outcome, or why it failed.
#[derive(Debug)]
pub struct Pass<A> {
    pub fired: Result<Fired<A>, ApiError>,
    /// Whether replay work is left.
    pub replayed: Result<bool, ApiError>,
}

impl Extensions {
    /// The extensions' share of a reconciliation (the alarm's pass): the
    /// due timers fire ([`Extensions::fire_due`]), then a resumed
    /// extension replays what it missed ([`Extensions::catch_up`]); a
    /// failure of one does not keep the other from running. Each is
    /// bounded per pass; what is left shows in [`Extensions::next_deadline`].
    pub fn pass<A: Admit>(&self, ctx: &mut Ctx<'_>, admit: &A) -> Pass<A::Admitted> {
        Pass {
            fired: self.fire_due(ctx, admit),
            replayed: self.catch_up(ctx),
        }
    }

    /// Fires due timers of running extensions, at most
    /// [`EXTENSION_TIMERS_PER_PASS_MAX`], each in its own transition with
    /// the hook's effects and sends (admitted through `admit`); a timer
    /// fires once (deleted in that transition unless the hook set it
    /// again). A hook that fails stops its extension and keeps the timer
    /// for after the resume.
    pub fn fire_due<A: Admit>(
        &self,
        ctx: &mut Ctx<'_>,
        admit: &A,
    ) -> Result<Fired<A::Admitted>, ApiError> {
        if self.roster.is_empty() {
            return Ok(Fired::default());
        }
        let store = ctx.store;
        let sql = store.sql();
        let now_ms = ctx.now_ms;
        let mut fired = Fired::default();
        if !tables::earliest_timers(sql)?
            .iter()
            .any(|&(_, at)| at <= now_ms)
        {
            // Nothing due (the common pass): no timer or stop to read.
            return Ok(fired);
        }
        let due = tables::due_timers(sql, now_ms, EXTENSION_TIMERS_PER_PASS_MAX * 4)?;
        let meta = tables::meta_rows(sql)?;
        for timer in due
            .into_iter()
            .filter(|t| {
                self.roster
                    .get(&t.ext)
                    .is_some_and(|e| e.manifest.hooks.timer || send::is_staged(&t.name))
                    && meta.get(&t.ext).is_some_and(|m| m.stopped.is_none())
            })
            .take(EXTENSION_TIMERS_PER_PASS_MAX)
        {
            let entry = self.entry(&timer.ext)?;
            let ids = &mut *ctx.ids;
            let sent = match atomically(sql, || {
                self.fire(admit, store, ids, entry, &timer.name, now_ms)
            }) {
                Ok(sent) => sent,
                // A send the admission refused at its write (the queue
                // bound) took the hook's writes back with it; it fails the
                // hook, which stops its extension, as a refusal before the
                // write does (else the timer would fail every pass).
                Err(e) if e.status() < 500 && !send::is_staged(&timer.name) => {
                    atomically(sql, || {
                        self.timer_failed(store, entry, &timer, Refusal::Send(e), now_ms)
                    })?;
                    Vec::new()
                }
                Err(e) => return Err(e),
            };
            fired.timers += 1;
            fired.sent.extend(sent);
        }
        Ok(fired)
    }

    /// Fires timer `name` of `entry` in the open transition, when it is
    /// still due.
    fn fire<A: Admit>(
        &self,
        admit: &A,
        store: Store<'_>,
        ids: &mut dyn IdSource,
        entry: &Entry,
        name: &str,
        now_ms: i64,
    ) -> Result<Vec<Sent<A::Admitted>>, ApiError> {
        let sql = store.sql();
        // Reads first: is it still due, and as what.
        let Some(current) = tables::timer(sql, entry.id(), name)? else {
            return Ok(Vec::new());
        };
        if current.due_at > now_ms {
            return Ok(Vec::new());
        }
        if send::is_staged(name) {
            return self.fire_staged(admit, store, ids, entry, &current, now_ms);
        }
        let position = match &current.session_id {
            Some(s) => Some(store.position(s)?),
            None => None,
        };
        let event = json!({
            "name": current.name,
            "sessionId": current.session_id,
            "payload": current.payload,
            "dueAt": current.due_at,
        });
        let session = current
            .session_id
            .as_deref()
            .map(|id| SessionRef { id, position });
        // The firing timer no longer counts against the bound.
        self.with_cache(sql, |cache| {
            if let Some(names) = cache.timers.get_mut(entry.id()) {
                names.remove(&current.name);
            }
            Ok(())
        })?;
        let cause = format!("timer:{}:{}", current.name, current.due_at);
        let outcome = self.call_and_send(
            admit,
            store,
            entry,
            "timer",
            session,
            &event,
            now_ms,
            (&cause, None),
        )?;
        let (mut effects, prepared) = match outcome {
            Ok(done) => done,
            Err(refusal) => {
                self.timer_failed(store, entry, &current, refusal, now_ms)?;
                return Ok(Vec::new());
            }
        };
        effects.cause = vec![tables::delete_timer(entry.id(), &current.name)];
        self.commit_sending(
            admit,
            store,
            ids,
            now_ms,
            entry,
            current.session_id.as_deref(),
            (effects, prepared),
        )
    }

    /// A throwing hook, or a send the admission refuses (other than a
    /// caught `closed`), fails the hook: its extension stops.
    pub(super) fn timer_failed(
        &self,
        store: Store<'_>,
        entry: &Entry,
        timer: &TimerRow,
        refusal: Refusal,
        now_ms: i64,
    ) -> Result<(), ApiError> {
        let reason = match refusal {
            Refusal::Hook(failure) => failure.reason(),
            Refusal::Send(e) if send::is_staged(&timer.name) => format!(
                "extension {}: settled hook: send into Session {}: {e}",
                entry.id(),
                timer.session_id.as_deref().unwrap_or_default()
            ),
            Refusal::Send(e) => {
                format!("extension {}: timer {}: send: {e}", entry.id(), timer.name)
            }
        };
        let sql = store.sql();
        self.with_cache(sql, |cache| {
            // A settled-hook extension replaying keeps its cursor; a
            // running one has handled every settlement logged so far.
            let cursor = cache.meta.get(entry.id()).and_then(|m| m.cursor);
            let stop = Outcome::Stopped(Stop {
                reason,
                cursor: cursor.or(Some(cache.log_head)),
                at: now_ms,
            });
            self.commit(sql, cache, entry, timer.session_id.as_deref(), stop)
        })?;
        Ok(())
    }

    /// The earliest moment extensions have work: `now_ms` while a resumed
    /// extension replays missed work, else the earliest timer of a running
    /// extension with a timer hook, or with a settled hook (its staged
    /// sends, `send.rs`).
    pub fn next_deadline(&self, store: Store<'_>, now_ms: i64) -> Result<Option<i64>, ApiError> {
        if self.roster.is_empty() {
            return Ok(None);
        }
        let sql = store.sql();
        let meta = tables::meta_rows(sql)?;
        let running = |e: &&Entry| meta.get(e.id()).is_some_and(|m| m.stopped.is_none());
        if self
            .settled_hooks()
            .filter(running)
            .any(|e| meta[e.id()].cursor.is_some())
        {
            return Ok(Some(now_ms));
        }
        let earliest = tables::earliest_timers(sql)?;
        Ok(self
            .roster
            .entries()
            .iter()
            .filter(|e| e.manifest.hooks.timer || e.manifest.hooks.settled)
            .filter(running)
            .filter_map(|e| {
                earliest
                    .iter()
                    .find(|(id, _)| id == e.id())
                    .map(|&(_, at)| at)
            })
            .min()
            .map(|at| at.max(now_ms)))
    }
}
