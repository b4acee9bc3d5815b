//! The run loop's state machine (seed: "Accept, execute and observe"):
//! claim the head of each idle Session's queue, resume turns a dead instance
//! left running, record each step's answer, retry failed model calls on a
//! durable timer, and settle every command exactly once.
//!
//! Pure transitions over the store; the host performs the model calls and
//! tells the outcome back. Every function here is one atomic transition.
//!
//! Invariants:
//! - one running turn per Session (a head plus the steer prompts it joined);
//! - a turn's steps are appended only by its current attempt (`attempt`
//!   guards every write), so an answer is never appended twice and a stale
//!   attempt (from before a restart or a cancel) changes nothing;
//! - a command's settlement is written once (`Store::settle` only leaves
//!   pending or running).

pub mod agent;
pub mod cancel;
pub mod compaction;
mod context;
pub mod driver;
pub mod live;
pub mod operation;
pub mod schedule;
pub mod tools;

use crate::budget;
use crate::ctx::{Ctx, IdSource};
use crate::error::ApiError;
use crate::limits::CLAIMS_PER_PASS_MAX;
use crate::model::{Answer, Metered, ModelItem, Usage};
use crate::session::command::prompt_input;
use crate::session::command::{CompactInput, Delivery};
use crate::settlement::Settlement;
use crate::sql::atomically;
use crate::store::path::Start;
use crate::store::{CommandRow, Kind, State, Store, Terminal};
use crate::transcript::{self, message_body, user_message_body, Message};
use crate::usage::{self, Outcome};
pub(crate) use context::context;
pub use context::{Range, Summary, Window};

/// One model step to perform: who it is for and what the model sees.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub session_id: String,
    /// The turn's head command.
    pub command_id: String,
    /// Guards every write this step's outcome makes.
    pub attempt: u32,
    /// What the model sees. Empty while `tool_calls` remain: the host
    /// closes them first, and the last outcome answers the context.
    pub context: Vec<ModelItem>,
    /// What the driver knows of `context` (its summary, estimated size,
    /// what compacting it would stand for).
    pub window: Window,
    /// What the head command runs: a turn or a compaction.
    pub work: Work,
    /// Calls of an interrupted tool step to close before the model call
    /// (see [`tools`]).
    pub tool_calls: Vec<tools::OpenCall>,
    /// Messages the claiming transition appended (stored JSON), to publish.
    pub appended: Vec<String>,
    /// The head command's host metadata, as admitted (the host's model
    /// choice reads it): carried from the claim, never read again.
    pub meta: Option<String>,
    /// The claim started a new branch (a retry, a prompt with `after`),
    /// now the selected one: it runs through this entry (`None`: from the
    /// Session's start). Published as a `branch` frame before `appended`.
    pub branch: Option<Option<String>>,
}

/// What a claimed command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// A turn: model steps (and tool steps) answering its prompt.
    Turn,
    /// A `compact` command, with its instructions.
    Compact { instructions: Option<String> },
}

impl Work {
    fn of(head: &CommandRow) -> Result<Work, ApiError> {
        Ok(match head.kind {
            Kind::Compact => {
                let input: CompactInput = crate::json::from_text(&head.input).map_err(internal)?;
                Work::Compact {
                    instructions: input.instructions,
                }
            }
            _ => Work::Turn,
        })
    }
}

/// The entry id of the message a context of `head`'s run always keeps: a
/// turn's own prompt, a retry's the user message it answers again (a
/// compaction has none).
fn prompt_of(head: &CommandRow) -> Result<Option<String>, ApiError> {
    Ok(match head.kind {
        Kind::Prompt => Some(transcript::user_entry_id(&head.command_id)),
        Kind::Retry => prompt_input(&head.input)?.retry,
        _ => None,
    })
}

/// The outcome of [`complete_step`].
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutcome {
    /// The turn settled; every command of it carries this settlement.
    /// `answer` is the appended assistant message (stored JSON); `next` is
    /// the Session's next turn, claimed in the same write, to run now.
    Settled {
        settled: Vec<Settlement>,
        answer: String,
        next: Option<Step>,
    },
    /// Steer prompts joined: call the model again with this step.
    Continue(Step),
    /// The attempt is no longer current (cancelled, or superseded after a
    /// restart); nothing was written.
    Stale,
}

