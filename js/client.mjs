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
// TextDecoder exist (browsers, Workers, Node 18+); imports no dependency.
//
// Extensions: `bindSessionExtension(session, contract)` and
// `bindAgentExtension(client, contract)` keep one extension's observed
// projection (a slot) and send its commands; see "extension bindings" below.

import { isStandardSchema } from "./guards.mjs";
import { READ_PAGE_MESSAGES_MAX } from "./limits.mjs";
import { RESPONSE_BYTES_MAX, ShiitakeError, Transport } from "./transport.mjs";

export { RESPONSE_BYTES_MAX, ShiitakeError };

/** Largest SSE event (its field lines, in bytes) a watch accepts. */
export const WATCH_EVENT_BYTES_MAX = 8 * 1024 * 1024;

const WATCH_EVENTS = new Set(["snapshot", "frame", "runtime-error"]);

/**
 * Whether a failed send (prompt, operator) may still have been admitted: no
 * answer came (a dropped connection, an abort), a 5xx, or an answer the
 * client could not use. Learn its outcome with `withdraw(requestId)` before
 * sending the text again (seed "Recover an uncertain send"). A refusal the
 * service answered (4xx) admitted nothing.
 */
export function isUncertain(error) {
  return !(error instanceof ShiitakeError && error.status >= 400 && error.status < 500);
}

/** Pages `readCompacted` reads at most by default. */
const COMPACTED_PAGES_MAX = 10;

/**
 * The messages a `compaction` entry stands for (`compacted.from` through
 * `compacted.through`), oldest first. They stay in the Session, older than
 * the entry on its path: read from the page before the entry's `sequence`
 * (a read's cursor is a position), or from the selected branch's newest
 * page when the entry came from a `message` frame (no `sequence`), at most
 * `maxPages` pages. `complete` is false when `from` was not reached.
 */
