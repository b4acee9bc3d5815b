// Admission benchmark: what one durable prompt admission costs in Shiitake,
// as a ratio against the floor of this runtime (one SQLite insert in a bare
// Durable Object behind the same kind of Worker entry), measured in the same
// run, in the same in-process Miniflare, interleaved in blocks so both sides
// share the machine's noise. Beside the latencies, workerd's CPU time per
// admission (/proc/<workerd>/stat over each side's blocks; Linux): less
// swayed than wall time by other load on the machine.
//
// The requests go by `mf.dispatchFetch`, which re-streams every body
// (chunked, no declared length): the object counts such a body as it
// arrives (reads of the stream), the floor reads it at once, unbounded.
// `--http` sends them as a client does instead: HTTP/1.1 over one
// kept-alive connection to Miniflare's socket, each JSON body with its
// Content-Length (read at once on both sides). Its transport costs less
// than dispatchFetch's, so the same server-side difference is a larger
// ratio.
//
//   node bench/admission.mjs [--n 2000] [--block 100] [--warmup 200] [--pending 60] [--memory] [--http] [--also BUNDLE]
//
// Needs `bash scripts/build.sh` first (build/demo/). `--also` measures a second
// build's demo bundle (another checkout's build/demo/index.mjs) as a third
// side in the same run, so two builds compare against one floor and one noise.
// Prints figures; it is not a test and asserts no threshold, but it exits 1 if
// Shiitake refuses a prompt.

import { existsSync } from "node:fs";
import http from "node:http";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, DEMO_SCRIPT, ROOT, TOKEN, bundleFixture, workerOptions } from "../tests/e2e/helpers.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";
import { cpuMs, workerdChild } from "./workerd.mjs";
const SESSIONS = 4; // prompts rotate across these Sessions...
// ...each aborted and occupied again between blocks (not timed, CPU not
// counted) before `--pending` (60; the bound is 64) are pending: how deep
// a queue each admission counts.
const P50_RATIO_TARGET = 1.1;

const { values: args } = parseArgs({
  options: {
    n: { type: "string", default: "2000" },
    block: { type: "string", default: "100" },
    warmup: { type: "string", default: "200" },
    pending: { type: "string", default: "60" },
    memory: { type: "boolean", default: false },
    http: { type: "boolean", default: false },
    also: { type: "string" },
  },
});
const N = positive("n");
const BLOCK = positive("block");
const WARMUP = Number(args.warmup);
const PENDING_PER_SESSION = positive("pending");
if (PENDING_PER_SESSION > 63 || BLOCK > SESSIONS * PENDING_PER_SESSION) {
  console.error(`--pending must be at most 63 (a Session's running turn and its queue of 64), and --block at most ${SESSIONS} Sessions times it`);
  process.exit(2);
}

function positive(name) {
  const v = Number(args[name]);
  if (!Number.isInteger(v) || v < 1) {
    console.error(`--${name} must be a positive integer`);
    process.exit(2);
  }
  return v;
}

if (!existsSync(DEMO_SCRIPT)) {
  console.error(`${path.relative(ROOT, DEMO_SCRIPT)} is missing: run \`bash scripts/build.sh\` first`);
  process.exit(2);
}

if (args.also !== undefined && !existsSync(args.also)) {
  console.error(`--also ${args.also}: no such bundle`);
  process.exit(2);
}

const model = await startModelServer({ fallback: "hold" });
const FLOOR_SCRIPT = await bundleFixture(path.join(ROOT, "bench/floor-worker.mjs"), "bench-floor");

