// Shared harness for the end-to-end tests: one Miniflare per test file
// (`const h = useWorker(options)`), serving the built demo Worker (or a
// fixture Worker bundled on the fly), a scripted model server
// (tests/support/model-server.mjs) it calls, and a small JSON client with
// assertion helpers (settlement long poll, watch).
//
// Every test addresses its own Agent (`h.agent()` picks a fresh agentId, so a
// fresh Durable Object), which keeps tests independent inside one Miniflare.
//
// Model: by default the Worker is pointed at a model server in "hold" mode,
// where every model call hangs until the test file ends. The first prompt of
// a Session then becomes `running` and stays so; the prompts behind it stay
// `pending`. Tests about the queue occupy the Session first
// (`a.occupy(sid)`); tests about running work pick `model: "echo"` and script
// the answers (`h.model.scriptFor(tag, ...)`).

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { after, before } from "node:test";
import { Miniflare } from "miniflare";
import { SseParser } from "../../js/client.mjs";
import { BODY_BYTES_MAX } from "../../js/limits.mjs";
import { startModelServer } from "../support/model-server.mjs";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const DEMO_SCRIPT = path.join(ROOT, "build/demo/index.mjs");
export const TOKEN = "test-token";
/** The provider key the Worker is given; tests assert it reaches the model and nothing else. */
export const MODEL_API_KEY = "sk-test-7f3c9a1e-never-echoed";
/** The model the Worker is configured with (`SHIITAKE_MODEL` = `openai/<this>` or `anthropic/<this>`). */
export const MODEL_NAME = "scripted-e2e";
/** The Anthropic key the Worker is given with `model: { provider: "anthropic" }`. */
export const ANTHROPIC_TEST_KEY = "sk-ant-test-2b8e51d0-never-echoed";
/** The providers `startWorker({ model: { provider } })` can bind ("both": OpenAI as `SHIITAKE_MODEL`, Anthropic signed in beside it, one server). */
export const MODEL_PROVIDERS = ["openai", "anthropic", "both"];

/**
 * The Worker bindings `startWorker({ bindings })` takes (the settings
 * src/host/config.rs reads; values are passed as strings). A name outside
 * this list is refused, so a typo cannot silently test the default.
 */
export const WORKER_BINDINGS = [
  "SHIITAKE_MODEL",
  "SHIITAKE_MODELS",
  "OPENAI_BASE_URL",
  "OPENAI_API_KEY",
  "ANTHROPIC_BASE_URL",
  "ANTHROPIC_API_KEY",
  "SHIITAKE_INSTRUCTIONS",
  "SHIITAKE_META_SCHEMA",
  "SHIITAKE_IDENTITY_PATH",
  "SHIITAKE_USERS",
  "SHIITAKE_RETRY_BASE_MS",
  "SHIITAKE_RETRY_MAX_MS",
  "SHIITAKE_ATTEMPTS_MAX",
  "SHIITAKE_MAX_OUTPUT_TOKENS",
  "SHIITAKE_BUDGET_DAILY_TOKENS",
  "SHIITAKE_BUDGET_SESSION_TOKENS",
  "SHIITAKE_FAULT_PANIC_MARKER",
  "SHIITAKE_TOOL_TIMEOUT_MS",
  "SHIITAKE_WATCH_HEARTBEAT_MS",
  "SHIITAKE_CONTEXT_WINDOWS",
  "SHIITAKE_COMPACTION_TRIGGER",
  "SHIITAKE_COMPACTION_PROMPT",
  // tests/e2e/fixtures/tools-worker.mjs: "off" drops its confirm hook.
  "TOOLS_CONFIRM_HOOK",
  // tests/e2e/fixtures/config-worker.mjs: which broken tools() it returns.
  "TOOLS_CASE",
  // tests/e2e/fixtures/mcp-worker.mjs: its MCP server list and connect timeout.
  "MCP_SERVERS_JSON",
  "MCP_TIMEOUT_MS",
  "MCP_RETRY_MS",
  // tests/e2e/fixtures/files-worker.mjs: which Files port ("sqlite" | "r2").
  "FILES_PORT",
  // tests/e2e/fixtures/extensions-worker.mjs: its initialize ("ok" | "fail").
  "INIT",
  // tests/e2e/fixtures/files-grant-worker.mjs: which roster and tools ("ok" | "two" | "both" | "notools").
  "FILES_GRANT_CASE",
  // js/demo.mjs: "1" runs the goal example extension (the chat page renders its client entry).
  "SHIITAKE_DEMO_GOAL",
  // js/demo.mjs: "1" runs the links example extension (rows with Session open targets).
  "SHIITAKE_DEMO_LINKS",
  // tests/e2e/fixtures/ui-worker.mjs: "host" gives tools().ui a hasSession.
  "UI_HAS_SESSION",
  // tests/e2e/fixtures/statements-worker.mjs: "1" gives the demo Agent the reminder extension.
  "STATEMENTS_EXTENSIONS",
];
// The newest date the pinned workerd (1.20260730.x) accepts.
export const COMPATIBILITY_DATE = "2026-07-30";

