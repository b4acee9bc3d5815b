// `execute` benchmark: what the door costs per call, measured in one run.
//
//   node bench/execute.mjs [--n 40] [--sandbox loader|embedded]
//
// A plain turn and three kinds of tool turn, interleaved, on the tools
// fixture (tests/e2e/fixtures/tools-worker.mjs), each timed from the prompt
// to its settlement (the model server answers instantly; two model steps a
// tool turn, one a plain turn):
//   plain    the model answers at once (what a tool turn is compared to);
//   direct   the model calls the direct tool `apply_patch` once (baseline);
//   execute  the model calls `execute` with code calling `files.apply_patch`
//            once: the same operation through a fresh sandbox;
//   execute50  the same code calling it 50 times.
// Prints medians, the per-call overhead of execute (execute - direct) and its
// ratio to the baseline, and the cost of one more guest call
// ((execute50 - execute) / 49). `--sandbox embedded`: execute in the embedded
// sandbox (tools().sandbox, fixtures/embedded-tools-worker.mjs, no LOADER)
// instead of the Worker Loader. `--same-agent`: all turns in one Agent.
// Needs `bash scripts/build.sh`. Asserts nothing.

import path from "node:path";
import { parseArgs } from "node:util";
import { ROOT, bundleFixture, startWorker } from "../tests/e2e/helpers.mjs";

const { values: args } = parseArgs({
  options: { n: { type: "string", default: "40" }, sandbox: { type: "string", default: "loader" }, "same-agent": { type: "boolean", default: false } },
});
const N = Number(args.n);
const embedded = args.sandbox === "embedded";
const fixture = embedded ? "embedded-tools-worker" : "tools-worker";

const script = await bundleFixture(path.join(ROOT, `tests/e2e/fixtures/${fixture}.mjs`), fixture);
const h = await startWorker({ scriptPath: script, model: "echo", loader: !embedded });

const kinds = {
  plain: () => ({ text: "ok" }),
  direct: () => ({ toolCalls: [{ name: "apply_patch", arguments: { patch: "p" } }] }),
  execute: () => ({ toolCalls: [{ name: "execute", arguments: { code: "return await files.apply_patch({ patch: 'p' });" } }] }),
  execute50: () => ({
    toolCalls: [
      {
        name: "execute",
        arguments: { code: "let r; for (let i = 0; i < 50; i++) r = await files.apply_patch({ patch: 'p' }); return r;" },
      },
    ],
  }),
};

let seq = 0;
// --same-agent: every turn in one Agent (its own Session each), so a kept
// sandbox engine (the embedded one) is measured warm; else a fresh Agent a turn.
const shared = args["same-agent"] ? h.agent() : undefined;
async function turn(kind) {
  const tag = `[bench-${kind}-${seq++}]`;
  h.model.scriptFor(tag, kinds[kind](), { text: "ok" });
  const a = shared ?? h.agent();
  const sid = `s${seq}`;
  await a.createSession(sid);
  const start = performance.now();
  const id = await a.admit(sid, "r", `go ${tag}`);
  const s = await a.waitSettled(sid, id, { boundMs: 30_000 });
  const ms = performance.now() - start;
  const calls = kind === "plain" ? 0 : 1;
  if (s.terminal !== "completed" || s.toolCallCount !== calls) throw new Error(`${kind}: ${JSON.stringify(s)}`);
  const tool = (await a.read(sid)).messages.find((m) => m.role === "tool");
  if (calls && tool.isError) throw new Error(`${kind}: ${tool.text}`);
  return ms;
}

const median = (xs) => {
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.floor(s.length / 2)];
};

// Warm up each path (module compile, first sandbox).
for (const kind of Object.keys(kinds)) for (let i = 0; i < 3; i++) await turn(kind);
const times = { plain: [], direct: [], execute: [], execute50: [] };
for (let i = 0; i < N; i++) for (const kind of Object.keys(kinds)) times[kind].push(await turn(kind));
await h.dispose();

const m = Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)]));
const f = (x) => x.toFixed(2);
console.log(`turns per kind: ${N} (interleaved), medians from prompt to settlement; execute in the ${embedded ? "embedded sandbox" : "Worker Loader"}`);
console.log(`  plain turn (no tool)  ${f(m.plain)} ms`);
console.log(`  direct tool turn      ${f(m.direct)} ms`);
console.log(`  execute turn          ${f(m.execute)} ms`);
console.log(`  execute, 50 calls     ${f(m.execute50)} ms`);
console.log(`execute overhead per call: ${f(m.execute - m.direct)} ms (turn ratio ${f(m.execute / m.direct)})`);
console.log(`tool turn / plain turn: direct ${f(m.direct / m.plain)}, execute ${f(m.execute / m.plain)} (target <= 2)`);
console.log(`one more guest call inside a run: ${f((m.execute50 - m.execute) / 49)} ms`);
