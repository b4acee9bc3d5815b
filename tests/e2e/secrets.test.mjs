// Secrets never leave: a provider or MCP server that echoes the
// configured key (whole, after `Bearer `, or cut to a prefix) in an error
// body or an in-stream error gets it redacted from every place the text
// reaches: the settlement, the watch frames (`runtime-error`, `diagnostic`),
// the onUnavailable report, the service log and every file of the Durable
// Object's state directory.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import http from "node:http";
import path from "node:path";
import { after, test } from "node:test";
import { ROOT, bundleFixture, filesUnder, kind, startWorker } from "./helpers.mjs";

const T = { timeout: 120_000 };
const STATUSES = [400, 401, 403, 404, 429, 500, 502, 503];
const started = [];
after(async () => {
  for (const h of started) await h.dispose();
});


/** The forms a provider echoes a key in; each must be gone everywhere. */
function echoes(key) {
  return `Incorrect API key provided: ${key}. Header: Bearer ${key}. Prefix: ${key.slice(0, 16)}…`;
}

/** Fails when any fragment of `key` of 12 bytes or more appears in `text`. */
function assertNoKey(text, key, where) {
  for (let i = 0; i + 12 <= key.length; i++) {
    const fragment = key.slice(i, i + 12);
    assert.ok(!text.includes(fragment), `${where} holds a piece of the key: …${text.slice(Math.max(0, text.indexOf(fragment) - 60), text.indexOf(fragment) + 40)}…`);
  }
}

async function assertStateClean(h, key) {
  const all = await filesUnder(h.persistDir);
  assert.ok(all.some((f) => f.endsWith(".sqlite")), `a SQLite file was written: ${all.join(", ")}`);
  for (const file of all) {
    const bytes = (await readFile(file)).toString("latin1");
    assertNoKey(bytes, key, file);
  }
}

for (const provider of ["openai", "anthropic"]) {
  test(`${provider}: a key echoed by error bodies (${STATUSES.join(", ")}) and by an in-stream error is redacted everywhere`, T, async () => {
    let log = "";
    const h = await startWorker({
      model: { fallback: "echo", provider },
      persist: true,
      bindings: { SHIITAKE_ATTEMPTS_MAX: 1 },
      log: (chunk) => {
        log += chunk;
      },
    });
    started.push(h);
    const key = h.modelApiKey;
    const a = h.agent();
    await a.createSession("s");
    const w = await a.watch("s");
    await w.next(); // the snapshot
    const cases = [
      ...STATUSES.map((status) => ({ status, body: provider === "openai"
        ? { error: { message: echoes(key), type: "invalid_request_error", param: null, code: "invalid_api_key" } }
        : { type: "error", error: { type: "authentication_error", message: echoes(key) } } })),
      { streamError: { type: "api_error", message: echoes(key) }, text: "partial " },
      // No JSON at all: the raw body is the diagnostic.
      { status: 500, body: `<html>upstream rejected Bearer ${key}</html>` },
    ];
    const settlements = [];
    for (const [i, response] of cases.entries()) {
      const tag = `[leak-${i}-${randomUUID().slice(0, 6)}]`;
      h.model.scriptFor(tag, response);
      const settled = await a.settle("s", `r${i}`, `hello ${tag}`);
      assert.equal(settled.terminal, "failed", JSON.stringify(settled));
      assert.match(settled.diagnostic, /<redacted>/, `case ${i}: the diagnostic keeps the provider's words: ${settled.diagnostic}`);
      settlements.push(settled);
    }
    // Every request carried the key: the model server saw it, nothing else did.
    assert.ok(h.model.requests().length >= cases.length);
    const frames = await w.until((ev) => kind(ev) === "settled" && ev.data.settlement.commandId === settlements.at(-1).commandId, 10_000);
    await w.close();
    const errors = [...w.events, ...frames].filter((ev) => ev.event === "runtime-error");
    assert.ok(errors.length >= cases.length, `a runtime-error frame per failure: ${errors.length}`);
    for (const ev of errors) assert.match(ev.data.diagnostic, /<redacted>/);
    assertNoKey(JSON.stringify(settlements), key, "a settlement");
    assertNoKey(w.raw, key, "the watch stream");
    const read = await a.read("s", { limit: 200 });
    assertNoKey(JSON.stringify(read), key, "the Session read");
    await h.mf.dispose(); // flush the log and the SQLite files
    h.mf = undefined;
    assertNoKey(log, key, "the service log");
    await assertStateClean(h, key);
  });
}

