//! One call's effect set: the value a command or hook returns (its state
//! writes, timers, sends, attention and history), checked against every
//! bound before anything is written ([`stage`]), then applied by one
//! commit ([`Extensions::commit`]) inside the transition that caused it.
//! A hook that fails has one outcome too, its extension's stop
//! ([`Outcome::Stopped`]), applied by the same commit.

use super::call::{Answer, Request, SendOp};
use super::{
    attention, cut, tables, Cache, Entry, Extensions, Failure, SessionRef, State, Touched,
};
use crate::history::{self, History};
use crate::limits::{
    EXTENSION_ANSWER_BYTES_MAX, EXTENSION_KEY_BYTES_MAX, EXTENSION_ROWS_PER_COLLECTION_MAX,
    EXTENSION_ROW_BYTES_MAX, EXTENSION_SENDS_PER_CALL_MAX, EXTENSION_STATE_BYTES_MAX,
    EXTENSION_TIMERS_MAX, EXTENSION_TIMER_PAYLOAD_BYTES_MAX, TEXT_BYTES_MAX,
};
use crate::sql::{write, Sql, SqlError, Write};
use crate::store::schema;
use crate::text::validate_session_id;
use serde_json::Value;
use std::collections::BTreeSet;

/// What one call does, checked against every bound, not yet written.
pub(super) struct Effects {
    /// The extension's state after the call.
    pub state: State,
    /// Its timer names after the call.
    pub timers: BTreeSet<String>,
    /// The cause's own bookkeeping, written first: a fired timer's
    /// deletion (the hook may set it again), a command's request record.
    pub cause: Vec<Write>,
    /// The rows, timers, history and attention items the call changed.
    pub writes: Vec<Write>,
    /// The prompts it sends (admitted by the caller's [`super::Admit`]).
    pub sends: Vec<SendOp>,
    pub answer: Answer,
    pub attention: attention::Planned,
    /// The Session history this call records: (Session, history after it).
    pub history: Option<(String, History)>,
}

/// What a hook that failed commits instead of its effect set: its
/// extension's stop.
pub(super) struct Stop {
    pub reason: String,
    /// The extension's cursor after the stop (a settled-hook extension
    /// replays the settled work after it once resumed).
    pub cursor: Option<i64>,
    pub at: i64,
}

/// A hook's outcome: the one value [`Extensions::commit`] applies.
pub(super) enum Outcome {
    Done(Box<Effects>),
    Stopped(Stop),
}

impl Effects {
    /// Whether the call set or cancelled timers: the alarm's deadline may
    /// move.
    pub fn moves_timers(&self) -> bool {
        !self.answer.timers.is_empty()
    }
}

/// One call's inputs.
pub(super) struct Call<'a> {
    pub kind: &'a str,
    pub session: Option<SessionRef<'a>>,
    pub event: Value,
    pub now_ms: i64,
    /// Commands, settled and timer hooks may send; other calls may not.
    pub sends_allowed: bool,
    /// Sessions a send of this call found absent (see `call_and_send`).
    pub closed: &'a [String],
}

impl Extensions {
    /// Calls `entry`'s callback over its current state and checks what it
    /// did against every bound: its effect set, nothing written yet.
    pub(super) fn call(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        call: Call<'_>,
    ) -> Result<Result<Effects, Failure>, SqlError> {
        let state = Self::state(sql, cache, entry)?.clone();
        let timers = cache.timers.get(entry.id()).cloned().unwrap_or_default();
        let session_id = call.session.as_ref().map(|s| s.id.to_owned());
        let (now_ms, sends_allowed) = (call.now_ms, call.sends_allowed);
        let answer = match self.ask(entry, &state.rows, call) {
            Ok(answer) => answer,
            Err(failure) => return Ok(Err(failure)),
        };
        let mut effects = match stage(entry, state, timers, answer, sends_allowed) {
            Ok(effects) => effects,
            Err(failure) => return Ok(Err(failure)),
        };
        if let Some(session_id) = session_id {
            if let Err(failure) =
                self.record_history(sql, cache, entry, session_id, &mut effects, now_ms)?
            {
                return Ok(Err(failure));
            }
        }
        match self
            .attention
            .plan(sql, entry, &effects.answer.attention, now_ms)?
        {
            Ok((planned, writes)) => {
                effects.writes.extend(writes);
                effects.attention = planned;
                Ok(Ok(effects))
            }
            Err(failure) => Ok(Err(failure)),
        }
    }

