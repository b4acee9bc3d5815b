//! The versioned schema. A fresh database gets the current version; a store
//! written by any other version (older, newer or unknown) is refused with
//! [`ApiError::StorageIncompatible`] and never reset or migrated in place:
//! the host keeps custody of data this build cannot read.

use crate::error::ApiError;
use crate::sql::{atomically, table_exists, write, Sql, SqlError};

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
    "CREATE TABLE messages (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        bytes INTEGER NOT NULL, parent INTEGER,
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

    /// The tables of schema 1 as release `ff6f17b` created them (frozen).
    const V1: &str =
        "CREATE TABLE shiitake_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE sessions (
            seq INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL UNIQUE,
            created_at INTEGER NOT NULL
        );
        CREATE TABLE commands (
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
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX commands_by_request ON commands (session_id, request_id)
            WHERE request_id IS NOT NULL;
        CREATE INDEX commands_unsettled ON commands (session_id, seq) WHERE settled_at IS NULL;
        CREATE TABLE fences (
            session_id TEXT NOT NULL,
            request_id TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (session_id, request_id)
        ) WITHOUT ROWID;
        CREATE TABLE messages (
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            body TEXT NOT NULL,
            bytes INTEGER NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID;
        CREATE TABLE session_grants (
            session_id TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            grants TEXT NOT NULL,
            delivered_at INTEGER NOT NULL
        ) WITHOUT ROWID;
        INSERT INTO shiitake_meta (key, value) VALUES ('schema_version', '1')";

    /// `(type, name, sql)` of every schema object, whitespace collapsed.
    fn objects(sql: &NativeSql) -> Vec<(String, String, String)> {
        let rows = sql
            .query(
                "SELECT type, name, coalesce(sql, '') FROM sqlite_master ORDER BY type, name",
                &[],
            )
            .unwrap();
        rows.iter()
            .map(|r| {
                let text = r.text(2).unwrap();
                let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                (r.text(0).unwrap(), r.text(1).unwrap(), text)
            })
            .collect()
    }

    #[test]
    fn the_branches_step_carries_a_version_1_store_to_the_fresh_shape_in_place() {
        let old = NativeSql::open_in_memory();
        atomically(&old, || {
            write(&old, &format!("{V1};\n{DELIVERY_TABLES}"), Vec::new())
        })
        .unwrap();
        let body = |n: i64| {
            format!("{{\"entryId\":\"m{n}\",\"role\":\"user\",\"text\":\"t{n}\",\"createdAt\":0}}")
        };
        old.query(
            "INSERT INTO sessions (session_id, created_at) VALUES ('s', 1)",
            &[],
        )
        .unwrap();
        for n in 1..=3 {
            let b = body(n);
            old.query(
                "INSERT INTO messages (session_id, seq, body, bytes) VALUES ('s', ?, ?, ?)",
                &[n.into(), b.as_str().into(), (b.len() as i64).into()],
            )
            .unwrap();
        }
        atomically(&old, || to_branches(&old)).unwrap();
        let fresh = NativeSql::open_in_memory();
        open(&fresh).unwrap();
        assert_eq!(objects(&old), objects(&fresh));
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
