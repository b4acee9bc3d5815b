// shiitake/node (js/node.mjs): the wasm core on a node:sqlite file, no
// Miniflare. A prompt through the returned Hono app over a real node:http
// server settles with the model's answer; the file's lease refuses a second
// open (same process, another process) until close(); a kill -9 mid-turn is
// resumed on reopen and settled exactly once. The child-process host is
// examples/node/server.mjs, the README's example. An extension's
// activation resource is disposed by close().
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { DatabaseSync } from "node:sqlite";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Hono } from "hono";
import { NodeStoreLeaseError, acquireNodeStoreLease, nodeListener, nodeRuntimeHost, nodeShiitakeDO, openNodeShiitake, splitStatements } from "../../js/node.mjs";
import { defineExtension } from "../../js/extensions.mjs";
import { connectBrowser } from "../../js/ui-browser.mjs";
import { contentText, startModelServer } from "../support/model-server.mjs";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const EXAMPLE = path.join(ROOT, "examples/node/server.mjs");
const T = { timeout: 60_000 };

/** Polls `fn` until it answers something truthy (at most `timeoutMs`). */
async function eventually(fn, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() >= deadline) throw new Error(`not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const dir = mkdtempSync(path.join(tmpdir(), "shiitake-node-"));
const model = await startModelServer({ fallback: "echo" });
const children = new Set();
after(async () => {
  for (const child of children) child.kill("SIGKILL");
  await model.close();
  rmSync(dir, { recursive: true, force: true });
});

const env = (extra = {}) => ({
  SHIITAKE_MODEL: "openai/scripted-node",
  OPENAI_BASE_URL: model.url,
  OPENAI_API_KEY: "sk-node-test",
  SHIITAKE_RETRY_BASE_MS: "50",
  SHIITAKE_RETRY_MAX_MS: "400",
  ...extra,
});

/** A JSON client of a base URL (or a fetch function). */
function client(base) {
  const send = typeof base === "function" ? base : (req) => fetch(req);
  const origin = typeof base === "function" ? "http://node.test" : base;
  const api = async (method, rel, body) => {
    const res = await send(
      new Request(origin + rel, {
        method,
        headers: body === undefined ? {} : { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
    );
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : undefined, text };
  };
  return {
    api,
    async createSession(sessionId) {
      const res = await api("POST", "/sessions", { sessionId });
      assert.equal(res.status, 201, res.text);
      return res.json.sessionId;
    },
    async admit(sessionId, requestId, text) {
      const res = await api("POST", `/sessions/${sessionId}/commands`, { type: "prompt", requestId, text });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json.status, "accepted", res.text);
      return res.json.commandId;
    },
    async settled(sessionId, commandId, boundMs = 20_000) {
      const deadline = Date.now() + boundMs;
      for (;;) {
        const left = Math.max(0, Math.min(10_000, deadline - Date.now()));
        const res = await api("GET", `/sessions/${sessionId}/settlement?commandId=${commandId}&timeoutMs=${left}`);
        assert.equal(res.status, 200, res.text);
        if (res.json !== null) return res.json;
        if (Date.now() >= deadline) throw new Error(`${commandId} not settled within ${boundMs} ms`);
      }
    },
    async read(sessionId) {
      const res = await api("GET", `/sessions/${sessionId}`);
      assert.equal(res.status, 200, res.text);
      return res.json;
    },
  };
}

/** Starts examples/node/server.mjs on `file`; resolves once it listens. */
function startExample(file, extraEnv = {}) {
  const child = spawn(process.execPath, [EXAMPLE], {
    cwd: ROOT,
    env: { ...process.env, ...env(extraEnv), SHIITAKE_DB: file, PORT: "0" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  child.on("exit", () => children.delete(child));
  let out = "";
  let err = "";
  child.stderr.on("data", (d) => (err += d));
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the example did not start: ${out}${err}`)), 15_000);
    child.stdout.on("data", (d) => {
      out += d;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the example exited (${code}): ${out}${err}`));
    });
  });
  return { child, ready, stderr: () => err };
}

const exited = (child) => new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once("exit", resolve)));

/** Tries openNodeShiitake on `file` in a child process: its outcome as JSON. */
function openInChild(file) {
  const code = `
    import { openNodeShiitake } from ${JSON.stringify(path.join(ROOT, "js/node.mjs"))};
    try { const h = await openNodeShiitake({ path: ${JSON.stringify(file)}, env: {} }); await h.close(); console.log(JSON.stringify({ opened: true })); }
    catch (e) { console.log(JSON.stringify({ opened: false, code: e.code, message: e.message })); }`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", code], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.on("exit", () => {
      try {
        resolve(JSON.parse(out.trim().split("\n").at(-1)));
      } catch (e) {
        reject(new Error(`child said: ${out}`));
      }
    });
  });
}

test("a prompt through the app over node:http settles with the model's answer", T, async () => {
  const file = path.join(dir, "served.db");
  const host = await openNodeShiitake({ path: file, env: env() });
  assert.equal(host.agentId, "served");
  const server = http.createServer(nodeListener(host.app.fetch));
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  try {
    const a = client(`http://127.0.0.1:${server.address().port}`);
    await a.createSession("s");
    model.scriptFor("node-served", { text: "Hello from the scripted model", chunkDelayMs: 5 });
    const id = await a.admit("s", "r1", "say hi node-served");
    const s = await a.settled("s", id);
    assert.equal(s.terminal, "completed", JSON.stringify(s));
    assert.equal(s.answer, "Hello from the scripted model");
    assert.equal(model.requests("node-served")[0].headers.authorization, "Bearer sk-node-test");
    const page = await a.read("s");
    assert.deepEqual(
      page.messages.map((m) => [m.role, m.text]),
      [
        ["user", "say hi node-served"],
        ["assistant", "Hello from the scripted model"],
      ],
    );
    // Unknown routes and methods answer as shiitakeApp does.
    assert.equal((await a.api("GET", "/nope")).status, 404);
    assert.equal((await a.api("PUT", "/sessions")).status, 405);
  } finally {
    server.close();
    server.closeAllConnections();
    await host.close();
  }
});

