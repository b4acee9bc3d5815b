//! Performs the files module's operations ([`crate::files::module::call`])
//! against the host's port: the Agent's own SQLite workspace, or a port the
//! host wrote in JS (the R2 port among them), reached through the shim's
//! `filesCall`. Everything the operations decide is in the core; a
//! stepwise JS port (R2) runs journaled (`files::journal`), and
//! `files_journal.rs` undoes what a restart left.

// `shiitake/files-search`: the search visibility policy for a host's own
// Files adapter (not in the lean wasm at all).
#[cfg(feature = "files-search")]
mod search;

use super::bindings::{error_message, now_ms, within_or_stopped, JsTools};
use super::sql::DoSql;
use super::Inner;
use crate::files::journal::{self, Journaled, Owner};
use crate::files::module;
use crate::files::port::{Change, Page, Port, PortError, Replaced, Stat};
use crate::files::workspace::{Bounds, Workspace};
use crate::limits::{FILE_BYTES_MAX, TOOL_ABORT_GRACE_MS};
use crate::run::operation::OperationCall;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use wasm_bindgen_futures::JsFuture;

/// Where a files module's files live.
#[derive(Debug, Clone)]
pub enum HostPort {
    /// The Agent's own SQLite.
    Workspace(Bounds),
    /// A port object in JS, by the module id the shim keys it with.
    /// `stepwise`: its `replace` is atomic for one change only, so a patch
    /// is journaled.
    Js { patches: bool, stepwise: bool },
}

/// The host's Files ports as the files code finds them (`tools.rs` keeps
/// them): the shim, and the port under the shim's key. A lean build undoes
/// no journal, the only user of both.
#[cfg_attr(not(feature = "files"), allow(dead_code))]
pub(super) trait Ports {
    fn js(&self) -> &JsTools;
    /// The port under `key` as offered now: a module id, or a files grant
    /// holder's run key (`files_grant::port_key`).
    fn port(&self, key: &str) -> Option<HostPort>;
}

/// A JS port, borrowed for one call.
pub struct JsPort<'a> {
    pub js: &'a JsTools,
    pub module_id: &'a str,
    pub patches: bool,
    pub signal: &'a web_sys::AbortSignal,
}

// A reply holds at most one file's content, JSON-escaped (up to 6 bytes a
// character for control characters), plus its envelope.
const REPLY_BYTES_MAX: usize = FILE_BYTES_MAX * 6 + 4_096;

impl JsPort<'_> {
    async fn call<T: DeserializeOwned>(&self, method: &str, args: Value) -> Result<T, PortError> {
        #[derive(Deserialize)]
        struct Reply {
            #[serde(default)]
            value: Value,
            #[serde(default)]
            error: Option<String>,
        }
        let promise = self
            .js
            .files_call(self.module_id, method, &args.to_string(), self.signal);
        let reply = JsFuture::from(promise)
            .await
            .map_err(|e| PortError(error_message(&e)))?
            .as_string()
            .unwrap_or_default();
        if reply.len() > REPLY_BYTES_MAX {
            return Err(PortError(format!(
                "the files port's `{method}` answered {} bytes; at most {REPLY_BYTES_MAX}",
                reply.len()
            )));
        }
        let reply: Reply = crate::json::from_text(&reply)
            .map_err(|e| PortError(format!("the files port's `{method}` answer: {e}")))?;
        if let Some(error) = reply.error {
            return Err(PortError(crate::text::shorten(&error).to_owned()));
        }
        crate::json::decode(reply.value)
            .map_err(|e| PortError(format!("the files port's `{method}` answer: {e}")))
    }
}

impl Port for JsPort<'_> {
    async fn read(&self, path: &str) -> Result<Option<String>, PortError> {
        self.call("read", json!([path])).await
    }

    async fn stat(&self, path: &str) -> Result<Stat, PortError> {
        #[derive(Deserialize)]
        #[serde(tag = "kind", rename_all = "lowercase")]
        enum Found {
            File { size: u64 },
            Dir,
        }
        Ok(
            match self.call::<Option<Found>>("stat", json!([path])).await? {
                Some(Found::File { size }) => Stat::File { size },
                Some(Found::Dir) => Stat::Dir,
                None => Stat::Missing,
            },
        )
    }

    async fn list(&self, dir: &str, cursor: Option<&str>) -> Result<Page, PortError> {
        self.call("list", json!([dir, cursor])).await
    }

    async fn write(&self, path: &str, content: &str) -> Result<(), PortError> {
        self.call::<Value>("write", json!([path, content]))
            .await
            .map(drop)
    }

    async fn replace(&self, changes: &[Change]) -> Result<Replaced, PortError> {
        #[derive(Deserialize)]
        struct Answer {
            #[serde(default)]
            conflict: Option<String>,
        }
        // `null` (or nothing) when every change applied.
        let answer: Option<Answer> = self.call("replace", json!([changes])).await?;
        Ok(match answer.and_then(|a| a.conflict) {
            Some(path) => Replaced::Conflict { path },
            None => Replaced::Done,
        })
    }

    fn patches(&self) -> bool {
        self.patches
    }
}

