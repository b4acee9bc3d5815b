// The Worker bench/execute-memory.mjs measures: n sandbox runs per request
// (?variant=&n=&ctx=do|plain), in a Durable Object or a stateless fetch.
import { DurableObject, RpcTarget, WorkerEntrypoint } from "cloudflare:workers";
import spin from "./spin.wasm";
import spinImport from "./spin-import.wasm";
import shiitakeWasm from "./shiitake_bg.wasm";
import { runGuest } from "../js/execute.mjs";
export { ShiitakeSandbox } from "../js/execute.mjs";

const DATE = "2026-07-30";
const code = (body) => ({ compatibilityDate: DATE, mainModule: "g.js", modules: { "g.js": body }, globalOutbound: null, env: {} });
const PLAIN = code(`import { WorkerEntrypoint } from "cloudflare:workers";
export default class extends WorkerEntrypoint { evaluate(h) { return "x"; } }`);
const CALLS = code(`import { WorkerEntrypoint } from "cloudflare:workers";
export default class extends WorkerEntrypoint { async evaluate(h) { return await h.call("a", "{}"); } }`);
const CALLS_DISPOSE = code(`import { WorkerEntrypoint } from "cloudflare:workers";
export default class extends WorkerEntrypoint { async evaluate(h) { try { return await h.call("a", "{}"); } finally { h[Symbol.dispose]?.(); } } }`);

class Host extends RpcTarget {
  call(p, a) { return '{"result":1}'; }
}
const dispatch = async () => '{"result":1}';

const variants = {
  bare: async (L) => L.load(PLAIN).getEntrypoint().evaluate(),
  target: async (L) => L.load(PLAIN).getEntrypoint().evaluate(new RpcTarget()),
  hostcall: async (L) => L.load(CALLS).getEntrypoint().evaluate(new Host()),
  hostcallDispose: async (L) => L.load(CALLS_DISPOSE).getEntrypoint().evaluate(new Host()),
  // result disposal: the promise result of evaluate is disposable
  hostcallResultDispose: async (L) => { const r = L.load(CALLS).getEntrypoint().evaluate(new Host()); const v = await r; r[Symbol.dispose]?.(); return v; },
  bareDispose: async (L) => { const p = L.load(PLAIN).getEntrypoint().evaluate(); try { return await p; } finally { p[Symbol.dispose](); } },
  runGuest: (L) => runGuest(L, { code: "return 6 * 7", namespaces: [], dispatch }),
  runGuestSignal: (L) => runGuest(L, { code: "return 6 * 7", namespaces: [], dispatch, signal: new AbortController().signal }),
  runGuestCall: (L) => runGuest(L, { code: "return await notes.add({})", namespaces: ["notes"], dispatch }),
  runGuestCallSignal: (L) => runGuest(L, { code: "return await notes.add({})", namespaces: ["notes"], dispatch, signal: new AbortController().signal }),
};

export class Sandbox extends WorkerEntrypoint {
  evaluate(workerCode, host) {
    return this.env.LOADER.load(workerCode).getEntrypoint().evaluate(host);
  }
  runGuest(opts, dispatchStub) {
    return runGuest(this.env.LOADER, { ...opts, dispatch: (p, a) => dispatchStub(p, a) });
  }
}
variants.exportsBare = (L, ctx) => ctx.exports.Sandbox.evaluate(PLAIN);
variants.exportsHostcall = (L, ctx) => ctx.exports.Sandbox.evaluate(CALLS, new Host());
variants.exportsRunGuestCall = (L, ctx) => ctx.exports.Sandbox.runGuest({ code: "return await notes.add({})", namespaces: ["notes"] }, dispatch);
variants.sandboxRunGuest = (L, ctx) => runGuest(L, { code: "return 6 * 7", namespaces: [], dispatch, sandbox: ctx.exports.ShiitakeSandbox });
variants.sandboxRunGuestCall = (L, ctx) => runGuest(L, { code: "return await notes.add({})", namespaces: ["notes"], dispatch, sandbox: ctx.exports.ShiitakeSandbox });
variants.sandboxRunGuestCallSignal = (L, ctx) => runGuest(L, { code: "return await notes.add({})", namespaces: ["notes"], dispatch, signal: new AbortController().signal, sandbox: ctx.exports.ShiitakeSandbox });

