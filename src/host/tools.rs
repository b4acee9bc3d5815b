//! Tool calls in the Durable Object. The host Worker's capabilities come
//! from the JS shim (`ShiitakeDO#tools()`, see `js/do.mjs`); every call is
//! decided from the grants read at that call; operations run through the
//! shim's `invoke`, model code through its Worker Loader sandbox
//! (`js/execute.mjs`). Bounds: `SHIITAKE_TOOL_TIMEOUT_MS` (at most and by
//! default `TOOL_CALL_TIMEOUT_MS`) plus
//! `TOOL_ABORT_GRACE_MS` per call, `EXECUTIONS_CONCURRENT_MAX` sandboxes at
//! once, `GUEST_CALLS_PER_EXECUTION_MAX` guest calls per run, every payload
//! by `check_payload`.

use super::js::{self, error_message};
use super::{mcp, Inner};
use crate::capability::door::{self, GuestCall, Tool, Toolset};
use crate::capability::{Access, Catalog, Invocation, Module, Operation};
use crate::grants::{self, AccessConfig, Decision, Needs};
use crate::limits::{
    EXECUTIONS_CONCURRENT_MAX, GUEST_CALLS_PER_EXECUTION_MAX, MCP_CONNECT_TIMEOUT_MS, MCP_RETRY_MS,
    MCP_RETRY_MS_MAX, TOOL_ABORT_GRACE_MS, TOOL_HEARTBEAT_MS,
};
use crate::run::tools::{self as run_tools, OpenCall, Recovery, ToolOutput};
use crate::run::Step;
use futures::future::{select, Either, LocalBoxFuture, Shared};
use futures::FutureExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen]
extern "C" {
    /// The shim's tool host (`js/do.mjs`).
    pub type JsTools;

    /// `{modules, direct, access, confirm, loader}` as JSON.
    #[wasm_bindgen(method)]
    fn spec(this: &JsTools) -> String;

    /// Runs one operation: resolves to JSON `{result, data?}` or `{error}`.
    #[wasm_bindgen(method)]
    fn invoke(
        this: &JsTools,
        module: &str,
        operation: &str,
        args: &str,
        invocation: &str,
        signal: &web_sys::AbortSignal,
    ) -> js_sys::Promise;

    /// The host's confirm hook: resolves to a boolean.
    #[wasm_bindgen(method)]
    fn confirm(this: &JsTools, request: &str, signal: &web_sys::AbortSignal) -> js_sys::Promise;

    /// The host's MCP servers, `[{name, url, headers?}]` as JSON (header
    /// values are credentials: kept in memory only).
    #[wasm_bindgen(method, js_name = mcpServers)]
    fn mcp_servers(this: &JsTools) -> String;

    /// One MCP HTTP request through the host's fetch, redirects not
    /// followed: resolves to `{status, contentType, headers, body}`.
    #[wasm_bindgen(method, js_name = mcpFetch)]
    pub fn mcp_fetch(
        this: &JsTools,
        method: &str,
        url: &str,
        headers: &js_sys::Array,
        body: &str,
        signal: Option<&web_sys::AbortSignal>,
    ) -> js_sys::Promise;

    /// The host's `onUnavailable` report: `{name, reason}` as JSON.
    #[wasm_bindgen(method, js_name = onUnavailable)]
    fn on_unavailable(this: &JsTools, report: &str);

    /// Runs model code in a fresh sandbox: resolves to JSON `{result}` or
    /// `{error}`, never rejects.
    #[wasm_bindgen(method)]
    fn execute(
        this: &JsTools,
        code: &str,
        namespaces: js_sys::Array,
        dispatch: &js_sys::Function,
        signal: &web_sys::AbortSignal,
    ) -> js_sys::Promise;
}

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
    /// `tools()` threw: why.
    #[serde(default)]
    error: Option<String>,
}

/// The host's tools, decoded once per instance.
pub struct HostTools {
    js: JsTools,
    /// The host's own modules, direct tool paths and sandbox, kept to
    /// rebuild the toolset once the MCP servers are connected.
    modules: Vec<Module>,
    direct: Vec<String>,
    execute: Result<(), String>,
    /// The tools offered now.
    toolset: RefCell<Rc<Toolset>>,
    access: AccessConfig,
    confirm_hook: bool,
    /// `execute` runs in flight in this instance.
    executions: Cell<usize>,
    mcp: RefCell<McpState>,
    mcp_timeout_ms: u64,
    mcp_retry_ms: u64,
    hub: RefCell<Option<Rc<mcp::Hub>>>,
}

