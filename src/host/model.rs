//! Performs one model call of a turn ([`Action::CallModel`]): the streamed
//! request to the provider. Its tokens go to watchers as they arrive and are
//! never written; the driver records the finished answer.
//!
//! [`Action::CallModel`]: crate::run::driver::Action::CallModel

use super::bindings::{self, error_message};
use super::config::HostConfig;
use super::models::Target;
use super::stopper::Stopper;
use crate::limits::{MODEL_CALL_TIMEOUT_MS, MODEL_ERROR_BODY_BYTES_MAX};
use crate::model::{
    build_call_with_tools, classify_status, Answer, ModelError, ModelItem, StreamDecoder,
    StreamEvent, ToolRequest, ToolSpec,
};
use crate::run::driver::Input;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// What one model call sends besides the model: the turn's prompt.
pub struct Prompt<'a> {
    pub instructions: Option<&'a str>,
    pub context: &'a [ModelItem],
    pub tools: &'a [ToolSpec],
    /// The Session's `prompt_cache_key` ([`crate::model::prompt_cache_key`]).
    pub cache_key: &'a str,
}

/// Calls the turn's model (`target`, resolved at its start) with `prompt`, streaming each text delta to
/// `on_delta`. A failure's diagnostic holds provider text: it leaves here
/// redacted (no configured key in any form) and bounded.
pub async fn call(
    config: &HostConfig,
    target: &Target,
    prompt: &Prompt<'_>,
    stopper: &Stopper,
    on_delta: &dyn Fn(&str),
) -> Input {
    let spec = &target.resolved.spec;
    let model = Some(format!("{}/{}", spec.provider.name(), spec.model));
    match attempt(config, target, prompt, stopper, on_delta).await {
        _ if stopper.is_stopped() => Input::Stopped,
        Ok(mut answer) => {
            answer.model = model;
            Input::Answered(answer)
        }
        Err(mut e) => {
            e.metered.model = model;
            Input::Failed(ModelError {
                diagnostic: ModelError::new(e.retryable, config.secrets.redact(&e.diagnostic))
                    .diagnostic,
                ..e
            })
        }
    }
}

async fn attempt(
    config: &HostConfig,
    target: &Target,
    prompt: &Prompt<'_>,
    stopper: &Stopper,
    on_delta: &dyn Fn(&str),
) -> Result<Answer, ModelError> {
    let spec = &target.resolved.spec;
    let request = ToolRequest {
        spec,
        instructions: prompt.instructions,
        items: prompt.context,
        tools: prompt.tools,
        max_output_tokens: config.max_output_tokens,
        reasoning: target.resolved.reasoning,
        cache_key: Some(prompt.cache_key),
    };
    let call = build_call_with_tools(&target.provider, &request)?;
    let streamed = stream(&call, spec.provider, stopper, config, on_delta);
    bindings::within(streamed, MODEL_CALL_TIMEOUT_MS, &stopper.controller, 0)
        .await
        .unwrap_or_else(|| {
            Err(ModelError::new(
                true,
                format!("the model call exceeded {MODEL_CALL_TIMEOUT_MS} ms"),
            ))
        })
}

async fn stream(
    call: &crate::outbound::Outbound,
    provider: crate::model::Provider,
    stopper: &Stopper,
    config: &HostConfig,
    on_delta: &dyn Fn(&str),
) -> Result<Answer, ModelError> {
    let network =
        |e: JsValue| ModelError::new(true, format!("model call failed: {}", error_message(&e)));
    let headers = web_sys::Headers::new().map_err(network)?;
    for (name, value) in &call.headers {
        headers.append(name, value).map_err(network)?;
    }
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_headers(&headers);
    init.set_body(&JsValue::from_str(&call.body));
    init.set_signal(Some(&stopper.controller.signal()));
    let request = web_sys::Request::new_with_str_and_init(&call.url, &init).map_err(network)?;
    let response = bindings::fetch(&request).await.map_err(network)?;
    let reader = response.body().map(|body| {
        body.get_reader()
            .unchecked_into::<web_sys::ReadableStreamDefaultReader>()
    });
    if !(200..300).contains(&response.status()) {
        let text = match reader {
            Some(reader) => read_bounded(&reader, MODEL_ERROR_BODY_BYTES_MAX).await,
            None => String::new(),
        };
        return Err(classify_status(response.status(), &text));
    }
    let reader = reader.ok_or_else(|| ModelError::new(true, "the model answered with no body"))?;
    let _cancel = super::body::CancelOnDrop(&reader);
    let mut decoder = StreamDecoder::new(provider);
    let mut answer = Answer::default();
    let read = read_answer(&reader, &mut decoder, &mut answer, config, on_delta).await;
    // The provider's usage object, as it sent it; a call failing after its
    // usage (rare: it comes last) keeps it for the ledger.
    let raw = decoder.raw_usage();
    match read {
        Ok(()) => {
            answer.raw_usage = raw;
            Ok(answer)
        }
        Err(mut e) => {
            e.metered.usage = answer.usage;
            e.metered.raw = raw;
            Err(e)
        }
    }
}

/// Reads the streamed answer into `answer`. `config` is read only by the
/// fault-injection hook of test builds.
#[cfg_attr(not(feature = "fault-injection"), allow(unused_variables))]
async fn read_answer(
    reader: &web_sys::ReadableStreamDefaultReader,
    decoder: &mut StreamDecoder,
    answer: &mut Answer,
    config: &HostConfig,
    on_delta: &dyn Fn(&str),
) -> Result<(), ModelError> {
    let network =
        |e: JsValue| ModelError::new(true, format!("model call failed: {}", error_message(&e)));
    loop {
        let chunk = JsFuture::from(reader.read()).await.map_err(network)?;
        let done = js_sys::Reflect::get(&chunk, &"done".into())
            .map(|d| d.is_truthy())
            .unwrap_or(true);
        let events = if done {
            decoder.finish()?
        } else {
            let value = js_sys::Reflect::get(&chunk, &"value".into()).map_err(network)?;
            decoder.push(&js_sys::Uint8Array::new(&value).to_vec())?
        };
        // One frame per network read, however many deltas it held: a burst
        // must not flood watchers past their backlog bound.
        let mut text = String::new();
        for event in &events {
            answer.apply(event)?;
            if let StreamEvent::TextDelta(delta) = event {
                text.push_str(delta);
            }
        }
        if !text.is_empty() {
            #[cfg(feature = "fault-injection")]
            if let Some(marker) = &config.panic_marker {
                // Fault injection (tests): a trap in the middle of a turn.
                assert!(
                    !text.contains(marker.as_str()),
                    "fault injection: panic marker streamed"
                );
            }
            on_delta(&text);
        }
        if done {
            return Ok(());
        }
    }
}

/// Reads at most `limit` bytes of a body as text (for error diagnostics).
async fn read_bounded(reader: &web_sys::ReadableStreamDefaultReader, limit: usize) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < limit {
        let Ok(chunk) = JsFuture::from(reader.read()).await else {
            break;
        };
        if js_sys::Reflect::get(&chunk, &"done".into()).map_or(true, |d| d.is_truthy()) {
            break;
        }
        if let Ok(value) = js_sys::Reflect::get(&chunk, &"value".into()) {
            bytes.extend(js_sys::Uint8Array::new(&value).to_vec());
        }
    }
    let _ = reader.cancel();
    bytes.truncate(limit);
    String::from_utf8_lossy(&bytes).into_owned()
}
