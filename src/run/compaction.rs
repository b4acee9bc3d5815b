//! Compaction (seed: compactions are work `latestPending` never returns,
//! and "compaction inputs use only the message content"). A summary of a
//! Session's model context, stored as a `compaction` entry, stands for the
//! messages before it in every later context: `context.rs` reads no message
//! older than the newest entry (but a running turn's prompt). The messages
//! stay stored and readable. Three triggers, all run by the driver
//! (`driver.rs`, which decides when): a `compact` command, queued FIFO like
//! a prompt; a turn whose estimated input would pass the trigger of the
//! model's stated window (before that model call); a provider refusing a
//! turn's call as too long (once, then the call is made again). This module
//! builds the summary request and records its answer.

use super::context::{context, Range, Window};
use super::tools::Progress;
use super::{
    on_current_turn, on_model_call, prompt_of, settle_turn, Claim, Current, Pending, Step, Work,
};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::limits::{
    COMPACTION_INPUT_BYTES_MAX, COMPACTION_MESSAGE_BYTES_MAX, COMPACTION_PROMPT_BYTES_MAX,
    COMPACTION_SUMMARY_BYTES_MAX, COMPACTION_TRIGGER_PERCENT_DEFAULT,
    COMPACTION_TRIGGER_PERCENT_MAX, COMPACTION_TRIGGER_PERCENT_MIN, CONTEXT_BYTES_PER_TOKEN,
    CONTEXT_WINDOW_TOKENS_MAX, CONTEXT_WINDOW_TOKENS_MIN, MODELS_OFFERED_MAX,
};
use crate::model::preference::parse_address;
use crate::model::{Answer, ModelItem, ModelMessage, ModelSpec, Role, Usage};
use crate::settlement::Settlement;
use crate::store::path::Start;
use crate::store::{CommandRow, Store, Terminal};
use crate::transcript::{message_body, Compacted, Message, Role as Author, Trigger};
use crate::usage::Outcome;

/// The compaction prompt (the summary call's system prompt) when the host
/// states none.
pub const DEFAULT_PROMPT: &str = "You compact a conversation between a user and an AI \
assistant that uses tools, so that it can go on within the model's context window. Write \
the summary that will stand for the conversation from now on: the user's goals and requests \
in their words where it matters, decisions and constraints, facts learned (names, paths, \
identifiers, values, errors), what was done and what the tools returned that still matters, \
and what is unfinished with the next step. Keep a previous summary's content that still \
holds. Be specific and brief; answer with the summary only, no preamble.";

/// Why compactions are refused in a build without the `compaction` feature.
pub const UNAVAILABLE: &str = "this wasm was built without the `compaction` Cargo feature (a \
    lean build, SHIITAKE_LEAN=1), which runs compactions (the compact command, a stated context \
    window); build with default features";

/// A model's stated context window and when a turn compacts before a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextWindow {
    pub tokens: u64,
    /// Compact when the estimated input passes this percentage.
    pub trigger_percent: u64,
}

impl ContextWindow {
    /// Whether a model call with this context compacts first: its estimated
    /// input passes the trigger, or it is at the safety bounds (which would
    /// otherwise leave messages out, the summary among them).
    pub fn due(&self, window: &Window) -> bool {
        window.full
            || u128::from(window.tokens) * 100
                > u128::from(self.tokens) * u128::from(self.trigger_percent)
    }

    /// Bytes of transcript a summary call is sent: half the window.
    pub fn input_bytes(&self) -> usize {
        let half = self.tokens.saturating_mul(CONTEXT_BYTES_PER_TOKEN) / 2;
        usize::try_from(half).map_or(COMPACTION_INPUT_BYTES_MAX, |b| {
            b.min(COMPACTION_INPUT_BYTES_MAX)
        })
    }
}

/// What the host states for compaction: each model's context window (a
/// model not listed has none: no automatic compaction), the trigger and the
/// compaction prompt (`None`: [`DEFAULT_PROMPT`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub windows: Vec<(ModelSpec, u64)>,
    pub trigger_percent: u64,
    pub prompt: Option<std::rc::Rc<str>>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            windows: Vec::new(),
            trigger_percent: COMPACTION_TRIGGER_PERCENT_DEFAULT,
            prompt: None,
        }
    }
}