const persistDir = args.memory ? undefined : await mkdtemp(path.join(tmpdir(), "shiitake-bench-"));
// Admission as users meet it: each Session's first prompt is running a
// model call (held open by the scripted server), the rest queue behind it.
const shiitakeWorker = (name, script) => ({
  name,
  routes: [`${name}.bench/*`],
  ...workerOptions(script, undefined, process.env.BENCH_NO_MODEL ? {} : { SHIITAKE_MODEL: "openai/bench", OPENAI_BASE_URL: process.env.BENCH_MODEL_URL ?? model.url }),
});
const mf = new Miniflare({
  ...(persistDir ? { durableObjectsPersist: persistDir } : {}),
  workers: [
    shiitakeWorker("shiitake", DEMO_SCRIPT),
    ...(args.also === undefined ? [] : [shiitakeWorker("also", path.resolve(args.also))]),
    {
      name: "floor",
      routes: ["floor.bench/*"],
      modules: true,
      scriptPath: FLOOR_SCRIPT,
      compatibilityDate: COMPATIBILITY_DATE,
      durableObjects: { FLOOR: { className: "FloorDO", useSQLite: true } },
      bindings: { SHIITAKE_TOKEN: TOKEN },
    },
  ],
});

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
let origin;

async function call(host, method, urlPath, body) {
  const text = body === undefined ? undefined : JSON.stringify(body);
  if (!args.http) {
    const res = await mf.dispatchFetch(`http://${host}${urlPath}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: text,
    });
    return { status: res.status, text: await res.text() };
  }
  const headers = { host, authorization: `Bearer ${TOKEN}` };
  if (text !== undefined) Object.assign(headers, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(urlPath, origin), { method, agent, headers }, (res) => {
      let answer = "";
      res.setEncoding("utf8");
      res.on("data", (chunk) => (answer += chunk));
      res.on("end", () => resolve({ status: res.statusCode, text: answer }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(text);
  });
}

/** One side of the comparison: a host, an Agent, Sessions and a prompt counter. */
function side(name, host) {
  const agent = `/agents/bench-${name}`;
  const pendingIn = new Array(SESSIONS).fill(0);
  let seq = 0;
  return {
    name,
    samples: [],
    cpuMs: 0,
    async setup() {
      if (name === "floor") return; // the floor has no Sessions to create
      for (let s = 0; s < SESSIONS; s++) {
        const res = await call(host, "POST", `${agent}/sessions`, { sessionId: `s${s}` });
        if (res.status !== 201) fail(`create Session s${s}`, res);
      }
    },
    /**
     * Aborts the Sessions that the next `n` prompts would fill past
     * PENDING_PER_SESSION and occupies each again with a prompt that runs
     * (held by the model server): outside the timed and CPU-counted
     * admissions, which all queue. (An abort settles up to 60 commands and
     * the turn, and the prompt after it starts a turn; the floor's abort is
     * a bare answer and its prompt one more insert.)
     */
    async makeRoom(n) {
      let made = false;
      for (let s = 0; s < SESSIONS; s++) {
        const coming = Math.floor(n / SESSIONS) + ((s - (seq % SESSIONS) + SESSIONS) % SESSIONS < n % SESSIONS ? 1 : 0);
        if (pendingIn[s] + coming <= PENDING_PER_SESSION) continue;
        const res = await call(host, "POST", `${agent}/sessions/s${s}/commands`, { type: "abort" });
        if (res.status !== 200) fail(`abort s${s}`, res);
        const occupier = await call(host, "POST", `${agent}/sessions/s${s}/commands`, { type: "prompt", requestId: `occupy-${seq}-${s}`, text: "occupy" });
        if (occupier.status !== 200) fail(`occupy s${s}`, occupier);
        pendingIn[s] = 0;
        made = true;
      }
      // The started turn's model call begins after the answer.
      if (made) await new Promise((r) => setTimeout(r, 50));
    },
    /** Admits one fresh prompt (after `makeRoom`); returns its latency in ms. */
    async admit() {
      const s = seq % SESSIONS;
      if (pendingIn[s] === PENDING_PER_SESSION) throw new Error(`bench: s${s} is full: makeRoom first`);
      const i = seq++;
      const body = { type: "prompt", requestId: `req-${i}`, text: `benchmark prompt number ${i}: summarise the day's notes` };
      const t0 = performance.now();
      const res = await call(host, "POST", `${agent}/sessions/s${s}/commands`, body);
      const ms = performance.now() - t0;
      // Each side must really be served by its own Worker, with a real receipt.
      const receipt = res.status === 200 ? JSON.parse(res.text) : {};
      if (receipt.status !== "accepted" || receipt.commandId.startsWith("floor_") !== (name === "floor")) {
        fail(`${name}: prompt ${i} to s${s}`, res);
      }
      pendingIn[s]++;
      return ms;
    },
  };
}

