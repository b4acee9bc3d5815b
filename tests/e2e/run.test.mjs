// Running work (docs/http.md "Running work"): turns against the scripted
// OpenAI-compatible model server, the settlement long poll, FIFO and
// concurrency, retries, cancel and abort of running work, steer, and a wasm
// panic mid-turn. (A restart mid-turn: run-restart.test.mjs; watch:
// watch.test.mjs.)
//
// Each test tags its prompt texts with a unique tag; the model server's
// `scriptFor(tag, ...)` answers only that test's requests, and
// `requests(tag)` lists only them, so tests sharing the Worker stay apart.
import assert from "node:assert/strict";
import { test } from "node:test";
import { contentText } from "../support/model-server.mjs";
import { MODEL_API_KEY, MODEL_NAME, describe, expectAccepted, expectError, expectStatus, uniq, useWorker } from "./helpers.mjs";

const INSTRUCTIONS = "You are the end-to-end test model. Answer in one line.";
const PANIC_MARKER = "PANIC-NOW";
const RETRY_BASE_MS = 50;

const h = useWorker({
  model: "echo",
  bindings: {
    SHIITAKE_INSTRUCTIONS: INSTRUCTIONS,
    SHIITAKE_RETRY_BASE_MS: RETRY_BASE_MS,
    SHIITAKE_RETRY_MAX_MS: 400,
    SHIITAKE_ATTEMPTS_MAX: 3,
    SHIITAKE_FAULT_PANIC_MARKER: PANIC_MARKER,
  },
});

/** Bounds every test: a broken run loop fails a test instead of hanging the suite. */
const T = { timeout: 20_000 };
/** How long a test waits for one settlement. */
const SETTLE_MS = 10_000;


const session = () => h.session();

const settled = (a, sid, id) => a.waitSettled(sid, id, { boundMs: SETTLE_MS });

/** The model requests of this tag, as [role, text] lists. */
const conversation = (req) => req.body.messages.map((m) => [m.role, contentText(m.content)]);

/** Waits until the model server has received `n` requests of this tag; returns them. */
const modelRequests = (tag, n = 1) => h.model.waitForRequests(n, { match: tag, timeoutMs: SETTLE_MS });

/** Waits until the model server saw the client abort this tag's request #i. */
const modelAborted = (tag, i = 0) =>
  h.model.waitFor(() => h.model.requests(tag)[i]?.aborted === true, { timeoutMs: 5000, what: `the runtime to abort model request #${i} of ${tag}` });

/** Asserts a whole CommandSettlement (diagnostic checked apart). */
function expectSettlement(s, want) {
  const { diagnostic, ...rest } = s;
  assert.deepEqual(rest, want);
  if (want.terminal === "completed") assert.equal(diagnostic ?? null, null, `a completed command has no diagnostic: ${JSON.stringify(s)}`);
  return diagnostic;
}

