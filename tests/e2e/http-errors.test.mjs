// HTTP refusals: every bad input is a 4xx with a named code, never a 5xx.
import assert from "node:assert/strict";
import { test } from "node:test";
import { describe, expectAccepted, expectError, expectStatus, rng, useWorker } from "./helpers.mjs";

const h = useWorker();

const session = () => h.session();

test("malformed JSON is 400 invalid_json on every route that takes a body", async () => {
  const { a, sid } = await session();
  for (const body of ["{", "{type:'prompt'}", '{"type":"prompt",}', "nope", '{"a":1}{"b":2}', "\u0000", "[1,2"]) {
    expectError(await a.api("POST", `/sessions/${sid}/commands`, body), 400, "invalid_json");
  }
  expectError(await a.api("POST", "/sessions", "{"), 400, "invalid_json");
  expectError(await a.api("POST", `/sessions/${sid}/withdraw`, "{"), 400, "invalid_json");
  expectError(await a.api("POST", `/sessions/${sid}/commands`, new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d])), 400, "invalid_json");
  assert.deepEqual(await a.pending(sid), []);
});

test("a duplicated JSON key is 400 invalid_json naming the key, on every route that takes a body", async () => {
  const { a, sid } = await session();
  const cases = [
    [`/sessions/${sid}/commands`, '{"type":"prompt","type":"operator","requestId":"d1","text":"x"}', "type"],
    [`/sessions/${sid}/commands`, '{"type":"prompt","requestId":"d2","requestId":"d3","text":"x"}', "requestId"],
    ["/sessions", '{"sessionId":"dup-a","sessionId":"dup-b"}', "sessionId"],
    [`/sessions/${sid}/withdraw`, '{"requestId":"w1","requestId":"w2"}', "requestId"],
  ];
  for (const [route, body, key] of cases) {
    const msg = expectError(await a.api("POST", route, body), 400, "invalid_json");
    assert.match(msg, new RegExp(`duplicate key \`${key}\``), route);
  }
  assert.deepEqual(await a.pending(sid), [], "nothing was admitted");
  const read = await a.read(sid);
  assert.deepEqual(read.messages, [], "nothing was written");
  expectError(await a.api("GET", "/sessions/dup-a"), 404, "session_not_found");
  expectError(await a.api("GET", "/sessions/dup-b"), 404, "session_not_found");
});

test("write routes refuse a query string, an array body and null fields, and change nothing", async () => {
  const { a, sid } = await session();
  const admitted = await a.admit(sid, "keep", "kept");
  expectError(await a.api("DELETE", `/sessions/${sid}?foo=1`), 400, "invalid_query");
  expectError(await a.api("POST", "/sessions?foo=1", { sessionId: "q1" }), 400, "invalid_query");
  expectError(await a.api("POST", `/sessions/${sid}/commands?x=1`, { type: "prompt", requestId: "q2", text: "x" }), 400, "invalid_query");
  expectError(await a.api("POST", `/sessions/${sid}/withdraw?x=1`, { requestId: "q3" }), 400, "invalid_query");
  assert.match(expectError(await a.api("POST", "/sessions", '["from-array"]'), 400, "invalid_request"), /JSON object/);
  assert.match(expectError(await a.api("POST", `/sessions/${sid}/withdraw`, '["r1"]'), 400, "invalid_request"), /JSON object/);
  assert.match(expectError(await a.api("POST", "/sessions", { sessionId: null }), 400, "invalid_request"), /sessionId: null is not allowed/);
  assert.match(expectError(await a.command(sid, { type: "prompt", requestId: "n1", text: "x", images: null }), 400, "invalid_request"), /images: null/);
  assert.match(expectError(await a.command(sid, { type: "prompt", requestId: "n2", text: "x", images: [{ mediaType: "image/png", data: null }] }), 400, "invalid_request"), /images\[0\]\.data: null/);
  for (const id of ["q1", "from-array"]) expectError(await a.api("GET", `/sessions/${id}`), 404, "session_not_found");
  expectAccepted(await a.prompt(sid, "q3", "not fenced"));
  expectStatus(await a.api("GET", `/sessions/${sid}`), 200);
  assert.ok((await a.queue(sid)).some((c) => c.commandId === admitted), "the Session and its work are intact");
});

test("an empty command body is a 400", async () => {
  const { a, sid } = await session();
  const res = await a.api("POST", `/sessions/${sid}/commands`, "");
  assert.equal(res.status, 400, describe(res));
  assert.ok(["invalid_json", "invalid_request"].includes(res.json?.error?.code), describe(res));
});

