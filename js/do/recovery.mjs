// Trap recovery: the policy that keeps Durable Objects serving after a Rust
// panic. One wasm instance serves every Durable Object of this isolate. A
// panic (panic=abort) traps it as a WebAssembly.RuntimeError and leaves its
// memory unusable, so the shim swaps in a fresh instance and each object
// rebuilds its core from SQLite on its next call: nothing the core needs
// lives only in memory. js/do.mjs routes every call into the core through
// the guards below.
import * as wasm from "../../build/wasm/shiitake.js";
import { BODY_BYTES_MAX, SETTLEMENT_TIMEOUT_MS_MAX } from "../limits.mjs";
import { readBody } from "./body.mjs";

// The instance's generation: a core built in an older one points into a
// dropped instance (ShiitakeDO rebuilds it).
export let generation = 0;

// Rejecters of the calls into the core that are still awaited. A trap inside
// a microtask that Rust queued never settles the promise the caller holds; it
// surfaces as a global `error` event instead, which fails them all.
const inflight = new Set();

// The core's panic hook reports, just before the trap, which Agent and
// Session were running and which turns every object held (src/host/blame.rs).
// After the reset each object's fresh core resumes its interrupted turns at
// their current attempt, except the trapping Session's, which counts a new
// one. The first report of an instance names the trap: a call into the dead
// instance before the reset may panic again on its broken state.
let lastReport = null;
// The reset that ended the last generation: `{generation, report, spared}`
// (`spared`: the objects whose turns it spared).
let lastReset = { generation: 0, report: null, spared: new Set() };
// Durable Object id -> its turns to resume without a new attempt (head ->
// Session), until its fresh core takes them. Kept across resets: an object
// whose core was not rebuilt since ran nothing a later trap could blame.
const spared = new Map();
// Objects whose spared turns are kept at most; past it the oldest entry is
// dropped (its turns then count an attempt, as after a crash).
const SPARED_OBJECTS_MAX = 1_024;
// Watch streams to resume with a fresh snapshot after a reset.
const watches = new Set();
// Reads (GET/HEAD, settlement long polls among them) a reset cut off are
// served again by the fresh instance. Resets that may be their own doing (a
// trap in this object outside any turn, or one blamed on no one) count, at
// most this many times each; a turn's trap never does (that turn counts an
// attempt). An alarm a reset cut off is run again at most this many times.
const READ_RETRIES_MAX = 3;
// Consecutive resets a watch stream survives; past it the stream ends and
// the client reconnects (docs/http.md).
const WATCH_RESUMES_MAX = 8;
// The Retry-After (seconds) of a request a reset cut off (503 runtime_restarted).
const RESTART_RETRY_AFTER_S = 1;

function listen() {
  const listening = generation;
  wasm.setTrapReporter((json) => {
    if (listening !== generation || lastReport !== null) return;
    try {
      lastReport = JSON.parse(json);
    } catch {
      lastReport = null;
    }
  });
}
listen();

function isTrap(error) {
  return error instanceof WebAssembly.RuntimeError;
}

function recover(error, seenGeneration) {
  // Several callers may report the same trap; reset the instance only once.
  if (seenGeneration !== generation) return;
  const report = lastReport;
  lastReport = null;
  console.error(
    "shiitake: the wasm instance trapped; resetting it",
    report ? `(${report.message}; Agent ${report.agent ?? "unknown"}, Session ${report.session ?? "none"})` : "",
    error,
  );
  generation++;
  lastReset = { generation, report, spared: new Set() };
  // Blame only a trap raised inside a known scope; otherwise every turn
  // counts an attempt, as after a crash.
  if (report?.agent) {
    for (const [agent, head, session, calling] of report.held ?? []) {
      if (agent === report.agent && session === report.session) continue;
      spare(agent, head, session, calling === true);
      lastReset.spared.add(agent);
    }
  }
  for (const reject of inflight) reject(error);
  inflight.clear();
  wasm.__wbg_reset_state();
  listen();
  for (const watch of watches) watch.interrupt();
}

// `calling`: the reset cut the turn's model call off (the new core counts
// it unknown); kept across resets until a core takes it.
function spare(agent, head, session, calling) {
  let heads = spared.get(agent);
  if (heads === undefined) {
    if (spared.size >= SPARED_OBJECTS_MAX) spared.delete(spared.keys().next().value);
    heads = new Map();
    spared.set(agent, heads);
  }
  heads.set(head, { session, calling: calling || heads.get(head)?.calling === true });
}

/** Object `id`'s turns to resume without a new attempt, `[[head, session, cutOff], ...]` as the core takes them (JSON), or undefined. */
export function takeSpared(id) {
  const heads = spared.get(id);
  spared.delete(id);
  return heads ? JSON.stringify([...heads].map(([head, { session, calling }]) => [head, session, calling])) : undefined;
}

// Whether the reset that ended generation `seen` may be the doing of object
// `id`'s own request: a trap in its code outside any turn, one blamed on no
// one, or one not known (several resets since).
function selfInflicted(seen, id) {
  const report = lastReset.generation === seen + 1 ? lastReset.report : null;
  return !report?.agent || (report.agent === id && !report.session);
}

// Whether the reset that ended generation `seen` spared turns of object `id`.
function sparedAny(seen, id) {
  return lastReset.generation === seen + 1 && lastReset.spared.has(id);
}

if (typeof globalThis.addEventListener === "function") {
  globalThis.addEventListener("error", (event) => {
    if (isTrap(event.error)) recover(event.error, generation);
  });
}

function settleOrTrap(promise) {
  return new Promise((resolve, reject) => {
    inflight.add(reject);
    Promise.resolve(promise)
      .then(resolve, reject)
      .finally(() => inflight.delete(reject));
  });
}

