// Sessions: create, list (paged), delete.
import assert from "node:assert/strict";
import { test } from "node:test";
import { describe, expectError, expectStatus, useWorker } from "./helpers.mjs";

const h = useWorker();

test("create with a sessionId answers 201 with that id; a read shows an empty Session", async () => {
  const a = h.agent();
  const res = await a.api("POST", "/sessions", { sessionId: "chat-1" });
  expectStatus(res, 201);
  assert.deepEqual(res.json, { sessionId: "chat-1" });
  const page = await a.read("chat-1");
  assert.equal(page.sessionId, "chat-1");
  assert.deepEqual(page.messages, []);
  assert.deepEqual(page.pending, []);
  assert.equal(page.running, null);
  assert.equal(page.cursor, null);
});

test("create without a sessionId generates distinct ses_ ids", async () => {
  const a = h.agent();
  const ids = new Set();
  for (let i = 0; i < 3; i++) {
    const res = await a.api("POST", "/sessions", {});
    expectStatus(res, 201);
    assert.deepEqual(Object.keys(res.json), ["sessionId"]);
    assert.match(res.json.sessionId, /^ses_[A-Za-z0-9._:-]+$/);
    assert.ok(Buffer.byteLength(res.json.sessionId) <= 128);
    ids.add(res.json.sessionId);
  }
  assert.equal(ids.size, 3);
  for (const id of ids) assert.equal((await a.read(id)).sessionId, id);
});

test("the whole sessionId alphabet and 128 bytes are accepted", async () => {
  const a = h.agent();
  await a.createSession("Az09._:-");
  await a.createSession("x".repeat(128));
  const listed = (await a.listAllSessions(200)).flatMap((p) => p.sessions.map((s) => s.sessionId));
  assert.deepEqual(listed.sort(), ["Az09._:-", "x".repeat(128)].sort());
});

test("a taken sessionId is 409 session_exists and the first Session is untouched", async () => {
  const a = h.agent();
  await a.createSession("dup");
  await a.admit("dup", "r1", "hello");
  expectError(await a.api("POST", "/sessions", { sessionId: "dup" }), 409, "session_exists");
  const queue = await a.queue("dup");
  assert.equal(queue.length, 1);
  assert.equal(queue[0].requestId, "r1");
});

test("an invalid sessionId is 400 invalid_request and creates nothing", async () => {
  const a = h.agent();
  for (const bad of ["", "has space", "slash/inside", "é", "x".repeat(129), "semi;colon", 42, ["a"]]) {
    const res = await a.api("POST", "/sessions", { sessionId: bad });
    expectError(res, 400, "invalid_request");
  }
  const res = await a.api("GET", "/sessions");
  expectStatus(res, 200);
  assert.deepEqual(res.json.sessions, []);
  assert.equal(res.json.cursor, null);
});

test("an unknown field in the create body is 400 invalid_request naming it", async () => {
  const a = h.agent();
  const msg = expectError(await a.api("POST", "/sessions", { sessionId: "s", title: "x" }), 400, "invalid_request");
  assert.match(msg, /title/);
});

test("list pages: limit respected, every Session seen exactly once, cursor null at the end", async () => {
  const a = h.agent();
  const created = [];
  for (let i = 0; i < 7; i++) created.push(await a.createSession(`s-${i}`));
  const pages = await a.listAllSessions(3);
  assert.deepEqual(
    pages.map((p) => p.sessions.length),
    [3, 3, 1],
    "7 Sessions at limit 3 are three pages; the last one says null",
  );
  const seen = pages.flatMap((p) => p.sessions);
  for (const s of seen) {
    assert.equal(typeof s.sessionId, "string");
    assert.ok(typeof s.createdAt === "number" || typeof s.createdAt === "string", JSON.stringify(s));
  }
  const ids = seen.map((s) => s.sessionId);
  assert.equal(new Set(ids).size, ids.length, `a Session listed twice: ${ids}`);
  assert.deepEqual([...ids].sort(), [...created].sort());
});

test("list default limit is 50 and the maximum 200 is accepted", async () => {
  const a = h.agent();
  for (let i = 0; i < 51; i++) await a.createSession(`d-${String(i).padStart(2, "0")}`);
  const first = await a.api("GET", "/sessions");
  expectStatus(first, 200);
  assert.equal(first.json.sessions.length, 50);
  assert.equal(typeof first.json.cursor, "string");
  const rest = await a.api("GET", `/sessions?cursor=${encodeURIComponent(first.json.cursor)}`);
  expectStatus(rest, 200);
  assert.equal(rest.json.sessions.length, 1);
  assert.equal(rest.json.cursor, null);
  const ids = [...first.json.sessions, ...rest.json.sessions].map((s) => s.sessionId);
  assert.equal(new Set(ids).size, 51);
  const all = await a.api("GET", "/sessions?limit=200");
  expectStatus(all, 200);
  assert.equal(all.json.sessions.length, 51);
  assert.equal(all.json.cursor, null);
});

test("list limit out of range or malformed is 400 invalid_query", async () => {
  const a = h.agent();
  await a.createSession("one");
  for (const q of ["limit=201", "limit=0", "limit=-1", "limit=abc", "limit=1.5", "limit=", "limit=1e3"]) {
    expectError(await a.api("GET", `/sessions?${q}`), 400, "invalid_query");
  }
  const ok = await a.api("GET", "/sessions?limit=1");
  expectStatus(ok, 200);
  assert.equal(ok.json.sessions.length, 1);
  assert.equal(ok.json.cursor, null);
});

test("delete answers 204; then read, commands, withdraw and delete are 404 session_not_found", async () => {
  const a = h.agent();
  await a.createSession("gone");
  await a.createSession("kept");
  await a.admit("gone", "r1", "queued before delete");
  const del = await a.api("DELETE", "/sessions/gone");
  expectStatus(del, 204);
  assert.equal(del.text, "");
  expectError(await a.readRaw("gone"), 404, "session_not_found");
  expectError(await a.prompt("gone", "r2", "after delete"), 404, "session_not_found");
  expectError(await a.prompt("gone", "r1", "queued before delete"), 404, "session_not_found");
  expectError(await a.operator("gone", "r3", "after delete"), 404, "session_not_found");
  expectError(await a.abort("gone"), 404, "session_not_found");
  expectError(await a.withdraw("gone", "r1"), 404, "session_not_found");
  expectError(await a.api("DELETE", "/sessions/gone"), 404, "session_not_found");
  const list = await a.api("GET", "/sessions");
  assert.deepEqual(
    list.json.sessions.map((s) => s.sessionId),
    ["kept"],
  );
});

test("delete, read and commands on a Session never created are 404 session_not_found", async () => {
  const a = h.agent();
  expectError(await a.api("DELETE", "/sessions/never"), 404, "session_not_found");
  expectError(await a.readRaw("never"), 404, "session_not_found");
  expectError(await a.prompt("never", "r1", "hi"), 404, "session_not_found");
  expectError(await a.withdraw("never", "r1"), 404, "session_not_found");
  // ...and a failed admission did not create it.
  const list = await a.api("GET", "/sessions");
  assert.deepEqual(list.json.sessions, [], describe(list));
});

test("Sessions belong to one Agent: another agentId does not see them", async () => {
  const a = h.agent();
  const b = h.agent();
  await a.createSession("mine");
  expectError(await b.readRaw("mine"), 404, "session_not_found");
  const list = await b.api("GET", "/sessions");
  assert.deepEqual(list.json.sessions, []);
  await b.createSession("mine"); // not a duplicate in another Agent
});
