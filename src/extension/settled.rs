//! Settled hooks: every settlement runs them inside the transition that
//! writes it ([`OnSettled`]). A stopped or replaying extension gets the
//! settlement logged instead (`replay.rs` replays it once resumed). Their
//! sends are staged with the settlement (`send.rs`).

use super::effects::{Call, Effects, Outcome, Stop};
use super::{tables, Cache, Entry, Extensions, Failure, SessionRef};
use crate::sql::{Sql, SqlError};
use crate::store::{CommandRow, OnSettled, Store};
use serde_json::Value;

impl OnSettled for Extensions {
    /// Runs every settled hook inside the settling transition. An extension
    /// that is stopped or still replaying gets the settlement logged
    /// instead; a hook that fails stops its extension at this settlement.
    fn settled(
        &self,
        store: Store<'_>,
        command: &CommandRow,
        settlement: &str,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        if self.settled_hooks().next().is_none() {
            return Ok(());
        }
        let sql = store.sql();
        let event = settled_event(&command.session_id, settlement)?;
        self.with_cache(sql, |cache| {
            let mut seq = None;
            for entry in self.settled_hooks() {
                let Some(meta) = cache.meta.get(entry.id()) else {
                    continue;
                };
                if meta.behind() {
                    Self::log(sql, cache, &mut seq, command)?;
                    continue;
                }
                match self.call_settled(
                    sql,
                    cache,
                    entry,
                    &command.into(),
                    event.clone(),
                    now_ms,
                )? {
                    Ok(effects) => {
                        let done = Outcome::Done(Box::new(effects));
                        self.commit(sql, cache, entry, Some(&command.session_id), done)?;
                    }
                    Err(failure) => {
                        // It replays from this settlement once resumed.
                        let at = Self::log(sql, cache, &mut seq, command)?;
                        let stop = Outcome::Stopped(Stop {
                            reason: failure.reason(),
                            cursor: Some(at - 1),
                            at: now_ms,
                        });
                        self.commit(sql, cache, entry, Some(&command.session_id), stop)?;
                    }
                }
            }
            Ok(())
        })
    }
}

impl<'a> Call<'a> {
    /// A settled hook's call for a settlement of `session_id`.
    pub(super) fn settled(session_id: &'a str, event: Value, now_ms: i64) -> Self {
        Call {
            kind: "settled",
            session: Some(SessionRef {
                id: session_id,
                position: None,
            }),
            event,
            now_ms,
            sends_allowed: true,
            closed: &[],
        }
    }
}

impl Extensions {
    /// Calls `entry`'s settled hook over the settlement of `command`
    /// (`event`), its sends staged: the effect set to commit, or why it
    /// failed. A call that adds timers or staged sends asks for a rearm.
    pub(super) fn call_settled(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        command: &CommandRef<'_>,
        event: Value,
        now_ms: i64,
    ) -> Result<Result<Effects, Failure>, SqlError> {
        let call = Call::settled(command.session_id, event, now_ms);
        let mut effects = match self.call(sql, cache, entry, call)? {
            Ok(effects) => effects,
            Err(failure) => return Ok(Err(failure)),
        };
        let sends = !effects.sends.is_empty();
        let cause = format!("settled:{}:{}", command.session_id, command.command_id);
        if let Err(failure) = Self::stage_sends(entry, &mut effects, &cause, now_ms) {
            return Ok(Err(failure));
        }
        if sends || effects.moves_timers() {
            self.rearm.set(true);
        }
        Ok(Ok(effects))
    }

    /// The extensions with a settled hook.
    pub(super) fn settled_hooks(&self) -> impl Iterator<Item = &Entry> {
        self.roster
            .entries()
            .iter()
            .filter(|e| e.manifest.hooks.settled)
    }

    /// Logs the settlement for the extensions that missed it, once per
    /// settlement: its log seq.
    fn log(
        sql: &dyn Sql,
        cache: &mut Cache,
        seq: &mut Option<i64>,
        command: &CommandRow,
    ) -> Result<i64, SqlError> {
        if let Some(seq) = *seq {
            return Ok(seq);
        }
        cache.log_head += 1;
        tables::log(
            sql,
            cache.log_head,
            &command.session_id,
            &command.command_id,
        )?;
        *seq = Some(cache.log_head);
        Ok(cache.log_head)
    }
}

/// The settled hook's event: the CommandSettlement and its Session.
pub(super) fn settled_event(session_id: &str, settlement: &str) -> Result<Value, SqlError> {
    let mut event: Value = serde_json::from_str(settlement)
        .map_err(|e| SqlError::Decode(format!("stored settlement: {e}")))?;
    if let Value::Object(map) = &mut event {
        map.insert("sessionId".into(), Value::String(session_id.to_owned()));
    }
    Ok(event)
}

/// The settled command a hook runs for.
pub(super) struct CommandRef<'a> {
    pub session_id: &'a str,
    pub command_id: &'a str,
}

impl<'a> From<&'a CommandRow> for CommandRef<'a> {
    fn from(c: &'a CommandRow) -> Self {
        CommandRef {
            session_id: &c.session_id,
            command_id: &c.command_id,
        }
    }
}
