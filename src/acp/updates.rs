//! What an ACP client sees of a Session: the watch frames of one prompt's
//! command as `session/update` notifications ([`Follow`]), its settlement
//! as the `session/prompt` answer ([`stop`]), and the stored transcript as
//! the replay `session/load` sends ([`replay`]).

use crate::limits::ACP_STREAM_BYTES_MAX;
use crate::rpc::{self, RpcError};
use crate::settlement::Settlement;
use crate::store::Terminal;
use serde_json::{json, Value};

const UPDATE: &str = "session/update";

fn update(session_id: &str, update: Value) -> String {
    rpc::notification(UPDATE, json!({ "sessionId": session_id, "update": update }))
}

fn text_block(text: &str) -> Value {
    json!({ "type": "text", "text": text })
}

fn chunk(kind: &str, content: Value) -> Value {
    json!({ "sessionUpdate": kind, "content": content })
}

/// `tool_call`: one recorded call, running from the moment it is recorded
/// (a step's calls run as soon as the step is stored).
fn tool_call(call: &Value, status: &str) -> Value {
    let name = call["name"].as_str().unwrap_or_default();
    json!({
        "sessionUpdate": "tool_call",
        "toolCallId": call["id"],
        "title": name,
        "kind": if name == "execute" { "execute" } else { "other" },
        "status": status,
        "rawInput": call["arguments"],
    })
}

/// `tool_call_update`: a `tool` message, the call's outcome.
fn tool_result(message: &Value) -> Value {
    let mut update = json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": message["toolCallId"],
        "status": if message["isError"] == Value::Bool(true) { "failed" } else { "completed" },
        "content": [{ "type": "content", "content": text_block(message["text"].as_str().unwrap_or_default()) }],
    });
    if let Some(data) = message.get("data") {
        update["rawOutput"] = data.clone();
    }
    update
}

/// The `session/prompt` answer for a settled command: `completed` ends the
/// turn (`end_turn`), `cancelled` answers `cancelled` (ACP requires it
/// after `session/cancel`); `failed` and `interrupted` are errors whose
/// message is the diagnostic, since no stop reason says "it broke".
pub fn stop(id: &Value, settlement: &Settlement) -> String {
    let reason = match settlement.terminal {
        Terminal::Completed => "end_turn",
        Terminal::Cancelled => "cancelled",
        Terminal::Failed | Terminal::Interrupted => {
            let terminal = match settlement.terminal {
                Terminal::Failed => "failed",
                _ => "interrupted",
            };
            let diagnostic = settlement.diagnostic.as_deref().unwrap_or("no diagnostic");
            let mut error = RpcError::new(
                rpc::SERVER_ERROR,
                format!("the turn {terminal}: {diagnostic}"),
            );
            error.data = Some(json!({
                "commandId": settlement.command_id,
                "terminal": terminal,
                "diagnostic": settlement.diagnostic,
            }));
            return rpc::error(id, &error);
        }
    };
    rpc::response(id, json!({ "stopReason": reason }))
}

/// One prompt's stream: the Session's published events in, the JSON-RPC
/// messages to send out, until the command settles. Only the prompt's own
/// command is followed: frames of other turns of the Session are not its
/// output. Bounded: past `ACP_STREAM_BYTES_MAX` bytes of notifications it
/// ends with an error (the turn goes on; `session/load` reads it).
#[derive(Debug, Clone)]
pub struct Follow {
    id: Value,
    session_id: String,
    command_id: String,
    sent_bytes: usize,
    done: bool,
}

