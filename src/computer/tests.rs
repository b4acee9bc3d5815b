use super::*;
use crate::capability::authority;
use crate::limits::{MODULE_ID_BYTES_MAX, SCHEMA_DEPTH_MAX};
use serde_json::json;

fn ad(operations: Value) -> String {
    json!({ "operations": operations }).to_string()
}

fn laptop() -> String {
    ad(json!([
        {
            "name": "run-command",
            "description": "Run a shell command.",
            "inputSchema": {
                "type": "object",
                "properties": { "command": { "type": "string" } },
                "required": ["command"]
            }
        },
        {
            "name": "write-note",
            "inputSchema": {
                "type": "object",
                "properties": { "path": { "type": "string" }, "text": { "type": "string" } }
            }
        }
    ]))
}

fn connection(id: &str, name: &str) -> Connection {
    Connection {
        id: id.into(),
        name: name.into(),
        confirm_calls: false,
        files: false,
        patches: false,
        stepwise: false,
        direct: false,
    }
}

fn module_err(name: &str, text: &str) -> String {
    module(name, text, false).unwrap_err().0
}

#[test]
fn an_advertisement_becomes_a_module_of_write_operations_unsafe_to_replay() {
    for confirm_calls in [false, true] {
        let m = module("laptop", &laptop(), confirm_calls).unwrap();
        assert_eq!(m.id, "computers.laptop");
        let names: Vec<_> = m.operations.iter().map(|o| o.guest_name.as_str()).collect();
        assert_eq!(names, ["run_command", "write_note"]);
        for op in &m.operations {
            assert_eq!(op.access, Access::Write, "{}", op.name);
            assert!(!op.replay_safe, "{}", op.name);
            assert_eq!(op.confirm, confirm_calls, "{}", op.name);
        }
        assert_eq!(
            m.operations[0].name, "run-command",
            "the provider's name is kept"
        );
        assert_eq!(m.operations[0].description, "Run a shell command.");
        assert_eq!(m.operations[1].description, "", "description is optional");
        let op = &m.operations[0];
        assert!(op.check_arguments(&json!({ "command": "ls" })).is_ok());
        assert!(op.check_arguments(&json!({})).is_err());
    }
    let empty = module("idle", &ad(json!([])), false).unwrap();
    assert!(empty.operations.is_empty());
}

#[test]
fn policy_fields_in_an_advertisement_are_refused() {
    for field in [
        "readOnly",
        "access",
        "replaySafe",
        "confirm",
        "readOnlyHint",
        "annotations",
    ] {
        let text = ad(json!([
            { "name": "ok", "inputSchema": { "type": "object" } },
            { "name": "peek", "inputSchema": { "type": "object" }, field: true }
        ]));
        let e = module_err("laptop", &text);
        assert!(
            e.starts_with(&format!(
                "computers.laptop: operations[1].{field}: unknown field"
            )),
            "{e}"
        );
        assert!(
            e.contains("always write access and unsafe to replay"),
            "{e}"
        );
    }
}

// Names the offending field: the `error-paths` feature.

