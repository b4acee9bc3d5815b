// The owner API (`this.agent` inside ShiitakeDO) and the Workers RPC methods
// on its stub (docs/http.md "Owner API and RPC"), through the host Worker
// tests/e2e/fixtures/rpc-worker.mjs: every operation over both, checked
// against the same behaviour over HTTP. Metadata is the host's, bound to
// identities through SHIITAKE_IDENTITY_PATH as in identity.test.mjs.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { MODEL_NAME, Watch, expectAccepted, expectError, kind, useWorker } from "./helpers.mjs";

const USERS = { "token-ada": { id: "ada", name: "Ada" }, "token-bob": { id: "bob", name: "Bob" } };
const SCHEMA = {
  type: "object",
  required: ["author"],
  properties: { author: { type: "object", required: ["id", "name"], properties: { id: { type: "string" }, name: { type: "string" } } } },
};
const ADA = { author: { id: "ada", name: "Ada" } };
const BOB = { author: { id: "bob", name: "Bob" } };

const h = useWorker({
  fixture: "rpc-worker",
  bindings: {
    SHIITAKE_META_SCHEMA: JSON.stringify(SCHEMA),
    SHIITAKE_IDENTITY_PATH: "$.author.id",
    SHIITAKE_USERS: JSON.stringify(USERS),
    SHIITAKE_MODELS: `openai/${MODEL_NAME},openai/other-model`,
  },
});
const T = { timeout: 30_000 };

let n = 0;
const fresh = () => `owner-${n++}-${Date.now()}`;
const trim = (args) => {
  const out = [...args];
  while (out.length > 0 && out.at(-1) === undefined) out.pop();
  return out;
};

// One surface: every operation as `{value}` or `{error: {code, status, ...}}`.
function rpc(agentId) {
  const call = async (method, ...args) => (await h.api("POST", `/rpc/${agentId}`, { method, args: trim(args) })).json;
  return {
    name: "rpc",
    prompt: (sid, input, meta) => call("prompt", sid, input, meta),
    operator: (sid, input, meta) => call("operator", sid, input, meta),
    cancel: (sid, input, meta) => call("cancel", sid, input, meta),
    abort: (sid, meta) => call("abort", sid, meta),
    withdraw: (sid, requestId, meta) => call("withdraw", sid, requestId, meta),
    read: (sid, query, meta) => call("readSession", sid, query ?? {}, meta),
    settlement: (sid, commandId, options, meta) => call("readSettlement", sid, commandId, options ?? {}, meta),
    latestPending: (sid, meta) => call("latestPending", sid, meta),
    model: (sid, meta) => call("sessionModel", sid, meta),
    setModel: (sid, input, meta) => call("setSessionModel", sid, input, meta),
    clearModel: (sid, meta) => call("clearSessionModel", sid, meta),
    listSessions: (query) => call("listSessions", query),
    usage: (query) => call("usage", query),
    createSession: (id) => call("createSession", id),
    deleteSession: (id) => call("deleteSession", id),
    grants: (sid, delivery) => call("deliverGrants", sid, delivery),
  };
}

function owner(agentId) {
  const call = async (plan) => (await h.api("POST", `/owner/${agentId}`, plan)).json;
  const on = (session, op, args, meta) => call({ session, op, args: trim(args), ...(meta !== undefined ? { meta } : {}) });
  return {
    name: "owner",
    prompt: (sid, input, meta) => on(sid, "prompt", [input], meta),
    operator: (sid, input, meta) => on(sid, "operator", [input], meta),
    cancel: (sid, input, meta) => on(sid, "cancel", [input], meta),
    abort: (sid, meta) => on(sid, "abort", [], meta),
    withdraw: (sid, requestId, meta) => on(sid, "withdraw", [requestId], meta),
    read: (sid, query, meta) => on(sid, "read", [query ?? {}], meta),
    settlement: (sid, commandId, options, meta) => on(sid, "readSettlement", [commandId, options ?? {}], meta),
    latestPending: (sid, meta) => on(sid, "latestPending", [], meta),
    model: (sid, meta) => on(sid, "model", [], meta),
    setModel: (sid, input, meta) => on(sid, "setModel", [input], meta),
    clearModel: (sid, meta) => on(sid, "clearModel", [], meta),
    listSessions: (query) => on(undefined, "listSessions", [query]),
    usage: (query) => on(undefined, "usage", [query]),
    createSession: (id) => on(undefined, "createSession", [id]),
    deleteSession: (id) => on(undefined, "deleteSession", [id]),
    grants: (sid, delivery) => on(undefined, "grants.deliver", [sid, delivery]),
    steer: (sid, input, meta) => on(sid, "steer", [input], meta),
    followUp: (sid, input, meta) => on(sid, "followUp", [input], meta),
    call,
  };
}

