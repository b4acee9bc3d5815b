//! Transcript branches (issue 35), the rules over `store::path`: where an
//! entry named by a command lies on a Session's paths, the tip a `select`
//! moves to, the children of an entry, and the place a fork starts at.
//!
//! A Session's *view* is its own messages and, for a fork, the path of its
//! base ending where the fork was made: an entry is on the view's paths
//! when it is one of the Session's own messages or on that base path.

use super::read::served;
use crate::error::ApiError;
use crate::limits::{BRANCHES_PER_SESSION_MAX, FORK_DEPTH_MAX, READ_PAGE_BYTES_MAX};
use crate::store::path::Level;
use crate::store::Store;
use serde::Serialize;
use serde_json::value::RawValue;

/// An entry of a Session's view.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    /// Its position in the view.
    pub seq: i64,
    pub role: Option<String>,
    /// The Session of the chain holding it, and its index there.
    pub holder: String,
    pub level: usize,
}

/// Where `entry_id` lies on the paths of Session `session_id` (whose
/// chain is `chain`): 404 `entry_not_found` when no Session of the Agent
/// holds it, 400 `entry_not_on_path` when another Session (or a base, off
/// the path the fork continues) does. A scan of the Session's messages
/// newest first, stopping at the entry (then of its bases' paths); the
/// refusals scan every message of the Agent to name the holder.
pub fn locate(store: Store<'_>, chain: &[Level], entry_id: &str) -> Result<Located, ApiError> {
    let mut below = i64::MAX;
    for (level, session) in chain.iter().enumerate() {
        if let Some((seq, role)) = store.find_entry(&session.session_id, entry_id, below)? {
            let located = Located {
                seq,
                role,
                holder: session.session_id.clone(),
                level,
            };
            if level == 0 || base_place(store, chain, seq)?.is_some() {
                return Ok(located);
            }
            break;
        }
        below = session.base_seq();
    }
    match store.entry_holder(entry_id)? {
        Some(holder) => Err(ApiError::EntryNotOnPath {
            entry: entry_id.to_owned(),
            holder,
            session: chain[0].session_id.clone(),
        }),
        None => Err(ApiError::EntryNotFound(entry_id.to_owned())),
    }
}

/// Whether position `seq` (held by a base of the chain) is on the path the
/// fork `chain[0]` continues, and if so the position after it on that
/// path (`None` when it is the base position itself, whose children are
/// the fork's): `Some(next)`; not on it: `None`. Reads each base's branch
/// starts above `seq` once (bounded by `BRANCHES_PER_SESSION_MAX` each).
fn base_place(
    store: Store<'_>,
    chain: &[Level],
    seq: i64,
) -> Result<Option<Option<i64>>, ApiError> {
    // The branch starts of the level being walked (levels only go down),
    // newest first.
    let mut starts: Option<(usize, Vec<(i64, i64)>)> = None;
    let mut cur = chain[0].base_seq();
    // The first position of the run newer than the one being walked.
    let mut newer: Option<i64> = None;
    while cur >= seq && cur > 0 {
        let Some(level) = (1..chain.len()).find(|&l| cur > chain[l].base_seq()) else {
            break;
        };
        let floor = chain[level].base_seq();
        if starts.as_ref().is_none_or(|(l, _)| *l != level) {
            let found =
                store.branch_starts(&chain[level].session_id, (seq - 1).max(floor), false)?;
            starts = Some((level, found));
        }
        // The newest start of this level's run ending at `cur`.
        let start = starts
            .as_ref()
            .and_then(|(_, found)| found.iter().rev().find(|(s, _)| *s <= cur).copied());
        let bottom = start.map_or(floor + 1, |(s, _)| s);
        if seq >= bottom {
            return Ok(Some(if seq < cur { Some(seq + 1) } else { newer }));
        }
        newer = Some(bottom);
        cur = start.map_or(floor, |(_, parent)| parent);
    }
    Ok(None)
}

/// The tip of the branch through position `seq` of the view: its newest
/// descendant, following the newest child at each fork (the first message
/// of the newest branch: a branch starts after the messages it continues
/// from, so the newest child is the one numbered last). Reads the
/// Session's branch starts (bounded) and its newest position.
pub fn branch_tip(store: Store<'_>, chain: &[Level], seq: i64) -> Result<i64, ApiError> {
    let session = &chain[0].session_id;
    let base = chain[0].base_seq();
    let newest = store.position(session)?;
    // `(parent, seq)` of each branch start by parent, and their seqs.
    let by_parent: Vec<(i64, i64)> = store
        .branch_starts(session, 0, true)?
        .into_iter()
        .map(|(start, parent)| (parent, start))
        .collect();
    let starts: Vec<i64> = store
        .branch_starts(session, 0, false)?
        .into_iter()
        .map(|(start, _)| start)
        .collect();
    // The newest child starting a branch of the first fork point at or
    // after `from`: `(parent, child)`.
    let fork_from = |from: i64| -> Option<(i64, i64)> {
        let at = by_parent.partition_point(|(p, _)| *p < from);
        let parent = by_parent.get(at)?.0;
        let last = by_parent.partition_point(|(p, _)| *p <= parent) - 1;
        Some((parent, by_parent[last].1))
    };
    let mut cur = seq;
    loop {
        // A branch's first message is newer than the parent's linear child
        // (parents never equal `seq - 1` explicitly).
        if let Some((_, child)) = fork_from(cur).filter(|(p, _)| *p == cur) {
            cur = child;
            continue;
        }
        if cur < base {
            // Along the base path (one child each) to the first position
            // the fork branches at, else to the base position.
            cur = match fork_from(cur).filter(|(p, _)| *p < base) {
                Some((_, child)) => child,
                None => base,
            };
            continue;
        }
        // The linear run from `cur` ends before the next branch's first
        // message; its first fork point (if any) leads on.
        let end = starts
            .get(starts.partition_point(|s| *s <= cur))
            .map_or(newest, |s| s - 1)
            .min(newest)
            .max(cur);
        match fork_from(cur).filter(|(p, _)| *p <= end) {
            Some((_, child)) => cur = child,
            None => return Ok(end),
        }
    }
}

