//! The durable wake and the turns it runs, performed. The Agent machine
//! (`run::agent::Agent`) decides everything: when the loop claims due
//! turns, how long it naps, when the lane's and mail's passes run, when
//! the one alarm is written, and every step of every running turn. This
//! file feeds it what happens and performs what it yields, in one `match`
//! ([`Inner::act`]): the turns' offers, model calls and tool runs
//! concurrently, each finished one fed back as its turn's input.

use super::bindings::{self, log_error};
use super::models::Target;
use super::stopper::Stopper;
use super::{blame, model, Inner};
use crate::extension::Extensions;
use crate::limits::LOOP_NAP_MS_MAX;
use crate::observe::Frame;
use crate::run;
use crate::run::agent::{Event, Output, TurnId};
use crate::run::driver::Input;
use crate::run::schedule::earliest;
use crate::store::Store;
use futures::channel::oneshot;
use futures::future::{select, Either, LocalBoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use std::future::Future;
use std::rc::Rc;
use wasm_bindgen::prelude::*;

/// The loop's performs in flight, each answering its turn's next input.
#[derive(Default)]
struct Performing<'a> {
    pending: FuturesUnordered<LocalBoxFuture<'a, Performed>>,
    /// Each running turn's model, resolved at its first offer, with the
    /// head it was resolved for (a change applies to the next command).
    targets: Vec<(TurnId, (String, Rc<Target>))>,
}

/// A finished perform: the turn's input, the model its offer resolved,
/// the span it ended (traced hosts only).
struct Performed {
    turn: TurnId,
    input: Input,
    target: Option<(String, Rc<Target>)>,
    span: Option<String>,
}

/// What a perform's work answers (see [`Performed`]).
type Outcome = (Input, Option<(String, Rc<Target>)>, Option<String>);

impl<'a> Performing<'a> {
    /// Takes the model kept for `turn`.
    fn take_target(&mut self, turn: TurnId) -> Option<(String, Rc<Target>)> {
        let at = self.targets.iter().position(|(t, _)| *t == turn)?;
        Some(self.targets.swap_remove(at).1)
    }

    /// Performs `work` for `turn`; the host still checks the turn's stop
    /// switch: stopped meanwhile, its outcome is dropped.
    fn push(&mut self, turn: TurnId, stopper: Stopper, work: impl Future<Output = Outcome> + 'a) {
        self.pending.push(Box::pin(async move {
            let (input, target, span) = work.await;
            let input = match stopper.is_stopped() {
                true => Input::Stopped,
                false => input,
            };
            Performed {
                turn,
                input,
                target,
                span,
            }
        }));
    }
}

