// Storage benchmark: bytes on disk per stored message against the message's
// own JSON (what a read serves), for operator lines and for plain turns
// (prompt + answer), measured from SQLite's `databaseSize` in a real
// Durable Object (Miniflare, storage on disk) over N messages each.
//
//   node bench/storage.mjs [--n 1000] [--chars 110]
//
// Needs `bash scripts/build.sh` first. Prints figures; asserts nothing.

import path from "node:path";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, TOKEN, bundleFixture } from "../tests/e2e/helpers.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";

const { values: args } = parseArgs({
  options: { n: { type: "string", default: "1000" }, chars: { type: "string", default: "110" } },
});
const N = Number(args.n);
const CHARS = Number(args.chars);
const line = (i) => `${i} `.padEnd(CHARS, "lorem ipsum dolor sit amet ");

const model = await startModelServer({ fallback: () => ({ chunks: [line(0)] }) });
const script = await bundleFixture(path.join(ROOT, "bench/turn-worker.mjs"), "bench-turn");
const mf = new Miniflare({
  modules: true,
  scriptPath: script,
  modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
  compatibilityDate: COMPATIBILITY_DATE,
  durableObjectsPersist: await mkdtemp(path.join(tmpdir(), "shiitake-storage-")),
  durableObjects: {
    SHIITAKE: { className: "CountingDO", useSQLite: true },
    FLOOR: { className: "TurnFloorDO", useSQLite: true },
    ALARM_FLOOR: { className: "AlarmFloorDO", useSQLite: true },
  },
  bindings: { SHIITAKE_TOKEN: TOKEN, SHIITAKE_MODEL: "openai/scripted", OPENAI_BASE_URL: model.url, BENCH_NOTIFY_URL: "http://127.0.0.1:9/" },
});
const headers = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
async function call(method, p, body) {
  const res = await mf.dispatchFetch(`http://bench${p}`, { method, headers, body: body && JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

async function measure(agent, what, add) {
  await call("POST", `/agents/${agent}/sessions`, { sessionId: "s" });
  await add(0); // the first write creates the pages every later one shares
  const before = await call("GET", `/agents/${agent}/bench/size`);
  for (let i = 1; i <= N; i++) await add(i);
  const after = await call("GET", `/agents/${agent}/bench/size`);
  const messages = after.messages - before.messages;
  const disk = (after.databaseSize - before.databaseSize) / messages;
  const payload = (after.payload - before.payload) / messages;
  console.log(
    `${what.padEnd(34)} ${messages} messages: ${disk.toFixed(0)} bytes on disk per message, ` +
      `JSON ${payload.toFixed(0)} bytes; ratio ${(disk / payload).toFixed(2)} (target <= 2)`,
  );
}

await measure("operator", `operator lines of ${CHARS} chars`, (i) =>
  call("POST", "/agents/operator/sessions/s/commands", { type: "operator", requestId: `o${i}`, text: line(i) }),
);
await measure("turns", `plain turns (${CHARS}-char prompt + answer)`, async (i) => {
  const { commandId } = await call("POST", "/agents/turns/sessions/s/commands", { type: "prompt", requestId: `p${i}`, text: line(i) });
  const s = await call("GET", `/agents/turns/sessions/s/settlement?commandId=${commandId}&timeoutMs=30000`);
  if (s?.terminal !== "completed") throw new Error(`turn did not complete: ${JSON.stringify(s)}`);
});
await mf.dispose();
await model.close();
