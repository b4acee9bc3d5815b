// Writes the fixture stores the upgrade test opens (tests/e2e/upgrade.test.mjs).
// Run it at the release before a schema change, with that release's test
// build, and commit what it writes:
//
//   SHIITAKE_TEST_BUILD=1 bash scripts/build.sh
//   node scripts/make-fixtures.mjs            # -> tests/fixtures/stores/v<SCHEMA_VERSION>/
//   node scripts/make-fixtures.mjs --out DIR  # elsewhere (an existing DIR is refused)
//
// It drives the build under build/ through its public API, with the
// scripted model server (tests/support/model-server.mjs) and the hosts of
// tests/support/fixture-stores.mjs, and writes two stores holding every
// kind of durable state:
//
//   <out>/miniflare/state/   the demo Worker's Durable Objects as Miniflare
//                            persists them (durableObjectsPersist): Alice,
//                            Bob and the fleet directory, one SQLite file
//                            each under -ShiitakeDO/, and metadata.sqlite
//                            (workerd's alarms)
//   <out>/node/agent.sqlite  one Agent of the Node host (js/node.mjs)
//
// Between them: Sessions; commands settled, cancelled, running (a turn whose
// model call the model server holds open when the runtime stops) and
// pending behind it; withdrawal fences; operator lines; tool turns (a direct
// Files `write`, an `execute` run of the demo notebook, a direct host tool)
// and the Files workspace; extension state, producer history, command
// request ids, timers (a reminder due seconds after the stop), a stopped
// extension's settled-work log; attention and the delivery outbox; mail
// (Alice's outbox and Bob's inbox: one delegation answered, one whose
// child turn is running); the fleet directory (a created Agent); Bob's
// explicit model; delivered Session grants.
//
// Each store's expected.json records what the generator saw through the
// API when it stopped the runtime: every Session's messages (all pages),
// pending and running work, each command's receipt (with the input that
// replays it) and settlement, cancels, withdrawn requestIds, grants,
// extension statuses and projections, the inbox, the directory listing.
// Stopping: Miniflare is disposed and the Node host closed (running turns
// stay running, as after a crash); then every SQLite file's WAL is folded
// into it (checkpoint, close) so each file stands alone.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { DatabaseSync } from "node:sqlite";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { openNodeShiitake } from "../js/node.mjs";
import { Agent, DEMO_SCRIPT, Harness, eventually, execute, filesUnder } from "../tests/e2e/helpers.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";
import * as fx from "../tests/support/fixture-stores.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const SCHEMA_VERSION = fx.buildSchemaVersion();

const { values: args } = parseArgs({ options: { out: { type: "string" } } });
const out = path.resolve(args.out ?? path.join(ROOT, `tests/fixtures/stores/v${SCHEMA_VERSION}`));
if (existsSync(out)) {
  console.error(`make-fixtures: ${path.relative(ROOT, out) || out} exists; the committed stores of a release are never rewritten (remove it to write them again)`);
  process.exit(1);
}
const WASM = path.join(ROOT, "build/wasm/shiitake_bg.wasm");
for (const built of [DEMO_SCRIPT, WASM]) {
  if (!existsSync(built)) throw new Error(`${path.relative(ROOT, built)} is missing: run \`SHIITAKE_TEST_BUILD=1 bash scripts/build.sh\` first`);
}

function commit() {
  try {
    return execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim();
  } catch {
    return null;
  }
}

/** Which build wrote the stores. */
const written = {
  schemaVersion: SCHEMA_VERSION,
  commit: commit(),
  wasmSha256: createHash("sha256").update(readFileSync(WASM)).digest("hex"),
  at: new Date().toISOString(),
};

// ------------------------------------------------------------------ recording

/**
 * Drives one Agent (a tests/e2e/helpers.mjs `Agent`) and remembers what it
 * admitted, so `snapshot()` can say what each command's replay must answer.
 */
class Recorder {
  constructor(agent) {
    this.a = agent;
    /** sessionId -> requestId -> {input, receipt} */
    this.admitted = {};
    /** sessionId -> [{commandId, answer}] */
    this.cancels = {};
    /** sessionId -> [requestId] */
    this.withdrawn = {};
    /** [{sessionId?, extensionId, command, body, answer}] */
    this.extensionCommands = [];
  }

  async createSession(sessionId) {
    await this.a.createSession(sessionId);
  }