/// Why the host's compaction settings are refused (a 503
/// `host_misconfigured`; the host names where it read them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// This build has no `compaction` feature.
    #[error("{UNAVAILABLE}")]
    Unavailable,
    #[error(transparent)]
    Address(#[from] crate::model::Refusal),
    /// The item, shortened.
    #[error("`{0}`: expected provider/model=tokens")]
    Item(String),
    #[error(
        "the context window of `{address}`: {CONTEXT_WINDOW_TOKENS_MIN} to \
         {CONTEXT_WINDOW_TOKENS_MAX} tokens, got {tokens}"
    )]
    Window { address: String, tokens: u64 },
    #[error("the context window of `{0}` is stated twice")]
    Twice(String),
    #[error("at most {MODELS_OFFERED_MAX} context windows")]
    TooMany,
    /// The trigger as given (JSON).
    #[error(
        "the compaction trigger is a fraction of the window from 0.{COMPACTION_TRIGGER_PERCENT_MIN} \
         to 1, got {0}"
    )]
    Trigger(serde_json::Value),
    /// The prompt's length in bytes.
    #[error("the compaction prompt: 1 to {COMPACTION_PROMPT_BYTES_MAX} bytes, got {0}")]
    Prompt(usize),
}

impl Settings {
    /// The stated window of `spec`, with the trigger.
    pub fn window(&self, spec: &ModelSpec) -> Option<ContextWindow> {
        self.windows
            .iter()
            .find(|(s, _)| s == spec)
            .map(|&(_, tokens)| ContextWindow {
                tokens,
                trigger_percent: self.trigger_percent,
            })
    }

    /// Windows as `(address, tokens)` pairs: each address parsed, each
    /// window within [`CONTEXT_WINDOW_TOKENS_MIN`]..=[`CONTEXT_WINDOW_TOKENS_MAX`],
    /// at most [`MODELS_OFFERED_MAX`], no address twice.
    pub fn windows<'a>(
        pairs: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> Result<Vec<(ModelSpec, u64)>, SettingsError> {
        if !cfg!(feature = "compaction") {
            return match pairs.into_iter().next() {
                None => Ok(Vec::new()),
                Some(_) => Err(SettingsError::Unavailable),
            };
        }
        let mut out: Vec<(ModelSpec, u64)> = Vec::new();
        for (address, tokens) in pairs {
            let spec = parse_address(address)?;
            if !(CONTEXT_WINDOW_TOKENS_MIN..=CONTEXT_WINDOW_TOKENS_MAX).contains(&tokens) {
                return Err(SettingsError::Window {
                    address: address.to_owned(),
                    tokens,
                });
            }
            if out.iter().any(|(s, _)| *s == spec) {
                return Err(SettingsError::Twice(address.to_owned()));
            }
            if out.len() == MODELS_OFFERED_MAX {
                return Err(SettingsError::TooMany);
            }
            out.push((spec, tokens));
        }
        Ok(out)
    }

    /// `SHIITAKE_CONTEXT_WINDOWS`: comma-separated `provider/model=tokens`.
    pub fn parse_windows(list: &str) -> Result<Vec<(ModelSpec, u64)>, SettingsError> {
        if !cfg!(feature = "compaction") {
            return Self::windows(Some(("", 0)).filter(|_| !list.trim().is_empty()));
        }
        let mut pairs = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (address, tokens) = item
                .rsplit_once('=')
                .and_then(|(a, t)| Some((a.trim(), t.trim().parse::<u64>().ok()?)))
                .ok_or_else(|| SettingsError::Item(crate::text::shorten(item).to_owned()))?;
            pairs.push((address, tokens));
        }
        Self::windows(pairs)
    }

    /// The trigger, a fraction of the window, in percent. A JSON number
    /// (the env's text is read as one): no float parser or printer of its
    /// own is linked.
    pub fn trigger(fraction: &serde_json::Value) -> Result<u64, SettingsError> {
        if !cfg!(feature = "compaction") {
            return Err(SettingsError::Unavailable);
        }
        let (min, max) = (
            COMPACTION_TRIGGER_PERCENT_MIN,
            COMPACTION_TRIGGER_PERCENT_MAX,
        );
        match fraction.as_f64().map(|f| (f * 100.0).round()) {
            Some(percent) if (min as f64..=max as f64).contains(&percent) => Ok(percent as u64),
            _ => Err(SettingsError::Trigger(fraction.clone())),
        }
    }

    /// The host's compaction prompt: not empty, at most
    /// [`COMPACTION_PROMPT_BYTES_MAX`].
    pub fn prompt(text: &str) -> Result<std::rc::Rc<str>, SettingsError> {
        if !cfg!(feature = "compaction") {
            return Err(SettingsError::Unavailable);
        }
        if text.trim().is_empty() || text.len() > COMPACTION_PROMPT_BYTES_MAX {
            return Err(SettingsError::Prompt(text.len()));
        }
        Ok(text.into())
    }
}

