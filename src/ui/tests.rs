use super::*;
use crate::ctx::CounterIds;
use crate::limits::{TOOL_PAYLOAD_BYTES_MAX, UI_STREAM_BACKLOG_BYTES_MAX};

fn config() -> Config {
    Config {
        id: "notebook".into(),
        has_session: false,
        direct: false,
    }
}

fn execute(name: &str) -> Ask {
    Ask::of("execute", &json!({"name": name, "input": {"n": 1}})).unwrap()
}

fn claim(bridge: &mut Bridge, ids: &mut CounterIds, request: &str) -> Result<String, ApiError> {
    let body = json!({ "requestId": request }).to_string();
    let answer = bridge.claim("s1", body.as_bytes(), ids)?;
    Ok(answer["claimId"].as_str().unwrap().to_owned())
}

fn post(bridge: &mut Bridge, body: Value) -> Result<Answered, ApiError> {
    bridge.result("s1", body.to_string().as_bytes())
}

#[test]
fn the_module_offers_a_replay_safe_discover_and_an_unsafe_execute() {
    let module = config().module().unwrap();
    assert_eq!(module.id, "ui");
    let ops: Vec<(&str, bool, Access)> = module
        .operations
        .iter()
        .map(|op| (op.name.as_str(), op.replay_safe, op.access))
        .collect();
    assert_eq!(
        ops,
        [
            ("discover", true, Access::Read),
            ("execute", false, Access::Write)
        ]
    );
    assert!(module.operations[1].description.contains("`notebook`"));
    assert!(Config {
        id: String::new(),
        has_session: false,
        direct: false
    }
    .check()
    .is_err());
    assert!(Config {
        id: "x".repeat(UI_APP_ID_BYTES_MAX + 1),
        has_session: false,
        direct: false
    }
    .check()
    .is_err());
}

#[test]
fn a_call_waits_within_the_tool_timeout() {
    assert_eq!(wait_ms(180_000), 162_000);
    assert_eq!(wait_ms(u64::MAX), u64::MAX / 100);
}

#[test]
fn routes_parse_only_the_three_paths() {
    assert_eq!(
        Route::parse("/browser/sessions/s1/browser/events"),
        Some(("s1", Route::Events))
    );
    assert_eq!(
        Route::parse("/browser/sessions/s%20x/browser/results/"),
        Some(("s%20x", Route::Results))
    );
    assert_eq!(Route::parse("/browser/sessions/s1/browser/other"), None);
    assert_eq!(Route::parse("/sessions/s1/browser/claims"), None);
    assert_eq!(Route::Claims.method(), "POST");
    assert!(Route::Events.check("s1", "GET", "").is_ok());
    assert_eq!(
        Route::Events
            .check("s1", "GET", "limit=1")
            .unwrap_err()
            .code(),
        "invalid_query"
    );
    assert_eq!(
        Route::Claims.check("s1", "GET", "").unwrap_err().code(),
        "method_not_allowed"
    );
    assert!(Route::Results.check_body(UI_RESULT_BODY_BYTES_MAX).is_ok());
    let e = Route::Claims
        .check_body(UI_CLAIM_BODY_BYTES_MAX + 1)
        .unwrap_err();
    assert_eq!((e.status(), e.code()), (413, "payload_too_large"));
    assert!(e.to_string().contains("1024"), "{e}");
    const { assert!(UI_RESULT_BODY_BYTES_MAX > TOOL_PAYLOAD_BYTES_MAX) };
    // A stream opening on a Session with every request waiting, each at
    // the payload bound, is not cut off as a stalled reader.
    const {
        assert!(
            UI_STREAM_BACKLOG_BYTES_MAX
                > UI_REQUESTS_PER_SESSION_MAX * (TOOL_PAYLOAD_BYTES_MAX + 4_096)
        )
    };
}

