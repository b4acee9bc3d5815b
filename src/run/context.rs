//! The model context of a step: what the model sees, rebuilt from the
//! stored transcript at each step: the newest compaction's summary, then the
//! messages after it, bounded in messages ([`CONTEXT_MESSAGES_MAX`]) and in
//! bytes ([`CONTEXT_BYTES_MAX`]); a turn's own prompt is always in it.

use super::{internal, Pending};
use crate::error::ApiError;
use crate::limits::{
    CONTEXT_BYTES_MAX, CONTEXT_BYTES_PER_TOKEN, CONTEXT_IMAGE_TOKENS, CONTEXT_MESSAGES_MAX,
};
use crate::model::Image;
use crate::model::{ModelItem, ModelMessage, Role, ToolCall, Usage};
use crate::store::path::{PathRow, Start, Walk};
use crate::store::Store;
use crate::transcript::{RecordedCall, Role as Author};
use serde::Deserialize;
use serde_json::Value;

/// What the driver knows of a context besides its items: whether a summary
/// leads it, its estimated size, and what compacting it would stand for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    /// The newest compaction entry (its id and summary): the context's
    /// first item frames it ([`framed`]).
    pub summary: Option<Summary>,
    /// The estimated input tokens ([`estimate`]).
    pub tokens: u64,
    /// The context holds as many messages or bytes as its bounds allow (or
    /// they left some out): with a window stated, time to compact.
    pub full: bool,
    /// The messages a compaction now would stand for; `None` when there is
    /// none but the turn's own prompt.
    pub range: Option<Range>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub entry_id: String,
    pub text: String,
}

/// The messages of a context after its summary, by entry id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub from: String,
    pub through: String,
    pub messages: u32,
}

/// What the model sees: the newest compaction's summary framed as one
/// leading user message, then the messages of [`window`] (the newest of the
/// path from `start` after it, plus `unwritten` ones, this transition's
/// writes), starting at a user message, with the user message `prompt` (the
/// entry id of the running turn's prompt) always among them. Tool turns are
/// replayed as both providers require: every call of a step answered by
/// exactly one result, all of them right after the step and in call order,
/// before any later message (an operator line written while the calls ran
/// follows them). A call with no result reads as ended with its outcome
/// unknown (a turn settled before its calls were closed, in a store written
/// before settling closed them); results without their call (outside the
/// window) and repeated results are dropped; display payloads (`data`)
/// never reach the model.
pub(crate) fn context(
    store: Store<'_>,
    session_id: &str,
    start: Start,
    prompt: Option<&str>,
    unwritten: &[Pending],
) -> Result<(Vec<ModelItem>, Window), ApiError> {
    let Gathered {
        summary,
        messages,
        full,
        reinserted,
    } = window(store, session_id, start, prompt, unwritten)?;
    let window = Window {
        tokens: estimate(summary.as_ref(), &messages),
        full,
        range: range(&messages[usize::from(reinserted)..], prompt),
        summary,
    };
    let mut messages: Vec<Option<Stored>> = messages.into_iter().map(|e| Some(e.message)).collect();
    let mut items: Vec<ModelItem> = Vec::new();
    if let Some(summary) = &window.summary {
        items.push(framed(&summary.text));
    }
    for at in 0..messages.len() {
        // `None`: a result already placed after its step.
        let Some(m) = messages[at].take() else {
            continue;
        };
        if m.role == Author::Tool {
            continue; // its step is outside the window, or it repeats one
        }
        for (call_id, name) in push_message(&mut items, m) {
            // A step's results are written after it and before the turn's
            // next model message: look no further than the next user or
            // assistant message.
            let result = messages[at + 1..]
                .iter_mut()
                .take_while(|m| {
                    m.as_ref()
                        .is_none_or(|m| m.role != Author::User && m.role != Author::Assistant)
                })
                .find(|m| {
                    m.as_ref().is_some_and(|m| {
                        m.role == Author::Tool
                            && m.tool_call_id.as_deref() == Some(call_id.as_str())
                    })
                })
                .and_then(Option::take);
            items.push(match result {
                Some(r) => ModelItem::ToolResult {
                    call_id,
                    name: r.tool_name.unwrap_or(name),
                    content: r.text,
                    is_error: r.is_error,
                    images: r.images,
                },
                None => ModelItem::ToolResult {
                    call_id,
                    name,
                    content: "outcome unknown: the turn ended before this call finished; \
                              it was not run again"
                        .to_owned(),
                    is_error: true,
                    images: Vec::new(),
                },
            });
        }
    }
    Ok((items, window))
}

