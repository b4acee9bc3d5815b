//! Performs tool calls ([`Action::RunTool`]) in the Durable Object. The host
//! Worker's capabilities come from the JS shim (`ShiitakeDO#tools()`, see
//! `js/do.mjs`); which tools are offered is `mcp::Hub`'s, whether a call may
//! run is its `OperationCall` gate's (grants read at each call, the confirm
//! hook, marked started before an unsafe operation). This only performs:
//! operations through the shim's `invoke` or an MCP server, model code
//! through the Worker Loader sandbox (`js/execute.mjs`). Bounds:
//! `SHIITAKE_TOOL_TIMEOUT_MS` (at most and by default `TOOL_CALL_TIMEOUT_MS`)
//! plus `TOOL_ABORT_GRACE_MS` per call, `EXECUTIONS_CONCURRENT_MAX`
//! sandboxes at once, `GUEST_CALLS_PER_EXECUTION_MAX` guest calls per run.
//!
//! [`Action::RunTool`]: crate::run::driver::Action::RunTool

use super::bindings::{self, error_message, JsTools};
use super::computers::{self, Computers};
use super::files::HostPort;
use super::files_grant::{self, RunFiles};
use super::files_journal::Sweep;
use super::stopper::Stopper;
use super::ui::HostUi;
use super::{blame, mcp, Inner};
use crate::capability::door::{self, Toolset};
use crate::capability::Catalog;
use crate::files::module::MODULE_ID;
use crate::files::workspace::Bounds;
use crate::grants::AccessConfig;
use crate::limits::{
    COMPUTER_DESCRIBE_TIMEOUT_MS, EXECUTIONS_CONCURRENT_MAX, GUEST_CALLS_PER_EXECUTION_MAX,
    MCP_CONNECT_TIMEOUT_MS, MCP_RETRY_MS, MCP_RETRY_MS_MAX, MCP_RETRY_MS_MIN, TOOL_ABORT_GRACE_MS,
    TOOL_HEARTBEAT_MS, TOOL_RESULT_IMAGES_MAX, TOOL_RESULT_IMAGE_BYTES_MAX,
};
use crate::mcp::{Hub, OwnTools};
use crate::model::Image;
use crate::observe::Event;
use crate::run::driver::{Input, Offer, ToolRun, ToolWork};
use crate::run::live::ProgressGate;
use crate::run::operation::{
    execute_reply, operation_reply, result_output, CallRef, Gate, GuestStep, OperationCall,
    OperationResult, Rules,
};
use crate::run::tools::{undone_output, ToolOutput};
use futures::future::{select, Either};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    modules: Value,
    #[serde(default)]
    direct: Vec<String>,
    #[serde(default)]
    access: Option<Value>,
    #[serde(default)]
    confirm: bool,
    #[serde(default)]
    loader: bool,
    /// Bound on connecting the MCP servers, at most `MCP_CONNECT_TIMEOUT_MS`.
    #[serde(default)]
    mcp_timeout_ms: Option<u64>,
    /// How long before unavailable MCP servers are tried again.
    #[serde(default)]
    mcp_retry_ms: Option<u64>,
    /// Whether the host lists Computers (`tools().computers`).
    #[serde(default)]
    computers: bool,
    /// Bound on describing the Computers, at most
    /// `COMPUTER_DESCRIBE_TIMEOUT_MS`.
    #[serde(default)]
    computers_timeout_ms: Option<u64>,
    /// The host's Files port (`tools().files`).
    #[serde(default)]
    files: Option<FilesSpec>,
    /// The browser bridge (`tools().ui`, `crate::ui`).
    #[serde(default)]
    ui: Option<crate::ui::Config>,
    /// `tools()` threw: why.
    #[serde(default)]
    error: Option<String>,
}

