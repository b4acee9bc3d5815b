// Request bodies are bounded while they stream: a chunked body (no
// content-length) is counted as it arrives and refused with 413 as soon as it
// passes 1,048,576 bytes, and the sender is stopped, not drained. Sent over a
// real socket (Miniflare listening on a port, node:http writing chunks),
// through the demo Worker's bearer auth and shiitakeApp mount to the Durable
// Object, because dispatchFetch would buffer the body before the Worker saw it.

import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { createServer, request } from "node:http";
import path from "node:path";
import { after, before, test } from "node:test";
import { Miniflare } from "miniflare";
import { DEMO_SCRIPT, eventually, Harness, ROOT, TOKEN, workerOptions } from "./helpers.mjs";

const BODY_BYTES_MAX = 1_048_576;
/** A model answer's bound (src/limits.rs ANSWER_BYTES_MAX). */
const ANSWER_BYTES_MAX = 1_048_576;
const MiB = 1_048_576;
/**
 * What may have been written when the 413 arrives: the bound plus what the
 * sockets buffer (measured: 4.0 to 4.3 MiB on loopback; the whole body,
 * 64 MiB, when the body was read whole before the check).
 */
const SENT_BEFORE_413_MAX = 8 * MiB;

const T = { timeout: 60_000 };

let h;
let origin;
let flood;

before(async () => {
  assert.ok(existsSync(DEMO_SCRIPT), `${path.relative(ROOT, DEMO_SCRIPT)} is missing: run \`bash scripts/build.sh\` first`);
  flood = await startFloodingModel();
  h = new Harness(DEMO_SCRIPT);
  h.mf = new Miniflare({
    ...workerOptions(DEMO_SCRIPT, undefined, { SHIITAKE_MODEL: "openai/flood", OPENAI_BASE_URL: `${flood.origin}/v1`, SHIITAKE_ATTEMPTS_MAX: "1" }),
    host: "127.0.0.1",
    port: 0,
  });
  origin = await h.mf.ready;
});

after(async () => {
  await h?.dispose();
  await flood?.close();
});

/**
 * An OpenAI-compatible endpoint whose streamed answer never ends: text
 * deltas of 16 KiB written as fast as the reader takes them. Records each
 * call's bytes written and whether the client closed the connection.
 */
