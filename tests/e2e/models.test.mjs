// Models (seed: the agent-control paragraph's agents.setModel and
// agents.models, the /model-preference resolver): two providers signed in
// on one scripted model server (OpenAI and Anthropic formats), the env
// offering three addresses, Agents whose hosts state other policies
// (tests/e2e/fixtures/models-worker.mjs). Each turn resolves its model at
// its start; the request the model server records shows which model,
// which endpoint and which reasoning field the turn called.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { createShiitakeClient } from "../../js/client.mjs";
import { TOKEN, execute, uniq, useWorker, MODEL_NAME } from "./helpers.mjs";

const T = { timeout: 90_000 };
const OFFERED = [`openai/${MODEL_NAME}`, "anthropic/claude-e2e", "openai/gpt-reasoner"];

/** A code string calling `agents.<op>(args)`, answering `{ok}` or `{err}` (the thrown message). */
const call = (op, args) => `try { return { ok: await agents.${op}(${JSON.stringify(args)}) }; } catch (e) { return { err: String(e.message ?? e) }; }`;

/** The model's `execute` run in a fresh Session of `a`: the tool result's value. */
async function runCode(h, a, code) {
  const tag = uniq("code");
  const sid = await a.createSession(`s-${randomUUID().slice(0, 8)}`);
  h.model.scriptFor(tag, execute(code), { text: `done ${tag}` });
  const settled = await a.settle(sid, `p-${tag}`, `run it ${tag}`);
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  const read = await a.read(sid, { limit: 200 });
  const tool = read.messages.filter((m) => m.role === "tool").at(-1);
  assert.ok(tool, JSON.stringify(read.messages));
  try {
    return JSON.parse(tool.text);
  } catch {
    return tool.text;
  }
}

/** One prompt in `sid` of `b`: its settlement and the model requests it made. */
async function turn(h, b, sid) {
  const tag = uniq("turn");
  const settled = await b.settle(sid, `t-${tag}`, `say ${tag}`);
  return { settled, requests: h.model.requests(tag) };
}