/// `tools().files` as the shim describes it: the SQLite workspace (its
/// bounds) or a JS port, whether it supplies the patch engine (and is
/// stepwise: `HostPort::Js`), and whether the module's operations are also
/// direct tools (the default).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FilesSpec {
    #[serde(default)]
    workspace: Option<Value>,
    #[serde(default)]
    patches: bool,
    #[serde(default)]
    stepwise: bool,
    #[serde(default = "yes")]
    direct: bool,
}

fn yes() -> bool {
    true
}

impl FilesSpec {
    fn port(&self) -> Result<HostPort, String> {
        match &self.workspace {
            Some(bounds) => Ok(HostPort::Workspace(Bounds::parse(&bounds.to_string())?)),
            None => Ok(HostPort::Js {
                patches: self.patches,
                stepwise: self.stepwise,
            }),
        }
    }
}

/// The own tools a spec decodes to (modules, the toolset over them).
#[derive(Clone)]
struct Decoded {
    tools: Rc<OwnTools>,
    toolset: Rc<Toolset>,
    /// The Files ports, by the id of the module over each.
    ports: Vec<(String, HostPort)>,
}

thread_local! {
    /// The last spec this isolate decoded, and what it decoded to: every
    /// instance of one Worker class hands over the same `tools()` spec, so
    /// opening an Agent decodes and validates no catalog, and its
    /// instances share one (an Agent's memory: `bench/scale.mjs`).
    static DECODED: RefCell<Option<(String, Decoded)>> = const { RefCell::new(None) };
}

/// The own tools of `spec` (its JSON text `raw`) with `fleet`'s module:
/// from the isolate's cache when the same spec was decoded last.
fn decoded(raw: &str, spec: &Spec, fleet: Option<crate::fleet::Offer>) -> Result<Decoded, String> {
    let key = format!("{raw}\u{0}{fleet:?}");
    let hit = DECODED.with_borrow(|cached| {
        cached
            .as_ref()
            .filter(|(k, _)| *k == key)
            .map(|(_, decoded)| decoded.clone())
    });
    if let Some(hit) = hit {
        return Ok(hit);
    }
    let catalog = Catalog::from_json(&spec.modules.to_string())
        .map_err(|e| format!("tools(): modules{e}", e = prefixed(&e.0)))?;
    let execute = if spec.loader {
        Ok(())
    } else {
        Err(
            "`execute` is unavailable: the Worker has no LOADER binding (Worker Loader); \
             add `worker_loaders = [{ binding = \"LOADER\" }]` to wrangler.toml"
                .to_owned(),
        )
    };
    let mut modules = catalog.modules().to_vec();
    let mut direct = spec.direct.clone();
    let mut ports = Vec::new();
    if let Some(files) = &spec.files {
        let port = files.port().map_err(|e| format!("tools().files: {e}"))?;
        let module = crate::files::module::module(MODULE_ID, port.patches())
            .map_err(|e| format!("tools().files: {e}"))?;
        if files.direct {
            direct.extend(
                module
                    .operations
                    .iter()
                    .map(|op| format!("{MODULE_ID}.{}", op.name)),
            );
        }
        modules.push(module);
        ports.push((MODULE_ID.to_owned(), port));
    }
    if let Some(offer) = fleet.filter(|_| cfg!(feature = "fleet")) {
        modules.push(crate::fleet::module(offer));
    }
    if let Some(ui) = &spec.ui {
        ui.check().map_err(|e| format!("tools(): {e}"))?;
        modules.push(ui.module().map_err(|e| format!("tools().ui: {e}"))?);
    }
    let tools = OwnTools::new(modules, &direct, execute).map_err(|e| format!("tools(): {e}"))?;
    let toolset = tools.toolset().map_err(|e| format!("tools(): {e}"))?;
    let decoded = Decoded {
        tools: Rc::new(tools),
        toolset: Rc::new(toolset),
        ports,
    };
    DECODED.set(Some((key, decoded.clone())));
    Ok(decoded)
}

