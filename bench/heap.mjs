// Where workerd's memory goes per operation: V8's JS heap (after a forced
// GC, over the inspector), the wasm instance's linear memory, and the
// process's RSS, read every --every operations of one kind.
//
//   node bench/heap.mjs [--kind plain|cancel|floor] [--ops 3000] [--every 500] [--agents 4]
//
// Needs a build (bash scripts/build.sh). A diagnostic, prints figures only.

import http from "node:http";
import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, DEMO_SCRIPT, ROOT, TOKEN, bundleFixture, workerOptions } from "../tests/e2e/helpers.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";
import { client, memSplit, rssKiB, settle, sleep } from "./workerd.mjs";

const { values: args } = parseArgs({
  options: {
    kind: { type: "string", default: "plain" },
    ops: { type: "string", default: "3000" },
    every: { type: "string", default: "500" },
    agents: { type: "string", default: "4" },
  },
});
const KIND = args.kind;
const OPS = Number(args.ops);
const EVERY = Number(args.every);
const AGENTS = Number(args.agents);

const freePort = () =>
  new Promise((resolve) => {
    const s = http.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });

const SLOW = { chunks: Array.from({ length: 40 }, (_, i) => `w${i} `), chunkDelayMs: 25 };
function answer(body) {
  const last = body.messages?.at(-1);
  if (last?.role === "tool") return { chunks: ["done"] };
  const text = JSON.stringify(last ?? "");
  if (text.includes("[tool]")) return { toolCalls: [{ name: "execute", arguments: { code: "return 6 * 7;" } }] };
  return text.includes("[slow]") ? SLOW : { chunks: ["ok"] };
}
const model = await startModelServer({ fallback: answer });
const inspectorPort = await freePort();
const options = workerOptions(DEMO_SCRIPT, undefined, { SHIITAKE_MODEL: "openai/bench", OPENAI_BASE_URL: model.url });
options.durableObjects = { SHIITAKE: { className: "ShiitakeDO", useSQLite: true, unsafePreventEviction: true } };
const floorScript = await bundleFixture(path.join(ROOT, "bench/floor-worker.mjs"), "bench-floor");
const before = new Set();
const mf = new Miniflare({
  inspectorPort,
  workers: [
    { name: "shiitake", ...options },
    {
      name: "floor",
      routes: ["floor.bench/*"],
      modules: true,
      scriptPath: floorScript,
      compatibilityDate: COMPATIBILITY_DATE,
      durableObjects: { FLOOR: { className: "FloorDO", useSQLite: true, unsafePreventEviction: true } },
      bindings: { SHIITAKE_TOKEN: TOKEN },
    },
  ],
});
await mf.ready;
void before;
const { execFileSync } = await import("node:child_process");
const pid = execFileSync("ps", ["--ppid", String(process.pid), "-o", "pid=,comm="])
  .toString()
  .split("\n")
  .map((l) => l.trim().split(/\s+/))
  .find(([, c]) => c === "workerd")?.[0];

const targets = await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json();
const target = targets.find((t) => t.title?.includes(KIND === "floor" ? "floor" : "shiitake")) ?? targets[0];
const ws = new WebSocket(target.webSocketDebuggerUrl ?? `ws://127.0.0.1:${inspectorPort}/${target.id}`);
await new Promise((resolve, reject) => {
  ws.onopen = resolve;
  ws.onerror = reject;
});
let nextId = 1;
let snapshot = [];
const pending = new Map();
ws.onmessage = (event) => {
  const msg = JSON.parse(String(event.data));
  if (msg.method === "HeapProfiler.addHeapSnapshotChunk") snapshot.push(msg.params.chunk);
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
await cdp("Runtime.enable");
await cdp("HeapProfiler.enable");

const call = client(mf);
const callFloor = client(mf, "floor.bench");
let rid = 0;
const uses = new Map();
async function op(agent) {
  let s = uses.get(agent);
  if (!s || s.n >= 20) {
    if (s && KIND !== "floor") await call("DELETE", `/agents/${agent}/sessions/${s.id}`);
    s = { id: `s${rid}`, n: 0 };
    uses.set(agent, s);
    if (KIND !== "floor") await call("POST", `/agents/${agent}/sessions`, { sessionId: s.id });
  }
  s.n++;
  const requestId = `r${rid++}`;
  if (KIND === "floor") {
    await callFloor("POST", `/agents/${agent}/sessions/${s.id}/commands`, { type: "prompt", requestId, text: "hello [floor]" });
    return;
  }
  const text = { cancel: "[slow] long", tool: "[tool] compute" }[KIND] ?? "hello";
  const { commandId } = await call("POST", `/agents/${agent}/sessions/${s.id}/commands`, { type: "prompt", requestId, text });
  if (KIND === "cancel") {
    await sleep(Math.random() * 200);
    await call("POST", `/agents/${agent}/sessions/${s.id}/commands`, { type: "cancel", commandId });
  }
  const r = await settle(call, agent, s.id, commandId);
  if (r === null) throw new Error("unsettled");
}

async function reading(done) {
  // A heap snapshot begins with a full GC (workerd never answers
  // HeapProfiler.collectGarbage: V8 posts it as a task workerd's platform
  // does not run while the isolate idles).
  snapshot = [];
  await cdp("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
  if (process.env.HEAP_SNAPSHOT) (await import("node:fs")).writeFileSync(`${process.env.HEAP_SNAPSHOT}-${done}.heapsnapshot`, snapshot.join(""));
  const heap = await cdp("Runtime.getHeapUsage");
  const m = memSplit(pid);
  const isolates = (await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json()).length;
  return { done, isolates, usedKiB: heap.usedSize / 1024, totalKiB: heap.totalSize / 1024, rss: rssKiB(pid), anon: m.anon, file: m.file, shmem: m.shmem, fds: m.fds };
}

const rows = [];
let done = 0;
const agents = Array.from({ length: AGENTS }, (_, i) => `h${i}`);
while (done < OPS) {
  const end = Math.min(OPS, done + EVERY);
  let next = done;
  await Promise.all(
    agents.map(async (a) => {
      while (next < end) {
        next++;
        await op(a);
      }
    }),
  );
  done = end;
  const r = await reading(done);
  rows.push(r);
  console.log(
    `${String(done).padStart(6)} ops  js heap used ${r.usedKiB.toFixed(0).padStart(7)} KiB (total ${r.totalKiB.toFixed(0)})  rss ${r.rss} (anon ${r.anon} file ${r.file} shmem ${r.shmem}) fds ${r.fds}, ${r.isolates} inspector targets`,
  );
}
if (rows.length >= 3) {
  const a = rows[1];
  const b = rows.at(-1);
  const n = b.done - a.done;
  console.log(
    `per ${KIND} op after the first reading: js heap ${(((b.usedKiB - a.usedKiB) * 1024) / n).toFixed(0)} B, rss ${(((b.rss - a.rss) * 1024) / n).toFixed(0)} B (anon ${(((b.anon - a.anon) * 1024) / n).toFixed(0)}, file ${(((b.file - a.file) * 1024) / n).toFixed(0)}, shmem ${(((b.shmem - a.shmem) * 1024) / n).toFixed(0)})`,
  );
}
ws.close();
await mf.dispose();
await model.close();
