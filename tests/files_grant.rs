//! The exclusive files grant, natively: which extension's `files(context,
//! run)` is asked (the granted holder with a files hook, while it runs),
//! what its answer means, and the tools it becomes: the files module's
//! operations as direct tools beside `execute`, granted by `files`, absent
//! from the catalog `execute` and `forage` reach, named in the execution
//! protocol digest. The authored callbacks are Rust closures speaking the
//! JSON protocol of `js/extensions.mjs` (and of the shim's capture,
//! `js/do/hooks.mjs`, which answers the port's description as `value`).

mod common;

use common::Harness;
use serde_json::{json, Value};
use shiitake::capability::door::{Tool, Toolset};
use shiitake::capability::Catalog;
use shiitake::extension::files_grant::{with_files_tools, FilesPort, FILES_GRANT_KEY};
use shiitake::extension::{Extensions, Host, Roster};
use shiitake::store::Store;
use std::cell::RefCell;
use std::rc::Rc;

type Handler = Box<dyn FnMut(&Value) -> Value>;

/// Answers calls with a closure and keeps every request.
#[derive(Clone)]
struct Script {
    handler: Rc<RefCell<Handler>>,
    seen: Rc<RefCell<Vec<Value>>>,
}

impl Script {
    fn new(f: impl FnMut(&Value) -> Value + 'static) -> Self {
        Script {
            handler: Rc::new(RefCell::new(Box::new(f))),
            seen: Rc::default(),
        }
    }
    fn set(&self, f: impl FnMut(&Value) -> Value + 'static) {
        *self.handler.borrow_mut() = Box::new(f);
    }
    fn files_calls(&self) -> Vec<Value> {
        self.seen
            .borrow()
            .iter()
            .filter(|r| r["kind"] == "files")
            .cloned()
            .collect()
    }
}

impl Host for Script {
    fn call(&self, request: &str) -> String {
        let request: Value = serde_json::from_str(request).unwrap();
        self.seen.borrow_mut().push(request.clone());
        (self.handler.borrow_mut())(&request).to_string()
    }
}

/// A manifest as `js/extensions.mjs` makes it, with `patch` merged in.
fn manifest(id: &str, patch: Value) -> Value {
    let mut m = json!({
        "id": id, "version": "0.0.0",
        "config": {"root": "work"}, "configSchema": null, "configValidate": false,
        "state": {"version": 1, "collections": {
            "note": {"document": true, "schema": null, "validate": false}
        }},
        "migrations": [],
        "commands": {},
        "hooks": {"settled": true, "timer": false},
        "projection": {"session": false, "agent": false},
        "prompt": false, "tools": false, "files": true,
        "requests": {"files": true},
        "grantKey": id, "grants": ["files"], "feature": null
    });
    for (k, v) in patch.as_object().unwrap() {
        m[k] = v.clone();
    }
    m
}

fn roster(manifests: &[Value]) -> Result<Roster, String> {
    Roster::parse(&Value::Array(manifests.to_vec()).to_string()).map_err(|e| e.to_string())
}

fn open(h: &mut Harness, manifests: &[Value], host: Script) {
    let roster = roster(manifests).unwrap();
    h.extensions = Some(Extensions::new(roster, Box::new(host)));
    h.with_ext(|e, ctx| e.open(ctx)).unwrap();
}

fn files_tools(
    h: &Harness,
    session: &str,
    head: &str,
) -> Option<Result<Option<FilesPort>, String>> {
    let e = h.extensions.as_ref().unwrap();
    e.files_tools(Store::new(h.sql()), session, head).map(|t| {
        assert_eq!(t.holder, "bench");
        t.port
    })
}

fn answer(value: Value) -> Value {
    json!({"ok": true, "writes": [], "timers": [], "sends": [], "value": value})
}

