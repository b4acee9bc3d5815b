// Admission: receipts, replays, conflicts, requestId bounds, operator lines,
// the FIFO pending queue, and Session-scoped requestIds.
//
// The model never answers here (startWorker's "hold" model): a Session's
// first prompt becomes its running turn and stays so. Tests about `pending`
// occupy the Session first (`a.occupy`), so the prompts they admit queue.
import assert from "node:assert/strict";
import { test } from "node:test";
import { PNG_1X1, bytes, expectAccepted, expectError, expectStatus, useWorker } from "./helpers.mjs";

const h = useWorker();

const session = () => h.session();

const occupied = () => h.occupied();

/** The Session's messages other than the occupier's `user` message. */
const others = (page, occupier) => page.messages.filter((m) => m.commandId !== occupier);

test("a prompt answers 200 {status:accepted, commandId} and waits in pending", async () => {
  const { a, sid, occupier } = await occupied();
  const res = await a.prompt(sid, "req-1", "hello");
  const commandId = expectAccepted(res);
  const page = await a.read(sid);
  assert.equal(page.running?.commandId, occupier, "the running turn never ends: prompts behind it stay queued");
  assert.equal(page.pending.length, 1);
  const p = page.pending[0];
  assert.equal(p.commandId, commandId);
  assert.equal(p.requestId, "req-1");
  assert.equal(p.text, "hello");
  assert.equal(p.delivery, "followUp");
  assert.equal(p.position, 1);
  assert.ok(p.acceptedAt !== undefined && p.acceptedAt !== null, JSON.stringify(p));
  assert.equal(p.meta ?? null, null, "no host metadata was sent");
  assert.deepEqual(others(page, occupier), [], "a queued prompt is not a transcript message yet");
});

test("the same requestId and input replays the identical receipt and queues nothing new", async () => {
  const { a, sid } = await occupied();
  const first = await a.prompt(sid, "req-1", "hello", { images: [{ mediaType: "image/png", data: PNG_1X1 }], delivery: "steer" });
  const commandId = expectAccepted(first);
  for (let i = 0; i < 3; i++) {
    const again = await a.prompt(sid, "req-1", "hello", { images: [{ mediaType: "image/png", data: PNG_1X1 }], delivery: "steer" });
    expectStatus(again, 200);
    assert.deepEqual(again.json, first.json);
  }
  const pending = await a.pending(sid);
  assert.deepEqual(
    pending.map((p) => p.commandId),
    [commandId],
  );
  assert.deepEqual(pending[0].images, [{ mediaType: "image/png", data: PNG_1X1 }]);
  assert.equal(pending[0].delivery, "steer");
});

test("an omitted delivery and an explicit followUp are the same input", async () => {
  const { a, sid } = await occupied();
  const commandId = await a.admit(sid, "req-1", "hello");
  const again = await a.prompt(sid, "req-1", "hello", { delivery: "followUp" });
  assert.equal(expectAccepted(again), commandId);
  assert.equal((await a.pending(sid)).length, 1);
});

test("other input under an admitted requestId is 409 request_conflict", async () => {
  const { a, sid, occupier } = await occupied();
  const img = { mediaType: "image/png", data: PNG_1X1 };
  const commandId = await a.admit(sid, "req-1", "hello", { images: [img] });
  const conflicts = [
    { type: "prompt", requestId: "req-1", text: "hello!", images: [img] },
    { type: "prompt", requestId: "req-1", text: "hello", images: [img], delivery: "steer" },
    { type: "prompt", requestId: "req-1", text: "hello" },
    { type: "prompt", requestId: "req-1", text: "hello", images: [img, img] },
    { type: "prompt", requestId: "req-1", text: "hello", images: [{ mediaType: "image/gif", data: PNG_1X1 }] },
    { type: "operator", requestId: "req-1", text: "hello" },
  ];
  for (const cmd of conflicts) {
    expectError(await a.command(sid, cmd), 409, "request_conflict");
  }
  const pending = await a.pending(sid);
  assert.deepEqual(
    pending.map((p) => [p.commandId, p.text]),
    [[commandId, "hello"]],
  );
  assert.deepEqual(others(await a.read(sid), occupier), [], "no operator line was recorded");
});

