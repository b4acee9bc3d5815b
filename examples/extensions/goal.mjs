// The `goal` extension: a Session's goal, set by a command, its progress
// projected to clients, the model reminded of it in every call and able to
// end it itself (a command offered as a tool). Ending it records the
// Session position read inside the ending transaction (`ctx.sessionPosition`),
// so a client draws the ending line exactly after the last entry that counted
// (its client entry: goal.client.mjs).
//
//   import { goal } from "shiitake/examples/goal"   (this file)
//   class Agent extends ShiitakeDO { extensions() { return [goal]; } }
//
//   POST /sessions/:id/extensions/goal/commands/set  {"input": {"text": "Ship the release notes"}}
//   POST /sessions/:id/extensions/goal/commands/end  {"input": {"status": "achieved"}}
import { defineCollection, defineExtension } from "../../js/extensions.mjs";

// JSON Schemas: the core validates every row and input against them.
const Goal = {
  type: "object",
  additionalProperties: false,
  required: ["text", "status", "setAt", "turns", "startedAfter"],
  properties: {
    text: { type: "string", minLength: 1, maxLength: 500 },
    status: { enum: ["active", "achieved", "abandoned"] },
    setAt: { type: "integer" },
    // Settled turns of this Session since the goal was set.
    turns: { type: "integer", minimum: 0 },
    completed: { type: "integer", minimum: 0 },
    // Session positions (the newest entry's sequence) at set and end.
    startedAfter: { type: "integer", minimum: 0 },
    endedAfter: { type: "integer", minimum: 0 },
    endedAt: { type: "integer" },
  },
};

export const goal = defineExtension({ id: "goal", version: "1.0.0" })
  .state({ goals: defineCollection(Goal) }) // keyed by Session id
  .command(
    "set",
    {
      description: "Set this conversation's goal (replaces an earlier one).",
      input: { type: "object", additionalProperties: false, required: ["text"], properties: { text: { type: "string", minLength: 1, maxLength: 500 } } },
    },
    (ctx, { text }) =>
      ctx.state.update((s) => {
        s.goals.put(ctx.session.id, { text, status: "active", setAt: ctx.now, turns: 0, completed: 0, startedAfter: ctx.sessionPosition });
        return { text, status: "active" };
      }),
  )
  .command(
    "end",
    {
      description: "End this conversation's goal: achieved, or abandoned.",
      input: { type: "object", additionalProperties: false, required: ["status"], properties: { status: { enum: ["achieved", "abandoned"] } } },
    },
    (ctx, { status }) =>
      ctx.state.update((s) => {
        const current = s.goals.get(ctx.session.id);
        if (current === undefined || current.status !== "active") throw new Error("this conversation has no active goal");
        // The ending line: after the Session's last committed entry, read in
        // this very transaction (later output of the same running work
        // cannot move it).
        s.goals.put(ctx.session.id, { ...current, status, endedAt: ctx.now, endedAfter: ctx.sessionPosition });
        return { status, endedAfter: ctx.sessionPosition };
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
  // `history`: each change of this projection is kept (the newest 32), so
  // the client entry (goal.client.mjs) draws a timeline cell per event.
  .projection({
    scope: "session",
    history: true,
    read: (ctx) =>
      ctx.state.read((s) => {
        const g = s.goals.get(ctx.session.id);
        if (g === undefined) return undefined;
        return { text: g.text, status: g.status, turns: g.turns, completed: g.completed ?? 0, startedAfter: g.startedAfter, ...(g.endedAfter !== undefined ? { endedAfter: g.endedAfter } : {}) };
      }),
  })
  .prompt((ctx, run) => {
    const g = ctx.state.read((s) => s.goals.get(run.sessionId));
    if (g === undefined || g.status !== "active") return undefined;
    return `This conversation has a goal: ${g.text}\nWhen it is achieved, call goal.end with {"status": "achieved"}.`;
  })
  .tools((ctx, run, commands) => [commands.tool("end", { description: "End this conversation's goal (achieved or abandoned)." })]);
