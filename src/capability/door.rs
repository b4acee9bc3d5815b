//! The tools one run offers the model (seed: Mycelium's "execute door"):
//! `execute`, which runs model-written code whose only reachable objects are
//! the module namespaces and `forage`, and the direct tools passed beside it.
//! Pure: the host runs the code and the operations; this decides what a
//! tool name or a guest path means and how every payload is bounded.

use super::{
    check_payload, parse_payload, CapabilityError, Catalog, Module, Operation, PayloadError,
};
use crate::limits::{EXECUTE_DESCRIPTION_BYTES_MAX, TOOLS_PER_REQUEST_MAX, TOOL_NAME_BYTES_MAX};
use crate::model::ToolSpec;
use crate::transcript::Protocol;
use serde_json::{json, Value};
use std::borrow::Cow;

/// The name of the door.
pub const EXECUTE: &str = "execute";

/// The host's tools for one run.
#[derive(Debug, Clone)]
pub struct Toolset {
    catalog: Catalog,
    /// Direct tools: (module index, operation index), named by guest name.
    direct: Vec<(usize, usize)>,
    /// Modules offered as direct tools only (the files grant holder's
    /// Files): every operation a tool of its own, none in the catalog, so
    /// neither `execute` nor `forage` reaches them.
    direct_only: Vec<Module>,
    /// Whether guest code can run here, or why not (no `LOADER` binding).
    execute: Result<(), String>,
}

/// What a tool name of the model means.
#[derive(Debug, Clone, Copy)]
pub enum Tool<'a> {
    Execute,
    Direct(&'a Module, &'a Operation),
}

/// What a guest's `host.call(path, args)` asks for.
#[derive(Debug, Clone)]
pub enum GuestCall<'a> {
    Search(String),
    Describe(String),
    Operation(&'a Module, &'a Operation, Value),
}

/// Why a direct tool named `name` cannot join `offered`, the tools of one
/// model request so far (`execute` among them when offered), if it cannot:
/// the door's name, a name over `TOOL_NAME_BYTES_MAX` bytes (a guest name
/// holds only `[a-z0-9_]`: its length is all a provider could refuse), a
/// name taken, or `TOOLS_PER_REQUEST_MAX` tools offered already. A model
/// request past these would be refused, and with it every turn.
pub fn direct_refusal<'a>(
    name: &str,
    offered: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    if name == EXECUTE {
        return Some("the name `execute` is the door's".to_owned());
    }
    if name.len() > TOOL_NAME_BYTES_MAX {
        return Some(format!(
            "its name is {} bytes; a model tool name is at most {TOOL_NAME_BYTES_MAX}",
            name.len()
        ));
    }
    let mut count = 0;
    for taken in offered {
        if taken == name {
            return Some(format!("another direct tool is already named `{name}`"));
        }
        count += 1;
    }
    (count >= TOOLS_PER_REQUEST_MAX).then(|| {
        format!("a model request carries at most {TOOLS_PER_REQUEST_MAX} tools, and as many come before it")
    })
}

/// The name of `op`'s direct tool: its guest name, or in a module offered
/// direct whole ([`Module::direct`]) the module id's path joined to it by
/// `_` (`ui_execute`, `agents_send`, `computers_laptop_run_command`): such
/// modules' operation names repeat (`read`, `execute`) and are not the
/// host's choosing.
pub fn tool_name<'a>(module: &Module, op: &'a Operation) -> Cow<'a, str> {
    if module.direct {
        Cow::Owned(format!("{}_{}", module.id.replace('.', "_"), op.guest_name))
    } else {
        Cow::Borrowed(&op.guest_name)
    }
}

/// The names of the direct tools of the modules offered direct whole, in
/// order, once each joins `offered` (one model request's tools before
/// them); or why the first that cannot join cannot (its name and the
/// reason): the host asked for these by name, so one that does not fit
/// refuses the set rather than being left out.
pub fn module_tools<'a>(
    modules: impl IntoIterator<Item = &'a Module>,
    offered: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<String>, CapabilityError> {
    let mut names: Vec<String> = offered.into_iter().map(str::to_owned).collect();
    let before = names.len();
    for module in modules.into_iter().filter(|m| m.direct) {
        for op in &module.operations {
            let name = tool_name(module, op).into_owned();
            if let Some(why) = direct_refusal(&name, names.iter().map(String::as_str)) {
                return Err(CapabilityError(format!(
                    "direct tool `{name}` ({}.{}): {why}",
                    module.id, op.guest_name
                )));
            }
            names.push(name);
        }
    }
    Ok(names.split_off(before))
}

