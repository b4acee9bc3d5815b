// Worker for bench/mail.mjs: Agents of one fleet over their own namespace,
// as a user writes it (fleet() with an acceptMail), instrumented:
//   - acceptMail records when each mail (send or reply) reached this Agent
//     (`Date.now()`, one clock for every object of the one Miniflare);
//   - /agents/:id/bench/outbox?key= answers when the mail `key` was frozen
//     in this Agent's outbox (its `created_at`);
//   - /agents/:id/bench/accepted?key= answers when mail `key` was accepted here;
//   - /agents/:id/bench/count?on=1 and /bench/stats count the rows SQLite
//     reports written (`cursor.rowsWritten`) while counting is on, as
//     bench/extensions-worker.mjs does.
import { ShiitakeDO } from "../js/do.mjs";
import { shiitakeApp } from "../js/app.mjs";
import { bearerTokenAuth } from "../js/bearer.mjs";
import { SqlCounter } from "./sql-counter.mjs";
import { Hono } from "hono";

export class BenchDO extends ShiitakeDO {
  #sql;
  #accepted = new Map();

  constructor(ctx, env) {
    super(ctx, env);
    this.#sql = new SqlCounter(ctx.storage.sql);
    this.#sql.on = false;
  }

  fleet() {
    return {
      namespace: this.env.SHIITAKE,
      acceptMail: (mail) => {
        if (this.#accepted.size > 10_000) this.#accepted.clear();
        this.#accepted.set(mail.key, Date.now());
        return {};
      },
    };
  }

  async hostFetch(request) {
    const url = new URL(request.url);
    const key = url.searchParams.get("key");
    switch (url.pathname) {
      case "/bench/count":
        this.#sql.on = url.searchParams.get("on") === "1";
        this.#sql.reset();
        return Response.json({ counting: this.#sql.on });
      case "/bench/stats":
        const { rowsWritten, statements } = this.#sql.stats();
        return Response.json({ rowsWritten, statements });
      case "/bench/accepted":
        return Response.json({ at: this.#accepted.get(key) ?? null });
      case "/bench/outbox": {
        const row = this.ctx.storage.sql.exec("SELECT created_at FROM shiitake_mail_outbox WHERE key = ?", key).toArray()[0];
        return Response.json({ at: row?.created_at ?? null });
      }
      case "/bench/outbox-keys": {
        const rows = this.ctx.storage.sql.exec("SELECT key FROM shiitake_mail_outbox ORDER BY created_at").toArray();
        return Response.json({ keys: rows.map((r) => r.key) });
      }
    }
    return undefined;
  }
}

const app = new Hono();
app.use("/agents/*", ...bearerTokenAuth("SHIITAKE_TOKEN"));
app.all("/agents/:agentId/bench/*", (c) => {
  const ns = c.env.SHIITAKE;
  const url = new URL(c.req.url);
  const target = new URL(url.pathname.replace(/^\/agents\/[^/]+/, "") + url.search, url.origin);
  return ns.get(ns.idFromName(c.req.param("agentId"))).fetch(target);
});
app.route("/agents/:agentId", shiitakeApp({ binding: "SHIITAKE" }));
export default app;
