//! Admission: prompts and operator lines under a caller `requestId`, replay
//! of an uncertain send, and the withdrawal fence.

use super::branches;
use super::command::{
    internal, Compact, Delivery, EntryCommand, EntryInput, OperatorInput, Prompt, PromptInput,
};
use crate::ctx::{Ctx, IdSource};
use crate::error::ApiError;
use crate::extension::Send;
use crate::limits::{
    FENCES_PER_SESSION_MAX, PENDING_BYTES_PER_SESSION_MAX, PENDING_PER_SESSION_MAX,
    SESSIONS_PER_AGENT_MAX,
};
use crate::settlement::Settlement;
use crate::sql::atomically;
use crate::store::{command_id, AdmissionFacts, Kind, NewCommand, State, Store, Terminal};
use serde::Serialize;

/// The answer to an accepted command, also replayed for a retried request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    pub status: &'static str,
    pub command_id: String,
}

impl Receipt {
    fn accepted(command_id: String) -> Self {
        Receipt {
            status: "accepted",
            command_id,
        }
    }
}

/// The answer to `withdraw(requestId)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum Withdrawal {
    /// An admission exists and wins; it is not cancelled.
    #[serde(rename_all = "camelCase")]
    Accepted { command_id: String },
    /// Nothing was admitted; a durable fence now refuses the requestId.
    Unknown,
}

/// One admission, as the rules see it.
struct Admission<'a> {
    session_id: &'a str,
    request_id: &'a str,
    kind: Kind,
    input: String,
    meta: Option<&'a str>,
    /// The entry it names (a prompt's `after`, `""` for the start; a
    /// retry's or a select's `entryId`), resolved by a new admission.
    entry: Option<&'a str>,
}

/// Admits a prompt into the Session's queue.
pub fn admit_prompt(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    prompt: &Prompt,
    meta: Option<&str>,
) -> Result<Admitted, ApiError> {
    let input = serde_json::to_string(&prompt.input()).map_err(internal)?;
    admit(
        ctx,
        Admission {
            session_id,
            request_id: &prompt.request_id,
            kind: Kind::Prompt,
            input,
            meta,
            entry: prompt.after.as_deref(),
        },
    )
}

/// Admits a retry: queued work like a prompt, whose turn generates the
/// answer to the user message `entryId` again on a new branch.
pub fn admit_retry(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    retry: &EntryCommand,
    meta: Option<&str>,
) -> Result<Admitted, ApiError> {
    let input = serde_json::to_string(&PromptInput {
        delivery: Delivery::FollowUp,
        retry: Some(retry.entry_id.clone()),
        ..Default::default()
    })
    .map_err(internal)?;
    admit(
        ctx,
        Admission {
            session_id,
            request_id: &retry.request_id,
            kind: Kind::Retry,
            input,
            meta,
            entry: Some(&retry.entry_id),
        },
    )
}

/// Selects the branch through `entryId`: recorded (and settled) at once,
/// like an operator line; refused while a turn runs.
pub fn admit_select(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    select: &EntryCommand,
    meta: Option<&str>,
) -> Result<Admitted, ApiError> {
    let input = serde_json::to_string(&EntryInput {
        entry_id: select.entry_id.clone(),
    })
    .map_err(internal)?;
    admit(
        ctx,
        Admission {
            session_id,
            request_id: &select.request_id,
            kind: Kind::Select,
            input,
            meta,
            entry: Some(&select.entry_id),
        },
    )
}

/// Admits a compaction into the Session's queue: it waits its turn as a
/// prompt does (and counts toward the same bounds), but no turn joins it.
pub fn admit_compact(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    compact: &Compact,
    meta: Option<&str>,
) -> Result<Admitted, ApiError> {
    let input = serde_json::to_string(&compact.input()).map_err(internal)?;
    admit(
        ctx,
        Admission {
            session_id,
            request_id: &compact.request_id,
            kind: Kind::Compact,
            input,
            meta,
            entry: None,
        },
    )
}

/// Records an operator line in the transcript at once.
pub fn admit_operator(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    request_id: &str,
    text: &str,
    meta: Option<&str>,
) -> Result<Admitted, ApiError> {
    let input = serde_json::to_string(&OperatorInput {
        text: text.to_owned(),
    })
    .map_err(internal)?;
    admit(
        ctx,
        Admission {
            session_id,
            request_id,
            kind: Kind::Operator,
            input,
            meta,
            entry: None,
        },
    )
}

