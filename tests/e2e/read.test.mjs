// The bounded Session read: limit, `before` paging, the byte cap.
import assert from "node:assert/strict";
import { test } from "node:test";
import { bytes, expectError, useWorker } from "./helpers.mjs";

const h = useWorker();

const PAGE_BYTES_MAX = 1_048_576;

/** A Session with `n` operator lines "line-00"... (or a custom text). */
async function withLines(n, text = (i) => `line-${String(i).padStart(2, "0")}`) {
  const a = h.agent();
  const sid = await a.createSession("s");
  const ids = [];
  for (let i = 0; i < n; i++) ids.push(await a.admitOperator(sid, `op-${i}`, text(i)));
  return { a, sid, ids };
}

test("limit must be 1..200: 0, 201 or malformed is 400 invalid_query", async () => {
  const { a, sid } = await withLines(1);
  for (const limit of ["0", "201", "-5", "ten", "2.5", ""]) {
    expectError(await a.readRaw(sid, { limit }), 400, "invalid_query");
  }
  assert.equal((await a.read(sid, { limit: "200" })).messages.length, 1);
  assert.equal((await a.read(sid, { limit: "1" })).messages.length, 1);
});

test("a malformed before cursor is 400 invalid_query", async () => {
  const { a, sid } = await withLines(2);
  expectError(await a.readRaw(sid, { before: "not a cursor!" }), 400, "invalid_query");
});

test("a read of an unknown Session is 404 session_not_found", async () => {
  const a = h.agent();
  expectError(await a.readRaw("nope", { limit: "5" }), 404, "session_not_found");
});

test("before paging walks every message: newest page first, each page oldest first, no gaps", async () => {
  const { a, sid, ids } = await withLines(25);
  const pages = await a.readAllPages(sid, 10);
  const walk = pages.map((p) => p.messages.map((m) => m.text));
  const line = (i) => `line-${String(i).padStart(2, "0")}`;
  const range = (lo, hi) => Array.from({ length: hi - lo }, (_, k) => line(lo + k));
  assert.deepEqual(walk, [range(15, 25), range(5, 15), range(0, 5)]);
  const all = pages
    .slice()
    .reverse()
    .flatMap((p) => p.messages);
  assert.deepEqual(
    all.map((m) => m.commandId),
    ids,
  );
  assert.deepEqual(
    all.map((m) => m.entryId),
    ids,
  );
  assert.deepEqual(
    all.map((m) => m.requestId),
    ids.map((_, i) => `op-${i}`),
  );
  for (const m of all) assert.equal(m.role, "operator");
});

test("a page boundary is stable: admissions after the first page do not shift older pages", async () => {
  const { a, sid, ids } = await withLines(6);
  const first = await a.read(sid, { limit: "3" });
  assert.deepEqual(
    first.messages.map((m) => m.commandId),
    ids.slice(3),
  );
  await a.admitOperator(sid, "late", "written after the first page");
  const second = await a.read(sid, { limit: "3", before: first.cursor });
  assert.deepEqual(
    second.messages.map((m) => m.commandId),
    ids.slice(0, 3),
  );
  assert.equal(second.cursor, null);
});

test("default limit is 50", async () => {
  const { a, sid, ids } = await withLines(55);
  const page = await a.read(sid);
  assert.deepEqual(
    page.messages.map((m) => m.commandId),
    ids.slice(5),
  );
  assert.equal(typeof page.cursor, "string");
  const rest = await a.read(sid, { before: page.cursor });
  assert.deepEqual(
    rest.messages.map((m) => m.commandId),
    ids.slice(0, 5),
  );
  assert.equal(rest.cursor, null);
});

test("pending is not paged away by before/limit", async () => {
  const { a, sid } = await withLines(3);
  await a.occupy(sid); // the model never answers: the next prompt stays pending
  const p = await a.admit(sid, "p", "queued");
  const page = await a.read(sid, { limit: "1" });
  assert.equal(page.messages.length, 1);
  assert.deepEqual(
    page.pending.map((x) => x.commandId),
    [p],
  );
});

test("byte cap: a page of ~60 KB messages holds fewer than limit and at most 1 MiB of text", async () => {
  const n = 24; // 24 x 60,000 bytes = 1.44 MB > 1 MiB
  const size = 60_000;
  const { a, sid, ids } = await withLines(n, (i) => `${String(i).padStart(2, "0")}:`.padEnd(size, "x"));
  const pages = await a.readAllPages(sid, 200);
  assert.ok(pages.length >= 2, `expected the byte cap to split ${n} messages, got ${pages.length} page(s)`);
  for (const p of pages) {
    assert.ok(p.messages.length >= 1, "at least one message per page");
    assert.ok(p.messages.length < n);
    const textBytes = p.messages.reduce((s, m) => s + bytes(m.text), 0);
    assert.ok(textBytes <= PAGE_BYTES_MAX, `a page carries ${textBytes} bytes of message text`);
  }
  assert.ok(pages[0].messages.length >= 10, `a 1 MiB page fits at least 10 messages of 60 KB, got ${pages[0].messages.length}`);
  const all = pages
    .slice()
    .reverse()
    .flatMap((p) => p.messages);
  assert.deepEqual(
    all.map((m) => m.commandId),
    ids,
  );
  for (const [i, m] of all.entries()) assert.equal(bytes(m.text), size, `message ${i} came back whole`);
});
