//! The browser bridge (seed knapsack: `Knapsack.ui`), sans-IO: the App open
//! in a Session's browser lends each run of that Session the module `ui`
//! (`discover` lists the App's live commands, `execute` runs one). Every
//! decision lives here; `host/ui.rs` only moves bytes (the event streams,
//! the waiting calls, the routes' bodies).
//!
//! ```text
//! run:     borrow(session, head) ... ask(request) ... give_back(head)
//! browser: events (a stream; each waiting request)  -> claim(requestId)
//!          -> claimId  -> result(requestId, claimId, result | error)
//! ```
//!
//! One browser host per Session, opened by a browser's event stream (for a
//! stored Session) or by a run's borrow, dropped when neither holds it.
//! A request is answered once, and only by a result carrying the `claimId`
//! its claim was given. `close` ends every stream and fails every waiting call;
//! afterwards every route answers 410 and no run can borrow.
//!
//! Invariants: live state only (nothing here is a durable fact, nothing
//! durable is rebuilt from it); every collection is bounded by
//! `limits.rs`; a request has at most one claim and one answer.

use crate::capability::{
    check_payload, Access, CapabilityError, Module, OperationSpec, PayloadError,
};
use crate::ctx::IdSource;
use crate::error::ApiError;
use crate::limits::{
    UI_APP_ID_BYTES_MAX, UI_CLAIM_BODY_BYTES_MAX, UI_COMMANDS_MAX, UI_COMMAND_NAME_BYTES_MAX,
    UI_ERROR_BYTES_MAX, UI_REQUESTS_PER_SESSION_MAX, UI_RESULT_BODY_BYTES_MAX, UI_STREAMS_MAX,
    UI_STREAMS_PER_SESSION_MAX, UI_WAIT_PERCENT_OF_TOOL_TIMEOUT,
};
use serde::Deserialize;
use serde_json::{json, Value};

#[cfg(test)]
mod tests;

/// The module a run borrows.
pub const MODULE_ID: &str = crate::capability::backend::own::UI;

/// The host's `tools().ui` as the shim hands it over.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Names the App (in the operations' descriptions).
    pub id: String,
    /// The host supplies `hasSession(sessionId)`; otherwise a stream opens
    /// for a Session stored in this Agent.
    #[serde(default)]
    pub has_session: bool,
    /// `discover` and `execute` are also direct tools (`ui_discover`,
    /// `ui_execute`), so a host without `execute` offers the bridge.
    #[serde(default)]
    pub direct: bool,
}

/// The App's id is empty or too long.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ui.id must be a non-empty string of at most {UI_APP_ID_BYTES_MAX} bytes")]
pub struct IdError;

/// A command name is empty or too long.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a command name is a non-empty string of at most {UI_COMMAND_NAME_BYTES_MAX} bytes")]
pub struct CommandNameError;

/// Why a `ui` call failed; its text is what the model sees. `label` is
/// the operation (`ui.discover`, `ui.execute`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("ui has no operation `{0}`")]
    NoOperation(String),
    #[error("ui.execute: {0}")]
    CommandName(CommandNameError),
    #[error("ui.execute: `input` must be an object")]
    InputNotObject,
    /// The bridge was closed before the call (why it was).
    #[error("{label}: the browser bridge is closed ({why})")]
    Closed { label: &'static str, why: String },
    #[error("{label}: this run holds no browser bridge (it ended)")]
    Ended { label: &'static str },
    #[error(
        "{label}: {UI_REQUESTS_PER_SESSION_MAX} calls already wait for this Session's \
         browser, the most at once"
    )]
    Full { label: &'static str },
    /// The App's own error text (bounded).
    #[error("{label}: the App failed: {error}")]
    AppFailed { label: &'static str, error: String },
    #[error("{label}: the browser's result was refused: {why}")]
    Refused {
        label: &'static str,
        why: ResultError,
    },
    #[error(
        "{label}: the browser claimed the call but sent no result within {timeout_ms} ms; \
         it may have run"
    )]
    NoResult {
        label: &'static str,
        timeout_ms: u64,
    },
    #[error("{label}: no browser is connected to this Session")]
    NoBrowser { label: &'static str },
    #[error("{label}: no browser claimed the call within {timeout_ms} ms")]
    Unclaimed {
        label: &'static str,
        timeout_ms: u64,
    },
    /// The bridge was closed while the call waited (why it was).
    #[error("the browser bridge was closed ({0})")]
    BridgeClosed(String),
}

