// A wasm trap does not cost bystanders: one wasm instance serves
// every Durable Object of the isolate, so a Rust panic in one Agent's turn
// resets it under all of them. The trap is attributed to the Session whose
// code raised it (src/host/blame.rs): other Agents' and Sessions' turns
// resume at the attempt they held, however many traps come in a row,
// watches opened before the trap go on with a fresh snapshot, parked
// settlement long polls are served again within their deadline, a write cut
// off answers a retryable 503 `runtime_restarted`, and a Session whose calls
// keep trapping settles `interrupted` alone.
import assert from "node:assert/strict";
import { test } from "node:test";
import { TOKEN, expectAccepted, expectError, kind, uniq, useWorker } from "./helpers.mjs";

const PANIC_MARKER = "TRAP-HERE";
const ATTEMPTS_MAX = 3;
// The runtime's log, for counting traps.
let log = "";
const h = useWorker({
  model: "echo",
  bindings: { SHIITAKE_FAULT_PANIC_MARKER: PANIC_MARKER, SHIITAKE_ATTEMPTS_MAX: ATTEMPTS_MAX, SHIITAKE_RETRY_BASE_MS: 50 },
  log: (chunk) => (log += chunk),
});

const T = { timeout: 60_000 };
// Admits a prompt as a client does when the runtime restarts under it: the
// same requestId again after a 503 runtime_restarted (a write a reset cut off).
async function admitRetrying(a, sessionId, requestId, text) {
  for (;;) {
    const res = await a.prompt(sessionId, requestId, text);
    if (res.status !== 503) return expectAccepted(res);
    expectRestarted(res);
  }
}
// A request a reset cut off: 503 runtime_restarted with a Retry-After.
function expectRestarted(res) {
  expectError(res, 503, "runtime_restarted");
  assert.equal(res.headers.get("retry-after"), "1");
}
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
  // The call the reset cut off was sent: the usage ledger counts it unknown.
  const usage = await bystander.api("GET", "/usage?sessionId=s");
  assert.equal(usage.status, 200, usage.text);
  assert.deepEqual([usage.json.totals.calls, usage.json.totals.unknown], [1, 1], JSON.stringify(usage.json.totals));
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
  const commandId = await a.admit("bad", "r1", `trap ${trapTag}`);
  // One long poll, parked across every reset, is answered by the settlement
  // (a fresh core settles the turn as it opens), not by its timeout.
  const parkedAt = Date.now();
  const poll = await a.settlement("bad", commandId, 30_000);
  assert.notEqual(poll.json, null, "not settled");
  assert.ok(Date.now() - parkedAt < 30_000, "the parked long poll was answered by its timeout, not by the settlement");
  const s = poll.json;
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
  const calm = await a.settlement("calm", held, 0);
  assert.equal(calm.json, null, "not settled");
  await w.close();
  await a.abort("calm");
});

test("a trap storm: every turn that did not trap keeps its attempt, however many traps run around it", { timeout: 150_000 }, async () => {
  // One Agent with ten Sessions and three turns in each, all admitted at
  // once: five Sessions of ordinary turns (slow streams, so each is cut off
  // by many resets), three whose first turn traps once, two whose every
  // prompt traps on every attempt; beside it another Agent with two
  // Sessions of ordinary turns. Every Session is watched (a watch that ends
  // after its resumes is opened again, as a client does) and every turn has
  // a parked settlement long poll.
  const a = h.agent();
  const b = h.agent();
  const TURNS = 3;
  const slow = { chunks: Array.from({ length: 8 }, (_, i) => `part ${i} `), chunkDelayMs: 60 };
  const boom = { chunks: [`boom ${PANIC_MARKER}`] };
  const scripts = {
    ordinary: Array.from({ length: 40 }, () => slow),
    once: [boom, ...Array.from({ length: 40 }, () => slow)],
    always: Array.from({ length: 40 }, () => boom),
  };
  const groups = [
    [a, "ordinary", 5],
    [a, "once", 3],
    [a, "always", 2],
    [b, "ordinary", 2],
  ];
  const sessions = groups.flatMap(([agent, group, n]) =>
    Array.from({ length: n }, (_, i) => ({ agent, id: `${group}-${i}`, group, tag: uniq(`${group}-${i}`), turns: [] })),
  );
  // Every attempt a turn was seen at: `started` frames and snapshots.
  const attempts = new Map();
  const note = (id, n) => attempts.set(id, new Set([...(attempts.get(id) ?? []), n]));
  let stop = false;
  const watching = [];
  for (const s of sessions) {
    await s.agent.createSession(s.id);
    h.model.scriptFor(s.tag, ...scripts[s.group]);
    let opened;
    const first = new Promise((resolve) => (opened = resolve));
    watching.push(
      (async () => {
        while (!stop) {
          const w = await s.agent.watch(s.id, { timeoutMs: 120_000 }).catch(() => null);
          if (w === null) {
            await new Promise((resolve) => setTimeout(resolve, 20));
            continue;
          }
          s.watch = w;
          for (let ev; (ev = await w.next().catch(() => null)) !== null; ) {
            if (kind(ev) === "started") note(ev.data.commandId, ev.data.attempt);
            if (ev.event === "snapshot") {
              opened();
              if (ev.data.running) note(ev.data.running.commandId, ev.data.running.attempt);
            }
          }
          await w.close();
        }
      })(),
    );
    await first;
  }
  const trapsBefore = log.split("panic marker streamed").length;
  const polls = [];
  const settled = new Map();
  try {
    for (let t = 0; t < TURNS; t++) {
      for (const s of sessions) {
        const id = await admitRetrying(s.agent, s.id, `r${t}`, `turn ${t} of ${s.tag}`);
        s.turns.push(id);
        polls.push(s.agent.settlement(s.id, id, 30_000));
      }
    }
    for (const s of sessions) for (const id of s.turns) settled.set(id, await s.agent.waitSettled(s.id, id, { boundMs: 120_000 }));
  } finally {
    stop = true;
    for (const s of sessions) await s.watch?.close();
    await Promise.all(watching);
  }
  // Two Sessions x three turns x three attempts, and up to three turns that
  // trap once (a reset may cut a call off before its marker arrives).
  const traps = log.split("panic marker streamed").length - trapsBefore;
  const always = 2 * TURNS * ATTEMPTS_MAX;
  assert.ok(traps >= always && traps <= always + 3, `${traps} traps`);
  for (const s of sessions) {
    for (const [t, id] of s.turns.entries()) {
      const settlement = settled.get(id);
      const seen = [...(attempts.get(id) ?? [])];
      const where = `${s.id} turn ${t}: ${JSON.stringify(settlement)}, seen at attempts ${JSON.stringify(seen)}`;
      if (s.group === "always") {
        assert.equal(settlement.terminal, "interrupted", where);
        assert.match(settlement.diagnostic, /attempt limit 3 reached/, where);
      } else {
        assert.equal(settlement.terminal, "completed", where);
        // A turn that trapped once counts that attempt; no other does.
        const allowed = s.group === "once" && t === 0 ? [1, 2] : [1];
        assert.ok(seen.length > 0 && seen.every((n) => allowed.includes(n)), where);
      }
    }
  }
  for (const poll of await Promise.all(polls)) {
    assert.equal(poll.status, 200, `a parked poll is answered, never a 5xx: ${poll.status} ${poll.text}`);
  }
});

