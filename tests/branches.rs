//! Transcript branches over real SQLite, through the HTTP core and the run
//! transitions: edit and resend (`after`), `retry`, `select`, the children
//! of an entry, read pages with `parentEntryId` and `branch`, forks, the
//! refusals, and the model context following the selected branch. Then a
//! property: the stored tree's walks, tips and fork counts against a naive
//! model of the same operations.

mod common;

use common::Harness;
use proptest::prelude::*;
use serde_json::{json, Value};
use shiitake::ctx::{CounterIds, Ctx};
use shiitake::http::{handle, Hosted, HttpRequest};
use shiitake::meta::MetaPolicy;
use shiitake::model::{Answer, ModelItem, Role};
use shiitake::observe::Frame;
use shiitake::run::compaction::{self, Recorded, Summarised};
use shiitake::run::{complete_step, reconcile, Attempts, StepOutcome, Work};
use shiitake::session::branches;
use shiitake::session::read;
use shiitake::sql::native::NativeSql;
use shiitake::store::path::Start;
use shiitake::store::{schema, Store};
use shiitake::transcript::Trigger;
use std::collections::BTreeMap;

const ATTEMPTS: Attempts = Attempts { max: 3 };

/// The plain messages of a model context, `"u:text"` / `"a:text"`.
fn lines(context: &[ModelItem]) -> Vec<String> {
    context
        .iter()
        .filter_map(|item| match item {
            ModelItem::Message(m) => Some(format!(
                "{}:{}",
                if m.role == Role::User { "u" } else { "a" },
                m.text
            )),
            _ => None,
        })
        .collect()
}

/// Runs every turn that can run to its end; the model answers
/// `re <last user line>`, and a compaction's summary is `sum(<its context's
/// lines>)`. Returns each model call's context.
fn run(h: &mut Harness) -> Vec<Vec<String>> {
    let mut seen = Vec::new();
    loop {
        let steps = h
            .with_ctx(|ctx| {
                reconcile(
                    ctx,
                    &|_| false,
                    &|_| true,
                    ATTEMPTS,
                    &shiitake::budget::Limits::NONE,
                )
            })
            .unwrap()
            .steps;
        if steps.is_empty() {
            return seen;
        }
        for mut step in steps {
            loop {
                let context = lines(&step.context);
                if step.work != Work::Turn {
                    seen.push(context.clone());
                    let answer =
                        Answer::new(format!("sum({})", context.join(",")), None, Vec::new());
                    let range = step.window.range.clone().expect("something to compact");
                    let previous = step.window.summary.as_ref().map(|s| s.entry_id.clone());
                    let recorded = h
                        .with_ctx(|ctx| {
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
                                    trigger: Trigger::Command,
                                }),
                            )
                        })
                        .unwrap();
                    match recorded {
                        Recorded::Settled { next: Some(n), .. } => {
                            step = n;
                            continue;
                        }
                        Recorded::Settled { .. } => break,
                        other => panic!("{other:?}"),
                    }
                }
                let last = context.iter().rev().find(|l| l.starts_with("u:")).cloned();
                seen.push(context);
                let text = format!("re {}", &last.unwrap_or_default()[2..]);
                let outcome = h
                    .with_ctx(|ctx| {
                        complete_step(
                            ctx,
                            &step.session_id,
                            &step.command_id,
                            step.attempt,
                            &Answer::new(&text, None, Vec::new()),
                        )
                    })
                    .unwrap();
                match outcome {
                    StepOutcome::Settled { next: Some(n), .. } | StepOutcome::Continue(n) => {
                        step = n
                    }
                    _ => break,
                }
            }
        }
    }
}

/// The read page's messages.
fn messages(h: &mut Harness, session: &str, query: &str) -> Vec<Value> {
    let r = h.read(session, query);
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["messages"].as_array().unwrap().clone()
}

/// The texts of the Session's selected branch, oldest first.
fn texts(h: &mut Harness, session: &str) -> Vec<String> {
    messages(h, session, "?limit=200")
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect()
}

/// The entry id of the message with `text` on the selected branch.
fn entry(h: &mut Harness, session: &str, text: &str) -> String {
    messages(h, session, "?limit=200")
        .iter()
        .find(|m| m["text"] == text)
        .unwrap_or_else(|| panic!("no message `{text}`"))["entryId"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn ok(h: &mut Harness, session: &str, body: Value) -> String {
    let r = h.command(session, body);
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["commandId"].as_str().unwrap().to_owned()
}

/// A Session `s` with two answered turns: `one`, `re one`, `two`, `re two`.
fn two_turns() -> Harness {
    let mut h = Harness::new();
    h.session("s");
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p1","text":"one"}),
    );
    run(&mut h);
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p2","text":"two"}),
    );
    run(&mut h);
    assert_eq!(texts(&mut h, "s"), ["one", "re one", "two", "re two"]);
    h
}

