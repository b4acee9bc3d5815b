// Client entries v1 (js/client-entry.mjs; seed shiitake.md "Client
// entries"), in Node without a Worker: admission, every bound at the limit
// and one past, invalid output retiring only its entry's rows, evaluation
// once per changed slot, activity (sliding slot, independent subscriptions,
// detach), action validation and local refusals, cell ids and placement.
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import {
  CLIENT_CHIPS_MAX,
  CLIENT_LABEL_CHARS_MAX,
  CLIENT_PANEL_ROWS_MAX,
  CLIENT_PROTOCOL,
  CLIENT_ROWS_MAX,
  CLIENT_TIMELINE_CELLS_MAX,
  ClientEntryError,
  admitClientEntry,
  bindingDispatch,
  createClientEntryHost,
  defineClientEntry,
  placeCells,
} from "../../js/client-entry.mjs";
import { goalClient } from "../../examples/extensions/goal.client.mjs";
import { linksClient } from "../../examples/extensions/links.client.mjs";

/** A minimal synchronous Standard Schema: `{ title: string }`, its output upper-cased (so decoding is visible). */
const Title = {
  "~standard": {
    version: 1,
    vendor: "test",
    validate: (v) =>
      v !== null && typeof v === "object" && typeof v.title === "string"
        ? { value: { title: v.title.toUpperCase() } }
        : { issues: [{ message: "expected { title: string }", path: ["title"] }] },
  },
};
const contract = { id: "progress", commands: {}, projection: { schema: Title } };
const empty = () => ({ chips: [], panel: [], timeline: { cells: [], omitted: 0 }, waiting: null });

/** A host over `entries`, its errors collected. */
function hostOf(entries, more = {}) {
  const errors = [];
  const host = createClientEntryHost({ entries, onError: (error, where) => errors.push({ ...where, error }), ...more });
  return { host, errors };
}

/** One entry whose contribute returns `make(view)`. */
function entryReturning(make, id = "progress") {
  return defineClientEntry({ ...contract, id }, { contribute: make });
}

const running = (value, commands = []) => ({ status: "running", value, commands });

function refusedWith(code, fn, pattern) {
  assert.throws(fn, (e) => e instanceof ClientEntryError && e.code === code && (!pattern || pattern.test(e.message)), `expected ${code}`);
}

test("defineClientEntry: the installed entry has only protocol, id, attach?, contribute?; at least one callback", () => {
  const entry = entryReturning(empty);
  assert.deepEqual(Object.keys(entry).sort(), ["contribute", "id", "protocol"]);
  assert.equal(entry.protocol, CLIENT_PROTOCOL);
  assert.equal(CLIENT_PROTOCOL, "shiitake.client/v1");
  assert.ok(Object.isFrozen(entry));
  const attachOnly = defineClientEntry(contract, { attach: () => {} });
  assert.deepEqual(Object.keys(attachOnly).sort(), ["attach", "id", "protocol"]);
  assert.throws(() => defineClientEntry(contract, {}), /at least one of attach and contribute/);
  assert.throws(() => defineClientEntry(contract, { contribute: empty, render: () => {} }), /unknown callback "render"/);
  assert.throws(() => defineClientEntry(contract, { contribute: 1 }), /contribute must be a function/);
  assert.throws(() => defineClientEntry({ id: "Bad Id" }, { contribute: empty }), /extension id/);
  assert.throws(() => defineClientEntry({ id: "x", projection: { schema: {} } }, { contribute: empty }), /Standard Schema/);
});