/** A 1x1 PNG, base64. */
export const PNG_1X1 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/** A tag unique to one test, for its prompt text: `h.model.scriptFor(tag, ...)` scripts the answers to prompts containing it. */
export const uniq = (name) => `[${name}-${randomUUID().slice(0, 8)}]`;

/** A scripted model step that calls the `execute` tool with `code` (with call id `id` when given). */
export const execute = (code, id) => ({ toolCalls: [{ ...(id ? { id } : {}), name: "execute", arguments: { code } }] });

/** UTF-8 byte length of a string. */
export const bytes = (s) => Buffer.byteLength(s, "utf8");

/**
 * Miniflare options for a Worker whose entry exports the `ShiitakeDO` class;
 * `bindings` are added to `SHIITAKE_TOKEN`.
 */
export function workerOptions(scriptPath, persistDir, bindings = {}, { loader = true, r2Buckets = [] } = {}) {
  return {
    ...(r2Buckets.length > 0 ? { r2Buckets, ...(persistDir ? { r2Persist: persistDir } : {}) } : {}),
    // The Worker Loader binding the `execute` tool runs model code in.
    ...(loader ? { workerLoaders: { LOADER: {} } } : {}),
    modules: true,
    scriptPath,
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    compatibilityDate: COMPATIBILITY_DATE,
    durableObjects: { SHIITAKE: { className: "ShiitakeDO", useSQLite: true } },
    bindings: { SHIITAKE_TOKEN: TOKEN, ...bindings },
    ...(persistDir ? { durableObjectsPersist: persistDir } : {}),
  };
}

/**
 * Bundles a fixture Worker entry (under tests/e2e/fixtures/ or bench/) with the
 * build pipeline's `bundleWorker`, into build/fixtures/<name>/, and returns the
 * path of the bundled entry module.
 */
export async function bundleFixture(entryPath, name) {
  const { bundleWorker } = await import(pathToFileURL(path.join(ROOT, "scripts/bundle.mjs")).href);
  const outDir = path.join(ROOT, "build/fixtures", name);
  const { scriptPath } = await bundleWorker(entryPath, outDir);
  return scriptPath;
}

/**
 * The `execute` sandbox the fixture Workers and the demo of `startWorker`
 * run on: `SHIITAKE_TEST_SANDBOX` = "loader" (the default: the LOADER
 * binding) or "embedded" (bundled with the engine imported, as a Worker
 * opting in does, and served without LOADER, so `tools().sandbox` unset
 * picks the embedded sandbox). The test command runs the files whose tests
 * go through `execute` once more with "embedded" (scripts/test.sh).
 */
export const SANDBOX = process.env.SHIITAKE_TEST_SANDBOX ?? "loader";
if (SANDBOX !== "loader" && SANDBOX !== "embedded") throw new Error(`SHIITAKE_TEST_SANDBOX is "loader" or "embedded", not ${SANDBOX}`);

/**
 * `bundleFixture` of a Worker entry that first imports the embedded
 * sandbox's engine (`shiitake/sandbox-engine`), into build/fixtures/<name>.embedded/
 * (also bench/workerd.mjs, the demo with `--sandbox embedded`).
 */
export async function bundleEmbedded(entryPath, name) {
  const dir = path.join(ROOT, "build/fixtures", `${name}.embedded`);
  await mkdir(dir, { recursive: true });
  const wrapper = path.join(dir, `entry.${process.pid}.mjs`);
  const fixture = JSON.stringify(entryPath);
  await writeFile(
    wrapper,
    `import ${JSON.stringify(path.join(ROOT, "js/sandbox/engine-wasm.mjs"))};\nexport * from ${fixture};\nexport { default } from ${fixture};\n`,
  );
  try {
    return await bundleFixture(wrapper, `${name}.embedded`);
  } finally {
    await rm(wrapper, { force: true });
  }
}

