//! The tool steps of a turn (seed: the runtime "executes the model and
//! tools"). Persist, then act: a step's calls are recorded (the assistant
//! message and the turn's open calls, one write) before any runs; each
//! outcome is then recorded as a `tool` message that closes its call. A turn
//! interrupted mid-tool resumes from that record: a call with no started
//! unsafe operation runs (again); a call under which an operation unsafe to
//! replay started is never run again, and the model is told its outcome is
//! unknown ([`OpenCall::started`], written before such an operation runs).
//!
//! The turn's running totals ([`Progress`]: usage, tool steps, tool calls,
//! open calls) live in the head command's `usage` column as JSON, so every
//! fact recovery needs is in the row it already reads.

use super::{join_steers, on_current_turn, on_model_call, settle_turn, Current, Pending, Step};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::limits::{TOOL_CALL_ID_BYTES_MAX, TOOL_STEPS_PER_TURN_MAX};
use crate::model::{Answer, Image, ToolCall, Usage};
use crate::settlement::Settlement;
use crate::store::{CommandRow, Store, Terminal};
use crate::transcript::{message_body, Message, Protocol, RecordedCall, Role};
use crate::usage::Outcome;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The running totals of a turn, stored on its head command.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cache_read_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cache_write_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reasoning_tokens: Option<u64>,
    /// Model steps that called tools.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_steps: u32,
    /// Tool calls of the turn, all steps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_calls: u32,
    /// Calls of the last step with no recorded outcome yet, in call order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open: Vec<OpenCall>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Progress {
    pub fn parse(stored: Option<&str>) -> Result<Progress, ApiError> {
        stored
            .map(crate::json::from_text)
            .transpose()
            .map(Option::unwrap_or_default)
            .map_err(|e| ApiError::Internal(format!("stored turn progress: {e}")))
    }

    pub fn usage(&self) -> Option<Usage> {
        Some(Usage {
            input_tokens: self.input_tokens?,
            output_tokens: self.output_tokens?,
            cache_read_tokens: self.cache_read_tokens,
            cache_write_tokens: self.cache_write_tokens,
            reasoning_tokens: self.reasoning_tokens,
        })
    }

    pub fn add_usage(&mut self, step: Option<Usage>) {
        if let Some(step) = step {
            let sum = match self.usage() {
                Some(a) => a.plus(step),
                None => step,
            };
            self.input_tokens = Some(sum.input_tokens);
            self.output_tokens = Some(sum.output_tokens);
            self.cache_read_tokens = sum.cache_read_tokens;
            self.cache_write_tokens = sum.cache_write_tokens;
            self.reasoning_tokens = sum.reasoning_tokens;
        }
    }

    pub fn to_json(&self) -> Result<String, ApiError> {
        serde_json::to_string(self).map_err(|e| ApiError::Internal(e.to_string()))
    }
}

/// A recorded call whose outcome is not recorded yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenCall {
    pub id: String,
    /// The tool the model called (`execute`, or a direct tool).
    pub name: String,
    /// The arguments, a JSON object.
    pub input: Map<String, Value>,
    /// Why the call cannot run (arguments that are not a JSON object); its
    /// outcome is this error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// An operation unsafe to replay started under this call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub started: bool,
}

/// One call's outcome: `content` and `images` are what the model sees
/// (images checked: [`Image::check_tool_images`]); `data` the display
/// payload it never sees.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
    pub data: Option<Box<RawValue>>,
    pub images: Vec<Image>,
}

impl ToolOutput {
    pub fn error(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            is_error: true,
            data: None,
            images: Vec::new(),
        }
    }
}

/// The outcome of [`record_calls`].
#[derive(Debug, Clone, PartialEq)]
pub enum CallsOutcome {
    /// Recorded: run `calls` in order, recording each outcome.
    /// `message` is the stored assistant message, to publish.
    Run {
        message: String,
        calls: Vec<OpenCall>,
    },
    /// The model asked for tools past `TOOL_STEPS_PER_TURN_MAX` steps: the
    /// turn settled `failed`.
    Settled(Vec<Settlement>),
    Stale,
}

/// The outcome of [`record_result`].
#[derive(Debug, Clone, PartialEq)]
pub enum ResultOutcome {
    /// `message` is the stored `tool` message; `next` the model step to
    /// run once the step's last call is closed (with the steer prompts that
    /// joined the turn after it, in its `appended`).
    Recorded {
        message: String,
        next: Option<Box<Step>>,
    },
    /// The attempt is no longer current, or the call is already closed.
    Stale,
}

