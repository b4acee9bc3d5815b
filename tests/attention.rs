//! Attention over real SQLite (seed: "Extensions and authority"):
//! `context.attention.set/clear` in commands, settled and timer hooks, each
//! bound (summary, per Session, per owner, the grant), replacement, clearing
//! (idempotent, also after the Session is deleted), deletion releasing
//! capacity, the delivery outbox entries, and the inbox (order, paging,
//! stopped owners and owners without a current grant). The authored
//! callbacks are Rust closures speaking the protocol of `js/extensions.mjs`.

mod common;

use common::{Harness, Reply};
use serde_json::{json, Value};
use shiitake::extension::{Extensions, Host, Roster};
use shiitake::session::admission::ExtensionSends;
use std::cell::RefCell;
use std::rc::Rc;

type Handler = Box<dyn FnMut(&Value) -> Value>;

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

/// A manifest as `js/extensions.mjs` makes it: an Agent-scope command `act`
/// and a Session-scope `here` whose input carries the answer's attention
/// ops, settled and timer hooks; `grants` from the roster entry.
fn manifest(id: &str, grants: &[&str]) -> Value {
    json!({
        "id": id, "version": "0.0.0",
        "config": null, "configSchema": null, "configValidate": false,
        "state": {"version": 1, "collections": {
            "n": {"document": true, "schema": null, "validate": false}
        }},
        "migrations": [],
        "commands": {
            "act": {"scope": "agent", "inputSchema": null, "validate": false, "description": null},
            "here": {"scope": "session", "inputSchema": null, "validate": false, "description": null}
        },
        "hooks": {"settled": true, "timer": true},
        "projection": {"session": false, "agent": false},
        "prompt": false, "tools": false,
        "requests": {"attention": true},
        "grants": grants,
        "grantKey": id, "feature": null
    })
}

fn roster(manifests: &[Value]) -> Roster {
    Roster::parse(&Value::Array(manifests.to_vec()).to_string()).unwrap()
}

/// Commands answer the ops of their input (and `writes`, `timers` if
/// given); hooks answer nothing unless a test sets the script.
fn acting() -> Script {
    Script::new(acts)
}

fn acts(r: &Value) -> Value {
    match r["kind"].as_str().unwrap() {
        "command" => json!({
            "ok": true,
            "attention": r["event"]["input"]["ops"].clone(),
            "writes": r["event"]["input"].get("writes").cloned().unwrap_or(json!([])),
            "timers": r["event"]["input"].get("timers").cloned().unwrap_or(json!([])),
            "result": null
        }),
        _ => json!({"ok": true}),
    }
}

/// Two granted extensions `a` and `b`, and `plain`, which requests
/// attention but is not granted it.
fn setup(host: Script) -> Harness {
    let mut h = Harness::new();
    open(&mut h, grants_for(true), host);
    h
}

fn grants_for(granted: bool) -> Vec<Value> {
    let g: &[&str] = if granted { &["attention"] } else { &[] };
    vec![
        manifest("a", g),
        manifest("b", &["attention"]),
        manifest("plain", &[]),
    ]
}

fn open(h: &mut Harness, manifests: Vec<Value>, host: Script) {
    h.extensions = Some(Extensions::new(roster(&manifests), Box::new(host)));
    h.with_ext(|e, ctx| e.open(ctx)).unwrap();
}

fn item(id: &str, summary: &str) -> Value {
    json!({"id": id, "kind": "review", "summary": summary, "since": 1_700_000_000_000i64})
}

fn set(session: &str, item: Value) -> Value {
    json!({"op": "set", "sessionId": session, "item": item})
}

fn clear(session: &str, id: &str) -> Value {
    json!({"op": "clear", "sessionId": session, "id": id})
}

/// Runs `ext`'s Agent-scope command answering `ops`.
fn act(h: &mut Harness, ext: &str, ops: Vec<Value>) -> Reply {
    h.call(
        "POST",
        &format!("/extensions/{ext}/commands/act"),
        json!({"input": {"ops": ops}}),
    )
}

