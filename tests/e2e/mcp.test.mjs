// MCP servers as tool sources (seed knapsack.md `mcpServers`),
// against servers built with the official @modelcontextprotocol/sdk
// (tests/support/mcp-server.mjs): one module mcp.<name> per server, tool
// names mapped to guest names, pagination, JSON and SSE bodies, a bearer
// token that reaches the server and never the Durable Object's storage, a
// redirect refused, a hanging server and a 401 dropped and reported while the
// others work, grants on mcp.<name>, and replay after a crash only for the
// readOnlyHint tool; a server marked `direct: true` offers its tools as
// direct tools, callable in a Worker without LOADER (no execute). Fixture: tests/e2e/fixtures/mcp-worker.mjs.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import http from "node:http";
import { after, before, test } from "node:test";
import { execute, filesUnder, kind, startWorker, uniq } from "./helpers.mjs";
import { startHangingServer, startMcpServer, startRedirectServer } from "../support/mcp-server.mjs";

const TOKEN = "mcp-bearer-3d9f1c7a-secret";
const CONNECT_TIMEOUT_MS = 2000;
let h;
const servers = {};
before(async () => {
  servers.notes = await startMcpServer({ mode: "sse", pageSize: 2 });
  servers.jnotes = await startMcpServer({ mode: "json" });
  servers.secure = await startMcpServer({ mode: "json", token: TOKEN });
  servers.redirect = await startRedirectServer();
  servers.hang = await startHangingServer();
  const list = [
    { name: "notes", url: servers.notes.url },
    { name: "jnotes", url: servers.jnotes.url },
    { name: "secure", url: servers.secure.url, headers: { authorization: `Bearer ${TOKEN}` } },
    { name: "moved", url: servers.redirect.url },
    { name: "stuck", url: servers.hang.url },
    { name: "denied", url: servers.secure.url, headers: { authorization: "Bearer wrong-token" } },
  ];
  h = await startWorker({
    fixture: "mcp-worker",
    model: "echo",
    persist: true,
    bindings: { MCP_SERVERS_JSON: JSON.stringify(list), MCP_TIMEOUT_MS: CONNECT_TIMEOUT_MS },
  });
});
after(async () => {
  await h?.dispose();
  for (const s of Object.values(servers)) await s.close();
});

const T = { timeout: 60_000 };

async function turn(name, a, ...script) {
  const tag = uniq(name);
  h.model.scriptFor(tag, ...script);
  const sid = `s-${randomUUID().slice(0, 8)}`;
  await a.createSession(sid);
  const settled = await a.settle(sid, "r1", `mcp ${tag}`, { boundMs: 30_000 });
  const messages = (await a.read(sid, { limit: 200 })).messages;
  return { tag, sid, settled, tools: messages.filter((m) => m.role === "tool"), requests: h.model.requests(tag) };
}

test("the model calls MCP tools through execute: structuredContent, {isError, content}, hyphenated names, a schema outside the subset, all pages listed", T, async () => {
  const a = h.agent();
  const code = `
    const out = {};
    out.created = await mcp.notes.create_note({ title: "alpha" });
    out.count = await mcp.notes.note_count({});
    out.failed = await mcp.jnotes.fail({});
    out.odd = await mcp.notes.odd_schema({ v: 1 });
    out.paths = (await forage.search("note")).map((r) => r.path);
    return out;`;
  const t = await turn("interop", a, execute(code), { text: "done" });
  assert.equal(t.settled.terminal, "completed", JSON.stringify(t.settled));
  assert.equal(t.tools[0].isError, undefined, t.tools[0].text);
  const out = JSON.parse(t.tools[0].text);
  assert.equal(out.created.isError, false);
  assert.deepEqual(out.created.content, [{ type: "text", text: "created alpha" }]);
  assert.deepEqual(out.count, { count: 1 }, "structuredContent is the result");
  assert.equal(out.failed.isError, true);
  assert.match(JSON.stringify(out.failed.content), /it failed on purpose/);
  assert.ok(out.paths.includes("mcp.notes.create_note") && out.paths.includes("mcp.jnotes.list_notes"), JSON.stringify(out.paths));
  // The door lists every tool of the paginated server (7 tools, pages of 2).
  const description = t.requests[0].body.tools[0].function.description;
  for (const tool of ["create_note", "list_notes", "note_count", "fail", "odd_schema", "slow_read", "slow_write"]) {
    assert.match(description, new RegExp(`mcp\\.notes\\.${tool}`));
  }
  const cursors = servers.notes.requests().filter((r) => r.rpc === "tools/list").map((r) => r.body?.params?.cursor);
  assert.ok(cursors.length >= 4, `paginated listing: ${JSON.stringify(cursors)}`);
  assert.deepEqual(servers.notes.calls().map((c) => c.tool).slice(-3), ["create-note", "note-count", "odd-schema"], "source names go to the server");
  for (const r of servers.notes.requests()) assert.equal(r.headers["x-host-fetch"], "tools-fixture", "every request went through the host's fetch");
});

