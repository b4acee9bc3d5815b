//! The Agent directory (`src/fleet/directory.rs`) and the member flags
//! (`src/fleet/member.rs`) over real SQLite: the replay receipt, conflicts,
//! bounds, list pages and the archived filter, every archive refusal
//! (the directory's and the target's), unarchive, erasure, and the
//! archived Agent's answer to mail.

use serde_json::{json, Value};
use shiitake::ctx::{Ctx, IdSource};
use shiitake::fleet::directory::{self, CreateInput, Entry, Refusal, Request, DIRECTORY_AGENT_ID};
use shiitake::fleet::member::{self, MemberAnswer};
use shiitake::fleet::{self, Call, Offer};
use shiitake::http::{handle, Hosted, HttpRequest};
use shiitake::limits::{DIRECTORY_AGENTS_MAX, DIRECTORY_ERASED_KEPT_MAX};
use shiitake::mail::{self, Acceptance, Address, Mail, Outcome, Outgoing, ReplyFacts};
use shiitake::meta::MetaPolicy;
use shiitake::session::command::Delivery;
use shiitake::sql::native::NativeSql;
use shiitake::sql::Sql;
use shiitake::store::{schema, Store};

fn input(creator: &str, request_id: &str) -> CreateInput {
    CreateInput {
        creator: creator.into(),
        request_id: request_id.into(),
        name: None,
        model: None,
        reasoning: None,
    }
}

fn code(r: Result<impl std::fmt::Debug, Refusal>) -> String {
    r.expect_err("refused").code
}

#[test]
fn create_reserves_a_derived_id_and_a_retry_answers_the_same_entry() {
    let sql = NativeSql::open_in_memory();
    schema::open(&sql).unwrap();
    let mut asked = input("alice", "r1");
    asked.name = Some("Helper".into());
    asked.model = Some("openai/gpt-5".into());
    asked.reasoning = Some("high".into());
    let first = directory::create(&sql, 10, &asked).unwrap();
    assert_eq!(first.agent_id, directory::reserved_id("alice", "r1"));
    assert!(first.agent_id.starts_with("a-") && first.agent_id.len() == 34);
    assert_eq!(first.creator.as_deref(), Some("alice"));
    assert_eq!(first.created_by.as_deref(), Some("r1"));
    assert_eq!(first.model.as_deref(), Some("openai/gpt-5"));
    assert_eq!(first.reasoning.as_deref(), Some("high"));
    assert!(!first.archived);
    // The replay receipt: the same entry, even later.
    let again = directory::create(&sql, 99, &asked).unwrap();
    assert_eq!(again, first);
    // Another creator with the same requestId gets another Agent.
    let other = directory::create(&sql, 11, &input("bob", "r1")).unwrap();
    assert_ne!(other.agent_id, first.agent_id);
    // Other input under the same (creator, requestId) is a conflict.
    let mut changed = asked.clone();
    changed.name = Some("Other".into());
    assert_eq!(
        code(directory::create(&sql, 12, &changed)),
        "create:conflict"
    );
    let mut no_model = asked.clone();
    no_model.model = None;
    no_model.reasoning = None;
    assert_eq!(
        code(directory::create(&sql, 12, &no_model)),
        "create:conflict"
    );
}

#[test]
fn create_checks_names_models_and_reasoning() {
    let sql = NativeSql::open_in_memory();
    schema::open(&sql).unwrap();
    let mut bad = input("alice", "r");
    bad.name = Some("x".repeat(129));
    assert_eq!(code(directory::create(&sql, 1, &bad)), "invalid_request");
    bad.name = Some("é".repeat(128));
    assert!(directory::create(&sql, 1, &bad).is_ok(), "128 characters");
    // A provider the runtime cannot call is refused too.
    for model in [
        "gpt-5",
        "/gpt",
        "openai/",
        "Open AI/x",
        "openai/a b",
        "",
        "openrouter/meta-llama/llama-3.1",
    ] {
        let mut m = input("alice", &format!("m-{model}"));
        m.model = Some(model.into());
        assert_eq!(
            code(directory::create(&sql, 1, &m)),
            "invalid_request",
            "{model}"
        );
    }
    for model in ["openai/gpt-5", "anthropic/claude-sonnet-4.5"] {
        assert!(directory::validate_model(model).is_ok(), "{model}");
    }
    let mut reasoning_alone = input("alice", "ra");
    reasoning_alone.reasoning = Some("high".into());
    assert_eq!(
        code(directory::create(&sql, 1, &reasoning_alone)),
        "invalid_request"
    );
    let mut unknown_level = input("alice", "rl");
    unknown_level.model = Some("openai/gpt-5".into());
    unknown_level.reasoning = Some("extreme".into());
    assert_eq!(
        code(directory::create(&sql, 1, &unknown_level)),
        "invalid_request"
    );
    for level in ["minimal", "low", "medium", "high", "max"] {
        let mut ok = input("alice", &format!("lvl-{level}"));
        ok.model = Some("openai/gpt-5".into());
        ok.reasoning = Some(level.into());
        assert!(directory::create(&sql, 1, &ok).is_ok(), "{level}");
    }
    let long_request = input("alice", &"é".repeat(129));
    assert_eq!(
        code(directory::create(&sql, 1, &long_request)),
        "invalid_request"
    );
    assert_eq!(
        code(directory::create(&sql, 1, &input("no spaces", "r"))),
        "invalid_request"
    );
}

