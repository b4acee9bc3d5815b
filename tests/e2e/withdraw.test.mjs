// Withdraw: recover an uncertain send. (That a fence survives a restart is in
// restart.test.mjs.)
import assert from "node:assert/strict";
import { test } from "node:test";
import { expectAccepted, expectError, expectStatus, useWorker } from "./helpers.mjs";

const h = useWorker();

const session = () => h.session();

test("withdraw after an admission answers its receipt and cancels nothing", async () => {
  const { a, sid } = await session();
  await a.occupy(sid); // the model never answers: what follows stays pending
  const c0 = await a.admit(sid, "r0", "zero");
  const c1 = await a.admit(sid, "r1", "one");
  const res = await a.withdraw(sid, "r1");
  expectStatus(res, 200);
  assert.deepEqual(res.json, { status: "accepted", commandId: c1 });
  // Repeating it answers the same.
  assert.deepEqual((await a.withdraw(sid, "r1")).json, { status: "accepted", commandId: c1 });
  assert.deepEqual(
    (await a.pending(sid)).map((p) => [p.commandId, p.requestId, p.position]),
    [
      [c0, "r0", 1],
      [c1, "r1", 2],
    ],
  );
  // The admission still replays.
  assert.equal(expectAccepted(await a.prompt(sid, "r1", "one")), c1);
});

test("withdraw of an unknown requestId answers unknown and fences later admissions", async () => {
  const { a, sid } = await session();
  const res = await a.withdraw(sid, "lost");
  expectStatus(res, 200);
  assert.deepEqual(res.json, { status: "unknown" });
  expectError(await a.prompt(sid, "lost", "the lost text"), 409, "request_withdrawn");
  expectError(await a.prompt(sid, "lost", "other text", { delivery: "steer" }), 409, "request_withdrawn");
  expectError(await a.operator(sid, "lost", "operator"), 409, "request_withdrawn");
  const page = await a.read(sid);
  assert.deepEqual(page.pending, []);
  assert.deepEqual(page.messages, []);
  // Idempotent: still unknown, still fenced.
  assert.deepEqual((await a.withdraw(sid, "lost")).json, { status: "unknown" });
  assert.deepEqual((await a.withdraw(sid, "lost")).json, { status: "unknown" });
  expectError(await a.prompt(sid, "lost", "the lost text"), 409, "request_withdrawn");
  // A retry with a new requestId is admitted.
  const c = await a.admit(sid, "lost-2", "the lost text");
  assert.deepEqual(
    (await a.queue(sid)).map((p) => [p.commandId, p.requestId]),
    [[c, "lost-2"]],
  );
});

test("the fence is Session-scoped", async () => {
  const a = h.agent();
  await a.createSession("one");
  await a.createSession("two");
  assert.deepEqual((await a.withdraw("one", "r")).json, { status: "unknown" });
  const c = await a.admit("two", "r", "admitted in the other Session");
  expectError(await a.prompt("one", "r", "admitted in the other Session"), 409, "request_withdrawn");
  // ...and withdrawing in "two" finds the admission there.
  assert.deepEqual((await a.withdraw("two", "r")).json, { status: "accepted", commandId: c });
  // A fence in one Agent does not reach another Agent's Session of the same name.
  const b = h.agent();
  await b.createSession("one");
  await b.admit("one", "r", "other Agent");
});

test("withdraw of an operator line answers accepted with its commandId (its entry id)", async () => {
  const { a, sid } = await session();
  const commandId = await a.admitOperator(sid, "op", "a line");
  assert.deepEqual((await a.withdraw(sid, "op")).json, { status: "accepted", commandId });
  const page = await a.read(sid);
  assert.equal(page.messages.length, 1);
  assert.equal(page.messages[0].entryId, commandId);
  assert.equal(page.messages[0].requestId, "op");
});

test("withdraw of a cancelled prompt still answers accepted with its commandId", async () => {
  const { a, sid } = await session();
  await a.occupy(sid);
  const commandId = await a.admit(sid, "r", "to cancel");
  const cancel = await a.cancel(sid, commandId);
  expectStatus(cancel, 200);
  assert.equal(cancel.json.status, "cancelled");
  assert.deepEqual((await a.withdraw(sid, "r")).json, { status: "accepted", commandId });
});

test("a conflicting or refused admission does not count as an admission for withdraw", async () => {
  const { a, sid } = await session();
  expectError(await a.prompt(sid, "bad", "x".repeat(65_537)), 400, "invalid_request");
  assert.deepEqual((await a.withdraw(sid, "bad")).json, { status: "unknown" });
});

test("withdraw body: closed schema, requestId required and non-empty", async () => {
  const { a, sid } = await session();
  const path = `/sessions/${sid}/withdraw`;
  assert.match(expectError(await a.api("POST", path, {}), 400, "invalid_request"), /requestId/);
  expectError(await a.api("POST", path, { requestId: "" }), 400, "invalid_request");
  assert.match(expectError(await a.api("POST", path, { requestId: 5 }), 400, "invalid_request"), /requestId/);
  assert.match(expectError(await a.api("POST", path, { requestId: "r", commandId: "c" }), 400, "invalid_request"), /commandId/);
  expectError(await a.api("POST", path, "{not json"), 400, "invalid_json");
  // None of these committed a fence for "r".
  await a.admit(sid, "r", "still admissible");
});
