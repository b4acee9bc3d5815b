//! The Agent's extensions in the Durable Object: the shim's roster and
//! callbacks (`js/do/hooks.mjs`, `js/extensions.mjs`) behind the core's
//! [`Extensions`], and the projections published after each commit. Every
//! rule (state, hooks, timers, cursors) is the core's.

use super::bindings::{log_error, JsExtensions};
use super::Inner;
use crate::extension::{Extensions, Host, Roster};
use crate::observe::Frame;
use crate::session::admission::ExtensionSends;
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
        let (frames, errors) =
            self.machine
                .borrow_mut()
                .projections()
                .frames(ext, self.store(), &touched, &sessions);
        for e in errors {
            log_error(e);
        }
        for (session, frame) in frames {
            self.publish(&session, "frame", &frame);
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
