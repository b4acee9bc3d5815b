// The JS side keeps copies of the core's bounds (src/limits.rs): constants
// the shim applies before calling into wasm, and figures the type
// declarations state to users. Each copy must equal its Rust constant.
// Bounds the JS side alone enforces (read retries, watch resumes, the
// client's body caps, the agentId length, the demo notebook) have no Rust
// counterpart and are not listed.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";
import { ROOT } from "./helpers.mjs";

/** `NAME -> value` of every `const NAME: type = <integer>;` (underscores allowed). */
function rustConstants(text) {
  const out = new Map();
  for (const [, name, value] of text.matchAll(/pub const ([A-Z0-9_]+): [a-z0-9]+ = ([0-9_]+);/g)) {
    out.set(name, Number(value.replaceAll("_", "")));
  }
  return out;
}

const rustLimits = async () => rustConstants(await readFile(path.join(ROOT, "src/limits.rs"), "utf8"));

/** `[file, JS constant, Rust constant]`: JS constants that copy a core bound. */
const CONSTANTS = [
  ["js/do.mjs", "MCP_RESPONSE_BYTES_MAX", "MCP_RESPONSE_BYTES_MAX"],
  ["js/do.mjs", "JSON_DEPTH_MAX", "JSON_DEPTH_MAX"],
  ["js/execute.mjs", "RESULT_MAX_BYTES", "TOOL_PAYLOAD_BYTES_MAX"],
  ["js/app.mjs", "DRAIN_BYTES_MAX", "BODY_BYTES_MAX"],
  ["bin/shiitake.mjs", "SETTLEMENT_WAIT_MS", "SETTLEMENT_TIMEOUT_MS_MAX"],
  ["bin/shiitake.mjs", "BRANCH_PAGE", "READ_PAGE_MESSAGES_MAX"],
  ["js/chat/app.mjs", "BRANCHES_PAGE", "READ_PAGE_MESSAGES_MAX"],
  ["js/client.mjs", "READ_PAGE_MESSAGES_MAX", "READ_PAGE_MESSAGES_MAX"],
  ["js/do.mjs", "FILE_BYTES_MAX", "FILE_BYTES_MAX"],
  ["js/do.mjs", "FLEET_BODY_BYTES_MAX", "FLEET_BODY_BYTES_MAX"],
  ["js/do.mjs", "FLEET_WAIT_TIMEOUT_MS_MAX", "FLEET_WAIT_TIMEOUT_MS_MAX"],
  ["js/do.mjs", "SETTLEMENT_TIMEOUT_MS_MAX", "SETTLEMENT_TIMEOUT_MS_MAX"],
  ["js/do.mjs", "MODELS_OFFERED_MAX", "MODELS_OFFERED_MAX"],
  ["js/do.mjs", "MODEL_LAST_SWITCH_TIMEOUT_MS", "MODEL_LAST_SWITCH_TIMEOUT_MS"],
  ["js/files.mjs", "FILE_BYTES_MAX", "FILE_BYTES_MAX"],
  ["js/files.mjs", "LIST_ENTRIES_MAX", "LIST_ENTRIES_MAX"],
  ["js/computer.mjs", "COMPUTER_RESPONSE_BYTES_MAX", "COMPUTER_RESPONSE_BYTES_MAX"],
  ["js/computer.mjs", "SECRET_TOKEN_BYTES_MIN", "SECRET_FRAGMENT_BYTES_MIN"],
  ["js/extensions.mjs", "EXTENSIONS_MAX", "EXTENSIONS_MAX"],
  ["js/extensions.mjs", "EXTENSION_COLLECTIONS_MAX", "EXTENSION_COLLECTIONS_MAX"],
  ["js/extensions.mjs", "EXTENSION_COMMANDS_MAX", "EXTENSION_COMMANDS_MAX"],
  ["js/extensions.mjs", "EXTENSION_STATE_VERSION_MAX", "EXTENSION_STATE_VERSION_MAX"],
  ["js/extensions.mjs", "EXTENSION_KEY_BYTES_MAX", "EXTENSION_KEY_BYTES_MAX"],
  ["js/extensions.mjs", "EXTENSION_SEND_TEXT_BYTES_MAX", "TEXT_BYTES_MAX"],
  ["js/extensions.mjs", "EXTENSION_ERROR_MAX", "EXTENSION_STOP_REASON_BYTES_MAX"],
  ["js/extensions.mjs", "ATTENTION_SUMMARY_CHARS_MAX", "ATTENTION_SUMMARY_CHARS_MAX"],
  ["js/extensions.mjs", "ATTENTION_ID_BYTES_MAX", "ATTENTION_ID_BYTES_MAX"],
  ["js/extensions.mjs", "ATTENTION_KIND_BYTES_MAX", "ATTENTION_KIND_BYTES_MAX"],
  ["js/client-entry.mjs", "CLIENT_CHIPS_MAX", "CLIENT_CHIPS_MAX"],
  ["js/client-entry.mjs", "CLIENT_PANEL_ROWS_MAX", "CLIENT_PANEL_ROWS_MAX"],
  ["js/client-entry.mjs", "CLIENT_TIMELINE_CELLS_MAX", "CLIENT_TIMELINE_CELLS_MAX"],
  ["js/client-entry.mjs", "CLIENT_ROWS_MAX", "CLIENT_ROWS_MAX"],
  ["js/client-entry.mjs", "CLIENT_LABEL_CHARS_MAX", "CLIENT_LABEL_CHARS_MAX"],
];

