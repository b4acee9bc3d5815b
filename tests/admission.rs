//! The Session rules through the real HTTP core and real SQLite.

mod common;

use common::Harness;
use serde_json::json;
use shiitake::limits::{
    PENDING_BYTES_PER_SESSION_MAX, PENDING_PER_SESSION_MAX, READ_PAGE_BYTES_MAX, TEXT_BYTES_MAX,
};
use shiitake::sql::Sql;

#[test]
fn same_request_replays_receipt_other_input_conflicts() {
    let mut h = Harness::new();
    h.session("s");
    h.occupy("s");
    let first = h.prompt("s", "r1", "hello");
    assert_eq!(first.status, 200);
    assert_eq!(first.json["status"], "accepted");
    let id = first.json["commandId"].as_str().unwrap().to_owned();
    assert_eq!(h.prompt("s", "r1", "hello").json, first.json);
    let other = h.prompt("s", "r1", "hello!");
    assert_eq!(
        (other.status, other.json["error"]["code"].as_str()),
        (409, Some("request_conflict"))
    );
    let steer = h.command(
        "s",
        json!({"type":"prompt","requestId":"r1","text":"hello","delivery":"steer"}),
    );
    assert_eq!(steer.status, 409);
    let operator = h.command(
        "s",
        json!({"type":"operator","requestId":"r1","text":"hello"}),
    );
    assert_eq!(
        operator.status, 409,
        "the requestId namespace spans command kinds"
    );
    assert_eq!(h.pending("s"), vec![(id, "r1".into(), "hello".into())]);
}

#[test]
fn replay_compares_host_metadata_by_value() {
    let mut h = Harness::new();
    h.session("s");
    h.occupy("s");
    let body = r#"{"type":"prompt","requestId":"r","text":"x"}"#;
    let a = h.request(
        "POST",
        "/sessions/s/commands",
        body,
        Some(r#"{"author":{"id":"u1","name":"Ada"}}"#),
    );
    assert_eq!(a.status, 200);
    let same = h.request(
        "POST",
        "/sessions/s/commands",
        body,
        Some(r#"{ "author": {"name":"Ada","id":"u1"} }"#),
    );
    assert_eq!(same.json, a.json, "key order and spacing are not identity");
    let other = h.request(
        "POST",
        "/sessions/s/commands",
        body,
        Some(r#"{"author":{"id":"u2"}}"#),
    );
    assert_eq!(other.status, 409);
    let none = h.request("POST", "/sessions/s/commands", body, None);
    assert_eq!(none.status, 409);
    let pending = h.read("s", "").json;
    assert_eq!(pending["pending"][0]["meta"]["author"]["id"], "u1");
    let bad = h.request("POST", "/sessions/s/commands", body, Some("{nope"));
    assert_eq!(
        (bad.status, bad.json["error"]["code"].as_str()),
        (400, Some("invalid_meta"))
    );
    let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(4096));
    let bad = h.request("POST", "/sessions/s/commands", body, Some(&big));
    assert_eq!(bad.status, 400);
}

#[test]
fn withdraw_fences_and_existing_admission_wins_across_restart() {
    let mut h = Harness::new();
    h.session("s");
    h.occupy("s");
    h.session("t");
    let accepted = h.prompt("s", "kept", "hi").json["commandId"].clone();
    let w = h.withdraw("s", "kept");
    assert_eq!(w.json, json!({"status":"accepted","commandId": accepted}));
    assert_eq!(
        h.pending("s").len(),
        1,
        "withdraw never cancels admitted work"
    );

    assert_eq!(h.withdraw("s", "lost").json, json!({"status":"unknown"}));
    assert_eq!(
        h.withdraw("s", "lost").json,
        json!({"status":"unknown"}),
        "idempotent"
    );
    h.restart();
    let refused = h.prompt("s", "lost", "hi");
    assert_eq!(
        (refused.status, refused.json["error"]["code"].as_str()),
        (409, Some("request_withdrawn"))
    );
    let op = h.command(
        "s",
        json!({"type":"operator","requestId":"lost","text":"x"}),
    );
    assert_eq!(op.status, 409);
    assert_eq!(
        h.prompt("t", "lost", "hi").status,
        200,
        "fences are Session-scoped"
    );

    let line = h.command(
        "s",
        json!({"type":"operator","requestId":"op","text":"note"}),
    );
    let w = h.withdraw("s", "op");
    assert_eq!(
        w.json,
        json!({"status":"accepted","commandId": line.json["commandId"]})
    );
    let messages = h.read("s", "").json["messages"].clone();
    let operator = messages.as_array().unwrap().last().unwrap();
    assert_eq!(
        operator["entryId"], line.json["commandId"],
        "operator commandId is its entry id"
    );
    assert_eq!(operator["requestId"], "op");
    assert_eq!(operator["role"], "operator");
}

#[test]
fn cancel_and_abort_keep_text_and_fifo() {
    let mut h = Harness::new();
    h.session("s");
    h.occupy("s");
    let ids: Vec<String> = (0..4)
        .map(|i| {
            h.prompt("s", &format!("r{i}"), &format!("text {i}")).json["commandId"]
                .as_str()
                .unwrap()
                .into()
        })
        .collect();
    let c = h.command("s", json!({"type":"cancel","commandId": ids[1]}));
    assert_eq!(
        c.json,
        json!({"status":"cancelled","commandId": ids[1],"text":"text 1"})
    );
    let again = h.command(
        "s",
        json!({"type":"cancel","commandId": ids[1],"onlyIfPending":true}),
    );
    assert_eq!(again.json, c.json, "cancel is idempotent");
    let order: Vec<String> = h.pending("s").into_iter().map(|p| p.0).collect();
    assert_eq!(order, vec![ids[0].clone(), ids[2].clone(), ids[3].clone()]);

    let op = h
        .command("s", json!({"type":"operator","requestId":"o","text":"n"}))
        .json["commandId"]
        .clone();
    let late = h.command("s", json!({"type":"cancel","commandId": op}));
    assert_eq!(late.json, json!({"status":"too_late","commandId": op}));
    let missing = h.command("s", json!({"type":"cancel","commandId":"cmd_nope"}));
    assert_eq!(
        (missing.status, missing.json["error"]["code"].as_str()),
        (404, Some("command_not_found"))
    );

    let abort = h.command("s", json!({"type":"abort"}));
    let cancelled: Vec<(&str, &str)> = abort.json["cancelled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["commandId"].as_str().unwrap(),
                c["text"].as_str().unwrap(),
            )
        })
        .collect();
    // The running turn first, then the queue in FIFO order.
    assert_eq!(cancelled[0].1, "occupies the session");
    assert_eq!(
        cancelled[1..],
        vec![
            (ids[0].as_str(), "text 0"),
            (ids[2].as_str(), "text 2"),
            (ids[3].as_str(), "text 3")
        ]
    );
    assert!(h.pending("s").is_empty());
    let replay = h.prompt("s", "r0", "text 0");
    assert_eq!(
        replay.json["commandId"],
        ids[0].as_str(),
        "a replay answers the original receipt"
    );
    assert!(h.pending("s").is_empty(), "a replay never re-queues");
    h.session("other");
    let foreign = h.command("other", json!({"type":"cancel","commandId": ids[3]}));
    assert_eq!(foreign.status, 404, "commands are Session-scoped");
}