#[test]
fn edit_and_resend_runs_on_a_new_branch_the_model_sees_only_its_path() {
    let mut h = two_turns();
    let first_answer = entry(&mut h, "s", "re one");
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p3","text":"TWO","after":first_answer}),
    );
    let seen = run(&mut h);
    assert_eq!(seen, [["u:one", "a:re one", "u:TWO"]]);
    assert_eq!(texts(&mut h, "s"), ["one", "re one", "TWO", "re TWO"]);
    let page = messages(&mut h, "s", "");
    // Each message names its parent; the edited prompt is the second child.
    assert_eq!(page[0]["parentEntryId"], Value::Null);
    assert_eq!(page[2]["parentEntryId"], first_answer.as_str());
    assert_eq!(page[2]["branch"], json!({"index": 2, "count": 2}));
    assert_eq!(page[3]["parentEntryId"], page[2]["entryId"]);
    assert!(page[3].get("branch").is_none() && page[1].get("branch").is_none());
    // Positions follow the append order: the edited prompt is newest.
    let sequences: Vec<i64> = page
        .iter()
        .map(|m| m["sequence"].as_i64().unwrap())
        .collect();
    assert_eq!(sequences, [1, 2, 5, 6]);
    // The children of the first answer: the old prompt, then the edit.
    let r = h.call(
        "GET",
        &format!("/sessions/s/branches?entryId={first_answer}"),
        Value::Null,
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["count"], 2);
    let children: Vec<(&str, &Value)> = r.json["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["text"].as_str().unwrap(), &c["branch"]))
        .collect();
    assert_eq!(
        children,
        [
            ("two", &json!({"index": 1, "count": 2})),
            ("TWO", &json!({"index": 2, "count": 2}))
        ]
    );
    // One child per page: the cursor walks them.
    let r = h.call(
        "GET",
        &format!("/sessions/s/branches?entryId={first_answer}&limit=1"),
        Value::Null,
    );
    assert_eq!(r.json["children"][0]["text"], "two");
    let cursor = r.json["cursor"].as_str().unwrap().to_owned();
    let r = h.call(
        "GET",
        &format!("/sessions/s/branches?entryId={first_answer}&limit=1&cursor={cursor}"),
        Value::Null,
    );
    assert_eq!(r.json["children"][0]["text"], "TWO");
    assert_eq!(r.json["cursor"], Value::Null);
}

#[test]
fn retry_answers_the_user_message_again_beside_the_old_answer() {
    let mut h = two_turns();
    let two = entry(&mut h, "s", "two");
    let old = entry(&mut h, "s", "re two");
    let retry = ok(
        &mut h,
        "s",
        json!({"type":"retry","requestId":"r1","entryId":two}),
    );
    // Admitted into an idle Session, the retry started at once: the branch
    // selected is the one ending at the retried message.
    assert_eq!(texts(&mut h, "s"), ["one", "re one", "two"]);
    let seen = run(&mut h);
    assert_eq!(seen, [["u:one", "a:re one", "u:two"]]);
    let page = messages(&mut h, "s", "");
    assert_eq!(page.len(), 4);
    assert_eq!(page[3]["parentEntryId"], two.as_str());
    assert_eq!(page[3]["branch"], json!({"index": 2, "count": 2}));
    assert_eq!(page[3]["commandId"], retry.as_str());
    let settlement = h.call(
        "GET",
        &format!("/sessions/s/settlement?commandId={retry}"),
        Value::Null,
    );
    assert_eq!(settlement.json["terminal"], "completed");
    // A replay answers the same receipt; other input under its id is a conflict.
    let replay = h.command("s", json!({"type":"retry","requestId":"r1","entryId":two}));
    assert_eq!(replay.json["commandId"], retry.as_str());
    let conflict = h.command("s", json!({"type":"retry","requestId":"r1","entryId":old}));
    assert_eq!(conflict.json["error"]["code"], "request_conflict");
    // Select the old answer again; the next prompt continues after it.
    ok(
        &mut h,
        "s",
        json!({"type":"select","requestId":"sel","entryId":old}),
    );
    assert_eq!(texts(&mut h, "s"), ["one", "re one", "two", "re two"]);
    assert_eq!(
        messages(&mut h, "s", "")[3]["branch"],
        json!({"index": 1, "count": 2})
    );
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p3","text":"three"}),
    );
    let seen = run(&mut h);
    assert_eq!(
        seen,
        [["u:one", "a:re one", "u:two", "a:re two", "u:three"]]
    );
    assert_eq!(
        texts(&mut h, "s"),
        ["one", "re one", "two", "re two", "three", "re three"]
    );
    // Selecting the retried message follows its newest child: the retry's.
    ok(
        &mut h,
        "s",
        json!({"type":"select","requestId":"sel2","entryId":two}),
    );
    assert_eq!(texts(&mut h, "s"), ["one", "re one", "two", "re two"]);
    let retried = messages(&mut h, "s", "")[3].clone();
    assert_eq!(retried["commandId"], retry.as_str());
}

