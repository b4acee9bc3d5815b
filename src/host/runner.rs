//! The durable wake and the turns it runs. The schedule
//! (`run::schedule::Schedule`) decides when the loop claims due turns
//! (`run::reconcile`), how long it naps, when the claim budget hands over
//! to a fresh alarm, when the lane's and mail's passes run, and when the
//! one alarm is written or deleted (it remembers the alarm it asked for);
//! this file feeds it what happens and performs what it yields. Each turn is a [`Turn`] driver whose actions
//! this performs (publish, resolve the tools, call the model, run a tool
//! call); every decision about what a turn does next is the driver's.

use super::bindings::{self, log_error};
use super::stopper::Stopper;
use super::{blame, model, Inner};
use crate::extension::Extensions;
use crate::limits::LOOP_NAP_MS_MAX;
use crate::observe::Frame;
use crate::run::driver::{Action, Input, Turn, TurnPolicy};
use crate::run::schedule::{earliest, Event, Output};
use crate::run::{self, Step};
use crate::store::Store;
use futures::channel::oneshot;
use futures::future::{select, Either};
use futures::stream::{FuturesUnordered, StreamExt};
use wasm_bindgen::prelude::*;

impl Inner {
    /// Makes sure the run loop looks at the store soon: wakes a loop running
    /// in this instance, or starts one now. The durable wake comes first: the
    /// schedule sets the alarm to now (not awaited: the output gate holds the caller's
    /// answer until it is durable) and, when it fires while this loop runs,
    /// it joins the loop and stays unfinished until the loop ends, so a crash
    /// meanwhile has the platform retry it. Starting here saves a turn the
    /// alarm's hop. The loop's first pass (and a running loop's pass after a
    /// wake) waits one macrotask, so the caller's answer is handed to the
    /// runtime before the turn's synchronous work (reconciliation, the
    /// model request) runs: an idle Session's receipt no longer waits for
    /// its turn to start (`bench/sdk/compare.mjs`, "what starting the turn
    /// adds").
    pub(super) fn request_reconcile(&self) {
        if self.schedule.borrow().running() {
            self.wake_loop();
            // Host work is requested with every reconciliation (the alarm
            // requests it too).
            if self.has_host_jobs() {
                self.request_host_work();
            }
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        // Running from now on: a second request only wakes it, the alarm
        // joins it. The schedule sets the alarm to now first.
        self.schedule_side(Event::Start);
        // Every wake requests host work and mail delivery, as the alarm's
        // does; requested now, an alarm firing before the loop's first pass
        // finds them running and asks for no second pass.
        self.request_host_work();
        self.request_mail();
        let scope = self.scope(None);
        wasm_bindgen_futures::spawn_local(blame::scoped(scope, async move {
            bindings::sleep(0).await;
            if let Err(e) = me.drive_loop().await {
                log_error(format!("run loop: {}", bindings::error_message(&e)));
            }
        }));
    }

    /// Wakes the napping loop (it tells the schedule once the caller's
    /// answer has left), or tells the schedule now.
    pub(super) fn wake_loop(&self) {
        let napping = self.loop_wake.borrow_mut().take();
        match napping {
            Some(wake) => {
                let _ = wake.send(());
            }
            None => self.schedule_event(Event::Wake),
        }
    }

    /// Issues an alarm output of the schedule now; the future reports its
    /// completion (a failed write is told to the schedule).
    fn write_alarm(&self, output: &Output) -> Option<impl std::future::Future<Output = ()>> {
        let (write, what) = match output {
            Output::SetAlarm(at) => (self.sql.storage.set_alarm(*at), "setAlarm"),
            Output::DeleteAlarm => (self.sql.storage.delete_alarm(), "deleteAlarm"),
            _ => return None,
        };
        let me = self.me.clone();
        let set = matches!(output, Output::SetAlarm(_));
        Some(async move {
            if let Err(e) = write.await {
                log_error(format!("{what} failed: {}", bindings::error_message(&e)));
                if let Some(me) = me.upgrade().filter(|_| set) {
                    me.schedule_event(Event::AlarmWriteFailed);
                }
            }
        })
    }

    /// Tells the schedule the earliest durable deadline (it sets the
    /// alarm to it). With nothing due it writes nothing: a fired alarm is
    /// spent, and a stale one (a retry timer of a cancelled turn) only
    /// costs an empty pass, which is cheaper than a delete on every turn.
    /// No await between the read and the write, so a request's later
    /// `setAlarm(now)` is never overwritten.
    pub(super) fn arm_next_alarm(&self) {
        match self.next_deadline(bindings::now_ms()) {
            Ok(at) => self.schedule_side(Event::Deadline(at)),
            Err(e) => log_error(e),
        }
    }

    /// Performs [`Output::ArmAfterPass`]: what a host work or mail pass
    /// left. While the run loop runs, the loop arms the alarm when it
    /// ends, from its own reconciliation and the lane's and mail's
    /// deadlines: the pass then reads no turn.
    fn arm_after_pass(&self) {
        let now = bindings::now_ms();
        let left = if self.schedule.borrow().running() {
            self.lane_deadline(now)
                .and_then(|lane| Ok(earliest(lane, self.mail_deadline()?)))
        } else {
            self.next_deadline(now)
        };
        match left {
            Ok(at) => self.schedule_side(Event::PassLeft(at)),
            Err(e) => log_error(e),
        }
    }

    /// The earliest durable deadline: due turns and retries, extension
    /// timers and replays, the host work lane.
    pub(super) fn next_deadline(&self, now: i64) -> Result<Option<i64>, crate::error::ApiError> {
        let turns = run::next_deadline(Store::new(&self.sql), now, &|h| self.is_live(h))?;
        let extensions = match self.extensions() {
            Some(ext) => ext.next_deadline(self.store(), now)?,
            None => None,
        };
        Ok(earliest(
            earliest(turns, extensions),
            earliest(self.lane_deadline(now)?, self.mail_deadline()?),
        ))
    }

    pub(super) async fn alarm(&self) -> Result<(), JsValue> {
        let joined = self.schedule.borrow().running();
        // Spent; with no loop running, one starts.
        self.schedule_event(Event::AlarmFired);
        if let Err(e) = self.ready() {
            // Nothing can run on a store this build refuses; stop waking.
            if !joined {
                self.schedule_event(Event::Failed);
            }
            log_error(e);
            return Ok(());
        }
        // Every wake requests host work and mail delivery beside
        // reconciliation; both run on their own, never holding this alarm.
        self.request_host_work();
        self.request_mail();
        if joined {
            // A request (or an earlier invocation) is running the turns:
            // this wake joins it and ends with it. It brings the loop no
            // news (requests wake it, its own reconciliation found every
            // deadline, extensions are looked at on every pass), so it
            // costs no reconciliation.
            while self.schedule.borrow().running() {
                let _ = self.lane.next_end().await;
            }
            return Ok(());
        }
        self.drive_loop().await
    }

    /// Runs the loop (started by the caller) and puts the work
    /// left for later on the alarm. An error leaves the earliest deadline
    /// armed: the platform retries a failed alarm, a request's loop has only
    /// the alarm.
    async fn drive_loop(&self) -> Result<(), JsValue> {
        let result = self.run_loop().await;
        self.lane.ended();
        match result {
            Ok(write) => {
                if let Some(write) = write {
                    write.await;
                }
                Ok(())
            }
            Err(e) => {
                self.arm_next_alarm();
                Err(e)
            }
        }
    }

    /// Performs the schedule's loop (`run::schedule`) until it ends: feeds
    /// it what happens (a turn ended, a wake, its nap's end) and performs
    /// what it yields. Returns the alarm write (or delete) the schedule
    /// asked for with the loop's end, issued in the same synchronous step,
    /// so a request arriving afterwards sets its own alarm and is never
    /// overwritten by a later deadline.
    async fn run_loop(&self) -> Result<Option<impl std::future::Future<Output = ()>>, JsValue> {
        let mut turns = FuturesUnordered::new();
        self.schedule_event(Event::Begin);
        loop {
            loop {
                // Not borrowed while performing: performing feeds it.
                let next = self.schedule.borrow_mut().poll();
                let Some(output) = next else { break };
                match output {
                    Output::Reconcile => {
                        let reconciled = self.reconcile();
                        if reconciled.is_err() {
                            self.schedule_event(Event::Failed);
                        }
                        self.schedule_event(reconciled?);
                    }
                    Output::StartTurn(step) => {
                        let stopper = match self.start_live(&step.command_id, &step.session_id) {
                            Ok(stopper) => stopper,
                            Err(e) => {
                                self.schedule_event(Event::Failed);
                                return Err(e);
                            }
                        };
                        let scope = self.scope(Some(&step.session_id));
                        turns.push(blame::scoped(scope, self.run_turn(step, stopper)));
                    }
                    Output::Publish { session_id, event } => {
                        self.publish_event(&session_id, &event)
                    }
                    // A delegated command's reply is staged when it settles.
                    Output::MailStaged => self.mail_after_transition(),
                    Output::ReadDeadlines => {
                        // None while the lane's or mail's pass runs: each
                        // arms the alarm when it ends.
                        let deadlines = self
                            .lane_deadline(bindings::now_ms())
                            .and_then(|lane| Ok(earliest(lane, self.mail_deadline()?)));
                        if deadlines.is_err() {
                            self.schedule_event(Event::Failed);
                        }
                        let deadlines = deadlines.map_err(|e| JsValue::from_str(&e.to_string()))?;
                        self.schedule_event(Event::Deadlines(deadlines));
                    }
                    Output::Idle => {
                        // Its alarm output follows it at once.
                        let next = self.schedule.borrow_mut().poll_side();
                        let write = next.and_then(|alarm| self.write_alarm(&alarm));
                        // Anything else beside the loop goes as usual.
                        while let Some(side) = self.schedule.borrow_mut().poll_side() {
                            self.perform_side(side);
                        }
                        return Ok(write);
                    }
                    side => self.perform_side(side),
                }
            }
            // Sleep until a turn ends, a request wakes the loop, or the
            // schedule's nap ends. No await between the claim and
            // registering the wake: a wake cannot fall in between.
            let until = self.schedule.borrow().poll_timeout();
            let nap_ms = until.map_or(LOOP_NAP_MS_MAX, |at| (at - bindings::now_ms()).max(0));
            let (wake_tx, wake_rx) = oneshot::channel();
            *self.loop_wake.borrow_mut() = Some(wake_tx);
            let woke = select(
                turns.next(),
                select(wake_rx, bindings::sleep(nap_ms as u64)),
            )
            .await;
            self.loop_wake.borrow_mut().take();
            let event = match woke {
                Either::Left((ended, _)) => Event::TurnEnded {
                    left_no_work: ended == Some(true),
                },
                Either::Right((Either::Left(_), _)) => {
                    // A request woke the loop: its answer leaves first.
                    drop(woke);
                    bindings::sleep(0).await;
                    Event::Wake
                }
                Either::Right((Either::Right(_), _)) => Event::Timeout,
            };
            self.schedule_event(event);
        }
    }

    /// Tells the schedule what happened; a settled hook that moved
    /// extension timers, taken on every event, makes its next pass claim.
    pub(super) fn schedule_event(&self, event: Event) {
        let now = bindings::now_ms();
        let mut schedule = self.schedule.borrow_mut();
        if self.extensions().is_some_and(Extensions::take_rearm) {
            schedule.handle(Event::Rearm, now);
        }
        schedule.handle(event, now);
    }

    /// Tells the schedule what happened to the lane or mail, and performs
    /// what it yields (their passes: no loop output follows such events).
    pub(super) fn schedule_side(&self, event: Event) {
        self.schedule_event(event);
        loop {
            // The loop's outputs stay queued for the loop.
            let next = self.schedule.borrow_mut().poll_side();
            let Some(output) = next else { break };
            self.perform_side(output);
        }
    }

    /// Performs the lane's and mail's outputs.
    fn perform_side(&self, output: Output) {
        match output {
            Output::LanePass => self.start_lane_pass(),
            Output::LaneEnded => self.lane.ended(),
            Output::MailPass => self.start_mail_pass(),
            Output::ArmAfterPass => {
                let Some(me) = self.me.upgrade() else { return };
                let scope = self.scope(None);
                wasm_bindgen_futures::spawn_local(blame::scoped(scope, async move {
                    me.arm_after_pass()
                }));
            }
            Output::SetAlarm(_) | Output::DeleteAlarm => {
                if let Some(write) = self.write_alarm(&output) {
                    wasm_bindgen_futures::spawn_local(write);
                }
            }
            // Its discriminant, not its `Debug`: that would link the
            // formatting of every type an output carries.
            loop_output => log_error(format!(
                "a loop output outside the loop: {:?}",
                std::mem::discriminant(&loop_output)
            )),
        }
    }

    /// Performs [`Output::Reconcile`]: the due extension timers and
    /// replays, then the claim (`run::reconcile`); the extensions' next
    /// deadline joins the claim's.
    fn reconcile(&self) -> Result<Event, JsValue> {
        self.extension_pass();
        let claimed = self.with_ctx(|ctx| {
            run::reconcile(
                ctx,
                &|h| self.is_live(h),
                &|h| self.fresh.borrow().contains_key(h),
                self.config.attempts(),
            )
        });
        let run::Reconciled {
            steps,
            settled,
            next_deadline,
            running,
        } = claimed.map_err(|e| JsValue::from_str(&e.to_string()))?;
        self.forget_settled_fresh(&running);
        let extensions = match self.extensions() {
            Some(ext) => ext
                .next_deadline(self.store(), bindings::now_ms())
                .map_err(|e| JsValue::from_str(&e.to_string()))?,
            None => None,
        };
        Ok(Event::Reconciled {
            steps,
            settled,
            later: earliest(next_deadline, extensions),
        })
    }

    /// Holds turns that start at the attempt they hold (`Inner::fresh`),
    /// `(head, session)`: a trap report names them.
    pub(super) fn hold_fresh(&self, turns: impl IntoIterator<Item = (String, String)>) {
        for (head, session) in turns {
            blame::hold(&self.agent, &head, &session);
            self.fresh.borrow_mut().insert(head, session);
        }
    }

    /// A fresh turn will not start here (stopped, or settled meanwhile).
    pub(super) fn drop_fresh(&self, head: &str) {
        let held = self.fresh.borrow_mut().remove(head).is_some();
        if held && !self.is_live(head) {
            blame::release(&self.agent, head);
        }
    }

    /// Drops the fresh turns that are no longer running (`running`: the
    /// heads of every running turn), so none is held for ever.
    fn forget_settled_fresh(&self, running: &[String]) {
        let gone: Vec<String> = self
            .fresh
            .borrow()
            .keys()
            .filter(|head| !running.contains(head))
            .cloned()
            .collect();
        for head in gone {
            self.drop_fresh(&head);
        }
    }

    /// Registers a turn as live in this instance: a cancel can stop it, a
    /// trap report names it.
    fn start_live(&self, head: &str, session: &str) -> Result<Stopper, JsValue> {
        self.fresh.borrow_mut().remove(head);
        let stopper = Stopper::new()?;
        self.live
            .borrow_mut()
            .insert(head.to_owned(), stopper.clone());
        blame::hold(&self.agent, head, session);
        Ok(stopper)
    }

    /// A turn of this instance ended (or handed over to the next one).
    fn end_live(&self, head: &str) {
        self.live.borrow_mut().remove(head);
        blame::release(&self.agent, head);
    }

    /// Performs one turn's driver until it is done; true when the turn
    /// left no work behind ([`Turn::left_no_work`]).
    async fn run_turn(&self, step: Step, mut stopper: Stopper) -> bool {
        let session = step.session_id.clone();
        let mut turn = Turn::new(step, TurnPolicy::new(self.config.retry));
        // The model of the running turn, resolved at its start (its first
        // offer): a change applies to the next turn. Keyed by its head.
        let mut target: Option<(String, super::models::Target)> = None;
        loop {
            let Some(action) = turn.poll() else {
                // Waiting with nothing to do: the driver's bug. The claim is
                // durable; the next reconciliation resumes the turn.
                log_error("turn driver idle without an action");
                break;
            };
            let input = match action {
                Action::Publish(event) => {
                    self.publish_event(&session, &event);
                    continue;
                }
                Action::Next { ended, started } => {
                    self.mail_after_transition();
                    self.run_ended(&ended);
                    self.end_live(&ended);
                    match self.start_live(&started, &session) {
                        Ok(next) => stopper = next,
                        // The claim is durable: the next alarm pass resumes
                        // it as an orphan.
                        Err(_) => return false,
                    }
                    continue;
                }
                Action::Fault(e) => {
                    log_error(e);
                    continue;
                }
                Action::Done => break,
                Action::Offer => {
                    let head = turn.head().to_owned();
                    let resolved = match target.take().filter(|(h, _)| *h == head) {
                        Some((_, kept)) => Ok(kept),
                        None => self.resolve_model(&session, turn.head_meta()).await,
                    };
                    match resolved {
                        Ok(resolved) => {
                            let offer = self.offer(&session, &head).await.map(|mut offer| {
                                offer.window = resolved.window;
                                offer.compaction_prompt = resolved.compaction_prompt.clone();
                                offer
                            });
                            target = Some((head, resolved));
                            Input::Offered(offer)
                        }
                        // Fails the turn before any model call, saying why.
                        Err(why) => Input::Offered(Err(why)),
                    }
                }
                Action::CallModel {
                    context,
                    tools,
                    system,
                } => {
                    let head = turn.head().to_owned();
                    let Some((_, resolved)) = target.as_ref().filter(|(h, _)| *h == head) else {
                        // The driver offers before every call: a bug.
                        log_error("model call without a resolved model");
                        break;
                    };
                    // A summary call brings its own system prompt.
                    let instructions = system.or_else(|| self.instructions(&session, &head));
                    let on_delta = |text: &str| {
                        let delta = Frame::Delta {
                            command_id: head.clone(),
                            text: text.to_owned(),
                        };
                        self.publish(&session, "frame", &delta);
                    };
                    model::call(
                        &self.config,
                        resolved,
                        instructions.as_deref(),
                        &context,
                        &tools,
                        &stopper,
                        &on_delta,
                    )
                    .await
                }
                Action::RunTool(run) => self.run_tool(&session, *run, &stopper).await,
            };
            let input = if stopper.is_stopped() {
                Input::Stopped
            } else {
                input
            };
            self.with_ctx(|ctx| turn.handle(ctx, input));
            // Settled hooks ran in that write.
            self.publish_projections();
        }
        // The settling write may have staged a delegated command's reply.
        self.mail_after_transition();
        self.run_ended(turn.head());
        self.end_live(turn.head());
        turn.left_no_work()
    }

    /// The model's instructions for a call of the run headed by `head`: the
    /// host's, then the running extensions' prompt sections (read outside
    /// any transition; a builder that fails is left out and logged).
    fn instructions(&self, session: &str, head: &str) -> Option<String> {
        let own = self.config.instructions.clone();
        let Some(ext) = self.extensions() else {
            return own;
        };
        if ext.roster().is_empty() {
            return own;
        }
        let (sections, errors) = ext.prompt_sections(self.store(), session, head);
        for e in errors {
            log_error(e);
        }
        if sections.is_empty() {
            return own;
        }
        let mut parts: Vec<String> = own.into_iter().collect();
        parts.extend(sections);
        Some(parts.join("\n\n"))
    }
}