/// An admission's receipt and the message it appended, if any (stored
/// JSON, for watchers: an operator line, or the user message of a prompt
/// that started its turn at once).
#[derive(Debug)]
pub struct Admitted {
    pub receipt: Receipt,
    pub message: Option<String>,
    /// The prompt was admitted into an idle Session and claimed: its turn
    /// is running (attempt 1) and waits for the run loop to call the model.
    pub claimed: bool,
    /// The Session's selected branch changed (a select, or a retry or
    /// prompt with `after` that started its turn): it runs through this
    /// entry now (`None`: the Session's start).
    pub branch: Option<Option<String>>,
}

fn admit(ctx: &mut Ctx<'_>, a: Admission<'_>) -> Result<Admitted, ApiError> {
    // A Session whose queue is kept needs no read: a queued prompt is one
    // statement. The kept facts know nothing of the requestId, whose
    // earlier admission wins over every refusal: any failure on them (a
    // refusal, or the insert failing on the requestId) wrote nothing, and
    // the admission is decided again from a read.
    if let Some(facts) = ctx.store.kept_queue(a.session_id) {
        if let Ok(admitted) = admit_with(ctx, &a, Some(facts)) {
            return Ok(admitted);
        }
    }
    admit_with(ctx, &a, None)
}

/// One admission as a transition, on `kept` facts or on a read.
fn admit_with(
    ctx: &mut Ctx<'_>,
    a: &Admission<'_>,
    kept: Option<AdmissionFacts>,
) -> Result<Admitted, ApiError> {
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    let ids = &mut *ctx.ids;
    atomically(store.sql(), || {
        let decision = match kept {
            Some(facts) => Decision::New(Box::new(facts)),
            None => decide(store, a)?,
        };
        match decision {
            Decision::Replay(command_id) => Ok(Admitted {
                receipt: Receipt::accepted(command_id),
                message: None,
                claimed: false,
                branch: None,
            }),
            Decision::New(facts) => {
                let anchor = resolve(store, a, &facts)?;
                let admitted = write_new(store, ids, now_ms, a, &facts, anchor)?;
                if queues(a.kind) && !admitted.claimed {
                    // Its one write is the pending command (stored input as
                    // given: `octet_length` is its UTF-8 length).
                    store.vouch_queued(a.session_id, &facts, a.input.len())?;
                }
                Ok(admitted)
            }
        }
    })
}

/// Whether a command of `kind` waits in the queue unless it starts at once.
fn queues(kind: Kind) -> bool {
    matches!(kind, Kind::Prompt | Kind::Retry | Kind::Compact)
}

/// What the entry a new admission names resolves to (reads only): the
/// position its branch starts at, or a select's tip.
#[derive(Debug, Clone, Copy)]
enum Anchor {
    /// A prompt's `after` or a retry's user message.
    At(i64),
    /// A select: the tip of the branch it selects.
    Tip(i64),
}

fn resolve(
    store: Store<'_>,
    a: &Admission<'_>,
    facts: &AdmissionFacts,
) -> Result<Option<Anchor>, ApiError> {
    let Some(entry) = a.entry else {
        return Ok(None);
    };
    if a.kind == Kind::Select && facts.running {
        return Err(ApiError::SessionBusy(a.session_id.to_owned()));
    }
    branches::check_room(store, a.session_id)?;
    if entry.is_empty() {
        return Ok(Some(Anchor::At(0))); // `after: ""`: the start
    }
    let chain = store.chain(a.session_id)?;
    let found = branches::locate(store, &chain, entry)?;
    match a.kind {
        Kind::Select => Ok(Some(Anchor::Tip(branches::branch_tip(
            store, &chain, found.seq,
        )?))),
        Kind::Retry if found.role.as_deref() != Some("user") => Err(ApiError::EntryNotUser {
            entry: entry.to_owned(),
            role: found.role.unwrap_or_default(),
        }),
        _ => Ok(Some(Anchor::At(found.seq))),
    }
}

/// What an admission's reads decided.
enum Decision {
    /// The requestId was admitted before, with the same input: its command.
    Replay(String),
    /// A new command, to write with these facts.
    New(Box<AdmissionFacts>),
}

/// The reads of an admission: replay, conflict, fence, or a new command.
fn decide(store: Store<'_>, a: &Admission<'_>) -> Result<Decision, ApiError> {
    let facts = store.admission_facts(a.session_id, a.request_id)?;
    if !facts.session_exists {
        return Err(ApiError::SessionNotFound(a.session_id.to_owned()));
    }
    // An existing admission wins over everything, including a fence
    // committed after it.
    if let Some(existing) = &facts.existing {
        let same = existing.kind == a.kind
            && existing.same_input(&a.input)
            && existing.meta.as_deref() == a.meta;
        return if same {
            Ok(Decision::Replay(existing.command_id.clone()))
        } else {
            Err(ApiError::RequestConflict(a.request_id.to_owned()))
        };
    }
    if facts.fenced {
        return Err(ApiError::RequestWithdrawn(a.request_id.to_owned()));
    }
    Ok(Decision::New(Box::new(facts)))
}

