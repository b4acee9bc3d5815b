//! OpenTelemetry traces (`src/trace/`), performed: the host's
//! `telemetry()` (`{ endpoint, headers? }`, or the env's
//! `SHIITAKE_OTLP_ENDPOINT`, read by the shim), the timing of each model
//! and tool call into its span, the turn span staged by the settlement, and
//! the export, OTLP/HTTP JSON (`POST {endpoint}/v1/traces`) through the
//! platform's `fetch`, run by each host work lane pass (`jobs.rs`) after
//! its delivery, under the lane's backoff.
//!
//! The headers (an API key, a bearer token) live only in this instance's
//! memory: never stored, redacted from every log like the model keys.
//! Without `telemetry()` nothing is timed, staged or sent.

use super::bindings::{self, error_message, log_error, log_warn};
use super::Inner;
use crate::delivery::LanePolicy;
use crate::limits::{
    TRACE_ENDPOINT_BYTES_MAX, TRACE_EXPORT_BATCHES_MAX, TRACE_EXPORT_TIMEOUT_MS, TRACE_HEADERS_MAX,
    TRACE_HEADER_BYTES_MAX,
};
use crate::model::ModelSpec;
use crate::redact::Secrets;
use crate::run::driver::Input;
use crate::run::tools::OpenCall;
use crate::settlement::Settlement;
use crate::sql::atomically;
use crate::store::{CommandRow, State};
use crate::trace::{self, ChatOutcome};
use serde::Deserialize;
use std::collections::BTreeMap;
use wasm_bindgen::prelude::*;

/// `telemetry()` as the shim describes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// `telemetry()` threw or is malformed: why.
    #[serde(default)]
    error: Option<String>,
}

/// Where spans go, decoded once per instance.
pub struct HostTelemetry {
    /// `{endpoint}/v1/traces`.
    url: String,
    headers: Vec<(String, String)>,
    /// Model calls timed in this instance: with the head and the start,
    /// what makes a chat span's id unique.
    chat_calls: std::cell::Cell<u64>,
}

impl HostTelemetry {
    /// `None` when the host configures none; an error naming the bad key
    /// (nothing is then recorded). Header values join `secrets`.
    pub fn new(spec: Option<String>, secrets: &mut Secrets) -> Result<Option<Self>, String> {
        let Some(spec) = spec else { return Ok(None) };
        let spec: Spec = crate::json::from_text(&spec).map_err(|e| format!("telemetry(): {e}"))?;
        for value in spec.headers.values() {
            secrets.add(value);
        }
        if let Some(error) = spec.error {
            return Err(error);
        }
        let Some(endpoint) = spec.endpoint else {
            return Err("telemetry().endpoint is missing: the OTLP/HTTP base URL".into());
        };
        if endpoint.len() > TRACE_ENDPOINT_BYTES_MAX
            || !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(format!(
                "telemetry().endpoint must be an http(s) URL of at most \
                 {TRACE_ENDPOINT_BYTES_MAX} bytes"
            ));
        }
        let bytes: usize = spec.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
        if spec.headers.len() > TRACE_HEADERS_MAX || bytes > TRACE_HEADER_BYTES_MAX {
            return Err(format!(
                "telemetry().headers: at most {TRACE_HEADERS_MAX} headers of \
                 {TRACE_HEADER_BYTES_MAX} bytes in all"
            ));
        }
        let headers: Vec<(String, String)> = spec.headers.into_iter().collect();
        // Refused here rather than at every export (the name only: a
        // value is a secret).
        let check = web_sys::Headers::new().map_err(|e| error_message(&e))?;
        for (name, value) in &headers {
            check
                .set(name, value)
                .map_err(|_| format!("telemetry().headers: `{name}` is not a valid header"))?;
        }
        Ok(Some(HostTelemetry {
            url: format!("{}/v1/traces", endpoint.trim_end_matches('/')),
            headers,
            chat_calls: std::cell::Cell::new(0),
        }))
    }
}

impl Inner {
    fn telemetry(&self) -> Option<&HostTelemetry> {
        self.telemetry.as_ref().ok().and_then(Option::as_ref)
    }

    /// Whether spans are recorded.
    pub(super) fn traced(&self) -> bool {
        self.telemetry().is_some()
    }

    /// The span of a model call of the turn headed by `head` started at
    /// `start_ms`, ended by `input`; none untraced or stopped.
    pub(super) fn chat_span(
        &self,
        head: &str,
        model: &ModelSpec,
        start_ms: i64,
        input: &Input,
    ) -> Option<String> {
        let telemetry = self.telemetry()?;
        let outcome = match input {
            Input::Answered(answer) => ChatOutcome::Answered {
                usage: answer.usage,
                finish_reason: answer.finish_reason.as_deref(),
            },
            Input::Failed(error) => ChatOutcome::Failed {
                retryable: error.retryable,
                too_long: error.too_long,
            },
            _ => return None,
        };
        let call = telemetry.chat_calls.get();
        telemetry.chat_calls.set(call.wrapping_add(1));
        let span = trace::chat(head, call, model, start_ms, bindings::now_ms(), &outcome);
        Some(span.to_json().to_string())
    }

