// The MCP servers the MCP client tests rely on (tests/support/mcp-server.mjs),
// checked with the SDK's own Client + StreamableHTTPClientTransport and with
// raw fetches: listing, paging, calls, bearer auth, content types, sessions,
// the redirecting and hanging servers, the slow tools. No Worker here.
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { startHangingServer, startMcpServer, startRedirectServer } from "../support/mcp-server.mjs";

const TOOL_NAMES = ["create-note", "list-notes", "note-count", "fail", "odd-schema", "slow-read", "slow-write"];

/** Starts a server for one test and closes it (and the clients) when the test ends. */
async function serve(t, options) {
  const server = await startMcpServer(options);
  t.after(() => server.close());
  return server;
}

async function connect(t, server, transportOptions) {
  const client = new Client({ name: "mcp-server-test", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url), transportOptions));
  t.after(() => client.close());
  return client;
}

/** tools/list across every page: {tools, pages}. */
async function listAll(client) {
  const tools = [];
  let pages = 0;
  let cursor;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    tools.push(...page.tools);
    pages++;
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return { tools, pages };
}

const textOf = (result) => result.content.map((c) => c.text).join("");

const INITIALIZE = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
};
const post = (url, body, { headers = {}, signal } = {}) =>
  fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: JSON.stringify(body),
    signal,
  });

/** Settles within `ms`? The promise's outcome, or "pending". */
const within = (promise, ms) =>
  Promise.race([promise.catch((err) => err), sleep(ms).then(() => "pending")]);

test("lists the seven tools with their annotations and schemas (sse)", async (t) => {
  const server = await serve(t);
  const client = await connect(t, server);
  const { tools, pages } = await listAll(client);
  assert.equal(pages, 1);
  assert.deepEqual(tools.map((x) => x.name), TOOL_NAMES);
  const tool = Object.fromEntries(tools.map((x) => [x.name, x]));

  for (const name of ["list-notes", "note-count", "slow-read"]) {
    assert.deepEqual(tool[name].annotations, { readOnlyHint: true }, name);
  }
  for (const name of ["create-note", "fail", "odd-schema", "slow-write"]) {
    assert.equal(tool[name].annotations, undefined, name);
  }
  assert.equal(tool["create-note"].inputSchema.type, "object");
  assert.deepEqual(tool["create-note"].inputSchema.required, ["title"]);
  assert.deepEqual(Object.keys(tool["create-note"].inputSchema.properties), ["title", "body"]);
  assert.deepEqual(
    tool["odd-schema"].inputSchema.properties.value.anyOf.map((s) => s.type),
    ["string", "number"],
  );
  assert.deepEqual(tool["note-count"].outputSchema.properties, { count: { type: "number" } });
  assert.deepEqual(tool["note-count"].outputSchema.required, ["count"]);
  assert.equal(tools.filter((x) => x.outputSchema).length, 1);
  assert.equal(client.getServerVersion().name, "test-notes");
});

test("json mode and pageSize list the same tools; pages follow nextCursor", async (t) => {
  const sse = await listAll(await connect(t, await serve(t)));
  const json = await listAll(await connect(t, await serve(t, { mode: "json", name: "other" })));
  assert.deepEqual(json, sse);

  const paged = await serve(t, { pageSize: 2 });
  const client = await connect(t, paged);
  const all = await listAll(client);
  assert.equal(all.pages, 4);
  assert.deepEqual(all.tools, sse.tools);
  const lists = paged.requests().filter((r) => r.rpc === "tools/list");
  assert.deepEqual(lists.map((r) => r.body.params?.cursor), [undefined, "2", "4", "6"]);
  assert.ok(lists.every((r) => r.status === 200));

  await assert.rejects(client.listTools({ cursor: "nope" }), /Invalid cursor/);
});