/// Records a model step that called tools: its assistant message (text,
/// calls, protocol) and the calls as open, in one write.
pub fn record_calls(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    attempt: u32,
    answer: &Answer,
    protocol: &Protocol,
) -> Result<CallsOutcome, ApiError> {
    let call = Some((Outcome::Answered, &answer.metered()));
    let outcome = on_model_call(ctx, session_id, command_id, attempt, call, |current| {
        let Current {
            store,
            now_ms,
            ids,
            turn,
            head,
            ..
        } = current;
        let mut progress = Progress::parse(head.usage.as_deref())?;
        if progress.tool_steps >= TOOL_STEPS_PER_TURN_MAX {
            let diagnostic = format!(
                "the model asked for tools after {TOOL_STEPS_PER_TURN_MAX} tool steps; \
                 a turn takes at most {TOOL_STEPS_PER_TURN_MAX}"
            );
            let settled = settle_turn(
                store,
                turn,
                Terminal::Failed,
                None,
                Some(&diagnostic),
                now_ms,
            )?;
            return Ok(CallsOutcome::Settled(settled));
        }
        let open = open_calls(&answer.tool_calls);
        let recorded: Vec<RecordedCall> = open
            .iter()
            .map(|c| RecordedCall {
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.input.clone(),
            })
            .collect();
        let body = message_body(&Message {
            entry_id: &ids.next_id("msg_"),
            role: Role::Assistant,
            text: &answer.text,
            command_id: Some(command_id),
            usage: answer.usage,
            tool_calls: Some(&recorded),
            protocol: Some(protocol),
            created_at: now_ms,
            ..Default::default()
        })?;
        progress.add_usage(answer.usage);
        progress.tool_steps += 1;
        progress.tool_calls = progress.tool_calls.saturating_add(open.len() as u32);
        progress.open = open.clone();
        store.insert_message(session_id, &body)?;
        store.set_usage(head, &progress.to_json()?)?;
        Ok(CallsOutcome::Run {
            message: body,
            calls: open,
        })
    })?;
    Ok(outcome.unwrap_or(CallsOutcome::Stale))
}

/// The calls of an answer as they will run: arguments that are not a JSON
/// object refuse the call (recorded as `{}`); an id missing, too long or
/// repeated in the step is replaced, so every result answers one call.
fn open_calls(calls: &[ToolCall]) -> Vec<OpenCall> {
    let mut open: Vec<OpenCall> = Vec::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        let (input, refused) = match call.input() {
            Ok(input) => (input, None),
            Err(why) => (Map::new(), Some(why.to_string())),
        };
        let id_ok = !call.id.is_empty()
            && call.id.len() <= TOOL_CALL_ID_BYTES_MAX
            && call
                .id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            && !open.iter().any(|c| c.id == call.id);
        open.push(OpenCall {
            id: if id_ok {
                call.id.clone()
            } else {
                format!("call_{i}")
            },
            name: call.name.clone(),
            input,
            refused,
            started: false,
        });
    }
    open
}

/// Marks that an operation unsafe to replay is about to run under call
/// `call_id` (written before it runs). `false`: the attempt or the call is
/// no longer current; the operation must not run.
pub fn mark_started(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    attempt: u32,
    call_id: &str,
) -> Result<bool, ApiError> {
    let outcome = on_current_turn(ctx, session_id, command_id, attempt, |current| {
        let Current { store, head, .. } = current;
        let mut progress = Progress::parse(head.usage.as_deref())?;
        let Some(call) = progress.open.iter_mut().find(|c| c.id == call_id) else {
            return Ok(false);
        };
        if !call.started {
            call.started = true;
            store.set_usage(head, &progress.to_json()?)?;
        }
        Ok(true)
    })?;
    Ok(outcome.unwrap_or(false))
}

/// Records the outcome of call `call_id` as a `tool` message and closes the
/// call; after the step's last call, answers the next model step.
pub fn record_result(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    attempt: u32,
    call_id: &str,
    output: &ToolOutput,
) -> Result<ResultOutcome, ApiError> {
    let outcome = on_current_turn(ctx, session_id, command_id, attempt, |current| {
        let steers = current.steers();
        let Current {
            store,
            now_ms,
            ids,
            head,
            ..
        } = current;
        let mut progress = Progress::parse(head.usage.as_deref())?;
        let Some(at) = progress.open.iter().position(|c| c.id == call_id) else {
            return Ok(ResultOutcome::Stale);
        };
        let call = progress.open.remove(at);
        let body = message_body(&Message {
            entry_id: &ids.next_id("msg_"),
            role: Role::Tool,
            text: &output.content,
            command_id: Some(command_id),
            tool_call_id: Some(&call.id),
            tool_name: Some(&call.name),
            is_error: output.is_error,
            data: output.data.as_deref(),
            images: &output.images,
            created_at: now_ms,
            ..Default::default()
        })?;
        let written = Pending { body: body.clone() };
        let next = if progress.open.is_empty() {
            // The step's last result: steer prompts join the turn here.
            Some(Box::new(join_steers(
                store, head, attempt, now_ms, &steers, written,
            )?))
        } else {
            store.insert_message(session_id, &written.body)?;
            None
        };
        store.set_usage(head, &progress.to_json()?)?;
        Ok(ResultOutcome::Recorded {
            message: body,
            next,
        })
    })?;
    Ok(outcome.unwrap_or(ResultOutcome::Stale))
}

