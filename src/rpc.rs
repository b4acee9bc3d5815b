//! The JSON-RPC 2.0 envelope of ACP (`POST /acp`) and MCP (`POST /mcp`)
//! over HTTP: one message per request body, decoded into a request (with
//! its id) or a notification, and the responses and errors written back.
//! No batches (ACP uses none, MCP forbids them since 2025-06-18: an array
//! is an invalid request answered with `id: null`, as their SDKs do).

use crate::error::ApiError;
use serde_json::{json, Map, Value};

/// JSON-RPC error codes (JSON-RPC 2.0, and ACP's resource-not-found).
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP's "resource not found" (an unknown Session).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// A server error (JSON-RPC's implementation-defined range): the runtime
/// refused the request by one of its rules (`data.code` names it), or the
/// prompt's turn ended `failed` or `interrupted`.
pub const SERVER_ERROR: i64 = -32000;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The HTTP status the error answers with: every refusal is a 4xx like
    /// the HTTP contract's (a message that does not decode or names no
    /// served method 400, an unknown Session 404, a rule of the runtime its
    /// own status, carried in `data.status`); only a storage fault is a 500.
    pub fn http_status(&self) -> u16 {
        match self.code {
            RESOURCE_NOT_FOUND => 404,
            INTERNAL_ERROR => 500,
            SERVER_ERROR => self
                .data
                .as_ref()
                .and_then(|d| d["status"].as_u64())
                .and_then(|s| u16::try_from(s).ok())
                .filter(|s| (400..500).contains(s))
                .unwrap_or(400),
            _ => 400,
        }
    }

    /// `-32602` naming the parameter at fault.
    pub fn params(message: impl Into<String>) -> Self {
        RpcError::new(INVALID_PARAMS, message)
    }

    fn to_value(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// A refusal of the runtime's rules, with the HTTP contract's code and
/// status as `data`, so an ACP client sees the same reason an HTTP client
/// would (`queue_full`, `not_owner`, `request_conflict`, ...).
impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> Self {
        let code = match &e {
            ApiError::SessionNotFound(_) => RESOURCE_NOT_FOUND,
            ApiError::InvalidRequest(_) => INVALID_PARAMS,
            ApiError::Internal(_) => INTERNAL_ERROR,
            _ => SERVER_ERROR,
        };
        RpcError {
            code,
            message: e.to_string(),
            data: Some(json!({ "code": e.code(), "status": e.status() })),
        }
    }
}

/// One decoded message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: answered with a response carrying `id`.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification: never answered.
    Notification { method: String, params: Value },
}

/// A message that cannot be served, and the id to answer it with (`null`
/// when the id could not be read).
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub id: Value,
    pub error: RpcError,
}

/// Decodes one JSON-RPC message. `params` is `{}` when absent.
pub fn decode(body: &[u8]) -> Result<Message, Refused> {
    let refuse = |id: &Value, code, message: String| Refused {
        id: id.clone(),
        error: RpcError::new(code, message),
    };
    let value = crate::json::strict(body).map_err(|e| {
        refuse(
            &Value::Null,
            PARSE_ERROR,
            format!("the body is not one JSON value: {e}"),
        )
    })?;
    let Value::Object(mut object) = value else {
        let what = if value.is_array() {
            "a batch (JSON array): send one JSON-RPC message per request"
        } else {
            "not a JSON-RPC message object"
        };
        return Err(refuse(&Value::Null, INVALID_REQUEST, what.into()));
    };
    // The id first, so every later refusal can name the request.
    let id = match object.remove("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id),
        Some(Value::Null) => {
            return Err(refuse(
                &Value::Null,
                INVALID_REQUEST,
                "id: null is not a request id; omit it for a notification".into(),
            ))
        }
        Some(_) => {
            return Err(refuse(
                &Value::Null,
                INVALID_REQUEST,
                "id: must be a string or a number".into(),
            ))
        }
    };
    let at = id.clone().unwrap_or(Value::Null);
    if object.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Err(refuse(
            &at,
            INVALID_REQUEST,
            "jsonrpc: must be \"2.0\"".into(),
        ));
    }
    let method = match object.remove("method") {
        Some(Value::String(m)) => m,
        Some(_) => {
            return Err(refuse(
                &at,
                INVALID_REQUEST,
                "method: must be a string".into(),
            ))
        }
        None if object.contains_key("result") || object.contains_key("error") => {
            return Err(refuse(
                &at,
                INVALID_REQUEST,
                "a response, but this Agent sends no requests to answer".into(),
            ))
        }
        None => return Err(refuse(&at, INVALID_REQUEST, "method: missing".into())),
    };
    let params = match object.remove("params") {
        None => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return Err(refuse(
                &at,
                INVALID_PARAMS,
                "params: must be an object".into(),
            ))
        }
    };
    if let Some(key) = object.keys().find(|k| *k != "jsonrpc") {
        return Err(refuse(
            &at,
            INVALID_REQUEST,
            format!("unknown member `{}`", crate::text::shorten(key)),
        ));
    }
    Ok(match id {
        Some(id) => Message::Request { id, method, params },
        None => Message::Notification { method, params },
    })
}