#[test]
fn select_writes_one_session_row_and_frames_tell_watchers_to_read_again() {
    let mut h = two_turns();
    let one = entry(&mut h, "s", "one");
    let req = HttpRequest {
        method: "POST".into(),
        path: "/sessions/s/commands".into(),
        body: json!({"type":"select","requestId":"x","entryId":one})
            .to_string()
            .into_bytes(),
        ..HttpRequest::default()
    };
    let changes_before = h.sql().total_changes();
    let response = h.with_ctx(|ctx| handle(ctx, &Hosted::without_models(None), &req));
    assert_eq!(response.status, 200);
    // The command row and the Session's head.
    assert_eq!(h.sql().total_changes() - changes_before, 2);
    let frames: Vec<String> = response
        .effects
        .frames
        .iter()
        .map(|(_, f)| {
            serde_json::to_value(f).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(frames, ["admitted", "branch"]);
    match &response.effects.frames[1].1 {
        Frame::Branch { entry_id } => assert_eq!(entry_id.as_deref(), Some(one.as_str())),
        other => panic!("{other:?}"),
    }
    // `one` has one child: its branch ends at the newest message.
    assert_eq!(texts(&mut h, "s"), ["one", "re one", "two", "re two"]);
}

#[test]
fn refusals_name_the_problem() {
    let mut h = two_turns();
    h.session("other");
    ok(
        &mut h,
        "other",
        json!({"type":"prompt","requestId":"o1","text":"elsewhere"}),
    );
    run(&mut h);
    let elsewhere = entry(&mut h, "other", "elsewhere");
    let answer = entry(&mut h, "s", "re one");
    let code = |h: &mut Harness, body: Value| {
        let r = h.command("s", body);
        (
            r.status,
            r.json["error"]["code"].as_str().unwrap_or("").to_owned(),
        )
    };
    assert_eq!(
        code(
            &mut h,
            json!({"type":"retry","requestId":"a","entryId":"msg_nope"})
        ),
        (404, "entry_not_found".into())
    );
    assert_eq!(
        code(
            &mut h,
            json!({"type":"retry","requestId":"b","entryId":answer})
        ),
        (400, "entry_not_user".into())
    );
    assert_eq!(
        code(
            &mut h,
            json!({"type":"prompt","requestId":"c","text":"x","after":elsewhere})
        ),
        (400, "entry_not_on_path".into())
    );
    assert_eq!(
        code(
            &mut h,
            json!({"type":"select","requestId":"d","entryId":elsewhere})
        ),
        (400, "entry_not_on_path".into())
    );
    assert_eq!(
        code(
            &mut h,
            json!({"type":"prompt","requestId":"e","text":"x","after":answer,"delivery":"steer"})
        ),
        (400, "invalid_request".into())
    );
    assert_eq!(
        code(
            &mut h,
            json!({"type":"select","requestId":"f","entryId":""})
        ),
        (400, "invalid_request".into())
    );
    // A select while a turn runs.
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"g","text":"busy"}),
    );
    assert_eq!(
        code(
            &mut h,
            json!({"type":"select","requestId":"h","entryId":answer})
        ),
        (409, "session_busy".into())
    );
    // Nothing refused was recorded: the same ids are free.
    run(&mut h);
    ok(
        &mut h,
        "s",
        json!({"type":"select","requestId":"h","entryId":answer}),
    );
    let r = h.call("GET", "/sessions/s/branches", Value::Null);
    assert_eq!(r.json["error"]["code"], "invalid_query");
    let r = h.call("GET", "/sessions/s/branches?entryId=msg_nope", Value::Null);
    assert_eq!(r.json["error"]["code"], "entry_not_found");
}

#[test]
fn after_the_start_edits_the_first_message() {
    let mut h = two_turns();
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p3","text":"ONE","after":""}),
    );
    let seen = run(&mut h);
    assert_eq!(seen, [["u:ONE"]]);
    let page = messages(&mut h, "s", "");
    assert_eq!(page.len(), 2);
    assert_eq!(page[0]["parentEntryId"], Value::Null);
    assert_eq!(page[0]["branch"], json!({"index": 2, "count": 2}));
}

