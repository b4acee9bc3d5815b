//! The HTTP contract v1 (`docs/http.md`) as a pure function from a request
//! to a response. The wasm host only converts platform requests into
//! [`HttpRequest`] and [`HttpResponse`] back; every route, status and error
//! body is decided here and tested natively.

use crate::agent;
use crate::attention;
use crate::budget;
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::extension::{Extensions, Invocation, Invoked, Sent};
use crate::json::parse_body;
use crate::limits::{
    BODY_BYTES_MAX, BUDGET_TOKENS_MAX, INBOX_PAGE_SESSIONS_MAX, LIST_PAGE_SESSIONS_MAX,
    PAGE_LIMIT_DEFAULT, READ_PAGE_MESSAGES_MAX, SESSION_ID_BYTES_MAX, SETTLEMENT_TIMEOUT_MS_MAX,
    USAGE_PAGE_GROUPS_MAX,
};
use crate::model::preference::{Choice, Policy};
use crate::model::Reasoning;
use crate::observe::Frame;
use crate::run::cancel;
use crate::session::command::{self, validate_request_id, Command};
use crate::session::{admission, queue, read};
use crate::settlement::Settlement;
use crate::usage;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The header that carries host metadata from `shiitakeApp()` to the DO.
pub const META_HEADER: &str = "x-shiitake-meta";

#[derive(Debug, Clone, Default)]
pub struct HttpRequest {
    pub method: String,
    /// The path without the query, e.g. `/sessions/abc/commands`.
    pub path: String,
    /// The raw query string without `?`.
    pub query: String,
    /// The `x-shiitake-meta` header, if the host set one.
    pub meta: Option<String>,
    pub body: Vec<u8>,
    /// Set when the host already parked this request once (see [`Park`]).
    pub waited: bool,
}

#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    /// JSON body; `None` for 204.
    pub body: Option<String>,
    /// What the host does after sending (the write has committed).
    pub effects: Effects,
}

/// Side effects of a committed transition, for the host to carry out.
#[derive(Debug, Clone, Default)]
pub struct Effects {
    /// Work may be claimable: request reconciliation through the alarm.
    pub reconcile: bool,
    /// Turns claimed at admission that this instance has not started, as
    /// `(head, session)`: their first attempt is already counted.
    pub fresh_turns: Vec<(String, String)>,
    /// Running turns (by head command) whose model calls must stop.
    pub stop_turns: Vec<String>,
    /// Frames for the Session's watchers.
    pub frames: Vec<(String, Frame)>,
    /// Settlements written, to wake long polls.
    pub settled: Vec<String>,
    /// Hold the request until this command settles or the timeout passes,
    /// then serve it again with `HttpRequest::waited` set.
    pub park: Option<Park>,
    /// Turn the response into a watch of this Session (the body is the
    /// snapshot).
    pub watch: Option<String>,
    /// A deleted Session: end its watches.
    pub ended_session: Option<String>,
    /// The transition staged delivery outbox entries: wake the host's work
    /// lane at once (`src/delivery.rs`).
    pub delivery: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Park {
    pub command_id: String,
    pub timeout_ms: u64,
}

impl Effects {
    /// Joins the effects of another admission into these.
    pub fn add(&mut self, other: Effects) {
        self.reconcile |= other.reconcile;
        self.delivery |= other.delivery;
        self.fresh_turns.extend(other.fresh_turns);
        self.frames.extend(other.frames);
        self.settled.extend(other.settled);
        self.stop_turns.extend(other.stop_turns);
    }
}

impl HttpResponse {
    fn json(status: u16, value: &impl Serialize) -> Self {
        match serde_json::to_string(value) {
            Ok(body) => HttpResponse {
                status,
                body: Some(body),
                effects: Effects::default(),
            },
            Err(e) => ApiError::Internal(e.to_string()).into(),
        }
    }

