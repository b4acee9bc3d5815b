//! Which tools an Agent offers (seed `knapsack.md`, `mcpServers`): the
//! host's own modules plus one module `mcp.<name>` per MCP server that
//! connected. Pure policy: the host performs each connection round the hub
//! starts and hands back its outcomes.
//!
//! - The servers connect at an instance's first turn, in one round that
//!   concurrent turns share ([`Hub::start_round`] answers `None` while one
//!   runs).
//! - A server that fails (or lists no usable tool, or whose module cannot
//!   join the catalog) is dropped and reported, while the others stay; the
//!   failed ones are tried again at the first turn `retry_ms` after the
//!   round. Servers already connected are kept.

use super::McpTools;
use crate::capability::door::Toolset;
use crate::capability::{Catalog, Module};
use crate::limits::MCP_SERVERS_MAX;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
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

/// Decodes the host's server list. Errors name the entry and the field,
/// never a value (header values are credentials).
pub fn parse_servers(json: &str) -> Result<Vec<ServerConfig>, String> {
    let entries: Vec<Value> = serde_json::from_str(json).map_err(|_| {
        "mcpServers: expected an array of {name, url, headers?, direct?}".to_owned()
    })?;
    if entries.len() > MCP_SERVERS_MAX {
        return Err(format!(
            "mcpServers: {} servers; at most {MCP_SERVERS_MAX}",
            entries.len()
        ));
    }
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            serde_json::from_value(entry).map_err(|_| {
                format!(
                    "mcpServers[{i}]: expected {{name: string, url: string, headers?: \
                     {{[name]: string}}, direct?: boolean}} and nothing else"
                )
            })
        })
        .collect()
}

/// A server that could not be offered, and why (credential-free).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unavailable {
    pub name: String,
    pub reason: String,
}

/// The host's own tools, which every toolset holds.
#[derive(Debug, Clone)]
pub struct OwnTools {
    pub modules: Vec<Module>,
    /// Operations offered as their own tools, by path.
    pub direct: Vec<String>,
    /// Whether guest code can run here, or why not.
    pub execute: Result<(), String>,
}

impl OwnTools {
    /// The toolset of these tools alone (no MCP server or Computer yet).
    pub fn toolset(&self) -> Result<Toolset, String> {
        Toolset::new(
            Catalog::new(self.modules.clone()).map_err(|e| e.0)?,
            &self.direct,
            self.execute.clone(),
        )
        .map_err(|e| e.0)
    }
}