    /// Records the Session projection after a call that changed `entry`'s
    /// state in its history (when it keeps one): the value is projected
    /// from the staged state and its write joins the call's writes, so it
    /// commits with them or not at all.
    fn record_history(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        session_id: String,
        effects: &mut Effects,
        now_ms: i64,
    ) -> Result<Result<(), Failure>, SqlError> {
        if !entry.manifest.projection.history || effects.answer.writes.is_empty() {
            return Ok(Ok(()));
        }
        let mut kept = Self::history(sql, cache, entry, &session_id)?.clone();
        let value = match self.projected(entry, &effects.state, Some(&session_id)) {
            Ok(value) => value.unwrap_or(Value::Null),
            Err(failure) => return Ok(Err(failure)),
        };
        if kept.record(value, now_ms) {
            effects
                .writes
                .push(history::store(entry.id(), &session_id, &kept));
            effects.history = Some((session_id, kept));
        }
        Ok(Ok(()))
    }

    /// Asks the host; a refusal or a throw is a [`Failure`].
    pub(super) fn ask(
        &self,
        entry: &Entry,
        rows: &tables::Rows,
        call: Call<'_>,
    ) -> Result<Answer, Failure> {
        let id = entry.id();
        let kind = call.kind;
        let request = serde_json::to_string(&Request {
            ext: id,
            kind,
            state: rows,
            config: &entry.manifest.config,
            now: call.now_ms,
            session: call.session,
            event: call.event,
            closed: call.closed,
        })
        .map_err(|e| Failure::Failed(format!("extension {id}: request: {e}")))?;
        let text = self.host.call(&request);
        if text.len() > EXTENSION_ANSWER_BYTES_MAX {
            return Err(Failure::Failed(format!(
                "extension {id}: the {kind} call answered over {EXTENSION_ANSWER_BYTES_MAX} bytes"
            )));
        }
        let answer: Answer = crate::json::from_text(&text).map_err(|e| {
            Failure::Failed(format!(
                "extension {id}: the {kind} call answered malformed JSON: {e}"
            ))
        })?;
        if answer.ok {
            attention::allowed_in(entry, kind, &answer.attention)?;
            return Ok(answer);
        }
        let error = answer
            .error
            .unwrap_or_else(|| format!("extension {id}: the {kind} call failed"));
        Err(if answer.refused {
            Failure::Refused(error)
        } else {
            Failure::Failed(error)
        })
    }

    /// The one commit of a hook's outcome, inside the transition that
    /// caused it: an effect set's writes are queued (the cause's first)
    /// and its state taken into the transition cache; a failed hook's stop
    /// is its extension's status row. A call that may send commits through
    /// [`Extensions::commit_sending`], which admits its sends after it.
    pub(super) fn commit(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        session_id: Option<&str>,
        outcome: Outcome,
    ) -> Result<(), SqlError> {
        let effects = match outcome {
            Outcome::Done(effects) => *effects,
            Outcome::Stopped(stop) => return Self::stop(sql, cache, entry, stop),
        };
        let changed = !effects.writes.is_empty();
        // The feature groups of its writes, made with the first.
        if effects.attention.writes_items() {
            schema::ATTENTION.ensure(sql)?;
        }
        if effects.history.is_some() {
            schema::HISTORY.ensure(sql)?;
        }
        for (statement, params) in effects.cause.into_iter().chain(effects.writes) {
            write(sql, &statement, params)?;
        }
        self.attention.commit(sql, effects.attention)?;
        cache.states.insert(entry.id().to_owned(), effects.state);
        cache.timers.insert(entry.id().to_owned(), effects.timers);
        if let Some((session_id, kept)) = effects.history {
            cache
                .histories
                .entry(session_id)
                .or_default()
                .insert(entry.id().to_owned(), kept);
        }
        if changed {
            self.touched.borrow_mut().insert(Touched {
                extension: entry.id().to_owned(),
                session_id: session_id.map(str::to_owned),
            });
        }
        Ok(())
    }