#[test]
fn the_holder_is_asked_with_a_read_only_run_context_and_its_answer_is_the_port() {
    let mut h = Harness::new();
    let host = Script::new(|r| match r["kind"].as_str().unwrap() {
        "files" => answer(json!({"patches": true})),
        _ => json!({"ok": true}),
    });
    open(&mut h, &[manifest("bench", json!({}))], host.clone());
    h.session("s");
    let port = files_tools(&h, "s", "cmd-1").expect("the holder is asked");
    assert_eq!(
        port,
        Ok(Some(FilesPort {
            workspace: None,
            patches: true,
            stepwise: false
        }))
    );
    let calls = host.files_calls();
    assert_eq!(
        calls.len(),
        1,
        "one call per ask: the host keeps it per run"
    );
    let request = &calls[0];
    assert_eq!(request["ext"], "bench");
    assert_eq!(
        request["event"],
        json!({"sessionId": "s", "commandId": "cmd-1"})
    );
    assert_eq!(request["config"], json!({"root": "work"}));
    assert_eq!(request["session"]["id"], "s");
    assert!(request["state"].is_object());

    // The workspace (its bounds), nothing this run, or a failure.
    host.set(|_| answer(json!({"workspace": {"fileBytesMax": 1024}})));
    let port = files_tools(&h, "s", "cmd-2").unwrap().unwrap().unwrap();
    assert!(port.patches(), "the workspace always patches");
    assert_eq!(port.workspace, Some(json!({"fileBytesMax": 1024})));
    host.set(|_| answer(Value::Null));
    assert_eq!(files_tools(&h, "s", "cmd-3"), Some(Ok(None)));
    host.set(|_| json!({"ok": false, "error": "extension bench: the files hook threw: closed"}));
    let failed = files_tools(&h, "s", "cmd-4").unwrap().unwrap_err();
    assert!(failed.contains("the files hook threw: closed"), "{failed}");
    host.set(|_| answer(json!({"port": "not a description"})));
    let malformed = files_tools(&h, "s", "cmd-5").unwrap().unwrap_err();
    assert!(
        malformed.contains("extension bench: the files hook's port"),
        "{malformed}"
    );
}

#[test]
fn only_a_granted_running_holder_with_a_files_hook_is_asked() {
    let asked = |manifests: &[Value]| {
        let mut h = Harness::new();
        let host = Script::new(|_| answer(json!({"patches": false})));
        open(&mut h, manifests, host.clone());
        let e = h.extensions.as_ref().unwrap();
        let got = e.files_tools(Store::new(h.sql()), "s", "c").is_some();
        (got, host.files_calls().len())
    };
    assert_eq!(asked(&[manifest("bench", json!({}))]), (true, 1));
    // Requested and hooked, but not granted by the roster.
    assert_eq!(
        asked(&[manifest("bench", json!({"grants": []}))]),
        (false, 0)
    );
    // Granted, but no files hook.
    assert_eq!(
        asked(&[manifest("bench", json!({"files": false}))]),
        (false, 0)
    );

    // A stopped holder is not asked.
    let mut h = Harness::new();
    let host = Script::new(|r| match r["kind"].as_str().unwrap() {
        "settled" => json!({"ok": false, "error": "extension bench: the settled hook threw: boom"}),
        _ => answer(json!({"patches": false})),
    });
    open(&mut h, &[manifest("bench", json!({}))], host.clone());
    h.session("s");
    let e = h.extensions.as_ref().unwrap();
    assert!(e.files_tools(Store::new(h.sql()), "s", "c0").is_some());
    let r = h.call(
        "POST",
        "/sessions/s/commands",
        json!({"type": "prompt", "requestId": "r1", "text": "hi"}),
    );
    let id = r.json["commandId"].as_str().unwrap().to_owned();
    h.call(
        "POST",
        "/sessions/s/commands",
        json!({"type": "cancel", "commandId": id}),
    );
    let e = h.extensions.as_ref().unwrap();
    assert!(e.files_tools(Store::new(h.sql()), "s", "c").is_none());
    assert_eq!(host.files_calls().len(), 1, "asked before the stop only");
}

