//! Performs the browser bridge ([`crate::ui`] decides): the routes under
//! `/browser/sessions/<sessionId>/browser/`, the event streams they open,
//! and the `ui` calls of runs waiting for the browser's result. Live state
//! only, like watchers: a restart loses it, the browser reconnects, and a
//! call that was waiting ends as the interrupted tool call it is (an
//! unsafe `ui.execute` is marked started before it asks, so it is never
//! asked again).

use super::bindings::{self, log_warn, JsTools, RandomIds};
use super::serve::to_response;
use super::{body, Inner};
use crate::error::ApiError;
use crate::http::HttpResponse;
use crate::limits::{
    BODY_BYTES_MAX, UI_HAS_SESSION_TIMEOUT_MS, UI_NO_BROWSER_MS, UI_STREAM_BACKLOG_BYTES_MAX,
};
use crate::run::operation::OperationCall;
use crate::ui::{Ask, Bridge, CallError, Config, Event, Route};
use futures::channel::oneshot;
use futures::future::{select, Either};
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{spawn_local, JsFuture};

/// The bridge's live state in this instance (`tools().ui`).
pub struct HostUi {
    config: Config,
    /// The shim's tools, which answer `hasSession`.
    js: JsTools,
    bridge: RefCell<Bridge>,
    /// Open event streams, by Session.
    streams: RefCell<HashMap<String, Vec<Rc<Stream>>>>,
    /// Calls waiting for their result, by request id.
    waiters: RefCell<HashMap<String, oneshot::Sender<Result<Value, CallError>>>>,
}

struct Stream {
    writer: web_sys::WritableStreamDefaultWriter,
    /// Ended by the host (`close`, the Session deleted), which counted it
    /// out of the bridge; the browser going away is seen on `closed`.
    ended: Cell<bool>,
    /// Bytes written that the browser has not read yet.
    backlog: Cell<usize>,
}

impl Stream {
    fn send(self: &Rc<Self>, (name, data): &Event) {
        // `data` is compact JSON: one line.
        self.write(&format!("event: {name}\ndata: {data}\n\n"));
    }

    fn write(self: &Rc<Self>, text: &str) {
        if self.ended.get() {
            return;
        }
        let bytes = text.len();
        if self.backlog.get() + bytes > UI_STREAM_BACKLOG_BYTES_MAX {
            // A browser this far behind is cut off; it reconnects and is
            // sent what waits then (its stream's `closed` counts it out).
            let aborted = JsFuture::from(self.writer.abort());
            spawn_local(async move {
                let _ = aborted.await;
            });
            return;
        }
        self.backlog.set(self.backlog.get() + bytes);
        let written = JsFuture::from(
            self.writer
                .write_with_chunk(&js_sys::Uint8Array::from(text.as_bytes())),
        );
        let me = Rc::clone(self);
        spawn_local(async move {
            if written.await.is_ok() {
                me.backlog.set(me.backlog.get() - bytes);
            }
        });
    }

    /// The host ends the stream.
    fn end(&self) {
        self.ended.set(true);
        let _ = self.writer.close();
    }
}

impl HostUi {
    pub fn new(config: Config, js: JsTools) -> HostUi {
        HostUi {
            config,
            js,
            bridge: RefCell::default(),
            streams: RefCell::default(),
            waiters: RefCell::default(),
        }
    }

    fn publish(&self, session: &str, event: &Event) {
        if let Some(streams) = self.streams.borrow().get(session) {
            for stream in streams {
                stream.send(event);
            }
        }
    }

    /// Ends every stream and fails every waiting call.
    pub fn close(&self, why: &str) {
        let requests = self.bridge.borrow_mut().close(why);
        for (_, streams) in self.streams.borrow_mut().drain() {
            streams.iter().for_each(|stream| stream.end());
        }
        for id in requests {
            if let Some(waiter) = self.waiters.borrow_mut().remove(&id) {
                let _ = waiter.send(Err(CallError::BridgeClosed(why.to_owned())));
            }
        }
    }

    /// A deleted Session: its streams end.
    pub fn end_session(&self, session: &str) {
        let Some(streams) = self.streams.borrow_mut().remove(session) else {
            return;
        };
        for stream in streams {
            if !stream.ended.get() {
                stream.end();
                self.bridge.borrow_mut().close_stream(session);
            }
        }
    }