#[test]
fn a_claimed_request_takes_only_its_own_claims_result() {
    let mut ids = CounterIds::default();
    let mut bridge = Bridge::default();
    assert!(bridge.open_stream("s1", true).unwrap().is_empty());
    bridge.borrow("s1", "h1");
    let (a, event) = bridge.ask("h1", execute("greet"), &mut ids).unwrap();
    assert_eq!(event.0, "request");
    let sent: Value = serde_json::from_str(&event.1).unwrap();
    assert_eq!(
        sent,
        json!({"requestId": a, "operation": "execute", "name": "greet", "input": {"n": 1}})
    );
    let (b, _) = bridge.ask("h1", Ask::Discover, &mut ids).unwrap();

    // A result without a claim.
    let e = post(
        &mut bridge,
        json!({"requestId": a, "claimId": "uic_x", "result": 1}),
    )
    .unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "ui_not_claimed"));

    let claim_a = claim(&mut bridge, &mut ids, &a).unwrap();
    // A second claim.
    let e = claim(&mut bridge, &mut ids, &a).unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "ui_claimed"));
    assert!(e.to_string().contains(&a), "{e}");

    // A's claim used for B: a result for another request.
    let e = post(
        &mut bridge,
        json!({"requestId": b, "claimId": claim_a, "result": []}),
    )
    .unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "ui_other_request"));
    assert!(e.to_string().contains("another request"), "{e}");

    // A claimed request and a claim that is no one's.
    let claim_b = claim(&mut bridge, &mut ids, &b).unwrap();
    let e = post(
        &mut bridge,
        json!({"requestId": b, "claimId": "uic_forged", "result": []}),
    )
    .unwrap_err();
    assert_eq!((e.status(), e.code()), (409, "ui_wrong_claim"));

    // The matching result is taken once.
    let answered = post(
        &mut bridge,
        json!({"requestId": a, "claimId": claim_a, "result": {"hello": "Ada"}}),
    )
    .unwrap();
    assert_eq!(answered.outcome, Ok(json!({"hello": "Ada"})));
    assert_eq!(answered.response().unwrap()["accepted"], true);
    let e = post(
        &mut bridge,
        json!({"requestId": a, "claimId": claim_a, "result": 2}),
    )
    .unwrap_err();
    assert_eq!((e.status(), e.code()), (404, "ui_request_not_found"));

    // Discover answers are normalised; the App's error reaches the model.
    let answered = post(
        &mut bridge,
        json!({"requestId": b, "claimId": claim_b,
               "result": [{"name": "greet", "description": "says hello"}]}),
    )
    .unwrap();
    assert_eq!(
        answered.outcome,
        Ok(json!([{"name": "greet", "description": "says hello",
                   "inputSchema": {"type": "object"}}]))
    );
    let (c, _) = bridge.ask("h1", execute("boom"), &mut ids).unwrap();
    let claim_c = claim(&mut bridge, &mut ids, &c).unwrap();
    let answered = post(
        &mut bridge,
        json!({"requestId": c, "claimId": claim_c, "error": "it broke"}),
    )
    .unwrap();
    // The App's own error ends the call; the browser's result is accepted.
    assert!(answered.refused().is_none());
    assert_eq!(answered.response().unwrap()["accepted"], true);
    assert_eq!(
        answered.outcome.map_err(|e| e.to_string()),
        Err("ui.execute: the App failed: it broke".into())
    );
}

