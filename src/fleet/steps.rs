//! The order of one `agents.*` call, sans-IO: which peer calls, directory
//! requests and store transitions it takes, in which order, and what the
//! model sees of each answer or refusal. [`Steps::start`] decodes the call
//! and names the first [`Action`]; the host performs it and feeds the
//! outcome back to [`Steps::step`], which names the next, until
//! [`Action::Done`] carries the tool result (`Err`: what the model sees).
//!
//! With the directory offered, every call first makes sure this Agent is
//! registered there ([`Action::Register`]). `archive` / `unarchive` is the
//! directory's check, the target's own facts and flag, then the directory's
//! commit; `create` sets the new Agent's explicit model (its own host
//! checking it) before answering its facts.

use super::directory::{CreateInput, Entry, Page, Request};
use super::member::MemberAnswer;
use super::{decode, working_directory, Call, Invalid, Offer, RecallAnswer, WaitAnswer};
use crate::error::ApiError;
use crate::limits::FLEET_CALL_TIMEOUT_MS;
use crate::mail::{self, Address, Outgoing, SendState};
use crate::model::preference::{Choice, Reasoning};
use crate::model_choice::SetError;
use crate::session::command::Delivery;
use crate::sql::SqlError;
use serde::Deserialize;
use serde_json::{json, Value};

/// The code of a target host's model refusal (its `fleetSetModel`).
pub const MODEL_REJECTED: &str = "model_rejected";

/// Peer codes that mean the target's store cannot answer its facts.
const UNREADABLE: &[&str] = &[
    "storage_incompatible",
    "fleet_disabled",
    "host_misconfigured",
    "runtime_closed",
];

/// A peer's refusal, as its answer's `error` carries it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerError {
    pub code: String,
    #[serde(default)]
    pub status: Option<u16>,
    pub message: String,
}

/// Why an `agents.*` call failed; its text is what the model sees. `name`
/// is the call as the model spells it (`agents.wait`); a refusal whose
/// code names its operation (`archive:running`, `model:rejected`) leads
/// with that code instead.
#[derive(Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The call's arguments.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// This runtime refused one of the call's transitions (`mail::send`,
    /// `mail::recall`, setting its own model).
    #[error("{name}: {}: {error}", error.code())]
    Refused { name: String, error: ApiError },
    /// This runtime's store failed (registering in the directory).
    #[error("{name}: {error}")]
    Store { name: String, error: SqlError },
    /// The peer Agent refused (or the directory, in a code naming no
    /// operation): its code and message.
    #[error("{name}: {}: {}", error.code, error.message)]
    PeerRefused { name: String, error: PeerError },
    /// The peer Agent was unreachable, timed out, or answered malformed.
    #[error("{name}: Agent `{agent_id}` could not be reached: {why}")]
    Unreachable {
        name: String,
        agent_id: String,
        why: String,
    },
    /// The peer Agent answered `what` (`malformed facts`, `a malformed
    /// setModel`).
    #[error("{name}: Agent `{agent_id}` answered {what}: {why}")]
    Malformed {
        name: String,
        agent_id: String,
        what: &'static str,
        why: String,
    },
    /// The directory refused with a code naming its operation
    /// (`archive:not_creator`).
    #[error("{}: {}", .0.code, .0.message)]
    DirectoryRefused(PeerError),
    #[error("{name}: the fleet's directory could not be reached: {why}")]
    DirectoryUnreachable { name: String, why: String },
    #[error("{name}: the directory's answer is malformed: {why}")]
    DirectoryMalformed { name: String, why: String },
    /// The target of an archive (`verb`) is busy: running or pending work.
    #[error("{verb}:{reason}: Agent `{agent_id}`: {message}")]
    Busy {
        verb: &'static str,
        reason: String,
        agent_id: String,
        message: String,
    },
    /// The target's store cannot answer its facts (its refusal).
    #[error(
        "{verb}:unreadable: Agent `{agent_id}`'s store cannot answer ({}: {})",
        error.code,
        error.message
    )]
    Unreadable {
        verb: &'static str,
        agent_id: String,
        error: PeerError,
    },
    #[error("{verb}:self: an Agent cannot {verb} itself")]
    Itself { verb: &'static str },
    /// A host (this one or the target's) refused the model.
    #[error("model:rejected: {0}")]
    ModelRejected(String),
    /// The directory's entry names a reasoning level this build refuses.
    #[error(transparent)]
    Model(#[from] crate::model::Refusal),
    #[error("{name}: this Agent's host does not offer it")]
    NotOffered { name: String },
    /// The host could not answer (its offered models): why.
    #[error("{name}: {why}")]
    Host { name: String, why: String },
    /// The host's fleet grant does not allow the call (or is unusable).
    #[error("{name}: {}: {}", error.code(), error)]
    Grant { name: String, error: ApiError },
    /// An outcome that answers no step of the call: the host's bug.
    #[error("{name}: {outcome} answers no {step}")]
    Unexpected {
        name: String,
        /// The outcome, as `Debug` shows it.
        outcome: String,
        step: String,
    },
    /// A value that could not be encoded.
    #[error("{0}")]
    Encode(String),
}

/// Its text: an outcome the host mistakes is shown with `Debug`, and a
/// derived one would link a formatter for every error nested here.
impl std::fmt::Debug for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// What a call to a peer (or the directory) came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Peer {
    Value(Value),
    /// The peer refused (its answer's error).
    Refused(PeerError),
    /// Unreachable, timed out or malformed: why.
    Failed(String),
}

impl Peer {
    /// A peer's answer text, `{value}` or `{error: {code, status, message}}`.
    pub fn parse(text: &str) -> Peer {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Answer {
            #[serde(default)]
            value: Option<Value>,
            #[serde(default)]
            error: Option<PeerError>,
        }
        match crate::json::from_text::<Answer>(text) {
            Ok(Answer { error: Some(e), .. }) => Peer::Refused(e),
            Ok(Answer { value, .. }) => Peer::Value(value.unwrap_or(Value::Null)),
            Err(e) => Peer::Failed(format!("the peer's answer is malformed: {e}")),
        }
    }
}

