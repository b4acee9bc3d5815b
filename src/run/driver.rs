//! The turn driver: the whole sequence of a turn as a sans-IO state
//! machine, in the manner of quinn-proto's `Connection`. The host feeds it
//! [`Input`]s (the tools resolved, the model's answer or failure, a tool
//! call's outcome, a stop) together with a [`Ctx`] over the store, and
//! carries out the [`Action`]s that [`Turn::poll`] yields: publish an event,
//! resolve the tools to offer, call the model, run a tool call. Every
//! decision of a turn lives here: what follows an answer, a failure or a
//! tool result; what a call that cannot run answers; which turn of the
//! Session runs next. The host decides nothing, so native tests drive whole
//! turns (`tests/driver.rs`).
//!
//! Persist, then publish: every transition commits before the events it
//! produced are queued.
//!
//! Invariants:
//! - exactly one input is awaited at a time ([`Turn::awaiting`]); an input
//!   the driver is not waiting for is a bug of the host and is ignored;
//! - after [`Action::Done`] nothing more is yielded;
//! - every store write is one transition of `run` guarded by the attempt,
//!   so a driver whose attempt went stale writes nothing.

use super::compaction::{self, ContextWindow};
#[cfg(feature = "compaction")]
use super::compaction::{Recorded, Summarised};
use super::tools::{
    self as run_tools, CallsOutcome, OpenCall, Recovery, ResultOutcome, ToolOutput,
};
use super::{
    complete_step, fail_attempt, record_call, Attempts, FailOutcome, Failure, Settlement, Step,
    StepOutcome, Window, Work,
};
use crate::budget;
use crate::capability::door::{Tool, Toolset};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::mcp::Unavailable;
use crate::model::{Answer, ModelError, ModelItem, RetryPolicy, ToolSpec};
use crate::observe::ToolPhase;
use crate::observe::{Event, Frame, RuntimeError};
use crate::run::live::{tool_frame, ProgressGate};
use crate::run::operation::{CallRef, OperationCall};
use crate::transcript::Trigger;
use crate::usage::Outcome;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::VecDeque;
use std::rc::Rc;

/// A stored message (its stored JSON) as a `message` frame.
fn message_frame(body: String) -> Option<Frame> {
    RawValue::from_string(body)
        .ok()
        .map(|message| Frame::Message { message })
}

/// The events of settlements: each after the messages its write appended
/// (the closing `tool` messages of calls left open).
pub fn settled_events(settled: Vec<Settlement>) -> Vec<Event> {
    let mut events = Vec::new();
    for mut settlement in settled {
        for message in std::mem::take(&mut settlement.appended) {
            events.extend(message_frame(message).map(Event::Frame));
        }
        events.push(Event::Frame(Frame::Settled { settlement }));
    }
    events
}

/// The host's retry rules, as a turn needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnPolicy {
    pub attempts: Attempts,
    pub retry: RetryPolicy,
    /// The budgets the host configures (`budget.rs`).
    pub budget: budget::Limits,
    /// Spans are recorded (the host's `telemetry()`): the driver writes
    /// those of what it decides alone (a tool call answered without
    /// running); the host times the rest.
    pub traced: bool,
}

impl TurnPolicy {
    pub fn new(retry: RetryPolicy) -> TurnPolicy {
        TurnPolicy {
            attempts: Attempts {
                max: retry.attempts_max,
            },
            retry,
            budget: budget::Limits::NONE,
            traced: false,
        }
    }

    pub fn with_traces(self, traced: bool) -> TurnPolicy {
        TurnPolicy { traced, ..self }
    }

    pub fn with_budget(self, budget: budget::Limits) -> TurnPolicy {
        TurnPolicy { budget, ..self }
    }
}