#[test]
fn retries_queue_like_prompts_but_are_no_latest_pending_prompt() {
    let mut h = two_turns();
    let two = entry(&mut h, "s", "two");
    h.occupy("s");
    let retry = ok(
        &mut h,
        "s",
        json!({"type":"retry","requestId":"r","entryId":two}),
    );
    let read = h.read("s", "").json;
    assert_eq!(read["pending"][0]["retry"], two.as_str());
    assert_eq!(read["pending"][0]["text"], "");
    let latest = h.call("GET", "/sessions/s/pending/latest", Value::Null);
    assert_eq!(latest.json, Value::Null);
    let cancelled = h.command("s", json!({"type":"cancel","commandId":retry}));
    assert_eq!(cancelled.json["status"], "cancelled");
    assert!(h.read("s", "").json["pending"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn a_queued_retry_claimed_by_a_settling_turn_starts_its_branch_in_that_write() {
    let mut h = two_turns();
    let two = entry(&mut h, "s", "two");
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p3","text":"three"}),
    );
    ok(
        &mut h,
        "s",
        json!({"type":"retry","requestId":"r","entryId":two}),
    );
    let seen = run(&mut h);
    assert_eq!(
        seen,
        [
            vec!["u:one", "a:re one", "u:two", "a:re two", "u:three"],
            vec!["u:one", "a:re one", "u:two"],
        ]
    );
    assert_eq!(texts(&mut h, "s"), ["one", "re one", "two", "re two"]);
    let page = messages(&mut h, "s", "");
    assert_eq!(page[3]["branch"], json!({"index": 2, "count": 2}));
}

#[test]
fn a_queued_edit_starts_its_branch_when_its_turn_starts() {
    let mut h = two_turns();
    let first_answer = entry(&mut h, "s", "re one");
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p3","text":"three"}),
    );
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p4","text":"TWO","after":first_answer}),
    );
    let read = h.read("s", "").json;
    assert_eq!(read["pending"][0]["after"], first_answer.as_str());
    let seen = run(&mut h);
    assert_eq!(
        seen,
        [
            vec!["u:one", "a:re one", "u:two", "a:re two", "u:three"],
            vec!["u:one", "a:re one", "u:TWO"],
        ]
    );
    assert_eq!(texts(&mut h, "s"), ["one", "re one", "TWO", "re TWO"]);
}

#[test]
fn pages_walk_the_selected_branch_across_its_fork_points() {
    let mut h = two_turns();
    let first_answer = entry(&mut h, "s", "re one");
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p3","text":"TWO","after":first_answer}),
    );
    run(&mut h);
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p4","text":"three"}),
    );
    run(&mut h);
    let mut all = Vec::new();
    let mut query = "?limit=2".to_owned();
    loop {
        let r = h.read("s", &query);
        let page = r.json["messages"].as_array().unwrap().clone();
        assert!(page.len() <= 2);
        all.splice(
            0..0,
            page.iter().map(|m| m["text"].as_str().unwrap().to_owned()),
        );
        match r.json["cursor"].as_str() {
            Some(c) => query = format!("?limit=2&before={c}"),
            None => break,
        }
    }
    assert_eq!(all, ["one", "re one", "TWO", "re TWO", "three", "re three"]);
}

#[test]
fn a_fork_shares_its_base_history_and_keeps_it_while_it_lives() {
    let mut h = two_turns();
    let first_answer = entry(&mut h, "s", "re one");
    let r = h.call(
        "POST",
        "/sessions",
        json!({"sessionId":"f","from":{"sessionId":"s","entryId":first_answer}}),
    );
    assert_eq!(r.status, 201, "{}", r.json);
    // One row: no message is copied.
    assert_eq!(texts(&mut h, "f"), ["one", "re one"]);
    ok(
        &mut h,
        "f",
        json!({"type":"prompt","requestId":"f1","text":"forked"}),
    );
    let seen = run(&mut h);
    assert_eq!(seen, [["u:one", "a:re one", "u:forked"]]);
    assert_eq!(texts(&mut h, "f"), ["one", "re one", "forked", "re forked"]);
    let page = messages(&mut h, "f", "");
    assert_eq!(page[2]["parentEntryId"], first_answer.as_str());
    assert_eq!(page[2]["sequence"], 3, "numbered after the base position");
    assert_eq!(texts(&mut h, "s"), ["one", "re one", "two", "re two"]);
    // Edit within the fork at a base entry, and retry a base user message.
    let one = entry(&mut h, "f", "one");
    ok(
        &mut h,
        "f",
        json!({"type":"retry","requestId":"f2","entryId":one}),
    );
    assert_eq!(run(&mut h), [["u:one"]]);
    assert_eq!(texts(&mut h, "f"), ["one", "re one"]);
    let page = messages(&mut h, "f", "");
    assert_eq!(page[1]["branch"], json!({"index": 2, "count": 2}));
    assert_eq!(page[1]["parentEntryId"], one.as_str());
    // The base's other branches are not the fork's.
    let two = entry(&mut h, "s", "two");
    let r = h.command("f", json!({"type":"select","requestId":"f3","entryId":two}));
    assert_eq!(r.json["error"]["code"], "entry_not_on_path");
    // A fork of the fork, at its own message, continues through both.
    let forked = {
        ok(
            &mut h,
            "f",
            json!({"type":"select","requestId":"f4","entryId":first_answer}),
        );
        entry(&mut h, "f", "forked")
    };
    let r = h.call(
        "POST",
        "/sessions",
        json!({"sessionId":"g","from":{"sessionId":"f","entryId":forked}}),
    );
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(texts(&mut h, "g"), ["one", "re one", "forked"]);
    // The base keeps its forks' history: deleting it is refused until they go.
    let r = h.call("DELETE", "/sessions/s", Value::Null);
    assert_eq!(r.json["error"]["code"], "session_has_forks");
    let r = h.call("DELETE", "/sessions/f", Value::Null);
    assert_eq!(r.json["error"]["code"], "session_has_forks");
    assert_eq!(h.call("DELETE", "/sessions/g", Value::Null).status, 204);
    assert_eq!(h.call("DELETE", "/sessions/f", Value::Null).status, 204);
    assert_eq!(h.call("DELETE", "/sessions/s", Value::Null).status, 204);
    // Refusals: an unknown entry, an unknown base Session.
    h.session("s2");
    let r = h.call(
        "POST",
        "/sessions",
        json!({"from":{"sessionId":"s2","entryId":"msg_nope"}}),
    );
    assert_eq!(r.json["error"]["code"], "entry_not_found");
    let r = h.call(
        "POST",
        "/sessions",
        json!({"from":{"sessionId":"nope","entryId":"msg_nope"}}),
    );
    assert_eq!(r.json["error"]["code"], "session_not_found");
}

