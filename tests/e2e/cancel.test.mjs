// Cancel and abort of queued prompts. The model never answers here (the
// "hold" model): each Session is occupied by a running turn first, so the
// prompts a test admits stay pending. (Cancel of running work: run.test.mjs.)
import assert from "node:assert/strict";
import { test } from "node:test";
import { expectAccepted, expectError, expectStatus, useWorker } from "./helpers.mjs";

const h = useWorker();

/** A Session with a running turn that never ends and `n` pending prompts r0..r{n-1} / "text i". */
async function queued(n) {
  const a = h.agent();
  const sid = await a.createSession("s");
  const occupier = await a.occupy(sid);
  const ids = [];
  for (let i = 0; i < n; i++) ids.push(await a.admit(sid, `r${i}`, `text ${i}`));
  return { a, sid, ids, occupier };
}

/** The operator lines of a read. */
const operatorLines = (page) => page.messages.filter((m) => m.role === "operator");

test("cancel a pending prompt: cancelled with its text; the others keep FIFO order and renumber", async () => {
  const { a, sid, ids } = await queued(4);
  const res = await a.cancel(sid, ids[1]);
  expectStatus(res, 200);
  assert.deepEqual(res.json, { status: "cancelled", commandId: ids[1], text: "text 1" });
  assert.deepEqual(
    (await a.pending(sid)).map((p) => [p.commandId, p.requestId, p.text, p.position]),
    [
      [ids[0], "r0", "text 0", 1],
      [ids[2], "r2", "text 2", 2],
      [ids[3], "r3", "text 3", 3],
    ],
  );
  // Cancel the head too.
  assert.deepEqual((await a.cancel(sid, ids[0])).json, { status: "cancelled", commandId: ids[0], text: "text 0" });
  assert.deepEqual(
    (await a.pending(sid)).map((p) => [p.commandId, p.position]),
    [
      [ids[2], 1],
      [ids[3], 2],
    ],
  );
});

test("cancel is idempotent: a cancelled prompt answers cancelled again, with its text", async () => {
  const { a, sid, ids } = await queued(2);
  const first = await a.cancel(sid, ids[0]);
  assert.deepEqual(first.json, { status: "cancelled", commandId: ids[0], text: "text 0" });
  for (let i = 0; i < 2; i++) {
    const again = await a.cancel(sid, ids[0]);
    expectStatus(again, 200);
    assert.deepEqual(again.json, first.json);
  }
  const onlyIfPending = await a.cancel(sid, ids[0], { onlyIfPending: true });
  expectStatus(onlyIfPending, 200);
  assert.deepEqual(onlyIfPending.json, first.json);
  assert.deepEqual(
    (await a.pending(sid)).map((p) => [p.commandId, p.position]),
    [[ids[1], 1]],
  );
});

test("cancel with onlyIfPending on a pending prompt cancels it", async () => {
  const { a, sid, ids } = await queued(1);
  const res = await a.cancel(sid, ids[0], { onlyIfPending: true });
  assert.deepEqual(res.json, { status: "cancelled", commandId: ids[0], text: "text 0" });
  assert.deepEqual(await a.pending(sid), []);
});

test("cancel of an operator line is too_late", async () => {
  const { a, sid, ids } = await queued(1);
  const op = await a.admitOperator(sid, "op", "recorded at once");
  for (const extra of [{}, { onlyIfPending: true }]) {
    const res = await a.cancel(sid, op, extra);
    expectStatus(res, 200);
    assert.deepEqual(res.json, { status: "too_late", commandId: op });
  }
  const page = await a.read(sid);
  assert.deepEqual(
    operatorLines(page).map((m) => m.commandId),
    [op],
  );
  assert.deepEqual(
    page.pending.map((p) => p.commandId),
    ids,
  );
});

