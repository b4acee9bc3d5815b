// Storage that upgrades: the committed fixture stores of every earlier
// release (tests/fixtures/stores/v<N>/, written by scripts/make-fixtures.mjs
// at the release before a schema change) opened with this build. Each store
// is copied to a temporary directory and opened as it was written: the
// demo Worker in Miniflare with its persistence pointed at the copy, the
// Node host on the copied file (hosts: tests/support/fixture-stores.mjs).
// Against what the generator saw (the store's expected.json):
//
// - every Session lists, and every message reads back as it was stored (all
//   pages), with the same queue, projections, attention and inbox;
// - every settlement reads back; every admitted requestId replays its old
//   receipt (prompts, operator lines, extension commands) and cancels
//   answer as before; withdrawn requestIds stay fenced;
// - extension statuses, grants and the directory read back;
// - the turns running at the stop are resumed as after a restart (the
//   partial answer discarded), the pending prompt then runs, Bob's
//   delegated turn resumes on his explicit model and his reply reaches
//   Alice through the mail tables; the reminder's timer fires; the stopped
//   extension resumes and replays its logged settlements; staged attention
//   deliveries reach the host;
// - new work runs with the old transcript in its context, and the old tool
//   state (the Files workspace, the notebook) answers;
// - the store's shiitake_meta schema_version is this build's afterwards.
//
// Messages are compared as JSON values, every string byte for byte; key
// order is not compared (a read splices keys into the stored text: an
// extension's projections, a message's branch position). Later releases
// may add keys: only `parentEntryId` and `branch` (transcript branches)
// are left out of the comparison, on messages and queue items.
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { after, describe, test } from "node:test";
import { openNodeShiitake } from "../../js/node.mjs";
import { contentText, startModelServer } from "../support/model-server.mjs";
import * as fx from "../support/fixture-stores.mjs";
import { Agent, DEMO_SCRIPT, Harness, ROOT, eventually, execute, expectError, filesUnder } from "./helpers.mjs";

const T = { timeout: 60_000 };
const STORES = path.join(ROOT, "tests/fixtures/stores");
const VERSIONS = readdirSync(STORES).filter((v) => /^v\d+$/.test(v));
const BUILD_VERSION = fx.buildSchemaVersion();

/** Keys a later release may add to a stored item, left out of the comparison. */
const ADDED_LATER = ["parentEntryId", "branch"];
const strip = (item) => (item === null || typeof item !== "object" ? item : Object.fromEntries(Object.entries(item).filter(([k]) => !ADDED_LATER.includes(k))));

const temps = [];
after(() => {
  for (const dir of temps) rmSync(dir, { recursive: true, force: true });
});
function temp() {
  const dir = mkdtempSync(path.join(tmpdir(), "shiitake-upgrade-"));
  temps.push(dir);
  return dir;
}

/** Reads the schema version of every Agent store under `dir` (the fleet directory's object has none). */
async function storedVersions(dir) {
  const out = [];
  for (const file of (await filesUnder(dir)).filter((f) => /\.sqlite$/.test(f) && !f.endsWith("metadata.sqlite"))) {
    const db = new DatabaseSync(file, { readOnly: true });
    try {
      const has = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'shiitake_meta'").get();
      if (has) out.push(Number(db.prepare("SELECT value FROM shiitake_meta WHERE key = 'schema_version'").get().value));
    } finally {
      db.close();
    }
  }
  return out;
}

/**
 * Compares an Agent with what the generator saw. `moving`: Sessions whose
 * durable work may run the moment the store opens (a due timer): their old
 * messages must read back unchanged, new ones may follow, and their queue
 * and projections are not compared.
 */