/**
 * Starts Miniflare on `scriptPath`, or on `fixture` (a Worker under
 * tests/e2e/fixtures/, without `.mjs`, bundled), or on the demo Worker;
 * a fixture or the demo run on the SANDBOX the test command asks for
 * (`loader: false` keeps them without any `execute` sandbox).
 * `persist: true` keeps Durable Object storage in a temporary directory so
 * that `restart()` can prove what survives; `dispose()` removes it.
 *
 * `model`: "hold" (default) or "echo" starts a scripted model server
 * (`h.model`, see tests/support/model-server.mjs) with that fallback and
 * binds `SHIITAKE_MODEL=openai/${MODEL_NAME}`, `OPENAI_BASE_URL` and
 * `OPENAI_API_KEY=${MODEL_API_KEY}`; `false` starts none and binds none.
 * `{ fallback?: "hold" | "echo", provider?: "openai" | "anthropic" }`: the
 * same server, bound for that provider; "anthropic" binds
 * `SHIITAKE_MODEL=anthropic/${MODEL_NAME}`, `ANTHROPIC_BASE_URL` (the
 * server's root) and `ANTHROPIC_API_KEY=${ANTHROPIC_TEST_KEY}` instead (no
 * OPENAI_* at all). `h.modelApiKey` is the key bound either way.
 * `bindings`: more Worker bindings (names from WORKER_BINDINGS; numbers are
 * passed as strings, like wrangler vars), overriding those.
 * `r2Buckets`: R2 bucket binding names (Miniflare's local R2; persisted
 * with `persist: true`).
 * `peers`: more Workers, each `{ name, binding, scriptPath, ... }` (more
 * Miniflare worker options), bound to the runtime's Worker as the service
 * binding `binding`.
 * `log`: when given, called with every chunk (a string) the runtime writes
 * to stdout or stderr (the Worker's console: the service log).
 */
/**
 * A body over the HTTP layer's bound is refused (413) without being read,
 * and the connection closed: a reset that reaches the client while it is
 * still writing fails the send (ECONNRESET/EPIPE) before it reads the answer
 * (TCP, not the server). Such a send through `mf.dispatchFetch` is repeated,
 * at most 3 times, so a test sees the 413; a body within the bound is never
 * repeated.
 */
function repeatRefusedUnread(mf) {
  const dispatch = mf.dispatchFetch.bind(mf);
  mf.dispatchFetch = async (input, init) => {
    const body = init?.body;
    const size = typeof body === "string" ? Buffer.byteLength(body) : body instanceof Uint8Array ? body.byteLength : 0;
    for (let attempt = 1; ; attempt++) {
      try {
        return await dispatch(input, init);
      } catch (error) {
        const reset = ["ECONNRESET", "EPIPE"].includes(error?.cause?.code);
        if (attempt >= 3 || size <= BODY_BYTES_MAX || !reset) throw error;
      }
    }
  };
}

export async function startWorker(options = {}) {
  const h = new Harness();
  await h.open(options);
  return h;
}

/**
 * The Worker of a suite: one harness, started with `startWorker(options)`
 * before the first test of the suite this is called in (the file, or a
 * `describe` block) and disposed after its last. The harness is usable
 * from the suite's tests on.
 */
export function useWorker(options = {}) {
  const h = new Harness();
  before(() => h.open(options));
  after(() => h.dispose());
  return h;
}

// Bundles by `${name}:${sandbox}`, each made once per process.
const bundles = new Map();

/**
 * The Worker script `open()` serves: `fixture` (a Worker under
 * tests/e2e/fixtures/, without `.mjs`) or the demo when neither it nor
 * `scriptPath` is given, bundled for SANDBOX: with "embedded" and the
 * LOADER binding asked for, the engine imported and LOADER left out (so
 * `tools().sandbox` unset picks the embedded sandbox). `{scriptPath, loader}`.
 */
