// A tool step that ended is closed for good: when a turn settles with calls
// still open (cancelled mid-`execute`, interrupted at the attempt limit), each call gets one `tool` message saying how it ended,
// and every later model request pairs each call with exactly one result right
// after its step, so the Session's later tool turns reach the model with
// their real results. Run against both wire formats; the scripted model
// server refuses (400 invalid_request_error) any request the real provider
// would, so a malformed context fails the turn that sent it. Fixture:
// tests/e2e/fixtures/tools-worker.mjs (`notes.hang` waits for its abort
// signal, replay-safe).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { contentText, startModelServer } from "../support/model-server.mjs";
import { MODEL_PROVIDERS, eventually, execute, expectStatus, kind, uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 60_000 };
const CANCELLED = "cancelled: the turn was cancelled before this call finished";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * What a model request carried, in either wire format, as one entry per
 * item: ["user" | "assistant", text], ["calls", [ids]], ["result", id, text,
 * isError] (Chat Completions has no error flag: the runtime prefixes the text
 * with "Error: ").
 */
function items(req) {
  const out = [];
  for (const m of req.body.messages) {
    if (m.role === "system") continue;
    if (req.api === "openai") {
      if (m.role === "tool") {
        const text = contentText(m.content);
        const isError = text.startsWith("Error: ");
        out.push(["result", m.tool_call_id, isError ? text.slice("Error: ".length) : text, isError]);
      }
      else if (m.tool_calls) {
        if (contentText(m.content) !== "") out.push([m.role, contentText(m.content)]);
        out.push(["calls", m.tool_calls.map((c) => c.id)]);
      } else out.push([m.role, contentText(m.content)]);
      continue;
    }
    const blocks = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
    const uses = blocks.filter((b) => b.type === "tool_use").map((b) => b.id);
    for (const b of blocks) {
      if (b.type === "tool_result") out.push(["result", b.tool_use_id, contentText(b.content), b.is_error === true]);
      else if (b.type === "text") out.push([m.role, b.text]);
    }
    if (uses.length > 0) out.push(["calls", uses]);
  }
  return out;
}

/** The entries right after the step that made call `callId`: that step, then its results. */
function stepOf(req, callId) {
  const all = items(req);
  const at = all.findIndex((e) => e[0] === "calls" && e[1].includes(callId));
  assert.ok(at >= 0, `call ${callId} is not in the request: ${JSON.stringify(all)}`);
  const calls = all[at][1];
  return { calls, results: all.slice(at + 1, at + 1 + calls.length), after: all.slice(at + 1 + calls.length) };
}