#[cfg(feature = "error-paths")]
#[test]
fn the_advertisement_is_closed() {
    let e = module_err(
        "laptop",
        &ad(json!([{ "name": "x", "inputSchema": {}, "outputSchema": {} }])),
    );
    assert!(e.starts_with("computers.laptop: operations[0]"), "{e}");
    assert!(e.contains("unknown field `outputSchema`"), "{e}");
    let e = module_err(
        "laptop",
        &json!({ "operations": [], "version": 2 }).to_string(),
    );
    assert!(e.contains("unknown field `version`"), "{e}");
    let e = module_err("laptop", &ad(json!([{ "name": "x" }])));
    assert!(
        e.contains("operations[0]") && e.contains("inputSchema"),
        "{e}"
    );
    let e = module_err("laptop", &ad(json!([{ "inputSchema": {} }])));
    assert!(e.contains("missing field `name`"), "{e}");
    let e = module_err("laptop", &ad(json!([{ "name": 3, "inputSchema": {} }])));
    assert!(
        e.starts_with("computers.laptop: operations[0].name: "),
        "{e}"
    );
    let e = module_err("laptop", "{}");
    assert!(e.contains("missing field `operations`"), "{e}");
    let e = module_err("laptop", "[]");
    assert!(e.contains("must be a JSON object"), "{e}");
    let e = module_err("laptop", "{\"operations\": [");
    assert!(e.contains("not valid JSON"), "{e}");
    let e = module_err("laptop", r#"{"operations": [], "operations": []}"#);
    assert!(e.contains("duplicate key `operations`"), "{e}");
}

#[test]
fn the_advertisement_is_bounded() {
    let big = "x".repeat(COMPUTER_ADVERTISEMENT_BYTES_MAX);
    let text = ad(json!([{ "name": "x", "description": big, "inputSchema": {} }]));
    let e = module_err("laptop", &text);
    assert!(
        e.contains(&format!(
            "{} bytes; at most {COMPUTER_ADVERTISEMENT_BYTES_MAX}",
            text.len()
        )),
        "{e}"
    );
    let many: Vec<Value> = (0..=OPERATIONS_PER_MODULE_MAX)
        .map(|i| json!({ "name": format!("op{i}"), "inputSchema": {} }))
        .collect();
    let e = module_err("laptop", &ad(Value::Array(many)));
    assert!(
        e.contains(&format!(
            "257 operations; at most {OPERATIONS_PER_MODULE_MAX}"
        )),
        "{e}"
    );
    let fits: Vec<Value> = (0..OPERATIONS_PER_MODULE_MAX)
        .map(|i| json!({ "name": format!("op{i}"), "inputSchema": {} }))
        .collect();
    let text = ad(Value::Array(fits));
    assert!(text.len() <= COMPUTER_ADVERTISEMENT_BYTES_MAX);
    assert_eq!(
        module("laptop", &text, false).unwrap().operations.len(),
        OPERATIONS_PER_MODULE_MAX
    );
}

#[test]
fn schemas_follow_the_capability_rules() {
    // Outside the subset: accepted, any JSON object.
    let odd = ad(json!([
        { "name": "a", "inputSchema": { "oneOf": [{ "type": "object" }] } },
        { "name": "b", "inputSchema": "not a schema" },
        { "name": "c", "inputSchema": { "type": ["nonsense", "other"] } },
        { "name": "d", "inputSchema": {} }
    ]));
    let m = module("laptop", &odd, false).unwrap();
    for op in &m.operations {
        assert!(
            op.check_arguments(&json!({ "any": 1 })).is_ok(),
            "{}",
            op.name
        );
    }
    // Not decodable at all: the Computer is refused, naming the field.
    let e = module_err(
        "laptop",
        &ad(json!([
            { "name": "a", "inputSchema": {} },
            { "name": "b", "inputSchema": {} },
            { "name": "c", "inputSchema": { "type": "string" } }
        ])),
    );
    assert!(
        e.starts_with("computers.laptop: operations[2].inputSchema: "),
        "{e}"
    );
    assert!(e.contains("must describe a JSON object"), "{e}");
    let mut deep = json!({ "type": "string" });
    for _ in 0..SCHEMA_DEPTH_MAX {
        deep = json!({ "type": "object", "properties": { "x": deep } });
    }
    let e = module_err("laptop", &ad(json!([{ "name": "a", "inputSchema": deep }])));
    assert!(
        e.contains("operations[0].inputSchema") && e.contains("nested deeper than"),
        "{e}"
    );
    // Names the capability model refuses refuse the Computer too.
    let e = module_err(
        "laptop",
        &ad(json!([{ "name": "delete", "inputSchema": {} }])),
    );
    assert!(
        e.contains("operations[0].name") && e.contains("reserved word"),
        "{e}"
    );
    let e = module_err(
        "laptop",
        &ad(json!([
            { "name": "a-b", "inputSchema": {} },
            { "name": "a_b", "inputSchema": {} }
        ])),
    );
    assert!(
        e.contains("operations[1].name") && e.contains("both map"),
        "{e}"
    );
}

#[test]
fn computer_names() {
    for ok in ["laptop", "a", "build_box_2", "x9"] {
        assert_eq!(validate_name(ok), Ok(()), "{ok}");
    }
    let longest = format!("a{}", "b".repeat(COMPUTER_NAME_BYTES_MAX - 1));
    assert_eq!(validate_name(&longest), Ok(()));
    assert_eq!(
        files_module_id(&longest).len(),
        MODULE_ID_BYTES_MAX,
        "the files module id fits exactly"
    );
    assert!(validate_module_id(&files_module_id(&longest)).is_ok());
    let e = validate_name(&format!("{longest}c"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("49 bytes; at most 48"), "{e}");
    assert!(validate_name("")
        .unwrap_err()
        .to_string()
        .contains("must not be empty"));
    let e = validate_name("lap.top").unwrap_err().to_string();
    assert!(
        e.contains("`lap.top`") && e.contains("without a dot"),
        "{e}"
    );
    for bad in ["Laptop", "2box", "lap-top", "_x", "läptop", "lap top"] {
        let e = validate_name(bad).unwrap_err().to_string();
        assert!(
            e.contains(&format!("`{bad}`")) && e.contains("[a-z]"),
            "{bad}: {e}"
        );
    }
    for reserved in ["delete", "then", "constructor"] {
        let e = validate_name(reserved).unwrap_err().to_string();
        assert!(e.contains("reserved word"), "{e}");
    }
    let e = module_err("Lap", &laptop());
    assert!(e.starts_with("computers.Lap: name: "), "{e}");
}

// Names the offending field: the `error-paths` feature.

#[cfg(feature = "error-paths")]
#[test]
fn the_computer_list_is_closed_bounded_and_unique() {
    let list = parse_list(
        r#"[{"id":"c-1","name":"laptop","confirmCalls":true,"files":true},
            {"id":"c-2","name":"build"}]"#,
    )
    .unwrap();
    assert_eq!(
        list,
        [
            Connection {
                id: "c-1".into(),
                name: "laptop".into(),
                confirm_calls: true,
                files: true,
                patches: false,
                stepwise: false,
                direct: false
            },
            connection("c-2", "build"),
        ]
    );
    assert_eq!(
        list[0].files_module_id().as_deref(),
        Some("computers.laptop.files")
    );
    assert_eq!(list[1].files_module_id(), None);
    assert_eq!(list[1].module_id(), "computers.build");
    assert_eq!(parse_list("[]").unwrap(), []);

    let cases = [
        (r#"{}"#, "computers: expected an array"),
        (r#"[1]"#, "computers[0]: expected"),
        (r#"[{"id":"a","name":"x","color":"red"}]"#, "computers[0]"),
        (r#"[{"id":"a"}]"#, "missing field `name`"),
        (
            r#"[{"id":"a","name":"x","confirmCalls":"yes"}]"#,
            "computers[0].confirmCalls: ",
        ),
        (
            r#"[{"id":"a","name":"x","files":null}]"#,
            "computers[0].files: ",
        ),
        (r#"[{"id":"","name":"x"}]"#, "computers[0].id: 0 bytes"),
        (
            r#"[{"id":"a\nb","name":"x"}]"#,
            "computers[0].id: holds a control character",
        ),
        (
            r#"[{"id":"a","name":"Bad"}]"#,
            "computers[0].name: Computer name `Bad`",
        ),
        (
            r#"[{"id":"a","name":"x"},{"id":"a","name":"y"}]"#,
            "computers[1].id: `a` is also the id of computers[0]",
        ),
        (
            r#"[{"id":"a","name":"x"},{"id":"b","name":"x"}]"#,
            "computers[1].name: `x` is also the name of computers[0]",
        ),
        (r#"[{"id":"a","name":"x","id":"b"}]"#, "duplicate key `id`"),
        ("[", "computers: not valid JSON"),
    ];
    for (text, expected) in cases {
        let e = parse_list(text).unwrap_err().to_string();
        assert!(e.contains(expected), "{text}: {e}");
    }
    let e = parse_list(&format!(r#"[{{"id":"{}","name":"x"}}]"#, "i".repeat(129)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("computers[0].id: 129 bytes; 1 to 128"), "{e}");
    let unknown = parse_list(r#"[{"id":"a","name":"x","color":"red"}]"#)
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("unknown field `color`"), "{unknown}");

    let many: Vec<Value> = (0..=COMPUTERS_MAX)
        .map(|i| json!({ "id": format!("c{i}"), "name": format!("c{i}") }))
        .collect();
    let e = decode_list(Value::Array(many.clone()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("33 Computers; at most 32"), "{e}");
    assert_eq!(
        decode_list(Value::Array(many[..COMPUTERS_MAX].to_vec()))
            .unwrap()
            .len(),
        COMPUTERS_MAX
    );
}

#[test]
fn the_list_digest_changes_with_what_modules_depend_on() {
    let a = connection("c-1", "laptop");
    let b = connection("c-2", "build");
    let base = list_digest(&[a.clone(), b.clone()], 0);
    assert_eq!(
        base,
        list_digest(&[b.clone(), a.clone()], 0),
        "order is no change"
    );
    assert_eq!(base, list_digest(&[a.clone(), b.clone()], 0));
    let confirm = Connection {
        confirm_calls: true,
        ..a.clone()
    };
    let files = Connection {
        files: true,
        ..a.clone()
    };
    let stepwise = Connection {
        files: true,
        stepwise: true,
        ..a.clone()
    };
    let renamed = connection("c-1", "laptop2");
    let new_id = connection("c-3", "laptop");
    let digests = [
        base,
        list_digest(&[confirm, b.clone()], 0),
        list_digest(&[files, b.clone()], 0),
        list_digest(&[stepwise, b.clone()], 0),
        list_digest(&[renamed, b.clone()], 0),
        list_digest(&[new_id, b.clone()], 0),
        list_digest(std::slice::from_ref(&a), 0),
        list_digest(&[], 0),
        // An announcement is a change though the entries are equal.
        list_digest(&[a.clone(), b.clone()], 1),
        // Field boundaries count: ("ab", "c") is not ("a", "bc").
        list_digest(&[connection("ab", "c")], 0),
        list_digest(&[connection("a", "bc")], 0),
    ];
    for (i, x) in digests.iter().enumerate() {
        for y in &digests[i + 1..] {
            assert_ne!(x, y, "digest {i}");
        }
    }
}

#[test]
fn a_round_keeps_the_usable_computers_and_reports_the_others() {
    let unusable = ad(json!([
        { "name": "ok", "inputSchema": {} },
        { "name": "bad", "inputSchema": { "type": "string" } }
    ]));
    let outcomes = vec![
        (
            Connection {
                confirm_calls: true,
                files: true,
                ..connection("c-1", "laptop")
            },
            Described::Advertised(laptop()),
        ),
        (
            connection("c-2", "build"),
            Described::Rejected("HTTP 500: disk on fire".into()),
        ),
        (connection("c-3", "stuck"), Described::TimedOut),
        (connection("c-4", "odd"), Described::Advertised(unusable)),
    ];
    let round = Round::decide(outcomes, 10_000);
    assert_eq!(round.available.len(), 1);
    let kept = &round.available[0];
    assert_eq!(kept.connection.id, "c-1");
    assert_eq!(kept.module.id, "computers.laptop");
    assert!(kept.module.operations.iter().all(|o| o.confirm));
    assert_eq!(
        kept.files_module_id().as_deref(),
        Some("computers.laptop.files")
    );
    assert_eq!(
        round.modules().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["computers.laptop"]
    );
    let reports: Vec<(&str, &str, &str)> = round
        .unavailable
        .iter()
        .map(|u| (u.id.as_str(), u.name.as_str(), u.reason.as_str()))
        .collect();
    assert_eq!(reports.len(), 3);
    assert_eq!(
        reports[0],
        ("c-2", "build", "rejected: HTTP 500: disk on fire")
    );
    assert_eq!(
        reports[1],
        ("c-3", "stuck", "did not describe itself within 10000 ms")
    );
    assert_eq!(reports[2].0, "c-4");
    assert!(
        reports[2]
            .2
            .starts_with("advertised an unusable schema: operations[1].inputSchema: "),
        "{}",
        reports[2].2
    );
    let json = serde_json::to_value(&round.unavailable[1]).unwrap();
    assert_eq!(
        json,
        json!({ "id": "c-3", "name": "stuck", "reason": "did not describe itself within 10000 ms" })
    );
}

#[test]
fn round_reasons_are_bounded_and_clear() {
    let round = Round::decide(
        vec![
            (
                connection("a", "a"),
                Described::Rejected("é".repeat(DIAGNOSTIC_BYTES_MAX)),
            ),
            (connection("b", "b"), Described::Rejected("  ".into())),
            (connection("c", "c"), Described::Advertised("nope".into())),
        ],
        2_000,
    );
    let reasons: Vec<&str> = round
        .unavailable
        .iter()
        .map(|u| u.reason.as_str())
        .collect();
    assert!(reasons[0].len() <= DIAGNOSTIC_BYTES_MAX && reasons[0].ends_with('…'));
    assert_eq!(reasons[1], "rejected without a message");
    assert!(
        reasons[2]
            .starts_with("advertised an unusable schema: the advertisement is not valid JSON"),
        "{}",
        reasons[2]
    );
}

#[test]
fn an_operation_named_files_clashes_only_with_a_files_port() {
    let text = ad(json!([{ "name": "Files", "inputSchema": {} }]));
    let with_port = Connection {
        files: true,
        ..connection("a", "laptop")
    };
    let round = Round::decide(
        vec![
            (with_port, Described::Advertised(text.clone())),
            (connection("b", "desk"), Described::Advertised(text)),
        ],
        1,
    );
    assert_eq!(round.available.len(), 1);
    assert_eq!(round.available[0].connection.name, "desk");
    let reason = &round.unavailable[0].reason;
    assert!(
        reason.contains("operations[0].name") && reason.contains("computers.laptop.files"),
        "{reason}"
    );
}

#[test]
fn commands_and_files_share_the_computers_authority() {
    let c = Connection {
        files: true,
        ..connection("a", "laptop")
    };
    let files = c.files_module_id().unwrap();
    assert_eq!(authority(&c.module_id()), "computers.laptop");
    assert_eq!(authority(&files), "computers.laptop");
    assert_eq!(authority("mcp.laptop"), "mcp.laptop");
}

#[test]
fn call_replies() {
    assert_eq!(
        call_reply(r#"{"result":{"stdout":"hi"}}"#),
        Ok(Reply::Result(json!({ "stdout": "hi" })))
    );
    assert_eq!(
        call_reply(r#"{"result":null}"#),
        Ok(Reply::Result(Value::Null))
    );
    assert_eq!(
        call_reply(r#"{"error":"no such file"}"#),
        Ok(Reply::Error("no such file".into()))
    );
    let long = json!({ "error": "x".repeat(5_000) }).to_string();
    let Ok(Reply::Error(message)) = call_reply(&long) else {
        panic!("an error reply");
    };
    assert!(message.len() <= DIAGNOSTIC_BYTES_MAX);
    for (text, expected) in [
        ("nope", "not valid JSON"),
        ("[]", "not a JSON object"),
        ("{}", "got keys []"),
        (r#"{"result":1,"error":"x"}"#, "got keys [error, result]"),
        (r#"{"error":3}"#, "error: not a string"),
        (r#"{"value":3}"#, "got `value`"),
        (r#"{"result":1,"result":2}"#, "duplicate key"),
    ] {
        let e = call_reply(text).unwrap_err().to_string();
        assert!(
            e.starts_with("the Computer's reply is malformed: ") && e.contains(expected),
            "{text}: {e}"
        );
    }
    let huge = json!({ "result": "x".repeat(crate::limits::TOOL_PAYLOAD_BYTES_MAX) }).to_string();
    let e = call_reply(&huge).unwrap_err().to_string();
    assert!(e.contains("result: "), "{e}");
}
