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
import { parse } from "acorn";
import { TOOL_PAYLOAD_BYTES_MAX } from "./limits.mjs";

/** The largest result (JSON bytes) a run may hand back: the core's TOOL_PAYLOAD_BYTES_MAX. */
export const RESULT_MAX_BYTES = TOOL_PAYLOAD_BYTES_MAX;
// Room for the `{"result":...}` envelope around a result at the limit; guest
// error messages are cut well below the limit so they always fit. Both are
// the sandbox's own bounds.
const REPLY_MARGIN = 1024;
// Characters of a guest error message kept (the rest becomes "…").
const ERROR_MAX_CHARS = 8192;
// The guest's own date: the pinned workerd (1.20260730.x) accepts nothing newer.
const GUEST_COMPATIBILITY_DATE = "2026-07-30";
const GUEST_MODULE = "guest.js";
// Names the guest binds next to the namespaces.
const RESERVED = new Set(["env", "forage"]);

// Strict module mode, like the guest module the code ends up in, so strict-only
// errors (`with`, `let yield`, ...) are reported before any worker is loaded.
const PARSE_OPTIONS = {
  ecmaVersion: "latest",
  sourceType: "module",
  allowAwaitOutsideFunction: true,
  allowReturnOutsideFunction: true,
};
const FENCE = /^\s*```(?:javascript|js)?[ \t]*\r?\n([\s\S]*?)```\s*$/;

/**
 * Turns model-written code into the body of an async function: strips a
 * markdown fence, calls a lone function expression, returns the last
 * expression. `{error: "SyntaxError: ..."}` when it does not parse.
 */
export function normalizeCode(code) {
  if (typeof code !== "string") return { error: "the code must be a string" };
  const source = code.match(FENCE)?.[1] ?? code;
  let program;
  try {
    program = parse(source, PARSE_OPTIONS);
  } catch (error) {
    return { error: `SyntaxError: ${error.message}` };
  }
  // Module syntax parses, but the code runs inside a function.
  const moduleItem = program.body.find((node) => /^(Import|Export)/.test(node.type));
  if (moduleItem) {
    return { error: "SyntaxError: import and export are not available: the code runs inside a function; use the namespaces in scope" };
  }
  const last = program.body.at(-1);
  if (last?.type !== "ExpressionStatement") return { body: source };
  const expr = last.expression;
  const text = source.slice(expr.start, expr.end);
  const lone = program.body.length === 1 && (expr.type === "ArrowFunctionExpression" || expr.type === "FunctionExpression");
  const replacement = lone ? `return await (${text})();` : `return (${text});`;
  return { body: source.slice(0, last.start) + replacement + source.slice(last.end) };
}

/** Why `namespaces` cannot be bound in the guest, or undefined when they can. */
function refuseNamespaces(namespaces) {
  if (!Array.isArray(namespaces)) return "namespaces must be an array of identifiers";
  const seen = new Set();
  for (const name of namespaces) {
    // The regex keeps the name safe to splice into source; the parse refuses
    // reserved words; the globals check keeps e.g. `JSON` or `fetch` intact.
    let ok = typeof name === "string" && /^[A-Za-z_$][\w$]*$/.test(name) && !RESERVED.has(name) && !(name in globalThis);
    if (ok) {
      try {
        parse(`let ${name};`, PARSE_OPTIONS);
      } catch {
        ok = false;
      }
    }
    if (!ok) return `cannot bind the namespace ${JSON.stringify(name)}: not an identifier, or a reserved or global name`;
    if (seen.has(name)) return `the namespace ${JSON.stringify(name)} is listed twice`;
    seen.add(name);
  }
  return undefined;
}

