// The host's metadata rules as code (`ShiitakeDO#meta()`, js/meta-schema.mjs): a
// Zod 4 schema validated in the shim (its output stored, its refusal a 400
// naming the path, identityPath binding authors), the same rules as a JSON
// Schema object, and the refusals (asynchronous schema, unknown key,
// meta() together with the env's settings). Fixture:
// tests/e2e/fixtures/meta-worker.mjs.
import assert from "node:assert/strict";
import { test } from "node:test";
import { expectAccepted, expectError, expectStatus, useWorker } from "./helpers.mjs";

const USERS = { "token-ada": { id: "ada", name: "Ada" }, "token-bob": { id: "bob", name: "Bob" }, "token-eve": { id: 7, name: "Eve" } };

const h = useWorker({ fixture: "meta-worker", bindings: { SHIITAKE_USERS: JSON.stringify(USERS) } });
// The same host with an env identity path as well: refused.
const both = useWorker({ fixture: "meta-worker", model: false, bindings: { SHIITAKE_USERS: JSON.stringify(USERS), SHIITAKE_IDENTITY_PATH: "$.author.id" } });

const as = (token) => ({ token });
let n = 0;

async function twoAuthors(prefix) {
  const base = `/agents/${prefix}-${n++}`;
  expectStatus(await h.api("POST", `${base}/sessions`, { sessionId: "s" }, as("token-ada")), 201);
  const send = (token, requestId, text) => h.api("POST", `${base}/sessions/s/commands`, { type: "prompt", requestId, text }, as(token));
  // Occupies the Session (the held model never answers), so the rest queue.
  expectAccepted(await send("token-ada", "occupier", "runs"));
  return { base, send };
}

test("a Zod 4 schema: its output is what is stored; a breaking value is 400 invalid_meta naming the path; identityPath binds cancel to its author", async () => {
  const { base, send } = await twoAuthors("zod");
  const a1 = expectAccepted(await send("token-ada", "a1", "ada one"));
  const b1 = expectAccepted(await send("token-bob", "b1", "bob one"));
  const read = (await h.api("GET", `${base}/sessions/s`, undefined, as("token-ada"))).json;
  assert.deepEqual(read.messages[0].meta, { author: { id: "ada", name: "Ada" }, tags: [] }, "Zod's output: `extra` stripped, `tags` defaulted");
  assert.deepEqual(read.pending.find((p) => p.commandId === b1).meta, { author: { id: "bob", name: "Bob" }, tags: [] });

  const why = expectError(await send("token-eve", "e1", "hi"), 400, "invalid_meta");
  assert.match(why, /\$\.author\.id/, why);
  assert.match(why, /host metadata does not match the host's schema/, why);
  assert.equal((await h.api("GET", `${base}/sessions/s`, undefined, as("token-ada"))).json.pending.length, 2, "nothing written");

  const cancel = (token, commandId) => h.api("POST", `${base}/sessions/s/commands`, { type: "cancel", commandId }, as(token));
  expectError(await cancel("token-bob", a1), 403, "not_owner");
  assert.equal((await cancel("token-bob", b1)).json.status, "cancelled");
  const s = await h.api("GET", `${base}/sessions/s/settlement?commandId=${b1}`, undefined, as("token-ada"));
  assert.deepEqual(s.json.meta, { author: { id: "bob", name: "Bob" }, tags: [] }, "the cancellation's metadata, through the schema");
  assert.equal((await h.api("GET", `${base}/sessions/s/pending/latest`, undefined, as("token-ada"))).json.commandId, a1);
});

test("a JSON Schema object from meta() is the core's validation, as SHIITAKE_META_SCHEMA's", async () => {
  const { base, send } = await twoAuthors("json");
  const a1 = expectAccepted(await send("token-ada", "a1", "ada one"));
  const read = (await h.api("GET", `${base}/sessions/s`, undefined, as("token-ada"))).json;
  assert.deepEqual(read.pending.find((p) => p.commandId === a1).meta, { author: { id: "ada", name: "Ada" }, extra: "from the middleware" }, "stored as sent (canonical)");
  const why = expectError(await send("token-eve", "e1", "hi"), 400, "invalid_meta");
  assert.match(why, /\/author\/id/, why);
  expectError(await h.api("POST", `${base}/sessions/s/commands`, { type: "cancel", commandId: a1 }, as("token-bob")), 403, "not_owner");
});

test("refused at startup: an asynchronous Standard Schema, an unknown key; both name why", async () => {
  const asyncWhy = expectError(await h.api("POST", `/agents/async-${n++}/sessions`, { sessionId: "s" }, as("token-ada")), 503, "host_misconfigured");
  assert.match(asyncWhy, /meta\(\)\.schema: the schema is asynchronous/, asyncWhy);
  const unknownWhy = expectError(await h.api("POST", `/agents/unknown-${n++}/sessions`, { sessionId: "s" }, as("token-ada")), 503, "host_misconfigured");
  assert.match(unknownWhy, /meta\(\)\.identityPth: unknown key `identityPth`; known: schema, identityPath/, unknownWhy);
});

test("a schema that turns asynchronous only on real metadata refuses it (503) and stores nothing", async () => {
  const base = `/agents/zodasync-${n++}`;
  expectStatus(await h.api("POST", `${base}/sessions`, { sessionId: "s" }, as("token-ada")), 201);
  const why = expectError(await h.api("POST", `${base}/sessions/s/commands`, { type: "prompt", requestId: "r", text: "hi" }, as("token-ada")), 503, "host_misconfigured");
  assert.match(why, /asynchronous/, why);
  const read = (await h.api("GET", `${base}/sessions/s`, undefined, as("token-ada"))).json;
  assert.equal(read.messages.length, 0);
  assert.equal(read.pending.length, 0);
});

test("meta() together with SHIITAKE_IDENTITY_PATH is refused, naming both", async () => {
  const why = expectError(await both.api("POST", `/agents/zod-${n++}/sessions`, { sessionId: "s" }, as("token-ada")), 503, "host_misconfigured");
  assert.match(why, /meta\(\) and sets SHIITAKE_IDENTITY_PATH/, why);
  // An Agent whose host returns no meta() keeps the env's rules.
  expectStatus(await both.api("POST", `/agents/plain-${n++}/sessions`, { sessionId: "s" }, as("token-ada")), 201);
});
