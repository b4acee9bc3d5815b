//! The run state machine over real SQLite: claim, steps, retries on a
//! durable timer, restarts mid-turn, steer, cancel, and exactly-once
//! settlement.

mod common;

use common::Harness;
use serde_json::json;
use shiitake::model::{Answer, ModelItem, Role, Usage};
use shiitake::run::{
    complete_step, fail_attempt, next_deadline, reconcile, Attempts, FailOutcome, Failure,
    Reconciled, Step, StepOutcome,
};
use shiitake::sql::Sql;
use shiitake::store::{Store, Terminal};

const ATTEMPTS: Attempts = Attempts { max: 3 };

fn answer(text: &str) -> Answer {
    Answer::new(
        text,
        Some(Usage {
            input_tokens: 10,
            output_tokens: 2,
            ..Usage::default()
        }),
        Vec::new(),
    )
}

/// The text of each plain message of a model context.
fn texts(step: &Step) -> Vec<&str> {
    step.context
        .iter()
        .filter_map(|item| match item {
            ModelItem::Message(m) => Some(m.text.as_str()),
            _ => None,
        })
        .collect()
}

fn failure(retryable: bool, diagnostic: &str) -> Failure {
    Failure {
        retryable,
        diagnostic: diagnostic.into(),
    }
}

fn claim(h: &mut Harness, live: &[&str]) -> Vec<Step> {
    let live: Vec<String> = live.iter().map(|s| s.to_string()).collect();
    // Prompts admitted into an idle Session are claimed by their admission;
    // until a restart this instance has not started them (fresh).
    let fresh = !h.restarted;
    let Reconciled { steps, settled, .. } = h
        .with_ctx(|ctx| {
            reconcile(
                ctx,
                &|id| live.iter().any(|l| l == id),
                &|_| fresh,
                ATTEMPTS,
                &shiitake::budget::Limits::NONE,
            )
        })
        .unwrap();
    assert!(settled.is_empty(), "{settled:?}");
    steps
}

fn settlement(h: &mut Harness, session: &str, command: &str) -> serde_json::Value {
    let r = h.call(
        "GET",
        &format!("/sessions/{session}/settlement?commandId={command}"),
        json!(null),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    r.json
}

fn roles(h: &mut Harness, session: &str) -> Vec<(String, String)> {
    h.read(session, "").json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().into(),
                m["text"].as_str().unwrap().into(),
            )
        })
        .collect()
}

