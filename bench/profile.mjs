// CPU profile of plain watched turns inside workerd: where a turn's CPU goes.
//
//   node bench/profile.mjs [--n 300] [--top 40] [--inclusive REGEX] [--under REGEX] [--admissions]
//
// Runs the turn Worker of bench/turn.mjs (the real ShiitakeDO behind
// shiitakeApp) in Miniflare with workerd's inspector on, starts V8's sampling
// profiler over the Chrome DevTools Protocol, runs n turns (prompt, then its
// `settled` frame on an open watch; a fresh Session every 5 turns), and
// prints self time by function and by kind (wasm, the JS shim, the Hono
// entry, the runtime's own builtins, idle/GC); with --inclusive, also the
// inclusive time of the functions whose name matches (wasm function names
// need `SHIITAKE_WASM_NAMES=1 bash scripts/build.sh`); with --under, the
// self time of the functions called (at any depth) from the functions whose
// name matches: what a hot function spends its time on. `--admissions`
// profiles queued prompt admissions instead (bench/admission.mjs's shape: a
// held model call runs in each Session, n prompts queue behind it, an
// untimed abort every 60). Needs a build.
// A diagnostic, not a benchmark: the sampling itself costs CPU.

import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, TOKEN, bundleFixture } from "../tests/e2e/helpers.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";
import { settledFrames } from "./watch.mjs";
import { freePort, inspect } from "./workerd.mjs";

const { values: args } = parseArgs({
  options: {
    n: { type: "string", default: "300" },
    top: { type: "string", default: "40" },
    inclusive: { type: "string" },
    under: { type: "string" },
    admissions: { type: "boolean", default: false },
  },
});
const N = Number(args.n);
const TOP = Number(args.top);
const SAMPLING_US = 100;

const model = await startModelServer({ fallback: args.admissions ? "hold" : () => ({ chunks: ["ok"] }) });
const script = await bundleFixture(path.join(ROOT, "bench/turn-worker.mjs"), "bench-turn");
const inspectorPort = await freePort();
const mf = new Miniflare({
  name: "profiled",
  modules: true,
  scriptPath: script,
  modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
  compatibilityDate: COMPATIBILITY_DATE,
  inspectorPort,
  durableObjects: {
    SHIITAKE: { className: "CountingDO", useSQLite: true },
    FLOOR: { className: "TurnFloorDO", useSQLite: true },
    ALARM_FLOOR: { className: "AlarmFloorDO", useSQLite: true },
  },
  bindings: { SHIITAKE_TOKEN: TOKEN, SHIITAKE_MODEL: "openai/scripted", OPENAI_BASE_URL: model.url, BENCH_NOTIFY_URL: "http://127.0.0.1:9/" },
});
await mf.ready;

