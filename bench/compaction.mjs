// Compaction benchmark: a long tool-heavy Session under automatic
// compaction (docs/http.md "Compaction"), measured in one run.
//
//   node bench/compaction.mjs [--turns 200] [--window 128000]
//
// Each turn: a prompt, a model step calling `read_blob` (a direct tool
// whose result is 20 KiB of text), the tool's result, a final answer. The
// model (tests/support/model-server.mjs on its own thread, see
// bench/model-thread.mjs) is scripted by what it receives: a summary call
// (the default compaction prompt) answers a 1 KiB summary, a request ending
// in a tool result answers `done`, any other calls the tool. It reports the
// rough usage the server counts (request text / 4) and refuses, as a
// provider does, every request past the stated window. Prints:
// - the largest request any turn sent against the window, and the
//   refusals (target: none pass it);
// - the compactions (summary calls);
// - the p50 turn (admission to settlement, wall) near turn 10 (turns 1-20)
//   and near the last turn (the last 20), and their ratio (target <= 1.2
//   at 2,000 turns).
// Needs `bash scripts/build.sh` first. Prints figures; asserts nothing.

import path from "node:path";
import { parseArgs } from "node:util";
import { Worker, isMainThread, parentPort } from "node:worker_threads";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, TOKEN, bundleFixture } from "../tests/e2e/helpers.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";

const SUMMARY = `Summary: the user asked for the blob turn after turn; each read returned 20 KiB of text. ${"s".repeat(900)}`;
const NEAR = 20;
// Turns of another Agent first, so both ends are measured on a warm runtime.
const WARM = 40;

/** The model server's thread: answers by what each request holds; `drain` reports and forgets the records. */
if (!isMainThread && parentPort) {
  const { window } = (await new Promise((resolve) => parentPort.once("message", resolve))).arg;
  const server = await startModelServer({
    contextLimit: window,
    fallback: (body) => {
      const system = body.messages.find((m) => m.role === "system")?.content ?? "";
      if (system.startsWith("You compact a conversation")) return { text: SUMMARY };
      if (body.messages.at(-1).role === "tool") return { text: "done" };
      return { toolCalls: [{ name: "read_blob", arguments: {} }] };
    },
  });
  parentPort.on("message", async ({ id, op }) => {
    let value = null;
    if (op === "drain") {
      const records = server.requests();
      server.reset();
      value = {
        requests: records.length,
        maxTokens: Math.max(0, ...records.map((r) => r.tokens ?? 0)),
        tooLong: records.filter((r) => r.outcome === "too_long").length,
        summaries: records.filter((r) => r.body?.messages?.[0]?.role === "system").length,
      };
    } else if (op === "close") await server.close();
    parentPort.postMessage({ id, value });
    if (op === "close") parentPort.close();
  });
  parentPort.postMessage({ id: 0, value: server.url });
} else {
  const { values: args } = parseArgs({
    options: { turns: { type: "string", default: "200" }, window: { type: "string", default: "128000" } },
  });
  const TURNS = Number(args.turns);
  const WINDOW = Number(args.window);
  if (!(TURNS >= 2 * NEAR)) throw new Error(`--turns: at least ${2 * NEAR}`);

  const thread = new Worker(new URL(import.meta.url));
  const waiting = new Map();
  let next = 1;
  thread.on("message", ({ id, value }) => {
    waiting.get(id)?.(value);
    waiting.delete(id);
  });
  const ask = (op, arg) =>
    new Promise((resolve) => {
      const id = next++;
      waiting.set(id, resolve);
      thread.postMessage({ id, op, arg });
    });
  const modelUrl = await new Promise((resolve) => {
    waiting.set(0, resolve);
    thread.postMessage({ op: "start", arg: { window: WINDOW } });
  });

  const script = await bundleFixture(path.join(ROOT, "bench/compaction-worker.mjs"), "bench-compaction");
  const mf = new Miniflare({
    modules: true,
    scriptPath: script,
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    compatibilityDate: COMPATIBILITY_DATE,
    durableObjects: { SHIITAKE: { className: "ShiitakeDO", useSQLite: true } },
    bindings: {
      SHIITAKE_TOKEN: TOKEN,
      SHIITAKE_MODEL: "openai/scripted",
      OPENAI_BASE_URL: modelUrl,
      SHIITAKE_CONTEXT_WINDOWS: `openai/scripted=${WINDOW}`,
    },
  });
  const call = async (method, p, body) => {
    const res = await mf.dispatchFetch(`http://bench${p}`, {
      method,
      headers: { "content-type": "application/json" },
      body: body && JSON.stringify(body),
    });
    const text = await res.text();
    if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${text}`);
    return JSON.parse(text);
  };
  /** One turn: admission to settlement, in ms. */
  async function turn(base, i) {
    const started = performance.now();
    const { commandId } = await call("POST", `${base}/commands`, { type: "prompt", requestId: `p${i}`, text: `turn ${i}: read the blob` });
    for (;;) {
      const settled = await call("GET", `${base}/settlement?commandId=${commandId}&timeoutMs=30000`);
      if (settled === null) continue;
      if (settled.terminal !== "completed") throw new Error(`turn ${i}: ${JSON.stringify(settled)}`);
      return performance.now() - started;
    }
  }
  const p50 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

  // Warm up the runtime (wasm compiled, JIT and caches warm) in another Agent.
  await call("POST", "/agents/warm/sessions", { sessionId: "s" });
  for (let i = 0; i < WARM; i++) await turn("/agents/warm/sessions/s", i);
  await ask("drain");

  await call("POST", "/agents/bench/sessions", { sessionId: "s" });
  const times = [];
  const totals = { requests: 0, maxTokens: 0, tooLong: 0, summaries: 0 };
  const drain = async () => {
    const d = await ask("drain");
    totals.requests += d.requests;
    totals.maxTokens = Math.max(totals.maxTokens, d.maxTokens);
    totals.tooLong += d.tooLong;
    totals.summaries += d.summaries;
  };
  for (let i = 1; i <= TURNS; i++) {
    times.push(await turn("/agents/bench/sessions/s", i));
    if (i % 100 === 0) {
      await drain();
      process.stderr.write(`turn ${i}: p50 of the last ${NEAR} ${p50(times.slice(-NEAR)).toFixed(1)} ms\n`);
    }
  }
  await drain();
  const early = p50(times.slice(0, NEAR));
  const late = p50(times.slice(-NEAR));
  console.log(`compaction bench: ${TURNS} turns, 20 KiB tool results, window ${WINDOW} tokens (trigger 0.8)`);
  console.log(`  model requests: ${totals.requests}; largest ${totals.maxTokens} tokens (${((100 * totals.maxTokens) / WINDOW).toFixed(1)}% of the window); refused past it: ${totals.tooLong}`);
  console.log(`  compactions (summary calls): ${totals.summaries}, one per ${(TURNS / Math.max(1, totals.summaries)).toFixed(1)} turns`);
  console.log(`  p50 turn near turn 10 (turns 1-${NEAR}): ${early.toFixed(1)} ms`);
  console.log(`  p50 turn near turn ${TURNS} (turns ${TURNS - NEAR + 1}-${TURNS}): ${late.toFixed(1)} ms`);
  console.log(`  ratio late / early: ${(late / early).toFixed(2)} (target <= 1.2)`);
  await mf.dispose();
  await ask("close");
  await thread.terminate();
}
