//! Property: any sequence of admit / replay / withdraw / cancel / abort /
//! restart keeps "one requestId, at most one command; a fenced requestId is
//! never admitted", the queue stays the FIFO of admitted, uncancelled
//! prompts, and a Session's kept queue is what a read answers.

mod common;

use common::Harness;
use proptest::prelude::*;
use serde_json::json;
use shiitake::sql::Sql;
use std::collections::HashMap;

const SESSIONS: [&str; 2] = ["a", "b"];

#[derive(Debug, Clone)]
enum Op {
    Prompt {
        session: usize,
        request: u8,
        text: u8,
    },
    Operator {
        session: usize,
        request: u8,
    },
    Withdraw {
        session: usize,
        request: u8,
    },
    Cancel {
        session: usize,
        pick: usize,
    },
    Abort {
        session: usize,
    },
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 0..4u8, 0..2u8).prop_map(|(session, request, text)| Op::Prompt { session, request, text }),
        1 => (0..2usize, 0..4u8).prop_map(|(session, request)| Op::Operator { session, request }),
        2 => (0..2usize, 0..4u8).prop_map(|(session, request)| Op::Withdraw { session, request }),
        2 => (0..2usize, 0..8usize).prop_map(|(session, pick)| Op::Cancel { session, pick }),
        1 => (0..2usize).prop_map(|session| Op::Abort { session }),
        1 => Just(Op::Restart),
    ]
}

