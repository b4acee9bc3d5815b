//! Typed queries over [`Sql`] for the core tables, and the versioned schema
//! of every table ([`schema`]). A feature's side tables (mail, extensions,
//! attention, ...) keep their statements in their own module; the Session
//! and run rules never spell SQL. Invariant: the
//! store holds every fact of the runtime; nothing in memory is needed to
//! rebuild it.

pub mod path;
pub mod schema;

use crate::sql::{Row, Sql, SqlError, SqlValue};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What kind of work a command row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Prompt,
    Operator,
    /// The answer to a user message generated again (`store::path`): a
    /// turn that writes no user message of its own.
    Retry,
    /// A branch selected: settled at admission, like an operator line.
    Select,
    /// A compaction asked for by a command: queued and run like a prompt,
    /// never joined to a turn.
    Compact,
}

/// A command's lifecycle: pending -> running -> settled, never back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Pending,
    Running,
    Settled,
}

/// How settled work ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Terminal {
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

macro_rules! text_enum {
    ($ty:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $text),+ }
            }
            fn parse(s: &str) -> Result<Self, SqlError> {
                match s {
                    $($text => Ok($ty::$variant),)+
                    other => Err(SqlError::Decode(format!(
                        concat!("unknown ", stringify!($ty), " `{}`"), other
                    ))),
                }
            }
        }
    };
}

text_enum!(Kind {
    Prompt => "prompt",
    Operator => "operator",
    Retry => "retry",
    Select => "select",
    Compact => "compact",
});
text_enum!(State { Pending => "pending", Running => "running", Settled => "settled" });
text_enum!(Terminal {
    Completed => "completed",
    Failed => "failed",
    Cancelled => "cancelled",
    Interrupted => "interrupted",
});

#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    pub seq: i64,
    pub session_id: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CommandRow {
    pub session_id: String,
    /// Admission order within the Session (the FIFO).
    pub seq: i64,
    pub command_id: String,
    pub request_id: Option<String>,
    pub kind: Kind,
    /// Canonical JSON of the admitted input; once settled with its text in
    /// the transcript, its [`input_digest`] ([`Existing::same_input`]).
    pub input: String,
    /// Canonical JSON of the host metadata, if any.
    pub meta: Option<String>,
    pub state: State,
    pub terminal: Option<Terminal>,
    pub accepted_at: i64,
    /// The head command of the turn this steer prompt joined.
    pub turn_id: Option<String>,
    /// Model-call attempts made for this turn.
    pub attempt: u32,
    pub started_at: Option<i64>,
    /// The durable retry timer of a failed attempt.
    pub retry_at: Option<i64>,
    /// Diagnostic of the last failed attempt.
    pub last_error: Option<String>,
    /// Usage of the turn's finished steps, JSON.
    pub usage: Option<String>,
    /// The CommandSettlement JSON once settled.
    pub settlement: Option<String>,
    /// The position a retry or a prompt with `after` starts its branch at
    /// (resolved from its entry id at admission; `0`: the start).
    pub anchor: Option<i64>,
}

impl CommandRow {
    fn with_settlement(mut self, stored: Option<String>) -> Result<Self, SqlError> {
        self.settlement = stored
            .map(|s| expand_settlement(s, &self.command_id, self.terminal))
            .transpose()?;
        Ok(self)
    }
}

/// A command to insert.
pub struct NewCommand<'a> {
    pub session_id: &'a str,
    pub seq: i64,
    pub command_id: &'a str,
    pub request_id: Option<&'a str>,
    pub kind: Kind,
    pub input: &'a str,
    pub meta: Option<&'a str>,
    pub state: State,
    pub terminal: Option<Terminal>,
    pub settlement: Option<&'a str>,
    /// 1 for a prompt claimed at admission (state running), else 0.
    pub attempt: u32,
    pub anchor: Option<i64>,
    pub now_ms: i64,
}

