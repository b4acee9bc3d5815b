// Memory per Agent instance by step: which part of an Agent's first work
// holds workerd memory. Each step runs on its own set of N fresh Agents (kept
// resident: `unsafePreventEviction`), then workerd's VmRSS is read after an
// idle pause; (after - before) / N is that step's KiB per Agent. Steps, each
// including the ones before it:
//   read      GET /sessions (opens the store, creating its schema)
//   session   + POST /sessions
//   operator  + an operator line (a command and a message, no model call)
//   prompt    + a prompt to settlement (the model call, the turn)
//   page      + a page read of the transcript
// and the engine's floor: N bare SQLite objects after one insert each.
// The steps run twice in alternating order (allocator reuse makes a later
// phase read lower; the table prints both runs), then once more for the
// isolate's JS heap per object (after the full GC a heap snapshot starts
// with, over workerd's inspector; kept apart because a snapshot's own
// memory shows in RSS): what of it is JavaScript. Prints figures, asserts
// nothing.
//
//   node bench/memory-steps.mjs [--agents 200] [--inflight 32] [--idle 2] [--texts FILE]
//
// --texts FILE (from `bench/statements.mjs --save FILE`): one more step, a
// bare SQLite object (the floor's) that runs the Agent's SQL texts once
// each (its schema text among them): what those texts and that schema hold
// in workerd without the runtime.

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { startModelServer } from "../tests/support/model-server.mjs";
import { client, freePort, inspect, memSplit, pool, rssKiB, settle, sleep, startDemo } from "./workerd.mjs";

const { values: args } = parseArgs({
  options: { agents: { type: "string", default: "200" }, inflight: { type: "string", default: "32" }, idle: { type: "string", default: "2" }, texts: { type: "string" } },
});
const N = Number(args.agents);
const INFLIGHT = Number(args.inflight);
const IDLE_MS = Number(args.idle) * 1000;

const model = await startModelServer({ fallback: () => ({ chunks: ["ok"] }) });
const inspectorPort = await freePort();
const { mf, pid } = await startDemo(model.url, { preventEviction: true, floor: true, inspectorPort });
// The JS heap of each Worker's isolate, read after the full GC a heap
// snapshot begins with (what of an object's memory is JavaScript).
const heaps = {};
for (const w of ["shiitake", "floor"]) {
  heaps[w] = await inspect(inspectorPort, (title) => title.endsWith(`core:user:${w}`));
  await heaps[w].cdp("HeapProfiler.enable");
}
async function jsHeapKiB(w) {
  await heaps[w].cdp("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
  return (await heaps[w].cdp("Runtime.getHeapUsage")).usedSize / 1024;
}
const call = client(mf);
const floorCall = client(mf, "floor.bench");
const run = Date.now().toString(36);

const STEPS = {
  read: async (a) => {
    await call("GET", `/agents/${a}/sessions`);
  },
  session: async (a) => {
    await STEPS.read(a);
    await call("POST", `/agents/${a}/sessions`, { sessionId: "s" });
  },
  operator: async (a) => {
    await STEPS.session(a);
    await call("POST", `/agents/${a}/sessions/s/commands`, { type: "operator", requestId: "o", text: "a line from the operator" });
  },
  prompt: async (a) => {
    await STEPS.session(a);
    const { commandId } = await call("POST", `/agents/${a}/sessions/s/commands`, { type: "prompt", requestId: "r", text: "go" });
    const s = await settle(call, a, "s", commandId);
    if (s?.terminal !== "completed") throw new Error(`${a}: settled ${JSON.stringify(s)}`);
  },
  page: async (a) => {
    await STEPS.prompt(a);
    await call("GET", `/agents/${a}/sessions/s?limit=50`);
  },
  floor: async (a) => {
    await floorCall("POST", `/agents/${a}/sessions/s/commands`, { type: "prompt", requestId: "r", text: "go" });
  },
};
if (args.texts) {
  const texts = JSON.parse(readFileSync(args.texts, "utf8"));
  STEPS.texts = async (a) => {
    await STEPS.floor(a);
    await floorCall("POST", `/agents/${a}/sessions/s/commands`, { type: "replay", texts });
  };
}

// Warm the isolate and both Workers' code paths first.
await STEPS.page(`warm-${run}`);
await STEPS.floor(`warm-${run}`);
await sleep(IDLE_MS);

// Two RSS runs (forward, then reverse order) with no heap snapshot among
// them (a snapshot's own memory shows in RSS), then one run reading the JS
// heap around each step.
const results = {};
let phase = 0;
async function phaseRun(step, withHeap) {
  const w = step === "floor" || step === "texts" ? "floor" : "shiitake";
  const js0 = withHeap ? await jsHeapKiB(w) : 0;
  await sleep(IDLE_MS);
  const before = rssKiB(pid);
  const vm0 = memSplit(pid).vm;
  await pool(N, INFLIGHT, (i) => STEPS[step](`${step}-${run}-${phase++}-${i}`));
  await sleep(IDLE_MS);
  const r = (results[step] ??= { rss: [], vm: [], js: NaN });
  if (withHeap) {
    r.js = ((await jsHeapKiB(w)) - js0) / N;
    return;
  }
  r.rss.push((rssKiB(pid) - before) / N);
  r.vm.push((memSplit(pid).vm - vm0) / N);
  process.stderr.write(`${step}: ${r.rss.at(-1).toFixed(0)} KiB RSS, ${r.vm.at(-1).toFixed(0)} KiB address space per object\n`);
}
for (const order of [Object.keys(STEPS), Object.keys(STEPS).reverse()]) for (const step of order) await phaseRun(step, false);
for (const step of Object.keys(STEPS)) await phaseRun(step, true);

console.log(`memory per object by step (${N} fresh resident objects per phase; workerd VmRSS after ${IDLE_MS / 1000} s idle, two runs, forward then reverse order; the JS heap after a full GC in a third run)`);
console.log("| step | RSS KiB per object (run 1, run 2) | JS heap KiB per object | address space KiB (run 1, run 2) |");
console.log("|---|---|---|---|");
for (const [step, r] of Object.entries(results)) {
  console.log(`| ${step} | ${r.rss.map((v) => v.toFixed(0)).join(", ")} | ${r.js.toFixed(1)} | ${r.vm.map((v) => v.toFixed(0)).join(", ")} |`);
}
for (const h of Object.values(heaps)) h.close();
await mf.dispose();
await model.close();