test("the example runs execute in the embedded sandbox and lends a connected browser's App as ui", T, async () => {
  const file = path.join(dir, "example-ui.db");
  const ex = startExample(file);
  const url = await ex.ready;
  const a = client(url);
  await a.createSession("s");
  const greeted = [];
  // A page's bridge client (shiitake/ui/browser) over node:http, as the
  // Durable Object tests drive it (tests/e2e/ui-bridge.test.mjs).
  const browser = connectBrowser({
    baseUrl: `${url}/browser/sessions/s/browser`,
    whistle: {
      commands: () => [{ name: "greet", description: "Greets someone", inputSchema: { type: "object", properties: { who: { type: "string" } } } }],
      async execute(name, input) {
        greeted.push(input.who);
        return { greeted: input.who };
      },
    },
  });
  try {
    model.scriptFor(
      "node-example-ui",
      {
        toolCalls: [
          {
            name: "execute",
            arguments: {
              code: "const t = await clock.now({}); const found = await ui.discover({}); const r = await ui.execute({ name: 'greet', input: { who: 'Ada' } }); return { iso: typeof t.now, found: found.map((c) => c.name), r };",
            },
          },
        ],
      },
      { text: "greeted" },
    );
    const id = await a.admit("s", "r1", "greet Ada node-example-ui");
    const s = await a.settled("s", id);
    assert.equal(s.terminal, "completed", JSON.stringify(s));
    const names = model.requests("node-example-ui")[0].body.tools.map((t) => t.function.name);
    assert.ok(names.includes("execute") && names.includes("now"), JSON.stringify(names));
    const tool = (await a.read("s")).messages.find((m) => m.role === "tool");
    assert.ok(!tool.isError, tool.text);
    assert.deepEqual(JSON.parse(tool.text), { iso: "string", found: ["greet"], r: { greeted: "Ada" } });
    assert.deepEqual(greeted, ["Ada"]);
  } finally {
    browser.close();
    ex.child.kill("SIGTERM");
    await exited(ex.child);
  }
});

