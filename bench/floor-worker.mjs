// The floor for the admission benchmark: the least a durable admission can
// cost on this runtime. Same entry shape as the demo Worker (Hono, bearer
// auth, one Durable Object per agentId by idFromName, DO-relative path), and a
// bare Durable Object that parses the command and inserts one SQLite row per
// request before answering a receipt.
import { Hono } from "hono";
import { bearerTokenAuth } from "../js/bearer.mjs";

export class FloorDO {
  constructor(ctx) {
    this.sql = ctx.storage.sql;
    this.sql.exec(
      `CREATE TABLE IF NOT EXISTS commands (
         seq INTEGER PRIMARY KEY AUTOINCREMENT,
         session_id TEXT NOT NULL,
         request_id TEXT NOT NULL,
         text TEXT NOT NULL,
         accepted_at INTEGER NOT NULL
       )`,
    );
  }

  async fetch(request) {
    const url = new URL(request.url);
    const m = /^\/sessions\/([^/]+)\/commands$/.exec(url.pathname);
    if (!m || request.method !== "POST") {
      return Response.json({ error: { code: "not_found", message: "no such route" } }, { status: 404 });
    }
    const cmd = await request.json();
    if (cmd.type === "replay") {
      // bench/memory-steps.mjs --texts: the SQL texts of an Agent, each run
      // once (NULL for every parameter) so that workerd keeps it prepared;
      // a failing run (a NOT NULL column) still leaves it prepared.
      for (const text of cmd.texts) {
        const params = Math.max(0, ...[...text.matchAll(/\?(\d*)/g)].map((m, i) => (m[1] ? Number(m[1]) : i + 1)));
        try {
          this.sql.exec(text, ...Array(params).fill(null)).toArray();
        } catch {}
      }
      return Response.json({ status: "replayed" });
    }
    if (cmd.type === "abort") return Response.json({ status: "cancelled", cancelled: [] });
    const row = this.sql
      .exec(
        "INSERT INTO commands (session_id, request_id, text, accepted_at) VALUES (?, ?, ?, ?) RETURNING seq",
        decodeURIComponent(m[1]),
        cmd.requestId,
        cmd.text,
        Date.now(),
      )
      .one();
    return Response.json({ status: "accepted", commandId: `floor_${row.seq}` });
  }
}

const app = new Hono();

app.use("/agents/*", ...bearerTokenAuth("SHIITAKE_TOKEN"));

app.all("/agents/:agentId/*", (c) => {
  const agentId = c.req.param("agentId");
  const url = new URL(c.req.url);
  url.pathname = url.pathname.slice(`/agents/${agentId}`.length);
  const stub = c.env.FLOOR.get(c.env.FLOOR.idFromName(agentId));
  const headers = new Headers(c.req.raw.headers);
  headers.delete("authorization");
  return stub.fetch(new Request(url, { method: c.req.method, headers, body: c.req.raw.body }));
});

export default app;
