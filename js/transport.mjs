// The typed client's HTTP side (js/client.mjs): one request or one watch
// stream over a caller's fetch, its answer checked and bounded, a refusal
// thrown as ShiitakeError. The owner API (js/do/owner.mjs) runs over it too,
// its fetch the Durable Object's own serving path.

/** Largest JSON answer body the client reads. */
export const RESPONSE_BYTES_MAX = 16 * 1024 * 1024;
/** Error bodies are read up to this size; a longer one is reported by its status alone. */
const ERROR_BODY_BYTES_MAX = 64 * 1024;

/**
 * A non-2xx answer, or an answer the client could not use. `status` is the
 * HTTP status, `code` the `{error: {code}}` of the body (`http_<status>` when
 * the body has none), `kind` the class of failure.
 */
export class ShiitakeError extends Error {
  constructor(status, code, message, options) {
    super(message, options);
    this.name = "ShiitakeError";
    this.status = status;
    this.code = code;
    this.kind = kindOf(status);
  }
}

/** The error kind of an HTTP status (see ShiitakeErrorKind in client.d.ts). */
function kindOf(status) {
  if (status === 409) return "conflict";
  if (status === 429 || status === 413 || status === 401 || status === 403) return "refused";
  if (status === 404) return "not_found";
  if (status >= 400 && status < 500) return "invalid";
  return "unavailable";
}

/** The HTTP side: requests, answers and errors. Internal to the package. */
export class Transport {
  constructor(base, fetch) {
    this.base = base;
    this.fetch = fetch;
    this.closed = false;
    /** Open watches, closed by the client's close(). */
    this.watches = new Set();
  }

  /** `path` starts with "/"; `query` values that are undefined are left out. */
  url(path, query) {
    let url = `${this.base}${path}`;
    if (query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined) q.set(k, String(v));
      const s = q.toString();
      if (s) url += `?${s}`;
    }
    return url;
  }

  checkOpen() {
    if (this.closed) throw new TypeError("this Shiitake client is closed");
  }

  /** One request/response call: the parsed JSON answer (undefined for an empty body). */
  async request(method, path, { query, body, signal } = {}) {
    this.checkOpen();
    const headers = { accept: "application/json" };
    const init = { method, headers };
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    if (signal !== undefined) init.signal = signal;
    try {
      const f = this.fetch;
      const res = await f(this.url(path, query), init);
      if (!res.ok) throw await errorFrom(res);
      const text = await readText(res, RESPONSE_BYTES_MAX);
      if (text === "") return undefined;
      try {
        return JSON.parse(text);
      } catch (cause) {
        throw new ShiitakeError(res.status, "invalid_response", `the answer to ${method} ${path} is not JSON`, { cause });
      }
    } catch (error) {
      // Whatever the transport threw on the way out, an aborted call rejects
      // with the signal's reason (an AbortError unless the caller chose one).
      if (signal?.aborted) throw signal.reason;
      throw error;
    }
  }

  /** Opens a watch stream: the checked Response. */
  async openStream(path, signal) {
    this.checkOpen();
    const f = this.fetch;
    const res = await f(this.url(path), { method: "GET", headers: { accept: "text/event-stream" }, signal });
    if (!res.ok) throw await errorFrom(res);
    const type = res.headers.get("content-type") ?? "";
    if (!type.toLowerCase().startsWith("text/event-stream") || res.body === null) {
      await res.body?.cancel().catch(() => {});
      throw new ShiitakeError(res.status, "invalid_response", `the watch answered ${type || "no content type"}, not text/event-stream`);
    }
    return res;
  }
}

/** Reads a body as text, at most `max` bytes (a longer body throws). */
async function readText(res, max) {
  if (res.body === null) return "";
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let n = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text + decoder.decode();
    n += value.length;
    if (n > max) {
      await reader.cancel().catch(() => {});
      throw new ShiitakeError(res.status, "response_too_large", `the answer is larger than ${max} bytes`);
    }
    text += decoder.decode(value, { stream: true });
  }
}

export async function errorFrom(res) {
  let code = `http_${res.status}`;
  let message = `HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ""}`;
  let text;
  try {
    text = await readText(res, ERROR_BODY_BYTES_MAX);
  } catch {
    text = undefined; // too large or cut: the status is all there is
  }
  if (text) {
    try {
      const body = JSON.parse(text);
      const e = body?.error;
      if (e && typeof e === "object") {
        if (typeof e.code === "string" && e.code !== "") code = e.code;
        if (typeof e.message === "string" && e.message !== "") message = e.message;
      }
    } catch {
      // not JSON: keep the status line
    }
  }
  return new ShiitakeError(res.status, code, message);
}