#[test]
fn a_prompt_runs_to_one_settlement_and_queues_behind_the_running_turn() {
    let mut h = Harness::new();
    h.session("s");
    h.command(
        "s",
        json!({"type":"operator","requestId":"o","text":"be brief"}),
    );
    let first = h.prompt("s", "r1", "hello").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = h.prompt("s", "r2", "again").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(settlement(&mut h, "s", &first), json!(null));
    // Admitted into an idle Session, the first prompt started its turn in
    // its admission's write; the second waits.
    let read = h.read("s", "").json;
    assert_eq!(read["running"]["commandId"], first.as_str());
    assert_eq!(read["running"]["attempt"], 1);
    assert_eq!(read["messages"][1]["role"], "user");
    assert_eq!(read["pending"][0]["commandId"], second.as_str());

    let steps = claim(&mut h, &[]);
    assert_eq!(steps.len(), 1, "one running turn per Session");
    let step = &steps[0];
    assert_eq!(
        (step.command_id.as_str(), step.attempt),
        (first.as_str(), 1)
    );
    let context: Vec<_> = step
        .context
        .iter()
        .map(|item| match item {
            ModelItem::Message(m) => (m.role, m.text.as_str()),
            other => panic!("not a message: {other:?}"),
        })
        .collect();
    assert_eq!(
        context,
        vec![(Role::User, "[operator] be brief"), (Role::User, "hello")]
    );
    let read = h.read("s", "").json;
    assert_eq!(read["running"]["commandId"], first.as_str());
    assert_eq!(read["pending"][0]["commandId"], second.as_str());
    assert!(
        claim(&mut h, &[&first]).is_empty(),
        "a live turn is not claimed twice"
    );

    let done = h
        .with_ctx(|ctx| complete_step(ctx, "s", &first, 1, &answer("hi there")))
        .unwrap();
    let StepOutcome::Settled {
        settled,
        answer: answer_body,
        next,
    } = done
    else {
        panic!("{done:?}")
    };
    assert_eq!(settled.len(), 1);
    assert!(answer_body.contains("hi there"));
    // The queue's next prompt started in the settling write.
    let next = next.expect("the next turn is claimed with the settlement");
    assert_eq!(
        (next.command_id.as_str(), next.attempt),
        (second.as_str(), 1)
    );
    let texts: Vec<_> = texts(&next);
    assert_eq!(
        texts,
        vec!["[operator] be brief", "hello", "hi there", "again"]
    );
    let s = settlement(&mut h, "s", &first);
    assert_eq!(
        s,
        json!({"commandId": first, "terminal":"completed","answer":"hi there",
        "usage":{"inputTokens":10,"outputTokens":2},"toolCallCount":0})
    );
    let assistant = &h.read("s", "").json["messages"][2];
    assert_eq!(
        assistant["usage"],
        json!({"inputTokens":10,"outputTokens":2})
    );
    // The same step reported again (a duplicate delivery) changes nothing.
    let again = h
        .with_ctx(|ctx| complete_step(ctx, "s", &first, 1, &answer("hi there")))
        .unwrap();
    assert_eq!(again, StepOutcome::Stale);
    assert_eq!(
        roles(&mut h, "s"),
        vec![
            ("operator".into(), "be brief".into()),
            ("user".into(), "hello".into()),
            ("assistant".into(), "hi there".into()),
            ("user".into(), "again".into())
        ]
    );
    let read = h.read("s", "").json;
    assert_eq!(read["running"]["commandId"], second.as_str());
    assert!(read["pending"].as_array().unwrap().is_empty());
    // Live in the instance that settled the first: not claimed again.
    assert!(claim(&mut h, &[&second]).is_empty());
}

#[test]
fn sessions_run_independently() {
    let mut h = Harness::new();
    for s in ["a", "b"] {
        h.session(s);
        h.prompt(s, "r", "x");
    }
    let steps = claim(&mut h, &[]);
    let mut sessions: Vec<_> = steps.iter().map(|s| s.session_id.as_str()).collect();
    sessions.sort();
    assert_eq!(sessions, vec!["a", "b"]);
}

#[test]
fn a_restart_mid_turn_resumes_once_and_the_stale_attempt_appends_nothing() {
    let mut h = Harness::new();
    h.session("s");
    let id = h.prompt("s", "r", "hello").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = claim(&mut h, &[]).remove(0);
    h.restart(); // the instance died mid-stream: nothing is live any more
    let now = h.now_ms;
    let deadline = next_deadline(Store::new(h.sql()), now, &|_| false).unwrap();
    assert_eq!(deadline, Some(now), "an orphaned turn is due at once");
    let resumed = claim(&mut h, &[]).remove(0);
    assert_eq!(
        (resumed.command_id.as_str(), resumed.attempt),
        (id.as_str(), 2)
    );
    assert_eq!(
        resumed.context, first.context,
        "the user message was appended once"
    );
    // The old attempt's answer arrives late: refused.
    let stale = h
        .with_ctx(|ctx| complete_step(ctx, "s", &id, 1, &answer("old")))
        .unwrap();
    assert_eq!(stale, StepOutcome::Stale);
    h.with_ctx(|ctx| complete_step(ctx, "s", &id, 2, &answer("new")))
        .unwrap();
    assert_eq!(
        roles(&mut h, "s"),
        vec![
            ("user".into(), "hello".into()),
            ("assistant".into(), "new".into())
        ]
    );
}

