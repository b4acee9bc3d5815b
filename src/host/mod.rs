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

#[cfg_attr(not(feature = "acp"), path = "acp_left_out.rs")]
mod acp;
mod bindings;
mod blame;
mod body;
mod computers;
mod config;
mod directory;
mod extensions;
mod files;
mod files_grant;
#[cfg_attr(not(feature = "files"), path = "files_journal_left_out.rs")]
mod files_journal;
mod fleet;
mod jobs;
mod mail;
#[cfg_attr(not(feature = "mcp"), path = "mcp_left_out.rs")]
mod mcp;
#[cfg(feature = "mcp-server")]
mod mcp_server;
mod model;
mod models;
mod runner;
mod serve;
mod sql;
mod stopper;
mod toolbox;
mod tools;
#[cfg_attr(not(feature = "traces"), path = "traces_left_out.rs")]
mod traces;
#[cfg_attr(not(feature = "ui"), path = "ui_left_out.rs")]
mod ui;
mod watch;

use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::grants;
use crate::limits::PAGE_LIMIT_DEFAULT;
use crate::meta::MetaPolicy;
use crate::observe::{Event, Frame};
use crate::session::read;
use crate::sql::SqlError;
use crate::store::{schema, CommandRow, OnSettled, Store};
use bindings::{log_error, RandomIds};
use config::HostConfig;
use futures::channel::oneshot;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use stopper::Stopper;
use wasm_bindgen::prelude::*;
use watch::Observers;

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
    tools: Result<Option<toolbox::HostTools>, String>,
    /// The host's extensions (`ShiitakeDO#extensions()`), or why the roster
    /// is unusable (every request is then refused saying so).
    extensions: Result<crate::extension::Extensions, String>,
    /// The host's work lane (`ShiitakeDO#hostJobs()`, `jobs.rs`), or why
    /// it is unusable (every pass then fails saying so).
    jobs: Result<Option<jobs::HostJobs>, String>,
    /// The lane's pass in this instance, and `close` calls joining it.
    lane: jobs::LaneRun,
    /// The host's fleet (`ShiitakeDO#fleet()`, `fleet.rs`), or why it is
    /// unusable (the `agents` module is then not offered, peers refused).
    fleet: Result<Option<fleet::HostFleet>, String>,
    /// The host's model policy (`ShiitakeDO#models()` and the env,
    /// `models.rs`), or why it is unusable (every turn fails saying so).
    models: Result<models::HostModels, String>,
    /// The delivery performer in this instance (`mail.rs`).
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))] // a lean build carries no mail
    mail: mail::MailRun,
    /// Turns this instance is executing, by head command.
    live: RefCell<HashMap<String, Stopper>>,
    observers: Observers,
    /// The Agent machine (`run::agent`): its schedule, running turns and
    /// turns held fresh (to start at the attempt they hold: claimed by an
    /// admission here, or interrupted by a wasm reset that other code
    /// caused, handed over by the shim, `blame.rs`; held for the trap
    /// report like live turns, so a reset that other code causes before
    /// they start spares them too).
    machine: RefCell<crate::run::agent::Agent>,
    /// Wakes the loop while it naps.
    loop_wake: RefCell<Option<oneshot::Sender<()>>>,
    /// Where spans go (`ShiitakeDO#telemetry()`, `traces.rs`), or why it
    /// is unusable (nothing is then recorded).
    telemetry: Result<Option<traces::HostTelemetry>, String>,
}

