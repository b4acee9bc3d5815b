//! The versioned schema. One version covers every table the runtime
//! creates: the core tables every Agent writes ([`CREATE`], made with an
//! empty store) and the side tables of the feature groups ([`Group`]: mail,
//! extensions, attention, the files workspace, ...), each made in the
//! transition of its first write and recorded in `shiitake_meta` with the
//! version of its shape. A store of an older version is brought forward by
//! the ordered steps of [`MIGRATIONS`] when the object opens, every pending
//! step and the version row in one transaction, so a crash during a
//! migration leaves the old version intact and the next open migrates
//! again. A store of a newer version, or holding tables of this crate
//! without a version, is refused with [`ApiError::StorageIncompatible`] and
//! left untouched: the host keeps custody of data this build cannot read.
//!
//! The rule (ARCHITECTURE.md): every change to what is stored ships a step
//! here, the new shape in [`CREATE`] or in its group's DDL, and a committed
//! fixture store of the release before it (`tests/fixtures/stores/`). A
//! released step is frozen: a later change is a later step, never an edit
//! of one.

use crate::error::ApiError;
use crate::sql::{
    atomically, create_group, holds_group, read, read_beside, stages_group, write, Sql, SqlError,
};
use std::collections::HashSet;

/// One forward step: `to` is the version the store has after it.
///
/// A step stages writes (DDL, and statements that compute in SQLite such as
/// `INSERT … SELECT`); they apply with every other pending step's and the
/// version row, all or none, at the end of the one transition
/// (`sql::atomically`). So a step that reads sees the store as it was
/// before the migration, through `sql::read_beside` (refused for a table an
/// earlier step wrote). A step costs O(1) in transcript length where the
/// change allows it (`ALTER TABLE … ADD COLUMN` with a default meaning the
/// old behaviour). A step changing a feature group's tables goes through
/// [`change_group`]: only a store holding the group is changed.
struct Migration {
    to: i64,
    what: &'static str,
    apply: fn(&dyn Sql) -> Result<(), SqlError>,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        to: 2,
        what: "the side tables version 1 made on first use, recorded as feature groups",
        apply: to_2,
    },
    Migration {
        to: 3,
        what: "transcript branches (message parents, the selected tip, forks, command anchors)",
        apply: to_branches,
    },
    Migration {
        to: 4,
        what: "compaction entries",
        apply: to_compaction,
    },
    Migration {
        to: 5,
        what: "the usage ledger (feature group `usage`, made at its first write)",
        apply: group_made_at_first_write,
    },
    Migration {
        to: 6,
        what: "the traces group (OpenTelemetry spans waiting for export, made at the first span)",
        apply: group_made_at_first_write,
    },
    Migration {
        to: 7,
        what: "token budgets (feature group `budget`, made when a budget is first set or configured; the usage ledger keeps what the budget charged each call)",
        apply: to_budgets,
    },
    Migration {
        to: 8,
        what: "the queue's bounds read from the index of unsettled commands (each command's input bytes and state in it)",
        apply: to_queue_index,
    },
];

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 8; // the last step's `to`

const _: () = assert!(MIGRATIONS[MIGRATIONS.len() - 1].to == SCHEMA_VERSION);

/// Version 1's tables as a version 1 store's catalog holds them
/// (`sqlite_master`, every table made on first use included), frozen.
const V1: &str = include_str!("v1.sql");

/// Version 1's core: what its `open` made in an empty store besides the
/// delivery tables (which `to_2` records as a group like the others).
const V1_CORE: &[&str] = &[
    "shiitake_meta",
    "sessions",
    "commands",
    "fences",
    "messages",
    "session_grants",
];

/// Schema 3: transcript branches (`store::path`). Each change is an
/// `ADD COLUMN` whose `NULL` means what a row of schema 1 meant (the linear
/// predecessor, the newest message as the tip, no base, no anchor) and an
/// index of no row yet, so the step is O(1) in transcript length.
const TO_BRANCHES: &str = "ALTER TABLE messages ADD COLUMN parent INTEGER;
    CREATE INDEX messages_children ON messages (session_id, parent) WHERE parent IS NOT NULL;
    ALTER TABLE sessions ADD COLUMN head INTEGER;
    ALTER TABLE sessions ADD COLUMN head_at INTEGER;
    ALTER TABLE sessions ADD COLUMN base_session TEXT;
    ALTER TABLE sessions ADD COLUMN base_seq INTEGER;
    ALTER TABLE commands ADD COLUMN anchor INTEGER";

/// The migration step to schema 3 (transcript branches), run inside the
/// migration's transaction.
pub fn to_branches(sql: &dyn Sql) -> Result<(), SqlError> {
    write(sql, TO_BRANCHES, Vec::new())
}

/// Schema 4: compaction entries (`messages.kind`). `NULL`, every older
/// row's value, means an ordinary message, so the step is O(1) in
/// transcript length.
fn to_compaction(sql: &dyn Sql) -> Result<(), SqlError> {
    write(sql, "ALTER TABLE messages ADD COLUMN kind TEXT", Vec::new())
}

/// Schemas 5 (the usage ledger, [`USAGE`]), 6 (trace spans, [`TRACES`])
/// and 7 (token budgets, [`BUDGET`]):
/// each adds a feature group, whose table a store gets with its first write,
/// so the step changes nothing in place (O(1)); the version it records keeps
/// an older build, which would write turns without their ledger rows or
/// spans, from opening the store. Turns settled before schema 5 have no
/// ledger rows: their usage stays in their settlements, and nothing is
/// guessed into the ledger.
fn group_made_at_first_write(_: &dyn Sql) -> Result<(), SqlError> {
    Ok(())
}

/// Schema 7: the budget group is made at its first write; a store holding
/// the usage ledger gets its two columns of what the budget charged a call
/// (`NULL`: nothing, as for every call before).
fn to_budgets(sql: &dyn Sql) -> Result<(), SqlError> {
    change_group(
        sql,
        &USAGE,
        7,
        "ALTER TABLE shiitake_usage ADD COLUMN charged INTEGER;\nALTER TABLE shiitake_usage ADD COLUMN charged_day INTEGER",
    )
}

/// The index of unsettled commands as schema 8 has it (see [`CREATE`]).
const UNSETTLED_INDEX: &str =
    "CREATE INDEX commands_unsettled ON commands (session_id, seq, state, input_bytes, settled_at)
        WHERE settled_at IS NULL";

/// Schema 8: admission counts a Session's pending commands and their input
/// bytes from the index of unsettled commands alone, with no read of a
/// command row (`Store::admission_facts`). The column is filled for the
/// unsettled commands only (at most 64 pending per Session, and the running
/// ones): a settled command is never counted, so its `NULL` stays. Making
/// the index reads the commands table once.
fn to_queue_index(sql: &dyn Sql) -> Result<(), SqlError> {
    write(
        sql,
        &format!(
            "ALTER TABLE commands ADD COLUMN input_bytes INTEGER;
            UPDATE commands SET input_bytes = octet_length(input) WHERE settled_at IS NULL;
            DROP INDEX commands_unsettled;
            {UNSETTLED_INDEX}"
        ),
        Vec::new(),
    )
}

