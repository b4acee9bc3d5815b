//! The fleet in the Durable Object (seed: "Agent fleet"): the `agents`
//! module's calls (`src/fleet.rs` decides what each means) performed over
//! the shim's transport to the peer Agents' Durable Objects of the same
//! namespace (`ShiitakeDO#fleet()`, `js/do/hooks.mjs`), and the RPC entry points a
//! peer reaches: `receiveMail`, `fleetRead`, `fleetSettlement`,
//! `fleetRecall`, `fleetMember` (archive and unarchive at the target), and
//! the host-only `eraseAgent`.
//!
//! With `fleet().directory` the Agent directory (`crate::fleet::directory`,
//! held by the object named `shiitake.directory`) backs `agents.create` and
//! `agents.list`, this Agent registers itself there as its first request of
//! any kind starts (`join_directory`: peers find it even if it never uses
//! the fleet), and every send is looked up before it is carried (absent:
//! undeliverable `recipient_offline` at once; archived or erased:
//! `recipient_left`).
//! With `fleet().archive` too, `agents.archive` and `agents.unarchive`:
//! the directory's check, the target's own facts (`crate::fleet::member`),
//! then the directory's commit.
//!
//! Every peer call is bounded in time (`FLEET_CALL_TIMEOUT_MS`, plus the
//! wait's own `timeoutMs`) and its answer in size (`FLEET_BODY_BYTES_MAX`,
//! checked by the shim). A peer answers `{value}` or `{error: {code, status,
//! message}}`; refusals reach the model as the tool call's error, naming
//! the code (`agents.read: session_not_found: ...`).

use super::bindings::{self, error_message, JsFleet};
use super::{blame, Inner, ShiitakeCore};
use crate::error::ApiError;
use crate::fleet::directory::{self, Request};
use crate::fleet::member;
pub(super) use crate::fleet::steps::Peer;
use crate::fleet::steps::{directory_answer, MODEL_REJECTED};
use crate::fleet::{self, Offer, ReadQuery, WaitAnswer};
use crate::limits::{FLEET_CALL_TIMEOUT_MS, FLEET_WAIT_TIMEOUT_MS_MAX};
use crate::mail::{self, Acceptance, Mail};
use crate::model::preference::Choice;
use crate::model_choice::SetError;
use futures::future::select;
use serde::Deserialize;
use serde_json::{json, Value};
use std::cell::Cell;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
// What only the `agents` module's calls use (a lean build has none).
#[cfg(feature = "fleet")]
use {
    crate::fleet::directory::Entry,
    crate::fleet::steps::{Action, Caller, Outcome, PeerCall, Steps},
    crate::run::operation::OperationCall,
};

/// `fleet()` as the shim describes it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    /// This Agent's own id (`ctx.id.name`), when the platform tells it.
    #[serde(default, rename = "self")]
    self_id: Option<String>,
    #[serde(default)]
    cancellation_text: bool,
    #[serde(default)]
    directory: bool,
    #[serde(default)]
    archive: bool,
    #[serde(default)]
    working_directory: bool,
    /// `fleet().models`: the host authorizes `agents.setModel` and
    /// `agents.models`.
    #[serde(default)]
    models: bool,
    /// `fleet().direct`: the `agents` operations are also direct tools.
    #[serde(default)]
    direct: bool,
    /// The host carries mail (`namespace` or `deliver`): `agents.send`
    /// and `agents.recall`, and replies.
    #[serde(default)]
    mail: bool,
    /// `fleet().grant`: the model's fleet grants, read at each call.
    #[serde(default)]
    grant: bool,
    /// `fleet()` threw or is malformed: why.
    #[serde(default)]
    error: Option<String>,
}

/// The host's fleet, decoded once per instance.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
pub struct HostFleet {
    pub js: JsFleet,
    /// This Agent's id in the namespace: the `from` of its mail.
    pub self_id: String,
    pub cancellation_text: bool,
    /// The operations beyond send/recall/wait/read the host authorizes.
    pub offer: Offer,
    working_directory: bool,
    /// The directory holds this Agent (known in this instance).
    joined: Cell<bool>,
}

