// What exporting OpenTelemetry traces adds to a plain turn (issue 38 item
// 5, target: at most 10% on the p50), measured in one run: turns of Agents
// that export every turn's spans to a local OTLP/HTTP receiver
// (`telemetry()`, bench/otel-worker.mjs) interleaved with turns of Agents
// that export nothing, same class, same Worker, and a second plain Agent
// whose ratio to the first shows the run's noise. A turn is timed from
// sending the prompt to its settlement (long poll); the export runs on the
// host work lane beside it, so what it costs a turn is its share of the
// isolate (span writes in the turn's own transitions, the lane pass).
//
//   node bench/otel.mjs [--n 200] [--runs 3]
//
// Needs `bash scripts/build.sh` first. Prints figures; asserts nothing.
import http from "node:http";
import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, TOKEN, bundleFixture } from "../tests/e2e/helpers.mjs";
import { startModelThread } from "./model-thread.mjs";

const { values: args } = parseArgs({ options: { n: { type: "string", default: "200" }, runs: { type: "string", default: "3" } } });
const N = Number(args.n);
const RUNS = Number(args.runs);

const model = await startModelThread();
await model.setChunks(["ok"]);
let spans = 0;
const receiver = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    spans += JSON.parse(Buffer.concat(chunks).toString()).resourceSpans[0].scopeSpans[0].spans.length;
    res.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
});
await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));

const script = await bundleFixture(path.join(ROOT, "bench/otel-worker.mjs"), "bench-otel");
const mf = new Miniflare({
  modules: true,
  scriptPath: script,
  modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
  compatibilityDate: COMPATIBILITY_DATE,
  durableObjects: { SHIITAKE: { className: "ShiitakeDO", useSQLite: true } },
  bindings: {
    SHIITAKE_TOKEN: TOKEN,
    SHIITAKE_MODEL: "openai/scripted",
    OPENAI_BASE_URL: model.url,
    BENCH_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.address().port}`,
  },
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
  const t = performance.now();
  const { commandId } = await call("POST", `/agents/${agent}/sessions/${session}/commands`, { type: "prompt", requestId: `r${seq++}`, text: "go" });
  const s = await call("GET", `/agents/${agent}/sessions/${session}/settlement?commandId=${commandId}&timeoutMs=30000`);
  if (s?.terminal !== "completed") throw new Error(`turn did not complete: ${JSON.stringify(s)}`);
  return performance.now() - t;
}

const p50 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
// A fresh Session every ROTATE turns keeps the context short.
const ROTATE = 5;
const ratios = [];
const controls = [];
for (let run = 0; run < RUNS; run++) {
  const times = { plain: [], control: [], traced: [] };
  for (let i = -20; i < N; i++) {
    const session = `s${run}-${Math.floor((i + 20) / ROTATE)}`;
    if ((i + 20) % ROTATE === 0) {
      for (const kind of Object.keys(times)) await call("POST", `/agents/${kind}-${run}/sessions`, { sessionId: session });
    }
    // The order rotates, so none always follows another's export.
    const kinds = Object.keys(times);
    for (let k = 0; k < kinds.length; k++) {
      const kind = kinds[(((i + k) % kinds.length) + kinds.length) % kinds.length];
      const ms = await turn(`${kind}-${run}`, session);
      if (i >= 0) times[kind].push(ms);
    }
  }
  const [plain, control, traced] = [p50(times.plain), p50(times.control), p50(times.traced)];
  ratios.push(traced / plain);
  controls.push(control / plain);
  console.log(`run ${run + 1}: p50 plain ${plain.toFixed(2)} ms, a second plain Agent ${control.toFixed(2)} ms, traced ${traced.toFixed(2)} ms; traced/plain ${(traced / plain).toFixed(3)}, plain/plain ${(control / plain).toFixed(3)} (${N} turns each)`);
}
// Every traced turn's two spans (the turn, its one model call) arrive.
await new Promise((resolve) => setTimeout(resolve, 2500));
console.log(`spans received: ${spans} (want ${RUNS * (N + 20) * 2})`);
console.log(`ratio traced/plain p50: ${ratios.map((r) => r.toFixed(3)).join(", ")} (target <= 1.10)`);
console.log(`the same ratio between two plain Agents (the noise): ${controls.map((r) => r.toFixed(3)).join(", ")}`);
await mf.dispose();
await model.close?.();
receiver.close();
