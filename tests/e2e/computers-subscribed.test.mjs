// Computers subscribed, not polled (seed knapsack: "Knapsack.computers
// subscribes to a host-owned connection list and invalidates its captured
// modules when that list changes"): a host whose tools().computers is an
// async iterable announces each change by yielding the new list; an idle
// Agent's very next turn offers a Computer added and no longer one removed;
// a change announced during a turn applies at the next tool offer, not to
// the call running; a list refused is reported and the previous one stays;
// announcing to a host that lists no Computers is refused.
// The method form (ShiitakeDO#computersChanged) is in computers.test.mjs.
// Fixtures: tests/e2e/fixtures/computers-subscribed-worker.mjs, the peer
// tests/e2e/fixtures/computer-worker.mjs (service binding COMPUTER).
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { ROOT, execute, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({
  fixture: "computers-subscribed-worker",
  model: "echo",
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
const FOUND = "return (await forage.search('run command')).map((f) => f.path).sort();";

async function turn(a, name, code) {
  const tag = uniq(name);
  h.model.scriptFor(tag, execute(code), { text: "done" });
  const settled = await a.settle("s", `r-${tag}`, `computers ${tag}`, { boundMs: 30_000 });
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  const tool = (await a.read("s", { limit: 200 })).messages.filter((m) => m.role === "tool").at(-1);
  const requests = h.model.requests(tag);
  const description = requests[0].body.tools.find((x) => x.function.name === "execute").function.description;
  return { out: JSON.parse(tool.text), description };
}

async function agent() {
  const a = h.agent();
  await a.createSession("s");
  return a;
}

const announce = async (a, variant) => {
  const answer = await h.api("POST", `/direct/${a.id}/host/computers/${variant}`);
  assert.equal(answer.status, 200, answer.text);
};

test("an idle Agent's next turn offers the Computer its host announced, and no longer the one it removed", T, async () => {
  const a = await agent();
  const first = await turn(a, "sub-1", FOUND);
  assert.deepEqual(first.out, ["computers.laptop.run_command"]);
  await announce(a, "with-desk");
  const second = await turn(a, "sub-2", FOUND);
  assert.deepEqual(second.out, ["computers.desk.run_command", "computers.laptop.run_command"]);
  assert.match(second.description, /computers\.desk\.run_command/, "offered at the turn's first request");
  await announce(a, "without-laptop");
  const third = await turn(a, "sub-3", `
    const out = { found: (await forage.search('run command')).map((f) => f.path) };
    try { await computers.laptop.run_command({ command: "x" }); } catch (e) { out.laptop = e.message; }
    return out;`);
  assert.deepEqual(third.out.found, ["computers.desk.run_command"]);
  assert.match(third.out.laptop, /laptop/);
  assert.doesNotMatch(third.description, /computers\.laptop/);
});

test("a change announced during a turn applies at the next tool offer, not to the call running", T, async () => {
  const a = await agent();
  const during = await turn(a, "sub-during", `
    await lists.change({ variant: "without-laptop" });
    return await computers.laptop.run_command({ command: "after the switch" });`);
  assert.deepEqual(during.out, { stdout: "ran after the switch", exitCode: 0 });
  const next = await turn(a, "sub-after", FOUND);
  assert.deepEqual(next.out, ["computers.desk.run_command"]);
});

test("a list the iterable yields that is refused is reported, and the previous list stays", T, async () => {
  const a = await agent();
  await announce(a, "with-desk");
  assert.deepEqual((await turn(a, "sub-good", FOUND)).out, ["computers.desk.run_command", "computers.laptop.run_command"]);
  // Only the latest list counts: each one refused is seen by a turn first.
  await announce(a, "bad");
  assert.deepEqual((await turn(a, "sub-bad", FOUND)).out, ["computers.desk.run_command", "computers.laptop.run_command"]);
  await announce(a, "too-many");
  assert.deepEqual((await turn(a, "sub-many", FOUND)).out, ["computers.desk.run_command", "computers.laptop.run_command"]);
  const reports = (await h.api("GET", `/direct/${a.id}/host/unavailable`)).json.filter((r) => r.name === "tools().computers");
  assert.equal(reports.length, 2, JSON.stringify(reports));
  assert.match(reports[0].reason, /refused, the previous one stays: .*computers\[0\]/);
  assert.match(reports[1].reason, /33 Computers, more than 32/);
});

test("an announcement is refused where tools() lists no Computers", T, async () => {
  const a = h.agent();
  await announce(a, "none");
  await a.createSession("s");
  const answer = await h.api("POST", `/direct/${a.id}/host/computers-changed`);
  assert.match(answer.json.refused, /^TypeError: computersChanged\(\): tools\(\) lists no Computers/);
});
