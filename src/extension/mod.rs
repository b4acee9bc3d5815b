//! Extensions (seed shiitake.md: "Extensions and authority"): behaviour a
//! host adds without forking the runtime. Authored in JS
//! (`shiitake/extensions`); everything durable is decided here, sans-IO:
//!
//! - the roster and each extension's revision ([`manifest`]);
//! - state in collections and documents, bounded, checked against the
//!   declared schemas, migrated once per new state version in one
//!   transition ([`Extensions::open`], `lifecycle.rs`);
//! - commands ([`Extensions::command`], `commands.rs`), settled hooks
//!   (every settlement, inside the transition that writes it:
//!   [`OnSettled`], `settled.rs`) and timer hooks ([`Extensions::fire_due`],
//!   `timers.rs`) each return one effect set (`effects.rs`), applied by one
//!   commit with the event that caused it, or not at all (a settled
//!   hook's sends are staged with it and admitted by the next pass,
//!   `send.rs`); a hook that fails has its extension's stop as its
//!   outcome, applied by the same commit instead;
//! - a stopped extension's hooks do not run; the settled work it misses is
//!   logged and, once it is resumed (by the host or a new revision),
//!   replayed through its cursor, each exactly once, in order
//!   ([`Extensions::catch_up`], `replay.rs`);
//! - timers ride the Agent's one alarm ([`Extensions::next_deadline`]);
//! - projections, prompt sections and command tools are read outside any
//!   transition, from committed state (`views.rs`);
//! - every statement on the extensions' tables is in `tables.rs`; sends are
//!   admitted through the [`Admit`] port the caller hands in (admission
//!   lives in `session/`, a layer above).

mod attention;
mod call;
mod commands;
mod effects;
pub mod files_grant;
mod lifecycle;
pub mod manifest;
mod replay;
mod send;
mod settled;
mod tables;
mod timers;
mod views;

pub use attention::AttentionTouched;
pub use call::{Answer, Host, SessionRef, ToolMarker};
pub use commands::{Invocation, Invoked};
pub use manifest::{Entry, Roster, Scope};
pub use send::{Admit, Send, Sent};
pub use timers::{Fired, Pass};
pub use views::{CommandInfo, Status, Stop};

use crate::error::ApiError;
use crate::history::{self, History};
use crate::limits::EXTENSION_STOP_REASON_BYTES_MAX;
use crate::sql::{Sql, SqlError};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use tables::{MetaRow, Rows};

/// The extensions of one Agent: the roster and the host that runs their
/// callbacks. Holds no durable fact: the cache lives one transition.
pub struct Extensions {
    roster: Roster,
    host: Box<dyn Host>,
    cache: RefCell<Option<Cache>>,
    touched: RefCell<BTreeSet<Touched>>,
    /// A settled hook moved timers: the alarm's deadline may have changed
    /// ([`Extensions::take_rearm`]). A wake, not a fact: the timers are in
    /// the store, and a lost flag costs only the next reconciliation's delay.
    rearm: Cell<bool>,
    attention: attention::Live,
}

/// State an extension changed in a committed (or attempted) transition:
/// its projections are read again and published when they changed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Touched {
    pub extension: String,
    pub session_id: Option<String>,
}

/// What one transition read of the extensions, and its own writes since:
/// valid while that transition is open (`WriteSet::generation`).
struct Cache {
    generation: u64,
    meta: BTreeMap<String, MetaRow>,
    timers: BTreeMap<String, BTreeSet<String>>,
    log_head: i64,
    states: BTreeMap<String, State>,
    /// Producer histories read or written: by Session (each read whole,
    /// before any history write), then by extension.
    histories: BTreeMap<String, BTreeMap<String, History>>,
}

/// One extension's rows and their size.
#[derive(Debug, Clone, Default)]
struct State {
    rows: Rows,
    bytes: usize,
}

impl State {
    fn of(entry: &Entry, mut rows: Rows) -> State {
        // Every declared collection is present; rows of collections no
        // longer declared stay stored but are not handed out.
        rows.retain(|name, _| entry.collection(name).is_some());
        for name in entry.manifest.state.collections.keys() {
            rows.entry(name.clone()).or_default();
        }
        let bytes = rows
            .values()
            .flat_map(|c| c.iter())
            .map(|(k, v)| k.len() + v.to_string().len())
            .sum();
        State { rows, bytes }
    }
}