fn ok(r: Reply) -> Reply {
    assert_eq!(r.status, 200, "{}", r.json);
    r
}

fn refused(r: &Reply, code: &str, needles: &[&str]) {
    assert_eq!(r.status, 422, "{}", r.json);
    assert_eq!(r.json["error"]["code"], code, "{}", r.json);
    let message = r.json["error"]["message"].as_str().unwrap();
    for n in needles {
        assert!(message.contains(n), "{message:?} names {n:?}");
    }
}

/// Stored items `(session, ext, id)` (none without the table).
fn stored(h: &Harness) -> Vec<(String, String, String)> {
    if !shiitake::store::schema::ATTENTION.exists(h.sql()) {
        return Vec::new();
    }
    shiitake::sql::read(
        h.sql(),
        "SELECT session_id, ext, id FROM shiitake_attention ORDER BY session_id, ext, id",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.text(0).unwrap(), r.text(1).unwrap(), r.text(2).unwrap()))
    .collect()
}

fn outbox(h: &Harness) -> Vec<(String, Value)> {
    shiitake::delivery::pending(h.sql(), 100_000)
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.body))
        .collect()
}

fn read_attention(h: &mut Harness, session: &str) -> Vec<Value> {
    let r = ok(h.read(session, ""));
    r.json["attention"].as_array().unwrap().clone()
}

fn inbox(h: &mut Harness, query: &str) -> Reply {
    h.call("GET", &format!("/inbox{query}"), Value::Null)
}

#[test]
fn a_command_sets_and_clears_items_that_every_read_qualifies_and_the_outbox_stages() {
    let mut h = setup(acting());
    h.session("s");
    ok(act(&mut h, "a", vec![set("s", item("x", "look at x"))]));
    let mut with_expiry = item("y", "look at y");
    with_expiry["expiresAt"] = json!(1_700_000_600_000i64);
    ok(act(&mut h, "b", vec![set("s", with_expiry)]));
    assert_eq!(
        stored(&h),
        [
            ("s".into(), "a".into(), "x".into()),
            ("s".into(), "b".into(), "y".into())
        ]
    );
    let items = read_attention(&mut h, "s");
    assert_eq!(items.len(), 2);
    assert!(items.contains(&json!({
        "extensionId": "a", "id": "x", "kind": "review", "summary": "look at x",
        "since": 1_700_000_000_000i64
    })));
    assert!(items.contains(&json!({
        "extensionId": "b", "id": "y", "kind": "review", "summary": "look at y",
        "since": 1_700_000_000_000i64, "expiresAt": 1_700_000_600_000i64
    })));
    // The outbox: one entry per change, keyed by owner, Session and id.
    assert_eq!(
        outbox(&h),
        [
            (
                "attention:a:s:x".into(),
                json!({"type": "attention", "op": "set", "extensionId": "a", "sessionId": "s", "id": "x",
                       "item": {"extensionId": "a", "id": "x", "kind": "review", "summary": "look at x", "since": 1_700_000_000_000i64}})
            ),
            (
                "attention:b:s:y".into(),
                json!({"type": "attention", "op": "set", "extensionId": "b", "sessionId": "s", "id": "y",
                       "item": {"extensionId": "b", "id": "y", "kind": "review", "summary": "look at y",
                                "since": 1_700_000_000_000i64, "expiresAt": 1_700_000_600_000i64}})
            ),
        ]
    );
    // A clear replaces the undelivered set of the same key.
    ok(act(&mut h, "a", vec![clear("s", "x")]));
    assert_eq!(stored(&h), [("s".into(), "b".into(), "y".into())]);
    let entries = outbox(&h);
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1].0, "attention:a:s:x");
    assert_eq!(
        entries[1].1,
        json!({"type": "attention", "op": "clear", "extensionId": "a", "sessionId": "s", "id": "x", "item": null})
    );
    // Published after commit: the touched items, for the host's frames.
    let touched = h.with_ext(|e, _| e.take_attention_touched());
    let touched: Vec<_> = touched
        .iter()
        .map(|t| (t.session_id.as_str(), t.extension.as_str(), t.id.as_str()))
        .collect();
    assert_eq!(touched, [("s", "a", "x"), ("s", "b", "y")]);
    // A Session-scope command sets in its own Session too.
    let r = h.call(
        "POST",
        "/sessions/s/extensions/a/commands/here",
        json!({"input": {"ops": [set("s", item("z", "here"))]}}),
    );
    ok(r);
    assert_eq!(read_attention(&mut h, "s").len(), 2);
}