/// The summary call: its system prompt (`prompt`, the host's, else
/// [`DEFAULT_PROMPT`]) and one user message holding `context` (`window`'s)
/// as text: the previous summary, then the newest messages that fit in
/// `budget` bytes, each cut to [`COMPACTION_MESSAGE_BYTES_MAX`], tool calls
/// and results written out (a context holds no display payload), then the
/// command's `instructions`.
pub fn request(
    window: &Window,
    context: &[ModelItem],
    instructions: Option<&str>,
    prompt: Option<&str>,
    budget: usize,
) -> (String, Vec<ModelItem>) {
    let previous = window.summary.as_ref().map(|s| {
        format!(
            "The summary of the conversation before these messages:\n<summary>\n{}\n</summary>\n\n",
            s.text
        )
    });
    let instructions = instructions.map(|i| format!("\n\nInstructions for this summary: {i}"));
    let messages = &context[usize::from(window.summary.is_some())..];
    let mut room = budget.saturating_sub(
        previous.as_ref().map_or(0, String::len) + instructions.as_ref().map_or(0, String::len),
    );
    // Newest first, as many as fit.
    let mut lines = Vec::new();
    for item in messages.iter().rev() {
        let line = render(item);
        if line.len() + 2 > room {
            break;
        }
        room -= line.len() + 2;
        lines.push(line);
    }
    lines.reverse();
    let left_out = messages.len() - lines.len();
    let conversation = match left_out {
        0 => "The conversation to summarise:".to_owned(),
        n => format!("The conversation to summarise (its first {n} messages are left out):"),
    };
    let text = format!(
        "{}{conversation}\n<conversation>\n{}\n</conversation>{}",
        previous.unwrap_or_default(),
        lines.join("\n\n"),
        instructions.unwrap_or_default()
    );
    let system = prompt.unwrap_or(DEFAULT_PROMPT).to_owned();
    let items = vec![ModelItem::Message(ModelMessage {
        role: Role::User,
        text,
        images: Vec::new(),
    })];
    (system, items)
}

/// One context item as a summary call reads it.
fn render(item: &ModelItem) -> String {
    let images = |n: usize| " [image]".repeat(n);
    match item {
        ModelItem::Message(m) => {
            let who = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            format!("[{who}] {}{}", clip(&m.text), images(m.images.len()))
        }
        ModelItem::ToolCalls { text, calls } => {
            let mut out = format!("[assistant] {}", clip(text));
            for call in calls {
                out.push_str(&format!(
                    "\n[tool call {} {}] {}",
                    call.name,
                    call.id,
                    clip(&call.arguments)
                ));
            }
            out
        }
        ModelItem::ToolResult {
            call_id,
            name,
            content,
            is_error,
            images: shown,
        } => format!(
            "[tool result {name} {call_id}{}] {}{}",
            if *is_error { ", error" } else { "" },
            clip(content),
            images(shown.len())
        ),
    }
}

