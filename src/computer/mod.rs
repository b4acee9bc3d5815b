//! Computers (seed knapsack: `Knapsack.computer`, `Knapsack.computers`),
//! sans-IO: a Computer provider owns its operations, schemas, storage and
//! execution; the core parses its advertisement into a module and decides
//! which Computers of a description round stay. The host performs the
//! exchanges (`js/computer.mjs`, protocol in `docs/computers.md`).
//!
//! - [`Connection`]: one entry of the host's Computer list (`{id, name,
//!   confirmCalls?, files?}`), decoded closed by [`parse_list`] /
//!   [`decode_list`]; [`list_digest`] tells the host the list changed (or
//!   the host announced a change).
//! - [`Advertisement`]: the provider's `{ "operations": [ { "name",
//!   "description", "inputSchema" } ] }`, closed and bounded
//!   (`COMPUTER_ADVERTISEMENT_BYTES_MAX` bytes of JSON text, and the
//!   capability bounds on operations).
//! - [`module`]: the module `computers.<name>`. Every operation is `write`,
//!   unsafe to replay, and asks for confirmation exactly when the host's
//!   connection sets `confirmCalls`: the advertisement does not distinguish
//!   read-only from mutating operations, so it cannot say otherwise, and an
//!   advertisement that tries (`access`, `readOnly`, `replaySafe`,
//!   `confirm`, ...) is refused.
//! - [`Round`]: one description round's outcome: the Computers that stay,
//!   and the ones that rejected, hung or advertised an unusable schema, to
//!   report through `onUnavailable`.
//! - [`call_reply`]: a call's reply, `{"result": ...}` or `{"error": ...}`.
//!
//! Authority: a Computer's commands and its files (`computers.<name>.files`,
//! when the connection supplies a files port) share the grant key
//! `computers.<name>` ([`crate::capability::authority`]). There is no
//! implicit shared files module: a Computer that fails to describe itself
//! loses its files with its commands (the host offers
//! [`Available::files_module_id`] only for the Computers that stay).

#[cfg(test)]
mod tests;

use crate::capability::{
    check_payload, validate_module_id, Access, CapabilityError, Module, ModuleSpec, OperationSpec,
    COMPUTERS_NAMESPACE,
};
use crate::limits::{
    COMPUTERS_MAX, COMPUTER_ADVERTISEMENT_BYTES_MAX, COMPUTER_ID_BYTES_MAX,
    COMPUTER_NAME_BYTES_MAX, DIAGNOSTIC_BYTES_MAX, OPERATIONS_PER_MODULE_MAX,
};
use crate::text::shorten;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The shape of the host's Computer list, for its refusals.
const LIST_SHAPE: &str =
    "expected an array of {id: string, name: string, confirmCalls?: boolean, files?: boolean}";

