// The typed client (js/client.mjs) without a Worker (no Miniflare): its event-stream parser
// on every kind of chunk split, the watch's life cycle, request encoding and
// the mapping of answers to ShiitakeError, all against a fake fetch.
import assert from "node:assert/strict";
import { test } from "node:test";
import { RESPONSE_BYTES_MAX, SseParser, ShiitakeError, WATCH_EVENT_BYTES_MAX, createShiitakeClient } from "../../js/client.mjs";

const enc = new TextEncoder();

/** A seeded PRNG (mulberry32), so a failing split reproduces (helpers.mjs has the same; importing it loads Miniflare). */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const BASE = "https://host.example/agents/demo";

/** Feeds `bytes` to a fresh parser cut at `cuts` (sorted offsets); returns every event. */
function parseSplit(bytes, cuts, max) {
  const p = new SseParser(max);
  const out = [];
  let at = 0;
  for (const c of [...cuts, bytes.length]) {
    p.push(bytes.subarray(at, c), out);
    at = c;
  }
  p.end();
  return out;
}

const STREAM =
  "\uFEFF: a comment\n" +
  "event: snapshot\ndata: {\"a\":1}\n\n" +
  "event: frame\r\ndata: {\"type\":\"delta\",\"text\":\"h\u00e9llo \u{1F344} \u4e16\u754c\"}\r\n\r\n" +
  "event: frame\rdata:{\"line\":1,\rdata: \"two\":2}\r\r" +
  "id: 7\nretry: 10\nevent: no-data\n\n" +
  "data: plain\n\n" +
  "event: runtime-error\ndata\ndata: x\n\n" +
  "event: tail\ndata: never terminated";

const EXPECTED = [
  { event: "snapshot", data: '{"a":1}' },
  { event: "frame", data: '{"type":"delta","text":"h\u00e9llo \u{1F344} \u4e16\u754c"}' },
  { event: "frame", data: '{"line":1,\n"two":2}' },
  { event: "message", data: "plain" },
  { event: "runtime-error", data: "\nx" },
];

test("SSE parser: LF, CRLF and CR line ends, comments, multi-line data, a BOM, fields without a colon, an unterminated tail dropped", () => {
  assert.deepEqual(parseSplit(enc.encode(STREAM), []), EXPECTED);
});

test("SSE parser: the same events however the bytes are split (every single cut, every byte alone, random cuts)", () => {
  const bytes = enc.encode(STREAM);
  for (let c = 0; c <= bytes.length; c++) assert.deepEqual(parseSplit(bytes, [c]), EXPECTED, `cut at byte ${c}`);
  assert.deepEqual(
    parseSplit(bytes, [...bytes.keys()].slice(1)),
    EXPECTED,
    "one byte per chunk (a CRLF and multi-byte characters split across chunks)",
  );
  const random = rng(0x5eed);
  for (let round = 0; round < 200; round++) {
    const cuts = [];
    for (let i = 1; i < bytes.length; i++) if (random() < 0.15) cuts.push(i);
    assert.deepEqual(parseSplit(bytes, cuts), EXPECTED, `cuts ${cuts}`);
  }
});

test("SSE parser: an event may reach its byte cap, not pass it; the cap is per event", () => {
  const max = 64;
  // "data: " + payload + "\n" is the event's one line (7 bytes of framing).
  const fits = `data: ${"x".repeat(max - 7)}\n\n`;
  assert.deepEqual(parseSplit(enc.encode(fits), []), [{ event: "message", data: "x".repeat(max - 7) }]);
  // Many events, each under the cap, far more than the cap in all.
  const many = enc.encode(fits.repeat(100));
  assert.equal(parseSplit(many, [13, 500, 1001], max).length, 100);

  const over = enc.encode(`data: ${"x".repeat(max - 6)}\n\n`);
  for (const cuts of [[], [10], [...over.keys()].slice(1)]) {
    assert.throws(
      () => parseSplit(over, cuts, max),
      (e) => e instanceof ShiitakeError && e.code === "event_too_large",
    );
  }
  // Lines without a line end count too: a stream that never ends a line fails at the cap.
  const p = new SseParser(max);
  assert.throws(() => {
    for (let i = 0; i < 100; i++) p.push(enc.encode("data: xxxxxxxx"));
  }, /exceeds 64 bytes/);
  // Comments count toward the event they sit in.
  assert.throws(() => parseSplit(enc.encode(`: ${"c".repeat(40)}\n: ${"c".repeat(40)}\ndata: x\n\n`), [], max), /exceeds/);
  assert.equal(WATCH_EVENT_BYTES_MAX, 8 * 1024 * 1024);
});