/// A command id names its Session-local sequence number (`cmd_<seq>_<random>`),
/// so a lookup by id is a primary-key lookup, with no index of its own to
/// write on every admission.
pub fn command_id(seq: i64, random: &str) -> String {
    format!("cmd_{seq}_{random}")
}

fn command_seq(command_id: &str) -> Option<i64> {
    let rest = command_id.strip_prefix("cmd_")?;
    let (seq, _) = rest.split_once('_')?;
    seq.parse().ok().filter(|n| *n > 0)
}

const COMMAND_COLUMNS: &str = "session_id, seq, command_id, request_id, kind, input, meta, \
     state, terminal, accepted_at, turn_id, attempt, started_at, retry_at, last_error, usage, \
     settlement, anchor";

/// What a settled command keeps of its input once its transcript message
/// holds the text (a settled prompt that ran, an operator line): a digest
/// of the canonical input, which is all a replay compares. 128 bits of
/// SHA-256: a different input with the same requestId cannot pass as a
/// replay.
pub fn input_digest(input: &str) -> String {
    format!(
        "sha256:{}",
        crate::text::hex(&Sha256::digest(input.as_bytes())[..16])
    )
}

/// The stored form of a settlement: without what the row's columns hold
/// (`commandId`, `terminal`) and without empty fields. [`command_row`]
/// restores the served form, so no reader sees the difference; rows
/// written before this form (starting with `commandId`) are served as
/// stored.
fn compact_settlement(full: &str) -> Result<String, SqlError> {
    let mut map: serde_json::Map<String, Value> =
        serde_json::from_str(full).map_err(|e| SqlError::Decode(format!("settlement: {e}")))?;
    map.remove("commandId");
    map.remove("terminal");
    map.retain(|key, value| match key.as_str() {
        "toolCallCount" => value.as_u64() != Some(0),
        _ => !value.is_null(),
    });
    Ok(Value::Object(map).to_string())
}

/// The served settlement of a stored one (see [`compact_settlement`]), in
/// the field order of `crate::settlement::Settlement`.
fn expand_settlement(
    stored: String,
    command_id: &str,
    terminal: Option<Terminal>,
) -> Result<String, SqlError> {
    if stored.starts_with("{\"commandId\"") {
        return Ok(stored);
    }
    let map: serde_json::Map<String, Value> =
        serde_json::from_str(&stored).map_err(|e| SqlError::Decode(format!("settlement: {e}")))?;
    let terminal = terminal.ok_or(SqlError::Decode("a settlement without terminal".into()))?;
    let field = |key: &str| map.get(key).cloned().unwrap_or(Value::Null);
    let mut out = format!(
        "{{\"commandId\":{},\"terminal\":\"{}\",\"answer\":{},\"usage\":{},\"toolCallCount\":{}",
        Value::from(command_id),
        terminal.as_str(),
        field("answer"),
        field("usage"),
        map.get("toolCallCount").cloned().unwrap_or(Value::from(0)),
    );
    for key in ["diagnostic", "meta"] {
        if let Some(value) = map.get(key) {
            out.push_str(&format!(",\"{key}\":{value}"));
        }
    }
    out.push('}');
    Ok(out)
}

/// How many columns [`COMMAND_COLUMNS`] names (counted from it).
const COMMAND_COLUMN_COUNT: usize = {
    let text = COMMAND_COLUMNS.as_bytes();
    let (mut count, mut i) = (1, 0);
    while i < text.len() {
        if text[i] == b',' {
            count += 1;
        }
        i += 1;
    }
    count
};

