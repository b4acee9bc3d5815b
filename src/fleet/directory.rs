//! The Agent directory (seed: "Agent fleet": Agent directory reservations,
//! replay receipts, erasure addresses), sans-IO. One designated Durable
//! Object of the fleet's namespace holds it: the Agent id
//! [`DIRECTORY_AGENT_ID`], reserved (never an ordinary Agent), in its own
//! SQLite under the versioned schema (`store::schema`, opened by the host
//! before the first request): its tables are a feature group
//! (`store::schema::DIRECTORY`) made with the first entry or erasure, and
//! nothing else is written there (the object runs no Agent).
//!
//! Rules, each one transition ([`handle`] dispatches a [`Request`]):
//! - [`create`]: reserves a new Agent id derived from (creator, requestId)
//!   ([`reserved_id`]), so a retried create answers the same entry (the
//!   replay receipt); other input under the same (creator, requestId) is
//!   `create:conflict`; at most [`DIRECTORY_AGENTS_MAX`] Agents
//!   (`create:full`); an id that was erased is never handed out again
//!   (`create:erased`).
//! - [`register`]: an Agent never created through `create` (reached by URL)
//!   enters the directory with no creator as its first request starts;
//!   idempotent; an erased id is refused (`directory:erased`).
//! - [`lookup`]: one entry, or whether its address was erased (the sender's
//!   delivery asks before carrying a send).
//! - [`list`]: bounded pages in reservation order, archived Agents only
//!   when asked (and then only them).
//! - [`check`] then [`set_archived`]: archive and unarchive. The caller's
//!   runtime asks [`check`] (creator, self, already archived / not
//!   archived), then the target for its own facts (running, pending,
//!   unreadable: `crate::fleet::member`), then commits with
//!   [`set_archived`], which checks again.
//! - [`erase`]: host-only; the entry is removed and its id remembered as
//!   erased (at most [`DIRECTORY_ERASED_KEPT_MAX`], oldest forgotten).

use crate::limits::{
    AGENT_NAME_CHARS_MAX, DIRECTORY_AGENTS_MAX, DIRECTORY_ERASED_KEPT_MAX, DIRECTORY_PAGE_DEFAULT,
    DIRECTORY_PAGE_MAX, REQUEST_ID_BYTES_MAX,
};
use crate::sql::{atomically, read, write, Row, Sql, SqlError};
use crate::store::schema::DIRECTORY;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The Agent id of the Durable Object holding the directory (reserved).
pub const DIRECTORY_AGENT_ID: &str = "shiitake.directory";

const AGENTS: &str = "shiitake_directory";
const ERASED: &str = "shiitake_directory_erased";

/// Whether `agent_id` is reserved (the directory's own object).
pub fn is_reserved(agent_id: &str) -> bool {
    agent_id == DIRECTORY_AGENT_ID
}

/// A refusal: `code` is what the caller's model sees first
/// (`archive:not_creator`), `status` its HTTP-like class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: String,
    pub status: u16,
    pub message: String,
}

impl Refusal {
    pub fn new(code: &str, message: impl Into<String>) -> Refusal {
        Refusal {
            code: code.to_owned(),
            status: 409,
            message: message.into(),
        }
    }

    fn invalid(message: impl Into<String>) -> Refusal {
        Refusal {
            code: "invalid_request".into(),
            status: 400,
            message: message.into(),
        }
    }

    fn storage(e: SqlError) -> Refusal {
        Refusal {
            code: "storage_error".into(),
            status: 500,
            message: e.to_string(),
        }
    }
}

