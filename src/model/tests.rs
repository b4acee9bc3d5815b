//! Tests of the shared model layer, and helpers for the provider tests.

use super::*;

pub(super) fn request_fixture(spelling: &str, images: bool) -> (ModelSpec, Vec<ModelMessage>) {
    let images = if images {
        vec![
            Image {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into(),
            },
            Image {
                media_type: "image/jpeg".into(),
                data: "/9j/4AAQ".into(),
            },
        ]
    } else {
        Vec::new()
    };
    let messages = vec![
        ModelMessage {
            role: Role::User,
            text: "What is in this picture?".into(),
            images,
        },
        ModelMessage {
            role: Role::Assistant,
            text: "A mushroom.".into(),
            images: Vec::new(),
        },
        ModelMessage {
            role: Role::User,
            text: "Which kind?".into(),
            images: Vec::new(),
        },
    ];
    (ModelSpec::parse(spelling).unwrap(), messages)
}

/// Two tools, and a conversation that used them: a question, an assistant
/// turn with text and two calls (the second without arguments), their
/// results (the second an error), a follow-up.
pub(super) fn tool_fixture() -> (Vec<ToolSpec>, Vec<ModelItem>) {
    let tools = vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Current weather at a place.".into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "location": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            }),
        },
        ToolSpec {
            name: "get_time".into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
        },
    ];
    let items = vec![
        user("Weather and time in Paris?").into(),
        ModelItem::ToolCalls {
            text: "Let me check.".into(),
            calls: vec![
                ToolCall {
                    id: "call_1".into(),
                    name: "get_weather".into(),
                    // Keys out of order: sent verbatim, not re-serialised.
                    arguments: r#"{"unit": "celsius", "location": "Paris"}"#.into(),
                },
                ToolCall {
                    id: "call_2".into(),
                    name: "get_time".into(),
                    arguments: String::new(),
                },
            ],
        },
        ModelItem::ToolResult {
            call_id: "call_1".into(),
            name: "get_weather".into(),
            content: "18°C, light rain".into(),
            is_error: false,
            images: Vec::new(),
        },
        ModelItem::ToolResult {
            call_id: "call_2".into(),
            name: "get_time".into(),
            content: "clock service unavailable".into(),
            is_error: true,
            images: Vec::new(),
        },
        user("And tomorrow?").into(),
    ];
    (tools, items)
}

pub(super) fn user(text: &str) -> ModelMessage {
    ModelMessage {
        role: Role::User,
        text: text.into(),
        images: Vec::new(),
    }
}

/// The body of a tool call as JSON, without Anthropic's prompt-cache marks
/// (`cache_control`): what the model is shown. `anthropic::tests` checks
/// where the marks go.
pub(super) fn tool_call_of(config: &ProviderConfig, req: &ToolRequest) -> Value {
    let call = build_call_with_tools(config, req).unwrap();
    let mut body = serde_json::from_str(&call.body).unwrap();
    strip_cache_marks(&mut body);
    body
}

pub(super) fn strip_cache_marks(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("cache_control");
            map.values_mut().for_each(strip_cache_marks);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_cache_marks),
        _ => {}
    }
}

pub(super) fn crlf(stream: &str) -> String {
    stream.replace('\n', "\r\n")
}

pub(super) fn answer_of(events: &[StreamEvent]) -> Answer {
    let mut answer = Answer::default();
    for event in events {
        answer.apply(event).unwrap();
    }
    answer
}

fn decode_in_chunks<'a>(
    provider: Provider,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<StreamEvent> {
    let mut decoder = StreamDecoder::new(provider);
    let mut events = Vec::new();
    for chunk in chunks {
        events.extend(decoder.push(chunk).unwrap());
    }
    events.extend(decoder.finish().unwrap());
    events
}

/// Decodes `stream` whole, split at every position, byte by byte and in
/// pseudo-random 1..=17-byte chunks; all must agree. Returns the events.
pub(super) fn assert_split_invariant(provider: Provider, stream: &[u8]) -> Vec<StreamEvent> {
    let whole = decode_in_chunks(provider, [stream]);
    for split in 0..=stream.len() {
        let (a, b) = stream.split_at(split);
        assert_eq!(
            decode_in_chunks(provider, [a, b]),
            whole,
            "split at {split}"
        );
    }
    assert_eq!(
        decode_in_chunks(provider, stream.chunks(1)),
        whole,
        "byte by byte"
    );
    for seed in 1..=16u64 {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut chunks = Vec::new();
        let mut rest = stream;
        while !rest.is_empty() {
            // xorshift64: deterministic, no dependency.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let size = (1 + state % 17) as usize;
            let (chunk, tail) = rest.split_at(size.min(rest.len()));
            chunks.push(chunk);
            rest = tail;
        }
        assert_eq!(decode_in_chunks(provider, chunks), whole, "seed {seed}");
    }
    whole
}

