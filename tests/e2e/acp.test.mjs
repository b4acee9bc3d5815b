// ACP over HTTP (docs/acp.md) end to end: the real Durable Object in
// Miniflare, the scripted model server speaking the OpenAI (and Anthropic)
// wire format, and the official ACP SDK's client side
// (`@agentclientprotocol/sdk`, `client().connect(stream)`) driving
// initialize, session/new, a prompt with a tool call and streamed chunks, a
// session/load replay and a cancel through a small stream adapter: each
// JSON-RPC message the SDK writes is POSTed to `/agents/:id/acp`, and the
// JSON or SSE answer is fed back into the SDK's readable stream. Then the
// HTTP transport directly: its error cases, the host metadata stored per
// request, and the model layers a hosted Session uses.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import * as acp from "@agentclientprotocol/sdk";
import { SseParser } from "../../js/client.mjs";
import { TOKEN, MODEL_NAME, uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 90_000 };
const ANTHROPIC = "anthropic/claude-e2e";

/** POSTs one JSON-RPC message (or raw text) to an Agent's ACP route. */
function post(h, agentId, message, { meta } = {}) {
  const headers = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
  if (meta !== undefined) headers["x-test-meta"] = JSON.stringify(meta);
  const body = typeof message === "string" ? message : JSON.stringify(message);
  return h.mf.dispatchFetch(`http://localhost/agents/${agentId}/acp`, { method: "POST", headers, body });
}

/** The JSON-RPC messages of an SSE answer, each handed to `onMessage` as it arrives; resolves when the stream ends. */
async function readStream(res, onMessage) {
  const parser = new SseParser();
  for await (const chunk of res.body) {
    for (const ev of parser.push(chunk)) onMessage(JSON.parse(ev.data));
  }
}

/** Every message of an answer: `[]` for 202, one for JSON, all of an SSE stream. */
async function messagesOf(res) {
  const type = res.headers.get("content-type") ?? "";
  if (res.status === 202) {
    assert.equal(await res.text(), "");
    return [];
  }
  if (type.startsWith("text/event-stream")) {
    const out = [];
    await readStream(res, (m) => out.push(m));
    return out;
  }
  assert.ok(type.startsWith("application/json"), `${res.status} ${type}`);
  return [JSON.parse(await res.text())];
}

/**
 * The adapter: an ACP SDK `Stream` over the HTTP transport. A write is not
 * awaited by the next one, so a `session/cancel` goes out while a prompt's
 * stream is still open.
 */
function httpStream(h, agentId, { meta } = {}) {
  let incoming;
  const readable = new ReadableStream({
    start(controller) {
      incoming = controller;
    },
  });
  const writable = new WritableStream({
    write(message) {
      (async () => {
        const res = await post(h, agentId, message, { meta });
        const type = res.headers.get("content-type") ?? "";
        // A JSON-RPC error answers a 4xx with its JSON-RPC body: handed to the SDK.
        if (res.status !== 200 && res.status !== 202 && !type.startsWith("application/json")) throw new Error(`POST /acp answered ${res.status}: ${await res.text()}`);
        if (type.startsWith("text/event-stream")) await readStream(res, (m) => incoming.enqueue(m));
        else for (const m of await messagesOf(res)) incoming.enqueue(m);
      })().catch((error) => incoming.error(error));
    },
  });
  return { readable, writable };
}

/** An SDK client connection to `agentId` that records its `session/update` notifications. */
function connect(h, agentId, options) {
  const updates = [];
  const connection = acp
    .client({ name: "shiitake-e2e" })
    .onNotification("session/update", ({ params }) => {
      updates.push(params);
    })
    .connect(httpStream(h, agentId, options));
  return { agent: connection.agent, updates, close: () => connection.close() };
}

const kinds = (updates) => updates.map((u) => u.update.sessionUpdate);
const chunkText = (updates, kind) =>
  updates
    .filter((u) => u.update.sessionUpdate === kind && u.update.content.type === "text")
    .map((u) => u.update.content.text)
    .join("");