const http = (agentId) => ({
  prompt: (sid, body, token) => h.api("POST", `/agents/${agentId}/sessions/${sid}/commands`, { type: "prompt", ...body }, token ? { token } : {}),
  command: (sid, body, token) => h.api("POST", `/agents/${agentId}/sessions/${sid}/commands`, body, token ? { token } : {}),
  get: (rel, token) => h.api("GET", `/agents/${agentId}${rel}`, undefined, token ? { token } : {}),
});

const value = (answer) => {
  assert.ok(answer && "value" in answer, `expected a value, got ${JSON.stringify(answer)}`);
  return answer.value;
};
const refused = (answer, status, code) => {
  assert.ok(answer?.error, `expected ${status} ${code}, got ${JSON.stringify(answer)}`);
  assert.equal(answer.error.code, code, JSON.stringify(answer));
  assert.equal(answer.error.status, status, JSON.stringify(answer));
  assert.equal(typeof answer.error.message, "string");
  return answer.error;
};

// A fresh Agent with Session "s" whose first prompt runs for good (the
// held model), so later prompts stay pending.
async function occupied(make) {
  const agentId = fresh();
  const s = make(agentId);
  assert.deepEqual(value(await s.createSession("s")), { sessionId: "s" });
  const occupier = value(await s.prompt("s", { requestId: "occupier", text: "runs" })).commandId;
  return { agentId, s, occupier, web: http(agentId) };
}

