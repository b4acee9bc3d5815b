use super::*;
use serde_json::json;

fn op(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": { "type": "object" },
        "access": "read"
    })
}

fn module(id: &str, operations: Vec<Value>) -> Module {
    Module::from_value(json!({ "id": id, "operations": operations })).unwrap()
}

fn module_err(value: Value) -> String {
    Module::from_value(value).unwrap_err().to_string()
}

fn notes() -> Module {
    Module::from_json(
        r#"{
            "id": "mcp.notes",
            "operations": [
                {
                    "name": "create-note",
                    "description": "Create a note in a folder.",
                    "inputSchema": {
                        "type": "object",
                        "properties": {
                            "title": { "type": "string" },
                            "tags": { "type": "array", "items": { "type": "string" } }
                        },
                        "required": ["title"]
                    },
                    "access": "write",
                    "confirm": true
                },
                {
                    "name": "searchNotes",
                    "description": "Full-text search over notes.",
                    "inputSchema": { "type": "object", "properties": { "q": { "type": "string" } } },
                    "access": "read",
                    "replaySafe": true
                },
                {
                    "name": "delete-note",
                    "description": "Delete a note by id.",
                    "inputSchema": { "type": "object" },
                    "access": "write"
                }
            ]
        }"#,
    )
    .unwrap()
}

fn catalog() -> Catalog {
    Catalog::new(vec![
        notes(),
        module(
            "files",
            vec![
                op("read_file", "Read a file's text."),
                op("list-directory", "List the entries of a directory."),
            ],
        ),
        module(
            "computers.laptop",
            vec![op("run command", "Run a shell command on the laptop.")],
        ),
    ])
    .unwrap()
}

#[test]
fn builds_from_json() {
    let m = notes();
    assert_eq!(m.id, "mcp.notes");
    let names: Vec<_> = m.operations.iter().map(|o| o.guest_name.as_str()).collect();
    assert_eq!(names, ["create_note", "search_notes", "delete_note"]);
    let create = &m.operations[0];
    assert_eq!(create.name, "create-note");
    assert_eq!(create.access, Access::Write);
    assert!(create.confirm);
    assert!(!create.replay_safe, "replaySafe defaults to false");
    assert!(m.operations[1].replay_safe);
    assert!(!m.operations[1].confirm, "confirm defaults to false");
    assert_eq!(
        create.check_arguments(&json!({ "title": "t", "tags": ["a", 2] })),
        Err("/tags/1: expected string, got number".into())
    );
    assert_eq!(create.check_arguments(&json!({ "title": "t" })), Ok(()));
    let deep = (0..70).fold(json!(1), |v, _| json!([v]));
    assert!(create
        .check_arguments(&json!({ "title": "t", "x": deep }))
        .unwrap_err()
        .contains("deeper than 64"));
}

// Names the offending field: the `error-paths` feature.

#[cfg(feature = "error-paths")]
#[test]
fn json_errors_name_the_field() {
    let base = |bad: Value| json!({ "id": "mcp.notes", "operations": [op("ok", "fine"), bad] });
    let cases = [
        (
            base(json!({ "name": "x", "description": "", "inputSchema": {}, "access": "admin" })),
            "operations[1].access: unknown variant `admin`, expected `read` or `write`",
        ),
        (
            base(json!({ "name": "x", "description": "", "inputSchema": {} })),
            "operations[1]: missing field `access`",
        ),
        (
            base(json!({ "name": "x", "inputSchema": {}, "access": "read" })),
            "operations[1]: missing field `description`",
        ),
        (
            base(
                json!({ "name": "x", "description": "", "inputSchema": {}, "access": "read", "x-extra": 1 }),
            ),
            "operations[1].x-extra: unknown field `x-extra`",
        ),
        (
            base(
                json!({ "name": "x", "description": "", "inputSchema": {}, "access": "read", "confirm": "yes" }),
            ),
            "operations[1].confirm: invalid type: string \"yes\", expected a boolean",
        ),
        (
            base(json!({ "name": "!!", "description": "", "inputSchema": {}, "access": "read" })),
            "operations[1].name: operation name `!!` has no ASCII letter or digit",
        ),
        (
            base(
                json!({ "name": "x", "description": "", "inputSchema": { "type": "string" }, "access": "read" }),
            ),
            "operations[1].inputSchema: /type: the top level must describe a JSON object",
        ),
        (
            json!({ "id": "Mcp.Notes", "operations": [] }),
            "id: module id `Mcp.Notes` is invalid",
        ),
        (json!({ "operations": [] }), "missing field `id`"),
        (
            json!({ "id": "m", "operations": [], "version": 1 }),
            "version: unknown field `version`",
        ),
    ];
    for (value, expected) in cases {
        let e = module_err(value);
        assert!(e.starts_with(expected), "{e}\n  expected: {expected}");
    }
    let e = Module::from_json("{").unwrap_err().to_string();
    assert!(e.starts_with("module description is not valid JSON"), "{e}");
}

