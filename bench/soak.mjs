// Soak: long-run stability of the demo Worker in Miniflare (workerd) under
// mixed work on a few Agents, against the loopback model server. Prints a
// line per minute and a summary; asserts no threshold, exits 1 only if a
// prompt did not settle or an operation failed.
//
//   node bench/soak.mjs [--minutes 30] [--agents 20] [--pause-ms 20] [--session-uses 20]
//                       [--mix plain=45,tool=20,cancel=15,watch=20] [--max-rss-mib 6144]
//                       [--sandbox loader|embedded] [--gc-every-s 0]
//
// --sandbox embedded serves the demo with the embedded sandbox's engine
// imported and no LOADER, so `tool` runs `execute` in QuickJS inside the
// object instead of a Worker Loader guest; the issue's check is
// `--mix tool=1 --sandbox embedded --minutes 30`: workerd RSS after minute 5
// grows less than 5% (the summary prints that growth, from the sample at
// minute 5, or at half the run when it is 5 minutes or shorter).
//
// --gc-every-s N (a diagnostic): every N s a full GC of every isolate in
// workerd (the Agents', the floor's and Miniflare's own entry and outbound
// Workers), over its inspector (a heap snapshot starts with one; workerd
// never runs HeapProfiler.collectGarbage). Growth that disappears with it
// is garbage V8 had not collected yet (and the native memory it holds:
// requests, responses, cursors), not memory anything keeps.
//
// --max-rss-mib stops the loops early (and says so) once workerd's RSS passes
// it, to protect the machine: at the time of writing workerd's RSS grows by
// 0.9-1.8 MiB per `execute` tool turn (`--mix tool=1` shows it alone;
// Worker Loader guests in an object that also serves turns; see
// bench/heap.mjs --kind tool), so the default mix can reach GiBs; without
// `execute` (`--mix plain=45,cancel=15,watch=20`) it levels off after
// warm-up.
//
// One loop per Agent, each running one operation at a time, picked at random
// (by --mix weights; default plain 45%, tool 20%, cancel 15%, watch 20%):
// - plain: a prompt, long-polled to its settlement (expects `completed`);
// - tool: a prompt the model answers with an `execute` tool call (code
//   `return 6 * 7`, run in the Worker Loader or, with --sandbox embedded, the
//   embedded sandbox), then "done" once it sees the
//   tool result (expects `completed` with toolCallCount >= 1);
// - cancel: a prompt the model answers slowly (40 chunks, 25 ms apart), then
//   after 0-400 ms `{type:"cancel", commandId}`; the settlement is
//   `cancelled` (or `completed` when the cancel came too late);
// - watch: opens `GET /sessions/:id/watch`, reads the snapshot, prompts, reads
//   frames until that prompt's `settled` frame, closes the watch;
// - floor (not in the default mix): one command into a bare SQLite Durable
//   Object (bench/floor-worker.mjs) through the same Miniflare, so
//   `--mix floor=1` shows how workerd's RSS grows per request with no
//   Shiitake code at all (30 minutes, 492,865 requests: it levels off at
//   about 585 MiB after 2 minutes, then 1.0 MiB/min, 0.06 KiB a request;
//   bench/heap.mjs reads 9-12 KiB a request, with its inspector attached
//   and only the measured isolate collected).
// Each loop's Session is deleted and replaced after --session-uses
// operations, so the Agents' stores stay in a steady state.
// The model is scripted by a fallback function on the request (last message
// a tool result -> "done"; last user text with [tool] -> the execute call;
// [slow] -> the slow answer; else "ok") rather than per-prompt `scriptFor`
// lanes, which the model server never forgets (the soak's own Node memory
// would grow).
//
// Every 10 s it samples workerd's VmRSS (/proc/<pid>/status; the minute
// line splits it into RssAnon/RssFile/RssShmem and adds workerd's threads
// and open file descriptors), its CPU
// (/proc/<pid>/stat utime+stime) and Node's RSS; at the end it prints the
// per-minute samples and the least-squares slope of workerd RSS over the
// samples after warm-up (the first 3 minutes; for runs under 6 minutes, the
// first half), with a verdict: "growth X KiB/min" when the slope exceeds
// twice its standard error, else "no growth trend", and the slopes over the
// first and last third of those samples (does growth slow down?). Every prompt that did
// not settle within 120 s is counted (must be zero), settled terminals by
// kind, cancel receipts by status, and errors.

import { parseArgs } from "node:util";
import { SseParser } from "../js/client.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";
import { HEADERS, anonSplit, client, cpuMs, freePort, inspect, memSplit, quantile, regression, rssKiB, settle, sleep, startDemo } from "./workerd.mjs";