#[test]
fn a_compaction_summarises_the_selected_branch_and_cuts_only_the_paths_through_it() {
    let mut h = two_turns();
    let a_answer = entry(&mut h, "s", "re two");
    // Branch B beside A (`two`, `re two`): an edit after `re one`.
    let first_answer = entry(&mut h, "s", "re one");
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p3","text":"deux","after":first_answer}),
    );
    run(&mut h);
    let (from, through) = (entry(&mut h, "s", "one"), entry(&mut h, "s", "re deux"));
    ok(&mut h, "s", json!({"type":"compact","requestId":"c1"}));
    // It summarised B's context only.
    let summary = "sum(u:one,a:re one,u:deux,a:re deux)";
    assert_eq!(run(&mut h), [["u:one", "a:re one", "u:deux", "a:re deux"]]);
    let page = messages(&mut h, "s", "");
    let cmp = page.last().unwrap();
    assert_eq!(cmp["role"], "compaction");
    assert_eq!(cmp["text"], summary);
    assert_eq!(
        (&cmp["compacted"]["from"], &cmp["compacted"]["through"]),
        (&json!(from), &json!(through))
    );
    assert_eq!(cmp["compacted"]["messages"], 4);
    assert_eq!(cmp["parentEntryId"], through.as_str());
    // B's next turn sees the summary, then its prompt.
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p4","text":"three"}),
    );
    let seen = run(&mut h);
    assert_eq!(seen.len(), 1);
    assert!(seen[0][0].contains(&format!("<summary>\n{summary}\n</summary>")));
    assert_eq!(seen[0][1..], ["u:three"]);
    // A retry on B after the compaction is cut by it too.
    let three = entry(&mut h, "s", "three");
    ok(
        &mut h,
        "s",
        json!({"type":"retry","requestId":"r1","entryId":three}),
    );
    let seen = run(&mut h);
    assert!(seen[0][0].contains(summary));
    assert_eq!(seen[0][1..], ["u:three"]);
    // An edit after B's last answer before the compaction leaves its path:
    // not cut.
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p5","text":"DEUX","after":through}),
    );
    assert_eq!(
        run(&mut h),
        [["u:one", "a:re one", "u:deux", "a:re deux", "u:DEUX"]]
    );
    // Back on A: the compaction entry lies newer than A's messages, on
    // another branch; A's context is whole.
    ok(
        &mut h,
        "s",
        json!({"type":"select","requestId":"sel","entryId":a_answer}),
    );
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p6","text":"four"}),
    );
    assert_eq!(
        run(&mut h),
        [["u:one", "a:re one", "u:two", "a:re two", "u:four"]]
    );
    // The same through the walk: an off-path compaction entry newer in the
    // read hid A's bodies; the walk read again and loaded each.
    let store = Store::new(h.sql());
    let tip = store.facts("s").unwrap().unwrap().tip();
    let walk = store
        .walk_context("s", Start::At(tip), 10, 1 << 20)
        .unwrap();
    assert_eq!(walk.rows.len(), 6, "four, re four and A's four messages");
    assert!(walk.rows.iter().all(|r| r.body.is_some() && !r.compaction));
    // A fork whose history passes through the compaction is cut by it.
    ok(
        &mut h,
        "s",
        json!({"type":"select","requestId":"sel2","entryId":three}),
    );
    let re_three = entry(&mut h, "s", "re three");
    let r = h.call(
        "POST",
        "/sessions",
        json!({"sessionId":"f","from":{"sessionId":"s","entryId":re_three}}),
    );
    assert_eq!(r.status, 201, "{}", r.json);
    ok(
        &mut h,
        "f",
        json!({"type":"prompt","requestId":"f1","text":"five"}),
    );
    let seen = run(&mut h);
    assert!(seen[0][0].contains(summary));
    assert_eq!(seen[0][1..], ["u:three", "a:re three", "u:five"]);
}