export async function readCompacted(session, entry, { maxPages = COMPACTED_PAGES_MAX, signal } = {}) {
  const { from, through } = entry?.compacted ?? {};
  if (typeof from !== "string" || typeof through !== "string") throw new TypeError("readCompacted: not a compaction entry");
  const found = [];
  let before = entry.sequence === undefined ? undefined : String(entry.sequence);
  let inside = false;
  for (let pages = 0; pages < maxPages; pages++) {
    const read = await session.read({ before, limit: READ_PAGE_MESSAGES_MAX, signal });
    for (const message of [...read.messages].reverse()) {
      inside ||= message.entryId === through;
      if (!inside) continue;
      found.push(message);
      if (message.entryId === from) return { messages: found.reverse(), complete: true };
    }
    if (read.cursor === null) break;
    before = read.cursor;
  }
  return { messages: found.reverse(), complete: false };
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

function sessionPath(sessionId, rest = "") {
  return `/sessions/${encodeURIComponent(sessionId)}${rest}`;
}

const newRequestId = () => globalThis.crypto.randomUUID();

/** The transport of each client and Session handle, for the extension bindings. */
const transports = new WeakMap();

class ShiitakeClient {
  #t;

  constructor(transport) {
    this.#t = transport;
    transports.set(this, transport);
  }

  listSessions({ limit, cursor, signal } = {}) {
    return this.#t.request("GET", "/sessions", { query: { limit, cursor: cursor ?? undefined }, signal });
  }

  /** `GET /inbox`: the Agent's Sessions, needs_you ahead of running ahead of settled. */
  inbox({ limit, cursor, signal } = {}) {
    return this.#t.request("GET", "/inbox", { query: { limit, cursor: cursor ?? undefined }, signal });
  }

  /** `GET /usage`: the Agent's usage ledger, totals over `[from, to)` and a page of groups. */
  usage({ from, to, sessionId, groupBy, limit, cursor, signal } = {}) {
    return this.#t.request("GET", "/usage", { query: { from, to, sessionId, groupBy, limit, cursor: cursor ?? undefined }, signal });
  }

  /** `GET /budget`: the Agent's daily token budget (setting one is the host's: RPC or owner API). */
  budget({ signal } = {}) {
    return this.#t.request("GET", "/budget", { signal });
  }

  /** `from: {sessionId, entryId}` forks: the new Session continues that Session's path ending at the entry. */
  createSession(sessionId, { from, signal } = {}) {
    const body = {};
    if (sessionId !== undefined) body.sessionId = sessionId;
    if (from !== undefined) body.from = from;
    return this.#t.request("POST", "/sessions", { body, signal });
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
    transports.set(this, transport);
  }

  #command(command, signal) {
    return this.#t.request("POST", sessionPath(this.id, "/commands"), { body: command, signal });
  }

  async prompt(text, { requestId = newRequestId(), images, delivery, after, signal } = {}) {
    const receipt = await this.#command({ type: "prompt", requestId, text, images, delivery, after }, signal);
    return { ...receipt, requestId };
  }

  /** Generates the answer to the user message `entryId` again, on a new branch beside the old answer. */
  async retry(entryId, { requestId = newRequestId(), signal } = {}) {
    const receipt = await this.#command({ type: "retry", requestId, entryId }, signal);
    return { ...receipt, requestId };
  }

  /** Selects the branch through `entryId` (ending at its newest descendant). */
  async select(entryId, { requestId = newRequestId(), signal } = {}) {
    const receipt = await this.#command({ type: "select", requestId, entryId }, signal);
    return { ...receipt, requestId };
  }

  /** The children of an entry: `{entryId, count, children, cursor}`. */
  branches(entryId, { limit, cursor, signal } = {}) {
    return this.#t.request("GET", sessionPath(this.id, "/branches"), { query: { entryId, limit, cursor: cursor ?? undefined }, signal });
  }

  /** The Session's explicit model: `{model, reasoning?}` (`model` null when none is set). */
  model({ signal } = {}) {
    return this.#t.request("GET", sessionPath(this.id, "/model"), { signal });
  }

  /**
   * Sets the Session's explicit model (`"provider/model"`, with `reasoning`);
   * its next turn resolves it. A model the host's policy refuses throws
   * `model_rejected` (422). Answers what is stored.
   */
  setModel(model, { reasoning, signal } = {}) {
    const body = reasoning === undefined ? { model } : { model, reasoning };
    return this.#t.request("PUT", sessionPath(this.id, "/model"), { body, signal });
  }

  /** Clears the Session's explicit model: `{model: null}`. */
  clearModel({ signal } = {}) {
    return this.#t.request("DELETE", sessionPath(this.id, "/model"), { signal });
  }

  /** `GET /sessions/:id/budget`: the Session's token budget and its paused turn (setting one is the host's). */
  budget({ signal } = {}) {
    return this.#t.request("GET", sessionPath(this.id, "/budget"), { signal });
  }

  async operator(text, { requestId = newRequestId(), signal } = {}) {
    const receipt = await this.#command({ type: "operator", requestId, text }, signal);
    return { ...receipt, requestId };
  }

  async compact({ requestId = newRequestId(), instructions, signal } = {}) {
    const receipt = await this.#command({ type: "compact", requestId, instructions }, signal);
    return { ...receipt, requestId };
  }

  withdraw(requestId, { signal } = {}) {
    return this.#t.request("POST", sessionPath(this.id, "/withdraw"), { body: { requestId }, signal });
  }

  /** `cancel({commandId, onlyIfPending?}, {signal?})` (the seed's form), or `cancel(commandId, {onlyIfPending?, signal?})`. */
  cancel(target, options = {}) {
    const { commandId, onlyIfPending } = typeof target === "object" && target !== null ? target : { commandId: target, onlyIfPending: options.onlyIfPending };
    return this.#command({ type: "cancel", commandId, onlyIfPending }, options.signal);
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

// ---- extension bindings ----
//
// A binding follows one extension's projection (its *slot*: what was last
// observed, never what a command is assumed to have done) and sends its
// commands:
//
//   const goal = bindSessionExtension(client.session("s1"), { id: "goal", projection: { schema: Goal }, commands: { set: { input: SetGoal } } });
//   const stop = goal.subscribe((slot) => render(slot));   // opens one watch
//   await goal.command("set", { text: "Ship it" });        // the slot changes when the frame arrives
//
// Schemas are Standard Schemas (https://standardschema.dev), validated
// synchronously.

/** How a binding reopens a watch that ended or failed (see ReconnectOptions in client.d.ts). */
const RECONNECT_DEFAULTS = Object.freeze({ initialDelayMs: 500, maxDelayMs: 10_000, maxFailures: 8 });

const UNKNOWN = Object.freeze({ status: "unknown" });

/**
 * A value a schema refused: a command's input (`invalid_request`, status 400
 * as the server would answer, no request sent) or an observed projection
 * (`invalid_projection`). `issues` are the schema's.
 */
export class ShiitakeSchemaError extends ShiitakeError {
  constructor(status, code, message, issues = [], options) {
    super(status, code, message, options);
    this.issues = issues;
  }
}


/** The checked contract: `{id, projection, commands}` (`commands` null: any name). */
function checkContract(contract, fn) {
  if (contract === null || typeof contract !== "object") throw new TypeError(`${fn}: the contract must be an object`);
  const { id, projection, commands } = contract;
  if (typeof id !== "string" || id === "") throw new TypeError(`${fn}: the contract's \`id\` must be a non-empty string`);
  let schema = null;
  if (projection !== undefined) {
    if (projection === null || typeof projection !== "object") throw new TypeError(`${fn}: \`projection\` must be an object`);
    if (projection.schema !== undefined) {
      if (!isStandardSchema(projection.schema)) throw new TypeError(`${fn}: \`projection.schema\` must be a Standard Schema (v1)`);
      schema = projection.schema;
    }
  }
  let inputs = null;
  if (commands !== undefined) {
    if (commands === null || typeof commands !== "object") throw new TypeError(`${fn}: \`commands\` must be an object`);
    inputs = new Map();
    for (const [name, c] of Object.entries(commands)) {
      if (c === null || typeof c !== "object") throw new TypeError(`${fn}: \`commands.${name}\` must be an object`);
      if (c.input !== undefined && !isStandardSchema(c.input)) throw new TypeError(`${fn}: \`commands.${name}.input\` must be a Standard Schema (v1)`);
      inputs.set(name, c.input ?? null);
    }
  }
  return { id, schema, inputs };
}

function checkReconnect(options, fn) {
  const r = { ...RECONNECT_DEFAULTS, ...(options?.reconnect ?? {}) };
  for (const k of Object.keys(RECONNECT_DEFAULTS)) {
    if (!Number.isFinite(r[k]) || r[k] < 0) throw new TypeError(`${fn}: \`reconnect.${k}\` must be a finite number >= 0`);
  }
  if (r.maxFailures < 1) throw new TypeError(`${fn}: \`reconnect.maxFailures\` must be at least 1`);
  return r;
}

function issuePath(issue) {
  if (!Array.isArray(issue?.path) || issue.path.length === 0) return "";
  return issue.path.map((p) => `/${String(typeof p === "object" && p !== null ? p.key : p)}`).join("");
}

/**
 * Runs a Standard Schema synchronously: `{value}` (its output) or
 * `{issues, message}`. An asynchronous schema, or one whose validate throws,
 * throws.
 */
function validateSync(schema, value, where) {
  const result = schema["~standard"].validate(value);
  if (result !== null && typeof result === "object" && typeof result.then === "function") {
    Promise.resolve(result).catch(() => {}); // its outcome is not awaited: nothing goes unhandled
    throw new TypeError(`${where}: the schema validates asynchronously; bindings validate synchronously`);
  }
  if (result === null || typeof result !== "object") throw new TypeError(`${where}: the schema's validate returned no result`);
  if (result.issues !== undefined) {
    const issues = [...result.issues];
    const message = issues.map((i) => `${issuePath(i) || "(root)"}: ${i?.message}`).join("; ");
    return { issues, message: `${where}: ${message || "refused"}` };
  }
  return { value: result.value };
}

/** Whether a failed watch is worth reopening: a 4xx refusal (but 408 and 429) will not change. */
function permanent(error) {
  return error instanceof ShiitakeError && error.status >= 400 && error.status < 500 && error.status !== 408 && error.status !== 429;
}

/**
 * One Session's watch, kept open: reopened after it ends or fails, with a
 * doubling delay, until `maxFailures` consecutive failures (a watch that
 * delivered its snapshot resets the count) or a permanent refusal; then
 * `onGiveUp(error)`. `onEvent(event)` may return a promise (awaited before
 * the next event); its rejection fails the watch. Internal.
 */
class Follower {
  constructor(session, transport, reconnect, onEvent, onGiveUp) {
    this.session = session;
    this.t = transport;
    this.reconnect = reconnect;
    this.onEvent = onEvent;
    this.onGiveUp = onGiveUp;
    this.stopped = false;
    this.watch = undefined;
    this.timer = undefined;
    this.wake = undefined;
    this.done = this.#run();
  }

  async #run() {
    let failures = 0;
    while (!this.stopped) {
      let error;
      try {
        const w = this.session.watch();
        this.watch = w;
        for (;;) {
          const { value, done } = await w.next();
          if (done || this.stopped) break;
          if (value.event === "snapshot") failures = 0;
          await this.onEvent(value);
        }
      } catch (e) {
        error = e;
      } finally {
        this.watch?.close();
        this.watch = undefined;
      }
      // Stopped, or the client was closed (its watches with it): no retry, no report.
      if (this.stopped || this.t.closed) break;
      failures += 1;
      error ??= new ShiitakeError(200, "watch_ended", "the watch ended");
      if (failures >= this.reconnect.maxFailures || permanent(error)) {
        this.stopped = true;
        this.onGiveUp(error, failures);
        break;
      }
      const { initialDelayMs, maxDelayMs } = this.reconnect;
      await this.#sleep(Math.min(maxDelayMs, initialDelayMs * 2 ** (failures - 1)));
    }
    this.stopped = true;
  }

  #sleep(ms) {
    return new Promise((resolve) => {
      this.wake = resolve;
      this.timer = setTimeout(resolve, ms);
    });
  }

  stop() {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.timer);
    this.wake?.();
    this.watch?.close();
  }
}

