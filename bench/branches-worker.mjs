// Worker for bench/branches.mjs: the real ShiitakeDO with what it asks of
// SQLite counted (from the first /bench/reset on) and, through its
// hostFetch:
//   POST /bench/seed {session, messages, branches}: a Session holding
//        `messages` messages written straight into its table (user and
//        assistant in turn, ~500 bytes each); with `branches`, every
//        (messages / branches)-th message starts a branch after the one
//        two before it (a retried answer: the old one left off the path).
//   GET  /bench/time?op=read|create|fork&session&n&limit: `n` calls of the
//        owner API timed inside the object, in µs per call (workerd's clock
//        moves only across I/O: the loop sits between two scheduler.wait(1)
//        whose 2 ms are taken off).
//   POST /bench/reset, GET /bench/stats: the SqlCounter.
// Served at /direct/:agentId/bench/... (tests/e2e/fixtures/host-app.mjs).
import { ShiitakeDO as Base } from "../js/do.mjs";
import { hostApp } from "../tests/e2e/fixtures/host-app.mjs";
import { SqlCounter } from "./sql-counter.mjs";

const TEXT = "lorem ipsum dolor sit amet ".repeat(17);

export class ShiitakeDO extends Base {
  #sql;
  #made = 0;

  constructor(ctx, env) {
    super(ctx, env);
    this.#sql = new SqlCounter(ctx.storage.sql);
    this.#sql.on = false;
  }

  async hostFetch(request) {
    const url = new URL(request.url);
    switch (url.pathname) {
      case "/bench/reset":
        this.#sql.on = true;
        this.#sql.reset();
        return Response.json({ ok: true });
      case "/bench/stats":
        return Response.json(this.#sql.stats());
      case "/bench/seed":
        return Response.json(await this.#seed(await request.json()));
      case "/bench/time":
        return Response.json(await this.#time(url.searchParams));
      default:
        return undefined;
    }
  }

  async #seed({ session, messages, branches = 0 }) {
    await this.agent.createSession(session);
    const sql = this.ctx.storage.sql;
    const every = branches > 0 ? Math.floor(messages / branches) : 0;
    const on = this.#sql.on;
    this.#sql.on = false;
    for (let from = 1; from <= messages; from += 10_000) {
      this.ctx.storage.transactionSync(() => {
        for (let seq = from; seq < Math.min(from + 10_000, messages + 1); seq++) {
          const role = seq % 2 === 1 ? "user" : "assistant";
          const body = JSON.stringify({ entryId: `m_${session}_${seq}`, role, text: `${seq} ${TEXT}`, createdAt: seq });
          const parent = every > 0 && seq > 2 && seq % every === 0 ? seq - 2 : null;
          sql.exec("INSERT INTO messages (session_id, seq, body, bytes, parent) VALUES (?, ?, ?, ?, ?)", session, seq, body, body.length, parent);
        }
      });
    }
    this.#sql.on = on;
    const newest = (await this.agent.session(session).read({ limit: 1 })).messages[0];
    return { newest: newest.entryId };
  }

  async #time(params) {
    const op = params.get("op");
    const n = Number(params.get("n") ?? 100);
    const session = params.get("session");
    const limit = Number(params.get("limit") ?? 50);
    const entryId = params.get("entryId");
    const once = {
      read: () => this.agent.session(session).read({ limit }),
      create: () => this.agent.createSession(`made-${this.#made++}`),
      fork: () => this.agent.createSession(`made-${this.#made++}`, { from: { sessionId: session, entryId } }),
    }[op];
    await once(); // warm
    await scheduler.wait(1);
    const t = Date.now();
    for (let i = 0; i < n; i++) await once();
    await scheduler.wait(1);
    return { us: ((Date.now() - t - 2) * 1000) / n };
  }
}

export default hostApp();