impl From<SqlError> for Refusal {
    fn from(e: SqlError) -> Refusal {
        Refusal::storage(e)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// One Agent of the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    pub agent_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The Agent that created it; absent for a self-registered Agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creator: Option<String>,
    /// The creator's requestId (the replay receipt's key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    pub archived: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

/// What `create` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateInput {
    pub creator: String,
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// One request to the directory's object (JSON, tagged by `op`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
pub enum Request {
    Create(CreateInput),
    #[serde(rename_all = "camelCase")]
    Register {
        agent_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Lookup {
        agent_id: String,
    },
    #[serde(rename_all = "camelCase")]
    List {
        #[serde(default)]
        archived: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cursor: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    /// May `caller` archive (`archived: true`) or unarchive `agent_id`?
    #[serde(rename_all = "camelCase")]
    Check {
        caller: String,
        agent_id: String,
        archived: bool,
    },
    #[serde(rename_all = "camelCase")]
    SetArchived {
        caller: String,
        agent_id: String,
        archived: bool,
    },
    #[serde(rename_all = "camelCase")]
    Erase {
        agent_id: String,
    },
}

/// What [`lookup`] answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Lookup {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<Entry>,
    #[serde(default)]
    pub erased: bool,
}

/// One page of [`list`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Page {
    pub agents: Vec<Entry>,
    /// Pass back to read the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// The Agent id `create` reserves for (creator, requestId): `a-` and 32 hex
/// digits of SHA-256 over both, joined by NUL.
pub fn reserved_id(creator: &str, request_id: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"shiitake.directory.create\0");
    hash.update(creator.as_bytes());
    hash.update(b"\0");
    hash.update(request_id.as_bytes());
    let digest = hash.finalize();
    format!("a-{}", crate::text::hex(&digest[..16]))
}

/// Why an Agent's directory input is refused (`agents.create`'s and the
/// directory's own check; `invalid_request` at the directory).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// The name's length in characters.
    #[error("name: 1..={AGENT_NAME_CHARS_MAX} characters, got {0}")]
    NameLength(usize),
    #[error("name: no control characters")]
    NameControl,
    #[error("model: {0}")]
    Model(crate::model::Refusal),
    #[error("reasoning: {0}")]
    Reasoning(crate::model::Refusal),
    #[error("reasoning: needs a model")]
    ReasoningWithoutModel,
    #[error("creator: not an Agent id")]
    Creator,
    /// The requestId's length in bytes.
    #[error("requestId: 1..={REQUEST_ID_BYTES_MAX} UTF-8 bytes without NUL, got {0} bytes")]
    RequestId(usize),
    /// The cursor, shortened.
    #[error("cursor: not a cursor returned by agents.list: `{0}`")]
    Cursor(String),
}

impl From<InputError> for Refusal {
    fn from(e: InputError) -> Refusal {
        Refusal::invalid(e.to_string())
    }
}

/// A name: 1..=128 characters, no control characters.
pub fn validate_name(name: &str) -> Result<(), InputError> {
    let chars = name.chars().count();
    if chars == 0 || chars > AGENT_NAME_CHARS_MAX {
        return Err(InputError::NameLength(chars));
    }
    if name.chars().any(char::is_control) {
        return Err(InputError::NameControl);
    }
    Ok(())
}

/// `model`: a `provider/model` address the runtime can call
/// (`model::preference::parse_address`, as `agents.setModel` checks it).
pub fn validate_model(model: &str) -> Result<(), InputError> {
    crate::model::preference::parse_address(model)
        .map(drop)
        .map_err(InputError::Model)
}

/// `reasoning`: a level (`model::preference::Reasoning`), and only with a
/// model.
pub fn validate_reasoning(model: Option<&str>, reasoning: Option<&str>) -> Result<(), InputError> {
    let Some(level) = reasoning else {
        return Ok(());
    };
    crate::model::preference::Reasoning::parse(level).map_err(InputError::Reasoning)?;
    if model.is_none() {
        return Err(InputError::ReasoningWithoutModel);
    }
    Ok(())
}

/// Checks a create's input (the caller's runtime checks it too).
pub fn validate_create(input: &CreateInput) -> Result<(), InputError> {
    if !crate::mail::valid_agent_id(&input.creator) {
        return Err(InputError::Creator);
    }
    let r = &input.request_id;
    if r.is_empty() || r.len() > REQUEST_ID_BYTES_MAX || r.contains('\0') {
        return Err(InputError::RequestId(r.len()));
    }
    if let Some(name) = &input.name {
        validate_name(name)?;
    }
    if let Some(model) = &input.model {
        validate_model(model)?;
    }
    validate_reasoning(input.model.as_deref(), input.reasoning.as_deref())
}

const COLUMNS: &str =
    "agent_id, name, creator, request_id, model, reasoning, archived, created_at, updated_at, seq";

fn entry_of(r: &Row) -> Result<Entry, SqlError> {
    Ok(Entry {
        agent_id: r.text(0)?,
        name: r.opt_text(1)?,
        creator: r.opt_text(2)?,
        created_by: r.opt_text(3)?,
        model: r.opt_text(4)?,
        reasoning: r.opt_text(5)?,
        archived: r.int(6)? != 0,
        created_at: r.int(7)?,
        updated_at: r.int(8)?,
    })
}

fn entry(sql: &dyn Sql, agent_id: &str) -> Result<Option<Entry>, SqlError> {
    if !DIRECTORY.exists(sql) {
        return Ok(None);
    }
    read(
        sql,
        &format!("SELECT {COLUMNS} FROM {AGENTS} WHERE agent_id = ?"),
        &[agent_id.into()],
    )?
    .first()
    .map(entry_of)
    .transpose()
}

fn by_request(sql: &dyn Sql, creator: &str, request_id: &str) -> Result<Option<Entry>, SqlError> {
    if !DIRECTORY.exists(sql) {
        return Ok(None);
    }
    read(
        sql,
        &format!("SELECT {COLUMNS} FROM {AGENTS} WHERE creator = ? AND request_id = ?"),
        &[creator.into(), request_id.into()],
    )?
    .first()
    .map(entry_of)
    .transpose()
}

fn count(sql: &dyn Sql) -> Result<usize, SqlError> {
    if !DIRECTORY.exists(sql) {
        return Ok(0);
    }
    let rows = read(sql, &format!("SELECT count(*) FROM {AGENTS}"), &[])?;
    Ok(rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0) as usize)
}

