//! An extension's lifecycle: recorded with its first status row, brought
//! to each new revision (its state migrated once per new state version),
//! activated once it runs in this instance (its `activate` callback; the
//! resource it returns is the shim's to dispose), stopped by a failing
//! hook, resumed by the host or a new revision.

use super::effects::{Call, Outcome, Stop};
use super::views::Status;
use super::{tables, Cache, Entry, Extensions, MetaRow};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::sql::{atomically, Sql, SqlError};
use serde_json::json;

impl Extensions {
    /// Brings every roster extension to its definition: a new one is
    /// recorded, with its state table; a new revision resumes a stopped
    /// one and runs the migrations its new state version needs, in order,
    /// in one transition (a failed migration records a stop and leaves the
    /// state as it was). Each extension is its own transition. Then each
    /// running extension with an `activate` callback is activated
    /// ([`Extensions::activate`]).
    pub fn open(&self, ctx: &mut Ctx<'_>) -> Result<(), ApiError> {
        // An empty roster reads nothing.
        if self.roster.is_empty() {
            return Ok(());
        }
        let sql = ctx.store.sql();
        for entry in self.roster.entries() {
            atomically(sql, || {
                self.with_cache(sql, |cache| match cache.meta.get(entry.id()).cloned() {
                    None => {
                        let meta = MetaRow {
                            revision: entry.revision.clone(),
                            state_version: entry.manifest.state.version,
                            stopped: None,
                            stopped_at: None,
                            cursor: None,
                        };
                        tables::create_state(sql, entry.id())?;
                        tables::put_meta(sql, entry.id(), &meta, ctx.now_ms)?;
                        cache.meta.insert(entry.id().to_owned(), meta);
                        Ok(())
                    }
                    Some(meta) if meta.revision == entry.revision => Ok(()),
                    Some(meta) => self.bring_up(sql, cache, entry, meta, ctx.now_ms),
                })
            })?;
        }
        for entry in self.roster.entries() {
            self.activate(sql, entry, ctx.now_ms)?;
        }
        Ok(())
    }

    /// Calls `entry`'s `activate` callback when it has one and runs (not
    /// stopped), in its own transition: an `activate` that throws stops
    /// the extension like any failing hook (the settled work it then
    /// misses is logged and replayed once it is resumed). The shim keeps
    /// the disposer it returned and runs it when the instance closes
    /// (`js/do/hooks.mjs`); a second activation in the same instance (a
    /// resume) finds the resource still open and keeps it.
    fn activate(&self, sql: &dyn Sql, entry: &Entry, now_ms: i64) -> Result<(), ApiError> {
        if !entry.manifest.hooks.activate {
            return Ok(());
        }
        atomically(sql, || {
            self.with_cache(sql, |cache| {
                let Some(meta) = cache.meta.get(entry.id()).cloned() else {
                    return Ok(());
                };
                if meta.stopped.is_some() {
                    return Ok(());
                }
                let call = Call {
                    kind: "activate",
                    session: None,
                    event: json!({"revision": entry.revision}),
                    now_ms,
                    sends_allowed: false,
                    closed: &[],
                };
                match self.call(sql, cache, entry, call)? {
                    // It runs outside the owner's writes: nothing to commit.
                    Ok(_) => Ok(()),
                    Err(failure) => {
                        let stop = Stop {
                            reason: failure.reason(),
                            cursor: meta.cursor.or(Some(cache.log_head)),
                            at: now_ms,
                        };
                        self.commit(sql, cache, entry, None, Outcome::Stopped(stop))
                    }
                }
            })
        })?;
        Ok(())
    }

    /// Records `entry`'s revision, migrating its state when its version
    /// moved up, and clears its stop; or records why it cannot run.
    fn bring_up(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        mut meta: MetaRow,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        let declared = entry.manifest.state.version;
        meta.revision = entry.revision.clone();
        let refusal = if meta.state_version > declared {
            Some(format!(
                "extension {}: the stored state is version {}, newer than this definition's {declared}; \
                 deploy a definition of state version {} or later",
                entry.id(),
                meta.state_version,
                meta.state_version
            ))
        } else if meta.state_version < declared {
            let call = Call {
                kind: "migrate",
                session: None,
                event: json!({"from": meta.state_version, "to": declared}),
                now_ms,
                sends_allowed: false,
                closed: &[],
            };
            match self.call(sql, cache, entry, call)? {
                Ok(effects) => {
                    self.commit(sql, cache, entry, None, Outcome::Done(Box::new(effects)))?;
                    meta.state_version = declared;
                    None
                }
                Err(failure) => Some(format!(
                    "migrating state {} -> {declared}: {}",
                    meta.state_version,
                    failure.reason()
                )),
            }
        } else {
            None
        };
        let cursor = meta.cursor.or(Some(cache.log_head));
        meta.stopped = None;
        meta.stopped_at = None;
        cache.meta.insert(entry.id().to_owned(), meta.clone());
        match refusal {
            // The status row with its new revision, stopped.
            Some(reason) => {
                let stop = Stop {
                    reason,
                    cursor,
                    at: now_ms,
                };
                self.commit(sql, cache, entry, None, Outcome::Stopped(stop))
            }
            None => tables::put_meta(sql, entry.id(), &meta, now_ms),
        }
    }

    /// Resumes a stopped extension (a host call): its stop is cleared (a
    /// pending migration runs first), it is activated, and the settled
    /// work it missed is replayed by the next passes. Answers its status.
    pub fn resume(&self, ctx: &mut Ctx<'_>, id: &str) -> Result<Status, ApiError> {
        let entry = self.entry(id)?;
        let sql = ctx.store.sql();
        atomically(sql, || {
            self.with_cache(sql, |cache| {
                let Some(meta) = cache.meta.get(id).cloned() else {
                    return Ok(());
                };
                if meta.stopped.is_some() {
                    self.bring_up(sql, cache, entry, meta, ctx.now_ms)?;
                }
                Ok(())
            })
        })?;
        self.activate(sql, entry, ctx.now_ms)?;
        self.status_of(ctx.store, entry)
    }
}
