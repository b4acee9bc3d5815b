//! The lean build's MCP (no `mcp` Cargo feature): the hub offers the host's
//! own tools and its Computers' as in every build, and no MCP server
//! connects. A host's non-empty `tools().mcpServers` is refused naming the
//! feature (a configuration error: 503 `host_misconfigured`, like
//! `tools().files`); the host performs nothing (`host/mcp_left_out.rs`).

pub mod hub;

pub use hub::{Hub, OwnTools, ServerConfig, ServersError, Unavailable};

/// Why MCP servers are refused in a build without the `mcp` feature.
pub const UNAVAILABLE: &str = "this wasm was built without the `mcp` Cargo feature (a lean \
    build, SHIITAKE_LEAN=1), which connects the host's MCP servers (tools().mcpServers); build \
    with default features";

/// The host's server list, decoded as in every build: refused unless empty.
pub fn parse_servers(json: &str) -> Result<Vec<ServerConfig>, ServersError> {
    match hub::parse_servers(json)?.is_empty() {
        true => Ok(Vec::new()),
        false => Err(ServersError::Unavailable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ApiError;

    /// The lean build (no `mcp` feature) refuses a host's MCP servers,
    /// naming the feature, as a configuration error (the host answers 503
    /// `host_misconfigured`); no servers, or a malformed list, is decoded
    /// as in every build.
    #[test]
    fn a_lean_build_refuses_mcp_naming_the_feature() {
        let servers = r#"[{"name": "docs", "url": "https://mcp.example.com/mcp"}]"#;
        let e = parse_servers(servers).unwrap_err().to_string();
        assert!(e.contains("`mcp` Cargo feature"), "{e}");
        let e = ApiError::HostMisconfigured(e);
        assert_eq!((e.status(), e.code()), (503, "host_misconfigured"));
        assert!(parse_servers("[]").unwrap().is_empty());
        let e = parse_servers("{}").unwrap_err().to_string();
        assert!(e.contains("expected an array"), "{e}");
    }
}