#[test]
fn model_spec_parse() {
    let spec = ModelSpec::parse("openai/gpt-4o-mini").unwrap();
    assert_eq!(
        (spec.provider, spec.model.as_str()),
        (Provider::OpenAi, "gpt-4o-mini")
    );
    let spec = ModelSpec::parse("anthropic/claude-sonnet-4-5").unwrap();
    assert_eq!(
        (spec.provider, spec.model.as_str()),
        (Provider::Anthropic, "claude-sonnet-4-5")
    );
    let spec = ModelSpec::parse("openai/meta-llama/Llama-3").unwrap();
    assert_eq!(spec.model, "meta-llama/Llama-3");

    let error = ModelSpec::parse("gemini/gemini-2.5-pro")
        .unwrap_err()
        .to_string();
    assert!(error.contains("unknown provider `gemini`"), "{error}");
    assert!(error.contains("openai or anthropic"), "{error}");
    assert!(ModelSpec::parse("openai/")
        .unwrap_err()
        .to_string()
        .contains("empty"));
    assert!(ModelSpec::parse("gpt-4o")
        .unwrap_err()
        .to_string()
        .contains("provider/model"));
    assert!(ModelSpec::parse("OpenAI/gpt-4o").is_err());
}

#[test]
fn provider_config_defaults() {
    let config = ProviderConfig::new(Provider::OpenAi, None, None);
    assert_eq!(config.base_url, "https://api.openai.com/v1");
    assert_eq!(config.api_key, None);
    let config = ProviderConfig::new(Provider::Anthropic, Some(String::new()), None);
    assert_eq!(config.base_url, "https://api.anthropic.com");
    let config = ProviderConfig::new(
        Provider::OpenAi,
        Some("http://localhost:11434/v1".into()),
        None,
    );
    assert_eq!(config.base_url, "http://localhost:11434/v1");
}

#[test]
fn debug_output_never_shows_the_key() {
    let (spec, messages) = request_fixture("openai/gpt-4o-mini", false);
    let req = ModelRequest {
        spec: &spec,
        instructions: None,
        messages: &messages,
        max_output_tokens: 1,
    };
    let config = ProviderConfig::new(Provider::OpenAi, None, Some("sk-secret-42".into()));
    let call = build_call(&config, &req);
    assert!(call
        .headers
        .iter()
        .any(|(_, value)| value.contains("sk-secret-42")));
    for debug in [format!("{config:?}"), format!("{call:?}")] {
        assert!(!debug.contains("sk-secret-42"), "{debug}");
    }
    assert!(!call.body.contains("sk-secret-42"));
}

#[test]
fn classify_status_table() {
    let retryable = [408, 409, 429, 500, 502, 503, 504, 529, 599];
    let final_ = [400, 401, 403, 404, 413, 422, 300, 600];
    for status in retryable {
        assert!(classify_status(status, "").retryable, "{status}");
    }
    for status in final_ {
        assert!(!classify_status(status, "").retryable, "{status}");
    }
}

