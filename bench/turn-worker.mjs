// Worker for bench/turn.mjs. `CountingDO` is the real ShiitakeDO with its
// SQLite and alarm calls counted (the Rust core reads `ctx.storage.sql.exec`
// when it is built, so wrapping it here sees every statement); `/bench/*` is
// served by its hostFetch. `TurnFloorDO` is the floor of one turn on this
// runtime: fetch the model's streamed answer, insert one row, answer.
// `WatchFloorDO` is the floor of a watched turn with Shiitake's shape.
import { DurableObject } from "cloudflare:workers";
import { Hono } from "hono";
import { ShiitakeDO } from "../js/do.mjs";
import { shiitakeApp } from "../js/app.mjs";
import { bearerTokenAuth } from "../js/bearer.mjs";
import { SqlCounter } from "./sql-counter.mjs";

export class CountingDO extends ShiitakeDO {
  #sql;
  #alarmWrites = 0;

  constructor(ctx, env) {
    super(ctx, env);
    this.#sql = new SqlCounter(ctx.storage.sql);
    // Counting (and keeping texts) costs CPU per statement: only from the
    // first /bench/reset on, so the timed Agents run uncounted.
    this.#sql.on = false;
    this.#sql.texts = true;
    for (const name of ["setAlarm", "deleteAlarm"]) {
      const original = ctx.storage[name].bind(ctx.storage);
      ctx.storage[name] = (...args) => {
        this.#alarmWrites++;
        return original(...args);
      };
    }
  }

  async hostFetch(request) {
    const { pathname } = new URL(request.url);
    if (pathname === "/bench/stats") {
      return Response.json({ ...this.#sql.stats(), alarmWrites: this.#alarmWrites });
    }
    if (pathname === "/bench/size") {
      const sql = this.ctx.storage.sql;
      const { payload, messages } = sql.exec("SELECT coalesce(sum(bytes), 0) AS payload, count(*) AS messages FROM messages").one();
      return Response.json({ databaseSize: sql.databaseSize, payload, messages });
    }
    if (pathname === "/bench/reset") {
      this.#sql.on = true;
      this.#sql.reset();
      this.#alarmWrites = 0;
      return Response.json({ ok: true });
    }
    return undefined;
  }
}

export class TurnFloorDO extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS answers (seq INTEGER PRIMARY KEY, text TEXT NOT NULL)");
  }

  async fetch(request) {
    const { text } = await request.json();
    const response = await fetch(`${this.env.OPENAI_BASE_URL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "scripted", stream: true, messages: [{ role: "user", content: text }] }),
    });
    const answer = await response.text();
    this.ctx.storage.sql.exec("INSERT INTO answers (text) VALUES (?)", answer);
    return Response.json({ bytes: answer.length });
  }
}

// The floor of an alarm-driven turn: the request stores the prompt and sets
// the alarm; the alarm fetches the answer, stores it, and reports the turn
// done over loopback (BENCH_NOTIFY_URL), like a watcher's frame.
export class AlarmFloorDO extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS turns (seq INTEGER PRIMARY KEY, text TEXT NOT NULL, answer TEXT)",
    );
  }

  async fetch(request) {
    const { text } = await request.json();
    const { seq } = this.ctx.storage.sql.exec("INSERT INTO turns (text) VALUES (?) RETURNING seq", text).one();
    this.ctx.storage.setAlarm(Date.now());
    return Response.json({ seq });
  }

  async alarm() {
    for (const { seq, text } of this.ctx.storage.sql.exec("SELECT seq, text FROM turns WHERE answer IS NULL").toArray()) {
      const response = await fetch(`${this.env.OPENAI_BASE_URL}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "scripted", stream: true, messages: [{ role: "user", content: text }] }),
      });
      this.ctx.storage.sql.exec("UPDATE turns SET answer = ? WHERE seq = ?", await response.text(), seq);
      await fetch(`${this.env.BENCH_NOTIFY_URL}?seq=${seq}`);
    }
  }
}

// The floor of a watched, durable turn: the same shape as a Shiitake turn
// with none of its runtime. A watch request holds an SSE stream open; a
// prompt request inserts the prompt, sets the alarm to now (the durable
// wake) and answers; one macrotask later the turn fetches the streamed
// answer, sends a `delta` frame per network read, stores the answer and
// sends a `settled` frame (the frames bench/watch.mjs reads). The alarm, if
// it fires during the turn, waits for it, as Shiitake's joins its loop.
export class WatchFloorDO extends DurableObject {
  #watchers = new Set();
  #turn = null;

  constructor(ctx, env) {
    super(ctx, env);
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS turns (seq INTEGER PRIMARY KEY, text TEXT NOT NULL, answer TEXT)",
    );
  }

  async fetch(request) {
    if (request.method === "GET") {
      const { readable, writable } = new TransformStream();
      const writer = writable.getWriter();
      this.#watchers.add(writer);
      writer.closed.catch(() => {}).finally(() => this.#watchers.delete(writer));
      return new Response(readable, { headers: { "content-type": "text/event-stream" } });
    }
    const { text } = await request.json();
    const { seq } = this.ctx.storage.sql.exec("INSERT INTO turns (text) VALUES (?) RETURNING seq", text).one();
    this.ctx.storage.setAlarm(Date.now());
    this.#turn = new Promise((resolve) => setTimeout(resolve, 0)).then(() => this.#run(seq, text));
    return Response.json({ status: "accepted", commandId: `floor_${seq}` });
  }

  #send(frame) {
    const bytes = new TextEncoder().encode(`event: frame\ndata: ${JSON.stringify(frame)}\n\n`);
    for (const w of this.#watchers) w.write(bytes).catch(() => this.#watchers.delete(w));
  }

  async #run(seq, text) {
    const response = await fetch(`${this.env.OPENAI_BASE_URL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "scripted", stream: true, messages: [{ role: "user", content: text }] }),
    });
    const decoder = new TextDecoder();
    let answer = "";
    for await (const chunk of response.body) {
      const delta = decoder.decode(chunk, { stream: true });
      answer += delta;
      this.#send({ type: "delta", text: delta });
    }
    this.ctx.storage.sql.exec("UPDATE turns SET answer = ? WHERE seq = ?", answer, seq);
    this.#send({ type: "settled", settlement: { commandId: `floor_${seq}`, terminal: "completed" } });
  }

  async alarm() {
    await this.#turn;
  }
}

const app = new Hono();
app.use("/agents/*", ...bearerTokenAuth("SHIITAKE_TOKEN"));
app.post("/agents/:agentId/floor", (c) => {
  const ns = c.env.FLOOR;
  return ns.get(ns.idFromName(c.req.param("agentId"))).fetch(c.req.raw);
});
app.post("/agents/:agentId/alarmfloor", (c) => {
  const ns = c.env.ALARM_FLOOR;
  return ns.get(ns.idFromName(c.req.param("agentId"))).fetch(c.req.raw);
});
app.on(["GET", "POST"], "/agents/:agentId/watchfloor", (c) => {
  const ns = c.env.WATCH_FLOOR;
  return ns.get(ns.idFromName(c.req.param("agentId"))).fetch(c.req.raw);
});
app.all("/agents/:agentId/bench/*", (c) => {
  const ns = c.env.SHIITAKE;
  const url = new URL(c.req.url);
  return ns.get(ns.idFromName(c.req.param("agentId"))).fetch(new URL(url.pathname.replace(/^\/agents\/[^/]+/, ""), url.origin));
});
app.route("/agents/:agentId", shiitakeApp({ binding: "SHIITAKE" }));
export default app;
