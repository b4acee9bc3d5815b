//! The model context's bounds over real SQLite: at most
//! `CONTEXT_MESSAGES_MAX` messages and `CONTEXT_BYTES_MAX` bytes of stored
//! bodies. Past the byte bound the oldest whole turns are left out; the
//! newest turn is kept, its tool steps never split from their results, and
//! a turn always sees its prompt. A compaction's summary leads every later
//! context, which reads no message before it.

mod common;

use common::Harness;
use serde_json::json;
use shiitake::limits::{CONTEXT_BYTES_MAX, CONTEXT_MESSAGES_MAX, TEXT_BYTES_MAX};
use shiitake::model::{Answer, ModelItem, Role, ToolCall};
use shiitake::run::compaction::{self, Recorded, Summarised};
use shiitake::run::tools::ToolOutput;
use shiitake::run::tools::{record_calls, record_result, CallsOutcome, ResultOutcome};
use shiitake::run::{complete_step, reconcile, Attempts, Reconciled, Step, StepOutcome};
use shiitake::sql::Sql;
use shiitake::transcript::{Protocol, Trigger};

const ATTEMPTS: Attempts = Attempts { max: 3 };
/// A large tool result (the payload bound is 256 KiB).
const RESULT_BYTES: usize = 200 * 1024;

/// `text` padded to `bytes` (texts stay unique by their prefix).
fn padded(text: &str, bytes: usize) -> String {
    format!(
        "{text} {}",
        "x".repeat(bytes.saturating_sub(text.len() + 1))
    )
}

/// Claims the one turn to run (a prompt admitted into an idle Session is
/// claimed by its admission: fresh).
fn claim(h: &mut Harness) -> Step {
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

/// Runs one tool step of `step`'s turn: `calls` calls named `{name}.{i}`,
/// each answered by a result of `bytes`. Returns the next model step.
fn tool_step(h: &mut Harness, step: &Step, name: &str, calls: usize, bytes: usize) -> Step {
    let answer = Answer::new(
        format!("step {name}"),
        None,
        (0..calls)
            .map(|i| ToolCall {
                id: format!("{name}_{i}"),
                name: "execute".into(),
                arguments: "{}".into(),
            })
            .collect(),
    );
    let protocol = Protocol::new(["execute"]);
    let CallsOutcome::Run { calls, .. } = h
        .with_ctx(|ctx| {
            record_calls(
                ctx,
                &step.session_id,
                &step.command_id,
                step.attempt,
                &answer,
                &protocol,
            )
        })
        .unwrap()
    else {
        panic!("calls not recorded")
    };
    let mut next = None;
    for call in calls {
        let output = ToolOutput {
            content: padded(&format!("result {}", call.id), bytes),
            is_error: false,
            data: None,
            images: Vec::new(),
        };
        let ResultOutcome::Recorded { next: n, .. } = h
            .with_ctx(|ctx| {
                record_result(
                    ctx,
                    &step.session_id,
                    &step.command_id,
                    step.attempt,
                    &call.id,
                    &output,
                )
            })
            .unwrap()
        else {
            panic!("result not recorded")
        };
        next = n;
    }
    *next.expect("the last result answers the next step")
}

/// Completes `step`'s turn with a plain answer.
fn finish(h: &mut Harness, step: &Step, text: &str) {
    let answer = Answer::new(text, None, Vec::new());
    let outcome = h
        .with_ctx(|ctx| {
            complete_step(
                ctx,
                &step.session_id,
                &step.command_id,
                step.attempt,
                &answer,
            )
        })
        .unwrap();
    assert!(
        matches!(outcome, StepOutcome::Settled { .. }),
        "{outcome:?}"
    );
}

/// A stored message: role, text and size of its body.
struct Row {
    role: String,
    text: String,
    bytes: usize,
}

fn rows(h: &Harness) -> Vec<Row> {
    h.sql()
        .query(
            "SELECT json_extract(body, '$.role'), json_extract(body, '$.text'), bytes
             FROM messages WHERE session_id = 's' ORDER BY seq",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| Row {
            role: r.text(0).unwrap(),
            text: r.text(1).unwrap(),
            bytes: r.int(2).unwrap() as usize,
        })
        .collect()
}