  async command(sessionId, input) {
    const res = await this.a.command(sessionId, input);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.status, "accepted", res.text);
    (this.admitted[sessionId] ??= {})[input.requestId] = { input, receipt: res.json };
    return res.json.commandId;
  }

  prompt(sessionId, requestId, text) {
    return this.command(sessionId, { type: "prompt", requestId, text });
  }

  operator(sessionId, requestId, text) {
    return this.command(sessionId, { type: "operator", requestId, text });
  }

  /** A prompt run to its settlement (asserted completed). */
  async settle(sessionId, requestId, text) {
    const commandId = await this.prompt(sessionId, requestId, text);
    const settlement = await this.a.waitSettled(sessionId, commandId, { boundMs: 30_000 });
    assert.equal(settlement.terminal, "completed", JSON.stringify(settlement));
    return commandId;
  }

  async cancel(sessionId, commandId) {
    const res = await this.a.cancel(sessionId, commandId);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.status, "cancelled", res.text);
    (this.cancels[sessionId] ??= []).push({ commandId, answer: res.json });
  }

  async withdraw(sessionId, requestId) {
    const res = await this.a.withdraw(sessionId, requestId);
    assert.deepEqual(res.json, { status: "unknown" }, res.text);
    (this.withdrawn[sessionId] ??= []).push(requestId);
  }

  /** An extension command (Session scope when `sessionId` is given). */
  async extension(sessionId, extensionId, command, body) {
    const res = await this.a.api("POST", fx.extensionCommandRoute({ sessionId, extensionId, command }), body);
    assert.equal(res.status, 200, res.text);
    this.extensionCommands.push({ ...(sessionId === undefined ? {} : { sessionId }), extensionId, command, body, answer: res.json });
    return res.json.result;
  }

  /** Everything the API shows of this Agent; `extras` (grants, directory, ...) are the caller's. */
  async snapshot(extras = {}) {
    const a = this.a;
    const sessions = (await a.listAllSessions(200)).flatMap((p) => p.sessions);
    const reads = {};
    const commands = {};
    for (const { sessionId } of sessions) {
      const read = await fx.readSession(a, sessionId);
      reads[sessionId] = read;
      // Every command the Session shows (messages, queue) or this generator admitted.
      const seen = new Map();
      for (const item of [...read.messages, ...read.pending, ...(read.running ? [read.running] : [])]) {
        if (item.commandId !== undefined && item.requestId !== undefined) seen.set(item.requestId, item.commandId);
      }
      for (const [requestId, { receipt }] of Object.entries(this.admitted[sessionId] ?? {})) seen.set(requestId, receipt.commandId);
      commands[sessionId] = {};
      for (const [requestId, commandId] of seen) {
        const res = await a.settlement(sessionId, commandId, 0);
        assert.equal(res.status, 200, res.text);
        commands[sessionId][requestId] = { commandId, ...(this.admitted[sessionId]?.[requestId] ?? {}), settlement: res.json };
      }
    }
    const get = async (route) => {
      const res = await a.api("GET", route);
      assert.equal(res.status, 200, res.text);
      return res.json;
    };
    return {
      sessions,
      reads,
      commands,
      cancels: this.cancels,
      withdrawn: this.withdrawn,
      extensionCommands: this.extensionCommands,
      extensions: (await get("/extensions")).extensions,
      inbox: (await get("/inbox?limit=200")).sessions,
      ...extras,
    };
  }
}

/** A code string calling `agents.<op>(args)`, answering `{ok}` or `{err}`. */
const call = (op, callArgs) => `try { return { ok: await agents.${op}(${JSON.stringify(callArgs)}) }; } catch (e) { return { err: String(e.message ?? e) }; }`;

/** `text` with each tag's `-` escaped, so the code's own text never contains the tag (the guest's string does). */
const hide = (text, ...tags) => tags.reduce((t, tag) => t.replaceAll(tag, tag.replace("-", "\\u002d")), text);

/** The newest tool message's text, parsed. */
async function lastToolValue(a, sessionId) {
  const read = await a.read(sessionId, { limit: 200 });
  const tool = read.messages.filter((m) => m.role === "tool").at(-1);
  assert.ok(tool && !tool.isError, JSON.stringify(tool));
  return JSON.parse(tool.text);
}