/// The estimated input tokens of a context: the input and output tokens
/// the provider reported for its newest answer, plus the model-visible
/// bytes written after that answer divided by [`CONTEXT_BYTES_PER_TOKEN`]
/// (an image counts [`CONTEXT_IMAGE_TOKENS`]). With no answer after the
/// summary to go by, the bytes of the summary and every message. The
/// reported figure includes the instructions and the tools offered; the
/// bytes do not.
fn estimate(summary: Option<&Summary>, messages: &[Entry]) -> u64 {
    let reported = messages.iter().enumerate().rev().find_map(|(at, e)| {
        let usage = e.message.usage.filter(|_| e.is(Author::Assistant))?;
        Some((at, usage))
    });
    let (base, since) = match reported {
        Some((at, usage)) => (
            usage.input_tokens.saturating_add(usage.output_tokens),
            &messages[at + 1..],
        ),
        None => (
            summary.map_or(0, |s| s.text.len() as u64 / CONTEXT_BYTES_PER_TOKEN),
            messages,
        ),
    };
    since
        .iter()
        .map(|e| e.message.visible_tokens())
        .fold(base, u64::saturating_add)
}

/// What a compaction of `messages` (the context's, after its summary and a
/// re-inserted prompt) would stand for: `None` when they are none but the
/// turn's own prompt, which the context keeps anyway.
fn range(messages: &[Entry], prompt: Option<&str>) -> Option<Range> {
    if messages.iter().all(|e| e.is_prompt(prompt)) {
        return None;
    }
    let (first, last) = (messages.first()?, messages.last()?);
    Some(Range {
        from: first.message.entry_id.clone(),
        through: last.message.entry_id.clone(),
        messages: u32::try_from(messages.len()).unwrap_or(u32::MAX),
    })
}

/// A message of the window: its stored size and what the model reads of it.
struct Entry {
    bytes: usize,
    message: Stored,
}

impl Entry {
    fn parse(body: &str) -> Result<Self, ApiError> {
        Ok(Entry {
            bytes: body.len(),
            message: crate::json::from_text(body).map_err(internal)?,
        })
    }

    fn is(&self, role: Author) -> bool {
        self.message.role == role
    }

    /// The message `entry_id` (a turn's prompt).
    fn is_prompt(&self, entry_id: Option<&str>) -> bool {
        entry_id == Some(self.message.entry_id.as_str())
    }
}

/// The messages a context is built from, oldest first, and what the driver
/// needs to know about them.
struct Gathered {
    summary: Option<Summary>,
    messages: Vec<Entry>,
    full: bool,
    /// `messages[0]` is the turn's prompt, put back in front of messages
    /// that had left it out.
    reinserted: bool,
}

