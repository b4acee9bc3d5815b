//! Anthropic Messages (`POST {base}/v1/messages`), streamed: the request body
//! and the event decoder. Events are dispatched on the SSE `event:` name, as
//! the official SDKs do, so an event added later is ignored unread.

use super::{
    parse_data, stream_error, to_json, tool_result_text, Conversation, Image, ModelError,
    ModelMessage, Reasoning, StreamEvent, ToolSpec, Turn, Usage,
};
use crate::sse::SseEvent;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    /// One text block, a prompt-cache breakpoint ([`breakpoints`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Cached<'a>>,
    messages: Vec<Message<'a>>,
    max_tokens: u32,
    stream: bool,
    /// Absent without tools; `tool_choice` is never sent (auto).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    /// Extended thinking, only when a reasoning level is chosen and it fits
    /// ([`thinking`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
}

#[derive(Serialize)]
struct Thinking {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

/// The thinking budget of a level, in tokens (Anthropic's minimum is 1024).
pub(super) fn budget(level: Reasoning) -> u32 {
    match level {
        Reasoning::Minimal => 1_024,
        Reasoning::Low => 2_048,
        Reasoning::Medium => 8_192,
        Reasoning::High => 16_384,
        Reasoning::Max => 32_768,
    }
}

/// `thinking: {type: "enabled", budget_tokens}` for a level, or nothing:
/// the budget must be at least 1024 and below `max_tokens` (it is cut to
/// `max_tokens - 1`; with `max_tokens` at most 1024 no thinking is sent),
/// and a request continuing a tool-use cycle (the last assistant message
/// calls tools) goes without thinking, since the API then wants that
/// message to start with the thinking block, which is not kept.
fn thinking(level: Option<Reasoning>, max_tokens: u32, messages: &[Message]) -> Option<Thinking> {
    let level = level?;
    let budget = budget(level).min(max_tokens.saturating_sub(1));
    if budget < 1_024 {
        return None;
    }
    let in_tool_cycle = messages
        .iter()
        .rev()
        .find(|m| m.role == "assistant")
        .is_some_and(|m| m.content.iter().any(|p| matches!(p, Part::ToolUse { .. })));
    if in_tool_cycle {
        return None;
    }
    Some(Thinking {
        kind: "enabled",
        budget_tokens: budget,
    })
}

struct Message<'a> {
    role: &'static str,
    content: Vec<Part<'a>>,
    /// Whether its last block is a prompt-cache breakpoint ([`breakpoints`]).
    cached: bool,
}

impl Serialize for Message<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeSeq, SerializeStruct};
        struct Content<'m, 'a>(&'m Message<'a>);
        impl Serialize for Content<'_, '_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let parts = &self.0.content;
                let mut seq = serializer.serialize_seq(Some(parts.len()))?;
                for (at, part) in parts.iter().enumerate() {
                    if self.0.cached && at + 1 == parts.len() {
                        seq.serialize_element(&Cached::new(part))?;
                    } else {
                        seq.serialize_element(part)?;
                    }
                }
                seq.end()
            }
        }
        let mut message = serializer.serialize_struct("Message", 2)?;
        message.serialize_field("role", self.role)?;
        message.serialize_field("content", &Content(self))?;
        message.end()
    }
}

/// A block that ends a prompt-cache breakpoint: `cache_control` beside its
/// own fields.
#[derive(Serialize)]
struct Cached<'a, T: Serialize = Part<'a>> {
    #[serde(flatten)]
    block: &'a T,
    cache_control: Ephemeral,
}

impl<'a, T: Serialize> Cached<'a, T> {
    fn new(block: &'a T) -> Self {
        Cached {
            block,
            cache_control: EPHEMERAL,
        }
    }
}

#[derive(Serialize, Clone, Copy)]
struct Ephemeral {
    #[serde(rename = "type")]
    kind: &'static str,
}

/// Anthropic's only cache type (a 5-minute lifetime, renewed by each read).
const EPHEMERAL: Ephemeral = Ephemeral { kind: "ephemeral" };

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text {
        text: Cow<'a, str>,
    },
    Image {
        source: ImageSource<'a>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        /// The model's arguments verbatim: a JSON object, `{}` for none.
        input: &'a RawValue,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ResultContent<'a>,
        #[serde(skip_serializing_if = "is_false")]
        is_error: bool,
    },
}

