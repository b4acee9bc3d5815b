//! The versioned schema. One version covers every table the runtime
//! creates: a fresh database gets the current version ([`CREATE`]); a store
//! of an older version is brought forward by the ordered steps of
//! [`MIGRATIONS`] when the object opens, every pending step and the version
//! row in one transaction, so a crash during a migration leaves the old
//! version intact and the next open migrates again. A store of a newer
//! version, or holding tables of this crate without a version, is refused
//! with [`ApiError::StorageIncompatible`] and left untouched: the host keeps
//! custody of data this build cannot read.
//!
//! The rule (ARCHITECTURE.md): every change to what is stored ships a step
//! here, the new shape in [`CREATE`], and a committed fixture store of the
//! release before it (`tests/fixtures/stores/`). A released step is frozen:
//! a later change is a later step, never an edit of one.

use crate::error::ApiError;
use crate::sql::{atomically, read, write, Sql, SqlError};
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
/// old behaviour).
struct Migration {
    to: i64,
    what: &'static str,
    apply: fn(&dyn Sql) -> Result<(), SqlError>,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        to: 2,
        what: "every table in the versioned schema (version 1 made most side tables on first use)",
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
];

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 4; // the last step's `to`

const _: () = assert!(MIGRATIONS[MIGRATIONS.len() - 1].to == SCHEMA_VERSION);

/// Version 1's tables as a version 1 store's catalog holds them
/// (`sqlite_master`, every table made on first use included), frozen.
const V1: &str = include_str!("v1.sql");

/// Version 1 made the tables beside the core on first use, outside the
/// version; version 2 is version 1 with all of them: creates the ones the
/// store lacks, as version 1 made them (no row is touched: O(1)).
fn to_2(sql: &dyn Sql) -> Result<(), SqlError> {
    let text = V1
        .trim_end()
        .trim_end_matches(';')
        .replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ")
        .replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ")
        .replace("CREATE UNIQUE INDEX ", "CREATE UNIQUE INDEX IF NOT EXISTS ");
    write(sql, &text, Vec::new())
}

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

/// The tables a version 1 fleet directory object held (the directory made
/// them on first use, without the version row or any other table).
const DIRECTORY_V1: &[&str] = &["shiitake_directory", "shiitake_directory_erased"];

/// Tables most Agents never fill whose readers run on a turn's path or at
/// each start: [`open`] tells `sql::holds_rows` which are empty, and their
/// readers skip them for no statement.
const SPARSE: &[&str] = &[
    "shiitake_mail_outbox",
    "shiitake_mail_inbox",
    "shiitake_attention",
    "shiitake_ext_history",
    "shiitake_files_journal",
    "shiitake_fleet_member",
    "shiitake_model_choice",
    "shiitake_hosted_sessions",
];

