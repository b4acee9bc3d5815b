// Attention end to end in a real SQLite-backed Durable Object (fixture
// tests/e2e/fixtures/attention-worker.mjs): an item a command sets reaches
// the Session's watch as an `attention` frame, the Session read and the
// inbox (over HTTP and through the client's `inbox()`), every one qualified
// by `extensionId`; it survives a restart; a command that throws after
// setting commits nothing; clearing after the Session is deleted is
// idempotent; an extension without the grant gets the refusal at the call.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createShiitakeClient } from "../../js/client.mjs";
import { defineDocument, defineExtension, normalizeRoster, runHook } from "../../js/extensions.mjs";
import { TOKEN, useWorker } from "./helpers.mjs";

const T = { timeout: 90_000 };

describe("attention", () => {
  const h = useWorker({ fixture: "attention-worker", model: "echo", persist: true });
  const command = (a, sid, ext, name, input) =>
    a.api("POST", sid === null ? `/extensions/${ext}/commands/${name}` : `/sessions/${sid}/extensions/${ext}/commands/${name}`, { input });
  const client = (a) =>
    createShiitakeClient({
      baseUrl: `http://localhost/agents/${a.id}`,
      fetch: (url, init) => h.mf.dispatchFetch(url, { ...init, headers: { ...init.headers, authorization: `Bearer ${TOKEN}` } }),
    });
  const item = { extensionId: "triage", id: "x", kind: "review", summary: "check the release notes", since: 1_000, expiresAt: 2_000 };

  test("an item set by a command reaches the watch, the read and the inbox, qualified, and survives a restart", T, async () => {
    const a = h.agent();
    const sid = await a.createSession("s");
    await a.createSession("quiet");
    const watch = await a.watch(sid);
    const snapshot = await watch.next();
    assert.deepEqual(snapshot.data.attention, [], "the snapshot carries the open attention");
    const set = await command(a, sid, "triage", "flag", { id: "x", summary: item.summary, since: 1_000, expiresAt: 2_000 });
    assert.equal(set.status, 200, set.text);
    const frames = await watch.until((e) => e.data?.type === "attention");
    assert.deepEqual(frames.at(-1).data, { type: "attention", sessionId: "s", extensionId: "triage", id: "x", item });
    assert.deepEqual((await a.read(sid)).attention, [item]);
    const inbox = await a.api("GET", "/inbox");
    assert.equal(inbox.status, 200, inbox.text);
    assert.deepEqual(
      inbox.json.sessions.map((r) => [r.sessionId, r.state]),
      [
        ["s", "needs_you"],
        ["quiet", "settled"],
      ],
    );
    assert.deepEqual(inbox.json.sessions[0].attention, [item]);
    assert.equal(inbox.json.sessions[0].attentionCount, 1);
    assert.equal(typeof inbox.json.sessions[0].updatedAt, "number");
    assert.equal(inbox.json.nextCursor, null);
    // The client's inbox(), page by page.
    const c = client(a);
    const first = await c.inbox({ limit: 1 });
    assert.deepEqual(first.sessions.map((r) => r.sessionId), ["s"]);
    assert.equal(typeof first.nextCursor, "string");
    const second = await c.inbox({ limit: 1, cursor: first.nextCursor });
    assert.deepEqual(second.sessions.map((r) => [r.sessionId, r.state]), [["quiet", "settled"]]);
    assert.equal(second.nextCursor, null);
    await assert.rejects(c.inbox({ cursor: "not-ours" }), (e) => e.status === 400 && /cursor/.test(e.message));
    await watch.close();
    // A restart keeps pending attention: it is rows.
    await h.restart();
    assert.deepEqual((await a.read(sid)).attention, [item]);
    assert.equal((await client(a).inbox()).sessions[0].state, "needs_you");
    // Clearing it: a frame with item null, and the Session is settled again.
    const again = await a.watch(sid);
    await again.next();
    const cleared = await command(a, sid, "triage", "unflag", { id: "x" });
    assert.equal(cleared.status, 200, cleared.text);
    const gone = await again.until((e) => e.data?.type === "attention");
    assert.deepEqual(gone.at(-1).data, { type: "attention", sessionId: "s", extensionId: "triage", id: "x", item: null });
    await again.close();
    assert.deepEqual((await a.read(sid)).attention, []);
    assert.deepEqual(
      (await client(a).inbox()).sessions.map((r) => r.state),
      ["settled", "settled"],
    );
  });

  test("a command that throws after setting commits nothing; item shapes are refused at the call", T, async () => {
    const { a, sid } = await h.session();
    const failed = await command(a, sid, "triage", "flag", { id: "x", fail: true });
    assert.equal(failed.status, 422, failed.text);
    assert.equal(failed.json.error.code, "extension_command_failed");
    assert.match(failed.json.error.message, /flagged, then failed/);
    assert.deepEqual((await a.read(sid)).attention, []);
    const long = await command(a, sid, "triage", "flag", { id: "x", summary: "é".repeat(201) });
    assert.equal(long.status, 422, long.text);
    assert.match(long.json.error.message, /extension triage: attention\.set\(s\): summary is 201 characters; at most 200/);
    const fits = await command(a, sid, "triage", "flag", { id: "x", summary: "é".repeat(200) });
    assert.equal(fits.status, 200, fits.text);
    assert.equal((await a.read(sid)).attention[0].summary.length, 200);
  });

  test("clearing after the Session is deleted is idempotent; setting needs the Session", T, async () => {
    const a = h.agent();
    await a.createSession("gone");
    assert.equal((await command(a, null, "triage", "flag_in", { sessionId: "gone", id: "y" })).status, 200);
    assert.equal((await a.api("DELETE", "/sessions/gone")).status, 204);
    for (let i = 0; i < 2; i++) {
      const r = await command(a, null, "triage", "clear_in", { sessionId: "gone", id: "y" });
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json, { result: { cleared: "y" } });
    }
    const set = await command(a, null, "triage", "flag_in", { sessionId: "gone", id: "y" });
    assert.equal(set.status, 422, set.text);
    assert.match(set.json.error.message, /Session gone does not exist/);
    assert.deepEqual((await a.api("GET", "/inbox")).json, { sessions: [], nextCursor: null });
  });

  test("an extension without the attention grant is refused by name at the call", T, async () => {
    const { a, sid } = await h.session();
    const peek = await command(a, sid, "nosy", "peek", { id: "x" });
    assert.equal(peek.status, 200, peek.text);
    assert.match(peek.json.result.refused, /^extension nosy: attention\.set needs the attention grant: its roster entry must grant it/);
    const poke = await command(a, sid, "nosy", "poke", { id: "x" });
    assert.equal(poke.status, 422, poke.text);
    assert.equal(poke.json.error.code, "extension_command_failed");
    assert.match(poke.json.error.message, /extension nosy: attention\.set needs the attention grant/);
    assert.deepEqual((await a.read(sid)).attention, []);
    assert.equal((await a.api("GET", "/inbox")).json.sessions[0].state, "settled");
  });
});

