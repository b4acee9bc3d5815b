// Compaction (docs/http.md "Compaction") in a real Durable Object: a
// `compact` command queued like a prompt, automatic compaction at a stated
// context window, and a provider's refusal as too long compacting once,
// over both wire formats of the scripted model server, which records what
// every model request held and refuses past its context limit as each
// provider does.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { createShiitakeClient } from "../../js/client.mjs";
import { TOKEN, MODEL_NAME, uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 60_000 };

/** The text of a recorded request's message (OpenAI string content or Anthropic blocks). */
const textOf = (m) => (typeof m.content === "string" ? m.content : m.content.filter((b) => b.type === "text").map((b) => b.text).join(""));
/** The messages of a recorded request, system prompt aside. */
const turnMessages = (r) => r.body.messages.filter((m) => m.role !== "system");
/** A recorded request's system prompt. */
const systemOf = (r) => textOf(r.api === "anthropic" ? { content: r.body.system } : r.body.messages.find((m) => m.role === "system"));
const FRAMING = "[This conversation was compacted: the summary below stands for its earlier messages.]";
const framed = (summary) => `${FRAMING}\n\n<summary>\n${summary}\n</summary>`;

/** Admits a compaction; its commandId. */
async function compact(a, sid, requestId, instructions) {
  const res = await a.command(sid, { type: "compact", requestId, ...(instructions === undefined ? {} : { instructions }) });
  assert.equal(res.status, 200, JSON.stringify(res.json));
  return res.json.commandId;
}

