// The extension authoring library (js/extensions.mjs), in plain Node: the
// builder's rules and refusals, the manifest the core receives, the roster's
// normalization, and one hook call of every kind (runHook), with zod and JSON
// Schema schemas. No Worker and no core: runHook is fed requests by hand.

import assert from "node:assert/strict";
import { test } from "node:test";
import { z } from "zod";
import {
  EXTENSION_COLLECTIONS_MAX,
  EXTENSION_COMMANDS_MAX,
  EXTENSION_STATE_VERSION_MAX,
  EXTENSIONS_MAX,
  AdmissionError,
  defineCollection,
  defineDocument,
  defineExtension,
  manifestOf,
  normalizeRoster,
  runHook,
} from "../../js/extensions.mjs";

const noop = () => {};

/** `fn` throws an Error whose message matches `message`. */
const refuses = (fn, message, note) => assert.throws(fn, { name: "Error", message }, note);

/** One normalized entry for `definition` (roster of one). */
const entryOf = (definition, extra = {}) => normalizeRoster([{ extension: definition, ...extra }])[0];

/** A hook request of `kind` with `event`, over `state`. */
const request = (kind, event, state = {}, more = {}) => ({ kind, event, state, config: null, now: 1_000_000, session: { id: "s1", position: 7 }, ...more });

const run = (definition, kind, event, state, more) => runHook(entryOf(definition), request(kind, event, state, more));

const Note = z.object({ text: z.string(), stars: z.coerce.number().default(0) });

