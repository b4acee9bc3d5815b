// Token budgets (docs/http.md "Budgets") in Miniflare, through the host
// Worker tests/e2e/fixtures/rpc-worker.mjs: the routes shiitakeApp
// forwards (the reads), the Durable Object's RPC and its owner API (the
// host's: setting a budget). The host configures each Session's budget
// (SHIITAKE_BUDGET_SESSION_TOKENS); the scripted model server reports the
// usage each call spends, so what a budget has left is known exactly.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createShiitakeClient } from "../../js/client.mjs";
import { clearOfMidnight, expectError, expectStatus, kind, startWorker, uniq, useWorker } from "./helpers.mjs";

const SESSION_TOKENS = 1_000;
const h = useWorker({ fixture: "rpc-worker", model: "echo", bindings: { SHIITAKE_BUDGET_SESSION_TOKENS: SESSION_TOKENS } });
const T = { timeout: 30_000 };
const DAY_MS = 86_400_000;

/** One Workers RPC call on the Agent's stub: its value, or the refusal that crossed RPC as `{error: {code, status, message}}`. */
async function rpc(a, method, ...args) {
  const res = await h.api("POST", `/rpc/${a.id}`, { method, args });
  expectStatus(res, 200);
  return res.json.error ? res.json : res.json.value;
}

/** One owner API call inside the object (`this.agent`, `.session(session)` when given). */
async function owner(a, op, args = [], session) {
  const res = await h.api("POST", `/owner/${a.id}`, { op, args, ...(session === undefined ? {} : { session }) });
  expectStatus(res, 200);
  return res.json.error ? res.json : res.json.value;
}

const refusal = (answer, status, code) => {
  assert.ok(answer?.error, `expected ${status} ${code}, got ${JSON.stringify(answer)}`);
  assert.deepEqual([answer.error.status, answer.error.code], [status, code], JSON.stringify(answer));
  return answer.error.message;
};

/** The typed client of `a`, over shiitakeApp. */
const clientOf = (a) => createShiitakeClient({ baseUrl: `http://localhost/agents/${a.id}`, fetch: (url, init) => h.mf.dispatchFetch(url, init) });

async function get(a, rel) {
  const res = await a.api("GET", rel);
  expectStatus(res, 200);
  return res.json;
}

/** A fresh Agent with Session "s" and its first turn settled, which spent `spend` tokens (the model reports them): `{a, tag}`. */
async function spent(spend) {
  const a = h.agent();
  await a.createSession("s");
  const tag = uniq("budget");
  h.model.scriptFor(tag, { text: "first answer", usage: { prompt_tokens: spend - 1, completion_tokens: 1 } });
  const first = await a.settle("s", "p1", `${tag} one`);
  assert.equal(first.terminal, "completed", JSON.stringify(first));
  return { a, tag };
}

/** Waits for `commandId`'s `paused` frame on `watch`; returns it. */
async function pausedFrame(watch, commandId) {
  const got = await watch.until((ev) => ev.event === "frame" && ev.data.type === "paused" && ev.data.commandId === commandId);
  return got.at(-1).data;
}

