//! The lean build's traces (no `traces` Cargo feature): nothing is timed,
//! staged or exported, and a configured `telemetry()` is refused, naming the
//! feature (`host/traces_left_out.rs`). Stores holding spans still open.

use crate::sql::{Sql, SqlError};

/// Why a configured `telemetry()` is refused in a build without `traces`.
pub const UNAVAILABLE: &str = "telemetry(): this wasm was built without the `traces` Cargo \
    feature (a lean build, SHIITAKE_LEAN=1), which exports OpenTelemetry traces; build with \
    default features";

/// Stages nothing: a lean host times no span.
pub fn stage(_sql: &dyn Sql, bodies: &[String], _now_ms: i64) -> Result<(), SqlError> {
    debug_assert!(bodies.is_empty(), "a lean build times no span");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lean build (no `traces` feature) refuses `telemetry()` naming
    /// the feature, and stages nothing.
    #[test]
    fn a_lean_build_refuses_telemetry_naming_the_feature() {
        assert!(UNAVAILABLE.contains("`traces` Cargo feature"));
        let sql = crate::sql::native::NativeSql::open_in_memory();
        stage(&sql, &[], 1).unwrap();
    }
}
