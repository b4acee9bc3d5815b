//! Chat Completions (`POST {base}/chat/completions`), streamed: the request
//! body and the chunk decoder. Compatible servers (llama.cpp, vLLM, Ollama)
//! speak the same format with small liberties, tolerated here: `null` for
//! absent fields, a missing tool-call `index`.

use super::{
    parse_data, stream_error, to_json, tool_result_text, Conversation, Image, ModelError,
    Reasoning, StreamEvent, ToolSpec, Turn, Usage,
};
use crate::sse::SseEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    max_completion_tokens: u32,
    /// Absent without tools; `tool_choice` is never sent (auto).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    /// Absent unless a reasoning level is chosen ([`effort`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    /// The Session's key ([`super::prompt_cache_key`]); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

/// Chat Completions' `reasoning_effort` for a level: the API's own values
/// `minimal`, `low`, `medium`, `high`; `max` sends `high`, the highest
/// value every reasoning model accepts (`xhigh` exists only for some).
pub(super) fn effort(level: Reasoning) -> &'static str {
    match level {
        Reasoning::Minimal => "minimal",
        Reasoning::Low => "low",
        Reasoning::Medium => "medium",
        Reasoning::High | Reasoning::Max => "high",
    }
}

#[derive(Serialize)]
struct StreamOptions {
    /// Asks for the final chunk with `usage` (and `choices: []`).
    include_usage: bool,
}

/// Field order keeps a plain message `{"role","content"}` as it always was.
#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    /// Only on a `tool` message.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    /// `null` on an assistant turn that only called tools.
    content: Option<Content<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Content<'a> {
    /// The plain form every compatible server accepts.
    Text(Cow<'a, str>),
    /// Only when there are images.
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    /// JSON text, as the model wrote it (`{}` for none).
    arguments: &'a str,
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionSpec<'a>,
}

#[derive(Serialize)]
struct FunctionSpec<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> Message<'a> {
    fn plain(role: &'static str, content: Content<'a>) -> Self {
        Message {
            role,
            tool_call_id: None,
            content: Some(content),
            tool_calls: Vec::new(),
        }
    }
}

/// One message a turn: the calling assistant turn carries `tool_calls`,
/// each result is a `tool` message (an error's text starts `Error: `, see
/// `tool_result_text`).
fn message<'a>(turn: &'a Turn<'a>) -> Message<'a> {
    match turn {
        Turn::Message(message) => Message::plain(
            message.role.wire(),
            if message.images.is_empty() {
                Content::Text(Cow::Borrowed(&message.text))
            } else {
                let text = Some(Part::Text {
                    text: Cow::Borrowed(&message.text),
                })
                .filter(|_| !message.text.is_empty());
                Content::Parts(
                    text.into_iter()
                        .chain(image_parts(&message.images))
                        .collect(),
                )
            },
        ),
        Turn::ToolCalls { text, calls } => Message {
            role: "assistant",
            tool_call_id: None,
            content: Some(Content::Text(Cow::Borrowed(*text)))
                .filter(|_| !text.is_empty() || calls.is_empty()),
            tool_calls: calls
                .iter()
                .map(|call| WireCall {
                    id: call.id,
                    kind: "function",
                    function: WireFunction {
                        name: call.name,
                        arguments: call.arguments.get(),
                    },
                })
                .collect(),
        },
        Turn::ToolResult {
            call_id,
            content,
            is_error,
            ..
        } => Message {
            role: "tool",
            tool_call_id: Some(call_id),
            content: Some(Content::Text(tool_result_text(content, *is_error))),
            tool_calls: Vec::new(),
        },
    }
}

fn image_parts(images: &[Image]) -> impl Iterator<Item = Part<'_>> {
    images.iter().map(|image| Part::ImageUrl {
        image_url: ImageUrl {
            url: format!("data:{};base64,{}", image.media_type, image.data),
        },
    })
}