impl HostFleet {
    /// `None` when the host enables no fleet; an error when it is unusable
    /// (the `agents` module is then not offered and peers are refused).
    pub fn new(js: JsValue) -> Result<Option<HostFleet>, String> {
        if js.is_undefined() || js.is_null() {
            return Ok(None);
        }
        fleet::available().map_err(|e| format!("fleet(): {e}"))?;
        let js: JsFleet = js.unchecked_into();
        let spec: Spec = crate::json::from_text(&js.spec()).map_err(|e| format!("fleet(): {e}"))?;
        if let Some(error) = spec.error {
            return Err(error);
        }
        let self_id = spec.self_id.ok_or_else(|| {
            "fleet(): this Durable Object has no name (`ctx.id.name`); address each Agent with \
             `namespace.idFromName(agentId)` so its peers can find it by the same id"
                .to_owned()
        })?;
        fleet::validate_agent_id(&self_id).map_err(|e| format!("fleet(): this Agent's {e}"))?;
        if spec.archive && !spec.directory {
            return Err("fleet().archive needs fleet().directory: true".into());
        }
        Ok(Some(HostFleet {
            js,
            self_id,
            cancellation_text: spec.cancellation_text,
            offer: Offer {
                mail: spec.mail,
                sessions: spec.grant,
                directory: spec.directory,
                archive: spec.archive,
                models: spec.models,
                direct: spec.direct,
            },
            working_directory: spec.working_directory,
            joined: Cell::new(false),
        }))
    }

    /// The host's fleet grant for Session `session_id` (`fleet().grant`),
    /// or why there is none.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    fn grant(&self, session_id: &str) -> Result<Value, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Answer {
            #[serde(default)]
            value: Option<Value>,
            #[serde(default)]
            error: Option<String>,
        }
        let answer: Answer = crate::json::from_text(&self.js.grant(session_id))
            .map_err(|e| format!("fleet().grant: {e}"))?;
        match answer {
            Answer { error: Some(e), .. } => Err(format!("fleet().grant: {e}")),
            Answer {
                value: Some(grant), ..
            } if !grant.is_null() => Ok(grant),
            _ => Err(format!(
                "fleet().grant gives Session `{session_id}` no fleet grant"
            )),
        }
    }

    /// The settled-work observer that stages the replies this Agent owes,
    /// with the host's text for cancelled work (`fleet().cancellationText`,
    /// seed: "the host's cancellation text such as Work cancelled by Ada.").
    pub fn replies(&self) -> mail::Replies {
        if !self.cancellation_text {
            return mail::Replies::new();
        }
        let js: JsFleet = JsValue::clone(&self.js).unchecked_into();
        mail::Replies::with_cancellation_text(Box::new(move |meta| {
            js.cancellation_text(&meta.to_string())
        }))
    }
}

/// Awaits one peer call under `timeout_ms`, aborting it past that.
pub(super) async fn peer_call(
    promise: js_sys::Promise,
    controller: &web_sys::AbortController,
    timeout_ms: u64,
) -> Peer {
    let reply = bindings::within(JsFuture::from(promise), timeout_ms, controller, 0).await;
    match reply {
        None => Peer::Failed(format!("no answer within {timeout_ms} ms")),
        Some(Err(e)) => Peer::Failed(error_message(&e)),
        Some(Ok(text)) => Peer::parse(&text.as_string().unwrap_or_default()),
    }
}

/// An [`ApiError`] as a peer answer's error.
pub(super) fn error_answer(e: &ApiError) -> String {
    json!({ "error": { "code": e.code(), "status": e.status(), "message": e.to_string() } })
        .to_string()
}