/** The state a binding shares between its scopes. Internal. */
class BindingCore {
  constructor(transport, contract, options, fn) {
    this.t = transport;
    const { id, schema, inputs } = checkContract(contract, fn);
    this.id = id;
    this.schema = schema;
    this.inputs = inputs;
    if (options !== undefined && (options === null || typeof options !== "object")) throw new TypeError(`${fn}: options must be an object`);
    if (options?.onError !== undefined && typeof options.onError !== "function") throw new TypeError(`${fn}: \`onError\` must be a function`);
    this.onError = options?.onError;
    this.reconnect = checkReconnect(options, fn);
    this.slot = UNKNOWN;
    this.listeners = new Set();
    this.followers = new Set();
    this.closed = false;
    /** Observations made by watches, so a read answered after one does not overwrite it. */
    this.watchObservations = 0;
  }

  closedError() {
    return new TypeError(`this binding of extension ${this.id} is closed`);
  }

  checkOpen() {
    if (this.closed) throw this.closedError();
  }

  /**
   * Sets the slot from one observation (`present` false: no value; `history`:
   * the producer history it carried, if any) and tells the listeners.
   */
  observe(present, value, fromWatch, history) {
    if (this.closed) return;
    const observedAt = Date.now();
    let slot;
    if (!present) slot = { status: "absent", observedAt };
    else if (this.schema === null) slot = { status: "observed", value, observedAt };
    else {
      const where = `the projection of extension ${this.id}`;
      try {
        const r = validateSync(this.schema, value, where);
        slot = r.issues
          ? { status: "invalid", error: new ShiitakeSchemaError(200, "invalid_projection", r.message, r.issues), observedAt }
          : { status: "observed", value: r.value, observedAt };
      } catch (cause) {
        const error = new ShiitakeSchemaError(200, "invalid_projection", `${where}: ${cause?.message ?? String(cause)}`, [], { cause });
        slot = { status: "invalid", error, observedAt };
      }
    }
    if (fromWatch) this.watchObservations += 1;
    if (history !== undefined && slot.status !== "invalid") slot.history = history;
    this.slot = Object.freeze(slot);
    this.notify(undefined);
  }