#[wasm_bindgen]
impl ShiitakeCore {
    /// `ctx` is the DurableObjectState; `env` the Worker's bindings;
    /// `tools` the shim's tool host (`js/do.mjs`), or undefined; `spared`
    /// this object's turns (JSON `[[head, session, cutOff], ...]`) that a
    /// wasm reset caused by other code interrupted: they resume at their
    /// current attempt, a model call the reset cut off counted `unknown`
    /// (`blame.rs`); `jobs` the shim's host work lane, or
    /// undefined (`jobs.rs`); `fleet` the shim's fleet transport, or
    /// undefined (`fleet.rs`); `models` the shim's model host, or
    /// undefined (`models.rs`); `meta` the shim's metadata host
    /// (`meta()`), or undefined (`config.rs`); `telemetry` the host's
    /// `telemetry()` as JSON, or undefined (`traces.rs`).
    // One argument per host hook, as the shim hands them over.
    #[allow(clippy::too_many_arguments)]
    #[wasm_bindgen(constructor)]
    pub fn new(
        ctx: JsValue,
        env: JsValue,
        tools: JsValue,
        extensions: JsValue,
        spared: Option<String>,
        jobs: JsValue,
        fleet: JsValue,
        models: JsValue,
        meta: JsValue,
        telemetry: Option<String>,
    ) -> Result<ShiitakeCore, JsValue> {
        let sql = sql::DoSql::from_state(&ctx)?;
        // `ctx.id.toString()`: the shim keys its trap reports the same way.
        let agent: Rc<str> = js_sys::Reflect::get(&ctx, &"id".into())
            .ok()
            .filter(|id| id.is_object())
            .map(|id| String::from(js_sys::Object::from(id).to_string()))
            .unwrap_or_default()
            .into();
        // `(head, session, cut off)`: see `blame.rs`.
        let spared: Vec<(String, String, bool)> = spared
            .and_then(|json| serde_json::from_str(&json).ok())
            .unwrap_or_default();
        let fleet = fleet::HostFleet::new(fleet);
        if let Err(why) = &fleet {
            log_error(why);
        }
        let mut config = HostConfig::from_env(&env, meta);
        let telemetry = traces::HostTelemetry::new(telemetry, &mut config.secrets);
        if let Err(why) = &telemetry {
            log_error(config.secrets.redact(why));
        }
        if let Err(why) = &config.meta {
            log_error(why);
        }
        let models = models::HostModels::new(models, &config);
        if let Err(why) = &models {
            log_error(why);
        }
        let offer = fleet
            .as_ref()
            .ok()
            .and_then(|f| f.as_ref())
            .map(|f| f.offer);
        let tools = toolbox::HostTools::new(tools, offer);
        if let Err(why) = &tools {
            log_error(why);
        }
        let own_files = match &tools {
            Ok(Some(tools)) => Some(tools.has_own_files()),
            Ok(None) => None,
            Err(_) => Some(false),
        };
        let extensions = files_grant::check(own_files, extensions::from_shim(extensions));
        if let Err(why) = &extensions {
            log_error(why);
        }
        let jobs = jobs::HostJobs::new(jobs);
        if let Err(why) = &jobs {
            log_error(why);
        }
        let heartbeat_ms = config.watch_heartbeat_ms;
        let machine = crate::run::agent::Agent::new(
            crate::run::driver::TurnPolicy::new(config.retry)
                .with_budget(config.budget)
                .with_traces(matches!(telemetry, Ok(Some(_)))),
        );
        let inner = Rc::new_cyclic(|me| Inner {
            me: me.clone(),
            agent,
            sql,
            tools,
            extensions,
            jobs,
            lane: jobs::LaneRun::default(),
            fleet,
            models,
            mail: mail::MailRun::default(),
            config,
            live: RefCell::default(),
            observers: Observers::new(heartbeat_ms),
            machine: RefCell::new(machine),
            loop_wake: RefCell::default(),
            telemetry,
        });
        inner.count_cut_off(&spared);
        inner.hold_fresh(spared.into_iter().map(|(head, session, _)| (head, session)));
        // A restart (eviction, deploy, panic reset) requests reconciliation
        // of whatever durable work is due, without waiting for a request.
        let starting = Rc::clone(&inner);
        let scope = inner.scope(None);
        // It joins the fleet's directory too (`fleet.rs`).
        wasm_bindgen_futures::spawn_local(blame::scoped(scope, async move {
            if starting.open().is_err() {
                return;
            }
            if !starting.machine.borrow().created_empty() {
                starting.arm_next_alarm();
            }
            #[cfg(feature = "fleet")]
            starting.join_directory().await;
        }));
        Ok(ShiitakeCore { inner })
    }

    /// Serves one HTTP request of the contract in `docs/http.md`, reading
    /// its body.
    pub async fn fetch(&self, request: web_sys::Request) -> Result<web_sys::Response, JsValue> {
        blame::scoped(self.inner.scope(None), self.inner.fetch(&request)).await
    }

