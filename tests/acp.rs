//! ACP over HTTP (`POST /acp`, docs/acp.md) against the real core and
//! SQLite: the JSON-RPC refusals, Sessions created and loaded as hosted,
//! prompts admitted with the request's metadata and followed to their
//! settlement, and `session/cancel` under the identity rules.
//! Needs the `acp` feature (the lean build refuses `POST /acp`).
#![cfg(feature = "acp")]

mod common;

use common::Harness;
use serde_json::{json, Value};
use shiitake::acp::{self, Answer, Follow, Served};
use shiitake::http::{Effects, HttpRequest};
use shiitake::meta::MetaPolicy;
use shiitake::model_choice;
use shiitake::rpc;

fn post(h: &mut Harness, body: &str, meta: Option<&str>) -> Served {
    let req = HttpRequest {
        method: "POST".into(),
        path: "/acp".into(),
        query: String::new(),
        meta: meta.map(Into::into),
        body: body.as_bytes().to_vec(),
        waited: false,
    };
    h.with_ctx(|ctx| acp::handle(ctx, &req))
}

fn call(h: &mut Harness, id: u64, method: &str, params: Value, meta: Option<&str>) -> Served {
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    post(h, &body.to_string(), meta)
}

fn json_answer(s: &Served) -> Value {
    match &s.answer {
        Answer::Json(text) => serde_json::from_str(text).unwrap(),
        other => panic!("expected a JSON answer, got {other:?}"),
    }
}

/// A JSON-RPC error answer: its code and message, its HTTP status a 4xx.
fn error_of(s: &Served) -> (i64, String) {
    let v: Value = match &s.answer {
        Answer::Failed { status, body } => {
            assert!((400..500).contains(status), "{status} {body}");
            serde_json::from_str(body).unwrap()
        }
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    };
    (
        v["error"]["code"].as_i64().unwrap_or_else(|| panic!("{v}")),
        v["error"]["message"].as_str().unwrap().to_owned(),
    )
}

fn new_session(h: &mut Harness) -> String {
    let s = call(
        h,
        1,
        "session/new",
        json!({"cwd": "/", "mcpServers": []}),
        None,
    );
    json_answer(&s)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn prompt(h: &mut Harness, sid: &str, text: &str, request_id: &str, meta: Option<&str>) -> Served {
    call(
        h,
        9,
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}],
               "_meta": {"shiitake/requestId": request_id}}),
        meta,
    )
}

/// Feeds the effects' frames to `follow`, as the host publishes them.
fn feed(follow: &mut Follow, effects: &Effects) -> Vec<Value> {
    let mut out = Vec::new();
    for (session, frame) in &effects.frames {
        if session == follow.session_id() {
            let data = serde_json::to_string(frame).unwrap();
            out.extend(
                follow
                    .event("frame", &data)
                    .iter()
                    .map(|m| serde_json::from_str(m).unwrap()),
            );
        }
    }
    out
}