#[test]
fn the_directory_holds_at_most_10000_agents() {
    let sql = NativeSql::open_in_memory();
    schema::open(&sql).unwrap();
    shiitake::sql::atomically(&sql, || schema::DIRECTORY.ensure(&sql)).unwrap();
    sql.apply(vec![(
        format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {})
             INSERT INTO shiitake_directory (agent_id, archived, created_at, updated_at)
             SELECT 'filler-' || i, 0, 1, 1 FROM n",
            DIRECTORY_AGENTS_MAX - 1
        ),
        Vec::new(),
    )])
    .unwrap();
    let last = directory::create(&sql, 2, &input("alice", "last")).unwrap();
    assert_eq!(
        code(directory::create(&sql, 3, &input("alice", "over"))),
        "create:full"
    );
    assert_eq!(
        code(directory::register(&sql, 3, "walk-in")),
        "directory:full"
    );
    // A retry of a create that made it still answers.
    assert_eq!(
        directory::create(&sql, 4, &input("alice", "last")).unwrap(),
        last
    );
    // Erasing one frees a place.
    directory::erase(&sql, 5, "filler-1").unwrap();
    assert!(directory::create(&sql, 6, &input("alice", "over")).is_ok());
}

#[test]
fn register_enters_an_agent_without_creator_once_and_never_the_reserved_id() {
    let sql = NativeSql::open_in_memory();
    schema::open(&sql).unwrap();
    let e = directory::register(&sql, 5, "by-url").unwrap();
    assert_eq!(e.creator, None);
    assert_eq!(e.created_by, None);
    assert_eq!(
        directory::register(&sql, 9, "by-url").unwrap(),
        e,
        "idempotent"
    );
    assert_eq!(
        code(directory::register(&sql, 9, DIRECTORY_AGENT_ID)),
        "directory:reserved"
    );
    let found = directory::lookup(&sql, "by-url").unwrap();
    assert_eq!(found.entry, Some(e));
    let absent = directory::lookup(&sql, "never").unwrap();
    assert_eq!(absent.entry, None);
    assert!(!absent.erased);
}

#[test]
fn list_pages_in_creation_order_and_filters_archived() {
    let sql = NativeSql::open_in_memory();
    schema::open(&sql).unwrap();
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(
            directory::create(&sql, i, &input("alice", &format!("r{i}")))
                .unwrap()
                .agent_id,
        );
    }
    let first = directory::list(&sql, false, None, Some(3)).unwrap();
    assert_eq!(
        first
            .agents
            .iter()
            .map(|e| e.agent_id.clone())
            .collect::<Vec<_>>(),
        ids[..3]
    );
    let cursor = first.cursor.clone().expect("more");
    let second = directory::list(&sql, false, Some(&cursor), Some(3)).unwrap();
    assert_eq!(
        second
            .agents
            .iter()
            .map(|e| e.agent_id.clone())
            .collect::<Vec<_>>(),
        ids[3..6]
    );
    let third = directory::list(&sql, false, second.cursor.as_deref(), Some(3)).unwrap();
    assert_eq!(third.agents.len(), 1);
    assert_eq!(third.cursor, None, "the last page has no cursor");
    let exact = directory::list(&sql, false, None, Some(7)).unwrap();
    assert_eq!((exact.agents.len(), exact.cursor), (7, None));
    // Archived Agents leave the default list and form their own.
    directory::set_archived(&sql, 20, "alice", &ids[1], true).unwrap();
    directory::set_archived(&sql, 21, "alice", &ids[4], true).unwrap();
    let live = directory::list(&sql, false, None, None).unwrap();
    assert_eq!(live.agents.len(), 5);
    assert!(live.agents.iter().all(|e| !e.archived));
    let archived = directory::list(&sql, true, None, None).unwrap();
    assert_eq!(
        archived
            .agents
            .iter()
            .map(|e| e.agent_id.as_str())
            .collect::<Vec<_>>(),
        [ids[1].as_str(), ids[4].as_str()]
    );
    // Bounds.
    for limit in [0, 201] {
        assert_eq!(
            code(directory::list(&sql, false, None, Some(limit))),
            "invalid_request"
        );
    }
    for cursor in ["x", "0", "-1", ""] {
        assert_eq!(
            code(directory::list(&sql, false, Some(cursor), None)),
            "invalid_request",
            "{cursor}"
        );
    }
    assert_eq!(
        directory::list(&sql, false, None, None)
            .unwrap()
            .agents
            .len(),
        5,
        "default 50"
    );
}