test("declarations come before callbacks, each once; hooks once; one projection per scope; unique commands", () => {
  const refusals = [
    [(e) => e.command("set", noop).state({}), /^extension goal: \.state\(\) must be declared before callbacks \(\.command, \.onSettled/],
    [(e) => e.onSettled(noop).config({ type: "object" }), /^extension goal: \.config\(\) must be declared before callbacks/],
    [(e) => e.projection({ scope: "agent", read: noop }).requests({}), /^extension goal: \.requests\(\) must be declared before callbacks/],
    [(e) => e.state({}).state({}), /^extension goal: \.state\(\) is declared twice/],
    [(e) => e.requests({}).requests({}), /^extension goal: \.requests\(\) is declared twice/],
    [(e) => e.onSettled(noop).onSettled(noop), /^extension goal: \.onSettled\(\) is declared twice/],
    [(e) => e.onTimer(noop).onTimer(noop), /^extension goal: \.onTimer\(\) is declared twice/],
    [(e) => e.activate(noop).activate(noop), /^extension goal: \.activate\(\) is declared twice/],
    [(e) => e.prompt(noop).prompt(noop), /^extension goal: \.prompt\(\) is declared twice/],
    [(e) => e.tools(noop).tools(noop), /^extension goal: \.tools\(\) is declared twice/],
    [(e) => e.projection({ read: noop }).projection({ scope: "session", read: noop }), /^extension goal: projection: a session projection is already declared/],
    [(e) => e.command("set", noop).command("set", noop), /^extension goal: command set is declared twice/],
    [(e) => e.command("set", { scope: "global" }, noop), /^extension goal: command set: scope must be "session" or "agent"/],
    [(e) => e.command("set", { inputs: {} }, noop), /^extension goal: command set: unknown key "inputs"/],
    [(e) => e.command("set", { input: "string" }, noop), /^extension goal: command set: input: the schema must be a JSON Schema object or a Standard Schema/],
    [(e) => e.projection({ scope: "agent", read: noop, extra: 1 }), /^extension goal: projection: unknown key "extra"/],
    [(e) => e.requests({ attention: "yes" }), /^extension goal: requests: attention must be true or false/],
  ];
  for (const [build, message] of refusals) refuses(() => build(defineExtension("goal")), message);
  // The allowed shapes: a projection per scope, the chain returns the same object.
  const e = defineExtension("goal");
  assert.equal(e.config({ type: "object" }, { default: {} }).state({}).requests({ attention: true }).projection({ scope: "session", read: noop }).projection({ scope: "agent", read: noop }), e);
});

test("ids, versions and closed option objects", () => {
  assert.equal(defineExtension("goal").version, "0.0.0");
  assert.equal(defineExtension({ id: "goal", version: "1.2.0-beta.1" }).version, "1.2.0-beta.1");
  assert.equal(defineExtension("a" + "b".repeat(31)).id.length, 32);
  for (const bad of ["Goal", "1goal", "go-al", "", "a".repeat(33), 7]) {
    refuses(() => defineExtension(bad), /^extension .*: the id must be a string matching/, String(bad));
  }
  refuses(() => defineExtension({ id: "goal", version: "1.0" }), /^extension goal: version "1.0" must match/);
  refuses(() => defineExtension({ id: "goal", owner: "me" }), /^extension goal: unknown key "owner"/);
  refuses(() => defineExtension("goal").state({ Notes: defineCollection() }), /^extension goal: collection name "Notes" must match/);
  refuses(() => defineExtension("goal").state({ notes: { type: "object" } }), /^extension goal: collection notes: expected defineCollection\(schema\) or defineDocument\(schema\)/);
  refuses(() => defineExtension("goal").state({ notes: defineCollection(42) }), /^extension goal: collection notes: the schema must be a JSON Schema object or a Standard Schema/);
  refuses(() => defineExtension("goal").command("Set", noop), /^extension goal: command name "Set" must match/);
  refuses(() => defineExtension("goal").state({ version: 1, collections: {}, extra: 1 }), /^extension goal: state: unknown key "extra"/);
  refuses(() => defineExtension("goal").config({ type: "object" }, { defaults: {} }), /^extension goal: config: unknown key "defaults"/);
});

test("bounds: collections, commands, descriptions, state versions and their migrations", () => {
  const collections = (n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`c${i}`, i % 2 ? defineDocument() : defineCollection()]));
  assert.equal(EXTENSION_COLLECTIONS_MAX, 16);
  defineExtension("goal").state(collections(16));
  refuses(() => defineExtension("goal").state(collections(17)), /^extension goal: state: 17 collections, more than 16/);

  assert.equal(EXTENSION_COMMANDS_MAX, 32);
  const e = defineExtension("goal");
  for (let i = 0; i < 32; i++) e.command(`c${i}`, noop);
  refuses(() => e.command("c32", noop), /^extension goal: more than 32 commands \(at c32\)/);

  defineExtension("goal").command("set", { description: "é".repeat(1024) }, noop);
  refuses(() => defineExtension("goal").command("set", { description: "x".repeat(1025) }, noop), /^extension goal: command set: description is longer than 1024 characters/);

  assert.equal(EXTENSION_STATE_VERSION_MAX, 1000);
  const steps = (to) => Object.fromEntries(Array.from({ length: to - 1 }, (_, i) => [i + 2, noop]));
  defineExtension("goal").state({ version: 1000, collections: {}, migrations: steps(1000) });
  for (const version of [0, 1001, 1.5, "2"]) {
    refuses(() => defineExtension("goal").state({ version, collections: {} }), /^extension goal: state: version must be an integer 1\.\.=1000/);
  }
  refuses(
    () => defineExtension("goal").state({ version: 3, collections: {}, migrations: { 2: noop } }),
    /^extension goal: state: version 3 needs migrations\[3\] \(turning state 2 into 3\)/,
  );
  for (const key of ["1", "4", "x"]) {
    refuses(() => defineExtension("goal").state({ version: 3, collections: {}, migrations: { ...steps(3), [key]: noop } }), new RegExp(`^extension goal: state: migrations\\["${key}"\\] is outside 2\\.\\.=3`));
  }
  refuses(() => defineExtension("goal").state({ version: 2, collections: {}, migrations: { 2: "up" } }), /^extension goal: state: migrations\[2\] must be a function/);
});

