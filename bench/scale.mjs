// Scale benchmark: how Shiitake scales out over many Agents (one Durable
// Object each) and up inside one Agent, on Cloudflare's own engine (workerd,
// run by Miniflare), against the loopback model server answering "ok" at
// once. One Miniflare run; prints figures, asserts no threshold, exits 1 only
// if a prompt fails or does not settle `completed`.
//
//   node bench/scale.mjs [--agents 1000] [--inflight 16,32,64] [--sessions 100]
//                        [--turns 20] [--session-inflight 16] [--samples 50]
//                        [--idle 2] [--resident] [--quick]
//
// --quick: 200 Agents at 32 in flight, 20 Sessions x 10 turns, 20 samples
// (~1 minute). Defaults take a few minutes.
//
// Figures (wall time from Node; CPU from /proc/<workerd pid>/stat utime+stime
// over the phase, all of workerd's threads, divided by the prompts of the
// phase; Node's own CPU from process.cpuUsage(), same division):
// 1. Opening an Agent, measured one request at a time: the first request to
//    a fresh Agent (`GET /sessions`, a read that opens the store, creating
//    its schema) vs the same read again (warm), vs the first read after the
//    instance was evicted (`mf.unsafeEvictDurableObject`: a new instance on
//    an existing store); the first prompt in an opened Agent vs the second;
//    and the cold path (POST /sessions as the Agent's first request, then a
//    prompt to settlement) vs the same in a warm Agent. CPU per request is
//    the batch's workerd CPU / its requests.
// 2. Scale out: for each in-flight level, N fresh Agents x 1 prompt (create
//    a Session, prompt, long-poll the settlement) vs the same N prompts into
//    ONE Agent (one Session per prompt, that Agent warmed by one prompt
//    first), same in-flight; the two sides alternate which goes first per
//    level. Wall ms per prompt = phase wall / N; ratio fresh/one (target <=
//    1.3x).
// 3. Growth inside one Agent: S Sessions x T turns (`--session-inflight`
//    Sessions at a time, each Session's turns sequential): turns/s,
//    p50/p99 turn latency (prompt sent -> settlement read), p50 of the first
//    100 turns vs the last 100 (by start order).
// 4. Memory per idle Agent instance (workerd VmRSS, read after `--idle` s,
//    default 2 s): (a) RSS after warming 1 Agent (and the opening samples)
//    vs after the first level's N fresh Agents have each run a prompt;
//    (b) RSS before/after touching N more fresh Agents with one read each;
//    (c) RSS after evicting those N again (`mf.unsafeEvictDurableObject`:
//    what the allocator gives back); (d) the engine's floor: N bare SQLite
//    DOs (bench/floor-worker.mjs) after one insert each. (RSS - before) / N
//    KiB per Agent (target <= 300 KiB). workerd evicts an idle object after
//    ~10 s of inactivity by default, and Miniflare keeps that default: the
//    run counts how many of (a) and (b) workerd had already evicted by
//    itself when the bench evicted them right after the RSS reading, and a
//    residency probe (one read to 10 of the Agents idle the longest, against
//    a warm read and a read after eviction) says the same. `--resident` sets
//    `unsafePreventEviction` instead (every Agent stays resident; the
//    eviction rows are then skipped). Also the store on disk per object
//    (its .sqlite + -wal; SQLite's page cache holds these pages). RSS hardly
//    shrinks when objects are evicted (c), so later objects reuse what the
//    evicted ones freed: with eviction allowed, (a), (b) and (d) read low
//    once workerd has evicted some; `--resident --inflight 32` gives the
//    clean per-instance figures.
//
// The engine's floor is measured beside each figure in the same run:
// bench/floor-worker.mjs, a bare SQLite Durable Object behind the same kind
// of Worker entry, served by the same workerd at http://floor.bench/.

import { parseArgs } from "node:util";
import { startModelServer } from "../tests/support/model-server.mjs";
import { client, meter, ms, newStoreBytes, pool, quantile, rssKiB, settle, sleep, startDemo, storeDir, storeSizes } from "./workerd.mjs";

