//! Views: what is read outside any transition, from committed state: an
//! extension's status, its projections and history, the prompt sections
//! and command tools its builders offer a model call.

use super::call::{Answer, ToolMarker};
use super::effects::Call;
use super::{tables, Entry, Extensions, Failure, Scope, SessionRef, State};
use crate::error::ApiError;
use crate::history::{self, History};
use crate::limits::{EXTENSION_PROJECTION_BYTES_MAX, EXTENSION_PROMPT_BYTES_MAX};
use crate::store::Store;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// One extension as the host sees it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub id: String,
    pub version: String,
    pub revision: String,
    pub state_version: u32,
    pub grant_key: String,
    pub feature: Option<String>,
    /// The recorded stop, if any.
    pub stopped: Option<Stop>,
    /// Settled work it has missed and not yet replayed.
    pub behind: bool,
    /// The Agent-scope projection, when it publishes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projection: Option<Value>,
    /// The advertised command catalog: every declared command, by name
    /// (client entries' actions name these).
    pub commands: Vec<CommandInfo>,
}

/// One command of an extension's catalog.
#[derive(Debug, Clone, Serialize)]
pub struct CommandInfo {
    pub name: String,
    pub scope: &'static str,
    pub description: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stop {
    pub reason: String,
    pub at: Option<i64>,
}

impl Extensions {
    /// `entry`'s projection of `scope` (`session_id` for a Session's), read
    /// from committed state: `None` when it publishes none.
    pub fn project(
        &self,
        store: Store<'_>,
        entry: &Entry,
        session_id: Option<&str>,
    ) -> Result<Option<Value>, String> {
        let declared = match session_id {
            Some(_) => entry.manifest.projection.session,
            None => entry.manifest.projection.agent,
        };
        if !declared {
            return Ok(None);
        }
        let rows = tables::load_rows(store.sql(), entry.id()).map_err(|e| e.to_string())?;
        self.projected(entry, &State::of(entry, rows), session_id)
            .map_err(Failure::reason)
    }

    /// `entry`'s projection of `state` (the Session's for `session_id`,
    /// else the Agent's), within its bound: `None` when it publishes none.
    pub(super) fn projected(
        &self,
        entry: &Entry,
        state: &State,
        session_id: Option<&str>,
    ) -> Result<Option<Value>, Failure> {
        let scope = if session_id.is_some() {
            "session"
        } else {
            "agent"
        };
        let id = entry.id();
        let session = session_id.map(|s| SessionRef {
            id: s,
            position: None,
        });
        let call = Call {
            kind: "project",
            session,
            event: json!({"scope": scope}),
            now_ms: 0,
            sends_allowed: false,
            closed: &[],
        };
        let answer = self.ask(entry, &state.rows, call)?;
        let Some(value) = answer.value else {
            return Ok(None);
        };
        let bytes = value.to_string().len();
        if bytes > EXTENSION_PROJECTION_BYTES_MAX {
            return Err(Failure::Bound(format!(
                "extension {id}: the {scope} projection is {bytes} bytes of JSON; at most {EXTENSION_PROJECTION_BYTES_MAX}"
            )));
        }
        Ok(Some(value))
    }

    /// The producer history of `session_id` each roster extension that
    /// keeps one holds, by extension id (read from committed state).
    pub fn session_histories(
        &self,
        store: Store<'_>,
        session_id: &str,
    ) -> Result<BTreeMap<String, History>, ApiError> {
        let keeping = || {
            self.roster
                .entries()
                .iter()
                .filter(|e| e.manifest.projection.history)
        };
        if keeping().next().is_none() {
            return Ok(BTreeMap::new());
        }
        // Looked up, not taken out: removing from a map of this type would
        // compile its rebalancing code into the wasm for this one use.
        let stored = history::load(store.sql(), session_id)?;
        Ok(keeping()
            .map(|e| {
                (
                    e.id().to_owned(),
                    stored.get(e.id()).cloned().unwrap_or_default(),
                )
            })
            .collect())
    }

