//! Host metadata and author identity (seed: "Host metadata"): schema and
//! cap, metadata on cancellations, `latestPending` per principal, and cancel
//! refused across principals while an unbound owner keeps authority.

mod common;

use common::Harness;
use serde_json::json;
use shiitake::meta::MetaPolicy;
use shiitake::model::Answer;
use shiitake::run::{complete_step, StepOutcome};

const SCHEMA: &str = r#"{
  "type": "object",
  "required": ["author"],
  "properties": {"author": {"type": "object", "required": ["id"],
    "properties": {"id": {"type": "string"}, "name": {"type": "string"}}}}
}"#;

fn harness() -> Harness {
    let mut h = Harness::with_meta(MetaPolicy::new(Some(SCHEMA), Some("$.author.id")).unwrap());
    h.session("s");
    h
}

fn meta(id: &str) -> String {
    json!({"author": {"id": id, "name": format!("name of {id}")}}).to_string()
}

fn prompt_as(h: &mut Harness, who: Option<&str>, request: &str, text: &str) -> common::Reply {
    let body = json!({"type":"prompt","requestId": request,"text": text}).to_string();
    let m = who.map(meta);
    h.request("POST", "/sessions/s/commands", &body, m.as_deref())
}

fn command_as(h: &mut Harness, who: Option<&str>, body: serde_json::Value) -> common::Reply {
    let m = who.map(meta);
    h.request(
        "POST",
        "/sessions/s/commands",
        &body.to_string(),
        m.as_deref(),
    )
}

fn latest_as(h: &mut Harness, who: Option<&str>) -> serde_json::Value {
    let m = who.map(meta);
    let r = h.request("GET", "/sessions/s/pending/latest", "", m.as_deref());
    assert_eq!(r.status, 200, "{}", r.json);
    r.json
}