/// Why the core refuses a Computer's name, the host's Computer list, an
/// advertisement or a call's reply. `Display` is the message the host (and
/// `onUnavailable`) sees; the `Entry` and `Name` variants say where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComputerError {
    #[error("a Computer name must not be empty")]
    EmptyName,
    /// The name (shortened) and its length.
    #[error("Computer name `{0}` is {1} bytes; at most {COMPUTER_NAME_BYTES_MAX}")]
    NameTooLong(String, usize),
    #[error("Computer name `{0}` must be one identifier ([a-z][a-z0-9_]*), without a dot")]
    NameDotted(String),
    #[error("Computer name `{0}` is a reserved word in guest code")]
    NameReserved(String),
    #[error("Computer name `{0}` must match [a-z][a-z0-9_]*")]
    NameInvalid(String),
    #[error("the advertisement is {0} bytes; at most {COMPUTER_ADVERTISEMENT_BYTES_MAX}")]
    AdvertisementTooLarge(usize),
    #[error("the advertisement is not valid JSON: {0}")]
    AdvertisementNotJson(String),
    #[error("the advertisement must be a JSON object {{\"operations\": [...]}}")]
    AdvertisementNotObject,
    #[error("operations: {0} operations; at most {OPERATIONS_PER_MODULE_MAX}")]
    TooManyOperations(usize),
    #[error(
        "operations[{index}].{field}: unknown field; a Computer's operations are always write \
         access and unsafe to replay, and whether a call asks for confirmation is the host's \
         connection setting (confirmCalls), so an advertisement cannot mark them otherwise"
    )]
    PolicyField { index: usize, field: &'static str },
    /// An advertisement's field its decoding or the capability model
    /// refused, named by its path (`operations[2].inputSchema: ...`).
    #[error("{0}")]
    Field(String),
    /// The operation's name (shortened) and the files module it clashes with.
    #[error(
        "operations[{index}].name: `{name}` is guest name `{FILES_SEGMENT}`, which this \
         Computer's files module `{module}` takes"
    )]
    FilesClash {
        index: usize,
        name: String,
        module: String,
    },
    #[error("id: {0} bytes; 1 to {COMPUTER_ID_BYTES_MAX}")]
    IdLength(usize),
    #[error("id: holds a control character")]
    IdControl,
    #[error("name: {0}")]
    Name(Box<ComputerError>),
    #[error("computers: not valid JSON: {0}")]
    ListNotJson(String),
    #[error("computers: {LIST_SHAPE}")]
    ListShape,
    #[error("computers: {0} Computers; at most {COMPUTERS_MAX}")]
    TooManyComputers(usize),
    #[error("computers[{0}]: {LIST_SHAPE}")]
    EntryShape(usize),
    /// An entry's field decoding refused, its path starting at the index
    /// (`[1].name: ...`).
    #[error("computers{0}")]
    ListField(String),
    #[error("computers[{0}].{1}")]
    Entry(usize, Box<ComputerError>),
    /// The entry, its id (shortened) and the entry holding it first.
    #[error("computers[{0}].id: `{1}` is also the id of computers[{2}]")]
    DuplicateId(usize, String, usize),
    #[error("computers[{0}].name: `{1}` is also the name of computers[{2}]")]
    DuplicateName(usize, String, usize),
    #[error("the Computer's reply is malformed: {0}")]
    MalformedReply(String),
}

/// The host's callers still carry errors as text (`src/host/computers.rs`).
impl From<ComputerError> for String {
    fn from(e: ComputerError) -> String {
        e.to_string()
    }
}

/// The last segment of a Computer's files module (`computers.<name>.files`).
pub const FILES_SEGMENT: &str = "files";

/// `computers.<name>`.
pub fn module_id(name: &str) -> String {
    format!("{COMPUTERS_NAMESPACE}.{name}")
}

/// `computers.<name>.files`.
pub fn files_module_id(name: &str) -> String {
    format!("{COMPUTERS_NAMESPACE}.{name}.{FILES_SEGMENT}")
}

/// Checks a Computer name: one module id segment (`[a-z][a-z0-9_]*`, no
/// reserved word) of at most `COMPUTER_NAME_BYTES_MAX` bytes, so that
/// `computers.<name>` and `computers.<name>.files` are valid module ids.
pub fn validate_name(name: &str) -> Result<(), ComputerError> {
    if name.is_empty() {
        return Err(ComputerError::EmptyName);
    }
    if name.len() > COMPUTER_NAME_BYTES_MAX {
        return Err(ComputerError::NameTooLong(
            shorten(name).to_owned(),
            name.len(),
        ));
    }
    if name.contains('.') {
        return Err(ComputerError::NameDotted(name.to_owned()));
    }
    validate_module_id(name).map_err(|_| {
        if crate::capability::is_reserved(name) {
            ComputerError::NameReserved(name.to_owned())
        } else {
            ComputerError::NameInvalid(name.to_owned())
        }
    })?;
    // The name's own bound keeps both ids within theirs.
    debug_assert!(validate_module_id(&files_module_id(name)).is_ok());
    Ok(())
}

/// Fields an advertisement may not carry, with why: the advertisement does
/// not decide an operation's access, replay or confirmation.
const POLICY_FIELDS: &[&str] = &[
    "access",
    "readOnly",
    "readOnlyHint",
    "replaySafe",
    "annotations",
    "confirm",
];

/// One advertised operation, as the provider describes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Advertised {
    /// The provider's name, sent back in each call (`run-command`).
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A JSON Schema, decoded through the capability subset.
    pub input_schema: Value,
}

/// A Computer's advertisement: `{ "operations": [ ... ] }`, nothing else.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Advertisement {
    pub operations: Vec<Advertised>,
}

