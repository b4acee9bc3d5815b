// The Agent as an MCP server (docs/mcp-server.md) end to end: the real
// Durable Object in Miniflare behind the fixtures' host app (bearer auth,
// host metadata from `x-test-meta`) and shiitakeApp(), the scripted model
// server, and the official MCP TypeScript SDK's Client over its
// StreamableHTTPClientTransport (its fetch is Miniflare's): initialize,
// tools/list, a Session created, prompted, waited for and read; a queued
// prompt cancelled; a retried prompt admitted once; the host's metadata and
// identity applied; and the refusals (an unknown tool, bad arguments, a body
// past the bound, an unsupported protocol version, a foreign Origin).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { TOKEN, uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 90_000 };
const TOOLS = ["list_sessions", "create_session", "prompt", "read_session", "wait_for_settlement", "cancel"];

describe("an Agent as an MCP server", () => {
  const h = useWorker({ fixture: "acp-worker", model: "echo", bindings: { SHIITAKE_IDENTITY_PATH: "$.author.id" } });

  const url = (agentId) => new URL(`http://localhost/agents/${agentId}/mcp`);

  /** Miniflare's fetch, as the SDK transport calls it. */
  const mfFetch = (input, init = {}) => h.mf.dispatchFetch(String(input), { ...init, headers: Object.fromEntries(new Headers(init.headers)) });

  /** An SDK client connected to `agentId`'s `/mcp`, speaking for `meta` (the host's identity middleware reads `x-test-meta`). */
  async function connect(t, agentId, meta) {
    const headers = { authorization: `Bearer ${TOKEN}` };
    if (meta !== undefined) headers["x-test-meta"] = JSON.stringify(meta);
    const client = new Client({ name: "shiitake-e2e", version: "1.0.0" });
    await client.connect(new StreamableHTTPClientTransport(url(agentId), { fetch: mfFetch, requestInit: { headers } }));
    t.after(() => client.close());
    return client;
  }

  /** A tool's structuredContent, checked against its text content. */
  async function call(client, name, args) {
    const result = await client.callTool({ name, arguments: args });
    assert.equal(result.isError, undefined, JSON.stringify(result));
    assert.deepEqual(JSON.parse(result.content[0].text), result.structuredContent);
    return result.structuredContent;
  }

  /** A tool's error result: the route's `{code, message, status}`. */
  async function refusal(client, name, args) {
    const result = await client.callTool({ name, arguments: args });
    assert.equal(result.isError, true, JSON.stringify(result));
    const { error } = result.structuredContent;
    assert.match(result.content[0].text, new RegExp(`${error.status} ${error.code}: `));
    return error;
  }

  /** A raw POST to `/mcp`: one JSON-RPC message (or text) and extra headers. */
  function post(agentId, message, headers = {}) {
    const body = typeof message === "string" ? message : JSON.stringify(message);
    return h.mf.dispatchFetch(url(agentId), {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
      body,
    });
  }

  test("the SDK's client initializes, lists the tools, and runs a prompt to its settlement", T, async (t) => {
    const agentId = `agent-${randomUUID()}`;
    const client = await connect(t, agentId);
    assert.equal(client.getServerVersion().name, "shiitake");
    assert.ok(client.getServerCapabilities().tools);
    assert.match(client.getInstructions(), /requestId/);
    const { tools } = await client.listTools();
    assert.deepEqual(
      tools.map((tool) => tool.name),
      TOOLS,
    );
    const prompt = tools.find((tool) => tool.name === "prompt");
    assert.deepEqual(prompt.inputSchema.required, ["sessionId", "requestId", "text"]);
    assert.equal(prompt.inputSchema.additionalProperties, false);

    const { sessionId } = await call(client, "create_session", {});
    assert.match(sessionId, /^ses_/);
    const tag = uniq("mcp");
    h.model.scriptFor(tag, { chunks: ["Hello ", "from MCP."] });
    const receipt = await call(client, "prompt", { sessionId, requestId: `r-${tag}`, text: `say hi ${tag}` });
    assert.equal(receipt.status, "accepted");
    const { settlement } = await call(client, "wait_for_settlement", { sessionId, commandId: receipt.commandId, timeoutMs: 30_000 });
    assert.equal(settlement.terminal, "completed");
    assert.equal(settlement.commandId, receipt.commandId);
    const page = await call(client, "read_session", { sessionId, limit: 10 });
    assert.deepEqual(
      page.messages.map((m) => m.role),
      ["user", "assistant"],
    );
    assert.equal(page.messages[1].text, "Hello from MCP.");
    const listed = await call(client, "list_sessions", {});
    assert.deepEqual(
      listed.sessions.map((s) => s.sessionId),
      [sessionId],
    );
  });

  test("a retried prompt is admitted once, a queued one is cancelled, and the host's metadata and identity apply", T, async (t) => {
    const agentId = `agent-${randomUUID()}`;
    const ada = { author: { id: "ada" } };
    const bob = { author: { id: "bob" } };
    const asAda = await connect(t, agentId, ada);
    const asBob = await connect(t, agentId, bob);
    const { sessionId } = await call(asAda, "create_session", { sessionId: `s-${randomUUID()}` });
    const tag = uniq("hold");
    h.model.scriptFor(tag, { hang: true, chunks: ["working"] });
    const running = await call(asAda, "prompt", { sessionId, requestId: "r-run", text: `hold ${tag}` });
    await h.model.waitForRequests(1, { match: tag });

    // The same requestId twice (an MCP call retried): one command, one receipt.
    const queued = await call(asAda, "prompt", { sessionId, requestId: "r-queued", text: "next" });
    assert.deepEqual(await call(asAda, "prompt", { sessionId, requestId: "r-queued", text: "next" }), queued);
    const page = await call(asAda, "read_session", { sessionId });
    assert.equal(page.pending.length, 1);
    assert.deepEqual(page.pending[0].meta, ada, "the host's metadata, stored on the prompt");
    assert.equal(page.running.commandId, running.commandId);
    // Other text under the same requestId is the route's conflict.
    const conflict = await refusal(asAda, "prompt", { sessionId, requestId: "r-queued", text: "other" });
    assert.deepEqual([conflict.status, conflict.code], [409, "request_conflict"]);

    // Identity: Bob may not cancel Ada's prompt; Ada may.
    const notOwner = await refusal(asBob, "cancel", { sessionId, commandId: queued.commandId });
    assert.deepEqual([notOwner.status, notOwner.code], [403, "not_owner"]);
    const cancelled = await call(asAda, "cancel", { sessionId, commandId: queued.commandId });
    assert.deepEqual([cancelled.status, cancelled.text], ["cancelled", "next"]);
    const { settlement } = await call(asAda, "wait_for_settlement", { sessionId, commandId: queued.commandId });
    assert.equal(settlement.terminal, "cancelled");
    assert.deepEqual(settlement.meta, ada, "the cancellation's metadata");

    // A wait that times out answers null (parked like GET /settlement).
    const started = Date.now();
    assert.deepEqual(await call(asAda, "wait_for_settlement", { sessionId, commandId: running.commandId, timeoutMs: 300 }), { settlement: null });
    assert.ok(Date.now() - started >= 250, "it waited");
    // A running turn is stopped by cancel; a parked wait wakes on its settlement.
    const parkedAt = Date.now();
    const waiting = call(asAda, "wait_for_settlement", { sessionId, commandId: running.commandId, timeoutMs: 30_000 });
    const stopped = await call(asAda, "cancel", { sessionId, commandId: running.commandId });
    assert.equal(stopped.status, "cancelled");
    assert.equal((await waiting).settlement.terminal, "cancelled");
    assert.ok(Date.now() - parkedAt < 20_000, "woken by the settlement, not by its deadline");
  });

  test("refusals: an unknown tool, bad arguments, a route's refusal, invalid metadata", T, async (t) => {
    const agentId = `agent-${randomUUID()}`;
    const client = await connect(t, agentId);
    await assert.rejects(client.callTool({ name: "nope", arguments: {} }), (e) => e instanceof McpError && e.code === -32602 && /nope/.test(e.message));
    const missing = await refusal(client, "prompt", { sessionId: "s", text: "hi" });
    assert.deepEqual([missing.status, missing.code], [400, "invalid_request"]);
    assert.match(missing.message, /arguments\.requestId/);
    const wrongType = await refusal(client, "read_session", { sessionId: "s", limit: "ten" });
    assert.match(wrongType.message, /arguments\.limit/);
    const gone = await refusal(client, "read_session", { sessionId: "nope" });
    assert.deepEqual([gone.status, gone.code], [404, "session_not_found"]);
    const bound = await refusal(client, "list_sessions", { limit: 500 });
    assert.deepEqual([bound.status, bound.code], [400, "invalid_query"]);
    const tooLong = await refusal(client, "prompt", { sessionId: "s", requestId: "x".repeat(300), text: "hi" });
    assert.deepEqual([tooLong.status, tooLong.code], [400, "invalid_request"]);
    // Host metadata past its bound (4,096 bytes) is the route's 400.
    const badMeta = await connect(t, agentId, { author: { id: "ada" }, pad: "x".repeat(5000) });
    const { sessionId } = await call(client, "create_session", {});
    const invalid = await refusal(badMeta, "prompt", { sessionId, requestId: "r", text: "hi" });
    assert.deepEqual([invalid.status, invalid.code], [400, "invalid_meta"]);
  });

  test("the transport: JSON-RPC errors, 202, 405, the body bound, the protocol version, a foreign Origin", T, async () => {
    const agentId = `agent-${randomUUID()}`;
    const rpc = async (res, status) => {
      assert.equal(res.status, status);
      assert.match(res.headers.get("content-type"), /^application\/json/);
      return JSON.parse(await res.text());
    };
    assert.equal((await rpc(await post(agentId, "{nope"), 400)).error.code, -32700);
    const batch = await rpc(await post(agentId, [{ jsonrpc: "2.0", id: 1, method: "ping" }]), 400);
    assert.deepEqual([batch.id, batch.error.code], [null, -32600]);
    // A request the transport accepted and cannot serve: a JSON-RPC error in a 200.
    const unknown = await rpc(await post(agentId, { jsonrpc: "2.0", id: 2, method: "resources/list" }), 200);
    assert.deepEqual([unknown.id, unknown.error.code], [2, -32601]);
    const badParams = await rpc(await post(agentId, { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "prompt", arguments: [] } }), 200);
    assert.deepEqual([badParams.id, badParams.error.code], [3, -32602]);
    assert.deepEqual(await rpc(await post(agentId, { jsonrpc: "2.0", id: 4, method: "ping" }), 200), { jsonrpc: "2.0", id: 4, result: {} });

    const note = await post(agentId, { jsonrpc: "2.0", method: "notifications/initialized" });
    assert.deepEqual([note.status, await note.text()], [202, ""]);
    for (const method of ["GET", "DELETE"]) {
      const res = await h.api(method, `/agents/${agentId}/mcp`);
      assert.equal(res.status, 405, method);
    }
    const big = await post(agentId, JSON.stringify({ jsonrpc: "2.0", id: 5, method: "ping", params: { pad: "x".repeat(1_100_000) } }));
    assert.equal(big.status, 413);
    assert.equal(JSON.parse(await big.text()).error.code, "payload_too_large");

    const version = await rpc(await post(agentId, { jsonrpc: "2.0", id: 6, method: "ping" }, { "mcp-protocol-version": "2024-01-01" }), 400);
    assert.match(version.error.message, /2024-01-01/);
    assert.equal((await rpc(await post(agentId, { jsonrpc: "2.0", id: 7, method: "ping" }, { "mcp-protocol-version": "2025-03-26" }), 200)).id, 7);

    // DNS rebinding: a page of another origin is refused; the server's own is served.
    const foreign = await rpc(await post(agentId, { jsonrpc: "2.0", id: 8, method: "ping" }, { origin: "http://evil.example" }), 403);
    assert.match(foreign.error.message, /evil\.example/);
    assert.equal((await rpc(await post(agentId, { jsonrpc: "2.0", id: 9, method: "ping" }, { origin: "http://localhost" }), 200)).id, 9);
  });
});

describe("an Agent as an MCP server, closed", () => {
  const h = useWorker({ fixture: "extensions-worker", model: "echo", bindings: { INIT: "fail" } });

  test("a closed runtime answers every MCP request as every route: 503 runtime_closed", T, async () => {
    const a = h.agent();
    const res = await a.api("POST", "/mcp", { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25" } });
    assert.equal(res.status, 503, res.text);
    assert.equal(res.json.error.code, "runtime_closed");
  });
});
