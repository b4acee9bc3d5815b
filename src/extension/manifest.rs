//! The roster: which extensions an Agent runs, each as the manifest the
//! authoring library (`js/extensions.mjs`) makes of its definition, plus the
//! host's roster data (grant key, product feature name, configuration).
//! Checked closed and bounded; schemas compiled once; the revision computed.

use crate::json_schema::{SchemaError, Validator};
use crate::limits::{
    EXTENSIONS_MAX, EXTENSION_COLLECTIONS_MAX, EXTENSION_COMMANDS_MAX,
    EXTENSION_MANIFEST_BYTES_MAX, EXTENSION_STATE_VERSION_MAX, GRANT_KEY_BYTES_MAX,
};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Where a command runs: in one Session (the default) or for the Agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Session,
    Agent,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Session => "session",
            Scope::Agent => "agent",
        }
    }
}

/// One definition as the authoring library describes it (closed).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub id: String,
    pub version: String,
    pub config: Value,
    pub config_schema: Option<Value>,
    pub config_validate: bool,
    pub state: StateDecl,
    pub migrations: Vec<u32>,
    pub commands: BTreeMap<String, CommandDecl>,
    pub hooks: Hooks,
    pub projection: Projections,
    pub prompt: bool,
    pub tools: bool,
    /// Whether the definition has a `files(context, run)` hook (it must
    /// request `files`; only the files grant holder's is called).
    #[serde(default)]
    pub files: bool,
    pub requests: BTreeMap<String, Value>,
    pub grant_key: String,
    pub feature: Option<String>,
    /// The host's grants (roster data, not the definition's): each one a
    /// capability the definition requests.
    #[serde(default)]
    pub grants: Vec<Grant>,
    /// The roster entry's `direct: true`: the commands its tools hook
    /// offers are also direct tools (`<id>_<command>`).
    #[serde(default)]
    pub direct: bool,
}

/// A capability the host grants an extension in its roster entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Grant {
    /// `context.attention.set/clear` (the definition requests `attention`).
    Attention,
    /// The exclusive files grant: the extension's `files(context, run)`
    /// tools (the definition requests `files`); one holder per roster.
    Files,
}

