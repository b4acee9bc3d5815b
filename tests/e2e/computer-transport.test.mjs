// The Computer transport (js/computer.mjs, protocol in docs/computers.md)
// between two Workers in Miniflare: a host Worker
// (tests/e2e/fixtures/computer-host-worker.mjs) calls serviceComputer over a
// service binding to a peer acting as Computers
// (tests/e2e/fixtures/computer-worker.mjs). The advertisement and replies
// come back as text; a provider's {error}, a non-2xx, a redirect and an
// oversized body are errors naming what happened; an abort or a passed
// deadline reaches the peer; the bearer credential never appears in a
// message. The URL form (global fetch) runs in Node against a local server.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import http from "node:http";
import path from "node:path";
import { after, before, test } from "node:test";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, eventually } from "./helpers.mjs";
import { COMPUTER_RESPONSE_BYTES_MAX, serviceComputer } from "../../js/computer.mjs";

const TOKEN = "computer-bearer-5e1d7c2b-secret";
let mf;
let peer;

before(async () => {
  mf = new Miniflare({
    workers: [
      {
        name: "host",
        modules: true,
        modulesRoot: ROOT,
        scriptPath: path.join(ROOT, "tests/e2e/fixtures/computer-host-worker.mjs"),
        compatibilityDate: COMPATIBILITY_DATE,
        serviceBindings: { COMPUTER: "computer" },
      },
      {
        name: "computer",
        modules: true,
        modulesRoot: ROOT,
        scriptPath: path.join(ROOT, "tests/e2e/fixtures/computer-worker.mjs"),
        compatibilityDate: COMPATIBILITY_DATE,
        // request.signal fires when the caller goes away.
        compatibilityFlags: ["enable_request_signal"],
        bindings: { COMPUTER_TOKEN: TOKEN },
      },
    ],
  });
  await mf.ready;
  peer = await mf.getWorker("computer");
});

after(async () => {
  await mf?.dispose();
});

async function host(route, body) {
  const res = await mf.dispatchFetch(`http://host${route}`, { method: "POST", body: JSON.stringify(body) });
  assert.equal(res.status, 200);
  return res.json();
}

const describe = (path, extra = {}) => host("/describe", { path, ...extra });

/** A call through the host: `{reply (parsed), ms}`. */
async function call(path, operation, args, extra = {}) {
  const out = await host("/call", { path, operation, args, ...extra });
  return { reply: JSON.parse(out.reply), ms: out.ms };
}

const context = () => ({ executionId: `x-${randomUUID()}`, sessionId: "s-1", commandId: "c-1" });

async function peerState(route) {
  const res = await peer.fetch(`http://computer${route}`);
  assert.equal(res.status, 200);
  return res.json();
}

test("describe answers the advertisement's JSON text as sent", async () => {
  const out = await describe("ok");
  assert.equal(typeof out.text, "string", JSON.stringify(out));
  const ad = JSON.parse(out.text);
  assert.deepEqual(
    ad.operations.map((o) => o.name),
    ["run-command", "write-note"],
  );
  assert.deepEqual(ad.operations[0].inputSchema.required, ["command"]);
  // An unusable schema is the core's to judge: the transport hands it over.
  const bad = JSON.parse((await describe("bad")).text);
  assert.deepEqual(bad.operations[0].inputSchema, { type: "string" });
});

test("a call runs once with its context and answers {result}; a provider's {error} comes back as sent", async () => {
  const ctx = context();
  const { reply } = await call("ok", "write-note", { path: "a.txt", text: "hello" }, { ctx });
  assert.deepEqual(reply, { result: { written: "a.txt", bytes: 5 } });
  const state = await peerState("/ok/calls");
  const mine = state.calls.filter((c) => c.executionId === ctx.executionId);
  assert.equal(mine.length, 1, "the call ran exactly once");
  assert.deepEqual(Object.keys(mine[0]).sort(), ["arguments", "commandId", "deadlineMs", "executionId", "operation", "sessionId"]);
  assert.equal(mine[0].operation, "write-note");
  assert.deepEqual(mine[0].arguments, { path: "a.txt", text: "hello" });
  assert.equal(mine[0].sessionId, "s-1");
  assert.equal(mine[0].commandId, "c-1");
  assert.ok(Number.isInteger(mine[0].deadlineMs) && mine[0].deadlineMs > Date.now() - 60_000, `deadlineMs ${mine[0].deadlineMs}`);
  assert.equal(state.notes["a.txt"], "hello");

  const failed = await call("ok", "run-command", { command: "false" }, { ctx: context() });
  assert.deepEqual(failed.reply, { error: "command failed: exit status 1" });
});

test("a non-2xx is an error naming the status and the provider's message", async () => {
  const rejected = await describe("reject");
  assert.equal(rejected.error, "Computer answered HTTP 500 to advertise: disk on fire");
  const gateway = await describe("garbage");
  assert.equal(gateway.error, "Computer answered HTTP 502 to advertise");
  const { reply } = await call("reject", "run-command", { command: "ls" }, { ctx: context() });
  assert.deepEqual(reply, { error: "Computer answered HTTP 500 to call: disk on fire" });
  const missing = await call("nowhere", "run-command", {}, { ctx: context() });
  assert.match(missing.reply.error, /^Computer answered HTTP 404 to call: no mode nowhere$/);
});