#[test]
fn the_summary_is_at_most_200_characters_and_items_are_closed_and_bounded() {
    let mut h = setup(acting());
    h.session("s");
    // 200 characters of two bytes each: characters, not bytes, count.
    ok(act(
        &mut h,
        "a",
        vec![set("s", item("x", &"é".repeat(200)))],
    ));
    let r = act(&mut h, "a", vec![set("s", item("y", &"é".repeat(201)))]);
    refused(&r, "extension_limit", &["summary", "201", "200"]);
    let r = act(&mut h, "a", vec![set("s", item("y", ""))]);
    refused(&r, "extension_limit", &["summary"]);
    let mut bad_kind = item("y", "s");
    bad_kind["kind"] = json!("Review!");
    refused(
        &act(&mut h, "a", vec![set("s", bad_kind)]),
        "extension_limit",
        &["kind", "64"],
    );
    refused(
        &act(&mut h, "a", vec![set("s", item(&"i".repeat(129), "s"))]),
        "extension_limit",
        &["id", "128"],
    );
    ok(act(
        &mut h,
        "a",
        vec![set("s", item(&"i".repeat(128), "s"))],
    ));
    let mut fractional = item("y", "s");
    fractional["since"] = json!(1.5);
    refused(
        &act(&mut h, "a", vec![set("s", fractional)]),
        "extension_limit",
        &["since", "integer"],
    );
    // Closed: an unknown field is a malformed answer.
    let mut extra = item("y", "s");
    extra["color"] = json!("red");
    let r = act(&mut h, "a", vec![set("s", extra)]);
    assert_eq!(r.status, 422, "{}", r.json);
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("color"),
        "{}",
        r.json
    );
    // Nothing of a refused command is written.
    assert_eq!(stored(&h).len(), 2);
    assert_eq!(outbox(&h).len(), 2);
}

#[test]
fn a_session_carries_at_most_64_items_across_owners_and_replacing_takes_no_capacity() {
    let mut h = setup(acting());
    h.session("s");
    let ops = |from: usize, to: usize| {
        (from..to)
            .map(|i| set("s", item(&format!("i{i}"), "x")))
            .collect()
    };
    ok(act(&mut h, "a", ops(0, 40)));
    ok(act(&mut h, "b", ops(40, 64)));
    assert_eq!(stored(&h).len(), 64);
    // The 65th, from either owner, is refused naming the bound.
    let r = act(&mut h, "b", vec![set("s", item("more", "x"))]);
    refused(
        &r,
        "extension_limit",
        &["Session s", "65", "at most 64 per Session"],
    );
    refused(&act(&mut h, "a", ops(64, 65)), "extension_limit", &["64"]);
    // Replacing an existing item is not a new one.
    ok(act(&mut h, "a", vec![set("s", item("i0", "updated"))]));
    let items = read_attention(&mut h, "s");
    assert_eq!(items.len(), 64);
    assert!(items
        .iter()
        .any(|i| i["id"] == "i0" && i["extensionId"] == "a" && i["summary"] == "updated"));
    // Clearing releases capacity (and a set after a clear in one call fits).
    ok(act(
        &mut h,
        "b",
        vec![clear("s", "i40"), set("s", item("fresh", "x"))],
    ));
    assert_eq!(stored(&h).len(), 64);
    // Two owners may each hold an item of the same id: qualified apart.
    ok(act(
        &mut h,
        "b",
        vec![clear("s", "fresh"), set("s", item("i0", "b's"))],
    ));
    let i0: Vec<_> = read_attention(&mut h, "s")
        .into_iter()
        .filter(|i| i["id"] == "i0")
        .map(|i| i["extensionId"].clone())
        .collect();
    assert_eq!(i0.len(), 2);
}