/// A `tool_result`'s content: its text, or text and image blocks when the
/// tool returned images.
#[derive(Serialize)]
#[serde(untagged)]
enum ResultContent<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<Part<'a>>),
}

fn is_false(value: &bool) -> bool {
    !value
}

#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    input_schema: &'a Value,
    /// On the last tool when no system prompt carries the breakpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<Ephemeral>,
}

impl Message<'_> {
    fn holds_tool_blocks(&self) -> bool {
        self.content
            .iter()
            .any(|part| matches!(part, Part::ToolUse { .. } | Part::ToolResult { .. }))
    }
}

/// A plain message's blocks, as they always were.
fn message_parts(message: &ModelMessage) -> Vec<Part<'_>> {
    // Anthropic refuses an empty text block; a message of images alone goes
    // without one.
    let text = Some(Part::Text {
        text: Cow::Borrowed(&message.text),
    })
    .filter(|_| !message.text.is_empty() || message.images.is_empty());
    text.into_iter()
        .chain(image_parts(&message.images))
        .collect()
}

fn image_parts(images: &[Image]) -> impl Iterator<Item = Part<'_>> {
    images.iter().map(|image| Part::Image {
        source: ImageSource {
            kind: "base64",
            media_type: &image.media_type,
            data: &image.data,
        },
    })
}

/// Renders the turns as alternating messages, the way the Messages API
/// wants tool turns (strictly alternating compatible servers too):
///
/// - a tool-call turn is an assistant message of an optional text block
///   and one `tool_use` block a call; it joins an assistant message just
///   before it;
/// - a tool result is a `tool_result` block of a user message: it joins a
///   user message just before it (so consecutive results share one
///   message), placed after the results already there and before any other
///   block, since results must come first;
/// - a plain message joins the message before it when that one holds tool
///   blocks and has its role (a user follow-up lands in the results'
///   message as text and image blocks; empty text is dropped there);
///   otherwise it is its own message, exactly as without tools.
///
/// Also says, for each turn, the message it landed in.
fn messages<'a>(turns: &'a [Turn<'a>]) -> (Vec<Message<'a>>, Vec<usize>) {
    let mut out: Vec<Message<'a>> = Vec::with_capacity(turns.len());
    let mut landed = Vec::with_capacity(turns.len());
    for turn in turns {
        match turn {
            Turn::Message(message) => {
                let role = message.role.wire();
                match out.last_mut() {
                    Some(last) if last.role == role && last.holds_tool_blocks() => {
                        last.content
                            .extend(message_parts(message).into_iter().filter(
                                |part| !matches!(part, Part::Text { text } if text.is_empty()),
                            ));
                    }
                    _ => out.push(Message {
                        role,
                        content: message_parts(message),
                        cached: false,
                    }),
                }
            }
            Turn::ToolCalls { text, calls } => {
                let text = Some(Part::Text {
                    text: Cow::Borrowed(text),
                })
                .filter(|_| !text.is_empty());
                let uses = calls.iter().map(|call| Part::ToolUse {
                    id: call.id,
                    name: call.name,
                    input: call.arguments,
                });
                let parts = text.into_iter().chain(uses);
                match out.last_mut() {
                    Some(last) if last.role == "assistant" => last.content.extend(parts),
                    _ => {
                        let content: Vec<Part> = parts.collect();
                        // A turn of neither text nor calls says nothing.
                        if !content.is_empty() {
                            out.push(Message {
                                role: "assistant",
                                content,
                                cached: false,
                            });
                        }
                    }
                }
            }
            Turn::ToolResult {
                call_id,
                content,
                is_error,
                images,
            } => {
                let text = tool_result_text(content, false);
                let content = if images.is_empty() {
                    ResultContent::Text(text)
                } else {
                    let text = Part::Text { text };
                    ResultContent::Blocks(
                        std::iter::once(text).chain(image_parts(images)).collect(),
                    )
                };
                let part = Part::ToolResult {
                    tool_use_id: call_id,
                    content,
                    is_error: *is_error,
                };
                match out.last_mut() {
                    Some(last) if last.role == "user" => {
                        let results = last
                            .content
                            .iter()
                            .take_while(|part| matches!(part, Part::ToolResult { .. }))
                            .count();
                        last.content.insert(results, part);
                    }
                    _ => out.push(Message {
                        role: "user",
                        content: vec![part],
                        cached: false,
                    }),
                }
            }
        }
        landed.push(out.len().saturating_sub(1));
    }
    (out, landed)
}