test("the bearer token reaches the server, and no SQLite file, message or result of the Agent holds it", T, async () => {
  const a = h.agent();
  // The result, the catalog (describe, search) and the transcript hold no header.
  const code = "return { list: await mcp.secure.list_notes({}), described: await forage.describe('mcp.secure.list_notes'), found: await forage.search('secure notes') };";
  const t = await turn("secure", a, execute(code), { text: "listed" });
  assert.equal(t.tools[0].isError, undefined, t.tools[0].text);
  assert.equal(JSON.parse(t.tools[0].text).described.path, "mcp.secure.list_notes");
  const seen = servers.secure.requests().filter((r) => r.headers.authorization === `Bearer ${TOKEN}`);
  assert.ok(seen.length > 0, "the server got the token");
  const read = await a.read(t.sid, { limit: 200 });
  assert.ok(!JSON.stringify(read).includes(TOKEN), "not in the transcript");
  for (const req of h.model.requests()) assert.ok(!JSON.stringify(req.body).includes(TOKEN), "not sent to the model");
  for (const file of await filesUnder(h.persistDir)) {
    const bytes = await readFile(file);
    assert.ok(!bytes.includes(Buffer.from(TOKEN)), `${file} holds the token`);
    assert.ok(!bytes.includes(Buffer.from("wrong-token")), `${file} holds the other credential`);
  }
});

test("a redirect, a hanging server and a refused credential are dropped and reported; the others work", T, async () => {
  const a = h.agent();
  const tag = uniq("unavailable");
  h.model.scriptFor(tag, execute("return await mcp.jnotes.list_notes({});"), { text: "ok" });
  await a.createSession("s");
  const w = await a.watch("s");
  let events;
  const started = Date.now();
  try {
    await w.next();
    const id = await a.admit("s", "r1", `go ${tag}`);
    events = await w.until((ev) => kind(ev) === "settled" && (ev.data.settlement ?? ev.data).commandId === id, 20_000);
  } finally {
    await w.close();
  }
  assert.ok(Date.now() - started < CONNECT_TIMEOUT_MS + 5_000, "the hanging server costs at most the connect timeout");
  const diagnostics = events.filter((ev) => kind(ev) === "diagnostic").map((ev) => ev.data.diagnostic);
  assert.equal(diagnostics.length, 3, JSON.stringify(diagnostics));
  assert.match(diagnostics.find((d) => d.includes("`moved`")), /redirects are refused/);
  assert.match(diagnostics.find((d) => d.includes("`stuck`")), new RegExp(`within ${CONNECT_TIMEOUT_MS} ms`));
  assert.match(diagnostics.find((d) => d.includes("`denied`")), /refused the credentials \(HTTP 401\)/);
  for (const d of diagnostics) assert.ok(!d.includes("wrong-token") && !d.includes(TOKEN), d);
  const reports = (await h.api("GET", `/direct/${a.id}/host/unavailable`)).json;
  assert.deepEqual(reports.map((r) => r.name).sort(), ["denied", "moved", "stuck"]);
  const tool = (await a.read("s")).messages.find((m) => m.role === "tool");
  assert.equal(tool.isError, undefined, tool.text);
  const offered = h.model.requests(tag)[0].body.tools[0].function.description;
  assert.doesNotMatch(offered, /mcp\.(moved|stuck|denied)\./);
  assert.ok(servers.redirect.requests().length >= 1 && servers.redirect.requests().every((r) => r.path === new URL(servers.redirect.url).pathname), "the redirect was not followed");
});