#[test]
fn pending_input_is_bounded_in_bytes_not_characters() {
    // Three-byte characters: a queue of them counted in characters would
    // hold three times the bound in bytes.
    let mut h = Harness::new();
    h.session("s");
    h.occupy("s");
    let text = "€".repeat(TEXT_BYTES_MAX / 3 - 16);
    let mut accepted = 0;
    let refused = loop {
        let r = h.prompt("s", &format!("r{accepted}"), &text);
        if r.status != 200 {
            break r;
        }
        accepted += 1;
        assert!(accepted < PENDING_PER_SESSION_MAX, "never refused by bytes");
    };
    assert_eq!(
        (refused.status, refused.json["error"]["code"].as_str()),
        (429, Some("queue_full"))
    );
    assert!(
        refused.json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("bytes of pending input")),
        "{}",
        refused.json
    );
    let rows = h
        .sql()
        .query(
            "SELECT sum(length(CAST(input AS BLOB))) FROM commands WHERE state = 'pending'",
            &[],
        )
        .unwrap();
    let queued = rows[0].int(0).unwrap() as usize;
    assert!(
        queued <= PENDING_BYTES_PER_SESSION_MAX,
        "{queued} bytes queued"
    );
    assert!(
        queued + text.len() * 2 > PENDING_BYTES_PER_SESSION_MAX,
        "refused only at the bound ({queued} bytes queued)"
    );
}