#[test]
fn guest_name_collisions_name_both_sources() {
    let e =
        module_err(json!({ "id": "m", "operations": [op("a-b", ""), op("x", ""), op("a_b", "")] }));
    assert_eq!(
        e,
        "operations[2].name: operations `a-b` (operations[0]) and `a_b` (operations[2]) of \
         module `m` both map to guest name `a_b`; rename one"
    );
    // A name that maps to a reserved word is refused, naming it.
    let e = module_err(json!({ "id": "m", "operations": [op("x", ""), op("Delete", "")] }));
    assert!(
        e.contains("operations[1].name")
            && e.contains("`Delete` maps to `delete`, a reserved word"),
        "{e}"
    );
    let e = module_err(
        json!({ "id": "m", "operations": [op("createNote", ""), op("Create Note", "")] }),
    );
    assert!(
        e.contains("`createNote`") && e.contains("`Create Note`"),
        "{e}"
    );
}

#[test]
fn module_bounds() {
    let ops = |n: usize| {
        (0..n)
            .map(|i| op(&format!("op{i}"), ""))
            .collect::<Vec<_>>()
    };
    let m = Module::from_value(json!({ "id": "m", "operations": ops(OPERATIONS_PER_MODULE_MAX) }));
    assert_eq!(m.unwrap().operations.len(), OPERATIONS_PER_MODULE_MAX);
    let e = module_err(json!({ "id": "m", "operations": ops(OPERATIONS_PER_MODULE_MAX + 1) }));
    assert_eq!(e, "operations: module `m` has 257 operations; at most 256");

    // A long description is cut at a character boundary.
    let long = "é".repeat(OPERATION_DESCRIPTION_BYTES_MAX);
    let m = module("m", vec![op("x", &long)]);
    let d = &m.operations[0].description;
    assert!(
        d.len() <= OPERATION_DESCRIPTION_BYTES_MAX && d.ends_with('…'),
        "{}",
        d.len()
    );
    assert!(d.len() > OPERATION_DESCRIPTION_BYTES_MAX - 8);
    let exact = "d".repeat(OPERATION_DESCRIPTION_BYTES_MAX);
    assert_eq!(
        module("m", vec![op("x", &exact)]).operations[0].description,
        exact
    );

    // Total size of a module's descriptions and schemas.
    let schema = json!({ "type": "object", "description": "s".repeat(60_000) });
    let big = (0..18)
        .map(|i| json!({ "name": format!("op{i}"), "description": "", "inputSchema": schema, "access": "read" }))
        .collect::<Vec<_>>();
    let e = module_err(json!({ "id": "m", "operations": big }));
    assert!(
        e.starts_with("operations: the descriptions and input schemas of module `m` take"),
        "{e}"
    );
}

