//! The model provider layer, sans-IO: [`build_call`] turns a request into the
//! HTTP call to make, [`StreamDecoder`] turns the streamed answer's bytes into
//! [`StreamEvent`]s, [`Answer`] accumulates them, [`classify_status`] and
//! [`RetryPolicy`] decide what a failure means. The wasm host performs the
//! fetch, pushes the body in as it arrives and owns the clock.
//!
//! Tools travel both ways: [`build_call_with_tools`] offers [`ToolSpec`]s
//! and replays earlier tool calls and their results ([`ModelItem`]);
//! [`build_call`] is the same call with no tools, byte for byte what it was
//! before tools existed.
//!
//! Secrets: the API key is read in exactly one place, `http_call`, and
//! only into a request header. Diagnostics are built from what the provider
//! sent (or, for a request refused before sending, the offending tool name
//! or call id), never from the headers, and are bounded by
//! `DIAGNOSTIC_BYTES_MAX`.

mod anthropic;
mod openai;
pub mod preference;
mod refusal;

pub use refusal::Refusal;

pub use preference::Reasoning;

use crate::limits::{
    ANSWER_BYTES_MAX, ATTEMPTS_MAX_DEFAULT, DIAGNOSTIC_BYTES_MAX, RETRY_BASE_MS_DEFAULT,
    RETRY_MAX_MS_DEFAULT, TOOLS_PER_REQUEST_MAX, TOOL_CALLS_PER_STEP_MAX, TOOL_NAME_BYTES_MAX,
    TOOL_RESULT_IMAGES_MAX, TOOL_RESULT_IMAGE_BYTES_MAX, USAGE_RAW_BYTES_MAX,
};
use crate::outbound::Outbound;
use crate::sse::{SseDecoder, SseError};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Chat Completions: OpenAI and compatible servers (llama.cpp, vLLM, Ollama).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl Provider {
    /// The spelling before the `/` of a model address.
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    pub fn default_base_url(self) -> &'static str {
        match self {
            Provider::OpenAi => "https://api.openai.com/v1",
            Provider::Anthropic => "https://api.anthropic.com",
        }
    }
}

/// A model address, `provider/model`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    pub provider: Provider,
    /// Sent verbatim; may itself contain `/` (`openai/meta-llama/Llama-3`).
    pub model: String,
}

impl ModelSpec {
    pub fn parse(spelling: &str) -> Result<ModelSpec, Refusal> {
        let Some((provider, model)) = spelling.split_once('/') else {
            return Err(Refusal::NoProvider(spelling.to_owned()));
        };
        let provider = match provider {
            "openai" => Provider::OpenAi,
            "anthropic" => Provider::Anthropic,
            other => {
                return Err(Refusal::UnknownProvider {
                    spelling: spelling.to_owned(),
                    provider: other.to_owned(),
                })
            }
        };
        if model.is_empty() {
            return Err(Refusal::EmptyModel(spelling.to_owned()));
        }
        Ok(ModelSpec {
            provider,
            model: model.to_owned(),
        })
    }
}

/// Where and as whom to call a provider. `Debug` hides the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// With or without a trailing `/`.
    pub base_url: String,
    pub api_key: Option<String>,
}

impl ProviderConfig {
    /// From the host's settings as read: an absent or empty base URL means
    /// the provider's default, an empty key means none.
    pub fn new(provider: Provider, base_url: Option<String>, api_key: Option<String>) -> Self {
        ProviderConfig {
            base_url: base_url
                .filter(|url| !url.is_empty())
                .unwrap_or_else(|| provider.default_base_url().to_owned()),
            api_key: api_key.filter(|key| !key.is_empty()),
        }
    }
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// An image of a prompt or a tool result, as the model receives it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Image {
    pub media_type: String,
    /// Base64 image bytes.
    pub data: String,
}

/// The image types both providers take.
pub const IMAGE_MEDIA_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

impl Image {
    /// Why no provider would take this image (`at` names it: `images[0]`).
    pub fn check(&self, at: &str) -> Result<(), Refusal> {
        if !IMAGE_MEDIA_TYPES.contains(&self.media_type.as_str()) {
            return Err(Refusal::ImageType { at: at.to_owned() });
        }
        let data = self.data.as_bytes();
        let base64 = !data.is_empty()
            && data.len().is_multiple_of(4)
            && data
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
        if !base64 {
            return Err(Refusal::ImageData { at: at.to_owned() });
        }
        Ok(())
    }

