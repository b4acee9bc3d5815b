// Computers end to end: the host's list (tools().computers) is described at
// a turn's start, every Computer at once under the describe timeout; one
// that hangs or advertises an unusable schema is dropped and reported
// through onUnavailable while the rest stay; the model reaches a Computer's
// commands and its files through `execute` (computers.laptop.run_command,
// computers.laptop.files.read), each call carrying its execution identity
// and deadline to the provider; confirmCalls without a confirm hook refuses;
// grants on computers.<name> cover its files too; a change of the list
// drops the captured modules at the next turn; the host's announcement
// (ShiitakeDO#computersChanged) describes an unchanged list again at the
// next turn, a dropped Computer too before its retry interval. Fixtures:
// tests/e2e/fixtures/computers-worker.mjs, the peer
// tests/e2e/fixtures/computer-worker.mjs (service binding COMPUTER).
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { ROOT, execute, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({
  fixture: "computers-worker",
  model: "echo",
  r2Buckets: ["FILES"],
  peers: [
    {
      name: "computer",
      binding: "COMPUTER",
      scriptPath: path.join(ROOT, "tests/e2e/fixtures/computer-worker.mjs"),
      compatibilityFlags: ["enable_request_signal"],
      bindings: { COMPUTER_TOKEN: "unused" },
    },
  ],
});

const T = { timeout: 60_000 };

async function turn(name, code, { a, sid = "s" } = {}) {
  const tag = uniq(name);
  h.model.scriptFor(tag, execute(code), { text: "done" });
  if (!a) {
    a = h.agent();
    await a.createSession(sid);
  }
  const settled = await a.settle(sid, `r-${tag}`, `computers ${tag}`, { boundMs: 30_000 });
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  const tool = (await a.read(sid, { limit: 200 })).messages.filter((m) => m.role === "tool").at(-1);
  return { a, tool, requests: h.model.requests(tag) };
}
const peerCalls = async () => (await (await h.mf.getWorker("computer")).fetch("http://computer/ok/calls")).json();

test("the answering Computers stay, a hanging one and one with an unusable schema are dropped and reported", T, async () => {
  const t = await turn("describe", `
    const out = {};
    out.ran = await computers.laptop.run_command({ command: "ls -la" });
    out.wrote = await computers.laptop.files.write({ path: "notes/a.txt", content: "on the laptop\\n" });
    out.read = await computers.laptop.files.read({ path: "notes/a.txt" });
    try { await computers.stuck.run_command({ command: "x" }); } catch (e) { out.stuck = e.message; }
    try { await computers.broken.shout({}); } catch (e) { out.broken = e.message; }
    try { await computers.broken.files.read({ path: "notes/a.txt" }); } catch (e) { out.brokenFiles = e.message; }
    return out;`);
  const out = JSON.parse(t.tool.text);
  assert.deepEqual(out.ran, { stdout: "ran ls -la", exitCode: 0 });
  assert.deepEqual(out.wrote, { path: "notes/a.txt", bytes: 14 });
  assert.equal(out.read.content, "on the laptop\n");
  assert.match(out.stuck, /stuck/);
  assert.match(out.broken, /broken/);
  assert.match(out.brokenFiles, /broken\.files/, "a dropped Computer's files go with its commands");
  const description = t.requests[0].body.tools.find((x) => x.function.name === "execute").function.description;
  assert.match(description, /computers\.laptop\.run_command/);
  assert.match(description, /computers\.laptop\.files\.read/);
  assert.doesNotMatch(description, /computers\.(stuck|broken)/);
  assert.doesNotMatch(description, /computers\.broken\.files/);
  const reports = (await h.api("GET", `/direct/${t.a.id}/host/unavailable`)).json;
  const byName = Object.fromEntries(reports.map((r) => [r.name, r.reason]));
  assert.match(byName.stuck, /did not describe itself within 1500 ms/);
  assert.match(byName.broken, /unusable schema/);
  assert.deepEqual(Object.keys(byName).sort(), ["broken", "stuck"]);
  // The provider received the invocation context.
  const call = (await peerCalls()).calls.find((c) => c.arguments?.command === "ls -la");
  assert.equal(call.operation, "run-command");
  assert.equal(call.sessionId, "s");
  assert.match(call.executionId, /:/);
  assert.ok(call.deadlineMs > Date.now() - 60_000, JSON.stringify(call));
});

test("each guest call of one execute run reaches the Computer with its own executionId, named by its place in the run", T, async () => {
  const tag = uniq("ids");
  h.model.scriptFor(tag, execute(`
    await computers.laptop.run_command({ command: "one ${tag}" });
    await forage.search("run");
    return await Promise.all([
      computers.laptop.run_command({ command: "two ${tag}" }),
      computers.laptop.run_command({ command: "three ${tag}" }),
    ]);`), { text: "done" });
  const a = h.agent();
  await a.createSession("s");
  const settled = await a.settle("s", `r-${tag}`, `computers ${tag}`, { boundMs: 30_000 });
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  const calls = (await peerCalls()).calls.filter((c) => c.arguments?.command?.endsWith(tag));
  assert.deepEqual(calls.map((c) => c.arguments.command), [`one ${tag}`, `two ${tag}`, `three ${tag}`]);
  // One command, one tool call; the ordinal counts every guest call (the
  // search is the second), in the order the code made them.
  assert.deepEqual(new Set(calls.map((c) => c.commandId)).size, 1);
  const { commandId } = settled;
  const callId = (await a.read("s")).messages.find((m) => m.toolCalls).toolCalls[0].id;
  assert.equal(calls[0].commandId, commandId);
  assert.deepEqual(calls.map((c) => c.executionId), [1, 3, 4].map((n) => `${commandId}:${callId}:${n}`));
});

test("confirmCalls without a confirm hook refuses every advertised call", T, async () => {
  const t = await turn("confirm", `
    try { await computers.guarded.run_command({ command: "rm -rf /" }); return "ran"; } catch (e) { return e.message; }`);
  assert.match(JSON.parse(t.tool.text), /asks for confirmation and the host supplies no confirm hook/);
  assert.ok(!(await peerCalls()).calls.some((c) => c.arguments?.command === "rm -rf /"), "never reached the provider");
});

test("a grant on computers.<name> covers its files: read allows reading files, not commands or writes", T, async () => {
  const a = h.agent();
  await a.createSession("s");
  await turn("grant-setup", `return await computers.laptop.files.write({ path: "g.txt", content: "x" });`, { a });
  const delivered = await h.api("POST", `/host-grants/${a.id}/s`, { version: 1, grants: { "computers.laptop": "read" } });
  assert.equal(delivered.status, 200, delivered.text);
  const t = await turn("grant", `
    const out = { read: (await computers.laptop.files.read({ path: "g.txt" })).content };
    try { await computers.laptop.files.write({ path: "g.txt", content: "y" }); } catch (e) { out.write = e.message; }
    try { await computers.laptop.run_command({ command: "whoami" }); } catch (e) { out.command = e.message; }
    return out;`, { a });
  const out = JSON.parse(t.tool.text);
  assert.equal(out.read, "x");
  assert.match(out.write, /refused/);
  assert.match(out.command, /refused/);
});

test("a change of the host's list drops the captured modules at the next turn", T, async () => {
  const a = h.agent();
  await a.createSession("s");
  const found = "return (await forage.search('run command')).map((f) => f.path).sort();";
  const first = await turn("list-1", found, { a });
  assert.deepEqual(JSON.parse(first.tool.text), ["computers.guarded.run_command", "computers.laptop.run_command"]);
  await h.api("POST", `/direct/${a.id}/host/computers/without-laptop`);
  const second = await turn("list-2", `
    const out = { found: (await forage.search('run command')).map((f) => f.path) };
    try { await computers.laptop.run_command({ command: "x" }); } catch (e) { out.laptop = e.message; }
    return out;`, { a });
  const out = JSON.parse(second.tool.text);
  assert.deepEqual(out.found, ["computers.guarded.run_command"]);
  assert.match(out.laptop, /laptop/);
});

test("the host's announcement describes its Computers again at the next turn: a dropped one is back before its retry interval", T, async () => {
  const a = h.agent();
  await a.createSession("s");
  const stuck = `try { return await computers.stuck.run_command({ command: "back" }); } catch (e) { return e.message; }`;
  assert.match(JSON.parse((await turn("announce-1", stuck, { a })).tool.text), /stuck/);
  // The provider answers again, behind an unchanged entry: unannounced, the
  // dropped Computer waits for its retry interval (60 s).
  await h.api("POST", `/direct/${a.id}/host/computers/stuck-fixed`);
  assert.match(JSON.parse((await turn("announce-2", stuck, { a })).tool.text), /stuck/);
  await h.api("POST", `/direct/${a.id}/host/computers/stuck-fixed?announce`);
  const back = await turn("announce-3", stuck, { a });
  assert.deepEqual(JSON.parse(back.tool.text), { stdout: "ran back", exitCode: 0 });
  assert.match(back.requests[0].body.tools.find((x) => x.function.name === "execute").function.description, /computers\.stuck\.run_command/);
  // An announcement carries no list: the list is tools().computers's.
  const refused = (await h.api("POST", `/direct/${a.id}/host/computers-changed-with-list`)).json.refused;
  assert.match(refused, /^TypeError: computersChanged\(\) takes no argument/);
});
