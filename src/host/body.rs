//! Request bodies read as they stream, under a byte bound, and responses
//! built, each in one call into the shim (`js/do/body.mjs`): a body
//! without a `content-length` (chunked) is counted chunk by chunk and its
//! stream is cancelled the moment the count passes the bound, so the sender
//! is stopped rather than drained and the body is never held whole.

use crate::error::ApiError;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen(module = "/js/do/body.mjs")]
extern "C" {
    #[wasm_bindgen(js_name = readBody)]
    fn read_body(request: &web_sys::Request, limit: f64) -> js_sys::Promise;

    /// A response of `status` with `body` (JSON text), if any.
    #[wasm_bindgen(catch)]
    pub fn respond(status: u16, body: Option<&str>) -> Result<web_sys::Response, JsValue>;
}

/// The body of `request`, at most `limit` bytes (none for GET and HEAD);
/// 413 `payload_too_large` when its declared length is past `limit`
/// (nothing read) or as soon as the stream passes it (the stream is
/// cancelled then).
pub async fn read_bounded(request: &web_sys::Request, limit: usize) -> Result<Vec<u8>, ApiError> {
    let read = JsFuture::from(read_body(request, limit as f64)).await;
    take(read.unwrap_or(JsValue::UNDEFINED), limit)
}

/// The body `readBody` answered (read under `limit`), or its refusal.
pub fn take(read: JsValue, limit: usize) -> Result<Vec<u8>, ApiError> {
    match read.dyn_into::<js_sys::Uint8Array>() {
        Ok(bytes) => Ok(bytes.to_vec()),
        Err(refusal) if refusal.as_string().as_deref() == Some("too_large") => {
            Err(ApiError::PayloadTooLarge { bytes_max: limit })
        }
        Err(_) => Err(ApiError::InvalidRequest("request body unreadable".into())),
    }
}

/// Cancels a body's stream when dropped: a read that stops early
/// (a bound passed, a decode error, a timeout or a stop dropping the future)
/// closes the connection instead of leaving the sender blocked on an unread
/// stream until garbage collection. Harmless on a stream that ended.
pub struct CancelOnDrop<'a>(pub &'a web_sys::ReadableStreamDefaultReader);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        cancel(self.0);
    }
}

/// Cancels the stream (the platform then stops receiving the body). The
/// returned promise is observed so a refusal is not an unhandled rejection.
fn cancel(reader: &web_sys::ReadableStreamDefaultReader) {
    let cancelled = JsFuture::from(reader.cancel());
    wasm_bindgen_futures::spawn_local(async move {
        let _ = cancelled.await;
    });
}
