//! Extensions over real SQLite: revision, migrations, a throwing hook's
//! rollback and stop, replay through the cursor after a resume, timers
//! across a reopen, commands (replay, bounds, sends). The authored
//! callbacks are Rust closures speaking the same JSON protocol as
//! `js/extensions.mjs`.

mod common;

use common::Harness;
use serde_json::{json, Value};
use shiitake::error::ApiError;
use shiitake::extension::{manifest, Extensions, Host, Invocation, Roster};
use shiitake::session::admission::ExtensionSends;
use std::cell::RefCell;
use std::rc::Rc;

type Handler = Box<dyn FnMut(&Value) -> Value>;

/// Answers calls with a closure; shared so a test can change it.
#[derive(Clone)]
struct Script(Rc<RefCell<Handler>>);

impl Script {
    fn new(f: impl FnMut(&Value) -> Value + 'static) -> Self {
        Script(Rc::new(RefCell::new(Box::new(f))))
    }
    fn set(&self, f: impl FnMut(&Value) -> Value + 'static) {
        *self.0.borrow_mut() = Box::new(f);
    }
}

impl Host for Script {
    fn call(&self, request: &str) -> String {
        let request: Value = serde_json::from_str(request).unwrap();
        (self.0.borrow_mut())(&request).to_string()
    }
}

/// A manifest as `js/extensions.mjs` makes it, with `patch` merged in.
fn manifest(id: &str, patch: Value) -> Value {
    let mut m = json!({
        "id": id, "version": "0.0.0",
        "config": null, "configSchema": null, "configValidate": false,
        "state": {"version": 1, "collections": {
            "count": {"document": true, "schema": {"type": "integer"}, "validate": true},
            "seen": {"document": false, "schema": null, "validate": false}
        }},
        "migrations": [],
        "commands": {
            "bump": {"scope": "session", "inputSchema": {"type": "object", "properties": {"by": {"type": "integer"}}, "required": ["by"]}, "validate": true, "description": null},
            "agent": {"scope": "agent", "inputSchema": null, "validate": false, "description": null}
        },
        "hooks": {"settled": true, "timer": true},
        "projection": {"session": true, "agent": true},
        "prompt": true, "tools": true,
        "requests": {},
        "grantKey": id, "feature": null
    });
    merge(&mut m, patch);
    m
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn roster(manifests: &[Value]) -> Roster {
    Roster::parse(&Value::Array(manifests.to_vec()).to_string()).unwrap()
}

fn ok(writes: Value) -> Value {
    json!({"ok": true, "writes": writes})
}

fn count_of(request: &Value) -> i64 {
    request["state"]["count"][""].as_i64().unwrap_or(0)
}

/// The tally host: a settled hook counts settlements and records each
/// command id in order; `bump` adds `by`.
fn tally() -> Script {
    Script::new(|r| match r["kind"].as_str().unwrap() {
        "settled" => {
            let n = count_of(r) + 1;
            let id = r["event"]["commandId"].as_str().unwrap();
            ok(json!([
                {"collection": "count", "key": "", "value": n},
                {"collection": "seen", "key": format!("{n:04}"), "value": id}
            ]))
        }
        "command" => {
            let n = count_of(r) + r["event"]["input"]["by"].as_i64().unwrap_or(1);
            json!({"ok": true, "writes": [{"collection": "count", "key": "", "value": n}], "result": {"count": n}})
        }
        "project" => json!({"ok": true, "value": {"count": count_of(r)}}),
        other => json!({"ok": false, "error": format!("no {other} hook")}),
    })
}

fn open(h: &mut Harness, manifests: &[Value], host: Script) {
    h.extensions = Some(Extensions::new(roster(manifests), Box::new(host)));
    with_ext(h, |e, ctx| e.open(ctx)).unwrap();
}

fn rows(h: &Harness, id: &str) -> Vec<(String, String, String)> {
    let sql = h.sql();
    shiitake::sql::read(
        sql,
        &format!("SELECT collection, key, value FROM shiitake_state_{id} ORDER BY collection, key"),
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.text(0).unwrap(), r.text(1).unwrap(), r.text(2).unwrap()))
    .collect()
}