test("grants apply to mcp.<name>: a Session granted read may list but not create", T, async () => {
  const a = h.agent();
  await a.createSession("g");
  await h.api("POST", `/host-grants/${a.id}/g`, { version: 1, grants: { "mcp.jnotes": "read" } });
  const tag = uniq("grants");
  const code = `
    const out = {};
    try { await mcp.jnotes.create_note({ title: "no" }); out.create = "ran"; } catch (e) { out.create = e.message; }
    out.list = await mcp.jnotes.list_notes({});
    return out;`;
  h.model.scriptFor(tag, execute(code), { text: "ok" });
  const before = servers.jnotes.calls().length;
  await a.settle("g", "r1", `grants ${tag}`, { boundMs: 20_000 });
  const out = JSON.parse((await a.read("g")).messages.find((m) => m.role === "tool").text);
  assert.match(out.create, /`mcp\.jnotes` is granted `read` here; this operation needs `write`/);
  assert.equal(out.list.isError, false);
  assert.deepEqual(servers.jnotes.calls().slice(before).map((c) => c.tool), ["list-notes"]);
});

test("after a crash mid-call only the readOnlyHint tool runs again", T, async () => {
  const a = h.agent();
  const run = async (tool) => {
    const tag = uniq(tool);
    h.model.scriptFor(tag, execute(`return await mcp.notes.${tool}({});`), { text: "after" });
    const sid = `c-${tool}`;
    await a.createSession(sid);
    const id = await a.admit(sid, "r1", `crash ${tag}`);
    return { sid, id };
  };
  const countCalls = (tool) => servers.notes.calls().filter((c) => c.tool === tool).length;
  const read = await run("slow_read");
  const write = await run("slow_write");
  const deadline = Date.now() + 15_000;
  while (countCalls("slow-read") < 1 || countCalls("slow-write") < 1) {
    if (Date.now() > deadline) throw new Error("the slow tools were not called");
    await new Promise((r) => setTimeout(r, 50));
  }
  await h.restart();
  const r = await a.waitSettled(read.sid, read.id, { boundMs: 30_000 });
  const w = await a.waitSettled(write.sid, write.id, { boundMs: 30_000 });
  assert.equal(r.terminal, "completed");
  assert.equal(w.terminal, "completed");
  assert.equal(countCalls("slow-read"), 2, "the read-only tool ran again");
  assert.equal(countCalls("slow-write"), 1, "the other never ran again");
  const readTool = (await a.read(read.sid)).messages.find((m) => m.role === "tool");
  assert.match(readTool.text, /runs 2/);
  const writeTool = (await a.read(write.sid)).messages.find((m) => m.role === "tool");
  assert.match(writeTool.text, /^outcome unknown/);
});

