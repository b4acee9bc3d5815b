//! What every transition gets from outside: the store, the current time,
//! an id source and the host's metadata rules. The core reads no clock and
//! no randomness of its own.

use crate::meta::MetaPolicy;
use crate::store::Store;

/// Source of fresh identifiers. The wasm host draws them from the platform's
/// CSPRNG; tests use a deterministic counter.
pub trait IdSource {
    /// A new unique id starting with `prefix` (for example `cmd_`).
    fn next_id(&mut self, prefix: &str) -> String;
}

/// Everything one operation needs from outside.
pub struct Ctx<'a> {
    pub store: Store<'a>,
    pub now_ms: i64,
    pub ids: &'a mut dyn IdSource,
    /// The host's metadata schema and identity path.
    pub meta: &'a MetaPolicy,
    /// Spans (OTLP/JSON, `trace.rs`) the host timed for the outcome it
    /// feeds a turn: the turn's transition writes them with that outcome
    /// (`run::on_current_turn`), or, stale, drops them. Empty unless the
    /// host configures `telemetry()`.
    pub spans: Vec<String>,
    /// The estimate the budget gate charged the model call whose outcome
    /// the driver feeds (`budget::gate`), handed to that outcome's write
    /// (`run::on_model_call`), which replaces it with the reported tokens.
    pub charged: Option<crate::budget::Charge>,
}

/// A deterministic [`IdSource`] for tests and tools.
#[derive(Debug, Default)]
pub struct CounterIds {
    next: u64,
}

impl IdSource for CounterIds {
    fn next_id(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{:08}", self.next)
    }
}
