// A patch over R2 is all or none across a restart (src/files/journal.rs):
// a real R2 binding in Miniflare, a crash (the runtime killed and started
// again on the same storage) right after each put of a three-file patch
// leaves all three files as they were, and the model hears exactly that; a
// crash whose turn ends without resuming the call (its attempt limit) is
// undone when the Agent next runs a turn; a patch stopped by the tool
// timeout mid-write is undone, and the model told so. Fixture:
// tests/e2e/fixtures/files-worker.mjs (its `crash-N/` and `slow/` hooks).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 90_000 };
const call = (name, args) => ({ name, arguments: args });
const step = (...calls) => ({ toolCalls: calls });

/** The Agent's R2 port and helpers, over `h`. */
function files(h) {
  const stored = async (a, path) => {
    const res = await h.api("GET", `/direct/${a.id}/host/files/${encodeURIComponent(path)}`);
    return res.status === 404 ? null : res.text;
  };
  return {
    stored,
    /** A fresh Agent holding `old\n` in `crash-<n>/{a,b,c}.txt`, and the patch making each `new\n`. */
    async setUp(n) {
      const a = h.agent();
      await a.createSession("s");
      const paths = ["a", "b", "c"].map((x) => `crash-${n}/${x}.txt`);
      const tag = uniq("setup");
      h.model.scriptFor(tag, step(...paths.map((path) => call("write", { path, content: "old\n" }))), { text: "written" });
      const settled = await a.settle("s", `r-${tag}`, `files ${tag}`, { boundMs: 30_000 });
      assert.equal(settled.terminal, "completed");
      const patch = ["*** Begin Patch", ...paths.flatMap((p) => [`*** Update File: ${p}`, "@@", "-old", "+new"]), "*** End Patch"].join("\n");
      return { a, paths, patch };
    },
    /** Admits a prompt whose model patches; resolves once the put `n` landed and the runtime hangs. */
    async crashAfterPut(a, n, patch) {
      const tag = uniq(`crash${n}`);
      h.model.scriptFor(tag, step(call("apply_patch", { input: patch })), { text: "checked" });
      const id = await a.admit("s", `r-${tag}`, `patch ${tag}`);
      const deadline = Date.now() + 20_000;
      while ((await stored(a, ".stalled")) === null) {
        assert.ok(Date.now() < deadline, "the patch reached its put");
        await new Promise((r) => setTimeout(r, 50));
      }
      return { tag, id };
    },
  };
}

describe("a patch over R2 across a restart", () => {
  const h = useWorker({ fixture: "files-worker", model: "echo", persist: true, r2Buckets: ["FILES"], bindings: { FILES_PORT: "r2" } });
  const { stored, setUp, crashAfterPut } = files(h);

  for (const n of [1, 2, 3]) {
    test(`a crash right after put ${n} of 3: after the restart all three files are untouched, and the model hears it`, T, async () => {
      const { a, paths, patch } = await setUp(n);
      const { tag, id } = await crashAfterPut(a, n, patch);
      // Killed mid-patch: the first n files hold it, the others not.
      assert.equal(await stored(a, ".stalled"), paths[n - 1]);
      for (const [i, path] of paths.entries()) assert.equal(await stored(a, path), i < n ? "new\n" : "old\n", path);
      await h.restart();
      const settled = await a.waitSettled("s", id, { boundMs: 40_000 });
      assert.equal(settled.terminal, "completed", JSON.stringify(settled));
      for (const path of paths) assert.equal(await stored(a, path), "old\n", `${path}: all or none`);
      const tool = (await a.read("s", { limit: 200 })).messages.filter((m) => m.role === "tool").at(-1);
      assert.equal(tool.isError, true);
      assert.match(tool.text, /^the runtime restarted while tool call `[^`]+` \(`apply_patch`\) was writing its files; it was not run again, and its patch was undone: nothing was changed \(put back: /);
      assert.ok(tool.text.includes(`put back: ${paths.slice(0, n).join(", ")})`), tool.text);
      // What the model was sent after the restart is that same message (an error).
      const heard = h.model.requests(tag).at(-1).body.messages.filter((m) => m.role === "tool").at(-1);
      assert.equal(heard.content, `Error: ${tool.text}`);
    });
  }
});

describe("a patch over R2 whose turn ends at a restart", () => {
  const h = useWorker({
    fixture: "files-worker",
    model: "echo",
    persist: true,
    r2Buckets: ["FILES"],
    bindings: { FILES_PORT: "r2", SHIITAKE_ATTEMPTS_MAX: "1" },
  });
  const { stored, setUp, crashAfterPut } = files(h);

  test("is undone when the Agent next runs a turn: no file is left half-patched", T, async () => {
    const { a, paths, patch } = await setUp(1);
    const { id } = await crashAfterPut(a, 1, patch);
    await h.restart();
    // One attempt allowed: the turn ends interrupted, its call never resumes.
    const settled = await a.waitSettled("s", id, { boundMs: 40_000 });
    assert.equal(settled.terminal, "interrupted", JSON.stringify(settled));
    const tool = (await a.read("s", { limit: 200 })).messages.filter((m) => m.role === "tool").at(-1);
    assert.match(tool.text, /^outcome unknown: the turn was interrupted .* it may have taken effect/);
    const tag = uniq("next");
    h.model.scriptFor(tag, { text: "next" });
    const next = await a.settle("s", `r-${tag}`, `hello ${tag}`, { boundMs: 30_000 });
    assert.equal(next.terminal, "completed");
    for (const path of paths) assert.equal(await stored(a, path), "old\n", `${path}: put back`);
  });
});

describe("a patch over R2 past the tool timeout", () => {
  const h = useWorker({ fixture: "files-worker", model: "echo", r2Buckets: ["FILES"], bindings: { FILES_PORT: "r2", SHIITAKE_TOOL_TIMEOUT_MS: "1000" } });
  const { stored } = files(h);

  test("is stopped before its next file and undone; the model hears that, not only that it ran out of time", T, async () => {
    const a = h.agent();
    await a.createSession("s");
    const paths = ["slow/a.txt", "slow/b.txt", "slow/c.txt"];
    const setup = uniq("setup");
    h.model.scriptFor(setup, step(...paths.map((path) => call("write", { path, content: "old\n" }))), { text: "written" });
    assert.equal((await a.settle("s", `r-${setup}`, `files ${setup}`, { boundMs: 30_000 })).terminal, "completed");
    const patch = ["*** Begin Patch", ...paths.flatMap((p) => [`*** Update File: ${p}`, "@@", "-old", "+new"]), "*** End Patch"].join("\n");
    // Each put answers 1.5 s after it lands: the 1 s timeout stops the patch after the first.
    const tag = uniq("slow");
    h.model.scriptFor(tag, step(call("apply_patch", { input: patch })), { text: "checked" });
    assert.equal((await a.settle("s", `r-${tag}`, `patch ${tag}`, { boundMs: 30_000 })).terminal, "completed");
    const tool = (await a.read("s", { limit: 200 })).messages.filter((m) => m.role === "tool").at(-1);
    assert.equal(
      tool.text,
      "the call was stopped (cancelled, or past its time) before every file was written; this patch was undone: " +
        "nothing was changed (put back: slow/a.txt).",
    );
    for (const path of paths) assert.equal(await stored(a, path), "old\n", path);
  });
});