#[test]
fn initialize_states_what_is_served() {
    let mut h = Harness::new();
    let v = json_answer(&call(
        &mut h,
        0,
        "initialize",
        json!({"protocolVersion": 1}),
        None,
    ));
    assert_eq!(v["id"], 0);
    assert_eq!(v["result"]["protocolVersion"], 1);
    assert_eq!(v["result"]["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        v["result"]["agentCapabilities"]["promptCapabilities"]["image"],
        true
    );
    let (code, message) = error_of(&call(&mut h, 1, "initialize", json!({}), None));
    assert_eq!(code, rpc::INVALID_PARAMS);
    assert!(message.contains("protocolVersion"), "{message}");
}

#[test]
fn malformed_messages_get_json_rpc_errors() {
    let mut h = Harness::new();
    assert_eq!(error_of(&post(&mut h, "{", None)).0, rpc::PARSE_ERROR);
    assert_eq!(
        error_of(&post(&mut h, "[{}]", None)).0,
        rpc::INVALID_REQUEST
    );
    let (code, message) = error_of(&call(&mut h, 1, "session/fork", json!({}), None));
    assert_eq!(code, rpc::METHOD_NOT_FOUND);
    assert!(message.contains("session/fork"), "{message}");
    let (code, message) = error_of(&call(
        &mut h,
        1,
        "session/prompt",
        json!({"prompt": []}),
        None,
    ));
    assert_eq!(code, rpc::INVALID_PARAMS);
    assert!(message.contains("sessionId"), "{message}");
    let sid = new_session(&mut h);
    let audio = json!({"sessionId": sid, "prompt": [{"type": "text", "text": "a"}, {"type": "audio", "data": "", "mimeType": "audio/wav"}]});
    let (code, message) = error_of(&call(&mut h, 1, "session/prompt", audio, None));
    assert_eq!(code, rpc::INVALID_PARAMS);
    assert!(
        message.contains("prompt[1].type") && message.contains("audio"),
        "{message}"
    );
    let (code, message) = error_of(&call(
        &mut h,
        1,
        "session/prompt",
        json!({"sessionId": sid, "prompt": []}),
        None,
    ));
    assert_eq!(code, rpc::INVALID_PARAMS);
    assert!(message.contains("text or at least one image"), "{message}");
    let (code, message) = error_of(&call(
        &mut h,
        1,
        "session/cancel",
        json!({"sessionId": sid}),
        None,
    ));
    assert_eq!(code, rpc::INVALID_REQUEST);
    assert!(message.contains("notification"), "{message}");
    let (code, _) = error_of(&prompt(&mut h, "nope", "x", "r", None));
    assert_eq!(code, rpc::RESOURCE_NOT_FOUND);
    // Not an ACP message at all: HTTP refusals.
    let mut get = HttpRequest {
        method: "GET".into(),
        path: "/acp".into(),
        ..HttpRequest::default()
    };
    let served = h.with_ctx(|ctx| acp::handle(ctx, &get));
    assert!(matches!(served.answer, Answer::Refused(ref e) if e.status() == 405));
    get.method = "POST".into();
    get.query = "x=1".into();
    let served = h.with_ctx(|ctx| acp::handle(ctx, &get));
    assert!(matches!(served.answer, Answer::Refused(ref e) if e.code() == "invalid_query"));
}

#[test]
fn new_sessions_are_hosted_and_refuse_client_mcp_servers() {
    let mut h = Harness::new();
    let sid = new_session(&mut h);
    assert!(model_choice::hosted(h.sql(), &sid).unwrap());
    let servers =
        json!({"cwd": "/", "mcpServers": [{"name": "x", "command": "x", "args": [], "env": []}]});
    let (code, message) = error_of(&call(&mut h, 2, "session/new", servers, None));
    assert_eq!(code, rpc::INVALID_PARAMS);
    assert!(message.contains("mcpServers"), "{message}");
    // A Session created over HTTP is not hosted until ACP loads it.
    h.session("plain");
    assert!(!model_choice::hosted(h.sql(), "plain").unwrap());
    let (code, message) = error_of(&prompt(&mut h, "plain", "hi", "r1", None));
    assert_eq!(code, rpc::RESOURCE_NOT_FOUND);
    assert!(message.contains("session/load"), "{message}");
    let load = call(
        &mut h,
        3,
        "session/load",
        json!({"sessionId": "plain", "cwd": "/", "mcpServers": []}),
        None,
    );
    assert!(matches!(load.answer, Answer::Stream { follow: None, .. }));
    assert!(model_choice::hosted(h.sql(), "plain").unwrap());
    // The mark survives a restart and goes with its Session.
    h.restart();
    assert!(model_choice::hosted(h.sql(), "plain").unwrap());
    assert_eq!(h.call("DELETE", "/sessions/plain", Value::Null).status, 204);
    assert!(!model_choice::hosted(h.sql(), "plain").unwrap());
}

#[test]
fn a_prompt_is_admitted_with_its_metadata_and_followed_to_its_stop_reason() {
    let mut h = Harness::new();
    let sid = new_session(&mut h);
    let meta = r#"{"author":{"id":"ada"}}"#;
    let served = prompt(&mut h, &sid, "hello", "r1", Some(meta));
    let Answer::Stream {
        messages,
        follow: Some(mut follow),
    } = served.answer
    else {
        panic!("expected a followed stream, got {:?}", served.answer);
    };
    assert!(messages.is_empty());
    // Admitted into an idle Session: running at once, its metadata stored.
    let read = h.read(&sid, "").json;
    assert_eq!(read["running"]["requestId"], "r1");
    let user = &read["messages"][0];
    assert_eq!(
        (user["role"].as_str(), user["text"].as_str()),
        (Some("user"), Some("hello"))
    );
    assert_eq!(user["meta"], json!({"author": {"id": "ada"}}));
    // Its own user message is not echoed back as an update.
    assert!(feed(&mut follow, &served.effects).is_empty());
    // The same requestId replays the same command (no second admission).
    let again = prompt(&mut h, &sid, "hello", "r1", Some(meta));
    assert!(matches!(
        again.answer,
        Answer::Stream {
            follow: Some(_),
            ..
        }
    ));
    assert!(h.read(&sid, "").json["pending"]
        .as_array()
        .unwrap()
        .is_empty());
    // session/cancel stops it: the follow answers `cancelled`.
    let cancel = post(
        &mut h,
        &json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
            .to_string(),
        Some(meta),
    );
    assert!(matches!(cancel.answer, Answer::Accepted));
    let out = feed(&mut follow, &cancel.effects);
    assert_eq!(
        out.last().unwrap(),
        &json!({"jsonrpc": "2.0", "id": 9, "result": {"stopReason": "cancelled"}})
    );
    assert!(follow.done());
    // Replayed after it settled: the stop reason at once.
    let late = prompt(&mut h, &sid, "hello", "r1", Some(meta));
    let Answer::Stream {
        messages,
        follow: None,
    } = late.answer
    else {
        panic!("{:?}", late.answer)
    };
    assert_eq!(
        serde_json::from_str::<Value>(&messages[0]).unwrap()["result"]["stopReason"],
        "cancelled"
    );
    // Other input under that requestId is a conflict, named.
    let (code, message) = error_of(&prompt(&mut h, &sid, "other", "r1", Some(meta)));
    assert_eq!(code, rpc::SERVER_ERROR);
    assert!(message.contains("r1"), "{message}");
    match prompt(&mut h, &sid, "other", "r1", Some(meta)).answer {
        Answer::Failed { status, body } => {
            assert_eq!(status, 409, "the contract's status");
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["error"]["data"]["code"], "request_conflict");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[test]
fn cancel_follows_the_identity_rules() {
    let mut h = Harness::with_meta(MetaPolicy::new(None, Some("$.author.id")).unwrap());
    let sid = new_session(&mut h);
    let ada = r#"{"author":{"id":"ada"}}"#;
    let bob = r#"{"author":{"id":"bob"}}"#;
    let first = prompt(&mut h, &sid, "ada runs", "a1", Some(ada));
    assert!(matches!(
        first.answer,
        Answer::Stream {
            follow: Some(_),
            ..
        }
    ));
    assert!(matches!(
        prompt(&mut h, &sid, "bob waits", "b1", Some(bob)).answer,
        Answer::Stream {
            follow: Some(_),
            ..
        }
    ));
    let cancel =
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
            .to_string();
    // Bob's cancel takes only Bob's queued prompt; Ada's turn runs on.
    let served = post(&mut h, &cancel, Some(bob));
    assert!(matches!(served.answer, Answer::Accepted));
    let read = h.read(&sid, "").json;
    assert_eq!(read["running"]["requestId"], "a1");
    assert!(read["pending"].as_array().unwrap().is_empty());
    assert_eq!(served.effects.settled.len(), 1);
    // A refused cancel is an HTTP refusal (a notification has no response).
    let missing =
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "gone"}})
            .to_string();
    assert!(
        matches!(post(&mut h, &missing, Some(ada)).answer, Answer::Refused(ref e) if e.code() == "session_not_found")
    );
    // Unknown notifications are ignored.
    let other = json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}})
        .to_string();
    assert!(matches!(
        post(&mut h, &other, None).answer,
        Answer::Accepted
    ));
}