async function workerScript({ fixture, scriptPath, loader }) {
  if (scriptPath !== undefined) return { scriptPath, loader };
  const embedded = SANDBOX === "embedded" && loader;
  if (fixture === undefined && !embedded) return { scriptPath: DEMO_SCRIPT, loader };
  const name = fixture ?? "demo";
  const entry = fixture === undefined ? path.join(ROOT, "js/demo.mjs") : path.join(ROOT, "tests/e2e/fixtures", `${fixture}.mjs`);
  const key = `${name}:${embedded ? "embedded" : "loader"}`;
  if (!bundles.has(key)) bundles.set(key, embedded ? bundleEmbedded(entry, name) : bundleFixture(entry, name));
  return { scriptPath: await bundles.get(key), loader: loader && !embedded };
}

/** `startWorker`'s `model` option as `{fallback, provider}`; `fallback` undefined: no server. */
function modelOptions(model) {
  if (model === false) return { fallback: undefined, provider: undefined };
  if (model === "hold" || model === "echo") return { fallback: model, provider: "openai" };
  if (model !== null && typeof model === "object" && !Array.isArray(model)) {
    for (const k of Object.keys(model)) {
      if (k !== "fallback" && k !== "provider") throw new Error(`startWorker: unknown model option ${k} (known: fallback, provider)`);
    }
    const { fallback = "hold", provider = "openai" } = model;
    if (fallback !== "hold" && fallback !== "echo") throw new Error(`startWorker: model.fallback is "hold" or "echo", not ${fallback}`);
    if (!MODEL_PROVIDERS.includes(provider)) throw new Error(`startWorker: model.provider is ${MODEL_PROVIDERS.join(" or ")}, not ${provider}`);
    return { fallback, provider };
  }
  throw new Error(`startWorker: model is "hold", "echo", false or {fallback, provider}, not ${JSON.stringify(model)}`);
}

/** Answers kept by the harness (newest last) for leak checks. */
const SEEN_MAX = 5000;

export class Harness {
  constructor(scriptPath, persistDir, bindings = {}, model = undefined) {
    this.scriptPath = scriptPath;
    this.persistDir = persistDir;
    this.bindings = bindings;
    /** The scripted model server, when startWorker started one. */
    this.model = model;
    /** The provider the Worker is bound to call ("openai" | "anthropic"), when startWorker started a server. */
    this.provider = undefined;
    /** The provider key the Worker was given (MODEL_API_KEY or ANTHROPIC_TEST_KEY). */
    this.modelApiKey = undefined;
    this.mf = undefined;
    /** Whether the Worker gets the LOADER binding (`startWorker({ loader })`). */
    this.loader = true;
    /** Peer Workers beside the runtime's (`startWorker({ peers })`). */
    this.peers = [];
    /** R2 bucket bindings (`startWorker({ r2Buckets })`), persisted with the Durable Objects. */
    this.r2Buckets = [];
    /** `startWorker({ log })`: receives the runtime's stdout and stderr. */
    this.log = undefined;
    /** Every answer this harness received: `{method, path, status, text, headers}` (bounded). */
    this.seen = [];
  }

  /** Starts the model server (if any) and Miniflare: `startWorker`'s options. */
  async open({ fixture, scriptPath: given, persist = false, model = "hold", bindings = {}, loader: asked = true, r2Buckets = [], peers = [], log } = {}) {
    const { scriptPath, loader } = await workerScript({ fixture, scriptPath: given, loader: asked });
    if (!existsSync(scriptPath)) {
      throw new Error(`${path.relative(ROOT, scriptPath)} is missing: run \`bash scripts/build.sh\` first`);
    }
    for (const name of Object.keys(bindings)) {
      if (!WORKER_BINDINGS.includes(name)) throw new Error(`startWorker: unknown binding ${name} (known: ${WORKER_BINDINGS.join(", ")})`);
    }
    const { fallback, provider } = modelOptions(model);
    const server = fallback === undefined ? undefined : await startModelServer({ fallback });
    const all = {};
    let modelApiKey;
    if (server && provider === "anthropic") {
      modelApiKey = ANTHROPIC_TEST_KEY;
      Object.assign(all, { SHIITAKE_MODEL: `anthropic/${MODEL_NAME}`, ANTHROPIC_BASE_URL: server.origin, ANTHROPIC_API_KEY: modelApiKey });
    } else if (server) {
      modelApiKey = MODEL_API_KEY;
      Object.assign(all, { SHIITAKE_MODEL: `openai/${MODEL_NAME}`, OPENAI_BASE_URL: server.url, OPENAI_API_KEY: modelApiKey });
      if (provider === "both") Object.assign(all, { ANTHROPIC_BASE_URL: server.origin, ANTHROPIC_API_KEY: ANTHROPIC_TEST_KEY });
    }
    for (const [name, value] of Object.entries(bindings)) all[name] = String(value);
    const persistDir = persist ? await mkdtemp(path.join(tmpdir(), "shiitake-e2e-")) : undefined;
    Object.assign(this, { scriptPath, persistDir, bindings: all, model: server, loader, r2Buckets, peers, log, modelApiKey });
    this.provider = server ? provider : undefined;
    await this.start();
  }