test("the manifest: JSON Schema verbatim (validated by the core), zod as JSON Schema or a vendor marker (validated here)", () => {
  const jsonRow = { type: "object", properties: { title: { type: "string" } }, required: ["title"] };
  const opaque = { "~standard": { version: 1, vendor: "acme", validate: (value) => ({ value }) } };
  const goal = defineExtension({ id: "goal", version: "1.2.0" })
    .config(z.object({ max: z.number().default(3) }), { default: {} })
    .state({
      version: 3,
      collections: { goal: defineDocument(jsonRow), notes: defineCollection(Note), when: defineCollection(z.date()), misc: defineCollection(opaque), any: defineCollection() },
      migrations: { 3: noop, 2: noop },
    })
    .requests({ attention: true })
    .command("set", { input: jsonRow, description: "Set the goal." }, noop)
    .command("reset", { scope: "agent" }, noop)
    .onSettled(noop)
    .projection({ scope: "agent", read: noop })
    .tools(() => []);
  const manifest = manifestOf(entryOf(goal, { feature: "goals" }));
  assert.deepEqual(manifest, {
    id: "goal",
    version: "1.2.0",
    config: { max: 3 },
    configSchema: z.object({ max: z.number().default(3) })["~standard"].jsonSchema.input({ target: "draft-2020-12" }),
    configValidate: false,
    state: {
      version: 3,
      collections: {
        goal: { document: true, schema: jsonRow, validate: true },
        notes: { document: false, schema: Note["~standard"].jsonSchema.input({ target: "draft-2020-12" }), validate: false },
        when: { document: false, schema: { "x-standard-vendor": "zod" }, validate: false },
        misc: { document: false, schema: { "x-standard-vendor": "acme" }, validate: false },
        any: { document: false, schema: null, validate: false },
      },
    },
    migrations: [2, 3],
    commands: {
      set: { scope: "session", inputSchema: jsonRow, validate: true, description: "Set the goal." },
      reset: { scope: "agent", inputSchema: null, validate: false, description: null },
    },
    hooks: { settled: true, timer: false, activate: false },
    projection: { session: false, agent: true, history: false },
    prompt: false,
    tools: true,
    files: false,
    requests: { attention: true },
    grantKey: "goal",
    grants: [],
    feature: "goals",
  });
  // zod's JSON Schema form is a real one (not the vendor marker), and the manifest is plain JSON.
  assert.equal(manifest.state.collections.notes.schema.properties.text.type, "string");
  assert.deepEqual(JSON.parse(JSON.stringify(manifest)), manifest);

  const bare = manifestOf(entryOf(defineExtension("bare")));
  assert.deepEqual([bare.state, bare.migrations, bare.config, bare.configSchema, bare.configValidate, bare.requests], [{ version: 1, collections: {} }, [], null, null, false, {}]);
  assert.equal(manifestOf(entryOf(defineExtension("c").config({ type: "object" }))).configValidate, true);
});

test("normalizeRoster: defaults, zod config validation, and refusals", () => {
  const plain = defineExtension("plain");
  const tuned = defineExtension("tuned").config(z.object({ max: z.number().int().default(3) }), { default: {} });
  assert.deepEqual(normalizeRoster([plain, { extension: tuned }]), [
    { definition: plain, grantKey: "plain", grants: [], feature: null, config: null, direct: false },
    { definition: tuned, grantKey: "tuned", grants: [], feature: null, config: { max: 3 }, direct: false },
  ]);
  assert.deepEqual(normalizeRoster([{ extension: tuned, grantKey: "team.tuned", feature: "f", config: { max: 9 } }])[0].config, { max: 9 });
  assert.equal(normalizeRoster([{ extension: tuned, grantKey: "team.tuned" }])[0].grantKey, "team.tuned");
  const required = defineExtension("req").config(z.object({ max: z.number() }));
  refuses(() => normalizeRoster([required]), /^extension req: config: \$: Invalid input: expected object, received undefined/);
  refuses(() => normalizeRoster([{ extension: tuned, config: { max: 1.5 } }]), /^extension tuned: config: \$\.max: /);
  const jsonConfig = defineExtension("jc").config({ type: "object" }, { default: { a: 1 } });
  assert.deepEqual(normalizeRoster([{ extension: jsonConfig }])[0].config, { a: 1 });

  assert.equal(EXTENSIONS_MAX, 16);
  const many = Array.from({ length: 17 }, (_, i) => defineExtension(`e${i}`));
  normalizeRoster(many.slice(0, 16));
  refuses(() => normalizeRoster(many), /more than 16/);
  refuses(() => normalizeRoster({}), /expected an array/);
  refuses(() => normalizeRoster([{ extension: plain, grant: "x" }]), /^extension plain: unknown key "grant"/);
  refuses(() => normalizeRoster([{ id: "plain" }]), /not an extension definition/);
  refuses(() => normalizeRoster([plain, { extension: defineExtension("plain") }]), /^extension plain: listed twice in the roster/);
  refuses(() => normalizeRoster([{ extension: plain, grantKey: "Team" }]), /^extension plain: grantKey "Team" must match/);
  refuses(() => normalizeRoster([{ extension: plain, feature: "f".repeat(129) }]), /^extension plain: feature must be a non-empty string of at most 128/);
  // `direct: true`: the tools hook's commands are direct tools too (manifest `direct`).
  const offers = defineExtension("offers").command("go", {}, () => null).tools((ctx, run, commands) => [commands.tool("go")]);
  assert.equal(manifestOf(normalizeRoster([{ extension: offers, direct: true }])[0]).direct, true);
  assert.equal(manifestOf(normalizeRoster([offers])[0]).direct, undefined);
  refuses(() => normalizeRoster([{ extension: offers, direct: "yes" }]), /^extension offers: direct must be a boolean/);
  refuses(() => normalizeRoster([{ extension: plain, direct: true }]), /^extension plain: direct: true offers the commands of its tools\(\.\.\.\) hook, and the definition has none/);

  // Grants: each requested by the definition; the files grant has one holder.
  const asks = (id) => defineExtension(id).requests({ attention: true, files: true });
  const [a, b] = [asks("a"), asks("b")];
  assert.deepEqual(normalizeRoster([{ extension: a, grants: ["files", "attention"] }, { extension: b, grants: ["attention"] }]).map((e) => e.grants), [["files", "attention"], ["attention"]]);
  assert.deepEqual(manifestOf(normalizeRoster([{ extension: a, grants: ["files"] }])[0]).grants, ["files"]);
  refuses(() => normalizeRoster([{ extension: plain, grants: ["files"] }]), /^extension plain: grants files, which the definition does not request/);
  refuses(() => normalizeRoster([{ extension: a, grants: ["push"] }]), /^extension a: grants\[0\] "push" is not a grant; the grants are attention and files/);
  refuses(() => normalizeRoster([{ extension: a, grants: ["files", "files"] }]), /^extension a: grants files twice/);
  refuses(() => normalizeRoster([{ extension: a, grants: ["files"] }, { extension: b, grants: ["files"] }]), /^extension b: the files grant is exclusive and extension a holds it/);
});

