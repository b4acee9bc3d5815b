// The Anthropic Messages provider end to end (src/model/anthropic.rs):
// `SHIITAKE_MODEL=anthropic/<model>` against the scripted model server's
// `POST /v1/messages`, which streams the real wire format (message_start,
// content_block_*, message_delta, message_stop, ping, error events) and
// refuses, as Anthropic would, a request Anthropic would refuse (missing
// max_tokens or anthropic-version, empty messages, a first message that is
// not `user`, an empty text block, unknown fields).
//
// Each test tags its prompt texts with a unique tag; `scriptFor(tag, ...)`
// answers only that test's requests, and `requests(tag)` lists only them.
import assert from "node:assert/strict";
import { test } from "node:test";
import { contentText } from "../support/model-server.mjs";
import { ANTHROPIC_TEST_KEY, MODEL_API_KEY, MODEL_NAME, PNG_1X1, kind, uniq, useWorker } from "./helpers.mjs";

const INSTRUCTIONS = "You are the Anthropic end-to-end test model. Answer in one line.";
const RETRY_BASE_MS = 30;
const MAX_OUTPUT_TOKENS = 777;

const h = useWorker({
  model: { provider: "anthropic", fallback: "echo" },
  bindings: {
    SHIITAKE_INSTRUCTIONS: INSTRUCTIONS,
    SHIITAKE_RETRY_BASE_MS: RETRY_BASE_MS,
    SHIITAKE_RETRY_MAX_MS: 200,
    SHIITAKE_ATTEMPTS_MAX: 4,
    SHIITAKE_MAX_OUTPUT_TOKENS: MAX_OUTPUT_TOKENS,
  },
});

/** Bounds every test: a broken run loop fails a test instead of hanging the suite. */
const T = { timeout: 20_000 };
const SETTLE_MS = 10_000;

const settled = (a, sid, id) => a.waitSettled(sid, id, { boundMs: SETTLE_MS });
const text = (s) => [{ type: "text", text: s }];
/** A model request's transcript as [role, text] lists (text blocks joined). */
const conversation = (req) => req.body.messages.map((m) => [m.role, contentText(m.content)]);
/** A request's messages without the prompt-cache marks (`cache_control`), which the caching test checks. */
const unmarked = (value) => JSON.parse(JSON.stringify(value, (key, v) => (key === "cache_control" ? undefined : v)));
const messagesOf = (req) => unmarked(req.body.messages);

/** A watch event's payload for `message` / `settled` frames (nested or inline). */
const settlementOf = (ev) => ev.data.settlement ?? ev.data;
const isSettled = (id) => (ev) => kind(ev) === "settled" && settlementOf(ev).commandId === id;

/** Asserts a request is a well-formed Anthropic Messages call carrying the test key. */
function assertMessagesCall(req) {
  assert.equal(req.api, "anthropic", `the call went to ${req.path}`);
  assert.equal(req.method, "POST");
  assert.equal(req.path, "/v1/messages");
  assert.equal(req.outcome === "invalid" ? req.error : null, null, "the model server accepted the request");
  assert.equal(req.headers["x-api-key"], ANTHROPIC_TEST_KEY);
  assert.equal(req.headers["anthropic-version"], "2023-06-01");
  assert.match(req.headers["content-type"] ?? "", /^application\/json/);
  assert.equal(req.headers.authorization, undefined, "no Authorization header for Anthropic");
  for (const [name, value] of Object.entries(req.headers)) {
    if (name !== "x-api-key") assert.ok(!String(value).includes(ANTHROPIC_TEST_KEY), `the key leaked into the ${name} header`);
    assert.ok(!String(value).includes(MODEL_API_KEY), `the OpenAI test key is in the ${name} header`);
  }
  assert.ok(!JSON.stringify(req.body).includes(ANTHROPIC_TEST_KEY), "the key is not in the request body");
  assert.equal(req.body.model, MODEL_NAME);
  // One text block, a prompt-cache breakpoint: the instructions, and the tools before them.
  assert.deepEqual(req.body.system, [{ type: "text", text: INSTRUCTIONS, cache_control: { type: "ephemeral" } }]);
  assert.equal(req.body.max_tokens, MAX_OUTPUT_TOKENS);
  assert.equal(req.body.stream, true);
  assert.deepEqual(Object.keys(req.body).sort(), ["max_tokens", "messages", "model", "stream", "system", "tools"]);
  // The demo Agent offers its notebook through the execute door, and its
  // SQLite workspace's files as direct tools.
  assert.deepEqual(
    req.body.tools.map((t) => [t.name, t.input_schema.required]),
    [
      ["execute", ["code"]],
      ["read", ["path"]],
      ["write", ["path", "content"]],
      ["list", undefined],
      ["stat", ["path"]],
      ["search", ["query"]],
      ["replace", ["path", "old", "new"]],
      ["apply_patch", ["input"]],
    ],
  );
}