  notify(error) {
    for (const entry of [...this.listeners]) {
      if (!this.listeners.has(entry)) continue; // unsubscribed by an earlier listener
      try {
        if (error === undefined) entry.listener(this.slot);
        else entry.listener(this.slot, error);
      } catch (e) {
        this.report(e);
      }
    }
  }

  report(error) {
    if (this.onError) {
      try {
        this.onError(error);
        return;
      } catch (e) {
        error = e;
      }
    }
    if (typeof globalThis.reportError === "function") globalThis.reportError(error);
    else console.error(error);
  }

  /** A watch gave up: the slot stays; listeners and onError hear why. */
  giveUp(error) {
    if (this.closed) return;
    this.notify(error);
    if (this.onError) {
      try {
        this.onError(error);
      } catch (e) {
        this.report(e);
      }
    }
  }

  addListener(listener) {
    this.checkOpen();
    if (typeof listener !== "function") throw new TypeError("subscribe(listener): the listener must be a function");
    const entry = { listener };
    this.listeners.add(entry);
    return entry;
  }

  follow(session, onEvent) {
    const f = new Follower(session, this.t, this.reconnect, onEvent, (error) => {
      this.followers.delete(f);
      this.giveUp(error);
    });
    this.followers.add(f);
    f.done.then(() => this.followers.delete(f));
    return f;
  }