test("admission: exactly shiitake.client/v1; unknown keys, a missing protocol and superseded shapes are refused by name", () => {
  const entry = entryReturning(empty);
  assert.equal(admitClientEntry(entry), entry);
  // A hand-written entry of the exact shape is admitted (its projection is not decoded).
  assert.ok(admitClientEntry({ protocol: CLIENT_PROTOCOL, id: "x", contribute: empty }));
  refusedWith("entry_refused", () => admitClientEntry({ id: "x", contribute: empty }), /has no protocol; this host admits exactly shiitake\.client\/v1/);
  refusedWith("entry_refused", () => admitClientEntry({ protocol: "shiitake.client/v0", id: "x", contribute: empty }), /"shiitake\.client\/v0" is not admitted/);
  refusedWith("entry_refused", () => admitClientEntry({ protocol: CLIENT_PROTOCOL, id: "x", contribute: empty, render: () => null }), /unknown key "render"/);
  // The superseded shape: an extension id and a component, no protocol.
  refusedWith("entry_refused", () => admitClientEntry({ extensionId: "x", component: () => null }), /no protocol/);
  refusedWith("entry_refused", () => admitClientEntry({ protocol: CLIENT_PROTOCOL, id: "x" }), /neither attach nor contribute/);
  refusedWith("entry_refused", () => admitClientEntry({ protocol: CLIENT_PROTOCOL, id: "x", attach: "no" }), /attach must be a function/);
  refusedWith("entry_refused", () => admitClientEntry(null), /expected an object/);
  refusedWith("entry_refused", () => admitClientEntry({ protocol: CLIENT_PROTOCOL, id: 7, contribute: empty }), /extension id/);
  refusedWith("entry_refused", () => createClientEntryHost({ entries: [entry, entryReturning(empty)] }), /two entries for extension progress/);
});

test("contribute sees the typed view, decoded at the seam, and returns the seed's example rows", () => {
  const entry = defineClientEntry(contract, {
    contribute: (view) => ({
      chips: [],
      panel: view.status === "running" && view.value !== null ? [{ id: "progress", title: view.value.title }] : [],
      timeline: { cells: [], omitted: 0 },
      waiting: null,
    }),
  });
  const { host, errors } = hostOf([entry]);
  host.observe("progress", "s1", running({ title: "ship" }));
  assert.deepEqual(host.contribution("progress", "s1").panel, [{ id: "progress", title: "SHIP" }]);
  assert.equal(host.view("progress", "s1").value.title, "SHIP", "the decoder's output, not the raw value");
  host.observe("progress", "s1", { status: "stopped", value: { title: "ship" } });
  assert.deepEqual(host.contribution("progress", "s1").panel, []);
  // A decoder that throws is reported like a refusal.
  const throwing = defineClientEntry({ id: "thrower", projection: { schema: { "~standard": { version: 1, vendor: "t", validate: () => { throw new Error("kaput"); } } } } }, { contribute: empty });
  const t = hostOf([throwing]);
  t.host.observe("thrower", "s", running({}));
  assert.deepEqual([t.errors[0].error.code, /validate threw: kaput/.test(t.errors[0].error.message)], ["invalid_projection", true]);
  // A projection the decoder refuses retires the rows and reports, like invalid output.
  host.observe("progress", "s1", running({ title: 3 }));
  assert.equal(host.contribution("progress", "s1"), null);
  assert.equal(errors.at(-1).error.code, "invalid_projection");
  assert.match(errors.at(-1).error.message, /\/title: expected/);
});

/** Bounds at the limit (accepted) and one past (refused): `make(n)` builds a contribution with n of the thing. */
const BOUNDS = [
  ["chips", CLIENT_CHIPS_MAX, (n) => ({ ...empty(), chips: Array.from({ length: n }, (_, i) => ({ id: `c${i}`, title: "t" })) })],
  ["panel", CLIENT_PANEL_ROWS_MAX, (n) => ({ ...empty(), panel: Array.from({ length: n }, (_, i) => ({ id: `p${i}`, title: "t" })) })],
  ["timeline.cells", CLIENT_TIMELINE_CELLS_MAX, (n) => ({ ...empty(), timeline: { cells: Array.from({ length: n }, (_, i) => ({ id: String(i + 1), label: "l" })), omitted: 0 } })],
  ["label", CLIENT_LABEL_CHARS_MAX, (n) => ({ ...empty(), panel: [{ id: "p", title: "🍄".repeat(n) }] })],
];

test("bounds: 4 chips, 16 panel rows, 32 cells, 4,096-character labels: at the limit accepted, one past refused", () => {
  assert.deepEqual([CLIENT_CHIPS_MAX, CLIENT_PANEL_ROWS_MAX, CLIENT_TIMELINE_CELLS_MAX, CLIENT_ROWS_MAX, CLIENT_LABEL_CHARS_MAX], [4, 16, 32, 200, 4096]);
  for (const [what, max, make] of BOUNDS) {
    let n = max;
    const { host, errors } = hostOf([entryReturning(() => make(n))]);
    host.observe("progress", "s", running({ title: "a" }));
    assert.ok(host.contribution("progress", "s"), `${what} at ${max} is accepted`);
    n = max + 1;
    host.observe("progress", "s", running({ title: "b" }));
    assert.equal(host.contribution("progress", "s"), null, `${what} at ${max + 1} is refused`);
    assert.equal(errors.length, 1);
    assert.equal(errors[0].error.code, "invalid_output");
    assert.match(errors[0].error.message, new RegExp(`at most ${max}`));
  }
  // Labels count characters (code points), not UTF-16 units: 4,096 mushrooms are 8,192 units.
});