// ---- a fake transport ----

/** A fetch that records its calls and answers with `answer(url, init)` (a Response, or a function of the call). */
function fakeFetch(answer) {
  const calls = [];
  const f = async function (url, init) {
    calls.push({ url, init, body: init.body === undefined ? undefined : JSON.parse(init.body), thisValue: this });
    return typeof answer === "function" ? answer(url, init) : answer;
  };
  f.calls = calls;
  return f;
}

const json = (status, body, headers = {}) =>
  new Response(body === undefined ? null : JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });

/** A streaming answer whose chunks are pushed by the test; records a cancel. */
function sseResponse() {
  let controller;
  const state = { cancelled: false };
  const body = new ReadableStream({
    start(c) {
      controller = c;
    },
    cancel() {
      state.cancelled = true;
    },
  });
  state.push = (s) => controller.enqueue(typeof s === "string" ? enc.encode(s) : s);
  state.end = () => controller.close();
  state.error = (e) => controller.error(e);
  state.response = new Response(body, { status: 200, headers: { "content-type": "text/event-stream; charset=utf-8" } });
  return state;
}

const ev = (event, data) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

test("requests: URL, method, headers and closed-schema bodies; undefined options are not sent; a plain fetch call", async () => {
  const f = fakeFetch((url, init) => {
    if (init.method === "DELETE") return new Response(null, { status: 204 });
    if (url.includes("/settlement")) return json(200, null);
    if (url.includes("/pending/latest")) return json(200, null);
    return json(200, { status: "accepted", commandId: "cmd_1" });
  });
  const client = createShiitakeClient({ baseUrl: `${BASE}//`, fetch: f });
  const s = client.session("a b/c");
  assert.equal(f.calls.length, 0, "addressing a Session performs no I/O");
  assert.equal(s.id, "a b/c");

  const r1 = await s.prompt("hi");
  assert.match(r1.requestId, /^[0-9a-f-]{36}$/, "a generated requestId (crypto.randomUUID)");
  assert.deepEqual(r1, { status: "accepted", commandId: "cmd_1", requestId: r1.requestId });
  const r2 = await s.prompt("hi", { requestId: "r2", delivery: "steer", images: [{ mediaType: "image/png", data: "AA==" }] });
  assert.equal(r2.requestId, "r2");
  const r3 = await s.operator("op");
  assert.notEqual(r3.requestId, r1.requestId);
  await s.operator("op", { requestId: "o2" });
  await s.withdraw("r9");
  await s.cancel("cmd_1");
  await s.cancel("cmd_1", { onlyIfPending: true });
  await s.abort();
  await s.read();
  await s.read({ before: "17", limit: 5 });
  await s.read({ before: null });
  assert.equal(await s.readSettlement("cmd_1", { timeoutMs: 250 }), undefined, "HTTP null is undefined");
  await s.readSettlement("cmd_1");
  assert.equal(await s.latestPending(), null);
  await client.listSessions();
  await client.listSessions({ limit: 10, cursor: "c1" });
  await client.listSessions({ cursor: null });
  await client.createSession();
  await client.createSession("s2");
  assert.equal(await client.deleteSession("s2"), undefined);

  const session = `${BASE}/sessions/a%20b%2Fc`;
  const got = f.calls.map((c) => [c.init.method, c.url, c.body]);
  assert.deepEqual(got, [
    ["POST", `${session}/commands`, { type: "prompt", requestId: r1.requestId, text: "hi" }],
    ["POST", `${session}/commands`, { type: "prompt", requestId: "r2", text: "hi", images: [{ mediaType: "image/png", data: "AA==" }], delivery: "steer" }],
    ["POST", `${session}/commands`, { type: "operator", requestId: r3.requestId, text: "op" }],
    ["POST", `${session}/commands`, { type: "operator", requestId: "o2", text: "op" }],
    ["POST", `${session}/withdraw`, { requestId: "r9" }],
    ["POST", `${session}/commands`, { type: "cancel", commandId: "cmd_1" }],
    ["POST", `${session}/commands`, { type: "cancel", commandId: "cmd_1", onlyIfPending: true }],
    ["POST", `${session}/commands`, { type: "abort" }],
    ["GET", session, undefined],
    ["GET", `${session}?before=17&limit=5`, undefined],
    ["GET", session, undefined],
    ["GET", `${session}/settlement?commandId=cmd_1&timeoutMs=250`, undefined],
    ["GET", `${session}/settlement?commandId=cmd_1`, undefined],
    ["GET", `${session}/pending/latest`, undefined],
    ["GET", `${BASE}/sessions`, undefined],
    ["GET", `${BASE}/sessions?limit=10&cursor=c1`, undefined],
    ["GET", `${BASE}/sessions`, undefined],
    ["POST", `${BASE}/sessions`, {}],
    ["POST", `${BASE}/sessions`, { sessionId: "s2" }],
    ["DELETE", `${BASE}/sessions/s2`, undefined],
  ]);
  for (const c of f.calls) {
    assert.equal(c.thisValue, undefined, "fetch is called as a plain function");
    assert.equal(c.init.headers.accept, "application/json");
    assert.equal(c.init.headers["content-type"], c.body === undefined ? undefined : "application/json");
  }
});

