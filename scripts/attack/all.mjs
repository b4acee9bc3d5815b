#!/usr/bin/env node
// Runs the three attack scripts one after another and fails if any fails.
// `--short` is the bounded run of the test command (scripts/test.sh): a few
// crash cycles, a few thousand fuzzed requests, a few race rounds, each
// stopped if it runs past its time bound. The seed (default 1, so the test
// command is repeatable) is passed to each.
//
//   node scripts/attack/all.mjs [--short] [--seed S]

import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { parseArgs, table } from "./lib.mjs";

const args = parseArgs(process.argv.slice(2), { short: false, seed: 1 }, "node scripts/attack/all.mjs [--short] [--seed S]");
const here = path.dirname(fileURLToPath(import.meta.url));
/** Each script's time bound (ms), short and long runs. */
const RUNS = [
  { script: "races.mjs", boundMs: args.short ? 60_000 : 600_000 },
  { script: "fuzz.mjs", boundMs: args.short ? 120_000 : 1_800_000 },
  { script: "crash.mjs", boundMs: args.short ? 150_000 : 1_800_000 },
];

const results = [];
for (const { script, boundMs } of RUNS) {
  const argv = [path.join(here, script), "--seed", String(args.seed), ...(args.short ? ["--short"] : [])];
  console.log(`\n---- node scripts/attack/${script} ${argv.slice(1).join(" ")} ----`);
  const t0 = performance.now();
  const child = spawn(process.execPath, argv, { stdio: "inherit" });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill("SIGTERM");
  }, boundMs);
  const code = await new Promise((r) => child.once("exit", (c, signal) => r(c ?? signal)));
  clearTimeout(timer);
  const secs = ((performance.now() - t0) / 1000).toFixed(1);
  results.push([script, timedOut ? `FAILED: over its ${boundMs / 1000} s bound (${secs} s)` : code === 0 ? `ok (${secs} s)` : `FAILED: exit ${code} (${secs} s)`]);
}
table(`attack harness (${args.short ? "short" : "long"}, seed ${args.seed})`, results);
process.exit(results.every(([, r]) => r.startsWith("ok")) ? 0 : 1);
