//! The files grant holder's tools in the Durable Object
//! ([`crate::extension::files_grant`] decides what they are). At a run's
//! first offer the holder's `files(context, run)` is called once through
//! the shim, which keeps the port it returned under [`port_key`]; the run
//! keeps the answer (tools, or none) until it ends, when the shim is told
//! to forget the port. Calls run on that port through the files module's
//! own code (`files.rs`), behind the same gate as every operation.
//!
//! The host's own `tools().files` and an extension holding the files grant
//! would both be the module `files` with the tools `read`, `write`, ...:
//! such a host is refused (every request answers 503 `host_misconfigured`),
//! never silently shadowed. So is a holder without a tool runtime (no
//! `tools()`; seed: "A Files extension still requires a host tool
//! runtime").

use super::bindings::{log_error, JsTools};
use super::files::HostPort;
use super::Inner;
use crate::extension::files_grant::FilesPort;
use crate::extension::Extensions;
use crate::files::module::MODULE_ID;
use crate::files::workspace::Bounds;
use std::cell::RefCell;
use std::collections::HashMap;

/// The shim's key for the port captured for the run headed by `head`
/// (`js/do/hooks.mjs` keys it the same way).
pub(super) fn port_key(head: &str) -> String {
    format!("files@{head}")
}

/// The captured files tools of each live run, by head: `None` when the
/// holder gave none for that run (not running, nothing returned, or its
/// builder failed).
#[derive(Default)]
pub(super) struct RunFiles(RefCell<HashMap<String, Option<HostPort>>>);

impl RunFiles {
    /// The run's port, when the holder gave it tools.
    pub(super) fn port(&self, head: &str) -> Option<HostPort> {
        self.0.borrow().get(head).cloned().flatten()
    }

    /// The run's tools could not be offered: none for the rest of the run,
    /// so no call of another module `files` reaches the port.
    pub(super) fn withdraw(&self, head: &str) {
        if let Some(port) = self.0.borrow_mut().get_mut(head) {
            *port = None;
        }
    }

    /// Forgets a finished run's tools (and the shim its port).
    pub(super) fn release(&self, js: &JsTools, head: &str) {
        if self.0.borrow_mut().remove(head).is_some() {
            js.files_release(&port_key(head));
        }
    }
}

/// The roster, refused when the files grant cannot be honoured: the host's
/// own Files would be shadowed, or there is no tool runtime. `own_files`:
/// `None` when `tools()` returned nothing, else whether it configures the
/// host's own Files (a `tools()` refused on its own counts as none).
pub(super) fn check(
    own_files: Option<bool>,
    extensions: Result<Extensions, String>,
) -> Result<Extensions, String> {
    let ext = extensions?;
    let Some(holder) = ext.roster().files_holder() else {
        return Ok(ext);
    };
    let id = holder.id();
    if let Err(e) = crate::extension::files_grant::files_module(false) {
        return Err(format!("extension {id} holds the files grant: {}", e.0));
    }
    match own_files {
        Some(true) => Err(format!(
            "extension {id} holds the files grant and tools().files configures the host's own \
             Files: both would be the module `{MODULE_ID}` with the same direct tools (read, \
             write, ...); keep one (drop tools().files or the roster's files grant)"
        )),
        None => Err(format!(
            "extension {id} holds the files grant, which needs the host's tool runtime: tools() \
             returned nothing (return at least {{}})"
        )),
        Some(false) => Ok(ext),
    }
}

impl Inner {
    /// The files tools of the run headed by `head`: `Some(patches)` when
    /// the holder gave it a port. The holder's builder runs at the run's
    /// first offer only; later offers (each step) reuse its answer.
    pub(super) fn run_files(&self, files: &RunFiles, session: &str, head: &str) -> Option<bool> {
        if let Some(captured) = files.0.borrow().get(head) {
            return captured.as_ref().map(HostPort::patches);
        }
        let ext = self.extensions()?;
        ext.roster().files_holder()?;
        let port = ext
            .files_tools(self.store(), session, head)
            .and_then(|given| match given.port {
                Ok(port) => port,
                Err(e) => {
                    log_error(format!("files tools not offered in run {head}: {e}"));
                    None
                }
            })
            .and_then(|port| {
                host_port(&port)
                    .map_err(|e| log_error(format!("files tools not offered in run {head}: {e}")))
                    .ok()
            });
        let patches = port.as_ref().map(HostPort::patches);
        files.0.borrow_mut().insert(head.to_owned(), port);
        patches
    }
}

fn host_port(port: &FilesPort) -> Result<HostPort, String> {
    match &port.workspace {
        Some(bounds) => Ok(HostPort::Workspace(
            Bounds::parse(&bounds.to_string()).map_err(|e| format!("sqliteWorkspace: {e}"))?,
        )),
        None => Ok(HostPort::Js {
            patches: port.patches,
            stepwise: port.stepwise,
        }),
    }
}