#[test]
fn a_steer_joins_a_running_retry_on_its_new_branch_and_a_cancelled_retry_leaves_it_selected() {
    let mut h = two_turns();
    let two = entry(&mut h, "s", "two");
    // Admitted into the idle Session, the retry runs; a steer joins it.
    ok(
        &mut h,
        "s",
        json!({"type":"retry","requestId":"r1","entryId":two}),
    );
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"st","text":"shorter","delivery":"steer"}),
    );
    let seen = run(&mut h);
    assert_eq!(
        seen,
        [
            vec!["u:one", "a:re one", "u:two"],
            vec!["u:one", "a:re one", "u:two", "a:re two", "u:shorter"],
        ]
    );
    assert_eq!(
        texts(&mut h, "s"),
        ["one", "re one", "two", "re two", "shorter", "re shorter"]
    );
    assert_eq!(
        messages(&mut h, "s", "")[3]["branch"],
        json!({"index": 2, "count": 2})
    );
    // A retry cancelled before its answer: the branch ending at the
    // retried message stays selected; the old answers stay stored.
    let again = ok(
        &mut h,
        "s",
        json!({"type":"retry","requestId":"r2","entryId":two}),
    );
    let cancelled = h.command("s", json!({"type":"cancel","commandId":again}));
    assert_eq!(cancelled.json["status"], "cancelled", "{}", cancelled.json);
    assert_eq!(cancelled.json["text"], "");
    assert_eq!(texts(&mut h, "s"), ["one", "re one", "two"]);
    let r = h.call(
        "GET",
        &format!("/sessions/s/branches?entryId={two}"),
        Value::Null,
    );
    assert_eq!(r.json["count"], 2);
    // The fork point's position of a fork with no message of its own.
    let first_answer = entry(&mut h, "s", "re one");
    let r = h.call(
        "POST",
        "/sessions",
        json!({"sessionId":"f","from":{"sessionId":"s","entryId":first_answer}}),
    );
    assert_eq!(r.status, 201);
    assert_eq!(Store::new(h.sql()).position("f").unwrap(), 2);
}

#[test]
fn branches_and_fork_chains_are_bounded() {
    use shiitake::limits::{BRANCHES_PER_SESSION_MAX, FORK_DEPTH_MAX};
    use shiitake::sql::{atomically, SqlError};
    let mut h = two_turns();
    let two = entry(&mut h, "s", "two");
    // Fill the Session's branches up to the bound, straight into its table.
    let store = Store::new(h.sql());
    let fill: Result<(), SqlError> = atomically(h.sql(), || {
        for n in 0..BRANCHES_PER_SESSION_MAX - 1 {
            store.insert_message_after("s", &body(n), Some(1))?;
        }
        Ok(())
    });
    fill.unwrap();
    let code = |h: &mut Harness, body: Value| h.command("s", body).json["error"]["code"].clone();
    // One branch left: a select takes it; the next is refused.
    ok(
        &mut h,
        "s",
        json!({"type":"select","requestId":"x","entryId":two}),
    );
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"y","text":"after the select"}),
    );
    run(&mut h);
    for body in [
        json!({"type":"retry","requestId":"r","entryId":two}),
        json!({"type":"prompt","requestId":"p","text":"t","after":two}),
        json!({"type":"select","requestId":"s","entryId":two}),
    ] {
        assert_eq!(code(&mut h, body), "too_many_branches");
    }
    // A chain of forks, each at its base's own message.
    let mut base = "s".to_owned();
    let mut at = two;
    for depth in 2..=FORK_DEPTH_MAX {
        let fork = format!("f{depth}");
        let r = h.call(
            "POST",
            "/sessions",
            json!({"sessionId": fork, "from": {"sessionId": base, "entryId": at}}),
        );
        assert_eq!(r.status, 201, "depth {depth}: {}", r.json);
        Store::new(h.sql())
            .insert_message(&fork, &body(100_000 + depth))
            .unwrap();
        at = format!("e{}", 100_000 + depth);
        base = fork;
    }
    let r = h.call(
        "POST",
        "/sessions",
        json!({"from": {"sessionId": base, "entryId": at}}),
    );
    assert_eq!(r.json["error"]["code"], "fork_too_deep", "{}", r.json);
    // The deepest fork reads through every base.
    assert_eq!(texts(&mut h, &base).len(), 3 + FORK_DEPTH_MAX - 1);
}