    fn with(mut self, effects: Effects) -> Self {
        self.effects = effects;
        self
    }
}

impl From<ApiError> for HttpResponse {
    fn from(e: ApiError) -> Self {
        HttpResponse {
            status: e.status(),
            body: Some(e.body()),
            effects: Effects::default(),
        }
    }
}

/// The effects of a cancellation: stop the turn, publish (the messages
/// closing the calls it left open, then the settlements), wake.
pub fn cancellation_effects(
    session_id: &str,
    stopped: Option<String>,
    settled: Vec<Settlement>,
) -> Effects {
    let ids = settled.iter().map(|s| s.command_id.clone()).collect();
    let mut frames = Vec::new();
    for mut settlement in settled {
        for message in std::mem::take(&mut settlement.appended) {
            if let Ok(message) = RawValue::from_string(message) {
                frames.push((session_id.to_owned(), Frame::Message { message }));
            }
        }
        frames.push((session_id.to_owned(), Frame::Settled { settlement }));
    }
    Effects {
        reconcile: true,
        stop_turns: stopped.into_iter().collect(),
        settled: ids,
        frames,
        ..Effects::default()
    }
}

/// Serves one request; `ext`: the Agent's extensions, if its host runs any.
/// What the host brings to a request besides the store: its extensions and
/// its model policy (`Err`: why its models configuration is unusable).
pub struct Hosted<'a> {
    pub extensions: Option<&'a Extensions>,
    pub models: Result<&'a Policy, &'a str>,
    /// The budgets the host configures (`budget.rs`).
    pub budget: budget::Limits,
}

impl<'a> Hosted<'a> {
    /// A host that states no models (a simulated host, a benchmark): the
    /// routes that set a model answer 503 `host_misconfigured` naming it.
    pub fn without_models(extensions: Option<&'a Extensions>) -> Self {
        Hosted {
            extensions,
            models: Err("this host states no models"),
            budget: budget::Limits::NONE,
        }
    }
}

pub fn handle(ctx: &mut Ctx<'_>, hosted: &Hosted<'_>, req: &HttpRequest) -> HttpResponse {
    route(ctx, hosted, req).unwrap_or_else(HttpResponse::from)
}

fn route(
    ctx: &mut Ctx<'_>,
    hosted: &Hosted<'_>,
    req: &HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let ext = hosted.extensions;
    if req.body.len() > BODY_BYTES_MAX {
        return Err(ApiError::PayloadTooLarge {
            bytes_max: BODY_BYTES_MAX,
        });
    }
    let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    // HEAD is a GET whose body the host drops.
    let method = match req.method.as_str() {
        "HEAD" => "GET",
        other => other,
    };
    match segments.as_slice() {
        ["extensions", rest @ ..] => extension_route(ctx, ext, req, method, None, rest),
        ["sessions", id, "extensions", rest @ ..] => {
            agent::validate_session_id(id)?;
            extension_route(ctx, ext, req, method, Some(id), rest)
        }
        ["inbox"] => match method {
            "GET" => inbox(ctx, ext, req),
            _ => Err(ApiError::MethodNotAllowed("GET")),
        },
        ["usage"] => match method {
            "GET" => usage_ledger(ctx, req),
            _ => Err(ApiError::MethodNotAllowed("GET")),
        },
        ["budget"] => match method {
            "GET" | "PUT" | "DELETE" => budget_route(ctx, &hosted.budget, req, method, None),
            _ => Err(ApiError::MethodNotAllowed("GET, PUT, DELETE")),
        },
        ["sessions"] => match method {
            "GET" => list_sessions(ctx, req),
            "POST" => create_session(ctx, req),
            _ => Err(ApiError::MethodNotAllowed("GET, POST")),
        },
        ["sessions", id, rest @ ..] => {
            agent::validate_session_id(id)?;
            match (rest, method) {
                ([], "GET") => read_session(ctx, ext, req, id),
                ([], "DELETE") => delete_session(ctx, req, id),
                ([], _) => Err(ApiError::MethodNotAllowed("GET, DELETE")),
                (["commands"], "POST") => command(ctx, req, id),
                (["withdraw"], "POST") => withdraw(ctx, req, id),
                (["commands" | "withdraw"], _) => Err(ApiError::MethodNotAllowed("POST")),
                (["settlement"], "GET") => settlement(ctx, req, id),
                (["watch"], "GET") => watch(ctx, ext, req, id),
                (["pending", "latest"], "GET") => latest_pending(ctx, req, id),
                (["branches"], "GET") => branches(ctx, req, id),
                (["model"], "GET") => session_model(ctx, req, id),
                (["model"], "PUT") => set_session_model(ctx, hosted.models, req, id),
                (["model"], "DELETE") => clear_session_model(ctx, hosted.models, req, id),
                (["model"], _) => Err(ApiError::MethodNotAllowed("GET, PUT, DELETE")),
                (["budget"], "GET" | "PUT" | "DELETE") => {
                    budget_route(ctx, &hosted.budget, req, method, Some(id))
                }
                (["budget"], _) => Err(ApiError::MethodNotAllowed("GET, PUT, DELETE")),
                (["settlement" | "watch" | "branches"] | ["pending", "latest"], _) => {
                    Err(ApiError::MethodNotAllowed("GET"))
                }
                _ => Err(ApiError::NotFound),
            }
        }
        _ => Err(ApiError::NotFound),
    }
}