#[test]
fn an_owner_retains_at_most_4096_items_and_clearing_or_deleting_releases_them() {
    let mut h = setup(acting());
    for s in 0..65 {
        h.session(&format!("s{s}"));
    }
    for s in 0..64 {
        let ops = (0..64)
            .map(|i| set(&format!("s{s}"), item(&format!("i{i}"), "x")))
            .collect();
        ok(act(&mut h, "a", ops));
    }
    assert_eq!(stored(&h).len(), 4_096);
    let r = act(&mut h, "a", vec![set("s64", item("one", "x"))]);
    refused(&r, "extension_limit", &["4097", "at most 4096"]);
    // Another owner is not limited by a's items.
    ok(act(&mut h, "b", vec![set("s64", item("one", "x"))]));
    // Replacing at the bound is fine; clearing releases one.
    ok(act(&mut h, "a", vec![set("s0", item("i0", "again"))]));
    ok(act(&mut h, "a", vec![clear("s0", "i0")]));
    ok(act(&mut h, "a", vec![set("s64", item("one", "x"))]));
    refused(
        &act(&mut h, "a", vec![set("s64", item("two", "x"))]),
        "extension_limit",
        &["4096"],
    );
    // Deleting a Session releases its items, in the deleting transaction,
    // and stages a clear for each.
    let before = outbox(&h).len();
    let r = h.call("DELETE", "/sessions/s1", Value::Null);
    assert_eq!(r.status, 204, "{}", r.json);
    assert!(stored(&h).iter().all(|(s, _, _)| s != "s1"));
    let entries = outbox(&h);
    let clears: Vec<_> = entries
        .iter()
        .filter(|(k, _)| k.starts_with("attention:a:s1:"))
        .collect();
    assert_eq!(clears.len(), 64);
    assert!(clears
        .iter()
        .all(|(_, b)| b["op"] == "clear" && b["item"].is_null()));
    assert!(
        entries.len() >= before,
        "the s1 sets were replaced by their clears"
    );
    let ops = (0..64)
        .map(|i| set("s64", item(&format!("n{i}"), "x")))
        .collect::<Vec<_>>();
    // s64 holds 2 items already (a's `one`, b's `one`): 62 more fit there.
    ok(act(&mut h, "a", ops[..62].to_vec()));
}

#[test]
fn setting_needs_an_existing_session_and_clearing_an_absent_item_is_idempotent() {
    let mut h = setup(acting());
    let r = act(&mut h, "a", vec![set("nowhere", item("x", "x"))]);
    refused(
        &r,
        "extension_command_failed",
        &["Session nowhere does not exist"],
    );
    assert!(stored(&h).is_empty());
    // Clearing what is not there: no error, no write, no outbox entry.
    ok(act(&mut h, "a", vec![clear("nowhere", "x")]));
    h.session("s");
    ok(act(&mut h, "a", vec![clear("s", "x")]));
    assert!(outbox(&h).is_empty());
    // After the Session is deleted, clearing its item is idempotent too.
    ok(act(&mut h, "a", vec![set("s", item("x", "x"))]));
    assert_eq!(h.call("DELETE", "/sessions/s", Value::Null).status, 204);
    assert!(stored(&h).is_empty());
    let staged = outbox(&h);
    ok(act(&mut h, "a", vec![clear("s", "x")]));
    ok(act(&mut h, "a", vec![clear("s", "x")]));
    assert_eq!(outbox(&h), staged, "no write");
    // A Session created again under the same id starts with none.
    h.session("s");
    assert!(read_attention(&mut h, "s").is_empty());
}

#[test]
fn without_the_grant_attention_is_refused_naming_the_extension_and_the_grant() {
    let mut h = setup(acting());
    h.session("s");
    let r = act(&mut h, "plain", vec![set("s", item("x", "x"))]);
    refused(
        &r,
        "extension_command_failed",
        &["extension plain", "attention grant"],
    );
    assert!(stored(&h).is_empty());
}