    /// A tool result's images against their bounds
    /// ([`TOOL_RESULT_IMAGES_MAX`], [`TOOL_RESULT_IMAGE_BYTES_MAX`]).
    pub fn check_tool_images(images: &[Image]) -> Result<(), Refusal> {
        if images.len() > TOOL_RESULT_IMAGES_MAX {
            return Err(Refusal::TooManyImages(images.len()));
        }
        let bytes: usize = images.iter().map(|i| i.data.len()).sum();
        if bytes > TOOL_RESULT_IMAGE_BYTES_MAX {
            return Err(Refusal::ImageBytes(bytes));
        }
        for (i, image) in images.iter().enumerate() {
            image.check(&format!("images[{i}]"))?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    fn wire(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelMessage {
    pub role: Role,
    pub text: String,
    pub images: Vec<Image>,
}

#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub spec: &'a ModelSpec,
    pub instructions: Option<&'a str>,
    pub messages: &'a [ModelMessage],
    pub max_output_tokens: u32,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSpec {
    /// `^[a-zA-Z0-9_-]{1,64}$`, unique within a request.
    pub name: String,
    /// Omitted from the wire when empty.
    pub description: String,
    /// A JSON Schema object describing the arguments, sent verbatim
    /// (OpenAI `parameters`, Anthropic `input_schema`).
    pub parameters: Value,
}

/// One entry of the model context, oldest first: what [`ToolRequest`]
/// carries. A plain [`ModelMessage`] renders exactly as [`build_call`]
/// renders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelItem {
    Message(ModelMessage),
    /// An assistant turn that called tools: its text (may be empty), then
    /// its calls as the model made them ([`Answer::tool_calls`]).
    ToolCalls {
        text: String,
        calls: Vec<ToolCall>,
    },
    /// The result of the call `call_id`. `name` is the tool's; neither wire
    /// format sends it (both match results by id).
    ToolResult {
        call_id: String,
        name: String,
        content: String,
        is_error: bool,
        /// Images the tool returned, for the model to see (each provider
        /// has its own form: [`openai`], [`anthropic`]).
        images: Vec<Image>,
    },
}

impl From<ModelMessage> for ModelItem {
    fn from(message: ModelMessage) -> Self {
        ModelItem::Message(message)
    }
}

/// A model request with tools: [`ModelRequest`] with [`ModelItem`]s for
/// messages and the tools offered (`tool_choice` is left to the provider:
/// auto).
#[derive(Debug, Clone, Copy)]
pub struct ToolRequest<'a> {
    pub spec: &'a ModelSpec,
    pub instructions: Option<&'a str>,
    pub items: &'a [ModelItem],
    /// At most [`TOOLS_PER_REQUEST_MAX`]; none sends no `tools` field.
    pub tools: &'a [ToolSpec],
    pub max_output_tokens: u32,
    /// The reasoning level, mapped to the provider's own field (OpenAI
    /// `reasoning_effort`, Anthropic `thinking`); `None` sends neither.
    pub reasoning: Option<Reasoning>,
    /// OpenAI's `prompt_cache_key` ([`prompt_cache_key`]): requests that
    /// share one are routed to the same prompt cache. Anthropic marks its
    /// cache breakpoints in the body instead.
    pub cache_key: Option<&'a str>,
}

/// A Session's `prompt_cache_key`: stable for the Session's life, distinct
/// between Sessions and Agents, and naming neither (a digest, so no
/// identifier chosen by a user reaches the provider).
pub fn prompt_cache_key(agent: &str, session: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    digest.update(agent.as_bytes());
    digest.update([0]);
    digest.update(session.as_bytes());
    crate::text::hex(&digest.finalize()[..16])
}

/// The call for a request without tools. Same bytes as
/// [`build_call_with_tools`] with no tools and the messages as
/// [`ModelItem::Message`]s; it cannot fail.
pub fn build_call(config: &ProviderConfig, req: &ModelRequest) -> Outbound {
    let conversation = Conversation {
        spec: req.spec,
        instructions: req.instructions.filter(|text| !text.is_empty()),
        turns: req.messages.iter().map(Turn::Message).collect(),
        tools: &[],
        max_output_tokens: req.max_output_tokens,
        reasoning: None,
        cache_key: None,
    };
    http_call(config, &conversation)
}

/// The call for a request that offers tools and replays tool turns.
///
/// Refuses, naming the culprit (not retryable, like a provider's 400): more
/// than [`TOOLS_PER_REQUEST_MAX`] tools; a tool name outside
/// `^[a-zA-Z0-9_-]{1,64}$` or offered twice; parameters that are not a JSON
/// object; a replayed tool call whose arguments are neither empty nor a JSON
/// object (see [`ToolCall::input`], which callers should check when the
/// answer arrives, so such a call never reaches the transcript as is).
pub fn build_call_with_tools(
    config: &ProviderConfig,
    req: &ToolRequest,
) -> Result<Outbound, ModelError> {
    let refuse = |diagnostic: String| ModelError::new(false, diagnostic);
    if req.tools.len() > TOOLS_PER_REQUEST_MAX {
        return Err(refuse(format!(
            "{} tools offered; at most {TOOLS_PER_REQUEST_MAX} per request",
            req.tools.len()
        )));
    }
    for (position, tool) in req.tools.iter().enumerate() {
        if !valid_tool_name(&tool.name) {
            return Err(refuse(format!(
                "tool name `{}` is invalid: expected 1 to {TOOL_NAME_BYTES_MAX} of a-z, A-Z, 0-9, `_`, `-`",
                tool.name
            )));
        }
        if req.tools[..position].iter().any(|t| t.name == tool.name) {
            return Err(refuse(format!("tool `{}` is offered twice", tool.name)));
        }
        if !tool.parameters.is_object() {
            return Err(refuse(format!(
                "tool `{}`: parameters must be a JSON Schema object",
                tool.name
            )));
        }
    }
    let mut turns = Vec::with_capacity(req.items.len());
    for item in req.items {
        turns.push(match item {
            ModelItem::Message(message) => Turn::Message(message),
            ModelItem::ToolCalls { text, calls } => Turn::ToolCalls {
                text,
                calls: calls
                    .iter()
                    .map(|call| {
                        Ok(CallView {
                            id: &call.id,
                            name: &call.name,
                            arguments: call.raw_arguments().map_err(|e| refuse(e.to_string()))?,
                        })
                    })
                    .collect::<Result<_, ModelError>>()?,
            },
            ModelItem::ToolResult {
                call_id,
                content,
                is_error,
                images,
                ..
            } => Turn::ToolResult {
                call_id,
                content,
                is_error: *is_error,
                images,
            },
        });
    }
    Ok(http_call(
        config,
        &Conversation {
            spec: req.spec,
            instructions: req.instructions.filter(|text| !text.is_empty()),
            turns,
            tools: req.tools,
            max_output_tokens: req.max_output_tokens,
            reasoning: req.reasoning,
            cache_key: req.cache_key,
        },
    ))
}

/// `^[a-zA-Z0-9_-]{1,64}$`: OpenAI's rule, and Anthropic's.
fn valid_tool_name(name: &str) -> bool {
    (1..=TOOL_NAME_BYTES_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The one place the API key is used.
fn http_call(config: &ProviderConfig, conversation: &Conversation) -> Outbound {
    let base = config.base_url.trim_end_matches('/');
    let key = config.api_key.as_deref();
    let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    match conversation.spec.provider {
        Provider::OpenAi => {
            if let Some(key) = key {
                headers.push(("authorization".to_owned(), format!("Bearer {key}")));
            }
            Outbound {
                method: "POST".to_owned(),
                url: format!("{base}/chat/completions"),
                headers,
                body: openai::body(conversation),
            }
        }
        Provider::Anthropic => {
            if let Some(key) = key {
                headers.push(("x-api-key".to_owned(), key.to_owned()));
            }
            headers.push(("anthropic-version".to_owned(), "2023-06-01".to_owned()));
            Outbound {
                method: "POST".to_owned(),
                url: format!("{base}/v1/messages"),
                headers,
                body: anthropic::body(conversation),
            }
        }
    }
}

/// A checked request, borrowed, as the wire encoders read it.
struct Conversation<'a> {
    spec: &'a ModelSpec,
    /// Never empty: an empty system prompt is omitted (Anthropic refuses
    /// empty text).
    instructions: Option<&'a str>,
    turns: Vec<Turn<'a>>,
    tools: &'a [ToolSpec],
    max_output_tokens: u32,
    reasoning: Option<Reasoning>,
    cache_key: Option<&'a str>,
}

enum Turn<'a> {
    Message(&'a ModelMessage),
    ToolCalls {
        text: &'a str,
        calls: Vec<CallView<'a>>,
    },
    ToolResult {
        call_id: &'a str,
        content: &'a str,
        is_error: bool,
        images: &'a [Image],
    },
}

struct CallView<'a> {
    id: &'a str,
    name: &'a str,
    /// A JSON object, verbatim as the model wrote it (its key order kept);
    /// `{}` for a call without arguments.
    arguments: &'a RawValue,
}

/// What the model sees of a tool result. Both providers get the same text:
/// an empty result reads `(no output)` (Anthropic refuses an empty error
/// result); Anthropic marks errors with `is_error`, Chat Completions has no
/// such field, so there the text is prefixed with `Error: `.
fn tool_result_text(content: &str, error_prefix: bool) -> std::borrow::Cow<'_, str> {
    let content = if content.is_empty() {
        "(no output)"
    } else {
        content
    };
    if error_prefix {
        format!("Error: {content}").into()
    } else {
        content.into()
    }
}

fn to_json(body: &impl serde::Serialize) -> String {
    // Plain structs of strings and numbers: serialisation cannot fail.
    serde_json::to_string(body).expect("a request body serialises")
}

/// Token usage the provider reported (for a turn: summed over its steps).
/// `input_tokens` is the whole prompt, cached parts included, as OpenAI's
/// `prompt_tokens` means; the other counts are present only where the
/// provider reports them (stored usage written before them has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's prompt cache (Anthropic
    /// `cache_read_input_tokens`, OpenAI `prompt_tokens_details.cached_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Prompt tokens written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`; OpenAI reports none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Output tokens spent reasoning (OpenAI
    /// `completion_tokens_details.reasoning_tokens`; Anthropic counts
    /// thinking in `output_tokens` and reports no split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// Two calls' usage summed; a count one of them lacks adds nothing,
    /// and stays absent only when both lack it.
    pub fn plus(self, other: Usage) -> Usage {
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        Usage {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            cache_read_tokens: sum(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens: sum(self.cache_write_tokens, other.cache_write_tokens),
            reasoning_tokens: sum(self.reasoning_tokens, other.reasoning_tokens),
        }
    }
}

/// The provider's own usage object (only its `usage` member, which holds
/// counts and never a secret), for the usage ledger: kept as JSON text
/// while it fits [`USAGE_RAW_BYTES_MAX`], else dropped whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawUsage {
    Kept(String),
    Dropped,
}

