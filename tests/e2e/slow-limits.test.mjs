// The two Agent-wide bounds that take thousands of requests to reach:
// 4,096 withdrawal fences per Session and 10,000 Sessions per Agent. They cost
// ~10-20 s, so they run only with SHIITAKE_E2E_SLOW=1.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { expectError, expectStatus, startWorker } from "./helpers.mjs";

const skip = process.env.SHIITAKE_E2E_SLOW === "1" ? false : "slow: set SHIITAKE_E2E_SLOW=1 to run";

let h;
before(async () => {
  if (!skip) h = await startWorker();
});
after(async () => {
  await h?.dispose();
});

/** Runs `count` requests `width` at a time (one Durable Object serialises them anyway). */
async function many(count, width, one) {
  for (let i = 0; i < count; i += width) {
    const batch = [];
    for (let j = i; j < Math.min(count, i + width); j++) batch.push(one(j));
    await Promise.all(batch);
  }
}

test("a Session holds at most 4,096 withdrawal fences: 429 too_many_fences", { skip }, async () => {
  const a = h.agent();
  await a.createSession("s");
  await a.createSession("other");
  await many(4096, 16, async (i) => {
    const res = await a.withdraw("s", `fence-${i}`);
    expectStatus(res, 200);
    assert.deepEqual(res.json, { status: "unknown" });
  });
  expectError(await a.withdraw("s", "fence-4096"), 429, "too_many_fences");
  // An existing fence is still answered (idempotent), and admissions still work.
  assert.deepEqual((await a.withdraw("s", "fence-17")).json, { status: "unknown" });
  expectError(await a.prompt("s", "fence-17", "x"), 409, "request_withdrawn");
  const c = await a.admit("s", "fresh", "admitted");
  assert.deepEqual((await a.withdraw("s", "fresh")).json, { status: "accepted", commandId: c });
  // The bound is per Session.
  assert.deepEqual((await a.withdraw("other", "fence-4096")).json, { status: "unknown" });
});

test("an Agent holds at most 10,000 Sessions: 429 too_many_sessions; a delete frees a place", { skip }, async () => {
  const a = h.agent();
  await many(10_000, 16, async (i) => {
    const res = await a.api("POST", "/sessions", { sessionId: `s${i}` });
    expectStatus(res, 201);
  });
  expectError(await a.api("POST", "/sessions", { sessionId: "one-more" }), 429, "too_many_sessions");
  expectError(await a.api("POST", "/sessions", {}), 429, "too_many_sessions");
  expectStatus(await a.api("DELETE", "/sessions/s0"), 204);
  expectStatus(await a.api("POST", "/sessions", { sessionId: "one-more" }), 201);
});