test("the shim's copies of core bounds equal src/limits.rs", async () => {
  const rust = await rustLimits();
  for (const [file, name, rustName] of CONSTANTS) {
    const js = await readFile(path.join(ROOT, file), "utf8");
    const m = js.match(new RegExp(`^(?:export )?const ${name} = ([0-9_]+);`, "m"));
    assert.ok(m, `${file} defines ${name}`);
    assert.ok(rust.has(rustName), `src/limits.rs defines ${rustName}`);
    assert.equal(Number(m[1].replaceAll("_", "")), rust.get(rustName), `${file} ${name} = ${rustName}`);
  }
});

/**
 * `[file, text, Rust constants]`: figures the type declarations state. In
 * `text` each `#` is a figure (digits, commas allowed, optionally `KiB`), one
 * per constant in order; whitespace matches any whitespace, and doc-comment
 * line breaks (`\n *`) are read as a space.
 */
const DOCUMENTED = [
  ["js/app.d.ts", "at most # bytes, else the Agent answers 400 `invalid_meta`", ["META_BYTES_MAX"]],
  ["js/client.d.ts", "/** 1..# bytes. */ id: string;", ["TOOL_CALL_ID_BYTES_MAX"]],
  ["js/client.d.ts", "a tool step (at most #). */", ["TOOL_CALLS_PER_STEP_MAX"]],
  ["js/client.d.ts", "before?: string | null; /** 1..# (default #). */", ["READ_PAGE_MESSAGES_MAX", "PAGE_LIMIT_DEFAULT"]],
  ["js/client.d.ts", "ListSessionsOptions extends CallOptions { /** 1..# (default #). */", ["LIST_PAGE_SESSIONS_MAX", "PAGE_LIMIT_DEFAULT"]],
  ["js/client.d.ts", "InboxOptions extends CallOptions { /** 1..# (default #). */", ["INBOX_PAGE_SESSIONS_MAX", "PAGE_LIMIT_DEFAULT"]],
  ["js/client.d.ts", "The newest open items (at most #)", ["INBOX_ATTENTION_PER_ROW_MAX"]],
  ["js/client.d.ts", "/** At most # characters. */ summary: string;", ["ATTENTION_SUMMARY_CHARS_MAX"]],
  ["js/client.d.ts", "a longer wait than # is clamped to #.", ["SETTLEMENT_TIMEOUT_MS_MAX", "SETTLEMENT_TIMEOUT_MS_MAX"]],
  ["js/do.d.ts", "At most # modules;", ["MODULES_PER_AGENT_MAX"]],
  ["js/do.d.ts", "The directory holds at most # Agents; names are at most # characters; a list page holds at most # Agents (default #).", ["DIRECTORY_AGENTS_MAX", "AGENT_NAME_CHARS_MAX", "DIRECTORY_PAGE_MAX", "DIRECTORY_PAGE_DEFAULT"]],
  ["js/do.d.ts", "MCP servers (at most #)", ["MCP_SERVERS_MAX"]],
  ["js/do.d.ts", "and about # ms when no browser is connected", ["UI_NO_BROWSER_MS"]],
  ["js/do.d.ts", "each MCP server, at most and by default # ms.", ["MCP_CONNECT_TIMEOUT_MS"]],
  ["js/do.d.ts", "1000 to #, default # ms.", ["MCP_RETRY_MS_MAX", "MCP_RETRY_MS"]],
  ["js/do.d.ts", "Dot-separated identifiers, at most # bytes.", ["MODULE_ID_BYTES_MAX"]],
  ["js/do.d.ts", "/** At most #. */ operations: ToolOperation[];", ["OPERATIONS_PER_MODULE_MAX"]],
  ["js/do.d.ts", "At most # bytes are kept.", ["OPERATION_DESCRIPTION_BYTES_MAX"]],
  ["js/do.d.ts", "Returns JSON (at most #, # levels).", ["TOOL_PAYLOAD_BYTES_MAX", "JSON_DEPTH_MAX"]],
  ["js/do.d.ts", "the oldest undelivered entries (at most # a call, # calls a pass,", ["HOST_DELIVERY_BATCH_MAX", "HOST_PASS_BATCHES_MAX"]],
  ["js/do.d.ts", "The first retry's delay: # to # ms, default #.", ["HOST_RETRY_MS_MIN", "HOST_RETRY_MS_MAX", "RETRY_BASE_MS_DEFAULT"]],
  ["js/do.d.ts", "The retry delay's cap: retryBaseMs to # ms, default #", ["HOST_RETRY_MS_MAX", "RETRY_MAX_MS_DEFAULT"]],
  ["js/do.d.ts", "Wall time of one pass: # to # ms (the default).", ["HOST_PASS_TIMEOUT_MS_MIN", "HOST_PASS_TIMEOUT_MS"]],
  ["js/do.d.ts", "at most one per # ms per call (the newest report", ["TOOL_PROGRESS_INTERVAL_MS"]],
  ["js/do.d.ts", "for data that is not JSON or over # bytes of it.", ["TOOL_PROGRESS_BYTES_MAX"]],
  ["js/do.d.ts", "At most # per result and # bytes of base64 in all", ["TOOL_RESULT_IMAGES_MAX", "TOOL_RESULT_IMAGE_BYTES_MAX"]],
  ["js/client.d.ts", "(at most one per # ms per call, the newest kept in between)", ["TOOL_PROGRESS_INTERVAL_MS"]],
  ["js/client.d.ts", "the tool's report (at most # bytes of JSON)", ["TOOL_PROGRESS_BYTES_MAX"]],
  ["js/client.d.ts", "the images the tool returned to the model (at most #)", ["TOOL_RESULT_IMAGES_MAX"]],
  ["js/execute.d.ts", "a run hands back (#). */", ["TOOL_PAYLOAD_BYTES_MAX"]],
  ["js/computer.d.ts", "Bytes of one response body the transport reads (#);", ["COMPUTER_RESPONSE_BYTES_MAX"]],
  ["js/computer.d.ts", "whole and by each token of at least # bytes; in a body it hands back, those of at least # bytes", ["SECRET_FRAGMENT_BYTES_MIN", "SECRET_FRAGMENT_BYTES_MIN"]],
];

/** A figure as written: `262,144`, `256 KiB`. */
function figure(text) {
  const [, digits, unit] = text.match(/^([0-9][0-9,]*)( KiB)?$/);
  return Number(digits.replaceAll(",", "")) * (unit ? 1024 : 1);
}

test("the figures the type declarations state equal src/limits.rs", async () => {
  const rust = await rustLimits();
  for (const [file, text, names] of DOCUMENTED) {
    const source = (await readFile(path.join(ROOT, file), "utf8")).replace(/\n\s*\* ?/g, " ");
    const pattern = text
      .split("#")
      .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/\s+/g, "\\s+"))
      .join("([0-9][0-9,]*(?: KiB)?)");
    const m = source.match(new RegExp(pattern));
    assert.ok(m, `${file} states ${JSON.stringify(text)}`);
    for (const [i, name] of names.entries()) {
      assert.ok(rust.has(name), `src/limits.rs defines ${name}`);
      assert.equal(figure(m[i + 1]), rust.get(name), `${file}: ${JSON.stringify(text)}, figure ${i + 1} = ${name}`);
    }
  }
});