/// Admits a prompt (claimed at once in an idle Session) and cancels it:
/// one settlement. Returns the command id.
fn settle_one(h: &mut Harness, session: &str, request_id: &str) -> String {
    let r = h.call(
        "POST",
        &format!("/sessions/{session}/commands"),
        json!({"type": "prompt", "requestId": request_id, "text": "hi"}),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let id = r.json["commandId"].as_str().unwrap().to_owned();
    let r = h.call(
        "POST",
        &format!("/sessions/{session}/commands"),
        json!({"type": "cancel", "commandId": id}),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    id
}

fn stopped(h: &mut Harness, id: &str) -> Option<String> {
    let s = with_ext(h, |e, ctx| e.statuses(ctx.store)).unwrap();
    s.into_iter()
        .find(|s| s.id == id)
        .unwrap()
        .stopped
        .map(|s| s.reason)
}

fn with_ext<T>(
    h: &mut Harness,
    f: impl FnOnce(&Extensions, &mut shiitake::ctx::Ctx<'_>) -> T,
) -> T {
    h.with_ext(f)
}

#[test]
fn the_revision_is_stable_and_moves_with_version_schemas_config_and_requests() {
    let base = manifest("tally", json!({}));
    let r = |m: &Value| {
        roster(std::slice::from_ref(m)).entries()[0]
            .revision
            .clone()
    };
    let rev = r(&base);
    assert_eq!(rev.len(), 32);
    // Key order and callbacks (hooks, projections, prompt, tools) are not
    // part of it.
    let mut reordered: serde_json::Map<String, Value> = serde_json::Map::new();
    for (k, v) in base.as_object().unwrap().iter().rev() {
        reordered.insert(k.clone(), v.clone());
    }
    assert_eq!(r(&Value::Object(reordered)), rev);
    assert_eq!(
        r(&manifest(
            "tally",
            json!({"hooks": {"settled": false}, "prompt": false})
        )),
        rev
    );
    for patch in [
        json!({"version": "0.0.1"}),
        json!({"config": {"limit": 3}}),
        json!({"state": {"collections": {"count": {"schema": {"type": "number"}}}}}),
        json!({"commands": {"bump": {"inputSchema": {"properties": {"by": {"type": "number"}}}}}}),
        json!({"requests": {"attention": true}}),
    ] {
        assert_ne!(r(&manifest("tally", patch.clone())), rev, "{patch}");
    }
    // The same definition gives the same revision in a fresh parse.
    assert_eq!(
        manifest::revision(&roster(&[base]).entries()[0].manifest),
        rev
    );
}

#[test]
fn a_roster_is_closed_and_bounded_and_names_the_extension() {
    let parse = |v: Value| Roster::parse(&v.to_string()).unwrap_err().to_string();
    let e = parse(json!([manifest("tally", json!({"extra": 1}))]));
    assert!(e.contains("extension tally") && e.contains("extra"), "{e}");
    let e = parse(json!([
        manifest("tally", json!({})),
        manifest("tally", json!({}))
    ]));
    assert!(e.contains("listed twice"), "{e}");
    let many: Vec<Value> = (0..17)
        .map(|i| manifest(&format!("x{i}"), json!({})))
        .collect();
    assert!(parse(Value::Array(many)).contains("at most 16"));
    let e = parse(json!([manifest(
        "tally",
        json!({"state": {"version": 3}, "migrations": [2]})
    )]));
    assert!(e.contains("one migration for each version 2..=3"), "{e}");
    let e = parse(json!([manifest("Bad-Id", json!({}))]));
    assert!(e.contains("id: 1 to 32"), "{e}");
    let e = parse(json!([manifest(
        "tally",
        json!({"configSchema": {"type": "object", "required": ["a"]}, "configValidate": true, "config": {}})
    )]));
    assert!(e.contains("config") && e.contains("a"), "{e}");
    let e = parse(json!([manifest(
        "tally",
        json!({"projection": {"session": false, "history": true}})
    )]));
    assert!(e.contains("history without a session projection"), "{e}");
}

#[test]
fn grants_need_a_request_and_the_files_grant_has_one_holder() {
    let parse = |v: Value| Roster::parse(&v.to_string()).map_err(|e| e.to_string());
    let asks = json!({"requests": {"files": true, "attention": true}});
    let with = |id: &str, grants: Value| {
        let mut m = manifest(id, asks.clone());
        m["grants"] = grants;
        m
    };
    let e = parse(json!([manifest("a", json!({"grants": ["files"]}))])).unwrap_err();
    assert!(
        e.contains("extension a") && e.contains("does not request"),
        "{e}"
    );
    let e = parse(json!([with("a", json!(["push"]))])).unwrap_err();
    assert!(e.contains("push") && e.contains("attention"), "{e}");
    let e = parse(json!([with("a", json!(["files", "files"]))])).unwrap_err();
    assert!(e.contains("twice"), "{e}");
    let e = parse(json!([
        with("a", json!(["files", "attention"])),
        with("b", json!(["files"]))
    ]))
    .unwrap_err();
    assert!(
        e.contains("extension b: the files grant is exclusive and extension a holds it"),
        "{e}"
    );
    // Attention is not exclusive; requesting files without the grant is fine.
    let r = parse(json!([
        with("a", json!(["files", "attention"])),
        with("b", json!(["attention"]))
    ]))
    .unwrap();
    assert_eq!(r.files_holder().map(|e| e.id()), Some("a"));
    assert!(r.get("b").unwrap().granted(manifest::Grant::Attention));
    assert!(!r.get("b").unwrap().granted(manifest::Grant::Files));
}

#[test]
fn a_settled_hook_commits_with_the_settlement_and_a_throwing_one_rolls_back_and_stops() {
    let mut h = Harness::new();
    let host = tally();
    open(&mut h, &[manifest("tally", json!({}))], host.clone());
    h.session("s");
    let first = settle_one(&mut h, "s", "r1");
    assert_eq!(
        rows(&h, "tally"),
        vec![
            ("count".into(), "".into(), "1".into()),
            ("seen".into(), "0001".into(), format!("\"{first}\"")),
        ]
    );
    // A hook that throws: the settlement still commits, the extension's
    // writes do not, and its stop is recorded.
    host.set(|r| match r["kind"].as_str().unwrap() {
        "settled" => json!({"ok": false, "error": "extension tally: the settled hook threw: boom"}),
        _ => json!({"ok": false, "error": "no"}),
    });
    let second = settle_one(&mut h, "s", "r2");
    let settlement = h.call(
        "GET",
        &format!("/sessions/s/settlement?commandId={second}"),
        Value::Null,
    );
    assert_eq!(settlement.json["terminal"], "cancelled");
    assert_eq!(
        rows(&h, "tally").len(),
        2,
        "no write of the throwing hook is kept"
    );
    let reason = stopped(&mut h, "tally").expect("stopped");
    assert!(reason.contains("boom"), "{reason}");
    // A hook that writes past a bound fails the same way (a second
    // extension, so the first stays as it is).
    let _ = second;
}

#[test]
fn a_resumed_extension_replays_missed_settlements_once_in_order() {
    let mut h = Harness::new();
    let host = tally();
    open(&mut h, &[manifest("tally", json!({}))], host.clone());
    h.session("s");
    let a = settle_one(&mut h, "s", "a");
    host.set(|_| json!({"ok": false, "error": "down"}));
    let b = settle_one(&mut h, "s", "b");
    assert!(stopped(&mut h, "tally").is_some());
    // Stopped: no hook runs (the host would fail the test if called).
    host.set(|r| panic!("a stopped extension's hook ran: {r}"));
    let c = settle_one(&mut h, "s", "c");
    let d = settle_one(&mut h, "s", "d");
    // Deadline: nothing to replay while stopped.
    let deadline = with_ext(&mut h, |e, ctx| e.next_deadline(ctx.store, ctx.now_ms)).unwrap();
    assert_eq!(deadline, None);
    host.set({
        let inner = tally();
        move |r| {
            let text = inner.call(&r.to_string());
            serde_json::from_str(&text).unwrap()
        }
    });
    let status = with_ext(&mut h, |e, ctx| e.resume(ctx, "tally")).unwrap();
    assert!(status.stopped.is_none() && status.behind);
    // Work is due now; one pass replays all three (b, c, d) in order.
    let now = h.now_ms;
    let deadline = with_ext(&mut h, |e, ctx| e.next_deadline(ctx.store, ctx.now_ms)).unwrap();
    assert!(deadline.is_some_and(|d| d > now));
    // A settlement while catching up is logged behind them, not run first.
    let e_ = settle_one(&mut h, "s", "e");
    let more = with_ext(&mut h, |e, ctx| e.catch_up(ctx)).unwrap();
    assert!(!more);
    let seen: Vec<String> = rows(&h, "tally")
        .into_iter()
        .filter(|r| r.0 == "seen")
        .map(|r| r.2.trim_matches('"').to_owned())
        .collect();
    assert_eq!(seen, vec![a, b, c, d, e_.clone()]);
    // Nothing is replayed twice; new settlements run at once again.
    assert!(!with_ext(&mut h, |e, ctx| e.catch_up(ctx)).unwrap());
    let f = settle_one(&mut h, "s", "f");
    let seen = rows(&h, "tally")
        .into_iter()
        .filter(|r| r.0 == "seen")
        .count();
    assert_eq!(seen, 6, "{f}");
    let logged = shiitake::sql::read(h.sql(), "SELECT count(*) FROM shiitake_ext_log", &[])
        .unwrap()[0]
        .int(0)
        .unwrap();
    assert_eq!(logged, 0, "the log is pruned once every cursor passed it");
}

/// A hook's failure is its outcome, committed as one value: a replay that
/// fails again records the stop and its cursor in one write of the status
/// row (it was two: the stop, then the cursor).
#[test]
fn a_replay_that_fails_commits_its_stop_and_cursor_as_one_status_write() {
    let mut h = Harness::new();
    let host = tally();
    open(&mut h, &[manifest("tally", json!({}))], host.clone());
    h.session("s");
    settle_one(&mut h, "s", "a");
    host.set(|_| json!({"ok": false, "error": "down"}));
    settle_one(&mut h, "s", "b");
    assert_eq!(stopped(&mut h, "tally").as_deref(), Some("down"));
    host.set(|_| json!({"ok": false, "error": "still down"}));
    with_ext(&mut h, |e, ctx| e.resume(ctx, "tally")).unwrap();
    let before = h.sql().total_changes();
    with_ext(&mut h, |e, ctx| e.catch_up(ctx)).unwrap();
    assert_eq!(
        h.sql().total_changes() - before,
        1,
        "one write: the status row"
    );
    let status = with_ext(&mut h, |e, ctx| e.statuses(ctx.store)).unwrap();
    let status = status.into_iter().find(|s| s.id == "tally").unwrap();
    assert_eq!(
        status.stopped.map(|s| s.reason).as_deref(),
        Some("still down")
    );
    assert!(status.behind, "b is still to replay");
    // Resumed with a working hook, it replays b once.
    host.set({
        let inner = tally();
        move |r| serde_json::from_str(&inner.call(&r.to_string())).unwrap()
    });
    with_ext(&mut h, |e, ctx| e.resume(ctx, "tally")).unwrap();
    assert!(!with_ext(&mut h, |e, ctx| e.catch_up(ctx)).unwrap());
    let count = rows(&h, "tally")
        .into_iter()
        .find(|r| r.0 == "count")
        .unwrap();
    assert_eq!(count.2, "2");
}

#[test]
fn migrations_run_once_in_order_in_one_transition() {
    let mut h = Harness::new();
    open(&mut h, &[manifest("tally", json!({}))], tally());
    h.session("s");
    settle_one(&mut h, "s", "a");
    let order = Rc::new(RefCell::new(Vec::new()));
    let v3 = manifest(
        "tally",
        json!({"version": "0.1.0", "state": {"version": 3, "collections": {"count": {"schema": {"type": "object"}}}}, "migrations": [2, 3]}),
    );
    // A failing migration: stopped, state untouched, version unchanged.
    let failing = Script::new(|r| match r["kind"].as_str() {
        Some("migrate") => json!({"ok": false, "error": "migration 3 threw"}),
        _ => json!({"ok": false, "error": "not now"}),
    });
    h.restart();
    open(&mut h, std::slice::from_ref(&v3), failing);
    assert!(stopped(&mut h, "tally")
        .unwrap()
        .contains("migrating state 1 -> 3"));
    assert_eq!(rows(&h, "tally")[0].2, "1");
    // The next revision migrates: one call from 1 to 3, then never again.
    let log = order.clone();
    let migrate = Script::new(move |r| {
        if r["kind"] != "migrate" {
            return json!({"ok": true});
        }
        log.borrow_mut()
            .push((r["event"]["from"].clone(), r["event"]["to"].clone()));
        ok(json!([{"collection": "count", "key": "", "value": {"n": count_of(r) + 100}}]))
    });
    let mut v3b = v3.clone();
    merge(&mut v3b, json!({"version": "0.1.1"}));
    h.restart();
    open(&mut h, &[v3b.clone()], migrate.clone());
    assert_eq!(*order.borrow(), vec![(json!(1), json!(3))]);
    assert!(stopped(&mut h, "tally").is_none());
    assert_eq!(rows(&h, "tally")[0].2, r#"{"n":101}"#);
    h.restart();
    open(&mut h, &[v3b], migrate);
    assert_eq!(order.borrow().len(), 1, "a migration runs once");
    // A definition older than the stored state refuses to run.
    h.restart();
    open(
        &mut h,
        &[manifest("tally", json!({"version": "0.2.0"}))],
        tally(),
    );
    assert!(stopped(&mut h, "tally")
        .unwrap()
        .contains("newer than this definition"));
}

/// A timer `nudge` a second after the command that sets it, for Session
/// `to`, whose hook counts and sends the payload's text there.
fn nudger(to: &'static str) -> Script {
    Script::new(
        move |r| match (r["kind"].as_str().unwrap(), r["event"]["name"].as_str()) {
            ("command", _) => json!({"ok": true, "timers": [
                {"name": "nudge", "at": r["now"].as_i64().unwrap() + 1000, "sessionId": to, "payload": {"text": "still there?"}}
            ]}),
            ("timer", Some("nudge")) => json!({"ok": true,
            "writes": [{"collection": "count", "key": "", "value": count_of(r) + 1}],
            "sends": [{"sessionId": r["event"]["sessionId"], "text": r["event"]["payload"]["text"]}]}),
            _ => json!({"ok": false, "error": "unexpected"}),
        },
    )
}

#[test]
fn a_timer_survives_a_reopen_fires_once_and_may_send_a_prompt() {
    let mut h = Harness::new();
    let host = nudger("s");
    open(
        &mut h,
        &[manifest("tally", json!({"hooks": {"settled": false}}))],
        host.clone(),
    );
    h.session("s");
    let set = with_ext(&mut h, |e, ctx| {
        e.command(
            ctx,
            &ExtensionSends,
            Invocation {
                extension: "tally",
                command: "bump",
                session_id: Some("s"),
                request_id: Some("t1"),
                input: json!({"by": 1}),
            },
        )
    })
    .unwrap();
    assert_eq!(set.result, Value::Null);
    let due = h.now_ms + 1000;
    // Restart: the timer is durable.
    h.restart();
    open(
        &mut h,
        &[manifest("tally", json!({"hooks": {"settled": false}}))],
        host,
    );
    let deadline = with_ext(&mut h, |e, ctx| e.next_deadline(ctx.store, ctx.now_ms)).unwrap();
    assert!(
        deadline.is_some_and(|d| (due - 5..=due).contains(&d)),
        "{deadline:?} vs {due}"
    );
    let early = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert_eq!(early.timers, 0);
    h.now_ms = due + 10;
    let fired = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert_eq!(fired.timers, 1);
    assert_eq!(fired.sent.len(), 1);
    assert_eq!(fired.sent[0].session_id, "s");
    let again = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert_eq!(again.timers, 0, "a timer fires once");
    assert_eq!(rows(&h, "tally")[0].2, "1");
    let read = h.call("GET", "/sessions/s", Value::Null);
    let texts: Vec<&str> = read.json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["text"].as_str())
        .collect();
    assert_eq!(texts, vec!["still there?"]);
}

#[test]
fn commands_replay_by_request_id_and_refuse_by_name() {
    let mut h = Harness::new();
    let host = tally();
    open(
        &mut h,
        &[manifest("tally", json!({"hooks": {"settled": false}}))],
        host.clone(),
    );
    h.session("s");
    let run = |h: &mut Harness,
               command: &'static str,
               session: Option<&'static str>,
               request: Option<&'static str>,
               input: Value| {
        with_ext(h, |e, ctx| {
            e.command(
                ctx,
                &ExtensionSends,
                Invocation {
                    extension: "tally",
                    command,
                    session_id: session,
                    request_id: request,
                    input,
                },
            )
        })
    };
    let a = run(&mut h, "bump", Some("s"), Some("q1"), json!({"by": 2})).unwrap();
    assert_eq!(a.result, json!({"count": 2}));
    // Same id, same input: the stored result; the handler does not run again.
    let b = run(&mut h, "bump", Some("s"), Some("q1"), json!({"by": 2})).unwrap();
    assert_eq!(b.result, json!({"count": 2}));
    assert_eq!(rows(&h, "tally")[0].2, "2");
    let code = |e: ApiError| (e.status(), e.code(), e.to_string());
    let e = code(run(&mut h, "bump", Some("s"), Some("q1"), json!({"by": 3})).unwrap_err());
    assert_eq!(e.1, "request_conflict");
    let e = code(run(&mut h, "bump", Some("s"), None, json!({"by": "x"})).unwrap_err());
    assert_eq!((e.0, e.1), (400, "invalid_request"));
    assert!(e.2.contains("tally.bump") && e.2.contains("/by"), "{}", e.2);
    let e = code(run(&mut h, "nope", Some("s"), None, json!({})).unwrap_err());
    assert_eq!(e.1, "extension_command_not_found");
    let e = code(run(&mut h, "bump", None, None, json!({"by": 1})).unwrap_err());
    assert!(e.2.contains("runs in a Session"), "{}", e.2);
    let e = code(run(&mut h, "bump", Some("gone"), None, json!({"by": 1})).unwrap_err());
    assert_eq!(e.1, "session_not_found");
    // A handler writing past a bound: 422 naming the extension and bound;
    // nothing kept.
    host.set(|r| {
        let writes: Vec<Value> = (0..1001)
            .map(|i| json!({"collection": "seen", "key": format!("k{i}"), "value": i}))
            .collect();
        let _ = r;
        json!({"ok": true, "writes": writes})
    });
    let e = code(run(&mut h, "bump", Some("s"), None, json!({"by": 1})).unwrap_err());
    assert_eq!((e.0, e.1), (422, "extension_limit"));
    assert!(
        e.2.contains("extension tally") && e.2.contains("at most 1000"),
        "{}",
        e.2
    );
    host.set(
        |_| json!({"ok": true, "writes": [{"collection": "count", "key": "", "value": "text"}]}),
    );
    let e = code(run(&mut h, "bump", Some("s"), None, json!({"by": 1})).unwrap_err());
    assert!(e.2.contains("collection count"), "{}", e.2);
    host.set(|r| {
        let timers: Vec<Value> = (0..65)
            .map(|i| json!({"name": format!("t{i}"), "at": r["now"]}))
            .collect();
        json!({"ok": true, "timers": timers})
    });
    let e = code(run(&mut h, "bump", Some("s"), None, json!({"by": 1})).unwrap_err());
    assert!(e.2.contains("at most 64"), "{}", e.2);
    host.set(|_| json!({"ok": false, "error": "extension tally: the command bump threw: nope"}));
    let e = code(run(&mut h, "bump", Some("s"), None, json!({"by": 1})).unwrap_err());
    assert_eq!((e.0, e.1), (422, "extension_command_failed"));
    assert_eq!(
        rows(&h, "tally")[0].2,
        "2",
        "no refused command wrote anything"
    );
    assert!(
        stopped(&mut h, "tally").is_none(),
        "a failed command does not stop its extension"
    );
}

#[test]
fn every_bound_refuses_by_name_and_keeps_nothing() {
    let mut h = Harness::new();
    let host = tally();
    open(
        &mut h,
        &[manifest("tally", json!({"hooks": {"settled": false}}))],
        host.clone(),
    );
    h.session("s");
    let run = |h: &mut Harness| {
        with_ext(h, |e, ctx| {
            e.command(
                ctx,
                &ExtensionSends,
                Invocation {
                    extension: "tally",
                    command: "bump",
                    session_id: Some("s"),
                    request_id: None,
                    input: json!({"by": 1}),
                },
            )
        })
        .unwrap_err()
        .to_string()
    };
    // A row over 16 KiB.
    host.set(|_| json!({"ok": true, "writes": [{"collection": "seen", "key": "k", "value": "x".repeat(16_385)}]}));
    assert!(run(&mut h).contains("at most 16384"));
    // The whole state over 1 MiB (rows under their own bound).
    host.set(|_| {
        let writes: Vec<Value> = (0..70).map(|i| json!({"collection": "seen", "key": format!("k{i}"), "value": "x".repeat(16_000)})).collect();
        json!({"ok": true, "writes": writes})
    });
    let e = run(&mut h);
    assert!(
        e.contains("state would be") && e.contains("at most 1048576"),
        "{e}"
    );
    // A key over 256 bytes; a document under another key.
    host.set(|_| json!({"ok": true, "writes": [{"collection": "seen", "key": "k".repeat(257), "value": 1}]}));
    assert!(run(&mut h).contains("keys are 1 to 256 bytes"));
    host.set(|_| json!({"ok": true, "writes": [{"collection": "count", "key": "x", "value": 1}]}));
    assert!(run(&mut h).contains("a document has the one key"));
    // Sends: at most 8 per call, one per Session.
    host.set(|_| {
        let sends: Vec<Value> = (0..9)
            .map(|i| json!({"sessionId": format!("s{i}"), "text": "hi"}))
            .collect();
        json!({"ok": true, "sends": sends})
    });
    assert!(run(&mut h).contains("at most 8"));
    host.set(|_| json!({"ok": true, "sends": [{"sessionId": "s", "text": "a"}, {"sessionId": "s", "text": "b"}]}));
    assert!(run(&mut h).contains("at most one per Session"));
    assert!(
        rows(&h, "tally").is_empty(),
        "no refused call wrote anything"
    );
    // A projection over 16 KiB publishes nothing and says why.
    host.set(|_| json!({"ok": true, "value": "x".repeat(16_385)}));
    let entry_ok = with_ext(&mut h, |e, ctx| {
        let entry = e.roster().get("tally").unwrap();
        e.project(ctx.store, entry, Some("s"))
    });
    assert!(entry_ok.unwrap_err().contains("at most 16384"));
}

/// Session `s`'s settled hook sends `text` into `to` (requiring it when
/// `require`); `""` sends an empty text, which no send may.
fn follower(to: &'static str, require: bool) -> Script {
    Script::new(move |r| match r["kind"].as_str() {
        Some("settled") if r["event"]["sessionId"] == "s" => {
            let text = format!("follow up {}", r["event"]["commandId"].as_str().unwrap());
            let text = if to == "empty" { String::new() } else { text };
            json!({"ok": true, "writes": [{"collection": "seen", "key": r["event"]["commandId"], "value": 1}],
                "sends": [{"sessionId": to, "text": text, "requireExistingSession": require}]})
        }
        _ => json!({"ok": true}),
    })
}

fn staged(h: &Harness) -> Vec<(String, String)> {
    shiitake::sql::read(
        h.sql(),
        "SELECT name, session_id FROM shiitake_ext_timers ORDER BY name",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.text(0).unwrap(), r.text(1).unwrap()))
    .collect()
}

fn texts(h: &mut Harness, session: &str) -> Vec<String> {
    let read = h.call("GET", &format!("/sessions/{session}"), Value::Null);
    let mut out: Vec<String> = read.json["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["text"].as_str().map(str::to_owned))
        .collect();
    out.extend(
        read.json["pending"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["text"].as_str().map(str::to_owned)),
    );
    out
}

#[test]
fn a_settled_hooks_send_commits_with_the_settlement_and_the_next_pass_admits_it_once() {
    let mut h = Harness::new();
    open(
        &mut h,
        &[manifest("tally", json!({}))],
        follower("t", false),
    );
    h.session("s");
    let first = settle_one(&mut h, "s", "a");
    // Staged with the settlement and the hook's write, in one commit.
    assert_eq!(staged(&h).len(), 1, "{:?}", staged(&h));
    assert!(staged(&h)[0].0.starts_with("~send:"));
    assert_eq!(staged(&h)[0].1, "t");
    assert_eq!(rows(&h, "tally").len(), 1);
    assert_eq!(stopped(&mut h, "tally"), None);
    let deadline = with_ext(&mut h, |e, ctx| e.next_deadline(ctx.store, ctx.now_ms)).unwrap();
    assert_eq!(deadline, Some(h.now_ms), "a staged send is due at once");
    let fired = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert_eq!(fired.sent.len(), 1);
    assert_eq!(fired.sent[0].session_id, "t", "the Session is created");
    assert!(fired.sent[0].request_id.starts_with("ext:tally:"));
    assert_eq!(texts(&mut h, "t"), vec![format!("follow up {first}")]);
    assert!(staged(&h).is_empty());
    let again = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert!(again.sent.is_empty(), "admitted once");
    assert_eq!(texts(&mut h, "t").len(), 1);
}

#[test]
fn a_settled_hooks_send_to_a_gone_session_it_requires_is_dropped_and_a_bad_one_fails_the_hook() {
    let mut h = Harness::new();
    open(
        &mut h,
        &[manifest("tally", json!({}))],
        follower("gone", true),
    );
    h.session("s");
    settle_one(&mut h, "s", "a");
    assert_eq!(staged(&h).len(), 1);
    let fired = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert!(fired.sent.is_empty());
    assert!(staged(&h).is_empty(), "dropped: nothing is created");
    let gone = h.call("GET", "/sessions/gone", Value::Null);
    assert_eq!(gone.status, 404);
    assert_eq!(stopped(&mut h, "tally"), None);
    // A send no admission could take fails the hook: the settlement
    // commits, the hook's writes and sends do not, the extension stops.
    let mut h = Harness::new();
    open(
        &mut h,
        &[manifest("tally", json!({}))],
        follower("empty", false),
    );
    h.session("s");
    let id = settle_one(&mut h, "s", "a");
    let settlement = h.call(
        "GET",
        &format!("/sessions/s/settlement?commandId={id}"),
        Value::Null,
    );
    assert_eq!(settlement.json["terminal"], "cancelled");
    assert!(staged(&h).is_empty());
    assert!(rows(&h, "tally").is_empty());
    let reason = stopped(&mut h, "tally").unwrap();
    assert!(reason.contains("send: text is 1 to"), "{reason}");
}

#[test]
fn the_http_routes_serve_status_commands_and_the_reads_projections() {
    let mut h = Harness::new();
    open(
        &mut h,
        &[manifest("tally", json!({"hooks": {"settled": false}}))],
        tally(),
    );
    h.session("s");
    let r = h.call(
        "POST",
        "/sessions/s/extensions/tally/commands/bump",
        json!({"requestId": "x", "input": {"by": 4}}),
    );
    assert_eq!(
        (r.status, r.json.clone()),
        (200, json!({"result": {"count": 4}}))
    );
    let r = h.call("GET", "/sessions/s", Value::Null);
    assert_eq!(r.json["extensions"], json!({"tally": {"count": 4}}));
    let r = h.call("GET", "/extensions", Value::Null);
    assert_eq!(r.json["extensions"][0]["id"], "tally");
    assert_eq!(r.json["extensions"][0]["projection"], json!({"count": 4}));
    let r = h.call(
        "POST",
        "/extensions/tally/commands/bump",
        json!({"input": {"by": 1}}),
    );
    assert_eq!(r.status, 400, "a Session command at the Agent route");
    let r = h.call("GET", "/extensions/tally/commands/bump", Value::Null);
    assert_eq!(r.status, 405);
    let r = h.call(
        "POST",
        "/sessions/s/extensions/tally/commands/bump",
        json!({"input": {"by": 1}, "x": 1}),
    );
    assert_eq!(
        (r.status, r.json["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
}

/// A host answering like `js/extensions.mjs` for a send: `bump` sends
/// `text` into `input.to`, requiring an existing Session when
/// `input.require`; a Session the core reports `closed` makes `send`
/// throw, which the command catches (records it) when `input.catch`.
fn sender(calls: Rc<RefCell<Vec<Value>>>) -> Script {
    Script::new(move |r| {
        calls.borrow_mut().push(r.clone());
        let (kind, input) = (r["kind"].as_str().unwrap(), &r["event"]["input"]);
        let (to, require) = match kind {
            "command" => (input["to"].clone(), input["require"].as_bool().unwrap()),
            "timer" => (
                r["event"]["sessionId"].clone(),
                r["event"]["payload"]["require"].as_bool().unwrap(),
            ),
            _ => return json!({"ok": true}),
        };
        let closed = r["closed"].as_array().cloned().unwrap_or_default();
        if require && closed.contains(&to) {
            if kind == "command" && !input["catch"].as_bool().unwrap() {
                return json!({"ok": false, "error": format!("AdmissionError: closed: Session {to}")});
            }
            return json!({"ok": true, "writes": [{"collection": "seen", "key": "closed", "value": to}]});
        }
        let mut answer = json!({"ok": true, "sends": [{"sessionId": to, "text": "hello", "requireExistingSession": require}]});
        if kind == "command" && input["arm"].as_bool() == Some(true) {
            answer["timers"] = json!([{"name": "later", "at": r["now"].as_i64().unwrap() + 1000,
                "sessionId": to, "payload": {"require": require}}]);
            answer["sends"] = json!([]);
        }
        answer
    })
}

/// A harness running [`sender`] as `tally`, with Session `s`; the calls.
fn sending() -> (Harness, Rc<RefCell<Vec<Value>>>) {
    let mut h = Harness::new();
    let calls = Rc::new(RefCell::new(Vec::new()));
    let m = manifest(
        "tally",
        json!({"hooks": {"settled": false}, "commands": {"bump": {"inputSchema": null, "validate": false}}}),
    );
    open(&mut h, &[m], sender(calls.clone()));
    h.session("s");
    (h, calls)
}

#[test]
fn send_creates_the_session_unless_it_requires_an_existing_one_and_closed_is_catchable() {
    let (mut h, calls) = sending();
    let bump = |h: &mut Harness, rid: &str, input: Value| {
        with_ext(h, |e, ctx| {
            e.command(
                ctx,
                &ExtensionSends,
                Invocation {
                    extension: "tally",
                    command: "bump",
                    session_id: Some("s"),
                    request_id: Some(rid),
                    input,
                },
            )
        })
    };
    let exists = |h: &mut Harness, id: &str| {
        h.call("GET", &format!("/sessions/{id}"), Value::Null)
            .status
            == 200
    };

    // Without the condition the addressed Session is created.
    let done = bump(
        &mut h,
        "c1",
        json!({"to": "fresh", "require": false, "catch": false}),
    )
    .unwrap();
    assert_eq!(done.sent.len(), 1);
    assert!(exists(&mut h, "fresh"));
    let commands = |calls: &RefCell<Vec<Value>>| -> Vec<Value> {
        calls
            .borrow()
            .iter()
            .filter(|c| c["kind"] == "command")
            .cloned()
            .collect()
    };
    assert_eq!(commands(&calls).len(), 1);

    // With it, an absent Session is refused `closed` and not created; the
    // callback runs again knowing it, and catches.
    calls.borrow_mut().clear();
    let done = bump(
        &mut h,
        "c2",
        json!({"to": "absent", "require": true, "catch": true}),
    )
    .unwrap();
    assert!(done.sent.is_empty());
    assert!(!exists(&mut h, "absent"));
    let seen = commands(&calls);
    assert_eq!(
        seen.len(),
        2,
        "one call, then one knowing the Session closed"
    );
    assert!(seen[0].get("closed").is_none());
    assert_eq!(seen[1]["closed"], json!(["absent"]));
    assert!(rows(&h, "tally").contains(&("seen".into(), "closed".into(), "\"absent\"".into())));

    // Uncaught, it fails the command, which writes nothing.
    let before = rows(&h, "tally");
    let e = bump(
        &mut h,
        "c3",
        json!({"to": "absent2", "require": true, "catch": false}),
    )
    .unwrap_err();
    assert_eq!(e.status(), 422, "{e}");
    assert!(
        e.to_string()
            .contains("AdmissionError: closed: Session \"absent2\""),
        "{e}"
    );
    assert!(!exists(&mut h, "absent2"));
    assert_eq!(rows(&h, "tally"), before);

    // An existing Session is admitted into either way.
    let done = bump(
        &mut h,
        "c4",
        json!({"to": "fresh", "require": true, "catch": false}),
    )
    .unwrap();
    assert_eq!(done.sent.len(), 1);
}

#[test]
fn a_timer_requiring_its_session_does_not_recreate_it_after_deletion() {
    for require in [true, false] {
        let (mut h, _) = sending();
        h.session("doomed");
        with_ext(&mut h, |e, ctx| {
            e.command(
                ctx,
                &ExtensionSends,
                Invocation {
                    extension: "tally",
                    command: "bump",
                    session_id: Some("s"),
                    request_id: Some("arm"),
                    input: json!({"to": "doomed", "require": require, "catch": true, "arm": true}),
                },
            )
        })
        .unwrap();
        assert_eq!(
            h.call("DELETE", "/sessions/doomed", Value::Null).status,
            204
        );
        h.now_ms += 1001;
        let fired = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
        assert_eq!(fired.timers, 1, "require={require}");
        assert_eq!(
            stopped(&mut h, "tally"),
            None,
            "a closed Session does not stop the extension"
        );
        let status = h.call("GET", "/sessions/doomed", Value::Null).status;
        if require {
            assert_eq!(
                status, 404,
                "a deleted Session is never recreated by a timer"
            );
            assert!(fired.sent.is_empty());
        } else {
            assert_eq!(
                status, 200,
                "without the condition the Session is created again"
            );
            assert_eq!(fired.sent.len(), 1);
        }
        let again = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
        assert_eq!(again.timers, 0, "fires once");
    }
}

/// The lean build (no `json-schema` feature) refuses a manifest that asks
/// for validation, naming the feature; one that asks for none is kept.
#[cfg(not(feature = "json-schema"))]
#[test]
fn a_lean_build_refuses_a_validating_manifest_naming_the_feature() {
    let validating = manifest("ext", json!({}));
    let e = Roster::parse(&json!([validating]).to_string())
        .unwrap_err()
        .to_string();
    assert!(e.contains("`json-schema` Cargo feature"), "{e}");
    assert!(
        e.starts_with("extension ext (roster[0]): collection count"),
        "{e}"
    );
    let plain = manifest(
        "ext",
        json!({
            "state": {"collections": {"count": {"validate": false}}},
            "commands": {"bump": {"validate": false}}
        }),
    );
    assert_eq!(roster(&[plain]).entries().len(), 1);
}

/// The history table row of `session` kept by extension `id`, as served.
fn history(h: &mut Harness, session: &str) -> Value {
    h.call("GET", &format!("/sessions/{session}"), Value::Null)
        .json["extensionHistory"]["tally"]
        .clone()
}

#[test]
fn producer_history_commits_with_the_state_change_dedups_and_is_served_beside_the_projection() {
    let mut h = Harness::new();
    let host = tally();
    open(
        &mut h,
        &[manifest("tally", json!({"projection": {"history": true}}))],
        host.clone(),
    );
    h.session("s");
    h.session("t");
    assert_eq!(history(&mut h, "s"), json!({"events": [], "omitted": 0}));
    let bump = |h: &mut Harness, session: &str, by: i64| {
        h.call(
            "POST",
            &format!("/sessions/{session}/extensions/tally/commands/bump"),
            json!({"input": {"by": by}}),
        )
    };
    assert_eq!(bump(&mut h, "s", 2).status, 200);
    // A settled hook's change is recorded in the settling transaction.
    settle_one(&mut h, "s", "r1");
    let got = history(&mut h, "s");
    let values: Vec<&Value> = got["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["value"])
        .collect();
    assert_eq!(values, vec![&json!({"count": 2}), &json!({"count": 3})]);
    assert_eq!(got["events"][0]["sequence"], 1);
    assert_eq!(got["events"][1]["sequence"], 2);
    assert_eq!(got["omitted"], 0);
    // Another Session's history is its own.
    assert_eq!(history(&mut h, "t"), json!({"events": [], "omitted": 0}));

    // A state write that leaves the projection as it was records nothing.
    host.set(|r| match r["kind"].as_str().unwrap() {
        "command" => ok(json!([{"collection": "seen", "key": "x", "value": 1}])),
        "project" => json!({"ok": true, "value": {"count": count_of(r)}}),
        _ => json!({"ok": false, "error": "no"}),
    });
    assert_eq!(bump(&mut h, "s", 0).status, 200);
    assert_eq!(history(&mut h, "s")["events"].as_array().unwrap().len(), 2);

    // A command that fails (a bound) keeps neither its write nor an event.
    host.set(|r| match r["kind"].as_str().unwrap() {
        "command" => ok(json!([{"collection": "count", "key": "", "value": "not an integer"}])),
        "project" => json!({"ok": true, "value": {"count": 99}}),
        _ => json!({"ok": false, "error": "no"}),
    });
    assert_eq!(bump(&mut h, "s", 1).status, 422);
    // A projection that throws inside the owner transaction fails the call:
    // nothing is kept.
    host.set(|r| match r["kind"].as_str().unwrap() {
        "command" => ok(json!([{"collection": "count", "key": "", "value": 50}])),
        _ => json!({"ok": false, "error": "extension tally: the session projection threw: no"}),
    });
    let r = bump(&mut h, "s", 1);
    assert_eq!(r.status, 422, "{}", r.json);
    // A settled hook that throws: the settlement commits, no event does.
    host.set(|r| match r["kind"].as_str().unwrap() {
        "settled" => json!({"ok": false, "error": "extension tally: the settled hook threw: boom"}),
        "project" => json!({"ok": true, "value": {"count": 1000}}),
        _ => json!({"ok": false, "error": "no"}),
    });
    settle_one(&mut h, "s", "r2");
    assert!(stopped(&mut h, "tally").is_some());
    let kept = history(&mut h, "s");
    assert_eq!(kept["events"].as_array().unwrap().len(), 2, "{kept}");
    assert_eq!(
        rows(&h, "tally")[0],
        ("count".into(), "".into(), "3".into())
    );
}

#[test]
fn producer_history_keeps_the_newest_32_events_and_counts_the_omitted() {
    let mut h = Harness::new();
    open(
        &mut h,
        &[manifest(
            "tally",
            json!({"projection": {"history": true}, "hooks": {"settled": false}}),
        )],
        tally(),
    );
    h.session("s");
    for _ in 0..32 {
        let r = h.call(
            "POST",
            "/sessions/s/extensions/tally/commands/bump",
            json!({"input": {"by": 1}}),
        );
        assert_eq!(r.status, 200);
    }
    let at_limit = history(&mut h, "s");
    assert_eq!(
        (
            at_limit["events"].as_array().unwrap().len(),
            at_limit["omitted"].as_u64()
        ),
        (32, Some(0))
    );
    h.call(
        "POST",
        "/sessions/s/extensions/tally/commands/bump",
        json!({"input": {"by": 1}}),
    );
    let past = history(&mut h, "s");
    let events = past["events"].as_array().unwrap();
    assert_eq!((events.len(), past["omitted"].as_u64()), (32, Some(1)));
    assert_eq!(events[0]["sequence"], 2);
    assert_eq!(events[31]["sequence"], 33);
    assert_eq!(events[31]["value"], json!({"count": 33}));
}

#[test]
fn the_status_advertises_the_command_catalog() {
    let mut h = Harness::new();
    open(&mut h, &[manifest("tally", json!({}))], tally());
    let r = h.call("GET", "/extensions/tally", Value::Null);
    assert_eq!(
        r.json["commands"],
        json!([
            {"name": "agent", "scope": "agent", "description": null},
            {"name": "bump", "scope": "session", "description": null}
        ])
    );
}

#[test]
fn a_replay_across_sessions_records_each_sessions_history_in_one_transition() {
    let mut h = Harness::new();
    let host = tally();
    open(
        &mut h,
        &[manifest("tally", json!({"projection": {"history": true}}))],
        host.clone(),
    );
    h.session("s");
    h.session("t");
    host.set(|_| json!({"ok": false, "error": "down"}));
    settle_one(&mut h, "s", "a");
    assert!(stopped(&mut h, "tally").is_some());
    settle_one(&mut h, "t", "b");
    settle_one(&mut h, "s", "c");
    host.set({
        let inner = tally();
        move |r| serde_json::from_str(&inner.call(&r.to_string())).unwrap()
    });
    with_ext(&mut h, |e, ctx| e.resume(ctx, "tally")).unwrap();
    // One transition replays the three settlements of two Sessions.
    assert!(!with_ext(&mut h, |e, ctx| e.catch_up(ctx)).unwrap());
    let of = |h: &mut Harness, s: &str| -> Vec<Value> {
        history(h, s)["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["value"].clone())
            .collect()
    };
    assert_eq!(
        of(&mut h, "s"),
        vec![json!({"count": 1}), json!({"count": 3})]
    );
    assert_eq!(of(&mut h, "t"), vec![json!({"count": 2})]);
}

#[test]
fn two_extensions_record_history_in_one_settling_transition_and_it_goes_with_the_session() {
    let mut h = Harness::new();
    let history_on = json!({"projection": {"history": true}});
    open(
        &mut h,
        &[
            manifest("tally", history_on.clone()),
            manifest("other", history_on),
        ],
        tally(),
    );
    h.session("s");
    settle_one(&mut h, "s", "r1");
    let read = h.call("GET", "/sessions/s", Value::Null).json;
    for id in ["tally", "other"] {
        let events = &read["extensionHistory"][id]["events"];
        assert_eq!(events.as_array().unwrap().len(), 1, "{id}: {read}");
        assert_eq!(events[0]["value"], json!({"count": 1}));
    }
    let kept = |h: &Harness| {
        shiitake::sql::read(h.sql(), "SELECT count(*) FROM shiitake_ext_history", &[]).unwrap()[0]
            .int(0)
            .unwrap()
    };
    assert_eq!(kept(&h), 2);
    assert_eq!(h.call("DELETE", "/sessions/s", Value::Null).status, 204);
    assert_eq!(kept(&h), 0, "the Session's history was deleted with it");
    // A Session created again under the same id starts a new history.
    h.session("s");
    assert_eq!(
        h.call("GET", "/sessions/s", Value::Null).json["extensionHistory"]["tally"],
        json!({"events": [], "omitted": 0})
    );
}

#[test]
fn activate_runs_when_the_instance_opens_a_running_extension_and_a_throwing_one_stops_it() {
    let calls: Rc<RefCell<Vec<String>>> = Rc::default();
    let fails = Rc::new(RefCell::new(true));
    let host = {
        let (calls, fails) = (calls.clone(), fails.clone());
        Script::new(move |r| {
            let kind = r["kind"].as_str().unwrap();
            if kind == "activate" {
                calls
                    .borrow_mut()
                    .push(r["event"]["revision"].as_str().unwrap().to_owned());
                if *fails.borrow() {
                    return json!({"ok": false, "error": "extension lamp: the activate callback threw: no bulb"});
                }
            }
            json!({"ok": true})
        })
    };
    let lamp = manifest(
        "lamp",
        json!({"hooks": {"settled": false, "timer": false, "activate": true}}),
    );
    let plain = manifest(
        "plain",
        json!({"hooks": {"settled": false, "timer": false}}),
    );
    let mut h = Harness::new();
    open(&mut h, &[lamp.clone(), plain.clone()], host.clone());
    // Called once, with its revision; the extension without one is not.
    let revision = roster(std::slice::from_ref(&lamp))
        .get("lamp")
        .unwrap()
        .revision
        .clone();
    assert_eq!(*calls.borrow(), vec![revision.clone()]);
    let reason = stopped(&mut h, "lamp").expect("a throwing activate stops its extension");
    assert!(reason.contains("no bulb"), "{reason}");
    assert_eq!(stopped(&mut h, "plain"), None);
    // A stopped extension is not activated when the next instance opens.
    open(&mut h, &[lamp.clone(), plain.clone()], host.clone());
    assert_eq!(calls.borrow().len(), 1);
    // Resumed, it is activated again; now it comes up.
    *fails.borrow_mut() = false;
    with_ext(&mut h, |e, ctx| e.resume(ctx, "lamp")).unwrap();
    assert_eq!(calls.borrow().len(), 2);
    assert_eq!(stopped(&mut h, "lamp"), None);
    // Each instance activates it once; a new revision, with its own.
    open(&mut h, &[lamp.clone(), plain.clone()], host.clone());
    let v2 = manifest(
        "lamp",
        json!({"version": "2.0.0", "hooks": {"settled": false, "timer": false, "activate": true}}),
    );
    open(&mut h, &[v2.clone(), plain], host);
    let v2_revision = roster(&[v2]).get("lamp").unwrap().revision.clone();
    assert_ne!(v2_revision, revision);
    assert_eq!(
        *calls.borrow(),
        vec![revision.clone(), revision.clone(), revision, v2_revision]
    );
}

#[test]
fn a_staged_send_the_queue_refuses_stops_its_extension_and_waits_for_the_resume() {
    let mut h = Harness::new();
    open(
        &mut h,
        &[manifest("tally", json!({}))],
        follower("t", false),
    );
    h.session("s");
    h.session("t");
    // `t`'s queue full: one prompt running, the bound pending behind it.
    for i in 0..=shiitake::limits::PENDING_PER_SESSION_MAX {
        let r = h.call(
            "POST",
            "/sessions/t/commands",
            json!({"type": "prompt", "requestId": format!("fill{i}"), "text": "x"}),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    settle_one(&mut h, "s", "a");
    assert_eq!(staged(&h).len(), 1);
    let fired = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert!(fired.sent.is_empty());
    let reason = stopped(&mut h, "tally").expect("stopped");
    assert!(
        reason.contains("settled hook: send into Session t") && reason.contains("pending commands"),
        "{reason}"
    );
    assert_eq!(staged(&h).len(), 1, "kept for after the resume");
    let deadline = with_ext(&mut h, |e, ctx| e.next_deadline(ctx.store, ctx.now_ms)).unwrap();
    assert_eq!(deadline, None, "a stopped extension's send rides no alarm");
    // Room again, and resumed: admitted once.
    let r = h.call("DELETE", "/sessions/t", Value::Null);
    assert!(r.status < 300, "{}", r.json);
    with_ext(&mut h, |e, ctx| e.resume(ctx, "tally")).unwrap();
    let fired = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert_eq!(fired.sent.len(), 1);
    assert!(staged(&h).is_empty());
}

#[test]
fn a_resumed_extension_replays_a_missed_settlement_and_stages_its_send_once() {
    let mut h = Harness::new();
    let host = follower("t", false);
    open(&mut h, &[manifest("tally", json!({}))], host.clone());
    h.session("s");
    host.set(|_| json!({"ok": false, "error": "extension tally: down"}));
    settle_one(&mut h, "s", "a");
    assert!(stopped(&mut h, "tally").is_some());
    let missed = settle_one(&mut h, "s", "b");
    assert!(staged(&h).is_empty());
    let again = follower("t", false);
    host.set(move |r| {
        let answer = again.call(&r.to_string());
        serde_json::from_str(&answer).unwrap()
    });
    with_ext(&mut h, |e, ctx| e.resume(ctx, "tally")).unwrap();
    // The replay runs both settlements' hooks: each stages its send.
    assert!(!with_ext(&mut h, |e, ctx| e.catch_up(ctx)).unwrap());
    assert_eq!(staged(&h).len(), 2);
    let fired = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert_eq!(fired.sent.len(), 2);
    let texts = texts(&mut h, "t");
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(texts.contains(&format!("follow up {missed}")), "{texts:?}");
    let fired = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert!(fired.sent.is_empty());
}

/// A timer hook's send the admission refuses at its write (a full queue)
/// fails the hook: its extension stops, its writes roll back, and the
/// timer waits for the resume instead of failing every pass.
#[test]
fn a_timer_hooks_send_into_a_full_queue_stops_its_extension() {
    let mut h = Harness::new();
    let host = nudger("t");
    open(
        &mut h,
        &[manifest("tally", json!({"hooks": {"settled": false}}))],
        host,
    );
    h.session("t");
    with_ext(&mut h, |e, ctx| {
        e.command(
            ctx,
            &ExtensionSends,
            Invocation {
                extension: "tally",
                command: "bump",
                session_id: Some("t"),
                request_id: Some("t1"),
                input: json!({"by": 1}),
            },
        )
    })
    .unwrap();
    for i in 0..=shiitake::limits::PENDING_PER_SESSION_MAX {
        let r = h.call(
            "POST",
            "/sessions/t/commands",
            json!({"type": "prompt", "requestId": format!("fill{i}"), "text": "x"}),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    h.now_ms += 2_000;
    let fired = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert!(fired.sent.is_empty());
    let reason = stopped(&mut h, "tally").expect("stopped");
    assert!(
        reason.contains("timer nudge: send") && reason.contains("pending commands"),
        "{reason}"
    );
    assert!(
        rows(&h, "tally").is_empty(),
        "the hook's writes rolled back"
    );
    let again = with_ext(&mut h, |e, ctx| e.fire_due(ctx, &ExtensionSends)).unwrap();
    assert_eq!(again.timers, 0, "a stopped extension's timer waits");
}