/// The MCP servers' connection: made at an instance's first turn; servers
/// that failed are tried again at the first turn `mcp_retry_ms` later.
enum McpState {
    Configured(Vec<mcp::ServerConfig>),
    Connecting(Connecting),
    Done {
        retry: Option<(i64, Vec<mcp::ServerConfig>)>,
    },
}

impl HostTools {
    /// `None` when the host offers no tools at all.
    pub fn new(js: JsValue) -> Result<Option<HostTools>, String> {
        if js.is_undefined() || js.is_null() {
            return Ok(None);
        }
        let js: JsTools = js.unchecked_into();
        let spec: Spec = serde_json::from_str(&js.spec()).map_err(|e| format!("tools(): {e}"))?;
        if let Some(error) = spec.error {
            return Err(format!("tools(): {error}"));
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
        let servers = mcp::parse_servers(&js.mcp_servers()).map_err(|e| format!("tools(): {e}"))?;
        let modules = catalog.modules().to_vec();
        let toolset = Toolset::new(catalog, &spec.direct, execute.clone())
            .map_err(|e| format!("tools(): {e}"))?;
        let access = match spec.access {
            Some(access) => AccessConfig::parse(&access.to_string())?,
            None => AccessConfig::default(),
        };
        Ok(Some(HostTools {
            js,
            modules,
            direct: spec.direct,
            execute,
            toolset: RefCell::new(Rc::new(toolset)),
            access,
            confirm_hook: spec.confirm,
            executions: Cell::new(0),
            mcp: RefCell::new(if servers.is_empty() {
                McpState::Done { retry: None }
            } else {
                McpState::Configured(servers)
            }),
            mcp_timeout_ms: spec
                .mcp_timeout_ms
                .unwrap_or(MCP_CONNECT_TIMEOUT_MS)
                .clamp(1, MCP_CONNECT_TIMEOUT_MS),
            mcp_retry_ms: spec
                .mcp_retry_ms
                .unwrap_or(MCP_RETRY_MS)
                .clamp(1_000, MCP_RETRY_MS_MAX),
            hub: RefCell::new(None),
        }))
    }
}

impl HostTools {
    /// The tools offered now.
    pub fn current(&self) -> Rc<Toolset> {
        Rc::clone(&self.toolset.borrow())
    }

    /// The MCP servers that could not be offered (after the connection).
    pub fn unavailable(&self) -> Vec<mcp::Unavailable> {
        self.hub
            .borrow()
            .as_ref()
            .map(|hub| hub.unavailable.clone())
            .unwrap_or_default()
    }

