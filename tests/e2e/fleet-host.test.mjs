// The fleet for hosts (issue 39 item 1, seed: "Agent fleet"): fleet grants
// (Agent scope, actions, expiry, provenance) checked at each call; another
// Agent's Sessions listed, created, read, deleted and sent to, by the host
// API (js/fleet.mjs in the Worker, tests/e2e/fixtures/fleet-host-worker.mjs)
// and by the model (`agents.sessions.*` through `execute`); delegation
// (`start`, `delegate`, the host-only `readSettlement`); and agents.send /
// agents.recall offered only when the host carries mail.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { checkFleet } from "../../js/do/config.mjs";
import { execute, uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 90_000 };
const FAR = Date.now() + 3_600_000;

const grantFor = (agents, actions, extra = {}) => ({ agents, actions, expiresAt: FAR, provenance: { grantedBy: "ops-ada" }, ...extra });

/** The model's `execute` run in a fresh Session of `a`: the tool message and its parsed value. */
async function runCode(h, a, code) {
  const tag = uniq("code");
  const sid = await a.createSession(`s-${randomUUID().slice(0, 8)}`);
  h.model.scriptFor(tag, execute(code), { text: `done ${tag}` });
  const settled = await a.settle(sid, `p-${tag}`, `run it ${tag}`);
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  const read = await a.read(sid, { limit: 200 });
  const tool = read.messages.filter((m) => m.role === "tool").at(-1);
  assert.ok(tool, JSON.stringify(read.messages));
  let value;
  try {
    value = JSON.parse(tool.text);
  } catch {
    value = tool.text;
  }
  return { tool, value, requests: h.model.requests(tag) };
}

const call = (op, args) => `try { return { ok: await agents.${op}(${JSON.stringify(args)}) }; } catch (e) { return { err: String(e.message ?? e) }; }`;

/** One host API call in the Worker: `{value}` or `{error}`. */
async function host(h, op, grant, agentId, args) {
  const res = await h.api("POST", `/host-fleet/${op}`, { grant, agentId, args });
  assert.equal(res.status, 200, res.text);
  return res.json;
}

async function storeGrant(h, agentId, grant) {
  const res = await h.api("POST", `/direct/${agentId}/fixture/grant`, grant);
  assert.equal(res.status, 200, res.text);
}

test("fleet() takes open, deliver and grant as functions; namespace or open is required", () => {
  const namespace = { get() {}, idFromName() {} };
  assert.equal(checkFleet({ open: () => ({}) }), undefined);
  assert.equal(checkFleet({ open: () => ({}), deliver: async () => "{}", grant: () => undefined }), undefined);
  assert.equal(checkFleet({ namespace, grant: {} }), "fleet().grant must be a function");
  assert.equal(checkFleet({ namespace, open: "x" }), "fleet().open must be a function");
  assert.equal(checkFleet({ namespace, deliver: 1 }), "fleet().deliver must be a function");
  assert.match(checkFleet({ grant: () => undefined }), /fleet\(\)\.namespace is required .* or fleet\(\)\.open\(agentId\)/);
});

