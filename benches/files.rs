//! Files benchmarks (`cargo bench --bench files`), natively through the
//! files module over the SQLite workspace port (in-memory SQLite): the same
//! code the wasm host runs. Each figure is a median of several runs and is
//! printed with its ratio to a baseline measured in the same run, since
//! these machines are noisy.
//!
//! - `apply_patch` of a 100-chunk patch on a 10,000-line file, against a
//!   plain `replace` of the whole file by the same final content;
//! - `search` over a 2,000-file workspace with nested `.gitignore` files,
//!   against the same search in a workspace without any.

use serde_json::{json, Value};
use shiitake::files::block_on;
use shiitake::files::module::call;
use shiitake::files::workspace::{Bounds, Workspace};
use shiitake::sql::native::NativeSql;
use std::time::{Duration, Instant};

const RUNS: usize = 9;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn bounds() -> Bounds {
    Bounds::parse(r#"{}"#).unwrap()
}

fn run(ws: &Workspace<'_>, op: &str, args: Value) -> Value {
    match block_on(call(ws, op, &args)) {
        Ok(v) => v,
        Err(e) => panic!("{op}: {e}"),
    }
}

fn patch_bench() {
    let lines: Vec<String> = (0..10_000)
        .map(|i| format!("line {i} of the file"))
        .collect();
    let original = lines.join("\n") + "\n";
    let mut patch = String::from("*** Begin Patch\n*** Update File: big.txt\n");
    let mut edited = lines.clone();
    for k in 0..100 {
        let at = 50 + k * 99;
        patch.push_str("@@\n");
        for line in &lines[at - 3..at] {
            patch.push_str(&format!(" {line}\n"));
        }
        patch.push_str(&format!("-{}\n+{} (edited)\n", lines[at], lines[at]));
        for line in &lines[at + 1..at + 4] {
            patch.push_str(&format!(" {line}\n"));
        }
        edited[at] = format!("{} (edited)", lines[at]);
    }
    patch.push_str("*** End Patch");
    let expected = edited.join("\n") + "\n";

    let (mut patched, mut written) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let sql = NativeSql::open_in_memory();
        shiitake::store::schema::open(&sql).unwrap();
        let ws = Workspace::open(&sql, bounds(), 1);
        run(
            &ws,
            "write",
            json!({ "path": "big.txt", "content": original }),
        );
        let started = Instant::now();
        run(&ws, "apply_patch", json!({ "input": patch }));
        patched.push(started.elapsed());
        let after = run(&ws, "read", json!({ "path": "big.txt", "lineCount": 1 }));
        assert_eq!(after["totalLines"], 10_000);

        let sql = NativeSql::open_in_memory();

        shiitake::store::schema::open(&sql).unwrap();
        let ws = Workspace::open(&sql, bounds(), 1);
        run(
            &ws,
            "write",
            json!({ "path": "big.txt", "content": original }),
        );
        let started = Instant::now();
        run(
            &ws,
            "write",
            json!({ "path": "big.txt", "content": expected }),
        );
        written.push(started.elapsed());
    }
    let (p, w) = (median(patched), median(written));
    println!(
        "apply_patch, 100 chunks on 10,000 lines ({} KiB): median {:.2} ms; a plain replace of the whole file {:.2} ms; ratio {:.1}",
        original.len() / 1024,
        p.as_secs_f64() * 1e3,
        w.as_secs_f64() * 1e3,
        p.as_secs_f64() / w.as_secs_f64()
    );
}

fn workspace(ignores: bool) -> (NativeSql, usize) {
    let sql = NativeSql::open_in_memory();
    shiitake::store::schema::open(&sql).unwrap();
    {
        let ws = Workspace::open(&sql, bounds(), 1);
        if ignores {
            run(
                &ws,
                "write",
                json!({ "path": ".gitignore", "content": "*.log\ntarget/\n" }),
            );
            for d in 0..20 {
                let text = format!("generated-{d}.txt\n!keep.log\n");
                run(
                    &ws,
                    "write",
                    json!({ "path": format!("pkg{d}/.gitignore"), "content": text }),
                );
            }
        }
        for i in 0..2_000 {
            // One file in ten lies in a `target/` directory the root ignores.
            let dir = if i % 10 == 0 {
                format!("pkg{}/target", i % 20)
            } else {
                format!("pkg{}/src/mod{}", i % 20, i % 7)
            };
            let content = format!("fn item_{i}() {{}}\n// some text\n// needle {}\n", i % 3);
            run(
                &ws,
                "write",
                json!({ "path": format!("{dir}/file{i}.rs"), "content": content }),
            );
        }
    }
    (sql, 2_000)
}

fn search_bench() {
    let mut figures = Vec::new();
    for ignores in [false, true] {
        let (sql, files) = workspace(ignores);
        let ws = Workspace::open(&sql, bounds(), 1);
        let mut samples = Vec::new();
        let mut found = Value::Null;
        for _ in 0..RUNS {
            let started = Instant::now();
            // One match: every visible file is read.
            found = run(&ws, "search", json!({ "query": "fn item_1999(" }));
            samples.push(started.elapsed());
        }
        figures.push((median(samples), files, found["filesSearched"].clone()));
    }
    let (plain, with) = (figures[0].0, figures[1].0);
    println!(
        "search over {} files: median {:.2} ms with 21 nested .gitignore files ({} searched), {:.2} ms without; ratio {:.2}",
        figures[1].1,
        with.as_secs_f64() * 1e3,
        figures[1].2,
        plain.as_secs_f64() * 1e3,
        with.as_secs_f64() / plain.as_secs_f64()
    );
}

fn main() {
    patch_bench();
    search_bench();
}