test("a prompt runs: completed with the streamed answer, usage from the usage chunk, one user and one assistant message", T, async () => {
  const tag = uniq("basic");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { chunks: ["Hel", "lo, ", "wor", "ld!"], chunkDelayMs: 10, usage: { prompt_tokens: 21, completion_tokens: 5, total_tokens: 26 } });
  const text = `Say hello ${tag}`;
  const id = await a.admit(sid, "r1", text);
  const s = await settled(a, sid, id);
  expectSettlement(s, { commandId: id, terminal: "completed", answer: "Hello, world!", usage: { inputTokens: 21, outputTokens: 5 }, toolCallCount: 0 });

  const page = await a.read(sid);
  assert.equal(page.running, null);
  assert.deepEqual(page.pending, []);
  assert.equal(page.messages.length, 2, JSON.stringify(page.messages));
  const [user, assistant] = page.messages;
  assert.deepEqual([user.role, user.text, user.requestId, user.commandId], ["user", text, "r1", id]);
  assert.deepEqual([assistant.role, assistant.text], ["assistant", "Hello, world!"]);
  if (assistant.commandId !== undefined) assert.equal(assistant.commandId, id);
  assert.notEqual(user.entryId, assistant.entryId);
  for (const m of page.messages) assert.ok(m.createdAt !== undefined && m.createdAt !== null, JSON.stringify(m));

  // What the model received: the instructions as the system message, then the transcript.
  const reqs = h.model.requests(tag);
  assert.equal(reqs.length, 1);
  const [req] = reqs;
  assert.equal(req.body.model, MODEL_NAME);
  assert.equal(req.body.stream, true, "the answer is streamed");
  assert.equal(req.body.stream_options?.include_usage, true, "usage is asked for in the stream");
  assert.deepEqual(conversation(req), [
    ["system", INSTRUCTIONS],
    ["user", text],
  ]);
  // The key arrives as a bearer token, and only there.
  assert.equal(req.headers.authorization, `Bearer ${MODEL_API_KEY}`);
  for (const [name, value] of Object.entries(req.headers)) {
    if (name !== "authorization") assert.ok(!String(value).includes(MODEL_API_KEY), `the key leaked into the ${name} header`);
  }
  assert.ok(!JSON.stringify(req.body).includes(MODEL_API_KEY), "the key is not in the request body");
  // The settlement does not change on a second read, and a replay still answers the receipt.
  assert.deepEqual((await a.settlement(sid, id, 0)).json, s);
  assert.equal(expectAccepted(await a.prompt(sid, "r1", text)), id);
  const after = await a.read(sid);
  assert.deepEqual([after.running, after.pending, after.messages.length], [null, [], 2], "a replay queues and runs nothing");
  assert.equal(h.model.requests(tag).length, 1);
});

test("settlement: null at once while unsettled (timeoutMs 0 or omitted), null at the deadline of a long poll", T, async () => {
  const tag = uniq("deadline");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { hang: true, chunks: ["thinking"] });
  const running = await a.admit(sid, "r1", `hang ${tag}`);
  const queued = await a.admit(sid, "r2", `queued ${tag}`);
  await modelRequests(tag);
  await a.waitRunning(sid, running);
  for (const id of [running, queued]) {
    for (const timeoutMs of [0, undefined]) {
      const t0 = Date.now();
      const res = await a.settlement(sid, id, timeoutMs);
      expectStatus(res, 200);
      assert.equal(res.text, "null", describe(res));
      assert.ok(Date.now() - t0 < 1000, `timeoutMs=${timeoutMs} answered in ${Date.now() - t0} ms`);
    }
  }
  const t0 = Date.now();
  const res = await a.settlement(sid, running, 600);
  const elapsed = Date.now() - t0;
  expectStatus(res, 200);
  assert.equal(res.json, null, describe(res));
  assert.ok(elapsed >= 550 && elapsed < 3000, `a 600 ms long poll answered null after ${elapsed} ms`);
  await a.abort(sid);
});

test("settlement long poll: answers as soon as the command settles, not at the deadline", T, async () => {
  const tag = uniq("longpoll");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { chunks: ["one ", "two ", "three ", "four ", "five ", "six"], chunkDelayMs: 50 });
  const id = await a.admit(sid, "r1", `count ${tag}`);
  const t0 = Date.now();
  const res = await a.settlement(sid, id, 10_000);
  const elapsed = Date.now() - t0;
  expectStatus(res, 200);
  assert.equal(res.json?.terminal, "completed", describe(res));
  assert.equal(res.json.answer, "one two three four five six");
  assert.ok(elapsed >= 250, `the answer takes 6 x 50 ms; the poll came back after ${elapsed} ms`);
  assert.ok(elapsed < 3000, `the long poll took ${elapsed} ms of its 10,000`);
  // Once settled, the longest poll answers at once.
  const t1 = Date.now();
  assert.deepEqual((await a.settlement(sid, id, 30_000)).json, res.json);
  assert.ok(Date.now() - t1 < 1000);
});

