// MCP connect-and-list benchmark: what connecting the host's MCP servers
// costs an Agent, for one server and for five (connected concurrently).
//
//   node bench/mcp.mjs [--n 20]
//
// Three Workers on the MCP fixture (tests/e2e/fixtures/mcp-worker.mjs) with
// 0, 1 and 5 servers built with the official SDK (tests/support/
// mcp-server.mjs, SSE mode, 7 tools each). Each sample is the first turn of
// a fresh Agent (a fresh Durable Object, so its servers are connected and
// listed during that turn), timed from the prompt to its settlement; the
// model answers at once without tools. Connect-and-list time = the turn's
// time minus the 0-server turn's median, measured interleaved in the same
// run. Prints medians and the 5-vs-1 ratio. Needs `bash scripts/build.sh`.

import path from "node:path";
import { parseArgs } from "node:util";
import { ROOT, bundleFixture, startWorker } from "../tests/e2e/helpers.mjs";
import { startMcpServer } from "../tests/support/mcp-server.mjs";

const { values: args } = parseArgs({ options: { n: { type: "string", default: "20" } } });
const N = Number(args.n);

const servers = [];
for (let i = 0; i < 5; i++) servers.push(await startMcpServer({ mode: "sse", name: `bench-${i}` }));
const list = (k) => servers.slice(0, k).map((s, i) => ({ name: `s${i}`, url: s.url }));
const script = await bundleFixture(path.join(ROOT, "tests/e2e/fixtures/mcp-worker.mjs"), "mcp-worker");
const workers = {};
for (const k of [0, 1, 5]) {
  workers[k] = await startWorker({ scriptPath: script, model: "echo", bindings: { MCP_SERVERS_JSON: JSON.stringify(list(k)) } });
}

async function firstTurn(k) {
  const h = workers[k];
  const a = h.agent();
  await a.createSession("s");
  const start = performance.now();
  const id = await a.admit("s", "r", "hello");
  const s = await a.waitSettled("s", id, { boundMs: 30_000 });
  if (s.terminal !== "completed") throw new Error(JSON.stringify(s));
  return performance.now() - start;
}

const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
for (const k of [0, 1, 5]) for (let i = 0; i < 3; i++) await firstTurn(k);
const times = { 0: [], 1: [], 5: [] };
for (let i = 0; i < N; i++) for (const k of [0, 1, 5]) times[k].push(await firstTurn(k));
for (const h of Object.values(workers)) await h.dispose();
for (const s of servers) await s.close();

const m = { 0: median(times[0]), 1: median(times[1]), 5: median(times[5]) };
const one = m[1] - m[0];
const five = m[5] - m[0];
const f = (x) => x.toFixed(2);
console.log(`first turns of fresh Agents: ${N} per kind, interleaved (medians)`);
console.log(`  no MCP server   ${f(m[0])} ms`);
console.log(`  1 server        ${f(m[1])} ms   connect-and-list ${f(one)} ms`);
console.log(`  5 servers       ${f(m[5])} ms   connect-and-list ${f(five)} ms`);
console.log(`5 servers vs 1: ${f(five / one)}x`);
