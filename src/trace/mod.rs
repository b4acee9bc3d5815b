//! OpenTelemetry traces of turns (issue 38), named and attributed by the
//! GenAI semantic conventions: a turn is one trace whose root span
//! (`invoke_agent`) has a child per model call (`chat {model}`) and per
//! tool call run (`execute_tool {tool}`). Sans-IO: the host times the
//! calls and sends the export requests; this module builds the spans, the
//! OTLP/JSON request (`ExportTraceServiceRequest`), and keeps the spans
//! waiting for export (`shiitake_spans`, the `traces` group).
//!
//! A span is written by the transition that ends it (the model call's
//! answer or failure, the tool call's outcome, the settlement), one row
//! each, and only while the host configures `telemetry()`. Ids are
//! digests: the trace id of the turn's head command, so a turn resumed
//! after a crash continues its trace; the turn span's id of the same, so
//! its children name it before it is written.
//!
//! Attributes carry names, counts and outcomes only: no prompt, answer,
//! tool argument or result, header or key.
//!
//! Export is at least once: a batch is deleted once the receiver
//! accepted it; a failed one waits the lane's backoff
//! ([`LanePolicy`]), is tried again, and is dropped after
//! [`TRACE_EXPORT_ATTEMPTS_MAX`] failures (the count is the host's to log).

use crate::delivery::LanePolicy;
use crate::limits::{
    TRACE_ATTRIBUTE_BYTES_MAX, TRACE_EXPORT_ATTEMPTS_MAX, TRACE_EXPORT_BYTES_MAX,
    TRACE_EXPORT_DELAY_MS, TRACE_EXPORT_SPANS_MAX, TRACE_PENDING_MAX,
};
use crate::model::{ModelSpec, Usage};
use crate::settlement::Settlement;
use crate::sql::{read, write, Sql, SqlError, SqlValue};
use crate::store::schema::TRACES;
use crate::store::Terminal;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const SPANS: &str = "shiitake_spans";

/// The instrumentation scope and `service.name` of every span.
const SCOPE: &str = "shiitake";

/// `SpanKind` of the OTLP proto.
const KIND_INTERNAL: u8 = 1;
const KIND_CLIENT: u8 = 3;
/// `Status.code` ERROR of the OTLP proto.
const STATUS_ERROR: u8 = 2;

fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update(b"shiitake.trace");
    for part in parts {
        digest.update([0]);
        digest.update(part);
    }
    digest.finalize().into()
}

/// The trace id of the turn headed by `command_id` (16 bytes, hex).
fn trace_id(command_id: &str) -> String {
    crate::text::hex(&digest(&[command_id.as_bytes()])[..16])
}

/// A span id (8 bytes, hex) of the turn headed by `command_id`.
fn span_id(command_id: &str, parts: &[&[u8]]) -> String {
    let mut all = vec![command_id.as_bytes(), b"span".as_slice()];
    all.extend_from_slice(parts);
    crate::text::hex(&digest(&all)[..8])
}

/// The turn span's id: every child names it as its parent.
fn turn_span_id(command_id: &str) -> String {
    span_id(command_id, &[b"turn"])
}

/// One attribute value.
#[derive(Debug, Clone, PartialEq)]
enum Attr {
    Str(String),
    Int(u64),
    Strs(Vec<String>),
}

fn bounded(text: &str) -> String {
    let mut text = text.to_owned();
    crate::text::truncate(&mut text, TRACE_ATTRIBUTE_BYTES_MAX);
    text
}

/// One span, as the OTLP/JSON `Span` message encodes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    trace_id: String,
    span_id: String,
    parent: Option<String>,
    name: String,
    kind: u8,
    start_ms: i64,
    end_ms: i64,
    attributes: Vec<(&'static str, Attr)>,
    /// `error.type`, and the span's status ERROR.
    error: Option<String>,
}

impl Span {
    fn child(
        head: &str,
        span_id: String,
        name: String,
        kind: u8,
        start_ms: i64,
        end_ms: i64,
    ) -> Span {
        Span {
            trace_id: trace_id(head),
            span_id,
            parent: Some(turn_span_id(head)),
            name,
            kind,
            start_ms,
            end_ms: end_ms.max(start_ms),
            attributes: Vec::new(),
            error: None,
        }
    }