/// A Session's explicit model as the routes answer it: `{model, reasoning?}`,
/// `model` null when none is set.
#[derive(Serialize)]
struct SessionModel {
    model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Reasoning>,
}

impl From<Option<Choice>> for SessionModel {
    fn from(choice: Option<Choice>) -> Self {
        match choice {
            Some(Choice { model, reasoning }) => SessionModel {
                model: Some(model),
                reasoning,
            },
            None => SessionModel {
                model: None,
                reasoning: None,
            },
        }
    }
}

/// `GET /sessions/:id/model`: the Session's explicit model, the first layer
/// its turns resolve (docs/http.md "Models").
fn session_model(ctx: &mut Ctx<'_>, req: &HttpRequest, id: &str) -> Result<HttpResponse, ApiError> {
    Query::parse(&req.query, &[])?;
    if !ctx.store.session_exists(id)? {
        return Err(ApiError::SessionNotFound(id.to_owned()));
    }
    let (session, _) = crate::model_choice::layers(ctx.store.sql(), id)?;
    Ok(HttpResponse::json(200, &SessionModel::from(session)))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SetSessionModel {
    /// `provider/model`.
    model: String,
    #[serde(default)]
    reasoning: Option<Reasoning>,
}

/// `PUT /sessions/:id/model` `{model, reasoning?}`: sets the Session's
/// explicit model, checked against the host's policy as `agents.set_model`
/// is; the next turn resolves it.
fn set_session_model(
    ctx: &mut Ctx<'_>,
    models: Result<&Policy, &str>,
    req: &HttpRequest,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    Query::parse(&req.query, &[])?;
    let SetSessionModel { model, reasoning } = parse_body(&req.body)?;
    store_session_model(ctx, models, id, Some(&Choice { model, reasoning }))
}

/// `DELETE /sessions/:id/model`: clears the Session's explicit model.
fn clear_session_model(
    ctx: &mut Ctx<'_>,
    models: Result<&Policy, &str>,
    req: &HttpRequest,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    Query::parse(&req.query, &[])?;
    store_session_model(ctx, models, id, None)
}

fn store_session_model(
    ctx: &mut Ctx<'_>,
    models: Result<&Policy, &str>,
    id: &str,
    choice: Option<&Choice>,
) -> Result<HttpResponse, ApiError> {
    let policy = models.map_err(|why| ApiError::HostMisconfigured(format!("models: {why}")))?;
    let set = crate::model_choice::set_session(ctx, policy, id, choice).map_err(|e| match e {
        crate::model_choice::SetError::Rejected(why) => ApiError::ModelRejected(why),
        crate::model_choice::SetError::Api(e) => e,
    })?;
    Ok(HttpResponse::json(200, &SessionModel::from(set)))
}

/// The newest pending prompt of the request's principal (or, for an unbound
/// request, of anyone), or `null`.
fn latest_pending(
    ctx: &mut Ctx<'_>,
    req: &HttpRequest,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    Query::parse(&req.query, &[])?;
    let meta = ctx.meta.check(req.meta.as_deref())?;
    Ok(HttpResponse::json(
        200,
        &queue::latest_pending(ctx, id, meta.as_deref())?,
    ))
}

fn delete_session(
    ctx: &mut Ctx<'_>,
    req: &HttpRequest,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    Query::parse(&req.query, &[])?;
    let deleted = agent::delete_session(ctx, id)?;
    Ok(HttpResponse {
        status: 204,
        body: None,
        effects: Effects {
            stop_turns: deleted.running.into_iter().collect(),
            ended_session: Some(id.to_owned()),
            delivery: deleted.staged_delivery,
            ..Effects::default()
        },
    })
}

/// The watch's snapshot; the host turns the answer into the event stream.
fn watch(
    ctx: &mut Ctx<'_>,
    ext: Option<&Extensions>,
    req: &HttpRequest,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    Query::parse(&req.query, &[])?;
    let page = with_projections(ctx, ext, id, read::page(ctx, id, None, PAGE_LIMIT_DEFAULT)?)?;
    Ok(HttpResponse::json(200, &page).with(Effects {
        watch: Some(id.to_owned()),
        ..Effects::default()
    }))
}

fn settlement(ctx: &mut Ctx<'_>, req: &HttpRequest, id: &str) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req.query, &["commandId", "timeoutMs"])?;
    let command_id = query
        .get("commandId")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| ApiError::InvalidQuery("commandId: required".into()))?;
    let timeout_ms = match query.get("timeoutMs") {
        None => 0,
        // Seed: "bounded to 30,000 ms": a longer wait is clamped, not refused.
        Some(v) => match v.parse::<u64>() {
            Ok(n) => n.min(SETTLEMENT_TIMEOUT_MS_MAX),
            Err(_) => {
                return Err(ApiError::InvalidQuery(format!(
                    "timeoutMs: a non-negative integer (waits at most {SETTLEMENT_TIMEOUT_MS_MAX}), got `{v}`"
                )))
            }
        },
    };
    let found = crate::settlement::read(ctx.store, id, command_id)?;
    let park = (found.is_none() && timeout_ms > 0 && !req.waited).then(|| Park {
        command_id: command_id.to_owned(),
        timeout_ms,
    });
    Ok(HttpResponse::json(200, &found).with(Effects {
        park,
        ..Effects::default()
    }))
}