fn value_answer(value: &impl serde::Serialize) -> String {
    // Written around the value's JSON text: no `Value` serializer per type.
    match serde_json::to_string(value) {
        Ok(value) => format!(r#"{{"value":{value}}}"#),
        Err(e) => error_answer(&ApiError::Internal(e.to_string())),
    }
}

impl Inner {
    /// Whether the host enabled a usable fleet.
    pub(super) fn fleet(&self) -> Option<&HostFleet> {
        match &self.fleet {
            // A lean build never has one: what only a fleet reaches is left out.
            Ok(Some(fleet)) if cfg!(feature = "fleet") => Some(fleet),
            _ => None,
        }
    }
}

#[cfg(feature = "fleet")]
impl Inner {
    /// Performs one `agents.*` call (after its gate): each step
    /// `crate::fleet::steps` names, until it answers. `Err`: the model
    /// sees why.
    pub(super) async fn fleet_operation(
        &self,
        op: &OperationCall,
        stopper: &web_sys::AbortController,
    ) -> Result<Value, String> {
        let fleet = match (&self.fleet, self.fleet()) {
            (_, Some(fleet)) => fleet,
            (Err(why), _) => return Err(format!("agents: {why}")),
            (Ok(_), None) => return Err("agents: this Agent's host enables no fleet".into()),
        };
        let caller = Caller {
            self_id: &fleet.self_id,
            session_id: &op.of.session_id,
            offer: fleet.offer,
            working_directory: fleet.working_directory,
            // Read at each call: the host may change or expire it.
            grant: fleet.offer.sessions.then(|| fleet.grant(&op.of.session_id)),
            now_ms: bindings::now_ms(),
        };
        let (mut steps, mut action) =
            Steps::start(&caller, &op.operation, &op.guest_name, &op.args);
        loop {
            let outcome = match action {
                // What the model sees of a failed call is its text.
                Action::Done(result) => return result.map_err(|e| e.to_string()),
                Action::Register => {
                    Outcome::Registered(self.ensure_registered(fleet, stopper).await)
                }
                Action::Directory(request) => {
                    Outcome::Peer(self.directory_call(fleet, &request, stopper).await)
                }
                Action::Peer(call) => Outcome::Peer(self.peer(fleet, &call, stopper).await),
                Action::Send(send) => {
                    Outcome::Sent(self.with_ctx(|ctx| mail::send(ctx, &send.outgoing())))
                }
                Action::Deliver(key) => Outcome::Delivered(self.deliver_now(fleet, &key).await),
                Action::Recall(key) => {
                    Outcome::Recalled(self.with_ctx(|ctx| mail::recall(ctx, &key)).map(drop))
                }
                Action::SetOwnModel(choice) => Outcome::OwnModel(self.set_agent_model(&choice)),
                Action::Models => Outcome::Models(self.available_models()),
                Action::WorkingDirectories(ids) => Outcome::WorkingDirectories(
                    ids.iter()
                        .map(|id| fleet.js.working_directory(id))
                        .collect(),
                ),
            };
            action = steps.step(outcome);
        }
    }

    /// Performs one peer call.
    async fn peer(
        &self,
        fleet: &HostFleet,
        call: &PeerCall,
        stopper: &web_sys::AbortController,
    ) -> Peer {
        let signal = stopper.signal();
        let promise = match call {
            PeerCall::Recall {
                agent_id,
                session_id,
                key,
            } => fleet.js.recall(agent_id, session_id, key, &signal),
            PeerCall::Settlement {
                agent_id,
                session_id,
                command_id,
                timeout_ms,
            } => fleet.js.settlement(
                agent_id,
                session_id,
                command_id,
                *timeout_ms as f64,
                &signal,
            ),
            PeerCall::Read {
                agent_id,
                session_id,
                query,
            } => fleet.js.read(agent_id, session_id, query, &signal),
            PeerCall::SetModel { agent_id, choice } => {
                fleet.js.set_model(agent_id, choice, &signal)
            }
            PeerCall::Member { agent_id, request } => fleet.js.member(agent_id, request, &signal),
            PeerCall::Sessions { agent_id, request } => {
                fleet.js.sessions(agent_id, request, &signal)
            }
        };
        peer_call(promise, stopper, call.timeout_ms()).await
    }
}

impl Inner {
    /// Performs one directory request.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))] // a lean build carries no mail
    async fn directory_call(
        &self,
        fleet: &HostFleet,
        request: &Request,
        stopper: &web_sys::AbortController,
    ) -> Peer {
        let json = match serde_json::to_string(request) {
            Ok(json) => json,
            Err(e) => return Peer::Failed(e.to_string()),
        };
        let promise = fleet.js.directory(&json, &stopper.signal());
        peer_call(promise, stopper, FLEET_CALL_TIMEOUT_MS).await
    }
}

#[cfg(feature = "fleet")]
impl Inner {
    /// Joins the directory as this instance starts (the first request of
    /// any kind): an Agent that never uses the fleet is still found by its
    /// peers. A failure is logged; the next fleet call tries again.
    pub(super) async fn join_directory(&self) {
        let Some(fleet) = self.fleet() else {
            return;
        };
        let Ok(stopper) = web_sys::AbortController::new() else {
            return;
        };
        if let Err(why) = self.ensure_registered(fleet, &stopper).await {
            bindings::log_warn(format!(
                "this Agent did not join the fleet's directory: {why}"
            ));
        }
    }

    /// Registers this Agent in the directory (an Agent reached by URL,
    /// never created through `agents.create`) unless it is known to be
    /// there: once per instance, and once per store as its durable mark
    /// says. A store this instance created is marked at a later start
    /// instead: its opening request writes nothing more for it
    /// (`tests/e2e/statements.test.mjs`); the register is idempotent.
    async fn ensure_registered(
        &self,
        fleet: &HostFleet,
        stopper: &web_sys::AbortController,
    ) -> Result<(), crate::fleet::steps::CallError> {
        let store = |error| crate::fleet::steps::CallError::Store {
            name: "agents".to_owned(),
            error,
        };
        if !fleet.offer.directory || fleet.joined.get() {
            return Ok(());
        }
        if !member::registered(&self.sql).map_err(store)? {
            let request = Request::Register {
                agent_id: fleet.self_id.clone(),
            };
            let answered = self.directory_call(fleet, &request, stopper).await;
            let _: Entry = directory_answer("agents", answered)?;
            if !self.machine.borrow().created_empty() {
                member::mark_registered(&self.sql, bindings::now_ms()).map_err(store)?;
            }
        }
        fleet.joined.set(true);
        Ok(())
    }
}

impl Inner {
    /// The directory's word on the recipient of a send before it is
    /// carried: `None` to carry it, or the reason it is undeliverable now.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))] // a lean build carries no mail
    pub(super) async fn directory_verdict(
        &self,
        fleet: &HostFleet,
        agent_id: &str,
    ) -> Result<Option<mail::Reason>, String> {
        if !fleet.offer.directory {
            return Ok(None);
        }
        let controller =
            web_sys::AbortController::new().map_err(|e| bindings::error_message(&e))?;
        let request = Request::Lookup {
            agent_id: agent_id.to_owned(),
        };
        let answered = self.directory_call(fleet, &request, &controller).await;
        let found: directory::Lookup =
            directory_answer("mail", answered).map_err(|e| e.to_string())?;
        Ok(match found.entry {
            Some(e) if e.archived => Some(mail::Reason::RecipientLeft),
            Some(_) => None,
            None if found.erased => Some(mail::Reason::RecipientLeft),
            None => Some(mail::Reason::RecipientOffline),
        })
    }

    /// Refuses a peer call (the answer to send back) when this runtime has
    /// no usable fleet or cannot serve.
    fn fleet_ready(&self) -> Result<(), String> {
        match (&self.fleet, self.fleet()) {
            (_, Some(_)) => {}
            (Err(why), _) => return Err(error_answer(&ApiError::HostMisconfigured(why.clone()))),
            (Ok(_), None) => {
                return Err(refusal(
                    "fleet_disabled",
                    403,
                    "this Agent's runtime has no fleet (its host's fleet() returns nothing)",
                ))
            }
        }
        self.ready().map_err(|e| error_answer(&e))
    }
}

/// The host's decision on one mail, as the shim passes it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Decision {
    #[serde(default)]
    meta: Option<Value>,
    #[serde(default)]
    refuse: Option<String>,
}

