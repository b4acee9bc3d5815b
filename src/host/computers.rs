//! Performs the Computers' description rounds and calls (seed knapsack:
//! Knapsack.computer, Knapsack.computers). Which Computers stay, what their
//! modules are and what their grants key is, is `crate::computer`'s and
//! `mcp::Hub`'s; this asks the shim for the host's list at each tool offer,
//! describes every Computer at once under the describe timeout when the
//! list changed or the host announced a change since (`ShiitakeDO#computersChanged`,
//! an async iterable list: the shim counts them), and carries calls with
//! their invocation context.

use super::bindings::{self, error_message, log_warn, JsTools};
use super::files::HostPort;
use crate::computer::{self, Connection, Described, Reply, Round};
use crate::files::module::module as files_module;
use crate::mcp::Hub;
use futures::future::{join_all, LocalBoxFuture, Shared};
use futures::FutureExt;
use serde::Deserialize;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen_futures::JsFuture;

/// The Computers' live state in this instance.
pub struct Computers {
    /// Whether the host lists Computers (`tools().computers`).
    listed: bool,
    /// Bound on describing them, at most `COMPUTER_DESCRIBE_TIMEOUT_MS`.
    timeout_ms: u64,
    /// The description round in progress, which concurrent turns share.
    round: RefCell<Option<Shared<LocalBoxFuture<'static, ()>>>>,
    /// The files ports of the Computers offered, by files module id.
    pub ports: RefCell<Vec<(String, HostPort)>>,
}

impl Computers {
    pub fn new(listed: bool, timeout_ms: u64) -> Computers {
        Computers {
            listed,
            timeout_ms,
            round: RefCell::default(),
            ports: RefCell::default(),
        }
    }
}

#[derive(Deserialize)]
struct Listed {
    #[serde(default)]
    list: Option<serde_json::Value>,
    #[serde(default)]
    error: Option<String>,
    /// The host's announcements of a change in this instance so far.
    #[serde(default)]
    announced: u64,
}

/// Describes the host's Computers again when their list changed since the
/// last description or the host announced a change (its Computers are
/// described again though the list is equal: a provider's advertisement may
/// have changed, a dropped one may be back before the retry interval), or a
/// Computer was dropped and the retry interval passed (or waits for the
/// round in progress). The announcements are live state: a new instance
/// has captured nothing, so its first offer describes the list anyway. A list the host
/// cannot give keeps the Computers described before, and is logged.
pub async fn refresh(js: &JsTools, hub: &Rc<RefCell<Hub>>, computers: &Rc<Computers>) {
    if !computers.listed {
        return;
    }
    let pending = computers.round.borrow().clone();
    if let Some(round) = pending {
        return round.await;
    }
    let (list, announced) = match read_list(js) {
        Ok(read) => read,
        Err(why) => return log_warn(format!("tools().computers: {why}")),
    };
    let digest = computer::list_digest(&list, announced);
    if !hub.borrow().computers_due(digest, bindings::now_ms()) {
        return;
    }
    let (js, hub, computers) = (js.clone(), Rc::clone(hub), Rc::clone(computers));
    let round = {
        let computers = Rc::clone(&computers);
        async move {
            describe_all(&js, &hub, &computers, list, digest).await;
            computers.round.borrow_mut().take();
        }
    }
    .boxed_local()
    .shared();
    *computers.round.borrow_mut() = Some(round.clone());
    round.await;
}

fn read_list(js: &JsTools) -> Result<(Vec<Connection>, u64), String> {
    let listed: Listed = crate::json::from_text(&js.computers_list()).map_err(|e| e.to_string())?;
    if let Some(error) = listed.error {
        return Err(error);
    }
    let list = computer::decode_list(listed.list.unwrap_or_default()).map_err(String::from)?;
    Ok((list, listed.announced))
}

async fn describe_all(
    js: &JsTools,
    hub: &RefCell<Hub>,
    computers: &Computers,
    list: Vec<Connection>,
    digest: u64,
) {
    let timeout_ms = computers.timeout_ms;
    let attempts = list.into_iter().map(|connection| async move {
        let Ok(controller) = web_sys::AbortController::new() else {
            return (connection, Described::Rejected("could not be asked".into()));
        };
        let asked = JsFuture::from(js.computer_describe(&connection.name, &controller.signal()));
        let described = match bindings::within(asked, timeout_ms, &controller, 0).await {
            None => Described::TimedOut,
            Some(Ok(text)) => Described::Advertised(text.as_string().unwrap_or_default()),
            Some(Err(e)) => Described::Rejected(error_message(&e)),
        };
        (connection, described)
    });
    let round = Round::decide(join_all(attempts).await, timeout_ms);
    let mut reports = round.unavailable.clone();
    let mut offered = Vec::new();
    let mut ports = Vec::new();
    for available in round.available {
        let mut modules = vec![available.module.clone()];
        if let Some(id) = available.files_module_id() {
            let (patches, stepwise) = (available.connection.patches, available.connection.stepwise);
            match files_module(&id, patches) {
                Ok(module) => {
                    let direct = available.connection.direct;
                    modules.push(if direct {
                        module.offered_direct()
                    } else {
                        module
                    });
                    ports.push((id, HostPort::Js { patches, stepwise }));
                }
                Err(e) => {
                    reports.push(unavailable(&available.connection, e.0));
                    continue;
                }
            }
        }
        offered.push((available.connection, modules));
    }
    let (connections, modules): (Vec<_>, Vec<_>) = offered.into_iter().unzip();
    let dropped = !reports.is_empty();
    let refused = hub
        .borrow_mut()
        .set_computers(digest, modules, dropped, bindings::now_ms());
    for (module_id, why) in refused {
        if let Some(c) = connections.iter().find(|c| c.module_id() == module_id) {
            reports.push(unavailable(c, why));
            let files = c.files_module_id();
            ports.retain(|(id, _)| Some(id) != files.as_ref());
        }
    }
    *computers.ports.borrow_mut() = ports;
    for report in &reports {
        log_warn(format!(
            "Computer `{}` is unavailable: {}",
            report.name, report.reason
        ));
        if let Ok(json) = serde_json::to_string(report) {
            js.on_unavailable(&json);
        }
    }
}

fn unavailable(connection: &Connection, reason: String) -> computer::Unavailable {
    computer::Unavailable {
        id: connection.id.clone(),
        name: connection.name.clone(),
        reason,
    }
}

/// One call of a Computer's advertised operation, with the invocation
/// context (execution id, deadline; the abort signal beside it).
pub async fn call(
    js: &JsTools,
    name: &str,
    operation: &str,
    args: &serde_json::Value,
    invocation: &str,
    signal: &web_sys::AbortSignal,
) -> Result<serde_json::Value, String> {
    let reply =
        JsFuture::from(js.computer_call(name, operation, &args.to_string(), invocation, signal))
            .await
            .map_err(|e| error_message(&e))?;
    match computer::call_reply(&reply.as_string().unwrap_or_default())? {
        Reply::Result(value) => Ok(value),
        Reply::Error(why) => Err(why),
    }
}
