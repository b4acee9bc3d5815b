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