test("errors: the status gives the kind, the body the code and message; too_late is an answer, not an error", async () => {
  const cases = [
    [400, "invalid_request", "invalid"],
    [400, "invalid_query", "invalid"],
    [401, "unauthorized", "refused"],
    [403, "forbidden", "refused"],
    [404, "session_not_found", "not_found"],
    [405, "method_not_allowed", "invalid"],
    [409, "request_conflict", "conflict"],
    [409, "request_withdrawn", "conflict"],
    [413, "payload_too_large", "refused"],
    [429, "queue_full", "refused"],
    [500, "internal_error", "unavailable"],
    [503, "storage_incompatible", "unavailable"],
  ];
  for (const [status, code, kind] of cases) {
    const client = createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(() => json(status, { error: { code, message: `the ${code} message` } })) });
    const e = await client
      .session("s")
      .prompt("x")
      .then(
        () => assert.fail("resolved"),
        (e) => e,
      );
    assert.ok(e instanceof ShiitakeError && e instanceof Error, String(e));
    assert.deepEqual([e.name, e.status, e.code, e.kind, e.message], ["ShiitakeError", status, code, kind, `the ${code} message`]);
  }
  // A body without the error object (a proxy's page, an empty 502) keeps the status.
  for (const res of [
    new Response("<html>bad gateway</html>", { status: 502, statusText: "Bad Gateway" }),
    new Response(null, { status: 504 }),
    json(429, { message: "slow down" }),
    new Response("x".repeat(200_000), { status: 400 }),
  ]) {
    const e = await createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(res) })
      .listSessions()
      .catch((e) => e);
    assert.ok(e instanceof ShiitakeError, String(e));
    assert.equal(e.code, `http_${res.status}`);
    assert.equal(e.kind, res.status === 429 ? "refused" : res.status === 400 ? "invalid" : "unavailable");
    assert.match(e.message, new RegExp(`^HTTP ${res.status}`));
  }
  // too_late is a 200.
  const tooLate = { status: "too_late", commandId: "cmd_1" };
  const c = createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(json(200, tooLate)) });
  assert.deepEqual(await c.session("s").cancel("cmd_1", { onlyIfPending: true }), tooLate);
  // A 2xx the client cannot use.
  const bad = await createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(new Response("not json", { status: 200 })) })
    .session("s")
    .read()
    .catch((e) => e);
  assert.deepEqual([bad instanceof ShiitakeError, bad.code, bad.kind], [true, "invalid_response", "unavailable"]);
});

test("errors: network failures propagate unchanged; an aborted call rejects with the signal's reason; a huge answer is refused", async () => {
  const boom = new TypeError("fetch failed");
  const client = createShiitakeClient({
    baseUrl: BASE,
    fetch: async () => {
      throw boom;
    },
  });
  assert.equal(await client.session("s").prompt("x").catch((e) => e), boom, "the very same error object");
  assert.equal(await client.listSessions().catch((e) => e), boom);

  // A transport that turns an abort into its own error: the caller still sees the AbortError.
  const hanging = createShiitakeClient({
    baseUrl: BASE,
    fetch: (url, init) =>
      new Promise((_, reject) => init.signal.addEventListener("abort", () => reject(new TypeError("terminated")), { once: true })),
  });
  const ac = new AbortController();
  const poll = hanging.session("s").readSettlement("cmd_1", { timeoutMs: 30_000, signal: ac.signal });
  ac.abort();
  const e = await poll.catch((e) => e);
  assert.equal(e.name, "AbortError", String(e));
  const custom = new Error("mine");
  const ac2 = new AbortController();
  const p2 = hanging.session("s").readSettlement("cmd_1", { signal: ac2.signal });
  ac2.abort(custom);
  assert.equal(await p2.catch((e) => e), custom);

  // Bodies are read bounded.
  const huge = new ReadableStream({
    pull(c) {
      c.enqueue(new Uint8Array(1024 * 1024).fill(0x20));
    },
  });
  const big = createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(new Response(huge, { status: 200 })) });
  const tooBig = await big.session("s").read().catch((e) => e);
  assert.deepEqual([tooBig instanceof ShiitakeError, tooBig.code], [true, "response_too_large"]);
  assert.equal(RESPONSE_BYTES_MAX, 16 * 1024 * 1024);
});