  async command(path, name, input, options = {}) {
    this.checkOpen();
    if (typeof name !== "string" || name === "") throw new TypeError("command(name): the name must be a non-empty string");
    if (this.inputs !== null && !this.inputs.has(name)) throw new TypeError(`command(${JSON.stringify(name)}): the contract of extension ${this.id} names no such command`);
    const { requestId = newRequestId(), signal } = options ?? {};
    if (typeof requestId !== "string") throw new TypeError("command(): `requestId` must be a string");
    const schema = this.inputs?.get(name) ?? null;
    if (schema !== null) {
      const r = validateSync(schema, input, `${this.id}.${name}: the input`);
      if (r.issues) throw new ShiitakeSchemaError(400, "invalid_request", r.message, r.issues);
    }
    // The input as given is sent (the server validates it with its own schema).
    const answer = await this.t.request("POST", path(name), { body: { requestId, input }, signal });
    if (answer === null || typeof answer !== "object" || !("result" in answer)) {
      throw new ShiitakeError(200, "invalid_response", `the answer to command ${this.id}.${name} has no result`);
    }
    return answer.result;
  }

  close() {
    if (this.closed) return;
    this.closed = true;
    this.listeners.clear();
    for (const f of [...this.followers]) f.stop();
    this.followers.clear();
  }
}

function transportOf(handle, fn, what) {
  const t = handle !== null && typeof handle === "object" ? transports.get(handle) : undefined;
  if (t === undefined) throw new TypeError(`${fn}: ${what}`);
  return t;
}

const extensionPath = (id, rest = "") => `/extensions/${encodeURIComponent(id)}${rest}`;
const hasOwn = (o, k) => o !== null && typeof o === "object" && Object.prototype.hasOwnProperty.call(o, k);

/**
 * Binds one extension's Session scope on `session` (a handle from
 * `client.session(id)`): its Session projection and Session commands.
 */
export function bindSessionExtension(session, contract, options) {
  const fn = "bindSessionExtension";
  const t = transportOf(session, fn, "`session` must be a Session handle from client.session(id)");
  if (!(session instanceof ShiitakeSession)) throw new TypeError(`${fn}: \`session\` must be a Session handle from client.session(id)`);
  return new SessionExtensionBinding(session, new BindingCore(t, contract, options, fn));
}

class SessionExtensionBinding {
  #core;
  #session;
  #follower;

  constructor(session, core) {
    this.#core = core;
    this.#session = session;
    this.id = core.id;
    this.session = session;
  }

  get slot() {
    return this.#core.slot;
  }

  get closed() {
    return this.#core.closed;
  }

  /** Reads the Session (one message) and observes its `extensions[id]`; returns the slot. */
  async refresh({ signal } = {}) {
    const core = this.#core;
    core.checkOpen();
    const seen = core.watchObservations;
    const page = await this.#session.read({ limit: 1, signal });
    // A watch observation made meanwhile is at least as new as this read.
    if (!core.closed && core.watchObservations === seen) {
      const ext = page?.extensions;
      core.observe(hasOwn(ext, core.id), ext?.[core.id], false, page?.extensionHistory?.[core.id]);
    }
    return core.slot;
  }

  /** `listener(slot)` on every observation; the first subscriber opens the watch, the last unsubscribe closes it. */
  subscribe(listener) {
    const core = this.#core;
    const entry = core.addListener(listener);
    if (this.#follower === undefined || this.#follower.stopped) {
      this.#follower = core.follow(this.#session, (ev) => this.#onEvent(ev));
    }
    let active = true;
    return () => {
      if (!active) return;
      active = false;
      core.listeners.delete(entry);
      if (core.listeners.size === 0 && this.#follower !== undefined) {
        this.#follower.stop();
        this.#follower = undefined;
      }
    };
  }