/// A `tool` message takes text only: the images of a run of results
/// follow it as one user message, each call's images after a line naming
/// the call (a user message between results would break their run).
fn result_images<'a>(results: &'a [Turn<'a>]) -> Option<Message<'a>> {
    let mut parts = Vec::new();
    for turn in results {
        if let Turn::ToolResult {
            call_id, images, ..
        } = turn
        {
            if !images.is_empty() {
                parts.push(Part::Text {
                    text: Cow::Owned(format!("The images tool call {call_id} returned:")),
                });
                parts.extend(image_parts(images));
            }
        }
    }
    (!parts.is_empty()).then(|| Message::plain("user", Content::Parts(parts)))
}

fn tool(spec: &ToolSpec) -> Tool<'_> {
    Tool {
        kind: "function",
        function: FunctionSpec {
            name: &spec.name,
            description: &spec.description,
            parameters: &spec.parameters,
        },
    }
}

pub(super) fn body(conversation: &Conversation) -> String {
    let system = conversation
        .instructions
        .map(|text| Message::plain("system", Content::Text(Cow::Borrowed(text))));
    let turns = &conversation.turns;
    let mut messages: Vec<Message> = system.into_iter().collect();
    let mut results_from = 0;
    for (at, turn) in turns.iter().enumerate() {
        messages.push(message(turn));
        if !matches!(turn, Turn::ToolResult { .. }) {
            results_from = at + 1;
        } else if !matches!(turns.get(at + 1), Some(Turn::ToolResult { .. })) {
            messages.extend(result_images(&turns[results_from..=at]));
        }
    }
    to_json(&Body {
        model: &conversation.spec.model,
        messages,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        max_completion_tokens: conversation.max_output_tokens,
        tools: conversation.tools.iter().map(tool).collect(),
        reasoning_effort: conversation.reasoning.map(effort),
        prompt_cache_key: conversation.cache_key,
    })
}

#[derive(Deserialize)]
struct Chunk {
    choices: Option<Vec<Choice>>,
    /// Kept as sent for the usage ledger, then read as [`ChunkUsage`].
    usage: Option<Value>,
    error: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice {
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    tool_calls: Option<Vec<ToolCallChunk>>,
}

#[derive(Deserialize)]
struct ToolCallChunk {
    index: Option<u32>,
    id: Option<String>,
    function: Option<FunctionChunk>,
}

#[derive(Deserialize)]
struct FunctionChunk {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<u64>,
}

#[derive(Debug, Default)]
pub(super) struct Decoder {
    done: bool,
    /// One past the highest tool-call index seen.
    tool_calls_seen: u32,
    /// The last `usage` object, as sent.
    raw_usage: Option<Value>,
}

impl Decoder {
    pub(super) fn ended(&self) -> bool {
        self.done
    }

    pub(super) fn raw_usage(&self) -> Option<&Value> {
        self.raw_usage.as_ref()
    }