// Each wire format on its own ("both" runs the OpenAI one with Anthropic signed in beside it).
for (const provider of MODEL_PROVIDERS.filter((p) => p !== "both")) {
  describe(provider, () => {
    const h = useWorker({ fixture: "tools-worker", model: { fallback: "echo", provider }, persist: true, bindings: { SHIITAKE_ATTEMPTS_MAX: 2 } });

    const transcript = async (a, sid) => (await a.read(sid, { limit: 200 })).messages;
    const probe = async (a) => (await h.api("GET", `/direct/${a.id}/host/probe`)).json.map((r) => r.op);

    /**
     * Runs `turns` more tool turns in the Session, each computing a fresh
     * value in `execute`; asserts the model received each real result right
     * after its call (and the earlier `callId` still answered by the `tool`
     * message `earlier`), in requests the provider accepts. Returns the last
     * follow-up request.
     */
    async function laterToolTurns(a, sid, { callId, earlier, turns = 2 }) {
      let last;
      for (let n = 1; n <= turns; n++) {
        const tag = uniq(`later-${n}`);
        h.model.scriptFor(tag, execute(`return ${n} + ${n};`), { text: `it is ${2 * n}` });
        const id = await a.admit(sid, `later-${n}`, `what is ${n} + ${n}? ${tag}`);
        const s = await a.waitSettled(sid, id, { boundMs: 20_000 });
        const reqs = h.model.requests(tag);
        for (const r of reqs) assert.equal(r.error, undefined, `refused: ${r.error}: ${JSON.stringify(items(r))}`);
        assert.equal(s.terminal, "completed", JSON.stringify(s));
        assert.equal(s.answer, `it is ${2 * n}`);
        assert.equal(s.toolCallCount, 1);
        assert.equal(reqs.length, 2, "the call, then its result");
        const messages = await transcript(a, sid);
        const call = messages.filter((m) => m.commandId === id && m.toolCalls).at(-1).toolCalls[0];
        const mine = stepOf(reqs[1], call.id);
        assert.deepEqual(mine.results, [["result", call.id, String(2 * n), false]], "the real result reached the model");
        assert.deepEqual(mine.after, [], "nothing after the newest results");
        // The ended call keeps its one result, right after its step.
        const old = stepOf(reqs[1], callId);
        assert.deepEqual(old.results.find((r) => r[1] === callId), ["result", callId, earlier.text, earlier.isError === true]);
        assert.equal(old.results.length, old.calls.length);
        last = reqs[1];
      }
      return last;
    }

    test("cancel mid-execute: the call ends `cancelled` for good; later tool turns get their real results", T, async () => {
      const tag = uniq("cancel-execute");
      h.model.scriptFor(tag, execute("await new Promise((resolve) => setTimeout(resolve, 3000)); return 'slept';"));
      const { a, sid } = await h.session();
      const id = await a.admit(sid, "a", `sleep a while ${tag}`);
      const step = await eventually(async () => (await transcript(a, sid)).find((m) => m.toolCalls), { timeoutMs: 10_000, what: "the tool step" });
      const watch = await a.watch(sid);
      await sleep(1000);
      const res = await a.cancel(sid, id);
      expectStatus(res, 200);
      // Watchers see the closing message, then the settlement.
      const events = await watch.until((ev) => kind(ev) === "settled" && ev.data.settlement.commandId === id);
      await watch.close();
      const live = events.filter((ev) => ["message", "settled"].includes(kind(ev))).slice(-2);
      assert.deepEqual(
        live.map((ev) => (kind(ev) === "message" ? [ev.data.message.toolCallId, ev.data.message.text] : ev.data.settlement.terminal)),
        [[step.toolCalls[0].id, CANCELLED], "cancelled"],
      );
      const s = await a.waitSettled(sid, id);
      assert.equal(s.terminal, "cancelled");
      assert.equal(s.toolCallCount, 1);
      const callId = step.toolCalls[0].id;
      // Past the sleep, the stale execution has recorded nothing more.
      await sleep(2500);
      const tools = (await transcript(a, sid)).filter((m) => m.role === "tool");
      assert.deepEqual(
        tools.map((m) => [m.toolCallId, m.text, m.isError]),
        [[callId, CANCELLED, true]],
      );

      const last = await laterToolTurns(a, sid, { callId, earlier: tools[0] });
      assert.deepEqual(items(last)[0], ["user", `sleep a while ${tag}`]);
    });

    test("cancel mid-model after a tool step: the step keeps its real result; later tool turns pair", T, async () => {
      const tag = uniq("cancel-model");
      h.model.scriptFor(tag, execute("return 'first-result';"), { hang: true });
      const { a, sid } = await h.session();
      const id = await a.admit(sid, "a", `one step then think ${tag}`);
      await h.model.waitFor((all) => all.filter((r) => requestHas(r, tag)).length >= 2, { timeoutMs: 10_000, what: "the follow-up model call" });
      expectStatus(await a.cancel(sid, id), 200);
      const s = await a.waitSettled(sid, id);
      assert.equal(s.terminal, "cancelled");
      assert.equal(s.toolCallCount, 1);
      const messages = await transcript(a, sid);
      const callId = messages.find((m) => m.toolCalls).toolCalls[0].id;
      const tools = messages.filter((m) => m.role === "tool");
      assert.deepEqual(
        tools.map((m) => [m.toolCallId, m.text]),
        [[callId, JSON.stringify("first-result")]],
        "nothing was left open, so nothing was added",
      );
      await laterToolTurns(a, sid, { callId, earlier: tools[0] });
    });

    test("the attempt limit reached during a tool turn: the call ends `outcome unknown`; later tool turns pair", T, async () => {
      const tag = uniq("attempt-limit");
      h.model.scriptFor(tag, execute("await notes.hang({}); return 'never';"));
      const { a, sid } = await h.session();
      const id = await a.admit(sid, "a", `hang in a tool ${tag}`);
      // SHIITAKE_ATTEMPTS_MAX=2: a restart mid-tool resumes it as attempt 2
      // (the replay-safe call runs again); a second one ends the turn.
      for (let runs = 1; runs <= 2; runs++) {
        await eventually(async () => (await probe(a)).filter((op) => op === "hang").length >= runs, { timeoutMs: 15_000, what: `run ${runs} of the call` });
        await h.restart();
      }
      const s = await a.waitSettled(sid, id, { boundMs: 20_000 });
      assert.equal(s.terminal, "interrupted", JSON.stringify(s));
      assert.equal(s.toolCallCount, 1);
      const messages = await transcript(a, sid);
      const callId = messages.find((m) => m.toolCalls).toolCalls[0].id;
      const tools = messages.filter((m) => m.role === "tool");
      assert.equal(tools.length, 1, JSON.stringify(tools));
      assert.equal(tools[0].toolCallId, callId);
      assert.equal(tools[0].isError, true);
      assert.match(tools[0].text, /^outcome unknown: the turn was interrupted .* before this call finished; it was not run again$/);
      assert.equal(h.model.requests(tag).length, 1, "no model call past the limit");
      await laterToolTurns(a, sid, { callId, earlier: tools[0] });
    });

    test("every request this Worker sent was one the provider accepts", T, async () => {
      const all = h.model.requests();
      assert.ok(all.length >= 12, `${all.length} requests`);
      const refused = all.filter((r) => r.outcome === "invalid");
      assert.deepEqual(
        refused.map((r) => r.error),
        [],
      );
      for (const r of all) assert.equal(r.api, provider);
    });
  });
}

