//! The host's tools as the shim describes them (`ShiitakeDO#tools()`, see
//! `js/do/hooks.mjs`), decoded and validated once per instance (the catalog once
//! per isolate): the own modules and toolset, the MCP servers, the Files
//! ports, the Computers, the browser bridge, the access rules. `tools.rs`
//! performs calls with them.

use super::bindings::{self, JsTools};
use super::computers::Computers;
use super::files::{HostPort, Ports};
use super::files_grant::{self, RunFiles};
use super::files_journal::Sweep;
use super::mcp;
use super::ui::HostUi;
use crate::capability::door::Toolset;
use crate::capability::Catalog;
use crate::files::module::MODULE_ID;
use crate::files::workspace::Bounds;
use crate::grants::AccessConfig;
use crate::limits::{
    COMPUTER_DESCRIBE_TIMEOUT_MS, MCP_CONNECT_TIMEOUT_MS, MCP_RETRY_MS, MCP_RETRY_MS_MAX,
    MCP_RETRY_MS_MIN,
};
use crate::mcp::{Hub, OwnTools};
use crate::run::operation::Rules;
use serde::Deserialize;
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::prelude::*;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    modules: Value,
    #[serde(default)]
    direct: Vec<String>,
    #[serde(default)]
    access: Option<Value>,
    #[serde(default)]
    confirm: bool,
    #[serde(default)]
    loader: bool,
    /// Bound on connecting the MCP servers, at most `MCP_CONNECT_TIMEOUT_MS`.
    #[serde(default)]
    mcp_timeout_ms: Option<u64>,
    /// How long before unavailable MCP servers are tried again.
    #[serde(default)]
    mcp_retry_ms: Option<u64>,
    /// Whether the host lists Computers (`tools().computers`).
    #[serde(default)]
    computers: bool,
    /// Bound on describing the Computers, at most
    /// `COMPUTER_DESCRIBE_TIMEOUT_MS`.
    #[serde(default)]
    computers_timeout_ms: Option<u64>,
    /// The host's Files port (`tools().files`).
    #[serde(default)]
    files: Option<FilesSpec>,
    /// The browser bridge (`tools().ui`, `crate::ui`).
    #[serde(default)]
    ui: Option<crate::ui::Config>,
    /// `tools()` threw: why.
    #[serde(default)]
    error: Option<String>,
}

/// `tools().files` as the shim describes it: the SQLite workspace (its
/// bounds) or a JS port, whether it supplies the patch engine (and is
/// stepwise: `HostPort::Js`), and whether the module's operations are also
/// direct tools (the default).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FilesSpec {
    #[serde(default)]
    workspace: Option<Value>,
    #[serde(default)]
    patches: bool,
    #[serde(default)]
    stepwise: bool,
    #[serde(default = "yes")]
    direct: bool,
}

fn yes() -> bool {
    true
}

impl FilesSpec {
    fn port(&self) -> Result<HostPort, String> {
        match &self.workspace {
            Some(bounds) => Bounds::parse(&bounds.to_string())
                .map(HostPort::Workspace)
                .map_err(|e| e.to_string()),
            None => Ok(HostPort::Js {
                patches: self.patches,
                stepwise: self.stepwise,
            }),
        }
    }
}

/// The own tools a spec decodes to (modules, the toolset over them).
#[derive(Clone)]
struct Decoded {
    tools: Rc<OwnTools>,
    toolset: Rc<Toolset>,
    /// The Files ports, by the id of the module over each.
    ports: Vec<(String, HostPort)>,
}

thread_local! {
    /// The last spec this isolate decoded, and what it decoded to: every
    /// instance of one Worker class hands over the same `tools()` spec, so
    /// opening an Agent decodes and validates no catalog, and its
    /// instances share one (an Agent's memory: `bench/scale.mjs`).
    static DECODED: RefCell<Option<(String, Decoded)>> = const { RefCell::new(None) };
}

/// The own tools of `spec` (its JSON text `raw`) with `fleet`'s module:
/// from the isolate's cache when the same spec was decoded last.
fn decoded(raw: &str, spec: &Spec, fleet: Option<crate::fleet::Offer>) -> Result<Decoded, String> {
    let key = format!("{raw}\u{0}{fleet:?}");
    let hit = DECODED.with_borrow(|cached| {
        cached
            .as_ref()
            .filter(|(k, _)| *k == key)
            .map(|(_, decoded)| decoded.clone())
    });
    if let Some(hit) = hit {
        return Ok(hit);
    }
    let catalog = Catalog::from_json(&spec.modules.to_string())
        .map_err(|e| format!("tools(): modules{e}", e = prefixed(&e.0)))?;
    let execute = if spec.loader {
        Ok(())
    } else {
        Err(
            "`execute` is unavailable: the Worker has no LOADER binding (Worker Loader); \
             add `worker_loaders = [{ binding = \"LOADER\" }]` to wrangler.toml"
                .to_owned(),
        )
    };
    let mut modules = catalog.modules().to_vec();
    let mut direct = spec.direct.clone();
    let mut ports = Vec::new();
    if let Some(files) = &spec.files {
        let port = files.port().map_err(|e| format!("tools().files: {e}"))?;
        let module = crate::files::module::module(MODULE_ID, port.patches())
            .map_err(|e| format!("tools().files: {e}"))?;
        if files.direct {
            direct.extend(
                module
                    .operations
                    .iter()
                    .map(|op| format!("{MODULE_ID}.{}", op.name)),
            );
        }
        modules.push(module);
        ports.push((MODULE_ID.to_owned(), port));
    }
    if let Some(offer) = fleet.filter(|_| cfg!(feature = "fleet")) {
        modules.push(crate::fleet::module(offer));
    }
    if let Some(ui) = &spec.ui {
        ui.check().map_err(|e| format!("tools(): {e}"))?;
        modules.push(ui.module().map_err(|e| format!("tools().ui: {e}"))?);
    }
    let tools = OwnTools::new(modules, &direct, execute).map_err(|e| format!("tools(): {e}"))?;
    let toolset = tools.toolset().map_err(|e| format!("tools(): {e}"))?;
    let decoded = Decoded {
        tools: Rc::new(tools),
        toolset: Rc::new(toolset),
        ports,
    };
    DECODED.set(Some((key, decoded.clone())));
    Ok(decoded)
}

