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

// The core tables admission reads, as src/store/schema.rs makes them.
const ADMISSION_SCHEMA = [
  "CREATE TABLE IF NOT EXISTS sessions (seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL UNIQUE, created_at INTEGER NOT NULL, head INTEGER, head_at INTEGER, base_session TEXT, base_seq INTEGER)",
  `CREATE TABLE IF NOT EXISTS commands (session_id TEXT NOT NULL, seq INTEGER NOT NULL, command_id TEXT NOT NULL, request_id TEXT, kind TEXT NOT NULL,
    input TEXT NOT NULL, meta TEXT, state TEXT NOT NULL, terminal TEXT, accepted_at INTEGER NOT NULL, settled_at INTEGER, turn_id TEXT,
    attempt INTEGER NOT NULL DEFAULT 0, started_at INTEGER, retry_at INTEGER, last_error TEXT, usage TEXT, settlement TEXT, anchor INTEGER,
    PRIMARY KEY (session_id, seq)) WITHOUT ROWID`,
  "CREATE UNIQUE INDEX IF NOT EXISTS commands_by_request ON commands (session_id, request_id) WHERE request_id IS NOT NULL",
  "CREATE INDEX IF NOT EXISTS commands_unsettled ON commands (session_id, seq) WHERE settled_at IS NULL",
  "CREATE TABLE IF NOT EXISTS fences (session_id TEXT NOT NULL, request_id TEXT NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (session_id, request_id)) WITHOUT ROWID",
];
const PENDING_SCAN = `(SELECT count(*) AS n, coalesce(sum(octet_length(input)), 0) AS bytes FROM commands INDEXED BY commands_unsettled
    WHERE session_id = ?1 AND settled_at IS NULL AND state = 'pending') p`;
const COMMAND_COLUMNS = "session_id, seq, command_id, request_id, kind, input, meta, state, terminal, accepted_at, turn_id, attempt, started_at, retry_at, last_error, usage, settlement, anchor";
const admissionFacts = (pending) => `SELECT
    EXISTS (SELECT 1 FROM sessions WHERE session_id = ?1),
    EXISTS (SELECT 1 FROM fences WHERE session_id = ?1 AND request_id = ?2),
    p.n, p.bytes,
    coalesce((SELECT seq FROM commands WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1), 0) + 1,
    EXISTS (SELECT 1 FROM commands INDEXED BY commands_unsettled WHERE session_id = ?1 AND settled_at IS NULL AND state = 'running'),
    ${COMMAND_COLUMNS.split(", ").map((c) => `c.${c}`).join(", ")}
  FROM ${pending} LEFT JOIN commands c ON c.session_id = ?1 AND c.request_id = ?2`;

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
    // Admission's read (`Store::admission_facts`) in a Session running one
    // command with 39 queued, and the same without its scan of the queue
    // for the pending count and bytes (a lower bound for any maintained
    // count, which would add a row write to admission, start and cancel).
    for (const ddl of ADMISSION_SCHEMA) sql.exec(ddl);
    sql.exec("INSERT OR IGNORE INTO sessions (session_id, created_at) VALUES ('s', 1)");
    for (let i = 1; i <= 40; i++) {
      const input = JSON.stringify({ text: `benchmark prompt number ${i}: summarise the day's notes` });
      sql.exec(
        "INSERT OR REPLACE INTO commands (session_id, seq, command_id, request_id, kind, input, state, accepted_at) VALUES ('s', ?, ?, ?, 'prompt', ?, ?, 1)",
        i,
        `cmd_${i}`,
        `req-${i}`,
        input,
        i === 1 ? "running" : "pending",
      );
    }
    await time("admission facts, 39 pending", (i) => sql.exec(admissionFacts(PENDING_SCAN), "s", `r${i}`).raw().toArray());
    await time("admission facts without the pending scan", (i) => sql.exec(admissionFacts("(SELECT 0 AS n, 0 AS bytes) p"), "s", `r${i}`).raw().toArray());
    return Response.json(out);
  }
}

export default {
  fetch(request, env) {
    return env.COST.get(env.COST.idFromName("cost")).fetch(request);
  },
};