// The authoring side alone (runHook fed by hand, no Worker): what
// `ctx.attention` answers, and where and why it refuses at the call.
describe("ctx.attention in runHook", () => {
  const request = (kind, event, more = {}) => ({ kind, event, state: {}, config: null, now: 5_000, session: { id: "s1", position: 0 }, ...more });
  const refuses = (fn, message) => assert.throws(fn, { name: "Error", message });

  test("set and clear are collected in call order; shapes are refused at the call", () => {
    let kept;
    const ext = defineExtension("triage")
      .requests({ attention: true })
      .command("go", (ctx) => {
        kept = ctx;
        ctx.attention.set("s1", { id: "a", kind: "review", summary: "x".repeat(200), since: 1, expiresAt: 2 });
        ctx.attention.clear("s2", "b");
        ctx.attention.set("s1", { id: "c", kind: "k", summary: "é", since: 0 });
        const at = /^extension triage: attention\.set\(s1\): /;
        refuses(() => ctx.attention.set("s1", { id: "a", kind: "review", summary: "x".repeat(201), since: 1 }), /summary is 201 characters; at most 200$/);
        refuses(() => ctx.attention.set("s1", { id: "a", kind: "review", summary: "", since: 1 }), /summary must be a non-empty string/);
        refuses(() => ctx.attention.set("s1", { id: "a", kind: "Review", summary: "x", since: 1 }), /kind "Review" must be 1 to 64 of/);
        refuses(() => ctx.attention.set("s1", { id: "a b", kind: "k", summary: "x", since: 1 }), /id "a b" must be 1 to 128 of/);
        refuses(() => ctx.attention.set("s1", { id: "i".repeat(129), kind: "k", summary: "x", since: 1 }), /must be 1 to 128 of/);
        refuses(() => ctx.attention.set("s1", { id: "a", kind: "k", summary: "x", since: 1.5 }), /since must be an integer ms since epoch/);
        refuses(() => ctx.attention.set("s1", { id: "a", kind: "k", summary: "x", since: 1, expiresAt: "soon" }), /expiresAt must be an integer/);
        refuses(() => ctx.attention.set("s1", { id: "a", kind: "k", summary: "x", since: 1, color: "red" }), at);
        refuses(() => ctx.attention.set("bad id!", { id: "a", kind: "k", summary: "x", since: 1 }), /^extension triage: attention\.set: sessionId "bad id!" must match/);
        refuses(() => ctx.attention.clear("s1", ""), /^extension triage: attention\.clear\(s1\): id "" must be 1 to 128 of/);
        return null;
      });
    const out = runHook(normalizeRoster([{ extension: ext, grants: ["attention"] }])[0], request("command", { name: "go", input: null }));
    assert.deepEqual(out.attention, [
      { op: "set", sessionId: "s1", item: { id: "a", kind: "review", summary: "x".repeat(200), since: 1, expiresAt: 2 } },
      { op: "clear", sessionId: "s2", id: "b" },
      { op: "set", sessionId: "s1", item: { id: "c", kind: "k", summary: "é", since: 0 } },
    ]);
    refuses(() => kept.attention.clear("s1", "a"), /^extension triage: attention\.clear was called after the hook call returned/);
  });

  test("without the grant, and outside commands, settled and timer hooks, it refuses by name", () => {
    const seen = [];
    const attempt = (ctx) => {
      try {
        ctx.attention.set("s1", { id: "a", kind: "k", summary: "x", since: 1 });
        seen.push(null);
      } catch (error) {
        seen.push(error.message);
      }
    };
    const ext = defineExtension("triage")
      .requests({ attention: true })
      .state({ version: 2, collections: { n: defineDocument({ type: "integer" }) }, migrations: { 2: (_draft, ctx) => attempt(ctx) } })
      .command("go", (ctx) => attempt(ctx))
      .onSettled((ctx) => attempt(ctx))
      .onTimer((ctx) => attempt(ctx))
      .projection({ scope: "session", read: (ctx) => attempt(ctx) })
      .prompt((ctx) => {
        attempt(ctx);
        return [];
      });
    const granted = normalizeRoster([{ extension: ext, grants: ["attention"] }])[0];
    const ungranted = normalizeRoster([ext])[0];
    const runs = [
      ["command", { name: "go", input: null }],
      ["settled", { sessionId: "s1", commandId: "c1" }],
      ["timer", { name: "t", sessionId: null, payload: null, dueAt: 1 }],
    ];
    for (const [kind, event] of runs) {
      const out = runHook(granted, request(kind, event));
      assert.equal(out.ok, true, JSON.stringify(out));
      assert.equal(out.attention.length, 1, kind);
    }
    assert.deepEqual(seen, [null, null, null]);
    seen.length = 0;
    for (const [kind, event] of runs) runHook(ungranted, request(kind, event));
    assert.equal(seen.length, 3);
    for (const m of seen) assert.match(m, /^extension triage: attention\.set needs the attention grant: its roster entry must grant it \(\{ extension, grants: \["attention"\] \}\)$/);
    seen.length = 0;
    runHook(granted, request("project", { scope: "session" }));
    runHook(granted, request("prompt", { sessionId: "s1", commandId: "c1" }));
    runHook(granted, request("migrate", { from: 1, to: 2 }));
    assert.deepEqual(seen, [
      "extension triage: attention.set is not available in a projection (outside the owner transaction)",
      "extension triage: attention.set is not available in a prompt hook (outside the owner transaction)",
      "extension triage: attention.set is not available in a migration; only commands, settled hooks and timer hooks change attention",
    ]);
  });
});