for (const make of [rpc, owner]) {
  const name = make("x").name;
  describe(`owner API over ${name}`, () => {
    test("the Session's explicit model: set, read, refused by the host's policy, cleared, as over HTTP", T, async () => {
      const agentId = fresh();
      const s = make(agentId);
      const web = http(agentId);
      value(await s.createSession("m"));
      assert.deepEqual(value(await s.model("m")), { model: null });
      assert.deepEqual(value(await s.setModel("m", { model: "openai/other-model", reasoning: "low" })), { model: "openai/other-model", reasoning: "low" });
      assert.deepEqual(value(await s.model("m")), { model: "openai/other-model", reasoning: "low" });
      assert.deepEqual((await web.get("/sessions/m/model")).json, { model: "openai/other-model", reasoning: "low" });
      const rejected = refused(await s.setModel("m", { model: "openai/not-offered" }), 422, "model_rejected");
      assert.match(rejected.message, /^model:rejected: /);
      assert.deepEqual(value(await s.model("m")), { model: "openai/other-model", reasoning: "low" }, "a refusal stores nothing");
      refused(await s.setModel("m", { reasoning: "low" }), 400, "invalid_request");
      refused(await s.clearModel("gone"), 404, "session_not_found");
      assert.deepEqual(value(await s.clearModel("m")), { model: null });
      assert.deepEqual(value(await s.model("m")), { model: null });
    });

    test("create, list, read and delete Sessions answer as over HTTP", T, async () => {
      const agentId = fresh();
      const s = make(agentId);
      const web = http(agentId);
      assert.deepEqual(value(await s.createSession("a")), { sessionId: "a" });
      refused(await s.createSession("a"), 409, "session_exists");
      const generated = value(await s.createSession()).sessionId;
      assert.match(generated, /^ses_/);
      const page = value(await s.listSessions({ limit: 1 }));
      assert.equal(page.sessions.length, 1);
      assert.equal(typeof page.cursor, "string");
      assert.deepEqual(value(await s.listSessions({})), (await web.get("/sessions")).json);
      refused(await s.listSessions({ limit: 0 }), 400, "invalid_query");
      // The usage ledger, as over HTTP.
      assert.deepEqual(value(await s.usage({ groupBy: "session" })), (await web.get("/usage?groupBy=session")).json);
      assert.deepEqual(value(await s.usage()), (await web.get("/usage")).json);
      refused(await s.usage({ groupBy: "week" }), 400, "invalid_query");
      assert.deepEqual(value(await s.usage({ sessionId: "a", groupBy: "day" })), (await web.get("/usage?sessionId=a&groupBy=day")).json);
      assert.equal(value(await s.usage({ sessionId: "a" })).sessionId, "a", "the Session filter reaches the ledger");
      refused(await s.usage({ sessionId: "a b" }), 400, "invalid_query");
      assert.deepEqual(value(await s.read("a", {})), (await web.get("/sessions/a")).json);
      assert.equal(value(await s.deleteSession("a")), "undefined");
      refused(await s.read("a", {}), 404, "session_not_found");
      refused(await s.read("a/b", {}), 400, "invalid_request");
      expectError(await web.get("/sessions/a"), 404, "session_not_found");
    });

    test("replay answers the same receipt, other input is a conflict; the same request over HTTP replays too", T, async () => {
      const { s, web } = await occupied(make);
      const first = value(await s.prompt("s", { requestId: "r1", text: "hello" }));
      assert.deepEqual(first, { status: "accepted", commandId: first.commandId });
      assert.deepEqual(value(await s.prompt("s", { requestId: "r1", text: "hello" })), first);
      assert.equal(expectAccepted(await web.prompt("s", { requestId: "r1", text: "hello" })), first.commandId);
      refused(await s.prompt("s", { requestId: "r1", text: "other" }), 409, "request_conflict");
      refused(await s.prompt("s", { requestId: "r1", text: "hello" }, ADA), 409, "request_conflict");
      refused(await s.prompt("s", { requestId: "r2", text: "x", colour: "red" }), 400, "invalid_request");
      const op = value(await s.operator("s", { requestId: "o1", text: "an operator line" }));
      assert.equal(op.status, "accepted");
      const read = value(await s.read("s", { limit: 10 }));
      assert.ok(read.messages.some((m) => m.role === "operator" && m.commandId === op.commandId));
      assert.deepEqual(read.pending.map((p) => p.commandId), [first.commandId]);
    });

    test("withdraw: an admitted request wins; otherwise a fence refuses it later, over HTTP too", T, async () => {
      const { s, web } = await occupied(make);
      const r1 = value(await s.prompt("s", { requestId: "r1", text: "hello" })).commandId;
      assert.deepEqual(value(await s.withdraw("s", "r1")), { status: "accepted", commandId: r1 });
      assert.deepEqual(value(await s.withdraw("s", "w1")), { status: "unknown" });
      assert.deepEqual(value(await s.withdraw("s", "w1")), { status: "unknown" });
      refused(await s.prompt("s", { requestId: "w1", text: "late" }), 409, "request_withdrawn");
      expectError(await web.prompt("s", { requestId: "w1", text: "late" }), 409, "request_withdrawn");
    });

    test("cancel across authors: not_owner for another principal, onlyIfPending too_late, unbound keeps authority", T, async () => {
      const { s, web, occupier } = await occupied(make);
      const mine = value(await s.prompt("s", { requestId: "a1", text: "ada's" }, ADA)).commandId;
      refused(await s.cancel("s", { commandId: mine }, BOB), 403, "not_owner");
      expectError(await web.command("s", { type: "cancel", commandId: mine }, "token-bob"), 403, "not_owner");
      assert.deepEqual(value(await s.cancel("s", { commandId: mine, onlyIfPending: true }, ADA)), { status: "cancelled", commandId: mine, text: "ada's" });
      assert.deepEqual(value(await s.cancel("s", { commandId: occupier, onlyIfPending: true })), { status: "too_late", commandId: occupier });
      refused(await s.cancel("s", { commandId: "cmd_nope" }), 404, "command_not_found");
      const settled = value(await s.settlement("s", mine, { timeoutMs: 0 }));
      assert.equal(settled.terminal, "cancelled");
      assert.deepEqual(settled.meta, ADA, "the cancellation's metadata");
    });

    test("abort: a bound abort cancels that principal's pending prompts only; unbound cancels everything", T, async () => {
      const { s } = await occupied(make);
      const a1 = value(await s.prompt("s", { requestId: "a1", text: "ada's" }, ADA)).commandId;
      const b1 = value(await s.prompt("s", { requestId: "b1", text: "bob's" }, BOB)).commandId;
      const bobs = value(await s.abort("s", BOB));
      assert.equal(bobs.status, "cancelled");
      assert.deepEqual(bobs.cancelled.map((c) => c.commandId), [b1]);
      const all = value(await s.abort("s"));
      assert.ok(all.cancelled.some((c) => c.commandId === a1), JSON.stringify(all));
    });

    test("latestPending answers each principal's own newest pending prompt, anyone's when unbound", T, async () => {
      const { s, web } = await occupied(make);
      const a1 = value(await s.prompt("s", { requestId: "a1", text: "ada's" }, ADA)).commandId;
      const b1 = value(await s.prompt("s", { requestId: "b1", text: "bob's" }, BOB)).commandId;
      assert.equal(value(await s.latestPending("s", ADA)).commandId, a1);
      assert.equal(value(await s.latestPending("s", BOB)).commandId, b1);
      assert.equal(value(await s.latestPending("s")).commandId, b1);
      assert.deepEqual(value(await s.latestPending("s", ADA)), (await web.get("/sessions/s/pending/latest", "token-ada")).json);
      await s.cancel("s", { commandId: b1 });
      assert.equal(value(await s.latestPending("s", BOB)), null);
    });

    test("metadata goes through the host's schema and the 4,096-byte cap", T, async () => {
      const { s } = await occupied(make);
      const big = { author: { id: "ada", name: "x".repeat(4100) } };
      refused(await s.prompt("s", { requestId: "m1", text: "hi" }, big), 400, "invalid_meta");
      refused(await s.prompt("s", { requestId: "m2", text: "hi" }, { author: { id: 7 } }), 400, "invalid_meta");
      refused(await s.latestPending("s", big), 400, "invalid_meta");
      assert.deepEqual(value(await s.withdraw("s", "m1")), { status: "unknown" }, "nothing was admitted");
      const ok = value(await s.prompt("s", { requestId: "m3", text: "hi" }, ADA)).commandId;
      const read = value(await s.read("s", {}));
      assert.deepEqual(read.pending.find((p) => p.commandId === ok).meta, ADA);
    });

    test("settlement long poll: undefined at the deadline (HTTP's null), the settlement once it commits, as over HTTP", T, async () => {
      const { s, web } = await occupied(make);
      const p = value(await s.prompt("s", { requestId: "p1", text: "waits" })).commandId;
      assert.equal((await web.get(`/sessions/s/settlement?commandId=${p}`)).json, null, "the route answers null");
      const t0 = Date.now();
      assert.equal(value(await s.settlement("s", p, { timeoutMs: 300 })), "undefined", "a pending command resolves undefined (seed)");
      assert.ok(Date.now() - t0 >= 250, "it waited for the deadline");
      refused(await s.settlement("s", "cmd_unknown", { timeoutMs: 0 }), 404, "command_not_found");
      const waiting = s.settlement("s", p, { timeoutMs: 10_000 });
      await new Promise((r) => setTimeout(r, 200));
      await web.command("s", { type: "cancel", commandId: p });
      const settled = value(await waiting);
      assert.equal(settled.commandId, p);
      assert.equal(settled.terminal, "cancelled");
      assert.deepEqual(settled, (await web.get(`/sessions/s/settlement?commandId=${p}`)).json);
    });

    test("grants: delivered and read back", T, async () => {
      const agentId = fresh();
      const s = make(agentId);
      value(await s.createSession("s"));
      assert.deepEqual(value(await s.grants("s", { version: 1, grants: { notes: "read" } })), { delivered: "stored" });
      assert.deepEqual(value(await s.grants("s", { version: 1, grants: { notes: "read" } })), { delivered: "unchanged" });
      const older = await s.grants("s", { version: 0, grants: {} });
      assert.equal(older.error.code, "grant_version_refused");
    });
  });
}

