// Extensions end to end in a real SQLite-backed Durable Object, with the
// two example extensions (examples/extensions/) and a settled-hook `tally`
// (fixture tests/e2e/fixtures/extensions-worker.mjs): commands over HTTP and
// in process (bodies checked, request ids replayed), a goal whose progress
// a settled hook keeps and a watch and the Session read see as projection
// frames, the goal's prompt section in the model's instructions, a reminder
// timer that fires after a restart and sends its prompt once, a throwing
// hook that stops its extension until the host resumes it (the missed
// settlements then replayed once, in order), and initialize closing or
// opening an instance; the goal's producer history and its ending line, anchored
// at the position its transaction read, also when the model ends it mid-turn;
// a timer a settled hook sets at a turn's end fires.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createClientEntryHost, placeCells } from "../../js/client-entry.mjs";
import { goalClient } from "../../examples/extensions/goal.client.mjs";
import { execute, uniq, useWorker } from "./helpers.mjs";

const T = { timeout: 90_000 };

async function waitFor(what, fn, { timeoutMs = 20_000, everyMs = 100 } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

describe("extensions", () => {
  const h = useWorker({ fixture: "extensions-worker", model: "echo", persist: true, bindings: { INIT: "ok" } });
  const command = (a, sid, ext, name, body) =>
    a.api("POST", sid === null ? `/extensions/${ext}/commands/${name}` : `/sessions/${sid}/extensions/${ext}/commands/${name}`, body);
  const host = (a, method, rel, body) => h.api(method, `/direct/${a.id}/host/${rel}`, body);

  test("the goal: set by a command, kept by a settled hook, projected to a watch and the read, in the model's instructions, ended at a position", T, async () => {
    const { a, sid } = await h.session();
    const watch = await a.watch(sid);
    const snapshot = await watch.next();
    assert.equal(snapshot.data.extensions.goal, undefined, "no goal projection before the goal is set");
    assert.deepEqual(snapshot.data.extensions.reminder, { pending: [] });
    const set = await command(a, sid, "goal", "set", { requestId: "g1", input: { text: "write the release notes" } });
    assert.equal(set.status, 200, set.text);
    assert.deepEqual(set.json, { result: { text: "write the release notes", status: "active" } });
    const first = await watch.until((e) => e.data?.type === "extension" && e.data.extensionId === "goal");
    const activeGoal = { text: "write the release notes", status: "active", turns: 0, completed: 0, startedAfter: 0 };
    // The goal keeps producer history, served with the frame (`at`: the commit's time).
    const frame = first.at(-1).data;
    assert.ok(frame.history.events.every((e) => Number.isSafeInteger(e.at)));
    const withoutTimes = { ...frame, history: { ...frame.history, events: frame.history.events.map(({ at: _, ...e }) => e) } };
    assert.deepEqual(withoutTimes, {
      type: "extension",
      extensionId: "goal",
      scope: "session",
      value: activeGoal,
      history: { events: [{ sequence: 1, value: activeGoal }], omitted: 0 },
    });
    const tag = uniq("goal");
    const settled = await a.settle(sid, `p-${tag}`, `draft them ${tag}`);
    assert.equal(settled.terminal, "completed");
    const progress = await watch.until((e) => e.data?.type === "extension" && e.data.extensionId === "goal");
    assert.equal(progress.at(-1).data.value.turns, 1, "the settled hook counted the turn");
    assert.equal(progress.at(-1).data.value.completed, 1);
    // The model saw the goal's prompt section beside the host's instructions.
    const [request] = h.model.requests(tag);
    assert.match(JSON.stringify(request.body), /This conversation has a goal: write the release notes/);
    // The ending line: the Session position read in the ending transaction.
    const read = await a.read(sid);
    const ended = await command(a, sid, "goal", "end", { requestId: "g2", input: { status: "achieved" } });
    assert.equal(ended.status, 200, ended.text);
    assert.equal(ended.json.result.endedAfter, read.messages.length, "after the last committed entry");
    const after = await a.read(sid);
    assert.equal(after.extensions.goal.status, "achieved");
    // The projections are added beside the page: its messages are served as
    // stored (their own key order), not parsed and written again.
    const raw = (await a.api("GET", `/sessions/${sid}`)).text;
    const firstMessage = raw.slice(raw.indexOf('"messages":[') + 12);
    assert.ok(firstMessage.startsWith('{"sequence":1,"parentEntryId":null,"entryId":'), firstMessage.slice(0, 120));
    assert.equal(after.extensions.goal.endedAfter, read.messages.length);
    // Ending twice is the handler's refusal: 422, and nothing changes.
    const again = await command(a, sid, "goal", "end", { input: { status: "abandoned" } });
    assert.equal(again.status, 422, again.text);
    assert.equal(again.json.error.code, "extension_command_failed");
    assert.match(again.json.error.message, /no active goal/);
    assert.equal((await a.read(sid)).extensions.goal.status, "achieved");
    // Later output of the Session cannot move the ending line: the goal's
    // settled hook leaves an ended goal as it is, so no event is recorded.
    const later = await a.settle(sid, `p2-${tag}`, `more ${tag}`);
    assert.equal(later.terminal, "completed");
    const final = await a.read(sid);
    assert.ok(final.messages.length > read.messages.length);
    const history = final.extensionHistory.goal;
    assert.deepEqual(
      history.events.map((e) => [e.sequence, e.value.status, e.value.turns, e.value.endedAfter]),
      [
        [1, "active", 0, undefined],
        [2, "active", 1, undefined],
        [3, "achieved", 1, read.messages.length],
      ],
    );
    assert.equal(history.omitted, 0);
    // The client entry turns it into cells: the ending one anchored at that
    // fixed Session position, placed after that row once its page is loaded.
    const entries = createClientEntryHost({ entries: [goalClient] });
    const status = await a.api("GET", "/extensions/goal");
    entries.observe("goal", sid, { status: status.json.stopped === null ? "running" : "stopped", value: final.extensions.goal, history, commands: status.json.commands.map((c) => c.name) });
    const { cells } = entries.contribution("goal", sid).timeline;
    assert.deepEqual(cells, [
      { id: "1", label: "Goal set: write the release notes", commandId: null, afterSequence: 0 },
      { id: "3", label: "Goal achieved: write the release notes", commandId: null, afterSequence: read.messages.length },
    ]);
    const rows = final.messages.map((m, i) => ({ sequence: i + 1, commandId: m.commandId }));
    const placed = placeCells({ rows, first: true }, cells);
    assert.deepEqual(placed.start.map((c) => c.id), ["1"]);
    assert.deepEqual(placed.after.get(read.messages.length).map((c) => c.id), ["3"], "after the last entry the ending transaction saw, not after the later turn");
    watch.close?.();
  });

  test("commands are checked, replayed by requestId and refused by name", T, async () => {
    const { a, sid } = await h.session();
    const add = (body) => command(a, sid, "reminder", "add", body);
    const ok = await add({ requestId: "r1", input: { text: "later", delayMs: 600_000 } });
    assert.equal(ok.status, 200, ok.text);
    const replay = await add({ requestId: "r1", input: { text: "later", delayMs: 600_000 } });
    assert.deepEqual(replay.json, ok.json, "the same requestId and input answer the stored result");
    const conflict = await add({ requestId: "r1", input: { text: "other", delayMs: 1 } });
    assert.equal(conflict.status, 409);
    assert.equal(conflict.json.error.code, "request_conflict");
    // Zod refuses the input: 400 naming the field.
    const bad = await add({ input: { text: "", delayMs: -1 } });
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.json.error.message, /text|delayMs/);
    // The config the roster gave bounds the delay (the handler's refusal).
    const far = await add({ input: { text: "x", delayMs: 600_001 } });
    assert.equal(far.status, 422, far.text);
    assert.match(far.json.error.message, /at most 600000/);
    // A JSON Schema input is checked by the core.
    const goalBad = await command(a, sid, "goal", "set", { input: { text: 5 } });
    assert.equal(goalBad.status, 400);
    assert.match(goalBad.json.error.message, /goal\.set.*\/text/);
    for (const [res, code] of [
      [await command(a, sid, "nope", "add", {}), "extension_not_found"],
      [await command(a, sid, "reminder", "nope", {}), "extension_command_not_found"],
      [await command(a, "missing", "reminder", "add", { input: { text: "x", delayMs: 1 } }), "session_not_found"],
      [await command(a, sid, "reminder", "add", { input: { text: "x", delayMs: 1 }, extra: 1 }), "invalid_request"],
      [await command(a, null, "reminder", "add", { input: { text: "x", delayMs: 1 } }), "invalid_request"],
    ]) {
      assert.equal(res.json?.error?.code, code, res.text);
    }
    // The roster's status, with the host's grant key and feature name.
    const list = await a.api("GET", "/extensions");
    assert.equal(list.status, 200);
    const reminderStatus = list.json.extensions.find((e) => e.id === "reminder");
    assert.equal(reminderStatus.grantKey, "reminders");
    assert.equal(reminderStatus.feature, "Reminders");
    assert.match(reminderStatus.revision, /^[0-9a-f]{32}$/);
    assert.equal(reminderStatus.stopped, null);
    // initialize committed its Agent-scope command before any work.
    const tally = await a.api("GET", "/extensions/tally");
    assert.deepEqual(tally.json.projection.marks, ["initialized"]);
    // In process: the host's own call, same handler.
    const inproc = await host(a, "POST", "command/tally/mark", { requestId: "m1", input: "by host" });
    assert.equal(inproc.status, 200, inproc.text);
    assert.deepEqual(inproc.json, { marks: ["initialized", "by host"] });
  });

  test("the model calls an extension command through execute, in its Session, granted by the roster's grantKey", T, async () => {
    const { a, sid } = await h.session();
    const tag = uniq("tool");
    // Two calls of one run are two commands (each guest call its own requestId).
    h.model.scriptFor(tag, execute("const r = await reminder.add({ text: 'stretch', delayMs: 600000 }); await reminder.add({ text: 'drink', delayMs: 600000 }); return r;"), { text: "set" });
    const settled = await a.settle(sid, `p-${tag}`, `remind me ${tag}`);
    assert.equal(settled.terminal, "completed", JSON.stringify(settled));
    const [first] = h.model.requests(tag);
    assert.match(JSON.stringify(first.body.tools), /reminder\.add/, "execute lists the command");
    const read = await a.read(sid, { limit: 200 });
    const tool = read.messages.find((m) => m.role === "tool");
    assert.ok(!tool.isError, tool.text);
    const out = JSON.parse(tool.text);
    assert.ok(out.name.startsWith(`${sid}:`), tool.text);
    assert.deepEqual(read.extensions.reminder.pending.map((p) => p.text), ["stretch", "drink"]);
    // The Session's grants name the module by the roster's grantKey.
    const delivered = await h.api("POST", `/host-grants/${a.id}/${sid}`, { version: 1, grants: { reminders: "read" } });
    assert.equal(delivered.status, 200, delivered.text);
    const tag2 = uniq("denied");
    h.model.scriptFor(tag2, execute("return await reminder.add({ text: 'again', delayMs: 600000 });"), { text: "refused" });
    await a.settle(sid, `p-${tag2}`, `remind me again ${tag2}`);
    const after = await a.read(sid, { limit: 200 });
    const denied = after.messages.filter((m) => m.role === "tool").at(-1);
    assert.match(denied.text, /refused/, denied.text);
    assert.equal(after.extensions.reminder.pending.length, 2, "the refused call changed nothing");
  });

  test("the model ends the goal mid-turn: the ending line stays at the position its transaction read, before the turn's later output", T, async () => {
    const { a, sid } = await h.session();
    const set = await command(a, sid, "goal", "set", { input: { text: "tidy up" } });
    assert.equal(set.status, 200, set.text);
    const tag = uniq("end");
    h.model.scriptFor(tag, execute("return await goal.end({ status: 'achieved' });"), { text: "all tidy" });
    const settled = await a.settle(sid, `p-${tag}`, `finish ${tag}`);
    assert.equal(settled.terminal, "completed", JSON.stringify(settled));
    const read = await a.read(sid, { limit: 200 });
    // user, assistant (the call), tool (its result), assistant (the answer).
    assert.deepEqual(read.messages.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
    assert.equal(read.extensions.goal.endedAfter, 2, "the position the ending transaction read: after the call, before its result");
    const events = read.extensionHistory.goal.events;
    assert.deepEqual(events.map((e) => [e.sequence, e.value.status]), [
      [1, "active"],
      [2, "achieved"],
    ], "the settled hook left the ended goal unchanged: no third event");
    const entries = createClientEntryHost({ entries: [goalClient] });
    entries.observe("goal", sid, { status: "running", value: read.extensions.goal, history: read.extensionHistory.goal, commands: ["set", "end"] });
    const rows = read.messages.map((m, i) => ({ sequence: i + 1, commandId: m.commandId }));
    const placed = placeCells({ rows, first: true }, entries.contribution("goal", sid).timeline.cells);
    assert.deepEqual([...placed.after.entries()].map(([at, cells]) => [at, cells.map((c) => c.label)]), [[2, ["Goal achieved: tidy up"]]]);
    assert.deepEqual(placed.start.map((c) => c.label), ["Goal set: tidy up"]);
  });

  test("a reminder's timer survives a restart, fires once and sends its prompt", T, async () => {
    const { a, sid } = await h.session();
    const added = await command(a, sid, "reminder", "add", { requestId: "t1", input: { text: "check the deploy", delayMs: 3000 } });
    assert.equal(added.status, 200, added.text);
    assert.equal((await a.read(sid)).extensions.reminder.pending.length, 1);
    await h.restart();
    const reminded = await waitFor("the reminder's prompt", async () => {
      const read = await a.read(sid, { limit: 200 });
      return read.messages.some((m) => m.role === "assistant") ? read : null;
    });
    const users = reminded.messages.filter((m) => m.role === "user");
    assert.deepEqual(users.map((m) => m.text), ["Reminder: check the deploy"]);
    assert.deepEqual(reminded.extensions.reminder.pending, []);
    // Once: nothing more arrives.
    await new Promise((r) => setTimeout(r, 2500));
    const later = await a.read(sid, { limit: 200 });
    assert.equal(later.messages.filter((m) => m.role === "user").length, 1);
  });

  test("a reminder whose Session was deleted does not recreate it (requireExistingSession) and the extension runs on", T, async () => {
    const { a, sid } = await h.session();
    const added = await command(a, sid, "reminder", "add", { requestId: "d1", input: { text: "too late", delayMs: 1500 } });
    assert.equal(added.status, 200, added.text);
    const deleted = await a.api("DELETE", `/sessions/${sid}`);
    assert.equal(deleted.status, 204, deleted.text);
    // Past its due time (1.5 s) and an alarm pass.
    await new Promise((r) => setTimeout(r, 3500));
    assert.equal((await a.api("GET", `/sessions/${sid}`)).status, 404, "the deleted Session is not recreated");
    const status = (await a.api("GET", "/extensions/reminder")).json;
    assert.equal(status.stopped, null, "a closed Session does not stop the extension");
    // It still works for a live Session.
    const live = await a.createSession("live");
    assert.equal((await command(a, live, "reminder", "add", { requestId: "d2", input: { text: "on time", delayMs: 1 } })).status, 200);
    await waitFor("the live reminder's prompt", async () => {
      const read = await a.read(live, { limit: 200 });
      return read.messages.some((m) => m.role === "user" && m.text === "Reminder: on time") ? read : null;
    });
  });

  test("a throwing settled hook stops its extension; resuming replays the missed settlements once, in order", T, async () => {
    const a = h.agent();
    const sid = await a.createSession("s");
    const tally = async () => (await a.api("GET", "/extensions/tally")).json;
    const s1 = await a.settle(sid, "t1", "one");
    await host(a, "POST", "tally/break?on=1");
    const s2 = await a.settle(sid, "t2", "two");
    const stopped = await tally();
    assert.match(stopped.stopped?.reason ?? "", /tally is broken/);
    await host(a, "POST", "tally/break?on=0");
    const s3 = await a.settle(sid, "t3", "three");
    assert.equal(s3.terminal, "completed", "the Session runs on while its extension is stopped");
    assert.deepEqual((await tally()).projection.seen, [s1.commandId], "no hook ran while stopped");
    // Commands of a stopped extension are refused by name.
    const refused = await command(a, null, "tally", "mark", { input: "x" });
    assert.equal(refused.status, 409);
    assert.equal(refused.json.error.code, "extension_stopped");
    const resumed = await host(a, "POST", "resume/tally");
    assert.equal(resumed.status, 200, resumed.text);
    assert.equal(resumed.json.stopped, null);
    const caught = await waitFor("the replay", async () => {
      const t = await tally();
      return t.behind === false && t.projection.seen.length >= 3 ? t : null;
    });
    assert.deepEqual(caught.projection.seen, [s1.commandId, s2.commandId, s3.commandId]);
    const s4 = await a.settle(sid, "t4", "four");
    assert.deepEqual((await tally()).projection.seen, [s1.commandId, s2.commandId, s3.commandId, s4.commandId]);
  });

  test("a timer a settled hook sets at a turn's end fires: the loop arms the alarm for it", T, async () => {
    const a = h.agent();
    const sid = await a.createSession("s");
    const fired = async () => (await a.api("GET", "/extensions/followup")).json.projection.fired;
    const plain = await a.settle(sid, "f0", "no timer here");
    const marked = await a.settle(sid, "f1", "[followup] please");
    assert.equal(marked.terminal, "completed");
    // Nothing else wakes this Agent: reads do not.
    const seen = await waitFor("the settled hook's timer", async () => {
      const ids = await fired();
      return ids.length > 0 ? ids : null;
    }, { timeoutMs: 10_000 });
    assert.deepEqual(seen, [marked.commandId]);
    assert.ok(!seen.includes(plain.commandId));
  });
});

describe("extensions with a failing initialize", () => {
  const h = useWorker({ fixture: "extensions-worker", model: "echo", bindings: { INIT: "fail" } });

  test("initialize failing closes the instance: 503 runtime_closed, nothing runs", T, async () => {
    const a = h.agent();
    const res = await a.api("POST", "/sessions", { sessionId: "s" });
    assert.equal(res.status, 503, res.text);
    assert.equal(res.json.error.code, "runtime_closed");
    assert.match(res.json.error.message, /could not initialize/);
    const list = await a.api("GET", "/extensions");
    assert.equal(list.status, 503);
  });
});