    fn attr(mut self, key: &'static str, value: Attr) -> Span {
        self.attributes.push((key, value));
        self
    }

    fn usage(self, usage: Option<Usage>) -> Span {
        let Some(usage) = usage else { return self };
        let span = self
            .attr("gen_ai.usage.input_tokens", Attr::Int(usage.input_tokens))
            .attr("gen_ai.usage.output_tokens", Attr::Int(usage.output_tokens));
        match usage.cache_read_tokens {
            Some(n) => span.attr("gen_ai.usage.cache_read.input_tokens", Attr::Int(n)),
            None => span,
        }
    }

    fn failed(mut self, error_type: Option<&str>) -> Span {
        if let Some(error) = error_type {
            self = self.attr("error.type", Attr::Str(bounded(error)));
            self.error = Some(error.to_owned());
        }
        self
    }

    /// The OTLP/JSON `Span` (hex ids, times as decimal nanosecond
    /// strings, 64-bit integers as decimal strings).
    pub fn to_json(&self) -> Value {
        let nanos = |ms: i64| (ms.max(0) as u128 * 1_000_000).to_string();
        let value = |attr: &Attr| match attr {
            Attr::Str(s) => json!({ "stringValue": s }),
            Attr::Int(n) => json!({ "intValue": n.to_string() }),
            Attr::Strs(list) => json!({ "arrayValue": {
                "values": list.iter().map(|s| json!({ "stringValue": s })).collect::<Vec<_>>()
            }}),
        };
        let mut span = json!({
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "name": self.name,
            "kind": self.kind,
            "startTimeUnixNano": nanos(self.start_ms),
            "endTimeUnixNano": nanos(self.end_ms),
            "attributes": self.attributes.iter()
                .map(|(key, attr)| json!({ "key": key, "value": value(attr) }))
                .collect::<Vec<_>>(),
        });
        if let Some(parent) = &self.parent {
            span["parentSpanId"] = json!(parent);
        }
        if let Some(error) = &self.error {
            span["status"] = json!({ "code": STATUS_ERROR, "message": error });
        }
        span
    }
}

/// How a model call ended, as its span records it.
pub enum ChatOutcome<'a> {
    Answered {
        usage: Option<Usage>,
        finish_reason: Option<&'a str>,
    },
    Failed {
        retryable: bool,
        too_long: bool,
    },
}

/// The span of one model call of the turn headed by `head`, started at
/// `start_ms`: `call` tells it from other calls started then (the host's
/// count of them).
pub fn chat(
    head: &str,
    call: u64,
    model: &ModelSpec,
    start_ms: i64,
    end_ms: i64,
    outcome: &ChatOutcome<'_>,
) -> Span {
    let id = span_id(
        head,
        &[b"chat", &call.to_be_bytes(), &start_ms.to_be_bytes()],
    );
    let span = Span::child(
        head,
        id,
        format!("chat {}", bounded(&model.model)),
        KIND_CLIENT,
        start_ms,
        end_ms,
    )
    .attr("gen_ai.operation.name", Attr::Str("chat".into()))
    .attr(
        "gen_ai.provider.name",
        Attr::Str(model.provider.name().into()),
    )
    .attr("gen_ai.request.model", Attr::Str(bounded(&model.model)));
    match outcome {
        ChatOutcome::Answered {
            usage,
            finish_reason,
        } => {
            let span = span.usage(*usage);
            match finish_reason {
                Some(reason) => span.attr(
                    "gen_ai.response.finish_reasons",
                    Attr::Strs(vec![bounded(reason)]),
                ),
                None => span,
            }
        }
        ChatOutcome::Failed {
            retryable,
            too_long,
        } => span.failed(Some(match (too_long, retryable) {
            (true, _) => "context_length_exceeded",
            (false, true) => "retryable",
            (false, false) => "refused",
        })),
    }
}

