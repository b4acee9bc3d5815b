// The Agent directory (seed: "Agent fleet", the agent-control paragraphs):
// agents.create, list, archive, unarchive and the host-only eraseAgent,
// across Agent Durable Objects of one Miniflare
// (tests/e2e/fixtures/fleet-directory-worker.mjs), the model reaching the
// `agents` module through `execute`.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { eventually, execute, uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 120_000 };

/** A code string calling `agents.<op>(args)`, answering `{ok}` or `{err}` (the thrown message). */
const call = (op, args) => `try { return { ok: await agents.${op}(${JSON.stringify(args)}) }; } catch (e) { return { err: String(e.message ?? e) }; }`;

describe("fleet directory: create, list, archive, unarchive, erase", () => {
  const h = useWorker({ fixture: "fleet-directory-worker", model: "echo" });

  /**
   * The model's `execute` run of `code` in a Session of `a`: the tool's
   * parsed value. `hide`: tags of another Agent's script, written as
   * escapes so this Agent's requests (which carry the code) never match them.
   */
  async function run(a, code, { sessionId, hide = [], followUps = [] } = {}) {
    const tag = uniq("code");
    const sid = sessionId ?? (await a.createSession(`s-${randomUUID().slice(0, 8)}`));
    const hidden = hide.reduce((c, t) => c.replaceAll(t, t.replace("-", "\\u002d")), code);
    h.model.scriptFor(tag, execute(hidden), { text: `done ${tag}` }, ...followUps);
    const settled = await a.settle(sid, `p-${tag}`, `run it ${tag}`);
    assert.equal(settled.terminal, "completed", JSON.stringify(settled));
    const read = await a.read(sid, { limit: 200 });
    const tool = read.messages.filter((m) => m.role === "tool").at(-1);
    assert.ok(tool, JSON.stringify(read.messages));
    return { sid, value: JSON.parse(tool.text), text: tool.text, tag };
  }

  const op = async (a, name, args, options) => (await run(a, call(name, args), options)).value;

  /** `a` creates an Agent: its facts. */
  async function create(a, args = {}) {
    const out = await op(a, "create", { requestId: `c-${randomUUID()}`, ...args });
    assert.ok(out.ok, JSON.stringify(out));
    return out.ok;
  }

  async function replies(a, sid) {
    const read = await a.read(sid, { limit: 200 });
    return read.messages.filter((m) => m.role === "user" && m.meta?.delegation?.reply);
  }

  async function oneReply(a, sid) {
    const [line] = await eventually(async () => {
      const got = await replies(a, sid);
      return got.length > 0 ? got : null;
    }, { timeoutMs: 30_000, what: "the reply line", intervalMs: 200 });
    return line;
  }

  async function listAll(a, args = {}) {
    const out = await op(a, "list", { limit: 200, ...args });
    assert.ok(out.ok, JSON.stringify(out));
    return out.ok.agents;
  }

  test("agents.create reserves an Agent: a retry answers the same agentId, other input conflicts, list shows it", T, async () => {
    const a = h.agent();
    const requestId = `r-${randomUUID()}`;
    const args = { requestId, name: "Helper", model: "openai/gpt-5", reasoning: "low" };
    const first = await op(a, "create", args);
    assert.ok(first.ok, JSON.stringify(first));
    assert.match(first.ok.agentId, /^a-[0-9a-f]{32}$/);
    assert.deepEqual(first.ok, { agentId: first.ok.agentId, name: "Helper", model: "openai/gpt-5", reasoning: "low", workingDirectory: `/work/${first.ok.agentId}` });
    const again = await op(a, "create", args);
    assert.deepEqual(again.ok, first.ok, "the replay receipt");
    const conflict = await op(a, "create", { ...args, name: "Other" });
    assert.match(conflict.err, /^create:conflict: /);
    // Shapes are checked before the directory is asked.
    assert.match((await op(a, "create", { requestId: "x", reasoning: "high" })).err, /reasoning: needs a model/);
    assert.match((await op(a, "create", { requestId: "x", model: "gpt-5" })).err, /provider\/model/);
    assert.match((await op(a, "create", { requestId: "x", name: "n".repeat(129) })).err, /name/);
    assert.match((await op(a, "create", { requestId: "x", creator: "me" })).err, /creator/);
    // An unnamed Agent is named by its id.
    const plain = await create(a);
    assert.equal(plain.name, plain.agentId);
    assert.equal(plain.model, undefined);
    const listed = await listAll(a);
    const entry = listed.find((e) => e.agentId === first.ok.agentId);
    assert.deepEqual(entry, { ...first.ok, archived: false, creator: a.id });
    // The caller registered itself on its first request (no creator).
    const self = listed.find((e) => e.agentId === a.id);
    assert.ok(self, JSON.stringify(listed.map((e) => e.agentId)));
    assert.equal(self.creator, undefined);
  });

  test("list pages are bounded and follow the cursor", T, async () => {
    const a = h.agent();
    for (let i = 0; i < 3; i++) await create(a, { name: `page-${i}` });
    const seen = new Set();
    let cursor;
    let pages = 0;
    do {
      const out = await op(a, "list", { limit: 2, ...(cursor ? { cursor } : {}) });
      assert.ok(out.ok, JSON.stringify(out));
      assert.ok(out.ok.agents.length <= 2);
      for (const e of out.ok.agents) seen.add(e.agentId);
      cursor = out.ok.cursor;
      pages++;
    } while (cursor !== undefined && pages < 200);
    assert.ok(seen.size >= 4, `${seen.size} Agents`);
    assert.match((await op(a, "list", { limit: 201 })).err, /limit/);
    assert.match((await op(a, "list", { cursor: "x" })).err, /cursor/);
  });

  test("the directory's object is reserved: no Agent, no HTTP, no model target", T, async () => {
    const a = h.agent();
    const res = await h.api("GET", "/agents/shiitake.directory/sessions");
    assert.equal(res.status, 404, res.text);
    assert.equal(res.json.error.code, "agent_reserved");
    const read = await op(a, "read", { agentId: "shiitake.directory", sessionId: "s" });
    assert.match(read.err, /reserved/);
    const elsewhere = await h.api("POST", `/fleet-rpc/${a.id}/fleetDirectory`, [JSON.stringify({ op: "lookup", agentId: a.id })]);
    assert.equal(elsewhere.json.error.code, "not_directory");
  });

  test("a created Agent takes delegation with the model it was created with: the round trip", T, async () => {
    const a = h.agent();
    const child = await create(a, { name: "Worker", model: "openai/gpt-5", reasoning: "low" });
    const sid = await a.createSession("parent");
    const childTag = uniq("child");
    h.model.scriptFor(childTag, { text: `child answer ${childTag}` });
    const sent = await run(a, call("send", { agentId: child.agentId, sessionId: "work", requestId: "r1", text: `do it ${childTag}` }), { sessionId: sid, hide: [childTag], followUps: [{ text: "thanks" }] });
    assert.equal(sent.value.ok?.status, "accepted", sent.text);
    const line = await oneReply(a, sid);
    assert.equal(line.text, `child answer ${childTag}`);
    assert.equal(line.meta.delegation.reply.commandId, sent.value.ok.commandId);
    // The child's turn called the model create named, at its reasoning level.
    const [request] = h.model.requests(`do it ${childTag}`);
    assert.equal(request.body.model, "gpt-5");
    assert.equal(request.body.reasoning_effort, "low");
  });

  test("an Agent that never used the fleet is in the directory from its first request: a peer's mail reaches it", T, async () => {
    // B only has a Session (plain HTTP): no agents.* call, no mail.
    const b = h.agent();
    await b.createSession("home");
    const a = h.agent();
    await eventually(async () => (await listAll(a)).find((e) => e.agentId === b.id) ?? null, { timeoutMs: 10_000, what: "B in the directory", intervalMs: 200 });
    const bTag = uniq("b");
    h.model.scriptFor(bTag, { text: `b answer ${bTag}` });
    const sid = await a.createSession("parent");
    const sent = await run(a, call("send", { agentId: b.id, sessionId: "work", requestId: "r1", text: `hello ${bTag}` }), { sessionId: sid, hide: [bTag], followUps: [{ text: "thanks" }] });
    assert.equal(sent.value.ok?.status, "accepted", sent.text);
    assert.equal((await oneReply(a, sid)).text, `b answer ${bTag}`);
  });

  test("a send to an Agent the directory does not hold is undeliverable recipient_offline at once", T, async () => {
    const a = h.agent();
    const sid = await a.createSession("parent");
    const sent = await run(a, call("send", { agentId: `never-${randomUUID()}`, sessionId: "s", requestId: "r1", text: "anyone?" }), { sessionId: sid });
    assert.equal(sent.value.ok?.status, "undeliverable", sent.text);
    assert.equal(sent.value.ok.reason, "recipient_offline");
    const line = await oneReply(a, sid);
    assert.equal(line.meta.delegation.reply.reason, "recipient_offline");
  });

  test("archive hides an Agent from lists and delegation (recipient_left); unarchive makes it reachable again", T, async () => {
    const a = h.agent();
    const child = await create(a, { name: "Archivable" });
    const archived = await op(a, "archive", { agentId: child.agentId });
    assert.ok(archived.ok, JSON.stringify(archived));
    assert.equal(archived.ok.archived, true);
    assert.ok(!(await listAll(a)).some((e) => e.agentId === child.agentId), "hidden from the list");
    const onlyArchived = await listAll(a, { archived: true });
    assert.ok(onlyArchived.some((e) => e.agentId === child.agentId));
    assert.ok(onlyArchived.every((e) => e.archived));
    assert.match((await op(a, "archive", { agentId: child.agentId })).err, /^archive:archived: /);
    // A send to it is undeliverable: recipient_left.
    const sid = await a.createSession("parent");
    const sent = await run(a, call("send", { agentId: child.agentId, sessionId: "w", requestId: "r1", text: "hello?" }), { sessionId: sid });
    assert.equal(sent.value.ok?.status, "undeliverable", sent.text);
    assert.equal(sent.value.ok.reason, "recipient_left");
    assert.equal((await oneReply(a, sid)).meta.delegation.reply.reason, "recipient_left");
    // The archived target itself answers mail Left, without the directory.
    const mail = { key: `m_${randomUUID().replaceAll("-", "")}`, from: { agentId: a.id, sessionId: "x" }, to: { agentId: child.agentId, sessionId: "w" }, replyTo: `${a.id}/x`, text: "direct", delivery: "followUp" };
    const direct = await h.api("POST", `/fleet-rpc/${child.agentId}/receiveMail`, [JSON.stringify(mail)]);
    assert.deepEqual(direct.json, { value: { status: "left" } });
    // Unarchive: listed and reachable again.
    assert.match((await op(a, "unarchive", { agentId: a.id })).err, /^unarchive:self: /);
    const back = await op(a, "unarchive", { agentId: child.agentId });
    assert.equal(back.ok?.archived, false, JSON.stringify(back));
    assert.match((await op(a, "unarchive", { agentId: child.agentId })).err, /^unarchive:not_archived: /);
    assert.ok((await listAll(a)).some((e) => e.agentId === child.agentId));
    const childTag = uniq("child");
    h.model.scriptFor(childTag, { text: `back ${childTag}` });
    const sid2 = await a.createSession("parent2");
    const again = await run(a, call("send", { agentId: child.agentId, sessionId: "w", requestId: "r2", text: `again ${childTag}` }), { sessionId: sid2, hide: [childTag], followUps: [{ text: "ok" }] });
    assert.equal(again.value.ok?.status, "accepted", again.text);
    assert.equal((await oneReply(a, sid2)).text, `back ${childTag}`);
  });

  test("archive refusals: not_creator, self, running, pending, unreadable", T, async () => {
    const a = h.agent();
    const third = h.agent();
    const child = await create(a, { name: "Busy" });
    // not_creator: a third Agent; and an Agent the directory does not hold.
    assert.match((await op(third, "archive", { agentId: child.agentId })).err, /^archive:not_creator: /);
    assert.match((await op(third, "unarchive", { agentId: child.agentId })).err, /^unarchive:not_creator: /);
    assert.match((await op(a, "archive", { agentId: third.id })).err, /^archive:not_creator: /);
    // self.
    assert.match((await op(a, "archive", { agentId: a.id })).err, /^archive:self: /);
    // running: the child holds a model call.
    const c = h.agent(child.agentId);
    const cs = await c.createSession("work");
    const held = uniq("held");
    h.model.scriptFor(held, { text: "late", gate: held });
    const running = await c.admit(cs, "held", `hold ${held}`);
    await c.waitRunning(cs, running);
    assert.match((await op(a, "archive", { agentId: child.agentId })).err, /^archive:running: /);
    h.model.release(held);
    await c.waitSettled(cs, running);
    // pending: the child's delegated work is still waiting for its reply.
    const grand = h.agent();
    await op(grand, "list", {}); // a fleet call: in the directory when it returns
    const gHeld = uniq("gheld");
    h.model.scriptFor(gHeld, { text: "grand answer", gate: gHeld });
    const sent = await run(c, call("send", { agentId: grand.id, sessionId: "g", requestId: "r1", text: `wait ${gHeld}` }), { hide: [gHeld] });
    assert.equal(sent.value.ok?.status, "accepted", sent.text);
    await grand.waitRunning("g", sent.value.ok.commandId);
    assert.match((await op(a, "archive", { agentId: child.agentId })).err, /^archive:pending: /);
    h.model.release(gHeld);
    await grand.waitSettled("g", sent.value.ok.commandId);
    // Once the reply landed (and its run settled), archiving succeeds.
    const done = await eventually(async () => {
      const out = await op(a, "archive", { agentId: child.agentId });
      return out.ok ? out : null;
    }, { timeoutMs: 30_000, what: "archive after the work settled", intervalMs: 500 });
    assert.equal(done.ok.archived, true);
    // unreadable: the target's store predates / is foreign to the schema.
    const foreign = await create(a, { name: "Foreign" });
    const wrote = await h.api("POST", `/direct/${foreign.agentId}/fixture/foreign`);
    assert.equal(wrote.status, 200, wrote.text);
    const unreadable = await op(a, "archive", { agentId: foreign.agentId });
    assert.match(unreadable.err, /^archive:unreadable: /);
    assert.match(unreadable.err, /storage_incompatible/);
  });

  test("a host without archive refuses archived: true and offers no archive operations", T, async () => {
    const a = h.agent(`noarchive-${randomUUID()}`);
    assert.match((await op(a, "list", { archived: true })).err, /does not archive/);
    const ops = (await run(a, "return (await forage.search('agents create list archive unarchive')).map((f) => f.path).sort();")).value;
    assert.ok(ops.includes("agents.create") && ops.includes("agents.list"), JSON.stringify(ops));
    assert.ok(!ops.includes("agents.archive") && !ops.includes("agents.unarchive"), JSON.stringify(ops));
    const refused = await op(a, "archive", { agentId: "x" });
    assert.ok(refused.err, JSON.stringify(refused));
  });

  test("fleet() is checked key by key: archive needs directory, directory is a boolean", T, async () => {
    for (const [prefix, pattern] of [["badarchive", /fleet\(\)\.archive needs fleet\(\)\.directory/], ["badkind", /fleet\(\)\.directory must be a boolean/]]) {
      const id = `${prefix}-${randomUUID()}`;
      const res = await h.api("POST", `/fleet-rpc/${id}/fleetRead`, ["s", "{}"]);
      assert.equal(res.json.error?.code, "host_misconfigured", JSON.stringify(res.json));
      assert.match(res.json.error.message, pattern);
    }
  });

  test("eraseAgent (host-only) removes the entry and deletes the Agent's storage; mail to it is recipient_left", T, async () => {
    const a = h.agent();
    const child = await create(a, { name: "Doomed" });
    const c = h.agent(child.agentId);
    await c.createSession("kept");
    assert.equal((await c.api("GET", "/sessions")).json.sessions.length, 1);
    const erased = await h.api("POST", `/erase/${child.agentId}`);
    assert.deepEqual(erased.json, { value: { agentId: child.agentId, erased: true } });
    const twice = await h.api("POST", `/erase/${child.agentId}`);
    assert.deepEqual(twice.json, { value: { agentId: child.agentId, erased: false } });
    assert.deepEqual((await c.api("GET", "/sessions")).json.sessions, [], "storage deleted");
    assert.ok(!(await listAll(a)).some((e) => e.agentId === child.agentId));
    const sid = await a.createSession("parent");
    const sent = await run(a, call("send", { agentId: child.agentId, sessionId: "w", requestId: "r1", text: "still there?" }), { sessionId: sid });
    assert.equal(sent.value.ok?.reason, "recipient_left", sent.text);
    const reserved = await h.api("POST", "/erase/shiitake.directory");
    assert.ok(reserved.json.error, JSON.stringify(reserved.json));
  });
});