describe("owner API: in-process only", () => {
  test("refusals are ShiitakeError with code and status; steer and followUp set the delivery", T, async () => {
    const { s } = await occupied(owner);
    const e = refused(await s.prompt("s", { requestId: "", text: "x" }), 400, "invalid_request");
    assert.equal(e.typed, true);
    assert.equal(e.name, "ShiitakeError");
    const st = value(await s.steer("s", { requestId: "st", text: "steer" })).commandId;
    const fu = value(await s.followUp("s", { requestId: "fu", text: "follow" })).commandId;
    const pending = value(await s.read("s", {})).pending;
    assert.equal(pending.find((p) => p.commandId === st).delivery, "steer");
    assert.equal(pending.find((p) => p.commandId === fu).delivery, "followUp");
  });

  test("aborting a settlement long poll never cancels the command", T, async () => {
    const { s } = await occupied(owner);
    const p = value(await s.prompt("s", { requestId: "p1", text: "waits" })).commandId;
    const t0 = Date.now();
    const out = value(await s.call({ session: "s", op: "settlementAborted", args: [p, { abortMs: 200, timeoutMs: 5000 }] }));
    assert.deepEqual(out, { aborted: "the reader left" });
    assert.ok(Date.now() - t0 < 4000, "the abort ended the read");
    assert.ok(value(await s.read("s", {})).pending.some((x) => x.commandId === p), "still pending");
  });

  test("watch yields the snapshot, then admitted and settled frames", T, async () => {
    const { s, web } = await occupied(owner);
    // The watch stops at the first settled frame: the command admitted next.
    const watching = s.call({ session: "s", op: "watchUntilSettled", args: [null, { timeoutMs: 8000 }] });
    await new Promise((r) => setTimeout(r, 400));
    const id = expectAccepted(await web.prompt("s", { requestId: "will-be-cancelled", text: "queued" }));
    await web.command("s", { type: "cancel", commandId: id });
    const events = { id, answer: await watching };
    const list = value(events.answer);
    assert.equal(list[0].event, "snapshot");
    const kinds = list.map(kind);
    const admitted = list.find((ev) => kind(ev) === "admitted");
    assert.ok(admitted, kinds.join(","));
    assert.equal(admitted.data.commandId, events.id);
    const settled = list.find((ev) => kind(ev) === "settled");
    assert.equal((settled.data.settlement ?? settled.data).commandId, events.id);
  });
});

