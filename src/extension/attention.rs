//! `context.attention.set/clear` (seed: "Extensions and authority"): the
//! rules of an extension's attention writes inside its owner transactions.
//!
//! - Only commands, settled hooks and timer hooks may change attention
//!   ([`allowed_in`]); only an extension whose roster entry grants
//!   `attention` may, and every item is closed and bounded ([`check`]).
//! - The capacity reads happen once per transition ([`Live::plan`]): a
//!   Session carries at most [`ATTENTION_PER_SESSION_MAX`] items (all
//!   owners), an owner at most [`ATTENTION_PER_OWNER_MAX`] across Sessions;
//!   replacing an item takes no new capacity, clearing releases it. Each
//!   change stages a delivery outbox entry, refused past the outbox bound.
//! - The writes commit with the call's other writes (`Extensions::commit`),
//!   and the changed items are published after commit
//!   ([`Extensions::take_attention_touched`]).

use super::call::{AttentionItem, AttentionOp};
use super::manifest::Grant;
use super::{Entry, Extensions, Failure};
use crate::attention::{self as items, delivery_body, delivery_key, Item};
use crate::delivery;
use crate::limits::{
    ATTENTION_ID_BYTES_MAX, ATTENTION_KIND_BYTES_MAX, ATTENTION_PER_OWNER_MAX,
    ATTENTION_PER_SESSION_MAX, ATTENTION_SUMMARY_CHARS_MAX,
};
use crate::sql::{Sql, SqlError, Write};
use crate::store::Store;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// The callbacks that run inside an owner transaction and may change
/// attention.
const KINDS: &[&str] = &["command", "settled", "timer"];

/// Refuses attention changes of an extension without the attention grant,
/// and those answered by a call that runs outside the owner transaction
/// (projections, prompt and tools builders) or by a migration.
pub(super) fn allowed_in(entry: &Entry, kind: &str, ops: &[AttentionOp]) -> Result<(), Failure> {
    let ext = entry.id();
    if ops.is_empty() {
        return Ok(());
    }
    if !entry.granted(Grant::Attention) {
        return Err(Failure::Failed(format!(
            "extension {ext}: attention needs the attention grant, which its roster entry \
             does not give ({{ extension, grants: [\"attention\"] }}, with the definition's \
             requests({{ attention: true }}))"
        )));
    }
    if KINDS.contains(&kind) {
        return Ok(());
    }
    let what = match kind {
        "project" => "a projection",
        "prompt" => "a prompt hook",
        "tools" => "a tools hook",
        "migrate" => "a migration",
        other => other,
    };
    Err(Failure::Failed(format!(
        "extension {ext}: attention is not available in {what}; \
         only commands, settled hooks and timer hooks change attention"
    )))
}

fn time(where_: &str, name: &str, t: f64) -> Result<i64, Failure> {
    if t.fract() == 0.0 && (0.0..=8.64e15).contains(&t) {
        Ok(t as i64)
    } else {
        Err(Failure::Bound(format!(
            "{where_}: {name} must be an integer time in ms since the epoch"
        )))
    }
}

/// An item id: 1 to [`ATTENTION_ID_BYTES_MAX`] bytes of `[A-Za-z0-9._:-]`.
pub(super) fn check_id(where_: &str, id: &str) -> Result<(), Failure> {
    if crate::text::is_id(id, ATTENTION_ID_BYTES_MAX) {
        Ok(())
    } else {
        Err(Failure::Bound(format!(
            "{where_}: id {id:?}: 1 to {ATTENTION_ID_BYTES_MAX} bytes of [A-Za-z0-9._:-]"
        )))
    }
}

/// The item as stored and served, qualified by its owner.
fn checked_item(ext: &str, where_: &str, item: &AttentionItem) -> Result<Item, Failure> {
    check_id(where_, &item.id)?;
    let kind_ok = !item.kind.is_empty()
        && item.kind.len() <= ATTENTION_KIND_BYTES_MAX
        && item.kind.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        });
    if !kind_ok {
        return Err(Failure::Bound(format!(
            "{where_}: kind {:?}: 1 to {ATTENTION_KIND_BYTES_MAX} bytes of [a-z0-9_.-]",
            item.kind
        )));
    }
    let chars = item.summary.chars().count();
    if chars == 0 || chars > ATTENTION_SUMMARY_CHARS_MAX {
        return Err(Failure::Bound(format!(
            "{where_}: summary is {chars} characters; 1 to {ATTENTION_SUMMARY_CHARS_MAX}"
        )));
    }
    Ok(Item {
        extension_id: ext.to_owned(),
        id: item.id.clone(),
        kind: item.kind.clone(),
        summary: item.summary.clone(),
        since: time(where_, "since", item.since)?,
        expires_at: item
            .expires_at
            .map(|t| time(where_, "expiresAt", t))
            .transpose()?,
    })
}