test("the Worker is bound to the Anthropic provider only", () => {
  assert.equal(h.provider, "anthropic");
  assert.equal(h.modelApiKey, ANTHROPIC_TEST_KEY);
  assert.equal(h.bindings.SHIITAKE_MODEL, `anthropic/${MODEL_NAME}`);
  assert.equal(h.bindings.ANTHROPIC_BASE_URL, h.model.origin);
  assert.doesNotMatch(h.bindings.ANTHROPIC_BASE_URL, /\/v1$/, "the runtime appends /v1/messages itself");
  assert.equal(h.bindings.ANTHROPIC_API_KEY, ANTHROPIC_TEST_KEY);
  assert.ok(!("OPENAI_BASE_URL" in h.bindings) && !("OPENAI_API_KEY" in h.bindings));
});

test("a prompt completes with the streamed answer and usage from message_start (cache reads included) and message_delta", T, async () => {
  const tag = uniq("basic");
  const { a, sid } = await h.session();
  h.model.scriptFor(tag, { chunks: ["Hel", "lo from ", "Clau", "de!"], chunkDelayMs: 10, usage: { input_tokens: 18, cache_read_input_tokens: 3, output_tokens: 5 } });
  const prompt = `Say hello ${tag}`;
  const id = await a.admit(sid, "r1", prompt);
  const s = await settled(a, sid, id);
  const { diagnostic, ...rest } = s;
  assert.deepEqual(rest, { commandId: id, terminal: "completed", answer: "Hello from Claude!", usage: { inputTokens: 21, outputTokens: 5, cacheReadTokens: 3 }, toolCallCount: 0 });
  assert.equal(diagnostic ?? null, null);

  const reqs = h.model.requests(tag);
  assert.equal(reqs.length, 1);
  assertMessagesCall(reqs[0]);
  assert.deepEqual(messagesOf(reqs[0]), [{ role: "user", content: text(prompt) }]);
  assert.equal(reqs[0].outcome, "completed");
  assert.equal(reqs[0].aborted, false);

  const page = await a.read(sid);
  assert.deepEqual(
    page.messages.map((m) => [m.role, m.text]),
    [
      ["user", prompt],
      ["assistant", "Hello from Claude!"],
    ],
  );
});

test("two turns: the second request carries the transcript as user/assistant content blocks, the first answer included", T, async () => {
  const tag = uniq("two-turns");
  const { a, sid } = await h.session();
  h.model.scriptFor(tag, { text: "First answer." }, { text: "Second answer.", usage: { prompt_tokens: 40, completion_tokens: 3, total_tokens: 43 } });
  const first = await a.admit(sid, "r1", `one ${tag}`);
  assert.equal((await settled(a, sid, first)).answer, "First answer.");
  const second = await a.admit(sid, "r2", `two ${tag}`);
  const s2 = await settled(a, sid, second);
  assert.equal(s2.terminal, "completed", JSON.stringify(s2));
  assert.equal(s2.answer, "Second answer.");
  assert.deepEqual(s2.usage, { inputTokens: 40, outputTokens: 3 });

  const reqs = h.model.requests(tag);
  assert.equal(reqs.length, 2);
  for (const r of reqs) assertMessagesCall(r);
  assert.deepEqual(messagesOf(reqs[0]), [{ role: "user", content: text(`one ${tag}`) }]);
  assert.deepEqual(messagesOf(reqs[1]), [
    { role: "user", content: text(`one ${tag}`) },
    { role: "assistant", content: text("First answer.") },
    { role: "user", content: text(`two ${tag}`) },
  ]);
  assert.ok(reqs[1].receivedAt >= reqs[0].endedAt, "one turn at a time");
});

test("an operator line reaches the model as attributed user content", T, async () => {
  const tag = uniq("operator");
  const { a, sid } = await h.session();
  await a.admitOperator(sid, "op", `heads up ${tag}`);
  h.model.scriptFor(tag, { text: "noted" });
  const id = await a.admit(sid, "r1", `go ${tag}`);
  assert.equal((await settled(a, sid, id)).terminal, "completed");
  const [req] = h.model.requests(tag);
  assertMessagesCall(req);
  assert.deepEqual(conversation(req), [
    ["user", `[operator] heads up ${tag}`],
    ["user", `go ${tag}`],
  ]);
});