/// The host's tools, decoded once per instance.
pub struct HostTools {
    pub js: JsTools,
    /// Which tools are offered, and the MCP servers' connection state.
    pub hub: RefCell<Hub>,
    /// The MCP servers' live connections.
    pub servers: mcp::Servers,
    /// The Files ports, by the id of the module over each.
    ports: Vec<(String, HostPort)>,
    /// The host's Computers, described at a turn's start when their list
    /// changed.
    pub computers: Computers,
    pub has_computers: bool,
    pub computers_timeout_ms: u64,
    access: AccessConfig,
    confirm_hook: bool,
    /// `execute` runs in flight in this instance.
    executions: Cell<usize>,
    /// The toolset of each live run that offers extension tools, by head
    /// (dropped when the run ends).
    run_toolsets: RefCell<std::collections::HashMap<String, Rc<Toolset>>>,
    /// The files grant holder's tools of each live run (`files_grant.rs`).
    pub(super) run_files: RunFiles,
    /// The browser bridge, when the host configured `tools().ui`.
    pub(super) ui: Option<Rc<HostUi>>,
    /// The files patch journals earlier instances left
    /// (`files_journal.rs`).
    pub(super) sweep: Sweep,
}

impl HostTools {
    /// `None` when the host offers no tools at all.
    /// `fleet`: the host enables the fleet, so the `agents` module is
    /// offered with those operations (`src/fleet/mod.rs`).
    pub fn new(
        js: JsValue,
        fleet: Option<crate::fleet::Offer>,
    ) -> Result<Option<HostTools>, String> {
        if js.is_undefined() || js.is_null() {
            return Ok(None);
        }
        let js: JsTools = js.unchecked_into();
        let spec: Spec = crate::json::from_text(&js.spec()).map_err(|e| format!("tools(): {e}"))?;
        if let Some(error) = spec.error {
            return Err(format!("tools(): {error}"));
        }
        let own = decoded(&js.spec(), &spec, fleet)?;
        let servers =
            crate::mcp::parse_servers(&js.mcp_servers()).map_err(|e| format!("tools(): {e}"))?;
        let retry_ms = spec
            .mcp_retry_ms
            .unwrap_or(MCP_RETRY_MS)
            .clamp(MCP_RETRY_MS_MIN, MCP_RETRY_MS_MAX);
        let ports = own.ports;
        // Told once an instance: the direct operations one model request
        // cannot carry (each turn's start says them again).
        for report in &own.tools.dropped {
            bindings::log_warn(report);
            if let Ok(json) = serde_json::to_string(report) {
                js.on_unavailable(&json);
            }
        }
        let ui = spec.ui.map(|config| Rc::new(HostUi::new(config)));
        let hub = Hub::shared(own.tools, own.toolset, servers, retry_ms);
        let access = match spec.access {
            Some(access) => AccessConfig::parse(&access.to_string())?,
            None => AccessConfig::default(),
        };
        Ok(Some(HostTools {
            js,
            hub: RefCell::new(hub),
            servers: mcp::Servers::new(
                spec.mcp_timeout_ms
                    .unwrap_or(MCP_CONNECT_TIMEOUT_MS)
                    .clamp(1, MCP_CONNECT_TIMEOUT_MS),
            ),
            ports,
            computers: Computers::default(),
            has_computers: spec.computers,
            computers_timeout_ms: spec
                .computers_timeout_ms
                .unwrap_or(COMPUTER_DESCRIBE_TIMEOUT_MS)
                .clamp(1, COMPUTER_DESCRIBE_TIMEOUT_MS),
            access,
            confirm_hook: spec.confirm,
            executions: Cell::new(0),
            run_toolsets: RefCell::default(),
            run_files: RunFiles::default(),
            ui,
            sweep: Sweep::new(),
        }))
    }

    /// The Files port of module `module_id`: the host's own, or a
    /// described Computer's.
    pub(super) fn port(&self, module_id: &str) -> Option<HostPort> {
        let find = |ports: &[(String, HostPort)]| {
            ports
                .iter()
                .find_map(|(id, port)| (id == module_id).then(|| port.clone()))
        };
        find(&self.ports).or_else(|| find(&self.computers.ports.borrow()))
    }

