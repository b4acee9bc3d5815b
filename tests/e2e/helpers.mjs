// Shared harness for the end-to-end tests: one Miniflare per test file,
// serving the built demo Worker (or a fixture Worker bundled on the fly),
// and a small JSON client with assertion helpers.
//
// Every test addresses its own Agent (`h.agent()` picks a fresh agentId, so a
// fresh Durable Object), which keeps tests independent inside one Miniflare.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Miniflare } from "miniflare";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const DEMO_SCRIPT = path.join(ROOT, "build/demo/index.mjs");
export const TOKEN = "test-token";
// The newest date the pinned workerd (1.20260730.x) accepts.
export const COMPATIBILITY_DATE = "2026-07-30";

/** A 1x1 PNG, base64. */
export const PNG_1X1 =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/** UTF-8 byte length of a string. */
export const bytes = (s) => Buffer.byteLength(s, "utf8");

/** Miniflare options for a Worker whose entry exports the `ShiitakeDO` class. */
export function workerOptions(scriptPath, persistDir) {
  return {
    modules: true,
    scriptPath,
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    compatibilityDate: COMPATIBILITY_DATE,
    durableObjects: { SHIITAKE: { className: "ShiitakeDO", useSQLite: true } },
    bindings: { SHIITAKE_TOKEN: TOKEN },
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
 * Starts Miniflare on `scriptPath` (the demo Worker by default).
 * `persist: true` keeps Durable Object storage in a temporary directory so
 * that `restart()` can prove what survives; `dispose()` removes it.
 */
export async function startWorker({ scriptPath = DEMO_SCRIPT, persist = false } = {}) {
  if (!existsSync(scriptPath)) {
    throw new Error(`${path.relative(ROOT, scriptPath)} is missing: run \`bash scripts/build.sh\` first`);
  }
  const persistDir = persist ? await mkdtemp(path.join(tmpdir(), "shiitake-e2e-")) : undefined;
  const h = new Harness(scriptPath, persistDir);
  await h.start();
  return h;
}

export class Harness {
  constructor(scriptPath, persistDir) {
    this.scriptPath = scriptPath;
    this.persistDir = persistDir;
    this.mf = undefined;
  }

  async start() {
    this.mf = new Miniflare(workerOptions(this.scriptPath, this.persistDir));
    await this.mf.ready;
  }

  /** Disposes Miniflare and starts a new one on the same persisted storage. */
  async restart() {
    assert.ok(this.persistDir, "restart() needs startWorker({ persist: true })");
    await this.mf.dispose();
    await this.start();
  }

  async dispose() {
    if (this.mf) await this.mf.dispose();
    this.mf = undefined;
    if (this.persistDir) await rm(this.persistDir, { recursive: true, force: true });
  }

  /**
   * One request. `body`: undefined (none), a string or Uint8Array (sent as
   * is), or any other value (sent as JSON). `token: null` sends no
   * Authorization header. Returns `{status, json, text, headers}`; `json` is
   * undefined when the body is not JSON.
   */
  async api(method, urlPath, body, { token = TOKEN, headers = {} } = {}) {
    const h = { ...headers };
    if (token !== null) h.authorization = `Bearer ${token}`;
    let payload;
    if (body !== undefined) {
      if (typeof body === "string" || body instanceof Uint8Array) payload = body;
      else payload = JSON.stringify(body);
      if (!Object.keys(h).some((k) => k.toLowerCase() === "content-type")) h["content-type"] = "application/json";
    }
    const res = await this.mf.dispatchFetch(`http://localhost${urlPath}`, { method, headers: h, body: payload });
    const text = await res.text();
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
