//! The lean build's MCP server (no `mcp-server` Cargo feature): `/mcp`
//! answers a 503 `host_misconfigured` naming the feature
//! (`host/mcp_server_left_out.rs`).

use crate::error::ApiError;

/// Why `/mcp` is refused in a build without the `mcp-server` feature.
pub const UNAVAILABLE: &str = "this wasm was built without the `mcp-server` Cargo feature (a \
    lean build, SHIITAKE_LEAN=1), which serves the Agent as an MCP server (POST /mcp); build \
    with default features";

/// The answer to every `/mcp` request.
pub fn refused() -> ApiError {
    ApiError::HostMisconfigured(UNAVAILABLE.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lean build answers `/mcp` with a 503 naming the feature.
    #[test]
    fn a_lean_build_refuses_mcp_naming_the_feature() {
        let e = refused();
        assert_eq!((e.status(), e.code()), (503, "host_misconfigured"));
        assert!(e.to_string().contains("`mcp-server` Cargo feature"), "{e}");
    }
}