test("writes: one per touched key in first-touch order with the final value; read-your-writes; copies, not aliases", () => {
  const seen = {};
  const goal = defineExtension("goal")
    .state({ notes: defineCollection({ type: "object" }), goal: defineDocument() })
    .onSettled((ctx) => {
      const kept = { text: "kept" };
      ctx.state.update((s) => {
        s.notes.put("b", { text: "b1" });
        s.notes.put("a", kept);
        s.goal.set({ title: "win" });
        s.notes.put("b", { text: "b2" });
        s.notes.delete("old");
        s.notes.put("z", { text: "gone" });
        s.notes.delete("z");
      });
      kept.text = "mutated after put";
      seen.read = ctx.state.read((s) => ({ keys: s.notes.keys(), size: s.notes.size, a: s.notes.get("a"), goal: s.goal.get(), has: s.notes.has("old") }));
      const copy = ctx.state.read((s) => s.notes.get("b"));
      copy.text = "mutated copy";
      seen.entries = ctx.state.read((s) => s.notes.entries());
    });
  const state = { notes: { old: { text: "o" }, c: { text: "c" } }, goal: {} };
  const out = run(goal, "settled", { sessionId: "s1", commandId: "c1" }, state);
  assert.equal(out.ok, true, out.error);
  assert.deepEqual(out.writes, [
    { collection: "notes", key: "b", value: { text: "b2" } },
    { collection: "notes", key: "a", value: { text: "kept" } },
    { collection: "goal", key: "", value: { title: "win" } },
    { collection: "notes", key: "old", value: null },
    { collection: "notes", key: "z", value: null },
  ]);
  assert.deepEqual(seen.read, { keys: ["a", "b", "c"], size: 3, a: { text: "kept" }, goal: { title: "win" }, has: false });
  assert.deepEqual(seen.entries, [["a", { text: "kept" }], ["b", { text: "b2" }], ["c", { text: "c" }]]);
  assert.deepEqual(state.notes, { old: { text: "o" }, c: { text: "c" } }, "the request's state is not modified");
});

