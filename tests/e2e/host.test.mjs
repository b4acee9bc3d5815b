// The host side: bearer auth in the demo Worker; a fixture host Worker with a
// hostFetch override and a metadata middleware in front of shiitakeApp().
import assert from "node:assert/strict";
import { describe as group, test } from "node:test";
import { describe, expectAccepted, expectError, expectStatus, useWorker } from "./helpers.mjs";

group("demo Worker bearer auth", () => {
  const h = useWorker();

  test("no token or a wrong token is 401 on every route; the right token is 200", async () => {
    const a = h.agent();
    await a.createSession("s");
    const routes = [
      ["GET", "/sessions", undefined],
      ["POST", "/sessions", { sessionId: "t" }],
      ["GET", "/sessions/s", undefined],
      ["POST", "/sessions/s/commands", { type: "prompt", requestId: "r", text: "x" }],
      ["POST", "/sessions/s/withdraw", { requestId: "w" }],
      ["DELETE", "/sessions/s", undefined],
    ];
    for (const [method, p, body] of routes) {
      for (const opts of [
        { token: null },
        { token: "wrong-token" },
        { token: "" },
        { token: null, headers: { authorization: "test-token" } },
        { token: null, headers: { authorization: "Basic test-token" } },
      ]) {
        const res = await a.api(method, p, body, opts);
        assert.equal(res.status, 401, `${method} ${p} ${JSON.stringify(opts)}: ${describe(res)}`);
      }
    }
    // None of the refused requests reached the Agent.
    const page = await a.read("s");
    assert.deepEqual(page.pending, []);
    assert.deepEqual((await a.withdraw("s", "r")).json, { status: "unknown" });
    assert.deepEqual((await a.withdraw("s", "w")).json, { status: "unknown" });
    const list = await a.api("GET", "/sessions");
    expectStatus(list, 200);
    assert.deepEqual(
      list.json.sessions.map((s) => s.sessionId),
      ["s"],
    );
  });
});

