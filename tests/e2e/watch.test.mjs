// Watch (docs/http.md "Watch"): GET /sessions/:id/watch is an event stream,
// a `snapshot` (the Session read) first, then `frame` events for admissions,
// turn starts, streamed deltas, stored messages and settlements, and
// `runtime-error` events for failed model calls. Closing it cancels nothing.
import assert from "node:assert/strict";
import { test } from "node:test";
import { TOKEN, expectError, kind, uniq, useWorker } from "./helpers.mjs";

// A heartbeat every 100 ms (default 15 s).
const h = useWorker({ model: "echo", bindings: { SHIITAKE_RETRY_BASE_MS: 50, SHIITAKE_RETRY_MAX_MS: 400, SHIITAKE_ATTEMPTS_MAX: 3, SHIITAKE_WATCH_HEARTBEAT_MS: 100 } });

const T = { timeout: 20_000 };

// A `message` frame carries a stored message and a `settled` frame a
// CommandSettlement, under `message` / `settlement` (or inline).
const messageOf = (ev) => ev.data.message ?? ev.data;
const settlementOf = (ev) => ev.data.settlement ?? ev.data;
const isSettled = (id) => (ev) => kind(ev) === "settled" && settlementOf(ev).commandId === id;

const session = () => h.session();

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
  assert.ok(userAt > kinds.indexOf("admitted") && userAt < kinds.indexOf("started"), `the user message when the turn starts, before \`started\`: ${kinds}`);
  assert.ok(assistantAt > kinds.lastIndexOf("delta") && assistantAt < kinds.indexOf("settled"), `the assistant message after the deltas: ${kinds}`);
  // The frames carry the stored messages, as a read returns them; a read
  // adds each one's Session position and parent, which a frame leaves to
  // the order.
  const page = await a.read(sid);
  const read = page.messages.filter((m) => m.role !== "operator");
  assert.deepEqual(read.map((m) => m.sequence), [2, 3], "after the operator line");
  assert.deepEqual(read.map((m) => m.parentEntryId), [page.messages[0].entryId, user.entryId]);
  assert.deepEqual(
    read.map(({ sequence: _, parentEntryId: __, ...m }) => m),
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

test("an idle watch gets a heartbeat comment each interval, which clients skip", T, async () => {
  // Keeps intermediaries from closing a silent stream, and lets a runtime
  // that reports a failed write free the place of a client gone away.
  const { a, sid } = await session();
  const res = await h.mf.dispatchFetch(`http://localhost/agents/${a.id}/sessions/${encodeURIComponent(sid)}/watch`, {
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const until = Date.now() + 450;
  while (Date.now() < until) {
    const next = await Promise.race([reader.read(), new Promise((r) => setTimeout(() => r({}), until - Date.now()))]);
    if (next.done) break;
    if (next.value) text += decoder.decode(next.value, { stream: true });
  }
  await reader.cancel();
  const beats = text.split("\n\n").filter((block) => block === ": heartbeat").length;
  assert.ok(beats >= 2 && beats <= 5, `${beats} heartbeats in 450 ms at one per 100 ms: ${JSON.stringify(text)}`);
  assert.ok(text.startsWith("event: snapshot\n"), "the snapshot comes first");
  // The client's parser skips them: a watch sees the snapshot, then the
  // next frame, nothing between.
  const w = await a.watch(sid);
  try {
    assert.equal((await w.next()).event, "snapshot");
    await new Promise((r) => setTimeout(r, 250));
    await a.admitOperator(sid, "op-beat", "after the beats");
    const ev = await w.next();
    assert.equal(ev.event, "frame", JSON.stringify(ev));
    assert.equal(ev.data.commandId ?? messageOf(ev).commandId, (await a.read(sid)).messages.at(-1).commandId);
  } finally {
    await w.close();
  }
});

test("watch of an unknown Session is 404 session_not_found; other methods 405", T, async () => {
  const { a, sid } = await session();
  expectError(await a.api("GET", "/sessions/nope/watch"), 404, "session_not_found");
  expectError(await a.api("POST", `/sessions/${sid}/watch`, {}), 405, "method_not_allowed");
});

// A watcher more than 256 frames behind (WATCH_BACKLOG_FRAMES_MAX,
// src/limits.rs) stops receiving frames and, once drained, gets a fresh
// snapshot instead of the backlog.
//
// What "behind" means through Miniflare: the Durable Object counts the writes
// to the watch's TransformStream that nothing has pulled yet. workerd pulls
// the stream into the HTTP socket as long as the kernel takes bytes, and on
// loopback the kernel takes a lot: workerd's send buffer autotunes to ~4 MB
// (tcp_wmem max) plus the client's receive buffer, ~5.3 MB measured. A client
// that does not read (the helper's fetch-based watch behaves exactly like a raw
// node:http request with the response paused: undici does not read ahead past
// its small stream queue) is only seen as slow once that much is queued. So the
// test first queues ~13.5 MB in big frames (five 900 kB answers: few frames,
// many bytes), then streams 600 small deltas: the slow watcher gets at most
// ~256 of that turn's frames, the rest is dropped.
//
// The turn is paced (2 ms a chunk): deltas published in one burst (the model
// server's chunks read in one go) put every watcher, however fast, more than
// 256 frames behind, so a fast watcher keeps up only with a paced stream.
const BACKLOG_FRAMES_MAX = 256;
const commandOf = (ev) => {
  if (ev.event !== "frame") return undefined;
  if (kind(ev) === "message") return messageOf(ev).commandId;
  if (kind(ev) === "settled") return settlementOf(ev).commandId;
  return ev.data.commandId;
};

/** Reads events until none arrives for `quietMs`; returns them. */
async function drain(w, quietMs = 300) {
  const got = [];
  for (;;) {
    let ev;
    try {
      ev = await w.next(quietMs);
    } catch {
      return got;
    }
    if (ev === null) throw new Error(`watch ended while draining; got: ${got.map(kind)}`);
    got.push(ev);
  }
}

test("a slow watcher is reset with a fresh snapshot rather than buffered without bound; a reading watcher gets every delta", { timeout: 10_000 }, async () => {
  const tag = uniq("watch-slow");
  const { a, sid } = await session();
  const slow = await a.watch(sid); // never read until the turn settled
  try {
    // Fill the transport's buffers in front of the slow watcher.
    const FILLS = 5;
    for (let i = 0; i < FILLS; i++) {
      const fillTag = `${tag}-fill${i}`;
      h.model.scriptFor(fillTag, { chunks: ["f".repeat(300_000), "g".repeat(300_000), "h".repeat(300_000)] });
      const fill = await a.admit(sid, `fill-${i}`, `fill ${fillTag}`);
      assert.equal((await a.waitSettled(sid, fill, { boundMs: 5000 })).terminal, "completed");
    }

    const fast = await a.watch(sid);
    try {
      assert.equal((await fast.next()).event, "snapshot");
      const chunks = Array.from({ length: 600 }, (_, i) => `${i},`);
      const answer = chunks.join("");
      h.model.scriptFor(tag, { chunks, chunkDelayMs: 2 });
      const id = await a.admit(sid, "r1", `stream 600 chunks ${tag}`);
      const fastTurn = fast.until(isSettled(id), 8000);
      // Settled, seen through the settlement long poll.
      const settled = await a.waitSettled(sid, id, { boundMs: 8000 });
      assert.equal(settled.terminal, "completed");
      assert.equal(settled.answer, answer);

      // The reading watcher: every delta, the stored messages, the settlement, no reset.
      const fastEvents = await fastTurn;
      const fastKinds = fastEvents.map(kind);
      assert.ok(!fastKinds.includes("snapshot"), `no reset for a reading watcher: ${fastKinds}`);
      const fastDeltas = fastEvents.filter((ev) => kind(ev) === "delta");
      // One delta frame per network read of the model's stream: never more
      // frames than chunks, and together exactly the answer.
      assert.ok(fastDeltas.length >= 1 && fastDeltas.length <= 600, `${fastDeltas.length} delta frames`);
      assert.equal(fastDeltas.map((d) => d.data.text).join(""), answer, "every delta's text");
      const turnFrames = fastEvents.filter((ev) => commandOf(ev) === id);
      assert.deepEqual(turnFrames.map(kind), ["admitted", "message", "started", ...Array(fastDeltas.length).fill("delta"), "message", "settled"]);

      // The slow watcher: the first snapshot, all the fill turns (they went into
      // the transport, or into the backlog), then a prefix of this turn's
      // frames at most ~256 long, then -- as soon as it has drained -- a
      // fresh snapshot instead of the rest.
      const drained = await drain(slow);
      assert.equal(drained[0].event, "snapshot");
      const later = drained.slice(1);
      const reset = later.findIndex((ev) => ev.event === "snapshot");
      const frames = reset < 0 ? later : later.slice(0, reset);
      assert.ok(frames.every((ev) => ev.event === "frame"), `frames until the reset: ${frames.map(kind)}`);
      const slowTurn = frames.filter((ev) => commandOf(ev) === id);
      const fillSettled = frames.filter((ev) => kind(ev) === "settled" && commandOf(ev) !== id).length;
      // The backlog bound (256 frames or 4 MiB) cut the stream somewhere in
      // the ~16 MB of fills and turn frames: not everything was delivered...
      assert.ok(
        fillSettled < FILLS || slowTurn.length < turnFrames.length,
        `the slow watcher got every frame (${fillSettled} fills, ${slowTurn.length} of ${turnFrames.length} turn frames): the transport buffered more than was queued`,
      );
      // ...and what it got is the start of the real sequence, in order.
      assert.ok(slowTurn.length <= BACKLOG_FRAMES_MAX + 4, `at most ~${BACKLOG_FRAMES_MAX} frames of the turn, got ${slowTurn.length}`);
      assert.deepEqual(slowTurn, turnFrames.slice(0, slowTurn.length), "what it got of the turn is a prefix of its frames");
      if (slowTurn.length > 0) assert.equal(fillSettled, FILLS, "fills come before the turn");
      assert.ok(!slowTurn.some((ev) => kind(ev) === "settled"), "the settlement was not delivered as a frame");

      // Drained, it is reset by itself (no further change needed): a fresh
      // snapshot, the Session read with the settled turn's answer in it.
      const snap = reset < 0 ? await slow.next(2000) : later[reset];
      assert.equal(snap.event, "snapshot", `a fresh snapshot, got ${kind(snap)}`);
      assert.equal(reset < 0 || reset === later.length - 1, true, `nothing after the reset yet: ${later.map(kind)}`);
      assert.deepEqual(snap.data, await a.read(sid), "the snapshot is the Session read");
      const assistant = snap.data.messages.find((m) => m.role === "assistant" && m.commandId === id);
      assert.equal(assistant?.text, answer, "the snapshot holds the settled turn's assistant message");

      // Then live frames again.
      const op = await a.admitOperator(sid, "op", `after the lag ${tag}`);
      const liveTag = `${tag}-live`;
      h.model.scriptFor(liveTag, { chunks: ["live ", "again"], chunkDelayMs: 5 });
      const next = await a.admit(sid, "r2", `after the snapshot ${liveTag}`);
      const live = await slow.until(isSettled(next), 5000);
      assert.ok(live.every((ev) => ev.event === "frame"), `live frames after the snapshot: ${live.map(kind)}`);
      const admitted = live.find((ev) => kind(ev) === "admitted" && ev.data.commandId === next);
      assert.equal(admitted?.data.commandId, next, `an admitted frame for the new command: ${live.map(kind)}`);
      const liveDeltas = live.filter((ev) => kind(ev) === "delta" && ev.data.commandId === next);
      assert.equal(liveDeltas.map((d) => d.data.text).join(""), "live again");

      // The reading watcher never needed a snapshot.
      const fastLive = await fast.until(isSettled(next), 5000);
      assert.ok(!fastLive.some((ev) => ev.event === "snapshot"), `${fastLive.map(kind)}`);
      assert.ok(fastLive.some((ev) => kind(ev) === "admitted" && ev.data.commandId === op), "the fast watcher saw the operator line admitted");
    } finally {
      await fast.close();
    }
  } finally {
    await slow.close();
  }
});