/// The writes of a new admission (after every read of its transition).
fn write_new(
    store: Store<'_>,
    ids: &mut dyn IdSource,
    now_ms: i64,
    a: &Admission<'_>,
    facts: &AdmissionFacts,
    anchor: Option<Anchor>,
) -> Result<Admitted, ApiError> {
    let command_id = command_id(facts.next_seq, &ids.next_id(""));
    let mut row = NewCommand {
        command_id: &command_id,
        session_id: a.session_id,
        seq: facts.next_seq,
        request_id: Some(a.request_id),
        kind: a.kind,
        input: &a.input,
        meta: a.meta,
        state: State::Pending,
        terminal: None,
        settlement: None,
        attempt: 0,
        anchor: match anchor {
            Some(Anchor::At(seq)) => Some(seq),
            _ => None,
        },
        now_ms,
    };
    let mut claimed = false;
    let recorded;
    let mut message = None;
    let mut branch = None;
    match a.kind {
        Kind::Prompt | Kind::Retry | Kind::Compact => {
            if facts.pending_count >= PENDING_PER_SESSION_MAX {
                return Err(ApiError::QueueFull(format!(
                    "session `{}` already has {PENDING_PER_SESSION_MAX} pending commands",
                    a.session_id
                )));
            }
            if facts.pending_bytes + a.input.len() > PENDING_BYTES_PER_SESSION_MAX {
                return Err(ApiError::QueueFull(format!(
                    "session `{}` would exceed {PENDING_BYTES_PER_SESSION_MAX} bytes of pending input",
                    a.session_id
                )));
            }
            if !facts.running && facts.pending_count == 0 {
                // An idle Session: the work starts in this very write
                // (running, attempt 1, a prompt's user message appended),
                // so the model call waits for no second durable write.
                row.state = State::Running;
                row.attempt = 1;
                if a.kind != Kind::Compact {
                    // A compaction writes no message and starts no branch:
                    // it summarises the selected one.
                    let input: PromptInput = crate::json::from_text(&a.input).map_err(internal)?;
                    branch = input.branch_entry().map(|e| e.map(str::to_owned));
                    if a.kind == Kind::Retry {
                        // No message of its own: its answer continues the
                        // retried message, selected from now on.
                        store.set_head(a.session_id, row.anchor)?;
                    } else {
                        let body = crate::transcript::user_message_body(
                            &command_id,
                            Some(a.request_id),
                            &input.text,
                            &input.images,
                            a.meta,
                            now_ms,
                        )?;
                        store.insert_message_after(a.session_id, &body, row.anchor)?;
                        message = Some(body);
                    }
                }
                claimed = true;
            }
        }
        Kind::Select => {
            // Recorded, not run (like an operator line): the branch is
            // selected in this write.
            row.state = State::Settled;
            row.terminal = Some(Terminal::Completed);
            recorded = Settlement::new(&command_id, Terminal::Completed, None, None).to_json()?;
            row.settlement = Some(&recorded);
            if let Some(Anchor::Tip(tip)) = anchor {
                store.set_head(a.session_id, Some(tip))?;
            }
            branch = a.entry.map(|e| Some(e.to_owned()));
        }
        Kind::Operator => {
            // An operator line is recorded, not run: settled at admission,
            // its durable entry id is its command id.
            row.state = State::Settled;
            row.terminal = Some(Terminal::Completed);
            recorded = Settlement::new(&command_id, Terminal::Completed, None, None).to_json()?;
            row.settlement = Some(&recorded);
            let text: OperatorInput = crate::json::from_text(&a.input).map_err(internal)?;
            let body = crate::transcript::message_body(&crate::transcript::Message {
                entry_id: &command_id,
                role: crate::transcript::Role::Operator,
                text: &text.text,
                request_id: Some(a.request_id),
                command_id: Some(&command_id),
                meta: crate::transcript::meta_raw(a.meta)?,
                usage: None,
                created_at: now_ms,
                ..Default::default()
            })?;
            store.insert_message(a.session_id, &body)?;
            message = Some(body);
        }
    }
    store.insert_command(&row)?;
    Ok(Admitted {
        receipt: Receipt::accepted(command_id),
        message,
        claimed,
        branch,
    })
}

/// A send whose reads are done.
pub struct PreparedSend {
    request_id: String,
    session_id: String,
    input: String,
    /// The host metadata the command is admitted with.
    meta: Option<String>,
    /// `None`: the requestId was admitted before (replayed).
    facts: Option<AdmissionFacts>,
    /// The command a replayed send was admitted as.
    replayed: Option<String>,
    /// The Session is created in the same write.
    create: bool,
}