#[test]
fn queue_is_bounded_and_a_refusal_writes_nothing() {
    let mut h = Harness::new();
    h.session("s");
    h.occupy("s");
    for i in 0..PENDING_PER_SESSION_MAX {
        assert_eq!(h.prompt("s", &format!("r{i}"), "x").status, 200);
    }
    let full = h.prompt("s", "one-more", "x");
    assert_eq!(
        (full.status, full.json["error"]["code"].as_str()),
        (429, Some("queue_full"))
    );
    let rows = h.sql().query("SELECT count(*) FROM commands", &[]).unwrap();
    assert_eq!(
        rows[0].int(0).unwrap(),
        PENDING_PER_SESSION_MAX as i64 + 1,
        "the running turn and a full queue; the refusal wrote nothing"
    );
    let head = h.pending("s")[0].0.clone();
    h.command("s", json!({"type":"cancel","commandId": head}));
    assert_eq!(
        h.prompt("s", "one-more", "x").status,
        200,
        "cancelling frees a slot"
    );

    let mut h = Harness::new();
    h.session("b");
    h.occupy("b");
    let big = "y".repeat(TEXT_BYTES_MAX);
    let mut accepted = 0;
    let last = loop {
        let r = h.prompt("b", &format!("big{accepted}"), &big);
        if r.status != 200 {
            break r;
        }
        accepted += 1;
    };
    assert_eq!(last.status, 429);
    assert_eq!(
        accepted, 31,
        "2 MiB of pending input holds 31 prompts of 64 KiB"
    );
}

#[test]
fn sessions_are_created_listed_in_pages_and_deleted() {
    let mut h = Harness::new();
    let generated = h.call("POST", "/sessions", serde_json::Value::Null);
    assert_eq!(generated.status, 201);
    assert!(generated.json["sessionId"]
        .as_str()
        .unwrap()
        .starts_with("ses_"));
    for i in 0..7 {
        h.session(&format!("s{i}"));
    }
    let dup = h.call("POST", "/sessions", json!({"sessionId":"s3"}));
    assert_eq!(
        (dup.status, dup.json["error"]["code"].as_str()),
        (409, Some("session_exists"))
    );
    let bad = h.call("POST", "/sessions", json!({"sessionId":"has space"}));
    assert_eq!(bad.status, 400);
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = h
            .call(
                "GET",
                &format!("/sessions?limit=3{cursor}"),
                serde_json::Value::Null,
            )
            .json;
        for s in page["sessions"].as_array().unwrap() {
            seen.push(s["sessionId"].as_str().unwrap().to_owned());
        }
        match page["cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 8);
    assert_eq!(&seen[1..], &["s0", "s1", "s2", "s3", "s4", "s5", "s6"]);
    assert_eq!(
        h.call("GET", "/sessions?limit=201", serde_json::Value::Null)
            .status,
        400
    );

    h.prompt("s2", "r", "x");
    h.withdraw("s2", "w");
    assert_eq!(
        h.call("DELETE", "/sessions/s2", serde_json::Value::Null)
            .status,
        204
    );
    assert_eq!(h.read("s2", "").status, 404);
    assert_eq!(h.prompt("s2", "r", "x").status, 404);
    assert_eq!(
        h.call("DELETE", "/sessions/s2", serde_json::Value::Null)
            .status,
        404
    );
    for table in ["commands", "fences", "messages"] {
        let rows = h
            .sql()
            .query(
                &format!("SELECT count(*) FROM {table} WHERE session_id = 's2'"),
                &[],
            )
            .unwrap();
        assert_eq!(
            rows[0].int(0).unwrap(),
            0,
            "{table} rows of a deleted Session remain"
        );
    }
}

#[test]
fn read_pages_walk_the_transcript_within_count_and_byte_caps() {
    let mut h = Harness::new();
    h.session("s");
    for i in 0..23 {
        h.command(
            "s",
            json!({"type":"operator","requestId": format!("o{i}"),"text": format!("line {i}")}),
        );
    }
    let mut texts = Vec::new();
    let mut before = String::new();
    loop {
        let page = h.read("s", &format!("?limit=5{before}")).json;
        let lines: Vec<String> = page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap().to_owned())
            .collect();
        assert!(lines.len() <= 5);
        texts.splice(0..0, lines);
        match page["cursor"].as_str() {
            Some(c) => before = format!("&before={c}"),
            None => break,
        }
    }
    let expected: Vec<String> = (0..23).map(|i| format!("line {i}")).collect();
    assert_eq!(
        texts, expected,
        "pages are newest first, each oldest first, no gaps"
    );

    let mut h = Harness::new();
    h.session("big");
    let text = "z".repeat(60_000);
    for i in 0..40 {
        h.command(
            "big",
            json!({"type":"operator","requestId": format!("o{i}"),"text": text}),
        );
    }
    let page = h.read("big", "?limit=200").json;
    let n = page["messages"].as_array().unwrap().len();
    let bytes: usize = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.to_string().len())
        .sum();
    assert!(
        n < 40 && bytes <= READ_PAGE_BYTES_MAX,
        "{n} messages, {bytes} bytes"
    );
    assert!(page["cursor"].is_string());
    for bad in [
        "?limit=1&limit=200",
        "?limit=0",
        "?limit=201",
        "?before=abc",
        "?before=-1",
        "?bogus=1",
    ] {
        let r = h.read("big", bad);
        assert_eq!(
            (r.status, r.json["error"]["code"].as_str()),
            (400, Some("invalid_query")),
            "{bad}"
        );
    }
}

