//! The serving path: a platform request becomes an [`HttpRequest`], the
//! core answers it after its write commits, and the host carries out the
//! answer's effects (stop a cancelled call, publish frames, wake long
//! polls, request reconciliation, park a settlement poll, open a watch).

use super::bindings;
use super::{body, watch, Inner};
use crate::error::ApiError;
use crate::extension::Extensions;
use crate::http::{self, Effects, HttpRequest, HttpResponse, Park, META_HEADER};
use crate::limits::BODY_BYTES_MAX;
use futures::future::select;
use std::rc::Rc;
use wasm_bindgen::prelude::*;

/// What serving a request whose body is read came to.
pub(super) enum Served {
    Now(web_sys::Response),
    /// A settlement long poll, to answer with [`Inner::parked`].
    Parked(Parked),
}

/// A settlement long poll whose wake was registered in the call that found
/// its command unsettled: a settlement published before the poll's future
/// first runs (a fresh core's first reconcile, queued as a microtask) still
/// wakes it.
pub(super) struct Parked {
    pub(super) req: HttpRequest,
    pub(super) timeout_ms: u64,
    pub(super) settled: Result<futures::channel::oneshot::Receiver<()>, watch::Full>,
    pub(super) then: Then,
}

/// What a parked request's response becomes.
pub(super) enum Then {
    /// The response itself ([`Inner::answer`]).
    Respond,
    /// An MCP tool call's result (`host/mcp_server.rs`).
    #[cfg(feature = "mcp-server")]
    Tool(crate::mcp_server::Call),
}

impl Inner {
    pub(super) fn serve(&self, req: &HttpRequest) -> HttpResponse {
        if let Err(e) = self.ready() {
            return e.into();
        }
        if let Err(why) = &self.config.meta {
            return ApiError::HostMisconfigured(why.clone()).into();
        }
        if let (false, Err(why)) = (cfg!(feature = "fleet"), &self.fleet) {
            // A lean build's Agents would run without the fleet the host
            // configured: a configuration error, naming the feature.
            return ApiError::HostMisconfigured(why.clone()).into();
        }
        let hosted = http::Hosted {
            extensions: self.extensions(),
            models: self.model_policy(),
            budget: self.config.budget,
        };
        self.with_ctx(|ctx| http::handle(ctx, &hosted, req))
    }

    /// A request whose body the core reads itself: the browser bridge's
    /// routes (read after their own checks), and any other the shim hands
    /// over unread.
    pub(super) async fn fetch(
        &self,
        request: &web_sys::Request,
    ) -> Result<web_sys::Response, JsValue> {
        let url = request.url();
        let (path, query) = split_url(&url);
        self.fault_injection(path);
        if let Some((session, route)) = crate::ui::Route::parse(path) {
            return self.ui_fetch(request, session, route, query).await;
        }
        let body = body::read_bounded(request, BODY_BYTES_MAX).await;
        match self.serve_read(request, path, query, body)? {
            Served::Now(response) => Ok(response),
            Served::Parked(parked) => self.parked(parked).await,
        }
    }

    /// A request whose body the shim read (`readBody` of
    /// `js/do/body.mjs`): answered in this call unless it is a settlement
    /// long poll that must wait.
    pub(super) fn fetch_read(
        &self,
        request: &web_sys::Request,
        read: JsValue,
    ) -> Result<Served, JsValue> {
        let url = request.url();
        let (path, query) = split_url(&url);
        self.fault_injection(path);
        if crate::ui::Route::parse(path).is_some() {
            // The bridge's routes check the request before reading its body.
            return to_response(
                &ApiError::Internal("a browser bridge route reached the core read".into()).into(),
            )
            .map(Served::Now);
        }
        let body = body::take(read, BODY_BYTES_MAX);
        self.serve_read(request, path, query, body)
    }

    /// Fault injection (tests): a trap in a request's own code.
    fn fault_injection(&self, _path: &str) {
        #[cfg(feature = "fault-injection")]
        if let Some(marker) = &self.config.panic_marker {
            assert!(
                !_path.contains(marker.as_str()),
                "fault injection: panic marker in the request path"
            );
        }
    }