test("a configured Session budget pauses the turn before the call it cannot cover (frame, read, inbox, budget); the mount never sets one; an RPC raise resumes it at its attempt", T, async () => {
  const { a, tag } = await spent(SESSION_TOKENS - 1);
  const client = clientOf(a);
  assert.deepEqual(await client.session("s").budget(), { tokens: SESSION_TOKENS, set: false, spent: SESSION_TOKENS - 1 });
  const watch = await a.watch("s", { timeoutMs: 10_000 });
  try {
    const p2 = await a.admit("s", "p2", `${tag} two`);
    const frame = await pausedFrame(watch, p2);
    assert.equal(frame.reason, "budget_reached");
    assert.deepEqual({ ...frame.budget, needs: undefined }, { scope: "session", tokens: SESSION_TOKENS, spent: SESSION_TOKENS - 1, needs: undefined });
    assert.ok(frame.budget.needs >= 1, JSON.stringify(frame));

    const { running } = await a.read("s");
    assert.equal(running.commandId, p2, "a paused turn stays running");
    assert.equal(running.attempt, 1);
    assert.deepEqual(running.paused.budget, frame.budget);
    assert.equal(running.paused.reason, "budget_reached");
    assert.equal(typeof running.paused.since, "number");
    const row = (await client.inbox()).sessions.find((r) => r.sessionId === "s");
    assert.equal(row.state, "needs_you", JSON.stringify(row));
    assert.deepEqual(row.paused, running.paused);
    const budget = await get(a, "/sessions/s/budget");
    assert.deepEqual(budget, { tokens: SESSION_TOKENS, set: false, spent: SESSION_TOKENS - 1, paused: running.paused });
    assert.deepEqual(await client.session("s").budget(), budget, "the typed client reads the same");
    assert.equal(h.model.requests(tag).length, 1, "no call was made for the paused turn");

    // Setting is the host's: shiitakeApp forwards only the reads.
    expectError(await a.api("PUT", "/sessions/s/budget", { tokens: 1_000_000 }), 405, "method_not_allowed");
    expectError(await a.api("DELETE", "/sessions/s/budget"), 405, "method_not_allowed");
    expectError(await a.api("PUT", "/budget", { tokens: 1_000_000 }), 405, "method_not_allowed");
    assert.deepEqual(await get(a, "/sessions/s/budget"), budget, "a refused PUT sets nothing");
    assert.equal((await a.read("s")).running.paused.reason, "budget_reached");

    // The host raises it over RPC: the turn goes on at the attempt it holds.
    const raised = await rpc(a, "setSessionBudget", "s", { tokens: 100_000 });
    assert.deepEqual({ ...raised, paused: undefined }, { tokens: 100_000, set: true, spent: SESSION_TOKENS - 1, paused: undefined });
    const settled = await a.waitSettled("s", p2, { boundMs: 10_000 });
    assert.equal(settled.terminal, "completed", JSON.stringify(settled));
    await watch.until((ev) => ev.event === "frame" && ev.data.type === "settled" && ev.data.settlement.commandId === p2);
    const attempts = watch.events.filter((ev) => kind(ev) === "started" && ev.data.commandId === p2).map((ev) => ev.data.attempt);
    assert.ok(attempts.length >= 1 && attempts.every((n) => n === 1), `started frames of the paused turn: ${attempts}`);
    assert.equal(h.model.requests(tag).length, 2, "one call for the resumed turn, no extra attempt");
    const ledger = await client.usage();
    assert.deepEqual([ledger.totals.calls, ledger.totals.failed, ledger.totals.unknown], [2, 0, 0], JSON.stringify(ledger.totals));
    const after = await client.session("s").budget();
    assert.deepEqual(after, { tokens: 100_000, set: true, spent: ledger.totals.inputTokens + ledger.totals.outputTokens }, "each call charged what it reported");
    assert.equal((await a.read("s")).running, null);
    assert.notEqual((await client.inbox()).sessions.find((r) => r.sessionId === "s").state, "needs_you");
    // Cleared: back to the configuration.
    assert.deepEqual(await rpc(a, "clearSessionBudget", "s"), { tokens: SESSION_TOKENS, set: false, spent: after.spent });
    assert.deepEqual(await rpc(a, "sessionBudget", "s"), { tokens: SESSION_TOKENS, set: false, spent: after.spent });
  } finally {
    await watch.close();
  }
});