impl Advertisement {
    /// Decodes the advertisement's JSON text: at most
    /// `COMPUTER_ADVERTISEMENT_BYTES_MAX` bytes, an object with no repeated
    /// key, at most `OPERATIONS_PER_MODULE_MAX` operations, each closed. The
    /// error names the field (`operations[2].inputSchema: ...`).
    pub fn parse(text: &str) -> Result<Advertisement, ComputerError> {
        if text.len() > COMPUTER_ADVERTISEMENT_BYTES_MAX {
            return Err(ComputerError::AdvertisementTooLarge(text.len()));
        }
        let value = crate::json::strict(text.as_bytes())
            .map_err(|e| ComputerError::AdvertisementNotJson(e.to_string()))?;
        let Some(object) = value.as_object() else {
            return Err(ComputerError::AdvertisementNotObject);
        };
        if let Some(Value::Array(operations)) = object.get("operations") {
            if operations.len() > OPERATIONS_PER_MODULE_MAX {
                return Err(ComputerError::TooManyOperations(operations.len()));
            }
            for (i, operation) in operations.iter().enumerate() {
                let Some(fields) = operation.as_object() else {
                    continue; // the decoding below names it
                };
                if let Some(field) = POLICY_FIELDS.iter().find(|f| fields.contains_key(**f)) {
                    return Err(ComputerError::PolicyField { index: i, field });
                }
            }
        }
        crate::json::decode(value).map_err(ComputerError::Field)
    }

    /// The module `computers.<name>` (see [`module`]); errors name the
    /// field, without the Computer.
    fn into_module(self, name: &str, confirm_calls: bool) -> Result<Module, ComputerError> {
        let spec = ModuleSpec {
            id: module_id(name),
            operations: self
                .operations
                .into_iter()
                .map(|op| OperationSpec {
                    name: op.name,
                    description: op.description,
                    input_schema: op.input_schema,
                    access: Access::Write,
                    confirm: confirm_calls,
                    replay_safe: false,
                })
                .collect(),
        };
        Module::from_spec(spec).map_err(|e| ComputerError::Field(e.0))
    }
}

/// The module `computers.<name>` of a Computer's advertisement: one
/// operation per advertised one, each `write`, unsafe to replay, asking for
/// confirmation when `confirm_calls`. An input schema outside the capability
/// subset still accepts a JSON object (the provider validates); one the
/// subset cannot decode at all (a top level that is no object, past the
/// size or depth bounds), like any other refusal, refuses the whole
/// Computer. Errors name the Computer and the field:
/// `computers.laptop: operations[2].inputSchema: ...`.
pub fn module(
    name: &str,
    advertisement_json: &str,
    confirm_calls: bool,
) -> Result<Module, CapabilityError> {
    let at = |e: ComputerError| CapabilityError(format!("{}: {e}", module_id(shorten(name))));
    validate_name(name).map_err(|e| at(ComputerError::Name(Box::new(e))))?;
    Advertisement::parse(advertisement_json)
        .and_then(|ad| ad.into_module(name, confirm_calls))
        .map_err(at)
}

/// One entry of the host's Computer list.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Connection {
    /// The connection's stable identity (1 to `COMPUTER_ID_BYTES_MAX`
    /// bytes, no control character).
    pub id: String,
    /// The guest-visible name: the module is `computers.<name>`.
    pub name: String,
    /// Ask for confirmation before every advertised call.
    #[serde(default)]
    pub confirm_calls: bool,
    /// The connection supplies a files port: its files module is
    /// `computers.<name>.files`.
    #[serde(default)]
    pub files: bool,
    /// Its files port supplies the patch engine (`apply_patch`).
    #[serde(default)]
    pub patches: bool,
    /// Its files port's `replace` is atomic for one change only: a patch is
    /// journaled (`files::journal`).
    #[serde(default)]
    pub stepwise: bool,
    /// Its operations (and its files') are also direct tools, named
    /// `computers_<name>_<operation>` (`capability::door::tool_name`).
    #[serde(default)]
    pub direct: bool,
}

impl Connection {
    pub fn module_id(&self) -> String {
        module_id(&self.name)
    }

    /// `computers.<name>.files` when the connection supplies a files port.
    pub fn files_module_id(&self) -> Option<String> {
        self.files.then(|| files_module_id(&self.name))
    }