/// What a correct runtime must have answered so far, per (session, requestId).
#[derive(Debug, Clone, PartialEq)]
enum Fact {
    Admitted { command_id: String, input: String },
    Fenced,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn admission_invariants_hold(ops in proptest::collection::vec(op(), 1..40)) {
        let mut h = Harness::new();
        for s in SESSIONS { h.session(s); }
        let mut facts: HashMap<(usize, u8), Fact> = HashMap::new();
        // Model per session: the running turn and the queue, (commandId,
        // text), FIFO. A prompt admitted into an idle Session (nothing
        // running, nothing queued) starts its turn at once; no run loop runs
        // here, so a turn only ends by cancellation.
        let mut running: [Option<(String, String)>; 2] = [None, None];
        let mut queues: [Vec<(String, String)>; 2] = [Vec::new(), Vec::new()];

        for op in ops {
            match op {
                Op::Prompt { .. } | Op::Operator { .. } => {
                    let (session, request, body, input) = match op {
                        Op::Prompt { session, request, text } => {
                            let t = format!("text {text}");
                            (session, request, json!({"type":"prompt","requestId": format!("r{request}"),"text": t}), format!("prompt:{t}"))
                        }
                        Op::Operator { session, request } => {
                            (session, request, json!({"type":"operator","requestId": format!("r{request}"),"text":"line"}), "operator".to_owned())
                        }
                        _ => unreachable!(),
                    };
                    let r = h.command(SESSIONS[session], body);
                    match facts.get(&(session, request)) {
                        Some(Fact::Fenced) => {
                            prop_assert_eq!(r.status, 409);
                            prop_assert_eq!(r.json["error"]["code"].as_str(), Some("request_withdrawn"));
                        }
                        Some(Fact::Admitted { command_id, input: was }) => {
                            if *was == input {
                                prop_assert_eq!(r.status, 200);
                                prop_assert_eq!(r.json["commandId"].as_str(), Some(command_id.as_str()));
                            } else {
                                prop_assert_eq!(r.status, 409);
                                prop_assert_eq!(r.json["error"]["code"].as_str(), Some("request_conflict"));
                            }
                        }
                        None => {
                            prop_assert_eq!(r.status, 200, "{}", r.json);
                            let id = r.json["commandId"].as_str().unwrap().to_owned();
                            if let Some(t) = input.strip_prefix("prompt:") {
                                let entry = (id.clone(), t.to_owned());
                                if running[session].is_none() && queues[session].is_empty() {
                                    running[session] = Some(entry);
                                } else {
                                    queues[session].push(entry);
                                }
                            }
                            facts.insert((session, request), Fact::Admitted { command_id: id, input });
                        }
                    }
                }
                Op::Withdraw { session, request } => {
                    let r = h.withdraw(SESSIONS[session], &format!("r{request}"));
                    prop_assert_eq!(r.status, 200);
                    match facts.get(&(session, request)) {
                        Some(Fact::Admitted { command_id, .. }) => {
                            prop_assert_eq!(&r.json, &json!({"status":"accepted","commandId": command_id}));
                        }
                        _ => {
                            prop_assert_eq!(&r.json, &json!({"status":"unknown"}));
                            facts.insert((session, request), Fact::Fenced);
                        }
                    }
                }
                Op::Cancel { session, pick } => {
                    if let Some((id, _)) = &running[session] {
                        let r = h.command(SESSIONS[session], json!({"type":"cancel","commandId": id,"onlyIfPending": true}));
                        prop_assert_eq!(&r.json, &json!({"status":"too_late","commandId": id}));
                    }
                    let queue = &mut queues[session];
                    if !queue.is_empty() {
                        let (id, text) = queue.remove(pick % queue.len());
                        let r = h.command(SESSIONS[session], json!({"type":"cancel","commandId": id,"onlyIfPending": true}));
                        prop_assert_eq!(&r.json, &json!({"status":"cancelled","commandId": id,"text": text}));
                    }
                }
                Op::Abort { session } => {
                    let r = h.command(SESSIONS[session], json!({"type":"abort"}));
                    let got: Vec<String> = r.json["cancelled"].as_array().unwrap().iter()
                        .map(|c| c["commandId"].as_str().unwrap().to_owned()).collect();
                    let want: Vec<String> = running[session].take().into_iter()
                        .chain(queues[session].drain(..)).map(|(id, _)| id).collect();
                    prop_assert_eq!(got, want);
                }
                Op::Restart => h.restart(),
            }

            // Invariant: at most one command per (session, requestId).
            let dup = h.sql().query(
                "SELECT count(*) FROM (SELECT 1 FROM commands GROUP BY session_id, request_id HAVING count(*) > 1)",
                &[],
            ).unwrap();
            prop_assert_eq!(dup[0].int(0).unwrap(), 0);
            // Invariant: no command exists under a fenced requestId.
            let fenced = h.sql().query(
                "SELECT count(*) FROM commands c JOIN fences f
                 ON f.session_id = c.session_id AND f.request_id = c.request_id
                 WHERE c.accepted_at > f.created_at",
                &[],
            ).unwrap();
            prop_assert_eq!(fenced[0].int(0).unwrap(), 0);
            // A Session's kept queue (admission decides on it without a
            // read) is what a read answers.
            let store = shiitake::store::Store::new(h.sql());
            for s in SESSIONS {
                if let Some(kept) = store.kept_queue(s) {
                    let read = store.admission_facts(s, "").unwrap();
                    prop_assert!(read.session_exists && !read.fences);
                    prop_assert_eq!(
                        (kept.pending_count, kept.pending_bytes, kept.next_seq, kept.running),
                        (read.pending_count, read.pending_bytes, read.next_seq, read.running)
                    );
                }
            }
            // The running turn and the queue are the admitted, uncancelled
            // prompts, in FIFO order.
            for (i, s) in SESSIONS.iter().enumerate() {
                let got: Vec<(String, String)> = h.pending(s).into_iter().map(|(id, _, t)| (id, t)).collect();
                prop_assert_eq!(&got, &queues[i]);
                let read = h.read(s, "").json;
                let got_running = read["running"]["commandId"].as_str().map(str::to_owned);
                prop_assert_eq!(got_running, running[i].as_ref().map(|(id, _)| id.clone()));
            }
        }
    }
}