/// Every item's shape (`stage`, with the other bounds; the grant was
/// checked with the answer, [`allowed_in`]).
pub(super) fn check(entry: &Entry, ops: &[AttentionOp]) -> Result<(), Failure> {
    let ext = entry.id();
    for op in ops {
        match op {
            AttentionOp::Set { session_id, item } => {
                let where_ = format!("extension {ext}: attention.set({session_id})");
                crate::text::validate_session_id(session_id)
                    .map_err(|e| Failure::Bound(format!("{where_}: {e}")))?;
                checked_item(ext, &where_, item)?;
            }
            AttentionOp::Clear { session_id, id } => {
                let where_ = format!("extension {ext}: attention.clear({session_id})");
                crate::text::validate_session_id(session_id)
                    .map_err(|e| Failure::Bound(format!("{where_}: {e}")))?;
                check_id(&where_, id)?;
            }
        }
    }
    Ok(())
}

/// An item a transition changed: published after commit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AttentionTouched {
    pub session_id: String,
    pub extension: String,
    pub id: String,
}

/// What one transition read of attention, and its own changes since.
#[derive(Debug, Clone, Default)]
struct Tally {
    /// Undelivered outbox entries (an upper bound: a change of a key
    /// already waiting replaces it, but counts here).
    pending: u64,
    /// Items by owner.
    owners: BTreeMap<String, usize>,
    /// A Session's items as `(ext, id)`; `None`: no such Session.
    sessions: BTreeMap<String, Option<BTreeSet<(String, String)>>>,
}

struct Cache {
    generation: u64,
    tally: Tally,
}

/// A staged call's attention: its writes and the tally after them, taken
/// into the cache when the call is applied.
#[derive(Debug, Default)]
pub(super) struct Planned {
    tally: Option<Tally>,
    touched: Vec<AttentionTouched>,
    /// Delivery outbox entries `(key, body)`, staged in order.
    staging: Vec<(String, Value)>,
    now_ms: i64,
}

impl Planned {
    /// Whether the call writes items (each change touches one).
    pub(super) fn writes_items(&self) -> bool {
        !self.touched.is_empty()
    }
}

/// Queues the delivery entry of one change, or refuses it when the outbox
/// has no room.
fn outbox(
    tally: &mut Tally,
    staging: &mut Vec<(String, Value)>,
    ext: &str,
    session_id: &str,
    id: &str,
    item: Option<&Item>,
) -> Result<(), Failure> {
    delivery::room(tally.pending, 1).map_err(|e| {
        Failure::Bound(format!(
            "extension {ext}: attention change ({session_id}, {id}): {e}"
        ))
    })?;
    tally.pending += 1;
    staging.push((
        delivery_key(ext, session_id, id),
        delivery_body(ext, session_id, id, item),
    ));
    Ok(())
}

/// The attention side of [`Extensions`]: the transition cache and what
/// committed changes are still to publish.
#[derive(Default)]
pub(super) struct Live {
    cache: RefCell<Option<Cache>>,
    touched: RefCell<BTreeSet<AttentionTouched>>,
}

/// The Session an attention change is for.
fn session_of(op: &AttentionOp) -> &String {
    match op {
        AttentionOp::Set { session_id, .. } | AttentionOp::Clear { session_id, .. } => session_id,
    }
}

impl Live {
    /// Checks a call's attention changes against every capacity bound:
    /// their plan and their writes (the item rows; the outbox entries are
    /// staged at commit).
    pub(super) fn plan(
        &self,
        sql: &dyn Sql,
        entry: &Entry,
        ops: &[AttentionOp],
        now_ms: i64,
    ) -> Result<Result<(Planned, Vec<Write>), Failure>, SqlError> {
        if ops.is_empty() {
            return Ok(Ok((Planned::default(), Vec::new())));
        }
        let tally = self.read_tally(sql, entry.id(), ops)?;
        Ok(changes(entry.id(), tally, ops, now_ms))
    }

    /// The transition's tally, with what `ext`'s changes `ops` need read
    /// in: a copy, taken back into the cache when the call commits.
    fn read_tally(&self, sql: &dyn Sql, ext: &str, ops: &[AttentionOp]) -> Result<Tally, SqlError> {
        let generation = sql.write_set().generation();
        let mut slot = self.cache.borrow_mut();
        if !sql.write_set().is_open() || slot.as_ref().is_none_or(|c| c.generation != generation) {
            *slot = Some(Cache {
                generation,
                tally: Tally {
                    pending: delivery::pending_count_committed(sql)?,
                    ..Tally::default()
                },
            });
        }
        let cache = slot.as_mut().expect("cache just filled");
        // Reads: what this call's changes need and the cache lacks.
        if !cache.tally.owners.contains_key(ext) {
            let n = items::owned_count_committed(sql, ext)?;
            cache.tally.owners.insert(ext.to_owned(), n);
        }
        for session_id in ops.iter().map(session_of) {
            if cache.tally.sessions.contains_key(session_id) {
                continue;
            }
            let held = items::session_items_committed(sql, session_id)?;
            cache.tally.sessions.insert(session_id.clone(), held);
        }
        Ok(cache.tally.clone())
    }

