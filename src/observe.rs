//! Observation: the frames a watcher receives after its snapshot. Frames are
//! built by the core and published by the host after the transition that
//! caused them commits (persist, then send); streamed tokens exist only as
//! frames, never as rows.

use crate::extension::{Extensions, Touched};
use crate::limits::PROJECTIONS_PUBLISHED_MAX;
use crate::settlement::Settlement;
use crate::store::Store;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::{BTreeSet, HashMap};

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Frame {
    #[serde(rename_all = "camelCase")]
    Admitted {
        command_id: String,
        request_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Started {
        command_id: String,
        attempt: u32,
    },
    #[serde(rename_all = "camelCase")]
    Delta {
        command_id: String,
        text: String,
    },
    Message {
        message: Box<RawValue>,
    },
    /// The Session's selected branch changed (a `select`, or a retry or a
    /// prompt with `after` started its turn on a new branch): it runs
    /// through `entryId` now (`None`: from the Session's start). The
    /// watcher's messages are of another branch: read the Session again.
    #[serde(rename_all = "camelCase")]
    Branch {
        entry_id: Option<String>,
    },
    Settled {
        settlement: Settlement,
    },
    /// An extension's projection, published after the commit that changed
    /// it: its Session projection on that Session's watch, its Agent
    /// projection (`scope: "agent"`) on every watch.
    #[serde(rename_all = "camelCase")]
    Extension {
        extension_id: String,
        scope: &'static str,
        value: serde_json::Value,
        /// The producer history of a Session projection, when the
        /// extension keeps one (`.projection({ history: true })`).
        #[serde(skip_serializing_if = "Option::is_none")]
        history: Option<serde_json::Value>,
    },
    /// An attention item an extension set (`item`) or cleared (`item`
    /// null), published on the Session's watch after the commit; `id` is
    /// qualified by `extensionId`.
    #[serde(rename_all = "camelCase")]
    Attention {
        session_id: String,
        extension_id: String,
        id: String,
        item: Option<crate::attention::Item>,
    },
    /// The turn paused before a model call its budget cannot cover
    /// (`reason`: `budget_reached`): it stays running, with nothing spent,
    /// and goes on (a `started` frame, at the same attempt) once the budget
    /// covers the call: raised, or the Agent's day over. Cancel and abort
    /// end it as usual.
    #[serde(rename_all = "camelCase")]
    Paused {
        command_id: String,
        reason: &'static str,
        budget: crate::budget::Reached,
    },
    /// Something the run could not offer, said once at its start (e.g.
    /// `execute` without a `LOADER` binding).
    #[serde(rename_all = "camelCase")]
    Diagnostic {
        command_id: String,
        diagnostic: String,
    },
    /// A tool call the host runs: `started`, then `progress` reports (the
    /// tool's live counters in `result.data`, at most one per
    /// `TOOL_PROGRESS_INTERVAL_MS`), then `ended` with `isError` once its
    /// outcome is recorded (just before its `tool` message). Memory only,
    /// like `delta`: the `tool` message is the durable record.
    #[serde(rename_all = "camelCase")]
    Tool {
        command_id: String,
        tool_call_id: String,
        name: String,
        phase: ToolPhase,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<ToolEventResult>,
        #[serde(skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolPhase {
    Started,
    Progress,
    Ended,
}

/// A `progress` frame's result: the tool's report, as it gave it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolEventResult {
    pub data: Box<RawValue>,
}

/// A failed model call, published as a `runtime-error` event.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeError {
    pub command_id: String,
    pub diagnostic: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<i64>,
}

/// One publication to a Session's watchers: its SSE event name and data.
#[derive(Debug, Clone)]
pub enum Event {
    Frame(Frame),
    RuntimeError(RuntimeError),
}

impl Event {
    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Frame(_) => "frame",
            Event::RuntimeError(_) => "runtime-error",
        }
    }
}

/// Extensions' projections last published, by extension and Session
/// (`None`: the Agent's), so an unchanged value is not sent again. At most
/// [`PROJECTIONS_PUBLISHED_MAX`] are remembered: past it all are forgotten
/// and values are sent again once (harmless: a watcher replaces a
/// projection with the one it receives).
#[derive(Debug, Default)]
pub struct Projections {
    published: HashMap<(String, Option<String>), String>,
}

impl Projections {
    /// The frames of the projections the last transitions may have changed
    /// (`touched`, from [`Extensions::take_touched`]), read from committed
    /// state, each with the watched Session it goes to: for each touched
    /// extension, its Session projection to that Session if watched, its
    /// Agent projection to every watched Session (`sessions`). A value
    /// equal to the one last published is left out. Also what could not be
    /// read (each projection is then left out).
    pub fn frames(
        &mut self,
        ext: &Extensions,
        store: Store<'_>,
        touched: &BTreeSet<Touched>,
        sessions: &[String],
    ) -> (Vec<(String, Frame)>, Vec<String>) {
        let mut frames = Vec::new();
        let mut errors = Vec::new();
        let mut ids: Vec<&str> = touched.iter().map(|t| t.extension.as_str()).collect();
        ids.dedup();
        for id in ids {
            let Some(entry) = ext.roster().get(id) else {
                continue;
            };
            let scopes = sessions.iter().map(|s| Some(s.as_str()));
            for scope in scopes.chain([None]) {
                let key = (id.to_owned(), scope.map(str::to_owned));
                let value = match ext.project(store, entry, scope) {
                    Ok(Some(value)) if self.changed(&key, value.to_string()) => value,
                    Ok(Some(_)) => continue,
                    // A projection that stopped publishing goes out once as
                    // null, as the read leaves it out from then on.
                    Ok(None) if self.published.remove(&key).is_some() => serde_json::Value::Null,
                    Ok(None) => continue,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                };
                let history = match scope {
                    Some(session_id) if entry.manifest.projection.history => {
                        match ext.session_histories(store, session_id) {
                            Ok(all) => all.get(id).and_then(|h| crate::json::to_value(h).ok()),
                            Err(e) => {
                                errors.push(e.to_string());
                                None
                            }
                        }
                    }
                    _ => None,
                };
                let frame = Frame::Extension {
                    extension_id: id.to_owned(),
                    scope: if scope.is_some() { "session" } else { "agent" },
                    value,
                    history,
                };
                match scope {
                    Some(session) => frames.push((session.to_owned(), frame)),
                    None => frames.extend(sessions.iter().map(|s| (s.clone(), frame.clone()))),
                }
            }
        }
        (frames, errors)
    }

    /// Remembers `text` as `key`'s value; false when it was already.
    fn changed(&mut self, key: &(String, Option<String>), text: String) -> bool {
        if self.published.get(key) == Some(&text) {
            return false;
        }
        if self.published.len() >= PROJECTIONS_PUBLISHED_MAX {
            self.published.clear();
        }
        self.published.insert(key.clone(), text);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_projection_is_not_published_again_and_the_memory_is_bounded() {
        let mut p = Projections::default();
        let key = |i: usize| (format!("e{i}"), None);
        assert!(p.changed(&key(0), "1".into()));
        assert!(!p.changed(&key(0), "1".into()), "the same value again");
        assert!(p.changed(&key(0), "2".into()), "a new value");
        assert!(
            p.changed(&("e0".into(), Some("s".into())), "2".into()),
            "another scope"
        );
        for i in 1..PROJECTIONS_PUBLISHED_MAX + 10 {
            p.changed(&key(i), "x".into());
        }
        assert!(p.published.len() <= PROJECTIONS_PUBLISHED_MAX);
    }
}