fn erased(sql: &dyn Sql, agent_id: &str) -> Result<bool, SqlError> {
    if !DIRECTORY.exists(sql) {
        return Ok(false);
    }
    let rows = read(
        sql,
        &format!("SELECT count(*) FROM {ERASED} WHERE agent_id = ?"),
        &[agent_id.into()],
    )?;
    Ok(rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0) > 0)
}

fn insert(sql: &dyn Sql, e: &Entry) -> Result<(), SqlError> {
    DIRECTORY.ensure(sql)?;
    write(
        sql,
        &format!(
            "INSERT INTO {AGENTS} (agent_id, name, creator, request_id, model, reasoning, archived,
                created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ),
        vec![
            e.agent_id.as_str().into(),
            e.name.as_deref().into(),
            e.creator.as_deref().into(),
            e.created_by.as_deref().into(),
            e.model.as_deref().into(),
            e.reasoning.as_deref().into(),
            i64::from(e.archived).into(),
            e.created_at.into(),
            e.updated_at.into(),
        ],
    )
}

fn full() -> Refusal {
    Refusal::new(
        "create:full",
        format!("the directory already holds {DIRECTORY_AGENTS_MAX} Agents (at most {DIRECTORY_AGENTS_MAX})"),
    )
}

fn agent_id_ok(agent_id: &str) -> Result<(), Refusal> {
    if crate::mail::valid_agent_id(agent_id) {
        Ok(())
    } else {
        Err(Refusal::invalid("agentId: not an Agent id"))
    }
}

/// Reserves a new Agent for (creator, requestId), or answers the entry it
/// reserved before (the replay receipt).
pub fn create(sql: &dyn Sql, now_ms: i64, input: &CreateInput) -> Result<Entry, Refusal> {
    validate_create(input)?;
    let agent_id = reserved_id(&input.creator, &input.request_id);
    atomically(sql, || {
        if let Some(found) = by_request(sql, &input.creator, &input.request_id)? {
            let same = found.name == input.name
                && found.model == input.model
                && found.reasoning == input.reasoning;
            return if same {
                Ok(found)
            } else {
                Err(Refusal::new(
                    "create:conflict",
                    format!(
                        "requestId `{}` already created Agent `{}` with other input; reuse it only to retry the same create",
                        crate::text::shorten(&input.request_id),
                        found.agent_id
                    ),
                ))
            };
        }
        if erased(sql, &agent_id)? {
            return Err(Refusal::new(
                "create:erased",
                format!(
                    "requestId `{}` named Agent `{agent_id}`, which was erased; choose a new requestId",
                    crate::text::shorten(&input.request_id)
                ),
            ));
        }
        if entry(sql, &agent_id)?.is_some() {
            return Err(Refusal::new(
                "create:conflict",
                format!("Agent `{agent_id}` already exists"),
            ));
        }
        if count(sql)? >= DIRECTORY_AGENTS_MAX {
            return Err(full());
        }
        let e = Entry {
            agent_id: agent_id.clone(),
            name: input.name.clone(),
            creator: Some(input.creator.clone()),
            created_by: Some(input.request_id.clone()),
            model: input.model.clone(),
            reasoning: input.reasoning.clone(),
            archived: false,
            created_at: now_ms,
            updated_at: now_ms,
        };
        insert(sql, &e)?;
        Ok(e)
    })
}