/// Decodes a row of [`COMMAND_COLUMNS`].
fn command_row(row: &Row) -> Result<CommandRow, SqlError> {
    CommandRow {
        session_id: row.text(0)?,
        seq: row.int(1)?,
        command_id: row.text(2)?,
        request_id: row.opt_text(3)?,
        kind: Kind::parse(&row.text(4)?)?,
        input: row.text(5)?,
        meta: row.opt_text(6)?,
        state: State::parse(&row.text(7)?)?,
        terminal: row
            .opt_text(8)?
            .as_deref()
            .map(Terminal::parse)
            .transpose()?,
        accepted_at: row.int(9)?,
        turn_id: row.opt_text(10)?,
        attempt: u32::try_from(row.int(11)?)
            .map_err(|_| SqlError::Decode("attempt out of range".into()))?,
        started_at: row.opt_int(12)?,
        retry_at: row.opt_int(13)?,
        last_error: row.opt_text(14)?,
        usage: row.opt_text(15)?,
        settlement: None,
        anchor: row.opt_int(17)?,
    }
    .with_settlement(row.opt_text(16)?)
}

fn command_rows(rows: Vec<Row>) -> Result<Vec<CommandRow>, SqlError> {
    rows.iter().map(command_row).collect()
}

/// Everything admission and withdrawal decide on, read in one statement:
/// admission is the hot path, one round trip into SQLite instead of four.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionFacts {
    pub session_exists: bool,
    pub fenced: bool,
    pub pending_count: usize,
    pub pending_bytes: usize,
    /// The sequence number the next command of the Session gets.
    pub next_seq: i64,
    /// Whether the Session is running a turn (a new prompt cannot start now).
    pub running: bool,
    /// Whether the Session holds a fence of any requestId: its admissions
    /// always read (their queue is never kept, [`Store::kept_queue`]).
    pub fences: bool,
    /// The command already admitted under this requestId, if any.
    pub existing: Option<Existing>,
}

/// The kept family of Sessions' queues ([`Store::kept_queue`]) and the
/// tables what it holds is read from.
const QUEUES: &str = "admission queues";
const QUEUE_TABLES: &[&str] = &["commands", "sessions", "fences"];

/// A Session's queue as admission decides on it, kept between admissions
/// (`sql::kept_for`): the Session exists and holds no fence.
#[derive(Debug, Clone, Copy)]
struct Queue {
    pending_count: usize,
    pending_bytes: usize,
    next_seq: i64,
    running: bool,
}

/// A command already admitted under a requestId: what a replay compares
/// and answers (the columns the admission read decodes, no more).
#[derive(Debug, Clone, PartialEq)]
pub struct Existing {
    pub command_id: String,
    pub kind: Kind,
    /// As [`CommandRow::input`]: canonical JSON, or its digest once settled.
    pub input: String,
    pub meta: Option<String>,
}

impl Existing {
    /// Whether `input` (canonical JSON) is what this command admitted.
    pub fn same_input(&self, input: &str) -> bool {
        self.input == input || self.input == input_digest(input)
    }
}

fn count(rows: Vec<Row>) -> Result<usize, SqlError> {
    let n = rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0);
    usize::try_from(n).map_err(|_| SqlError::Decode(format!("negative count {n}")))
}

/// The store of one Agent (one Durable Object).
#[derive(Clone, Copy)]
pub struct Store<'a> {
    sql: &'a dyn Sql,
    settled: Option<&'a dyn OnSettled>,
}

/// Told of every settlement inside the transition that writes it (the
/// extensions' settled hooks, `src/extension/`): what it writes commits
/// with the settlement or not at all.
pub trait OnSettled {
    fn settled(
        &self,
        store: Store<'_>,
        command: &CommandRow,
        settlement: &str,
        now_ms: i64,
    ) -> Result<(), SqlError>;
}