#[test]
fn a_message_over_the_page_bound_is_a_page_of_its_own() {
    let mut h = Harness::new();
    h.session("s");
    let small = json!({"role": "operator", "text": "small"}).to_string();
    // An answer near ANSWER_BYTES_MAX, stored with its JSON around it.
    let huge = json!({"role": "assistant", "text": "z".repeat(READ_PAGE_BYTES_MAX)}).to_string();
    h.with_ctx(|ctx| {
        for body in [&small, &small, &huge] {
            ctx.store.insert_message("s", body).unwrap();
        }
    });
    let first = h.read("s", "?limit=200").json;
    let messages = first["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "the newest alone");
    assert_eq!(messages[0]["sequence"], 3);
    assert_eq!(
        messages[0]["text"].as_str().unwrap().len(),
        READ_PAGE_BYTES_MAX
    );
    assert_eq!(first["cursor"], "3");
    let second = h.read("s", "?limit=200&before=3").json;
    let seqs: Vec<i64> = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["sequence"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2], "oldest first");
    assert!(second["cursor"].is_null(), "{second}");
    // With the huge one older than the page start, it ends the page.
    h.with_ctx(|ctx| ctx.store.insert_message("s", &small).unwrap());
    let newest = h.read("s", "?limit=200").json;
    assert_eq!(newest["messages"].as_array().unwrap().len(), 1);
    assert_eq!(newest["messages"][0]["sequence"], 4);
    assert_eq!(newest["cursor"], "4");
}

