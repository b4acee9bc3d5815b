//! Tool steps of a turn over real SQLite: calls recorded before they run,
//! one `tool` message per outcome, the next model context, the step bound,
//! and recovery after a restart mid-tool (replay-safe calls run again,
//! unsafe started ones are never re-run and report their outcome unknown).

mod common;

use common::Harness;
use serde_json::{json, Value};
use shiitake::http::{handle, Hosted, HttpRequest};
use shiitake::limits::TOOL_STEPS_PER_TURN_MAX;
use shiitake::model::{Answer, Image, ModelItem, ToolCall, Usage};
use shiitake::observe::Frame;
use shiitake::run::cancel;
use shiitake::run::tools::{
    mark_started, outcome_unknown, record_calls, record_result, recovery, CallsOutcome, Recovery,
    ResultOutcome, ToolOutput,
};
use shiitake::run::{
    complete_step, fail_attempt, reconcile, Attempts, FailOutcome, Failure, Reconciled, Step,
    StepOutcome,
};
use shiitake::sql::Sql;
use shiitake::store::Terminal;
use shiitake::transcript::Protocol;

const ATTEMPTS: Attempts = Attempts { max: 3 };

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn calls_answer(text: &str, calls: Vec<ToolCall>) -> Answer {
    Answer::new(
        text,
        Some(Usage {
            input_tokens: 5,
            output_tokens: 1,
            ..Usage::default()
        }),
        calls,
    )
}

fn protocol() -> Protocol {
    Protocol::new(["execute", "apply_patch"])
}

