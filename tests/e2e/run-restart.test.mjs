// A restart in the middle of a turn (docs/http.md "Running work"): the turn
// is resumed as a new attempt, the partial answer is discarded, the command
// settles exactly once; past the attempt limit it settles `interrupted`.
// Miniflare is disposed and started again on the same persisted storage; the
// scripted model server lives on across restarts.
import assert from "node:assert/strict";
import { test } from "node:test";
import { contentText } from "../support/model-server.mjs";
import { uniq, useWorker } from "./helpers.mjs";

const h = useWorker({
  persist: true,
  model: "echo",
  bindings: { SHIITAKE_RETRY_BASE_MS: 50, SHIITAKE_RETRY_MAX_MS: 400, SHIITAKE_ATTEMPTS_MAX: 3 },
});

const T = { timeout: 30_000 };
const conversation = (req) => req.body.messages.map((m) => [m.role, contentText(m.content)]);

/** Waits until the model has streamed `chunks` chunks of this tag's request #i. */
const streamed = (tag, i, chunks) =>
  h.model.waitFor(() => (h.model.requests(tag)[i]?.chunksSent ?? -1) >= chunks, { timeoutMs: 10_000, what: `request #${i} of ${tag} to stream ${chunks} chunk(s)` });

test("a restart mid-stream resumes the turn: completed once, one assistant message, the partial answer discarded", T, async () => {
  const tag = uniq("restart-stream");
  h.model.scriptFor(tag, { hang: true, chunks: ["PARTIAL-ONE ", "PARTIAL-TWO "] }, { text: "the whole answer after the restart" });
  const a = h.agent();
  await a.createSession("s");
  const op = await a.admitOperator("s", "op", "before the turn");
  const text = `answer me ${tag}`;
  const id = await a.admit("s", "r1", text);
  const queued = await a.admit("s", "r2", `queued behind ${tag}`);
  await streamed(tag, 0, 2);
  const warm = await a.read("s");
  assert.equal(warm.running?.commandId, id);
  assert.equal(warm.running.attempt, 1);

  await h.restart();

  const s = await a.waitSettled("s", id, { boundMs: 15_000 });
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(s.answer, "the whole answer after the restart");
  const reqs = h.model.requests(tag).filter((r) => contentText(r.body.messages.at(-1).content) === text);
  assert.equal(reqs.length, 2, "one attempt before the restart, one after");
  assert.equal(reqs[0].aborted, true, "the first attempt's connection went away with the old instance");
  assert.deepEqual(conversation(reqs[1]), conversation(reqs[0]), "the new attempt sends the same conversation, no partial answer");
  const page = await a.read("s");
  const mine = page.messages.filter((m) => m.commandId === id || m.role === "operator");
  assert.deepEqual(
    mine.map((m) => [m.role, m.text]),
    [
      ["operator", "before the turn"],
      ["user", text],
      ["assistant", "the whole answer after the restart"],
    ],
  );
  assert.equal(mine[0].commandId, op);
  assert.ok(!page.messages.some((m) => m.text.includes("PARTIAL")), "the partial answer is not in the transcript");
  // The prompt queued behind it was not lost either and runs next.
  assert.equal((await a.waitSettled("s", queued, { boundMs: 15_000 })).terminal, "completed");

  // Settled exactly once: another restart changes nothing and calls no model.
  const before = { messages: (await a.read("s")).messages, calls: h.model.requests(tag).length };
  await h.restart();
  assert.deepEqual((await a.settlement("s", id, 0)).json, s);
  assert.deepEqual((await a.read("s")).messages, before.messages);
  assert.equal(h.model.requests(tag).length, before.calls);
});

test("a turn interrupted by a restart at every attempt settles interrupted past the attempt limit", T, async () => {
  const tag = uniq("restart-limit");
  // Three hanging attempts (SHIITAKE_ATTEMPTS_MAX=3); a fourth would complete.
  h.model.scriptFor(tag, { hang: true, chunks: ["one "] }, { hang: true, chunks: ["two "] }, { hang: true, chunks: ["three "] }, { text: "a fourth attempt" });
  const a = h.agent();
  await a.createSession("s");
  const id = await a.admit("s", "r1", `never finishes ${tag}`);
  for (let attempt = 1; attempt <= 3; attempt++) {
    await streamed(tag, attempt - 1, 1);
    assert.equal((await a.read("s")).running?.attempt, attempt, `attempt ${attempt} is the running one`);
    await h.restart();
  }
  const s = await a.waitSettled("s", id, { boundMs: 15_000 });
  assert.equal(s.terminal, "interrupted", JSON.stringify(s));
  assert.equal(typeof s.diagnostic, "string");
  assert.ok(s.diagnostic.length > 0);
  assert.equal(h.model.requests(tag).length, 3, "no attempt past the limit");
  const page = await a.read("s");
  assert.equal(page.running, null);
  assert.ok(!page.messages.some((m) => m.role === "assistant"), "an interrupted turn appends no assistant message");
});