impl RawUsage {
    fn of(value: &Value) -> RawUsage {
        let text = value.to_string();
        if text.len() <= USAGE_RAW_BYTES_MAX {
            RawUsage::Kept(text)
        } else {
            RawUsage::Dropped
        }
    }
}

/// What one model call reported of its cost, as the usage ledger records
/// it: the model the host called (`provider/model`), the normalised counts
/// and the provider's own object. All `None` when the call reported none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metered {
    pub model: Option<String>,
    pub usage: Option<Usage>,
    pub raw: Option<RawUsage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// JSON text as the model wrote it; may be empty for a call without
    /// arguments (Anthropic streams no `input_json_delta` then).
    pub arguments: String,
}

impl ToolCall {
    /// The arguments as the tool receives them: a JSON object, `{}` when the
    /// model sent none. Anything else (broken or truncated JSON, an array, a
    /// string) is an error naming the call; [`build_call_with_tools`]
    /// refuses to replay such a call, so check this when the answer arrives.
    pub fn input(&self) -> Result<Map<String, Value>, Refusal> {
        let raw = self.raw_arguments()?;
        serde_json::from_str(raw.get()).map_err(|e| self.bad_arguments(e))
    }

    fn raw_arguments(&self) -> Result<&RawValue, Refusal> {
        if self.arguments.trim().is_empty() {
            return serde_json::from_str("{}").map_err(|e| self.bad_arguments(e));
        }
        let raw: &RawValue =
            serde_json::from_str(&self.arguments).map_err(|e| self.bad_arguments(e))?;
        if !raw.get().starts_with('{') {
            return Err(self.bad_arguments("not an object"));
        }
        Ok(raw)
    }