    /// The run headed by `head` borrows the module (at each offer: the
    /// first borrows, later ones keep it).
    pub fn borrow(&self, session: &str, head: &str) {
        self.bridge.borrow_mut().borrow(session, head);
    }

    /// The run ended: its waiting requests are withdrawn.
    pub fn give_back(&self, head: &str) {
        let Some((session, withdrawn)) = self.bridge.borrow_mut().give_back(head) else {
            return;
        };
        for id in &withdrawn {
            self.waiters.borrow_mut().remove(id);
            self.publish(&session, &crate::ui::cancelled(id));
        }
    }

    /// Opens an event stream of `session`: the requests waiting unclaimed
    /// first, then each new one; ended by the browser or by `close`.
    fn open_stream(
        self: &Rc<Self>,
        session: &str,
        stored: bool,
    ) -> Result<Result<web_sys::Response, ApiError>, JsValue> {
        let pipe = web_sys::TransformStream::new()?;
        let stream = Rc::new(Stream {
            writer: pipe.writable().get_writer()?,
            ended: Cell::new(false),
            backlog: Cell::new(0),
        });
        let first = match self.bridge.borrow_mut().open_stream(session, stored) {
            Ok(first) => first,
            Err(e) => return Ok(Err(e)),
        };
        // An SSE comment first: the response starts at once.
        stream.write(": ready\n\n");
        for event in &first {
            stream.send(event);
        }
        let closing = JsFuture::from(stream.writer.closed());
        let (me, gone, key) = (Rc::clone(self), Rc::clone(&stream), session.to_owned());
        spawn_local(async move {
            let _ = closing.await;
            if gone.ended.replace(true) {
                return; // ended by the host, which counted it out
            }
            let mut streams = me.streams.borrow_mut();
            if let Some(list) = streams.get_mut(&key) {
                list.retain(|s| !Rc::ptr_eq(s, &gone));
                if list.is_empty() {
                    streams.remove(&key);
                }
            }
            drop(streams);
            me.bridge.borrow_mut().close_stream(&key);
        });
        self.streams
            .borrow_mut()
            .entry(session.to_owned())
            .or_default()
            .push(stream);
        let init = super::watch::event_stream_init()?;
        Ok(Ok(
            web_sys::Response::new_with_opt_readable_stream_and_init(
                Some(&pipe.readable()),
                &init,
            )?,
        ))
    }
}

/// What a route answers: JSON, or an event stream.
enum Answer {
    Json(Value),
    Stream(web_sys::Response),
}

impl Inner {
    /// Serves one of the bridge's routes (`session` as in the path).
    pub(super) async fn ui_fetch(
        &self,
        request: &web_sys::Request,
        session: &str,
        route: Route,
        query: &str,
    ) -> Result<web_sys::Response, JsValue> {
        match self.ui_answer(request, session, route, query).await {
            Ok(Answer::Stream(response)) => Ok(response),
            Ok(Answer::Json(value)) => to_response(&HttpResponse {
                status: 200,
                body: Some(value.to_string()),
                effects: Default::default(),
            }),
            Err(e) => to_response(&e.into()),
        }
    }

    async fn ui_answer(
        &self,
        request: &web_sys::Request,
        session: &str,
        route: Route,
        query: &str,
    ) -> Result<Answer, ApiError> {
        self.ready()?;
        route.check(session, &request.method(), query)?;
        // Read under every route's bound, as the core's routes are (an
        // upload cut off early resets the connection instead of answering
        // 413), then held to this route's own.
        let body = match route {
            Route::Events => Vec::new(),
            _ => {
                let body = body::read_bounded(request, BODY_BYTES_MAX).await?;
                route.check_body(body.len())?;
                body
            }
        };
        let Some(ui) = self.ui() else {
            return Err(ApiError::UiNotConfigured);
        };
        if route == Route::Events {
            let stored = self.ui_has_session(ui, session).await?;
            return ui
                .open_stream(session, stored)
                .map_err(|e| ApiError::Internal(bindings::error_message(&e)))?
                .map(Answer::Stream);
        }
        if route == Route::Claims {
            let claimed = ui
                .bridge
                .borrow_mut()
                .claim(session, &body, &mut RandomIds)?;
            return Ok(Answer::Json(claimed));
        }
        let answered = ui.bridge.borrow_mut().result(session, &body)?;
        if let Some(waiter) = ui.waiters.borrow_mut().remove(&answered.request_id) {
            let _ = waiter.send(answered.outcome.clone());
        }
        answered.response().map(Answer::Json)
    }

