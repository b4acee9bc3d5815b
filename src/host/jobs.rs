//! The host's work lane (seed: "Host metadata", `hostJobs`): delivers the
//! delivery outbox (`src/delivery.rs`) to the host Worker's
//! `hostJobs().deliver`, then calls its `tick`, concurrently with the turns
//! and never blocking them.
//!
//! A pass: read the lane's durable state; while a retry waits, do nothing
//! (its alarm is armed). Otherwise deliver the oldest entries in batches of
//! `HOST_DELIVERY_BATCH_MAX`, acknowledging through each batch's last `seq`
//! once `deliver` resolves (at most `HOST_PASS_BATCHES_MAX` batches), then
//! `tick`. The whole pass runs under one deadline (`hostJobs().timeoutMs`,
//! at most `HOST_PASS_TIMEOUT_MS`), its signal aborted past it. A pass that
//! rejects or overruns fails: the batch in hand is not acknowledged, and the
//! retry is persisted (`delivery::Lane`, the ordinary backoff, never given
//! up) until a pass succeeds, which clears it. Delivery is at least once: an
//! entry whose `deliver` failed or overran comes again, keyed and with the
//! same `seq`.
//!
//! Without `hostJobs()` the lane acknowledges entries without delivering
//! them, so the outbox never fills.
//!
//! Wakes: every alarm; a request whose transition staged entries
//! (`Effects::delivery`); with `hostJobs()`, every reconciliation request;
//! the heartbeat of a live tool (every `TOOL_HEARTBEAT_MS`) when entries
//! wait and no pass runs; and the alarm, whose deadline includes the
//! lane's (now while entries wait, `retry_at` while failing). One pass runs
//! at a time; a wake during a pass runs one more after it.
//!
//! Each pass then exports the spans waiting (`traces.rs`), under the same
//! backoff; their deadline joins the lane's.
//!
//! Nothing here is needed to rebuild the lane: entries and a waiting retry
//! are rows, and a starting instance arms the alarm for them.

use super::bindings::{self, error_message, log_error, log_warn, JsJobs};
use super::{blame, Inner};
use crate::delivery::{self, Entry, LanePass, LanePolicy, LaneStep};
use crate::error::ApiError;
use crate::limits::{
    HOST_PASS_ABORT_GRACE_MS, HOST_PASS_TIMEOUT_MS, HOST_PASS_TIMEOUT_MS_MIN, HOST_RETRY_MS_MAX,
    HOST_RETRY_MS_MIN, RETRY_BASE_MS_DEFAULT, RETRY_MAX_MS_DEFAULT, TOOL_HEARTBEAT_MS,
};
use crate::run::schedule::Event;
use futures::channel::oneshot;
use futures::future::{select, Either};
use serde::Deserialize;
use std::cell::{Cell, RefCell};
use std::future::Future;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// `hostJobs()` as the shim describes it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    tick: bool,
    #[serde(default)]
    retry_base_ms: Option<u64>,
    #[serde(default)]
    retry_max_ms: Option<u64>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// `hostJobs()` threw or is malformed: why.
    #[serde(default)]
    error: Option<String>,
}

/// The host's work lane callbacks, decoded once per instance.
pub struct HostJobs {
    js: JsJobs,
    tick: bool,
    policy: LanePolicy,
    timeout_ms: u64,
}

impl HostJobs {
    /// `None` when the host configures no `hostJobs()`; an error when it is
    /// unusable (every pass then fails saying so, and entries wait).
    pub fn new(js: JsValue) -> Result<Option<HostJobs>, String> {
        if js.is_undefined() || js.is_null() {
            return Ok(None);
        }
        let js: JsJobs = js.unchecked_into();
        let spec: Spec =
            crate::json::from_text(&js.spec()).map_err(|e| format!("hostJobs(): {e}"))?;
        if let Some(error) = spec.error {
            // The shim's message names the key (`hostJobs().x: ...`).
            return Err(error);
        }
        let base_ms = setting(
            "retryBaseMs",
            spec.retry_base_ms,
            HOST_RETRY_MS_MIN,
            HOST_RETRY_MS_MAX,
            RETRY_BASE_MS_DEFAULT,
        )?;
        let max_ms = setting(
            "retryMaxMs",
            spec.retry_max_ms,
            base_ms,
            HOST_RETRY_MS_MAX,
            RETRY_MAX_MS_DEFAULT.max(base_ms),
        )?;
        let timeout_ms = setting(
            "timeoutMs",
            spec.timeout_ms,
            HOST_PASS_TIMEOUT_MS_MIN,
            HOST_PASS_TIMEOUT_MS,
            HOST_PASS_TIMEOUT_MS,
        )?;
        Ok(Some(HostJobs {
            js,
            tick: spec.tick,
            policy: LanePolicy { base_ms, max_ms },
            timeout_ms,
        }))
    }
}