#[wasm_bindgen]
impl ShiitakeCore {
    /// A peer's mail (JSON) after the host's `acceptMail` decision (JSON
    /// `{meta?}` or `{refuse}`): the receipt as `{value}` or `{error}`.
    #[wasm_bindgen(js_name = receiveMail)]
    pub fn receive_mail(&self, mail: &str, decision: &str) -> String {
        let _scope = blame::enter(self.inner.scope(None));
        let inner = &self.inner;
        if let Err(answer) = inner.fleet_ready() {
            return answer;
        }
        if inner.fleet().is_some_and(|f| !f.offer.mail) {
            // It could never reply: its host carries no mail.
            return refusal(
                "fleet_disabled",
                403,
                "this Agent's host carries no mail (fleet() has no namespace and no deliver), \
                 so it takes no delegations",
            );
        }
        let mail: Mail = match strict_json(mail) {
            Ok(mail) => mail,
            Err(e) => return error_answer(&ApiError::InvalidRequest(format!("mail: {e}"))),
        };
        let decision: Decision = match crate::json::from_text(decision) {
            Ok(d) => d,
            Err(e) => {
                return error_answer(&ApiError::HostMisconfigured(format!("acceptMail: {e}")))
            }
        };
        let acceptance = match decision.refuse {
            // The documented reason for an Agent that left the fleet.
            Some(reason) if reason == "left" => Acceptance::Left,
            Some(reason) => Acceptance::Refuse { reason },
            None => Acceptance::Accept {
                meta: decision.meta.map(|m| m.to_string()),
            },
        };
        // An archived Agent answers every send `Left`.
        let acceptance = match member::acceptance(&inner.sql, &mail, acceptance) {
            Ok(a) => a,
            Err(e) => return error_answer(&ApiError::from(e)),
        };
        match inner.with_ctx(|ctx| mail::receive(ctx, &mail, &acceptance)) {
            Ok(landing) => {
                // An admitted prompt or reply line: its frames, its turn.
                inner.land(landing.landed);
                inner.mail_after_transition();
                value_answer(&landing.value)
            }
            Err(e) => error_answer(&e),
        }
    }

