// The shiitake side of bench/sdk/compare.mjs for the figures that need to
// look inside the object: the demo Agent (js/demo.mjs) with its SQLite
// statements counted (ctx.storage.sql.exec wrapped after super(), as in
// bench/turn-worker.mjs), KV and alarm writes counted, and a bench-only
// hostFetch that seeds a transcript straight into the `messages` table.
// Everything else is served by the runtime unchanged.
import { Hono } from "hono";
import { ShiitakeDO } from "../../js/demo.mjs";
import { shiitakeApp } from "../../js/app.mjs";
import { bearerTokenAuth } from "../../js/bearer.mjs";
import { SqlCounter } from "../sql-counter.mjs";

export class BenchDO extends ShiitakeDO {
  #sql;
  #kv = 0;
  #alarm = 0;

  constructor(ctx, env) {
    super(ctx, env);
    this.#sql = new SqlCounter(ctx.storage.sql);
    const storage = ctx.storage;
    for (const name of ["put", "delete"]) {
      const original = storage[name].bind(storage);
      storage[name] = (key, ...rest) => {
        this.#kv += typeof key === "object" && key !== null ? (Array.isArray(key) ? key.length : Object.keys(key).length) : 1;
        return original(key, ...rest);
      };
    }
    if (storage.kv) {
      for (const name of ["put", "delete"]) {
        const original = storage.kv[name].bind(storage.kv);
        storage.kv[name] = (...args) => {
          this.#kv++;
          return original(...args);
        };
      }
    }
    for (const name of ["setAlarm", "deleteAlarm"]) {
      const original = storage[name].bind(storage);
      storage[name] = (...args) => {
        this.#alarm++;
        return original(...args);
      };
    }
  }

  hostFetch(request) {
    const url = new URL(request.url);
    if (!url.pathname.startsWith("/bench/")) return undefined;
    const route = url.pathname.slice("/bench/".length);
    if (route === "stats") {
      const { rowsWritten, rowsRead, statements } = this.#sql.stats();
      return Response.json({ rowsWritten, rowsRead, statements, kvWrites: this.#kv, alarmWrites: this.#alarm });
    }
    if (route === "reset") {
      this.#sql.reset();
      this.#kv = 0;
      this.#alarm = 0;
      return Response.json({ ok: true });
    }
    if (route === "dump") {
      const session = url.searchParams.get("session");
      const rows = this.ctx.storage.sql
        .exec("SELECT seq, body, bytes FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 4", session)
        .toArray();
      return Response.json(rows);
    }
    if (route === "seed") {
      // Appends `count` messages (user/assistant alternating, the body
      // format src/transcript.rs stores) after the Session's newest, in
      // batches inside this one request. The Session must exist.
      const session = url.searchParams.get("session");
      const count = Number(url.searchParams.get("count"));
      const sql = this.ctx.storage.sql;
      let seq = sql.exec("SELECT coalesce(max(seq), 0) AS s FROM messages WHERE session_id = ?", session).one().s + 1;
      const BATCH = 500;
      for (let done = 0; done < count; ) {
        const n = Math.min(BATCH, count - done);
        this.ctx.storage.transactionSync(() => {
          for (let i = 0; i < n; i++, seq++) {
            const body = seedBody(seq);
            sql.exec("INSERT INTO messages (session_id, seq, body, bytes) VALUES (?, ?, ?, ?)", session, seq, body, utf8Bytes(body));
          }
        });
        done += n;
      }
      const { n } = sql.exec("SELECT count(*) AS n FROM messages WHERE session_id = ?", session).one();
      return Response.json({ messages: n });
    }
    return undefined;
  }
}

const encoder = new TextEncoder();
const utf8Bytes = (s) => encoder.encode(s).length;

/**
 * A stored message body, in the format src/transcript.rs writes (the JSON the
 * read serves as is): a user prompt, or the assistant's answer to it.
 */
function seedBody(seq) {
  const createdAt = 1_700_000_000_000 + seq;
  if (seq % 2 === 1) {
    const commandId = `cmd_seed_${seq}`;
    const text = `prompt number ${seq}: a short seeded message of a realistic size`;
    return JSON.stringify({ entryId: `msg_${commandId}`, role: "user", text, requestId: `seed-${seq}`, commandId, createdAt });
  }
  const commandId = `cmd_seed_${seq - 1}`;
  const text = `answer number ${seq}: a short seeded message of a realistic size`;
  return JSON.stringify({ entryId: `msg_seed_${seq}`, role: "assistant", text, commandId, usage: { inputTokens: 12, outputTokens: 14 }, createdAt });
}

const app = new Hono();
app.use("/agents/*", ...bearerTokenAuth("SHIITAKE_TOKEN"));
app.all("/agents/:agentId/bench/*", (c) => {
  const ns = c.env.SHIITAKE;
  const url = new URL(c.req.url);
  url.pathname = url.pathname.replace(/^\/agents\/[^/]+/, "");
  return ns.get(ns.idFromName(c.req.param("agentId"))).fetch(new Request(url, { method: c.req.method }));
});
app.route("/agents/:agentId", shiitakeApp({ binding: "SHIITAKE" }));
export default app;
