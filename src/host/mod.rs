//! The Durable Object adapter (wasm only). It turns platform requests into
//! [`HttpRequest`]s, runs the pure core against the DO's SQLite, and turns
//! the answer back into a platform `Response`.
//!
//! Invariant: no state here that SQLite cannot rebuild. A panic resets the
//! wasm instance (the JS shim rebuilds this object); eviction drops memory.
//! The only cached fact, "the schema was checked", is re-derived on demand.

mod sql;

use crate::error::ApiError;
use crate::http::{self, HttpRequest, HttpResponse, META_HEADER};
use crate::limits::BODY_BYTES_MAX;
use crate::session::{Ctx, RandomIds};
use crate::store::{schema, Store};
use std::cell::Cell;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// The Rust half of the `ShiitakeDO` class exported by `js/do.mjs`.
#[wasm_bindgen]
pub struct ShiitakeCore {
    sql: sql::DoSql,
    schema_checked: Cell<bool>,
}

#[wasm_bindgen]
impl ShiitakeCore {
    /// `ctx` is the DurableObjectState; `env` the Worker's bindings.
    #[wasm_bindgen(constructor)]
    pub fn new(ctx: JsValue, _env: JsValue) -> Result<ShiitakeCore, JsValue> {
        Ok(ShiitakeCore {
            sql: sql::DoSql::from_state(&ctx)?,
            schema_checked: Cell::new(false),
        })
    }

    /// Serves one HTTP request of the contract in `docs/http.md`.
    pub async fn fetch(&self, request: web_sys::Request) -> Result<web_sys::Response, JsValue> {
        let response = match read_request(&request).await {
            Ok(req) => self.serve(&req),
            Err(e) => e.into(),
        };
        to_response(&response)
    }

    /// The durable wake. Nothing is scheduled yet: the run loop lands next.
    pub async fn alarm(&self) -> Result<(), JsValue> {
        Ok(())
    }
}

impl ShiitakeCore {
    fn serve(&self, req: &HttpRequest) -> HttpResponse {
        if !self.schema_checked.get() {
            if let Err(e) = schema::open(&self.sql) {
                return e.into();
            }
            self.schema_checked.set(true);
        }
        let mut ids = RandomIds;
        let mut ctx = Ctx {
            store: Store::new(&self.sql),
            now_ms: js_sys::Date::now() as i64,
            ids: &mut ids,
        };
        http::handle(&mut ctx, req)
    }
}

async fn read_request(request: &web_sys::Request) -> Result<HttpRequest, ApiError> {
    let url = request.url();
    let (path, query) = split_url(&url);
    let headers = request.headers();
    let declared = headers
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<usize>().ok());
    // Refuse a declared oversize body before reading a byte of it.
    if declared.is_some_and(|n| n > BODY_BYTES_MAX) {
        return Err(ApiError::PayloadTooLarge {
            bytes_max: BODY_BYTES_MAX,
        });
    }
    let body = match request.method().as_str() {
        "GET" | "HEAD" => Vec::new(),
        _ => {
            let promise = request
                .array_buffer()
                .map_err(|_| ApiError::InvalidRequest("request body unreadable".into()))?;
            let buffer = JsFuture::from(promise)
                .await
                .map_err(|_| ApiError::InvalidRequest("request body unreadable".into()))?;
            js_sys::Uint8Array::new(&buffer).to_vec()
        }
    };
    Ok(HttpRequest {
        method: request.method(),
        path: path.to_owned(),
        query: query.to_owned(),
        meta: headers.get(META_HEADER).ok().flatten(),
        body,
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

fn to_response(r: &HttpResponse) -> Result<web_sys::Response, JsValue> {
    let init = web_sys::ResponseInit::new();
    init.set_status(r.status);
    let headers = web_sys::Headers::new()?;
    if r.body.is_some() {
        headers.set("content-type", "application/json; charset=utf-8")?;
    }
    init.set_headers(&headers);
    web_sys::Response::new_with_opt_str_and_init(r.body.as_deref(), &init)
}