    fn bad_arguments(&self, why: impl fmt::Display) -> Refusal {
        Refusal::BadArguments {
            id: self.id.clone(),
            name: self.name.clone(),
            why: why.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// Answer text, never empty.
    TextDelta(String),
    /// A piece of tool call `index` (0-based, dense per answer). The first
    /// piece carries `id` and `name`; `arguments` pieces concatenate.
    ToolCallDelta {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    /// Usage so far; a later one replaces an earlier one.
    Usage(Usage),
    /// The provider's own stop reason (`stop`, `tool_calls`, `length`;
    /// `end_turn`, `tool_use`, `max_tokens`, ...), not normalised.
    Finished { reason: String },
}

/// A failed model call. The diagnostic is bounded and holds only what the
/// provider said, never the key or the request headers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{diagnostic}")]
pub struct ModelError {
    pub retryable: bool,
    pub diagnostic: String,
    /// The provider refused the request as longer than the model's context
    /// window (OpenAI `context_length_exceeded`, Anthropic "prompt is too
    /// long"): a turn compacts and tries once more.
    pub too_long: bool,
    /// What the call reported of its cost before it failed (rarely any
    /// usage; the host sets the model). Boxed: an error is passed by value
    /// everywhere and is rarely metered.
    pub metered: Box<Metered>,
}

impl ModelError {
    /// Bounds the diagnostic (for the host's own errors too, e.g. a network
    /// failure).
    pub fn new(retryable: bool, diagnostic: impl Into<String>) -> Self {
        ModelError {
            retryable,
            diagnostic: bounded(diagnostic.into()),
            too_long: false,
            metered: Box::default(),
        }
    }
}

impl From<SseError> for ModelError {
    fn from(e: SseError) -> Self {
        ModelError::new(false, format!("provider stream: {e}"))
    }
}

/// At most `DIAGNOSTIC_BYTES_MAX` bytes, cut on a char boundary and marked.
fn bounded(mut text: String) -> String {
    crate::text::truncate(&mut text, DIAGNOSTIC_BYTES_MAX);
    text
}

/// Decodes one call's streamed body. After an error it keeps answering that
/// error: the call is over.
#[derive(Debug)]
pub struct StreamDecoder {
    sse: SseDecoder,
    provider: ProviderDecoder,
    failed: Option<ModelError>,
}

#[derive(Debug)]
enum ProviderDecoder {
    OpenAi(openai::Decoder),
    Anthropic(anthropic::Decoder),
}

impl StreamDecoder {
    pub fn new(provider: Provider) -> Self {
        StreamDecoder {
            sse: SseDecoder::default(),
            provider: match provider {
                Provider::OpenAi => ProviderDecoder::OpenAi(openai::Decoder::default()),
                Provider::Anthropic => ProviderDecoder::Anthropic(anthropic::Decoder::default()),
            },
            failed: None,
        }
    }

    /// Any chunk boundary works, including inside a line or a character.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ModelError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let result = self.decode(bytes);
        if let Err(error) = &result {
            self.failed = Some(error.clone());
        }
        result
    }

    fn decode(&mut self, bytes: &[u8]) -> Result<Vec<StreamEvent>, ModelError> {
        let mut out = Vec::new();
        if self.ended() {
            return Ok(out); // not even buffered: it could only hit a bound
        }
        for event in self.sse.push(bytes)? {
            // Whatever follows the end marker is not part of the answer.
            if self.ended() {
                break;
            }
            match &mut self.provider {
                ProviderDecoder::OpenAi(d) => d.on_event(event, &mut out)?,
                ProviderDecoder::Anthropic(d) => d.on_event(event, &mut out)?,
            }
        }
        Ok(out)
    }

    fn ended(&self) -> bool {
        match &self.provider {
            ProviderDecoder::OpenAi(d) => d.ended(),
            ProviderDecoder::Anthropic(d) => d.ended(),
        }
    }

    /// The provider's own usage object so far (`None`: it sent none).
    pub fn raw_usage(&self) -> Option<RawUsage> {
        let raw = match &self.provider {
            ProviderDecoder::OpenAi(d) => d.raw_usage().cloned(),
            ProviderDecoder::Anthropic(d) => d.raw_usage(),
        };
        raw.as_ref().map(RawUsage::of)
    }

    /// The body ended. An event without its closing blank line is dropped
    /// (the SSE rule), so this yields no events; it fails, retryably, when
    /// the provider's end marker never came: the connection broke.
    pub fn finish(&mut self) -> Result<Vec<StreamEvent>, ModelError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        if self.ended() {
            return Ok(Vec::new());
        }
        let marker = match self.provider {
            ProviderDecoder::OpenAi(_) => "data: [DONE]",
            ProviderDecoder::Anthropic(_) => "message_stop",
        };
        let error = ModelError::new(true, format!("provider stream ended before `{marker}`"));
        self.failed = Some(error.clone());
        Err(error)
    }
}

/// Parses one event's JSON; a provider that sends broken JSON is broken
/// deterministically, so this is not retried. Through a `Value`
/// (`json::from_text`): an event is small, and each event type then costs
/// the wasm no text decoder of its own.
fn parse_data<T: serde::de::DeserializeOwned>(what: &str, data: &str) -> Result<T, ModelError> {
    crate::json::from_text(data).map_err(|e| {
        ModelError::new(
            false,
            format!("provider sent malformed JSON in {what}: {e}"),
        )
    })
}

/// What a provider's error JSON says, in the shapes seen in practice:
/// `{"error":{"type","code","message"}}` (OpenAI, Anthropic, llama.cpp, vLLM),
/// `{"error":"..."}`, `{"message":"..."}`, `{"detail":"..."}`.
#[derive(Debug, Default)]
struct ProviderErrorBody<'a> {
    kind: Option<&'a str>,
    code: Option<&'a Value>,
    message: Option<&'a str>,
}

