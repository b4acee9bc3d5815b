// The typed client (js/client.mjs) without a Worker (no Miniflare): its event-stream parser
// on every kind of chunk split, the watch's life cycle, request encoding,
// the mapping of answers to ShiitakeError and the extension bindings' slot,
// watch and reopening rules, all against a fake fetch.
import assert from "node:assert/strict";
import { test } from "node:test";
import { z } from "zod";
import {
  RESPONSE_BYTES_MAX,
  SseParser,
  ShiitakeError,
  ShiitakeSchemaError,
  WATCH_EVENT_BYTES_MAX,
  bindAgentExtension,
  bindSessionExtension,
  createShiitakeClient,
  isUncertain,
  readCompacted,
} from "../../js/client.mjs";

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
  // The seed's form: the target as one object, the options carrying the signal.
  await s.cancel({ commandId: "cmd_2", onlyIfPending: true }, { signal: new AbortController().signal });
  await s.cancel({ commandId: "cmd_3" });
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
    ["POST", `${session}/commands`, { type: "cancel", commandId: "cmd_2", onlyIfPending: true }],
    ["POST", `${session}/commands`, { type: "cancel", commandId: "cmd_3" }],
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

test("isUncertain: a send with no answer, a 5xx or an unusable answer may have been admitted; a 4xx refusal admitted nothing", async () => {
  const failing = (fetch) => createShiitakeClient({ baseUrl: BASE, fetch }).session("s").prompt("x").catch((e) => e);
  const dropped = await failing(async () => {
    throw new TypeError("fetch failed", { cause: new Error("other side closed") });
  });
  const aborted = await createShiitakeClient({ baseUrl: BASE, fetch: fakeFetch(json(200, {})) })
    .session("s")
    .prompt("x", { signal: AbortSignal.abort() })
    .catch((e) => e);
  const status = (code) => failing(fakeFetch(json(code, { error: { code: `c${code}`, message: "m" } })));
  const cut = await failing(fakeFetch(new Response('{"status":"acc', { status: 200 })));
  for (const [what, error] of [["dropped", dropped], ["aborted", aborted], ["500", await status(500)], ["503", await status(503)], ["unusable 200", cut]]) {
    assert.equal(isUncertain(error), true, what);
  }
  for (const code of [400, 401, 404, 409, 413, 429]) assert.equal(isUncertain(await status(code)), false, String(code));
});