#[test]
fn archive_refusals_of_the_directory_and_unarchive() {
    let sql = NativeSql::open_in_memory();
    schema::open(&sql).unwrap();
    let child = directory::create(&sql, 1, &input("alice", "c"))
        .unwrap()
        .agent_id;
    directory::register(&sql, 2, "walk-in").unwrap();
    let check = |caller: &str, agent: &str, archived: bool| {
        directory::check(&sql, caller, agent, archived).map(|_| ())
    };
    assert_eq!(code(check("bob", &child, true)), "archive:not_creator");
    assert_eq!(
        code(check("alice", "walk-in", true)),
        "archive:not_creator",
        "no creator"
    );
    assert_eq!(
        code(check("alice", "nobody", true)),
        "archive:not_creator",
        "absent"
    );
    assert_eq!(code(check("alice", "alice", true)), "archive:self");
    assert_eq!(
        code(check("alice", &child, false)),
        "unarchive:not_archived"
    );
    check("alice", &child, true).unwrap();
    // The commit checks again.
    assert_eq!(
        code(directory::set_archived(&sql, 3, "bob", &child, true)),
        "archive:not_creator"
    );
    let archived = directory::set_archived(&sql, 3, "alice", &child, true).unwrap();
    assert!(archived.archived);
    assert_eq!(archived.updated_at, 3);
    assert_eq!(code(check("alice", &child, true)), "archive:archived");
    assert_eq!(
        code(directory::set_archived(&sql, 4, "alice", &child, true)),
        "archive:archived"
    );
    assert_eq!(code(check("bob", &child, false)), "unarchive:not_creator");
    assert_eq!(code(check("alice", "alice", false)), "unarchive:self");
    let back = directory::set_archived(&sql, 5, "alice", &child, false).unwrap();
    assert!(!back.archived);
    assert!(directory::lookup(&sql, &child)
        .unwrap()
        .entry
        .is_some_and(|e| !e.archived));
}

#[test]
fn erase_removes_the_entry_and_remembers_the_address() {
    let sql = NativeSql::open_in_memory();
    schema::open(&sql).unwrap();
    let child = directory::create(&sql, 1, &input("alice", "c"))
        .unwrap()
        .agent_id;
    assert!(directory::erase(&sql, 2, &child).unwrap());
    let found = directory::lookup(&sql, &child).unwrap();
    assert_eq!(found.entry, None);
    assert!(found.erased);
    assert!(
        !directory::erase(&sql, 3, &child).unwrap(),
        "twice: nothing removed"
    );
    assert_eq!(
        code(directory::create(&sql, 4, &input("alice", "c"))),
        "create:erased"
    );
    assert_eq!(
        code(directory::register(&sql, 4, &child)),
        "directory:erased"
    );
    assert!(directory::list(&sql, false, None, None)
        .unwrap()
        .agents
        .is_empty());
    assert_eq!(
        code(directory::erase(&sql, 4, DIRECTORY_AGENT_ID)),
        "directory:reserved"
    );
    // Erased addresses are bounded: the oldest is forgotten.
    let rows: Vec<_> = (0..DIRECTORY_ERASED_KEPT_MAX as i64).collect();
    sql.apply(vec![(
        format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {})
             INSERT INTO shiitake_directory_erased (agent_id, erased_at) SELECT 'gone-' || i, 10 + i FROM n",
            rows.len()
        ),
        Vec::new(),
    )])
    .unwrap();
    directory::erase(&sql, 1_000_000, "latest").unwrap();
    assert!(
        !directory::lookup(&sql, &child).unwrap().erased,
        "the oldest forgotten"
    );
    assert!(directory::lookup(&sql, "latest").unwrap().erased);
}

