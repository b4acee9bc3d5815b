// Turn benchmark: what one turn costs the runtime, measured in one run.
//
//   node bench/turn.mjs [--n 200] [--turns 20]
//
// 1. Rows written per turn for a 250-chunk streamed answer (admission to
//    settlement, counted from SQLite's own rowsWritten; target <= 8), and
//    alarm writes; rows read (SQLite's rowsRead, what Cloudflare bills reads
//    by) in a Session that grows to 42 messages.
// 2. Runtime overhead per turn with an instant model, against the floor of a
//    turn on this runtime (one request to a bare DO that fetches the same
//    streamed answer and inserts one row), interleaved; p50 difference
//    (target <= 2 ms). A Shiitake turn is timed from sending the prompt to
//    its `settled` frame on an open watch (what a watching client sees); the
//    settlement long poll, which costs one more round trip, is shown too.
// 3. The watched turn against a floor of the same shape (bench/turn-worker.mjs
//    `WatchFloorDO`: prompt request that sets the alarm, the turn one
//    macrotask later, a delta frame per network read and a settled frame on
//    an open watch), wall p50 and workerd CPU: what the runtime adds over
//    the least a watched durable turn costs here.
// Needs `bash scripts/build.sh` first. Prints figures; asserts nothing.

import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, TOKEN, bundleFixture } from "../tests/e2e/helpers.mjs";
import { startModelThread } from "./model-thread.mjs";
import { settledFrames } from "./watch.mjs";

const { values: args } = parseArgs({
  options: { n: { type: "string", default: "200" }, turns: { type: "string", default: "20" } },
});
const N = Number(args.n);
const TURNS = Number(args.turns);

const CHUNKS_250 = Array.from({ length: 250 }, (_, i) => `w${i} `);
// On its own thread, as a provider is elsewhere (see bench/model-thread.mjs).
const model = await startModelThread();
await model.setChunks(CHUNKS_250);
// The alarm floor reports each finished turn here.
const notified = new Map();
const notify = http.createServer((req, res) => {
  const seq = Number(new URL(req.url, "http://x").searchParams.get("seq"));
  notified.get(seq)?.();
  notified.set(seq, null);
  res.end("ok");
});
await new Promise((resolve) => notify.listen(0, "127.0.0.1", resolve));
const notifyUrl = `http://127.0.0.1:${notify.address().port}/done`;
const doneNotified = (seq) =>
  notified.get(seq) === null ? Promise.resolve() : new Promise((resolve) => notified.set(seq, resolve));
const script = await bundleFixture(path.join(ROOT, "bench/turn-worker.mjs"), "bench-turn");
const mf = new Miniflare({
  modules: true,
  scriptPath: script,
  modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
  compatibilityDate: COMPATIBILITY_DATE,
  durableObjects: {
    SHIITAKE: { className: "CountingDO", useSQLite: true },
    FLOOR: { className: "TurnFloorDO", useSQLite: true },
    ALARM_FLOOR: { className: "AlarmFloorDO", useSQLite: true },
    WATCH_FLOOR: { className: "WatchFloorDO", useSQLite: true },
  },
  bindings: {
    SHIITAKE_TOKEN: TOKEN,
    SHIITAKE_MODEL: "openai/scripted",
    OPENAI_BASE_URL: model.url,
    BENCH_NOTIFY_URL: notifyUrl,
  },
});