/// What the host offers for the next model call: the tools, and what it
/// states of the turn's model.
#[derive(Debug, Clone, Default)]
pub struct Offer {
    /// `None`: the host offers no tools.
    pub toolset: Option<Rc<Toolset>>,
    /// What the host configured and cannot offer (MCP servers, tools left
    /// out), said at the turn's start.
    pub unavailable: Vec<Unavailable>,
    /// The model's context window and compaction trigger; `None`: none
    /// stated (no automatic compaction; the context's bounds still hold).
    pub window: Option<ContextWindow>,
    /// The host's compaction prompt; `None`: [`compaction::DEFAULT_PROMPT`].
    pub compaction_prompt: Option<Rc<str>>,
    /// Bytes of the host's own instructions, which every call sends beside
    /// its context (a budget's estimate of the call counts them).
    pub instructions_bytes: u64,
}

/// The estimated input tokens of a model request: its context's text and
/// tool calls, the tools offered and the system text, at
/// `CONTEXT_BYTES_PER_TOKEN` bytes a token, an image at
/// `CONTEXT_IMAGE_TOKENS`. For the budget gate, beside the context's own
/// estimate (`run::context`), which for a context with no answer to go by
/// counts neither the tools nor the instructions.
fn estimate(context: &[ModelItem], tools: &[ToolSpec], system_bytes: u64) -> u64 {
    use crate::limits::{CONTEXT_BYTES_PER_TOKEN, CONTEXT_IMAGE_TOKENS};
    let (mut bytes, mut images) = (system_bytes, 0u64);
    for item in context {
        match item {
            ModelItem::Message(m) => {
                bytes += m.text.len() as u64;
                images += m.images.len() as u64;
            }
            ModelItem::ToolCalls { text, calls } => {
                bytes += text.len() as u64;
                for call in calls {
                    bytes += (call.name.len() + call.arguments.len()) as u64;
                }
            }
            ModelItem::ToolResult {
                content, images: i, ..
            } => {
                bytes += content.len() as u64;
                images += i.len() as u64;
            }
        }
    }
    for tool in tools {
        bytes +=
            (tool.name.len() + tool.description.len() + tool.parameters.to_string().len()) as u64;
    }
    (bytes / CONTEXT_BYTES_PER_TOKEN).saturating_add(images.saturating_mul(CONTEXT_IMAGE_TOKENS))
}

/// What the host tells the driver.
#[derive(Debug)]
pub enum Input {
    /// Answers [`Action::Offer`]: the tools to offer, or why the host's
    /// tools are unusable (the turn fails saying so).
    Offered(Result<Offer, String>),
    /// Answers [`Action::CallModel`].
    Answered(Answer),
    /// Answers [`Action::CallModel`]: the call failed (diagnostic redacted).
    Failed(ModelError),
    /// Answers [`Action::RunTool`]: the call's outcome.
    ToolDone(ToolOutput),
    /// Answers [`Action::RunTool`]: the call found its attempt no longer
    /// current (an operation unsafe to replay could not be marked started).
    ToolStale,
    /// The turn was stopped (cancel, abort, Session deleted) while the host
    /// performed an action: drop its outcome.
    Stopped,
}

/// What the host does next.
#[derive(Debug)]
pub enum Action {
    /// Publish to the Session's watchers; a `settled` frame also wakes the
    /// command's long polls.
    Publish(Event),
    /// Resolve the tools to offer (connecting MCP servers when due), then
    /// [`Input::Offered`].
    Offer,
    /// Call the model; stream text deltas as `delta` frames of
    /// [`Turn::head`]; then [`Input::Answered`] or [`Input::Failed`].
    /// `system`: the system prompt of a summary call, in place of the
    /// host's instructions (`None`: the host's).
    CallModel {
        context: Vec<ModelItem>,
        tools: Vec<ToolSpec>,
        system: Option<String>,
    },
    /// Run one tool call (its `started` frame was published just before),
    /// publishing the progress reports its [`ToolRun::progress`] gate lets
    /// through; then [`Input::ToolDone`] or [`Input::ToolStale`].
    RunTool(Box<ToolRun>),
    /// The turn headed by `ended` settled and the Session's next turn,
    /// `started`, was claimed in the same write: it continues in this driver.
    Next { ended: String, started: String },
    /// A storage fault or a broken invariant; the turn stops here (its
    /// claim is durable: the next reconciliation resumes it).
    Fault(ApiError),
    /// The turn is over for this driver.
    Done,
}