/// At most about [`COMPACTION_MESSAGE_BYTES_MAX`] of `text`: its start and
/// its end (where an output's outcome or error usually is).
fn clip(text: &str) -> String {
    if text.len() <= COMPACTION_MESSAGE_BYTES_MAX {
        return text.to_owned();
    }
    let head = text.floor_char_boundary(COMPACTION_MESSAGE_BYTES_MAX * 3 / 4);
    let tail = text.ceil_char_boundary(text.len() - COMPACTION_MESSAGE_BYTES_MAX / 4);
    format!(
        "{} … [{} bytes left out] … {}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

/// A summary to record: the model's answer, the messages it stands for
/// (the summarised context's [`Window::range`]), the compaction it
/// continues and why it ran.
pub struct Summarised<'a> {
    pub answer: &'a Answer,
    pub range: &'a Range,
    pub previous: Option<&'a str>,
    pub trigger: Trigger,
}

/// The outcome of [`record`].
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// The `compact` command settled (`entry`: the compaction entry, stored
    /// JSON, none when there was nothing to compact); `next` is the
    /// Session's next command, claimed in the same write.
    Settled {
        entry: Option<String>,
        settled: Vec<Settlement>,
        next: Option<Step>,
    },
    /// The turn compacted: its next model call sees `next.context`.
    Continue { entry: String, next: Step },
    /// Messages were written since the summarised context was read (an
    /// operator line): nothing is written; this is the context now.
    Changed {
        context: Vec<ModelItem>,
        window: Window,
    },
    /// The attempt is no longer current; nothing was written.
    Stale,
}

/// Records a compaction of the run headed by `command_id` in one write: the
/// `compaction` entry (the summary, cut to [`COMPACTION_SUMMARY_BYTES_MAX`])
/// and, for a `compact` command, its settlement (the summary call's usage;
/// no answer, the entry holds it) with the Session's next command claimed;
/// for a turn, the summary call's usage added to the turn's and the next
/// model step's context. `summarised` `None`: a `compact` command found
/// nothing to compact and settles `completed` without an entry.
pub fn record(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    attempt: u32,
    instructions: Option<&str>,
    summarised: Option<Summarised<'_>>,
) -> Result<Recorded, ApiError> {
    // The summary call's ledger row, whatever becomes of the summary.
    let metered = summarised.as_ref().map(|s| s.answer.metered());
    let call = metered.as_ref().map(|m| (Outcome::Answered, m));
    let outcome = on_model_call(ctx, session_id, command_id, attempt, call, |current| {
        let Current {
            store,
            now_ms,
            ids,
            turn,
            head,
            pending,
        } = current;
        let Some(s) = summarised else {
            let (settled, next) = settle_compact(store, turn, pending, None, None, now_ms)?;
            return Ok(Recorded::Settled {
                entry: None,
                settled,
                next,
            });
        };
        // Reads first. The summary stands for the context as stored now only
        // if nothing was written since it was read.
        let prompt = prompt_of(head)?;
        let (now_context, now_window) =
            context(store, session_id, Start::Tip, prompt.as_deref(), &[])?;
        if now_window.range.as_ref().map(|r| &r.through) != Some(&s.range.through) {
            return Ok(Recorded::Changed {
                context: now_context,
                window: now_window,
            });
        }
        let mut text = s.answer.text.trim().to_owned();
        crate::text::truncate(&mut text, COMPACTION_SUMMARY_BYTES_MAX);
        let compacted = Compacted {
            from: s.range.from.clone(),
            through: s.range.through.clone(),
            messages: s.range.messages,
            previous: s.previous.map(str::to_owned),
            trigger: s.trigger,
        };
        let entry = message_body(&Message {
            entry_id: &ids.next_id("cmp_"),
            role: Author::Compaction,
            text: &text,
            command_id: Some(command_id),
            usage: s.answer.usage,
            compacted: Some(&compacted),
            instructions,
            created_at: now_ms,
            ..Default::default()
        })?;
        let written = Pending {
            body: entry.clone(),
        };
        if s.trigger == Trigger::Command {
            let usage = s.answer.usage;
            let (settled, next) =
                settle_compact(store, turn, pending, Some(&written), usage, now_ms)?;
            return Ok(Recorded::Settled {
                entry: Some(entry),
                settled,
                next,
            });
        }
        let (context, window) = context(
            store,
            session_id,
            Start::Tip,
            prompt.as_deref(),
            std::slice::from_ref(&written),
        )?;
        store.insert_compaction(session_id, &entry)?;
        if s.answer.usage.is_some() {
            let mut progress = Progress::parse(head.usage.as_deref())?;
            progress.add_usage(s.answer.usage);
            store.set_usage(head, &progress.to_json()?)?;
        }
        Ok(Recorded::Continue {
            entry,
            next: Step {
                session_id: session_id.to_owned(),
                command_id: command_id.to_owned(),
                attempt,
                context,
                window,
                tool_calls: Vec::new(),
                appended: Vec::new(),
                meta: head.meta.clone(),
                work: Work::Turn,
                branch: None,
            },
        })
    })?;
    Ok(outcome.unwrap_or(Recorded::Stale))
}