test("an operator requestId conflicts with a different operator text or a prompt", async () => {
  const { a, sid } = await session();
  const commandId = await a.admitOperator(sid, "op-1", "note");
  assert.equal(expectAccepted(await a.operator(sid, "op-1", "note")), commandId);
  expectError(await a.operator(sid, "op-1", "other note"), 409, "request_conflict");
  expectError(await a.prompt(sid, "op-1", "note"), 409, "request_conflict");
  assert.deepEqual(await a.pending(sid), []);
  assert.equal((await a.read(sid)).messages.length, 1);
});

test("requestId must be non-empty and at most 256 UTF-8 bytes", async () => {
  const { a, sid } = await session();
  expectError(await a.prompt(sid, "", "x"), 400, "invalid_request");
  expectError(await a.operator(sid, "", "x"), 400, "invalid_request");

  const ascii256 = "a".repeat(256);
  const ascii257 = "a".repeat(257);
  const euro256 = "€".repeat(85) + "a"; // 86 characters, 256 bytes
  const euro257 = "€".repeat(85) + "ab"; // 87 characters, 257 bytes
  assert.equal(bytes(euro256), 256);
  assert.equal(bytes(euro257), 257);

  const okAscii = await a.admit(sid, ascii256, "one");
  const okEuro = await a.admit(sid, euro256, "two");
  expectError(await a.prompt(sid, ascii257, "three"), 400, "invalid_request");
  expectError(await a.prompt(sid, euro257, "four"), 400, "invalid_request");
  expectError(await a.operator(sid, euro257, "five"), 400, "invalid_request");
  expectError(await a.withdraw(sid, euro257), 400, "invalid_request");

  assert.deepEqual(
    (await a.queue(sid)).map((p) => [p.commandId, p.requestId]),
    [
      [okAscii, ascii256],
      [okEuro, euro256],
    ],
  );
});

test("an operator line is recorded in the transcript at once with requestId and commandId", async () => {
  const { a, sid } = await session();
  const commandId = await a.admitOperator(sid, "op-1", "the operator speaks");
  const page = await a.read(sid);
  assert.deepEqual(page.pending, [], "an operator line is not queued");
  assert.equal(page.messages.length, 1);
  const m = page.messages[0];
  assert.equal(m.role, "operator");
  assert.equal(m.text, "the operator speaks");
  assert.equal(m.requestId, "op-1");
  assert.equal(m.commandId, commandId);
  assert.equal(m.entryId, commandId, "an operator line's commandId is its durable entry id");
  assert.ok(m.createdAt !== undefined && m.createdAt !== null);
});

test("operator lines keep their order and do not disturb the pending queue", async () => {
  const { a, sid, occupier } = await occupied();
  const p1 = await a.admit(sid, "p1", "first prompt");
  const o1 = await a.admitOperator(sid, "o1", "line one");
  const p2 = await a.admit(sid, "p2", "second prompt");
  const o2 = await a.admitOperator(sid, "o2", "line two");
  const page = await a.read(sid);
  assert.deepEqual(
    others(page, occupier).map((m) => [m.role, m.commandId, m.text]),
    [
      ["operator", o1, "line one"],
      ["operator", o2, "line two"],
    ],
  );
  assert.deepEqual(
    page.pending.map((p) => [p.commandId, p.position]),
    [
      [p1, 1],
      [p2, 2],
    ],
  );
});