  async start() {
    let options = workerOptions(this.scriptPath, this.persistDir, this.bindings, { loader: this.loader, r2Buckets: this.r2Buckets });
    if (this.peers.length > 0) {
      // Persistence is shared by every Worker; the rest is the runtime's own.
      const { durableObjectsPersist, r2Persist, ...own } = options;
      const serviceBindings = Object.fromEntries(this.peers.map((p) => [p.binding, p.name]));
      const peers = this.peers.map(({ binding: _, ...peer }) => ({ modules: true, compatibilityDate: COMPATIBILITY_DATE, modulesRoot: ROOT, ...peer }));
      options = { durableObjectsPersist, r2Persist, workers: [{ name: "shiitake", ...own, serviceBindings }, ...peers] };
    }
    if (this.log) {
      options.handleRuntimeStdio = (stdout, stderr) => {
        for (const stream of [stdout, stderr]) stream.on("data", (chunk) => this.log(String(chunk)));
      };
    }
    this.mf = new Miniflare(options);
    repeatRefusedUnread(this.mf);
    await this.mf.ready;
  }

  /** Disposes Miniflare and starts a new one on the same persisted storage (the model server stays). */
  async restart() {
    assert.ok(this.persistDir, "restart() needs startWorker({ persist: true })");
    await this.mf.dispose();
    await this.start();
  }

  async dispose() {
    if (this.mf) await this.mf.dispose();
    this.mf = undefined;
    if (this.model) await this.model.close();
    if (this.persistDir) await rm(this.persistDir, { recursive: true, force: true });
  }

  remember(entry) {
    this.seen.push(entry);
    if (this.seen.length > SEEN_MAX) this.seen.shift();
  }

  /**
   * One request. `body`: undefined (none), a string or Uint8Array (sent as
   * is), or any other value (sent as JSON). `token: null` sends no
   * Authorization header; `signal` aborts the request. Returns `{status,
   * json, text, headers}`; `json` is undefined when the body is not JSON.
   */
  async api(method, urlPath, body, { token = TOKEN, headers = {}, signal } = {}) {
    const h = { ...headers };
    if (token !== null) h.authorization = `Bearer ${token}`;
    let payload;
    if (body !== undefined) {
      if (typeof body === "string" || body instanceof Uint8Array) payload = body;
      else payload = JSON.stringify(body);
      if (!Object.keys(h).some((k) => k.toLowerCase() === "content-type")) h["content-type"] = "application/json";
    }
    const res = await this.mf.dispatchFetch(`http://localhost${urlPath}`, { method, headers: h, body: payload, signal });
    const text = await res.text();
    this.remember({ method, path: urlPath, status: res.status, text, headers: [...res.headers].map((kv) => kv.join(": ")).join("\n") });
    let json;
    if (text !== "") {
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
    } else {
      json = null;
    }
    return { status: res.status, json, text, headers: res.headers };
  }

  /** A client for one Agent (a fresh agentId unless given). */
  agent(agentId = `agent-${randomUUID()}`) {
    return new Agent(this, agentId);
  }

  /** A fresh Agent with one Session "s": `{a, sid}`. */
  async session() {
    const a = this.agent();
    const sid = await a.createSession("s");
    return { a, sid };
  }

  /** A fresh Session whose running turn never ends (the "hold" model), so admitted prompts stay pending: `{a, sid, occupier}`. */
  async occupied() {
    const { a, sid } = await this.session();
    const occupier = await a.occupy(sid);
    return { a, sid, occupier };
  }
}

export class Agent {
  constructor(h, id) {
    this.h = h;
    this.id = id;
  }

