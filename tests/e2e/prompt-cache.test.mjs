// Prompt caching, as a conversation meets it through the real provider code:
// Anthropic requests mark the stable prefix with `cache_control` breakpoints
// (the system prompt, the first message, the end of the older turns, the
// last message; never more than 4), OpenAI requests carry one
// `prompt_cache_key` per Session; the scripted model server reports cache
// reads and writes for a repeated prefix the way each provider does
// (tests/support/model-server.mjs promptCache), and the settlement's usage
// carries them (`cacheReadTokens`, `cacheWriteTokens`).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { uniq, useWorker } from "./helpers.mjs";

const INSTRUCTIONS = "You are the prompt-cache test model.";
const T = { timeout: 20_000 };
// Over both providers' 1,024-token minimum (4 characters a token).
const LONG = "The quick brown fox jumps over the lazy dog. ".repeat(120);

/** Where a recorded Anthropic request marks its breakpoints: "system.0", "messages.2.0", ... */
function marks(body) {
  const found = [];
  for (const [at, tool] of (body.tools ?? []).entries()) if (tool.cache_control) found.push(`tools.${at}`);
  for (const [at, block] of (Array.isArray(body.system) ? body.system : []).entries()) if (block.cache_control) found.push(`system.${at}`);
  for (const [m, message] of body.messages.entries()) {
    for (const [b, block] of (Array.isArray(message.content) ? message.content : []).entries()) {
      if (block.cache_control) {
        assert.deepEqual(block.cache_control, { type: "ephemeral" });
        found.push(`messages.${m}.${b}`);
      }
    }
  }
  return found;
}

/** Three turns of one Session, each answered `answer N`; their settlements and requests. */
async function conversation(h, tag) {
  const { a, sid } = await h.session();
  h.model.scriptFor(tag, { text: "answer 1" }, { text: "answer 2" }, { text: "answer 3" });
  const settled = [];
  for (const [n, text] of [`one ${tag} ${LONG}`, `two ${tag}`, `three ${tag}`].entries()) {
    settled.push(await a.settle(sid, `r${n}`, text, { boundMs: 10_000 }));
  }
  for (const s of settled) assert.equal(s.terminal, "completed", JSON.stringify(s));
  const requests = h.model.requests(tag);
  assert.equal(requests.length, 3);
  for (const r of requests) assert.equal(r.error ?? null, null, `the model server refused a request: ${r.error}`);
  return { settled, requests };
}

describe("Anthropic", () => {
  const h = useWorker({ model: { provider: "anthropic", fallback: "echo" }, bindings: { SHIITAKE_INSTRUCTIONS: INSTRUCTIONS } });

  test("each request marks the system prompt, the first message, the older turns' end and the last message; the next turn reads what the last wrote", T, async () => {
    const { settled, requests } = await conversation(h, uniq("anthropic-cache"));
    // The tools come before the system prompt: its mark covers them.
    assert.deepEqual(
      requests.map((r) => marks(r.body)),
      [
        ["system.0", "messages.0.0"],
        ["system.0", "messages.0.0", "messages.1.0", "messages.2.0"],
        ["system.0", "messages.0.0", "messages.3.0", "messages.4.0"],
      ],
    );
    // The first turn writes its prefix, each later one reads the one before
    // and writes what it adds; the input count is the whole prompt.
    const [first, second, third] = settled.map((s) => s.usage);
    assert.equal(first.cacheReadTokens, 0);
    assert.ok(first.cacheWriteTokens >= 1024, JSON.stringify(first));
    for (const [n, usage] of [second, third].entries()) {
      const cache = requests[n + 1].cache;
      assert.ok(cache.read > 0, `turn ${n + 2} read nothing from the cache`);
      assert.equal(usage.cacheReadTokens, cache.read, JSON.stringify(usage));
      assert.equal(usage.cacheWriteTokens, cache.written, JSON.stringify(usage));
    }
    assert.ok(third.cacheReadTokens > second.cacheReadTokens, "the third turn reads the longer prefix the second wrote");
    settled.forEach((s, n) => assert.equal(s.usage.inputTokens, requests[n].tokens, "inputTokens counts the whole prompt, cached parts included"));
  });
});

describe("OpenAI", () => {
  const h = useWorker({ model: "echo", bindings: { SHIITAKE_INSTRUCTIONS: INSTRUCTIONS } });

  test("a Session's requests share one prompt_cache_key, another Session's differs; the next turn reads the cached prefix", T, async () => {
    const tag = uniq("openai-cache");
    const { settled, requests } = await conversation(h, tag);
    const keys = new Set(requests.map((r) => r.body.prompt_cache_key));
    assert.equal(keys.size, 1, "one key for the Session's requests");
    const [key] = keys;
    assert.match(key, /^[0-9a-f]{32}$/, "a digest, naming neither the Agent nor the Session");

    const [first, second] = settled.map((s) => s.usage);
    assert.equal(first.cacheReadTokens, 0);
    assert.equal(first.cacheWriteTokens, undefined, "OpenAI reports no cache writes");
    assert.equal(first.reasoningTokens, 0);
    assert.ok(second.cacheReadTokens >= 1024 && second.cacheReadTokens % 128 === 0, JSON.stringify(second));
    assert.equal(second.cacheReadTokens, requests[1].cache.read);

    // Another Session of the same Agent opening with the same prompt: its
    // own key, so it reads nothing of the first Session's cache (under one
    // key it would read the whole prompt).
    const { a, sid } = await h.session();
    h.model.scriptFor(tag, { text: "answer again" });
    const again = await a.settle(sid, "r0", `one ${tag} ${LONG}`, { boundMs: 10_000 });
    const request = h.model.requests(tag).at(-1);
    assert.notEqual(request.body.prompt_cache_key, key);
    assert.equal(again.usage.cacheReadTokens, 0);
  });
});
