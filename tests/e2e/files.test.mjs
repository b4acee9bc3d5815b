// Files end to end, on both shipped ports (the Agent's own SQLite and an R2
// bucket): the scripted model writes, reads, edits through `replace` and
// `apply_patch`, searches and lists under a nested .gitignore; a conflict
// with another writer is refused and reported, not lost; grants key the
// module as `files`; a path that climbs above the root is refused; on R2 a
// put-back that fails is reported with exactly the files it left changed,
// and a restart in the middle of an apply_patch call never applies it
// twice (across a restart mid-patch: files-journal.test.mjs).
// Fixture: tests/e2e/fixtures/files-worker.mjs.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 60_000 };
const call = (name, args) => ({ name, arguments: args });
const step = (...calls) => ({ toolCalls: calls });

const PATCH = `*** Begin Patch
*** Update File: src/app.js
@@ function greet() {
-  return "hello";
+  return "hello, world";
 }
*** Add File: src/extra.js
+export const extra = 1;
*** End Patch`;

for (const port of ["sqlite", "r2"]) {
  describe(`files over ${port}`, () => {
    const h = useWorker({ fixture: "files-worker", model: "echo", persist: port === "r2", r2Buckets: ["FILES"], bindings: { FILES_PORT: port } });

    /** Runs one scripted turn in a fresh Agent (or `a`); returns the tool messages and model requests. */
    async function turn(name, steps, { a, sid = "s" } = {}) {
      const tag = uniq(name);
      h.model.scriptFor(tag, ...steps, { text: "done" });
      if (!a) {
        a = h.agent();
        await a.createSession(sid);
      }
      const settled = await a.settle(sid, `r-${tag}`, `files ${tag}`, { boundMs: 30_000 });
      assert.equal(settled.terminal, "completed", JSON.stringify(settled));
      const messages = (await a.read(sid, { limit: 200 })).messages;
      const tools = messages.filter((m) => m.role === "tool" && messages.indexOf(m) > messages.findLastIndex((x) => x.role === "user"));
      return { a, tools, requests: h.model.requests(tag) };
    }
    const stored = async (a, path) => {
      const res = await h.api("GET", `/direct/${a.id}/host/files/${encodeURIComponent(path)}`);
      return res.status === 404 ? null : res.text;
    };
    const result = (tool) => {
      assert.ok(!tool.isError, tool.text);
      return JSON.parse(tool.text);
    };

    test("the model writes, reads, replaces and patches files; the tools are offered directly", T, async () => {
      const src = 'function greet() {\n  return "hello";\n}\nconst x = 1;\n';
      const t = await turn("edit", [
        step(call("write", { path: "./src//app.js", content: src })),
        step(call("read", { path: "src/app.js", startLine: 2, lineCount: 1 })),
        step(call("replace", { path: "src/app.js", old: "const x = 1;", new: "const x = 2;" })),
        step(call("apply_patch", { input: PATCH })),
        step(call("stat", { path: "src" }), call("stat", { path: "src/extra.js" }), call("stat", { path: "nope" })),
      ]);
      const offered = t.requests[0].body.tools.map((x) => x.function.name).sort();
      assert.deepEqual(offered, ["apply_patch", "execute", "list", "read", "replace", "search", "stat", "write"]);
      assert.deepEqual(result(t.tools[0]), { path: "src/app.js", bytes: src.length });
      assert.deepEqual(result(t.tools[1]), {
        path: "src/app.js", content: '  return "hello";\n', startLine: 2, endLine: 2, totalLines: 4, truncated: true,
      });
      assert.deepEqual(result(t.tools[2]), { path: "src/app.js", replaced: 1 });
      assert.deepEqual(result(t.tools[3]), {
        files: [{ path: "src/app.js", action: "updated" }, { path: "src/extra.js", action: "added" }],
      });
      assert.deepEqual(result(t.tools[4]), { path: "src", kind: "dir" });
      assert.deepEqual(result(t.tools[5]), { path: "src/extra.js", kind: "file", size: 24 });
      assert.deepEqual(result(t.tools[6]), { path: "nope", kind: "missing" });
      assert.equal(await stored(t.a, "src/app.js"), 'function greet() {\n  return "hello, world";\n}\nconst x = 2;\n');
      assert.equal(await stored(t.a, "src/extra.js"), "export const extra = 1;\n");
    });

    test("a patch whose chunk does not match changes no file and names the file and the chunk", T, async () => {
      const bad = `*** Begin Patch
*** Add File: new.txt
+fresh
*** Update File: a.txt
@@
-not in the file
+x
*** End Patch`;
      const t = await turn("bad-patch", [step(call("write", { path: "a.txt", content: "one\ntwo\n" })), step(call("apply_patch", { input: bad }))]);
      assert.equal(t.tools[1].isError, true);
      assert.match(t.tools[1].text, /a\.txt/);
      assert.match(t.tools[1].text, /chunk 1/);
      assert.equal(await stored(t.a, "new.txt"), null, "all files or none");
      assert.equal(await stored(t.a, "a.txt"), "one\ntwo\n");
    });

    test("search and list respect nested .gitignore files and leave out .git", T, async () => {
      const files = {
        ".gitignore": "*.log\nbuild/\n",
        "app/.gitignore": "secret.txt\n!keep.log\n",
        "app/main.txt": "needle in main\n",
        "app/secret.txt": "needle in secret\n",
        "app/keep.log": "needle kept\n",
        "app/drop.log": "needle dropped\n",
        "build/out.txt": "needle built\n",
        ".git/config": "needle git\n",
        "notes/todo.md": "no match here\nNEEDLE upper\n",
      };
      const writes = Object.entries(files).map(([path, content]) => call("write", { path, content }));
      const t = await turn("search", [
        step(...writes),
        step(call("search", { query: "needle" })),
        step(call("search", { query: "needle", glob: "**/*.log" })),
        step(call("list", { path: "app" })),
        step(call("list", { recursive: true })),
        step(call("read", { path: "app/secret.txt" })),
      ]);
      const n = writes.length;
      const found = result(t.tools[n]).matches.map((m) => `${m.path}:${m.line}`).sort();
      assert.deepEqual(found, ["app/keep.log:1", "app/main.txt:1", "notes/todo.md:2"]);
      assert.deepEqual(result(t.tools[n + 1]).matches.map((m) => m.path), ["app/keep.log"]);
      const listed = result(t.tools[n + 2]).entries.map((e) => e.path);
      assert.deepEqual(listed, ["app/.gitignore", "app/keep.log", "app/main.txt"]);
      const all = result(t.tools[n + 3]).entries.map((e) => e.path);
      assert.deepEqual(all, [".gitignore", "app/.gitignore", "app/keep.log", "app/main.txt", "notes/todo.md"]);
      // Exact-path reads do not use search visibility.
      assert.equal(result(t.tools[n + 4]).content, "needle in secret\n");
    });

    test("a path that climbs above the root, or holds a NUL, is refused to the model", T, async () => {
      const t = await turn("escape", [step(call("read", { path: "../other-agent/x" }), call("write", { path: "a\u0000b", content: "x" }))]);
      assert.equal(t.tools[0].isError, true);
      assert.match(t.tools[0].text, /climbs above the root/);
      assert.equal(t.tools[1].isError, true);
      assert.match(t.tools[1].text, /NUL/);
    });

    test("grants key the module as `files`: a Session delivered read may read, not write", T, async () => {
      const a = h.agent();
      await a.createSession("s");
      const first = await turn("grant-setup", [step(call("write", { path: "g.txt", content: "granted\n" }))], { a });
      assert.ok(!first.tools[0].isError, first.tools[0].text);
      const delivered = await h.api("POST", `/host-grants/${a.id}/s`, { version: 1, grants: { files: "read" } });
      assert.equal(delivered.status, 200, delivered.text);
      const t = await turn("grant", [step(call("read", { path: "g.txt" }), call("write", { path: "g.txt", content: "changed\n" }))], { a });
      assert.equal(result(t.tools[0]).content, "granted\n");
      assert.equal(t.tools[1].isError, true);
      assert.match(t.tools[1].text, /files\.write refused/);
      assert.equal(await stored(a, "g.txt"), "granted\n");
    });

    test("replace after another writer changed the file is refused; the other edit is kept", T, async () => {
      const a = h.agent();
      await a.createSession("s");
      await a.createSession("other");
      const path = port === "r2" ? "race/doc.txt" : "doc.txt";
      await turn("race-setup", [step(call("write", { path, content: "v1 line\n" }))], { a });
      if (port === "sqlite") {
        // A second author's turn rewrites the file between this model's read and its replace.
        await turn("race-other", [step(call("write", { path, content: "another writer was here\n" }))], { a, sid: "other" });
      }
      const t = await turn("race", [step(call("replace", { path, old: "v1 line", new: "v2 line" }))], { a });
      assert.equal(t.tools[0].isError, true);
      assert.match(t.tools[0].text, port === "r2" ? /changed while this edit was being made/ : /`old` was not found/);
      assert.equal(await stored(a, path), "another writer was here\n", "the other writer's edit is not lost");
    });

    if (port !== "r2") return;

    test("R2: a patch whose second file meets a concurrent edit puts the first back", T, async () => {
      const a = h.agent();
      await a.createSession("s");
      await turn("undo-setup", [step(call("write", { path: "ok.txt", content: "a\n" }), call("write", { path: "race/b.txt", content: "b\n" }))], { a });
      const patch = "*** Begin Patch\n*** Update File: ok.txt\n@@\n-a\n+A\n*** Update File: race/b.txt\n@@\n-b\n+B\n*** End Patch";
      const t = await turn("undo", [step(call("apply_patch", { input: patch }))], { a });
      assert.equal(t.tools[0].isError, true);
      assert.match(t.tools[0].text, /race\/b\.txt changed while this edit was being made/);
      assert.equal(await stored(a, "ok.txt"), "a\n", "the first file was put back");
      assert.equal(await stored(a, "race/b.txt"), "another writer was here\n");
    });

    test("R2: a put-back that fails is reported with exactly the files the patch left changed", T, async () => {
      const a = h.agent();
      await a.createSession("s");
      const paths = ["stuck/a.txt", "b.txt", "race/c.txt"];
      await turn("stuck-setup", [step(...paths.map((path) => call("write", { path, content: "old\n" })))], { a });
      const patch = ["*** Begin Patch", ...paths.flatMap((p) => [`*** Update File: ${p}`, "@@", "-old", "+new"]), "*** End Patch"].join("\n");
      // c.txt meets another writer; putting a.txt back then fails.
      const t = await turn("stuck", [step(call("apply_patch", { input: patch }))], { a });
      assert.equal(t.tools[0].isError, true);
      assert.equal(
        t.tools[0].text,
        "race/c.txt changed while this edit was being made (another writer); this patch was undone, but not fully: " +
          "stuck/a.txt may still hold this patch's content (putting it back failed: R2 unavailable); put back: b.txt. " +
          "Read these files before editing them again.",
      );
      assert.equal(await stored(a, "stuck/a.txt"), "new\n");
      assert.equal(await stored(a, "b.txt"), "old\n");
      assert.equal(await stored(a, "race/c.txt"), "another writer was here\n");
      const heard = t.requests.at(-1).body.messages.filter((m) => m.role === "tool").at(-1);
      assert.equal(heard.content, `Error: ${t.tools[0].text}`, "the model hears it");
    });

    test("R2: a restart during an apply_patch call never applies it twice; the model hears the outcome is unknown", T, async () => {
      const a = h.agent();
      await a.createSession("s");
      await turn("stall-setup", [step(call("write", { path: "stall/log.txt", content: "start\n" }))], { a });
      const tag = uniq("stall");
      const patch = "*** Begin Patch\n*** Update File: stall/log.txt\n@@\n start\n+appended once\n*** End Patch";
      h.model.scriptFor(tag, step(call("apply_patch", { input: patch })), { text: "checked" });
      const id = await a.admit("s", "r-stall", `patch ${tag}`);
      const deadline = Date.now() + 15_000;
      while ((await stored(a, ".stalled")) === null) {
        assert.ok(Date.now() < deadline, "the patch reached the port");
        await new Promise((r) => setTimeout(r, 50));
      }
      await h.restart();
      const settled = await a.waitSettled("s", id, { boundMs: 30_000 });
      assert.equal(settled.terminal, "completed");
      const tool = (await a.read("s", { limit: 200 })).messages.filter((m) => m.role === "tool").at(-1);
      assert.equal(tool.isError, true);
      assert.match(tool.text, /^outcome unknown/);
      assert.equal(await stored(a, "stall/log.txt"), "start\nappended once\n", "applied exactly once");
    });
  });
}