test("bounds: at most 200 rows per entry across its slots; the slot that passes it is retired, not the others", () => {
  // 4 + 16 + 32 + 1 (waiting) = 53 rows per slot: three slots hold 159, a fourth would hold 212.
  const full = () => ({
    chips: Array.from({ length: 4 }, (_, i) => ({ id: `c${i}`, title: "t" })),
    panel: Array.from({ length: 16 }, (_, i) => ({ id: `p${i}`, title: "t" })),
    timeline: { cells: Array.from({ length: 32 }, (_, i) => ({ id: String(i + 1), label: "l" })), omitted: 0 },
    waiting: { summary: "waiting" },
  });
  let small = false;
  const { host, errors } = hostOf([entryReturning(() => (small ? { ...empty(), chips: Array.from({ length: 41 - 37 }, (_, i) => ({ id: `c${i}`, title: "t" })), panel: Array.from({ length: 16 }, (_, i) => ({ id: `p${i}`, title: "t" })), timeline: { cells: Array.from({ length: 21 }, (_, i) => ({ id: String(i + 1), label: "l" })), omitted: 0 } } : full()))]);
  for (const s of ["a", "b", "c"]) host.observe("progress", s, running({ title: s }));
  assert.equal(errors.length, 0);
  // 159 + 41 = 200: at the limit.
  small = true;
  host.observe("progress", "d", running({ title: "d" }));
  assert.equal(errors.length, 0, "200 rows are accepted");
  assert.ok(host.contribution("progress", "d"));
  // 159 + 53 = 212: one slot past it is retired; the others keep their rows.
  small = false;
  host.observe("progress", "d", running({ title: "d2" }));
  assert.equal(host.contribution("progress", "d"), null);
  assert.match(errors[0].error.message, /212 rows across its slots; at most 200 per entry/);
  for (const s of ["a", "b", "c"]) assert.ok(host.contribution("progress", s));
  // A forgotten slot's rows no longer count: "d" fits again.
  host.forget("a");
  assert.equal(host.contribution("progress", "a"), null);
  host.observe("progress", "d", running({ title: "d3" }));
  assert.ok(host.contribution("progress", "d"));
});

test("invalid output retires that entry's rows and reports its error; other entries keep theirs", () => {
  let broken = false;
  const a = entryReturning(() => (broken ? { chips: [{ id: "x", title: "t", actions: [] }] } : { ...empty(), chips: [{ id: "x", title: "t" }] }), "alpha");
  const b = entryReturning(() => ({ ...empty(), panel: [{ id: "y", title: "fine" }] }), "beta");
  const c = entryReturning(() => {
    throw new Error("boom");
  }, "gamma");
  const { host, errors } = hostOf([a, b, c]);
  host.observe("alpha", "s", running({ title: "1" }));
  host.observe("beta", "s", running({ title: "1" }));
  host.observe("gamma", "s", running({ title: "1" }));
  assert.equal(errors.length, 1);
  assert.deepEqual([errors[0].extensionId, errors[0].error.code], ["gamma", "contribute_threw"]);
  assert.match(errors[0].error.message, /contribute threw: boom/);
  broken = true;
  host.observe("alpha", "s", running({ title: "2" }));
  assert.equal(host.contribution("alpha", "s"), null, "alpha's rows are retired");
  assert.match(host.error("alpha", "s").message, /chips\[0\]: unknown key "actions"/, "chips carry no actions");
  assert.deepEqual(host.contribution("beta", "s").panel, [{ id: "y", title: "fine" }], "beta is untouched");
  // The host keeps the newest 64 errors; onError hears each.
  for (let n = 0; n < 70; n++) host.observe("gamma", "s", running({ title: `again ${n}` }));
  assert.equal(errors.length, 72);
  assert.equal(host.errors.length, 64);
  assert.match(host.errors.at(-1).error.message, /boom/);
  // Recovery: the next valid output brings alpha's rows back.
  broken = false;
  host.observe("alpha", "s", running({ title: "3" }));
  assert.ok(host.contribution("alpha", "s"));
  assert.equal(host.error("alpha", "s"), null);
});