#[test]
fn malformed_bodies_and_results_are_refused_naming_the_problem() {
    let mut ids = CounterIds::default();
    let mut bridge = Bridge::default();
    bridge.borrow("s1", "h1");
    let e = bridge.claim("s1", b"not json", &mut ids).unwrap_err();
    assert_eq!(e.status(), 400);
    let e = bridge
        .claim("s1", br#"{"requestId":"r","extra":1}"#, &mut ids)
        .unwrap_err();
    assert!(e.to_string().contains("extra"), "{e}");
    let e = post(
        &mut bridge,
        json!({"requestId": "r", "claimId": "c", "result": 1, "error": "x"}),
    )
    .unwrap_err();
    assert!(e.to_string().contains("exactly one"), "{e}");

    // A result past the payload bound ends the call, and says so.
    let (a, _) = bridge.ask("h1", execute("big"), &mut ids).unwrap();
    let claim_a = claim(&mut bridge, &mut ids, &a).unwrap();
    let big = "x".repeat(TOOL_PAYLOAD_BYTES_MAX);
    let answered = post(
        &mut bridge,
        json!({"requestId": a, "claimId": claim_a, "result": big}),
    )
    .unwrap();
    let why = answered.refused().unwrap().to_string();
    assert!(why.contains("bytes"), "{why}");
    assert_eq!(answered.response().unwrap_err().status(), 400);
    assert!(answered
        .outcome
        .unwrap_err()
        .to_string()
        .contains("refused"));

    // A discover answer that is no command list, or lists a name twice.
    for bad in [
        json!({"name": "x"}),
        json!([{"name": ""}]),
        json!([{"name": "a"}, {"name": "a"}]),
        json!([{"name": "a", "inputSchema": 3}]),
        Value::Array(
            (0..=UI_COMMANDS_MAX)
                .map(|i| json!({ "name": format!("c{i}") }))
                .collect(),
        ),
    ] {
        let (d, _) = bridge.ask("h1", Ask::Discover, &mut ids).unwrap();
        let claim_d = claim(&mut bridge, &mut ids, &d).unwrap();
        let answered = post(
            &mut bridge,
            json!({"requestId": d, "claimId": claim_d, "result": bad}),
        )
        .unwrap();
        assert!(answered.refused().is_some(), "{bad}");
    }
    assert!(Ask::of("execute", &json!({"name": "", "input": {}})).is_err());
    assert!(Ask::of("execute", &json!({"name": "a", "input": 1})).is_err());
}

#[test]
fn requests_streams_and_hosts_are_bounded() {
    let mut ids = CounterIds::default();
    let mut bridge = Bridge::default();
    bridge.borrow("s1", "h1");
    for _ in 0..UI_REQUESTS_PER_SESSION_MAX {
        bridge.ask("h1", Ask::Discover, &mut ids).unwrap();
    }
    let e = bridge
        .ask("h1", Ask::Discover, &mut ids)
        .unwrap_err()
        .to_string();
    assert!(e.contains("the most at once"), "{e}");
    // A stream opened now is sent every unclaimed request.
    let first = bridge.open_stream("s1", true).unwrap();
    assert_eq!(first.len(), UI_REQUESTS_PER_SESSION_MAX);
    for _ in 1..UI_STREAMS_PER_SESSION_MAX {
        bridge.open_stream("s1", true).unwrap();
    }
    let e = bridge.open_stream("s1", true).unwrap_err();
    assert_eq!(e.status(), 429);
    let e = bridge.open_stream("unknown", false).unwrap_err();
    assert_eq!(e.status(), 404);
    let mut total = Bridge::default();
    for i in 0..UI_STREAMS_MAX {
        total.open_stream(&format!("s{i}"), true).unwrap();
    }
    assert_eq!(
        total.open_stream("one-more", true).unwrap_err().status(),
        429
    );
}

#[test]
fn a_host_lives_while_a_stream_or_a_run_holds_it() {
    let mut ids = CounterIds::default();
    let mut bridge = Bridge::default();
    bridge.open_stream("s1", true).unwrap();
    assert!(bridge.holds("s1"));
    bridge.borrow("s1", "h1");
    bridge.borrow("s1", "h1"); // a later offer keeps the borrow
    bridge.close_stream("s1");
    assert!(bridge.holds("s1"), "the run holds it");
    let (a, _) = bridge.ask("h1", Ask::Discover, &mut ids).unwrap();
    let (session, withdrawn) = bridge.give_back("h1").unwrap();
    assert_eq!((session.as_str(), withdrawn), ("s1", vec![a.clone()]));
    assert!(bridge.give_back("h1").is_none(), "given back once");
    assert!(!bridge.holds("s1"), "dropped when neither holds it");
    let e = bridge
        .ask("h1", Ask::Discover, &mut ids)
        .unwrap_err()
        .to_string();
    assert!(e.contains("holds no browser bridge"), "{e}");
}

#[test]
fn an_unanswered_call_says_whether_a_browser_was_there() {
    let mut ids = CounterIds::default();
    let mut bridge = Bridge::default();
    bridge.borrow("s1", "h1");
    let (a, _) = bridge.ask("h1", execute("x"), &mut ids).unwrap();
    let (why, event) = bridge.abandon("s1", &a, 1000).unwrap();
    assert_eq!(
        why,
        CallError::NoBrowser {
            label: "ui.execute"
        }
    );
    assert!(why.to_string().contains("no browser is connected"), "{why}");
    assert_eq!(event.0, "cancelled");
    assert!(bridge.abandon("s1", &a, 1000).is_none(), "withdrawn once");
    bridge.open_stream("s1", true).unwrap();
    let (b, _) = bridge.ask("h1", execute("x"), &mut ids).unwrap();
    claim(&mut bridge, &mut ids, &b).unwrap();
    let (why, _) = bridge.abandon("s1", &b, 1000).unwrap();
    // Claimed: the browser may have run it.
    assert!(
        matches!(
            why,
            CallError::NoResult {
                timeout_ms: 1000,
                ..
            }
        ),
        "{why:?}"
    );
    assert!(why.to_string().contains("may have run"), "{why}");
    let e = claim(&mut bridge, &mut ids, &b).unwrap_err();
    assert_eq!(e.code(), "ui_request_not_found");
}

#[test]
fn a_request_is_unattended_while_no_stream_is_open_and_no_one_claimed_it() {
    let mut ids = CounterIds::default();
    let mut bridge = Bridge::default();
    bridge.borrow("s1", "h1");
    let (a, _) = bridge.ask("h1", execute("x"), &mut ids).unwrap();
    assert!(bridge.unattended("s1", &a));
    bridge.open_stream("s1", true).unwrap();
    assert!(!bridge.unattended("s1", &a), "a browser connected");
    bridge.close_stream("s1");
    assert!(bridge.unattended("s1", &a), "it went away");
    bridge.open_stream("s1", true).unwrap();
    claim(&mut bridge, &mut ids, &a).unwrap();
    bridge.close_stream("s1");
    assert!(
        !bridge.unattended("s1", &a),
        "claimed: its result may still come"
    );
    assert!(!bridge.unattended("s1", "uir_unknown"), "no such request");
}

#[test]
fn close_ends_every_stream_fails_waiting_calls_and_refuses_everything_after() {
    let mut ids = CounterIds::default();
    let mut bridge = Bridge::default();
    bridge.open_stream("s1", true).unwrap();
    bridge.open_stream("s2", true).unwrap();
    bridge.borrow("s1", "h1");
    let (a, _) = bridge.ask("h1", Ask::Discover, &mut ids).unwrap();
    let requests = bridge.close("the App closed");
    assert_eq!(requests, std::slice::from_ref(&a));
    assert!(
        bridge.holds("s1") && !bridge.holds("s2"),
        "only a run holds a host now"
    );
    let gone = |e: ApiError| (e.status(), e.code());
    assert_eq!(
        gone(bridge.open_stream("s1", true).unwrap_err()),
        (410, "ui_closed")
    );
    let body = json!({ "requestId": a }).to_string();
    assert_eq!(
        gone(bridge.claim("s1", body.as_bytes(), &mut ids).unwrap_err()),
        (410, "ui_closed")
    );
    assert_eq!(
        gone(
            post(
                &mut bridge,
                json!({"requestId": a, "claimId": "c", "result": 1})
            )
            .unwrap_err()
        ),
        (410, "ui_closed")
    );
    bridge.borrow("s1", "h2");
    let e = bridge
        .ask("h2", Ask::Discover, &mut ids)
        .unwrap_err()
        .to_string();
    assert!(e.contains("closed (the App closed)"), "{e}");
    let e = bridge
        .ask("h1", Ask::Discover, &mut ids)
        .unwrap_err()
        .to_string();
    assert!(e.contains("closed"), "{e}");
    // The run that held it still gives it back; nothing is left.
    bridge.give_back("h1");
    assert!(!bridge.holds("s1") && !bridge.holds("s2"));
}