/// Enters `agent_id` with no creator when absent (its first request);
/// answers its entry either way.
pub fn register(sql: &dyn Sql, now_ms: i64, agent_id: &str) -> Result<Entry, Refusal> {
    agent_id_ok(agent_id)?;
    if is_reserved(agent_id) {
        return Err(Refusal::new(
            "directory:reserved",
            format!("`{DIRECTORY_AGENT_ID}` is the directory's own id, never an Agent"),
        ));
    }
    atomically(sql, || {
        if let Some(found) = entry(sql, agent_id)? {
            return Ok(found);
        }
        if erased(sql, agent_id)? {
            return Err(Refusal::new(
                "directory:erased",
                format!("Agent `{agent_id}` was erased; its id cannot join the fleet again"),
            ));
        }
        if count(sql)? >= DIRECTORY_AGENTS_MAX {
            return Err(Refusal::new(
                "directory:full",
                format!("the directory already holds {DIRECTORY_AGENTS_MAX} Agents"),
            ));
        }
        let e = Entry {
            agent_id: agent_id.to_owned(),
            name: None,
            creator: None,
            created_by: None,
            model: None,
            reasoning: None,
            archived: false,
            created_at: now_ms,
            updated_at: now_ms,
        };
        insert(sql, &e)?;
        Ok(e)
    })
}

/// One entry, or whether its address was erased.
pub fn lookup(sql: &dyn Sql, agent_id: &str) -> Result<Lookup, Refusal> {
    agent_id_ok(agent_id)?;
    Ok(Lookup {
        entry: entry(sql, agent_id)?,
        erased: erased(sql, agent_id)?,
    })
}

/// One page in reservation order: the unarchived Agents, or with
/// `archived` only the archived ones. `cursor`: a page's cursor.
pub fn list(
    sql: &dyn Sql,
    archived: bool,
    cursor: Option<&str>,
    limit: Option<usize>,
) -> Result<Page, Refusal> {
    let limit = limit.unwrap_or(DIRECTORY_PAGE_DEFAULT);
    if !(1..=DIRECTORY_PAGE_MAX).contains(&limit) {
        return Err(Refusal::invalid(format!(
            "limit: 1..={DIRECTORY_PAGE_MAX}, got {limit}"
        )));
    }
    let after = match cursor {
        None => 0,
        Some(c) => parse_cursor(c)?,
    };
    if !DIRECTORY.exists(sql) {
        return Ok(Page {
            agents: Vec::new(),
            cursor: None,
        });
    }
    let rows = read(
        sql,
        &format!(
            "SELECT {COLUMNS} FROM {AGENTS} WHERE archived = ? AND seq > ? ORDER BY seq LIMIT ?"
        ),
        &[
            i64::from(archived).into(),
            after.into(),
            (limit as i64 + 1).into(),
        ],
    )?;
    let more = rows.len() > limit;
    let mut agents = Vec::with_capacity(limit);
    let mut last = after;
    for r in rows.iter().take(limit) {
        agents.push(entry_of(r)?);
        last = r.int(9)?;
    }
    Ok(Page {
        agents,
        cursor: more.then(|| last.to_string()),
    })
}

/// A list cursor: a positive integer in decimal.
pub fn parse_cursor(cursor: &str) -> Result<i64, InputError> {
    match cursor.parse::<i64>() {
        Ok(n) if n > 0 && cursor.len() <= 20 => Ok(n),
        _ => Err(InputError::Cursor(crate::text::shorten(cursor).to_owned())),
    }
}

fn verb(archived: bool) -> &'static str {
    if archived {
        "archive"
    } else {
        "unarchive"
    }
}

