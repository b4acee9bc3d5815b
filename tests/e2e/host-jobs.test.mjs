// The host work lane (seed: "Host metadata", `hostJobs`; src/host/jobs.rs):
// the delivery outbox handed to `hostJobs().deliver` in seq order, each
// entry once, acknowledged; `tick` after delivery; a failing pass retried
// durably with backoff until it succeeds, while turns keep settling; a
// pending retry surviving a restart; delivery during a live tool within the
// heartbeat; close joining the running pass. Outbox entries are staged with
// the test build's hook (`ShiitakeDO#testStageDelivery`). Fixture:
// tests/e2e/fixtures/jobs-worker.mjs.
import assert from "node:assert/strict";
import { test } from "node:test";
import { eventually, expectStatus, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({ fixture: "jobs-worker", model: "echo", persist: true });

const T = { timeout: 60_000 };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function jobs(a) {
  const res = await h.api("GET", `/direct/${a.id}/host/jobs/log`);
  expectStatus(res, 200);
  return res.json;
}

async function route(a, path, body) {
  const res = await h.api("POST", `/direct/${a.id}/host/jobs/${path}`, body ?? {});
  expectStatus(res, 200);
  return res.json;
}

const stage = (a, key, { wake = true, count = 1, body = { note: key } } = {}) =>
  route(a, `stage?key=${encodeURIComponent(key)}&wake=${wake ? 1 : 0}&count=${count}`, body);

/** A fresh Agent in `mode`, its core started and its lane quiet. */
async function agent(mode = "fast") {
  const a = h.agent();
  await route(a, `config?mode=${mode}`);
  await route(a, "warm");
  return a;
}

const kinds = (log, ...wanted) => log.filter((e) => wanted.includes(e.kind));
const delivered = (log) => kinds(log, "deliver").flatMap((e) => e.detail);

test("entries are delivered in seq order, each once, in batches of at most 64, acknowledged, then tick", T, async () => {
  const a = await agent();
  // 70 entries staged without waking the lane, one key changed again (the
  // newest change replaces the undelivered one), then one wake.
  await stage(a, "bulk", { wake: false, count: 70 });
  await stage(a, "bulk-3", { wake: false, body: { note: "changed" } });
  const before = (await jobs(a)).outbox;
  assert.equal(before.length, 70);
  assert.equal(kinds((await jobs(a)).log, "attempt").length, 0, "nothing delivered before a wake");
  await stage(a, "last", { wake: true });
  const state = await eventually(async () => {
    const s = await jobs(a);
    return s.outbox.length === 0 && kinds(s.log, "tick").length > 0 ? s : undefined;
  }, { what: "the outbox delivered and a tick" });
  const entries = delivered(state.log);
  assert.equal(entries.length, 71, "every entry once");
  const seqs = entries.map((e) => e.seq);
  assert.deepEqual(seqs, [...seqs].sort((x, y) => x - y), "in seq order");
  assert.equal(new Set(entries.map((e) => e.key)).size, 71, "each key once");
  const changed = entries.find((e) => e.key === "bulk-3");
  assert.deepEqual(changed.body, { note: "changed", i: 0 }, "the newest change of a key");
  assert.equal(entries.at(-2).key, "bulk-3", "a changed key moves behind the older entries");
  assert.equal(entries.at(-1).key, "last");
  for (const e of entries) {
    assert.deepEqual(Object.keys(e).sort(), ["at", "body", "key", "seq"]);
    assert.ok(e.at > 0);
  }
  const calls = kinds(state.log, "deliver").map((e) => e.detail.length);
  assert.ok(calls.every((n) => n <= 64), `batches ${calls}`);
  assert.deepEqual(calls, [64, 7]);
  // The tick follows the pass's last delivery.
  const order = kinds(state.log, "deliver", "tick").map((e) => e.kind);
  assert.equal(order.at(-1), "tick");
  assert.ok(order.indexOf("tick") > order.lastIndexOf("deliver") || order.filter((k) => k === "tick").length > 1);
  const lastDeliver = state.log.findLastIndex((e) => e.kind === "deliver");
  assert.ok(state.log.slice(lastDeliver).some((e) => e.kind === "tick"), "a tick after the last delivery");
  assert.equal(state.lane, null, "a healthy lane keeps no state row");
  // Nothing more is delivered later.
  await sleep(500);
  assert.equal(delivered((await jobs(a)).log).length, 71);
  assert.equal((await jobs(a)).alarm, null, "nothing due: the alarm is spent");
});

test("a failing delivery is retried with doubling backoff until it succeeds, durably, while turns keep settling", T, async () => {
  const a = await agent();
  await a.createSession("s");
  await route(a, "fail?n=3");
  await stage(a, "retry-me");
  // The first failure persists the retry (redacted, bounded) and nothing is acknowledged.
  const failing = await eventually(async () => {
    const s = await jobs(a);
    return s.lane !== null ? s : undefined;
  }, { what: "the lane's retry row" });
  assert.equal(failing.lane.attempts, 1);
  assert.ok(failing.lane.error.includes("receiver unavailable"), failing.lane.error);
  assert.ok(!failing.lane.error.includes(h.modelApiKey), "the host's secrets are redacted");
  assert.equal(failing.outbox.length, 1, "nothing acknowledged");
  const rejectedAt = kinds(failing.log, "rejected")[0].at;
  assert.ok(failing.lane.retry_at >= rejectedAt + 300 - 5 && failing.lane.retry_at <= rejectedAt + 300 + 200, `retry_at ${failing.lane.retry_at - rejectedAt} ms after the failure`);
  // A turn runs and settles while the lane is failing.
  const settled = await a.settle("s", "r1", "hello while the receiver is down");
  assert.equal(settled.terminal, "completed");
  const done = await eventually(async () => {
    const s = await jobs(a);
    return s.outbox.length === 0 ? s : undefined;
  }, { what: "the retry to succeed", timeoutMs: 10_000 });
  const attempts = kinds(done.log, "attempt");
  assert.equal(attempts.length, 4, "three failures, then the success");
  const gaps = attempts.slice(1).map((e, i) => e.at - attempts[i].at);
  for (const [i, want] of [300, 600, 1200].entries()) {
    assert.ok(gaps[i] >= want - 10, `gap ${i}: ${gaps[i]} ms, want ≥ ${want}`);
    assert.ok(gaps[i] < want + 1500, `gap ${i}: ${gaps[i]} ms, want about ${want}`);
  }
  assert.deepEqual(delivered(done.log).map((e) => e.key), ["retry-me"], "delivered once");
  assert.equal(done.lane, null, "a success clears the retry");
  assert.ok(kinds(done.log, "tick").at(-1).at >= kinds(done.log, "deliver")[0].at);
});

test("a failing tick fails its pass: the delivered batch stays acknowledged, the pass is retried until the tick succeeds", T, async () => {
  const a = await agent();
  await route(a, "fail-tick?n=2");
  await stage(a, "before-tick");
  const failing = await eventually(async () => {
    const s = await jobs(a);
    return s.lane !== null ? s : undefined;
  }, { what: "the failed tick's retry" });
  assert.match(failing.lane.error, /^tick: the watchdog is down/);
  assert.equal(failing.outbox.length, 0, "delivered before the tick, so acknowledged");
  const done = await eventually(async () => {
    const s = await jobs(a);
    return s.lane === null && kinds(s.log, "tick").length > 0 ? s : undefined;
  }, { what: "the tick to succeed", timeoutMs: 5000 });
  assert.equal(kinds(done.log, "tick-rejected").length, 2);
  assert.deepEqual(delivered(done.log).map((e) => e.key), ["before-tick"], "not delivered again");
  const ticks = kinds(done.log, "tick-rejected", "tick");
  assert.ok(ticks[1].at - ticks[0].at >= 300 - 10 && ticks[2].at - ticks[1].at >= 600 - 10, "the ordinary backoff");
});

test("a slow host pass never delays a turn; a pass past its deadline is aborted and retried", T, async () => {
  const a = await agent();
  await a.createSession("s");
  await route(a, "hold");
  await stage(a, "slow");
  await eventually(async () => kinds((await jobs(a)).log, "held").length === 1, { what: "the held delivery" });
  const started = Date.now();
  const settled = await a.settle("s", "r1", "a turn beside a held delivery");
  assert.equal(settled.terminal, "completed");
  assert.ok(Date.now() - started < 2500, `the turn took ${Date.now() - started} ms`);
  const during = await jobs(a);
  assert.equal(kinds(during.log, "deliver").length, 0, "the delivery is still held");
  assert.equal(during.outbox.length, 1);
  // Never released: past the 5 s deadline its signal aborts and the pass fails.
  const failed = await eventually(async () => {
    const s = await jobs(a);
    return s.lane !== null ? s : undefined;
  }, { what: "the overrun pass to fail", timeoutMs: 8000 });
  assert.match(failed.lane.error, /did not finish within 5000 ms/);
  assert.equal(kinds(failed.log, "aborted").length, 1, "the deliver call saw its signal abort");
  const done = await eventually(async () => {
    const s = await jobs(a);
    return s.outbox.length === 0 ? s : undefined;
  }, { what: "the retry", timeoutMs: 5000 });
  assert.deepEqual(delivered(done.log).map((e) => e.key), ["slow"]);
  assert.equal(done.lane, null);
});

test("during a live tool the heartbeat delivers an entry staged without a wake, within about 5 s", T, async () => {
  const a = await agent();
  await a.createSession("s");
  const tag = uniq("heartbeat");
  h.model.scriptFor(tag, { toolCalls: [{ name: "long_wait", arguments: { ms: 8000 } }] }, { text: "waited" });
  const id = await a.admit("s", "r1", `wait ${tag}`);
  await eventually(async () => kinds((await jobs(a)).log, "tool-start").length === 1, { what: "the tool to start", timeoutMs: 10_000 });
  await sleep(700);
  const { at: stagedAt } = await stage(a, "during-tool", { wake: false });
  const state = await eventually(async () => {
    const s = await jobs(a);
    return delivered(s.log).some((e) => e.key === "during-tool") ? s : undefined;
  }, { what: "the heartbeat's delivery", timeoutMs: 7000 });
  const deliveredAt = kinds(state.log, "deliver").find((e) => e.detail.some((x) => x.key === "during-tool")).at;
  assert.ok(deliveredAt - stagedAt <= 6000, `delivered ${deliveredAt - stagedAt} ms after staging`);
  assert.equal(kinds(state.log, "tool-end").length, 0, "delivered while the tool still runs");
  const settled = await a.waitSettled("s", id);
  assert.equal(settled.terminal, "completed");
});

test("attention set during a live tool is delivered before the tool ends, within the heartbeat; a failing delivery of it is retried", T, async () => {
  const a = await agent();
  await a.createSession("s");
  const tag = uniq("attention");
  h.model.scriptFor(tag, { toolCalls: [{ name: "long_wait", arguments: { ms: 8000 } }] }, { text: "waited" });
  const id = await a.admit("s", "r1", `wait ${tag}`);
  await eventually(async () => kinds((await jobs(a)).log, "tool-start").length === 1, { what: "the tool to start", timeoutMs: 10_000 });
  await route(a, "fail?n=1");
  const flaggedAt = Date.now();
  const flag = await a.api("POST", "/sessions/s/extensions/flagger/commands/flag", { input: { id: "deploy" } });
  expectStatus(flag, 200);
  const state = await eventually(async () => {
    const s = await jobs(a);
    return delivered(s.log).some((e) => e.key === "attention:flagger:s:deploy") ? s : undefined;
  }, { what: "the attention's delivery", timeoutMs: 7000 });
  const entry = delivered(state.log).find((e) => e.key === "attention:flagger:s:deploy");
  assert.deepEqual(entry.body, {
    type: "attention",
    op: "set",
    extensionId: "flagger",
    sessionId: "s",
    id: "deploy",
    item: { extensionId: "flagger", id: "deploy", kind: "review", summary: "look at deploy", since: entry.body.item.since },
  });
  assert.equal(kinds(state.log, "rejected").length, 1, "the first delivery failed and was retried");
  const deliveredAt = kinds(state.log, "deliver").find((e) => e.detail.some((x) => x.key === entry.key)).at;
  assert.ok(deliveredAt - flaggedAt <= 6000, `delivered ${deliveredAt - flaggedAt} ms after the write`);
  assert.equal(kinds(state.log, "tool-end").length, 0, "delivered while the tool still runs");
  // Clearing it delivers the clear; deleting the Session clears what is left.
  expectStatus(await a.api("POST", "/sessions/s/extensions/flagger/commands/flag", { input: { id: "later" } }), 200);
  const settled = await a.waitSettled("s", id);
  assert.equal(settled.terminal, "completed", "the turn ran on meanwhile");
  expectStatus(await a.api("DELETE", "/sessions/s"), 204);
  const after = await eventually(async () => {
    const s = await jobs(a);
    const last = delivered(s.log).filter((e) => e.key === "attention:flagger:s:later").at(-1);
    return last?.body.op === "clear" && s.outbox.length === 0 ? s : undefined;
  }, { what: "the deletion's clear delivered" });
  assert.equal(after.lane, null);
});

test("a pending retry survives a restart (default policy: 3 s) and is delivered after it", T, async () => {
  const a = await agent("default");
  await route(a, "fail?n=1");
  await stage(a, "survivor");
  const failing = await eventually(async () => {
    const s = await jobs(a);
    return s.lane !== null ? s : undefined;
  }, { what: "the retry row" });
  const rejectedAt = kinds(failing.log, "rejected")[0].at;
  assert.equal(failing.lane.attempts, 1);
  assert.ok(Math.abs(failing.lane.retry_at - (rejectedAt + 3000)) < 200, `retry_at ${failing.lane.retry_at - rejectedAt} ms after the failure`);
  await h.restart();
  // A starting instance arms the alarm for the waiting retry.
  await route(a, "warm");
  const done = await eventually(async () => {
    const s = await jobs(a);
    return s.outbox.length === 0 ? s : undefined;
  }, { what: "the retry after the restart", timeoutMs: 10_000 });
  const deliver = kinds(done.log, "deliver");
  assert.deepEqual(deliver.flatMap((e) => e.detail).map((e) => e.key), ["survivor"]);
  assert.ok(deliver[0].at >= failing.lane.retry_at - 50, "not before its retry time");
  assert.equal(done.lane, null);
});

test("close joins the running host pass and the live turn, and starts no new pass", T, async () => {
  const a = await agent();
  await a.createSession("s");
  const tag = uniq("close");
  h.model.scriptFor(tag, { toolCalls: [{ name: "long_wait", arguments: { ms: 20_000 } }] }, { text: "waited" });
  await a.admit("s", "r1", `wait ${tag}`);
  await eventually(async () => kinds((await jobs(a)).log, "tool-start").length === 1, { what: "the tool to start", timeoutMs: 10_000 });
  await route(a, "hold");
  await stage(a, "in-flight");
  await eventually(async () => kinds((await jobs(a)).log, "held").length === 1, { what: "the held delivery" });
  const closed = await route(a, "close");
  const state = await jobs(a);
  const aborted = kinds(state.log, "aborted")[0];
  const toolAborted = kinds(state.log, "tool-aborted")[0];
  assert.ok(aborted, "the pass's signal aborted");
  assert.ok(toolAborted, "the live turn was stopped");
  assert.ok(closed.ended >= aborted.at && closed.ended >= toolAborted.at, "close resolved after both ended");
  assert.equal(state.outbox.length, 1, "the aborted batch is not acknowledged");
  assert.equal(state.lane, null, "a close is not a failed pass");
  // Closed: requests are refused, and a new entry starts no pass.
  const read = await a.readRaw("s");
  expectStatus(read, 503);
  await stage(a, "after-close");
  await sleep(700);
  const after = await jobs(a);
  assert.equal(kinds(after.log, "attempt").length, 1, "no new pass");
  assert.equal(after.outbox.length, 2);
});

test("without hostJobs entries are acknowledged undelivered; a misconfigured hostJobs fails every pass and keeps them", T, async () => {
  const none = await agent("none");
  await stage(none, "dropped");
  await eventually(async () => (await jobs(none)).outbox.length === 0, { what: "the entry acknowledged" });
  assert.equal(kinds((await jobs(none)).log, "attempt").length, 0);

  const bad = await agent("bad");
  await stage(bad, "kept");
  const failing = await eventually(async () => {
    const s = await jobs(bad);
    return s.lane !== null ? s : undefined;
  }, { what: "the failing pass" });
  assert.match(failing.lane.error, /hostJobs\(\)\.retryMs: unknown key `retryMs`/);
  assert.equal(failing.outbox.length, 1, "entries wait for a usable lane");
  assert.equal(kinds(failing.log, "attempt").length, 0);
});
