//! Which backend performs a call to a module's operation: one decision, made
//! here, after the call's gate passed. The host answers what it has
//! ([`Backends`]: its ports, servers, extensions, Computers, bridge, fleet)
//! and performs the [`Backend`] this names; it never picks one itself.
//!
//! The order is the contract: a files grant holder's run port shadows every
//! other module `files` in that run; an extension's command comes before
//! the host's ports and servers; a Computer's files module
//! (`computers.<name>.files`) is a Files port, not the Computer's commands;
//! an MCP module without a live connection, and every module no backend
//! claims, is the host Worker's own (the shim's `invoke`, which refuses an
//! unknown one).

use super::COMPUTERS_NAMESPACE;

/// The ids of the runtime's own modules, which a host backend serves
/// (`crate::files::module`, `crate::ui`, `crate::fleet` name theirs by
/// these).
pub mod own {
    /// The files module at the top level (a Computer's is
    /// `computers.<name>.files`).
    pub const FILES: &str = "files";
    /// The browser bridge's module.
    pub const UI: &str = "ui";
    /// The fleet's module.
    pub const AGENTS: &str = "agents";
}

/// What the host has to perform calls with, asked in the order of
/// [`route`]. `Port`, `Server` and `Extension` are the host's handles,
/// passed through to the [`Backend`].
pub trait Backends {
    type Port;
    type Server;
    type Extension;
    /// The port the files grant holder gave the call's run, if it did.
    fn grant_files(&self) -> Option<Self::Port>;
    /// Whether the host configured the browser bridge.
    fn bridge(&self) -> bool;
    /// The running extensions, when one offers `module_id` as its commands.
    fn extension(&self, module_id: &str) -> Option<Self::Extension>;
    /// The Files port of `module_id`: the host's own or a Computer's.
    fn files(&self, module_id: &str) -> Option<Self::Port>;
    /// Whether `module_id` is a described Computer's module.
    fn computer(&self, module_id: &str) -> bool;
    /// The live connection of the MCP server behind `module_id`.
    fn server(&self, module_id: &str) -> Option<Self::Server>;
    /// Whether the host enables a usable fleet.
    fn fleet(&self) -> bool;
}

/// The backend that performs one call.
#[derive(Debug, PartialEq, Eq)]
pub enum Backend<'a, P, S, E> {
    /// The files grant holder's tools of the run, on its captured port.
    GrantFiles(P),
    /// The browser bridge: a browser of the Session answers.
    Ui,
    /// An extension's command, in its own transition.
    Extension(E),
    /// A Files port (the module's code over it).
    Files(P),
    /// A Computer's advertised operation, by the Computer's name.
    Computer(&'a str),
    /// A connected MCP server.
    Mcp(S),
    /// The fleet's peer calls and directory.
    Fleet,
    /// The host Worker's own tool, through the shim's `invoke`.
    Host,
}

