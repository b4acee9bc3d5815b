// Host metadata and author identity end to end (seed "Host metadata"):
// the README's multi-author host (tests/e2e/fixtures/multi-author-worker.mjs)
// with a metadata schema and `identityPath = $.author.id`; two authors share
// one Session.
import assert from "node:assert/strict";
import { test } from "node:test";
import { expectAccepted, expectError, expectStatus, useWorker } from "./helpers.mjs";

const USERS = { "token-ada": { id: "ada", name: "Ada" }, "token-bob": { id: "bob", name: "Bob" }, "token-eve": { id: 7, name: "Eve" } };
const SCHEMA = {
  type: "object",
  required: ["author"],
  properties: { author: { type: "object", required: ["id", "name"], properties: { id: { type: "string" }, name: { type: "string" } } } },
};

const h = useWorker({
  fixture: "multi-author-worker",
  bindings: {
    SHIITAKE_META_SCHEMA: JSON.stringify(SCHEMA),
    SHIITAKE_IDENTITY_PATH: "$.author.id",
    SHIITAKE_USERS: JSON.stringify(USERS),
  },
});

const as = (token) => ({ token });
let n = 0;
const agentPath = () => `/agents/identity-${n++}`;

async function twoAuthors() {
  const base = agentPath();
  expectStatus(await h.api("POST", `${base}/sessions`, { sessionId: "s" }, as("token-ada")), 201);
  const send = (token, requestId, text, extra = {}) =>
    h.api("POST", `${base}/sessions/s/commands`, { type: "prompt", requestId, text, ...extra }, as(token));
  // Occupies the Session (the held model never answers), so the rest queue.
  expectAccepted(await send("token-ada", "occupier", "runs"));
  return { base, send };
}

test("every message and pending prompt carries its author's metadata; a forged header is ignored", async () => {
  const { base, send } = await twoAuthors();
  const forged = { "x-shiitake-meta": JSON.stringify({ author: { id: "bob", name: "Mallory" } }) };
  const id = expectAccepted(await h.api("POST", `${base}/sessions/s/commands`, { type: "prompt", requestId: "f", text: "hi" }, { token: "token-ada", headers: forged }));
  const read = (await h.api("GET", `${base}/sessions/s`, undefined, as("token-ada"))).json;
  const mine = read.pending.find((p) => p.commandId === id);
  assert.deepEqual(mine.meta, { author: { id: "ada", name: "Ada" } }, "the host's metadata, not the client's header");
  assert.deepEqual(read.messages[0].meta, { author: { id: "ada", name: "Ada" } }, "the running prompt's user message too");
  // The same requestId from another author is a conflict (metadata is part of the input).
  expectError(await send("token-bob", "f", "hi"), 409, "request_conflict");
});

test("metadata that breaks the host's schema is refused and writes nothing", async () => {
  const { base, send } = await twoAuthors();
  expectError(await send("token-eve", "e1", "hi"), 400, "invalid_meta");
  const read = (await h.api("GET", `${base}/sessions/s`, undefined, as("token-ada"))).json;
  assert.equal(read.pending.length, 0);
  assert.deepEqual((await h.api("POST", `${base}/sessions/s/withdraw`, { requestId: "e1" }, as("token-ada"))).json, { status: "unknown" });
});

test("latestPending answers each author's own newest pending prompt", async () => {
  const { base, send } = await twoAuthors();
  const a1 = expectAccepted(await send("token-ada", "a1", "ada one"));
  const b1 = expectAccepted(await send("token-bob", "b1", "bob one"));
  const a2 = expectAccepted(await send("token-ada", "a2", "ada two", { delivery: "steer" }));
  const latest = async (token) => {
    const res = await h.api("GET", `${base}/sessions/s/pending/latest`, undefined, as(token));
    expectStatus(res, 200);
    return res.json;
  };
  const ada = await latest("token-ada");
  assert.equal(ada.commandId, a2);
  assert.equal(ada.text, "ada two");
  assert.equal(ada.delivery, "steer");
  assert.deepEqual(ada.meta.author, { id: "ada", name: "Ada" });
  assert.equal((await latest("token-bob")).commandId, b1);
  expectStatus(await h.api("POST", `${base}/sessions/s/commands`, { type: "cancel", commandId: a2, onlyIfPending: true }, as("token-ada")), 200);
  assert.equal((await latest("token-ada")).commandId, a1);
});

test("an author cannot cancel another author's work; their own, yes, with their metadata on the settlement", async () => {
  const { base, send } = await twoAuthors();
  const a1 = expectAccepted(await send("token-ada", "a1", "ada one"));
  const b1 = expectAccepted(await send("token-bob", "b1", "bob one"));
  const cancel = (token, commandId) => h.api("POST", `${base}/sessions/s/commands`, { type: "cancel", commandId }, as(token));
  expectError(await cancel("token-bob", a1), 403, "not_owner");
  assert.equal((await cancel("token-bob", b1)).json.status, "cancelled");
  expectError(await cancel("token-ada", b1), 403, "not_owner");
  const s = await h.api("GET", `${base}/sessions/s/settlement?commandId=${b1}`, undefined, as("token-ada"));
  assert.equal(s.json.terminal, "cancelled");
  assert.deepEqual(s.json.meta, { author: { id: "bob", name: "Bob" } }, "the cancellation's metadata");
  const pending = (await h.api("GET", `${base}/sessions/s`, undefined, as("token-ada"))).json.pending;
  assert.deepEqual(pending.map((p) => p.commandId), [a1], "ada's prompt is untouched");
});
