//! Which tools an Agent offers (seed `knapsack.md`, `mcpServers`): the
//! host's own modules plus one module `mcp.<name>` per MCP server that
//! connected. Pure policy: the host performs each round the hub starts
//! (connecting servers, listing connected ones again) and hands back its
//! outcomes.
//!
//! - The servers connect at an instance's first turn, in one round that
//!   concurrent turns share ([`Hub::start_round`] answers `None` while one
//!   runs).
//! - A server that fails (or lists no usable tool, or whose module cannot
//!   join the catalog) is dropped and reported, while the others stay; it
//!   is tried again at the first turn `retry_ms` after it failed.
//! - A connected server is listed again in a round at the first turn after
//!   its connection saw its tools change ([`Hub::saw_version`]: a
//!   `notifications/tools/list_changed` on a response, a new session), at
//!   most once per `MCP_RELIST_GAP_MS`; and, when it declared
//!   `tools.listChanged`, at the first turn `retry_ms` after its last
//!   listing (this client holds no GET stream, where servers send most such
//!   notifications). The new listing takes the old one's place; a failed
//!   listing drops the server as above.
//! - One model request carries at most `TOOLS_PER_REQUEST_MAX` tools, each
//!   named in at most `TOOL_NAME_BYTES_MAX` bytes
//!   ([`door::direct_refusal`]). The host's own direct operations come
//!   first, in order ([`OwnTools::new`]); then each direct server's tools in
//!   listing order, beside the direct tools offered (first come, first
//!   served: a server listed again keeps its place, and the room the others
//!   leave). A tool that cannot be one (a name too long, `execute` or
//!   taken, no room left) is no direct tool but stays in its module
//!   (`execute` reaches it), and is reported by name
//!   ([`Unavailable::tool`]), as are the tools a listing dropped: at most
//!   `TOOL_REPORTS_MAX` reports per server. The modules the host asked for
//!   direct whole (`ui`, `agents`, a Computer, an extension's commands:
//!   [`door::module_tools`]) count with them but are never cut: the own
//!   ones refuse the configuration ([`OwnTools::new`]), a Computer is
//!   refused ([`Hub::set_computers`]), an extension's commands are left out
//!   of the run ([`Hub::toolset_with`]). No configuration or server makes
//!   a model request the provider refuses.

use crate::capability::door::{self, Toolset, EXECUTE};
use crate::capability::{CapabilityError, Catalog, Module, ModuleSpec};
use crate::limits::{MCP_RELIST_GAP_MS, MCP_SERVERS_MAX, TOOL_REPORTS_MAX};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;

/// One configured server, as the host gave it. Header values are
/// credentials: kept in memory only, never in an error or `Debug` output.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub name: String,
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Every tool of the server offered as a direct tool of its own (named
    /// by its guest name), beside `execute` or without it (Node, a Worker
    /// without `LOADER`). Still `mcp.<name>` to grants.
    #[serde(default)]
    pub direct: bool,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("name", &self.name)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("direct", &self.direct)
            .finish_non_exhaustive()
    }
}

/// The server as it introduced itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
}

/// A finished tool listing.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTools {
    pub server: ServerInfo,
    /// The connection's [`super::McpConnection::tools_version`] when the listing
    /// began.
    pub tools_version: u64,
    /// The server declared `tools.listChanged`: its tools may change while
    /// connected.
    pub list_changed: bool,
    /// Module `mcp.<name>`, one operation per accepted tool, in the order
    /// listed; `Module::from_spec` accepts it.
    pub module: ModuleSpec,
    /// Tools left out, with the reason (a warning for the host to show).
    pub dropped: Vec<DroppedTool>,
}

/// A listed tool left out of the module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedTool {
    /// The tool's name as listed (at most 64 bytes of it), or
    /// `tools[<index>]` when it had none.
    pub name: String,
    pub reason: String,
}

/// Why the host's server list is refused. It names the entry and the
/// field, never a value (header values are credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServersError {
    #[error("mcpServers: expected an array of {{name, url, headers?, direct?}}")]
    NotAnArray,
    /// How many servers.
    #[error("mcpServers: {0} servers; at most {MCP_SERVERS_MAX}")]
    TooMany(usize),
    /// The entry's index.
    #[error(
        "mcpServers[{0}]: expected {{name: string, url: string, headers?: \
         {{[name]: string}}, direct?: boolean}} and nothing else"
    )]
    Entry(usize),
    /// A build without the `mcp` feature connects no server.
    #[cfg(not(feature = "mcp"))]
    #[error("mcpServers: {}", super::UNAVAILABLE)]
    Unavailable,
}

/// Decodes the host's server list.
pub fn parse_servers(json: &str) -> Result<Vec<ServerConfig>, ServersError> {
    let entries: Vec<Value> = serde_json::from_str(json).map_err(|_| ServersError::NotAnArray)?;
    if entries.len() > MCP_SERVERS_MAX {
        return Err(ServersError::TooMany(entries.len()));
    }
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| serde_json::from_value(entry).map_err(|_| ServersError::Entry(i)))
        .collect()
}

/// Why the host's own tools cannot be offered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolsError {
    /// The modules cannot form one catalog and toolset.
    #[error(transparent)]
    Capability(#[from] CapabilityError),
    /// A direct path naming no operation.
    #[error("direct tool `{0}`: no such operation (module.operation)")]
    NoSuchDirect(String),
}

