// The request body and the response as the core's serving path reads and
// builds them. The shim reads a request's body here before it calls into
// the core (js/do/recovery.mjs), so the core answers in one synchronous
// call (awaiting inside wasm costs a dozen boundary crossings and closures
// per await); the core calls readBody itself for the browser bridge's
// routes, which check the request before reading it, and respond for every
// JSON answer (one call instead of six).

// `content-length` as the core's bounds read it: digits with an optional
// `+` (as Rust parses a usize); anything else (or past u32) declares no
// length, and the body is counted as it streams.
const DECLARED_MAX = 2 ** 32 - 1;

function declaredLength(request) {
  const value = request.headers.get("content-length");
  if (value === null || !/^\+?[0-9]+$/.test(value)) return undefined;
  const n = Number(value);
  return n <= DECLARED_MAX ? n : undefined;
}

const EMPTY = new Uint8Array(0);

/**
 * The body of `request`, at most `limit` bytes (none for GET and HEAD): a
 * Uint8Array, or "too_large" (a declared length past `limit` is refused
 * before a byte is read; an undeclared one is counted as it streams and
 * cancelled as soon as it passes `limit`, so the sender is stopped, not
 * drained), or "unreadable".
 */
export async function readBody(request, limit) {
  const declared = declaredLength(request);
  if (declared !== undefined && declared > limit) return "too_large";
  if (request.method === "GET" || request.method === "HEAD") return EMPTY;
  if (declared !== undefined) {
    // The platform holds the body to its declared length: one read.
    let buffer;
    try {
      buffer = await request.arrayBuffer();
    } catch {
      return "unreadable";
    }
    return buffer.byteLength > limit ? "too_large" : new Uint8Array(buffer);
  }
  if (request.body === null) return EMPTY;
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