/// The messages a context is built from, oldest first: those of the path
/// from `start` (the selected branch, or the path ending at a new branch's
/// anchor) after its newest compaction entry (whose summary leads the
/// context), the newest [`CONTEXT_MESSAGES_MAX`] of them (stored, then
/// `unwritten`) when their bodies total at most [`CONTEXT_BYTES_MAX`]. Past
/// that bound the oldest whole turns are left out, so the window starts at
/// a user message; when the newest turn alone passes the bound,
/// [`newest_turn`] keeps part of it. Whatever is left out, the message
/// `prompt` (the running turn's prompt) is put back in front. Sizes are
/// read before bodies, and bodies only up to the bound (plus the rest of
/// the newest step in [`newest_turn`]), so a context holds about
/// `CONTEXT_BYTES_MAX` of bodies however large the transcript.
fn window(
    store: Store<'_>,
    session_id: &str,
    start: Start,
    prompt: Option<&str>,
    unwritten: &[Pending],
) -> Result<Gathered, ApiError> {
    let mut unwritten = unwritten
        .iter()
        .map(|p| Entry::parse(&p.body))
        .collect::<Result<Vec<_>, _>>()?;
    // A compaction entry among them (this transition's): no stored message
    // is read but the turn's prompt.
    let written_summary = match unwritten.iter().rposition(|e| e.is(Author::Compaction)) {
        Some(at) => unwritten.drain(..=at).next_back().map(|e| Summary {
            entry_id: e.message.entry_id,
            text: e.message.text,
        }),
        None => None,
    };
    let keep = CONTEXT_MESSAGES_MAX.saturating_sub(unwritten.len());
    let unwritten_bytes: usize = unwritten.iter().map(|e| e.bytes).sum();
    // Newest first, with the bodies of the newest stored messages that fit
    // beside the unwritten ones; one row more than a context keeps, so a
    // compaction entry right behind a full window still leads it.
    let mut walk = match written_summary {
        Some(_) => Walk {
            rows: Vec::new(),
            chain: Vec::new(),
            branched: false,
        },
        None => store.walk_context(
            session_id,
            start,
            keep + 1,
            CONTEXT_BYTES_MAX.saturating_sub(unwritten_bytes),
        )?,
    };
    let summarised = walk.rows.last().is_some_and(|r| r.compaction);
    let cut = !summarised && walk.rows.len() > keep;
    walk.rows.truncate(keep + usize::from(summarised));
    // Where a search for the prompt goes on past the rows kept.
    let resume = walk.rows.last().map_or(start, |r| Start::Below(r.seq));
    let summary = match summarised {
        true => {
            let at = walk.rows.len() - 1;
            store.load_bodies(&mut walk, at..at + 1)?;
            let entry = body_entry(&walk.rows[at])?.message;
            walk.rows.pop();
            Some(Summary {
                entry_id: entry.entry_id,
                text: entry.text,
            })
        }
        false => written_summary,
    };
    let total = unwritten_bytes + walk.rows.iter().map(|r| r.bytes).sum::<usize>();
    let full = cut
        || walk.rows.len() + unwritten.len() >= CONTEXT_MESSAGES_MAX
        || total > CONTEXT_BYTES_MAX;
    let loaded = walk.rows.iter().take_while(|r| r.body.is_some()).count();
    let mut entries = Vec::with_capacity(loaded + unwritten.len());
    for row in walk.rows[..loaded].iter().rev() {
        entries.push(body_entry(row)?);
    }
    entries.append(&mut unwritten);
    let messages = if total <= CONTEXT_BYTES_MAX {
        entries
    } else if let Some(first_user) = entries.iter().position(|e| e.is(Author::User)) {
        entries.split_off(first_user)
    } else {
        newest_turn(
            store, session_id, prompt, &mut walk, resume, loaded, entries,
        )?
    };
    let mut messages = provenance(store, session_id, messages)?;
    // The prompt rule: however long its turn ran, a turn sees its prompt.
    let mut reinserted = false;
    if let Some(entry_id) = prompt.filter(|_| !messages.iter().any(|e| e.is_prompt(prompt))) {
        let all = 0..walk.rows.len();
        if let Some((found, _)) = prompt_entry(store, session_id, &mut walk, all, resume, entry_id)?
        {
            let found = provenance(store, session_id, vec![found])?;
            reinserted = !found.is_empty();
            messages.splice(0..0, found);
        }
    }
    Ok(Gathered {
        summary,
        messages,
        full,
        reinserted,
    })
}