/** Folds each SQLite file's WAL into it and checks nothing is left beside it. */
async function foldWal(dir) {
  const files = await filesUnder(dir);
  for (const file of files.filter((f) => f.endsWith(".sqlite"))) {
    const db = new DatabaseSync(file);
    const [row] = db.prepare("PRAGMA wal_checkpoint(TRUNCATE)").all();
    assert.equal(row.busy, 0, `${file}: checkpoint blocked`);
    db.close();
  }
  const left = files.filter((f) => /-(wal|shm|journal)$/.test(f) && existsSync(f));
  assert.deepEqual(left, [], "every WAL is folded into its database");
}

// ------------------------------------------------------------------ Miniflare: the demo

async function writeMiniflare() {
  const dir = path.join(out, "miniflare");
  const state = path.join(dir, "state");
  mkdirSync(state, { recursive: true });
  const model = await startModelServer({ fallback: "echo" });
  const h = new Harness(DEMO_SCRIPT, state, { ...fx.DEMO_BINDINGS, OPENAI_BASE_URL: model.url, OPENAI_API_KEY: "sk-fixture" }, model);
  await h.start();
  const T = fx.TAGS;
  try {
    const namespace = await h.mf.getDurableObjectNamespace("SHIITAKE");
    const stub = (agentId) => namespace.get(namespace.idFromName(agentId));
    const alice = new Recorder(h.agent(fx.ALICE));
    const bob = new Recorder(h.agent(fx.BOB));

    // Bob first: an Agent registers in the directory at its first request.
    await bob.createSession("own");
    await bob.settle("own", "b-1", `Bob's own work ${T.bobOwn}`);

    // Alice's "chat": the goal, a plain turn, an operator line, Files and the notebook.
    await alice.createSession("chat");
    const grants = { version: 2, grants: { files: "write", notes: "write", timer: "read" } };
    assert.equal(JSON.parse(JSON.stringify(await stub(fx.ALICE).deliverGrants("chat", grants))).delivered, "stored");
    await alice.extension("chat", "goal", "set", { requestId: "goal-set", input: { text: "Keep the plan and the notebook in step" } });
    await alice.settle("chat", "c-plain", `Hello there ${T.plain}`);
    await alice.operator("chat", "c-op", "An operator line, kept in the transcript");
    model.scriptFor(T.files, { toolCalls: [{ name: "write", arguments: { path: fx.PLAN_PATH, content: fx.PLAN_CONTENT } }] }, { text: `Wrote ${fx.PLAN_PATH}.` });
    await alice.settle("chat", "c-files", `Write the plan ${T.files}`);
    model.scriptFor(T.notes, execute("await notes.add_note({ text: 'the fixtures are written' }); return await notes.list_notes({});"), { text: "Noted." });
    await alice.settle("chat", "c-notes", `Note it in the notebook ${T.notes}`);
    const notes = await lastToolValue(alice.a, "chat");

    // Alice's "queue": a running turn held by the model, a prompt pending
    // behind it, a cancelled one, a fence.
    await alice.createSession("queue");
    model.scriptFor(T.held, { hang: true, chunks: ["PARTIAL answer, discarded "] });
    const held = await alice.prompt("queue", "q-held", `Take your time ${T.held}`);
    await alice.a.waitRunning("queue", held);
    await model.waitFor(() => model.requests(T.held).length >= 1, { timeoutMs: 10_000, what: "the held call" });
    await alice.prompt("queue", "q-pending", `After the held one ${T.pending}`);
    const doomed = await alice.prompt("queue", "q-cancel", "Cancelled while pending");
    await alice.cancel("queue", doomed);
    await alice.withdraw("queue", "q-withdrawn");
    await alice.operator("queue", "q-op", "An operator line while a turn runs");

    // Alice's "fleet": create an Agent, set Bob's model, delegate to Bob twice.
    await alice.createSession("fleet");
    model.scriptFor(T.create, execute(call("create", { requestId: "carol-1", name: "Carol" })), { text: "Created Carol." });
    await alice.settle("fleet", "f-create", `Create Carol ${T.create}`);
    const carol = await lastToolValue(alice.a, "fleet");
    assert.ok(carol.ok?.agentId, JSON.stringify(carol));
    model.scriptFor(T.setModel, execute(call("set_model", { agentId: fx.BOB, model: fx.BOB_MODEL })), { text: "Bob's model is set." });
    await alice.settle("fleet", "f-set-model", `Give Bob his model ${T.setModel}`);
    const setModel = await lastToolValue(alice.a, "fleet");
    assert.ok(setModel.ok !== undefined, JSON.stringify(setModel));

    const send = (requestId, sessionId, text, tag) =>
      execute(hide(call("send", { agentId: fx.BOB, sessionId, requestId, text }), tag));
    model.scriptFor(T.mailDone, send("mail-done", "child-done", `Summarise the plan ${T.childDone}`, T.childDone), { text: "Asked Bob." });
    await alice.settle("fleet", "f-mail-done", `Ask Bob for a summary ${T.mailDone}`);
    const sentDone = await lastToolValue(alice.a, "fleet");
    assert.equal(sentDone.ok?.status, "accepted", JSON.stringify(sentDone));
    // Bob answers (echo); his reply arrives in "fleet" as a user line, whose turn runs.
    await eventually(
      async () => {
        const read = await alice.a.read("fleet", { limit: 200 });
        const reply = read.messages.find((m) => m.role === "user" && m.meta?.delegation?.reply);
        return reply && read.running === null && read.pending.length === 0 && read.messages.at(-1).role === "assistant";
      },
      { timeoutMs: 30_000, intervalMs: 50, what: "Bob's reply and the turn it starts" },
    );
    model.scriptFor(T.childHeld, { hang: true, chunks: ["Bob starts "] });
    model.scriptFor(T.mailHeld, send("mail-held", "child-held", `Work slowly ${T.childHeld}`, T.childHeld), { text: "Asked Bob again." });
    await alice.settle("fleet", "f-mail-held", `Ask Bob for slow work ${T.mailHeld}`);
    const sentHeld = await lastToolValue(alice.a, "fleet");
    assert.equal(sentHeld.ok?.status, "accepted", JSON.stringify(sentHeld));
    await model.waitFor(() => model.requests(T.childHeld).length >= 1, { timeoutMs: 10_000, what: "Bob's held call" });
    assert.equal(model.requests(T.childHeld)[0].body.model, fx.BOB_MODEL.split("/")[1], "Bob runs his explicit model");
    model.scriptFor(T.list, execute(call("list", { limit: 200 })), { text: "Listed." });
    await alice.settle("fleet", "f-list", `List the Agents ${T.list}`);
    const directory = (await lastToolValue(alice.a, "fleet")).ok;
    assert.ok(directory?.agents.some((e) => e.agentId === carol.ok.agentId), JSON.stringify(directory));

    const expected = {
      store: "miniflare",
      written,
      layout: { persist: "state", uniqueKey: "-ShiitakeDO", script: "build/demo/index.mjs", bindings: fx.DEMO_BINDINGS },
      held: [
        { agentId: fx.ALICE, sessionId: "queue", requestId: "q-held", commandId: held, tag: T.held },
        { agentId: fx.BOB, sessionId: "child-held", commandId: sentHeld.ok.commandId, tag: T.childHeld },
      ],
      mail: { done: { ...sentDone.ok, sessionId: "child-done" }, held: { ...sentHeld.ok, sessionId: "child-held" }, replyTo: { agentId: fx.ALICE, sessionId: "fleet" } },
      files: { [fx.PLAN_PATH]: fx.PLAN_CONTENT },
      notes,
      agents: {
        [fx.ALICE]: await alice.snapshot({ grants: { chat: JSON.parse(JSON.stringify(await stub(fx.ALICE).sessionGrants("chat"))) }, directory }),
        [fx.BOB]: await bob.snapshot(),
      },
    };
    assert.deepEqual(expected.agents[fx.ALICE].grants.chat, grants);
    const queue = expected.agents[fx.ALICE].reads.queue;
    assert.equal(queue.running?.commandId, held, "q-held is running at the stop");
    assert.deepEqual(queue.pending.map((p) => p.requestId), ["q-pending"]);
    assert.equal(expected.agents[fx.BOB].reads["child-held"].running?.commandId, sentHeld.ok.commandId);
    await h.mf.dispose();
    h.mf = undefined;
    await foldWal(state);
    writeFileSync(path.join(dir, "expected.json"), `${JSON.stringify(expected, null, 2)}\n`);
  } finally {
    if (h.mf) await h.mf.dispose();
    await model.close();
  }
}