test("settlement: closing a long poll does not cancel the command", T, async () => {
  const tag = uniq("closepoll");
  const gate = `gate-${tag}`;
  const { a, sid } = await session();
  h.model.scriptFor(tag, { gate, text: "answered after the poll went away" });
  const id = await a.admit(sid, "r1", `wait ${tag}`);
  await modelRequests(tag);
  const ac = new AbortController();
  const poll = a.settlement(sid, id, 20_000, { signal: ac.signal }).catch((e) => e);
  // The poll is in flight at the Durable Object (there is nothing to observe but time).
  await new Promise((r) => setTimeout(r, 150));
  ac.abort();
  assert.ok((await poll) instanceof Error, "the long poll was aborted client-side");
  h.model.release(gate);
  const s = await settled(a, sid, id);
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(s.answer, "answered after the poll went away");
  assert.equal(h.model.requests(tag)[0].aborted, false, "the model call was not cut");
});

test("settlement refusals: unknown command 404, bad query 400, other method 405; an operator line is settled at admission", T, async () => {
  const { a, sid } = await session();
  await a.createSession("other");
  const op = await a.admitOperator(sid, "op", "an operator line");
  const s = await a.settlement(sid, op, 0);
  expectStatus(s, 200);
  assert.equal(s.json?.commandId, op, describe(s));
  assert.equal(s.json.terminal, "completed");
  assert.equal(s.json.answer, null);
  assert.equal(s.json.toolCallCount, 0);

  expectError(await a.settlement(sid, "cmd_does_not_exist", 0), 404, "command_not_found");
  expectError(await a.settlement("other", op, 0), 404, "command_not_found");
  expectError(await a.settlement("no-such-session", op, 0), 404, "session_not_found");
  for (const timeoutMs of ["-1", "abc", "1.5", "", "1e3"]) {
    expectError(await a.settlement(sid, op, timeoutMs), 400, "invalid_query");
  }
  expectError(await a.settlement(sid, undefined, 0), 400, "invalid_query");
  expectError(await a.api("GET", `/sessions/${sid}/settlement`), 400, "invalid_query");
  for (const method of ["POST", "DELETE"]) {
    expectError(await a.api(method, `/sessions/${sid}/settlement?commandId=${op}`, method === "POST" ? {} : undefined), 405, "method_not_allowed");
  }
  // The bounds themselves are accepted, and a longer wait is clamped to
  // 30,000 ms (seed), not refused.
  expectStatus(await a.settlement(sid, op, 30_000), 200);
  expectStatus(await a.settlement(sid, op, 30_001), 200);
  expectStatus(await a.settlement(sid, op, 86_400_000), 200);
  expectStatus(await a.settlement(sid, op, 0), 200);
});

test("FIFO: three prompts of a Session settle in order; each model call carries the answers before it", T, async () => {
  const tag = uniq("fifo");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { text: "answer one", chunkDelayMs: 5 }, { text: "answer two", chunkDelayMs: 5 }, { text: "answer three", chunkDelayMs: 5 });
  const texts = [`first ${tag}`, `second ${tag}`, `third ${tag}`];
  const ids = [];
  for (const [i, t] of texts.entries()) ids.push(await a.admit(sid, `r${i}`, t));
  const answers = ["answer one", "answer two", "answer three"];
  for (const [i, id] of ids.entries()) assert.equal((await settled(a, sid, id)).answer, answers[i]);

  const reqs = h.model.requests(tag);
  assert.equal(reqs.length, 3);
  assert.deepEqual(conversation(reqs[2]), [
    ["system", INSTRUCTIONS],
    ["user", texts[0]],
    ["assistant", answers[0]],
    ["user", texts[1]],
    ["assistant", answers[1]],
    ["user", texts[2]],
  ]);
  assert.deepEqual(conversation(reqs[1]), conversation(reqs[2]).slice(0, 4));
  assert.deepEqual(conversation(reqs[0]), conversation(reqs[2]).slice(0, 2));
  for (let i = 1; i < 3; i++) {
    assert.ok(reqs[i].receivedAt >= reqs[i - 1].endedAt, `call ${i} started before call ${i - 1} ended: one turn at a time per Session`);
  }
  const page = await a.read(sid);
  assert.deepEqual(
    page.messages.map((m) => [m.role, m.text]),
    [
      ["user", texts[0]],
      ["assistant", answers[0]],
      ["user", texts[1]],
      ["assistant", answers[1]],
      ["user", texts[2]],
      ["assistant", answers[2]],
    ],
  );
  assert.deepEqual(
    page.messages.filter((m) => m.role === "user").map((m) => [m.requestId, m.commandId]),
    ids.map((id, i) => [`r${i}`, id]),
  );
});