#[test]
fn a_hook_that_sets_attention_and_fails_writes_nothing_and_stops() {
    let host = acting();
    let mut h = setup(host.clone());
    h.session("s");
    // A settled hook that sets attention: committed with the settlement.
    host.set(|r| match r["kind"].as_str().unwrap() {
        "settled" if r["ext"] == "a" => json!({"ok": true, "attention": [
            {"op": "set", "sessionId": r["event"]["sessionId"], "item":
                {"id": r["event"]["commandId"], "kind": "settled", "summary": "a turn ended", "since": r["now"]}}
        ]}),
        _ => acts(r),
    });
    let first = settle_one(&mut h, "s", "r1");
    assert_eq!(stored(&h), [("s".into(), "a".into(), first.clone())]);
    // Two hooks of one settling transition, each seeing the other's items:
    // a sets in s, b in s and in another Session (reads after a's writes).
    h.session("t");
    host.set(|r| match r["kind"].as_str().unwrap() {
        "settled" => {
            let sid = r["event"]["sessionId"].clone();
            let mut ops = vec![json!({"op": "set", "sessionId": sid, "item":
                {"id": "both", "kind": "settled", "summary": "x", "since": 1}})];
            if r["ext"] == "b" {
                ops.push(json!({"op": "set", "sessionId": "t", "item":
                    {"id": "both", "kind": "settled", "summary": "x", "since": 1}}));
            }
            json!({"ok": true, "attention": ops})
        }
        _ => acts(r),
    });
    settle_one(&mut h, "s", "r0");
    assert_eq!(
        stored(&h),
        [
            ("s".into(), "a".into(), "both".into()),
            ("s".into(), "a".into(), first.clone()),
            ("s".into(), "b".into(), "both".into()),
            ("t".into(), "b".into(), "both".into()),
        ]
    );
    ok(act(&mut h, "a", vec![clear("s", "both")]));
    ok(act(
        &mut h,
        "b",
        vec![clear("s", "both"), clear("t", "both")],
    ));
    // The same hook with an invalid row beside the attention: the hook
    // fails at the bound; nothing of it is written, the extension stops.
    host.set(|r| match r["kind"].as_str().unwrap() {
        "settled" if r["ext"] == "a" => json!({"ok": true,
            "writes": [{"collection": "undeclared", "key": "", "value": 1}],
            "attention": [{"op": "set", "sessionId": r["event"]["sessionId"], "item":
                {"id": "second", "kind": "settled", "summary": "x", "since": 1}}]}),
        _ => acts(r),
    });
    let before = outbox(&h);
    settle_one(&mut h, "s", "r2");
    assert_eq!(stored(&h), [("s".into(), "a".into(), first)]);
    assert_eq!(outbox(&h), before);
    let status = h.with_ext(|e, ctx| e.status(ctx.store, "a")).unwrap();
    assert!(status.stopped.unwrap().reason.contains("undeclared"));
    // A hook past a capacity bound fails the same way.
    let mut h = setup(host.clone());
    h.session("s");
    let ops = (0..64)
        .map(|i| set("s", item(&format!("i{i}"), "x")))
        .collect();
    ok(act(&mut h, "b", ops));
    host.set(|r| match r["kind"].as_str().unwrap() {
        "settled" if r["ext"] == "a" => json!({"ok": true, "attention": [
            {"op": "set", "sessionId": "s", "item": {"id": "over", "kind": "k", "summary": "x", "since": 1}}]}),
        _ => acts(r),
    });
    settle_one(&mut h, "s", "r1");
    let status = h.with_ext(|e, ctx| e.status(ctx.store, "a")).unwrap();
    assert!(status
        .stopped
        .unwrap()
        .reason
        .contains("at most 64 per Session"));
    assert_eq!(stored(&h).len(), 64);
}