/// What a context shows of each message (texts are unique in these tests).
fn text(item: &ModelItem) -> &str {
    match item {
        ModelItem::Message(m) => m.text.strip_prefix("[operator] ").unwrap_or(&m.text),
        ModelItem::ToolCalls { text, .. } => text,
        ModelItem::ToolResult { content, .. } => content,
    }
}

/// Checks the shape of `context` against the store: it starts at a user
/// message, every tool step is followed by exactly its results in call
/// order, its messages appear in store order, and the newest user message is
/// in it. Returns the stored indexes it shows and their bytes.
fn check(h: &Harness, context: &[ModelItem]) -> (Vec<usize>, usize) {
    let rows = rows(h);
    assert!(
        matches!(&context[0], ModelItem::Message(m) if m.role == Role::User),
        "starts at a user message: {:?}",
        text(&context[0]).get(..40)
    );
    let mut at = 0;
    while at < context.len() {
        match &context[at] {
            ModelItem::ToolCalls { calls, .. } => {
                for (i, call) in calls.iter().enumerate() {
                    match context.get(at + 1 + i) {
                        Some(ModelItem::ToolResult { call_id, .. }) => {
                            assert_eq!(call_id, &call.id, "results in call order")
                        }
                        other => panic!("call {} not answered: {other:?}", call.id),
                    }
                }
                at += 1 + calls.len();
            }
            ModelItem::ToolResult { call_id, .. } => panic!("result {call_id} without its call"),
            ModelItem::Message(_) => at += 1,
        }
    }
    let shown: Vec<usize> = context
        .iter()
        .map(|item| {
            let t = text(item);
            rows.iter()
                .position(|r| r.text == t)
                .unwrap_or_else(|| panic!("not stored: {:?}", t.get(..40)))
        })
        .collect();
    assert!(shown.windows(2).all(|w| w[0] < w[1]), "in store order");
    let newest_user = rows.iter().rposition(|r| r.role == "user").unwrap();
    assert!(shown.contains(&newest_user), "the newest turn is kept");
    let bytes = shown.iter().map(|&i| rows[i].bytes).sum();
    (shown, bytes)
}

/// Bytes of the newest `CONTEXT_MESSAGES_MAX` stored messages: what the
/// context was built from with the message bound alone.
fn window_bytes(h: &Harness) -> usize {
    let rows = rows(h);
    let from = rows.len().saturating_sub(CONTEXT_MESSAGES_MAX);
    rows[from..].iter().map(|r| r.bytes).sum()
}

#[test]
fn past_the_byte_bound_the_oldest_whole_turns_are_left_out() {
    let mut h = Harness::new();
    h.session("s");
    let prompt_bytes = TEXT_BYTES_MAX - 1024;
    // 16 turns of a large prompt and a step of 4 large results: about
    // 13.8 MiB in 112 messages, under the message bound.
    let turns = 16;
    let mut contexts = Vec::new();
    for t in 0..turns {
        let r = h.prompt(
            "s",
            &format!("r{t}"),
            &padded(&format!("prompt {t}"), prompt_bytes),
        );
        assert_eq!(r.status, 200, "{}", r.json);
        let step = claim(&mut h);
        contexts.push((check(&h, &step.context), window_bytes(&h)));
        let next = tool_step(&mut h, &step, &format!("t{t}"), 4, RESULT_BYTES);
        contexts.push((check(&h, &next.context), window_bytes(&h)));
        finish(&mut h, &next, &format!("done {t}"));
    }
    // One more prompt: its context is built from every turn above.
    h.prompt("s", "last", &padded("prompt last", prompt_bytes));
    let step = claim(&mut h);
    let (shown, bytes) = check(&h, &step.context);
    let before = window_bytes(&h);
    let rows = rows(&h);
    assert!(rows.len() < CONTEXT_MESSAGES_MAX);
    assert!(before > 3 * CONTEXT_BYTES_MAX, "{before}");

    // Every context is within the bound, and under it nothing is left out.
    for ((_, bytes), before) in &contexts {
        assert!(*bytes <= CONTEXT_BYTES_MAX, "{bytes}");
        if before <= &CONTEXT_BYTES_MAX {
            assert_eq!(bytes, before);
        }
    }
    // Past it turns are dropped whole: the context is the suffix from a
    // user message on, and one turn more would not fit.
    assert!(bytes <= CONTEXT_BYTES_MAX, "{bytes}");
    let start = shown[0];
    assert_eq!(shown, (start..rows.len()).collect::<Vec<_>>(), "a suffix");
    let previous_turn = rows[..start]
        .iter()
        .rposition(|r| r.role == "user")
        .unwrap();
    let with_it: usize = rows[previous_turn..].iter().map(|r| r.bytes).sum();
    assert!(
        with_it > CONTEXT_BYTES_MAX,
        "only as many turns as needed go"
    );
    eprintln!(
        "context bound {CONTEXT_BYTES_MAX}: {before} bytes in the newest {} messages, \
         {bytes} kept in {} messages ({} turns of {})",
        rows.len().min(CONTEXT_MESSAGES_MAX),
        shown.len(),
        shown.iter().filter(|&&i| rows[i].role == "user").count(),
        turns + 1,
    );
}