test("rows: zod validates and coerces at put time; non-JSON rows and bad keys are refused naming collection and key", () => {
  const refusals = [];
  const attempt = (fn) => {
    try {
      fn();
    } catch (e) {
      refusals.push(e.message);
    }
  };
  const cycle = {};
  cycle.self = cycle;
  const goal = defineExtension("goal")
    .state({ notes: defineCollection(Note), raw: defineCollection(), goal: defineDocument(z.object({ title: z.string().trim() })), later: defineCollection(z.string().refine(async () => true)) })
    .command("go", (ctx) =>
      ctx.state.update((s) => {
        s.notes.put("a", { text: "hi", stars: "4" });
        s.notes.put("b", { text: "no stars" });
        s.goal.set({ title: "  padded  " });
        attempt(() => s.notes.put("bad", { text: 5 }));
        attempt(() => s.raw.put("u", undefined));
        attempt(() => s.raw.put("f", { f: () => 1 }));
        attempt(() => s.raw.put("n", { n: 10n }));
        attempt(() => s.raw.put("nan", [NaN]));
        attempt(() => s.raw.put("cyc", cycle));
        attempt(() => s.raw.put("null", null));
        attempt(() => s.raw.put("", 1));
        attempt(() => s.raw.put("é".repeat(129), 1));
        attempt(() => s.later.put("x", "y"));
        s.raw.put("é".repeat(128), { dropped: undefined, kept: 1 });
        return s.notes.values();
      }),
    );
  const out = run(goal, "command", { name: "go", input: null, requestId: "r1" });
  assert.equal(out.ok, true, out.error);
  assert.deepEqual(out.result, [{ text: "hi", stars: 4 }, { text: "no stars", stars: 0 }]);
  assert.deepEqual(out.writes.map((w) => w.value), [{ text: "hi", stars: 4 }, { text: "no stars", stars: 0 }, { title: "padded" }, { kept: 1 }]);
  assert.deepEqual(refusals, [
    'extension goal: collection notes, key "bad": $.text: Invalid input: expected string, received number',
    'extension goal: collection raw, key "u": the row is undefined, not JSON',
    'extension goal: collection raw, key "f": $.f is a function, not JSON',
    'extension goal: collection raw, key "n": $.n is a bigint, not JSON',
    'extension goal: collection raw, key "nan": $[0] is NaN, not a JSON number',
    'extension goal: collection raw, key "cyc": $.self is a cycle, not JSON',
    'extension goal: collection raw, key "null": a row cannot be null (delete(key) removes it)',
    'extension goal: collection raw: key "": keys are non-empty strings',
    `extension goal: collection raw: key ${JSON.stringify("é".repeat(20))}...: longer than 256 UTF-8 bytes`,
    'extension goal: collection later: the schema is asynchronous; extension state is validated inside the owner transaction, synchronously',
  ]);
});

test("activate: read-only and synchronous, answers its disposer for the host (not as JSON); a throw or a bad answer fails it", () => {
  const state = { lit: defineDocument({ type: "integer" }) };
  const disposer = () => {};
  const seen = [];
  const ok = run(defineExtension("lamp").state(state).activate((ctx) => {
    seen.push(ctx.state.read((s) => s.lit.get()));
    return disposer;
  }), "activate", { revision: "r" }, { lit: { "": 3 } });
  assert.equal(ok.ok, true);
  assert.equal(ok.dispose, disposer, "the disposer goes to the host");
  assert.deepEqual(JSON.parse(JSON.stringify(ok)), { ok: true, writes: [], timers: [], sends: [] }, "and never into the core's JSON");
  assert.deepEqual(seen, [3]);
  assert.equal(run(defineExtension("lamp").activate(() => {}), "activate", {}).ok, true, "no disposer is fine");
  const writes = run(defineExtension("lamp").state(state).activate((ctx) => ctx.state.update((s) => s.lit.set(1))), "activate", {});
  assert.equal(writes.ok, false);
  assert.match(writes.error, /state\.update is not available in an activate callback/);
  assert.deepEqual(run(defineExtension("lamp").activate(() => { throw new Error("no bulb"); }), "activate", {}), { ok: false, error: "extension lamp: the activate callback threw: no bulb" });
  assert.match(run(defineExtension("lamp").activate(async () => disposer), "activate", {}).error, /the activate callback returned a promise/);
  assert.deepEqual(run(defineExtension("lamp").activate(() => 7), "activate", {}), { ok: false, error: "extension lamp: the activate callback must return a disposer function or undefined, not number" });
});

test("a hook that throws or returns a promise fails the call and returns no writes", () => {
  const writing = (fail) => (ctx) => {
    ctx.state.update((s) => s.notes.put("a", 1));
    ctx.timers.set("t", { delayMs: 1 });
    return fail();
  };
  const state = { notes: defineCollection() };
  const thrown = run(defineExtension("goal").state(state).onSettled(writing(() => { throw new Error("boom"); })), "settled", {});
  assert.deepEqual(thrown, { ok: false, error: "extension goal: the settled hook threw: boom" });
  const long = run(defineExtension("goal").onTimer(() => { throw new Error("x".repeat(5000)); }), "timer", { name: "t" });
  assert.equal(long.error.length, 1024);
  assert.deepEqual(run(defineExtension("goal").state(state).onSettled(writing(async () => {})), "settled", {}), {
    ok: false,
    error: "extension goal: the settled hook returned a promise; commands and hooks run inside the owner transaction and must be synchronous",
  });
  const asyncCommand = run(defineExtension("goal").command("set", async () => 1), "command", { name: "set", input: 1 });
  assert.match(asyncCommand.error, /^extension goal: the command set returned a promise; commands and hooks run inside the owner transaction/);
  // A refusal raised by the library inside the hook keeps its own message.
  const refused = run(defineExtension("goal").state(state).onSettled((ctx) => ctx.state.update((s) => s.notes.put("k", undefined))), "settled", {});
  assert.deepEqual(refused, { ok: false, error: 'extension goal: collection notes, key "k": the row is undefined, not JSON' });
});

