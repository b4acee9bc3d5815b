//! Commands: an extension command runs as one transition, its effect set
//! (writes, timers, attention, history), its sends and its request record
//! committed together, or nothing is.

use super::send::{Admit, Sent};
use super::{internal, manifest, tables, Entry, Extensions, Failure, Refusal, Scope, SessionRef};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::limits::{EXTENSION_COMMAND_BYTES_MAX, EXTENSION_REQUESTS_KEPT_MAX};
use crate::sql::atomically;
use crate::store::Store;
use serde_json::{json, Value};

/// An extension command to run ([`Extensions::command`]).
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    pub extension: &'a str,
    pub command: &'a str,
    /// The Session a session-scope command runs in.
    pub session_id: Option<&'a str>,
    /// Replays: the same id and input answer the stored result.
    pub request_id: Option<&'a str>,
    pub input: Value,
}

/// A command's result, and the prompts it sent (`A`: what the caller's
/// admission answers for each).
#[derive(Debug)]
pub struct Invoked<A> {
    pub result: Value,
    pub sent: Vec<Sent<A>>,
    /// The command set or cancelled timers: the alarm's deadline may move.
    pub rearm: bool,
}

impl Extensions {
    /// Runs an extension command as one transition: its writes, its timers,
    /// its sends (admitted through `admit`) and its request record commit
    /// together, or nothing does.
    pub fn command<A: Admit>(
        &self,
        ctx: &mut Ctx<'_>,
        admit: &A,
        inv: Invocation<'_>,
    ) -> Result<Invoked<A::Admitted>, ApiError> {
        let entry = self.entry(inv.extension)?;
        let canonical = checked_input(entry, &inv)?;
        let store = ctx.store;
        let sql = store.sql();
        let now_ms = ctx.now_ms;
        let ids = &mut *ctx.ids;
        let scope = inv.session_id.unwrap_or("");
        atomically(sql, || {
            // Reads first.
            let position = self.command_reads(store, entry, &inv)?;
            if let Some(replayed) = replayed(store, entry, &inv, &canonical)? {
                return replayed;
            }
            let kept = match inv.request_id {
                Some(_) => tables::request_count(sql, entry.id())?,
                None => 0,
            };
            let event = json!({
                "name": inv.command,
                "input": inv.input,
                "requestId": inv.request_id,
            });
            let session = inv.session_id.map(|s| SessionRef { id: s, position });
            let cause = format!("command:{scope}:{}", inv.request_id.unwrap_or(""));
            let fresh = inv.request_id.is_none().then(|| ids.next_id(""));
            let (mut effects, prepared) = self
                .call_and_send(
                    admit,
                    store,
                    entry,
                    "command",
                    session,
                    &event,
                    now_ms,
                    (&cause, fresh.as_deref()),
                )?
                .map_err(refused)?;
            let result = effects.answer.result.clone().unwrap_or(Value::Null);
            let result_text = checked_result(entry, inv.command, &result)?;
            let rearm = effects.moves_timers();
            if let Some(request_id) = inv.request_id {
                effects.cause = tables::put_request(
                    entry.id(),
                    scope,
                    request_id,
                    inv.command,
                    &canonical,
                    &result_text,
                    now_ms,
                    (kept, EXTENSION_REQUESTS_KEPT_MAX),
                );
            }
            // Writes.
            let sent = self.commit_sending(
                admit,
                store,
                ids,
                now_ms,
                entry,
                inv.session_id,
                (effects, prepared),
            )?;
            Ok(Invoked {
                result,
                sent,
                rearm,
            })
        })
    }