    /// Whether the host configured its own Files (`tools().files`).
    pub(super) fn has_own_files(&self) -> bool {
        self.ports.iter().any(|(id, _)| id == MODULE_ID)
    }

    fn rules(&self) -> Rules<'_> {
        Rules {
            config: &self.access,
            confirm_hook: self.confirm_hook,
        }
    }
}

fn prefixed(e: &str) -> String {
    if e.starts_with('[') {
        e.to_owned()
    } else {
        format!(": {e}")
    }
}

/// What one guest call did, for the `execute` display payload.
#[derive(serde::Serialize)]
struct GuestTrace {
    path: String,
    ok: bool,
}

enum Failure {
    /// Refused or failed: the model sees why.
    Refused(String),
    /// The attempt is no longer current: stop.
    Stale,
}

impl Inner {
    /// Answers [`crate::run::driver::Action::Offer`]: the tools to offer
    /// now, after the connection round the hub asks for (concurrent turns
    /// share one round).
    /// The tools of the run headed by `head`: the hub's (MCP servers and
    /// Computers connected when due) and the commands the running
    /// extensions offer in this run.
    pub(super) async fn offer(&self, session: &str, head: &str) -> Result<Offer, String> {
        let tools = match &self.tools {
            Ok(Some(tools)) => tools,
            Ok(None) => return Ok(Offer::default()),
            Err(why) => return Err(why.clone()),
        };
        if let Some(me) = self.me.upgrade() {
            let servers = mcp::connect_due(Rc::clone(&me), bindings::now_ms());
            futures::future::join(servers, computers::refresh(me)).await;
        }
        let extra = match self.extensions() {
            Some(ext) if !ext.roster().is_empty() => {
                let (modules, errors) = ext.tool_modules(self.store(), session, head);
                for e in errors {
                    bindings::log_error(e);
                }
                modules
            }
            _ => Vec::new(),
        };
        // The files grant holder's tools, captured at the run's first offer.
        let files = self.run_files(tools, session, head);
        // Before this instance's first tool call, with its ports known.
        if tools.sweep.due() {
            self.sweep_journals(tools).await;
        }
        // The run borrows the browser bridge's module (seed: Knapsack.ui).
        if let Some(ui) = &tools.ui {
            ui.borrow(session, head);
        }
        let hub = tools.hub.borrow();
        let toolset = if extra.is_empty() && files.is_none() {
            hub.toolset()
        } else {
            let mut toolset = hub.toolset_with(extra).unwrap_or_else(|e| {
                bindings::log_error(format!("extension tools not offered: {e}"));
                hub.toolset()
            });
            if let Some(patches) = files {
                match crate::extension::files_grant::with_files_tools(&toolset, patches) {
                    Ok(with) => toolset = Rc::new(with),
                    Err(e) => {
                        bindings::log_error(format!("files tools not offered: {e}"));
                        tools.run_files.withdraw(head);
                    }
                }
            }
            tools
                .run_toolsets
                .borrow_mut()
                .insert(head.to_owned(), Rc::clone(&toolset));
            toolset
        };
        Ok(Offer {
            toolset: Some(toolset),
            unavailable: hub.unavailable(),
            ..Offer::default()
        })
    }

    /// Forgets a finished run's own toolset.
    pub(super) fn run_ended(&self, head: &str) {
        if let Ok(Some(tools)) = &self.tools {
            tools.run_toolsets.borrow_mut().remove(head);
            tools.run_files.release(&tools.js, head);
            if let Some(ui) = &tools.ui {
                ui.give_back(head);
            }
        }
    }