// The envelopes are written as text around their JSON values (smaller in
// the wasm than building a `Value` to print), keys sorted as `json!` would.

/// A success response, as JSON text (`result`: a JSON value or its text).
pub fn response(id: &Value, result: impl std::fmt::Display) -> String {
    format!(r#"{{"id":{id},"jsonrpc":"2.0","result":{result}}}"#)
}

/// An error response, as JSON text.
pub fn error(id: &Value, error: &RpcError) -> String {
    format!(
        r#"{{"error":{},"id":{id},"jsonrpc":"2.0"}}"#,
        error.to_value()
    )
}

/// A notification, as JSON text.
pub fn notification(method: &str, params: Value) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":{},"params":{params}}}"#,
        Value::from(method)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> Refused {
        decode(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn decodes_requests_and_notifications() {
        let m = decode(
            br#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":1}}"#,
        )
        .unwrap();
        assert_eq!(
            m,
            Message::Request {
                id: json!(7),
                method: "initialize".into(),
                params: json!({"protocolVersion": 1}),
            }
        );
        let n = decode(br#"{"jsonrpc":"2.0","method":"session/cancel"}"#).unwrap();
        assert_eq!(
            n,
            Message::Notification {
                method: "session/cancel".into(),
                params: json!({}),
            }
        );
    }

    #[test]
    fn refusals_carry_the_right_code_and_id() {
        let r = refused("{nope");
        assert_eq!((r.error.code, r.id), (PARSE_ERROR, Value::Null));
        let r = refused("[]");
        assert_eq!(r.error.code, INVALID_REQUEST);
        assert!(r.error.message.contains("batch"), "{}", r.error.message);
        let r = refused(r#"{"id":"a","method":"initialize"}"#);
        assert_eq!((r.error.code, r.id), (INVALID_REQUEST, json!("a")));
        assert!(r.error.message.contains("jsonrpc"));
        let r = refused(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#);
        assert_eq!((r.error.code, r.id), (INVALID_REQUEST, Value::Null));
        let r = refused(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#);
        assert_eq!((r.error.code, r.id), (INVALID_PARAMS, json!(1)));
        let r = refused(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
        assert!(r.error.message.contains("response"), "{}", r.error.message);
        let r = refused(r#"{"jsonrpc":"2.0","id":1,"method":"x","extra":1}"#);
        assert!(r.error.message.contains("extra"), "{}", r.error.message);
        // A repeated key is ambiguous: refused, not resolved silently.
        let r = refused(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"x"}"#);
        assert_eq!(r.error.code, PARSE_ERROR);
    }

    #[test]
    fn envelopes_are_the_json_of_their_members() {
        let id = json!("a\"b");
        let result = json!({"z": [1, "x"], "a": null});
        assert_eq!(
            response(&id, result.clone()),
            json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
        );
        let e = RpcError::from(ApiError::QueueFull("full".into()));
        assert_eq!(
            error(&json!(7), &e),
            json!({"jsonrpc": "2.0", "id": 7, "error": e.to_value()}).to_string()
        );
        assert_eq!(
            notification("session/\"update", result.clone()),
            json!({"jsonrpc": "2.0", "method": "session/\"update", "params": result}).to_string()
        );
    }

    #[test]
    fn errors_answer_a_4xx_of_their_cause() {
        let status = |code| RpcError::new(code, "x").http_status();
        assert_eq!(
            [
                PARSE_ERROR,
                INVALID_REQUEST,
                METHOD_NOT_FOUND,
                INVALID_PARAMS
            ]
            .map(status),
            [400; 4]
        );
        assert_eq!(status(RESOURCE_NOT_FOUND), 404);
        assert_eq!(status(INTERNAL_ERROR), 500);
        assert_eq!(
            RpcError::from(ApiError::QueueFull("full".into())).http_status(),
            429
        );
        assert_eq!(
            RpcError::from(ApiError::SessionNotFound("s".into())).http_status(),
            404
        );
    }

    #[test]
    fn api_errors_keep_the_contract_code() {
        let e = RpcError::from(ApiError::SessionNotFound("s".into()));
        assert_eq!(e.code, RESOURCE_NOT_FOUND);
        assert_eq!(
            e.data,
            Some(json!({"code": "session_not_found", "status": 404}))
        );
        let text = error(&json!(3), &e);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["data"]["code"], "session_not_found");
        assert_eq!(v["id"], 3);
    }
}
