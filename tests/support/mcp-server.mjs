// Real MCP servers for the MCP client tests, built with the official
// TypeScript SDK (@modelcontextprotocol/sdk, pinned in package.json) and
// served over Streamable HTTP from a plain node:http server on 127.0.0.1
// (port 0). Stateful: the `initialize` POST creates one transport and one
// McpServer per MCP session (kept in a Map by Mcp-Session-Id, as in the SDK's
// stateful examples); later requests must carry that id.
//
//   import { startMcpServer } from "../support/mcp-server.mjs";
//   const mcp = await startMcpServer({ mode: "json", token: "t", pageSize: 2 });
//   mcp.url          // http://127.0.0.1:PORT/mcp
//   mcp.requests()   // [{method, path, headers, rpc, body, status}] every HTTP request:
//                    //   headers lower-case, rpc = body.method or null, body = parsed
//                    //   JSON (raw text if not JSON, null if none), status null until sent
//   mcp.calls()      // [{tool, arguments}] every tools/call a tool started on,
//                    //   arguments as the client sent them (undefined if omitted)
//   mcp.release()    // lets the hanging first slow-read / slow-write calls answer
//   mcp.addTool(name) // registers tool `name` (no arguments, answers `<name> ran`) on every
//                    //   session now and later: the SDK sends notifications/tools/list_changed,
//                    //   on the GET stream alone (none is open: no one hears it)
//   mcp.forgetSessions() // closes every session: its id answers 404 from now on
//   await mcp.close()
//
// Answers outside the SDK transport (everything else is the SDK's own):
//   401 + `WWW-Authenticate: Bearer` when `token` is set and the request lacks
//       `Authorization: Bearer <token>`;
//   400 (-32000) for a non-initialize request without Mcp-Session-Id,
//   404 (-32001 "Session not found") for an unknown or deleted session id,
//   404 for any path other than /mcp; all with a JSON-RPC error body.
//
// The tools (one table, below) are registered with McpServer.registerTool;
// `base: false` leaves the table out. `extra`: names of more tools, each
// without arguments answering `<name> ran`. `grow: true` adds the tool
// `grow` ({name}): it registers tool `name` as addTool does and sends
// notifications/tools/list_changed on its own response stream (the SDK
// sends a notification a handler sends there; `mode: "sse"` only).
// With `pageSize`, McpServer's tools/list (which never paginates) is replaced
// by a handler serving the same definitions in pages (cursor = start index).
//
// With `live: true`, two more tools (left out otherwise, so the listings
// other tests check stay as they are): `count-slowly` {steps, everyMs?}
// reports `notifications/progress` {progress, total} on the call's progress
// token every `everyMs` (default 60), then answers `counted <steps>` (an SSE
// server sends them on
// the call's response stream); `picture` {count} answers `count` 1x1 PNG
// image blocks after a text block.
//
// With `asks: true`, the tool `ask` (ASK_TOOLS below): the server's own
// requests to the client during a call. With `resumable: true`, the tool
// `outlive` (RESUMABLE_TOOLS below): a call whose stream the server closes.
//
// `slow-read` and `slow-write`: the first call of each (per server) hangs
// until release(), close(), the client cancelling it (notifications/cancelled)
// or the HTTP request that carried it closing early; it then answers `runs 1`
// (if anyone still listens). Later calls answer `runs <n>` at once.

import { randomUUID } from "node:crypto";
import http from "node:http";
import { InMemoryEventStore } from "@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { ErrorCode, isInitializeRequest, ListToolsRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js";
import * as z from "zod";

const text = (t) => ({ content: [{ type: "text", text: t }] });
const readOnly = { readOnlyHint: true };
const noArgs = z.object({});