fn list_sessions(ctx: &mut Ctx<'_>, req: &HttpRequest) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req.query, &["limit", "cursor"])?;
    let limit = query.limit(LIST_PAGE_SESSIONS_MAX)?;
    let cursor = query.cursor("cursor")?;
    Ok(HttpResponse::json(
        200,
        &agent::list_sessions(ctx, limit, cursor)?,
    ))
}

/// `GET /sessions/:id/branches?entryId&limit&cursor`: the children of an
/// entry on the Session's paths.
fn branches(ctx: &mut Ctx<'_>, req: &HttpRequest, id: &str) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req.query, &["entryId", "limit", "cursor"])?;
    // `""`: the Session's start, whose children are its first messages (as
    // `after: ""` writes a new one).
    let entry_id = query
        .get("entryId")
        .ok_or_else(|| ApiError::InvalidQuery("entryId: required".into()))?;
    let limit = query.limit(READ_PAGE_MESSAGES_MAX)?;
    let after = query.cursor("cursor")?.unwrap_or(0);
    Ok(HttpResponse::json(
        200,
        &crate::session::branches::children(ctx.store, id, entry_id, after, limit)?,
    ))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CreateSession {
    #[serde(default)]
    session_id: Option<String>,
    /// Fork: the new Session's paths continue into this one's path ending
    /// at the entry.
    #[serde(default)]
    from: Option<agent::ForkFrom>,
}

fn create_session(ctx: &mut Ctx<'_>, req: &HttpRequest) -> Result<HttpResponse, ApiError> {
    Query::parse(&req.query, &[])?;
    // An empty body means "no options", as for `curl -X POST`.
    let body: CreateSession = if req.body.iter().all(u8::is_ascii_whitespace) {
        CreateSession {
            session_id: None,
            from: None,
        }
    } else {
        parse_body(&req.body)?
    };
    let session_id = match &body.from {
        Some(from) => agent::fork_session(ctx, body.session_id.as_deref(), from)?,
        None => agent::create_session(ctx, body.session_id.as_deref())?,
    };
    Ok(HttpResponse::json(
        201,
        &serde_json::json!({ "sessionId": session_id }),
    ))
}

fn read_session(
    ctx: &mut Ctx<'_>,
    ext: Option<&Extensions>,
    req: &HttpRequest,
    id: &str,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req.query, &["before", "limit"])?;
    let limit = query.limit(READ_PAGE_MESSAGES_MAX)?;
    let before = query.cursor("before")?;
    let page = read::page(ctx, id, before, limit)?;
    Ok(HttpResponse::json(
        200,
        &with_projections(ctx, ext, id, page)?,
    ))
}

