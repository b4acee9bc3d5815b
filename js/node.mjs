// `shiitake/node`: one durable Agent in a SQLite file, on the Node event
// loop. The same wasm core and the same shim (`ShiitakeDO`, js/do.mjs) run
// against a Durable-Object-like `ctx` built here on `node:sqlite`:
//
//   ctx.storage.sql.exec(query, ...params)  -> a cursor (raw, toArray, one,
//                                              iteration, columnNames,
//                                              rowsRead, rowsWritten)
//   ctx.storage.transactionSync(fn)          -> SAVEPOINT / RELEASE / ROLLBACK TO
//   ctx.storage.setAlarm/getAlarm/deleteAlarm -> one row in a small table plus
//                                              a timer, written without an
//                                              fsync: an open runs one pass,
//                                              which rebuilds it from the store
//   ctx.storage.deleteAll()                  -> drops every table
//   ctx.id.name / toString(), ctx.waitUntil, ctx.blockConcurrencyWhile
//
// The file is held exclusively (SQLite `locking_mode=EXCLUSIVE` plus an
// immediate write) from open until close(): a second open, in this process or
// another, is refused with an error naming the file.
import { createHash } from "node:crypto";
import { realpathSync } from "node:fs";
import * as nodeModule from "node:module";
import { basename, dirname, extname, resolve } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { Hono } from "hono";
import { mountSessionRoutes } from "./app.mjs";
import { registerNodeEngine } from "./sandbox/node.mjs";

const WASM_URL = new URL("../build/wasm/shiitake_bg.wasm", import.meta.url).href;
const WORKERS_STUB = "shiitake-node:cloudflare-workers";
const WORKERS_STUB_SOURCE =
  "export class DurableObject { constructor(ctx, env) { this.ctx = ctx; this.env = env; } }\n" +
  "export class RpcTarget {}\nexport class WorkerEntrypoint { constructor(ctx, env) { this.ctx = ctx; this.env = env; } }\n";
const WASM_SOURCE = `import { readFileSync } from "node:fs";\nexport default new WebAssembly.Module(readFileSync(new URL(${JSON.stringify(WASM_URL)})));\n`;

/** The table holding the alarm (one row); the runtime's own tables never start with `_shiitake_node`. */
const ALARM_TABLE = "_shiitake_node_alarm";
/** Cloudflare retries a throwing alarm with exponential backoff from 2 s, at most 6 times. */
const ALARM_RETRY_BASE_MS = 2000;
const ALARM_RETRIES_MAX = 6;
/** setTimeout's longest delay; a later alarm re-arms in steps. */
const TIMER_MS_MAX = 2 ** 31 - 1;
/** Prepared statements kept per file (least recently used dropped). */
const STATEMENTS_MAX = 512;
/** Env names taken from process.env when `env` is not given. */
const ENV_PREFIXES = ["SHIITAKE_", "OPENAI_", "ANTHROPIC_"];

// Files this process holds (real path -> true): a clearer refusal than
// SQLite's "database is locked" for the common same-process mistake.
const held = new Set();

let shimPromise = null;
let hooked = false;

// js/do.mjs imports `cloudflare:workers` (for DurableObject) and the
// wasm-bindgen glue imports `./shiitake_bg.wasm` as a compiled module, as
// workerd loads them. Two narrow module hooks give Node the same two modules;
// no other specifier or URL is touched.
function installHooks() {
  if (hooked) return;
  hooked = true;
  if (typeof nodeModule.registerHooks === "function") {
    nodeModule.registerHooks({
      resolve(specifier, context, next) {
        if (specifier === "cloudflare:workers") return { url: WORKERS_STUB, shortCircuit: true };
        return next(specifier, context);
      },
      load(url, context, next) {
        if (url === WORKERS_STUB) return { format: "module", source: WORKERS_STUB_SOURCE, shortCircuit: true };
        if (url === WASM_URL) return { format: "module", source: WASM_SOURCE, shortCircuit: true };
        return next(url, context);
      },
    });
    return;
  }
  // Node < 22.15: the off-thread hooks, same two answers.
  const hooks = `
    export async function resolve(specifier, context, next) {
      if (specifier === "cloudflare:workers") return { url: ${JSON.stringify(WORKERS_STUB)}, shortCircuit: true };
      return next(specifier, context);
    }
    export async function load(url, context, next) {
      if (url === ${JSON.stringify(WORKERS_STUB)}) return { format: "module", source: ${JSON.stringify(WORKERS_STUB_SOURCE)}, shortCircuit: true };
      if (url === ${JSON.stringify(WASM_URL)}) return { format: "module", source: ${JSON.stringify(WASM_SOURCE)}, shortCircuit: true };
      return next(url, context);
    }`;
  nodeModule.register(`data:text/javascript,${encodeURIComponent(hooks)}`);
}