#[test]
fn a_turn_past_the_bound_keeps_its_prompt_and_its_newest_steps() {
    let mut h = Harness::new();
    h.session("s");
    h.prompt("s", "r1", "a long task");
    let mut step = claim(&mut h);
    // 8 steps of 3 large results: about 4.7 MiB in one turn.
    let steps = 8;
    for s in 0..steps {
        step = tool_step(&mut h, &step, &format!("s{s}"), 3, RESULT_BYTES);
    }
    let rows = rows(&h);
    let (shown, bytes) = check(&h, &step.context);
    assert!(bytes <= CONTEXT_BYTES_MAX, "{bytes}");
    assert_eq!(rows[shown[0]].text, "a long task");
    // The prompt, then a suffix from a step on; one step more would not fit.
    let from = shown[1];
    assert_eq!(rows[from].role, "assistant");
    assert_eq!(shown[1..], (from..rows.len()).collect::<Vec<_>>());
    let previous_step = rows[..from]
        .iter()
        .rposition(|r| r.role == "assistant")
        .unwrap();
    let with_it: usize =
        rows[0].bytes + rows[previous_step..].iter().map(|r| r.bytes).sum::<usize>();
    assert!(with_it > CONTEXT_BYTES_MAX);
    let kept = shown
        .iter()
        .filter(|&&i| rows[i].role == "assistant")
        .count();
    assert!(kept > 1 && kept < steps, "{kept} of {steps} steps");
}

#[test]
fn a_step_past_the_bound_is_kept_whole() {
    let mut h = Harness::new();
    h.session("s");
    h.prompt("s", "r1", "read everything");
    let step = claim(&mut h);
    let step = tool_step(&mut h, &step, "small", 1, 16);
    // One step of 24 large results: about 4.7 MiB.
    let calls = 24;
    let next = tool_step(&mut h, &step, "big", calls, RESULT_BYTES);
    let rows = rows(&h);
    let (shown, bytes) = check(&h, &next.context);
    assert!(
        bytes > CONTEXT_BYTES_MAX,
        "a single step may pass the bound"
    );
    // The prompt and the newest step with every result; the older step
    // between them is left out.
    let big = rows.iter().position(|r| r.text == "step big").unwrap();
    assert_eq!(rows[shown[0]].text, "read everything");
    assert_eq!(shown[1..], (big..rows.len()).collect::<Vec<_>>());
    assert_eq!(shown.len(), 2 + calls);

    // Resumed after a restart (no unwritten message), the same context.
    h.restart();
    let Reconciled { steps, .. } = h
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
    assert_eq!(steps[0].context, next.context);
}