    /// Records `entry`'s stop in its status row.
    fn stop(sql: &dyn Sql, cache: &mut Cache, entry: &Entry, stop: Stop) -> Result<(), SqlError> {
        let Some(meta) = cache.meta.get_mut(entry.id()) else {
            return Ok(());
        };
        meta.stopped = Some(cut(stop.reason));
        meta.stopped_at = Some(stop.at);
        if entry.manifest.hooks.settled {
            meta.cursor = stop.cursor;
        }
        tables::put_meta(sql, entry.id(), meta, stop.at)
    }
}

/// Checks one call's answer against the definition and every bound and
/// turns it into its effect set.
fn stage(
    entry: &Entry,
    mut state: State,
    mut timers: BTreeSet<String>,
    answer: Answer,
    sends_allowed: bool,
) -> Result<Effects, Failure> {
    let mut writes = stage_rows(entry, &mut state, &answer)?;
    writes.extend(stage_timers(entry, &mut timers, &answer)?);
    check_sends(entry, &answer.sends, sends_allowed)?;
    attention::check(entry, &answer.attention)?;
    Ok(Effects {
        state,
        timers,
        cause: Vec::new(),
        writes,
        sends: answer.sends.clone(),
        answer,
        attention: attention::Planned::default(),
        history: None,
    })
}

/// The row writes of an answer, checked against the declared collections
/// and the state bounds; `state` becomes the state after them.
fn stage_rows(entry: &Entry, state: &mut State, answer: &Answer) -> Result<Vec<Write>, Failure> {
    let id = entry.id();
    let mut writes = Vec::new();
    for w in &answer.writes {
        let Some(decl) = entry.collection(&w.collection) else {
            return Err(Failure::Bound(format!(
                "extension {id}: collection `{}` is not declared",
                w.collection
            )));
        };
        let where_ = format!(
            "extension {id}: collection {}, key {:?}",
            w.collection, w.key
        );
        if decl.document && !w.key.is_empty() {
            return Err(Failure::Bound(format!(
                "{where_}: a document has the one key \"\""
            )));
        }
        if !decl.document && (w.key.is_empty() || w.key.len() > EXTENSION_KEY_BYTES_MAX) {
            return Err(Failure::Bound(format!(
                "{where_}: keys are 1 to {EXTENSION_KEY_BYTES_MAX} bytes"
            )));
        }
        let rows = state.rows.entry(w.collection.clone()).or_default();
        if let Some(old) = rows.remove(&w.key) {
            state.bytes -= w.key.len() + old.to_string().len();
        }
        if w.value.is_null() {
            writes.push(tables::delete_row(id, &w.collection, &w.key));
            continue;
        }
        let text = w.value.to_string();
        if text.len() > EXTENSION_ROW_BYTES_MAX {
            return Err(Failure::Bound(format!(
                "{where_}: the row is {} bytes of JSON; at most {EXTENSION_ROW_BYTES_MAX}",
                text.len()
            )));
        }
        entry
            .check_row(&w.collection, &w.value)
            .map_err(|e| Failure::Bound(format!("{where_}: {e}")))?;
        state.bytes += w.key.len() + text.len();
        rows.insert(w.key.clone(), w.value.clone());
        if rows.len() > EXTENSION_ROWS_PER_COLLECTION_MAX {
            return Err(Failure::Bound(format!(
                "extension {id}: collection {} would hold {} rows; at most {EXTENSION_ROWS_PER_COLLECTION_MAX}",
                w.collection,
                rows.len()
            )));
        }
        writes.push(tables::put_row(id, &w.collection, &w.key, text));
    }
    if state.bytes > EXTENSION_STATE_BYTES_MAX {
        return Err(Failure::Bound(format!(
            "extension {id}: its state would be {} bytes; at most {EXTENSION_STATE_BYTES_MAX}",
            state.bytes
        )));
    }
    Ok(writes)
}