    fn check(&self) -> Result<(), ComputerError> {
        if self.id.is_empty() || self.id.len() > COMPUTER_ID_BYTES_MAX {
            return Err(ComputerError::IdLength(self.id.len()));
        }
        if self.id.chars().any(char::is_control) {
            return Err(ComputerError::IdControl);
        }
        validate_name(&self.name).map_err(|e| ComputerError::Name(Box::new(e)))
    }
}

/// Decodes the host's Computer list (JSON text); see [`decode_list`].
pub fn parse_list(json: &str) -> Result<Vec<Connection>, ComputerError> {
    let value = crate::json::strict(json.as_bytes())
        .map_err(|e| ComputerError::ListNotJson(e.to_string()))?;
    decode_list(value)
}

/// Decodes the host's Computer list: an array of at most `COMPUTERS_MAX`
/// closed entries `{id, name, confirmCalls?, files?}`, ids unique and names
/// unique. Errors name the entry and field (`computers[1].name: ...`).
pub fn decode_list(value: Value) -> Result<Vec<Connection>, ComputerError> {
    let Value::Array(entries) = value else {
        return Err(ComputerError::ListShape);
    };
    if entries.len() > COMPUTERS_MAX {
        return Err(ComputerError::TooManyComputers(entries.len()));
    }
    if let Some(i) = entries.iter().position(|entry| !entry.is_object()) {
        return Err(ComputerError::EntryShape(i));
    }
    // The path of an entry's error starts at its index: `[1].name: ...`.
    let list: Vec<Connection> =
        crate::json::decode(Value::Array(entries)).map_err(ComputerError::ListField)?;
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, connection) in list.iter().enumerate() {
        connection
            .check()
            .map_err(|e| ComputerError::Entry(i, Box::new(e)))?;
        if let Some(j) = ids.insert(&connection.id, i) {
            let id = shorten(&connection.id).to_owned();
            return Err(ComputerError::DuplicateId(i, id, j));
        }
        if let Some(j) = names.insert(&connection.name, i) {
            return Err(ComputerError::DuplicateName(i, connection.name.clone(), j));
        }
    }
    Ok(list)
}

/// A digest of a Computer list by what its modules depend on: each entry's
/// (id, name, confirmCalls, files, patches, stepwise), in any order, and
/// `announced`, the host's announcements of a change so far (seed: the list
/// is subscribed: an announcement invalidates the captured modules even
/// when the entries are equal, since a provider's advertisement may have
/// changed behind one). Two lists with equal digests describe the same
/// Computers (FNV-1a over length-prefixed fields, entries sorted by id;
/// stable across builds).
pub fn list_digest(list: &[Connection], announced: u64) -> u64 {
    let mut sorted: Vec<&Connection> = list.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    let mut hash = Fnv::new();
    hash.write(&announced.to_le_bytes());
    hash.write(&(sorted.len() as u64).to_le_bytes());
    for c in sorted {
        for field in [c.id.as_bytes(), c.name.as_bytes()] {
            hash.write(&(field.len() as u64).to_le_bytes());
            hash.write(field);
        }
        hash.write(&[
            u8::from(c.confirm_calls),
            u8::from(c.files),
            u8::from(c.patches),
            u8::from(c.stepwise),
            u8::from(c.direct),
        ]);
    }
    hash.finish()
}

struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// How describing one Computer ended, as the host saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Described {
    /// The advertisement's JSON text.
    Advertised(String),
    /// The provider (or its transport) refused, with its message.
    Rejected(String),
    /// No answer within the round's timeout.
    TimedOut,
}

/// A Computer that stays: its connection and its module `computers.<name>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Available {
    pub connection: Connection,
    pub module: Module,
}

impl Available {
    /// `computers.<name>.files`, when the connection supplies a files port.
    pub fn files_module_id(&self) -> Option<String> {
        self.connection.files_module_id()
    }
}

/// A Computer dropped from a round, and why (at most
/// `DIAGNOSTIC_BYTES_MAX` bytes of reason), for `onUnavailable`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unavailable {
    pub id: String,
    pub name: String,
    pub reason: String,
}

/// The outcome of one description round.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Round {
    /// In the order of the outcomes given.
    pub available: Vec<Available>,
    pub unavailable: Vec<Unavailable>,
}