const headers = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
async function call(method, p, body) {
  const res = await mf.dispatchFetch(`http://bench${p}`, { method, headers, body: body && JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

// The inspector: one target per worker; ours is the only user worker.
const { cdp, close: closeInspector } = await inspect(inspectorPort, (title) => title.includes("profiled"));

let seq = 0;
let session;
let watch;
async function turn(i) {
  if (i % 5 === 0) {
    watch?.close();
    session = `p${i}`;
    await call("POST", "/agents/prof/sessions", { sessionId: session });
    watch = settledFrames(await mf.dispatchFetch(`http://bench/agents/prof/sessions/${session}/watch`, { headers }));
  }
  const { commandId } = await call("POST", `/agents/prof/sessions/${session}/commands`, { type: "prompt", requestId: `r${seq++}`, text: "go" });
  await watch.settled(commandId);
}

/** A queued prompt admission; each Session's first prompt holds a model call, an abort every 60 clears the queue. */
async function admission(i) {
  if (i % 60 === 0) {
    if (session !== undefined) await call("POST", `/agents/prof/sessions/${session}/commands`, { type: "abort" });
    session = `q${i}`;
    await call("POST", "/agents/prof/sessions", { sessionId: session });
  }
  await call("POST", `/agents/prof/sessions/${session}/commands`, { type: "prompt", requestId: `r${seq++}`, text: `benchmark prompt number ${i}: summarise the day's notes` });
}
const step = args.admissions ? admission : turn;

for (let i = 0; i < 30; i++) await step(i); // warm: JIT, tier-up, statement cache
await cdp("Profiler.enable");
await cdp("Profiler.setSamplingInterval", { interval: SAMPLING_US });
await cdp("Profiler.start");
for (let i = 30; i < 30 + N; i++) await step(i);
const { profile } = await cdp("Profiler.stop");
watch?.close();
closeInspector();
await mf.dispose();
await model.close();

// Self time per node = its sample count; a node's kind from its frame.
const counts = new Map();
for (const id of profile.samples) counts.set(id, (counts.get(id) ?? 0) + 1);
const total = profile.samples.length;
const byFunction = new Map();
const byKind = new Map();
function kindOf(frame) {
  const { url, functionName } = frame;
  if (["(idle)", "(program)", "(garbage collector)", "(root)"].includes(functionName)) return functionName;
  if (url.includes("wasm") || url.startsWith("wasm://")) return "wasm";
  if (url === "") return "runtime builtins";
  if (/js\/(do|execute|app|bearer|meta|guards)\.mjs|shiitake\.js|shiitake_bg/.test(url) || url.includes("bench-turn")) return "bundle JS (shim, Hono, glue)";
  return url;
}
for (const node of profile.nodes) {
  const n = counts.get(node.id) ?? 0;
  if (n === 0) continue;
  const f = node.callFrame;
  const key = `${f.functionName || "(anonymous)"}  ${f.url.split("/").pop()}${f.lineNumber >= 0 ? `:${f.lineNumber + 1}` : ""}`;
  byFunction.set(key, (byFunction.get(key) ?? 0) + n);
  const k = kindOf(f);
  byKind.set(k, (byKind.get(k) ?? 0) + n);
}
const busy = total - (byKind.get("(idle)") ?? 0);
const pct = (n, of) => `${((100 * n) / of).toFixed(1)}%`.padStart(6);
console.log(`profile: ${N} ${args.admissions ? "queued admissions" : "watched turns"}, ${total} samples at ${SAMPLING_US} us, ${busy} busy (not idle); shares of busy time`);
console.log("by kind:");
for (const [k, n] of [...byKind].sort((a, b) => b[1] - a[1])) if (k !== "(idle)") console.log(`  ${pct(n, busy)}  ${k}`);
console.log(`top ${TOP} functions (self time):`);
for (const [k, n] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, TOP)) console.log(`  ${pct(n, busy)}  ${k}`);

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const short = (k) => k.replace(/::h[0-9a-f]{16}$/, "").slice(0, 150);

if (args.inclusive) {
  // Inclusive time: a node's samples plus its descendants'; a function
  // counted once per sample even when it recurses.
  const re = new RegExp(args.inclusive);
  const inclusive = new Map();
  for (const [id, n] of counts) {
    const seen = new Set();
    for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
      const name = byId.get(cur).callFrame.functionName;
      if (!re.test(name) || seen.has(name)) continue;
      seen.add(name);
      inclusive.set(name, (inclusive.get(name) ?? 0) + n);
    }
  }
  console.log(`top ${TOP} inclusive (functions matching ${re}):`);
  for (const [k, n] of [...inclusive].sort((a, b) => b[1] - a[1]).slice(0, TOP)) console.log(`  ${pct(n, busy)}  ${short(k)}`);
}

if (args.under) {
  // Self time of the samples whose stack passes through a matching function.
  const re = new RegExp(args.under);
  const self = new Map();
  let within = 0;
  for (const [id, n] of counts) {
    let hit = false;
    for (let cur = parent.get(id); cur !== undefined && !hit; cur = parent.get(cur)) hit = re.test(byId.get(cur).callFrame.functionName);
    if (!hit && !re.test(byId.get(id).callFrame.functionName)) continue;
    within += n;
    const name = byId.get(id).callFrame.functionName || "(anonymous)";
    self.set(name, (self.get(name) ?? 0) + n);
  }
  console.log(`under ${re}: ${pct(within, busy)} of busy time; self time there, top ${TOP}:`);
  for (const [k, n] of [...self].sort((a, b) => b[1] - a[1]).slice(0, TOP)) console.log(`  ${pct(n, busy)}  ${short(k)}`);
}