const { values: args } = parseArgs({
  options: {
    minutes: { type: "string", default: "30" },
    agents: { type: "string", default: "20" },
    "pause-ms": { type: "string", default: "20" },
    "session-uses": { type: "string", default: "20" },
    mix: { type: "string", default: "plain=45,tool=20,cancel=15,watch=20" },
    "max-rss-mib": { type: "string", default: "6144" },
    sandbox: { type: "string", default: "loader" },
    "gc-every-s": { type: "string", default: "0" },
  },
});
if (args.sandbox !== "loader" && args.sandbox !== "embedded") {
  console.error("--sandbox is loader or embedded");
  process.exit(2);
}
const MINUTES = Number(args.minutes);
const AGENTS = Number(args.agents);
const PAUSE_MS = Number(args["pause-ms"]);
const SESSION_USES = Number(args["session-uses"]);
if (!(MINUTES > 0) || !Number.isInteger(AGENTS) || AGENTS < 1 || !(PAUSE_MS >= 0) || !(SESSION_USES >= 1)) {
  console.error("--minutes > 0, --agents >= 1, --pause-ms >= 0, --session-uses >= 1");
  process.exit(2);
}
const MAX_RSS_KIB = Number(args["max-rss-mib"]) * 1024;
const GC_EVERY_MS = Number(args["gc-every-s"]) * 1000;
if (!(GC_EVERY_MS >= 0)) {
  console.error("--gc-every-s >= 0");
  process.exit(2);
}
const WARMUP_MIN = MINUTES >= 6 ? 3 : MINUTES / 2;
const SAMPLE_MS = 10_000;
const SETTLE_BOUND_MS = 120_000;
const WEIGHTS = args.mix.split(",").map((kv) => {
  const [k, w] = kv.split("=");
  if (!["plain", "tool", "cancel", "watch", "floor"].includes(k) || !(Number(w) > 0)) {
    console.error(`--mix: kind=weight,... with kinds plain, tool, cancel, watch, floor (got ${kv})`);
    process.exit(2);
  }
  return [k, Number(w)];
});
const WEIGHT_SUM = WEIGHTS.reduce((n, [, w]) => n + w, 0);

const SLOW = { chunks: Array.from({ length: 40 }, (_, i) => `w${i} `), chunkDelayMs: 25 };
function answer(body) {
  const messages = body.messages ?? [];
  const last = messages.at(-1);
  if (last?.role === "tool") return { chunks: ["done"] };
  const user = [...messages].reverse().find((m) => m.role === "user");
  const text = typeof user?.content === "string" ? user.content : JSON.stringify(user?.content ?? "");
  if (text.includes("[tool]")) return { toolCalls: [{ name: "execute", arguments: { code: "return 6 * 7;" } }] };
  if (text.includes("[slow]")) return SLOW;
  return { chunks: ["ok"] };
}

const model = await startModelServer({ fallback: answer });
const FLOOR = WEIGHTS.some(([k]) => k === "floor");
const inspectorPort = GC_EVERY_MS > 0 ? await freePort() : undefined;
const { mf, pid } = await startDemo(model.url, { floor: FLOOR, embedded: args.sandbox === "embedded", inspectorPort });
// --gc-every-s: a session with every inspector target (each an isolate).
const isolates = [];
if (inspectorPort !== undefined) {
  for (const { title } of await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json()) {
    isolates.push(await inspect(inspectorPort, (t) => t === title));
  }
}
let gcs = 0;
let collecting = false;
const collector =
  GC_EVERY_MS > 0 &&
  setInterval(async () => {
    if (collecting) return;
    collecting = true;
    for (const isolate of isolates) await isolate.cdp("HeapProfiler.takeHeapSnapshot", { reportProgress: false }).catch(() => {});
    gcs++;
    collecting = false;
  }, GC_EVERY_MS);
const call = client(mf);
const callFloor = client(mf, "floor.bench");
const run = Date.now().toString(36);

const stats = {
  ops: Object.fromEntries(WEIGHTS.map(([k]) => [k, 0])),
  latency: Object.fromEntries(WEIGHTS.map(([k]) => [k, []])),
  terminals: {}, // `${op}:${terminal}` -> n
  cancelReceipts: {},
  prompts: 0,
  unsettled: [],
  errors: [],
  unexpected: [], // settled, but not as expected (a plain prompt not completed, a tool turn without a tool call)
  watchFrames: 0,
  sessionsDeleted: 0,
};
const minuteOps = () => Object.fromEntries(WEIGHTS.map(([k]) => [k, 0]));
let thisMinute = minuteOps();
const error = (what, e) => {
  stats.errors.push(`${what}: ${e?.message ?? e}`);
  if (stats.errors.length <= 20) console.error(`ERROR ${what}: ${e?.message ?? e}`);
};