async function startFloodingModel() {
  const calls = [];
  const server = createServer((req, res) => {
    req.resume();
    const call = { written: 0, closed: false };
    calls.push(call);
    res.writeHead(200, { "content-type": "text/event-stream" });
    const line = `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: "x".repeat(16 * 1024) }, finish_reason: null }] })}\n\n`;
    const pump = () => {
      while (!call.closed) {
        call.written += line.length;
        if (!res.write(line)) return void res.once("drain", pump);
      }
    };
    res.on("close", () => (call.closed = true));
    pump();
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    origin: `http://127.0.0.1:${server.address().port}`,
    calls,
    close: () => new Promise((resolve) => (server.closeAllConnections(), server.close(resolve))),
  };
}

/**
 * POSTs a chunked body (node:http sends no content-length when none is set)
 * of `total` bytes, `chunk` repeated (the last write cut to fit), honouring
 * backpressure, and stops writing once the answer arrives. Keeps the socket
 * `lingerMs` after the answer to see whether the server takes more. Resolves
 * `{status, json, sentAtAnswer, sentTotal, socketError}`.
 */
async function streamBody(urlPath, options) {
  // As in streamExact: a reset that reaches the client before it has read
  // the 413 discards the answer (TCP, not the server); such a send is
  // repeated, at most 3 times, and every attempt still had to be stopped.
  for (let attempt = 1; ; attempt++) {
    try {
      return await streamBodyOnce(urlPath, options);
    } catch (error) {
      if (attempt >= 3 || !["ECONNRESET", "EPIPE"].includes(error.code)) throw error;
      assert.ok(error.sent <= SENT_BEFORE_413_MAX, `the connection was reset only after ${error.sent} bytes were sent`);
    }
  }
}

function streamBodyOnce(urlPath, { total, chunk, lingerMs = 0 }) {
  return new Promise((resolve, reject) => {
    let sent = 0;
    let answered = false;
    let socketError;
    const req = request(new URL(urlPath, origin), {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    });
    req.on("error", (e) => {
      socketError = e.code ?? String(e);
      e.sent = sent;
      if (!answered) reject(e);
    });
    req.on("response", (res) => {
      answered = true;
      const sentAtAnswer = sent;
      const parts = [];
      res.on("data", (d) => parts.push(d));
      res.on("end", () =>
        setTimeout(() => {
          req.destroy();
          const text = Buffer.concat(parts).toString("utf8");
          resolve({ status: res.statusCode, json: JSON.parse(text), sentAtAnswer, sentTotal: sent, socketError });
        }, lingerMs),
      );
      res.on("error", reject);
    });
    assert.equal(req.getHeader("content-length"), undefined);
    const pump = () => {
      while (socketError === undefined && sent < total) {
        if (answered && lingerMs === 0) return;
        const piece = chunk.subarray(0, Math.min(chunk.length, total - sent));
        sent += piece.length;
        if (!req.write(piece)) return void req.once("drain", pump);
      }
      if (sent >= total) req.end();
    };
    pump();
  });
}

/** A prompt command padded with trailing JSON whitespace to exactly `size` bytes, as one Buffer. */
function promptOfSize(requestId, size) {
  const json = Buffer.from(JSON.stringify({ type: "prompt", requestId, text: "hello" }));
  const body = Buffer.alloc(size, 0x20);
  json.copy(body);
  return body;
}

/** Streams `body` in 64 KiB chunks, chunked transfer encoding. */
async function streamExact(urlPath, body) {
  // A server that answers 413 and closes with the chunked terminator still
  // unread resets the connection, and the reset can discard the answer the
  // client has not read yet (TCP, not the server): such a send is repeated,
  // at most 3 times; a refused body is refused again, a fitting one never
  // meets this.
  for (let attempt = 1; ; attempt++) {
    try {
      return await streamOnce(urlPath, body);
    } catch (error) {
      if (attempt >= 3 || !["ECONNRESET", "EPIPE"].includes(error.code)) throw error;
    }
  }
}

function streamOnce(urlPath, body) {
  return new Promise((resolve, reject) => {
    const req = request(new URL(urlPath, origin), {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    });
    req.on("error", reject);
    req.on("response", (res) => {
      const parts = [];
      res.on("data", (d) => parts.push(d));
      res.on("end", () => resolve({ status: res.statusCode, json: JSON.parse(Buffer.concat(parts).toString("utf8")) }));
    });
    (async () => {
      for (let at = 0; at < body.length; at += 64 * 1024) {
        if (!req.write(body.subarray(at, at + 64 * 1024))) await new Promise((r) => req.once("drain", r));
      }
      req.end();
    })().catch(reject);
  });
}

test("a 64 MiB chunked body is refused with 413 after at most a few MiB, and the sender is stopped", T, async () => {
  const { a, sid } = await h.session();
  const res = await streamBody(`/agents/${a.id}/sessions/${sid}/commands`, {
    total: 64 * MiB,
    chunk: Buffer.alloc(64 * 1024, 0x20),
    lingerMs: 1000,
  });
  assert.equal(res.status, 413, JSON.stringify(res));
  assert.equal(res.json.error.code, "payload_too_large");
  assert.match(res.json.error.message, /1048576 bytes/);
  assert.ok(res.sentAtAnswer > BODY_BYTES_MAX, `answered before the bound was passed: ${res.sentAtAnswer} bytes`);
  assert.ok(res.sentAtAnswer <= SENT_BEFORE_413_MAX, `413 after ${res.sentAtAnswer} bytes were sent (at most ${SENT_BEFORE_413_MAX})`);
  // Kept writing for a second after the answer: the server took no more
  // than the socket buffers (it does not drain the rest of the body).
  assert.ok(res.sentTotal <= SENT_BEFORE_413_MAX, `the server kept reading: ${res.sentTotal} bytes sent in all`);
});

test("one chunk larger than the whole bound is refused too", T, async () => {
  const { a, sid } = await h.session();
  const res = await streamBody(`/agents/${a.id}/sessions/${sid}/commands`, { total: 16 * MiB, chunk: Buffer.alloc(4 * MiB, 0x20) });
  assert.equal(res.status, 413, JSON.stringify(res));
  assert.equal(res.json.error.code, "payload_too_large");
  assert.ok(res.sentAtAnswer <= SENT_BEFORE_413_MAX + 4 * MiB, `413 after ${res.sentAtAnswer} bytes`);
});

test("a chunked body of exactly 1,048,576 bytes is read; one byte more is 413", T, async () => {
  const { a, sid } = await h.session();
  const commands = `/agents/${a.id}/sessions/${sid}/commands`;
  const fits = await streamExact(commands, promptOfSize("fits", BODY_BYTES_MAX));
  assert.equal(fits.status, 200, JSON.stringify(fits.json));
  assert.equal(fits.json.status, "accepted");
  const over = await streamExact(commands, promptOfSize("over", BODY_BYTES_MAX + 1));
  assert.equal(over.status, 413, JSON.stringify(over.json));
  assert.equal(over.json.error.code, "payload_too_large");
  // Only the body that fit was admitted (withdraw never cancels; it fences
  // a requestId that admitted nothing).
  assert.deepEqual((await a.withdraw(sid, "fits")).json, { status: "accepted", commandId: fits.json.commandId });
  assert.deepEqual((await a.withdraw(sid, "over")).json, { status: "unknown" });
  // Every body-reading route is bounded the same way.
  const create = await streamExact(`/agents/${a.id}/sessions`, Buffer.from(`{"sessionId":"x"}${" ".repeat(BODY_BYTES_MAX)}`));
  assert.equal(create.status, 413, JSON.stringify(create.json));
  const withdraw = await streamExact(`/agents/${a.id}/sessions/${sid}/withdraw`, Buffer.from(`{"requestId":"y"}${" ".repeat(BODY_BYTES_MAX)}`));
  assert.equal(withdraw.status, 413, JSON.stringify(withdraw.json));
});

test("a model answer past its bound fails the call and closes the provider's stream", T, async () => {
  const { a, sid } = await h.session();
  const calls = flood.calls.length;
  const commandId = await a.admit(sid, "flood", "answer forever");
  const settlement = await a.waitSettled(sid, commandId, { boundMs: 30_000 });
  assert.equal(settlement.terminal, "failed", JSON.stringify(settlement));
  assert.match(settlement.diagnostic, /exceeds 1048576 bytes/);
  const call = flood.calls[calls];
  assert.ok(call, "the model was never called");
  // The reader is cancelled when the bound is passed: the provider sees its
  // connection closed at once, not when the response is garbage collected.
  await eventually(() => call.closed, { timeoutMs: 5000, what: "the provider's connection to close" });
  assert.ok(call.written > ANSWER_BYTES_MAX, `only ${call.written} bytes were streamed`);
  assert.ok(call.written <= SENT_BEFORE_413_MAX + ANSWER_BYTES_MAX, `the provider wrote ${call.written} bytes`);
});