  api(method, rel, body, opts) {
    return this.h.api(method, `/agents/${this.id}${rel}`, body, opts);
  }

  /** Creates a Session (asserting 201) and returns its id. */
  async createSession(sessionId) {
    const res = await this.api("POST", "/sessions", sessionId === undefined ? {} : { sessionId });
    expectStatus(res, 201);
    assert.equal(typeof res.json.sessionId, "string", describe(res));
    if (sessionId !== undefined) assert.equal(res.json.sessionId, sessionId);
    return res.json.sessionId;
  }

  command(sessionId, cmd, opts) {
    return this.api("POST", `/sessions/${encodeURIComponent(sessionId)}/commands`, cmd, opts);
  }

  prompt(sessionId, requestId, text, extra = {}, opts) {
    return this.command(sessionId, { type: "prompt", requestId, text, ...extra }, opts);
  }

  operator(sessionId, requestId, text, opts) {
    return this.command(sessionId, { type: "operator", requestId, text }, opts);
  }

  cancel(sessionId, commandId, extra = {}) {
    return this.command(sessionId, { type: "cancel", commandId, ...extra });
  }

  abort(sessionId) {
    return this.command(sessionId, { type: "abort" });
  }

  withdraw(sessionId, requestId) {
    return this.api("POST", `/sessions/${encodeURIComponent(sessionId)}/withdraw`, { requestId });
  }

  /** Admits a prompt, asserts the receipt's shape, and returns its commandId. */
  async admit(sessionId, requestId, text, extra, opts) {
    const res = await this.prompt(sessionId, requestId, text, extra, opts);
    return expectAccepted(res);
  }

  async admitOperator(sessionId, requestId, text, opts) {
    return expectAccepted(await this.operator(sessionId, requestId, text, opts));
  }

  /** GET the Session read (asserting 200) with an optional query object. */
  async read(sessionId, query = {}) {
    const res = await this.readRaw(sessionId, query);
    expectStatus(res, 200);
    for (const key of ["sessionId", "messages", "pending", "running", "cursor"]) {
      assert.ok(key in res.json, `Session read lacks \`${key}\`: ${describe(res)}`);
    }
    return res.json;
  }

  readRaw(sessionId, query = {}) {
    const qs = new URLSearchParams(query).toString();
    return this.api("GET", `/sessions/${encodeURIComponent(sessionId)}${qs ? `?${qs}` : ""}`);
  }

  async pending(sessionId) {
    return (await this.read(sessionId)).pending;
  }

  /**
   * The Session's unsettled prompts in FIFO order, the running one first:
   * `[{commandId, requestId, text}]`. Unlike `pending`, it does not depend on
   * whether the run loop has claimed the oldest prompt yet.
   */
  async queue(sessionId) {
    const page = await this.read(sessionId);
    return [...(page.running ? [page.running] : []), ...page.pending].map(({ commandId, requestId, text }) => ({ commandId, requestId, text }));
  }

  /** Waits (bounded) until `commandId` is the Session's running turn; returns the read. */
  async waitRunning(sessionId, commandId, { timeoutMs = 5000 } = {}) {
    return eventually(
      async () => {
        const page = await this.read(sessionId);
        return page.running?.commandId === commandId ? page : null;
      },
      { timeoutMs, what: `${commandId} to be running in ${sessionId}` },
    );
  }

  /**
   * Admits a throwaway prompt and waits until it is the Session's running
   * turn: with the default "hold" model it stays running, so the prompts
   * admitted next stay pending (positions from 1). Returns its commandId. Its
   * `user` message is the Session's newest message at that point.
   */
  async occupy(sessionId, requestId = "occupier", text = "occupies the Session: the model never answers it") {
    const commandId = await this.admit(sessionId, requestId, text);
    await this.waitRunning(sessionId, commandId);
    return commandId;
  }

  /**
   * Admits a prompt and waits for its settlement (`boundMs`, as
   * `waitSettled`); returns the CommandSettlement, whose `commandId` is the
   * prompt's.
   */
  async settle(sessionId, requestId, text, { boundMs } = {}) {
    const commandId = await this.admit(sessionId, requestId, text);
    return this.waitSettled(sessionId, commandId, { boundMs });
  }