describe("a compact command", () => {
  const h = useWorker({ model: "echo" });

  test("later requests hold the summary and not the messages it stands for; the read keeps both", T, async () => {
    const a = h.agent();
    const sid = await a.createSession("s");
    const tag = uniq("first");
    const first = await a.settle(sid, "p1", `${tag} the first question`);
    assert.equal(first.terminal, "completed");
    const instructions = `${uniq("inst")} keep the question`;
    h.model.scriptFor(instructions, { text: "SUMMARY: asked the first question", usage: { prompt_tokens: 70, completion_tokens: 9 } });
    const commandId = await compact(a, sid, "c1", instructions);
    const settled = await a.waitSettled(sid, commandId);
    assert.deepEqual(
      { terminal: settled.terminal, answer: settled.answer, usage: settled.usage, toolCallCount: settled.toolCallCount },
      { terminal: "completed", answer: null, usage: { inputTokens: 70, outputTokens: 9 }, toolCallCount: 0 },
    );
    // The summary call: the default compaction prompt, the transcript as
    // text, the instructions; no tools.
    const [summaryCall] = h.model.requests(instructions);
    assert.match(systemOf(summaryCall), /^You compact a conversation/);
    const request = textOf(turnMessages(summaryCall)[0]);
    assert.ok(request.includes(`[user] ${tag} the first question`), request);
    assert.ok(request.includes(`[assistant] Echo: ${tag} the first question`), request);
    assert.ok(request.endsWith(`Instructions for this summary: ${instructions}`), request);
    assert.equal(summaryCall.body.tools, undefined);

    const next = uniq("next");
    assert.equal((await a.settle(sid, "p2", `${next} and now?`)).terminal, "completed");
    const [call] = h.model.requests(next);
    assert.deepEqual(
      turnMessages(call).map((m) => [m.role, textOf(m)]),
      [
        ["user", framed("SUMMARY: asked the first question")],
        ["user", `${next} and now?`],
      ],
    );
    assert.ok(!JSON.stringify(call.body).includes(tag), "no summarised message is sent");

    const { messages } = await a.read(sid);
    assert.deepEqual(
      messages.map((m) => m.role),
      ["user", "assistant", "compaction", "user", "assistant"],
    );
    const entry = messages[2];
    assert.equal(entry.text, "SUMMARY: asked the first question");
    assert.equal(entry.commandId, commandId);
    assert.equal(entry.instructions, instructions);
    assert.deepEqual(entry.compacted, { from: messages[0].entryId, through: messages[1].entryId, messages: 2, trigger: "command" });
    assert.deepEqual(entry.usage, { inputTokens: 70, outputTokens: 9 });
    assert.equal(messages[0].text, `${tag} the first question`, "the summarised messages stay readable");
  });

  test("it queues FIFO, latestPending never answers it, a steer never joins it, and it is cancelled like queued work", T, async () => {
    const a = h.agent();
    const sid = await a.createSession("s");
    const tag = uniq("held");
    h.model.scriptFor(tag, { text: "released", gate: tag });
    const running = await a.admit(sid, "p1", `${tag} hold on`);
    await a.waitRunning(sid, running);
    const c1 = await compact(a, sid, "c1", "short");
    const latest = async () => (await a.api("GET", `/sessions/${sid}/pending/latest`)).json;
    assert.equal(await latest(), null, "a compaction is never the latest pending prompt");
    const steer = await a.admit(sid, "p2", `${tag} steer`, { delivery: "steer" });
    assert.equal((await latest()).commandId, steer);
    const page = await a.read(sid);
    assert.deepEqual(
      page.pending.map((p) => [p.commandId, p.type, p.text, p.position]),
      [
        [c1, "compact", "short", 1],
        [steer, undefined, `${tag} steer`, 2],
      ],
    );
    // Replays answer the receipt; other input under the requestId conflicts.
    assert.equal((await a.command(sid, { type: "compact", requestId: "c1", instructions: "short" })).json.commandId, c1);
    assert.equal((await a.command(sid, { type: "compact", requestId: "c1" })).status, 409);
    const cancelled = await a.cancel(sid, c1);
    assert.deepEqual(cancelled.json, { status: "cancelled", commandId: c1, text: "short" });
    h.model.release(tag);
    assert.equal((await a.waitSettled(sid, running)).terminal, "completed");
    assert.equal((await a.waitSettled(sid, c1)).terminal, "cancelled");
    assert.ok(!(await a.read(sid)).messages.some((m) => m.role === "compaction"));
    // Refusals name the field.
    const bad = await a.command(sid, { type: "compact", requestId: "c2", text: "x" });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /text/);
  });

  test("on a branched transcript: it summarises the selected branch; a retry or an edit after it is cut by it, a path leaving before it is not", T, async () => {
    const a = h.agent();
    const sid = await a.createSession("s");
    const tag = uniq("brc");
    await a.settle(sid, "p1", `${tag} one`);
    await a.settle(sid, "p2", `${tag} two`);
    // An edit after the first answer: branch B beside A (two).
    const [one, reOne, two] = (await a.read(sid)).messages;
    const deux = await a.admit(sid, "p3", `${tag} deux`, { after: reOne.entryId });
    assert.equal((await a.waitSettled(sid, deux)).terminal, "completed");
    const instructions = `${uniq("inst")} branch B`;
    h.model.scriptFor(instructions, { text: "SUMMARY of B" });
    const c1 = await compact(a, sid, "c1", instructions);
    assert.equal((await a.waitSettled(sid, c1)).terminal, "completed");
    const summaryRequest = textOf(turnMessages(h.model.requests(instructions)[0])[0]);
    assert.ok(summaryRequest.includes(`[user] ${tag} deux`), summaryRequest);
    assert.ok(!summaryRequest.includes(`${tag} two`), "the other branch is not summarised");
    let page = (await a.read(sid)).messages;
    assert.deepEqual(page.map((m) => m.role), ["user", "assistant", "user", "assistant", "compaction"]);
    const reDeux = page[3];
    assert.deepEqual(page[4].compacted, { from: one.entryId, through: reDeux.entryId, messages: 4, trigger: "command" });
    assert.equal(page[4].parentEntryId, reDeux.entryId);
    // B's next turn, then a retry of it: both see the summary, then the prompt.
    await a.settle(sid, "p4", `${tag} three`);
    const three = (await a.read(sid)).messages.at(-2);
    h.model.scriptFor(`${tag} three`, { text: "a second answer" });
    const retry = await a.command(sid, { type: "retry", requestId: "r1", entryId: three.entryId });
    assert.equal(retry.status, 200, JSON.stringify(retry.json));
    assert.equal((await a.waitSettled(sid, retry.json.commandId)).terminal, "completed");
    const [first, again] = h.model.requests(`${tag} three`).map((r) => turnMessages(r).map(textOf));
    assert.deepEqual(first, [framed("SUMMARY of B"), `${tag} three`]);
    assert.deepEqual(again, first, "the retry is cut by the compaction on its path");
    page = (await a.read(sid)).messages;
    assert.deepEqual(page.slice(-2).map((m) => m.text), [`${tag} three`, "a second answer"]);
    assert.deepEqual(page.at(-1).branch, { index: 2, count: 2 });
    // An edit after the retried answer continues after the summary too.
    const four = await a.admit(sid, "p5", `${tag} four`, { after: page.at(-1).entryId });
    await a.waitSettled(sid, four);
    assert.deepEqual(turnMessages(h.model.requests(`${tag} four`).at(-1)).map(textOf), [
      framed("SUMMARY of B"),
      `${tag} three`,
      "a second answer",
      `${tag} four`,
    ]);
    // An edit before the compaction leaves its path: the whole context.
    const edit = await a.admit(sid, "p6", `${tag} TWO`, { after: reOne.entryId });
    await a.waitSettled(sid, edit);
    assert.deepEqual(turnMessages(h.model.requests(`${tag} TWO`).at(-1)).map(textOf), [
      `${tag} one`,
      `Echo: ${tag} one`,
      `${tag} TWO`,
    ]);
    // Back on A: not cut by B's compaction either.
    const select = await a.command(sid, { type: "select", requestId: "sel", entryId: two.entryId });
    assert.equal(select.status, 200, JSON.stringify(select.json));
    await a.settle(sid, "p7", `${tag} five`);
    assert.deepEqual(turnMessages(h.model.requests(`${tag} five`).at(-1)).map(textOf), [
      `${tag} one`,
      `Echo: ${tag} one`,
      `${tag} two`,
      `Echo: ${tag} two`,
      `${tag} five`,
    ]);
  });

  test("the typed client compacts and reads the entry back", T, async () => {
    const agentId = h.agent().id;
    const fetch = (url, init) => h.mf.dispatchFetch(url, { ...init, headers: { ...init.headers, authorization: `Bearer ${TOKEN}` } });
    const client = createShiitakeClient({ baseUrl: `http://localhost/agents/${agentId}`, fetch });
    const { sessionId } = await client.createSession("s");
    const session = client.session(sessionId);
    const { commandId: p1 } = await session.prompt("hello there");
    await session.readSettlement(p1, { timeoutMs: 20_000 });
    const receipt = await session.compact({ instructions: uniq("client") });
    assert.equal(receipt.status, "accepted");
    assert.equal(typeof receipt.requestId, "string");
    const settled = await session.readSettlement(receipt.commandId, { timeoutMs: 20_000 });
    assert.equal(settled.terminal, "completed");
    const { messages } = await session.read();
    assert.equal(messages.at(-1).role, "compaction");
    client.close();
  });
});

