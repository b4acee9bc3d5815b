//! An extension's sends (`context.send`), admitted inside its own
//! transition through the [`Admit`] port: `extension/` sits below
//! `session/`, so admission implements the port
//! (`session::admission::ExtensionSends`) and the caller hands it in.
//!
//! A settled hook's sends cannot be admitted where it runs: it runs after
//! the settling write, and a transition reads before it writes
//! (`sql::atomically`), while admission reads the queue. So they are
//! staged instead ([`Extensions::stage_sends`]): each a due-now row of its
//! extension's timers, committed with the settlement or not at all, and
//! admitted by the next pass ([`Extensions::fire_due`]), each once (its
//! requestId derives from the settled command).

use super::call::SendOp;
use super::effects::{Call, Effects, Outcome};
use super::tables::{self, TimerRow};
use super::{Entry, Extensions, Failure, Refusal, SessionRef};
use crate::ctx::IdSource;
use crate::error::ApiError;
use crate::limits::{EXTENSION_SENDS_PER_CALL_MAX, EXTENSION_TIMERS_MAX};
use crate::sql::SqlError;
use crate::store::Store;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The name prefix of a staged send's timer row: outside the authors'
/// timer names (`[A-Za-z0-9_.:-]`), so no timer of theirs is one.
const STAGED: &str = "~send:";

/// Whether timer `name` is a staged send.
pub(super) fn is_staged(name: &str) -> bool {
    name.starts_with(STAGED)
}

/// A staged send's payload (its Session is the timer row's).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Staged {
    request_id: String,
    text: String,
    require_existing_session: bool,
}

/// A prompt an extension sends into a Session (seed: `context.send`),
/// admitted inside the extension's own transition: [`Admit::prepare`]
/// reads, [`Admit::commit`] writes, so a transition prepares all its sends
/// before it writes anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Send {
    pub session_id: String,
    /// Derived from what caused the send, so a replayed cause replays it.
    pub request_id: String,
    pub text: String,
    /// Refuse an absent Session instead of creating it.
    pub require_existing_session: bool,
}

/// Admission of sends, as the layer above provides it.
pub trait Admit {
    /// A send whose reads are done.
    type Prepared;
    /// What a committed send admitted.
    type Admitted;
    /// The reads of one send. An absent Session the send requires is
    /// refused with `ApiError::SessionNotFound`.
    fn prepare(&self, store: Store<'_>, send: &Send) -> Result<Self::Prepared, ApiError>;
    /// The writes of one prepared send; `None` when it was admitted before.
    fn commit(
        &self,
        store: Store<'_>,
        ids: &mut dyn IdSource,
        now_ms: i64,
        prepared: &Self::Prepared,
    ) -> Result<Option<Self::Admitted>, ApiError>;
}

/// A prompt a command or a timer sent, as admitted.
#[derive(Debug)]
pub struct Sent<A> {
    pub session_id: String,
    pub request_id: String,
    pub admitted: A,
}

/// The admissions of a call's sends. Each requestId derives from the
/// call's cause (a command's requestId, a timer's name and due time), so a
/// replayed cause replays its sends; `fresh` stands in for a cause that
/// has no id of its own.
pub(super) fn sends(ext: &str, cause: &str, ops: &[SendOp], fresh: Option<&str>) -> Vec<Send> {
    ops.iter()
        .enumerate()
        .map(|(i, op)| {
            let digest = Sha256::digest(format!("{cause}\u{0}{}\u{0}{i}", fresh.unwrap_or("")));
            let hex = crate::text::hex(&digest[..12]);
            Send {
                session_id: op.session_id.clone(),
                request_id: format!("ext:{ext}:{hex}"),
                text: op.text.clone(),
                require_existing_session: op.require_existing_session,
            }
        })
        .collect()
}

/// A call's effect set with its sends prepared.
pub(super) type Prepared<A> = (Effects, Vec<(Send, <A as Admit>::Prepared)>);

impl Extensions {
    /// Calls `entry`'s callback in a transition that may send, and
    /// prepares its sends (their admission reads). A send requiring an
    /// existing Session that is absent is refused with `AdmissionError`
    /// reason `closed`, which the author may catch: the callback, pure over
    /// the state it is handed, runs again with that Session known closed,
    /// so its `send` throws. Each rerun closes one more of its at most
    /// [`EXTENSION_SENDS_PER_CALL_MAX`] Sessions, which bounds the reruns.
    /// `cause` and `fresh`: see [`sends`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn call_and_send<A: Admit>(
        &self,
        admit: &A,
        store: Store<'_>,
        entry: &Entry,
        kind: &str,
        session: Option<SessionRef<'_>>,
        event: &Value,
        now_ms: i64,
        (cause, fresh): (&str, Option<&str>),
    ) -> Result<Result<Prepared<A>, Refusal>, ApiError> {
        let sql = store.sql();
        let mut closed: Vec<String> = Vec::new();
        loop {
            let call = Call {
                kind,
                session: session.clone(),
                event: event.clone(),
                now_ms,
                sends_allowed: true,
                closed: &closed,
            };
            let effects = match self.with_cache(sql, |cache| self.call(sql, cache, entry, call))? {
                Ok(effects) => effects,
                Err(failure) => return Ok(Err(Refusal::Hook(failure))),
            };
            let mut prepared = Vec::with_capacity(effects.sends.len());
            let mut absent = None;
            for send in sends(entry.id(), cause, &effects.sends, fresh) {
                match admit.prepare(store, &send) {
                    Ok(p) => prepared.push((send, p)),
                    Err(ApiError::SessionNotFound(s))
                        if send.require_existing_session
                            && !closed.contains(&s)
                            && closed.len() < EXTENSION_SENDS_PER_CALL_MAX =>
                    {
                        absent = Some(s);
                        break;
                    }
                    Err(e @ ApiError::Internal(_)) => return Err(e),
                    Err(e) => return Ok(Err(Refusal::Send(e))),
                }
            }
            match absent {
                None => return Ok(Ok((effects, prepared))),
                Some(s) => closed.push(s),
            }
        }
    }