/// One call to a peer Agent's object, through the shim's transport.
#[derive(Debug, Clone, PartialEq)]
pub enum PeerCall {
    /// Its `fleetRecall` of the send keyed `key`.
    Recall {
        agent_id: String,
        session_id: String,
        key: String,
    },
    /// Its `fleetSettlement`, waiting up to `timeout_ms` there.
    Settlement {
        agent_id: String,
        session_id: String,
        command_id: String,
        timeout_ms: u64,
    },
    /// Its `fleetRead`; `query` is JSON.
    Read {
        agent_id: String,
        session_id: String,
        query: String,
    },
    /// Its `fleetSetModel`; `choice` is JSON.
    SetModel { agent_id: String, choice: String },
    /// Its `fleetMember`; `request` is JSON `{archived}`.
    Member { agent_id: String, request: String },
    /// Its `fleetSessions`; `request` is JSON `{grant, op, args}`.
    Sessions { agent_id: String, request: String },
}

impl PeerCall {
    /// How long the host waits for the answer before aborting the call.
    pub fn timeout_ms(&self) -> u64 {
        match self {
            PeerCall::Settlement { timeout_ms, .. } => FLEET_CALL_TIMEOUT_MS + timeout_ms,
            _ => FLEET_CALL_TIMEOUT_MS,
        }
    }
}

/// A send to carry: frozen in this Agent's outbox, then delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct Send {
    pub from: Address,
    pub to: Address,
    pub request_id: String,
    pub text: String,
    pub delivery: Delivery,
}

impl Send {
    pub fn outgoing(&self) -> Outgoing<'_> {
        Outgoing {
            from: self.from.clone(),
            to: self.to.clone(),
            request_id: &self.request_id,
            text: &self.text,
            delivery: self.delivery,
        }
    }
}

/// What the host performs next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Registers this Agent in the directory unless known to be there
    /// (answer [`Outcome::Registered`]).
    Register,
    /// One directory request (answer [`Outcome::Peer`]).
    Directory(Request),
    /// One peer call (answer [`Outcome::Peer`]).
    Peer(PeerCall),
    /// `mail::send` in one transition (answer [`Outcome::Sent`]).
    Send(Send),
    /// Delivers the frozen send keyed so now, if it can (answer
    /// [`Outcome::Delivered`]).
    Deliver(String),
    /// `mail::recall` of the send keyed so, in one transition (answer
    /// [`Outcome::Recalled`]).
    Recall(String),
    /// Sets this Agent's own explicit model (answer [`Outcome::OwnModel`]).
    SetOwnModel(Choice),
    /// This host's offered models (answer [`Outcome::Models`]).
    Models,
    /// The host's working directory of each Agent (answer
    /// [`Outcome::WorkingDirectories`], in the same order).
    WorkingDirectories(Vec<String>),
    /// The call's result, or why not (what the model sees).
    Done(Result<Value, CallError>),
}

/// The outcome of the [`Action`] performed last.
#[derive(Debug)]
pub enum Outcome {
    Registered(Result<(), CallError>),
    Peer(Peer),
    Sent(Result<SendState, ApiError>),
    /// `None`: not delivered now (it stays pending).
    Delivered(Option<SendState>),
    Recalled(Result<(), ApiError>),
    OwnModel(Result<Choice, SetError>),
    Models(Result<Vec<String>, String>),
    WorkingDirectories(Vec<Option<String>>),
}

/// Who calls, and what its host offers.
pub struct Caller<'a> {
    /// This Agent's id in the namespace.
    pub self_id: &'a str,
    /// The calling run's Session.
    pub session_id: &'a str,
    pub offer: Offer,
    /// The host reports each Agent's working directory
    /// (`fleet().workingDirectory`).
    pub working_directory: bool,
    /// The calling Session's fleet grant, read at this call from the
    /// host (`fleet().grant`): `None` when the host supplies no grants
    /// (every operation it offers is allowed), `Some(Err)`: why there is
    /// none usable.
    pub grant: Option<Result<Value, String>>,
    /// This call's clock (ms since the epoch), for the grant's expiry.
    pub now_ms: i64,
}

/// What the answer awaited next is for.
#[derive(Debug)]
enum Stage {
    Registering(Call),
    Sending {
        session_id: String,
    },
    Delivering {
        key: String,
        session_id: String,
    },
    Recalling {
        agent_id: String,
        session_id: String,
        key: String,
    },
    Recall {
        agent_id: String,
    },
    Waiting {
        agent_id: String,
    },
    Reading {
        agent_id: String,
    },
    Sessions {
        agent_id: String,
    },
    /// Setting `agent_id`'s model; `then`: the created Agent to describe.
    SettingModel {
        agent_id: String,
        then: Option<Entry>,
    },
    Models,
    Creating,
    Listing,
    Checking {
        agent_id: String,
        archived: bool,
    },
    Member {
        agent_id: String,
        archived: bool,
    },
    Committing,
    Describing {
        entries: Vec<Entry>,
        shape: Shape,
    },
    Done,
}

/// How described Agents are answered.
#[derive(Debug, Clone, PartialEq)]
enum Shape {
    /// One created Agent.
    Created,
    /// One archived or unarchived Agent (its list facts).
    Listed,
    /// A directory page.
    Page { cursor: Option<String> },
}

/// One `agents.*` call in progress.
pub struct Steps {
    /// `agents.<guest name>`: what refusals are prefixed with.
    name: String,
    self_id: String,
    session_id: String,
    offer: Offer,
    working_directory: bool,
    /// The grant the call was checked under (what a `sessions.*` call
    /// carries to the target, which checks it again).
    grant: Option<Value>,
    stage: Stage,
}

