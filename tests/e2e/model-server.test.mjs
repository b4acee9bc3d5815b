// The scripted model server the run tests rely on (tests/support/): its wire
// format, scripts, failures, hangs, drops, gates and records. No Worker here.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { after, before, test } from "node:test";
import { RECORDS_MAX, startModelServer } from "../support/model-server.mjs";
import { ROOT } from "./helpers.mjs";

let model;
before(async () => {
  model = await startModelServer();
});
after(async () => {
  await model?.close();
});

const chat = (body, { headers = {}, signal } = {}) =>
  fetch(`${model.url}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "m", ...body }),
    signal,
  });

/** Reads an SSE answer to the end: the parsed `data:` payloads ("[DONE]" kept as is). */
async function sse(res) {
  const text = await res.text();
  return text
    .split("\n\n")
    .filter((e) => e.startsWith("data: "))
    .map((e) => (e === "data: [DONE]" ? "[DONE]" : JSON.parse(e.slice(6))));
}

const contentOf = (events) =>
  events
    .filter((e) => e !== "[DONE]" && e.choices.length > 0)
    .map((e) => e.choices[0].delta.content ?? "")
    .join("");

test("default: a streamed echo of the last user message in ~8 chunks, a usage chunk, then [DONE]", async () => {
  model.reset();
  const res = await chat(
    {
      stream: true,
      stream_options: { include_usage: true },
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: "first" },
        { role: "assistant", content: "ok" },
        { role: "user", content: [{ type: "text", text: "the last user message" }] },
      ],
    },
    { headers: { authorization: "Bearer sk-xyz" } },
  );
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type"), /^text\/event-stream/);
  const events = await sse(res);
  assert.equal(events.at(-1), "[DONE]");
  const chunks = events.slice(0, -1);
  for (const c of chunks) {
    assert.equal(c.object, "chat.completion.chunk");
    assert.equal(c.model, "m");
    assert.equal(typeof c.id, "string");
    assert.equal(typeof c.created, "number");
  }
  assert.equal(chunks[0].choices[0].delta.role, "assistant");
  assert.equal(contentOf(chunks), "Echo: the last user message");
  const contentChunks = chunks.filter((c) => c.choices[0]?.delta.content);
  assert.ok(contentChunks.length >= 6 && contentChunks.length <= 9, `${contentChunks.length} content chunks`);
  const finish = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.deepEqual(
    finish.map((c) => c.choices[0].finish_reason),
    ["stop"],
  );
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.ok(usage.usage.prompt_tokens > 0 && usage.usage.completion_tokens > 0);
  assert.equal(usage.usage.total_tokens, usage.usage.prompt_tokens + usage.usage.completion_tokens);
  const [r] = model.requests();
  assert.equal(r.headers.authorization, "Bearer sk-xyz");
  assert.equal(r.body.messages.length, 4);
  assert.equal(r.outcome, "completed");
  assert.equal(r.aborted, false);
});

test("without include_usage no usage chunk; without stream a chat.completion JSON", async () => {
  model.reset();
  const events = await sse(await chat({ stream: true, messages: [{ role: "user", content: "hi" }] }));
  assert.ok(events.slice(0, -1).every((e) => e.choices.length === 1 && !("usage" in e)));
  model.script({ text: "plain answer", usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } });
  const res = await chat({ messages: [{ role: "user", content: "hi" }] });
  assert.equal(res.status, 200);
  const json = await res.json();
  assert.equal(json.object, "chat.completion");
  assert.deepEqual(json.choices[0].message, { role: "assistant", content: "plain answer", refusal: null });
  assert.equal(json.choices[0].finish_reason, "stop");
  assert.deepEqual(json.usage, { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 });
});

test("scripts are consumed FIFO, one per request; scriptFor keeps its own lane; errors carry a JSON body", async () => {
  model.reset();
  model.script({ status: 500 }, { status: 429, headers: { "retry-after": "1" } }, { chunks: ["a", "b", "c"], usage: null });
  model.scriptFor("LANE-1", { text: "lane answer" });
  const stream = { stream: true, stream_options: { include_usage: true } };
  const lane = await chat({ ...stream, messages: [{ role: "user", content: "in LANE-1" }] });
  assert.equal(contentOf(await sse(lane)), "lane answer");
  const r500 = await chat({ ...stream, messages: [{ role: "user", content: "x" }] });
  assert.equal(r500.status, 500);
  assert.equal(typeof (await r500.json()).error.message, "string");
  const r429 = await chat({ ...stream, messages: [{ role: "user", content: "x" }] });
  assert.equal(r429.status, 429);
  assert.equal(r429.headers.get("retry-after"), "1");
  const ok = await sse(await chat({ ...stream, messages: [{ role: "user", content: "x" }] }));
  assert.equal(contentOf(ok), "abc");
  assert.ok(ok.every((e) => e === "[DONE]" || e.choices.length === 1), "usage: null sends no usage chunk");
  // Queue empty: the echo fallback again.
  assert.equal(contentOf(await sse(await chat({ ...stream, messages: [{ role: "user", content: "y" }] }))), "Echo: y");
  assert.equal(model.unconsumed(), 0);
  assert.deepEqual(
    model.requests().map((r) => [r.outcome, r.scripted]),
    [
      ["completed", true],
      ["error", true],
      ["error", true],
      ["completed", true],
      ["completed", false],
    ],
  );
  assert.equal(model.requests("LANE-1").length, 1);
  // A malformed request is refused with a 400 and consumes nothing.
  model.script({ text: "kept" });
  const bad = await fetch(`${model.url}/chat/completions`, { method: "POST", body: JSON.stringify({ messages: [] }) });
  assert.equal(bad.status, 400);
  assert.equal(model.unconsumed(), 1);
});

test("hang: chunks first, then open until the client aborts, which is recorded", async () => {
  model.reset();
  model.script({ hang: true, chunks: ["par", "tial"] });
  const ac = new AbortController();
  const res = await chat({ stream: true, messages: [{ role: "user", content: "x" }] }, { signal: ac.signal });
  assert.equal(res.status, 200);
  await model.waitFor((rs) => rs[0]?.chunksSent === 2);
  assert.equal(model.requests()[0].outcome, "hanging");
  assert.equal(model.requests()[0].aborted, false);
  ac.abort();
  await model.waitFor((rs) => rs[0].aborted);
  assert.equal(model.requests()[0].outcome, "aborted");
});

test("dropAfterChunks cuts the connection mid-stream; that is not a client abort", async () => {
  model.reset();
  model.script({ dropAfterChunks: 2, chunks: ["a", "b", "c", "d"] });
  const res = await chat({ stream: true, messages: [{ role: "user", content: "x" }] });
  await assert.rejects(res.text());
  await model.waitFor((rs) => rs[0]?.outcome === "dropped");
  assert.equal(model.requests()[0].chunksSent, 2);
  assert.equal(model.requests()[0].aborted, false);
});

test("a gate holds the answer until release; chunkDelayMs paces the chunks", async () => {
  model.reset();
  model.script({ gate: "g1", chunks: ["x", "y", "z"], chunkDelayMs: 30 });
  const res = await chat({ stream: true, messages: [{ role: "user", content: "x" }] });
  const body = res.text();
  await model.waitForRequests(1);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(model.requests()[0].chunksSent, 0, "nothing passes a closed gate");
  const t0 = Date.now();
  model.release("g1");
  assert.match(await body, /"content":"z"/);
  assert.ok(Date.now() - t0 >= 80, "three chunks 30 ms apart");
});

test("close() ends hanging requests without marking them aborted; records are bounded", async () => {
  const m = await startModelServer({ fallback: "hold" });
  const res = await fetch(`${m.url}/chat/completions`, {
    method: "POST",
    body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "x" }] }),
  });
  assert.equal(res.status, 200);
  await m.waitFor((rs) => rs[0]?.outcome === "hanging");
  const reading = res.text().catch(() => "closed");
  await m.close();
  await reading;
  assert.equal(m.requests()[0].aborted, false);

  const b = await startModelServer();
  try {
    const bodies = Array.from({ length: RECORDS_MAX + 5 }, (_, i) => ({ model: "m", messages: [{ role: "user", content: `n${i}` }] }));
    for (let i = 0; i < bodies.length; i += 50) {
      await Promise.all(bodies.slice(i, i + 50).map((body) => fetch(`${b.url}/chat/completions`, { method: "POST", body: JSON.stringify(body) }).then((r) => r.text())));
    }
    assert.equal(b.requests().length, RECORDS_MAX);
  } finally {
    await b.close();
  }
});

test("CLI mode: prints its base URL; the control API scripts, lists and resets", async () => {
  const child = spawn(process.execPath, [path.join(ROOT, "tests/support/model-server.mjs"), "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    const url = await new Promise((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (d) => {
        out += d;
        if (out.includes("\n")) resolve(out.trim());
      });
      child.once("exit", (code) => reject(new Error(`exited ${code}`)));
    });
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    const origin = new URL(url).origin;
    const scripted = await fetch(`${origin}/__script`, { method: "POST", body: JSON.stringify([{ text: "from the control API" }]) });
    assert.deepEqual(await scripted.json(), { queued: 1 });
    const res = await fetch(`${url}/chat/completions`, {
      method: "POST",
      headers: { authorization: "Bearer k" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "q" }] }),
    });
    assert.equal((await res.json()).choices[0].message.content, "from the control API");
    const list = await (await fetch(`${origin}/__requests`)).json();
    assert.equal(list.length, 1);
    assert.equal(list[0].headers.authorization, "Bearer k");
    await fetch(`${origin}/__reset`, { method: "POST" });
    assert.deepEqual(await (await fetch(`${origin}/__requests`)).json(), []);
  } finally {
    child.kill("SIGTERM");
  }
});

// ---- Anthropic Messages (POST /v1/messages, base URL model.origin) ----

const ANTHROPIC_HEADERS = { "content-type": "application/json", "x-api-key": "sk-ant-xyz", "anthropic-version": "2023-06-01" };

const messages = (body, { headers = ANTHROPIC_HEADERS, signal } = {}) =>
  fetch(`${model.origin}/v1/messages`, {
    method: "POST",
    headers,
    body: JSON.stringify({ model: "claude-test", max_tokens: 64, ...body }),
    signal,
  });

const userSays = (text) => [{ role: "user", content: [{ type: "text", text }] }];

/** Reads an Anthropic SSE answer to the end: `[{event, data}]`, data parsed. */
async function anthropicSse(res) {
  const text = await res.text();
  assert.ok(text.endsWith("\n\n"), "every event ends with a blank line");
  return text
    .split("\n\n")
    .filter((block) => block !== "")
    .map((block) => {
      const lines = block.split("\n");
      assert.equal(lines.length, 2, `one event line and one data line: ${block}`);
      assert.match(lines[0], /^event: [a-z_]+$/);
      assert.match(lines[1], /^data: /);
      const ev = { event: lines[0].slice(7), data: JSON.parse(lines[1].slice(6)) };
      assert.equal(ev.data.type, ev.event, "the data's type names the event");
      return ev;
    });
}

const textOf = (events) =>
  events
    .filter((e) => e.event === "content_block_delta")
    .map((e) => {
      assert.equal(e.data.delta.type, "text_delta");
      return e.data.delta.text;
    })
    .join("");

test("anthropic: a streamed echo in the real wire format, usage from message_start and message_delta", async () => {
  model.reset();
  const res = await messages({
    stream: true,
    system: "be brief",
    messages: [
      { role: "user", content: "first" },
      { role: "assistant", content: [{ type: "text", text: "ok" }] },
      { role: "user", content: [{ type: "text", text: "the last user message" }] },
    ],
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type"), /^text\/event-stream/);
  const events = await anthropicSse(res);
  const names = events.map((e) => e.event);
  assert.deepEqual(names.slice(0, 2), ["message_start", "content_block_start"]);
  assert.deepEqual(names.slice(-3), ["content_block_stop", "message_delta", "message_stop"]);
  assert.ok(names.includes("ping"), `a ping: ${names}`);
  assert.deepEqual(
    [...new Set(names)].sort(),
    ["content_block_delta", "content_block_start", "content_block_stop", "message_delta", "message_start", "message_stop", "ping"],
  );
  const start = events[0].data.message;
  assert.equal(start.role, "assistant");
  assert.equal(start.model, "claude-test");
  assert.deepEqual(start.content, []);
  assert.match(start.id, /^msg_/);
  assert.ok(start.usage.input_tokens > 0);
  assert.deepEqual(events[1].data, { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } });
  assert.equal(textOf(events), "Echo: the last user message");
  const deltas = events.filter((e) => e.event === "content_block_delta");
  assert.ok(deltas.length >= 6 && deltas.length <= 9, `${deltas.length} deltas`);
  for (const d of deltas) assert.equal(d.data.index, 0);
  const md = events.at(-2).data;
  assert.deepEqual(md.delta, { stop_reason: "end_turn", stop_sequence: null });
  assert.ok(md.usage.output_tokens > 0);
  const [r] = model.requests();
  assert.equal(r.api, "anthropic");
  assert.equal(r.path, "/v1/messages");
  assert.equal(r.headers["x-api-key"], "sk-ant-xyz");
  assert.equal(r.headers["anthropic-version"], "2023-06-01");
  assert.equal(r.outcome, "completed");
  assert.equal(r.chunksSent, deltas.length);
  assert.equal(r.aborted, false);
});

test("anthropic: scripted usage in either naming, usage null, finishReason mapped, lanes match the system prompt too, unstreamed JSON", async () => {
  model.reset();
  model.script(
    { chunks: ["a", "b"], usage: { prompt_tokens: 21, completion_tokens: 5, total_tokens: 26 } },
    { text: "x", usage: { input_tokens: 7, output_tokens: 3, cache_read_input_tokens: 2 }, finishReason: "length" },
    { text: "y", usage: null },
  );
  model.scriptFor("SYS-LANE", { text: "from the system lane" });
  const usageOf = (events) => [events[0].data.message.usage, events.find((e) => e.event === "message_delta").data];

  const lane = await anthropicSse(await messages({ stream: true, system: "tagged SYS-LANE", messages: userSays("hi") }));
  assert.equal(textOf(lane), "from the system lane");

  const first = await anthropicSse(await messages({ stream: true, messages: userSays("hi") }));
  assert.equal(textOf(first), "ab");
  const [s1, d1] = usageOf(first);
  assert.equal(s1.input_tokens, 21);
  assert.deepEqual(d1.usage, { output_tokens: 5 });

  const second = await anthropicSse(await messages({ stream: true, messages: userSays("hi") }));
  const [s2, d2] = usageOf(second);
  assert.equal(s2.input_tokens, 7);
  assert.equal(s2.cache_read_input_tokens, 2);
  assert.deepEqual(d2, { type: "message_delta", delta: { stop_reason: "max_tokens", stop_sequence: null }, usage: { output_tokens: 3 } });

  const third = await anthropicSse(await messages({ stream: true, messages: userSays("hi") }));
  assert.equal(third[0].data.message.usage, undefined, "usage: null sends none");
  assert.equal(usageOf(third)[1].usage, undefined);

  // Not streamed: a Message object.
  model.script({ text: "plain answer", usage: { input_tokens: 4, output_tokens: 2 } });
  const res = await messages({ messages: userSays("hi") });
  assert.equal(res.status, 200);
  const json = await res.json();
  assert.equal(json.type, "message");
  assert.deepEqual(json.content, [{ type: "text", text: "plain answer" }]);
  assert.equal(json.stop_reason, "end_turn");
  assert.deepEqual(json.usage, { input_tokens: 4, output_tokens: 2 });
  assert.equal(model.unconsumed(), 0);
});

test("anthropic: HTTP errors carry Anthropic's error body; streamError sends an in-stream error event", async () => {
  model.reset();
  model.script(
    { status: 529 },
    { status: 400, body: { type: "error", error: { type: "invalid_request_error", message: "prompt is too long" } } },
    { chunks: ["part", "ial"], streamError: "overloaded_error" },
    { streamError: { type: "api_error", message: "Internal server error" } },
    { streamError: "overloaded_error" },
  );
  const stream = { stream: true, messages: userSays("x") };
  const r529 = await messages(stream);
  assert.equal(r529.status, 529);
  assert.deepEqual(await r529.json(), { type: "error", error: { type: "overloaded_error", message: "Overloaded" } });
  const r400 = await messages(stream);
  assert.equal(r400.status, 400);
  assert.equal((await r400.json()).error.message, "prompt is too long");

  const partial = await anthropicSse(await messages(stream));
  assert.equal(textOf(partial), "partial");
  assert.deepEqual(partial.at(-1), { event: "error", data: { type: "error", error: { type: "overloaded_error", message: "Overloaded" } } });
  assert.ok(!partial.some((e) => e.event === "message_stop" || e.event === "message_delta"), "nothing after the error");

  const bare = await anthropicSse(await messages(stream));
  assert.equal(textOf(bare), "", "no content without text or chunks");
  assert.deepEqual(bare.at(-1).data.error, { type: "api_error", message: "Internal server error" });

  // Unstreamed, the in-stream error is its HTTP error.
  const unstreamed = await messages({ messages: userSays("x") });
  assert.equal(unstreamed.status, 529);
  assert.equal((await unstreamed.json()).error.type, "overloaded_error");

  assert.deepEqual(
    model.requests().map((r) => [r.outcome, r.status]),
    [
      ["error", 529],
      ["error", 400],
      ["error", 200],
      ["error", 200],
      ["error", 529],
    ],
  );
});

test("anthropic: a request Anthropic would refuse is a 400 invalid_request_error naming the problem, and consumes nothing", async () => {
  model.reset();
  model.script({ text: "kept" });
  const ok = { model: "claude-test", max_tokens: 64, stream: true, messages: userSays("hi") };
  const { max_tokens: _dropped, ...noMaxTokens } = ok;
  const cases = [
    [noMaxTokens, /max_tokens: Field required/],
    [{ ...ok, max_tokens: 0 }, /max_tokens/],
    [{ ...ok, messages: [] }, /messages: at least one message/],
    [{ ...ok, messages: [{ role: "assistant", content: [{ type: "text", text: "hi" }] }] }, /first message must use the "user" role/],
    [{ ...ok, messages: [{ role: "system", content: "hi" }] }, /role/],
    [{ ...ok, messages: [{ role: "user", content: [{ type: "text", text: "" }] }] }, /text content blocks must be non-empty/],
    [{ ...ok, messages: [{ role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "" }] }] }, /text content blocks must be non-empty/],
    [{ ...ok, messages: [{ role: "user", content: "" }] }, /text content blocks must be non-empty/],
    [{ ...ok, messages: [{ role: "user", content: [] }] }, /at least 1 item/],
    [{ ...ok, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/bmp", data: "AAAA" } }] }] }, /media_type/],
    [{ ...ok, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:," } }] }] }, /image_url/],
    [{ ...ok, stream_options: { include_usage: true } }, /stream_options: Extra inputs are not permitted/],
    [{ ...ok, system: [{ type: "text", text: "" }] }, /system: text content blocks must be non-empty/],
    [{ ...ok, model: undefined }, /model: Field required/],
  ];
  for (const [body, why] of cases) {
    const res = await fetch(`${model.origin}/v1/messages`, { method: "POST", headers: ANTHROPIC_HEADERS, body: JSON.stringify(body) });
    assert.equal(res.status, 400, JSON.stringify(body));
    const json = await res.json();
    assert.equal(json.type, "error");
    assert.equal(json.error.type, "invalid_request_error");
    assert.match(json.error.message, why, JSON.stringify(body));
  }
  const { "anthropic-version": _v, ...noVersion } = ANTHROPIC_HEADERS;
  for (const headers of [noVersion, { ...ANTHROPIC_HEADERS, "anthropic-version": "2099-01-01" }]) {
    const res = await fetch(`${model.origin}/v1/messages`, { method: "POST", headers, body: JSON.stringify(ok) });
    assert.equal(res.status, 400);
    assert.match((await res.json()).error.message, /^anthropic-version: /);
  }
  assert.equal(model.unconsumed(), 1);
  const refused = model.requests();
  assert.equal(refused.length, cases.length + 2);
  for (const r of refused) assert.equal(r.outcome, "invalid");
  assert.match(refused[0].error, /max_tokens/);
  // A valid request with an image and both roles goes through.
  const good = await messages({
    stream: true,
    messages: [
      { role: "user", content: [{ type: "text", text: "look" }, { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] },
      { role: "assistant", content: [{ type: "text", text: "seen" }] },
      { role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/webp", data: "UklGRg==" } }] },
    ],
  });
  assert.equal(textOf(await anthropicSse(good)), "kept");
});

test("anthropic: hang, dropAfterChunks and gates work as for OpenAI", async () => {
  model.reset();
  model.script({ hang: true, chunks: ["par", "tial"] }, { dropAfterChunks: 1, chunks: ["a", "b"] }, { gate: "ag", chunks: ["x", "y"] });
  const ac = new AbortController();
  const hanging = await messages({ stream: true, messages: userSays("x") }, { signal: ac.signal });
  assert.equal(hanging.status, 200);
  await model.waitFor((rs) => rs[0]?.chunksSent === 2 && rs[0].outcome === "hanging");
  ac.abort();
  await model.waitFor((rs) => rs[0].aborted);
  assert.equal(model.requests()[0].outcome, "aborted");

  const dropped = await messages({ stream: true, messages: userSays("x") });
  await assert.rejects(dropped.text());
  await model.waitFor((rs) => rs[1]?.outcome === "dropped");
  assert.equal(model.requests()[1].chunksSent, 1);
  assert.equal(model.requests()[1].aborted, false);

  const gated = await messages({ stream: true, messages: userSays("x") });
  const body = anthropicSse(gated);
  await model.waitForRequests(3);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(model.requests()[2].chunksSent, 0, "nothing passes a closed gate");
  model.release("ag");
  assert.equal(textOf(await body), "xy");
});

test("openai: streamError sends an in-stream error chunk and no [DONE]", async () => {
  model.reset();
  model.script({ chunks: ["so far"], streamError: { type: "server_error", message: "The server had an error" } });
  const events = await sse(await chat({ stream: true, messages: [{ role: "user", content: "x" }] }));
  assert.equal(contentOf(events.slice(0, -1)), "so far");
  assert.deepEqual(events.at(-1), { error: { message: "The server had an error", type: "server_error", param: null, code: null } });
  assert.equal(model.requests()[0].outcome, "error");
});

// ---- Tool calls (both formats) ----

/** Joins an OpenAI stream's tool calls by index: `[{id, type, name, arguments, pieces}]`. */
function openAiToolCalls(events) {
  const calls = [];
  for (const e of events) {
    if (e === "[DONE]" || e.choices.length === 0) continue;
    for (const d of e.choices[0].delta.tool_calls ?? []) {
      if (d.id !== undefined) {
        // The first piece of a call names it; its arguments start empty.
        assert.equal(calls[d.index], undefined, `call ${d.index} starts once`);
        assert.equal(d.function.arguments, "");
        calls[d.index] = { id: d.id, type: d.type, name: d.function.name, arguments: "", pieces: 0 };
      } else {
        assert.deepEqual(Object.keys(d).sort(), ["function", "index"]);
        assert.deepEqual(Object.keys(d.function), ["arguments"]);
        calls[d.index].arguments += d.function.arguments;
        calls[d.index].pieces++;
      }
    }
  }
  return calls;
}

/** Joins an Anthropic stream's content blocks, checking each starts after the last stopped: `[{type, text | id, name, json, pieces}]`. */
function anthropicBlocks(events) {
  const blocks = [];
  let open = null;
  for (const { event, data } of events) {
    if (event === "content_block_start") {
      assert.equal(open, null, "one block at a time");
      assert.equal(data.index, blocks.length, "blocks are numbered in order");
      blocks.push({ ...data.content_block, json: "", pieces: 0 });
      open = data.index;
    } else if (event === "content_block_delta") {
      assert.equal(data.index, open);
      const b = blocks[open];
      if (data.delta.type === "text_delta") b.text += data.delta.text;
      else {
        assert.equal(data.delta.type, "input_json_delta");
        assert.equal(b.type, "tool_use");
        b.json += data.delta.partial_json;
        b.pieces++;
      }
    } else if (event === "content_block_stop") {
      assert.equal(data.index, open);
      open = null;
    }
  }
  assert.equal(open, null, "every block stopped");
  return blocks;
}

const WEATHER_TOOL = { type: "function", function: { name: "get_weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } } } };
const ANTHROPIC_WEATHER_TOOL = { name: "get_weather", description: "The weather in a city", input_schema: { type: "object", properties: { city: { type: "string" } } } };

test("openai tool calls: text first, then per call a start chunk (id, name) and its arguments in pieces; finish_reason tool_calls", async () => {
  model.reset();
  model.script({
    text: "Let me look.",
    toolCalls: [
      { name: "get_weather", arguments: { city: "Paris", units: "metric" } },
      { id: "call_mine", name: "lookup", arguments: '{"query":"population of Paris"}' },
    ],
  });
  const events = await sse(await chat({ stream: true, stream_options: { include_usage: true }, tools: [WEATHER_TOOL], messages: [{ role: "user", content: "weather?" }] }));
  assert.equal(events.at(-1), "[DONE]");
  const chunks = events.slice(0, -1);
  assert.equal(contentOf(chunks), "Let me look.");
  const lastText = chunks.findLastIndex((c) => c.choices[0]?.delta.content);
  const firstCall = chunks.findIndex((c) => c.choices[0]?.delta.tool_calls);
  assert.ok(lastText < firstCall, "the text comes before the tool calls");
  const seq = model.requests()[0].seq;
  const calls = openAiToolCalls(chunks);
  assert.deepEqual(
    calls.map(({ pieces, ...c }) => c),
    [
      { id: `call_${seq}_0`, type: "function", name: "get_weather", arguments: '{"city":"Paris","units":"metric"}' },
      { id: "call_mine", type: "function", name: "lookup", arguments: '{"query":"population of Paris"}' },
    ],
  );
  for (const c of calls) assert.ok(c.pieces >= 2 && c.pieces <= 3, `arguments in ${c.pieces} pieces`);
  const finish = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(finish.length, 1);
  assert.equal(finish[0].choices[0].finish_reason, "tool_calls");
  assert.deepEqual(finish[0].choices[0].delta, {});
  assert.deepEqual(chunks.at(-1).choices, [], "then the usage chunk");
  assert.ok(chunks.at(-1).usage.completion_tokens > 0);
  const r = model.requests()[0];
  assert.equal(r.outcome, "completed");
  assert.equal(r.chunksSent, chunks.filter((c) => c.choices[0]?.delta.content || c.choices[0]?.delta.tool_calls).length);

  // Unstreamed: message.tool_calls, content null without text; finishReason still overridable.
  model.script({ toolCalls: [{ name: "get_weather", arguments: "{}" }] }, { toolCalls: [{ name: "f", arguments: "{}" }], finishReason: "stop" });
  const json = await (await chat({ messages: [{ role: "user", content: "weather?" }] })).json();
  assert.deepEqual(json.choices[0].message, {
    role: "assistant",
    content: null,
    refusal: null,
    tool_calls: [{ id: `call_${model.requests()[1].seq}_0`, type: "function", function: { name: "get_weather", arguments: "{}" } }],
  });
  assert.equal(json.choices[0].finish_reason, "tool_calls");
  const overridden = await sse(await chat({ stream: true, messages: [{ role: "user", content: "x" }] }));
  assert.equal(contentOf(overridden), "", "tool calls alone: no echo");
  assert.equal(overridden.at(-2).choices[0].finish_reason, "stop");
});

test("anthropic tool_use: blocks after the text block, input_json_delta pieces, stop_reason tool_use", async () => {
  model.reset();
  model.script(
    { toolCalls: [{ name: "get_weather", arguments: { city: "Paris" } }] },
    { text: "Checking both.", toolCalls: [{ name: "get_weather", arguments: { city: "Oslo" } }, { id: "toolu_mine", name: "lookup", arguments: '{"q":"fjords"}' }] },
  );
  const only = await anthropicSse(await messages({ stream: true, tools: [ANTHROPIC_WEATHER_TOOL], messages: userSays("weather?") }));
  const seq = model.requests()[0].seq;
  const [block, ...rest] = anthropicBlocks(only);
  assert.deepEqual(rest, [], "no text block for tool calls alone");
  assert.equal(block.type, "tool_use");
  assert.equal(block.id, `toolu_${seq}_0`);
  assert.equal(block.name, "get_weather");
  assert.deepEqual(block.input, {}, "content_block_start carries an empty input");
  assert.deepEqual(JSON.parse(block.json), { city: "Paris" });
  assert.ok(block.pieces >= 2, `${block.pieces} pieces`);
  const md = only.find((e) => e.event === "message_delta").data;
  assert.equal(md.delta.stop_reason, "tool_use");
  assert.equal(only.at(-1).event, "message_stop");

  const both = await anthropicSse(await messages({ stream: true, messages: userSays("weather?") }));
  const blocks = anthropicBlocks(both);
  assert.deepEqual(
    blocks.map((b) => [b.type, b.text ?? b.id, b.name, b.json]),
    [
      ["text", "Checking both.", undefined, ""],
      ["tool_use", `toolu_${model.requests()[1].seq}_0`, "get_weather", '{"city":"Oslo"}'],
      ["tool_use", "toolu_mine", "lookup", '{"q":"fjords"}'],
    ],
  );
  assert.equal(both.find((e) => e.event === "message_delta").data.delta.stop_reason, "tool_use");

  // Unstreamed: tool_use blocks with the input parsed.
  model.script({ text: "One moment.", toolCalls: [{ id: "toolu_x", name: "get_weather", arguments: { city: "Rome" } }] });
  const json = await (await messages({ messages: userSays("weather?") })).json();
  assert.deepEqual(json.content, [
    { type: "text", text: "One moment." },
    { type: "tool_use", id: "toolu_x", name: "get_weather", input: { city: "Rome" } },
  ]);
  assert.equal(json.stop_reason, "tool_use");
});

test("tool calls keep gates, pacing and drops: each start and each arguments piece is a chunk", async () => {
  model.reset();
  model.script({ gate: "tg", chunkDelayMs: 10, toolCalls: [{ name: "f", arguments: '{"a":1}' }] }, { dropAfterChunks: 2, toolCalls: [{ name: "f", arguments: '{"abc":"defghi"}' }] });
  const gated = chat({ stream: true, messages: [{ role: "user", content: "x" }] }).then(sse);
  await model.waitForRequests(1);
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(model.requests()[0].chunksSent, 0, "nothing passes a closed gate");
  model.release("tg");
  assert.equal(openAiToolCalls(await gated)[0].arguments, '{"a":1}');

  const dropped = await messages({ stream: true, messages: userSays("x") });
  await assert.rejects(dropped.text());
  await model.waitFor((rs) => rs[1]?.outcome === "dropped");
  assert.equal(model.requests()[1].chunksSent, 2, "the call's start and one piece of its arguments");
});

test("follow-ups with tool results are accepted in both formats; scriptFor and requests() match tool results and arguments", async () => {
  model.reset();
  model.script({ text: "from the queue" });
  model.scriptFor("RESULT-TAG-7", { text: "routed by the tool result" });
  model.scriptFor("ARG-TAG-7", { text: "routed by the arguments" });
  const openAiTurn = (result) => [
    { role: "system", content: "be brief" },
    { role: "user", content: "weather in Paris and Oslo?" },
    {
      role: "assistant",
      content: null,
      tool_calls: [
        { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
        { id: "call_b", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } },
      ],
    },
    { role: "tool", tool_call_id: "call_b", content: "snow" },
    { role: "tool", tool_call_id: "call_a", content: result },
  ];
  const routed = await sse(await chat({ stream: true, tools: [WEATHER_TOOL], messages: openAiTurn("sunny RESULT-TAG-7") }));
  assert.equal(contentOf(routed), "routed by the tool result");
  // Text parts are a tool result too, and an assistant message may carry text beside its calls.
  const withText = [
    { role: "user", content: "go" },
    { role: "assistant", content: "Looking.", tool_calls: [{ id: "c1", type: "function", function: { name: "find", arguments: '{"tag":"ARG-TAG-7"}' } }] },
    { role: "tool", tool_call_id: "c1", content: [{ type: "text", text: "found" }] },
    { role: "assistant", content: "Found it." },
    { role: "user", content: "thanks" },
  ];
  assert.equal(contentOf(await sse(await chat({ stream: true, messages: withText }))), "routed by the arguments");

  model.scriptFor("RESULT-TAG-8", { text: "anthropic routed" });
  const anthropicTurn = [
    { role: "user", content: "weather in Paris and Oslo?" },
    {
      role: "assistant",
      content: [
        { type: "text", text: "Checking." },
        { type: "tool_use", id: "toolu_a", name: "get_weather", input: { city: "Paris" } },
        { type: "tool_use", id: "toolu_b", name: "get_weather", input: { city: "Oslo" } },
      ],
    },
    {
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: "toolu_b", content: "snow" },
        { type: "tool_result", tool_use_id: "toolu_a", content: [{ type: "text", text: "failed RESULT-TAG-8" }], is_error: true },
        { type: "text", text: "and then?" },
      ],
    },
  ];
  const res = await messages({ stream: true, tools: [ANTHROPIC_WEATHER_TOOL], messages: anthropicTurn });
  assert.equal(res.status, 200);
  assert.equal(textOf(await anthropicSse(res)), "anthropic routed");
  // Not matched by any lane: the queue answers.
  const plain = await messages({ stream: true, messages: [anthropicTurn[0], anthropicTurn[1], { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a" }, { type: "tool_result", tool_use_id: "toolu_b", content: "" }] }] });
  assert.equal(textOf(await anthropicSse(plain)), "from the queue");

  assert.equal(model.unconsumed(), 0);
  assert.equal(model.requests("RESULT-TAG-7").length, 1);
  assert.equal(model.requests("ARG-TAG-7").length, 1);
  assert.equal(model.requests("RESULT-TAG-8").length, 1);
  assert.equal(model.requests('"city":"Oslo"').length, 3, "tool_use input is matched as JSON");
  assert.ok(model.requests().every((r) => r.outcome === "completed"));
});

test("openai: tool turns and tools OpenAI would refuse are a 400 naming the problem and its param, and consume nothing", async () => {
  model.reset();
  model.script({ text: "kept" });
  const call = (id, args = "{}") => ({ id, type: "function", function: { name: "f", arguments: args } });
  const asks = (...ids) => ({ role: "assistant", content: null, tool_calls: ids.map((id) => call(id)) });
  const answers = (id, content = "ok") => ({ role: "tool", tool_call_id: id, content });
  const user = { role: "user", content: "go" };
  const cases = [
    [[user, answers("call_a")], /messages with role 'tool' must be a response to a preceeding message with 'tool_calls'/, "messages.[1].role"],
    [[user, asks("call_a"), answers("call_x")], /'tool_call_id' of 'call_x' not found in 'tool_calls' of previous message/, "messages.[2].tool_call_id"],
    [[user, asks("call_a"), user], /must be followed by tool messages responding to each 'tool_call_id'.*: call_a$/, "messages.[1].role"],
    [[user, asks("call_a", "call_b"), answers("call_a"), user], /did not have response messages: call_b$/, "messages.[1].role"],
    [[user, asks("call_a")], /did not have response messages: call_a$/, "messages.[1].role"],
    [[user, asks("call_a"), answers("call_a"), user, answers("call_a")], /must be a response to a preceeding message/, "messages.[4].role"],
    [[user, { role: "assistant", content: null, tool_calls: [] }], /empty array/, "messages[1].tool_calls"],
    [[user, { role: "assistant", tool_calls: [call("c", { a: 1 })] }, answers("c")], /arguments': expected a string, but got an object/, "messages[1].tool_calls[0].function.arguments"],
    [[user, { role: "assistant", tool_calls: [{ type: "function", function: { name: "f", arguments: "{}" } }] }], /tool_calls\[0\]\.id/, "messages[1].tool_calls[0].id"],
    [[user, asks("c"), { role: "tool", content: "ok" }], /tool_call_id/, "messages[2].tool_call_id"],
    [[user, asks("c"), { role: "tool", tool_call_id: "c", content: null }], /messages\[2\]\.content/, "messages[2].content"],
    [[user, { role: "assistant", content: null }], /expected a string, got null/, "messages.[1].content"],
  ];
  const toolCases = [
    [[{ type: "function", function: { name: "get.weather", parameters: {} } }], /does not match pattern/, "tools[0].function.name"],
    [[{ type: "custom_thing", function: { name: "f" } }], /tools\[0\]\.type/, "tools[0].type"],
    [[{ type: "function" }], /tools\[0\]\.function/, "tools[0].function"],
    [[{ type: "function", function: { name: "f", parameters: "object" } }], /parameters/, "tools[0].function.parameters"],
    [[{ type: "function", function: { name: "f", input_schema: {} } }], /Unknown parameter: 'tools\[0\]\.function\.input_schema'/, "tools[0].function.input_schema"],
    [[{ name: "f", input_schema: { type: "object" } }], /Unknown parameter/, "tools[0].name"],
    [{ f: {} }, /'tools'/, "tools"],
  ];
  const bodies = [...cases.map(([msgs, why, param]) => [{ messages: msgs }, why, param]), ...toolCases.map(([tools, why, param]) => [{ tools, messages: [user] }, why, param])];
  for (const [body, why, param] of bodies) {
    const res = await chat({ stream: true, ...body });
    assert.equal(res.status, 400, JSON.stringify(body));
    const { error } = await res.json();
    assert.equal(error.type, "invalid_request_error");
    assert.match(error.message, why, JSON.stringify(body));
    assert.equal(error.param, param, JSON.stringify(body));
    assert.equal(error.code, null);
  }
  assert.equal(model.unconsumed(), 1);
  assert.equal(model.requests().length, bodies.length);
  assert.ok(model.requests().every((r) => r.outcome === "invalid"));
});

test("anthropic: tool turns and tools Anthropic would refuse are a 400 invalid_request_error, and consume nothing", async () => {
  model.reset();
  model.script({ text: "kept" });
  const uses = (...ids) => ({ role: "assistant", content: ids.map((id) => ({ type: "tool_use", id, name: "f", input: {} })) });
  const results = (...ids) => ({ role: "user", content: ids.map((id) => ({ type: "tool_result", tool_use_id: id, content: "ok" })) });
  const user = userSays("go")[0];
  const cases = [
    [[user, uses("toolu_a"), results("toolu_a", "toolu_x")], /^messages\.2\.content\.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x\. Each `tool_result` block must have a corresponding `tool_use` block in the previous message\.$/],
    [[results("toolu_a")], /^messages\.0\.content\.0: unexpected `tool_use_id`/],
    [[user, uses("toolu_a", "toolu_b"), results("toolu_a")], /^messages\.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_b\. Each `tool_use` block must have a corresponding `tool_result` block in the next message\.$/],
    [[user, uses("toolu_a"), user], /^messages\.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_a\./],
    [[user, uses("toolu_a")], /`tool_use` ids were found without `tool_result` blocks/],
    [[user, uses("toolu_a"), results("toolu_a"), { role: "assistant", content: "ok" }, results("toolu_a")], /^messages\.4\.content\.0: unexpected `tool_use_id`/],
    [[{ role: "user", content: [{ type: "tool_use", id: "toolu_a", name: "f", input: {} }] }], /tool_use blocks are only allowed in assistant messages/],
    [[user, { role: "assistant", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: "x" }] }], /tool_result blocks are only allowed in user messages/],
    [[user, { role: "assistant", content: [{ type: "tool_use", id: "toolu_a", name: "f", input: "{}" }] }, results("toolu_a")], /tool_use\.input: Input should be a valid dictionary/],
    [[user, { role: "assistant", content: [{ type: "tool_use", id: "call.1", name: "f", input: {} }] }, results("toolu_a")], /tool_use\.id: String should match pattern/],
    [[user, uses("toolu_a"), { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: [{ type: "text", text: "" }] }] }], /text content blocks must be non-empty/],
    [[user, uses("toolu_a"), { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: 42 }] }], /tool_result\.content/],
    [[user, uses("toolu_a"), { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", is_error: "yes" }] }], /is_error/],
  ];
  const toolCases = [
    [[{ name: "get_weather" }], /^tools\.0\.custom\.input_schema: Field required$/],
    [[{ name: "get.weather", input_schema: { type: "object" } }], /tools\.0\.custom\.name: String should match pattern/],
    [[{ name: "f", input_schema: { properties: {} } }], /input_schema\.type: Input should be 'object'/],
    [[{ name: "f", input_schema: { type: "object" } }, { name: "f", input_schema: { type: "object" } }], /^tools: Tool names must be unique\.$/],
    [[{ type: "function", function: { name: "f", parameters: {} } }], /Input tag "function"/],
    [[{ name: "f", parameters: { type: "object" }, input_schema: { type: "object" } }], /tools\.0\.custom\.parameters: Extra inputs are not permitted/],
  ];
  const bodies = [...cases.map(([msgs, why]) => [{ messages: msgs }, why]), ...toolCases.map(([tools, why]) => [{ tools, messages: [user] }, why])];
  for (const [body, why] of bodies) {
    const res = await messages({ stream: true, ...body });
    assert.equal(res.status, 400, JSON.stringify(body));
    const json = await res.json();
    assert.equal(json.type, "error");
    assert.equal(json.error.type, "invalid_request_error");
    assert.match(json.error.message, why, JSON.stringify(body));
  }
  assert.equal(model.unconsumed(), 1);
  assert.ok(model.requests().every((r) => r.outcome === "invalid"));
  // A server tool passes beside a custom one.
  const ok = await messages({ stream: true, tools: [ANTHROPIC_WEATHER_TOOL, { type: "web_search_20250305", name: "web_search" }], messages: [user] });
  assert.equal(textOf(await anthropicSse(ok)), "kept");
});

test("a scripted tool call is checked when scripted", () => {
  for (const bad of [
    { toolCalls: [] },
    { toolCalls: {} },
    { toolCalls: [{ arguments: "{}" }] },
    { toolCalls: [{ name: "", arguments: "{}" }] },
    { toolCalls: [{ name: "f" }] },
    { toolCalls: [{ name: "f", arguments: 3 }] },
    { toolCalls: [{ name: "f", arguments: [] }] },
    { toolCalls: [{ name: "f", arguments: "{}", id: "" }] },
    { toolCalls: [{ name: "f", arguments: "{}", input: {} }] },
  ]) {
    assert.throws(() => model.script(bad), TypeError, JSON.stringify(bad));
  }
  model.reset();
});

test("past its context limit a request is refused in each provider's own format, before any script is consumed", async () => {
  model.reset();
  model.setContextLimit(10);
  try {
    model.script({ text: "kept for later" });
    const long = "x".repeat(80); // 20 tokens
    const openai = await chat({ stream: true, messages: [{ role: "user", content: long }] });
    assert.equal(openai.status, 400);
    const refusal = await openai.json();
    assert.equal(refusal.error.code, "context_length_exceeded");
    assert.equal(refusal.error.type, "invalid_request_error");
    assert.match(refusal.error.message, /^This model's maximum context length is 10 tokens\. However, your messages resulted in 20 tokens/);
    const anthropic = await messages({ model: "m", max_tokens: 64, stream: true, messages: [{ role: "user", content: long }] });
    assert.equal(anthropic.status, 400);
    assert.deepEqual(await anthropic.json(), { type: "error", error: { type: "invalid_request_error", message: "prompt is too long: 20 tokens > 10 maximum" } });
    assert.equal(model.unconsumed(), 1, "no script was taken");
    const records = model.requests();
    assert.deepEqual(records.map((r) => [r.outcome, r.tokens]), [["too_long", 20], ["too_long", 20]]);
    // Within the limit: answered, its size recorded.
    const short = await chat({ stream: true, messages: [{ role: "user", content: "x".repeat(40) }] });
    assert.equal(short.status, 200);
    assert.equal(contentOf(await sse(short)), "kept for later");
    assert.equal(model.requests().at(-1).tokens, 10);
  } finally {
    model.setContextLimit(null);
  }
  assert.throws(() => model.setContextLimit(0), TypeError);
});