impl<'a> ProviderErrorBody<'a> {
    fn read(value: &'a Value) -> Self {
        match value.get("error") {
            Some(error @ Value::Object(_)) => ProviderErrorBody {
                kind: error.get("type").and_then(Value::as_str),
                code: error.get("code").filter(|code| !code.is_null()),
                message: error.get("message").and_then(Value::as_str),
            },
            Some(Value::String(message)) => ProviderErrorBody {
                message: Some(message),
                ..Default::default()
            },
            _ => ProviderErrorBody {
                kind: value.get("type").and_then(Value::as_str),
                code: None,
                message: ["message", "detail"]
                    .iter()
                    .find_map(|field| value.get(field).and_then(Value::as_str)),
            },
        }
    }

    fn code_str(&self) -> Option<&'a str> {
        self.code.and_then(Value::as_str)
    }
}

/// Error kinds that mean "try again later": server faults, overload, rate
/// limits, timeouts (OpenAI and Anthropic spellings).
fn retryable_kind(kind: &str) -> bool {
    matches!(
        kind,
        "server_error"
            | "api_error"
            | "overloaded_error"
            | "rate_limit_error"
            | "rate_limit_exceeded"
            | "timeout_error"
    )
}

fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500..=599)
}

/// A failed HTTP status with its (host-bounded) body. 408, 409, 429 and 5xx
/// are retryable, except a 429 that says the account is out of quota: that
/// does not pass by waiting.
pub fn classify_status(status: u16, body: &str) -> ModelError {
    let value = serde_json::from_str::<Value>(body).ok();
    let error = value
        .as_ref()
        .map(ProviderErrorBody::read)
        .unwrap_or_default();
    let out_of_quota = [error.kind, error.code_str()].contains(&Some("insufficient_quota"));
    let retryable = retryable_status(status) && !out_of_quota;
    let too_long = status == 400
        && (error.code_str() == Some("context_length_exceeded")
            || (error.kind == Some("invalid_request_error")
                && error
                    .message
                    .is_some_and(|m| m.starts_with("prompt is too long"))));
    let message = match error.message {
        Some(message) => message,
        None => body,
    };
    let message = message.trim();
    // Cut before formatting: an HTML error page can be large.
    let message = crate::text::prefix(message, DIAGNOSTIC_BYTES_MAX);
    let mut error = if message.is_empty() {
        ModelError::new(retryable, format!("provider answered HTTP {status}"))
    } else {
        ModelError::new(
            retryable,
            format!("provider answered HTTP {status}: {message}"),
        )
    };
    error.too_long = too_long;
    error
}