/// The span of one tool call run by the turn headed by `head`, started at
/// `start_ms` (a call run again after a crash is another span).
pub fn tool(
    head: &str,
    call_id: &str,
    name: &str,
    start_ms: i64,
    end_ms: i64,
    is_error: bool,
) -> Span {
    let id = span_id(
        head,
        &[b"tool", call_id.as_bytes(), &start_ms.to_be_bytes()],
    );
    Span::child(
        head,
        id,
        format!("execute_tool {}", bounded(name)),
        KIND_INTERNAL,
        start_ms,
        end_ms,
    )
    .attr("gen_ai.operation.name", Attr::Str("execute_tool".into()))
    .attr("gen_ai.tool.name", Attr::Str(bounded(name)))
    .attr("gen_ai.tool.call.id", Attr::Str(bounded(call_id)))
    .failed(is_error.then_some("tool_error"))
}

/// The turn's root span, written by its head's settlement: from
/// `started_ms` (its first claim) to `end_ms`, with the turn's usage and
/// outcome.
pub fn turn(session_id: &str, settlement: &Settlement, started_ms: i64, end_ms: i64) -> Span {
    let head = settlement.command_id.as_str();
    let error = match settlement.terminal {
        Terminal::Completed | Terminal::Cancelled => None,
        other => Some(other.as_str()),
    };
    Span {
        trace_id: trace_id(head),
        span_id: turn_span_id(head),
        parent: None,
        name: "invoke_agent".into(),
        kind: KIND_INTERNAL,
        start_ms: started_ms,
        end_ms: end_ms.max(started_ms),
        attributes: Vec::new(),
        error: None,
    }
    .attr("gen_ai.operation.name", Attr::Str("invoke_agent".into()))
    .attr("gen_ai.conversation.id", Attr::Str(bounded(session_id)))
    .attr("shiitake.command.id", Attr::Str(bounded(head)))
    .attr(
        "shiitake.turn.outcome",
        Attr::Str(settlement.terminal.as_str().into()),
    )
    .usage(settlement.usage)
    .failed(error)
}

/// Stages `bodies` (each a span's OTLP/JSON, [`Span::to_json`]) as writes
/// of the open transition at `now_ms`: one row each.
pub fn stage(sql: &dyn Sql, bodies: &[String], now_ms: i64) -> Result<(), SqlError> {
    if bodies.is_empty() {
        return Ok(());
    }
    TRACES.ensure(sql)?;
    for body in bodies {
        write(
            sql,
            &format!("INSERT INTO {SPANS} (body, at) VALUES (?, ?)"),
            vec![SqlValue::Text(body.clone()), SqlValue::Integer(now_ms)],
        )?;
    }
    Ok(())
}

/// A batch of spans to export: the request body and the last `seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub through: i64,
    pub spans: usize,
    pub body: String,
}

/// The oldest spans, at most [`TRACE_EXPORT_SPANS_MAX`] and
/// [`TRACE_EXPORT_BYTES_MAX`] (at least one), as an OTLP/JSON
/// `ExportTraceServiceRequest`, once due ([`deadline`]) or a full batch
/// waits; none while a failed export waits its retry.
pub fn batch(sql: &dyn Sql, now_ms: i64) -> Result<Option<Batch>, SqlError> {
    if !TRACES.exists(sql) {
        return Ok(None);
    }
    let rows = read(
        sql,
        &format!("SELECT seq, body, at, retry_at FROM {SPANS} ORDER BY seq LIMIT ?"),
        &[SqlValue::Integer(TRACE_EXPORT_SPANS_MAX as i64)],
    )?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let full = rows.len() == TRACE_EXPORT_SPANS_MAX;
    match first.opt_int(3)? {
        // The oldest spans are the failed ones: their retry holds the rest.
        Some(retry_at) if retry_at > now_ms => return Ok(None),
        None if !full && first.int(2)? + TRACE_EXPORT_DELAY_MS > now_ms => return Ok(None),
        _ => {}
    }
    let mut spans = Vec::new();
    let (mut bytes, mut through) = (0, 0);
    for row in &rows {
        let body = row.text(1)?;
        if !spans.is_empty() && bytes + body.len() > TRACE_EXPORT_BYTES_MAX {
            break;
        }
        bytes += body.len();
        through = row.int(0)?;
        spans.push(
            serde_json::from_str::<Value>(&body)
                .map_err(|e| SqlError::Engine(format!("{SPANS}: a body is not JSON: {e}")))?,
        );
    }
    if spans.is_empty() {
        return Ok(None);
    }
    Ok(Some(Batch {
        through,
        spans: spans.len(),
        body: request(spans).to_string(),
    }))
}