describe("automatic compaction at a stated window", () => {
  const WINDOW = 4_000;
  const PROMPT = "Summarise tersely; keep every name.";
  const h = useWorker({
    model: "echo",
    bindings: { SHIITAKE_CONTEXT_WINDOWS: `openai/${MODEL_NAME}=${WINDOW}`, SHIITAKE_COMPACTION_TRIGGER: "0.8", SHIITAKE_COMPACTION_PROMPT: PROMPT },
  });

  test("a turn whose estimated input passes 0.8 of the window compacts first; no request passes the window", T, async () => {
    h.model.setContextLimit(WINDOW);
    try {
      const a = h.agent();
      const sid = await a.createSession("s");
      const tag = uniq("big");
      // About 2,000 tokens in and 2,000 out (the echo): the next call
      // estimates past 3,200.
      assert.equal((await a.settle(sid, "p1", `${tag} ${"x".repeat(8_000)}`)).terminal, "completed");
      const next = uniq("next");
      assert.equal((await a.settle(sid, "p2", `${next} go on`)).terminal, "completed");
      const calls = h.model.requests(next);
      assert.equal(calls.length, 2, "the summary call, then the turn's");
      assert.equal(systemOf(calls[0]), PROMPT, "the host's compaction prompt");
      assert.deepEqual(
        turnMessages(calls[1]).map((m) => m.role),
        ["user", "user"],
      );
      assert.ok(textOf(turnMessages(calls[1])[0]).startsWith(FRAMING));
      for (const r of h.model.requests()) {
        assert.ok(r.tokens <= WINDOW && r.outcome !== "too_long", JSON.stringify({ seq: r.seq, tokens: r.tokens, outcome: r.outcome }));
      }
      const { messages } = await a.read(sid);
      assert.deepEqual(
        messages.map((m) => m.role),
        ["user", "assistant", "user", "compaction", "assistant"],
      );
      assert.equal(messages[3].compacted.trigger, "window");
      assert.equal(messages[3].compacted.through, messages[2].entryId);
      // The turn's usage counts its summary call.
      const settled = await a.waitSettled(sid, messages[2].commandId);
      assert.equal(settled.usage.inputTokens, calls[0].tokens + calls[1].tokens);
    } finally {
      h.model.setContextLimit(null);
    }
  });
});