/// Why a browser's result is refused (the browser is answered 400, the
/// call ends with [`CallError::Refused`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResultError {
    #[error("the result: {0}")]
    Payload(PayloadError),
    /// serde's message.
    #[error("a discover result is [{{name, description?, inputSchema?}}]: {0}")]
    NotCommands(String),
    /// How many commands.
    #[error("a discover result lists {0} commands; at most {UI_COMMANDS_MAX}")]
    TooMany(usize),
    #[error("commands[{0}].name: {1}")]
    Name(usize, CommandNameError),
    #[error("commands[{at}].name: `{name}` is listed twice")]
    Twice { at: usize, name: String },
    #[error("commands[{0}].inputSchema must be an object")]
    Schema(usize),
}

impl Config {
    /// Refuses an id that is empty or longer than `UI_APP_ID_BYTES_MAX`.
    pub fn check(&self) -> Result<(), IdError> {
        if self.id.is_empty() || self.id.len() > UI_APP_ID_BYTES_MAX {
            return Err(IdError);
        }
        Ok(())
    }

    /// The module `ui`: `discover` (a read, replay-safe) and `execute`
    /// (unsafe to replay: the App's command may change what the person
    /// sees or has).
    pub fn module(&self) -> Result<Module, CapabilityError> {
        let app = &self.id;
        let spec = |name: &str, description: String, schema: Value, write: bool| OperationSpec {
            name: name.to_owned(),
            description,
            input_schema: schema,
            access: if write { Access::Write } else { Access::Read },
            confirm: false,
            replay_safe: !write,
        };
        let discover = spec(
            "discover",
            format!(
                "Lists the live commands of the App `{app}` open in this Session's browser: \
                 [{{name, description, inputSchema}}]. Fails when no browser answers."
            ),
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
            false,
        );
        let execute = spec(
            "execute",
            format!(
                "Runs one command of the App `{app}` open in this Session's browser (a name \
                 ui.discover listed) with its input; answers the command's result."
            ),
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "the command's name"},
                    "input": {"type": "object", "description": "the command's input"}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
            true,
        );
        let module = crate::capability::ModuleSpec {
            id: MODULE_ID.to_owned(),
            operations: vec![discover, execute],
        };
        let module = Module::from_spec(module)?;
        Ok(if self.direct {
            module.offered_direct()
        } else {
            module
        })
    }
}

/// How long a `ui` call waits for the browser under the tool timeout.
pub fn wait_ms(tool_timeout_ms: u64) -> u64 {
    tool_timeout_ms.saturating_mul(UI_WAIT_PERCENT_OF_TOOL_TIMEOUT) / 100
}

/// The three routes, under `/browser/sessions/<sessionId>/browser/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Events,
    Claims,
    Results,
}

impl Route {
    /// The route of a DO-relative path and its Session id (as it appears in
    /// the path), or `None` for a path that is not the bridge's.
    pub fn parse(path: &str) -> Option<(&str, Route)> {
        let rest = path.strip_prefix("/browser/sessions/")?;
        let (session, tail) = rest.split_once('/')?;
        let route = match tail.trim_end_matches('/') {
            "browser/events" => Route::Events,
            "browser/claims" => Route::Claims,
            "browser/results" => Route::Results,
            _ => return None,
        };
        Some((session, route))
    }

    /// Refuses another method (405), a query string and a malformed
    /// Session id (400).
    pub fn check(self, session: &str, method: &str, query: &str) -> Result<(), ApiError> {
        if method != self.method() {
            return Err(ApiError::MethodNotAllowed(self.method()));
        }
        if !query.is_empty() {
            return Err(ApiError::InvalidQuery(
                "the browser bridge's routes take no query string".into(),
            ));
        }
        crate::agent::validate_session_id(session)
    }

