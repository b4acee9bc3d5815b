// Which JavaScript engine the embedded `execute` sandbox runs (issue 37):
// the quickjs-emscripten variants, measured in one run against a baseline.
//
//   node bench/sandbox-engine.mjs [--n 200] [--workerd]
//
// Per variant: the wasm's size (raw, gzip), compiling it, instantiating it
// (the engine a process keeps), a fresh runtime + context per run (what each
// `execute` run gets), and guest runs: a trivial one, one making 1 async host
// call and one making 10 (each call a promise the host settles later, the
// sync build's pattern: `newPromise`, then `executePendingJobs` once the host
// promise settles). The baseline is the same code as a plain async function
// in the host's own V8, no sandbox: the ratios are to it. (For scale: the
// Worker Loader door costs about 31 ms a run, issue 37.)
// `--workerd` runs the variants in Miniflare too, with the wasm imported as a
// CompiledWasm module (a Worker cannot compile wasm bytes at runtime) and
// handed to the engine through `newVariant(variant, { wasmModule })`.
// Asserts nothing.
//
// Measured 2026-12-04 (Node 24.22, quickjs-emscripten 0.32.0, N=300):
//                      quickjs        quickjs-ng
//   wasm raw / gzip    491 / 229 KiB  516 / 244 KiB
//   cold compile       3.2 ms         3.4 ms
//   cold instantiate   4.5 ms         4.4 ms
//   runtime + context  0.165 ms       0.188 ms
//   trivial run        0.173 ms       0.213 ms   (baseline 0.001 ms)
//   1 host call        0.245 ms       0.261 ms   (baseline 0.004 ms)
//   10 host calls      0.428 ms       0.442 ms   (baseline 0.016 ms)
// Both run in workerd with the wasm imported as a CompiledWasm module
// (compiling bytes there fails: "Wasm code generation disallowed by embedder").
// Chosen: @jitl/quickjs-wasmfile-release-sync (Bellard's QuickJS): 15 KiB
// less gzip against the 3 MiB upload limit and as fast or faster on every
// per-run figure (quickjs-ng 1.03-1.23x slower), with the same API, so
// switching is one import. Sync, not asyncify: host calls are promises the
// host settles, then `executePendingJobs` (the documented pattern), and the
// asyncify builds are larger and slower. Either is ~0.2-0.4 ms a run against
// the Worker Loader's ~31 ms.
import { copyFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { gzipSync } from "node:zlib";
import { newQuickJSWASMModuleFromVariant, newVariant } from "quickjs-emscripten-core";
import { runOnce } from "./sandbox-engine-run.mjs";

const { values: args } = parseArgs({
  options: { n: { type: "string", default: "200" }, workerd: { type: "boolean", default: false }, cold: { type: "string" } },
});
const N = Number(args.n);
const require = createRequire(import.meta.url);

const VARIANTS = {
  quickjs: "@jitl/quickjs-wasmfile-release-sync",
  "quickjs-ng": "@jitl/quickjs-ng-wasmfile-release-sync",
};

const CODE = {
  trivial: "(async () => 6 * 7)()",
  call1: "(async () => (await call('notes.add', '{}')).length)()",
  call10: "(async () => { let n = 0; for (let i = 0; i < 10; i++) n += (await call('notes.add', '{}')).length; return n })()",
};

/** The host's side of one call: settles on a later turn, like real I/O. */
const host = () => new Promise((resolve) => setImmediate(() => resolve('{"result":{"sum":3}}')));

async function baselineOnce(code) {
  const call = host;
  return new Function("call", `return ${code}`)(call);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
async function time(fn, n = N) {
  for (let i = 0; i < Math.min(20, n); i++) await fn();
  const xs = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    xs.push(performance.now() - t);
  }
  return median(xs);
}

/** Compiles and instantiates `pkg`'s engine: `{QuickJS, bytes, compileMs, instantiateMs}`. */
async function load(pkg) {
  const bytes = await readFile(require.resolve(`${pkg}/wasm`));
  const variant = (await import(pkg)).default;
  let t = performance.now();
  const wasmModule = await WebAssembly.compile(bytes);
  const compileMs = performance.now() - t;
  t = performance.now();
  const QuickJS = await newQuickJSWASMModuleFromVariant(newVariant(variant, { wasmModule }));
  return { QuickJS, bytes, compileMs, instantiateMs: performance.now() - t };
}

// A cold start measured in its own process (the engine's JS not yet loaded).
if (args.cold) {
  const { compileMs, instantiateMs } = await load(args.cold);
  console.log(JSON.stringify({ compileMs, instantiateMs }));
  process.exit(0);
}

async function measureVariant(pkg) {
  const { QuickJS, bytes } = await load(pkg);
  const cold = JSON.parse(execFileSync(process.execPath, [import.meta.filename, "--cold", pkg], { encoding: "utf8" }));
  const { compileMs, instantiateMs } = cold;
  const context = await time(async () => {
    const runtime = QuickJS.newRuntime();
    const ctx = runtime.newContext();
    ctx.dispose();
    runtime.dispose();
  });
  const runs = {};
  for (const [name, code] of Object.entries(CODE)) runs[name] = await time(() => runOnce(QuickJS, code, host));
  return { raw: bytes.length, gzip: gzipSync(bytes).length, compileMs, instantiateMs, context, runs };
}

const base = {};
for (const [name, code] of Object.entries(CODE)) base[name] = await time(() => baselineOnce(code));
const out = { baseline: base };
for (const [name, pkg] of Object.entries(VARIANTS)) out[name] = await measureVariant(pkg);

const f = (ms) => `${ms.toFixed(3)} ms`;
console.log(`sandbox engines, Node ${process.version}, medians of ${N} runs`);
console.log(`baseline (host V8 async function): trivial ${f(base.trivial)}, 1 call ${f(base.call1)}, 10 calls ${f(base.call10)}`);
for (const name of Object.keys(VARIANTS)) {
  const m = out[name];
  console.log(`\n${name} (${VARIANTS[name]})`);
  console.log(`  wasm ${(m.raw / 1024).toFixed(0)} KiB raw, ${(m.gzip / 1024).toFixed(0)} KiB gzip`);
  console.log(`  cold (own process): compile ${f(m.compileMs)}, instantiate ${f(m.instantiateMs)}`);
  console.log(`  fresh runtime + context per run ${f(m.context)}`);
  for (const run of Object.keys(CODE)) {
    console.log(`  ${run.padEnd(8)} ${f(m.runs[run])}  (${(m.runs[run] / base[run]).toFixed(1)}x baseline, +${f(m.runs[run] - base[run])})`);
  }
}
if (Object.keys(VARIANTS).length === 2) {
  const [a, b] = Object.keys(VARIANTS).map((k) => out[k]);
  console.log(`\nquickjs-ng / quickjs: gzip ${(b.gzip / a.gzip).toFixed(2)}x, instantiate ${(b.instantiateMs / a.instantiateMs).toFixed(2)}x, context ${(b.context / a.context).toFixed(2)}x, ` +
    Object.keys(CODE).map((r) => `${r} ${(b.runs[r] / a.runs[r]).toFixed(2)}x`).join(", "));
}

// The whole embedded door on the chosen engine (js/sandbox/embedded.mjs):
// the code parsed and normalised, the harness compiled in a fresh context,
// the result checked; the same code as CODE, in the door's form.
const { nodeSandbox } = await import("../js/sandbox/node.mjs");
const sandbox = nodeSandbox();
const dispatch = () => host();
const DOOR = {
  trivial: "6 * 7",
  call1: "(await notes.add({})).sum",
  call10: "let n = 0; for (let i = 0; i < 10; i++) n += (await notes.add({})).sum; return n",
};
console.log("\nEmbeddedSandbox.run (quickjs; parse, harness, fresh runtime + context, checks):");
for (const [run, code] of Object.entries(DOOR)) {
  const ms = await time(() => sandbox.run({ code, namespaces: ["notes"], dispatch }));
  console.log(`  ${run.padEnd(8)} ${f(ms)}  (${(ms / base[run]).toFixed(1)}x baseline)`);
}

if (args.workerd) await workerd();

/** The same trivial and 10-call runs in Miniflare, the wasm imported as a CompiledWasm module. */
async function workerd() {
  const { build } = await import("esbuild");
  const { Miniflare } = await import("miniflare");
  const dir = await mkdtemp(path.join(tmpdir(), "sandbox-engine-"));
  try {
    console.log("\nworkerd (Miniflare), wasm imported as a module:");
    for (const [name, pkg] of Object.entries(VARIANTS)) {
      await copyFile(require.resolve(`${pkg}/wasm`), path.join(dir, "engine.wasm"));
      const entry = path.join(dir, "entry.mjs");
      await writeFile(
        entry,
        `import wasmModule from "./engine.wasm";
import variant from ${JSON.stringify(pkg)};
import { newQuickJSWASMModuleFromVariant, newVariant } from "quickjs-emscripten-core";
import { runOnce } from ${JSON.stringify(path.resolve(import.meta.dirname, "sandbox-engine-run.mjs"))};
const host = () => new Promise((resolve) => setTimeout(() => resolve('{"result":{"sum":3}}'), 0));
let engine;
export default {
  async fetch() {
    const t0 = performance.now();
    engine ??= await newQuickJSWASMModuleFromVariant(newVariant(variant, { wasmModule }));
    const out = { compiledFromBytes: await WebAssembly.compile(new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0])).then(() => "allowed", (e) => String(e)) };
    out.trivial = await runOnce(engine, ${JSON.stringify(CODE.trivial)}, host);
    out.call10 = await runOnce(engine, ${JSON.stringify(CODE.call10)}, host);
    out.ms = performance.now() - t0;
    return Response.json(out);
  },
};
`,
      );
      await build({
        entryPoints: [entry],
        outfile: path.join(dir, "index.mjs"),
        bundle: true,
        format: "esm",
        platform: "neutral",
        conditions: ["workerd", "worker", "browser"],
        mainFields: ["module", "main"],
        external: ["*.wasm"],
        logLevel: "warning",
        nodePaths: [path.resolve(import.meta.dirname, "../node_modules")],
      });
      const mf = new Miniflare({
        modules: true,
        modulesRoot: dir,
        scriptPath: path.join(dir, "index.mjs"),
        modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
        compatibilityDate: "2026-07-30",
      });
      try {
        const first = await (await mf.dispatchFetch("http://localhost/")).json();
        const second = await (await mf.dispatchFetch("http://localhost/")).json();
        console.log(`  ${name}: ${JSON.stringify(first)}; warm request ${f(second.ms)}`);
      } finally {
        await mf.dispose();
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