test("an image prompt reaches the model as an image block with a base64 source; an image-only prompt sends no empty text block", T, async () => {
  const tag = uniq("image");
  const { a, sid } = await h.session();
  h.model.scriptFor(tag, { text: "A single pixel." });
  const withText = await a.admit(sid, "r1", `What is this? ${tag}`, { images: [{ mediaType: "image/png", data: PNG_1X1 }] });
  assert.equal((await settled(a, sid, withText)).answer, "A single pixel.");
  const [req] = h.model.requests(tag);
  assertMessagesCall(req);
  assert.deepEqual(messagesOf(req), [
    {
      role: "user",
      content: [
        { type: "text", text: `What is this? ${tag}` },
        { type: "image", source: { type: "base64", media_type: "image/png", data: PNG_1X1 } },
      ],
    },
  ]);

  // Image only: the Session's second call has no text to match a lane, so it
  // is told apart by its images.
  const onlyImage = await a.admit(sid, "r2", "", { images: [{ mediaType: "image/webp", data: PNG_1X1 }] });
  const s = await settled(a, sid, onlyImage);
  const [req2] = h.model.requests((r) => r.api === "anthropic" && JSON.stringify(r.body).includes("image/webp") && JSON.stringify(r.body).includes(tag));
  assert.ok(req2, "the image-only prompt reached the model");
  assert.equal(req2.outcome, "completed", `the model server refused the call: ${req2.error}`);
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.deepEqual(messagesOf(req2).at(-1), { role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/webp", data: PNG_1X1 } }] });
  assert.deepEqual(req2.body.messages.slice(0, 2).map((m) => m.role), ["user", "assistant"]);
});

test("HTTP 529 overloaded and an in-stream overloaded_error are retried on the durable timer, then the answer completes", T, async () => {
  const tag = uniq("overloaded");
  const { a, sid } = await h.session();
  h.model.scriptFor(tag, { status: 529 }, { chunks: ["partial "], streamError: "overloaded_error" }, { chunks: ["third ", "time ", "lucky"] });
  const w = await a.watch(sid);
  let events;
  let id;
  try {
    assert.equal((await w.next()).event, "snapshot");
    id = await a.admit(sid, "r1", `flaky ${tag}`);
    events = await w.until(isSettled(id), SETTLE_MS);
  } finally {
    await w.close();
  }
  const s = settlementOf(events.at(-1));
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(s.answer, "third time lucky", "the failed attempt's partial text is not in the answer");

  const reqs = h.model.requests(tag);
  assert.deepEqual(
    reqs.map((r) => [r.status, r.outcome]),
    [
      [529, "error"],
      [200, "error"],
      [200, "completed"],
    ],
  );
  for (const r of reqs) assertMessagesCall(r);
  for (const r of reqs) assert.deepEqual(r.body, reqs[0].body, "each attempt sends the same request");
  const gaps = [reqs[1].receivedAt - reqs[0].endedAt, reqs[2].receivedAt - reqs[1].endedAt];
  assert.ok(gaps[0] >= RETRY_BASE_MS - 10, `first retry after ${gaps[0]} ms`);
  assert.ok(gaps[1] >= 2 * RETRY_BASE_MS - 10, `second retry after ${gaps[1]} ms`);

  // Each failure was reported with the provider's words and a retry delay.
  const errors = events.filter((ev) => kind(ev) === "runtime-error").map((ev) => ev.data);
  assert.equal(errors.length, 2, `two runtime-errors: ${events.map(kind)}`);
  assert.match(errors[0].diagnostic, /529/);
  assert.match(errors[0].diagnostic, /Overloaded/);
  assert.match(errors[1].diagnostic, /overloaded_error/);
  assert.match(errors[1].diagnostic, /Overloaded/);
  for (const e of errors) {
    assert.equal(e.commandId, id);
    assert.equal(typeof e.retryInMs, "number", JSON.stringify(e));
  }
  assert.deepEqual(
    (await a.read(sid)).messages.map((m) => [m.role, m.text]),
    [
      ["user", `flaky ${tag}`],
      ["assistant", "third time lucky"],
    ],
  );
});

test("a dropped connection mid-stream (no message_stop) is retried", T, async () => {
  const tag = uniq("dropped");
  const { a, sid } = await h.session();
  h.model.scriptFor(tag, { dropAfterChunks: 1, chunks: ["cut ", "off"] }, { text: "whole answer" });
  const id = await a.admit(sid, "r1", `drop ${tag}`);
  const s = await settled(a, sid, id);
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(s.answer, "whole answer");
  assert.deepEqual(
    h.model.requests(tag).map((r) => r.outcome),
    ["dropped", "completed"],
  );
});

test("HTTP 400 fails at once with a diagnostic naming the provider's message", T, async () => {
  const tag = uniq("bad-request");
  const { a, sid } = await h.session();
  const message = "prompt is too long: 215000 tokens > 200000 maximum";
  h.model.scriptFor(tag, { status: 400, body: { type: "error", error: { type: "invalid_request_error", message } } });
  const id = await a.admit(sid, "r1", `refused ${tag}`);
  const next = await a.admit(sid, "r2", `next ${tag}`);
  const s = await settled(a, sid, id);
  assert.equal(s.terminal, "failed", JSON.stringify(s));
  assert.match(s.diagnostic, /400/);
  assert.ok(s.diagnostic.includes(message), `the diagnostic names the provider's message: ${s.diagnostic}`);
  assert.ok(!s.diagnostic.includes(ANTHROPIC_TEST_KEY));
  assert.equal(h.model.requests((r) => contentText(r.body?.messages?.at(-1)?.content).includes(`refused ${tag}`)).length, 1, "not retried");
  // The queue goes on (echo answer).
  const n = await settled(a, sid, next);
  assert.equal(n.terminal, "completed", JSON.stringify(n));
  assert.equal(n.answer, `Echo: next ${tag}`);
});

test("an in-stream invalid_request_error is not retried", T, async () => {
  const tag = uniq("stream-invalid");
  const { a, sid } = await h.session();
  h.model.scriptFor(tag, { streamError: { type: "invalid_request_error", message: "messages.0: bad block" } });
  const id = await a.admit(sid, "r1", `once ${tag}`);
  const s = await settled(a, sid, id);
  assert.equal(s.terminal, "failed", JSON.stringify(s));
  assert.match(s.diagnostic, /invalid_request_error: messages\.0: bad block/);
  assert.equal(h.model.requests(tag).length, 1);
});

test("watch: the deltas add up to the streamed answer", T, async () => {
  const tag = uniq("watch");
  const { a, sid } = await h.session();
  h.model.scriptFor(tag, { chunks: ["Stre", "amed ", "by ", "Anth", "ropic"], chunkDelayMs: 20 });
  const w = await a.watch(sid);
  let events;
  let id;
  try {
    assert.equal((await w.next()).event, "snapshot");
    id = await a.admit(sid, "r1", `stream ${tag}`);
    events = await w.until(isSettled(id), SETTLE_MS);
  } finally {
    await w.close();
  }
  const deltas = events.filter((ev) => kind(ev) === "delta");
  assert.ok(deltas.length >= 2, `at least two deltas: ${events.map(kind)}`);
  for (const d of deltas) assert.equal(d.data.commandId, id);
  const s = settlementOf(events.at(-1));
  assert.equal(s.terminal, "completed");
  assert.equal(s.answer, "Streamed by Anthropic");
  assert.equal(deltas.map((d) => d.data.text).join(""), s.answer);
});

// Anthropic refuses an empty text block anywhere in `messages`, so an empty
// stored answer must not be sent back as one.
test("an empty answer does not poison the Session: the next turn's request is still one Anthropic accepts", T, async () => {
  const tag = uniq("empty-answer");
  const { a, sid } = await h.session();
  h.model.scriptFor(tag, { chunks: [] }, { text: "back on track" });
  const first = await a.admit(sid, "r1", `say nothing ${tag}`);
  const s1 = await settled(a, sid, first);
  assert.equal(s1.terminal, "completed", JSON.stringify(s1));
  const second = await a.admit(sid, "r2", `now talk ${tag}`);
  const s2 = await settled(a, sid, second);
  const reqs = h.model.requests(tag);
  assert.equal(reqs.length, 2);
  assert.equal(reqs[1].error ?? null, null, `the model server (as Anthropic) refused the second call: ${JSON.stringify(reqs[1].body.messages)}`);
  assert.equal(s2.terminal, "completed", JSON.stringify(s2));
  assert.equal(s2.answer, "back on track");
});

test("no answer of the Durable Object ever carried the Anthropic key", T, async () => {
  assert.ok(h.seen.length > 20, `few answers recorded: ${h.seen.length}`);
  for (const r of h.seen) {
    assert.ok(!r.text.includes(ANTHROPIC_TEST_KEY) && !r.headers.includes(ANTHROPIC_TEST_KEY), `${r.method} ${r.path} answered the key: ${r.text.slice(0, 300)}`);
  }
  // Every call the Worker made was a valid Anthropic call; nothing went to the OpenAI route.
  const all = h.model.requests();
  assert.ok(all.length > 10);
  for (const r of all) assert.equal(r.api, "anthropic", `${r.path}`);
});