/// Settles a `compact` command `completed` with the summary call's
/// `usage` (after writing its `entry`, if any), claiming the Session's next
/// command in the same write.
fn settle_compact(
    store: Store<'_>,
    turn: &[CommandRow],
    pending: &[CommandRow],
    entry: Option<&Pending>,
    usage: Option<Usage>,
    now_ms: i64,
) -> Result<(Vec<Settlement>, Option<Step>), ApiError> {
    let next = pending
        .first()
        .cloned()
        .map(|next| {
            Claim::read(
                store,
                next,
                now_ms,
                entry.map(std::slice::from_ref).unwrap_or_default(),
            )
        })
        .transpose()?;
    if let (Some(entry), Some(head)) = (entry, turn.first()) {
        store.insert_compaction(&head.session_id, &entry.body)?;
    }
    let settled = settle_turn(
        store,
        turn,
        Terminal::Completed,
        Some((None, usage, 0)),
        None,
        now_ms,
    )?;
    let next = next.map(|claim| claim.write(store, now_ms)).transpose()?;
    Ok((settled, next))
}

/// The context of the turn headed by `command_id` as stored now (its model
/// call took the one it had): what a refused call compacts. `None` when the
/// attempt is no longer current.
pub fn reread(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    command_id: &str,
    attempt: u32,
) -> Result<Option<(Vec<ModelItem>, Window)>, ApiError> {
    on_current_turn(ctx, session_id, command_id, attempt, |current| {
        let prompt = prompt_of(current.head)?;
        context(
            current.store,
            session_id,
            Start::Tip,
            prompt.as_deref(),
            &[],
        )
    })
}

/// The lean build (no `compaction` feature) refuses what would run one,
/// naming the feature: a stated window, trigger or prompt (the host answers
/// 503 `host_misconfigured`); no window stated is no compaction, as in
/// every build.
#[cfg(all(test, not(feature = "compaction")))]
#[test]
fn a_lean_build_refuses_compaction_settings_naming_the_feature() {
    let e = Settings::parse_windows("openai/gpt-4o=128000").unwrap_err();
    assert!(e.to_string().contains("`compaction` Cargo feature"), "{e}");
    assert!(Settings::windows([("openai/gpt-4o", 128_000)]).is_err());
    assert!(Settings::trigger(&serde_json::json!(0.8)).is_err());
    assert!(Settings::prompt("summarise").is_err());
    assert_eq!(Settings::parse_windows(" "), Ok(Vec::new()));
    assert_eq!(Settings::windows([]), Ok(Vec::new()));
}

#[cfg(all(test, feature = "compaction"))]
mod tests {
    use super::*;
    use crate::model::ToolCall;
    use crate::run::context::framed;
    use crate::run::Summary;

