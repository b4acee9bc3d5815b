// Worker for bench/sql-cost.mjs: one SQLite Durable Object that times its
// own `sql.exec` calls in a loop (each figure: µs per call over `n` calls,
// after 200 warm-up calls; workerd's clock advances only across I/O, so each
// timed loop sits between two `scheduler.wait(1)`s, whose 2 ms are taken
// off).
import { DurableObject } from "cloudflare:workers";

const WINDOW = `SELECT w.seq, w.bytes, m.body FROM (
    SELECT seq, bytes, sum(bytes) OVER (ORDER BY seq DESC ROWS UNBOUNDED PRECEDING) AS run
    FROM messages WHERE session_id = ?1 ORDER BY seq DESC LIMIT ?2
  ) w
  LEFT JOIN messages m ON m.session_id = ?1 AND m.seq = w.seq AND w.run <= ?3`;

export class CostDO extends DurableObject {
  async fetch(request) {
    const n = Number(new URL(request.url).searchParams.get("n") ?? 2000);
    const sql = this.ctx.storage.sql;
    sql.exec(
      "CREATE TABLE IF NOT EXISTS messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL, bytes INTEGER NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID",
    );
    const body = JSON.stringify({ role: "user", text: "x".repeat(60) });
    for (let i = 1; i <= 40; i++) sql.exec("INSERT OR REPLACE INTO messages VALUES (?, ?, ?, ?)", "s", i, body, body.length);
    const out = {};
    const time = async (name, f) => {
      for (let i = 0; i < 200; i++) f(i);
      await scheduler.wait(1);
      const t = Date.now();
      for (let i = 0; i < n; i++) f(i);
      await scheduler.wait(1);
      out[name] = ((Date.now() - t - 2) * 1000) / n;
    };
    const one = "SELECT seq FROM messages WHERE session_id = ? AND seq = ?";
    await time("one-row read, drained", (i) => sql.exec(one, "s", 1 + (i % 40)).toArray());
    // A cursor left before its end keeps its cached statement busy: the next
    // exec of the same text prepares it again.
    await time("one-row read, cursor left open", (i) => sql.exec(one, "s", 1 + (i % 40)));
    await time("40 rows with bodies, plain read", () => sql.exec("SELECT seq, bytes, body FROM messages WHERE session_id = ?1 ORDER BY seq DESC LIMIT ?2", "s", 200).raw().toArray());
    await time("40 rows, context window (Store::message_window)", () => sql.exec(WINDOW, "s", 200, 1e9).raw().toArray());
    return Response.json(out);
  }
}

export default {
  fetch(request, env) {
    return env.COST.get(env.COST.idFromName("cost")).fetch(request);
  },
};
