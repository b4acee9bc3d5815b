// Extensions benchmark: what a settled hook, and the whole `goal` extension
// (examples/extensions/goal.mjs), add to a turn in the real Durable Object
// (the wasm core and the real authoring library, js/extensions.mjs, running
// the hooks in JavaScript), as a ratio against the same host without
// extensions, measured in the same run, in the same in-process Miniflare,
// interleaved in blocks so all sides share the machine's noise.
//
//   node bench/extensions.mjs [--n 400] [--block 20] [--warmup 40] [--rows 20] [--memory]
//
// Three Workers run one script (bench/extensions-worker.mjs), each binding its
// Durable Object to a ShiitakeDO subclass: `goal`, whose extensions() is
// [goal]; `hook`, goal cut down to its settled hook (same state, `set`
// command, hook and Session projection; no prompt or tools hook); `plain`,
// without extensions. Every Session of the goal and hook sides has an active
// goal, so each turn's settled hook reads the goal row and puts it back with
// turns + 1, inside the settling write. A turn: POST a prompt to an idle
// Session, then long-poll its settlement (the model server echoes at once).
// `goal` also runs its prompt and tools hooks on the model call (its prompt
// section and its `goal.end` tool): `hook` is the settled hook's cost, `goal`
// the whole example's.
//
// Needs build/demo/ (and its wasm) from `bash scripts/build.sh`. Prints
// figures; it is not a test and asserts no threshold, but it exits 1 if a
// turn does not complete or the goal did not count every turn.

import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { DEMO_SCRIPT, ROOT, TOKEN, bundleFixture, workerOptions } from "../tests/e2e/helpers.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";

const SESSIONS = 4; // turns rotate across these Sessions, each idle when prompted

const { values: args } = parseArgs({
  options: {
    n: { type: "string", default: "400" },
    block: { type: "string", default: "20" },
    warmup: { type: "string", default: "40" },
    rows: { type: "string", default: "20" },
    memory: { type: "boolean", default: false },
  },
});
const N = positive("n");
const BLOCK = positive("block");
const WARMUP = Number(args.warmup);
const ROWS = positive("rows");

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

const model = await startModelServer({ fallback: "echo" });
const SCRIPT = await bundleFixture(path.join(ROOT, "bench/extensions-worker.mjs"), "bench-extensions");

const persistDir = args.memory ? undefined : await mkdtemp(path.join(tmpdir(), "shiitake-bench-"));
const bindings = { SHIITAKE_MODEL: "openai/bench", OPENAI_BASE_URL: model.url };
/** The same script and bindings; only the Durable Object class differs. */
const worker = (name, className) => {
  const options = workerOptions(SCRIPT, undefined, bindings);
  return {
    ...options,
    name,
    routes: [`${name}.bench/*`],
    durableObjects: { SHIITAKE: { className, useSQLite: true } },
  };
};
const mf = new Miniflare({
  ...(persistDir ? { durableObjectsPersist: persistDir } : {}),
  workers: [worker("goal", "GoalDO"), worker("hook", "HookDO"), worker("plain", "PlainDO")],
});

async function call(host, method, urlPath, body) {
  const res = await mf.dispatchFetch(`http://${host}${urlPath}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {}
  return { status: res.status, text, json };
}

function fail(what, res) {
  console.error(`bench: ${what} answered HTTP ${res.status} ${res.text.slice(0, 300)}`);
  process.exitCode = 1;
  throw new Error("benchmark aborted");
}

/** One side of the comparison: a host, an Agent, its Sessions and a turn counter. */
function side(name) {
  const host = `${name}.bench`;
  const agent = `/agents/bench-${name}`;
  let seq = 0;
  return {
    name,
    samples: [],
    rows: [],
    turns: 0,
    async setup() {
      for (let s = 0; s < SESSIONS; s++) {
        const res = await call(host, "POST", `${agent}/sessions`, { sessionId: `s${s}` });
        if (res.status !== 201) fail(`${name}: create Session s${s}`, res);
        if (name === "plain") continue;
        const set = await call(host, "POST", `${agent}/sessions/s${s}/extensions/goal/commands/set`, {
          requestId: `goal-s${s}`,
          input: { text: "Summarise the day's notes every time I ask" },
        });
        if (set.status !== 200) fail(`${name}: set the goal of s${s}`, set);
      }
      // The other side has no goal endpoint at all: its Agent has no extensions.
      if (name === "plain") {
        const res = await call(host, "POST", `${agent}/sessions/s0/extensions/goal/commands/set`, { input: { text: "x" } });
        if (res.status < 400) fail(`${name}: an extension command was served without extensions`, res);
      }
    },
    /** One turn; returns its latency in ms (prompt sent to settlement read). */
    async turn() {
      const i = seq++;
      const session = `s${i % SESSIONS}`;
      const body = { type: "prompt", requestId: `req-${i}`, text: `benchmark prompt number ${i}: summarise the day's notes` };
      const t0 = performance.now();
      const res = await call(host, "POST", `${agent}/sessions/${session}/commands`, body);
      if (res.status !== 200 || res.json?.status !== "accepted") fail(`${name}: prompt ${i} to ${session}`, res);
      const settled = await call(host, "GET", `${agent}/sessions/${session}/settlement?commandId=${res.json.commandId}&timeoutMs=30000`);
      const ms = performance.now() - t0;
      if (settled.status !== 200 || settled.json?.terminal !== "completed") fail(`${name}: settlement of prompt ${i}`, settled);
      this.turns++;
      return ms;
    },
    /** Rows SQLite reports written by one turn (counted by the Worker's wrapper, untimed). */
    async countedTurn() {
      const on = await call(host, "POST", `${agent}/bench/count?on=1`);
      if (on.status !== 200 || on.json?.counting !== true) fail(`${name}: start counting`, on);
      await this.turn();
      const stats = await call(host, "GET", `${agent}/bench/stats`);
      if (stats.status !== 200) fail(`${name}: stats`, stats);
      await call(host, "POST", `${agent}/bench/count?on=0`);
      this.rows.push(stats.json);
    },
    /** The goal's turn counts across the Sessions, from the Session read's projection. */
    async goalTurns() {
      let total = 0;
      for (let s = 0; s < SESSIONS; s++) {
        const res = await call(host, "GET", `${agent}/sessions/s${s}`);
        if (res.status !== 200) fail(`${name}: read s${s}`, res);
        total += res.json.extensions?.goal?.turns ?? 0;
      }
      return total;
    },
  };
}

