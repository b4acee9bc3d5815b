//! `/mcp` in the Durable Object: the core's decision (`crate::mcp_server`)
//! carried out. A tool call's route is served like any request (`serve`),
//! a settlement wait parked like `GET /sessions/:id/settlement`, and the
//! route's response, its effects applied, answered as the tool's result.

use super::body::respond;
use super::serve::{to_response, Served, Then};
use super::Inner;
use crate::http::{HttpRequest, HttpResponse};
use crate::mcp_server::{self, Answer, Call, Step};
use wasm_bindgen::prelude::*;

impl Inner {
    pub(super) fn mcp(
        &self,
        request: &web_sys::Request,
        req: HttpRequest,
    ) -> Result<Served, JsValue> {
        if let Err(e) = self.ready() {
            return to_response(&e.into()).map(Served::Now);
        }
        let allowed_hosts = match &self.config.mcp_allowed_hosts {
            Ok(hosts) => hosts,
            Err(why) => {
                let e = crate::error::ApiError::HostMisconfigured(why.clone());
                return to_response(&e.into()).map(Served::Now);
            }
        };
        let headers = request.headers();
        let origin = headers.get("origin").ok().flatten();
        let version = headers.get("mcp-protocol-version").ok().flatten();
        let url = request.url();
        let step = mcp_server::handle(&mcp_server::Request {
            http: &req,
            origin: origin.as_deref(),
            protocol_version: version.as_deref(),
            authority: authority(&url),
            allowed_hosts,
        });
        let call = match step {
            Step::Answer(answer) => return send(answer).map(Served::Now),
            Step::Call(call) => call,
        };
        let mut response = self.serve(&call.route);
        match response.effects.park.take() {
            Some(park) => {
                let req = call.route.clone();
                Ok(Served::Parked(self.park(req, park, Then::Tool(call))))
            }
            None => self.tool_result(&call, response).map(Served::Now),
        }
    }

    pub(super) fn tool_result(
        &self,
        call: &Call,
        mut response: HttpResponse,
    ) -> Result<web_sys::Response, JsValue> {
        self.apply(std::mem::take(&mut response.effects));
        self.publish_projections();
        send(call.answer(&response))
    }
}

fn send(answer: Answer) -> Result<web_sys::Response, JsValue> {
    match answer {
        Answer::Json(body) => respond(200, Some(&body)),
        Answer::Failed { status, body } => respond(status, Some(&body)),
        Answer::Accepted => respond(202, None),
        Answer::Refused(e) => to_response(&e.into()),
    }
}

/// The authority (`host[:port]`) of an absolute URL the runtime built.
fn authority(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(url, |i| &url[i + 3..]);
    after_scheme
        .split(['/', '?', '#'])
        .next()
        .unwrap_or(after_scheme)
}