/** Tool table: McpServer config (zod schemas) + `run(args, ctx)`; ctx = {state, hang}. */
const TOOLS = {
  "create-note": {
    config: {
      description: "Create a note.",
      inputSchema: z.object({ title: z.string(), body: z.string().optional() }),
    },
    run: ({ title }, { state }) => (state.notes.push(title), text(`created ${title}`)),
  },
  "list-notes": {
    config: { description: "List the note titles.", inputSchema: noArgs, annotations: readOnly },
    run: (_args, { state }) => text(JSON.stringify(state.notes)),
  },
  "note-count": {
    config: {
      description: "Count the notes.",
      inputSchema: noArgs,
      outputSchema: z.object({ count: z.number() }),
      annotations: readOnly,
    },
    // The SDK wants structuredContent to match outputSchema; the text form is for older clients.
    run: (_args, { state }) => ({
      ...text(JSON.stringify({ count: state.notes.length })),
      structuredContent: { count: state.notes.length },
    }),
  },
  fail: {
    config: { description: "Always fails.", inputSchema: noArgs },
    run: () => ({ isError: true, content: [{ type: "text", text: "it failed on purpose" }] }),
  },
  "odd-schema": {
    config: {
      description: "Takes a property outside a simple schema subset.",
      // -> {"value": {"anyOf": [{"type": "string", "description": "a text"}, {"type": "number", ...}]}}
      // (zod >= 4.6 folds an anyOf of bare types into `type: ["string", "number"]`;
      // a described member is not bare, so the anyOf stays.)
      inputSchema: z.object({
        value: z.union([z.string().describe("a text"), z.number().describe("a number")]).optional(),
      }),
    },
    run: () => text("ok"),
  },
  "slow-read": {
    config: { description: "First call hangs until released.", inputSchema: noArgs, annotations: readOnly },
    run: (_args, ctx) => ctx.hang("slow-read"),
  },
  "slow-write": {
    config: { description: "First call hangs until released.", inputSchema: noArgs },
    run: (_args, ctx) => ctx.hang("slow-write"),
  },
};

const PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/** The `live: true` tools; ctx.extra is the SDK's request context. */
const LIVE_TOOLS = {
  "count-slowly": {
    config: { description: "Counts slowly, reporting progress.", inputSchema: z.object({ steps: z.number(), everyMs: z.number().optional() }), annotations: readOnly },
    run: async ({ steps, everyMs = 60 }, { extra }) => {
      for (let n = 1; n <= steps; n++) {
        await new Promise((resolve) => setTimeout(resolve, everyMs));
        const progressToken = extra._meta?.progressToken;
        if (progressToken !== undefined) {
          await extra.sendNotification({ method: "notifications/progress", params: { progressToken, progress: n, total: steps } });
        }
      }
      return text(`counted ${steps}`);
    },
  },
  picture: {
    config: { description: "Takes pictures.", inputSchema: z.object({ count: z.number() }), annotations: readOnly },
    run: ({ count }) => ({
      content: [{ type: "text", text: `${count} picture(s)` }, ...Array.from({ length: count }, () => ({ type: "image", mimeType: "image/png", data: PNG_1X1 }))],
    }),
  },
};

/**
 * The `asks: true` tool: `ask` sends the client, on the call's own response
 * stream (`mode: "sse"`), a `ping`, an `elicitation/create` and a
 * `sampling/createMessage`, and answers how each was answered:
 * `<method>: answered` or `<method>: error <code> <message>`.
 */
const ASK_TOOLS = {
  ask: {
    config: { description: "Asks the client.", inputSchema: noArgs },
    run: async (_args, { extra }) => {
      const asked = [
        { method: "ping" },
        { method: "elicitation/create", params: { message: "Your name?", requestedSchema: { type: "object", properties: { name: { type: "string" } } } } },
        { method: "sampling/createMessage", params: { messages: [{ role: "user", content: { type: "text", text: "hi" } }], maxTokens: 8 } },
      ];
      const outcomes = [];
      for (const request of asked) {
        try {
          await extra.sendRequest(request, z.object({}).passthrough());
          outcomes.push(`${request.method}: answered`);
        } catch (e) {
          outcomes.push(`${request.method}: error ${e.code} ${e.message}`);
        }
      }
      return text(outcomes.join("\n"));
    },
  },
};

/**
 * The `resumable: true` tool (the transport then keeps an event store and
 * primes each stream with an event id and `retry: 200`): `outlive` closes
 * its own response stream at once (the SDK's `closeSSEStream`, offered to a
 * client speaking 2025-11-25), then reports progress and answers `outlived`
 * after 300 ms: a client hears either only by resuming the stream (GET with
 * Last-Event-ID), which the SDK serves from the event store.
 */
const RESUMABLE_TOOLS = {
  outlive: {
    config: { description: "Outlives its stream.", inputSchema: noArgs },
    run: async (_args, { extra }) => {
      if (extra.closeSSEStream === undefined) return { isError: true, content: [{ type: "text", text: "the stream cannot be closed" }] };
      extra.closeSSEStream();
      await new Promise((resolve) => setTimeout(resolve, 300));
      const progressToken = extra._meta?.progressToken;
      if (progressToken !== undefined) {
        await extra.sendNotification({ method: "notifications/progress", params: { progressToken, progress: 1, total: 1 } });
      }
      return text("outlived");
    },
  },
};