/// The timer writes of an answer, checked; `timers` becomes the names
/// after them.
fn stage_timers(
    entry: &Entry,
    timers: &mut BTreeSet<String>,
    answer: &Answer,
) -> Result<Vec<Write>, Failure> {
    let id = entry.id();
    let mut writes = Vec::new();
    for t in &answer.timers {
        let where_ = format!("extension {id}: timer {:?}", t.name);
        let name_ok = !t.name.is_empty()
            && t.name.len() <= 128
            && t.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if !name_ok {
            return Err(Failure::Bound(format!(
                "{where_}: names are 1 to 128 of [A-Za-z0-9_.:-]"
            )));
        }
        if t.cancel {
            timers.remove(&t.name);
            writes.push(tables::delete_timer(id, &t.name));
            continue;
        }
        let at = match t.at {
            Some(at) if (0.0..=8.64e15).contains(&at) => at.floor() as i64,
            _ => {
                return Err(Failure::Bound(format!(
                    "{where_}: `at` must be a time in ms since the epoch"
                )))
            }
        };
        let payload = t.payload.to_string();
        if payload.len() > EXTENSION_TIMER_PAYLOAD_BYTES_MAX {
            return Err(Failure::Bound(format!(
                "{where_}: the payload is {} bytes of JSON; at most {EXTENSION_TIMER_PAYLOAD_BYTES_MAX}",
                payload.len()
            )));
        }
        if let Some(s) = &t.session_id {
            validate_session_id(s).map_err(|e| Failure::Bound(format!("{where_}: {e}")))?;
        }
        timers.insert(t.name.clone());
        if timers.len() > EXTENSION_TIMERS_MAX {
            return Err(Failure::Bound(format!(
                "extension {id}: it would hold {} timers; at most {EXTENSION_TIMERS_MAX}",
                timers.len()
            )));
        }
        writes.push(tables::put_timer(
            id,
            &t.name,
            at,
            t.session_id.clone(),
            payload,
        ));
    }
    Ok(writes)
}

/// An answer's sends: allowed here, at most one per Session, bounded.
fn check_sends(entry: &Entry, sends: &[SendOp], sends_allowed: bool) -> Result<(), Failure> {
    let id = entry.id();
    if !sends.is_empty() && !sends_allowed {
        return Err(Failure::Bound(format!(
            "extension {id}: send is available in commands, settled hooks and timer hooks only"
        )));
    }
    if sends.len() > EXTENSION_SENDS_PER_CALL_MAX {
        return Err(Failure::Bound(format!(
            "extension {id}: {} sends in one call; at most {EXTENSION_SENDS_PER_CALL_MAX}",
            sends.len()
        )));
    }
    let mut targets = BTreeSet::new();
    for s in sends {
        validate_session_id(&s.session_id)
            .map_err(|e| Failure::Bound(format!("extension {id}: send: {e}")))?;
        if !targets.insert(s.session_id.as_str()) {
            return Err(Failure::Bound(format!(
                "extension {id}: two sends into Session {} in one call; at most one per Session",
                s.session_id
            )));
        }
        if s.text.is_empty() || s.text.len() > TEXT_BYTES_MAX {
            return Err(Failure::Bound(format!(
                "extension {id}: send: text is 1 to {TEXT_BYTES_MAX} bytes"
            )));
        }
    }
    Ok(())
}