#[test]
fn bad_input_is_a_named_4xx_never_a_5xx() {
    let mut h = Harness::new();
    h.session("s");
    let cases: &[(&str, &str, &str, u16, &str)] = &[
        ("POST", "/sessions/s/commands", "{", 400, "invalid_json"),
        (
            "POST",
            "/sessions/s/commands",
            r#"{"type":"prompt","requestId":"a","text":"x","extra":1}"#,
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/sessions/s/commands",
            r#"{"type":"nope"}"#,
            400,
            "invalid_request",
        ),
        ("POST", "/sessions/s/commands", "[]", 400, "invalid_request"),
        (
            "POST",
            "/sessions/s/withdraw",
            r#"{"requestId":""}"#,
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/sessions/s/withdraw",
            r#"{"requestId":"a","x":1}"#,
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/sessions/missing/commands",
            r#"{"type":"abort"}"#,
            404,
            "session_not_found",
        ),
        ("GET", "/nowhere", "", 404, "not_found"),
        ("GET", "/sessions/s/commands", "", 405, "method_not_allowed"),
        ("PUT", "/sessions", "", 405, "method_not_allowed"),
        (
            "POST",
            "/sessions",
            r#"{"sessionId":5}"#,
            400,
            "invalid_request",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let r = h.request(method, path, body, None);
        assert_eq!(
            (r.status, r.json["error"]["code"].as_str()),
            (*status, Some(*code)),
            "{method} {path} {body}"
        );
    }
    let head = h.request("HEAD", "/sessions/s", "", None);
    assert_eq!(head.status, 200, "HEAD is served as GET");
    let head = h.request("HEAD", "/sessions/missing", "", None);
    assert_eq!(head.status, 404);
    let huge = "x".repeat(shiitake::limits::BODY_BYTES_MAX + 1);
    assert_eq!(
        h.request("POST", "/sessions/s/commands", &huge, None)
            .status,
        413
    );
}

/// Statements `f` ran, and what it answered.
fn counted(
    h: &mut Harness,
    f: impl FnOnce(&mut Harness) -> common::Reply,
) -> (u16, u64, serde_json::Value) {
    let before = h.sql().statements();
    let reply = f(h);
    (reply.status, h.sql().statements() - before, reply.json)
}

/// A queued prompt into a Session whose queue admission keeps (in memory,
/// rebuilt by a read) costs its insert alone; any other change of the
/// queue, the Session or its fences makes the next admission read again,
/// and every rule answers as from a read.
#[test]
fn a_kept_queue_admits_in_one_statement_and_every_other_write_makes_it_read() {
    let mut h = Harness::new();
    h.session("s");
    h.session("t");
    h.occupy("s");
    h.occupy("t");
    let prompt = |s: &'static str, r: &'static str| move |h: &mut Harness| h.prompt(s, r, "hi");
    assert_eq!(
        counted(&mut h, prompt("s", "r1")).1,
        2,
        "a read and the insert"
    );
    let (status, kept, first) = counted(&mut h, prompt("s", "r2"));
    assert_eq!((status, kept), (200, 1), "the insert alone");
    assert_eq!(counted(&mut h, prompt("t", "r1")).1, 2);
    assert_eq!(
        counted(&mut h, prompt("s", "r3")).1,
        1,
        "another Session's admission leaves this one's kept"
    );

    // A replay on the kept queue: its insert fails on the requestId,
    // nothing is written, and a read answers the first receipt.
    let (status, _, replay) = counted(&mut h, prompt("s", "r2"));
    assert_eq!((status, &replay), (200, &first));
    let conflict = h.prompt("s", "r2", "other text");
    assert_eq!(conflict.json["error"]["code"], "request_conflict");
    assert_eq!(h.pending("s").len(), 3, "r1, r2, r3 once each");
    assert_eq!(
        counted(&mut h, prompt("s", "r4")).1,
        2,
        "read again after the failed insert"
    );
    assert_eq!(counted(&mut h, prompt("s", "r5")).1, 1);

    // A cancel changes the queue: read again, and the count is the queue's.
    let r5 = h.pending("s")[4].0.clone();
    assert_eq!(
        h.command("s", json!({"type":"cancel","commandId": r5}))
            .status,
        200
    );
    assert_eq!(counted(&mut h, prompt("s", "r6")).1, 2);
    assert_eq!(h.pending("s").len(), 5);

    // The queue bound counts kept admissions: the 64th pending is refused.
    for i in h.pending("s").len()..PENDING_PER_SESSION_MAX {
        let r = h.prompt("s", &format!("fill{i}"), "x");
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let (status, statements, full) = counted(&mut h, prompt("s", "over"));
    assert_eq!(
        (status, full["error"]["code"].as_str()),
        (429, Some("queue_full"))
    );
    assert_eq!(statements, 1, "refused on the kept queue, then on a read");
    // ...where an earlier admission of the requestId still wins.
    let (status, _, replay) = counted(&mut h, prompt("s", "r2"));
    assert_eq!((status, &replay), (200, &first));
    assert_eq!(h.pending("s").len(), PENDING_PER_SESSION_MAX);

    // A fence (a withdrawn requestId) in a kept Session: refused, and this
    // Session's admissions read from then on (only a read checks fences).
    assert_eq!(h.prompt("t", "t2", "hi").status, 200);
    assert_eq!(h.withdraw("t", "gone").json, json!({"status":"unknown"}));
    let refused = h.prompt("t", "gone", "hi");
    assert_eq!(refused.json["error"]["code"], "request_withdrawn");
    assert_eq!(counted(&mut h, prompt("t", "t3")).1, 2);
    assert_eq!(counted(&mut h, prompt("t", "t4")).1, 2);

    // A deleted Session's kept queue is gone with it.
    h.session("u");
    h.occupy("u");
    assert_eq!(h.prompt("u", "u1", "hi").status, 200);
    assert_eq!(counted(&mut h, prompt("u", "u2")).1, 1);
    assert_eq!(
        h.call("DELETE", "/sessions/u", serde_json::Value::Null)
            .status,
        204
    );
    let gone = h.prompt("u", "u3", "hi");
    assert_eq!(
        (gone.status, gone.json["error"]["code"].as_str()),
        (404, Some("session_not_found"))
    );

    // A restart keeps nothing: the first admission reads (and is refused:
    // the queue is still full).
    h.restart();
    let (status, statements, _) = counted(&mut h, prompt("s", "after"));
    assert_eq!((status, statements), (429, 1));
    assert_eq!(h.pending("s").len(), PENDING_PER_SESSION_MAX);
}
