// The exclusive files grant end to end (seed: "An extension may request the
// exclusive files grant and return Knapsack-minted FileTools from
// files(context, run)"): the holder's `files(context, run)` is called once
// per run; its port's operations are offered to the model as direct tools
// beside `execute` (in the request's tools and the recorded protocol
// digest), never as a module `execute` or `forage` reaches; calls run on the
// captured port (a host port object or the Agent's SQLite workspace); grants
// keyed `files` decide them. A roster with two holders, a host with its own
// tools().files beside a holder, and a holder without a tool runtime are
// refused (503 host_misconfigured). Fixture:
// tests/e2e/fixtures/files-grant-worker.mjs.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { expectError, execute, uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 60_000 };
const call = (name, args) => ({ name, arguments: args });
const step = (...calls) => ({ toolCalls: calls });
const FILES_TOOLS = ["apply_patch", "list", "read", "replace", "search", "stat", "write"];

describe("a files grant holder's tools", () => {
  const h = useWorker({ fixture: "files-grant-worker", model: "echo" });

  /** Runs one scripted turn in Session `sid` of `a` (a fresh Agent by default). */
  async function turn(name, steps, { a, sid }) {
    const tag = uniq(name);
    h.model.scriptFor(tag, ...steps, { text: "done" });
    if (!a) {
      a = h.agent();
      await a.createSession(sid);
    }
    const settled = await a.settle(sid, `r-${tag}`, `files grant ${tag}`, { boundMs: 30_000 });
    assert.equal(settled.terminal, "completed", JSON.stringify(settled));
    const messages = (await a.read(sid, { limit: 200 })).messages;
    const start = messages.findLastIndex((m) => m.role === "user");
    const mine = messages.slice(start);
    return {
      a,
      commandId: settled.commandId,
      tools: mine.filter((m) => m.role === "tool"),
      steps: mine.filter((m) => m.role === "assistant" && m.toolCalls),
      requests: h.model.requests(tag),
    };
  }
  const offered = (request) => request.body.tools.map((x) => x.function.name).sort();
  const result = (tool) => {
    assert.ok(!tool.isError, tool.text);
    return JSON.parse(tool.text);
  };
  const builderCalls = async (a) => {
    const res = await h.api("GET", `/direct/${a.id}/host/grant/calls`);
    assert.equal(res.status, 200, res.text);
    return res.json;
  };
  const stored = async (a, path) => {
    const res = await h.api("GET", `/direct/${a.id}/host/grant/file/${encodeURIComponent(path)}`);
    return res.status === 404 ? null : res.text;
  };

  test("the model writes and reads through the holder's port; the tools are direct, in the digest, built once per run", T, async () => {
    const t = await turn(
      "mem",
      [
        step(call("write", { path: "./notes//todo.md", content: "one\ntwo\n" })),
        step(call("read", { path: "notes/todo.md" })),
        step(call("replace", { path: "notes/todo.md", old: "two", new: "three" })),
      ],
      { sid: "mem" },
    );
    // Offered beside execute, the same at every step of the run.
    assert.equal(t.requests.length, 4);
    for (const request of t.requests) assert.deepEqual(offered(request), [...FILES_TOOLS, "execute"].sort());
    const executeTool = t.requests[0].body.tools.find((x) => x.function.name === "execute");
    assert.doesNotMatch(executeTool.function.description, /files\./, "execute's description lists no files operation");
    // They ran on the holder's own port (under the roster config's root).
    assert.deepEqual(result(t.tools[0]), { path: "notes/todo.md", bytes: 8 });
    assert.equal(result(t.tools[1]).content, "one\ntwo\n");
    assert.deepEqual(result(t.tools[2]), { path: "notes/todo.md", replaced: 1 });
    assert.equal(await stored(t.a, "notes/todo.md"), "one\nthree\n");
    // The recorded execution protocol names them; one digest for the run.
    assert.equal(t.steps.length, 3);
    for (const s of t.steps) {
      assert.deepEqual(s.protocol.tools, [...FILES_TOOLS, "execute"].sort());
      assert.equal(s.protocol.digest, t.steps[0].protocol.digest);
    }
    // One builder call for the run's four model calls; the next run calls it again.
    assert.deepEqual(await builderCalls(t.a), [t.commandId]);
    const again = await turn("mem-again", [step(call("stat", { path: "notes/todo.md" }))], { a: t.a, sid: "mem" });
    assert.deepEqual(result(again.tools[0]), { path: "notes/todo.md", kind: "file", size: 10 });
    assert.deepEqual(await builderCalls(t.a), [t.commandId, again.commandId]);
  });

  test("execute's catalog has no files module: forage finds none and the guest sees no `files`", T, async () => {
    const code = `return {
      read: (await forage.search("read")).map((f) => f.path),
      files: (await forage.search("files write")).map((f) => f.path),
      notes: (await forage.search("notes count")).map((f) => f.path),
      names: Object.keys(env).sort(),
      bound: typeof files,
    };`;
    const t = await turn("forage", [execute(code)], { sid: "forage" });
    assert.deepEqual(offered(t.requests[0]), [...FILES_TOOLS, "execute"].sort());
    const out = result(t.tools[0]);
    assert.ok(out.read.every((p) => !p.startsWith("files.")), JSON.stringify(out));
    assert.ok(out.files.every((p) => !p.startsWith("files.")), JSON.stringify(out));
    assert.deepEqual(out.notes, ["notes.count"]);
    assert.deepEqual(out.names, ["notes"]);
    assert.equal(out.bound, "undefined");
    const describe = 'try { await forage.describe("files.read"); return "found"; } catch (e) { return String(e?.message ?? e); }';
    const described = await turn("forage-describe", [execute(describe)], { a: t.a, sid: "forage" });
    const why = result(described.tools[0]);
    assert.notEqual(why, "found");
    assert.match(why, /files/);
  });

  test("a SQLite workspace from the holder works the same", T, async () => {
    const t = await turn(
      "sql",
      [step(call("write", { path: "a.txt", content: "hello\n" })), step(call("apply_patch", { input: "*** Begin Patch\n*** Update File: a.txt\n@@\n-hello\n+hello, world\n*** End Patch" })), step(call("read", { path: "a.txt" }))],
      { sid: "sql-1" },
    );
    assert.deepEqual(offered(t.requests[0]), [...FILES_TOOLS, "execute"].sort());
    assert.deepEqual(result(t.tools[0]), { path: "a.txt", bytes: 6 });
    assert.deepEqual(result(t.tools[1]), { files: [{ path: "a.txt", action: "updated" }] });
    assert.equal(result(t.tools[2]).content, "hello, world\n");
    assert.equal(await stored(t.a, "a.txt"), null, "not in the memory port");
  });

  test("a builder that throws or returns nothing leaves the run without files tools; the digest differs", T, async () => {
    const withFiles = await turn("digest", [execute("return 1")], { sid: "digest" });
    for (const sid of ["throw-1", "none-1"]) {
      await withFiles.a.createSession(sid);
      const t = await turn(sid, [execute("return 1"), step(call("write", { path: "x", content: "y" }))], { a: withFiles.a, sid });
      assert.deepEqual(offered(t.requests[0]), ["execute"]);
      assert.deepEqual(t.steps[0].protocol.tools, ["execute"]);
      assert.notEqual(t.steps[0].protocol.digest, withFiles.steps[0].protocol.digest);
      assert.equal(t.tools[1].isError, true);
      assert.match(t.tools[1].text, /no tool `write` is offered/);
    }
    // Each run called it once, failing or not.
    assert.equal((await builderCalls(withFiles.a)).length, 3);
  });

  test("grants keyed `files` decide the calls; the holder's own grant key does not", T, async () => {
    const a = h.agent();
    await a.createSession("deny");
    const deliver = async (version, grants) => {
      const res = await h.api("POST", `/host-grants/${a.id}/deny`, { version, grants });
      assert.equal(res.status, 200, res.text);
    };
    await deliver(1, { files: "none" });
    const none = await turn("none", [step(call("write", { path: "n.txt", content: "x" })), step(call("stat", { path: "n.txt" }))], { a, sid: "deny" });
    assert.equal(none.tools[0].isError, true);
    assert.match(none.tools[0].text, /`files` is granted `none`/);
    assert.equal(none.tools[1].isError, true);
    assert.equal(await stored(a, "n.txt"), null);
    await deliver(2, { files: "read", workbench: "none" });
    const read = await turn("read", [step(call("write", { path: "n.txt", content: "x" })), step(call("stat", { path: "n.txt" }))], { a, sid: "deny" });
    assert.match(read.tools[0].text, /`files` is granted `read`/);
    assert.deepEqual(result(read.tools[1]), { path: "n.txt", kind: "missing" });
  });
});

for (const [name, expected] of [
  ["two", /extension other: the files grant is exclusive and extension workbench holds it/],
  ["both", /extension workbench holds the files grant and tools\(\)\.files configures the host's own Files/],
  ["notools", /extension workbench holds the files grant, which needs the host's tool runtime/],
]) {
  describe(`a refused files grant (${name})`, () => {
    const h = useWorker({ fixture: "files-grant-worker", model: false, bindings: { FILES_GRANT_CASE: name } });

    test("every request answers 503 host_misconfigured, saying why", T, async () => {
      const a = h.agent();
      const res = await a.api("POST", "/sessions", { sessionId: "s" });
      expectError(res, 503, "host_misconfigured");
      assert.match(res.json.error.message, expected);
    });
  });
}
