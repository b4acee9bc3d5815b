//! Observation: the frames a watcher receives after its snapshot. Frames are
//! built by the core and published by the host after the transition that
//! caused them commits (persist, then send); streamed tokens exist only as
//! frames, never as rows.

use crate::settlement::Settlement;
use serde::Serialize;
use serde_json::value::RawValue;

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Frame {
    #[serde(rename_all = "camelCase")]
    Admitted {
        command_id: String,
        request_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Started {
        command_id: String,
        attempt: u32,
    },
    #[serde(rename_all = "camelCase")]
    Delta {
        command_id: String,
        text: String,
    },
    Message {
        message: Box<RawValue>,
    },
    /// The Session's selected branch changed (a `select`, or a retry or a
    /// prompt with `after` started its turn on a new branch): it runs
    /// through `entryId` now (`None`: from the Session's start). The
    /// watcher's messages are of another branch: read the Session again.
    #[serde(rename_all = "camelCase")]
    Branch {
        entry_id: Option<String>,
    },
    Settled {
        settlement: Settlement,
    },
    /// An extension's projection, published after the commit that changed
    /// it: its Session projection on that Session's watch, its Agent
    /// projection (`scope: "agent"`) on every watch.
    #[serde(rename_all = "camelCase")]
    Extension {
        extension_id: String,
        scope: &'static str,
        value: serde_json::Value,
        /// The producer history of a Session projection, when the
        /// extension keeps one (`.projection({ history: true })`).
        #[serde(skip_serializing_if = "Option::is_none")]
        history: Option<serde_json::Value>,
    },
    /// An attention item an extension set (`item`) or cleared (`item`
    /// null), published on the Session's watch after the commit; `id` is
    /// qualified by `extensionId`.
    #[serde(rename_all = "camelCase")]
    Attention {
        session_id: String,
        extension_id: String,
        id: String,
        item: Option<crate::attention::Item>,
    },
    /// Something the run could not offer, said once at its start (e.g.
    /// `execute` without a `LOADER` binding).
    #[serde(rename_all = "camelCase")]
    Diagnostic {
        command_id: String,
        diagnostic: String,
    },
    /// A tool call the host runs: `started`, then `progress` reports (the
    /// tool's live counters in `result.data`, at most one per
    /// `TOOL_PROGRESS_INTERVAL_MS`), then `ended` with `isError` once its
    /// outcome is recorded (just before its `tool` message). Memory only,
    /// like `delta`: the `tool` message is the durable record.
    #[serde(rename_all = "camelCase")]
    Tool {
        command_id: String,
        tool_call_id: String,
        name: String,
        phase: ToolPhase,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<ToolEventResult>,
        #[serde(skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolPhase {
    Started,
    Progress,
    Ended,
}

/// A `progress` frame's result: the tool's report, as it gave it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolEventResult {
    pub data: Box<RawValue>,
}

/// A failed model call, published as a `runtime-error` event.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeError {
    pub command_id: String,
    pub diagnostic: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<i64>,
}

/// One publication to a Session's watchers: its SSE event name and data.
#[derive(Debug, Clone)]
pub enum Event {
    Frame(Frame),
    RuntimeError(RuntimeError),
}

impl Event {
    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Frame(_) => "frame",
            Event::RuntimeError(_) => "runtime-error",
        }
    }
}