for (const mode of ["sse", "json"]) {
  test(`calls each tool (${mode})`, async (t) => {
    const server = await serve(t, { mode });
    const client = await connect(t, server);
    const call = (name, args) => client.callTool({ name, arguments: args });

    assert.equal(textOf(await call("create-note", { title: "A", body: "x" })), "created A");
    assert.equal(textOf(await call("create-note", { title: "B" })), "created B");
    assert.deepEqual(JSON.parse(textOf(await call("list-notes", {}))), ["A", "B"]);
    const count = await call("note-count", {});
    assert.deepEqual(count.structuredContent, { count: 2 });
    assert.deepEqual(JSON.parse(textOf(count)), { count: 2 });
    const failed = await call("fail", {});
    assert.equal(failed.isError, true);
    assert.equal(textOf(failed), "it failed on purpose");
    assert.equal(textOf(await call("odd-schema", { value: 3 })), "ok");
    assert.equal(textOf(await call("odd-schema", { value: "three" })), "ok");

    // SDK validation: a bad argument is a tool error and the tool never runs.
    const invalid = await call("create-note", {});
    assert.equal(invalid.isError, true);
    assert.match(textOf(invalid), /Input validation error/);
    // An unknown tool: also a tool error from McpServer.
    assert.equal((await call("nope", {})).isError, true);

    assert.deepEqual(server.calls(), [
      { tool: "create-note", arguments: { title: "A", body: "x" } },
      { tool: "create-note", arguments: { title: "B" } },
      { tool: "list-notes", arguments: {} },
      { tool: "note-count", arguments: {} },
      { tool: "fail", arguments: {} },
      { tool: "odd-schema", arguments: { value: 3 } },
      { tool: "odd-schema", arguments: { value: "three" } },
    ]);
  });
}

test("the bearer server answers 401 without the token and works with it", async (t) => {
  const server = await serve(t, { token: "s3cret" });
  await assert.rejects(connect(t, server), (err) => err.code === 401);
  await assert.rejects(connect(t, server, { requestInit: { headers: { authorization: "Bearer wrong" } } }), (err) => err.code === 401);
  assert.deepEqual(server.requests().map((r) => [r.rpc, r.status]), [["initialize", 401], ["initialize", 401]]);

  const raw = await post(server.url, INITIALIZE);
  assert.equal(raw.status, 401);
  assert.equal(raw.headers.get("www-authenticate"), "Bearer");
  const body = await raw.json();
  assert.equal(body.jsonrpc, "2.0");
  assert.equal(body.error.code, -32001);

  const client = await connect(t, server, { requestInit: { headers: { Authorization: "Bearer s3cret" } } });
  assert.equal(textOf(await client.callTool({ name: "create-note", arguments: { title: "T" } })), "created T");
  const ok = server.requests().filter((r) => r.status !== 401);
  assert.ok(ok.length >= 3);
  assert.ok(ok.every((r) => r.headers.authorization === "Bearer s3cret"));
  assert.deepEqual(server.calls(), [{ tool: "create-note", arguments: { title: "T" } }]);
});

test("json mode answers application/json, sse mode text/event-stream", async (t) => {
  for (const [mode, type] of [["json", "application/json"], ["sse", "text/event-stream"]]) {
    const server = await serve(t, { mode });
    const res = await post(server.url, INITIALIZE);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), type);
    assert.match(res.headers.get("mcp-session-id"), /^[0-9a-f-]{36}$/);
    const text = await res.text();
    const message = JSON.parse(mode === "json" ? text : text.match(/^data: (.*)$/m)[1]);
    assert.equal(message.id, 1);
    assert.equal(message.result.protocolVersion, "2025-06-18", "a supported version is echoed");
    assert.equal(message.result.serverInfo.name, "test-notes");
    assert.ok(message.result.capabilities.tools);
    assert.deepEqual(server.requests().map((r) => [r.method, r.path, r.rpc, r.status]), [
      ["POST", "/mcp", "initialize", 200],
    ]);
  }
});

