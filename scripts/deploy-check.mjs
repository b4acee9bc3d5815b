#!/usr/bin/env node
// Deployment proof (README "Deploy"): runs `wrangler deploy --dry-run` of the
// demo with the real wrangler.toml, offline and without a login, and checks
// what a real `wrangler deploy` would upload:
//   - wrangler's own build ran (`[build]`: scripts/build.sh, the production
//     wasm, which never has the fault-injection hook) and its bundle built:
//     an entry module exporting ShiitakeDO and the wasm module, under
//     Cloudflare's 10 MiB compressed size limit, the wasm itself at most
//     1.5 MiB gzipped (500 KiB with SHIITAKE_LEAN=1, the lean build);
//   - the bindings wrangler printed: the Durable Object SHIITAKE
//     (ShiitakeDO) and the Worker Loader LOADER;
//   - the config wrangler read (its own reader, `unstable_readConfig`): that
//     binding, its SQLite migration (`new_sqlite_classes`), the loader, and no
//     secret (SHIITAKE_TOKEN, provider keys) among the plain vars.
// Fails with the first broken fact. Never prompts (stdin closed, CI=1),
// sends no metrics (WRANGLER_SEND_METRICS=false).
// Usage: node scripts/deploy-check.mjs   (after `source scripts/env.sh`:
// wrangler needs Node >= 22.12)
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { gzipSync } from "node:zlib";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const WRANGLER = path.join(ROOT, "node_modules/wrangler/bin/wrangler.js");
const CONFIG = path.join(ROOT, "wrangler.toml");
// The first production build after a test build compiles the crate once
// more (LTO); later runs reuse it. A cold build on a 2-core machine, beside
// the native lints and tests (scripts/test.sh runs them side by side), takes
// several minutes.
const TIMEOUT_MS = 900_000;
const GZIP_BYTES_MAX = 10 * 1024 * 1024;
// Our own bound on the wasm alone: every capability built, or the lean wasm
// (SHIITAKE_LEAN=1, which wrangler's [build] passes to scripts/build.sh).
const LEAN = process.env.SHIITAKE_LEAN === "1";
// The default build may grow to 1.5 MiB (room for a sandbox engine is a
// later issue's, under the Free plan's 3 MiB upload); the lean one stays
// under 500 KiB for hosts that need none of the optional features.
const WASM_GZIP_BYTES_MAX = LEAN ? 500 * 1024 : 1536 * 1024;
// A Worker importing the embedded sandbox's engine (shiitake/sandbox-engine)
// uploads it too: the whole upload stays within the Workers Free plan's 3 MiB.
const ENGINE_UPLOAD_GZIP_BYTES_MAX = 3 * 1024 * 1024;
const ENGINE_WASM_PATH = fileURLToPath(import.meta.resolve("@jitl/quickjs-wasmfile-release-sync/wasm"));
// A string of js/sandbox/embedded.mjs (which brings the engine's JS glue):
// literals survive a minifier.
const ENGINE_GLUE_MARK = "code generation from strings is not available in the sandbox";
// Names that must be secrets (`wrangler secret put`), never wrangler.toml vars.
const SECRETS = ["SHIITAKE_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "SHIITAKE_MCP_SERVERS"];
// Present in the wasm only with the `fault-injection` feature (test builds).
const TEST_BUILD_MARK = "SHIITAKE_FAULT_PANIC_MARKER";

function fail(message, detail) {
  console.error(`deploy-check: FAILED: ${message}`);
  if (detail) console.error(detail);
  process.exit(1);
}

function check(fact, message, detail) {
  if (!fact) fail(message, detail);
}

const started = Date.now();
if (!existsSync(WRANGLER)) fail(`wrangler is not installed (${path.relative(ROOT, WRANGLER)}); run \`npm ci\``);
const [major, minor] = process.versions.node.split(".").map(Number);
check(major > 22 || (major === 22 && minor >= 12), `wrangler needs Node >= 22.12, this is ${process.version}; \`source scripts/env.sh\` first`);

/** `wrangler deploy --dry-run` of `config` into `outDir`: what it printed, checked to have ended well. */
function dryRun(config, outDir) {
  const run = spawnSync(process.execPath, [WRANGLER, "deploy", "--dry-run", "--outdir", outDir, "--config", config], {
    cwd: ROOT,
    env: { ...process.env, CI: "1", WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", FORCE_COLOR: "0" },
    stdio: ["ignore", "pipe", "pipe"],
    encoding: "utf8",
    timeout: TIMEOUT_MS,
    maxBuffer: 64 * 1024 * 1024,
  });
  const printed = `${run.stdout ?? ""}\n${run.stderr ?? ""}`;
  const tail = printed.trim().split("\n").slice(-40).join("\n");
  check(run.error === undefined, `wrangler did not finish: ${run.error?.message}`, tail);
  check(run.status === 0, `wrangler deploy --dry-run exited ${run.status}`, tail);
  check(/--dry-run: exiting now/.test(printed), "wrangler did not reach the end of its dry run", tail);
  return { printed, tail };
}

/** Every file of a dry run's output, gzipped (level 9) and summed: what the upload weighs. */
function uploadGzipBytes(outDir) {
  return readdirSync(outDir, { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile())
    .reduce((sum, d) => sum + gzipSync(readFileSync(path.join(d.parentPath, d.name)), { level: 9 }).length, 0);
}

/**
 * The demo with the embedded sandbox's engine imported (`shiitake/sandbox-engine`,
 * as a Worker running `tools().sandbox: "embedded"` does), dry-run from a
 * config like wrangler.toml's without its [build] (the run before built the
 * wasm), with the rule README "Tools" gives for the engine's module:
 * `{bytes, engineIncluded}` of the upload.
 */
function engineUpload(dir, compatibilityDate) {
  const entry = path.join(dir, "demo-engine.mjs");
  const demo = JSON.stringify(path.join(ROOT, "js/demo.mjs"));
  writeFileSync(entry, `import ${JSON.stringify(path.join(ROOT, "js/sandbox/engine-wasm.mjs"))};\nexport * from ${demo};\nexport { default } from ${demo};\n`);
  const config = path.join(dir, "wrangler.json");
  writeFileSync(
    config,
    JSON.stringify({
      name: "shiitake-demo-engine",
      main: entry,
      compatibility_date: compatibilityDate,
      rules: [{ type: "CompiledWasm", globs: ["**/quickjs-wasmfile-release-sync/wasm"], fallthrough: true }],
      durable_objects: { bindings: [{ name: "SHIITAKE", class_name: "ShiitakeDO" }] },
      migrations: [{ tag: "v1", new_sqlite_classes: ["ShiitakeDO"] }],
    }),
  );
  const outDir = path.join(dir, "out");
  dryRun(config, outDir);
  const engineBytes = readFileSync(ENGINE_WASM_PATH);
  const engineIncluded = readdirSync(outDir, { recursive: true, withFileTypes: true }).some((d) => d.isFile() && readFileSync(path.join(d.parentPath, d.name)).equals(engineBytes));
  return { bytes: uploadGzipBytes(outDir), engineIncluded };
}

const out = mkdtempSync(path.join(tmpdir(), "shiitake-deploy-"));
const withEngine = mkdtempSync(path.join(tmpdir(), "shiitake-deploy-engine-"));
try {
  const { printed, tail } = dryRun(CONFIG, out);

  // The bundle.
  const files = readdirSync(out, { recursive: true }).map(String);
  // Named after wrangler.toml's main (js/demo.mjs -> demo.js).
  const entry = files.find((f) => /^(index|demo)\.m?js$/.test(f));
  check(entry !== undefined, `no bundled entry module in the output (${files.join(", ") || "empty"})`);
  const wasmFiles = files.filter((f) => f.endsWith(".wasm"));
  check(wasmFiles.length === 1, `expected one wasm module in the bundle, found ${wasmFiles.length} (${files.join(", ")})`);
  const code = readFileSync(path.join(out, entry), "utf8");
  check(/export\s*\{[^}]*\bShiitakeDO\b[^}]*\}/.test(code) || /export\s+class\s+ShiitakeDO\b/.test(code), "the bundled entry does not export ShiitakeDO (the Durable Object class)");
  check(code.includes(wasmFiles[0].split("/").pop()), `the bundled entry does not import ${wasmFiles[0]}`);
  const wasm = readFileSync(path.join(out, wasmFiles[0]));
  check(wasm.subarray(0, 4).equals(Buffer.from([0, 0x61, 0x73, 0x6d])), `${wasmFiles[0]} is not a wasm module`);
  check(!wasm.includes(TEST_BUILD_MARK), "the bundled wasm is a test build (it has the fault-injection hook); wrangler's [build] must run scripts/build.sh without SHIITAKE_TEST_BUILD");
  const wasmGzip = gzipSync(wasm, { level: 9 }).length;
  const gzip = gzipSync(code).length + wasmGzip;
  check(gzip <= GZIP_BYTES_MAX, `the bundle is ${gzip} bytes gzipped, over Cloudflare's ${GZIP_BYTES_MAX}`);
  check(wasmGzip <= WASM_GZIP_BYTES_MAX, `the ${LEAN ? "lean " : ""}wasm is ${wasmGzip} bytes gzipped, over ${WASM_GZIP_BYTES_MAX} (${LEAN ? "500 KiB" : "1.5 MiB"}); \`bash scripts/wasm-size.sh\` says what each dependency costs`);

  // The bindings wrangler printed (its table: `env.NAME (detail)   Kind`).
  const bindingLine = (name) => printed.split("\n").find((l) => l.includes(`env.${name}`));
  const durable = bindingLine("SHIITAKE");
  check(durable !== undefined && /ShiitakeDO/.test(durable) && /Durable Object/i.test(durable), "wrangler did not print the Durable Object binding env.SHIITAKE (ShiitakeDO)", tail);
  const loader = bindingLine("LOADER");
  check(loader !== undefined && /Worker Loader/i.test(loader), "wrangler did not print the Worker Loader binding env.LOADER", tail);

  // The config as wrangler read it.
  const { unstable_readConfig: readConfig } = await import(pathToFileURL(path.join(ROOT, "node_modules/wrangler/wrangler-dist/cli.js")).href);
  const config = readConfig({ config: CONFIG }, { hideWarnings: true });
  check(path.resolve(ROOT, config.main ?? "") === path.join(ROOT, "js/demo.mjs"), `main is ${config.main}, not js/demo.mjs`);
  const binding = (config.durable_objects?.bindings ?? []).find((b) => b.name === "SHIITAKE");
  check(binding?.class_name === "ShiitakeDO" && binding.script_name === undefined, "wrangler.toml: no Durable Object binding SHIITAKE of this Worker's class ShiitakeDO");
  const sqlite = (config.migrations ?? []).some((m) => (m.new_sqlite_classes ?? []).includes("ShiitakeDO"));
  check(sqlite, "wrangler.toml: no migration with new_sqlite_classes = [\"ShiitakeDO\"] (the Durable Object needs SQLite storage)");
  const kv = (config.migrations ?? []).some((m) => (m.new_classes ?? []).includes("ShiitakeDO"));
  check(!kv, "wrangler.toml: ShiitakeDO is in new_classes (key-value storage); it must be in new_sqlite_classes");
  check((config.worker_loaders ?? []).some((l) => l.binding === "LOADER"), "wrangler.toml: no Worker Loader binding LOADER (the execute tool's sandbox)");
  const leaked = SECRETS.filter((name) => Object.hasOwn(config.vars ?? {}, name));
  check(leaked.length === 0, `wrangler.toml sets ${leaked.join(", ")} as plain vars; set them with \`wrangler secret put\``);

  // The demo leaves the engine out (it runs `execute` on the Worker
  // Loader): neither its wasm nor its JS (js/sandbox/registry.mjs).
  check(!wasmFiles.some((f) => readFileSync(path.join(out, f)).equals(readFileSync(ENGINE_WASM_PATH))), "the demo's upload carries the embedded sandbox's engine without importing shiitake/sandbox-engine");
  check(!code.includes(ENGINE_GLUE_MARK), "the demo's bundle carries the embedded sandbox's JS without importing shiitake/sandbox-engine");

  // The upload of a Worker running the embedded sandbox; the lean build may leave the engine out.
  let engineText = "engine not measured (lean)";
  if (!LEAN) {
    const upload = engineUpload(withEngine, config.compatibility_date);
    check(upload.engineIncluded, "the demo with shiitake/sandbox-engine imported uploads no engine wasm (the CompiledWasm rule for its module?)");
    check(upload.bytes <= ENGINE_UPLOAD_GZIP_BYTES_MAX, `the upload with the embedded sandbox's engine is ${upload.bytes} bytes gzipped, over the Workers Free plan's ${ENGINE_UPLOAD_GZIP_BYTES_MAX} (3 MiB)`);
    engineText = `with the embedded sandbox's engine ${Math.round(upload.bytes / 1024)} KiB gzip: ${upload.bytes} of ${ENGINE_UPLOAD_GZIP_BYTES_MAX} bytes`;
  }

  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(
    `deploy-check: ok in ${seconds}s: bundle ${entry} + ${wasmFiles[0]} (${Math.round(gzip / 1024)} KiB gzip, ` +
      `${LEAN ? "lean" : "production"} wasm ${Math.round(wasmGzip / 1024)} KiB gzip: ${wasmGzip} of ${WASM_GZIP_BYTES_MAX} bytes); ` +
      `${engineText}; bindings env.SHIITAKE (Durable Object ShiitakeDO, SQLite migration) and env.LOADER (Worker Loader)`,
  );
} finally {
  rmSync(out, { recursive: true, force: true });
  rmSync(withEngine, { recursive: true, force: true });
}