    /// Connects the MCP servers and rebuilds the toolset with their modules;
    /// a module that cannot join the catalog drops its server.
    /// Answers the servers that failed, to try again later.
    async fn connect_mcp(&self, servers: Vec<mcp::ServerConfig>) -> Vec<mcp::ServerConfig> {
        let (round, failed) = mcp::connect_all(&self.js, servers, self.mcp_timeout_ms).await;
        let previous = self.hub.borrow().clone();
        let mut hub = match previous {
            Some(previous) => previous.merged(round),
            None => round,
        };
        let mut modules = self.modules.clone();
        for tools in hub.tools.clone() {
            let joined = Module::from_spec(tools.module.clone())
                .map_err(|e| e.0)
                .and_then(|module| {
                    let mut with = modules.clone();
                    with.push(module);
                    Catalog::new(with.clone()).map(|_| with).map_err(|e| e.0)
                });
            match joined {
                Ok(with) => modules = with,
                Err(reason) => hub.drop_server(&tools.module.id, reason),
            }
        }
        let toolset = Catalog::new(modules)
            .and_then(|catalog| Toolset::new(catalog, &self.direct, self.execute.clone()));
        match toolset {
            Ok(toolset) => *self.toolset.borrow_mut() = Rc::new(toolset),
            Err(e) => web_sys::console::error_1(&format!("shiitake: MCP tools: {e}").into()),
        }
        for report in &hub.unavailable {
            web_sys::console::warn_1(
                &format!(
                    "shiitake: MCP server `{}` is unavailable: {}",
                    report.name, report.reason
                )
                .into(),
            );
            if let Ok(json) = serde_json::to_string(report) {
                self.js.on_unavailable(&json);
            }
        }
        *self.hub.borrow_mut() = Some(Rc::new(hub));
        failed
    }
}

fn prefixed(e: &str) -> String {
    if e.starts_with('[') {
        e.to_owned()
    } else {
        format!(": {e}")
    }
}

/// A tool call's own abort: fired by the turn's stop, or at the deadline.
struct CallSignal {
    controller: web_sys::AbortController,
}

impl CallSignal {
    fn signal(&self) -> web_sys::AbortSignal {
        self.controller.signal()
    }
}

/// What one guest call did, for the `execute` display payload.
#[derive(serde::Serialize)]
struct GuestTrace {
    path: String,
    ok: bool,
}

type Connecting = Shared<LocalBoxFuture<'static, ()>>;

impl Inner {
    /// The tools to offer now: connects the host's MCP servers first when
    /// this instance has not, or retries the unavailable ones when due
    /// (concurrent turns share one round).
    /// `None` when the host offers no tools.
    pub(super) async fn toolset(&self) -> Option<Rc<Toolset>> {
        let tools = self.tools.as_ref().ok()?.as_ref()?;
        let pending = {
            let mut state = tools.mcp.borrow_mut();
            let servers = match &mut *state {
                // A round in progress: wait on it rather than start one.
                McpState::Connecting(connecting) => Err(Some(connecting.clone())),
                McpState::Configured(servers) => Ok(std::mem::take(servers)),
                McpState::Done {
                    retry: Some((at, servers)),
                } if *at <= js::now_ms() => Ok(std::mem::take(servers)),
                McpState::Done { .. } => Err(None),
            };
            match servers {
                Err(pending) => pending,
                Ok(servers) => {
                    let me = self.me.upgrade()?;
                    let connecting = async move {
                        if let Ok(Some(tools)) = &me.tools {
                            let failed = tools.connect_mcp(servers).await;
                            let retry = (!failed.is_empty())
                                .then(|| (js::now_ms() + tools.mcp_retry_ms as i64, failed));
                            *tools.mcp.borrow_mut() = McpState::Done { retry };
                        }
                    }
                    .boxed_local()
                    .shared();
                    *state = McpState::Connecting(connecting.clone());
                    Some(connecting)
                }
            }
        };
        if let Some(connecting) = pending {
            connecting.await;
        }
        Some(tools.current())
    }

    /// Closes one open call of `step`: runs it (or, after a restart, decides
    /// it was already tried) and answers its outcome. `None`: the attempt
    /// went stale under it; nothing more of this step may run.
    pub(super) async fn run_call(
        &self,
        step: &Step,
        call: &OpenCall,
        stopper: &super::turn::Stopper,
    ) -> Option<ToolOutput> {
        if let Some(why) = &call.refused {
            return Some(ToolOutput::error(why.clone()));
        }
        let tools = match &self.tools {
            Ok(Some(tools)) => tools,
            Ok(None) => {
                return Some(ToolOutput::error(format!(
                    "no tool `{}` is offered",
                    call.name
                )))
            }
            Err(why) => return Some(ToolOutput::error(why.clone())),
        };
        let toolset = self.toolset().await?;
        let Some(tool) = toolset.tool(&call.name) else {
            let offered: Vec<String> = toolset.specs().into_iter().map(|s| s.name).collect();
            return Some(ToolOutput::error(format!(
                "no tool `{}` is offered; tools: {}",
                call.name,
                offered.join(", ")
            )));
        };
        let replay_safe = match tool {
            Tool::Direct(_, op) => op.replay_safe,
            // A run that started no unsafe operation did nothing that
            // cannot be repeated.
            Tool::Execute => false,
        };
        if run_tools::recovery(call, replay_safe) == Recovery::OutcomeUnknown {
            return Some(run_tools::outcome_unknown(call));
        }
        let controller = web_sys::AbortController::new().ok()?;
        stopper.adopt(&controller);
        let signal = CallSignal { controller };
        let work = async {
            match tool {
                Tool::Direct(module, op) => {
                    let args = Value::Object(call.input.clone());
                    if let Err(e) = op.check_arguments(&args) {
                        return Some(ToolOutput::error(format!("{}: {e}", op.guest_name)));
                    }
                    match self
                        .operation(tools, step, call, module, op, args, &signal)
                        .await
                    {
                        Ok((result, data)) => Some(output(&result, data)),
                        Err(Failure::Stale) => None,
                        Err(Failure::Refused(why)) => Some(ToolOutput::error(why)),
                    }
                }
                Tool::Execute => {
                    let Some(code) = call.input.get("code").and_then(Value::as_str) else {
                        return Some(ToolOutput::error(
                            "execute: expects {\"code\": \"<JavaScript>\"}",
                        ));
                    };
                    self.execute(tools, &toolset, step, call, code, &signal)
                        .await
                }
            }
        };
        // The heartbeat keeps the alarm armed while the tool runs, so a crash
        // resumes the turn within about TOOL_HEARTBEAT_MS.
        let outcome = select(Box::pin(work), Box::pin(self.heartbeat())).await;
        match outcome {
            Either::Left((outcome, _)) => outcome,
            Either::Right(_) => None,
        }
    }

