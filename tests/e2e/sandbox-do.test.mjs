// `tools().sandbox: "embedded"` end to end: a Worker WITHOUT the LOADER
// binding offers `execute`, and the scripted model's code runs in the
// embedded sandbox (js/sandbox/embedded.mjs) against the host's operations,
// under the same grants; a runaway guest is a tool error and the Agent keeps
// serving. Fixture: tests/e2e/fixtures/embedded-tools-worker.mjs
// (tools-worker.mjs plus the option). Also on the Node host (js/node.mjs).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { openNodeShiitake } from "../../js/node.mjs";
import { checkTools } from "../../js/do/config.mjs";
import { startModelServer } from "../support/model-server.mjs";
import { ROOT, bundleFixture, execute, startWorker, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({ fixture: "embedded-tools-worker", model: "echo", loader: false });
const T = { timeout: 30_000 };

async function turn(name, ...script) {
  const tag = uniq(name);
  h.model.scriptFor(tag, ...script);
  const { a, sid } = await h.session();
  const settled = await a.settle(sid, "r1", `use the tools ${tag}`, { boundMs: 20_000 });
  const tools = (await a.read(sid, { limit: 200 })).messages.filter((m) => m.role === "tool");
  return { sid, settled, tools, requests: h.model.requests(tag) };
}

test("without LOADER, execute is offered and runs in the embedded sandbox", T, async () => {
  const t = await turn(
    "embedded",
    execute("const r = await notes.add_note({ text: 'first' }); return { r, listed: await env.notes.list_notes(), found: (await forage.search('note')).length > 0 };"),
    { text: "done" },
  );
  assert.equal(t.settled.terminal, "completed", JSON.stringify(t.settled));
  assert.deepEqual(
    t.requests[0].body.tools.map((x) => x.function.name),
    ["execute", "apply_patch"],
  );
  assert.ok(!t.tools[0].isError, t.tools[0].text);
  assert.deepEqual(JSON.parse(t.tools[0].text), { r: { count: 1, sessionId: t.sid }, listed: ["first"], found: true });
  assert.deepEqual(t.tools[0].data.calls.slice(0, 2), [
    { path: "notes.add_note", ok: true },
    { path: "notes.list_notes", ok: true },
  ]);
});

test("a runaway guest is a tool error; a required grant is still refused; the Agent serves the next turn", T, async () => {
  const started = Date.now();
  const loop = await turn("loop", execute("for (;;) {}"), { text: "stopped" });
  // The 5 s CPU budget; workerd's clock stands still while code runs, so
  // there it is the interrupt count that ends the loop: within 2x.
  assert.ok(Date.now() - started < 10_000, `took ${Date.now() - started} ms`);
  assert.equal(loop.settled.terminal, "completed");
  assert.equal(loop.tools[0].isError, true);
  assert.match(loop.tools[0].text, /ran out of CPU time/);
  const vault = await turn("vault", execute("return await vault.open({});"), { text: "no" });
  assert.equal(vault.tools[0].isError, true);
  assert.doesNotMatch(vault.tools[0].text, /ran out of CPU|sandbox failed/);
  const next = await turn("next", execute("return 6 * 7"), { text: "ok" });
  assert.equal(next.tools[0].text, "42");
});

test("\"embedded\" without the engine imported is a misconfigured host, named", T, async () => {
  const script = await bundleFixture(path.join(ROOT, "tests/e2e/fixtures/embedded-no-engine-worker.mjs"), "embedded-no-engine-worker");
  const other = await startWorker({ scriptPath: script, model: "echo", loader: false });
  try {
    const tag = uniq("no-engine");
    other.model.scriptFor(tag, execute("return 1"), { text: "never" });
    const { a, sid } = await other.session();
    const settled = await a.settle(sid, "r1", `go ${tag}`, { boundMs: 20_000 });
    assert.equal(settled.terminal, "failed");
    assert.match(settled.diagnostic, /needs the engine: import "shiitake\/sandbox-engine"/);
  } finally {
    await other.dispose();
  }
});

test("tools().sandbox takes \"loader\" or \"embedded\"", () => {
  assert.equal(checkTools({ sandbox: "embedded" }), undefined);
  assert.equal(checkTools({ sandbox: "loader" }), undefined);
  assert.equal(checkTools({ sandbox: "quickjs" }), 'tools().sandbox must be "loader" or "embedded"');
});

test("the Node host runs execute in the embedded sandbox, by default", T, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "shiitake-sandbox-"));
  const model = await startModelServer({ fallback: "echo" });
  let host;
  try {
    host = await openNodeShiitake({
      path: path.join(dir, "agent.db"),
      env: { SHIITAKE_MODEL: "openai/scripted-node", OPENAI_BASE_URL: model.url, OPENAI_API_KEY: "sk-node-test" },
      // No `sandbox`: on Node the default is the embedded one.
      tools: () => ({
        access: { grants: { calc: "read" } },
        modules: [
          {
            id: "calc",
            operations: [
              {
                name: "add",
                description: "Adds two numbers.",
                inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } } },
                access: "read",
                run: ({ a, b }) => ({ sum: a + b }),
              },
            ],
          },
        ],
      }),
    });
    const tag = uniq("node");
    model.scriptFor(tag, execute("const r = await calc.add({ a: 2, b: 3 }); return r.sum * 10;"), { text: "fifty" });
    const api = (method, rel, body) =>
      host.app.fetch(new Request(`http://node.test${rel}`, { method, headers: { "content-type": "application/json" }, body: body && JSON.stringify(body) }));
    assert.equal((await api("POST", "/sessions", { sessionId: "s" })).status, 201);
    const admitted = await (await api("POST", "/sessions/s/commands", { type: "prompt", requestId: "r1", text: `go ${tag}` })).json();
    let settled = null;
    for (let i = 0; i < 40 && settled === null; i++) {
      settled = await (await api("GET", `/sessions/s/settlement?commandId=${admitted.commandId}&timeoutMs=1000`)).json();
    }
    assert.equal(settled?.terminal, "completed", JSON.stringify(settled));
    const tools = model.requests(tag)[1].body.messages.filter((m) => m.role === "tool");
    assert.deepEqual(tools.map((m) => m.content), ["50"]);
  } finally {
    await host?.close();
    await model.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