#[test]
fn a_timer_hook_clears_the_item_its_command_set() {
    let host = acting();
    let mut h = setup(host.clone());
    h.session("s");
    let r = h.call(
        "POST",
        "/extensions/a/commands/act",
        json!({"input": {
            "ops": [set("s", {
                let mut i = item("x", "expires soon");
                i["expiresAt"] = json!(5_000);
                i
            })],
            "timers": [{"name": "expire-x", "at": 5_000, "sessionId": "s"}]
        }}),
    );
    ok(r);
    host.set(|r| match r["kind"].as_str().unwrap() {
        "timer" => json!({"ok": true, "attention": [{"op": "clear", "sessionId": "s", "id": "x"}]}),
        _ => acts(r),
    });
    // Expiry is display metadata: past it, the item is still open.
    h.now_ms = 6_000;
    assert_eq!(read_attention(&mut h, "s").len(), 1);
    let timers =
        shiitake::sql::read(h.sql(), "SELECT name, due_at FROM shiitake_ext_timers", &[]).unwrap();
    assert_eq!(timers.len(), 1);
    let fired = h
        .with_ext(|e, ctx| e.fire_due(ctx, &ExtensionSends))
        .unwrap();
    assert_eq!(fired.timers, 1);
    assert!(stored(&h).is_empty());
    // A restart keeps pending attention: it is rows.
    ok(act(&mut h, "a", vec![set("s", item("kept", "x"))]));
    h.restart();
    open(&mut h, grants_for(true), acting());
    assert_eq!(read_attention(&mut h, "s").len(), 1);
}

#[test]
fn projections_and_migrations_cannot_change_attention() {
    let host = acting();
    let mut h = Harness::new();
    let mut m = manifest("a", &["attention"]);
    m["projection"]["session"] = json!(true);
    open(&mut h, vec![m], host.clone());
    h.session("s");
    host.set(|r| match r["kind"].as_str().unwrap() {
        "project" => json!({"ok": true, "value": 1, "attention": [{"op": "clear", "sessionId": "s", "id": "x"}]}),
        _ => acts(r),
    });
    let read = ok(h.read("s", ""));
    assert!(read.json["extensions"].get("a").is_none(), "{}", read.json);
    let err = h
        .with_ext(|e, ctx| e.project(ctx.store, e.roster().get("a").unwrap(), Some("s")))
        .unwrap_err();
    assert!(err.contains("not available in a projection"), "{err}");
}

/// Admits a prompt (claimed at once) and cancels it: one settlement.
fn settle_one(h: &mut Harness, session: &str, request_id: &str) -> String {
    let r = ok(h.prompt(session, request_id, "hi"));
    let id = r.json["commandId"].as_str().unwrap().to_owned();
    ok(h.command(session, json!({"type": "cancel", "commandId": id})));
    id
}