/// The operation a direct tool path names (`files.apply_patch`, the guest
/// or the source name), as (module index, operation index).
pub fn find_direct(catalog: &Catalog, path: &str) -> Option<(usize, usize)> {
    catalog
        .modules()
        .iter()
        .enumerate()
        .find_map(|(m, module)| {
            module
                .operations
                .iter()
                .position(|op| {
                    path.strip_prefix(module.id.as_str())
                        .and_then(|rest| rest.strip_prefix('.'))
                        .is_some_and(|name| name == op.guest_name || name == op.name)
                })
                .map(|o| (m, o))
        })
}

/// Why a guest call is refused; its text is what the guest code sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuestError {
    /// The arguments are no bounded JSON (`path`: as the guest called).
    #[error("{path}: arguments: {error}")]
    Arguments { path: String, error: PayloadError },
    /// A `forage` call without its string argument `name`.
    #[error("{path}: expects a string `{name}`")]
    Field { path: String, name: &'static str },
    /// The catalog's answer for a path it does not resolve (or describe).
    #[error(transparent)]
    Catalog(#[from] CapabilityError),
    #[error("no operation `{0}`")]
    NoOperation(String),
    /// The arguments fail the operation's bounds or input schema (`op`:
    /// `<module id>.<guest name>`; `why`: the problems found).
    #[error("{op}: {why}")]
    Invalid { op: String, why: String },
}

impl Toolset {
    /// The operations offered as their own tools: `direct`, paths
    /// ([`find_direct`]) each named by its guest name, then those of the
    /// modules offered direct whole ([`module_tools`]); every one must be
    /// one a model request can carry ([`direct_refusal`]).
    pub fn new(
        catalog: Catalog,
        direct: &[String],
        execute: Result<(), String>,
    ) -> Result<Toolset, CapabilityError> {
        let mut picked: Vec<(usize, usize)> = Vec::new();
        let door = (execute.is_ok() && !catalog.modules().is_empty()).then_some(EXECUTE);
        for path in direct {
            let Some((m, o)) = find_direct(&catalog, path) else {
                return Err(CapabilityError(format!(
                    "direct tool `{path}`: no such operation (module.operation)"
                )));
            };
            let name = &catalog.modules()[m].operations[o].guest_name;
            let offered = picked
                .iter()
                .map(|&(pm, po)| catalog.modules()[pm].operations[po].guest_name.as_str());
            if let Some(why) = direct_refusal(name, door.into_iter().chain(offered)) {
                return Err(CapabilityError(format!("direct tool `{path}`: {why}")));
            }
            picked.push((m, o));
        }
        let offered = picked
            .iter()
            .map(|&(m, o)| catalog.modules()[m].operations[o].guest_name.as_str());
        module_tools(catalog.modules(), door.into_iter().chain(offered))?;
        Ok(Toolset {
            catalog,
            direct: picked,
            direct_only: Vec::new(),
            execute,
        })
    }

    /// This toolset plus `module` as direct tools only: each operation is a
    /// tool named by its guest name (beside `execute`, in the protocol
    /// digest), while the catalog `execute` and `forage` reach is left as
    /// it was. A name another tool already has (or `execute`) is refused.
    pub fn with_direct_only(mut self, module: Module) -> Result<Toolset, CapabilityError> {
        if self.catalog.modules().iter().any(|m| m.id == module.id)
            || self.direct_only.iter().any(|m| m.id == module.id)
        {
            return Err(CapabilityError(format!(
                "module `{}`: another module already has this id",
                module.id
            )));
        }
        let door = self.offers_execute().then_some(EXECUTE);
        let mut names: Vec<Cow<str>> = door
            .map(Cow::Borrowed)
            .into_iter()
            .chain(self.direct_ops().map(|(m, op)| tool_name(m, op)))
            .collect();
        for op in &module.operations {
            let name = &op.guest_name;
            if let Some(why) = direct_refusal(name, names.iter().map(|n| n.as_ref())) {
                return Err(CapabilityError(format!(
                    "direct tool `{}.{name}`: {why}",
                    module.id
                )));
            }
            names.push(Cow::Borrowed(name));
        }
        self.direct_only.push(module);
        Ok(self)
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Why `execute` is not offered, if it is not (no modules is no reason
    /// to say anything: there is nothing to reach).
    pub fn execute_unavailable(&self) -> Option<&str> {
        match &self.execute {
            Err(why) if !self.catalog.modules().is_empty() => Some(why),
            _ => None,
        }
    }

    fn offers_execute(&self) -> bool {
        self.execute.is_ok() && !self.catalog.modules().is_empty()
    }

    /// The direct tools' operations, in the order offered: the direct
    /// paths, the modules offered direct whole, the direct-only modules.
    fn direct_ops(&self) -> impl Iterator<Item = (&Module, &Operation)> {
        let whole = self
            .catalog
            .modules()
            .iter()
            .filter(|m| m.direct)
            .flat_map(|module| module.operations.iter().map(move |op| (module, op)));
        let only = self
            .direct_only
            .iter()
            .flat_map(|module| module.operations.iter().map(move |op| (module, op)));
        let picked = self.direct.iter().map(|&(m, o)| {
            let module = &self.catalog.modules()[m];
            (module, &module.operations[o])
        });
        picked.chain(whole).chain(only)
    }

    /// The tools for the model request: `execute` first, then the direct
    /// tools in the order given.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        if self.offers_execute() {
            specs.push(ToolSpec {
                name: EXECUTE.to_owned(),
                description: self.execute_description(),
                parameters: json!({
                    "type": "object",
                    "properties": {"code": {
                        "type": "string",
                        "description": "JavaScript: the body of an async function. Its return \
                            value (JSON) is the result; the last expression is returned."
                    }},
                    "required": ["code"],
                    "additionalProperties": false
                }),
            });
        }
        for (module, op) in self.direct_ops() {
            specs.push(ToolSpec {
                name: tool_name(module, op).into_owned(),
                description: op.description.clone(),
                parameters: op.input.source().clone(),
            });
        }
        specs
    }

    /// The execution protocol of a step: the tool names offered.
    pub fn protocol(&self) -> Protocol {
        let direct: Vec<Cow<str>> = self.direct_ops().map(|(m, op)| tool_name(m, op)).collect();
        let execute = self.offers_execute().then_some(EXECUTE);
        Protocol::new(execute.into_iter().chain(direct.iter().map(|n| n.as_ref())))
    }

    /// What the model's tool `name` is; `None` for a tool not offered.
    pub fn tool(&self, name: &str) -> Option<Tool<'_>> {
        if name == EXECUTE {
            return self.offers_execute().then_some(Tool::Execute);
        }
        self.direct_ops()
            .find(|(module, op)| tool_name(module, op) == name)
            .map(|(module, op)| Tool::Direct(module, op))
    }

    /// The top-level names guest code sees (`mcp` for `mcp.notes`), sorted.
    pub fn namespaces(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .catalog
            .modules()
            .iter()
            .map(|m| m.id.split('.').next().unwrap_or(&m.id).to_owned())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Decodes a guest call: `forage.search` `{query}`, `forage.describe`
    /// `{path}`, or an operation path with its arguments (bounded and checked
    /// against the input schema). The error is the guest's to see.
    pub fn guest_call(&self, path: &str, args_json: &str) -> Result<GuestCall<'_>, GuestError> {
        let args = parse_payload(args_json).map_err(|error| GuestError::Arguments {
            path: path.to_owned(),
            error,
        })?;
        let field = |name: &'static str| {
            args.get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| GuestError::Field {
                    path: path.to_owned(),
                    name,
                })
        };
        match path {
            "forage.search" => return Ok(GuestCall::Search(field("query")?)),
            "forage.describe" => return Ok(GuestCall::Describe(field("path")?)),
            _ => {}
        }
        let (module, op) =
            self.catalog
                .resolve(path)
                .ok_or_else(|| match self.catalog.describe(path) {
                    Err(e) => GuestError::Catalog(e),
                    Ok(_) => GuestError::NoOperation(path.to_owned()),
                })?;
        op.check_arguments(&args)
            .map_err(|why| GuestError::Invalid {
                op: format!("{}.{}", module.id, op.guest_name),
                why,
            })?;
        Ok(GuestCall::Operation(module, op, args))
    }

    /// `forage.search`: the matching operations, as guest paths with their
    /// descriptions.
    pub fn search(&self, query: &str) -> Value {
        Value::Array(
            self.catalog
                .search(query)
                .into_iter()
                .map(|(module, op)| {
                    json!({
                        "path": format!("{}.{}", module.id, op.guest_name),
                        "description": op.description,
                        "access": op.access.as_str(),
                    })
                })
                .collect(),
        )
    }

    /// The door's description: how to call, and the operations there are
    /// (as many as fit `EXECUTE_DESCRIPTION_BYTES_MAX`; `forage` finds all).
    fn execute_description(&self) -> String {
        let mut text = String::from(
            "Run JavaScript in a sandbox to use the tools below. Call an operation as \
             `await <module>.<operation>({...})` (e.g. `await notes.create_note({title: \"x\"})`); \
             it returns the operation's JSON result or throws. `await forage.search(\"words\")` \
             finds operations; `await forage.describe(\"module.operation\")` gives one's input \
             schema. The sandbox has no network, storage or other globals. Return the value \
             you need (JSON, at most 256 KiB).\nOperations:",
        );
        let mut omitted = 0;
        for module in self.catalog.modules() {
            for op in &module.operations {
                let summary = op.description.lines().next().unwrap_or("");
                let summary = crate::text::prefix(summary, 160);
                let line = format!("\n- {}.{}: {summary}", module.id, op.guest_name);
                if text.len() + line.len() > EXECUTE_DESCRIPTION_BYTES_MAX - 64 {
                    omitted += 1;
                } else {
                    text.push_str(&line);
                }
            }
        }
        if omitted > 0 {
            text.push_str(&format!(
                "\n({omitted} more: use forage.search to find them)"
            ));
        }
        text
    }
}