/** A synchronous call into the core: a trap resets the instance and is thrown. */
export function guardSync(call) {
  const seen = generation;
  try {
    return call();
  } catch (error) {
    if (isTrap(error)) recover(error, seen);
    throw error;
  }
}

/** One call into the core (`work()`, a value or a promise): after a trap, `restarted()`'s answer. */
export async function guard(work, restarted) {
  const seen = generation;
  try {
    return await settleOrTrap(work());
  } catch (error) {
    if (!isTrap(error)) throw error;
    recover(error, seen);
    return restarted();
  }
}

// The answer to a request a reset cut off and not served again: retryable,
// since the request did nothing wrong (a write changed nothing or committed
// whole, so its retry with the same requestId is answered once).
function restarted(write) {
  const message = write
    ? "the runtime restarted while serving this request; send it again (a command with the same requestId is admitted at most once)"
    : "the runtime restarted repeatedly while serving this read; send it again";
  return new Response(JSON.stringify({ error: { code: "runtime_restarted", message } }), {
    status: 503,
    headers: { "content-type": "application/json", "retry-after": String(RESTART_RETRY_AFTER_S) },
  });
}

// A settlement long poll served again waits only what is left of its
// timeout, so a reset never extends the wait the client asked for.
function withTimeLeft(request, elapsedMs) {
  const url = new URL(request.url);
  if (!url.pathname.endsWith("/settlement")) return request;
  const search = url.search.replace(/([?&]timeoutMs=)([0-9]{1,9})(?=&|$)/, (_, key, ms) => `${key}${Math.max(0, Math.min(Number(ms), SETTLEMENT_TIMEOUT_MS_MAX) - elapsedMs)}`);
  if (search === url.search) return request;
  url.search = search;
  return new Request(url, request);
}

// Whether `url` is one of the browser bridge's (`/browser/...`).
function bridged(url) {
  return url.startsWith("/browser/", url.indexOf("/", url.indexOf("://") + 3));
}

export function isEventStream(response) {
  return response.status === 200 && response.body !== null && (response.headers.get("content-type") ?? "").startsWith("text/event-stream");
}

/**
 * The core's answer to `request` for object `id` (`core()` its current
 * core): a read a reset cut off is served again (it changes nothing); a
 * write is answered 503 and sent again by its caller with the same
 * requestId. A core built before the reset is replaced by `core()` (by
 * generation), never dropped here: a sibling call may already have built
 * this generation's core.
 */
export async function serve(core, id, request) {
  const read = request.method === "GET" || request.method === "HEAD";
  const started = Date.now();
  // The body is read here (a reset while it arrives cuts the request off
  // as one inside the core would), so the core answers in one synchronous
  // call; the browser bridge's routes check a request before reading its
  // body, so the core reads theirs.
  const bridge = bridged(request.url);
  let body;
  for (let own = 0; ; ) {
    const seen = generation;
    try {
      if (bridge) return await settleOrTrap(core().fetch(request));
      body ??= await settleOrTrap(readBody(request, BODY_BYTES_MAX));
      // A Response, or a promise of one (a settlement long poll).
      const answer = core().fetchRead(request, body);
      return answer instanceof Promise ? await settleOrTrap(answer) : answer;
    } catch (error) {
      if (!isTrap(error)) throw error;
      recover(error, seen);
      if (!read) return restarted(true);
      if (selfInflicted(seen, id) && ++own > READ_RETRIES_MAX) return restarted(false);
      request = withTimeLeft(request, Date.now() - started);
    }
  }
}

/**
 * A watch whose stream outlives a reset: the dead instance's stream is
 * dropped and a fresh one (`reopen(request)`, served again) spliced in,
 * starting with a `snapshot` (as after lag), so the client never sits on a
 * silent stream.
 */
export function resumable(reopen, request, response) {
  const { readable, writable } = new TransformStream();
  const writer = writable.getWriter();
  const url = request.url;
  const headers = new Headers(request.headers);
  let interrupt = () => {};
  let reader;
  const watch = { interrupt: () => interrupt() };
  watches.add(watch);
  const pump = async (body) => {
    for (let resumes = 0; ; resumes++) {
      const current = body.getReader();
      reader = current;
      // The dead instance's stream never ends by itself: a reset cancels
      // it, which ends the pending read (no race set up per chunk).
      let reset = false;
      interrupt = () => {
        reset = true;
        current.cancel().catch(() => {});
      };
      for (;;) {
        const next = await current.read();
        if (reset || next.done) break; // reset, or the core ended it (Session deleted)
        await writer.write(next.value); // throws once the client went away
      }
      if (!reset || resumes >= WATCH_RESUMES_MAX) break;
      const fresh = await reopen(new Request(url, { method: "GET", headers }));
      if (!isEventStream(fresh)) {
        await fresh.body?.cancel().catch(() => {});
        break;
      }
      body = fresh.body;
    }
    await writer.close();
  };
  // A write fails once the client went away: the core's stream is
  // cancelled, which closes its watcher (src/host/watch.rs).
  pump(response.body)
    .catch(() => reader?.cancel().catch(() => {}))
    .finally(() => watches.delete(watch));
  return new Response(readable, { status: response.status, headers: response.headers });
}

/**
 * The alarm of object `id`, run again after a reset: an object whose turns
 * the reset spared resumes them at once; one with nothing spared (its own
 * code trapped) leaves the retry to the runtime's alarm backoff.
 */
export async function runAlarm(core, id) {
  for (let attempt = 0; ; attempt++) {
    const seen = generation;
    try {
      return await settleOrTrap(core().alarm());
    } catch (error) {
      if (!isTrap(error)) throw error;
      recover(error, seen);
      if (attempt >= READ_RETRIES_MAX || !sparedAny(seen, id)) throw error;
    }
  }
}