#[test]
fn classify_status_extracts_the_message() {
    let cases = [
        (
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-abc***xyz. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
            false,
            "provider answered HTTP 401: Incorrect API key provided: sk-abc***xyz. You can find your API key at https://platform.openai.com/account/api-keys.",
        ),
        (
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#,
            true,
            "provider answered HTTP 529: Overloaded",
        ),
        (
            429,
            r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
            false,
            "provider answered HTTP 429: You exceeded your current quota, please check your plan and billing details.",
        ),
        (
            429,
            r#"{"error":{"message":"Rate limit reached for gpt-4o-mini","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
            true,
            "provider answered HTTP 429: Rate limit reached for gpt-4o-mini",
        ),
        (404, r#"{"error":"model \"llama3\" not found, try pulling it first"}"#, false,
            "provider answered HTTP 404: model \"llama3\" not found, try pulling it first"),
        (400, r#"{"detail":"Not Found"}"#, false, "provider answered HTTP 400: Not Found"),
        (502, "<html><body>Bad Gateway</body></html>\n", true,
            "provider answered HTTP 502: <html><body>Bad Gateway</body></html>"),
        (503, "   ", true, "provider answered HTTP 503"),
        (500, r#"{"unexpected":true}"#, true, r#"provider answered HTTP 500: {"unexpected":true}"#),
    ];
    for (status, body, retryable, diagnostic) in cases {
        let error = classify_status(status, body);
        assert_eq!(
            (error.retryable, error.diagnostic.as_str()),
            (retryable, diagnostic)
        );
    }
}

/// The providers' own refusals of a request past the model's window (their
/// documented bodies) read as `too_long`; other 400s do not.
#[test]
fn a_context_length_refusal_is_told_apart() {
    let openai = r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
    let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208212 tokens > 200000 maximum"}}"#;
    for body in [openai, anthropic] {
        let error = classify_status(400, body);
        assert!(error.too_long && !error.retryable, "{body}");
    }
    let other = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: text content blocks must be non-empty"}}"#;
    assert!(!classify_status(400, other).too_long);
    assert!(!classify_status(500, openai).too_long);
    assert!(!ModelError::new(false, "prompt is too long").too_long);
}

#[test]
fn diagnostics_are_bounded_on_a_char_boundary() {
    let body = "é".repeat(5_000); // 10 KB, two bytes a character
    let error = classify_status(500, &body);
    assert!(error.diagnostic.len() <= DIAGNOSTIC_BYTES_MAX);
    assert!(error.diagnostic.ends_with('…'));
    let json = format!(r#"{{"error":{{"message":"{}"}}}}"#, "🍄".repeat(2_600));
    let error = classify_status(400, &json);
    assert!(error.diagnostic.len() <= DIAGNOSTIC_BYTES_MAX);
    assert!(error.diagnostic.len() > DIAGNOSTIC_BYTES_MAX - 8);
    let error = ModelError::new(true, "x".repeat(DIAGNOSTIC_BYTES_MAX));
    assert_eq!(error.diagnostic.len(), DIAGNOSTIC_BYTES_MAX);
    assert!(!error.diagnostic.ends_with('…'));
    let in_stream = format!(
        "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"api_error\",\"message\":\"{}\"}}}}\n\n",
        "ü".repeat(5_000)
    );
    let error = StreamDecoder::new(Provider::Anthropic)
        .push(in_stream.as_bytes())
        .unwrap_err();
    assert!(error.diagnostic.len() <= DIAGNOSTIC_BYTES_MAX);
}

#[test]
fn an_oversized_sse_line_fails_the_call_for_good() {
    for provider in [Provider::OpenAi, Provider::Anthropic] {
        let mut decoder = StreamDecoder::new(provider);
        let line = vec![b'x'; crate::limits::SSE_LINE_BYTES_MAX + 1];
        let error = decoder.push(&line).unwrap_err();
        assert!(!error.retryable);
        assert_eq!(
            error.diagnostic,
            "provider stream: an SSE line exceeds 1048576 bytes"
        );
        assert_eq!(
            decoder.push(b"\n\n").unwrap_err(),
            error,
            "the call is over"
        );
    }
}

#[test]
fn retry_policy_delays() {
    let policy = RetryPolicy::default();
    assert_eq!(
        (
            policy.attempts_max,
            policy.base_delay_ms,
            policy.max_delay_ms
        ),
        (10, 3_000, 60_000)
    );
    let delays: Vec<u64> = (1..=9).map(|attempt| policy.delay_ms(attempt)).collect();
    assert_eq!(
        delays,
        [3_000, 6_000, 12_000, 24_000, 48_000, 60_000, 60_000, 60_000, 60_000]
    );
    assert_eq!(policy.delay_ms(0), 3_000);
    assert_eq!(policy.delay_ms(u32::MAX), 60_000);
    let huge = RetryPolicy {
        attempts_max: 3,
        base_delay_ms: u64::MAX / 2,
        max_delay_ms: u64::MAX,
    };
    assert_eq!(huge.delay_ms(10), u64::MAX);
}

#[test]
fn answer_text_is_bounded() {
    let mut answer = Answer::default();
    let half = "x".repeat(ANSWER_BYTES_MAX / 2);
    answer.apply(&StreamEvent::TextDelta(half.clone())).unwrap();
    answer.apply(&StreamEvent::TextDelta(half)).unwrap();
    let error = answer
        .apply(&StreamEvent::TextDelta("y".into()))
        .unwrap_err();
    assert!(!error.retryable);
    assert_eq!(answer.text.len(), ANSWER_BYTES_MAX);
}

#[test]
fn tool_arguments_count_toward_the_answer_bound() {
    let mut answer = Answer::default();
    answer
        .apply(&StreamEvent::TextDelta("x".repeat(ANSWER_BYTES_MAX - 10)))
        .unwrap();
    let error = answer
        .apply(&StreamEvent::ToolCallDelta {
            index: 0,
            id: Some("call_1".into()),
            name: Some("f".into()),
            arguments: "{\"a\":1}".into(),
        })
        .unwrap_err();
    assert!(!error.retryable);
}

#[test]
fn tool_calls_are_bounded_and_merged_by_index() {
    let mut answer = Answer::default();
    for index in 0..TOOL_CALLS_PER_STEP_MAX as u32 {
        // Indexes need not be dense or start at 0.
        let index = index * 2 + 1;
        for piece in ["{\"n\":", "1}"] {
            answer
                .apply(&StreamEvent::ToolCallDelta {
                    index,
                    id: Some(format!("call_{index}")),
                    name: Some("f".into()),
                    arguments: piece.into(),
                })
                .unwrap();
        }
    }
    assert_eq!(answer.tool_calls.len(), TOOL_CALLS_PER_STEP_MAX);
    assert_eq!(
        answer.tool_calls[1],
        ToolCall {
            id: "call_3".into(),
            name: "f".into(),
            arguments: "{\"n\":1}".into(),
        }
    );
    let error = answer
        .apply(&StreamEvent::ToolCallDelta {
            index: 0,
            id: Some("call_x".into()),
            name: Some("f".into()),
            arguments: String::new(),
        })
        .unwrap_err();
    assert!(!error.retryable);
    assert!(
        error.diagnostic.contains("more than 64 tool calls"),
        "{error}"
    );
}

#[test]
fn usage_and_finish_reason_last_wins() {
    let mut answer = Answer::default();
    for event in [
        StreamEvent::Usage(Usage {
            input_tokens: 1,
            output_tokens: 1,
            ..Usage::default()
        }),
        StreamEvent::Finished {
            reason: "length".into(),
        },
        StreamEvent::Usage(Usage {
            input_tokens: 5,
            output_tokens: 9,
            ..Usage::default()
        }),
    ] {
        answer.apply(&event).unwrap();
    }
    assert_eq!(
        answer.usage,
        Some(Usage {
            input_tokens: 5,
            output_tokens: 9,
            ..Usage::default()
        })
    );
    assert_eq!(answer.finish_reason.as_deref(), Some("length"));
}

/// The bodies `build_call` sent before tools existed, byte for byte.
#[test]
fn no_tools_path_is_byte_identical() {
    let cases = [
        (
            "openai/gpt-4o-mini",
            false,
            Some("Be brief."),
            1024,
            r#"{"model":"gpt-4o-mini","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is in this picture?"},{"role":"assistant","content":"A mushroom."},{"role":"user","content":"Which kind?"}],"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":1024}"#,
        ),
        (
            "openai/meta-llama/Llama-3",
            true,
            None,
            64,
            r#"{"model":"meta-llama/Llama-3","messages":[{"role":"user","content":[{"type":"text","text":"What is in this picture?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/4AAQ"}}]},{"role":"assistant","content":"A mushroom."},{"role":"user","content":"Which kind?"}],"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":64}"#,
        ),
        (
            "anthropic/claude-sonnet-4-5",
            true,
            Some("Be brief."),
            4096,
            r#"{"model":"claude-sonnet-4-5","system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"What is in this picture?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4AAQ"},"cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":[{"type":"text","text":"A mushroom.","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":[{"type":"text","text":"Which kind?","cache_control":{"type":"ephemeral"}}]}],"max_tokens":4096,"stream":true}"#,
        ),
        (
            "anthropic/claude-sonnet-4-5",
            false,
            None,
            7,
            r#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":[{"type":"text","text":"What is in this picture?","cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":[{"type":"text","text":"A mushroom.","cache_control":{"type":"ephemeral"}}]},{"role":"user","content":[{"type":"text","text":"Which kind?","cache_control":{"type":"ephemeral"}}]}],"max_tokens":7,"stream":true}"#,
        ),
    ];
    for (spelling, images, instructions, max_output_tokens, before) in cases {
        let (spec, messages) = request_fixture(spelling, images);
        let config = ProviderConfig::new(spec.provider, None, Some("k".into()));
        let req = ModelRequest {
            spec: &spec,
            instructions,
            messages: &messages,
            max_output_tokens,
        };
        let call = build_call(&config, &req);
        assert_eq!(call.body, before, "{spelling}");
        // The tools path with no tools and plain messages: the same call.
        let items: Vec<ModelItem> = messages.iter().cloned().map(ModelItem::from).collect();
        let with_tools = build_call_with_tools(
            &config,
            &ToolRequest {
                spec: &spec,
                instructions,
                items: &items,
                tools: &[],
                max_output_tokens,
                reasoning: None,
                cache_key: None,
            },
        )
        .unwrap();
        assert_eq!(with_tools, call, "{spelling}");
    }
}

#[test]
fn plain_messages_are_never_merged() {
    // Consecutive user messages (steer prompts) stay separate, as before.
    for spelling in ["openai/m", "anthropic/m"] {
        let spec = ModelSpec::parse(spelling).unwrap();
        let messages = [user("first"), user("second")];
        let config = ProviderConfig::new(spec.provider, None, None);
        let call = build_call(
            &config,
            &ModelRequest {
                spec: &spec,
                instructions: None,
                messages: &messages,
                max_output_tokens: 1,
            },
        );
        let body: Value = serde_json::from_str(&call.body).unwrap();
        assert_eq!(body["messages"].as_array().unwrap().len(), 2, "{spelling}");
        assert!(body.get("tools").is_none());
    }
}

fn tools_named(names: &[&str]) -> Vec<ToolSpec> {
    names
        .iter()
        .map(|name| ToolSpec {
            name: (*name).into(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        })
        .collect()
}

fn try_build(tools: &[ToolSpec], items: &[ModelItem]) -> Vec<Result<Outbound, ModelError>> {
    ["openai/m", "anthropic/m"]
        .iter()
        .map(|spelling| {
            let spec = ModelSpec::parse(spelling).unwrap();
            build_call_with_tools(
                &ProviderConfig::new(spec.provider, None, None),
                &ToolRequest {
                    spec: &spec,
                    instructions: None,
                    items,
                    tools,
                    max_output_tokens: 1,
                    reasoning: None,
                    cache_key: None,
                },
            )
        })
        .collect()
}

fn assert_refused(tools: &[ToolSpec], items: &[ModelItem], expected: &str) {
    for result in try_build(tools, items) {
        let error = result.unwrap_err();
        assert!(!error.retryable);
        assert_eq!(error.diagnostic, expected);
    }
}

#[test]
fn tool_names_follow_both_providers_rule() {
    let longest = "a".repeat(TOOL_NAME_BYTES_MAX);
    let ok = tools_named(&["a", "get_weather", "Get-Weather_2", &longest]);
    for result in try_build(&ok, &[]) {
        assert!(result.is_ok());
    }
    let too_long = "a".repeat(TOOL_NAME_BYTES_MAX + 1);
    for bad in [
        "",
        "get weather",
        "get.weather",
        "ns/tool",
        "wetter_ü",
        "a\n",
        &too_long,
    ] {
        let tools = tools_named(&["fine", bad]);
        assert_refused(
            &tools,
            &[],
            &format!("tool name `{bad}` is invalid: expected 1 to 64 of a-z, A-Z, 0-9, `_`, `-`"),
        );
    }
}

#[test]
fn tool_sets_are_bounded_unique_and_schemas_are_objects() {
    let names: Vec<String> = (0..=TOOLS_PER_REQUEST_MAX)
        .map(|i| format!("t{i}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for result in try_build(&tools_named(&names[..TOOLS_PER_REQUEST_MAX]), &[]) {
        let body: Value = serde_json::from_str(&result.unwrap().body).unwrap();
        assert_eq!(
            body["tools"].as_array().unwrap().len(),
            TOOLS_PER_REQUEST_MAX
        );
    }
    assert_refused(
        &tools_named(&names),
        &[],
        "65 tools offered; at most 64 per request",
    );
    assert_refused(
        &tools_named(&["a", "b", "a"]),
        &[],
        "tool `a` is offered twice",
    );
    let mut tools = tools_named(&["a"]);
    tools[0].parameters = serde_json::json!("object");
    assert_refused(
        &tools,
        &[],
        "tool `a`: parameters must be a JSON Schema object",
    );
}

#[test]
fn replayed_arguments_must_be_a_json_object() {
    let call = |arguments: &str| ToolCall {
        id: "call_9".into(),
        name: "f".into(),
        arguments: arguments.into(),
    };
    for (arguments, why) in [
        (r#"{"a":"#, "EOF while parsing a value at line 1 column 5"),
        ("[1]", "not an object"),
        (r#""x""#, "not an object"),
        ("null", "not an object"),
        ("{} {}", "trailing characters at line 1 column 4"),
    ] {
        let expected = format!("tool call `call_9` (`f`): arguments are not a JSON object: {why}");
        assert_eq!(call(arguments).input().unwrap_err().to_string(), expected);
        let items = [ModelItem::ToolCalls {
            text: String::new(),
            calls: vec![call(r#"{"ok":1}"#), call(arguments)],
        }];
        assert_refused(&[], &items, &expected);
    }
    // None (or only whitespace) is the empty object.
    for empty in ["", "  \n"] {
        assert_eq!(call(empty).input().unwrap(), Map::new());
    }
    let input = call(r#" {"b": [1, 2], "a": {"c": null}} "#)
        .input()
        .unwrap();
    assert_eq!(
        Value::Object(input),
        serde_json::json!({"a": {"c": null}, "b": [1, 2]})
    );
}

#[test]
fn empty_tool_results_read_no_output() {
    let items = [
        ModelItem::ToolCalls {
            text: String::new(),
            calls: vec![
                ToolCall {
                    id: "a".into(),
                    name: "f".into(),
                    arguments: "{}".into(),
                },
                ToolCall {
                    id: "b".into(),
                    name: "f".into(),
                    arguments: "{}".into(),
                },
            ],
        },
        ModelItem::ToolResult {
            call_id: "a".into(),
            name: "f".into(),
            content: String::new(),
            is_error: false,
            images: Vec::new(),
        },
        ModelItem::ToolResult {
            call_id: "b".into(),
            name: "f".into(),
            content: String::new(),
            is_error: true,
            images: Vec::new(),
        },
    ];
    let bodies: Vec<Value> = try_build(&[], &items)
        .into_iter()
        .map(|result| {
            let mut body = serde_json::from_str(&result.unwrap().body).unwrap();
            strip_cache_marks(&mut body);
            body
        })
        .collect();
    assert_eq!(
        bodies[0]["messages"],
        serde_json::json!([
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "a", "content": "(no output)"},
            {"role": "tool", "tool_call_id": "b", "content": "Error: (no output)"},
        ])
    );
    assert_eq!(
        bodies[1]["messages"],
        serde_json::json!([
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "b", "name": "f", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "(no output)"},
                {"type": "tool_result", "tool_use_id": "b", "content": "(no output)", "is_error": true},
            ]},
        ])
    );
}

#[test]
fn tool_result_images_reach_the_model_in_each_wire_form() {
    let png = Image {
        media_type: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
    };
    let result = |id: &str, images: Vec<Image>| ModelItem::ToolResult {
        call_id: id.into(),
        name: "snap".into(),
        content: format!("shot {id}"),
        is_error: false,
        images,
    };
    let call = |id: &str| ToolCall {
        id: id.into(),
        name: "snap".into(),
        arguments: "{}".into(),
    };
    let items = [
        ModelItem::ToolCalls {
            text: String::new(),
            calls: vec![call("a"), call("b"), call("c")],
        },
        result("a", vec![png.clone()]),
        result("b", Vec::new()),
        result("c", vec![png.clone(), png.clone()]),
        user("And now?").into(),
    ];
    let bodies: Vec<Value> = try_build(&[], &items)
        .into_iter()
        .map(|result| {
            let mut body = serde_json::from_str(&result.unwrap().body).unwrap();
            strip_cache_marks(&mut body);
            body
        })
        .collect();
    let url = serde_json::json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}});
    // Chat Completions: `tool` messages take text only; the images follow
    // the run of results as one user message, each call's after its name.
    assert_eq!(
        bodies[0]["messages"].as_array().unwrap()[1..],
        serde_json::json!([
            {"role": "tool", "tool_call_id": "a", "content": "shot a"},
            {"role": "tool", "tool_call_id": "b", "content": "shot b"},
            {"role": "tool", "tool_call_id": "c", "content": "shot c"},
            {"role": "user", "content": [
                {"type": "text", "text": "The images tool call a returned:"}, url,
                {"type": "text", "text": "The images tool call c returned:"}, url, url,
            ]},
            {"role": "user", "content": "And now?"},
        ])
        .as_array()
        .unwrap()[..]
    );
    // Messages: image blocks inside the `tool_result`.
    let image = serde_json::json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}});
    assert_eq!(
        bodies[1]["messages"][1],
        serde_json::json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "shot a"}, image]},
            {"type": "tool_result", "tool_use_id": "b", "content": "shot b"},
            {"type": "tool_result", "tool_use_id": "c", "content": [{"type": "text", "text": "shot c"}, image, image]},
            {"type": "text", "text": "And now?"},
        ]})
    );
}