describe("fleet for hosts: Sessions and delegation through the host API", () => {
  const h = useWorker({ fixture: "fleet-host-worker", model: "echo" });

  test("list, create, read, delete and send under a grant; a replayed send is the same admission", T, async () => {
    const b = h.agent(`plain-${randomUUID()}`);
    const all = grantFor([b.id], ["sessions.list", "sessions.create", "sessions.read", "sessions.delete", "send"]);
    const created = await host(h, "create", all, b.id, { sessionId: "work" });
    assert.deepEqual(created, { value: { sessionId: "work" } });
    const taken = await host(h, "create", all, b.id, { sessionId: "work" });
    assert.equal(taken.error.code, "session_exists");
    const tag = uniq("sent");
    const sent = await host(h, "send", all, b.id, { sessionId: "work", message: { requestId: `r-${tag}`, text: `hello ${tag}`, meta: { via: "host-api" } } });
    assert.equal(sent.value.status, "accepted", JSON.stringify(sent));
    assert.equal(sent.value.sessionId, "work");
    assert.deepEqual(sent.value.provenance, { grantedBy: "ops-ada" }, "the grant's provenance is echoed");
    const again = await host(h, "send", all, b.id, { sessionId: "work", message: { requestId: `r-${tag}`, text: `hello ${tag}`, meta: { via: "host-api" } } });
    assert.equal(again.value.commandId, sent.value.commandId, "the same requestId is the same admission");
    // An omitted Session is created from the request identity: a retry finds it.
    const omitted = await host(h, "send", all, b.id, { message: { requestId: `o-${tag}`, text: "new session" } });
    assert.match(omitted.value.sessionId, /^s_/);
    const retried = await host(h, "send", all, b.id, { message: { requestId: `o-${tag}`, text: "new session" } });
    assert.deepEqual([retried.value.sessionId, retried.value.commandId], [omitted.value.sessionId, omitted.value.commandId]);
    const listed = await host(h, "list", all, b.id, { limit: 1 });
    assert.equal(listed.value.sessions.length, 1);
    assert.equal(listed.value.sessions[0].sessionId, "work");
    const next = await host(h, "list", all, b.id, { cursor: listed.value.cursor });
    assert.deepEqual(next.value.sessions.map((s) => s.sessionId), [omitted.value.sessionId]);
    await b.settle("work", `wait-${tag}`, "after");
    const read = await host(h, "read", all, b.id, { sessionId: "work", limit: 200 });
    const hello = read.value.messages.find((m) => m.text === `hello ${tag}`);
    assert.ok(hello, JSON.stringify(read.value.messages));
    assert.deepEqual(hello.meta, { via: "host-api" }, "the host's metadata is applied to the admission");
    const deleted = await host(h, "delete", all, b.id, { sessionId: omitted.value.sessionId });
    assert.deepEqual(deleted.value, { sessionId: omitted.value.sessionId, deleted: true });
    const gone = await host(h, "read", all, b.id, { sessionId: omitted.value.sessionId });
    assert.equal(gone.error.code, "session_not_found");
    assert.equal(gone.error.status, 404);
  });

  test("each call is checked against its grant: expiry, action, Agent scope, bounds", T, async () => {
    const b = h.agent(`plain-${randomUUID()}`);
    const expired = await host(h, "list", grantFor([b.id], ["sessions.list"], { expiresAt: Date.now() - 1 }), b.id, {});
    assert.equal(expired.error.code, "grant_expired");
    assert.equal(expired.error.status, 403);
    const readOnly = grantFor([b.id], ["sessions.list"]);
    const refused = await host(h, "delete", readOnly, b.id, { sessionId: "x" });
    assert.equal(refused.error.code, "grant_refused");
    assert.match(refused.error.message, /sessions\.delete/);
    const elsewhere = await host(h, "list", grantFor(["someone-else"], ["sessions.list"]), b.id, {});
    assert.equal(elsewhere.error.code, "grant_refused");
    assert.match(elsewhere.error.message, new RegExp(`Agent \`${b.id}\``));
    const malformed = await host(h, "list", { agents: "*", actions: ["fly"], expiresAt: FAR }, b.id, {});
    assert.equal(malformed.error.code, "invalid_request");
    assert.match(malformed.error.message, /unknown action `fly`/);
    const badMeta = await host(h, "send", grantFor("*", ["send"]), b.id, { message: { requestId: "m", text: "t", meta: "x".repeat(5000) } });
    assert.equal(badMeta.error.code, "invalid_meta", JSON.stringify(badMeta));
    const big = await host(h, "list", grantFor("*", ["sessions.list"]), b.id, { limit: 201 });
    assert.equal(big.error.code, "invalid_request");
    assert.match(big.error.message, /limit/);
    const every = await host(h, "list", grantFor("*", ["sessions.list"]), b.id, {});
    assert.deepEqual(every.value.sessions, []);
  });

  test("start answers the receipt; delegate is pending until the exact command settles; readSettlement reads its rows", T, async () => {
    const b = h.agent(`plain-${randomUUID()}`);
    const grant = grantFor([b.id], ["start", "delegate"]);
    const tag = uniq("held");
    h.model.scriptFor(tag, { text: `child result ${tag}`, gate: tag });
    const task = { sessionId: "jobs", requestId: `t-${tag}`, text: `task ${tag}` };
    const started = await host(h, "start", grant, b.id, task);
    assert.equal(started.value.status, "accepted", JSON.stringify(started));
    const { commandId } = started.value;
    await b.waitRunning("jobs", commandId);
    const pending = await host(h, "delegate", grant, b.id, task);
    assert.deepEqual(
      { status: pending.value.status, commandId: pending.value.commandId, sessionId: pending.value.sessionId },
      { status: "pending", commandId, sessionId: "jobs" },
    );
    const unsettled = await h.api("POST", `/host-settlement/${b.id}`, { sessionId: "jobs", commandId });
    assert.equal(unsettled.json.value, undefined, "not settled: no settlement");
    h.model.release(tag);
    let settled;
    for (let i = 0; i < 100; i += 1) {
      settled = await host(h, "delegate", grant, b.id, task);
      if (settled.value.status === "settled") break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(settled.value.status, "settled", JSON.stringify(settled));
    assert.equal(settled.value.commandId, commandId);
    assert.equal(settled.value.terminal, "completed");
    assert.equal(settled.value.text, `child result ${tag}`);
    assert.equal(settled.value.toolCallCount, 0);
    assert.ok("usage" in settled.value);
    const rows = await h.api("POST", `/host-settlement/${b.id}`, { sessionId: "jobs", commandId });
    assert.equal(rows.json.value.commandId, commandId);
    assert.equal(rows.json.value.terminal, "completed");
    assert.equal(rows.json.value.answer, `child result ${tag}`);
    // A delegation without its action: refused, nothing admitted.
    const startOnly = grantFor([b.id], ["start"]);
    const refused = await host(h, "delegate", startOnly, b.id, { ...task, requestId: `t2-${tag}` });
    assert.equal(refused.error.code, "grant_refused");
  });
});

describe("fleet for models: agents.sessions.* under the host's grants", () => {
  const h = useWorker({ fixture: "fleet-host-worker", model: "echo" });

  test("the model lists, creates, reads and deletes another Agent's Sessions; each call checks the grant it reads then", T, async () => {
    const a = h.agent(`granted-${randomUUID()}`);
    const b = h.agent(`plain-${randomUUID()}`);
    await storeGrant(h, a.id, grantFor([b.id], ["sessions.list", "sessions.create", "sessions.read", "sessions.delete", "read"]));
    const created = await runCode(h, a, call("sessions_create", { agentId: b.id, sessionId: "from-model" }));
    assert.deepEqual(created.value.ok, { sessionId: "from-model" }, created.tool.text);
    await b.settle("from-model", "w1", "hello from b");
    const listed = await runCode(h, a, call("sessions_list", { agentId: b.id, limit: 10 }));
    assert.deepEqual(listed.value.ok.sessions.map((s) => s.sessionId), ["from-model"], listed.tool.text);
    const read = await runCode(h, a, call("sessions_read", { agentId: b.id, sessionId: "from-model", limit: 10 }));
    assert.ok(read.value.ok.messages.some((m) => m.text === "hello from b"), read.tool.text);
    const outside = await runCode(h, a, call("sessions_list", { agentId: `plain-${randomUUID()}` }));
    assert.match(outside.value.err, /agents\.sessions_list: grant_refused: .*does not reach Agent/);
    const deleted = await runCode(h, a, call("sessions_delete", { agentId: b.id, sessionId: "from-model" }));
    assert.deepEqual(deleted.value.ok, { sessionId: "from-model", deleted: true }, deleted.tool.text);
    // The host narrows the grant: the next call finds it.
    await storeGrant(h, a.id, grantFor([b.id], ["sessions.list"]));
    const narrowed = await runCode(h, a, call("sessions_create", { agentId: b.id }));
    assert.match(narrowed.value.err, /grant_refused: the fleet grant does not allow `sessions\.create`/);
    const noRead = await runCode(h, a, call("read", { agentId: b.id, sessionId: "x" }));
    assert.match(noRead.value.err, /agents\.read: grant_refused/);
    // Expired: refused by the call that finds it expired.
    await storeGrant(h, a.id, grantFor([b.id], ["sessions.list"], { expiresAt: Date.now() + 1500 }));
    const before = await runCode(h, a, call("sessions_list", { agentId: b.id }));
    assert.ok(before.value.ok, before.tool.text);
    await new Promise((r) => setTimeout(r, 1600));
    const after = await runCode(h, a, call("sessions_list", { agentId: b.id }));
    assert.match(after.value.err, /agents\.sessions_list: grant_expired: the fleet grant expired at/);
  });

  test("without a grant from the host: every fleet call is refused naming why", T, async () => {
    const a = h.agent(`granted-${randomUUID()}`);
    const out = await runCode(h, a, call("sessions_list", { agentId: "plain-x" }));
    assert.match(out.value.err, /grant_refused: fleet\(\)\.grant gives Session `[^`]+` no fleet grant/);
  });

  test("a grant answered as a promise is refused at the call, naming why; nothing reaches the target", T, async () => {
    const a = h.agent(`async-granted-${randomUUID()}`);
    const b = h.agent(`plain-${randomUUID()}`);
    await b.createSession("untouched");
    await storeGrant(h, a.id, grantFor([b.id], ["sessions.list", "sessions.create"]));
    const listed = await runCode(h, a, call("sessions_list", { agentId: b.id }));
    assert.match(listed.value.err, /fleet\(\)\.grant: must answer synchronously/, listed.tool.text);
    const created = await runCode(h, a, call("sessions_create", { agentId: b.id, sessionId: "never" }));
    assert.match(created.value.err, /must answer synchronously/, created.tool.text);
    const sessions = await b.api("GET", "/sessions");
    assert.deepEqual(sessions.json.sessions.map((s) => s.sessionId), ["untouched"], "nothing was created at the target");
  });

  test("agents.send and agents.recall are offered only when the host carries mail; sessions.* only with grants", T, async () => {
    const search = "return (await forage.search('agents send recall wait read sessions list')).map((f) => f.path).sort();";
    const opened = h.agent(`opened-${randomUUID()}`);
    const b = h.agent(`plain-${randomUUID()}`);
    await storeGrant(h, opened.id, grantFor("*", ["read", "sessions.list"]));
    const found = await runCode(h, opened, search);
    assert.ok(!found.value.includes("agents.send") && !found.value.includes("agents.recall"), found.tool.text);
    assert.ok(found.value.includes("agents.sessions_list"), found.tool.text);
    assert.doesNotMatch(JSON.stringify(found.requests[0].body.tools), /agents\.send/);
    const send = await runCode(h, opened, "try { await agents.send({agentId: 'x', requestId: 'r', text: 't'}); return 'sent'; } catch (e) { return 'refused: ' + e.message; }");
    assert.match(send.tool.text, /refused/);
    // Its other operations reach peers through its open adapter.
    await b.createSession("peer");
    const listed = await runCode(h, opened, call("sessions_list", { agentId: b.id }));
    assert.deepEqual(listed.value.ok.sessions.map((s) => s.sessionId), ["peer"], listed.tool.text);
    // The host's own deliver carries the mail instead of the namespace.
    const delivering = h.agent(`delivering-${randomUUID()}`);
    const mailed = await runCode(h, delivering, call("send", { agentId: b.id, sessionId: "peer", requestId: "m1", text: "via deliver" }));
    assert.equal(mailed.value.ok?.status, "accepted", mailed.tool.text);
    const delivered = await h.api("GET", `/direct/${delivering.id}/fixture/delivered`);
    assert.ok(delivered.json.delivered >= 1, delivered.text);
    const plain = h.agent(`plain-${randomUUID()}`);
    const full = await runCode(h, plain, search);
    assert.ok(full.value.includes("agents.send") && full.value.includes("agents.recall"), full.tool.text);
    assert.ok(!full.value.some((p) => p.startsWith("agents.sessions")), full.tool.text);
  });
});

describe("fleet for hosts: the Agent directory in the host's own object and transaction", () => {
  const h = useWorker({ fixture: "fleet-host-worker", model: "echo" });
  const directory = async (hostId, calls, fail = false) => {
    const res = await h.api("POST", `/direct/${hostId}/fixture/directory`, { calls, fail });
    assert.equal(res.status, 200, res.text);
    return res.json;
  };

  test("createAgentDirectory(sql): mutations answer lifecycle facts the host commits with them; a rollback undoes both", T, async () => {
    const hostId = `plain-${randomUUID()}`;
    const create = { method: "create", arg: { creator: "host", requestId: "r1", name: "Helper" } };
    const first = await directory(hostId, [create]);
    const created = first.answers[0];
    assert.equal(created.value.name, "Helper", JSON.stringify(first));
    assert.deepEqual(created.facts.map((f) => [f.kind, f.agentId]), [["created", created.value.agentId]]);
    const replay = await directory(hostId, [create]);
    assert.equal(replay.answers[0].value.agentId, created.value.agentId, "a retried create answers the same Agent");
    assert.deepEqual(replay.answers[0].facts, []);
    // The host's own write fails: the directory change is rolled back with it.
    const second = { method: "create", arg: { creator: "host", requestId: "r2" } };
    const failed = await directory(hostId, [second, { method: "register", arg: "bob" }], true);
    assert.equal(failed.error.message, "the host's own write failed");
    const listed = await directory(hostId, [{ method: "list", arg: {} }]);
    assert.deepEqual(listed.answers[0].value.agents.map((a) => a.agentId), [created.value.agentId]);
    assert.deepEqual(listed.answers[0].facts, []);
    const again = await directory(hostId, [second, { method: "setArchived", arg: { caller: "host", agentId: created.value.agentId, archived: true } }, { method: "erase", arg: "nobody" }]);
    assert.deepEqual(again.answers.map((a) => a.facts.map((f) => f.kind)), [["created"], ["archived"], []]);
    const projection = await h.api("GET", `/direct/${hostId}/fixture/projection`);
    assert.deepEqual(projection.json.map((p) => p.kind), ["created", "created", "archived"], "committed with the directory's changes, nothing of the rolled-back one");
    // Refusals name the problem.
    const refused = await directory(hostId, [{ method: "create", arg: { creator: "host", requestId: "r3", name: "x".repeat(129) } }]);
    assert.equal(refused.error.status, 400, JSON.stringify(refused));
    assert.match(refused.error.message, /name/);
    const reserved = await directory(hostId, [{ method: "register", arg: "shiitake.directory" }]);
    assert.equal(reserved.error.code, "directory:reserved");
  });
});
