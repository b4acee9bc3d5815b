// MCP tools on Node (js/node.mjs): `tools().mcpServers[i].direct: true`
// offers every tool of the server as a direct tool of its own, beside
// `execute` (the embedded sandbox). Against a server built with the official MCP SDK
// (tests/support/mcp-server.mjs), the scripted model calls `create_note`
// directly; the MCP result reaches the transcript and the next model
// request. Grants still key the server as `mcp.<name>`. Requests the server
// sends during a call are answered; a call whose stream the server closes is
// resumed (GET with Last-Event-ID, the SDK replaying its event store).
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
    assert.ok(names.includes("execute"), "execute on Node: the embedded sandbox");
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

test("direct MCP servers past one model request's 64 tools or with a 65-byte tool name leave the Agent serving turns; what is left out is reported by name", T, async () => {
  const longName = "l".repeat(65);
  const long = await startMcpServer({ mode: "json", base: false, extra: ["short-one", longName] });
  const wide = await startMcpServer({ mode: "json", base: false, extra: Array.from({ length: 65 }, (_, i) => `w${i}`) });
  const reports = [];
  // Without `execute` (no LOADER to run "loader"): every slot is a direct tool.
  const { host, turn } = await open("bounded", {
    sandbox: "loader",
    modules: [],
    mcpServers: [
      { name: "long", url: long.url, direct: true },
      { name: "wide", url: wide.url, direct: true },
    ],
    onUnavailable: (report) => reports.push(report),
  });
  try {
    model.scriptFor("node-mcp-bounded", { toolCalls: [{ name: "w0", arguments: {} }, { name: "short_one", arguments: {} }] }, { text: "both ran" });
    const t = await turn("b", "call them node-mcp-bounded");
    assert.equal(t.settled.terminal, "completed", JSON.stringify(t.settled));
    const names = toolNames(model.requests("node-mcp-bounded")[0]);
    assert.equal(names.length, 64, JSON.stringify(names));
    assert.deepEqual(names.slice(0, 3), ["short_one", "w0", "w1"], "in configuration order, then listing order");
    assert.equal(names.at(-1), "w62");
    const tools = t.messages.filter((m) => m.role === "tool");
    assert.equal(tools.length, 2, JSON.stringify(tools));
    assert.match(tools[0].text, /"w0 ran"/);
    assert.match(tools[1].text, /"short-one ran"/);
    assert.deepEqual(long.calls().map((c) => c.tool), ["short-one"]);
    assert.deepEqual(
      reports.map((r) => [r.name, r.tool]),
      [["long", longName], ["wide", "w63"], ["wide", "w64"]],
    );
    assert.match(reports[0].reason, /^not a direct tool: its name is 65 bytes; a model tool name is at most 64$/);
    assert.match(reports[1].reason, /^not a direct tool: a model request carries at most 64 tools/);
    // The next turn is served too, the reports said again at its start.
    model.scriptFor("node-mcp-bounded-2", { text: "still here" });
    const again = await turn("b2", "again node-mcp-bounded-2");
    assert.equal(again.settled.terminal, "completed", JSON.stringify(again.settled));
    assert.equal(reports.length, 3, "reported once");
  } finally {
    await host.close();
    await long.close();
    await wide.close();
  }
});

