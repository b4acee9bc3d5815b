//! Extensions (seed shiitake.md: "Extensions and authority"): behaviour a
//! host adds without forking the runtime. Authored in JS
//! (`shiitake/extensions`); everything durable is decided here, sans-IO:
//!
//! - the roster and each extension's revision ([`manifest`]);
//! - state in collections and documents, bounded, checked against the
//!   declared schemas, migrated once per new state version in one
//!   transition ([`Extensions::open`]);
//! - commands ([`Extensions::command`]), settled hooks (every settlement,
//!   inside the transition that writes it: [`OnSettled`]) and timer hooks
//!   ([`Extensions::fire_due`]) commit their writes with the event that
//!   caused them, or not at all; a hook that fails records the extension's
//!   stop reason instead;
//! - a stopped extension's hooks do not run; the settled work it misses is
//!   logged and, once it is resumed (by the host or a new revision),
//!   replayed through its cursor, each exactly once, in order
//!   ([`Extensions::catch_up`]);
//! - timers ride the Agent's one alarm ([`Extensions::next_deadline`]);
//! - projections, prompt sections and command tools are read outside any
//!   transition, from committed state.

mod attention;
mod call;
pub mod files_grant;
pub mod manifest;
mod tables;

pub use attention::AttentionTouched;
pub use call::{Answer, Host, SessionRef, ToolMarker};
pub use manifest::{Entry, Roster, Scope};

use crate::agent::validate_session_id;
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::history::{self, History};
use crate::limits::{
    EXTENSION_ANSWER_BYTES_MAX, EXTENSION_COMMAND_BYTES_MAX, EXTENSION_KEY_BYTES_MAX,
    EXTENSION_PROJECTION_BYTES_MAX, EXTENSION_PROMPT_BYTES_MAX, EXTENSION_REPLAY_PER_PASS_MAX,
    EXTENSION_REQUESTS_KEPT_MAX, EXTENSION_ROWS_PER_COLLECTION_MAX, EXTENSION_ROW_BYTES_MAX,
    EXTENSION_SENDS_PER_CALL_MAX, EXTENSION_STATE_BYTES_MAX, EXTENSION_STOP_REASON_BYTES_MAX,
    EXTENSION_TIMERS_MAX, EXTENSION_TIMERS_PER_PASS_MAX, EXTENSION_TIMER_PAYLOAD_BYTES_MAX,
    TEXT_BYTES_MAX,
};
use crate::session::admission::{commit_send, prepare_send, Admitted, PreparedSend, Send};
use crate::sql::{atomically, write, Sql, SqlError, Write};
use crate::store::{schema, CommandRow, OnSettled, Store};
use call::{Request, SendOp};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
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

/// A call's outcome, checked against every bound, not yet written.
struct Staged {
    state: State,
    timers: BTreeSet<String>,
    writes: Vec<Write>,
    sends: Vec<SendOp>,
    answer: Answer,
    attention: attention::Planned,
    /// The Session history this call records: (Session, history after it).
    history: Option<(String, History)>,
}

/// An extension command to run ([`Extensions::command`]).
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    pub extension: &'a str,
    pub command: &'a str,
    /// The Session a session-scope command runs in.
    pub session_id: Option<&'a str>,
    /// Replays: the same id and input answer the stored result.
    pub request_id: Option<&'a str>,
    pub input: Value,
}

/// A command's result, and the prompts it sent.
#[derive(Debug)]
pub struct Invoked {
    pub result: Value,
    pub sent: Vec<Sent>,
    /// The command set or cancelled timers: the alarm's deadline may move.
    pub rearm: bool,
}

/// A prompt a command or a timer sent, as admitted.
#[derive(Debug)]
pub struct Sent {
    pub session_id: String,
    pub request_id: String,
    pub admitted: Admitted,
}

/// What one pass of timers did.
#[derive(Debug, Default)]
pub struct Fired {
    pub timers: usize,
    pub sent: Vec<Sent>,
}

/// The host of an empty roster: never called.
struct NoHost;

impl Host for NoHost {
    fn call(&self, _request: &str) -> String {
        r#"{"ok":false,"error":"no extensions"}"#.into()
    }
}

/// One extension as the host sees it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub id: String,
    pub version: String,
    pub revision: String,
    pub state_version: u32,
    pub grant_key: String,
    pub feature: Option<String>,
    /// The recorded stop, if any.
    pub stopped: Option<Stop>,
    /// Settled work it has missed and not yet replayed.
    pub behind: bool,
    /// The Agent-scope projection, when it publishes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projection: Option<Value>,
    /// The advertised command catalog: every declared command, by name
    /// (client entries' actions name these).
    pub commands: Vec<CommandInfo>,
}