/// The outcome of [`fail_attempt`].
#[derive(Debug, Clone, PartialEq)]
pub enum FailOutcome {
    /// Retry when the durable timer fires at `retry_at` (ms since epoch).
    Retry {
        retry_at: i64,
    },
    Settled(Vec<Settlement>),
    Stale,
}

/// A failed model call, as the state machine needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Whether another attempt may succeed (network, 429, 5xx, overload).
    pub retryable: bool,
    /// Bounded, secret-free description for the settlement.
    pub diagnostic: String,
}

/// Retry policy of the host, as the state machine needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempts {
    /// Model-call attempts per turn, restarts included.
    pub max: u32,
}

/// What one reconciliation pass did.
#[derive(Debug, Clone, PartialEq)]
pub struct Reconciled {
    /// Turns to run now.
    pub steps: Vec<Step>,
    /// Turns it settled (past the attempt limit), with their Session.
    pub settled: Vec<(String, Settlement)>,
    /// The earliest moment work it did not claim is due (retry timers,
    /// claims past the per-pass bound), for the alarm.
    pub next_deadline: Option<i64>,
    /// The head of every turn still running after it: whatever the host
    /// holds for any other turn (settled meanwhile) it may drop.
    pub running: Vec<String>,
}

/// Counts the model calls a wasm reset cut off in turns it spared
/// (`(head, session)`, from the trap report): the call was sent and may be
/// billed, and the turn calls again at the attempt it holds, so each turn
/// still running under `head` with no retry due gets one `unknown` usage
/// row at that attempt (a turn the reset did not spare counts its cut-off
/// call at its claim: [`reconcile`]).
pub fn count_cut_off(ctx: &mut Ctx<'_>, heads: &[(&str, &str)]) -> Result<(), ApiError> {
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    atomically(store.sql(), || {
        // Reads first (a transition writes last).
        let mut cut = Vec::with_capacity(heads.len());
        for (head, session) in heads {
            let running = store.running_head(session)?;
            cut.extend(running.filter(|r| r.command_id == *head && r.retry_at.is_none()));
        }
        for row in &cut {
            let call = usage::Call {
                session_id: &row.session_id,
                command_id: &row.command_id,
                attempt: row.attempt,
            };
            usage::record(store.sql(), call, Outcome::Unknown, None, None, now_ms)?;
        }
        Ok(())
    })
}