/// An error the provider reported inside a 200 stream.
fn stream_error(data: &str) -> ModelError {
    let value = serde_json::from_str::<Value>(data).ok();
    let error = value
        .as_ref()
        .map(ProviderErrorBody::read)
        .unwrap_or_default();
    let retryable = error.kind.is_some_and(retryable_kind)
        || error.code_str().is_some_and(retryable_kind)
        // vLLM and llama.cpp put an HTTP status in `code`.
        || error
            .code
            .and_then(Value::as_u64)
            .and_then(|code| u16::try_from(code).ok())
            .is_some_and(retryable_status);
    let message = error.message.unwrap_or(data).trim();
    let message = crate::text::prefix(message, DIAGNOSTIC_BYTES_MAX);
    let diagnostic = match error.kind {
        Some(kind) => format!("provider stream error: {kind}: {message}"),
        None => format!("provider stream error: {message}"),
    };
    ModelError::new(retryable, diagnostic)
}

/// One model answer, accumulated from its stream. Bounded: text, ids, names
/// and arguments together by `ANSWER_BYTES_MAX`, calls by
/// `TOOL_CALLS_PER_STEP_MAX`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    pub text: String,
    pub usage: Option<Usage>,
    /// The provider's own usage object and the model, set by the host.
    pub raw_usage: Option<RawUsage>,
    pub model: Option<String>,
    /// In order of first appearance.
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    /// The stream index of each entry of `tool_calls`.
    tool_indexes: Vec<u32>,
    bytes: usize,
}