#[test]
fn tool_result_images_are_bounded_and_checked() {
    let png = |data: &str| Image {
        media_type: "image/png".into(),
        data: data.into(),
    };
    assert!(Image::check_tool_images(&vec![png("AAAA"); TOOL_RESULT_IMAGES_MAX]).is_ok());
    let e = Image::check_tool_images(&vec![png("AAAA"); TOOL_RESULT_IMAGES_MAX + 1])
        .unwrap_err()
        .to_string();
    assert!(e.contains("at most 4 per tool result"), "{e}");
    let big = png(&"A".repeat(TOOL_RESULT_IMAGE_BYTES_MAX / 2 + 4));
    let e = Image::check_tool_images(&[big.clone(), big])
        .unwrap_err()
        .to_string();
    assert!(e.contains("1048576 bytes"), "{e}");
    let e = Image::check_tool_images(&[png("AAAA"), png("A")])
        .unwrap_err()
        .to_string();
    assert_eq!(e, "images[1].data: must be non-empty standard base64");
    let svg = Image {
        media_type: "image/svg+xml".into(),
        data: "AAAA".into(),
    };
    assert!(Image::check_tool_images(&[svg])
        .unwrap_err()
        .to_string()
        .starts_with("images[0].mediaType"));
}

/// A request of `items` with `reasoning`, as the body's JSON.
fn reasoning_body(
    spelling: &str,
    items: &[ModelItem],
    reasoning: Option<Reasoning>,
    max_output_tokens: u32,
) -> Value {
    let spec = ModelSpec::parse(spelling).unwrap();
    let req = ToolRequest {
        spec: &spec,
        instructions: None,
        items,
        tools: &[],
        max_output_tokens,
        reasoning,
        cache_key: None,
    };
    tool_call_of(&ProviderConfig::new(spec.provider, None, None), &req)
}