    /// Performs one tool call; the outcome is the driver's next input.
    pub(super) async fn run_tool(&self, session: &str, run: ToolRun, stopper: &Stopper) -> Input {
        let Ok(Some(tools)) = &self.tools else {
            return Input::ToolDone(ToolOutput::error("no tools are offered"));
        };
        let Ok(controller) = web_sys::AbortController::new() else {
            return Input::ToolDone(ToolOutput::error("the call could not be started"));
        };
        let Some(me) = self.me.upgrade() else {
            return Input::ToolStale;
        };
        stopper.adopt(&controller);
        let live = Rc::new(LiveCall {
            session: session.to_owned(),
            gate: RefCell::new(run.progress),
            flushing: Cell::new(false),
        });
        // The tool's `progress(data)`: JSON in, the refusal (if any) out.
        let report = {
            let live = Rc::clone(&live);
            Closure::<dyn FnMut(String) -> Option<String>>::new(move |data: String| {
                me.progress(&live, &data)
            })
        };
        let report: &js_sys::Function = report.as_ref().unchecked_ref();
        let work = async {
            match run.work {
                ToolWork::Operation(op) => {
                    match self.operation(tools, &op, &controller, report).await {
                        Ok(answered) => Input::ToolDone(result_output(answered)),
                        Err(Failure::Refused(why)) => Input::ToolDone(ToolOutput::error(why)),
                        Err(Failure::Stale) => Input::ToolStale,
                    }
                }
                ToolWork::Undo { of, execute } => {
                    let undone = self.undo_call(tools, &of, &controller).await;
                    Input::ToolDone(undone_output(&run.call, execute, &undone))
                }
                ToolWork::Execute { code, of } => {
                    let own = tools.run_toolsets.borrow().get(&of.command_id).cloned();
                    let toolset = own.unwrap_or_else(|| tools.hub.borrow().toolset());
                    match self
                        .execute(tools, toolset, of, &code, &controller, report)
                        .await
                    {
                        Some(output) => Input::ToolDone(output),
                        None => Input::ToolStale,
                    }
                }
            }
        };
        // The heartbeat keeps the alarm armed while the tool runs, so a crash
        // resumes the turn within about TOOL_HEARTBEAT_MS.
        let input = match select(Box::pin(work), Box::pin(self.heartbeat())).await {
            Either::Left((input, _)) => input,
            Either::Right(_) => Input::ToolStale,
        };
        // A report held for its interval goes out before the call's `ended`.
        let held = live.gate.borrow_mut().end();
        if let Some(frame) = held {
            self.publish_event(&live.session, &Event::Frame(frame));
        }
        input
    }

    /// A progress report of a running call (`data`: JSON): published now,
    /// held until its interval ends, or refused (the answer says why).
    fn progress(&self, live: &Rc<LiveCall>, data: &str) -> Option<String> {
        let _entered = blame::enter(self.scope(Some(&live.session)));
        let reported = live.gate.borrow_mut().report(bindings::now_ms(), data);
        match reported {
            Err(why) => return Some(why),
            Ok(Some(frame)) => self.publish_event(&live.session, &Event::Frame(frame)),
            Ok(None) if !live.flushing.replace(true) => {
                let (me, live) = (self.me.upgrade()?, Rc::clone(live));
                let scope = self.scope(Some(&live.session));
                wasm_bindgen_futures::spawn_local(blame::scoped(scope, async move {
                    loop {
                        let due = live.gate.borrow().flush_at();
                        let Some(at) = due else { break };
                        bindings::sleep((at - bindings::now_ms()).max(0) as u64).await;
                        let frame = live.gate.borrow_mut().due(bindings::now_ms());
                        if let Some(frame) = frame {
                            me.publish_event(&live.session, &Event::Frame(frame));
                        }
                    }
                    live.flushing.set(false);
                }));
            }
            Ok(None) => {}
        }
        None
    }

    async fn heartbeat(&self) {
        loop {
            // Also requests delivery processing (`jobs.rs`).
            self.heartbeat_beat().await;
            bindings::sleep(TOOL_HEARTBEAT_MS).await;
        }
    }