    fn serve_read(
        &self,
        request: &web_sys::Request,
        path: &str,
        query: &str,
        body: Result<Vec<u8>, ApiError>,
    ) -> Result<Served, JsValue> {
        let body = match body {
            Ok(body) => body,
            Err(e) => return to_response(&e.into()).map(Served::Now),
        };
        let req = HttpRequest {
            method: request.method(),
            path: path.to_owned(),
            query: query.to_owned(),
            meta: request.headers().get(META_HEADER).ok().flatten(),
            body,
            waited: false,
        };
        if req.path == "/acp" {
            return self.acp(&req).map(Served::Now);
        }
        #[cfg(feature = "mcp-server")]
        if req.path == "/mcp" {
            return self.mcp(request, req);
        }
        let mut response = self.serve(&req);
        match response.effects.park.take() {
            Some(park) => Ok(Served::Parked(self.park(req, park, Then::Respond))),
            None => self.answer(&req, response).map(Served::Now),
        }
    }

    /// Parks `req` (a settlement long poll) with its wake registered now,
    /// in this call (see [`Parked`]); `then` says how it is answered.
    pub(super) fn park(&self, req: HttpRequest, park: Park, then: Then) -> Parked {
        Parked {
            req,
            timeout_ms: park.timeout_ms,
            settled: self.observers.wait(&park.command_id),
            then,
        }
    }

    /// A settlement long poll's answer, once its command settled or its
    /// time is up.
    pub(super) async fn parked(&self, parked: Parked) -> Result<web_sys::Response, JsValue> {
        let Parked {
            mut req,
            timeout_ms,
            settled,
            then,
        } = parked;
        let response = match settled {
            Err(watch::Full) => ApiError::TooManyObservers.into(),
            Ok(settled) => {
                // The client going away never cancels the command.
                let _ = select(settled, bindings::sleep(timeout_ms)).await;
                req.waited = true;
                self.serve(&req)
            }
        };
        match then {
            Then::Respond => self.answer(&req, response),
            #[cfg(feature = "mcp-server")]
            Then::Tool(call) => self.tool_result(&call, response),
        }
    }

    /// The response to `req`, once the host carried out its effects (or
    /// opened its watch).
    fn answer(
        &self,
        req: &HttpRequest,
        mut response: HttpResponse,
    ) -> Result<web_sys::Response, JsValue> {
        let mut effects = std::mem::take(&mut response.effects);
        if req.method == "HEAD" {
            response.body = None;
            effects.watch = None;
        }
        if let (Some(session), 200, Some(snapshot)) =
            (&effects.watch, response.status, &response.body)
        {
            let me = self.me.clone();
            let source: watch::SnapshotSource =
                Rc::new(move |session| me.upgrade()?.snapshot(session));
            return match self.observers.watch(session, snapshot, source)? {
                Ok(stream) => Ok(stream),
                Err(watch::Full) => to_response(&ApiError::TooManyObservers.into()),
            };
        }
        self.apply(effects);
        self.publish_projections();
        to_response(&response)
    }

    /// Carries out what a committed transition asks for.
    pub(super) fn apply(&self, effects: Effects) {
        for head in &effects.stop_turns {
            self.drop_fresh(head);
            if let Some(stopper) = self.live.borrow().get(head) {
                stopper.stop();
            }
        }
        for (session, frame) in &effects.frames {
            self.publish(session, "frame", frame);
        }
        for command in &effects.settled {
            self.observers.settled(command);
        }
        if let Some(session) = &effects.ended_session {
            self.observers.close_session(session);
            self.ui_session_ended(session);
        }
        self.hold_fresh(effects.fresh_turns);
        // A settled hook that ran in this transition (a cancel, a deleted
        // Session) may have moved a timer the alarm does not cover yet.
        if effects.reconcile || self.extensions().is_some_and(Extensions::take_rearm) {
            self.request_reconcile();
        }
        if effects.delivery {
            self.staged_delivery();
            self.request_host_work();
        }
        if !effects.settled.is_empty() || effects.ended_session.is_some() {
            // A delegated command's reply is staged when it settles (or
            // its Session is deleted).
            self.mail_after_transition();
        }
    }
}

/// Path and query of an absolute URL the runtime built (`scheme://host/p?q`);
/// cheaper than constructing a JS `URL` on the hot path.
fn split_url(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(url, |i| &url[i + 3..]);
    let target = after_scheme.find('/').map_or("/", |i| &after_scheme[i..]);
    let target = target.split('#').next().unwrap_or(target);
    target.split_once('?').unwrap_or((target, ""))
}

pub(super) fn to_response(r: &HttpResponse) -> Result<web_sys::Response, JsValue> {
    body::respond(r.status, r.body.as_deref())
}