test("cancel of a paused turn settles it cancelled, with nothing charged and no call counted", T, async () => {
  const a = h.agent();
  await a.createSession("s");
  assert.deepEqual(await owner(a, "setBudget", [{ tokens: 1 }], "s"), { tokens: 1, set: true, spent: 0 });
  const tag = uniq("budget-cancel");
  const watch = await a.watch("s", { timeoutMs: 10_000 });
  try {
    const p1 = await a.admit("s", "p1", `${tag} paused at once`);
    const frame = await pausedFrame(watch, p1);
    assert.deepEqual([frame.budget.scope, frame.budget.tokens, frame.budget.spent], ["session", 1, 0]);
    expectStatus(await a.cancel("s", p1), 200);
    const settled = await a.waitSettled("s", p1, { boundMs: 10_000 });
    assert.equal(settled.terminal, "cancelled", JSON.stringify(settled));
  } finally {
    await watch.close();
  }
  assert.deepEqual(await owner(a, "budget", [], "s"), { tokens: 1, set: true, spent: 0 }, "no pause left, nothing charged");
  assert.equal(h.model.requests(tag).length, 0);
  const { totals } = await get(a, "/usage");
  assert.deepEqual([totals.calls, totals.unknown], [0, 0], "a pause is no call");
  const row = (await get(a, "/inbox")).sessions.find((r) => r.sessionId === "s");
  assert.equal(row.state, "settled");
  assert.equal(row.paused, undefined);
});

test("the Agent's daily budget over RPC: read with its reset, a turn past it pauses with scope agent, the owner API's clear resumes it", T, async () => {
  await clearOfMidnight(10_000);
  const a = h.agent();
  const none = await rpc(a, "budget");
  assert.deepEqual({ ...none, resetsAt: undefined }, { tokens: null, set: false, spent: null, resetsAt: undefined }, "nothing counted before a daily budget");
  const set = await rpc(a, "setBudget", { tokens: 500 });
  assert.deepEqual([set.tokens, set.set, set.spent], [500, true, 0]);
  assert.equal(set.resetsAt % DAY_MS, 0, "the end of a UTC day");
  assert.ok(set.resetsAt > Date.now() && set.resetsAt <= Date.now() + DAY_MS, String(set.resetsAt));
  assert.deepEqual(await clientOf(a).budget(), set, "the typed client reads the same");

  await a.createSession("s");
  // The Session's own budget out of the way: the Agent's is the one reached.
  assert.equal((await rpc(a, "setSessionBudget", "s", { tokens: 1_000_000 })).tokens, 1_000_000);
  const tag = uniq("budget-day");
  h.model.scriptFor(tag, { text: "first answer", usage: { prompt_tokens: 490, completion_tokens: 9 } });
  assert.equal((await a.settle("s", "p1", `${tag} one`)).terminal, "completed");
  const watch = await a.watch("s", { timeoutMs: 10_000 });
  try {
    const p2 = await a.admit("s", "p2", `${tag} two`);
    const frame = await pausedFrame(watch, p2);
    assert.deepEqual([frame.budget.scope, frame.budget.tokens, frame.budget.spent], ["agent", 500, 499]);
    assert.deepEqual((await get(a, "/inbox")).sessions[0].paused.budget, frame.budget);
    assert.deepEqual(await get(a, "/budget"), { ...set, spent: 499 });
    assert.equal((await rpc(a, "sessionBudget", "s")).spent, 499, "the Session's own budget counts it too");
    // Cleared: no daily budget is configured, so the turn goes on.
    const cleared = await owner(a, "clearBudget");
    assert.deepEqual([cleared.tokens, cleared.set, cleared.spent], [null, false, 499]);
    assert.equal((await a.waitSettled("s", p2, { boundMs: 10_000 })).terminal, "completed");
  } finally {
    await watch.close();
  }
  assert.equal(h.model.requests(tag).length, 2);
});

