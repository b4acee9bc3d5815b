// Transcript branches in Miniflare (docs/http.md "Branches"): edit and
// resend, retry, select and its watch frame, the children of an entry,
// read pages with parentEntryId and branch, forks, the refusals, the model
// context the scripted model server receives following the branch, and
// the typed client, owner API and RPC methods.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { describe, test } from "node:test";
import { createShiitakeClient, ShiitakeError } from "../../js/client.mjs";
import { TOKEN, expectAccepted, expectError, uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 60_000 };

/** `role:text` of each message a model request carried (the instructions left out). */
function seen(record) {
  return record.body.messages
    .filter((m) => m.role !== "system")
    .map((m) => `${m.role}:${typeof m.content === "string" ? m.content : m.content.map((p) => p.text ?? "").join("")}`);
}

describe("branches over HTTP", () => {
  const h = useWorker({ model: "echo" });

  /** A fresh Agent whose Session `s` holds two answered turns tagged `tag`. */
  async function twoTurns() {
    const a = h.agent();
    const tag = uniq("br");
    await a.createSession("s");
    await a.settle("s", "p1", `${tag} one`);
    await a.settle("s", "p2", `${tag} two`);
    const messages = (await a.read("s")).messages;
    assert.deepEqual(
      messages.map((m) => m.text),
      [`${tag} one`, `Echo: ${tag} one`, `${tag} two`, `Echo: ${tag} two`],
    );
    return { a, tag, messages };
  }

  const command = (a, body) => a.command("s", body);
  const texts = async (a, sid = "s") => (await a.read(sid, { limit: "200" })).messages.map((m) => m.text);

  test("edit and resend: the turn runs on a new branch and the model sees only its path", T, async () => {
    const { a, tag, messages } = await twoTurns();
    const [one, reOne, two] = messages;
    const edited = await a.admit("s", "p3", `${tag} TWO`, { after: reOne.entryId });
    await a.waitSettled("s", edited);
    const request = h.model.requests(`${tag} TWO`).at(-1);
    assert.deepEqual(seen(request), [`user:${tag} one`, `assistant:Echo: ${tag} one`, `user:${tag} TWO`]);
    const page = (await a.read("s")).messages;
    assert.deepEqual(page.map((m) => m.text), [`${tag} one`, `Echo: ${tag} one`, `${tag} TWO`, `Echo: ${tag} TWO`]);
    assert.deepEqual(page.map((m) => m.parentEntryId), [null, one.entryId, reOne.entryId, page[2].entryId]);
    assert.deepEqual(page[2].branch, { index: 2, count: 2 });
    assert.equal(page[1].branch, undefined);
    // The old branch stays stored: the first answer's children.
    const children = await a.api("GET", `/sessions/s/branches?entryId=${reOne.entryId}`);
    assert.equal(children.status, 200, children.text);
    assert.equal(children.json.count, 2);
    assert.deepEqual(children.json.children.map((c) => [c.text, c.branch]), [
      [two.text, { index: 1, count: 2 }],
      [`${tag} TWO`, { index: 2, count: 2 }],
    ]);
    // `after: ""` edits the first message: a new start.
    const restarted = await a.admit("s", "p4", `${tag} ONE`, { after: "" });
    await a.waitSettled("s", restarted);
    assert.deepEqual(seen(h.model.requests(`${tag} ONE`).at(-1)), [`user:${tag} ONE`]);
    const fresh = (await a.read("s")).messages;
    assert.deepEqual(fresh.map((m) => m.text), [`${tag} ONE`, `Echo: ${tag} ONE`]);
    assert.deepEqual(fresh[0].branch, { index: 2, count: 2 });
    assert.equal(fresh[0].parentEntryId, null);
    // `entryId=""` lists the start's children: both first messages, so a
    // client can switch back to the original one.
    const starts = await a.api("GET", "/sessions/s/branches?entryId=");
    assert.equal(starts.status, 200, starts.text);
    assert.equal(starts.json.count, 2);
    assert.deepEqual(starts.json.children.map((c) => [c.text, c.parentEntryId, c.branch]), [
      [`${tag} one`, null, { index: 1, count: 2 }],
      [`${tag} ONE`, null, { index: 2, count: 2 }],
    ]);
  });

  test("retry answers the user message again beside the old answer; select goes back, with a branch frame", T, async () => {
    const { a, tag, messages } = await twoTurns();
    const [, , two, oldAnswer] = messages;
    const watch = await a.watch("s");
    try {
      await watch.next(); // snapshot
      h.model.scriptFor(`${tag} two`, { text: "a second answer" });
      const retry = await command(a, { type: "retry", requestId: "r1", entryId: two.entryId });
      const retryId = expectAccepted(retry);
      const settlement = await a.waitSettled("s", retryId);
      assert.equal(settlement.terminal, "completed");
      assert.equal(settlement.answer, "a second answer");
      const request = h.model.requests(`${tag} two`).at(-1);
      assert.deepEqual(seen(request), [`user:${tag} one`, `assistant:Echo: ${tag} one`, `user:${tag} two`]);
      // The branch frame comes before the retry's answer.
      const frames = await watch.until((ev) => ev.event === "frame" && ev.data.type === "settled" && ev.data.settlement.commandId === retryId);
      const types = frames.filter((ev) => ev.event === "frame").map((ev) => ev.data.type);
      assert.ok(types.indexOf("branch") < types.indexOf("message"), types.join(", "));
      assert.deepEqual(frames.find((ev) => ev.data?.type === "branch").data, { type: "branch", entryId: two.entryId });
      let page = (await a.read("s")).messages;
      assert.deepEqual(page.map((m) => m.text), [`${tag} one`, `Echo: ${tag} one`, `${tag} two`, "a second answer"]);
      assert.deepEqual(page[3].branch, { index: 2, count: 2 });
      assert.equal(page[3].parentEntryId, two.entryId);
      // Replays and conflicts as for every command.
      assert.equal(expectAccepted(await command(a, { type: "retry", requestId: "r1", entryId: two.entryId })), retryId);
      expectError(await command(a, { type: "retry", requestId: "r1", entryId: messages[0].entryId }), 409, "request_conflict");
      // Select the old answer: the watchers are told to read again.
      expectAccepted(await command(a, { type: "select", requestId: "sel", entryId: oldAnswer.entryId }));
      await watch.until((ev) => ev.event === "frame" && ev.data.type === "branch" && ev.data.entryId === oldAnswer.entryId);
      page = (await a.read("s")).messages;
      assert.deepEqual(page[3], { ...oldAnswer, branch: { index: 1, count: 2 } });
      // The next prompt continues the selected branch.
      const three = await a.admit("s", "p3", `${tag} three`);
      await a.waitSettled("s", three);
      assert.deepEqual(seen(h.model.requests(`${tag} three`).at(-1)).slice(-2), [`assistant:Echo: ${tag} two`, `user:${tag} three`]);
      // The settlement and the queue do not depend on the selected branch.
      assert.equal((await a.waitSettled("s", retryId)).answer, "a second answer");
    } finally {
      await watch.close();
    }
  });

  test("a queued retry is no latest pending prompt and cancels with empty text", T, async () => {
    const { a, tag, messages } = await twoTurns();
    h.model.scriptFor(`${tag} held`, { hang: true });
    const held = await a.admit("s", "held", `${tag} held`);
    await a.waitRunning("s", held);
    const busy = await command(a, { type: "select", requestId: "busy", entryId: messages[0].entryId });
    expectError(busy, 409, "session_busy");
    const retryId = expectAccepted(await command(a, { type: "retry", requestId: "r", entryId: messages[2].entryId }));
    const read = await a.read("s");
    assert.equal(read.pending[0].retry, messages[2].entryId);
    assert.equal((await a.api("GET", "/sessions/s/pending/latest")).json, null);
    const cancelled = await command(a, { type: "cancel", commandId: retryId });
    assert.deepEqual(cancelled.json, { status: "cancelled", commandId: retryId, text: "" });
    await command(a, { type: "cancel", commandId: held });
  });

  test("refusals name the problem; a refused command records nothing", T, async () => {
    const { a, messages } = await twoTurns();
    await a.createSession("other");
    await a.settle("other", "o1", "elsewhere");
    const elsewhere = (await a.read("other")).messages[0].entryId;
    const [, reOne] = messages;
    expectError(await command(a, { type: "retry", requestId: "x", entryId: "msg_never" }), 404, "entry_not_found");
    expectError(await command(a, { type: "retry", requestId: "x", entryId: reOne.entryId }), 400, "entry_not_user");
    expectError(await command(a, { type: "prompt", requestId: "x", text: "t", after: elsewhere }), 400, "entry_not_on_path");
    expectError(await command(a, { type: "select", requestId: "x", entryId: elsewhere }), 400, "entry_not_on_path");
    expectError(await command(a, { type: "prompt", requestId: "x", text: "t", after: reOne.entryId, delivery: "steer" }), 400, "invalid_request");
    expectError(await a.api("GET", "/sessions/s/branches"), 400, "invalid_query");
    expectError(await a.api("GET", "/sessions/s/branches?entryId=msg_never"), 404, "entry_not_found");
    // The requestId is still free.
    expectAccepted(await command(a, { type: "select", requestId: "x", entryId: reOne.entryId }));
  });

  test("a fork shares its base's history, continues on its own, and keeps the base while it lives", T, async () => {
    const { a, tag, messages } = await twoTurns();
    const [, reOne] = messages;
    const fork = await a.api("POST", "/sessions", { sessionId: "f", from: { sessionId: "s", entryId: reOne.entryId } });
    assert.equal(fork.status, 201, fork.text);
    assert.deepEqual(await texts(a, "f"), [`${tag} one`, `Echo: ${tag} one`]);
    const mine = await a.admit("f", "f1", `${tag} forked`);
    await a.waitSettled("f", mine);
    assert.deepEqual(seen(h.model.requests(`${tag} forked`).at(-1)), [`user:${tag} one`, `assistant:Echo: ${tag} one`, `user:${tag} forked`]);
    const page = (await a.read("f")).messages;
    assert.equal(page[2].parentEntryId, reOne.entryId);
    assert.equal(page[2].sequence, 3, "numbered after the base position");
    assert.deepEqual(await texts(a), [`${tag} one`, `Echo: ${tag} one`, `${tag} two`, `Echo: ${tag} two`]);
    expectError(await a.api("DELETE", "/sessions/s"), 409, "session_has_forks");
    expectError(await a.api("POST", "/sessions", { from: { sessionId: "s", entryId: "msg_never" } }), 404, "entry_not_found");
    assert.equal((await a.api("DELETE", "/sessions/f")).status, 204);
    assert.equal((await a.api("DELETE", "/sessions/s")).status, 204);
  });
});

