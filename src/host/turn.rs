//! One model step of a turn: the streamed call to the provider. The step's
//! tokens go to watchers as they arrive and are never written; the caller
//! records the finished answer in one transition.

use super::config::{HostConfig, MODEL_CALL_TIMEOUT_MS};
use super::js::{self, error_message};
use crate::model::{
    build_call_with_tools, classify_status, Answer, ModelError, StreamDecoder, StreamEvent,
    ToolRequest, ToolSpec,
};
use crate::run::{Step, StepAnswer, TokenUsage};
use futures::future::{select, Either};
use std::cell::Cell;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// Most bytes of an error body read for a diagnostic.
const ERROR_BODY_BYTES_MAX: usize = 65_536;

/// How a model call ended.
pub enum CallOutcome {
    Answered(StepAnswer),
    Failed(ModelError),
    /// The turn was cancelled (or its Session deleted): drop everything.
    Stopped,
}

/// A live call's handle: the registry keeps it so a cancel can stop it.
#[derive(Clone)]
pub struct Stopper {
    controller: web_sys::AbortController,
    stopped: Rc<Cell<bool>>,
    /// Tool calls' own controllers, aborted with the turn.
    children: Rc<RefCell<Vec<web_sys::AbortController>>>,
}

impl Stopper {
    pub fn new() -> Result<Self, JsValue> {
        Ok(Stopper {
            controller: web_sys::AbortController::new()?,
            stopped: Rc::new(Cell::new(false)),
            children: Rc::default(),
        })
    }

    pub fn stop(&self) {
        self.stopped.set(true);
        self.controller.abort();
        for child in self.children.borrow_mut().drain(..) {
            child.abort();
        }
    }

    /// Ties a tool call's controller to the turn: a stop aborts it too.
    /// Only the newest few are kept: calls of a turn run one at a time.
    pub fn adopt(&self, child: &web_sys::AbortController) {
        if self.is_stopped() {
            child.abort();
            return;
        }
        let mut children = self.children.borrow_mut();
        children.retain(|c| !c.signal().aborted());
        if children.len() >= 8 {
            children.remove(0);
        }
        children.push(child.clone());
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.get()
    }
}

/// Calls the model for `step`, streaming each text delta to `on_delta`.
/// A failure's diagnostic holds provider text: it leaves here redacted (no
/// configured key in any form) and bounded.
pub async fn call(
    config: &HostConfig,
    step: &Step,
    tools: &[ToolSpec],
    stopper: &Stopper,
    on_delta: &dyn Fn(&str),
) -> CallOutcome {
    match attempt(config, step, tools, stopper, on_delta).await {
        CallOutcome::Failed(e) => CallOutcome::Failed(ModelError::new(
            e.retryable,
            config.secrets.redact(&e.diagnostic),
        )),
        outcome => outcome,
    }
}

async fn attempt(
    config: &HostConfig,
    step: &Step,
    tools: &[ToolSpec],
    stopper: &Stopper,
    on_delta: &dyn Fn(&str),
) -> CallOutcome {
    let (spec, provider) = match &config.model {
        Ok(model) => model,
        Err(why) => return CallOutcome::Failed(ModelError::new(false, why.clone())),
    };
    let request = ToolRequest {
        spec,
        instructions: config.instructions.as_deref(),
        items: &step.context,
        tools,
        max_output_tokens: config.max_output_tokens,
    };
    let call = match build_call_with_tools(provider, &request) {
        Ok(call) => call,
        Err(e) => return CallOutcome::Failed(e),
    };
    let streamed = stream(&call, spec.provider, stopper, config, on_delta);
    let deadline = js::sleep(MODEL_CALL_TIMEOUT_MS);
    let outcome = match select(Box::pin(streamed), deadline).await {
        Either::Left((outcome, _)) => outcome,
        Either::Right(_) => {
            stopper.controller.abort();
            Err(ModelError::new(
                true,
                format!("the model call exceeded {MODEL_CALL_TIMEOUT_MS} ms"),
            ))
        }
    };
    match outcome {
        _ if stopper.is_stopped() => CallOutcome::Stopped,
        Ok(answer) => CallOutcome::Answered(StepAnswer {
            usage: answer.usage.map(|u| TokenUsage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
            }),
            tool_calls: answer.tool_calls,
            text: answer.text,
        }),
        Err(e) => CallOutcome::Failed(e),
    }
}

async fn stream(
    call: &crate::model::HttpCall,
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
    let response = js::fetch(&request).await.map_err(network)?;
    let reader = response.body().map(|body| {
        body.get_reader()
            .unchecked_into::<web_sys::ReadableStreamDefaultReader>()
    });
    if !(200..300).contains(&response.status()) {
        let text = match reader {
            Some(reader) => read_bounded(&reader, ERROR_BODY_BYTES_MAX).await,
            None => String::new(),
        };
        return Err(classify_status(response.status(), &text));
    }
    let reader = reader.ok_or_else(|| ModelError::new(true, "the model answered with no body"))?;
    let _cancel = super::body::CancelOnDrop(&reader);
    let mut decoder = StreamDecoder::new(provider);
    let mut answer = Answer::default();
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
            return Ok(answer);
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