/// One tool call to perform.
#[derive(Debug, Clone)]
pub struct ToolRun {
    pub call: OpenCall,
    pub work: ToolWork,
    /// Which of its progress reports to publish while it runs; what it
    /// holds at the end is published before the outcome is handed back.
    pub progress: ProgressGate,
}

/// What performing a call means.
#[derive(Debug, Clone)]
pub enum ToolWork {
    /// A direct tool: an operation, gated by [`OperationCall`].
    Operation(OperationCall),
    /// Model code for the sandbox; each guest call is decided by
    /// [`CallRef::guest_call`] and gated like a direct tool.
    Execute { code: String, of: CallRef },
    /// A call whose outcome is unknown (it is not run again) and that was
    /// writing a files patch when the runtime stopped: undo the patch
    /// (`files::journal`), then answer [`run_tools::undone_output`].
    Undo { of: CallRef, execute: bool },
}

/// The input a driver waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaiting {
    Offer,
    Model,
    Tool,
    /// Done: nothing more.
    Nothing,
}

/// One running turn of a Session, from its claim to its settlement (and
/// on to the Session's next turn when its settlement claimed one).
#[derive(Debug)]
pub struct Turn {
    session_id: String,
    head: String,
    /// The head command's host metadata (see [`Step::meta`]).
    head_meta: Option<String>,
    attempt: u32,
    policy: TurnPolicy,
    /// The calls of the current tool step still to close, in call order.
    calls: VecDeque<OpenCall>,
    /// What the next model call sees, and what the driver knows of it.
    context: Vec<ModelItem>,
    window: Window,
    /// What the head command runs.
    work: Work,
    /// The summary call in flight: why it runs, the messages it stands for.
    summarising: Option<(Trigger, super::Range)>,
    /// This model step compacted already for the window, or after a
    /// refusal: at most once each per step, then the call is made.
    compacted: bool,
    refused: bool,
    offer: Offer,
    /// The turn's start diagnostics are said.
    reported: bool,
    /// What the budget gate charged the call in flight (`request`).
    charged: Option<budget::Charge>,
    awaiting: Awaiting,
    actions: VecDeque<Action>,
    /// It settled `completed` with its Session's queue empty: it left no
    /// work for a reconciliation to find ([`Turn::left_no_work`]).
    drained: bool,
}