/// Claims every turn that can run now: the queue head of each idle Session
/// and every running turn that is neither live in this instance nor waiting
/// on its retry timer (a prompt admitted into an idle Session is claimed by
/// its admission). `is_fresh(head)` names running turns that resume at their
/// current attempt without counting a new one: those an admission claimed and
/// this instance has not started, and those a wasm reset caused by other code
/// interrupted (the host's trap attribution). `is_live(head)` tells whether this instance is
/// executing that turn right now. Turns past the attempt limit settle
/// (`failed` after a failed call, `interrupted` after restarts).
pub fn reconcile(
    ctx: &mut Ctx<'_>,
    is_live: &dyn Fn(&str) -> bool,
    is_fresh: &dyn Fn(&str) -> bool,
    attempts: Attempts,
    budget: &budget::Limits,
) -> Result<Reconciled, ApiError> {
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    atomically(store.sql(), || {
        // Reads first (a transition writes last).
        let mut resumable = Vec::new();
        // The earliest work this pass leaves for later.
        let mut next_deadline: Option<i64> = None;
        let mut later = |at: i64| next_deadline = Some(next_deadline.map_or(at, |d| d.min(at)));
        let (running, idle): (Vec<_>, Vec<_>) = store
            .runnable()?
            .into_iter()
            .partition(|c| c.state == State::Running);
        // Turns a budget paused: each resumes, at the attempt it holds,
        // once its budgets cover the call it paused before.
        let paused = budget::paused(store.sql())?;
        let mut unpaused = Vec::new();
        for head in running.iter().filter(|c| c.turn_id.is_none()) {
            if is_live(&head.command_id) {
                continue;
            }
            if let Some(p) = paused.iter().find(|p| p.command_id == head.command_id) {
                if !budget::covers(store.sql(), budget, p, now_ms)? {
                    if p.budget.scope == budget::Scope::Agent {
                        later((budget::day_of(now_ms) + 1) * budget::DAY_MS);
                    }
                    continue;
                }
                unpaused.push(head.command_id.clone());
            }
            if let Some(at) = head.retry_at.filter(|at| *at > now_ms) {
                later(at);
                continue;
            }
            if resumable.len() == CLAIMS_PER_PASS_MAX {
                later(now_ms);
                continue;
            }
            let turn: Vec<CommandRow> = running
                .iter()
                .filter(|c| {
                    c.session_id == head.session_id
                        && (c.command_id == head.command_id
                            || c.turn_id.as_deref() == Some(&head.command_id))
                })
                .cloned()
                .collect();
            let head = head.clone();
            let open = tools::Progress::parse(head.usage.as_deref())?.open;
            // Open calls are closed first; their last outcome answers the
            // context then.
            let (context, window) = if open.is_empty() {
                let prompt = prompt_of(&head)?;
                context(store, &head.session_id, Start::Tip, prompt.as_deref(), &[])?
            } else {
                (Vec::new(), Window::default())
            };
            resumable.push((head, turn, context, window, open));
        }
        let mut fresh = Vec::new();
        let room = CLAIMS_PER_PASS_MAX - resumable.len();
        if idle.len() > room {
            later(now_ms);
        }
        for head in idle.into_iter().take(room) {
            fresh.push(Claim::read(store, head, now_ms, &[])?);
        }

        let mut still_running: Vec<String> = running
            .iter()
            .filter(|c| c.turn_id.is_none())
            .map(|c| c.command_id.clone())
            .collect();
        let mut steps = Vec::new();
        let mut settled = Vec::new();
        for (head, turn, context, window, open) in resumable {
            // A fresh turn (see above) runs the attempt it holds. Any other
            // orphan (a dead instance's, or the one whose code trapped)
            // counts a new attempt, so a turn that keeps crashing its
            // runtime ends at the attempt limit; so does a due retry.
            let resumed = unpaused.contains(&head.command_id);
            if resumed {
                budget::unpause(store.sql(), &head.session_id)?;
            }
            let fresh_start = resumed || (head.retry_at.is_none() && is_fresh(&head.command_id));
            // An orphan with no due retry and no open call was in or around
            // a model call: that call is counted once, here, as unknown
            // (its usage is lost with the instance; a failed call was
            // counted with its retry, a tool call has its own record).
            if !fresh_start && head.retry_at.is_none() && open.is_empty() {
                let call = usage::Call {
                    session_id: &head.session_id,
                    command_id: &head.command_id,
                    attempt: head.attempt,
                };
                usage::record(store.sql(), call, Outcome::Unknown, None, None, now_ms)?;
            }
            if !fresh_start && head.attempt >= attempts.max {
                let (terminal, diagnostic) = match (&head.retry_at, &head.last_error) {
                    (Some(_), Some(error)) => (Terminal::Failed, error.clone()),
                    _ => (
                        Terminal::Interrupted,
                        format!(
                            "the turn was interrupted by a runtime restart, eviction or reset \
                             {} time(s); attempt limit {} reached",
                            head.attempt, attempts.max
                        ),
                    ),
                };
                let session = head.session_id.clone();
                still_running.retain(|h| *h != head.command_id);
                settled.extend(
                    settle_turn(store, &turn, terminal, None, Some(&diagnostic), now_ms)?
                        .into_iter()
                        .map(|s| (session.clone(), s)),
                );
                continue;
            }
            let attempt = if fresh_start {
                head.attempt
            } else {
                let next = head.attempt + 1;
                store.claim(&head, None, next, now_ms)?;
                next
            };
            steps.push(Step {
                session_id: head.session_id.clone(),
                work: Work::of(&head)?,
                command_id: head.command_id,
                attempt,
                context,
                window,
                tool_calls: open,
                appended: Vec::new(),
                meta: head.meta,
                branch: None,
            });
        }
        for claim in fresh {
            still_running.push(claim.head.command_id.clone());
            steps.push(claim.write(store, now_ms)?);
        }
        Ok(Reconciled {
            steps,
            settled,
            next_deadline,
            running: still_running,
        })
    })
}

