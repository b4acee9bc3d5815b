//! Migration benchmark (`cargo bench --bench migrate [-- --messages 100000
//! --rounds 15]`): opening a version 1 store, which migrates it, against
//! opening an already current store of the same size, natively through
//! `schema::open` over SQLite files (rusqlite).
//!
//! The version 1 store is what version 1 left: the tables it made when it
//! opened a store, the version row 1, one Session of `--messages` messages
//! (about 300 bytes each). The current store is the same store migrated
//! once. Each round opens a fresh copy of each (a new connection, as a
//! restarted object does), alternating, so both share the machine's noise;
//! the copy (written to disk first) is not timed. Also timed: migrating a version 1 store of 1,000
//! messages (a migration is O(1) in transcript length, so the two migrations
//! should cost the same). Figures are printed; nothing is asserted.

use shiitake::sql::native::NativeSql;
use shiitake::sql::Sql;
use shiitake::store::schema::{self, Opened};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The tables version 1 made when it opened a store; it made every other
/// table on first use.
const V1_OPENED: &[&str] = &[
    "shiitake_meta",
    "sessions",
    "commands",
    "fences",
    "messages",
    "session_grants",
    "shiitake_delivery",
    "shiitake_host_lane",
];

/// Version 1's catalog, frozen (`src/store/v1.sql`).
const V1: &str = include_str!("../src/store/v1.sql");

fn exec(sql: &NativeSql, text: &str) {
    sql.apply(vec![(text.to_owned(), Vec::new())]).unwrap();
}

/// Writes a version 1 store of one Session with `messages` messages.
fn v1_store(path: &Path, messages: usize) {
    let sql = NativeSql::open(path).unwrap();
    // Each statement of `V1` makes, or indexes `ON`, one table.
    for statement in V1.split(";\n").map(str::trim).filter(|s| !s.is_empty()) {
        let words: Vec<&str> = statement.split_whitespace().collect();
        let table = match words.iter().position(|w| *w == "ON") {
            Some(on) if !statement.starts_with("CREATE TABLE") => words[on + 1],
            _ => words[2],
        };
        if V1_OPENED.contains(&table.trim_end_matches('(')) {
            exec(&sql, statement);
        }
    }
    exec(
        &sql,
        "INSERT INTO shiitake_meta (key, value) VALUES ('schema_version', '1')",
    );
    exec(
        &sql,
        "INSERT INTO sessions (session_id, created_at) VALUES ('s', 1)",
    );
    let text = "x".repeat(180);
    exec(
        &sql,
        &format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {messages})
             INSERT INTO messages (session_id, seq, body, bytes)
             SELECT 's', i, '{{\"entryId\":\"msg_' || printf('%024d', i) || '\",\"role\":\"user\",\
             \"sequence\":' || i || ',\"text\":\"{text}\",\"createdAt\":1700000000000}}', 300 FROM n"
        ),
    );
    sql.query("VACUUM", &[]).unwrap();
}

/// Opens a fresh copy of `store`: milliseconds, and what the open did. The
/// copy is on disk first (else the migration's commit would flush it).
fn open_copy(store: &Path, copy: &Path) -> (f64, Opened) {
    std::fs::copy(store, copy).unwrap();
    std::fs::File::open(copy).unwrap().sync_all().unwrap();
    let started = Instant::now();
    let sql = NativeSql::open(copy).unwrap();
    let opened = schema::open(&sql).unwrap();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    drop(sql);
    std::fs::remove_file(copy).unwrap();
    (ms, opened)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Args {
    messages: usize,
    rounds: usize,
}

fn args() -> Args {
    let mut a = Args {
        messages: 100_000,
        rounds: 15,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> usize {
            match it.next().and_then(|v| v.parse().ok()) {
                Some(v) if v > 0 => v,
                _ => {
                    eprintln!("{name} takes a positive integer");
                    std::process::exit(2);
                }
            }
        };
        match flag.as_str() {
            "--messages" => a.messages = value("--messages"),
            "--rounds" => a.rounds = value("--rounds"),
            // `cargo bench` passes `--bench`; a filter may follow it.
            "--bench" => {}
            other if !other.starts_with("--") => {}
            other => {
                eprintln!("unknown option {other}");
                std::process::exit(2);
            }
        }
    }
    a
}

fn main() {
    let a = args();
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| -> PathBuf { dir.path().join(name) };
    let (v1, small, current, copy) = (at("v1.db"), at("small.db"), at("current.db"), at("copy.db"));
    v1_store(&v1, a.messages);
    v1_store(&small, 1_000);
    // The current store: the version 1 store, migrated once.
    std::fs::copy(&v1, &current).unwrap();
    let sql = NativeSql::open(&current).unwrap();
    let before = sql.total_changes();
    assert_eq!(schema::open(&sql).unwrap(), Opened::Migrated { from: 1 });
    let rows_written = sql.total_changes() - before;
    drop(sql);

    let (mut migrating, mut opening, mut migrating_small) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..a.rounds {
        let mut sides: [(&Path, &mut Vec<f64>, bool); 3] = [
            (&v1, &mut migrating, true),
            (&current, &mut opening, false),
            (&small, &mut migrating_small, true),
        ];
        if round % 2 == 1 {
            sides.reverse();
        }
        for (store, times, migrates) in sides.iter_mut() {
            let (ms, opened) = open_copy(store, &copy);
            assert_eq!(matches!(opened, Opened::Migrated { .. }), *migrates);
            times.push(ms);
        }
    }
    let size = std::fs::metadata(&v1).unwrap().len() as f64 / (1024.0 * 1024.0);
    let (m, o, s) = (
        median(&mut migrating),
        median(&mut opening),
        median(&mut migrating_small),
    );
    println!(
        "migrate (native, SQLite files, rusqlite defaults: rollback journal, synchronous FULL): \
         {} rounds, medians",
        a.rounds
    );
    println!(
        "  version 1 store, {} messages ({size:.1} MiB): open + migrate to version {} {m:.3} ms",
        a.messages,
        schema::SCHEMA_VERSION
    );
    println!("  current store, same size: open {o:.3} ms");
    println!("  ratio migrate / open: {:.2}x", m / o);
    println!("  version 1 store, 1,000 messages: open + migrate {s:.3} ms");
    println!(
        "  ratio migrate {} / migrate 1,000 messages: {:.2}x (O(1) in transcript length: about 1)",
        a.messages,
        m / s
    );
    println!("  rows the migration wrote: {rows_written} (the version row, and the record of the delivery tables' group)");
}
