//! Performs tool calls ([`Action::RunTool`]) in the Durable Object. The host
//! Worker's capabilities come from the JS shim (`toolbox.rs` decodes them);
//! which tools are offered is `mcp::Hub`'s, whether a call may run is its
//! `OperationCall` gate's (grants read at each call, the confirm hook,
//! marked started before an unsafe operation), which backend performs it is
//! `capability::backend::route`'s. This only performs: operations on that
//! backend (the shim's `invoke`, an MCP server, a Files port, a Computer,
//! the browser bridge, an extension, the fleet), model code through the
//! Worker Loader sandbox (`js/execute.mjs`). Bounds:
//! `SHIITAKE_TOOL_TIMEOUT_MS` (at most and by default `TOOL_CALL_TIMEOUT_MS`)
//! plus `TOOL_ABORT_GRACE_MS` per call, `EXECUTIONS_CONCURRENT_MAX`
//! sandboxes at once, `GUEST_CALLS_PER_EXECUTION_MAX` guest calls per run.
//!
//! [`Action::RunTool`]: crate::run::driver::Action::RunTool

use super::bindings::{self, error_message};
use super::computers;
use super::files::HostPort;
use super::files_grant;
use super::stopper::Stopper;
use super::toolbox::HostTools;
use super::{blame, mcp, Inner};
use crate::capability::backend::{self, Backend, Backends};
use crate::capability::door::{self, Toolset};
use crate::limits::{
    EXECUTIONS_CONCURRENT_MAX, GUEST_CALLS_PER_EXECUTION_MAX, TOOL_ABORT_GRACE_MS,
    TOOL_HEARTBEAT_MS, TOOL_RESULT_IMAGES_MAX, TOOL_RESULT_IMAGE_BYTES_MAX,
};
use crate::model::Image;
use crate::observe::Event;
use crate::run::driver::{Input, Offer, ToolRun, ToolWork};
use crate::run::live::ProgressGate;
use crate::run::operation::{
    execute_reply, operation_reply, result_output, CallRef, Gate, GuestStep, OperationCall,
    OperationResult,
};
use crate::run::tools::{undone_output, ToolOutput};
use futures::future::{select, Either};
use futures::FutureExt;
use serde_json::json;
use serde_json::value::RawValue;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// What this Agent's host has for one call of the run headed by `head`,
/// as [`backend::route`] asks it.
struct Serving<'a> {
    inner: &'a Inner,
    tools: &'a HostTools,
    head: &'a str,
}

impl<'a> Backends for Serving<'a> {
    type Port = HostPort;
    type Server = Rc<mcp::Server>;
    type Extension = &'a crate::extension::Extensions;

    fn grant_files(&self) -> Option<HostPort> {
        self.tools.run_files.port(self.head)
    }

    fn bridge(&self) -> bool {
        self.tools.ui.is_some()
    }

    fn extension(&self, module_id: &str) -> Option<&'a crate::extension::Extensions> {
        self.inner
            .extensions()
            .filter(|ext| ext.is_tool_module(module_id))
    }

    fn files(&self, module_id: &str) -> Option<HostPort> {
        self.tools.module_port(module_id)
    }

    fn computer(&self, module_id: &str) -> bool {
        self.tools.hub.borrow().is_computer(module_id)
    }

    fn server(&self, module_id: &str) -> Option<Rc<mcp::Server>> {
        let hub = self.tools.hub.borrow();
        hub.is_server(module_id)
            .then(|| self.tools.servers.get(module_id))
            .flatten()
    }

    fn fleet(&self) -> bool {
        self.inner.fleet().is_some()
    }
}

