// Shared by bench/scale.mjs and bench/soak.mjs: the demo Worker in
// Miniflare against the loopback model server, a small JSON client, and
// readings of the workerd child process Miniflare runs (CPU from
// /proc/<pid>/stat utime+stime, RSS from /proc/<pid>/status VmRSS; Linux
// only).

import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, readlinkSync, statSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, DEMO_SCRIPT, ROOT, TOKEN, bundleEmbedded, bundleFixture, workerOptions } from "../tests/e2e/helpers.mjs";

export { TOKEN };
export const HEADERS = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
const CLK_TCK = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;

/**
 * Starts Miniflare on the built demo Worker, its model pointed at
 * `modelUrl` (an OpenAI base URL). `preventEviction`: Miniflare's
 * `unsafePreventEviction` on the Agent class (workerd otherwise evicts an
 * idle object after ~10 s of inactivity, found on its ~70 s cleanup pass).
 * `floor`: also serve bench/floor-worker.mjs (a bare SQLite Durable Object
 * inserting one row per command) at http://floor.bench/ (the demo answers
 * any other host). `inspectorPort`: workerd's inspector on that port (see
 * {@link inspect}). Returns `{mf, pid, script}`, `pid` the workerd child's,
 * `script` the demo Worker's name (for `mf.unsafeEvictDurableObject`).
 */
export async function startDemo(modelUrl, { preventEviction = false, floor = false, inspectorPort, embedded = false } = {}) {
  if (!existsSync(DEMO_SCRIPT)) {
    console.error(`${path.relative(ROOT, DEMO_SCRIPT)} is missing: run \`bash scripts/build.sh\` first`);
    process.exit(2);
  }
  const before = new Set(children());
  // embedded: the demo with the engine imported and no LOADER, so its
  // `execute` runs in the embedded sandbox (QuickJS in the object).
  const scriptPath = embedded ? await bundleEmbedded(path.join(ROOT, "js/demo.mjs"), "bench-demo") : DEMO_SCRIPT;
  const options = workerOptions(scriptPath, undefined, { SHIITAKE_MODEL: "openai/bench", OPENAI_BASE_URL: modelUrl }, { loader: !embedded });
  options.durableObjects = { SHIITAKE: { className: "ShiitakeDO", useSQLite: true, ...(preventEviction ? { unsafePreventEviction: true } : {}) } };
  const script = floor ? "shiitake" : "";
  let mf;
  if (floor) {
    const floorScript = await bundleFixture(path.join(ROOT, "bench/floor-worker.mjs"), "bench-floor");
    mf = new Miniflare({
      ...(inspectorPort ? { inspectorPort } : {}),
      workers: [
        { name: "shiitake", ...options },
        {
          name: "floor",
          routes: ["floor.bench/*"],
          modules: true,
          scriptPath: floorScript,
          compatibilityDate: COMPATIBILITY_DATE,
          durableObjects: { FLOOR: { className: "FloorDO", useSQLite: true, ...(preventEviction ? { unsafePreventEviction: true } : {}) } },
          bindings: { SHIITAKE_TOKEN: TOKEN },
        },
      ],
    });
  } else {
    mf = new Miniflare({ ...options, ...(inspectorPort ? { inspectorPort } : {}) });
  }
  await mf.ready;
  const fresh = children().filter((c) => !before.has(c));
  const pid = fresh.find((p) => comm(p) === "workerd") ?? children().find((p) => comm(p) === "workerd");
  if (!pid) throw new Error("no workerd child process found");
  return { mf, pid, script };
}

