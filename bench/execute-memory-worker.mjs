// The Worker bench/execute-memory.mjs measures: n sandbox runs per request
// (?variant=&n=&ctx=do|plain), in a Durable Object or a stateless fetch.
import { DurableObject, RpcTarget, WorkerEntrypoint } from "cloudflare:workers";
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

async function batch(L, variant, n, ctx) {
  const f = variants[variant];
  let last;
  for (let i = 0; i < n; i++) last = await f(L, ctx);
  return String(last);
}

export class Exp extends DurableObject {
  async run(variant, n) {
    return batch(this.env.LOADER, variant, n, this.ctx);
  }
}

export default {
  async fetch(request, env, ctx) {
    const u = new URL(request.url);
    const variant = u.searchParams.get("variant");
    const n = Number(u.searchParams.get("n") ?? 50);
    if (u.searchParams.get("ctx") === "do") {
      const stub = env.EXP.get(env.EXP.idFromName("x"));
      return new Response(await stub.run(variant, n));
    }
    return new Response(await batch(env.LOADER, variant, n, ctx));
  },
};