/// Records a finished model step of the turn headed by `command_id`. With
/// steer prompts waiting, they join the turn and the model is called again;
/// otherwise the turn settles `completed` and its answer is appended, in one
/// write.
pub fn complete_step(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    attempt: u32,
    answer: &Answer,
) -> Result<StepOutcome, ApiError> {
    let call = Some((Outcome::Answered, &answer.metered()));
    let outcome = on_model_call(ctx, session_id, command_id, attempt, call, |current| {
        let steers = current.steers();
        let Current {
            store,
            now_ms,
            ids,
            turn,
            head,
            pending,
        } = current;
        let mut progress = tools::Progress::parse(head.usage.as_deref())?;
        progress.add_usage(answer.usage);
        let usage = progress.usage();
        let answer_id = ids.next_id("msg_");
        let answer_body = message_body(&Message {
            entry_id: &answer_id,
            role: transcript::Role::Assistant,
            text: &answer.text,
            request_id: None,
            command_id: Some(command_id),
            meta: None,
            usage: answer.usage,
            created_at: now_ms,
            ..Default::default()
        })?;
        if steers.is_empty() {
            // The queue's next command starts in this same write: no
            // durable round between back-to-back turns.
            let written = Pending {
                body: answer_body.clone(),
            };
            let next = pending
                .first()
                .cloned()
                .map(|next| Claim::read(store, next, now_ms, std::slice::from_ref(&written)))
                .transpose()?;
            store.insert_message(&head.session_id, &answer_body)?;
            let settled = settle_turn(
                store,
                turn,
                Terminal::Completed,
                Some((Some(&answer.text), usage, progress.tool_calls)),
                None,
                now_ms,
            )?;
            let next = next.map(|claim| claim.write(store, now_ms)).transpose()?;
            return Ok(StepOutcome::Settled {
                settled,
                answer: answer_body,
                next,
            });
        }
        let mut next = join_steers(
            store,
            head,
            attempt,
            now_ms,
            &steers,
            Pending {
                body: answer_body.clone(),
            },
        )?;
        next.appended.insert(0, answer_body);
        if usage.is_some() {
            store.set_usage(head, &progress.to_json()?)?;
        }
        Ok(StepOutcome::Continue(next))
    })?;
    Ok(outcome.unwrap_or(StepOutcome::Stale))
}

/// The turn's next model step after `written` (this transition's message,
/// not yet stored): the steer prompts waiting in the Session join the turn
/// here, after it. Reads first, then writes `written`, each steer's claim
/// and its `user` message. The step's `appended` holds the joined prompts.
pub(crate) fn join_steers(
    store: Store<'_>,
    head: &CommandRow,
    attempt: u32,
    now_ms: i64,
    steers: &[CommandRow],
    written: Pending,
) -> Result<Step, ApiError> {
    let joined = steers
        .iter()
        .map(|s| user_message(s, now_ms))
        .collect::<Result<Vec<_>, _>>()?;
    let unwritten: Vec<Pending> = std::iter::once(&written)
        .chain(&joined)
        .map(|p| Pending {
            body: p.body.clone(),
        })
        .collect();
    let prompt = prompt_of(head)?;
    let (context, window) = context(
        store,
        &head.session_id,
        Start::Tip,
        prompt.as_deref(),
        &unwritten,
    )?;
    store.insert_message(&head.session_id, &written.body)?;
    for (steer, prompt) in steers.iter().zip(&joined) {
        store.claim(steer, Some(&head.command_id), attempt, now_ms)?;
        store.insert_message(&head.session_id, &prompt.body)?;
    }
    Ok(Step {
        session_id: head.session_id.clone(),
        command_id: head.command_id.clone(),
        attempt,
        context,
        window,
        tool_calls: Vec::new(),
        appended: joined.into_iter().map(|p| p.body).collect(),
        meta: head.meta.clone(),
        work: Work::Turn,
        branch: None,
    })
}