impl Turn {
    /// Takes over a claimed turn ([`super::reconcile`]): publishes what the
    /// claim appended and `started`, then asks for the tools to offer.
    pub fn new(step: Step, policy: TurnPolicy) -> Turn {
        let mut turn = Turn {
            session_id: String::new(),
            head: String::new(),
            head_meta: None,
            attempt: 0,
            policy,
            calls: VecDeque::new(),
            context: Vec::new(),
            window: Window::default(),
            work: Work::Turn,
            summarising: None,
            compacted: false,
            refused: false,
            offer: Offer::default(),
            reported: false,
            charged: None,
            awaiting: Awaiting::Offer,
            actions: VecDeque::new(),
            drained: false,
        };
        turn.begin(step);
        turn
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The head command of the turn running now.
    pub fn head(&self) -> &str {
        &self.head
    }

    /// The head command's host metadata, as admitted.
    pub fn head_meta(&self) -> Option<&str> {
        self.head_meta.as_deref()
    }

    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    pub fn awaiting(&self) -> Awaiting {
        self.awaiting
    }

    /// Done after settling `completed` in a Session with nothing queued:
    /// no retry timer, no orphan, no queue head is left behind, so the
    /// host need not reconcile for it (any other end may leave work).
    pub fn left_no_work(&self) -> bool {
        self.awaiting == Awaiting::Nothing && self.drained
    }

    /// The next action to perform; `None` while an input is awaited.
    pub fn poll(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Feeds the outcome of the action performed. Transitions run on `ctx`.
    pub fn handle(&mut self, ctx: &mut Ctx<'_>, input: Input) {
        let result = match (self.awaiting, input) {
            (Awaiting::Nothing, _) => Ok(()),
            (_, Input::Stopped) => {
                self.finish();
                Ok(())
            }
            (Awaiting::Offer, Input::Offered(offer)) => self.offered(ctx, offer),
            (Awaiting::Model, Input::Answered(answer)) => {
                ctx.charged = self.charged.take();
                self.answered(ctx, answer)
            }
            (Awaiting::Model, Input::Failed(error)) => {
                ctx.charged = self.charged.take();
                self.failed(ctx, error, true)
            }
            (Awaiting::Tool, Input::ToolDone(output)) => self.tool_done(ctx, output),
            (Awaiting::Tool, Input::ToolStale) => {
                self.finish();
                Ok(())
            }
            // Not the input awaited: the host's bug; ignore it.
            _ => Ok(()),
        };
        if let Err(e) = result {
            self.actions.push_back(Action::Fault(e));
            self.finish();
        }
    }

    fn begin(&mut self, step: Step) {
        self.session_id = step.session_id;
        self.head = step.command_id;
        self.head_meta = step.meta;
        self.attempt = step.attempt;
        self.context = step.context;
        self.window = step.window;
        self.work = step.work;
        self.summarising = None;
        self.compacted = false;
        self.refused = false;
        self.calls = step.tool_calls.into();
        self.reported = false;
        if let Some(entry_id) = step.branch {
            self.publish(Frame::Branch { entry_id });
        }
        for message in step.appended {
            self.publish_message(message);
        }
        self.publish(Frame::Started {
            command_id: self.head.clone(),
            attempt: self.attempt,
        });
        self.ask_offer();
    }

    fn ask_offer(&mut self) {
        self.awaiting = Awaiting::Offer;
        self.actions.push_back(Action::Offer);
    }

    fn finish(&mut self) {
        // A call whose outcome is dropped keeps its estimate charged.
        self.charged = None;
        self.awaiting = Awaiting::Nothing;
        self.calls.clear();
        self.actions.push_back(Action::Done);
    }

    fn publish(&mut self, frame: Frame) {
        self.actions.push_back(Action::Publish(Event::Frame(frame)));
    }

    fn publish_message(&mut self, body: String) {
        if let Some(frame) = message_frame(body) {
            self.publish(frame);
        }
    }

    fn publish_settled(&mut self, settled: Vec<Settlement>) {
        self.actions
            .extend(settled_events(settled).into_iter().map(Action::Publish));
    }

    fn diagnose(&mut self, diagnostic: String) {
        self.publish(Frame::Diagnostic {
            command_id: self.head.clone(),
            diagnostic,
        });
    }

    fn offered(&mut self, ctx: &mut Ctx<'_>, offer: Result<Offer, String>) -> Result<(), ApiError> {
        let offer = match offer {
            Ok(offer) => offer,
            Err(why) => return self.failed(ctx, ModelError::new(false, why), false),
        };
        if !self.reported {
            self.reported = true;
            let execute = offer
                .toolset
                .as_ref()
                .and_then(|t| t.execute_unavailable().map(str::to_owned));
            if let Some(why) = execute {
                self.diagnose(why);
            }
            for report in &offer.unavailable {
                self.diagnose(report.to_string());
            }
        }
        self.offer = offer;
        if !self.calls.is_empty() {
            return self.next_call(ctx);
        }
        match self.work {
            Work::Compact { .. } => self.summarise(ctx, Trigger::Command),
            Work::Turn => {
                let due = self.offer.window.is_some_and(|w| w.due(&self.window));
                if due && !self.compacted {
                    self.summarise(ctx, Trigger::Window)
                } else {
                    self.call_model(ctx)
                }
            }
        }
    }

    /// The model call of the step, with the tools offered.
    fn call_model(&mut self, ctx: &mut Ctx<'_>) -> Result<(), ApiError> {
        let tools = self
            .offer
            .toolset
            .as_ref()
            .map(|t| t.specs())
            .unwrap_or_default();
        let context = std::mem::take(&mut self.context);
        self.request(ctx, context, tools, None)
    }

    /// Asks the host for a model call once the turn's budgets cover it
    /// (`budget::gate`, where budgets apply, charges the call's estimated
    /// input: see [`estimate`]). Over a budget the turn pauses instead: it
    /// stays running, publishes `paused`, and a claim resumes it when they
    /// cover it. The gate needs no guard of the attempt: it runs in the
    /// same step as the input that led here, which found the turn current.
    fn request(
        &mut self,
        ctx: &mut Ctx<'_>,
        context: Vec<ModelItem>,
        tools: Vec<ToolSpec>,
        system: Option<String>,
    ) -> Result<(), ApiError> {
        let (sql, now_ms) = (ctx.store.sql(), ctx.now_ms);
        if budget::applies(sql, &self.policy.budget) {
            budget::open(sql, now_ms)?;
            let system_bytes = match &system {
                Some(system) => system.len() as u64,
                None => self.offer.instructions_bytes,
            };
            let needs = estimate(&context, &tools, system_bytes).max(self.window.tokens);
            let call = (self.session_id.as_str(), self.head.as_str(), self.attempt);
            match budget::gate(sql, &self.policy.budget, call, needs, now_ms)? {
                budget::Gated::Charged(charge) => self.charged = Some(charge),
                budget::Gated::Paused(reached) => {
                    self.summarising = None;
                    self.publish(Frame::Paused {
                        command_id: self.head.clone(),
                        reason: budget::BUDGET_REACHED,
                        budget: reached,
                    });
                    self.finish();
                    return Ok(());
                }
            }
        }
        self.awaiting = Awaiting::Model;
        self.actions.push_back(Action::CallModel {
            context,
            tools,
            system,
        });
        Ok(())
    }

    /// The instructions of a `compact` command.
    #[cfg(feature = "compaction")]
    fn instructions(&self) -> Option<&str> {
        match &self.work {
            Work::Compact { instructions } => instructions.as_deref(),
            Work::Turn => None,
        }
    }

    /// Asks the model for a summary of the context, for `trigger`; with
    /// nothing to compact, a `compact` command settles at once and a turn
    /// makes its call.
    #[cfg(feature = "compaction")]
    fn summarise(&mut self, ctx: &mut Ctx<'_>, trigger: Trigger) -> Result<(), ApiError> {
        let Some(range) = self.window.range.clone() else {
            return match trigger {
                Trigger::Command => self.recorded(ctx, None),
                _ => self.call_model(ctx),
            };
        };
        let budget = self
            .offer
            .window
            .map_or(crate::limits::COMPACTION_INPUT_BYTES_MAX, |w| {
                w.input_bytes()
            });
        let (system, context) = compaction::request(
            &self.window,
            &self.context,
            self.instructions(),
            self.offer.compaction_prompt.as_deref(),
            budget,
        );
        self.summarising = Some((trigger, range));
        self.request(ctx, context, Vec::new(), Some(system))
    }

    /// Without the `compaction` feature: a `compact` command (queued by a
    /// build with it) fails naming the feature; a turn makes its call.
    #[cfg(not(feature = "compaction"))]
    fn summarise(&mut self, ctx: &mut Ctx<'_>, trigger: Trigger) -> Result<(), ApiError> {
        match trigger {
            Trigger::Command => {
                self.failed(ctx, ModelError::new(false, compaction::UNAVAILABLE), false)
            }
            _ => self.call_model(ctx),
        }
    }

    /// Records the summary (`None`: nothing to compact) and goes on: a
    /// `compact` command settled, a turn to its model call.
    #[cfg(feature = "compaction")]
    fn recorded(
        &mut self,
        ctx: &mut Ctx<'_>,
        summary: Option<(Trigger, super::Range, Answer)>,
    ) -> Result<(), ApiError> {
        let previous = self.window.summary.as_ref().map(|s| s.entry_id.clone());
        let trigger = summary.as_ref().map(|(t, _, _)| *t);
        let instructions = self.instructions().map(str::to_owned);
        let summarised = summary.as_ref().map(|(trigger, range, answer)| Summarised {
            answer,
            range,
            previous: previous.as_deref(),
            trigger: *trigger,
        });
        let (session, head, attempt) = (self.session_id.clone(), self.head.clone(), self.attempt);
        let recorded = compaction::record(
            ctx,
            &session,
            &head,
            attempt,
            instructions.as_deref(),
            summarised,
        )?;
        match recorded {
            Recorded::Settled {
                entry,
                settled,
                next,
            } => {
                if let Some(entry) = entry {
                    self.publish_message(entry);
                }
                self.publish_settled(settled);
                self.next_or_finish(head, next);
            }
            Recorded::Continue { entry, next } => {
                self.publish_message(entry);
                self.context = next.context;
                self.window = next.window;
                self.compacted = true;
                self.call_model(ctx)?;
            }
            Recorded::Changed { context, window } => {
                self.context = context;
                self.window = window;
                match trigger {
                    // Summarised again: the command's work is to compact.
                    Some(Trigger::Command) => return self.summarise(ctx, Trigger::Command),
                    // The step goes on without (it compacts at its next one).
                    _ => {
                        self.compacted = true;
                        self.call_model(ctx)?;
                    }
                }
            }
            Recorded::Stale => self.finish(),
        }
        Ok(())
    }

    /// After a settling write: the Session's next command it claimed runs
    /// in this driver, or the driver is done.
    fn next_or_finish(&mut self, ended: String, next: Option<Step>) {
        match next {
            Some(next) => {
                self.actions.push_back(Action::Next {
                    ended,
                    started: next.command_id.clone(),
                });
                self.begin(next);
            }
            None => {
                self.drained = true;
                self.finish();
            }
        }
    }

    fn answered(&mut self, ctx: &mut Ctx<'_>, answer: Answer) -> Result<(), ApiError> {
        #[cfg(feature = "compaction")]
        if let Some((trigger, range)) = self.summarising.take() {
            if answer.text.trim().is_empty() {
                let mut error = ModelError::new(true, "the model answered with no summary");
                error.metered = Box::new(answer.metered());
                return self.failed(ctx, error, true);
            }
            return self.recorded(ctx, Some((trigger, range, answer)));
        }
        // The model step is done: the next one may compact again.
        self.compacted = false;
        self.refused = false;
        let (session, head, attempt) = (self.session_id.clone(), self.head.clone(), self.attempt);
        if !answer.tool_calls.is_empty() {
            let protocol = match &self.offer.toolset {
                Some(toolset) => toolset.protocol(),
                None => crate::transcript::Protocol::new([]),
            };
            return match run_tools::record_calls(ctx, &session, &head, attempt, &answer, &protocol)?
            {
                CallsOutcome::Run { message, calls } => {
                    self.publish_message(message);
                    self.calls = calls.into();
                    self.next_call(ctx)
                }
                CallsOutcome::Settled(settled) => {
                    self.publish_settled(settled);
                    self.finish();
                    Ok(())
                }
                CallsOutcome::Stale => {
                    self.finish();
                    Ok(())
                }
            };
        }
        match complete_step(ctx, &session, &head, attempt, &answer)? {
            StepOutcome::Continue(next) => self.continue_with(next),
            StepOutcome::Settled {
                settled,
                answer,
                next,
            } => {
                self.publish_message(answer);
                self.publish_settled(settled);
                self.next_or_finish(head, next);
            }
            StepOutcome::Stale => self.finish(),
        }
        Ok(())
    }

    /// The same turn's next model step (steer prompts may have joined).
    fn continue_with(&mut self, next: Step) {
        for message in next.appended {
            self.publish_message(message);
        }
        self.context = next.context;
        self.window = next.window;
        self.ask_offer();
    }

    /// A failed attempt; `called`: a model call failed (its ledger row is
    /// written with the failure), not the host's offer or a missing feature.
    fn failed(
        &mut self,
        ctx: &mut Ctx<'_>,
        error: ModelError,
        called: bool,
    ) -> Result<(), ApiError> {
        let summary_call = self.summarising.take().is_some();
        if cfg!(feature = "compaction")
            && error.too_long
            && !summary_call
            && !self.refused
            && self.work == Work::Turn
        {
            // Refused as too long: compact, then make the call once more
            // (the context went with the call: read it again).
            self.refused = true;
            let (session, head) = (self.session_id.clone(), self.head.clone());
            let Some((context, window)) = compaction::reread(ctx, &session, &head, self.attempt)?
            else {
                self.finish();
                return Ok(());
            };
            if window.range.is_some() {
                // The refused call is counted now: the summary call's
                // write records only its own.
                let call = (Outcome::Failed, &*error.metered);
                if record_call(ctx, &session, &head, self.attempt, call)?.is_none() {
                    self.finish();
                    return Ok(());
                }
                self.context = context;
                self.window = window;
                return self.summarise(ctx, Trigger::Refusal);
            }
        }
        let delay = self.policy.retry.delay_ms(self.attempt);
        let outcome = fail_attempt(
            ctx,
            &self.session_id,
            &self.head,
            self.attempt,
            &Failure {
                retryable: error.retryable,
                diagnostic: error.diagnostic.clone(),
            },
            called.then_some(&*error.metered),
            self.policy.attempts,
            delay,
        )?;
        let report = |retry_in_ms| {
            Action::Publish(Event::RuntimeError(RuntimeError {
                command_id: self.head.clone(),
                diagnostic: error.diagnostic.clone(),
                retry_in_ms,
            }))
        };
        match outcome {
            FailOutcome::Retry { retry_at } => {
                let action = report(Some(retry_at - ctx.now_ms));
                self.actions.push_back(action);
            }
            FailOutcome::Settled(settled) => {
                let action = report(None);
                self.actions.push_back(action);
                self.publish_settled(settled);
            }
            FailOutcome::Stale => {}
        }
        self.finish();
        Ok(())
    }

    fn tool_done(&mut self, ctx: &mut Ctx<'_>, output: ToolOutput) -> Result<(), ApiError> {
        let Some(call) = self.calls.pop_front() else {
            self.finish();
            return Ok(());
        };
        self.record(ctx, &call, &output, true)
    }

    /// Records one call's outcome (`ran`: the host ran it, so its `ended`
    /// frame goes out before its message); after the step's last, the next
    /// model step follows, else the next call.
    fn record(
        &mut self,
        ctx: &mut Ctx<'_>,
        call: &OpenCall,
        output: &ToolOutput,
        ran: bool,
    ) -> Result<(), ApiError> {
        let recorded = run_tools::record_result(
            ctx,
            &self.session_id,
            &self.head,
            self.attempt,
            &call.id,
            output,
        )?;
        match recorded {
            ResultOutcome::Recorded { message, next } => {
                if ran {
                    let mut ended = tool_frame(&self.head, call, ToolPhase::Ended);
                    if let Frame::Tool { is_error, .. } = &mut ended {
                        *is_error = Some(output.is_error);
                    }
                    self.publish(ended);
                }
                self.publish_message(message);
                match next {
                    Some(next) => {
                        self.calls.clear();
                        self.continue_with(*next);
                        Ok(())
                    }
                    None => self.next_call(ctx),
                }
            }
            ResultOutcome::Stale => {
                self.finish();
                Ok(())
            }
        }
    }

    /// Closes the step's next open call: answers it at once when it cannot
    /// run (refused arguments, a tool not offered, an unsafe operation that
    /// may already have run), else asks the host to run it.
    fn next_call(&mut self, ctx: &mut Ctx<'_>) -> Result<(), ApiError> {
        let Some(call) = self.calls.front().cloned() else {
            // Every call of the step is closed: the model answers them.
            self.ask_offer();
            return Ok(());
        };
        match self.plan(ctx, &call) {
            Ok(work) => {
                self.awaiting = Awaiting::Tool;
                self.publish(tool_frame(&self.head, &call, ToolPhase::Started));
                let progress = ProgressGate::new(&self.head, &call);
                self.actions.push_back(Action::RunTool(Box::new(ToolRun {
                    call,
                    work,
                    progress,
                })));
                Ok(())
            }
            Err(output) => {
                self.calls.pop_front();
                // A call answered without running (refused, not offered,
                // its outcome unknown) still ends a tool span, here.
                #[cfg(feature = "traces")]
                if self.policy.traced {
                    let (id, now) = (&call.id, ctx.now_ms);
                    let span =
                        crate::trace::tool(&self.head, id, &call.name, now, now, output.is_error);
                    ctx.spans.push(span.to_json().to_string());
                }
                self.record(ctx, &call, &output, false)
            }
        }
    }

    fn call_ref(&self, call: &OpenCall) -> CallRef {
        CallRef {
            session_id: self.session_id.clone(),
            command_id: self.head.clone(),
            attempt: self.attempt,
            call_id: call.id.clone(),
        }
    }

    /// What running `call` means, or the outcome it has without running.
    fn plan(&self, ctx: &Ctx<'_>, call: &OpenCall) -> Result<ToolWork, ToolOutput> {
        if let Some(why) = &call.refused {
            return Err(ToolOutput::error(why.clone()));
        }
        let Some(toolset) = &self.offer.toolset else {
            return Err(ToolOutput::error(format!(
                "no tool `{}` is offered",
                call.name
            )));
        };
        let Some(tool) = toolset.tool(&call.name) else {
            let offered: Vec<String> = toolset.specs().into_iter().map(|s| s.name).collect();
            return Err(ToolOutput::error(format!(
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
            let of = self.call_ref(call);
            // A files patch the call was writing is undone first (a lean
            // build, with no files module, writes none).
            if !cfg!(feature = "files")
                || !crate::files::journal::left_by(ctx.store.sql(), of.journal_key())
            {
                return Err(run_tools::outcome_unknown(call));
            }
            let execute = matches!(tool, Tool::Execute);
            return Ok(ToolWork::Undo { of, execute });
        }
        match tool {
            Tool::Direct(module, op) => {
                let args = Value::Object(call.input.clone());
                if let Err(e) = op.check_arguments(&args) {
                    return Err(ToolOutput::error(format!("{}: {e}", op.guest_name)));
                }
                Ok(ToolWork::Operation(OperationCall::new(
                    self.call_ref(call),
                    module,
                    op,
                    args,
                )))
            }
            Tool::Execute => match call.input.get("code").and_then(Value::as_str) {
                Some(code) => Ok(ToolWork::Execute {
                    code: code.to_owned(),
                    of: self.call_ref(call),
                }),
                None => Err(ToolOutput::error(
                    "execute: expects {\"code\": \"<JavaScript>\"}",
                )),
            },
        }
    }
}