    /// The one method served.
    pub fn method(self) -> &'static str {
        match self {
            Route::Events => "GET",
            Route::Claims | Route::Results => "POST",
        }
    }

    /// Refuses a body past this route's bound (413).
    pub fn check_body(self, bytes: usize) -> Result<(), ApiError> {
        let bytes_max = match self {
            Route::Events => 0,
            Route::Claims => UI_CLAIM_BODY_BYTES_MAX,
            Route::Results => UI_RESULT_BODY_BYTES_MAX,
        };
        if bytes > bytes_max {
            return Err(ApiError::PayloadTooLarge { bytes_max });
        }
        Ok(())
    }
}

/// What a run asks the browser.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    Discover,
    Execute { name: String, input: Value },
}

impl Ask {
    /// The ask of a `ui` operation's checked arguments.
    pub fn of(operation: &str, args: &Value) -> Result<Ask, CallError> {
        match operation {
            "discover" => Ok(Ask::Discover),
            "execute" => {
                let name = args.get("name").and_then(Value::as_str).unwrap_or("");
                check_command_name(name).map_err(CallError::CommandName)?;
                let input = args.get("input").cloned().unwrap_or_else(|| json!({}));
                if !input.is_object() {
                    return Err(CallError::InputNotObject);
                }
                Ok(Ask::Execute {
                    name: name.to_owned(),
                    input,
                })
            }
            other => Err(CallError::NoOperation(other.to_owned())),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Ask::Discover => "ui.discover",
            Ask::Execute { .. } => "ui.execute",
        }
    }
}

fn check_command_name(name: &str) -> Result<(), CommandNameError> {
    if name.is_empty() || name.len() > UI_COMMAND_NAME_BYTES_MAX {
        return Err(CommandNameError);
    }
    Ok(())
}

/// One request waiting for the browser.
#[derive(Debug)]
struct Pending {
    id: String,
    head: String,
    ask: Ask,
    claim: Option<String>,
}

impl Pending {
    /// The `request` event the browser receives.
    fn event(&self) -> Value {
        match &self.ask {
            Ask::Discover => json!({"requestId": self.id, "operation": "discover"}),
            Ask::Execute { name, input } => json!({
                "requestId": self.id, "operation": "execute", "name": name, "input": input
            }),
        }
    }
}

/// One Session's browser host.
#[derive(Debug, Default)]
struct SessionHost {
    streams: usize,
    runs: usize,
    requests: Vec<Pending>,
}