/// Records a failed attempt: a retryable failure under the attempt limit
/// arms the durable retry timer; anything else settles the turn `failed`.
/// `metered`: what the failed model call reported, for its ledger row
/// (`None`: the attempt failed before any call).
#[allow(clippy::too_many_arguments)]
pub fn fail_attempt(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    attempt: u32,
    failure: &Failure,
    metered: Option<&Metered>,
    attempts: Attempts,
    retry_delay_ms: u64,
) -> Result<FailOutcome, ApiError> {
    let call = metered.map(|m| (Outcome::Failed, m));
    let outcome = on_model_call(ctx, session_id, command_id, attempt, call, |current| {
        let Current {
            store,
            now_ms,
            turn,
            head,
            ..
        } = current;
        let diagnostic = failure.diagnostic.as_str();
        if failure.retryable && attempt < attempts.max {
            let retry_at = now_ms.saturating_add(i64::try_from(retry_delay_ms).unwrap_or(i64::MAX));
            store.schedule_retry(head, retry_at, diagnostic)?;
            return Ok(FailOutcome::Retry { retry_at });
        }
        let diagnostic = if failure.retryable {
            format!(
                "{diagnostic} (attempt {attempt} of {}; no attempts left)",
                attempts.max
            )
        } else {
            diagnostic.to_owned()
        };
        let settled = settle_turn(
            store,
            turn,
            Terminal::Failed,
            None,
            Some(&diagnostic),
            now_ms,
        )?;
        Ok(FailOutcome::Settled(settled))
    })?;
    Ok(outcome.unwrap_or(FailOutcome::Stale))
}

/// The earliest moment reconciliation has work: `now_ms` when a turn can be
/// claimed or resumed now, the earliest retry timer otherwise, `None` when
/// nothing waits. Live turns are the host's to watch.
pub fn next_deadline(
    store: Store<'_>,
    now_ms: i64,
    is_live: &dyn Fn(&str) -> bool,
) -> Result<Option<i64>, ApiError> {
    let runnable = store.runnable()?;
    if runnable.iter().any(|c| c.state == State::Pending) {
        return Ok(Some(now_ms));
    }
    let mut earliest: Option<i64> = None;
    for head in runnable.iter().filter(|c| c.turn_id.is_none()) {
        if is_live(&head.command_id) {
            continue;
        }
        let due = head.retry_at.unwrap_or(now_ms).max(now_ms);
        earliest = Some(earliest.map_or(due, |e| e.min(due)));
    }
    Ok(earliest)
}

/// Settles every command of a turn with one shared outcome.
pub(crate) fn settle_turn(
    store: Store<'_>,
    turn: &[CommandRow],
    terminal: Terminal,
    answer: Option<(Option<&str>, Option<Usage>, u32)>,
    diagnostic: Option<&str>,
    now_ms: i64,
) -> Result<Vec<Settlement>, ApiError> {
    settle_with_meta(store, turn, terminal, answer, diagnostic, None, now_ms)
}

/// [`settle_turn`], recording the host metadata of the command that caused
/// it (a cancellation's) on each settlement. A running turn that ends with
/// calls still open closes each with a `tool` message saying how it ended
/// ([`tools::close_open_calls`]), in this same write, so no later context
/// finds a call without its result; the head's settlement carries them to
/// publish.
pub(crate) fn settle_with_meta(
    store: Store<'_>,
    turn: &[CommandRow],
    terminal: Terminal,
    answer: Option<(Option<&str>, Option<Usage>, u32)>,
    diagnostic: Option<&str>,
    meta: Option<&str>,
    now_ms: i64,
) -> Result<Vec<Settlement>, ApiError> {
    let meta: Option<serde_json::Value> = meta
        .map(serde_json::from_str)
        .transpose()
        .map_err(internal)?;
    // The running head among the commands (an abort also settles queued
    // prompts, which head no turn yet).
    let head = turn
        .iter()
        .find(|c| c.turn_id.is_none() && c.state == State::Running);
    let mut progress = match head {
        Some(head) => tools::Progress::parse(head.usage.as_deref())?,
        None => tools::Progress::default(),
    };
    // A cancelled turn with no call open and no retry due may be in its
    // model call: that call is counted once, here, as unknown (its
    // outcome is dropped when the host stops it).
    // A turn a budget paused is in no call: its pause ends with it.
    let paused = match head.filter(|_| terminal == Terminal::Cancelled) {
        Some(head) => budget::paused_of(store.sql(), &head.session_id)?
            .filter(|p| p.command_id == head.command_id)
            .is_some(),
        None => false,
    };
    if paused {
        if let Some(head) = head {
            budget::unpause(store.sql(), &head.session_id)?;
        }
    }
    if let Some(head) = head.filter(|h| {
        terminal == Terminal::Cancelled
            && !paused
            && h.retry_at.is_none()
            && progress.open.is_empty()
    }) {
        let call = usage::Call {
            session_id: &head.session_id,
            command_id: &head.command_id,
            attempt: head.attempt,
        };
        usage::record(store.sql(), call, Outcome::Unknown, None, None, now_ms)?;
    }
    let mut closing = match head {
        Some(head) => tools::close_open_calls(store, head, &mut progress, terminal, now_ms)?,
        None => Vec::new(),
    };
    let mut settled = Vec::with_capacity(turn.len());
    for command in turn {
        let mut settlement = Settlement::new(&command.command_id, terminal, answer, diagnostic);
        if let Some(head) = head {
            let of_turn = command.seq == head.seq
                || command.turn_id.as_deref() == Some(head.command_id.as_str());
            // A turn that ends without an answer (failed, interrupted,
            // cancelled) still reports the tool calls it made.
            if of_turn && answer.is_none() {
                settlement.tool_call_count = progress.tool_calls;
            }
            if command.seq == head.seq {
                settlement.appended = std::mem::take(&mut closing);
            }
        }
        settlement.meta = meta.clone();
        store.settle(command, terminal, &settlement.to_json()?, now_ms)?;
        settled.push(settlement);
    }
    Ok(settled)
}