/// The message `entry_id` (a turn's prompt) on the path: among
/// `walk.rows[at]`, else on the path from `resume` (past the rows walked),
/// with its index in `walk.rows` when found there. Only the start of each
/// body is compared, in SQLite; searched only when a context left the
/// prompt out.
fn prompt_entry(
    store: Store<'_>,
    session_id: &str,
    walk: &mut Walk,
    at: std::ops::Range<usize>,
    resume: Start,
    entry_id: &str,
) -> Result<Option<(Entry, Option<usize>)>, ApiError> {
    if let Some(at) = store.entry_in_walk(walk, at, entry_id)? {
        store.load_bodies(walk, at..at + 1)?;
        return Ok(Some((body_entry(&walk.rows[at])?, Some(at))));
    }
    match store.find_on_path(session_id, resume, entry_id)? {
        Some(body) => Ok(Some((Entry::parse(&body)?, None))),
        None => Ok(None),
    }
}

/// Model-visible provenance (seed: "Delegated replies", `mail::render`):
/// a user line whose command has verified reply facts in the mail inbox
/// reads inside `<fungi_agent_reply …>`; every other user and operator
/// line, and the reply body, has the tag neutralised. Only the model's
/// copy changes (the stored text stays verbatim). What rendering adds
/// counts toward the byte bound: each entry's `bytes` grows by it, and
/// past [`CONTEXT_BYTES_MAX`] the oldest whole turns are left out again
/// (never the newest turn).
fn provenance(
    store: Store<'_>,
    session_id: &str,
    mut entries: Vec<Entry>,
) -> Result<Vec<Entry>, ApiError> {
    let commands: Vec<&str> = entries
        .iter()
        .filter(|e| e.is(Author::User))
        .filter_map(|e| e.message.command_id.as_deref())
        .collect();
    let lines = crate::mail::reply_lines(store, session_id, &commands)?;
    for e in &mut entries {
        let rendered = match e.message.role {
            Author::User => {
                let line = e.message.command_id.as_deref().and_then(|c| lines.get(c));
                crate::mail::render(&e.message.text, line)
            }
            Author::Operator => crate::mail::neutralise(&e.message.text).into_owned(),
            _ => continue,
        };
        e.bytes += rendered.len().saturating_sub(e.message.text.len());
        e.message.text = rendered;
    }
    let mut total: usize = entries.iter().map(|e| e.bytes).sum();
    while total > CONTEXT_BYTES_MAX {
        let Some(next) = entries.iter().skip(1).position(|e| e.is(Author::User)) else {
            break;
        };
        total -= entries.drain(..=next).map(|e| e.bytes).sum::<usize>();
    }
    Ok(entries)
}

/// The newest turn when it alone passes the byte bound (the walk's
/// `loaded` newest messages, whose bodies `entries` hold, have no user
/// message): its user message (`prompt`, found on the path past the loaded
/// messages from `resume` on, else the newest user message the walk read),
/// then the newest steps (an `assistant` message with its results and
/// whatever follows) that fit beside it; what lies between is left out. At
/// least the newest step is kept whole, since a step is never split from
/// its results, so the window may pass the bound by up to one step (at most
/// `TOOL_CALLS_PER_STEP_MAX` results).
fn newest_turn(
    store: Store<'_>,
    session_id: &str,
    prompt: Option<&str>,
    walk: &mut Walk,
    resume: Start,
    loaded: usize,
    mut entries: Vec<Entry>,
) -> Result<Vec<Entry>, ApiError> {
    let unloaded = loaded..walk.rows.len();
    let (user, user_at) = match prompt {
        Some(entry_id) => {
            match prompt_entry(store, session_id, walk, unloaded.clone(), resume, entry_id)? {
                Some((entry, at)) => (Some(entry), at),
                None => (None, None),
            }
        }
        None => match store.newest_with_role(walk, unloaded.clone(), "user")? {
            Some(at) => {
                store.load_bodies(walk, at..at + 1)?;
                (Some(body_entry(&walk.rows[at])?), Some(at))
            }
            None => (None, None),
        },
    };
    let room = CONTEXT_BYTES_MAX.saturating_sub(user.as_ref().map_or(0, |e| e.bytes));
    // The oldest loaded step whose tail fits beside the user message, else
    // the newest loaded step.
    let mut tail: usize = entries.iter().map(|e| e.bytes).sum();
    let mut step = None;
    for (at, e) in entries.iter().enumerate() {
        if e.is(Author::Assistant) && tail <= room {
            step = Some(at);
            break;
        }
        tail -= e.bytes;
    }
    match step.or_else(|| entries.iter().rposition(|e| e.is(Author::Assistant))) {
        Some(at) => drop(entries.drain(..at)),
        None => {
            // The newest step began before the loaded messages: load it.
            let newer_than_user = loaded..user_at.unwrap_or(walk.rows.len());
            if let Some(at) = store.newest_with_role(walk, newer_than_user, "assistant")? {
                store.load_bodies(walk, loaded..at + 1)?;
                let older = walk.rows[loaded..=at].iter().rev().map(body_entry);
                entries.splice(0..0, older.collect::<Result<Vec<_>, _>>()?);
            }
        }
    }
    entries.splice(0..0, user);
    Ok(entries)
}

