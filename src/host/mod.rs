//! The Durable Object adapter (wasm only). It turns platform requests into
//! [`HttpRequest`]s, runs the pure core against the DO's SQLite, carries out
//! the effects of each committed transition (wake the run loop, stop a
//! cancelled call, publish frames, wake long polls), and runs the turns the
//! core claims when the alarm fires.
//!
//! Invariants:
//! - no state here that SQLite cannot rebuild: live calls, watchers and
//!   long polls are observers of durable facts. After a panic reset, a
//!   restart or an eviction, turns resume from the store: an alarm handler
//!   that did not finish is retried by the platform (alarms run at least
//!   once), and a starting instance arms the alarm for whatever is due;
//! - persist, then publish: frames and wake-ups go out after the commit.

mod blame;
mod body;
mod config;
mod js;
mod mcp;
mod sql;
mod tools;
mod turn;
mod watch;

use crate::error::ApiError;
use crate::grants;
use crate::http::{self, Effects, HttpRequest, HttpResponse, META_HEADER};
use crate::limits::{BODY_BYTES_MAX, PAGE_LIMIT_DEFAULT};
use crate::observe::{Frame, RuntimeError};
use crate::run::tools::{self as run_tools, CallsOutcome, ResultOutcome};
use crate::run::{self, FailOutcome, Settlement, Step, StepOutcome};
use crate::session::meta::MetaPolicy;
use crate::session::{read, Ctx};
use crate::store::{schema, Store};
use config::HostConfig;
use futures::channel::oneshot;
use futures::future::select;
use futures::stream::{FuturesUnordered, StreamExt};
use js::RandomIds;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::{Rc, Weak};
use turn::{CallOutcome, Stopper};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use watch::Observers;

/// How long one alarm invocation keeps claiming new turns; the next alarm
/// continues (an alarm handler must end well inside the platform's limit).
const LOOP_CLAIM_BUDGET_MS: i64 = 600_000;
/// Longest sleep of the loop between checks while turns run.
const LOOP_NAP_MS_MAX: i64 = 60_000;

/// The Rust half of the `ShiitakeDO` class exported by `js/do.mjs`.
#[wasm_bindgen]
pub struct ShiitakeCore {
    inner: Rc<Inner>,
}

struct Inner {
    /// For observers that call back (a watcher's fresh snapshot).
    me: Weak<Inner>,
    /// This Durable Object's id: whose code runs, when a trap is attributed.
    agent: Rc<str>,
    sql: sql::DoSql,
    config: HostConfig,
    /// The host Worker's tools (`ShiitakeDO#tools()`), or why they are
    /// unusable (every turn then fails saying so).
    tools: Result<Option<tools::HostTools>, String>,
    schema_checked: Cell<bool>,
    /// Turns this instance is executing, by head command.
    live: RefCell<HashMap<String, Stopper>>,
    /// Turns to start at the attempt they hold: claimed by an admission here
    /// and not started yet, or interrupted by a wasm reset that other code
    /// caused (handed over by the shim, `blame.rs`). Lost on a reset
    /// otherwise: then the attempt counts again.
    fresh: RefCell<HashSet<String>>,
    observers: Observers,
    loop_running: Cell<bool>,
    loop_wake: RefCell<Option<oneshot::Sender<()>>>,
    /// A wake arrived while the loop was not waiting.
    wake_requested: Cell<bool>,
    /// An alarm known to be set at or before this time (saves a write).
    alarm_at: Cell<Option<i64>>,
}

