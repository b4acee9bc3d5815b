// The JS shim keeps a few copies of the core's bounds (src/limits.rs) where
// it must apply them before calling into wasm; each copy must equal the
// Rust constant of the same name.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";
import { ROOT } from "./helpers.mjs";

/** `NAME -> value` of every `const NAME: type = <integer>;` (underscores allowed). */
function rustConstants(text) {
  const out = new Map();
  for (const [, name, value] of text.matchAll(/pub const ([A-Z0-9_]+): [a-z0-9]+ = ([0-9_]+);/g)) {
    out.set(name, Number(value.replaceAll("_", "")));
  }
  return out;
}

test("the shim's copies of core bounds equal src/limits.rs", async () => {
  const rust = rustConstants(await readFile(path.join(ROOT, "src/limits.rs"), "utf8"));
  const copies = [
    ["js/do.mjs", "MCP_RESPONSE_BYTES_MAX"],
    ["js/do.mjs", "JSON_DEPTH_MAX"],
  ];
  for (const [file, name] of copies) {
    const js = await readFile(path.join(ROOT, file), "utf8");
    const m = js.match(new RegExp(`^const ${name} = ([0-9_]+);`, "m"));
    assert.ok(m, `${file} defines ${name}`);
    assert.ok(rust.has(name), `src/limits.rs defines ${name}`);
    assert.equal(Number(m[1].replaceAll("_", "")), rust.get(name), `${file} ${name}`);
  }
});
