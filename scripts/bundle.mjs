// Bundles a Worker entry that imports the shim (js/) into one ES module that
// Miniflare or workerd load as is, with the wasm copied next to it:
//
//   new Miniflare({ modules: true, scriptPath: "<outDir>/index.mjs",
//     modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }], ... })
//
// Tests bundle their own fixture Workers with `bundleWorker`; the build runs
// it on the demo entry:  node scripts/bundle.mjs [entry] [outDir]
import { copyFile, mkdir, rename } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build } from "esbuild";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/** The wasm-bindgen output of scripts/build.sh. */
export const WASM_PATH = join(ROOT, "build/wasm/shiitake_bg.wasm");

/** The embedded sandbox's engine (js/sandbox/engine-wasm.mjs, which a Worker opting in imports, imports it by this name). */
const ENGINE_WASM_SPECIFIER = "@jitl/quickjs-wasmfile-release-sync/wasm";
export const ENGINE_WASM_PATH = fileURLToPath(import.meta.resolve(ENGINE_WASM_SPECIFIER));
/** Its name next to the bundle, a CompiledWasm module like the core's. */
const ENGINE_WASM_NAME = "quickjs.wasm";

// The engine's import, kept external under the name it gets beside the bundle.
const engineWasmPlugin = {
  name: "shiitake-engine-wasm",
  setup(build) {
    build.onResolve({ filter: /^@jitl\/quickjs-wasmfile-release-sync\/wasm$/ }, () => ({ path: `./${ENGINE_WASM_NAME}`, external: true }));
  },
};

/** Bundles begun in this process: each writes its own temporary files. */
let bundles = 0;

/**
 * @param {string} entryPath the Worker's entry module
 * @param {string} outDir receives `index.mjs`, `shiitake_bg.wasm` and `quickjs.wasm` (the embedded sandbox's engine)
 * @param {{ minify?: boolean, wasmPath?: string }} [options]
 * @returns {Promise<{ scriptPath: string, wasmPath: string }>}
 */
export async function bundleWorker(entryPath, outDir, options = {}) {
  const { minify = false, wasmPath = WASM_PATH } = options;
  const scriptPath = join(resolve(outDir), "index.mjs");
  await mkdir(dirname(scriptPath), { recursive: true });
  // Written beside and renamed into place: end-to-end files running in
  // parallel bundle the same fixture into the same folder, and a Miniflare
  // must never load a half-written module. Unique per call too: one file
  // may bundle the same fixture twice at once (two workers of one fixture).
  const part = `.${process.pid}.${++bundles}.part`;
  await build({
    entryPoints: [resolve(entryPath)],
    outfile: scriptPath + part,
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2024",
    // The runtime provides cloudflare:*; the wasm stays a separate module.
    // esbuild keeps an external import's specifier as written, so the glue's
    // `./shiitake_bg.wasm` resolves next to index.mjs: hence the copy below.
    external: ["cloudflare:*", "*.wasm"],
    conditions: ["workerd", "worker", "browser"],
    mainFields: ["module", "main"],
    plugins: [engineWasmPlugin],
    minify,
    sourcemap: false,
    logLevel: "warning",
  });
  const wasmOut = join(dirname(scriptPath), basename(WASM_PATH));
  await copyFile(wasmPath, wasmOut + part);
  await rename(wasmOut + part, wasmOut);
  const engineOut = join(dirname(scriptPath), ENGINE_WASM_NAME);
  await copyFile(ENGINE_WASM_PATH, engineOut + part);
  await rename(engineOut + part, engineOut);
  await rename(scriptPath + part, scriptPath);
  return { scriptPath, wasmPath: wasmOut };
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const entry = process.argv[2] ?? join(ROOT, "js/demo.mjs");
  const outDir = process.argv[3] ?? join(ROOT, "build/demo");
  const { scriptPath } = await bundleWorker(entry, outDir);
  console.log(`bundled ${entry} -> ${scriptPath}`);
}
