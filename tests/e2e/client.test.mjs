// The typed client (js/client.mjs, the package's "./client" entry) driving
// whole conversations against the demo Worker in Miniflare, over a fetch
// that adds the bearer token the way a host's authorised transport would.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { ShiitakeError, createShiitakeClient } from "../../js/client.mjs";
import { PNG_1X1, TOKEN, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({ model: "echo", bindings: { SHIITAKE_RETRY_BASE_MS: 50, SHIITAKE_RETRY_MAX_MS: 400, SHIITAKE_ATTEMPTS_MAX: 3 } });

const T = { timeout: 20_000 };
const SETTLE_MS = 10_000;

/** The host's authorised transport: Miniflare's dispatchFetch plus the bearer token. */
function authorisedFetch(token = TOKEN) {
  return (url, init) => h.mf.dispatchFetch(url, { ...init, headers: { ...init.headers, ...(token === null ? {} : { authorization: `Bearer ${token}` }) } });
}

/** A client for a fresh Agent. */
function newClient({ agentId = `agent-${randomUUID()}`, token } = {}) {
  return createShiitakeClient({ baseUrl: `http://localhost/agents/${agentId}`, fetch: authorisedFetch(token) });
}

/** A fresh Agent with one Session: `{client, session}`. */
async function fresh() {
  const client = newClient();
  const { sessionId } = await client.createSession("s");
  return { client, session: client.session(sessionId) };
}

const kind = (ev) => (ev.event === "frame" ? ev.data.type : ev.event);

/** Takes events from the watch until `predicate` holds (bounded); returns them, the match last. */
async function until(watch, predicate, timeoutMs = SETTLE_MS) {
  const got = [];
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no awaited event within ${timeoutMs} ms; got ${got.map(kind)}`)), timeoutMs);
  });
  try {
    for (;;) {
      const { value, done } = await Promise.race([watch.next(), timeout]);
      if (done) throw new Error(`the watch ended; got ${got.map(kind)}`);
      got.push(value);
      if (predicate(value)) return got;
    }
  } finally {
    clearTimeout(timer);
  }
}

const settledFrame = (commandId) => (ev) => ev.event === "frame" && ev.data.type === "settled" && ev.data.settlement.commandId === commandId;

/** Waits for the settlement with long polls. */
async function settlement(session, commandId) {
  const deadline = Date.now() + SETTLE_MS;
  for (;;) {
    const s = await session.readSettlement(commandId, { timeoutMs: Math.max(0, Math.min(30_000, deadline - Date.now())) });
    if (s !== undefined) return s;
    if (Date.now() >= deadline) throw new Error(`${commandId} not settled within ${SETTLE_MS} ms`);
  }
}

/** Asserts a ShiitakeError of this status, kind and code. */
async function expectShiitakeError(promise, status, kind, code) {
  const e = await promise.then(
    (v) => assert.fail(`expected HTTP ${status} ${code}, got ${JSON.stringify(v)}`),
    (e) => e,
  );
  assert.ok(e instanceof ShiitakeError, `expected a ShiitakeError, got ${e?.stack ?? e}`);
  assert.deepEqual([e.status, e.kind, e.code], [status, kind, code], e.message);
  assert.equal(typeof e.message, "string");
  return e;
}

test("a whole conversation: create, watch, prompt, frames until settled, readSettlement, read, replay", T, async () => {
  const tag = uniq("conversation");
  const client = newClient();
  const { sessionId } = await client.createSession();
  assert.match(sessionId, /^ses_/);
  const session = client.session(sessionId);
  const watch = session.watch();
  try {
    await watch.opened;
    const first = await watch.next();
    assert.equal(first.done, false);
    assert.deepEqual(first.value, { event: "snapshot", data: { sessionId, messages: [], pending: [], running: null, cursor: null } });

    h.model.scriptFor(tag, { chunks: ["Hel", "lo, ", "client!"], chunkDelayMs: 10, usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } });
    const text = `hello ${tag}`;
    const receipt = await session.prompt(text);
    assert.equal(receipt.status, "accepted");
    assert.match(receipt.requestId, /^[0-9a-f-]{36}$/, "a generated requestId");
    const { commandId } = receipt;

    const events = await until(watch, settledFrame(commandId));
    const kinds = events.map(kind);
    for (const k of ["admitted", "message", "started", "delta", "settled"]) assert.ok(kinds.includes(k), `a ${k} frame: ${kinds}`);
    const admitted = events.find((e) => kind(e) === "admitted");
    assert.deepEqual(admitted.data, { type: "admitted", commandId, requestId: receipt.requestId });
    const deltas = events.filter((e) => kind(e) === "delta").map((e) => e.data.text);
    assert.equal(deltas.join(""), "Hello, client!");
    const messages = events.filter((e) => kind(e) === "message").map((e) => e.data.message);
    assert.deepEqual(
      messages.map((m) => [m.role, m.text]),
      [
        ["user", text],
        ["assistant", "Hello, client!"],
      ],
    );
    assert.equal(messages[0].requestId, receipt.requestId);
    const settled = events.at(-1).data.settlement;
    assert.deepEqual(settled, { commandId, terminal: "completed", answer: "Hello, client!", usage: { inputTokens: 7, outputTokens: 3 }, toolCallCount: 0 });

    assert.deepEqual(await session.readSettlement(commandId), settled, "timeoutMs defaults to 0; settled already");
    assert.deepEqual(await session.readSettlement(commandId, { timeoutMs: 30_000 }), settled);
    // The usage ledger: the call by the usage the model sent.
    const ledger = await client.usage({ groupBy: "session" });
    assert.deepEqual(ledger.groups.map((g) => [g.key, g.calls, g.answered, g.inputTokens, g.outputTokens]), [[sessionId, 1, 1, 7, 3]]);
    assert.equal(ledger.nextCursor, null);
    await assert.rejects(client.usage({ groupBy: "week" }), (e) => e instanceof ShiitakeError && e.code === "invalid_query");
    // One Session's calls: this one's, and none for a Session never made.
    const mine = await client.usage({ sessionId, groupBy: "day" });
    assert.deepEqual([mine.sessionId, mine.totals.calls, mine.totals.inputTokens, mine.groups.length], [sessionId, 1, 7, 1]);
    assert.equal((await client.usage({ sessionId: "never-made" })).totals.calls, 0);
    await assert.rejects(client.usage({ sessionId: "x".repeat(129) }), (e) => e instanceof ShiitakeError && e.code === "invalid_query" && e.message.includes("sessionId"));

    const page = await session.read();
    assert.deepEqual(
      page.messages.map((m) => [m.role, m.text, m.entryId]),
      messages.map((m) => [m.role, m.text, m.entryId]),
    );
    assert.deepEqual([page.sessionId, page.pending, page.running, page.cursor], [sessionId, [], null, null]);
    const older = await session.read({ limit: 1 });
    assert.equal(older.messages.length, 1);
    assert.equal(typeof older.cursor, "string");
    assert.deepEqual((await session.read({ before: older.cursor, limit: 1 })).messages, [page.messages[0]]);

    // A replay under the same requestId answers the same receipt and runs nothing.
    assert.deepEqual(await session.prompt(text, { requestId: receipt.requestId }), receipt);
    assert.equal(h.model.requests(tag).length, 1);
  } finally {
    watch.close();
  }
  assert.equal(watch.closed, true);
  assert.deepEqual(await watch.next(), { value: undefined, done: true });
});

test("readSettlement: undefined while pending; an aborted long poll rejects with AbortError, cancels nothing, and the command settles later", T, async () => {
  const tag = uniq("abort-poll");
  const gate = `gate-${tag}`;
  const { session } = await fresh();
  h.model.scriptFor(tag, { gate, text: "answered after the poll went away" });
  const { commandId } = await session.prompt(`wait ${tag}`);
  await h.model.waitForRequests(1, { match: tag, timeoutMs: SETTLE_MS });
  assert.equal(await session.readSettlement(commandId), undefined, "HTTP null is undefined");
  const t0 = Date.now();
  assert.equal(await session.readSettlement(commandId, { timeoutMs: 300 }), undefined);
  assert.ok(Date.now() - t0 >= 250, "a long poll to its deadline");

  const ac = new AbortController();
  const poll = session.readSettlement(commandId, { timeoutMs: 20_000, signal: ac.signal });
  await new Promise((r) => setTimeout(r, 150)); // parked at the Durable Object
  ac.abort();
  const e = await poll.then(
    () => assert.fail("the aborted poll resolved"),
    (e) => e,
  );
  assert.equal(e.name, "AbortError", String(e));
  // An already aborted signal sends nothing.
  assert.equal((await session.readSettlement(commandId, { signal: AbortSignal.abort() }).catch((e) => e)).name, "AbortError");

  assert.equal((await session.read()).running?.commandId, commandId, "still running");
  h.model.release(gate);
  const s = await settlement(session, commandId);
  assert.deepEqual([s.terminal, s.answer], ["completed", "answered after the poll went away"]);
  assert.equal(h.model.requests(tag)[0].aborted, false, "the model call was not cut");
});

test("readSettlement aborted on a hanging model; cancel still works: too_late with onlyIfPending, then cancelled", T, async () => {
  const tag = uniq("hang");
  const { session } = await fresh();
  h.model.scriptFor(tag, { hang: true, chunks: ["partial "] });
  const text = `hang ${tag}`;
  const { commandId } = await session.prompt(text);
  await h.model.waitForRequests(1, { match: tag, timeoutMs: SETTLE_MS });

  const ac = new AbortController();
  const poll = session.readSettlement(commandId, { timeoutMs: 20_000, signal: ac.signal });
  setTimeout(() => ac.abort(), 100);
  await assert.rejects(poll, { name: "AbortError" });
  assert.equal(await session.readSettlement(commandId), undefined, "not cancelled by the aborted poll");

  // too_late is an answer, not an error; the seed's object form and the commandId-first form agree.
  assert.deepEqual(await session.cancel({ commandId, onlyIfPending: true }), { status: "too_late", commandId });
  assert.deepEqual(await session.cancel(commandId, { onlyIfPending: true }), { status: "too_late", commandId });
  const poll2 = session.readSettlement(commandId, { timeoutMs: 20_000 });
  const c = await session.cancel({ commandId });
  assert.deepEqual([c.status, c.commandId], ["cancelled", commandId]);
  const s = await poll2;
  assert.deepEqual([s?.commandId, s?.terminal], [commandId, "cancelled"], "the parked poll answers with the settlement");
  assert.deepEqual(await session.cancel(commandId), { status: "cancelled", commandId, text }, "idempotent once cancelled");
});

test("typed errors: conflict (409), not_found (404), invalid (400), refused (401, 413); network errors pass through", T, async () => {
  const { client, session } = await fresh();
  const { commandId } = await session.prompt("first text", { requestId: "r1" });
  await expectShiitakeError(session.prompt("other text", { requestId: "r1" }), 409, "conflict", "request_conflict");
  await expectShiitakeError(session.operator("first text", { requestId: "r1" }), 409, "conflict", "request_conflict");
  await expectShiitakeError(client.createSession("s"), 409, "conflict", "session_exists");

  const missing = client.session("no-such-session");
  await expectShiitakeError(missing.read(), 404, "not_found", "session_not_found");
  await expectShiitakeError(missing.prompt("x"), 404, "not_found", "session_not_found");
  await expectShiitakeError(missing.readSettlement(commandId), 404, "not_found", "session_not_found");
  await expectShiitakeError(session.readSettlement("cmd_unknown"), 404, "not_found", "command_not_found");
  await expectShiitakeError(session.cancel("cmd_unknown"), 404, "not_found", "command_not_found");
  await expectShiitakeError(client.deleteSession("no-such-session"), 404, "not_found", "session_not_found");
  const w = missing.watch();
  await expectShiitakeError(w.opened, 404, "not_found", "session_not_found");
  await expectShiitakeError(w.next(), 404, "not_found", "session_not_found");

  await expectShiitakeError(session.prompt(""), 400, "invalid", "invalid_request");
  await expectShiitakeError(session.prompt("x", { requestId: "" }), 400, "invalid", "invalid_request");
  await expectShiitakeError(session.prompt("x", { delivery: /** @type {any} */ ("later") }), 400, "invalid", "invalid_request");
  await expectShiitakeError(session.read({ limit: 0 }), 400, "invalid", "invalid_query");
  await expectShiitakeError(session.readSettlement(commandId, { timeoutMs: -1 }), 400, "invalid", "invalid_query");
  await expectShiitakeError(client.listSessions({ limit: 201 }), 400, "invalid", "invalid_query");
  await expectShiitakeError(client.createSession("not a valid id!"), 400, "invalid", "invalid_request");
  await expectShiitakeError(client.session("bad id!").read(), 400, "invalid", "invalid_request");

  await expectShiitakeError(session.prompt("x".repeat(1_100_000)), 413, "refused", "payload_too_large");
  const noAuth = createShiitakeClient({ baseUrl: "http://localhost/agents/a", fetch: authorisedFetch(null) });
  await expectShiitakeError(noAuth.listSessions(), 401, "refused", "unauthorized");
  await expectShiitakeError(newClient({ token: "wrong" }).session("s").read(), 401, "refused", "unauthorized");
  const unauthorisedWatch = noAuth.session("s").watch();
  await expectShiitakeError(unauthorisedWatch.opened, 401, "refused", "unauthorized");

  // A network failure is the transport's own error.
  const down = new TypeError("fetch failed: connection refused");
  const offline = createShiitakeClient({
    baseUrl: "http://localhost/agents/a",
    fetch: async () => {
      throw down;
    },
  });
  assert.equal(await offline.session("s").prompt("x").catch((e) => e), down);
});

test("withdraw: unknown fences the requestId (a later prompt under it is a conflict); an admitted one answers its commandId", T, async () => {
  const { session } = await fresh();
  assert.deepEqual(await session.withdraw("lost-1"), { status: "unknown" });
  assert.deepEqual(await session.withdraw("lost-1"), { status: "unknown" }, "idempotent");
  await expectShiitakeError(session.prompt("resent", { requestId: "lost-1" }), 409, "conflict", "request_withdrawn");

  const receipt = await session.prompt(`admitted ${uniq("withdraw")}`, { requestId: "sent-1" });
  assert.deepEqual(await session.withdraw("sent-1"), { status: "accepted", commandId: receipt.commandId });
  const s = await settlement(session, receipt.commandId);
  assert.equal(s.terminal, "completed", "withdraw never cancels admitted work");

  const op = await session.operator("a line", { requestId: "op-1" });
  assert.deepEqual(await session.withdraw("op-1"), { status: "accepted", commandId: op.commandId });
});

test("operator: recorded at once, settled completed with a null answer, seen by a watch", T, async () => {
  const { session } = await fresh();
  const watch = session.watch();
  try {
    assert.equal((await watch.next()).value.event, "snapshot");
    const op = await session.operator("the operator speaks");
    assert.equal(op.status, "accepted");
    assert.match(op.requestId, /^[0-9a-f-]{36}$/);
    const events = await until(watch, (e) => kind(e) === "message" && e.data.message.role === "operator");
    const line = events.at(-1).data.message;
    assert.deepEqual([line.text, line.requestId, line.commandId], ["the operator speaks", op.requestId, op.commandId]);
    const s = await session.readSettlement(op.commandId);
    assert.deepEqual([s.terminal, s.answer, s.toolCallCount], ["completed", null, 0]);
    assert.deepEqual(await session.operator("the operator speaks", { requestId: op.requestId }), op, "a replay");
    const page = await session.read();
    assert.deepEqual(
      page.messages.map((m) => m.role),
      ["operator"],
    );
  } finally {
    watch.close();
  }
});

test("abort: the running turn and every queued prompt are cancelled in one write, with their texts", T, async () => {
  const tag = uniq("abort");
  const { session } = await fresh();
  h.model.scriptFor(tag, { hang: true });
  const running = await session.prompt(`runs ${tag}`);
  await h.model.waitForRequests(1, { match: tag, timeoutMs: SETTLE_MS });
  const q1 = await session.prompt(`queued one ${tag}`, { requestId: "q1" });
  const q2 = await session.prompt(`queued two ${tag}`, { requestId: "q2", delivery: "followUp" });
  const page = await session.read();
  assert.equal(page.running?.commandId, running.commandId);
  assert.deepEqual(
    page.pending.map((p) => [p.commandId, p.position, p.delivery]),
    [
      [q1.commandId, 1, "followUp"],
      [q2.commandId, 2, "followUp"],
    ],
  );
  const out = await session.abort();
  assert.deepEqual(out, {
    status: "cancelled",
    cancelled: [
      { commandId: running.commandId, requestId: running.requestId, text: `runs ${tag}` },
      { commandId: q1.commandId, requestId: "q1", text: `queued one ${tag}` },
      { commandId: q2.commandId, requestId: "q2", text: `queued two ${tag}` },
    ],
  });
  for (const { commandId } of [running, q1, q2]) assert.equal((await settlement(session, commandId)).terminal, "cancelled");
  assert.deepEqual(await session.abort(), { status: "cancelled", cancelled: [] }, "nothing left to abort");
});

test("sessions: list pages with the cursor, delete; a watch of a deleted Session ends", T, async () => {
  const client = newClient();
  const ids = ["a", "b", "c"];
  for (const id of ids) assert.deepEqual(await client.createSession(id), { sessionId: id });
  const seen = [];
  let cursor = null;
  for (let i = 0; i < 10; i++) {
    const page = await client.listSessions({ limit: 2, cursor });
    assert.ok(page.sessions.length <= 2);
    for (const s of page.sessions) {
      assert.equal(typeof s.createdAt, "number");
      seen.push(s.sessionId);
    }
    cursor = page.cursor;
    if (cursor === null) break;
  }
  assert.deepEqual(seen.sort(), ids);

  const watch = client.session("b").watch();
  assert.equal((await watch.next()).value.event, "snapshot");
  await client.deleteSession("b");
  const end = await Promise.race([watch.next(), new Promise((r) => setTimeout(() => r("still open"), 5000))]);
  assert.deepEqual(end, { value: undefined, done: true }, "the server ended the watch");
  watch.close();
  await expectShiitakeError(client.session("b").read(), 404, "not_found", "session_not_found");
  assert.deepEqual(
    (await client.listSessions()).sessions.map((s) => s.sessionId).sort(),
    ["a", "c"],
  );
});

test("releasing the client closes its watches and cancels no host work", T, async () => {
  const tag = uniq("release");
  const gate = `gate-${tag}`;
  const agentId = `agent-${randomUUID()}`;
  const client = newClient({ agentId });
  await client.createSession("s");
  const session = client.session("s");
  const watches = [session.watch(), session.watch()];
  for (const w of watches) assert.equal((await w.next()).value.event, "snapshot");
  h.model.scriptFor(tag, { gate, text: "done anyway" });
  const { commandId } = await session.prompt(`work ${tag}`);
  await h.model.waitForRequests(1, { match: tag, timeoutMs: SETTLE_MS });
  const poll = session.readSettlement(commandId, { timeoutMs: 20_000 });
  client.close();
  for (const w of watches) {
    assert.equal(w.closed, true);
    assert.deepEqual(await w.next(), { value: undefined, done: true });
  }
  assert.throws(() => session.watch(), /closed/);
  h.model.release(gate);
  const s = await poll;
  assert.deepEqual([s?.terminal, s?.answer], ["completed", "done anyway"], "the long poll in flight went on");
  assert.equal(h.model.requests(tag)[0].aborted, false);

  // Another client of the same Agent: the released watches are gone (the
  // Session has room for its 16 again), and the work is done.
  const other = newClient({ agentId }).session("s");
  const opened = [];
  try {
    for (let i = 0; i < 16; i++) opened.push(other.watch());
    await Promise.all(opened.map((w) => w.opened));
    const extra = other.watch();
    await expectShiitakeError(extra.opened, 429, "refused", "too_many_observers");
  } finally {
    for (const w of opened) w.close();
  }
  assert.equal((await other.readSettlement(commandId)).terminal, "completed");
});

test("for await over a watch: leaving the loop closes it", T, async () => {
  const tag = uniq("loop");
  const { session } = await fresh();
  const watch = session.watch();
  const { commandId } = await session.prompt(`loop ${tag}`);
  const kinds = [];
  for await (const ev of watch) {
    kinds.push(kind(ev));
    if (settledFrame(commandId)(ev)) break;
  }
  assert.equal(kinds[0], "snapshot");
  assert.equal(kinds.at(-1), "settled");
  assert.equal(watch.closed, true);
});

test("latestPending: the newest pending prompt, or null", T, async () => {
  const tag = uniq("latest");
  const { session } = await fresh();
  assert.equal(await session.latestPending(), null, "nothing pending");
  h.model.scriptFor(tag, { hang: true });
  const running = await session.prompt(`runs ${tag}`);
  await h.model.waitForRequests(1, { match: tag, timeoutMs: SETTLE_MS });
  assert.equal(await session.latestPending(), null, "a started command is not pending");
  await session.prompt(`older ${tag}`, { requestId: "p1" });
  const images = [{ mediaType: "image/png", data: PNG_1X1 }];
  const newest = await session.prompt(`newest ${tag}`, { requestId: "p2", delivery: "steer", images });
  const item = await session.latestPending();
  assert.equal(item?.commandId, newest.commandId, JSON.stringify(item));
  assert.deepEqual([item.requestId, item.text, item.delivery, item.images], ["p2", `newest ${tag}`, "steer", images]);
  await session.abort();
  assert.equal(await session.latestPending(), null);
  assert.equal((await settlement(session, running.commandId)).terminal, "cancelled");
});