fn setting(
    name: &str,
    value: Option<u64>,
    min: u64,
    max: u64,
    default: u64,
) -> Result<u64, String> {
    match value {
        None => Ok(default),
        Some(n) if (min..=max).contains(&n) => Ok(n),
        Some(n) => Err(format!(
            "hostJobs().{name} is {n}; it must be an integer in {min}..={max}"
        )),
    }
}

/// The lane's handles in this instance (whether a pass runs is the
/// schedule's, `run::schedule`): who waits for it, how to abort it.
#[derive(Default)]
pub struct LaneRun {
    /// Aborts the running pass (close).
    abort: RefCell<Option<oneshot::Sender<()>>>,
    /// `close` calls waiting for the host pass and the run loop to end.
    joiners: RefCell<Vec<oneshot::Sender<()>>>,
    /// Without `hostJobs()`: the outbox was found empty and this instance
    /// staged nothing since, so a wake need not read it. False at start
    /// (a previous instance may have left entries).
    empty: Cell<bool>,
}

impl LaneRun {
    /// A pass or the run loop ended: wake whoever waits to join them.
    pub fn ended(&self) {
        for joiner in self.joiners.borrow_mut().drain(..) {
            let _ = joiner.send(());
        }
    }

    /// Resolves when a pass or the run loop next ends.
    pub fn next_end(&self) -> oneshot::Receiver<()> {
        let (joined, ended) = oneshot::channel();
        self.joiners.borrow_mut().push(joined);
        ended
    }
}

/// How a pass ended.
enum Pass {
    /// A retry waits, or the instance cannot run work.
    NotDue,
    /// Delivered and ticked; `more`: entries were left for the next pass.
    Done { more: bool },
    /// Failed; its retry is persisted.
    Failed,
    /// Aborted by close: nothing recorded, the entries wait.
    Abandoned,
}

/// What bounded work came to.
struct Bounded<T> {
    /// The work's output, if it ended (in time, or within the grace).
    output: Option<T>,
    timed_out: bool,
}

/// Runs `work` until it ends, `timeout_ms` passes or `abort` fires; past
/// either, aborts `controller` and gives the work `HOST_PASS_ABORT_GRACE_MS`
/// to end.
async fn bounded<F: Future>(
    work: F,
    timeout_ms: u64,
    abort: oneshot::Receiver<()>,
    controller: &web_sys::AbortController,
) -> Bounded<F::Output> {
    let mut work = Box::pin(work);
    let timed_out = match select(
        work.as_mut(),
        select(Box::pin(bindings::sleep(timeout_ms)), abort),
    )
    .await
    {
        Either::Left((output, _)) => {
            return Bounded {
                output: Some(output),
                timed_out: false,
            }
        }
        Either::Right((Either::Left(_), _)) => true,
        Either::Right((Either::Right(_), _)) => false,
    };
    controller.abort();
    let output = match select(work, Box::pin(bindings::sleep(HOST_PASS_ABORT_GRACE_MS))).await {
        Either::Left((output, _)) => Some(output),
        Either::Right(_) => None,
    };
    Bounded { output, timed_out }
}

/// Entries as the host receives them: `[{seq, key, body, at}]`.
fn entries_json(entries: &[Entry]) -> String {
    serde_json::Value::Array(
        entries
            .iter()
            .map(|e| serde_json::json!({ "seq": e.seq, "key": e.key, "body": e.body, "at": e.at }))
            .collect(),
    )
    .to_string()
}

impl Inner {
    /// Whether the host configured `hostJobs()` (usable or not).
    pub(super) fn has_host_jobs(&self) -> bool {
        !matches!(self.jobs, Ok(None))
    }

    /// The store was created by this instance: its outbox is empty.
    pub(super) fn lane_created_empty(&self) {
        self.lane.empty.set(true);
    }

    /// A transition of this instance staged outbox entries.
    pub(super) fn staged_delivery(&self) {
        self.lane.empty.set(false);
    }

    /// Without `hostJobs()`, whether the outbox is known empty (no pass or
    /// deadline needs to read it).
    fn lane_known_empty(&self) -> bool {
        !self.has_host_jobs() && self.lane.empty.get()
    }

    /// Requests a host work pass: the schedule starts one now, or, while
    /// one runs, one more after it. A closed instance starts none; none
    /// starts with nothing to deliver and no span due.
    pub(super) fn request_host_work(&self) {
        let now = bindings::now_ms();
        if self.lane_known_empty() && self.trace_deadline(now).is_none_or(|at| at > now) {
            return;
        }
        self.schedule_side(Event::LaneWanted);
    }