test("commands: zod input refusal is refused (400), results default to null, JSON Schema input is left to the core", () => {
  const goal = defineExtension("goal")
    .command("set", { input: z.object({ title: z.string().min(1) }) }, (ctx, input) => ({ got: input }))
    .command("raw", { input: { type: "string" } }, (ctx, input) => ({ got: input }))
    .command("quiet", () => undefined)
    .command("maybe", { input: z.object({ n: z.number() }).default({ n: 1 }) }, (ctx, input) => input);
  assert.deepEqual(run(goal, "command", { name: "set", input: { title: "" }, requestId: "r" }), {
    ok: false,
    refused: true,
    error: "extension goal: command set: input: $.title: Too small: expected string to have >=1 characters",
  });
  assert.deepEqual(run(goal, "command", { name: "set", input: { title: "t", extra: 1 } }).result, { got: { title: "t" } });
  assert.deepEqual(run(goal, "command", { name: "raw", input: 5 }).result, { got: 5 });
  assert.deepEqual(run(goal, "command", { name: "quiet" }), { ok: true, writes: [], timers: [], sends: [], result: null });
  assert.deepEqual(run(goal, "command", { name: "maybe" }).result, { n: 1 }, "absent input reaches zod as undefined");
  assert.deepEqual(run(goal, "command", { name: "nope" }), { ok: false, refused: true, error: 'extension goal has no command "nope"' });
});

test("migrations run in order over one draft; rows from the earlier version are readable", () => {
  const order = [];
  const goal = defineExtension("goal").state({
    version: 3,
    collections: { notes: defineCollection(z.object({ text: z.string(), v: z.number() })) },
    migrations: {
      3: (draft) => {
        order.push(3);
        draft.notes.put("a", { ...draft.notes.get("a"), v: 3 });
      },
      2: (draft, ctx) => {
        order.push(2);
        assert.equal(ctx.extensionId, "goal");
        draft.notes.put("a", { text: draft.notes.get("a").body, v: 2 });
        draft.notes.delete("b");
      },
    },
  });
  const out = run(goal, "migrate", { from: 1, to: 3 }, { notes: { a: { body: "old shape" }, b: { body: "x" } } });
  assert.deepEqual(order, [2, 3]);
  assert.deepEqual(out.writes, [
    { collection: "notes", key: "a", value: { text: "old shape", v: 3 } },
    { collection: "notes", key: "b", value: null },
  ]);
  order.length = 0;
  run(goal, "migrate", { from: 2, to: 3 }, { notes: { a: { text: "t", v: 2 } } });
  assert.deepEqual(order, [3]);
  assert.match(run(goal, "migrate", { from: 1, to: 4 }).error, /^extension goal: bad hook request: migrate from 1 to 4 is not within 1\.\.=3/);
});