    #[test]
    fn the_hosts_settings_are_bounded_and_named() {
        let windows =
            Settings::parse_windows("openai/gpt-4o=128000, anthropic/claude=200000").unwrap();
        assert_eq!(windows.len(), 2);
        assert_eq!(windows[1].1, 200_000);
        for (bad, says) in [
            ("openai/gpt-4o", "expected provider/model=tokens"),
            ("openai/gpt-4o=lots", "expected provider/model=tokens"),
            ("openai/gpt-4o=100", "1024 to 100000000 tokens, got 100"),
            ("openai/a=2000,openai/a=3000", "stated twice"),
            ("nobody/a=2000", "unknown provider"),
        ] {
            let e = Settings::parse_windows(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(Settings::trigger(&serde_json::json!(0.8)), Ok(80));
        assert_eq!(Settings::trigger(&serde_json::json!(1)), Ok(100));
        for bad in [
            serde_json::json!(0.05),
            serde_json::json!(1.5),
            serde_json::json!("0.8"),
        ] {
            let e = Settings::trigger(&bad).unwrap_err().to_string();
            assert!(e.ends_with(&format!("got {bad}")), "{e}");
        }
        assert!(Settings::prompt(" ").is_err());
        assert!(Settings::prompt(&"p".repeat(COMPACTION_PROMPT_BYTES_MAX + 1)).is_err());
        let settings = Settings {
            windows,
            ..Settings::default()
        };
        let spec = ModelSpec::parse("openai/gpt-4o").unwrap();
        assert_eq!(
            settings.window(&spec),
            Some(ContextWindow {
                tokens: 128_000,
                trigger_percent: COMPACTION_TRIGGER_PERCENT_DEFAULT
            })
        );
        assert_eq!(
            settings.window(&ModelSpec::parse("openai/other").unwrap()),
            None
        );
    }

    #[test]
    fn a_call_is_due_past_the_trigger_or_at_the_bounds() {
        let w = ContextWindow {
            tokens: 1_000,
            trigger_percent: 80,
        };
        let window = |tokens, full| Window {
            tokens,
            full,
            ..Window::default()
        };
        assert!(!w.due(&window(800, false)));
        assert!(w.due(&window(801, false)));
        assert!(w.due(&window(1, true)));
        assert_eq!(w.input_bytes(), 2_000, "half the window at 4 bytes a token");
        let huge = ContextWindow {
            tokens: 100_000_000,
            trigger_percent: 80,
        };
        assert_eq!(huge.input_bytes(), COMPACTION_INPUT_BYTES_MAX);
    }

    fn user(text: &str) -> ModelItem {
        ModelItem::Message(ModelMessage {
            role: Role::User,
            text: text.into(),
            images: Vec::new(),
        })
    }

    #[test]
    fn the_summary_request_writes_the_context_out_newest_first_within_its_budget() {
        let summary = Summary {
            entry_id: "cmp_1".into(),
            text: "before".into(),
        };
        let window = Window {
            summary: Some(summary),
            ..Window::default()
        };
        let result = format!("start {} end", "r".repeat(20 * 1024));
        let context = vec![
            framed("before"),
            user("old question"),
            ModelItem::ToolCalls {
                text: "reading".into(),
                calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "read_blob".into(),
                    arguments: "{}".into(),
                }],
            },
            ModelItem::ToolResult {
                call_id: "c1".into(),
                name: "read_blob".into(),
                content: result,
                is_error: false,
                images: Vec::new(),
            },
            user("new question"),
        ];
        let (system, items) = request(&window, &context, Some("keep names"), None, 1_000_000);
        assert_eq!(system, DEFAULT_PROMPT);
        let [ModelItem::Message(m)] = items.as_slice() else {
            panic!("one message: {items:?}")
        };
        let text = &m.text;
        assert!(text.starts_with(
            "The summary of the conversation before these messages:\n<summary>\nbefore\n</summary>"
        ));
        assert!(
            !text.contains("stands for its earlier"),
            "the framing is not resent"
        );
        assert!(text
            .contains("[user] old question\n\n[assistant] reading\n[tool call read_blob c1] {}"));
        assert!(text.contains("[tool result read_blob c1] start rrr"));
        assert!(text.contains(" bytes left out] … rrr"), "cut in the middle");
        assert!(text.contains("rrr end\n\n[user] new question\n</conversation>"));
        assert!(text.ends_with("Instructions for this summary: keep names"));
        assert!(text.len() < 6 * 1024, "{}", text.len());
        // A small budget keeps the newest messages that fit.
        let (_, items) = request(&window, &context, None, Some("mine"), 200);
        let ModelItem::Message(m) = &items[0] else {
            panic!()
        };
        assert!(
            m.text.contains("(its first 3 messages are left out)"),
            "{}",
            m.text
        );
        assert!(m.text.contains("[user] new question"));
        assert!(!m.text.contains("old question"));
    }
}