/// The directory's refusals of `caller` archiving (or unarchiving)
/// `agent_id`: `<verb>:self`, `<verb>:not_creator` (it did not create it,
/// or no such Agent), `archive:archived` / `unarchive:not_archived`.
/// Answers the entry when allowed.
pub fn check(
    sql: &dyn Sql,
    caller: &str,
    agent_id: &str,
    archived: bool,
) -> Result<Entry, Refusal> {
    agent_id_ok(agent_id)?;
    agent_id_ok(caller)?;
    decide(sql, caller, agent_id, archived)
}

fn decide(sql: &dyn Sql, caller: &str, agent_id: &str, archived: bool) -> Result<Entry, Refusal> {
    let verb = verb(archived);
    if caller == agent_id {
        return Err(Refusal::new(
            &format!("{verb}:self"),
            format!("an Agent cannot {verb} itself"),
        ));
    }
    let Some(found) = entry(sql, agent_id)? else {
        return Err(Refusal::new(
            &format!("{verb}:not_creator"),
            format!("Agent `{agent_id}` is not in the directory, so this Agent did not create it"),
        ));
    };
    if found.creator.as_deref() != Some(caller) {
        return Err(Refusal::new(
            &format!("{verb}:not_creator"),
            format!(
                "Agent `{agent_id}` was not created by this Agent; only its creator may {verb} it"
            ),
        ));
    }
    match (archived, found.archived) {
        (true, true) => Err(Refusal::new(
            "archive:archived",
            format!("Agent `{agent_id}` is already archived"),
        )),
        (false, false) => Err(Refusal::new(
            "unarchive:not_archived",
            format!("Agent `{agent_id}` is not archived"),
        )),
        _ => Ok(found),
    }
}

/// Commits an archive (or unarchive) after the target agreed: the same
/// refusals as [`check`], checked again in this transition.
pub fn set_archived(
    sql: &dyn Sql,
    now_ms: i64,
    caller: &str,
    agent_id: &str,
    archived: bool,
) -> Result<Entry, Refusal> {
    agent_id_ok(agent_id)?;
    agent_id_ok(caller)?;
    atomically(sql, || {
        let mut found = decide(sql, caller, agent_id, archived)?;
        write(
            sql,
            &format!("UPDATE {AGENTS} SET archived = ?, updated_at = ? WHERE agent_id = ?"),
            vec![i64::from(archived).into(), now_ms.into(), agent_id.into()],
        )?;
        found.archived = archived;
        found.updated_at = now_ms;
        Ok(found)
    })
}

/// Host-only: removes `agent_id`'s entry and remembers its id as erased.
/// Answers whether an entry was removed (erasing twice is no error).
pub fn erase(sql: &dyn Sql, now_ms: i64, agent_id: &str) -> Result<bool, Refusal> {
    agent_id_ok(agent_id)?;
    if is_reserved(agent_id) {
        return Err(Refusal::new(
            "directory:reserved",
            "the directory cannot erase itself",
        ));
    }
    atomically(sql, || {
        let present = entry(sql, agent_id)?.is_some();
        DIRECTORY.ensure(sql)?;
        write(
            sql,
            &format!("DELETE FROM {AGENTS} WHERE agent_id = ?"),
            vec![agent_id.into()],
        )?;
        write(
            sql,
            &format!(
                "INSERT INTO {ERASED} (agent_id, erased_at) VALUES (?, ?)
                 ON CONFLICT (agent_id) DO UPDATE SET erased_at = excluded.erased_at"
            ),
            vec![agent_id.into(), now_ms.into()],
        )?;
        write(
            sql,
            &format!(
                "DELETE FROM {ERASED} WHERE agent_id IN (
                    SELECT agent_id FROM {ERASED} ORDER BY erased_at DESC, agent_id DESC
                    LIMIT -1 OFFSET ?)"
            ),
            vec![(DIRECTORY_ERASED_KEPT_MAX as i64).into()],
        )?;
        Ok(present)
    })
}

