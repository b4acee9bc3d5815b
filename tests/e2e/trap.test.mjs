// A wasm trap does not cost bystanders: one wasm instance serves
// every Durable Object of the isolate, so a Rust panic in one Agent's turn
// resets it under all of them. The trap is attributed to the Session whose
// code raised it (src/host/blame.rs): other Agents' and Sessions' turns
// resume at the attempt they held, watches opened before the trap go on with
// a fresh snapshot, parked settlement long polls are answered again (never a
// 500), and a Session whose calls keep trapping settles `interrupted` alone.
import assert from "node:assert/strict";
import { test } from "node:test";
import { kind, uniq, useWorker } from "./helpers.mjs";

const PANIC_MARKER = "TRAP-HERE";
const ATTEMPTS_MAX = 3;
const h = useWorker({
  model: "echo",
  bindings: { SHIITAKE_FAULT_PANIC_MARKER: PANIC_MARKER, SHIITAKE_ATTEMPTS_MAX: ATTEMPTS_MAX, SHIITAKE_RETRY_BASE_MS: 50 },
});

const T = { timeout: 60_000 };
const startedAttempts = (events, id) => events.filter((ev) => kind(ev) === "started" && ev.data.commandId === id).map((ev) => ev.data.attempt);

test("a trap in one Agent's turn: other Agents' turns keep their attempt, their watches resume with a snapshot, parked polls are answered", T, async () => {
  const holdTag = uniq("bystander");
  // Each (re)started bystander call hangs; it is called again after each reset.
  h.model.scriptFor(holdTag, { hang: true }, { hang: true }, { hang: true }, { hang: true });
  const bystander = h.agent();
  await bystander.createSession("s");
  const w = await bystander.watch("s", { timeoutMs: 20_000 });
  await w.next(); // the first snapshot
  const held = await bystander.admit("s", "b1", `hold ${holdTag}`);
  const queued = await bystander.admit("s", "b2", `queued ${holdTag}`);
  await h.model.waitForRequests(1, { match: holdTag, timeoutMs: 10_000 });
  const polls = Array.from({ length: 5 }, () => bystander.settlement("s", held, 3000));
  await new Promise((resolve) => setTimeout(resolve, 200));

  const trapTag = uniq("culprit");
  h.model.scriptFor(trapTag, { chunks: ["so far ", `then ${PANIC_MARKER}`] }, { text: "answered after the trap" });
  const culprit = h.agent();
  await culprit.createSession("c");
  const s = await culprit.settle("c", "r1", `trap ${trapTag}`, { boundMs: 20_000 });
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(h.model.requests(trapTag).length, 2, "the culprit's attempt trapped and the next answered");

  // The bystander's watch goes on with a fresh snapshot; its turn calls the
  // model again at the attempt it held (1): no attempt lost.
  const resumed = await w.until((ev) => ev.event === "snapshot", 15_000);
  assert.equal(resumed.at(-1).data.running?.commandId, held, "the snapshot shows the running turn");
  await h.model.waitForRequests(2, { match: holdTag, timeoutMs: 10_000 });
  const read = await bystander.read("s");
  assert.equal(read.running?.commandId, held);
  assert.equal(read.running?.attempt, 1, "the bystander's turn kept its attempt");
  assert.ok(startedAttempts(w.events, held).every((n) => n === 1));
  for (const poll of await Promise.all(polls)) {
    assert.equal(poll.status, 200, `a parked poll is answered again, not a 500: ${poll.status} ${poll.text}`);
    assert.equal(poll.json, null);
  }
  assert.deepEqual((await bystander.queue("s")).map((c) => c.commandId), [held, queued]);
  await w.close();
  await bystander.abort("s");
});

test("a Session whose calls keep trapping settles interrupted alone; a Session of the same Agent keeps running", T, async () => {
  const holdTag = uniq("same-agent-bystander");
  h.model.scriptFor(holdTag, ...Array.from({ length: ATTEMPTS_MAX + 2 }, () => ({ hang: true })));
  const a = h.agent();
  await a.createSession("calm");
  await a.createSession("bad");
  const held = await a.admit("calm", "b1", `hold ${holdTag}`);
  await h.model.waitForRequests(1, { match: holdTag, timeoutMs: 10_000 });
  const w = await a.watch("calm", { timeoutMs: 20_000 });
  await w.next();

  const trapTag = uniq("always-traps");
  h.model.scriptFor(trapTag, ...Array.from({ length: ATTEMPTS_MAX }, () => ({ chunks: [`boom ${PANIC_MARKER}`] })));
  const s = await a.settle("bad", "r1", `trap ${trapTag}`, { boundMs: 40_000 });
  assert.equal(s.terminal, "interrupted", JSON.stringify(s));
  assert.match(s.diagnostic, /attempt limit 3 reached/);
  assert.equal(h.model.requests(trapTag).length, ATTEMPTS_MAX, "one call per attempt");

  // The calm Session's turn was restarted after each reset (its model
  // call again), always at attempt 1; its watch resumed each time.
  await h.model.waitForRequests(2, { match: holdTag, timeoutMs: 10_000 });
  const running = (await a.read("calm")).running;
  assert.equal(running?.commandId, held, "still running");
  assert.equal(running?.attempt, 1, "never a new attempt");
  assert.ok(startedAttempts(w.events, held).every((n) => n === 1));
  await w.until((ev) => ev.event === "snapshot", 10_000);
  const poll = await a.settlement("calm", held, 0);
  assert.equal(poll.json, null, "not settled");
  await w.close();
  await a.abort("calm");
});
