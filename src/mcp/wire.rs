//! JSON-RPC over one Streamable HTTP response: a JSON body or an event
//! stream whose events carry JSON-RPC messages.

use super::{protocol, McpError, McpResponse};
use crate::limits::MCP_RPC_ERROR_BYTES_MAX;
use crate::sse::SseDecoder;
use crate::text::shorten;
use crate::text::truncate;
use serde_json::Value;

/// One message, classified.
enum Message {
    /// A response: its id and its result or error.
    Response {
        id: Value,
        outcome: Result<Value, McpError>,
    },
    /// The server's tools changed (`notifications/tools/list_changed`).
    ToolsChanged,
    /// Another request or notification from the server: not for this
    /// client here.
    Other,
}

/// The method of the server's notification that its tools changed.
const TOOLS_CHANGED: &str = "notifications/tools/list_changed";

/// The result of request `id` from a 2xx response. `tools_changed` is set
/// when a message before it says the server's tools changed (a server may
/// send notifications on the response to any request).
pub(super) fn result_of(
    id: u64,
    response: &McpResponse<'_>,
    tools_changed: &mut bool,
) -> Result<Value, McpError> {
    let media = response
        .content_type
        .and_then(|t| t.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match media.as_str() {
        "application/json" => from_json(id, response.body, tools_changed),
        "text/event-stream" => from_stream(id, response.body, tools_changed),
        "" if response.body.is_empty() => Err(protocol(format!(
            "server answered HTTP {} without a response to request {id}",
            response.status
        ))),
        other => Err(protocol(format!(
            "unexpected content type `{}`; expected application/json or text/event-stream",
            shorten(other)
        ))),
    }
}

fn from_json(id: u64, body: &[u8], tools_changed: &mut bool) -> Result<Value, McpError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| protocol(format!("response body is not valid JSON: {e}")))?;
    // A batch (allowed by 2025-03-26): the response among its messages.
    let messages = match value {
        Value::Array(items) => items,
        single => vec![single],
    };
    let mut mismatch = None;
    for message in messages {
        if let Some(outcome) = ours(id, classify(message)?, &mut mismatch, tools_changed) {
            return outcome;
        }
    }
    Err(missing(id, mismatch, "response body"))
}

fn from_stream(id: u64, body: &[u8], tools_changed: &mut bool) -> Result<Value, McpError> {
    let events = SseDecoder::default().push(body)?;
    let mut mismatch = None;
    for event in events {
        // An event without data primes a resumable stream (its id alone).
        if !matches!(event.event.as_deref(), None | Some("message")) || event.data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&event.data).map_err(|e| {
            protocol(format!(
                "malformed event stream: event data is not JSON: {e}"
            ))
        })?;
        if let Some(outcome) = ours(id, classify(message)?, &mut mismatch, tools_changed) {
            return outcome;
        }
    }
    Err(missing(id, mismatch, "event stream"))
}

/// The outcome of request `id` when `message` is its response; notes the
/// first other response's id, and a change of the server's tools.
fn ours(
    id: u64,
    message: Message,
    mismatch: &mut Option<Value>,
    tools_changed: &mut bool,
) -> Option<Result<Value, McpError>> {
    match message {
        Message::Response { id: got, outcome } => {
            if is_ours(id, &got, &outcome) {
                return Some(outcome);
            }
            mismatch.get_or_insert(got);
        }
        Message::ToolsChanged => *tools_changed = true,
        Message::Other => {}
    }
    None
}

/// The response to `id`; an error with a null id (the server could not
/// read the request's id) counts too.
fn is_ours(id: u64, got: &Value, outcome: &Result<Value, McpError>) -> bool {
    got.as_u64() == Some(id) || (got.is_null() && outcome.is_err())
}

fn missing(id: u64, mismatch: Option<Value>, what: &str) -> McpError {
    match mismatch {
        Some(got) => {
            let mut got = got.to_string();
            truncate(&mut got, 64);
            protocol(format!("response id mismatch: expected {id}, got {got}"))
        }
        None => protocol(format!("{what} holds no response to request {id}")),
    }
}

fn classify(message: Value) -> Result<Message, McpError> {
    let Value::Object(mut map) = message else {
        return Err(protocol("a JSON-RPC message is not an object"));
    };
    match map.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        other => {
            let mut shown = other.map_or("nothing".to_owned(), Value::to_string);
            truncate(&mut shown, 64);
            return Err(protocol(format!(
                "wrong jsonrpc version {shown}; expected \"2.0\""
            )));
        }
    }
    if let Some(method) = map.get("method") {
        // A notification has no id; a request with this method is no
        // notification.
        let changed = method == TOOLS_CHANGED && !map.contains_key("id");
        return Ok(if changed {
            Message::ToolsChanged
        } else {
            Message::Other
        });
    }
    let Some(id) = map.remove("id") else {
        return Err(protocol(
            "a JSON-RPC message is neither a request, a notification nor a response",
        ));
    };
    let outcome = if let Some(error) = map.remove("error") {
        Err(rpc_error(&error))
    } else if let Some(result) = map.remove("result") {
        Ok(result)
    } else {
        Err(protocol(
            "a JSON-RPC response has neither `result` nor `error`",
        ))
    };
    Ok(Message::Response { id, outcome })
}

fn rpc_error(error: &Value) -> McpError {
    let code = error.get("code").and_then(Value::as_i64);
    let message = error.get("message").and_then(Value::as_str);
    match (code, message) {
        (Some(code), Some(message)) => {
            let mut message = message.to_owned();
            truncate(&mut message, MCP_RPC_ERROR_BYTES_MAX);
            McpError::Rpc { code, message }
        }
        _ => protocol("a JSON-RPC error lacks an integer `code` or a string `message`"),
    }
}

/// The JSON-RPC error message of a non-2xx body, when it has one (the
/// TypeScript SDK answers a bad session that way), else "".
pub(super) fn error_detail(body: &[u8]) -> String {
    let Ok(value) = serde_json::from_slice::<Value>(body) else {
        return String::new();
    };
    match value.get("error").map(rpc_error) {
        Some(McpError::Rpc { code, message }) => format!("{message} (JSON-RPC error {code})"),
        _ => String::new(),
    }
}