test("two Sessions run concurrently: two 1 s answers complete in well under 2 s", T, async () => {
  const a = h.agent();
  await a.createSession("one");
  await a.createSession("two");
  const tags = [uniq("conc-a"), uniq("conc-b")];
  const slow = { chunks: ["a ", "b ", "c ", "d ", "e"], chunkDelayMs: 200 };
  for (const tag of tags) h.model.scriptFor(tag, slow);
  const t0 = Date.now();
  const ids = [await a.admit("one", "r", `slow ${tags[0]}`), await a.admit("two", "r", `slow ${tags[1]}`)];
  const results = await Promise.all([settled(a, "one", ids[0]), settled(a, "two", ids[1])]);
  const elapsed = Date.now() - t0;
  for (const s of results) assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.ok(elapsed >= 1000, `each answer takes 1 s (took ${elapsed} ms)`);
  assert.ok(elapsed < 1900, `two Sessions took ${elapsed} ms: they did not run side by side`);
  const [ra] = h.model.requests(tags[0]);
  const [rb] = h.model.requests(tags[1]);
  assert.ok(ra.receivedAt < rb.endedAt && rb.receivedAt < ra.endedAt, "the model calls overlapped");
});

test("a retryable failure is retried on the durable timer: 500, 429, then an answer completes", T, async () => {
  const tag = uniq("retry");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { status: 500 }, { status: 429 }, { text: "third time lucky" });
  const id = await a.admit(sid, "r1", `flaky ${tag}`);
  const s = await settled(a, sid, id);
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(s.answer, "third time lucky");
  const reqs = h.model.requests(tag);
  assert.equal(reqs.length, 3);
  // Delays from SHIITAKE_RETRY_BASE_MS, doubling (a little slack for timers).
  const gaps = [reqs[1].receivedAt - reqs[0].endedAt, reqs[2].receivedAt - reqs[1].endedAt];
  assert.ok(gaps[0] >= RETRY_BASE_MS - 10, `first retry after ${gaps[0]} ms`);
  assert.ok(gaps[1] >= 2 * RETRY_BASE_MS - 10, `second retry after ${gaps[1]} ms`);
  for (const r of reqs) assert.deepEqual(conversation(r), conversation(reqs[0]), "each attempt sends the same conversation");
  // One user message and one assistant message, whatever the attempts.
  assert.deepEqual(
    (await a.read(sid)).messages.map((m) => [m.role, m.text]),
    [
      ["user", `flaky ${tag}`],
      ["assistant", "third time lucky"],
    ],
  );
});

test("retries exhausted: SHIITAKE_ATTEMPTS_MAX=3 failures are failed with a diagnostic naming HTTP 500; the Session moves on", T, async () => {
  const tag = uniq("exhaust");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { status: 500 }, { status: 500 }, { status: 500 });
  const id = await a.admit(sid, "r1", `doomed ${tag}`);
  const next = await a.admit(sid, "r2", `next ${tag}`);
  const s = await settled(a, sid, id);
  assert.equal(s.terminal, "failed", JSON.stringify(s));
  assert.equal(typeof s.diagnostic, "string", JSON.stringify(s));
  assert.match(s.diagnostic, /500/);
  assert.ok(!s.diagnostic.includes(MODEL_API_KEY));
  assert.equal(s.toolCallCount, 0);
  assert.equal(h.model.requests(tag).filter((r) => contentText(r.body.messages.at(-1).content).includes("doomed")).length, 3);
  // The queue goes on: the next prompt runs (echo) and completes.
  const n = await settled(a, sid, next);
  assert.equal(n.terminal, "completed", JSON.stringify(n));
  assert.equal(n.answer, `Echo: next ${tag}`);
  assert.equal(h.model.requests(tag).length, 4, "no attempt after the last one");
  const roles = (await a.read(sid)).messages.map((m) => m.role);
  assert.equal(roles.filter((r) => r === "assistant").length, 1, "a failed turn appends no assistant message");
});

