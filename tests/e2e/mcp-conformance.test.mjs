// The official MCP conformance suite (@modelcontextprotocol/conformance,
// pinned) against both sides of Shiitake's MCP, through the Node host
// (js/node.mjs, the real wasm):
// - client mode: the suite starts its own test server per scenario and runs
//   tests/support/mcp-conformance-client.mjs against it (an Agent with the
//   server in tools().mcpServers, one prompt whose scripted model calls the
//   scenario's tool): initialize, tools_call and sse-retry (a tool call's
//   stream closed before its response, resumed by GET with Last-Event-ID
//   after the stream's retry:), one at a time: sse-retry checks the
//   reconnection comes 450 to 700 ms after the close (retry: 500), so
//   scripts/test.sh runs this file in its deadline lane;
// - server mode: the suite's client against an Agent's POST /mcp served
//   over real HTTP on loopback: server-initialize, ping, tools-list and
//   dns-rebinding-protection (SHIITAKE_MCP_ALLOWED_HOSTS, loopback names by
//   default);
// with tests/mcp-conformance-baseline.yml naming every scenario left out,
// and why. The suite exits 1 on a failure not in the baseline, and on a
// baseline entry that now passes.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, test } from "node:test";
import { nodeListener, openNodeShiitake } from "../../js/node.mjs";

const T = { timeout: 120_000 };
const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const SUITE = path.join(ROOT, "node_modules/@modelcontextprotocol/conformance/dist/index.js");
const CLIENT = "node tests/support/mcp-conformance-client.mjs";
const BASELINE = path.join(ROOT, "tests/mcp-conformance-baseline.yml");
const CLIENT_SCENARIOS = ["initialize", "tools_call", "sse-retry"];
const SERVER_SCENARIOS = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"];

const dir = mkdtempSync(path.join(tmpdir(), "shiitake-mcp-conformance-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Runs the suite's CLI: its exit code and output. */
async function conformance(...args) {
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [SUITE, ...args], {
      cwd: ROOT,
      timeout: 100_000,
      maxBuffer: 16 * 1024 * 1024,
    });
    return { code: 0, stdout };
  } catch (e) {
    if (e.code === undefined || typeof e.code !== "number") throw e;
    return { code: e.code, stdout: `${e.stdout}\n${e.stderr}` };
  }
}

/** The baseline's entries under `mode:` (the suite reads the same list). */
function baseline(mode) {
  const lines = readFileSync(BASELINE, "utf8").split("\n");
  const start = lines.indexOf(`${mode}:`);
  const out = [];
  for (const line of lines.slice(start + 1)) {
    if (/^\S/.test(line)) break;
    const entry = line.match(/^\s+- (\S+)$/);
    if (entry) out.push(entry[1]);
  }
  return out;
}

/** The scenarios the suite lists for `mode` ("client" | "server"). */
async function listed(mode) {
  const { stdout } = await conformance("list", `--${mode}`);
  return [...stdout.matchAll(/^\s+- (\S+)/gm)].map((m) => m[1]);
}

test("the baseline names every scenario left out, and none that runs", T, async () => {
  for (const [mode, runs] of [
    ["client", CLIENT_SCENARIOS],
    ["server", SERVER_SCENARIOS],
  ]) {
    const all = await listed(mode);
    const left = baseline(mode);
    for (const s of runs) assert.ok(all.includes(s) && !left.includes(s), `${mode} ${s}`);
    // Named in the file's comments: the server's pending scenarios (the
    // suite does not run them), and a client one that passes vacuously.
    const unlisted = all.filter((s) => !runs.includes(s) && !left.includes(s));
    const noted = mode === "server" ? ["server-sse-polling", "json-schema-2020-12"] : ["auth/resource-mismatch"];
    assert.deepEqual(unlisted.sort(), noted.sort(), `${mode}: scenarios neither run nor in the baseline`);
  }
});