async function promptAndSettle(op, agent, session, requestId, text, afterAdmit) {
  const { commandId } = await call("POST", `/agents/${agent}/sessions/${session}/commands`, { type: "prompt", requestId, text });
  stats.prompts++;
  if (afterAdmit) await afterAdmit(commandId);
  const s = await settle(call, agent, session, commandId, SETTLE_BOUND_MS);
  if (s === null) {
    stats.unsettled.push(`${agent}/${session}/${commandId}`);
    return null;
  }
  stats.terminals[`${op}:${s.terminal}`] = (stats.terminals[`${op}:${s.terminal}`] ?? 0) + 1;
  return s;
}

const ops = {
  // The engine's own floor: one command into a bare SQLite Durable Object
  // (bench/floor-worker.mjs, one row per request), the same request path.
  async floor(agent, session, rid) {
    await callFloor("POST", `/agents/${agent}/sessions/${session}/commands`, { type: "prompt", requestId: rid, text: "hello [floor]" });
  },
  async plain(agent, session, rid) {
    const s = await promptAndSettle("plain", agent, session, rid, "hello [plain]");
    if (s && s.terminal !== "completed") stats.unexpected.push(`plain ${agent}/${session}: ${JSON.stringify(s).slice(0, 200)}`);
  },
  async tool(agent, session, rid) {
    const s = await promptAndSettle("tool", agent, session, rid, "[tool] compute six times seven");
    if (s && (s.terminal !== "completed" || !(s.toolCallCount >= 1))) stats.unexpected.push(`tool ${agent}/${session}: ${JSON.stringify(s).slice(0, 200)}`);
  },
  async cancel(agent, session, rid) {
    await promptAndSettle("cancel", agent, session, rid, "[slow] a long answer", async (commandId) => {
      await sleep(Math.random() * 400);
      const r = await call("POST", `/agents/${agent}/sessions/${session}/commands`, { type: "cancel", commandId });
      stats.cancelReceipts[r?.status] = (stats.cancelReceipts[r?.status] ?? 0) + 1;
    });
  },
  async watch(agent, session, rid) {
    const controller = new AbortController();
    const res = await mf.dispatchFetch(`http://bench/agents/${agent}/sessions/${session}/watch`, { headers: HEADERS, signal: controller.signal });
    if (res.status !== 200) throw new Error(`watch: HTTP ${res.status} ${(await res.text()).slice(0, 200)}`);
    const reader = res.body.getReader();
    const parser = new SseParser();
    const queue = [];
    const nextEvent = async () => {
      while (queue.length === 0) {
        const { value, done } = await reader.read();
        if (done) return null;
        queue.push(...parser.push(value));
      }
      return queue.shift();
    };
    try {
      const first = await nextEvent();
      if (first?.event !== "snapshot") throw new Error(`watch: first event ${first?.event}`);
      stats.watchFrames++;
      const { commandId } = await call("POST", `/agents/${agent}/sessions/${session}/commands`, { type: "prompt", requestId: rid, text: "watched [plain]" });
      stats.prompts++;
      const deadline = Date.now() + SETTLE_BOUND_MS;
      let settledFrame = null;
      const timer = setTimeout(() => controller.abort(), SETTLE_BOUND_MS);
      try {
        while (Date.now() < deadline) {
          const ev = await nextEvent();
          if (ev === null) throw new Error("watch ended before the settled frame");
          stats.watchFrames++;
          if (ev.event !== "frame") continue;
          const frame = JSON.parse(ev.data);
          if (frame.type === "settled" && frame.settlement?.commandId === commandId) {
            settledFrame = frame.settlement;
            break;
          }
        }
      } finally {
        clearTimeout(timer);
      }
      // The settlement read agrees with the frame (and counts as the settlement).
      const s = await settle(call, agent, session, commandId, SETTLE_BOUND_MS);
      if (s === null || settledFrame === null) {
        stats.unsettled.push(`${agent}/${session}/${commandId} (watched)`);
        return;
      }
      stats.terminals[`watch:${s.terminal}`] = (stats.terminals[`watch:${s.terminal}`] ?? 0) + 1;
      if (s.terminal !== "completed" || settledFrame.terminal !== s.terminal) stats.unexpected.push(`watch ${agent}/${session}: ${JSON.stringify(s).slice(0, 200)}`);
    } finally {
      await reader.cancel().catch(() => {});
      controller.abort();
    }
  },
};