    /// The span of a tool call run by the turn headed by `head`.
    pub(super) fn tool_span(
        &self,
        head: &str,
        call: &OpenCall,
        start_ms: i64,
        input: &Input,
    ) -> Option<String> {
        self.telemetry()?;
        let Input::ToolDone(output) = input else {
            return None;
        };
        let end = bindings::now_ms();
        let span = trace::tool(head, &call.id, &call.name, start_ms, end, output.is_error);
        Some(span.to_json().to_string())
    }

    /// In a settling transition: the turn span of a head that ran, staged
    /// with its settlement.
    pub(super) fn stage_turn_span(
        &self,
        store: crate::store::Store<'_>,
        command: &CommandRow,
        settlement: &str,
        now_ms: i64,
    ) -> Result<(), crate::sql::SqlError> {
        if !self.traced() || command.state != State::Running || command.turn_id.is_some() {
            return Ok(());
        }
        let settlement: Settlement = serde_json::from_str(settlement)
            .map_err(|e| crate::sql::SqlError::Decode(format!("a settlement: {e}")))?;
        let started = command.started_at.unwrap_or(command.accepted_at);
        let span = trace::turn(&command.session_id, &settlement, started, now_ms);
        trace::stage(store.sql(), &[span.to_json().to_string()], now_ms)
    }

    /// When spans are due for export (none untraced): a lane pass then,
    /// through the alarm (`jobs.rs`).
    pub(super) fn trace_deadline(&self, now: i64) -> Option<i64> {
        self.telemetry()?;
        trace::deadline(&self.sql, now).unwrap_or_else(|e| {
            log_error(format!("traces: {e}"));
            None
        })
    }

    /// One lane pass's export: batches of the oldest spans, each deleted
    /// once the receiver answered 2xx; a failure persists the backoff
    /// (`policy`) and ends the export. Answers whether spans are left.
    pub(super) async fn export_traces(&self, policy: &LanePolicy) -> bool {
        let Some(telemetry) = self.telemetry() else {
            return false;
        };
        for _ in 0..TRACE_EXPORT_BATCHES_MAX {
            let batch = match trace::batch(&self.sql, bindings::now_ms()) {
                Ok(Some(batch)) => batch,
                Ok(None) => return false,
                Err(e) => {
                    log_error(format!("traces: {e}"));
                    return false;
                }
            };
            match send(telemetry, &batch.body).await {
                Ok(()) => {
                    if let Err(e) =
                        atomically(&self.sql, || trace::exported(&self.sql, batch.through))
                    {
                        log_error(format!("traces: {e}"));
                        return false;
                    }
                }
                Err(why) => {
                    let now = bindings::now_ms();
                    let dropped = atomically(&self.sql, || {
                        trace::failed(&self.sql, batch.through, policy, now)
                    });
                    let why = self.config.secrets.redact(&why);
                    match dropped {
                        Ok(0) => log_warn(format!(
                            "traces: exporting {} spans failed, retried: {why}",
                            batch.spans
                        )),
                        Ok(n) => log_warn(format!(
                            "traces: exporting {} spans failed: {why}; {n} spans dropped \
                             after {} attempts",
                            batch.spans,
                            crate::limits::TRACE_EXPORT_ATTEMPTS_MAX
                        )),
                        Err(e) => log_error(format!("traces: {e}")),
                    }
                    return false;
                }
            }
        }
        true
    }
}

/// One export request: `Ok` once the receiver answered 2xx.
async fn send(telemetry: &HostTelemetry, body: &str) -> Result<(), String> {
    let failed = |e: JsValue| error_message(&e);
    let headers = web_sys::Headers::new().map_err(failed)?;
    headers
        .set("content-type", "application/json")
        .map_err(failed)?;
    for (name, value) in &telemetry.headers {
        headers.set(name, value).map_err(failed)?;
    }
    let controller = web_sys::AbortController::new().map_err(failed)?;
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_headers(&headers);
    init.set_body(&JsValue::from_str(body));
    init.set_signal(Some(&controller.signal()));
    let request = web_sys::Request::new_with_str_and_init(&telemetry.url, &init).map_err(failed)?;
    let sent = async {
        let response = bindings::fetch(&request).await.map_err(failed)?;
        // The body is not read: drop it.
        if let Some(body) = response.body() {
            let _ = body.cancel();
        }
        match response.status() {
            200..=299 => Ok(()),
            status => Err(format!("the OTLP receiver answered {status}")),
        }
    };
    bindings::within(sent, TRACE_EXPORT_TIMEOUT_MS, &controller, 0)
        .await
        .unwrap_or_else(|| {
            Err(format!(
                "the OTLP receiver did not answer within {TRACE_EXPORT_TIMEOUT_MS} ms"
            ))
        })
}