    /// Every Session projection of `session_id`, by extension id. A
    /// projection that fails is left out and its error returned beside.
    pub fn session_projections(
        &self,
        store: Store<'_>,
        session_id: &str,
    ) -> (BTreeMap<String, Value>, Vec<String>) {
        let mut values = BTreeMap::new();
        let mut errors = Vec::new();
        for entry in self.roster.entries() {
            match self.project(store, entry, Some(session_id)) {
                Ok(Some(v)) => {
                    values.insert(entry.id().to_owned(), v);
                }
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        (values, errors)
    }

    /// Runs the `kind` builder (prompt or tools) of every running extension
    /// that has one, over committed state: each extension's answer or error.
    fn builders(
        &self,
        store: Store<'_>,
        kind: &str,
        session_id: &str,
        command_id: &str,
    ) -> Vec<(&Entry, Result<Answer, String>)> {
        let Ok(meta) = tables::meta_rows(store.sql()) else {
            return Vec::new();
        };
        self.roster
            .entries()
            .iter()
            .filter(|e| match kind {
                "prompt" => e.manifest.prompt,
                _ => e.manifest.tools,
            })
            .filter(|e| meta.get(e.id()).is_some_and(|m| m.stopped.is_none()))
            .map(|e| (e, self.built(store, e, kind, session_id, command_id)))
            .collect()
    }

    /// Running extensions' prompt sections for a model call of the run
    /// headed by `command_id`, each extension's within
    /// [`EXTENSION_PROMPT_BYTES_MAX`]; a builder that fails is left out and
    /// its error returned beside.
    pub fn prompt_sections(
        &self,
        store: Store<'_>,
        session_id: &str,
        command_id: &str,
    ) -> (Vec<String>, Vec<String>) {
        let mut sections = Vec::new();
        let mut errors = Vec::new();
        for (entry, answer) in self.builders(store, "prompt", session_id, command_id) {
            let added = match answer {
                Ok(answer) => answer.sections.unwrap_or_default(),
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let bytes: usize = added.iter().map(String::len).sum();
            if bytes > EXTENSION_PROMPT_BYTES_MAX {
                errors.push(format!(
                    "extension {}: prompt sections of {bytes} bytes; at most {EXTENSION_PROMPT_BYTES_MAX}",
                    entry.id()
                ));
                continue;
            }
            sections.extend(added.into_iter().filter(|s| !s.trim().is_empty()));
        }
        (sections, errors)
    }

    /// Running extensions' commands offered to the model for the run
    /// headed by `command_id`: `(extension, markers)`, each marker a
    /// declared Session command.
    fn command_tools(
        &self,
        store: Store<'_>,
        session_id: &str,
        command_id: &str,
    ) -> (Vec<(&Entry, Vec<ToolMarker>)>, Vec<String>) {
        let mut tools = Vec::new();
        let mut errors = Vec::new();
        for (entry, answer) in self.builders(store, "tools", session_id, command_id) {
            let markers = match answer {
                Ok(answer) => answer.tools.unwrap_or_default(),
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let bad = markers.iter().find(|m| {
                entry
                    .manifest
                    .commands
                    .get(&m.command)
                    .is_none_or(|c| c.scope != Scope::Session)
            });
            match bad {
                Some(m) => errors.push(format!(
                    "extension {}: the tools builder offered `{}`, not a declared Session command",
                    entry.id(),
                    m.command
                )),
                None if !markers.is_empty() => tools.push((entry, markers)),
                None => {}
            }
        }
        (tools, errors)
    }

    /// The modules of the commands running extensions offer to the model
    /// in the run headed by `command_id`: module = the extension id,
    /// granted by its roster `grantKey`; each operation a declared Session
    /// command (`write`, safe to replay: a replay answers the stored
    /// result). A builder's error leaves its module out and is returned.
    pub fn tool_modules(
        &self,
        store: Store<'_>,
        session_id: &str,
        command_id: &str,
    ) -> (Vec<crate::capability::Module>, Vec<String>) {
        use crate::capability::{Access, Module, ModuleSpec, OperationSpec};
        let (offered, mut errors) = self.command_tools(store, session_id, command_id);
        let mut modules = Vec::new();
        for (entry, markers) in offered {
            let operations = markers
                .iter()
                .map(|m| {
                    let decl = &entry.manifest.commands[&m.command];
                    OperationSpec {
                        name: m.command.clone(),
                        description: m
                            .description
                            .clone()
                            .or_else(|| decl.description.clone())
                            .unwrap_or_else(|| format!("{}.{}", entry.id(), m.command)),
                        input_schema: decl
                            .input_schema
                            .clone()
                            .unwrap_or_else(|| json!({"type": "object"})),
                        access: Access::Write,
                        confirm: false,
                        replay_safe: true,
                    }
                })
                .collect();
            let spec = ModuleSpec {
                id: entry.id().to_owned(),
                operations,
            };
            match Module::from_spec(spec) {
                Ok(module) => {
                    let module = module.granted_by(&entry.manifest.grant_key);
                    let direct = entry.manifest.direct;
                    modules.push(if direct {
                        module.offered_direct()
                    } else {
                        module
                    });
                }
                Err(e) => errors.push(format!("extension {}: its tools: {}", entry.id(), e.0)),
            }
        }
        (modules, errors)
    }

    /// Whether `module_id` is an extension's command module.
    pub fn is_tool_module(&self, module_id: &str) -> bool {
        self.roster.get(module_id).is_some_and(|e| e.manifest.tools)
    }

    /// Runs a prompt or tools builder over committed state.
    pub(super) fn built(
        &self,
        store: Store<'_>,
        entry: &Entry,
        kind: &str,
        session_id: &str,
        command_id: &str,
    ) -> Result<Answer, String> {
        let rows = tables::load_rows(store.sql(), entry.id()).map_err(|e| e.to_string())?;
        let state = State::of(entry, rows);
        let position = store.position(session_id).ok();
        let call = Call {
            kind,
            session: Some(SessionRef {
                id: session_id,
                position,
            }),
            event: json!({"sessionId": session_id, "commandId": command_id}),
            now_ms: 0,
            sends_allowed: false,
            closed: &[],
        };
        self.ask(entry, &state.rows, call).map_err(Failure::reason)
    }

    /// One extension's status, with its Agent projection.
    pub fn status(&self, store: Store<'_>, id: &str) -> Result<Status, ApiError> {
        self.status_of(store, self.entry(id)?)
    }

    /// Every roster extension's status, with its Agent projection.
    pub fn statuses(&self, store: Store<'_>) -> Result<Vec<Status>, ApiError> {
        self.roster
            .entries()
            .iter()
            .map(|e| self.status_of(store, e))
            .collect()
    }

    pub(super) fn status_of(&self, store: Store<'_>, entry: &Entry) -> Result<Status, ApiError> {
        let meta = tables::meta_rows(store.sql())?;
        let m = meta.get(entry.id());
        Ok(Status {
            id: entry.id().to_owned(),
            version: entry.manifest.version.clone(),
            revision: entry.revision.clone(),
            state_version: m.map_or(entry.manifest.state.version, |m| m.state_version),
            grant_key: entry.manifest.grant_key.clone(),
            feature: entry.manifest.feature.clone(),
            stopped: m.and_then(|m| {
                m.stopped.clone().map(|reason| Stop {
                    reason,
                    at: m.stopped_at,
                })
            }),
            behind: m.is_some_and(|m| m.cursor.is_some()),
            projection: self.project(store, entry, None).ok().flatten(),
            commands: entry
                .manifest
                .commands
                .iter()
                .map(|(name, c)| CommandInfo {
                    name: name.clone(),
                    scope: c.scope.as_str(),
                    description: c.description.clone(),
                })
                .collect(),
        })
    }
}