test("branches on Node: retry, select, the children of an entry and a fork, kept across a reopen", T, async () => {
  const file = path.join(dir, "branches.db");
  let host = await openNodeShiitake({ path: file, env: env() });
  try {
    let a = client(host.app.fetch);
    await a.createSession("s");
    await a.settled("s", await a.admit("s", "p1", "node-branch one"));
    const [user, answer] = (await a.read("s")).messages;
    model.scriptFor("node-branch one", { text: "another answer" });
    const retry = await a.api("POST", "/sessions/s/commands", { type: "retry", requestId: "r1", entryId: user.entryId });
    assert.equal(retry.status, 200, retry.text);
    assert.equal((await a.settled("s", retry.json.commandId)).answer, "another answer");
    const page = (await a.read("s")).messages;
    assert.deepEqual(page.map((m) => [m.text, m.branch?.index]), [["node-branch one", undefined], ["another answer", 2]]);
    const select = await a.api("POST", "/sessions/s/commands", { type: "select", requestId: "sel", entryId: answer.entryId });
    assert.equal(select.status, 200, select.text);
    const fork = await a.api("POST", "/sessions", { sessionId: "f", from: { sessionId: "s", entryId: user.entryId } });
    assert.equal(fork.status, 201, fork.text);
    await host.close();
    host = await openNodeShiitake({ path: file, env: env() });
    a = client(host.app.fetch);
    assert.deepEqual((await a.read("s")).messages.map((m) => m.entryId), [user.entryId, answer.entryId]);
    const children = await a.api("GET", `/sessions/s/branches?entryId=${user.entryId}`);
    assert.deepEqual(children.json.children.map((c) => c.text), [answer.text, "another answer"]);
    assert.deepEqual((await a.read("f")).messages.map((m) => m.text), ["node-branch one"]);
  } finally {
    await host.close();
  }
});

test("compaction on Node: a compact command, then a turn that sees the summary and not what it stands for, kept across a reopen; a stated window compacts on its own", T, async () => {
  const file = path.join(dir, "compaction.db");
  const prompt = "NODE-COMPACTION-PROMPT";
  const windowed = env({ SHIITAKE_CONTEXT_WINDOWS: "openai/scripted-node=1024", SHIITAKE_COMPACTION_PROMPT: prompt });
  let host = await openNodeShiitake({ path: file, env: windowed });
  try {
    let a = client(host.app.fetch);
    await a.createSession("s");
    await a.settled("s", await a.admit("s", "p1", "node-compact first question"));
    model.scriptFor("node-compact-instructions", { text: "NODE SUMMARY: a first question was asked" });
    const compact = await a.api("POST", "/sessions/s/commands", { type: "compact", requestId: "c1", instructions: "node-compact-instructions" });
    assert.equal(compact.status, 200, compact.text);
    assert.equal((await a.settled("s", compact.json.commandId)).terminal, "completed");
    const entry = (await a.read("s")).messages.at(-1);
    assert.equal(entry.role, "compaction");
    assert.equal(entry.text, "NODE SUMMARY: a first question was asked");
    await host.close();
    host = await openNodeShiitake({ path: file, env: windowed });
    a = client(host.app.fetch);
    await a.settled("s", await a.admit("s", "p2", "node-compact second question"));
    const sent = JSON.stringify(model.requests("node-compact second question").at(-1).body);
    assert.ok(sent.includes("NODE SUMMARY: a first question was asked"), sent);
    assert.ok(!sent.includes("node-compact first question"), "the compacted message is not sent again");
    // The read keeps every message: the compacted ones, the entry, the new turn.
    assert.deepEqual((await a.read("s")).messages.map((m) => m.role), ["user", "assistant", "compaction", "user", "assistant"]);
    // A window of 1,024 tokens: a prompt of about 1,500 tokens compacts
    // before its call, with the host's compaction prompt.
    const before = model.requests(prompt).length;
    await a.settled("s", await a.admit("s", "p3", `node-compact long ${"word ".repeat(1_200)}`));
    assert.ok(model.requests(prompt).length > before, "a compaction ran on its own");
    assert.ok((await a.read("s")).messages.filter((m) => m.role === "compaction").length >= 2);
  } finally {
    await host.close();
  }
});