fn tool(spec: &ToolSpec) -> Tool<'_> {
    Tool {
        name: &spec.name,
        description: &spec.description,
        input_schema: &spec.parameters,
        cache_control: None,
    }
}

/// Anthropic caches a request's prefix up to each block marked with
/// `cache_control` (at most 4, which these never pass), in the order tools,
/// system, messages; a later request that repeats the prefix reads it at a
/// tenth of the input price (a write costs a quarter more, once). The
/// breakpoints, each where a prefix stays the same for many requests:
/// - the system prompt (with the tools before it), or the last tool when
///   there is no system prompt;
/// - the first message: the newest compaction's summary when one leads the
///   context, else the oldest message the window holds;
/// - the message before the running turn's prompt (the last user message):
///   the older turns, the same for every step of this turn;
/// - the last message: what the next step or turn repeats.
///
/// Several may fall on one message; a prefix too short to cache (under the
/// model's minimum) is sent as usual and not cached.
fn breakpoints(turns: &[Turn], landed: &[usize], messages: &mut [Message]) {
    let prompt = turns
        .iter()
        .rposition(|turn| matches!(turn, Turn::Message(m) if m.role.wire() == "user"));
    let older = prompt.and_then(|at| at.checked_sub(1)).map(|at| landed[at]);
    let marks = [
        landed.first().copied(),
        older,
        messages.len().checked_sub(1),
    ];
    for at in marks.into_iter().flatten() {
        if let Some(message) = messages.get_mut(at) {
            message.cached = true;
        }
    }
}

pub(super) fn body(conversation: &Conversation) -> String {
    let (mut messages, landed) = messages(&conversation.turns);
    breakpoints(&conversation.turns, &landed, &mut messages);
    let thinking = thinking(
        conversation.reasoning,
        conversation.max_output_tokens,
        &messages,
    );
    let system = conversation.instructions.map(|text| Part::Text {
        text: Cow::Borrowed(text),
    });
    let mut tools: Vec<Tool> = conversation.tools.iter().map(tool).collect();
    if system.is_none() {
        if let Some(last) = tools.last_mut() {
            last.cache_control = Some(EPHEMERAL);
        }
    }
    to_json(&Body {
        model: &conversation.spec.model,
        system: system.iter().map(Cached::new).collect(),
        messages,
        max_tokens: conversation.max_output_tokens,
        stream: true,
        tools,
        thinking,
    })
}

#[derive(Deserialize)]
struct MessageStart {
    message: StartedMessage,
}

/// `usage` kept as sent for the usage ledger, then read as [`WireUsage`].
#[derive(Deserialize)]
struct StartedMessage {
    usage: Option<Value>,
}

/// Input counts exclude prompt-cache reads and writes; they are added so
/// `input_tokens` means what OpenAI's `prompt_tokens` means: the whole prompt.
#[derive(Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl WireUsage {
    /// `None` when the event carries no input counts (older `message_delta`).
    fn input(&self) -> Option<u64> {
        let parts = [
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ];
        parts
            .iter()
            .any(Option::is_some)
            .then(|| parts.iter().flatten().sum())
    }
}