test("watch: events parsed across chunk splits, unknown events skipped, done when the server ends the stream", async () => {
  const sse = sseResponse();
  const f = fakeFetch(() => sse.response);
  const client = createShiitakeClient({ baseUrl: BASE, fetch: f });
  const w = client.session("s").watch();
  assert.equal(f.calls.length, 1, "the watch request starts at once");
  assert.equal(f.calls[0].url, `${BASE}/sessions/s/watch`);
  assert.equal(f.calls[0].init.headers.accept, "text/event-stream");
  await w.opened;

  const snapshot = { sessionId: "s", messages: [], pending: [], running: null, cursor: null };
  const delta = { type: "delta", commandId: "cmd_1", text: "h\u00e9 \u{1F344}" };
  const rerr = { commandId: "cmd_1", diagnostic: "HTTP 500", retryInMs: 50 };
  const text = ev("snapshot", snapshot) + ": keepalive\n\n" + ev("frame", delta) + ev("future-kind", { x: 1 }) + "data: {}\n\n" + ev("runtime-error", rerr);
  const bytes = enc.encode(text);
  // Odd-sized chunks, cutting inside lines, CR/LF pairs and characters.
  for (let i = 0; i < bytes.length; i += 7) sse.push(bytes.slice(i, i + 7));
  assert.deepEqual(await w.next(), { value: { event: "snapshot", data: snapshot }, done: false });
  assert.deepEqual(await w.next(), { value: { event: "frame", data: delta }, done: false });
  assert.deepEqual(await w.next(), { value: { event: "runtime-error", data: rerr }, done: false });
  // Concurrent next() calls share one read and get events in order.
  const [a, b] = [w.next(), w.next()];
  sse.push(ev("frame", { type: "started", commandId: "c", attempt: 1 }) + ev("frame", { type: "started", commandId: "c", attempt: 2 }));
  assert.deepEqual([(await a).value.data.attempt, (await b).value.data.attempt], [1, 2]);
  const end = w.next();
  sse.end();
  assert.deepEqual(await end, { value: undefined, done: true });
  assert.deepEqual(await w.next(), { value: undefined, done: true });
  assert.equal(w.closed, false, "ended by the server, not closed");
  w.close();
  assert.equal(w.closed, true);
});

test("watch: close() and leaving a for-await loop cancel the stream and the request; nothing else is called", async () => {
  for (const how of ["close", "break", "close-before-answer", "client.close"]) {
    const sse = sseResponse();
    let signal;
    const f = fakeFetch((url, init) => {
      signal = init.signal;
      return how === "close-before-answer" ? new Promise(() => {}) : sse.response;
    });
    const client = createShiitakeClient({ baseUrl: BASE, fetch: f });
    const w = client.session("s").watch();
    if (how === "close-before-answer") {
      const pending = w.next();
      w.close();
      assert.deepEqual(await pending, { value: undefined, done: true });
      assert.equal(signal.aborted, true, "the request is aborted");
    } else {
      sse.push(ev("snapshot", { n: 1 }) + ev("frame", { n: 2 }) + ev("frame", { n: 3 }));
      if (how === "break") {
        for await (const e of w) {
          assert.deepEqual(e.data, { n: 1 });
          break;
        }
      } else {
        assert.deepEqual((await w.next()).value.data, { n: 1 });
        const pending = w.next().then(() => w.next()); // n: 2 queued, then a read in flight
        await pending;
        const inflight = w.next();
        if (how === "close") w.close();
        else client.close();
        assert.deepEqual(await inflight, { value: undefined, done: true });
      }
      assert.equal(sse.cancelled, true, `${how}: the body was cancelled`);
      assert.equal(signal.aborted, true, `${how}: the request was aborted`);
    }
    assert.equal(w.closed, true);
    assert.deepEqual(await w.next(), { value: undefined, done: true }, "events not taken are dropped");
    assert.equal(f.calls.length, 1, `${how}: no other request (nothing is cancelled on the host)`);
    w.close(); // idempotent
  }
});