  /** GET .../settlement: `{status, json, text, headers}`; `timeoutMs` omitted when undefined. */
  settlement(sessionId, commandId, timeoutMs, opts) {
    const q = new URLSearchParams();
    if (commandId !== undefined) q.set("commandId", commandId);
    if (timeoutMs !== undefined) q.set("timeoutMs", String(timeoutMs));
    return this.api("GET", `/sessions/${encodeURIComponent(sessionId)}/settlement?${q}`, undefined, opts);
  }

  /**
   * Long-polls the settlement in 30 s chunks until it is not null (at most
   * `boundMs`); asserts 200 and returns the CommandSettlement.
   */
  async waitSettled(sessionId, commandId, { boundMs = 60_000 } = {}) {
    const deadline = Date.now() + boundMs;
    for (;;) {
      const left = deadline - Date.now();
      const res = await this.settlement(sessionId, commandId, Math.max(0, Math.min(30_000, left)));
      expectStatus(res, 200);
      if (res.json !== null) {
        assert.equal(res.json.commandId, commandId, describe(res));
        return res.json;
      }
      if (Date.now() >= deadline) throw new Error(`${commandId} in ${sessionId} not settled within ${boundMs} ms`);
    }
  }

  /** Opens GET .../watch; asserts 200 text/event-stream. */
  async watch(sessionId, { timeoutMs = 5000 } = {}) {
    const controller = new AbortController();
    const urlPath = `/agents/${this.id}/sessions/${encodeURIComponent(sessionId)}/watch`;
    const res = await this.h.mf.dispatchFetch(`http://localhost${urlPath}`, {
      headers: { authorization: `Bearer ${TOKEN}`, accept: "text/event-stream" },
      signal: controller.signal,
    });
    if (res.status !== 200 || !(res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
      const text = await res.text();
      controller.abort();
      throw new assert.AssertionError({
        message: `watch: expected HTTP 200 text/event-stream, got ${describe({ status: res.status, text })} (${res.headers.get("content-type")})`,
      });
    }
    return new Watch(res, controller, timeoutMs, (text) => this.h.remember({ method: "GET", path: urlPath, status: 200, text, headers: "" }));
  }

  /** Walks every page of the Session read (newest page first); returns the pages. */
  async readAllPages(sessionId, limit, maxPages = 1000) {
    const pages = [];
    let before;
    for (let i = 0; i < maxPages; i++) {
      const q = { limit: String(limit) };
      if (before !== undefined) q.before = before;
      const page = await this.read(sessionId, q);
      pages.push(page);
      if (page.cursor === null) return pages;
      assert.equal(typeof page.cursor, "string", "cursor is an opaque string or null");
      before = page.cursor;
    }
    throw new Error(`more than ${maxPages} pages`);
  }

  async listAllSessions(limit, maxPages = 1000) {
    const pages = [];
    let cursor;
    for (let i = 0; i < maxPages; i++) {
      const q = new URLSearchParams({ limit: String(limit) });
      if (cursor !== undefined) q.set("cursor", cursor);
      const res = await this.api("GET", `/sessions?${q}`);
      expectStatus(res, 200);
      pages.push(res.json);
      if (res.json.cursor === null) return pages;
      assert.equal(typeof res.json.cursor, "string", "cursor is an opaque string or null");
      cursor = res.json.cursor;
    }
    throw new Error(`more than ${maxPages} pages`);
  }
}

/**
 * A watch stream reader over the client's event-stream parser (`SseParser`
 * of js/client.mjs): `next()` gives the next `{event, data}` (data
 * JSON-parsed when it is JSON; event "message" when the frame names none), or
 * null at the end of the stream, and throws after the timeout. Iterable.
 */
export class Watch {
  constructor(res, controller, timeoutMs, onClose = () => {}) {
    this.reader = res.body.getReader();
    this.parser = new SseParser();
    this.decoder = new TextDecoder(); // for `raw`, the text handed to onClose
    this.controller = controller;
    this.timeoutMs = timeoutMs;
    this.onClose = onClose;
    this.raw = "";
    this.ready = [];
    this.ended = false;
    this.closed = false;
    /** Every event received so far. */
    this.events = [];
    this.reading = undefined;
  }