test("an unknown field is 400 invalid_request whose message names it", async () => {
  const { a, sid } = await session();
  const msg = expectError(await a.command(sid, { type: "prompt", requestId: "a", text: "x", extra: 1 }), 400, "invalid_request");
  assert.match(msg, /extra/);
  const op = expectError(await a.command(sid, { type: "operator", requestId: "b", text: "x", delivery: "steer" }), 400, "invalid_request");
  assert.match(op, /delivery/);
  // Host metadata cannot ride in the body: command schemas are closed.
  const meta = expectError(await a.command(sid, { type: "prompt", requestId: "c", text: "x", meta: { who: "me" } }), 400, "invalid_request");
  assert.match(meta, /meta/);
  // Nothing was admitted under those requestIds.
  for (const r of ["a", "b", "c"]) assert.deepEqual((await a.withdraw(sid, r)).json, { status: "unknown" });
});

test("a missing field is 400 invalid_request whose message names it", async () => {
  const { a, sid } = await session();
  assert.match(expectError(await a.command(sid, { type: "prompt", text: "x" }), 400, "invalid_request"), /requestId/);
  assert.match(expectError(await a.command(sid, { type: "prompt", requestId: "r" }), 400, "invalid_request"), /text/);
  assert.match(expectError(await a.command(sid, { type: "operator", requestId: "r" }), 400, "invalid_request"), /text/);
  assert.match(expectError(await a.command(sid, { requestId: "r", text: "x" }), 400, "invalid_request"), /type/);
});

test("an unknown command type is 400 invalid_request", async () => {
  const { a, sid } = await session();
  for (const type of ["steer", "Prompt", "", "compact"]) {
    expectError(await a.command(sid, { type, requestId: "r", text: "x" }), 400, "invalid_request");
  }
  assert.deepEqual(await a.pending(sid), []);
});

test("a wrong type for a field is 400 invalid_request whose message names it", async () => {
  const { a, sid } = await session();
  const cases = [
    [{ type: "prompt", requestId: 7, text: "x" }, /requestId/],
    [{ type: "prompt", requestId: "r", text: 7 }, /text/],
    [{ type: "prompt", requestId: "r", text: null }, /text/],
    [{ type: "prompt", requestId: "r", text: ["x"] }, /text/],
    [{ type: "prompt", requestId: "r", text: "x", images: "img" }, /images/],
    [{ type: "prompt", requestId: "r", text: "x", images: [42] }, /images/],
    [{ type: "prompt", requestId: "r", text: "x", delivery: "later" }, /delivery/],
    [{ type: "prompt", requestId: "r", text: "x", delivery: 1 }, /delivery/],
    [{ type: 1, requestId: "r", text: "x" }, /type/],
    [{ type: "cancel", commandId: 12 }, /commandId/],
  ];
  for (const [cmd, field] of cases) {
    assert.match(expectError(await a.command(sid, cmd), 400, "invalid_request"), field, JSON.stringify(cmd));
  }
  for (const body of ["null", "[]", '"prompt"', "42", "true"]) {
    expectError(await a.api("POST", `/sessions/${sid}/commands`, body), 400, "invalid_request");
  }
  assert.deepEqual(await a.pending(sid), []);
});

test("an unknown route is 404 not_found", async () => {
  const { a, sid } = await session();
  for (const [method, path] of [
    ["GET", "/nope"],
    ["GET", `/sessions/${sid}/nope`],
    ["POST", `/sessions/${sid}/commands/extra`],
    ["GET", `/sessions/${sid}/withdraw/x`],
    ["GET", "/"],
  ]) {
    expectError(await a.api(method, path), 404, "not_found");
  }
  // Outside the mounted prefix the demo Worker itself answers 404.
  const outside = await h.api("GET", "/definitely/not/here");
  assert.equal(outside.status, 404, describe(outside));
});

test("a known path with another method is 405 method_not_allowed", async () => {
  const { a, sid } = await session();
  for (const [method, path] of [
    ["DELETE", "/sessions"],
    ["PUT", "/sessions"],
    ["PATCH", "/sessions"],
    ["POST", `/sessions/${sid}`],
    ["PUT", `/sessions/${sid}`],
    ["GET", `/sessions/${sid}/commands`],
    ["DELETE", `/sessions/${sid}/commands`],
    ["GET", `/sessions/${sid}/withdraw`],
    ["PUT", `/sessions/${sid}/withdraw`],
  ]) {
    expectError(await a.api(method, path, method === "GET" ? undefined : {}), 405, "method_not_allowed");
  }
  // Nothing was changed by them.
  expectStatus(await a.api("GET", `/sessions/${sid}`), 200);
});

