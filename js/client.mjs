// A typed client for one Agent's session routes (docs/http.md), over the
// host's authorised transport:
//
//   import { createShiitakeClient } from "shiitake/client";
//   const client = createShiitakeClient({ baseUrl: "https://host/agents/demo", fetch: authorisedFetch });
//   const session = client.session("s1");           // no I/O
//   const { commandId } = await session.prompt("Hello");
//   const settlement = await session.readSettlement(commandId, { timeoutMs: 30_000 });
//
// It holds no state but the watches it opened: releasing it (close(), or
// dropping it) cancels no host work. Runs wherever `fetch`, ReadableStream and
// TextDecoder exist (browsers, Workers, Node 18+); imports nothing.

/** Largest SSE event (its field lines, in bytes) a watch accepts. */
export const WATCH_EVENT_BYTES_MAX = 8 * 1024 * 1024;
/** Largest JSON answer body the client reads. */
export const RESPONSE_BYTES_MAX = 16 * 1024 * 1024;
/** Error bodies are read up to this size; a longer one is reported by its status alone. */
const ERROR_BODY_BYTES_MAX = 64 * 1024;

const WATCH_EVENTS = new Set(["snapshot", "frame", "runtime-error"]);

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

/** @param {{ baseUrl: string | URL, fetch?: (input: string, init: RequestInit) => Promise<Response> }} options */
export function createShiitakeClient(options) {
  if (options === null || typeof options !== "object") throw new TypeError("createShiitakeClient: options are required");
  const { baseUrl } = options;
  if (typeof baseUrl !== "string" && !(baseUrl instanceof URL)) throw new TypeError("createShiitakeClient: `baseUrl` must be a string or URL");
  if (options.fetch !== undefined && typeof options.fetch !== "function") throw new TypeError("createShiitakeClient: `fetch` must be a function");
  // Called as a plain function: a platform fetch called as a method of
  // another object throws "Illegal invocation" on some runtimes.
  const transport = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  return new ShiitakeClient(new Transport(String(baseUrl).replace(/\/+$/, ""), transport));
}

/** The HTTP side: requests, answers and errors. Internal. */
class Transport {
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

function sessionPath(sessionId, rest = "") {
  return `/sessions/${encodeURIComponent(sessionId)}${rest}`;
}

const newRequestId = () => globalThis.crypto.randomUUID();

class ShiitakeClient {
  #t;

  constructor(transport) {
    this.#t = transport;
  }

  listSessions({ limit, cursor, signal } = {}) {
    return this.#t.request("GET", "/sessions", { query: { limit, cursor: cursor ?? undefined }, signal });
  }

  createSession(sessionId, { signal } = {}) {
    return this.#t.request("POST", "/sessions", { body: sessionId === undefined ? {} : { sessionId }, signal });
  }

  async deleteSession(sessionId, { signal } = {}) {
    await this.#t.request("DELETE", sessionPath(sessionId), { signal });
  }

  session(sessionId) {
    if (typeof sessionId !== "string") throw new TypeError("session(id): the id must be a string");
    return new ShiitakeSession(this.#t, sessionId);
  }

  /** Closes the watches this client opened. Work on the host goes on. */
  close() {
    const t = this.#t;
    t.closed = true;
    const open = [...t.watches];
    t.watches.clear();
    for (const w of open) w.close();
  }
}

class ShiitakeSession {
  #t;

  constructor(transport, id) {
    this.#t = transport;
    this.id = id;
  }

  #command(command, signal) {
    return this.#t.request("POST", sessionPath(this.id, "/commands"), { body: command, signal });
  }

  async prompt(text, { requestId = newRequestId(), images, delivery, signal } = {}) {
    const receipt = await this.#command({ type: "prompt", requestId, text, images, delivery }, signal);
    return { ...receipt, requestId };
  }

  async operator(text, { requestId = newRequestId(), signal } = {}) {
    const receipt = await this.#command({ type: "operator", requestId, text }, signal);
    return { ...receipt, requestId };
  }

  withdraw(requestId, { signal } = {}) {
    return this.#t.request("POST", sessionPath(this.id, "/withdraw"), { body: { requestId }, signal });
  }

  cancel(commandId, { onlyIfPending, signal } = {}) {
    return this.#command({ type: "cancel", commandId, onlyIfPending }, signal);
  }