/// What a transition on a current turn gets (see [`on_current_turn`]).
pub(crate) struct Current<'t, 's> {
    pub store: Store<'s>,
    pub now_ms: i64,
    pub ids: &'t mut dyn IdSource,
    /// The head, then the steer prompts that joined it.
    pub turn: &'t [CommandRow],
    pub head: &'t CommandRow,
    /// The Session's pending commands, FIFO (read with the turn).
    pub pending: &'t [CommandRow],
}

impl Current<'_, '_> {
    /// The pending `steer` prompts, FIFO: they join the turn at its next
    /// step.
    pub fn steers(&self) -> Vec<CommandRow> {
        self.pending
            .iter()
            .filter(|c| {
                c.kind == Kind::Prompt
                    && prompt_input(&c.input).is_ok_and(|i| i.delivery == Delivery::Steer)
            })
            .cloned()
            .collect()
    }
}

/// Runs `body` as one transition on the turn headed by `command_id` while
/// it runs under `attempt`, with the spans the host timed for it
/// (`ctx.spans`, taken); `None`, with nothing written, when that attempt
/// is no longer current (cancelled, or superseded after a restart).
pub(crate) fn on_current_turn<T>(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    attempt: u32,
    body: impl FnOnce(Current<'_, '_>) -> Result<T, ApiError>,
) -> Result<Option<T>, ApiError> {
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    let spans = std::mem::take(&mut ctx.spans);
    let ids = &mut *ctx.ids;
    atomically(store.sql(), || {
        let (turn, pending): (Vec<_>, Vec<_>) = store
            .unsettled(session_id)?
            .into_iter()
            .filter(|c| {
                c.state == State::Pending
                    || c.command_id == command_id
                    || c.turn_id.as_deref() == Some(command_id)
            })
            .partition(|c| c.state == State::Running);
        let Some(head) = current_head(&turn, command_id, attempt) else {
            return Ok(None);
        };
        let outcome = body(Current {
            store,
            now_ms,
            ids,
            turn: &turn,
            head,
            pending: &pending,
        })?;
        // The spans the outcome ends are written with it.
        crate::trace::stage(store.sql(), &spans, now_ms)?;
        Ok(Some(outcome))
    })
}

/// [`on_current_turn`] for the write recording a model call's outcome:
/// the call's ledger row (`call`; `None`: no call was made) is staged with
/// the body's writes, so each call is counted once, with its outcome.
pub(crate) fn on_model_call<T>(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    attempt: u32,
    call: Option<(Outcome, &Metered)>,
    body: impl FnOnce(Current<'_, '_>) -> Result<T, ApiError>,
) -> Result<Option<T>, ApiError> {
    let (sql, now_ms) = (ctx.store.sql(), ctx.now_ms);
    let charged = ctx.charged.take();
    on_current_turn(ctx, session_id, command_id, attempt, |current| {
        let out = body(current)?;
        if let Some((outcome, metered)) = call {
            let of = usage::Call {
                session_id,
                command_id,
                attempt,
            };
            usage::record(sql, of, outcome, Some(metered), charged, now_ms)?;
        }
        Ok(out)
    })
}