const { values: args } = parseArgs({
  options: {
    agents: { type: "string" },
    inflight: { type: "string" },
    sessions: { type: "string" },
    turns: { type: "string" },
    "session-inflight": { type: "string" },
    samples: { type: "string" },
    idle: { type: "string" },
    resident: { type: "boolean", default: false },
    quick: { type: "boolean", default: false },
  },
});
const Q = args.quick;
const int = (name, dflt) => {
  const v = Number(args[name] ?? dflt);
  if (!Number.isInteger(v) || v < 1) {
    console.error(`--${name} must be a positive integer`);
    process.exit(2);
  }
  return v;
};
const AGENTS = int("agents", Q ? 200 : 1000);
const LEVELS = String(args.inflight ?? (Q ? "32" : "16,32,64")).split(",").map(Number);
if (LEVELS.some((l) => !Number.isInteger(l) || l < 1)) {
  console.error("--inflight is a comma-separated list of positive integers");
  process.exit(2);
}
const SESSIONS = int("sessions", Q ? 20 : 100);
const TURNS = int("turns", Q ? 10 : 20);
const SESSION_INFLIGHT = int("session-inflight", 16);
const SAMPLES = int("samples", Q ? 20 : 50);
const IDLE_S = Number(args.idle ?? 2);
const PREVENT_EVICTION = args.resident;

const model = await startModelServer({ fallback: () => ({ chunks: ["ok"] }) });
const { mf, pid, script } = await startDemo(model.url, { preventEviction: PREVENT_EVICTION, floor: true });
const call = client(mf);
const floorCall = client(mf, "floor.bench");
const run = Date.now().toString(36);
let failures = 0;
const fail = (what, e) => {
  failures++;
  if (failures <= 20) console.error(`FAILED ${what}: ${e?.message ?? e}`);
};

console.log(`scale bench: workerd pid ${pid}, ${AGENTS} Agents per side, in flight ${LEVELS.join("/")}, growth ${SESSIONS} Sessions x ${TURNS} turns, eviction ${PREVENT_EVICTION ? "prevented (unsafePreventEviction)" : "allowed (workerd default)"}`);

const t0 = performance.now();
/** A progress line on stderr (the figures come at the end, on stdout). */
const progress = (m) => process.stderr.write(`[${((performance.now() - t0) / 1000).toFixed(0)} s] ${m}\n`);

/** Prompts `text` in `session` of `agent` and waits for its settlement; returns ms from sending to settlement. */
async function prompt(agent, session, requestId) {
  const t = performance.now();
  const { commandId } = await call("POST", `/agents/${agent}/sessions/${session}/commands`, { type: "prompt", requestId, text: "go" });
  const s = await settle(call, agent, session, commandId);
  if (s?.terminal !== "completed") throw new Error(`${agent}/${session}/${requestId} settled ${JSON.stringify(s)}`);
  return performance.now() - t;
}

/** Creates a Session and prompts once in it; ms from create to settlement. */
async function createAndPrompt(agent, session) {
  const t = performance.now();
  await call("POST", `/agents/${agent}/sessions`, { sessionId: session });
  await prompt(agent, session, "r");
  return performance.now() - t;
}