test("an unavailable server is tried again once the retry interval has passed", T, async () => {
  let down = true;
  const target = new URL(servers.jnotes.url);
  const flaky = http.createServer((req, res) => {
    if (down) {
      res.writeHead(503, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "down for now" } }));
      return;
    }
    const upstream = http.request(
      { host: target.hostname, port: target.port, path: target.pathname, method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      },
    );
    req.pipe(upstream);
  });
  await new Promise((resolve) => flaky.listen(0, "127.0.0.1", resolve));
  const h2 = await startWorker({
    fixture: "mcp-worker",
    model: "echo",
    bindings: {
      MCP_SERVERS_JSON: JSON.stringify([{ name: "flaky", url: `http://127.0.0.1:${flaky.address().port}/mcp` }]),
      MCP_RETRY_MS: 1000,
    },
  });
  try {
    const a = h2.agent();
    await a.createSession("s");
    const tag1 = uniq("flaky-down");
    h2.model.scriptFor(tag1, { text: "nothing to use" });
    await a.settle("s", "r1", `first ${tag1}`, { boundMs: 20_000 });
    assert.equal(h2.model.requests(tag1)[0].body.tools, undefined, "no tools while the only server is down");
    assert.deepEqual((await h2.api("GET", `/direct/${a.id}/host/unavailable`)).json.map((r) => r.name), ["flaky"]);
    down = false;
    await new Promise((r) => setTimeout(r, 1100));
    const tag2 = uniq("flaky-up");
    h2.model.scriptFor(tag2, execute("return await mcp.flaky.list_notes({});"), { text: "now it works" });
    const settled = await a.settle("s", "r2", `second ${tag2}`, { boundMs: 20_000 });
    assert.equal(settled.toolCallCount, 1);
    const tool = (await a.read("s")).messages.find((m) => m.role === "tool");
    assert.equal(tool.isError, undefined, tool.text);
    assert.equal(JSON.parse(tool.text).isError, false);
  } finally {
    await h2.dispose();
    await new Promise((resolve) => flaky.close(resolve));
  }
});


