//! The bounded Session read: a page of at most 200 messages and
//! `READ_PAGE_BYTES_MAX` bytes, newest page first, each page oldest first,
//! plus the pending queue and the running command.

use super::command::queued_input;
use super::queue::{pending, raw_json, PendingItem};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::limits::READ_PAGE_BYTES_MAX;
use crate::store::path::{entry_id_of, Start, Walk};
use crate::store::Store;
use serde::Serialize;
use serde_json::value::RawValue;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    pub session_id: String,
    pub messages: Vec<Box<RawValue>>,
    pub pending: Vec<PendingItem>,
    pub running: Option<RunningItem>,
    pub cursor: Option<String>,
}

/// The Session's running turn, as readers see it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningItem {
    pub command_id: String,
    pub request_id: Option<String>,
    /// `compact` for a compaction (absent for a turn).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub text: String,
    pub attempt: u32,
    pub started_at: Option<i64>,
    /// Paused before a model call its budget cannot cover.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<crate::budget::Paused>,
}

/// A stored message (a JSON object, served verbatim) with its committed
/// Session position first (clients anchor timeline cells on it:
/// `afterSequence`), the entry id of its parent on the path (`null`: it
/// starts the path) and, where that parent has several children, its place
/// among them: spliced into the stored text, never re-serialised.
pub(crate) fn served(
    body: &str,
    seq: i64,
    parent: Option<&str>,
    branch: Option<(usize, usize)>,
) -> Result<Box<RawValue>, ApiError> {
    debug_assert!(
        body.starts_with('{') && body.len() > 2,
        "a stored message is a non-empty object"
    );
    let parent = serde_json::Value::from(parent);
    let branch = branch
        .map(|(index, count)| format!("\"branch\":{{\"index\":{index},\"count\":{count}}},"))
        .unwrap_or_default();
    raw_json(format!(
        "{{\"sequence\":{seq},\"parentEntryId\":{parent},{branch}{}",
        &body[1..]
    ))
}

/// Reads one page of the Session's selected branch. `before` is the
/// cursor of an earlier page: the position of its oldest message.
pub fn page(
    ctx: &Ctx<'_>,
    session_id: &str,
    before: Option<i64>,
    limit: usize,
) -> Result<Page, ApiError> {
    let store = ctx.store;
    if !store.session_exists(session_id)? {
        return Err(ApiError::SessionNotFound(session_id.to_owned()));
    }
    // One extra message tells whether an older page exists, and is the
    // parent of the page's oldest.
    let start = before.map_or(Start::Tip, Start::Below);
    let mut walk = store.walk(session_id, start, limit + 1, READ_PAGE_BYTES_MAX)?;
    let rows = &walk.rows;
    let mut taken = 0;
    let mut bytes = 0;
    for row in rows.iter().take(limit) {
        if taken > 0 && bytes + row.bytes > READ_PAGE_BYTES_MAX {
            break;
        }
        bytes += row.bytes;
        taken += 1;
    }
    if taken > 0 && walk.rows[0].body.is_none() {
        // A message alone past the page bound: a page holds at least one.
        store.load_bodies(&mut walk, 0..1)?;
    }
    let mut ids: Vec<Option<String>> = walk.rows[..taken]
        .iter()
        .map(|r| r.body.as_deref().and_then(entry_id_of).map(str::to_owned))
        .collect();
    // The oldest message's parent, when the page holds it without its body.
    match walk.rows.get(taken) {
        Some(row) => ids.push(match row.body.as_deref() {
            Some(body) => entry_id_of(body).map(str::to_owned),
            None => store.entry_id(&walk, taken)?,
        }),
        None => ids.push(None),
    }
    let forks = if walk.branched {
        forks(store, session_id, &walk, taken)?
    } else {
        Vec::new()
    };
    let mut messages = Vec::with_capacity(taken);
    for i in (0..taken).rev() {
        let row = &walk.rows[i];
        let body = row
            .body
            .as_deref()
            .ok_or_else(|| ApiError::Internal(format!("message {} has no body", row.seq)))?;
        let branch = forks.get(i).copied().flatten();
        messages.push(served(body, row.seq, ids[i + 1].as_deref(), branch)?);
    }
    let cursor = (walk.rows.len() > taken).then(|| walk.rows[taken - 1].seq.to_string());
    Ok(Page {
        session_id: session_id.to_owned(),
        messages,
        pending: pending(ctx, session_id)?,
        running: store
            .running_head(session_id)?
            .map(|head| -> Result<RunningItem, ApiError> {
                let paused = crate::budget::paused_of(store.sql(), session_id)?
                    .filter(|p| p.command_id == head.command_id);
                Ok(RunningItem {
                    paused,
                    text: queued_input(&head)?.text,
                    kind: (head.kind == crate::store::Kind::Compact).then_some("compact"),
                    command_id: head.command_id,
                    request_id: head.request_id,
                    attempt: head.attempt,
                    started_at: head.started_at,
                })
            })
            .transpose()?,
        cursor,
    })
}

/// `branch` of each of the page's `taken` newest messages: `(index,
/// count)` among its parent's children where the parent has several, in
/// the Session's view. Only a branch's first message is indexed, so one
/// read finds the page's fork points; the one child of a parent that is
/// no branch's first message (linear, or the next on a fork's base path)
/// comes first.
fn forks(
    store: Store<'_>,
    session_id: &str,
    walk: &Walk,
    taken: usize,
) -> Result<Vec<Option<(usize, usize)>>, ApiError> {
    let rows = &walk.rows[..taken];
    let parents: Vec<i64> = rows.iter().map(|r| r.parent_seq()).collect();
    let children = store.explicit_children(session_id, &parents)?;
    if children.is_empty() {
        return Ok(Vec::new());
    }
    // A parent held by a base (below the fork's base position) has the
    // next message of the base path as its one other child. The walk holds
    // each parent but the start of the path.
    let base = walk.chain[0].base_seq();
    let mut forked = None;
    let mut linear = |i: usize, parent: i64| -> Result<bool, ApiError> {
        let continued = children.iter().any(|(p, _, on)| *p == parent && *on);
        Ok(match walk.rows.get(i + 1) {
            Some(up) if up.holder > 0 && parent != base => true,
            Some(_) => continued,
            // The start of the path: in a fork, the base path's first
            // message is its other child.
            None => {
                let fork = match forked {
                    Some(fork) => fork,
                    None => {
                        let fork = walk.chain.len() > 1
                            || store.facts(session_id)?.is_some_and(|f| f.base.is_some());
                        forked = Some(fork);
                        fork
                    }
                };
                fork || continued
            }
        })
    };
    let mut out = Vec::with_capacity(taken);
    for (i, (row, &parent)) in rows.iter().zip(&parents).enumerate() {
        let mine: Vec<i64> = children
            .iter()
            .filter(|(p, _, _)| *p == parent)
            .map(|(_, seq, _)| *seq)
            .collect();
        if mine.is_empty() {
            out.push(None);
            continue;
        }
        let linear = usize::from(linear(i, parent)?);
        // A base's message is the next on the base path in this view.
        let index = match row.parent {
            Some(_) if row.holder == 0 => {
                linear + 1 + mine.iter().filter(|s| **s < row.seq).count()
            }
            _ => 1,
        };
        let count = mine.len() + linear;
        out.push((count > 1).then_some((index, count)));
    }
    Ok(out)
}
