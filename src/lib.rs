//! Shiitake for Durable Objects: durable Agent conversations.
//!
//! Layers, innermost first (see `ARCHITECTURE.md`):
//! - [`sql`]: the one SQL seam, implemented by the DO's SqlStorage (wasm)
//!   and by SQLite (native);
//! - [`store`]: the versioned schema, the core tables' statements, typed
//!   (each feature module keeps its own tables' statements);
//! - [`session`], [`agent`], [`run`]: the rules (admission, queue, fences,
//!   reads, turns);
//! - [`http`]: the HTTP contract as a pure function;
//! - `host` (wasm only): the Durable Object adapter.
//!
//! Everything but `host` is sans-IO: no JS imports, time and ids passed in.

// The lean build's stubs refuse, naming the feature (Cargo.toml [features]).
#[cfg_attr(not(feature = "acp"), path = "acp/left_out.rs")]
pub mod acp;
pub mod agent;
pub mod attention;
pub mod budget;
pub mod capability;
pub mod computer;
pub mod ctx;
pub mod delivery;
pub mod error;
pub mod extension;
pub mod files;
pub mod fleet;
pub mod grants;
pub mod history;
pub mod http;
pub mod json;
pub mod json_schema;
pub mod limits;
pub mod mail;
#[cfg_attr(not(feature = "mcp"), path = "mcp/left_out.rs")]
pub mod mcp;
// Not in the lean build at all: there `/mcp` is the 404 of any unknown
// route (a 503 naming the feature cost the lean wasm 158 gzip bytes).
#[cfg(feature = "mcp-server")]
pub mod mcp_server;
pub mod meta;
pub mod model;
pub mod model_choice;
pub mod observe;
pub mod outbound;
pub mod redact;
// JSON-RPC (ACP's and MCP's): 55 gzip bytes of the lean wasm when compiled in.
#[cfg(any(feature = "acp", feature = "mcp-server"))]
pub mod rpc;
pub mod run;
pub mod session;
pub mod settlement;
pub mod sql;
pub mod sse;
pub mod store;
pub mod text;
#[cfg_attr(not(feature = "traces"), path = "trace/left_out.rs")]
pub mod trace;
pub mod transcript;
#[cfg_attr(not(feature = "ui"), path = "ui/left_out.rs")]
pub mod ui;
pub mod usage;

#[cfg(target_arch = "wasm32")]
mod host;
