// What the two `execute` sandboxes share: the Worker Loader door
// (js/execute.mjs) and the embedded engine (js/sandbox/embedded.mjs) run the
// same guest API with the same checks. The code is normalised and the
// namespaces checked here; the guest's harness (the namespaces as callable
// proxies over one `host.call(path, argsJson)`, `env`, `forage`, the result's
// bounds) is one source text both splice the code into; the host re-checks
// the guest's reply here, whatever the guest did to its own globals.
import { parse } from "acorn";
import { TOOL_PAYLOAD_BYTES_MAX } from "../limits.mjs";

/** The largest result (JSON bytes) a run may hand back: the core's TOOL_PAYLOAD_BYTES_MAX. */
export const RESULT_MAX_BYTES = TOOL_PAYLOAD_BYTES_MAX;
// Room for the `{"result":...}` envelope around a result at the limit; guest
// error messages are cut well below the limit so they always fit. Both are
// the sandboxes' own bounds.
const REPLY_MARGIN = 1024;
// Characters of a guest error message kept (the rest becomes "…").
const ERROR_MAX_CHARS = 8192;
// Names the guest binds next to the namespaces.
const RESERVED = new Set(["env", "forage"]);

// Strict module mode, like the guest module the code ends up in, so strict-only
// errors (`with`, `let yield`, ...) are reported before anything runs.
const PARSE_OPTIONS = {
  ecmaVersion: "latest",
  sourceType: "module",
  allowAwaitOutsideFunction: true,
  allowReturnOutsideFunction: true,
};
const FENCE = /^\s*```(?:javascript|js)?[ \t]*\r?\n([\s\S]*?)```\s*$/;

/**
 * Turns model-written code into the body of an async function: strips a
 * markdown fence, calls a lone function expression, returns the last
 * expression. `{error: "SyntaxError: ..."}` when it does not parse.
 */
export function normalizeCode(code) {
  if (typeof code !== "string") return { error: "the code must be a string" };
  const source = code.match(FENCE)?.[1] ?? code;
  let program;
  try {
    program = parse(source, PARSE_OPTIONS);
  } catch (error) {
    return { error: `SyntaxError: ${error.message}` };
  }
  // Module syntax parses, but the code runs inside a function.
  const moduleItem = program.body.find((node) => /^(Import|Export)/.test(node.type));
  if (moduleItem) {
    return { error: "SyntaxError: import and export are not available: the code runs inside a function; use the namespaces in scope" };
  }
  const last = program.body.at(-1);
  if (last?.type !== "ExpressionStatement") return { body: source };
  const expr = last.expression;
  const text = source.slice(expr.start, expr.end);
  const lone = program.body.length === 1 && (expr.type === "ArrowFunctionExpression" || expr.type === "FunctionExpression");
  const replacement = lone ? `return await (${text})();` : `return (${text});`;
  return { body: source.slice(0, last.start) + replacement + source.slice(last.end) };
}

/** Why `namespaces` cannot be bound in the guest, or undefined when they can. */
export function refuseNamespaces(namespaces) {
  if (!Array.isArray(namespaces)) return "namespaces must be an array of identifiers";
  const seen = new Set();
  for (const name of namespaces) {
    // The regex keeps the name safe to splice into source; the parse refuses
    // reserved words; the globals check keeps e.g. `JSON` or `fetch` intact.
    let ok = typeof name === "string" && /^[A-Za-z_$][\w$]*$/.test(name) && !RESERVED.has(name) && !(name in globalThis);
    if (ok) {
      try {
        parse(`let ${name};`, PARSE_OPTIONS);
      } catch {
        ok = false;
      }
    }
    if (!ok) return `cannot bind the namespace ${JSON.stringify(name)}: not an identifier, or a reserved or global name`;
    if (seen.has(name)) return `the namespace ${JSON.stringify(name)} is listed twice`;
    seen.add(name);
  }
  return undefined;
}

/**
 * `{source}` of the guest harness for `code` and `namespaces`, or `{error}`
 * when the code does not parse or a namespace cannot be bound. The source
 * declares `run(host)`: it resolves to the reply, `{"result"}` or `{"error"}`
 * JSON text; `host.call(path, argsJson)` resolves to the dispatch's JSON text.
 * Plain script text (no imports): each sandbox wraps it in its own entry.
 */