test("a non-retryable failure (HTTP 400) is failed after one attempt", T, async () => {
  const tag = uniq("bad-request");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { status: 400, body: { error: { message: "unsupported parameter", type: "invalid_request_error", param: null, code: null } } });
  const id = await a.admit(sid, "r1", `refused ${tag}`);
  const s = await settled(a, sid, id);
  assert.equal(s.terminal, "failed", JSON.stringify(s));
  assert.match(s.diagnostic, /400/);
  assert.equal(h.model.requests(tag).length, 1);
});

test("cancel of the running command stops the model call and settles cancelled; the Session moves on", T, async () => {
  const tag = uniq("cancel-running");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { hang: true, chunks: ["partial answer "] });
  const text = `hang ${tag}`;
  const id = await a.admit(sid, "r1", text);
  await h.model.waitFor(() => h.model.requests(tag)[0]?.chunksSent === 1, { what: "the partial answer to be streamed" });
  await a.waitRunning(sid, id);
  const res = await a.cancel(sid, id);
  expectStatus(res, 200);
  assert.equal(res.json.status, "cancelled", describe(res));
  assert.equal(res.json.commandId, id);
  if ("text" in res.json) assert.equal(res.json.text, text);
  const s = await settled(a, sid, id);
  assert.equal(s.terminal, "cancelled", JSON.stringify(s));
  await modelAborted(tag);
  // Idempotent, and never too_late once cancelled.
  const again = await a.cancel(sid, id);
  assert.equal(again.json.status, "cancelled", describe(again));
  const page = await a.read(sid);
  assert.equal(page.running, null);
  assert.ok(!page.messages.some((m) => m.role === "assistant"), "no assistant message for a cancelled turn");
  assert.ok(!page.messages.some((m) => m.text.includes("partial answer")), "the partial answer is not in the transcript");
  // The Session is free again.
  const next = await a.admit(sid, "r2", `after ${tag}`);
  assert.equal((await settled(a, sid, next)).answer, `Echo: after ${tag}`);
});

test("cancel with onlyIfPending of the running command is too_late and the turn goes on; cancel of a settled one is too_late", T, async () => {
  const tag = uniq("too-late");
  const gate = `gate-${tag}`;
  const { a, sid } = await session();
  h.model.scriptFor(tag, { gate, text: "finished anyway" });
  const id = await a.admit(sid, "r1", `gated ${tag}`);
  await modelRequests(tag);
  await a.waitRunning(sid, id);
  const res = await a.cancel(sid, id, { onlyIfPending: true });
  expectStatus(res, 200);
  assert.deepEqual(res.json, { status: "too_late", commandId: id });
  assert.equal((await a.read(sid)).running?.commandId, id, "still running");
  h.model.release(gate);
  const s = await settled(a, sid, id);
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(s.answer, "finished anyway");
  assert.equal(h.model.requests(tag)[0].aborted, false);
  for (const extra of [{}, { onlyIfPending: true }]) {
    const late = await a.cancel(sid, id, extra);
    expectStatus(late, 200);
    assert.deepEqual(late.json, { status: "too_late", commandId: id });
  }
  assert.deepEqual((await a.settlement(sid, id, 0)).json, s, "the settlement did not change");
});