/// A Session page with its extensions' Session projections (`extensions`,
/// by extension id; an extension publishing none is absent) and its open
/// attention (`attention`, qualified items of the counted owners, newest
/// first), when the Agent runs extensions. The projections are spliced
/// into the page's text, so its messages are served as stored, never
/// parsed again.
pub fn with_projections(
    ctx: &Ctx<'_>,
    ext: Option<&Extensions>,
    id: &str,
    page: impl Serialize,
) -> Result<Box<RawValue>, ApiError> {
    let internal = |e: serde_json::Error| ApiError::Internal(e.to_string());
    let text = serde_json::to_string(&page).map_err(internal)?;
    let Some(ext) = ext.filter(|ext| !ext.roster().is_empty()) else {
        return RawValue::from_string(text).map_err(internal);
    };
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Projected<P, H, A> {
        extensions: P,
        #[serde(skip_serializing_if = "Option::is_none")]
        extension_history: Option<H>,
        attention: A,
    }
    let (projections, _failed) = ext.session_projections(ctx.store, id);
    let histories = ext.session_histories(ctx.store, id)?;
    let owners = ext.attention_owners(ctx.store)?;
    let items = attention::of_session(
        ctx.store.sql(),
        id,
        &owners,
        crate::limits::ATTENTION_PER_SESSION_MAX,
    )?;
    let extra = serde_json::to_string(&Projected {
        extensions: projections,
        extension_history: (!histories.is_empty()).then_some(histories),
        attention: items,
    })
    .map_err(internal)?;
    // Both are JSON objects: the page's members, then the projections'.
    debug_assert!(text.ends_with('}') && extra.starts_with('{'));
    let joined = match text.strip_suffix('}') {
        Some(members) if members.len() > 1 => format!("{members},{}", &extra[1..]),
        _ => extra,
    };
    RawValue::from_string(joined).map_err(internal)
}

/// `GET /inbox`: the Agent's Sessions by what they need
/// (`attention::inbox`).
fn inbox(
    ctx: &mut Ctx<'_>,
    ext: Option<&Extensions>,
    req: &HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req.query, &["limit", "cursor"])?;
    let limit = query.limit(INBOX_PAGE_SESSIONS_MAX)?;
    let cursor = match query.get("cursor") {
        None => None,
        Some(v) => Some(attention::InboxCursor::parse(v).ok_or_else(|| {
            ApiError::InvalidQuery(format!("cursor: not a cursor returned by this API: `{v}`"))
        })?),
    };
    let owners = match ext {
        Some(ext) => ext.attention_owners(ctx.store)?,
        None => Vec::new(),
    };
    Ok(HttpResponse::json(
        200,
        &attention::inbox(ctx.store.sql(), &owners, limit, cursor.as_ref())?,
    ))
}

