// The one durable alarm (docs/http.md "Running work"): admission sets it,
// a provider retry waits on it (not on a sleep), and once nothing is due it
// is spent, not re-armed: no heartbeat that never stops. Read through the
// host fixture's `GET /host/alarm` (ctx.storage.getAlarm()).
import assert from "node:assert/strict";
import { test } from "node:test";
import { eventually, expectAccepted, expectStatus, useWorker } from "./helpers.mjs";

const RETRY_BASE_MS = 3000;

const h = useWorker({ fixture: "host-fetch-worker", model: "echo", bindings: { SHIITAKE_RETRY_BASE_MS: RETRY_BASE_MS } });

async function alarmOf(agentId) {
  const res = await h.api("GET", `/direct/${agentId}/host/alarm`);
  expectStatus(res, 200);
  return res.json.alarm;
}

test("an idle Agent has no alarm; after a turn settles the alarm is spent", async () => {
  const a = h.agent();
  assert.equal(await alarmOf(a.id), null, "nothing admitted, nothing scheduled");
  await a.createSession("s");
  const settled = await a.settle("s", "r1", "hello");
  assert.equal(settled.terminal, "completed");
  await eventually(async () => (await alarmOf(a.id)) === null, { what: "the alarm to be spent" });
  // And it stays spent: no periodic wake-up re-arms it.
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(await alarmOf(a.id), null);
});

test("a prompt into an idle Session runs its turn at once, not on the alarm's hop (every alarm() held back)", async () => {
  const a = h.agent();
  await a.createSession("s");
  // Every alarm() of this Agent waits until released: the turn cannot ride on it.
  expectStatus(await h.api("POST", `/direct/${a.id}/host/alarm-hold`), 200);
  const id = await a.admit("s", "r1", "hello while the alarm is held");
  const settled = await a.waitSettled("s", id, { boundMs: 10_000 });
  assert.equal(settled.terminal, "completed");
  expectStatus(await h.api("DELETE", `/direct/${a.id}/host/alarm-hold`), 200);
  // The held alarm (if it fired) then finds nothing due; the alarm ends spent.
  await eventually(async () => (await alarmOf(a.id)) === null, { what: "the alarm to be spent" });
  const next = expectAccepted(await a.prompt("s", "r2", "and again"));
  assert.equal((await a.waitSettled("s", next)).terminal, "completed");
});

test("a provider retry is a durable timer on the alarm, at the retry delay", async () => {
  const a = h.agent();
  await a.createSession("s");
  const tag = `retry-${a.id}`;
  h.model.scriptFor(tag, { status: 503 });
  const before = Date.now();
  const id = await a.admit("s", "r1", `${tag} please`);
  // The failed attempt arms the alarm at now + base delay; nothing sleeps.
  const alarm = await eventually(async () => {
    const at = await alarmOf(a.id);
    return at !== null && at > before + 1000 ? at : undefined;
  }, { what: "the retry timer on the alarm" });
  assert.ok(alarm >= before + RETRY_BASE_MS - 50 && alarm <= Date.now() + RETRY_BASE_MS + 50, `alarm ${alarm - before} ms after admission`);
  const read = await a.read("s");
  assert.equal(read.running?.commandId, id, "the turn keeps its Session while it waits");
  // The timer fires and the retry succeeds (the echo answer).
  const settled = await a.waitSettled("s", id);
  assert.equal(settled.terminal, "completed");
  assert.ok(Date.now() - before >= RETRY_BASE_MS - 50, "the retry waited for its timer");
  await eventually(async () => (await alarmOf(a.id)) === null, { what: "the alarm to be spent" });
});

test("cancelling a turn that waits on its retry timer settles it and leaves no live deadline", async () => {
  const a = h.agent();
  await a.createSession("s");
  const tag = `cancel-retry-${a.id}`;
  h.model.scriptFor(tag, { status: 500 });
  const id = await a.admit("s", "r1", `${tag} please`);
  await eventually(async () => ((await alarmOf(a.id)) ?? 0) > Date.now() + 1000, { what: "the retry timer" });
  const cancel = await a.cancel("s", id);
  expectStatus(cancel, 200);
  assert.equal(cancel.json.status, "cancelled");
  assert.equal((await a.waitSettled("s", id)).terminal, "cancelled");
  // The cancel asks for one reconciliation pass, which finds nothing due.
  await eventually(async () => (await alarmOf(a.id)) === null, { what: "the alarm to be spent" });
  const next = expectAccepted(await a.prompt("s", "r2", "after the cancel"));
  assert.equal((await a.waitSettled("s", next)).terminal, "completed");
});