test("output shape: chips without open targets, compact optional, a promise or unknown keys refused", () => {
  const cases = [
    [{ ...empty(), chips: [{ id: "c", title: "t", open: { sessionId: "s" } }] }, /unknown key "open"/],
    [Promise.resolve(empty()), /returned a promise; it is synchronous/],
    [{ ...empty(), extra: 1 }, /unknown key "extra"/],
    [{ ...empty(), panel: [{ id: "a", title: "t" }, { id: "a", title: "u" }] }, /used twice/],
    [{ ...empty(), panel: [{ id: "a", title: "" }] }, /non-empty string/],
    [{ ...empty(), timeline: { cells: [], omitted: -1 } }, /omitted must be an integer >= 0/],
  ];
  for (const [out, pattern] of cases) {
    const { host, errors } = hostOf([entryReturning(() => out)]);
    host.observe("progress", "s", running({ title: "t" }));
    assert.equal(host.contribution("progress", "s"), null);
    assert.match(errors[0].error.message, pattern);
  }
  const { host } = hostOf([entryReturning(() => ({ ...empty(), chips: [{ id: "c", title: "Goal", compact: "G" }] }))]);
  host.observe("progress", "s", running({ title: "t" }));
  assert.deepEqual(host.contribution("progress", "s").chips, [{ id: "c", title: "Goal", compact: "G" }]);
});

test("contribute runs once per changed slot, never per read of its rows", () => {
  let calls = 0;
  const changes = [];
  const { host } = hostOf(
    [
      entryReturning(() => {
        calls += 1;
        return empty();
      }),
    ],
    { onChange: (where) => changes.push(`${where.extensionId}/${where.slot}`) },
  );
  assert.equal(host.observe("progress", "s", running({ title: "a" })), true);
  for (let i = 0; i < 10; i++) host.contribution("progress", "s"); // renders
  assert.equal(host.observe("progress", "s", running({ title: "a" })), false, "the same observation again");
  assert.equal(calls, 1);
  host.observe("progress", "s", running({ title: "b" }));
  host.observe("progress", "t", running({ title: "b" }));
  assert.equal(calls, 3, "one call per changed slot");
  assert.deepEqual(changes, ["progress/s", "progress/s", "progress/t"], "renderers hear each change once");
  host.close();
  assert.throws(() => host.observe("progress", "s", running({ title: "c" })), /closed/);
});

test("cells: ids are positive safe integers as decimal text; one anchor kind, never both", () => {
  const check = (cell) => {
    const { host, errors } = hostOf([entryReturning(() => ({ ...empty(), timeline: { cells: [cell], omitted: 0 } }))]);
    host.observe("progress", "s", running({ title: "t" }));
    return errors[0]?.error.message ?? host.contribution("progress", "s").timeline.cells[0];
  };
  assert.deepEqual(check({ id: "1", label: "l" }), { id: "1", label: "l" });
  assert.deepEqual(check({ id: String(Number.MAX_SAFE_INTEGER), label: "l" }).id, "9007199254740991");
  for (const id of ["0", "-1", "01", "1.5", "9007199254740992", "", "x", 7]) assert.match(check({ id, label: "l" }), /positive safe integer written as decimal text/, `id ${JSON.stringify(id)}`);
  assert.deepEqual(check({ id: "2", label: "l", commandId: "cmd_1" }), { id: "2", label: "l", commandId: "cmd_1" });
  assert.deepEqual(check({ id: "3", label: "l", commandId: null, afterSequence: 0 }), { id: "3", label: "l", commandId: null, afterSequence: 0 });
  assert.match(check({ id: "4", label: "l", commandId: "cmd_1", afterSequence: 3 }), /never both/);
  assert.match(check({ id: "5", label: "l", afterSequence: 3 }), /afterSequence comes with commandId: null/);
  assert.match(check({ id: "6", label: "l", commandId: null }), /leave both out/);
  assert.match(check({ id: "7", label: "l", commandId: null, afterSequence: -1 }), /integer >= 0/);
});