/// The one read of an admission (`Store::admission_facts`), built once:
/// admission runs on every prompt. The Session's queue (how many commands
/// are pending and their input bytes) is counted from the index of
/// unsettled commands alone (schema 8), so an admission behind a long
/// queue reads no command row. Short column names: a Durable Object's
/// cursor makes a JS string of each on every run (an expression is named
/// by its text).
pub(crate) fn admission_facts_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "SELECT
                EXISTS (SELECT 1 FROM sessions WHERE session_id = ?1) AS s,
                EXISTS (SELECT 1 FROM fences WHERE session_id = ?1 AND request_id = ?2) AS f,
                p.n,
                p.bytes,
                coalesce((SELECT seq FROM commands WHERE session_id = ?1
                    ORDER BY seq DESC LIMIT 1), 0) + 1 AS q,
                EXISTS (SELECT 1 FROM {UNSETTLED_COMMANDS}
                    WHERE session_id = ?1 AND {UNSETTLED} AND state = 'running') AS r,
                EXISTS (SELECT 1 FROM fences WHERE session_id = ?1) AS g,
                c.command_id, c.kind, c.input, c.meta
             FROM (SELECT count(*) AS n, coalesce(sum(input_bytes), 0) AS bytes
                    FROM {UNSETTLED_COMMANDS}
                    WHERE session_id = ?1 AND {UNSETTLED} AND state = 'pending') p
             LEFT JOIN commands c
                ON c.session_id = ?1 AND c.request_id = ?2"
        )
    })
}

/// Commands not yet settled: the partial index `commands_unsettled` covers
/// exactly these. Queue and run queries name it (`UNSETTLED_COMMANDS`), so
/// they never scan settled history however long it grows (without stats
/// the planner would prefer the primary key).
const UNSETTLED: &str = "settled_at IS NULL";
const UNSETTLED_COMMANDS: &str = "commands INDEXED BY commands_unsettled";

impl<'a> Store<'a> {
    pub fn new(sql: &'a dyn Sql) -> Self {
        Store { sql, settled: None }
    }

    /// A store whose settlements `observer` is told of.
    pub fn observed(sql: &'a dyn Sql, observer: &'a dyn OnSettled) -> Self {
        Store {
            sql,
            settled: Some(observer),
        }
    }

