// Modules reachable without `execute` on Node (js/node.mjs; `sandbox:
// "loader"` keeps the embedded `execute` out, as on a host with no sandbox):
// a Computer with `direct: true` and the `goal` extension with a
// roster entry's `direct: true` are offered as direct tools named by their
// module (`computers_laptop_run_command`, `goal_end`); the scripted model
// calls both and gets their results. Grants key them as through `execute`:
// `computers.laptop` granted `read` refuses the Computer's (write) call.
// Without `sandbox`, `execute` (the embedded sandbox, Node's default)
// reaches the same Computer and extension command from guest code.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { goal } from "../../examples/extensions/goal.mjs";
import { openNodeShiitake } from "../../js/node.mjs";
import { startModelServer } from "../support/model-server.mjs";

const T = { timeout: 60_000 };
const dir = mkdtempSync(path.join(tmpdir(), "shiitake-node-direct-"));
const model = await startModelServer({ fallback: "echo" });
after(async () => {
  await model.close();
  rmSync(dir, { recursive: true, force: true });
});

const env = { SHIITAKE_MODEL: "openai/scripted-node-direct", OPENAI_BASE_URL: model.url, OPENAI_API_KEY: "sk-node-test" };

const calls = [];
const laptop = {
  describe: async () => ({
    operations: [{ name: "run-command", description: "Runs a command", inputSchema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }],
  }),
  async call(operation, argsJson) {
    calls.push({ operation, args: JSON.parse(argsJson) });
    return { result: { stdout: `ran ${JSON.parse(argsJson).command}` } };
  },
};

async function open(name, access, sandbox = "loader") {
  const tools = { ...(sandbox ? { sandbox } : {}), computers: [{ id: "c-laptop", name: "laptop", computer: laptop, direct: true }], ...(access ? { access } : {}) };
  const host = await openNodeShiitake({ path: path.join(dir, `${name}.db`), env, tools, extensions: [{ extension: goal, direct: true }] });
  const api = async (method, rel, body) => {
    const res = await host.fetch(new Request(`http://node.test${rel}`, { method, headers: body === undefined ? {} : { "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) }));
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : undefined, text };
  };
  const turn = async (sid, text) => {
    const admitted = await api("POST", `/sessions/${sid}/commands`, { type: "prompt", requestId: `r-${text}`, text });
    assert.equal(admitted.json?.status, "accepted", admitted.text);
    const settled = await api("GET", `/sessions/${sid}/settlement?commandId=${admitted.json.commandId}&timeoutMs=20000`);
    assert.equal(settled.json?.terminal, "completed", settled.text);
    return (await api("GET", `/sessions/${sid}`)).json;
  };
  return { host, api, turn };
}

test("on Node a direct Computer and an extension's direct command are tools the model calls", T, async () => {
  const { host, api, turn } = await open("direct");
  try {
    assert.equal((await api("POST", "/sessions", { sessionId: "s" })).status, 201);
    const set = await api("POST", "/sessions/s/extensions/goal/commands/set", { requestId: "g1", input: { text: "tidy" } });
    assert.equal(set.status, 200, set.text);
    model.scriptFor(
      "node-direct",
      { toolCalls: [{ name: "computers_laptop_run_command", arguments: { command: "ls" } }] },
      { toolCalls: [{ name: "goal_end", arguments: { status: "achieved" } }] },
      { text: "done" },
    );
    const read = await turn("s", "go node-direct");
    const names = model.requests("node-direct")[0].body.tools.map((t) => t.function.name);
    assert.ok(names.includes("computers_laptop_run_command") && names.includes("goal_end") && !names.includes("execute"), JSON.stringify(names));
    const tools = read.messages.filter((m) => m.role === "tool");
    assert.deepEqual(JSON.parse(tools[0].text), { stdout: "ran ls" });
    assert.deepEqual(calls.at(-1), { operation: "run-command", args: { command: "ls" } });
    assert.equal(JSON.parse(tools[1].text).status, "achieved");
    assert.equal(read.extensions.goal.status, "achieved");
  } finally {
    await host.close();
  }
});

test("grants key a direct Computer as computers.<name>: read refuses its write", T, async () => {
  const { host, api, turn } = await open("granted", { grants: { "computers.laptop": "read" } });
  try {
    assert.equal((await api("POST", "/sessions", { sessionId: "g" })).status, 201);
    const before = calls.length;
    model.scriptFor("node-direct-grants", { toolCalls: [{ name: "computers_laptop_run_command", arguments: { command: "rm" } }] }, { text: "done" });
    const read = await turn("g", "go node-direct-grants");
    const tool = read.messages.find((m) => m.role === "tool");
    assert.equal(tool.isError, true, tool.text);
    assert.match(tool.text, /`computers\.laptop` is granted `read` here; this operation needs `write`/);
    assert.equal(calls.length, before, "the Computer was never asked");
  } finally {
    await host.close();
  }
});

test("on Node execute reaches the same Computer and extension command from guest code (the embedded sandbox, the default)", T, async () => {
  const { host, api, turn } = await open("execute", undefined, null);
  try {
    assert.equal((await api("POST", "/sessions", { sessionId: "x" })).status, 201);
    const set = await api("POST", "/sessions/x/extensions/goal/commands/set", { requestId: "g1", input: { text: "tidy" } });
    assert.equal(set.status, 200, set.text);
    model.scriptFor(
      "node-execute",
      {
        toolCalls: [
          {
            name: "execute",
            arguments: { code: "const ran = await computers.laptop.run_command({ command: 'pwd' }); const ended = await goal.end({ status: 'achieved' }); return { ran, status: ended.status };" },
          },
        ],
      },
      { text: "done" },
    );
    const read = await turn("x", "go node-execute");
    const names = model.requests("node-execute")[0].body.tools.map((t) => t.function.name);
    assert.ok(names.includes("execute"), JSON.stringify(names));
    const tool = read.messages.find((m) => m.role === "tool");
    assert.ok(!tool.isError, tool.text);
    assert.deepEqual(JSON.parse(tool.text), { ran: { stdout: "ran pwd" }, status: "achieved" });
    assert.deepEqual(calls.at(-1), { operation: "run-command", args: { command: "pwd" } });
    assert.equal(read.extensions.goal.status, "achieved");
  } finally {
    await host.close();
  }
});
