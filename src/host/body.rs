//! Request bodies read as they stream, under a byte bound. A body without a
//! `content-length` (chunked) is counted chunk by chunk and its stream is
//! cancelled the moment the count passes the bound, so the sender is stopped
//! rather than drained and the body is never held whole in wasm memory.

use crate::error::ApiError;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

/// The declared `content-length` of `request`; 413 `payload_too_large`
/// when it is past `limit`, before a byte of the body is read (the sender
/// is answered, not cut off).
pub fn declared(request: &web_sys::Request, limit: usize) -> Result<Option<usize>, ApiError> {
    let declared = request
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge { bytes_max: limit });
    }
    Ok(declared)
}

/// The body of `request`, at most `limit` bytes; 413 `payload_too_large` as
/// soon as it passes `limit` (the stream is cancelled then). `capacity_hint`
/// is the declared length, if any, already checked against `limit`; a
/// declared body is read in one piece.
pub async fn read_bounded(
    request: &web_sys::Request,
    limit: usize,
    capacity_hint: Option<usize>,
) -> Result<Vec<u8>, ApiError> {
    let unreadable = || ApiError::InvalidRequest("request body unreadable".into());
    if capacity_hint.is_some() {
        // A declared length is already within `limit` and the platform
        // holds the body to it: one read instead of a read per chunk.
        let buffer = request
            .array_buffer()
            .map_err(|_| unreadable())
            .map(JsFuture::from)?
            .await
            .map_err(|_| unreadable())?;
        let bytes = js_sys::Uint8Array::new(&buffer);
        if bytes.length() as usize > limit {
            return Err(ApiError::PayloadTooLarge { bytes_max: limit });
        }
        return Ok(bytes.to_vec());
    }
    let Some(stream) = request.body() else {
        return Ok(Vec::new());
    };
    let reader = stream
        .get_reader()
        .dyn_into::<web_sys::ReadableStreamDefaultReader>()
        .map_err(|_| unreadable())?;
    // Cancelled on every early return.
    let cancel = CancelOnDrop(&reader);
    let mut body = Vec::with_capacity(capacity_hint.unwrap_or(0).min(limit));
    loop {
        let chunk = JsFuture::from(reader.read())
            .await
            .map_err(|_| unreadable())?;
        let done = js_sys::Reflect::get(&chunk, &"done".into()).map_or(true, |d| d.is_truthy());
        if done {
            // Ended: nothing to cancel (and no promise to spawn for it).
            std::mem::forget(cancel);
            return Ok(body);
        }
        let bytes = js_sys::Reflect::get(&chunk, &"value".into())
            .ok()
            .and_then(|v| v.dyn_into::<js_sys::Uint8Array>().ok())
            .ok_or_else(unreadable)?;
        // Checked before copying: an oversized chunk never enters wasm memory.
        let len = bytes.length() as usize;
        if len > limit - body.len() {
            return Err(ApiError::PayloadTooLarge { bytes_max: limit });
        }
        let at = body.len();
        body.resize(at + len, 0);
        bytes.copy_to(&mut body[at..]);
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