  async next(timeoutMs = this.timeoutMs) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`watch: no event within ${timeoutMs} ms; got so far: ${this.events.map(kind).join(", ") || "nothing"}`)),
        timeoutMs,
      );
    });
    try {
      await Promise.race([this.#fill(), timeout]);
    } finally {
      clearTimeout(timer);
    }
    // Taken only here, so an abandoned (timed-out) wait loses no event.
    if (this.ready.length === 0) return null;
    const ev = this.ready.shift();
    this.events.push(ev);
    return ev;
  }

  /** Resolves once an event is ready or the stream ended. */
  async #fill() {
    while (this.ready.length === 0 && !this.ended) {
      // One read (and parse) at a time, shared by waits that timed out.
      this.reading ??= this.#step().finally(() => {
        this.reading = undefined;
      });
      await this.reading;
    }
  }

  async #step() {
    const { value, done } = await this.reader.read();
    if (done) {
      this.ended = true;
      this.parser.end();
      this.raw += this.decoder.decode();
      return;
    }
    this.raw += this.decoder.decode(value, { stream: true });
    for (const { event, data } of this.parser.push(value)) {
      let parsed;
      try {
        parsed = JSON.parse(data);
      } catch {
        parsed = data;
      }
      this.ready.push({ event, data: parsed });
    }
  }

  /** Reads events until `predicate(event)` holds; returns those read (the match last). */
  async until(predicate, timeoutMs = this.timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    const got = [];
    for (;;) {
      const ev = await this.next(Math.max(1, deadline - Date.now()));
      if (ev === null) throw new Error(`watch ended before the awaited event; got: ${got.map(kind).join(", ")}`);
      got.push(ev);
      if (predicate(ev)) return got;
    }
  }

  async *[Symbol.asyncIterator]() {
    for (;;) {
      const ev = await this.next();
      if (ev === null) return;
      yield ev;
    }
  }

  async close() {
    if (this.closed) return;
    this.closed = true;
    this.onClose(this.raw);
    await this.reader.cancel().catch(() => {});
    this.controller.abort();
  }
}

/** A watch event's kind: a frame's `type`, else the SSE event name. */
export function kind(ev) {
  return ev.event === "frame" && ev.data && typeof ev.data === "object" ? ev.data.type : ev.event;
}

/**
 * Calls `fn` until it returns a truthy value (returned) or `timeoutMs` passes
 * (throws, naming `what`). For state only observable by reading it.
 */
/**
 * Waits out the last `marginMs` before a UTC midnight (at most that and a
 * second), so a test of the Agent's daily budget, whose day ends then,
 * runs within one day.
 */
export async function clearOfMidnight(marginMs) {
  const DAY_MS = 86_400_000;
  const left = DAY_MS - (Date.now() % DAY_MS);
  if (left < marginMs) await new Promise((resolve) => setTimeout(resolve, left + 1000));
}

export async function eventually(fn, { timeoutMs = 5000, intervalMs = 10, what = "a condition" } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export function describe(res) {
  const t = res.text.length > 600 ? `${res.text.slice(0, 600)}…(${res.text.length} chars)` : res.text;
  return `HTTP ${res.status} ${t}`;
}

export function expectStatus(res, status) {
  assert.equal(res.status, status, `expected HTTP ${status}, got ${describe(res)}`);
}

/** Asserts `{"error": {"code", "message"}}` with this status and code; returns the message. */
export function expectError(res, status, code) {
  assert.equal(res.status, status, `expected HTTP ${status} ${code}, got ${describe(res)}`);
  assert.ok(res.json && typeof res.json === "object" && res.json.error, `no error object: ${describe(res)}`);
  assert.equal(res.json.error.code, code, describe(res));
  assert.equal(typeof res.json.error.message, "string", describe(res));
  return res.json.error.message;
}

/** Asserts an accepted receipt `{status:"accepted", commandId}` exactly; returns the commandId. */
export function expectAccepted(res) {
  expectStatus(res, 200);
  assert.equal(typeof res.json?.commandId, "string", describe(res));
  assert.ok(res.json.commandId.length > 0, describe(res));
  assert.deepEqual(res.json, { status: "accepted", commandId: res.json.commandId });
  return res.json.commandId;
}

/** A seeded PRNG (mulberry32) so fuzz failures reproduce. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Every file under `dir`, recursively (a state directory's SQLite files and the rest). */
export async function filesUnder(dir) {
  const out = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await filesUnder(p)));
    else out.push(p);
  }
  return out;
}