async function checkAgent(a, want, { moving = [] } = {}) {
  const sessions = (await a.listAllSessions(200)).flatMap((p) => p.sessions);
  assert.deepEqual(sessions.map(strip), want.sessions.map(strip), "the Sessions list");

  // The inbox first: replays below must not move it either.
  const inbox = await a.api("GET", "/inbox?limit=200");
  assert.equal(inbox.status, 200, inbox.text);
  const still = (rows) => rows.filter((r) => !moving.includes(r.sessionId));
  assert.deepEqual(still(inbox.json.sessions), still(want.inbox), "the inbox");

  for (const { sessionId } of want.sessions) {
    const was = want.reads[sessionId];
    const now = await fx.readSession(a, sessionId);
    const old = now.messages.slice(0, was.messages.length);
    assert.deepEqual(old.map(strip), was.messages.map(strip), `${sessionId}: the old messages read back as stored`);
    if (moving.includes(sessionId)) continue;
    assert.equal(now.messages.length, was.messages.length, `${sessionId}: no new message`);
    assert.deepEqual(now.pending.map(strip), was.pending.map(strip), `${sessionId}: the queue`);
    // The running turn stays the same command; its attempt and start move when it resumes.
    const running = (r) => r && { commandId: r.commandId, requestId: r.requestId, text: r.text };
    assert.deepEqual(running(now.running), running(was.running), `${sessionId}: the running turn`);
    for (const key of ["extensions", "extensionHistory", "attention"]) assert.deepEqual(now[key], was[key], `${sessionId}: ${key}`);
  }

  for (const [sessionId, commands] of Object.entries(want.commands)) {
    for (const [requestId, c] of Object.entries(commands)) {
      const settled = await a.settlement(sessionId, c.commandId, 0);
      assert.equal(settled.status, 200, settled.text);
      if (c.settlement !== null) assert.deepEqual(settled.json, c.settlement, `${sessionId}/${requestId}: the settlement`);
      if (c.input !== undefined) {
        const replay = await a.command(sessionId, c.input);
        assert.equal(replay.status, 200, replay.text);
        assert.deepEqual(replay.json, c.receipt, `${sessionId}/${requestId}: the replay answers the old receipt`);
      }
    }
  }
  for (const [sessionId, cancels] of Object.entries(want.cancels)) {
    for (const { commandId, answer } of cancels) assert.deepEqual((await a.cancel(sessionId, commandId)).json, answer, `${sessionId}: cancel ${commandId} again`);
  }
  for (const [sessionId, requestIds] of Object.entries(want.withdrawn)) {
    for (const requestId of requestIds) {
      expectError(await a.prompt(sessionId, requestId, "late"), 409, "request_withdrawn");
      assert.deepEqual((await a.withdraw(sessionId, requestId)).json, { status: "unknown" }, `${sessionId}: ${requestId} stays fenced`);
    }
  }
  // A stopped extension's commands answer 409 until the host resumes it.
  const stopped = want.extensions.filter((e) => e.stopped !== null).map((e) => e.id);
  await replayExtensionCommands(a, want.extensionCommands.filter((c) => !stopped.includes(c.extensionId)));
  for (const c of want.extensionCommands.filter((c) => stopped.includes(c.extensionId))) {
    expectError(await a.api("POST", fx.extensionCommandRoute(c), c.body), 409, "extension_stopped");
  }
  const extensions = await a.api("GET", "/extensions");
  assert.deepEqual(extensions.json.extensions, want.extensions, "the extension statuses");
}

/** Replays extension commands: each answers the result stored for its requestId. */
async function replayExtensionCommands(a, commands) {
  for (const c of commands) {
    const replay = await a.api("POST", fx.extensionCommandRoute(c), c.body);
    assert.equal(replay.status, 200, replay.text);
    assert.deepEqual(replay.json, c.answer, `${c.extensionId}.${c.command} ${c.body.requestId}: the replay answers the stored result`);
  }
}

/** Waits until `sessionId`'s command `commandId` settles; its settlement. */
async function settled(a, sessionId, commandId) {
  const res = await a.settlement(sessionId, commandId, 20_000);
  assert.equal(res.status, 200, res.text);
  assert.ok(res.json, `${sessionId}/${commandId} settled`);
  return res.json;
}

/** The texts a model request carries, one per message. */
const contextTexts = (request) => request.body.messages.map((m) => contentText(m.content));

/**
 * Asserts the model request carries every old user, assistant and tool text
 * of the transcript (operator lines are for people, never in the context; a
 * delegated reply is rendered inside its `<fungi_agent_reply …>` tag).
 */