test("a direct server's tools are direct tools: offered and called without execute in a Worker with no LOADER", T, async () => {
  const direct = await startMcpServer({ mode: "json" });
  const plain = await startMcpServer({ mode: "json" });
  const list = [
    { name: "dnotes", url: direct.url, direct: true },
    // Not direct: without execute, nothing of it is offered.
    { name: "pnotes", url: plain.url },
  ];
  const w = await startWorker({ fixture: "mcp-worker", model: "echo", loader: false, bindings: { MCP_SERVERS_JSON: JSON.stringify(list) } });
  try {
    const a = w.agent();
    const tag = uniq("direct");
    w.model.scriptFor(tag, { toolCalls: [{ name: "create_note", arguments: { title: "directly" } }] }, { text: "noted" });
    await a.createSession("d");
    const settled = await a.settle("d", "r1", `note ${tag}`, { boundMs: 30_000 });
    assert.equal(settled.terminal, "completed", JSON.stringify(settled));
    const [first, second] = w.model.requests(tag);
    const names = first.body.tools.map((t) => t.function.name);
    assert.ok(!names.includes("execute"), "no LOADER: no execute");
    for (const tool of ["create_note", "list_notes", "note_count", "fail"]) assert.ok(names.includes(tool), JSON.stringify(names));
    const tool = (await a.read("d", { limit: 200 })).messages.find((m) => m.role === "tool");
    assert.equal(tool.isError, undefined, tool.text);
    assert.equal(tool.toolName, "create_note");
    assert.match(tool.text, /created directly/);
    assert.match(JSON.stringify(second.body.messages), /created directly/);
    assert.deepEqual(direct.calls().map((c) => c.tool), ["create-note"], "the source name went to the server");
    assert.deepEqual(plain.calls(), []);
  } finally {
    await w.dispose();
    await direct.close();
    await plain.close();
  }
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const offeredNames = (request) => (request.body.tools ?? []).map((t) => t.function.name);

test("a direct server past one model request's 64 tools leaves the Agent serving turns: the first tools offered, the rest reported by name (onUnavailable, the log, each turn's diagnostics) and reached through execute", T, async () => {
  const wide = await startMcpServer({ mode: "json", base: false, extra: Array.from({ length: 65 }, (_, i) => `w${i}`) });
  const logs = [];
  const w = await startWorker({
    fixture: "mcp-worker",
    model: "echo",
    log: (chunk) => logs.push(chunk),
    bindings: { MCP_SERVERS_JSON: JSON.stringify([{ name: "wide", url: wide.url, direct: true }]) },
  });
  try {
    const a = w.agent();
    await a.createSession("b");
    for (const round of [1, 2]) {
      const tag = uniq(`bounded-${round}`);
      w.model.scriptFor(tag, { toolCalls: [{ name: "w0", arguments: {} }] }, execute("return await mcp.wide.w64({});"), { text: "done" });
      const watch = await a.watch("b");
      let events;
      try {
        await watch.next();
        const id = await a.admit("b", `r${round}`, `go ${tag}`);
        events = await watch.until((ev) => kind(ev) === "settled" && (ev.data.settlement ?? ev.data).commandId === id, 20_000);
      } finally {
        await watch.close();
      }
      const settled = events.find((ev) => kind(ev) === "settled").data;
      assert.equal((settled.settlement ?? settled).terminal, "completed", JSON.stringify(settled));
      const names = offeredNames(w.model.requests(tag)[0]);
      assert.equal(names.length, 64, JSON.stringify(names));
      assert.deepEqual([names[0], names[1], names.at(-1)], ["execute", "w0", "w62"]);
      const diagnostics = events.filter((ev) => kind(ev) === "diagnostic").map((ev) => ev.data.diagnostic);
      assert.deepEqual(diagnostics.map((d) => d.match(/tool `(w\d+)`/)?.[1]), ["w63", "w64"], JSON.stringify(diagnostics));
      assert.match(diagnostics[0], /^MCP server `wide`: tool `w63` is not a direct tool \(`execute` reaches it\): a model request carries at most 64 tools/);
    }
    const tools = (await a.read("b", { limit: 200 })).messages.filter((m) => m.role === "tool");
    assert.equal(tools.length, 4);
    assert.match(tools[0].text, /w0 ran/);
    assert.match(tools[1].text, /w64 ran/, "execute reaches a tool left out");
    const reports = (await w.api("GET", `/direct/${a.id}/host/unavailable`)).json;
    assert.deepEqual(reports.map((r) => [r.name, r.tool]), [["wide", "w63"], ["wide", "w64"]], "reported once");
    const logged = logs.join("");
    for (const tool of ["w63", "w64"]) assert.match(logged, new RegExp(`MCP server \`wide\`: tool \`${tool}\` is not a direct tool`));
  } finally {
    await w.dispose();
    await wide.close();
  }
});

test("a server that gains a tool offers it without a restart: listed again each retry interval (the SDK's list_changed goes to a GET stream no one holds)", T, async () => {
  const gains = await startMcpServer({ mode: "sse", base: false, extra: ["first"] });
  const list = [{ name: "gains", url: gains.url, direct: true }];
  const w = await startWorker({ fixture: "mcp-worker", model: "echo", loader: false, bindings: { MCP_SERVERS_JSON: JSON.stringify(list), MCP_RETRY_MS: 1000 } });
  try {
    const a = w.agent();
    await a.createSession("g");
    const tag1 = uniq("before");
    w.model.scriptFor(tag1, { text: "ok" });
    await a.settle("g", "r1", `first ${tag1}`, { boundMs: 20_000 });
    assert.deepEqual(offeredNames(w.model.requests(tag1)[0]), ["first"]);
    gains.addTool("second");
    await sleep(1100);
    const tag2 = uniq("after");
    w.model.scriptFor(tag2, { toolCalls: [{ name: "second", arguments: {} }] }, { text: "used it" });
    const settled = await a.settle("g", "r2", `second ${tag2}`, { boundMs: 20_000 });
    assert.equal(settled.terminal, "completed", JSON.stringify(settled));
    assert.deepEqual(offeredNames(w.model.requests(tag2)[0]), ["first", "second"]);
    const tool = (await a.read("g", { limit: 200 })).messages.filter((m) => m.role === "tool").at(-1);
    assert.equal(tool.isError, undefined, tool.text);
    assert.match(tool.text, /second ran/);
    const inits = gains.requests().filter((r) => r.rpc === "initialize");
    assert.equal(inits.length, 1, "listed again in the same session");
  } finally {
    await w.dispose();
    await gains.close();
  }
});

/** A Worker without LOADER over one direct server, `retryMs` its retry interval: runs numbered turns in one Session. */
async function directAgent(server, retryMs) {
  const list = [{ name: "srv", url: server.url, direct: true }];
  const w = await startWorker({ fixture: "mcp-worker", model: "echo", loader: false, bindings: { MCP_SERVERS_JSON: JSON.stringify(list), MCP_RETRY_MS: retryMs } });
  const a = w.agent();
  await a.createSession("n");
  /** Turn `n` answered by `script`: the tools the model was offered, and the last tool message. */
  const step = async (n, ...script) => {
    const tag = uniq(`step-${n}`);
    w.model.scriptFor(tag, ...script);
    const settled = await a.settle("n", `r${n}`, `step ${tag}`, { boundMs: 20_000 });
    assert.equal(settled.terminal, "completed", JSON.stringify(settled));
    const tools = (await a.read("n", { limit: 200 })).messages.filter((m) => m.role === "tool");
    return { names: offeredNames(w.model.requests(tag)[0]), tool: tools.at(-1) };
  };
  return { w, step };
}

test("a server that notifies list_changed on a response is listed again at the next turn, once; never without a change", T, async () => {
  const grows = await startMcpServer({ mode: "sse", base: false, extra: ["first"], grow: true });
  // The retry interval (an hour) lists nothing again by itself here.
  const { w, step } = await directAgent(grows, 3_600_000);
  const listings = () => grows.requests().filter((r) => r.rpc === "tools/list").length;
  try {
    // The tool's response stream carries notifications/tools/list_changed.
    const one = await step(1, { toolCalls: [{ name: "grow", arguments: { name: "grown" } }] }, { text: "grew" });
    assert.deepEqual(one.names, ["first", "grow"]);
    assert.match(one.tool.text, /grew grown/);
    assert.equal(listings(), 1);
    // At most once a second (MCP_RELIST_GAP_MS) after the last listing.
    await sleep(1100);
    const two = await step(2, { toolCalls: [{ name: "grown", arguments: {} }] }, { text: "used" });
    assert.deepEqual(two.names, ["first", "grow", "grown"]);
    assert.match(two.tool.text, /grown ran/);
    assert.equal(listings(), 2, "listed again once");
    await sleep(1100);
    await step(3, { text: "nothing new" });
    assert.equal(listings(), 2, "no change, no listing");
  } finally {
    await w.dispose();
    await grows.close();
  }
});

test("a server whose session ended is listed again once the session is renewed", T, async () => {
  const srv = await startMcpServer({ mode: "sse", base: false, extra: ["first"] });
  const { w, step } = await directAgent(srv, 3_600_000);
  const count = (rpc) => srv.requests().filter((r) => r.rpc === rpc).length;
  try {
    assert.deepEqual((await step(1, { text: "hello" })).names, ["first"]);
    // The server forgets the session and gains a tool it tells no one of.
    srv.addTool("later");
    await srv.forgetSessions();
    const two = await step(2, { toolCalls: [{ name: "first", arguments: {} }] }, { text: "renewed" });
    assert.match(two.tool.text, /first ran/, "the call renewed the session");
    assert.equal(count("initialize"), 2);
    await sleep(1100);
    const three = await step(3, { toolCalls: [{ name: "later", arguments: {} }] }, { text: "found it" });
    assert.deepEqual(three.names, ["first", "later"]);
    assert.match(three.tool.text, /later ran/);
    assert.equal(count("tools/list"), 3, "the first session's, the renewal's, then the turn's");
    assert.equal(count("initialize"), 2, "in the renewed session");
  } finally {
    await w.dispose();
    await srv.close();
  }
});