test("sessions: id required, unknown id 404, DELETE ends the session", async (t) => {
  const server = await serve(t, { mode: "json" });
  const init = await post(server.url, { ...INITIALIZE, params: { ...INITIALIZE.params, protocolVersion: "1999-01-01" } });
  const sid = init.headers.get("mcp-session-id");
  assert.equal((await init.json()).result.protocolVersion, "2025-11-25", "an unknown version gets the latest");
  const list = { jsonrpc: "2.0", id: 2, method: "tools/list", params: {} };

  assert.equal((await post(server.url, list)).status, 400);
  const unknown = await post(server.url, list, { headers: { "mcp-session-id": "nope" } });
  assert.equal(unknown.status, 404);
  assert.equal((await unknown.json()).error.code, -32001);
  const badVersion = await post(server.url, list, { headers: { "mcp-session-id": sid, "mcp-protocol-version": "1999-01-01" } });
  assert.equal(badVersion.status, 400);
  const ok = await post(server.url, list, { headers: { "mcp-session-id": sid } });
  assert.equal(ok.status, 200);
  assert.equal((await ok.json()).result.tools.length, 7);
  const note = { jsonrpc: "2.0", method: "notifications/initialized" };
  assert.equal((await post(server.url, note, { headers: { "mcp-session-id": sid } })).status, 202);

  const del = await fetch(server.url, { method: "DELETE", headers: { "mcp-session-id": sid } });
  assert.equal(del.status, 200);
  assert.equal((await post(server.url, list, { headers: { "mcp-session-id": sid } })).status, 404);
  assert.equal((await post(server.url.replace("/mcp", "/other"), list)).status, 404);
});

test("the redirect server answers 307 to another URL on itself", async (t) => {
  const server = await startRedirectServer();
  t.after(() => server.close());
  const res = await fetch(server.url, { method: "POST", body: JSON.stringify(INITIALIZE), redirect: "manual" });
  assert.equal(res.status, 307);
  const location = new URL(res.headers.get("location"));
  assert.equal(location.origin, new URL(server.url).origin);
  assert.notEqual(location.pathname, "/mcp");
  assert.equal((await fetch(location, { redirect: "manual" })).status, 307);
  assert.deepEqual(server.requests().map((r) => [r.method, r.rpc, r.status]), [
    ["POST", "initialize", 307],
    ["GET", null, 307],
  ]);
});

test("the hanging server never answers", async (t) => {
  const server = await startHangingServer();
  t.after(() => server.close());
  await assert.rejects(post(server.url, INITIALIZE, { signal: AbortSignal.timeout(300) }), { name: "TimeoutError" });
  assert.deepEqual(server.requests().map((r) => [r.method, r.rpc, r.status]), [["POST", "initialize", null]]);
});

for (const [mode, tool] of [["sse", "slow-read"], ["json", "slow-write"]]) {
  test(`${tool} hangs on its first call until release (${mode})`, async (t) => {
    const server = await serve(t, { mode });
    const client = await connect(t, server);
    const first = client.callTool({ name: tool, arguments: {} });
    assert.equal(await within(first, 300), "pending");
    assert.equal(textOf(await client.callTool({ name: tool, arguments: {} })), "runs 2");
    assert.equal(await within(first, 100), "pending");
    server.release();
    assert.equal(textOf(await first), "runs 1");
    assert.equal(textOf(await client.callTool({ name: tool, arguments: {} })), "runs 3");
    assert.deepEqual(server.calls().map((c) => c.tool), [tool, tool, tool]);
  });
}

test("cancelling or dropping a hanging first call leaves the server serving", async (t) => {
  const server = await serve(t, { mode: "json" });
  const client = await connect(t, server);
  const abort = new AbortController();
  const first = client.callTool({ name: "slow-write", arguments: {} }, undefined, { signal: abort.signal });
  await sleep(100);
  abort.abort();
  await assert.rejects(first, /AbortError|abort/i);
  await sleep(50);
  assert.ok(server.requests().some((r) => r.rpc === "notifications/cancelled"), "the SDK client cancels");

  // A raw client that just drops the HTTP request (json mode: the answer is pending on it).
  const init = await post(server.url, INITIALIZE);
  const sid = init.headers.get("mcp-session-id");
  const call = { jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: "slow-read", arguments: {} } };
  await assert.rejects(post(server.url, call, { headers: { "mcp-session-id": sid }, signal: AbortSignal.timeout(200) }));
  const again = await post(server.url, { ...call, id: 8 }, { headers: { "mcp-session-id": sid } });
  assert.equal((await again.json()).result.content[0].text, "runs 2");
  assert.deepEqual(server.calls().map((c) => c.tool), ["slow-write", "slow-read", "slow-read"]);
});
