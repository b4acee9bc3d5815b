//! Undoes the files patch journals a restart left (`files::journal`): the
//! one a resumed call left, as its outcome ([`Inner::undo_call`], the
//! driver's `ToolWork::Undo`), and, once per instance, those whose call
//! will never resume ([`Inner::sweep_journals`]). A lean build (no `files`
//! feature) writes no journal: `files_journal_left_out.rs`.

use super::bindings::{log_error, within, JsTools};
use super::files::{HostPort, JsPort, Ports};
use super::sql::DoSql;
use super::Inner;
use crate::files::journal::{self, Owner, Undone};
use crate::run::operation::CallRef;
use crate::run::tools::Progress;
use crate::store::State;
use std::cell::Cell;

/// Whether this instance looked at the journals earlier ones left (those
/// written before it opened).
pub(super) struct Sweep {
    opened_ms: i64,
    done: Cell<bool>,
}

impl Sweep {
    pub(super) fn new() -> Sweep {
        Sweep {
            opened_ms: super::bindings::now_ms(),
            done: Cell::new(false),
        }
    }

    /// Whether [`Inner::sweep_journals`] is due: the first time asked.
    pub(super) fn due(&self) -> bool {
        !self.done.replace(true)
    }
}

impl Inner {
    /// The port a journal was written through, by its key, as offered now.
    fn journal_port(&self, tools: &impl Ports, key: &str) -> Result<HostPort, String> {
        tools
            .port(key)
            .ok_or_else(|| format!("its files port `{key}` is not offered now"))
    }

    /// Undoes the patches call `of` left journaled (a restart stopped it
    /// while it wrote them), within the tool timeout: how, for the model.
    pub(super) async fn undo_call(
        &self,
        tools: &impl Ports,
        of: &CallRef,
        controller: &web_sys::AbortController,
    ) -> String {
        let left = match journal::journals(&self.sql, Some(of.journal_key())) {
            Ok(left) => left,
            Err(e) => return format!("not undone: its journal could not be read ({e})"),
        };
        let signal = controller.signal();
        let undo = async {
            let mut undone = Undone::default();
            let mut failed = Vec::new();
            for j in left {
                let port = self.journal_port(tools, &j.owner.port);
                match recover(port, &j.owner.port, &self.sql, tools.js(), j.id, &signal).await {
                    Ok(one) => undone.merge(one),
                    Err(e) => failed.push(e),
                }
            }
            if failed.is_empty() {
                undone.describe()
            } else {
                format!(
                    "not undone ({}): its files may hold part of it",
                    failed.join("; ")
                )
            }
        };
        let timeout_ms = self.config.tool_timeout_ms;
        within(undo, timeout_ms, controller, 0)
            .await
            .unwrap_or_else(|| {
                format!(
                    "not undone within {timeout_ms} ms: its files may hold part of it until the \
                     runtime puts them back (when the Agent next starts)"
                )
            })
    }

    /// Undoes the patch journals earlier instances left whose call will
    /// never resume (its turn settled, or the call was closed), once per
    /// instance ([`Sweep::due`]), at its first offer: the ports are known
    /// then. Those of a
    /// call still open are undone when it resumes ([`Inner::undo_call`]),
    /// which tells the model; these only the log hears of.
    pub(super) async fn sweep_journals(&self, tools: &impl Ports, sweep: &Sweep) {
        let left = match journal::journals(&self.sql, None) {
            Ok(left) => left,
            Err(e) => return log_error(format!("files patch journals unreadable: {e}")),
        };
        let Ok(controller) = web_sys::AbortController::new() else {
            return;
        };
        let signal = controller.signal();
        let sweep =
            async {
                for j in left {
                    if j.created_at >= sweep.opened_ms || !self.orphaned(&j.owner) {
                        continue;
                    }
                    let port = self.journal_port(tools, &j.owner.port);
                    let outcome =
                        match recover(port, &j.owner.port, &self.sql, tools.js(), j.id, &signal)
                            .await
                        {
                            Ok(undone) => undone.describe(),
                            Err(e) => format!("not undone: {e}"),
                        };
                    let Owner {
                        session_id,
                        command_id,
                        call_id,
                        ..
                    } = &j.owner;
                    log_error(format!(
                        "the files patch of tool call {call_id} (Session {session_id}, turn \
                     {command_id}) that a restart stopped was {outcome}"
                    ));
                }
            };
        let timeout_ms = self.config.tool_timeout_ms;
        if within(sweep, timeout_ms, &controller, 0).await.is_none() {
            log_error(format!(
                "undoing the files patches restarts left did not finish within {timeout_ms} ms; \
                 the rest is undone when the Agent next starts"
            ));
        }
    }

    /// Whether the call that wrote a journal will never resume.
    fn orphaned(&self, owner: &Owner) -> bool {
        let row = match self.store().command(&owner.session_id, &owner.command_id) {
            Ok(row) => row,
            Err(e) => {
                log_error(format!("files patch journal of {}: {e}", owner.command_id));
                return false;
            }
        };
        match row {
            Some(head) if head.state == State::Running => Progress::parse(head.usage.as_deref())
                .is_ok_and(|p| !p.open.iter().any(|c| c.id == owner.call_id)),
            _ => true,
        }
    }
}

/// Undoes the patch journal `id` a crash or a stop left and clears it,
/// through `port`, the port under its key `key` now (`Err`: none, and
/// why). A journal is only ever written through a JS port: the workspace
/// under the same key is other storage, so none to undo it with.
async fn recover(
    port: Result<HostPort, String>,
    key: &str,
    sql: &DoSql,
    js: &JsTools,
    id: i64,
    signal: &web_sys::AbortSignal,
) -> Result<Undone, String> {
    let js = JsPort {
        js,
        module_id: key,
        patches: true,
        signal,
    };
    let port = match port {
        Ok(HostPort::Js { .. }) => Ok(&js),
        Ok(HostPort::Workspace(_)) => Err(format!(
            "`{key}` is the Agent's SQLite now, not the port the patch was written through"
        )),
        Err(why) => Err(why),
    };
    journal::recover(sql, id, port)
        .await
        .map_err(|e| format!("the patch journal: {e}"))
}