/// The `ExportTraceServiceRequest` of `spans`.
fn request(spans: Vec<Value>) -> Value {
    json!({ "resourceSpans": [{
        "resource": { "attributes": [
            { "key": "service.name", "value": { "stringValue": SCOPE } },
        ]},
        "scopeSpans": [{
            "scope": { "name": SCOPE, "version": env!("CARGO_PKG_VERSION") },
            "spans": spans,
        }],
    }]})
}

/// The receiver accepted the batch through `through`.
pub fn exported(sql: &dyn Sql, through: i64) -> Result<(), SqlError> {
    write(
        sql,
        &format!("DELETE FROM {SPANS} WHERE seq <= ?"),
        vec![SqlValue::Integer(through)],
    )
}

/// The export of the batch through `through` failed at `now_ms`: its spans
/// count the failure and wait the backoff; those past
/// [`TRACE_EXPORT_ATTEMPTS_MAX`] failures, and the oldest past
/// [`TRACE_PENDING_MAX`] kept, are dropped. Answers how many were.
pub fn failed(
    sql: &dyn Sql,
    through: i64,
    policy: &LanePolicy,
    now_ms: i64,
) -> Result<u64, SqlError> {
    let rows = read(
        sql,
        &format!(
            "SELECT COALESCE(MAX(attempts), 0), COUNT(*), COALESCE(MAX(seq), 0),
                (SELECT COUNT(*) FROM {SPANS} WHERE seq <= ? AND attempts + 1 >= ?)
             FROM {SPANS}"
        ),
        &[
            SqlValue::Integer(through),
            SqlValue::Integer(i64::from(TRACE_EXPORT_ATTEMPTS_MAX)),
        ],
    )?;
    let row = rows
        .first()
        .ok_or_else(|| SqlError::Decode("no row for the span count".into()))?;
    let attempts = u32::try_from(row.int(0)?)
        .unwrap_or(u32::MAX)
        .saturating_add(1);
    let (count, newest, given_up) = (row.int(1)? as u64, row.int(2)?, row.int(3)? as u64);
    let retry_at = now_ms.saturating_add(policy.delay_ms(attempts) as i64);
    write(
        sql,
        &format!("UPDATE {SPANS} SET attempts = attempts + 1, retry_at = ? WHERE seq <= ?"),
        vec![SqlValue::Integer(retry_at), SqlValue::Integer(through)],
    )?;
    write(
        sql,
        &format!("DELETE FROM {SPANS} WHERE attempts >= ? OR seq <= ?"),
        vec![
            SqlValue::Integer(i64::from(TRACE_EXPORT_ATTEMPTS_MAX)),
            SqlValue::Integer(newest - TRACE_PENDING_MAX as i64),
        ],
    )?;
    let kept_past = count
        .saturating_sub(given_up)
        .saturating_sub(TRACE_PENDING_MAX);
    Ok(given_up + kept_past)
}