    /// Performs [`crate::run::agent::Output::LanePass`]: one pass, its
    /// end told to the schedule.
    pub(super) fn start_lane_pass(&self) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let scope = self.scope(None);
        wasm_bindgen_futures::spawn_local(blame::scoped(scope, async move {
            let more = match me.host_pass().await {
                Pass::Done { more } => more,
                Pass::NotDue | Pass::Failed | Pass::Abandoned => false,
            };
            // Then the spans (`traces.rs`), under the lane's backoff.
            let policy = match &me.jobs {
                Ok(Some(jobs)) => jobs.policy,
                _ => LanePolicy::default(),
            };
            let spans_left = me.ready().is_ok() && me.export_traces(&policy).await;
            me.schedule_side(Event::LanePassEnded {
                more: more || spans_left,
            });
        }));
    }

    /// One beat of a live tool's heartbeat: requests delivery processing
    /// when entries wait and no pass runs, and keeps the alarm armed at
    /// most `TOOL_HEARTBEAT_MS` ahead (earlier for the lane's retry), so a
    /// crash resumes the turn, and the lane, within about that.
    pub(super) async fn heartbeat_beat(&self) {
        if !self.machine.borrow().schedule().lane_running() {
            match delivery::pending(&self.sql, 1) {
                Ok(entries) if !entries.is_empty() => self.request_host_work(),
                Ok(_) => {}
                Err(e) => log_error(format!("host work lane: {e}")),
            }
        }
        let now = bindings::now_ms();
        let mut at = now + TOOL_HEARTBEAT_MS as i64;
        if let Ok(Some(lane)) = self.lane_deadline(now) {
            at = at.min(lane);
        }
        self.schedule_side(Event::Deadline(Some(at)));
    }

    /// The lane's deadline for the one alarm: none while a pass runs in
    /// this instance (it arms the alarm when it ends).
    pub(super) fn lane_deadline(&self, now: i64) -> Result<Option<i64>, ApiError> {
        if self.machine.borrow().schedule().lane_running() {
            return Ok(None);
        }
        let delivery = match self.lane_known_empty() {
            true => None,
            false => delivery::next_deadline(&self.sql, now)?,
        };
        Ok(crate::run::schedule::earliest(
            delivery,
            self.trace_deadline(now),
        ))
    }

    /// Performs one pass (see the module's documentation): the steps of
    /// a [`LanePass`], the whole under the host's deadline.
    async fn host_pass(&self) -> Pass {
        if self.ready().is_err() {
            return Pass::NotDue;
        }
        let tick = matches!(&self.jobs, Ok(Some(jobs)) if jobs.tick);
        let mut pass = match LanePass::start(&self.sql, bindings::now_ms(), tick) {
            Ok(Some(pass)) => pass,
            Ok(None) => return Pass::NotDue,
            Err(e) => {
                log_error(format!("host work lane: {e}"));
                return Pass::NotDue;
            }
        };
        let jobs = match &self.jobs {
            Err(why) => {
                self.pass_failed(pass, &LanePolicy::default(), why);
                return Pass::Failed;
            }
            Ok(None) => {
                // No hostJobs: acknowledged without delivering.
                return match self.acknowledge_undelivered(&mut pass) {
                    Ok(more) => {
                        // No await since the read: nothing was staged between.
                        self.lane.empty.set(!more);
                        Pass::Done { more }
                    }
                    Err(e) => {
                        log_error(format!("host work lane: {e}"));
                        Pass::NotDue
                    }
                };
            }
            Ok(Some(jobs)) => jobs,
        };
        let Ok(controller) = web_sys::AbortController::new() else {
            self.pass_failed(pass, &jobs.policy, "the pass could not be started");
            return Pass::Failed;
        };
        let (abort, aborted) = oneshot::channel();
        *self.lane.abort.borrow_mut() = Some(abort);
        let signal = controller.signal();
        let outcome = bounded(
            self.deliver_and_tick(jobs, &mut pass, &signal),
            jobs.timeout_ms,
            aborted,
            &controller,
        )
        .await;
        self.lane.abort.borrow_mut().take();
        let failure = match outcome.output {
            Some(Ok(more)) => {
                if let Err(e) = pass.succeeded(&self.sql) {
                    log_error(format!("host work lane: {e}"));
                }
                return Pass::Done { more };
            }
            _ if self.machine.borrow().closed().is_some() => return Pass::Abandoned,
            Some(Err(e)) if !outcome.timed_out => e,
            Some(Err(e)) => format!(
                "the pass did not finish within {} ms ({e})",
                jobs.timeout_ms
            ),
            None => format!("the pass did not finish within {} ms", jobs.timeout_ms),
        };
        self.pass_failed(pass, &jobs.policy, &failure);
        Pass::Failed
    }

    /// Performs the pass's steps: each batch to `deliver`, the `tick`.
    /// `Ok(more)`: entries are left past the pass's bound.
    async fn deliver_and_tick(
        &self,
        jobs: &HostJobs,
        pass: &mut LanePass,
        signal: &web_sys::AbortSignal,
    ) -> Result<bool, String> {
        loop {
            match pass.next(&self.sql).map_err(|e| e.to_string())? {
                LaneStep::Deliver(entries) => {
                    JsFuture::from(jobs.js.deliver(&entries_json(&entries), signal))
                        .await
                        .map_err(|e| format!("deliver: {}", error_message(&e)))?;
                    let last = entries.last().map_or(0, |e| e.seq);
                    pass.delivered(&self.sql, last).map_err(|e| e.to_string())?;
                }
                LaneStep::Tick => {
                    JsFuture::from(jobs.js.tick(signal))
                        .await
                        .map_err(|e| format!("tick: {}", error_message(&e)))?;
                }
                LaneStep::Done { more } => return Ok(more),
            }
        }
    }

    /// Without `hostJobs()`: acknowledges the pass's batches without
    /// delivering them. `Ok(more)`: entries are left.
    fn acknowledge_undelivered(&self, pass: &mut LanePass) -> Result<bool, crate::sql::SqlError> {
        loop {
            match pass.next(&self.sql)? {
                LaneStep::Deliver(entries) => {
                    pass.delivered(&self.sql, entries.last().map_or(0, |e| e.seq))?
                }
                LaneStep::Tick => {}
                LaneStep::Done { more } => return Ok(more),
            }
        }
    }

    /// Persists a failed pass's retry; the error is redacted with the
    /// host's secrets.
    fn pass_failed(&self, pass: LanePass, policy: &LanePolicy, error: &str) {
        let now = bindings::now_ms();
        let redacted = self.config.secrets.redact(error);
        let failed = match pass.failed(&self.sql, policy, now, &redacted) {
            Ok(failed) => failed,
            Err(e) => {
                log_error(format!("host work lane: {e}"));
                return;
            }
        };
        log_warn(format!(
            "host work pass failed (attempt {}, retry in {} ms): {}",
            failed.attempts,
            failed.retry_at.unwrap_or(now) - now,
            failed.error.as_deref().unwrap_or_default()
        ));
    }

    /// Closes the instance: starts no new pass of either kind, aborts the
    /// running host pass and stops the live turns (their durable claims
    /// resume at a later open, as after a crash), and waits for both the
    /// host pass and the run loop to end.
    pub(super) async fn close(&self, reason: &str) {
        let now = bindings::now_ms();
        self.machine.borrow_mut().close(reason.to_owned(), now);
        if let Some(abort) = self.lane.abort.borrow_mut().take() {
            let _ = abort.send(());
        }
        let live: Vec<_> = self.live.borrow().values().cloned().collect();
        for stopper in live {
            stopper.stop();
        }
        self.wake_loop();
        while self.machine.borrow().schedule().running()
            || self.machine.borrow().schedule().lane_running()
        {
            let _ = self.lane.next_end().await;
        }
    }
}