#[test]
fn restarts_past_the_attempt_limit_settle_interrupted() {
    let mut h = Harness::new();
    h.session("s");
    let id = h.prompt("s", "r", "hello").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    for attempt in 1..=ATTEMPTS.max {
        let step = claim(&mut h, &[]).remove(0);
        assert_eq!(step.attempt, attempt);
        h.restart();
    }
    let Reconciled { steps, settled, .. } = h
        .with_ctx(|ctx| {
            reconcile(
                ctx,
                &|_| false,
                &|_| false,
                ATTEMPTS,
                &shiitake::budget::Limits::NONE,
            )
        })
        .unwrap();
    assert!(steps.is_empty());
    assert_eq!(settled.len(), 1);
    let s = settlement(&mut h, "s", &id);
    assert_eq!(s["terminal"], "interrupted");
    assert!(
        s["diagnostic"].as_str().unwrap().contains("interrupted"),
        "{s}"
    );
    assert_eq!(
        next_deadline(Store::new(h.sql()), h.now_ms, &|_| false).unwrap(),
        None
    );
}

#[test]
fn failed_calls_retry_on_a_durable_timer_then_fail_with_a_diagnostic() {
    let mut h = Harness::new();
    h.session("s");
    let id = h.prompt("s", "r", "hello").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let step = claim(&mut h, &[]).remove(0);
    let out = h
        .with_ctx(|ctx| {
            fail_attempt(
                ctx,
                "s",
                &id,
                step.attempt,
                &failure(true, "provider answered HTTP 500: boom"),
                None,
                ATTEMPTS,
                3_000,
            )
        })
        .unwrap();
    let FailOutcome::Retry { retry_at } = out else {
        panic!("{out:?}")
    };
    assert_eq!(retry_at, h.now_ms + 3_000);
    // Not due before the timer, even across a restart; due at it.
    h.restart();
    assert!(claim(&mut h, &[]).is_empty());
    assert_eq!(
        next_deadline(Store::new(h.sql()), h.now_ms, &|_| false).unwrap(),
        Some(retry_at)
    );
    h.now_ms = retry_at;
    let step = claim(&mut h, &[]).remove(0);
    assert_eq!(step.attempt, 2);
    h.with_ctx(|ctx| {
        fail_attempt(
            ctx,
            "s",
            &id,
            2,
            &failure(true, "provider answered HTTP 429: slow down"),
            None,
            ATTEMPTS,
            6_000,
        )
    })
    .unwrap();
    h.now_ms += 6_000;
    let step = claim(&mut h, &[]).remove(0);
    let out = h
        .with_ctx(|ctx| {
            fail_attempt(
                ctx,
                "s",
                &id,
                step.attempt,
                &failure(true, "provider answered HTTP 500: boom"),
                None,
                ATTEMPTS,
                12_000,
            )
        })
        .unwrap();
    assert!(matches!(out, FailOutcome::Settled(_)));
    let s = settlement(&mut h, "s", &id);
    assert_eq!(s["terminal"], "failed");
    assert!(
        s["diagnostic"].as_str().unwrap().contains("HTTP 500"),
        "{s}"
    );
    assert_eq!(s["answer"], json!(null));

    // A call that cannot succeed fails at once.
    let id = h.prompt("s", "r2", "again").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let step = claim(&mut h, &[]).remove(0);
    let out = h
        .with_ctx(|ctx| {
            fail_attempt(
                ctx,
                "s",
                &id,
                step.attempt,
                &failure(false, "provider answered HTTP 400: bad"),
                None,
                ATTEMPTS,
                3_000,
            )
        })
        .unwrap();
    assert!(matches!(out, FailOutcome::Settled(_)));
    assert_eq!(settlement(&mut h, "s", &id)["terminal"], "failed");
}

