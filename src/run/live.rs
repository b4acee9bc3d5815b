//! Live tool events (seed: "Live output counters use the tool event's
//! result.data"): the `tool` frames of a call the host runs. The driver
//! publishes `started` before the host runs the call and `ended` with the
//! recorded outcome; while it runs, the tool's progress reports go through
//! a [`ProgressGate`], which decides which of them are published: at most
//! one per [`TOOL_PROGRESS_INTERVAL_MS`] per call, the newest of those in
//! between when the interval ends, none past [`TOOL_PROGRESS_BYTES_MAX`]
//! (refused to the tool) and none after the call ended. Memory only: a
//! report is never stored.

use super::tools::OpenCall;
use crate::limits::{TOOL_PROGRESS_BYTES_MAX, TOOL_PROGRESS_INTERVAL_MS};
use crate::observe::{Frame, ToolEventResult, ToolPhase};
use serde_json::value::RawValue;

/// The `tool` frame of `call` (of the turn headed by `command_id`) in
/// `phase`, without a result or outcome.
pub fn tool_frame(command_id: &str, call: &OpenCall, phase: ToolPhase) -> Frame {
    Frame::Tool {
        command_id: command_id.to_owned(),
        tool_call_id: call.id.clone(),
        name: call.name.clone(),
        phase,
        result: None,
        is_error: None,
    }
}

/// Which progress reports of one running call are published.
#[derive(Debug, Clone)]
pub struct ProgressGate {
    /// The call's `progress` frame, its result filled per report.
    frame: Frame,
    /// When the last report was published.
    last_at: Option<i64>,
    /// The newest report not yet published.
    held: Option<Box<RawValue>>,
    ended: bool,
}

/// Why a progress report is refused (the tool's `report` is answered so).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The data's length in bytes.
    #[error("progress: the data is {0} bytes of JSON; at most {TOOL_PROGRESS_BYTES_MAX}")]
    TooLarge(usize),
    /// serde's message.
    #[error("progress: the data is not JSON: {0}")]
    NotJson(String),
}

impl ProgressGate {
    pub fn new(command_id: &str, call: &OpenCall) -> ProgressGate {
        ProgressGate {
            frame: tool_frame(command_id, call, ToolPhase::Progress),
            last_at: None,
            held: None,
            ended: false,
        }
    }

    /// A report of the tool (`data`: JSON text). `Err`: refused, saying
    /// why (not JSON, too large); `Some`: publish it now; `None`: held
    /// (publish at [`Self::flush_at`]) or ignored (the call ended).
    pub fn report(&mut self, now_ms: i64, data: &str) -> Result<Option<Frame>, ReportError> {
        if data.len() > TOOL_PROGRESS_BYTES_MAX {
            return Err(ReportError::TooLarge(data.len()));
        }
        let data = RawValue::from_string(data.to_owned())
            .map_err(|e| ReportError::NotJson(e.to_string()))?;
        if self.ended {
            return Ok(None);
        }
        self.held = Some(data);
        Ok(self.due(now_ms))
    }

    /// When the held report is due, if one is held.
    pub fn flush_at(&self) -> Option<i64> {
        self.held.as_ref()?;
        Some(
            self.last_at
                .map_or(i64::MIN, |at| at + TOOL_PROGRESS_INTERVAL_MS),
        )
    }

    /// The held report, when its interval has passed.
    pub fn due(&mut self, now_ms: i64) -> Option<Frame> {
        if self.flush_at()? > now_ms {
            return None;
        }
        self.last_at = Some(now_ms);
        self.take()
    }

    /// The call ended: its held report, to publish before `ended`; any
    /// later report is ignored.
    pub fn end(&mut self) -> Option<Frame> {
        self.ended = true;
        self.take()
    }

    fn take(&mut self) -> Option<Frame> {
        let data = self.held.take()?;
        let mut frame = self.frame.clone();
        if let Frame::Tool { result, .. } = &mut frame {
            *result = Some(ToolEventResult { data });
        }
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> ProgressGate {
        let call = OpenCall {
            id: "call_1".into(),
            name: "count".into(),
            input: Default::default(),
            refused: None,
            started: false,
        };
        ProgressGate::new("cmd_1", &call)
    }

    fn data(frame: Option<Frame>) -> Option<String> {
        match frame? {
            Frame::Tool {
                phase: ToolPhase::Progress,
                result: Some(result),
                ..
            } => Some(result.data.get().to_owned()),
            other => panic!("not a progress frame: {other:?}"),
        }
    }

    #[test]
    fn reports_are_published_at_most_once_per_interval_the_newest_at_its_end() {
        let mut g = gate();
        assert_eq!(
            data(g.report(1_000, r#"{"n":1}"#).unwrap()).unwrap(),
            r#"{"n":1}"#
        );
        assert_eq!(g.flush_at(), None, "nothing held");
        // Within the interval: held, the newest replacing the older.
        assert!(g.report(1_010, r#"{"n":2}"#).unwrap().is_none());
        assert!(g.report(1_050, r#"{"n":3}"#).unwrap().is_none());
        assert_eq!(g.flush_at(), Some(1_000 + TOOL_PROGRESS_INTERVAL_MS));
        assert!(g.due(1_099).is_none(), "not yet due");
        assert_eq!(data(g.due(1_100)).unwrap(), r#"{"n":3}"#);
        assert_eq!(g.flush_at(), None);
        // The next interval counts from that publication.
        assert!(g.report(1_150, r#"{"n":4}"#).unwrap().is_none());
        assert_eq!(
            data(g.report(1_200, r#"{"n":5}"#).unwrap()).unwrap(),
            r#"{"n":5}"#
        );
        // The end publishes what is held, then nothing more.
        assert!(g.report(1_250, r#"{"n":6}"#).unwrap().is_none());
        assert_eq!(data(g.end()).unwrap(), r#"{"n":6}"#);
        assert!(g.report(2_000, r#"{"n":7}"#).unwrap().is_none());
        assert!(g.end().is_none());
        assert_eq!(g.flush_at(), None);
    }

    #[test]
    fn a_report_past_the_byte_bound_or_not_json_is_refused() {
        let mut g = gate();
        let big = format!(r#""{}""#, "x".repeat(TOOL_PROGRESS_BYTES_MAX));
        let e = g.report(1, &big).unwrap_err().to_string();
        assert!(e.contains(&TOOL_PROGRESS_BYTES_MAX.to_string()), "{e}");
        assert!(g
            .report(1, "{")
            .unwrap_err()
            .to_string()
            .contains("not JSON"));
        // Refusals hold nothing; the next report is published at once.
        assert!(g.report(2, "1").unwrap().is_some());
    }

    #[test]
    fn the_frame_names_the_call_and_carries_the_report_as_result_data() {
        let mut g = gate();
        let frame = g.report(1, r#"{"lines":3}"#).unwrap().unwrap();
        assert_eq!(
            serde_json::to_value(&frame).unwrap(),
            serde_json::json!({"type": "tool", "commandId": "cmd_1", "toolCallId": "call_1",
                "name": "count", "phase": "progress", "result": {"data": {"lines": 3}}})
        );
    }
}