/// Runs one request: its answer as a JSON value, or the refusal.
pub fn handle(sql: &dyn Sql, now_ms: i64, request: &Request) -> Result<Value, Refusal> {
    match request {
        Request::Create(input) => Ok(value(&create(sql, now_ms, input)?)),
        Request::Register { agent_id } => Ok(value(&register(sql, now_ms, agent_id)?)),
        Request::Lookup { agent_id } => Ok(value(&lookup(sql, agent_id)?)),
        Request::List {
            archived,
            cursor,
            limit,
        } => Ok(value(&list(sql, *archived, cursor.as_deref(), *limit)?)),
        Request::Check {
            caller,
            agent_id,
            archived,
        } => Ok(value(&check(sql, caller, agent_id, *archived)?)),
        Request::SetArchived {
            caller,
            agent_id,
            archived,
        } => Ok(value(&set_archived(
            sql, now_ms, caller, agent_id, *archived,
        )?)),
        Request::Erase { agent_id } => Ok(json!({ "erased": erase(sql, now_ms, agent_id)? })),
    }
}

/// One change of an Agent's lifecycle a mutation made (seed:
/// `createAgentDirectory(sql)` "returns lifecycle facts so host projections
/// commit with the directory change"). A replayed create, a repeated
/// register or an erase of an absent entry makes none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fact {
    /// `created`, `registered`, `archived`, `unarchived` or `erased`.
    pub kind: &'static str,
    pub agent_id: String,
    /// When (ms since the epoch): the transition's clock.
    pub at: i64,
    /// The entry after the change (none once erased).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<Entry>,
}

/// Runs one request like [`handle`], also answering the lifecycle facts it
/// made. What existed before is read in the same transaction as the change
/// (the caller's).
pub fn handle_with_facts(
    sql: &dyn Sql,
    now_ms: i64,
    request: &Request,
) -> Result<(Value, Vec<Fact>), Refusal> {
    let fact = |kind, entry: Entry| Fact {
        kind,
        agent_id: entry.agent_id.clone(),
        at: now_ms,
        entry: Some(entry),
    };
    let existed = |agent_id: &str| -> Result<bool, Refusal> {
        agent_id_ok(agent_id)?;
        Ok(entry(sql, agent_id)?.is_some())
    };
    Ok(match request {
        Request::Create(input) => {
            validate_create(input)?;
            let before = existed(&reserved_id(&input.creator, &input.request_id))?;
            let e = create(sql, now_ms, input)?;
            let facts = if before {
                vec![]
            } else {
                vec![fact("created", e.clone())]
            };
            (value(&e), facts)
        }
        Request::Register { agent_id } => {
            let before = existed(agent_id)?;
            let e = register(sql, now_ms, agent_id)?;
            let facts = if before {
                vec![]
            } else {
                vec![fact("registered", e.clone())]
            };
            (value(&e), facts)
        }
        Request::SetArchived {
            caller,
            agent_id,
            archived,
        } => {
            let e = set_archived(sql, now_ms, caller, agent_id, *archived)?;
            let kind = if *archived { "archived" } else { "unarchived" };
            (value(&e), vec![fact(kind, e)])
        }
        Request::Erase { agent_id } => {
            let erased = erase(sql, now_ms, agent_id)?;
            let facts = match erased {
                true => vec![Fact {
                    kind: "erased",
                    agent_id: agent_id.clone(),
                    at: now_ms,
                    entry: None,
                }],
                false => vec![],
            };
            (json!({ "erased": erased }), facts)
        }
        read => (handle(sql, now_ms, read)?, vec![]),
    })
}

/// A request as JSON text in, the peer answer `{value}` or `{error: {code,
/// status, message}}` out (what the directory's object answers its RPC);
/// with `facts`, `{value, facts}` ([`handle_with_facts`]: a host's own
/// object running the directory in its transaction).
pub fn handle_json(sql: &dyn Sql, now_ms: i64, request: &str, facts: bool) -> String {
    let parsed = crate::json::strict(request.as_bytes())
        .map_err(|e| e.to_string())
        .and_then(crate::json::decode::<Request>);
    let answer = match parsed {
        Err(e) => Err(Refusal::invalid(format!("directory request: {e}"))),
        Ok(request) if facts => handle_with_facts(sql, now_ms, &request)
            .map(|(value, facts)| json!({ "value": value, "facts": facts })),
        Ok(request) => handle(sql, now_ms, &request).map(|value| json!({ "value": value })),
    };
    match answer {
        Ok(answer) => answer.to_string(),
        Err(r) => json!({ "error": { "code": r.code, "status": r.status, "message": r.message } })
            .to_string(),
    }
}

fn value<T: Serialize>(v: &T) -> Value {
    crate::json::to_value(v).unwrap_or(Value::Null)
}