/// Something configured that is not offered, and why (credential-free): an
/// MCP server, one tool of a server, or one of the host's direct
/// operations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unavailable {
    /// The MCP server's name, or the id of the host's module.
    pub name: String,
    /// The one tool left out (as the source names it), the rest offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    pub reason: String,
    /// Of the host's own module `name`, not of a server.
    #[serde(skip)]
    own: bool,
}

impl Unavailable {
    /// The whole server `name`, not offered.
    pub fn server(name: &str, reason: String) -> Unavailable {
        Unavailable {
            name: name.to_owned(),
            tool: None,
            reason,
            own: false,
        }
    }
}

/// The log line and the turn's diagnostic.
impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match (&self.tool, self.own) {
            (None, _) => write!(f, "MCP server `{name}` is unavailable: {}", self.reason),
            (Some(tool), false) => {
                write!(f, "MCP server `{name}`: tool `{tool}` is {}", self.reason)
            }
            (Some(tool), true) => write!(f, "operation `{name}.{tool}` is {}", self.reason),
        }
    }
}

/// Why a tool is no direct tool; `execute` reaches it when offered.
fn not_direct(why: String, execute: bool) -> String {
    let reach = if execute {
        " (`execute` reaches it)"
    } else {
        ""
    };
    format!("not a direct tool{reach}: {why}")
}

/// At most `TOOL_REPORTS_MAX` reports; the last counts the rest.
fn capped(mut reports: Vec<Unavailable>) -> Vec<Unavailable> {
    let more = reports.len().saturating_sub(TOOL_REPORTS_MAX);
    reports.truncate(TOOL_REPORTS_MAX);
    if let Some(last) = reports.last_mut().filter(|_| more > 0) {
        last.reason
            .push_str(&format!("; {more} more tools are left out too"));
    }
    reports
}