/// The tables a version 1 fleet directory object held (the directory made
/// them on first use, without the version row or any other table).
const DIRECTORY_V1: &[&str] = &["shiitake_directory", "shiitake_directory_erased"];

/// Version 1's other tables by the feature group `to_2` records them as;
/// frozen with it.
const V1_GROUPS: &[(&str, &[&str])] = &[
    ("delivery", &["shiitake_delivery", "shiitake_host_lane"]),
    ("mail", &["shiitake_mail_outbox", "shiitake_mail_inbox"]),
    (
        "extensions",
        &[
            "shiitake_extensions",
            "shiitake_ext_timers",
            "shiitake_ext_log",
            "shiitake_ext_requests",
        ],
    ),
    ("history", &["shiitake_ext_history"]),
    ("attention", &["shiitake_attention"]),
    ("files", &["shiitake_files"]),
    ("files_journal", &["shiitake_files_journal"]),
    ("directory", DIRECTORY_V1),
    ("fleet_member", &["shiitake_fleet_member"]),
    ("model_choice", &["shiitake_model_choice"]),
    ("hosted_sessions", &["shiitake_hosted_sessions"]),
];

/// Version 1 made every table beside its core on first use, without a
/// record. Version 2 records as a feature group each group of which the
/// store holds a table, giving it the tables it lacks as version 1 made
/// them, and creates no other group. A version 1 fleet directory object,
/// which held only the directory's tables, gets version 1's core. No row
/// is rewritten: O(1).
fn to_2(sql: &dyn Sql) -> Result<(), SqlError> {
    let present = table_names(read_beside(sql, &["sqlite_master"], TABLE_NAMES, &[])?)?;
    let core = v1_lacking(V1_CORE, &present);
    if !core.is_empty() {
        write(sql, &core.join(";\n"), Vec::new())?;
    }
    for (group, tables) in V1_GROUPS {
        if tables.iter().any(|t| present.contains(*t)) {
            let mut text = v1_lacking(tables, &present);
            let recorded = record(group, 2);
            text.push(&recorded);
            create_group(sql, group, text.join(";\n"))?;
        }
    }
    Ok(())
}

/// The statements of [`V1`], each with the table it makes or indexes.
fn v1_statements() -> impl Iterator<Item = (&'static str, &'static str)> {
    V1.split(";\n")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let words: Vec<&str> = s.split_whitespace().collect();
            let table = match words.iter().position(|w| *w == "ON") {
                Some(on) if !s.starts_with("CREATE TABLE") => words[on + 1],
                _ => words[2],
            };
            (s, table.trim_end_matches('('))
        })
}

/// Version 1's statements making those of `tables` the store lacks.
fn v1_lacking(tables: &[&str], present: &HashSet<String>) -> Vec<&'static str> {
    v1_statements()
        .filter(|(_, t)| tables.contains(t) && !present.contains(*t))
        .map(|(s, _)| s)
        .collect()
}

/// The core: what every Agent writes, made with an empty store. The
/// modules that use a table keep its name; its shape lives here (the store
/// is below them: `tests/layers.rs`).
const CREATE: &[&str] = &[
    "CREATE TABLE shiitake_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    // `head`: the tip of the selected branch while it is not the newest
    // message (`NULL`: the newest), valid while the newest message is still
    // the one at `head_at` (a later message continues the selected branch,
    // so it is the newest again). A fork (`base_session`, `base_seq`):
    // its paths continue into its base's path ending at `base_seq`, its own
    // messages numbered after it. Columns of schema 3 (`to_branches`),
    // laid out as `ALTER TABLE` writes them, so a migrated store's schema
    // text is a fresh one's.
    "CREATE TABLE sessions (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL
    , head INTEGER, head_at INTEGER, base_session TEXT, base_seq INTEGER)",
    // One row per accepted command, keyed by (Session, admission order).
    // `input` is the canonical JSON of what was admitted (compared on
    // replay, retained after cancellation); `state` moves pending -> running
    // -> settled and never back. A running turn is its head command plus the
    // steer prompts that joined it (`turn_id` = head); `attempt` counts its
    // model-call attempts, `retry_at` is its durable retry timer.
    // `settlement` is the CommandSettlement, written once. `input_bytes`
    // (schema 8): `input`'s length in bytes, what the queue's byte bound
    // counts (`NULL` on commands settled before schema 8). Row writes are
    // the cost that dominates: besides the row, only the requestId index and
    // the partial index of unsettled commands are written. That index holds
    // what admission counts (state, input bytes; `settled_at` too, always
    // `NULL` there, so SQLite reads a Session's queue from the index alone):
    // a claim rewrites a command's entry, the settling write removes it.
    "CREATE TABLE commands (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        command_id TEXT NOT NULL,
        request_id TEXT,
        kind TEXT NOT NULL,
        input TEXT NOT NULL,
        meta TEXT,
        state TEXT NOT NULL,
        terminal TEXT,
        accepted_at INTEGER NOT NULL,
        settled_at INTEGER,
        turn_id TEXT,
        attempt INTEGER NOT NULL DEFAULT 0,
        started_at INTEGER,
        retry_at INTEGER,
        last_error TEXT,
        usage TEXT,
        settlement TEXT, anchor INTEGER, input_bytes INTEGER,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID",
    "CREATE UNIQUE INDEX commands_by_request ON commands (session_id, request_id)
        WHERE request_id IS NOT NULL",
    UNSETTLED_INDEX,
    "CREATE TABLE fences (
        session_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (session_id, request_id)
    ) WITHOUT ROWID",
    // `body` is the message exactly as the read serves it, so a page is a
    // concatenation and never re-serialises stored JSON. One row per
    // message: `seq` is its position in the Session's append order;
    // `bytes` lets a page be cut by size without reading bodies. `parent`
    // (schema 3): `NULL` is the message at `seq - 1` (or the start), so
    // only the first message of a branch holds one (`0`: the start), and
    // only those rows are in the partial index `messages_children`.
    // `kind` (schema 4): `NULL` for a message, `compaction` for a
    // compaction entry, where a model context stops reading its path.
    "CREATE TABLE messages (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        bytes INTEGER NOT NULL, parent INTEGER, kind TEXT,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID",
    "CREATE INDEX messages_children ON messages (session_id, parent) WHERE parent IS NOT NULL",
    // The host's delivered grants of each Session: one row, replaced under
    // the version rules of `grants::deliver`.
    "CREATE TABLE session_grants (
        session_id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        grants TEXT NOT NULL,
        delivered_at INTEGER NOT NULL
    ) WITHOUT ROWID",
];