test("pending lists prompts in FIFO order with requestId, text, delivery and 1-based position", async () => {
  const { a, sid } = await occupied();
  const admitted = [];
  for (let i = 0; i < 6; i++) {
    const requestId = `req-${i}`;
    const text = `prompt number ${i}`;
    const delivery = i === 5 ? "steer" : undefined;
    admitted.push({ commandId: await a.admit(sid, requestId, text, delivery ? { delivery } : {}), requestId, text });
  }
  const ids = admitted.map((x) => x.commandId);
  assert.equal(new Set(ids).size, 6, "every admission gets its own commandId");
  const pending = await a.pending(sid);
  assert.deepEqual(
    pending.map((p) => ({ commandId: p.commandId, requestId: p.requestId, text: p.text, position: p.position, delivery: p.delivery })),
    admitted.map((x, i) => ({ ...x, position: i + 1, delivery: i === 5 ? "steer" : "followUp" })),
  );
});

test("a prompt needs text or an image; an image-only prompt is accepted", async () => {
  const { a, sid } = await occupied();
  expectError(await a.prompt(sid, "r1", ""), 400, "invalid_request");
  expectError(await a.prompt(sid, "r2", "", { images: [] }), 400, "invalid_request");
  const commandId = await a.admit(sid, "r3", "", { images: [{ mediaType: "image/jpeg", data: PNG_1X1 }] });
  const pending = await a.pending(sid);
  assert.deepEqual(
    pending.map((p) => [p.commandId, p.requestId, p.text]),
    [[commandId, "r3", ""]],
  );
  assert.deepEqual(pending[0].images, [{ mediaType: "image/jpeg", data: PNG_1X1 }]);
});

test("every image media type is accepted; another type or non-base64 data is 400", async () => {
  const { a, sid } = await occupied();
  const images = ["image/png", "image/jpeg", "image/gif", "image/webp"].map((mediaType) => ({ mediaType, data: PNG_1X1 }));
  await a.admit(sid, "all-four", "see these", { images });
  assert.deepEqual((await a.pending(sid))[0].images, images);
  expectError(await a.prompt(sid, "bmp", "x", { images: [{ mediaType: "image/bmp", data: PNG_1X1 }] }), 400, "invalid_request");
  expectError(await a.prompt(sid, "b64", "x", { images: [{ mediaType: "image/png", data: "not base64!" }] }), 400, "invalid_request");
  expectError(await a.prompt(sid, "nodata", "x", { images: [{ mediaType: "image/png" }] }), 400, "invalid_request");
  const msg = expectError(
    await a.prompt(sid, "extra", "x", { images: [{ mediaType: "image/png", data: PNG_1X1, url: "http://x" }] }),
    400,
    "invalid_request",
  );
  assert.match(msg, /url/);
  assert.equal((await a.pending(sid)).length, 1);
});

test("requestIds are Session-scoped: the same requestId in two Sessions is two commands", async () => {
  const a = h.agent();
  await a.createSession("one");
  await a.createSession("two");
  const c1 = await a.admit("one", "shared", "hello");
  const c2 = await a.admit("two", "shared", "a different text is no conflict here");
  assert.notEqual(c1, c2);
  assert.deepEqual(
    (await a.queue("one")).map((p) => [p.commandId, p.text]),
    [[c1, "hello"]],
  );
  assert.deepEqual(
    (await a.queue("two")).map((p) => [p.commandId, p.text]),
    [[c2, "a different text is no conflict here"]],
  );
  // Each Session replays its own receipt.
  assert.equal(expectAccepted(await a.prompt("one", "shared", "hello")), c1);
  assert.equal(expectAccepted(await a.prompt("two", "shared", "a different text is no conflict here")), c2);
});

test("a replay after other admissions still answers the original receipt", async () => {
  const { a, sid } = await session();
  const c1 = await a.admit(sid, "r1", "one");
  await a.admit(sid, "r2", "two");
  await a.admitOperator(sid, "r3", "three");
  assert.equal(expectAccepted(await a.prompt(sid, "r1", "one")), c1);
  assert.deepEqual(
    (await a.queue(sid)).map((p) => p.requestId),
    ["r1", "r2"],
  );
});
