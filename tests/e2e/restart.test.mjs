// What a receipt promises survives a restart: Miniflare disposed and started
// again on the same persisted Durable Object storage. The model never answers
// here (the "hold" model): a running turn occupies each Session, so the
// prompts behind it stay pending across the restart. (A turn resumed after a
// restart: run-restart.test.mjs.)
import assert from "node:assert/strict";
import { test } from "node:test";
import { expectAccepted, expectError, expectStatus, useWorker } from "./helpers.mjs";

const h = useWorker({ persist: true });

test("accepted work, transcript, fences and receipts survive a restart", async () => {
  const a = h.agent("restart-agent");
  await a.createSession("s");
  await a.createSession("t");
  const occupier = await a.occupy("s");
  const img = { mediaType: "image/webp", data: "AAAA" };
  const ids = [];
  for (let i = 0; i < 5; i++) ids.push(await a.admit("s", `r${i}`, `prompt ${i}`, i === 3 ? { images: [img], delivery: "steer" } : {}));
  const op = await a.admitOperator("s", "op", "an operator line");
  const cancelled = await a.admit("s", "gone", "cancelled before the restart");
  assert.equal((await a.cancel("s", cancelled)).json.status, "cancelled");
  assert.deepEqual((await a.withdraw("s", "fenced")).json, { status: "unknown" });
  assert.deepEqual((await a.withdraw("t", "fenced-t")).json, { status: "unknown" });
  const warm = await a.read("s");

  await h.restart();

  // The same Agent, read cold.
  const cold = await a.read("s");
  assert.deepEqual(cold.pending, warm.pending, "pending is the same list, same ids, order, fields");
  assert.deepEqual(
    cold.pending.map((p) => [p.commandId, p.requestId, p.text, p.position, p.delivery]),
    ids.map((id, i) => [id, `r${i}`, `prompt ${i}`, i + 1, i === 3 ? "steer" : "followUp"]),
  );
  assert.deepEqual(cold.pending[3].images, [img]);
  assert.deepEqual(cold.messages, warm.messages);
  assert.deepEqual(
    cold.messages.map((m) => [m.role, m.commandId, m.requestId, m.text]),
    [
      ["user", occupier, "occupier", "occupies the Session: the model never answers it"],
      ["operator", op, "op", "an operator line"],
    ],
  );
  const list = await a.api("GET", "/sessions");
  expectStatus(list, 200);
  assert.deepEqual(list.json.sessions.map((s) => s.sessionId).sort(), ["s", "t"]);

  // Replays answer the original receipts; conflicts are still conflicts.
  for (let i = 0; i < 5; i++) {
    const res = await a.prompt("s", `r${i}`, `prompt ${i}`, i === 3 ? { images: [img], delivery: "steer" } : {});
    assert.equal(expectAccepted(res), ids[i]);
  }
  assert.equal(expectAccepted(await a.operator("s", "op", "an operator line")), op);
  assert.equal(expectAccepted(await a.prompt("s", "gone", "cancelled before the restart")), cancelled);
  expectError(await a.prompt("s", "r0", "other text"), 409, "request_conflict");
  // Withdraw finds the admissions.
  assert.deepEqual((await a.withdraw("s", "r2")).json, { status: "accepted", commandId: ids[2] });
  // The fences hold, and stay Session-scoped.
  expectError(await a.prompt("s", "fenced", "late"), 409, "request_withdrawn");
  expectError(await a.operator("s", "fenced", "late"), 409, "request_withdrawn");
  expectError(await a.prompt("t", "fenced-t", "late"), 409, "request_withdrawn");
  assert.deepEqual((await a.withdraw("s", "fenced")).json, { status: "unknown" });
  await a.admit("t", "fenced", "only fenced in s");
  // The cancelled prompt stays cancelled.
  assert.deepEqual((await a.cancel("s", cancelled)).json, { status: "cancelled", commandId: cancelled, text: "cancelled before the restart" });
  assert.equal(cold.pending.some((p) => p.commandId === cancelled), false);
  // New admissions get new ids, queued behind the old ones.
  const fresh = await a.admit("s", "r5", "prompt 5");
  assert.ok(![occupier, ...ids, op, cancelled].includes(fresh), "a commandId is never reused");
  assert.deepEqual(
    (await a.pending("s")).map((p) => [p.commandId, p.position]),
    [...ids, fresh].map((id, i) => [id, i + 1]),
  );
});

test("a second restart keeps what the first run after restart wrote; deleted Sessions stay deleted", async () => {
  const a = h.agent("restart-agent-2");
  await a.createSession("keep");
  await a.createSession("drop");
  const c = await a.admit("keep", "r", "x");
  expectStatus(await a.api("DELETE", "/sessions/drop"), 204);
  await h.restart();
  const c2 = await a.admit("keep", "r2", "y");
  assert.deepEqual((await a.withdraw("keep", "w")).json, { status: "unknown" });
  await h.restart();
  assert.deepEqual(
    (await a.queue("keep")).map((p) => p.commandId),
    [c, c2],
  );
  expectError(await a.prompt("keep", "w", "z"), 409, "request_withdrawn");
  expectError(await a.readRaw("drop"), 404, "session_not_found");
  const list = await a.api("GET", "/sessions");
  assert.deepEqual(
    list.json.sessions.map((s) => s.sessionId),
    ["keep"],
  );
});
