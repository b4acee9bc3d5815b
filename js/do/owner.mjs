// The owner API (`ShiitakeDO#agent`, and the stub's RPC methods over it):
// the typed client's transport (js/transport.mjs: URLs, JSON bodies, error
// decoding, the watch's stream check) over an in-process fetch, the
// object's own serving path. Each call is one request of docs/http.md;
// nothing here decides.
import { SseParser } from "../client.mjs";
import { ShiitakeError, Transport } from "../transport.mjs";

// The origin of the requests the owner API builds (never leaves the object).
export const OWNER_ORIGIN = "https://shiitake.owner";

// A Session's path. The core reads path segments as they are (docs/http.md):
// an id is passed byte for byte, except what would change the path's shape
// (`/`, `?`, `#`, `%`, ...), which is escaped so the core refuses it.
function sessionPath(sessionId, rest = "") {
  if (typeof sessionId !== "string") throw new ShiitakeError(400, "invalid_request", "sessionId: a string");
  return `/sessions/${encodeURIComponent(sessionId).replaceAll("%3A", ":")}${rest}`;
}

// A query without its absent values (undefined and null alike).
function present(query) {
  return Object.fromEntries(Object.entries(query).filter(([, v]) => v !== undefined && v !== null));
}

/**
 * A Session watch's event stream (what `GET /sessions/:id/watch` and the
 * RPC `watchSession` serve) as an async iterator of `{event, data}`
 * (`data` parsed). Ends when the stream ends or `signal` aborts (then it
 * throws the signal's reason); leaving the loop cancels the stream.
 */
export async function* readWatch(stream, { signal } = {}) {
  const reader = stream.getReader();
  const parser = new SseParser();
  const onAbort = () => reader.cancel(signal.reason).catch(() => {});
  signal?.throwIfAborted();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (signal?.aborted) throw signal.reason;
      if (done) return;
      for (const { event, data } of parser.push(value)) yield { event, data: JSON.parse(data) };
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    reader.cancel().catch(() => {});
  }
}

/**
 * The owner of one Durable Object. `fetch(url, init, meta)` serves one
 * request in process (`meta`: the host metadata the call is bound to);
 * `object` answers the host-only calls (grants).
 */
export class OwnerAgent {
  #fetch;
  #object;
  #t;

  constructor(fetch, object, meta) {
    this.#fetch = fetch;
    this.#object = object;
    this.#t = new Transport(OWNER_ORIGIN, (url, init) => fetch(url, init, meta));
    this.grants = {
      deliver: (sessionId, delivery) => object.deliverGrants(sessionId, delivery),
    };
  }

  /** The same owner, its calls bound to the host metadata `meta`. */
  withMeta(meta) {
    return new OwnerAgent(this.#fetch, this.#object, meta);
  }

  /** Addresses a Session (no I/O). */
  session(sessionId) {
    return new OwnerSession(this.#t, sessionId);
  }

  listSessions({ limit, cursor } = {}) {
    return this.#t.request("GET", "/sessions", { query: present({ limit, cursor }) });
  }

  createSession(sessionId, { from } = {}) {
    const body = {};
    if (sessionId !== undefined) body.sessionId = sessionId;
    if (from !== undefined) body.from = from;
    return this.#t.request("POST", "/sessions", { body });
  }

  async deleteSession(sessionId) {
    await this.#t.request("DELETE", sessionPath(sessionId));
  }

  inbox({ limit, cursor } = {}) {
    return this.#t.request("GET", "/inbox", { query: present({ limit, cursor }) });
  }

  usage({ from, to, sessionId, groupBy, limit, cursor } = {}) {
    return this.#t.request("GET", "/usage", { query: present({ from, to, sessionId, groupBy, limit, cursor }) });
  }

  /** The Agent's daily token budget (GET /budget). */
  budget() {
    return this.#t.request("GET", "/budget");
  }

  /** Sets it (`{tokens}`), over the host's configuration; a raise resumes the turns it now covers. */
  setBudget(input) {
    return this.#t.request("PUT", "/budget", { body: input });
  }

  /** Clears it, back to the host's configuration. */
  clearBudget() {
    return this.#t.request("DELETE", "/budget");
  }
}

// One Session of the owner API. Its inputs are the route's bodies as they
// are (a command's `requestId` is the caller's, never made up here).
class OwnerSession {
  #t;
  #id;

  constructor(transport, sessionId) {
    this.#t = transport;
    this.#id = sessionId;
  }

  async #request(method, rest, options) {
    return this.#t.request(method, sessionPath(this.#id, rest), options);
  }

  #command(body) {
    return this.#request("POST", "/commands", { body });
  }

  prompt(input) {
    return this.#command({ ...input, type: "prompt" });
  }

  steer(input) {
    return this.prompt({ ...input, delivery: "steer" });
  }

  followUp(input) {
    return this.prompt({ ...input, delivery: "followUp" });
  }

  operator(input) {
    return this.#command({ ...input, type: "operator" });
  }

  compact(input) {
    return this.#command({ ...input, type: "compact" });
  }

  cancel(input) {
    return this.#command({ ...input, type: "cancel" });
  }

  retry(input) {
    return this.#command({ ...input, type: "retry" });
  }

  select(input) {
    return this.#command({ ...input, type: "select" });
  }

  branches({ entryId, limit, cursor } = {}) {
    return this.#request("GET", "/branches", { query: present({ entryId, limit, cursor }) });
  }

  model() {
    return this.#request("GET", "/model");
  }

  setModel(input) {
    return this.#request("PUT", "/model", { body: input });
  }

  clearModel() {
    return this.#request("DELETE", "/model");
  }

  budget() {
    return this.#request("GET", "/budget");
  }

  setBudget(input) {
    return this.#request("PUT", "/budget", { body: input });
  }

  clearBudget() {
    return this.#request("DELETE", "/budget");
  }

  abort() {
    return this.#command({ type: "abort" });
  }

  withdraw(requestId) {
    return this.#request("POST", "/withdraw", { body: { requestId } });
  }

  read({ limit, cursor, before } = {}) {
    return this.#request("GET", "", { query: present({ before: cursor ?? before, limit }) });
  }

  /** undefined while the command is not settled at the deadline (the route's null); aborting never cancels the command. */
  async readSettlement(commandId, { timeoutMs, signal } = {}) {
    return (await this.#request("GET", "/settlement", { query: present({ commandId, timeoutMs }), signal })) ?? undefined;
  }

  async latestPending() {
    return (await this.#request("GET", "/pending/latest")) ?? null;
  }

  /** The watch's Response (its body the event stream), or its refusal thrown. */
  async watchStream() {
    return this.#t.openStream(sessionPath(this.#id, "/watch"));
  }

  /** The watch as an async iterator of `{event, data}`; abort `signal` (or leave the loop) to close it. */
  async *watch({ signal } = {}) {
    signal?.throwIfAborted();
    const opening = this.watchStream();
    let response;
    try {
      response = await unlessAborted(opening, signal);
    } catch (error) {
      // Aborted while it opened: the stream that still comes is closed.
      opening.then((r) => r.body?.cancel().catch(() => {}), () => {});
      throw error;
    }
    yield* readWatch(response.body, { signal });
  }
}

/** Rejects with the signal's reason when it aborts first (the work goes on). */
export function unlessAborted(promise, signal) {
  if (signal === undefined || signal === null) return promise;
  signal.throwIfAborted();
  let onAbort;
  const aborted = new Promise((_, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
  });
  return Promise.race([promise, aborted]).finally(() => signal.removeEventListener("abort", onAbort));
}
