// Worker for bench/admission-sql.mjs: a bare SQLite Durable Object behind the
// floor's entry (Hono, bearer auth, idFromName) that admits a prompt with
// Shiitake's own statements from plain JS, in one of several layouts picked
// by the Agent name (`/agents/bench-<layout>`):
//   floor    one row insert (bench/floor-worker.mjs's statement)
//   scan     the admission facts query as `Store::admission_facts` spells it
//            (the pending count and bytes read from the index of unsettled
//            commands, schema 8), then the command insert as
//            `Store::insert_command` spells it
//   noscan   the same without the scan (constants: a lower bound, not correct)
//   counters the count and bytes read from columns on `sessions`, kept by
//            triggers on `commands`
// An abort settles the Session's unsettled commands, as a cancel does.
import { Hono } from "hono";
import { bearerTokenAuth } from "../js/bearer.mjs";

const C_COLUMNS = "c.command_id, c.kind, c.input, c.meta";
const SCHEMA = [
  `CREATE TABLE IF NOT EXISTS sessions (seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL UNIQUE, created_at INTEGER NOT NULL, head INTEGER, head_at INTEGER, base_session TEXT, base_seq INTEGER, pending_count INTEGER NOT NULL DEFAULT 0, pending_bytes INTEGER NOT NULL DEFAULT 0)`,
  `CREATE TABLE IF NOT EXISTS commands (session_id TEXT NOT NULL, seq INTEGER NOT NULL, command_id TEXT NOT NULL, request_id TEXT, kind TEXT NOT NULL, input TEXT NOT NULL, meta TEXT, state TEXT NOT NULL, terminal TEXT, accepted_at INTEGER NOT NULL, settled_at INTEGER, turn_id TEXT, attempt INTEGER NOT NULL DEFAULT 0, started_at INTEGER, retry_at INTEGER, last_error TEXT, usage TEXT, settlement TEXT, anchor INTEGER, input_bytes INTEGER, PRIMARY KEY (session_id, seq)) WITHOUT ROWID`,
  `CREATE UNIQUE INDEX IF NOT EXISTS commands_by_request ON commands (session_id, request_id) WHERE request_id IS NOT NULL`,
  `CREATE INDEX IF NOT EXISTS commands_unsettled ON commands (session_id, seq, state, input_bytes, settled_at) WHERE settled_at IS NULL`,
  `CREATE TABLE IF NOT EXISTS fences (session_id TEXT NOT NULL, request_id TEXT NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (session_id, request_id)) WITHOUT ROWID`,
];
const TRIGGERS = [
  `CREATE TRIGGER IF NOT EXISTS commands_pending_in AFTER INSERT ON commands WHEN NEW.state = 'pending' BEGIN
     UPDATE sessions SET pending_count = pending_count + 1, pending_bytes = pending_bytes + octet_length(NEW.input) WHERE session_id = NEW.session_id; END`,
  `CREATE TRIGGER IF NOT EXISTS commands_pending_out AFTER UPDATE OF state ON commands WHEN OLD.state = 'pending' AND NEW.state <> 'pending' BEGIN
     UPDATE sessions SET pending_count = pending_count - 1, pending_bytes = pending_bytes - octet_length(OLD.input) WHERE session_id = OLD.session_id; END`,
];
const queue = (p) => `SELECT EXISTS (SELECT 1 FROM sessions WHERE session_id = ?1),
  EXISTS (SELECT 1 FROM fences WHERE session_id = ?1 AND request_id = ?2), p.n, p.bytes,
  coalesce((SELECT seq FROM commands WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1), 0) + 1,
  EXISTS (SELECT 1 FROM commands INDEXED BY commands_unsettled WHERE session_id = ?1 AND settled_at IS NULL AND state = 'running'),
  ${C_COLUMNS} FROM ${p} LEFT JOIN commands c ON c.session_id = ?1 AND c.request_id = ?2`;
