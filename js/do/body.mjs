// The request body and the response as the core's serving path
// (src/host/body.rs) reads and builds them, each in one call from wasm:
// reading a body chunk by chunk from Rust crossed the wasm boundary about a
// dozen times per chunk (the reader, each read's promise, its `done` and
// `value`), and a response took six calls to build.

// `content-length` as Rust's `usize` (u32 on wasm32) parses it: digits with
// an optional `+`; anything else (or past u32) is no declared length.
const DECLARED_MAX = 2 ** 32 - 1;

/** The declared `content-length` of `request`, or undefined. */
export function declaredLength(request) {
  const value = request.headers.get("content-length");
  if (value === null || !/^\+?[0-9]+$/.test(value)) return undefined;
  const n = Number(value);
  return n <= DECLARED_MAX ? n : undefined;
}

/**
 * The body of `request`, at most `limit` bytes: a Uint8Array, or
 * "too_large" (a declared length past `limit` is refused before a byte is
 * read; an undeclared one is counted as it streams and cancelled as soon
 * as it passes `limit`, so the sender is stopped, not drained), or
 * "unreadable".
 */
export async function readBody(request, limit) {
  const declared = declaredLength(request);
  if (declared !== undefined) {
    if (declared > limit) return "too_large";
    // The platform holds the body to its declared length: one read.
    let buffer;
    try {
      buffer = await request.arrayBuffer();
    } catch {
      return "unreadable";
    }
    return buffer.byteLength > limit ? "too_large" : new Uint8Array(buffer);
  }
  if (request.body === null) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!(value instanceof Uint8Array)) throw new TypeError("not a byte chunk");
      // Checked before keeping it: an oversized chunk never enters wasm memory.
      if (value.byteLength > limit - size) {
        reader.cancel().catch(() => {});
        return "too_large";
      }
      chunks.push(value);
      size += value.byteLength;
    }
  } catch {
    reader.cancel().catch(() => {});
    return "unreadable";
  }
  if (chunks.length === 1) return chunks[0];
  const body = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    body.set(chunk, at);
    at += chunk.byteLength;
  }
  return body;
}

const JSON_HEADERS = { "content-type": "application/json; charset=utf-8" };

/** The core's answer: `status`, and `body` (JSON text) if any. */
export function respond(status, body) {
  return new Response(body ?? null, body === undefined ? { status } : { status, headers: JSON_HEADERS });
}