function pick() {
  let r = Math.random() * WEIGHT_SUM;
  for (const [k, w] of WEIGHTS) {
    r -= w;
    if (r < 0) return k;
  }
  return WEIGHTS[0][0];
}

const start = performance.now();
let deadline = start + MINUTES * 60_000;
let stoppedEarly = null;

async function loop(ai) {
  const agent = `soak-${run}-${ai}`;
  let session = null;
  let uses = 0;
  let sn = 0;
  let rn = 0;
  while (performance.now() < deadline) {
    try {
      if (session === null || uses >= SESSION_USES) {
        if (session !== null) {
          await call("DELETE", `/agents/${agent}/sessions/${session}`);
          stats.sessionsDeleted++;
        }
        session = `s${sn++}`;
        await call("POST", `/agents/${agent}/sessions`, { sessionId: session });
        uses = 0;
      }
    } catch (e) {
      error(`${agent} session rotation`, e);
      session = null;
      await sleep(1000);
      continue;
    }
    const op = pick();
    const t = performance.now();
    try {
      await ops[op](agent, session, `r${rn++}`);
      stats.latency[op].push(performance.now() - t);
      stats.ops[op]++;
      thisMinute[op]++;
    } catch (e) {
      error(`${op} ${agent}/${session}`, e);
    }
    uses++;
    if (PAUSE_MS > 0) await sleep(PAUSE_MS);
  }
}

const samples = []; // {min, workerd, node, cpu}
const split = () => {
  const m = memSplit(pid);
  const a = anonSplit(pid);
  return `anon ${(m.anon / 1024).toFixed(0)} (V8 heaps ${(a.v8 / 1024).toFixed(0)}, native heap ${(a.malloc / 1024).toFixed(0)}, other ${(a.other / 1024).toFixed(0)}), file ${(m.file / 1024).toFixed(0)}, shmem ${(m.shmem / 1024).toFixed(0)} MiB; ${m.threads} threads, ${m.fds} fds`;
};
const sample = () => {
  const s = { min: (performance.now() - start) / 60_000, workerd: rssKiB(pid), node: Math.round(process.memoryUsage().rss / 1024), cpu: cpuMs(pid) };
  samples.push(s);
  return s;
};
console.log(
  `soak: ${MINUTES} min, ${AGENTS} Agents, workerd pid ${pid}; mix ${WEIGHTS.map(([k, w]) => `${k} ${((w / WEIGHT_SUM) * 100).toFixed(0)}%`).join(", ")}${GC_EVERY_MS > 0 ? `; a full GC of ${isolates.length} isolates every ${GC_EVERY_MS / 1000} s` : ""}`,
);
let lastMinute = sample();
let minuteNo = 0;
const sampler = setInterval(() => {
  const s = sample();
  if (s.workerd > MAX_RSS_KIB && stoppedEarly === null) {
    stoppedEarly = `workerd RSS ${(s.workerd / 1024).toFixed(0)} MiB passed --max-rss-mib ${MAX_RSS_KIB / 1024} at ${s.min.toFixed(1)} min`;
    console.log(`stopping: ${stoppedEarly} (the loops finish their current operation)`);
    deadline = performance.now();
  }
  if (s.min >= minuteNo + 1 - 1e-6) {
    minuteNo++;
    const cpuPct = ((s.cpu - lastMinute.cpu) / ((s.min - lastMinute.min) * 60_000)) * 100;
    const total = Object.values(thisMinute).reduce((a, b) => a + b, 0);
    console.log(
      `min ${String(minuteNo).padStart(3)}: ${String(total).padStart(5)} ops (${WEIGHTS.map(([k]) => `${k} ${thisMinute[k]}`).join(", ")}), workerd RSS ${(s.workerd / 1024).toFixed(1)} MiB (${split()}), CPU ${cpuPct.toFixed(0)}%, node RSS ${(s.node / 1024).toFixed(1)} MiB, errors ${stats.errors.length}, unsettled ${stats.unsettled.length}`,
    );
    thisMinute = minuteOps();
    lastMinute = s;

  }
}, SAMPLE_MS);

await Promise.all(Array.from({ length: AGENTS }, (_, i) => loop(i)));
clearInterval(sampler);
if (collector) clearInterval(collector);
for (const isolate of isolates) isolate.close();
const end = sample();

