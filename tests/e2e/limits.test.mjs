// Limits: text bytes, body bytes, images, the pending queue. The model never
// answers here (the "hold" model): tests about pending prompts occupy the
// Session with a running turn first, so what they admit stays pending.
import assert from "node:assert/strict";
import { test } from "node:test";
import { PNG_1X1, bytes, expectAccepted, expectError, useWorker } from "./helpers.mjs";

const h = useWorker();

const session = () => h.session();

const occupied = () => h.occupied();

test("text: 65,536 UTF-8 bytes are accepted, 65,537 are 400 (bytes, not characters)", async () => {
  const { a, sid } = await occupied();
  const ascii = "a".repeat(65_536);
  const twoByte = "é".repeat(32_768); // 32,768 characters, 65,536 bytes
  const twoByteOver = `${twoByte}a`; // 32,769 characters, 65,537 bytes
  assert.equal(bytes(twoByte), 65_536);
  assert.equal(bytes(twoByteOver), 65_537);
  const c1 = await a.admit(sid, "p-ascii", ascii);
  const c2 = await a.admit(sid, "p-2byte", twoByte);
  expectError(await a.prompt(sid, "p-ascii-over", `${ascii}a`), 400, "invalid_request");
  expectError(await a.prompt(sid, "p-2byte-over", twoByteOver), 400, "invalid_request");
  const o1 = await a.admitOperator(sid, "o-2byte", twoByte);
  expectError(await a.operator(sid, "o-over", twoByteOver), 400, "invalid_request");
  const page = await a.read(sid);
  assert.deepEqual(
    page.pending.map((p) => [p.commandId, bytes(p.text)]),
    [
      [c1, 65_536],
      [c2, 65_536],
    ],
  );
  assert.equal(page.pending[1].text, twoByte);
  assert.deepEqual(
    page.messages.filter((m) => m.role === "operator").map((m) => [m.commandId, m.text === twoByte]),
    [[o1, true]],
  );
});

test("a body over 1,048,576 bytes is 413 payload_too_large; a body just under is read", async () => {
  const { a, sid } = await session();
  const path = `/sessions/${sid}/commands`;
  // Over the cap as a whole body, with otherwise valid JSON.
  const big = JSON.stringify({ type: "prompt", requestId: "big", text: "x".repeat(1_048_577) });
  expectError(await a.api("POST", path, big), 413, "payload_too_large");
  // Exactly 1,048,577 bytes of padding whitespace around a tiny valid command.
  const cmd = JSON.stringify({ type: "prompt", requestId: "padded", text: "hi" });
  expectError(await a.api("POST", path, cmd + " ".repeat(1_048_577 - cmd.length)), 413, "payload_too_large");
  // Exactly 1,048,576 bytes: read, parsed and admitted.
  expectAccepted(await a.api("POST", path, cmd + " ".repeat(1_048_576 - cmd.length)));
  // The cap holds on every route that takes a body.
  expectError(await a.api("POST", "/sessions", `{"sessionId":"x"}${" ".repeat(1_048_576)}`), 413, "payload_too_large");
  expectError(await a.api("POST", `/sessions/${sid}/withdraw`, `{"requestId":"x"}${" ".repeat(1_048_576)}`), 413, "payload_too_large");
  assert.deepEqual(
    (await a.queue(sid)).map((p) => p.requestId),
    ["padded"],
  );
  assert.deepEqual((await a.withdraw(sid, "big")).json, { status: "unknown" }, "a refused body admitted nothing");
});

test("at most 4 images: 5 are 400 invalid_request", async () => {
  const { a, sid } = await occupied();
  const img = { mediaType: "image/png", data: PNG_1X1 };
  const c = await a.admit(sid, "four", "four", { images: [img, img, img, img] });
  expectError(await a.prompt(sid, "five", "five", { images: [img, img, img, img, img] }), 400, "invalid_request");
  assert.deepEqual(
    (await a.pending(sid)).map((p) => [p.commandId, p.images.length]),
    [[c, 4]],
  );
});

test("the 65th pending prompt is 429 queue_full; cancelling one frees a place", async () => {
  const { a, sid } = await occupied();
  const ids = [];
  for (let i = 0; i < 64; i++) ids.push(await a.admit(sid, `r${i}`, `p${i}`));
  expectError(await a.prompt(sid, "r64", "p64"), 429, "queue_full");
  expectError(await a.prompt(sid, "r65", "p65", { delivery: "steer" }), 429, "queue_full");
  // A full queue still replays receipts and still records operator lines.
  assert.equal(expectAccepted(await a.prompt(sid, "r0", "p0")), ids[0]);
  await a.admitOperator(sid, "op", "operator lines are not queued");
  let pending = await a.pending(sid);
  assert.equal(pending.length, 64);
  assert.equal(pending[63].position, 64);
  // A refused prompt left nothing behind: its requestId is free.
  assert.deepEqual((await a.withdraw(sid, "r64")).json, { status: "unknown" });
  await a.cancel(sid, ids[10]);
  const late = await a.admit(sid, "r65", "p65");
  pending = await a.pending(sid);
  assert.equal(pending.length, 64);
  assert.equal(pending[63].commandId, late);
  // Other Sessions are bounded separately.
  await a.createSession("other");
  await a.admit("other", "r0", "p0");
});

test("pending input is bounded at 2,097,152 bytes: 429 queue_full", async () => {
  const { a, sid } = await occupied();
  // Each prompt carries 4 images of 250,000 base64 characters (187,500 bytes
  // decoded): ~1.0 MB of base64 per prompt, under the body cap. Two fit under
  // 2 MiB whether base64 or decoded bytes are counted; a third never does.
  const data = "AAAA".repeat(62_500);
  const images = ["image/png", "image/jpeg", "image/gif", "image/webp"].map((mediaType) => ({ mediaType, data }));
  const c1 = await a.admit(sid, "big-1", "one", { images });
  const c2 = await a.admit(sid, "big-2", "two", { images });
  expectError(await a.prompt(sid, "big-3", "three", { images }), 429, "queue_full");
  // A small prompt still fits.
  const c3 = await a.admit(sid, "small", "small");
  assert.deepEqual(
    (await a.pending(sid)).map((p) => p.commandId),
    [c1, c2, c3],
  );
  // Cancelling frees the bytes.
  await a.cancel(sid, c1);
  await a.admit(sid, "big-3", "three", { images });
});