function quantile(sorted, q) {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

function stats(samples) {
  const s = [...samples].sort((a, b) => a - b);
  return { p50: quantile(s, 0.5), p90: quantile(s, 0.9), p99: quantile(s, 0.99), mean: s.reduce((a, b) => a + b, 0) / s.length };
}

function permutations(xs) {
  if (xs.length <= 1) return [xs];
  return xs.flatMap((x, i) => permutations([...xs.slice(0, i), ...xs.slice(i + 1)]).map((rest) => [x, ...rest]));
}

const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

const started = performance.now();
try {
  await mf.ready;
  const sides = [side("goal"), side("hook"), side("plain")];
  for (const x of sides) await x.setup();
  for (let i = 0; i < WARMUP; i++) for (const x of sides) await x.turn();

  // 1. Rows written per turn (untimed): SQLite's own rowsWritten, admission to settlement.
  for (let i = 0; i < ROWS; i++) for (const x of sides) await x.countedTurn();

  // 2. Latency per turn, interleaved in blocks; the blocks cycle through every
  // order of the sides, so none always runs first or after the same other.
  const orders = permutations(sides);
  let done = 0;
  let block = 0;
  while (done < N) {
    const n = Math.min(BLOCK, N - done);
    const order = orders[block % orders.length];
    for (const x of order) for (let i = 0; i < n; i++) x.samples.push(await x.turn());
    done += n;
    block++;
  }

  // The hook really ran on every turn of the goal and hook sides.
  for (const x of sides.slice(0, 2)) {
    x.counted = await x.goalTurns();
    if (x.counted !== x.turns) {
      console.error(`bench: ${x.name}: the goal counted ${x.counted} turns; the side ran ${x.turns}`);
      process.exitCode = 1;
    }
  }

  for (const x of sides) {
    x.stats = stats(x.samples);
    x.rowsMean = mean(x.rows.map((r) => r.rowsWritten));
    x.stmtsMean = mean(x.rows.map((r) => r.statements));
  }
  const plain = sides[2];
  const f = (v) => v.toFixed(3).padStart(9);
  const r = (v) => v.toFixed(2).padStart(9);
  const d = (v) => ((v >= 0 ? "+" : "") + v.toFixed(1)).padStart(7);
  console.log(
    `extensions (Miniflare): ${N} sequential turns per side (after ${WARMUP} warm-up), blocks of ${BLOCK}, ${SESSIONS} Sessions per Agent, ` +
      `echo model, mf.dispatchFetch, DO storage ${persistDir ? "on disk" : "in memory"}`,
  );
  console.log(
    "turn = POST a prompt to an idle Session + long-poll its settlement; goal = examples/extensions/goal.mjs " +
      "(settled hook + prompt and tools hooks on the model call), hook = goal's settled hook alone, plain = no extensions",
  );
  console.log(`${"".padEnd(12)}${"rows".padStart(7)}${"stmts".padStart(7)}${"p50 ms".padStart(9)}${"p90 ms".padStart(9)}${"p99 ms".padStart(9)}${"mean ms".padStart(9)}`);
  for (const x of sides) {
    const s = x.stats;
    console.log(`${x.name.padEnd(12)}${x.rowsMean.toFixed(1).padStart(7)}${x.stmtsMean.toFixed(1).padStart(7)}${f(s.p50)}${f(s.p90)}${f(s.p99)}${f(s.mean)}`);
  }
  for (const x of sides.slice(0, 2)) {
    const [s, p] = [x.stats, plain.stats];
    console.log(
      `${`${x.name}/plain`.padEnd(12)}${d(x.rowsMean - plain.rowsMean)}${d(x.stmtsMean - plain.stmtsMean)}` +
        `${r(s.p50 / p.p50)}${r(s.p90 / p.p90)}${r(s.p99 / p.p99)}${r(s.mean / p.mean)}`,
    );
  }
  console.log(`(ratio rows: rows and stmts are differences per turn; rows = SQLite rowsWritten over ${ROWS} counted turns per side)`);
  for (const x of sides.slice(0, 2)) {
    console.log(
      `${x.name} adds ${(x.rowsMean - plain.rowsMean).toFixed(1)} rows written and ${(x.stats.p50 - plain.stats.p50).toFixed(3)} ms (p50) ` +
        `to a turn: p50 ratio ${(x.stats.p50 / plain.stats.p50).toFixed(2)}; its goal counted ${x.counted} of ${x.turns} turns`,
    );
  }
  console.log(`wall time ${((performance.now() - started) / 1000).toFixed(1)} s`);
} finally {
  await mf.dispose();
  await model.close();
  if (persistDir) await rm(persistDir, { recursive: true, force: true });
}