describe("branches through the typed client", () => {
  const h = useWorker({ model: "echo" });

  test("retry, select, branches, prompt after, createSession from", T, async () => {
    const client = createShiitakeClient({
      baseUrl: `http://localhost/agents/agent-${randomUUID()}`,
      fetch: (url, init) => h.mf.dispatchFetch(url, { ...init, headers: { ...init.headers, authorization: `Bearer ${TOKEN}` } }),
    });
    await client.createSession("s");
    const s = client.session("s");
    const settle = async (commandId) => {
      for (;;) {
        const done = await s.readSettlement(commandId, { timeoutMs: 10_000 });
        if (done !== undefined) return done;
      }
    };
    await settle((await s.prompt("one")).commandId);
    const [user, answer] = (await s.read()).messages;
    const retry = await s.retry(user.entryId);
    assert.equal(retry.status, "accepted");
    await settle(retry.commandId);
    const list = await s.branches(user.entryId);
    assert.equal(list.count, 2);
    assert.deepEqual(list.children.map((c) => c.branch.index), [1, 2]);
    await s.select(answer.entryId, { requestId: "sel" });
    assert.equal((await s.read()).messages[1].entryId, answer.entryId);
    await settle((await s.prompt("ONE", { after: "" })).commandId);
    assert.deepEqual((await s.read()).messages.map((m) => m.text), ["ONE", "Echo: ONE"]);
    const { sessionId } = await client.createSession("f", { from: { sessionId: "s", entryId: answer.entryId } });
    assert.deepEqual((await client.session(sessionId).read()).messages.map((m) => m.text), ["one", "Echo: one"]);
    await assert.rejects(s.retry(answer.entryId), (e) => e instanceof ShiitakeError && e.code === "entry_not_user" && e.status === 400);
    await assert.rejects(client.deleteSession("s"), (e) => e instanceof ShiitakeError && e.code === "session_has_forks");
  });
});

