#!/usr/bin/env node
// The client command for the official MCP conformance suite
// (`@modelcontextprotocol/conformance client --command "node <this>"`): the
// suite starts its test server for one scenario, then runs this with the
// server's URL as the last argument and the scenario's name in
// MCP_CONFORMANCE_SCENARIO.
//
// It runs OUR MCP client as a host runs it: a Node host (js/node.mjs, the
// real wasm) whose Agent has the server in `tools().mcpServers` (direct
// tools), and one prompt in a new Session. The servers connect at the
// Session's first turn (initialize, initialized, tools/list); the scripted
// model (tests/support/model-server.mjs) then calls the scenario's tool, if
// it names one, and answers. Exit 0 when the turn completed (and the tool
// call, if any, succeeded); the transcript goes to stdout for the suite's
// results.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { openNodeShiitake } from "../../js/node.mjs";
import { startModelServer } from "./model-server.mjs";

/** The tool each scenario asks a client to call, with its arguments. */
const TOOLS = {
  tools_call: { name: "add_numbers", arguments: { a: 2, b: 3 } },
  "sse-retry": { name: "test_reconnection", arguments: {} },
  "elicitation-sep1034-client-defaults": { name: "test_client_elicitation_defaults", arguments: {} },
};

const url = process.argv.at(-1);
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? "";
if (!/^https?:\/\//.test(url ?? "")) {
  console.error("usage: mcp-conformance-client.mjs <server-url> (MCP_CONFORMANCE_SCENARIO names the scenario)");
  process.exit(2);
}

const dir = mkdtempSync(path.join(tmpdir(), "shiitake-mcp-conformance-"));
const model = await startModelServer({ fallback: { text: "done" } });
let host;
let ok = false;
try {
  const tool = TOOLS[scenario];
  model.script(...(tool ? [{ toolCalls: [tool] }, { text: "done" }] : [{ text: "done" }]));
  host = await openNodeShiitake({
    path: path.join(dir, "agent.db"),
    // A tool call the server never answers ends in 10 s (the suite's
    // client timeout is 30 s).
    env: {
      SHIITAKE_MODEL: "openai/conformance",
      OPENAI_BASE_URL: model.url,
      OPENAI_API_KEY: "sk-conformance",
      SHIITAKE_TOOL_TIMEOUT_MS: "10000",
    },
    tools: { modules: [], mcpServers: [{ name: "conformance", url, direct: true }] },
  });
  const api = async (method, rel, body) => {
    const res = await host.fetch(
      new Request(`http://node.test${rel}`, {
        method,
        headers: body === undefined ? {} : { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
    );
    const text = await res.text();
    return text ? JSON.parse(text) : undefined;
  };
  await api("POST", "/sessions", { sessionId: "conformance" });
  const admitted = await api("POST", "/sessions/conformance/commands", {
    type: "prompt",
    requestId: "conformance",
    text: `conformance scenario ${scenario}`,
  });
  const settled = await api("GET", `/sessions/conformance/settlement?commandId=${admitted.commandId}&timeoutMs=20000`);
  const messages = (await api("GET", "/sessions/conformance")).messages;
  console.log(JSON.stringify({ scenario, settled, messages }, null, 2));
  const toolMessage = messages.find((m) => m.role === "tool");
  ok = settled?.terminal === "completed" && (!tool || (toolMessage !== undefined && toolMessage.isError !== true));
} catch (e) {
  console.error(e?.stack ?? String(e));
} finally {
  await host?.close();
  await model.close();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(ok ? 0 : 1);