impl Round {
    /// Decides a round from each Computer's outcome (`timeout_ms`: the
    /// round's describe timeout, for the report). A Computer that rejected,
    /// timed out or advertised an unusable schema is dropped and reported;
    /// the others stay.
    pub fn decide(outcomes: Vec<(Connection, Described)>, timeout_ms: u64) -> Round {
        let mut round = Round::default();
        for (connection, described) in outcomes {
            let module = match described {
                Described::Advertised(text) => Advertisement::parse(&text)
                    .and_then(|ad| check_files(&connection, ad))
                    .and_then(|ad| ad.into_module(&connection.name, connection.confirm_calls))
                    .map(|m| {
                        if connection.direct {
                            m.offered_direct()
                        } else {
                            m
                        }
                    })
                    .map_err(|e| format!("advertised an unusable schema: {e}")),
                Described::Rejected(message) if message.trim().is_empty() => {
                    Err("rejected without a message".to_owned())
                }
                Described::Rejected(message) => Err(format!("rejected: {message}")),
                Described::TimedOut => {
                    Err(format!("did not describe itself within {timeout_ms} ms"))
                }
            };
            match module {
                Ok(module) => round.available.push(Available { connection, module }),
                Err(mut reason) => {
                    crate::text::truncate(&mut reason, DIAGNOSTIC_BYTES_MAX);
                    round.unavailable.push(Unavailable {
                        id: connection.id,
                        name: connection.name,
                        reason,
                    });
                }
            }
        }
        round
    }

    /// The modules that stay, `computers.<name>` each.
    pub fn modules(&self) -> impl Iterator<Item = &Module> {
        self.available.iter().map(|a| &a.module)
    }
}

/// A Computer with a files port may not advertise an operation whose guest
/// name is `files`: `computers.<name>.files` would be both that operation
/// and the files module.
fn check_files(connection: &Connection, ad: Advertisement) -> Result<Advertisement, ComputerError> {
    if connection.files {
        let clash = ad.operations.iter().position(|op| {
            crate::capability::guest_name(&op.name).is_ok_and(|g| g == FILES_SEGMENT)
        });
        if let Some(i) = clash {
            return Err(ComputerError::FilesClash {
                index: i,
                name: shorten(&ad.operations[i].name).to_owned(),
                module: files_module_id(&connection.name),
            });
        }
    }
    Ok(ad)
}

/// A call's reply, decoded by [`call_reply`].
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `{"result": <json>}`: what the operation returned.
    Result(Value),
    /// `{"error": "<message>"}`: the provider's (or the transport's)
    /// failure, at most `DIAGNOSTIC_BYTES_MAX` bytes.
    Error(String),
}

/// Decodes a call's reply as the transport hands it back: an object with
/// exactly one of `result` (bounded by [`check_payload`]) or `error` (a
/// string). The error says how any other reply is malformed.
pub fn call_reply(text: &str) -> Result<Reply, ComputerError> {
    let malformed = |why: String| Err(ComputerError::MalformedReply(why));
    let value = match crate::json::strict(text.as_bytes()) {
        Ok(value) => value,
        Err(e) => return malformed(format!("not valid JSON: {e}")),
    };
    let Value::Object(mut object) = value else {
        return malformed("not a JSON object".into());
    };
    if object.len() != 1 {
        let keys: Vec<&str> = object.keys().map(|k| shorten(k)).take(8).collect();
        return malformed(format!(
            "expected exactly one of `result` or `error`, got keys [{}]",
            keys.join(", ")
        ));
    }
    if let Some(result) = object.remove("result") {
        return match check_payload(&result) {
            Ok(()) => Ok(Reply::Result(result)),
            Err(e) => malformed(format!("result: {e}")),
        };
    }
    match object.remove("error") {
        Some(Value::String(mut message)) => {
            crate::text::truncate(&mut message, DIAGNOSTIC_BYTES_MAX);
            Ok(Reply::Error(message))
        }
        Some(_) => malformed("error: not a string".into()),
        None => {
            let key = object.keys().next().map(|k| shorten(k)).unwrap_or("");
            malformed(format!(
                "expected exactly one of `result` or `error`, got `{key}`"
            ))
        }
    }
}