/// One command of an extension's catalog.
#[derive(Debug, Clone, Serialize)]
pub struct CommandInfo {
    pub name: String,
    pub scope: &'static str,
    pub description: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stop {
    pub reason: String,
    pub at: Option<i64>,
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

    /// Whether a settled hook set or cancelled a timer since the last call:
    /// the run loop then reads the deadlines again before it arms the
    /// alarm. Settled hooks send nothing, so timers are the only work they
    /// can add.
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

    // One call.

    /// Calls `entry`'s callback `kind` over its current state and checks
    /// what it did against every bound; nothing is written yet.
    #[allow(clippy::too_many_arguments)]
    fn call(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        kind: &str,
        session: Option<SessionRef<'_>>,
        event: Value,
        now_ms: i64,
        sends_allowed: bool,
        closed: &[String],
    ) -> Result<Result<Staged, Failure>, SqlError> {
        let state = Self::state(sql, cache, entry)?.clone();
        let timers = cache.timers.get(entry.id()).cloned().unwrap_or_default();
        let session_id = session.as_ref().map(|s| s.id.to_owned());
        let answer = match self.ask(entry, kind, &state.rows, session, event, now_ms, closed) {
            Ok(answer) => answer,
            Err(failure) => return Ok(Err(failure)),
        };
        let mut staged = match stage(entry, state, timers, answer, sends_allowed) {
            Ok(staged) => staged,
            Err(e) => return Ok(Err(Failure::Bound(e))),
        };
        if let Some(session_id) = session_id {
            if let Err(failure) =
                self.record_history(sql, cache, entry, session_id, &mut staged, now_ms)?
            {
                return Ok(Err(failure));
            }
        }
        self.attention.plan(sql, entry, staged, now_ms)
    }

    /// Records the Session projection after a call that changed `entry`'s
    /// state in its history (when it keeps one): the value is projected
    /// from the staged state and its write joins the call's writes, so it
    /// commits with them or not at all.
    fn record_history(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        session_id: String,
        staged: &mut Staged,
        now_ms: i64,
    ) -> Result<Result<(), Failure>, SqlError> {
        if !entry.manifest.projection.history || staged.answer.writes.is_empty() {
            return Ok(Ok(()));
        }
        let mut kept = Self::history(sql, cache, entry, &session_id)?.clone();
        let value = match self.projected(entry, &staged.state, Some(&session_id)) {
            Ok(value) => value.unwrap_or(Value::Null),
            Err(failure) => return Ok(Err(failure)),
        };
        if kept.record(value, now_ms) {
            staged
                .writes
                .push(history::store(entry.id(), &session_id, &kept));
            staged.history = Some((session_id, kept));
        }
        Ok(Ok(()))
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

    /// Calls `entry`'s callback `kind` in a transition that may send, and
    /// prepares its sends (their admission reads). A send requiring an
    /// existing Session that is absent is refused with `AdmissionError`
    /// reason `closed`, which the author may catch: the callback, pure over
    /// the state it is handed, runs again with that Session known closed,
    /// so its `send` throws. Each rerun closes one more of its at most
    /// [`EXTENSION_SENDS_PER_CALL_MAX`] Sessions, which bounds the reruns.
    #[allow(clippy::too_many_arguments)]
    fn call_and_send(
        &self,
        store: Store<'_>,
        entry: &Entry,
        kind: &str,
        session: Option<SessionRef<'_>>,
        event: &Value,
        now_ms: i64,
        cause: &str,
        fresh: Option<String>,
    ) -> Result<Result<(Staged, Vec<PreparedSend>), Refusal>, ApiError> {
        let sql = store.sql();
        let mut closed: Vec<String> = Vec::new();
        loop {
            let staged = match self.with_cache(sql, |cache| {
                let session = session.clone();
                let event = event.clone();
                self.call(
                    sql, cache, entry, kind, session, event, now_ms, true, &closed,
                )
            })? {
                Ok(staged) => staged,
                Err(failure) => return Ok(Err(Refusal::Hook(failure))),
            };
            let mut prepared = Vec::with_capacity(staged.sends.len());
            let mut absent = None;
            for send in sends(entry.id(), cause, &staged.sends, fresh.clone()) {
                match prepare_send(store, &send) {
                    Ok(p) => prepared.push(p),
                    Err(ApiError::SessionNotFound(s))
                        if send.require_existing_session
                            && !closed.contains(&s)
                            && closed.len() < EXTENSION_SENDS_PER_CALL_MAX =>
                    {
                        absent = Some(s);
                        break;
                    }
                    Err(e @ ApiError::Internal(_)) => return Err(e),
                    Err(e) => return Ok(Err(Refusal::Send(e))),
                }
            }
            match absent {
                None => return Ok(Ok((staged, prepared))),
                Some(s) => closed.push(s),
            }
        }
    }

    /// Asks the host; a refusal or a throw is a [`Failure`].
    #[allow(clippy::too_many_arguments)]
    fn ask(
        &self,
        entry: &Entry,
        kind: &str,
        rows: &Rows,
        session: Option<SessionRef<'_>>,
        event: Value,
        now_ms: i64,
        closed: &[String],
    ) -> Result<Answer, Failure> {
        let id = entry.id();
        let request = serde_json::to_string(&Request {
            ext: id,
            kind,
            state: rows,
            config: &entry.manifest.config,
            now: now_ms,
            session,
            event,
            closed,
        })
        .map_err(|e| Failure::Failed(format!("extension {id}: request: {e}")))?;
        let text = self.host.call(&request);
        if text.len() > EXTENSION_ANSWER_BYTES_MAX {
            return Err(Failure::Failed(format!(
                "extension {id}: the {kind} call answered over {EXTENSION_ANSWER_BYTES_MAX} bytes"
            )));
        }
        let answer: Answer = crate::json::from_text(&text).map_err(|e| {
            Failure::Failed(format!(
                "extension {id}: the {kind} call answered malformed JSON: {e}"
            ))
        })?;
        if answer.ok {
            attention::allowed_in(entry, kind, &answer.attention).map_err(Failure::Failed)?;
            return Ok(answer);
        }
        let error = answer
            .error
            .unwrap_or_else(|| format!("extension {id}: the {kind} call failed"));
        Err(if answer.refused {
            Failure::Refused(error)
        } else {
            Failure::Failed(error)
        })
    }

    /// Queues a staged call's writes and takes its state into the cache.
    fn apply(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        session_id: Option<&str>,
        staged: Staged,
    ) -> Result<Answer, SqlError> {
        let changed = !staged.writes.is_empty();
        // The feature groups of its writes, made with the first.
        if staged.attention.writes_items() {
            schema::ATTENTION.ensure(sql)?;
        }
        if staged.history.is_some() {
            schema::HISTORY.ensure(sql)?;
        }
        for (statement, params) in staged.writes {
            write(sql, &statement, params)?;
        }
        self.attention.commit(sql, staged.attention)?;
        cache.states.insert(entry.id().to_owned(), staged.state);
        cache.timers.insert(entry.id().to_owned(), staged.timers);
        if let Some((session_id, kept)) = staged.history {
            cache
                .histories
                .entry(session_id)
                .or_default()
                .insert(entry.id().to_owned(), kept);
        }
        if changed {
            self.touched.borrow_mut().insert(Touched {
                extension: entry.id().to_owned(),
                session_id: session_id.map(str::to_owned),
            });
        }
        Ok(staged.answer)
    }

    /// Records `entry`'s stop. `cursor`: the settled work it has handled
    /// (a settled-hook extension replays what follows once resumed).
    fn stop(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        reason: String,
        cursor: Option<i64>,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        let Some(meta) = cache.meta.get_mut(entry.id()) else {
            return Ok(());
        };
        meta.stopped = Some(cut(reason));
        meta.stopped_at = Some(now_ms);
        if entry.manifest.hooks.settled {
            meta.cursor = meta.cursor.or(cursor);
        }
        let meta = meta.clone();
        tables::put_meta(sql, entry.id(), &meta, now_ms)
    }

    // Opening.

    /// Brings every roster extension to its definition: a new one is
    /// recorded, with its state table; a new revision resumes a stopped
    /// one and runs the migrations its new state version needs, in order,
    /// in one transition (a failed migration records a stop and leaves the
    /// state as it was). Each extension is its own transition.
    pub fn open(&self, ctx: &mut Ctx<'_>) -> Result<(), ApiError> {
        // An empty roster reads nothing.
        if self.roster.is_empty() {
            return Ok(());
        }
        let sql = ctx.store.sql();
        for entry in self.roster.entries() {
            atomically(sql, || {
                self.with_cache(sql, |cache| match cache.meta.get(entry.id()).cloned() {
                    None => {
                        let meta = MetaRow {
                            revision: entry.revision.clone(),
                            state_version: entry.manifest.state.version,
                            stopped: None,
                            stopped_at: None,
                            cursor: None,
                        };
                        tables::create_state(sql, entry.id())?;
                        tables::put_meta(sql, entry.id(), &meta, ctx.now_ms)?;
                        cache.meta.insert(entry.id().to_owned(), meta);
                        Ok(())
                    }
                    Some(meta) if meta.revision == entry.revision => Ok(()),
                    Some(meta) => self.bring_up(sql, cache, entry, meta, ctx.now_ms),
                })
            })?;
        }
        Ok(())
    }

    /// Records `entry`'s revision, migrating its state when its version
    /// moved up, and clears its stop; or records why it cannot run.
    fn bring_up(
        &self,
        sql: &dyn Sql,
        cache: &mut Cache,
        entry: &Entry,
        mut meta: MetaRow,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        let declared = entry.manifest.state.version;
        meta.revision = entry.revision.clone();
        let refusal = if meta.state_version > declared {
            Some(format!(
                "extension {}: the stored state is version {}, newer than this definition's {declared}; \
                 deploy a definition of state version {} or later",
                entry.id(),
                meta.state_version,
                meta.state_version
            ))
        } else if meta.state_version < declared {
            let event = json!({"from": meta.state_version, "to": declared});
            match self.call(
                sql,
                cache,
                entry,
                "migrate",
                None,
                event,
                now_ms,
                false,
                &[],
            )? {
                Ok(staged) => {
                    self.apply(sql, cache, entry, None, staged)?;
                    meta.state_version = declared;
                    None
                }
                Err(failure) => Some(format!(
                    "migrating state {} -> {declared}: {}",
                    meta.state_version,
                    failure.reason()
                )),
            }
        } else {
            None
        };
        match refusal {
            Some(reason) => {
                meta.stopped = Some(cut(reason));
                meta.stopped_at = Some(now_ms);
                if entry.manifest.hooks.settled {
                    meta.cursor = meta.cursor.or(Some(cache.log_head));
                }
            }
            None => {
                meta.stopped = None;
                meta.stopped_at = None;
            }
        }
        tables::put_meta(sql, entry.id(), &meta, now_ms)?;
        cache.meta.insert(entry.id().to_owned(), meta);
        Ok(())
    }

    /// Resumes a stopped extension (a host call): its stop is cleared (a
    /// pending migration runs first), and the settled work it missed is
    /// replayed by the next passes. Answers its status.
    pub fn resume(&self, ctx: &mut Ctx<'_>, id: &str) -> Result<Status, ApiError> {
        let entry = self.entry(id)?;
        let sql = ctx.store.sql();
        atomically(sql, || {
            self.with_cache(sql, |cache| {
                let Some(meta) = cache.meta.get(id).cloned() else {
                    return Ok(());
                };
                if meta.stopped.is_some() {
                    self.bring_up(sql, cache, entry, meta, ctx.now_ms)?;
                }
                Ok(())
            })
        })?;
        self.status_of(ctx.store, entry)
    }

    // Settled work.

    /// Logs the settlement for the extensions that missed it, once per
    /// settlement: its `LOG` seq.
    fn log(
        sql: &dyn Sql,
        cache: &mut Cache,
        seq: &mut Option<i64>,
        command: &CommandRow,
    ) -> Result<i64, SqlError> {
        if let Some(seq) = *seq {
            return Ok(seq);
        }
        cache.log_head += 1;
        write(
            sql,
            &format!(
                "INSERT INTO {} (seq, session_id, command_id) VALUES (?, ?, ?)",
                tables::LOG
            ),
            vec![
                cache.log_head.into(),
                command.session_id.as_str().into(),
                command.command_id.as_str().into(),
            ],
        )?;
        *seq = Some(cache.log_head);
        Ok(cache.log_head)
    }

    /// The extensions with a settled hook.
    fn settled_hooks(&self) -> impl Iterator<Item = &Entry> {
        self.roster
            .entries()
            .iter()
            .filter(|e| e.manifest.hooks.settled)
    }

    /// Replays settled work a resumed extension missed: at most
    /// [`EXTENSION_REPLAY_PER_PASS_MAX`] settlements of one extension per
    /// transition, in order, each hook's writes with its cursor. A hook
    /// that fails stops it again at that settlement. Answers whether more
    /// is left.
    pub fn catch_up(&self, ctx: &mut Ctx<'_>) -> Result<bool, ApiError> {
        if self.settled_hooks().next().is_none() {
            return Ok(false);
        }
        let store = ctx.store;
        let sql = store.sql();
        let now_ms = ctx.now_ms;
        atomically(sql, || {
            self.with_cache(sql, |cache| {
                let Some((entry, cursor)) = self.settled_hooks().find_map(|e| {
                    let m = cache.meta.get(e.id())?;
                    (m.stopped.is_none()).then_some((e, m.cursor?))
                }) else {
                    return Ok(false);
                };
                // Reads first: the log, then each settlement.
                let logged = tables::log_after(sql, cursor, EXTENSION_REPLAY_PER_PASS_MAX)?;
                let mut work = Vec::with_capacity(logged.len());
                for (seq, session_id, command_id) in &logged {
                    let settlement = store
                        .command(session_id, command_id)?
                        .and_then(|c| c.settlement);
                    work.push((*seq, session_id.clone(), settlement));
                }
                Self::state(sql, cache, entry)?;
                // Each replayed Session's history is read before any write
                // of this extension's history table.
                if entry.manifest.projection.history {
                    for (_, session_id, _) in &work {
                        Self::history(sql, cache, entry, session_id)?;
                    }
                }
                let mut at = cursor;
                let mut failed = false;
                for (seq, session_id, settlement) in work {
                    // A deleted Session's work is gone with it.
                    if let Some(settlement) = settlement {
                        let event = settled_event(&session_id, &settlement)?;
                        let session = Some(SessionRef {
                            id: &session_id,
                            position: None,
                        });
                        match self.call(
                            sql,
                            cache,
                            entry,
                            "settled",
                            session,
                            event,
                            now_ms,
                            false,
                            &[],
                        )? {
                            Ok(staged) => {
                                self.apply(sql, cache, entry, Some(&session_id), staged)?;
                            }
                            Err(failure) => {
                                self.stop(sql, cache, entry, failure.reason(), Some(at), now_ms)?;
                                failed = true;
                                break;
                            }
                        }
                    }
                    at = seq;
                }
                let done = !failed && logged.len() < EXTENSION_REPLAY_PER_PASS_MAX;
                if let Some(meta) = cache.meta.get_mut(entry.id()) {
                    meta.cursor = if done { None } else { Some(at) };
                    let meta = meta.clone();
                    tables::put_meta(sql, entry.id(), &meta, now_ms)?;
                }
                // The log keeps what some extension still has to replay.
                let keep_after = self
                    .settled_hooks()
                    .filter_map(|e| cache.meta.get(e.id())?.cursor)
                    .min()
                    .unwrap_or(cache.log_head);
                write(
                    sql,
                    &format!("DELETE FROM {} WHERE seq <= ?", tables::LOG),
                    vec![keep_after.into()],
                )?;
                Ok(!done
                    || self.settled_hooks().any(|e| {
                        cache
                            .meta
                            .get(e.id())
                            .is_some_and(|m| m.stopped.is_none() && m.cursor.is_some())
                    }))
            })
            .map_err(ApiError::from)
        })
    }

    // Commands.

    /// Runs an extension command as one transition: its writes, its timers,
    /// its sends and its request record commit together, or nothing does.
    pub fn command(&self, ctx: &mut Ctx<'_>, inv: Invocation<'_>) -> Result<Invoked, ApiError> {
        let entry = self.entry(inv.extension)?;
        let id = entry.id();
        let decl = entry.manifest.commands.get(inv.command).ok_or_else(|| {
            ApiError::ExtensionCommandNotFound {
                extension: id.to_owned(),
                command: inv.command.to_owned(),
            }
        })?;
        match (decl.scope, inv.session_id) {
            (Scope::Session, None) => {
                return Err(ApiError::InvalidRequest(format!(
                    "command {id}.{} runs in a Session: call it at \
                     /sessions/:sessionId/extensions/{id}/commands/{}",
                    inv.command, inv.command
                )))
            }
            (Scope::Agent, Some(_)) => {
                return Err(ApiError::InvalidRequest(format!(
                    "command {id}.{} runs for the Agent: call it at /extensions/{id}/commands/{}",
                    inv.command, inv.command
                )))
            }
            _ => {}
        }
        let mut canonical = String::new();
        manifest::canonical_json(&inv.input, &mut canonical);
        if canonical.len() > EXTENSION_COMMAND_BYTES_MAX {
            return Err(ApiError::InvalidRequest(format!(
                "input: {} bytes of JSON; command {id}.{} takes at most {EXTENSION_COMMAND_BYTES_MAX}",
                canonical.len(),
                inv.command
            )));
        }
        entry
            .check_input(inv.command, &inv.input)
            .map_err(|e| ApiError::InvalidRequest(format!("input of {id}.{}: {e}", inv.command)))?;
        let store = ctx.store;
        let sql = store.sql();
        let now_ms = ctx.now_ms;
        let ids = &mut *ctx.ids;
        let scope = inv.session_id.unwrap_or("");
        atomically(sql, || {
            // Reads first.
            let meta = self.with_cache(sql, |cache| Ok(cache.meta.get(id).cloned()))?;
            if let Some(reason) = meta.and_then(|m| m.stopped) {
                return Err(ApiError::ExtensionStopped {
                    extension: id.to_owned(),
                    reason,
                });
            }
            let position = match inv.session_id {
                Some(session_id) => {
                    if !store.session_exists(session_id)? {
                        return Err(ApiError::SessionNotFound(session_id.to_owned()));
                    }
                    Some(store.position(session_id)?)
                }
                None => None,
            };
            if let Some(request_id) = inv.request_id {
                if let Some((command, input, result)) = tables::request(sql, id, scope, request_id)?
                {
                    return if command == inv.command && input == canonical {
                        Ok(Invoked {
                            result: serde_json::from_str(&result).map_err(internal)?,
                            sent: Vec::new(),
                            rearm: false,
                        })
                    } else {
                        Err(ApiError::RequestConflict(request_id.to_owned()))
                    };
                }
            }
            let kept = match inv.request_id {
                Some(_) => tables::request_count(sql, id)?,
                None => 0,
            };
            let event = json!({
                "name": inv.command,
                "input": inv.input,
                "requestId": inv.request_id,
            });
            let session = inv.session_id.map(|s| SessionRef { id: s, position });
            let cause = format!("command:{scope}:{}", inv.request_id.unwrap_or(""));
            let fresh = inv.request_id.is_none().then(|| ids.next_id(""));
            let (staged, prepared) = self
                .call_and_send(
                    store, entry, "command", session, &event, now_ms, &cause, fresh,
                )?
                .map_err(|r| match r {
                    Refusal::Hook(Failure::Refused(e)) => ApiError::InvalidRequest(e),
                    Refusal::Hook(Failure::Failed(e)) => ApiError::ExtensionCommandFailed(e),
                    Refusal::Hook(Failure::Bound(e)) => ApiError::ExtensionLimit(e),
                    Refusal::Send(e) => e,
                })?;
            let result = staged.answer.result.clone().unwrap_or(Value::Null);
            let rearm = !staged.answer.timers.is_empty();
            let result_text = result.to_string();
            if result_text.len() > EXTENSION_COMMAND_BYTES_MAX {
                return Err(ApiError::ExtensionCommandFailed(format!(
                    "extension {id}: the result of {} is {} bytes of JSON; at most {EXTENSION_COMMAND_BYTES_MAX}",
                    inv.command,
                    result_text.len()
                )));
            }
            // Writes.
            self.with_cache(sql, |cache| {
                self.apply(sql, cache, entry, inv.session_id, staged)
                    .map(drop)
            })?;
            if let Some(request_id) = inv.request_id {
                if kept >= EXTENSION_REQUESTS_KEPT_MAX {
                    write(
                        sql,
                        &format!(
                            "DELETE FROM {r} WHERE rowid IN
                                (SELECT rowid FROM {r} WHERE ext = ? ORDER BY rowid LIMIT ?)",
                            r = tables::REQUESTS
                        ),
                        vec![
                            id.into(),
                            ((kept + 1 - EXTENSION_REQUESTS_KEPT_MAX) as i64).into(),
                        ],
                    )?;
                }
                write(
                    sql,
                    &format!(
                        "INSERT INTO {} (ext, scope, request_id, command, input, result, at)
                         VALUES (?, ?, ?, ?, ?, ?, ?)",
                        tables::REQUESTS
                    ),
                    vec![
                        id.into(),
                        scope.into(),
                        request_id.into(),
                        inv.command.into(),
                        canonical.as_str().into(),
                        result_text.as_str().into(),
                        now_ms.into(),
                    ],
                )?;
            }
            let sent = commit_sends(store, ids, now_ms, &prepared)?;
            Ok(Invoked {
                result,
                sent,
                rearm,
            })
        })
    }

    // Timers.

    /// Fires due timers of running extensions, at most
    /// [`EXTENSION_TIMERS_PER_PASS_MAX`], each in its own transition with
    /// the hook's writes and sends; a timer fires once (deleted in that
    /// transition unless the hook set it again). A hook that fails stops
    /// its extension and keeps the timer for after the resume.
    pub fn fire_due(&self, ctx: &mut Ctx<'_>) -> Result<Fired, ApiError> {
        if self.roster.is_empty() {
            return Ok(Fired::default());
        }
        let store = ctx.store;
        let sql = store.sql();
        let now_ms = ctx.now_ms;
        let mut fired = Fired::default();
        if !tables::earliest_timers(sql)?
            .iter()
            .any(|&(_, at)| at <= now_ms)
        {
            // Nothing due (the common pass): no timer or stop to read.
            return Ok(fired);
        }
        let due = tables::due_timers(sql, now_ms, EXTENSION_TIMERS_PER_PASS_MAX * 4)?;
        let meta = tables::meta_rows(sql)?;
        for timer in due
            .into_iter()
            .filter(|t| {
                self.roster
                    .get(&t.ext)
                    .is_some_and(|e| e.manifest.hooks.timer)
                    && meta.get(&t.ext).is_some_and(|m| m.stopped.is_none())
            })
            .take(EXTENSION_TIMERS_PER_PASS_MAX)
        {
            let entry = self.entry(&timer.ext)?;
            let ids = &mut *ctx.ids;
            let sent = atomically(sql, || {
                // Reads first: is it still due, and as what.
                let Some(current) = tables::timer(sql, &timer.ext, &timer.name)? else {
                    return Ok(Vec::new());
                };
                if current.due_at > now_ms {
                    return Ok(Vec::new());
                }
                let position = match &current.session_id {
                    Some(s) => Some(store.position(s)?),
                    None => None,
                };
                let event = json!({
                    "name": current.name,
                    "sessionId": current.session_id,
                    "payload": current.payload,
                    "dueAt": current.due_at,
                });
                let session = current
                    .session_id
                    .as_deref()
                    .map(|id| SessionRef { id, position });
                // The firing timer no longer counts against the bound.
                self.with_cache(sql, |cache| {
                    if let Some(names) = cache.timers.get_mut(entry.id()) {
                        names.remove(&current.name);
                    }
                    Ok(())
                })?;
                let cause = format!("timer:{}:{}", current.name, current.due_at);
                let outcome = self
                    .call_and_send(store, entry, "timer", session, &event, now_ms, &cause, None)?;
                let (staged, prepared) = match outcome {
                    Ok(done) => done,
                    Err(refusal) => {
                        // A throwing hook, or a send the admission refuses
                        // (other than a caught `closed`), fails the hook.
                        let reason = match refusal {
                            Refusal::Hook(failure) => failure.reason(),
                            Refusal::Send(e) => format!(
                                "extension {}: timer {}: send: {e}",
                                entry.id(),
                                current.name
                            ),
                        };
                        self.with_cache(sql, |cache| {
                            let head = cache.log_head;
                            self.stop(sql, cache, entry, reason, Some(head), now_ms)
                        })?;
                        return Ok(Vec::new());
                    }
                };
                write(
                    sql,
                    &format!("DELETE FROM {} WHERE ext = ? AND name = ?", tables::TIMERS),
                    vec![entry.id().into(), current.name.as_str().into()],
                )?;
                self.with_cache(sql, |cache| {
                    self.apply(sql, cache, entry, current.session_id.as_deref(), staged)
                        .map(drop)
                })?;
                commit_sends(store, ids, now_ms, &prepared)
            })?;
            fired.timers += 1;
            fired.sent.extend(sent);
        }
        Ok(fired)
    }

    /// The earliest moment extensions have work: `now_ms` while a resumed
    /// extension replays missed work, else the earliest timer of a running
    /// extension with a timer hook.
    pub fn next_deadline(&self, store: Store<'_>, now_ms: i64) -> Result<Option<i64>, ApiError> {
        if self.roster.is_empty() {
            return Ok(None);
        }
        let sql = store.sql();
        let meta = tables::meta_rows(sql)?;
        let running = |e: &&Entry| meta.get(e.id()).is_some_and(|m| m.stopped.is_none());
        if self
            .settled_hooks()
            .filter(running)
            .any(|e| meta[e.id()].cursor.is_some())
        {
            return Ok(Some(now_ms));
        }
        let earliest = tables::earliest_timers(sql)?;
        Ok(self
            .roster
            .entries()
            .iter()
            .filter(|e| e.manifest.hooks.timer)
            .filter(running)
            .filter_map(|e| {
                earliest
                    .iter()
                    .find(|(id, _)| id == e.id())
                    .map(|&(_, at)| at)
            })
            .min()
            .map(|at| at.max(now_ms)))
    }

    // Outside transitions: projections, prompt sections, tools, status.

    /// `entry`'s projection of `scope` (`session_id` for a Session's), read
    /// from committed state: `None` when it publishes none.
    pub fn project(
        &self,
        store: Store<'_>,
        entry: &Entry,
        session_id: Option<&str>,
    ) -> Result<Option<Value>, String> {
        let declared = match session_id {
            Some(_) => entry.manifest.projection.session,
            None => entry.manifest.projection.agent,
        };
        if !declared {
            return Ok(None);
        }
        let rows = tables::load_rows(store.sql(), entry.id()).map_err(|e| e.to_string())?;
        self.projected(entry, &State::of(entry, rows), session_id)
            .map_err(Failure::reason)
    }

    /// `entry`'s projection of `state` (the Session's for `session_id`,
    /// else the Agent's), within its bound: `None` when it publishes none.
    fn projected(
        &self,
        entry: &Entry,
        state: &State,
        session_id: Option<&str>,
    ) -> Result<Option<Value>, Failure> {
        let scope = if session_id.is_some() {
            "session"
        } else {
            "agent"
        };
        let id = entry.id();
        let session = session_id.map(|s| SessionRef {
            id: s,
            position: None,
        });
        let answer = self.ask(
            entry,
            "project",
            &state.rows,
            session,
            json!({"scope": scope}),
            0,
            &[],
        )?;
        let Some(value) = answer.value else {
            return Ok(None);
        };
        let bytes = value.to_string().len();
        if bytes > EXTENSION_PROJECTION_BYTES_MAX {
            return Err(Failure::Bound(format!(
                "extension {id}: the {scope} projection is {bytes} bytes of JSON; at most {EXTENSION_PROJECTION_BYTES_MAX}"
            )));
        }
        Ok(Some(value))
    }

    /// The producer history of `session_id` each roster extension that
    /// keeps one holds, by extension id (read from committed state).
    pub fn session_histories(
        &self,
        store: Store<'_>,
        session_id: &str,
    ) -> Result<BTreeMap<String, History>, ApiError> {
        let keeping = || {
            self.roster
                .entries()
                .iter()
                .filter(|e| e.manifest.projection.history)
        };
        if keeping().next().is_none() {
            return Ok(BTreeMap::new());
        }
        // Looked up, not taken out: removing from a map of this type would
        // compile its rebalancing code into the wasm for this one use.
        let stored = history::load(store.sql(), session_id)?;
        Ok(keeping()
            .map(|e| {
                (
                    e.id().to_owned(),
                    stored.get(e.id()).cloned().unwrap_or_default(),
                )
            })
            .collect())
    }

    /// Every Session projection of `session_id`, by extension id. A
    /// projection that fails is left out and its error returned beside.
    pub fn session_projections(
        &self,
        store: Store<'_>,
        session_id: &str,
    ) -> (BTreeMap<String, Value>, Vec<String>) {
        let mut values = BTreeMap::new();
        let mut errors = Vec::new();
        for entry in self.roster.entries() {
            match self.project(store, entry, Some(session_id)) {
                Ok(Some(v)) => {
                    values.insert(entry.id().to_owned(), v);
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        (values, errors)
    }

    /// Runs the `kind` builder (prompt or tools) of every running extension
    /// that has one, over committed state: each extension's answer or error.
    fn builders(
        &self,
        store: Store<'_>,
        kind: &str,
        session_id: &str,
        command_id: &str,
    ) -> Vec<(&Entry, Result<Answer, String>)> {
        let Ok(meta) = tables::meta_rows(store.sql()) else {
            return Vec::new();
        };
        self.roster
            .entries()
            .iter()
            .filter(|e| match kind {
                "prompt" => e.manifest.prompt,
                _ => e.manifest.tools,
            })
            .filter(|e| meta.get(e.id()).is_some_and(|m| m.stopped.is_none()))
            .map(|e| (e, self.built(store, e, kind, session_id, command_id)))
            .collect()
    }

    /// Running extensions' prompt sections for a model call of the run
    /// headed by `command_id`, each extension's within
    /// [`EXTENSION_PROMPT_BYTES_MAX`]; a builder that fails is left out and
    /// its error returned beside.
    pub fn prompt_sections(
        &self,
        store: Store<'_>,
        session_id: &str,
        command_id: &str,
    ) -> (Vec<String>, Vec<String>) {
        let mut sections = Vec::new();
        let mut errors = Vec::new();
        for (entry, answer) in self.builders(store, "prompt", session_id, command_id) {
            let added = match answer {
                Ok(answer) => answer.sections.unwrap_or_default(),
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let bytes: usize = added.iter().map(String::len).sum();
            if bytes > EXTENSION_PROMPT_BYTES_MAX {
                errors.push(format!(
                    "extension {}: prompt sections of {bytes} bytes; at most {EXTENSION_PROMPT_BYTES_MAX}",
                    entry.id()
                ));
                continue;
            }
            sections.extend(added.into_iter().filter(|s| !s.trim().is_empty()));
        }
        (sections, errors)
    }

    /// Running extensions' commands offered to the model for the run
    /// headed by `command_id`: `(extension, markers)`, each marker a
    /// declared Session command.
    fn command_tools(
        &self,
        store: Store<'_>,
        session_id: &str,
        command_id: &str,
    ) -> (Vec<(&Entry, Vec<ToolMarker>)>, Vec<String>) {
        let mut tools = Vec::new();
        let mut errors = Vec::new();
        for (entry, answer) in self.builders(store, "tools", session_id, command_id) {
            let markers = match answer {
                Ok(answer) => answer.tools.unwrap_or_default(),
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let bad = markers.iter().find(|m| {
                entry
                    .manifest
                    .commands
                    .get(&m.command)
                    .is_none_or(|c| c.scope != Scope::Session)
            });
            match bad {
                Some(m) => errors.push(format!(
                    "extension {}: the tools builder offered `{}`, not a declared Session command",
                    entry.id(),
                    m.command
                )),
                None if !markers.is_empty() => tools.push((entry, markers)),
                None => {}
            }
        }
        (tools, errors)
    }

    /// The modules of the commands running extensions offer to the model
    /// in the run headed by `command_id`: module = the extension id,
    /// granted by its roster `grantKey`; each operation a declared Session
    /// command (`write`, safe to replay: a replay answers the stored
    /// result). A builder's error leaves its module out and is returned.
    pub fn tool_modules(
        &self,
        store: Store<'_>,
        session_id: &str,
        command_id: &str,
    ) -> (Vec<crate::capability::Module>, Vec<String>) {
        use crate::capability::{Access, Module, ModuleSpec, OperationSpec};
        let (offered, mut errors) = self.command_tools(store, session_id, command_id);
        let mut modules = Vec::new();
        for (entry, markers) in offered {
            let operations = markers
                .iter()
                .map(|m| {
                    let decl = &entry.manifest.commands[&m.command];
                    OperationSpec {
                        name: m.command.clone(),
                        description: m
                            .description
                            .clone()
                            .or_else(|| decl.description.clone())
                            .unwrap_or_else(|| format!("{}.{}", entry.id(), m.command)),
                        input_schema: decl
                            .input_schema
                            .clone()
                            .unwrap_or_else(|| json!({"type": "object"})),
                        access: Access::Write,
                        confirm: false,
                        replay_safe: true,
                    }
                })
                .collect();
            let spec = ModuleSpec {
                id: entry.id().to_owned(),
                operations,
            };
            match Module::from_spec(spec) {
                Ok(module) => modules.push(module.granted_by(&entry.manifest.grant_key)),
                Err(e) => errors.push(format!("extension {}: its tools: {}", entry.id(), e.0)),
            }
        }
        (modules, errors)
    }

    /// Whether `module_id` is an extension's command module.
    pub fn is_tool_module(&self, module_id: &str) -> bool {
        self.roster.get(module_id).is_some_and(|e| e.manifest.tools)
    }

    /// Runs a prompt or tools builder over committed state.
    fn built(
        &self,
        store: Store<'_>,
        entry: &Entry,
        kind: &str,
        session_id: &str,
        command_id: &str,
    ) -> Result<Answer, String> {
        let rows = tables::load_rows(store.sql(), entry.id()).map_err(|e| e.to_string())?;
        let state = State::of(entry, rows);
        let position = store.position(session_id).ok();
        self.ask(
            entry,
            kind,
            &state.rows,
            Some(SessionRef {
                id: session_id,
                position,
            }),
            json!({"sessionId": session_id, "commandId": command_id}),
            0,
            &[],
        )
        .map_err(Failure::reason)
    }

    /// One extension's status, with its Agent projection.
    pub fn status(&self, store: Store<'_>, id: &str) -> Result<Status, ApiError> {
        self.status_of(store, self.entry(id)?)
    }

    /// Every roster extension's status, with its Agent projection.
    pub fn statuses(&self, store: Store<'_>) -> Result<Vec<Status>, ApiError> {
        self.roster
            .entries()
            .iter()
            .map(|e| self.status_of(store, e))
            .collect()
    }

    fn status_of(&self, store: Store<'_>, entry: &Entry) -> Result<Status, ApiError> {
        let meta = tables::meta_rows(store.sql())?;
        let m = meta.get(entry.id());
        Ok(Status {
            id: entry.id().to_owned(),
            version: entry.manifest.version.clone(),
            revision: entry.revision.clone(),
            state_version: m.map_or(entry.manifest.state.version, |m| m.state_version),
            grant_key: entry.manifest.grant_key.clone(),
            feature: entry.manifest.feature.clone(),
            stopped: m.and_then(|m| {
                m.stopped.clone().map(|reason| Stop {
                    reason,
                    at: m.stopped_at,
                })
            }),
            behind: m.is_some_and(|m| m.cursor.is_some()),
            projection: self.project(store, entry, None).ok().flatten(),
            commands: entry
                .manifest
                .commands
                .iter()
                .map(|(name, c)| CommandInfo {
                    name: name.clone(),
                    scope: c.scope.as_str(),
                    description: c.description.clone(),
                })
                .collect(),
        })
    }
}

impl OnSettled for Extensions {
    /// Runs every settled hook inside the settling transition. An extension
    /// that is stopped or still replaying gets the settlement logged
    /// instead; a hook that fails stops its extension at this settlement.
    fn settled(
        &self,
        store: Store<'_>,
        command: &CommandRow,
        settlement: &str,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        if self.settled_hooks().next().is_none() {
            return Ok(());
        }
        let sql = store.sql();
        let event = settled_event(&command.session_id, settlement)?;
        self.with_cache(sql, |cache| {
            let mut seq = None;
            for entry in self.settled_hooks() {
                let Some(meta) = cache.meta.get(entry.id()) else {
                    continue;
                };
                if meta.behind() {
                    Self::log(sql, cache, &mut seq, command)?;
                    continue;
                }
                let session = Some(SessionRef {
                    id: &command.session_id,
                    position: None,
                });
                match self.call(
                    sql,
                    cache,
                    entry,
                    "settled",
                    session,
                    event.clone(),
                    now_ms,
                    false,
                    &[],
                )? {
                    Ok(staged) => {
                        if !staged.answer.timers.is_empty() {
                            self.rearm.set(true);
                        }
                        self.apply(sql, cache, entry, Some(&command.session_id), staged)?;
                    }
                    Err(failure) => {
                        let at = Self::log(sql, cache, &mut seq, command)?;
                        self.stop(sql, cache, entry, failure.reason(), Some(at - 1), now_ms)?;
                    }
                }
            }
            Ok(())
        })
    }
}

/// The settled hook's event: the CommandSettlement and its Session.
fn settled_event(session_id: &str, settlement: &str) -> Result<Value, SqlError> {
    let mut event: Value = serde_json::from_str(settlement)
        .map_err(|e| SqlError::Decode(format!("stored settlement: {e}")))?;
    if let Value::Object(map) = &mut event {
        map.insert("sessionId".into(), Value::String(session_id.to_owned()));
    }
    Ok(event)
}

/// The admissions of a call's sends. Each requestId derives from the
/// call's cause (a command's requestId, a timer's name and due time), so a
/// replayed cause replays its sends; `fresh` stands in for a cause that
/// has no id of its own.
fn sends(ext: &str, cause: &str, ops: &[SendOp], fresh: Option<String>) -> Vec<Send> {
    ops.iter()
        .enumerate()
        .map(|(i, op)| {
            let digest = Sha256::digest(format!(
                "{cause}\u{0}{}\u{0}{i}",
                fresh.as_deref().unwrap_or("")
            ));
            let hex = crate::text::hex(&digest[..12]);
            Send {
                session_id: op.session_id.clone(),
                request_id: format!("ext:{ext}:{hex}"),
                text: op.text.clone(),
                require_existing_session: op.require_existing_session,
            }
        })
        .collect()
}

fn commit_sends(
    store: Store<'_>,
    ids: &mut dyn crate::ctx::IdSource,
    now_ms: i64,
    prepared: &[PreparedSend],
) -> Result<Vec<Sent>, ApiError> {
    let mut out = Vec::new();
    for p in prepared {
        if let Some(admitted) = commit_send(store, ids, now_ms, p)? {
            out.push(Sent {
                session_id: p.session_id().to_owned(),
                request_id: p.request_id().to_owned(),
                admitted,
            });
        }
    }
    Ok(out)
}

/// Checks one call's answer against the definition and every bound and
/// turns it into writes; the state and timers it returns are the call's
/// result.
fn stage(
    entry: &Entry,
    mut state: State,
    mut timers: BTreeSet<String>,
    answer: Answer,
    sends_allowed: bool,
) -> Result<Staged, String> {
    let id = entry.id();
    let table = tables::state_table(id);
    let mut writes: Vec<Write> = Vec::new();
    for w in &answer.writes {
        let Some(decl) = entry.collection(&w.collection) else {
            return Err(format!(
                "extension {id}: collection `{}` is not declared",
                w.collection
            ));
        };
        let where_ = format!(
            "extension {id}: collection {}, key {:?}",
            w.collection, w.key
        );
        if decl.document && !w.key.is_empty() {
            return Err(format!("{where_}: a document has the one key \"\""));
        }
        if !decl.document && (w.key.is_empty() || w.key.len() > EXTENSION_KEY_BYTES_MAX) {
            return Err(format!(
                "{where_}: keys are 1 to {EXTENSION_KEY_BYTES_MAX} bytes"
            ));
        }
        let rows = state.rows.entry(w.collection.clone()).or_default();
        if let Some(old) = rows.remove(&w.key) {
            state.bytes -= w.key.len() + old.to_string().len();
        }
        if w.value.is_null() {
            writes.push((
                format!("DELETE FROM {table} WHERE collection = ? AND key = ?"),
                vec![w.collection.as_str().into(), w.key.as_str().into()],
            ));
            continue;
        }
        let text = w.value.to_string();
        if text.len() > EXTENSION_ROW_BYTES_MAX {
            return Err(format!(
                "{where_}: the row is {} bytes of JSON; at most {EXTENSION_ROW_BYTES_MAX}",
                text.len()
            ));
        }
        entry
            .check_row(&w.collection, &w.value)
            .map_err(|e| format!("{where_}: {e}"))?;
        state.bytes += w.key.len() + text.len();
        rows.insert(w.key.clone(), w.value.clone());
        if rows.len() > EXTENSION_ROWS_PER_COLLECTION_MAX {
            return Err(format!(
                "extension {id}: collection {} would hold {} rows; at most {EXTENSION_ROWS_PER_COLLECTION_MAX}",
                w.collection,
                rows.len()
            ));
        }
        writes.push((
            format!("INSERT OR REPLACE INTO {table} (collection, key, value) VALUES (?, ?, ?)"),
            vec![
                w.collection.as_str().into(),
                w.key.as_str().into(),
                text.into(),
            ],
        ));
    }
    if state.bytes > EXTENSION_STATE_BYTES_MAX {
        return Err(format!(
            "extension {id}: its state would be {} bytes; at most {EXTENSION_STATE_BYTES_MAX}",
            state.bytes
        ));
    }
    for t in &answer.timers {
        let where_ = format!("extension {id}: timer {:?}", t.name);
        let name_ok = !t.name.is_empty()
            && t.name.len() <= 128
            && t.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if !name_ok {
            return Err(format!("{where_}: names are 1 to 128 of [A-Za-z0-9_.:-]"));
        }
        if t.cancel {
            timers.remove(&t.name);
            writes.push((
                format!("DELETE FROM {} WHERE ext = ? AND name = ?", tables::TIMERS),
                vec![id.into(), t.name.as_str().into()],
            ));
            continue;
        }
        let at = match t.at {
            Some(at) if (0.0..=8.64e15).contains(&at) => at.floor() as i64,
            _ => {
                return Err(format!(
                    "{where_}: `at` must be a time in ms since the epoch"
                ))
            }
        };
        let payload = t.payload.to_string();
        if payload.len() > EXTENSION_TIMER_PAYLOAD_BYTES_MAX {
            return Err(format!(
                "{where_}: the payload is {} bytes of JSON; at most {EXTENSION_TIMER_PAYLOAD_BYTES_MAX}",
                payload.len()
            ));
        }
        if let Some(s) = &t.session_id {
            validate_session_id(s).map_err(|e| format!("{where_}: {e}"))?;
        }
        timers.insert(t.name.clone());
        if timers.len() > EXTENSION_TIMERS_MAX {
            return Err(format!(
                "extension {id}: it would hold {} timers; at most {EXTENSION_TIMERS_MAX}",
                timers.len()
            ));
        }
        writes.push((
            format!(
                "INSERT OR REPLACE INTO {} (ext, name, due_at, session_id, payload)
                 VALUES (?, ?, ?, ?, ?)",
                tables::TIMERS
            ),
            vec![
                id.into(),
                t.name.as_str().into(),
                at.into(),
                t.session_id.clone().into(),
                payload.into(),
            ],
        ));
    }
    if !answer.sends.is_empty() && !sends_allowed {
        return Err(format!(
            "extension {id}: send is available in commands and timer hooks only"
        ));
    }
    if answer.sends.len() > EXTENSION_SENDS_PER_CALL_MAX {
        return Err(format!(
            "extension {id}: {} sends in one call; at most {EXTENSION_SENDS_PER_CALL_MAX}",
            answer.sends.len()
        ));
    }
    let mut targets = BTreeSet::new();
    for s in &answer.sends {
        validate_session_id(&s.session_id).map_err(|e| format!("extension {id}: send: {e}"))?;
        if !targets.insert(s.session_id.as_str()) {
            return Err(format!(
                "extension {id}: two sends into Session {} in one call; at most one per Session",
                s.session_id
            ));
        }
        if s.text.is_empty() || s.text.len() > TEXT_BYTES_MAX {
            return Err(format!(
                "extension {id}: send: text is 1 to {TEXT_BYTES_MAX} bytes"
            ));
        }
    }
    attention::check(entry, &answer.attention)?;
    Ok(Staged {
        state,
        timers,
        writes,
        sends: answer.sends.clone(),
        answer,
        attention: attention::Planned::default(),
        history: None,
    })
}