/** The guest worker's one module; `body` is normalised code, `namespaces` checked names. */
function guestModule(body, namespaces) {
  return `import { WorkerEntrypoint } from "cloudflare:workers";

const MAX = ${RESULT_MAX_BYTES};
const NAMESPACES = ${JSON.stringify(namespaces)};

function message(error) {
  try {
    const text = error instanceof Error ? error.message : String(error);
    return text.length > ${ERROR_MAX_CHARS} ? text.slice(0, ${ERROR_MAX_CHARS}) + "…" : text;
  } catch {
    return "a value that cannot be shown was thrown";
  }
}

async function call(host, path, arg) {
  const reply = JSON.parse(await host.call(path, JSON.stringify(arg ?? {})));
  if (reply?.error !== undefined) throw new Error(reply.error);
  return reply?.result;
}

// Any property chain is callable; \`then\` stays undefined so that awaiting
// a namespace does not call a tool named "then".
function namespace(host, path) {
  return new Proxy(() => {}, {
    get: (_, key) => (typeof key === "string" && key !== "then" ? namespace(host, path + "." + key) : undefined),
    apply: (_, __, args) => call(host, path, args[0]),
  });
}

function scope(host) {
  const spaces = Object.fromEntries(NAMESPACES.map((name) => [name, namespace(host, name)]));
  const forage = Object.freeze({
    search: (query) => call(host, "forage.search", { query }),
    describe: (path) => call(host, "forage.describe", { path }),
  });
  return { ...spaces, env: Object.freeze({ ...spaces }), forage };
}

async function settle(run) {
  let json;
  try {
    const value = await run();
    try {
      json = JSON.stringify(value) ?? "null";
    } catch (error) {
      return JSON.stringify({ error: "the result is not JSON: " + message(error) });
    }
  } catch (error) {
    return JSON.stringify({ error: message(error) });
  }
  const bytes = new TextEncoder().encode(json).length;
  if (bytes > MAX) return JSON.stringify({ error: "the result is " + bytes + " bytes; at most " + MAX });
  return '{"result":' + json + "}";
}

export default class extends WorkerEntrypoint {
  evaluate(host) {
    return settle(guest(scope(host)));
  }
}

// Parameters, not module names: a namespace called \`scope\` or \`call\`
// shadows nothing the harness uses, and the code's own declarations may
// shadow the namespaces.
function guest({ env, forage${namespaces.map((name) => `, ${name}`).join("")} }) {
  return async () => {
${body}
  };
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

  async call(path, argsJson) {
    const dispatch = this.#dispatch;
    if (!dispatch) return JSON.stringify({ error: "the run is over" });
    if (typeof path !== "string" || typeof argsJson !== "string") {
      return JSON.stringify({ error: "call(path, argsJson) takes two strings" });
    }
    try {
      const reply = await dispatch(path, argsJson);
      return typeof reply === "string" ? reply : JSON.stringify({ error: `${path} answered no JSON text` });
    } catch (error) {
      return JSON.stringify({ error: errorText(error) });
    }
  }
}

function errorText(error) {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return "unknown error";
  }
}

/** The guest's reply as `{"result"}` or `{"error"}` JSON text, whatever the guest sent. */
function checkReply(reply) {
  if (typeof reply !== "string") return JSON.stringify({ error: "the sandbox gave no reply" });
  const bytes = new TextEncoder().encode(reply).length;
  if (bytes > RESULT_MAX_BYTES + REPLY_MARGIN) {
    return JSON.stringify({ error: `the result is ${bytes} bytes; at most ${RESULT_MAX_BYTES}` });
  }
  let parsed;
  try {
    parsed = JSON.parse(reply);
  } catch {
    parsed = undefined;
  }
  if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
    if (typeof parsed.error === "string") return JSON.stringify({ error: parsed.error });
    if (Object.hasOwn(parsed, "result")) return JSON.stringify({ result: parsed.result });
  }
  return JSON.stringify({ error: "the sandbox gave a malformed reply" });
}

function aborted(signal) {
  return JSON.stringify({ error: `aborted: ${errorText(signal.reason)}` });
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
    const normal = normalizeCode(code);
    if (normal.error !== undefined) return JSON.stringify({ error: normal.error });
    const refusal = refuseNamespaces(namespaces);
    if (refusal) return JSON.stringify({ error: refusal });

    host = new Host(dispatch);
    const module = guestModule(normal.body, namespaces);
    let result;
    if (sandbox) {
      result = sandbox.evaluate(module, host);
    } else {
      ({ worker, entrypoint, result } = loadAndEvaluate(loader, module, host));
    }
    const run = settleAndDispose(result).then(checkReply, (error) => JSON.stringify({ error: errorText(error) }));
    if (!signal) return await run;
    let onAbort;
    const abort = new Promise((resolve) => {
      onAbort = () => resolve(aborted(signal));
      signal.addEventListener("abort", onAbort, { once: true });
    });
    try {
      return await Promise.race([run, abort]);
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
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