fn body_entry(row: &PathRow) -> Result<Entry, ApiError> {
    let body = row
        .body
        .as_deref()
        .ok_or_else(|| ApiError::Internal(format!("message {} has no body", row.seq)))?;
    Entry::parse(body)
}

/// A stored message as the model context reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Stored {
    entry_id: String,
    role: Author,
    text: String,
    /// The command a user line belongs to (its reply facts, if any).
    #[serde(default)]
    command_id: Option<String>,
    #[serde(default)]
    images: Vec<Image>,
    #[serde(default)]
    tool_calls: Vec<RecordedCall>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    is_error: bool,
    /// An assistant message's: what the provider reported for its call.
    #[serde(default)]
    usage: Option<Usage>,
}

impl Stored {
    /// Its share of [`estimate`]: the text and calls the model reads, and
    /// its images.
    fn visible_tokens(&self) -> u64 {
        let calls: usize = self
            .tool_calls
            .iter()
            .map(|c| c.name.len() + Value::Object(c.arguments.clone()).to_string().len())
            .sum();
        let bytes = (self.text.len() + calls) as u64;
        let images = self.images.len() as u64;
        (bytes / CONTEXT_BYTES_PER_TOKEN).saturating_add(images * CONTEXT_IMAGE_TOKENS)
    }
}

/// Appends a non-tool message; returns the calls `(id, name)` of a tool
/// step it appended, which its results must follow.
fn push_message(items: &mut Vec<ModelItem>, m: Stored) -> Vec<(String, String)> {
    let (role, text) = match m.role {
        Author::Assistant => (Role::Assistant, m.text),
        // Operator lines reach the model as attributed user content.
        Author::Operator => (Role::User, format!("[operator] {}", m.text)),
        _ => (Role::User, m.text),
    };
    if items.is_empty() && role == Role::Assistant {
        return Vec::new(); // a context starts with the user
    }
    if !m.tool_calls.is_empty() {
        let calls = m
            .tool_calls
            .iter()
            .map(|c| (c.id.clone(), c.name.clone()))
            .collect();
        items.push(ModelItem::ToolCalls {
            text,
            calls: m
                .tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: Value::Object(c.arguments).to_string(),
                })
                .collect(),
        });
        return calls;
    }
    if !(text.is_empty() && m.images.is_empty()) {
        // An empty answer says nothing; providers refuse empty content.
        items.push(ModelItem::Message(ModelMessage {
            role,
            text,
            images: m.images,
        }));
    }
    Vec::new()
}

/// How a summary leads every later context: one user message (OpenAI: a
/// `user` message; Anthropic: a `user` message's text block, the turn's
/// first), saying what it is.
pub(super) fn framed(summary: &str) -> ModelItem {
    ModelItem::Message(ModelMessage {
        role: Role::User,
        text: format!(
            "[This conversation was compacted: the summary below stands for its earlier \
             messages.]\n\n<summary>\n{summary}\n</summary>"
        ),
        images: Vec::new(),
    })
}