test("placement: after a command's last loaded row, after a fixed position, 0 before the first entry, hidden until loaded, unanchored under Extension changes", () => {
  const cells = [
    { id: "5", label: "after c1", commandId: "c1" },
    { id: "1", label: "at 0", commandId: null, afterSequence: 0 },
    { id: "2", label: "after 3", commandId: null, afterSequence: 3 },
    { id: "3", label: "unanchored" },
    { id: "4", label: "after c9", commandId: "c9" },
    { id: "6", label: "after 40", commandId: null, afterSequence: 40 },
  ];
  // The newest page: rows 3..6 (c1's rows 3..5, c2's row 6); not the first entry.
  const page = [
    { sequence: 3, commandId: "c1" },
    { sequence: 4, commandId: "c1" },
    { sequence: 5, commandId: "c1" },
    { sequence: 6, commandId: "c2" },
  ];
  const newest = placeCells({ rows: page, first: false }, cells);
  assert.deepEqual(newest.start, []);
  assert.deepEqual([...newest.after.entries()].map(([s, cs]) => [s, cs.map((c) => c.id)]), [
    [3, ["2"]],
    [5, ["5"]],
  ]);
  assert.deepEqual(newest.changes.map((c) => c.id), ["3"]);
  assert.deepEqual(newest.hidden.map((c) => c.id), ["1", "4", "6"], "position 0 and unloaded anchors stay hidden");
  // The older page loads: position 0 appears before the first entry; c1's anchor moves to its last loaded row.
  const all = placeCells({ rows: [{ sequence: 1, commandId: "c0" }, { sequence: 2, commandId: "c0" }, ...page], first: true }, cells);
  assert.deepEqual(all.start.map((c) => c.id), ["1"]);
  assert.deepEqual(all.after.get(5).map((c) => c.id), ["5"]);
  assert.deepEqual(all.hidden.map((c) => c.id), ["4", "6"]);
});