/// When spans are due for export: [`TRACE_EXPORT_DELAY_MS`] after the
/// oldest was written, so the spans of the turns meanwhile share its
/// request, or the retry of a failed export; none without spans.
pub fn deadline(sql: &dyn Sql, now_ms: i64) -> Result<Option<i64>, SqlError> {
    if !TRACES.exists(sql) {
        return Ok(None);
    }
    let rows = read(
        sql,
        &format!("SELECT at, retry_at FROM {SPANS} ORDER BY seq LIMIT 1"),
        &[],
    )?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let due = match first.opt_int(1)? {
        Some(retry_at) => retry_at,
        None => first.int(0)?.saturating_add(TRACE_EXPORT_DELAY_MS),
    };
    Ok(Some(due.max(now_ms)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Provider;
    use crate::sql::atomically;
    use crate::sql::native::NativeSql;

    fn model() -> ModelSpec {
        ModelSpec {
            provider: Provider::Anthropic,
            model: "claude-x".into(),
        }
    }

    fn usage() -> Usage {
        Usage {
            input_tokens: 12,
            output_tokens: 5,
            cache_read_tokens: Some(3),
            ..Usage::default()
        }
    }

    fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
        span["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == key)
            .map(|a| &a["value"])
    }

    #[test]
    fn a_chat_span_is_the_turn_spans_child_with_the_genai_attributes() {
        let answered = ChatOutcome::Answered {
            usage: Some(usage()),
            finish_reason: Some("tool_use"),
        };
        let span = chat("cmd_1", 0, &model(), 1_000, 1_250, &answered).to_json();
        assert_eq!(span["traceId"], trace_id("cmd_1"));
        assert_eq!(span["traceId"].as_str().unwrap().len(), 32);
        assert_eq!(span["spanId"].as_str().unwrap().len(), 16);
        assert_eq!(span["parentSpanId"], turn_span_id("cmd_1"));
        assert_eq!(span["name"], "chat claude-x");
        assert_eq!(span["kind"], KIND_CLIENT);
        assert_eq!(span["startTimeUnixNano"], "1000000000");
        assert_eq!(span["endTimeUnixNano"], "1250000000");
        assert_eq!(
            attr(&span, "gen_ai.operation.name").unwrap()["stringValue"],
            "chat"
        );
        assert_eq!(
            attr(&span, "gen_ai.provider.name").unwrap()["stringValue"],
            "anthropic"
        );
        assert_eq!(
            attr(&span, "gen_ai.request.model").unwrap()["stringValue"],
            "claude-x"
        );
        assert_eq!(
            attr(&span, "gen_ai.usage.input_tokens").unwrap()["intValue"],
            "12"
        );
        assert_eq!(
            attr(&span, "gen_ai.usage.output_tokens").unwrap()["intValue"],
            "5"
        );
        assert_eq!(
            attr(&span, "gen_ai.usage.cache_read.input_tokens").unwrap()["intValue"],
            "3"
        );
        assert_eq!(
            attr(&span, "gen_ai.response.finish_reasons").unwrap(),
            &json!({ "arrayValue": { "values": [{ "stringValue": "tool_use" }] } })
        );
        assert!(span.get("status").is_none());
        // Another call started then is another span of the trace.
        let again = chat("cmd_1", 1, &model(), 1_000, 1_250, &answered).to_json();
        assert_ne!(again["spanId"], span["spanId"]);
        assert_eq!(again["traceId"], span["traceId"]);
    }

    #[test]
    fn a_failed_call_and_a_failed_tool_carry_error_type_and_status() {
        let failed = ChatOutcome::Failed {
            retryable: true,
            too_long: false,
        };
        let span = chat("cmd_1", 0, &model(), 5, 4, &failed).to_json();
        assert_eq!(
            attr(&span, "error.type").unwrap()["stringValue"],
            "retryable"
        );
        assert_eq!(span["status"]["code"], STATUS_ERROR);
        // A clock that stepped back never ends a span before its start.
        assert_eq!(span["endTimeUnixNano"], span["startTimeUnixNano"]);
        let tool = tool("cmd_1", "call_9", "files_read", 10, 20, true).to_json();
        assert_eq!(tool["name"], "execute_tool files_read");
        assert_eq!(tool["kind"], KIND_INTERNAL);
        assert_eq!(tool["parentSpanId"], turn_span_id("cmd_1"));
        assert_eq!(
            attr(&tool, "gen_ai.tool.name").unwrap()["stringValue"],
            "files_read"
        );
        assert_eq!(
            attr(&tool, "gen_ai.tool.call.id").unwrap()["stringValue"],
            "call_9"
        );
        assert_eq!(
            attr(&tool, "error.type").unwrap()["stringValue"],
            "tool_error"
        );
        // Deterministic: the same run of a call is the same span.
        assert_eq!(
            tool["spanId"],
            super::tool("cmd_1", "call_9", "x", 10, 30, false).to_json()["spanId"]
        );
    }

    #[test]
    fn the_turn_span_is_the_root_with_the_turns_usage_and_outcome() {
        let settlement = Settlement::new("cmd_1", Terminal::Failed, None, Some("boom sk-secret"));
        let span = turn("ses_a", &settlement, 100, 900).to_json();
        assert_eq!(span["spanId"], turn_span_id("cmd_1"));
        assert!(span.get("parentSpanId").is_none());
        assert_eq!(span["name"], "invoke_agent");
        assert_eq!(
            attr(&span, "gen_ai.conversation.id").unwrap()["stringValue"],
            "ses_a"
        );
        assert_eq!(attr(&span, "error.type").unwrap()["stringValue"], "failed");
        // The diagnostic (provider text) is never an attribute.
        assert!(!span.to_string().contains("boom"));
        let done = Settlement::new(
            "cmd_1",
            Terminal::Completed,
            Some((Some("hi"), Some(usage()), 0)),
            None,
        );
        let span = turn("ses_a", &done, 100, 900).to_json();
        assert!(span.get("status").is_none());
        assert_eq!(
            attr(&span, "gen_ai.usage.input_tokens").unwrap()["intValue"],
            "12"
        );
        assert!(!span.to_string().contains("\"hi\""));
    }

    #[test]
    fn bounded_batches_are_exported_once_and_failures_back_off_then_drop() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        assert_eq!(batch(&sql, 0).unwrap(), None);
        assert_eq!(deadline(&sql, 0).unwrap(), None);
        assert!(!TRACES.exists(&sql));
        let body = tool("cmd_1", "c", "t", 0, 1, false).to_json().to_string();
        let total = TRACE_EXPORT_SPANS_MAX + 1;
        atomically(&sql, || stage(&sql, &vec![body.clone(); total], 7)).unwrap();
        // Due a delay after the oldest, or at once with a full batch.
        assert_eq!(deadline(&sql, 7).unwrap(), Some(7 + TRACE_EXPORT_DELAY_MS));
        let first = batch(&sql, 7).unwrap().unwrap();
        assert_eq!(first.spans, TRACE_EXPORT_SPANS_MAX);
        let request: Value = serde_json::from_str(&first.body).unwrap();
        let scope = &request["resourceSpans"][0]["scopeSpans"][0];
        assert_eq!(
            scope["spans"].as_array().unwrap().len(),
            TRACE_EXPORT_SPANS_MAX
        );
        assert_eq!(scope["scope"]["name"], SCOPE);
        // It fails: its spans wait the backoff, the rest behind them.
        let policy = LanePolicy {
            base_ms: 100,
            max_ms: 1_000,
        };
        assert_eq!(
            atomically(&sql, || failed(&sql, first.through, &policy, 10)).unwrap(),
            0
        );
        assert_eq!(batch(&sql, 109).unwrap(), None);
        assert_eq!(deadline(&sql, 50).unwrap(), Some(110));
        let again = batch(&sql, 110).unwrap().unwrap();
        assert_eq!(again.through, first.through);
        atomically(&sql, || exported(&sql, again.through)).unwrap();
        // The one left is not a full batch: it waits its delay.
        assert_eq!(batch(&sql, 110).unwrap(), None);
        let last = batch(&sql, 7 + TRACE_EXPORT_DELAY_MS).unwrap().unwrap();
        assert_eq!(last.spans, 1);
        // Failing past the bound drops it, counted.
        let mut dropped = 0;
        for n in 0..TRACE_EXPORT_ATTEMPTS_MAX {
            let now = 1_000_000 * i64::from(n + 1);
            let Some(b) = batch(&sql, now).unwrap() else {
                break;
            };
            dropped += atomically(&sql, || failed(&sql, b.through, &policy, now)).unwrap();
        }
        assert_eq!(dropped, 1);
        assert_eq!(deadline(&sql, 0).unwrap(), None);
    }

    #[test]
    fn a_batch_is_cut_by_bytes() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let big = json!({ "pad": "x".repeat(TRACE_EXPORT_BYTES_MAX / 2) }).to_string();
        atomically(&sql, || stage(&sql, &[big.clone(), big.clone(), big], 0)).unwrap();
        let due = batch(&sql, TRACE_EXPORT_DELAY_MS).unwrap().unwrap();
        assert_eq!(due.spans, 1);
    }
}