    /// Performs one operation call through its gate.
    /// `report`: the tool's `progress(data)` (`LiveCall`).
    async fn operation(
        &self,
        tools: &HostTools,
        op: &OperationCall,
        controller: &web_sys::AbortController,
        report: &js_sys::Function,
    ) -> Result<OperationResult, Failure> {
        let mut gate = self.with_ctx(|ctx| op.begin(ctx, tools.rules()));
        if let Gate::Confirm(request) = &gate {
            let confirmed = JsFuture::from(tools.js.confirm(request, &controller.signal()))
                .await
                .map(|v| v.as_bool() == Some(true))
                .unwrap_or(false);
            gate = self.with_ctx(|ctx| op.confirmed(ctx, confirmed));
        }
        match gate {
            Gate::Invoke => {}
            Gate::Refused(why) => return Err(Failure::Refused(why)),
            Gate::Stale | Gate::Confirm(_) => return Err(Failure::Stale),
        }
        let timeout_ms = self.config.tool_timeout_ms;
        let timed_out = || Failure::Refused(op.timed_out(timeout_ms));
        // The files grant holder's tools of this run, on the port captured
        // for it (the only module `files` there is: the host's own is
        // refused beside a holder).
        if let Some(port) = (op.module_id == MODULE_ID)
            .then(|| tools.run_files.port(&op.of.command_id))
            .flatten()
        {
            let key = files_grant::port_key(&op.of.command_id);
            let called = self.files_call(tools, &port, &key, op, controller, timeout_ms);
            return called.await.map(Into::into).map_err(Failure::Refused);
        }
        if op.module_id == crate::ui::MODULE_ID && tools.ui.is_some() {
            // Bounded within the tool timeout (`ui_call`): the call only
            // waits (for a browser to claim and answer it); nothing to abort.
            let answered = self.ui_call(op, &controller.signal(), timeout_ms).await;
            return answered.map(Into::into).map_err(Failure::Refused);
        }
        if let Some(ext) = self
            .extensions()
            .filter(|ext| ext.is_tool_module(&op.module_id))
        {
            return self.extension_tool(ext, op);
        }
        if let Some(port) = tools.port(&op.module_id) {
            let called = self.files_call(tools, &port, &op.module_id, op, controller, timeout_ms);
            return called.await.map(Into::into).map_err(Failure::Refused);
        }
        if tools.hub.borrow().is_computer(&op.module_id) {
            let name = op.module_id.strip_prefix("computers.").unwrap_or_default();
            let invocation = op.invocation(bindings::now_ms(), timeout_ms);
            let invocation = serde_json::to_string(&invocation).unwrap_or_default();
            let signal = controller.signal();
            let called =
                computers::call(tools, name, &op.operation, &op.args, &invocation, &signal);
            let result = bindings::within(called, timeout_ms, controller, TOOL_ABORT_GRACE_MS)
                .await
                .ok_or_else(timed_out)?
                .map_err(Failure::Refused)?;
            return Ok(result.into());
        }
        let server = tools
            .hub
            .borrow()
            .is_server(&op.module_id)
            .then(|| tools.servers.get(&op.module_id))
            .flatten();
        if let Some(server) = server {
            let signal = controller.signal();
            let called = server.call(&tools.js, &op.operation, &op.args, &signal, report);
            let (result, images) =
                bindings::within(called, timeout_ms, controller, TOOL_ABORT_GRACE_MS)
                    .await
                    .ok_or_else(timed_out)?
                    .map_err(Failure::Refused)?;
            return Ok(OperationResult {
                result,
                data: None,
                images,
            });
        }
        // An async call is linked even where never reached: cut in a lean build.
        #[cfg(feature = "fleet")]
        if op.module_id == crate::fleet::MODULE_ID && self.fleet().is_some() {
            let called = self.fleet_operation(op, controller);
            let result = bindings::within(called, timeout_ms, controller, TOOL_ABORT_GRACE_MS)
                .await
                .ok_or_else(timed_out)?
                .map_err(Failure::Refused)?;
            return Ok(result.into());
        }
        let invocation = op.invocation(bindings::now_ms(), timeout_ms);
        let invocation = serde_json::to_string(&invocation).unwrap_or_default();
        let reply = tools.js.invoke(
            &op.module_id,
            &op.operation,
            &op.args.to_string(),
            &invocation,
            &controller.signal(),
            report,
        );
        let reply = bindings::within(
            JsFuture::from(reply),
            timeout_ms,
            controller,
            TOOL_ABORT_GRACE_MS,
        )
        .await
        .ok_or_else(timed_out)?
        .map_err(|e| Failure::Refused(error_message(&e)))?;
        operation_reply(&reply.as_string().unwrap_or_default()).map_err(Failure::Refused)
    }

