//! The capability model, sans-IO: what an Agent's guest code may call.
//!
//! A capability source (an MCP server, a connected computer, the host's own
//! functions) yields a [`Module`]: an id such as `mcp.notes` and its
//! [`Operation`]s. Guest code reaches an operation as
//! `<module id>.<guest name>` (`mcp.notes.create_note`); [`name`] defines both
//! spellings. Each operation carries its [`InputSchema`] (a JSON Schema
//! decoded through the subset of [`schema`]), an [`Access`] label, whether it
//! asks for confirmation and whether it is safe to run again after recovery.
//!
//! A [`Catalog`] holds the modules of one Agent, validated together, and
//! answers lookups, `search` and `describe`. Calling an operation is the
//! host's business; the core hands it an [`Invocation`] and bounds every
//! payload with [`check_payload`] / [`parse_payload`].
//!
//! The JSON form a source hands over (closed: an unknown field is refused,
//! and every error names its field, e.g. `operations[2].access: unknown
//! variant ...`):
//!
//! ```json
//! { "id": "mcp.notes",
//!   "operations": [ { "name": "create-note", "description": "...",
//!                     "inputSchema": { "type": "object", ... },
//!                     "access": "write", "confirm": true, "replaySafe": false } ] }
//! ```
//!
//! `confirm` and `replaySafe` default to `false`: an operation is assumed
//! unsafe to repeat unless its source says otherwise.

pub mod backend;
pub mod door;
pub mod name;
pub mod schema;

pub use name::{guest_name, is_reserved, validate_module_id, NameError};
pub use schema::{check_payload, parse_payload, InputSchema, Kind, PayloadError, Schema};

use crate::limits::{
    MODULES_PER_AGENT_MAX, MODULE_BYTES_MAX, OPERATIONS_PER_MODULE_MAX,
    OPERATION_DESCRIPTION_BYTES_MAX, SEARCH_QUERY_TOKENS_MAX, SEARCH_RESULTS_MAX,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A refused module, catalog or lookup. The message names the field, module
/// or operation at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CapabilityError(pub String);

fn error<T>(message: String) -> Result<T, CapabilityError> {
    Err(CapabilityError(message))
}

/// The namespace of Computers' modules (`computers.<name>`, seed knapsack:
/// `Knapsack.computers`).
pub const COMPUTERS_NAMESPACE: &str = "computers";

/// The authority id of a module: the key its grants are read under. A
/// Computer's commands (`computers.<name>`) and everything nested under it
/// (its files, `computers.<name>.files`) share the Computer's authority
/// `computers.<name>` (seed knapsack: they "share that Computer's authority
/// id"); every other module is its own authority.
pub fn authority(module_id: &str) -> &str {
    let Some(rest) = module_id
        .strip_prefix(COMPUTERS_NAMESPACE)
        .and_then(|rest| rest.strip_prefix('.'))
    else {
        return module_id;
    };
    match rest.find('.') {
        Some(dot) => &module_id[..COMPUTERS_NAMESPACE.len() + 1 + dot],
        None => module_id,
    }
}

/// What an operation does to the world it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// An operation as a source describes it (the JSON form).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperationSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub access: Access,
    #[serde(default)]
    pub confirm: bool,
    #[serde(default)]
    pub replay_safe: bool,
}

/// A module as a source describes it (the JSON form).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleSpec {
    pub id: String,
    pub operations: Vec<OperationSpec>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// The source's own name (`create-note`), sent back to the source.
    pub name: String,
    /// What guest code calls (`create_note`): [`guest_name`] of `name`.
    pub guest_name: String,
    /// At most `OPERATION_DESCRIPTION_BYTES_MAX` bytes; a longer source
    /// description is cut at a character boundary and ends in `…`.
    pub description: String,
    pub input: InputSchema,
    pub access: Access,
    /// The host asks a person before running it.
    pub confirm: bool,
    /// Safe to run again after recovery, when it is unknown whether an
    /// interrupted call took effect.
    pub replay_safe: bool,
}

impl Operation {
    /// Builds an operation; errors name the field (`name: ...`,
    /// `inputSchema: ...`).
    pub fn from_spec(spec: OperationSpec) -> Result<Operation, CapabilityError> {
        let guest_name = guest_name(&spec.name).or_else(|e| error(format!("name: {e}")))?;
        let input = InputSchema::decode(&spec.input_schema)
            .or_else(|e| error(format!("inputSchema: {e} (operation `{}`)", spec.name)))?;
        let mut description = spec.description;
        crate::text::truncate(&mut description, OPERATION_DESCRIPTION_BYTES_MAX);
        Ok(Operation {
            name: spec.name,
            guest_name,
            description,
            input,
            access: spec.access,
            confirm: spec.confirm,
            replay_safe: spec.replay_safe,
        })
    }

