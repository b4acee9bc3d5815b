// The abuse battery through a Durable Object, on the sandbox the suite runs
// on (tests/e2e/helpers.mjs SANDBOX: the Worker Loader by default,
// `SHIITAKE_TEST_SANDBOX=embedded` for QuickJS in the object; the test
// command runs both). Each attack is one `execute` tool turn that ends with a
// tool error (or a clean answer, for the probes) and leaves the Agent
// serving the next turn. The engine-level battery with lowered bounds is
// tests/e2e/sandbox-embedded.test.mjs.
//
// On the loader, the endless loop and the memory bomb are left out: a local
// Worker Loader (Miniflare's workerd) enforces no CPU time or memory limit
// on a guest, so the loop would spin a workerd thread past the test (the
// tool deadline answers the turn but cannot stop the isolate) and the bomb
// would grow workerd until the machine's limit. Cloudflare ends both with
// its own per-isolate limits; the embedded sandbox ends both itself.
import assert from "node:assert/strict";
import { test } from "node:test";
import { SANDBOX, execute, uniq, useWorker } from "./helpers.mjs";

const h = useWorker({ fixture: "tools-worker", model: "echo" });
const T = { timeout: 30_000 };
const EMBEDDED = SANDBOX === "embedded";

/** One turn whose model calls `execute` with each code in turn: the tool messages, and how long it took. */
async function turn(name, ...codes) {
  const tag = uniq(name);
  h.model.scriptFor(tag, ...codes.map((code) => execute(code)), { text: "done" });
  const { a, sid } = await h.session();
  const started = Date.now();
  const settled = await a.settle(sid, "r1", `attack ${tag}`, { boundMs: 25_000 });
  const ms = Date.now() - started;
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  const tools = (await a.read(sid, { limit: 200 })).messages.filter((m) => m.role === "tool");
  return { tools, ms };
}

/** `code` ends as a tool error matching `pattern` within `withinMs`; then a new turn is served. */
async function refused(name, code, pattern, withinMs = 5_000) {
  const { tools, ms } = await turn(name, code);
  assert.equal(tools[0].isError, true, `expected a tool error, got ${tools[0].text.slice(0, 200)}`);
  assert.match(tools[0].text, pattern);
  assert.ok(ms < withinMs, `${name} took ${ms} ms, more than ${withinMs}`);
  await serves();
  return tools[0].text;
}

async function serves() {
  const { tools } = await turn("serves", "return 6 * 7");
  assert.equal(tools[0].text, "42");
}

test("an endless loop ends at the CPU budget (embedded; see the header for the loader)", { ...T, skip: !EMBEDDED && "a local Worker Loader has no CPU limit" }, async () => {
  // GUEST_CPU_MS_MAX (5 s); workerd's clock stands still while code runs,
  // so the interrupt count ends it: within 2x.
  await refused("loop", "for (;;) {}", /ran out of CPU time/, 12_000);
});

test("a memory bomb ends at the memory cap (embedded; see the header for the loader)", { ...T, skip: !EMBEDDED && "a local Worker Loader has no memory limit" }, async () => {
  await refused("bomb", "const a = []; for (;;) a.push(new Float64Array(1000))", /out of memory/, 12_000);
});

test("deep recursion is a tool error", T, async () => {
  await refused("recursion", "function f() { return f() + 1 } return f()", EMBEDDED ? /stack overflow/ : /call stack/i);
});

test("a huge string result is refused by size", T, async () => {
  await refused("huge", "return 'x'.repeat(300000)", /at most 262144/);
});

test("a promise that never settles is a tool error, not a hang", T, async () => {
  await refused("never", "await new Promise(() => {})", /hung|never settle|settle/);
});

test("a thrown non-Error value is shown as text", T, async () => {
  const text = await refused("non-error", "throw 42", /42/);
  assert.doesNotMatch(text, /sandbox failed/);
});

test("prototype pollution and globals left by one run are not seen by the next", T, async () => {
  const { tools } = await turn(
    "pollution",
    "Object.prototype.polluted = 1; Array.prototype.push = () => 'hijacked'; globalThis.leftover = 2; return 1",
    "return [typeof ({}).polluted, [].push(1), typeof globalThis.leftover]",
  );
  assert.deepEqual(JSON.parse(tools[1].text), ["undefined", 1, "undefined"]);
  await serves();
});

test("probing globalThis finds no host object: no bindings, process, require or the host's modules", T, async () => {
  const { tools } = await turn(
    "probe",
    "return { names: Object.getOwnPropertyNames(globalThis).filter((n) => ['process', 'require', 'Buffer', 'LOADER', 'SHIITAKE', 'SHIITAKE_TOKEN', 'OPENAI_API_KEY', 'Deno', 'Bun'].includes(n)), env: Object.keys(env).sort() }",
  );
  assert.ok(!tools[0].isError, tools[0].text);
  const { names, env } = JSON.parse(tools[0].text);
  assert.deepEqual(names, []);
  for (const key of env) assert.doesNotMatch(key, /TOKEN|KEY|LOADER|SHIITAKE/);
});

test("eval and Function of new code are refused", T, async () => {
  await refused("eval", "return eval('1 + 1')", /code generation|not allowed|disallowed/i);
  await refused("function", "return new Function('return 1')()", /code generation|not allowed|disallowed/i);
});

test("the network is out of reach", T, async () => {
  const text = await refused("network", `return await (await fetch(${JSON.stringify(h.model.url)})).text()`, /./);
  assert.doesNotMatch(text, /choices|model/);
});
