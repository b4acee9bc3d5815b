//! Mail between Agents (seed: "Agent fleet", "Delegated replies"),
//! sans-IO. An Agent freezes a mail in its outbox in one transition
//! ([`send`]); the host carries it to the recipient's Durable Object, whose
//! runtime admits it ([`receive`]) and answers a [`Receipt`]; the sender
//! records the receipt or a failure ([`delivered`], [`failed`]; retries on
//! the one alarm, [`next_deadline`]). When a delegated command settles, the
//! recipient's runtime stages the reply in its own outbox in the settling
//! transition ([`Replies`], an `OnSettled`); the parent authenticates it on
//! receipt and admits it as one user-role line whose verified facts the
//! model context renders inside `<fungi_agent_reply …>` ([`render`]).
//!
//! Tables (created on first use, outside the versioned runtime schema):
//! the outbox (frozen mails, their state, attempts, next attempt, receipt)
//! and the inbox (received mail keys: the command each was admitted as,
//! where its reply goes, and for an authenticated reply its verified facts).

use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::session::command::Delivery;
use crate::store::Store;
use serde::{Deserialize, Serialize};

/// One end of a mail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Address {
    pub agent_id: String,
    pub session_id: String,
}

/// How delegated work ended, as its reply says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    Failed,
    Interrupted,
    Cancelled,
    /// The child Session was deleted before its work settled.
    OutcomeUnknown,
    /// The send never reached its recipient (`reason` says why).
    Undeliverable,
}

/// Why a send is undeliverable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Not reachable after every retry (or no such Agent).
    RecipientOffline,
    /// The recipient refuses mail for good (archived, erased).
    RecipientLeft,
}

/// The facts of a reply, each with one setter (the replying runtime, from
/// the exact rows of the settled command).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplyFacts {
    /// The child's command (the send's receipt); absent when undeliverable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
    pub outcome: Outcome,
    /// Only for failed, interrupted and outcome_unknown; bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
    /// Only for undeliverable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

/// A mail as frozen by its sender and carried Durable Object to Durable
/// Object (closed, bounded JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mail {
    /// Unique per sender: a send's derives from the caller identity
    /// ([`send_key`]); a reply's is `<send key>:reply:0`.
    pub key: String,
    pub from: Address,
    pub to: Address,
    /// Where a reply goes: `"<agentId>/<sessionId>"` of the sender for a
    /// delegation; empty on a reply (nothing answers a reply).
    pub reply_to: String,
    pub text: String,
    #[serde(default)]
    pub delivery: Delivery,
    /// Present exactly on replies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<ReplyFacts>,
}

/// What the recipient answers a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum Receipt {
    /// Admitted (or admitted before: the same receipt again).
    #[serde(rename_all = "camelCase")]
    Accepted { command_id: String },
    /// Refused for good; the sender stops retrying. `recipient_left` for an
    /// archived or erased recipient; a reply that fails authentication, a
    /// fenced (recalled) key or malformed mail is `refused` with a reason.
    #[serde(rename_all = "camelCase")]
    Refused { reason: String },
    /// The recipient left: the sender's runtime answers its own Session
    /// with an `undeliverable` reply (`recipient_left`).
    Left,
}

/// The caller identity a send is keyed by (seed: the host scopes the
/// caller's requestId to the sending Agent and invoking Session and the
/// target Agent and Session; replay uses it, never a tool call id).
pub fn send_key(from: &Address, to: &Address, request_id: &str) -> String {
    let _ = (from, to, request_id);
    todo!("mail::send_key")
}

/// A send as the model's `agents.send` asks for it; `from` comes from the
/// invoking run, never from model input.
#[derive(Debug, Clone)]
pub struct Outgoing<'a> {
    pub from: Address,
    pub to: Address,
    pub request_id: &'a str,
    pub text: &'a str,
    pub delivery: Delivery,
}

/// Where a frozen send stands, as `agents.send` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum SendState {
    /// Frozen, not yet delivered (retries on the alarm).
    #[serde(rename_all = "camelCase")]
    Pending { key: String },
    #[serde(rename_all = "camelCase")]
    Accepted { key: String, command_id: String },
    #[serde(rename_all = "camelCase")]
    Undeliverable { key: String, reason: Reason },
    #[serde(rename_all = "camelCase")]
    Refused { key: String, reason: String },
}

/// Freezes a send in the outbox, one transition; the same key and input
/// answer the current state again, other input under it is 409.
pub fn send(ctx: &mut Ctx<'_>, outgoing: &Outgoing<'_>) -> Result<SendState, ApiError> {
    let _ = (ctx, outgoing);
    todo!("mail::send")
}

/// Mails due for delivery now (pending, next attempt ≤ now), oldest first.
pub fn due(store: Store<'_>, now_ms: i64, limit: usize) -> Result<Vec<Mail>, ApiError> {
    let _ = (store, now_ms, limit);
    todo!("mail::due")
}

/// Records the recipient's receipt for `key`. `Left` (and retries used up,
/// see [`failed`]) answer the sender's own Session with an undeliverable
/// reply line, in the same transition, when the mail wanted a reply.
pub fn delivered(ctx: &mut Ctx<'_>, key: &str, receipt: &Receipt) -> Result<SendState, ApiError> {
    let _ = (ctx, key, receipt);
    todo!("mail::delivered")
}

/// Records a failed delivery attempt (unreachable, timed out): the next
/// attempt is scheduled with the ordinary backoff, or past the attempt
/// bound the mail is undeliverable (`recipient_offline`).
pub fn failed(ctx: &mut Ctx<'_>, key: &str, error: &str) -> Result<SendState, ApiError> {
    let _ = (ctx, key, error);
    todo!("mail::failed")
}

/// The host's decision on one received mail (seed: `acceptMail(mail, meta,
/// reply)`): the metadata to store with the admitted line (never the
/// sender's), or a refusal.
#[derive(Debug, Clone)]
pub enum Acceptance {
    Accept { meta: Option<String> },
    Refuse { reason: String },
}

/// The recipient side, one transition: a send is admitted as a prompt into
/// `mail.to.session_id` (created if absent, with the mail's request
/// identity) under requestId = key, remembered so its settlement replies;
/// a reply is authenticated against this Agent's outbox (the frozen send
/// `<key>` exists, `reply_to` is empty, `from`/`to` mirror the send, a
/// settled reply's `commandId` equals the send's receipt) and admitted as a
/// user-role line authored by the replying Agent with
/// `meta.delegation.reply`; anything else is refused.
pub fn receive(
    ctx: &mut Ctx<'_>,
    mail: &Mail,
    acceptance: &Acceptance,
) -> Result<Receipt, ApiError> {
    let _ = (ctx, mail, acceptance);
    todo!("mail::receive")
}

/// The earliest owed delivery (a pending mail's next attempt), if any.
pub fn next_deadline(store: Store<'_>) -> Result<Option<i64>, ApiError> {
    let _ = store;
    todo!("mail::next_deadline")
}

/// `agents.recall` at the sender: a send still pending delivery is never
/// delivered (the recipient's fence is the recall's job); answers its state
/// (`None`: no such send).
pub fn recall(ctx: &mut Ctx<'_>, key: &str) -> Result<Option<SendState>, ApiError> {
    let _ = (ctx, key);
    todo!("mail::recall")
}
