// The types of "shiitake/fleet" (js/fleet.d.ts) and the fleet's hooks in
// js/do.d.ts, through the TypeScript checker: a host's use compiles without
// a diagnostic, and each wrong use (an unknown action, a grant without its
// expiry, a send without a requestId) gets one.
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
import { createFleetSessions, createFleetDelegation, FleetError, type FleetGrant, type FleetDelegationOpen } from "shiitake/fleet";
declare const open: FleetDelegationOpen;
`;

const GOOD = `
const grant: FleetGrant = { agents: ["b"], actions: ["sessions.list", "send", "delegate"], expiresAt: Date.now() + 60_000, provenance: { by: "ada" } };
const every: FleetGrant = { agents: "*", actions: ["start"], expiresAt: 1 };
async function host() {
  const sessions = createFleetSessions(open);
  const page = await sessions.list(grant, "b", { limit: 10 });
  const first: string | undefined = page.sessions[0]?.sessionId;
  const { sessionId } = await sessions.create(grant, "b");
  const read = await sessions.read(grant, "b", sessionId, { limit: 5 });
  const removed: true = (await sessions.delete(grant, "b", sessionId)).deleted;
  const receipt = await sessions.send(grant, "b", undefined, { requestId: "r1", text: "hi", delivery: "followUp" });
  const cmd: string = receipt.commandId;
  const delegation = createFleetDelegation({ open });
  const started = await delegation.start(every, { agentId: "b", requestId: "r2", text: "go" });
  const answer = await delegation.delegate(grant, { agentId: "b", requestId: "r2", text: "go" });
  const rows = await delegation.readSettlement("b", answer.sessionId, answer.commandId);
  const uncut: string | null | undefined = rows?.answer;
  if (answer.status === "settled") {
    const n: number = answer.toolCallCount;
    const t: "completed" | "failed" | "cancelled" | "interrupted" = answer.terminal;
  }
  try { await sessions.list(grant, "c"); } catch (e) { if (e instanceof FleetError) { const code: string = e.code; } }
  return [first, read, removed, cmd, started, uncut];
}
`;

const BAD = {
  "an unknown action": `const g: FleetGrant = { agents: "*", actions: ["fly"], expiresAt: 1 };`,
  "a grant without its expiry": `const g: FleetGrant = { agents: "*", actions: ["send"] };`,
  "a send without a requestId": `declare const g: FleetGrant; createFleetSessions(open).send(g, "b", "s", { text: "x" });`,
  "a delegation without its Agent": `declare const g: FleetGrant; createFleetDelegation({ open }).delegate(g, { requestId: "r", text: "x" });`,
  "a delegation opened without readSettlement": `declare const o: (id: string) => { fleetSessions(r: string): Promise<string> }; createFleetDelegation({ open: o });`,
};

function diagnostics(source) {
  const file = path.join(ROOT, "tests/e2e/__fleet_types__.ts");
  const host = ts.createCompilerHost(OPTIONS);
  const read = host.readFile.bind(host);
  host.readFile = (name) => (path.resolve(name) === file ? source : read(name));
  const exists = host.fileExists.bind(host);
  host.fileExists = (name) => path.resolve(name) === file || exists(name);
  const program = ts.createProgram([file], OPTIONS, host);
  return ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
}

test("a host's use of shiitake/fleet compiles without a diagnostic", () => {
  assert.deepEqual(diagnostics(HEADER + GOOD), []);
});

for (const [name, code] of Object.entries(BAD)) {
  test(`shiitake/fleet's types refuse ${name}`, () => {
    assert.ok(diagnostics(HEADER + code).length > 0, name);
  });
}
