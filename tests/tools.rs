//! Tool steps of a turn over real SQLite: calls recorded before they run,
//! one `tool` message per outcome, the next model context, the step bound,
//! and recovery after a restart mid-tool (replay-safe calls run again,
//! unsafe started ones are never re-run and report their outcome unknown).

mod common;

use common::Harness;
use serde_json::{json, Value};
use shiitake::limits::TOOL_STEPS_PER_TURN_MAX;
use shiitake::model::{ModelItem, ToolCall};
use shiitake::run::tools::{
    mark_started, outcome_unknown, record_calls, record_result, recovery, CallsOutcome, Protocol,
    Recovery, ResultOutcome, ToolOutput,
};
use shiitake::run::{
    complete_step, reconcile, Attempts, Reconciled, Step, StepAnswer, StepOutcome, TokenUsage,
};

const ATTEMPTS: Attempts = Attempts { max: 3 };

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn calls_answer(text: &str, calls: Vec<ToolCall>) -> StepAnswer {
    StepAnswer {
        text: text.into(),
        usage: Some(TokenUsage {
            input_tokens: 5,
            output_tokens: 1,
        }),
        tool_calls: calls,
    }
}

fn protocol() -> Protocol {
    Protocol::new(["execute", "apply_patch"])
}

fn ok(content: &str) -> ToolOutput {
    ToolOutput {
        content: content.into(),
        is_error: false,
        data: Some(serde_json::value::RawValue::from_string(r#"{"shown":true}"#.into()).unwrap()),
    }
}

/// Starts a turn in Session `s`; answers its first step.
fn start(h: &mut Harness, text: &str) -> Step {
    h.session("s");
    h.prompt("s", "r1", text);
    let Reconciled { mut steps, .. } = h
        .with_ctx(|ctx| reconcile(ctx, &|_| false, &|_| true, ATTEMPTS))
        .unwrap();
    assert_eq!(steps.len(), 1);
    steps.remove(0)
}

fn restart_and_claim(h: &mut Harness) -> Step {
    h.restart();
    let Reconciled { mut steps, .. } = h
        .with_ctx(|ctx| reconcile(ctx, &|_| false, &|_| false, ATTEMPTS))
        .unwrap();
    assert_eq!(steps.len(), 1);
    steps.remove(0)
}

fn record(h: &mut Harness, step: &Step, answer: &StepAnswer) -> CallsOutcome {
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
        Some(TokenUsage {
            input_tokens: 10,
            output_tokens: 2
        })
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
        step = next;
    }
    let answer = calls_answer("", vec![call("last", "execute", "{}")]);
    let CallsOutcome::Settled(settled) = record(&mut h, &step, &answer) else {
        panic!("the bound did not hold")
    };
    assert_eq!(settled[0].terminal, "failed");
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

#[test]
fn a_cancelled_tool_turn_leaves_a_well_formed_context_for_the_next() {
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
    let r = h.command("s", json!({"type":"cancel","commandId": step.command_id}));
    assert_eq!(r.status, 200, "{}", r.json);
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
    h.prompt("s", "r2", "second");
    let Reconciled { steps, .. } = h
        .with_ctx(|ctx| reconcile(ctx, &|_| false, &|_| true, ATTEMPTS))
        .unwrap();
    let shape: Vec<String> = steps[0]
        .context
        .iter()
        .map(|i| match i {
            ModelItem::Message(m) => format!("message {}", m.text),
            ModelItem::ToolCalls { calls, .. } => format!("calls {}", calls.len()),
            ModelItem::ToolResult {
                call_id, is_error, ..
            } => format!("result {call_id} {is_error}"),
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            "message first",
            "calls 2",
            "result c1 false",
            "result c2 true",
            "message [operator] note",
            "message second",
        ]
    );
}
