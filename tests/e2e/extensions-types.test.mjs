// The types of "shiitake/extensions" (js/extensions.d.ts), through the
// TypeScript checker: small programs import the package by its export name
// (so package.json's "./extensions" entry is what resolves) together with
// zod; correct use compiles without a diagnostic, and each obviously wrong
// use (an undeclared collection, a write outside the owner transaction, a
// declaration after a callback, ...) gets one.

import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

const OPTIONS = {
  noEmit: true,
  strict: true,
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  lib: ["lib.es2022.d.ts"],
  types: [],
  skipLibCheck: true,
};

const HEADER = `
import { z } from "zod";
import { defineExtension, defineCollection, defineDocument, type JsonValue } from "shiitake/extensions";
const Goal = z.object({ title: z.string(), stars: z.coerce.number().default(0) });
const base = defineExtension("goal")
  .config(z.object({ max: z.number() }), { default: { max: 3 } })
  .state({ goal: defineDocument(Goal), notes: defineCollection(Goal), raw: defineCollection({ type: "string" }) });
`;

const GOOD = `
const goal = base
  .command("set", { input: Goal, description: "Set the goal." }, (ctx, input) => {
    const title: string = input.title;
    const max: number = ctx.config.max;
    ctx.state.update((s) => {
      s.goal.set({ title, stars: "4" });
      s.notes.put("a", { title: "a" });
      s.raw.put("k", "v");
      s.notes.delete("b");
    });
    ctx.timers.set("remind", { delayMs: 1000, payload: { n: 1 } });
    ctx.send({ sessionId: "s1", text: "hi" });
    return ctx.state.read((s) => s.notes.get("a")?.stars);
  })
  .command("admin", { scope: "agent" }, (ctx, input) => {
    const json: JsonValue = input;
    return json;
  })
  .onSettled((ctx, event) => {
    const n: number = event.toolCallCount;
    const t: "completed" | "failed" | "cancelled" | "interrupted" = event.terminal;
  })
  .projection({ scope: "session", read: (ctx) => ctx.state.read((s) => s.goal.get()) })
  .prompt((ctx, run) => ctx.state.read((s) => s.notes.keys().map((k) => run.sessionId + k)))
  .tools((ctx, run, commands) => [commands.tool("set", { description: "Set it." })]);

base.onTimer((ctx) => {
  const stars: number | undefined = ctx.state.read((s) => s.goal.get()?.stars);
});
base.activate((ctx) => {
  const stars: number | undefined = ctx.state.read((s) => s.goal.get()?.stars);
  return async () => {};
});
defineExtension("sync-dispose").activate(() => () => {});
defineExtension("no-dispose").activate(() => {});
const raw = defineExtension("raw").state({ r: defineCollection({ type: "object" }) }).onTimer((ctx) => {
  const row: JsonValue | undefined = ctx.state.read((s) => s.r.get("k"));
});
const bench = defineExtension("bench").requests({ files: true }).files((ctx, run) => {
  const head: string = run.commandId;
  return head === "" ? undefined : { read: async () => null, stat: async () => null, list: async () => ({ entries: [], cursor: null }), write: async () => {}, replace: async () => null };
});
const kept = defineExtension("h").projection({ history: true, read: () => 1 });
base.command("end", (ctx) => {
  const at: number | null = ctx.sessionPosition;
  return at;
});
const migrated = defineExtension("m").state({
  version: 2,
  collections: { notes: defineCollection(Goal) },
  migrations: { 2: (draft) => { const old: JsonValue | undefined = draft.notes.get("a"); draft.notes.put("a", { title: "t" }); } },
});
`;

/** Wrong uses, each with the diagnostic it must get. */
const WRONG = {
  undeclaredCollection: [`base.onSettled((ctx) => ctx.state.read((s) => s.missing.get("x")));`, /Property 'missing' does not exist/],
  rowType: [`base.onSettled((ctx) => { const t: string = ctx.state.read((s) => s.notes.get("x")!.stars); });`, /'number' is not assignable to type 'string'/],
  rowInput: [`base.onSettled((ctx) => ctx.state.update((s) => s.notes.put("x", { title: 1 })));`, /'number' is not assignable to type 'string'/],
  documentSet: [`base.onSettled((ctx) => ctx.state.update((s) => s.notes.set({ title: "t" })));`, /Property 'set' does not exist/],
  commandInput: [`base.command("set", { input: Goal }, (ctx, input) => { const n: number = input.title; });`, /'string' is not assignable to type 'number'/],
  configType: [`base.onSettled((ctx) => { const s: string = ctx.config.max; });`, /'number' is not assignable to type 'string'/],
  updateInProjection: [`base.projection({ read: (ctx) => ctx.state.update(() => 1) });`, /Property 'update' does not exist/],
  sendInPrompt: [`base.prompt((ctx) => { ctx.send({ sessionId: "s", text: "t" }); return undefined; });`, /Property 'send' does not exist/],
  declarationAfterCallback: [`base.onSettled(() => {}).state({});`, /Property 'state' does not exist/],
  undeclaredTool: [`base.command("set", (ctx) => null).tools((ctx, run, c) => [c.tool("nope")]);`, /'"nope"' is not assignable to parameter of type '"set"'/],
  agentTool: [`base.command("admin", { scope: "agent" }, () => null).tools((ctx, run, c) => [c.tool("admin")]);`, /'"admin"' is not assignable to parameter of type 'never'/],
  updateInFiles: [`base.files((ctx) => { ctx.state.update(() => 1); return undefined; });`, /Property 'update' does not exist/],
  notAPort: [`base.files(() => ({ read: async () => null }));`, /not assignable/],
  badScope: [`base.command("x", { scope: "global" }, () => null);`, /'"global"' is not assignable/],
  historyFlag: [`base.projection({ read: () => 1, history: "yes" });`, /'string' is not assignable to type 'boolean/],
};

test("extensions.d.ts: correct use compiles cleanly; each wrong use gets its diagnostic", () => {
  const files = new Map([[path.join(ROOT, "tests/e2e/__extensions_good.mts"), HEADER + GOOD]]);
  for (const [name, [code]] of Object.entries(WRONG)) files.set(path.join(ROOT, `tests/e2e/__extensions_${name}.mts`), HEADER + code);
  const host = ts.createCompilerHost(OPTIONS);
  const getSourceFile = host.getSourceFile.bind(host);
  const fileExists = host.fileExists.bind(host);
  const readFile = host.readFile.bind(host);
  Object.assign(host, {
    getSourceFile: (name, ...rest) => (files.has(name) ? ts.createSourceFile(name, files.get(name), ts.ScriptTarget.ES2022, true) : getSourceFile(name, ...rest)),
    fileExists: (name) => files.has(name) || fileExists(name),
    readFile: (name) => files.get(name) ?? readFile(name),
  });
  const program = ts.createProgram([...files.keys()], OPTIONS, host);
  const messages = (file) =>
    ts.getPreEmitDiagnostics(program, program.getSourceFile(file)).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));

  // The declaration file itself, and the good program, compile cleanly.
  assert.deepEqual(ts.getPreEmitDiagnostics(program, program.getSourceFile(path.join(ROOT, "js/extensions.d.ts"))).length, 0);
  const [good, ...wrong] = files.keys();
  assert.deepEqual(messages(good), []);
  for (const [i, [name, [, expected]]] of Object.entries(WRONG).entries()) {
    const found = messages(wrong[i]);
    assert.ok(found.length > 0, `${name}: expected a diagnostic, got none`);
    assert.ok(found.some((m) => expected.test(m)), `${name}: expected ${expected}, got:\n${found.join("\n")}`);
  }
});