/// ACP `session/load` replays the selected branch.
#[cfg(feature = "acp")]
#[test]
fn acp_load_replays_the_selected_branch() {
    use shiitake::acp::{self, Answer as Acp};
    let mut h = two_turns();
    let first_answer = entry(&mut h, "s", "re one");
    ok(
        &mut h,
        "s",
        json!({"type":"prompt","requestId":"p3","text":"TWO","after":first_answer}),
    );
    run(&mut h);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "session/load",
        "params": {"sessionId": "s", "cwd": "/", "mcpServers": []}});
    let req = HttpRequest {
        method: "POST".into(),
        path: "/acp".into(),
        body: body.to_string().into_bytes(),
        ..HttpRequest::default()
    };
    let served = h.with_ctx(|ctx| acp::handle(ctx, &req));
    let Acp::Stream { messages, .. } = served.answer else {
        panic!("{:?}", served.answer)
    };
    let texts: Vec<String> = messages
        .iter()
        .filter_map(|m| {
            let v: Value = serde_json::from_str(m).unwrap();
            v["params"]["update"]["content"]["text"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(texts, ["one", "re one", "TWO", "re TWO"]);
}

// ---- the stored tree against a naive model ----

/// One Session of the model: its own messages (`seq -> parent`), its
/// base, and its selected tip (`None`: the newest).
#[derive(Debug, Clone, Default)]
struct ModelSession {
    own: BTreeMap<i64, i64>,
    base: Option<(usize, i64)>,
    head: Option<i64>,
}

#[derive(Debug, Default)]
struct Model {
    sessions: Vec<ModelSession>,
}

impl Model {
    fn newest(&self, s: usize) -> i64 {
        let m = &self.sessions[s];
        m.own
            .keys()
            .next_back()
            .copied()
            .unwrap_or(m.base.map_or(0, |(_, b)| b))
    }

    /// `(session holding it, parent)` of position `seq` in `s`'s view.
    fn node(&self, s: usize, seq: i64) -> (usize, i64) {
        let m = &self.sessions[s];
        match m.own.get(&seq) {
            Some(p) => (s, *p),
            None => {
                let (b, _) = m.base.expect("a position below a fork's base");
                self.node(b, seq)
            }
        }
    }

    fn tip(&self, s: usize) -> i64 {
        self.sessions[s].head.unwrap_or(self.newest(s))
    }

    /// The path ending at `seq` in `s`'s view, newest first.
    fn path(&self, s: usize, mut seq: i64) -> Vec<(usize, i64)> {
        let mut out = Vec::new();
        while seq > 0 {
            let (holder, parent) = self.node(s, seq);
            out.push((holder, seq));
            seq = parent;
        }
        out
    }

    /// Every position of `s`'s view.
    fn view(&self, s: usize) -> Vec<i64> {
        let m = &self.sessions[s];
        let mut all: Vec<i64> = m.own.keys().copied().collect();
        if let Some((_, b)) = m.base {
            all.extend(self.path(s, b).into_iter().map(|(_, seq)| seq));
        }
        all.sort_unstable();
        all
    }

    fn children(&self, s: usize, seq: i64) -> Vec<i64> {
        let view = self.view(s);
        view.into_iter()
            .filter(|&c| self.node(s, c).1 == seq)
            .collect()
    }

    fn branch_tip(&self, s: usize, mut seq: i64) -> i64 {
        while let Some(&c) = self.children(s, seq).iter().max() {
            seq = c;
        }
        seq
    }

    fn append(&mut self, s: usize, parent: Option<i64>) -> i64 {
        let seq = self.newest(s) + 1;
        let parent = parent.unwrap_or_else(|| self.tip(s));
        let m = &mut self.sessions[s];
        m.own.insert(seq, parent);
        m.head = None;
        seq
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// A message at the selected tip of Session `s`.
    Append { s: usize },
    /// A message starting a branch after the `pick`-th position of the view (or the start).
    After { s: usize, pick: usize },
    /// Select the branch through the `pick`-th position.
    Select { s: usize, pick: usize },
    /// A fork of `s` at its `pick`-th position.
    Fork { s: usize, pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize).prop_map(|s| Op::Append { s }),
        3 => (0..3usize, 0..64usize).prop_map(|(s, pick)| Op::After { s, pick }),
        2 => (0..3usize, 0..64usize).prop_map(|(s, pick)| Op::Select { s, pick }),
        1 => (0..3usize, 0..64usize).prop_map(|(s, pick)| Op::Fork { s, pick }),
    ]
}

fn body(n: usize) -> String {
    // Sizes vary so byte bounds cut walks at different places.
    format!(
        "{{\"entryId\":\"e{n}\",\"role\":\"user\",\"text\":\"{}\",\"createdAt\":0}}",
        "x".repeat(n % 7 * 10)
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn walks_tips_and_fork_counts_match_a_naive_model(
        ops in prop::collection::vec(op(), 1..60),
        limit in 1..12usize,
        room in 60..400usize,
    ) {
        let sql = NativeSql::open_in_memory();
        schema::open(&sql).unwrap();
        let store = Store::new(&sql);
        let mut model = Model::default();
        let name = |s: usize| format!("s{s}");
        let mut written = 0;
        // The entry id of each stored message, by (holder, position).
        let mut ids: BTreeMap<(usize, i64), String> = BTreeMap::new();
        let session = |store: &Store<'_>, model: &mut Model, base: Option<(usize, i64)>| {
            let s = model.sessions.len();
            match base {
                None => store.insert_session(&name(s), 0).unwrap(),
                Some((b, seq)) => store.insert_fork(&name(s), &name(b), seq, 0).unwrap(),
            }
            model.sessions.push(ModelSession { base, ..Default::default() });
        };
        session(&store, &mut model, None);
        for op in ops {
            match op {
                Op::Append { s } if s < model.sessions.len() => {
                    written += 1;
                    store.insert_message(&name(s), &body(written)).unwrap();
                    let seq = model.append(s, None);
                    ids.insert((s, seq), format!("e{written}"));
                }
                Op::After { s, pick } if s < model.sessions.len() => {
                    let view = model.view(s);
                    let parent = if pick % (view.len() + 1) == view.len() { 0 } else { view[pick % (view.len() + 1)] };
                    written += 1;
                    store.insert_message_after(&name(s), &body(written), Some(parent)).unwrap();
                    let seq = model.append(s, Some(parent));
                    ids.insert((s, seq), format!("e{written}"));
                }
                Op::Select { s, pick } if s < model.sessions.len() => {
                    let view = model.view(s);
                    if view.is_empty() { continue; }
                    let at = view[pick % view.len()];
                    let chain = store.chain(&name(s)).unwrap();
                    let tip = branches::branch_tip(store, &chain, at).unwrap();
                    prop_assert_eq!(tip, model.branch_tip(s, at), "tip through {}", at);
                    store.set_head(&name(s), Some(tip)).unwrap();
                    model.sessions[s].head = (tip != model.newest(s)).then_some(tip);
                }
                Op::Fork { s, pick } if s < model.sessions.len() && model.sessions.len() < 6 => {
                    let view = model.view(s);
                    if view.is_empty() { continue; }
                    let at = view[pick % view.len()];
                    let (holder, _) = model.node(s, at);
                    session(&store, &mut model, Some((holder, at)));
                }
                _ => {}
            }
            // Every Session's selected branch, and a walk from each position.
            for s in 0..model.sessions.len() {
                let expected = model.path(s, model.tip(s));
                let walk = store.walk(&name(s), Start::Tip, limit, room).unwrap();
                let got: Vec<(String, i64)> = walk.rows.iter().map(|r| (walk.session_of(r).to_owned(), r.seq)).collect();
                let want: Vec<(String, i64)> = expected.iter().take(limit).map(|(h, seq)| (name(*h), *seq)).collect();
                prop_assert_eq!(&got, &want, "tip walk of s{}", s);
                // Bodies: the newest whose bytes fit the room, then none.
                let mut used = 0;
                let mut loading = true;
                for row in &walk.rows {
                    loading &= used + row.bytes <= room;
                    if loading { used += row.bytes; }
                    prop_assert_eq!(row.body.is_some(), loading, "body of {}", row.seq);
                }
                for &at in &model.view(s) {
                    let walk = store.walk(&name(s), Start::Below(at), limit, room).unwrap();
                    let got: Vec<i64> = walk.rows.iter().map(|r| r.seq).collect();
                    let want: Vec<i64> = model.path(s, at).iter().skip(1).take(limit).map(|(_, seq)| *seq).collect();
                    prop_assert_eq!(got, want, "walk of s{} below {}", s, at);
                    let walk = store.walk(&name(s), Start::At(at), limit, room).unwrap();
                    prop_assert_eq!(walk.rows[0].seq, at);
                }
                // The read page: each message's parent and place among its siblings.
                let (mut counter, policy) = (CounterIds::default(), MetaPolicy::default());
                let ctx = Ctx { store, now_ms: 0, ids: &mut counter, meta: &policy, spans: Vec::new(), charged: None };
                let page = read::page(&ctx, &name(s), None, limit).unwrap();
                let served: Vec<Value> = page.messages.iter().map(|m| serde_json::from_str(m.get()).unwrap()).collect();
                let path: Vec<(usize, i64)> = expected.iter().take(served.len()).rev().copied().collect();
                prop_assert_eq!(served.len(), expected.len().min(limit));
                for (m, (holder, seq)) in served.iter().zip(&path) {
                    prop_assert_eq!(m["sequence"].as_i64(), Some(*seq));
                    prop_assert_eq!(m["entryId"].as_str(), Some(ids[&(*holder, *seq)].as_str()));
                    let parent = model.node(s, *seq).1;
                    let parent_id = (parent > 0).then(|| ids[&(model.node(s, parent).0, parent)].clone());
                    prop_assert_eq!(m["parentEntryId"].as_str(), parent_id.as_deref(), "parent of {}", seq);
                    let siblings = model.children(s, parent);
                    let branch = (siblings.len() > 1).then(|| json!({
                        "index": siblings.iter().position(|c| c == seq).unwrap() + 1,
                        "count": siblings.len(),
                    }));
                    prop_assert_eq!(m.get("branch"), branch.as_ref(), "branch of s{} {}", s, seq);
                }
            }
        }
    }
}