#[test]
fn reasoning_maps_to_openai_reasoning_effort() {
    let items = [ModelItem::from(user("hi"))];
    let none = reasoning_body("openai/o4", &items, None, 1000);
    assert!(none.get("reasoning_effort").is_none(), "{none}");
    for (level, wire) in [
        (Reasoning::Minimal, "minimal"),
        (Reasoning::Low, "low"),
        (Reasoning::Medium, "medium"),
        (Reasoning::High, "high"),
        (Reasoning::Max, "high"),
    ] {
        let body = reasoning_body("openai/o4", &items, Some(level), 1000);
        assert_eq!(body["reasoning_effort"], wire, "{level}");
        assert!(body.get("thinking").is_none());
    }
}

#[test]
fn reasoning_maps_to_an_anthropic_thinking_budget_that_fits() {
    let items = [ModelItem::from(user("hi"))];
    let none = reasoning_body("anthropic/c", &items, None, 64_000);
    assert!(none.get("thinking").is_none(), "{none}");
    for (level, budget) in [
        (Reasoning::Minimal, 1024),
        (Reasoning::Low, 2048),
        (Reasoning::Medium, 8192),
        (Reasoning::High, 16384),
        (Reasoning::Max, 32768),
    ] {
        let body = reasoning_body("anthropic/c", &items, Some(level), 64_000);
        assert_eq!(
            body["thinking"],
            serde_json::json!({"type": "enabled", "budget_tokens": budget}),
            "{level}"
        );
        assert!(body.get("reasoning_effort").is_none());
    }
    // Cut below max_tokens; none when max_tokens leaves no 1024 budget.
    let cut = reasoning_body("anthropic/c", &items, Some(Reasoning::Max), 4096);
    assert_eq!(cut["thinking"]["budget_tokens"], 4095);
    let none = reasoning_body("anthropic/c", &items, Some(Reasoning::Low), 1024);
    assert!(none.get("thinking").is_none(), "{none}");
}