test("deeply nested or oversized JSON values are a 400, not a 5xx", async () => {
  const { a, sid } = await session();
  const path = `/sessions/${sid}/commands`;
  for (const body of [
    "[".repeat(100_000),
    `${"[".repeat(5000)}${"]".repeat(5000)}`,
    `{"type":"prompt","requestId":"r","text":"x","images":${"[".repeat(3000)}${"]".repeat(3000)}}`,
    `{"type":"prompt","requestId":"r","text":"x","n":1e999999}`,
  ]) {
    const res = await a.api("POST", path, body);
    assert.equal(res.status, 400, describe(res));
    assert.ok(["invalid_json", "invalid_request"].includes(res.json?.error?.code), describe(res));
  }
  assert.deepEqual(await a.pending(sid), []);
  // Edge cases the contract leaves open: any answer but a 5xx.
  for (const body of [
    `{"type":"prompt","requestId":"r1","text":"\\ud800"}`,
    `{"type":"prompt","requestId":"r2","text":"x","type":"operator"}`,
    `{"type":"prompt","requestId":"r3","text":"\\u0000"}`,
  ]) {
    const res = await a.api("POST", path, body);
    assert.ok(res.status < 500, describe(res));
  }
});

test("fuzz: random methods, paths, queries and bodies never produce a 5xx", async () => {
  const a = h.agent();
  await a.createSession("s");
  const rand = rng(0x5eed);
  const pick = (xs) => xs[Math.floor(rand() * xs.length)];
  const junk = (n) => Array.from({ length: n }, () => String.fromCharCode(Math.floor(rand() * 0x2fff))).join("");
  const methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];
  const segments = ["sessions", "s", "commands", "withdraw", "settlement", "watch", "%00", "%ff", "a%2Fb", "x".repeat(300), encodeURIComponent(junk(4))];
  const queries = ["", "?limit=5", "?limit=99999999999999999999", "?before=", "?before=%ff%fe", "?cursor=zzz", "?limit=1&limit=2", `?before=${encodeURIComponent(junk(20))}`];
  const values = [null, true, 0, -1, 1e308, "", "x", junk(8), [], {}, [1, "a"], { type: "prompt" }, "x".repeat(70_000)];
  const fields = ["type", "requestId", "text", "images", "delivery", "commandId", "onlyIfPending", "sessionId", "meta", "__proto__", "constructor"];
  const bodies = [
    () => undefined,
    () => junk(Math.floor(rand() * 64)),
    () => JSON.stringify(pick(values)),
    () => {
      const o = {};
      const n = Math.floor(rand() * 5);
      for (let i = 0; i < n; i++) o[pick(fields)] = pick(values);
      if (rand() < 0.7) o.type = pick(["prompt", "operator", "cancel", "abort", "x"]);
      return JSON.stringify(o);
    },
    () => JSON.stringify({ type: "prompt", requestId: junk(10), text: junk(30), images: [{ mediaType: pick(["image/png", "x"]), data: pick([junk(8), "AAAA"]) }] }),
  ];
  const routes = [
    ["GET", "/sessions"],
    ["POST", "/sessions"],
    ["GET", "/sessions/s"],
    ["POST", "/sessions/s/commands"],
    ["POST", "/sessions/s/withdraw"],
  ];
  const statuses = new Map();
  for (let i = 0; i < 60; i++) {
    let method;
    let path;
    if (rand() < 0.6) {
      // A real route, mostly with its own method, with a random query and body.
      [method, path] = pick(routes);
      if (rand() < 0.2) method = pick(methods);
      path += pick(queries);
    } else {
      method = pick(methods);
      const depth = 1 + Math.floor(rand() * 4);
      path = `/${Array.from({ length: depth }, () => pick(segments)).join("/")}${pick(queries)}`;
    }
    // A watch is an endless stream (api() reads whole bodies): fuzz its method, not its stream.
    if (method === "GET" && /\/watch(\?|$)/.test(path)) method = "POST";
    const body = method === "GET" || method === "HEAD" ? undefined : pick(bodies)();
    const res = await a.api(method, path, body);
    assert.ok(res.status < 500, `#${i} ${method} ${path} ${JSON.stringify(body)?.slice(0, 200)} → ${describe(res)}`);
    if (method !== "HEAD" && res.status >= 400) {
      assert.equal(typeof res.json?.error?.code, "string", `#${i} ${method} ${path}: ${describe(res)}`);
    }
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
  }
  assert.ok(statuses.size >= 3, `the fuzz reached several outcomes: ${[...statuses]}`);
  // The Agent still works afterwards.
  await a.admit("s", "after-fuzz", "still fine");
});