/// How a call failed.
#[derive(Debug, Clone, PartialEq)]
enum Failure {
    /// The command's input was refused by its schema.
    Refused(String),
    /// The callback threw or answered what the protocol does not allow.
    Failed(String),
    /// What it did would pass a bound of the extension (or break its
    /// declared schemas).
    Bound(String),
}

/// Why a call that may send wrote nothing: its callback failed, or the
/// admission refused one of its sends.
enum Refusal {
    Hook(Failure),
    Send(ApiError),
}

impl Failure {
    fn reason(self) -> String {
        match self {
            Failure::Refused(r) | Failure::Failed(r) | Failure::Bound(r) => r,
        }
    }
}

/// The host of an empty roster: never called.
struct NoHost;

impl Host for NoHost {
    fn call(&self, _request: &str) -> String {
        r#"{"ok":false,"error":"no extensions"}"#.into()
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(e.to_string())
}

fn cut(mut reason: String) -> String {
    crate::text::truncate(&mut reason, EXTENSION_STOP_REASON_BYTES_MAX);
    reason
}

impl Extensions {
    pub fn new(roster: Roster, host: Box<dyn Host>) -> Self {
        Extensions {
            roster,
            host,
            cache: RefCell::new(None),
            touched: RefCell::new(BTreeSet::new()),
            rearm: Cell::new(false),
            attention: attention::Live::default(),
        }
    }

    /// An Agent without extensions.
    pub fn none() -> Self {
        Extensions::new(Roster::default(), Box::new(NoHost))
    }

    pub fn roster(&self) -> &Roster {
        &self.roster
    }

    /// The extensions whose state changed since the last call, to project.
    pub fn take_touched(&self) -> BTreeSet<Touched> {
        std::mem::take(&mut *self.touched.borrow_mut())
    }

    /// Whether a settled hook set or cancelled a timer, or staged a send,
    /// since the last call: the run loop then reads the deadlines again
    /// before it arms the alarm (a staged send is due at once).
    pub fn take_rearm(&self) -> bool {
        self.rearm.replace(false)
    }

    fn entry(&self, id: &str) -> Result<&Entry, ApiError> {
        self.roster
            .get(id)
            .ok_or_else(|| ApiError::ExtensionNotFound(id.to_owned()))
    }

    // The transition cache.

    /// Runs `f` on the open transition's cache, reading it first when this
    /// transition has not yet.
    fn with_cache<T>(
        &self,
        sql: &dyn Sql,
        f: impl FnOnce(&mut Cache) -> Result<T, SqlError>,
    ) -> Result<T, SqlError> {
        let generation = sql.write_set().generation();
        let mut slot = self.cache.borrow_mut();
        let stale =
            !sql.write_set().is_open() || slot.as_ref().is_none_or(|c| c.generation != generation);
        if stale {
            *slot = Some(Cache {
                generation,
                meta: (*tables::meta_rows(sql)?).clone(),
                timers: (*tables::timer_names(sql)?).clone(),
                log_head: tables::log_head(sql)?,
                states: BTreeMap::new(),
                histories: BTreeMap::new(),
            });
        }
        f(slot.as_mut().expect("cache just filled"))
    }

    fn state<'c>(
        sql: &dyn Sql,
        cache: &'c mut Cache,
        entry: &Entry,
    ) -> Result<&'c State, SqlError> {
        if !cache.states.contains_key(entry.id()) {
            let rows = tables::load_rows(sql, entry.id())?;
            cache
                .states
                .insert(entry.id().to_owned(), State::of(entry, rows));
        }
        Ok(&cache.states[entry.id()])
    }

    /// `entry`'s history of `session_id` in this transition: the
    /// Session's histories are read once, then kept as its calls leave them.
    fn history<'c>(
        sql: &dyn Sql,
        cache: &'c mut Cache,
        entry: &Entry,
        session_id: &str,
    ) -> Result<&'c mut History, SqlError> {
        let of_session = match cache.histories.entry(session_id.to_owned()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(history::load(sql, session_id)?)
            }
        };
        Ok(of_session.entry(entry.id().to_owned()).or_default())
    }
}
