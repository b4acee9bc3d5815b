//! Fleet Sessions and delegation at the target Agent (seed: "Agent fleet":
//! `createFleetSessions(open)` lists, creates, reads and deletes Sessions,
//! and `send(grant, agentId, sessionId, message)` admits replayable work;
//! `start(grant, task)` and `delegate(grant, task)`), sans-IO.
//!
//! One request (`fleetSessions` on the target's object, from the host API
//! `js/fleet.mjs` or from a peer's `agents.sessions.*` call) carries its
//! grant, checked here against this Agent's id and this call's clock, then
//! maps onto the HTTP route that does the same (like `crate::mcp_server`'s
//! tool calls): identity, bounds, refusals and requestId replays are the
//! HTTP contract's, nothing is decided twice.
//!
//! - `sessions.list` `{cursor?, limit?}`: `GET /sessions`;
//! - `sessions.create` `{sessionId?}`: `POST /sessions`;
//! - `sessions.read` `{sessionId, cursor?, limit?}`: `GET /sessions/:id`;
//! - `sessions.delete` `{sessionId}`: `DELETE /sessions/:id`;
//! - `send`, `start`, `delegate` `{sessionId?, requestId, text, delivery?}`:
//!   the prompt is admitted under `requestId` (`POST /sessions/:id/commands`:
//!   a retry answers the same receipt); a Session found absent is created
//!   (`POST /sessions`; an omitted one is named after the request identity,
//!   [`omitted_session`], so a retry finds it) and the prompt admitted again,
//!   so refused input creates nothing. `send` and `start` answer the
//!   receipt; `delegate` then reads the command's exact settlement: pending
//!   until it settles, then its terminal, final text, usage and tool-call
//!   count ([`WaitAnswer`]). Closing a client cancels nothing.

use super::grant;
use super::steps::PeerError;
use super::{validate_agent_id, WaitAnswer};
use crate::error::ApiError;
use crate::http::HttpRequest;
use crate::mail::{self, Address};
use crate::session::command::{validate_request_id, Delivery};
use crate::text::validate_session_id;
use serde::Deserialize;
use serde_json::{json, Value};

/// One request as the target's `fleetSessions` receives it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Request {
    grant: Value,
    op: String,
    #[serde(default)]
    args: Option<Value>,
    /// Host metadata applied to the routes (the request's identity).
    #[serde(default)]
    meta: Option<Value>,
}

/// Which admission a send is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Send,
    Start,
    Delegate,
}

/// A prompt sent to another Agent's Session.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Message {
    #[serde(default)]
    pub session_id: Option<String>,
    pub request_id: String,
    pub text: String,
    #[serde(default)]
    pub delivery: Delivery,
}