group("host Worker: hostFetch and host metadata", () => {
  const h = useWorker({ fixture: "host-fetch-worker" });

  const meta = (value) => ({ headers: { "x-test-meta": JSON.stringify(value) } });

  test("hostFetch answers its own route; other routes fall through to Shiitake", async () => {
    const id = `agent-${Date.now()}`;
    const ping = await h.api("GET", `/direct/${id}/host/ping`);
    expectStatus(ping, 200);
    assert.equal(ping.text, "pong");
    assert.equal(ping.headers.get("x-answered-by"), "hostFetch");
    const list = await h.api("GET", `/direct/${id}/sessions`);
    expectStatus(list, 200);
    assert.equal(list.headers.get("x-answered-by"), null);
    assert.deepEqual(list.json, { sessions: [], cursor: null });
    const unknown = await h.api("GET", `/direct/${id}/host/other`);
    expectError(unknown, 404, "not_found");
    // Shiitake's own routes still work through the mounted app.
    const a = h.agent(id);
    await a.createSession("s");
    await a.admit("s", "r", "through shiitakeApp");
  });

  test("the shim forwards the DO-relative path and query, strips authorization, sets x-shiitake-meta from the host", async () => {
    const a = h.agent();
    const echo = await a.api("GET", "/sessions?limit=5&__echo=1", undefined, {
      headers: { "x-test-meta": JSON.stringify({ author: "ada" }), "x-shiitake-meta": JSON.stringify({ author: "eve" }) },
    });
    expectStatus(echo, 200);
    assert.equal(echo.headers.get("x-answered-by"), "hostFetch", describe(echo));
    assert.equal(echo.json.path, "/sessions");
    assert.equal(new URLSearchParams(echo.json.search).get("limit"), "5");
    assert.equal(echo.json.headers.authorization, undefined, "the shim strips authorization");
    assert.deepEqual(JSON.parse(echo.json.headers["x-shiitake-meta"]), { author: "ada" });

    const forged = await a.api("GET", "/sessions?__echo=1", undefined, {
      headers: { "x-shiitake-meta": JSON.stringify({ author: "eve" }) },
    });
    expectStatus(forged, 200);
    assert.equal(forged.json.headers["x-shiitake-meta"], undefined, "a client-sent x-shiitake-meta is dropped");
  });

  test("host metadata is stored on pending prompts and operator lines; a client-sent header is ignored", async () => {
    const a = h.agent();
    await a.createSession("s");
    await a.occupy("s"); // the model never answers: what follows stays pending
    const ada = { author: { id: "ada", name: "Ada" }, channel: "web" };
    const c1 = await a.admit("s", "with-meta", "from ada", {}, meta(ada));
    const c2 = await a.admit("s", "forged", "from eve", {}, { headers: { "x-shiitake-meta": JSON.stringify({ author: { id: "eve" } }) } });
    const c3 = await a.admit("s", "both", "ada, with a forged header too", {}, {
      headers: { "x-test-meta": JSON.stringify(ada), "x-shiitake-meta": JSON.stringify({ author: { id: "eve" } }) },
    });
    const c4 = await a.admit("s", "scalar", "meta may be any JSON value", {}, meta("just-a-string"));
    const o1 = await a.admitOperator("s", "op", "operator with meta", meta({ author: { id: "ops" } }));
    const page = await a.read("s");
    assert.deepEqual(
      page.pending.map((p) => [p.commandId, p.meta ?? null]),
      [
        [c1, ada],
        [c2, null],
        [c3, ada],
        [c4, "just-a-string"],
      ],
    );
    assert.deepEqual(
      page.messages.filter((m) => m.role === "operator").map((m) => [m.commandId, m.role, m.meta]),
      [[o1, "operator", { author: { id: "ops" } }]],
    );
  });

  test("a replay must carry the same metadata: other metadata under a requestId is 409 request_conflict", async () => {
    const a = h.agent();
    await a.createSession("s");
    const c1 = await a.admit("s", "r1", "hello", {}, meta({ author: "ada" }));
    assert.equal(expectAccepted(await a.prompt("s", "r1", "hello", {}, meta({ author: "ada" }))), c1);
    expectError(await a.prompt("s", "r1", "hello", {}, meta({ author: "bob" })), 409, "request_conflict");
    expectError(await a.prompt("s", "r1", "hello"), 409, "request_conflict");
    // A forged header does not make it match either.
    expectError(
      await a.prompt("s", "r1", "hello", {}, { headers: { "x-shiitake-meta": JSON.stringify({ author: "ada" }) } }),
      409,
      "request_conflict",
    );
    const c2 = await a.admit("s", "r2", "no meta");
    expectError(await a.prompt("s", "r2", "no meta", {}, meta({ author: "ada" })), 409, "request_conflict");
    assert.equal(expectAccepted(await a.prompt("s", "r2", "no meta")), c2);
    const o = await a.admitOperator("s", "o1", "line", meta({ author: "ada" }));
    expectError(await a.operator("s", "o1", "line", meta({ author: "bob" })), 409, "request_conflict");
    assert.equal(expectAccepted(await a.operator("s", "o1", "line", meta({ author: "ada" }))), o);
    assert.deepEqual(
      (await a.queue("s")).map((p) => p.commandId),
      [c1, c2],
    );
  });

  test("metadata is capped at 4,096 bytes of JSON: 400 invalid_meta", async () => {
    const a = h.agent();
    await a.createSession("s");
    const sized = (n) => {
      const v = { pad: "" };
      v.pad = "x".repeat(n - JSON.stringify(v).length);
      assert.equal(JSON.stringify(v).length, n);
      return v;
    };
    const c = await a.admit("s", "at-cap", "ok", {}, meta(sized(4096)));
    expectError(await a.prompt("s", "over-cap", "too much", {}, meta(sized(4097))), 400, "invalid_meta");
    expectError(await a.operator("s", "over-cap-op", "too much", meta(sized(4097))), 400, "invalid_meta");
    assert.deepEqual(
      (await a.queue("s")).map((p) => p.commandId),
      [c],
    );
    assert.deepEqual(
      (await a.read("s")).messages.filter((m) => m.role === "operator"),
      [],
    );
  });
});
