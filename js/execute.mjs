// The sandbox behind the model's `execute` tool: model-written JavaScript runs
// in a fresh Worker Loader worker with no network (globalOutbound: null) and
// an empty env. Its only capability is one RpcTarget whose `call(path,
// argsJson)` forwards to the host's dispatch; the guest builds the namespaces
// (`notes.add(...)`, `mcp.notes.create_note(...)`, `forage.search(...)`) on it.
//
// Everything the guest says back is untrusted (the model's code shares the
// guest isolate and may patch JSON or TextEncoder), so the host re-checks the
// reply's shape and size instead of trusting the guest's own checks.
import { RpcTarget, WorkerEntrypoint } from "cloudflare:workers";
import { aborted, answerCall, checkReply, errorText, guestHarness, normalizeCode, raceAbort, RESULT_MAX_BYTES } from "./sandbox/guest.mjs";

export { normalizeCode, RESULT_MAX_BYTES };

// The guest's own date: the pinned workerd (1.20260730.x) accepts nothing newer.
const GUEST_COMPATIBILITY_DATE = "2026-07-30";
const GUEST_MODULE = "guest.js";

/** The guest worker's one module: the shared harness behind an entrypoint. */
function guestModule(harness) {
  return `import { WorkerEntrypoint } from "cloudflare:workers";

${harness}
export default class extends WorkerEntrypoint {
  evaluate(host) {
    return run(host);
  }
}
`;
}

// What the guest can reach of the host: dispatch, until the run is over.
class Host extends RpcTarget {
  #dispatch;
  constructor(dispatch) {
    super();
    this.#dispatch = dispatch;
  }

  close() {
    this.#dispatch = undefined;
  }

  call(path, argsJson) {
    return answerCall(this.#dispatch, path, argsJson);
  }
}

function dispose(stub) {
  try {
    stub?.[Symbol.dispose]?.();
  } catch {
    // Already gone: nothing to release.
  }
}

/** The guest worker's code: one module, no network, an empty env. */
function guestWorker(module) {
  return {
    compatibilityDate: GUEST_COMPATIBILITY_DATE,
    mainModule: GUEST_MODULE,
    modules: { [GUEST_MODULE]: module },
    globalOutbound: null,
    env: {},
  };
}

/** Loads `module` as a fresh worker and calls its `evaluate(host)`. */
function loadAndEvaluate(loader, module, host) {
  // load() makes a fresh, uncached worker; older runtimes only have get(id, cb).
  const worker =
    typeof loader.load === "function" ? loader.load(guestWorker(module)) : loader.get(`execute-${crypto.randomUUID()}`, async () => guestWorker(module));
  const entrypoint = worker.getEntrypoint();
  return { worker, entrypoint, result: entrypoint.evaluate(host) };
}

/**
 * The stateless entrypoint a Durable Object runs its sandboxes through, as
 * `ctx.exports.ShiitakeSandbox` (the Worker's main module must export it).
 *
 * Why: a Durable Object keeps one I/O context for its whole life, and the
 * Worker Loader's stubs (not disposable in workerd 1.20260730) belong to it,
 * so each loaded guest worker (~1.2 MiB in workerd) stays alive until V8
 * happens to collect the stubs' wrappers: RSS grew by hundreds of KiB per
 * `execute` call. A call to this entrypoint gets its own I/O context, which
 * the runtime tears down when the call returns, releasing the guest with it.
 * The guest's settings (no network, empty env) are fixed here, not taken
 * from the caller.
 */
export class ShiitakeSandbox extends WorkerEntrypoint {
  /** `module`: the guest module's source; `host`: the stub the guest may call. Resolves to the guest's reply, unchecked. */
  evaluate(module, host) {
    const loader = this.env?.LOADER;
    if (!loader) return JSON.stringify({ error: "no Worker Loader binding (LOADER)" });
    if (typeof module !== "string") return JSON.stringify({ error: "the guest module must be a string" });
    const { result } = loadAndEvaluate(loader, module, host);
    return settleAndDispose(result);
  }
}

/**
 * Awaits an RPC call's result, then disposes it (the Workers RPC lifecycle:
 * a result holds its call's session until disposed or collected, which in
 * a long-lived object is late).
 */
async function settleAndDispose(pending) {
  try {
    return await pending;
  } finally {
    dispose(pending);
  }
}

/**
 * Runs model-written JavaScript in a fresh Worker Loader worker, through
 * `sandbox` (a stub of {@link ShiitakeSandbox}, e.g.
 * `ctx.exports.ShiitakeSandbox`) when given, else with `loader` directly.
 * Resolves to `{"result": value}` or `{"error": message}` JSON text; never rejects.
 */
export async function runGuest(loader, { code, namespaces, dispatch, signal, sandbox } = {}) {
  let worker;
  let entrypoint;
  let host;
  try {
    if (signal?.aborted) return aborted(signal);
    const harness = guestHarness(code, namespaces);
    if (harness.error !== undefined) return JSON.stringify({ error: harness.error });

    host = new Host(dispatch);
    const module = guestModule(harness.source);
    let result;
    if (sandbox) {
      result = sandbox.evaluate(module, host);
    } else {
      ({ worker, entrypoint, result } = loadAndEvaluate(loader, module, host));
    }
    const run = settleAndDispose(result).then(checkReply, (error) => JSON.stringify({ error: errorText(error) }));
    return await raceAbort(run, signal);
  } catch (error) {
    return JSON.stringify({ error: errorText(error) });
  } finally {
    // Stops a guest that outlives the run (abort, stray promises) from
    // reaching dispatch. The stubs are released where the runtime makes them
    // disposable (workerd 1.20260730's loader stubs are not: hence
    // ShiitakeSandbox).
    host?.close();
    dispose(entrypoint);
    dispose(worker);
  }
}