#[test]
fn under_the_byte_bound_only_the_message_bound_applies() {
    let mut h = Harness::new();
    h.session("s");
    // More operator lines than the message bound, then a prompt: the
    // context is the newest messages, the oldest of them operator lines
    // (no turn boundary is sought under the byte bound).
    for i in 0..CONTEXT_MESSAGES_MAX {
        let r = h.command(
            "s",
            json!({"type": "operator", "requestId": format!("o{i}"), "text": format!("line {i}")}),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    h.prompt("s", "r1", "hello");
    let step = claim(&mut h);
    let texts: Vec<&str> = step.context.iter().map(text).collect();
    assert_eq!(texts.len(), CONTEXT_MESSAGES_MAX);
    assert_eq!(texts[0], "line 1");
    assert_eq!(texts[CONTEXT_MESSAGES_MAX - 2], "line 199");
    assert_eq!(texts[CONTEXT_MESSAGES_MAX - 1], "hello");
}

#[test]
fn past_the_byte_bound_the_context_starts_at_a_user_message() {
    let mut h = Harness::new();
    h.session("s");
    // Large operator lines past the bound, then a prompt: only the prompt's
    // turn remains.
    for i in 0..80 {
        let r = h.command(
            "s",
            json!({"type": "operator", "requestId": format!("o{i}"),
                   "text": padded(&format!("line {i}"), TEXT_BYTES_MAX)}),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    h.prompt("s", "r1", "hello");
    let step = claim(&mut h);
    let texts: Vec<&str> = step.context.iter().map(text).collect();
    assert_eq!(texts, ["hello"]);
}

#[test]
fn a_step_that_fits_only_without_its_prompt_is_kept_with_it() {
    let mut h = Harness::new();
    h.session("s");
    let prompt = padded("a large prompt", TEXT_BYTES_MAX - 1024);
    h.prompt("s", "r1", &prompt);
    let step = claim(&mut h);
    let step = tool_step(&mut h, &step, "small", 1, 16);
    // One step just under the bound: with the prompt it passes it.
    let next = tool_step(&mut h, &step, "big", 19, 213 * 1024);
    let rows = rows(&h);
    let big = rows.iter().position(|r| r.text == "step big").unwrap();
    let step_bytes: usize = rows[big..].iter().map(|r| r.bytes).sum();
    assert!(step_bytes <= CONTEXT_BYTES_MAX);
    assert!(step_bytes + rows[0].bytes > CONTEXT_BYTES_MAX);
    // The prompt and the big step whole; the small step between is left out.
    let (shown, bytes) = check(&h, &next.context);
    assert_eq!(shown[0], 0);
    assert_eq!(shown[1..], (big..rows.len()).collect::<Vec<_>>());
    assert!(bytes > CONTEXT_BYTES_MAX);
}

/// Every tool step of `context` is followed at once by exactly its
/// results, in call order, and no result stands without its step.
fn assert_paired(context: &[ModelItem]) {
    let mut at = 0;
    while at < context.len() {
        match &context[at] {
            ModelItem::ToolCalls { calls, .. } => {
                for (i, call) in calls.iter().enumerate() {
                    assert!(
                        matches!(context.get(at + 1 + i), Some(ModelItem::ToolResult { call_id, .. }) if *call_id == call.id),
                        "call {} not answered at once",
                        call.id
                    );
                }
                at += 1 + calls.len();
            }
            ModelItem::ToolResult { call_id, .. } => panic!("result {call_id} without its call"),
            ModelItem::Message(_) => at += 1,
        }
    }
}

/// Whether `item` is a summary saying `text` (`context::framed`).
fn is_summary(item: &ModelItem, text: &str) -> bool {
    matches!(item, ModelItem::Message(m) if m.role == Role::User
        && m.text.contains(&format!("<summary>\n{text}\n</summary>")))
}

/// Records a summary `text` of `step`'s context, for `trigger`.
fn compact(h: &mut Harness, step: &Step, text: &str, trigger: Trigger) -> Recorded {
    let answer = Answer::new(text, None, Vec::new());
    let range = step.window.range.clone().expect("something to compact");
    let previous = step.window.summary.as_ref().map(|s| s.entry_id.clone());
    h.with_ctx(|ctx| {
        compaction::record(
            ctx,
            &step.session_id,
            &step.command_id,
            step.attempt,
            None,
            Some(Summarised {
                answer: &answer,
                range: &range,
                previous: previous.as_deref(),
                trigger,
            }),
        )
    })
    .unwrap()
}

#[test]
fn a_turn_longer_than_the_message_bound_still_sees_its_prompt() {
    let mut h = Harness::new();
    h.session("s");
    h.prompt("s", "r1", "the task");
    let mut step = claim(&mut h);
    // 4 steps of 60 small results: 245 messages in one turn.
    for s in 0..4 {
        step = tool_step(&mut h, &step, &format!("s{s}"), 60, 16);
    }
    assert!(rows(&h).len() > CONTEXT_MESSAGES_MAX);
    let texts: Vec<&str> = step.context.iter().map(text).collect();
    assert_eq!(texts[0], "the task", "the prompt leads: {:?}", &texts[..3]);
    assert_paired(&step.context);
    assert!(step.context.len() <= CONTEXT_MESSAGES_MAX + 1);
    assert!(step.window.full, "at the message bound");
    // Resumed after a restart, the same.
    h.restart();
    let Reconciled { steps, .. } = h
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
    assert_eq!(steps[0].context, step.context);
}

/// The entry id of the stored message with `text`.
fn entry_id(h: &Harness, text: &str) -> String {
    h.sql()
        .query(
            "SELECT json_extract(body, '$.entryId') FROM messages
             WHERE json_extract(body, '$.text') = ?",
            &[text.into()],
        )
        .unwrap()[0]
        .text(0)
        .unwrap()
}

#[test]
fn a_retry_longer_than_the_message_bound_sees_the_retried_message_found_on_its_path() {
    let mut h = Harness::new();
    h.session("s");
    h.prompt("s", "r1", "the task");
    let step = claim(&mut h);
    finish(&mut h, &step, "done");
    // A fork of `s` retries the base's user message: the message the
    // retry's turn keeps is held by another Session than the turn's.
    let done = entry_id(&h, "done");
    let r = h.call(
        "POST",
        "/sessions",
        json!({"sessionId": "f", "from": {"sessionId": "s", "entryId": done}}),
    );
    assert_eq!(r.status, 201, "{}", r.json);
    let task = entry_id(&h, "the task");
    let r = h.command(
        "f",
        json!({"type": "retry", "requestId": "r2", "entryId": task}),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let mut step = claim(&mut h);
    assert_eq!(
        step.context.iter().map(text).collect::<Vec<_>>(),
        ["the task"]
    );
    // 4 steps of 60 small results: 244 messages on the retry's branch.
    for s in 0..4 {
        step = tool_step(&mut h, &step, &format!("s{s}"), 60, 16);
    }
    let texts: Vec<&str> = step.context.iter().map(text).collect();
    assert_eq!(
        texts[0],
        "the task",
        "the retried message leads: {:?}",
        &texts[..3]
    );
    assert_paired(&step.context);
    assert!(step.context.len() <= CONTEXT_MESSAGES_MAX + 1);
    // Compacted mid-turn: the summary, then the retried message, put back.
    let Recorded::Continue { next, .. } = compact(&mut h, &step, "long", Trigger::Window) else {
        panic!("the turn goes on")
    };
    assert!(is_summary(&next.context[0], "long"));
    assert_eq!(
        next.context[1..].iter().map(text).collect::<Vec<_>>(),
        ["the task"]
    );
    // Resumed after a restart, the same.
    h.restart();
    let Reconciled { steps, .. } = h
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
    assert_eq!(steps[0].context, next.context);
}

#[test]
fn after_a_compaction_a_context_is_its_summary_and_what_follows_never_a_split_step() {
    let mut h = Harness::new();
    h.session("s");
    h.prompt("s", "r1", "first task");
    let step = claim(&mut h);
    let next = tool_step(&mut h, &step, "a", 3, 16);
    finish(&mut h, &next, "first done");
    // A `compact` command, run as the queue's next work.
    let r = h.command("s", json!({"type": "compact", "requestId": "c1"}));
    assert_eq!(r.status, 200, "{}", r.json);
    let step = claim(&mut h);
    assert_eq!(step.window.range.as_ref().unwrap().messages, 6);
    let Recorded::Settled { entry: Some(_), .. } = compact(&mut h, &step, "one", Trigger::Command)
    else {
        panic!("the command settles with its entry")
    };
    // The next turn: the summary, then its prompt; nothing before it.
    h.prompt("s", "r2", "second task");
    let step = claim(&mut h);
    assert!(is_summary(&step.context[0], "one"));
    assert_eq!(
        step.context[1..].iter().map(text).collect::<Vec<_>>(),
        ["second task"]
    );
    let next = tool_step(&mut h, &step, "b", 2, 16);
    assert!(is_summary(&next.context[0], "one"));
    assert_paired(&next.context);
    assert_eq!(next.context.len(), 5, "summary, prompt, step, 2 results");
    // Compacted mid-turn (all calls answered): the summary, then the
    // turn's prompt, put back; the next step follows whole.
    let Recorded::Continue { next: after, .. } = compact(&mut h, &next, "two", Trigger::Window)
    else {
        panic!("the turn goes on")
    };
    assert!(is_summary(&after.context[0], "two"));
    assert_eq!(
        after.context[1..].iter().map(text).collect::<Vec<_>>(),
        ["second task"]
    );
    let next = tool_step(&mut h, &after, "c", 2, 16);
    assert!(is_summary(&next.context[0], "two"));
    assert_eq!(text(&next.context[1]), "second task");
    assert_paired(&next.context);
    assert_eq!(next.context.len(), 5);
    // Every message stays stored and readable.
    let stored = rows(&h);
    assert_eq!(stored.iter().filter(|r| r.role == "compaction").count(), 2);
    assert_eq!(stored[0].text, "first task");
}

#[test]
fn a_summary_still_leads_a_full_window_behind_it() {
    let mut h = Harness::new();
    h.session("s");
    h.prompt("s", "r1", "hello");
    let step = claim(&mut h);
    finish(&mut h, &step, "hi");
    h.command("s", json!({"type": "compact", "requestId": "c1"}));
    let step = claim(&mut h);
    compact(&mut h, &step, "greeted", Trigger::Command);
    // As many messages after it as a context holds.
    for i in 0..CONTEXT_MESSAGES_MAX - 1 {
        let r = h.command(
            "s",
            json!({"type": "operator", "requestId": format!("o{i}"), "text": format!("line {i}")}),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    h.prompt("s", "r2", "again");
    let step = claim(&mut h);
    assert!(is_summary(&step.context[0], "greeted"));
    assert_eq!(step.context.len(), CONTEXT_MESSAGES_MAX + 1);
    assert!(step.window.full, "compacts now, with a window stated");
    assert_eq!(
        step.window.range.as_ref().unwrap().messages as usize,
        CONTEXT_MESSAGES_MAX
    );
}

#[test]
fn the_estimate_is_the_last_reported_input_plus_the_bytes_since() {
    let mut h = Harness::new();
    h.session("s");
    h.prompt("s", "r1", &"x".repeat(400));
    let step = claim(&mut h);
    assert_eq!(
        step.window.tokens, 100,
        "no report yet: 400 bytes at 4 a token"
    );
    let answer = Answer::new(
        "y".repeat(40),
        Some(shiitake::model::Usage {
            input_tokens: 1_000,
            output_tokens: 10,
            ..shiitake::model::Usage::default()
        }),
        Vec::new(),
    );
    h.with_ctx(|ctx| complete_step(ctx, "s", &step.command_id, step.attempt, &answer))
        .unwrap();
    h.prompt("s", "r2", &"z".repeat(80));
    let step = claim(&mut h);
    assert_eq!(
        step.window.tokens,
        1_000 + 10 + 20,
        "reported, then 80 bytes"
    );
}