impl Follow {
    pub fn new(id: Value, session_id: &str, command_id: &str) -> Self {
        Follow {
            id,
            session_id: session_id.to_owned(),
            command_id: command_id.to_owned(),
            sent_bytes: 0,
            done: false,
        }
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Whether the final response was produced: the stream ends.
    pub fn done(&self) -> bool {
        self.done
    }

    /// One published event (its SSE name and JSON data): the messages to
    /// send, in order.
    pub fn event(&mut self, name: &str, data: &str) -> Vec<String> {
        if self.done || name != "frame" {
            return Vec::new();
        }
        let Ok(frame) = serde_json::from_str::<Value>(data) else {
            return Vec::new();
        };
        let ours = |v: &Value| v.as_str() == Some(self.command_id.as_str());
        let updates: Vec<Value> = match frame["type"].as_str() {
            Some("delta") if ours(&frame["commandId"]) => {
                vec![chunk(
                    "agent_message_chunk",
                    text_block(frame["text"].as_str().unwrap_or_default()),
                )]
            }
            // The answer's text went out as deltas; a tool step's calls
            // and a tool's outcome are what the message adds.
            Some("message") if ours(&frame["message"]["commandId"]) => {
                let message = &frame["message"];
                match message["role"].as_str() {
                    Some("assistant") => message["toolCalls"]
                        .as_array()
                        .map(|calls| calls.iter().map(|c| tool_call(c, "in_progress")).collect())
                        .unwrap_or_default(),
                    Some("tool") => vec![tool_result(message)],
                    _ => Vec::new(),
                }
            }
            Some("settled") if ours(&frame["settlement"]["commandId"]) => {
                self.done = true;
                return match serde_json::from_value::<Settlement>(frame["settlement"].clone()) {
                    Ok(settlement) => vec![stop(&self.id, &settlement)],
                    Err(e) => vec![rpc::error(
                        &self.id,
                        &RpcError::new(rpc::INTERNAL_ERROR, format!("settlement: {e}")),
                    )],
                };
            }
            _ => Vec::new(),
        };
        let mut out = Vec::with_capacity(updates.len());
        for u in updates {
            let text = update(&self.session_id, u);
            self.sent_bytes += text.len();
            if self.sent_bytes > ACP_STREAM_BYTES_MAX {
                out.push(self.end(format!(
                    "this prompt's stream passed {ACP_STREAM_BYTES_MAX} bytes and was ended; \
                     the turn goes on: session/load reads it"
                )));
                break;
            }
            out.push(text);
        }
        out
    }

    /// The stream cannot go on (its reader fell too far behind): the error
    /// that ends it. The turn goes on.
    pub fn overrun(&mut self) -> String {
        self.end(
            "the client fell too far behind this prompt's stream, which was ended; \
             the turn goes on: session/load reads it"
                .into(),
        )
    }

    /// The runtime refused to stream (too many observers): the error
    /// that answers the prompt instead; its command is admitted.
    pub fn refuse(&mut self, refusal: crate::error::ApiError) -> String {
        self.done = true;
        let mut error = RpcError::from(refusal);
        if let Some(Value::Object(data)) = &mut error.data {
            data.insert("commandId".into(), json!(self.command_id));
        }
        rpc::error(&self.id, &error)
    }

    fn end(&mut self, message: String) -> String {
        self.done = true;
        let mut error = RpcError::new(rpc::SERVER_ERROR, message);
        error.data = Some(json!({ "commandId": self.command_id }));
        rpc::error(&self.id, &error)
    }
}

/// The stored messages of a Session page (oldest first) as the
/// `session/update` notifications `session/load` replays: prompts as
/// `user_message_chunk` (text and images), answers as
/// `agent_message_chunk`, each recorded call as `tool_call` and its
/// outcome as `tool_call_update`. Operator lines have no ACP role and are
/// left out.
pub fn replay(session_id: &str, messages: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for m in messages {
        let text = m["text"].as_str().unwrap_or_default();
        match m["role"].as_str() {
            Some("user") => {
                if !text.is_empty() {
                    out.push(update(
                        session_id,
                        chunk("user_message_chunk", text_block(text)),
                    ));
                }
                for image in m["images"].as_array().into_iter().flatten() {
                    let block = json!({ "type": "image", "mimeType": image["mediaType"], "data": image["data"] });
                    out.push(update(session_id, chunk("user_message_chunk", block)));
                }
            }
            Some("assistant") => {
                if !text.is_empty() {
                    out.push(update(
                        session_id,
                        chunk("agent_message_chunk", text_block(text)),
                    ));
                }
                for call in m["toolCalls"].as_array().into_iter().flatten() {
                    out.push(update(session_id, tool_call(call, "in_progress")));
                }
            }
            Some("tool") => out.push(update(session_id, tool_result(m))),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn settled(command: &str, terminal: &str, diagnostic: Option<&str>) -> String {
        json!({ "type": "settled", "settlement": {
            "commandId": command, "terminal": terminal, "answer": null, "usage": null,
            "toolCallCount": 0, "diagnostic": diagnostic,
        }})
        .to_string()
    }

    #[test]
    fn follows_only_its_command_until_it_settles() {
        let mut f = Follow::new(json!(4), "s", "c1");
        let other = json!({"type": "delta", "commandId": "c0", "text": "not mine"}).to_string();
        assert!(f.event("frame", &other).is_empty());
        let delta = json!({"type": "delta", "commandId": "c1", "text": "Hel"}).to_string();
        let out = f.event("frame", &delta);
        let n = parse(&out[0]);
        assert_eq!(n["method"], "session/update");
        assert_eq!(n["params"]["sessionId"], "s");
        assert_eq!(
            n["params"]["update"]["sessionUpdate"],
            "agent_message_chunk"
        );
        assert_eq!(
            n["params"]["update"]["content"],
            json!({"type": "text", "text": "Hel"})
        );
        // The user's own prompt is not echoed back.
        let user = json!({"type": "message", "message": {"role": "user", "commandId": "c1", "text": "hi"}});
        assert!(f.event("frame", &user.to_string()).is_empty());
        let step = json!({"type": "message", "message": {"role": "assistant", "commandId": "c1", "text": "",
            "toolCalls": [{"id": "t1", "name": "execute", "arguments": {"code": "1"}}]}});
        let call = parse(&f.event("frame", &step.to_string())[0]);
        assert_eq!(
            call["params"]["update"],
            json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "execute", "kind": "execute",
                "status": "in_progress", "rawInput": {"code": "1"}})
        );
        let result = json!({"type": "message", "message": {"role": "tool", "commandId": "c1", "text": "boom",
            "toolCallId": "t1", "toolName": "execute", "isError": true}});
        let up = parse(&f.event("frame", &result.to_string())[0]);
        assert_eq!(up["params"]["update"]["sessionUpdate"], "tool_call_update");
        assert_eq!(up["params"]["update"]["status"], "failed");
        assert_eq!(
            up["params"]["update"]["content"][0]["content"]["text"],
            "boom"
        );
        assert!(f.event("runtime-error", "{}").is_empty());
        assert!(f
            .event("frame", &settled("c0", "completed", None))
            .is_empty());
        assert!(!f.done());
        let end = f.event("frame", &settled("c1", "completed", None));
        assert_eq!(
            parse(&end[0]),
            json!({"jsonrpc": "2.0", "id": 4, "result": {"stopReason": "end_turn"}})
        );
        assert!(f.done());
        assert!(f.event("frame", &delta).is_empty(), "nothing after the end");
    }

    #[test]
    fn settlements_map_to_stop_reasons_or_errors() {
        let mut f = Follow::new(json!("p"), "s", "c");
        let end = parse(&f.event("frame", &settled("c", "cancelled", None))[0]);
        assert_eq!(end["result"]["stopReason"], "cancelled");
        for terminal in ["failed", "interrupted"] {
            let mut f = Follow::new(json!("p"), "s", "c");
            let end = parse(
                &f.event(
                    "frame",
                    &settled("c", terminal, Some("model:unavailable: x")),
                )[0],
            );
            assert_eq!(end["error"]["code"], rpc::SERVER_ERROR);
            assert_eq!(end["error"]["data"]["terminal"], terminal);
            let message = end["error"]["message"].as_str().unwrap();
            assert!(
                message.contains(terminal) && message.contains("model:unavailable"),
                "{message}"
            );
        }
    }

    #[test]
    fn the_stream_is_bounded() {
        let mut f = Follow::new(json!(1), "s", "c");
        let big = "x".repeat(65_536);
        let delta = json!({"type": "delta", "commandId": "c", "text": big}).to_string();
        let mut sent = 0;
        while !f.done() {
            for m in f.event("frame", &delta) {
                sent += m.len();
            }
        }
        assert!(sent <= ACP_STREAM_BYTES_MAX + 1024, "{sent}");
        let mut g = Follow::new(json!(1), "s", "c");
        let end = parse(&g.overrun());
        assert_eq!(end["error"]["data"]["commandId"], "c");
        assert!(g.done());
        let mut r = Follow::new(json!(2), "s", "c");
        let refused = parse(&r.refuse(crate::error::ApiError::TooManyObservers));
        assert_eq!(refused["id"], 2);
        assert_eq!(
            refused["error"]["data"],
            json!({"code": "too_many_observers", "status": 429, "commandId": "c"})
        );
    }

    #[test]
    fn replays_the_transcript() {
        let messages = vec![
            json!({"role": "user", "text": "hi", "images": [{"mediaType": "image/png", "data": "AAAA"}]}),
            json!({"role": "operator", "text": "note"}),
            json!({"role": "assistant", "text": "", "toolCalls": [{"id": "t", "name": "notes", "arguments": {}}]}),
            json!({"role": "tool", "text": "ok", "toolCallId": "t", "data": {"n": 1}}),
            json!({"role": "assistant", "text": "done"}),
        ];
        let kinds: Vec<String> = replay("s", &messages)
            .iter()
            .map(|m| {
                parse(m)["params"]["update"]["sessionUpdate"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "user_message_chunk",
                "user_message_chunk",
                "tool_call",
                "tool_call_update",
                "agent_message_chunk"
            ]
        );
        let out = replay("s", &messages);
        assert_eq!(
            parse(&out[1])["params"]["update"]["content"]["type"],
            "image"
        );
        assert_eq!(
            parse(&out[3])["params"]["update"]["rawOutput"],
            json!({"n": 1})
        );
        assert_eq!(parse(&out[3])["params"]["update"]["status"], "completed");
    }
}
