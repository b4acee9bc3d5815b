// The client's extension bindings (bindSessionExtension, bindAgentExtension
// in js/client.mjs) against the real Worker running extensions (fixture
// tests/e2e/fixtures/extensions-worker.mjs: the `goal` example and the
// settled-hook `tally`, whose initialize marks "initialized"): a goal set by
// a command and observed through the watch, its progress after a turn, the
// contract's schemas refusing before any request, replays by requestId; the
// tally's Agent projection read and followed on a Session's watch, a
// stopped extension's command refused by name; the goal's client entry
// (examples/extensions/goal.client.mjs) fed by a binding, its action
// dispatched through the command route.
import assert from "node:assert/strict";
import { test } from "node:test";
import { z } from "zod";
import { ShiitakeError, ShiitakeSchemaError, bindAgentExtension, bindSessionExtension, createShiitakeClient } from "../../js/client.mjs";
import { bindingDispatch, createClientEntryHost } from "../../js/client-entry.mjs";
import { goalClient } from "../../examples/extensions/goal.client.mjs";
import { linksContract } from "../../examples/extensions/links.client.mjs";
import { TOKEN, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({ fixture: "extensions-worker", model: "echo", bindings: { INIT: "ok" } });

const T = { timeout: 60_000 };

/** The host's authorised transport: Miniflare's dispatchFetch plus the bearer token. */
const authorisedFetch = (url, init) => h.mf.dispatchFetch(url, { ...init, headers: { ...init?.headers, authorization: `Bearer ${TOKEN}` } });

/** A fresh Agent with Session "s": the harness's Agent, a client for it and the Session handle. */
async function fresh() {
  const a = h.agent();
  const sid = await a.createSession("s");
  const client = createShiitakeClient({ baseUrl: `http://localhost/agents/${a.id}`, fetch: authorisedFetch });
  return { a, sid, client, session: client.session(sid) };
}

/** Waits (bounded) until the binding's slot satisfies `predicate`; returns the slot. */
async function slotWhere(binding, predicate, what, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (predicate(binding.slot)) return binding.slot;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; the slot is ${JSON.stringify(binding.slot)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function rejection(promise) {
  return promise.then(
    (v) => assert.fail(`expected a rejection, got ${JSON.stringify(v)}`),
    (e) => e,
  );
}

const Goal = z.object({
  text: z.string(),
  status: z.enum(["active", "achieved", "abandoned"]),
  turns: z.number().int().min(0),
  completed: z.number().int().min(0),
  startedAfter: z.number().int().min(0),
  endedAfter: z.number().int().min(0).optional(),
});
const goalContract = {
  id: "goal",
  projection: { schema: Goal },
  commands: {
    set: { input: z.object({ text: z.string().min(1).max(500) }) },
    end: { input: z.object({ status: z.enum(["achieved", "abandoned"]) }) },
  },
};

const Tally = z.object({ seen: z.array(z.string()), marks: z.array(z.string()) });
const tallyContract = { id: "tally", projection: { schema: Tally }, commands: { mark: { input: z.string().max(64) } } };

test("goal (Session scope): set by a command, observed through the watch, counted after a turn, refreshed; schemas refuse before any request; replays by requestId", T, async () => {
  const { a, sid, client, session } = await fresh();
  const goal = bindSessionExtension(session, goalContract);
  const heard = [];
  const unsubscribe = goal.subscribe((slot, error) => heard.push({ slot, error }));
  try {
    assert.deepEqual(goal.slot, { status: "unknown" });
    // The watch's snapshot: no goal yet.
    const first = await slotWhere(goal, (s) => s.status !== "unknown", "the snapshot");
    assert.equal(first.status, "absent");

    const text = "write the release notes";
    const result = await goal.command("set", { text }, { requestId: "g1" });
    assert.deepEqual(result, { text, status: "active" });
    const active = await slotWhere(goal, (s) => s.status === "observed", "the goal frame");
    assert.deepEqual(active.value, { text, status: "active", turns: 0, completed: 0, startedAfter: 0 });
    // The frame carried the goal's producer history; the slot keeps it.
    assert.deepEqual(active.history.events.map((e) => [e.sequence, e.value.status]), [[1, "active"]]);
    assert.equal(active.history.omitted, 0);
    assert.ok(active.observedAt >= first.observedAt);

    // A replay with the same requestId answers the stored result; another input under it conflicts.
    assert.deepEqual(await goal.command("set", { text }, { requestId: "g1" }), result);
    const conflict = await rejection(goal.command("set", { text: "something else" }, { requestId: "g1" }));
    assert.ok(conflict instanceof ShiitakeError, String(conflict));
    assert.deepEqual([conflict.status, conflict.code], [409, "request_conflict"]);

    // The contract's schema refuses an empty text without a request.
    const refused = await rejection(goal.command("set", { text: "" }));
    assert.ok(refused instanceof ShiitakeSchemaError, String(refused));
    assert.deepEqual([refused.status, refused.code], [400, "invalid_request"]);

    // A turn: the settled hook counts it, the watch brings the new projection.
    const tag = uniq("client-goal");
    const settled = await a.settle(sid, `p-${tag}`, `draft them ${tag}`);
    assert.equal(settled.terminal, "completed");
    const counted = await slotWhere(goal, (s) => s.status === "observed" && s.value.turns === 1, "turns: 1");
    assert.equal(counted.value.completed, 1);
    assert.equal(counted.value.status, "active");

    // Ending it: the result is the handler's; the slot follows the frame, and a read agrees.
    const read = await session.read({ limit: 200 });
    assert.deepEqual(read.extensions.goal, counted.value, "the Session read carries the same projection");
    const ended = await goal.command("end", { status: "achieved" });
    assert.deepEqual(ended, { status: "achieved", endedAfter: read.messages.length });
    await slotWhere(goal, (s) => s.status === "observed" && s.value.status === "achieved", "the ended goal");
    const refreshed = await goal.refresh();
    assert.deepEqual(refreshed.value, { ...counted.value, status: "achieved", endedAfter: read.messages.length });
    // The handler's refusal is a typed 422.
    const again = await rejection(goal.command("end", { status: "abandoned" }));
    assert.deepEqual([again.status, again.code], [422, "extension_command_failed"]);
    assert.match(again.message, /no active goal/);

    assert.ok(heard.length >= 3, `observations heard: ${heard.length}`);
    assert.ok(
      heard.every((x) => x.error === undefined),
      "no watch failure",
    );
    // An unknown Session's command: 404 session_not_found.
    const elsewhere = bindSessionExtension(client.session("missing"), goalContract);
    const missing = await rejection(elsewhere.command("set", { text: "x" }));
    assert.deepEqual([missing.status, missing.code], [404, "session_not_found"]);
  } finally {
    unsubscribe();
    goal.close();
  }
  assert.throws(() => goal.subscribe(() => {}), /closed/);
});

test("tally (Agent scope): refresh reads the Status and projection; follow observes agent-scope frames; a stopped extension's command is refused", T, async () => {
  const { a, sid, client, session } = await fresh();
  const tally = bindAgentExtension(client, tallyContract);
  const host = (rel) => h.api("POST", `/direct/${a.id}/host/${rel}`);
  try {
    const slot = await tally.refresh();
    assert.equal(slot.status, "observed");
    assert.deepEqual(slot.value, { seen: [], marks: ["initialized"] });
    assert.equal(tally.status.id, "tally");
    assert.equal(tally.status.grantKey, "tally");
    assert.equal(tally.status.stopped, null);
    assert.equal(tally.status.behind, false);
    assert.match(tally.status.revision, /^[0-9a-f]{32}$/);

    const heard = [];
    tally.subscribe((s) => heard.push(s));
    const unfollow = tally.follow(session);
    // The opening reads the Status again (an observation of the same value).
    await slotWhere(tally, () => heard.length >= 1, "the Status read at the opening");

    const marked = await tally.command("mark", "by the client", { requestId: "m1" });
    assert.deepEqual(marked, { marks: ["initialized", "by the client"] });
    await slotWhere(tally, (s) => s.status === "observed" && s.value.marks.length === 2, "the mark's agent frame");

    const s1 = await a.settle(sid, "t1", "one");
    const seen = await slotWhere(tally, (s) => s.status === "observed" && s.value.seen.length === 1, "the settled hook's agent frame");
    assert.deepEqual(seen.value, { seen: [s1.commandId], marks: ["initialized", "by the client"] });
    unfollow();

    // The contract refuses a mark over 64 characters locally.
    const long = await rejection(tally.command("mark", "x".repeat(65)));
    assert.ok(long instanceof ShiitakeSchemaError);

    // A hook that throws stops the extension; its commands are refused by name.
    assert.equal((await host("tally/break?on=1")).status, 200);
    try {
      await a.settle(sid, "t2", "two");
      await tally.refresh();
      assert.match(tally.status.stopped?.reason ?? "", /tally is broken/);
      const stopped = await rejection(tally.command("mark", "x"));
      assert.ok(stopped instanceof ShiitakeError, String(stopped));
      assert.deepEqual([stopped.status, stopped.code, stopped.kind], [409, "extension_stopped", "conflict"]);
    } finally {
      await host("tally/break?on=0");
    }
    assert.equal((await host("resume/tally")).status, 200);

    // An extension the Agent does not run.
    const none = bindAgentExtension(client, { id: "nope" });
    const notFound = await rejection(none.refresh());
    assert.deepEqual([notFound.status, notFound.code], [404, "extension_not_found"]);
    assert.deepEqual(none.slot, { status: "unknown" }, "a failed read observes nothing");
  } finally {
    tally.close();
  }
});

test("the goal's client entry over a real binding: its end action dispatched through the extension's command route, then refused locally as stale", T, async () => {
  const { a, sid, session } = await fresh();
  const goal = bindSessionExtension(session, goalContract);
  const sent = [];
  const counting = (name, input) => (sent.push(name), goal.command(name, input));
  const entries = createClientEntryHost({ entries: [goalClient], dispatch: bindingDispatch(() => ({ command: counting })) });
  const catalog = (await a.api("GET", "/extensions/goal")).json;
  const observe = (slot) =>
    entries.observe("goal", sid, {
      status: slot.status === "observed" || slot.status === "absent" ? (catalog.stopped === null ? "running" : "stopped") : "offline",
      value: slot.status === "observed" ? slot.value : null,
      history: slot.history,
      commands: catalog.commands.map((c) => c.name),
    });
  const unsubscribe = goal.subscribe(observe);
  try {
    await goal.command("set", { text: "ship it" });
    await slotWhere(goal, (s) => s.status === "observed", "the goal frame");
    const rows = entries.contribution("goal", sid);
    assert.equal(rows.chips[0].title, "Goal: ship it");
    const [achieved] = rows.panel[0].actions;
    assert.deepEqual(achieved, { id: "end", label: "Achieved", input: { status: "achieved" } });
    const result = await entries.act("goal", sid, achieved);
    assert.equal(result.status, "achieved");
    assert.deepEqual(sent, ["end"]);
    await slotWhere(goal, (s) => s.status === "observed" && s.value.status === "achieved", "the ended goal");
    // The rows changed with the frame: the action taken from them is stale now.
    await rejection(entries.act("goal", sid, achieved)).then((e) => assert.equal(e.code, "stale_action"));
    assert.deepEqual(sent, ["end"], "nothing more was sent");
    assert.deepEqual(
      entries.contribution("goal", sid).timeline.cells.map((c) => [c.id, c.label, c.afterSequence]),
      [
        ["1", "Goal set: ship it", 0],
        ["2", "Goal achieved: ship it", 0],
      ],
    );
  } finally {
    unsubscribe();
    goal.close();
  }
});

test("links (Session scope): a projection that stops publishing reaches the watch as absent, not as its last value", T, async () => {
  const { a, sid, session } = await fresh();
  const other = await a.createSession("t");
  const binding = bindSessionExtension(session, linksContract);
  const unsubscribe = binding.subscribe(() => {});
  try {
    assert.equal((await slotWhere(binding, (s) => s.status !== "unknown", "the snapshot")).status, "absent", "no links pinned yet");
    await binding.command("add", { title: "Related", sessionId: other }, { requestId: uniq("add") });
    const pinned = await slotWhere(binding, (s) => s.status === "observed", "the pinned link");
    assert.deepEqual(pinned.value, { links: [{ id: "l1", title: "Related", sessionId: other }] });
    await binding.command("remove", { id: "l1" }, { requestId: uniq("remove") });
    // The last link's removal: the projection is gone, and the watch says so.
    await slotWhere(binding, (s) => s.status === "absent", "the projection's absence after the last link's removal");
    const read = await a.read(sid);
    assert.equal(read.extensions.links, undefined, "the read leaves it out too");
  } finally {
    unsubscribe();
    binding.close();
  }
});