test("cancel of a pending prompt: cancelled with its text; it never reaches the model", T, async () => {
  const tag = uniq("cancel-pending");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { hang: true });
  const first = await a.admit(sid, "r1", `occupy ${tag}`);
  const second = await a.admit(sid, "r2", `never sent ${tag}`);
  await modelRequests(tag);
  await a.waitRunning(sid, first);
  const res = await a.cancel(sid, second);
  assert.deepEqual(res.json, { status: "cancelled", commandId: second, text: `never sent ${tag}` });
  assert.equal((await settled(a, sid, second)).terminal, "cancelled");
  // Free the Session; the next prompt runs, and the cancelled one never did.
  assert.equal((await a.cancel(sid, first)).json.status, "cancelled");
  const third = await a.admit(sid, "r3", `third ${tag}`);
  assert.equal((await settled(a, sid, third)).terminal, "completed");
  assert.ok(!h.model.requests().some((r) => JSON.stringify(r.body).includes(`never sent ${tag}`)), "the cancelled prompt reached the model");
  assert.ok(!(await a.read(sid)).messages.some((m) => m.commandId === second), "a cancelled pending prompt gets no message");
});

test("abort with one running and two pending prompts cancels all three in one answer", T, async () => {
  const tag = uniq("abort");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { hang: true, chunks: ["so far "] });
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push(await a.admit(sid, `r${i}`, `prompt ${i} ${tag}`));
  await modelRequests(tag);
  await a.waitRunning(sid, ids[0]);
  const res = await a.abort(sid);
  expectStatus(res, 200);
  assert.deepEqual(res.json, {
    status: "cancelled",
    cancelled: ids.map((commandId, i) => ({ commandId, requestId: `r${i}`, text: `prompt ${i} ${tag}` })),
  });
  for (const id of ids) assert.equal((await settled(a, sid, id)).terminal, "cancelled");
  await modelAborted(tag);
  const page = await a.read(sid);
  assert.equal(page.running, null);
  assert.deepEqual(page.pending, []);
  assert.equal(h.model.requests(tag).length, 1, "the pending prompts never reached the model");
});

test("steer: a steer prompt admitted during a turn joins it at its next model step; both settle with that turn", T, async () => {
  const tag = uniq("steer");
  const [g1, g2] = [`g1-${tag}`, `g2-${tag}`];
  const { a, sid } = await session();
  h.model.scriptFor(tag, { gate: g1, text: "first step answer" }, { gate: g2, text: "steered answer" });
  const first = await a.admit(sid, "r1", `start ${tag}`);
  await modelRequests(tag, 1);
  await a.waitRunning(sid, first);
  const steer = await a.admit(sid, "r2", `steer this way ${tag}`, { delivery: "steer" });
  h.model.release(g1);
  const [, second] = await modelRequests(tag, 2);
  // The second model call belongs to the same turn: nothing settled yet.
  assert.equal((await a.settlement(sid, first, 0)).json, null, "the first command settled before the steer joined its turn");
  assert.equal((await a.settlement(sid, steer, 0)).json, null);
  assert.equal((await a.read(sid)).running?.commandId, first, "the turn is still the first command's");
  const said = conversation(second);
  const at = (t) => said.findIndex(([role, text]) => role === "user" && text === t);
  assert.ok(at(`start ${tag}`) >= 0 && at(`steer this way ${tag}`) > at(`start ${tag}`), `the steer text follows the prompt: ${JSON.stringify(said)}`);
  h.model.release(g2);
  const [s1, s2] = [await settled(a, sid, first), await settled(a, sid, steer)];
  assert.equal(s1.terminal, "completed", JSON.stringify(s1));
  assert.equal(s2.terminal, "completed", JSON.stringify(s2));
  assert.equal(s2.answer, "steered answer");
  assert.equal(h.model.requests(tag).length, 2);
  const page = await a.read(sid);
  assert.deepEqual(page.pending, []);
  assert.equal(page.running, null);
  const steerMessage = page.messages.find((m) => m.commandId === steer && m.role === "user");
  assert.ok(steerMessage, `the steer prompt is in the transcript: ${JSON.stringify(page.messages)}`);
  assert.equal(steerMessage.requestId, "r2");
});