    /// Runs an extension command the model called, scoped to the run's
    /// Session, in its own transition; its requestId names the call (each
    /// guest call its own), so a replayed call answers the stored result.
    fn extension_tool(
        &self,
        ext: &crate::extension::Extensions,
        op: &OperationCall,
    ) -> Result<OperationResult, Failure> {
        let request_id = format!("tool:{}", op.execution_id());
        let invoked = self
            .with_ctx(|ctx| {
                ext.command(
                    ctx,
                    crate::extension::Invocation {
                        extension: &op.module_id,
                        command: &op.operation,
                        session_id: Some(&op.of.session_id),
                        request_id: Some(&request_id),
                        input: op.args.clone(),
                    },
                )
            })
            .map_err(|e| Failure::Refused(e.to_string()))?;
        self.apply(crate::http::invoked_effects(&invoked));
        self.publish_projections();
        Ok(invoked.result.into())
    }

    /// Runs model code in the sandbox; its guest calls come back through
    /// `guest_call`. `None`: the attempt went stale under it.
    async fn execute(
        &self,
        tools: &HostTools,
        toolset: Rc<Toolset>,
        of: CallRef,
        code: &str,
        controller: &web_sys::AbortController,
        report: &js_sys::Function,
    ) -> Option<ToolOutput> {
        if tools.executions.get() >= EXECUTIONS_CONCURRENT_MAX {
            return Some(ToolOutput::error(format!(
                "execute: {EXECUTIONS_CONCURRENT_MAX} runs are in flight in this Agent, the most \
                 at once; try again shortly"
            )));
        }
        tools.executions.set(tools.executions.get() + 1);
        let run = Rc::new(GuestRun {
            toolset,
            of,
            calls: Cell::new(0),
            trace: RefCell::default(),
            stale: Cell::new(false),
            controller: controller.clone(),
            report: report.clone(),
            images: RefCell::default(),
            images_left_out: Cell::new(0),
        });
        let dispatch = {
            let me = self.me.upgrade()?;
            let run = Rc::clone(&run);
            Closure::<dyn FnMut(String, String) -> js_sys::Promise>::new(
                move |path: String, args: String| {
                    let me = Rc::clone(&me);
                    let run = Rc::clone(&run);
                    wasm_bindgen_futures::future_to_promise(async move {
                        let reply = me.guest_call(&run, &path, &args).await;
                        Ok(JsValue::from_str(&reply))
                    })
                },
            )
        };
        let namespaces: js_sys::Array = run
            .toolset
            .namespaces()
            .iter()
            .map(|n| JsValue::from_str(n))
            .collect();
        let started = bindings::now_ms();
        let sandbox = JsFuture::from(tools.js.execute(
            code,
            namespaces,
            dispatch.as_ref().unchecked_ref(),
            &controller.signal(),
        ));
        let reply = bindings::within(
            sandbox,
            self.config.tool_timeout_ms,
            controller,
            TOOL_ABORT_GRACE_MS,
        )
        .await;
        tools.executions.set(tools.executions.get() - 1);
        drop(dispatch);
        if run.stale.get() {
            return None;
        }
        let data = json!({
            "calls": &*run.trace.borrow(),
            "durationMs": bindings::now_ms() - started,
        });
        let mut out = match reply {
            Some(Ok(reply)) => execute_reply(&reply.as_string().unwrap_or_default()),
            Some(Err(e)) => ToolOutput::error(format!("execute: {}", error_message(&e))),
            None => ToolOutput::error(format!(
                "execute: the code did not finish within {} ms and was stopped",
                self.config.tool_timeout_ms
            )),
        };
        out.data = RawValue::from_string(data.to_string()).ok();
        out.images = run.images.take();
        let left_out = run.images_left_out.get();
        if left_out > 0 {
            out.content.push_str(&format!(
                "\n[{left_out} image(s) the calls returned were left out: a result carries at \
                 most {TOOL_RESULT_IMAGES_MAX} images and {TOOL_RESULT_IMAGE_BYTES_MAX} bytes of them]"
            ));
        }
        Some(out)
    }