// What the object does before each run (?work=): nothing, a SQL write and
// read, a fetch of ?peer= (a loopback server), or a timer.
const works = {
  none: async () => {},
  sql: async (ctx) => {
    const sql = ctx.storage.sql;
    sql.exec("CREATE TABLE IF NOT EXISTS t(v INTEGER)");
    sql.exec("INSERT INTO t(v) VALUES (?)", Date.now());
    return sql.exec("SELECT count(*) AS n FROM t").one().n;
  },
  fetch: async (ctx, peer) => (await fetch(peer)).text(),
  timer: () => new Promise((resolve) => setTimeout(resolve, 1)),
  // bench/spin.wasm: a summing loop (no memory), run hot enough to tier up.
  // bench/spin-import.wasm: a loop calling a JS import that runs SQL.
  wasmsql: async (ctx) => {
    const sql = ctx.storage.sql;
    sql.exec("CREATE TABLE IF NOT EXISTS t(v INTEGER)");
    const f = (i) => (i % 10 === 0 ? (sql.exec("INSERT INTO t(v) VALUES (?)", i), 1) : [...sql.exec("SELECT v FROM t ORDER BY rowid DESC LIMIT 3")].length);
    return new WebAssembly.Instance(spinImport, { e: { f } }).exports.run(100);
  },
  // The runtime's own wasm module, instantiated once with inert imports
  // and never called: does a large module in the isolate matter?
  bigwasm: async () => {
    if (!globalThis.bigInstance) {
      const imports = {};
      for (const { module, name, kind } of WebAssembly.Module.imports(shiitakeWasm)) {
        imports[module] ??= {};
        if (kind === "function") imports[module][name] = () => 0;
      }
      globalThis.bigInstance = new WebAssembly.Instance(shiitakeWasm, imports);
    }
  },
  wasm: async () => {
    const { run } = new WebAssembly.Instance(spin).exports;
    let s = 0;
    for (let i = 0; i < 20; i++) s += run(50_000);
    return s;
  },
};

async function batch(L, variant, n, ctx, work = "none", peer) {
  const f = variants[variant];
  const w = works[work];
  let last;
  for (let i = 0; i < n; i++) {
    await w(ctx, peer);
    last = await f(L, ctx);
  }
  return String(last);
}

export class Exp extends DurableObject {
  async alarm() {
    const { u, resolve } = this.alarmRun;
    resolve(await batch(this.env.LOADER, u.searchParams.get("variant"), Number(u.searchParams.get("n")), this.ctx, u.searchParams.get("work") ?? "none", u.searchParams.get("peer") ?? undefined));
  }
  async run(variant, n, work, peer) {
    return batch(this.env.LOADER, variant, n, this.ctx, work, peer);
  }
  async fetch(request) {
    const u = new URL(request.url);
    // ?hold=1: a request left open until the next run ends (a long poll).
    if (u.searchParams.get("hold")) {
      await new Promise((resolve) => (this.release = resolve));
      return new Response("released");
    }
    // ?detach=1: the runs go on after the answer (as a turn does after its
    // prompt's receipt); ?count=1 says how many batches have ended.
    if (u.searchParams.get("count")) return new Response(String(this.ended ?? 0));
    if (u.searchParams.get("detach")) {
      void batch(this.env.LOADER, u.searchParams.get("variant"), Number(u.searchParams.get("n")), this.ctx, u.searchParams.get("work") ?? "none", u.searchParams.get("peer") ?? undefined).then(() => {
        this.ended = (this.ended ?? 0) + 1;
      });
      return new Response("started");
    }
    // ?alarm=1: the runs happen in the alarm handler (where turns run).
    if (u.searchParams.get("alarm")) {
      const done = new Promise((resolve) => (this.alarmRun = { u, resolve }));
      await this.ctx.storage.setAlarm(Date.now());
      return new Response(await done);
    }
    const out = await batch(this.env.LOADER, u.searchParams.get("variant"), Number(u.searchParams.get("n")), this.ctx, u.searchParams.get("work") ?? "none", u.searchParams.get("peer") ?? undefined);
    this.release?.();
    this.release = undefined;
    return new Response(out);
  }
}

export default {
  async fetch(request, env, ctx) {
    const u = new URL(request.url);
    const variant = u.searchParams.get("variant");
    const n = Number(u.searchParams.get("n") ?? 50);
    const work = u.searchParams.get("work") ?? "none";
    const peer = u.searchParams.get("peer") ?? undefined;
    if (u.searchParams.get("ctx") === "dofetch") return env.EXP.get(env.EXP.idFromName("x")).fetch(request);
    if (u.searchParams.get("ctx") === "do") {
      const stub = env.EXP.get(env.EXP.idFromName("x"));
      return new Response(await stub.run(variant, n, work, peer));
    }
    return new Response(await batch(env.LOADER, variant, n, ctx));
  },
};
