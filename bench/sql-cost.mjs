// What one `sql.exec` costs inside workerd, timed by the object itself with
// no inspector attached: a one-row read, the same with its cursor left open,
// a 40-row read, the context window over the same 40 rows, and admission's
// read (`Store::admission_facts`) with and without its scan of the
// Session's queue for the pending count and bytes. Puts
// bench/profile.mjs in proportion: under the inspector's sampling profiler
// `exec` shows as 11-13% of a turn, while the reads of a plain turn cost
// about 0.1 ms of its 6-8 ms of CPU here. (Writes are left out: a loop of
// writes times the commit of their implicit transaction with them.)
//
//   node bench/sql-cost.mjs [--n 2000] [--runs 3]
//
// Prints µs per call for each run; asserts nothing.

import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, bundleFixture } from "../tests/e2e/helpers.mjs";

const { values: args } = parseArgs({ options: { n: { type: "string", default: "2000" }, runs: { type: "string", default: "3" } } });
const script = await bundleFixture(path.join(ROOT, "bench/sql-cost-worker.mjs"), "bench-sql-cost");
const mf = new Miniflare({
  modules: true,
  scriptPath: script,
  compatibilityDate: COMPATIBILITY_DATE,
  durableObjects: { COST: { className: "CostDO", useSQLite: true } },
});
const runs = [];
for (let r = 0; r < Number(args.runs); r++) runs.push(await (await mf.dispatchFetch(`http://cost/?n=${args.n}`)).json());
console.log(`sql.exec inside workerd, µs per call (${args.n} calls per figure; ${runs.length} runs):`);
for (const name of Object.keys(runs[0])) console.log(`  ${name.padEnd(48)} ${runs.map((r) => r[name].toFixed(1).padStart(6)).join(" ")}`);
await mf.dispose();