test("cancel of a commandId this Session never accepted is 404 command_not_found", async () => {
  const a = h.agent();
  await a.createSession("one");
  await a.createSession("two");
  const c1 = await a.admit("one", "r", "in one");
  const c2 = await a.admit("one", "r2", "queued in one");
  expectError(await a.cancel("one", "cmd_does_not_exist"), 404, "command_not_found");
  expectError(await a.cancel("two", c1), 404, "command_not_found");
  // Another Agent's command is not this Session's either.
  const b = h.agent();
  await b.createSession("one");
  expectError(await b.cancel("one", c1), 404, "command_not_found");
  expectError(await b.cancel("one", c2), 404, "command_not_found");
  assert.deepEqual(
    (await a.queue("one")).map((p) => p.commandId),
    [c1, c2],
  );
});

test("cancel body: closed schema", async () => {
  const { a, sid, ids } = await queued(1);
  assert.match(expectError(await a.command(sid, { type: "cancel" }), 400, "invalid_request"), /commandId/);
  assert.match(
    expectError(await a.command(sid, { type: "cancel", commandId: ids[0], onlyIfPending: "yes" }), 400, "invalid_request"),
    /onlyIfPending/,
  );
  assert.match(
    expectError(await a.command(sid, { type: "cancel", commandId: ids[0], requestId: "r" }), 400, "invalid_request"),
    /requestId/,
  );
  assert.equal((await a.pending(sid)).length, 1);
});

test("abort cancels the running turn and every pending prompt in one answer and empties pending", async () => {
  const { a, sid, ids, occupier } = await queued(5);
  const op = await a.admitOperator(sid, "op", "stays in the transcript");
  await a.cancel(sid, ids[2]);
  const res = await a.abort(sid);
  expectStatus(res, 200);
  assert.deepEqual(res.json, {
    status: "cancelled",
    cancelled: [
      { commandId: occupier, requestId: "occupier", text: "occupies the Session: the model never answers it" },
      ...[0, 1, 3, 4].map((i) => ({ commandId: ids[i], requestId: `r${i}`, text: `text ${i}` })),
    ],
  });
  const page = await a.read(sid);
  assert.deepEqual(page.pending, []);
  assert.equal(page.running, null);
  assert.deepEqual(
    operatorLines(page).map((m) => m.commandId),
    [op],
  );
  // Each aborted prompt now answers cancelled.
  assert.deepEqual((await a.cancel(sid, ids[4])).json, { status: "cancelled", commandId: ids[4], text: "text 4" });
  // Abort on an empty queue cancels nothing.
  const empty = await a.abort(sid);
  expectStatus(empty, 200);
  assert.deepEqual(empty.json, { status: "cancelled", cancelled: [] });
  // New work queues normally after an abort.
  const next = await a.admit(sid, "after", "after the abort");
  assert.deepEqual(
    (await a.queue(sid)).map((p) => p.commandId),
    [next],
  );
});

test("abort body: closed schema", async () => {
  const { a, sid } = await queued(1);
  assert.match(expectError(await a.command(sid, { type: "abort", requestId: "r" }), 400, "invalid_request"), /requestId/);
  assert.equal((await a.pending(sid)).length, 1);
});

test("abort touches only its Session", async () => {
  const a = h.agent();
  await a.createSession("one");
  await a.createSession("two");
  await a.admit("one", "r", "one");
  await a.admit("one", "r2", "one, queued");
  const keep = await a.admit("two", "r", "two");
  const keepQueued = await a.admit("two", "r2", "two, queued");
  assert.equal((await a.abort("one")).json.cancelled.length, 2);
  assert.deepEqual(
    (await a.queue("two")).map((p) => p.commandId),
    [keep, keepQueued],
  );
});

test("a replay of a cancelled prompt answers the original receipt and does not re-queue it", async () => {
  const { a, sid, ids } = await queued(3);
  await a.cancel(sid, ids[0]);
  await a.abort(sid);
  for (let i = 0; i < 3; i++) {
    const res = await a.prompt(sid, `r${i}`, `text ${i}`);
    assert.equal(expectAccepted(res), ids[i]);
  }
  assert.deepEqual(await a.pending(sid), []);
  // Other input under a cancelled prompt's requestId is still a conflict.
  expectError(await a.prompt(sid, "r0", "resubmitted text"), 409, "request_conflict");
});
