// Watch (docs/http.md "Watch"): GET /sessions/:id/watch is an event stream,
// a `snapshot` (the Session read) first, then `frame` events for admissions,
// turn starts, streamed deltas, stored messages and settlements, and
// `runtime-error` events for failed model calls. Closing it cancels nothing.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import { expectError, kind, startWorker } from "./helpers.mjs";

let h;
before(async () => {
  h = await startWorker({ model: "echo", bindings: { SHIITAKE_RETRY_BASE_MS: 50, SHIITAKE_RETRY_MAX_MS: 400, SHIITAKE_ATTEMPTS_MAX: 3 } });
});
after(async () => {
  await h?.dispose();
});

const T = { timeout: 20_000 };
const uniq = (name) => `[${name}-${randomUUID().slice(0, 8)}]`;

// A `message` frame carries a stored message and a `settled` frame a
// CommandSettlement, under `message` / `settlement` (or inline).
const messageOf = (ev) => ev.data.message ?? ev.data;
const settlementOf = (ev) => ev.data.settlement ?? ev.data;
const isSettled = (id) => (ev) => kind(ev) === "settled" && settlementOf(ev).commandId === id;

async function session() {
  const a = h.agent();
  const sid = await a.createSession("s");
  return { a, sid };
}

/** Opens a watch, admits a prompt answered in four chunks, and reads until it settles. */
async function watchOneTurn(tag) {
  const { a, sid } = await session();
  const op = await a.admitOperator(sid, "op", "before the watch");
  const w = await a.watch(sid);
  try {
    const first = await w.next();
    h.model.scriptFor(tag, { chunks: ["Stre", "amed ", "ans", "wer"], chunkDelayMs: 20 });
    const text = `stream it ${tag}`;
    const id = await a.admit(sid, "r1", text);
    const events = await w.until(isSettled(id));
    return { a, sid, op, id, text, first, events };
  } finally {
    await w.close();
  }
}

test("watch: snapshot first, then admitted, started, deltas that add up to the answer, settled", T, async () => {
  const { a, sid, op, id, first, events } = await watchOneTurn(uniq("watch"));
  assert.equal(first.event, "snapshot");
  assert.deepEqual(
    first.data.messages.map((m) => m.commandId),
    [op],
  );
  assert.deepEqual({ ...first.data, messages: [] }, { sessionId: sid, messages: [], pending: [], running: null, cursor: null }, "the snapshot is the Session read");
  const kinds = events.map(kind);
  for (const ev of events) assert.equal(ev.event, "frame", `only frames follow the snapshot here: ${JSON.stringify(ev)}`);

  const at = (k) => kinds.indexOf(k);
  const admitted = events[at("admitted")];
  assert.ok(admitted, `an admitted frame: ${kinds}`);
  assert.equal(admitted.data.commandId, id);
  assert.equal(admitted.data.requestId, "r1");
  assert.ok(at("started") > at("admitted"), `started after admitted: ${kinds}`);
  assert.equal(events[at("started")].data.commandId, id);
  const deltas = events.filter((ev) => kind(ev) === "delta");
  assert.ok(deltas.length >= 2, `at least two deltas: ${kinds}`);
  assert.ok(kinds.indexOf("delta") > at("started"));
  for (const d of deltas) assert.equal(d.data.commandId, id);
  const settled = settlementOf(events.at(-1));
  assert.equal(settled.terminal, "completed");
  assert.equal(settled.answer, "Streamed answer");
  assert.equal(
    deltas.map((d) => d.data.text).join(""),
    settled.answer,
    "the deltas add up to the answer",
  );
  assert.deepEqual((await a.settlement(sid, id, 0)).json, settled, "the settled frame is the CommandSettlement");
});

test("watch: message frames carry the stored user message (at the turn start) and assistant message (before settled)", T, async () => {
  const { a, sid, id, text, events } = await watchOneTurn(uniq("watch-msg"));
  const kinds = events.map(kind);
  const messages = events.filter((ev) => kind(ev) === "message").map(messageOf);
  const user = messages.find((m) => m.role === "user");
  const assistant = messages.find((m) => m.role === "assistant");
  assert.ok(user, `a message frame for the user message: ${kinds}`);
  assert.deepEqual([user.commandId, user.requestId, user.text], [id, "r1", text]);
  assert.ok(assistant, `a message frame for the assistant message: ${kinds}`);
  assert.equal(assistant.text, "Streamed answer");
  const userAt = events.findIndex((ev) => kind(ev) === "message" && messageOf(ev).role === "user");
  const assistantAt = events.findIndex((ev) => kind(ev) === "message" && messageOf(ev).role === "assistant");
  assert.ok(userAt > kinds.indexOf("started") && userAt < kinds.indexOf("delta"), `the user message when the turn starts: ${kinds}`);
  assert.ok(assistantAt > kinds.lastIndexOf("delta") && assistantAt < kinds.indexOf("settled"), `the assistant message after the deltas: ${kinds}`);
  // The frames carry the stored messages, as a read returns them.
  const page = await a.read(sid);
  assert.deepEqual(
    page.messages.filter((m) => m.role !== "operator"),
    [user, assistant],
  );
});

