// Tools under other host configurations: without a LOADER binding
// the `execute` tool is absent and the run says why; without a confirm hook
// a `confirm` operation is refused; the same tool turn over the Anthropic
// Messages wire format. Fixture: tests/e2e/fixtures/tools-worker.mjs.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { execute, kind, startWorker, uniq } from "./helpers.mjs";

const workers = [];
after(async () => {
  for (const h of workers) await h.dispose();
});

async function worker(options) {
  const h = await startWorker({ fixture: "tools-worker", model: "echo", ...options });
  workers.push(h);
  return h;
}

const T = { timeout: 30_000 };

test("without a LOADER binding execute is not offered, the run says why, and direct tools still work", T, async () => {
  const h = await worker({ loader: false });
  const tag = uniq("no-loader");
  h.model.scriptFor(tag, { toolCalls: [{ name: "apply_patch", arguments: { patch: "p" } }] }, { text: "patched" });
  const { a, sid } = await h.session();
  const w = await a.watch(sid);
  let events;
  try {
    await w.next();
    const id = await a.admit(sid, "r1", `patch ${tag}`);
    events = await w.until((ev) => kind(ev) === "settled" && (ev.data.settlement ?? ev.data).commandId === id);
  } finally {
    await w.close();
  }
  const diagnostic = events.find((ev) => kind(ev) === "diagnostic");
  assert.ok(diagnostic, `a diagnostic frame: ${JSON.stringify(events.map(kind))}`);
  assert.match(diagnostic.data.diagnostic, /`execute` is unavailable: the Worker has no LOADER binding/);
  const [first] = h.model.requests(tag);
  assert.deepEqual(first.body.tools.map((t) => t.function.name), ["apply_patch"]);
  const tool = (await a.read(sid)).messages.find((m) => m.role === "tool");
  assert.deepEqual(JSON.parse(tool.text), { applied: true });
});

test("without the host's confirm hook a confirm operation is refused; the others run", T, async () => {
  const h = await worker({ bindings: { TOOLS_CONFIRM_HOOK: "off" } });
  const tag = uniq("no-hook");
  const code = `
    const out = {};
    try { await notes.wipe({ confirmed: true }); out.wipe = "ran"; } catch (e) { out.wipe = e.message; }
    out.add = await notes.add_note({ text: "kept" });
    return out;`;
  h.model.scriptFor(tag, execute(code), { text: "ok" });
  const { a, sid } = await h.session();
  await a.settle(sid, "r1", `wipe ${tag}`, { boundMs: 20_000 });
  const tool = (await a.read(sid)).messages.find((m) => m.role === "tool");
  const out = JSON.parse(tool.text);
  assert.match(out.wipe, /asks for confirmation and the host supplies no confirm hook/);
  assert.equal(out.add.count, 1);
  const ops = (await h.api("GET", `/direct/${a.id}/host/probe`)).json.map((r) => r.op);
  assert.deepEqual(ops, ["add-note"]);
});

test("Anthropic: execute and a direct tool over tool_use / tool_result blocks", T, async () => {
  const h = await worker({ model: { provider: "anthropic", fallback: "echo" } });
  const tag = uniq("anthropic-tools");
  h.model.scriptFor(
    tag,
    { text: "Let me add it.", toolCalls: [{ name: "execute", arguments: { code: "return await notes.add_note({ text: 'a' })" } }] },
    { toolCalls: [{ name: "apply_patch", arguments: { patch: "q" } }, { name: "execute", arguments: { code: "return 1 + 1" } }] },
    { text: "finished" },
  );
  const { a, sid } = await h.session();
  const s = await a.settle(sid, "r1", `both ${tag}`, { boundMs: 20_000 });
  assert.equal(s.terminal, "completed", JSON.stringify(s));
  assert.equal(s.toolCallCount, 3);
  const reqs = h.model.requests(tag);
  assert.equal(reqs.length, 3);
  for (const r of reqs) assert.equal(r.outcome === "invalid" ? r.error : null, null, "the server accepted every request");
  assert.deepEqual(reqs[0].body.tools.map((t) => t.name), ["execute", "apply_patch"]);
  const last = reqs[2].body.messages;
  const results = last.at(-1).content.filter((b) => b.type === "tool_result");
  assert.deepEqual(results.map((b) => b.content), [JSON.stringify({ applied: true }), "2"]);
  const uses = last.at(-2).content.filter((b) => b.type === "tool_use");
  assert.deepEqual(uses.map((b) => b.name), ["apply_patch", "execute"]);
});

test("tools() with an unknown key or a value of the wrong kind is refused naming the key; nothing is dropped silently", T, async () => {
  const expected = {
    "moved-confirm": /tools\(\)\.confirm: unknown key `confirm` \(the confirm hook is `access\.confirm`\)/,
    "typo": /tools\(\)\.mcpServer: unknown key `mcpServer`; known: modules, access, mcpServers/,
    "function-description": /tools\(\)\.modules\[0\]\.operations\[0\]\.description is a function, which cannot be passed to the core/,
    "data-hook": /tools\(\)\.access\.confirm must be a function/,
    "unknown-operation-key": /tools\(\)\.modules\[0\]\.operations\[0\]\.retries: unknown key `retries`/,
    "bigint-schema": /tools\(\)\.modules\[0\]\.operations\[0\]\.inputSchema\.maxProperties is a bigint/,
    "unknown-module-key": /tools\(\)\.modules\[0\]\.label: unknown key `label`/,
    "ui-without-id": /tools\(\)\.ui\.id must be a string naming the App/,
    "ui-data-hook": /tools\(\)\.ui\.hasSession must be a function/,
    "ui-empty-id": /tools\(\): ui\.id must be a non-empty string of at most 128 bytes/,
  };
  for (const [name, pattern] of Object.entries(expected)) {
    const h = await worker({ fixture: "config-worker", bindings: { TOOLS_CASE: name } });
    const { a, sid } = await h.session();
    const settled = await a.settle(sid, "r1", "hello");
    assert.equal(settled.terminal, "failed", `${name}: ${JSON.stringify(settled)}`);
    assert.match(settled.diagnostic, pattern, name);
    assert.equal(h.model.requests().length, 0, `${name}: no model call with a refused configuration`);
  }
});
