//! The versioned schema. A fresh database gets the current version; a store
//! written by any other version (older, newer or unknown) is refused with
//! [`ApiError::StorageIncompatible`] and never reset or migrated in place:
//! the host keeps custody of data this build cannot read.

use crate::error::ApiError;
use crate::sql::{atomically, table_exists, write, Sql};

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 1;

/// Tables this crate owns; any of them without `shiitake_meta` is an
/// unknown store.
const TABLES: &[&str] = &[
    "shiitake_meta",
    "sessions",
    "commands",
    "fences",
    "messages",
];

const CREATE: &[&str] = &[
    "CREATE TABLE shiitake_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE sessions (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL
    )",
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
        settlement TEXT,
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
    // message, no secondary index: `seq` is the position in the Session;
    // `bytes` lets a page be cut by size without reading bodies; `kind` is
    // NULL for a message and `compaction` for a compaction entry, where a
    // model context stops reading older messages (`to_compaction`).
    "CREATE TABLE messages (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        kind TEXT,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID",
    // The host's delivered grants of each Session: one row, replaced under
    // the version rules of `grants::deliver`.
    "CREATE TABLE session_grants (
        session_id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        grants TEXT NOT NULL,
        delivered_at INTEGER NOT NULL
    ) WITHOUT ROWID",
];

/// The delivery outbox and the host work lane's state (`delivery.rs`),
/// outside the versioned tables: created with a fresh store, and by
/// `delivery::create` in a store made before they existed.
pub const DELIVERY_TABLES: &str = "CREATE TABLE IF NOT EXISTS shiitake_delivery (
        seq INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        body TEXT NOT NULL,
        at INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS shiitake_host_lane (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        attempts INTEGER NOT NULL,
        retry_at INTEGER NOT NULL,
        error TEXT NOT NULL
    )";

/// The forward step that adds compaction entries (`messages.kind`): O(1)
/// in transcript length, since NULL, every older row's value, means an
/// ordinary message. The lead wires it into the ordered migrations.
#[cfg_attr(not(test), allow(dead_code))]
fn to_compaction(sql: &dyn crate::sql::Sql) -> Result<(), crate::sql::SqlError> {
    write(sql, "ALTER TABLE messages ADD COLUMN kind TEXT", Vec::new())
}

/// Creates the schema on an empty database (answering `true`: a store
/// created now holds no work) or checks the stored version.
pub fn open(sql: &dyn Sql) -> Result<bool, ApiError> {
    // The catalog read also answers every later optional-table check.
    let mut present = 0;
    for table in TABLES {
        present += usize::from(table_exists(sql, table)?);
    }
    if present == 0 {
        // One text for every table and the version row: workerd keeps each
        // distinct text prepared for the object's life (about 9.5 KiB of
        // memory per Agent each, measured).
        let text = format!(
            "{};\n{DELIVERY_TABLES};\nINSERT INTO shiitake_meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}')",
            CREATE.join(";\n")
        );
        atomically(sql, || write(sql, &text, Vec::new()))?;
        return Ok(true);
    }
    // Fails (no such table) for a foreign store: that is the unknown case.
    let version = sql
        .query(
            "SELECT value FROM shiitake_meta WHERE key = 'schema_version'",
            &[],
        )
        .ok()
        .and_then(|rows| rows.first().and_then(|r| r.text(0).ok()));
    match version.as_deref().map(str::parse::<i64>) {
        Some(Ok(SCHEMA_VERSION)) => Ok(false),
        Some(Ok(other)) => Err(ApiError::StorageIncompatible(format!(
            "stored schema version {other}; this build reads version {SCHEMA_VERSION} only. \
             The data was left untouched; open it with a matching build."
        ))),
        _ => Err(ApiError::StorageIncompatible(format!(
            "the store holds tables of an unknown schema; this build reads version \
             {SCHEMA_VERSION} only. The data was left untouched."
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::native::NativeSql;

    #[test]
    fn fresh_store_gets_current_version_and_reopens() {
        let sql = NativeSql::open_in_memory();
        open(&sql).unwrap();
        open(&sql).unwrap();
        let rows = sql
            .query(
                "SELECT value FROM shiitake_meta WHERE key = 'schema_version'",
                &[],
            )
            .unwrap();
        assert_eq!(rows[0].text(0).unwrap(), SCHEMA_VERSION.to_string());
    }

    #[test]
    fn older_and_newer_versions_are_refused_and_left_untouched() {
        for stored in [SCHEMA_VERSION - 1, SCHEMA_VERSION + 1] {
            let sql = NativeSql::open_in_memory();
            open(&sql).unwrap();
            sql.query(
                "INSERT INTO sessions (session_id, created_at) VALUES ('kept', 1)",
                &[],
            )
            .unwrap();
            sql.query(
                "UPDATE shiitake_meta SET value = ? WHERE key = 'schema_version'",
                &[stored.to_string().into()],
            )
            .unwrap();
            let err = open(&sql).unwrap_err();
            assert_eq!(err.code(), "storage_incompatible");
            assert!(err.to_string().contains(&format!("version {stored}")));
            let kept = sql.query("SELECT count(*) FROM sessions", &[]).unwrap();
            assert_eq!(kept[0].int(0).unwrap(), 1, "refusal must not reset data");
        }
    }

    /// A version-1 `messages` table after `to_compaction` is the fresh one.
    #[test]
    fn to_compaction_gives_the_fresh_messages_table() {
        let table = |sql: &NativeSql| {
            let rows = sql
                .query("SELECT sql FROM sqlite_master WHERE name = 'messages'", &[])
                .unwrap();
            rows[0]
                .text(0)
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        let fresh = NativeSql::open_in_memory();
        open(&fresh).unwrap();
        let old = NativeSql::open_in_memory();
        old.query(
            "CREATE TABLE messages (
                session_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                body TEXT NOT NULL,
                bytes INTEGER NOT NULL,
                PRIMARY KEY (session_id, seq)
            ) WITHOUT ROWID",
            &[],
        )
        .unwrap();
        old.query("INSERT INTO messages VALUES ('s', 1, '{}', 2)", &[])
            .unwrap();
        atomically(&old, || to_compaction(&old)).unwrap();
        assert_eq!(table(&old), table(&fresh));
        let kept = old.query("SELECT kind FROM messages", &[]).unwrap();
        assert_eq!(kept[0].opt_text(0).unwrap(), None);
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
    }
}
