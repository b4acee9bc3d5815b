// The two `execute` sandboxes, without the Rust core, one suite for both:
// `loader`, js/execute.mjs in Miniflare's Worker Loader
// (tests/e2e/fixtures/loader-worker.mjs runs `runGuest` and answers the reply
// with the dispatch calls it saw), and `embedded`, js/sandbox/embedded.mjs in
// this process; both against the fake catalog of fixtures/guest-catalog.mjs.
// The abuse battery of the embedded one is tests/e2e/sandbox-embedded.test.mjs.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test as testCase } from "node:test";
import { pathToFileURL } from "node:url";
import { Miniflare } from "miniflare";
import { nodeSandbox } from "../../js/sandbox/node.mjs";
import { catalogDispatch } from "./fixtures/guest-catalog.mjs";
import { COMPATIBILITY_DATE, ROOT } from "./helpers.mjs";

let mf;
let dir;

before(async () => {
  const { bundleWorker } = await import(pathToFileURL(path.join(ROOT, "scripts/bundle.mjs")).href);
  dir = await mkdtemp(path.join(tmpdir(), "shiitake-execute-"));
  // bundleWorker copies the core's wasm next to the bundle; this fixture does
  // not import the core, so an empty wasm module stands in for an unbuilt one.
  const wasmPath = path.join(dir, "empty.wasm");
  await writeFile(wasmPath, Uint8Array.of(0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00));
  const { scriptPath } = await bundleWorker(path.join(ROOT, "tests/e2e/fixtures/loader-worker.mjs"), path.join(dir, "out"), { wasmPath });
  // modulesRoot: module names are paths below it, and the bundle is outside the cwd.
  mf = new Miniflare({
    modules: true,
    modulesRoot: path.dirname(scriptPath),
    scriptPath,
    compatibilityDate: COMPATIBILITY_DATE,
    workerLoaders: { LOADER: {} },
  });
  await mf.ready;
});

after(async () => {
  try {
    await mf?.dispose();
  } finally {
    if (dir) await rm(dir, { recursive: true, force: true });
  }
});

const embedded = nodeSandbox();

/** Runs `code` in the Worker Loader: `{reply, calls, ms}`. */
async function runLoader(code, extra = {}) {
  const res = await mf.dispatchFetch("http://localhost/", { method: "POST", body: JSON.stringify({ code, ...extra }) });
  assert.equal(res.status, 200);
  return res.json();
}

/** Runs `code` in the embedded sandbox, as the loader fixture does: `{reply, calls, ms}`. */
async function runEmbedded(code, { namespaces = ["notes", "mcp"], abortOnSlowMs, abortAfterMs } = {}) {
  const calls = [];
  const controller = new AbortController();
  const dispatch = catalogDispatch(calls, () => {
    if (abortOnSlowMs !== undefined) setTimeout(() => controller.abort("test abort"), abortOnSlowMs);
  });
  const started = Date.now();
  const timer = abortAfterMs === undefined ? undefined : setTimeout(() => controller.abort("test abort"), abortAfterMs);
  try {
    const text = await embedded.run({ code, namespaces, dispatch, signal: controller.signal });
    return { reply: JSON.parse(text), calls, ms: Date.now() - started };
  } finally {
    clearTimeout(timer);
  }
}