test("a watch opened mid-turn snapshots running and pending work", T, async () => {
  const tag = uniq("watch-mid");
  const gate = `gate-${tag}`;
  const { a, sid } = await session();
  h.model.scriptFor(tag, { gate, text: "done" });
  const id = await a.admit(sid, "r1", `first ${tag}`);
  const next = await a.admit(sid, "r2", `second ${tag}`);
  await h.model.waitForRequests(1, { match: tag });
  await a.waitRunning(sid, id);
  const w = await a.watch(sid);
  try {
    const snap = await w.next();
    assert.equal(snap.event, "snapshot");
    assert.equal(snap.data.running?.commandId, id);
    assert.deepEqual(
      snap.data.pending.map((p) => p.commandId),
      [next],
    );
    h.model.release(gate);
    const events = await w.until(isSettled(next));
    const settledIds = events.filter((ev) => kind(ev) === "settled").map((ev) => settlementOf(ev).commandId);
    assert.deepEqual(settledIds, [id, next], "settlements in FIFO order");
    const started = events.filter((ev) => kind(ev) === "started").map((ev) => ev.data.commandId);
    assert.deepEqual(started, [next], "only the second turn starts after the snapshot");
  } finally {
    await w.close();
  }
});

test("a failed model call shows as a runtime-error event with its retry delay; the retry completes", T, async () => {
  const tag = uniq("watch-error");
  const { a, sid } = await session();
  h.model.scriptFor(tag, { status: 503 }, { text: "after the retry" });
  const w = await a.watch(sid);
  try {
    assert.equal((await w.next()).event, "snapshot");
    const id = await a.admit(sid, "r1", `flaky ${tag}`);
    const events = await w.until(isSettled(id));
    const errors = events.filter((ev) => kind(ev) === "runtime-error");
    assert.equal(errors.length, 1, `one runtime-error: ${events.map(kind)}`);
    const err = errors[0].data;
    assert.equal(err.commandId, id);
    assert.match(err.diagnostic, /503/);
    assert.equal(typeof err.retryInMs, "number", JSON.stringify(err));
    assert.ok(err.retryInMs >= 0);
    assert.equal(settlementOf(events.at(-1)).answer, "after the retry");
  } finally {
    await w.close();
  }
});

test("closing a watch cancels nothing: the turn it watched still completes", T, async () => {
  const tag = uniq("watch-close");
  const gate = `gate-${tag}`;
  const { a, sid } = await session();
  h.model.scriptFor(tag, { gate, chunks: ["still ", "done"] });
  const w = await a.watch(sid);
  assert.equal((await w.next()).event, "snapshot");
  const id = await a.admit(sid, "r1", `watched ${tag}`);
  await w.until((ev) => kind(ev) === "started" && ev.data.commandId === id);
  await w.close();
  h.model.release(gate);
  const s = await a.waitSettled(sid, id, { boundMs: 10_000 });
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(s.answer, "still done");
  assert.equal(h.model.requests(tag)[0].aborted, false);
  // A new watch starts over with a snapshot holding the answer.
  const again = await a.watch(sid);
  try {
    const snap = await again.next();
    assert.equal(snap.event, "snapshot");
    assert.deepEqual(
      snap.data.messages.map((m) => [m.role, m.text]),
      [
        ["user", `watched ${tag}`],
        ["assistant", "still done"],
      ],
    );
  } finally {
    await again.close();
  }
});

test("watch of an unknown Session is 404 session_not_found; other methods 405", T, async () => {
  const { a, sid } = await session();
  expectError(await a.api("GET", "/sessions/nope/watch"), 404, "session_not_found");
  expectError(await a.api("POST", `/sessions/${sid}/watch`, {}), 405, "method_not_allowed");
});
