//! The lean build's ACP (no `acp` Cargo feature): `POST /acp` answers a 503
//! `host_misconfigured` naming the feature (`host/acp_left_out.rs`).

use crate::error::ApiError;

/// Why `POST /acp` is refused in a build without the `acp` feature.
pub const UNAVAILABLE: &str = "this wasm was built without the `acp` Cargo feature (a lean \
    build, SHIITAKE_LEAN=1), which serves the Agent Client Protocol (POST /acp); build with \
    default features";

/// The answer to every `POST /acp`.
pub fn refused() -> ApiError {
    ApiError::HostMisconfigured(UNAVAILABLE.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lean build (no `acp` feature) answers `POST /acp` with a 503
    /// naming the feature.
    #[test]
    fn a_lean_build_refuses_acp_naming_the_feature() {
        let e = refused();
        assert_eq!((e.status(), e.code()), (503, "host_misconfigured"));
        assert!(e.to_string().contains("`acp` Cargo feature"), "{e}");
    }
}
