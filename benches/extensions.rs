//! Extensions benchmark (`cargo bench --bench extensions [-- --n 2000]`):
//! what a settled hook adds to a turn, natively, through the real core over
//! real SQLite (rusqlite, in memory unless `--file`).
//!
//! Two Agents side by side, each in its own database: `plain`, an Agent
//! without extensions (as the Durable Object runs it: an empty roster), and
//! `goal`, the same Agent with one extension shaped like
//! examples/extensions/goal.mjs, whose settled hook reads the Session's goal
//! row and puts it back with `turns + 1`. A turn is the same on both sides:
//! a prompt admitted over the HTTP core into an idle Session (claimed at
//! admission) and completed by `run::complete_step` with a small answer (the
//! settling write, where the hook runs). The sides alternate in blocks, so
//! both share the machine's noise; figures are printed as a ratio against
//! the plain side of the same run. Nothing is asserted.
//!
//! The extension's host is Rust: it parses the core's JSON request and
//! answers JSON the way `runHook` (js/extensions.mjs) would, so the
//! protocol's encode and decode are measured; the JavaScript the hook runs
//! in a Durable Object is not (bench/extensions.mjs measures that).
//!
//! Options (after `--`): `--n` turns per side (2000), `--block` (100),
//! `--warmup` turns per side (200), `--sessions` per Agent (8), `--file`
//! (SQLite in a temporary file instead of memory).

use serde_json::{json, Value};
use shiitake::ctx::{CounterIds, Ctx};
use shiitake::extension::{Extensions, Host, Invocation, Roster};
use shiitake::http::{handle, Hosted, HttpRequest};
use shiitake::meta::MetaPolicy;
use shiitake::model::{Answer, Usage};
use shiitake::run::{complete_step, StepOutcome};
use shiitake::session::admission::ExtensionSends;
use shiitake::sql::native::NativeSql;
use shiitake::store::{schema, Store};
use std::time::Instant;