/// The test build's way to stage outbox entries without attention.
#[cfg(feature = "fault-injection")]
use super::ShiitakeCore;

#[cfg(feature = "fault-injection")]
#[wasm_bindgen]
impl ShiitakeCore {
    /// Test builds only: stages `body` (JSON) under `key` in one
    /// transition; `wake`: wake the lane as a request that staged entries
    /// does (`Effects::delivery`).
    #[wasm_bindgen(js_name = stageDelivery)]
    pub fn stage_delivery(&self, key: &str, body: &str, wake: bool) -> Result<(), JsValue> {
        let inner = &self.inner;
        inner.open().map_err(super::js_api_error)?;
        let body: serde_json::Value =
            serde_json::from_str(body).map_err(|e| JsValue::from_str(&e.to_string()))?;
        let now = bindings::now_ms();
        crate::sql::atomically(&inner.sql, || {
            let pending = delivery::pending_count(&inner.sql)?;
            delivery::room(pending, 1).map_err(crate::sql::SqlError::Engine)?;
            delivery::stage(&inner.sql, key, &body, now)
        })
        .map_err(|e| JsValue::from_str(&e.to_string()))?;
        inner.staged_delivery();
        if wake {
            inner.apply(crate::http::Effects {
                delivery: true,
                ..Default::default()
            });
        }
        Ok(())
    }
}