test("projections: undefined and Option None publish nothing; values and Some publish", () => {
  const proj = (read, scope = "session") => run(defineExtension("goal").state({ goal: defineDocument() }).projection({ scope, read }), "project", { scope }, { goal: { "": { title: "t" } } });
  assert.equal("value" in proj(() => undefined), false);
  assert.equal("value" in proj(() => ({ _tag: "None" })), false);
  assert.deepEqual(proj(() => ({ _tag: "Some", value: 4 })).value, 4);
  assert.deepEqual(proj((ctx) => ctx.state.read((s) => s.goal.get()), "agent").value, { title: "t" });
  assert.equal(proj(() => null).value, null);
  assert.match(proj(() => new Map()).error, /^extension goal: the session projection's value is not JSON: \$ is a Map/);
  assert.deepEqual(run(defineExtension("goal"), "project", { scope: "session" }), { ok: false, error: "extension goal has no session projection" });
});

test("prompt sections and tools markers", () => {
  const prompt = (fn) => run(defineExtension("goal").prompt(fn), "prompt", { sessionId: "s1", commandId: "c1" });
  assert.deepEqual(prompt(() => "one").sections, ["one"]);
  assert.deepEqual(prompt(() => ["a", "", "b"]).sections, ["a", "b"]);
  assert.deepEqual(prompt(() => undefined).sections, []);
  assert.deepEqual(prompt(() => "").sections, []);
  assert.deepEqual(prompt((ctx, r) => `${r.sessionId}/${r.commandId}`).sections, ["s1/c1"]);
  assert.match(prompt(() => [1]).error, /^extension goal: the prompt hook's section 0 is number, not a string/);

  const goal = (fn) =>
    defineExtension("goal")
      .command("set", { description: "Declared." }, noop)
      .command("admin", { scope: "agent" }, noop)
      .tools(fn);
  const tools = (fn) => run(goal(fn), "tools", { sessionId: "s1", commandId: "c1" });
  assert.deepEqual(tools((ctx, r, c) => [c.tool("set")]).tools, [{ command: "set", description: "Declared." }]);
  assert.deepEqual(tools((ctx, r, c) => [c.tool("set", { description: "Now." })]).tools, [{ command: "set", description: "Now." }]);
  assert.deepEqual(tools(() => []).tools, []);
  assert.deepEqual(tools((ctx, r, c) => [c.tool("nope")]), { ok: false, error: 'extension goal: commands.tool: no command "nope" is declared' });
  assert.match(tools((ctx, r, c) => [c.tool("admin")]).error, /^extension goal: commands.tool: command admin has scope agent; only session commands can be tools/);
  assert.match(tools(() => [{ command: "set", description: null }]).error, /^extension goal: the tools hook's item 0 is not a commands.tool\(\.\.\.\) marker/);
  assert.match(tools(() => "set").error, /^extension goal: the tools hook must return an array/);
});

test("projections, prompts and tools cannot write, set timers or send", () => {
  const attempts = {
    "state.update": (ctx) => ctx.state.update((s) => s.notes.put("a", 1)),
    "timers.set": (ctx) => ctx.timers.set("t", { delayMs: 1 }),
    "timers.cancel": (ctx) => ctx.timers.cancel("t"),
    send: (ctx) => ctx.send({ sessionId: "s1", text: "hi" }),
  };
  for (const [what, fn] of Object.entries(attempts)) {
    const base = () => defineExtension("goal").state({ notes: defineCollection() });
    const runRef = { sessionId: "s1", commandId: "c1" };
    assert.equal(run(base().projection({ scope: "agent", read: fn }), "project", { scope: "agent" }).error, `extension goal: ${what} is not available in a projection (outside the owner transaction)`);
    assert.equal(run(base().prompt(fn), "prompt", runRef).error, `extension goal: ${what} is not available in a prompt hook (outside the owner transaction)`);
    assert.equal(run(base().tools((ctx) => fn(ctx) ?? []), "tools", runRef).error, `extension goal: ${what} is not available in a tools hook (outside the owner transaction)`);
  }
});

test("send: requireExistingSession to a Session the core found absent throws AdmissionError (closed), catchable", () => {
  const caught = [];
  const nudge = defineExtension("nudge").onTimer((ctx, timer) => {
    for (const sessionId of ["gone", "here"]) {
      try {
        ctx.send({ sessionId, text: "still there?", requireExistingSession: true });
      } catch (error) {
        assert.ok(error instanceof AdmissionError);
        caught.push({ name: error.name, reason: error.reason, sessionId: error.sessionId, message: error.message });
      }
    }
    // Without the condition the Session is created, closed or not.
    ctx.send({ sessionId: "gone", text: "create it", ...(timer.payload?.explicit ? { requireExistingSession: false } : {}) });
  });
  const entry = normalizeRoster([nudge])[0];
  const timer = { name: "t", sessionId: null, payload: null, dueAt: 1 };
  const first = runHook(entry, request("timer", timer, {}));
  assert.deepEqual(first.sends.map((s) => [s.sessionId, s.requireExistingSession]), [["gone", true], ["here", true], ["gone", false]]);
  assert.deepEqual(caught, []);
  const again = runHook(entry, { ...request("timer", { ...timer, payload: { explicit: true } }, {}), closed: ["gone"] });
  assert.deepEqual(again.sends.map((s) => [s.sessionId, s.requireExistingSession]), [["here", true], ["gone", false]]);
  assert.deepEqual(caught, [{ name: "AdmissionError", reason: "closed", sessionId: "gone", message: "extension nudge: send: Session gone does not exist, and the send requires an existing Session" }]);
  // Uncaught, it fails the call with its message.
  const strict = defineExtension("strict").onTimer((ctx) => ctx.send({ sessionId: "gone", text: "x", requireExistingSession: true }));
  const failed = runHook(normalizeRoster([strict])[0], { ...request("timer", timer, {}), closed: ["gone"] });
  assert.equal(failed.ok, false);
  assert.match(failed.error, /Session gone does not exist, and the send requires an existing Session/);
  assert.match(runHook(entry, { ...request("timer", timer, {}), closed: "gone" }).error, /bad hook request: closed must be an array of Session ids/);
});

test("context, timers and sends", () => {
  let seen;
  let kept;
  const goal = defineExtension("goal")
    .config({ type: "object" }, { default: { max: 2 } })
    .onTimer((ctx, timer) => {
      kept = ctx;
      seen = { id: ctx.extensionId, config: ctx.config, now: ctx.now, session: ctx.session, timer };
      ctx.timers.set("later", { delayMs: 5000, sessionId: "s1", payload: { n: 1 } });
      ctx.timers.set("fixed", { at: 42 });
      ctx.timers.cancel("gone");
      ctx.timers.set("later", { delayMs: 10 });
      ctx.send({ sessionId: "s1", text: "wake up" });
      ctx.send({ sessionId: "s2", text: "create me", requireExistingSession: false });
      refuses(() => ctx.timers.set("both", { at: 1, delayMs: 1 }), /^extension goal: timers.set\(both\): give exactly one of at/);
      refuses(() => ctx.timers.set("bad name", { at: 1 }), /^extension goal: timers.set: name "bad name" must match/);
      refuses(() => ctx.send({ sessionId: "s1", text: "" }), /^extension goal: send: text must be a non-empty string/);
      refuses(() => ctx.send({ sessionId: "s1", text: "x".repeat(65537) }), /longer than 65536 UTF-8 bytes/);
    });
  const timer = { name: "tick", sessionId: null, payload: { a: 1 }, dueAt: 999 };
  const out = runHook(normalizeRoster([goal])[0], request("timer", timer, {}, { config: { max: 5 }, session: null }));
  assert.deepEqual(seen, { id: "goal", config: { max: 5 }, now: 1_000_000, session: undefined, timer });
  assert.deepEqual(out, {
    ok: true,
    writes: [],
    timers: [
      { name: "later", at: 1_000_010, sessionId: null, payload: null },
      { name: "fixed", at: 42, sessionId: null, payload: null },
      { name: "gone", cancel: true },
    ],
    sends: [
      { sessionId: "s1", text: "wake up", requireExistingSession: false },
      { sessionId: "s2", text: "create me", requireExistingSession: false },
    ],
  });
  refuses(() => kept.send({ sessionId: "s1", text: "late" }), /^extension goal: send was called after the hook call returned/);
  for (const [kind, error] of [["settled", "extension goal has no settled hook"], ["prompt", "extension goal has no prompt hook"], ["tools", "extension goal has no tools hook"]]) {
    assert.deepEqual(run(defineExtension("goal"), kind, { sessionId: "s1", commandId: "c1" }), { ok: false, error });
  }
  assert.match(run(defineExtension("goal"), "explode", {}).error, /^extension goal: bad hook request: unknown kind "explode"/);
});

test("history is a session projection's opt-in, in the manifest; ctx.sessionPosition is the position read in the transaction", () => {
  const base = () => defineExtension("goal").state({ goal: defineDocument() });
  assert.equal(manifestOf(base().projection({ read: noop, history: true })).projection.history, true);
  assert.equal(manifestOf(base().projection({ read: noop })).projection.history, false);
  assert.throws(() => base().projection({ scope: "agent", read: noop, history: true }), /extension goal: projection: history is kept per Session: only a session projection keeps one/);
  assert.throws(() => base().projection({ read: noop, history: "yes" }), /extension goal: projection: history must be true or false/);
  const seen = [];
  const ext = base().command("end", (ctx) => seen.push([ctx.sessionPosition, ctx.session?.position]));
  assert.equal(run(ext, "command", { name: "end" }).ok, true);
  assert.equal(run(ext, "command", { name: "end" }, {}, { session: { id: "s1", position: null } }).ok, true);
  assert.equal(run(ext, "command", { name: "end" }, {}, { session: null }).ok, true);
  assert.deepEqual(seen.slice(0, 2), [
    [7, 7],
    [null, null],
  ]);
  assert.equal(seen[2][0], null, "no Session: null");
});