/// The reply to a guest call: `{"result": value}`, bounded.
pub fn guest_result(value: &Value) -> String {
    match check_payload(value) {
        Ok(()) => json!({ "result": value }).to_string(),
        Err(e) => guest_error(&format!("the result {e}")),
    }
}

pub fn guest_error(message: &str) -> String {
    json!({ "error": message }).to_string()
}

/// What the model sees of a result: compact JSON, bounded by
/// [`check_payload`] (depth 64, 256 KiB).
pub fn result_content(value: &Value) -> Result<String, String> {
    check_payload(value).map_err(|e| format!("the result {e}"))?;
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toolset(direct: &[&str], execute: Result<(), String>) -> Result<Toolset, CapabilityError> {
        let catalog = Catalog::from_json(
            r#"[
              {"id": "notes", "operations": [
                {"name": "add-note", "description": "Adds a note.", "access": "write",
                 "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                                 "required": ["text"]}},
                {"name": "list", "description": "Lists notes.", "access": "read",
                 "replaySafe": true, "inputSchema": {"type": "object"}}]},
              {"id": "mcp.docs", "operations": [
                {"name": "list", "description": "Lists docs.", "access": "read",
                 "inputSchema": {"type": "object"}}]},
              {"id": "files", "operations": [
                {"name": "apply-patch", "description": "Applies a patch.", "access": "write",
                 "inputSchema": {"type": "object"}},
                {"name": "execute", "description": "Clashes with the door.", "access": "write",
                 "inputSchema": {"type": "object"}}]}
            ]"#,
        )
        .unwrap();
        let direct: Vec<String> = direct.iter().map(|d| (*d).to_owned()).collect();
        Toolset::new(catalog, &direct, execute)
    }

    #[test]
    fn the_offered_tools_are_execute_then_the_direct_ones() {
        let tools = toolset(&["files.apply-patch"], Ok(())).unwrap();
        let names: Vec<String> = tools.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, vec!["execute", "apply_patch"]);
        assert_eq!(tools.protocol().tools, vec!["apply_patch", "execute"]);
        assert!(matches!(tools.tool("execute"), Some(Tool::Execute)));
        assert!(matches!(tools.tool("apply_patch"), Some(Tool::Direct(m, _)) if m.id == "files"));
        assert!(
            tools.tool("list").is_none(),
            "not direct: reachable through execute only"
        );
        assert_eq!(tools.namespaces(), vec!["files", "mcp", "notes"]);
        let description = &tools.specs()[0].description;
        assert!(description.contains("notes.add_note: Adds a note."));
        assert!(description.contains("mcp.docs.list"));
    }

    #[test]
    fn without_a_sandbox_execute_is_absent_and_the_reason_is_kept() {
        let tools = toolset(&["files.apply_patch"], Err("no LOADER".into())).unwrap();
        let names: Vec<String> = tools.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, vec!["apply_patch"]);
        assert!(tools.tool("execute").is_none());
        assert_eq!(tools.execute_unavailable(), Some("no LOADER"));
        assert_ne!(
            tools.protocol().digest,
            toolset(&["files.apply_patch"], Ok(()))
                .unwrap()
                .protocol()
                .digest,
            "the protocol digest tells the two apart"
        );
    }

    #[test]
    fn direct_tools_must_exist_and_not_clash() {
        let missing = toolset(&["files.nope"], Ok(())).unwrap_err();
        assert!(missing.0.contains("no such operation"), "{missing}");
        let door = toolset(&["files.execute"], Ok(())).unwrap_err();
        assert!(door.0.contains("the door's"), "{door}");
        let twice = toolset(&["notes.list", "mcp.docs.list"], Ok(())).unwrap_err();
        assert!(twice.0.contains("already named `list`"), "{twice}");
    }

    #[test]
    fn direct_tools_fit_one_model_request() {
        let ops: Vec<Value> = (0..TOOLS_PER_REQUEST_MAX)
            .map(|i| {
                json!({"name": format!("t{i}"), "description": "", "access": "read",
                            "inputSchema": {"type": "object"}})
            })
            .chain([
                json!({"name": "l".repeat(TOOL_NAME_BYTES_MAX + 1), "description": "",
                           "access": "read", "inputSchema": {"type": "object"}}),
            ])
            .collect();
        let catalog =
            || Catalog::from_json(&json!([{"id": "m", "operations": ops}]).to_string()).unwrap();
        let paths = |n: usize| (0..n).map(|i| format!("m.t{i}")).collect::<Vec<_>>();
        // Without `execute`, 64 direct tools; beside it, 63.
        let full = Toolset::new(catalog(), &paths(64), Err("no LOADER".into())).unwrap();
        assert_eq!(full.specs().len(), TOOLS_PER_REQUEST_MAX);
        assert!(Toolset::new(catalog(), &paths(63), Ok(())).is_ok());
        let over = Toolset::new(catalog(), &paths(64), Ok(())).unwrap_err();
        assert_eq!(
            over.0,
            "direct tool `m.t63`: a model request carries at most 64 tools, and as many come before it"
        );
        let long = format!("m.{}", "l".repeat(TOOL_NAME_BYTES_MAX + 1));
        let e = Toolset::new(catalog(), &[long], Err("no LOADER".into())).unwrap_err();
        assert!(
            e.0.ends_with("its name is 65 bytes; a model tool name is at most 64"),
            "{e}"
        );
        // Nor can a direct-only module push a request past the bound.
        let e = full.with_direct_only(own_files()).unwrap_err();
        assert!(e.0.contains("at most 64 tools"), "{e}");
    }

    /// A module like the files grant holder's: offered beside `execute` only.
    fn own_files() -> Module {
        let catalog = Catalog::from_json(
            r#"[{"id": "files", "operations": [
                {"name": "read", "description": "Reads a file.", "access": "read",
                 "replaySafe": true, "inputSchema": {"type": "object"}},
                {"name": "replace", "description": "Replaces text.", "access": "write",
                 "inputSchema": {"type": "object"}}]}]"#,
        )
        .unwrap();
        catalog.modules()[0].clone().granted_by("files")
    }

    #[test]
    fn direct_only_modules_are_tools_beside_execute_and_never_in_its_catalog() {
        let catalog = Catalog::from_json(
            r#"[{"id": "notes", "operations": [
                {"name": "list", "description": "Lists notes.", "access": "read",
                 "inputSchema": {"type": "object"}}]}]"#,
        )
        .unwrap();
        let plain = Toolset::new(catalog, &[], Ok(())).unwrap();
        let tools = plain.clone().with_direct_only(own_files()).unwrap();
        let names: Vec<String> = tools.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, vec!["execute", "read", "replace"]);
        assert_eq!(tools.protocol().tools, vec!["execute", "read", "replace"]);
        assert_ne!(tools.protocol().digest, plain.protocol().digest);
        match tools.tool("replace") {
            Some(Tool::Direct(m, op)) => {
                assert_eq!((m.id.as_str(), m.authority()), ("files", "files"));
                assert!(!op.replay_safe);
            }
            other => panic!("{other:?}"),
        }
        // Not reachable through the door: no namespace, no search hit, no
        // guest path, not in execute's description.
        assert_eq!(tools.namespaces(), vec!["notes"]);
        assert_eq!(tools.search("read"), json!([]));
        assert_eq!(tools.search("files"), json!([]));
        assert!(tools.guest_call("files.read", "{}").is_err());
        assert!(tools.catalog().modules().iter().all(|m| m.id != "files"));
        assert!(!tools.specs()[0].description.contains("files."));
        // Alone (no module to reach), execute is not offered; the tools are.
        let alone = Toolset::new(Catalog::new(vec![]).unwrap(), &[], Ok(()))
            .unwrap()
            .with_direct_only(own_files())
            .unwrap();
        let names: Vec<String> = alone.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, vec!["read", "replace"]);
        assert!(alone.tool("execute").is_none());
    }

    #[test]
    fn direct_only_names_must_not_clash() {
        let tools = toolset(&["notes.list"], Ok(())).unwrap();
        let clash = Catalog::from_json(
            r#"[{"id": "own", "operations": [
                {"name": "list", "description": "x", "access": "read",
                 "inputSchema": {"type": "object"}}]}]"#,
        )
        .unwrap()
        .modules()[0]
            .clone();
        let e = tools.clone().with_direct_only(clash).unwrap_err();
        assert!(e.0.contains("already named `list`"), "{e}");
        let e = tools.with_direct_only(own_files()).unwrap_err();
        assert!(e.0.contains("another module already has this id"), "{e}");
    }

    /// `ui`, a Computer's commands and its files, offered direct whole.
    fn whole() -> Vec<Module> {
        let catalog = Catalog::from_json(
            r#"[{"id": "ui", "operations": [
                  {"name": "discover", "description": "Lists.", "access": "read",
                   "inputSchema": {"type": "object"}},
                  {"name": "execute", "description": "Runs.", "access": "write",
                   "inputSchema": {"type": "object"}}]},
                {"id": "computers.laptop", "operations": [
                  {"name": "run-command", "description": "Runs.", "access": "write",
                   "inputSchema": {"type": "object"}}]},
                {"id": "computers.laptop.files", "operations": [
                  {"name": "read", "description": "Reads.", "access": "read",
                   "inputSchema": {"type": "object"}}]}]"#,
        )
        .unwrap();
        let modules = catalog.modules().to_vec();
        modules.into_iter().map(Module::offered_direct).collect()
    }

    #[test]
    fn a_module_offered_direct_is_every_operation_a_tool_named_by_its_path() {
        let mut modules = whole();
        // Beside a host module whose `read` is direct by its guest name.
        let notes = Catalog::from_json(
            r#"[{"id": "notes", "operations": [
                  {"name": "read", "description": "Reads notes.", "access": "read",
                   "inputSchema": {"type": "object"}}]}]"#,
        )
        .unwrap()
        .modules()[0]
            .clone();
        modules.push(notes);
        let catalog = Catalog::new(modules).unwrap();
        let tools = Toolset::new(catalog, &["notes.read".into()], Err("no LOADER".into())).unwrap();
        let names: Vec<String> = tools.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "read",
                "ui_discover",
                "ui_execute",
                "computers_laptop_run_command",
                "computers_laptop_files_read"
            ]
        );
        // `ui.execute` is no clash with the door: its tool is `ui_execute`.
        match tools.tool("ui_execute") {
            Some(Tool::Direct(m, op)) => {
                assert_eq!((m.id.as_str(), op.name.as_str()), ("ui", "execute"))
            }
            other => panic!("{other:?}"),
        }
        match tools.tool("computers_laptop_files_read") {
            Some(Tool::Direct(m, _)) => assert_eq!(m.authority(), "computers.laptop"),
            other => panic!("{other:?}"),
        }
        assert!(tools.tool("discover").is_none(), "named by the path only");
        assert!(tools.protocol().tools.contains(&"ui_discover".to_owned()));
        // Still in the catalog `execute` reaches where it runs.
        let with_door = Toolset::new(Catalog::new(whole()).unwrap(), &[], Ok(())).unwrap();
        assert!(with_door.guest_call("ui.execute", "{}").is_ok());
        assert_eq!(with_door.specs()[0].name, EXECUTE);
    }

    #[test]
    fn a_module_offered_direct_that_one_request_cannot_carry_is_refused_by_name() {
        let ops: Vec<Value> = (0..TOOLS_PER_REQUEST_MAX - 1)
            .map(|i| {
                json!({"name": format!("t{i}"), "description": "", "access": "read",
                            "inputSchema": {"type": "object"}})
            })
            .collect();
        let mut modules = Catalog::from_json(&json!([{"id": "m", "operations": ops}]).to_string())
            .unwrap()
            .modules()
            .to_vec();
        modules.extend(whole());
        let paths: Vec<String> = (0..TOOLS_PER_REQUEST_MAX - 1)
            .map(|i| format!("m.t{i}"))
            .collect();
        // 63 direct tools leave room for `ui_discover` only.
        let e = Toolset::new(
            Catalog::new(modules.clone()).unwrap(),
            &paths,
            Err("no".into()),
        )
        .unwrap_err();
        assert_eq!(
            e.0,
            "direct tool `ui_execute` (ui.execute): a model request carries at most 64 tools, \
             and as many come before it"
        );
        // A name past the bound: the module's path makes it long.
        let long = Catalog::from_json(
            &json!([{"id": format!("computers.{}", "n".repeat(48)), "operations": [
                {"name": "run-command", "description": "", "access": "write",
                 "inputSchema": {"type": "object"}}]}])
            .to_string(),
        )
        .unwrap()
        .modules()[0]
            .clone()
            .offered_direct();
        let e = Toolset::new(Catalog::new(vec![long]).unwrap(), &[], Ok(())).unwrap_err();
        assert!(
            e.0.contains("its name is 70 bytes; a model tool name is at most 64"),
            "{e}"
        );
    }

    #[test]
    fn guest_calls_are_decoded_checked_and_bounded() {
        let tools = toolset(&[], Ok(())).unwrap();
        match tools
            .guest_call("notes.add_note", r#"{"text":"x"}"#)
            .unwrap()
        {
            GuestCall::Operation(m, op, args) => {
                assert_eq!((m.id.as_str(), op.name.as_str()), ("notes", "add-note"));
                assert_eq!(args, json!({"text": "x"}));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            tools.guest_call("forage.search", r#"{"query":"note"}"#),
            Ok(GuestCall::Search(q)) if q == "note"
        ));
        let bad = tools
            .guest_call("notes.add_note", r#"{"text":7}"#)
            .unwrap_err()
            .to_string();
        assert!(bad.starts_with("notes.add_note: "), "{bad}");
        let unknown = tools
            .guest_call("notes.nope", "{}")
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("no operation `nope`"), "{unknown}");
        let deep = format!("{}{}", "[".repeat(70), "]".repeat(70));
        let deep = tools.guest_call("notes.list", &deep).unwrap_err();
        assert!(matches!(deep, GuestError::Arguments { .. }), "{deep:?}");
        assert!(deep.to_string().contains("deeper than 64"), "{deep}");
        let search = tools.search("list");
        let paths: Vec<&str> = search
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, vec!["mcp.docs.list", "notes.list"]);
    }

    #[test]
    fn results_are_bounded_both_ways() {
        let big = Value::String("x".repeat(300_000));
        assert!(result_content(&big).unwrap_err().contains("262144"));
        assert!(guest_result(&big).contains("\"error\""));
        assert_eq!(guest_result(&json!(1)), r#"{"result":1}"#);
    }
}