console.log(`\nsummary after ${end.min.toFixed(1)} min${stoppedEarly ? ` (stopped early: ${stoppedEarly})` : ""}${GC_EVERY_MS > 0 ? ` (${gcs} forced GCs)` : ""}:`);
const totalOps = Object.values(stats.ops).reduce((a, b) => a + b, 0);
console.log(`  operations ${totalOps} (${WEIGHTS.map(([k]) => `${k} ${stats.ops[k]}`).join(", ")}), prompts ${stats.prompts}, Sessions deleted ${stats.sessionsDeleted}, watch events read ${stats.watchFrames}`);
for (const [k] of WEIGHTS) {
  const l = stats.latency[k];
  if (l.length) console.log(`  ${k.padEnd(6)} latency p50 ${quantile(l, 0.5).toFixed(1)} ms, p99 ${quantile(l, 0.99).toFixed(1)} ms`);
}
console.log(`  settled terminals: ${Object.entries(stats.terminals).sort().map(([k, v]) => `${k} ${v}`).join(", ")}`);
console.log(`  cancel receipts: ${Object.entries(stats.cancelReceipts).map(([k, v]) => `${k} ${v}`).join(", ") || "none"}`);
console.log(`  did not settle: ${stats.unsettled.length}${stats.unsettled.length ? ` (${stats.unsettled.slice(0, 5).join(", ")})` : ""}`);
console.log(`  settled unexpectedly: ${stats.unexpected.length}${stats.unexpected.length ? ` (${stats.unexpected.slice(0, 3).join("; ")})` : ""}`);
console.log(`  errors: ${stats.errors.length}${stats.errors.length ? ` (${stats.errors.slice(0, 3).join("; ")})` : ""}`);
console.log(`  model requests served: ${model.requests().length >= 1000 ? ">= 1000 (records capped)" : model.requests().length}`);

console.log("\n  per-minute samples (minute: workerd RSS MiB, node RSS MiB):");
const perMinute = samples.filter((s, i) => i === 0 || Math.floor(s.min + 1e-6) > Math.floor(samples[i - 1].min + 1e-6) || i === samples.length - 1);
console.log(`  ${perMinute.map((s) => `${s.min.toFixed(1)}: ${(s.workerd / 1024).toFixed(1)}/${(s.node / 1024).toFixed(1)}`).join(", ")}`);
const steady = samples.filter((s) => s.min >= WARMUP_MIN);
if (steady.length >= 3) {
  const w = regression(steady.map((s) => s.min), steady.map((s) => s.workerd));
  const n = regression(steady.map((s) => s.min), steady.map((s) => s.node));
  console.log(`  workerd RSS slope after the first ${WARMUP_MIN} min (${steady.length} samples, every ${SAMPLE_MS / 1000} s): ${w.slope.toFixed(0)} ± ${w.se.toFixed(0)} KiB/min; node RSS ${n.slope.toFixed(0)} ± ${n.se.toFixed(0)} KiB/min`);
  if (steady.length >= 9) {
    // Whether growth slows down: the slope over the first and the last
    // third of the steady samples.
    const third = Math.floor(steady.length / 3);
    const part = (xs) => regression(xs.map((s) => s.min), xs.map((s) => s.workerd));
    const [a, b] = [part(steady.slice(0, third)), part(steady.slice(-third))];
    console.log(`  workerd RSS slope, first third of that: ${a.slope.toFixed(0)} ± ${a.se.toFixed(0)} KiB/min; last third: ${b.slope.toFixed(0)} ± ${b.se.toFixed(0)} KiB/min`);
  }
  // The issue's measure: growth from minute 5 (half a run of 5 minutes or less) to the end.
  const from = MINUTES > 5 ? 5 : MINUTES / 2;
  const base = samples.find((s) => s.min >= from);
  if (base !== undefined && base !== end) {
    console.log(`  workerd RSS from minute ${base.min.toFixed(1)} to the end: ${(base.workerd / 1024).toFixed(1)} -> ${(end.workerd / 1024).toFixed(1)} MiB (${(((end.workerd - base.workerd) / base.workerd) * 100).toFixed(1)}%)`);
  }
  const growing = w.slope > 2 * w.se && w.slope > 0;
  console.log(`  verdict: ${growing ? `growth ${w.slope.toFixed(0)} KiB/min` : "no growth trend"} (workerd RSS)`);
} else {
  console.log("  verdict: too few samples after warm-up for a trend");
}

await mf.dispose();
await model.close();
const lost = stats.unsettled.length + stats.errors.length + stats.unexpected.length;
console.log(lost === 0 ? "\nno work lost" : `\nFAILED: ${stats.unsettled.length} unsettled, ${stats.unexpected.length} unexpected, ${stats.errors.length} errors`);
process.exit(lost === 0 ? 0 : 1);