    async fn heartbeat(&self) {
        loop {
            self.set_alarm(js::now_ms() + TOOL_HEARTBEAT_MS as i64)
                .await;
            js::sleep(TOOL_HEARTBEAT_MS).await;
        }
    }

    /// One operation call, decided by the grants read now.
    #[allow(clippy::too_many_arguments)]
    async fn operation(
        &self,
        tools: &HostTools,
        step: &Step,
        call: &OpenCall,
        module: &Module,
        op: &Operation,
        args: Value,
        signal: &CallSignal,
    ) -> Result<(Value, Option<Box<RawValue>>), Failure> {
        let delivered = self
            .with_ctx(|ctx| grants::delivered(ctx, &step.session_id))
            .map_err(|e| Failure::Refused(format!("grants unreadable: {e}")))?;
        let needs = Needs {
            write: op.access == Access::Write,
            confirm: op.confirm,
        };
        if let Decision::Deny(why) = grants::decide(
            &module.id,
            needs,
            &tools.access,
            delivered.as_ref(),
            tools.confirm_hook,
        ) {
            return Err(Failure::Refused(format!(
                "{}.{} refused: {why}",
                module.id, op.guest_name
            )));
        }
        if op.confirm {
            let request = json!({
                "sessionId": step.session_id,
                "commandId": step.command_id,
                "callId": call.id,
                "module": module.id,
                "operation": op.name,
                "arguments": args,
            });
            let confirmed =
                JsFuture::from(tools.js.confirm(&request.to_string(), &signal.signal()))
                    .await
                    .map(|v| v.as_bool() == Some(true))
                    .unwrap_or(false);
            if !confirmed {
                return Err(Failure::Refused(format!(
                    "{}.{}: the host did not confirm this call",
                    module.id, op.guest_name
                )));
            }
        }
        if !op.replay_safe {
            // Persist, then act: after a crash this call is never run again.
            let current = self
                .with_ctx(|ctx| {
                    run_tools::mark_started(
                        ctx,
                        &step.session_id,
                        &step.command_id,
                        step.attempt,
                        &call.id,
                    )
                })
                .unwrap_or(false);
            if !current {
                return Err(Failure::Stale);
            }
        }
        let invocation = Invocation {
            execution_id: format!("{}:{}", step.command_id, call.id),
            session_id: step.session_id.clone(),
            command_id: step.command_id.clone(),
            deadline_ms: js::now_ms() + self.config.tool_timeout_ms as i64,
        };
        let timed_out = || {
            Failure::Refused(format!(
                "{}.{} did not finish within {} ms",
                module.id, op.guest_name, self.config.tool_timeout_ms
            ))
        };
        let hub = tools.hub.borrow().clone();
        if let Some(server) = hub.as_ref().and_then(|hub| hub.server(&module.id)) {
            let abort = signal.signal();
            let called = server.call(&tools.js, &op.name, &args, &abort);
            let result = bounded(called, signal, self.config.tool_timeout_ms)
                .await
                .ok_or_else(timed_out)?
                .map_err(Failure::Refused)?;
            return Ok((result, None));
        }
        let invocation = serde_json::to_string(&invocation).unwrap_or_default();
        let reply = tools.js.invoke(
            &module.id,
            &op.name,
            &args.to_string(),
            &invocation,
            &signal.signal(),
        );
        let reply = bounded(JsFuture::from(reply), signal, self.config.tool_timeout_ms)
            .await
            .ok_or_else(timed_out)?
            .map_err(|e| Failure::Refused(error_message(&e)))?;
        operation_reply(&reply.as_string().unwrap_or_default()).map_err(Failure::Refused)
    }

