// The distinct SQL texts one Agent hands SQLite: opened by a read, then
// after a Session, a prompt, its settlement and a page read. workerd keeps
// every distinct text prepared for the object's life (its statement cache
// is bounded by 1 MiB of SQL text, never reached here), about 9.5 KiB of
// memory each (measured on a bare object), so this count is most of what
// an idle Agent costs beyond a bare object (`bench/scale.mjs --resident`).
//
//   node bench/statements.mjs [--all] [--save FILE]
//
// --all: print every text; --save: write the final texts as JSON (what
// `bench/memory-steps.mjs --texts FILE` replays in a bare object).
//
// Needs `bash scripts/build.sh`. Prints figures, asserts nothing.

import { writeFileSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { ROOT, TOKEN, bundleFixture, workerOptions } from "../tests/e2e/helpers.mjs";
import { startModelThread } from "./model-thread.mjs";

const { values: args } = parseArgs({ options: { all: { type: "boolean", default: false }, save: { type: "string" } } });
const model = await startModelThread();
const script = await bundleFixture(path.join(ROOT, "bench/statements-worker.mjs"), "bench-statements");
const options = workerOptions(script, undefined, { SHIITAKE_MODEL: "openai/bench", OPENAI_BASE_URL: model.url });
options.durableObjects = { SHIITAKE: { className: "TextsDO", useSQLite: true } };
const mf = new Miniflare(options);
const headers = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
async function call(method, p, body) {
  const res = await mf.dispatchFetch(`http://bench${p}`, { method, headers, body: body && JSON.stringify(body) });
  const text = await res.text();
  if (res.status >= 300 && res.status !== 404) throw new Error(`${method} ${p}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}
async function report(label) {
  const texts = await call("GET", "/texts");
  const runs = texts.reduce((n, [, count]) => n + count, 0);
  console.log(`${label}: ${texts.length} distinct texts (${runs} statements run)`);
  if (args.all) for (const [text, count] of texts) console.log(`  ${String(count).padStart(3)}x ${text.replace(/\s+/g, " ").slice(0, 140)}`);
  return texts.map(([text]) => text);
}
try {
  await call("GET", "/agents/a/sessions/none");
  await report("opened by a read of a missing Session");
  await call("POST", "/agents/a/sessions", { sessionId: "s" });
  const { commandId } = await call("POST", "/agents/a/sessions/s/commands", { type: "prompt", requestId: "r1", text: "hi" });
  const settled = await call("GET", `/agents/a/sessions/s/settlement?commandId=${commandId}&timeoutMs=10000`);
  if (settled?.terminal !== "completed") throw new Error(`the prompt did not complete: ${JSON.stringify(settled)}`);
  await call("GET", "/agents/a/sessions/s?limit=50");
  await new Promise((resolve) => setTimeout(resolve, 300));
  const texts = await report("after a Session, a prompt, its settlement and a page read");
  if (args.save) writeFileSync(args.save, JSON.stringify(texts));
} finally {
  await mf.dispose();
  await model.close();
}