impl Steps {
    /// Decodes call `operation` (`guest_name` as the model spells it) and
    /// names its first action.
    pub fn start(
        caller: &Caller<'_>,
        operation: &str,
        guest_name: &str,
        args: &Value,
    ) -> (Steps, Action) {
        let mut steps = Steps {
            name: format!("agents.{guest_name}"),
            self_id: caller.self_id.to_owned(),
            session_id: caller.session_id.to_owned(),
            offer: caller.offer,
            working_directory: caller.working_directory,
            grant: None,
            stage: Stage::Done,
        };
        let decoded = decode(operation, args, caller.offer)
            .map_err(CallError::from)
            .and_then(|call| steps.granted(caller, call));
        let action = match decoded {
            Err(why) => Action::Done(Err(why)),
            Ok(call) if caller.offer.directory => {
                steps.stage = Stage::Registering(call);
                Action::Register
            }
            Ok(call) => steps.call(call),
        };
        (steps, action)
    }

    /// Checks `call` against the caller's fleet grant, at this call.
    fn granted(&mut self, caller: &Caller<'_>, call: Call) -> Result<Call, CallError> {
        let grant = match &caller.grant {
            None => return Ok(call),
            Some(Ok(grant)) => grant,
            Some(Err(why)) => {
                return Err(CallError::Grant {
                    name: self.name.clone(),
                    error: ApiError::GrantRefused(why.clone()),
                })
            }
        };
        let checked = super::grant::check(grant, call.action(), call.target(), caller.now_ms);
        if let Err(error) = checked {
            return Err(CallError::Grant {
                name: self.name.clone(),
                error,
            });
        }
        self.grant = Some(grant.clone());
        Ok(call)
    }

    /// Takes the outcome of the last action; names the next.
    pub fn step(&mut self, outcome: Outcome) -> Action {
        let action = match self.next(outcome) {
            Ok(action) => action,
            Err(why) => Action::Done(Err(why)),
        };
        if matches!(action, Action::Done(_)) {
            self.stage = Stage::Done;
        }
        action
    }

    fn next(&mut self, outcome: Outcome) -> Result<Action, CallError> {
        let stage = std::mem::replace(&mut self.stage, Stage::Done);
        let name = self.name.clone();
        Ok(match (stage, outcome) {
            (Stage::Registering(call), Outcome::Registered(done)) => {
                done?;
                self.call(call)
            }
            (Stage::Sending { session_id }, Outcome::Sent(sent)) => {
                match sent.map_err(|error| CallError::Refused { name, error })? {
                    SendState::Pending { key } => {
                        self.stage = Stage::Delivering {
                            key: key.clone(),
                            session_id,
                        };
                        Action::Deliver(key)
                    }
                    state => sent_answer(&state, session_id)?,
                }
            }
            (Stage::Delivering { key, session_id }, Outcome::Delivered(state)) => {
                sent_answer(&state.unwrap_or(SendState::Pending { key }), session_id)?
            }
            (
                Stage::Recalling {
                    agent_id,
                    session_id,
                    key,
                },
                Outcome::Recalled(done),
            ) => {
                done.map_err(|error| CallError::Refused { name, error })?;
                self.stage = Stage::Recall {
                    agent_id: agent_id.clone(),
                };
                Action::Peer(PeerCall::Recall {
                    agent_id,
                    session_id,
                    key,
                })
            }
            (Stage::Recall { agent_id }, Outcome::Peer(peer)) => {
                let answer: RecallAnswer = self.peer_value(&agent_id, peer, "recall answer")?;
                done(&answer)?
            }
            (Stage::Waiting { agent_id }, Outcome::Peer(peer)) => {
                let answer: WaitAnswer = self.peer_value(&agent_id, peer, "settlement")?;
                done(&answer)?
            }
            (Stage::Reading { agent_id }, Outcome::Peer(peer)) => {
                let page: Value = self.peer_value(&agent_id, peer, "page")?;
                Action::Done(Ok(page))
            }
            (Stage::Sessions { agent_id }, Outcome::Peer(peer)) => {
                Action::Done(Ok(self.peer_answer(&agent_id, peer)?))
            }
            (Stage::SettingModel { agent_id, then }, outcome) => {
                let set = self.model_set(&agent_id, outcome)?;
                match then {
                    Some(entry) => self.describe(vec![entry], Shape::Created),
                    None => {
                        let mut answer = json!({ "agentId": agent_id, "model": set.model });
                        if let Some(level) = set.reasoning {
                            answer["reasoning"] = json!(level);
                        }
                        Action::Done(Ok(answer))
                    }
                }
            }
            (Stage::Models, Outcome::Models(models)) => {
                let models = models.map_err(|why| CallError::Host { name, why })?;
                Action::Done(Ok(json!({ "models": models })))
            }
            (Stage::Creating, Outcome::Peer(peer)) => self.created(peer)?,
            (Stage::Listing, Outcome::Peer(peer)) => {
                let page: Page = self.directory_value(peer)?;
                let shape = Shape::Page {
                    cursor: page.cursor,
                };
                self.describe(page.agents, shape)
            }
            (Stage::Checking { agent_id, archived }, Outcome::Peer(peer)) => {
                let _: Entry = self.directory_value(peer)?;
                let request = json!({ "archived": archived }).to_string();
                self.stage = Stage::Member {
                    agent_id: agent_id.clone(),
                    archived,
                };
                Action::Peer(PeerCall::Member { agent_id, request })
            }
            (Stage::Member { agent_id, archived }, Outcome::Peer(peer)) => {
                self.member_set(&agent_id, archived, peer)?;
                self.stage = Stage::Committing;
                Action::Directory(Request::SetArchived {
                    caller: self.self_id.clone(),
                    agent_id,
                    archived,
                })
            }
            (Stage::Committing, Outcome::Peer(peer)) => {
                let entry: Entry = self.directory_value(peer)?;
                self.describe(vec![entry], Shape::Listed)
            }
            (Stage::Describing { entries, shape }, Outcome::WorkingDirectories(dirs)) => {
                let dirs = dirs.iter().map(Option::as_deref);
                answer(&entries, dirs.chain(std::iter::repeat(None)), shape)
            }
            (stage, outcome) => {
                return Err(CallError::Unexpected {
                    name,
                    outcome: format!("{outcome:?}"),
                    step: format!("step of this call ({stage:?})"),
                })
            }
        })
    }