    /// A peer's bounded read of one Session (`query`: `{limit?, cursor?}`):
    /// `{value: page}` or `{error}`.
    #[wasm_bindgen(js_name = fleetRead)]
    pub fn fleet_read(&self, session_id: &str, query: &str) -> String {
        let _scope = blame::enter(self.inner.scope(Some(session_id)));
        let inner = &self.inner;
        if let Err(answer) = inner.fleet_ready() {
            return answer;
        }
        let query: ReadQuery = match strict_json(query) {
            Ok(q) => q,
            Err(e) => return error_answer(&ApiError::InvalidRequest(format!("query: {e}"))),
        };
        match inner.with_ctx(|ctx| fleet::read(ctx, inner.extensions(), session_id, &query)) {
            Ok(page) => value_answer(&page),
            Err(e) => error_answer(&e),
        }
    }

    /// A peer's `agents.wait`: the command's settlement, waiting up to
    /// `timeout_ms` (at most `FLEET_WAIT_TIMEOUT_MS_MAX`) for it.
    #[wasm_bindgen(js_name = fleetSettlement)]
    pub async fn fleet_settlement(
        &self,
        session_id: String,
        command_id: String,
        timeout_ms: f64,
    ) -> String {
        let scope = self.inner.scope(Some(&session_id));
        blame::scoped(
            scope,
            self.inner
                .fleet_settlement(&session_id, &command_id, timeout_ms),
        )
        .await
    }

    /// A peer's (or a directory's create) setting of this Agent's explicit
    /// model, `choice` = `{model, reasoning?}` JSON: checked against this
    /// host's offered models, signed-in providers and key sources, then
    /// stored for the next turns. `{value: {model, reasoning?}}`, or
    /// `{error: {code: "model_rejected", status: 422, message}}` (the
    /// caller's `model:rejected: <message>`), or another `{error}`.
    #[wasm_bindgen(js_name = fleetSetModel)]
    pub fn fleet_set_model(&self, choice: &str) -> String {
        let _scope = blame::enter(self.inner.scope(None));
        let inner = &self.inner;
        if let Err(answer) = inner.fleet_ready() {
            return answer;
        }
        let choice: Choice = match strict_json(choice) {
            Ok(c) => c,
            Err(e) => return error_answer(&ApiError::InvalidRequest(format!("choice: {e}"))),
        };
        match inner.set_agent_model(&choice) {
            Ok(set) => value_answer(&set),
            Err(SetError::Rejected(why)) => refusal(MODEL_REJECTED, 422, &why),
            Err(SetError::Api(e)) => error_answer(&e),
        }
    }

