// Tool calls against time and crashes: the per-call timeout (here
// SHIITAKE_TOOL_TIMEOUT_MS = 6000) fires the call's abort signal; the alarm
// is kept armed by the five-second heartbeat while a tool runs; a restart in
// the middle of a tool never runs an unsafe operation again (the model is
// told its outcome is unknown) and runs a replay-safe one again; at most 8
// executions run at once. Fixture: tests/e2e/fixtures/tools-worker.mjs
// (`slow_write` / `slow_read` hang on their first run until aborted).
import assert from "node:assert/strict";
import { test } from "node:test";
import { execute, uniq, useWorker } from "./helpers.mjs";

const TOOL_TIMEOUT_MS = 6000;
const h = useWorker({ fixture: "tools-worker", model: "echo", persist: true, bindings: { SHIITAKE_TOOL_TIMEOUT_MS: TOOL_TIMEOUT_MS } });

const T = { timeout: 60_000 };
const probe = async (a) => (await h.api("GET", `/direct/${a.id}/host/probe`)).json.map((r) => r.op);

async function waitFor(what, check, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function toolMessages(a) {
  return (await a.read("s", { limit: 200 })).messages.filter((m) => m.role === "tool");
}

test("a call past the timeout is aborted (its signal fires) and the model is told", T, async () => {
  const tag = uniq("timeout");
  h.model.scriptFor(tag, execute("return await notes.slow_read({});"), { text: "gave up" });
  const a = h.agent();
  await a.createSession("s");
  const started = Date.now();
  const s = await a.settle("s", "r1", `slow ${tag}`, { boundMs: 30_000 });
  const took = Date.now() - started;
  assert.equal(s.terminal, "completed");
  const [tool] = await toolMessages(a);
  assert.equal(tool.isError, true);
  assert.match(tool.text, new RegExp(`did not finish within ${TOOL_TIMEOUT_MS} ms`));
  assert.ok(took >= TOOL_TIMEOUT_MS, `settled after ${took} ms`);
  assert.deepEqual(await probe(a), ["slow-read", "slow-read:aborted"], "the abort signal reached the operation");
});

test("a restart mid-tool: the unsafe operation is never run again and the model is told its outcome is unknown", T, async () => {
  const tag = uniq("crash-unsafe");
  h.model.scriptFor(tag, execute("await notes.slow_write({}); return 'wrote';"), { text: "checked" });
  const a = h.agent();
  await a.createSession("s");
  const id = await a.admit("s", "r1", `write ${tag}`);
  await waitFor("the unsafe operation to start", async () => (await probe(a)).includes("slow-write"));
  // The heartbeat keeps the alarm armed at most 5 s ahead while the tool runs.
  const { alarm, now } = (await h.api("GET", `/direct/${a.id}/host/alarm`)).json;
  assert.ok(alarm !== null && alarm - now <= 5_500, `alarm ${alarm} vs now ${now}`);

  await h.restart();

  const s = await a.waitSettled("s", id, { boundMs: 30_000 });
  assert.equal(s.terminal, "completed");
  assert.equal(s.toolCallCount, 1);
  const tools = await toolMessages(a);
  assert.equal(tools.length, 1, "one outcome for the one call");
  assert.equal(tools[0].isError, true);
  assert.match(tools[0].text, /^outcome unknown/);
  assert.deepEqual(await probe(a), ["slow-write"], "never run again");
  const followUp = h.model.requests(tag).at(-1);
  assert.match(followUp.body.messages.at(-1).content, /outcome unknown/);
});

test("a restart mid-tool: code that ran only replay-safe operations runs again", T, async () => {
  const tag = uniq("crash-safe");
  h.model.scriptFor(tag, execute("await forage.search('read'); return await notes.slow_read({});"), { text: "read it" });
  const a = h.agent();
  await a.createSession("s");
  const id = await a.admit("s", "r1", `read ${tag}`);
  await waitFor("the safe operation to start", async () => (await probe(a)).includes("slow-read"));

  await h.restart();

  const s = await a.waitSettled("s", id, { boundMs: 30_000 });
  assert.equal(s.terminal, "completed");
  const tools = await toolMessages(a);
  assert.equal(tools.length, 1);
  assert.deepEqual(JSON.parse(tools[0].text), { runs: 2 });
  // The replayed run's call is the same call: the same executionId.
  const callId = (await a.read("s")).messages.find((m) => m.toolCalls).toolCalls[0].id;
  const rows = (await h.api("GET", `/direct/${a.id}/host/probe`)).json;
  assert.deepEqual(rows.map((r) => [r.op, r.detail]), [["slow-read", `${id}:${callId}:2`], ["slow-read", `${id}:${callId}:2`]]);
});

test("at most 8 executions run at once in one Agent: a ninth is refused to its model", T, async () => {
  const tag = uniq("nine");
  const a = h.agent();
  const ids = [];
  for (let i = 0; i < 9; i++) {
    const mine = `${tag}-${i}`;
    h.model.scriptFor(mine, execute("return await notes.hang({});"), { text: "done" });
    await a.createSession(`s${i}`);
    ids.push(await a.admit(`s${i}`, "r1", `hang ${mine}`));
  }
  const outcomes = [];
  for (let i = 0; i < 9; i++) {
    await a.waitSettled(`s${i}`, ids[i], { boundMs: 30_000 });
    const tool = (await a.read(`s${i}`)).messages.find((m) => m.role === "tool");
    outcomes.push(tool.text);
  }
  const refused = outcomes.filter((t) => /8 runs are in flight in this Agent/.test(t));
  assert.equal(refused.length, 1, JSON.stringify(outcomes));
  assert.equal(outcomes.filter((t) => /did not finish within/.test(t)).length, 8, JSON.stringify(outcomes));
});