#[test]
fn steer_prompts_join_the_running_turn_and_follow_ups_wait() {
    let mut h = Harness::new();
    h.session("s");
    let head = h.prompt("s", "r1", "write a poem").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    claim(&mut h, &[]);
    let follow = h.prompt("s", "r2", "then a limerick").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let steer = h
        .command(
            "s",
            json!({"type":"prompt","requestId":"r3","text":"make it rhyme","delivery":"steer"}),
        )
        .json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = h
        .with_ctx(|ctx| complete_step(ctx, "s", &head, 1, &answer("roses")))
        .unwrap();
    let StepOutcome::Continue(step) = out else {
        panic!("{out:?}")
    };
    let texts: Vec<_> = texts(&step);
    assert_eq!(texts, vec!["write a poem", "roses", "make it rhyme"]);
    let pending: Vec<_> = h.pending("s").into_iter().map(|p| p.0).collect();
    assert_eq!(
        pending,
        vec![follow.clone()],
        "the follow-up waits for the next turn"
    );
    h.with_ctx(|ctx| complete_step(ctx, "s", &head, 1, &answer("roses, rhymed")))
        .unwrap();
    for id in [&head, &steer] {
        let s = settlement(&mut h, "s", id);
        assert_eq!(
            (s["terminal"].as_str(), s["answer"].as_str()),
            (Some("completed"), Some("roses, rhymed"))
        );
        assert_eq!(
            s["usage"],
            json!({"inputTokens":20,"outputTokens":4}),
            "usage sums the steps"
        );
    }
    assert_eq!(claim(&mut h, &[])[0].command_id, follow);
}

#[test]
fn cancel_and_abort_stop_the_running_turn_and_its_answer_is_dropped() {
    let mut h = Harness::new();
    h.session("s");
    let running = h.prompt("s", "r1", "long task").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    claim(&mut h, &[]);
    let only_pending = h.command(
        "s",
        json!({"type":"cancel","commandId": running,"onlyIfPending": true}),
    );
    assert_eq!(only_pending.json["status"], "too_late");
    let c = h.command("s", json!({"type":"cancel","commandId": running}));
    assert_eq!(
        c.json,
        json!({"status":"cancelled","commandId": running,"text":"long task"})
    );
    assert_eq!(settlement(&mut h, "s", &running)["terminal"], "cancelled");
    let late = h
        .with_ctx(|ctx| complete_step(ctx, "s", &running, 1, &answer("too late")))
        .unwrap();
    assert_eq!(late, StepOutcome::Stale);
    assert_eq!(
        roles(&mut h, "s"),
        vec![("user".into(), "long task".into())]
    );
    let settled = h.command("s", json!({"type":"cancel","commandId": running}));
    assert_eq!(settled.json["status"], "cancelled", "idempotent");

    let a = h.prompt("s", "r2", "one").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    claim(&mut h, &[]);
    let b = h.prompt("s", "r3", "two").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let abort = h.command("s", json!({"type":"abort"}));
    let ids: Vec<_> = abort.json["cancelled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["commandId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, vec![a.clone(), b.clone()]);
    for id in [&a, &b] {
        assert_eq!(settlement(&mut h, "s", id)["terminal"], "cancelled");
    }
    assert!(h.read("s", "").json["running"].is_null());

    let done = h.prompt("s", "r4", "quick").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    claim(&mut h, &[]);
    h.with_ctx(|ctx| complete_step(ctx, "s", &done, 1, &answer("ok")))
        .unwrap();
    let c = h.command("s", json!({"type":"cancel","commandId": done}));
    assert_eq!(c.json["status"], "too_late");
}