for (const [backend, run] of [
  ["loader", runLoader],
  ["embedded", runEmbedded],
]) {
  const test = (name, fn) => testCase(`${backend}: ${name}`, fn);

  async function result(code, extra) {
    const out = await run(code, extra);
    assert.ok(Object.hasOwn(out.reply, "result"), `expected a result, got ${JSON.stringify(out.reply)}`);
    assert.deepEqual(Object.keys(out.reply), ["result"]);
    return out.reply.result;
  }

  async function error(code, extra) {
    const out = await run(code, extra);
    assert.deepEqual(Object.keys(out.reply), ["error"], `expected an error, got ${JSON.stringify(out.reply).slice(0, 300)}`);
    assert.equal(typeof out.reply.error, "string");
    return out.reply.error;
  }

  test("a call through a namespace returns the dispatch's result", async () => {
    const out = await run("await mcp.notes.create_note({ title: 'x' })");
    assert.deepEqual(out.reply, { result: { created: "x" } });
    assert.deepEqual(out.calls, [["mcp.notes.create_note", '{"title":"x"}']]);
    assert.deepEqual(await result("const r = await notes.add({ a: 1, b: 2 }); return r.sum"), 3);
  });

  test("env holds the same namespaces; forage.search and forage.describe reach the host", async () => {
    assert.deepEqual(await result("(await env.notes.add({ a: 2, b: 5 })).sum"), 7);
    const out = await run("[await forage.search('notes about x'), await forage.describe('notes.add')]");
    assert.deepEqual(out.reply, { result: [{ query: "notes about x" }, { path: "notes.add" }] });
    assert.deepEqual(out.calls, [
      ["forage.search", '{"query":"notes about x"}'],
      ["forage.describe", '{"path":"notes.add"}'],
    ]);
    // No argument sends {}.
    assert.deepEqual((await run("await notes.add()")).calls, [["notes.add", "{}"]]);
  });

  test("a thrown guest error, a dispatch {error} and a throwing dispatch surface as {error}", async () => {
    assert.equal(await error("throw new Error('boom')"), "boom");
    assert.equal(await error("throw 42"), "42");
    assert.equal(await error("await notes.refuse()"), "notes.refuse: refused");
    assert.equal(await error("await notes.explode()"), "dispatch exploded");
    assert.equal(await error("await notes.nope({})"), "unknown tool notes.nope");
    // The guest sees a dispatch error as an Error it can catch.
    assert.equal(await result("try { await notes.refuse() } catch (e) { return e instanceof Error && e.message }"), "notes.refuse: refused");
  });

  test("the guest has the door's UTF-8 codecs and base64, as the web standards define them", async () => {
    // Expected values from this process's own (WHATWG) implementations.
    const text = "aé€😀\ud800z";
    const bad = [0xef, 0xbb, 0xbf, 0x61, 0xc3, 0x28, 0xe2, 0x82, 0xf0, 0x9f, 0x98, 0x80, 0xed, 0xa0, 0x80, 0xff, 0xf4, 0x90, 0x80, 0x80, 0xe2];
    const code = `
      const name = (f) => { try { f(); return "no error"; } catch (e) { return e.name; } };
      return {
        encoded: Array.from(new TextEncoder().encode(${JSON.stringify(text)})),
        decoded: new TextDecoder().decode(new Uint8Array(${JSON.stringify(bad)})),
        round: new TextDecoder("utf-8").decode(new TextEncoder().encode("ünïcödé 𝄞")),
        view: new TextDecoder().decode(new DataView(new Uint8Array([0, 0x68, 0x69, 0]).buffer, 1, 2)),
        b64: [btoa(""), btoa("h"), btoa("he"), btoa("hel"), btoa("hello\\xff")],
        unb64: [atob(" aGVs\\nbG8= "), atob("aGk"), atob("")],
        refused: [name(() => btoa("€")), name(() => atob("a")), name(() => atob("ab=c"))],
      };`;
    assert.deepEqual(await result(code), {
      encoded: Array.from(new TextEncoder().encode(text)),
      decoded: new TextDecoder().decode(Uint8Array.from(bad)),
      round: "ünïcödé 𝄞",
      view: "hi",
      b64: [btoa(""), btoa("h"), btoa("he"), btoa("hel"), btoa("hello\xff")],
      unb64: [atob(" aGVs\nbG8= "), atob("aGk"), atob("")],
      refused: ["InvalidCharacterError", "InvalidCharacterError", "InvalidCharacterError"],
    });
  });

  test("fetch() and connect() in the guest fail: no network", async () => {
    // The loader's guest has them, refused; the embedded one has neither.
    const refused = backend === "loader" ? /not permitted to access the internet/ : /'fetch' is not defined/;
    assert.match(await error("const r = await fetch('http://example.com'); return r.status"), refused);
    const sockets = await error("const { connect } = await import('cloudflare:sockets'); const s = connect('example.com:80'); await s.opened; return 'open'");
    assert.match(sockets, backend === "loader" ? /not permitted to access the internet/ : /could not load module 'cloudflare:sockets'/);
  });

  test("a markdown fence is stripped and the last expression is returned", async () => {
    assert.equal(await result("```js\nconst r = await notes.add({ a: 2, b: 3 });\nr.sum * 2\n```"), 10);
    assert.equal(await result("```javascript\n1 + 1;\n```\n"), 2);
    assert.equal(await result("```\n'bare'\n```"), "bare");
    // The code is spliced into the guest module as text: backticks and ${} stay the code's own.
    assert.equal(await result("const n = 2;\n`${n}` + '`' + '${x}'"), "2`${x}");
    const norm = await (await mf.dispatchFetch("http://localhost/normalize", { method: "POST", body: JSON.stringify({ code: "const a = 1\na + 1 // sum" }) })).json();
    assert.deepEqual(norm, { body: "const a = 1\nreturn (a + 1); // sum" });
    // No trailing expression: unchanged, so the result is null.
    assert.equal(await result("const a = 1;"), null);
    assert.equal(await result(""), null);
  });

  test("an async arrow function (or function expression) as the whole code is called", async () => {
    assert.equal(await result("async () => { const r = await notes.add({ a: 1, b: 1 }); return r.sum; }"), 2);
    assert.equal(await result("(function () { return 'plain'; })"), "plain");
    assert.equal(await result("() => 5"), 5);
  });

  test("a syntax error answers SyntaxError without running anything", async () => {
    const out = await run("await notes.add({ a: 1, b: 2 });\nlet = ;");
    assert.match(out.reply.error, /^SyntaxError: /);
    assert.deepEqual(out.calls, []);
    assert.match(await error("with (notes) { 1 }"), /^SyntaxError: .*strict/);
    assert.match(await error("import x from 'y'; x"), /^SyntaxError: /);
  });

  test("a result that does not serialise is an error; undefined is null", async () => {
    assert.match(await error("10n"), /BigInt/);
    assert.match(await error("const a = {}; a.self = a; return a"), /circular/i);
    assert.equal(await result("undefined"), null);
    assert.equal(await result("() => {}"), null);
  });

  test("a result over 262144 bytes is refused, one at the limit passes", async () => {
    // A string of n chars is n + 2 JSON bytes.
    assert.equal(await error("'x'.repeat(300000)"), "the result is 300002 bytes; at most 262144");
    assert.equal((await result("'x'.repeat(262142)")).length, 262142);
    // Bytes, not characters: é is two UTF-8 bytes.
    assert.equal((await result("'é'.repeat(131071)")).length, 131071);
    assert.equal(await error("'é'.repeat(131072)"), "the result is 262146 bytes; at most 262144");
    // A surrogate pair is four bytes, a three-byte character three.
    assert.equal((await result("'😀'.repeat(65535)")).length, 131070);
    assert.equal(await error("'😀'.repeat(65536)"), "the result is 262146 bytes; at most 262144");
    assert.equal(await error("'€'.repeat(87382)"), "the result is 262148 bytes; at most 262144");
  });

  test("the host re-checks what the guest sends back", async () => {
    // The guest's own size check defeated: the host still refuses the reply.
    const big = await error("globalThis.TextEncoder = class { encode() { return { length: 0 }; } }; return 'x'.repeat(300000)");
    assert.match(big, /^the result is \d+ bytes; at most 262144$/);
    // The guest's reply made malformed.
    assert.equal(await error("JSON.stringify = () => '}'; return 1"), "the sandbox gave a malformed reply");
  });

  test("aborting the signal while the guest awaits a call resolves promptly", async () => {
    const out = await run("await notes.slow(); return 'never'", { abortOnSlowMs: 50 });
    assert.deepEqual(out.reply, { error: "aborted: test abort" });
    assert.deepEqual(out.calls, [["notes.slow", "{}"]]);
    assert.ok(out.ms < 2000, `took ${out.ms} ms`);
  });

  test("aborting the signal while the guest sleeps resolves promptly", async () => {
    const out = await run("await new Promise((r) => setTimeout(r, 30000)); return 'never'", { abortAfterMs: 50 });
    assert.deepEqual(out.reply, { error: "aborted: test abort" });
    assert.ok(out.ms < 2000, `took ${out.ms} ms`);
  });

  test("a guest that can never settle is an error, not a hang", async () => {
    // workerd cancels a call whose promise nothing can resolve.
    assert.match(await error("await new Promise(() => {})"), /hung/);
  });

  test("the guest has no bindings: env lists only the namespaces", async () => {
    assert.deepEqual(await result("Object.keys(env)"), ["notes", "mcp"]);
    assert.deepEqual(await result("Object.keys(env)", { namespaces: [] }), []);
    assert.deepEqual(await result("['LOADER', 'SHIITAKE', 'env'].filter((k) => k in globalThis)"), []);
    // A namespace is not a thenable: awaiting it gives it back.
    assert.deepEqual(await result("[notes.then, typeof (await notes), typeof notes.a.b.c]"), [null, "function", "function"]);
  });

  test("each run gets a fresh worker", async () => {
    const code = "globalThis.runs = (globalThis.runs ?? 0) + 1; return globalThis.runs";
    assert.equal(await result(code), 1);
    assert.equal(await result(code), 1);
  });

  test("namespaces named like the harness's helpers work; the code may shadow a namespace", async () => {
    const namespaces = ["scope", "call", "settle", "namespace", "host"];
    assert.deepEqual(await result("Object.keys(env)", { namespaces }), namespaces);
    assert.equal(await error("await call.me()", { namespaces }), "unknown tool call.me");
    assert.deepEqual(await result("await forage.search('q')", { namespaces }), { query: "q" });
    assert.equal(await result("const notes = 3; notes * 2"), 6);
  });

  test("namespaces that are not plain identifiers, or shadow globals, are refused", async () => {
    for (const name of ["JSON", "fetch", "env", "forage", "a-b", "let", "yield", "x;y", ""]) {
      assert.match(await error("1", { namespaces: [name] }), /cannot bind the namespace/, name);
    }
    assert.match(await error("1", { namespaces: ["notes", "notes"] }), /twice/);
  });
}