#[wasm_bindgen]
impl ShiitakeCore {
    /// `ctx` is the DurableObjectState; `env` the Worker's bindings;
    /// `tools` the shim's tool host (`js/do.mjs`), or undefined; `spared`
    /// the heads (JSON array) of this object's turns that a wasm reset
    /// caused by other code interrupted: they resume at their current
    /// attempt (`blame.rs`).
    #[wasm_bindgen(constructor)]
    pub fn new(
        ctx: JsValue,
        env: JsValue,
        tools: JsValue,
        spared: Option<String>,
    ) -> Result<ShiitakeCore, JsValue> {
        let sql = sql::DoSql::from_state(&ctx)?;
        // `ctx.id.toString()`: the shim keys its trap reports the same way.
        let agent: Rc<str> = js_sys::Reflect::get(&ctx, &"id".into())
            .ok()
            .filter(|id| id.is_object())
            .map(|id| String::from(js_sys::Object::from(id).to_string()))
            .unwrap_or_default()
            .into();
        let spared: HashSet<String> = spared
            .and_then(|json| serde_json::from_str(&json).ok())
            .unwrap_or_default();
        let tools = tools::HostTools::new(tools);
        if let Err(why) = &tools {
            web_sys::console::error_1(&format!("shiitake: {why}").into());
        }
        let inner = Rc::new_cyclic(|me| Inner {
            me: me.clone(),
            agent,
            sql,
            tools,
            config: HostConfig::from_env(&env),
            schema_checked: Cell::new(false),
            live: RefCell::default(),
            fresh: RefCell::new(spared),
            observers: Observers::default(),
            loop_running: Cell::new(false),
            loop_wake: RefCell::default(),
            wake_requested: Cell::new(false),
            alarm_at: Cell::new(None),
        });
        // A restart (eviction, deploy, panic reset) requests reconciliation
        // of whatever durable work is due, without waiting for a request.
        let starting = Rc::clone(&inner);
        let scope = inner.scope(None);
        wasm_bindgen_futures::spawn_local(blame::scoped(scope, async move {
            if starting.open().is_ok() {
                starting.arm_next_alarm().await;
            }
        }));
        Ok(ShiitakeCore { inner })
    }

    /// Serves one HTTP request of the contract in `docs/http.md`.
    pub async fn fetch(&self, request: web_sys::Request) -> Result<web_sys::Response, JsValue> {
        blame::scoped(self.inner.scope(None), self.inner.fetch(&request)).await
    }

    /// The durable wake: runs every turn that is due.
    pub async fn alarm(&self) -> Result<(), JsValue> {
        blame::scoped(self.inner.scope(None), self.inner.alarm()).await
    }

    /// Host-only (never a session route): stores a Session's delivered
    /// grants `{version, grants}`; answers `{"delivered": ...}`.
    #[wasm_bindgen(js_name = deliverGrants)]
    pub fn deliver_grants(&self, session_id: &str, delivery: &str) -> Result<String, JsValue> {
        let _scope = blame::enter(self.inner.scope(None));
        self.inner.open().map_err(js_api_error)?;
        let outcome = self
            .inner
            .with_ctx(|ctx| grants::deliver(ctx, session_id, delivery))
            .map_err(js_api_error)?;
        Ok(serde_json::json!({ "delivered": outcome }).to_string())
    }

    /// Host-only: the Session's delivered grants as JSON, or `null`.
    #[wasm_bindgen(js_name = sessionGrants)]
    pub fn session_grants(&self, session_id: &str) -> Result<String, JsValue> {
        let _scope = blame::enter(self.inner.scope(None));
        self.inner.open().map_err(js_api_error)?;
        let stored = self
            .inner
            .with_ctx(|ctx| grants::delivered(ctx, session_id))
            .map_err(js_api_error)?;
        serde_json::to_string(&stored).map_err(|e| JsValue::from_str(&e.to_string()))
    }
}

/// Delivers a Session's grants straight into the Durable Object's storage,
/// without a running core (seed: `deliverSessionGrantsToStorage`, for code
/// that runs while the runtime is cold). `state` is the DurableObjectState.
#[wasm_bindgen(js_name = deliverSessionGrantsToStorage)]
pub fn deliver_session_grants_to_storage(
    state: JsValue,
    session_id: &str,
    delivery: &str,
) -> Result<String, JsValue> {
    let sql = sql::DoSql::from_state(&state)?;
    schema::open(&sql).map_err(js_api_error)?;
    let outcome = in_ctx(&sql, &MetaPolicy::default(), |ctx| {
        grants::deliver(ctx, session_id, delivery)
    })
    .map_err(js_api_error)?;
    Ok(serde_json::json!({ "delivered": outcome }).to_string())
}