    /// Bounds the arguments ([`check_payload`]), then checks them against
    /// the input schema.
    pub fn check_arguments(&self, args: &Value) -> Result<(), String> {
        check_payload(args).map_err(|e| e.to_string())?;
        self.input.check(args)
    }

    fn bytes(&self) -> usize {
        self.description.len() + self.input.source_bytes()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Module {
    pub id: String,
    pub operations: Vec<Operation>,
    /// The key grants name it by, when not [`authority`] of its id: an
    /// extension's module is granted by its roster grant's `grantKey`.
    pub grant_key: Option<String>,
    /// Every operation is also a direct tool of its own, named by
    /// [`door::tool_name`] (`ui_execute`, `agents_send`): the host asked
    /// for the module direct (`ui`, the fleet's `agents`, a Computer, an
    /// extension's commands).
    pub direct: bool,
}

impl Module {
    /// Builds and [validates](Module::validate) a module.
    pub fn new(
        id: impl Into<String>,
        operations: Vec<Operation>,
    ) -> Result<Module, CapabilityError> {
        let module = Module {
            id: id.into(),
            operations,
            grant_key: None,
            direct: false,
        };
        module.validate()?;
        Ok(module)
    }

    /// The module, granted by `key` instead of its id.
    pub fn granted_by(mut self, key: impl Into<String>) -> Module {
        self.grant_key = Some(key.into());
        self
    }

    /// The module with every operation also a direct tool.
    pub fn offered_direct(mut self) -> Module {
        self.direct = true;
        self
    }

    /// The key grants name this module by.
    pub fn authority(&self) -> &str {
        self.grant_key
            .as_deref()
            .unwrap_or_else(|| authority(&self.id))
    }

    pub fn from_spec(spec: ModuleSpec) -> Result<Module, CapabilityError> {
        validate_module_id(&spec.id).or_else(|e| error(format!("id: {e}")))?;
        check_operation_count(&spec.id, spec.operations.len())?;
        let operations = spec
            .operations
            .into_iter()
            .enumerate()
            .map(|(i, op)| {
                Operation::from_spec(op)
                    .map_err(|e| CapabilityError(format!("operations[{i}].{e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Module::new(spec.id, operations)
    }

    /// Decodes the JSON form; every error names its field.
    pub fn from_json(text: &str) -> Result<Module, CapabilityError> {
        let value: Value = serde_json::from_str(text)
            .or_else(|e| error(format!("module description is not valid JSON: {e}")))?;
        Module::from_value(value)
    }

    pub fn from_value(value: Value) -> Result<Module, CapabilityError> {
        Module::from_spec(decode(value)?)
    }

    /// The id's form, the operation count, guest names (each derived from
    /// its name, unique in the module), description and total size bounds.
    pub fn validate(&self) -> Result<(), CapabilityError> {
        let id = &self.id;
        validate_module_id(id).or_else(|e| error(format!("id: {e}")))?;
        check_operation_count(id, self.operations.len())?;
        let mut seen: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
        let mut bytes = 0;
        for (i, op) in self.operations.iter().enumerate() {
            let expected =
                guest_name(&op.name).or_else(|e| error(format!("operations[{i}].name: {e}")))?;
            if op.guest_name != expected {
                return error(format!(
                    "operations[{i}].guestName: `{}` is not the guest name of `{}` (`{expected}`)",
                    op.guest_name, op.name
                ));
            }
            if op.description.len() > OPERATION_DESCRIPTION_BYTES_MAX {
                return error(format!(
                    "operations[{i}].description: {} bytes; at most {OPERATION_DESCRIPTION_BYTES_MAX}",
                    op.description.len()
                ));
            }
            if let Some((j, other)) = seen.insert(&op.guest_name, (i, &op.name)) {
                return error(format!(
                    "operations[{i}].name: operations `{other}` (operations[{j}]) and `{}` \
                     (operations[{i}]) of module `{id}` both map to guest name `{}`; rename one",
                    op.name, op.guest_name
                ));
            }
            bytes += op.bytes();
        }
        if bytes > MODULE_BYTES_MAX {
            return error(format!(
                "operations: the descriptions and input schemas of module `{id}` take \
                 {bytes} bytes; at most {MODULE_BYTES_MAX}"
            ));
        }
        Ok(())
    }

    /// The operation guest code calls `guest_name`.
    pub fn operation(&self, guest_name: &str) -> Option<&Operation> {
        self.operations
            .iter()
            .find(|op| op.guest_name == guest_name)
    }
}

fn check_operation_count(id: &str, count: usize) -> Result<(), CapabilityError> {
    if count > OPERATIONS_PER_MODULE_MAX {
        return error(format!(
            "operations: module `{id}` has {count} operations; at most {OPERATIONS_PER_MODULE_MAX}"
        ));
    }
    Ok(())
}

fn decode<T: for<'de> Deserialize<'de>>(value: Value) -> Result<T, CapabilityError> {
    crate::json::decode(value).map_err(CapabilityError)
}

/// One operation's search terms: lower-cased words, sorted, unique.
#[derive(Debug, Clone)]
struct Terms {
    module: usize,
    op: usize,
    name: Vec<String>,
    module_id: Vec<String>,
    description: Vec<String>,
}

/// The capability modules of one Agent: at most `MODULES_PER_AGENT_MAX`,
/// ids unique, each module valid, and no module id running through an
/// operation (module `a` with operation `b` excludes module `a.b.c`, as
/// `a.b` could not be both in guest code).
#[derive(Debug, Clone)]
pub struct Catalog {
    modules: Vec<Module>,
    by_id: BTreeMap<String, usize>,
    terms: Vec<Terms>,
}

impl Catalog {
    pub fn new(modules: Vec<Module>) -> Result<Catalog, CapabilityError> {
        if modules.len() > MODULES_PER_AGENT_MAX {
            return error(format!(
                "{} modules; an Agent offers at most {MODULES_PER_AGENT_MAX}",
                modules.len()
            ));
        }
        let mut by_id = BTreeMap::new();
        for (i, module) in modules.iter().enumerate() {
            module
                .validate()
                .map_err(|e| CapabilityError(format!("module `{}`: {e}", module.id)))?;
            if by_id.insert(module.id.clone(), i).is_some() {
                return error(format!("module id `{}` is listed twice", module.id));
            }
        }
        let catalog = Catalog {
            terms: index(&modules),
            modules,
            by_id,
        };
        for module in &catalog.modules {
            let id = &module.id;
            // Every prefix ending at a dot, and the whole id.
            let ends = id.match_indices('.').map(|(end, _)| end);
            for end in ends.chain([id.len()]) {
                if let Some((owner, op)) = catalog.resolve(&id[..end]) {
                    return error(format!(
                        "module `{id}` runs through operation `{}` of module `{}`; \
                         guest code cannot reach both",
                        op.guest_name, owner.id
                    ));
                }
            }
        }
        Ok(catalog)
    }

    /// Decodes a JSON array of module descriptions; errors name the field
    /// (`[1].operations[0].access: ...`).
    pub fn from_json(text: &str) -> Result<Catalog, CapabilityError> {
        let value: Value = serde_json::from_str(text)
            .or_else(|e| error(format!("catalog is not valid JSON: {e}")))?;
        let specs: Vec<ModuleSpec> = decode(value)?;
        if specs.len() > MODULES_PER_AGENT_MAX {
            return error(format!(
                "{} modules; an Agent offers at most {MODULES_PER_AGENT_MAX}",
                specs.len()
            ));
        }
        let modules = specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                Module::from_spec(spec).map_err(|e| CapabilityError(format!("[{i}].{e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Catalog::new(modules)
    }

    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    pub fn module(&self, id: &str) -> Option<&Module> {
        self.by_id.get(id).map(|&i| &self.modules[i])
    }

    /// The operation `guest_name` of module `module_id`.
    pub fn lookup(&self, module_id: &str, guest_name: &str) -> Option<(&Module, &Operation)> {
        let module = self.module(module_id)?;
        Some((module, module.operation(guest_name)?))
    }

    /// The operation at a guest path, `mcp.notes.create_note` (module id,
    /// a dot, guest name).
    pub fn resolve(&self, path: &str) -> Option<(&Module, &Operation)> {
        let (module_id, guest_name) = path.rsplit_once('.')?;
        self.lookup(module_id, guest_name)
    }

    /// Operations matching the query's words, best first, at most
    /// `SEARCH_RESULTS_MAX`. Each query word (lower-cased runs of letters
    /// and digits, the first `SEARCH_QUERY_TOKENS_MAX` distinct ones) scores
    /// in the guest name (×3), the module id (×2) and the description (×1):
    /// 2 for an equal word, 1 when one word starts with the other and the
    /// shorter has at least 3 characters. Ties go by module id, then guest
    /// name. An operation matching no word, and an empty query, find nothing.
    pub fn search(&self, query: &str) -> Vec<(&Module, &Operation)> {
        let mut words: Vec<String> = Vec::new();
        for word in words_of(query) {
            if words.len() == SEARCH_QUERY_TOKENS_MAX {
                break;
            }
            if !words.contains(&word) {
                words.push(word);
            }
        }
        let mut scored: Vec<(u32, &Module, &Operation)> = self
            .terms
            .iter()
            .filter_map(|t| {
                let score = words
                    .iter()
                    .map(|w| {
                        3 * word_score(w, &t.name)
                            + 2 * word_score(w, &t.module_id)
                            + word_score(w, &t.description)
                    })
                    .sum::<u32>();
                let module = &self.modules[t.module];
                (score > 0).then(|| (score, module, &module.operations[t.op]))
            })
            .collect();
        scored.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| a.1.id.cmp(&b.1.id))
                .then_with(|| a.2.guest_name.cmp(&b.2.guest_name))
        });
        scored
            .into_iter()
            .take(SEARCH_RESULTS_MAX)
            .map(|(_, module, op)| (module, op))
            .collect()
    }

    /// What guest code needs to call the operation at `path`:
    /// `{path, name, description, access, confirm, replaySafe, inputSchema}`,
    /// the schema as the source gave it. The error says what the path misses
    /// and lists (some of) what exists.
    pub fn describe(&self, path: &str) -> Result<Value, CapabilityError> {
        if let Some((module, op)) = self.resolve(path) {
            return Ok(json!({
                "path": format!("{}.{}", module.id, op.guest_name),
                "name": op.name,
                "description": op.description,
                "access": op.access.as_str(),
                "confirm": op.confirm,
                "replaySafe": op.replay_safe,
                "inputSchema": op.input.source(),
            }));
        }
        let shown = crate::text::shorten(path);
        if let Some(module) = self.module(path) {
            return error(format!(
                "`{shown}` is a module; its operations: {}",
                listing(module.operations.iter().map(|op| op.guest_name.as_str()))
            ));
        }
        let modules = listing(self.modules.iter().map(|m| m.id.as_str()));
        match path.rsplit_once('.') {
            Some((module_id, guest_name)) => match self.module(module_id) {
                Some(module) => error(format!(
                    "module `{}` has no operation `{}`; its operations: {}",
                    module.id,
                    crate::text::shorten(guest_name),
                    listing(module.operations.iter().map(|op| op.guest_name.as_str()))
                )),
                None => error(format!(
                    "no module `{}`; modules: {modules}",
                    crate::text::shorten(module_id)
                )),
            },
            None => error(format!(
                "`{shown}` is not an operation path (module.operation, e.g. \
                 mcp.notes.create_note); modules: {modules}"
            )),
        }
    }
}

/// At most `SEARCH_RESULTS_MAX` names, comma-separated.
fn listing<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (i, name) in names.enumerate() {
        if i == SEARCH_RESULTS_MAX {
            out.push_str(", …");
            break;
        }
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(name);
    }
    if out.is_empty() {
        out.push_str("(none)");
    }
    out
}

/// Lower-cased runs of letters and digits.
fn words_of(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

fn sorted_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = words_of(text).collect();
    words.sort();
    words.dedup();
    words
}

fn index(modules: &[Module]) -> Vec<Terms> {
    let mut terms = Vec::new();
    for (m, module) in modules.iter().enumerate() {
        let module_id = sorted_words(&module.id.replace('_', " "));
        for (o, op) in module.operations.iter().enumerate() {
            terms.push(Terms {
                module: m,
                op: o,
                name: sorted_words(&op.guest_name.replace('_', " ")),
                module_id: module_id.clone(),
                description: sorted_words(&op.description),
            });
        }
    }
    terms
}

/// 2: `word` is in `sorted`; 1: one starts with the other, the shorter of at
/// least 3 characters; else 0.
fn word_score(word: &str, sorted: &[String]) -> u32 {
    let at = sorted.partition_point(|t| t.as_str() < word);
    if sorted.get(at).is_some_and(|t| t == word) {
        return 2;
    }
    let long_enough = word.chars().count() >= 3;
    if long_enough && sorted.get(at).is_some_and(|t| t.starts_with(word)) {
        return 1;
    }
    let prefix_of_word = word.char_indices().skip(3).any(|(end, _)| {
        sorted
            .binary_search_by(|t| t.as_str().cmp(&word[..end]))
            .is_ok()
    });
    u32::from(prefix_of_word)
}

/// The context one operation call runs in, handed to the host that performs
/// it. Pure data: the call's abort signal is no part of it; it lives in the
/// host (`src/host/`), tied to the turn, and fires on cancel, abort or the
/// deadline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Invocation {
    /// Identifies this call.
    pub execution_id: String,
    pub session_id: String,
    /// The command (turn) the call belongs to.
    pub command_id: String,
    /// When the call must end: milliseconds since the Unix epoch on the
    /// host's clock (the clock of `Ctx::now_ms`).
    pub deadline_ms: i64,
}

#[cfg(test)]
mod tests;