test("budgets on Node: a configured Session budget pauses a turn, still paused after a reopen; the owner API's raise resumes it at its attempt", T, async () => {
  const file = path.join(dir, "budget.db");
  const budgeted = env({ SHIITAKE_BUDGET_SESSION_TOKENS: "1000" });
  let host = await openNodeShiitake({ path: file, env: budgeted });
  try {
    let a = client(host.app.fetch);
    await a.createSession("s");
    model.scriptFor("node-budget", { text: "spent", usage: { prompt_tokens: 990, completion_tokens: 9 } });
    assert.equal((await a.settled("s", await a.admit("s", "p1", "node-budget one"))).terminal, "completed");
    const p2 = await a.admit("s", "p2", "node-budget two");
    const paused = await eventually(async () => (await a.read("s")).running?.paused);
    assert.equal((await a.read("s")).running.commandId, p2);
    assert.deepEqual([paused.reason, paused.budget.scope, paused.budget.tokens, paused.budget.spent], ["budget_reached", "session", 1000, 999]);
    assert.deepEqual(await host.agent.session("s").budget(), { tokens: 1000, set: false, spent: 999, paused });
    assert.equal((await a.api("PUT", "/sessions/s/budget", { tokens: 5000 })).status, 405, "the app never sets a budget");
    await host.close();
    host = await openNodeShiitake({ path: file, env: budgeted });
    a = client(host.app.fetch);
    assert.deepEqual((await a.read("s")).running.paused, paused, "the pause is stored, not held in memory");
    assert.equal(model.requests("node-budget").length, 1, "no call for the paused turn");
    const raised = await host.agent.session("s").setBudget({ tokens: 5000 });
    assert.deepEqual([raised.tokens, raised.set], [5000, true]);
    const done = await a.settled("s", p2);
    assert.equal(done.terminal, "completed", JSON.stringify(done));
    assert.equal(model.requests("node-budget").length, 2, "one call for the resumed turn");
    const { totals } = await host.agent.usage();
    assert.deepEqual([totals.calls, totals.failed, totals.unknown], [2, 0, 0]);
    assert.equal((await host.agent.session("s").budget()).spent, totals.inputTokens + totals.outputTokens);
  } finally {
    await host.close();
  }
});

test("ACP on Node: session/new, then a prompt streamed as session/update notifications and its stop reason", T, async () => {
  const host = await openNodeShiitake({ path: path.join(dir, "acp.db"), env: env() });
  try {
    const rpc = async (id, method, params) => {
      const res = await host.app.fetch(
        new Request("http://node.test/acp", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ jsonrpc: "2.0", id, method, params }) }),
      );
      const text = await res.text();
      const type = res.headers.get("content-type") ?? "";
      return type.startsWith("text/event-stream") ? text.split("\n\n").filter(Boolean).map((e) => JSON.parse(e.slice("data: ".length))) : [JSON.parse(text)];
    };
    const [created] = await rpc(1, "session/new", { cwd: "/", mcpServers: [] });
    const { sessionId } = created.result;
    model.scriptFor("node-acp", { chunks: ["Hi ", "from ", "Node"], chunkDelayMs: 5 });
    const out = await rpc(2, "session/prompt", { sessionId, prompt: [{ type: "text", text: "say hi node-acp" }] });
    assert.deepEqual(out.at(-1), { jsonrpc: "2.0", id: 2, result: { stopReason: "end_turn" } });
    const text = out.filter((m) => m.params?.update?.sessionUpdate === "agent_message_chunk").map((m) => m.params.update.content.text);
    assert.equal(text.join(""), "Hi from Node");
  } finally {
    await host.close();
  }
});

