//! One error type for the whole request boundary. Each variant is one row of
//! `api_errors!`: its cause, HTTP status, stable `code` and message sit
//! together (axum's `define_rejection!` style), so no handler invents a
//! status of its own and no input can reach a 5xx.

use crate::limits::{
    BRANCHES_PER_SESSION_MAX, FENCES_PER_SESSION_MAX, FORK_DEPTH_MAX, SESSIONS_PER_AGENT_MAX,
};
use crate::sql::SqlError;

/// Declares [`ApiError`] from rows
/// `Variant(fields) => status, "code", "message format", args...;`
/// and derives `status()`, `code()` and `Display` (thiserror) from them.
macro_rules! api_errors {
    ($(
        $(#[$attr:meta])*
        $variant:ident $(($($tuple:ty),*))? $({ $($field:ident: $fty:ty),* $(,)? })?
            => $status:literal, $code:literal, $message:literal $(, $arg:expr)*;
    )*) => {
        #[derive(Debug, Clone, PartialEq, thiserror::Error)]
        pub enum ApiError {
            $(
                $(#[$attr])*
                #[error($message $(, $arg)*)]
                $variant $(($($tuple),*))? $({ $($field: $fty),* })?,
            )*
        }

        impl ApiError {
            pub fn status(&self) -> u16 {
                match self {
                    $(ApiError::$variant { .. } => $status,)*
                }
            }

            pub fn code(&self) -> &'static str {
                match self {
                    $(ApiError::$variant { .. } => $code,)*
                }
            }
        }
    };
}

api_errors! {
    /// 400: the body is not JSON.
    InvalidJson(String) => 400, "invalid_json", "request body is not valid JSON: {0}";
    /// 400: the body or a path id breaks the command's closed schema or a limit.
    InvalidRequest(String) => 400, "invalid_request", "{0}";
    /// 400: a query parameter is malformed or out of range.
    InvalidQuery(String) => 400, "invalid_query", "{0}";
    /// 400: the host's `x-shiitake-meta` header is not a JSON value within its cap.
    InvalidMeta(String) => 400, "invalid_meta", "{0}";
    /// 404: no route has this path.
    NotFound => 404, "not_found", "no such route";
    /// 422: the host's model policy refuses the chosen model (not offered,
    /// its provider not signed in or not allowed).
    ModelRejected(String) => 422, "model_rejected", "model:rejected: {0}";
    /// 404: the Session does not exist.
    SessionNotFound(String) => 404, "session_not_found", "session `{0}` does not exist";
    /// 404: the Session never accepted this command.
    CommandNotFound(String) => 404, "command_not_found",
        "command `{0}` was not accepted by this session";
    /// 404: no Session of the Agent holds this transcript entry.
    EntryNotFound(String) => 404, "entry_not_found",
        "no session of this agent holds entry `{0}`";
    /// 400: the entry is stored, but on no path of this Session (another
    /// Session's, or a base's off the path a fork continues).
    EntryNotOnPath { entry: String, holder: String, session: String } => 400, "entry_not_on_path",
        "entry `{entry}` (of session `{holder}`) is on no branch of session `{session}`";
    /// 400: a retry names an entry that is no user message.
    EntryNotUser { entry: String, role: String } => 400, "entry_not_user",
        "a retry generates the answer to a user message again; entry `{entry}` is a `{role}` message";
    /// 400: a fork would continue a chain of too many Sessions.
    ForkTooDeep { session: String } => 400, "fork_too_deep",
        "a fork of session `{session}` would make a chain of more than {max} sessions (a fork and its bases)",
        max = FORK_DEPTH_MAX;
    /// 403: an identity-bound request may not cancel another principal's work.
    NotOwner(String) => 403, "not_owner",
        "command `{0}` belongs to another principal; only its author (or an unbound owner) may cancel it";
    /// 403: a fleet grant (`crate::fleet::grant`) does not allow the call:
    /// its action or its Agent is outside the grant.
    GrantRefused(String) => 403, "grant_refused", "{0}";
    /// 403: the fleet grant expired before this call.
    GrantExpired(String) => 403, "grant_expired", "{0}";
    /// 404: no extension of this id runs in the Agent's roster.
    ExtensionNotFound(String) => 404, "extension_not_found",
        "extension `{0}` is not in this agent's roster";
    /// 404: the extension declares no such command.
    ExtensionCommandNotFound { extension: String, command: String } => 404, "extension_command_not_found",
        "extension `{extension}` declares no command `{command}`";
    /// 409: the extension is stopped (a hook failed); the host resumes it.
    ExtensionStopped { extension: String, reason: String } => 409, "extension_stopped",
        "extension `{extension}` is stopped until the host resumes it or its revision changes: {reason}";
    /// 422: the command's handler threw; nothing it wrote was kept.
    ExtensionCommandFailed(String) => 422, "extension_command_failed", "{0}";
    /// 422: the command would pass one of the extension's bounds; nothing was kept.
    ExtensionLimit(String) => 422, "extension_limit", "{0}";
    /// 405: the path exists, the method does not.
    MethodNotAllowed(&'static str) => 405, "method_not_allowed",
        "method not allowed; allowed: {0}";
    /// 409: a grant delivery older than the stored version.
    GrantVersionRefused { stored: u64, delivered: u64 } => 409, "grant_version_refused",
        "grant version {delivered} is older than the stored version {stored}; versions never move back";
    /// 409: `POST /sessions` with a sessionId that is taken.
    SessionExists(String) => 409, "session_exists", "session `{0}` already exists";
    /// 409: the requestId was admitted with other input.
    RequestConflict(String) => 409, "request_conflict",
        "requestId `{0}` was already admitted with different input; use a new requestId";
    /// 409: the requestId was withdrawn; admission is fenced for good.
    RequestWithdrawn(String) => 409, "request_withdrawn",
        "requestId `{0}` was withdrawn and can never be admitted; use a new requestId";
    /// 409: a `select` while the Session runs a turn.
    SessionBusy(String) => 409, "session_busy",
        "session `{0}` is running a turn; select a branch once it settles";
    /// 409: deleting a Session other Sessions were forked from.
    SessionHasForks { session: String, fork: String } => 409, "session_has_forks",
        "session `{session}` holds the history of its fork `{fork}` (and maybe others); delete its forks first";
    /// 413: the body exceeds the byte cap.
    PayloadTooLarge { bytes_max: usize } => 413, "payload_too_large",
        "request body exceeds {bytes_max} bytes";
    /// 429: the Session's queue is full (count or bytes).
    QueueFull(String) => 429, "queue_full", "{0}";
    /// 429: the Agent holds its maximum number of Sessions.
    TooManySessions => 429, "too_many_sessions",
        "this agent holds {} sessions; delete one first", SESSIONS_PER_AGENT_MAX;
    /// 429: the Session holds its maximum number of withdrawal fences.
    TooManyFences => 429, "too_many_fences",
        "this session holds {} withdrawal fences", FENCES_PER_SESSION_MAX;
    /// 429: the Session's messages start their maximum number of branches.
    TooManyBranches { session: String } => 429, "too_many_branches",
        "session `{session}` holds {max} branches; fork it to branch further",
        max = BRANCHES_PER_SESSION_MAX;
    /// 429: too many open watches or parked settlement polls.
    TooManyObservers => 429, "too_many_observers",
        "too many open watches or settlement polls on this agent; close some and retry";
    /// 404: the Agent has no browser bridge (`tools().ui`, `src/ui/`).
    UiNotConfigured => 404, "ui_not_configured",
        "this Agent has no browser bridge: the host's tools() configures no `ui`";
    /// 404: no request of that id waits for the Session's browser.
    UiRequestNotFound(String) => 404, "ui_request_not_found",
        "no request `{0}` waits for this Session's browser (answered, withdrawn, or never asked)";
    /// 409: the request is claimed already.
    UiClaimed(String) => 409, "ui_claimed",
        "request `{0}` is claimed already: a second claim is refused";
    /// 409: a result for a request no claim was taken for.
    UiNotClaimed(String) => 409, "ui_not_claimed",
        "request `{0}` is not claimed: claim it before posting its result";
    /// 409: the result's claim was taken for another request.
    UiOtherRequest { claim: String, owner: String, request: String } => 409, "ui_other_request",
        "claim `{claim}` is for request `{owner}`, not `{request}`: a result for another request is refused";
    /// 409: the result's claim is not the request's claim.
    UiWrongClaim { claim: String, request: String } => 409, "ui_wrong_claim",
        "claim `{claim}` is not the claim of request `{request}`";
    /// 410: the host closed the browser bridge (`ShiitakeDO#closeUi`).
    UiClosed(String) => 410, "ui_closed", "the browser bridge is closed: {0}";
    /// 503: the host's configuration (metadata schema, identity path) is invalid.
    HostMisconfigured(String) => 503, "host_misconfigured",
        "the host's configuration is invalid: {0}";
    /// 503: the host's `initialize(extensions)` failed; this instance serves
    /// nothing until a later open succeeds. Its durable work waits.
    RuntimeClosed(String) => 503, "runtime_closed",
        "the runtime is closed for this instance: initialize failed: {0}";
    /// 503: the store was written by another schema version; left untouched.
    StorageIncompatible(String) => 503, "storage_incompatible", "{0}";
    /// 503: a reply to a send whose receipt this Agent has not recorded (a
    /// crash between the recipient's acceptance and the receipt's record):
    /// only a peer's mail delivery meets it, and retries it.
    ReplyBeforeReceipt(String) => 503, "reply_before_receipt",
        "a reply to `{0}` arrived before this agent recorded its send's receipt: retry later";
    /// 500: a storage fault or a broken invariant. Never caused by input.
    Internal(String) => 500, "internal_error", "internal error: {0}";
}

impl ApiError {
    /// The JSON body `{"error": {"code", "message"}}`.
    pub fn body(&self) -> String {
        serde_json::json!({ "error": { "code": self.code(), "message": self.to_string() } })
            .to_string()
    }
}

impl From<SqlError> for ApiError {
    fn from(e: SqlError) -> Self {
        ApiError::Internal(e.to_string())
    }
}
