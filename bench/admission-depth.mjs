// What a queued prompt's admission costs by the depth of the queue it joins:
// one Session of the built demo Worker in Miniflare (DO storage on disk), a
// turn held running by the loopback model server, then 60 prompts queued
// behind it, timed one by one; an abort clears the queue between rounds
// (not timed). Each depth bucket's p50 is printed with its ratio to the
// bucket after the first (the first admissions after an abort run on colder
// caches). bench/admission.mjs measures against the floor; this isolates the
// depth, which its blocks do not (with short blocks its room-making, aborts
// and a pause, slows every side alike and narrows the ratio).
//
//   node bench/admission-depth.mjs [--rounds 40] [--warmup 5]
//
// Needs `bash scripts/build.sh` first (build/demo/). Prints figures; asserts
// nothing, but exits 1 if the Session refuses a prompt.

import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { DEMO_SCRIPT, ROOT, TOKEN, workerOptions } from "../tests/e2e/helpers.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";

/** Prompts queued per round: the bound is 64 pending per Session. */
const DEPTH = 60;
const BUCKET = 10;

const { values: args } = parseArgs({ options: { rounds: { type: "string", default: "40" }, warmup: { type: "string", default: "5" } } });
const ROUNDS = Number(args.rounds);
const WARMUP = Number(args.warmup);
if (!Number.isInteger(ROUNDS) || !Number.isInteger(WARMUP) || ROUNDS <= WARMUP || WARMUP < 0) {
  console.error("--rounds must be an integer above --warmup (a non-negative integer)");
  process.exit(2);
}
if (!existsSync(DEMO_SCRIPT)) {
  console.error(`${path.relative(ROOT, DEMO_SCRIPT)} is missing: run \`bash scripts/build.sh\` first`);
  process.exit(2);
}

const model = await startModelServer({ fallback: "hold" });
const persist = await mkdtemp(path.join(tmpdir(), "shiitake-depth-"));
const mf = new Miniflare({
  durableObjectsPersist: persist,
  workers: [{ name: "depth", ...workerOptions(DEMO_SCRIPT, undefined, { SHIITAKE_MODEL: "openai/bench", OPENAI_BASE_URL: model.url }) }],
});

async function post(urlPath, body) {
  const res = await mf.dispatchFetch(`http://depth.bench/agents/bench-depth${urlPath}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 300) {
    console.error(`bench: POST ${urlPath} answered HTTP ${res.status} ${text.slice(0, 300)}`);
    process.exitCode = 1;
    throw new Error("benchmark aborted");
  }
  return text;
}

const buckets = Array.from({ length: DEPTH / BUCKET }, () => []);
try {
  await mf.ready;
  await post("/sessions", { sessionId: "s" });
  let n = 0;
  for (let round = 0; round < ROUNDS; round++) {
    await post("/sessions/s/commands", { type: "abort" });
    await post("/sessions/s/commands", { type: "prompt", requestId: `occupy-${round}`, text: "occupy" });
    // The started turn's model call begins after the answer.
    await new Promise((r) => setTimeout(r, 30));
    for (let depth = 0; depth < DEPTH; depth++) {
      const i = n++;
      const t0 = performance.now();
      await post("/sessions/s/commands", { type: "prompt", requestId: `req-${i}`, text: `benchmark prompt number ${i}: summarise the day's notes` });
      if (round >= WARMUP) buckets[Math.floor(depth / BUCKET)].push(performance.now() - t0);
    }
  }
  const p50 = (samples) => [...samples].sort((a, b) => a - b)[Math.ceil(samples.length / 2) - 1];
  const base = p50(buckets[1]);
  console.log(`admission by queue depth: ${ROUNDS - WARMUP} rounds of ${DEPTH} (after ${WARMUP}), one Session with a running turn, mf.dispatchFetch`);
  console.log("  pending before     p50 ms   / depth 10-19");
  buckets.forEach((b, i) => console.log(`  ${`${i * BUCKET}-${i * BUCKET + BUCKET - 1}`.padEnd(16)} ${p50(b).toFixed(3).padStart(8)}   ${(p50(b) / base).toFixed(2).padStart(6)}`));
} finally {
  await mf.dispose();
  await model.close();
  await rm(persist, { recursive: true, force: true });
}