    /// The directory created (or, retried, found) the Agent: its explicit
    /// model is set next (the Agent layer of its model preference), checked
    /// by its own host, else it is described.
    fn created(&mut self, peer: Peer) -> Result<Action, CallError> {
        let entry: Entry = self.directory_value(peer)?;
        let Some(model) = entry.model.clone() else {
            return Ok(self.describe(vec![entry], Shape::Created));
        };
        let reasoning = entry
            .reasoning
            .as_deref()
            .map(Reasoning::parse)
            .transpose()?;
        let choice = Choice { model, reasoning };
        let agent_id = entry.agent_id.clone();
        self.set_model(agent_id, &choice, Some(entry))
    }

    /// The target's answer to its archive flag: set, or why not (refusals
    /// lead with `archive:<reason>`, `unarchive:…`).
    fn member_set(&self, agent_id: &str, archived: bool, peer: Peer) -> Result<(), CallError> {
        let verb = verb(archived);
        let agent_id = agent_id.to_owned();
        let v = match peer {
            Peer::Refused(error) if UNREADABLE.contains(&error.code.as_str()) => {
                return Err(CallError::Unreadable {
                    verb,
                    agent_id,
                    error,
                })
            }
            peer => self.peer_answer(&agent_id, peer)?,
        };
        match serde_json::from_value::<MemberAnswer>(v) {
            Ok(MemberAnswer::Busy { reason, message }) => Err(CallError::Busy {
                verb,
                reason,
                agent_id,
                message,
            }),
            Ok(_) => Ok(()),
            Err(e) => Err(CallError::Malformed {
                name: self.name.clone(),
                agent_id,
                what: "malformed facts",
                why: e.to_string(),
            }),
        }
    }

    /// The first action of decoded `call` (after registering).
    fn call(&mut self, call: Call) -> Action {
        match self.begin(call) {
            Ok(action) => action,
            Err(why) => Action::Done(Err(why)),
        }
    }

    fn begin(&mut self, call: Call) -> Result<Action, CallError> {
        let name = &self.name;
        let from = Address {
            agent_id: self.self_id.clone(),
            session_id: self.session_id.clone(),
        };
        Ok(match call {
            Call::Send {
                agent_id,
                session_id,
                request_id,
                text,
                delivery,
            } => {
                let session_id = session_id
                    .unwrap_or_else(|| mail::omitted_session(&from, &agent_id, &request_id));
                self.stage = Stage::Sending {
                    session_id: session_id.clone(),
                };
                Action::Send(Send {
                    from,
                    to: Address {
                        agent_id,
                        session_id,
                    },
                    request_id,
                    text,
                    delivery,
                })
            }
            Call::Recall {
                agent_id,
                session_id,
                request_id,
            } => {
                let to = Address {
                    agent_id: agent_id.clone(),
                    session_id: session_id.clone(),
                };
                let key = mail::send_key(&from, &to, &request_id);
                // A send still pending here is never delivered.
                self.stage = Stage::Recalling {
                    agent_id,
                    session_id,
                    key: key.clone(),
                };
                Action::Recall(key)
            }
            Call::Wait {
                agent_id,
                session_id,
                command_id,
                timeout_ms,
            } => {
                self.stage = Stage::Waiting {
                    agent_id: agent_id.clone(),
                };
                Action::Peer(PeerCall::Settlement {
                    agent_id,
                    session_id,
                    command_id,
                    timeout_ms,
                })
            }
            Call::Read {
                agent_id,
                session_id,
                query,
            } => {
                let query = serde_json::to_string(&query).map_err(encode)?;
                self.stage = Stage::Reading {
                    agent_id: agent_id.clone(),
                };
                Action::Peer(PeerCall::Read {
                    agent_id,
                    session_id,
                    query,
                })
            }
            Call::Sessions { agent_id, op } => {
                // Offered only with the host's grants: the call carries its own.
                let grant = self.grant.clone().unwrap_or(Value::Null);
                let request = op.request(&grant).to_string();
                self.stage = Stage::Sessions {
                    agent_id: agent_id.clone(),
                };
                Action::Peer(PeerCall::Sessions { agent_id, request })
            }
            Call::SetModel { agent_id, choice } => {
                if !self.offer.models {
                    return Err(CallError::NotOffered { name: name.clone() });
                }
                self.set_model(agent_id, &choice, None)?
            }
            Call::Models => {
                if !self.offer.models {
                    return Err(CallError::NotOffered { name: name.clone() });
                }
                self.stage = Stage::Models;
                Action::Models
            }
            Call::Create(args) => {
                self.stage = Stage::Creating;
                Action::Directory(Request::Create(CreateInput {
                    creator: self.self_id.clone(),
                    request_id: args.request_id,
                    name: args.name,
                    model: args.model,
                    reasoning: args.reasoning,
                }))
            }
            Call::List {
                archived,
                cursor,
                limit,
            } => {
                self.stage = Stage::Listing;
                Action::Directory(Request::List {
                    archived,
                    cursor,
                    limit,
                })
            }
            Call::Archive { agent_id, archived } => {
                let verb = verb(archived);
                if agent_id == self.self_id {
                    return Err(CallError::Itself { verb });
                }
                self.stage = Stage::Checking {
                    agent_id: agent_id.clone(),
                    archived,
                };
                Action::Directory(Request::Check {
                    caller: self.self_id.clone(),
                    agent_id,
                    archived,
                })
            }
        })
    }

    /// Sets Agent `agent_id`'s explicit model: this Agent's own store, or
    /// the target's `fleetSetModel`, its host checking the model.
    fn set_model(
        &mut self,
        agent_id: String,
        choice: &Choice,
        then: Option<Entry>,
    ) -> Result<Action, CallError> {
        let action = if agent_id == self.self_id {
            // This Agent itself: no round trip through the namespace.
            Action::SetOwnModel(choice.clone())
        } else {
            let choice = serde_json::to_string(choice).map_err(encode)?;
            Action::Peer(PeerCall::SetModel {
                agent_id: agent_id.clone(),
                choice,
            })
        };
        self.stage = Stage::SettingModel { agent_id, then };
        Ok(action)
    }