/// The reads of one send. An absent Session is refused (`session_not_found`)
/// when the send requires it, else created (within the Sessions bound).
fn prepare_send(store: Store<'_>, send: &Send) -> Result<PreparedSend, ApiError> {
    let input = PromptInput {
        text: send.text.clone(),
        ..Default::default()
    };
    prepare_prompt(
        store,
        &send.session_id,
        &send.request_id,
        &input,
        None,
        !send.require_existing_session,
    )
}

/// The reads of one prompt admitted inside another transition (an
/// extension's send, a received mail): its own input and host metadata,
/// replayed or refused (409) like any admission under `request_id`, a
/// fenced `request_id` refused (`request_withdrawn`). An absent Session is
/// created when `create_absent` (within the Sessions bound), else refused
/// (`session_not_found`). [`commit_send`] writes it.
pub fn prepare_prompt(
    store: Store<'_>,
    session_id: &str,
    request_id: &str,
    input: &PromptInput,
    meta: Option<&str>,
    create_absent: bool,
) -> Result<PreparedSend, ApiError> {
    let input = serde_json::to_string(input).map_err(internal)?;
    let a = Admission {
        session_id,
        request_id,
        kind: Kind::Prompt,
        input: input.clone(),
        meta,
        entry: None,
    };
    let mut create = false;
    let mut replayed = None;
    let facts = match decide(store, &a) {
        Ok(Decision::Replay(command_id)) => {
            replayed = Some(command_id);
            None
        }
        Ok(Decision::New(facts)) => Some(*facts),
        Err(ApiError::SessionNotFound(_)) if create_absent => {
            if store.session_count()? >= SESSIONS_PER_AGENT_MAX {
                return Err(ApiError::TooManySessions);
            }
            create = true;
            Some(store.admission_facts(session_id, request_id)?)
        }
        Err(e) => return Err(e),
    };
    Ok(PreparedSend {
        request_id: request_id.to_owned(),
        session_id: session_id.to_owned(),
        input,
        meta: meta.map(str::to_owned),
        facts,
        replayed,
        create,
    })
}

impl PreparedSend {
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The command this requestId was admitted as before, when replayed.
    pub fn replayed(&self) -> Option<&str> {
        self.replayed.as_deref()
    }
}

/// The writes of a prepared send: `None` when it was a replay.
pub fn commit_send(
    store: Store<'_>,
    ids: &mut dyn IdSource,
    now_ms: i64,
    send: &PreparedSend,
) -> Result<Option<Admitted>, ApiError> {
    let Some(facts) = &send.facts else {
        return Ok(None);
    };
    if send.create {
        store.insert_session(&send.session_id, now_ms)?;
    }
    let a = Admission {
        session_id: &send.session_id,
        request_id: &send.request_id,
        kind: Kind::Prompt,
        input: send.input.clone(),
        meta: send.meta.as_deref(),
        entry: None,
    };
    write_new(store, ids, now_ms, &a, facts, None).map(Some)
}

/// Resolves an uncertain send: an existing admission wins; otherwise a
/// durable fence refuses every later admission of `request_id` here.
pub fn withdraw(
    ctx: &mut Ctx<'_>,
    session_id: &str,
    request_id: &str,
) -> Result<Withdrawal, ApiError> {
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    atomically(store.sql(), || {
        let facts = store.admission_facts(session_id, request_id)?;
        if !facts.session_exists {
            return Err(ApiError::SessionNotFound(session_id.to_owned()));
        }
        if let Some(existing) = facts.existing {
            return Ok(Withdrawal::Accepted {
                command_id: existing.command_id,
            });
        }
        if facts.fenced {
            return Ok(Withdrawal::Unknown);
        }
        if store.fence_count(session_id)? >= FENCES_PER_SESSION_MAX {
            return Err(ApiError::TooManyFences);
        }
        store.insert_fence(session_id, request_id, now_ms)?;
        Ok(Withdrawal::Unknown)
    })
}
/// Admits extensions' sends (seed: `context.send`) inside the extension's
/// own transition: [`prepare_send`] reads, [`commit_send`] writes, so a
/// transition prepares all its sends before it writes anything.
/// `extension/` sits below `session/` and takes admission through this port.
pub struct ExtensionSends;

impl crate::extension::Admit for ExtensionSends {
    type Prepared = PreparedSend;
    type Admitted = Admitted;

    fn prepare(&self, store: Store<'_>, send: &Send) -> Result<PreparedSend, ApiError> {
        prepare_send(store, send)
    }

    fn commit(
        &self,
        store: Store<'_>,
        ids: &mut dyn IdSource,
        now_ms: i64,
        prepared: &PreparedSend,
    ) -> Result<Option<Admitted>, ApiError> {
        commit_send(store, ids, now_ms, prepared)
    }
}