/// An event for a Session's streams: `(name, data as compact JSON)`.
pub type Event = (&'static str, String);

/// The bridge's live state in one Agent instance.
#[derive(Debug, Default)]
pub struct Bridge {
    /// Why it was closed: every route answers 410, no run borrows.
    closed: Option<String>,
    /// By Session. Lists, not maps: they are short (bounded by the streams
    /// and the live runs), and a map of these types would add its own
    /// rebalancing code to the wasm.
    hosts: Vec<(String, SessionHost)>,
    /// Live runs that borrowed the module, by head: their Session.
    runs: Vec<(String, String)>,
}

/// A result the browser posted for its claim: the request it answers (now
/// removed) and the outcome for the waiting call.
#[derive(Debug, PartialEq)]
pub struct Answered {
    pub request_id: String,
    pub outcome: Result<Value, CallError>,
}

impl Answered {
    /// Why the result itself was refused (over the payload bounds, a
    /// `discover` answer that is no command list): the call ends with that
    /// error and the browser is answered 400. (The App's own error is no
    /// refusal of the result.)
    pub fn refused(&self) -> Option<&ResultError> {
        match &self.outcome {
            Err(CallError::Refused { why, .. }) => Some(why),
            _ => None,
        }
    }

    /// The browser's answer: `{accepted: true}`, or 400 naming why.
    pub fn response(&self) -> Result<Value, ApiError> {
        match self.refused() {
            Some(why) => Err(ApiError::InvalidRequest(why.to_string())),
            None => Ok(json!({"requestId": self.request_id, "accepted": true})),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClaimBody {
    request_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResultBody {
    request_id: String,
    claim_id: String,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<String>,
}

/// One command of the App, as `discover` answers it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Command {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    input_schema: Option<Value>,
}

fn gone(why: &str) -> ApiError {
    ApiError::UiClosed(why.to_owned())
}

impl Bridge {
    /// A browser opens an event stream of `session` (`stored`: the host's
    /// `hasSession`). Answers the events to send first: every request
    /// waiting unclaimed.
    pub fn open_stream(&mut self, session: &str, stored: bool) -> Result<Vec<Event>, ApiError> {
        if let Some(why) = &self.closed {
            return Err(gone(why));
        }
        if !stored {
            return Err(ApiError::SessionNotFound(session.to_owned()));
        }
        let total: usize = self.hosts.iter().map(|(_, h)| h.streams).sum();
        let here = self.host_mut(session).map_or(0, |h| h.streams);
        if total >= UI_STREAMS_MAX || here >= UI_STREAMS_PER_SESSION_MAX {
            return Err(ApiError::TooManyObservers);
        }
        let host = self.host_or_new(session);
        host.streams += 1;
        Ok(host
            .requests
            .iter()
            .filter(|r| r.claim.is_none())
            .map(|r| ("request", r.event().to_string()))
            .collect())
    }

    /// A stream of `session` ended (the browser went away, or `close`).
    pub fn close_stream(&mut self, session: &str) {
        if let Some(host) = self.host_mut(session) {
            host.streams = host.streams.saturating_sub(1);
        }
        self.drop_if_unheld(session);
    }

    /// The run headed by `head` borrows the module at its first tool
    /// offer (later offers keep the borrow). Once closed nothing is lent:
    /// the run's calls fail saying so ([`Bridge::ask`]).
    pub fn borrow(&mut self, session: &str, head: &str) {
        if self.closed.is_some() || self.run_session(head).is_some() {
            return;
        }
        self.runs.push((head.to_owned(), session.to_owned()));
        self.host_or_new(session).runs += 1;
    }

    /// The run ended: it gives the module back. Answers its Session and
    /// its requests still waiting (their calls are over; tell the browser
    /// with [`cancelled`]).
    pub fn give_back(&mut self, head: &str) -> Option<(String, Vec<String>)> {
        let at = self.runs.iter().position(|(h, _)| h == head)?;
        let (_, session) = self.runs.swap_remove(at);
        let mut withdrawn = Vec::new();
        if let Some(host) = self.host_mut(&session) {
            host.runs = host.runs.saturating_sub(1);
            host.requests.retain(|r| {
                let keep = r.head != head;
                if !keep {
                    withdrawn.push(r.id.clone());
                }
                keep
            });
        }
        self.drop_if_unheld(&session);
        Some((session, withdrawn))
    }

    /// A call of the run headed by `head` asks the browser: the request
    /// (its id from `ids`) and the event announcing it. Refused when the
    /// run holds no borrow (closed at its first offer, or since), or the
    /// Session has `UI_REQUESTS_PER_SESSION_MAX` waiting.
    pub fn ask(
        &mut self,
        head: &str,
        ask: Ask,
        ids: &mut dyn IdSource,
    ) -> Result<(String, Event), CallError> {
        let label = ask.label();
        if let Some(why) = &self.closed {
            return Err(CallError::Closed {
                label,
                why: why.clone(),
            });
        }
        let Some(session) = self.run_session(head).map(str::to_owned) else {
            return Err(CallError::Ended { label });
        };
        let host = self.host_or_new(&session);
        if host.requests.len() >= UI_REQUESTS_PER_SESSION_MAX {
            return Err(CallError::Full { label });
        }
        let pending = Pending {
            id: ids.next_id("uir_"),
            head: head.to_owned(),
            ask,
            claim: None,
        };
        let id = pending.id.clone();
        let event = ("request", pending.event().to_string());
        host.requests.push(pending);
        Ok((id, event))
    }

    /// The call waiting on request `request_id` of `session` ended without
    /// an answer (timed out or stopped): the request is withdrawn. Answers
    /// why, for the model (`None` when it was answered meanwhile), and the
    /// event withdrawing it.
    pub fn abandon(
        &mut self,
        session: &str,
        request_id: &str,
        timeout_ms: u64,
    ) -> Option<(CallError, Event)> {
        let host = self.host_mut(session)?;
        let at = host.requests.iter().position(|r| r.id == request_id)?;
        let request = host.requests.remove(at);
        let label = request.ask.label();
        let why = match (&request.claim, host.streams) {
            (Some(_), _) => CallError::NoResult { label, timeout_ms },
            (None, 0) => CallError::NoBrowser { label },
            (None, _) => CallError::Unclaimed { label, timeout_ms },
        };
        Some((why, cancelled(request_id)))
    }

    /// Whether request `request_id` of `session` waits unclaimed with no
    /// browser stream open on the Session: no browser can answer it now.
    pub fn unattended(&self, session: &str, request_id: &str) -> bool {
        self.hosts
            .iter()
            .find(|(s, _)| s == session)
            .is_some_and(|(_, host)| {
                host.streams == 0
                    && host
                        .requests
                        .iter()
                        .any(|r| r.id == request_id && r.claim.is_none())
            })
    }

    /// `POST …/claims` `{requestId}`: the browser claims a waiting request
    /// before it runs it. Answers `{requestId, claimId}`; a request
    /// claimed already is refused (409), an unknown one 404.
    pub fn claim(
        &mut self,
        session: &str,
        body: &[u8],
        ids: &mut dyn IdSource,
    ) -> Result<Value, ApiError> {
        if let Some(why) = &self.closed {
            return Err(gone(why));
        }
        let body: ClaimBody = decode(body)?;
        let request = self.request(session, &body.request_id)?;
        if request.claim.is_some() {
            return Err(ApiError::UiClaimed(body.request_id));
        }
        let claim_id = ids.next_id("uic_");
        request.claim = Some(claim_id.clone());
        Ok(json!({"requestId": body.request_id, "claimId": claim_id}))
    }

    /// `POST …/results` `{requestId, claimId, result | error}`: taken only
    /// for a claimed request with its own claim (409 otherwise). A result
    /// over the payload bounds, or a `discover` answer that is no command
    /// list, ends the call with that error ([`Answered::refused`]).
    pub fn result(&mut self, session: &str, body: &[u8]) -> Result<Answered, ApiError> {
        if let Some(why) = &self.closed {
            return Err(gone(why));
        }
        let body: ResultBody = decode(body)?;
        let outcome = match (body.result, body.error) {
            (Some(result), None) => Ok(result),
            (None, Some(mut error)) => {
                crate::text::truncate(&mut error, UI_ERROR_BYTES_MAX);
                Err(error)
            }
            _ => {
                return Err(ApiError::InvalidRequest(
                    "a result has exactly one of `result` and `error`".to_owned(),
                ))
            }
        };
        // The claim names its request: a claim of another request is not
        // this one's.
        let owner = self.host_mut(session).and_then(|host| {
            host.requests
                .iter()
                .find(|r| r.claim.as_deref() == Some(body.claim_id.as_str()))
                .map(|r| r.id.clone())
        });
        let request = self.request(session, &body.request_id)?;
        match (&request.claim, owner) {
            (_, Some(owner)) if owner != body.request_id => {
                return Err(ApiError::UiOtherRequest {
                    claim: body.claim_id,
                    owner,
                    request: body.request_id,
                })
            }
            (None, _) => return Err(ApiError::UiNotClaimed(body.request_id)),
            (Some(_), None) => {
                return Err(ApiError::UiWrongClaim {
                    claim: body.claim_id,
                    request: body.request_id,
                })
            }
            (Some(_), Some(_)) => {}
        }
        let label = request.ask.label();
        let outcome = match (&request.ask, outcome) {
            (_, Err(error)) => Err(CallError::AppFailed { label, error }),
            (ask, Ok(value)) => {
                check_result(ask, value).map_err(|why| CallError::Refused { label, why })
            }
        };
        if let Some(host) = self.host_mut(session) {
            host.requests.retain(|r| r.id != body.request_id);
        }
        Ok(Answered {
            request_id: body.request_id,
            outcome,
        })
    }

    /// Closes the bridge: every route answers 410 from now on and no run
    /// borrows; no stream is counted any more (the host ends them all).
    /// Answers the waiting requests, whose calls fail.
    pub fn close(&mut self, why: &str) -> Vec<String> {
        if self.closed.is_none() {
            self.closed = Some(why.to_owned());
        }
        let requests = self
            .hosts
            .iter_mut()
            .flat_map(|(_, h)| h.requests.drain(..).map(|r| r.id))
            .collect();
        let runs = &self.runs;
        self.hosts
            .retain(|(s, _)| runs.iter().any(|(_, session)| session == s));
        for (_, host) in &mut self.hosts {
            host.streams = 0;
        }
        requests
    }

    /// Whether `session` has a browser host now ("dropped when neither
    /// holds it").
    #[cfg(test)]
    pub fn holds(&self, session: &str) -> bool {
        self.hosts.iter().any(|(s, _)| s == session)
    }

    fn host_mut(&mut self, session: &str) -> Option<&mut SessionHost> {
        self.hosts
            .iter_mut()
            .find(|(s, _)| s == session)
            .map(|(_, h)| h)
    }

    fn host_or_new(&mut self, session: &str) -> &mut SessionHost {
        let at = match self.hosts.iter().position(|(s, _)| s == session) {
            Some(at) => at,
            None => {
                self.hosts
                    .push((session.to_owned(), SessionHost::default()));
                self.hosts.len() - 1
            }
        };
        &mut self.hosts[at].1
    }

    /// The Session of the live run headed by `head`.
    fn run_session(&self, head: &str) -> Option<&str> {
        self.runs
            .iter()
            .find(|(h, _)| h == head)
            .map(|(_, s)| s.as_str())
    }

    fn request(&mut self, session: &str, request_id: &str) -> Result<&mut Pending, ApiError> {
        self.host_mut(session)
            .and_then(|h| h.requests.iter_mut().find(|r| r.id == request_id))
            .ok_or_else(|| ApiError::UiRequestNotFound(request_id.to_owned()))
    }

    fn drop_if_unheld(&mut self, session: &str) {
        self.hosts
            .retain(|(s, h)| s != session || h.streams > 0 || h.runs > 0);
    }
}

/// The event withdrawing a request from the browser (its call is over).
pub fn cancelled(request_id: &str) -> Event {
    ("cancelled", json!({"requestId": request_id}).to_string())
}

fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let value = crate::json::parse_body(body)?;
    crate::json::decode(value).map_err(ApiError::InvalidRequest)
}

/// A browser's result for `ask`, bounded: any JSON within the payload
/// bounds for `execute`; for `discover` a list of at most `UI_COMMANDS_MAX`
/// commands `{name, description?, inputSchema?}` with unique names.
fn check_result(ask: &Ask, value: Value) -> Result<Value, ResultError> {
    check_payload(&value).map_err(ResultError::Payload)?;
    if let Ask::Execute { .. } = ask {
        return Ok(value);
    }
    let commands: Vec<Command> =
        serde_json::from_value(value).map_err(|e| ResultError::NotCommands(e.to_string()))?;
    if commands.len() > UI_COMMANDS_MAX {
        return Err(ResultError::TooMany(commands.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut listed = Vec::with_capacity(commands.len());
    for (i, command) in commands.into_iter().enumerate() {
        check_command_name(&command.name).map_err(|e| ResultError::Name(i, e))?;
        if !seen.insert(command.name.clone()) {
            return Err(ResultError::Twice {
                at: i,
                name: command.name,
            });
        }
        if command
            .input_schema
            .as_ref()
            .is_some_and(|s| !s.is_object())
        {
            return Err(ResultError::Schema(i));
        }
        listed.push(json!({
            "name": command.name,
            "description": command.description,
            "inputSchema": command.input_schema.unwrap_or_else(|| json!({"type": "object"})),
        }));
    }
    Ok(Value::Array(listed))
}