export function guestHarness(code, namespaces) {
  const normal = normalizeCode(code);
  if (normal.error !== undefined) return { error: normal.error };
  const refusal = refuseNamespaces(namespaces);
  if (refusal) return { error: refusal };
  return {
    source: `const MAX = ${RESULT_MAX_BYTES};
const NAMESPACES = ${JSON.stringify(namespaces)};

function message(error) {
  try {
    const text = error instanceof Error ? error.message : String(error);
    return text.length > ${ERROR_MAX_CHARS} ? text.slice(0, ${ERROR_MAX_CHARS}) + "…" : text;
  } catch {
    return "a value that cannot be shown was thrown";
  }
}

async function call(host, path, arg) {
  const reply = JSON.parse(await host.call(path, JSON.stringify(arg ?? {})));
  if (reply?.error !== undefined) throw new Error(reply.error);
  return reply?.result;
}

// Any property chain is callable; \`then\` stays undefined so that awaiting
// a namespace does not call a tool named "then".
function namespace(host, path) {
  return new Proxy(() => {}, {
    get: (_, key) => (typeof key === "string" && key !== "then" ? namespace(host, path + "." + key) : undefined),
    apply: (_, __, args) => call(host, path, args[0]),
  });
}

function scope(host) {
  const spaces = Object.fromEntries(NAMESPACES.map((name) => [name, namespace(host, name)]));
  const forage = Object.freeze({
    search: (query) => call(host, "forage.search", { query }),
    describe: (path) => call(host, "forage.describe", { path }),
  });
  return { ...spaces, env: Object.freeze({ ...spaces }), forage };
}

// UTF-8 bytes of a string, counted here (not every engine has TextEncoder)
// by the engine's regex code, not a loop in the guest's CPU budget: each
// unit is a byte, a two-byte character one more, a three-byte one (or a lone
// surrogate) two more, a surrogate pair two more over its two units.
function utf8Bytes(text) {
  const removed = (pattern) => text.length - text.replace(pattern, "").length;
  return text.length + removed(/[\\u0080-\\u07ff]/g) + 2 * removed(/[\\u0800-\\uffff]/gu) + removed(/[\\u{10000}-\\u{10ffff}]/gu);
}

async function settle(run) {
  let json;
  try {
    const value = await run();
    try {
      json = JSON.stringify(value) ?? "null";
    } catch (error) {
      return JSON.stringify({ error: "the result is not JSON: " + message(error) });
    }
  } catch (error) {
    return JSON.stringify({ error: message(error) });
  }
  const bytes = utf8Bytes(json);
  if (bytes > MAX) return JSON.stringify({ error: "the result is " + bytes + " bytes; at most " + MAX });
  return '{"result":' + json + "}";
}

function run(host) {
  return settle(guest(scope(host)));
}

// Parameters, not module names: a namespace called \`scope\` or \`call\`
// shadows nothing the harness uses, and the code's own declarations may
// shadow the namespaces.
function guest({ env, forage${namespaces.map((name) => `, ${name}`).join("")} }) {
  return async () => {
${normal.body}
  };
}
`,
  };
}

export function errorText(error) {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return "unknown error";
  }
}

/**
 * The host's answer to the guest's `host.call(path, argsJson)`: the
 * dispatch's JSON text, or `{"error"}` when the run is over (`dispatch`
 * undefined), the arguments are not two strings or the dispatch fails.
 */
export async function answerCall(dispatch, path, argsJson) {
  if (!dispatch) return JSON.stringify({ error: "the run is over" });
  if (typeof path !== "string" || typeof argsJson !== "string") {
    return JSON.stringify({ error: "call(path, argsJson) takes two strings" });
  }
  try {
    const reply = await dispatch(path, argsJson);
    return typeof reply === "string" ? reply : JSON.stringify({ error: `${path} answered no JSON text` });
  } catch (error) {
    return JSON.stringify({ error: errorText(error) });
  }
}

/** The guest's reply as `{"result"}` or `{"error"}` JSON text, whatever the guest sent. */
export function checkReply(reply) {
  if (typeof reply !== "string") return JSON.stringify({ error: "the sandbox gave no reply" });
  const bytes = new TextEncoder().encode(reply).length;
  if (bytes > RESULT_MAX_BYTES + REPLY_MARGIN) {
    return JSON.stringify({ error: `the result is ${bytes} bytes; at most ${RESULT_MAX_BYTES}` });
  }
  let parsed;
  try {
    parsed = JSON.parse(reply);
  } catch {
    parsed = undefined;
  }
  if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
    if (typeof parsed.error === "string") return JSON.stringify({ error: parsed.error });
    if (Object.hasOwn(parsed, "result")) return JSON.stringify({ result: parsed.result });
  }
  return JSON.stringify({ error: "the sandbox gave a malformed reply" });
}

/** `{"error": "aborted: <reason>"}`. */
export function aborted(signal) {
  return JSON.stringify({ error: `aborted: ${errorText(signal.reason)}` });
}

/**
 * Races `run` (resolving to reply text) against `signal`: an abort resolves
 * at once with {@link aborted}.
 */
export async function raceAbort(run, signal) {
  if (!signal) return run;
  let onAbort;
  const abort = new Promise((resolve) => {
    onAbort = () => resolve(aborted(signal));
    signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    return await Promise.race([run, abort]);
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}
