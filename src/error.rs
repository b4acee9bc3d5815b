//! One error type for the whole request boundary. Each variant names its
//! cause, its HTTP status and its stable `code` once, here (axum-style), so
//! no handler invents a status of its own and no input can reach a 5xx.

use crate::sql::SqlError;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum ApiError {
    /// 400: the body is not JSON.
    InvalidJson(String),
    /// 400: the body or a path id breaks the command's closed schema or a limit.
    InvalidRequest(String),
    /// 400: a query parameter is malformed or out of range.
    InvalidQuery(String),
    /// 400: the host's `x-shiitake-meta` header is not a JSON value within its cap.
    InvalidMeta(String),
    /// 404: no route has this path.
    NotFound,
    /// 404: the Session does not exist.
    SessionNotFound(String),
    /// 404: the Session never accepted this command.
    CommandNotFound(String),
    /// 403: an identity-bound request may not cancel another principal's work.
    NotOwner(String),
    /// 405: the path exists, the method does not.
    MethodNotAllowed(&'static str),
    /// 409: a grant delivery older than the stored version.
    GrantVersionRefused { stored: u64, delivered: u64 },
    /// 409: `POST /sessions` with a sessionId that is taken.
    SessionExists(String),
    /// 409: the requestId was admitted with other input.
    RequestConflict(String),
    /// 409: the requestId was withdrawn; admission is fenced for good.
    RequestWithdrawn(String),
    /// 413: the body exceeds the byte cap.
    PayloadTooLarge { bytes_max: usize },
    /// 429: the Session's queue is full (count or bytes).
    QueueFull(String),
    /// 429: the Agent holds its maximum number of Sessions.
    TooManySessions,
    /// 429: the Session holds its maximum number of withdrawal fences.
    TooManyFences,
    /// 429: too many open watches or parked settlement polls.
    TooManyObservers,
    /// 503: the host's configuration (metadata schema, identity path) is invalid.
    HostMisconfigured(String),
    /// 503: the store was written by another schema version; left untouched.
    StorageIncompatible(String),
    /// 500: a storage fault or a broken invariant. Never caused by input.
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> u16 {
        use ApiError::*;
        match self {
            InvalidJson(_) | InvalidRequest(_) | InvalidQuery(_) | InvalidMeta(_) => 400,
            NotOwner(_) => 403,
            NotFound | SessionNotFound(_) | CommandNotFound(_) => 404,
            MethodNotAllowed(_) => 405,
            SessionExists(_) | RequestConflict(_) | RequestWithdrawn(_) => 409,
            GrantVersionRefused { .. } => 409,
            PayloadTooLarge { .. } => 413,
            QueueFull(_) | TooManySessions | TooManyFences | TooManyObservers => 429,
            StorageIncompatible(_) | HostMisconfigured(_) => 503,
            Internal(_) => 500,
        }
    }

    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            InvalidJson(_) => "invalid_json",
            InvalidRequest(_) => "invalid_request",
            InvalidQuery(_) => "invalid_query",
            InvalidMeta(_) => "invalid_meta",
            NotOwner(_) => "not_owner",
            NotFound => "not_found",
            SessionNotFound(_) => "session_not_found",
            CommandNotFound(_) => "command_not_found",
            MethodNotAllowed(_) => "method_not_allowed",
            SessionExists(_) => "session_exists",
            GrantVersionRefused { .. } => "grant_version_refused",
            RequestConflict(_) => "request_conflict",
            RequestWithdrawn(_) => "request_withdrawn",
            PayloadTooLarge { .. } => "payload_too_large",
            QueueFull(_) => "queue_full",
            TooManySessions => "too_many_sessions",
            TooManyFences => "too_many_fences",
            TooManyObservers => "too_many_observers",
            StorageIncompatible(_) => "storage_incompatible",
            HostMisconfigured(_) => "host_misconfigured",
            Internal(_) => "internal_error",
        }
    }

    /// The JSON body `{"error": {"code", "message"}}`.
    pub fn body(&self) -> String {
        serde_json::json!({ "error": { "code": self.code(), "message": self.to_string() } })
            .to_string()
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ApiError::*;
        match self {
            InvalidJson(m) => write!(f, "request body is not valid JSON: {m}"),
            InvalidRequest(m) | InvalidQuery(m) | InvalidMeta(m) | QueueFull(m) => f.write_str(m),
            NotOwner(id) => write!(
                f,
                "command `{id}` belongs to another principal; only its author (or an unbound owner) may cancel it"
            ),
            NotFound => f.write_str("no such route"),
            SessionNotFound(id) => write!(f, "session `{id}` does not exist"),
            CommandNotFound(id) => write!(f, "command `{id}` was not accepted by this session"),
            MethodNotAllowed(allowed) => write!(f, "method not allowed; allowed: {allowed}"),
            SessionExists(id) => write!(f, "session `{id}` already exists"),
            GrantVersionRefused { stored, delivered } => write!(
                f,
                "grant version {delivered} is older than the stored version {stored}; versions never move back"
            ),
            RequestConflict(id) => write!(
                f,
                "requestId `{id}` was already admitted with different input; use a new requestId"
            ),
            RequestWithdrawn(id) => write!(
                f,
                "requestId `{id}` was withdrawn and can never be admitted; use a new requestId"
            ),
            PayloadTooLarge { bytes_max } => {
                write!(f, "request body exceeds {bytes_max} bytes")
            }
            TooManySessions => write!(
                f,
                "this agent holds {} sessions; delete one first",
                crate::limits::SESSIONS_PER_AGENT_MAX
            ),
            TooManyFences => write!(
                f,
                "this session holds {} withdrawal fences",
                crate::limits::FENCES_PER_SESSION_MAX
            ),
            TooManyObservers => f.write_str(
                "too many open watches or settlement polls on this agent; close some and retry",
            ),
            StorageIncompatible(m) => f.write_str(m),
            HostMisconfigured(m) => write!(f, "the host's configuration is invalid: {m}"),
            Internal(m) => write!(f, "internal error: {m}"),
        }
    }
}

impl From<SqlError> for ApiError {
    fn from(e: SqlError) -> Self {
        ApiError::Internal(e.to_string())
    }
}