    /// A peer's recall of the send keyed `key` (the requestId its mail was
    /// admitted under): `{value: {status: accepted|too_late|unknown}}`.
    #[wasm_bindgen(js_name = fleetRecall)]
    pub fn fleet_recall(&self, session_id: &str, key: &str) -> String {
        let _scope = blame::enter(self.inner.scope(Some(session_id)));
        let inner = &self.inner;
        if let Err(answer) = inner.fleet_ready() {
            return answer;
        }
        match inner.with_ctx(|ctx| fleet::recall(ctx, session_id, key)) {
            Ok((answer, cancellation)) => {
                if let Some(c) = cancellation {
                    inner.apply(crate::http::cancellation_effects(
                        session_id,
                        c.stopped_turn,
                        c.settled,
                    ));
                }
                value_answer(&answer)
            }
            Err(e) => error_answer(&e),
        }
    }
}

#[wasm_bindgen]
impl ShiitakeCore {
    /// Fleet Sessions and delegation at this Agent (`self_id`: its id,
    /// `ctx.id.name`): one request `{grant, op, args, meta?}` from the host
    /// API (`js/fleet.mjs`) or a peer's `agents.sessions.*`, its grant
    /// checked here at this call, served as the HTTP route that does the
    /// same (`crate::fleet::sessions`). `{value}` or `{error: {code,
    /// status, message}}`. Needs no `fleet()`: the grant is the authority.
    #[wasm_bindgen(js_name = fleetSessions)]
    pub fn fleet_sessions(&self, self_id: &str, request: &str) -> String {
        let _scope = blame::enter(self.inner.scope(None));
        self.inner.fleet_sessions(self_id, request)
    }
}

impl Inner {
    /// A lean build refuses naming the feature, and carries none of it.
    #[cfg(not(feature = "fleet"))]
    fn fleet_sessions(&self, _: &str, _: &str) -> String {
        match fleet::available() {
            Err(e) => error_answer(&e),
            Ok(()) => unreachable!("a lean build has no fleet"),
        }
    }