#[test]
fn requests_round_trip_as_json_with_closed_inputs() {
    let sql = NativeSql::open_in_memory();
    schema::open(&sql).unwrap();
    let answer: Value = serde_json::from_str(&directory::handle_json(
        &sql,
        7,
        r#"{"op": "create", "creator": "alice", "requestId": "r", "name": "N"}"#,
        false,
    ))
    .unwrap();
    let entry: Entry = serde_json::from_value(answer["value"].clone()).unwrap();
    assert_eq!(entry.name.as_deref(), Some("N"));
    let refused: Value = serde_json::from_str(&directory::handle_json(
        &sql,
        7,
        r#"{"op": "list", "archived": false, "extra": 1}"#,
        false,
    ))
    .unwrap();
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
    let dup: Value = serde_json::from_str(&directory::handle_json(
        &sql,
        7,
        r#"{"op": "lookup", "agentId": "a", "agentId": "b"}"#,
        false,
    ))
    .unwrap();
    assert_eq!(dup["error"]["code"], "invalid_request", "{dup}");
    let conflict: Value = serde_json::from_str(&directory::handle_json(
        &sql,
        7,
        &serde_json::to_string(&Request::Create(CreateInput {
            name: Some("M".into()),
            ..input("alice", "r")
        }))
        .unwrap(),
        false,
    ))
    .unwrap();
    assert_eq!(conflict["error"]["code"], "create:conflict");
    assert_eq!(conflict["error"]["status"], 409);
}