/// The `goal` manifest, as `manifestOf` (js/extensions.mjs) makes it for
/// examples/extensions/goal.mjs.
fn goal_manifest() -> Value {
    json!({
        "id": "goal", "version": "1.0.0",
        "config": null, "configSchema": null, "configValidate": false,
        "state": {"version": 1, "collections": {
            "goals": {"document": false, "validate": true, "schema": {
                "type": "object", "additionalProperties": false,
                "required": ["text", "status", "setAt", "turns", "startedAfter"],
                "properties": {
                    "text": {"type": "string", "minLength": 1, "maxLength": 500},
                    "status": {"enum": ["active", "achieved", "abandoned"]},
                    "setAt": {"type": "integer"},
                    "turns": {"type": "integer", "minimum": 0},
                    "completed": {"type": "integer", "minimum": 0},
                    "startedAfter": {"type": "integer", "minimum": 0},
                    "endedAfter": {"type": "integer", "minimum": 0},
                    "endedAt": {"type": "integer"}
                }
            }}
        }},
        "migrations": [],
        "commands": {
            "set": {"scope": "session", "validate": true,
                "description": "Set this conversation's goal (replaces an earlier one).",
                "inputSchema": {"type": "object", "additionalProperties": false, "required": ["text"],
                    "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 500}}}},
            "end": {"scope": "session", "validate": true,
                "description": "End this conversation's goal: achieved, or abandoned.",
                "inputSchema": {"type": "object", "additionalProperties": false, "required": ["status"],
                    "properties": {"status": {"enum": ["achieved", "abandoned"]}}}}
        },
        "hooks": {"settled": true, "timer": false},
        "projection": {"session": true, "agent": false},
        "prompt": true, "tools": true,
        "requests": {},
        "grantKey": "goal", "feature": null
    })
}

/// The goal extension's callbacks in Rust, speaking `runHook`'s protocol:
/// a JSON request in, a JSON answer out (`{ok, writes, timers, sends}`).
struct GoalHost;

impl GoalHost {
    fn answer(request: &Value) -> Value {
        let done =
            |writes: Vec<Value>| json!({"ok": true, "writes": writes, "timers": [], "sends": []});
        match request["kind"].as_str() {
            Some("settled") => {
                let event = &request["event"];
                let session = event["sessionId"].as_str().unwrap_or_default();
                let current = &request["state"]["goals"][session];
                if current["status"] != "active" {
                    return done(Vec::new());
                }
                let mut next = current.clone();
                next["turns"] = json!(current["turns"].as_i64().unwrap_or(0) + 1);
                let completed = current["completed"].as_i64().unwrap_or(0)
                    + i64::from(event["terminal"] == "completed");
                next["completed"] = json!(completed);
                done(vec![
                    json!({"collection": "goals", "key": session, "value": next}),
                ])
            }
            Some("command") if request["event"]["name"] == "set" => {
                let session = request["session"]["id"].as_str().unwrap_or_default();
                let text = request["event"]["input"]["text"].clone();
                let value = json!({
                    "text": text, "status": "active", "setAt": request["now"],
                    "turns": 0, "completed": 0,
                    "startedAfter": request["session"]["position"].as_i64().unwrap_or(0)
                });
                let mut out = done(vec![
                    json!({"collection": "goals", "key": session, "value": value}),
                ]);
                out["result"] = json!({"text": text, "status": "active"});
                out
            }
            other => {
                json!({"ok": false, "error": format!("extension goal: no {other:?} call here")})
            }
        }
    }
}

impl Host for GoalHost {
    fn call(&self, request: &str) -> String {
        let request: Value = serde_json::from_str(request).expect("request JSON");
        Self::answer(&request).to_string()
    }
}

/// One Agent: its database, its extensions (none for the plain side) and
/// its Sessions.
struct Side {
    name: &'static str,
    _dir: Option<tempfile::TempDir>,
    sql: NativeSql,
    ext: Extensions,
    ids: CounterIds,
    meta: MetaPolicy,
    now_ms: i64,
    sessions: usize,
    seq: usize,
    times: Vec<f64>,
    settle_times: Vec<f64>,
    rows: Vec<u64>,
}

impl Side {
    fn new(name: &'static str, goal: bool, sessions: usize, file: bool) -> Side {
        let (dir, sql) = if file {
            let dir = tempfile::tempdir().expect("tempdir");
            let sql = NativeSql::open(&dir.path().join("agent.sqlite")).expect("open sqlite");
            (Some(dir), sql)
        } else {
            (None, NativeSql::open_in_memory())
        };
        schema::open(&sql).expect("schema");
        let ext = if goal {
            let roster = Roster::parse(&json!([goal_manifest()]).to_string()).expect("roster");
            Extensions::new(roster, Box::new(GoalHost))
        } else {
            Extensions::none()
        };
        let mut side = Side {
            name,
            _dir: dir,
            sql,
            ext,
            ids: CounterIds::default(),
            meta: MetaPolicy::default(),
            now_ms: 1_700_000_000_000,
            sessions,
            seq: 0,
            times: Vec::new(),
            settle_times: Vec::new(),
            rows: Vec::new(),
        };
        side.with_ctx(|ext, ctx| ext.open(ctx))
            .expect("open extensions");
        for s in 0..sessions {
            let id = format!("s{s}");
            let r = side.request("POST", "/sessions", &json!({ "sessionId": id }).to_string());
            assert_eq!(r.0, 201, "create Session {id}: {}", r.1);
            if goal {
                side.with_ctx(|ext, ctx| {
                    ext.command(
                        ctx,
                        &ExtensionSends,
                        Invocation {
                            extension: "goal",
                            command: "set",
                            session_id: Some(&id),
                            request_id: Some(&format!("goal-{id}")),
                            input: json!({"text": "Ship the release notes"}),
                        },
                    )
                })
                .expect("set the goal");
            }
        }
        side
    }

    /// Runs `f` with the core context the Durable Object host builds: the
    /// store observed by the Agent's extensions (an empty roster included).
    fn with_ctx<T>(&mut self, f: impl FnOnce(&Extensions, &mut Ctx<'_>) -> T) -> T {
        self.now_ms += 1;
        let mut ctx = Ctx {
            store: Store::observed(&self.sql, &self.ext),
            now_ms: self.now_ms,
            ids: &mut self.ids,
            meta: &self.meta,
            spans: Vec::new(),
            charged: None,
        };
        f(&self.ext, &mut ctx)
    }

    fn request(&mut self, method: &str, path: &str, body: &str) -> (u16, String) {
        let req = HttpRequest {
            method: method.into(),
            path: path.into(),
            query: String::new(),
            meta: None,
            body: body.as_bytes().to_vec(),
            waited: false,
        };
        let r = self.with_ctx(|ext, ctx| {
            let hosted = Hosted::without_models(Some(ext));
            handle(ctx, &hosted, &req)
        });
        (r.status, r.body.unwrap_or_default())
    }

    /// One turn: admission (claimed at once: the Session is idle) and the
    /// completed step that settles it. Returns (turn ms, settle ms, rows).
    fn turn(&mut self) -> (f64, f64, u64) {
        let i = self.seq;
        self.seq += 1;
        let session = format!("s{}", i % self.sessions);
        let path = format!("/sessions/{session}/commands");
        let body = json!({
            "type": "prompt", "requestId": format!("req-{i}"),
            "text": format!("benchmark prompt number {i}: summarise the day's notes"),
        })
        .to_string();
        let answer = Answer::new(
            "Here is the summary of the day's notes.",
            Some(Usage {
                input_tokens: 40,
                output_tokens: 9,
                ..Usage::default()
            }),
            Vec::new(),
        );
        let rows_before = self.sql.total_changes();
        let started = Instant::now();
        let (status, text) = self.request("POST", &path, &body);
        let admitted = Instant::now();
        assert_eq!(status, 200, "{}: prompt {i}: {text}", self.name);
        let receipt: Value = serde_json::from_str(&text).expect("receipt JSON");
        let command = receipt["commandId"].as_str().expect("commandId").to_owned();
        let outcome = self
            .with_ctx(|_, ctx| complete_step(ctx, &session, &command, 1, &answer))
            .unwrap_or_else(|e| panic!("{}: complete {command}: {e}", self.name));
        let done = Instant::now();
        assert!(
            matches!(&outcome, StepOutcome::Settled { next: None, .. }),
            "{}: turn {command} did not settle alone: {outcome:?}",
            self.name
        );
        let rows = self.sql.total_changes() - rows_before;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        (ms(done - started), ms(done - admitted), rows)
    }

    fn record(&mut self) {
        let (t, s, r) = self.turn();
        self.times.push(t);
        self.settle_times.push(s);
        self.rows.push(r);
    }

    /// The goal rows of this Agent: `(session, turns)`.
    fn goal_turns(&self) -> Vec<(String, i64)> {
        let rows = shiitake::sql::read(
            &self.sql,
            "SELECT key, value FROM shiitake_state_goal WHERE collection = 'goals' ORDER BY key",
            &[],
        )
        .expect("goal rows");
        rows.iter()
            .map(|r| {
                let v: Value = serde_json::from_str(&r.text(1).unwrap()).unwrap();
                (r.text(0).unwrap(), v["turns"].as_i64().unwrap())
            })
            .collect()
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

struct Stats {
    p50: f64,
    p90: f64,
    p99: f64,
}

fn stats(samples: &[f64]) -> Stats {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    Stats {
        p50: quantile(&s, 0.5),
        p90: quantile(&s, 0.9),
        p99: quantile(&s, 0.99),
    }
}

struct Args {
    n: usize,
    block: usize,
    warmup: usize,
    sessions: usize,
    file: bool,
}

fn args() -> Args {
    let mut a = Args {
        n: 2000,
        block: 100,
        warmup: 200,
        sessions: 8,
        file: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> usize {
            let v = it.next().and_then(|v| v.parse().ok());
            match v {
                Some(v) if v > 0 || name == "--warmup" => v,
                _ => {
                    eprintln!("{name} takes a positive integer");
                    std::process::exit(2);
                }
            }
        };
        match flag.as_str() {
            "--n" => a.n = value("--n"),
            "--block" => a.block = value("--block"),
            "--warmup" => a.warmup = value("--warmup"),
            "--sessions" => a.sessions = value("--sessions"),
            "--file" => a.file = true,
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
    let started = Instant::now();
    let mut sides = [
        Side::new("plain", false, a.sessions, a.file),
        Side::new("goal", true, a.sessions, a.file),
    ];
    for _ in 0..a.warmup {
        for s in sides.iter_mut() {
            s.turn();
        }
    }
    let (mut done, mut block) = (0, 0);
    while done < a.n {
        let n = a.block.min(a.n - done);
        let order: [usize; 2] = if block % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            for _ in 0..n {
                sides[k].record();
            }
        }
        done += n;
        block += 1;
    }

    // The hook really ran: every goal counted every turn of its Session.
    let turns: i64 = sides[1].goal_turns().iter().map(|g| g.1).sum();
    let expected = (a.warmup + a.n) as i64;
    assert_eq!(
        turns, expected,
        "the goal rows count {turns} turns, not {expected}"
    );

    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
    let (plain, goal) = (&sides[0], &sides[1]);
    println!(
        "extensions (native): {} turns per side (after {} warm-up), blocks of {}, {} Sessions per Agent, \
         SQLite {}; turn = admit a prompt into an idle Session + complete_step (settles it)",
        a.n,
        a.warmup,
        a.block,
        a.sessions,
        if a.file { "in a file" } else { "in memory" }
    );
    println!(
        "goal: one settled hook reading the Session's goal row and putting it back with turns+1; \
         its host is Rust answering runHook's JSON (protocol encode/decode measured, JS execution not); \
         each call carries the extension's whole state ({} goal rows)",
        a.sessions
    );
    println!(
        "{:<8}{:>10}{:>11}{:>11}{:>11}{:>14}{:>14}",
        "", "rows/turn", "p50 ms", "p90 ms", "p99 ms", "settle p50", "settle p90"
    );
    let line = |s: &Side| {
        let (t, st) = (stats(&s.times), stats(&s.settle_times));
        println!(
            "{:<8}{:>10.2}{:>11.4}{:>11.4}{:>11.4}{:>14.4}{:>14.4}",
            s.name,
            mean(&s.rows),
            t.p50,
            t.p90,
            t.p99,
            st.p50,
            st.p90
        );
        (t, st)
    };
    let (pt, ps) = line(plain);
    let (gt, gs) = line(goal);
    println!(
        "{:<8}{:>+10.2}{:>11.2}{:>11.2}{:>11.2}{:>14.2}{:>14.2}",
        "ratio",
        mean(&goal.rows) - mean(&plain.rows),
        gt.p50 / pt.p50,
        gt.p90 / pt.p90,
        gt.p99 / pt.p99,
        gs.p50 / ps.p50,
        gs.p90 / ps.p90
    );
    println!(
        "the settled hook adds {:+.2} rows and {:+.4} ms (p50) to a turn: p50 ratio {:.2} \
         (rows: SQLite total_changes; ratio row's rows column is the difference)",
        mean(&goal.rows) - mean(&plain.rows),
        gt.p50 - pt.p50,
        gt.p50 / pt.p50
    );
    println!("wall time {:.1} s", started.elapsed().as_secs_f64());
}