/** The tools/list entries, as McpServer would list them (same zod -> JSON Schema conversion). */
function toolList() {
  return Object.entries(TOOLS).map(([name, { config }]) => ({
    name,
    description: config.description,
    inputSchema: z.toJSONSchema(config.inputSchema, { target: "draft-7", io: "input" }),
    ...(config.annotations && { annotations: config.annotations }),
    execution: { taskSupport: "forbidden" },
    ...(config.outputSchema && {
      outputSchema: z.toJSONSchema(config.outputSchema, { target: "draft-7", io: "output" }),
    }),
  }));
}

const rpcError = (res, status, code, message, headers = {}) => {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
};

/**
 * A node:http server on 127.0.0.1:0 that records every request, reads its
 * body, then lets `handle(req, res, body)` answer; `body` is the parsed JSON,
 * null without a body, or the BAD_JSON symbol.
 */
const BAD_JSON = Symbol("bad JSON");
async function listen(handle) {
  const records = []; // {method, path, headers, rpc, body, res}
  const server = http.createServer(async (req, res) => {
    const rec = { method: req.method, path: req.url, headers: { ...req.headers }, rpc: null, body: null, res };
    records.push(rec);
    let raw = "";
    req.setEncoding("utf8");
    try {
      for await (const chunk of req) raw += chunk;
    } catch {
      return; // the client went away mid-body
    }
    let body = null;
    try {
      body = raw ? JSON.parse(raw) : null;
      rec.body = body;
      rec.rpc = typeof body?.method === "string" ? body.method : null;
    } catch {
      body = BAD_JSON;
      rec.body = raw;
    }
    try {
      await handle(req, res, body);
    } catch (err) {
      if (!res.headersSent) rpcError(res, 500, -32603, `Internal error: ${err.message}`);
      else res.destroy();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${server.address().port}`;
  return {
    origin,
    url: `${origin}/mcp`,
    // status: what the response's head says (200 for an SSE stream still open), null before it is sent.
    requests: () =>
      records.map(({ res, ...r }) => ({
        ...structuredClone(r),
        status: res.headersSent ? res.statusCode : null,
      })),
    close: async () => {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** An MCP server on 127.0.0.1 (port 0) built with the official SDK over Streamable HTTP, stateful (Mcp-Session-Id). */
export async function startMcpServer({ mode = "sse", token, pageSize, name = "test-notes", base = true, extra = [], grow = false, live = false, asks = false, resumable = false } = {}) {
  if (mode !== "sse" && mode !== "json") throw new Error(`mode must be "sse" or "json", not ${mode}`);
  const sessions = new Map(); // Mcp-Session-Id -> transport
  const servers = new Set(); // the McpServer of every live session
  const added = [...extra]; // names of the tools beyond the table
  const inflight = new Map(); // `${session} ${JSON id}` -> {signal, arguments} of a POSTed request
  const calls = [];
  const hung = new Set(); // resolve functions of hanging calls
  const runs = { "slow-read": 0, "slow-write": 0 };
  const state = { notes: [] };

  /** The hanging-first-call behaviour of slow-read / slow-write; any of `signals` aborting ends the hang. */
  const hang = async (tool, signals) => {
    const n = ++runs[tool];
    if (n === 1 && !signals.some((s) => s?.aborted)) {
      await new Promise((resolve) => {
        const done = () => (hung.delete(done), resolve());
        hung.add(done);
        for (const s of signals) s?.addEventListener("abort", done, { once: true });
      });
    }
    return text(`runs ${n}`);
  };

  const ran = (tool) => () => (calls.push({ tool, arguments: {} }), text(`${tool} ran`));
  const register = (mcp, tool) => mcp.registerTool(tool, { description: `The ${tool} tool.`, inputSchema: noArgs }, ran(tool));
  const addTool = (tool) => {
    added.push(tool);
    for (const mcp of servers) register(mcp, tool);
  };

  function newSession() {
    const mcp = new McpServer({ name, version: "1.0.0" });
    for (const [tool, { config, run }] of Object.entries({ ...(base ? TOOLS : {}), ...(live ? LIVE_TOOLS : {}), ...(asks ? ASK_TOOLS : {}), ...(resumable ? RESUMABLE_TOOLS : {}) })) {
      mcp.registerTool(tool, config, (args, extra) => {
        const sent = inflight.get(`${extra.sessionId} ${JSON.stringify(extra.requestId)}`);
        calls.push({ tool, arguments: structuredClone(sent ? sent.arguments : args) });
        // The SDK's signal aborts on notifications/cancelled (or the session closing), ours on HTTP close.
        const signals = [extra.signal, sent?.signal];
        return run(args, { state, hang: (t) => hang(t, signals), extra });
      });
    }
    for (const tool of added) register(mcp, tool);
    if (grow) {
      mcp.registerTool("grow", { description: "Adds a tool.", inputSchema: z.object({ name: z.string() }) }, async (args, extra) => {
        calls.push({ tool: "grow", arguments: args });
        addTool(args.name);
        await extra.sendNotification({ method: "notifications/tools/list_changed" });
        return text(`grew ${args.name}`);
      });
    }
    if (pageSize) {
      const all = toolList();
      mcp.server.setRequestHandler(ListToolsRequestSchema, (request) => {
        const cursor = request.params?.cursor;
        const start = cursor === undefined ? 0 : Number(cursor);
        if (!Number.isInteger(start) || start < 0 || start >= all.length) {
          throw new McpError(ErrorCode.InvalidParams, `Invalid cursor: ${cursor}`);
        }
        const end = start + pageSize;
        return { tools: all.slice(start, end), ...(end < all.length && { nextCursor: String(end) }) };
      });
    }
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: mode === "json",
      onsessioninitialized: (sid) => sessions.set(sid, transport),
      ...(resumable && { eventStore: new InMemoryEventStore(), retryInterval: 200 }),
    });
    transport.onclose = () => {
      // DELETE or close()
      sessions.delete(transport.sessionId);
      servers.delete(mcp);
    };
    servers.add(mcp);
    return { mcp, transport };
  }

  const srv = await listen(async (req, res, body) => {
    if (new URL(req.url, "http://x").pathname !== "/mcp") return rpcError(res, 404, -32000, "Not found");
    if (body === BAD_JSON) return rpcError(res, 400, -32700, "Parse error: Invalid JSON");
    if (token !== undefined && req.headers.authorization !== `Bearer ${token}`) {
      return rpcError(res, 401, -32001, "Unauthorized", { "www-authenticate": "Bearer" });
    }
    const sid = req.headers["mcp-session-id"];
    let transport = sid === undefined ? undefined : sessions.get(sid);
    if (sid === undefined && req.method === "POST" && isInitializeRequest(body)) {
      const session = newSession();
      await session.mcp.connect(session.transport);
      transport = session.transport;
    } else if (sid === undefined) {
      return rpcError(res, 400, -32000, "Bad Request: No valid session ID provided");
    } else if (!transport) {
      return rpcError(res, 404, -32001, "Session not found");
    }
    // Requests in this POST: an abort signal for when its HTTP request closes
    // before the answer is complete, and the arguments as sent.
    const keys = [];
    if (req.method === "POST" && sid !== undefined) {
      const ac = new AbortController();
      for (const m of [body].flat()) {
        if (m?.method && m.id !== undefined) {
          const key = `${sid} ${JSON.stringify(m.id)}`;
          inflight.set(key, { signal: ac.signal, arguments: m.params?.arguments });
          keys.push(key);
        }
      }
      res.on("close", () => {
        if (!res.writableFinished) ac.abort();
        for (const k of keys) inflight.delete(k);
      });
    }
    await transport.handleRequest(req, res, body);
  });

  return {
    url: srv.url,
    requests: srv.requests,
    calls: () => structuredClone(calls),
    release: () => [...hung].forEach((done) => done()),
    addTool,
    forgetSessions: () => Promise.all([...sessions.values()].map((t) => t.close())),
    close: async () => {
      [...hung].forEach((done) => done());
      await Promise.all([...sessions.values()].map((t) => t.close()));
      await srv.close();
    },
  };
}

/** Answers every request 307 to another URL on itself (which redirects again). */
export async function startRedirectServer() {
  const srv = await listen((req, res) => {
    res.writeHead(307, { location: `${srv.origin}/elsewhere${new URL(req.url, "http://x").pathname}` });
    res.end();
  });
  return { url: srv.url, requests: srv.requests, close: srv.close };
}

/** Accepts requests and never answers them (until close). */
export async function startHangingServer() {
  const srv = await listen(() => {});
  return { url: srv.url, requests: srv.requests, close: srv.close };
}
