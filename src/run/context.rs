//! The model context of a step: what the model sees, rebuilt from the
//! stored transcript at each step and bounded in messages
//! ([`CONTEXT_MESSAGES_MAX`]) and in bytes ([`CONTEXT_BYTES_MAX`]).

use super::{internal, Pending};
use crate::error::ApiError;
use crate::limits::{CONTEXT_BYTES_MAX, CONTEXT_MESSAGES_MAX};
use crate::model::Image;
use crate::model::{ModelItem, ModelMessage, Role, ToolCall};
use crate::store::path::{PathRow, Start, Walk};
use crate::store::Store;
use crate::transcript::{RecordedCall, Role as Author};
use serde::Deserialize;
use serde_json::Value;

/// What the model sees: the messages of [`window`] (the newest stored ones
/// plus `unwritten` ones, this transition's writes), starting at a user
/// message. Tool turns are replayed as both providers require: every call
/// of a step answered by exactly one result, all of them right after the
/// step and in call order, before any later message (an operator line
/// written while the calls ran follows them). A call with no result reads
/// as ended with its outcome unknown (a turn settled before its calls were
/// closed, in a store written before settling closed them); results without
/// their call (outside the window) and repeated results are dropped;
/// display payloads (`data`) never reach the model.
pub(crate) fn context(
    store: Store<'_>,
    session_id: &str,
    start: Start,
    unwritten: &[Pending],
) -> Result<Vec<ModelItem>, ApiError> {
    let mut messages: Vec<Option<Stored>> = window(store, session_id, start, unwritten)?
        .into_iter()
        .map(Some)
        .collect();
    let mut items: Vec<ModelItem> = Vec::new();
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
    Ok(items)
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
}

/// The messages a context is built from, oldest first: the newest
/// [`CONTEXT_MESSAGES_MAX`] of the path from `start` (the selected branch,
/// or the path ending at a new branch's anchor; stored, then `unwritten`)
/// when their bodies total at most [`CONTEXT_BYTES_MAX`]. Past that bound
/// the oldest whole turns (a turn starts at a `user` message) are left
/// out, so the window starts at a user message; when the newest turn alone
/// passes the bound, [`newest_turn`] keeps part of it. Sizes are read
/// before bodies, and bodies only up to the bound (plus the rest of the
/// newest step in [`newest_turn`]), so a context holds about
/// `CONTEXT_BYTES_MAX` of bodies however large the transcript.
fn window(
    store: Store<'_>,
    session_id: &str,
    start: Start,
    unwritten: &[Pending],
) -> Result<Vec<Stored>, ApiError> {
    let keep = CONTEXT_MESSAGES_MAX.saturating_sub(unwritten.len());
    let unwritten_bytes: usize = unwritten.iter().map(|p| p.body.len()).sum();
    // Newest first, with the bodies of the newest stored messages that fit
    // beside the unwritten ones.
    let walk = store.walk(
        session_id,
        start,
        keep,
        CONTEXT_BYTES_MAX.saturating_sub(unwritten_bytes),
    )?;
    let total = unwritten_bytes + walk.rows.iter().map(|r| r.bytes).sum::<usize>();
    let loaded = walk.rows.iter().take_while(|r| r.body.is_some()).count();
    let mut entries = Vec::with_capacity(loaded + unwritten.len());
    for row in walk.rows[..loaded].iter().rev() {
        if let Some(body) = &row.body {
            entries.push(Entry::parse(body)?);
        }
    }
    for p in unwritten {
        entries.push(Entry::parse(&p.body)?);
    }
    let messages = if total <= CONTEXT_BYTES_MAX {
        entries
    } else if let Some(first_user) = entries.iter().position(|e| e.is(Author::User)) {
        entries.split_off(first_user)
    } else {
        newest_turn(store, walk, loaded, entries)?
    };
    let messages = provenance(store, session_id, messages)?;
    Ok(messages.into_iter().map(|e| e.message).collect())
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
/// message): its user message, then the newest steps (an `assistant`
/// message with its results and whatever follows) that fit beside it;
/// what lies between is left out. At least the newest step is kept whole,
/// since a step is never split from its results, so the window may pass
/// the bound by up to one step (at most `TOOL_CALLS_PER_STEP_MAX` results).
/// A turn whose user message is older than the newest
/// [`CONTEXT_MESSAGES_MAX`] messages keeps none, as without the byte bound.
fn newest_turn(
    store: Store<'_>,
    mut walk: Walk,
    loaded: usize,
    mut entries: Vec<Entry>,
) -> Result<Vec<Entry>, ApiError> {
    let unloaded = loaded..walk.rows.len();
    let user = store.newest_with_role(&walk, unloaded.clone(), "user")?;
    let room = CONTEXT_BYTES_MAX.saturating_sub(user.map_or(0, |at| walk.rows[at].bytes));
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
            let newer_than_user = loaded..user.unwrap_or(walk.rows.len());
            if let Some(at) = store.newest_with_role(&walk, newer_than_user, "assistant")? {
                store.load_bodies(&mut walk, loaded..at + 1)?;
                let older = walk.rows[loaded..=at].iter().rev().map(body_entry);
                entries.splice(0..0, older.collect::<Result<Vec<_>, _>>()?);
            }
        }
    }
    if let Some(at) = user {
        store.load_bodies(&mut walk, at..at + 1)?;
        entries.insert(0, body_entry(&walk.rows[at])?);
    }
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
struct Stored {
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