/// Refuses a new branch past `BRANCHES_PER_SESSION_MAX`.
pub fn check_room(store: Store<'_>, session_id: &str) -> Result<(), ApiError> {
    if store.branch_count(session_id)? >= BRANCHES_PER_SESSION_MAX {
        return Err(ApiError::TooManyBranches {
            session: session_id.to_owned(),
        });
    }
    Ok(())
}

/// The base a fork of Session `chain[0]` at `entry` records: the Session
/// holding the entry and its position there, refused past
/// `FORK_DEPTH_MAX` Sessions in the new chain.
pub fn fork_base(chain: &[Level], entry: &Located) -> Result<(String, i64), ApiError> {
    if chain.len() - entry.level + 1 > FORK_DEPTH_MAX {
        return Err(ApiError::ForkTooDeep {
            session: entry.holder.clone(),
        });
    }
    Ok((entry.holder.clone(), entry.seq))
}

/// A page of an entry's children (`GET /sessions/:id/branches`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Children {
    pub entry_id: String,
    /// How many children the entry has in all.
    pub count: usize,
    /// Oldest first: stored messages with their `sequence`, `parentEntryId`
    /// and `branch`.
    pub children: Vec<Box<RawValue>>,
    pub cursor: Option<String>,
}

/// The children of `entry_id` in the Session's view, oldest first, after
/// position `after`: at most `limit` and `READ_PAGE_BYTES_MAX` bytes of
/// them (at least one).
pub fn children(
    store: Store<'_>,
    session_id: &str,
    entry_id: &str,
    after: i64,
    limit: usize,
) -> Result<Children, ApiError> {
    let chain = store.chain(session_id)?;
    if chain.is_empty() {
        return Err(ApiError::SessionNotFound(session_id.to_owned()));
    }
    let base = chain[0].base_seq();
    let entry = if entry_id.is_empty() {
        // The start: position 0 of the Session itself. A fork's view begins
        // in its base, whose start is not the fork's to list.
        if base > 0 {
            return Err(ApiError::InvalidQuery(format!(
                "entryId: \"\" lists the first messages of a Session that is not a fork; \
                 {session_id} is a fork: list the children of an entry on its path"
            )));
        }
        Located {
            seq: 0,
            role: None,
            holder: session_id.to_owned(),
            level: 0,
        }
    } else {
        locate(store, &chain, entry_id)?
    };
    // The one child that is not a branch's first message: the linear one
    // (in the Session) or the next on the base path (in a base).
    let linear: Option<(String, i64)> = if entry.seq < base {
        base_place(store, &chain, entry.seq)?
            .flatten()
            .map(|next| (holder_of(&chain, next), next))
    } else {
        store
            .continues(session_id, entry.seq + 1)?
            .then(|| (session_id.to_owned(), entry.seq + 1))
    };
    let first = usize::from(linear.is_some());
    let (explicit, total, before) = store.children_page(session_id, entry.seq, after, limit + 1)?;
    // `(holder, position, 1-based index among the children)`, oldest first.
    let mut listed: Vec<(String, i64, usize)> = Vec::new();
    if let Some((holder, seq)) = linear.filter(|(_, seq)| *seq > after) {
        listed.push((holder, seq, 1));
    }
    for (i, seq) in explicit.into_iter().enumerate() {
        listed.push((session_id.to_owned(), seq, first + before + i + 1));
    }
    let count = first + total;
    let more = listed.len() > limit;
    listed.truncate(limit);
    // The linear child may be a base's; the others are the Session's.
    let mut bodies: Vec<(i64, String)> = Vec::new();
    for (holder, _, _) in listed.iter().take(2) {
        let seqs: Vec<i64> = listed
            .iter()
            .filter(|(h, seq, _)| h == holder && !bodies.iter().any(|(s, _)| s == seq))
            .map(|(_, seq, _)| *seq)
            .collect();
        if !seqs.is_empty() {
            bodies.extend(store.bodies_at(holder, &seqs)?);
        }
    }
    let mut children = Vec::new();
    let mut bytes = 0;
    let mut cut = more;
    for (_, seq, index) in &listed {
        let Some((_, body)) = bodies.iter().find(|(s, _)| s == seq) else {
            continue;
        };
        if !children.is_empty() && bytes + body.len() > READ_PAGE_BYTES_MAX {
            cut = true;
            break;
        }
        bytes += body.len();
        let branch = (count > 1).then_some((*index, count));
        let parent = Some(entry_id).filter(|e| !e.is_empty());
        children.push(served(body, *seq, parent, branch)?);
    }
    let cursor = cut
        .then(|| listed.get(children.len().max(1) - 1))
        .flatten()
        .map(|(_, seq, _)| seq.to_string());
    Ok(Children {
        entry_id: entry_id.to_owned(),
        count,
        children,
        cursor,
    })
}

/// The Session of `chain` holding position `seq`.
fn holder_of(chain: &[Level], seq: i64) -> String {
    chain
        .iter()
        .find(|l| seq > l.base_seq())
        .unwrap_or(&chain[chain.len() - 1])
        .session_id
        .clone()
}