    /// Runs model code in the sandbox; its guest calls come back through
    /// `guest_call`.
    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &self,
        tools: &HostTools,
        toolset: &Rc<Toolset>,
        step: &Step,
        call: &OpenCall,
        code: &str,
        signal: &CallSignal,
    ) -> Option<ToolOutput> {
        if tools.executions.get() >= EXECUTIONS_CONCURRENT_MAX {
            return Some(ToolOutput::error(format!(
                "execute: {EXECUTIONS_CONCURRENT_MAX} runs are in flight in this Agent, the most \
                 at once; try again shortly"
            )));
        }
        tools.executions.set(tools.executions.get() + 1);
        let trace: Rc<RefCell<Vec<GuestTrace>>> = Rc::default();
        let stale = Rc::new(Cell::new(false));
        let dispatch = {
            let me = self.me.upgrade()?;
            let toolset = Rc::clone(toolset);
            let step = step.clone();
            let call = call.clone();
            let trace = Rc::clone(&trace);
            let stale = Rc::clone(&stale);
            let controller = signal.controller.clone();
            Closure::<dyn FnMut(String, String) -> js_sys::Promise>::new(
                move |path: String, args: String| {
                    let me = Rc::clone(&me);
                    let toolset = Rc::clone(&toolset);
                    let step = step.clone();
                    let call = call.clone();
                    let trace = Rc::clone(&trace);
                    let stale = Rc::clone(&stale);
                    let signal = CallSignal {
                        controller: controller.clone(),
                    };
                    wasm_bindgen_futures::future_to_promise(async move {
                        let reply = me
                            .guest_call(
                                &toolset, &step, &call, &path, &args, &trace, &stale, &signal,
                            )
                            .await;
                        Ok(JsValue::from_str(&reply))
                    })
                },
            )
        };
        let namespaces: js_sys::Array = toolset
            .namespaces()
            .iter()
            .map(|n| JsValue::from_str(n))
            .collect();
        let started = js::now_ms();
        let run = JsFuture::from(tools.js.execute(
            code,
            namespaces,
            dispatch.as_ref().unchecked_ref(),
            &signal.signal(),
        ));
        let reply = bounded(run, signal, self.config.tool_timeout_ms).await;
        tools.executions.set(tools.executions.get() - 1);
        drop(dispatch);
        if stale.get() {
            return None;
        }
        let data = json!({
            "calls": &*trace.borrow(),
            "durationMs": js::now_ms() - started,
        });
        let data = RawValue::from_string(data.to_string()).ok();
        let mut out = match reply {
            Some(Ok(reply)) => execute_reply(&reply.as_string().unwrap_or_default()),
            Some(Err(e)) => ToolOutput::error(format!("execute: {}", error_message(&e))),
            None => ToolOutput::error(format!(
                "execute: the code did not finish within {} ms and was stopped",
                self.config.tool_timeout_ms
            )),
        };
        out.data = data;
        Some(out)
    }