test("followUp: a prompt admitted during a turn runs as its own turn after it settles", T, async () => {
  const tag = uniq("followup");
  const g1 = `g1-${tag}`;
  const { a, sid } = await session();
  h.model.scriptFor(tag, { gate: g1, text: "first answer" }, { text: "second answer" });
  const first = await a.admit(sid, "r1", `start ${tag}`);
  await modelRequests(tag, 1);
  await a.waitRunning(sid, first);
  const follow = await a.admit(sid, "r2", `then this ${tag}`, { delivery: "followUp" });
  assert.deepEqual(
    (await a.pending(sid)).map((p) => [p.commandId, p.position, p.delivery]),
    [[follow, 1, "followUp"]],
  );
  h.model.release(g1);
  const s1 = await settled(a, sid, first);
  assert.equal(s1.answer, "first answer", "the first turn ended with its own answer");
  const s2 = await settled(a, sid, follow);
  assert.equal(s2.answer, "second answer");
  const reqs = h.model.requests(tag);
  assert.equal(reqs.length, 2);
  assert.deepEqual(conversation(reqs[1]).slice(1), [
    ["user", `start ${tag}`],
    ["assistant", "first answer"],
    ["user", `then this ${tag}`],
  ]);
});

test("a wasm panic mid-turn loses nothing: the turn is retried and settles completed exactly once", T, async () => {
  const tag = uniq("panic");
  const a = h.agent();
  await a.createSession("s");
  await a.createSession("bystander");
  // Admissions made before the panic.
  const op = await a.admitOperator("s", "op", "recorded before the panic");
  const holdTag = uniq("panic-bystander");
  // The panic resets the wasm instance under every turn of this isolate; the
  // bystander's turn is resumed too, and hangs again each time.
  h.model.scriptFor(holdTag, { hang: true }, { hang: true }, { hang: true });
  const bystander = await a.admit("bystander", "b1", `bystander ${holdTag}`);
  const queued = await a.admit("bystander", "b2", `queued ${holdTag}`);
  await modelRequests(holdTag);
  // A long poll parked before the panic is served again by the fresh
  // instance: null at its deadline, not a 500.
  const bystanderPoll = a.settlement("bystander", bystander, 2000);
  await new Promise((resolve) => setTimeout(resolve, 100));
  h.model.scriptFor(tag, { chunks: ["fine so far ", `then ${PANIC_MARKER} here`, " never seen"], chunkDelayMs: 10 }, { text: "recovered answer" });
  const id = await a.admit("s", "r1", `trigger ${tag}`);
  // Poll only once the second attempt is under way: a request in flight
  // while the instance traps is answered 503 runtime_restarted ("send it again").
  await modelRequests(tag, 2);
  const s = await settled(a, "s", id);
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(s.answer, "recovered answer");
  assert.equal(h.model.requests(tag).length, 2, "one attempt panicked, the next one answered");
  const page = await a.read("s");
  assert.deepEqual(
    page.messages.map((m) => [m.role, m.commandId ?? null, m.text]),
    [
      ["operator", op, "recorded before the panic"],
      ["user", id, `trigger ${tag}`],
      ["assistant", page.messages[2]?.commandId ?? null, "recovered answer"],
    ],
  );
  assert.ok(!page.messages.some((m) => m.text.includes("fine so far")), "the panicked attempt's partial answer is not in the transcript");
  const parked = await bystanderPoll;
  assert.equal(parked.status, 200, `the parked read survived the panic: ${parked.status} ${parked.text}`);
  assert.equal(parked.json, null);
  // The other Session's admissions are all still there, unsettled.
  const other = await a.queue("bystander");
  assert.deepEqual(
    other.map((c) => c.commandId),
    [bystander, queued],
  );
  assert.deepEqual((await a.withdraw("bystander", "b2")).json, { status: "accepted", commandId: queued });
  await a.abort("bystander");
});

test("no answer of the Durable Object ever carried the model API key", T, async () => {
  assert.ok(h.seen.length > 50, `few answers recorded: ${h.seen.length}`);
  for (const r of h.seen) {
    assert.ok(!r.text.includes(MODEL_API_KEY) && !r.headers.includes(MODEL_API_KEY), `${r.method} ${r.path} answered the key: ${r.text.slice(0, 300)}`);
  }
});