test("the bearer credential reaches the provider and never an error message", async () => {
  const headers = { authorization: `Bearer ${TOKEN}` };
  const ok = await describe("auth", { headers });
  assert.ok(ok.text, JSON.stringify(ok));
  const ran = await call("auth", "run-command", { command: "ls" }, { headers, ctx: context() });
  assert.deepEqual(ran.reply, { result: { stdout: "ran ls", exitCode: 0 } });

  // A wrong credential, which the provider echoes back in its 401 body.
  const wrong = "Bearer wrong-9c4f1a7e-token";
  const denied = await describe("auth", { headers: { authorization: wrong } });
  assert.match(denied.error, /^Computer answered HTTP 401 to advertise \(the Computer refused the call's credentials or admission\): credential <redacted> is not valid here$/);
  const deniedCall = await call("auth", "run-command", { command: "ls" }, { headers: { authorization: wrong }, ctx: context() });
  assert.match(deniedCall.reply.error, /HTTP 401 to call/);
  for (const message of [denied.error, deniedCall.reply.error]) {
    assert.ok(!message.includes("wrong-9c4f1a7e-token"), message);
    assert.ok(!message.includes(TOKEN), message);
  }
});

test("a body echoing a credential has it redacted; a short header value leaves a result intact", async () => {
  const headers = { authorization: `Bearer ${TOKEN}`, "x-shard": "5" };
  const echoed = await call("auth", "run-command", { command: `echo ${TOKEN}` }, { headers, ctx: context() });
  assert.deepEqual(echoed.reply, { result: { stdout: "ran echo <redacted>", exitCode: 0 } });
  const note = await call("auth", "write-note", { path: "b.txt", text: "12345" }, { headers, ctx: context() });
  assert.deepEqual(note.reply, { result: { written: "b.txt", bytes: 5 } });
});

test("a redirect is refused, not followed", async () => {
  const before = (await peerState("/ok/calls")).calls.length;
  const out = await describe("redirect");
  assert.equal(out.error, "Computer answered HTTP 302 to advertise: redirects are refused; configure the Computer's final URL");
  const { reply } = await call("redirect", "run-command", { command: "ls" }, { ctx: context() });
  assert.match(reply.error, /HTTP 302 to call: redirects are refused/);
  assert.equal((await peerState("/ok/calls")).calls.length, before, "nothing ran at the redirect's target");
});

test("a body past the bound is refused", async () => {
  const out = await describe("big");
  assert.equal(out.error, `Computer's advertise response (HTTP 200) is larger than ${COMPUTER_RESPONSE_BYTES_MAX} bytes`);
  const { reply } = await call("big", "run-command", { command: "ls" }, { ctx: context() });
  assert.match(reply.error, /call response \(HTTP 200\) is larger than 4194304 bytes/);
});

test("the deadline aborts the request, and the peer sees the abort", async () => {
  const ctx = { ...context(), deadlineInMs: 300 };
  const { reply, ms } = await call("slow", "run-command", { command: "sleep" }, { ctx });
  assert.deepEqual(reply, { error: "Computer call: its deadline passed; the request was aborted" });
  assert.ok(ms < 4_000, `answered after ${ms} ms`);
  await eventually(
    async () => {
      const entry = (await peerState("/slow/seen")).seen.find((e) => e.executionId === ctx.executionId);
      return entry?.aborted === true && entry.finished === false;
    },
    { timeoutMs: 5_000, what: "the peer seeing the abort" },
  );
});

test("the call's abort signal aborts the request, and the peer sees it", async () => {
  const ctx = { ...context(), deadlineInMs: 60_000 };
  const { reply, ms } = await call("slow", "run-command", { command: "sleep" }, { ctx, abortAfterMs: 200 });
  assert.deepEqual(reply, { error: "Computer call: the request was aborted" });
  assert.ok(ms < 4_000, `answered after ${ms} ms`);
  await eventually(
    async () => {
      const entry = (await peerState("/slow/seen")).seen.find((e) => e.executionId === ctx.executionId);
      return entry?.aborted === true;
    },
    { timeoutMs: 5_000, what: "the peer seeing the abort" },
  );
  // A describe that hangs ends with its signal.
  const hung = await describe("hang", { abortAfterMs: 200 });
  assert.equal(hung.error, "Computer advertise: the request was aborted");
});

test("a deadline already passed sends nothing", async () => {
  const ctx = { ...context(), deadlineInMs: -1 };
  const { reply } = await call("ok", "run-command", { command: "ls" }, { ctx });
  assert.deepEqual(reply, { error: "Computer call: its deadline passed before it was sent" });
  const calls = (await peerState("/ok/calls")).calls;
  assert.ok(!calls.some((c) => c.executionId === ctx.executionId));
});

test("the URL form uses the global fetch: the base path, the headers, and a redirect refused", async (t) => {
  const seen = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      seen.push({ url: req.url, authorization: req.headers.authorization, body });
      if (req.url === "/computers/desk/advertise") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ operations: [] }));
      } else {
        res.writeHead(307, { location: "/computers/desk/advertise" });
        res.end();
      }
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  const base = `http://127.0.0.1:${server.address().port}/computers/desk/`;
  const computer = serviceComputer({ url: base, headers: { authorization: `Bearer ${TOKEN}` } });
  assert.equal(await computer.describe(), '{"operations":[]}');
  assert.deepEqual(seen[0], { url: "/computers/desk/advertise", authorization: `Bearer ${TOKEN}`, body: "{}" });
  const moved = serviceComputer({ url: `http://127.0.0.1:${server.address().port}/elsewhere` });
  const reply = JSON.parse(await moved.call("x", "{}", { ...context(), deadlineMs: Date.now() + 5_000 }));
  assert.equal(reply.error, "Computer answered HTTP 307 to call: redirects are refused; configure the Computer's final URL");
  assert.equal(seen.length, 2, "the redirect was not followed");
});