    /// The model set, or the refusal (the seed's `model:rejected: …`;
    /// others unchanged).
    fn model_set(&self, agent_id: &str, outcome: Outcome) -> Result<Choice, CallError> {
        let name = self.name.clone();
        match outcome {
            Outcome::OwnModel(Ok(set)) => Ok(set),
            Outcome::OwnModel(Err(SetError::Rejected(why))) => Err(CallError::ModelRejected(why)),
            Outcome::OwnModel(Err(SetError::Api(error))) => Err(CallError::Refused { name, error }),
            Outcome::Peer(Peer::Refused(e)) if e.code == MODEL_REJECTED => {
                Err(CallError::ModelRejected(e.message))
            }
            Outcome::Peer(peer) => {
                let v = self.peer_answer(agent_id, peer)?;
                serde_json::from_value::<Choice>(v).map_err(|e| CallError::Malformed {
                    name,
                    agent_id: agent_id.to_owned(),
                    what: "a malformed setModel",
                    why: e.to_string(),
                })
            }
            other => Err(CallError::Unexpected {
                name,
                outcome: format!("{other:?}"),
                step: "model setting".to_owned(),
            }),
        }
    }

    /// Describes `entries`: after asking the host their working
    /// directories, when it reports them.
    fn describe(&mut self, entries: Vec<Entry>, shape: Shape) -> Action {
        if !self.working_directory {
            return answer(&entries, std::iter::repeat(None), shape);
        }
        let ids = entries.iter().map(|e| e.agent_id.clone()).collect();
        self.stage = Stage::Describing { entries, shape };
        Action::WorkingDirectories(ids)
    }

    /// A peer's value decoded, or what the model sees (`what`: the answer's
    /// kind, named when malformed).
    fn peer_value<T: serde::de::DeserializeOwned>(
        &self,
        agent_id: &str,
        peer: Peer,
        what: &str,
    ) -> Result<T, CallError> {
        let v = self.peer_answer(agent_id, peer)?;
        serde_json::from_value(v).map_err(|e| CallError::Unreachable {
            name: self.name.clone(),
            agent_id: agent_id.to_owned(),
            why: format!("malformed {what}: {e}"),
        })
    }

    /// A peer's value, or its refusal or failure as the model sees it.
    fn peer_answer(&self, agent_id: &str, peer: Peer) -> Result<Value, CallError> {
        let name = self.name.clone();
        match peer {
            Peer::Value(v) => Ok(v),
            Peer::Refused(error) => Err(CallError::PeerRefused { name, error }),
            Peer::Failed(why) => Err(CallError::Unreachable {
                name,
                agent_id: agent_id.to_owned(),
                why,
            }),
        }
    }

    /// One directory answer decoded, or what the model sees.
    fn directory_value<T: serde::de::DeserializeOwned>(&self, peer: Peer) -> Result<T, CallError> {
        directory_answer(&self.name, peer)
    }
}

/// One directory answer decoded, or what the model sees: a refusal whose
/// code names its operation (`archive:not_creator`) leads the message; any
/// other is prefixed with the call's `name`.
pub fn directory_answer<T: serde::de::DeserializeOwned>(
    name: &str,
    peer: Peer,
) -> Result<T, CallError> {
    let name = name.to_owned();
    match peer {
        Peer::Value(v) => serde_json::from_value(v).map_err(|e| CallError::DirectoryMalformed {
            name,
            why: e.to_string(),
        }),
        Peer::Refused(e) if e.code.contains(':') => Err(CallError::DirectoryRefused(e)),
        Peer::Refused(error) => Err(CallError::PeerRefused { name, error }),
        Peer::Failed(why) => Err(CallError::DirectoryUnreachable { name, why }),
    }
}

fn verb(archived: bool) -> &'static str {
    if archived {
        "archive"
    } else {
        "unarchive"
    }
}

fn encode(e: serde_json::Error) -> CallError {
    CallError::Encode(e.to_string())
}

fn done(value: &impl serde::Serialize) -> Result<Action, CallError> {
    let value = crate::json::to_value(value).map_err(encode)?;
    Ok(Action::Done(Ok(value)))
}

/// `agents.send`'s answer: where the send stands, and the Session it went to.
fn sent_answer(state: &SendState, session_id: String) -> Result<Action, CallError> {
    let mut answer = crate::json::to_value(state).map_err(encode)?;
    answer["sessionId"] = Value::String(session_id);
    Ok(Action::Done(Ok(answer)))
}

/// The described Agents in `shape`, with the host's working directories.
fn answer<'a>(
    entries: &[Entry],
    dirs: impl Iterator<Item = Option<&'a str>>,
    shape: Shape,
) -> Action {
    let listed = shape != Shape::Created;
    let mut facts = entries
        .iter()
        .zip(dirs)
        .map(|(entry, dir)| self::facts(entry, dir, listed));
    Action::Done(Ok(match shape {
        Shape::Page { cursor } => {
            let mut out = json!({ "agents": facts.collect::<Vec<_>>() });
            if let Some(cursor) = cursor {
                out["cursor"] = Value::String(cursor);
            }
            out
        }
        _ => facts.next().unwrap_or(Value::Null),
    }))
}

/// What the model sees of one Agent: `{agentId, name, model?,
/// reasoning?, workingDirectory}` (and `archived`, `creator?` when
/// `listed`). An unnamed Agent's name is its id.
fn facts(entry: &Entry, host_dir: Option<&str>, listed: bool) -> Value {
    let mut out = json!({
        "agentId": entry.agent_id,
        "name": entry.name.clone().unwrap_or_else(|| entry.agent_id.clone()),
        "workingDirectory": working_directory(host_dir),
    });
    if let Some(model) = &entry.model {
        out["model"] = json!(model);
    }
    if let Some(reasoning) = &entry.reasoning {
        out["reasoning"] = json!(reasoning);
    }
    if listed {
        out["archived"] = json!(entry.archived);
        if let Some(creator) = &entry.creator {
            out["creator"] = json!(creator);
        }
    }
    out
}

