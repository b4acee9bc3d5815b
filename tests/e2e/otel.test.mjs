// OpenTelemetry traces (issue 38 item 5; src/trace.rs, src/host/traces.rs):
// each turn is one trace of GenAI semantic-convention spans exported as
// OTLP/HTTP JSON to the endpoint `telemetry()` names, through the host
// work lane. The receiver (tests/support/otlp-receiver.mjs) is a real HTTP
// server decoding every request with the published proto and the OTLP/JSON
// rules, strictly, and checking it against the official encoder
// (@opentelemetry/otlp-transformer). Fixture: tests/e2e/fixtures/otel-worker.mjs.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startOtlpReceiver } from "../support/otlp-receiver.mjs";
import { MODEL_NAME, eventually, expectStatus, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({ fixture: "otel-worker", model: "echo", persist: true });
/** The fixture's bearer header value's token (otel-worker.mjs). */
const OTLP_TOKEN = "otlp-bearer-3f9c2e7a1d";
let receiver;
before(async () => {
  receiver = await startOtlpReceiver();
});
after(() => receiver.close());

const T = { timeout: 60_000 };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A fresh Agent whose telemetry goes to the receiver (or nowhere). */
async function agent({ traced = true } = {}) {
  const a = h.agent();
  const query = traced ? `?endpoint=${encodeURIComponent(receiver.origin)}` : "";
  expectStatus(await h.api("POST", `/direct/${a.id}/host/otel/config${query}`, {}), 200);
  await a.createSession("s");
  return a;
}

/** The spans of `traceId` received so far, by name. */
const ofTrace = (traceId) => receiver.spans().filter((s) => s.traceId === traceId);

/** Waits for the trace of the turn whose turn span carries `commandId`, complete with `count` spans. */
function trace(commandId, count) {
  return eventually(() => {
    const root = receiver.spans().find((s) => s.name === "invoke_agent" && s.attributes["shiitake.command.id"] === commandId);
    if (root === undefined) return undefined;
    const spans = ofTrace(root.traceId);
    return spans.length >= count ? { root, spans } : undefined;
  }, { what: `the trace of ${commandId} (${count} spans)`, timeoutMs: 15_000 });
}

const patch = { toolCalls: [{ name: "apply_patch", arguments: { patch: "*** Begin Patch SECRET-ARGUMENT" } }], usage: { prompt_tokens: 40, completion_tokens: 7 } };

test("a tool turn is one trace: the turn span, two chat spans and one execute_tool span, with the GenAI attributes, no content and no secret", T, async () => {
  const a = await agent();
  const tag = uniq("otel-tool");
  h.model.scriptFor(tag, patch, { text: "PATCHED-ANSWER", usage: { prompt_tokens: 60, completion_tokens: 9 } });
  const settled = await a.settle("s", "r1", `patch it ${tag} PROMPT-TEXT`, { boundMs: 20_000 });
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  const { root, spans } = await trace(settled.commandId, 4);
  await sleep(300);
  assert.equal(ofTrace(root.traceId).length, 4, "no span twice, no other span");
  assert.deepEqual(receiver.rejected(), [], "every request decodes");
  const byName = (name) => spans.filter((s) => s.name === name);
  const chats = byName(`chat ${MODEL_NAME}`).sort((x, y) => Number(x.start - y.start));
  const [tool] = byName("execute_tool apply_patch");
  assert.equal(chats.length, 2);
  assert.ok(tool);
  // The turn span is the root; every other span is its child.
  assert.equal(root.parentSpanId, undefined);
  for (const s of [...chats, tool]) assert.equal(s.parentSpanId, root.spanId, `${s.name}'s parent`);
  assert.equal(new Set(spans.map((s) => s.spanId)).size, 4);
  // Kinds (CLIENT for the model calls) and timing: the calls nest in the turn, in order.
  assert.deepEqual([root.kind, chats[0].kind, tool.kind, chats[1].kind], [1, 3, 1, 3]);
  assert.ok(root.start <= chats[0].start && chats[0].end <= tool.start && tool.end <= chats[1].start && chats[1].end <= root.end, "nested in order");
  // The GenAI attributes.
  assert.deepEqual(root.attributes, {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.conversation.id": "s",
    "shiitake.command.id": settled.commandId,
    "shiitake.turn.outcome": "completed",
    "gen_ai.usage.input_tokens": settled.usage.inputTokens,
    "gen_ai.usage.output_tokens": settled.usage.outputTokens,
  });
  assert.deepEqual(chats.map((c) => [c.attributes["gen_ai.usage.input_tokens"], c.attributes["gen_ai.usage.output_tokens"]]), [[40, 7], [60, 9]]);
  assert.equal(settled.usage.inputTokens, 100);
  for (const c of chats) {
    assert.equal(c.attributes["gen_ai.operation.name"], "chat");
    assert.equal(c.attributes["gen_ai.provider.name"], "openai");
    assert.equal(c.attributes["gen_ai.request.model"], MODEL_NAME);
    assert.equal(c.status, undefined);
  }
  assert.deepEqual(chats.map((c) => c.attributes["gen_ai.response.finish_reasons"]), [["tool_calls"], ["stop"]]);
  assert.equal(tool.attributes["gen_ai.operation.name"], "execute_tool");
  assert.equal(tool.attributes["gen_ai.tool.name"], "apply_patch");
  assert.match(tool.attributes["gen_ai.tool.call.id"], /\S/);
  assert.equal(spans[0].resource["service.name"], "shiitake");
  // What went over the wire: the configured header, and no secret or content.
  const requests = receiver.requests().filter((r) => r.raw.includes(root.traceId));
  assert.ok(requests.length >= 1);
  for (const r of requests) {
    assert.equal(r.headers.authorization, `Bearer ${OTLP_TOKEN}`);
    for (const secret of [h.modelApiKey, OTLP_TOKEN, "PROMPT-TEXT", "PATCHED-ANSWER", "SECRET-ARGUMENT"]) {
      assert.ok(!r.raw.includes(secret), `${secret} is not in an exported byte`);
    }
  }
});

test("a receiver that fails, then recovers, gets every span once (retried with the lane's backoff)", T, async () => {
  const a = await agent();
  const tag = uniq("otel-retry");
  receiver.failNext(2);
  const failedBefore = receiver.requests().filter((r) => r.status === 503).length;
  h.model.scriptFor(tag, patch, { text: "done" });
  const settled = await a.settle("s", "r1", `retry ${tag}`, { boundMs: 20_000 });
  const { root } = await trace(settled.commandId, 4);
  await sleep(800);
  const spans = ofTrace(root.traceId);
  assert.equal(spans.length, 4, "each span once");
  assert.equal(new Set(spans.map((s) => s.spanId)).size, 4);
  const failed = receiver.requests().filter((r) => r.status === 503);
  assert.equal(failed.length - failedBefore, 2, "two refused requests, then the retry succeeded");
  const accepted = receiver.requests().find((r) => r.status === 200 && r.raw.includes(root.traceId));
  assert.ok(accepted.at - failed.at(-1).at >= 150, "the retry waited the lane's backoff");
});

test("a turn resumed after a restart mid-turn continues its trace", T, async () => {
  const a = await agent();
  const tag = uniq("otel-restart");
  h.model.scriptFor(tag, patch, { hang: true, chunks: ["PARTIAL "] }, { text: "after the restart" });
  const id = await a.admit("s", "r1", `resume ${tag}`);
  await h.model.waitFor(() => (h.model.requests(tag)[1]?.chunksSent ?? -1) >= 1, { timeoutMs: 15_000, what: "the second model call streaming" });
  await h.restart();
  const settled = await a.waitSettled("s", id, { boundMs: 20_000 });
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  const { root, spans } = await trace(id, 4);
  await sleep(300);
  // The calls before the restart (the first chat, the tool) and after (the
  // last chat) are one trace under one turn span; the interrupted call,
  // which ended nowhere, has no span.
  const names = ofTrace(root.traceId).map((s) => s.name).sort();
  assert.deepEqual(names, [`chat ${MODEL_NAME}`, `chat ${MODEL_NAME}`, "execute_tool apply_patch", "invoke_agent"]);
  for (const s of spans) if (s !== root) assert.equal(s.parentSpanId, root.spanId);
});

test("without telemetry() no span is recorded or sent", T, async () => {
  const a = await agent({ traced: false });
  const before = receiver.requests().length;
  const tag = uniq("otel-none");
  h.model.scriptFor(tag, patch, { text: "done" });
  const settled = await a.settle("s", "r1", `untraced ${tag}`, { boundMs: 20_000 });
  assert.equal(settled.terminal, "completed");
  await sleep(500);
  assert.equal(receiver.requests().length, before, "nothing sent");
  const tables = (await h.api("GET", `/direct/${a.id}/host/otel/tables`)).json;
  assert.ok(!tables.includes("shiitake_spans"), `no span table: ${tables}`);
});

test("a bad telemetry() records nothing and fails no turn", T, async () => {
  const a = h.agent();
  expectStatus(await h.api("POST", `/direct/${a.id}/host/otel/config?endpoint=${encodeURIComponent("ftp://not-http")}`, {}), 200);
  await a.createSession("s");
  const settled = await a.settle("s", "r1", `bad telemetry ${uniq("otel-bad")}`, { boundMs: 20_000 });
  assert.equal(settled.terminal, "completed");
  const tables = (await h.api("GET", `/direct/${a.id}/host/otel/tables`)).json;
  assert.ok(!tables.includes("shiitake_spans"), `no span table: ${tables}`);
});

test("the Node host exports the same trace, configured by SHIITAKE_OTLP_ENDPOINT", T, async () => {
  const { mkdtemp, rm } = await import("node:fs/promises");
  const { tmpdir } = await import("node:os");
  const path = await import("node:path");
  const { openNodeShiitake } = await import("../../js/node.mjs");
  const dir = await mkdtemp(path.join(tmpdir(), "shiitake-otel-node-"));
  const host = await openNodeShiitake({
    path: path.join(dir, "agent.sqlite"),
    env: { SHIITAKE_MODEL: `openai/${MODEL_NAME}`, OPENAI_BASE_URL: h.model.url, OPENAI_API_KEY: h.modelApiKey, SHIITAKE_OTLP_ENDPOINT: receiver.origin },
  });
  try {
    const send = async (method, rel, body) => {
      const res = await host.app.fetch(new Request(`http://node.test${rel}`, { method, headers: { "content-type": "application/json" }, body: body && JSON.stringify(body) }));
      return res.json();
    };
    await send("POST", "/sessions", { sessionId: "s" });
    const tag = uniq("otel-node");
    h.model.scriptFor(tag, patch, { text: "done on node" });
    const { commandId } = await send("POST", "/sessions/s/commands", { type: "prompt", requestId: "r1", text: `node ${tag}` });
    const settled = await send("GET", `/sessions/s/settlement?commandId=${commandId}&timeoutMs=20000`);
    assert.equal(settled.terminal, "completed", JSON.stringify(settled));
    const { root, spans } = await trace(commandId, 4);
    // The Node host offers no tool: the model's call is answered as not
    // offered, without running; its execute_tool span ends there, failed.
    assert.deepEqual(spans.map((s) => s.name).sort(), [`chat ${MODEL_NAME}`, `chat ${MODEL_NAME}`, "execute_tool apply_patch", "invoke_agent"]);
    for (const s of spans) if (s !== root) assert.equal(s.parentSpanId, root.spanId);
    const refused = spans.find((s) => s.name === "execute_tool apply_patch");
    assert.equal(refused.attributes["error.type"], "tool_error");
    assert.equal(refused.status?.code, 2, "an error status");
    const chats = spans.filter((s) => s.name.startsWith("chat ")).sort((x, y) => Number(x.start - y.start));
    assert.ok(chats[0].end <= refused.start && refused.end <= chats[1].start, "between the two model calls");
    assert.ok(!receiver.requests().some((r) => r.raw.includes(h.modelApiKey)));
  } finally {
    await host.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("the receiver decodes valid OTLP/JSON the official encoder agrees with, and refuses a malformed body naming the problem", T, async () => {
  const own = await startOtlpReceiver();
  try {
    const post = async (body) => {
      const res = await fetch(`${own.origin}/v1/traces`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: res.status, text: await res.text() };
    };
    const TRACE = "5B8EFFF798038103D269B633813FC60C";
    // Valid OTLP/JSON beyond what the runtime sends: ids in upper-case hex,
    // an event, a link, every attribute value type, a remote parent, a status.
    const span = () => ({
      traceId: TRACE,
      spanId: "EEE19B7EC3C1B174",
      parentSpanId: "EEE19B7EC3C1B173",
      traceState: "k=v",
      flags: 0x301,
      name: "valid",
      kind: 2,
      startTimeUnixNano: "1544712660000000000",
      endTimeUnixNano: "1544712661000000000",
      attributes: [
        { key: "s", value: { stringValue: "x" } },
        { key: "i", value: { intValue: 7 } },
        { key: "d", value: { doubleValue: 0.5 } },
        { key: "b", value: { boolValue: true } },
        { key: "raw", value: { bytesValue: "AQID" } },
        { key: "list", value: { arrayValue: { values: [{ stringValue: "a" }, { intValue: "2" }] } } },
        { key: "map", value: { kvlistValue: { values: [{ key: "k", value: { stringValue: "v" } }] } } },
      ],
      events: [{ timeUnixNano: "1544712660500000000", name: "e", attributes: [{ key: "n", value: { intValue: "1" } }] }],
      links: [{ traceId: TRACE, spanId: "EEE19B7EC3C1B172", attributes: [], flags: 0x101 }],
      status: { code: 1 },
    });
    const body = (mutate = () => {}) => {
      const s = span();
      mutate(s);
      return { resourceSpans: [{ resource: { attributes: [{ key: "service.name", value: { stringValue: "t" } }] }, scopeSpans: [{ scope: { name: "t", version: "1" }, spans: [s] }] }] };
    };
    const ok = await post(body());
    assert.equal(ok.status, 200, ok.text);
    const [decoded] = own.spans();
    assert.equal(decoded.traceId, TRACE.toLowerCase());
    assert.equal(decoded.parentSpanId, "eee19b7ec3c1b173");
    assert.equal(decoded.kind, 2);
    assert.equal(decoded.end - decoded.start, 1_000_000_000n);
    assert.deepEqual({ ...decoded.attributes, raw: [...decoded.attributes.raw] }, { s: "x", i: 7, d: 0.5, b: true, raw: [1, 2, 3], list: ["a", 2], map: { k: "v" } });
    assert.deepEqual(decoded.resource, { "service.name": "t" });
    // Each malformed body is a 400 whose text names the problem.
    const base64Id = Buffer.from(TRACE, "hex").toString("base64");
    const cases = [
      ["a base64 traceId", (s) => (s.traceId = base64Id), /traceId: 16 bytes in hex/],
      ["a short spanId", (s) => (s.spanId = "eee19b7e"), /spanId: 8 bytes in hex/],
      ["no spanId", (s) => delete s.spanId, /spanId: 8 bytes, not all zero/],
      ["an all-zero traceId", (s) => (s.traceId = "0".repeat(32)), /traceId: 16 bytes, not all zero/],
      ["an unknown field", (s) => (s.startTimeUnixNanos = s.startTimeUnixNano), /unknown field: "startTimeUnixNanos"/],
      ["a proto field name", (s) => (s.start_time_unix_nano = s.startTimeUnixNano), /lowerCamelCase/],
      ["an enum by name", (s) => (s.kind = "SPAN_KIND_CLIENT"), /an integer of SpanKind/],
      ["an unknown enum value", (s) => (s.kind = 9), /an integer of SpanKind/],
      ["a fractional int64", (s) => (s.attributes[1].value.intValue = 1.5), /not an integer/],
      ["a time that is not a number", (s) => (s.endTimeUnixNano = "soon"), /invalid integer/],
      ["two values in one AnyValue", (s) => (s.attributes[0].value.intValue = "1"), /multiple values for oneof/],
      ["a span ending before it starts", (s) => (s.endTimeUnixNano = "1"), /ends after it starts/],
      ["an attribute key twice", (s) => s.attributes.push({ key: "s", value: { stringValue: "y" } }), /official serializer sends another request for these spans: .*attributes\.0\.value\.stringValue: "x", the serializer's "y"$/],
      ["a string where a list goes", (s) => (s.attributes = "s=x"), /expected array/],
    ];
    for (const [what, mutate, message] of cases) {
      const res = await post(body(mutate));
      assert.equal(res.status, 400, `${what}: ${res.text}`);
      assert.match(res.text, message, what);
    }
    assert.equal(own.rejected().length, cases.length);
    assert.equal(own.spans().length, 1);
  } finally {
    await own.close();
  }
});