function loadShim() {
  if (shimPromise === null) {
    installHooks();
    // `tools().sandbox: "embedded"` runs here with no import of the host's.
    registerNodeEngine();
    shimPromise = import("./do.mjs");
  }
  return shimPromise;
}

/**
 * `ShiitakeDO` loaded for Node (its `cloudflare:workers` import and wasm
 * resolved here), for a host that composes its own store with
 * `acquireNodeStoreLease` and `nodeRuntimeHost`.
 */
export async function nodeShiitakeDO() {
  return (await loadShim()).ShiitakeDO;
}

/**
 * `shiitake/files-search` loaded for Node (its wasm resolved here); the
 * package's `node` condition (js/files-search-node.mjs) imports it so.
 */
export async function nodeFilesSearch() {
  installHooks();
  return import("./files-search.mjs");
}

/** The error a second open of a held file gets. */
export class NodeStoreLeaseError extends Error {
  constructor(path, detail) {
    super(`shiitake/node: ${path} is already open (held exclusively by another openNodeShiitake, in this process or another, until it closes)${detail ? `: ${detail}` : ""}`);
    this.name = "NodeStoreLeaseError";
    this.code = "SHIITAKE_LEASE_HELD";
    this.path = path;
  }
}

// ---------------------------------------------------------------- values

// DO semantics: integers and reals are numbers, text strings, NULL null,
// BLOBs ArrayBuffers (node:sqlite answers Uint8Array).
function fromSqlite(value) {
  if (value instanceof Uint8Array) return value.buffer.slice(value.byteOffset, value.byteOffset + value.byteLength);
  if (typeof value === "bigint") return Number(value);
  return value;
}

function toSqlite(value) {
  if (value === undefined) return null;
  if (typeof value === "boolean") return value ? 1 : 0;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  return value;
}

