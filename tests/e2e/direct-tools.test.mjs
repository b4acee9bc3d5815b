// Every module reachable without `execute` (issue 37): on a Worker without
// a LOADER binding, the host asks for the browser bridge, a Computer, an
// extension's commands and the fleet's `agents` as direct tools
// (`ui: { direct: true }`, a Computer's `direct: true`, the roster entry's
// `direct: true`, `fleet().direct`); the model sees them named by their
// module (`ui_discover`, `computers_laptop_run_command`, `goal_end`,
// `agents_send`) and calls each over the real wire format, getting the real
// result: the browser's App answers, the Computer runs, the extension's
// command commits in its transaction, the peer Agent admits the send. A
// configuration whose direct tools one model request cannot carry is
// refused naming the tool. Fixture: tests/e2e/fixtures/direct-worker.mjs.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { checkFleet, checkTools } from "../../js/do/config.mjs";
import { connectBrowser } from "../../js/ui-browser.mjs";
import { TOKEN, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({ fixture: "direct-worker", model: "echo", loader: false });
const T = { timeout: 60_000 };

const bridge = (a, sid) => `http://localhost/agents/${a.id}/browser/sessions/${sid}/browser`;
const hostFetch = (url, init = {}) => h.mf.dispatchFetch(url, { ...init, headers: { ...init.headers, authorization: `Bearer ${TOKEN}` } });

const notebook = (log) => ({
  commands: () => [{ name: "greet", description: "Greets someone", inputSchema: { type: "object", properties: { who: { type: "string" } } } }],
  async execute(name, input) {
    log.push({ name, input });
    return { greeted: input.who };
  },
});

test("without LOADER the model calls ui, a Computer, an extension's command and agents as direct tools and gets their results", T, async () => {
  const { a, sid } = await h.session();
  const set = await a.api("POST", `/sessions/${sid}/extensions/goal/commands/set`, { requestId: "g1", input: { text: "tidy up" } });
  assert.equal(set.status, 200, set.text);
  const log = [];
  const browser = connectBrowser({ baseUrl: bridge(a, sid), whistle: notebook(log), fetch: hostFetch });
  const peer = `peer-${randomUUID()}`;
  const tag = uniq("direct");
  h.model.scriptFor(
    tag,
    { toolCalls: [{ name: "ui_discover", arguments: {} }] },
    { toolCalls: [{ name: "ui_execute", arguments: { name: "greet", input: { who: "Ada" } } }] },
    { toolCalls: [{ name: "computers_laptop_run_command", arguments: { command: "ls" } }] },
    { toolCalls: [{ name: "goal_end", arguments: { status: "achieved" } }] },
    { toolCalls: [{ name: "agents_send", arguments: { agentId: peer, requestId: "send-1", text: "hello peer" } }] },
    { text: "done" },
  );
  let settled;
  try {
    settled = await a.settle(sid, `r-${tag}`, `direct ${tag}`, { boundMs: 30_000 });
  } finally {
    browser.close();
  }
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  const offered = h.model.requests(tag)[0].body.tools.map((t) => t.function.name);
  assert.ok(!offered.includes("execute"), "no LOADER: no execute");
  for (const name of ["ui_discover", "ui_execute", "computers_laptop_run_command", "goal_end", "agents_send", "agents_read"]) {
    assert.ok(offered.includes(name), `${name} offered: ${offered}`);
  }
  const tools = (await a.read(sid, { limit: 200 })).messages.filter((m) => m.role === "tool");
  assert.equal(tools.length, 5, JSON.stringify(tools));
  assert.deepEqual(JSON.parse(tools[0].text).map((c) => c.name), ["greet"]);
  assert.deepEqual(JSON.parse(tools[1].text), { greeted: "Ada" });
  assert.deepEqual(log, [{ name: "greet", input: { who: "Ada" } }]);
  assert.deepEqual(JSON.parse(tools[2].text), { stdout: "ran ls", exitCode: 0 });
  const calls = (await h.api("GET", `/direct/${a.id}/host/computer-calls`)).json;
  assert.deepEqual(calls.at(-1).args, { command: "ls" });
  assert.equal(calls.at(-1).operation, "run-command");
  assert.equal(calls.at(-1).sessionId, sid);
  assert.equal(JSON.parse(tools[3].text).status, "achieved");
  assert.equal((await a.read(sid)).extensions.goal.status, "achieved", "the command committed");
  const sent = JSON.parse(tools[4].text);
  assert.ok(["accepted", "pending"].includes(sent.status), tools[4].text);
  assert.equal(typeof sent.sessionId, "string");
});

test("a host whose direct tools one model request cannot carry is refused naming the tool", T, async () => {
  // 59 direct operations of its own, then agents' 4 and ui's 2: the 65th,
  // `ui_execute`, is one too many. Refused as every tools() problem is: the
  // turn fails saying why, before any model call.
  const a = h.agent(`crowded-${randomUUID()}`);
  const sid = await a.createSession("s");
  const tag = uniq("crowded");
  const settled = await a.settle(sid, "r1", `hello ${tag}`);
  assert.equal(settled.terminal, "failed", JSON.stringify(settled));
  assert.match(settled.diagnostic, /tools\(\): direct tool `ui_execute` \(ui\.execute\): a model request carries at most 64 tools, and as many come before it/);
  assert.equal(h.model.requests(tag).length, 0, "no model call with a refused configuration");
});

test("direct is a boolean wherever the host gives it", () => {
  assert.equal(checkTools({ ui: { id: "app", direct: "yes" } }), "tools().ui.direct must be a boolean");
  const computer = { describe() {}, call() {} };
  assert.equal(checkTools({ computers: [{ id: "c", name: "laptop", computer, direct: 1 }] }), "tools().computers[0].direct must be a boolean");
  assert.equal(checkTools({ ui: { id: "app", direct: true }, computers: [{ id: "c", name: "laptop", computer, direct: true }] }), undefined);
  const namespace = { get() {}, idFromName() {} };
  assert.equal(checkFleet({ namespace, direct: "yes" }), "fleet().direct must be a boolean");
  assert.equal(checkFleet({ namespace, direct: true }), undefined);
});