/// The host's tools, decoded once per instance.
pub struct HostTools {
    pub js: JsTools,
    /// Which tools are offered, and the MCP servers' connection state.
    pub hub: Rc<RefCell<Hub>>,
    /// The MCP servers' live connections.
    pub servers: Rc<mcp::Servers>,
    /// The Files ports, by the id of the module over each.
    ports: Vec<(String, HostPort)>,
    /// The host's Computers, described at a turn's start when their list
    /// changed.
    pub computers: Rc<Computers>,
    access: AccessConfig,
    confirm_hook: bool,
    /// `execute` runs in flight in this instance.
    pub(super) executions: Cell<usize>,
    /// The toolset of each live run that offers extension tools, by head
    /// (dropped when the run ends).
    pub(super) run_toolsets: RefCell<std::collections::HashMap<String, Rc<Toolset>>>,
    /// The files grant holder's tools of each live run (`files_grant.rs`).
    pub(super) run_files: RunFiles,
    /// The browser bridge, when the host configured `tools().ui`.
    pub(super) ui: Option<Rc<HostUi>>,
    /// The files patch journals earlier instances left
    /// (`files_journal.rs`).
    pub(super) sweep: Sweep,
}

impl HostTools {
    /// `None` when the host offers no tools at all.
    /// `fleet`: the host enables the fleet, so the `agents` module is
    /// offered with those operations (`src/fleet/mod.rs`).
    pub fn new(
        js: JsValue,
        fleet: Option<crate::fleet::Offer>,
    ) -> Result<Option<HostTools>, String> {
        if js.is_undefined() || js.is_null() {
            return Ok(None);
        }
        let js: JsTools = js.unchecked_into();
        let spec: Spec = crate::json::from_text(&js.spec()).map_err(|e| format!("tools(): {e}"))?;
        if let Some(error) = spec.error {
            return Err(format!("tools(): {error}"));
        }
        let own = decoded(&js.spec(), &spec, fleet)?;
        let servers =
            crate::mcp::parse_servers(&js.mcp_servers()).map_err(|e| format!("tools(): {e}"))?;
        let retry_ms = spec
            .mcp_retry_ms
            .unwrap_or(MCP_RETRY_MS)
            .clamp(MCP_RETRY_MS_MIN, MCP_RETRY_MS_MAX);
        let ports = own.ports;
        // Told once an instance: the direct operations one model request
        // cannot carry (each turn's start says them again).
        for report in &own.tools.dropped {
            bindings::log_warn(report);
            if let Ok(json) = serde_json::to_string(report) {
                js.on_unavailable(&json);
            }
        }
        let ui = spec
            .ui
            .map(|config| Rc::new(HostUi::new(config, js.clone())));
        let hub = Hub::shared(own.tools, own.toolset, servers, retry_ms);
        let access = match spec.access {
            Some(access) => AccessConfig::parse(&access.to_string())?,
            None => AccessConfig::default(),
        };
        Ok(Some(HostTools {
            js,
            hub: Rc::new(RefCell::new(hub)),
            servers: Rc::new(mcp::Servers::new(
                spec.mcp_timeout_ms
                    .unwrap_or(MCP_CONNECT_TIMEOUT_MS)
                    .clamp(1, MCP_CONNECT_TIMEOUT_MS),
            )),
            ports,
            computers: Rc::new(Computers::new(
                spec.computers,
                spec.computers_timeout_ms
                    .unwrap_or(COMPUTER_DESCRIBE_TIMEOUT_MS)
                    .clamp(1, COMPUTER_DESCRIBE_TIMEOUT_MS),
            )),
            access,
            confirm_hook: spec.confirm,
            executions: Cell::new(0),
            run_toolsets: RefCell::default(),
            run_files: RunFiles::default(),
            ui,
            sweep: Sweep::new(),
        }))
    }

    /// The Files port of module `module_id`: the host's own, or a
    /// described Computer's.
    pub(super) fn module_port(&self, module_id: &str) -> Option<HostPort> {
        let find = |ports: &[(String, HostPort)]| {
            ports
                .iter()
                .find_map(|(id, port)| (id == module_id).then(|| port.clone()))
        };
        find(&self.ports).or_else(|| find(&self.computers.ports.borrow()))
    }

    /// Whether the host configured its own Files (`tools().files`).
    pub(super) fn has_own_files(&self) -> bool {
        self.ports.iter().any(|(id, _)| id == MODULE_ID)
    }

    pub(super) fn rules(&self) -> Rules<'_> {
        Rules {
            config: &self.access,
            confirm_hook: self.confirm_hook,
        }
    }
}

impl Ports for HostTools {
    fn js(&self) -> &JsTools {
        &self.js
    }

    fn port(&self, key: &str) -> Option<HostPort> {
        match key.strip_prefix(&files_grant::port_key("")) {
            Some(head) => self.run_files.port(head),
            None => self.module_port(key),
        }
    }
}

fn prefixed(e: &str) -> String {
    if e.starts_with('[') {
        e.to_owned()
    } else {
        format!(": {e}")
    }
}