#[test]
fn the_module_offers_directory_operations_only_when_authorized() {
    let names = |offer| {
        fleet::module(offer)
            .operations
            .iter()
            .map(|o| o.guest_name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(Offer::default()), ["wait", "read"]);
    let dir = Offer {
        mail: true,
        sessions: false,
        directory: true,
        archive: false,
        models: false,
        direct: false,
    };
    assert_eq!(
        names(dir),
        ["send", "recall", "wait", "read", "create", "list"]
    );
    let all = Offer {
        mail: true,
        sessions: false,
        directory: true,
        archive: true,
        models: true,
        direct: false,
    };
    assert_eq!(
        names(all),
        [
            "send",
            "recall",
            "wait",
            "read",
            "create",
            "list",
            "archive",
            "unarchive",
            "set_model",
            "models"
        ]
    );
    // Closed schemas, and decode's own refusals.
    let m = fleet::module(all);
    let create = m.operation("create").unwrap();
    assert!(create
        .check_arguments(&json!({"requestId": "r", "creator": "x"}))
        .is_err());
    assert!(fleet::decode("create", &json!({"requestId": "r"}), Offer::default()).is_err());
    let e = fleet::decode(
        "create",
        &json!({"requestId": "r", "reasoning": "high"}),
        all,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("reasoning: needs a model"), "{e}");
    let e = fleet::decode("create", &json!({"requestId": "r", "model": "gpt"}), all)
        .unwrap_err()
        .to_string();
    assert!(e.contains("provider/model"), "{e}");
    let e = fleet::decode("list", &json!({"archived": true}), dir)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not archive"), "{e}");
    assert_eq!(
        fleet::decode("list", &json!({"archived": true}), all).unwrap(),
        Call::List {
            archived: true,
            cursor: None,
            limit: None
        }
    );
    assert!(fleet::decode("archive", &json!({"agentId": "b"}), dir).is_err());
    assert_eq!(
        fleet::decode("unarchive", &json!({"agentId": "b"}), all).unwrap(),
        Call::Archive {
            agent_id: "b".into(),
            archived: false
        }
    );
    // The directory's id is no Agent to address.
    for op in ["read", "archive"] {
        let args = json!({"agentId": DIRECTORY_AGENT_ID, "sessionId": "s"});
        let args = if op == "archive" {
            json!({"agentId": DIRECTORY_AGENT_ID})
        } else {
            args
        };
        let e = fleet::decode(op, &args, all).unwrap_err().to_string();
        assert!(e.contains("reserved"), "{op}: {e}");
    }
    assert_eq!(fleet::working_directory(None), "/");
    assert_eq!(fleet::working_directory(Some("/work/a")), "/work/a");
    assert_eq!(fleet::working_directory(Some("relative")), "/");
    assert_eq!(fleet::working_directory(Some("/a\nb")), "/");
}

// ---- The target's side: its facts and its flag. ----

struct Ids(u64);

impl IdSource for Ids {
    fn next_id(&mut self, prefix: &str) -> String {
        self.0 += 1;
        format!("{prefix}{:06}", self.0)
    }
}

struct Agent {
    sql: NativeSql,
    ids: Ids,
    now_ms: i64,
    meta: MetaPolicy,
}

impl Agent {
    fn new() -> Agent {
        let sql = NativeSql::open_in_memory();
        schema::open(&sql).unwrap();
        Agent {
            sql,
            ids: Ids(0),
            now_ms: 1_000,
            meta: MetaPolicy::default(),
        }
    }

    fn ctx<T>(&mut self, f: impl FnOnce(&mut Ctx<'_>) -> T) -> T {
        self.now_ms += 1;
        let mut ctx = Ctx {
            store: Store::new(&self.sql),
            now_ms: self.now_ms,
            ids: &mut self.ids,
            meta: &self.meta,
            spans: Vec::new(),
            charged: None,
        };
        f(&mut ctx)
    }

    fn http(&mut self, method: &str, path: &str, body: Value) -> Value {
        let req = HttpRequest {
            method: method.into(),
            path: path.into(),
            query: String::new(),
            meta: None,
            body: body.to_string().into_bytes(),
            waited: false,
        };
        let r = self.ctx(|ctx| handle(ctx, &Hosted::without_models(None), &req));
        assert!(r.status < 300, "{method} {path}: {} {:?}", r.status, r.body);
        r.body
            .as_deref()
            .map_or(Value::Null, |b| serde_json::from_str(b).unwrap())
    }

    fn archive(&mut self, archived: bool) -> MemberAnswer {
        self.ctx(|ctx| member::set_archived(ctx, archived)).unwrap()
    }
}

fn busy(answer: MemberAnswer) -> String {
    match answer {
        MemberAnswer::Busy { reason, .. } => reason,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn the_target_refuses_archiving_while_work_runs_or_waits() {
    let mut a = Agent::new();
    assert_eq!(
        a.archive(true),
        MemberAnswer::Archived,
        "idle, no tables yet"
    );
    assert!(member::archived(&a.sql).unwrap());
    assert_eq!(a.archive(false), MemberAnswer::Unarchived);
    assert!(!member::archived(&a.sql).unwrap());
    // A running command (a prompt admitted into an idle Session is claimed).
    a.http("POST", "/sessions", json!({"sessionId": "s"}));
    let running = a.http(
        "POST",
        "/sessions/s/commands",
        json!({"type": "prompt", "requestId": "p1", "text": "hi"}),
    );
    a.http(
        "POST",
        "/sessions/s/commands",
        json!({"type": "prompt", "requestId": "p2", "text": "queued"}),
    );
    assert_eq!(busy(a.archive(true)), "running");
    assert!(!member::archived(&a.sql).unwrap(), "nothing persisted");
    assert!(running["commandId"].is_string());
    let (running_n, pending_n) = Store::new(&a.sql).unsettled_counts().unwrap();
    assert_eq!((running_n, pending_n), (1, 1));
}

#[test]
fn the_target_refuses_archiving_while_its_mail_or_delegated_work_waits() {
    let mut a = Agent::new();
    let from = Address {
        agent_id: "parent".into(),
        session_id: "p".into(),
    };
    let to = Address {
        agent_id: "child".into(),
        session_id: "c".into(),
    };
    let state = a
        .ctx(|ctx| {
            mail::send(
                ctx,
                &Outgoing {
                    from: from.clone(),
                    to: to.clone(),
                    request_id: "r1",
                    text: "do it",
                    delivery: Delivery::FollowUp,
                },
            )
        })
        .unwrap();
    let key = match state {
        mail::SendState::Pending { key } => key,
        other => panic!("{other:?}"),
    };
    assert_eq!(mail::waiting(&a.sql).unwrap(), 1);
    assert_eq!(busy(a.archive(true)), "pending", "mail to deliver");
    // Delivered: the delegated work waits for its reply.
    a.ctx(|ctx| {
        mail::delivered(
            ctx,
            &key,
            &mail::Receipt::Accepted {
                command_id: "cmd_x".into(),
            },
        )
    })
    .unwrap();
    assert_eq!(mail::waiting(&a.sql).unwrap(), 1);
    assert_eq!(
        busy(a.archive(true)),
        "pending",
        "delegated work still waiting"
    );
}

#[test]
fn an_archived_agent_answers_sends_left_and_still_takes_replies() {
    let mut a = Agent::new();
    let send = Mail {
        key: "m_1".into(),
        from: Address {
            agent_id: "other".into(),
            session_id: "o".into(),
        },
        to: Address {
            agent_id: "me".into(),
            session_id: "s".into(),
        },
        reply_to: "other/o".into(),
        text: "hi".into(),
        delivery: Delivery::FollowUp,
        reply: None,
    };
    let accept = Acceptance::Accept { meta: None };
    assert!(matches!(
        member::acceptance(&a.sql, &send, accept.clone()).unwrap(),
        Acceptance::Accept { .. }
    ));
    a.archive(true);
    assert!(matches!(
        member::acceptance(&a.sql, &send, accept.clone()).unwrap(),
        Acceptance::Left
    ));
    let landing = a
        .ctx(|ctx| {
            mail::receive(
                ctx,
                &send,
                &member::acceptance(ctx.store.sql(), &send, accept.clone()).unwrap(),
            )
        })
        .unwrap();
    assert_eq!(landing.value, mail::Receipt::Left);
    let reply = Mail {
        key: "m_1:reply:0".into(),
        reply_to: String::new(),
        reply: Some(ReplyFacts {
            command_id: Some("c".into()),
            outcome: Outcome::Completed,
            diagnostic: None,
            reason: None,
        }),
        ..send.clone()
    };
    assert!(matches!(
        member::acceptance(&a.sql, &reply, accept.clone()).unwrap(),
        Acceptance::Accept { .. }
    ));
    a.archive(false);
    assert!(matches!(
        member::acceptance(&a.sql, &send, accept).unwrap(),
        Acceptance::Accept { .. }
    ));
}

#[test]
fn registration_is_remembered_by_the_agent() {
    let a = Agent::new();
    assert!(!member::registered(&a.sql).unwrap());
    member::mark_registered(&a.sql, 5).unwrap();
    assert!(member::registered(&a.sql).unwrap());
    assert!(!member::archived(&a.sql).unwrap());
}

/// `createAgentDirectory(sql)`'s answers: the lifecycle facts a mutation
/// made, none for a replay, a repeat or a read, so a host's projection
/// commits exactly the changes.
#[test]
fn mutations_answer_the_lifecycle_facts_they_made() {
    let sql = NativeSql::open_in_memory();
    schema::open(&sql).unwrap();
    let run = |request: &str| -> Value {
        serde_json::from_str(&directory::handle_json(&sql, 9, request, true)).unwrap()
    };
    let kinds = |answer: &Value| -> Vec<String> {
        answer["facts"]
            .as_array()
            .unwrap_or_else(|| panic!("facts: {answer}"))
            .iter()
            .map(|f| f["kind"].as_str().unwrap().to_owned())
            .collect()
    };
    let create = r#"{"op": "create", "creator": "alice", "requestId": "r1", "name": "Helper"}"#;
    let created = run(create);
    assert_eq!(kinds(&created), ["created"]);
    let id = created["value"]["agentId"].as_str().unwrap().to_owned();
    assert_eq!(created["facts"][0]["agentId"], id.as_str());
    assert_eq!(created["facts"][0]["at"], 9);
    assert_eq!(created["facts"][0]["entry"]["name"], "Helper");
    assert!(
        kinds(&run(create)).is_empty(),
        "a replayed create makes no fact"
    );
    assert_eq!(
        kinds(&run(r#"{"op": "register", "agentId": "bob"}"#)),
        ["registered"]
    );
    assert!(kinds(&run(r#"{"op": "register", "agentId": "bob"}"#)).is_empty());
    let archive = format!(
        r#"{{"op": "setArchived", "caller": "alice", "agentId": "{id}", "archived": true}}"#
    );
    assert_eq!(kinds(&run(&archive)), ["archived"]);
    let refused = run(&archive);
    assert_eq!(refused["error"]["code"], "archive:archived", "{refused}");
    assert!(refused.get("facts").is_none());
    assert!(kinds(&run(r#"{"op": "list"}"#)).is_empty());
    let erase = r#"{"op": "erase", "agentId": "bob"}"#;
    let erased = run(erase);
    assert_eq!(kinds(&erased), ["erased"]);
    assert!(erased["facts"][0].get("entry").is_none());
    assert!(
        kinds(&run(erase)).is_empty(),
        "erasing twice makes no second fact"
    );
}
