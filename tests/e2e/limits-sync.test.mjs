// The JS side's bounds are the core's (src/limits.rs): js/limits.mjs is
// generated from it (scripts/gen-limits.mjs, run by scripts/build.sh) and
// every module imports from there, so no JS module keeps a copy. Figures
// the type declarations state to users are prose and checked here. Bounds
// the JS side alone enforces (read retries, watch resumes, the client's body
// caps, the agentId length, the demo notebook) have no Rust counterpart.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { test } from "node:test";
import { generateLimits, jsModules, LIMITS_JS, rustBounds } from "../../scripts/gen-limits.mjs";
import { ROOT } from "./helpers.mjs";

const rustLimits = async () => {
  const bounds = rustBounds(await readFile(path.join(ROOT, "src/limits.rs"), "utf8"));
  return new Map([...bounds].map(([name, { value }]) => [name, Number(value.replaceAll("_", ""))]));
};

test("js/limits.mjs is what scripts/gen-limits.mjs generates from src/limits.rs (run it, or scripts/build.sh)", async () => {
  assert.equal(await readFile(LIMITS_JS, "utf8"), await generateLimits());
});

test("js/limits.mjs holds each bound as src/limits.rs states it", async () => {
  const rust = await rustLimits();
  const js = await import(LIMITS_JS);
  assert.ok(Object.keys(js).length > 0);
  for (const [name, value] of Object.entries(js)) assert.equal(value, rust.get(name), `js/limits.mjs ${name}`);
});

/** `[file, JS constant, Rust constant]`: JS names for a core bound, each defined as the bound itself. */
const ALIASES = [
  ["js/sandbox/guest.mjs", "RESULT_MAX_BYTES", "TOOL_PAYLOAD_BYTES_MAX"],
  ["js/app.mjs", "DRAIN_BYTES_MAX", "BODY_BYTES_MAX"],
  ["bin/shiitake.mjs", "SETTLEMENT_WAIT_MS", "SETTLEMENT_TIMEOUT_MS_MAX"],
  ["bin/shiitake.mjs", "BRANCH_PAGE", "READ_PAGE_MESSAGES_MAX"],
  ["js/chat/app.mjs", "BRANCHES_PAGE", "READ_PAGE_MESSAGES_MAX"],
  ["js/computer.mjs", "SECRET_TOKEN_BYTES_MIN", "SECRET_FRAGMENT_BYTES_MIN"],
  ["js/extensions.mjs", "EXTENSION_SEND_TEXT_BYTES_MAX", "TEXT_BYTES_MAX"],
  ["js/extensions.mjs", "EXTENSION_ERROR_MAX", "EXTENSION_STOP_REASON_BYTES_MAX"],
];

test("no JS module keeps a copy of a core bound: each comes from js/limits.mjs", async () => {
  const rust = await rustLimits();
  for (const file of await jsModules()) {
    const text = await readFile(file, "utf8");
    for (const [, name] of text.matchAll(/^\s*(?:export )?const ([A-Z0-9_]+) = [0-9_]+;/gm)) {
      assert.ok(!rust.has(name), `${path.relative(ROOT, file)} copies ${name}: import it from js/limits.mjs`);
    }
  }
  for (const [file, name, rustName] of ALIASES) {
    const text = await readFile(path.join(ROOT, file), "utf8");
    assert.match(text, new RegExp(`^(?:export )?const ${name} = ${rustName};`, "m"), `${file} defines ${name} as ${rustName}`);
    assert.match(text, new RegExp(`import \\{[^}]*\\b${rustName}\\b[^}]*\\} from "[./]+(?:js/)?limits\\.mjs"`), `${file} imports ${rustName} from js/limits.mjs`);
  }
});

/**
 * `[file, text, Rust constants]`: figures the type declarations state. In
 * `text` each `#` is a figure (digits, commas allowed, optionally `KiB` or `MiB`), one
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
  ["js/do.d.ts", "each run at most # ms of CPU and a # stack, the engine's memory at most #", ["GUEST_CPU_MS_MAX", "GUEST_STACK_BYTES_MAX", "GUEST_MEMORY_BYTES_MAX"]],
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
  ["js/do.d.ts", "A token budget to set: `tokens` an integer 0..# (tokens", ["BUDGET_TOKENS_MAX"]],
  ["js/client.d.ts", "(at most one per # ms per call, the newest kept in between)", ["TOOL_PROGRESS_INTERVAL_MS"]],
  ["js/client.d.ts", "the tool's report (at most # bytes of JSON)", ["TOOL_PROGRESS_BYTES_MAX"]],
  ["js/client.d.ts", "the images the tool returned to the model (at most #)", ["TOOL_RESULT_IMAGES_MAX"]],
  ["js/execute.d.ts", "a run hands back (#). */", ["TOOL_PAYLOAD_BYTES_MAX"]],
  ["js/computer.d.ts", "Bytes of one response body the transport reads (#);", ["COMPUTER_RESPONSE_BYTES_MAX"]],
  ["js/computer.d.ts", "whole and by each token of at least # bytes; in a body it hands back, those of at least # bytes", ["SECRET_FRAGMENT_BYTES_MIN", "SECRET_FRAGMENT_BYTES_MIN"]],
];

/** A figure as written: `262,144`, `256 KiB`, `32 MiB`. */
function figure(text) {
  const [, digits, unit] = text.match(/^([0-9][0-9,]*)(?: (KiB|MiB))?$/);
  return Number(digits.replaceAll(",", "")) * ({ KiB: 1024, MiB: 1024 * 1024 }[unit] ?? 1);
}

test("the figures the type declarations state equal src/limits.rs", async () => {
  const rust = await rustLimits();
  for (const [file, text, names] of DOCUMENTED) {
    const source = (await readFile(path.join(ROOT, file), "utf8")).replace(/\n\s*\* ?/g, " ");
    const pattern = text
      .split("#")
      .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/\s+/g, "\\s+"))
      .join("([0-9][0-9,]*(?: KiB| MiB)?)");
    const m = source.match(new RegExp(pattern));
    assert.ok(m, `${file} states ${JSON.stringify(text)}`);
    for (const [i, name] of names.entries()) {
      assert.ok(rust.has(name), `src/limits.rs defines ${name}`);
      assert.equal(figure(m[i + 1]), rust.get(name), `${file}: ${JSON.stringify(text)}, figure ${i + 1} = ${name}`);
    }
  }
});