fn rows(r: &Reply) -> Vec<(String, String)> {
    r.json["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["sessionId"].as_str().unwrap().to_owned(),
                s["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[test]
fn the_inbox_orders_needs_you_then_running_then_settled_and_pages_stably() {
    let host = acting();
    let mut h = setup(host.clone());
    for s in ["s1", "s2", "s3", "s4", "s5"] {
        h.session(s);
    }
    h.occupy("s2");
    settle_one(&mut h, "s3", "r");
    ok(act(&mut h, "a", vec![set("s4", item("x", "look"))]));
    ok(act(&mut h, "b", vec![set("s5", item("y", "look"))]));
    // s5's change is newer than s4's; s3 settled after s1 was created.
    let all = ok(inbox(&mut h, ""));
    assert_eq!(
        rows(&all),
        pairs(&[
            ("s5", "needs_you"),
            ("s4", "needs_you"),
            ("s2", "running"),
            ("s3", "settled"),
            ("s1", "settled"),
        ])
    );
    assert_eq!(all.json["nextCursor"], Value::Null);
    let s4 = &all.json["sessions"][1];
    assert_eq!(
        s4["attention"],
        json!([{"extensionId": "a", "id": "x", "kind": "review", "summary": "look", "since": 1_700_000_000_000i64}])
    );
    assert_eq!(s4["attentionCount"], 1);
    assert!(s4["updatedAt"].as_i64().unwrap() > 0);
    assert_eq!(all.json["sessions"][2]["attention"], json!([]));
    // Pages of two walk the same order across states.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("?limit=2&cursor={c}"),
            None => "?limit=2".into(),
        };
        let page = ok(inbox(&mut h, &q));
        assert!(page.json["sessions"].as_array().unwrap().len() <= 2);
        seen.extend(rows(&page));
        match page.json["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, rows(&all));
    // Closed query keys, bounded limit, a cursor of this API only.
    for (q, needle) in [
        ("?limit=0", "limit"),
        ("?limit=201", "limit"),
        ("?cursor=nope", "cursor"),
        ("?cursor=7.1.s1", "cursor"),
        ("?sort=1", "sort"),
    ] {
        let r = inbox(&mut h, q);
        assert_eq!(r.status, 400, "{q}: {}", r.json);
        assert!(
            r.json["error"]["message"]
                .as_str()
                .unwrap()
                .contains(needle),
            "{q}: {}",
            r.json
        );
    }
    assert_eq!(h.call("POST", "/inbox", Value::Null).status, 405);
    // Clearing the last item makes the Session settled again.
    ok(act(&mut h, "b", vec![clear("s5", "y")]));
    let r = ok(inbox(&mut h, ""));
    assert_eq!(rows(&r)[0], ("s4".to_owned(), "needs_you".to_owned()));
    assert!(rows(&r).contains(&("s5".to_owned(), "settled".to_owned())));
}

#[test]
fn a_stopped_owner_or_one_without_a_current_grant_is_not_counted_until_it_returns() {
    let host = acting();
    let mut h = setup(host.clone());
    h.session("s1");
    h.session("s2");
    ok(act(&mut h, "a", vec![set("s1", item("x", "look"))]));
    let state_of = |h: &mut Harness, s: &str| -> String {
        let r = ok(inbox(h, ""));
        r.json["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["sessionId"] == s)
            .unwrap()["state"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(state_of(&mut h, "s1"), "needs_you");
    // a stops (its settled hook fails): its item stays stored, unserved.
    host.set(
        |r| match (r["kind"].as_str().unwrap(), r["ext"].as_str().unwrap()) {
            ("settled", "a") => json!({"ok": false, "error": "a is down"}),
            _ => acts(r),
        },
    );
    settle_one(&mut h, "s2", "r");
    assert!(h
        .with_ext(|e, ctx| e.status(ctx.store, "a"))
        .unwrap()
        .stopped
        .is_some());
    assert_eq!(state_of(&mut h, "s1"), "settled");
    assert!(read_attention(&mut h, "s1").is_empty());
    assert_eq!(stored(&h).len(), 1);
    // Resumed: counted again.
    host.set(acts);
    h.with_ext(|e, ctx| e.resume(ctx, "a")).unwrap();
    assert_eq!(state_of(&mut h, "s1"), "needs_you");
    assert_eq!(read_attention(&mut h, "s1").len(), 1);
    // The roster read again without a's grant: excluded, still stored.
    open(&mut h, grants_for(false), host.clone());
    assert_eq!(state_of(&mut h, "s1"), "settled");
    assert!(read_attention(&mut h, "s1").is_empty());
    let r = act(&mut h, "a", vec![clear("s1", "x")]);
    refused(&r, "extension_command_failed", &["attention grant"]);
    assert_eq!(stored(&h).len(), 1);
    // The grant returns: so does the item.
    open(&mut h, grants_for(true), host);
    assert_eq!(state_of(&mut h, "s1"), "needs_you");
    assert_eq!(read_attention(&mut h, "s1")[0]["extensionId"], "a");
}

#[test]
fn an_agent_without_extensions_serves_the_inbox_and_deletes_sessions() {
    let mut h = Harness::new();
    h.session("s1");
    h.session("s2");
    h.occupy("s1");
    let r = ok(inbox(&mut h, ""));
    assert_eq!(rows(&r), pairs(&[("s1", "running"), ("s2", "settled")]));
    assert!(r.json["sessions"][0]["attention"] == json!([]));
    assert_eq!(h.call("DELETE", "/sessions/s2", Value::Null).status, 204);
    let r = ok(inbox(&mut h, ""));
    assert_eq!(rows(&r), pairs(&[("s1", "running")]));
}