/// Runs `f` over the store with the current time and fresh random ids.
fn in_ctx<T>(sql: &sql::DoSql, meta: &MetaPolicy, f: impl FnOnce(&mut Ctx<'_>) -> T) -> T {
    let mut ids = RandomIds;
    let mut ctx = Ctx {
        store: Store::new(sql),
        now_ms: js::now_ms(),
        ids: &mut ids,
        meta,
    };
    f(&mut ctx)
}

/// An [`ApiError`] as a JS `Error` carrying `code` and `status`.
fn js_api_error(e: ApiError) -> JsValue {
    let error = js_sys::Error::new(&e.to_string());
    let _ = js_sys::Reflect::set(&error, &"code".into(), &e.code().into());
    let _ = js_sys::Reflect::set(&error, &"status".into(), &JsValue::from(e.status()));
    error.into()
}

impl Inner {
    /// What a trap in code running for this object is attributed to.
    fn scope(&self, session: Option<&str>) -> blame::Scope {
        blame::Scope {
            agent: Rc::clone(&self.agent),
            session: session.map(Rc::from),
        }
    }

    fn open(&self) -> Result<(), ApiError> {
        if !self.schema_checked.get() {
            schema::open(&self.sql)?;
            self.schema_checked.set(true);
        }
        Ok(())
    }

    fn with_ctx<T>(&self, f: impl FnOnce(&mut Ctx<'_>) -> T) -> T {
        // A misconfigured policy refuses requests (`serve`); the run loop
        // never reads metadata rules.
        let unbound = MetaPolicy::default();
        in_ctx(&self.sql, self.config.meta.as_ref().unwrap_or(&unbound), f)
    }

    /// A turn of this instance ended (or handed over to the next one).
    fn end_live(&self, head: &str) {
        self.live.borrow_mut().remove(head);
        blame::turn_ended(&self.agent, head);
    }

    fn is_live(&self, head: &str) -> bool {
        self.live.borrow().contains_key(head)
    }

    fn serve(&self, req: &HttpRequest) -> HttpResponse {
        if let Err(e) = self.open() {
            return e.into();
        }
        if let Err(why) = &self.config.meta {
            return ApiError::HostMisconfigured(why.clone()).into();
        }
        self.with_ctx(|ctx| http::handle(ctx, req))
    }

    async fn fetch(&self, request: &web_sys::Request) -> Result<web_sys::Response, JsValue> {
        let mut req = match read_request(request).await {
            Ok(req) => req,
            Err(e) => return to_response(&e.into()),
        };
        let mut response = self.serve(&req);
        if let Some(park) = response.effects.park.take() {
            match self.observers.wait(&park.command_id) {
                Err(watch::Full) => response = ApiError::TooManyObservers.into(),
                Ok(settled) => {
                    // The client going away never cancels the command.
                    let _ = select(settled, js::sleep(park.timeout_ms)).await;
                    req.waited = true;
                    response = self.serve(&req);
                }
            }
        }
        let mut effects = std::mem::take(&mut response.effects);
        if req.method == "HEAD" {
            response.body = None;
            effects.watch = None;
        }
        if let (Some(session), 200, Some(snapshot)) =
            (&effects.watch, response.status, &response.body)
        {
            let me = self.me.clone();
            let source: watch::SnapshotSource =
                Rc::new(move |session| me.upgrade()?.snapshot(session));
            return match self.observers.watch(session, snapshot, source)? {
                Ok(stream) => Ok(stream),
                Err(watch::Full) => to_response(&ApiError::TooManyObservers.into()),
            };
        }
        self.apply(effects);
        to_response(&response)
    }

    /// Carries out what a committed transition asks for.
    fn apply(&self, effects: Effects) {
        for head in &effects.stop_turns {
            self.fresh.borrow_mut().remove(head);
            if let Some(stopper) = self.live.borrow().get(head) {
                stopper.stop();
            }
        }
        for (session, frame) in &effects.frames {
            self.publish(session, "frame", frame);
        }
        for command in &effects.settled {
            self.observers.settled(command);
        }
        if let Some(session) = &effects.ended_session {
            self.observers.close_session(session);
        }
        if let Some(head) = effects.fresh_turn {
            self.fresh.borrow_mut().insert(head);
        }
        if effects.reconcile {
            self.request_reconcile();
        }
    }

    fn publish(&self, session_id: &str, name: &str, data: &impl serde::Serialize) {
        if let Ok(data) = serde_json::to_string(data) {
            self.observers.publish(session_id, name, &data);
        }
    }

    /// The Session read a watch starts from (and restarts from after lag).
    fn snapshot(&self, session_id: &str) -> Option<String> {
        self.with_ctx(|ctx| read::page(ctx, session_id, None, PAGE_LIMIT_DEFAULT))
            .ok()
            .and_then(|page| serde_json::to_string(&page).ok())
    }

    /// Publishes a stored message (its stored JSON) as a `message` frame.
    fn publish_message(&self, session_id: &str, body: String) {
        if let Ok(message) = serde_json::value::RawValue::from_string(body) {
            self.publish(session_id, "frame", &Frame::Message { message });
        }
    }

    /// Publishes settlements, each after the messages its write appended
    /// (the closing `tool` messages of calls left open).
    fn publish_settled(&self, session_id: &str, settled: Vec<Settlement>) {
        for mut settlement in settled {
            for message in std::mem::take(&mut settlement.appended) {
                self.publish_message(session_id, message);
            }
            self.observers.settled(&settlement.command_id);
            self.publish(session_id, "frame", &Frame::Settled { settlement });
        }
    }

    /// Makes sure the run loop looks at the store soon: wakes a loop running
    /// in this instance (an unfinished alarm is retried after a crash), or
    /// sets the alarm to now. The alarm write is not awaited: the output gate
    /// holds the caller's answer until it is durable.
    fn request_reconcile(&self) {
        if self.loop_running.get() {
            self.wake_loop();
            return;
        }
        let now = js::now_ms();
        if self.alarm_at.get().is_some_and(|at| at <= now) {
            return;
        }
        let write = self.write_alarm(now);
        wasm_bindgen_futures::spawn_local(async move {
            if let Err(e) = write.await {
                web_sys::console::error_1(
                    &format!("shiitake: setAlarm failed: {}", js::error_message(&e)).into(),
                );
            }
        });
    }

    fn wake_loop(&self) {
        self.wake_requested.set(true);
        if let Some(wake) = self.loop_wake.borrow_mut().take() {
            let _ = wake.send(());
        }
    }

    /// Issues the alarm write now; the future reports its completion.
    fn write_alarm(&self, at_ms: i64) -> JsFuture {
        let write = self.sql.storage.set_alarm(at_ms);
        self.alarm_at.set(Some(at_ms));
        write
    }

    async fn set_alarm(&self, at_ms: i64) {
        if let Err(e) = self.write_alarm(at_ms).await {
            self.alarm_at.set(None);
            web_sys::console::error_1(
                &format!("shiitake: setAlarm failed: {}", js::error_message(&e)).into(),
            );
        }
    }

    /// Sets the one alarm to the earliest durable deadline. With nothing
    /// due it writes nothing: a fired alarm is spent, and a stale one (a
    /// retry timer of a cancelled turn) only costs an empty pass, which is
    /// cheaper than a delete on every turn. No await between the read and
    /// the write, so a request's later `setAlarm(now)` is never overwritten.
    async fn arm_next_alarm(&self) {
        let now = js::now_ms();
        match run::next_deadline(Store::new(&self.sql), now, &|h| self.is_live(h)) {
            Ok(Some(at)) => self.set_alarm(at).await,
            Ok(None) => {}
            Err(e) => web_sys::console::error_1(&format!("shiitake: {e}").into()),
        }
    }

    async fn alarm(&self) -> Result<(), JsValue> {
        self.alarm_at.set(None);
        if let Err(e) = self.open() {
            // Nothing can run on a store this build refuses; stop waking.
            web_sys::console::error_1(&format!("shiitake: {e}").into());
            return Ok(());
        }
        if self.loop_running.get() {
            // Another invocation is running the turns: it takes this wake.
            self.wake_loop();
            return Ok(());
        }
        self.loop_running.set(true);
        let result = self.run_loop().await;
        self.loop_running.set(false);
        match result {
            Ok(Some(write)) => {
                if let Err(e) = write.await {
                    web_sys::console::error_1(
                        &format!("shiitake: setAlarm failed: {}", js::error_message(&e)).into(),
                    );
                }
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                // The platform retries this alarm; make sure due work waits
                // no longer than that.
                self.arm_next_alarm().await;
                Err(e)
            }
        }
    }

    /// Claims due turns and runs them concurrently until none is left.
    /// Returns the alarm write for the work left for later. It is issued in
    /// the same synchronous step as the last reconciliation and the end of
    /// the loop, so a request arriving afterwards sets its own alarm and is
    /// never overwritten by a later deadline.
    async fn run_loop(&self) -> Result<Option<JsFuture>, JsValue> {
        let started = js::now_ms();
        let mut turns = FuturesUnordered::new();
        loop {
            let now = js::now_ms();
            self.wake_requested.set(false);
            // Past the claim budget, finish the live turns and let a fresh
            // alarm continue.
            let mut later = Some(now);
            if now - started < LOOP_CLAIM_BUDGET_MS {
                let claimed = self.with_ctx(|ctx| {
                    run::reconcile(
                        ctx,
                        &|h| self.is_live(h),
                        &|h| self.fresh.borrow().contains(h),
                        self.config.attempts(),
                    )
                });
                let run::Reconciled {
                    steps,
                    settled,
                    next_deadline,
                } = claimed.map_err(|e| JsValue::from_str(&e.to_string()))?;
                later = next_deadline;
                for (session, settlement) in settled {
                    self.publish_settled(&session, vec![settlement]);
                }
                for step in steps {
                    let stopper = self.start(&step)?;
                    let scope = self.scope(Some(&step.session_id));
                    turns.push(blame::scoped(scope, self.run_turn(step, stopper)));
                }
            }
            if turns.is_empty() {
                self.loop_running.set(false);
                return Ok(later.map(|at| self.write_alarm(at)));
            }
            // Sleep until a turn ends, a request wakes the loop, or work
            // left for later is due. No await between the claim and
            // registering the wake: a wake cannot fall in between.
            let (wake_tx, wake_rx) = oneshot::channel();
            *self.loop_wake.borrow_mut() = Some(wake_tx);
            let nap_ms = match later {
                Some(at) if now - started < LOOP_CLAIM_BUDGET_MS => {
                    (at - now).clamp(0, LOOP_NAP_MS_MAX)
                }
                _ => LOOP_NAP_MS_MAX,
            };
            let _ = select(turns.next(), select(wake_rx, js::sleep(nap_ms as u64))).await;
            self.loop_wake.borrow_mut().take();
        }
    }

    /// Marks a claimed turn live and publishes its start: the user message
    /// (when the claim appended it), then `started`, the order an admission
    /// that starts its turn at once publishes too.
    fn start(&self, step: &Step) -> Result<Stopper, JsValue> {
        self.fresh.borrow_mut().remove(&step.command_id);
        let stopper = Stopper::new()?;
        self.live
            .borrow_mut()
            .insert(step.command_id.clone(), stopper.clone());
        blame::turn_started(&self.agent, &step.command_id, &step.session_id);
        for message in &step.appended {
            self.publish_message(&step.session_id, message.clone());
        }
        let started = Frame::Started {
            command_id: step.command_id.clone(),
            attempt: step.attempt,
        };
        self.publish(&step.session_id, "frame", &started);
        let unavailable = match &self.tools {
            Ok(Some(tools)) => tools.current().execute_unavailable().map(str::to_owned),
            _ => None,
        };
        if let Some(why) = unavailable {
            let diagnostic = Frame::Diagnostic {
                command_id: step.command_id.clone(),
                diagnostic: why,
            };
            self.publish(&step.session_id, "frame", &diagnostic);
        }
        Ok(stopper)
    }

    /// Runs one turn: model steps until it settles, fails, or is stopped;
    /// then the Session's next turn when its settlement claimed one.
    async fn run_turn(&self, mut step: Step, mut stopper: Stopper) {
        let mut head = step.command_id.clone();
        let session = step.session_id.clone();
        // MCP servers that could not be offered are said once per turn.
        let mut reported = false;
        loop {
            if !step.tool_calls.is_empty() {
                match self.close_calls(&step, &stopper).await {
                    Some(next) => step = next,
                    None => break,
                }
            }
            let on_delta = |text: &str| {
                let delta = Frame::Delta {
                    command_id: head.clone(),
                    text: text.to_owned(),
                };
                self.publish(&session, "frame", &delta);
            };
            let (specs, protocol) = match &self.tools {
                Ok(Some(tools)) => {
                    let toolset = self.toolset().await.unwrap_or_else(|| tools.current());
                    if !reported {
                        reported = true;
                        for report in tools.unavailable() {
                            let diagnostic = Frame::Diagnostic {
                                command_id: head.clone(),
                                diagnostic: format!(
                                    "MCP server `{}` is unavailable: {}",
                                    report.name, report.reason
                                ),
                            };
                            self.publish(&session, "frame", &diagnostic);
                        }
                    }
                    (toolset.specs(), toolset.protocol())
                }
                Ok(None) => (Vec::new(), run_tools::Protocol::new([])),
                Err(why) => {
                    let failure = turn::CallOutcome::Failed(crate::model::ModelError::new(
                        false,
                        why.clone(),
                    ));
                    self.settle_failure(&session, &head, &step, failure);
                    break;
                }
            };
            match turn::call(&self.config, &step, &specs, &stopper, &on_delta).await {
                CallOutcome::Stopped => break,
                CallOutcome::Answered(answer) if !answer.tool_calls.is_empty() => {
                    let attempt = step.attempt;
                    let recorded = self.with_ctx(|ctx| {
                        run_tools::record_calls(ctx, &session, &head, attempt, &answer, &protocol)
                    });
                    match recorded {
                        Ok(CallsOutcome::Run { message, calls }) => {
                            self.publish_message(&session, message);
                            step.tool_calls = calls;
                            step.context.clear();
                        }
                        Ok(CallsOutcome::Settled(settled)) => {
                            self.publish_settled(&session, settled);
                            break;
                        }
                        Ok(CallsOutcome::Stale) => break,
                        Err(e) => {
                            web_sys::console::error_1(&format!("shiitake: {e}").into());
                            break;
                        }
                    }
                }
                CallOutcome::Answered(answer) => {
                    let attempt = step.attempt;
                    match self
                        .with_ctx(|ctx| run::complete_step(ctx, &session, &head, attempt, &answer))
                    {
                        Ok(StepOutcome::Continue(next)) => {
                            for message in &next.appended {
                                self.publish_message(&session, message.clone());
                            }
                            step = next;
                        }
                        Ok(StepOutcome::Settled {
                            settled,
                            answer,
                            next,
                        }) => {
                            self.publish_message(&session, answer);
                            self.publish_settled(&session, settled);
                            let Some(next) = next else { break };
                            self.end_live(&head);
                            match self.start(&next) {
                                Ok(next_stopper) => stopper = next_stopper,
                                // The claim is durable: the next alarm pass
                                // resumes it as an orphan.
                                Err(_) => break,
                            }
                            head = next.command_id.clone();
                            step = next;
                        }
                        Ok(StepOutcome::Stale) => break,
                        Err(e) => {
                            web_sys::console::error_1(&format!("shiitake: {e}").into());
                            break;
                        }
                    }
                }
                failure @ CallOutcome::Failed(_) => {
                    self.settle_failure(&session, &head, &step, failure);
                    break;
                }
            }
        }
        self.end_live(&head);
    }

    /// Closes the open calls of `step` in order, recording each outcome;
    /// answers the next model step once the last is closed. `None`: the
    /// turn was stopped or the attempt went stale.
    async fn close_calls(&self, step: &Step, stopper: &Stopper) -> Option<Step> {
        for call in &step.tool_calls {
            if stopper.is_stopped() {
                return None;
            }
            let output = self.run_call(step, call, stopper).await?;
            if stopper.is_stopped() {
                return None;
            }
            let recorded = self.with_ctx(|ctx| {
                run_tools::record_result(
                    ctx,
                    &step.session_id,
                    &step.command_id,
                    step.attempt,
                    &call.id,
                    &output,
                )
            });
            match recorded {
                Ok(ResultOutcome::Recorded { message, next }) => {
                    self.publish_message(&step.session_id, message);
                    if next.is_some() {
                        return next;
                    }
                }
                Ok(ResultOutcome::Stale) => return None,
                Err(e) => {
                    web_sys::console::error_1(&format!("shiitake: {e}").into());
                    return None;
                }
            }
        }
        None
    }

    /// Records a failed model call: a retry on the durable timer, or the
    /// turn's `failed` settlement.
    fn settle_failure(&self, session: &str, head: &str, step: &Step, failure: CallOutcome) {
        let CallOutcome::Failed(error) = failure else {
            return;
        };
        let delay = self.config.retry.delay_ms(step.attempt);
        let outcome = self.with_ctx(|ctx| {
            run::fail_attempt(
                ctx,
                session,
                head,
                step.attempt,
                &run::Failure {
                    retryable: error.retryable,
                    diagnostic: error.diagnostic.clone(),
                },
                self.config.attempts(),
                delay,
            )
        });
        let now = js::now_ms();
        let report = |retry_in_ms| RuntimeError {
            command_id: head.to_owned(),
            diagnostic: error.diagnostic.clone(),
            retry_in_ms,
        };
        match outcome {
            Ok(FailOutcome::Retry { retry_at }) => {
                self.publish(session, "runtime-error", &report(Some(retry_at - now)));
            }
            Ok(FailOutcome::Settled(settled)) => {
                self.publish(session, "runtime-error", &report(None));
                self.publish_settled(session, settled);
            }
            Ok(FailOutcome::Stale) => {}
            Err(e) => web_sys::console::error_1(&format!("shiitake: {e}").into()),
        }
    }
}

async fn read_request(request: &web_sys::Request) -> Result<HttpRequest, ApiError> {
    let url = request.url();
    let (path, query) = split_url(&url);
    let headers = request.headers();
    let declared = headers
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<usize>().ok());
    // Refuse a declared oversize body before reading a byte of it.
    if declared.is_some_and(|n| n > BODY_BYTES_MAX) {
        return Err(ApiError::PayloadTooLarge {
            bytes_max: BODY_BYTES_MAX,
        });
    }
    let body = match request.method().as_str() {
        "GET" | "HEAD" => Vec::new(),
        // Chunked bodies too: counted as they stream, cancelled past the bound.
        _ => body::read_bounded(request, BODY_BYTES_MAX, declared).await?,
    };
    Ok(HttpRequest {
        method: request.method(),
        path: path.to_owned(),
        query: query.to_owned(),
        meta: headers.get(META_HEADER).ok().flatten(),
        body,
        waited: false,
    })
}

/// Path and query of an absolute URL the runtime built (`scheme://host/p?q`);
/// cheaper than constructing a JS `URL` on the hot path.
fn split_url(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(url, |i| &url[i + 3..]);
    let target = after_scheme.find('/').map_or("/", |i| &after_scheme[i..]);
    let target = target.split('#').next().unwrap_or(target);
    target.split_once('?').unwrap_or((target, ""))
}

fn to_response(r: &HttpResponse) -> Result<web_sys::Response, JsValue> {
    let init = web_sys::ResponseInit::new();
    init.set_status(r.status);
    let headers = web_sys::Headers::new()?;
    if r.body.is_some() {
        headers.set("content-type", "application/json; charset=utf-8")?;
    }
    init.set_headers(&headers);
    web_sys::Response::new_with_opt_str_and_init(r.body.as_deref(), &init)
}