fn ok(content: &str) -> ToolOutput {
    ToolOutput {
        content: content.into(),
        is_error: false,
        data: Some(serde_json::value::RawValue::from_string(r#"{"shown":true}"#.into()).unwrap()),
        images: Vec::new(),
    }
}

/// Starts a turn in Session `s`; answers its first step.
fn start(h: &mut Harness, text: &str) -> Step {
    h.session("s");
    h.prompt("s", "r1", text);
    let Reconciled { mut steps, .. } = h
        .with_ctx(|ctx| {
            reconcile(
                ctx,
                &|_| false,
                &|_| true,
                ATTEMPTS,
                &shiitake::budget::Limits::NONE,
            )
        })
        .unwrap();
    assert_eq!(steps.len(), 1);
    steps.remove(0)
}

fn restart_and_claim(h: &mut Harness) -> Step {
    h.restart();
    let Reconciled { mut steps, .. } = h
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
    assert_eq!(steps.len(), 1);
    steps.remove(0)
}

fn record(h: &mut Harness, step: &Step, answer: &Answer) -> CallsOutcome {
    h.with_ctx(|ctx| {
        record_calls(
            ctx,
            &step.session_id,
            &step.command_id,
            step.attempt,
            answer,
            &protocol(),
        )
    })
    .unwrap()
}

fn result(h: &mut Harness, step: &Step, call_id: &str, output: &ToolOutput) -> ResultOutcome {
    h.with_ctx(|ctx| {
        record_result(
            ctx,
            &step.session_id,
            &step.command_id,
            step.attempt,
            call_id,
            output,
        )
    })
    .unwrap()
}

fn messages(h: &mut Harness) -> Vec<Value> {
    h.read("s", "?limit=200").json["messages"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn calls_are_recorded_before_they_run_and_each_outcome_closes_one() {
    let mut h = Harness::new();
    let step = start(&mut h, "add things");
    let answer = calls_answer(
        "let me look",
        vec![
            call("c1", "execute", r#"{"code":"return 1"}"#),
            call("c2", "apply_patch", ""),
        ],
    );
    let CallsOutcome::Run { message, calls } = record(&mut h, &step, &answer) else {
        panic!("not recorded")
    };
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[1].input,
        serde_json::Map::new(),
        "no arguments is {{}}"
    );
    let stored: Value = serde_json::from_str(&message).unwrap();
    assert_eq!(stored["role"], "assistant");
    assert_eq!(
        stored["toolCalls"][0]["arguments"],
        json!({"code":"return 1"})
    );
    assert_eq!(
        stored["protocol"]["tools"],
        json!(["apply_patch", "execute"])
    );
    assert!(stored["protocol"]["digest"]
        .as_str()
        .unwrap()
        .starts_with("fnv1a64:"));

    // The first outcome leaves the step open; the last answers the context.
    let ResultOutcome::Recorded { next: None, .. } = result(&mut h, &step, "c1", &ok("1")) else {
        panic!("the step closed early")
    };
    // The same call again changes nothing.
    assert_eq!(
        result(&mut h, &step, "c1", &ok("again")),
        ResultOutcome::Stale
    );
    let ResultOutcome::Recorded {
        message,
        next: Some(next),
    } = result(&mut h, &step, "c2", &ToolOutput::error("patch refused"))
    else {
        panic!("the step did not close")
    };
    let stored: Value = serde_json::from_str(&message).unwrap();
    assert_eq!(
        (
            &stored["role"],
            &stored["toolCallId"],
            &stored["toolName"],
            &stored["isError"]
        ),
        (
            &json!("tool"),
            &json!("c2"),
            &json!("apply_patch"),
            &json!(true)
        )
    );
    // The model sees the calls then their results in call order; never the
    // display payload.
    let tail: Vec<String> = next.context[1..]
        .iter()
        .map(|item| match item {
            ModelItem::ToolCalls { text, calls } => format!(
                "calls {text}: {}",
                calls
                    .iter()
                    .map(|c| format!("{}={}", c.id, c.arguments))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            ModelItem::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => format!("result {call_id} {content} {is_error}"),
            ModelItem::Message(m) => format!("message {}", m.text),
        })
        .collect();
    assert_eq!(
        tail,
        vec![
            r#"calls let me look: c1={"code":"return 1"},c2={}"#,
            "result c1 1 false",
            "result c2 patch refused true",
        ]
    );
    let all = messages(&mut h);
    assert_eq!(all.len(), 4, "user, assistant calls, two tool messages");
    assert_eq!(all[2]["data"], json!({"shown": true}), "data is served");

    // The final answer settles with the turn's call count and usage sum.
    let done = h
        .with_ctx(|ctx| {
            complete_step(
                ctx,
                "s",
                &step.command_id,
                step.attempt,
                &calls_answer("done", vec![]),
            )
        })
        .unwrap();
    let StepOutcome::Settled { settled, .. } = done else {
        panic!("not settled")
    };
    assert_eq!(settled[0].tool_call_count, 2);
    assert_eq!(
        settled[0].usage,
        Some(Usage {
            input_tokens: 10,
            output_tokens: 2,
            ..Usage::default()
        })
    );
}

#[test]
fn a_results_images_are_kept_on_its_message_and_reach_the_next_model_context() {
    let mut h = Harness::new();
    let step = start(&mut h, "take a picture");
    let answer = calls_answer("", vec![call("c1", "snap", "{}")]);
    let CallsOutcome::Run { .. } = record(&mut h, &step, &answer) else {
        panic!("not recorded")
    };
    let image = Image {
        media_type: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
    };
    let output = ToolOutput {
        images: vec![image.clone()],
        ..ok("a picture")
    };
    let ResultOutcome::Recorded {
        message,
        next: Some(next),
    } = result(&mut h, &step, "c1", &output)
    else {
        panic!("the step did not close")
    };
    let stored: Value = serde_json::from_str(&message).unwrap();
    assert_eq!(
        stored["images"],
        json!([{"mediaType": "image/png", "data": "iVBORw0KGgo="}])
    );
    assert_eq!(messages(&mut h)[2]["images"], stored["images"], "served");
    let Some(ModelItem::ToolResult {
        content, images, ..
    }) = next.context.last()
    else {
        panic!("the context ends with the result: {:?}", next.context)
    };
    assert_eq!(
        (content.as_str(), images.as_slice()),
        ("a picture", &[image][..])
    );
}

#[test]
fn broken_arguments_and_bad_ids_are_recorded_safely() {
    let mut h = Harness::new();
    let step = start(&mut h, "go");
    let answer = calls_answer(
        "",
        vec![
            call("", "execute", r#"{"code": "trunc"#),
            call("dup", "execute", "[1]"),
            call("dup", "execute", "{}"),
            call("has space", "execute", "{}"),
        ],
    );
    let CallsOutcome::Run { calls, .. } = record(&mut h, &step, &answer) else {
        panic!()
    };
    let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, vec!["call_0", "dup", "call_2", "call_3"]);
    assert!(calls[0]
        .refused
        .as_deref()
        .unwrap()
        .contains("not a JSON object"));
    assert!(calls[1].refused.is_some(), "an array is not an object");
    assert!(calls[2].refused.is_none());
    // What is recorded replays: every recorded call's arguments are objects.
    let all = messages(&mut h);
    for c in all[1]["toolCalls"].as_array().unwrap() {
        assert!(c["arguments"].is_object(), "{c}");
    }
}

#[test]
fn a_turn_asking_for_tools_past_the_step_bound_fails() {
    let mut h = Harness::new();
    let mut step = start(&mut h, "loop");
    for n in 0..TOOL_STEPS_PER_TURN_MAX {
        let answer = calls_answer("", vec![call(&format!("c{n}"), "execute", "{}")]);
        let CallsOutcome::Run { calls, .. } = record(&mut h, &step, &answer) else {
            panic!("step {n} refused")
        };
        let ResultOutcome::Recorded {
            next: Some(next), ..
        } = result(&mut h, &step, &calls[0].id, &ok("x"))
        else {
            panic!()
        };
        step = *next;
    }
    let answer = calls_answer("", vec![call("last", "execute", "{}")]);
    let CallsOutcome::Settled(settled) = record(&mut h, &step, &answer) else {
        panic!("the bound did not hold")
    };
    assert_eq!(settled[0].terminal, Terminal::Failed);
    assert_eq!(
        settled[0].tool_call_count, TOOL_STEPS_PER_TURN_MAX,
        "a failed turn still counts its calls"
    );
    assert!(settled[0]
        .diagnostic
        .as_deref()
        .unwrap()
        .contains(&format!("at most {TOOL_STEPS_PER_TURN_MAX}")));
}

#[test]
fn a_restart_mid_tool_reruns_safe_calls_and_never_unsafe_started_ones() {
    let mut h = Harness::new();
    let step = start(&mut h, "work");
    let answer = calls_answer(
        "",
        vec![
            call("done", "execute", "{}"),
            call("unsafe", "execute", "{}"),
            call("safe", "execute", "{}"),
            call("unstarted", "execute", "{}"),
        ],
    );
    record(&mut h, &step, &answer);
    result(&mut h, &step, "done", &ok("finished"));
    let marked = h
        .with_ctx(|ctx| mark_started(ctx, "s", &step.command_id, step.attempt, "unsafe"))
        .unwrap();
    assert!(marked);

    let resumed = restart_and_claim(&mut h);
    assert_eq!(resumed.attempt, 2);
    assert!(resumed.context.is_empty(), "open calls are closed first");
    let open: Vec<(&str, bool)> = resumed
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.started))
        .collect();
    assert_eq!(
        open,
        vec![("unsafe", true), ("safe", false), ("unstarted", false)]
    );
    // The recovery rule: only a started call of an unsafe operation is
    // never run again.
    assert_eq!(
        recovery(&resumed.tool_calls[0], false),
        Recovery::OutcomeUnknown
    );
    assert_eq!(recovery(&resumed.tool_calls[0], true), Recovery::Run);
    assert_eq!(recovery(&resumed.tool_calls[1], true), Recovery::Run);
    assert_eq!(recovery(&resumed.tool_calls[2], false), Recovery::Run);

    // The old attempt can neither mark nor record anything.
    let stale = h
        .with_ctx(|ctx| mark_started(ctx, "s", &step.command_id, step.attempt, "safe"))
        .unwrap();
    assert!(!stale);
    assert_eq!(
        result(&mut h, &step, "safe", &ok("late")),
        ResultOutcome::Stale
    );

    let unknown = outcome_unknown(&resumed.tool_calls[0]);
    assert!(unknown.is_error && unknown.content.starts_with("outcome unknown"));
    result(&mut h, &resumed, "unsafe", &unknown);
    result(&mut h, &resumed, "safe", &ok("again"));
    let ResultOutcome::Recorded {
        next: Some(next), ..
    } = result(&mut h, &resumed, "unstarted", &ok("ran"))
    else {
        panic!()
    };
    let results: Vec<&str> = next
        .context
        .iter()
        .filter_map(|i| match i {
            ModelItem::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results, vec!["done", "unsafe", "safe", "unstarted"]);
}

/// The model context, one line per item: `message <text>`, `calls <ids>`,
/// `result <id> <content>`.
fn shape(context: &[ModelItem]) -> Vec<String> {
    context
        .iter()
        .map(|i| match i {
            ModelItem::Message(m) => format!("message {}", m.text),
            ModelItem::ToolCalls { calls, .. } => format!(
                "calls {}",
                calls
                    .iter()
                    .map(|c| c.id.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            ModelItem::ToolResult {
                call_id, content, ..
            } => format!("result {call_id} {content}"),
        })
        .collect()
}

/// Both providers' pairing rule: every step is followed at once by exactly
/// one result per call, in call order, and no result stands anywhere else.
fn assert_paired(context: &[ModelItem]) {
    let mut at = 0;
    while at < context.len() {
        match &context[at] {
            ModelItem::ToolCalls { calls, .. } => {
                let results: Vec<&str> = context[at + 1..]
                    .iter()
                    .map_while(|i| match i {
                        ModelItem::ToolResult { call_id, .. } => Some(call_id.as_str()),
                        _ => None,
                    })
                    .collect();
                let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
                assert_eq!(results, ids, "results of a step: {:?}", shape(context));
                at += 1 + results.len();
            }
            ModelItem::ToolResult { .. } => panic!("a stray result: {:?}", shape(context)),
            ModelItem::Message(_) => at += 1,
        }
    }
}

/// Claims the Session's next turn (its queue head).
fn claim_next(h: &mut Harness) -> Step {
    let Reconciled { mut steps, .. } = h
        .with_ctx(|ctx| {
            reconcile(
                ctx,
                &|_| false,
                &|_| true,
                ATTEMPTS,
                &shiitake::budget::Limits::NONE,
            )
        })
        .unwrap();
    assert_eq!(steps.len(), 1);
    steps.remove(0)
}

/// Runs the claimed turn `step` through one tool step (each call answered
/// with `outputs`), checks the context the model then gets, and completes
/// the turn. Returns that context.
fn tool_turn(h: &mut Harness, step: &Step, calls: &[(&str, &str)]) -> Vec<ModelItem> {
    assert_paired(&step.context);
    let answer = calls_answer(
        "",
        calls
            .iter()
            .map(|(id, _)| call(id, "execute", "{}"))
            .collect(),
    );
    let CallsOutcome::Run { .. } = record(h, step, &answer) else {
        panic!("not recorded")
    };
    let mut next = None;
    for (id, output) in calls {
        let ResultOutcome::Recorded { next: n, .. } = result(h, step, id, &ok(output)) else {
            panic!("result of {id} not recorded")
        };
        next = n;
    }
    let next = next.expect("the step closed");
    assert_paired(&next.context);
    let done = h
        .with_ctx(|ctx| {
            complete_step(
                ctx,
                &step.session_id,
                &step.command_id,
                step.attempt,
                &calls_answer("done", vec![]),
            )
        })
        .unwrap();
    assert!(matches!(done, StepOutcome::Settled { .. }), "{done:?}");
    next.context
}

/// The `tool` messages of the transcript: `(toolCallId, text, isError)`.
fn tool_messages(h: &mut Harness) -> Vec<(String, String, bool)> {
    messages(h)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["toolCallId"].as_str().unwrap().to_owned(),
                m["text"].as_str().unwrap().to_owned(),
                m["isError"] == json!(true),
            )
        })
        .collect()
}

const CANCELLED: &str = "cancelled: the turn was cancelled before this call finished";

/// The smallest case: a turn cancelled while a call runs, then tool turns
/// whose real results must reach the model.
#[test]
fn a_cancelled_tool_turn_closes_its_open_calls_for_good() {
    let mut h = Harness::new();
    let step = start(&mut h, "first");
    record(
        &mut h,
        &step,
        &calls_answer(
            "",
            vec![call("c1", "execute", "{}"), call("c2", "execute", "{}")],
        ),
    );
    result(&mut h, &step, "c1", &ok("one"));
    // An operator line while c2 runs, then a cancel.
    h.command(
        "s",
        json!({"type":"operator","requestId":"o","text":"note"}),
    );
    // The cancel's frames publish the closing message before the settlement.
    let cancel = HttpRequest {
        method: "POST".into(),
        path: "/sessions/s/commands".into(),
        query: String::new(),
        meta: None,
        body: json!({"type":"cancel","commandId": step.command_id})
            .to_string()
            .into_bytes(),
        waited: false,
    };
    let r = h.with_ctx(|ctx| handle(ctx, &Hosted::without_models(None), &cancel));
    assert_eq!(r.status, 200, "{:?}", r.body);
    let frames: Vec<Value> = r
        .effects
        .frames
        .iter()
        .map(|(_, frame)| match frame {
            Frame::Message { message } => serde_json::from_str(message.get()).unwrap(),
            Frame::Settled { settlement } => json!({"settled": settlement.terminal}),
            other => panic!("unexpected frame {other:?}"),
        })
        .collect();
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_eq!(
        (&frames[0]["toolCallId"], &frames[0]["text"]),
        (&json!("c2"), &json!(CANCELLED))
    );
    assert_eq!(frames[1], json!({"settled": "cancelled"}));
    let cancelled = h.call(
        "GET",
        &format!("/sessions/s/settlement?commandId={}", step.command_id),
        json!(null),
    );
    assert_eq!(
        (
            &cancelled.json["terminal"],
            &cancelled.json["toolCallCount"]
        ),
        (&json!("cancelled"), &json!(2)),
        "a cancelled turn counts the calls it made"
    );
    // The durable record says how c2 ended; the stale attempt adds nothing.
    assert_eq!(
        result(&mut h, &step, "c2", &ok("late")),
        ResultOutcome::Stale
    );
    assert_eq!(
        tool_messages(&mut h),
        vec![
            ("c1".into(), "one".into(), false),
            ("c2".into(), CANCELLED.into(), true)
        ]
    );

    h.prompt("s", "r2", "second");
    let second = claim_next(&mut h);
    let context = tool_turn(&mut h, &second, &[("b1", "2")]);
    assert_eq!(
        shape(&context),
        vec![
            "message first",
            "calls c1,c2",
            "result c1 one",
            &format!("result c2 {CANCELLED}"),
            "message [operator] note",
            "message second",
            "calls b1",
            "result b1 2",
        ]
    );
    // And the turn after that too.
    h.prompt("s", "r3", "third");
    let third = claim_next(&mut h);
    let context = tool_turn(&mut h, &third, &[("d1", "4"), ("d2", "5")]);
    assert_eq!(
        shape(&context)[8..],
        [
            "message done",
            "message third",
            "calls d1,d2",
            "result d1 4",
            "result d2 5"
        ]
    );
}

/// An abort of a turn whose call started an unsafe operation: that call's
/// outcome is unknown; a queued prompt it cancels made no calls.
#[test]
fn an_aborted_call_that_started_an_unsafe_operation_ends_outcome_unknown() {
    let mut h = Harness::new();
    let step = start(&mut h, "first");
    record(
        &mut h,
        &step,
        &calls_answer(
            "",
            vec![call("u1", "execute", "{}"), call("u2", "execute", "{}")],
        ),
    );
    assert!(h
        .with_ctx(|ctx| mark_started(ctx, "s", &step.command_id, step.attempt, "u1"))
        .unwrap());
    h.prompt("s", "queued", "never runs");
    let aborted = h.with_ctx(|ctx| cancel::abort(ctx, "s", None)).unwrap();
    let counts: Vec<u32> = aborted.settled.iter().map(|s| s.tool_call_count).collect();
    assert_eq!(counts, vec![2, 0], "the queued prompt made no calls");
    // The head's settlement carries the closing messages to publish.
    let appended: Vec<Value> = aborted.settled[0]
        .appended
        .iter()
        .map(|m| serde_json::from_str(m).unwrap())
        .collect();
    assert!(aborted.settled[1].appended.is_empty());
    let tools = tool_messages(&mut h);
    assert_eq!(appended.len(), 2);
    for (m, (id, text, _)) in appended.iter().zip(&tools) {
        assert_eq!((&m["toolCallId"], &m["text"]), (&json!(id), &json!(text)));
    }
    assert!(
        tools[0]
            .1
            .starts_with("outcome unknown: the turn was cancelled while tool call `u1`"),
        "{}",
        tools[0].1
    );
    assert_eq!(tools[1].1, CANCELLED);
    assert!(tools.iter().all(|t| t.2), "each is an error result");
    // Settled serializes without them.
    assert!(!aborted.settled[0].to_json().unwrap().contains("appended"));

    h.prompt("s", "r2", "second");
    let second = claim_next(&mut h);
    let context = tool_turn(&mut h, &second, &[("b1", "2")]);
    assert_eq!(
        shape(&context)[1..],
        [
            "calls u1,u2",
            &format!("result u1 {}", tools[0].1),
            &format!("result u2 {CANCELLED}"),
            "message second",
            "calls b1",
            "result b1 2",
        ]
    );
}

/// A tool turn whose runtime keeps restarting mid-call settles
/// `interrupted` at the attempt limit with its calls closed: outcome unknown.
#[test]
fn a_tool_turn_interrupted_past_the_attempt_limit_closes_its_calls() {
    let mut h = Harness::new();
    let step = start(&mut h, "first");
    record(
        &mut h,
        &step,
        &calls_answer(
            "",
            vec![call("i1", "execute", "{}"), call("i2", "execute", "{}")],
        ),
    );
    let mut resumed = step.clone();
    for _ in 1..ATTEMPTS.max {
        resumed = restart_and_claim(&mut h);
        assert_eq!(resumed.tool_calls.len(), 2, "still open while it resumes");
    }
    mark_started_ok(&mut h, &resumed, "i1");
    h.restart();
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
    assert_eq!(settled[0].1.terminal, Terminal::Interrupted);
    assert_eq!(
        settled[0].1.appended.len(),
        2,
        "published with the settlement"
    );
    let tools = tool_messages(&mut h);
    assert!(tools[0]
        .1
        .starts_with("outcome unknown: the turn was interrupted"));
    assert!(tools[0].1.contains("not safe to repeat"), "{}", tools[0].1);
    assert!(
        tools[1]
            .1
            .starts_with("outcome unknown: the turn was interrupted")
            && tools[1].1.ends_with("it was not run again"),
        "{}",
        tools[1].1
    );

    h.prompt("s", "r2", "second");
    let second = claim_next(&mut h);
    let context = tool_turn(&mut h, &second, &[("b1", "2")]);
    assert_eq!(
        shape(&context)[1..],
        [
            "calls i1,i2",
            &format!("result i1 {}", tools[0].1),
            &format!("result i2 {}", tools[1].1),
            "message second",
            "calls b1",
            "result b1 2",
        ]
    );
}

fn mark_started_ok(h: &mut Harness, step: &Step, call_id: &str) {
    let marked = h
        .with_ctx(|ctx| mark_started(ctx, "s", &step.command_id, step.attempt, call_id))
        .unwrap();
    assert!(marked);
}

/// A turn whose model call fails after its tool step closed has nothing
/// open: its settlement writes no message, and later contexts pair.
#[test]
fn a_turn_failing_after_its_tool_step_leaves_nothing_open() {
    let mut h = Harness::new();
    let step = start(&mut h, "first");
    record(
        &mut h,
        &step,
        &calls_answer("", vec![call("f1", "execute", "{}")]),
    );
    let ResultOutcome::Recorded {
        next: Some(next), ..
    } = result(&mut h, &step, "f1", &ok("x"))
    else {
        panic!()
    };
    let before = messages(&mut h).len();
    let failed = h
        .with_ctx(|ctx| {
            fail_attempt(
                ctx,
                "s",
                &next.command_id,
                next.attempt,
                &Failure {
                    retryable: false,
                    diagnostic: "HTTP 400".into(),
                },
                None,
                ATTEMPTS,
                0,
            )
        })
        .unwrap();
    let FailOutcome::Settled(settled) = failed else {
        panic!("{failed:?}")
    };
    assert_eq!(
        (settled[0].tool_call_count, settled[0].appended.len()),
        (1, 0)
    );
    assert_eq!(messages(&mut h).len(), before, "nothing to close");

    h.prompt("s", "r2", "second");
    let second = claim_next(&mut h);
    let context = tool_turn(&mut h, &second, &[("b1", "2")]);
    assert_eq!(
        shape(&context)[1..],
        [
            "calls f1",
            "result f1 x",
            "message second",
            "calls b1",
            "result b1 2"
        ]
    );
}

/// A store written before settling closed open calls: a settled turn's call
/// without a result reads as outcome unknown right after its step, and
/// nothing after it is deferred or dropped.
#[test]
fn a_store_with_open_calls_of_settled_turns_still_gives_paired_contexts() {
    let mut h = Harness::new();
    let step = start(&mut h, "first");
    record(
        &mut h,
        &step,
        &calls_answer(
            "",
            vec![call("o1", "execute", "{}"), call("o2", "execute", "{}")],
        ),
    );
    result(&mut h, &step, "o1", &ok("one"));
    h.command(
        "s",
        json!({"type":"operator","requestId":"o","text":"note"}),
    );
    let r = h.command("s", json!({"type":"cancel","commandId": step.command_id}));
    assert_eq!(r.status, 200, "{}", r.json);
    // What an older runtime left: no closing message.
    h.sql()
        .apply(vec![(
            "DELETE FROM messages WHERE body LIKE ?".into(),
            vec![format!("%{CANCELLED}%").into()],
        )])
        .unwrap();
    assert_eq!(tool_messages(&mut h).len(), 1);

    h.prompt("s", "r2", "second");
    let second = claim_next(&mut h);
    let context = tool_turn(&mut h, &second, &[("b1", "2")]);
    assert_eq!(
        shape(&context),
        vec![
            "message first",
            "calls o1,o2",
            "result o1 one",
            "result o2 outcome unknown: the turn ended before this call finished; \
             it was not run again",
            "message [operator] note",
            "message second",
            "calls b1",
            "result b1 2",
        ]
    );
}
