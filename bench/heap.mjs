// Where workerd's memory goes per operation of one kind: V8's JS heap of
// the Agents' Worker (after the full GC a heap snapshot starts with, over
// workerd's inspector), workerd's RSS (anon/file/shmem) and open files, and
// how many inspector targets exist (Worker Loader guests show up there
// while they live), read every --every operations.
//
//   node bench/heap.mjs [--kind plain|tool|cancel|floor] [--ops 3000] [--every 500] [--agents 4]
//                       [--sandbox loader|embedded]
//
// plain: a prompt long-polled to its settlement; tool: a prompt the model
// answers with an `execute` call (`return 6 * 7`), then "done"; cancel: a
// slow answer cancelled after 0-200 ms; floor: one command into the bare
// SQLite object (bench/floor-worker.mjs), no Shiitake code. One loop per
// Agent; each Agent's Session is deleted and replaced every 20 operations.
// --sandbox embedded: the demo with the embedded sandbox's engine and no
// LOADER (bench/soak.mjs's), and each reading also counts the live
// WebAssembly.Memory objects of the Agents' isolate and their sizes (one
// per engine not yet collected, and the core's).
// HEAP_SNAPSHOT=prefix writes each reading's snapshot to
// prefix-<ops>.heapsnapshot (for Chrome DevTools' comparison view).
// Needs a build (bash scripts/build.sh). A diagnostic: prints figures only.

import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { startModelServer } from "../tests/support/model-server.mjs";
import { anonSplit, client, freePort, inspect, memSplit, rssKiB, settle, sleep, startDemo } from "./workerd.mjs";

const { values: args } = parseArgs({
  options: {
    kind: { type: "string", default: "plain" },
    ops: { type: "string", default: "3000" },
    every: { type: "string", default: "500" },
    agents: { type: "string", default: "4" },
    sandbox: { type: "string", default: "loader" },
  },
});
const KIND = args.kind;
const OPS = Number(args.ops);
const EVERY = Number(args.every);
const AGENTS = Number(args.agents);
const EMBEDDED = args.sandbox === "embedded";
if (!["plain", "tool", "cancel", "floor"].includes(KIND) || !(OPS > 0) || !(EVERY > 0) || !(AGENTS >= 1) || !["loader", "embedded"].includes(args.sandbox)) {
  console.error("--kind plain|tool|cancel|floor, --ops > 0, --every > 0, --agents >= 1, --sandbox loader|embedded");
  process.exit(2);
}

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
const { mf, pid } = await startDemo(model.url, { preventEviction: true, floor: true, inspectorPort, embedded: EMBEDDED });
const worker = KIND === "floor" ? "floor" : "shiitake";
const inspector = await inspect(inspectorPort, (title) => title.endsWith(`core:user:${worker}`));
let snapshot = [];
inspector.on("HeapProfiler.addHeapSnapshotChunk", ({ chunk }) => snapshot.push(chunk));
await inspector.cdp("HeapProfiler.enable");
let contextId;
inspector.on("Runtime.executionContextCreated", ({ context }) => (contextId ??= context.id));
if (EMBEDDED) await inspector.cdp("Runtime.enable");

const call = client(mf);
const callFloor = client(mf, "floor.bench");
let rid = 0;
const uses = new Map();
async function op(agent) {
  let s = uses.get(agent);
  if (!s || s.n >= 20) {
    if (s && KIND !== "floor") await call("DELETE", `/agents/${agent}/sessions/${s.id}`);
    s = { id: `s${rid++}`, n: 0 };
    uses.set(agent, s);
    if (KIND !== "floor") await call("POST", `/agents/${agent}/sessions`, { sessionId: s.id });
  }
  s.n++;
  const requestId = `r${rid++}`;
  if (KIND === "floor") {
    await callFloor("POST", `/agents/${agent}/sessions/${s.id}/commands`, { type: "prompt", requestId, text: "hello" });
    return;
  }
  const text = { cancel: "[slow] long", tool: "[tool] compute" }[KIND] ?? "hello";
  const { commandId } = await call("POST", `/agents/${agent}/sessions/${s.id}/commands`, { type: "prompt", requestId, text });
  if (KIND === "cancel") {
    await sleep(Math.random() * 200);
    await call("POST", `/agents/${agent}/sessions/${s.id}/commands`, { type: "cancel", commandId });
  }
  if ((await settle(call, agent, s.id, commandId)) === null) throw new Error(`${commandId} did not settle`);
}

async function reading(done) {
  // A heap snapshot begins with a full GC. (workerd never answers
  // HeapProfiler.collectGarbage: V8 posts that GC as a task its platform
  // does not run.)
  snapshot = [];
  await inspector.cdp("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
  if (process.env.HEAP_SNAPSHOT) writeFileSync(`${process.env.HEAP_SNAPSHOT}-${done}.heapsnapshot`, snapshot.join(""));
  snapshot = [];
  const heap = await inspector.cdp("Runtime.getHeapUsage");
  const m = memSplit(pid);
  const memories = EMBEDDED ? await liveObjects("WebAssembly.Memory.prototype") : undefined;
  return { done, targets: await inspector.targets(), usedKiB: heap.usedSize / 1024, totalKiB: heap.totalSize / 1024, rss: rssKiB(pid), memories, ...anonSplit(pid), ...m };
}

/** The byteLength of each live object whose prototype `expression` evaluates to (V8's queryObjects), largest first. */
async function liveObjects(expression) {
  const { result: proto } = await inspector.cdp("Runtime.evaluate", { expression, ...(contextId === undefined ? {} : { contextId }) });
  const { objects } = await inspector.cdp("Runtime.queryObjects", { prototypeObjectId: proto.objectId });
  const { result } = await inspector.cdp("Runtime.callFunctionOn", { objectId: objects.objectId, functionDeclaration: "function () { return this.map((m) => m.buffer.byteLength).sort((a, b) => b - a); }", returnByValue: true });
  await inspector.cdp("Runtime.releaseObject", { objectId: objects.objectId });
  await inspector.cdp("Runtime.releaseObject", { objectId: proto.objectId });
  return result.value;
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
    `${String(done).padStart(6)} ${KIND} ops  JS heap used ${r.usedKiB.toFixed(0).padStart(6)} KiB (total ${r.totalKiB.toFixed(0)})  workerd RSS ${r.rss} KiB (anon ${r.anon}: V8 heaps ${r.v8}, native heap ${r.malloc}, other ${r.other}; file ${r.file}, shmem ${r.shmem}), ${r.fds} fds, ${r.targets} inspector targets${r.memories === undefined ? "" : `, ${r.memories.length} wasm memories (MiB: ${r.memories.map((b) => (b / 2 ** 20).toFixed(1)).join(" ")})`}, VmSize ${(r.vm / 1024).toFixed(0)} MiB in ${r.maps} mappings`,
  );
}
if (rows.length >= 3) {
  const [a, b] = [rows[1], rows.at(-1)];
  const per = (k) => (((b[k] - a[k]) * 1024) / (b.done - a.done)).toFixed(0);
  console.log(`per ${KIND} op after the first reading: JS heap ${per("usedKiB")} B, workerd RSS ${per("rss")} B (anon ${per("anon")}: V8 heaps ${per("v8")}, native heap ${per("malloc")}, other ${per("other")}; file ${per("file")}, shmem ${per("shmem")})`);
}
inspector.close();
await mf.dispose();
await model.close();