    /// Commits a call that may send: its effect set ([`Extensions::commit`]),
    /// then its prepared sends through `admit`, in order, in the same
    /// transition. Answers what each send admitted.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit_sending<A: Admit>(
        &self,
        admit: &A,
        store: Store<'_>,
        ids: &mut dyn IdSource,
        now_ms: i64,
        entry: &Entry,
        session_id: Option<&str>,
        (effects, prepared): Prepared<A>,
    ) -> Result<Vec<Sent<A::Admitted>>, ApiError> {
        let sql = store.sql();
        self.with_cache(sql, |cache| {
            self.commit(
                sql,
                cache,
                entry,
                session_id,
                Outcome::Done(Box::new(effects)),
            )
        })?;
        let mut sent = Vec::new();
        for (send, p) in &prepared {
            if let Some(admitted) = admit.commit(store, ids, now_ms, p)? {
                sent.push(Sent {
                    session_id: send.session_id.clone(),
                    request_id: send.request_id.clone(),
                    admitted,
                });
            }
        }
        Ok(sent)
    }
}

impl Extensions {
    /// Stages a settled hook's sends (see the module's documentation):
    /// each becomes a timer row of `entry` due at `now_ms`, written with
    /// the call's other writes, and counts against its
    /// [`EXTENSION_TIMERS_MAX`] like a timer. `cause`: the settled command.
    pub(super) fn stage_sends(
        entry: &Entry,
        effects: &mut Effects,
        cause: &str,
        now_ms: i64,
    ) -> Result<(), Failure> {
        let id = entry.id();
        for send in sends(id, cause, &std::mem::take(&mut effects.sends), None) {
            let hex = send.request_id.rsplit(':').next().unwrap_or_default();
            let name = format!("{STAGED}{hex}");
            effects.timers.insert(name.clone());
            if effects.timers.len() > EXTENSION_TIMERS_MAX {
                return Err(Failure::Bound(format!(
                    "extension {id}: it would hold {} timers and staged sends; at most {EXTENSION_TIMERS_MAX}",
                    effects.timers.len()
                )));
            }
            let payload = Staged {
                request_id: send.request_id,
                text: send.text,
                require_existing_session: send.require_existing_session,
            };
            let payload = serde_json::to_string(&payload)
                .map_err(|e| Failure::Failed(format!("extension {id}: send: {e}")))?;
            effects.writes.push(tables::put_timer(
                id,
                &name,
                now_ms,
                Some(send.session_id),
                payload,
            ));
        }
        Ok(())
    }

    /// Admits a staged send in the open transition and deletes its row. A
    /// Session it requires that is gone drops it (nothing is created: the
    /// seed's `closed`); a refusal (a full queue) stops its extension and
    /// keeps it for after the resume.
    pub(super) fn fire_staged<A: Admit>(
        &self,
        admit: &A,
        store: Store<'_>,
        ids: &mut dyn IdSource,
        entry: &Entry,
        row: &TimerRow,
        now_ms: i64,
    ) -> Result<Vec<Sent<A::Admitted>>, ApiError> {
        let sql = store.sql();
        let staged: Staged = serde_json::from_value(row.payload.clone())
            .map_err(|e| SqlError::Decode(format!("staged send {}: {e}", row.name)))?;
        let send = Send {
            session_id: row.session_id.clone().unwrap_or_default(),
            request_id: staged.request_id,
            text: staged.text,
            require_existing_session: staged.require_existing_session,
        };
        // A refusal (of the reads, or of the queue bound the write checks
        // before it writes anything) stops the extension; the row stays.
        let admitted = match admit.prepare(store, &send).and_then(|p| {
            // The cache is read (if this transition has not) before a write.
            self.with_cache(sql, |_| Ok(()))?;
            admit.commit(store, ids, now_ms, &p)
        }) {
            Ok(admitted) => admitted,
            Err(ApiError::SessionNotFound(_)) if send.require_existing_session => None,
            Err(e @ ApiError::Internal(_)) => return Err(e),
            Err(e) => {
                self.timer_failed(store, entry, row, Refusal::Send(e), now_ms)?;
                return Ok(Vec::new());
            }
        };
        self.with_cache(sql, |cache| {
            if let Some(names) = cache.timers.get_mut(entry.id()) {
                names.remove(&row.name);
            }
            Ok(())
        })?;
        let (statement, params) = tables::delete_timer(entry.id(), &row.name);
        crate::sql::write(sql, &statement, params)?;
        Ok(admitted
            .map(|admitted| Sent {
                session_id: send.session_id,
                request_id: send.request_id,
                admitted,
            })
            .into_iter()
            .collect())
    }
}