function fail(what, res) {
  console.error(`bench: ${what} answered HTTP ${res.status} ${res.text.slice(0, 300)}`);
  process.exitCode = 1;
  throw new Error("benchmark aborted");
}

function quantile(sorted, q) {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

function stats(samples) {
  const s = [...samples].sort((a, b) => a - b);
  return { p50: quantile(s, 0.5), p99: quantile(s, 0.99), mean: s.reduce((a, b) => a + b, 0) / s.length };
}

const started = performance.now();
try {
  origin = await mf.ready;
  const workerd = workerdChild();
  const sides = [side("shiitake", "shiitake.bench"), ...(args.also === undefined ? [] : [side("also", "also.bench")]), side("floor", "floor.bench")];
  for (const x of sides) await x.setup();
  for (let i = 0; i < WARMUP; i++) {
    for (const x of sides) {
      await x.makeRoom(1);
      await x.admit();
    }
  }

  let done = 0;
  let block = 0;
  while (done < N) {
    const n = Math.min(BLOCK, N - done);
    // Each side first in turn, so none always follows the same one.
    const order = sides.map((_, i) => sides[(i + block) % sides.length]);
    for (const x of order) {
      await x.makeRoom(n);
      const c0 = workerd ? cpuMs(workerd) : 0;
      for (let i = 0; i < n; i++) x.samples.push(await x.admit());
      if (workerd) x.cpuMs += cpuMs(workerd) - c0;
    }
    done += n;
    block++;
  }

  const figures = sides.map((x) => stats(x.samples));
  const [sh] = figures;
  const fl = figures.at(-1);
  const f = (v) => v.toFixed(3).padStart(9);
  const r = (v) => v.toFixed(2).padStart(9);
  console.log(
    `admission: ${N} sequential prompt admissions per side (after ${WARMUP} warm-up), blocks of ${BLOCK}, up to ${PENDING_PER_SESSION} pending per Session, ` +
      `${args.http ? "HTTP/1.1 keep-alive, declared lengths" : "mf.dispatchFetch (chunked bodies)"}, DO storage ${persistDir ? "on disk" : "in memory"}` +
      (args.also === undefined ? "" : `; also: ${args.also}`),
  );
  const cpu = (x) => x.cpuMs / x.samples.length;
  console.log(`${"".padEnd(10)}${"p50 ms".padStart(9)}${"p99 ms".padStart(9)}${"mean ms".padStart(9)}${"cpu ms".padStart(9)}`);
  sides.forEach((x, i) => console.log(`${x.name.padEnd(10)}${f(figures[i].p50)}${f(figures[i].p99)}${f(figures[i].mean)}${f(cpu(x))}`));
  for (const [i, x] of sides.slice(0, -1).entries()) {
    const s = figures[i];
    console.log(`${(x.name === "shiitake" ? "ratio" : `ratio ${x.name}`).padEnd(10)}${r(s.p50 / fl.p50)}${r(s.p99 / fl.p99)}${r(s.mean / fl.mean)}${r(cpu(x) / cpu(sides.at(-1)))}`);
  }
  const ok = sh.p50 / fl.p50 <= P50_RATIO_TARGET;
  console.log(`p50 ratio ${(sh.p50 / fl.p50).toFixed(3)} (target <= ${P50_RATIO_TARGET}: ${ok ? "met" : "NOT met"})`);
  console.log(`wall time ${((performance.now() - started) / 1000).toFixed(1)} s`);
} finally {
  agent.destroy();
  await mf.dispose();
  await model.close();
  if (persistDir) await rm(persistDir, { recursive: true, force: true });
}