  abort({ signal } = {}) {
    return this.#command({ type: "abort" }, signal);
  }

  read({ before, limit, signal } = {}) {
    return this.#t.request("GET", sessionPath(this.id), { query: { before: before ?? undefined, limit }, signal });
  }

  watch({ signal } = {}) {
    const t = this.#t;
    t.checkOpen();
    const w = new ShiitakeWatch(t, sessionPath(this.id, "/watch"), signal);
    if (!w.closed) t.watches.add(w);
    return w;
  }

  async readSettlement(commandId, { timeoutMs, signal } = {}) {
    const s = await this.#t.request("GET", sessionPath(this.id, "/settlement"), { query: { commandId, timeoutMs }, signal });
    return s ?? undefined;
  }

  async latestPending({ signal } = {}) {
    return (await this.#t.request("GET", sessionPath(this.id, "/pending/latest"), { signal })) ?? null;
  }
}

/**
 * An open watch: an async iterator of `{event, data}`. The request starts at
 * once; `opened` settles when the server answered (or failed to).
 */
class ShiitakeWatch {
  #t;
  #controller = new AbortController();
  #userSignal;
  #onUserAbort;
  #parser = new SseParser(WATCH_EVENT_BYTES_MAX);
  #response; // Promise<Response>
  #res; // the Response, once it came
  #reader;
  #queue = [];
  #ended = false;
  #failure;
  #discard = false;
  #pulling;
  #closing; // resolves on close: a transport that ignores the abort cannot hold next()
  #onClosing;