test("bad budgets are 400 naming `tokens` (RPC and owner API alike), an unknown Session 404; nothing is set", T, async () => {
  const a = h.agent();
  await a.createSession("s");
  for (const input of [{}, { tokens: -1 }, { tokens: 1.5 }, { tokens: "5" }, { tokens: null }, { tokens: 1e15 + 1 }]) {
    assert.match(refusal(await rpc(a, "setSessionBudget", "s", input), 400, "invalid_request"), /tokens/, JSON.stringify(input));
    assert.match(refusal(await rpc(a, "setBudget", input), 400, "invalid_request"), /tokens/, JSON.stringify(input));
    assert.match(refusal(await owner(a, "setBudget", [input], "s"), 400, "invalid_request"), /tokens/, JSON.stringify(input));
  }
  assert.match(refusal(await rpc(a, "setBudget", { tokens: 5, day: 1 }), 400, "invalid_request"), /day/);
  refusal(await rpc(a, "setSessionBudget", "nobody", { tokens: 5 }), 404, "session_not_found");
  refusal(await rpc(a, "sessionBudget", "nobody"), 404, "session_not_found");
  refusal(await owner(a, "clearBudget", [], "nobody"), 404, "session_not_found");
  assert.deepEqual(await rpc(a, "sessionBudget", "s"), { tokens: SESSION_TOKENS, set: false, spent: null });
  assert.equal((await rpc(a, "budget")).set, false);
  // The largest budget crosses JSON and RPC exactly.
  assert.equal((await rpc(a, "setSessionBudget", "s", { tokens: 1e15 })).tokens, 1e15);
});

test("every budget operation answers alike over RPC and the owner API, and as the forwarded reads do; RPC takes host metadata", T, async () => {
  const a = h.agent();
  await a.createSession("s");
  const surfaces = {
    rpc: {
      agent: (op, input) => rpc(a, { get: "budget", set: "setBudget", clear: "clearBudget" }[op], ...(input ? [input] : [])),
      session: (op, input) => rpc(a, { get: "sessionBudget", set: "setSessionBudget", clear: "clearSessionBudget" }[op], "s", ...(input ? [input] : [])),
    },
    owner: {
      agent: (op, input) => owner(a, { get: "budget", set: "setBudget", clear: "clearBudget" }[op], input ? [input] : []),
      session: (op, input) => owner(a, { get: "budget", set: "setBudget", clear: "clearBudget" }[op], input ? [input] : [], "s"),
    },
  };
  for (const [name, surface] of Object.entries(surfaces)) {
    for (const [scope, route] of [["agent", "/budget"], ["session", "/sessions/s/budget"]]) {
      const set = await surface[scope]("set", { tokens: 4_321 });
      assert.deepEqual([set.tokens, set.set], [4_321, true], `${name} ${scope}`);
      assert.deepEqual(await surface[scope]("get"), set, `${name} ${scope}`);
      assert.deepEqual(await get(a, route), set, `${name} ${scope}: the forwarded read`);
      const cleared = await surface[scope]("clear");
      assert.deepEqual([cleared.tokens, cleared.set], [scope === "session" ? SESSION_TOKENS : null, false], `${name} ${scope}`);
      assert.deepEqual(await get(a, route), cleared, `${name} ${scope}: the forwarded read`);
    }
  }
  assert.equal((await rpc(a, "setSessionBudget", "s", { tokens: 7 }, { author: "ada" })).tokens, 7);
  assert.equal((await rpc(a, "budget", { author: "ada" })).set, false);
});

test("a configured budget that is not a number in range counts as 0: nothing runs, and the budget says so", T, async () => {
  const h2 = await startWorker({ model: "echo", bindings: { SHIITAKE_BUDGET_DAILY_TOKENS: "5e6", SHIITAKE_BUDGET_SESSION_TOKENS: "1000000000000001" } });
  try {
    const a = h2.agent();
    await a.createSession("s");
    const day = (await a.api("GET", "/budget")).json;
    assert.deepEqual([day.tokens, day.set], [0, false], JSON.stringify(day));
    assert.equal((await a.api("GET", "/sessions/s/budget")).json.tokens, 0);
    const tag = uniq("budget-typo");
    const watch = await a.watch("s", { timeoutMs: 10_000 });
    try {
      const p1 = await a.admit("s", "p1", `${tag} never sent`);
      const frame = await pausedFrame(watch, p1);
      assert.deepEqual([frame.budget.tokens, frame.budget.spent], [0, 0]);
    } finally {
      await watch.close();
    }
    assert.equal(h2.model.requests(tag).length, 0, "a typo stops spending");
  } finally {
    await h2.dispose();
  }
});