test("the host's own operations marked direct past the bound or with a 65-byte name are left out and reported; the Agent serves turns", T, async () => {
  const longName = "a".repeat(65);
  const op = (name) => ({
    name,
    description: `The ${name} operation.`,
    inputSchema: { type: "object" },
    access: "read",
    direct: true,
    run: () => ({ ran: name }),
  });
  const ops = [op(longName), ...Array.from({ length: 65 }, (_, i) => op(`p${i}`))];
  const reports = [];
  // Without `execute` (no LOADER to run "loader"): every slot is a direct tool.
  const { host, turn } = await open("own-bounded", { sandbox: "loader", modules: [{ id: "own", operations: ops }], onUnavailable: (r) => reports.push(r) });
  try {
    model.scriptFor("node-own-bounded", { toolCalls: [{ name: "p0", arguments: {} }] }, { text: "ran" });
    const t = await turn("o", "call node-own-bounded");
    assert.equal(t.settled.terminal, "completed", JSON.stringify(t.settled));
    const names = toolNames(model.requests("node-own-bounded")[0]);
    assert.equal(names.length, 64);
    assert.deepEqual([names[0], names.at(-1)], ["p0", "p63"]);
    assert.equal(t.messages.find((m) => m.role === "tool").text, JSON.stringify({ ran: "p0" }));
    assert.deepEqual(reports.map((r) => [r.name, r.tool]), [["own", longName], ["own", "p64"]]);
    assert.match(reports[0].reason, /is 65 bytes; a model tool name is at most 64/);
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

test("requests a server sends during a call are answered on its stream: ping, and sampling and elicitation declined with a JSON-RPC error", T, async () => {
  // Unanswered, the SDK server would wait for each until the call timed out.
  const asking = await startMcpServer({ mode: "sse", base: false, asks: true });
  const { host, turn } = await open("asks", { modules: [], mcpServers: [{ name: "asking", url: asking.url, direct: true }] });
  try {
    model.scriptFor("node-mcp-asks", { toolCalls: [{ name: "ask", arguments: {} }] }, { text: "asked" });
    const t = await turn("a", "ask node-mcp-asks");
    assert.equal(t.settled.terminal, "completed", JSON.stringify(t.settled));
    const tool = t.messages.find((m) => m.role === "tool");
    assert.equal(tool.isError, undefined, tool.text);
    const { content } = JSON.parse(tool.text);
    const lines = content[0].text.split("\n");
    assert.equal(lines[0], "ping: answered");
    assert.match(lines[1], /^elicitation\/create: error -32601 .*declares no capability for `elicitation\/create`/);
    assert.match(lines[2], /^sampling\/createMessage: error -32601 .*declares no capability for `sampling\/createMessage`/);
    // Each answer is a POST of the same session, a JSON-RPC response (202).
    const answers = asking.requests().filter((r) => r.method === "POST" && r.rpc === null && r.body?.id !== undefined);
    assert.equal(answers.length, 3, JSON.stringify(answers));
    for (const r of answers) {
      assert.equal(r.status, 202);
      assert.ok(r.headers["mcp-session-id"]);
    }
  } finally {
    await host.close();
    await asking.close();
  }
});

test("a call whose stream the server closes (the SDK's closeSSEStream, offered to a 2025-11-25 client) is resumed from its event store: sent once, its result arrives", T, async () => {
  const resumable = await startMcpServer({ mode: "sse", base: false, resumable: true });
  const { host, turn } = await open("resumable", { modules: [], mcpServers: [{ name: "lasting", url: resumable.url, direct: true }] });
  try {
    model.scriptFor("node-mcp-resume", { toolCalls: [{ name: "outlive", arguments: {} }] }, { text: "outlived" });
    const t = await turn("r", "outlive node-mcp-resume");
    assert.equal(t.settled.terminal, "completed", JSON.stringify(t.settled));
    const tool = t.messages.find((m) => m.role === "tool");
    assert.equal(tool.isError, undefined, tool.text);
    assert.match(tool.text, /"text":"outlived"/);
    // The call was sent once; its stream resumed with a GET naming the last event id seen.
    const posts = resumable.requests().filter((r) => r.rpc === "tools/call");
    assert.equal(posts.length, 1);
    const gets = resumable.requests().filter((r) => r.method === "GET");
    assert.equal(gets.length, 1, JSON.stringify(gets.map((r) => r.headers)));
    assert.ok(gets[0].headers["last-event-id"], "Last-Event-ID sent");
    assert.equal(gets[0].headers.accept, "text/event-stream");
    assert.equal(gets[0].headers["mcp-protocol-version"], "2025-11-25");
    assert.equal(gets[0].status, 200);
  } finally {
    await host.close();
    await resumable.close();
  }
});
