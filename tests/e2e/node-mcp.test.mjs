// MCP tools on Node (js/node.mjs), where there is no `execute` sandbox:
// `tools().mcpServers[i].direct: true` offers every tool of the server as a
// direct tool of its own. Against a server built with the official MCP SDK
// (tests/support/mcp-server.mjs), the scripted model calls `create_note`
// directly; the MCP result reaches the transcript and the next model
// request. Grants still key the server as `mcp.<name>`.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { openNodeShiitake } from "../../js/node.mjs";
import { startMcpServer } from "../support/mcp-server.mjs";
import { contentText, startModelServer } from "../support/model-server.mjs";

const T = { timeout: 60_000 };
const dir = mkdtempSync(path.join(tmpdir(), "shiitake-node-mcp-"));
const model = await startModelServer({ fallback: "echo" });
const server = await startMcpServer({ mode: "json" });
after(async () => {
  await server.close();
  await model.close();
  rmSync(dir, { recursive: true, force: true });
});

const env = {
  SHIITAKE_MODEL: "openai/scripted-node-mcp",
  OPENAI_BASE_URL: model.url,
  OPENAI_API_KEY: "sk-node-test",
  SHIITAKE_RETRY_BASE_MS: "50",
  SHIITAKE_RETRY_MAX_MS: "400",
};

async function open(name, tools) {
  const host = await openNodeShiitake({ path: path.join(dir, `${name}.db`), env, tools });
  const api = async (method, rel, body) => {
    const res = await host.fetch(
      new Request(`http://node.test${rel}`, {
        method,
        headers: body === undefined ? {} : { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
    );
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : undefined, text };
  };
  /** One prompt in a new Session: its settlement and transcript. */
  const turn = async (sid, text) => {
    assert.equal((await api("POST", "/sessions", { sessionId: sid })).status, 201);
    const admitted = await api("POST", `/sessions/${sid}/commands`, { type: "prompt", requestId: "r1", text });
    assert.equal(admitted.json?.status, "accepted", admitted.text);
    const settled = await api("GET", `/sessions/${sid}/settlement?commandId=${admitted.json.commandId}&timeoutMs=20000`);
    assert.ok(settled.json, `not settled: ${settled.text}`);
    const messages = (await api("GET", `/sessions/${sid}`)).json.messages;
    return { settled: settled.json, messages };
  };
  return { host, turn };
}

const toolNames = (request) => (request.body.tools ?? []).map((t) => t.function?.name ?? t.name);

test("a direct MCP server's tools are offered on Node and the model calls one without execute", T, async () => {
  const { host, turn } = await open("direct", { modules: [], mcpServers: [{ name: "notes", url: server.url, direct: true }] });
  try {
    model.scriptFor("node-mcp-direct", { toolCalls: [{ name: "create_note", arguments: { title: "from-node" } }] }, { text: "noted" });
    const t = await turn("s", "make a note node-mcp-direct");
    assert.equal(t.settled.terminal, "completed", JSON.stringify(t.settled));
    assert.equal(t.settled.answer, "noted");
    const [first, second] = model.requests("node-mcp-direct");
    const names = toolNames(first);
    assert.ok(names.includes("create_note") && names.includes("list_notes"), JSON.stringify(names));
    assert.ok(!names.includes("execute"), "no execute on Node");
    // The MCP result: in the transcript, and in the next model request.
    const tool = t.messages.find((m) => m.role === "tool");
    assert.ok(tool, JSON.stringify(t.messages));
    assert.equal(tool.isError, undefined, tool.text);
    assert.match(tool.text, /created from-node/);
    const answered = second.body.messages.find((m) => m.role === "tool");
    assert.match(contentText(answered.content), /created from-node/);
  } finally {
    await host.close();
  }
});

test("grants still key a direct MCP server as mcp.<name>: read may list, not create", T, async () => {
  const { host, turn } = await open("granted", {
    modules: [],
    mcpServers: [{ name: "notes", url: server.url, direct: true }],
    access: { grants: { "mcp.notes": "read" } },
  });
  try {
    model.scriptFor(
      "node-mcp-grants",
      { toolCalls: [{ name: "create_note", arguments: { title: "refused" } }, { name: "list_notes", arguments: {} }] },
      { text: "done" },
    );
    const t = await turn("g", "try node-mcp-grants");
    assert.equal(t.settled.terminal, "completed", JSON.stringify(t.settled));
    const tools = t.messages.filter((m) => m.role === "tool");
    assert.equal(tools.length, 2, JSON.stringify(tools));
    assert.equal(tools[0].isError, true, tools[0].text);
    assert.match(tools[0].text, /`mcp\.notes` is granted `read` here; this operation needs `write`/);
    assert.equal(tools[1].isError, undefined, tools[1].text);
    assert.match(tools[1].text, /"isError":false/);
  } finally {
    await host.close();
  }
});

test("tools().mcpServers entries are closed: an unknown key or a non-boolean direct is refused by name", T, async () => {
  for (const [entry, pattern] of [
    [{ name: "notes", url: server.url, dircet: true }, /tools\(\)\.mcpServers\[0\]\.dircet: unknown key `dircet`; known: name, url, headers, direct/],
    [{ name: "notes", url: server.url, direct: "yes" }, /tools\(\)\.mcpServers\[0\]\.direct must be a boolean/],
  ]) {
    const { host, turn } = await open(`closed-${Object.keys(entry)[2]}-${typeof entry.direct}`, { modules: [], mcpServers: [entry] });
    try {
      const sid = "c";
      const t = await turn(sid, "hello");
      assert.equal(t.settled.terminal, "failed", JSON.stringify(t.settled));
      assert.match(t.settled.diagnostic, pattern);
    } finally {
      await host.close();
    }
  }
});
