// Bundles the two bench Workers of bench/sdk/compare.mjs into build/bench-sdk/.
import { builtinModules } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "../..");
const OUT = path.join(ROOT, "build/bench-sdk");

/** The SDK Worker: one ES module (node:* left to workerd's nodejs_compat). */
export async function bundleSdkWorker() {
  const outfile = path.join(OUT, "sdk/index.mjs");
  await build({
    entryPoints: [path.join(HERE, "sdk-worker.mjs")],
    outfile,
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2024",
    external: ["cloudflare:*", "node:*", ...builtinModules],
    conditions: ["workerd", "worker", "browser"],
    mainFields: ["module", "main"],
    logLevel: "warning",
  });
  return outfile;
}

/** Shiitake's bench Worker (the demo Agent plus counters and a seed route), with the demo's wasm. */
export async function bundleShiitakeWorker() {
  const { bundleWorker } = await import(path.join(ROOT, "scripts/bundle.mjs"));
  const { scriptPath } = await bundleWorker(path.join(HERE, "shiitake-worker.mjs"), path.join(OUT, "shiitake"), {
    wasmPath: path.join(ROOT, "build/demo/shiitake_bg.wasm"),
  });
  return scriptPath;
}