describe("ACP over HTTP", () => {
  const h = useWorker({
    fixture: "acp-worker",
    model: { provider: "both", fallback: "echo" },
    bindings: { SHIITAKE_MODELS: `openai/${MODEL_NAME},${ANTHROPIC}`, SHIITAKE_IDENTITY_PATH: "$.author.id" },
  });

  test("the ACP SDK's client drives a prompt with a tool call and streamed chunks, then replays it with session/load", T, async () => {
    const agentId = `agent-${randomUUID()}`;
    const c = connect(h, agentId);
    const init = await c.agent.request("initialize", { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    assert.equal(init.protocolVersion, acp.PROTOCOL_VERSION);
    assert.equal(init.agentCapabilities.loadSession, true);
    const { sessionId } = await c.agent.request("session/new", { cwd: "/", mcpServers: [] });
    assert.match(sessionId, /^ses_/);

    const tag = uniq("acp");
    h.model.scriptFor(
      tag,
      { chunks: ["Let me ", "note that."], chunkDelayMs: 30, toolCalls: [{ name: "execute", arguments: { code: `return await notes.add_note({ text: ${JSON.stringify(tag)} })` } }] },
      { chunks: ["Noted ", "it."], chunkDelayMs: 30 },
    );
    const answer = await c.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: `remember ${tag}` }] });
    assert.deepEqual(answer, { stopReason: "end_turn" });
    assert.ok(c.updates.every((u) => u.sessionId === sessionId));
    assert.equal(chunkText(c.updates, "agent_message_chunk"), "Let me note that.Noted it.");
    assert.ok(c.updates.filter((u) => u.update.sessionUpdate === "agent_message_chunk").length >= 4, "streamed in chunks");
    const call = c.updates.find((u) => u.update.sessionUpdate === "tool_call").update;
    assert.equal(call.title, "execute");
    assert.equal(call.kind, "execute");
    assert.equal(call.status, "in_progress");
    assert.match(call.rawInput.code, /notes\.add_note/);
    const done = c.updates.find((u) => u.update.sessionUpdate === "tool_call_update").update;
    assert.equal(done.toolCallId, call.toolCallId);
    assert.equal(done.status, "completed");
    assert.deepEqual(JSON.parse(done.content[0].content.text), { count: 1 });
    const order = kinds(c.updates);
    assert.ok(order.indexOf("tool_call") < order.indexOf("tool_call_update"), order.join(","));
    assert.equal(order.at(-1), "agent_message_chunk", "the answer after the tool");
    c.close();

    // A fresh connection reattaches with session/load: the transcript replayed.
    const d = connect(h, agentId);
    await d.agent.request("initialize", { protocolVersion: acp.PROTOCOL_VERSION });
    assert.deepEqual(await d.agent.request("session/load", { sessionId, cwd: "/", mcpServers: [] }), {});
    assert.deepEqual(kinds(d.updates), ["user_message_chunk", "agent_message_chunk", "tool_call", "tool_call_update", "agent_message_chunk"]);
    assert.equal(chunkText(d.updates, "user_message_chunk"), `remember ${tag}`);
    assert.equal(chunkText(d.updates, "agent_message_chunk"), "Let me note that.Noted it.");
    assert.equal(d.updates[2].update.toolCallId, call.toolCallId);
    assert.equal(d.updates[3].update.status, "completed");
    d.close();
  });

  test("session/cancel from the SDK stops the running prompt, which answers `cancelled`", T, async () => {
    const agentId = `agent-${randomUUID()}`;
    const c = connect(h, agentId, { meta: { author: { id: "ada" } } });
    await c.agent.request("initialize", { protocolVersion: acp.PROTOCOL_VERSION });
    const { sessionId } = await c.agent.request("session/new", { cwd: "/", mcpServers: [] });
    const tag = uniq("hang");
    h.model.scriptFor(tag, { hang: true, chunks: ["thinking"] });
    const answer = c.agent.request("session/prompt", { sessionId, prompt: [{ type: "text", text: `wait ${tag}` }] });
    await h.model.waitForRequests(1, { match: tag });
    for (let i = 0; i < 200 && chunkText(c.updates, "agent_message_chunk") === ""; i++) await new Promise((r) => setTimeout(r, 25));
    assert.equal(chunkText(c.updates, "agent_message_chunk"), "thinking");
    await c.agent.notify("session/cancel", { sessionId });
    assert.deepEqual(await answer, { stopReason: "cancelled" });
    // The model call was stopped; the settlement carries the cancel's metadata.
    await h.model.waitFor((all) => all.some((r) => r.outcome === "aborted" && JSON.stringify(r.body).includes(tag)), { what: "the aborted model call" });
    const read = await h.agent(agentId).read(sessionId);
    assert.equal(read.running, null);
    c.close();
  });

  test("direct HTTP: JSON-RPC errors, content types, 202 for a notification, HTTP refusals", T, async () => {
    const agentId = `agent-${randomUUID()}`;
    // An error is a JSON-RPC error response under the HTTP status of its cause.
    const one = async (message, status = 400) => {
      const res = await post(h, agentId, message);
      assert.equal(res.status, status);
      assert.match(res.headers.get("content-type"), /^application\/json/);
      return JSON.parse(await res.text());
    };
    assert.equal((await one("{not json")).error.code, -32700);
    const batch = await one([{ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: 1 } }]);
    assert.equal(batch.error.code, -32600);
    assert.equal(batch.id, null);
    assert.match(batch.error.message, /batch/);
    const noVersion = await one({ id: 2, method: "initialize" });
    assert.deepEqual([noVersion.id, noVersion.error.code], [2, -32600]);
    const unknown = await one({ jsonrpc: "2.0", id: 3, method: "session/set_mode", params: {} });
    assert.equal(unknown.error.code, -32601);
    assert.match(unknown.error.message, /session\/set_mode/);
    const missing = await one({ jsonrpc: "2.0", id: 4, method: "session/prompt", params: { prompt: [] } });
    assert.equal(missing.error.code, -32602);
    assert.match(missing.error.message, /sessionId/);
    const mcp = await one({ jsonrpc: "2.0", id: 5, method: "session/new", params: { cwd: "/", mcpServers: [{ type: "http", name: "x", url: "http://x", headers: [] }] } });
    assert.equal(mcp.error.code, -32602);
    assert.match(mcp.error.message, /mcpServers/);
    const gone = await one({ jsonrpc: "2.0", id: 6, method: "session/prompt", params: { sessionId: "nope", prompt: [{ type: "text", text: "x" }] } }, 404);
    assert.deepEqual([gone.error.code, gone.error.data.code], [-32002, "session_not_found"]);
    const init = await one({ jsonrpc: "2.0", id: "i", method: "initialize", params: { protocolVersion: 1 } }, 200);
    assert.equal(init.id, "i");

    // A notification: 202 and no body; an unknown one is ignored alike.
    const other = await post(h, agentId, { jsonrpc: "2.0", method: "$/cancel_request", params: { requestId: 1 } });
    assert.deepEqual([other.status, await other.text()], [202, ""]);
    // A cancel the runtime refuses is the contract's HTTP error.
    const refused = await post(h, agentId, { jsonrpc: "2.0", method: "session/cancel", params: { sessionId: "nope" } });
    assert.equal(refused.status, 404);
    assert.equal(JSON.parse(await refused.text()).error.code, "session_not_found");
    // Not ACP at all: 405, and the body bound.
    const get = await h.api("GET", `/agents/${agentId}/acp`);
    assert.equal(get.status, 405);
    const big = await post(h, agentId, JSON.stringify({ jsonrpc: "2.0", id: 7, method: "x", params: { pad: "x".repeat(1_100_000) } }));
    assert.equal(big.status, 413);
    await big.text();
  });

  test("each request's host metadata is stored on what it admits, and cancel binds to its principal", T, async () => {
    const agentId = `agent-${randomUUID()}`;
    const ada = { author: { id: "ada" } };
    const bob = { author: { id: "bob" } };
    const created = await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 1, method: "session/new", params: { cwd: "/", mcpServers: [] } }));
    const sessionId = created[0].result.sessionId;
    const tag = uniq("meta");
    h.model.scriptFor(tag, { hang: true, chunks: ["working"] });
    const prompt = (id, text, meta) =>
      post(h, agentId, { jsonrpc: "2.0", id, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text }] } }, { meta });
    const adaRes = await prompt(10, `ada asks ${tag}`, ada);
    assert.match(adaRes.headers.get("content-type"), /^text\/event-stream/);
    const adaMessages = [];
    const adaDone = readStream(adaRes, (m) => adaMessages.push(m));
    const bobRes = await prompt(11, "bob asks", bob);
    const bobDone = messagesOf(bobRes);
    await h.model.waitForRequests(1, { match: tag });

    const a = h.agent(agentId);
    const read = await a.read(sessionId);
    assert.deepEqual(read.messages.find((m) => m.role === "user").meta, ada);
    assert.equal(read.pending.length, 1);
    assert.deepEqual(read.pending[0].meta, bob);
    assert.match(read.pending[0].requestId, /^acp_/);

    // Bob's cancel takes Bob's queued prompt only: his stream answers cancelled.
    const bobCancel = await post(h, agentId, { jsonrpc: "2.0", method: "session/cancel", params: { sessionId } }, { meta: bob });
    assert.equal(bobCancel.status, 202);
    assert.deepEqual((await bobDone).at(-1), { jsonrpc: "2.0", id: 11, result: { stopReason: "cancelled" } });
    const after = await a.read(sessionId);
    assert.notEqual(after.running, null, "Ada's turn runs on");
    assert.equal(after.pending.length, 0);
    const adaCancel = await post(h, agentId, { jsonrpc: "2.0", method: "session/cancel", params: { sessionId } }, { meta: ada });
    assert.equal(adaCancel.status, 202);
    await adaDone;
    assert.deepEqual(adaMessages.at(-1), { jsonrpc: "2.0", id: 10, result: { stopReason: "cancelled" } });
    assert.ok(adaMessages.some((m) => m.params?.update?.content?.text === "working"), JSON.stringify(adaMessages));
    const settled = await a.settlement(sessionId, after.running.commandId, 0);
    assert.deepEqual(settled.json.meta, ada, "the cancellation's metadata");

    // A retried prompt under the same requestId replays its settled command.
    const retry = { sessionId, prompt: [{ type: "text", text: "again" }], _meta: { "shiitake/requestId": "r-fixed" } };
    h.model.scriptFor("again", { text: "once" });
    const first = await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 20, method: "session/prompt", params: retry }, { meta: ada }));
    assert.deepEqual(first.at(-1).result, { stopReason: "end_turn" });
    const second = await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 21, method: "session/prompt", params: retry }, { meta: ada }));
    assert.deepEqual(second, [{ jsonrpc: "2.0", id: 21, result: { stopReason: "end_turn" } }]);
    const conflict = await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 22, method: "session/prompt", params: retry }, { meta: bob }));
    assert.equal(conflict[0].error.data.code, "request_conflict", "other metadata under that requestId");
  });

  test("a prompt whose stream finds no free watcher is still admitted, and followed again by its requestId", T, async () => {
    const agentId = `agent-${randomUUID()}`;
    const a = h.agent(agentId);
    const created = await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 1, method: "session/new", params: { cwd: "/", mcpServers: [] } }));
    const sessionId = created[0].result.sessionId;
    const watches = [];
    for (let i = 0; i < 16; i++) watches.push(await a.watch(sessionId));
    const params = { sessionId, prompt: [{ type: "text", text: "crowded" }], _meta: { "shiitake/requestId": "r-crowded" } };
    const refused = await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 2, method: "session/prompt", params }));
    assert.equal(refused.length, 1);
    assert.equal(refused[0].id, 2);
    assert.deepEqual([refused[0].error.code, refused[0].error.data.code, refused[0].error.data.status], [-32000, "too_many_observers", 429]);
    const { commandId } = refused[0].error.data;
    assert.equal((await a.read(sessionId, { limit: 200 })).messages.find((m) => m.role === "user")?.commandId, commandId, "admitted");
    for (const w of watches) await w.close();
    // Once a watcher is free, the same requestId follows (or answers) that command.
    let answer;
    for (let i = 0; i < 100; i++) {
      answer = (await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 3, method: "session/prompt", params }))).at(-1);
      if (answer.error?.data?.code !== "too_many_observers") break;
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.deepEqual(answer, { jsonrpc: "2.0", id: 3, result: { stopReason: "end_turn" } });
  });

  test("hosted ACP Sessions use the Agent and Team layers, never the person's last switch", T, async () => {
    const agentId = `agent-${randomUUID()}`;
    const a = h.agent(agentId);
    assert.equal((await h.api("GET", `/direct/${agentId}/fixture/switch?model=${ANTHROPIC}`)).status, 200);
    // An HTTP Session follows the switch.
    await a.createSession("plain");
    const httpTag = uniq("http");
    assert.equal((await a.settle("plain", `p-${httpTag}`, `say ${httpTag}`)).terminal, "completed");
    assert.equal(h.model.requests(httpTag)[0].api, "anthropic");
    // An ACP Session does not: the Team default (SHIITAKE_MODEL).
    const created = await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 1, method: "session/new", params: { cwd: "/", mcpServers: [] } }));
    const sessionId = created[0].result.sessionId;
    const acpTag = uniq("acp-model");
    const out = await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 2, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text: `say ${acpTag}` }] } }));
    assert.deepEqual(out.at(-1).result, { stopReason: "end_turn" });
    const [request] = h.model.requests(acpTag);
    assert.deepEqual([request.api, request.body.model], ["openai", MODEL_NAME]);
    // Prompting an HTTP Session over ACP needs session/load, which hosts it from then on.
    const unloaded = await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 3, method: "session/prompt", params: { sessionId: "plain", prompt: [{ type: "text", text: "x" }] } }));
    assert.match(unloaded[0].error.message, /session\/load/);
    const loaded = await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 4, method: "session/load", params: { sessionId: "plain", cwd: "/", mcpServers: [] } }));
    assert.deepEqual(loaded.at(-1), { jsonrpc: "2.0", id: 4, result: {} });
    assert.equal(loaded[0].params.update.sessionUpdate, "user_message_chunk");
    const loadedTag = uniq("loaded");
    await messagesOf(await post(h, agentId, { jsonrpc: "2.0", id: 5, method: "session/prompt", params: { sessionId: "plain", prompt: [{ type: "text", text: `say ${loadedTag}` }] } }));
    assert.equal(h.model.requests(loadedTag)[0].api, "openai");
  });
});