#[derive(Deserialize)]
struct BlockStart {
    index: u32,
    content_block: Block,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    /// `thinking`, `server_tool_use`, and whatever comes next.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct BlockDelta {
    index: u32,
    delta: Delta,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    /// `thinking_delta`, `signature_delta`, `citations_delta`, ...
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDelta {
    delta: MessageDeltaBody,
    usage: Option<Value>,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

#[derive(Debug, Default)]
pub(super) struct Decoder {
    done: bool,
    usage: Usage,
    /// The provider's usage objects merged as sent: `message_start`'s,
    /// each member a later `message_delta` sends replacing its own (the
    /// counts are cumulative).
    raw_usage: Option<Map<String, Value>>,
    /// Content blocks stream one after another (start, deltas, stop), so
    /// only the open one needs remembering: its block index and its tool
    /// call index.
    open_tool: Option<(u32, u32)>,
    tool_calls_started: u32,
}

impl Decoder {
    pub(super) fn ended(&self) -> bool {
        self.done
    }

    pub(super) fn raw_usage(&self) -> Option<Value> {
        self.raw_usage.clone().map(Value::Object)
    }

    pub(super) fn on_event(
        &mut self,
        event: SseEvent,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ModelError> {
        let data = event.data.as_str();
        match event.event.as_deref() {
            Some("message_start") => {
                let start: MessageStart = parse_data("a `message_start` event", data)?;
                if let Some(usage) = start.message.usage {
                    self.update_usage(usage)?;
                }
            }
            Some("content_block_start") => {
                let start: BlockStart = parse_data("a `content_block_start` event", data)?;
                match start.content_block {
                    Block::Text { text } if !text.is_empty() => {
                        out.push(StreamEvent::TextDelta(text));
                    }
                    Block::ToolUse { id, name } => {
                        let index = self.tool_calls_started;
                        self.tool_calls_started += 1;
                        self.open_tool = Some((start.index, index));
                        out.push(StreamEvent::ToolCallDelta {
                            index,
                            id: Some(id),
                            name: Some(name),
                            arguments: String::new(),
                        });
                    }
                    Block::Text { .. } | Block::Other => {}
                }
            }
            Some("content_block_delta") => {
                let delta: BlockDelta = parse_data("a `content_block_delta` event", data)?;
                match delta.delta {
                    Delta::Text { text } if !text.is_empty() => {
                        out.push(StreamEvent::TextDelta(text));
                    }
                    Delta::InputJson { partial_json } if !partial_json.is_empty() => {
                        if let Some((block, index)) = self.open_tool {
                            if block == delta.index {
                                out.push(StreamEvent::ToolCallDelta {
                                    index,
                                    id: None,
                                    name: None,
                                    arguments: partial_json,
                                });
                            }
                        }
                    }
                    _ => {}
                }
            }
            Some("content_block_stop") => self.open_tool = None,
            Some("message_delta") => {
                let delta: MessageDelta = parse_data("a `message_delta` event", data)?;
                if let Some(reason) = delta.delta.stop_reason {
                    out.push(StreamEvent::Finished { reason });
                }
                if let Some(usage) = delta.usage {
                    self.update_usage(usage)?;
                    out.push(StreamEvent::Usage(self.usage));
                }
            }
            Some("message_stop") => self.done = true,
            Some("error") => return Err(stream_error(data)),
            _ => {} // ping, and events added later
        }
        Ok(())
    }

    /// Counts are cumulative: a later event's count replaces the earlier one.
    fn update_usage(&mut self, raw: Value) -> Result<(), ModelError> {
        let usage: WireUsage = serde_json::from_value(raw.clone())
            .map_err(|e| ModelError::new(false, format!("provider sent malformed usage: {e}")))?;
        if let Value::Object(members) = raw {
            self.raw_usage.get_or_insert_with(Map::new).extend(members);
        }
        if let Some(input) = usage.input() {
            self.usage.input_tokens = input;
        }
        if let Some(output) = usage.output_tokens {
            self.usage.output_tokens = output;
        }
        if let Some(read) = usage.cache_read_input_tokens {
            self.usage.cache_read_tokens = Some(read);
        }
        if let Some(written) = usage.cache_creation_input_tokens {
            self.usage.cache_write_tokens = Some(written);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{
        answer_of, assert_split_invariant, crlf, request_fixture, strip_cache_marks, tool_call_of,
        tool_fixture, user,
    };
    use super::super::*;
    use serde_json::json;

    /// Where the prompt-cache breakpoints go in a conversation that leads
    /// with a summary, has an older turn and is in the middle of a tool
    /// step: the system prompt, the first message, the end of the older
    /// turns and the last message; the last tool only without a system
    /// prompt; never more than Anthropic's 4.
    #[test]
    fn prompt_cache_breakpoints() {
        let (tools, tool_turn) = tool_fixture();
        let mut items: Vec<ModelItem> = vec![
            user("Summary of the conversation so far: …").into(),
            ModelMessage {
                role: Role::Assistant,
                text: "Noted.".into(),
                images: Vec::new(),
            }
            .into(),
        ];
        // The running turn: its prompt, one tool step and its results.
        items.extend(tool_turn[..4].iter().cloned());
        let spec = ModelSpec::parse("anthropic/claude-sonnet-4-5").unwrap();
        let marked = |instructions: Option<&str>, items: &[ModelItem]| -> (Value, Vec<String>) {
            let req = ToolRequest {
                spec: &spec,
                instructions,
                items,
                tools: &tools,
                max_output_tokens: 4096,
                reasoning: None,
                cache_key: None,
            };
            let call =
                build_call_with_tools(&ProviderConfig::new(Provider::Anthropic, None, None), &req)
                    .unwrap();
            let body: Value = serde_json::from_str(&call.body).unwrap();
            let mut marks = Vec::new();
            for (at, tool) in body["tools"].as_array().unwrap().iter().enumerate() {
                if tool.get("cache_control").is_some() {
                    marks.push(format!("tools.{at}"));
                }
            }
            for (at, block) in body["system"].as_array().into_iter().flatten().enumerate() {
                if block.get("cache_control").is_some() {
                    marks.push(format!("system.{at}"));
                }
            }
            for (m, message) in body["messages"].as_array().unwrap().iter().enumerate() {
                for (b, block) in message["content"].as_array().unwrap().iter().enumerate() {
                    if let Some(mark) = block.get("cache_control") {
                        assert_eq!(mark, &json!({"type": "ephemeral"}));
                        marks.push(format!("messages.{m}.{b}"));
                    }
                }
            }
            (body, marks)
        };
        let (body, marks) = marked(Some("Be brief."), &items);
        // messages: 0 summary (user), 1 "Noted." (assistant), 2 the prompt,
        // 3 the step (text + 2 tool_use), 4 the two results.
        assert_eq!(body["messages"].as_array().unwrap().len(), 5);
        assert_eq!(
            marks,
            ["system.0", "messages.0.0", "messages.1.0", "messages.4.1"]
        );
        let (_, marks) = marked(None, &items);
        assert_eq!(
            marks,
            ["tools.1", "messages.0.0", "messages.1.0", "messages.4.1"]
        );
        // A first prompt alone: one message, one mark on it.
        let (_, marks) = marked(None, &items[..1]);
        assert_eq!(marks, ["tools.1", "messages.0.0"]);
    }

    fn anthropic_messages(items: &[ModelItem]) -> Value {
        let spec = ModelSpec::parse("anthropic/claude-haiku-4-5").unwrap();
        let req = ToolRequest {
            spec: &spec,
            instructions: None,
            items,
            tools: &[],
            max_output_tokens: 1,
            reasoning: None,
            cache_key: None,
        };
        let body = tool_call_of(&ProviderConfig::new(Provider::Anthropic, None, None), &req);
        let messages = body["messages"].clone();
        let roles: Vec<&str> = messages
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert!(
            roles.windows(2).all(|pair| pair[0] != pair[1]),
            "roles alternate: {roles:?}"
        );
        messages
    }

    fn calls(text: &str, ids: &[&str]) -> ModelItem {
        ModelItem::ToolCalls {
            text: text.into(),
            calls: ids
                .iter()
                .map(|id| ToolCall {
                    id: (*id).into(),
                    name: "f".into(),
                    arguments: r#"{"n": 1}"#.into(),
                })
                .collect(),
        }
    }

    fn result(id: &str, content: &str) -> ModelItem {
        ModelItem::ToolResult {
            call_id: id.into(),
            name: "f".into(),
            content: content.into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    #[test]
    fn build_call_with_tools_and_tool_turns() {
        let (tools, items) = tool_fixture();
        let spec = ModelSpec::parse("anthropic/claude-sonnet-4-5").unwrap();
        let req = ToolRequest {
            spec: &spec,
            instructions: Some("Be brief."),
            items: &items,
            tools: &tools,
            max_output_tokens: 4096,
            reasoning: None,
            cache_key: None,
        };
        let config = ProviderConfig::new(Provider::Anthropic, None, Some("sk-ant-test".into()));
        let call = build_call_with_tools(&config, &req).unwrap();
        assert_eq!(call.url, "https://api.anthropic.com/v1/messages");
        assert_eq!(
            call.headers,
            vec![
                ("content-type".into(), "application/json".into()),
                ("x-api-key".into(), "sk-ant-test".into()),
                ("anthropic-version".into(), "2023-06-01".into()),
            ]
        );
        assert_eq!(
            tool_call_of(&config, &req),
            json!({
                "model": "claude-sonnet-4-5",
                "system": [{"type": "text", "text": "Be brief."}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Weather and time in Paris?"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Let me check."},
                        {"type": "tool_use", "id": "call_1", "name": "get_weather",
                            "input": {"unit": "celsius", "location": "Paris"}},
                        {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": "18°C, light rain"},
                        {"type": "tool_result", "tool_use_id": "call_2",
                            "content": "clock service unavailable", "is_error": true},
                        {"type": "text", "text": "And tomorrow?"},
                    ]},
                ],
                "max_tokens": 4096,
                "stream": true,
                "tools": [
                    {
                        "name": "get_weather",
                        "description": "Current weather at a place.",
                        "input_schema": {
                            "type": "object",
                            "properties": {
                                "location": {"type": "string"},
                                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                            },
                            "required": ["location"],
                        },
                    },
                    {"name": "get_time", "input_schema": {"type": "object", "properties": {}}},
                ],
            })
        );
        // The input is the model's own JSON, verbatim (key order kept).
        assert!(call
            .body
            .contains(r#""input":{"unit": "celsius", "location": "Paris"}}"#));
    }

    #[test]
    fn tool_turns_merge_into_alternating_messages() {
        let photo = ModelMessage {
            role: Role::User,
            text: "Also this.".into(),
            images: vec![Image {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into(),
            }],
        };
        let items = [
            user("Go.").into(),
            // An assistant text, then the same turn's calls: one message.
            ModelMessage {
                role: Role::Assistant,
                text: "On it.".into(),
                images: Vec::new(),
            }
            .into(),
            calls("", &["a", "b"]),
            result("a", "1"),
            result("b", "2"),
            // Follow-ups join the results' message; empty text is dropped.
            photo.into(),
            user("").into(),
            user("Thanks.").into(),
            calls("Once more.", &["c"]),
            result("c", "3"),
            ModelMessage {
                role: Role::Assistant,
                text: "Done.".into(),
                images: Vec::new(),
            }
            .into(),
        ];
        assert_eq!(
            anthropic_messages(&items),
            json!([
                {"role": "user", "content": [{"type": "text", "text": "Go."}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "On it."},
                    {"type": "tool_use", "id": "a", "name": "f", "input": {"n": 1}},
                    {"type": "tool_use", "id": "b", "name": "f", "input": {"n": 1}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                    {"type": "tool_result", "tool_use_id": "b", "content": "2"},
                    {"type": "text", "text": "Also this."},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "text", "text": "Thanks."},
                ]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Once more."},
                    {"type": "tool_use", "id": "c", "name": "f", "input": {"n": 1}},
                ]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "3"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            ])
        );
    }

    #[test]
    fn tool_results_always_come_first_in_their_message() {
        // A user message recorded between the calls and their results.
        let items = [
            calls("", &["a", "b"]),
            user("Hurry.").into(),
            result("a", "1"),
            result("b", "2"),
        ];
        assert_eq!(
            anthropic_messages(&items),
            json!([
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "a", "name": "f", "input": {"n": 1}},
                    {"type": "tool_use", "id": "b", "name": "f", "input": {"n": 1}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                    {"type": "tool_result", "tool_use_id": "b", "content": "2"},
                    {"type": "text", "text": "Hurry."},
                ]},
            ])
        );
    }

    #[test]
    fn empty_arguments_are_an_empty_input() {
        let items = [ModelItem::ToolCalls {
            text: String::new(),
            calls: vec![ToolCall {
                id: "toolu_02".into(),
                name: "get_time".into(),
                arguments: String::new(),
            }],
        }];
        assert_eq!(
            anthropic_messages(&items),
            json!([{"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_02", "name": "get_time", "input": {}},
            ]}])
        );
    }

    #[test]
    fn build_call_with_images_system_and_key() {
        let (spec, messages) = request_fixture("anthropic/claude-sonnet-4-5", true);
        let req = ModelRequest {
            spec: &spec,
            instructions: Some("Be brief."),
            messages: &messages,
            max_output_tokens: 4096,
        };
        let config = ProviderConfig::new(
            Provider::Anthropic,
            Some("https://api.anthropic.com/".into()),
            Some("sk-ant-test".into()),
        );
        let call = build_call(&config, &req);
        assert_eq!(call.url, "https://api.anthropic.com/v1/messages");
        assert_eq!(
            call.headers,
            vec![
                ("content-type".into(), "application/json".into()),
                ("x-api-key".into(), "sk-ant-test".into()),
                ("anthropic-version".into(), "2023-06-01".into()),
            ]
        );
        let mut body: Value = serde_json::from_str(&call.body).unwrap();
        strip_cache_marks(&mut body);
        assert_eq!(
            body,
            json!({
                "model": "claude-sonnet-4-5",
                "system": [{"type": "text", "text": "Be brief."}],
                "messages": [
                    {"role": "user", "content": [
                        {"type": "text", "text": "What is in this picture?"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
                    ]},
                    {"role": "assistant", "content": [{"type": "text", "text": "A mushroom."}]},
                    {"role": "user", "content": [{"type": "text", "text": "Which kind?"}]},
                ],
                "max_tokens": 4096,
                "stream": true,
            })
        );
    }

    #[test]
    fn build_call_without_key_system_or_text() {
        let spec = ModelSpec::parse("anthropic/claude-haiku-4-5").unwrap();
        let messages = [ModelMessage {
            role: Role::User,
            text: String::new(),
            images: vec![Image {
                media_type: "image/webp".into(),
                data: "UklGRg==".into(),
            }],
        }];
        let req = ModelRequest {
            spec: &spec,
            instructions: Some(""),
            messages: &messages,
            max_output_tokens: 10,
        };
        let config = ProviderConfig::new(
            Provider::Anthropic,
            Some(String::new()),
            Some(String::new()),
        );
        let call = build_call(&config, &req);
        assert_eq!(call.url, "https://api.anthropic.com/v1/messages");
        assert_eq!(
            call.headers,
            vec![
                ("content-type".into(), "application/json".into()),
                ("anthropic-version".into(), "2023-06-01".into()),
            ]
        );
        assert_eq!(
            call.body,
            r#"{"model":"claude-haiku-4-5","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/webp","data":"UklGRg=="},"cache_control":{"type":"ephemeral"}}]}],"max_tokens":10,"stream":true}"#
        );
    }

    /// The shape of a real Messages stream: text, then a tool call, with
    /// ping, a thinking-free answer, cache counts and the final usage.
    const STREAM: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":2,"service_tier":"standard"}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let me check the weather"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" in Zürich — 🌦️"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"Zür"}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ich\", \"unit\": \"celsius\"}"}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_02","name":"get_time","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}

event: message_stop
data: {"type":"message_stop"}

"#;

