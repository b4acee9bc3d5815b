// The `goal` extension's client entry (shiitake/client-entry): a chip and a
// pinned row while a goal is active (its end buttons dispatch the
// extension's own `end` command), and a timeline cell per history event:
// "Goal set" at the position the goal started after, "Goal achieved" (or
// abandoned) at the position the ending transaction read (`endedAfter`),
// so later output of the same running work cannot move the ending line.
//
//   import { goalClient } from "shiitake/examples/goal.client"   (this file)
//   const host = createClientEntryHost({ entries: [goalClient], dispatch });
import { defineClientEntry } from "../../js/client-entry.mjs";

const STATUSES = ["active", "achieved", "abandoned"];
const count = (v) => Number.isSafeInteger(v) && v >= 0;

/** The goal projection as a Standard Schema (an app would use zod, valibot, ...). */
const Goal = {
  "~standard": {
    version: 1,
    vendor: "shiitake-example",
    validate(v) {
      const ok =
        v !== null &&
        typeof v === "object" &&
        typeof v.text === "string" &&
        STATUSES.includes(v.status) &&
        [v.turns, v.completed, v.startedAfter].every(count) &&
        (v.endedAfter === undefined || count(v.endedAfter));
      return ok ? { value: v } : { issues: [{ message: "not a goal projection" }] };
    },
  },
};

export const goalContract = { id: "goal", projection: { schema: Goal } };

/** Timeline cells from the goal's history: one when a goal is set, one when it ends. */
function cells(events) {
  const out = [];
  let before = null;
  for (const { sequence, value } of events) {
    if (value === null) {
      before = null;
      continue;
    }
    const id = String(sequence);
    const fresh = before === null || before.text !== value.text || before.startedAfter !== value.startedAfter;
    if (value.status === "active" && fresh) out.push({ id, label: `Goal set: ${value.text}`, commandId: null, afterSequence: value.startedAfter });
    else if (value.status !== "active" && value.endedAfter !== undefined && before?.status === "active") {
      out.push({ id, label: `Goal ${value.status}: ${value.text}`, commandId: null, afterSequence: value.endedAfter });
    }
    before = value;
  }
  return out;
}

export const goalClient = defineClientEntry(goalContract, {
  contribute(view) {
    const goal = view.status === "running" ? view.value : null;
    const active = goal !== null && goal.status === "active";
    const actions = view.commands.includes("end")
      ? [
          { id: "end", label: "Achieved", input: { status: "achieved" } },
          { id: "end", label: "Abandon", input: { status: "abandoned" } },
        ]
      : [];
    return {
      chips: active ? [{ id: "goal", title: `Goal: ${goal.text}`, compact: "goal" }] : [],
      panel: active ? [{ id: "goal", title: goal.text, detail: `${goal.turns} turns, ${goal.completed} completed`, actions }] : [],
      timeline: { cells: cells(view.history.events), omitted: view.history.omitted },
      waiting: null,
    };
  },
});