/** Waits until `predicate()` holds (bounded). */
async function until(predicate, what) {
  for (let i = 0; i < 200; i++) {
    if (predicate()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.fail(`timed out: ${what}`);
}

test("attach: no Session authority; each for await is its own subscription with a sliding latest-value slot; detach aborts and ends every iterator", async () => {
  let ctxSeen;
  const fast = [];
  const slow = [];
  let releaseSlow;
  const slowGate = new Promise((r) => {
    releaseSlow = r;
  });
  const ended = { fast: false, slow: false };
  const entry = defineClientEntry(contract, {
    attach: async (ctx) => {
      ctxSeen = ctx;
      const a = (async () => {
        for await (const view of ctx.activity) fast.push(view.value.title);
        ended.fast = true;
      })();
      const b = (async () => {
        for await (const view of ctx.activity) {
          slow.push(view.value.title);
          await slowGate; // a slow consumer
        }
        ended.slow = true;
      })();
      await Promise.all([a, b]);
    },
  });
  const { host, errors } = hostOf([entry]);
  host.observe("progress", "s1", running({ title: "a" }));
  host.select("s1");
  assert.deepEqual(Object.keys(ctxSeen).sort(), ["activity", "onError", "signal"], "activity, signal, onError: no Session authority");
  await until(() => fast.length === 1 && slow.length === 1, "the current view");
  for (const t of ["b", "c", "d"]) {
    host.observe("progress", "s1", running({ title: t }));
    await until(() => fast.at(-1) === t.toUpperCase(), `fast sees ${t}`);
  }
  assert.deepEqual(fast, ["A", "B", "C", "D"], "a fast subscription sees every value");
  releaseSlow();
  await until(() => slow.length === 2, "the slow one's next value");
  assert.deepEqual(slow, ["A", "D"], "the slow subscription's slot slid to the latest value");
  // Another Session's slot is not this attachment's activity.
  host.observe("progress", "s2", running({ title: "other" }));
  // Buffered activity is discarded at detach.
  host.observe("progress", "s1", running({ title: "e" }));
  host.detach();
  assert.equal(ctxSeen.signal.aborted, true);
  assert.equal(ctxSeen.signal.reason.code, "detached");
  await until(() => ended.fast && ended.slow, "every iterator ended");
  assert.ok(!slow.includes("E") && !slow.includes("OTHER"));
  // A new for await after detach ends at once.
  const late = [];
  for await (const v of ctxSeen.activity) late.push(v);
  assert.deepEqual(late, []);
  // An attach that rejects is reported without touching contributions.
  const failing = defineClientEntry({ id: "failing" }, { attach: async () => Promise.reject(new Error("attach failed")) });
  const other = hostOf([failing]);
  other.host.select("s");
  await until(() => other.errors.length === 1, "the rejection reported");
  assert.match(other.errors[0].error.message, /attach failed/);
  assert.equal(errors.length, 0);
});

test("actions: ids from the running catalog, input a JSON object; offline and stale actions refuse locally; waiting cancel keeps notices and rejects prompts", async () => {
  const sent = [];
  const notices = [];
  let askPrompt = false;
  const dispatch = async (call) => {
    sent.push({ command: call.command, input: call.input });
    call.notice(`ran ${call.command}`);
    if (askPrompt) return call.prompt("sure?");
    return "ok";
  };
  let out = (view) => ({
    ...empty(),
    panel: [{ id: "row", title: view.value?.title ?? "-", actions: [{ id: "end", label: "End", input: { status: "achieved" } }, { id: "set", label: "Set" }] }],
    waiting: { summary: "Working", cancel: { id: "end", label: "Stop", input: { status: "abandoned" } } },
  });
  const entry = entryReturning((view) => out(view));
  const { host, errors } = createHost();
  function createHost() {
    const errors = [];
    return { host: createClientEntryHost({ entries: [entry], dispatch, notice: (m) => notices.push(m), prompt: async () => "yes", onError: (e) => errors.push(e) }), errors };
  }
  host.observe("progress", "s", running({ title: "t" }, ["set", "end"]));
  const [end, set] = host.contribution("progress", "s").panel[0].actions;
  assert.deepEqual(end, { id: "end", label: "End", input: { status: "achieved" } });
  assert.equal(await host.act("progress", "s", end), "ok");
  assert.deepEqual(sent.at(-1), { command: "end", input: { status: "achieved" } });
  assert.equal(await host.act("progress", "s", set), "ok");
  assert.deepEqual(sent.at(-1), { command: "set", input: {} });

  // A prompt during an ordinary action reaches the host's dialog; a waiting cancellation rejects it but keeps the notice.
  askPrompt = true;
  assert.equal(await host.act("progress", "s", end), "yes");
  const before = notices.length;
  await assert.rejects(host.cancelWaiting("progress", "s"), (e) => e.code === "prompt_rejected");
  assert.equal(notices.length, before + 1, "the notice was kept");
  assert.deepEqual(sent.at(-1), { command: "end", input: { status: "abandoned" } });
  askPrompt = false;

  // Stale: an action from an earlier contribution, or a forged one, sends nothing.
  const count = sent.length;
  host.observe("progress", "s", running({ title: "u" }, ["set", "end"]));
  await assert.rejects(host.act("progress", "s", end), (e) => e.code === "stale_action");
  await assert.rejects(host.act("progress", "s", { id: "end", label: "End" }), (e) => e.code === "stale_action");
  // Offline (not observed, disconnected or stopped): refused locally.
  const fresh = host.contribution("progress", "s").panel[0].actions[0];
  host.observe("progress", "s", { status: "offline", value: { title: "u" }, commands: ["set", "end"] });
  await assert.rejects(host.act("progress", "s", fresh), (e) => e.code === "offline" && /nothing was sent/.test(e.message));
  await assert.rejects(host.act("progress", "never", fresh), (e) => e.code === "offline");
  assert.equal(sent.length, count, "no request was sent");

  // Output naming a command outside the running catalog, or a non-object input, is invalid output.
  host.observe("progress", "s", running({ title: "v" }, ["set"]));
  assert.equal(host.contribution("progress", "s"), null);
  assert.match(errors.at(-1).message, /id "end" is not a command of the running catalog \(set\)/);
  for (const input of [[1], "x", 3, null, { when: () => 1 }]) {
    out = () => ({ ...empty(), panel: [{ id: "r", title: "t", actions: [{ id: "set", label: "Set", input }] }] });
    host.observe("progress", "s", running({ title: JSON.stringify(input) ?? "f" }, ["set"]));
    assert.equal(host.contribution("progress", "s"), null);
    assert.match(errors.at(-1).message, /input must be a JSON object/);
  }
});

test("open targets: panel rows and cells carry { kind: session, sessionId, agentId? }; bad shapes are invalid output; open goes through the host's callback, which authorizes; stale targets refuse locally", async () => {
  const good = { kind: "session", sessionId: "ses_abc", agentId: "other.agent" };
  const bad = [
    [{ kind: "url", sessionId: "ses_abc" }, /kind "url" is not an open target kind \(session\)/],
    [{ sessionId: "ses_abc" }, /kind undefined is not an open target kind/],
    [{ kind: "session" }, /sessionId undefined must be a Session id/],
    [{ kind: "session", sessionId: "" }, /sessionId "" must be a Session id/],
    [{ kind: "session", sessionId: "a/b" }, /sessionId "a\/b" must be a Session id/],
    [{ kind: "session", sessionId: "s".repeat(129) }, /must be a Session id \(1 to 128/],
    [{ kind: "session", sessionId: "s", agentId: 7 }, /agentId 7 must be an Agent id/],
    [{ kind: "session", sessionId: "s", agentId: "a b" }, /agentId "a b" must be an Agent id/],
    [{ kind: "session", sessionId: "s", href: "https://x" }, /unknown key "href"/],
    ["ses_abc", /must be an open target/],
  ];
  for (const [open, pattern] of bad) {
    for (const place of ["panel", "cell"]) {
      const out = place === "panel" ? { ...empty(), panel: [{ id: "r", title: "t", open }] } : { ...empty(), timeline: { cells: [{ id: "1", label: "l", open }], omitted: 0 } };
      const { host, errors } = hostOf([entryReturning(() => out)]);
      host.observe("progress", "s", running({ title: "t" }));
      assert.equal(host.contribution("progress", "s"), null, `${place}: ${JSON.stringify(open)}`);
      assert.equal(errors[0].error.code, "invalid_output");
      assert.match(errors[0].error.message, pattern);
    }
  }
  // Accepted on panel rows and cells, copied.
  const opened = [];
  let allow = true;
  const open = async (target, where) => {
    if (!allow) throw new Error(`no access to ${target.sessionId}`);
    opened.push({ target, where });
    return "shown";
  };
  let title = "t";
  const entry = entryReturning(() => ({
    ...empty(),
    panel: [{ id: "r", title, open: { ...good } }],
    timeline: { cells: [{ id: "1", label: "l", open: { kind: "session", sessionId: "ses_cell" } }], omitted: 0 },
  }));
  const { host } = hostOf([entry], { open });
  host.observe("progress", "s", running({ title }));
  const row = host.contribution("progress", "s").panel[0];
  const cellTarget = host.contribution("progress", "s").timeline.cells[0].open;
  assert.deepEqual(row.open, good);
  assert.ok(Object.isFrozen(row.open));
  assert.equal(await host.open("progress", "s", row.open), "shown");
  assert.equal(await host.open("progress", "s", cellTarget), "shown");
  assert.deepEqual(opened, [
    { target: good, where: { extensionId: "progress", slot: "s" } },
    { target: { kind: "session", sessionId: "ses_cell" }, where: { extensionId: "progress", slot: "s" } },
  ]);
  // The callback refuses: open_refused, its error the cause.
  allow = false;
  await assert.rejects(host.open("progress", "s", row.open), (e) => e.code === "open_refused" && /refused: no access to ses_abc/.test(e.message) && e.cause.message === "no access to ses_abc");
  allow = true;
  // Stale: a target of an earlier contribution, or a forged one, is not opened.
  title = "u";
  host.observe("progress", "s", running({ title }));
  await assert.rejects(host.open("progress", "s", row.open), (e) => e.code === "stale_target" && /nothing was opened/.test(e.message));
  await assert.rejects(host.open("progress", "s", { ...good }), (e) => e.code === "stale_target");
  await assert.rejects(host.open("progress", "other", host.contribution("progress", "s").panel[0].open), (e) => e.code === "stale_target");
  assert.equal(opened.length, 2, "nothing else was opened");
  // A host without an open callback refuses by name.
  const bare = hostOf([entry]).host;
  bare.observe("progress", "s", running({ title }));
  await assert.rejects(bare.open("progress", "s", bare.contribution("progress", "s").panel[0].open), (e) => e.code === "no_open");
});

test("bindingDispatch runs the action through the binding's command route", async () => {
  const calls = [];
  const binding = { command: async (name, input) => (calls.push([name, input]), { done: name }) };
  const dispatch = bindingDispatch((id, slot) => (id === "progress" && slot === "s" ? binding : undefined));
  const entry = entryReturning(() => ({ ...empty(), panel: [{ id: "r", title: "t", actions: [{ id: "go", label: "Go", input: { a: 1 } }] }] }));
  const host = createClientEntryHost({ entries: [entry], dispatch });
  host.observe("progress", "s", running({ title: "t" }, ["go"]));
  const [go] = host.contribution("progress", "s").panel[0].actions;
  assert.deepEqual(await host.act("progress", "s", go), { done: "go" });
  assert.deepEqual(calls, [["go", { a: 1 }]]);
});

test("the goal example's client entry: a chip and an end action while active, history cells anchored at the ending position", () => {
  const host = createClientEntryHost({ entries: [goalClient] });
  const active = { text: "Ship", status: "active", turns: 1, completed: 1, startedAfter: 0 };
  const ended = { ...active, status: "achieved", endedAfter: 4 };
  host.observe("goal", "s", { status: "running", value: active, commands: ["set", "end"], history: { events: [{ sequence: 1, at: 1, value: active }], omitted: 0 } });
  const c = host.contribution("goal", "s");
  assert.equal(c.chips[0].title, "Goal: Ship");
  assert.deepEqual(c.panel[0].actions.map((a) => a.id), ["end", "end"]);
  assert.deepEqual(c.timeline.cells, [{ id: "1", label: "Goal set: Ship", commandId: null, afterSequence: 0 }]);
  host.observe("goal", "s", {
    status: "running",
    value: ended,
    commands: ["set", "end"],
    history: { events: [{ sequence: 1, at: 1, value: active }, { sequence: 2, at: 2, value: ended }], omitted: 3 },
  });
  const d = host.contribution("goal", "s");
  assert.deepEqual(d.panel, []);
  assert.deepEqual(d.timeline, {
    cells: [
      { id: "1", label: "Goal set: Ship", commandId: null, afterSequence: 0 },
      { id: "2", label: "Goal achieved: Ship", commandId: null, afterSequence: 4 },
    ],
    omitted: 3,
  });
});

test("the links example's client entry: a pinned row per link with its Session open target (another Agent's with agentId) and a Remove action", async () => {
  const opened = [];
  const host = createClientEntryHost({ entries: [linksClient], open: (target) => opened.push(target) });
  const links = [
    { id: "l1", title: "Notes", sessionId: "notes" },
    { id: "l2", title: "Handed over", sessionId: "s2", agentId: "helper" },
  ];
  host.observe("links", "s", { status: "running", value: { links }, commands: ["add", "remove"] });
  const { panel } = host.contribution("links", "s");
  assert.deepEqual(panel, [
    { id: "l1", title: "Notes", detail: "notes", open: { kind: "session", sessionId: "notes" }, actions: [{ id: "remove", label: "Remove", input: { id: "l1" } }] },
    { id: "l2", title: "Handed over", detail: "helper/s2", open: { kind: "session", sessionId: "s2", agentId: "helper" }, actions: [{ id: "remove", label: "Remove", input: { id: "l2" } }] },
  ]);
  await host.open("links", "s", panel[1].open);
  assert.deepEqual(opened, [{ kind: "session", sessionId: "s2", agentId: "helper" }]);
  // Not running: no rows.
  host.observe("links", "s", { status: "stopped", value: { links }, commands: [] });
  assert.deepEqual(host.contribution("links", "s").panel, []);
});

test("shiitake/client-entry bundles for a browser alone: no wasm, no Node", async () => {
  const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
  const result = await build({
    stdin: { contents: 'export * from "shiitake/client-entry";', resolveDir: ROOT, loader: "js" },
    absWorkingDir: ROOT,
    bundle: true,
    write: false,
    format: "esm",
    platform: "browser",
    minify: true,
    logLevel: "silent",
  });
  const code = result.outputFiles[0].text;
  console.log(`shiitake/client-entry browser bundle: ${code.length} bytes (minified)`);
  for (const word of ["wasm", "WebAssembly", "cloudflare:", "node:"]) assert.ok(!code.includes(word), `bundle mentions ${word}`);
  const bundled = await import(`data:text/javascript;base64,${Buffer.from(code).toString("base64")}`);
  assert.equal(bundled.admitClientEntry(bundled.defineClientEntry({ id: "x" }, { contribute: empty })).protocol, "shiitake.client/v1");
});
