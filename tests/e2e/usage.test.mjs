// The usage ledger (docs/http.md "Usage ledger"): each model call counted
// exactly once across kill -9 of the runtime in the middle of streamed
// answers (Miniflare's restart kills workerd with SIGKILL), by the figures
// the provider sent: the ledger's totals equal what the scripted model
// server served (it records each request and the usage object it sent in
// full), a call cut off by a kill counted as `unknown` with no tokens, a
// failed attempt as `failed`. The Node host's kill -9 is in
// tests/e2e/node-host.test.mjs.
import assert from "node:assert/strict";
import { test } from "node:test";
import { MODEL_NAME, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({
  persist: true,
  model: "echo",
  bindings: { SHIITAKE_RETRY_BASE_MS: 50, SHIITAKE_RETRY_MAX_MS: 400, SHIITAKE_ATTEMPTS_MAX: 4 },
});

const T = { timeout: 60_000 };

/** Waits until request #i of `tag` has streamed `chunks` chunks. */
const streamed = (tag, i, chunks) =>
  h.model.waitFor(() => (h.model.requests(tag)[i]?.chunksSent ?? -1) >= chunks, { timeoutMs: 10_000, what: `request #${i} of ${tag} to stream ${chunks} chunk(s)` });

/** What the model server served: calls by outcome and the tokens of the usage it sent. */
function served(records) {
  const sum = (f) => records.reduce((n, r) => n + (r.usage ? f(r.usage) : 0), 0);
  return {
    calls: records.length,
    answered: records.filter((r) => r.usage).length,
    failed: records.filter((r) => r.outcome === "error").length,
    unknown: records.filter((r) => r.aborted).length,
    inputTokens: sum((u) => u.prompt_tokens),
    outputTokens: sum((u) => u.completion_tokens),
    cacheReadTokens: sum((u) => u.prompt_tokens_details?.cached_tokens ?? 0),
    reasoningTokens: sum((u) => u.completion_tokens_details?.reasoning_tokens ?? 0),
  };
}

test("kill -9 in the middle of streamed answers: the ledger counts each call the model server served once, the cut-off ones as unknown", T, async () => {
  const [one, two, flaky] = [uniq("ledger-one"), uniq("ledger-two"), uniq("ledger-flaky")];
  const a = h.agent();
  for (const s of ["s1", "s2", "s3"]) await a.createSession(s);
  assert.deepEqual((await a.api("GET", "/usage")).json.totals, { calls: 0, answered: 0, failed: 0, unknown: 0, inputTokens: 0, outputTokens: 0 }, "no call yet");

  // A failed attempt, then its retry.
  h.model.scriptFor(flaky, { status: 503 }, { text: "after the retry" });
  const f = await a.admit("s3", "f1", `flaky ${flaky}`);
  assert.equal((await a.waitSettled("s3", f, { boundMs: 15_000 })).terminal, "completed");

  // Two kills, each in the middle of streamed answers (two Sessions at once, then one).
  h.model.scriptFor(one, { hang: true, chunks: ["P1 ", "P2 "] }, { text: "one, after the first kill" }, { hang: true, chunks: ["Q1 "] }, { text: "one again, after the second kill" });
  h.model.scriptFor(two, { hang: true, chunks: ["R1 ", "R2 "] }, { text: "two, after the first kill" });
  const p1 = await a.admit("s1", "p1", `first ${one}`);
  const p2 = await a.admit("s2", "p2", `second ${two}`);
  await streamed(one, 0, 2);
  await streamed(two, 0, 2);
  await h.restart();
  assert.equal((await a.waitSettled("s1", p1, { boundMs: 15_000 })).terminal, "completed");
  assert.equal((await a.waitSettled("s2", p2, { boundMs: 15_000 })).terminal, "completed");
  const p3 = await a.admit("s1", "p3", `third ${one}`);
  await streamed(one, 2, 1);
  await h.restart();
  assert.equal((await a.waitSettled("s1", p3, { boundMs: 15_000 })).terminal, "completed");

  const want = served(h.model.requests((r) => [one, two, flaky].some((t) => JSON.stringify(r.body).includes(t))));
  assert.deepEqual([want.calls, want.answered, want.failed, want.unknown], [8, 4, 1, 3], "what the server saw");
  const check = async () => {
    const ledger = await a.api("GET", "/usage?groupBy=session");
    assert.equal(ledger.status, 200, ledger.text);
    const { totals, groups } = ledger.json;
    assert.deepEqual(totals, want, "the ledger's totals are what the server served");
    assert.deepEqual(
      groups.map((g) => [g.key, g.calls, g.answered, g.failed, g.unknown]),
      [
        ["s1", 4, 2, 0, 2],
        ["s2", 2, 1, 0, 1],
        ["s3", 2, 1, 1, 0],
      ],
    );
    const models = (await a.api("GET", "/usage?groupBy=model")).json.groups;
    assert.deepEqual(
      models.map((g) => [g.key, g.calls]),
      [
        [`openai/${MODEL_NAME}`, 5],
        ["unknown", 3],
      ],
      "a cut-off call's model is not recorded",
    );
    const day = new Date().toISOString().slice(0, 10);
    const days = (await a.api("GET", `/usage?groupBy=day&from=0&to=${Date.now() + 1}`)).json;
    assert.deepEqual(days.groups.map((g) => [g.key, g.calls]), [[day, 8]]);
    const none = (await a.api("GET", `/usage?from=${Date.now() + 60_000}`)).json;
    assert.equal(none.totals.calls, 0, "nothing after now");
  };
  await check();
  // Exact across restarts: nothing counted again.
  await h.restart();
  await check();
});

test("a page of groups at a time, and bad parameters refused naming them", T, async () => {
  const a = h.agent();
  for (const s of ["x1", "x2", "x3"]) {
    await a.createSession(s);
    assert.equal((await a.waitSettled(s, await a.admit(s, "r", `hi ${s}`), { boundMs: 15_000 })).terminal, "completed");
  }
  const first = (await a.api("GET", "/usage?groupBy=session&limit=2")).json;
  assert.deepEqual(first.groups.map((g) => g.key), ["x1", "x2"]);
  assert.equal(typeof first.nextCursor, "string");
  const rest = (await a.api("GET", `/usage?groupBy=session&limit=2&cursor=${encodeURIComponent(first.nextCursor)}`)).json;
  assert.deepEqual(rest.groups.map((g) => g.key), ["x3"]);
  assert.equal(rest.nextCursor, null);
  for (const [query, param] of [
    ["groupBy=week", "groupBy"],
    ["from=yesterday", "from"],
    ["to=-1", "to"],
    ["from=10&to=5", "to"],
    ["groupBy=day&limit=201", "limit"],
    ["cursor=x1", "cursor"],
    ["by=session", "by"],
  ]) {
    const r = await a.api("GET", `/usage?${query}`);
    assert.equal(r.status, 400, `${query}: ${r.text}`);
    assert.equal(r.json.error.code, "invalid_query");
    assert.ok(r.json.error.message.includes(param), `${query}: ${r.json.error.message}`);
  }
});