for (const scenario of CLIENT_SCENARIOS) {
  test(`client scenario ${scenario}: our MCP client through the Node host`, T, async () => {
    const out = path.join(dir, `client-${scenario}`);
    const { code, stdout } = await conformance(
      "client",
      "--command",
      CLIENT,
      "--scenario",
      scenario,
      "--expected-failures",
      BASELINE,
      "-o",
      out,
    );
    assert.equal(code, 0, stdout);
    const [run] = readdirSync(out);
    const checks = JSON.parse(readFileSync(path.join(out, run, "checks.json"), "utf8"));
    const judged = checks.filter((c) => c.status !== "INFO");
    assert.ok(judged.length > 0, stdout);
    for (const c of judged) assert.equal(c.status, "SUCCESS", `${c.id}: ${c.errorMessage ?? ""}`);
    if (scenario === "sse-retry") {
      const ids = judged.map((c) => c.id).sort();
      assert.deepEqual(ids, ["client-sse-graceful-reconnect", "client-sse-last-event-id", "client-sse-retry-timing"]);
    }
  });
}

/** An Agent on the Node host, served over HTTP on loopback: its `/mcp` URL. */
async function serve(name, env = {}) {
  const host = await openNodeShiitake({
    path: path.join(dir, `${name}.db`),
    env: { SHIITAKE_MODEL: "openai/conformance", OPENAI_BASE_URL: "http://127.0.0.1:9", OPENAI_API_KEY: "sk-x", ...env },
  });
  const server = http.createServer(nodeListener(host.fetch));
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const close = async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await host.close();
  };
  return { url: `http://127.0.0.1:${server.address().port}/mcp`, host, close };
}

test("server scenarios: an Agent's POST /mcp", T, async () => {
  const agent = await serve("server");
  try {
    const { code, stdout } = await conformance("server", "--url", agent.url, "--expected-failures", BASELINE, "-o", path.join(dir, "server"));
    assert.equal(code, 0, stdout);
    for (const s of SERVER_SCENARIOS) assert.match(stdout, new RegExp(`✓ ${s}: [1-9]\\d* passed, 0 failed`), s);
  } finally {
    await agent.close();
  }
});

test("dns-rebinding-protection fails when SHIITAKE_MCP_ALLOWED_HOSTS lets the rebound name in", T, async () => {
  // What /mcp did before the allowlist: a request whose Host and Origin
  // both name the attacker was served.
  const agent = await serve("rebound", { SHIITAKE_MCP_ALLOWED_HOSTS: "evil.example.com,127.0.0.1" });
  try {
    const { code, stdout } = await conformance("server", "--url", agent.url, "--scenario", "dns-rebinding-protection", "-o", path.join(dir, "rebound"));
    assert.equal(code, 1, stdout);
    assert.match(stdout, /Expected HTTP 4xx for invalid Host\/Origin headers, got 200/);
  } finally {
    await agent.close();
  }
});

test("SHIITAKE_MCP_ALLOWED_HOSTS: a browser's request at another host is 403, a malformed setting 503", T, async () => {
  const ping = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" });
  const post = (host, url, origin) =>
    host.fetch(
      new Request(url, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...(origin ? { origin } : {}) },
        body: ping,
      }),
    );
  const listed = await serve("listed", { SHIITAKE_MCP_ALLOWED_HOSTS: "agents.example.com" });
  try {
    assert.equal((await post(listed.host, "https://agents.example.com/mcp", "https://agents.example.com")).status, 200);
    const refused = await post(listed.host, "http://localhost:8787/mcp", "http://localhost:8787");
    assert.equal(refused.status, 403);
    const body = await refused.json();
    assert.equal(body.error.code, -32600);
    assert.match(body.error.message, /host `localhost` is not one this server is reached at.*SHIITAKE_MCP_ALLOWED_HOSTS/);
    // No Origin (no browser): served at any host.
    assert.equal((await post(listed.host, "http://localhost:8787/mcp")).status, 200);
  } finally {
    await listed.close();
  }
  const malformed = await serve("malformed", { SHIITAKE_MCP_ALLOWED_HOSTS: "localhost:8787" });
  try {
    const res = await post(malformed.host, "http://localhost:8787/mcp");
    assert.equal(res.status, 503);
    const body = await res.json();
    assert.equal(body.error.code, "host_misconfigured");
    assert.match(body.error.message, /SHIITAKE_MCP_ALLOWED_HOSTS: `localhost:8787` is not a host name/);
  } finally {
    await malformed.close();
  }
});