test("watch: an aborted signal rejects next() with its reason; refusals and bad answers are ShiitakeErrors", async () => {
  // Aborted while open.
  const sse = sseResponse();
  const client = createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(() => sse.response) });
  const ac = new AbortController();
  const w = client.session("s").watch({ signal: ac.signal });
  sse.push(ev("snapshot", {}));
  await w.next();
  const pending = w.next();
  ac.abort();
  assert.equal((await pending.catch((e) => e)).name, "AbortError");
  assert.equal(w.closed, true);
  assert.equal(sse.cancelled, true);
  // Aborted before: no request at all.
  const f0 = fakeFetch(() => sse.response);
  const w0 = createShiitakeClient({ baseUrl: BASE, fetch: f0 }).session("s").watch({ signal: AbortSignal.abort() });
  assert.equal((await w0.next().catch((e) => e)).name, "AbortError");
  assert.equal((await w0.opened.catch((e) => e)).name, "AbortError");
  assert.equal(f0.calls.length, 0);

  // A refusal: `opened` and next() reject with it.
  const refused = createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(() => json(429, { error: { code: "too_many_observers", message: "m" } })) });
  const w1 = refused.session("s").watch();
  const e1 = await w1.opened.catch((e) => e);
  assert.deepEqual([e1 instanceof ShiitakeError, e1.kind, e1.code], [true, "refused", "too_many_observers"]);
  assert.equal(await w1.next().catch((e) => e), e1);
  assert.equal(await w1.next().catch((e) => e), e1, "it stays failed");
  // An unused failed watch raises no unhandled rejection (the test runner would report it).
  refused.session("s").watch();

  // Not an event stream.
  const w2 = createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(() => json(200, {})) }).session("s").watch();
  assert.equal((await w2.next().catch((e) => e)).code, "invalid_response");

  // Events before a bad one are delivered, then the failure.
  for (const bad of ["event: frame\ndata: {not json\n\n", `event: frame\ndata: ${"x".repeat(WATCH_EVENT_BYTES_MAX)}\n\n`]) {
    const s3 = sseResponse();
    const w3 = createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(() => s3.response) }).session("s").watch();
    s3.push(ev("snapshot", { ok: true }) + bad);
    assert.deepEqual((await w3.next()).value, { event: "snapshot", data: { ok: true } });
    const e3 = await w3.next().catch((e) => e);
    assert.ok(e3 instanceof ShiitakeError, String(e3));
    assert.equal(e3.code, bad.length > 1000 ? "event_too_large" : "invalid_response");
    assert.equal(s3.cancelled, true, "a failed watch stops reading");
  }

  // A stream error (the connection dropped) propagates unchanged.
  const s4 = sseResponse();
  const w4 = createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(() => s4.response) }).session("s").watch();
  const drop = new TypeError("terminated");
  const p4 = w4.next();
  s4.error(drop);
  assert.equal(await p4.catch((e) => e), drop);
});

test("client.close(): closes its open watches only; later calls throw; calls in flight go on", async () => {
  let release;
  const gate = new Promise((r) => {
    release = r;
  });
  const streams = [];
  const f = fakeFetch(async (url) => {
    if (url.endsWith("/watch")) {
      const s = sseResponse();
      streams.push(s);
      return s.response;
    }
    await gate;
    return json(200, { commandId: "cmd_1", terminal: "completed", answer: "a", usage: null, toolCallCount: 0 });
  });
  const client = createShiitakeClient({ baseUrl: BASE, fetch: f });
  const s = client.session("s");
  const [w1, w2] = [s.watch(), s.watch()];
  const ended = s.watch();
  await Promise.all([w1.opened, w2.opened, ended.opened]);
  streams[2].end();
  assert.deepEqual(await ended.next(), { value: undefined, done: true });
  const poll = s.readSettlement("cmd_1", { timeoutMs: 30_000 });
  client.close();
  assert.deepEqual([w1.closed, w2.closed], [true, true]);
  assert.deepEqual(
    streams.map((x) => x.cancelled),
    [true, true, false],
  );
  assert.throws(() => s.watch(), /closed/);
  await assert.rejects(s.read(), /closed/);
  release();
  assert.equal((await poll).answer, "a", "the long poll in flight was not cut");
  assert.equal(f.calls.length, 4);
  client.close(); // idempotent
});