describe("RPC only", () => {
  test("watchSession streams the same events as the HTTP watch; a refused watch throws", T, async () => {
    const { agentId, web } = await occupied(rpc);
    const controller = new AbortController();
    const res = await h.mf.dispatchFetch(`http://localhost/rpc/${agentId}/watch/s`, { signal: controller.signal });
    assert.equal(res.status, 200);
    const w = new Watch(res, controller, 5000);
    try {
      const first = await w.next();
      assert.equal(first.event, "snapshot");
      const id = expectAccepted(await web.prompt("s", { requestId: "w1", text: "queued" }));
      await web.command("s", { type: "cancel", commandId: id });
      const events = await w.until((ev) => kind(ev) === "settled" && (ev.data.settlement ?? ev.data).commandId === id);
      assert.ok(events.some((ev) => kind(ev) === "admitted" && ev.data.commandId === id));
    } finally {
      await w.close();
    }
    const missing = await h.mf.dispatchFetch(`http://localhost/rpc/${agentId}/watch/nope`);
    assert.equal(missing.status, 418);
    const { error } = await missing.json();
    assert.equal(error.code, "session_not_found");
    assert.equal(error.status, 404);
  });

  test("closing a settlement long poll never cancels the command", T, async () => {
    const { agentId, s } = await occupied(rpc);
    const p = value(await s.prompt("s", { requestId: "p1", text: "waits" })).commandId;
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 200);
    await assert.rejects(h.api("POST", `/rpc/${agentId}`, { method: "readSettlement", args: ["s", p, { timeoutMs: 5000 }] }, { signal: controller.signal }));
    assert.ok(value(await s.read("s", {})).pending.some((x) => x.commandId === p), "still pending");
  });
});