    pub(super) fn on_event(
        &mut self,
        event: SseEvent,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ModelError> {
        if event.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        if event.event.as_deref() == Some("error") {
            return Err(stream_error(&event.data));
        }
        let chunk: Chunk = parse_data("a chat completion chunk", &event.data)?;
        if chunk.error.is_some() {
            return Err(stream_error(&event.data));
        }
        // One choice is asked for (`n` unset); `choices` is empty in the usage chunk.
        if let Some(choice) = chunk.choices.and_then(|choices| choices.into_iter().next()) {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                    out.push(StreamEvent::TextDelta(text));
                }
                for call in delta.tool_calls.into_iter().flatten() {
                    self.tool_call(call, out);
                }
            }
            // Some compatible servers send "" for "not yet".
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                out.push(StreamEvent::Finished { reason });
            }
        }
        if let Some(raw) = chunk.usage {
            let usage: ChunkUsage = serde_json::from_value(raw.clone()).map_err(|e| {
                ModelError::new(false, format!("provider sent malformed usage: {e}"))
            })?;
            self.raw_usage = Some(raw);
            out.push(StreamEvent::Usage(Usage {
                input_tokens: usage.prompt_tokens.unwrap_or(0),
                output_tokens: usage.completion_tokens.unwrap_or(0),
                cache_read_tokens: usage.prompt_tokens_details.and_then(|d| d.cached_tokens),
                cache_write_tokens: None,
                reasoning_tokens: usage
                    .completion_tokens_details
                    .and_then(|d| d.reasoning_tokens),
            }));
        }
        Ok(())
    }

    fn tool_call(&mut self, call: ToolCallChunk, out: &mut Vec<StreamEvent>) {
        let id = call.id.filter(|id| !id.is_empty());
        let index = match call.index {
            Some(index) => index,
            // Without an index, an id starts a new call; a piece without
            // one continues the latest.
            None if id.is_some() => self.tool_calls_seen,
            None => self.tool_calls_seen.saturating_sub(1),
        };
        self.tool_calls_seen = self.tool_calls_seen.max(index.saturating_add(1));
        let (name, arguments) = match call.function {
            Some(function) => (function.name, function.arguments),
            None => (None, None),
        };
        let name = name.filter(|name| !name.is_empty());
        let arguments = arguments.unwrap_or_default();
        if id.is_some() || name.is_some() || !arguments.is_empty() {
            out.push(StreamEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{
        answer_of, assert_split_invariant, crlf, request_fixture, tool_call_of, tool_fixture,
    };
    use super::super::*;
    use serde_json::json;

    /// A Session's requests carry one `prompt_cache_key`, the same every
    /// time, another Session's (or Agent's) another, and it names neither.
    #[test]
    fn prompt_cache_key_is_per_session_and_opaque() {
        let (tools, items) = tool_fixture();
        let spec = ModelSpec::parse("openai/gpt-4o-mini").unwrap();
        let key = prompt_cache_key("agent-1", "s1");
        assert_eq!(key, prompt_cache_key("agent-1", "s1"));
        assert_eq!(key.len(), 32);
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
        for other in [
            prompt_cache_key("agent-1", "s2"),
            prompt_cache_key("agent-2", "s1"),
            prompt_cache_key("agent-1s", "1"),
        ] {
            assert_ne!(key, other);
        }
        let req = ToolRequest {
            spec: &spec,
            instructions: None,
            items: &items,
            tools: &tools,
            max_output_tokens: 1024,
            reasoning: None,
            cache_key: Some(&key),
        };
        let body = tool_call_of(&ProviderConfig::new(Provider::OpenAi, None, None), &req);
        assert_eq!(body["prompt_cache_key"], json!(key));
        let req = ToolRequest {
            cache_key: None,
            ..req
        };
        let body = tool_call_of(&ProviderConfig::new(Provider::OpenAi, None, None), &req);
        assert!(body.get("prompt_cache_key").is_none());
    }

    #[test]
    fn build_call_with_tools_and_tool_turns() {
        let (tools, items) = tool_fixture();
        let spec = ModelSpec::parse("openai/gpt-4o-mini").unwrap();
        let req = ToolRequest {
            spec: &spec,
            instructions: Some("Be brief."),
            items: &items,
            tools: &tools,
            max_output_tokens: 1024,
            reasoning: None,
            cache_key: None,
        };
        let config = ProviderConfig::new(Provider::OpenAi, None, Some("sk-test-123".into()));
        let call = build_call_with_tools(&config, &req).unwrap();
        assert_eq!(call.url, "https://api.openai.com/v1/chat/completions");
        assert_eq!(
            call.headers,
            vec![
                ("content-type".into(), "application/json".into()),
                ("authorization".into(), "Bearer sk-test-123".into()),
            ]
        );
        assert_eq!(
            tool_call_of(&config, &req),
            json!({
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Weather and time in Paris?"},
                    {"role": "assistant", "content": "Let me check.", "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {
                            "name": "get_weather",
                            "arguments": "{\"unit\": \"celsius\", \"location\": \"Paris\"}",
                        }},
                        {"id": "call_2", "type": "function", "function": {
                            "name": "get_time",
                            "arguments": "{}",
                        }},
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "18°C, light rain"},
                    {"role": "tool", "tool_call_id": "call_2", "content": "Error: clock service unavailable"},
                    {"role": "user", "content": "And tomorrow?"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_completion_tokens": 1024,
                "tools": [
                    {"type": "function", "function": {
                        "name": "get_weather",
                        "description": "Current weather at a place.",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "location": {"type": "string"},
                                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                            },
                            "required": ["location"],
                        },
                    }},
                    {"type": "function", "function": {
                        "name": "get_time",
                        "parameters": {"type": "object", "properties": {}},
                    }},
                ],
            })
        );
        // The arguments are the model's own text, not a re-serialisation.
        assert!(call
            .body
            .contains(r#""arguments":"{\"unit\": \"celsius\", \"location\": \"Paris\"}""#));
    }

    #[test]
    fn build_call_text_only_with_key() {
        let (spec, messages) = request_fixture("openai/gpt-4o-mini", false);
        let req = ModelRequest {
            spec: &spec,
            instructions: Some("Be brief."),
            messages: &messages,
            max_output_tokens: 1024,
        };
        let config = ProviderConfig::new(Provider::OpenAi, None, Some("sk-test-123".into()));
        let call = build_call(&config, &req);
        assert_eq!(call.url, "https://api.openai.com/v1/chat/completions");
        assert_eq!(
            call.headers,
            vec![
                ("content-type".into(), "application/json".into()),
                ("authorization".into(), "Bearer sk-test-123".into()),
            ]
        );
        let body: Value = serde_json::from_str(&call.body).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "What is in this picture?"},
                    {"role": "assistant", "content": "A mushroom."},
                    {"role": "user", "content": "Which kind?"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_completion_tokens": 1024,
            })
        );
    }

    #[test]
    fn build_call_images_no_key_trailing_slash_model_with_slash() {
        let (spec, messages) = request_fixture("openai/meta-llama/Llama-3", true);
        let req = ModelRequest {
            spec: &spec,
            instructions: None,
            messages: &messages,
            max_output_tokens: 64,
        };
        let config = ProviderConfig::new(
            Provider::OpenAi,
            Some("http://127.0.0.1:8080/v1/".into()),
            None,
        );
        let call = build_call(&config, &req);
        assert_eq!(call.url, "http://127.0.0.1:8080/v1/chat/completions");
        assert_eq!(
            call.headers,
            vec![("content-type".into(), "application/json".into())]
        );
        let body: Value = serde_json::from_str(&call.body).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "meta-llama/Llama-3",
                "messages": [
                    {"role": "user", "content": [
                        {"type": "text", "text": "What is in this picture?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}},
                    ]},
                    {"role": "assistant", "content": "A mushroom."},
                    {"role": "user", "content": "Which kind?"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_completion_tokens": 64,
            })
        );
    }

    /// A real `gpt-4o-mini` text stream (ids shortened), with a multi-byte
    /// answer so splits fall inside characters.
    const TEXT_STREAM: &str = r#"data: {"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"content":"Shiitake"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"content":" (椎茸) — très bon 🍄"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_06737a9306","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

