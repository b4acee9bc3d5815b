// Turn benchmark: what one turn costs the runtime, measured in one run.
//
//   node bench/turn.mjs [--n 200] [--turns 20]
//
// 1. Rows written per turn for a 250-chunk streamed answer (admission to
//    settlement, counted from SQLite's own rowsWritten; target <= 8), and
//    alarm writes.
// 2. Runtime overhead per turn with an instant model: admission + settlement
//    long poll through the real run loop, against the floor of a turn on
//    this runtime (one request to a bare DO that fetches the same streamed
//    answer and inserts one row), interleaved; p50 difference (target <= 2 ms).
// Needs `bash scripts/build.sh` first. Prints figures; asserts nothing.

import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, TOKEN, bundleFixture } from "../tests/e2e/helpers.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";

const { values: args } = parseArgs({
  options: { n: { type: "string", default: "200" }, turns: { type: "string", default: "20" } },
});
const N = Number(args.n);
const TURNS = Number(args.turns);

const CHUNKS_250 = Array.from({ length: 250 }, (_, i) => `w${i} `);
let answerChunks = CHUNKS_250;
const model = await startModelServer({ fallback: () => ({ chunks: answerChunks }) });
const script = await bundleFixture(path.join(ROOT, "bench/turn-worker.mjs"), "bench-turn");
const mf = new Miniflare({
  modules: true,
  scriptPath: script,
  modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
  compatibilityDate: COMPATIBILITY_DATE,
  durableObjects: {
    SHIITAKE: { className: "CountingDO", useSQLite: true },
    FLOOR: { className: "TurnFloorDO", useSQLite: true },
  },
  bindings: { SHIITAKE_TOKEN: TOKEN, SHIITAKE_MODEL: "openai/scripted", OPENAI_BASE_URL: model.url },
});

const headers = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
async function call(method, p, body) {
  const res = await mf.dispatchFetch(`http://bench${p}`, { method, headers, body: body && JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

let seq = 0;
async function turn(agent, session) {
  const { commandId } = await call("POST", `/agents/${agent}/sessions/${session}/commands`, {
    type: "prompt",
    requestId: `r${seq++}`,
    text: "go",
  });
  const s = await call("GET", `/agents/${agent}/sessions/${session}/settlement?commandId=${commandId}&timeoutMs=30000`);
  if (s?.terminal !== "completed") throw new Error(`turn did not complete: ${JSON.stringify(s)}`);
}

// 1. Rows per turn.
await call("POST", "/agents/rows/sessions", { sessionId: "s" });
await turn("rows", "s"); // warm
const perTurn = [];
for (let i = 0; i < TURNS; i++) {
  await call("POST", "/agents/rows/bench/reset");
  await turn("rows", "s");
  perTurn.push(await call("GET", "/agents/rows/bench/stats"));
}
const avg = (k) => perTurn.reduce((n, s) => n + s[k], 0) / perTurn.length;
console.log(`rows written per turn (250-chunk answer, admission to settlement, ${TURNS} turns):`);
console.log(`  rows ${avg("rowsWritten").toFixed(1)} (target <= 8), statements ${avg("statements").toFixed(1)}, alarm writes ${avg("alarmWrites").toFixed(1)}`);

// 2. Overhead per turn with an instant model.
answerChunks = ["ok"];
await call("POST", "/agents/fast/sessions", { sessionId: "s" });
for (let i = 0; i < 20; i++) {
  await turn("fast", "s");
  await call("POST", "/agents/fast/floor", { text: "go" });
}
const shiitake = [];
const floor = [];
for (let i = 0; i < N; i++) {
  let t = performance.now();
  await turn("fast", "s");
  shiitake.push(performance.now() - t);
  t = performance.now();
  await call("POST", "/agents/fast/floor", { text: "go" });
  floor.push(performance.now() - t);
}
const p = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];
const [s50, f50] = [p(shiitake, 0.5), p(floor, 0.5)];
console.log(`turn with an instant model (${N} turns, interleaved with the floor):`);
console.log(`  shiitake p50 ${s50.toFixed(3)} ms  p99 ${p(shiitake, 0.99).toFixed(3)} ms`);
console.log(`  floor    p50 ${f50.toFixed(3)} ms  p99 ${p(floor, 0.99).toFixed(3)} ms`);
console.log(`  overhead p50 ${(s50 - f50).toFixed(3)} ms (target <= 2 ms), ratio ${(s50 / f50).toFixed(2)}`);

await mf.dispose();
await model.close();