const FACTS = {
  scan: queue(`(SELECT count(*) AS n, coalesce(sum(input_bytes), 0) AS bytes FROM commands INDEXED BY commands_unsettled
      WHERE session_id = ?1 AND settled_at IS NULL AND state = 'pending') p`),
  noscan: queue("(SELECT 0 AS n, 0 AS bytes) p"),
  counters: `SELECT s.seq IS NOT NULL,
    EXISTS (SELECT 1 FROM fences WHERE session_id = ?1 AND request_id = ?2), coalesce(s.pending_count, 0), coalesce(s.pending_bytes, 0),
    coalesce((SELECT seq FROM commands WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1), 0) + 1,
    EXISTS (SELECT 1 FROM commands INDEXED BY commands_unsettled WHERE session_id = ?1 AND settled_at IS NULL AND state = 'running'),
    ${C_COLUMNS} FROM (SELECT 1) LEFT JOIN sessions s ON s.session_id = ?1 LEFT JOIN commands c ON c.session_id = ?1 AND c.request_id = ?2`,
};
const INSERT = `INSERT INTO commands (session_id, seq, command_id, request_id, kind, input, meta, state, terminal, accepted_at, settled_at, settlement, attempt, started_at, anchor, input_bytes)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, octet_length(?6))`;

export class StatementsDO {
  constructor(ctx) {
    this.sql = ctx.storage.sql;
    this.ctx = ctx;
  }

  async fetch(request) {
    const url = new URL(request.url);
    const layout = url.searchParams.get("layout");
    if (!this.ready) {
      if (layout === "floor") {
        this.sql.exec("CREATE TABLE IF NOT EXISTS commands (seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, request_id TEXT NOT NULL, text TEXT NOT NULL, accepted_at INTEGER NOT NULL)");
      } else {
        for (const s of SCHEMA) this.sql.exec(s);
        if (layout === "counters") for (const s of TRIGGERS) this.sql.exec(s);
      }
      this.ready = true;
    }
    const sessions = /^\/sessions$/.exec(url.pathname);
    if (sessions) {
      const { sessionId } = await request.json();
      if (layout !== "floor") this.sql.exec("INSERT INTO sessions (session_id, created_at) VALUES (?, ?)", sessionId, Date.now());
      return Response.json({ sessionId }, { status: 201 });
    }
    const m = /^\/sessions\/([^/]+)\/commands$/.exec(url.pathname);
    const cmd = await request.json();
    const session = decodeURIComponent(m[1]);
    if (cmd.type === "abort") {
      if (layout !== "floor") this.sql.exec("UPDATE commands SET state = 'settled', terminal = 'cancelled', settled_at = ? WHERE session_id = ? AND settled_at IS NULL", Date.now(), session);
      return Response.json({ status: "cancelled", cancelled: [] });
    }
    if (layout === "floor") {
      const row = this.sql.exec("INSERT INTO commands (session_id, request_id, text, accepted_at) VALUES (?, ?, ?, ?) RETURNING seq", session, cmd.requestId, cmd.text, Date.now()).one();
      return Response.json({ status: "accepted", commandId: `floor_${row.seq}` });
    }
    const f = this.sql.exec(FACTS[layout], session, cmd.requestId).raw().toArray()[0];
    if (f[0] !== 1 || f[1] !== 0 || f[6] !== null) return Response.json({ error: "unexpected facts" }, { status: 500 });
    const input = JSON.stringify({ text: cmd.text });
    if (f[2] >= 64 || f[3] + input.length > 2097152) return Response.json({ error: "queue_full" }, { status: 429 });
    const running = f[5] === 0 && f[2] === 0;
    const seq = f[4];
    const id = `cmd_${seq}`;
    const now = Date.now();
    this.sql.exec(INSERT, session, seq, id, cmd.requestId, "prompt", input, null, running ? "running" : "pending", null, now, null, null, running ? 1 : 0, running ? now : null, null);
    return Response.json({ status: "accepted", commandId: id });
  }
}

const app = new Hono();
app.use("/agents/*", ...bearerTokenAuth("SHIITAKE_TOKEN"));
app.all("/agents/:agentId/*", (c) => {
  const agentId = c.req.param("agentId");
  const url = new URL(c.req.url);
  url.pathname = url.pathname.slice(`/agents/${agentId}`.length);
  url.searchParams.set("layout", agentId.replace(/^bench-/, ""));
  const stub = c.env.STATEMENTS.get(c.env.STATEMENTS.idFromName(agentId));
  const headers = new Headers(c.req.raw.headers);
  headers.delete("authorization");
  return stub.fetch(new Request(url, { method: c.req.method, headers, body: c.req.raw.body }));
});
export default app;
