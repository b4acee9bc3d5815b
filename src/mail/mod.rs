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
//! Tables (the `mail` feature group of the versioned schema, made with the
//! first mail: `store::schema::MAIL`):
//! the outbox (frozen mails, their state, attempts, next attempt, receipt)
//! and the inbox (received mail keys: the command each was admitted as,
//! where its reply goes, and for an authenticated reply its verified facts).

mod render;
mod tables;

pub use render::{neutralise, render, NEUTRAL_LT, TAG};

use crate::ctx::{Ctx, IdSource};
use crate::error::ApiError;
use crate::limits::{
    AGENT_ID_BYTES_MAX, DIAGNOSTIC_BYTES_MAX, MAIL_ATTEMPTS_MAX, MAIL_ERROR_BYTES_MAX,
    MAIL_KEY_BYTES_MAX, MAIL_PENDING_MAX, MAIL_RETRY_BASE_MS, MAIL_RETRY_MAX_MS,
    MAIL_TEXT_BYTES_MAX, REQUEST_ID_BYTES_MAX, SESSION_ID_BYTES_MAX,
};
use crate::session::admission::{commit_send, prepare_prompt, Admitted, PreparedSend};
use crate::session::command::{Delivery, PromptInput};
use crate::settlement::Settlement;
use crate::sql::{atomically, Sql, SqlError};
use crate::store::{CommandRow, OnSettled, Store, Terminal};
use crate::text::hex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use tables::{InboxRow, OutboxRow};

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
///
/// `m_` and the hex of the first 16 bytes of SHA-256 over the five parts
/// joined by NUL (none may contain NUL: ids have a safe alphabet, and a
/// requestId with NUL is refused by [`send`]).
pub fn send_key(from: &Address, to: &Address, request_id: &str) -> String {
    let mut hash = Sha256::new();
    let parts = [
        from.agent_id.as_str(),
        from.session_id.as_str(),
        to.agent_id.as_str(),
        to.session_id.as_str(),
        request_id,
    ];
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            hash.update([0u8]);
        }
        hash.update(part.as_bytes());
    }
    format!("m_{}", hex(&hash.finalize()[..16]))
}

/// The suffix of a reply's key after its send's.
pub const REPLY_SUFFIX: &str = ":reply:0";

/// The key of the reply to the send `key`.
pub fn reply_key(key: &str) -> String {
    format!("{key}{REPLY_SUFFIX}")
}