/// The current schema, every table the runtime creates. The modules that
/// use a table keep its name; its shape lives here (the store is below
/// them: `tests/layers.rs`).
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
    // `settlement` is the CommandSettlement, written once. Row writes are
    // the cost that dominates: besides the row, only the requestId index and
    // the partial index of unsettled commands are written.
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
        settlement TEXT, anchor INTEGER,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID",
    "CREATE UNIQUE INDEX commands_by_request ON commands (session_id, request_id)
        WHERE request_id IS NOT NULL",
    "CREATE INDEX commands_unsettled ON commands (session_id, seq) WHERE settled_at IS NULL",
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
    // The delivery outbox and the host work lane's retry state (at most one
    // row): `delivery.rs`.
    "CREATE TABLE shiitake_delivery (
        seq INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        body TEXT NOT NULL,
        at INTEGER NOT NULL
    )",
    "CREATE TABLE shiitake_host_lane (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        attempts INTEGER NOT NULL,
        retry_at INTEGER NOT NULL,
        error TEXT NOT NULL
    )",
    // Mail (`mail/tables.rs`): one outbox row per mail this Agent froze,
    // one inbox row per mail it admitted.
    "CREATE TABLE shiitake_mail_outbox (
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
    ) WITHOUT ROWID",
    "CREATE INDEX shiitake_mail_outbox_due ON shiitake_mail_outbox (next_at)
        WHERE state = 'pending'",
    "CREATE TABLE shiitake_mail_inbox (
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
    ) WITHOUT ROWID",
    "CREATE INDEX shiitake_mail_inbox_by_command ON shiitake_mail_inbox (session_id, command_id)",
    // Extensions (`extension/tables.rs`). `stopped`: the recorded stop
    // reason, until the host resumes the extension or its revision
    // changes. `cursor`: the last settled work (a `shiitake_ext_log` seq) it
    // handled, while it has missed some; NULL when it is up to date. Each
    // extension's state is a table of its own: [`extension_state`].
    "CREATE TABLE shiitake_extensions (
        id TEXT PRIMARY KEY,
        revision TEXT NOT NULL,
        state_version INTEGER NOT NULL,
        stopped TEXT,
        stopped_at INTEGER,
        cursor INTEGER,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID",
    "CREATE TABLE shiitake_ext_timers (
        ext TEXT NOT NULL,
        name TEXT NOT NULL,
        due_at INTEGER NOT NULL,
        session_id TEXT,
        payload TEXT NOT NULL,
        PRIMARY KEY (ext, name)
    ) WITHOUT ROWID",
    "CREATE INDEX shiitake_ext_timers_due ON shiitake_ext_timers (due_at)",
    // Written only while some extension has missed settled work.
    "CREATE TABLE shiitake_ext_log (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        command_id TEXT NOT NULL
    )",
    "CREATE TABLE shiitake_ext_requests (
        ext TEXT NOT NULL,
        scope TEXT NOT NULL,
        request_id TEXT NOT NULL,
        command TEXT NOT NULL,
        input TEXT NOT NULL,
        result TEXT NOT NULL,
        at INTEGER NOT NULL
    )",
    "CREATE UNIQUE INDEX shiitake_ext_requests_id ON shiitake_ext_requests (ext, scope, request_id)",
    // Producer history (`history.rs`): one row per (Session, extension).
    "CREATE TABLE shiitake_ext_history (
        session_id TEXT NOT NULL,
        ext TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, ext)
    ) WITHOUT ROWID",
    // Attention items (`attention.rs`).
    "CREATE TABLE shiitake_attention (
        session_id TEXT NOT NULL,
        ext TEXT NOT NULL,
        id TEXT NOT NULL,
        kind TEXT NOT NULL,
        summary TEXT NOT NULL,
        since INTEGER NOT NULL,
        expires_at INTEGER,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (session_id, ext, id)
    ) WITHOUT ROWID",
    "CREATE INDEX shiitake_attention_by_ext ON shiitake_attention (ext)",
    // The files workspace over the Agent's SQLite (`files/workspace.rs`).
    "CREATE TABLE shiitake_files (
        path TEXT PRIMARY KEY,
        content TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        modified_at INTEGER NOT NULL
    ) WITHOUT ROWID",
    // A stepwise port's patch journal (`files/journal.rs`): one row per part
    // of a file's content before (one part when it was absent: `before`
    // NULL); `after` is the digest of its content after (NULL: deleted).
    "CREATE TABLE shiitake_files_journal (
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
    // The fleet directory (`fleet/directory.rs`), used only in the fleet's
    // directory object.
    "CREATE TABLE shiitake_directory (
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
    )",
    "CREATE UNIQUE INDEX shiitake_directory_by_request ON shiitake_directory (creator, request_id)
        WHERE request_id IS NOT NULL",
    "CREATE INDEX shiitake_directory_listed ON shiitake_directory (archived, seq)",
    "CREATE TABLE shiitake_directory_erased (
        agent_id TEXT PRIMARY KEY,
        erased_at INTEGER NOT NULL
    ) WITHOUT ROWID",
    // This Agent as a fleet member (`fleet/member.rs`).
    "CREATE TABLE shiitake_fleet_member (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    // Model choices and the Sessions ACP serves (`model_choice.rs`).
    "CREATE TABLE shiitake_model_choice (
        scope TEXT PRIMARY KEY,
        model TEXT NOT NULL,
        reasoning TEXT,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID",
    "CREATE TABLE shiitake_hosted_sessions (session_id TEXT PRIMARY KEY) WITHOUT ROWID",
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