test("readCompacted: the messages a compaction stands for, oldest first, paged back from before the entry (or from the tip); bounded; not for other entries", async () => {
  // A branch of 450 messages at positions 1..450; the read route's paging:
  // the newest `limit` before `before`, oldest first, the cursor the oldest's position.
  const branch = Array.from({ length: 450 }, (_, i) => ({ sequence: i + 1, entryId: `e${i + 1}`, role: "user", text: `m${i + 1}` }));
  const f = fakeFetch((url) => {
    const q = new URL(url).searchParams;
    const before = Number(q.get("before") ?? Infinity);
    const older = branch.filter((m) => m.sequence < before);
    const messages = older.slice(-Number(q.get("limit")));
    return json(200, { sessionId: "s", messages, pending: [], running: null, cursor: older.length > messages.length ? String(messages[0].sequence) : null });
  });
  const session = createShiitakeClient({ baseUrl: BASE, fetch: f }).session("s");
  const marker = { sequence: 440, entryId: "c", role: "compaction", text: "sum", compacted: { from: "e100", through: "e438", messages: 339, trigger: "command" } };
  const all = await readCompacted(session, marker);
  assert.equal(all.complete, true);
  assert.deepEqual(all.messages.map((m) => m.sequence), Array.from({ length: 339 }, (_, i) => i + 100));
  assert.deepEqual(f.calls.map((c) => new URL(c.url).search), ["?before=440&limit=200", "?before=240&limit=200"]);
  // From a `message` frame (no sequence): from the branch's newest page.
  f.calls.length = 0;
  const { sequence, ...framed } = marker;
  assert.deepEqual((await readCompacted(session, framed)).messages.length, 339);
  assert.deepEqual(f.calls.map((c) => new URL(c.url).search), ["?limit=200", "?before=251&limit=200"]);
  // Bounded: what one page holds, said incomplete.
  const part = await readCompacted(session, marker, { maxPages: 1 });
  assert.equal(part.complete, false);
  assert.deepEqual([part.messages[0].sequence, part.messages.at(-1).sequence], [240, 438]);
  await assert.rejects(readCompacted(session, branch[0]), /not a compaction entry/);
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

// ---- extension bindings ----

const GoalSchema = z.object({ text: z.string(), status: z.enum(["active", "achieved", "abandoned"]), turns: z.number().int().min(0) });
const SetInput = z.object({ text: z.string().min(1) });
const goalContract = { id: "goal", projection: { schema: GoalSchema }, commands: { set: { input: SetInput }, end: {} } };
const GOAL = { text: "ship", status: "active", turns: 0 };
const page = (extensions) => ({ sessionId: "s", messages: [], pending: [], running: null, cursor: null, ...(extensions === undefined ? {} : { extensions }) });
const extFrame = (extensionId, scope, value) => ev("frame", { type: "extension", extensionId, scope, value });

/** Polls `fn` until it returns truthy (bounded); returns its value. */
async function until(fn, what = "a condition", timeoutMs = 2000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A fake Agent for the bindings: `reads` answers the Session reads (the
 * next one each time; the last repeats), `statuses` the Status reads,
 * `commands` the commands (a Response or a body), each watch gets a fresh
 * stream in `streams` (or `watchAnswer()` when given).
 */
function fakeAgent({ reads = [page()], statuses = [], command = { result: { ok: true } }, watchAnswer } = {}) {
  const streams = [];
  const f = fakeFetch((url, init) => {
    const path = url.slice(BASE.length).replace(/\?.*$/, "");
    if (path.endsWith("/watch")) {
      if (watchAnswer) return watchAnswer(url);
      const s = sseResponse();
      streams.push(s);
      return s.response;
    }
    if (init.method === "POST") return command instanceof Response ? command : json(200, command);
    if (path.startsWith("/extensions/")) return json(200, statuses.length > 1 ? statuses.shift() : statuses[0]);
    return json(200, reads.length > 1 ? reads.shift() : reads[0]);
  });
  const client = createShiitakeClient({ baseUrl: BASE, fetch: f });
  return { f, client, streams, session: client.session("s"), watchCalls: () => f.calls.filter((c) => c.url.endsWith("/watch")).length };
}

test("extension slot: unknown, then what each read observed (observed, absent, invalid, observed again); the schema's output is kept", async () => {
  const goalBad = { ...GOAL, turns: -1 };
  const { f, session } = fakeAgent({ reads: [page({ goal: { ...GOAL, extra: 1 } }), page({ reminder: {} }), page(), page({ goal: goalBad }), page({ goal: GOAL })] });
  const b = bindSessionExtension(session, goalContract);
  assert.equal(f.calls.length, 0, "binding performs no I/O");
  assert.deepEqual(b.slot, { status: "unknown" });
  assert.equal(b.id, "goal");

  const t0 = Date.now();
  const s1 = await b.refresh();
  assert.equal(s1, b.slot);
  assert.equal(s1.status, "observed");
  assert.deepEqual(s1.value, GOAL, "zod's output: the unknown key stripped");
  assert.ok(s1.observedAt >= t0 && s1.observedAt <= Date.now());
  assert.deepEqual(f.calls[0].url, `${BASE}/sessions/s?limit=1`);

  assert.equal((await b.refresh()).status, "absent", "no goal in extensions");
  assert.equal((await b.refresh()).status, "absent", "no extensions at all");
  const s4 = await b.refresh();
  assert.equal(s4.status, "invalid");
  assert.ok(s4.error instanceof ShiitakeSchemaError && s4.error instanceof ShiitakeError);
  assert.deepEqual([s4.error.code, s4.error.status], ["invalid_projection", 200]);
  assert.deepEqual(s4.error.issues.map((i) => i.path), [["turns"]]);
  assert.match(s4.error.message, /goal.*\/turns/);
  assert.equal(s4.value, undefined);
  assert.equal((await b.refresh()).status, "observed", "the binding keeps working after an invalid value");
  assert.ok(Object.isFrozen(b.slot));

  // Without a projection schema the value is taken as it is.
  const loose = bindSessionExtension(fakeAgent({ reads: [page({ goal: { any: [1] } })] }).session, { id: "goal" });
  assert.deepEqual((await loose.refresh()).value, { any: [1] });
});

test("extension command: validated before any request, the Session-scope route, the result; it does not change the slot", async () => {
  const { f, session } = fakeAgent({ reads: [page({ goal: GOAL })], command: { result: { text: "x", status: "active" } } });
  const b = bindSessionExtension(session, goalContract);
  const seen = [];
  b.subscribe((slot) => seen.push(slot));
  await b.refresh();
  const before = b.slot;
  const n = seen.length;

  assert.deepEqual(await b.command("set", { text: "x" }), { text: "x", status: "active" });
  assert.deepEqual(await b.command("set", { text: "x" }, { requestId: "r1" }), { text: "x", status: "active" });
  await b.command("end");
  const posts = f.calls.filter((c) => c.init.method === "POST");
  assert.deepEqual(
    posts.map((c) => [c.url, c.body]),
    [
      [`${BASE}/sessions/s/extensions/goal/commands/set`, { requestId: posts[0].body.requestId, input: { text: "x" } }],
      [`${BASE}/sessions/s/extensions/goal/commands/set`, { requestId: "r1", input: { text: "x" } }],
      [`${BASE}/sessions/s/extensions/goal/commands/end`, { requestId: posts[2].body.requestId }],
    ],
  );
  assert.match(posts[0].body.requestId, /^[0-9a-f-]{36}$/, "a generated requestId");
  assert.notEqual(posts[0].body.requestId, posts[2].body.requestId);
  assert.equal(b.slot, before, "a command's success is not an observation");
  assert.equal(seen.length, n, "listeners are not called by a command");

  // Refused by the contract's schema: no request.
  const calls = f.calls.length;
  const e = await b.command("set", { text: "" }).catch((e) => e);
  assert.ok(e instanceof ShiitakeSchemaError && e instanceof ShiitakeError, String(e));
  assert.deepEqual([e.status, e.code, e.kind], [400, "invalid_request", "invalid"]);
  assert.deepEqual(e.issues[0].path, ["text"]);
  await assert.rejects(b.command("nope", {}), TypeError, "a name the contract does not list");
  await assert.rejects(b.command("set", { text: "x" }, { requestId: 5 }), TypeError);
  assert.equal(f.calls.length, calls, "nothing was sent");

  // An asynchronous schema is refused (synchronous validation only), without a request.
  const asyncSchema = { "~standard": { version: 1, vendor: "t", validate: async (v) => ({ value: v }) } };
  const ab = bindSessionExtension(session, { id: "goal", commands: { set: { input: asyncSchema } }, projection: { schema: asyncSchema } });
  await assert.rejects(ab.command("set", { text: "x" }), /asynchronously/);
  assert.equal(f.calls.length, calls);
  const slot = await ab.refresh();
  assert.equal(slot.status, "invalid", "an async projection schema makes the slot invalid");
  assert.match(slot.error.message, /asynchronously/);

  // Server refusals are typed ShiitakeErrors.
  for (const [status, code] of [
    [409, "extension_stopped"],
    [422, "extension_command_failed"],
    [404, "extension_command_not_found"],
    [503, "runtime_closed"],
  ]) {
    const { session: s2 } = fakeAgent({ command: json(status, { error: { code, message: `m ${code}` } }) });
    const err = await bindSessionExtension(s2, goalContract)
      .command("set", { text: "x" })
      .catch((e) => e);
    assert.ok(err instanceof ShiitakeError && !(err instanceof ShiitakeSchemaError), String(err));
    assert.deepEqual([err.status, err.code, err.message], [status, code, `m ${code}`]);
  }
  // A 200 without a result is an unusable answer.
  const { session: s3 } = fakeAgent({ command: { nope: 1 } });
  assert.equal((await bindSessionExtension(s3, goalContract).command("end").catch((e) => e)).code, "invalid_response");
});

test("extension subscribe: one watch for all subscribers; its snapshot and this extension's Session frames are observed, others ignored; the last unsubscribe closes it", async () => {
  const { session, streams, watchCalls } = fakeAgent();
  const b = bindSessionExtension(session, goalContract);
  const a1 = [];
  const a2 = [];
  const un1 = b.subscribe((slot, error) => a1.push([slot, error]));
  const un2 = b.subscribe((slot) => a2.push(slot));
  assert.equal(watchCalls(), 1, "one watch");
  assert.deepEqual(b.slot, { status: "unknown" }, "subscribing is no observation");
  await until(() => streams.length === 1);
  const w = streams[0];
  w.push(ev("snapshot", page({ reminder: { pending: [] } })));
  await until(() => a1.length === 1, "the snapshot");
  assert.equal(a1[0][0].status, "absent");
  assert.equal(a1[0].length, 2);
  assert.equal(a1[0][1], undefined);
  w.push(
    extFrame("reminder", "session", { pending: [1] }) +
      extFrame("goal", "agent", GOAL) +
      ev("frame", { type: "delta", commandId: "c", text: "x" }) +
      ev("frame", { type: "extension", extensionId: "goal", scope: "session", value: { ...GOAL, turns: 1 } }),
  );
  await until(() => a1.length === 2, "the goal frame");
  assert.equal(a1[1][0].status, "observed");
  assert.equal(a1[1][0].value.turns, 1, "the other extension's and the agent-scope frames were ignored");
  assert.deepEqual(a2, a1.map(([s]) => s));
  w.push(extFrame("goal", "session", { text: 7 }));
  await until(() => a1.length === 3);
  assert.equal(b.slot.status, "invalid");

  un1();
  un1(); // idempotent
  w.push(extFrame("goal", "session", GOAL));
  await until(() => a2.length === 4);
  assert.equal(a1.length, 3, "an unsubscribed listener hears nothing");
  assert.equal(w.cancelled, false, "one subscriber is left");
  un2();
  assert.equal(w.cancelled, true, "the last unsubscribe closed the watch");
  await sleep(20);
  assert.equal(watchCalls(), 1, "and it is not reopened");

  // Subscribing again opens a new watch; a snapshot carrying the goal is observed.
  const a3 = [];
  const un3 = b.subscribe((s) => a3.push(s));
  await until(() => streams.length === 2);
  streams[1].push(ev("snapshot", page({ goal: GOAL })));
  await until(() => a3.length === 1);
  assert.deepEqual(a3[0].value, GOAL);
  un3();

  // A listener's throw goes to onError and the others still hear.
  const errors = [];
  const { session: s2, streams: st2 } = fakeAgent();
  const b2 = bindSessionExtension(s2, goalContract, { onError: (e) => errors.push(e) });
  const heard = [];
  b2.subscribe(() => {
    throw new Error("listener bug");
  });
  b2.subscribe((s) => heard.push(s));
  await until(() => st2.length === 1);
  st2[0].push(ev("snapshot", page({ goal: GOAL })));
  await until(() => heard.length === 1);
  assert.deepEqual(
    errors.map((e) => e.message),
    ["listener bug"],
  );
  b2.close();
});

test("extension subscribe: a refresh answered after a watch observation does not overwrite it", async () => {
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
    return json(200, page({ goal: { ...GOAL, turns: 0 } }));
  });
  const b = bindSessionExtension(createShiitakeClient({ baseUrl: BASE, fetch: f }).session("s"), goalContract);
  b.subscribe(() => {});
  const r = b.refresh();
  await until(() => streams.length === 1);
  streams[0].push(ev("snapshot", page({ goal: { ...GOAL, turns: 3 } })));
  await until(() => b.slot.status === "observed");
  release();
  assert.equal((await r).value.turns, 3, "the watch's observation stands");
  // With no watch observation meanwhile, the read is observed.
  assert.equal((await b.refresh()).value.turns, 0);
  b.close();
});

test("extension subscribe: a watch that ends or fails is reopened after a doubling, capped delay; it gives up after maxFailures in a row, the slot unchanged", async () => {
  // The watch ends after its snapshot: reopened (the count restarts with each snapshot).
  const { session, streams, watchCalls } = fakeAgent();
  const b = bindSessionExtension(session, goalContract, { reconnect: { initialDelayMs: 5, maxDelayMs: 20, maxFailures: 3 } });
  b.subscribe(() => {});
  for (let i = 0; i < 5; i++) {
    await until(() => streams.length === i + 1, `watch ${i + 1}`);
    streams[i].push(ev("snapshot", page({ goal: { ...GOAL, turns: i } })));
    await until(() => b.slot.value?.turns === i);
    streams[i].end();
  }
  await until(() => streams.length === 6);
  assert.equal(watchCalls(), 6, "five ended watches, each reopened: more than maxFailures, since each delivered its snapshot");
  b.close();

  // Refused every time (503): attempts at growing intervals, then the error reported.
  const times = [];
  const refusal = () => {
    times.push(Date.now());
    return json(503, { error: { code: "runtime_closed", message: "closed" } });
  };
  const failing = fakeAgent({ reads: [page({ goal: GOAL })], watchAnswer: refusal });
  const errors = [];
  const heard = [];
  const fb = bindSessionExtension(failing.session, goalContract, { reconnect: { initialDelayMs: 10, maxDelayMs: 40, maxFailures: 5 }, onError: (e) => errors.push(e) });
  await fb.refresh();
  const observed = fb.slot;
  fb.subscribe((slot, error) => heard.push([slot, error]));
  await until(() => errors.length === 1, "giving up", 5000);
  assert.equal(times.length, 5, "maxFailures attempts");
  const gaps = times.slice(1).map((t, i) => t - times[i]);
  for (const [i, min] of [10, 20, 40, 40].entries()) assert.ok(gaps[i] >= min - 2, `gap ${i} ${gaps[i]} >= ${min} (${gaps})`);
  assert.ok(gaps[3] < 40 * 4, `the delay is capped (${gaps})`);
  assert.deepEqual([errors[0].code, errors[0].status], ["runtime_closed", 503]);
  assert.equal(heard.length, 1);
  assert.equal(heard[0][0], observed, "the slot is unchanged");
  assert.equal(heard[0][1], errors[0], "the listeners' second argument");
  assert.equal(fb.slot, observed);
  await sleep(100);
  assert.equal(times.length, 5, "no more attempts");
  // A new subscriber starts again.
  fb.subscribe(() => {});
  await until(() => times.length === 6);
  fb.close();

  // A permanent refusal (404 session_not_found) ends the attempts at once.
  const gone = fakeAgent({ watchAnswer: () => json(404, { error: { code: "session_not_found", message: "no" } }) });
  const goneErrors = [];
  const gb = bindSessionExtension(gone.session, goalContract, { onError: (e) => goneErrors.push(e) });
  gb.subscribe(() => {});
  await until(() => goneErrors.length === 1);
  assert.equal(goneErrors[0].code, "session_not_found");
  assert.equal(gone.watchCalls(), 1);
  gb.close();

  // The defaults: the first retry waits 500 ms.
  const slow = fakeAgent({ watchAnswer: () => json(503, {}) });
  const sb = bindSessionExtension(slow.session, goalContract);
  sb.subscribe(() => {});
  await sleep(250);
  assert.equal(slow.watchCalls(), 1, "not retried before 500 ms");
  sb.close();
  assert.throws(() => bindSessionExtension(slow.session, goalContract, { reconnect: { maxFailures: 0 } }), TypeError);
  assert.throws(() => bindSessionExtension(slow.session, goalContract, { reconnect: { initialDelayMs: -1 } }), TypeError);
});

test("extension close(): the watch, a pending reopen and the listeners stop; later calls throw; a read in flight is not observed", async () => {
  const { f, session, streams, watchCalls } = fakeAgent({ reads: [page({ goal: GOAL })] });
  const b = bindSessionExtension(session, goalContract);
  const heard = [];
  b.subscribe((s) => heard.push(s));
  await until(() => streams.length === 1);
  const inflight = b.refresh();
  b.close();
  assert.equal(b.closed, true);
  await until(() => streams[0].cancelled, "the watch closed");
  assert.deepEqual(await inflight, { status: "unknown" }, "a read answered after close is not observed");
  assert.equal(heard.length, 0);
  assert.throws(() => b.subscribe(() => {}), /closed/);
  await assert.rejects(b.refresh(), /closed/);
  await assert.rejects(b.command("end"), /closed/);
  b.close(); // idempotent
  const calls = f.calls.length;
  await sleep(30);
  assert.equal(f.calls.length, calls, "nothing more is requested");

  // Closed while waiting to reopen: no more attempts.
  const failing = fakeAgent({ watchAnswer: () => json(503, {}) });
  const fb = bindSessionExtension(failing.session, goalContract, { reconnect: { initialDelayMs: 30 } });
  fb.subscribe(() => {});
  await until(() => failing.watchCalls() === 1);
  await sleep(5);
  fb.close();
  await sleep(80);
  assert.equal(failing.watchCalls(), 1);

  // The client's close() ends the binding's watch without a retry or a report.
  const c = fakeAgent();
  const errors = [];
  const cb = bindSessionExtension(c.session, goalContract, { onError: (e) => errors.push(e), reconnect: { initialDelayMs: 1 } });
  cb.subscribe(() => {});
  await until(() => c.streams.length === 1);
  c.client.close();
  await sleep(30);
  assert.deepEqual([c.watchCalls(), errors.length, c.streams[0].cancelled], [1, 0, true]);
  assert.equal(watchCalls(), 1);
});

test("agent extension binding: refresh reads the Status; follow observes only this extension's agent-scope frames and reads the Status at each (re)opening", async () => {
  const status = (projection) => ({ id: "tally", version: "0.0.0", revision: "r", stateVersion: 1, grantKey: "tally", feature: null, stopped: null, behind: false, ...(projection === undefined ? {} : { projection }) });
  const Tally = z.object({ seen: z.array(z.string()), marks: z.array(z.string()) });
  const { f, client, streams } = fakeAgent({ statuses: [status(), status({ seen: [], marks: ["initialized"] }), status({ seen: ["a"], marks: ["initialized"] })], command: { result: { marks: ["x"] } } });
  const b = bindAgentExtension(client, { id: "tally", projection: { schema: Tally }, commands: { mark: { input: z.string() } } });
  assert.equal(b.status, undefined);
  assert.deepEqual(b.slot, { status: "unknown" });
  assert.equal((await b.refresh()).status, "absent");
  assert.equal(b.status.grantKey, "tally");
  assert.deepEqual((await b.refresh()).value, { seen: [], marks: ["initialized"] });
  assert.equal(f.calls.at(-1).url, `${BASE}/extensions/tally`);

  const before = b.slot;
  assert.deepEqual(await b.command("mark", "x", { requestId: "m1" }), { marks: ["x"] });
  assert.deepEqual([f.calls.at(-1).url, f.calls.at(-1).body], [`${BASE}/extensions/tally/commands/mark`, { requestId: "m1", input: "x" }]);
  assert.equal(b.slot, before, "a command does not change the slot");
  await assert.rejects(b.command("mark", 5), (e) => e instanceof ShiitakeSchemaError && e.code === "invalid_request");

  const heard = [];
  b.subscribe((s) => heard.push(s));
  assert.equal(streams.length, 0, "subscribe opens no watch on the Agent scope");
  const unfollow = b.follow(client.session("s"));
  await until(() => streams.length === 1);
  streams[0].push(ev("snapshot", page({ tally: { ignored: true } })));
  await until(() => heard.length === 1, "the Status read at the opening");
  assert.deepEqual(heard[0].value, { seen: ["a"], marks: ["initialized"] });
  streams[0].push(extFrame("tally", "session", { seen: [], marks: [] }) + extFrame("other", "agent", { seen: [], marks: [] }) + extFrame("tally", "agent", { seen: ["a", "b"], marks: ["initialized"] }));
  await until(() => heard.length === 2);
  assert.deepEqual(heard[1].value.seen, ["a", "b"]);
  assert.throws(() => b.follow({ id: "s" }), TypeError);
  assert.throws(() => b.follow(createShiitakeClient({ baseUrl: BASE, fetch: f }).session("s")), TypeError, "a Session of another client");
  unfollow();
  assert.equal(streams[0].cancelled, true);
  b.close();
  assert.throws(() => b.follow(client.session("s")), /closed/);
  await assert.rejects(b.refresh(), /closed/);
});

test("extension bindings refuse what is not a Session handle, client or contract", () => {
  const { client, session } = fakeAgent();
  assert.throws(() => bindSessionExtension({ id: "s", read() {}, watch() {} }, { id: "goal" }), TypeError);
  assert.throws(() => bindSessionExtension(client, { id: "goal" }), TypeError);
  assert.throws(() => bindAgentExtension(session, { id: "goal" }), TypeError);
  assert.throws(() => bindSessionExtension(session, { id: "" }), TypeError);
  assert.throws(() => bindSessionExtension(session, null), TypeError);
  assert.throws(() => bindSessionExtension(session, { id: "goal", projection: { schema: { type: "object" } } }), /Standard Schema/, "a JSON Schema is not a Standard Schema");
  assert.throws(() => bindSessionExtension(session, { id: "goal", commands: { set: { input: {} } } }), /Standard Schema/);
  assert.throws(() => bindSessionExtension(session, { id: "goal" }, { onError: 1 }), TypeError);
});

test("extension binding types: the slot's value from the projection schema, command names and inputs from the contract", async () => {
  const ts = (await import("typescript")).default;
  const root = new URL("../../", import.meta.url).pathname;
  const file = `${root}client-extension-types.check.mts`;
  const source = `
    import { z } from "zod";
    import { bindAgentExtension, bindSessionExtension, createShiitakeClient, type Frame, type JsonValue, type ProjectionSlot, type SessionRead } from "shiitake/client";
    const client = createShiitakeClient({ baseUrl: "http://x" });
    const Goal = z.object({ text: z.string(), status: z.enum(["active", "achieved"]), turns: z.number() });
    const goal = bindSessionExtension(client.session("s"), {
      id: "goal",
      projection: { schema: Goal },
      commands: { set: { input: z.object({ text: z.string() }) }, end: {}, maybe: { input: z.string().optional() } },
    });
    const slot = goal.slot;
    if (slot.status === "observed") {
      slot.value.text satisfies string;
      slot.value.status satisfies "active" | "achieved";
      // @ts-expect-error not in the schema
      slot.value.nope;
    }
    if (slot.status === "invalid") slot.error.issues satisfies ReadonlyArray<{ message: string }>;
    // @ts-expect-error no value before an observation
    slot.value;
    goal.command("set", { text: "x" }, { requestId: "r" });
    // @ts-expect-error the input's type
    goal.command("set", { text: 5 });
    // @ts-expect-error the input is required
    goal.command("set");
    // @ts-expect-error a name the contract does not list
    goal.command("other", {});
    goal.command("end");
    goal.command("maybe");
    goal.subscribe((s: ProjectionSlot<z.output<typeof Goal>>, error?: unknown) => {});
    const tally = bindAgentExtension(client, { id: "tally", projection: { schema: z.object({ marks: z.array(z.string()) }) }, commands: { mark: { input: z.string() } } });
    if (tally.slot.status === "observed") tally.slot.value.marks satisfies string[];
    tally.status?.grantKey satisfies string | undefined;
    // @ts-expect-error the input's type
    tally.command("mark", 1);
    const stop: () => void = tally.follow(client.session("s"));
    const loose = bindSessionExtension(client.session("s"), { id: "any" });
    loose.command("anything", { a: 1 });
    if (loose.slot.status === "observed") loose.slot.value satisfies JsonValue;
    declare const frame: Frame;
    if (frame.type === "extension") { frame.scope satisfies "session" | "agent"; frame.extensionId satisfies string; }
    declare const read: SessionRead;
    read.extensions?.goal satisfies unknown;
  `;
  const options = { noEmit: true, strict: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, types: [] };
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (name, ...rest) => (name === file ? ts.createSourceFile(name, source, ts.ScriptTarget.ES2022, true) : getSourceFile.call(host, name, ...rest));
  host.fileExists = (name) => name === file || fileExists.call(host, name);
  host.readFile = (name) => (name === file ? source : readFile.call(host, name));
  const program = ts.createProgram([file], options, host);
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  assert.deepEqual(diagnostics, []);
});