/** An MCP server that echoes the credential it was sent in every error. */
function startEchoingMcpServer(mode) {
  return new Promise((resolve) => {
    const server = http.createServer((req, res) => {
      let body = "";
      req.on("data", (c) => (body += c));
      req.on("end", () => {
        const auth = req.headers.authorization ?? "";
        const token = auth.replace(/^Bearer /, "");
        const words = `unknown credential ${auth} (token ${token}, prefix ${token.slice(0, 14)})`;
        const id = JSON.parse(body || "{}").id ?? null;
        // "status": an HTTP 500 whose JSON-RPC error body (the detail the
        // client reports) echoes it; "rpc": a 200 with a JSON-RPC error.
        res
          .writeHead(mode === "status" ? 500 : 200, { "content-type": "application/json" })
          .end(JSON.stringify({ jsonrpc: "2.0", id, error: { code: -32000, message: words } }));
      });
    });
    server.listen(0, "127.0.0.1", () => resolve({ url: `http://127.0.0.1:${server.address().port}/mcp`, close: () => new Promise((r) => server.close(r)) }));
  });
}

test("MCP: a server echoing its bearer token in an HTTP error and in a JSON-RPC error has it redacted everywhere", T, async () => {
  const TOKEN = "mcp-echoed-9b1f4e7c2a5d8f0e";
  const status = await startEchoingMcpServer("status");
  const rpc = await startEchoingMcpServer("rpc");
  let log = "";
  const script = await bundleFixture(path.join(ROOT, "tests/e2e/fixtures/mcp-worker.mjs"), "mcp-worker");
  const h = await startWorker({
    scriptPath: script,
    model: "echo",
    persist: true,
    bindings: {
      MCP_SERVERS_JSON: JSON.stringify([
        { name: "loud", url: status.url, headers: { authorization: `Bearer ${TOKEN}` } },
        { name: "chatty", url: rpc.url, headers: { authorization: `Bearer ${TOKEN}`, "x-api-key": TOKEN } },
      ]),
      MCP_TIMEOUT_MS: 3000,
    },
    log: (chunk) => {
      log += chunk;
    },
  });
  started.push(h);
  try {
    const a = h.agent();
    await a.createSession("s");
    const w = await a.watch("s");
    await w.next();
    const settled = await a.settle("s", "r1", "hello");
    const frames = await w.until((ev) => kind(ev) === "settled", 10_000);
    await w.close();
    const diagnostics = frames.filter((ev) => kind(ev) === "diagnostic").map((ev) => ev.data.diagnostic);
    assert.equal(diagnostics.length, 2, `both servers reported: ${JSON.stringify(diagnostics)}`);
    for (const d of diagnostics) assert.match(d, /<redacted>/, d);
    const reports = await h.api("GET", `/direct/${a.id}/host/unavailable`);
    assert.equal(reports.status, 200, reports.text);
    assert.equal(reports.json.length, 2, reports.text);
    assertNoKey(reports.text, TOKEN, "the onUnavailable reports");
    assertNoKey(JSON.stringify(settled), TOKEN, "the settlement");
    assertNoKey(w.raw, TOKEN, "the watch stream");
    await h.mf.dispose();
    h.mf = undefined;
    assert.match(log, /MCP server `loud` is unavailable/, "the log reports the server");
    assertNoKey(log, TOKEN, "the service log");
    await assertStateClean(h, TOKEN);
  } finally {
    await status.close();
    await rpc.close();
  }
});