async function timed(fn) {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

/** Runs `fn(i)` one at a time for `n` samples; `{p50, p90, cpu}` (cpu: workerd ms per sample). */
async function batch(n, fn) {
  const m = meter(pid);
  const lat = [];
  for (let i = 0; i < n; i++) {
    try {
      lat.push(await fn(i));
    } catch (e) {
      fail("open-cost sample", e);
    }
  }
  const r = m.end(n);
  return { p50: quantile(lat, 0.5), p90: quantile(lat, 0.9), cpu: r.workerdPer };
}

// Warm-up: one Agent, a few prompts (wasm compiled, isolate warm).
await call("POST", "/agents/warm/sessions", { sessionId: "s" });
for (let i = 0; i < 20; i++) await prompt("warm", "s", `w${i}`);
// 1. Opening an Agent.
const o = `open-${run}`;
const open = {};
// The engine's floor: a bare SQLite Durable Object's first request (its
// constructor creates one table, then one insert) vs the same again.
const floorInsert = (agent) => timed(() => floorCall("POST", `/agents/${agent}/sessions/s/commands`, { type: "prompt", requestId: "r", text: "go" }));
open.floorFresh = await batch(SAMPLES, (i) => floorInsert(`floor-open-${run}-${i}`));
open.floorWarm = await batch(SAMPLES, (i) => floorInsert(`floor-open-${run}-${i}`));
open.freshRead = await batch(SAMPLES, (i) => timed(() => call("GET", `/agents/${o}-${i}/sessions`)));
open.warmRead = await batch(SAMPLES, (i) => timed(() => call("GET", `/agents/${o}-${i}/sessions`)));
open.warmAgentRead = await batch(SAMPLES, () => timed(() => call("GET", "/agents/warm/sessions")));
if (!PREVENT_EVICTION) {
  await evictAll(Array.from({ length: SAMPLES }, (_, i) => `${o}-${i}`));
  open.reopenRead = await batch(SAMPLES, (i) => timed(() => call("GET", `/agents/${o}-${i}/sessions`)));
}
open.firstCreate = await batch(SAMPLES, (i) => timed(() => call("POST", `/agents/${o}-${i}/sessions`, { sessionId: "s1" })));
open.firstPrompt = await batch(SAMPLES, (i) => prompt(`${o}-${i}`, "s1", "r"));
open.secondCreate = await batch(SAMPLES, (i) => timed(() => call("POST", `/agents/${o}-${i}/sessions`, { sessionId: "s2" })));
open.secondPrompt = await batch(SAMPLES, (i) => prompt(`${o}-${i}`, "s2", "r"));
open.coldPath = await batch(SAMPLES, (i) => createAndPrompt(`cold-${run}-${i}`, "s"));
open.warmPath = await batch(SAMPLES, (i) => createAndPrompt("warm", `path-${run}-${i}`));
progress("opening costs measured");

await sleep(IDLE_S * 1000);
const rssBaseline = rssKiB(pid);
const agentDir = storeDir(pid, script, "ShiitakeDO");
const floorDir = storeDir(pid, "floor", "FloorDO");
const storesBefore = storeSizes(agentDir);

/**
 * Evicts these Agents (`mf.unsafeEvictDurableObject`); counts those workerd
 * had already evicted by itself ("not currently running").
 */
async function evictAll(names) {
  let evicted = 0;
  let notRunning = 0;
  await pool(names.length, 32, async (i) => {
    try {
      await mf.unsafeEvictDurableObject(script, "ShiitakeDO", { name: names[i] });
      evicted++;
    } catch (e) {
      if (/not currently running/.test(e?.message)) notRunning++;
      else fail(`evict ${names[i]}`, e);
    }
  });
  return { evicted, notRunning };
}

/**
 * Whether Agents are still resident: p50 of one read to each of the first 10
 * (idle the longest) of `name(i)`, to compare with a warm read and with the
 * first read after an eviction.
 */
async function residency(name) {
  const lat = [];
  for (let i = 0; i < Math.min(10, AGENTS); i++) lat.push(await timed(() => call("GET", `/agents/${name(i)}/sessions`)));
  return quantile(lat, 0.5);
}

// 2 (first level) + 4a. Scale out; memory after the first fresh phase.
const scaleRows = [];
let memRan;
for (const [li, L] of LEVELS.entries()) {
  const one = `one-${run}-${L}`;
  await createAndPrompt(one, "warmup");
  const sides = {};
  const order = li % 2 === 0 ? ["fresh", "one"] : ["one", "fresh"];
  for (const side of order) {
    const m = meter(pid);
    const lat = await pool(AGENTS, L, (i) =>
      (side === "fresh" ? createAndPrompt(`fresh-${run}-${L}-${i}`, "s") : createAndPrompt(one, `s${i}`)).catch((e) => fail(`${side} prompt ${i}`, e)),
    );
    sides[side] = { ...m.end(AGENTS), p50: quantile(lat.filter(Number.isFinite), 0.5), p99: quantile(lat.filter(Number.isFinite), 0.99) };
    progress(`in flight ${L}, ${side}: ${ms(sides[side].wallPer)}/prompt, workerd CPU ${ms(sides[side].workerdPer)}/prompt`);
    if (side === "fresh" && li === 0) {
      await sleep(IDLE_S * 1000);
      memRan = { before: rssBaseline, after: rssKiB(pid), store: newStoreBytes(storesBefore, storeSizes(agentDir)), probe: await residency((i) => `fresh-${run}-${L}-${i}`) };
      if (!PREVENT_EVICTION) memRan.evict = await evictAll(Array.from({ length: AGENTS }, (_, i) => `fresh-${run}-${L}-${i}`));
    }
  }
  // The engine's floor at the same in-flight: N fresh bare DOs x 1 insert vs N inserts into one.
  for (const side of ["floorFresh", "floorOne"]) {
    const m = meter(pid);
    await pool(AGENTS, L, (i) =>
      floorCall("POST", `/agents/${side === "floorFresh" ? `floor-${run}-${L}-${i}` : `floor-one-${run}-${L}`}/sessions/s/commands`, { type: "prompt", requestId: `r${i}`, text: "go" }).catch((e) =>
        fail(`${side} insert ${i}`, e),
      ),
    );
    sides[side] = m.end(AGENTS);
  }
  scaleRows.push({ L, ...sides });
}

// 3. Growth inside one Agent.
const grow = `grow-${run}`;
await createAndPrompt(grow, "warmup");
const turns = []; // [{start, ms}]
const gm = meter(pid);
await pool(SESSIONS, SESSION_INFLIGHT, async (si) => {
  try {
    await call("POST", `/agents/${grow}/sessions`, { sessionId: `g${si}` });
  } catch (e) {
    return fail(`growth session ${si}`, e);
  }
  for (let t = 0; t < TURNS; t++) {
    const start = performance.now();
    try {
      turns.push({ start, ms: await prompt(grow, `g${si}`, `t${t}`) });
    } catch (e) {
      fail(`growth turn ${si}/${t}`, e);
    }
  }
});
const growth = gm.end(SESSIONS * TURNS);
progress(`growth: ${turns.length} turns in ${(growth.wallMs / 1000).toFixed(1)} s`);
turns.sort((a, b) => a.start - b.start);
const head = Math.min(100, Math.floor(turns.length / 2));

// 4b, 4c. Memory of Agents opened by one read.
await sleep(IDLE_S * 1000);
const touchBefore = rssKiB(pid);
const touchStoresBefore = storeSizes(agentDir);
const touch = `touch-${run}`;
await pool(AGENTS, 32, (i) => call("GET", `/agents/${touch}-${i}/sessions`).catch((e) => fail(`touch ${i}`, e)));
await sleep(IDLE_S * 1000);
const touchAfter = rssKiB(pid);
const touchStore = newStoreBytes(touchStoresBefore, storeSizes(agentDir));
const touchProbe = await residency((i) => `${touch}-${i}`);
let evictedAfter;
let touchEvict;
if (!PREVENT_EVICTION) {
  touchEvict = await evictAll(Array.from({ length: AGENTS }, (_, i) => `${touch}-${i}`));
  await sleep(IDLE_S * 1000);
  evictedAfter = rssKiB(pid);
}

// 4d. The engine's floor: bare SQLite Durable Objects with one insert each.
await sleep(IDLE_S * 1000);
const floorBefore = rssKiB(pid);
const floorStoresBefore = storeSizes(floorDir);
await pool(AGENTS, 32, (i) => floorCall("POST", `/agents/floor-mem-${run}-${i}/sessions/s/commands`, { type: "prompt", requestId: "r", text: "go" }).catch((e) => fail(`floor touch ${i}`, e)));
await sleep(IDLE_S * 1000);
const floorAfter = rssKiB(pid);
const floorStore = newStoreBytes(floorStoresBefore, storeSizes(floorDir));
progress("memory measured");

// Report.
const x = (a, b) => `${(a / b).toFixed(2)}x`;
console.log("\n1. Opening an Agent (one request at a time; p50 / p90 latency, workerd CPU per request)");
const row = (label, r) => console.log(`  ${label.padEnd(58)} ${ms(r.p50).padStart(9)} / ${ms(r.p90).padStart(9)}   cpu ${ms(r.cpu)}`);
row("floor: bare SQLite DO, first request (create table+insert)", open.floorFresh);
row("floor: same request again (warm)", open.floorWarm);
row("first read of a fresh Agent (GET /sessions: opens, new store)", open.freshRead);
row("same read again (warm)", open.warmRead);
row("read of the long-warm Agent", open.warmAgentRead);
if (open.reopenRead) row("first read after eviction (new instance, existing store)", open.reopenRead);
row("create Session (first write) in an opened Agent", open.firstCreate);
row("first prompt in that Agent (send -> settlement)", open.firstPrompt);
row("create a second Session", open.secondCreate);
row("second prompt (send -> settlement)", open.secondPrompt);
row("cold path: fresh Agent, create Session + prompt -> settled", open.coldPath);
row("warm path: warm Agent, create Session + prompt -> settled", open.warmPath);
console.log(`  opening a fresh Agent costs ~${ms(open.freshRead.p50 - open.warmRead.p50)} latency, ~${ms(open.freshRead.cpu - open.warmRead.cpu)} workerd CPU over a warm read`);
if (open.reopenRead) console.log(`  reopening an existing store costs ~${ms(open.reopenRead.p50 - open.warmRead.p50)} latency, ~${ms(open.reopenRead.cpu - open.warmRead.cpu)} workerd CPU over a warm read`);

console.log(`\n2. Scale out: ${AGENTS} fresh Agents x 1 prompt vs ${AGENTS} prompts into one Agent (create Session + prompt + settlement each)`);
for (const r of scaleRows) {
  const f = r.fresh;
  const n = r.one;
  console.log(`  in flight ${r.L}:`);
  console.log(`    fresh Agents: wall ${ms(f.wallPer)}/prompt (${(f.wallMs / 1000).toFixed(1)} s, ${(AGENTS / (f.wallMs / 1000)).toFixed(0)}/s), latency p50 ${ms(f.p50)} p99 ${ms(f.p99)}, workerd CPU ${ms(f.workerdPer)}/prompt, node CPU ${ms(f.nodePer)}/prompt`);
  console.log(`    one Agent:    wall ${ms(n.wallPer)}/prompt (${(n.wallMs / 1000).toFixed(1)} s, ${(AGENTS / (n.wallMs / 1000)).toFixed(0)}/s), latency p50 ${ms(n.p50)} p99 ${ms(n.p99)}, workerd CPU ${ms(n.workerdPer)}/prompt, node CPU ${ms(n.nodePer)}/prompt`);
  console.log(`    fresh/one: wall ${x(f.wallPer, n.wallPer)}, workerd CPU ${x(f.workerdPer, n.workerdPer)} (target <= 1.3x)`);
  const ff = r.floorFresh;
  const fo = r.floorOne;
  console.log(`    engine floor (bare SQLite DO, 1 insert per request): fresh DOs ${ms(ff.wallPer)}/req, cpu ${ms(ff.workerdPer)}; one DO ${ms(fo.wallPer)}/req, cpu ${ms(fo.workerdPer)}; fresh/one wall ${x(ff.wallPer, fo.wallPer)}, cpu ${x(ff.workerdPer, fo.workerdPer)}`);
}

console.log(`\n3. Growth inside one Agent: ${SESSIONS} Sessions x ${TURNS} turns, ${SESSION_INFLIGHT} Sessions at a time`);
console.log(`  ${turns.length}/${SESSIONS * TURNS} turns completed in ${(growth.wallMs / 1000).toFixed(1)} s: ${(turns.length / (growth.wallMs / 1000)).toFixed(0)} turns/s, workerd CPU ${ms(growth.workerdPer)}/turn, node CPU ${ms(growth.nodePer)}/turn`);
console.log(`  turn latency p50 ${ms(quantile(turns.map((t) => t.ms), 0.5))}, p99 ${ms(quantile(turns.map((t) => t.ms), 0.99))}`);
const pFirst = quantile(turns.slice(0, head).map((t) => t.ms), 0.5);
const pLast = quantile(turns.slice(-head).map((t) => t.ms), 0.5);
console.log(`  p50 of the first ${head} turns ${ms(pFirst)} vs the last ${head} ${ms(pLast)} (${x(pLast, pFirst)})`);

console.log(`\n4. Memory per idle Agent instance (workerd VmRSS; ${PREVENT_EVICTION ? "eviction prevented (--resident): every Agent touched stays resident" : "workerd's default eviction: an idle Agent may be evicted after ~10 s; the probe reads below tell"})`);
const kib = (a, b, n) => `${((a - b) / n).toFixed(0)} KiB`;
console.log(`  (a) ran a prompt, idle ${IDLE_S} s: baseline ${(memRan.before / 1024).toFixed(1)} MiB (1 warm Agent) -> ${(memRan.after / 1024).toFixed(1)} MiB after ${AGENTS} fresh Agents: ${kib(memRan.after, memRan.before, AGENTS)} per Agent (target <= 300 KiB)`);
console.log(`  (b) opened by one read, idle ${IDLE_S} s: ${(touchBefore / 1024).toFixed(1)} MiB -> ${(touchAfter / 1024).toFixed(1)} MiB after ${AGENTS} more Agents: ${kib(touchAfter, touchBefore, AGENTS)} per Agent`);
if (evictedAfter !== undefined) console.log(`  (c) after evicting those ${AGENTS}: ${(evictedAfter / 1024).toFixed(1)} MiB (${kib(touchAfter, evictedAfter, AGENTS)} per Agent given back)`);
if (memRan.evict) console.log(`  residency: when evicted right after the RSS reading, workerd had already evicted ${memRan.evict.notRunning}/${AGENTS} of (a) and ${touchEvict.notRunning}/${AGENTS} of (b) by itself (idle > ~10 s)`);
console.log(`  (d) engine floor, a bare SQLite DO after one insert: ${(floorBefore / 1024).toFixed(1)} MiB -> ${(floorAfter / 1024).toFixed(1)} MiB after ${AGENTS}: ${kib(floorAfter, floorBefore, AGENTS)} per object`);
console.log(`  residency probe (a read to 10 of the Agents idle longest, p50): (a) ${ms(memRan.probe)}, (b) ${ms(touchProbe)}; a warm read is ${ms(open.warmRead.p50)}${open.reopenRead ? `, a read after eviction ${ms(open.reopenRead.p50)}` : ""}`);
const kb = (b) => `${(b / 1024).toFixed(0)} KiB`;
console.log(`  store on disk per object (.sqlite + -wal, whose pages SQLite's page cache holds; each object also maps a 32 KiB -shm): (a) ${kb(memRan.store)}, (b) ${kb(touchStore)}, (d) floor ${kb(floorStore)}`);
console.log(`  node RSS ${(process.memoryUsage().rss / 1048576).toFixed(1)} MiB`);

if (failures > 0) console.log(`\nFAILED: ${failures} request(s) or prompt(s) failed or did not settle completed`);
else console.log("\nall prompts settled completed");
await mf.dispose();
await model.close();
process.exit(failures > 0 ? 1 : 0);