/// One decoded fleet Sessions operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    List {
        cursor: Option<String>,
        limit: Option<usize>,
    },
    Create {
        session_id: Option<String>,
    },
    Read {
        session_id: String,
        cursor: Option<String>,
        limit: Option<usize>,
    },
    Delete {
        session_id: String,
    },
    Send(Verb, Message),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Page {
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Named {
    #[serde(default)]
    session_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Deleted {
    session_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReadArgs {
    session_id: String,
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

impl Op {
    /// Decodes operation `op` with `args` (an object): a 400 naming the
    /// problem. Bounds the routes check again are checked here too, so a
    /// model's call is refused before it leaves its Agent.
    pub fn decode(op: &str, args: &Value) -> Result<Op, ApiError> {
        fn parse<T: serde::de::DeserializeOwned>(op: &str, args: &Value) -> Result<T, ApiError> {
            serde_json::from_value(args.clone())
                .map_err(|e| ApiError::InvalidRequest(format!("{op}: {e}")))
        }
        let cursor = |c: &Option<String>| -> Result<(), ApiError> {
            match c {
                Some(c) if c.len() > 20 || !c.parse::<i64>().is_ok_and(|n| n > 0) => {
                    Err(ApiError::InvalidRequest(format!(
                        "{op}: cursor: not a cursor a page returned: `{}`",
                        crate::text::shorten(c)
                    )))
                }
                _ => Ok(()),
            }
        };
        let limit = |l: Option<usize>, max: usize| -> Result<(), ApiError> {
            match l {
                Some(l) if !(1..=max).contains(&l) => Err(ApiError::InvalidRequest(format!(
                    "{op}: limit: 1..={max}, got {l}"
                ))),
                _ => Ok(()),
            }
        };
        Ok(match op {
            "sessions.list" => {
                let a: Page = parse(op, args)?;
                cursor(&a.cursor)?;
                limit(a.limit, crate::limits::LIST_PAGE_SESSIONS_MAX)?;
                Op::List {
                    cursor: a.cursor,
                    limit: a.limit,
                }
            }
            "sessions.create" => {
                let a: Named = parse(op, args)?;
                if let Some(id) = &a.session_id {
                    validate_session_id(id)?;
                }
                Op::Create {
                    session_id: a.session_id,
                }
            }
            "sessions.read" => {
                let a: ReadArgs = parse(op, args)?;
                validate_session_id(&a.session_id)?;
                cursor(&a.cursor)?;
                limit(a.limit, crate::limits::READ_PAGE_MESSAGES_MAX)?;
                Op::Read {
                    session_id: a.session_id,
                    cursor: a.cursor,
                    limit: a.limit,
                }
            }
            "sessions.delete" => {
                let a: Deleted = parse(op, args)?;
                validate_session_id(&a.session_id)?;
                Op::Delete {
                    session_id: a.session_id,
                }
            }
            "send" | "start" | "delegate" => {
                let verb = match op {
                    "send" => Verb::Send,
                    "start" => Verb::Start,
                    _ => Verb::Delegate,
                };
                let m: Message = parse(op, args)?;
                if let Some(id) = &m.session_id {
                    validate_session_id(id)?;
                }
                validate_request_id(&m.request_id)?;
                if m.text.is_empty() || m.text.len() > crate::limits::TEXT_BYTES_MAX {
                    return Err(ApiError::InvalidRequest(format!(
                        "{op}: text: 1..={} UTF-8 bytes, got {}",
                        crate::limits::TEXT_BYTES_MAX,
                        m.text.len()
                    )));
                }
                Op::Send(verb, m)
            }
            other => {
                return Err(ApiError::InvalidRequest(format!(
                    "op: unknown operation `{}`; known: sessions.list, sessions.create, \
                     sessions.read, sessions.delete, send, start, delegate",
                    crate::text::shorten(other)
                )))
            }
        })
    }

    /// The grant action this operation needs.
    pub fn action(&self) -> &'static str {
        match self {
            Op::List { .. } => "sessions.list",
            Op::Create { .. } => "sessions.create",
            Op::Read { .. } => "sessions.read",
            Op::Delete { .. } => "sessions.delete",
            Op::Send(Verb::Send, _) => "send",
            Op::Send(Verb::Start, _) => "start",
            Op::Send(Verb::Delegate, _) => "delegate",
        }
    }

    /// The request a peer sends the target (`fleetSessions`), with `grant`.
    pub fn request(&self, grant: &Value) -> Value {
        let args = match self {
            Op::List { cursor, limit } => json!({ "cursor": cursor, "limit": limit }),
            Op::Create { session_id } => json!({ "sessionId": session_id }),
            Op::Read {
                session_id,
                cursor,
                limit,
            } => json!({ "sessionId": session_id, "cursor": cursor, "limit": limit }),
            Op::Delete { session_id } => json!({ "sessionId": session_id }),
            Op::Send(_, m) => json!({
                "sessionId": m.session_id, "requestId": m.request_id, "text": m.text,
                "delivery": m.delivery,
            }),
        };
        let args = match args {
            // Absent options are left out, as a host would write them.
            Value::Object(o) => {
                Value::Object(o.into_iter().filter(|(_, v)| !v.is_null()).collect())
            }
            other => other,
        };
        json!({ "grant": grant, "op": self.action(), "args": args })
    }
}

/// The Session a send that names none is created as: derived from the
/// request identity (the target and the requestId), so a retry addresses
/// the same one (`mail::omitted_session` with no sending Agent).
pub fn omitted_session(agent_id: &str, request_id: &str) -> String {
    let host = Address {
        agent_id: String::new(),
        session_id: String::new(),
    };
    mail::omitted_session(&host, agent_id, request_id)
}

/// What the host performs next.
#[derive(Debug)]
pub enum Step {
    /// Serve this route as any request (its effects applied); answer
    /// [`Outcome::Routed`].
    Route(HttpRequest),
    /// Read this command's settlement (no waiting); answer
    /// [`Outcome::Settled`].
    Settlement {
        session_id: String,
        command_id: String,
    },
    /// The answer's value, or the refusal.
    Done(Result<Value, PeerError>),
}

/// The outcome of the step performed last.
#[derive(Debug)]
pub enum Outcome {
    Routed { status: u16, body: Option<String> },
    Settled(Result<WaitAnswer, ApiError>),
}

#[derive(Debug)]
enum Stage {
    /// A route whose answer is the value (`None` body: `then`).
    Answer {
        then: Option<Value>,
    },
    /// Creating the absent Session of a send (taken meanwhile: fine).
    Creating {
        verb: Verb,
        message: Message,
        session_id: String,
    },
    /// Admitting a send; `created`: its Session was just created.
    Admitting {
        verb: Verb,
        message: Message,
        session_id: String,
        created: bool,
    },
    Settling {
        session_id: String,
    },
    Done,
}

/// One `fleetSessions` request in progress.
#[derive(Debug)]
pub struct Serve {
    meta: Option<String>,
    provenance: Option<Value>,
    stage: Stage,
}

/// A refusal as the target answers it.
fn refused(e: &ApiError) -> PeerError {
    PeerError {
        code: e.code().to_owned(),
        status: Some(e.status()),
        message: e.to_string(),
    }
}

impl Serve {
    /// Decodes `request` (JSON text) for the Agent `self_id`, checks its
    /// grant at `now_ms` and names the first step.
    pub fn start(self_id: &str, now_ms: i64, request: &str) -> (Serve, Step) {
        let mut serve = Serve {
            meta: None,
            provenance: None,
            stage: Stage::Done,
        };
        let step = match serve.begin(self_id, now_ms, request) {
            Ok(step) => step,
            Err(e) => Step::Done(Err(refused(&e))),
        };
        (serve, step)
    }

    fn begin(&mut self, self_id: &str, now_ms: i64, request: &str) -> Result<Step, ApiError> {
        validate_agent_id(self_id).map_err(|e| {
            ApiError::HostMisconfigured(format!("fleet Sessions: this Agent's {e}"))
        })?;
        let value = crate::json::strict(request.as_bytes())
            .map_err(|e| ApiError::InvalidRequest(format!("request: {e}")))?;
        let request: Request = crate::json::decode(value).map_err(ApiError::InvalidRequest)?;
        let args = request.args.unwrap_or_else(|| json!({}));
        let op = Op::decode(&request.op, &args)?;
        let grant = grant::check(&request.grant, op.action(), Some(self_id), now_ms)?;
        self.provenance = grant.provenance;
        self.meta = request.meta.map(|m| m.to_string());
        Ok(match op {
            Op::List { cursor, limit } => {
                let mut query = Vec::new();
                if let Some(l) = limit {
                    query.push(format!("limit={l}"));
                }
                if let Some(c) = cursor {
                    query.push(format!("cursor={c}"));
                }
                self.route("GET", "/sessions".to_owned(), query.join("&"), None, None)
            }
            Op::Create { session_id } => {
                let body = match session_id {
                    Some(id) => json!({ "sessionId": id }),
                    None => json!({}),
                };
                self.route(
                    "POST",
                    "/sessions".to_owned(),
                    String::new(),
                    Some(body),
                    None,
                )
            }
            Op::Read {
                session_id,
                cursor,
                limit,
            } => {
                let mut query = Vec::new();
                if let Some(c) = cursor {
                    query.push(format!("before={c}"));
                }
                if let Some(l) = limit {
                    query.push(format!("limit={l}"));
                }
                self.route(
                    "GET",
                    format!("/sessions/{session_id}"),
                    query.join("&"),
                    None,
                    None,
                )
            }
            Op::Delete { session_id } => {
                let then = json!({ "sessionId": session_id, "deleted": true });
                self.route(
                    "DELETE",
                    format!("/sessions/{session_id}"),
                    String::new(),
                    None,
                    Some(then),
                )
            }
            Op::Send(verb, message) => {
                let session_id = message
                    .session_id
                    .clone()
                    .unwrap_or_else(|| omitted_session(self_id, &message.request_id));
                self.admit(verb, message, session_id, false)
            }
        })
    }

    /// Admits a send's prompt (first, so refused input creates nothing; a
    /// Session found absent is created, then the prompt admitted again).
    fn admit(&mut self, verb: Verb, message: Message, session_id: String, created: bool) -> Step {
        let body = json!({
            "type": "prompt", "requestId": message.request_id, "text": message.text,
            "delivery": message.delivery,
        });
        let path = format!("/sessions/{session_id}/commands");
        let step = self.request("POST", path, String::new(), Some(body));
        self.stage = Stage::Admitting {
            verb,
            message,
            session_id,
            created,
        };
        step
    }

    fn request(&self, method: &str, path: String, query: String, body: Option<Value>) -> Step {
        Step::Route(HttpRequest {
            method: method.to_owned(),
            path,
            query,
            meta: self.meta.clone(),
            body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
            waited: false,
        })
    }

    fn route(
        &mut self,
        method: &str,
        path: String,
        query: String,
        body: Option<Value>,
        then: Option<Value>,
    ) -> Step {
        self.stage = Stage::Answer { then };
        self.request(method, path, query, body)
    }

    /// Takes the outcome of the last step; names the next.
    pub fn step(&mut self, outcome: Outcome) -> Step {
        let stage = std::mem::replace(&mut self.stage, Stage::Done);
        match self.next(stage, outcome) {
            Ok(step) => step,
            Err(e) => Step::Done(Err(e)),
        }
    }

    fn next(&mut self, stage: Stage, outcome: Outcome) -> Result<Step, PeerError> {
        Ok(match (stage, outcome) {
            (Stage::Answer { then }, Outcome::Routed { status, body }) => {
                let value = answered(status, body)?;
                Step::Done(Ok(then.unwrap_or(value)))
            }
            (
                Stage::Creating {
                    verb,
                    message,
                    session_id,
                },
                Outcome::Routed { status, body },
            ) => {
                match answered(status, body) {
                    Ok(_) => {}
                    Err(e) if e.code == ApiError::SessionExists(String::new()).code() => {}
                    Err(e) => return Err(e),
                }
                self.admit(verb, message, session_id, true)
            }
            (
                Stage::Admitting {
                    verb,
                    message,
                    session_id,
                    created,
                },
                Outcome::Routed { status, body },
            ) => {
                let mut receipt = match answered(status, body) {
                    Ok(receipt) => receipt,
                    Err(e)
                        if !created
                            && e.code == ApiError::SessionNotFound(String::new()).code() =>
                    {
                        let body = json!({ "sessionId": session_id });
                        let step =
                            self.request("POST", "/sessions".to_owned(), String::new(), Some(body));
                        self.stage = Stage::Creating {
                            verb,
                            message,
                            session_id,
                        };
                        return Ok(step);
                    }
                    Err(e) => return Err(e),
                };
                let command_id = receipt
                    .get("commandId")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                match (verb, command_id) {
                    (Verb::Delegate, Some(command_id)) => {
                        self.stage = Stage::Settling {
                            session_id: session_id.clone(),
                        };
                        Step::Settlement {
                            session_id,
                            command_id,
                        }
                    }
                    _ => {
                        receipt["sessionId"] = json!(session_id);
                        Step::Done(Ok(self.echoed(receipt)))
                    }
                }
            }
            (Stage::Settling { session_id }, Outcome::Settled(settled)) => {
                let answer = settled.map_err(|e| refused(&e))?;
                let mut value = serde_json::to_value(answer)
                    .map_err(|e| refused(&ApiError::Internal(e.to_string())))?;
                value["sessionId"] = json!(session_id);
                Step::Done(Ok(self.echoed(value)))
            }
            (stage, outcome) => {
                return Err(refused(&ApiError::Internal(format!(
                    "fleet Sessions: {outcome:?} answers no step of {stage:?}"
                ))))
            }
        })
    }

    /// An admission's answer echoes the grant's provenance (never read).
    fn echoed(&self, mut value: Value) -> Value {
        if let Some(p) = &self.provenance {
            value["provenance"] = p.clone();
        }
        value
    }
}

/// A route's answer: its body's value, or its refusal.
fn answered(status: u16, body: Option<String>) -> Result<Value, PeerError> {
    let value = match body.as_deref() {
        Some(text) => crate::json::from_text::<Value>(text)
            .map_err(|e| refused(&ApiError::Internal(format!("a route's answer: {e}"))))?,
        None => Value::Null,
    };
    if (200..300).contains(&status) {
        return Ok(value);
    }
    let error = &value["error"];
    Err(PeerError {
        code: error["code"].as_str().unwrap_or("internal").to_owned(),
        status: Some(status),
        message: error["message"].as_str().unwrap_or_default().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAR: i64 = 4_000_000_000_000;

    fn grant(actions: &[&str], expires_at: i64) -> Value {
        json!({"agents": ["b"], "actions": actions, "expiresAt": expires_at, "provenance": "ada"})
    }

    fn start(request: Value) -> (Serve, Step) {
        Serve::start("b", 1_000, &request.to_string())
    }

    fn route(step: &Step) -> &HttpRequest {
        match step {
            Step::Route(r) => r,
            other => panic!("a route, got {other:?}"),
        }
    }

    fn refusal(step: Step) -> PeerError {
        match step {
            Step::Done(Err(e)) => e,
            other => panic!("a refusal, got {other:?}"),
        }
    }

    #[test]
    fn each_operation_is_its_route() {
        let (_, s) = start(
            json!({"grant": grant(&["sessions.list"], FAR), "op": "sessions.list", "args": {"limit": 5, "cursor": "7"}}),
        );
        let r = route(&s);
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.query.as_str()),
            ("GET", "/sessions", "limit=5&cursor=7")
        );
        let (_, s) = start(
            json!({"grant": grant(&["sessions.read"], FAR), "op": "sessions.read", "args": {"sessionId": "s1", "cursor": "9"}}),
        );
        let r = route(&s);
        assert_eq!(
            (r.path.as_str(), r.query.as_str()),
            ("/sessions/s1", "before=9")
        );
        let (mut serve, s) = start(
            json!({"grant": grant(&["sessions.delete"], FAR), "op": "sessions.delete", "args": {"sessionId": "s1"}, "meta": {"user": "ada"}}),
        );
        let r = route(&s);
        assert_eq!(
            (r.method.as_str(), r.meta.as_deref()),
            ("DELETE", Some(r#"{"user":"ada"}"#))
        );
        let Step::Done(Ok(v)) = serve.step(Outcome::Routed {
            status: 204,
            body: None,
        }) else {
            panic!()
        };
        assert_eq!(v, json!({"sessionId": "s1", "deleted": true}));
        let (mut serve, _) =
            start(json!({"grant": grant(&["sessions.create"], FAR), "op": "sessions.create"}));
        let e = match serve.step(Outcome::Routed {
            status: 409,
            body: Some(ApiError::SessionExists("x".into()).body()),
        }) {
            Step::Done(Err(e)) => e,
            other => panic!("{other:?}"),
        };
        assert_eq!((e.code.as_str(), e.status), ("session_exists", Some(409)));
    }

    #[test]
    fn the_grant_is_checked_for_this_agent_action_and_clock() {
        let e = refusal(
            start(json!({"grant": grant(&["sessions.list"], 1_000), "op": "sessions.list"})).1,
        );
        assert_eq!((e.code.as_str(), e.status), ("grant_expired", Some(403)));
        let e = refusal(start(json!({"grant": grant(&["sessions.list"], FAR), "op": "sessions.delete", "args": {"sessionId": "s"}})).1);
        assert_eq!(e.code, "grant_refused");
        assert!(e.message.contains("sessions.delete"), "{}", e.message);
        let other = json!({"agents": ["c"], "actions": ["send"], "expiresAt": FAR});
        let e = refusal(
            start(json!({"grant": other, "op": "send", "args": {"requestId": "r", "text": "t"}})).1,
        );
        assert!(e.message.contains("Agent `b`"), "{}", e.message);
        let e = refusal(start(json!({"op": "sessions.list"})).1);
        assert_eq!(e.code, "invalid_request");
        let e = refusal(
            start(
                json!({"grant": grant(&["send"], FAR), "op": "send", "args": {"requestId": "r"}}),
            )
            .1,
        );
        assert!(e.message.contains("text"), "{}", e.message);
        let e = refusal(start(json!({"grant": grant(&["sessions.read"], FAR), "op": "sessions.read", "args": {"sessionId": "s", "limit": 201}})).1);
        assert!(e.message.contains("limit"), "{}", e.message);
    }

    #[test]
    fn a_send_creates_its_absent_session_then_admits_and_a_delegation_reads_the_settlement() {
        let task = json!({"requestId": "r1", "text": "go"});
        let (mut serve, s) =
            start(json!({"grant": grant(&["delegate"], FAR), "op": "delegate", "args": task}));
        let omitted = omitted_session("b", "r1");
        assert_eq!(route(&s).path, format!("/sessions/{omitted}/commands"));
        // Absent: created (taken meanwhile is fine), then admitted again.
        let s = serve.step(Outcome::Routed {
            status: 404,
            body: Some(ApiError::SessionNotFound(omitted.clone()).body()),
        });
        assert_eq!(
            route(&s).body,
            json!({"sessionId": omitted}).to_string().into_bytes()
        );
        let s = serve.step(Outcome::Routed {
            status: 409,
            body: Some(ApiError::SessionExists(omitted.clone()).body()),
        });
        let admit = route(&s);
        assert_eq!(admit.path, format!("/sessions/{omitted}/commands"));
        // Absent again after creating it: refused, no loop.
        let (mut again, _) =
            start(json!({"grant": grant(&["send"], FAR), "op": "send", "args": task}));
        again.step(Outcome::Routed {
            status: 404,
            body: Some(ApiError::SessionNotFound(omitted.clone()).body()),
        });
        again.step(Outcome::Routed {
            status: 201,
            body: Some(json!({"sessionId": omitted}).to_string()),
        });
        let e = refusal(again.step(Outcome::Routed {
            status: 404,
            body: Some(ApiError::SessionNotFound(omitted.clone()).body()),
        }));
        assert_eq!(e.code, "session_not_found");
        let s = serve.step(Outcome::Routed {
            status: 202,
            body: Some(r#"{"status":"accepted","commandId":"cmd_1"}"#.into()),
        });
        assert!(
            matches!(&s, Step::Settlement { command_id, .. } if command_id == "cmd_1"),
            "{s:?}"
        );
        let Step::Done(Ok(v)) = serve.step(Outcome::Settled(Ok(WaitAnswer::of("cmd_1", None))))
        else {
            panic!()
        };
        assert_eq!(
            v,
            json!({"status": "pending", "commandId": "cmd_1", "sessionId": omitted, "provenance": "ada"})
        );
        assert_eq!(
            omitted_session("b", "r1"),
            omitted,
            "a retry finds the same Session"
        );
        assert_ne!(omitted_session("c", "r1"), omitted);
    }
}
