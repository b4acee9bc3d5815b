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
// WORK=sql|fetch|timer|wasm|wasmsql|bigwasm (something the object does
// before each run; bigwasm instantiates the runtime's own wasm once),
// PER_CALL=1 (a request per run), HOLD=1 (a long poll open during each run),
// ALARM=1 (the runs in the alarm handler), DETACH=1 (the runs go on after
// the request's answer, as a turn does): sandboxRunGuestCallSignal dofetch
// stays at 25-93 KiB/run in every combination, while the same
// ShiitakeSandbox load of a one-line guest costs 1.8 MiB per tool turn in
// the demo Agent (bench/heap.mjs --kind tool; 50 KiB with the load skipped),
// which plain turns run afterwards do not reuse (they grow 22 KiB each, as
// without the tool turns before them).
import http from "node:http";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { copyFileSync, readFileSync } from "node:fs";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, bundleFixture } from "../tests/e2e/helpers.mjs";

const [variant, ctx = "do", N = "300", B = "25"] = process.argv.slice(2);
// WORK=none|sql|fetch|timer: what the object does before each run;
// PER_CALL=1: one request per run instead of B runs per request.
const WORK = process.env.WORK ?? "none";
const PER_CALL = process.env.PER_CALL === "1";
const peer = await new Promise((resolve) => {
  const server = http.createServer((_, res) => res.end("ok".repeat(100)));
  server.listen(0, "127.0.0.1", () => { server.unref(); resolve(`http://127.0.0.1:${server.address().port}/`); });
});
const script = await bundleFixture(path.join(ROOT, "bench/execute-memory-worker.mjs"), process.env.BUNDLE ?? "execute-memory");
for (const f of ["spin.wasm", "spin-import.wasm"]) copyFileSync(path.join(ROOT, "bench", f), path.join(path.dirname(script), f));
const kids = () => execFileSync("ps", ["--ppid", String(process.pid), "-o", "pid="]).toString().split(/\s+/).filter(Boolean).map(Number);
const mf = new Miniflare({
  modules: true, scriptPath: script, modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
  compatibilityDate: COMPATIBILITY_DATE, workerLoaders: { LOADER: {} },
  durableObjects: { EXP: { className: "Exp", useSQLite: true, unsafePreventEviction: true } },
});
await mf.ready;
const pid = kids().find((p) => readFileSync(`/proc/${p}/comm`, "utf8").trim() === "workerd");
const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]);
// DETACH=1 (with ctx dofetch): each batch runs on after its request's
// answer, polled for its end.
let started = 0;
const detached = async (n) => {
  await mf.dispatchFetch(`http://x/?ctx=dofetch&detach=1&variant=${variant}&n=${n}&work=${WORK}&peer=${encodeURIComponent(peer)}`).then((r) => r.text());
  started++;
  for (;;) {
    const ended = Number(await (await mf.dispatchFetch(`http://x/?ctx=dofetch&count=1`)).text());
    if (ended >= started) return "ended";
    await new Promise((r) => setTimeout(r, 2));
  }
};
const go1 = async (n) => {
  if (process.env.DETACH === "1") return detached(n);
  const r = await mf.dispatchFetch(`http://x/?variant=${variant}&ctx=${ctx}&n=${n}&work=${WORK}&peer=${encodeURIComponent(peer)}${process.env.ALARM === "1" ? "&alarm=1" : ""}`); const t = await r.text(); if (r.status !== 200) throw new Error(t); return t; };
// HOLD=1 (with ctx dofetch): a long poll stays open during each run.
const hold = () => (process.env.HOLD === "1" ? mf.dispatchFetch(`http://x/?ctx=dofetch&hold=1`).then((r) => r.text()) : Promise.resolve());
const go = async (n) => {
  if (!PER_CALL) return go1(n);
  let t;
  for (let i = 0; i < n; i++) {
    const held = hold();
    await new Promise((r) => setTimeout(r, 2));
    t = await go1(1);
    await held;
  }
  return t;
};
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
console.log(JSON.stringify({ variant, ctx, work: WORK, perCall: PER_CALL, n: Number(N), out: out.slice(0, 300), startKiB: r0, afterWarmKiB: r1, endKiB: r2, perCallKiB: +((r2 - r1) / Number(N)).toFixed(1), slopeKiB: +slope.toFixed(1), msPerCall: +(ms / Number(N)).toFixed(1), samples: process.env.SAMPLES ? samples : undefined }));
await mf.dispose();