#[test]
fn hand_built_modules_are_validated() {
    let mut m = notes();
    m.operations[1].guest_name = "create_note".into();
    let e = Module::new(m.id.clone(), m.operations.clone())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "operations[1].guestName: `create_note` is not the guest name of `searchNotes`"
        ),
        "{e}"
    );
    let e = Catalog::new(vec![m]).unwrap_err().to_string();
    assert!(
        e.starts_with("module `mcp.notes`: operations[1].guestName"),
        "{e}"
    );
    let spec = OperationSpec {
        name: "ping".into(),
        description: "Ping.".into(),
        input_schema: json!({}),
        access: Access::Read,
        confirm: false,
        replay_safe: true,
    };
    let ping = Operation::from_spec(spec).unwrap();
    assert!(ping.input.is_permissive());
    assert!(Module::new("host", vec![ping.clone()]).is_ok());
    let e = Module::new("host.", vec![ping]).unwrap_err().to_string();
    assert!(e.starts_with("id: module id `host.` is invalid"), "{e}");
}

#[test]
fn catalog_validation() {
    let e = Catalog::new(vec![notes(), notes()])
        .unwrap_err()
        .to_string();
    assert_eq!(e, "module id `mcp.notes` is listed twice");

    let many = (0..=MODULES_PER_AGENT_MAX)
        .map(|i| module(&format!("m{i}"), vec![]))
        .collect::<Vec<_>>();
    assert_eq!(
        Catalog::new(many[..MODULES_PER_AGENT_MAX].to_vec())
            .unwrap()
            .modules()
            .len(),
        MODULES_PER_AGENT_MAX
    );
    let e = Catalog::new(many).unwrap_err().to_string();
    assert_eq!(e, "65 modules; an Agent offers at most 64");

    // Module `mcp` with an operation `notes` excludes `mcp.notes` and below.
    let mcp = module("mcp", vec![op("notes", "")]);
    for id in ["mcp.notes", "mcp.notes.deep"] {
        let e = Catalog::new(vec![mcp.clone(), module(id, vec![])])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("module `{id}` runs through operation `notes` of module `mcp`; guest code cannot reach both")
        );
    }
    assert!(Catalog::new(vec![module("mcp", vec![op("files", "")]), notes()]).is_ok());
}

// Names the offending field: the `error-paths` feature.