/// How a recovered call proceeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    Run,
    /// Never run again: its outcome is unknown.
    OutcomeUnknown,
}

/// Whether call `call` may run, given whether everything it would run is
/// safe to replay. A call that never started an unsafe operation runs (it
/// did nothing that cannot be repeated).
pub fn recovery(call: &OpenCall, replay_safe: bool) -> Recovery {
    if call.started && !replay_safe {
        Recovery::OutcomeUnknown
    } else {
        Recovery::Run
    }
}

/// What the model is told about a call [`Recovery::OutcomeUnknown`].
pub fn outcome_unknown(call: &OpenCall) -> ToolOutput {
    ToolOutput::error(format!(
        "outcome unknown: the runtime restarted while tool call `{}` (`{}`) was running an \
         operation that is not safe to repeat; it was not run again. Check its effect before \
         retrying.",
        call.id, call.name
    ))
}

/// What the model is told about a call [`Recovery::OutcomeUnknown`] whose
/// files patch was undone after the restart (`undone`: how, as
/// `files::journal::Undone::describe` says it). A direct tool did nothing
/// else, so its outcome is known now; `execute`'s other effects are not.
pub fn undone_output(call: &OpenCall, execute: bool, undone: &str) -> ToolOutput {
    if execute {
        let unknown = outcome_unknown(call).content;
        return ToolOutput::error(format!(
            "{unknown} The files patch it was writing when the runtime restarted was {undone}."
        ));
    }
    ToolOutput::error(format!(
        "the runtime restarted while tool call `{}` (`{}`) was writing its files; it was not run \
         again, and its patch was {undone}.",
        call.id, call.name
    ))
}

/// What the model and the transcript are told about a call whose turn
/// settled `terminal` before its outcome was recorded.
pub fn ended_output(call: &OpenCall, terminal: Terminal) -> ToolOutput {
    let ended = match terminal {
        Terminal::Cancelled => "was cancelled",
        Terminal::Interrupted => "was interrupted (runtime restarts reached its attempt limit)",
        Terminal::Failed => "failed",
        Terminal::Completed => "ended",
    };
    if call.started {
        return ToolOutput::error(format!(
            "outcome unknown: the turn {ended} while tool call `{}` (`{}`) was running an \
             operation that is not safe to repeat; it may have taken effect and was not run \
             again. Check its effect before retrying.",
            call.id, call.name
        ));
    }
    match terminal {
        Terminal::Cancelled => {
            ToolOutput::error("cancelled: the turn was cancelled before this call finished")
        }
        _ => ToolOutput::error(format!(
            "outcome unknown: the turn {ended} before this call finished; it was not run again"
        )),
    }
}

/// Closes the calls `progress` still holds open as `head`'s turn settles
/// `terminal`: one `tool` message each ([`ended_output`]), in call order,
/// and no open call left on the head. Returns the messages (stored JSON).
/// Ids are derived from the head and the call (unique: a turn settles
/// once), since a settlement may be written without an id source.
pub(crate) fn close_open_calls(
    store: Store<'_>,
    head: &CommandRow,
    progress: &mut Progress,
    terminal: Terminal,
    now_ms: i64,
) -> Result<Vec<String>, ApiError> {
    if progress.open.is_empty() {
        return Ok(Vec::new());
    }
    let mut closing = Vec::with_capacity(progress.open.len());
    for call in std::mem::take(&mut progress.open) {
        let output = ended_output(&call, terminal);
        let body = message_body(&Message {
            entry_id: &format!("msg_{}_{}", head.command_id, call.id),
            role: Role::Tool,
            text: &output.content,
            command_id: Some(&head.command_id),
            tool_call_id: Some(&call.id),
            tool_name: Some(&call.name),
            is_error: true,
            created_at: now_ms,
            ..Default::default()
        })?;
        store.insert_message(&head.session_id, &body)?;
        closing.push(body);
    }
    store.set_usage(head, &progress.to_json()?)?;
    Ok(closing)
}