describe("models: offered, set by a peer, resolved per turn", () => {
  const h = useWorker({
    fixture: "models-worker",
    model: { provider: "both", fallback: "echo" },
    bindings: { SHIITAKE_MODELS: OFFERED.join(",") },
  });

  test("agents.models lists the offered addresses of signed-in, allowed providers; only when fleet().models authorizes it", T, async () => {
    const a = h.agent();
    const all = await runCode(h, a, call("models", {}));
    assert.deepEqual(all.ok, { models: OFFERED }, JSON.stringify(all));
    const restricted = await runCode(h, h.agent(`openai-only-${randomUUID()}`), call("models", {}));
    assert.deepEqual(restricted.ok, { models: [OFFERED[0], OFFERED[2]] });
    assert.ok((await runCode(h, a, call("models", { all: true }))).err, "closed input");
    const search = "return (await forage.search('agents model set models')).map((f) => f.path).sort();";
    const on = await runCode(h, a, search);
    assert.ok(on.includes("agents.set_model") && on.includes("agents.models"), JSON.stringify(on));
    const off = await runCode(h, h.agent(`nomodels-${randomUUID()}`), search);
    assert.ok(!off.includes("agents.set_model") && !off.includes("agents.models"), JSON.stringify(off));
  });

  test("agents.setModel on another Agent changes the model, endpoint and reasoning its next turn calls", T, async () => {
    const [a, b] = [h.agent(), h.agent()];
    const sid = await b.createSession("work");
    // Nothing chosen: SHIITAKE_MODEL, the first offered (available login).
    const first = await turn(h, b, sid);
    assert.equal(first.settled.terminal, "completed");
    assert.equal(first.requests.length, 1);
    assert.equal(first.requests[0].api, "openai");
    assert.equal(first.requests[0].body.model, MODEL_NAME);
    assert.equal(first.requests[0].body.reasoning_effort, undefined);

    const set = await runCode(h, a, call("set_model", { agentId: b.id, model: "anthropic/claude-e2e", reasoning: "low" }));
    assert.deepEqual(set.ok, { agentId: b.id, model: "anthropic/claude-e2e", reasoning: "low" }, JSON.stringify(set));
    const second = await turn(h, b, sid);
    assert.equal(second.settled.terminal, "completed", JSON.stringify(second.settled));
    assert.equal(second.requests[0].api, "anthropic");
    assert.equal(second.requests[0].path, "/v1/messages");
    assert.equal(second.requests[0].body.model, "claude-e2e");
    assert.deepEqual(second.requests[0].body.thinking, { type: "enabled", budget_tokens: 2048 });
    assert.equal(second.requests[0].outcome === "invalid" ? second.requests[0].error : null, null);

    // Another Session of b resolves the Agent's model too; max maps to OpenAI's high.
    await runCode(h, a, call("set_model", { agentId: b.id, model: "openai/gpt-reasoner", reasoning: "max" }));
    const other = await turn(h, b, await b.createSession("other"));
    assert.equal(other.requests[0].api, "openai");
    assert.equal(other.requests[0].body.model, "gpt-reasoner");
    assert.equal(other.requests[0].body.reasoning_effort, "high");
    // Without reasoning: none on the wire.
    await runCode(h, a, call("set_model", { agentId: b.id, model: "anthropic/claude-e2e" }));
    const plain = await turn(h, b, sid);
    assert.equal(plain.requests[0].body.model, "claude-e2e");
    assert.equal(plain.requests[0].body.thinking, undefined);
  });

  test("a model the target's host does not admit is refused as model:rejected; other refusals propagate unchanged", T, async () => {
    const a = h.agent();
    const b = h.agent();
    const unoffered = await runCode(h, a, call("set_model", { agentId: b.id, model: "openai/not-offered" }));
    assert.match(unoffered.err, /^model:rejected: .*not offered/, JSON.stringify(unoffered));
    // The target's key sources exclude anthropic: its host refuses.
    const restricted = h.agent(`openai-only-${randomUUID()}`);
    const excluded = await runCode(h, a, call("set_model", { agentId: restricted.id, model: "anthropic/claude-e2e" }));
    assert.match(excluded.err, /^model:rejected: .*key sources exclude provider anthropic/, JSON.stringify(excluded));
    // Refused before any call: reasoning without a model, a bad level, a foreign key.
    for (const args of [{ agentId: b.id, reasoning: "high" }, { agentId: b.id, model: "openai/x", reasoning: "extreme" }, { agentId: b.id, model: "openai/x", sessionId: "s" }]) {
      const out = await runCode(h, a, call("set_model", args));
      assert.ok(out.err && !out.err.startsWith("model:rejected"), JSON.stringify(out));
    }
    // A target without models authorization still applies its own host's
    // check; a host without fleet().models cannot call setModel at all.
    const off = h.agent(`nomodels-${randomUUID()}`);
    const noOp = await runCode(h, off, call("set_model", { agentId: b.id, model: OFFERED[0] }));
    assert.ok(noOp.err, JSON.stringify(noOp));
    // Nothing was stored at b: its next turn still runs the default.
    const sid = await b.createSession("after");
    const after = await turn(h, b, sid);
    assert.equal(after.requests[0].body.model, MODEL_NAME);
  });

  test("fleetSetModel, the RPC a directory's create calls, checks and stores the Agent's model", T, async () => {
    const b = h.agent();
    const rpc = async (agentId, body) => (await h.api("POST", `/set-model-rpc/${agentId}`, body)).json;
    assert.deepEqual(await rpc(b.id, { model: "anthropic/claude-e2e", reasoning: "minimal" }), { value: { model: "anthropic/claude-e2e", reasoning: "minimal" } });
    const sid = await b.createSession("work");
    const t = await turn(h, b, sid);
    assert.equal(t.requests[0].api, "anthropic");
    assert.deepEqual(t.requests[0].body.thinking, { type: "enabled", budget_tokens: 1024 });
    const rejected = await rpc(b.id, { model: "anthropic/nope" });
    assert.equal(rejected.error.code, "model_rejected", JSON.stringify(rejected));
    assert.equal(rejected.error.status, 422);
    assert.equal((await rpc(b.id, { model: "openai/x", extra: 1 })).error.code, "invalid_request");
    assert.equal((await rpc(b.id, { reasoning: "low" })).error.code, "invalid_request");
  });

  test("the key-source restriction makes the resolver skip a provider; an unrestricted host takes its Team default", T, async () => {
    const team = h.agent(`team-${randomUUID()}`);
    const t1 = await turn(h, team, await team.createSession("s"));
    assert.equal(t1.requests[0].api, "anthropic", "the Team default");
    assert.equal(t1.requests[0].body.model, "claude-e2e");
    const restricted = h.agent(`openai-only-${randomUUID()}`);
    const t2 = await turn(h, restricted, await restricted.createSession("s"));
    assert.equal(t2.settled.terminal, "completed");
    assert.equal(t2.requests[0].api, "openai", "the anthropic Team default is skipped");
    assert.equal(t2.requests[0].body.model, MODEL_NAME);
  });

  test("the person's last manual switch applies below the Agent's explicit model", T, async () => {
    const s = h.agent(`switch-${randomUUID()}`);
    const sid = await s.createSession("s");
    assert.equal((await turn(h, s, sid)).requests[0].body.model, MODEL_NAME, "no switch: login");
    assert.equal((await h.api("GET", `/direct/${s.id}/fixture/switch?model=anthropic/claude-e2e`)).status, 200);
    const switched = await turn(h, s, sid);
    assert.equal(switched.requests[0].api, "anthropic");
    const a = h.agent();
    await runCode(h, a, call("set_model", { agentId: s.id, model: "openai/gpt-reasoner" }));
    assert.equal((await turn(h, s, sid)).requests[0].body.model, "gpt-reasoner", "the Agent's model wins");
  });

  test("PUT /sessions/:id/model sets the first layer: that Session's next turn calls it, above the Agent's model; the host's policy refuses what it would not resolve; DELETE clears it", T, async () => {
    const b = h.agent(`session-model-${randomUUID()}`);
    // The typed client over the route (docs/http.md "Models").
    const client = createShiitakeClient({
      baseUrl: `http://localhost/agents/${b.id}`,
      fetch: (url, init) => h.mf.dispatchFetch(url, { ...init, headers: { ...init.headers, authorization: `Bearer ${TOKEN}` } }),
    });
    const [chosen, other] = [await b.createSession("chosen"), await b.createSession("other")];
    assert.deepEqual(await client.session(chosen).model(), { model: null });
    assert.deepEqual(await client.session(chosen).setModel("anthropic/claude-e2e", { reasoning: "low" }), { model: "anthropic/claude-e2e", reasoning: "low" });
    // The Agent's explicit model is below the Session's.
    await runCode(h, h.agent(), call("set_model", { agentId: b.id, model: "openai/gpt-reasoner" }));
    const first = await turn(h, b, chosen);
    assert.equal(first.settled.terminal, "completed", JSON.stringify(first.settled));
    assert.equal(first.requests[0].api, "anthropic");
    assert.equal(first.requests[0].body.model, "claude-e2e");
    assert.deepEqual(first.requests[0].body.thinking, { type: "enabled", budget_tokens: 2048 }, "the Session's reasoning level");
    assert.equal((await turn(h, b, other)).requests[0].body.model, "gpt-reasoner", "another Session keeps the Agent's model");

    // Refusals name the problem and store nothing.
    for (const [body, status, code, message] of [
      [{ model: "openai/not-offered" }, 422, "model_rejected", /^model:rejected: /],
      [{}, 400, "invalid_request", /model/],
      [{ model: null, reasoning: "low" }, 400, "invalid_request", /model/],
      [{ model: "anthropic/claude-e2e", reasoning: "huge" }, 400, "invalid_request", /reasoning/],
      [{ model: "anthropic/claude-e2e", temperature: 1 }, 400, "invalid_request", /temperature/],
    ]) {
      const res = await b.api("PUT", `/sessions/${chosen}/model`, body);
      assert.equal(res.status, status, JSON.stringify([body, res.json]));
      assert.equal(res.json.error.code, code);
      assert.match(res.json.error.message, message);
    }
    assert.equal((await b.api("PUT", `/sessions/${chosen}/model`, "{")).json.error.code, "invalid_json");
    assert.equal((await b.api("POST", `/sessions/${chosen}/model`, { model: null })).status, 405);
    assert.equal((await b.api("DELETE", `/sessions/nope/model`)).json.error.code, "session_not_found");
    assert.equal((await b.api("PUT", `/sessions/nope/model`, { model: "anthropic/claude-e2e" })).json.error.code, "session_not_found");
    const restricted = h.agent(`openai-only-${randomUUID()}`);
    const sid = await restricted.createSession("s");
    const refused = await restricted.api("PUT", `/sessions/${sid}/model`, { model: "anthropic/claude-e2e" });
    assert.equal(refused.status, 422, "a provider the host's key sources exclude");
    assert.deepEqual(await client.session(chosen).model(), { model: "anthropic/claude-e2e", reasoning: "low" });

    // Cleared (DELETE): the next turn resolves the Agent's model again.
    assert.deepEqual(await client.session(chosen).clearModel(), { model: null });
    assert.equal((await turn(h, b, chosen)).requests[0].body.model, "gpt-reasoner");
  });

  test("lastSwitch is asked with the Session and the metadata of the prompt that heads the turn", T, async () => {
    const s = h.agent(`switch-${randomUUID()}`);
    const sid = await s.createSession("s");
    for (const author of ["ada", "grace"]) {
      const tag = uniq("meta");
      const res = await s.api("POST", `/sessions/${sid}/commands`, { type: "prompt", requestId: `m-${tag}`, text: `say ${tag}` }, { headers: { "x-test-meta": JSON.stringify({ author }) } });
      assert.equal(res.status, 200, JSON.stringify(res.json));
      const settled = await s.waitSettled(sid, res.json.commandId, { boundMs: 20_000 });
      assert.equal(settled.terminal, "completed", JSON.stringify(settled));
      const asked = await h.api("GET", `/direct/${s.id}/fixture/switch-asked`);
      assert.deepEqual(asked.json, { sessionId: sid, meta: { author } });
    }
  });

  test("no available model: the run fails before any model call, and agents.wait shows the diagnostic", T, async () => {
    const locked = h.agent(`locked-${randomUUID()}`);
    const sid = await locked.createSession("s");
    const tag = uniq("locked");
    const commandId = await locked.admit(sid, `r-${tag}`, `try ${tag}`);
    const settled = await locked.waitSettled(sid, commandId, { boundMs: 20_000 });
    assert.equal(settled.terminal, "failed", JSON.stringify(settled));
    assert.match(settled.diagnostic, /^model:unavailable: .*key sources allow: none/, settled.diagnostic);
    assert.deepEqual(h.model.requests(tag), [], "no model call");
    const a = h.agent();
    const waited = await runCode(h, a, call("wait", { agentId: locked.id, sessionId: sid, commandId, timeoutMs: 1000 }));
    assert.equal(waited.ok.status, "settled", JSON.stringify(waited));
    assert.equal(waited.ok.terminal, "failed");
    assert.equal(waited.ok.diagnostic, settled.diagnostic);
  });
});