#[cfg(all(test, feature = "fleet"))]
mod tests {
    use super::*;

    const ALL: Offer = Offer {
        mail: true,
        sessions: true,
        directory: true,
        archive: true,
        models: true,
        direct: false,
    };

    fn start(offer: Offer, operation: &str, args: Value) -> (Steps, Action) {
        let caller = Caller {
            self_id: "ada",
            session_id: "s1",
            offer,
            working_directory: true,
            grant: None,
            now_ms: 1_000,
        };
        Steps::start(&caller, operation, operation, &args)
    }

    fn granted(grant: Value, now_ms: i64, operation: &str, args: Value) -> Action {
        let caller = Caller {
            self_id: "ada",
            session_id: "s1",
            offer: Offer {
                directory: false,
                ..ALL
            },
            working_directory: false,
            grant: Some(Ok(grant)),
            now_ms,
        };
        Steps::start(&caller, operation, operation, &args).1
    }

    #[test]
    fn every_call_is_checked_against_the_grant_at_that_call() {
        let grant = json!({"agents": ["bob"], "actions": ["read", "sessions.list"],
            "expiresAt": 2_000, "provenance": {"by": "ops"}});
        let read = json!({"agentId": "bob", "sessionId": "s"});
        assert!(matches!(
            granted(grant.clone(), 1_999, "read", read.clone()),
            Action::Peer(PeerCall::Read { .. })
        ));
        // The same grant, found expired by a later call.
        let e = failed(granted(grant.clone(), 2_000, "read", read));
        assert!(e.starts_with("agents.read: grant_expired: "), "{e}");
        let e = failed(granted(
            grant.clone(),
            1,
            "read",
            json!({"agentId": "eve", "sessionId": "s"}),
        ));
        assert!(e.contains("grant_refused") && e.contains("`eve`"), "{e}");
        let e = failed(granted(
            grant.clone(),
            1,
            "send",
            json!({"agentId": "bob", "requestId": "r", "text": "t"}),
        ));
        assert!(e.contains("does not allow `send`"), "{e}");
        // A sessions call carries its grant to the target, which checks it again.
        let Action::Peer(PeerCall::Sessions { agent_id, request }) =
            granted(grant.clone(), 1, "sessions.list", json!({"agentId": "bob"}))
        else {
            panic!("a peer call")
        };
        assert_eq!(agent_id, "bob");
        let request: Value = serde_json::from_str(&request).unwrap();
        assert_eq!(
            request,
            json!({"grant": grant, "op": "sessions.list", "args": {}})
        );
        // No usable grant from the host: refused, naming why.
        let caller = Caller {
            self_id: "ada",
            session_id: "s1",
            offer: ALL,
            working_directory: false,
            grant: Some(Err("fleet().grant returned nothing for Session `s1`".into())),
            now_ms: 1,
        };
        let (_, action) = Steps::start(&caller, "list", "list", &json!({}));
        let e = failed(action);
        assert!(e.contains("returned nothing"), "{e}");
    }

    /// Started with the directory offered: registered first.
    fn registered(operation: &str, args: Value) -> (Steps, Action) {
        let (mut steps, first) = start(ALL, operation, args);
        assert_eq!(first, Action::Register);
        let next = steps.step(Outcome::Registered(Ok(())));
        (steps, next)
    }

    fn refused(code: &str, message: &str) -> Outcome {
        Outcome::Peer(Peer::Refused(PeerError {
            code: code.into(),
            status: Some(409),
            message: message.into(),
        }))
    }

    fn entry(agent_id: &str, model: Option<&str>) -> Value {
        json!({ "agentId": agent_id, "model": model, "archived": false,
                "createdAt": 1, "updatedAt": 1 })
    }

