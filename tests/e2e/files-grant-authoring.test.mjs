// Authoring the exclusive files grant (js/extensions.mjs), in plain Node:
// `.files(fn)` needs `.requests({ files: true })` (refused by name at
// definition time), the manifest says whether there is a files hook, and a
// `files` hook call answers the port itself (the shim keeps it for the run;
// js/do/hooks.mjs), null for none, or a refusal naming what was wrong. Runtime
// behaviour: tests/e2e/files-grant.test.mjs.
import assert from "node:assert/strict";
import { test } from "node:test";
import { defineDocument, defineExtension, manifestOf, normalizeRoster, runHook } from "../../js/extensions.mjs";
import { r2Files, sqliteWorkspace } from "../../js/files.mjs";

const refuses = (fn, message) => assert.throws(fn, { name: "Error", message });
const entryOf = (definition, extra = {}) => normalizeRoster([{ extension: definition, ...extra }])[0];
const runRef = { sessionId: "s1", commandId: "c1" };
const files = (definition, state = {}) =>
  runHook(entryOf(definition, { grants: ["files"], config: { root: "w" } }), { kind: "files", event: runRef, state, config: { root: "w" }, now: 1, session: { id: "s1", position: 3 } });

/** A host port object (js/files.d.ts FilesPort). */
const port = () => ({
  patches: true,
  read: async () => null,
  stat: async () => null,
  list: async () => ({ entries: [], cursor: null }),
  write: async () => {},
  replace: async () => null,
});

test("a files hook needs the files request, is declared once, and shows in the manifest", () => {
  refuses(() => defineExtension("bench").files(() => undefined), /^extension bench: \.files\(\) needs \.requests\(\{ files: true \}\) first/);
  refuses(() => defineExtension("bench").requests({ files: false }).files(() => undefined), /^extension bench: \.files\(\) needs \.requests/);
  refuses(() => defineExtension("bench").requests({ files: true }).files(() => undefined).files(() => undefined), /^extension bench: \.files\(\) is declared twice/);
  refuses(() => defineExtension("bench").requests({ files: true }).files("no"), /^extension bench: \.files\(\) takes a function/);
  refuses(() => defineExtension("bench").requests({ files: true }).files(() => undefined).requests({}), /\.requests\(\) must be declared before callbacks \(.*\.files\)/);
  const bench = defineExtension("bench").requests({ files: true }).files(() => undefined);
  assert.equal(manifestOf(entryOf(bench)).files, true);
  assert.equal(manifestOf(entryOf(defineExtension("plain"))).files, false);
  assert.deepEqual(manifestOf(entryOf(bench, { grants: ["files"] })).grants, ["files"]);
});

test("a files call answers the port itself with the read-only run context; null for none", () => {
  let seen;
  const own = port();
  const bench = defineExtension("bench")
    .config({ type: "object" })
    .state({ note: defineDocument({ type: "string" }) })
    .requests({ files: true })
    .files((ctx, run) => {
      seen = { config: ctx.config, note: ctx.state.read((s) => s.note.get()), run, session: ctx.session };
      return own;
    });
  const answer = files(bench, { note: { "": "hello" } });
  assert.equal(answer.ok, true, answer.error);
  assert.equal(answer.files, own, "the very port object");
  assert.deepEqual(answer.writes, []);
  assert.deepEqual(seen, { config: { root: "w" }, note: "hello", run: runRef, session: { id: "s1", position: 3 } });
  const workspace = sqliteWorkspace({ fileBytesMax: 10 });
  assert.equal(files(defineExtension("bench").requests({ files: true }).files(() => workspace)).files, workspace);
  const fakeBucket = { get: async () => null, put: async () => null };
  assert.equal(typeof files(defineExtension("bench").requests({ files: true }).files(() => r2Files(fakeBucket))).files.replace, "function");
  for (const none of [() => undefined, () => null]) {
    assert.equal(files(defineExtension("bench").requests({ files: true }).files(none)).files, null);
  }
});

test("a files hook that throws, returns a promise, a non-port or writes fails the call by name", () => {
  const hook = (fn) => files(defineExtension("bench").state({ note: defineDocument() }).requests({ files: true }).files(fn));
  assert.match(hook(() => {
    throw new Error("closed");
  }).error, /^extension bench: the files hook threw: .*closed/);
  assert.match(hook(async () => port()).error, /^extension bench: the files hook returned a promise/);
  assert.match(hook(() => "files").error, /^extension bench: the files hook must return a Files port .* not string/);
  assert.match(hook(() => ({ read() {}, write() {} })).error, /^extension bench: the files hook must return a Files port .*; this one has no stat, list, replace/);
  assert.equal(hook((ctx) => ctx.state.update((s) => s.note.set("x"))).error, "extension bench: state.update is not available in a files hook (outside the owner transaction)");
  assert.deepEqual(files(defineExtension("plain").requests({ files: true })), { ok: false, error: "extension plain has no files hook" });
});