    #[cfg(feature = "fleet")]
    fn fleet_sessions(&self, self_id: &str, request: &str) -> String {
        use crate::fleet::sessions::{Outcome, Serve, Step};
        if let Err(e) = self.ready() {
            return error_answer(&e);
        }
        let (mut serve, mut step) = Serve::start(self_id, bindings::now_ms(), request);
        loop {
            let outcome = match step {
                Step::Done(Ok(value)) => return value_answer(&value),
                Step::Done(Err(e)) => {
                    let status = e.status.unwrap_or(500);
                    return refusal(&e.code, status, &e.message);
                }
                Step::Route(req) => {
                    let mut response = self.serve(&req);
                    self.apply(std::mem::take(&mut response.effects));
                    self.publish_projections();
                    Outcome::Routed {
                        status: response.status,
                        body: response.body,
                    }
                }
                Step::Settlement {
                    session_id,
                    command_id,
                } => Outcome::Settled(
                    self.with_ctx(|ctx| fleet::settlement(ctx, &session_id, &command_id)),
                ),
            };
            step = serve.step(outcome);
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberRequest {
    archived: bool,
}

#[wasm_bindgen]
impl ShiitakeCore {
    /// A peer's `agents.archive` / `agents.unarchive` at this target
    /// (`request`: `{archived}`): `{value: {status: archived | unarchived
    /// | busy, reason?, message?}}` or `{error}` (a store this runtime
    /// cannot read answers `storage_incompatible`).
    #[wasm_bindgen(js_name = fleetMember)]
    pub fn fleet_member(&self, request: &str) -> String {
        let _scope = blame::enter(self.inner.scope(None));
        let inner = &self.inner;
        if let Err(answer) = inner.fleet_ready() {
            return answer;
        }
        let request: MemberRequest = match strict_json(request) {
            Ok(r) => r,
            Err(e) => return error_answer(&ApiError::InvalidRequest(format!("request: {e}"))),
        };
        match inner.with_ctx(|ctx| member::set_archived(ctx, request.archived)) {
            Ok(answer) => value_answer(&answer),
            Err(e) => error_answer(&e),
        }
    }

    /// Host-only erasure of Agent `agent_id`: its directory entry removed
    /// (its id remembered as erased, so mail to it is undeliverable
    /// `recipient_left`), then its storage deleted (`fleetErase` on its
    /// object: `ctx.storage.deleteAll()`). Answers `{value: {agentId,
    /// erased}}` (`erased`: an entry was removed) or `{error}`. Needs
    /// `fleet().directory`. Erasing twice is no error.
    #[wasm_bindgen(js_name = eraseAgent)]
    pub async fn erase_agent(&self, agent_id: String) -> String {
        let scope = self.inner.scope(None);
        blame::scoped(scope, self.inner.erase_agent(&agent_id)).await
    }
}

impl Inner {
    async fn erase_agent(&self, agent_id: &str) -> String {
        let fleet = match (&self.fleet, self.fleet()) {
            (_, Some(fleet)) if fleet.offer.directory => fleet,
            (Err(why), _) => return error_answer(&ApiError::HostMisconfigured(why.clone())),
            (Ok(_), _) => return refusal(
                "fleet_disabled",
                403,
                "eraseAgent needs fleet().directory: true (the directory holds erasure addresses)",
            ),
        };
        if let Err(e) = fleet::validate_agent_id(agent_id) {
            return error_answer(&e);
        }
        let controller = match web_sys::AbortController::new() {
            Ok(c) => c,
            Err(e) => return error_answer(&ApiError::Internal(bindings::error_message(&e))),
        };
        let request = Request::Erase {
            agent_id: agent_id.to_owned(),
        };
        let json = serde_json::to_string(&request).unwrap_or_default();
        let promise = fleet.js.directory(&json, &controller.signal());
        let erased = match peer_call(promise, &controller, FLEET_CALL_TIMEOUT_MS).await {
            Peer::Value(v) => v.get("erased").and_then(Value::as_bool).unwrap_or(false),
            Peer::Refused(e) => return refusal(&e.code, e.status.unwrap_or(409), &e.message),
            Peer::Failed(why) => {
                return refusal(
                    "directory_unreachable",
                    503,
                    &format!("the fleet's directory could not be reached: {why}"),
                )
            }
        };
        let promise = fleet.js.erase(agent_id, &controller.signal());
        match peer_call(promise, &controller, FLEET_CALL_TIMEOUT_MS).await {
            Peer::Value(_) => value_answer(&json!({ "agentId": agent_id, "erased": erased })),
            Peer::Refused(e) => refusal(&e.code, e.status.unwrap_or(500), &e.message),
            Peer::Failed(why) => refusal(
                "agent_unreachable",
                503,
                &format!("Agent `{agent_id}`'s storage could not be deleted (its entry is gone; retry): {why}"),
            ),
        }
    }
}

impl Inner {
    async fn fleet_settlement(
        &self,
        session_id: &str,
        command_id: &str,
        timeout_ms: f64,
    ) -> String {
        if let Err(answer) = self.fleet_ready() {
            return answer;
        }
        if !timeout_ms.is_finite()
            || !(0.0..=FLEET_WAIT_TIMEOUT_MS_MAX as f64).contains(&timeout_ms)
        {
            return error_answer(&ApiError::InvalidRequest(format!(
                "timeoutMs: 0..={FLEET_WAIT_TIMEOUT_MS_MAX}"
            )));
        }
        let read = || self.with_ctx(|ctx| fleet::settlement(ctx, session_id, command_id));
        match read() {
            Ok(WaitAnswer::Pending { .. }) if timeout_ms >= 1.0 => {}
            Ok(answer) => return value_answer(&answer),
            Err(e) => return error_answer(&e),
        }
        match self.observers.wait(command_id) {
            Err(super::watch::Full) => return error_answer(&ApiError::TooManyObservers),
            Ok(settled) => {
                let _ = select(settled, bindings::sleep(timeout_ms as u64)).await;
            }
        }
        match read() {
            Ok(answer) => value_answer(&answer),
            Err(e) => error_answer(&e),
        }
    }
}

/// A refusal of a peer call that is no [`ApiError`] of the HTTP contract.
pub(super) fn refusal(code: &str, status: u16, message: &str) -> String {
    json!({ "error": { "code": code, "status": status, "message": message } }).to_string()
}

/// JSON text into `T`, refusing repeated keys (`crate::json::strict`) and
/// naming the bad field.
fn strict_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let value = crate::json::strict(text.as_bytes()).map_err(|e| e.to_string())?;
    crate::json::decode(value)
}