/// A feature group: side tables a feature writes together and most Agents
/// never write. An empty store has none; each table or index would cost a
/// root page on disk and in SQLite's page cache, and its text parsed at
/// every start. The group is made with its current shape in the
/// transition of its first write ([`Group::ensure`]), all or none with the
/// record `group:<name>` in `shiitake_meta` (the version whose DDL made it,
/// or of the last step that changed it: [`change_group`]). Its readers
/// answer empty without a statement while the store does not hold it
/// ([`Group::exists`]).
pub struct Group {
    name: &'static str,
    /// The tables and indexes, as this version makes them (statements
    /// separated by `;\n`).
    ddl: &'static str,
}

impl Group {
    /// Whether the store holds the group (no statement; a creation staged
    /// by the open transition does not count: its reads would not see it).
    pub fn exists(&self, sql: &dyn Sql) -> bool {
        holds_group(sql, self.name)
    }

    /// Stages the group's creation and record unless the store holds it or
    /// the open transition staged it: call it in the transition that writes
    /// the group, before its first write there.
    pub fn ensure(&self, sql: &dyn Sql) -> Result<(), SqlError> {
        if self.recorded(sql) {
            return Ok(());
        }
        let text = format!("{};\n{}", self.ddl, record(self.name, SCHEMA_VERSION));
        create_group(sql, self.name, text)
    }

    /// Held, or staged by the open transition (a migration's earlier step).
    fn recorded(&self, sql: &dyn Sql) -> bool {
        holds_group(sql, self.name) || stages_group(sql, self.name)
    }

    fn tables(&self) -> impl Iterator<Item = &'static str> {
        tables_made(self.ddl.split(";\n"))
    }
}

const GROUP_KEY: &str = "group:";

/// The statement recording `group` at `version`.
fn record(group: &str, version: i64) -> String {
    format!("INSERT INTO shiitake_meta (key, value) VALUES ('{GROUP_KEY}{group}', '{version}')")
}

/// For a step to version `to` that changes `group`'s tables: stages
/// `change` and the group's new version when the store holds the group (or
/// an earlier step of the migration recorded it). A store without it makes
/// the group's current shape at its first write.
fn change_group(sql: &dyn Sql, group: &Group, to: i64, change: &str) -> Result<(), SqlError> {
    if !group.recorded(sql) {
        return Ok(());
    }
    write(
        sql,
        &format!(
            "{change};\nUPDATE shiitake_meta SET value = '{to}' WHERE key = '{GROUP_KEY}{}'",
            group.name
        ),
        Vec::new(),
    )
}

/// The delivery outbox and the host work lane's retry state (at most one
/// row): `delivery.rs`. Written by attention changes and a failing lane.
pub const DELIVERY: Group = Group {
    name: "delivery",
    ddl: "CREATE TABLE shiitake_delivery (
        seq INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        body TEXT NOT NULL,
        at INTEGER NOT NULL
    );
CREATE TABLE shiitake_host_lane (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        attempts INTEGER NOT NULL,
        retry_at INTEGER NOT NULL,
        error TEXT NOT NULL
    )",
};

/// Mail (`mail/tables.rs`): one outbox row per mail this Agent froze, one
/// inbox row per mail it admitted.
pub const MAIL: Group = Group {
    name: "mail",
    ddl: "CREATE TABLE shiitake_mail_outbox (
        key TEXT PRIMARY KEY,
        mail TEXT NOT NULL,
        reply_to TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        next_at INTEGER,
        receipt TEXT,
        reason TEXT,
        error TEXT,
        replied_at INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID;
CREATE INDEX shiitake_mail_outbox_due ON shiitake_mail_outbox (next_at)
        WHERE state = 'pending';
CREATE TABLE shiitake_mail_inbox (
        key TEXT PRIMARY KEY,
        digest TEXT NOT NULL,
        session_id TEXT NOT NULL,
        command_id TEXT NOT NULL,
        from_agent TEXT NOT NULL,
        from_session TEXT NOT NULL,
        to_agent TEXT NOT NULL,
        reply_to TEXT NOT NULL,
        facts TEXT,
        received_at INTEGER NOT NULL
    ) WITHOUT ROWID;
CREATE INDEX shiitake_mail_inbox_by_command ON shiitake_mail_inbox (session_id, command_id)",
};

/// Extensions (`extension/tables.rs`), made with the first status row.
/// `stopped`: the recorded stop reason, until the host resumes the
/// extension or its revision changes. `cursor`: the last settled work (a
/// `shiitake_ext_log` seq) it handled, while it has missed some; NULL when
/// it is up to date. The log is written only while some extension has
/// missed settled work. Each extension's state is a table of its own:
/// [`extension_state`].
pub const EXTENSIONS: Group = Group {
    name: "extensions",
    ddl: "CREATE TABLE shiitake_extensions (
        id TEXT PRIMARY KEY,
        revision TEXT NOT NULL,
        state_version INTEGER NOT NULL,
        stopped TEXT,
        stopped_at INTEGER,
        cursor INTEGER,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID;
CREATE TABLE shiitake_ext_timers (
        ext TEXT NOT NULL,
        name TEXT NOT NULL,
        due_at INTEGER NOT NULL,
        session_id TEXT,
        payload TEXT NOT NULL,
        PRIMARY KEY (ext, name)
    ) WITHOUT ROWID;
CREATE INDEX shiitake_ext_timers_due ON shiitake_ext_timers (due_at);
CREATE TABLE shiitake_ext_log (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        command_id TEXT NOT NULL
    );
CREATE TABLE shiitake_ext_requests (
        ext TEXT NOT NULL,
        scope TEXT NOT NULL,
        request_id TEXT NOT NULL,
        command TEXT NOT NULL,
        input TEXT NOT NULL,
        result TEXT NOT NULL,
        at INTEGER NOT NULL
    );
CREATE UNIQUE INDEX shiitake_ext_requests_id ON shiitake_ext_requests (ext, scope, request_id)",
};

/// Producer history (`history.rs`): one row per (Session, extension).
pub const HISTORY: Group = Group {
    name: "history",
    ddl: "CREATE TABLE shiitake_ext_history (
        session_id TEXT NOT NULL,
        ext TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, ext)
    ) WITHOUT ROWID",
};

/// Attention items (`attention.rs`).
pub const ATTENTION: Group = Group {
    name: "attention",
    ddl: "CREATE TABLE shiitake_attention (
        session_id TEXT NOT NULL,
        ext TEXT NOT NULL,
        id TEXT NOT NULL,
        kind TEXT NOT NULL,
        summary TEXT NOT NULL,
        since INTEGER NOT NULL,
        expires_at INTEGER,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (session_id, ext, id)
    ) WITHOUT ROWID;
CREATE INDEX shiitake_attention_by_ext ON shiitake_attention (ext)",
};

/// The files workspace over the Agent's SQLite (`files/workspace.rs`).
pub const FILES: Group = Group {
    name: "files",
    ddl: "CREATE TABLE shiitake_files (
        path TEXT PRIMARY KEY,
        content TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        modified_at INTEGER NOT NULL
    ) WITHOUT ROWID",
};