describe("the window, trigger and prompt a host's models() states", () => {
  const h = useWorker({ fixture: "models-worker", model: { provider: "both", fallback: "echo" } });

  test("replace the env's: the turn compacts at half the window with the host's prompt; a bad window fails turns naming it", T, async () => {
    const a = h.agent(`windowed-${randomUUID()}`);
    const sid = await a.createSession("s");
    // About 1,500 tokens in and 1,500 out: past 2,000 at the next call.
    assert.equal((await a.settle(sid, "p1", `${uniq("big")} ${"x".repeat(6_000)}`)).terminal, "completed");
    const next = uniq("next");
    assert.equal((await a.settle(sid, "p2", `${next} go on`)).terminal, "completed");
    const calls = h.model.requests(next);
    assert.equal(systemOf(calls[0]), "Summarise for the windowed host.");
    assert.ok(textOf(turnMessages(calls[1])[0]).startsWith(FRAMING));

    const bad = h.agent(`badwindow-${randomUUID()}`);
    const badSid = await bad.createSession("s");
    const settled = await bad.settle(badSid, "p1", "hello");
    assert.equal(settled.terminal, "failed");
    assert.match(settled.diagnostic, /models\(\)\.contextWindows: the context window of `openai\/scripted-e2e`: 1024 to 100000000 tokens, got 10/);
  });
});

for (const provider of ["openai", "anthropic"]) {
  describe(`a refusal as too long (${provider})`, () => {
    const h = useWorker({ model: { provider, fallback: "echo" } });

    test("compacts and makes the call once more", T, async () => {
      const a = h.agent();
      const sid = await a.createSession("s");
      const tag = uniq("long");
      assert.equal((await a.settle(sid, "p1", `${tag} ${"y".repeat(6_000)}`)).terminal, "completed");
      // The turn's request (about 3,000 tokens) is refused; the summary
      // call (its messages cut to about 4 KiB each) and the retry fit.
      h.model.setContextLimit(2_500);
      h.model.scriptFor("You compact a conversation", { text: "the user sent a long line" });
      try {
        const next = uniq("next");
        assert.equal((await a.settle(sid, "p2", `${next} short`)).terminal, "completed");
        const calls = h.model.requests(next);
        assert.deepEqual(
          calls.map((r) => r.outcome),
          ["too_long", "completed", "completed"],
        );
        assert.match(systemOf(calls[1]), /^You compact a conversation/);
        assert.equal(textOf(turnMessages(calls[2])[0]), framed("the user sent a long line"));
        assert.ok(!JSON.stringify(calls[2].body).includes(tag));
        const { messages } = await a.read(sid);
        assert.deepEqual(
          messages.map((m) => m.role),
          ["user", "assistant", "user", "compaction", "assistant"],
        );
        assert.equal(messages[3].compacted.trigger, "refusal");
      } finally {
        h.model.setContextLimit(null);
      }
    });

    test("a second refusal fails the turn as before", T, async () => {
      const a = h.agent();
      const sid = await a.createSession("s");
      assert.equal((await a.settle(sid, "p1", "hello")).terminal, "completed");
      // A prompt the window cannot hold even after compaction (the summary
      // call reads it cut to about 4 KiB and fits).
      h.model.setContextLimit(2_000);
      h.model.scriptFor("You compact a conversation", { text: "the user said hello" });
      try {
        const next = uniq("huge");
        const settled = await a.settle(sid, "p2", `${next} ${"z".repeat(12_000)}`);
        assert.equal(settled.terminal, "failed");
        assert.match(settled.diagnostic, provider === "openai" ? /maximum context length is 2000 tokens/ : /prompt is too long/);
        assert.deepEqual(
          h.model.requests(next).map((r) => r.outcome),
          ["too_long", "completed", "too_long"],
        );
        assert.equal((await a.read(sid)).messages.filter((m) => m.role === "compaction").length, 1);
      } finally {
        h.model.setContextLimit(null);
      }
    });
  });
}