    #[test]
    fn stream_in_every_split() {
        for stream in [STREAM.to_owned(), crlf(STREAM)] {
            let events = assert_split_invariant(Provider::Anthropic, stream.as_bytes());
            assert_eq!(
                events,
                vec![
                    StreamEvent::TextDelta("Okay, let me check the weather".into()),
                    StreamEvent::TextDelta(" in Zürich — 🌦️".into()),
                    StreamEvent::ToolCallDelta {
                        index: 0,
                        id: Some("toolu_01T1x1fJ34qAmk2tNTrN7Up6".into()),
                        name: Some("get_weather".into()),
                        arguments: String::new(),
                    },
                    StreamEvent::ToolCallDelta {
                        index: 0,
                        id: None,
                        name: None,
                        arguments: "{\"location\": \"Zür".into(),
                    },
                    StreamEvent::ToolCallDelta {
                        index: 0,
                        id: None,
                        name: None,
                        arguments: "ich\", \"unit\": \"celsius\"}".into(),
                    },
                    StreamEvent::ToolCallDelta {
                        index: 1,
                        id: Some("toolu_02".into()),
                        name: Some("get_time".into()),
                        arguments: String::new(),
                    },
                    StreamEvent::Finished {
                        reason: "tool_use".into()
                    },
                    StreamEvent::Usage(Usage {
                        input_tokens: 572,
                        output_tokens: 89,
                        cache_read_tokens: Some(100),
                        cache_write_tokens: Some(0),
                        reasoning_tokens: None,
                    }),
                ]
            );
            let answer = answer_of(&events);
            assert_eq!(answer.text, "Okay, let me check the weather in Zürich — 🌦️");
            assert_eq!(
                answer.tool_calls,
                vec![
                    ToolCall {
                        id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"location": "Zürich", "unit": "celsius"}"#.into(),
                    },
                    ToolCall {
                        id: "toolu_02".into(),
                        name: "get_time".into(),
                        arguments: String::new(),
                    },
                ]
            );
            assert_eq!(answer.finish_reason.as_deref(), Some("tool_use"));
        }
    }

    #[test]
    fn usage_input_from_message_delta_when_present() {
        let stream = concat!(
            "event: message_start\n",
            r#"data: {"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}"#,
            "\n\nevent: message_delta\n",
            r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":12,"cache_read_input_tokens":3,"output_tokens":7}}"#,
            "\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let events = assert_split_invariant(Provider::Anthropic, stream.as_bytes());
        assert_eq!(
            answer_of(&events).usage,
            Some(Usage {
                input_tokens: 15,
                output_tokens: 7,
                cache_read_tokens: Some(3),
                ..Usage::default()
            })
        );
    }

    #[test]
    fn unknown_events_and_blocks_are_ignored() {
        let stream = concat!(
            "event: brand_new_event\ndata: not even json\n\n",
            "event: content_block_start\n",
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            "\n\nevent: content_block_delta\n",
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm."}}"#,
            "\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let events = assert_split_invariant(Provider::Anthropic, stream.as_bytes());
        assert_eq!(events, vec![]);
    }

    #[test]
    fn truncated_stream_is_retryable() {
        let cut = STREAM.find("event: message_stop").unwrap();
        let mut decoder = StreamDecoder::new(Provider::Anthropic);
        decoder.push(&STREAM.as_bytes()[..cut]).unwrap();
        let error = decoder.finish().unwrap_err();
        assert!(error.retryable);
        assert_eq!(
            error.diagnostic,
            "provider stream ended before `message_stop`"
        );
    }

    #[test]
    fn error_events() {
        let cases = [
            ("overloaded_error", "Overloaded", true),
            ("api_error", "Internal server error", true),
            (
                "rate_limit_error",
                "Number of request tokens has exceeded your rate limit",
                true,
            ),
            (
                "invalid_request_error",
                "prompt is too long: 215000 tokens > 200000 maximum",
                false,
            ),
            ("authentication_error", "invalid x-api-key", false),
        ];
        for (kind, message, retryable) in cases {
            let wire = format!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"usage\":{{\"input_tokens\":5}}}}}}\n\n\
                 event: error\ndata: {{\"type\": \"error\", \"error\": {{\"type\": \"{kind}\", \"message\": \"{message}\"}}}}\n\n"
            );
            let error = StreamDecoder::new(Provider::Anthropic)
                .push(wire.as_bytes())
                .unwrap_err();
            assert_eq!(error.retryable, retryable, "{kind}");
            assert_eq!(
                error.diagnostic,
                format!("provider stream error: {kind}: {message}")
            );
        }
    }

    #[test]
    fn malformed_json_names_the_event() {
        let error = StreamDecoder::new(Provider::Anthropic)
            .push(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\"}}\n\n")
            .unwrap_err();
        assert!(!error.retryable);
        assert!(
            error.diagnostic.starts_with(
                "provider sent malformed JSON in a `content_block_delta` event: missing field `text`"
            ),
            "{error}"
        );
    }
}