/** A Durable Object SQL cursor over rows already read (the core reads every row it asks for). */
class NodeSqlCursor {
  #rows;
  #next = 0;
  constructor(columnNames, rows, rowsRead, rowsWritten) {
    this.columnNames = columnNames;
    this.#rows = rows;
    this.rowsRead = rowsRead;
    this.rowsWritten = rowsWritten;
  }
  #object(row) {
    const out = {};
    this.columnNames.forEach((name, i) => {
      out[name] = row[i];
    });
    return out;
  }
  next() {
    if (this.#next >= this.#rows.length) return { done: true, value: undefined };
    return { done: false, value: this.#object(this.#rows[this.#next++]) };
  }
  [Symbol.iterator]() {
    return this;
  }
  toArray() {
    const out = [];
    for (let r = this.next(); !r.done; r = this.next()) out.push(r.value);
    return out;
  }
  one() {
    const rest = this.toArray();
    if (rest.length === 0) throw new Error("Expected exactly one result from SQL query, but got no results.");
    if (rest.length > 1) throw new Error("Expected exactly one result from SQL query, but got multiple results.");
    return rest[0];
  }
  raw() {
    const rows = this.#rows;
    const self = this;
    return {
      next() {
        if (self.#next >= rows.length) return { done: true, value: undefined };
        return { done: false, value: rows[self.#next++].slice() };
      },
      toArray() {
        const out = [];
        for (let r = this.next(); !r.done; r = this.next()) out.push(r.value);
        return out;
      },
      [Symbol.iterator]() {
        return this;
      },
    };
  }
}

// Splits a script into statements (DO's exec runs every statement of its
// query; node:sqlite's prepare would run only the first). Quotes, comments
// and CREATE TRIGGER ... BEGIN ... END bodies are respected.
export function splitStatements(sql) {
  const out = [];
  let start = 0;
  let depth = 0; // BEGIN ... END inside a trigger body
  let i = 0;
  const n = sql.length;
  const word = (at) => /[A-Za-z_]/.test(sql[at] ?? "") && !/[A-Za-z0-9_$]/.test(sql[at - 1] ?? "");
  while (i < n) {
    const ch = sql[i];
    if (ch === "'" || ch === '"' || ch === "`") {
      const end = sql.indexOf(ch, i + 1);
      i = end < 0 ? n : end + 1;
      // A doubled quote re-enters the same quoted run on the next pass.
    } else if (ch === "[") {
      const end = sql.indexOf("]", i + 1);
      i = end < 0 ? n : end + 1;
    } else if (ch === "-" && sql[i + 1] === "-") {
      const end = sql.indexOf("\n", i);
      i = end < 0 ? n : end + 1;
    } else if (ch === "/" && sql[i + 1] === "*") {
      const end = sql.indexOf("*/", i + 2);
      i = end < 0 ? n : end + 2;
    } else if (ch === ";" && depth === 0) {
      out.push(sql.slice(start, i));
      start = ++i;
    } else if (word(i)) {
      const m = /^[A-Za-z_][A-Za-z0-9_$]*/.exec(sql.slice(i, i + 64));
      const w = m[0].toUpperCase();
      // A trigger's body holds `;`s until its END; a CASE inside it (or
      // anywhere) closes with an END of its own.
      if (w === "CASE" || (w === "BEGIN" && /^\s*CREATE\s+(TEMP\s+|TEMPORARY\s+)?TRIGGER\b/i.test(sql.slice(start)))) depth++;
      else if (w === "END" && depth > 0) depth--;
      i += m[0].length;
    } else {
      i++;
    }
  }
  out.push(sql.slice(start));
  return out.filter((s) => s.replace(/--[^\n]*|\/\*[\s\S]*?\*\//g, "").trim() !== "");
}

// ---------------------------------------------------------------- storage

class NodeSqlStorage {
  #db;
  #statements = new Map();
  constructor(db) {
    this.#db = db;
  }

  #prepare(sql) {
    let stmt = this.#statements.get(sql);
    if (stmt !== undefined) {
      this.#statements.delete(sql);
      this.#statements.set(sql, stmt);
      return stmt;
    }
    stmt = this.#db.prepare(sql);
    if (typeof stmt.setReturnArrays === "function") stmt.setReturnArrays(true);
    this.#statements.set(sql, stmt);
    if (this.#statements.size > STATEMENTS_MAX) this.#statements.delete(this.#statements.keys().next().value);
    return stmt;
  }

  #run(sql, params) {
    const stmt = this.#prepare(sql);
    const columns = stmt.columns().map((c) => c.name);
    const args = params.map(toSqlite);
    if (columns.length === 0) {
      const { changes } = stmt.run(...args);
      return new NodeSqlCursor([], [], 0, Number(changes));
    }
    let rows = stmt.all(...args);
    if (rows.length > 0 && !Array.isArray(rows[0])) rows = rows.map((r) => Object.values(r)); // Node without setReturnArrays
    rows = rows.map((r) => r.map(fromSqlite));
    const writes = /^\s*(INSERT|UPDATE|DELETE|REPLACE)\b/i.test(sql) ? rows.length : 0;
    return new NodeSqlCursor(columns, rows, rows.length, writes);
  }

  exec(query, ...params) {
    if (typeof query !== "string") throw new TypeError("sql.exec: the query must be a string");
    const statements = query.includes(";") ? splitStatements(query) : [query];
    if (statements.length <= 1) return this.#run(statements[0] ?? query, params);
    // Several statements: the bindings go to the last one, whose rows the cursor holds.
    let cursor;
    let written = 0;
    statements.forEach((s, i) => {
      cursor = this.#run(s, i === statements.length - 1 ? params : []);
      written += cursor.rowsWritten;
    });
    cursor.rowsWritten = written;
    return cursor;
  }

  get databaseSize() {
    const [[pages]] = this.#prepare("PRAGMA page_count").all();
    const [[size]] = this.#prepare("PRAGMA page_size").all();
    return Number(pages) * Number(size);
  }
}

// The alarm: one row (its time in epoch ms) and a timer. Cloudflare's rules:
// one alarm at a time, never two alarm() runs at once, deleted once alarm()
// succeeds unless it set a new one, a throwing alarm retried with backoff.
//
// Its writes skip the fsync (`synchronous = NORMAL` for that commit; the
// store's own commits stay FULL): the alarm is only this process's wake, and
// every open fires it at once (`nodeRuntimeHost().arm()`), so after a crash the
// first pass claims what the store holds and re-arms the alarm from its
// deadlines, whatever row survived. A WAL commit without an fsync is made
// durable by the next FULL commit, never reordered before it. On a disk this
// takes two to three fsyncs off every turn.
class NodeAlarm {
  #db;
  #run;
  #timer = null;
  #running = false;
  #closed = false;
  #retry = { at: null, count: 0 };
  #done = Promise.resolve();
  constructor(db, run, { retryBaseMs = ALARM_RETRY_BASE_MS, retriesMax = ALARM_RETRIES_MAX } = {}) {
    this.#db = db;
    this.#run = run;
    this.retryBaseMs = retryBaseMs;
    this.retriesMax = retriesMax;
  }

  get() {
    const row = this.#db.prepare(`SELECT at FROM ${ALARM_TABLE} WHERE id = 1`).get();
    return row === undefined ? null : Number(row.at);
  }

  set(scheduled) {
    const at = scheduled instanceof Date ? scheduled.getTime() : Number(scheduled);
    if (!Number.isFinite(at)) throw new TypeError("setAlarm: a time in epoch milliseconds (or a Date)");
    this.#unsynced(() => this.#db.prepare(`INSERT INTO ${ALARM_TABLE} (id, at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at = excluded.at`).run(at));
    this.arm();
  }

  delete() {
    this.#unsynced(() => this.#db.prepare(`DELETE FROM ${ALARM_TABLE} WHERE id = 1`).run());
    this.arm();
  }

  #unsynced(write) {
    try {
      this.#db.exec("PRAGMA synchronous = NORMAL");
    } catch {
      // Inside a transaction (SQLite fixes the safety level there): the
      // write commits with it.
      return write();
    }
    try {
      return write();
    } finally {
      this.#db.exec("PRAGMA synchronous = FULL");
    }
  }

  /** Points the timer at the stored alarm (none while alarm() runs: it re-arms after). */
  arm(delayFloorMs = 0) {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    if (this.#closed || this.#running) return;
    let at;
    try {
      at = this.get();
    } catch {
      return; // the file is closing
    }
    if (at === null) return;
    const delay = Math.min(TIMER_MS_MAX, Math.max(delayFloorMs, at - Date.now(), 0));
    this.#timer = setTimeout(() => this.#fire(), delay);
  }

  async #fire() {
    this.#timer = null;
    if (this.#closed || this.#running) return;
    const at = this.get();
    if (at === null) return;
    if (at > Date.now()) return this.arm(); // a long alarm, re-armed in steps
    if (this.#retry.at !== at) this.#retry = { at, count: 0 };
    this.#running = true;
    let failed = false;
    const run = (async () => {
      try {
        await this.#run({ retryCount: this.#retry.count, isRetry: this.#retry.count > 0 });
      } catch (error) {
        failed = true;
        console.error("shiitake/node: alarm() threw", error);
      }
    })();
    this.#done = run;
    await run;
    this.#running = false;
    if (this.#closed) return;
    let current;
    try {
      current = this.get();
    } catch {
      return;
    }
    if (current !== at) return this.arm(); // alarm() set another time: that one wins
    if (!failed) {
      this.#retry = { at: null, count: 0 };
      this.delete();
      return;
    }
    this.#retry.count++;
    if (this.#retry.count > this.retriesMax) {
      console.error(`shiitake/node: alarm() failed ${this.#retry.count} times; giving up on this alarm, as Cloudflare does`);
      this.#retry = { at: null, count: 0 };
      this.delete();
      return;
    }
    this.arm(this.retryBaseMs * 2 ** (this.#retry.count - 1));
  }

  /** Stops the timer; resolves once a running alarm() ended. */
  async close() {
    this.#closed = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    await this.#done;
  }
}

function openStore(file) {
  let db;
  try {
    // timeout 0: a held file is refused at once, not waited for.
    db = new DatabaseSync(file, { timeout: 0 });
  } catch (error) {
    throw new Error(`shiitake/node: cannot open ${file}: ${error.message}`, { cause: error });
  }
  try {
    db.exec("PRAGMA locking_mode = EXCLUSIVE");
    db.exec("PRAGMA journal_mode = WAL");
    db.exec("PRAGMA synchronous = FULL");
    // The first write takes the exclusive lock, which EXCLUSIVE mode keeps until close.
    db.exec("BEGIN IMMEDIATE");
    db.exec(`CREATE TABLE IF NOT EXISTS ${ALARM_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), at REAL NOT NULL)`);
    db.exec("COMMIT");
  } catch (error) {
    try {
      db.close();
    } catch {}
    if (/locked|busy/i.test(error.message)) throw new NodeStoreLeaseError(file, error.message);
    throw new Error(`shiitake/node: cannot open ${file}: ${error.message}`, { cause: error });
  }
  return db;
}

function transactionSync(db) {
  let depth = 0;
  return (fn) => {
    const name = `shiitake_node_tx_${++depth}`;
    db.exec(`SAVEPOINT ${name}`);
    try {
      const result = fn();
      db.exec(`RELEASE ${name}`);
      return result;
    } catch (error) {
      db.exec(`ROLLBACK TO ${name}`);
      db.exec(`RELEASE ${name}`);
      throw error;
    } finally {
      depth--;
    }
  };
}

function envFromProcess() {
  const out = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (ENV_PREFIXES.some((p) => key.startsWith(p))) out[key] = value;
  }
  return out;
}

// A hook option is a value or a function called with `this` = the object.
const hook = (value) =>
  function () {
    return typeof value === "function" ? value.call(this, this) : value;
  };

/**
 * Takes the exclusive lease on the SQLite file `path` (created if absent):
 * a second lease on the same file, from this process or another, is refused
 * with `NodeStoreLeaseError` until `release()`. See js/node.d.ts.
 */
export function acquireNodeStoreLease(path) {
  if (typeof path !== "string" || path === "") throw new TypeError("acquireNodeStoreLease: `path` (the SQLite file) is required");
  const file = resolve(path);
  // The real path names one file however it is spelled; a new file has none yet.
  let key;
  try {
    key = realpathSync(file);
  } catch {
    key = resolve(realpathSync(dirname(file)), basename(file));
  }
  if (held.has(key)) throw new NodeStoreLeaseError(file, "this process holds it");
  const db = openStore(file);
  held.add(key);
  let released = false;
  return {
    path: file,
    db,
    release() {
      if (released) return;
      released = true;
      db.close();
      held.delete(key);
    },
  };
}

/**
 * The Durable Object runtime a `ShiitakeDO` needs, over a lease
 * (`acquireNodeStoreLease`): `ctx` (SQL storage, the alarm as a persisted
 * timer calling `object().alarm()`, `id.name` = `agentId`, waitUntil),
 * `arm()` to run one pass once the object is built (it resumes accepted
 * work and re-arms the alarm from the store), and `close()`, which stops
 * the alarm and settles `waitUntil` work (the lease stays the caller's).
 */
export function nodeRuntimeHost(lease, { agentId, alarmRetry, object } = {}) {
  const { db } = lease;
  if (typeof object !== "function") throw new TypeError("nodeRuntimeHost: `object` (a function answering the ShiitakeDO) is required");
  const name = agentId ?? basename(lease.path, extname(lease.path));
  const hex = createHash("sha256").update(`shiitake/node:${name}`).digest("hex");
  const pending = new Set();
  const alarm = new NodeAlarm(db, (info) => object().alarm(info), alarmRetry);
  const storage = {
    sql: new NodeSqlStorage(db),
    transactionSync: transactionSync(db),
    setAlarm: async (at) => alarm.set(at),
    getAlarm: async () => alarm.get(),
    deleteAlarm: async () => alarm.delete(),
    async deleteAll() {
      const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all();
      db.exec("PRAGMA foreign_keys = OFF");
      try {
        for (const { name: table } of tables) db.exec(`DROP TABLE IF EXISTS "${table.replaceAll('"', '""')}"`);
      } finally {
        db.exec("PRAGMA foreign_keys = ON");
      }
      db.exec(`CREATE TABLE IF NOT EXISTS ${ALARM_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), at REAL NOT NULL)`);
      alarm.arm();
    },
    sync: async () => {},
  };
  const ctx = {
    id: { name, toString: () => hex, equals: (other) => String(other) === hex },
    storage,
    waitUntil(promise) {
      const p = Promise.resolve(promise).catch((error) => console.error("shiitake/node: waitUntil promise rejected", error));
      pending.add(p);
      p.finally(() => pending.delete(p));
    },
    blockConcurrencyWhile: async (fn) => fn(),
    abort: (reason) => {
      throw reason instanceof Error ? reason : new Error(String(reason ?? "aborted"));
    },
  };
  return {
    ctx,
    agentId: name,
    arm: () => alarm.set(Date.now()),
    async close() {
      await alarm.close();
      await Promise.allSettled([...pending]);
    },
  };
}

/**
 * Opens the Agent kept in the SQLite file `path` (created if absent) and holds
 * the file until `close()`. See js/node.d.ts.
 */
export async function openNodeShiitake(options = {}) {
  const { path, agentId, model, instructions, tools, extensions, hostJobs, models, initialize, hostFetch, telemetry } = options;
  if (typeof path !== "string" || path === "") throw new TypeError("openNodeShiitake: `path` (the SQLite file) is required");
  const { ShiitakeDO } = await loadShim();
  const lease = acquireNodeStoreLease(path);
  let object;
  const host = nodeRuntimeHost(lease, { agentId, alarmRetry: options.alarmRetry, object: () => object });
  const env = { ...(options.env ?? envFromProcess()) };
  if (model !== undefined) env.SHIITAKE_MODEL = model;
  if (instructions !== undefined) env.SHIITAKE_INSTRUCTIONS = instructions;

  class NodeShiitake extends ShiitakeDO {}
  const proto = NodeShiitake.prototype;
  if (tools !== undefined) proto.tools = hook(tools);
  if (extensions !== undefined) proto.extensions = hook(extensions);
  if (hostJobs !== undefined) proto.hostJobs = hook(hostJobs);
  if (telemetry !== undefined) proto.telemetry = hook(telemetry);
  if (models !== undefined) proto.models = hook(models);
  if (initialize !== undefined) proto.initialize = initialize;
  if (hostFetch !== undefined) proto.hostFetch = hostFetch;
  object = new NodeShiitake(host.ctx, env);

  const app = mountSessionRoutes(new Hono(), () => object);
  // One pass now, as a Durable Object's alarm or first request would: the
  // core resumes accepted work and re-arms the alarm from the store.
  host.arm();

  let closing = null;
  const close = (reason = "the host closed the runtime") => {
    if (closing === null) {
      closing = (async () => {
        try {
          await object.close(reason);
        } catch (error) {
          console.error("shiitake/node: closing the runtime", error);
        }
        await host.close();
        lease.release();
      })();
    }
    return closing;
  };
  return {
    agent: object.agent,
    object,
    app,
    fetch: (request) => app.fetch(request),
    path: lease.path,
    agentId: host.agentId,
    close,
  };
}

/**
 * A `node:http` request listener for a fetch handler (`app.fetch`):
 * `http.createServer(nodeListener(app.fetch)).listen(port)`. Streams both
 * bodies; a client that goes away cancels the response stream.
 * (`@hono/node-server`'s `serve({ fetch: app.fetch, port })` does the same.)
 */
export function nodeListener(fetch) {
  return async (req, res) => {
    const controller = new AbortController();
    res.on("close", () => controller.abort());
    try {
      const url = new URL(req.url ?? "/", `http://${req.headers.host ?? "localhost"}`);
      const headers = new Headers();
      for (const [k, v] of Object.entries(req.headers)) {
        if (v === undefined) continue;
        for (const one of Array.isArray(v) ? v : [v]) headers.append(k, one);
      }
      const hasBody = req.method !== "GET" && req.method !== "HEAD";
      const request = new Request(url, {
        method: req.method,
        headers,
        body: hasBody ? ReadableStreamFromNode(req) : null,
        duplex: "half",
        signal: controller.signal,
      });
      const response = await fetch(request);
      res.writeHead(response.status, [...response.headers].flat());
      if (response.body === null) return res.end();
      const reader = response.body.getReader();
      controller.signal.addEventListener("abort", () => reader.cancel().catch(() => {}));
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (!res.write(value)) await new Promise((r) => res.once("drain", r).once("close", r));
      }
      res.end();
    } catch (error) {
      if (!res.headersSent) {
        res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { code: "internal_error", message: "the Node host failed to serve this request" } }));
      } else {
        res.destroy(error);
      }
    }
  };
}

function ReadableStreamFromNode(req) {
  return new ReadableStream({
    start(controller) {
      req.on("data", (chunk) => {
        controller.enqueue(new Uint8Array(chunk));
        if (controller.desiredSize <= 0) req.pause();
      });
      req.on("end", () => controller.close());
      req.on("error", (e) => controller.error(e));
    },
    pull() {
      req.resume();
    },
    cancel() {
      req.destroy();
    },
  });
}