// ------------------------------------------------------------------ the Node host

async function writeNode() {
  const dir = path.join(out, "node");
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, fx.NODE_FILE);
  const model = await startModelServer({ fallback: "echo" });
  const failedDeliveries = [];
  const host = await openNodeShiitake({
    path: file,
    agentId: fx.NODE_AGENT,
    env: { ...fx.NODE_ENV, OPENAI_BASE_URL: model.url, OPENAI_API_KEY: "sk-fixture" },
    tools: fx.probeTools(),
    extensions: fx.nodeExtensions({ failing: true }),
    // The host's delivery lane is down while the generator runs: the
    // attention changes stay staged in the delivery outbox.
    hostJobs: {
      deliver(entries) {
        failedDeliveries.push(...entries.map((e) => e.key));
        throw new Error("the fixture generator's delivery lane is down");
      },
    },
  });
  const T = fx.TAGS;
  let closed = false;
  try {
    const api = new fx.NodeApi(host.app, fx.NODE_AGENT);
    const n = new Recorder(new Agent(api, fx.NODE_AGENT));
    await n.createSession("main");
    await n.extension("main", "audit", "note", { requestId: "note-1", input: { text: "noted before the stop" } });
    await n.extension("main", "flagger", "flag", { requestId: "flag-1", input: { id: "review-1", summary: "Look at the fixture" } });
    // The first settlement stops `audit` (its hook throws here): from then
    // on the settled work it misses is logged.
    await n.settle("main", "m-plain", `Hello Node ${T.nodePlain}`);
    await n.operator("main", "m-op", "A Node operator line");
    model.scriptFor(T.nodeTool, { toolCalls: [{ name: "lookup", arguments: { key: "fixture" } }] }, { text: "Looked it up." });
    await n.settle("main", "m-tool", `Look up the fixture ${T.nodeTool}`);
    await n.withdraw("main", "m-withdrawn");
    const grants = { version: 3, grants: { probe: "read" } };
    assert.equal(host.object.deliverGrants("main", grants).delivered, "stored");

    await n.createSession("queue");
    model.scriptFor(T.nodeHeld, { hang: true, chunks: ["PARTIAL Node answer "] });
    const held = await n.prompt("queue", "q-held", `Take your time on Node ${T.nodeHeld}`);
    await n.a.waitRunning("queue", held);
    await model.waitFor(() => model.requests(T.nodeHeld).length >= 1, { timeoutMs: 10_000, what: "the held Node call" });
    await n.prompt("queue", "q-pending", `After the held Node one ${T.nodePending}`);
    const doomed = await n.prompt("queue", "q-cancel", "Cancelled on Node while pending");
    await n.cancel("queue", doomed);

    const statuses = await host.object.extensionStatuses();
    const auditStatus = statuses.find((s) => s.id === "audit");
    assert.ok(auditStatus.stopped && auditStatus.behind, JSON.stringify(auditStatus));
    assert.ok(failedDeliveries.some((k) => k.startsWith("attention:flagger:main:")), JSON.stringify(failedDeliveries));

    // Last: a reminder due right after the stop (the upgrade test sees it fire).
    await n.createSession("remind");
    const REMINDER_MS = 2_000;
    const reminder = await n.extension("remind", "reminder", "add", { requestId: "remind-1", input: { text: "check the fixture", delayMs: REMINDER_MS } });
    const expected = {
      store: "node",
      written,
      layout: { file: fx.NODE_FILE, agentId: fx.NODE_AGENT },
      held: [{ agentId: fx.NODE_AGENT, sessionId: "queue", requestId: "q-held", commandId: held, tag: T.nodeHeld }],
      reminder: { ...reminder, sessionId: "remind", text: "check the fixture" },
      staged: [...new Set(failedDeliveries)],
      agents: { [fx.NODE_AGENT]: await n.snapshot({ grants: { main: host.object.sessionGrants("main") } }) },
    };
    assert.deepEqual(expected.agents[fx.NODE_AGENT].grants.main, grants);
    assert.equal(expected.agents[fx.NODE_AGENT].reads.queue.running?.commandId, held);
    await host.close("the fixture generator stops");
    closed = true;
    assert.ok(Date.now() < reminder.dueAt, `the reminder fell due before the host closed (${REMINDER_MS} ms): run it again on a quieter machine`);
    await foldWal(dir);
    writeFileSync(path.join(dir, "expected.json"), `${JSON.stringify(expected, null, 2)}\n`);
  } finally {
    if (!closed) await host.close();
    await model.close();
  }
}

mkdirSync(out, { recursive: true });
try {
  await writeMiniflare();
  await writeNode();
} catch (error) {
  rmSync(out, { recursive: true, force: true });
  throw error;
}
let total = 0;
for (const file of await filesUnder(out)) {
  const size = statSync(file).size;
  total += size;
  console.log(`${String(size).padStart(9)}  ${path.relative(out, file)}`);
}
console.log(`${String(total).padStart(9)}  in all, under ${path.relative(ROOT, out)}`);