#[test]
fn a_files_hook_needs_the_request_and_a_second_holder_is_refused() {
    let e = roster(&[manifest("bench", json!({"requests": {}, "grants": []}))]).unwrap_err();
    assert!(
        e.contains("extension bench") && e.contains("has a files hook but does not request files"),
        "{e}"
    );
    let e = roster(&[manifest("bench", json!({})), manifest("other", json!({}))]).unwrap_err();
    assert!(
        e.contains("extension other: the files grant is exclusive and extension bench holds it"),
        "{e}"
    );
}

/// The host's tools of a run: one module of its own (so `execute` is
/// offered), no direct tools.
fn host_toolset() -> Toolset {
    let catalog = Catalog::from_json(
        r#"[{"id": "notes", "operations": [
            {"name": "count", "description": "Counts the notes.", "access": "read",
             "replaySafe": true, "inputSchema": {"type": "object"}}]}]"#,
    )
    .unwrap();
    Toolset::new(catalog, &[], Ok(())).unwrap()
}

fn names(toolset: &Toolset) -> Vec<String> {
    toolset.specs().into_iter().map(|s| s.name).collect()
}

#[test]
fn the_holders_files_are_direct_tools_beside_execute_outside_its_catalog_and_in_the_digest() {
    let plain = host_toolset();
    let with = with_files_tools(&plain, true).unwrap();
    assert_eq!(
        names(&with),
        vec![
            "execute",
            "read",
            "write",
            "list",
            "stat",
            "search",
            "replace",
            "apply_patch"
        ]
    );
    let protocol = with.protocol();
    assert_eq!(
        protocol.tools,
        vec![
            "apply_patch",
            "execute",
            "list",
            "read",
            "replace",
            "search",
            "stat",
            "write"
        ]
    );
    assert_ne!(protocol.digest, plain.protocol().digest);
    // Without the patch engine: no apply_patch, another digest.
    let unpatched = with_files_tools(&plain, false).unwrap();
    assert!(!names(&unpatched).contains(&"apply_patch".to_owned()));
    assert_ne!(unpatched.protocol().digest, protocol.digest);

    // Each is a direct tool of the module `files`, granted by `files`;
    // replace and apply_patch are unsafe to replay, reads and write safe.
    for (name, replay_safe) in [
        ("read", true),
        ("write", true),
        ("list", true),
        ("stat", true),
        ("search", true),
        ("replace", false),
        ("apply_patch", false),
    ] {
        match with.tool(name) {
            Some(Tool::Direct(module, op)) => {
                assert_eq!(module.id, "files");
                assert_eq!(module.authority(), FILES_GRANT_KEY);
                assert_eq!(op.replay_safe, replay_safe, "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }

    // Not a module execute reaches: not in its catalog, namespaces,
    // description, forage search or guest paths.
    assert!(with.catalog().modules().iter().all(|m| m.id != "files"));
    assert_eq!(with.namespaces(), vec!["notes"]);
    assert!(!with.specs()[0].description.contains("files."));
    for query in ["read", "files", "write a file", "apply_patch"] {
        assert_eq!(with.search(query), json!([]), "{query}");
    }
    assert_eq!(
        with.search("count")[0]["path"],
        "notes.count",
        "the host's own module is still found"
    );
    assert!(with.guest_call("files.read", r#"{"path": "a"}"#).is_err());
    assert!(with.catalog().describe("files.read").is_err());
}

#[test]
fn the_holders_files_alone_are_offered_without_execute_and_never_shadow_a_direct_tool() {
    let empty = Toolset::new(Catalog::new(vec![]).unwrap(), &[], Ok(())).unwrap();
    let alone = with_files_tools(&empty, false).unwrap();
    assert_eq!(
        names(&alone),
        vec!["read", "write", "list", "stat", "search", "replace"]
    );
    // A host direct tool named like one of them: refused, not shadowed.
    let catalog = Catalog::from_json(
        r#"[{"id": "own", "operations": [
            {"name": "read", "description": "The host's read.", "access": "read",
             "inputSchema": {"type": "object"}}]}]"#,
    )
    .unwrap();
    let host = Toolset::new(catalog, &["own.read".to_owned()], Ok(())).unwrap();
    let e = with_files_tools(&host, true).unwrap_err();
    assert!(e.0.contains("already named `read`"), "{e}");
}