    /// Serves one HTTP request whose body the shim read (`readBody` of
    /// `js/do/body.mjs`): the Response, or a promise of it for a settlement
    /// long poll. Never a browser bridge route (`fetch` reads those).
    #[wasm_bindgen(js_name = fetchRead)]
    pub fn fetch_read(&self, request: web_sys::Request, read: JsValue) -> Result<JsValue, JsValue> {
        let scope = self.inner.scope(None);
        let _scope = blame::enter(scope.clone());
        Ok(match self.inner.fetch_read(&request, read)? {
            serve::Served::Now(response) => response.into(),
            serve::Served::Parked(parked) => {
                let inner = Rc::clone(&self.inner);
                wasm_bindgen_futures::future_to_promise(blame::scoped(scope, async move {
                    inner.parked(parked).await.map(JsValue::from)
                }))
                .into()
            }
        })
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

    /// Host-only: runs an extension command in process (an Agent-scope one
    /// when `session_id` is undefined) and answers its result as JSON.
    /// Refusals throw an `Error` with `code` and `status`.
    #[wasm_bindgen(js_name = extensionCommand)]
    pub fn extension_command(
        &self,
        extension: &str,
        command: &str,
        session_id: Option<String>,
        request_id: Option<String>,
        input: &str,
    ) -> Result<String, JsValue> {
        let _scope = blame::enter(self.inner.scope(session_id.as_deref()));
        let inner = &self.inner;
        let ext = inner.extensions_ready()?;
        if let Some(r) = &request_id {
            crate::session::command::validate_request_id(r).map_err(js_api_error)?;
        }
        let input: serde_json::Value = serde_json::from_str(input)
            .map_err(|e| js_api_error(ApiError::InvalidRequest(format!("input: {e}"))))?;
        let invoked = inner
            .with_ctx(|ctx| {
                ext.command(
                    ctx,
                    &crate::session::admission::ExtensionSends,
                    crate::extension::Invocation {
                        extension,
                        command,
                        session_id: session_id.as_deref(),
                        request_id: request_id.as_deref(),
                        input,
                    },
                )
            })
            .map_err(js_api_error)?;
        inner.apply(crate::http::invoked_effects(&invoked));
        inner.publish_projections();
        Ok(invoked.result.to_string())
    }

    /// Host-only: resumes a stopped extension; answers its status as JSON.
    #[wasm_bindgen(js_name = resumeExtension)]
    pub fn resume_extension(&self, extension: &str) -> Result<String, JsValue> {
        let _scope = blame::enter(self.inner.scope(None));
        let inner = &self.inner;
        let ext = inner.extensions_ready()?;
        let status = inner
            .with_ctx(|ctx| ext.resume(ctx, extension))
            .map_err(js_api_error)?;
        // The missed settled work replays in the alarm's passes.
        inner.request_reconcile();
        serde_json::to_string(&status).map_err(|e| JsValue::from_str(&e.to_string()))
    }

    /// Host-only: every roster extension's status as JSON.
    #[wasm_bindgen(js_name = extensionStatuses)]
    pub fn extension_statuses(&self) -> Result<String, JsValue> {
        let _scope = blame::enter(self.inner.scope(None));
        let inner = &self.inner;
        let ext = inner.extensions_ready()?;
        let list = ext.statuses(inner.store()).map_err(js_api_error)?;
        serde_json::to_string(&list).map_err(|e| JsValue::from_str(&e.to_string()))
    }

    /// Closes the runtime (the host's `initialize(extensions)` failed, or
    /// the host closes it): this instance answers every request `503
    /// runtime_closed` and starts no work until it is replaced; the durable
    /// work waits for a later open. Resolves once the running host work
    /// pass and run loop have ended (both aborted: `jobs.rs`).
    pub async fn close(&self, reason: String) {
        let scope = self.inner.scope(None);
        blame::scoped(scope, self.inner.close(&reason)).await;
    }

    /// Host-only (`ShiitakeDO#closeUi`): closes the browser bridge for the
    /// life of this instance: every event stream ends, waiting `ui` calls
    /// fail, the bridge's routes answer 410 and runs borrow nothing.
    #[wasm_bindgen(js_name = closeUi)]
    pub fn close_ui(&self, reason: &str) {
        let _scope = blame::enter(self.inner.scope(None));
        self.inner.close_ui(reason);
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
    report_opened(schema::open(&sql).map_err(js_api_error)?);
    let outcome = in_ctx(Store::new(&sql), &MetaPolicy::default(), |ctx| {
        grants::deliver(ctx, session_id, delivery)
    })
    .map_err(js_api_error)?;
    Ok(serde_json::json!({ "delivered": outcome }).to_string())
}

/// Runs `f` over `store` with the current time and fresh random ids.
fn in_ctx<T>(store: Store<'_>, meta: &MetaPolicy, f: impl FnOnce(&mut Ctx<'_>) -> T) -> T {
    let mut ids = RandomIds;
    let mut ctx = Ctx {
        store,
        now_ms: bindings::now_ms(),
        ids: &mut ids,
        meta,
        spans: Vec::new(),
        charged: None,
    };
    f(&mut ctx)
}

/// Logs a migration once: the store it happens to is current afterwards.
fn report_opened(opened: schema::Opened) {
    if let schema::Opened::Migrated { from } = opened {
        bindings::log_info(format!(
            "the store was migrated from schema version {from} to {}",
            schema::SCHEMA_VERSION
        ));
    }
}

/// An [`ApiError`] as a JS `Error` carrying `code` and `status`.
fn js_api_error(e: ApiError) -> JsValue {
    let error = js_sys::Error::new(&e.to_string());
    let _ = js_sys::Reflect::set(&error, &"code".into(), &e.code().into());
    let _ = js_sys::Reflect::set(&error, &"status".into(), &JsValue::from(e.status()));
    error.into()
}

impl Inner {
    /// The browser bridge, when the host configured `tools().ui` (a lean
    /// build refuses it).
    #[cfg(feature = "ui")]
    fn ui(&self) -> Option<&Rc<ui::HostUi>> {
        match &self.tools {
            Ok(Some(tools)) => tools.ui.as_ref(),
            _ => None,
        }
    }