/// The tools offered, and the MCP servers' connection state.
#[derive(Debug)]
pub struct Hub {
    own: Rc<OwnTools>,
    retry_ms: u64,
    /// Servers not connected, and when they may be tried (ms since epoch).
    waiting: Vec<ServerConfig>,
    due_at: i64,
    connecting: bool,
    /// The modules of the connected servers that joined the catalog.
    connected: Vec<Module>,
    /// The ids of the connected modules whose tools are direct tools.
    connected_direct: Vec<String>,
    /// The last round's failures.
    unavailable: Vec<Unavailable>,
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
    pub fn new(own: OwnTools, servers: Vec<ServerConfig>, retry_ms: u64) -> Result<Hub, String> {
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
            waiting: servers,
            due_at: i64::MIN,
            connecting: false,
            connected: Vec::new(),
            connected_direct: Vec::new(),
            unavailable: Vec::new(),
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
    /// tools); `extra` that cannot join the catalog is refused whole.
    pub fn toolset_with(&self, extra: Vec<Module>) -> Result<Rc<Toolset>, String> {
        if extra.is_empty() {
            return Ok(self.toolset());
        }
        let mut modules = self.modules();
        modules.extend(extra);
        let catalog = Catalog::new(modules).map_err(|e| e.0)?;
        Toolset::new(catalog, &self.direct(), self.own.execute.clone())
            .map(Rc::new)
            .map_err(|e| e.0)
    }

    /// The servers of the last round that could not be offered.
    pub fn unavailable(&self) -> &[Unavailable] {
        &self.unavailable
    }

    /// Whether a round is being performed.
    pub fn connecting(&self) -> bool {
        self.connecting
    }

    /// Whether operations of module `module_id` go to an MCP server.
    pub fn is_server(&self, module_id: &str) -> bool {
        self.connected.iter().any(|m| m.id == module_id)
    }

    /// The servers to connect now, all at once: `None` while a round runs,
    /// or when none waits or the retry interval has not passed.
    pub fn start_round(&mut self, now_ms: i64) -> Option<Vec<ServerConfig>> {
        if self.connecting || self.waiting.is_empty() || now_ms < self.due_at {
            return None;
        }
        self.connecting = true;
        Some(std::mem::take(&mut self.waiting))
    }

    /// A round's outcomes, one per server it started: the tools listed, or
    /// why the server failed. Answers the servers that cannot be offered,
    /// to report now.
    pub fn end_round(
        &mut self,
        now_ms: i64,
        outcomes: Vec<(ServerConfig, Result<McpTools, String>)>,
    ) -> Vec<Unavailable> {
        self.connecting = false;
        let mut unavailable = Vec::new();
        for (config, outcome) in outcomes {
            let joined = outcome.and_then(|tools| self.join(tools, config.direct));
            match joined {
                Ok(module) => {
                    if config.direct {
                        self.connected_direct.push(module.id.clone());
                    }
                    self.connected.push(module);
                }
                Err(reason) => {
                    unavailable.push(Unavailable {
                        name: config.name.clone(),
                        reason,
                    });
                    self.waiting.push(config);
                }
            }
        }
        self.due_at = now_ms.saturating_add(i64::try_from(self.retry_ms).unwrap_or(i64::MAX));
        self.rebuild();
        self.unavailable = unavailable.clone();
        unavailable
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
            match Catalog::new(with) {
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
        modules.extend(self.connected.iter().cloned());
        modules.extend(self.computers.iter().cloned());
        modules
    }

    /// The direct tools, as paths: the host's own, then every tool of each
    /// connected server marked `direct`.
    fn direct(&self) -> Vec<String> {
        let mut direct = self.own.direct.clone();
        for module in &self.connected {
            if self.connected_direct.contains(&module.id) {
                direct.extend(
                    module
                        .operations
                        .iter()
                        .map(|op| format!("{}.{}", module.id, op.guest_name)),
                );
            }
        }
        direct
    }

    fn rebuild(&mut self) {
        // Every module joined one by one: the catalog (and, for a direct
        // server, the toolset) accepts them.
        if let Ok(toolset) = Catalog::new(self.modules())
            .and_then(|catalog| Toolset::new(catalog, &self.direct(), self.own.execute.clone()))
        {
            self.toolset = Rc::new(toolset);
        }
    }

    /// The module of a server's listing, if it has a usable tool and can
    /// join the catalog beside the modules offered (and, when `direct`, its
    /// tools beside the direct tools offered: a name taken, or `execute`,
    /// refuses the server).
    fn join(&self, tools: McpTools, direct: bool) -> Result<Module, String> {
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
        let catalog = Catalog::new(with).map_err(|e| e.0)?;
        if direct {
            let mut paths = self.direct();
            paths.extend(
                module
                    .operations
                    .iter()
                    .map(|op| format!("{}.{}", module.id, op.guest_name)),
            );
            Toolset::new(catalog, &paths, self.own.execute.clone()).map_err(|e| e.0)?;
        }
        Ok(module)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capability::door::Tool;
    use crate::capability::{Access, ModuleSpec, OperationSpec};
    use crate::mcp::ServerInfo;
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

    fn listing(module_id: &str, tools: &[&str]) -> McpTools {
        McpTools {
            server: ServerInfo {
                name: "s".into(),
                version: "1".into(),
            },
            module: ModuleSpec {
                id: module_id.into(),
                operations: tools
                    .iter()
                    .map(|name| OperationSpec {
                        name: (*name).into(),
                        description: String::new(),
                        input_schema: json!({"type": "object"}),
                        access: Access::Read,
                        confirm: false,
                        replay_safe: true,
                    })
                    .collect(),
            },
            dropped: Vec::new(),
        }
    }

    fn hub(servers: Vec<ServerConfig>) -> Hub {
        let own = OwnTools {
            modules: Vec::new(),
            direct: Vec::new(),
            execute: Ok(()),
        };
        Hub::new(own, servers, 60_000).unwrap()
    }

    #[test]
    fn one_round_at_a_time_failures_retried_after_the_interval() {
        let mut hub = hub(vec![server("a"), server("b")]);
        let round = hub.start_round(1_000).unwrap();
        assert_eq!(round.len(), 2, "every server at once");
        assert!(hub.connecting());
        assert_eq!(
            hub.start_round(1_000),
            None,
            "concurrent turns share the round"
        );
        let reports = hub.end_round(
            2_000,
            vec![
                (round[0].clone(), Ok(listing("mcp.a", &["get"]))),
                (round[1].clone(), Err("HTTP 503".into())),
            ],
        );
        assert_eq!(
            reports,
            [Unavailable {
                name: "b".into(),
                reason: "HTTP 503".into()
            }]
        );
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
            [server("b")],
            "only the failed server, the other is kept"
        );
        hub.end_round(62_500, vec![(server("b"), Ok(listing("mcp.b", &["put"])))]);
        assert!(hub.is_server("mcp.a") && hub.is_server("mcp.b"));
        assert!(hub.unavailable().is_empty());
        assert_eq!(hub.start_round(1_000_000), None, "nothing waits");
    }

    #[test]
    fn a_listing_without_tools_or_a_module_that_cannot_join_drops_its_server() {
        let mut hub = hub(vec![server("a"), server("b"), server("c")]);
        let round = hub.start_round(0).unwrap();
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
    fn a_direct_server_offers_each_tool_as_its_own_and_clashes_refuse_it() {
        let direct = |name: &str| ServerConfig {
            direct: true,
            ..server(name)
        };
        let own = OwnTools {
            modules: Vec::new(),
            direct: Vec::new(),
            execute: Err("no LOADER".into()),
        };
        let mut hub = Hub::new(
            own,
            vec![direct("a"), direct("b"), direct("c"), server("d")],
            60_000,
        )
        .unwrap();
        let round = hub.start_round(0).unwrap();
        let reports = hub.end_round(
            1,
            vec![
                (round[0].clone(), Ok(listing("mcp.a", &["get", "put"]))),
                // `get` is `a`'s direct tool already.
                (round[1].clone(), Ok(listing("mcp.b", &["get"]))),
                (round[2].clone(), Ok(listing("mcp.c", &["execute"]))),
                // Not direct: the same name is no clash (execute only).
                (round[3].clone(), Ok(listing("mcp.d", &["get"]))),
            ],
        );
        let refused: Vec<(&str, &str)> = reports
            .iter()
            .map(|r| (r.name.as_str(), r.reason.as_str()))
            .collect();
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert_eq!(refused[0].0, "b");
        assert!(refused[0].1.contains("already named `get`"), "{refused:?}");
        assert_eq!(refused[1].0, "c");
        assert!(refused[1].1.contains("the door's"), "{refused:?}");
        let toolset = hub.toolset();
        let names: Vec<String> = toolset.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["get", "put"], "no execute without a sandbox");
        assert!(
            matches!(toolset.tool("put"), Some(Tool::Direct(m, op)) if m.id == "mcp.a" && op.name == "put")
        );
        assert!(hub.is_server("mcp.a") && hub.is_server("mcp.d"));
        // Extension modules beside keep the direct tools.
        let with = hub.toolset_with(vec![module("ext", &["x"])]).unwrap();
        assert!(with.tool("get").is_some());
    }

    fn module(id: &str, ops: &[&str]) -> Module {
        Module::from_spec(listing(id, ops).module).unwrap()
    }

    #[test]
    fn computers_join_with_their_files_or_not_at_all_and_a_new_list_replaces_them() {
        let mut hub = hub(vec![server("a")]);
        let round = hub.start_round(0).unwrap();
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

    #[test]
    fn debug_output_names_no_header_value() {
        let shown = format!("{:?}", server("a"));
        assert!(shown.contains("authorization"), "{shown}");
        assert!(!shown.contains("sk-secret"), "{shown}");
    }
}