/** Whether a model request carries `tag` anywhere in its messages. */
function requestHas(record, tag) {
  return JSON.stringify(record.body?.messages ?? []).includes(tag);
}

// The checks behind "refused as the provider would" for the cases this file
// is about: a call left without a result, a result after the next user message,
// and a call answered twice.
test("the scripted model server refuses contexts with an unanswered, misplaced or twice answered call, in both formats", T, async () => {
  const model = await startModelServer();
  try {
    const post = (api, messages) =>
      api === "openai"
        ? fetch(`${model.url}/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ model: "m", stream: true, messages }),
          })
        : fetch(`${model.origin}/v1/messages`, {
            method: "POST",
            headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
            body: JSON.stringify({ model: "m", max_tokens: 16, stream: true, messages }),
          });
    const openai = {
      user: (text) => ({ role: "user", content: text }),
      calls: (...ids) => ({ role: "assistant", content: null, tool_calls: ids.map((id) => ({ id, type: "function", function: { name: "execute", arguments: "{}" } })) }),
      result: (id) => ({ role: "tool", tool_call_id: id, content: "ok" }),
    };
    const anthropic = {
      user: (text) => ({ role: "user", content: [{ type: "text", text }] }),
      calls: (...ids) => ({ role: "assistant", content: ids.map((id) => ({ type: "tool_use", id, name: "execute", input: {} })) }),
      result: (...ids) => ({ role: "user", content: ids.map((id) => ({ type: "tool_result", tool_use_id: id, content: "ok" })) }),
    };
    const cases = {
      openai: [
        [[openai.user("A"), openai.calls("a1"), openai.user("B"), openai.calls("b1"), openai.result("b1")], /did not have response messages: a1/],
        [[openai.user("A"), openai.calls("a1"), openai.calls("b1"), openai.result("a1"), openai.result("b1")], /did not have response messages: a1/],
        [[openai.user("A"), openai.calls("a1"), openai.result("a1"), openai.result("a1")], /'a1' has more than one response message/],
        [[openai.user("A"), openai.calls("a1"), openai.result("a1"), openai.user("B"), openai.result("a1")], /must be a response to a preceeding message/],
      ],
      anthropic: [
        [[anthropic.user("A"), anthropic.calls("a1"), anthropic.user("B")], /without `tool_result` blocks immediately after: a1/],
        [[anthropic.user("A"), anthropic.calls("a1"), anthropic.result("a1", "a1")], /must have a single result.*: a1/],
        [[anthropic.user("A"), anthropic.calls("a1"), anthropic.calls("b1"), anthropic.result("a1", "b1")], /without `tool_result` blocks immediately after: a1/],
        [[anthropic.user("A"), anthropic.calls("a1"), anthropic.user("B"), anthropic.result("a1")], /without `tool_result` blocks immediately after: a1/],
      ],
    };
    for (const [api, list] of Object.entries(cases)) {
      for (const [messages, why] of list) {
        const res = await post(api, messages);
        assert.equal(res.status, 400, `${api}: ${JSON.stringify(messages)}`);
        const body = await res.json();
        const error = api === "openai" ? body.error : (assert.equal(body.type, "error"), body.error);
        assert.equal(error.type, "invalid_request_error");
        assert.match(error.message, why, `${api}: ${JSON.stringify(messages)}`);
      }
    }
    // The well-formed shapes pass: results right after their step, then the
    // next user message (Anthropic: in the results' message, or its own).
    const good = {
      openai: [openai.user("A"), openai.calls("a1", "a2"), openai.result("a1"), openai.result("a2"), openai.user("B")],
      anthropic: [anthropic.user("A"), anthropic.calls("a1", "a2"), anthropic.result("a1", "a2"), anthropic.user("B")],
    };
    for (const [api, messages] of Object.entries(good)) {
      const res = await post(api, messages);
      const text = await res.text();
      assert.equal(res.status, 200, `${api}: ${text}`);
    }
  } finally {
    await model.close();
  }
});
