// Worker for bench/extensions.mjs: the same host three times, as a user
// writes it: with the `goal` extension (examples/extensions/goal.mjs), with
// `goal` cut down to its settled hook (`goalHook` below: the same state,
// `set` command, settled hook and Session projection, without the prompt and
// tools hooks that run on every model call), and without extensions.
// bench/extensions.mjs runs this script as one Worker per side in one
// Miniflare, binding SHIITAKE to `GoalDO`, `HookDO` or `PlainDO`, so the only
// difference between the sides is extensions().
//
// Both classes count the rows SQLite reports written (`cursor.rowsWritten`,
// as bench/turn-worker.mjs does) while counting is on: `/agents/:id/bench/
// count?on=1` starts it afresh, `/agents/:id/bench/stats` reads it. Counting
// is off during the timed turns (the wrapper then only forwards the call).
import { Hono } from "hono";
import { ShiitakeDO } from "../js/do.mjs";
import { shiitakeApp } from "../js/app.mjs";
import { bearerTokenAuth } from "../js/bearer.mjs";
import { SqlCounter } from "./sql-counter.mjs";
import { defineCollection, defineExtension } from "../js/extensions.mjs";
import { goal } from "../examples/extensions/goal.mjs";

// goal.mjs's row schema, command and settled hook, verbatim.
const Goal = {
  type: "object",
  additionalProperties: false,
  required: ["text", "status", "setAt", "turns", "startedAfter"],
  properties: {
    text: { type: "string", minLength: 1, maxLength: 500 },
    status: { enum: ["active", "achieved", "abandoned"] },
    setAt: { type: "integer" },
    turns: { type: "integer", minimum: 0 },
    completed: { type: "integer", minimum: 0 },
    startedAfter: { type: "integer", minimum: 0 },
    endedAfter: { type: "integer", minimum: 0 },
    endedAt: { type: "integer" },
  },
};

const goalHook = defineExtension({ id: "goal", version: "1.0.0" })
  .state({ goals: defineCollection(Goal) })
  .command(
    "set",
    {
      description: "Set this conversation's goal (replaces an earlier one).",
      input: { type: "object", additionalProperties: false, required: ["text"], properties: { text: { type: "string", minLength: 1, maxLength: 500 } } },
    },
    (ctx, { text }) =>
      ctx.state.update((s) => {
        s.goals.put(ctx.session.id, { text, status: "active", setAt: ctx.now, turns: 0, completed: 0, startedAfter: ctx.session.position });
        return { text, status: "active" };
      }),
  )
  .onSettled((ctx, event) => {
    ctx.state.update((s) => {
      const current = s.goals.get(event.sessionId);
      if (current === undefined || current.status !== "active") return;
      s.goals.put(event.sessionId, {
        ...current,
        turns: current.turns + 1,
        completed: (current.completed ?? 0) + (event.terminal === "completed" ? 1 : 0),
      });
    });
  })
  // Read by the benchmark to check that every turn was counted.
  .projection({
    scope: "session",
    read: (ctx) => ctx.state.read((s) => s.goals.get(ctx.session.id)),
  });

function counted(Base) {
  return class extends Base {
    #sql;

    constructor(ctx, env) {
      super(ctx, env);
      this.#sql = new SqlCounter(ctx.storage.sql);
      this.#sql.on = false;
    }

    async hostFetch(request) {
      const url = new URL(request.url);
      if (url.pathname === "/bench/count") {
        this.#sql.on = url.searchParams.get("on") === "1";
        this.#sql.reset();
        return Response.json({ counting: this.#sql.on });
      }
      if (url.pathname === "/bench/stats") {
        const { rowsWritten, statements } = this.#sql.stats();
        return Response.json({ rowsWritten, statements });
      }
      return undefined;
    }
  };
}

/** The host without extensions: a plain ShiitakeDO subclass. */
export class PlainDO extends counted(ShiitakeDO) {}

/** The same host with the goal extension. */
export class GoalDO extends counted(ShiitakeDO) {
  extensions() {
    return [goal];
  }
}

/** The same host with goal's settled hook alone. */
export class HookDO extends counted(ShiitakeDO) {
  extensions() {
    return [goalHook];
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