  constructor(transport, path, signal) {
    this.#t = transport;
    this.closed = false;
    this.#closing = new Promise((resolve) => {
      this.#onClosing = resolve;
    });
    this.#userSignal = signal;
    if (signal?.aborted) {
      this.#response = Promise.reject(signal.reason);
      this.#fail(signal.reason);
    } else {
      if (signal) {
        this.#onUserAbort = () => {
          this.#discard = true; // an abort interrupts: what is queued is dropped
          this.#queue.length = 0;
          this.#fail(signal.reason);
        };
        signal.addEventListener("abort", this.#onUserAbort, { once: true });
      }
      this.#response = transport.openStream(path, this.#controller.signal);
    }
    this.#response.then(
      (res) => {
        this.#res = res;
        if (this.closed) res.body?.cancel().catch(() => {}); // closed before the answer came
      },
      (error) => this.#fail(error),
    );
    /** Settles once the server answered the watch: rejects with its error. */
    this.opened = this.#response.then(() => undefined);
    this.opened.catch(() => {}); // failures also surface through next(); none goes unhandled
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  async next() {
    for (;;) {
      if (this.#queue.length > 0) return { value: this.#queue.shift(), done: false };
      if (this.#failure !== undefined) throw this.#failure.error;
      if (this.#ended || this.closed) return { value: undefined, done: true };
      // One read at a time, shared by concurrent next() calls.
      this.#pulling ??= this.#pull().finally(() => {
        this.#pulling = undefined;
      });
      await this.#pulling;
    }
  }

  async #pull() {
    const events = [];
    try {
      if (this.#reader === undefined) {
        const res = await Promise.race([this.#response, this.#closing]);
        if (this.closed) return;
        this.#reader = res.body.getReader();
      }
      const { value, done } = await this.#reader.read();
      if (this.closed) return;
      if (done) {
        this.#parser.end();
        this.#ended = true;
        this.#release();
        return;
      }
      this.#parser.push(value, events);
    } catch (error) {
      // An error caused by close() is the end of the stream, not a failure.
      if (!this.closed) this.#fail(error);
    } finally {
      // Events completed before a failure are still delivered, then the failure.
      if (!this.#discard) {
        for (const ev of events) {
          if (!WATCH_EVENTS.has(ev.event)) continue; // unknown events are for newer clients
          let data;
          try {
            data = JSON.parse(ev.data);
          } catch (cause) {
            this.#fail(new ShiitakeError(200, "invalid_response", `a watch ${ev.event} event's data is not JSON`, { cause }));
            break;
          }
          this.#queue.push({ event: ev.event, data });
        }
      }
    }
  }

  #fail(error) {
    if (this.#failure !== undefined || this.closed) return;
    this.#failure = { error };
    this.#shutdown();
  }

  /** Stops reading: the server sees the client go away. Cancels nothing server-side. */
  close() {
    if (this.closed) return;
    this.#discard = true;
    this.#queue.length = 0;
    this.#shutdown();
  }

  async return() {
    this.close();
    return { value: undefined, done: true };
  }

  #shutdown() {
    if (this.closed) return;
    this.closed = true;
    this.#onClosing();
    if (this.#reader) this.#reader.cancel().catch(() => {});
    else this.#res?.body?.cancel().catch(() => {});
    this.#controller.abort();
    this.#release();
  }

  #release() {
    if (this.#onUserAbort) this.#userSignal.removeEventListener("abort", this.#onUserAbort);
    this.#onUserAbort = undefined;
    this.#t.watches.delete(this);
  }
}

/**
 * A bounded Server-Sent Events parser (the WHATWG event-stream grammar):
 * `push(bytes, out?)` appends the events completed by that chunk to `out`
 * (returned; a new array by default), `{event, data}`
 * with `event` "message" when the event names none. Lines are split on bytes
 * (CR, LF, CRLF; UTF-8 never puts those bytes inside a character), so a chunk
 * may end anywhere. An event whose lines exceed `maxBytes` throws.
 */
export class SseParser {
  #max;
  #line = []; // Uint8Array parts of the current, unterminated line
  #lineBytes = 0;
  #eventBytes = 0; // bytes of the current event's completed lines
  #event = "";
  #data = [];
  #afterCR = false;
  #start = true;
  #decoder = new TextDecoder();

  constructor(maxBytes = WATCH_EVENT_BYTES_MAX) {
    this.#max = maxBytes;
  }

  push(chunk, out = []) {
    let from = 0;
    if (this.#afterCR && chunk.length > 0) {
      this.#afterCR = false;
      if (chunk[0] === 0x0a) from = 1;
    }
    for (let i = from; i < chunk.length; i++) {
      const b = chunk[i];
      if (b !== 0x0a && b !== 0x0d) continue;
      this.#append(chunk.subarray(from, i));
      this.#endLine(out);
      if (b === 0x0d) {
        if (i + 1 < chunk.length) {
          if (chunk[i + 1] === 0x0a) i++;
        } else {
          this.#afterCR = true;
        }
      }
      from = i + 1;
    }
    this.#append(chunk.subarray(from));
    return out;
  }

  /** The stream ended: an unterminated event is dropped (as the standard says). */
  end() {
    this.#line = [];
    this.#lineBytes = 0;
    this.#resetEvent();
  }

  #append(part) {
    if (part.length === 0) return;
    if (this.#eventBytes + this.#lineBytes + part.length > this.#max) {
      throw tooLarge(this.#max);
    }
    this.#line.push(part.slice());
    this.#lineBytes += part.length;
  }

  #endLine(out) {
    let bytes;
    if (this.#line.length === 1) bytes = this.#line[0];
    else {
      bytes = new Uint8Array(this.#lineBytes);
      let at = 0;
      for (const p of this.#line) {
        bytes.set(p, at);
        at += p.length;
      }
    }
    const n = this.#lineBytes;
    this.#line = [];
    this.#lineBytes = 0;
    let line = this.#decoder.decode(bytes);
    if (this.#start) {
      this.#start = false;
      if (line.charCodeAt(0) === 0xfeff) line = line.slice(1);
    }
    if (line === "") {
      if (this.#data.length > 0) out.push({ event: this.#event || "message", data: this.#data.join("\n") });
      this.#resetEvent();
      return;
    }
    // A line counts with its line end (the blank line ending an event does not).
    if (this.#eventBytes + n + 1 > this.#max) throw tooLarge(this.#max);
    this.#eventBytes += n + 1;
    if (line.charCodeAt(0) === 0x3a) return; // a comment
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.charCodeAt(0) === 0x20) value = value.slice(1);
    if (field === "event") this.#event = value;
    else if (field === "data") this.#data.push(value);
    // id and retry mean nothing to a client that never reconnects by itself.
  }

  #resetEvent() {
    this.#event = "";
    this.#data = [];
    this.#eventBytes = 0;
  }
}

const tooLarge = (max) => new ShiitakeError(200, "event_too_large", `a watch event exceeds ${max} bytes`);

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

async function errorFrom(res) {
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