    /// One `host.call(path, args)` of guest code: `forage`, or an operation
    /// under the same grant checks as a direct tool. The reply is JSON
    /// `{result}` or `{error}`.
    #[allow(clippy::too_many_arguments)]
    async fn guest_call(
        &self,
        toolset: &Toolset,
        step: &Step,
        call: &OpenCall,
        path: &str,
        args: &str,
        trace: &RefCell<Vec<GuestTrace>>,
        stale: &Cell<bool>,
        signal: &CallSignal,
    ) -> String {
        let Ok(Some(tools)) = &self.tools else {
            return door::guest_error("no tools are offered");
        };
        if stale.get() || signal.controller.signal().aborted() {
            return door::guest_error("this run was stopped");
        }
        if trace.borrow().len() >= GUEST_CALLS_PER_EXECUTION_MAX {
            return door::guest_error(&format!(
                "at most {GUEST_CALLS_PER_EXECUTION_MAX} calls per execute run"
            ));
        }
        let record = |ok: bool| {
            trace.borrow_mut().push(GuestTrace {
                path: crate::capability::name::shorten(path).to_owned(),
                ok,
            })
        };
        let reply = match toolset.guest_call(path, args) {
            Err(e) => Err(e),
            Ok(GuestCall::Search(query)) => Ok(toolset.search(&query)),
            Ok(GuestCall::Describe(path)) => toolset.catalog().describe(&path).map_err(|e| e.0),
            Ok(GuestCall::Operation(module, op, args)) => {
                match self
                    .operation(tools, step, call, module, op, args, signal)
                    .await
                {
                    Ok((result, _)) => Ok(result),
                    Err(Failure::Refused(why)) => Err(why),
                    Err(Failure::Stale) => {
                        stale.set(true);
                        signal.controller.abort();
                        Err("this run was stopped".to_owned())
                    }
                }
            }
        };
        record(reply.is_ok());
        match reply {
            Ok(value) => door::guest_result(&value),
            Err(e) => door::guest_error(&e),
        }
    }
}

enum Failure {
    /// Refused or failed: the model sees why.
    Refused(String),
    /// The attempt is no longer current: stop.
    Stale,
}

/// Waits for `work` up to `timeout_ms`; then fires the call's abort signal,
/// gives it `TOOL_ABORT_GRACE_MS` to wind down (its abort handlers run), and
/// answers `None`: it did not end in time, whatever it does now.
async fn bounded<F: std::future::Future>(
    work: F,
    signal: &CallSignal,
    timeout_ms: u64,
) -> Option<F::Output> {
    let mut work = Box::pin(work);
    if let Either::Left((done, _)) = select(work.as_mut(), js::sleep(timeout_ms)).await {
        return Some(done);
    }
    signal.controller.abort();
    let _ = select(work, js::sleep(TOOL_ABORT_GRACE_MS)).await;
    None
}

/// An operation's reply `{result, data?}` or `{error}`, bounded.
fn operation_reply(reply: &str) -> Result<(Value, Option<Box<RawValue>>), String> {
    #[derive(Deserialize)]
    struct Reply {
        #[serde(default)]
        result: Option<Value>,
        #[serde(default)]
        data: Option<Value>,
        #[serde(default)]
        error: Option<String>,
    }
    let reply: Reply = serde_json::from_str(reply)
        .map_err(|e| format!("the operation's reply is not valid: {e}"))?;
    if let Some(error) = reply.error {
        return Err(error);
    }
    let result = reply.result.unwrap_or(Value::Null);
    crate::capability::check_payload(&result).map_err(|e| format!("the result {e}"))?;
    let data = match reply.data {
        Some(data) => {
            crate::capability::check_payload(&data).map_err(|e| format!("the display data {e}"))?;
            RawValue::from_string(data.to_string()).ok()
        }
        None => None,
    };
    Ok((result, data))
}

/// The sandbox's reply `{result}` or `{error}` as the model's tool result.
fn execute_reply(reply: &str) -> ToolOutput {
    match crate::capability::parse_payload(reply) {
        Err(e) => ToolOutput::error(format!("execute: the result {e}")),
        Ok(Value::Object(mut reply)) => match (reply.remove("result"), reply.remove("error")) {
            (_, Some(error)) => ToolOutput::error(match error {
                Value::String(s) => s,
                other => other.to_string(),
            }),
            (Some(result), None) => output(&result, None),
            (None, None) => output(&Value::Null, None),
        },
        Ok(_) => {
            ToolOutput::error("execute: the sandbox replied with something other than an object")
        }
    }
}

fn output(result: &Value, data: Option<Box<RawValue>>) -> ToolOutput {
    match door::result_content(result) {
        Ok(content) => ToolOutput {
            content,
            is_error: false,
            data,
        },
        Err(e) => ToolOutput::error(e),
    }
}
