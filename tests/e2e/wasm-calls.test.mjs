// Calls from the core's wasm into JS per queued prompt admission, counted
// in a real Durable Object (issue 36): a statement is one call into
// js/do/sql.mjs, its parameters and rows carried as JSON, not a call per
// parameter and per cell (146 calls before, 91 of them decoding the facts
// row). The demo bundle is run with every wasm import wrapped by a counter
// that logs the count at each response the core builds. A count, not a
// time: it holds on a loaded machine.
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { DEMO_SCRIPT, ROOT, eventually, expectAccepted, useWorker } from "./helpers.mjs";

// At most this many calls from wasm into JS per queued admission (13 when
// written: the request's method, URL, headers and body, the clock, the
// facts query, the write, the response).
const CALLS_MAX = 20;

const IMPORTS = "function __wbg_get_imports() {";

/** The demo bundle with every wasm import counted, beside its wasm files. */
function countingBundle() {
  const dir = path.join(ROOT, "build/fixtures/wasm-calls");
  mkdirSync(dir, { recursive: true });
  for (const f of ["shiitake_bg.wasm", "quickjs.wasm"]) copyFileSync(path.join(path.dirname(DEMO_SCRIPT), f), path.join(dir, f));
  const source = readFileSync(DEMO_SCRIPT, "utf8");
  assert.equal(source.split(IMPORTS).length, 2, "the glue's import object builder changed shape: update this test");
  const counted = source.replace(
    IMPORTS,
    `function __wbg_get_imports() {
  const imports = __wbg_get_imports_counted();
  let calls = 0;
  for (const key of Object.keys(imports)) {
    const counted = { ...imports[key] };
    for (const [name, f] of Object.entries(counted)) {
      if (typeof f !== "function") continue;
      const respond = name.startsWith("__wbg_respond_");
      counted[name] = function (...args) {
        calls++;
        if (respond) {
          console.log("wasm-calls " + calls);
          calls = 0;
        }
        return f.apply(this, args);
      };
    }
    imports[key] = counted;
  }
  return imports;
}
function __wbg_get_imports_counted() {`,
  );
  const scriptPath = path.join(dir, "index.mjs");
  writeFileSync(scriptPath, counted);
  return scriptPath;
}

const logged = [];
const h = useWorker({
  scriptPath: countingBundle(),
  log: (chunk) => {
    for (const m of chunk.matchAll(/wasm-calls (\d+)/g)) logged.push(Number(m[1]));
  },
});

test(`a queued prompt's admission makes at most ${CALLS_MAX} calls from wasm into JS`, async () => {
  const { a, sid } = await h.occupied();
  // The first count after the occupier's answer holds its turn's start.
  expectAccepted(await a.prompt(sid, "req-first", "queued first"));
  const counts = [];
  for (let i = 0; i < 4; i++) {
    logged.length = 0;
    expectAccepted(await a.prompt(sid, `req-${i}`, `queued ${i}`));
    counts.push(await eventually(() => logged.at(-1), { what: "the admission's count" }));
  }
  for (const n of counts) assert.ok(n <= CALLS_MAX, `calls per admission: ${counts.join(", ")}`);
});