test("MCP on Node: the MCP SDK's client over real HTTP prompts a Session and waits for its settlement", T, async () => {
  const host = await openNodeShiitake({ path: path.join(dir, "mcp.db"), env: env() });
  const server = http.createServer(nodeListener(host.app.fetch));
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const client = new Client({ name: "node-e2e", version: "1.0.0" });
  try {
    await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${server.address().port}/mcp`)));
    const tool = async (name, args) => (await client.callTool({ name, arguments: args })).structuredContent;
    const { sessionId } = await tool("create_session", {});
    model.scriptFor("node-mcp", { text: "Hi from MCP on Node", chunkDelayMs: 5 });
    const receipt = await tool("prompt", { sessionId, requestId: "r1", text: "say hi node-mcp" });
    const { settlement } = await tool("wait_for_settlement", { sessionId, commandId: receipt.commandId, timeoutMs: 30_000 });
    assert.deepEqual([settlement.terminal, settlement.answer], ["completed", "Hi from MCP on Node"]);
    assert.deepEqual(await tool("prompt", { sessionId, requestId: "r1", text: "say hi node-mcp" }), receipt, "a retry answers the same receipt");
  } finally {
    await client.close();
    server.close();
    await host.close();
  }
});

test("the lease: a second open in this process or another is refused, naming the file; close() releases it", T, async () => {
  const file = path.join(dir, "leased.db");
  const first = await openNodeShiitake({ path: file, env: env() });
  await assert.rejects(openNodeShiitake({ path: file, env: env() }), (e) => {
    assert.equal(e.code, "SHIITAKE_LEASE_HELD");
    assert.ok(e.message.includes(file), e.message);
    return true;
  });
  // The same file spelled another way is still the same file.
  await assert.rejects(openNodeShiitake({ path: path.join(dir, ".", "x", "..", "leased.db"), env: env() }), { code: "SHIITAKE_LEASE_HELD" });
  const other = await openInChild(file);
  assert.equal(other.opened, false);
  assert.equal(other.code, "SHIITAKE_LEASE_HELD", other.message);
  assert.ok(other.message.includes(file), other.message);

  await first.close();
  await first.close(); // idempotent
  const again = await openNodeShiitake({ path: file, env: env() });
  await again.close();
  assert.deepEqual(await openInChild(file), { opened: true });

  // Held by another process (the example server): refused here, open after it stops.
  const ex = startExample(file);
  await ex.ready;
  await assert.rejects(openNodeShiitake({ path: file, env: env() }), (e) => e.code === "SHIITAKE_LEASE_HELD" && e.message.includes(file));
  ex.child.kill("SIGTERM");
  await exited(ex.child);
  await (await openNodeShiitake({ path: file, env: env() })).close();
});

test("kill -9 mid-turn: the reopened file resumes the turn and settles it exactly once", T, async () => {
  const file = path.join(dir, "killed.db");
  const tag = "node-killed";
  model.scriptFor(tag, { gate: tag, chunks: ["PARTIAL "], text: "never finished" }, { text: "the answer after the crash" });
  const ex = startExample(file);
  const a = client(await ex.ready);
  await a.createSession("s");
  const id = await a.admit("s", "r1", `answer me ${tag}`);
  await model.waitFor(() => model.requests(tag).length >= 1, { timeoutMs: 10_000, what: "the first attempt to reach the model" });
  const warm = await a.read("s");
  assert.equal(warm.running?.commandId, id, JSON.stringify(warm));
  ex.child.kill("SIGKILL");
  await exited(ex.child);
  model.release(tag);

  // Reopened in this process: no request is needed, the persisted alarm
  // brings the runtime back.
  const host = await openNodeShiitake({ path: file, env: env() });
  try {
    await model.waitFor(() => model.requests(tag).length >= 2, { timeoutMs: 15_000, what: "the resumed attempt" });
    // The example's middleware sets this host metadata; a replay carries the same.
    const outer = new Hono();
    outer.use("*", async (c, next) => {
      c.set("shiitakeMeta", { via: "examples/node" });
      await next();
    });
    outer.route("/", host.app);
    const b = client((req) => outer.fetch(req));
    const s = await b.settled("s", id);
    assert.equal(s.terminal, "completed", JSON.stringify(s));
    assert.equal(s.answer, "the answer after the crash");
    // The replayed prompt answers the original receipt; nothing runs again.
    const replay = await b.api("POST", "/sessions/s/commands", { type: "prompt", requestId: "r1", text: `answer me ${tag}` });
    assert.equal(replay.status, 200, replay.text);
    assert.equal(replay.json.commandId, id);
    const page = await b.read("s");
    assert.deepEqual(
      page.messages.map((m) => [m.role, m.commandId, m.text]),
      [
        ["user", id, `answer me ${tag}`],
        ["assistant", id, "the answer after the crash"],
      ],
    );
    assert.equal(page.running ?? null, null);
    assert.deepEqual(page.pending, []);
    const reqs = model.requests(tag);
    assert.equal(reqs.length, 2, "one attempt before the kill, one after");
    assert.deepEqual(
      reqs[1].body.messages.map((m) => [m.role, contentText(m.content)]).filter(([role]) => role !== "system"),
      [["user", `answer me ${tag}`]],
      "the resumed attempt sends the conversation without the partial answer",
    );
  } finally {
    await host.close();
  }
  // Settled once, for good: a later open finds the same settlement and no work.
  const later = await openNodeShiitake({ path: file, env: env() });
  try {
    const c = client(later.fetch);
    assert.equal((await c.settled("s", id)).answer, "the answer after the crash");
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(model.requests(tag).length, 2);
    // The usage ledger counted each call once, across the kill and the
    // reopens: the killed attempt's as unknown (no tokens), the resumed
    // one by the usage the model server sent.
    const sent = model.requests(tag)[1].usage;
    const ledger = await c.api("GET", "/usage?groupBy=session");
    assert.equal(ledger.status, 200, ledger.text);
    const { calls, answered, failed, unknown, inputTokens, outputTokens } = ledger.json.totals;
    assert.deepEqual(
      { calls, answered, failed, unknown, inputTokens, outputTokens },
      { calls: 2, answered: 1, failed: 0, unknown: 1, inputTokens: sent.prompt_tokens, outputTokens: sent.completion_tokens },
    );
    assert.deepEqual(ledger.json.groups.map((g) => [g.key, g.calls]), [["s", 2]]);
  } finally {
    await later.close();
  }
  // Beside the normalised counts, the provider's own usage object as sent.
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    const rows = db.prepare("SELECT outcome, model, raw, raw_dropped FROM shiitake_usage ORDER BY seq").all();
    assert.deepEqual(
      rows.map((r) => [r.outcome, r.model, r.raw === null ? null : JSON.parse(r.raw), r.raw_dropped]),
      [
        ["unknown", null, null, 0],
        ["answered", `openai/${model.requests(tag)[1].body.model}`, model.requests(tag)[1].usage, 0],
      ],
    );
  } finally {
    db.close();
  }
});

test("kill -9 with the alarm's row lost (its writes skip the fsync): the reopen's own pass resumes the accepted prompt", T, async () => {
  const file = path.join(dir, "alarm-lost.db");
  const tag = "node-alarm-lost";
  model.scriptFor(tag, { gate: tag, text: "never finished" }, { text: "resumed without an alarm" });
  const ex = startExample(file);
  const a = client(await ex.ready);
  await a.createSession("s");
  const id = await a.admit("s", "r1", `answer me ${tag}`);
  await model.waitFor(() => model.requests(tag).length >= 1, { timeoutMs: 10_000, what: "the first attempt to reach the model" });
  ex.child.kill("SIGKILL");
  await exited(ex.child);
  model.release(tag);
  // What a power loss may leave: the prompt committed (fsynced), the alarm's row not.
  const raw = new DatabaseSync(file);
  raw.exec("DELETE FROM _shiitake_node_alarm");
  raw.close();

  // No request is needed (a request would arm the alarm itself).
  const host = await openNodeShiitake({ path: file, env: env() });
  try {
    await model.waitFor(() => model.requests(tag).length >= 2, { timeoutMs: 10_000, what: "the attempt resumed by the open" });
    const s = await client(host.fetch).settled("s", id);
    assert.equal(s.terminal, "completed", JSON.stringify(s));
    assert.equal(s.answer, "resumed without an alarm");
    assert.equal(model.requests(tag).length, 2, "one attempt before the kill, one after");
  } finally {
    await host.close();
  }
});

test("a host tool module (tools option) runs on Node: a direct operation the model calls", T, async () => {
  const file = path.join(dir, "tools.db");
  const calls = [];
  const host = await openNodeShiitake({
    path: file,
    env: env(),
    tools: {
      modules: [
        {
          id: "probe",
          operations: [
            {
              name: "probe-node",
              description: "Records its argument.",
              inputSchema: { type: "object", properties: { x: { type: "number" } }, required: ["x"] },
              access: "read",
              direct: true,
              run(args, ctx) {
                calls.push([args.x, ctx.sessionId, this === host?.object]);
                return { seen: args.x, tag: "node-tool-result" };
              },
            },
          ],
        },
      ],
    },
  });
  try {
    const a = client(host.fetch);
    await a.createSession("s");
    model.scriptFor("node-tool-prompt", { toolCalls: [{ name: "probe_node", arguments: { x: 7 } }] });
    model.scriptFor("node-tool-result", { text: "the probe saw 7" });
    const id = await a.admit("s", "r1", "call the probe node-tool-prompt");
    const s = await a.settled("s", id);
    assert.equal(s.terminal, "completed", JSON.stringify(s));
    assert.equal(s.answer, "the probe saw 7");
    assert.equal(s.toolCallCount, 1);
    assert.deepEqual(calls, [[7, "s", true]]);
    const tools = model.requests("node-tool-prompt")[0].body.tools.map((t) => t.function.name);
    assert.ok(tools.includes("probe_node"), tools.join());
    // No LOADER on Node: execute runs in the embedded sandbox by default.
    assert.ok(tools.includes("execute"), tools.join());
  } finally {
    await host.close();
  }
});

test("activation resources on Node: activate when the runtime comes up, close() awaits the disposer; a reopen with a new revision activates its own; an overdue disposer is left behind at its bound", T, async () => {
  const file = path.join(dir, "activate.db");
  const events = [];
  const lamp = (version) =>
    defineExtension({ id: "lamp", version }).activate(() => {
      events.push(`activate ${version}`);
      return async () => {
        await new Promise((r) => setTimeout(r, 20));
        events.push(`dispose ${version}`);
      };
    });
  const first = await openNodeShiitake({ path: file, env: env(), extensions: [lamp("1.0.0")] });
  await client(first.fetch).createSession("s");
  assert.deepEqual(events, ["activate 1.0.0"]);
  await first.close();
  assert.deepEqual(events, ["activate 1.0.0", "dispose 1.0.0"], "close() resolves after the async disposer");
  // `stuck`'s disposer never settles: close() goes on past its bound
  // (EXTENSION_DISPOSE_TIMEOUT_MS) to lamp's, activated before it.
  const stuck = defineExtension("stuck").activate(() => {
    events.push("activate stuck");
    return () => new Promise(() => {});
  });
  const second = await openNodeShiitake({ path: file, env: env(), extensions: [lamp("2.0.0"), stuck] });
  await client(second.fetch).createSession("t");
  await second.close();
  assert.deepEqual(events, ["activate 1.0.0", "dispose 1.0.0", "activate 2.0.0", "activate stuck", "dispose 2.0.0"]);
});

test("a host composing its own store: acquireNodeStoreLease + nodeRuntimeHost + nodeShiitakeDO, driven through the owner API", T, async () => {
  const file = path.join(dir, "composed.db");
  const lease = acquireNodeStoreLease(file);
  assert.throws(() => acquireNodeStoreLease(file), (e) => e instanceof NodeStoreLeaseError && e.code === "SHIITAKE_LEASE_HELD" && e.message.includes(file));
  const ShiitakeDO = await nodeShiitakeDO();
  let object;
  const host = nodeRuntimeHost(lease, { agentId: "composed", object: () => object });
  object = new ShiitakeDO(host.ctx, env());
  host.arm();
  try {
    // The in-process owner API, the same one a Durable Object offers.
    await object.agent.createSession("s");
    model.scriptFor("node-composed", { text: "composed answer" });
    const receipt = await object.agent.session("s").prompt({ requestId: "r1", text: "hello node-composed" });
    assert.equal(receipt.status, "accepted");
    const settlement = await object.agent.session("s").readSettlement(receipt.commandId, { timeoutMs: 20_000 });
    assert.equal(settlement.terminal, "completed");
    assert.equal(settlement.answer, "composed answer");
    const again = await object.agent.session("s").prompt({ requestId: "r1", text: "hello node-composed" });
    assert.equal(again.commandId, receipt.commandId, "replay answers the same receipt");
    // The alarm's writes skip the fsync; the store's own commits stay FULL (2).
    await host.ctx.storage.setAlarm(Date.now() + 60_000);
    assert.equal(lease.db.prepare("PRAGMA synchronous").get().synchronous, 2);
  } finally {
    await object.close("test over");
    await host.close();
    lease.release();
    lease.release();
  }
  // Released: the file can be leased again.
  acquireNodeStoreLease(file).release();
});

test("a version 1 store: the Node host migrates it once, every message reads back and a new turn sees the old transcript", T, async () => {
  const file = path.join(dir, "v1.db");
  const first = await openNodeShiitake({ path: file, env: env() });
  const a = client(first.app.fetch);
  await a.createSession("s");
  model.scriptFor("node-v1-old", { text: "the old answer" });
  assert.equal((await a.settled("s", await a.admit("s", "r1", "remember node-v1-old"))).terminal, "completed");
  const before = await a.read("s");
  await first.close();
  const catalog = (db) =>
    db
      .prepare("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE '_shiitake_node%' ORDER BY name")
      .all()
      .map((r) => ({ ...r, sql: r.sql?.replace(/\s+/g, " ").replace(/\( /g, "(").replace(/ \)/g, ")").replace(/ \(/g, "(") }));
  // Back to what version 1 left: the tables it made when it opened a store
  // (as the frozen `src/store/v1.sql` has them; it made every other table
  // on first use), holding this store's rows, and the version row 1 (no group record).
  const db = new DatabaseSync(file);
  const current = catalog(db);
  db.close();
  const v1File = path.join(dir, "v1-shaped.db");
  const v1 = new DatabaseSync(v1File);
  const v1Opened = new Set(["shiitake_meta", "sessions", "commands", "fences", "messages", "session_grants", "shiitake_delivery", "shiitake_host_lane"]);
  const frozen = readFileSync(new URL("../../src/store/v1.sql", import.meta.url), "utf8");
  for (const statement of frozen.split(";\n").map((s) => s.trim()).filter(Boolean)) {
    const words = statement.split(/\s+/);
    const table = statement.startsWith("CREATE TABLE") ? words[2] : words[words.indexOf("ON") + 1];
    if (v1Opened.has(table.replace(/\($/, ""))) v1.exec(statement);
  }
  v1.exec(`ATTACH DATABASE '${file}' AS now`);
  const held = new Set(v1.prepare("SELECT name FROM now.sqlite_master WHERE type = 'table'").all().map((r) => r.name));
  for (const table of v1Opened) {
    if (!held.has(table)) continue; // a group this store never wrote
    const columns = v1.prepare(`PRAGMA table_info(${table})`).all().map((c) => c.name).join(", ");
    v1.exec(`INSERT INTO ${table} (${columns}) SELECT ${columns} FROM now.${table}`);
  }
  v1.exec("DETACH DATABASE now");
  v1.exec("UPDATE shiitake_meta SET value = '1' WHERE key = 'schema_version'");
  v1.exec("DELETE FROM shiitake_meta WHERE key <> 'schema_version'"); // version 1 recorded no group
  v1.close();
  rmSync(file);
  renameSync(v1File, file);

  const logged = [];
  const info = console.info;
  console.info = (...args) => logged.push(args.join(" "));
  let expected = before;
  try {
    for (const round of [1, 2]) {
      const host = await openNodeShiitake({ path: file, env: env() });
      try {
        const b = client(host.app.fetch);
        assert.deepEqual(await b.read("s"), expected, `open ${round}: the transcript reads back the same`);
        if (round === 1) {
          model.scriptFor("node-v1-new", { text: "the new answer" });
          assert.equal((await b.settled("s", await b.admit("s", "r2", "recall node-v1-new"))).answer, "the new answer");
          const sent = JSON.stringify(model.requests("node-v1-new")[0].body);
          assert.ok(sent.includes("remember node-v1-old") && sent.includes("the old answer"), sent);
          expected = await b.read("s");
        }
      } finally {
        await host.close();
      }
    }
  } finally {
    console.info = info;
  }
  const migrated = logged.filter((l) => l.includes("migrated from schema version 1"));
  assert.equal(migrated.length, 1, logged.join("\n"));
  const after = new DatabaseSync(file);
  // Version 1 made the delivery tables in every store; version 2 records them
  // as the `delivery` group, which the fresh store never wrote.
  const delivery = new Set(["shiitake_delivery", "shiitake_host_lane", "sqlite_autoindex_shiitake_delivery_1"]);
  assert.deepEqual(catalog(after).filter((o) => !delivery.has(o.name)), current, "the migrated schema is a fresh store's");
  after.close();
});

test("the Node host's SQL splits a text at its statements' `;`s, never inside a trigger's body, CASE expressions included", () => {
  const trigger = "CREATE TRIGGER t AFTER INSERT ON a BEGIN INSERT INTO b (n) SELECT CASE WHEN NEW.x > 1 THEN 1 ELSE 0 END; UPDATE b SET n = n + 1; END";
  assert.deepEqual(splitStatements(`CREATE TABLE a (x INTEGER);\n${trigger};\nSELECT CASE WHEN 1 THEN 'a;b' END`).map((s) => s.trim()), [
    "CREATE TABLE a (x INTEGER)",
    trigger,
    "SELECT CASE WHEN 1 THEN 'a;b' END",
  ]);
});