    /// What a trap in code running for this object is attributed to.
    fn scope(&self, session: Option<&str>) -> blame::Scope {
        blame::Scope {
            agent: Rc::clone(&self.agent),
            session: session.map(Rc::from),
        }
    }

    /// Opens the store: the schema, then the extensions (tables, new
    /// revisions, migrations). Once per instance.
    fn open(&self) -> Result<(), ApiError> {
        if !self.machine.borrow().opened() {
            let opened = schema::open(&self.sql)?;
            report_opened(opened);
            let created = opened == schema::Opened::Created;
            // Empty tables: no turn, mail or outbox entry to look for until
            // this instance writes one (which arms the alarm).
            let created_empty = created && self.extensions().is_none_or(|e| e.roster().is_empty());
            if created_empty {
                self.lane_created_empty();
            }
            if let Some(ext) = self.extensions() {
                self.with_ctx(|ctx| ext.open(ctx))?;
            }
            self.machine.borrow_mut().open(created_empty);
        }
        Ok(())
    }

    /// Open, and not closed by a failed `initialize`, with a usable roster.
    fn ready(&self) -> Result<(), ApiError> {
        if let Some(why) = self.machine.borrow().closed() {
            return Err(ApiError::RuntimeClosed(why.to_owned()));
        }
        if let Err(why) = &self.extensions {
            return Err(ApiError::HostMisconfigured(why.clone()));
        }
        self.open()
    }

    /// The store, its settlements told to the extensions, the fleet's
    /// replies and the traces.
    fn store(&self) -> Store<'_> {
        if self.extensions().is_none() && self.fleet().is_none() && !self.traced() {
            return Store::new(&self.sql);
        }
        Store::observed(&self.sql, self)
    }

    fn with_ctx<T>(&self, f: impl FnOnce(&mut Ctx<'_>) -> T) -> T {
        // A misconfigured policy refuses requests (`serve`); the run loop
        // never reads metadata rules.
        let unbound = MetaPolicy::default();
        in_ctx(
            self.store(),
            self.config.meta.as_ref().unwrap_or(&unbound),
            f,
        )
    }

    fn is_live(&self, head: &str) -> bool {
        self.live.borrow().contains_key(head)
    }

    fn publish(&self, session_id: &str, name: &str, data: &impl serde::Serialize) {
        if !self.observers.watched(session_id) {
            return;
        }
        if let Ok(data) = serde_json::to_string(data) {
            self.observers.publish(session_id, name, &data);
        }
    }

    /// Publishes one event; a `settled` frame first wakes the command's
    /// long polls.
    fn publish_event(&self, session_id: &str, event: &Event) {
        match event {
            Event::Frame(frame) => {
                if let Frame::Settled { settlement } = frame {
                    self.observers.settled(&settlement.command_id);
                }
                self.publish(session_id, event.name(), frame);
            }
            Event::RuntimeError(error) => self.publish(session_id, event.name(), error),
        }
    }

    /// The Session read a watch starts from (and restarts from after lag),
    /// with its extensions' projections.
    fn snapshot(&self, session_id: &str) -> Option<String> {
        self.with_ctx(|ctx| {
            let page = read::page(ctx, session_id, None, PAGE_LIMIT_DEFAULT)?;
            crate::http::with_projections(ctx, self.extensions(), session_id, page)
        })
        .ok()
        .map(|page| String::from(Box::<str>::from(page)))
    }
}

/// Every settlement runs, inside its settling transition, the extensions'
/// settled hooks, the staging of the replies this Agent owes and of the
/// turn's span.
impl OnSettled for Inner {
    fn settled(
        &self,
        store: Store<'_>,
        command: &CommandRow,
        settlement: &str,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        let replies = self.fleet().map(|fleet| fleet.replies());
        crate::run::agent::Settled {
            extensions: self.extensions(),
            replies: replies.as_ref(),
        }
        .settled(store, command, settlement, now_ms)?;
        self.stage_turn_span(store, command, settlement, now_ms)
    }
}