/// A model call's ledger row in a transition of its own, for a call whose
/// outcome writes nothing else (refused as too long: the turn compacts
/// first). `None`: the attempt is no longer current; nothing was written.
pub fn record_call(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    attempt: u32,
    call: (Outcome, &Metered),
) -> Result<Option<()>, ApiError> {
    on_model_call(ctx, session_id, command_id, attempt, Some(call), |_| Ok(()))
}

/// The head of `turn` if it is running under `attempt`.
pub(crate) fn current_head<'t>(
    turn: &'t [CommandRow],
    command_id: &str,
    attempt: u32,
) -> Option<&'t CommandRow> {
    turn.iter()
        .find(|c| c.command_id == command_id)
        .filter(|h| {
            h.state == State::Running
                && h.attempt == attempt
                && matches!(h.kind, Kind::Prompt | Kind::Retry | Kind::Compact)
        })
}

/// A message about to be written, not yet readable from the store.
#[derive(Clone)]
pub(crate) struct Pending {
    pub(crate) body: String,
}

/// A queued command about to start its Session's next run, read first
/// ([`Claim::read`]: a prompt's user message and the context it starts
/// with), then written ([`Claim::write`]).
pub(crate) struct Claim {
    head: CommandRow,
    /// The `user` message of a prompt (a retry and a compaction write none).
    prompt: Option<Pending>,
    context: Vec<ModelItem>,
    window: Window,
    branch: Option<Option<String>>,
}

impl Claim {
    /// The reads of claiming `head` (a prompt, a retry or a compaction);
    /// `written`: messages the same transition appends at the selected tip
    /// first (a settling turn's answer, a compaction entry). A command with
    /// an anchor starts a new branch there: its context is the path ending
    /// at the anchor (a retry: the user message it answers again), then its
    /// own message. A compaction has no anchor: it summarises the selected
    /// branch.
    pub(crate) fn read(
        store: Store<'_>,
        head: CommandRow,
        now_ms: i64,
        written: &[Pending],
    ) -> Result<Claim, ApiError> {
        let prompt = match head.kind {
            Kind::Prompt => Some(user_message(&head, now_ms)?),
            _ => None,
        };
        let (start, written) = match head.anchor {
            Some(at) => (Start::At(at), &[][..]),
            None => (Start::Tip, written),
        };
        let unwritten: Vec<Pending> = written.iter().chain(&prompt).cloned().collect();
        let kept = prompt_of(&head)?;
        let (context, window) =
            context(store, &head.session_id, start, kept.as_deref(), &unwritten)?;
        let branch = match head.kind {
            Kind::Compact => None,
            _ => prompt_input(&head.input)?
                .branch_entry()
                .map(|e| e.map(str::to_owned)),
        };
        Ok(Claim {
            head,
            prompt,
            context,
            window,
            branch,
        })
    }

    /// The writes: the claim (attempt 1), then the prompt's `user` message
    /// (a child of the anchor when there is one), or for a retry the
    /// selection of the message it answers again, so its first message, and
    /// a run resumed after a crash, continue there.
    pub(crate) fn write(self, store: Store<'_>, now_ms: i64) -> Result<Step, ApiError> {
        let Claim {
            head,
            prompt,
            context,
            window,
            branch,
        } = self;
        store.claim(&head, None, 1, now_ms)?;
        match &prompt {
            Some(prompt) => {
                store.insert_message_after(&head.session_id, &prompt.body, head.anchor)?
            }
            None if head.kind == Kind::Retry => store.set_head(&head.session_id, head.anchor)?,
            None => {}
        }
        Ok(Step {
            session_id: head.session_id.clone(),
            work: Work::of(&head)?,
            command_id: head.command_id,
            attempt: 1,
            context,
            window,
            tool_calls: Vec::new(),
            appended: prompt.into_iter().map(|p| p.body).collect(),
            meta: head.meta,
            branch,
        })
    }
}

/// The `user` message a prompt becomes when its turn starts.
fn user_message(command: &CommandRow, now_ms: i64) -> Result<Pending, ApiError> {
    let input = prompt_input(&command.input)?;
    let body = user_message_body(
        &command.command_id,
        command.request_id.as_deref(),
        &input.text,
        &input.images,
        command.meta.as_deref(),
        now_ms,
    )?;
    Ok(Pending { body })
}

fn internal(e: serde_json::Error) -> ApiError {
    ApiError::Internal(format!("stored json: {e}"))
}
