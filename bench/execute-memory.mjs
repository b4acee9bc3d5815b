// Worker Loader memory: workerd's RSS growth per sandbox run, by variant.
//
//   node bench/execute-memory.mjs <variant> [do|plain] [N=300] [batch=25]
//
// Variants (bench/execute-memory-worker.mjs): bare (load + evaluate()),
// target (evaluate(new RpcTarget())), hostcall (the guest calls the host
// once), runGuest / runGuestCall[Signal] (js/execute.mjs, loader direct),
// sandboxRunGuest[Call[Signal]] (through ctx.exports.ShiitakeSandbox),
// exportsBare / exportsHostcall / exportsRunGuestCall (load inside a
// stateless entrypoint). "do" runs them in a Durable Object (one long-lived
// I/O context), "plain" in the fetch handler. Prints VmRSS before/after and
// KiB per run (after one warm-up batch) and the least-squares slope.
// Measured with workerd 1.20260730, N=300: in a DO, bare 1200, runGuest
// 150-200 KiB/run (GC-dependent); via ShiitakeSandbox 20-35; plain fetch 10-35.
import path from "node:path";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, bundleFixture } from "../tests/e2e/helpers.mjs";

const [variant, ctx = "do", N = "300", B = "25"] = process.argv.slice(2);
const script = await bundleFixture(path.join(ROOT, "bench/execute-memory-worker.mjs"), process.env.BUNDLE ?? "execute-memory");
const kids = () => execFileSync("ps", ["--ppid", String(process.pid), "-o", "pid="]).toString().split(/\s+/).filter(Boolean).map(Number);
const mf = new Miniflare({
  modules: true, scriptPath: script, modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
  compatibilityDate: COMPATIBILITY_DATE, workerLoaders: { LOADER: {} },
  durableObjects: { EXP: { className: "Exp", useSQLite: true, unsafePreventEviction: true } },
});
await mf.ready;
const pid = kids().find((p) => readFileSync(`/proc/${p}/comm`, "utf8").trim() === "workerd");
const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]);
const go = async (n) => { const r = await mf.dispatchFetch(`http://x/?variant=${variant}&ctx=${ctx}&n=${n}`); const t = await r.text(); if (r.status !== 200) throw new Error(t); return t; };
const r0 = rss();
const out = await go(Number(B)); // warm-up batch
const r1 = rss();
const samples = [];
let done = 0;
const t0 = performance.now();
while (done < Number(N)) { await go(Number(B)); done += Number(B); samples.push(rss()); }
const ms = performance.now() - t0;
const r2 = rss();
// least squares over samples
const xs = samples.map((_, i) => (i + 1) * Number(B)); const mx = xs.reduce((a, b) => a + b) / xs.length; const my = samples.reduce((a, b) => a + b) / samples.length;
const slope = xs.reduce((s, x, i) => s + (x - mx) * (samples[i] - my), 0) / xs.reduce((s, x) => s + (x - mx) ** 2, 0);
console.log(JSON.stringify({ variant, ctx, n: Number(N), out: out.slice(0, 300), startKiB: r0, afterWarmKiB: r1, endKiB: r2, perCallKiB: +((r2 - r1) / Number(N)).toFixed(1), slopeKiB: +slope.toFixed(1), msPerCall: +(ms / Number(N)).toFixed(1), samples: process.env.SAMPLES ? samples : undefined }));
await mf.dispose();