impl HostPort {
    /// Whether the port supplies the patch engine (`apply_patch`).
    pub fn patches(&self) -> bool {
        match self {
            HostPort::Workspace(_) => true,
            HostPort::Js { patches, .. } => *patches,
        }
    }

    /// Whether a patch on this port is journaled.
    pub fn stepwise(&self) -> bool {
        matches!(self, HostPort::Js { stepwise: true, .. })
    }

    /// Runs the files operation `op` on this port, a JS port reached by
    /// the shim's key `key` (the module id, or a run's captured port).
    pub async fn call(
        &self,
        key: &str,
        sql: &DoSql,
        js: &JsTools,
        op: &OperationCall,
        now_ms: i64,
        signal: &web_sys::AbortSignal,
    ) -> Result<Value, String> {
        let js = JsPort {
            js,
            module_id: key,
            patches: self.patches(),
            signal,
        };
        let stopped = || signal.aborted();
        let port = match self {
            HostPort::Workspace(bounds) => {
                EitherPort::Workspace(Workspace::open(sql, *bounds, now_ms))
            }
            HostPort::Js { stepwise, .. } => EitherPort::Js(
                js,
                stepwise.then(|| Journaled {
                    sql,
                    owner: Owner {
                        port: key.to_owned(),
                        session_id: op.of.session_id.clone(),
                        command_id: op.of.command_id.clone(),
                        call_id: op.of.call_id.clone(),
                    },
                    now_ms,
                    stopped: &stopped,
                }),
            ),
        };
        // The model sees the error's text as the tool's error.
        module::call(&port, &op.operation, &op.args)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Either port behind one type: the files module's operations, generic
/// over their port, are then compiled once rather than once per port
/// (~13 KB of wasm, whose deployed size is bounded).
enum EitherPort<'a> {
    Workspace(Workspace<'a>),
    /// A JS port, and the journal its replaces run under when stepwise.
    Js(JsPort<'a>, Option<Journaled<'a>>),
}

impl Port for EitherPort<'_> {
    async fn read(&self, path: &str) -> Result<Option<String>, PortError> {
        match self {
            EitherPort::Workspace(p) => p.read(path).await,
            EitherPort::Js(p, _) => p.read(path).await,
        }
    }

    async fn stat(&self, path: &str) -> Result<Stat, PortError> {
        match self {
            EitherPort::Workspace(p) => p.stat(path).await,
            EitherPort::Js(p, _) => p.stat(path).await,
        }
    }

    async fn list(&self, dir: &str, cursor: Option<&str>) -> Result<Page, PortError> {
        match self {
            EitherPort::Workspace(p) => p.list(dir, cursor).await,
            EitherPort::Js(p, _) => p.list(dir, cursor).await,
        }
    }

    async fn write(&self, path: &str, content: &str) -> Result<(), PortError> {
        match self {
            EitherPort::Workspace(p) => p.write(path, content).await,
            EitherPort::Js(p, _) => p.write(path, content).await,
        }
    }

    async fn replace(&self, changes: &[Change]) -> Result<Replaced, PortError> {
        match self {
            EitherPort::Workspace(p) => p.replace(changes).await,
            EitherPort::Js(p, None) => p.replace(changes).await,
            EitherPort::Js(p, Some(journal)) => journal.replace(p, changes).await,
        }
    }

    fn patches(&self) -> bool {
        match self {
            EitherPort::Workspace(p) => p.patches(),
            EitherPort::Js(p, _) => p.patches(),
        }
    }
}

impl Inner {
    /// Runs files operation `op` on `port` (the shim's key `key`) within
    /// the tool timeout. A patch on a stepwise port that is stopped (the
    /// timeout aborts it) undoes what it wrote and says so within the
    /// grace; one that does not end even then leaves its journal, undone
    /// when the Agent next starts ([`Inner::sweep_journals`]).
    pub(super) async fn files_call(
        &self,
        js: &JsTools,
        port: &HostPort,
        key: &str,
        op: &OperationCall,
        controller: &web_sys::AbortController,
        timeout_ms: u64,
    ) -> Result<Value, String> {
        let signal = controller.signal();
        let called = port.call(key, &self.sql, js, op, now_ms(), &signal);
        match within_or_stopped(called, timeout_ms, controller, TOOL_ABORT_GRACE_MS).await {
            Ok(done) => done,
            Err(Some(done)) if port.stepwise() => done,
            Err(_) => {
                let mut why = op.timed_out(timeout_ms);
                // (A lean build has no stepwise port, nor a journal.)
                let journaled = cfg!(feature = "files")
                    && port.stepwise()
                    && journal::left_by(&self.sql, op.of.journal_key());
                if journaled {
                    why.push_str(
                        "; it was still writing its files: some may hold part of its patch \
                         until the runtime puts them back (when the Agent next starts)",
                    );
                }
                Err(why)
            }
        }
    }
}
