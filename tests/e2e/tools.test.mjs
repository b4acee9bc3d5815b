// Tools end to end: the scripted model calls `execute` and a direct
// tool; the code runs in a Worker Loader sandbox and reaches host operations
// only through the grants read at each call. Fixture:
// tests/e2e/fixtures/tools-worker.mjs (modules notes, vault, files; Agent
// default {notes: write}, vault required; confirm hook approves
// `{confirmed: true}`).
import assert from "node:assert/strict";
import { test } from "node:test";
import { execute, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({ fixture: "tools-worker", model: "echo" });

const T = { timeout: 30_000 };

/** Runs one prompt through a scripted tool turn; returns what a test needs. */
async function turn(name, ...script) {
  const tag = uniq(name);
  h.model.scriptFor(tag, ...script);
  const { a, sid } = await h.session();
  const settled = await a.settle(sid, "r1", `use the tools ${tag}`, { boundMs: 20_000 });
  const messages = (await a.read(sid, { limit: 200 })).messages;
  const tools = messages.filter((m) => m.role === "tool");
  return { tag, a, sid, settled, messages, tools, requests: h.model.requests(tag) };
}

const probe = async (a) => (await h.api("GET", `/direct/${a.id}/host/probe`)).json;
/** The tool results the model received in request `i` (OpenAI `tool` messages). */
const toolResults = (req) => req.body.messages.filter((m) => m.role === "tool").map((m) => m.content);

test("a multi-step tool turn: execute reaches a granted operation, a direct tool runs, the model sees results but never display data", T, async () => {
  const t = await turn(
    "multi",
    execute("const r = await notes.add_note({ text: 'first' }); return { r, listed: await env.notes.list_notes() };"),
    { toolCalls: [{ name: "apply_patch", arguments: { patch: "*** Begin Patch" } }] },
    { text: "all done" },
  );
  assert.equal(t.settled.terminal, "completed", JSON.stringify(t.settled));
  assert.equal(t.settled.answer, "all done");
  assert.equal(t.settled.toolCallCount, 2);
  // The offered tools: execute (with the operation list) and the direct tool.
  const offered = t.requests[0].body.tools.map((x) => x.function.name);
  assert.deepEqual(offered, ["execute", "apply_patch"]);
  assert.match(t.requests[0].body.tools[0].function.description, /notes\.add_note/);
  // The results went back to the model, in order.
  assert.equal(t.requests.length, 3);
  const [first] = toolResults(t.requests[1]);
  assert.deepEqual(JSON.parse(first), { r: { count: 1, sessionId: t.sid }, listed: ["first"] });
  assert.deepEqual(toolResults(t.requests[2]).map((c) => JSON.parse(c)), [JSON.parse(first), { applied: true }]);
  // Transcript: assistant calls, tool outcomes with display data.
  const roles = t.messages.map((m) => m.role);
  assert.deepEqual(roles, ["user", "assistant", "tool", "assistant", "tool", "assistant"]);
  assert.equal(t.messages[1].toolCalls[0].name, "execute");
  assert.deepEqual(t.messages[1].protocol.tools, ["apply_patch", "execute"]);
  assert.deepEqual(t.tools[0].data.calls, [
    { path: "notes.add_note", ok: true },
    { path: "notes.list_notes", ok: true },
  ]);
  assert.deepEqual(t.tools[1].data, { diff: "*** Begin Patch" });
  // Each request carries every earlier result's text, and no display data.
  for (const [i, req] of t.requests.entries()) {
    assert.deepEqual(toolResults(req), t.tools.slice(0, i).map((m) => m.text), `request ${i}`);
    assert.ok(!JSON.stringify(req.body).includes("diff"), `display data never reaches the model (request ${i})`);
  }
  const probed = await probe(t.a);
  assert.deepEqual(probed.map((r) => r.op), ["add-note", "list-notes", "apply_patch"]);
  // executionId names one call: the execute run's second guest call, then
  // the direct call (README "Tools").
  const [run, patch] = t.messages.filter((m) => m.toolCalls).map((m) => `${t.settled.commandId}:${m.toolCalls[0].id}`);
  assert.deepEqual(probed.slice(1).map((r) => r.detail), [`${run}:2`, patch]);
});

test("forage.search and forage.describe find operations and their schemas", T, async () => {
  const t = await turn(
    "forage",
    execute("return { found: await forage.search('note'), schema: await forage.describe('notes.add_note') };"),
    { text: "ok" },
  );
  const out = JSON.parse(t.tools[0].text);
  assert.ok(out.found.some((f) => f.path === "notes.add_note"), JSON.stringify(out.found));
  assert.deepEqual(out.schema.inputSchema.required, ["text"]);
  assert.equal(out.schema.access, "write");
});

test("an ungranted module, fetch, a result over the cap and bad arguments are refused to the code, not the turn", T, async () => {
  const t = await turn(
    "refusals",
    execute(`
      const out = {};
      try { await vault.open({}); out.vault = "ran"; } catch (e) { out.vault = e.message; }
      try { await fetch("http://127.0.0.1:1/"); out.fetch = "ran"; } catch (e) { out.fetch = String(e.message); }
      try { await notes.add_note({ text: 7 }); out.args = "ran"; } catch (e) { out.args = e.message; }
      try { await notes.big({ bytes: 300000 }); out.big = "ran"; } catch (e) { out.big = e.message; }
      return out;`),
    { text: "understood" },
  );
  assert.equal(t.settled.terminal, "completed");
  const out = JSON.parse(t.tools[0].text);
  assert.match(out.vault, /`vault` requires a grant/);
  assert.notEqual(out.fetch, "ran");
  assert.match(out.args, /text/);
  assert.match(out.big, /262144 bytes/);
  assert.deepEqual((await probe(t.a)).map((r) => r.op), [], "no refused operation ran");
});

test("a result over 256 KiB from the code itself is an error result", T, async () => {
  const t = await turn("cap", execute("return 'y'.repeat(300000);"), { text: "too big" });
  assert.equal(t.tools[0].isError, true);
  assert.match(t.tools[0].text, /262144/);
  assert.equal(t.settled.terminal, "completed");
});

test("grants are read at every call: a delivery between two calls of one turn applies to the next", T, async () => {
  const tag = uniq("regrant");
  // The second model step waits at the model server until released: its
  // call runs after the delivery below, in the same turn.
  h.model.scriptFor(
    tag,
    execute("return await notes.add_note({ text: 'one' });"),
    { ...execute("return await notes.add_note({ text: 'two' });"), gate: tag },
    { text: "end" },
  );
  const { a, sid } = await h.session();
  const id = await a.admit(sid, "r1", `twice ${tag}`);
  // The second step is requested once the first call's result is recorded.
  await h.model.waitFor(() => h.model.requests(tag).length >= 2, { what: "the gated second step" });
  const first = (await a.read(sid, { limit: 200 })).messages.filter((m) => m.role === "tool");
  assert.equal(first.length, 1);
  assert.equal(first[0].isError, undefined, first[0].text);
  assert.deepEqual(JSON.parse(first[0].text), { count: 1, sessionId: sid }, "the first call ran under the Agent default (notes: write)");
  const d = await h.api("POST", `/host-grants/${a.id}/${sid}`, { version: 1, grants: { notes: "read" } });
  assert.deepEqual(d.json, { delivered: "stored" });
  h.model.release(tag);
  const s = await a.waitSettled(sid, id, { boundMs: 20_000 });
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(s.toolCallCount, 2);
  const tools = (await a.read(sid, { limit: 200 })).messages.filter((m) => m.role === "tool");
  assert.equal(tools.length, 2);
  assert.deepEqual(tools[0], first[0], "the first result stands");
  assert.equal(tools[1].isError, true, tools[1].text);
  assert.match(tools[1].text, /granted `read`.*needs `write`/);
  assert.deepEqual((await probe(a)).map((r) => r.detail), ["one"], "the second call did not run");
});

test("a required key: refused without a grant, allowed once the Session's grant is delivered", T, async () => {
  const t = await turn("required", execute("return await vault.open({});"), { text: "no" });
  assert.equal(t.tools[0].isError, true);
  assert.match(t.tools[0].text, /`vault` requires a grant and this Session has none/);
  const tag = uniq("required-ok");
  h.model.scriptFor(tag, execute("return await vault.open({});"), { text: "yes" });
  const a = h.agent();
  await a.createSession("s");
  await h.api("POST", `/host-grants/${a.id}/s`, { version: 1, grants: { vault: "read" } });
  await a.settle("s", "r1", `open ${tag}`, { boundMs: 20_000 });
  const tool = (await a.read("s")).messages.find((m) => m.role === "tool");
  assert.deepEqual(JSON.parse(tool.text), { secret: "vault contents" });
});

test("a confirm operation runs only when the host's hook confirms it", T, async () => {
  const t = await turn(
    "confirm",
    execute(`
      const out = {};
      try { await notes.wipe({ confirmed: false }); out.no = "ran"; } catch (e) { out.no = e.message; }
      out.yes = await notes.wipe({ confirmed: true });
      return out;`),
    { text: "ok" },
  );
  const out = JSON.parse(t.tools[0].text);
  assert.match(out.no, /did not confirm/);
  assert.deepEqual(out.yes, { wiped: true });
  assert.deepEqual((await probe(t.a)).map((r) => r.op), ["wipe"]);
});

test("an unknown tool and broken arguments come back to the model as errors", T, async () => {
  const t = await turn(
    "unknown",
    { toolCalls: [{ name: "no_such_tool", arguments: {} }, { name: "execute", arguments: "{\"code\": \"trunc" }] },
    { text: "sorry" },
  );
  assert.equal(t.settled.terminal, "completed");
  assert.match(t.tools[0].text, /no tool `no_such_tool` is offered; tools: execute, apply_patch/);
  assert.match(t.tools[1].text, /not a JSON object/);
  assert.deepEqual(t.messages[1].toolCalls[1].arguments, {}, "recorded as {} so it replays");
});