    /// Takes an applied call's attention into the transition cache and
    /// remembers its changes for publication.
    pub(super) fn commit(&self, sql: &dyn Sql, planned: Planned) -> Result<(), SqlError> {
        let Some(tally) = planned.tally else {
            return Ok(());
        };
        for (key, body) in &planned.staging {
            delivery::stage(sql, key, body, planned.now_ms)?;
        }
        let generation = sql.write_set().generation();
        *self.cache.borrow_mut() = Some(Cache { generation, tally });
        self.touched.borrow_mut().extend(planned.touched);
        Ok(())
    }
}

/// `ext`'s changes `ops` against `tally`: their plan and item writes, or
/// the bound one of them passes.
fn changes(
    ext: &str,
    mut tally: Tally,
    ops: &[AttentionOp],
    now_ms: i64,
) -> Result<(Planned, Vec<Write>), Failure> {
    let mut writes: Vec<Write> = Vec::new();
    let mut staging = Vec::new();
    let mut touched = Vec::new();
    for op in ops {
        let (session_id, id, item) = match op {
            AttentionOp::Set { session_id, item } => {
                let where_ = format!("extension {ext}: attention.set({session_id})");
                let item = checked_item(ext, &where_, item)?;
                (session_id, item.id.clone(), Some(item))
            }
            AttentionOp::Clear { session_id, id } => (session_id, id.clone(), None),
        };
        let Some(Some(items)) = tally.sessions.get_mut(session_id) else {
            if item.is_some() {
                return Err(Failure::Failed(format!(
                    "extension {ext}: attention.set({session_id}, {id}): \
                     Session {session_id} does not exist; setting attention needs an existing Session"
                )));
            }
            // Clearing in an absent Session: nothing to clear.
            continue;
        };
        let write = match &item {
            Some(item) => set(ext, session_id, item, items, &mut tally.owners, now_ms)?,
            None => match clear(ext, session_id, &id, items, &mut tally.owners) {
                Some(write) => write,
                // Clearing an absent item: idempotent, no write.
                None => continue,
            },
        };
        writes.push(write);
        outbox(
            &mut tally,
            &mut staging,
            ext,
            session_id,
            &id,
            item.as_ref(),
        )?;
        touched.push(AttentionTouched {
            session_id: session_id.clone(),
            extension: ext.to_owned(),
            id,
        });
    }
    let planned = Planned {
        tally: Some(tally),
        touched,
        staging,
        now_ms,
    };
    Ok((planned, writes))
}

/// Sets `item` in a Session holding `items`, within the Session's and the
/// owner's capacity: its write.
fn set(
    ext: &str,
    session_id: &str,
    item: &Item,
    items: &mut BTreeSet<(String, String)>,
    owners: &mut BTreeMap<String, usize>,
    now_ms: i64,
) -> Result<Write, Failure> {
    let id = &item.id;
    if items.insert((ext.to_owned(), id.clone())) {
        if items.len() > ATTENTION_PER_SESSION_MAX {
            return Err(Failure::Bound(format!(
                "extension {ext}: attention.set({session_id}, {id}): \
                 Session {session_id} would carry {} attention items; at most \
                 {ATTENTION_PER_SESSION_MAX} per Session (all extensions together)",
                items.len()
            )));
        }
        let owned = owners.get_mut(ext).expect("owner read above");
        *owned += 1;
        if *owned > ATTENTION_PER_OWNER_MAX {
            return Err(Failure::Bound(format!(
                "extension {ext}: attention.set({session_id}, {id}): it would \
                 retain {} attention items; at most {ATTENTION_PER_OWNER_MAX} per \
                 extension across Sessions (clearing releases capacity)",
                *owned
            )));
        }
    }
    Ok(items::put(session_id, item, now_ms))
}

/// Clears item `id` from a Session holding `items`, releasing the owner's
/// capacity: its write, or `None` when it holds no such item.
fn clear(
    ext: &str,
    session_id: &str,
    id: &str,
    items: &mut BTreeSet<(String, String)>,
    owners: &mut BTreeMap<String, usize>,
) -> Option<Write> {
    if !items.remove(&(ext.to_owned(), id.to_owned())) {
        return None;
    }
    *owners.get_mut(ext).expect("owner read above") -= 1;
    Some(items::delete(session_id, ext, id))
}

impl Extensions {
    /// The attention items the last transitions changed (committed or
    /// attempted), to publish from committed state.
    pub fn take_attention_touched(&self) -> BTreeSet<AttentionTouched> {
        std::mem::take(&mut *self.attention.touched.borrow_mut())
    }

    /// The counted attention owners: roster extensions granted `attention`
    /// and not stopped. Items of other owners stay stored but are not
    /// served, and make no Session needs_you.
    pub fn attention_owners(&self, store: Store<'_>) -> Result<Vec<String>, SqlError> {
        let granted: Vec<&Entry> = self
            .roster
            .entries()
            .iter()
            .filter(|e| e.granted(Grant::Attention))
            .collect();
        if granted.is_empty() {
            return Ok(Vec::new());
        }
        let meta = super::tables::meta_rows(store.sql())?;
        Ok(granted
            .into_iter()
            .filter(|e| meta.get(e.id()).is_none_or(|m| m.stopped.is_none()))
            .map(|e| e.id().to_owned())
            .collect())
    }
}
