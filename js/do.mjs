// The Durable Object class a Worker exports: a thin JS shell around the Rust
// core (`ShiitakeCore`, built by scripts/build.sh into build/wasm/).
import { DurableObject } from "cloudflare:workers";
import * as wasm from "../build/wasm/shiitake.js";
import { runGuest } from "./execute.mjs";

// One wasm instance serves every Durable Object of this isolate. A Rust panic
// (panic=abort) traps it as a WebAssembly.RuntimeError and leaves its memory
// unusable, so the shim swaps in a fresh instance and each object rebuilds its
// core from SQLite on its next call: nothing the core needs lives only in
// memory.
let generation = 0;

// Rejecters of the calls into the core that are still awaited. A trap inside
// a microtask that Rust queued never settles the promise the caller holds; it
// surfaces as a global `error` event instead, which fails them all.
const inflight = new Set();

function isTrap(error) {
  return error instanceof WebAssembly.RuntimeError;
}

function recover(error, seenGeneration) {
  // Several callers may report the same trap; reset the instance only once.
  if (seenGeneration !== generation) return;
  console.error("shiitake: the wasm instance trapped; resetting it", error);
  generation++;
  for (const reject of inflight) reject(error);
  inflight.clear();
  wasm.__wbg_reset_state();
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

function internalError() {
  const body = {
    error: {
      code: "internal_error",
      message: "the runtime failed while serving this request and was restarted; retry it",
    },
  };
  return new Response(JSON.stringify(body), {
    status: 500,
    headers: { "content-type": "application/json" },
  });
}

export class ShiitakeDO extends DurableObject {
  #core = null;
  #coreGeneration = -1;

  /**
   * Host hook, asked first for every request the object receives. Return a
   * Response to answer it yourself, or `undefined` to let the core serve it.
   */
  async hostFetch(_request) {
    return undefined;
  }

  /**
   * Host hook: the capabilities this Agent's model may use, or `undefined`
   * for none. Read once per instance. See `js/do.d.ts` (`ShiitakeTools`):
   * `{ modules: [{ id, operations: [{ name, description, inputSchema,
   * access, confirm?, replaySafe?, direct?, run(args, ctx) }] }], access?,
   * confirm? }`. `run` is called with `this` = the Durable Object.
   */
  tools() {
    return undefined;
  }

  async fetch(request) {
    // hostFetch may answer synchronously; only a promise is awaited, so the
    // common fall-through costs no extra turn of the event loop.
    let answer = this.hostFetch(request);
    if (typeof answer?.then === "function") answer = await answer;
    if (answer !== undefined) return answer;
    for (let attempt = 0; ; attempt++) {
      const seen = generation;
      try {
        return await settleOrTrap(this.#coreNow().fetch(request));
      } catch (error) {
        if (!isTrap(error)) throw error;
        recover(error, seen);
        this.#core = null;
        // A read (a settlement long poll, a Session read) that a trap cut
        // off is served again once by the fresh instance: it changes
        // nothing. A write is answered 500 and retried by its caller with
        // the same requestId.
        const read = request.method === "GET" || request.method === "HEAD";
        if (!read || attempt > 0) return internalError();
      }
    }
  }

  async alarm() {
    const seen = generation;
    try {
      await settleOrTrap(this.#coreNow().alarm());
    } catch (error) {
      if (isTrap(error)) {
        recover(error, seen);
        this.#core = null;
      }
      // The runtime retries a failed alarm; the fresh core picks it up.
      throw error;
    }
  }

  /**
   * Host-only (an RPC method, never a session route): delivers a Session's
   * grants `{version, grants}`. Versions never move back: an older version
   * throws (`code: "grant_version_refused"`); the same version with other
   * grants replaces the stored ones. Answers `{delivered}`: "stored",
   * "replaced" or "unchanged".
   */
  deliverGrants(sessionId, delivery) {
    return this.#sync((core) => JSON.parse(core.deliverGrants(sessionId, JSON.stringify(delivery))));
  }

  /** Host-only: the Session's delivered grants `{version, grants}`, or null. */
  sessionGrants(sessionId) {
    return this.#sync((core) => JSON.parse(core.sessionGrants(sessionId)));
  }

  // A synchronous call into the core, with the same trap recovery as fetch.
  #sync(call) {
    const seen = generation;
    try {
      return call(this.#coreNow());
    } catch (error) {
      if (isTrap(error)) {
        recover(error, seen);
        this.#core = null;
      }
      throw error;
    }
  }

  #coreNow() {
    // A core built before a reset points into the dropped instance.
    if (this.#core === null || this.#coreGeneration !== generation) {
      this.#core = new wasm.ShiitakeCore(this.ctx, this.env, toolHost(this));
      this.#coreGeneration = generation;
    }
    return this.#core;
  }
}

/**
 * Delivers a Session's grants straight into a Shiitake Durable Object's
 * storage, without starting its runtime: for host code that runs in the
 * object while Shiitake is cold. `state` is the DurableObjectState (`this.ctx`).
 * Same rules and answer as `ShiitakeDO#deliverGrants`.
 */
export function deliverSessionGrantsToStorage(state, sessionId, delivery) {
  return JSON.parse(wasm.deliverSessionGrantsToStorage(state, sessionId, JSON.stringify(delivery)));
}

// The tool host the core calls (src/host/tools.rs): the Agent's capabilities
// as data, and the calls the core decides to make. Nothing here decides a
// grant or bounds a payload; the core does both.
function toolHost(object) {
  let config;
  try {
    config = object.tools();
  } catch (error) {
    return { spec: () => JSON.stringify({ modules: [], error: String(error?.message ?? error) }) };
  }
  if (config === undefined || config === null) return undefined;
  const refused = checkTools(config);
  if (refused !== undefined) return { spec: () => JSON.stringify({ modules: [], error: refused }) };
  const { confirm, ...accessData } = config.access ?? {};
  const runs = new Map();
  const modules = [];
  const direct = [];
  let problem;
  for (const module of config.modules ?? []) {
    const operations = [];
    for (const { run, direct: isDirect, ...spec } of module?.operations ?? []) {
      if (typeof run !== "function") problem ??= `${module.id}.${spec.name}: run must be a function`;
      runs.set(`${module.id}\u0000${spec.name}`, run);
      if (isDirect) direct.push(`${module.id}.${spec.name}`);
      operations.push(spec);
    }
    modules.push({ ...module, operations });
  }
  const loader = object.env?.LOADER;
  const spec = JSON.stringify({
    modules,
    direct,
    access: config.access === undefined ? null : accessData,
    confirm: typeof confirm === "function",
    loader: loader !== undefined,
    ...(config.mcpTimeoutMs !== undefined ? { mcpTimeoutMs: config.mcpTimeoutMs } : {}),
    ...(config.mcpRetryMs !== undefined ? { mcpRetryMs: config.mcpRetryMs } : {}),
    ...(problem ? { error: problem } : {}),
  });
  // MCP requests go through the host's fetch (credentials in its headers).
  const mcpFetch = config.fetch ?? ((input, init) => fetch(input, init));
  return {
    spec: () => spec,
    mcpServers: () => JSON.stringify(config.mcpServers ?? []),
    async mcpFetch(method, url, headers, body, signal) {
      const response = await mcpFetch(url, { method, headers, body, redirect: "manual", signal });
      return {
        status: response.status,
        contentType: response.headers.get("content-type"),
        headers: [...response.headers],
        body: await readBounded(response, MCP_RESPONSE_BYTES_MAX + 1),
      };
    },
    onUnavailable(report) {
      try {
        config.onUnavailable?.call(object, JSON.parse(report));
      } catch (error) {
        console.error("shiitake: onUnavailable threw", error);
      }
    },
    async invoke(moduleId, name, args, invocation, signal) {
      let data;
      const ctx = {
        ...JSON.parse(invocation),
        signal,
        display(value) {
          data = value;
        },
      };
      try {
        const result = await runs.get(`${moduleId}\u0000${name}`).call(object, JSON.parse(args), ctx);
        return JSON.stringify(data === undefined ? { result: result ?? null } : { result: result ?? null, data });
      } catch (error) {
        return JSON.stringify({ error: String(error?.message ?? error) });
      }
    },
    async confirm(request, signal) {
      try {
        return (await confirm.call(object, JSON.parse(request), { signal })) === true;
      } catch {
        return false;
      }
    },
    execute(code, namespaces, dispatch, signal) {
      return runGuest(loader, { code, namespaces: [...namespaces], dispatch, signal });
    },
  };
}

// What tools() may hold: each key is data (handed to the core as JSON) or a
// function (called by the shim). Anything else is refused by name rather
// than dropped by JSON.stringify, so a typo or a misplaced hook is not
// silently ignored.
const TOOLS_KEYS = {
  modules: "modules",
  access: "access",
  mcpServers: "data",
  mcpTimeoutMs: "data",
  mcpRetryMs: "data",
  fetch: "function",
  onUnavailable: "function",
};
const ACCESS_KEYS = { grants: "data", required: "data", confirm: "function" };
const MODULE_KEYS = { id: "data", operations: "operations" };
const OPERATION_KEYS = {
  name: "data",
  description: "data",
  inputSchema: "data",
  access: "data",
  confirm: "data",
  replaySafe: "data",
  direct: "data",
  run: "function",
};
const MOVED = { confirm: "the confirm hook is `access.confirm`" };

// Why `config` (what tools() returned) cannot be used, or undefined.
function checkTools(config) {
  const where = (path) => `tools()${path}`;
  const object = (value, path, keys) => {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return `${where(path)} must be an object`;
    for (const [key, item] of Object.entries(value)) {
      const kind = keys[key];
      const at = `${path}.${key}`;
      if (kind === undefined) {
        const hint = path === "" && MOVED[key] ? ` (${MOVED[key]})` : "";
        return `${where(at)}: unknown key \`${key}\`${hint}; known: ${Object.keys(keys).join(", ")}`;
      }
      if (item === undefined) continue;
      const problem = check(item, at, kind);
      if (problem !== undefined) return problem;
    }
    return undefined;
  };
  const list = (value, path, each) => {
    if (!Array.isArray(value)) return `${where(path)} must be an array`;
    for (const [i, item] of value.entries()) {
      const problem = each(item, `${path}[${i}]`);
      if (problem !== undefined) return problem;
    }
    return undefined;
  };
  const check = (value, path, kind) => {
    switch (kind) {
      case "function":
        return typeof value === "function" ? undefined : `${where(path)} must be a function`;
      case "data":
        return plainData(value, path, where);
      case "access":
        return object(value, path, ACCESS_KEYS);
      case "modules":
        return list(value, path, (m, at) => object(m, at, MODULE_KEYS));
      case "operations":
        return list(value, path, (op, at) => object(op, at, OPERATION_KEYS));
    }
    return undefined;
  };
  return object(config, "", TOOLS_KEYS);
}

// Why `value` is not plain JSON data (a function, symbol or bigint inside it
// would be dropped or throw in JSON.stringify), or undefined. Bounded by the
// core's own JSON depth bound.
function plainData(value, path, where, depth = 0) {
  if (depth > JSON_DEPTH_MAX) return `${where(path)} nests deeper than ${JSON_DEPTH_MAX} levels`;
  const type = typeof value;
  if (type === "function" || type === "symbol" || type === "bigint") {
    return `${where(path)} is a ${type}, which cannot be passed to the core (JSON data expected)`;
  }
  if (value === null || type !== "object") return undefined;
  for (const [key, item] of Object.entries(value)) {
    const problem = plainData(item, Array.isArray(value) ? `${path}[${key}]` : `${path}.${key}`, where, depth + 1);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

// Nesting of a JSON value crossing the capability boundary (src/limits.rs
// JSON_DEPTH_MAX; tests/e2e/limits-sync.test.mjs checks the copies).
const JSON_DEPTH_MAX = 64;

// Bytes of one MCP response body the core accepts (src/limits.rs); one more
// is read so the core can tell an oversized body from a full one.
const MCP_RESPONSE_BYTES_MAX = 4_194_304;

async function readBounded(response, limit) {
  if (response.body === null) return new Uint8Array(0);
  const reader = response.body.getReader();
  const chunks = [];
  let size = 0;
  while (size < limit) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.byteLength;
  }
  await reader.cancel().catch(() => {});
  const out = new Uint8Array(Math.min(size, limit));
  let at = 0;
  for (const chunk of chunks) {
    const take = Math.min(chunk.byteLength, out.byteLength - at);
    out.set(chunk.subarray(0, take), at);
    at += take;
  }
  return out;
}