    fn failed(action: Action) -> String {
        match action {
            Action::Done(Err(why)) => why.to_string(),
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn a_malformed_call_is_refused_before_any_peer_or_directory_is_asked() {
        let (_, first) = start(ALL, "wait", json!({ "agentId": "bob" }));
        assert!(failed(first).starts_with("agents.wait: "));
    }

    #[test]
    fn with_the_directory_every_call_registers_first_and_its_failure_ends_the_call() {
        let args = json!({ "agentId": "bob", "sessionId": "s" });
        let (mut steps, first) = start(ALL, "read", args.clone());
        assert_eq!(first, Action::Register);
        let why = CallError::DirectoryUnreachable {
            name: "agents".into(),
            why: "down".into(),
        };
        assert_eq!(
            failed(steps.step(Outcome::Registered(Err(why)))),
            "agents: the fleet's directory could not be reached: down"
        );
        // Without it, the call's own first step at once.
        let (_, first) = start(Offer::default(), "read", args);
        assert!(matches!(first, Action::Peer(PeerCall::Read { .. })));
    }

    #[test]
    fn a_send_is_frozen_then_delivered_and_answers_where_it_stands() {
        let args = json!({ "agentId": "bob", "requestId": "r1", "text": "hi" });
        let (mut steps, action) = registered("send", args);
        let Action::Send(send) = action else {
            panic!("{action:?}")
        };
        assert_eq!(
            (send.from.agent_id.as_str(), send.from.session_id.as_str()),
            ("ada", "s1")
        );
        // An omitted Session is named after the send.
        let session = send.to.session_id.clone();
        assert!(session.starts_with("s_"));
        let pending = SendState::Pending { key: "m_1".into() };
        assert_eq!(
            steps.step(Outcome::Sent(Ok(pending))),
            Action::Deliver("m_1".into())
        );
        // Not delivered now: it stays pending (the alarm retries).
        let Action::Done(Ok(answer)) = steps.step(Outcome::Delivered(None)) else {
            panic!()
        };
        assert_eq!(answer["status"], "pending");
        assert_eq!(answer["sessionId"], json!(session));

        let args = json!({ "agentId": "bob", "sessionId": "s", "requestId": "r1", "text": "hi" });
        let (mut steps, _) = registered("send", args);
        let refused = Outcome::Sent(Err(ApiError::InvalidRequest("text: too long".into())));
        assert_eq!(
            failed(steps.step(refused)),
            "agents.send: invalid_request: text: too long"
        );
    }

    #[test]
    fn a_recall_withdraws_the_pending_send_before_asking_the_target() {
        let args = json!({ "agentId": "bob", "sessionId": "s", "requestId": "r1" });
        let (mut steps, action) = registered("recall", args);
        let Action::Recall(key) = action else {
            panic!("{action:?}")
        };
        let Action::Peer(PeerCall::Recall { key: asked, .. }) =
            steps.step(Outcome::Recalled(Ok(())))
        else {
            panic!()
        };
        assert_eq!(asked, key);
        let answer = steps.step(Outcome::Peer(Peer::Value(
            json!({ "status": "too_late", "commandId": "c1" }),
        )));
        assert!(matches!(answer, Action::Done(Ok(v)) if v["status"] == "too_late"));
    }

    #[test]
    fn a_wait_is_bounded_past_its_own_timeout_and_names_each_failure() {
        let args =
            json!({ "agentId": "bob", "sessionId": "s", "commandId": "c1", "timeoutMs": 500 });
        let (mut steps, action) = registered("wait", args.clone());
        let Action::Peer(call) = action else {
            panic!("{action:?}")
        };
        assert_eq!(call.timeout_ms(), FLEET_CALL_TIMEOUT_MS + 500);
        assert_eq!(
            failed(steps.step(refused("session_not_found", "no s"))),
            "agents.wait: session_not_found: no s"
        );
        let (mut steps, _) = registered("wait", args.clone());
        assert_eq!(
            failed(steps.step(Outcome::Peer(Peer::Failed("no answer within 9 ms".into())))),
            "agents.wait: Agent `bob` could not be reached: no answer within 9 ms"
        );
        let (mut steps, _) = registered("wait", args);
        let malformed = failed(steps.step(Outcome::Peer(Peer::Value(json!(7)))));
        assert!(malformed
            .starts_with("agents.wait: Agent `bob` could not be reached: malformed settlement"));
    }

    /// The typed error tells who said no: the peer (its code), nobody
    /// (unreachable), the target's own facts (busy, unreadable), or the
    /// directory naming its operation.
    #[test]
    fn a_refusal_is_told_apart_from_a_peer_failure() {
        fn error(action: Action) -> CallError {
            match action {
                Action::Done(Err(e)) => e,
                other => panic!("not a refusal: {other:?}"),
            }
        }
        let args =
            json!({ "agentId": "bob", "sessionId": "s", "commandId": "c1", "timeoutMs": 500 });
        let (mut steps, _) = registered("wait", args.clone());
        let e = error(steps.step(refused("session_not_found", "no s")));
        assert!(
            matches!(&e, CallError::PeerRefused { error, .. } if error.code == "session_not_found"),
            "{e:?}"
        );
        let (mut steps, _) = registered("wait", args);
        let e = error(steps.step(Outcome::Peer(Peer::Failed("gone".into()))));
        assert!(
            matches!(&e, CallError::Unreachable { agent_id, why, .. } if agent_id == "bob" && why == "gone"),
            "{e:?}"
        );

        let args = json!({ "agentId": "bob" });
        let (mut steps, _) = registered("archive", args.clone());
        steps.step(Outcome::Peer(Peer::Value(entry("bob", None))));
        let busy = json!({ "status": "busy", "reason": "pending", "message": "work waits" });
        let e = error(steps.step(Outcome::Peer(Peer::Value(busy))));
        assert!(
            matches!(&e, CallError::Busy { verb: "archive", reason, .. } if reason == "pending"),
            "{e:?}"
        );
        let (mut steps, _) = registered("archive", args.clone());
        steps.step(Outcome::Peer(Peer::Value(entry("bob", None))));
        let e = error(steps.step(refused("runtime_closed", "closing")));
        assert!(matches!(e, CallError::Unreadable { .. }), "{e:?}");
        let (mut steps, _) = registered("archive", args);
        let e = error(steps.step(refused("archive:not_creator", "not yours")));
        assert!(matches!(e, CallError::DirectoryRefused(_)), "{e:?}");
        let (_, first) = start(ALL, "wait", json!({ "agentId": "bob" }));
        assert!(matches!(error(first), CallError::Invalid(_)));
    }

    #[test]
    fn archive_is_the_directorys_check_the_targets_flag_then_the_directorys_commit() {
        let args = json!({ "agentId": "bob" });
        let (_, action) = registered("archive", json!({ "agentId": "ada" }));
        assert_eq!(
            failed(action),
            "archive:self: an Agent cannot archive itself"
        );

        let (mut steps, action) = registered("archive", args.clone());
        assert!(matches!(
            action,
            Action::Directory(Request::Check { archived: true, .. })
        ));
        let member = steps.step(Outcome::Peer(Peer::Value(entry("bob", None))));
        assert!(
            matches!(member, Action::Peer(PeerCall::Member { ref agent_id, .. }) if agent_id == "bob")
        );
        let commit = steps.step(Outcome::Peer(Peer::Value(json!({ "status": "archived" }))));
        assert!(matches!(
            commit,
            Action::Directory(Request::SetArchived { archived: true, .. })
        ));
        let mut archived = entry("bob", None);
        archived["archived"] = json!(true);
        let dirs = steps.step(Outcome::Peer(Peer::Value(archived)));
        assert_eq!(dirs, Action::WorkingDirectories(vec!["bob".into()]));
        let done = steps.step(Outcome::WorkingDirectories(vec![Some("/work/bob".into())]));
        assert_eq!(
            done,
            Action::Done(Ok(json!({ "agentId": "bob", "name": "bob",
                "workingDirectory": "/work/bob", "archived": true })))
        );

        // The target is busy, or its store cannot answer: no commit.
        let (mut steps, _) = registered("archive", args.clone());
        steps.step(Outcome::Peer(Peer::Value(entry("bob", None))));
        let busy = json!({ "status": "busy", "reason": "running", "message": "a turn runs" });
        assert_eq!(
            failed(steps.step(Outcome::Peer(Peer::Value(busy)))),
            "archive:running: Agent `bob`: a turn runs"
        );
        let (mut steps, _) = registered("archive", args.clone());
        steps.step(Outcome::Peer(Peer::Value(entry("bob", None))));
        assert_eq!(
            failed(steps.step(refused("storage_incompatible", "v9"))),
            "archive:unreadable: Agent `bob`'s store cannot answer (storage_incompatible: v9)"
        );
        // A directory refusal naming its operation leads the message.
        let (mut steps, _) = registered("archive", args);
        assert_eq!(
            failed(steps.step(refused("archive:not_creator", "bob is not yours"))),
            "archive:not_creator: bob is not yours"
        );
    }

    #[test]
    fn create_sets_the_new_agents_model_through_its_own_host_before_answering() {
        let args = json!({ "requestId": "r1", "model": "openai/gpt-5" });
        let (mut steps, action) = registered("create", args.clone());
        assert!(matches!(action, Action::Directory(Request::Create(ref c)) if c.creator == "ada"));
        let set = steps.step(Outcome::Peer(Peer::Value(entry(
            "a-1",
            Some("openai/gpt-5"),
        ))));
        assert!(
            matches!(set, Action::Peer(PeerCall::SetModel { ref agent_id, .. }) if agent_id == "a-1")
        );
        let ok = Outcome::Peer(Peer::Value(json!({ "model": "openai/gpt-5" })));
        assert_eq!(
            steps.step(ok),
            Action::WorkingDirectories(vec!["a-1".into()])
        );
        // A host-reported path that is not absolute is the root.
        let Action::Done(Ok(facts)) =
            steps.step(Outcome::WorkingDirectories(vec![Some("rel".into())]))
        else {
            panic!()
        };
        assert_eq!(facts["workingDirectory"], "/");
        assert_eq!(facts["model"], "openai/gpt-5");
        assert!(facts.get("archived").is_none());

        let (mut steps, _) = registered("create", args);
        steps.step(Outcome::Peer(Peer::Value(entry(
            "a-1",
            Some("openai/gpt-5"),
        ))));
        assert_eq!(
            failed(steps.step(refused(MODEL_REJECTED, "not offered"))),
            "model:rejected: not offered"
        );
    }

    #[test]
    fn set_model_on_itself_writes_its_own_store() {
        let args = json!({ "agentId": "ada", "model": "openai/gpt-5" });
        let (mut steps, action) = registered("setModel", args.clone());
        assert!(matches!(action, Action::SetOwnModel(ref c) if c.model == "openai/gpt-5"));
        let rejected = Outcome::OwnModel(Err(SetError::Rejected("no key".into())));
        assert_eq!(failed(steps.step(rejected)), "model:rejected: no key");
        let (mut steps, _) = registered("setModel", args);
        let set = Choice {
            model: "openai/gpt-5".into(),
            reasoning: None,
        };
        assert_eq!(
            steps.step(Outcome::OwnModel(Ok(set))),
            Action::Done(Ok(json!({ "agentId": "ada", "model": "openai/gpt-5" })))
        );
    }

    #[test]
    fn a_malformed_answer_names_what_was_malformed() {
        let (mut steps, _) = registered("archive", json!({ "agentId": "bob" }));
        steps.step(Outcome::Peer(Peer::Value(entry("bob", None))));
        let why = failed(steps.step(Outcome::Peer(Peer::Value(json!(7)))));
        assert!(
            why.starts_with("agents.archive: Agent `bob` answered malformed facts: "),
            "{why}"
        );
        let args = json!({ "agentId": "bob", "model": "openai/gpt-5" });
        let (mut steps, _) = registered("setModel", args);
        let why = failed(steps.step(Outcome::Peer(Peer::Value(json!(7)))));
        assert!(
            why.starts_with("agents.setModel: Agent `bob` answered a malformed setModel: "),
            "{why}"
        );
        let (mut steps, _) = registered("list", json!({}));
        let why = failed(steps.step(Outcome::Peer(Peer::Value(json!(7)))));
        assert!(
            why.starts_with("agents.list: the directory's answer is malformed: "),
            "{why}"
        );
    }

    #[test]
    fn list_answers_a_page_with_its_cursor() {
        let (mut steps, action) = registered("list", json!({}));
        assert!(matches!(action, Action::Directory(Request::List { .. })));
        let page = json!({ "agents": [entry("bob", None), entry("cy", None)], "cursor": "k" });
        let dirs = steps.step(Outcome::Peer(Peer::Value(page)));
        assert_eq!(
            dirs,
            Action::WorkingDirectories(vec!["bob".into(), "cy".into()])
        );
        let Action::Done(Ok(out)) = steps.step(Outcome::WorkingDirectories(vec![None, None]))
        else {
            panic!()
        };
        assert_eq!(out["cursor"], "k");
        assert_eq!(out["agents"][1]["agentId"], "cy");
        assert_eq!(out["agents"][1]["archived"], false);
    }

    #[test]
    fn an_outcome_that_answers_no_step_ends_the_call() {
        let (mut steps, _) = registered("list", json!({}));
        let why = failed(steps.step(Outcome::Delivered(None)));
        assert!(why.starts_with("agents.list: "), "{why}");
    }

    #[test]
    fn a_peer_answer_is_a_value_a_refusal_or_malformed() {
        assert_eq!(Peer::parse(r#"{"value":1}"#), Peer::Value(json!(1)));
        assert!(matches!(
            Peer::parse(r#"{"error":{"code":"x","message":"m"}}"#),
            Peer::Refused(e) if e.code == "x" && e.status.is_none()
        ));
        assert!(matches!(Peer::parse("{"), Peer::Failed(_)));
    }
}