    /// One `host.call(path, args)` of guest code. The reply is JSON
    /// `{result}` or `{error}`.
    async fn guest_call(&self, run: &GuestRun, path: &str, args: &str) -> String {
        let Ok(Some(tools)) = &self.tools else {
            return door::guest_error("no tools are offered");
        };
        if run.stale.get() || run.controller.signal().aborted() {
            return door::guest_error("this run was stopped");
        }
        // Numbered as they are made (concurrent calls finish in any order).
        let ordinal = run.calls.get() + 1;
        if ordinal as usize > GUEST_CALLS_PER_EXECUTION_MAX {
            return door::guest_error(&format!(
                "at most {GUEST_CALLS_PER_EXECUTION_MAX} calls per execute run"
            ));
        }
        run.calls.set(ordinal);
        let reply = match run.of.guest_call(&run.toolset, ordinal, path, args) {
            GuestStep::Reply(reply) => reply,
            GuestStep::Operation(op) => match self
                .operation(tools, &op, &run.controller, &run.report)
                .await
            {
                Ok(answered) => {
                    run.keep_images(answered.images);
                    Ok(answered.result)
                }
                Err(Failure::Refused(why)) => Err(why),
                Err(Failure::Stale) => {
                    run.stale.set(true);
                    run.controller.abort();
                    Err("this run was stopped".to_owned())
                }
            },
        };
        run.trace.borrow_mut().push(GuestTrace {
            path: crate::text::shorten(path).to_owned(),
            ok: reply.is_ok(),
        });
        match reply {
            Ok(value) => door::guest_result(&value),
            Err(e) => door::guest_error(&e),
        }
    }
}

/// A running call's progress reports: the core's gate over them, and
/// whether a held one waits on a timer.
struct LiveCall {
    session: String,
    gate: RefCell<ProgressGate>,
    flushing: Cell<bool>,
}

/// One `execute` run's state, shared with its guest calls.
struct GuestRun {
    toolset: Rc<Toolset>,
    of: CallRef,
    /// The guest calls made so far.
    calls: Cell<u32>,
    trace: RefCell<Vec<GuestTrace>>,
    stale: Cell<bool>,
    controller: web_sys::AbortController,
    /// The `execute` call's `progress(data)`, which its operations report to.
    report: js_sys::Function,
    /// The images its operations returned, for the model with the run's
    /// result, while they fit a result's bounds; the rest are counted.
    images: RefCell<Vec<Image>>,
    images_left_out: Cell<usize>,
}

impl GuestRun {
    fn keep_images(&self, images: Vec<Image>) {
        let mut kept = self.images.borrow_mut();
        for image in images {
            let bytes: usize = kept.iter().map(|i| i.data.len()).sum();
            if kept.len() < TOOL_RESULT_IMAGES_MAX
                && bytes + image.data.len() <= TOOL_RESULT_IMAGE_BYTES_MAX
            {
                kept.push(image);
            } else {
                self.images_left_out.set(self.images_left_out.get() + 1);
            }
        }
    }
}