    pub fn sql(&self) -> &'a dyn Sql {
        self.sql
    }

    fn query(&self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>, SqlError> {
        crate::sql::read(self.sql, sql, params)
    }

    fn write(&self, sql: &str, params: Vec<SqlValue>) -> Result<(), SqlError> {
        crate::sql::write(self.sql, sql, params)
    }

    // Sessions.

    pub fn session_exists(&self, session_id: &str) -> Result<bool, SqlError> {
        let rows = self.query(
            "SELECT 1 FROM sessions WHERE session_id = ?",
            &[session_id.into()],
        )?;
        Ok(!rows.is_empty())
    }

    /// Whether `session_id` exists, and how many Sessions there are: what
    /// creating one checks, in one statement.
    pub fn session_and_count(&self, session_id: &str) -> Result<(bool, usize), SqlError> {
        let rows = self.query(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE session_id = ?),
                (SELECT count(*) FROM sessions)",
            &[session_id.into()],
        )?;
        let row = rows
            .first()
            .ok_or_else(|| SqlError::Decode("no row for the Session check".into()))?;
        Ok((
            row.int(0)? != 0,
            usize::try_from(row.int(1)?).unwrap_or(usize::MAX),
        ))
    }

    pub fn session_count(&self) -> Result<usize, SqlError> {
        count(self.query("SELECT count(*) FROM sessions", &[])?)
    }

    pub fn insert_session(&self, session_id: &str, now_ms: i64) -> Result<(), SqlError> {
        self.write(
            "INSERT INTO sessions (session_id, created_at) VALUES (?, ?)",
            vec![session_id.into(), now_ms.into()],
        )
    }

    /// Sessions created after `after_seq`, oldest first, at most `limit`.
    pub fn sessions_after(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<SessionRow>, SqlError> {
        self.query(
            "SELECT seq, session_id, created_at FROM sessions WHERE seq > ? ORDER BY seq LIMIT ?",
            &[after_seq.into(), (limit as i64).into()],
        )?
        .iter()
        .map(|r| {
            Ok(SessionRow {
                seq: r.int(0)?,
                session_id: r.text(1)?,
                created_at: r.int(2)?,
            })
        })
        .collect()
    }

    /// Removes the Session and every fact it owns. Returns whether it existed.
    pub fn delete_session(&self, session_id: &str) -> Result<bool, SqlError> {
        if !self.session_exists(session_id)? {
            return Ok(false);
        }
        for table in [
            "messages",
            "fences",
            "commands",
            "session_grants",
            "sessions",
        ] {
            self.write(
                &format!("DELETE FROM {table} WHERE session_id = ?"),
                vec![session_id.into()],
            )?;
        }
        Ok(true)
    }

    // Commands.

    pub fn admission_facts(
        &self,
        session_id: &str,
        request_id: &str,
    ) -> Result<AdmissionFacts, SqlError> {
        let sql = admission_facts_sql();
        let rows = self.query(sql, &[session_id.into(), request_id.into()])?;
        let row = rows
            .first()
            .ok_or(SqlError::Decode("no admission row".into()))?;
        let existing = match row.opt_text(7)? {
            Some(command_id) => Some(Existing {
                command_id,
                kind: Kind::parse(&row.text(8)?)?,
                input: row.text(9)?,
                meta: row.opt_text(10)?,
            }),
            None => None,
        };
        Ok(AdmissionFacts {
            session_exists: row.int(0)? == 1,
            fenced: row.int(1)? == 1,
            pending_count: row.int(2)? as usize,
            pending_bytes: row.int(3)? as usize,
            next_seq: row.int(4)?,
            running: row.int(5)? == 1,
            fences: row.int(6)? == 1,
            existing,
        })
    }

    /// The admission facts of a Session whose queue is kept, without a
    /// statement: it exists and holds no fence. They know nothing of the
    /// requestId: a command already admitted under it makes the insert
    /// fail (the unique `commands_by_request`), so a caller that decides
    /// on them reads them again when its write fails.
    pub fn kept_queue(&self, session_id: &str) -> Option<AdmissionFacts> {
        let q = crate::sql::kept_for::<Queue>(self.sql, QUEUES, session_id)?;
        Some(AdmissionFacts {
            session_exists: true,
            fenced: false,
            pending_count: q.pending_count,
            pending_bytes: q.pending_bytes,
            next_seq: q.next_seq,
            running: q.running,
            fences: false,
            existing: None,
        })
    }

    /// Vouches, in the open transition, that its one write queues one
    /// pending command of `input_bytes` into the Session `facts` were read
    /// or kept for: its queue is kept from then on (unless it holds a
    /// fence, whose requestIds only a read checks).
    pub fn vouch_queued(
        &self,
        session_id: &str,
        facts: &AdmissionFacts,
        input_bytes: usize,
    ) -> Result<(), SqlError> {
        if !facts.session_exists || facts.fences {
            return Ok(());
        }
        let queue = Queue {
            pending_count: facts.pending_count + 1,
            pending_bytes: facts.pending_bytes + input_bytes,
            next_seq: facts.next_seq + 1,
            running: facts.running,
        };
        crate::sql::vouch(self.sql, QUEUES, QUEUE_TABLES, session_id, queue)
    }

    /// A command of the Session by id.
    pub fn command(
        &self,
        session_id: &str,
        command_id: &str,
    ) -> Result<Option<CommandRow>, SqlError> {
        let Some(seq) = command_seq(command_id) else {
            return Ok(None);
        };
        let rows = self.query(
            &format!(
                "SELECT {COMMAND_COLUMNS} FROM commands
                 WHERE session_id = ? AND seq = ? AND command_id = ?"
            ),
            &[session_id.into(), seq.into(), command_id.into()],
        )?;
        rows.first().map(command_row).transpose()
    }

    pub fn insert_command(&self, c: &NewCommand<'_>) -> Result<(), SqlError> {
        debug_assert_eq!(command_seq(c.command_id), Some(c.seq));
        // `input_bytes` is the stored input's length, as SQLite counts it.
        self.write(
            "INSERT INTO commands (session_id, seq, command_id, request_id, kind, input, meta,
                state, terminal, accepted_at, settled_at, settlement, attempt, started_at, anchor,
                input_bytes)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, octet_length(?6))",
            vec![
                c.session_id.into(),
                c.seq.into(),
                c.command_id.into(),
                c.request_id.into(),
                c.kind.as_str().into(),
                // An operator line is settled at admission, its text in its
                // message (see `CommandRow::input`).
                match c.kind {
                    Kind::Operator => input_digest(c.input),
                    _ => c.input.to_owned(),
                }
                .into(),
                c.meta.into(),
                c.state.as_str().into(),
                c.terminal.map(Terminal::as_str).into(),
                c.now_ms.into(),
                (c.state == State::Settled).then_some(c.now_ms).into(),
                c.settlement.map(compact_settlement).transpose()?.into(),
                i64::from(c.attempt).into(),
                (c.state == State::Running).then_some(c.now_ms).into(),
                c.anchor.into(),
            ],
        )
    }

    /// Pending commands of a Session in FIFO order.
    pub fn pending(&self, session_id: &str) -> Result<Vec<CommandRow>, SqlError> {
        command_rows(self.query(
            &format!(
                "SELECT {COMMAND_COLUMNS} FROM {UNSETTLED_COMMANDS}
                 WHERE session_id = ? AND {UNSETTLED} AND state = 'pending' ORDER BY seq"
            ),
            &[session_id.into()],
        )?)
    }

    /// Records a command's settlement. Guarded by the states it may leave
    /// from, so a settlement is written once.
    pub fn settle(
        &self,
        command: &CommandRow,
        terminal: Terminal,
        settlement: &str,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        self.write(
            &format!(
                "UPDATE commands SET state = 'settled', terminal = ?, settlement = ?,
                    settled_at = ?, retry_at = NULL, input = coalesce(?, input)
                 WHERE session_id = ? AND seq = ? AND {UNSETTLED}"
            ),
            vec![
                terminal.as_str().into(),
                compact_settlement(settlement)?.into(),
                now_ms.into(),
                // A command that ran has its text in its `user` message. A
                // cancelled one keeps it: a repeated cancel answers it.
                (command.state == State::Running && terminal != Terminal::Cancelled)
                    .then(|| input_digest(&command.input))
                    .into(),
                command.session_id.as_str().into(),
                command.seq.into(),
            ],
        )?;
        match self.settled {
            // A row read as settled is not settled again (the write above
            // changes nothing), so no hook hears it twice.
            Some(observer) if command.state != State::Settled => {
                observer.settled(*self, command, settlement, now_ms)
            }
            _ => Ok(()),
        }
    }

    /// Starts (or restarts) a command as part of the turn headed by `turn_id`
    /// (`None`: it heads its own turn).
    pub fn claim(
        &self,
        command: &CommandRow,
        turn_id: Option<&str>,
        attempt: u32,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        self.write(
            &format!(
                "UPDATE commands SET state = 'running', turn_id = ?, attempt = ?, started_at = ?,
                    retry_at = NULL
                 WHERE session_id = ? AND seq = ? AND {UNSETTLED}"
            ),
            vec![
                turn_id.into(),
                i64::from(attempt).into(),
                now_ms.into(),
                command.session_id.as_str().into(),
                command.seq.into(),
            ],
        )
    }

    /// Arms the durable retry timer of a failed attempt.
    pub fn schedule_retry(
        &self,
        command: &CommandRow,
        retry_at: i64,
        diagnostic: &str,
    ) -> Result<(), SqlError> {
        self.write(
            &format!(
                "UPDATE commands SET retry_at = ?, last_error = ?
                 WHERE session_id = ? AND seq = ? AND {UNSETTLED}"
            ),
            vec![
                retry_at.into(),
                diagnostic.into(),
                command.session_id.as_str().into(),
                command.seq.into(),
            ],
        )
    }

    pub fn set_usage(&self, command: &CommandRow, usage: &str) -> Result<(), SqlError> {
        self.write(
            "UPDATE commands SET usage = ? WHERE session_id = ? AND seq = ?",
            vec![
                usage.into(),
                command.session_id.as_str().into(),
                command.seq.into(),
            ],
        )
    }

    /// What reconciliation decides on, in one read: every running command
    /// (turn heads and the steer prompts that joined them) and the queue
    /// head of each Session with no running turn, by Session, then in
    /// admission order.
    pub fn runnable(&self) -> Result<Vec<CommandRow>, SqlError> {
        command_rows(self.query(
            &format!(
                "SELECT {COMMAND_COLUMNS} FROM commands c INDEXED BY commands_unsettled
                 WHERE c.{UNSETTLED} AND (c.state = 'running' OR (c.state = 'pending'
                   AND c.seq = (SELECT min(p.seq) FROM commands p INDEXED BY commands_unsettled
                       WHERE p.session_id = c.session_id AND p.{UNSETTLED} AND p.state = 'pending')
                   AND NOT EXISTS (SELECT 1 FROM commands r INDEXED BY commands_unsettled
                       WHERE r.session_id = c.session_id AND r.{UNSETTLED} AND r.state = 'running')))
                 ORDER BY c.session_id, c.seq"
            ),
            &[],
        )?)
    }

    /// How many commands of every Session are running and pending (the
    /// fleet's archive refusals, `crate::fleet::member`).
    pub fn unsettled_counts(&self) -> Result<(usize, usize), SqlError> {
        let rows = self.query(
            &format!(
                "SELECT coalesce(sum(state = 'running'), 0), coalesce(sum(state = 'pending'), 0)
                 FROM {UNSETTLED_COMMANDS} WHERE {UNSETTLED}"
            ),
            &[],
        )?;
        let count = |i| -> Result<usize, SqlError> {
            Ok(rows.first().map(|r| r.int(i)).transpose()?.unwrap_or(0) as usize)
        };
        Ok((count(0)?, count(1)?))
    }

    /// The running turn head of one Session, if any.
    pub fn running_head(&self, session_id: &str) -> Result<Option<CommandRow>, SqlError> {
        let rows = self.query(
            &format!(
                "SELECT {COMMAND_COLUMNS} FROM {UNSETTLED_COMMANDS}
                 WHERE session_id = ? AND {UNSETTLED} AND state = 'running' AND turn_id IS NULL"
            ),
            &[session_id.into()],
        )?;
        rows.first().map(command_row).transpose()
    }

    /// The commands of the running turn headed by `head_id`: the head, then
    /// the steer prompts that joined it, in admission order.
    pub fn turn(&self, session_id: &str, head_id: &str) -> Result<Vec<CommandRow>, SqlError> {
        command_rows(self.query(
            &format!(
                "SELECT {COMMAND_COLUMNS} FROM {UNSETTLED_COMMANDS}
                 WHERE session_id = ? AND {UNSETTLED} AND state = 'running'
                   AND (command_id = ? OR turn_id = ?)
                 ORDER BY seq"
            ),
            &[session_id.into(), head_id.into(), head_id.into()],
        )?)
    }

    /// The principal `path` selects in `meta` (SQLite's `json_extract`, as
    /// the seed specifies), as JSON text; `None` when absent or null.
    pub fn principal(&self, meta: Option<&str>, path: &str) -> Result<Option<String>, SqlError> {
        let Some(meta) = meta else { return Ok(None) };
        let rows = self.query(
            "SELECT json_quote(json_extract(?1, ?2)) WHERE json_extract(?1, ?2) IS NOT NULL",
            &[meta.into(), path.into()],
        )?;
        rows.first().map(|r| r.text(0)).transpose()
    }

    /// The newest pending prompt of the Session (a retry is none: it has no
    /// text of its own; nor is a compaction), of one principal when
    /// `principal` is given (`(path, principal as JSON text)`).
    pub fn latest_pending(
        &self,
        session_id: &str,
        principal: Option<(&str, &str)>,
    ) -> Result<Option<(CommandRow, usize)>, SqlError> {
        let (path, who) = principal.unzip();
        // Its place in the queue is counted, not read: the queue's rows
        // carry their inputs (up to 64 of them).
        let rows = self.query(
            &format!(
                "SELECT {COMMAND_COLUMNS},
                    (SELECT count(*) FROM {UNSETTLED_COMMANDS}
                        WHERE session_id = ?1 AND {UNSETTLED} AND state = 'pending'
                            AND seq <= c.seq)
                 FROM (SELECT * FROM {UNSETTLED_COMMANDS}
                    WHERE session_id = ?1 AND {UNSETTLED} AND state = 'pending' AND kind = 'prompt'
                        AND (?2 IS NULL OR json_quote(json_extract(meta, ?2)) = ?3)
                    ORDER BY seq DESC LIMIT 1) c"
            ),
            &[session_id.into(), path.into(), who.into()],
        )?;
        rows.first()
            .map(|row| {
                let place = row.int(COMMAND_COLUMN_COUNT)?;
                let place = usize::try_from(place)
                    .map_err(|_| SqlError::Decode(format!("queue place {place}")))?;
                Ok((command_row(row)?, place))
            })
            .transpose()
    }

    /// Every unsettled command of a Session in admission order (its running
    /// turn and its pending queue, both bounded by admission): what a
    /// transition on a running turn decides on, in one read.
    pub fn unsettled(&self, session_id: &str) -> Result<Vec<CommandRow>, SqlError> {
        command_rows(self.query(
            &format!(
                "SELECT {COMMAND_COLUMNS} FROM {UNSETTLED_COMMANDS}
                 WHERE session_id = ? AND {UNSETTLED} ORDER BY seq"
            ),
            &[session_id.into()],
        )?)
    }

    // Grants.

    /// `(version, canonical grants JSON)` delivered for the Session.
    pub fn session_grants(&self, session_id: &str) -> Result<Option<(u64, String)>, SqlError> {
        let rows = self.query(
            "SELECT version, grants FROM session_grants WHERE session_id = ?",
            &[session_id.into()],
        )?;
        rows.first()
            .map(|r| Ok((r.int(0)? as u64, r.text(1)?)))
            .transpose()
    }

    pub fn put_session_grants(
        &self,
        session_id: &str,
        version: u64,
        grants: &str,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        self.write(
            "INSERT INTO session_grants (session_id, version, grants, delivered_at)
             VALUES (?, ?, ?, ?)
             ON CONFLICT (session_id) DO UPDATE SET
                version = excluded.version, grants = excluded.grants,
                delivered_at = excluded.delivered_at",
            vec![
                session_id.into(),
                (version as i64).into(),
                grants.into(),
                now_ms.into(),
            ],
        )
    }

    // Withdrawal fences.

    pub fn fence_count(&self, session_id: &str) -> Result<usize, SqlError> {
        count(self.query(
            "SELECT count(*) FROM fences WHERE session_id = ?",
            &[session_id.into()],
        )?)
    }

    pub fn insert_fence(
        &self,
        session_id: &str,
        request_id: &str,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        self.write(
            "INSERT INTO fences (session_id, request_id, created_at) VALUES (?, ?, ?)",
            vec![session_id.into(), request_id.into(), now_ms.into()],
        )
    }

    // Messages: one row each, keyed by (Session, position); branches in
    // `path.rs`.

    /// The Session's committed position: its newest message's `seq` (a
    /// fork without messages of its own: its base position), 0 for an
    /// empty transcript (or an absent Session).
    pub fn position(&self, session_id: &str) -> Result<i64, SqlError> {
        let rows = self.query(&format!("SELECT {}", path::NEWEST), &[session_id.into()])?;
        rows.first().map(|r| r.int(0)).unwrap_or(Ok(0))
    }
}