const headers = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
async function call(method, p, body) {
  const res = await mf.dispatchFetch(`http://bench${p}`, { method, headers, body: body && JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const CLK_TCK = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;
/** The workerd process Miniflare started (a child of this process). */
function workerdPid() {
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const ppid = Number(stat.split(") ")[1].split(" ")[1]);
      if (ppid === process.pid && stat.includes("(workerd)")) return pid;
    } catch {}
  }
  throw new Error("no workerd child process");
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

/** An open watch of a Session: resolves `settled(commandId)` from its frames. */
async function openWatch(agent, session) {
  return settledFrames(await mf.dispatchFetch(`http://bench/agents/${agent}/sessions/${session}/watch`, { headers }));
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
if (process.env.BENCH_STATEMENTS) {
  const last = perTurn.at(-1);
  last.texts.forEach((t, i) => console.log(`  [written ${last.rows[i]}, read ${last.read[i]}] ${t}`));
}
const avg = (k) => perTurn.reduce((n, s) => n + s[k], 0) / perTurn.length;
console.log(`rows written per turn (250-chunk answer, admission to settlement, ${TURNS} turns):`);
console.log(`  rows ${avg("rowsWritten").toFixed(1)} (target <= 8), statements ${avg("statements").toFixed(1)}, rows read ${avg("rowsRead").toFixed(1)}, alarm writes ${avg("alarmWrites").toFixed(1)}`);

// 2. Overhead per turn with an instant model. A fresh Session every
// ROTATE iterations keeps the model context short (at most 4 * ROTATE
// messages), as the floor's one-message request is; the watches are opened
// untimed.
await model.setChunks(["ok"]);
const ROTATE = 5;
let session = null;
let watch = null;
let sessions = 0;
async function rotate(i) {
  if (i % ROTATE !== 0) return;
  watch?.close();
  session = `f${sessions++}`;
  await call("POST", "/agents/fast/sessions", { sessionId: session });
  watch = await openWatch("fast", session);
}
const watchFloor = settledFrames(await mf.dispatchFetch("http://bench/agents/fast/watchfloor", { headers }));
async function watchFloorTurn() {
  const { commandId } = await call("POST", "/agents/fast/watchfloor", { text: "go" });
  await watchFloor.settled(commandId);
}
for (let i = 0; i < 20; i++) {
  await rotate(i);
  await turn("fast", session);
  await call("POST", "/agents/fast/floor", { text: "go" });
  await watchFloorTurn();
}
const shiitake = [];
const watched = [];
const floor = [];
const alarmFloor = [];
const shapeFloor = [];
for (let i = 0; i < N; i++) {
  await rotate(i);
  let t = performance.now();
  await turn("fast", session);
  shiitake.push(performance.now() - t);
  t = performance.now();
  const { commandId } = await call("POST", `/agents/fast/sessions/${session}/commands`, {
    type: "prompt",
    requestId: `w${seq++}`,
    text: "go",
  });
  await watch.settled(commandId);
  watched.push(performance.now() - t);
  t = performance.now();
  await call("POST", "/agents/fast/floor", { text: "go" });
  floor.push(performance.now() - t);
  t = performance.now();
  const { seq: alarmSeq } = await call("POST", "/agents/fast/alarmfloor", { text: "go" });
  await doneNotified(alarmSeq);
  alarmFloor.push(performance.now() - t);
  t = performance.now();
  await watchFloorTurn();
  shapeFloor.push(performance.now() - t);
}

// 3. workerd CPU per turn against per floor request (CPU time is far less
// sensitive than wall time to what else the machine runs): blocks of N
// each, Sessions rotated as above (Session creation and the watch open are
// in the turn block's CPU: a small share at ROTATE turns per Session).
const cpuMs = () => {
  const pid = workerdPid();
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
};
let c0 = cpuMs();
for (let i = 0; i < N; i++) {
  await rotate(i);
  const { commandId } = await call("POST", `/agents/fast/sessions/${session}/commands`, { type: "prompt", requestId: `c${seq++}`, text: "go" });
  await watch.settled(commandId);
}
const turnCpu = (cpuMs() - c0) / N;
c0 = cpuMs();
for (let i = 0; i < N; i++) {
  await rotate(i);
  await turn("fast", session);
}
const pollCpu = (cpuMs() - c0) / N;
c0 = cpuMs();
for (let i = 0; i < N; i++) await call("POST", "/agents/fast/floor", { text: "go" });
const floorCpu = (cpuMs() - c0) / N;
c0 = cpuMs();
for (let i = 0; i < N; i++) {
  const { seq: alarmSeq } = await call("POST", "/agents/fast/alarmfloor", { text: "go" });
  await doneNotified(alarmSeq);
}
const alarmCpu = (cpuMs() - c0) / N;
c0 = cpuMs();
for (let i = 0; i < N; i++) await watchFloorTurn();
const shapeCpu = (cpuMs() - c0) / N;
watch.close();
watchFloor.close();
const p = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];
const [s50, w50, f50] = [p(shiitake, 0.5), p(watched, 0.5), p(floor, 0.5)];
const row = (name, xs) => `  ${name.padEnd(24)} p50 ${p(xs, 0.5).toFixed(3)} ms  p99 ${p(xs, 0.99).toFixed(3)} ms`;
console.log(`turn with an instant model (${N} turns each, interleaved with the floor):`);
console.log(row("shiitake, watched", watched));
console.log(row("shiitake, long poll", shiitake));
console.log(row("floor, in the request", floor));
console.log(row("floor, in an alarm", alarmFloor));
console.log(row("floor, watched", shapeFloor));
console.log(`  overhead p50 (watched) ${(w50 - f50).toFixed(3)} ms (target <= 2 ms), ratio ${(w50 / f50).toFixed(2)}`);
console.log(`  overhead p50 (long poll, one more round trip) ${(s50 - f50).toFixed(3)} ms`);
console.log(`workerd CPU per operation (${N} each, /proc utime+stime):`);
console.log(`  turn, watched ${turnCpu.toFixed(2)} ms; turn, long poll ${pollCpu.toFixed(2)} ms (two requests)`);
console.log(`  floor, in the request ${floorCpu.toFixed(2)} ms; floor, in an alarm ${alarmCpu.toFixed(2)} ms (two requests)`);
console.log(`  ratio watched turn / floor ${(turnCpu / floorCpu).toFixed(2)}, long-poll turn / alarm floor ${(pollCpu / alarmCpu).toFixed(2)}`);
const a50 = p(alarmFloor, 0.5);
console.log(`  overhead p50 over the alarm floor (watched - alarm floor) ${(w50 - a50).toFixed(3)} ms`);
const sh50 = p(shapeFloor, 0.5);
console.log(`watched turn against the watched floor (the same shape: prompt request with the alarm set, turn a macrotask later, delta and settled frames on an open watch):`);
console.log(`  p50 ${w50.toFixed(3)} vs ${sh50.toFixed(3)} ms: ratio ${(w50 / sh50).toFixed(2)}; workerd CPU ${turnCpu.toFixed(2)} vs ${shapeCpu.toFixed(2)} ms: ratio ${(turnCpu / shapeCpu).toFixed(2)}`);

await mf.dispose();
await model.close();
notify.close();
