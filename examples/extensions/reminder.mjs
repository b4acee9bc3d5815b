// The `reminder` extension: a command (also offered to the model as a tool)
// sets a durable timer; when it is due, the timer hook sends a follow-up
// prompt into the Session. The timer rides the Agent's one alarm, survives
// eviction and restarts, and fires once; a Session deleted meanwhile is
// not recreated (`requireExistingSession`). Schemas are Zod 4 (any synchronous
// Standard Schema works).
//
//   POST /sessions/:id/extensions/reminder/commands/add  {"requestId": "r1", "input": {"text": "check the deploy", "delayMs": 60000}}
import { z } from "zod";
import { AdmissionError, defineCollection, defineExtension } from "../../js/extensions.mjs";

const Pending = z.object({ sessionId: z.string(), text: z.string(), dueAt: z.number().int() });
const Config = z.object({ delayMsMax: z.number().int().positive() });

export const reminder = defineExtension({ id: "reminder", version: "1.0.0" })
  .config(Config, { default: { delayMsMax: 7 * 24 * 3600 * 1000 } })
  .state({ pending: defineCollection(Pending) }) // keyed by timer name
  .command(
    "add",
    {
      description: "Set a reminder: after delayMs milliseconds a follow-up prompt with this text arrives in the conversation.",
      input: z.object({ text: z.string().min(1).max(2000), delayMs: z.number().int().min(0) }),
    },
    (ctx, { text, delayMs }) => {
      if (delayMs > ctx.config.delayMsMax) throw new Error(`delayMs is at most ${ctx.config.delayMsMax}`);
      const count = ctx.state.read((s) => s.pending.size);
      const name = `${ctx.session.id}:${ctx.now}:${count}`;
      const dueAt = ctx.now + delayMs;
      ctx.timers.set(name, { at: dueAt, sessionId: ctx.session.id, payload: { text } });
      ctx.state.update((s) => s.pending.put(name, { sessionId: ctx.session.id, text, dueAt }));
      return { name, dueAt };
    },
  )
  .onTimer((ctx, timer) => {
    ctx.state.update((s) => s.pending.delete(timer.name));
    // An automated continuation: a Session deleted since is not recreated.
    try {
      ctx.send({ sessionId: timer.sessionId, text: `Reminder: ${timer.payload.text}`, requireExistingSession: true });
    } catch (error) {
      if (!(error instanceof AdmissionError)) throw error;
    }
  })
  .projection({
    scope: "session",
    read: (ctx) =>
      ctx.state.read((s) => {
        const mine = s.pending.values().filter((p) => p.sessionId === ctx.session.id);
        return { pending: mine.map(({ text, dueAt }) => ({ text, dueAt })).sort((a, b) => a.dueAt - b.dueAt) };
      }),
  })
  .tools((ctx, run, commands) => [commands.tool("add")]);
