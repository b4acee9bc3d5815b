// Restart benchmark: does a restarted Agent answer its first read without
// loading its transcript? Two Agents, one Session each, seeded with 100 and
// with 100,000 messages; then, K times, a fresh Miniflare over the same
// storage (a cold instance: constructor, schema check, first read) reads the
// newest page of each, in alternating order (after one request to a third
// Agent, which loads the Worker and compiles the wasm). Prints the first read's time
// and the rows SQLite read for it (from the cursors' `rowsRead`), at both
// sizes, and the ratio big/small.
//
//   node bench/restart.mjs [--restarts 5] [--big 100000]
//
// Needs `bash scripts/build.sh` first. Prints figures; asserts nothing.

import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { TOKEN, workerOptions } from "../tests/e2e/helpers.mjs";
import { bundleShiitakeWorker } from "./sdk/build.mjs";

const { values: args } = parseArgs({
  options: { restarts: { type: "string", default: "5" }, big: { type: "string", default: "100000" } },
});
const RESTARTS = Number(args.restarts);
const SIZES = { small: 100, big: Number(args.big) };

const script = await bundleShiitakeWorker();
const persist = await mkdtemp(path.join(tmpdir(), "shiitake-restart-"));
const start = () =>
  new Miniflare({
    ...workerOptions(script, persist, { SHIITAKE_MODEL: "openai/bench", OPENAI_BASE_URL: "http://127.0.0.1:9/v1" }),
    durableObjects: { SHIITAKE: { className: "BenchDO", useSQLite: true } },
  });
const headers = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
async function call(mf, method, p, body) {
  const res = await mf.dispatchFetch(`http://bench${p}`, { method, headers, body: body && JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

let mf = start();
for (const [agent, size] of Object.entries(SIZES)) {
  await call(mf, "POST", `/agents/${agent}/sessions`, { sessionId: "s" });
  const t = performance.now();
  await call(mf, "POST", `/agents/${agent}/bench/seed?session=s&count=${size}`);
  console.log(`seeded ${size.toLocaleString("en")} messages in ${(performance.now() - t).toFixed(0)} ms`);
}
await mf.dispose();

const first = { small: [], big: [] };
const rows = { small: [], big: [] };
for (let i = 0; i < RESTARTS; i++) {
  mf = start();
  await mf.ready;
  // Loads the Worker and compiles the wasm, so each read below pays for a
  // cold Agent instance only.
  await call(mf, "GET", "/agents/warm/sessions");
  const order = i % 2 ? ["big", "small"] : ["small", "big"];
  for (const agent of order) {
    const t = performance.now();
    const page = await call(mf, "GET", `/agents/${agent}/sessions/s?limit=50`);
    first[agent].push(performance.now() - t);
    if (page.messages.length !== 50) throw new Error(`${agent}: ${page.messages.length} messages`);
    // The counters started with this instance: everything it read so far.
    rows[agent].push((await call(mf, "GET", `/agents/${agent}/bench/stats`)).rowsRead);
  }
  await mf.dispose();
}
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
console.log(`first read of the newest 50 after a restart (${RESTARTS} restarts, median):`);
for (const agent of ["small", "big"]) {
  console.log(
    `  ${SIZES[agent].toLocaleString("en").padStart(7)} messages: ${median(first[agent]).toFixed(1)} ms, ` +
      `${median(rows[agent])} rows read by SQLite since the instance started`,
  );
}
console.log(
  `  time ratio ${SIZES.big.toLocaleString("en")} / ${SIZES.small}: ${(median(first.big) / median(first.small)).toFixed(2)}; ` +
    "the rows read are what shows the transcript is not loaded (the time includes opening a larger SQLite file and its WAL)",
);
