// shiitake/ui/browser alone, in Node (no Worker): it bundles for a browser
// through the package name (no wasm, no Node or Workers import), its
// declarations type-check a consumer, and connectBrowser over a scripted
// transport claims before it runs, leaves a request another browser claimed,
// reconnects a failed stream after a bounded backoff and stops on 410.
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import ts from "typescript";
import { connectBrowser } from "../../js/ui-browser.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

test("shiitake/ui/browser bundles for a browser alone", async () => {
  const result = await build({
    stdin: { contents: 'export * from "shiitake/ui/browser";', resolveDir: ROOT, loader: "js" },
    absWorkingDir: ROOT,
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    minify: true,
    logLevel: "silent",
  });
  const code = result.outputFiles[0].text;
  console.log(`shiitake/ui/browser browser bundle: ${code.length} bytes (minified)`);
  for (const word of ["wasm", "WebAssembly", "cloudflare:", "node:"]) assert.ok(!code.includes(word), `bundle mentions ${word}`);
  assert.ok(code.length < 16 * 1024, `${code.length} bytes`);
});

test("the declarations type-check a consumer through the package name", () => {
  const file = path.join(ROOT, "tests/e2e/ui-browser-consumer.ts");
  const text = `
import { connectBrowser, type Whistle } from "shiitake/ui/browser";
const whistle: Whistle = {
  commands: () => [{ name: "addCell", description: "Adds a cell", inputSchema: { type: "object" } }],
  execute: async (name, input, { signal }) => ({ name, input, aborted: signal.aborted }),
};
const bridge = connectBrowser({ baseUrl: "/agents/a/browser/sessions/s/browser", whistle, onError: (e) => console.log(e) });
export const why: Promise<string> = bridge.closed;
bridge.close();
// @ts-expect-error a whistle runs commands
connectBrowser({ baseUrl: "/x", whistle: { commands: () => [] } });
`;
  const options = {
    noEmit: true,
    strict: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ["lib.es2022.d.ts", "lib.dom.d.ts"],
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
  assert.ok(resolved.includes("js/ui-browser.d.ts"), resolved.join(", "));
});

const sse = (...events) =>
  new Response(events.map(([name, data]) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`).join(""), {
    headers: { "content-type": "text/event-stream" },
  });

test("connectBrowser claims before running, leaves what another browser claimed, backs off, and stops on 410", async () => {
  const seen = [];
  const ran = [];
  let streams = 0;
  const transport = async (url, init = {}) => {
    const route = String(url).split("/").at(-1);
    const body = init.body === undefined ? undefined : JSON.parse(init.body);
    seen.push({ route, body, at: Date.now() });
    if (route === "events") {
      streams++;
      if (streams === 1) return new Response("busy", { status: 503 });
      if (streams === 2) return sse(["request", { requestId: "r1", operation: "execute", name: "addCell", input: { text: "hi" } }], ["request", { requestId: "r2", operation: "discover" }]);
      return Response.json({ error: { code: "ui_closed", message: "the browser bridge is closed: bye" } }, { status: 410 });
    }
    if (route === "claims") {
      if (body.requestId === "r2") return Response.json({ error: { code: "ui_claimed" } }, { status: 409 });
      return Response.json({ requestId: body.requestId, claimId: `c-${body.requestId}` });
    }
    return Response.json({ requestId: body.requestId, accepted: true });
  };
  const errors = [];
  const bridge = connectBrowser({
    baseUrl: "http://host/agents/a/browser/sessions/s/browser/",
    whistle: {
      commands: () => [{ name: "addCell" }],
      execute: async (name, input) => {
        ran.push(name);
        return { added: input.text };
      },
    },
    fetch: transport,
    onError: (e) => errors.push(String(e)),
  });
  const why = await bridge.closed;
  assert.match(why, /^HTTP 410: .*ui_closed/);
  assert.deepEqual(ran, ["addCell"], "r2 was claimed by another browser: not run");
  const posts = seen.filter((s) => s.route !== "events").map((s) => [s.route, s.body]);
  assert.deepEqual(posts, [
    ["claims", { requestId: "r1" }],
    ["claims", { requestId: "r2" }],
    ["results", { requestId: "r1", claimId: "c-r1", result: { added: "hi" } }],
  ]);
  const opens = seen.filter((s) => s.route === "events").map((s) => s.at);
  assert.equal(opens.length, 3);
  assert.ok(opens[1] - opens[0] >= 450, `the first retry waited ${opens[1] - opens[0]} ms`);
  assert.deepEqual(errors, ["Error: events: HTTP 503"]);
});