    /// The command's reads: its extension is running, its Session exists;
    /// answers the Session's position.
    fn command_reads(
        &self,
        store: Store<'_>,
        entry: &Entry,
        inv: &Invocation<'_>,
    ) -> Result<Option<i64>, ApiError> {
        let id = entry.id();
        let meta = self.with_cache(store.sql(), |cache| Ok(cache.meta.get(id).cloned()))?;
        if let Some(reason) = meta.and_then(|m| m.stopped) {
            return Err(ApiError::ExtensionStopped {
                extension: id.to_owned(),
                reason,
            });
        }
        let Some(session_id) = inv.session_id else {
            return Ok(None);
        };
        if !store.session_exists(session_id)? {
            return Err(ApiError::SessionNotFound(session_id.to_owned()));
        }
        Ok(Some(store.position(session_id)?))
    }
}

/// Checks an invocation against its declaration (scope, size, input
/// schema): its canonical input.
fn checked_input(entry: &Entry, inv: &Invocation<'_>) -> Result<String, ApiError> {
    let id = entry.id();
    let decl = entry.manifest.commands.get(inv.command).ok_or_else(|| {
        ApiError::ExtensionCommandNotFound {
            extension: id.to_owned(),
            command: inv.command.to_owned(),
        }
    })?;
    match (decl.scope, inv.session_id) {
        (Scope::Session, None) => {
            return Err(ApiError::InvalidRequest(format!(
                "command {id}.{} runs in a Session: call it at \
                 /sessions/:sessionId/extensions/{id}/commands/{}",
                inv.command, inv.command
            )))
        }
        (Scope::Agent, Some(_)) => {
            return Err(ApiError::InvalidRequest(format!(
                "command {id}.{} runs for the Agent: call it at /extensions/{id}/commands/{}",
                inv.command, inv.command
            )))
        }
        _ => {}
    }
    let mut canonical = String::new();
    manifest::canonical_json(&inv.input, &mut canonical);
    if canonical.len() > EXTENSION_COMMAND_BYTES_MAX {
        return Err(ApiError::InvalidRequest(format!(
            "input: {} bytes of JSON; command {id}.{} takes at most {EXTENSION_COMMAND_BYTES_MAX}",
            canonical.len(),
            inv.command
        )));
    }
    entry
        .check_input(inv.command, &inv.input)
        .map_err(|e| ApiError::InvalidRequest(format!("input of {id}.{}: {e}", inv.command)))?;
    Ok(canonical)
}

/// A replayed requestId: the stored result when the command and input are
/// the same, else a conflict; `None` when it is new.
#[allow(clippy::type_complexity)]
fn replayed<A>(
    store: Store<'_>,
    entry: &Entry,
    inv: &Invocation<'_>,
    canonical: &str,
) -> Result<Option<Result<Invoked<A>, ApiError>>, ApiError> {
    let Some(request_id) = inv.request_id else {
        return Ok(None);
    };
    let scope = inv.session_id.unwrap_or("");
    let Some((command, input, result)) =
        tables::request(store.sql(), entry.id(), scope, request_id)?
    else {
        return Ok(None);
    };
    Ok(Some(if command == inv.command && input == canonical {
        Ok(Invoked {
            result: serde_json::from_str(&result).map_err(internal)?,
            sent: Vec::new(),
            rearm: false,
        })
    } else {
        Err(ApiError::RequestConflict(request_id.to_owned()))
    }))
}

/// A command's refusal as the caller sees it.
fn refused(r: Refusal) -> ApiError {
    match r {
        Refusal::Hook(Failure::Refused(e)) => ApiError::InvalidRequest(e),
        Refusal::Hook(Failure::Failed(e)) => ApiError::ExtensionCommandFailed(e),
        Refusal::Hook(Failure::Bound(e)) => ApiError::ExtensionLimit(e),
        Refusal::Send(e) => e,
    }
}

/// The result's JSON, within its bound.
fn checked_result(entry: &Entry, command: &str, result: &Value) -> Result<String, ApiError> {
    let text = result.to_string();
    if text.len() > EXTENSION_COMMAND_BYTES_MAX {
        return Err(ApiError::ExtensionCommandFailed(format!(
            "extension {}: the result of {command} is {} bytes of JSON; at most {EXTENSION_COMMAND_BYTES_MAX}",
            entry.id(),
            text.len()
        )));
    }
    Ok(text)
}