  #onEvent({ event, data }) {
    const core = this.#core;
    if (event === "snapshot") {
      const ext = data?.extensions;
      core.observe(hasOwn(ext, core.id), ext?.[core.id], true, data?.extensionHistory?.[core.id]);
    } else if (event === "frame" && data?.type === "extension" && data.extensionId === core.id && data.scope === "session") {
      // A value of null: the projection stopped publishing (absent).
      core.observe(hasOwn(data, "value") && data.value !== null, data.value, true, data.history);
    }
  }

  /** Sends a Session-scope command: its `result`. The slot does not change until a read or a frame shows the effect. */
  command(name, input, options) {
    const sid = this.#session.id;
    return this.#core.command((n) => sessionPath(sid, `/extensions/${encodeURIComponent(this.id)}/commands/${encodeURIComponent(n)}`), name, input, options);
  }

  /** Closes the watch and drops the listeners; later calls throw. */
  close() {
    this.#core.close();
    this.#follower = undefined;
  }
}

/**
 * Binds one extension's Agent scope on `client`: its Agent projection (from
 * `GET /extensions/:id`, and from the `scope: "agent"` frames of the
 * Sessions it follows) and its Agent commands.
 */
export function bindAgentExtension(client, contract, options) {
  const fn = "bindAgentExtension";
  const t = transportOf(client, fn, "`client` must be a client from createShiitakeClient()");
  if (!(client instanceof ShiitakeClient)) throw new TypeError(`${fn}: \`client\` must be a client from createShiitakeClient()`);
  return new AgentExtensionBinding(new BindingCore(t, contract, options, fn));
}

class AgentExtensionBinding {
  #core;

  constructor(core) {
    this.#core = core;
    this.id = core.id;
    /** The last Status read (undefined before the first). */
    this.status = undefined;
  }

  get slot() {
    return this.#core.slot;
  }

  get closed() {
    return this.#core.closed;
  }

  /** Reads the extension's Status; the slot observes its `projection`. Returns the slot. */
  async refresh({ signal } = {}) {
    const core = this.#core;
    core.checkOpen();
    const seen = core.watchObservations;
    await this.#read(signal, () => core.watchObservations === seen);
    return core.slot;
  }

  async #read(signal, fresh) {
    const core = this.#core;
    const status = await core.t.request("GET", extensionPath(core.id), { signal });
    if (status === null || typeof status !== "object") throw new ShiitakeError(200, "invalid_response", `the status of extension ${core.id} is not an object`);
    if (core.closed) return;
    this.status = status;
    // A watch observation made while this read was in flight is at least as new.
    if (fresh()) core.observe(hasOwn(status, "projection"), status.projection, false);
  }

  /** `listener(slot)` on every observation (reads, and frames of the followed Sessions). */
  subscribe(listener) {
    const core = this.#core;
    const entry = core.addListener(listener);
    let active = true;
    return () => {
      if (!active) return;
      active = false;
      core.listeners.delete(entry);
    };
  }

  /**
   * Follows the `scope: "agent"` frames on `session`'s watch (opened now,
   * reopened as `subscribe`'s is); each (re)opened watch reads the Status
   * once, since a watch's snapshot carries Session projections only.
   * Returns the function that stops following.
   */
  follow(session) {
    const core = this.#core;
    core.checkOpen();
    if (!(session instanceof ShiitakeSession) || transports.get(session) !== core.t) {
      throw new TypeError("follow(session): `session` must be a Session handle of the same client");
    }
    const f = core.follow(session, (ev) => this.#onEvent(ev));
    return () => f.stop();
  }

  #onEvent({ event, data }) {
    const core = this.#core;
    if (event === "snapshot") {
      // Frames from here on are newer than the watch's start; a read now catches up on what came before.
      const seen = core.watchObservations;
      return this.#read(undefined, () => core.watchObservations === seen);
    }
    if (event === "frame" && data?.type === "extension" && data.extensionId === core.id && data.scope === "agent") {
      core.observe(hasOwn(data, "value") && data.value !== null, data.value, true);
    }
  }

  /** Sends an Agent-scope command: its `result`. The slot does not change until a read or a frame shows the effect. */
  command(name, input, options) {
    return this.#core.command((n) => extensionPath(this.id, `/commands/${encodeURIComponent(n)}`), name, input, options);
  }

  /** Stops every follow and drops the listeners; later calls throw. */
  close() {
    this.#core.close();
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