/// A stepwise port's patch journal (`files/journal.rs`): one row per part
/// of a file's content before (one part when it was absent: `before`
/// NULL); `after` is the digest of its content after (NULL: deleted).
pub const FILES_JOURNAL: Group = Group {
    name: "files_journal",
    ddl: "CREATE TABLE shiitake_files_journal (
        id INTEGER NOT NULL,
        file INTEGER NOT NULL,
        part INTEGER NOT NULL,
        port TEXT NOT NULL,
        session_id TEXT NOT NULL,
        command_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        path TEXT NOT NULL,
        before TEXT,
        after TEXT,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (id, file, part)
    )",
};

/// The fleet directory (`fleet/directory.rs`), written only in the fleet's
/// directory object.
pub const DIRECTORY: Group = Group {
    name: "directory",
    ddl: "CREATE TABLE shiitake_directory (
        seq INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL UNIQUE,
        name TEXT,
        creator TEXT,
        request_id TEXT,
        model TEXT,
        reasoning TEXT,
        archived INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
CREATE UNIQUE INDEX shiitake_directory_by_request ON shiitake_directory (creator, request_id)
        WHERE request_id IS NOT NULL;
CREATE INDEX shiitake_directory_listed ON shiitake_directory (archived, seq);
CREATE TABLE shiitake_directory_erased (
        agent_id TEXT PRIMARY KEY,
        erased_at INTEGER NOT NULL
    ) WITHOUT ROWID",
};

/// This Agent as a fleet member (`fleet/member.rs`).
pub const FLEET_MEMBER: Group = Group {
    name: "fleet_member",
    ddl: "CREATE TABLE shiitake_fleet_member (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
};

/// Explicit model choices (`model_choice.rs`).
pub const MODEL_CHOICE: Group = Group {
    name: "model_choice",
    ddl: "CREATE TABLE shiitake_model_choice (
        scope TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        reasoning TEXT,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID",
};

/// The Sessions ACP serves (`model_choice.rs`).
pub const HOSTED_SESSIONS: Group = Group {
    name: "hosted_sessions",
    ddl: "CREATE TABLE shiitake_hosted_sessions (session_id TEXT PRIMARY KEY) WITHOUT ROWID",
};

/// The usage ledger (`usage.rs`): one row per model call, written in the
/// transition that records the call's outcome (`answered`, `failed`) or,
/// for a call a crash cut off, in the claim that resumes its turn
/// (`unknown`, no counts). `model` is `provider/model` (`NULL`: unknown);
/// the counts are the normalised ones (`NULL`: not reported); `raw` the
/// provider's own usage object (`NULL`: none, or `raw_dropped` when longer
/// than `USAGE_RAW_BYTES_MAX`). `charged`, `charged_day` (schema 7): the
/// estimate the budget gate charged the call and its UTC day (`NULL`:
/// none; laid out as `ALTER TABLE` writes them). No index: a call costs
/// one row written; a ledger read scans the rows of its range (`seq`
/// follows `at`).
pub const USAGE: Group = Group {
    name: "usage",
    ddl: "CREATE TABLE shiitake_usage (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        command_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        at INTEGER NOT NULL,
        model TEXT,
        outcome TEXT NOT NULL,
        input_tokens INTEGER,
        output_tokens INTEGER,
        cache_read_tokens INTEGER,
        cache_write_tokens INTEGER,
        reasoning_tokens INTEGER,
        raw TEXT,
        raw_dropped INTEGER NOT NULL DEFAULT 0
    , charged INTEGER, charged_day INTEGER)",
};

/// Spans of OpenTelemetry traces waiting for export (`trace.rs`), made
/// with the first span (only while the host configures `telemetry()`).
/// `at`: when it was written; `attempts`, `retry_at`: the failed exports
/// of a span and when the oldest are tried again.
pub const TRACES: Group = Group {
    name: "traces",
    ddl: "CREATE TABLE shiitake_spans (
        seq INTEGER PRIMARY KEY,
        body TEXT NOT NULL,
        at INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        retry_at INTEGER
    )",
};

/// Token budgets (`budget.rs`), made when a budget is first set or the
/// host first configures one; from then on every model call keeps the
/// counters. `shiitake_budgets`: the limits the routes set over the
/// configured ones (`agent`: per UTC day; `session:<id>`).
/// `shiitake_spend`: tokens charged (`day:<n>`, the UTC day number;
/// `session:<id>`), a call in flight its estimate until its outcome
/// replaces it: the trigger `shiitake_spend_of_calls` does, with the
/// call's ledger row (no statement of its own). `shiitake_paused`: a turn
/// paused before a call its budget cannot cover (`needs`: the estimate
/// that did not fit). Made with the usage ledger's group, which the
/// trigger reads.
pub const BUDGET: Group = Group {
    name: "budget",
    ddl: "CREATE TABLE shiitake_budgets (scope TEXT PRIMARY KEY, tokens INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE shiitake_spend (scope TEXT PRIMARY KEY, tokens INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE shiitake_paused (
        session_id TEXT PRIMARY KEY,
        command_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        scope TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        spent INTEGER NOT NULL,
        needs INTEGER NOT NULL,
        since INTEGER NOT NULL
    ) WITHOUT ROWID;
CREATE TRIGGER shiitake_spend_of_calls AFTER INSERT ON shiitake_usage WHEN NEW.outcome != 'unknown' BEGIN INSERT INTO shiitake_spend (scope, tokens) SELECT 'session:' || NEW.session_id, coalesce(NEW.input_tokens, 0) + coalesce(NEW.output_tokens, 0) - coalesce(NEW.charged, 0) UNION ALL SELECT 'day:' || (NEW.at / 86400000), coalesce(NEW.input_tokens, 0) + coalesce(NEW.output_tokens, 0) - CASE WHEN NEW.charged_day = NEW.at / 86400000 THEN coalesce(NEW.charged, 0) ELSE 0 END UNION ALL SELECT 'day:' || NEW.charged_day, -coalesce(NEW.charged, 0) WHERE NEW.charged_day != NEW.at / 86400000 ON CONFLICT (scope) DO UPDATE SET tokens = max(0, tokens + excluded.tokens); END",
};

/// Every feature group.
const GROUPS: &[&Group] = &[
    &DELIVERY,
    &MAIL,
    &EXTENSIONS,
    &HISTORY,
    &ATTENTION,
    &FILES,
    &FILES_JOURNAL,
    &DIRECTORY,
    &FLEET_MEMBER,
    &MODEL_CHOICE,
    &HOSTED_SESSIONS,
    &USAGE,
    &TRACES,
    &BUDGET,
];

/// The state table of extension `id` (a checked name: `[a-z][a-z0-9_]*`).
pub fn extension_state_table(id: &str) -> String {
    format!("{STATE_TABLE_PREFIX}{id}")
}

const STATE_TABLE_PREFIX: &str = "shiitake_state_";