/// `GET|PUT|DELETE /budget` (`session`: `None`) and
/// `/sessions/:id/budget`: a token budget (`budget.rs`), read, set over
/// the host's configuration, or cleared back to it. A change wakes the
/// claim pass, which resumes the turns it now covers.
fn budget_route(
    ctx: &mut Ctx<'_>,
    config: &budget::Limits,
    req: &HttpRequest,
    method: &str,
    session: Option<&str>,
) -> Result<HttpResponse, ApiError> {
    Query::parse(&req.query, &[])?;
    if let Some(id) = session {
        if !ctx.store.session_exists(id)? {
            return Err(ApiError::SessionNotFound(id.to_owned()));
        }
    }
    let (sql, now_ms) = (ctx.store.sql(), ctx.now_ms);
    let changed = match method {
        "PUT" => {
            let SetBudget { tokens } = parse_body(&req.body)?;
            let tokens = tokens
                .as_u64()
                .filter(|n| *n <= BUDGET_TOKENS_MAX)
                .ok_or_else(|| {
                    ApiError::InvalidRequest(format!(
                        "tokens: an integer in 0..={BUDGET_TOKENS_MAX}, not {tokens}"
                    ))
                })?;
            budget::set(sql, session, Some(tokens), now_ms)?;
            true
        }
        "DELETE" => {
            budget::set(sql, session, None, now_ms)?;
            true
        }
        _ => false,
    };
    let view = match session {
        Some(id) => budget::session_view(sql, config, id, now_ms)?,
        None => budget::agent_view(sql, config, now_ms)?,
    };
    Ok(HttpResponse::json(200, &view).with(Effects {
        reconcile: changed,
        ..Effects::default()
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetBudget {
    /// An integer (checked here, to name the bound).
    tokens: serde_json::Value,
}

/// `GET /usage`: the Agent's usage ledger (`usage::ledger`).
fn usage_ledger(ctx: &mut Ctx<'_>, req: &HttpRequest) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(
        &req.query,
        &["from", "to", "sessionId", "groupBy", "limit", "cursor"],
    )?;
    let at = |key: &str| match query.get(key) {
        None => Ok(None),
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(Some(n)),
            _ => Err(ApiError::InvalidQuery(format!(
                "{key}: ms since the epoch, a non-negative integer, got `{v}`"
            ))),
        },
    };
    let (from, to) = (at("from")?, at("to")?);
    if let (Some(from), Some(to)) = (from, to) {
        if to < from {
            return Err(ApiError::InvalidQuery(format!(
                "to: before from ({to} < {from})"
            )));
        }
    }
    let session_id = match query.get("sessionId") {
        Some(v) if !crate::text::is_id(v, SESSION_ID_BYTES_MAX) => {
            return Err(ApiError::InvalidQuery(format!(
                "sessionId: 1..={SESSION_ID_BYTES_MAX} bytes of [A-Za-z0-9._:-], got `{}`",
                crate::text::shorten(v)
            )));
        }
        v => v.map(str::to_owned),
    };
    let group_by = match query.get("groupBy") {
        None => None,
        Some(v) => Some(usage::GroupBy::parse(v).ok_or_else(|| {
            ApiError::InvalidQuery(format!("groupBy: one of session, model, day, got `{v}`"))
        })?),
    };
    let cursor = match query.get("cursor") {
        None => None,
        Some(v) => Some(usage::key_of(v).ok_or_else(|| {
            ApiError::InvalidQuery(format!("cursor: not a cursor returned by this API: `{v}`"))
        })?),
    };
    if cursor.is_some() && group_by.is_none() {
        return Err(ApiError::InvalidQuery(
            "cursor: pages groups, so it needs groupBy".into(),
        ));
    }
    let query = usage::Query {
        from,
        to,
        session_id,
        group_by,
        limit: query.limit(USAGE_PAGE_GROUPS_MAX)?,
        cursor,
    };
    Ok(HttpResponse::json(
        200,
        &usage::ledger(ctx.store.sql(), &query)?,
    ))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExtensionCommand {
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    input: Option<serde_json::Value>,
}

/// The effects of prompts extensions sent: publish, wake, fresh turns.
pub fn sent_effects(sent: &[Sent<admission::Admitted>]) -> Effects {
    let mut effects = Effects::default();
    for s in sent {
        effects.add(admission_effects(&s.session_id, &s.request_id, &s.admitted));
    }
    effects
}

/// The effects of an extension command: its sends', and a reconciliation
/// when it moved timers (so the alarm covers the new deadline).
pub fn invoked_effects(invoked: &Invoked<admission::Admitted>) -> Effects {
    let mut effects = sent_effects(&invoked.sent);
    effects.reconcile |= invoked.rearm;
    effects
}

/// `/extensions...` and `/sessions/:id/extensions...`: the roster's status
/// and its commands.
fn extension_route(
    ctx: &mut Ctx<'_>,
    ext: Option<&Extensions>,
    req: &HttpRequest,
    method: &str,
    session_id: Option<&str>,
    rest: &[&str],
) -> Result<HttpResponse, ApiError> {
    let none = Extensions::none();
    let ext = ext.unwrap_or(&none);
    match (session_id, rest, method) {
        (None, [], "GET") => {
            Query::parse(&req.query, &[])?;
            let list = ext.statuses(ctx.store)?;
            Ok(HttpResponse::json(
                200,
                &serde_json::json!({ "extensions": list }),
            ))
        }
        (None, [id], "GET") => {
            Query::parse(&req.query, &[])?;
            Ok(HttpResponse::json(200, &ext.status(ctx.store, id)?))
        }
        (_, [id, "commands", name], "POST") => {
            Query::parse(&req.query, &[])?;
            let body: ExtensionCommand = if req.body.iter().all(u8::is_ascii_whitespace) {
                ExtensionCommand {
                    request_id: None,
                    input: None,
                }
            } else {
                parse_body(&req.body)?
            };
            if let Some(r) = &body.request_id {
                validate_request_id(r)?;
            }
            let invoked = ext.command(
                ctx,
                &admission::ExtensionSends,
                Invocation {
                    extension: id,
                    command: name,
                    session_id,
                    request_id: body.request_id.as_deref(),
                    input: body.input.unwrap_or(serde_json::Value::Null),
                },
            )?;
            Ok(
                HttpResponse::json(200, &serde_json::json!({ "result": invoked.result }))
                    .with(invoked_effects(&invoked)),
            )
        }
        (None, [] | [_], _) => Err(ApiError::MethodNotAllowed("GET")),
        (_, [_, "commands", _], _) => Err(ApiError::MethodNotAllowed("POST")),
        _ => Err(ApiError::NotFound),
    }
}

fn command(ctx: &mut Ctx<'_>, req: &HttpRequest, id: &str) -> Result<HttpResponse, ApiError> {
    Query::parse(&req.query, &[])?;
    let command = command::parse(&req.body)?;
    let meta = ctx.meta.check(req.meta.as_deref())?;
    let meta = meta.as_deref();
    match command {
        Command::Prompt(p) => {
            let admitted = admission::admit_prompt(ctx, id, &p, meta)?;
            let effects = admission_effects(id, &p.request_id, &admitted);
            Ok(HttpResponse::json(200, &admitted.receipt).with(effects))
        }
        Command::Operator(o) => {
            let admitted = admission::admit_operator(ctx, id, &o.request_id, &o.text, meta)?;
            let effects = admission_effects(id, &o.request_id, &admitted);
            Ok(HttpResponse::json(200, &admitted.receipt).with(effects))
        }
        Command::Retry(r) => {
            let admitted = admission::admit_retry(ctx, id, &r, meta)?;
            let effects = admission_effects(id, &r.request_id, &admitted);
            Ok(HttpResponse::json(200, &admitted.receipt).with(effects))
        }
        Command::Select(s) => {
            let admitted = admission::admit_select(ctx, id, &s, meta)?;
            let effects = admission_effects(id, &s.request_id, &admitted);
            Ok(HttpResponse::json(200, &admitted.receipt).with(effects))
        }
        Command::Compact(c) => {
            if !cfg!(feature = "compaction") {
                return Err(ApiError::HostMisconfigured(
                    crate::run::compaction::UNAVAILABLE.into(),
                ));
            }
            let admitted = admission::admit_compact(ctx, id, &c, meta)?;
            let effects = admission_effects(id, &c.request_id, &admitted);
            Ok(HttpResponse::json(200, &admitted.receipt).with(effects))
        }
        Command::Cancel(command::Cancel {
            command_id,
            only_if_pending,
        }) => {
            let c = cancel::cancel(ctx, id, &command_id, only_if_pending, meta)?;
            let effects = cancellation_effects(id, c.stopped_turn, c.settled);
            Ok(HttpResponse::json(200, &c.outcome).with(effects))
        }
        Command::Abort(_) => {
            let c = cancel::abort(ctx, id, meta)?;
            let effects = cancellation_effects(id, c.stopped_turn, c.settled);
            Ok(HttpResponse::json(200, &c.outcome).with(effects))
        }
    }
}

/// Effects of an admission (also of its replay, which is harmless): publish
/// it and the message it appended; for a prompt that started its turn at
/// once, wake the run loop and mark the turn fresh. A prompt behind a
/// running turn starts when that ends, a steer joins at its next step: no
/// wake needed.
pub fn admission_effects(
    session_id: &str,
    request_id: &str,
    admitted: &admission::Admitted,
) -> Effects {
    let command_id = admitted.receipt.command_id.clone();
    let mut frames = vec![(
        session_id.to_owned(),
        Frame::Admitted {
            command_id: command_id.clone(),
            request_id: Some(request_id.to_owned()),
        },
    )];
    if let Some(entry_id) = admitted.branch.clone() {
        frames.push((session_id.to_owned(), Frame::Branch { entry_id }));
    }
    if let Some(message) = admitted
        .message
        .as_ref()
        .and_then(|m| RawValue::from_string(m.clone()).ok())
    {
        frames.push((session_id.to_owned(), Frame::Message { message }));
    }
    Effects {
        reconcile: admitted.claimed,
        fresh_turns: admitted
            .claimed
            .then(|| (command_id, session_id.to_owned()))
            .into_iter()
            .collect(),
        frames,
        ..Effects::default()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Withdraw {
    request_id: String,
}

fn withdraw(ctx: &mut Ctx<'_>, req: &HttpRequest, id: &str) -> Result<HttpResponse, ApiError> {
    Query::parse(&req.query, &[])?;
    let body: Withdraw = parse_body(&req.body)?;
    validate_request_id(&body.request_id)?;
    Ok(HttpResponse::json(
        200,
        &admission::withdraw(ctx, id, &body.request_id)?,
    ))
}

/// A parsed query string with a closed set of keys.
struct Query<'a> {
    pairs: Vec<(&'a str, String)>,
}

impl<'a> Query<'a> {
    fn parse(raw: &'a str, allowed: &[&str]) -> Result<Self, ApiError> {
        let mut pairs = Vec::new();
        for part in raw.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            if !allowed.contains(&key) {
                return Err(ApiError::InvalidQuery(format!(
                    "unknown query parameter `{}`; allowed: {}",
                    percent_decode(key).unwrap_or_default(),
                    allowed.join(", ")
                )));
            }
            let value = percent_decode(value)
                .ok_or_else(|| ApiError::InvalidQuery(format!("{key}: bad percent-encoding")))?;
            if pairs.iter().any(|(k, _)| *k == key) {
                return Err(ApiError::InvalidQuery(format!(
                    "{key}: given more than once"
                )));
            }
            pairs.push((key, value));
        }
        Ok(Query { pairs })
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    fn limit(&self, max: usize) -> Result<usize, ApiError> {
        match self.get("limit") {
            None => Ok(PAGE_LIMIT_DEFAULT.min(max)),
            Some(v) => match v.parse::<usize>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(ApiError::InvalidQuery(format!(
                    "limit: an integer in 1..={max}, got `{v}`"
                ))),
            },
        }
    }

    fn cursor(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.parse::<i64>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(ApiError::InvalidQuery(format!(
                    "{key}: not a cursor returned by this API: `{v}`"
                ))),
            },
        }
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}
