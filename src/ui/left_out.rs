//! The lean build's browser bridge (no `ui` Cargo feature): a host's
//! `tools().ui` fails to decode, naming the feature (a configuration error:
//! 503 `host_misconfigured`, like `tools().files`), so no run can borrow
//! the module; the bridge's routes answer the same 503
//! (`host/ui_left_out.rs`).

use crate::capability::Module;
use crate::error::ApiError;
use serde::{de, Deserialize, Deserializer};
use std::convert::Infallible;

/// The module a run would borrow.
pub const MODULE_ID: &str = crate::capability::backend::own::UI;

/// Why the browser bridge is refused in a build without the `ui` feature.
pub const UNAVAILABLE: &str = "this wasm was built without the `ui` Cargo feature (a lean \
    build, SHIITAKE_LEAN=1), which offers the browser bridge (tools().ui, the \
    /browser/sessions/ routes); build with default features";

/// The answer to every route of the bridge.
pub fn refused() -> ApiError {
    ApiError::HostMisconfigured(UNAVAILABLE.to_owned())
}

/// The host's `tools().ui`: never built, its decoding is refused.
pub enum Config {}

impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(de::Error::custom(UNAVAILABLE))
    }
}

impl Config {
    pub fn check(&self) -> Result<(), Infallible> {
        match *self {}
    }

    pub fn module(&self) -> Result<Module, Infallible> {
        match *self {}
    }
}

/// The bridge's routes, every one refused.
pub struct Route;

impl Route {
    /// A path under the bridge's prefix, and the rest of it.
    pub fn parse(path: &str) -> Option<(&str, Route)> {
        Some((path.strip_prefix("/browser/sessions/")?, Route))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The lean build (no `ui` feature) refuses the browser bridge, naming
    /// the feature: a host's `tools().ui` (absent or null is no bridge, as
    /// in every build) and the bridge's routes (a 503).
    #[test]
    fn a_lean_build_refuses_the_browser_bridge_naming_the_feature() {
        let config = serde_json::from_value::<Option<Config>>(json!({ "id": "app" }));
        let e = config.err().expect("tools().ui is refused").to_string();
        assert!(e.contains("`ui` Cargo feature"), "{e}");
        assert!(serde_json::from_value::<Option<Config>>(json!(null))
            .unwrap()
            .is_none());
        assert!(Route::parse("/browser/sessions/s1/browser/events").is_some());
        assert!(Route::parse("/sessions/s1").is_none());
        let e = refused();
        assert_eq!((e.status(), e.code()), (503, "host_misconfigured"));
        assert!(e.to_string().contains("`ui` Cargo feature"), "{e}");
    }
}