function assertInContext(request, messages, what) {
  const texts = contextTexts(request);
  for (const m of messages) {
    if (m.role === "operator" || m.text === "") continue;
    const carried = m.meta?.delegation ? texts.some((t) => t.includes("<fungi_agent_reply") && t.includes(m.text)) : texts.includes(m.text);
    assert.ok(carried, `${what}: the new request carries the old ${m.role} message ${JSON.stringify(m.text)}`);
  }
}

/**
 * The usage ledger (schema 5) of an upgraded Agent: nothing for the turns
 * settled before (their usage stays in their settlements, nothing is
 * guessed), the held turn's call cut off by the stop counted once as
 * unknown when it resumed, and the `answered` calls made since in its
 * Session.
 */
async function checkLedger(a, sessionId, answered) {
  const r = await a.api("GET", "/usage?groupBy=session");
  assert.equal(r.status, 200, r.text);
  const group = r.json.groups.find((g) => g.key === sessionId);
  assert.ok(group, JSON.stringify(r.json));
  assert.deepEqual([group.unknown, group.answered, group.failed], [1, answered, 0], JSON.stringify(group));
  assert.ok(group.inputTokens > 0, "the provider's figures of the calls made since");
}

for (const version of VERSIONS) {
  const dir = path.join(STORES, version);

  describe(`the ${version} stores`, () => {
    test(`${version} Miniflare store of the demo: read back, replayed, fenced, resumed and carried on by this build`, T, async () => {
      const want = JSON.parse(readFileSync(path.join(dir, "miniflare/expected.json"), "utf8"));
      const state = temp();
      cpSync(path.join(dir, "miniflare", want.layout.persist), state, { recursive: true });
      const model = await startModelServer({ fallback: "echo" });
      // The turns running at the stop resume into a gate: nothing moves until the reads are compared.
      for (const { tag } of want.held) model.scriptFor(tag, { gate: tag, text: `resumed ${tag}` });
      const h = new Harness(DEMO_SCRIPT, state, { ...want.layout.bindings, OPENAI_BASE_URL: model.url, OPENAI_API_KEY: "sk-upgrade" }, model);
      await h.start();
      try {
        const namespace = await h.mf.getDurableObjectNamespace("SHIITAKE");
        const stub = (agentId) => namespace.get(namespace.idFromName(agentId));
        const alice = h.agent(fx.ALICE);
        const bob = h.agent(fx.BOB);
        for (const [agentId, agent] of Object.entries(want.agents)) {
          await checkAgent(h.agent(agentId), agent);
          for (const [sessionId, grants] of Object.entries(agent.grants ?? {})) {
            assert.deepEqual(JSON.parse(JSON.stringify(await stub(agentId).sessionGrants(sessionId))), grants, `${agentId}/${sessionId}: the delivered grants`);
          }
        }

        // The running turns resumed as after a restart: a new attempt each.
        for (const held of want.held) await model.waitFor(() => model.requests(held.tag).length >= 1, { timeoutMs: 10_000, what: `the resumed attempt of ${held.tag}` });
        for (const held of want.held) model.release(held.tag);
        const [aliceHeld, bobHeld] = want.held;
        const s = await settled(alice, aliceHeld.sessionId, aliceHeld.commandId);
        assert.equal(s.terminal, "completed", JSON.stringify(s));
        assert.equal(s.answer, `resumed ${aliceHeld.tag}`);
        const pending = want.agents[fx.ALICE].commands.queue["q-pending"];
        assert.equal((await settled(alice, "queue", pending.commandId)).terminal, "completed", "the prompt pending behind it runs next");
        const queue = await fx.readSession(alice, "queue");
        assert.ok(!queue.messages.some((m) => m.text.includes("PARTIAL")), "the partial answer of the stopped attempt is not in the transcript");
        assert.deepEqual(
          queue.messages.filter((m) => m.role !== "operator").map((m) => [m.role, m.commandId]),
          [
            ["user", aliceHeld.commandId],
            ["assistant", aliceHeld.commandId],
            ["user", pending.commandId],
            ["assistant", pending.commandId],
          ],
        );
        await checkLedger(alice, aliceHeld.sessionId, 2);

        // Bob's delegated turn resumes on the model Alice set for him, and his
        // reply reaches Alice's Session through his inbox row and her outbox row.
        const bobRequest = model.requests(bobHeld.tag)[0];
        assert.equal(`openai/${bobRequest.body.model}`, fx.BOB_MODEL, "Bob's explicit model survived");
        assert.equal((await settled(bob, bobHeld.sessionId, bobHeld.commandId)).answer, `resumed ${bobHeld.tag}`);
        const reply = await eventually(
          async () => (await fx.readSession(alice, want.mail.replyTo.sessionId)).messages.find((m) => m.meta?.delegation?.reply?.commandId === want.mail.held.commandId),
          { timeoutMs: 20_000, what: "Bob's reply to the held mail", intervalMs: 50 },
        );
        assert.equal(reply.text, `resumed ${bobHeld.tag}`);
        assert.deepEqual(reply.meta.delegation.reply, { agentId: fx.BOB, commandId: want.mail.held.commandId, outcome: "completed", sessionId: want.mail.held.sessionId });

        // New work in the old Sessions: the old transcript is in the model's
        // context, and the old tool state (Files, the notebook, the goal) answers.
        const chat = want.agents[fx.ALICE].reads.chat;
        const [[planPath, plan]] = Object.entries(want.files);
        model.scriptFor("[up-files]", { toolCalls: [{ name: "read", arguments: { path: planPath } }] }, { text: "Read it." });
        const readPlan = await alice.admit("chat", "u-files", "Read the plan again [up-files]");
        assert.equal((await settled(alice, "chat", readPlan)).terminal, "completed");
        const [first] = model.requests("[up-files]");
        assertInContext(first, chat.messages, "chat");
        const goal = chat.extensions.goal;
        assert.ok(contextTexts(first)[0].includes(goal.text), "the goal's prompt section is in the instructions");
        const after = await fx.readSession(alice, "chat");
        const tool = after.messages.filter((m) => m.role === "tool").at(-1);
        assert.ok(!tool.isError, tool.text);
        assert.equal(JSON.parse(tool.text).content, plan, "the Files workspace keeps the file");
        assert.equal(after.extensions.goal.turns, goal.turns + 1, "the goal counts the new turn");
        model.scriptFor("[up-notes]", execute("return await notes.list_notes({});"), { text: "Listed the notes." });
        assert.equal((await settled(alice, "chat", await alice.admit("chat", "u-notes", "List the notes [up-notes]"))).terminal, "completed");
        const notes = (await fx.readSession(alice, "chat")).messages.filter((m) => m.role === "tool").at(-1);
        assert.deepEqual(JSON.parse(notes.text), want.notes, "the demo's notebook keeps its notes");

        // The directory lists the same Agents (Carol, created by Alice, included).
        model.scriptFor("[up-list]", execute("return await agents.list({ limit: 200 });"), { text: "Listed." });
        assert.equal((await settled(alice, "fleet", await alice.admit("fleet", "u-list", "List the Agents [up-list]"))).terminal, "completed");
        const listed = (await fx.readSession(alice, "fleet")).messages.filter((m) => m.role === "tool").at(-1);
        assert.deepEqual(JSON.parse(listed.text), want.agents[fx.ALICE].directory);
        assertInContext(model.requests("[up-list]")[0], want.agents[fx.ALICE].reads.fleet.messages, "fleet");
      } finally {
        await h.mf.dispose();
        await model.close();
      }
      const versions = await storedVersions(state);
      assert.equal(versions.length, Object.keys(want.agents).length + 1, "one store per Agent, and the fleet directory's");
      for (const v of versions) assert.equal(v, BUILD_VERSION, "shiitake_meta.schema_version after opening");
    });

    test(`${version} Node host store: read back, replayed, fenced, resumed and carried on by this build`, T, async () => {
      const want = JSON.parse(readFileSync(path.join(dir, "node/expected.json"), "utf8"));
      const file = path.join(temp(), want.layout.file);
      cpSync(path.join(dir, "node", want.layout.file), file);
      const model = await startModelServer({ fallback: "echo" });
      for (const { tag } of want.held) model.scriptFor(tag, { gate: tag, text: `resumed ${tag}` });
      const delivered = [];
      const host = await openNodeShiitake({
        path: file,
        agentId: want.layout.agentId,
        env: { ...fx.NODE_ENV, OPENAI_BASE_URL: model.url, OPENAI_API_KEY: "sk-upgrade" },
        tools: fx.probeTools(),
        extensions: fx.nodeExtensions({ failing: false }),
        hostJobs: {
          deliver(entries) {
            delivered.push(...entries);
          },
        },
      });
      try {
        const a = new Agent(new fx.NodeApi(host.app, want.layout.agentId), want.layout.agentId);
        const agent = want.agents[want.layout.agentId];
        // The reminder's timer may fire as the store opens.
        await checkAgent(a, agent, { moving: [want.reminder.sessionId] });
        for (const [sessionId, grants] of Object.entries(agent.grants)) assert.deepEqual(host.object.sessionGrants(sessionId), grants, `${sessionId}: the delivered grants`);

        // The running turn resumes; the pending one runs after it.
        const [held] = want.held;
        await model.waitFor(() => model.requests(held.tag).length >= 1, { timeoutMs: 10_000, what: "the resumed Node attempt" });
        model.release(held.tag);
        assert.equal((await settled(a, held.sessionId, held.commandId)).answer, `resumed ${held.tag}`);
        const pending = agent.commands.queue["q-pending"];
        assert.equal((await settled(a, "queue", pending.commandId)).terminal, "completed");
        await checkLedger(a, held.sessionId, 2);

        // The reminder's timer fires once it is due, and its prompt runs.
        await new Promise((r) => setTimeout(r, Math.max(0, want.reminder.dueAt - Date.now())));
        const remind = await eventually(
          async () => {
            const read = await fx.readSession(a, want.reminder.sessionId);
            return read.messages.some((m) => m.role === "assistant") ? read : null;
          },
          { timeoutMs: 10_000, what: "the reminder's prompt to run", intervalMs: 50 },
        );
        assert.deepEqual(remind.messages.map((m) => [m.role, m.text]), [
          ["user", `Reminder: ${want.reminder.text}`],
          ["assistant", `Echo: Reminder: ${want.reminder.text}`],
        ]);
        assert.deepEqual(remind.extensions.reminder, { pending: [] }, "the fired timer's state is gone");

        // The attention change staged while the host's lane was down is delivered now.
        await eventually(() => want.staged.every((key) => delivered.some((e) => e.key === key)), { timeoutMs: 10_000, what: "the staged deliveries" });

        // The stopped extension resumes and replays the settlements it missed
        // (an operator line runs no settled hook).
        const resumed = await host.object.resumeExtension("audit");
        assert.equal(resumed.stopped, null, JSON.stringify(resumed));
        const settledBefore = Object.entries(agent.commands).flatMap(([sessionId, cs]) =>
          Object.values(cs)
            .filter((c) => c.settlement !== null && c.input?.type !== "operator")
            .map((c) => [sessionId, `${c.commandId}:${c.settlement.terminal}`]),
        );
        await eventually(
          async () => {
            for (const [sessionId, seen] of settledBefore) {
              if (!(await a.read(sessionId)).extensions.audit.seen.includes(seen)) return false;
            }
            return true;
          },
          { timeoutMs: 10_000, what: "audit to replay its log" },
        );
        await replayExtensionCommands(a, agent.extensionCommands.filter((c) => c.extensionId === "audit"));

        // New work: the old transcript is in the context and the old tool still answers.
        model.scriptFor("[up-node]", { toolCalls: [{ name: "lookup", arguments: { key: "again" } }] }, { text: "Looked again." });
        const id = await a.admit("main", "u-node", "Look it up again [up-node]");
        assert.equal((await settled(a, "main", id)).toolCallCount, 1);
        assertInContext(model.requests("[up-node]")[0], agent.reads.main.messages, "main");
        const tool = (await fx.readSession(a, "main")).messages.filter((m) => m.role === "tool").at(-1);
        assert.deepEqual(JSON.parse(tool.text), { key: "again", value: "value of again" });
      } finally {
        await host.close();
        await model.close();
      }
      assert.ok(!existsSync(`${file}-wal`), "the host folded its WAL on close");
      assert.deepEqual(await storedVersions(path.dirname(file)), [BUILD_VERSION], "shiitake_meta.schema_version after opening");
    });
  });
}