"#;

    /// Two parallel tool calls, arguments streamed in pieces.
    const TOOL_STREAM: &str = r#"data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1741570000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1741570000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"loc"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1741570000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ation\": \"Paris\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1741570000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_Xq4l1ZTgxSCplzB8w3bWa0Hk","type":"function","function":{"name":"get_time","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1741570000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"tz\": \"Europe/Paris\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1741570000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}

data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1741570000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[],"usage":{"prompt_tokens":82,"completion_tokens":45,"total_tokens":127}}

data: [DONE]

"#;

    #[test]
    fn text_stream_in_every_split() {
        for stream in [TEXT_STREAM.to_owned(), crlf(TEXT_STREAM)] {
            let events = assert_split_invariant(Provider::OpenAi, stream.as_bytes());
            assert_eq!(
                events,
                vec![
                    StreamEvent::TextDelta("Shiitake".into()),
                    StreamEvent::TextDelta(" (椎茸) — très bon 🍄".into()),
                    StreamEvent::Finished {
                        reason: "stop".into()
                    },
                    StreamEvent::Usage(Usage {
                        input_tokens: 19,
                        output_tokens: 10,
                        cache_read_tokens: Some(0),
                        cache_write_tokens: None,
                        reasoning_tokens: Some(0),
                    }),
                ]
            );
            let answer = answer_of(&events);
            assert_eq!(answer.text, "Shiitake (椎茸) — très bon 🍄");
            assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
            assert!(answer.tool_calls.is_empty());
        }
    }

    #[test]
    fn tool_call_stream_accumulates() {
        let events = assert_split_invariant(Provider::OpenAi, TOOL_STREAM.as_bytes());
        let answer = answer_of(&events);
        assert_eq!(answer.text, "");
        assert_eq!(
            answer.tool_calls,
            vec![
                ToolCall {
                    id: "call_DdmO9pD3xa9XTPNJ32zg2hcA".into(),
                    name: "get_weather".into(),
                    arguments: r#"{"location": "Paris"}"#.into(),
                },
                ToolCall {
                    id: "call_Xq4l1ZTgxSCplzB8w3bWa0Hk".into(),
                    name: "get_time".into(),
                    arguments: r#"{"tz": "Europe/Paris"}"#.into(),
                },
            ]
        );
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            answer.usage,
            Some(Usage {
                input_tokens: 82,
                output_tokens: 45,
                ..Usage::default()
            })
        );
    }

    #[test]
    fn tool_calls_without_index() {
        // Some compatible servers omit `index`: an id starts a call.
        let stream = concat!(
            r#"data: {"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"x\""}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}"#,
            "\n\n",
            r#"data: {"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}"#,
            "\n\n",
            "data: [DONE]\n\n",
        );
        let events = assert_split_invariant(Provider::OpenAi, stream.as_bytes());
        let calls = answer_of(&events).tool_calls;
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].arguments.as_str()),
            ("a", r#"{"x":1}"#)
        );
        assert_eq!((calls[1].id.as_str(), calls[1].name.as_str()), ("b", "g"));
    }

    #[test]
    fn truncated_stream_is_retryable() {
        let cut = TEXT_STREAM.find("data: [DONE]").unwrap();
        let mut decoder = StreamDecoder::new(Provider::OpenAi);
        let events = decoder.push(&TEXT_STREAM.as_bytes()[..cut]).unwrap();
        assert_eq!(events.len(), 4);
        let error = decoder.finish().unwrap_err();
        assert!(error.retryable);
        assert_eq!(
            error.diagnostic,
            "provider stream ended before `data: [DONE]`"
        );

        // Cut inside a chunk's JSON: the half line is dropped, not parsed.
        let mut decoder = StreamDecoder::new(Provider::OpenAi);
        decoder.push(&TEXT_STREAM.as_bytes()[..200]).unwrap();
        assert!(decoder.finish().unwrap_err().retryable);
    }

    #[test]
    fn in_stream_errors() {
        let cases = [
            // OpenAI mid-stream failure.
            (
                r#"data: {"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#,
                true,
                "provider stream error: server_error: The server had an error while processing your request. Sorry about that!",
            ),
            // llama.cpp / vLLM put the HTTP status in `code`.
            (
                r#"data: {"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#,
                true,
                "provider stream error: unavailable_error: Loading model",
            ),
            (
                r#"data: {"error":{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}}"#,
                false,
                "provider stream error: BadRequestError: max_tokens is too large",
            ),
            (
                "event: error\ndata: upstream went away",
                false,
                "provider stream error: upstream went away",
            ),
        ];
        for (wire, retryable, diagnostic) in cases {
            let mut decoder = StreamDecoder::new(Provider::OpenAi);
            let first =
                r#"data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
            let error = decoder
                .push(format!("{first}\n\n{wire}\n\n").as_bytes())
                .unwrap_err();
            assert_eq!(
                (error.retryable, error.diagnostic.as_str()),
                (retryable, diagnostic)
            );
            // The call is over: later bytes and finish() repeat the error.
            assert_eq!(decoder.push(b"data: [DONE]\n\n").unwrap_err(), error);
            assert_eq!(decoder.finish().unwrap_err(), error);
        }
    }

    #[test]
    fn malformed_json_is_not_retryable() {
        let mut decoder = StreamDecoder::new(Provider::OpenAi);
        let error = decoder
            .push(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}\n\n")
            .unwrap_err();
        assert!(!error.retryable);
        assert!(
            error
                .diagnostic
                .starts_with("provider sent malformed JSON in a chat completion chunk: "),
            "{error}"
        );
        let error = StreamDecoder::new(Provider::OpenAi)
            .push(b"data: {\"choices\":[{\"delta\":{\"content\":7}}]}\n\n")
            .unwrap_err();
        assert!(
            error.diagnostic.contains("invalid type: integer `7`"),
            "{error}"
        );
    }

    #[test]
    fn bytes_after_done_are_ignored() {
        let mut decoder = StreamDecoder::new(Provider::OpenAi);
        let events = decoder
            .push(b"data: [DONE]\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n\ndata: not json\n\n")
            .unwrap();
        assert!(events.is_empty());
        assert_eq!(decoder.finish().unwrap(), vec![]);
    }
}