/// Creates extension `id`'s state table, one per extension rather than one
/// for all (a transition may read one extension's state after writing
/// another's: `sql::read_beside` is per table). It is written in the
/// transition that first records the extension's status row in
/// `shiitake_extensions` (version 1 made it just before), so that row
/// records that the table exists, with this shape at the store's version: a
/// step that changes the shape changes every `shiitake_state_*` table of
/// the catalog.
pub fn extension_state(id: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (
            collection TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (collection, key)
        ) WITHOUT ROWID",
        extension_state_table(id)
    )
}

/// What [`open`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// The database was empty: it now holds the current schema and no work.
    Created,
    /// The store was of the current version.
    Current,
    /// The store was of version `from`; it is now current. The host reports
    /// it once (a migrated store opens as `Current` after).
    Migrated { from: i64 },
}

/// The catalog's table names (the same text wherever it is read: workerd
/// keeps each distinct text prepared for the object's life).
const TABLE_NAMES: &str = "SELECT name FROM sqlite_master WHERE type = 'table'";

fn table_names(rows: Vec<crate::sql::Row>) -> Result<HashSet<String>, SqlError> {
    rows.iter().map(|r| r.text(0)).collect()
}

/// Creates the core on an empty database, or checks the stored version and
/// migrates an older store forward; tells the `Sql` which feature groups
/// the store holds. Two statements for a current store (the catalog; the
/// records of `shiitake_meta`).
pub fn open(sql: &dyn Sql) -> Result<Opened, ApiError> {
    let present = table_names(read(sql, TABLE_NAMES, &[])?)?;
    let ours: Vec<&str> = present
        .iter()
        .map(String::as_str)
        .filter(|t| is_ours(t))
        .collect();
    if ours.is_empty() {
        // One text for every table and the version row: workerd keeps each
        // distinct text prepared for the object's life.
        let text = format!(
            "{};\nINSERT INTO shiitake_meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}')",
            CREATE.join(";\n")
        );
        atomically(sql, || write(sql, &text, Vec::new()))?;
        sql.tables().hold_groups([]);
        return Ok(Opened::Created);
    }
    let (stored, groups) = if present.contains("shiitake_meta") {
        records(sql)?
    } else if ours.iter().all(|t| DIRECTORY_V1.contains(t)) {
        (Some(1), Vec::new())
    } else {
        (None, Vec::new())
    };
    match stored {
        Some(SCHEMA_VERSION) => {
            sql.tables().hold_groups(groups);
            Ok(Opened::Current)
        }
        Some(from) if (1..SCHEMA_VERSION).contains(&from) => {
            sql.tables().hold_groups(groups);
            migrate(sql, from, MIGRATIONS)?;
            Ok(Opened::Migrated { from })
        }
        Some(newer) if newer > SCHEMA_VERSION => Err(ApiError::StorageIncompatible(format!(
            "stored schema version {newer}; this build reads versions 1 to {SCHEMA_VERSION}. \
             The data was left untouched; open it with a build of version {newer} or later."
        ))),
        _ => Err(ApiError::StorageIncompatible(format!(
            "the store holds tables of an unknown schema; this build reads versions 1 to \
             {SCHEMA_VERSION}. The data was left untouched."
        ))),
    }
}

/// Whether `table` is one this crate makes.
fn is_ours(table: &str) -> bool {
    table.starts_with(STATE_TABLE_PREFIX)
        || tables_made(CREATE.iter().copied()).any(|t| t == table)
        || GROUPS.iter().any(|g| g.tables().any(|t| t == table))
}

/// The tables `statements` make.
fn tables_made(
    statements: impl Iterator<Item = &'static str>,
) -> impl Iterator<Item = &'static str> {
    statements.filter_map(|s| {
        let rest = s.trim_start().strip_prefix("CREATE TABLE ")?;
        rest.split(|c: char| c.is_whitespace() || c == '(').next()
    })
}

/// The stored version (`None`: none readable) and the feature groups the
/// store records, in one statement.
fn records(sql: &dyn Sql) -> Result<(Option<i64>, Vec<&'static str>), ApiError> {
    let mut version = None;
    let mut groups = Vec::new();
    for row in read(sql, "SELECT key, value FROM shiitake_meta", &[])? {
        let key = row.text(0)?;
        if key == "schema_version" {
            version = row.text(1).ok().and_then(|v| v.parse().ok());
        } else if let Some(name) = key.strip_prefix(GROUP_KEY) {
            groups.extend(GROUPS.iter().map(|g| g.name).find(|g| *g == name));
        }
    }
    Ok((version, groups))
}

