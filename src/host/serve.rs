//! The serving path: a platform request becomes an [`HttpRequest`], the
//! core answers it after its write commits, and the host carries out the
//! answer's effects (stop a cancelled call, publish frames, wake long
//! polls, request reconciliation, park a settlement poll, open a watch).

use super::bindings;
use super::{body, watch, Inner};
use crate::error::ApiError;
use crate::extension::Extensions;
use crate::http::{self, Effects, HttpRequest, HttpResponse, META_HEADER};
use crate::limits::BODY_BYTES_MAX;
use futures::future::select;
use std::rc::Rc;
use wasm_bindgen::prelude::*;

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
        self.with_ctx(|ctx| http::handle(ctx, self.extensions(), req))
    }

    pub(super) async fn fetch(
        &self,
        request: &web_sys::Request,
    ) -> Result<web_sys::Response, JsValue> {
        let url = request.url();
        let (path, query) = split_url(&url);
        #[cfg(feature = "fault-injection")]
        if let Some(marker) = &self.config.panic_marker {
            // Fault injection (tests): a trap in a request's own code.
            assert!(
                !path.contains(marker.as_str()),
                "fault injection: panic marker in the request path"
            );
        }
        if let Some((session, route)) = crate::ui::Route::parse(path) {
            return self.ui_fetch(request, session, route, query).await;
        }
        let mut req = match read_request(request).await {
            Ok(req) => req,
            Err(e) => return to_response(&e.into()),
        };
        if req.path == "/acp" {
            return self.acp(&req);
        }
        let mut response = self.serve(&req);
        if let Some(park) = response.effects.park.take() {
            match self.observers.wait(&park.command_id) {
                Err(watch::Full) => response = ApiError::TooManyObservers.into(),
                Ok(settled) => {
                    // The client going away never cancels the command.
                    let _ = select(settled, bindings::sleep(park.timeout_ms)).await;
                    req.waited = true;
                    response = self.serve(&req);
                }
            }
        }
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

async fn read_request(request: &web_sys::Request) -> Result<HttpRequest, ApiError> {
    let url = request.url();
    let (path, query) = split_url(&url);
    let method = request.method();
    let body = match method.as_str() {
        // A declared oversize body is refused all the same.
        "GET" | "HEAD" => body::declared(request, BODY_BYTES_MAX).map(|()| Vec::new())?,
        // Chunked bodies too: counted as they stream, cancelled past the bound.
        _ => body::read_bounded(request, BODY_BYTES_MAX).await?,
    };
    Ok(HttpRequest {
        method,
        path: path.to_owned(),
        query: query.to_owned(),
        meta: request.headers().get(META_HEADER).ok().flatten(),
        body,
        waited: false,
    })
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