#[test]
fn load_replays_the_newest_page() {
    let mut h = Harness::new();
    let sid = new_session(&mut h);
    let images = json!({"sessionId": sid, "prompt": [
        {"type": "text", "text": "look"},
        {"type": "resource_link", "name": "spec", "uri": "file:///spec.md"},
        {"type": "image", "mimeType": "image/png", "data": "AAAA"}]});
    assert!(matches!(
        call(&mut h, 5, "session/prompt", images, None).answer,
        Answer::Stream { .. }
    ));
    let load = call(
        &mut h,
        6,
        "session/load",
        json!({"sessionId": sid, "cwd": "/", "mcpServers": []}),
        None,
    );
    let Answer::Stream {
        messages,
        follow: None,
    } = load.answer
    else {
        panic!("{:?}", load.answer)
    };
    let values: Vec<Value> = messages
        .iter()
        .map(|m| serde_json::from_str(m).unwrap())
        .collect();
    assert_eq!(values.len(), 3, "{values:?}");
    assert_eq!(
        values[0]["params"]["update"]["content"]["text"],
        "look\nspec: file:///spec.md"
    );
    assert_eq!(values[1]["params"]["update"]["content"]["type"], "image");
    assert_eq!(values[2], json!({"jsonrpc": "2.0", "id": 6, "result": {}}));
}