#[test]
fn metadata_must_match_the_hosts_schema() {
    let mut h = harness();
    let body = json!({"type":"prompt","requestId":"r","text":"x"}).to_string();
    let bad = h.request(
        "POST",
        "/sessions/s/commands",
        &body,
        Some(r#"{"author":{"id":7}}"#),
    );
    assert_eq!(
        (bad.status, bad.json["error"]["code"].as_str()),
        (400, Some("invalid_meta"))
    );
    assert!(bad.json["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/author/id"));
    let missing = h.request(
        "POST",
        "/sessions/s/commands",
        &body,
        Some(r#"{"channel":"web"}"#),
    );
    assert_eq!(missing.status, 400);
    assert_eq!(prompt_as(&mut h, Some("ada"), "r", "x").status, 200);
    assert!(
        h.read("s", "").json["running"].is_object(),
        "nothing refused was written"
    );
}

#[test]
fn latest_pending_is_per_principal_with_exact_text_and_meta() {
    let mut h = harness();
    prompt_as(&mut h, Some("ada"), "occupier", "runs first");
    let a1 = prompt_as(&mut h, Some("ada"), "a1", "ada one").json["commandId"].clone();
    let b1 = prompt_as(&mut h, Some("bob"), "b1", "bob one").json["commandId"].clone();
    let a2 = command_as(
        &mut h,
        Some("ada"),
        json!({"type":"prompt","requestId":"a2","text":"ada two","delivery":"steer",
               "images":[{"mediaType":"image/png","data":"AAAA"}]}),
    )
    .json["commandId"]
        .clone();
    let ada = latest_as(&mut h, Some("ada"));
    assert_eq!(ada["commandId"], a2);
    assert_eq!(ada["text"], "ada two");
    assert_eq!(ada["delivery"], "steer");
    assert_eq!(ada["images"][0]["data"], "AAAA");
    assert_eq!(ada["meta"]["author"]["id"], "ada");
    assert_eq!(ada["position"], 3);
    let bob = latest_as(&mut h, Some("bob"));
    assert_eq!(bob["commandId"], b1);
    assert_eq!(bob["position"], 2, "its place in the whole queue");
    assert_eq!(latest_as(&mut h, Some("cy")), json!(null));
    // An unbound request (single-user host) sees the newest of all.
    assert_eq!(latest_as(&mut h, None)["commandId"], a2);
    // Cancelling ada's newest leaves her older one as her latest.
    command_as(
        &mut h,
        Some("ada"),
        json!({"type":"cancel","commandId": a2}),
    );
    let ada = latest_as(&mut h, Some("ada"));
    assert_eq!(ada["commandId"], a1);
    assert_eq!(ada["position"], 1);
    // A settled command ahead leaves the queue: bob's moves up.
    command_as(
        &mut h,
        Some("ada"),
        json!({"type":"cancel","commandId": a1}),
    );
    assert_eq!(latest_as(&mut h, Some("bob"))["position"], 1);
}

#[test]
fn cancel_is_refused_across_principals_and_an_unbound_owner_keeps_authority() {
    let mut h = harness();
    prompt_as(&mut h, Some("ada"), "occupier", "runs first");
    let ada = prompt_as(&mut h, Some("ada"), "a1", "ada's").json["commandId"].clone();
    let bob = prompt_as(&mut h, Some("bob"), "b1", "bob's").json["commandId"].clone();

    let refused = command_as(
        &mut h,
        Some("bob"),
        json!({"type":"cancel","commandId": ada}),
    );
    assert_eq!(
        (refused.status, refused.json["error"]["code"].as_str()),
        (403, Some("not_owner"))
    );
    assert_eq!(h.pending("s").len(), 2, "nothing was cancelled");

    let own = command_as(
        &mut h,
        Some("bob"),
        json!({"type":"cancel","commandId": bob}),
    );
    assert_eq!(own.json["status"], "cancelled");
    // The replayed cancel is checked the same way.
    let replay = command_as(
        &mut h,
        Some("ada"),
        json!({"type":"cancel","commandId": bob}),
    );
    assert_eq!(replay.status, 403);
    h.restart();
    let after = command_as(
        &mut h,
        Some("ada"),
        json!({"type":"cancel","commandId": bob}),
    );
    assert_eq!(after.status, 403, "also after reopening");

    // The cancelled command's settlement carries its cancellation's metadata.
    let s = h.call(
        "GET",
        &format!("/sessions/s/settlement?commandId={}", bob.as_str().unwrap()),
        json!(null),
    );
    assert_eq!(s.json["terminal"], "cancelled");
    assert_eq!(s.json["meta"]["author"]["id"], "bob");

    // An unbound owner (no metadata) may cancel anyone's work.
    let unbound = command_as(&mut h, None, json!({"type":"cancel","commandId": ada}));
    assert_eq!(unbound.json["status"], "cancelled");
    let s = h.call(
        "GET",
        &format!("/sessions/s/settlement?commandId={}", ada.as_str().unwrap()),
        json!(null),
    );
    assert!(s.json.get("meta").is_none(), "{}", s.json);
}

#[test]
fn without_an_identity_path_metadata_binds_nothing() {
    let mut h = Harness::new();
    h.session("s");
    h.occupy("s");
    let ada = prompt_as(&mut h, Some("ada"), "a1", "ada's").json["commandId"].clone();
    let c = command_as(
        &mut h,
        Some("bob"),
        json!({"type":"cancel","commandId": ada}),
    );
    assert_eq!(
        c.json["status"], "cancelled",
        "a single-user host needs no configuration"
    );
}

/// Ada's turn with Bob's steer joined to it (after one model step).
fn shared_turn(h: &mut Harness) -> (String, String) {
    let id = |r: common::Reply| r.json["commandId"].as_str().unwrap().to_owned();
    let ada = id(prompt_as(h, Some("ada"), "a1", "ada's question"));
    let bob = id(command_as(
        h,
        Some("bob"),
        json!({"type":"prompt","requestId":"b1","text":"bob's steer","delivery":"steer"}),
    ));
    let answer = Answer::new("first step", None, Vec::new());
    let out = h
        .with_ctx(|ctx| complete_step(ctx, "s", &ada, 1, &answer))
        .unwrap();
    assert!(
        matches!(out, StepOutcome::Continue(_)),
        "bob's steer joined"
    );
    assert_eq!(h.read("s", "").json["running"]["commandId"], ada);
    (ada, bob)
}

fn terminal(h: &mut Harness, command: &str) -> serde_json::Value {
    let r = h.call(
        "GET",
        &format!("/sessions/s/settlement?commandId={command}"),
        json!(null),
    );
    r.json["terminal"].clone()
}

#[test]
fn cancelling_ones_joined_steer_never_stops_anothers_turn() {
    let mut h = harness();
    let (ada, bob) = shared_turn(&mut h);
    let own = command_as(
        &mut h,
        Some("bob"),
        json!({"type":"cancel","commandId": bob}),
    );
    assert_eq!(
        (own.status, own.json["status"].as_str()),
        (200, Some("too_late")),
        "{}",
        own.json
    );
    // Ada's own cancel is refused too: the turn holds Bob's steer.
    let hers = command_as(
        &mut h,
        Some("ada"),
        json!({"type":"cancel","commandId": ada}),
    );
    assert_eq!(hers.json["status"], "too_late", "{}", hers.json);
    for id in [&ada, &bob] {
        assert_eq!(terminal(&mut h, id), json!(null), "{id} still runs");
    }
    assert_eq!(h.read("s", "").json["running"]["commandId"], ada);
    // The unbound owner keeps full authority over the shared turn.
    let owner = command_as(&mut h, None, json!({"type":"cancel","commandId": bob}));
    assert_eq!(owner.json["status"], "cancelled");
    for id in [&ada, &bob] {
        assert_eq!(terminal(&mut h, id), "cancelled");
    }
}

#[test]
fn a_turn_of_ones_own_is_still_cancelled_with_its_steers() {
    let mut h = harness();
    let id = |r: common::Reply| r.json["commandId"].as_str().unwrap().to_owned();
    let head = id(prompt_as(&mut h, Some("ada"), "a1", "question"));
    let steer = id(command_as(
        &mut h,
        Some("ada"),
        json!({"type":"prompt","requestId":"a2","text":"more","delivery":"steer"}),
    ));
    let answer = Answer::new("step", None, Vec::new());
    h.with_ctx(|ctx| complete_step(ctx, "s", &head, 1, &answer))
        .unwrap();
    let c = command_as(
        &mut h,
        Some("ada"),
        json!({"type":"cancel","commandId": steer}),
    );
    assert_eq!(c.json["status"], "cancelled", "{}", c.json);
    for id in [&head, &steer] {
        assert_eq!(terminal(&mut h, id), "cancelled");
    }
}

#[test]
fn abort_cancels_only_the_principals_own_work() {
    let mut h = harness();
    let id = |r: common::Reply| r.json["commandId"].as_str().unwrap().to_owned();
    let (ada, bob_steer) = shared_turn(&mut h);
    let ada_queued = id(prompt_as(&mut h, Some("ada"), "a3", "ada later"));
    let bob_queued = id(prompt_as(&mut h, Some("bob"), "b3", "bob later"));

    let abort = command_as(&mut h, Some("bob"), json!({"type":"abort"}));
    assert_eq!(abort.status, 200, "{}", abort.json);
    let cancelled: Vec<&str> = abort.json["cancelled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["commandId"].as_str().unwrap())
        .collect();
    assert_eq!(
        cancelled,
        vec![bob_queued.as_str()],
        "only bob's queued prompt"
    );
    assert_eq!(terminal(&mut h, &bob_queued), "cancelled");
    for id in [&ada, &bob_steer, &ada_queued] {
        assert_eq!(terminal(&mut h, id), json!(null), "{id} untouched");
    }
    assert_eq!(h.read("s", "").json["running"]["commandId"], ada);

    // Ada cannot stop the shared turn either, only her queued prompt.
    let abort = command_as(&mut h, Some("ada"), json!({"type":"abort"}));
    assert_eq!(abort.json["cancelled"].as_array().unwrap().len(), 1);
    assert_eq!(terminal(&mut h, &ada_queued), "cancelled");
    assert_eq!(h.read("s", "").json["running"]["commandId"], ada);

    // The unbound owner's abort stops everything.
    let abort = command_as(&mut h, None, json!({"type":"abort"}));
    assert_eq!(abort.json["cancelled"].as_array().unwrap().len(), 2);
    assert_eq!(terminal(&mut h, &ada), "cancelled");
}
