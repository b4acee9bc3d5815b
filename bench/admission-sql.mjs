// What admission's own statements cost, issued from plain JS in a bare
// SQLite Durable Object (bench/admission-sql-worker.mjs), as ratios against
// the floor's one-row insert measured in the same run: bench/admission.mjs's
// shape (HTTP through the same kind of entry, 4 Sessions, each with a
// running command and up to 60 queued behind it, an abort clearing the
// queue between blocks (not timed, its CPU not counted), blocks interleaved
// with each side first in turn), per layout of
// the pending count and bytes (see the worker). Splits Shiitake's admission
// cost into its statements and the rest.
//
//   node bench/admission-sql.mjs [--n 2000] [--block 100] [--layouts scan,noscan,counters]
//
// Prints p50 latency and workerd CPU per admission; asserts nothing.

import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, TOKEN, bundleFixture } from "../tests/e2e/helpers.mjs";
import { cpuMs, workerdChild } from "./workerd.mjs";

const { values: args } = parseArgs({
  options: {
    n: { type: "string", default: "2000" },
    block: { type: "string", default: "100" },
    warmup: { type: "string", default: "200" },
    layouts: { type: "string", default: "scan,noscan,counters" },
  },
});
const N = Number(args.n);
const BLOCK = Number(args.block);
const SESSIONS = 4;
const PENDING_PER_SESSION = 60;
const script = await bundleFixture(path.join(ROOT, "bench/admission-sql-worker.mjs"), "bench-admission-sql");
const persistDir = await mkdtemp(path.join(tmpdir(), "shiitake-bench-"));
const mf = new Miniflare({
  durableObjectsPersist: persistDir,
  modules: true,
  scriptPath: script,
  compatibilityDate: COMPATIBILITY_DATE,
  durableObjects: { STATEMENTS: { className: "StatementsDO", useSQLite: true } },
  bindings: { SHIITAKE_TOKEN: TOKEN },
});

async function call(agent, urlPath, body) {
  const res = await mf.dispatchFetch(`http://bench/agents/bench-${agent}${urlPath}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${agent} ${urlPath}: ${res.status} ${text}`);
  return performance.now();
}

function side(name) {
  const pendingIn = new Array(SESSIONS).fill(0);
  let seq = 0;
  return {
    name,
    samples: [],
    cpuMs: 0,
    async setup() {
      for (let s = 0; s < SESSIONS; s++) await call(name, "/sessions", { sessionId: `s${s}` });
    },
    /**
     * Aborts the Sessions that the next `n` prompts would fill past
     * PENDING_PER_SESSION and occupies each again with a running command,
     * outside the counted admissions (as bench/admission.mjs does).
     */
    async makeRoom(n) {
      for (let s = 0; s < SESSIONS; s++) {
        const coming = Math.floor(n / SESSIONS) + ((s - (seq % SESSIONS) + SESSIONS) % SESSIONS < n % SESSIONS ? 1 : 0);
        if (pendingIn[s] + coming <= PENDING_PER_SESSION) continue;
        await call(name, `/sessions/s${s}/commands`, { type: "abort" });
        await call(name, `/sessions/s${s}/commands`, { type: "prompt", requestId: `occupy-${seq}-${s}`, text: "occupy" });
        pendingIn[s] = 0;
      }
    },
    async admit() {
      const s = seq % SESSIONS;
      if (pendingIn[s] === PENDING_PER_SESSION) throw new Error(`bench: s${s} is full: makeRoom first`);
      const i = seq++;
      const t0 = performance.now();
      const t1 = await call(name, `/sessions/s${s}/commands`, { type: "prompt", requestId: `req-${i}`, text: `benchmark prompt number ${i}: summarise the day's notes` });
      pendingIn[s]++;
      return t1 - t0;
    },
  };
}

const p50 = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
try {
  await mf.ready;
  const workerd = workerdChild();
  const sides = [...args.layouts.split(",").map(side), side("floor")];
  for (const x of sides) await x.setup();
  for (let i = 0; i < Number(args.warmup); i++) {
    for (const x of sides) {
      await x.makeRoom(1);
      await x.admit();
    }
  }
  for (let done = 0, block = 0; done < N; done += BLOCK, block++) {
    for (const x of sides.map((_, i) => sides[(i + block) % sides.length])) {
      await x.makeRoom(BLOCK);
      const c0 = cpuMs(workerd);
      for (let i = 0; i < BLOCK; i++) x.samples.push(await x.admit());
      x.cpuMs += cpuMs(workerd) - c0;
    }
  }
  const floor = sides.at(-1);
  const cpu = (x) => x.cpuMs / x.samples.length;
  console.log(`admission statements from plain JS: ${N} admissions per side, blocks of ${BLOCK}`);
  console.log(`${"".padEnd(10)}${"p50 ms".padStart(9)}${"cpu ms".padStart(9)}${"p50 x".padStart(9)}${"cpu x".padStart(9)}`);
  for (const x of sides) {
    console.log(`${x.name.padEnd(10)}${p50(x.samples).toFixed(3).padStart(9)}${cpu(x).toFixed(3).padStart(9)}${(p50(x.samples) / p50(floor.samples)).toFixed(2).padStart(9)}${(cpu(x) / cpu(floor)).toFixed(2).padStart(9)}`);
  }
} finally {
  await mf.dispose();
  await rm(persistDir, { recursive: true, force: true });
}