impl Answer {
    /// A finished answer (a scripted model's, in tests).
    pub fn new(text: impl Into<String>, usage: Option<Usage>, tool_calls: Vec<ToolCall>) -> Answer {
        Answer {
            text: text.into(),
            usage,
            tool_calls,
            ..Answer::default()
        }
    }

    pub fn apply(&mut self, event: &StreamEvent) -> Result<(), ModelError> {
        match event {
            StreamEvent::TextDelta(text) => {
                self.charge(text.len())?;
                self.text.push_str(text);
            }
            StreamEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } => {
                let position = match self.tool_indexes.iter().position(|i| i == index) {
                    Some(position) => position,
                    None => {
                        if self.tool_calls.len() >= TOOL_CALLS_PER_STEP_MAX {
                            return Err(ModelError::new(
                                false,
                                format!(
                                    "model asked for more than {TOOL_CALLS_PER_STEP_MAX} tool calls in one step"
                                ),
                            ));
                        }
                        self.tool_indexes.push(*index);
                        self.tool_calls.push(ToolCall::default());
                        self.tool_calls.len() - 1
                    }
                };
                // Some servers repeat id and name on every piece: the first wins.
                let call = &self.tool_calls[position];
                let id = id.as_deref().filter(|_| call.id.is_empty());
                let name = name.as_deref().filter(|_| call.name.is_empty());
                let added = id.map_or(0, str::len) + name.map_or(0, str::len) + arguments.len();
                self.charge(added)?;
                let call = &mut self.tool_calls[position];
                if let Some(id) = id {
                    call.id.push_str(id);
                }
                if let Some(name) = name {
                    call.name.push_str(name);
                }
                call.arguments.push_str(arguments);
            }
            StreamEvent::Usage(usage) => self.usage = Some(*usage),
            StreamEvent::Finished { reason } => self.finish_reason = Some(reason.clone()),
        }
        Ok(())
    }

    /// What the call reported of its cost, for the usage ledger.
    pub fn metered(&self) -> Metered {
        Metered {
            model: self.model.clone(),
            usage: self.usage,
            raw: self.raw_usage.clone(),
        }
    }

    fn charge(&mut self, bytes: usize) -> Result<(), ModelError> {
        if self.bytes + bytes > ANSWER_BYTES_MAX {
            return Err(ModelError::new(
                false,
                format!("model answer exceeds {ANSWER_BYTES_MAX} bytes"),
            ));
        }
        self.bytes += bytes;
        Ok(())
    }
}

/// When to try a failed call again: exponential backoff, capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub attempts_max: u32,
    pub base_delay_ms: u64,
    pub max_delay_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts_max: ATTEMPTS_MAX_DEFAULT,
            base_delay_ms: RETRY_BASE_MS_DEFAULT,
            max_delay_ms: RETRY_MAX_MS_DEFAULT,
        }
    }
}

impl RetryPolicy {
    /// The wait after attempt `failed_attempt` (1-based) failed:
    /// base, 2·base, 4·base, ... capped at `max_delay_ms`.
    pub fn delay_ms(&self, failed_attempt: u32) -> u64 {
        let doublings = failed_attempt.saturating_sub(1).min(63);
        self.base_delay_ms
            .saturating_mul(1u64 << doublings)
            .min(self.max_delay_ms)
    }
}

#[cfg(test)]
mod tests;
