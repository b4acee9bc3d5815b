//! `POST /acp` in the Durable Object: the core's answer (`crate::acp`) as a
//! platform response, its transition's effects carried out, and a prompt's
//! stream opened as an observer of its Session before those effects
//! publish, so it misses none of its command's frames.

use super::watch::{Full, Observers};
use super::Inner;
use crate::acp::{self, Answer};
use crate::error::ApiError;
use crate::http::HttpRequest;
use wasm_bindgen::prelude::*;

impl Inner {
    pub(super) fn acp(&self, req: &HttpRequest) -> Result<web_sys::Response, JsValue> {
        if let Err(e) = self.ready() {
            return super::serve::to_response(&e.into());
        }
        if let Err(why) = &self.config.meta {
            return super::serve::to_response(&ApiError::HostMisconfigured(why.clone()).into());
        }
        let served = self.with_ctx(|ctx| acp::handle(ctx, req));
        let response = match served.answer {
            Answer::Json(body) => json(200, &body),
            Answer::Failed { status, body } => json(status, &body),
            Answer::Accepted => {
                let init = web_sys::ResponseInit::new();
                init.set_status(202);
                web_sys::Response::new_with_opt_str_and_init(None, &init)
            }
            Answer::Refused(e) => super::serve::to_response(&e.into()),
            Answer::Stream {
                messages,
                follow: None,
            } => Observers::answered(&messages),
            Answer::Stream {
                messages,
                follow: Some(follow),
            } => {
                // Kept to answer a refusal: the follow itself is handed over.
                let mut refusal = follow.clone();
                match self.observers.follow(follow, &messages)? {
                    Ok(stream) => Ok(stream),
                    // The prompt is admitted: the caller follows it again
                    // with the same requestId once a stream is free.
                    Err(Full) => Observers::answered(&[refusal.refuse(ApiError::TooManyObservers)]),
                }
            }
        };
        self.apply(served.effects);
        self.publish_projections();
        response
    }
}

fn json(status: u16, body: &str) -> Result<web_sys::Response, JsValue> {
    let init = web_sys::ResponseInit::new();
    init.set_status(status);
    let headers = web_sys::Headers::new()?;
    headers.set("content-type", "application/json; charset=utf-8")?;
    init.set_headers(&headers);
    web_sys::Response::new_with_opt_str_and_init(Some(body), &init)
}