#[test]
fn anthropic_thinking_is_left_out_while_a_tool_cycle_continues() {
    let (_, items) = tool_fixture();
    // The fixture's last assistant message calls tools (its results and a
    // steer follow): a continuation.
    let body = reasoning_body("anthropic/c", &items, Some(Reasoning::High), 64_000);
    assert!(body.get("thinking").is_none(), "{body}");
    // The next user prompt after the tool turn's final answer: thinking again.
    let mut next = items.clone();
    next.push(ModelItem::from(ModelMessage {
        role: Role::Assistant,
        text: "done".into(),
        images: Vec::new(),
    }));
    next.push(ModelItem::from(user("again")));
    let body = reasoning_body("anthropic/c", &next, Some(Reasoning::High), 64_000);
    assert_eq!(body["thinking"]["budget_tokens"], 16384, "{body}");
    // OpenAI keeps its effort in a tool cycle (the API defines it per request).
    let body = reasoning_body("openai/o4", &items, Some(Reasoning::High), 1000);
    assert_eq!(body["reasoning_effort"], "high");
}

/// A turn's usage sums its steps; a count only some steps report is summed
/// over those, and stays absent when none does.
#[test]
fn usage_sums_counts_reported_by_some_steps() {
    let a = Usage {
        input_tokens: 100,
        output_tokens: 10,
        cache_read_tokens: Some(80),
        ..Usage::default()
    };
    let b = Usage {
        input_tokens: 120,
        output_tokens: 5,
        cache_write_tokens: Some(20),
        ..Usage::default()
    };
    assert_eq!(
        a.plus(b),
        Usage {
            input_tokens: 220,
            output_tokens: 15,
            cache_read_tokens: Some(80),
            cache_write_tokens: Some(20),
            reasoning_tokens: None,
        }
    );
    // Stored usage written before these counts existed reads as absent.
    let old: Usage = serde_json::from_str(r#"{"inputTokens":3,"outputTokens":4}"#).unwrap();
    assert_eq!(old.plus(old).cache_read_tokens, None);
    assert_eq!(
        serde_json::to_string(&old).unwrap(),
        r#"{"inputTokens":3,"outputTokens":4}"#
    );
}

/// The provider's own usage object is kept as sent (only the `usage`
/// member): OpenAI's last, Anthropic's `message_start` and `message_delta`
/// objects merged; one past `USAGE_RAW_BYTES_MAX` is dropped whole.
#[test]
fn raw_usage_is_the_providers_usage_member_bounded_whole() {
    let mut openai = StreamDecoder::new(Provider::OpenAi);
    assert_eq!(openai.raw_usage(), None);
    let chunk = r#"data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}},"id":"secret-free"}"#;
    openai.push(format!("{chunk}\n\n").as_bytes()).unwrap();
    assert_eq!(
        openai.raw_usage(),
        Some(RawUsage::Kept(
            r#"{"completion_tokens":2,"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":1}}"#
                .into()
        ))
    );
    let mut anthropic = StreamDecoder::new(Provider::Anthropic);
    let stream = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":4,"output_tokens":1}}}"#,
        "\n\nevent: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}"#,
        "\n\n",
    );
    anthropic.push(stream.as_bytes()).unwrap();
    assert_eq!(
        anthropic.raw_usage(),
        Some(RawUsage::Kept(
            r#"{"cache_read_input_tokens":4,"input_tokens":10,"output_tokens":7}"#.into()
        ))
    );
    let mut long = StreamDecoder::new(Provider::OpenAi);
    let padding = "x".repeat(USAGE_RAW_BYTES_MAX);
    let chunk = format!(
        r#"data: {{"choices":[],"usage":{{"prompt_tokens":5,"completion_tokens":2,"note":"{padding}"}}}}"#
    );
    long.push(format!("{chunk}\n\n").as_bytes()).unwrap();
    assert_eq!(long.raw_usage(), Some(RawUsage::Dropped));
}
