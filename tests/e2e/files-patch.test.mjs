// The "shiitake/files-patch" entry: its inline schemas are the files in
// schemas/ (the Rust core includes those), its validators accept what the
// schemas accept and name the path of what they refuse, it bundles for a
// browser alone (no wasm, no Workers runtime) and small, and its
// declarations type-check.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import ts from "typescript";
import { patchInputSchema, patchOutputSchema, validatePatchInput, validatePatchOutput } from "../../js/files-patch.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const schema = (name) => JSON.parse(readFileSync(path.join(ROOT, "schemas", name), "utf8"));
const PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n";
/** Bytes the browser bundle may take (the schemas' text is most of it). */
const BUNDLE_BYTES_MAX = 16 * 1024;

test("the inline schemas are the files in schemas/", () => {
  assert.deepEqual(patchInputSchema, schema("files-patch.input.json"));
  assert.deepEqual(patchOutputSchema, schema("files-patch.output.json"));
  assert.ok(Object.isFrozen(patchInputSchema.properties.input));
});

test("validatePatchInput accepts a patch and names what is wrong", () => {
  assert.deepEqual(validatePatchInput({ input: PATCH }), { ok: true, value: { input: PATCH } });
  assert.equal(validatePatchInput({ input: "é".repeat(262_144) }).ok, true);
  for (const [value, error] of [
    [null, "$: expected an object"],
    [[PATCH], "$: expected an object"],
    ["text", "$: expected an object"],
    [{}, "$.input: required"],
    [{ input: 1 }, "$.input: expected a string"],
    [{ input: PATCH, path: "a" }, "$.path: unexpected property"],
    [{ input: PATCH, "a b": 1 }, '$["a b"]: unexpected property'],
    [{ input: "x".repeat(262_145) }, "$.input: longer than 262144 characters"],
  ]) {
    assert.deepEqual(validatePatchInput(value), { ok: false, error }, JSON.stringify(value)?.slice(0, 80));
  }
});

test("validatePatchOutput accepts the tool's output and names what is wrong", () => {
  const output = {
    files: [
      { path: "a.txt", action: "added" },
      { path: "b.txt", action: "updated" },
      { path: "c.txt", action: "deleted" },
      { path: "e.txt", action: "moved", from: "d.txt" },
    ],
  };
  assert.deepEqual(validatePatchOutput(output), { ok: true, value: output });
  assert.equal(validatePatchOutput({ files: [] }).ok, true);
  const many = { files: Array.from({ length: 65 }, (_, i) => ({ path: `f${i}`, action: "added" })) };
  for (const [value, error] of [
    [{}, "$.files: required"],
    [{ files: {} }, "$.files: expected an array"],
    [many, "$.files: more than 64 items"],
    [{ files: [7] }, "$.files[0]: expected an object"],
    [{ files: [{ action: "added" }] }, "$.files[0].path: required"],
    [{ files: [{ path: 1, action: "added" }] }, "$.files[0].path: expected a string"],
    [{ files: [{ path: "a", action: "renamed" }] }, "$.files[0].action: expected one of added, updated, deleted, moved"],
    [{ files: [{ path: "a", action: "added" }, { path: "b", action: "moved" }] }, "$.files[1].from: required for a moved file"],
    [{ files: [{ path: "a", action: "updated", from: "b" }] }, "$.files[0].from: only a moved file has one"],
    [{ files: [{ path: "a", action: "moved", from: 3 }] }, "$.files[0].from: expected a string"],
    [{ files: [{ path: "a", action: "added", size: 3 }] }, "$.files[0].size: unexpected property"],
  ]) {
    assert.deepEqual(validatePatchOutput(value), { ok: false, error }, JSON.stringify(value).slice(0, 80));
  }
});

test("shiitake/files-patch bundles for a browser alone, small", async () => {
  const result = await build({
    stdin: { contents: 'export * from "shiitake/files-patch";', resolveDir: ROOT, loader: "js" },
    absWorkingDir: ROOT,
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    minify: true,
    logLevel: "silent",
  });
  const code = result.outputFiles[0].text;
  console.log(`shiitake/files-patch browser bundle: ${code.length} bytes (minified)`);
  for (const word of ["wasm", "WebAssembly", "cloudflare:"]) assert.ok(!code.includes(word), `bundle mentions ${word}`);
  assert.ok(code.length < BUNDLE_BYTES_MAX, `${code.length} bytes`);
  const bundled = await import(`data:text/javascript;base64,${Buffer.from(code).toString("base64")}`);
  assert.deepEqual(bundled.validatePatchInput({ input: PATCH }), { ok: true, value: { input: PATCH } });
  assert.equal(bundled.validatePatchInput({ input: 1 }).error, "$.input: expected a string");
  assert.deepEqual(bundled.patchOutputSchema, schema("files-patch.output.json"));
});

test("the declarations type-check a consumer through the package name", () => {
  // A virtual file inside the package, so "shiitake/files-patch" resolves
  // through package.json "exports" to js/files-patch.d.ts.
  const file = path.join(ROOT, "tests/e2e/files-patch-consumer.ts");
  const text = `
import {
  patchInputSchema, validatePatchInput, validatePatchOutput,
  type PatchFileChange, type PatchInput, type PatchOutput,
} from "shiitake/files-patch";
const input: PatchInput = { input: "*** Begin Patch\\n*** End Patch" };
const checked = validatePatchInput(input as unknown);
export const text: string = checked.ok ? checked.value.input : checked.error;
const moved: PatchFileChange = { path: "b", action: "moved", from: "a" };
export const output: PatchOutput = { files: [moved, { path: "c", action: "added" }] };
export const again = validatePatchOutput(output);
export const described: unknown = patchInputSchema["description"];
// @ts-expect-error a moved file names its former path
export const noFrom: PatchFileChange = { path: "b", action: "moved" };
// @ts-expect-error only a moved file has one
export const stray: PatchFileChange = { path: "b", action: "added", from: "a" };
// @ts-expect-error the input is text
export const notText: PatchInput = { input: 3 };
`;
  const options = {
    noEmit: true,
    strict: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ["lib.es2022.d.ts"],
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  const fileExists = host.fileExists.bind(host);
  const program = ts.createProgram([file], options, {
    ...host,
    fileExists: (name) => path.resolve(name) === file || fileExists(name),
    getSourceFile: (name, ...rest) =>
      path.resolve(name) === file ? ts.createSourceFile(name, text, ts.ScriptTarget.ES2022, true) : getSourceFile(name, ...rest),
  });
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  assert.deepEqual(diagnostics, []);
  const resolved = program.getSourceFiles().map((s) => path.relative(ROOT, s.fileName));
  assert.ok(resolved.includes("js/files-patch.d.ts"), resolved.join(", "));
});