// Traps a turn of a fresh Agent once (its model streams the panic marker,
// the next attempt answers) and waits until that turn settled.
async function trapOnce() {
  const tag = uniq("trap-once");
  h.model.scriptFor(tag, { chunks: [`boom ${PANIC_MARKER}`] }, { text: "answered after the trap" });
  const culprit = h.agent();
  await culprit.createSession("c");
  const s = await culprit.settle("c", "r1", `trap ${tag}`, { boundMs: 20_000 });
  assert.equal(s.terminal, "completed", JSON.stringify(s));
}

test("a write a reset cuts off answers 503 runtime_restarted with Retry-After; sent again with its requestId it is admitted once", T, async () => {
  const a = h.agent();
  await a.createSession("w");
  // The write is in flight (its body half sent) when another Agent's turn traps.
  const encoder = new TextEncoder();
  let feed;
  const body = new ReadableStream({
    start(controller) {
      feed = controller;
      controller.enqueue(encoder.encode('{"type":"prompt","requestId":"w1",'));
    },
  });
  const cut = h.mf
    .dispatchFetch(`http://localhost/agents/${a.id}/sessions/w/commands`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body,
      duplex: "half",
    })
    .then(async (res) => ({ status: res.status, retryAfter: res.headers.get("retry-after"), text: await res.text() }));
  await new Promise((resolve) => setTimeout(resolve, 300));
  await trapOnce();
  const res = await cut;
  assert.equal(res.status, 503, res.text);
  assert.equal(res.retryAfter, "1");
  const { error } = JSON.parse(res.text);
  assert.equal(error.code, "runtime_restarted");
  assert.match(error.message, /same requestId/);
  try {
    feed.enqueue(encoder.encode('"text":"after the reset"}'));
    feed.close();
  } catch {
    // the runtime has already let go of the body
  }
  assert.deepEqual(await a.queue("w"), [], "nothing was admitted");
  const id = await a.admit("w", "w1", "after the reset");
  assert.equal(await a.admit("w", "w1", "after the reset"), id, "the same requestId is the same command");
  assert.deepEqual((await a.withdraw("w", "w1")).json, { status: "accepted", commandId: id });
  await a.waitSettled("w", id);
  const prompts = (await a.read("w")).messages.filter((m) => m.role === "user");
  assert.deepEqual(prompts.map((m) => [m.commandId, m.text]), [[id, "after the reset"]], "admitted once");
});

test("a parked settlement long poll a reset cuts off is served again with the time it has left", T, async () => {
  const a = h.agent();
  await a.createSession("s");
  const tag = uniq("held");
  h.model.scriptFor(tag, { hang: true }, { hang: true }, { hang: true });
  const held = await a.admit("s", "p1", `held ${tag}`);
  const started = Date.now();
  const poll = a.settlement("s", held, 2500).then((res) => ({ res, elapsed: Date.now() - started }));
  await new Promise((resolve) => setTimeout(resolve, 1000));
  await trapOnce();
  const { res, elapsed } = await poll;
  assert.equal(res.status, 200, res.text);
  assert.equal(res.json, null, "not settled at the deadline");
  assert.ok(elapsed < 3200, `answered at its deadline (2.5 s), not a full timeout after the reset: ${elapsed} ms`);
  await a.abort("s");
});

test("a request that traps by itself: a read is served again 3 times then answers 503, a write answers 503 at once", T, async () => {
  const a = h.agent();
  const traps = () => log.split("panic marker in the request path").length - 1;
  const before = traps();
  const read = await a.api("GET", `/sessions/${PANIC_MARKER}-read`);
  expectRestarted(read);
  assert.match(read.json.error.message, /restarted/);
  assert.equal(traps() - before, 4, "served once, then again 3 times");
  const write = await a.prompt(`${PANIC_MARKER}-write`, "r1", "hello");
  expectRestarted(write);
  assert.equal(traps() - before, 5, "a write is not served again");
  // The Agent serves on.
  await a.createSession("after");
  assert.deepEqual(await a.queue("after"), []);
});