/// The guest name of a direct path (`<module id>.<guest name>`).
fn guest_of(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

/// The host's own tools, which every toolset holds.
#[derive(Debug, Clone)]
pub struct OwnTools {
    pub modules: Vec<Module>,
    /// Operations offered as their own tools, as `<module id>.<guest name>`.
    pub direct: Vec<String>,
    /// Whether guest code can run here, or why not.
    pub execute: Result<(), String>,
    /// The direct operations left out, reported at each instance's start.
    pub dropped: Vec<Unavailable>,
}

impl OwnTools {
    /// The host's modules, with the operations at `direct` (paths, in
    /// order) as direct tools as far as one model request carries them:
    /// each other one is left out ([`door::direct_refusal`]; `execute`
    /// still reaches it) and reported. Then every operation of the modules
    /// offered direct whole ([`Module::direct`]: `ui`, `agents`), which the
    /// host asked for by name: the set is refused naming the first tool one
    /// model request cannot carry ([`door::module_tools`]). A path naming
    /// no operation is refused.
    pub fn new(
        modules: Vec<Module>,
        direct: &[String],
        execute: Result<(), String>,
    ) -> Result<OwnTools, ToolsError> {
        let catalog = Catalog::new(modules.clone())?;
        let door = (execute.is_ok() && !modules.is_empty()).then_some(EXECUTE);
        let mut names: Vec<&str> = door.into_iter().collect();
        let mut kept = Vec::new();
        let mut dropped = Vec::new();
        for path in direct {
            let Some((m, o)) = door::find_direct(&catalog, path) else {
                return Err(ToolsError::NoSuchDirect(path.clone()));
            };
            let module = &catalog.modules()[m];
            let op = &module.operations[o];
            match door::direct_refusal(&op.guest_name, names.iter().copied()) {
                Some(why) => dropped.push(Unavailable {
                    name: module.id.clone(),
                    tool: Some(op.name.clone()),
                    reason: not_direct(why, execute.is_ok()),
                    own: true,
                }),
                None => {
                    names.push(&op.guest_name);
                    kept.push(format!("{}.{}", module.id, op.guest_name));
                }
            }
        }
        door::module_tools(&modules, names)?;
        Ok(OwnTools {
            modules,
            direct: kept,
            execute,
            dropped: capped(dropped),
        })
    }

    /// The toolset of these tools alone (no MCP server or Computer yet).
    pub fn toolset(&self) -> Result<Toolset, CapabilityError> {
        Toolset::new(
            Catalog::new(self.modules.clone())?,
            &self.direct,
            self.execute.clone(),
        )
    }
}

/// What one round performs.
#[derive(Debug, Default, PartialEq)]
pub struct Round {
    /// Servers to connect.
    pub connect: Vec<ServerConfig>,
    /// Connected servers to list again, on their connection.
    pub relist: Vec<ServerConfig>,
}

/// A server not connected.
#[derive(Debug)]
struct Waiting {
    config: ServerConfig,
    /// When it may be tried (ms since epoch).
    due_at: i64,
    /// Why its last try failed.
    failure: Option<Unavailable>,
}

/// A server whose module joined.
#[derive(Debug)]
struct Connected {
    config: ServerConfig,
    module: Module,
    /// Its tools offered as direct tools, as paths.
    direct: Vec<String>,
    /// Its tools left out.
    left_out: Vec<Unavailable>,
    /// When it was listed, at which tools version of its connection; the
    /// latest version seen.
    listed_at: i64,
    listed: u64,
    seen: u64,
    /// It declared `tools.listChanged`.
    list_changed: bool,
}

impl Connected {
    fn relist_due(&self, now_ms: i64, retry_ms: i64) -> bool {
        let after = |ms: i64| now_ms >= self.listed_at.saturating_add(ms);
        (self.seen > self.listed && after(MCP_RELIST_GAP_MS))
            || (self.list_changed && after(retry_ms))
    }
}

/// The tools offered, and the MCP servers' connection state.
#[derive(Debug)]
pub struct Hub {
    own: Rc<OwnTools>,
    retry_ms: u64,
    waiting: Vec<Waiting>,
    connecting: bool,
    /// In the order they first joined.
    connected: Vec<Connected>,
    /// The described Computers' modules (commands and files), and the
    /// digest of the list they were described from.
    computers: Vec<Module>,
    computers_digest: Option<u64>,
    /// When the list is described again because a Computer was dropped.
    computers_retry_at: Option<i64>,
    toolset: Rc<Toolset>,
}

impl Hub {
    /// A hub offering `own` until the first round connects `servers`.
    pub fn new(
        own: OwnTools,
        servers: Vec<ServerConfig>,
        retry_ms: u64,
    ) -> Result<Hub, CapabilityError> {
        let toolset = own.toolset()?;
        Ok(Hub::shared(
            Rc::new(own),
            Rc::new(toolset),
            servers,
            retry_ms,
        ))
    }

    /// A hub over tools decoded once and shared (every Agent instance of
    /// one Worker class offers the same own tools): `toolset` is
    /// [`OwnTools::toolset`] of `own`.
    pub fn shared(
        own: Rc<OwnTools>,
        toolset: Rc<Toolset>,
        servers: Vec<ServerConfig>,
        retry_ms: u64,
    ) -> Hub {
        Hub {
            own,
            retry_ms,
            waiting: servers
                .into_iter()
                .map(|config| Waiting {
                    config,
                    due_at: i64::MIN,
                    failure: None,
                })
                .collect(),
            connecting: false,
            connected: Vec::new(),
            computers: Vec::new(),
            computers_digest: None,
            computers_retry_at: None,
            toolset,
        }
    }

    /// The tools offered now.
    pub fn toolset(&self) -> Rc<Toolset> {
        Rc::clone(&self.toolset)
    }

    /// The tools offered now plus `extra` modules (one run's extension
    /// tools), each joining as far as the catalog and one model request
    /// take it: the others are left out, each with why (by module id).
    pub fn toolset_with(&self, extra: Vec<Module>) -> (Rc<Toolset>, Vec<(String, String)>) {
        let mut toolset = self.toolset();
        let mut modules = self.modules();
        let mut refused = Vec::new();
        for module in extra {
            let id = module.id.clone();
            modules.push(module);
            match Catalog::new(modules.clone())
                .and_then(|c| Toolset::new(c, &self.direct(), self.own.execute.clone()))
            {
                Ok(with) => toolset = Rc::new(with),
                Err(e) => {
                    modules.pop();
                    refused.push((id, e.0));
                }
            }
        }
        (toolset, refused)
    }

    /// What is configured and not offered now: the host's direct
    /// operations left out, the servers that failed, the tools of the
    /// connected servers left out.
    pub fn unavailable(&self) -> Vec<Unavailable> {
        let failed = self.waiting.iter().filter_map(|w| w.failure.as_ref());
        let left_out = self.connected.iter().flat_map(|c| &c.left_out);
        self.own
            .dropped
            .iter()
            .chain(failed)
            .chain(left_out)
            .cloned()
            .collect()
    }

    /// Whether a round is being performed.
    pub fn connecting(&self) -> bool {
        self.connecting
    }

    /// Whether operations of module `module_id` go to an MCP server.
    pub fn is_server(&self, module_id: &str) -> bool {
        self.connected.iter().any(|c| c.module.id == module_id)
    }

    /// The connection of server module `module_id` is at tools `version`
    /// ([`super::McpConnection::tools_version`]): past its listing's, the
    /// server is listed again.
    pub fn saw_version(&mut self, module_id: &str, version: u64) {
        if let Some(c) = self.connected.iter_mut().find(|c| c.module.id == module_id) {
            c.seen = c.seen.max(version);
        }
    }

    /// The round to perform now, which concurrent turns share: the servers
    /// due to connect and the connected ones due to be listed again.
    /// `None` while a round runs, or when nothing is due.
    pub fn start_round(&mut self, now_ms: i64) -> Option<Round> {
        if self.connecting {
            return None;
        }
        let retry_ms = i64::try_from(self.retry_ms).unwrap_or(i64::MAX);
        let relist: Vec<ServerConfig> = self
            .connected
            .iter()
            .filter(|c| c.relist_due(now_ms, retry_ms))
            .map(|c| c.config.clone())
            .collect();
        let (due, later): (Vec<Waiting>, Vec<Waiting>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| now_ms >= w.due_at);
        self.waiting = later;
        if due.is_empty() && relist.is_empty() {
            return None;
        }
        self.connecting = true;
        Some(Round {
            connect: due.into_iter().map(|w| w.config).collect(),
            relist,
        })
    }

    /// A round's outcomes, one per server it connected or listed: the
    /// tools listed, or why the server failed. A listing takes the place of
    /// the server's last one. Answers what to report now: the servers that
    /// failed, and the tools left out that the server's last listing did
    /// not leave out.
    pub fn end_round(
        &mut self,
        now_ms: i64,
        outcomes: Vec<(ServerConfig, Result<McpTools, String>)>,
    ) -> Vec<Unavailable> {
        self.connecting = false;
        let mut reports = Vec::new();
        for (config, outcome) in outcomes {
            let at = self
                .connected
                .iter()
                .position(|c| c.config.name == config.name);
            let before = at.map(|i| self.connected.remove(i));
            match outcome.and_then(|tools| self.join(tools, &config, now_ms)) {
                Ok(joined) => {
                    let known = before.map(|b| b.left_out).unwrap_or_default();
                    reports.extend(
                        joined
                            .left_out
                            .iter()
                            .filter(|r| !known.contains(r))
                            .cloned(),
                    );
                    self.connected
                        .insert(at.unwrap_or(self.connected.len()), joined);
                }
                Err(reason) => {
                    let failure = Unavailable::server(&config.name, reason);
                    reports.push(failure.clone());
                    self.waiting.push(Waiting {
                        config,
                        due_at: now_ms
                            .saturating_add(i64::try_from(self.retry_ms).unwrap_or(i64::MAX)),
                        failure: Some(failure),
                    });
                }
            }
        }
        self.rebuild();
        reports
    }

    /// Whether the Computer list with `digest` is to be described now: it
    /// changed since the last description, or a Computer was dropped then
    /// and the retry interval (the MCP servers') has passed.
    pub fn computers_due(&self, digest: u64, now_ms: i64) -> bool {
        self.computers_digest != Some(digest)
            || self.computers_retry_at.is_some_and(|at| now_ms >= at)
    }

    /// Replaces the Computers' modules with those of a new description:
    /// each Computer's modules (commands, then files) join together or not
    /// at all. `dropped`: the description dropped a Computer, so the list is
    /// described again after the retry interval. Answers the Computers (by
    /// module id of their commands) that could not join, and why.
    pub fn set_computers(
        &mut self,
        digest: u64,
        computers: Vec<Vec<Module>>,
        dropped: bool,
        now_ms: i64,
    ) -> Vec<(String, String)> {
        self.computers.clear();
        let mut refused = Vec::new();
        for modules in computers {
            let mut with = self.modules();
            with.extend(modules.iter().cloned());
            // A Computer offered direct is refused whole when one model
            // request cannot carry its tools beside those offered.
            match Catalog::new(with)
                .and_then(|c| Toolset::new(c, &self.direct(), self.own.execute.clone()))
            {
                Ok(_) => self.computers.extend(modules),
                Err(e) => refused.push((
                    modules.first().map(|m| m.id.clone()).unwrap_or_default(),
                    e.0,
                )),
            }
        }
        self.computers_digest = Some(digest);
        self.computers_retry_at = (dropped || !refused.is_empty())
            .then(|| now_ms.saturating_add(i64::try_from(self.retry_ms).unwrap_or(i64::MAX)));
        self.rebuild();
        refused
    }

    /// Whether operations of module `module_id` go to a Computer's commands.
    pub fn is_computer(&self, module_id: &str) -> bool {
        self.computers.iter().any(|m| m.id == module_id)
    }

    /// Every module offered: the host's own, the servers', the Computers'.
    fn modules(&self) -> Vec<Module> {
        let mut modules = self.own.modules.clone();
        modules.extend(self.connected.iter().map(|c| c.module.clone()));
        modules.extend(self.computers.iter().cloned());
        modules
    }

    /// The direct tools, as paths: the host's own, then the servers'.
    fn direct(&self) -> Vec<String> {
        let mut direct = self.own.direct.clone();
        for c in &self.connected {
            direct.extend(c.direct.iter().cloned());
        }
        direct
    }

    fn rebuild(&mut self) {
        // Every module joined one by one (and every direct tool fits): the
        // catalog and the toolset accept them.
        if let Ok(toolset) = Catalog::new(self.modules())
            .and_then(|catalog| Toolset::new(catalog, &self.direct(), self.own.execute.clone()))
        {
            self.toolset = Rc::new(toolset);
        }
    }

    /// A server's listing, if it has a usable tool and its module can join
    /// the catalog beside the modules offered; when the server is `direct`,
    /// each tool is a direct tool as far as one model request carries it
    /// beside the direct tools offered.
    fn join(
        &self,
        tools: McpTools,
        config: &ServerConfig,
        now_ms: i64,
    ) -> Result<Connected, String> {
        if tools.module.operations.is_empty() {
            let dropped: Vec<String> = tools
                .dropped
                .iter()
                .map(|d| format!("{}: {}", d.name, d.reason))
                .collect();
            return Err(format!(
                "advertised no usable tool{}",
                if dropped.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", dropped.join("; "))
                }
            ));
        }
        let module = Module::from_spec(tools.module).map_err(|e| e.0)?;
        let mut with = self.modules();
        with.push(module.clone());
        Catalog::new(with.clone()).map_err(|e| e.0)?;
        let report = |tool: String, reason: String| Unavailable {
            name: config.name.clone(),
            tool: Some(tool),
            reason,
            own: false,
        };
        let mut left_out: Vec<Unavailable> = tools
            .dropped
            .into_iter()
            .map(|d| report(d.name, format!("not offered: {}", d.reason)))
            .collect();
        let mut direct = Vec::new();
        if config.direct {
            let execute = self.own.execute.is_ok();
            let offered = self.direct();
            let door = execute.then_some(EXECUTE);
            let whole = door::module_tools(&with, None).map_err(|e| e.0)?;
            let mut names: Vec<&str> = door
                .into_iter()
                .chain(whole.iter().map(String::as_str))
                .chain(offered.iter().map(|p| guest_of(p)))
                .collect();
            for op in &module.operations {
                match door::direct_refusal(&op.guest_name, names.iter().copied()) {
                    Some(why) => left_out.push(report(op.name.clone(), not_direct(why, execute))),
                    None => {
                        names.push(&op.guest_name);
                        direct.push(format!("{}.{}", module.id, op.guest_name));
                    }
                }
            }
        }
        Ok(Connected {
            config: config.clone(),
            module,
            direct,
            left_out: capped(left_out),
            listed_at: now_ms,
            listed: tools.tools_version,
            seen: tools.tools_version,
            list_changed: tools.list_changed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::door::Tool;
    use crate::capability::{Access, ModuleSpec, OperationSpec};
    use crate::limits::{TOOLS_PER_REQUEST_MAX, TOOL_NAME_BYTES_MAX};
    use crate::model::{build_call_with_tools, ModelSpec, ProviderConfig, ToolRequest};
    use serde_json::json;

    fn server(name: &str) -> ServerConfig {
        ServerConfig {
            name: name.into(),
            url: format!("https://{name}.example/mcp"),
            headers: [(
                "authorization".to_owned(),
                "Bearer sk-secret-token".to_owned(),
            )]
            .into(),
            direct: false,
        }
    }

    fn direct(name: &str) -> ServerConfig {
        ServerConfig {
            direct: true,
            ..server(name)
        }
    }

    fn spec(name: &str) -> OperationSpec {
        OperationSpec {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            access: Access::Read,
            confirm: false,
            replay_safe: true,
        }
    }

    fn listing(module_id: &str, tools: &[&str]) -> McpTools {
        McpTools {
            server: ServerInfo {
                name: "s".into(),
                version: "1".into(),
            },
            tools_version: 1,
            list_changed: false,
            module: ModuleSpec {
                id: module_id.into(),
                operations: tools.iter().map(|name| spec(name)).collect(),
            },
            dropped: Vec::new(),
        }
    }

    fn own(execute: Result<(), String>) -> OwnTools {
        OwnTools::new(Vec::new(), &[], execute).unwrap()
    }

    fn hub(servers: Vec<ServerConfig>) -> Hub {
        Hub::new(own(Ok(())), servers, 60_000).unwrap()
    }

    fn names(hub: &Hub) -> Vec<String> {
        hub.toolset().specs().into_iter().map(|s| s.name).collect()
    }

    /// The model request both providers' builders make of the toolset: it
    /// must never be refused.
    fn builds(hub: &Hub) {
        let tools = hub.toolset().specs();
        for spelling in ["openai/m", "anthropic/m"] {
            let spec = ModelSpec::parse(spelling).unwrap();
            let request = ToolRequest {
                spec: &spec,
                instructions: None,
                items: &[],
                tools: &tools,
                max_output_tokens: 1,
                reasoning: None,
                cache_key: None,
            };
            build_call_with_tools(&ProviderConfig::new(spec.provider, None, None), &request)
                .unwrap();
        }
    }

    #[test]
    fn one_round_at_a_time_failures_retried_after_the_interval() {
        let mut hub = hub(vec![server("a"), server("b")]);
        let round = hub.start_round(1_000).unwrap();
        assert_eq!(round.connect.len(), 2, "every server at once");
        assert!(round.relist.is_empty());
        assert!(hub.connecting());
        assert_eq!(
            hub.start_round(1_000),
            None,
            "concurrent turns share the round"
        );
        let reports = hub.end_round(
            2_000,
            vec![
                (round.connect[0].clone(), Ok(listing("mcp.a", &["get"]))),
                (round.connect[1].clone(), Err("HTTP 503".into())),
            ],
        );
        assert_eq!(reports, [Unavailable::server("b", "HTTP 503".into())]);
        assert_eq!(
            reports[0].to_string(),
            "MCP server `b` is unavailable: HTTP 503"
        );
        assert_eq!(hub.unavailable(), reports, "said at each turn's start");
        assert!(hub.is_server("mcp.a") && !hub.is_server("mcp.b"));
        assert_eq!(hub.toolset().namespaces(), ["mcp"]);
        assert_eq!(
            hub.start_round(61_999),
            None,
            "not before the retry interval"
        );
        let retry = hub.start_round(62_000).unwrap();
        assert_eq!(
            retry,
            Round {
                connect: vec![server("b")],
                relist: Vec::new()
            },
            "only the failed server, the other is kept"
        );
        hub.end_round(62_500, vec![(server("b"), Ok(listing("mcp.b", &["put"])))]);
        assert!(hub.is_server("mcp.a") && hub.is_server("mcp.b"));
        assert!(hub.unavailable().is_empty());
        assert_eq!(hub.start_round(1_000_000), None, "nothing is due");
    }

    #[test]
    fn a_listing_without_tools_or_a_module_that_cannot_join_drops_its_server() {
        let mut hub = hub(vec![server("a"), server("b"), server("c")]);
        let round = hub.start_round(0).unwrap().connect;
        let reports = hub.end_round(
            1,
            vec![
                (round[0].clone(), Ok(listing("mcp.a", &["get"]))),
                (round[1].clone(), Ok(listing("mcp.b", &[]))),
                // The same module id as `a`: the catalog refuses it.
                (round[2].clone(), Ok(listing("mcp.a", &["other"]))),
            ],
        );
        let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["b", "c"]);
        assert!(reports[0].reason.starts_with("advertised no usable tool"));
        assert!(hub.is_server("mcp.a"));
        assert_eq!(hub.toolset().catalog().modules().len(), 1);
    }

    #[test]
    fn tools_a_listing_dropped_are_reported_by_name_once() {
        let mut hub = hub(vec![server("a")]);
        let round = hub.start_round(0).unwrap().connect;
        let mut tools = listing("mcp.a", &["get"]);
        tools.dropped.push(DroppedTool {
            name: "odd".into(),
            reason: "inputSchema: unsupported".into(),
        });
        let reports = hub.end_round(1, vec![(round[0].clone(), Ok(tools.clone()))]);
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert_eq!(
            (reports[0].name.as_str(), reports[0].tool.as_deref()),
            ("a", Some("odd"))
        );
        assert_eq!(
            reports[0].to_string(),
            "MCP server `a`: tool `odd` is not offered: inputSchema: unsupported"
        );
        assert_eq!(
            serde_json::to_value(&reports[0]).unwrap(),
            json!({"name": "a", "tool": "odd", "reason": "not offered: inputSchema: unsupported"})
        );
        assert_eq!(hub.unavailable(), reports, "said at each turn's start");
        // Listed again with the same tool dropped: not reported again.
        hub.saw_version("mcp.a", 2);
        let round = hub.start_round(5_000).unwrap();
        assert_eq!(round.relist, [server("a")]);
        assert!(hub
            .end_round(5_001, vec![(server("a"), Ok(tools))])
            .is_empty());
        assert_eq!(hub.unavailable().len(), 1);
    }

    #[test]
    fn a_direct_server_offers_the_tools_a_model_request_can_carry_and_reports_the_others() {
        let mut hub = Hub::new(
            own(Err("no LOADER".into())),
            vec![direct("a"), direct("b"), direct("c"), server("d")],
            60_000,
        )
        .unwrap();
        let round = hub.start_round(0).unwrap().connect;
        let long = "l".repeat(TOOL_NAME_BYTES_MAX + 1);
        let reports = hub.end_round(
            1,
            vec![
                (round[0].clone(), Ok(listing("mcp.a", &["get", "put"]))),
                // `get` is `a`'s direct tool already; the long name no
                // provider takes.
                (
                    round[1].clone(),
                    Ok(listing("mcp.b", &["get", &long, "b_only"])),
                ),
                (round[2].clone(), Ok(listing("mcp.c", &["execute"]))),
                // Not direct: the same name is no clash (execute only).
                (round[3].clone(), Ok(listing("mcp.d", &["get"]))),
            ],
        );
        let left_out: Vec<(&str, Option<&str>)> = reports
            .iter()
            .map(|r| (r.name.as_str(), r.tool.as_deref()))
            .collect();
        assert_eq!(
            left_out,
            [
                ("b", Some("get")),
                ("b", Some(long.as_str())),
                ("c", Some("execute"))
            ]
        );
        assert!(
            reports[0].reason.contains("already named `get`"),
            "{reports:?}"
        );
        assert!(
            reports[1]
                .reason
                .contains("is 65 bytes; a model tool name is at most 64"),
            "{reports:?}"
        );
        assert!(reports[2].reason.contains("the door's"), "{reports:?}");
        assert_eq!(
            reports[0].to_string(),
            "MCP server `b`: tool `get` is not a direct tool: another direct tool is already named `get`"
        );
        assert_eq!(
            names(&hub),
            ["get", "put", "b_only"],
            "no execute without a sandbox"
        );
        builds(&hub);
        let toolset = hub.toolset();
        assert!(
            matches!(toolset.tool("put"), Some(Tool::Direct(m, op)) if m.id == "mcp.a" && op.name == "put")
        );
        assert!(["mcp.a", "mcp.b", "mcp.c", "mcp.d"]
            .iter()
            .all(|m| hub.is_server(m)));
        // Extension modules beside keep the direct tools.
        let (with, refused) = hub.toolset_with(vec![module("ext", &["x"])]);
        assert!(refused.is_empty(), "{refused:?}");
        assert!(with.tool("get").is_some());
    }

    #[test]
    fn a_direct_server_past_the_request_bound_keeps_its_first_tools_and_reports_the_rest() {
        // The host's own: one direct operation beside `execute`.
        let notes = Module::from_spec(ModuleSpec {
            id: "notes".into(),
            operations: vec![spec("note")],
        })
        .unwrap();
        let own = OwnTools::new(vec![notes], &["notes.note".into()], Ok(())).unwrap();
        let mut hub = Hub::new(own, vec![direct("big"), direct("late")], 60_000).unwrap();
        let round = hub.start_round(0).unwrap().connect;
        let many: Vec<String> = (0..100).map(|i| format!("t{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let reports = hub.end_round(
            1,
            vec![
                (round[0].clone(), Ok(listing("mcp.big", &many))),
                (round[1].clone(), Ok(listing("mcp.late", &["late"]))),
            ],
        );
        let offered = names(&hub);
        assert_eq!(offered.len(), TOOLS_PER_REQUEST_MAX);
        assert_eq!(offered[..3], ["execute", "note", "t0"]);
        assert_eq!(
            offered.last().unwrap(),
            "t61",
            "the first 62 in listing order"
        );
        builds(&hub);
        // 38 of `big` and `late`: the first TOOL_REPORTS_MAX of each said
        // by name, the last counting the rest.
        let big: Vec<&Unavailable> = reports.iter().filter(|r| r.name == "big").collect();
        assert_eq!(big.len(), TOOL_REPORTS_MAX);
        assert_eq!(big[0].tool.as_deref(), Some("t62"));
        assert!(
            big[0].reason.starts_with(
                "not a direct tool (`execute` reaches it): a model request carries at most 64 tools"
            ),
            "{big:?}"
        );
        assert!(
            big[7].reason.ends_with("; 30 more tools are left out too"),
            "{big:?}"
        );
        let late: Vec<Option<&str>> = reports
            .iter()
            .filter(|r| r.name == "late")
            .map(|r| r.tool.as_deref())
            .collect();
        assert_eq!(late, [Some("late")]);
        // Both still reach the model through execute.
        let catalog = hub.toolset();
        assert!(catalog.catalog().resolve("mcp.big.t99").is_some());
        assert!(catalog.catalog().resolve("mcp.late.late").is_some());
    }

    #[test]
    fn the_hosts_own_direct_operations_past_the_bound_are_left_out_and_reported() {
        let long = "o".repeat(TOOL_NAME_BYTES_MAX + 1);
        let mut ops: Vec<String> = (0..70).map(|i| format!("op{i}")).collect();
        ops.insert(3, long.clone());
        let notes = Module::from_spec(ModuleSpec {
            id: "notes".into(),
            operations: ops.iter().map(|name| spec(name)).collect(),
        })
        .unwrap();
        let paths: Vec<String> = ops.iter().map(|op| format!("notes.{op}")).collect();
        let own = OwnTools::new(vec![notes.clone()], &paths, Ok(())).unwrap();
        assert_eq!(
            own.direct.len(),
            TOOLS_PER_REQUEST_MAX - 1,
            "beside execute"
        );
        assert_eq!(
            own.direct[3], "notes.op3",
            "the long name is skipped, not the rest"
        );
        let left_out: Vec<&str> = own
            .dropped
            .iter()
            .map(|r| r.tool.as_deref().unwrap())
            .collect();
        assert_eq!(
            left_out,
            [
                long.as_str(),
                "op63",
                "op64",
                "op65",
                "op66",
                "op67",
                "op68",
                "op69"
            ]
        );
        assert_eq!(
            own.dropped[1].to_string(),
            "operation `notes.op63` is not a direct tool (`execute` reaches it): a model request \
             carries at most 64 tools, and as many come before it"
        );
        let hub = Hub::new(own, Vec::new(), 60_000).unwrap();
        assert_eq!(hub.unavailable().len(), 8, "said at each turn's start");
        builds(&hub);
        // A path naming no operation is the host's mistake: refused.
        let e = OwnTools::new(vec![notes], &["notes.nope".into()], Ok(())).unwrap_err();
        assert!(e.to_string().contains("no such operation"), "{e}");
    }

    #[test]
    fn a_server_is_listed_again_after_a_change_at_most_once_a_gap_and_in_place() {
        let mut hub = hub(vec![direct("a"), direct("b")]);
        let round = hub.start_round(0).unwrap().connect;
        hub.end_round(
            1_000,
            vec![
                (round[0].clone(), Ok(listing("mcp.a", &["get"]))),
                (round[1].clone(), Ok(listing("mcp.b", &["put"]))),
            ],
        );
        assert_eq!(
            hub.start_round(1_000_000),
            None,
            "no change: never listed again"
        );
        // The connection of `a` saw a change (a notification, a new session).
        hub.saw_version("mcp.a", 1);
        assert_eq!(
            hub.start_round(1_000_000),
            None,
            "the listing's own version"
        );
        hub.saw_version("mcp.a", 2);
        hub.saw_version("mcp.a", 1);
        assert_eq!(
            hub.start_round(1_999),
            None,
            "within the gap of its listing"
        );
        let round = hub.start_round(2_000).unwrap();
        assert_eq!(
            round,
            Round {
                connect: Vec::new(),
                relist: vec![direct("a")]
            }
        );
        let mut relisted = listing("mcp.a", &["get", "gained"]);
        relisted.tools_version = 2;
        assert!(hub
            .end_round(2_100, vec![(direct("a"), Ok(relisted))])
            .is_empty());
        assert_eq!(
            names(&hub),
            ["execute", "get", "gained", "put"],
            "in its place"
        );
        assert_eq!(hub.start_round(1_000_000), None, "listed at its version");
        // A failed listing drops the server, tried again after the interval.
        hub.saw_version("mcp.b", 5);
        let round = hub.start_round(3_000).unwrap();
        assert_eq!(round.relist, [direct("b")]);
        let reports = hub.end_round(3_000, vec![(direct("b"), Err("HTTP 500".into()))]);
        assert_eq!(reports, [Unavailable::server("b", "HTTP 500".into())]);
        assert!(!hub.is_server("mcp.b"));
        assert_eq!(names(&hub), ["execute", "get", "gained"]);
        assert_eq!(hub.start_round(62_999), None);
        assert_eq!(hub.start_round(63_000).unwrap().connect, [direct("b")]);
    }

    #[test]
    fn a_server_declaring_list_changed_is_listed_again_each_retry_interval() {
        let mut hub = hub(vec![server("a")]);
        let round = hub.start_round(0).unwrap().connect;
        let mut tools = listing("mcp.a", &["get"]);
        tools.list_changed = true;
        hub.end_round(1_000, vec![(round[0].clone(), Ok(tools.clone()))]);
        assert_eq!(hub.start_round(60_999), None);
        let round = hub.start_round(61_000).unwrap();
        assert_eq!(round.relist, [server("a")]);
        assert_eq!(hub.start_round(61_000), None, "one round at a time");
        hub.end_round(61_500, vec![(server("a"), Ok(tools))]);
        assert_eq!(
            hub.start_round(121_499),
            None,
            "counted from the last listing"
        );
        assert!(hub.start_round(121_500).is_some());
    }

    fn module(id: &str, ops: &[&str]) -> Module {
        Module::from_spec(listing(id, ops).module).unwrap()
    }

    #[test]
    fn computers_join_with_their_files_or_not_at_all_and_a_new_list_replaces_them() {
        let mut hub = hub(vec![server("a")]);
        let round = hub.start_round(0).unwrap().connect;
        hub.end_round(1, vec![(round[0].clone(), Ok(listing("mcp.a", &["get"])))]);
        assert!(hub.computers_due(7, 0), "never described");
        let refused = hub.set_computers(
            7,
            vec![
                vec![
                    module("computers.laptop", &["run"]),
                    module("computers.laptop.files", &["read"]),
                ],
                // Clashes with the server's module: refused whole.
                vec![module("mcp.a", &["other"])],
            ],
            false,
            1_000,
        );
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, "mcp.a");
        assert!(!hub.computers_due(7, 1_000) && hub.computers_due(8, 1_000));
        assert!(
            hub.computers_due(7, 61_000),
            "one could not join: tried again"
        );
        assert!(hub.is_computer("computers.laptop"));
        assert!(hub.is_server("mcp.a"), "the servers stay");
        let toolset = hub.toolset();
        let ids: Vec<&str> = toolset
            .catalog()
            .modules()
            .iter()
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(ids, ["mcp.a", "computers.laptop", "computers.laptop.files"]);
        // A new description replaces every Computer's modules.
        hub.set_computers(
            8,
            vec![vec![module("computers.desk", &["run"])]],
            false,
            2_000,
        );
        assert!(
            !hub.computers_due(8, 1_000_000),
            "nothing dropped: no retry"
        );
        assert!(!hub.is_computer("computers.laptop") && hub.is_computer("computers.desk"));
        let toolset = hub.toolset();
        let ids: Vec<&str> = toolset
            .catalog()
            .modules()
            .iter()
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(ids, ["mcp.a", "computers.desk"]);
        // A description that dropped one is tried again after the interval.
        hub.set_computers(8, Vec::new(), true, 3_000);
        assert!(!hub.computers_due(8, 62_999) && hub.computers_due(8, 63_000));
    }

    /// `n` host operations, each offered direct by its path.
    fn own_direct(n: usize, whole: Vec<Module>) -> Result<OwnTools, ToolsError> {
        let names: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut modules = vec![module("notes", &names)];
        modules.extend(whole);
        let paths: Vec<String> = names.iter().map(|n| format!("notes.{n}")).collect();
        OwnTools::new(modules, &paths, Err("no LOADER".into()))
    }

    #[test]
    fn own_modules_offered_direct_come_after_the_direct_operations_or_refuse_the_set() {
        let ui = || module("ui", &["discover", "execute"]).offered_direct();
        let own = own_direct(62, vec![ui()]).unwrap();
        let toolset = own.toolset().unwrap();
        let names: Vec<String> = toolset.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names.len(), 64);
        assert_eq!(names[62..], ["ui_discover", "ui_execute"]);
        // One more direct operation and the request cannot carry `ui_execute`:
        // the host asked for the module by name, so the set is refused.
        let e = own_direct(63, vec![ui()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "direct tool `ui_execute` (ui.execute): a model request carries at most 64 tools, \
             and as many come before it"
        );
        // A direct server leaves the room they take.
        let own = own_direct(60, vec![ui()]).unwrap();
        let mut hub = Hub::new(own, vec![direct("a")], 60_000).unwrap();
        let round = hub.start_round(0).unwrap().connect;
        let reports = hub.end_round(
            1,
            vec![(round[0].clone(), Ok(listing("mcp.a", &["x", "y", "z"])))],
        );
        assert_eq!(hub.toolset().specs().len(), 64);
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert_eq!(reports[0].tool.as_deref(), Some("z"));
    }

    #[test]
    fn a_computer_offered_direct_that_does_not_fit_is_refused_and_an_extension_left_out() {
        let mut hub = Hub::new(own_direct(62, Vec::new()).unwrap(), Vec::new(), 60_000).unwrap();
        let refused = hub.set_computers(
            1,
            vec![
                vec![module("computers.a", &["run"]).offered_direct()],
                // Its files would be the 65th tool: refused whole.
                vec![
                    module("computers.b", &["run"]).offered_direct(),
                    module("computers.b.files", &["read"]).offered_direct(),
                ],
            ],
            false,
            0,
        );
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, "computers.b");
        assert!(
            refused[0].1.contains("`computers_b_files_read`"),
            "{refused:?}"
        );
        assert!(hub.is_computer("computers.a") && !hub.is_computer("computers.b"));
        assert!(hub.toolset().tool("computers_a_run").is_some());
        // An extension's commands offered direct join as far as there is room.
        let (toolset, refused) = hub.toolset_with(vec![
            module("notes_ext", &["add"]).offered_direct(),
            module("other_ext", &["add"]).offered_direct(),
        ]);
        assert!(toolset.tool("notes_ext_add").is_some());
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, "other_ext");
        assert!(toolset.tool("other_ext_add").is_none());
    }

    #[test]
    fn debug_output_names_no_header_value() {
        let shown = format!("{:?}", server("a"));
        assert!(shown.contains("authorization"), "{shown}");
        assert!(!shown.contains("sk-secret"), "{shown}");
    }
}