/// What ended the loop's wait.
enum Woke {
    Performed(Performed),
    Wake,
    Timeout,
}

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
        if self.machine.borrow().schedule().running() {
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
    fn write_alarm(&self, output: &Output) -> Option<LocalBoxFuture<'static, ()>> {
        let (write, what) = match output {
            Output::SetAlarm(at) => (self.sql.storage.set_alarm(*at), "setAlarm"),
            Output::DeleteAlarm => (self.sql.storage.delete_alarm(), "deleteAlarm"),
            _ => return None,
        };
        let me = self.me.clone();
        let set = matches!(output, Output::SetAlarm(_));
        Some(Box::pin(async move {
            if let Err(e) = write.await {
                log_error(format!("{what} failed: {}", bindings::error_message(&e)));
                if let Some(me) = me.upgrade().filter(|_| set) {
                    me.schedule_event(Event::AlarmWriteFailed);
                }
            }
        }))
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

    /// Performs [`Output::ReadPassLeft`]: what a host work or mail pass
    /// left, every durable deadline or (the machine's choice) only the
    /// lane's and mail's.
    fn read_pass_left(&self, everything: bool) {
        let now = bindings::now_ms();
        let left = match everything {
            true => self.next_deadline(now),
            false => self
                .lane_deadline(now)
                .and_then(|lane| Ok(earliest(lane, self.mail_deadline()?))),
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
        let joined = self.machine.borrow().schedule().running();
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
            while self.machine.borrow().schedule().running() {
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

    /// Performs the Agent machine's loop (`run::agent`) until it ends:
    /// feeds it what happens (a perform finished, a wake, its nap's end)
    /// and performs what it yields, the turns' offers, model calls and tool
    /// runs concurrently. Returns the alarm write (or delete) the machine
    /// asked for with the loop's end, issued in the same synchronous step,
    /// so a request arriving afterwards sets its own alarm and is never
    /// overwritten by a later deadline.
    async fn run_loop(&self) -> Result<Option<LocalBoxFuture<'static, ()>>, JsValue> {
        let mut performing = Performing::default();
        self.schedule_event(Event::Begin);
        loop {
            loop {
                // Not borrowed while performing: performing feeds it.
                let next = self.machine.borrow_mut().poll();
                let Some(output) = next else { break };
                if let Some(write) = self.act(output, Some(&mut performing))? {
                    return Ok(write);
                }
            }
            // Sleep until a perform finishes, a request wakes the loop, or
            // the machine's nap ends. No await between the claim and
            // registering the wake: a wake cannot fall in between.
            let until = self.machine.borrow().poll_timeout();
            let nap_ms = until.map_or(LOOP_NAP_MS_MAX, |at| (at - bindings::now_ms()).max(0));
            let (wake_tx, wake_rx) = oneshot::channel();
            *self.loop_wake.borrow_mut() = Some(wake_tx);
            let pending = &mut performing.pending;
            let performed = async {
                match pending.is_empty() {
                    true => futures::future::pending().await,
                    false => pending.next().await,
                }
            };
            let woke = match select(
                Box::pin(performed),
                select(wake_rx, bindings::sleep(nap_ms as u64)),
            )
            .await
            {
                Either::Left((Some(performed), _)) => Woke::Performed(performed),
                Either::Left((None, _)) | Either::Right((Either::Left(_), _)) => Woke::Wake,
                Either::Right((Either::Right(_), _)) => Woke::Timeout,
            };
            self.loop_wake.borrow_mut().take();
            match woke {
                Woke::Performed(Performed {
                    turn,
                    input,
                    target,
                    span,
                }) => {
                    if let Some(target) = target {
                        performing.take_target(turn);
                        performing.targets.push((turn, target));
                    }
                    self.turn_input_with(turn, input, span);
                }
                Woke::Wake => {
                    // A request woke the loop: its answer leaves first.
                    bindings::sleep(0).await;
                    self.schedule_event(Event::Wake);
                }
                Woke::Timeout => self.schedule_event(Event::Timeout),
            }
        }
    }

    /// Performs one output of the machine: the one place the host acts on
    /// its decisions. `performing`: the loop's performs in flight (`None`
    /// outside the loop, which performs only [`Output::is_side`] ones).
    /// Answers the loop's end, with its alarm write.
    fn act<'a>(
        &'a self,
        output: Output,
        performing: Option<&mut Performing<'a>>,
    ) -> Result<Option<Option<LocalBoxFuture<'static, ()>>>, JsValue> {
        match (output, performing) {
            (Output::Reconcile, _) => {
                let reconciled = self.reconcile();
                if reconciled.is_err() {
                    self.schedule_event(Event::Failed);
                }
                self.schedule_event(reconciled?);
            }
            (Output::Publish { session_id, event }, _) => self.publish_event(&session_id, &event),
            (Output::MailStaged, _) => self.mail_after_transition(),
            (Output::ReadDeadlines, _) => {
                // None while the lane's or mail's pass runs: each arms the
                // alarm when it ends.
                let deadlines = self
                    .lane_deadline(bindings::now_ms())
                    .and_then(|lane| Ok(earliest(lane, self.mail_deadline()?)));
                if deadlines.is_err() {
                    self.schedule_event(Event::Failed);
                }
                let deadlines = deadlines.map_err(|e| JsValue::from_str(&e.to_string()))?;
                self.schedule_event(Event::Deadlines(deadlines));
            }
            (Output::Idle, _) => {
                // Its alarm output follows it at once; anything else
                // beside the loop goes as usual.
                let mut write = None;
                loop {
                    // Not borrowed while performing: performing feeds it.
                    let next = self.machine.borrow_mut().poll_side();
                    let Some(side) = next else { break };
                    match side {
                        Output::SetAlarm(_) | Output::DeleteAlarm if write.is_none() => {
                            write = self.write_alarm(&side)
                        }
                        side => {
                            self.act(side, None)?;
                        }
                    }
                }
                return Ok(Some(write));
            }
            (Output::Hold { head, session_id }, _) => blame::hold(&self.agent, &head, &session_id),
            (Output::Release { head }, _) => blame::release(&self.agent, &head),
            (Output::Ended { turn, head }, performing) => {
                if let Some(performing) = performing {
                    performing.take_target(turn);
                }
                self.run_ended(&head);
                self.end_live(&head);
            }
            (
                Output::Live {
                    turn,
                    head,
                    session_id,
                },
                Some(_),
            ) => {
                if self.start_live(&head, &session_id).is_err() {
                    // The claim is durable: the next claim resumes it.
                    self.turn_input(turn, Input::Stopped);
                }
            }
            (
                Output::Offer {
                    turn,
                    session_id,
                    head,
                    meta,
                },
                Some(performing),
            ) => {
                let Some(stopper) = self.stopper(turn, &head) else {
                    return Ok(None);
                };
                // The model of the running turn, resolved at its start (its
                // first offer): a change applies to the next turn.
                let kept = performing.take_target(turn).filter(|(h, _)| *h == head);
                let scope = self.scope(Some(&session_id));
                let offered = async move {
                    let resolved = match kept {
                        Some((_, kept)) => Ok(kept),
                        None => self
                            .resolve_model(&session_id, meta.as_deref())
                            .await
                            .map(Rc::new),
                    };
                    match resolved {
                        Ok(resolved) => {
                            let offer = self.offer(&session_id, &head).await.map(|mut offer| {
                                offer.window = resolved.window;
                                offer.compaction_prompt = resolved.compaction_prompt.clone();
                                offer.instructions_bytes = self
                                    .config
                                    .instructions
                                    .as_ref()
                                    .map_or(0, |i| i.len() as u64);
                                offer
                            });
                            (Input::Offered(offer), Some((head, resolved)), None)
                        }
                        // Fails the turn before any model call, saying why.
                        Err(why) => (Input::Offered(Err(why)), None, None),
                    }
                };
                performing.push(turn, stopper, blame::scoped(scope, offered));
            }
            (
                Output::CallModel {
                    turn,
                    session_id,
                    head,
                    context,
                    tools,
                    system,
                },
                Some(performing),
            ) => {
                let Some(stopper) = self.stopper(turn, &head) else {
                    return Ok(None);
                };
                let target = performing
                    .targets
                    .iter()
                    .find(|(t, (h, _))| *t == turn && *h == head);
                let Some(resolved) = target.map(|(_, (_, t))| Rc::clone(t)) else {
                    // The driver offers before every call: a bug. The claim
                    // is durable; the next claim resumes the turn.
                    log_error("model call without a resolved model");
                    self.turn_input(turn, Input::Stopped);
                    return Ok(None);
                };
                // A summary call brings its own system prompt.
                let instructions = system.or_else(|| self.instructions(&session_id, &head));
                let scope = self.scope(Some(&session_id));
                let called_stopper = stopper.clone();
                let called = async move {
                    let on_delta = |text: &str| {
                        let delta = Frame::Delta {
                            command_id: head.clone(),
                            text: text.to_owned(),
                        };
                        self.publish(&session_id, "frame", &delta);
                    };
                    let cache_key = crate::model::prompt_cache_key(&self.agent, &session_id);
                    let prompt = model::Prompt {
                        instructions: instructions.as_deref(),
                        context: &context,
                        tools: &tools,
                        cache_key: &cache_key,
                    };
                    let start = bindings::now_ms();
                    // A trap report names the call in flight (cut off by a reset).
                    let calling = blame::calling(&self.agent, &head);
                    let input =
                        model::call(&self.config, &resolved, &prompt, &called_stopper, &on_delta)
                            .await;
                    drop(calling);
                    let spec = &resolved.resolved.spec;
                    let span = self.chat_span(&head, spec, start, &input);
                    (input, None, span)
                };
                performing.push(turn, stopper, blame::scoped(scope, called));
            }
            (
                Output::RunTool {
                    turn,
                    session_id,
                    head,
                    run,
                },
                Some(performing),
            ) => {
                let Some(stopper) = self.stopper(turn, &head) else {
                    return Ok(None);
                };
                let scope = self.scope(Some(&session_id));
                let run_stopper = stopper.clone();
                let ran = async move {
                    let call = self.traced().then(|| run.call.clone());
                    let start = bindings::now_ms();
                    let input = self.run_tool(&session_id, *run, &run_stopper).await;
                    let span = call.and_then(|call| self.tool_span(&head, &call, start, &input));
                    (input, None, span)
                };
                performing.push(turn, stopper, blame::scoped(scope, ran));
            }
            (Output::Projections, _) => self.publish_projections(),
            (Output::Fault(e), _) => log_error(e),
            (Output::LanePass, _) => self.start_lane_pass(),
            (Output::LaneEnded, _) => self.lane.ended(),
            (Output::MailPass, _) => self.start_mail_pass(),
            (Output::ReadPassLeft { everything }, _) => self.read_pass_left(everything),
            (output @ (Output::SetAlarm(_) | Output::DeleteAlarm), _) => {
                if let Some(write) = self.write_alarm(&output) {
                    wasm_bindgen_futures::spawn_local(write);
                }
            }
            // Its discriminant, not its `Debug`: that would link the
            // formatting of every type an output carries.
            (loop_output, None) => log_error(format!(
                "a loop output outside the loop: {:?}",
                std::mem::discriminant(&loop_output)
            )),
        }
        Ok(None)
    }

    /// Feeds a turn the outcome of its action; its transition runs here,
    /// in its Session's scope (a trap in it is the Session's).
    fn turn_input(&self, turn: TurnId, input: Input) {
        self.turn_input_with(turn, input, None);
    }

    /// [`Inner::turn_input`] with the span the action ended, written by
    /// the transition that records its outcome.
    fn turn_input_with(&self, turn: TurnId, input: Input, span: Option<String>) {
        let session = self.machine.borrow().session_id(turn).map(str::to_owned);
        let Some(session) = session else { return };
        let _scope = blame::enter(self.scope(Some(&session)));
        let now = bindings::now_ms();
        // Borrowed through the transition: its settled hooks reach the
        // store, never the machine.
        self.with_ctx(|ctx| {
            ctx.spans.extend(span);
            self.machine.borrow_mut().handle_turn(ctx, turn, input, now)
        });
        // A settled hook of that transition that moved extension timers
        // makes the next pass claim: told before the turn's end counts.
        self.rearm(now);
    }

    /// The stop switch of the turn live under `head`; without one (its
    /// start failed) the turn is told it stopped.
    fn stopper(&self, turn: TurnId, head: &str) -> Option<Stopper> {
        let stopper = self.live.borrow().get(head).cloned();
        if stopper.is_none() {
            self.turn_input(turn, Input::Stopped);
        }
        stopper
    }

    /// Tells the machine what happened; a settled hook that moved
    /// extension timers, taken on every event, makes its next pass claim.
    pub(super) fn schedule_event(&self, event: Event) {
        let now = bindings::now_ms();
        self.rearm(now);
        self.machine.borrow_mut().handle(event, now);
    }

    fn rearm(&self, now: i64) {
        if self.extensions().is_some_and(Extensions::take_rearm) {
            self.machine.borrow_mut().handle(Event::Rearm, now);
        }
    }

    /// Tells the machine what happened outside the loop, and performs the
    /// side outputs it yields (the loop's stay queued for the loop).
    pub(super) fn schedule_side(&self, event: Event) {
        self.schedule_event(event);
        self.perform_side();
    }

    /// Performs the machine's side outputs ([`Output::is_side`]).
    fn perform_side(&self) {
        loop {
            let next = self.machine.borrow_mut().poll_side();
            let Some(output) = next else { break };
            if let Err(e) = self.act(output, None) {
                log_error(bindings::error_message(&e));
            }
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
                &|h| self.machine.borrow().is_fresh(h),
                self.config.attempts(),
                &self.config.budget,
            )
        });
        let run::Reconciled {
            steps,
            settled,
            next_deadline,
            running,
        } = claimed.map_err(|e| JsValue::from_str(&e.to_string()))?;
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
            running,
        })
    }

    /// Holds turns that start at the attempt they hold, `(head, session)`
    /// (the machine's): a trap report names them.
    /// Performs [`run::count_cut_off`] for the turns a wasm reset spared
    /// (`(head, session, cut off)`).
    pub(super) fn count_cut_off(&self, spared: &[(String, String, bool)]) {
        let cut: Vec<(&str, &str)> = spared
            .iter()
            .filter(|(_, _, cut)| *cut)
            .map(|(head, session, _)| (head.as_str(), session.as_str()))
            .collect();
        if cut.is_empty() {
            return;
        }
        if let Err(e) = self
            .ready()
            .and_then(|()| self.with_ctx(|ctx| run::count_cut_off(ctx, &cut)))
        {
            log_error(e);
        }
    }

    pub(super) fn hold_fresh(&self, turns: impl IntoIterator<Item = (String, String)>) {
        self.machine.borrow_mut().hold_fresh(turns);
        self.perform_side();
    }

    /// A fresh turn will not start here (stopped, or settled meanwhile).
    pub(super) fn drop_fresh(&self, head: &str) {
        self.machine.borrow_mut().drop_fresh(head);
        self.perform_side();
    }

    /// Registers a turn as live in this instance: a cancel can stop it, a
    /// trap report names it.
    fn start_live(&self, head: &str, session: &str) -> Result<(), JsValue> {
        let stopper = Stopper::new()?;
        self.live
            .borrow_mut()
            .insert(head.to_owned(), stopper.clone());
        blame::hold(&self.agent, head, session);
        Ok(())
    }

    /// A turn of this instance ended (or handed over to the next one).
    fn end_live(&self, head: &str) {
        self.live.borrow_mut().remove(head);
        blame::release(&self.agent, head);
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