/// The Session a send that names none is delivered to (seed: "an omitted
/// Session is created with the message's request identity"): derived from
/// the caller identity with the Session left out, so a retry addresses the
/// same one and two callers never share it.
pub fn omitted_session(from: &Address, to_agent: &str, request_id: &str) -> String {
    let to = Address {
        agent_id: to_agent.to_owned(),
        session_id: String::new(),
    };
    let key = send_key(from, &to, request_id);
    format!("s_{}", key.trim_start_matches("m_"))
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

/// Where a frozen send stands, as `agents.send` answers it. A recalled
/// send answers `Refused { reason: "recalled" }` ([`RECALLED`]).
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

/// The `reason` of a [`SendState::Refused`] that the sender recalled.
pub const RECALLED: &str = "recalled";

/// The verified facts of one reply line, as the inbox stores them, as
/// `meta.delegation.reply` carries them and as [`render`] shows them:
/// the replying Agent and Session (the line's author, from the mail's
/// authenticated `from`) and the reply's facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplyLine {
    pub agent_id: String,
    pub session_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<String>,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

impl ReplyLine {
    fn new(author: &Address, facts: &ReplyFacts) -> Self {
        ReplyLine {
            agent_id: author.agent_id.clone(),
            session_id: author.session_id.clone(),
            command_id: facts.command_id.clone(),
            outcome: facts.outcome,
            diagnostic: facts.diagnostic.clone(),
            reason: facts.reason,
        }
    }
}

/// The wait after `failed_attempts` (1-based) failed delivery attempts:
/// 3 s, doubling, at most 60 s (as `model::RetryPolicy`).
pub fn retry_delay_ms(failed_attempts: u32) -> i64 {
    let doublings = failed_attempts.saturating_sub(1).min(32);
    MAIL_RETRY_BASE_MS
        .saturating_mul(1i64 << doublings)
        .min(MAIL_RETRY_MAX_MS)
}

// Validation.

/// Whether `id` is an Agent id a mail may carry (and `agents` address).
pub fn valid_agent_id(id: &str) -> bool {
    crate::text::is_id(id, AGENT_ID_BYTES_MAX)
}

/// Why a received mail is malformed (the sender sees `malformed mail:
/// <why>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("key: 1..={MAIL_KEY_BYTES_MAX} bytes of printable ASCII without spaces")]
    Key,
    /// `field`: `from` or `to`.
    #[error("{field}.agentId: 1..={AGENT_ID_BYTES_MAX} bytes of [A-Za-z0-9._:-]")]
    AgentId { field: &'static str },
    #[error("{field}.sessionId: 1..={SESSION_ID_BYTES_MAX} bytes of [A-Za-z0-9._:-]")]
    SessionId { field: &'static str },
    #[error("text: a mail needs text")]
    NoText,
    /// The text's length in bytes.
    #[error("text: at most {MAIL_TEXT_BYTES_MAX} UTF-8 bytes, got {0}")]
    TextTooLong(usize),
    #[error("reply: a key ending in `:reply:0` is a reply's")]
    ReplyKeyWithoutFacts,
    #[error("reply: only a reply (key `<key>:reply:0`) carries reply facts")]
    FactsWithoutReplyKey,
    #[error("key: a reply names its send's key")]
    ReplyKeyEmpty,
    #[error("replyTo: a reply is answered by nothing; must be empty")]
    ReplyReplyTo,
    #[error("delivery: a reply is followUp work")]
    ReplyDelivery,
    #[error("replyTo: empty or the sender's `<agentId>/<sessionId>`")]
    SendReplyTo,
    #[error("reply.commandId: settled work names its command")]
    NoCommand,
    #[error("reply.commandId: an undeliverable reply has no command")]
    UndeliverableCommand,
    #[error("reply.commandId: 1..={REQUEST_ID_BYTES_MAX} bytes of printable ASCII")]
    CommandId,
    #[error("reply.diagnostic: only failed, interrupted and outcome_unknown carry one")]
    Diagnostic,
    #[error("reply.diagnostic: at most {DIAGNOSTIC_BYTES_MAX} bytes")]
    DiagnosticTooLong,
    #[error("reply.reason: exactly an undeliverable reply carries one")]
    Reason,
}

/// A send this Agent makes is refused as the HTTP API refuses input.
impl From<Malformed> for ApiError {
    fn from(e: Malformed) -> ApiError {
        ApiError::InvalidRequest(e.to_string())
    }
}

fn check_address(field: &'static str, a: &Address) -> Result<(), Malformed> {
    if !valid_agent_id(&a.agent_id) {
        return Err(Malformed::AgentId { field });
    }
    if !crate::text::is_id(&a.session_id, SESSION_ID_BYTES_MAX) {
        return Err(Malformed::SessionId { field });
    }
    Ok(())
}

fn check_text(text: &str) -> Result<(), Malformed> {
    if text.is_empty() {
        return Err(Malformed::NoText);
    }
    if text.len() > MAIL_TEXT_BYTES_MAX {
        return Err(Malformed::TextTooLong(text.len()));
    }
    Ok(())
}

/// Printable ASCII without space, 1..=`max` bytes.
fn printable(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// The `replyTo` of a send from `from`.
fn reply_to_of(from: &Address) -> String {
    format!("{}/{}", from.agent_id, from.session_id)
}

/// Checks a received mail's shape and bounds (closed JSON is the serde
/// type's): key printable ASCII ≤ [`MAIL_KEY_BYTES_MAX`] bytes, addresses
/// of the id alphabet, text 1..=[`MAIL_TEXT_BYTES_MAX`] bytes; `reply`
/// present exactly when the key ends in `:reply:0`; a reply has an empty
/// `replyTo`, `followUp` delivery, a command id unless undeliverable, a
/// diagnostic (≤ [`DIAGNOSTIC_BYTES_MAX`]) only when failed, interrupted
/// or outcome_unknown, and a reason exactly when undeliverable; a send's
/// `replyTo` is empty or names its `from` (`<agentId>/<sessionId>`).
pub fn validate(mail: &Mail) -> Result<(), Malformed> {
    if !printable(&mail.key, MAIL_KEY_BYTES_MAX) {
        return Err(Malformed::Key);
    }
    check_address("from", &mail.from)?;
    check_address("to", &mail.to)?;
    check_text(&mail.text)?;
    let base = mail.key.strip_suffix(REPLY_SUFFIX);
    match (&mail.reply, base) {
        (None, Some(_)) => Err(Malformed::ReplyKeyWithoutFacts),
        (Some(_), None) => Err(Malformed::FactsWithoutReplyKey),
        (Some(_), Some("")) => Err(Malformed::ReplyKeyEmpty),
        (Some(facts), Some(_)) => {
            if !mail.reply_to.is_empty() {
                return Err(Malformed::ReplyReplyTo);
            }
            if mail.delivery != Delivery::FollowUp {
                return Err(Malformed::ReplyDelivery);
            }
            check_facts(facts)
        }
        (None, None) => {
            if !mail.reply_to.is_empty() && mail.reply_to != reply_to_of(&mail.from) {
                return Err(Malformed::SendReplyTo);
            }
            Ok(())
        }
    }
}

fn check_facts(f: &ReplyFacts) -> Result<(), Malformed> {
    let undeliverable = f.outcome == Outcome::Undeliverable;
    match &f.command_id {
        None if !undeliverable => return Err(Malformed::NoCommand),
        Some(_) if undeliverable => return Err(Malformed::UndeliverableCommand),
        Some(c) if !printable(c, REQUEST_ID_BYTES_MAX) => return Err(Malformed::CommandId),
        _ => {}
    }
    let diagnosed = matches!(
        f.outcome,
        Outcome::Failed | Outcome::Interrupted | Outcome::OutcomeUnknown
    );
    match &f.diagnostic {
        Some(_) if !diagnosed => return Err(Malformed::Diagnostic),
        Some(d) if d.len() > DIAGNOSTIC_BYTES_MAX => return Err(Malformed::DiagnosticTooLong),
        _ => {}
    }
    if f.reason.is_some() != undeliverable {
        return Err(Malformed::Reason);
    }
    Ok(())
}

fn internal(e: serde_json::Error) -> ApiError {
    ApiError::Internal(format!("stored mail: {e}"))
}

fn to_json<T: Serialize>(value: &T) -> Result<String, ApiError> {
    serde_json::to_string(value).map_err(|e| ApiError::Internal(e.to_string()))
}

fn parse_mail(json: &str) -> Result<Mail, ApiError> {
    crate::json::from_text(json).map_err(internal)
}

/// What a received mail is compared by on replay.
fn digest(mail: &Mail) -> Result<String, ApiError> {
    Ok(hex(&Sha256::digest(to_json(mail)?.as_bytes())[..16]))
}

fn state_of(row: &OutboxRow) -> Result<SendState, ApiError> {
    let key = row.key.clone();
    Ok(match row.state.as_str() {
        "pending" => SendState::Pending { key },
        "accepted" => SendState::Accepted {
            key,
            command_id: row.receipt.clone().unwrap_or_default(),
        },
        "undeliverable" => SendState::Undeliverable {
            key,
            reason: match row.reason.as_deref() {
                Some("recipient_left") => Reason::RecipientLeft,
                _ => Reason::RecipientOffline,
            },
        },
        "refused" => SendState::Refused {
            key,
            reason: row.reason.clone().unwrap_or_default(),
        },
        "recalled" => SendState::Refused {
            key,
            reason: RECALLED.into(),
        },
        other => return Err(ApiError::Internal(format!("mail state `{other}`"))),
    })
}

fn no_mail(key: &str) -> ApiError {
    ApiError::InvalidRequest(format!(
        "key: no mail `{}` in this agent's outbox",
        crate::text::shorten(key)
    ))
}

fn bounded(text: &str, max: usize) -> String {
    let mut s = text.to_owned();
    crate::text::truncate(&mut s, max);
    s
}

/// Freezes a send in the outbox, one transition; the same key and input
/// answer the current state again, other input under it is 409. Refused:
/// a requestId outside 1..=256 bytes (or with NUL), text empty or over
/// [`MAIL_TEXT_BYTES_MAX`], a malformed address (`400 invalid_request`);
/// [`MAIL_PENDING_MAX`] mails already pending (`429 queue_full`). Every
/// send wants a reply: its `replyTo` is its `from`.
pub fn send(ctx: &mut Ctx<'_>, outgoing: &Outgoing<'_>) -> Result<SendState, ApiError> {
    let request_id = outgoing.request_id;
    if request_id.is_empty() || request_id.len() > REQUEST_ID_BYTES_MAX || request_id.contains('\0')
    {
        return Err(ApiError::InvalidRequest(format!(
            "requestId: 1..={REQUEST_ID_BYTES_MAX} UTF-8 bytes without NUL, got {} bytes",
            request_id.len()
        )));
    }
    check_address("from", &outgoing.from)?;
    check_address("to", &outgoing.to)?;
    check_text(outgoing.text)?;
    let key = send_key(&outgoing.from, &outgoing.to, request_id);
    let mail = Mail {
        key: key.clone(),
        from: outgoing.from.clone(),
        to: outgoing.to.clone(),
        reply_to: reply_to_of(&outgoing.from),
        text: outgoing.text.to_owned(),
        delivery: outgoing.delivery,
        reply: None,
    };
    let json = to_json(&mail)?;
    let store = ctx.store;
    let sql = store.sql();
    let now_ms = ctx.now_ms;
    atomically(sql, || {
        if let Some(row) = tables::outbox(sql, &key)? {
            let frozen = parse_mail(&row.mail)?;
            let same = frozen.from == mail.from
                && frozen.to == mail.to
                && frozen.text == mail.text
                && frozen.delivery == mail.delivery;
            return if same {
                state_of(&row)
            } else {
                Err(ApiError::RequestConflict(request_id.to_owned()))
            };
        }
        let pending = tables::pending_count(sql)?;
        if pending >= MAIL_PENDING_MAX {
            return Err(ApiError::QueueFull(format!(
                "this agent's outbox already holds {pending} mails pending delivery \
                 (at most {MAIL_PENDING_MAX}); retry once some are delivered"
            )));
        }
        tables::insert_pending(sql, &key, &json, &mail.reply_to, now_ms)?;
        tables::prune_outbox(sql)?;
        Ok(SendState::Pending { key: key.clone() })
    })
}

/// Mails due for delivery now (pending, next attempt ≤ now), oldest first.
pub fn due(store: Store<'_>, now_ms: i64, limit: usize) -> Result<Vec<Mail>, ApiError> {
    if !tables::holds_mail(store.sql()) {
        return Ok(Vec::new());
    }
    tables::due(store.sql(), now_ms, limit)?
        .iter()
        .map(|m| parse_mail(m))
        .collect()
}

/// Records the recipient's receipt for `key`. `Left` (and retries used up,
/// see [`failed`]) answer the sender's own Session with an undeliverable
/// reply line, in the same transition, when the mail wanted a reply.
///
/// Only a pending mail moves; a receipt for a settled one answers its
/// state unchanged, except that an `Accepted` receipt for a mail recalled
/// while its delivery was under way records the acceptance (the
/// admission happened, as `withdraw` lets an admission win). An unknown
/// key is `400 invalid_request`.
pub fn delivered(
    ctx: &mut Ctx<'_>,
    key: &str,
    receipt: &Receipt,
) -> Result<Landing<SendState>, ApiError> {
    let store = ctx.store;
    let sql = store.sql();
    let now_ms = ctx.now_ms;
    let ids = &mut *ctx.ids;
    if !tables::holds_mail(sql) {
        return Err(no_mail(key));
    }
    let mut slot = None;
    let landed = &mut slot;
    let value = atomically(sql, || {
        let row = tables::outbox(sql, key)?.ok_or_else(|| no_mail(key))?;
        match (row.state.as_str(), receipt) {
            ("pending" | "recalled", Receipt::Accepted { command_id }) => {
                tables::update(
                    sql,
                    key,
                    "accepted",
                    row.attempts + 1,
                    None,
                    Some(command_id),
                    None,
                    None,
                    now_ms,
                )?;
                tables::prune_outbox(sql)?;
                Ok(SendState::Accepted {
                    key: key.to_owned(),
                    command_id: command_id.clone(),
                })
            }
            ("pending", Receipt::Refused { reason }) => {
                let reason = bounded(reason, MAIL_ERROR_BYTES_MAX);
                tables::update(
                    sql,
                    key,
                    "refused",
                    row.attempts + 1,
                    None,
                    None,
                    Some(&reason),
                    None,
                    now_ms,
                )?;
                tables::prune_outbox(sql)?;
                Ok(SendState::Refused {
                    key: key.to_owned(),
                    reason,
                })
            }
            ("pending", Receipt::Left) => give_up(
                store,
                ids,
                now_ms,
                &row,
                row.attempts + 1,
                Reason::RecipientLeft,
                None,
                landed,
            ),
            _ => state_of(&row),
        }
    })?;
    Ok(Landing {
        value,
        landed: slot,
    })
}

/// Records a failed delivery attempt (unreachable, timed out): the next
/// attempt is scheduled with the ordinary backoff ([`retry_delay_ms`]), or
/// past the attempt bound ([`MAIL_ATTEMPTS_MAX`]) the mail is undeliverable
/// (`recipient_offline`). A mail no longer pending answers its state.
pub fn failed(ctx: &mut Ctx<'_>, key: &str, error: &str) -> Result<Landing<SendState>, ApiError> {
    give_up_or_retry(ctx, key, error, None)
}

/// Gives up a pending mail at once with `reason` (the fleet's directory
/// says its recipient is absent or archived, `crate::fleet::directory`):
/// like retries used up, without waiting for them. A mail no longer
/// pending answers its state.
pub fn undeliverable_now(
    ctx: &mut Ctx<'_>,
    key: &str,
    reason: Reason,
    why: &str,
) -> Result<Landing<SendState>, ApiError> {
    give_up_or_retry(ctx, key, why, Some(reason))
}

/// One failed attempt of a pending mail: given up with `now` (or with
/// `recipient_offline` past the attempt bound), else scheduled again.
fn give_up_or_retry(
    ctx: &mut Ctx<'_>,
    key: &str,
    error: &str,
    now: Option<Reason>,
) -> Result<Landing<SendState>, ApiError> {
    let store = ctx.store;
    let sql = store.sql();
    let now_ms = ctx.now_ms;
    let ids = &mut *ctx.ids;
    if !tables::holds_mail(sql) {
        return Err(no_mail(key));
    }
    let error = bounded(error, MAIL_ERROR_BYTES_MAX);
    let mut slot = None;
    let landed = &mut slot;
    let value = atomically(sql, || {
        let row = tables::outbox(sql, key)?.ok_or_else(|| no_mail(key))?;
        if row.state != "pending" {
            return state_of(&row);
        }
        let attempts = row.attempts.saturating_add(1);
        let reason = now.or((attempts >= MAIL_ATTEMPTS_MAX).then_some(Reason::RecipientOffline));
        if let Some(reason) = reason {
            return give_up(
                store,
                ids,
                now_ms,
                &row,
                attempts,
                reason,
                Some(&error),
                landed,
            );
        }
        let next_at = now_ms.saturating_add(retry_delay_ms(attempts));
        tables::update(
            sql,
            key,
            "pending",
            attempts,
            Some(next_at),
            None,
            None,
            Some(&error),
            now_ms,
        )?;
        Ok(SendState::Pending {
            key: key.to_owned(),
        })
    })?;
    Ok(Landing {
        value,
        landed: slot,
    })
}

/// How many mails this Agent still waits on: pending deliveries (its sends
/// and the replies it owes) and accepted sends whose reply has not arrived
/// (delegated work still waiting). Zero while they hold no mail.
pub fn waiting(sql: &dyn Sql) -> Result<usize, ApiError> {
    if !tables::holds_mail(sql) {
        return Ok(0);
    }
    Ok(tables::waiting_count(sql)?)
}

/// One sentence naming an outcome, for a reply with no text of its own.
fn sentence(outcome: Outcome, reason: Option<Reason>) -> &'static str {
    match (outcome, reason) {
        (Outcome::Completed, _) => "The delegated work completed without a final answer.",
        (Outcome::Failed, _) => "The delegated work failed.",
        (Outcome::Interrupted, _) => "The delegated work was interrupted.",
        (Outcome::Cancelled, _) => "The delegated work was cancelled.",
        (Outcome::OutcomeUnknown, _) => {
            "The delegated work's outcome is unknown: its Session was deleted before it settled."
        }
        (Outcome::Undeliverable, Some(Reason::RecipientLeft)) => {
            "The mail could not be delivered: the recipient has left."
        }
        (Outcome::Undeliverable, _) => {
            "The mail could not be delivered: the recipient stayed unreachable."
        }
    }
}

/// A mail becomes undeliverable (`reason`): in the transition whose reads
/// are done up to `row`, its state, and, when it wanted a reply, the local
/// undeliverable reply line admitted into the sender's own Session
/// (`requestId = <key>:reply:0`, authored by the intended recipient, no
/// command id). An absent Session gets no line. A Session whose queue is
/// full keeps the mail pending and tries again after the longest backoff.
#[allow(clippy::too_many_arguments)]
fn give_up(
    store: Store<'_>,
    ids: &mut dyn IdSource,
    now_ms: i64,
    row: &OutboxRow,
    attempts: u32,
    reason: Reason,
    error: Option<&str>,
    landed: &mut Option<Landed>,
) -> Result<SendState, ApiError> {
    let sql = store.sql();
    let mail = parse_mail(&row.mail)?;
    let mut line = None;
    if !mail.reply_to.is_empty() && mail.reply.is_none() {
        let facts = ReplyFacts {
            command_id: None,
            outcome: Outcome::Undeliverable,
            diagnostic: None,
            reason: Some(reason),
        };
        let reply = Mail {
            key: reply_key(&mail.key),
            from: mail.to.clone(),
            to: mail.from.clone(),
            reply_to: String::new(),
            text: sentence(Outcome::Undeliverable, Some(reason)).to_owned(),
            delivery: Delivery::FollowUp,
            reply: Some(facts.clone()),
        };
        let verified = ReplyLine::new(&mail.to, &facts);
        let meta = reply_meta(None, &verified)?;
        let input = PromptInput {
            text: reply.text.clone(),
            images: Vec::new(),
            delivery: Delivery::FollowUp,
            ..Default::default()
        };
        match prepare_prompt(
            store,
            &mail.from.session_id,
            &reply.key,
            &input,
            Some(&meta),
            false,
        ) {
            Ok(prepared) => line = Some((reply, verified, prepared)),
            Err(ApiError::SessionNotFound(_)) => {}
            Err(ApiError::QueueFull(_)) => {
                tables::update(
                    sql,
                    &row.key,
                    "pending",
                    attempts,
                    Some(now_ms.saturating_add(MAIL_RETRY_MAX_MS)),
                    None,
                    None,
                    error,
                    now_ms,
                )?;
                return Ok(SendState::Pending {
                    key: row.key.clone(),
                });
            }
            // A line under this key exists with other input, or the key
            // was fenced in the Session: the state is recorded without.
            Err(ApiError::RequestConflict(_) | ApiError::RequestWithdrawn(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let reason_text = match reason {
        Reason::RecipientOffline => "recipient_offline",
        Reason::RecipientLeft => "recipient_left",
    };
    tables::update(
        sql,
        &row.key,
        "undeliverable",
        attempts,
        None,
        None,
        Some(reason_text),
        error,
        now_ms,
    )?;
    if let Some((reply, verified, prepared)) = line {
        let command_id = admit(store, ids, now_ms, &prepared, landed)?;
        tables::insert_inbox(
            sql,
            &InboxRow {
                key: reply.key.clone(),
                digest: digest(&reply)?,
                session_id: mail.from.session_id.clone(),
                command_id,
                from_agent: reply.from.agent_id.clone(),
                from_session: reply.from.session_id.clone(),
                to_agent: reply.to.agent_id.clone(),
                reply_to: String::new(),
                facts: Some(to_json(&verified)?),
            },
            now_ms,
        )?;
        tables::prune_inbox(sql)?;
    }
    tables::prune_outbox(sql)?;
    Ok(SendState::Undeliverable {
        key: row.key.clone(),
        reason,
    })
}

/// Writes a prepared admission; its command id (the earlier one on replay).
fn admit(
    store: Store<'_>,
    ids: &mut dyn IdSource,
    now_ms: i64,
    prepared: &PreparedSend,
    landed: &mut Option<Landed>,
) -> Result<String, ApiError> {
    if let Some(command_id) = prepared.replayed() {
        return Ok(command_id.to_owned());
    }
    let admitted = commit_send(store, ids, now_ms, prepared)?
        .ok_or_else(|| ApiError::Internal("a new admission wrote nothing".into()))?;
    let command_id = admitted.receipt.command_id.clone();
    *landed = Some(Landed {
        session_id: prepared.session_id().to_owned(),
        request_id: prepared.request_id().to_owned(),
        admitted,
    });
    Ok(command_id)
}

/// The metadata of a reply line: the host's Acceptance metadata (a JSON
/// object, or none) with `delegation.reply` set to the verified facts. The
/// facts win: a host `delegation.reply` is replaced, other keys of a host
/// `delegation` object are kept, a non-object `delegation` is replaced by
/// `{reply}`. Host metadata that is not an object (or null) cannot carry
/// the facts and is `400 invalid_meta`.
pub fn reply_meta(host: Option<&str>, line: &ReplyLine) -> Result<String, ApiError> {
    let mut meta = match host.map(serde_json::from_str::<Value>).transpose() {
        Ok(None | Some(Value::Null)) => Map::new(),
        Ok(Some(Value::Object(map))) => map,
        Ok(Some(_)) => {
            return Err(ApiError::InvalidMeta(
                "a reply line's metadata must be a JSON object: the runtime sets its \
                 delegation.reply"
                    .into(),
            ))
        }
        Err(e) => return Err(ApiError::InvalidMeta(format!("not JSON: {e}"))),
    };
    let reply = crate::json::to_value(&line).map_err(|e| ApiError::Internal(e.to_string()))?;
    match meta.get_mut("delegation") {
        Some(Value::Object(delegation)) => {
            delegation.insert("reply".into(), reply);
        }
        _ => {
            let mut delegation = Map::new();
            delegation.insert("reply".into(), reply);
            meta.insert("delegation".into(), Value::Object(delegation));
        }
    }
    to_json(&Value::Object(meta))
}

/// The host's decision on one received mail (seed: `acceptMail(mail, meta,
/// reply)`): the metadata to store with the admitted line (never the
/// sender's), or a refusal.
#[derive(Debug, Clone)]
pub enum Acceptance {
    Accept {
        meta: Option<String>,
    },
    Refuse {
        reason: String,
    },
    /// This Agent left the fleet: the sender gives up at once
    /// (`recipient_left`).
    Left,
}

/// Why a reply is not authenticated (the sender sees `reply not
/// authenticated: <why>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Unauthentic {
    #[error("not a reply key")]
    NotReplyKey,
    #[error("an undeliverable reply is produced by the sender's own runtime, never received")]
    Undeliverable,
    /// The send's key, shortened.
    #[error("no frozen send `{0}` in this agent's outbox")]
    NoSend(String),
    #[error("the mail it answers wants no reply")]
    NoReplyWanted,
    #[error("a reply's replyTo must be empty")]
    ReplyTo,
    #[error("from/to do not mirror the frozen send")]
    NotMirrored,
    /// The send's outbox state.
    #[error("the send was never accepted by its recipient (it is {0})")]
    NotAccepted(String),
    #[error("commandId does not match the send's receipt")]
    Receipt,
}

/// Authenticates a reply against this Agent's outbox (seed table,
/// "Authentication"); the frozen send, or why not.
fn authenticate(
    sql: &dyn Sql,
    mail: &Mail,
    facts: &ReplyFacts,
) -> Result<Result<Mail, Unauthentic>, ApiError> {
    let Some(base) = mail.key.strip_suffix(REPLY_SUFFIX) else {
        return Ok(Err(Unauthentic::NotReplyKey));
    };
    if facts.outcome == Outcome::Undeliverable {
        return Ok(Err(Unauthentic::Undeliverable));
    }
    let Some(row) = tables::outbox(sql, base)? else {
        return Ok(Err(Unauthentic::NoSend(
            crate::text::shorten(base).to_owned(),
        )));
    };
    let send = parse_mail(&row.mail)?;
    if send.reply.is_some() || send.reply_to.is_empty() {
        return Ok(Err(Unauthentic::NoReplyWanted));
    }
    if !mail.reply_to.is_empty() {
        return Ok(Err(Unauthentic::ReplyTo));
    }
    if mail.from != send.to || mail.to != send.from {
        return Ok(Err(Unauthentic::NotMirrored));
    }
    // Accepted by the recipient, which replies, but its receipt not yet
    // recorded here (a crash in between): answer "not yet", never refuse,
    // so the reply is retried until this Agent's own retry of the send
    // records the receipt the reply must match.
    if row.state == "pending" {
        return Err(ApiError::ReplyBeforeReceipt(
            crate::text::shorten(base).to_owned(),
        ));
    }
    if row.state != "accepted" {
        return Ok(Err(Unauthentic::NotAccepted(row.state)));
    }
    if facts.command_id.is_none() || facts.command_id != row.receipt {
        return Ok(Err(Unauthentic::Receipt));
    }
    Ok(Ok(send))
}

/// The recipient side, one transition: a send is admitted as a prompt into
/// `mail.to.session_id` (created if absent, with the mail's request
/// identity) under requestId = key, remembered so its settlement replies;
/// a reply is authenticated against this Agent's outbox (the frozen send
/// `<key>` exists, `reply_to` is empty, `from`/`to` mirror the send, a
/// settled reply's `commandId` equals the send's receipt) and admitted as a
/// user-role line authored by the replying Agent with
/// `meta.delegation.reply`; anything else is refused.
///
/// A send's line stores the Acceptance metadata as given; a reply's, the
/// merge of [`reply_meta`]. The line's author is not a transcript field:
/// it is `meta.delegation.reply.agentId` (and the inbox facts), the
/// mail's authenticated `from`. A replayed delivery (same key, same mail)
/// answers the first receipt and admits nothing; the same key with another
/// mail is refused. `Err` means nothing was decided (a full queue, too many
/// Sessions, a storage fault, host metadata a reply cannot carry): the
/// host reports it to the sender as a failed attempt.
pub fn receive(
    ctx: &mut Ctx<'_>,
    mail: &Mail,
    acceptance: &Acceptance,
) -> Result<Landing<Receipt>, ApiError> {
    if let Err(reason) = validate(mail) {
        return Ok(Landing::none(Receipt::Refused {
            reason: format!("malformed mail: {reason}"),
        }));
    }
    let store = ctx.store;
    let sql = store.sql();
    let now_ms = ctx.now_ms;
    let ids = &mut *ctx.ids;
    let digest = digest(mail)?;
    let mut slot = None;
    let landed = &mut slot;
    let value = atomically(sql, || {
        if let Some(row) = tables::inbox(sql, &mail.key)? {
            return Ok(if row.digest == digest {
                Receipt::Accepted {
                    command_id: row.command_id,
                }
            } else {
                Receipt::Refused {
                    reason: "this key already names another mail".into(),
                }
            });
        }
        let (session_id, verified) = match &mail.reply {
            None => (mail.to.session_id.as_str(), None),
            Some(facts) => match authenticate(sql, mail, facts)? {
                Ok(_) => (
                    mail.to.session_id.as_str(),
                    Some(ReplyLine::new(&mail.from, facts)),
                ),
                Err(reason) => {
                    return Ok(Receipt::Refused {
                        reason: format!("reply not authenticated: {reason}"),
                    })
                }
            },
        };
        let host_meta = match acceptance {
            Acceptance::Refuse { reason } => {
                return Ok(Receipt::Refused {
                    reason: bounded(reason, MAIL_ERROR_BYTES_MAX),
                })
            }
            Acceptance::Left => return Ok(Receipt::Left),
            Acceptance::Accept { meta } => meta.as_deref(),
        };
        let meta = match &verified {
            Some(line) => Some(reply_meta(host_meta, line)?),
            None => host_meta.map(str::to_owned),
        };
        let input = PromptInput {
            text: mail.text.clone(),
            images: Vec::new(),
            delivery: mail.delivery,
            ..Default::default()
        };
        let create = verified.is_none();
        let prepared = match prepare_prompt(
            store,
            session_id,
            &mail.key,
            &input,
            meta.as_deref(),
            create,
        ) {
            Ok(p) => p,
            Err(ApiError::RequestWithdrawn(_)) => {
                return Ok(Receipt::Refused {
                    reason: "withdrawn: this key is fenced in the session for good".into(),
                })
            }
            Err(ApiError::RequestConflict(_)) => {
                return Ok(Receipt::Refused {
                    reason: "this key was admitted in the session with other input".into(),
                })
            }
            Err(ApiError::SessionNotFound(_)) => {
                return Ok(Receipt::Refused {
                    reason: "the session it answers no longer exists".into(),
                })
            }
            Err(e) => return Err(e),
        };
        let command_id = admit(store, ids, now_ms, &prepared, landed)?;
        tables::insert_inbox(
            sql,
            &InboxRow {
                key: mail.key.clone(),
                digest: digest.clone(),
                session_id: session_id.to_owned(),
                command_id: command_id.clone(),
                from_agent: mail.from.agent_id.clone(),
                from_session: mail.from.session_id.clone(),
                to_agent: mail.to.agent_id.clone(),
                reply_to: mail.reply_to.clone(),
                facts: verified.as_ref().map(to_json).transpose()?,
            },
            now_ms,
        )?;
        tables::prune_inbox(sql)?;
        if verified.is_some() {
            if let Some(base) = mail.key.strip_suffix(REPLY_SUFFIX) {
                tables::mark_replied(sql, base, now_ms)?;
                tables::prune_outbox(sql)?;
            }
        }
        Ok(Receipt::Accepted { command_id })
    })?;
    Ok(Landing {
        value,
        landed: slot,
    })
}

/// An admission a mail transition made (a received mail or reply, or a
/// local undeliverable line), for the host to publish and run.
#[derive(Debug)]
pub struct Landed {
    pub session_id: String,
    pub request_id: String,
    pub admitted: Admitted,
}

/// A mail transition's answer and the admission it made, if any.
#[derive(Debug)]
pub struct Landing<T> {
    pub value: T,
    pub landed: Option<Landed>,
}

impl<T> Landing<T> {
    fn none(value: T) -> Self {
        Landing {
            value,
            landed: None,
        }
    }
}

/// The earliest owed delivery (a pending mail's next attempt), if any.
pub fn next_deadline(store: Store<'_>) -> Result<Option<i64>, ApiError> {
    if !tables::holds_mail(store.sql()) {
        return Ok(None);
    }
    Ok(tables::earliest(store.sql())?)
}

/// `agents.recall` at the sender: a send still pending delivery is never
/// delivered (the recipient's fence is the recall's job); answers its state
/// (`None`: no such send). A recalled send answers
/// `Refused { reason: "recalled" }`.
pub fn recall(ctx: &mut Ctx<'_>, key: &str) -> Result<Option<SendState>, ApiError> {
    let sql = ctx.store.sql();
    let now_ms = ctx.now_ms;
    if !tables::holds_mail(sql) {
        return Ok(None);
    }
    atomically(sql, || {
        let Some(row) = tables::outbox(sql, key)? else {
            return Ok(None);
        };
        if row.state != "pending" {
            return state_of(&row).map(Some);
        }
        tables::update(
            sql,
            key,
            "recalled",
            row.attempts,
            None,
            None,
            None,
            None,
            now_ms,
        )?;
        tables::prune_outbox(sql)?;
        Ok(Some(SendState::Refused {
            key: key.to_owned(),
            reason: RECALLED.into(),
        }))
    })
}

/// The host's cancellation text (seed: "the host's cancellation text such
/// as Work cancelled by Ada."): given the cancellation's metadata (`null`
/// when it had none), the reply's text, or `None` for the default sentence.
/// The wasm host wraps its JS callback in it; a non-string answer or a
/// throw is `None`.
pub type CancellationText = Box<dyn Fn(&Value) -> Option<String>>;

/// Stages replies on settlement (an [`OnSettled`], run beside the
/// extensions' hooks, one `OnSettled` in the host): when a command admitted
/// from a received send that wants a reply settles, the settling
/// transition freezes the reply in this Agent's outbox (key
/// `<key>:reply:0`, from the send's `to`, to its `from`, `replyTo` empty):
/// the child's final answer (completed), the host's cancellation text
/// (cancelled), else one sentence naming the outcome; facts `{commandId,
/// outcome, diagnostic}` (the diagnostic only for failed and interrupted,
/// bounded to [`DIAGNOSTIC_BYTES_MAX`]). Text is cut to
/// [`MAIL_TEXT_BYTES_MAX`] (ending in `…`).
#[derive(Default)]
pub struct Replies {
    cancellation_text: Option<CancellationText>,
}

impl Replies {
    pub fn new() -> Self {
        Replies::default()
    }

    /// Replies whose cancelled work answers `text(cancellation meta)`.
    pub fn with_cancellation_text(text: CancellationText) -> Self {
        Replies {
            cancellation_text: Some(text),
        }
    }

    /// The text and facts of the reply to the settlement `s`.
    fn reply_of(&self, s: &Settlement) -> (String, ReplyFacts) {
        let outcome = match s.terminal {
            Terminal::Completed => Outcome::Completed,
            Terminal::Failed => Outcome::Failed,
            Terminal::Interrupted => Outcome::Interrupted,
            Terminal::Cancelled => Outcome::Cancelled,
        };
        let text = match outcome {
            Outcome::Completed => s.answer.clone().filter(|a| !a.is_empty()),
            Outcome::Cancelled => self
                .cancellation_text
                .as_ref()
                .and_then(|f| f(s.meta.as_ref().unwrap_or(&Value::Null)).filter(|t| !t.is_empty())),
            _ => None,
        };
        let text = text.unwrap_or_else(|| sentence(outcome, None).to_owned());
        let diagnostic = match outcome {
            Outcome::Failed | Outcome::Interrupted => Some(bounded(
                s.diagnostic.as_deref().unwrap_or(sentence(outcome, None)),
                DIAGNOSTIC_BYTES_MAX,
            )),
            _ => None,
        };
        (
            bounded(&text, MAIL_TEXT_BYTES_MAX),
            ReplyFacts {
                command_id: Some(s.command_id.clone()),
                outcome,
                diagnostic,
                reason: None,
            },
        )
    }
}

/// Freezes the reply to the received send `row` in the outbox (a write of
/// the open transition; nothing when it is staged already).
fn stage_reply(
    sql: &dyn Sql,
    row: &InboxRow,
    text: String,
    facts: ReplyFacts,
    now_ms: i64,
) -> Result<(), SqlError> {
    let mail = Mail {
        key: reply_key(&row.key),
        from: Address {
            agent_id: row.to_agent.clone(),
            session_id: row.session_id.clone(),
        },
        to: Address {
            agent_id: row.from_agent.clone(),
            session_id: row.from_session.clone(),
        },
        reply_to: String::new(),
        text,
        delivery: Delivery::FollowUp,
        reply: Some(facts),
    };
    let json = serde_json::to_string(&mail).map_err(|e| SqlError::Decode(e.to_string()))?;
    tables::insert_pending(sql, &mail.key, &json, "", now_ms)?;
    tables::prune_outbox(sql)
}

impl OnSettled for Replies {
    fn settled(
        &self,
        store: Store<'_>,
        command: &CommandRow,
        settlement: &str,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        if command.request_id.is_none() {
            return Ok(()); // every received mail has its key as requestId
        }
        let sql = store.sql();
        if !tables::holds_mail(sql) {
            return Ok(());
        }
        let Some(row) = tables::inbox_of_command(sql, &command.session_id, &command.command_id)?
        else {
            return Ok(());
        };
        if row.reply_to.is_empty() {
            return Ok(());
        }
        let s: Settlement = crate::json::from_text(settlement)
            .map_err(|e| SqlError::Decode(format!("stored settlement: {e}")))?;
        let (text, facts) = self.reply_of(&s);
        stage_reply(sql, &row, text, facts, now_ms)
    }
}

/// The replies a Session's deletion owes: its received delegations whose
/// commands have not settled (read before the deletion's writes).
pub struct Owed(Vec<InboxRow>);

/// The reads of [`Owed`], for `agent::delete_session`.
pub fn owed_replies(sql: &dyn Sql, session_id: &str) -> Result<Owed, SqlError> {
    if !tables::holds_mail(sql) {
        return Ok(Owed(Vec::new()));
    }
    tables::owed_in(sql, session_id).map(Owed)
}

impl Owed {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Stages an `outcome_unknown` reply for each (writes of the deletion's
    /// transition).
    pub fn stage(&self, sql: &dyn Sql, now_ms: i64) -> Result<(), SqlError> {
        const DIAGNOSTIC: &str = "the child session was deleted before its work settled";
        for row in &self.0 {
            let facts = ReplyFacts {
                command_id: Some(row.command_id.clone()),
                outcome: Outcome::OutcomeUnknown,
                diagnostic: Some(DIAGNOSTIC.into()),
                reason: None,
            };
            let text = sentence(Outcome::OutcomeUnknown, None).to_owned();
            stage_reply(sql, row, text, facts, now_ms)?;
        }
        Ok(())
    }
}

/// The verified reply facts of the Session's lines among `command_ids`
/// (their user messages' commands), by command id; read beside the open
/// transition's writes (the model context is built inside transitions
/// that write messages, never the inbox). Empty while no mail is kept.
pub fn reply_lines(
    store: Store<'_>,
    session_id: &str,
    command_ids: &[&str],
) -> Result<BTreeMap<String, ReplyLine>, ApiError> {
    let sql = store.sql();
    if command_ids.is_empty() || !tables::holds_mail(sql) {
        return Ok(BTreeMap::new());
    }
    tables::facts_of(sql, session_id, command_ids)?
        .into_iter()
        .map(|(command_id, facts)| {
            let line: ReplyLine = crate::json::from_text(&facts).map_err(internal)?;
            Ok((command_id, line))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(a: &str, s: &str) -> Address {
        Address {
            agent_id: a.into(),
            session_id: s.into(),
        }
    }

    #[test]
    fn backoff_doubles_from_three_seconds_to_a_minute() {
        let delays: Vec<i64> = (1..=MAIL_ATTEMPTS_MAX).map(retry_delay_ms).collect();
        assert_eq!(
            delays,
            [3_000, 6_000, 12_000, 24_000, 48_000, 60_000, 60_000, 60_000, 60_000, 60_000]
        );
        assert_eq!(retry_delay_ms(0), 3_000);
        assert_eq!(retry_delay_ms(u32::MAX), 60_000);
    }

    #[test]
    fn send_keys_are_deterministic_and_scoped() {
        let (a, b) = (addr("parent", "s1"), addr("child", "s2"));
        let k = send_key(&a, &b, "r1");
        assert_eq!(k, send_key(&a, &b, "r1"));
        assert!(k.starts_with("m_") && k.len() == 34, "{k}");
        assert_ne!(k, send_key(&a, &b, "r2"));
        assert_ne!(k, send_key(&b, &a, "r1"));
        assert_ne!(k, send_key(&addr("parent", "s1x"), &b, "r1"));
        // NUL separation: moving a byte between parts changes the key.
        assert_ne!(
            send_key(&addr("ab", "c"), &b, "r"),
            send_key(&addr("a", "bc"), &b, "r")
        );
    }

    #[test]
    fn an_omitted_session_is_named_after_the_caller_identity() {
        let a = addr("parent", "s1");
        let s = omitted_session(&a, "child", "r1");
        assert_eq!(
            s,
            omitted_session(&a, "child", "r1"),
            "a retry addresses it again"
        );
        assert!(
            s.starts_with("s_") && crate::text::is_id(&s, SESSION_ID_BYTES_MAX),
            "{s}"
        );
        assert_ne!(
            s,
            omitted_session(&addr("parent", "s2"), "child", "r1"),
            "per caller"
        );
        assert_ne!(s, omitted_session(&a, "child", "r2"));
        assert_ne!(s, omitted_session(&a, "other", "r1"));
    }

    fn reply(facts: ReplyFacts) -> Mail {
        Mail {
            key: "m_1:reply:0".into(),
            from: addr("child", "c"),
            to: addr("parent", "p"),
            reply_to: String::new(),
            text: "done".into(),
            delivery: Delivery::FollowUp,
            reply: Some(facts),
        }
    }

    #[test]
    fn validation_is_closed_and_bounded() {
        let facts = ReplyFacts {
            command_id: Some("cmd_1_a".into()),
            outcome: Outcome::Completed,
            diagnostic: None,
            reason: None,
        };
        assert_eq!(validate(&reply(facts.clone())), Ok(()));
        let mut m = reply(facts.clone());
        m.reply = None;
        assert!(validate(&m).unwrap_err().to_string().contains("reply"));
        let mut m = reply(facts.clone());
        m.reply_to = "parent/p".into();
        assert!(validate(&m).unwrap_err().to_string().contains("replyTo"));
        let mut m = reply(facts.clone());
        m.key = "m_1".into();
        assert!(validate(&m).unwrap_err().to_string().contains("reply"));
        let mut m = reply(facts.clone());
        m.key = "k".repeat(MAIL_KEY_BYTES_MAX + 1);
        assert!(validate(&m).unwrap_err().to_string().contains("key"));
        let mut m = reply(facts.clone());
        m.text = "x".repeat(MAIL_TEXT_BYTES_MAX + 1);
        assert!(validate(&m).unwrap_err().to_string().contains("text"));
        let mut m = reply(facts.clone());
        m.from.agent_id = "a/b".into();
        assert!(validate(&m)
            .unwrap_err()
            .to_string()
            .contains("from.agentId"));
        let mut f = facts.clone();
        f.diagnostic = Some("x".into());
        assert!(validate(&reply(f))
            .unwrap_err()
            .to_string()
            .contains("diagnostic"));
        let mut f = facts.clone();
        f.outcome = Outcome::Undeliverable;
        assert!(validate(&reply(f))
            .unwrap_err()
            .to_string()
            .contains("commandId"));
        let mut f = facts.clone();
        f.outcome = Outcome::Failed;
        f.diagnostic = Some("d".repeat(DIAGNOSTIC_BYTES_MAX + 1));
        assert!(validate(&reply(f))
            .unwrap_err()
            .to_string()
            .contains("diagnostic"));
        // A send: replyTo empty or its sender.
        let mut send = reply(facts);
        send.key = "m_1".into();
        send.reply = None;
        send.reply_to = "child/c".into();
        assert_eq!(validate(&send), Ok(()));
        send.reply_to = "other/c".into();
        assert!(validate(&send).unwrap_err().to_string().contains("replyTo"));
    }

    #[test]
    fn reply_meta_merges_under_the_facts() {
        let line = ReplyLine {
            agent_id: "child".into(),
            session_id: "c".into(),
            command_id: Some("cmd_1_a".into()),
            outcome: Outcome::Completed,
            diagnostic: None,
            reason: None,
        };
        let m: Value = serde_json::from_str(
            &reply_meta(
                Some(r#"{"user":"ada","delegation":{"reply":{"agentId":"forged"},"note":1}}"#),
                &line,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(m["user"], "ada");
        assert_eq!(m["delegation"]["note"], 1);
        assert_eq!(m["delegation"]["reply"]["agentId"], "child");
        assert_eq!(m["delegation"]["reply"]["commandId"], "cmd_1_a");
        let m: Value = serde_json::from_str(&reply_meta(None, &line).unwrap()).unwrap();
        assert_eq!(m["delegation"]["reply"]["outcome"], "completed");
        assert_eq!(
            reply_meta(Some("\"x\""), &line).unwrap_err().code(),
            "invalid_meta"
        );
    }
}