    /// Whether `session` may open a browser host: the host's
    /// `hasSession(sessionId)` (bounded by `UI_HAS_SESSION_TIMEOUT_MS`; a
    /// failure is logged and answers no), else the Session is stored here.
    async fn ui_has_session(&self, ui: &HostUi, session: &str) -> Result<bool, ApiError> {
        if !ui.config.has_session {
            return Ok(self.store().session_exists(session)?);
        }
        let Ok(controller) = web_sys::AbortController::new() else {
            return Ok(false);
        };
        let asked = JsFuture::from(ui.js.ui_has_session(session, &controller.signal()));
        match bindings::within(asked, UI_HAS_SESSION_TIMEOUT_MS, &controller, 0).await {
            Some(Ok(answer)) => Ok(answer.as_bool() == Some(true)),
            Some(Err(e)) => {
                log_warn(format!(
                    "tools().ui.hasSession threw: {}",
                    bindings::error_message(&e)
                ));
                Ok(false)
            }
            None => {
                log_warn(format!(
                    "tools().ui.hasSession did not answer within {UI_HAS_SESSION_TIMEOUT_MS} ms"
                ));
                Ok(false)
            }
        }
    }

    /// Runs one `ui` operation of a run: asks the Session's browser and
    /// waits for the result of its claim, at most its share of the tool
    /// timeout (`ui::wait_ms`), or until the call is stopped, or about
    /// `UI_NO_BROWSER_MS` when no browser is there to claim it. The gate ran
    /// before (an unsafe `ui.execute` is marked started by then).
    pub(super) async fn ui_call(
        &self,
        op: &OperationCall,
        signal: &web_sys::AbortSignal,
        tool_timeout_ms: u64,
    ) -> Result<Value, String> {
        let timeout_ms = crate::ui::wait_ms(tool_timeout_ms);
        let Some(ui) = self.ui() else {
            return Err("this Agent has no browser bridge".to_owned());
        };
        // The model sees an error's text as the tool's error.
        let ask = Ask::of(&op.operation, &op.args).map_err(|e| e.to_string())?;
        let session = &op.of.session_id;
        let (id, event) = ui
            .bridge
            .borrow_mut()
            .ask(&op.of.command_id, ask, &mut RandomIds)
            .map_err(|e| e.to_string())?;
        let (tx, rx) = oneshot::channel();
        ui.waiters.borrow_mut().insert(id.clone(), tx);
        ui.publish(session, &event);
        // Waits its share of the tool timeout, looking every
        // `UI_NO_BROWSER_MS`: unanswerable at two looks in a row (no
        // browser connected, the request unclaimed), it ends early.
        let waited = Box::pin(async {
            let unattended = || ui.bridge.borrow().unattended(session, &id);
            let (mut left, mut was) = (timeout_ms, unattended());
            while left > 0 {
                let nap = left.min(UI_NO_BROWSER_MS);
                bindings::sleep(nap).await;
                left -= nap;
                let is = unattended();
                if was && is {
                    return;
                }
                was = is;
            }
        });
        let ended = select(bindings::aborted(signal), waited);
        let stopped = match select(rx, ended).await {
            Either::Left((Ok(outcome), _)) => return outcome.map_err(|e| e.to_string()),
            // The run gave the module back (it ended).
            Either::Left((Err(_), _)) => true,
            Either::Right((Either::Left(_), _)) => true,
            Either::Right((Either::Right(_), _)) => false,
        };
        ui.waiters.borrow_mut().remove(&id);
        let withdrawn = ui.bridge.borrow_mut().abandon(session, &id, timeout_ms);
        let why = withdrawn.map(|(why, event)| {
            ui.publish(session, &event);
            why
        });
        Err(match (stopped, why) {
            (false, Some(why)) => why.to_string(),
            _ => format!("ui.{}: the call was stopped", op.operation),
        })
    }

    /// A deleted Session's browser streams end (its watches end too).
    pub(super) fn ui_session_ended(&self, session: &str) {
        if let Some(ui) = self.ui() {
            ui.end_session(session);
        }
    }

    /// Host-only (`ShiitakeDO#closeUi`): closes the browser bridge.
    pub(super) fn close_ui(&self, why: &str) {
        if let Some(ui) = self.ui() {
            ui.close(why);
        }
    }
}