impl Grant {
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::Attention => "attention",
            Grant::Files => "files",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateDecl {
    pub version: u32,
    pub collections: BTreeMap<String, CollectionDecl>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CollectionDecl {
    /// One row under the key `""`.
    pub document: bool,
    pub schema: Option<Value>,
    /// The core checks rows against `schema` (a JSON Schema the author
    /// gave); a Standard Schema is checked by the authoring library.
    pub validate: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandDecl {
    pub scope: Scope,
    pub input_schema: Option<Value>,
    pub validate: bool,
    pub description: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hooks {
    pub settled: bool,
    pub timer: bool,
    /// An `activate` callback: called when the instance brings the
    /// extension up (`lifecycle.rs`); the resource it opens is the shim's.
    #[serde(default)]
    pub activate: bool,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Projections {
    pub session: bool,
    pub agent: bool,
    /// Producer history of the Session projection: each owner transaction
    /// that changes it records the new value ([`crate::history`]).
    #[serde(default)]
    pub history: bool,
}

/// One roster entry, checked, with its compiled schemas and revision.
#[derive(Debug)]
pub struct Entry {
    pub manifest: Manifest,
    /// Version, schemas, configuration and requested capabilities, hashed
    /// stably (canonical JSON, SHA-256): a recorded stop lasts until it
    /// changes.
    pub revision: String,
    rows: BTreeMap<String, Validator>,
    inputs: BTreeMap<String, Validator>,
}

impl Entry {
    pub fn id(&self) -> &str {
        &self.manifest.id
    }

    /// Whether the host's roster grants this extension `grant`.
    pub fn granted(&self, grant: Grant) -> bool {
        self.manifest.grants.contains(&grant)
    }

    /// The declared collection `name`, if any.
    pub fn collection(&self, name: &str) -> Option<&CollectionDecl> {
        self.manifest.state.collections.get(name)
    }

    /// Checks a row of `collection` against its JSON Schema, if the core
    /// validates it.
    pub fn check_row(&self, collection: &str, row: &Value) -> Result<(), String> {
        match self.rows.get(collection) {
            Some(v) => v.check(row).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// Checks a command's input against its JSON Schema, if the core
    /// validates it.
    pub fn check_input(&self, command: &str, input: &Value) -> Result<(), String> {
        match self.inputs.get(command) {
            Some(v) => v.check(input).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

/// Why the host's roster is refused (a 503 `host_misconfigured`): every
/// refusal names the extension and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RosterError {
    /// serde's message.
    #[error("extensions: not a JSON array: {0}")]
    NotAnArray(String),
    /// How many extensions.
    #[error("extensions: {0} in the roster; at most {EXTENSIONS_MAX}")]
    TooMany(usize),
    /// The manifest at roster index `index` (`id`: its id, or `?`).
    #[error("extension {id} (roster[{index}]): {error}")]
    Manifest {
        id: String,
        index: usize,
        error: ManifestError,
    },
    #[error("extension {0}: listed twice in the roster")]
    Twice(String),
    #[error("extension {id}: the files grant is exclusive and extension {holder} holds it")]
    FilesHeld { id: String, holder: String },
}

/// What is wrong with one manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the manifest is over {EXTENSION_MANIFEST_BYTES_MAX} bytes of JSON")]
    TooLarge,
    /// serde's message (with the path to the field).
    #[error("manifest: {0}")]
    Decode(String),
    #[error("id: 1 to 32 of [a-z0-9_], starting with a letter")]
    Id,
    #[error("version `{0}`: MAJOR.MINOR.PATCH, optionally -PRERELEASE")]
    Version(String),
    #[error("grantKey `{0}`: 1 to {GRANT_KEY_BYTES_MAX} of [a-z0-9_.], starting with a letter")]
    GrantKey(String),
    #[error("grants: `{0}` twice")]
    GrantTwice(&'static str),
    #[error("grants `{0}`, which the definition does not request (requests({{ {0}: true }}))")]
    NotRequested(&'static str),
    #[error("has a files hook but does not request files (requests({{ files: true }}))")]
    FilesHook,
    #[error("keeps history without a session projection (history is per Session)")]
    History,
    #[error("state version {0}: 1 to {EXTENSION_STATE_VERSION_MAX}")]
    StateVersion(u32),
    #[error(
        "state version {version} needs one migration for each version 2..={version}; the \
         definition has {migrations:?}"
    )]
    Migrations { version: u32, migrations: Vec<u32> },
    /// How many collections.
    #[error("{0} collections; at most {EXTENSION_COLLECTIONS_MAX}")]
    Collections(usize),
    /// How many commands.
    #[error("{0} commands; at most {EXTENSION_COMMANDS_MAX}")]
    Commands(usize),
    #[error("collection `{0}`: 1 to 32 of [a-z0-9_], starting with a letter")]
    CollectionName(String),
    #[error("collection {name}: the schema is {error}")]
    CollectionSchema { name: String, error: SchemaError },
    #[error("command `{0}`: 1 to 32 of [a-z0-9_], starting with a letter")]
    CommandName(String),
    #[error("command {name}: the input schema is {error}")]
    InputSchema { name: String, error: SchemaError },
    #[error("config: the schema is {0}")]
    ConfigSchema(SchemaError),
    /// The configuration fails its own schema.
    #[error("config: {0}")]
    Config(SchemaError),
}

/// The extensions an Agent runs, in the host's order.
#[derive(Debug, Default)]
pub struct Roster {
    entries: Vec<Entry>,
}

impl Roster {
    /// Parses the host's roster (a JSON array of manifests); every refusal
    /// names the extension and what is wrong.
    pub fn parse(json: &str) -> Result<Roster, RosterError> {
        let items: Vec<Value> =
            serde_json::from_str(json).map_err(|e| RosterError::NotAnArray(e.to_string()))?;
        if items.len() > EXTENSIONS_MAX {
            return Err(RosterError::TooMany(items.len()));
        }
        let mut entries: Vec<Entry> = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let id = item
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned();
            let entry = match entry(item) {
                Ok(entry) => entry,
                Err(error) => {
                    return Err(RosterError::Manifest {
                        id,
                        index: i,
                        error,
                    })
                }
            };
            if entries.iter().any(|e| e.id() == entry.id()) {
                return Err(RosterError::Twice(id));
            }
            if entry.granted(Grant::Files) {
                if let Some(holder) = entries.iter().find(|e| e.granted(Grant::Files)) {
                    return Err(RosterError::FilesHeld {
                        id,
                        holder: holder.id().to_owned(),
                    });
                }
            }
            entries.push(entry);
        }
        Ok(Roster { entries })
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.id() == id)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The extension holding the exclusive files grant, if any.
    pub fn files_holder(&self) -> Option<&Entry> {
        self.entries.iter().find(|e| e.granted(Grant::Files))
    }
}

/// Whether `name` is an extension, collection or command name.
pub fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && name.len() <= 32
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
}

fn is_version(v: &str) -> bool {
    let (core, pre) = match v.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (v, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && pre.is_none_or(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        })
}

fn entry(item: Value) -> Result<Entry, ManifestError> {
    if item.to_string().len() > EXTENSION_MANIFEST_BYTES_MAX {
        return Err(ManifestError::TooLarge);
    }
    let manifest: Manifest = crate::json::decode(item).map_err(ManifestError::Decode)?;
    check_shape(&manifest)?;
    let (rows, inputs) = compile_schemas(&manifest)?;
    let revision = revision(&manifest);
    Ok(Entry {
        manifest,
        revision,
        rows,
        inputs,
    })
}

/// The manifest's names, grants, state version and counts.
fn check_shape(m: &Manifest) -> Result<(), ManifestError> {
    if !is_name(&m.id) {
        return Err(ManifestError::Id);
    }
    if !is_version(&m.version) {
        return Err(ManifestError::Version(m.version.clone()));
    }
    let grant_ok = !m.grant_key.is_empty()
        && m.grant_key.len() <= GRANT_KEY_BYTES_MAX
        && m.grant_key.starts_with(|c: char| c.is_ascii_lowercase())
        && m.grant_key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
    if !grant_ok {
        return Err(ManifestError::GrantKey(m.grant_key.clone()));
    }
    for (i, g) in m.grants.iter().enumerate() {
        if m.grants[..i].contains(g) {
            return Err(ManifestError::GrantTwice(g.as_str()));
        }
        if m.requests.get(g.as_str()) != Some(&Value::Bool(true)) {
            return Err(ManifestError::NotRequested(g.as_str()));
        }
    }
    if m.files && m.requests.get("files") != Some(&Value::Bool(true)) {
        return Err(ManifestError::FilesHook);
    }
    if m.projection.history && !m.projection.session {
        return Err(ManifestError::History);
    }
    if m.state.version == 0 || m.state.version > EXTENSION_STATE_VERSION_MAX {
        return Err(ManifestError::StateVersion(m.state.version));
    }
    let expected: Vec<u32> = (2..=m.state.version).collect();
    if m.migrations != expected {
        return Err(ManifestError::Migrations {
            version: m.state.version,
            migrations: m.migrations.clone(),
        });
    }
    if m.state.collections.len() > EXTENSION_COLLECTIONS_MAX {
        return Err(ManifestError::Collections(m.state.collections.len()));
    }
    if m.commands.len() > EXTENSION_COMMANDS_MAX {
        return Err(ManifestError::Commands(m.commands.len()));
    }
    Ok(())
}

/// Compiles the declared schemas (the rows' of each collection, the
/// inputs' of each command) and checks the configuration against its own.
#[allow(clippy::type_complexity)]
fn compile_schemas(
    m: &Manifest,
) -> Result<(BTreeMap<String, Validator>, BTreeMap<String, Validator>), ManifestError> {
    let id = &m.id;
    let mut rows = BTreeMap::new();
    for (name, c) in &m.state.collections {
        if !is_name(name) {
            return Err(ManifestError::CollectionName(name.clone()));
        }
        if let (true, Some(schema)) = (c.validate, &c.schema) {
            let v = Validator::compile(&format!("urn:shiitake:{id}:{name}"), schema.clone())
                .map_err(|error| ManifestError::CollectionSchema {
                    name: name.clone(),
                    error,
                })?;
            rows.insert(name.clone(), v);
        }
    }
    let mut inputs = BTreeMap::new();
    for (name, c) in &m.commands {
        if !is_name(name) {
            return Err(ManifestError::CommandName(name.clone()));
        }
        if let (true, Some(schema)) = (c.validate, &c.input_schema) {
            let v = Validator::compile(&format!("urn:shiitake:{id}:{name}:input"), schema.clone())
                .map_err(|error| ManifestError::InputSchema {
                    name: name.clone(),
                    error,
                })?;
            inputs.insert(name.clone(), v);
        }
    }
    if let (true, Some(schema)) = (m.config_validate, &m.config_schema) {
        Validator::compile(&format!("urn:shiitake:{id}:config"), schema.clone())
            .map_err(ManifestError::ConfigSchema)?
            .check(&m.config)
            .map_err(ManifestError::Config)?;
    }
    Ok((rows, inputs))
}

/// The revision: SHA-256 (first 16 bytes, hex) of the canonical JSON of
/// the version, the schemas, the configuration and the requested
/// capabilities. Callbacks are code, not data: a changed hook is a new
/// `version`.
pub fn revision(m: &Manifest) -> String {
    let collections: BTreeMap<&String, Value> = m
        .state
        .collections
        .iter()
        .map(|(k, c)| {
            (
                k,
                serde_json::json!({"document": c.document, "schema": c.schema}),
            )
        })
        .collect();
    let commands: BTreeMap<&String, Value> = m
        .commands
        .iter()
        .map(|(k, c)| {
            (
                k,
                serde_json::json!({"scope": c.scope.as_str(), "input": c.input_schema}),
            )
        })
        .collect();
    let subject = serde_json::json!({
        "version": m.version,
        "config": m.config,
        "configSchema": m.config_schema,
        "state": {"version": m.state.version, "collections": collections},
        "commands": commands,
        "requests": m.requests,
    });
    let mut canonical = String::new();
    canonical_json(&subject, &mut canonical);
    let digest = Sha256::digest(canonical.as_bytes());
    crate::text::hex(&digest[..16])
}

/// JSON with object keys sorted at every level, whatever map order
/// `serde_json` was built with.
pub(crate) fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}