/// Creates the schema on an empty database, or checks the stored version
/// and migrates an older store forward. Two statements for a current store
/// (the catalog; the version with the emptiness of [`SPARSE`]).
pub fn open(sql: &dyn Sql) -> Result<Opened, ApiError> {
    let present: HashSet<String> = read(
        sql,
        "SELECT name FROM sqlite_master WHERE type = 'table'",
        &[],
    )?
    .iter()
    .map(|r| r.text(0))
    .collect::<Result<_, _>>()?;
    let ours: Vec<&str> = present
        .iter()
        .map(String::as_str)
        .filter(|t| is_ours(t))
        .collect();
    if ours.is_empty() {
        // One text for every table and the version row: workerd keeps each
        // distinct text prepared for the object's life (about 9.5 KiB of
        // memory per Agent each, measured).
        let text = format!(
            "{};\nINSERT INTO shiitake_meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}')",
            CREATE.join(";\n")
        );
        atomically(sql, || write(sql, &text, Vec::new()))?;
        sql.tables().known_empty(SPARSE.iter().copied());
        return Ok(Opened::Created);
    }
    let (stored, empty) = if present.contains("shiitake_meta") {
        stored_version(sql, &present)?
    } else if ours.iter().all(|t| DIRECTORY_V1.contains(t)) {
        (Some(1), Vec::new())
    } else {
        (None, Vec::new())
    };
    match stored {
        Some(SCHEMA_VERSION) => {
            sql.tables().known_empty(empty);
            Ok(Opened::Current)
        }
        Some(from) if (1..SCHEMA_VERSION).contains(&from) => {
            sql.tables().known_empty(empty);
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
    table.starts_with(STATE_TABLE_PREFIX) || created_tables().any(|t| t == table)
}

/// The tables [`CREATE`] makes.
fn created_tables() -> impl Iterator<Item = &'static str> {
    CREATE.iter().filter_map(|s| {
        let rest = s.strip_prefix("CREATE TABLE ")?;
        rest.split(|c: char| c.is_whitespace() || c == '(').next()
    })
}

/// The stored version (`None`: none readable) and which of [`SPARSE`] hold
/// no row (absent ones included: a migration creates them empty), in one
/// statement.
fn stored_version(
    sql: &dyn Sql,
    present: &HashSet<String>,
) -> Result<(Option<i64>, Vec<&'static str>), ApiError> {
    let (there, absent): (Vec<&str>, Vec<&str>) =
        SPARSE.iter().partition(|t| present.contains(**t));
    let filled: String = there
        .iter()
        .map(|t| format!(", EXISTS (SELECT 1 FROM {t})"))
        .collect();
    let rows = read(
        sql,
        &format!("SELECT value{filled} FROM shiitake_meta WHERE key = 'schema_version'"),
        &[],
    )?;
    let Some(row) = rows.first() else {
        return Ok((None, Vec::new()));
    };
    let version = row.text(0).ok().and_then(|v| v.parse().ok());
    let mut empty = absent;
    for (i, table) in there.into_iter().enumerate() {
        if row.int(i + 1)? == 0 {
            empty.push(table);
        }
    }
    Ok((version, empty))
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
    use crate::sql::{holds_rows, SqlValue};

    /// The statements of `V1` and the table each makes or indexes.
    fn v1_statements() -> Vec<(&'static str, &'static str)> {
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
            .collect()
    }

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
    /// in every side table it holds.
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
            .into_iter()
            .map(|(_, t)| t)
            .filter(|t| !V1_FRESH.contains(t))
            .collect();
        side.dedup();
        side
    }

    /// The catalog, each text with its white space normalised.
    fn catalog(sql: &NativeSql) -> Vec<(String, String, String)> {
        sql.query(
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
        .collect()
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

    #[test]
    fn the_steps_count_up_one_at_a_time_to_the_current_version() {
        let tos: Vec<i64> = MIGRATIONS.iter().map(|m| m.to).collect();
        let expected: Vec<i64> = (2..=SCHEMA_VERSION).collect();
        assert_eq!(tos, expected);
    }

    #[test]
    fn fresh_store_gets_current_version_and_reopens() {
        let sql = NativeSql::open_in_memory();
        assert_eq!(open(&sql).unwrap(), Opened::Created);
        assert_eq!(open(&sql).unwrap(), Opened::Current);
        assert_eq!(version(&sql), SCHEMA_VERSION.to_string());
    }

    #[test]
    fn a_version_1_store_migrates_with_its_rows_to_the_schema_of_a_fresh_store() {
        let fresh = NativeSql::open_in_memory();
        open(&fresh).unwrap();
        let side = v1_side();
        let some: Vec<&str> = vec![
            "shiitake_mail_outbox",
            "shiitake_mail_inbox",
            "shiitake_model_choice",
        ];
        for kept in [Vec::new(), some, side] {
            let sql = v1_store(&kept);
            let before = rows(&sql);
            assert_eq!(
                open(&sql).unwrap(),
                Opened::Migrated { from: 1 },
                "{kept:?}"
            );
            assert_eq!(version(&sql), SCHEMA_VERSION.to_string());
            assert_eq!(rows(&sql), before, "rows intact ({kept:?})");
            assert_eq!(
                catalog(&sql),
                catalog(&fresh),
                "migrated = fresh ({kept:?})"
            );
            assert_eq!(open(&sql).unwrap(), Opened::Current);
        }
    }

    #[test]
    fn a_migration_writes_no_row_but_the_version_whatever_the_transcript_length() {
        for messages in [10, 2_000] {
            let sql = v1_store(&[]);
            for seq in 2..=messages {
                sql.query(
                    "INSERT INTO messages VALUES ('s', ?, '{}', 2)",
                    &[i64::from(seq).into()],
                )
                .unwrap();
            }
            let changes = sql.total_changes();
            open(&sql).unwrap();
            assert_eq!(sql.total_changes() - changes, 1, "{messages} messages");
        }
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
                assert_eq!(open(&sql).unwrap(), Opened::Migrated { from: 1 });
                assert_eq!(open(&sql).unwrap(), Opened::Current);
                assert_eq!(rows(&sql), before.1);
            }
        }
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
        let fresh = NativeSql::open_in_memory();
        open(&fresh).unwrap();
        assert_eq!(catalog(&sql), catalog(&fresh));
        let kept = sql
            .query("SELECT agent_id FROM shiitake_directory", &[])
            .unwrap();
        assert_eq!(kept[0].text(0).unwrap(), "a");
    }

    #[test]
    fn open_tells_which_sparse_tables_are_empty() {
        let sql = NativeSql::open_in_memory();
        open(&sql).unwrap();
        assert!(
            SPARSE.iter().all(|t| !holds_rows(&sql, t)),
            "a store made now"
        );
        // A migrated store: the tables it lacked and the empty ones.
        let sql = v1_store(&[
            "shiitake_mail_outbox",
            "shiitake_mail_inbox",
            "shiitake_model_choice",
        ]);
        open(&sql).unwrap();
        let holding: Vec<&str> = SPARSE
            .iter()
            .copied()
            .filter(|t| holds_rows(&sql, t))
            .collect();
        assert_eq!(holding, ["shiitake_mail_outbox", "shiitake_model_choice"]);
        for table in SPARSE {
            assert!(
                created_tables().any(|t| t == *table),
                "{table} is in the schema"
            );
        }
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
        let fresh = NativeSql::open_in_memory();
        open(&fresh).unwrap();
        assert_eq!(catalog(&old), catalog(&fresh));
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