describe("branches through the owner API and RPC", () => {
  const h = useWorker({ fixture: "rpc-worker", model: "echo" });

  test("retry, select, readBranches and a fork, in process and over RPC", T, async () => {
    const agentId = `agent-${randomUUID()}`;
    const rpc = async (method, ...args) => (await h.api("POST", `/rpc/${agentId}`, { method, args })).json;
    const owner = async (plan) => (await h.api("POST", `/owner/${agentId}`, plan)).json;
    const settle = async (sid, commandId) => {
      for (;;) {
        const { value } = await rpc("readSettlement", sid, commandId, { timeoutMs: 10_000 });
        if (value !== "undefined") return value;
      }
    };
    await rpc("createSession", "s");
    const { value: p1 } = await rpc("prompt", "s", { requestId: "p1", text: "one" });
    await settle("s", p1.commandId);
    const [user, answer] = (await rpc("readSession", "s", {})).value.messages;
    const { value: retry } = await rpc("retry", "s", { requestId: "r1", entryId: user.entryId });
    await settle("s", retry.commandId);
    assert.equal((await rpc("readBranches", "s", { entryId: user.entryId })).value.count, 2);
    const selected = await owner({ session: "s", op: "select", args: [{ requestId: "sel", entryId: answer.entryId }] });
    assert.equal(selected.value.status, "accepted");
    const kids = await owner({ session: "s", op: "branches", args: [{ entryId: user.entryId, limit: 1 }] });
    assert.equal(kids.value.children.length, 1);
    assert.equal(typeof kids.value.cursor, "string");
    const { value: retried } = await owner({ session: "s", op: "retry", args: [{ requestId: "r2", entryId: user.entryId }] });
    await settle("s", retried.commandId);
    assert.equal((await rpc("readBranches", "s", { entryId: user.entryId })).value.count, 3);
    const fork = await owner({ op: "createSession", args: ["f", { from: { sessionId: "s", entryId: answer.entryId } }] });
    assert.equal(fork.value.sessionId, "f");
    const viaRpc = await rpc("createSession", "g", { from: { sessionId: "s", entryId: user.entryId } });
    assert.deepEqual((await rpc("readSession", "g", {})).value.messages.map((m) => m.text), ["one"]);
    assert.equal(viaRpc.value.sessionId, "g");
    const refused = await rpc("select", "s", { requestId: "x", entryId: "msg_never" });
    assert.equal(refused.error.code, "entry_not_found");
    assert.equal(refused.error.status, 404);
  });
});