/// The backend of a call to `module_id`'s operation.
pub fn route<'a, B: Backends>(
    module_id: &'a str,
    host: &B,
) -> Backend<'a, B::Port, B::Server, B::Extension> {
    if module_id == own::FILES {
        if let Some(port) = host.grant_files() {
            return Backend::GrantFiles(port);
        }
    }
    if module_id == own::UI && host.bridge() {
        return Backend::Ui;
    }
    if let Some(ext) = host.extension(module_id) {
        return Backend::Extension(ext);
    }
    if let Some(port) = host.files(module_id) {
        return Backend::Files(port);
    }
    if host.computer(module_id) {
        let name = module_id
            .strip_prefix(COMPUTERS_NAMESPACE)
            .and_then(|rest| rest.strip_prefix('.'))
            .unwrap_or_default();
        return Backend::Computer(name);
    }
    if let Some(server) = host.server(module_id) {
        return Backend::Mcp(server);
    }
    if module_id == own::AGENTS && host.fleet() {
        return Backend::Fleet;
    }
    Backend::Host
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host with what each test gives it; ports and servers by name.
    #[derive(Default)]
    struct Host {
        grant: Option<&'static str>,
        bridge: bool,
        extensions: Vec<&'static str>,
        ports: Vec<&'static str>,
        computers: Vec<&'static str>,
        servers: Vec<&'static str>,
        fleet: bool,
    }

    impl Backends for Host {
        type Port = String;
        type Server = String;
        type Extension = ();
        fn grant_files(&self) -> Option<String> {
            self.grant.map(str::to_owned)
        }
        fn bridge(&self) -> bool {
            self.bridge
        }
        fn extension(&self, id: &str) -> Option<()> {
            self.extensions.contains(&id).then_some(())
        }
        fn files(&self, id: &str) -> Option<String> {
            self.ports.contains(&id).then(|| format!("port {id}"))
        }
        fn computer(&self, id: &str) -> bool {
            self.computers.contains(&id)
        }
        fn server(&self, id: &str) -> Option<String> {
            self.servers.contains(&id).then(|| format!("server {id}"))
        }
        fn fleet(&self) -> bool {
            self.fleet
        }
    }

    type Routed = Backend<'static, String, String, ()>;

    #[test]
    fn a_files_grant_port_shadows_every_other_files_module_in_its_run() {
        let mut host = Host {
            grant: Some("run port"),
            ports: vec!["files"],
            extensions: vec!["files"],
            ..Host::default()
        };
        assert_eq!(route("files", &host), Routed::GrantFiles("run port".into()));
        // Only the module `files`: a Computer's files are its own port.
        host.ports.push("computers.laptop.files");
        assert_eq!(
            route("computers.laptop.files", &host),
            Routed::Files("port computers.laptop.files".into())
        );
        // A run the holder gave no port: the next backend that claims it.
        host.grant = None;
        assert_eq!(route("files", &host), Routed::Extension(()));
        host.extensions.clear();
        assert_eq!(route("files", &host), Routed::Files("port files".into()));
    }

    #[test]
    fn the_browser_bridge_serves_ui_only_when_configured() {
        let mut host = Host::default();
        assert_eq!(route("ui", &host), Routed::Host);
        host.bridge = true;
        assert_eq!(route("ui", &host), Routed::Ui);
        assert_eq!(route("notes", &host), Routed::Host);
    }

    #[test]
    fn an_extension_command_comes_before_ports_computers_and_servers() {
        let host = Host {
            extensions: vec!["computers.laptop", "mcp.notes"],
            computers: vec!["computers.laptop"],
            servers: vec!["mcp.notes"],
            ..Host::default()
        };
        assert_eq!(route("computers.laptop", &host), Routed::Extension(()));
        assert_eq!(route("mcp.notes", &host), Routed::Extension(()));
    }

    #[test]
    fn a_computer_is_called_by_its_name() {
        let host = Host {
            computers: vec!["computers.laptop"],
            ..Host::default()
        };
        assert_eq!(route("computers.laptop", &host), Routed::Computer("laptop"));
        assert_eq!(route("computers.desk", &host), Routed::Host);
    }

    #[test]
    fn an_mcp_module_without_a_live_connection_goes_to_the_host() {
        let host = Host {
            servers: vec!["mcp.notes"],
            ..Host::default()
        };
        assert_eq!(
            route("mcp.notes", &host),
            Routed::Mcp("server mcp.notes".into())
        );
        assert_eq!(route("mcp.todo", &host), Routed::Host);
    }

    #[test]
    fn the_agents_module_is_the_fleets_only_when_it_is_enabled() {
        let mut host = Host::default();
        assert_eq!(route("agents", &host), Routed::Host);
        host.fleet = true;
        assert_eq!(route("agents", &host), Routed::Fleet);
        // An extension offering `agents` is asked first, as before.
        host.extensions.push("agents");
        assert_eq!(route("agents", &host), Routed::Extension(()));
    }
}