#[test]
fn settlement_reads_are_bounded_and_exact() {
    let mut h = Harness::new();
    h.session("s");
    let op = h
        .command(
            "s",
            json!({"type":"operator","requestId":"o","text":"note"}),
        )
        .json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(settlement(&mut h, "s", &op)["terminal"], "completed");
    for (query, status) in [
        ("", 400),
        ("?commandId=", 400),
        ("?commandId=x&timeoutMs=-1", 400),
        ("?commandId=x&timeoutMs=abc", 400),
        ("?commandId=cmd_unknown", 404),
        ("?commandId=x&bogus=1", 400),
    ] {
        let r = h.call(
            "GET",
            &format!("/sessions/s/settlement{query}"),
            json!(null),
        );
        assert_eq!(r.status, status, "{query}: {}", r.json);
    }
    let r = h.call(
        "GET",
        &format!("/sessions/s/settlement?commandId={op}&timeoutMs=30000"),
        json!(null),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn an_empty_answer_is_kept_in_the_transcript_but_not_sent_to_the_model() {
    let mut h = Harness::new();
    h.session("s");
    let first = h.prompt("s", "r1", "say nothing").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    claim(&mut h, &[]);
    h.with_ctx(|ctx| complete_step(ctx, "s", &first, 1, &answer("")))
        .unwrap();
    h.prompt("s", "r2", "now say something");
    let step = claim(&mut h, &[]).remove(0);
    let texts: Vec<_> = texts(&step);
    assert_eq!(texts, vec!["say nothing", "now say something"]);
    assert_eq!(
        roles(&mut h, "s").len(),
        3,
        "the empty answer is still a message"
    );
}

#[test]
fn with_a_single_attempt_a_fresh_turn_still_runs_once() {
    let mut h = Harness::new();
    h.session("s");
    let id = h.prompt("s", "r", "hello").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let one = Attempts { max: 1 };
    let Reconciled { steps, settled, .. } = h
        .with_ctx(|ctx| {
            reconcile(
                ctx,
                &|_| false,
                &|_| true,
                one,
                &shiitake::budget::Limits::NONE,
            )
        })
        .unwrap();
    assert!(settled.is_empty(), "{settled:?}");
    assert_eq!(
        (steps[0].command_id.as_str(), steps[0].attempt),
        (id.as_str(), 1)
    );
    // After a restart the same turn has used its only attempt.
    h.restart();
    let Reconciled { steps, settled, .. } = h
        .with_ctx(|ctx| {
            reconcile(
                ctx,
                &|_| false,
                &|_| false,
                one,
                &shiitake::budget::Limits::NONE,
            )
        })
        .unwrap();
    assert!(steps.is_empty());
    assert_eq!(settled[0].1.terminal, Terminal::Interrupted);
}

#[test]
fn a_settlement_wait_longer_than_the_bound_is_clamped_not_refused() {
    use shiitake::http::{handle, Hosted, HttpRequest};
    let mut h = Harness::new();
    h.session("s");
    h.occupy("s");
    let queued = h.prompt("s", "r2", "waits").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    for (asked, parked) in [
        ("1", 1),
        ("30000", 30_000),
        ("30001", 30_000),
        ("86400000", 30_000),
    ] {
        let req = HttpRequest {
            method: "GET".into(),
            path: "/sessions/s/settlement".into(),
            query: format!("commandId={queued}&timeoutMs={asked}"),
            meta: None,
            body: Vec::new(),
            waited: false,
        };
        let r = h.with_ctx(|ctx| handle(ctx, &Hosted::without_models(None), &req));
        assert_eq!(r.status, 200, "timeoutMs={asked}");
        let park = r.effects.park.expect("an unsettled command parks the poll");
        assert_eq!(park.timeout_ms, parked, "timeoutMs={asked}");
    }
}

#[test]
fn a_turn_spared_by_a_reset_it_did_not_cause_resumes_at_its_attempt() {
    let mut h = Harness::new();
    h.session("s");
    h.session("t");
    let spared = h.prompt("s", "r", "bystander").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let culprit = h.prompt("t", "r", "traps").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    claim(&mut h, &[]);
    h.restart();
    // A first crash counts for both: attempt 2.
    let steps = claim(&mut h, &[]);
    assert!(steps.iter().all(|s| s.attempt == 2), "{steps:?}");
    // A wasm reset the other Session caused: the host names `spared` fresh.
    for _ in 0..5 {
        let Reconciled {
            steps,
            settled,
            running,
            ..
        } = h
            .with_ctx(|ctx| {
                reconcile(
                    ctx,
                    &|_| false,
                    &|id| id == spared,
                    ATTEMPTS,
                    &shiitake::budget::Limits::NONE,
                )
            })
            .unwrap();
        let attempts: Vec<_> = steps
            .iter()
            .map(|s| (s.command_id.as_str(), s.attempt))
            .collect();
        if settled.is_empty() {
            assert_eq!(attempts, vec![(spared.as_str(), 2), (culprit.as_str(), 3)]);
            assert_eq!(running, vec![spared.clone(), culprit.clone()]);
        } else {
            // The culprit reached the attempt limit alone; the host may
            // drop what it held for it.
            assert_eq!(attempts, vec![(spared.as_str(), 2)]);
            assert_eq!(running, vec![spared.clone()]);
            assert_eq!(settled.len(), 1);
            assert_eq!(settled[0].1.command_id, culprit);
            assert_eq!(settlement(&mut h, "t", &culprit)["terminal"], "interrupted");
            return;
        }
    }
    panic!("the culprit never reached the attempt limit");
}

/// A spared turn whose model call a wasm reset cut off: that call was sent
/// and may be billed, so it is counted `unknown` once, at the attempt the
/// turn holds and calls again; a spared turn between calls, a settled one
/// and an unknown head count nothing.
#[test]
fn a_model_call_a_reset_cut_off_in_a_spared_turn_is_counted_unknown_once() {
    let mut h = Harness::new();
    h.session("s");
    h.session("t");
    let cut = h.prompt("s", "r", "its call was in flight").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let between = h.prompt("t", "r", "between its calls").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let steps = claim(&mut h, &[]);
    assert!(steps.iter().all(|s| s.attempt == 1), "{steps:?}");
    let unknown = |h: &mut Harness, session: &str| {
        h.call(
            "GET",
            &format!("/usage?sessionId={session}"),
            serde_json::Value::Null,
        )
        .json["totals"]["unknown"]
            .as_u64()
            .unwrap()
    };
    // The trap report: `cut`'s call was in flight, `between`'s was not
    // (the host passes only cut-off heads), plus a head nothing runs under.
    h.with_ctx(|ctx| shiitake::run::count_cut_off(ctx, &[(cut.as_str(), "s"), ("c_nothing", "t")]))
        .unwrap();
    assert_eq!(unknown(&mut h, "s"), 1, "the cut-off call");
    assert_eq!(unknown(&mut h, "t"), 0);
    // The spared turns resume at the attempt they hold: no second count.
    let steps = h
        .with_ctx(|ctx| {
            reconcile(
                ctx,
                &|_| false,
                &|id| id == cut || id == between,
                ATTEMPTS,
                &shiitake::budget::Limits::NONE,
            )
        })
        .unwrap()
        .steps;
    assert!(steps.iter().all(|s| s.attempt == 1), "{steps:?}");
    assert_eq!(unknown(&mut h, "s"), 1);
    assert_eq!(unknown(&mut h, "t"), 0);
    // A settled turn is not counted again.
    for step in &steps {
        let session = step.session_id.clone();
        let done = h
            .with_ctx(|ctx| complete_step(ctx, &session, &step.command_id, 1, &answer("done")))
            .unwrap();
        assert!(matches!(done, StepOutcome::Settled { .. }), "{done:?}");
    }
    h.with_ctx(|ctx| shiitake::run::count_cut_off(ctx, &[(cut.as_str(), "s")]))
        .unwrap();
    assert_eq!(unknown(&mut h, "s"), 1, "settled: nothing more");
}

/// A settled command keeps no second copy of what its messages hold: an
/// operator line and a completed prompt store a digest of their input and
/// a settlement without the row's own columns, yet every read, replay and
/// conflict answers as before; a cancelled prompt keeps its text.
#[test]
fn settled_commands_store_no_second_copy_and_answer_as_before() {
    let mut h = Harness::new();
    h.session("s");
    let text = "a long operator line ".repeat(8);
    let op = h.command("s", json!({"type":"operator","requestId":"o","text": text}));
    let op_id = op.json["commandId"].as_str().unwrap().to_owned();
    let p = h.prompt("s", "p", "hello there").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    claim(&mut h, &[]);
    h.with_ctx(|ctx| complete_step(ctx, "s", &p, 1, &answer("hi back")))
        .unwrap();
    let stored = |h: &mut Harness, id: &str| -> (String, String) {
        let rows = h
            .sql()
            .query(
                "SELECT input, settlement FROM commands WHERE command_id = ?",
                &[id.into()],
            )
            .unwrap();
        (rows[0].text(0).unwrap(), rows[0].text(1).unwrap())
    };
    for (id, copy) in [(&op_id, text.as_str()), (&p, "hello there")] {
        let (input, settlement) = stored(&mut h, id);
        assert!(input.starts_with("sha256:") && input.len() == 39, "{input}");
        assert!(!settlement.contains(id.as_str()) && !settlement.contains(copy));
    }
    // Served in full, in the settlement's own field order.
    let served = h.call(
        "GET",
        &format!("/sessions/s/settlement?commandId={p}"),
        json!(null),
    );
    let row = Store::new(h.sql()).command("s", &p).unwrap().unwrap();
    let body = row.settlement.unwrap();
    assert_eq!(
        served.json,
        json!({"commandId": p, "terminal": "completed", "answer": "hi back",
               "usage": {"inputTokens": 10, "outputTokens": 2}, "toolCallCount": 0})
    );
    assert!(body.starts_with("{\"commandId\""), "{body}");
    assert_eq!(
        settlement(&mut h, "s", &op_id),
        json!({"commandId": op_id, "terminal": "completed", "answer": null, "usage": null, "toolCallCount": 0})
    );
    // Replays compare against the digest.
    let again = h.command("s", json!({"type":"operator","requestId":"o","text": text}));
    assert_eq!(again.json["commandId"], op_id.as_str());
    assert_eq!(
        h.prompt("s", "p", "hello there").json["commandId"],
        p.as_str()
    );
    assert_eq!(h.prompt("s", "p", "hello theRe").status, 409);
    assert_eq!(
        h.command(
            "s",
            json!({"type":"operator","requestId":"o","text":"other"})
        )
        .status,
        409
    );
    // A cancelled prompt keeps its text: a repeated cancel answers it.
    let q = h.prompt("s", "q", "keep me").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    claim(&mut h, &[]);
    for _ in 0..2 {
        let c = h.command("s", json!({"type":"cancel","commandId": q}));
        assert_eq!(c.json["text"], "keep me");
    }
    assert!(stored(&mut h, &q).0.contains("keep me"));
}

#[test]
fn a_span_is_written_with_the_outcome_it_ends_and_dropped_with_a_stale_one() {
    let spans = |h: &Harness| -> Vec<String> {
        let has = !h
            .sql()
            .query(
                "SELECT 1 FROM sqlite_master WHERE name = 'shiitake_spans'",
                &[],
            )
            .unwrap()
            .is_empty();
        if !has {
            return Vec::new();
        }
        h.sql()
            .query("SELECT body FROM shiitake_spans ORDER BY seq", &[])
            .unwrap()
            .iter()
            .map(|r| r.text(0).unwrap())
            .collect()
    };
    let mut h = Harness::new();
    h.session("s");
    let id = h.prompt("s", "r", "hello").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    claim(&mut h, &[]);
    h.restart();
    claim(&mut h, &[]);
    // The old attempt's answer, with its span: refused, nothing written.
    let stale = h
        .with_ctx(|ctx| {
            ctx.spans.push(r#"{"name":"old"}"#.into());
            complete_step(ctx, "s", &id, 1, &answer("old"))
        })
        .unwrap();
    assert_eq!(stale, StepOutcome::Stale);
    assert!(spans(&h).is_empty(), "no span without its outcome");
    // Without spans (no telemetry) the step writes no span table.
    h.with_ctx(|ctx| complete_step(ctx, "s", &id, 2, &answer("new")))
        .unwrap();
    assert!(spans(&h).is_empty());
    // The next turn's answer carries its span: written with it.
    let next = h.prompt("s", "r2", "again").json["commandId"]
        .as_str()
        .unwrap()
        .to_owned();
    let attempt = claim(&mut h, &[]).remove(0).attempt;
    let done = h
        .with_ctx(|ctx| {
            ctx.spans.push(r#"{"name":"chat"}"#.into());
            complete_step(ctx, "s", &next, attempt, &answer("done"))
        })
        .unwrap();
    assert!(matches!(done, StepOutcome::Settled { .. }), "{done:?}");
    assert_eq!(spans(&h), [r#"{"name":"chat"}"#]);
}
