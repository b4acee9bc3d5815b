//! The lean build's traces (no `traces` Cargo feature): a configured
//! `telemetry()` is refused, naming the feature (logged by the caller;
//! turns run untraced), and nothing is timed, staged or sent.

use super::Inner;
use crate::delivery::LanePolicy;
use crate::model::ModelSpec;
use crate::redact::Secrets;
use crate::run::driver::Input;
use crate::run::tools::OpenCall;
use crate::store::CommandRow;

/// Never made in a lean build.
pub enum HostTelemetry {}

impl HostTelemetry {
    pub fn new(spec: Option<String>, _secrets: &mut Secrets) -> Result<Option<Self>, String> {
        match spec {
            None => Ok(None),
            Some(_) => Err(crate::trace::UNAVAILABLE.to_owned()),
        }
    }
}

impl Inner {
    pub(super) fn traced(&self) -> bool {
        // Never `Ok(Some(_))`: `HostTelemetry` has no value here.
        matches!(self.telemetry, Ok(Some(_)))
    }

    pub(super) fn chat_span(&self, _: &str, _: &ModelSpec, _: i64, _: &Input) -> Option<String> {
        None
    }

    pub(super) fn tool_span(&self, _: &str, _: &OpenCall, _: i64, _: &Input) -> Option<String> {
        None
    }

    pub(super) fn stage_turn_span(
        &self,
        _: crate::store::Store<'_>,
        _: &CommandRow,
        _: &str,
        _: i64,
    ) -> Result<(), crate::sql::SqlError> {
        Ok(())
    }

    pub(super) fn trace_deadline(&self, _: i64) -> Option<i64> {
        None
    }

    pub(super) async fn export_traces(&self, _: &LanePolicy) -> bool {
        false
    }
}