/** A free loopback TCP port (for workerd's inspector). */
export function freePort() {
  return new Promise((resolve) => {
    const s = http.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/**
 * A Chrome DevTools Protocol session with the worker whose inspector title
 * `pick(title)` accepts, over workerd's inspector at `port`. Returns
 * `{cdp(method, params), on(method, fn), titles, targets(), close()}`;
 * `targets()` counts the inspector's targets now (dynamic Worker Loader
 * guests show up there while they live).
 */
export async function inspect(port, pick) {
  const list = async () => (await fetch(`http://127.0.0.1:${port}/json`)).json();
  const all = await list();
  const target = all.find((t) => pick(t.title ?? ""));
  if (!target) throw new Error(`no inspector target among ${JSON.stringify(all.map((t) => t.title))}`);
  const ws = new WebSocket(target.webSocketDebuggerUrl ?? `ws://127.0.0.1:${port}/${target.id}`);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = reject;
  });
  let nextId = 1;
  const pending = new Map();
  const listeners = new Map();
  ws.onmessage = (event) => {
    const msg = JSON.parse(String(event.data));
    if (msg.method) listeners.get(msg.method)?.(msg.params);
    if (msg.id && pending.has(msg.id)) {
      pending.get(msg.id)(msg);
      pending.delete(msg.id);
    }
  };
  const cdp = (method, params = {}) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, (msg) => (msg.error ? reject(new Error(`${method}: ${msg.error.message}`)) : resolve(msg.result)));
      ws.send(JSON.stringify({ id, method, params }));
    });
  return {
    cdp,
    on: (method, fn) => listeners.set(method, fn),
    targets: async () => (await list()).length,
    close: () => ws.close(),
  };
}

/** The workerd child process a Miniflare of this process runs (Linux), or undefined. */
export function workerdChild() {
  return children().find((p) => comm(p) === "workerd");
}

function children() {
  try {
    return execFileSync("ps", ["--ppid", String(process.pid), "-o", "pid="]).toString().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function comm(pid) {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return "";
  }
}

/** workerd's CPU time so far (user + system, all threads), ms. */
export function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
}

/** A process's resident set size (VmRSS), KiB. */
export function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : NaN;
}

/** A process's VmRSS split (KiB): {anon, file, shmem}, and its open file descriptors and threads. */
export function memSplit(pid) {
  const st = readFileSync(`/proc/${pid}/status`, "utf8");
  const f = (k) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(st)?.[1] ?? NaN);
  let fds = NaN;
  let maps = NaN;
  try {
    fds = readdirSync(`/proc/${pid}/fd`).length;
    maps = readFileSync(`/proc/${pid}/maps`, "utf8").split("\n").length - 1;
  } catch {}
  // vm: the address space (a live V8 isolate reserves its own cage); maps: mappings.
  return { anon: f("RssAnon"), file: f("RssFile"), shmem: f("RssShmem"), vm: f("VmSize"), threads: f("Threads"), fds, maps };
}

/** The Node process's own CPU time so far (user + system), ms. */
export function nodeCpuMs() {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** Readings at the start of a phase; `.end(n)` gives its figures per unit of work. */
export function meter(pid) {
  const t0 = performance.now();
  const c0 = cpuMs(pid);
  const n0 = nodeCpuMs();
  return {
    end(n) {
      const wallMs = performance.now() - t0;
      const workerdMs = cpuMs(pid) - c0;
      const nodeMs = nodeCpuMs() - n0;
      return { n, wallMs, workerdMs, nodeMs, wallPer: wallMs / n, workerdPer: workerdMs / n, nodePer: nodeMs / n };
    },
  };
}

/** A JSON client over `mf.dispatchFetch`; throws on a status >= 300 (the error carries `.status`). */
export function client(mf, host = "bench") {
  return async function call(method, p, body, { signal } = {}) {
    const res = await mf.dispatchFetch(`http://${host}${p}`, { method, headers: HEADERS, body: body === undefined ? undefined : JSON.stringify(body), signal });
    const text = await res.text();
    if (res.status >= 300) {
      const e = new Error(`${method} ${p}: HTTP ${res.status} ${text.slice(0, 300)}`);
      e.status = res.status;
      throw e;
    }
    return text ? JSON.parse(text) : null;
  };
}

/** Long-polls a command's settlement (30 s chunks, at most `boundMs`); null if it never settled. */
export async function settle(call, agent, session, commandId, boundMs = 120_000) {
  const deadline = Date.now() + boundMs;
  while (Date.now() < deadline) {
    const wait = Math.min(30_000, Math.max(1, deadline - Date.now()));
    const s = await call("GET", `/agents/${agent}/sessions/${session}/settlement?commandId=${encodeURIComponent(commandId)}&timeoutMs=${wait}`);
    if (s !== null) return s;
  }
  return null;
}

/** Runs `fn(i)` for i in 0..n-1 with at most `inflight` at once; collects the results in order. */
export async function pool(n, inflight, fn) {
  const out = new Array(n);
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      out[i] = await fn(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(inflight, n) }, worker));
  return out;
}

