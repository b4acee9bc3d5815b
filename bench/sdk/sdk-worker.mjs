// The Cloudflare Agents SDK side of bench/sdk/compare.mjs: the canonical
// AIChatAgent chat agent (README of @cloudflare/ai-chat: streamText over
// convertToModelMessages(this.messages), toUIMessageStreamResponse), with an
// OpenAI-compatible provider pointed at the bench's loopback model server.
//
// Bench-only additions, none on the chat path:
// - every ctx.storage.sql.exec cursor is kept (wrapped after super(), as
//   bench/turn-worker.mjs does for shiitake) so /bench/stats can report
//   statements and SQLite's own rowsWritten; KV puts/deletes and alarm writes
//   are counted too (a SQLite-backed object stores KV entries as rows);
// - /bench/seed inserts a transcript straight into the SDK's message table
//   (cf_agents_session_messages: a parent_id chain on the default session "");
// - /bench/newest reads the newest `limit` messages with the SDK's own
//   Sessions API (history({ newestFirst: true })), since the SDK serves no
//   paged read over HTTP (its GET .../get-messages streams the whole path);
// - /bench/abort resets the object (ctx.abort) so it rehydrates after a seed;
// - WsFloorDO (/ws-floor/:name): the WebSocket floor of an admission.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { AIChatAgent } from "@cloudflare/ai-chat";
import { routeAgentRequest } from "agents";
import { convertToModelMessages, streamText } from "ai";
import { DurableObject } from "cloudflare:workers";

export class ChatAgent extends AIChatAgent {
  constructor(ctx, env) {
    super(ctx, env);
    this.benchCursors = [];
    this.benchKv = 0;
    this.benchAlarm = 0;
    const sql = ctx.storage.sql;
    const exec = sql.exec.bind(sql);
    sql.exec = (...args) => {
      const cursor = exec(...args);
      this.benchCursors.push(cursor);
      return cursor;
    };
    const storage = ctx.storage;
    for (const name of ["put", "delete"]) {
      const original = storage[name].bind(storage);
      storage[name] = (key, ...rest) => {
        this.benchKv += typeof key === "object" && key !== null ? (Array.isArray(key) ? key.length : Object.keys(key).length) : 1;
        return original(key, ...rest);
      };
    }
    if (storage.kv) {
      for (const name of ["put", "delete"]) {
        const original = storage.kv[name].bind(storage.kv);
        storage.kv[name] = (...args) => {
          this.benchKv++;
          return original(...args);
        };
      }
    }
    for (const name of ["setAlarm", "deleteAlarm"]) {
      const original = storage[name].bind(storage);
      storage[name] = (...args) => {
        this.benchAlarm++;
        return original(...args);
      };
    }
  }

  async onChatMessage(_onFinish, options) {
    const provider = createOpenAICompatible({ name: "bench", baseURL: this.env.OPENAI_BASE_URL });
    const result = streamText({
      model: provider("bench"),
      messages: await convertToModelMessages(this.messages),
      abortSignal: options?.abortSignal,
    });
    return result.toUIMessageStreamResponse();
  }

  async onRequest(request) {
    const url = new URL(request.url);
    const route = url.pathname.split("/bench/")[1];
    if (route === "stats") {
      const rowsWritten = this.benchCursors.reduce((n, c) => n + c.rowsWritten, 0);
      return Response.json({
        rowsWritten,
        statements: this.benchCursors.length,
        kvWrites: this.benchKv,
        alarmWrites: this.benchAlarm,
      });
    }
    if (route === "reset") {
      this.benchCursors = [];
      this.benchKv = 0;
      this.benchAlarm = 0;
      return Response.json({ ok: true });
    }
    if (route === "seed") {
      // Appends `count` messages (user/assistant alternating) after the
      // session's current leaf, in batches inside this one request.
      const count = Number(url.searchParams.get("count"));
      const sql = this.ctx.storage.sql;
      const tail = sql
        .exec("SELECT id, seq FROM cf_agents_session_messages WHERE session_id = '' ORDER BY seq DESC LIMIT 1")
        .toArray()[0];
      let parent = tail?.id ?? null;
      let seq = (tail?.seq ?? 0) + 1;
      const now = Date.now();
      const BATCH = 500;
      for (let done = 0; done < count; ) {
        const n = Math.min(BATCH, count - done);
        this.ctx.storage.transactionSync(() => {
          for (let i = 0; i < n; i++, seq++) {
            const id = `seed_${seq}`;
            const role = seq % 2 === 1 ? "user" : "assistant";
            const text = `${role === "user" ? "prompt" : "answer"} number ${seq}: a short seeded message of a realistic size`;
            // The stored form of a chat message (as get-messages serves it).
            const parts = role === "user" ? [{ type: "text", text }] : [{ type: "step-start" }, { type: "text", text, state: "done" }];
            const content = JSON.stringify({ id, role, parts });
            sql.exec(
              `INSERT INTO cf_agents_session_messages
                 (session_id, id, seq, parent_id, role, content, content_chunks, token_estimate, created_at, content_hash)
               VALUES ('', ?, ?, ?, ?, ?, 0, ?, ?, NULL)`,
              id, seq, parent, role, content, Math.ceil(text.length / 4), now + seq,
            );
            parent = id;
          }
        });
        done += n;
      }
      const { n } = sql.exec("SELECT count(*) AS n FROM cf_agents_session_messages WHERE session_id = ''").one();
      return Response.json({ messages: n });
    }
    if (route === "newest") {
      const limit = Number(url.searchParams.get("limit") ?? 50);
      const messages = [];
      for await (const m of this.sessions.session().history({ newestFirst: true })) {
        messages.push(m);
        if (messages.length >= limit) break;
      }
      messages.reverse();
      return new Response(JSON.stringify({ messages }), { headers: { "content-type": "application/json" } });
    }
    if (route === "abort") {
      this.ctx.abort("bench: reset after seeding");
    }
    return new Response("not found", { status: 404 });
  }
}

/**
 * The WebSocket floor of an admission (bench only, no SDK code): a bare
 * object whose sockets are accepted with the hibernation API, as the Agents
 * SDK does; a prompt frame inserts one row, then the object tells the other
 * sockets (as AIChatAgent broadcasts its persisted messages to them).
 */
export class WsFloorDO extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS prompts (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, body TEXT NOT NULL, accepted_at INTEGER NOT NULL)",
    );
  }

  async fetch() {
    const pair = new WebSocketPair();
    this.ctx.acceptWebSocket(pair[1]);
    return new Response(null, { status: 101, webSocket: pair[0] });
  }

  webSocketMessage(ws, message) {
    const { id } = JSON.parse(message);
    this.ctx.storage.sql.exec("INSERT INTO prompts (id, body, accepted_at) VALUES (?, ?, ?)", id, message, Date.now());
    const ack = JSON.stringify({ type: "ack", id });
    for (const other of this.ctx.getWebSockets()) if (other !== ws) other.send(ack);
  }
}

export default {
  async fetch(request, env) {
    const floor = /^\/ws-floor\/([^/]+)$/.exec(new URL(request.url).pathname);
    if (floor) return env.WS_FLOOR.get(env.WS_FLOOR.idFromName(floor[1])).fetch(request);
    return (await routeAgentRequest(request, env)) ?? new Response("not found", { status: 404 });
  },
};
