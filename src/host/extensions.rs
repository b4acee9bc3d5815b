//! The Agent's extensions in the Durable Object: the shim's roster and
//! callbacks (`js/do/hooks.mjs`, `js/extensions.mjs`) behind the core's
//! [`Extensions`], and the projections published after each commit. Every
//! rule (state, hooks, timers, cursors) is the core's.

use super::bindings::{log_error, JsExtensions};
use super::Inner;
use crate::extension::{Extensions, Host, Roster};
use crate::observe::Frame;
use crate::session::admission::ExtensionSends;
use std::collections::HashMap;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// Calls the authored callbacks through the shim.
struct ShimHost(JsExtensions);

impl Host for ShimHost {
    fn call(&self, request: &str) -> String {
        self.0.call(request)
    }
}

/// The roster the shim describes, or why it is unusable (every request is
/// then refused with `host_misconfigured`).
pub(super) fn from_shim(shim: JsValue) -> Result<Extensions, String> {
    if shim.is_undefined() || shim.is_null() {
        return Ok(Extensions::none());
    }
    let shim: JsExtensions = shim.unchecked_into();
    let manifests = shim.manifests();
    if let Ok(serde_json::Value::Object(o)) = serde_json::from_str(&manifests) {
        let why = o
            .get("error")
            .and_then(|e| e.as_str())
            .unwrap_or("extensions() answered an object")
            .to_owned();
        return Err(why);
    }
    let roster = Roster::parse(&manifests).map_err(|e| e.to_string())?;
    Ok(Extensions::new(roster, Box::new(ShimHost(shim))))
}

/// Projections last published, by extension and Session (`None`: the
/// Agent's), so an unchanged value is not sent again.
pub(super) type Published = HashMap<(String, Option<String>), String>;

/// Projections remembered as published (extensions x watched Sessions).
const PUBLISHED_MAX: usize = 4_096;

impl Inner {
    /// The extensions of a ready instance, for a host-only call.
    pub(super) fn extensions_ready(&self) -> Result<&Extensions, JsValue> {
        self.ready().map_err(super::js_api_error)?;
        self.extensions()
            .ok_or_else(|| js_sys::Error::new("no extensions").into())
    }

    /// The extensions, when the roster is usable.
    pub(super) fn extensions(&self) -> Option<&Extensions> {
        self.extensions.as_ref().ok()
    }

    /// Publishes the projections the last transitions may have changed:
    /// for each touched extension, its Session projection to every watched
    /// Session and its Agent projection to all of them. Read after the
    /// commit, from committed state.
    pub(super) fn publish_projections(&self) {
        let Some(ext) = self.extensions() else {
            return;
        };
        self.publish_attention(ext);
        let touched = ext.take_touched();
        if touched.is_empty() {
            return;
        }
        let sessions = self.observers.watched_sessions();
        let store = self.store();
        let mut ids: Vec<&str> = touched.iter().map(|t| t.extension.as_str()).collect();
        ids.dedup();
        for id in ids {
            let Some(entry) = ext.roster().get(id) else {
                continue;
            };
            let mut scopes: Vec<Option<&str>> = sessions.iter().map(|s| Some(s.as_str())).collect();
            scopes.push(None);
            for scope in scopes {
                let value = match ext.project(store, entry, scope) {
                    Ok(Some(value)) => value,
                    Ok(None) => continue,
                    Err(e) => {
                        log_error(e);
                        continue;
                    }
                };
                let text = value.to_string();
                let key = (id.to_owned(), scope.map(str::to_owned));
                if self.published.borrow().get(&key) == Some(&text) {
                    continue;
                }
                let history = match scope {
                    Some(session_id) if entry.manifest.projection.history => {
                        match ext.session_histories(store, session_id) {
                            Ok(all) => all.get(id).and_then(|h| crate::json::to_value(h).ok()),
                            Err(e) => {
                                log_error(e);
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
                let targets: Vec<&String> = match scope {
                    Some(_) => sessions
                        .iter()
                        .filter(|s| Some(s.as_str()) == scope)
                        .collect(),
                    None => sessions.iter().collect(),
                };
                for session in targets {
                    self.publish(session, "frame", &frame);
                }
                let mut published = self.published.borrow_mut();
                // Bounded: past it, values are sent again once (harmless).
                if published.len() >= PUBLISHED_MAX {
                    published.clear();
                }
                published.insert(key, text);
            }
        }
    }

    /// Publishes the attention items the last transitions changed to the
    /// watchers of their Sessions, each as committed (set, or cleared).
    fn publish_attention(&self, ext: &Extensions) {
        let touched = ext.take_attention_touched();
        if touched.is_empty() {
            return;
        }
        // Each change staged its delivery in the same transition.
        self.staged_delivery();
        self.request_host_work();
        let sessions = self.observers.watched_sessions();
        let store = self.store();
        for t in touched {
            if !sessions.contains(&t.session_id) {
                continue;
            }
            let item = match crate::attention::item(store.sql(), &t.session_id, &t.extension, &t.id)
            {
                Ok(item) => item,
                Err(e) => {
                    log_error(format!("attention frame: {e}"));
                    continue;
                }
            };
            let frame = Frame::Attention {
                session_id: t.session_id.clone(),
                extension_id: t.extension,
                id: t.id,
                item,
            };
            self.publish(&t.session_id, "frame", &frame);
        }
    }

    /// Extension timers and replays due now, run in the alarm's pass.
    /// Bounded per pass; what is left shows in the next deadline.
    pub(super) fn extension_pass(&self) {
        let Some(ext) = self.extensions() else {
            return;
        };
        if ext.roster().is_empty() {
            return;
        }
        let pass = self.with_ctx(|ctx| ext.pass(ctx, &ExtensionSends));
        match pass.fired {
            Ok(fired) => self.apply(crate::http::sent_effects(&fired.sent)),
            Err(e) => log_error(format!("extension timers: {e}")),
        }
        if let Err(e) = pass.replayed {
            log_error(format!("extension replay: {e}"));
        }
        self.publish_projections();
    }
}
