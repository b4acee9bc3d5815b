// The types of "shiitake/client-entry" (js/client-entry.d.ts), through the
// TypeScript checker: a program importing the package by its export name
// (package.json's "./client-entry") with zod compiles cleanly, and each
// wrong use (no callback, a chip with actions or an open target, both cell
// anchors, an open target of another kind, a view value of the wrong type)
// gets its diagnostic.

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
  lib: ["lib.es2022.d.ts", "lib.dom.d.ts"],
  types: [],
  skipLibCheck: true,
};

const HEADER = `
import { z } from "zod";
import { defineClientEntry, createClientEntryHost, placeCells, type ClientContributionV1 } from "shiitake/client-entry";
const contract = { id: "progress", commands: {}, projection: { schema: z.object({ title: z.string() }) } };
const none: ClientContributionV1 = { chips: [], panel: [], timeline: { cells: [], omitted: 0 }, waiting: null };
`;

const GOOD = `
const entry = defineClientEntry(contract, {
  contribute: (view) => ({
    chips: [{ id: "c", title: "t", compact: "x" }],
    panel: view.status === "running" && view.value !== null ? [{ id: "progress", title: view.value.title, actions: [{ id: "end", label: "End", input: { a: 1 } }], open: { kind: "session", sessionId: "ses_1", agentId: "a" } }] : [],
    timeline: {
      cells: [
        { id: "1", label: "a", commandId: "c1", open: { kind: "session", sessionId: "ses_2" } },
        { id: "2", label: "b", commandId: null, afterSequence: 0 },
        { id: "3", label: "c" },
      ],
      omitted: view.history.omitted,
    },
    waiting: { summary: "w", cancel: { id: "end", label: "Stop" } },
  }),
  attach: async ({ activity, signal, onError }) => {
    for await (const view of activity) if (view.value?.title === "" || signal.aborted) onError(new Error("x"));
  },
});
const protocol: "shiitake.client/v1" = entry.protocol;
const host = createClientEntryHost({ entries: [entry], dispatch: (call) => call.prompt("sure?"), open: async (target, where) => (target.kind === "session" && where.slot === "s" ? target.sessionId : undefined) });
host.observe("progress", "s", { status: "running", value: { title: "t" }, commands: ["end"] });
const placed = placeCells({ rows: [{ sequence: 1, commandId: "c1" }], first: true }, host.contribution("progress", "s")?.timeline.cells ?? []);
const after: number[] = [...placed.after.keys()];
const target = host.contribution("progress", "s")?.panel[0]?.open;
if (target) host.open("progress", "s", target).catch(() => {});
`;

const WRONG = {
  noCallback: [`defineClientEntry(contract, {});`, /not assignable/],
  chipActions: [`const c: ClientContributionV1 = { ...none, chips: [{ id: "c", title: "t", actions: [] }] };`, /'actions' does not exist/],
  chipOpen: [`const c: ClientContributionV1 = { ...none, chips: [{ id: "c", title: "t", open: { kind: "session", sessionId: "s" } }] };`, /'open' does not exist/],
  openKind: [`const c: ClientContributionV1 = { ...none, panel: [{ id: "r", title: "t", open: { kind: "url", sessionId: "s" } }] };`, /not assignable/],
  bothAnchors: [`const c: ClientContributionV1 = { ...none, timeline: { cells: [{ id: "1", label: "l", commandId: "c", afterSequence: 2 }], omitted: 0 } };`, /not assignable/],
  valueType: [`defineClientEntry(contract, { contribute: (view) => { const n: number | null = view.value && view.value.title; return none; } });`, /'string' is not assignable to type 'number'/],
  asyncContribute: [`defineClientEntry(contract, { contribute: async () => none });`, /not assignable/],
};

test("client-entry.d.ts: correct use compiles cleanly; each wrong use gets its diagnostic", () => {
  const files = new Map([[path.join(ROOT, "tests/e2e/__client_entry_good.mts"), HEADER + GOOD]]);
  for (const [name, [code]] of Object.entries(WRONG)) files.set(path.join(ROOT, `tests/e2e/__client_entry_${name}.mts`), HEADER + code);
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
  assert.deepEqual(ts.getPreEmitDiagnostics(program, program.getSourceFile(path.join(ROOT, "js/client-entry.d.ts"))).length, 0);
  const [good, ...wrong] = files.keys();
  assert.deepEqual(messages(good), []);
  for (const [i, [name, [, expected]]] of Object.entries(WRONG).entries()) {
    const found = messages(wrong[i]);
    assert.ok(found.length > 0, `${name}: expected a diagnostic, got none`);
    assert.ok(found.some((m) => expected.test(m)), `${name}: expected ${expected}, got:\n${found.join("\n")}`);
  }
});