#[cfg(feature = "error-paths")]
#[test]
fn catalog_from_json_names_the_field() {
    let e = Catalog::from_json(
        r#"[{"id": "a", "operations": []},
            {"id": "b", "operations": [{"name": "x", "description": "", "inputSchema": {}, "access": "read", "replaySafe": 1}]}]"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("[1].operations[0].replaySafe: invalid type"),
        "{e}"
    );
    let e = Catalog::from_json(r#"[{"id": "a", "operations": [{"name": "a-b", "description": "", "inputSchema": {}, "access": "read"}, {"name": "A_B", "description": "", "inputSchema": {}, "access": "read"}]}]"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("[0].operations[1].name: operations `a-b`"),
        "{e}"
    );
    let e = Catalog::from_json(r#"{"id": "a"}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected a sequence"), "{e}");
    let c = Catalog::from_json(r#"[{"id": "a", "operations": [{"name": "x", "description": "", "inputSchema": {}, "access": "read"}]}]"#)
        .unwrap();
    assert!(c.lookup("a", "x").is_some());
}

#[test]
fn lookup_and_resolve() {
    let c = catalog();
    let (m, o) = c.lookup("mcp.notes", "create_note").unwrap();
    assert_eq!(
        (m.id.as_str(), o.name.as_str()),
        ("mcp.notes", "create-note")
    );
    assert_eq!(
        c.resolve("mcp.notes.delete_note").unwrap().1.name,
        "delete-note"
    );
    assert_eq!(
        c.resolve("computers.laptop.run_command").unwrap().1.name,
        "run command"
    );
    assert!(
        c.lookup("mcp.notes", "create-note").is_none(),
        "guest names only"
    );
    assert!(c.resolve("mcp.notes").is_none());
    assert!(c.resolve("files").is_none());
    assert!(c.module("computers").is_none());
}

#[test]
fn search_ranks_by_token_match() {
    let c = catalog();
    let paths = |query: &str| {
        c.search(query)
            .into_iter()
            .map(|(m, o)| format!("{}.{}", m.id, o.guest_name))
            .collect::<Vec<_>>()
    };
    // Guest name beats description; ties go by module id.
    assert_eq!(
        paths("notes"),
        [
            "mcp.notes.search_notes",
            "mcp.notes.create_note",
            "mcp.notes.delete_note"
        ]
    );
    assert_eq!(paths("search note")[0], "mcp.notes.search_notes");
    assert_eq!(paths("DIRECTORY"), ["files.list_directory"]);
    assert_eq!(paths("laptop shell"), ["computers.laptop.run_command"]);
    // Prefixes of at least 3 characters, both ways.
    assert_eq!(paths("dir"), ["files.list_directory"]);
    assert_eq!(paths("files_reading")[..1], ["files.read_file"]);
    assert!(paths("di").is_empty());
    assert!(paths("").is_empty());
    assert!(paths("  ,, ").is_empty());
    assert!(paths("zebra").is_empty());

    let many = (0..100)
        .map(|i| op(&format!("tool{i}"), "does a thing"))
        .collect();
    let c = Catalog::new(vec![module("m", many)]).unwrap();
    assert_eq!(c.search("thing").len(), SEARCH_RESULTS_MAX);
}

#[test]
fn describe_returns_description_and_schema() {
    let c = catalog();
    let d = c.describe("mcp.notes.create_note").unwrap();
    assert_eq!(
        d,
        json!({
            "path": "mcp.notes.create_note",
            "name": "create-note",
            "description": "Create a note in a folder.",
            "access": "write",
            "confirm": true,
            "replaySafe": false,
            "inputSchema": {
                "type": "object",
                "properties": {
                    "title": { "type": "string" },
                    "tags": { "type": "array", "items": { "type": "string" } }
                },
                "required": ["title"]
            }
        })
    );
    let e = |path: &str| c.describe(path).unwrap_err().to_string();
    assert_eq!(
        e("mcp.notes.create-note"),
        "module `mcp.notes` has no operation `create-note`; its operations: create_note, search_notes, delete_note"
    );
    assert_eq!(
        e("mcp.notes"),
        "`mcp.notes` is a module; its operations: create_note, search_notes, delete_note"
    );
    assert_eq!(
        e("mcp.notez.create_note"),
        "no module `mcp.notez`; modules: mcp.notes, files, computers.laptop"
    );
    assert!(e("create_note").starts_with("`create_note` is not an operation path"));
    assert!(e(&"x".repeat(10_000)).len() < 300);
}

#[test]
fn invocation_is_plain_data() {
    let invocation = Invocation {
        execution_id: "x1".into(),
        session_id: "s1".into(),
        command_id: "c1".into(),
        deadline_ms: 1_700_000_000_000,
    };
    let value = serde_json::to_value(&invocation).unwrap();
    assert_eq!(
        value,
        json!({ "executionId": "x1", "sessionId": "s1", "commandId": "c1", "deadlineMs": 1_700_000_000_000i64 })
    );
    assert_eq!(
        serde_json::from_value::<Invocation>(value).unwrap(),
        invocation
    );
}

#[test]
fn authority_of_a_module() {
    assert_eq!(authority("computers.laptop"), "computers.laptop");
    assert_eq!(authority("computers.laptop.files"), "computers.laptop");
    assert_eq!(authority("computers.laptop.files.deep"), "computers.laptop");
    assert_eq!(authority("computers"), "computers");
    assert_eq!(
        authority("computersx.laptop.files"),
        "computersx.laptop.files"
    );
    assert_eq!(authority("mcp.notes"), "mcp.notes");
    assert_eq!(authority("files"), "files");
    assert_eq!(authority("mcp.computers.laptop"), "mcp.computers.laptop");
}