/// The invocation context a host tool or Computer is handed (JSON).
fn invocation(op: &OperationCall, timeout_ms: u64) -> String {
    let invocation = op.invocation(bindings::now_ms(), timeout_ms);
    serde_json::to_string(&invocation).unwrap_or_default()
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
        let servers = mcp::connect_due(&tools.js, &tools.hub, &tools.servers, bindings::now_ms());
        let computers = computers::refresh(&tools.js, &tools.hub, &tools.computers);
        futures::future::join(servers, computers).await;
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
        let files = self.run_files(&tools.run_files, session, head);
        // Before this instance's first tool call, with its ports known.
        if tools.sweep.due() {
            self.sweep_journals(tools, &tools.sweep).await;
        }
        // The run borrows the browser bridge's module (seed: Knapsack.ui).
        if let Some(ui) = &tools.ui {
            ui.borrow(session, head);
        }
        let hub = tools.hub.borrow();
        let toolset = if extra.is_empty() && files.is_none() {
            hub.toolset()
        } else {
            let (mut toolset, refused) = hub.toolset_with(extra);
            for (id, e) in refused {
                bindings::log_error(format!("extension {id}: its tools are not offered: {e}"));
            }
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
            Err(why) => return Some(why.to_string()),
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
        self.perform(tools, op, controller, report).await
    }

    /// Performs a call that passed its gate, on the backend the core names
    /// (`capability::backend::route`), within the tool timeout.
    async fn perform(
        &self,
        tools: &HostTools,
        op: &OperationCall,
        controller: &web_sys::AbortController,
        report: &js_sys::Function,
    ) -> Result<OperationResult, Failure> {
        let timeout_ms = self.config.tool_timeout_ms;
        let serving = Serving {
            inner: self,
            tools,
            head: &op.of.command_id,
        };
        match backend::route(&op.module_id, &serving) {
            // The only module `files` of the run: the host's own is refused
            // beside a holder (`files_grant::check`).
            Backend::GrantFiles(port) => {
                let key = files_grant::port_key(&op.of.command_id);
                let called = self.files_call(&tools.js, &port, &key, op, controller, timeout_ms);
                called.await.map(Into::into).map_err(Failure::Refused)
            }
            // Bounded within the tool timeout (`ui_call`): the call only
            // waits (for a browser to claim and answer it); nothing to abort.
            Backend::Ui => {
                let answered = self.ui_call(op, &controller.signal(), timeout_ms).await;
                answered.map(Into::into).map_err(Failure::Refused)
            }
            Backend::Extension(ext) => self.extension_tool(ext, op),
            Backend::Files(port) => {
                let called =
                    self.files_call(&tools.js, &port, &op.module_id, op, controller, timeout_ms);
                called.await.map(Into::into).map_err(Failure::Refused)
            }
            Backend::Computer(name) => {
                let (invocation, signal) = (invocation(op, timeout_ms), controller.signal());
                let (operation, args) = (&op.operation, &op.args);
                let called =
                    computers::call(&tools.js, name, operation, args, &invocation, &signal);
                Ok(self.bounded(op, called, controller).await?.into())
            }
            Backend::Mcp(server) => {
                let signal = controller.signal();
                let called = server.call(&tools.js, &op.operation, &op.args, &signal, report);
                let (result, images) = self.bounded(op, called, controller).await?;
                Ok(OperationResult {
                    result,
                    data: None,
                    images,
                })
            }
            // An async call is linked even where never reached: cut in a
            // lean build (whose host has no fleet, so no call routes here).
            #[cfg(feature = "fleet")]
            Backend::Fleet => {
                let called = self.fleet_operation(op, controller);
                Ok(self.bounded(op, called, controller).await?.into())
            }
            #[cfg(not(feature = "fleet"))]
            Backend::Fleet => Err(Failure::Refused(crate::fleet::UNAVAILABLE.to_owned())),
            Backend::Host => {
                let reply = tools.js.invoke(
                    &op.module_id,
                    &op.operation,
                    &op.args.to_string(),
                    &invocation(op, timeout_ms),
                    &controller.signal(),
                    report,
                );
                let reply = JsFuture::from(reply).map(|r| r.map_err(|e| error_message(&e)));
                let reply = self.bounded(op, reply, controller).await?;
                operation_reply(&reply.as_string().unwrap_or_default())
                    .map_err(|e| Failure::Refused(e.to_string()))
            }
        }
    }

    /// `called` within the tool timeout and the abort grace after it:
    /// refused as timed out past them.
    async fn bounded<T>(
        &self,
        op: &OperationCall,
        called: impl std::future::Future<Output = Result<T, String>>,
        controller: &web_sys::AbortController,
    ) -> Result<T, Failure> {
        let timeout_ms = self.config.tool_timeout_ms;
        bindings::within(called, timeout_ms, controller, TOOL_ABORT_GRACE_MS)
            .await
            .ok_or_else(|| Failure::Refused(op.timed_out(timeout_ms)))?
            .map_err(Failure::Refused)
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
                    &crate::session::admission::ExtensionSends,
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
            // The guest sees an error's text.
            GuestStep::Reply(reply) => reply.map_err(|e| e.to_string()),
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