/** The q-quantile (0..1) of numbers (nearest rank). */
export function quantile(values, q) {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
}

export const ms = (v) => (Number.isFinite(v) ? `${v.toFixed(v < 10 ? 2 : 1)} ms` : "n/a");

export const sleep = (t) => new Promise((r) => setTimeout(r, t));

/** Least-squares slope of y over x and its standard error. */
export function regression(xs, ys) {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxx = 0;
  let sxy = 0;
  for (let i = 0; i < n; i++) {
    sxx += (xs[i] - mx) ** 2;
    sxy += (xs[i] - mx) * (ys[i] - my);
  }
  const slope = sxy / sxx;
  let sse = 0;
  for (let i = 0; i < n; i++) sse += (ys[i] - my - slope * (xs[i] - mx)) ** 2;
  const se = n > 2 ? Math.sqrt(sse / (n - 2) / sxx) : NaN;
  return { slope, se, intercept: my - slope * mx };
}

/**
 * The directory where workerd keeps a Durable Object class's SQLite files
 * (found among its open files: `<tmp>/do/<worker>-<class>/`), or undefined.
 */
export function storeDir(pid, worker, className) {
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    let target;
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue;
    }
    const i = target.indexOf(`/do/${worker}-${className}/`);
    if (i >= 0) return target.slice(0, i + `/do/${worker}-${className}/`.length);
  }
  return undefined;
}

/** Bytes on disk of each object's store in `dir` (its .sqlite plus its -wal), by object hash. */
export function storeSizes(dir) {
  const out = new Map();
  if (!dir) return out;
  for (const name of readdirSync(dir)) {
    const m = /^([0-9a-f]{64})\.sqlite(-wal)?$/.exec(name);
    if (!m) continue;
    let size = 0;
    try {
      size = statSync(path.join(dir, name)).size;
    } catch {}
    out.set(m[1], (out.get(m[1]) ?? 0) + size);
  }
  return out;
}

/** Average store bytes of the objects in `after` that are not in `before`. */
export function newStoreBytes(before, after) {
  let n = 0;
  let bytes = 0;
  for (const [k, v] of after) {
    if (before.has(k)) continue;
    n++;
    bytes += v;
  }
  return n === 0 ? NaN : bytes / n;
}

/**
 * workerd's anonymous RSS by what holds it (KiB), from /proc/<pid>/smaps:
 * `v8` the V8 heaps of all its isolates (the 4 GiB pointer-compression
 * cage), `malloc` its native heap (tcmalloc's 1 GiB regions: SQLite,
 * requests, streams, the native side of JS objects), `other` the rest
 * (wasm linear memories, stacks, code). Mappings are grouped into runs of
 * adjacent anonymous mappings; a run's reserved size says which it is.
 */
export function anonSplit(pid) {
  const runs = [];
  let run;
  let current;
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      const [lo, hi] = [Number.parseInt(head[1], 16), Number.parseInt(head[2], 16)];
      current = head[3] === "" ? { lo, hi, rss: 0 } : undefined;
      if (current === undefined) run = undefined;
      else if (run !== undefined && run.hi === lo) run.hi = hi;
      else runs.push((run = { lo, hi, rss: 0 }));
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && current !== undefined) run.rss += Number(rss[1]);
  }
  const out = { v8: 0, malloc: 0, other: 0 };
  const GiB = 2 ** 30;
  for (const r of runs) out[r.hi - r.lo === 4 * GiB ? "v8" : r.hi - r.lo === GiB ? "malloc" : "other"] += r.rss;
  return out;
}