/// Applies the steps of `steps` past version `from` and records the last
/// one's version, in one transition: all or none.
fn migrate(sql: &dyn Sql, from: i64, steps: &[Migration]) -> Result<(), ApiError> {
    let to = steps.last().map_or(from, |s| s.to);
    atomically(sql, || {
        for step in steps.iter().filter(|s| s.to > from) {
            (step.apply)(sql).map_err(|e| {
                SqlError::Engine(format!("step to version {} ({}): {e}", step.to, step.what))
            })?;
        }
        write(
            sql,
            "INSERT INTO shiitake_meta (key, value) VALUES ('schema_version', ?)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            vec![to.to_string().into()],
        )
    })
    .map_err(|e| {
        ApiError::Internal(format!(
            "migrating the store from schema version {from} to {to} failed; it stays at version \
             {from} and the next open tries again: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::native::NativeSql;
    use crate::sql::SqlValue;

    /// What version 1's `open` made: the core tables and the delivery
    /// tables.
    const V1_FRESH: &[&str] = &[
        "shiitake_meta",
        "sessions",
        "commands",
        "fences",
        "messages",
        "session_grants",
        "shiitake_delivery",
        "shiitake_host_lane",
    ];

    /// A version 1 store holding the fresh tables and the side tables
    /// `side` (made on first use), with a few rows in each core table and
    /// in the side tables it holds of mail and model choices.
    fn v1_store(side: &[&str]) -> NativeSql {
        let sql = NativeSql::open_in_memory();
        for (statement, table) in v1_statements() {
            if V1_FRESH.contains(&table) || side.contains(&table) {
                sql.query(statement, &[]).unwrap();
            }
        }
        let rows = [
            "INSERT INTO shiitake_meta VALUES ('schema_version', '1')",
            "INSERT INTO sessions (session_id, created_at) VALUES ('s', 1)",
            "INSERT INTO messages VALUES ('s', 1, '{\"text\":\"kept\"}', 16)",
            "INSERT INTO fences VALUES ('s', 'r0', 1)",
            "INSERT INTO commands (session_id, seq, command_id, request_id, kind, input, state, \
             accepted_at) VALUES ('s', 1, 'cmd_1', 'r1', 'prompt', '{}', 'pending', 1)",
        ];
        for row in rows {
            sql.query(row, &[]).unwrap();
        }
        if side.contains(&"shiitake_mail_outbox") {
            sql.query(
                "INSERT INTO shiitake_mail_outbox (key, mail, reply_to, state, attempts, \
                 created_at, updated_at) VALUES ('k', '{}', '', 'pending', 0, 1, 1)",
                &[],
            )
            .unwrap();
        }
        if side.contains(&"shiitake_model_choice") {
            sql.query(
                "INSERT INTO shiitake_model_choice VALUES ('agent', 'openai/gpt', NULL, 1)",
                &[],
            )
            .unwrap();
        }
        sql
    }

    /// Every side table version 1 made on first use.
    fn v1_side() -> Vec<&'static str> {
        let mut side: Vec<&str> = v1_statements()
            .map(|(_, t)| t)
            .filter(|t| !V1_FRESH.contains(t))
            .collect();
        side.dedup();
        side
    }

    /// `sqlite_master`'s `(type, name, text)` rows and `shiitake_meta`'s rows.
    type Catalog = (Vec<(String, String, String)>, Vec<Vec<SqlValue>>);

    /// The catalog, each text with its white space normalised, and the
    /// records of `shiitake_meta`.
    fn catalog(sql: &NativeSql) -> Catalog {
        let objects = sql
            .query(
                "SELECT type, name, coalesce(sql, '') FROM sqlite_master ORDER BY name",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| {
                let text = r
                    .text(2)
                    .unwrap()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                let text = text
                    .replace("( ", "(")
                    .replace(" )", ")")
                    .replace(" (", "(");
                (r.text(0).unwrap(), r.text(1).unwrap(), text)
            })
            .collect();
        // A group's record holds the version of the step that last changed
        // it: a store migrated past steps that left a group alone records an
        // older one than a fresh store, for the same shape.
        (
            objects,
            dump(
                sql,
                "SELECT key, CASE WHEN key LIKE 'group:%' THEN '' ELSE value END
                 FROM shiitake_meta ORDER BY key",
            ),
        )
    }

    fn dump(sql: &NativeSql, query: &str) -> Vec<Vec<SqlValue>> {
        sql.query(query, &[])
            .unwrap()
            .into_iter()
            .map(|r| r.0)
            .collect()
    }

    /// Every row of the core tables and of the side tables `v1_store`
    /// fills (an absent table holds none).
    fn rows(sql: &NativeSql) -> Vec<Vec<Vec<SqlValue>>> {
        let tables = [
            "sessions",
            "messages",
            "fences",
            "commands",
            "shiitake_mail_outbox",
            "shiitake_model_choice",
        ];
        tables
            .iter()
            .map(|table| {
                let exists = !dump(
                    sql,
                    &format!("SELECT 1 FROM sqlite_master WHERE name = '{table}'"),
                )
                .is_empty();
                match exists {
                    true => dump(sql, &format!("SELECT * FROM {table} ORDER BY 1, 2")),
                    false => Vec::new(),
                }
            })
            .collect()
    }

    fn version(sql: &NativeSql) -> String {
        sql.query(
            "SELECT value FROM shiitake_meta WHERE key = 'schema_version'",
            &[],
        )
        .unwrap()[0]
            .text(0)
            .unwrap()
    }

    /// The groups `sql` holds, by name.
    fn held(sql: &NativeSql) -> Vec<&'static str> {
        GROUPS
            .iter()
            .filter(|g| g.exists(sql))
            .map(|g| g.name)
            .collect()
    }

    /// A fresh store that then wrote the groups named.
    fn fresh_with(groups: &[&str]) -> NativeSql {
        let sql = NativeSql::open_in_memory();
        assert_eq!(open(&sql).unwrap(), Opened::Created);
        for group in GROUPS.iter().filter(|g| groups.contains(&g.name)) {
            atomically(&sql, || group.ensure(&sql)).unwrap();
        }
        sql
    }

    /// The groups version 2 records for a version 1 store holding `side`.
    fn groups_of(side: &[&str]) -> Vec<&'static str> {
        V1_GROUPS
            .iter()
            .filter(|(_, tables)| {
                tables
                    .iter()
                    .any(|t| side.contains(t) || V1_FRESH.contains(t))
            })
            .map(|(name, _)| *name)
            .collect()
    }

    #[test]
    fn the_steps_count_up_one_at_a_time_to_the_current_version() {
        let tos: Vec<i64> = MIGRATIONS.iter().map(|m| m.to).collect();
        let expected: Vec<i64> = (2..=SCHEMA_VERSION).collect();
        assert_eq!(tos, expected);
    }

    #[test]
    fn fresh_store_gets_the_core_and_no_group_and_reopens() {
        let sql = NativeSql::open_in_memory();
        assert_eq!(open(&sql).unwrap(), Opened::Created);
        let made: Vec<String> = catalog(&sql)
            .0
            .into_iter()
            .filter(|(kind, _, _)| kind == "table")
            .map(|(_, name, _)| name)
            .collect();
        let mut core: Vec<&str> = tables_made(CREATE.iter().copied()).collect();
        core.sort();
        assert_eq!(made, core);
        assert!(held(&sql).is_empty());
        assert_eq!(open(&sql).unwrap(), Opened::Current);
        assert_eq!(version(&sql), SCHEMA_VERSION.to_string());
    }

    #[test]
    fn each_version_1_table_is_in_its_core_or_in_one_group_version_2_records() {
        let mut split: Vec<&str> = V1_CORE.to_vec();
        split.extend(V1_GROUPS.iter().flat_map(|(_, tables)| tables.iter()));
        split.sort();
        let mut made: Vec<&str> = tables_made(v1_statements().map(|(s, _)| s)).collect();
        made.sort();
        assert_eq!(split, made, "each table of version 1 in one place");
    }

    #[test]
    fn a_version_1_store_migrates_with_its_rows_to_a_fresh_store_that_wrote_the_same_groups() {
        let some: Vec<&str> = vec![
            "shiitake_mail_outbox",
            "shiitake_mail_inbox",
            "shiitake_model_choice",
        ];
        for kept in [Vec::new(), some, v1_side()] {
            let sql = v1_store(&kept);
            let before = rows(&sql);
            assert_eq!(
                open(&sql).unwrap(),
                Opened::Migrated { from: 1 },
                "{kept:?}"
            );
            assert_eq!(version(&sql), SCHEMA_VERSION.to_string());
            assert_eq!(rows(&sql), before, "rows intact ({kept:?})");
            let groups = groups_of(&kept);
            assert_eq!(held(&sql), groups, "held as recorded ({kept:?})");
            assert_eq!(
                catalog(&sql),
                catalog(&fresh_with(&groups)),
                "migrated = fresh with the same groups ({kept:?})"
            );
            assert_eq!(open(&sql).unwrap(), Opened::Current);
            assert_eq!(held(&sql), groups, "read back from the records");
        }
    }

    #[test]
    fn a_group_version_1_made_in_part_gets_its_other_tables_as_version_1_made_them() {
        let sql = v1_store(&["shiitake_mail_outbox", "shiitake_extensions"]);
        open(&sql).unwrap();
        let groups = ["delivery", "mail", "extensions"];
        assert_eq!(held(&sql), groups);
        assert_eq!(catalog(&sql), catalog(&fresh_with(&groups)));
    }

    #[test]
    fn a_migration_writes_its_records_and_the_queue_whatever_the_history_length() {
        for history in [10, 2_000] {
            let sql = v1_store(&[]);
            for seq in 2..=history {
                sql.query(
                    "INSERT INTO messages VALUES ('s', ?, '{}', 2)",
                    &[i64::from(seq).into()],
                )
                .unwrap();
                sql.query(
                    "INSERT INTO commands (session_id, seq, command_id, request_id, kind, input, \
                     state, accepted_at, settled_at) \
                     VALUES ('s', ?1, 'cmd_' || ?1, 'h' || ?1, 'prompt', '{}', 'settled', 1, 2)",
                    &[i64::from(seq).into()],
                )
                .unwrap();
            }
            let changes = sql.total_changes();
            open(&sql).unwrap();
            // The version, the delivery tables' group, and the input bytes
            // of the one pending command (schema 8): no settled command.
            assert_eq!(sql.total_changes() - changes, 3, "{history} of history");
        }
    }

    #[test]
    fn a_migrated_queue_counts_what_it_held_before_from_the_index_alone() {
        let sql = v1_store(&[]);
        // Beside v1_store's pending command (input `{}`): the running head,
        // a settled command, and a pending one whose input is not ASCII.
        let pending = "{\"text\":\"héllo wörld ☃\"}";
        for (seq, input, state, settled) in [
            (2, "{\"text\":\"running\"}", "running", None),
            (3, "{\"text\":\"settled\"}", "settled", Some(5)),
            (4, pending, "pending", None),
        ] {
            sql.query(
                "INSERT INTO commands (session_id, seq, command_id, request_id, kind, input, \
                 state, accepted_at, settled_at) VALUES ('s', ?, ?, ?, 'prompt', ?, ?, 1, ?)",
                &[
                    i64::from(seq).into(),
                    format!("cmd_{seq}").into(),
                    format!("r{seq}").into(),
                    input.into(),
                    state.into(),
                    settled.map(i64::from).into(),
                ],
            )
            .unwrap();
        }
        assert_eq!(open(&sql).unwrap(), Opened::Migrated { from: 1 });
        let facts = crate::store::Store::new(&sql)
            .admission_facts("s", "new")
            .unwrap();
        assert_eq!(facts.pending_count, 2);
        assert_eq!(facts.pending_bytes, "{}".len() + pending.len());
        assert!(pending.len() > pending.chars().count(), "counted in bytes");
        assert!(facts.running);
        assert_eq!(facts.next_seq, 5);
        // Neither the migrated store's count nor a fresh one's reads a
        // command row.
        for store in [&sql, &fresh_with(&[])] {
            let plan: Vec<String> = store
                .query(
                    &format!("EXPLAIN QUERY PLAN {}", crate::store::admission_facts_sql()),
                    &["s".into(), "r".into()],
                )
                .unwrap()
                .iter()
                .map(|r| r.text(3).unwrap())
                .filter(|d| d.contains("commands_unsettled"))
                .collect();
            assert_eq!(plan.len(), 2, "{plan:?}");
            assert!(
                plan.iter().all(|d| d.contains("COVERING INDEX")),
                "{plan:?}"
            );
        }
    }

    #[test]
    fn a_groups_first_write_makes_and_records_it_all_or_none() {
        let sql = NativeSql::open_in_memory();
        open(&sql).unwrap();
        let before = catalog(&sql);
        let insert = "INSERT INTO shiitake_model_choice VALUES ('agent', 'openai/gpt', NULL, 1)";
        // Refused after the write, or failing in the batch: neither the
        // table nor the record, and the group is not held.
        let refused: Result<(), SqlError> = atomically(&sql, || {
            MODEL_CHOICE.ensure(&sql)?;
            write(&sql, insert, Vec::new())?;
            Err(SqlError::Engine("refused".into()))
        });
        assert!(refused.is_err());
        let failed = atomically(&sql, || {
            MODEL_CHOICE.ensure(&sql)?;
            write(&sql, insert, Vec::new())?;
            write(&sql, insert, Vec::new()) // the same key again
        });
        assert!(failed.is_err());
        assert_eq!(catalog(&sql), before);
        assert!(!MODEL_CHOICE.exists(&sql));
        // Made once, however often the transition asks.
        atomically(&sql, || {
            MODEL_CHOICE.ensure(&sql)?;
            MODEL_CHOICE.ensure(&sql)?;
            write(&sql, insert, Vec::new())
        })
        .unwrap();
        assert!(MODEL_CHOICE.exists(&sql));
        assert_eq!(
            dump(
                &sql,
                "SELECT value FROM shiitake_meta WHERE key = 'group:model_choice'"
            ),
            [[SqlValue::Text(SCHEMA_VERSION.to_string())]]
        );
        assert_eq!(catalog(&sql), catalog(&fresh_with(&["model_choice"])));
        // Later transitions stage nothing; a new instance reads it back.
        let changes = sql.total_changes();
        atomically(&sql, || MODEL_CHOICE.ensure(&sql)).unwrap();
        assert_eq!(sql.total_changes(), changes);
        sql.tables().hold_groups([]);
        assert_eq!(open(&sql).unwrap(), Opened::Current);
        assert_eq!(held(&sql), ["model_choice"]);
    }

    fn refuse(_: &dyn Sql) -> Result<(), SqlError> {
        Err(SqlError::Engine("injected: the step failed".into()))
    }

    fn crash(sql: &dyn Sql) -> Result<(), SqlError> {
        write(
            sql,
            "INSERT INTO shiitake_no_such_table VALUES (1)",
            Vec::new(),
        )
    }

    #[test]
    fn a_failure_at_any_step_leaves_version_1_intact_and_the_next_open_migrates() {
        // Right after step `at`'s statements: a statement that fails in the
        // batch (what a crash leaves SQLite to roll back), or code that
        // fails before the batch.
        for at in 0..MIGRATIONS.len() {
            for fail in [crash as fn(&dyn Sql) -> Result<(), SqlError>, refuse] {
                let sql = v1_store(&["shiitake_mail_outbox"]);
                let before = (catalog(&sql), rows(&sql));
                let mut steps: Vec<Migration> = MIGRATIONS[..=at]
                    .iter()
                    .map(|m| Migration { ..*m })
                    .collect();
                steps.push(Migration {
                    to: MIGRATIONS[at].to,
                    what: "injected failure",
                    apply: fail,
                });
                steps.extend(MIGRATIONS[at + 1..].iter().map(|m| Migration { ..*m }));
                let err = migrate(&sql, 1, &steps).unwrap_err();
                assert_eq!(err.code(), "internal_error");
                assert!(err.to_string().contains("stays at version 1"), "{err}");
                assert_eq!((catalog(&sql), rows(&sql)), before, "step {at}");
                assert_eq!(version(&sql), "1");
                assert!(held(&sql).is_empty(), "no group held (step {at})");
                assert_eq!(open(&sql).unwrap(), Opened::Migrated { from: 1 });
                assert_eq!(held(&sql), ["delivery", "mail"]);
                assert_eq!(open(&sql).unwrap(), Opened::Current);
                assert_eq!(rows(&sql), before.1);
            }
        }
    }

    /// A step to version 3 adding a column to the mail outbox.
    fn mail_column(sql: &dyn Sql) -> Result<(), SqlError> {
        change_group(
            sql,
            &MAIL,
            3,
            "ALTER TABLE shiitake_mail_outbox ADD COLUMN note TEXT",
        )
    }

    #[test]
    fn a_step_changes_a_group_only_where_it_is_recorded_and_bumps_its_version() {
        let steps = [
            Migration { ..MIGRATIONS[0] },
            Migration {
                to: 3,
                what: "a mail column",
                apply: mail_column,
            },
        ];
        let columns = |sql: &NativeSql| {
            dump(
                sql,
                "SELECT name FROM pragma_table_info('shiitake_mail_outbox')",
            )
            .len()
        };
        let recorded = |sql: &NativeSql, group: &str| {
            dump(
                sql,
                &format!("SELECT value FROM shiitake_meta WHERE key = 'group:{group}'"),
            )
        };
        // Recorded by the step before it in the same migration.
        let sql = v1_store(&["shiitake_mail_outbox"]);
        migrate(&sql, 1, &steps).unwrap();
        assert_eq!(columns(&sql), 13);
        assert_eq!(recorded(&sql, "mail"), [[SqlValue::Text("3".into())]]);
        assert_eq!(recorded(&sql, "delivery"), [[SqlValue::Text("2".into())]]);
        assert!(MAIL.exists(&sql));
        // Without the group: nothing to change, nothing recorded.
        let sql = v1_store(&[]);
        migrate(&sql, 1, &steps).unwrap();
        assert_eq!(columns(&sql), 0);
        assert!(recorded(&sql, "mail").is_empty() && !MAIL.exists(&sql));
    }

    #[test]
    fn a_newer_or_unknown_version_is_refused_and_left_untouched() {
        for stored in ["0", &(SCHEMA_VERSION + 1).to_string(), "x"] {
            let sql = NativeSql::open_in_memory();
            open(&sql).unwrap();
            sql.query(
                "INSERT INTO sessions (session_id, created_at) VALUES ('kept', 1)",
                &[],
            )
            .unwrap();
            sql.query(
                "UPDATE shiitake_meta SET value = ? WHERE key = 'schema_version'",
                &[stored.into()],
            )
            .unwrap();
            let before = (catalog(&sql), rows(&sql));
            let err = open(&sql).unwrap_err();
            assert_eq!(err.code(), "storage_incompatible");
            if stored == (SCHEMA_VERSION + 1).to_string() {
                assert!(
                    err.to_string().contains(&format!("version {stored}")),
                    "{err}"
                );
            }
            assert_eq!(
                (catalog(&sql), rows(&sql)),
                before,
                "refusal must not touch data"
            );
            assert_eq!(version(&sql), stored);
        }
    }

    #[test]
    fn foreign_tables_without_version_are_refused() {
        let sql = NativeSql::open_in_memory();
        sql.query("CREATE TABLE sessions (x TEXT)", &[]).unwrap();
        sql.query("INSERT INTO sessions VALUES ('theirs')", &[])
            .unwrap();
        assert_eq!(open(&sql).unwrap_err().code(), "storage_incompatible");
        let kept = sql.query("SELECT x FROM sessions", &[]).unwrap();
        assert_eq!(kept[0].text(0).unwrap(), "theirs");
        // A group's table without a version is ours too.
        let sql = NativeSql::open_in_memory();
        sql.query(
            "CREATE TABLE shiitake_fleet_member (key TEXT PRIMARY KEY, value TEXT)",
            &[],
        )
        .unwrap();
        assert_eq!(open(&sql).unwrap_err().code(), "storage_incompatible");
        // Another program's tables beside none of ours are not ours to refuse.
        let theirs = NativeSql::open_in_memory();
        theirs
            .query("CREATE TABLE _shiitake_node_alarm (at REAL)", &[])
            .unwrap();
        assert_eq!(open(&theirs).unwrap(), Opened::Created);
    }

    #[test]
    fn a_version_1_directory_object_is_adopted_with_its_entries() {
        let sql = NativeSql::open_in_memory();
        for (statement, table) in v1_statements() {
            if DIRECTORY_V1.contains(&table) {
                sql.query(statement, &[]).unwrap();
            }
        }
        sql.query(
            "INSERT INTO shiitake_directory (agent_id, created_at, updated_at) VALUES ('a', 1, 1)",
            &[],
        )
        .unwrap();
        assert_eq!(open(&sql).unwrap(), Opened::Migrated { from: 1 });
        assert_eq!(catalog(&sql), catalog(&fresh_with(&["directory"])));
        assert_eq!(held(&sql), ["directory"]);
        let kept = sql
            .query("SELECT agent_id FROM shiitake_directory", &[])
            .unwrap();
        assert_eq!(kept[0].text(0).unwrap(), "a");
    }

    #[test]
    fn an_extension_state_table_is_ours() {
        let sql = NativeSql::open_in_memory();
        sql.query(&extension_state("goal"), &[]).unwrap();
        assert_eq!(open(&sql).unwrap_err().code(), "storage_incompatible");
    }

    #[test]
    fn the_branches_step_carries_a_version_1_store_to_the_fresh_shape_in_place() {
        let old = v1_store(&[]);
        old.query("DELETE FROM messages", &[]).unwrap();
        let body = |n: i64| {
            format!("{{\"entryId\":\"m{n}\",\"role\":\"user\",\"text\":\"t{n}\",\"createdAt\":0}}")
        };
        for n in 1..=3 {
            let b = body(n);
            old.query(
                "INSERT INTO messages (session_id, seq, body, bytes) VALUES ('s', ?, ?, ?)",
                &[n.into(), b.as_str().into(), (b.len() as i64).into()],
            )
            .unwrap();
        }
        assert_eq!(open(&old).unwrap(), Opened::Migrated { from: 1 });
        assert_eq!(catalog(&old), catalog(&fresh_with(&["delivery"])));
        // Every stored message reads back on the one linear path, and the
        // next continues it.
        let store = crate::store::Store::new(&old);
        let walk = store
            .walk("s", crate::store::path::Start::Tip, 10, 1 << 20)
            .unwrap();
        let seqs: Vec<(i64, Option<i64>)> = walk.rows.iter().map(|r| (r.seq, r.parent)).collect();
        assert_eq!(seqs, [(3, None), (2, None), (1, None)]);
        assert_eq!(walk.rows[2].body.as_deref(), Some(body(1).as_str()));
        store.insert_message("s", &body(4)).unwrap();
        let walk = store
            .walk("s", crate::store::path::Start::Tip, 10, 1 << 20)
            .unwrap();
        assert_eq!(walk.rows.len(), 4);
        assert!(!walk.branched);
    }
}
