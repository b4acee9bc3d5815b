// `shiitake chat` (bin/shiitake.mjs) used as a person would: the demo
// Worker served by Miniflare on a real port (remote mode) or an Agent in a
// SQLite file (`--local`), the scripted model server answering over the
// OpenAI wire format. The chat runs in a detached tmux session, driven with
// `send-keys` and read with `capture-pane` (and the terminal's modes are
// checked after it exits: no raw mode left behind); `--prompt` runs as a
// child process whose stdout and exit status are checked. A prompt whose
// answer is lost (tests/support/lossy-proxy.mjs between the client and the
// service) is recovered with withdraw, never sent twice. Branches: /edit,
// /branches, /select, /retry, /history with the context the scripted model
// server got; /compact and /summary (skipped, saying why, where the service
// has no `compact` command); /usage against the usage ledger and the budget
// routes, and a turn a budget pauses, then raised (a service of its own).
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { once as once_ } from "node:events";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { Miniflare } from "miniflare";
import { startLossyProxy } from "../support/lossy-proxy.mjs";
import { startModelServer } from "../support/model-server.mjs";
import { DEMO_SCRIPT, MODEL_API_KEY, ROOT, TOKEN, clearOfMidnight, execute, uniq, workerOptions } from "./helpers.mjs";

const BIN = path.join(ROOT, "bin/shiitake.mjs");
const PANIC_MARKER = "CLI-TRAP-HERE";
const ATTEMPTS_MAX = 2;
const T = { timeout: 60_000 };
/** A tmux server of this file's own, so the user's sessions are never touched. */
const SOCKET = `shiitake-chat-test-${process.pid}`;
/** Past the CLI's window in which a second Ctrl-C quits. */
const QUIT_WINDOW_MS_PLUS = 2100;
const dir = mkdtempSync(path.join(tmpdir(), "shiitake-chat-"));

let mf;
let origin;
let model;
/** The environment a local (`--local`) Agent takes its model from. */
let localEnv;

before(async () => {
  assert.ok(existsSync(DEMO_SCRIPT), `${path.relative(ROOT, DEMO_SCRIPT)} is missing: run \`bash scripts/build.sh\` first`);
  model = await startModelServer({ fallback: "echo" });
  localEnv = { SHIITAKE_MODEL: "openai/scripted-cli", OPENAI_BASE_URL: model.url, OPENAI_API_KEY: MODEL_API_KEY };
  mf = new Miniflare({
    // The test build's panic marker: a turn whose every answer panics the
    // runtime settles `interrupted` at the attempt limit (exit 4).
    ...workerOptions(DEMO_SCRIPT, undefined, {
      ...localEnv,
      SHIITAKE_RETRY_BASE_MS: "50",
      SHIITAKE_RETRY_MAX_MS: "200",
      SHIITAKE_FAULT_PANIC_MARKER: PANIC_MARKER,
      SHIITAKE_ATTEMPTS_MAX: String(ATTEMPTS_MAX),
    }),
    host: "127.0.0.1",
    port: 0,
  });
  origin = (await mf.ready).origin;
  // The server would exit with its last session (racing the next test's start).
  tmux("new-session", "-d", "-s", "keep", "sleep 3600");
});

after(async () => {
  try {
    execFileSync("tmux", ["-L", SOCKET, "kill-server"], { stdio: "ignore" });
  } catch {
    // no session was left
  }
  await mf?.dispose();
  await model?.close();
  rmSync(dir, { recursive: true, force: true });
});

const quote = (s) => `'${String(s).replaceAll("'", "'\\''")}'`;
const tmux = (...args) => execFileSync("tmux", ["-L", SOCKET, ...args], { encoding: "utf8" });
/** `t` as a RegExp source (the tags hold brackets). */
const esc = (t) => t.replace(/[[\]]/g, "\\$&");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Starts `shiitake chat <args>` in a detached 120x40 tmux session; its exit
 * status lands in a file (`exitStatus()`), and the terminal's modes after
 * it (`stty -a`) in another (`terminalModes()`).
 */
function chat(name, args, env = {}) {
  const status = path.join(dir, `${name}.status`);
  const modes = path.join(dir, `${name}.stty`);
  const vars = Object.entries({ SHIITAKE_TOKEN: "", ...env }).map(([k, v]) => `${k}=${quote(v)}`);
  const command = `cd ${quote(ROOT)} && env ${vars.join(" ")} ${quote(process.execPath)} ${quote(BIN)} chat ${args.map(quote).join(" ")}; code=$?; stty -a > ${quote(modes)}; echo $code > ${quote(status)}; sleep 600`;
  tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", command);
  const screen = () => tmux("capture-pane", "-p", "-t", name);
  return {
    keys: (...keys) => tmux("send-keys", "-t", name, ...keys),
    line(text) {
      tmux("send-keys", "-t", name, "-l", text);
      tmux("send-keys", "-t", name, "Enter");
    },
    screen,
    /** Waits until the screen matches `re`; the screen. */
    async waitFor(re, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const s = screen();
        if (re.test(s)) return s;
        if (Date.now() > deadline) throw new Error(`the screen never matched ${re}:\n${s}`);
        await sleep(100);
      }
    },
    async exitStatus(timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      while (!existsSync(status) || readFileSync(status, "utf8") === "") {
        if (Date.now() > deadline) throw new Error(`the chat did not exit:\n${screen()}`);
        await sleep(100);
      }
      return Number(readFileSync(status, "utf8"));
    },
    terminalModes: () => readFileSync(modes, "utf8"),
    close: () => tmux("kill-session", "-t", name),
  };
}

/**
 * Runs `shiitake chat <args>` to its end: {code, stdout, stderr}. `input`:
 * its stdin (a pipe); `onStderr` sees stderr as it grows.
 */
function once(args, { env = {}, input, onStderr } = {}) {
  const stdin = input === undefined ? "ignore" : "pipe";
  const child = spawn(process.execPath, [BIN, "chat", ...args], { cwd: ROOT, env: { ...process.env, SHIITAKE_TOKEN: "", ...env }, stdio: [stdin, "pipe", "pipe"] });
  if (input !== undefined) child.stdin.end(input);
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => {
    stderr += d;
    onStderr?.(stderr, child);
  });
  return new Promise((resolve) => child.on("exit", (code) => resolve({ code, stdout, stderr })));
}

/** A loopback port nothing listens on (just freed). */
async function freePort() {
  const server = net.createServer().listen(0, "127.0.0.1");
  await once_(server, "listening");
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The flags of a fresh demo Agent (`agent`: its id) on the Miniflare service. */
const remote = (agent = `cli-${uniq("a").slice(1, -1)}`) => ["--url", origin, "--token", TOKEN, "--agent", agent];

test("remote chat: an answer streams, tool calls show, arrow-up recalls the last line, /sessions, /quit exits 0", T, async () => {
  const tag = uniq("stream");
  const chunks = ["alpha ", "beta ", "gamma ", "delta ", "epsilon ", "zeta"];
  model.scriptFor(tag, { chunks, chunkDelayMs: 300 });
  const agent = `cli-${uniq("a").slice(1, -1)}`;
  const c = chat("stream", remote(agent));
  try {
    const first = /session (ses_\w+) \(new\)/.exec(await c.waitFor(/session ses_\w+ \(new\)/))[1];
    c.line(`count ${tag}`);
    // Partial text before the end: the tokens arrive as the model sends them.
    const partial = await c.waitFor(/alpha beta/);
    assert.doesNotMatch(partial, /zeta/, "the whole answer was there at once: nothing streamed");
    await c.waitFor(/alpha beta gamma delta epsilon zeta\n\[completed\]/);

    const toolTag = uniq("tool");
    model.scriptFor(toolTag, execute("return await notes.add_note({ text: 'buy milk' });"), { text: "noted it" });
    c.line(`note ${toolTag}`);
    const s = await c.waitFor(/noted it\n\[completed\] 1 tool call/);
    assert.match(s, /\[tool\] execute \{"code":"return await notes\.add_note\(\{ text: 'buy milk' \}\);"\}/);
    // The tool's display data: the calls its code made.
    assert.match(s, /\[tool result\] execute \{"calls":\[\{"ok":true,"path":"notes\.add_note"\}\]/);

    c.keys("Up");
    await c.waitFor(new RegExp(`> note ${esc(toolTag)}\\s*$`));
    c.keys("Up");
    await c.waitFor(new RegExp(`> count ${esc(tag)}\\s*$`));
    c.keys("C-u");
    c.line("/sessions");
    await c.waitFor(new RegExp(`\\* ${first} {2}\\d{4}-`));
    // Another Session, then back: the first one's recent messages show.
    c.line("/new");
    const second = /> \/new\nsession (ses_\w+)\n/.exec(await c.waitFor(/> \/new\nsession ses_\w+\n/))[1];
    assert.notEqual(second, first);
    c.keys("C-l");
    c.line(`/switch ${first}`);
    await c.waitFor(new RegExp(`session ${first}\\n\\[user\\] count ${esc(tag)}\\n\\[assistant\\] alpha beta gamma delta epsilon zeta\\n[\\s\\S]*\\[assistant\\] noted it\\n`));
    c.line("/switch nope");
    await c.waitFor(/error: no such Session/);
    // Deleted elsewhere: its watch ends and the chat says so.
    const res = await fetch(`${origin}/agents/${agent}/sessions/${first}`, { method: "DELETE", headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(res.status, 204);
    await c.waitFor(new RegExp(`\\[the watch of ${first} ended; /switch ${first} rejoins it if it still exists\\]`));
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
    // Readline's raw mode is gone: the shell gets a cooked, echoing terminal.
    assert.match(c.terminalModes(), /(^|\s)icanon(\s|$)/);
    assert.match(c.terminalModes(), /(^|\s)echo(\s|$)/);
  } finally {
    c.close();
  }
});

test("remote chat: /usage prints this Session's calls by outcome and tokens and the Agent's today, as the usage ledger has them; /help lists it", T, async () => {
  const [other, flaky, plain] = [uniq("usage-other"), uniq("usage-flaky"), uniq("usage-plain")];
  // A failed attempt (retried) in the Session /usage is asked in.
  model.scriptFor(flaky, { status: 503 }, { text: "after the retry" });
  const agent = `cli-${uniq("a").slice(1, -1)}`;
  const c = chat("usage", remote(agent));
  try {
    await c.waitFor(/session ses_\w+ \(new\)/);
    c.line(`elsewhere ${other}`);
    await c.waitFor(/\[completed\]/);
    c.line("/new");
    const session = /> \/new\nsession (ses_\w+)\n/.exec(await c.waitFor(/> \/new\nsession ses_\w+\n/))[1];
    c.line(`flaky ${flaky}`);
    await c.waitFor(/after the retry\n\[completed\]/);
    c.line(`plain ${plain}`);
    await c.waitFor(new RegExp(`Echo: plain ${esc(plain)}\\n\\[completed\\]`));
    c.keys("C-l");
    c.line("/help");
    await c.waitFor(/\/usage {14}what the model calls cost/);
    c.keys("C-l");
    c.line("/usage");
    const s = await c.waitFor(/\[usage\] Agent today \((\d{4}-\d\d-\d\d) UTC\): [^\n]*\n {8}tokens: [^\n]* out\n/);
    const day = /\[usage\] Agent today \((\S+) UTC\)/.exec(s)[1];
    const ledger = async (query) => {
      const res = await fetch(`${origin}/agents/${agent}/usage?${query}`, { headers: { authorization: `Bearer ${TOKEN}` } });
      assert.equal(res.status, 200);
      return (await res.json()).totals;
    };
    const mine = await ledger(`sessionId=${session}`);
    const today = await ledger(`from=${Date.parse(`${day}T00:00:00Z`)}`);
    assert.deepEqual([mine.calls, mine.answered, mine.failed, mine.unknown], [3, 2, 1, 0], "the ledger: the failed attempt, its retry, the plain prompt");
    assert.deepEqual([today.calls, today.answered, today.failed], [4, 3, 1], "and the other Session's call");
    // No budget applies: each budget line says so.
    const lines = (what, f) => `[usage] ${what}: ${f.calls} calls (${f.answered} answered, ${f.failed} failed, ${f.unknown} unknown)\n        tokens: ${f.inputTokens} in · ${f.cacheReadTokens ?? 0} cached · ${f.outputTokens} out\n        budget: none\n`;
    const want = lines(`Session ${session}`, mine) + lines(`Agent today (${day} UTC)`, today);
    assert.ok(s.includes(want), `the screen:\n${s}\nwants:\n${want}`);
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
  }
});

test("remote chat: /usage prints the Session's budget and the Agent's daily one as their routes answer; a turn a budget pauses says so, and goes on once the budget is raised", T, async () => {
  await clearOfMidnight(15_000); // the Agent's day must not end mid-test
  // A service of its own: 5,000 tokens per Session, 1,000,000 a day for the Agent.
  const budgeted = new Miniflare({
    ...workerOptions(DEMO_SCRIPT, undefined, { ...localEnv, SHIITAKE_BUDGET_SESSION_TOKENS: "5000", SHIITAKE_BUDGET_DAILY_TOKENS: "1000000" }),
    host: "127.0.0.1",
    port: 0,
  });
  const base = (await budgeted.ready).origin;
  const agent = `cli-${uniq("a").slice(1, -1)}`;
  const route = async (p) => {
    const res = await fetch(`${base}/agents/${agent}${p}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(res.status, 200);
    return res.json();
  };
  const count = (n) => n.toLocaleString("en-US");
  const first = uniq("budget-first");
  // The first call's estimate (its prompt, the instructions and the demo's tools) fits; the answer spends
  // 3,040 tokens, and the next call's input alone is estimated at more than the 1,960 left (at least what
  // the first reported).
  model.scriptFor(first, { usage: { prompt_tokens: 3000, completion_tokens: 40 } });
  const c = chat("budget", ["--url", base, "--token", TOKEN, "--agent", agent]);
  try {
    const session = /session (ses_\w+) \(new\)/.exec(await c.waitFor(/session ses_\w+ \(new\)/))[1];
    c.line(`first ${first}`);
    await c.waitFor(/\[completed\]/);
    c.keys("C-l");
    c.line("/usage");
    let s = await c.waitFor(/\[usage\] Agent today [^\n]*\n[^\n]*\n {8}budget: [^\n]*UTC\n/);
    const mine = await route(`/sessions/${session}/budget`);
    const daily = await route("/budget");
    assert.deepEqual(mine, { tokens: 5000, set: false, spent: 3040 });
    assert.deepEqual([daily.tokens, daily.set, daily.spent], [1_000_000, false, 3040]);
    const resets = new Date(daily.resetsAt).toISOString().slice(0, 16).replace("T", " ");
    assert.match(s, new RegExp(`out\\n {8}budget: ${count(mine.tokens)} tokens · ${count(mine.spent)} spent\\n\\[usage\\] Agent today`));
    assert.ok(s.includes(`\n        budget: ${count(daily.tokens)} tokens a day · ${count(daily.spent)} spent · resets ${resets} UTC\n`), s);

    const second = uniq("budget-second");
    c.line(`second ${second}`);
    s = await c.waitFor(/\[paused\] [^\n]*\n/);
    const { paused } = await route(`/sessions/${session}/budget`);
    assert.deepEqual([paused.reason, paused.budget.scope, paused.budget.tokens, paused.budget.spent], ["budget_reached", "session", 5000, 3040]);
    assert.match(s, new RegExp(`\\[paused\\] the Session's token budget is reached \\(${count(paused.budget.spent)} of ${count(paused.budget.tokens)}\\): the turn waits until it is raised; /cancel ends it\\n`));
    assert.doesNotMatch(s, new RegExp(`Echo: second`));

    // The host raises it, through the Durable Object's own route: the turn goes on.
    const namespace = await budgeted.getDurableObjectNamespace("SHIITAKE");
    const res = await namespace.get(namespace.idFromName(agent)).fetch(`http://do/sessions/${session}/budget`, {
      method: "PUT",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ tokens: 100_000 }),
    });
    assert.equal(res.status, 200, await res.text());
    await c.waitFor(new RegExp(`\\[resumed\\] the budget covers the turn again\\n(.*\\n)*Echo: second ${esc(second)}\\n\\[completed\\]`));
    c.keys("C-l");
    c.line("/usage");
    s = await c.waitFor(/\[usage\] Agent today [^\n]*\n[^\n]*\n {8}budget: [^\n]*UTC\n/);
    const raised = await route(`/sessions/${session}/budget`);
    assert.deepEqual([raised.tokens, raised.set, raised.paused], [100_000, true, undefined]);
    assert.match(s, new RegExp(`out\\n {8}budget: 100,000 tokens · ${count(raised.spent)} spent\\n`));
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
    await budgeted.dispose();
  }
});

test("remote chat: a running tool shows, then its live counters, then its result", T, async () => {
  const tag = uniq("timer");
  model.scriptFor(tag, execute("return await timer.wait({ ms: 2500 });"), { text: "waited" });
  const c = chat("timer", remote());
  try {
    await c.waitFor(/session ses_\w+ \(new\)/);
    c.line(`wait ${tag}`);
    // Counters while it runs, before its result is in.
    const running = await c.waitFor(/\[tool progress\] execute waitedMs \d+ · ofMs 2500/);
    assert.doesNotMatch(running, /\[tool result\]/);
    const s = await c.waitFor(/waited\n\[completed\] 1 tool call/);
    assert.match(s, /\[tool running\] execute\n(\[tool progress\] [^\n]*\n)+\[tool result\] execute /);
    // Reports every 250 ms, printed at most once a second.
    const progress = [...s.matchAll(/\[tool progress\] execute waitedMs (\d+) · ofMs 2500/g)].map((m) => Number(m[1]));
    assert.ok(progress.length >= 2 && progress.length <= 4, `${progress.length} progress lines in 2.5 s:\n${s}`);
    assert.deepEqual(progress, [...progress].sort((a, b) => a - b));
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
  }
});

test("remote chat: /cancel cancels the queued prompt, Ctrl-C the running one, /abort both, Ctrl-C twice quits with 0", T, async () => {
  const held = uniq("held");
  const queued = uniq("queued");
  const again = uniq("again");
  model.scriptFor(held, { hang: true, chunks: ["thinking about it "] });
  model.scriptFor(again, { hang: true, chunks: ["still thinking "] });
  const c = chat("cancel", remote());
  try {
    await c.waitFor(/session ses_\w+ \(new\)/);
    c.line(`hold ${held}`);
    await c.waitFor(/thinking about it/);
    c.line(`later ${queued}`);
    // Typed while the answer streams: not echoed into it, shown as queued.
    await c.waitFor(new RegExp(`thinking about it *\\n\\[queued\\] later ${esc(queued)}\\n`));
    c.line("/cancel");
    // The queued prompt is the one cancelled; the running one goes on.
    await c.waitFor(new RegExp(`> /cancel\\n[\\s\\S]*cancelling later ${esc(queued)}`));
    await c.waitFor(new RegExp(`> /cancel\\n[\\s\\S]*\\[cancelled\\] later ${esc(queued)}`));
    assert.equal(model.requests(queued).length, 0, "the cancelled prompt reached the model");

    c.keys("C-c");
    await c.waitFor(new RegExp(`cancelling the running prompt[^\\n]*\\n(> )?\\[cancelled\\] hold ${esc(held)}`));

    // /abort: the running prompt and the queued one, in one write.
    const first = uniq("first");
    const second = uniq("second");
    model.scriptFor(first, { hang: true, chunks: ["working "] });
    c.line(`one ${first}`);
    await c.waitFor(/working/);
    c.line(`two ${second}`);
    await c.waitFor(new RegExp(`\\[queued\\] two ${esc(second)}`));
    c.line("/abort");
    await c.waitFor(/aborted 2 prompt\(s\)/);
    await c.waitFor(new RegExp(`\\[cancelled\\] one ${esc(first)}[\\s\\S]*\\[cancelled\\] two ${esc(second)}`));

    await sleep(QUIT_WINDOW_MS_PLUS);
    c.line(`again ${again}`);
    await c.waitFor(/still thinking/);
    c.keys("C-c");
    await c.waitFor(/still thinking[^\n]*\n\^C cancelling/);
    c.keys("C-c");
    assert.equal(await c.exitStatus(), 0);
    assert.match(c.terminalModes(), /(^|\s)icanon(\s|$)/);
  } finally {
    c.close();
  }
});

test("local chat (--local file): a prompt answered, /new, Ctrl-D; --session continues it, --prompt streams to a terminal", T, async () => {
  const file = path.join(dir, "local.db");
  const tag = uniq("local");
  model.scriptFor(tag, { chunks: ["from ", "the ", "file"], chunkDelayMs: 100 });
  const c = chat("local", ["--local", file], localEnv);
  let sessionId;
  try {
    sessionId = /session (ses_\w+) \(new\)/.exec(await c.waitFor(/session ses_\w+ \(new\)/))[1];
    c.line(`hi ${tag}`);
    await c.waitFor(/from the file\n\[completed\]/);
    c.line("/new");
    await c.waitFor(/\n> \/new\nsession ses_\w+\n/);
    c.keys("C-d");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
  }
  // The file holds the Session: --prompt continues it (the lease was
  // released), streaming to a terminal, the final text alone to a pipe.
  const slow = uniq("slow");
  model.scriptFor(slow, { chunks: ["tick ", "tock ", "done"], chunkDelayMs: 400 });
  const t = chat("local-once", ["--local", file, "--session", sessionId, "--prompt", `slowly ${slow}`], localEnv);
  try {
    const partial = await t.waitFor(/tick/);
    assert.doesNotMatch(partial, /done/, "nothing streamed to the terminal");
    await t.waitFor(/tick tock done\n\[completed\]/);
    assert.equal(await t.exitStatus(), 0);
  } finally {
    t.close();
  }
  const r = await once(["--local", file, "--session", sessionId, "--prompt", "and again"], { env: localEnv });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, "Echo: and again\n");
});

test("--prompt: the answer on stdout, exit 0 completed, 1 failed, 3 cancelled (Ctrl-C)", T, async () => {
  const ok = await once([...remote(), "--prompt", "hello there"]);
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal(ok.stdout, "Echo: hello there\n");
  assert.match(ok.stderr, /^session ses_\w+ \(new\)\n/);

  const bad = uniq("bad");
  model.scriptFor(bad, { status: 400 });
  const failed = await once([...remote(), "--prompt", `fail ${bad}`]);
  assert.equal(failed.code, 1, failed.stderr);
  assert.equal(failed.stdout, "");
  assert.match(failed.stderr, /\[failed\] \S/);

  const hang = uniq("hang");
  model.scriptFor(hang, { hang: true });
  let signalled = false;
  const cancelled = await once([...remote(), "--prompt", `wait ${hang}`], {
    onStderr(stderr, child) {
      if (signalled || !/session ses_/.test(stderr)) return;
      signalled = true;
      // Once the model call is running, as a person at the terminal would.
      const poll = setInterval(() => {
        if (model.requests(hang).length > 0) {
          clearInterval(poll);
          child.kill("SIGINT");
        }
      }, 50);
    },
  });
  assert.equal(cancelled.code, 3, cancelled.stderr);
  assert.equal(cancelled.stdout, "");
  assert.match(cancelled.stderr, /\[cancelled\]/);
});

test("--prompt: a turn interrupted at the attempt limit (the runtime reset under it each time) exits 4 and says why", T, async () => {
  const trap = uniq("trap");
  model.scriptFor(trap, ...Array.from({ length: ATTEMPTS_MAX }, () => ({ chunks: [`boom ${PANIC_MARKER}`] })));
  const interrupted = await once([...remote(), "--prompt", `trap ${trap}`]);
  assert.equal(interrupted.code, 4, interrupted.stderr);
  assert.match(interrupted.stderr, /\[interrupted\]/);
  assert.match(interrupted.stderr, /attempt limit 2 reached/);
  assert.equal(model.requests(trap).length, ATTEMPTS_MAX, "one model call per attempt");
});

test("lines piped in: each is a prompt, answered in order before the client leaves with 0", T, async () => {
  const r = await once(remote(), { input: "first line\n/sessions\nsecond line\n" });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^session (ses_\w+) \(new\)\n[\s\S]*Echo: first line\n\[completed\]\n[\s\S]*\* \1 {2}[\s\S]*Echo: second line\n\[completed\]\n$/);
});

test("errors: a bad flag exits 2; an unreachable service, a wrong token, an unknown Session exit 5 and say so", T, async () => {
  const flag = await once(["--colour"]);
  assert.equal(flag.code, 2);
  assert.match(flag.stderr, /Unknown option '--colour'/);
  const both = await once(["--local", "x.db", "--url", origin]);
  assert.equal(both.code, 2);
  assert.match(both.stderr, /--local .* no --url/);

  const port = await freePort();
  const closed = await once(["--url", `http://127.0.0.1:${port}`, "--prompt", "hi"]);
  assert.equal(closed.code, 5);
  assert.match(closed.stderr, new RegExp(`cannot reach http://127\\.0\\.0\\.1:${port}: .*ECONNREFUSED`));

  const token = await once(["--url", origin, "--token", "wrong", "--prompt", "hi"]);
  assert.equal(token.code, 5);
  assert.match(token.stderr, /refused the token \(401 unauthorized/);
  const noToken = await once(["--url", origin, "--prompt", "hi"]);
  assert.equal(noToken.code, 5);
  assert.match(noToken.stderr, /pass --token or set SHIITAKE_TOKEN/);

  const unknown = await once([...remote(), "--session", "nope", "--prompt", "hi"]);
  assert.equal(unknown.code, 5);
  assert.match(unknown.stderr, /no such Session/);
  assert.equal(unknown.stdout, "");
});

// ---- branches and compaction (docs/http.md "Branches", "Compaction") ----

/** `role:text` of each message a model request carried (the instructions left out). */
const seen = (record) => record.body.messages.filter((m) => m.role !== "system").map((m) => `${m.role}:${typeof m.content === "string" ? m.content : m.content.map((p) => p.text ?? "").join("")}`);

test("remote chat: /edit resends a message on a new branch (<2/2>), /branches and /select go back to the old one, /retry answers again beside the old answer", T, async () => {
  const tag = uniq("branch");
  const t = esc(tag);
  const agent = `cli-${uniq("a").slice(1, -1)}`;
  const c = chat("branches", remote(agent));
  try {
    const sessionId = /session (ses_\w+) \(new\)/.exec(await c.waitFor(/session ses_\w+ \(new\)/))[1];
    c.line(`one ${tag}`);
    await c.waitFor(new RegExp(`Echo: one ${t}\\n\\[completed\\]`));
    c.line(`two ${tag}`);
    await c.waitFor(new RegExp(`Echo: two ${t}\\n\\[completed\\]`));

    // /edit: the newest user message comes to the input line.
    c.line("/edit");
    await c.waitFor(new RegExp(`\\[editing #3\\] Enter sends it as a new branch in its place; an empty line drops the edit\\n> two ${t}\\s*$`));
    c.keys("C-u");
    c.line(`two, edited ${tag}`);
    await c.waitFor(new RegExp(`\\[branch\\] the Session is on another branch; its newest messages:\\n#1 \\[user\\] one ${t}\\n#2 \\[assistant\\] Echo: one ${t}\\n#5 \\[user\\] two, edited ${t} <2/2>\\n`));
    await c.waitFor(new RegExp(`Echo: two, edited ${t}\\n\\[completed\\]`));
    assert.deepEqual(seen(model.requests(`two, edited ${tag}`).at(-1)), [`user:one ${tag}`, `assistant:Echo: one ${tag}`, `user:two, edited ${tag}`]);

    c.keys("C-l");
    c.line("/branches");
    await c.waitFor(new RegExp(`alternatives to #5 \\(2\\):\\n  1\\. #3 \\[user\\] two ${t} <1/2>\\n\\* 2\\. #5 \\[user\\] two, edited ${t} <2/2>\\n`));
    c.line("/select 1");
    await c.waitFor(new RegExp(`> /select 1\\n[\\s\\S]*\\[branch\\] the Session is on another branch; its newest messages:\\n#1 \\[user\\] one ${t}\\n#2 \\[assistant\\] Echo: one ${t}\\n#3 \\[user\\] two ${t} <1/2>\\n#4 \\[assistant\\] Echo: two ${t}\\n`));
    const texts = async () => (await api("GET", `/agents/${agent}/sessions/${sessionId}`)).json.messages.map((m) => m.text);
    assert.deepEqual(await texts(), [`one ${tag}`, `Echo: one ${tag}`, `two ${tag}`, `Echo: two ${tag}`]);

    // /retry: a new answer to #3, streamed, then its place among the answers.
    c.keys("C-l");
    model.scriptFor(`two ${tag}`, { chunks: ["another ", "answer ", "to it"], chunkDelayMs: 100 });
    c.line("/retry");
    await c.waitFor(new RegExp(`> /retry\\n[\\s\\S]*\\[branch\\] the Session is on another branch; its newest messages:\\n#1 \\[user\\] one ${t}\\n#2 \\[assistant\\] Echo: one ${t}\\n#3 \\[user\\] two ${t} <1/2>\\n`));
    await c.waitFor(/another answer to it\n\[branch 2\/2\] #7 is one of 2: \/branches #7 lists them\n\[completed\]/);
    assert.deepEqual(seen(model.requests(`two ${tag}`).at(-1)), [`user:one ${tag}`, `assistant:Echo: one ${tag}`, `user:two ${tag}`]);
    assert.deepEqual(await texts(), [`one ${tag}`, `Echo: one ${tag}`, `two ${tag}`, "another answer to it"]);
    c.keys("C-l");
    c.line("/history 3");
    await c.waitFor(new RegExp(`\\(older messages: /history with a larger n\\)\\n#2 \\[assistant\\] Echo: one ${t}\\n#3 \\[user\\] two ${t} <1/2>\\n#7 \\[assistant\\] another answer to it <2/2>\\n`));
    c.line("/select 9");
    await c.waitFor(/usage: \/select <k>, k a number of the last \/branches list/);
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
  }
});

test("lines piped in: /retry and /edit settle like prompts before the next line, and the output ends with the last settlement", T, async () => {
  const tag = uniq("piped");
  const t = esc(tag);
  // The answers take a moment, so the branch's listing is read before them.
  model.scriptFor(`first ${tag}`, {}, { chunks: ["again ", "then"], chunkDelayMs: 150 });
  model.scriptFor(`changed ${tag}`, { chunks: ["changed ", "answer"], chunkDelayMs: 150 });
  const r = await once(remote(), { input: `first ${tag}\n/retry\n/edit #1 changed ${tag}\n` });
  assert.equal(r.code, 0, r.stderr);
  assert.match(
    r.stdout,
    new RegExp(
      `Echo: first ${t}\\n\\[completed\\]\\n\\[branch\\] [^\\n]*\\n#1 \\[user\\] first ${t}\\nagain then\\n\\[branch 2/2\\] #3 is one of 2: /branches #3 lists them\\n\\[completed\\]\\n` +
        `\\[branch\\] [^\\n]*\\n#4 \\[user\\] changed ${t} <2/2>\\nchanged answer\\n\\[completed\\]\\n$`,
    ),
  );
  assert.equal(model.requests(`first ${tag}`).length, 2, "the first answer and one regenerate");
});

test("piped lines: a branch change read after its turn already answered lists the answer once (its streamed tokens are not printed again)", T, async () => {
  const proxy = await startLossyProxy(origin);
  try {
    const tag = uniq("late-read");
    const t = esc(tag);
    const agent = `cli-${uniq("a").slice(1, -1)}`;
    model.scriptFor(`first ${tag}`, {}, { chunks: ["again ", "then"], chunkDelayMs: 50 });
    // The read the `branch` frame makes (the newest 6 messages) goes on only
    // once the regenerated answer is stored: it holds what the frames after
    // the `branch` frame bring.
    let sessionId;
    proxy.hold = (r) => {
      if (!(r.method === "GET" && /\/sessions\/ses_\w+\?limit=6$/.test(r.path))) return undefined;
      sessionId = /ses_\w+/.exec(r.path)[0];
      return (async () => {
        while ((await api("GET", `/agents/${agent}/sessions/${sessionId}`)).json.messages.at(-1).text !== "again then") await sleep(50);
      })();
    };
    const r = await once(["--url", proxy.url, "--token", TOKEN, "--agent", agent], { input: `first ${tag}\n/retry\n` });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`\\[completed\\]\\n\\[branch\\] [^\\n]*\\n#1 \\[user\\] first ${t}\\n#3 \\[assistant\\] again then <2/2>\\n\\[completed\\]\\n$`));
  } finally {
    await proxy.close();
  }
});

/** Whether the service has the `compact` command (the compaction server side, issue 35 item 3). */
async function compactSupported() {
  const agent = `cli-${uniq("probe").slice(1, -1)}`;
  const { json } = await api("POST", `/agents/${agent}/sessions`, {});
  return (await api("POST", `/agents/${agent}/sessions/${json.sessionId}/commands`, { type: "compact", requestId: "probe" })).status === 200;
}
const NO_COMPACT = "the service has no `compact` command: the compaction server side (docs/http.md \"Compaction\") is not in this build";

test("remote chat: /compact shows a marker 'N messages summarised'; /summary opens it to the summary and the messages it stands for [needs the compaction server side]", T, async (tc) => {
  if (!(await compactSupported())) return tc.skip(NO_COMPACT);
  const tag = uniq("compact");
  const t = esc(tag);
  const c = chat("compact", remote());
  try {
    await c.waitFor(/session ses_\w+ \(new\)/);
    c.line(`one ${tag}`);
    await c.waitFor(new RegExp(`Echo: one ${t}\\n\\[completed\\]`));
    c.line(`two ${tag}`);
    await c.waitFor(new RegExp(`Echo: two ${t}\\n\\[completed\\]`));
    model.scriptFor(tag, { text: `the summary ${tag}` });
    c.line("/compact keep the numbers");
    await c.waitFor(/\[compaction\] 4 messages summarised; \/summary shows them\n\[completed\]/);
    assert.match(JSON.stringify(model.requests(tag).at(-1).body), /keep the numbers/);
    c.keys("C-l");
    c.line("/summary");
    await c.waitFor(new RegExp(`\\[summary\\] #5 stands for 4 messages \\(command\\):\\n  the summary ${t}\\n\\[summarised\\]\\n  #1 \\[user\\] one ${t}\\n  #2 \\[assistant\\] Echo: one ${t}\\n  #3 \\[user\\] two ${t}\\n  #4 \\[assistant\\] Echo: two ${t}\\n`));
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
  }
});

// ---- uncertain sends (seed "Recover an uncertain send") ----

const isPrompt = (r, tag) => r.method === "POST" && r.path.endsWith("/commands") && r.body.includes(tag);
/** A JSON request to the service itself (not through the proxy). */
async function api(method, rel, body) {
  const res = await fetch(`${origin}${rel}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body && JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}
/** Waits until the Session is idle; its `user` messages and queued prompts whose text is `text`. */
async function copies(agent, sessionId, text) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const read = (await api("GET", `/agents/${agent}/sessions/${sessionId}?limit=200`)).json;
    if ((read.running === null && read.pending.length === 0) || Date.now() > deadline) {
      return [...read.messages.filter((m) => m.role === "user"), ...read.pending, ...(read.running ? [read.running] : [])].filter((m) => m.text === text);
    }
    await sleep(100);
  }
}

test("remote chat: an answer lost, then the service unreachable: the send is kept, withdraw learns it arrived ([sent]), and it ran once", T, async () => {
  const proxy = await startLossyProxy(origin);
  const agent = `cli-${uniq("a").slice(1, -1)}`;
  const tag = uniq("lost");
  const text = `once ${tag}`;
  let down = false;
  proxy.lose = (r) => {
    if (down && r.path.startsWith("/agents/")) return "request";
    if (!isPrompt(r, tag)) return undefined;
    // The prompt commits and its answer is lost; the service is then out of
    // reach (its watch cut too, so only withdraw can tell).
    down = true;
    proxy.cut(r.socket);
    return "answer";
  };
  const c = chat("lost", ["--url", proxy.url, "--token", TOKEN, "--agent", agent]);
  try {
    const sessionId = /session (ses_\w+) \(new\)/.exec(await c.waitFor(/session ses_\w+ \(new\)/))[1];
    c.line(text);
    await c.waitFor(new RegExp(`\\[unconfirmed\\] ${esc(text)} \\(no answer: `));
    // Recovery fails while the service is out of reach, and is retried.
    const deadline = Date.now() + 10_000;
    while (proxy.lost.filter((l) => l.path.endsWith("/withdraw")).length < 2) {
      assert.ok(Date.now() < deadline, "withdraw was not retried");
      await sleep(50);
    }
    down = false;
    const screen = await c.waitFor(new RegExp(`\\[sent\\] ${esc(text)} \\(cmd_\\w+\\)`));
    assert.doesNotMatch(screen, /\[not sent\]/);
    assert.ok(proxy.seen.some((r) => r.path.endsWith("/withdraw") && r.status === 200), "settled by withdraw");
    const found = await copies(agent, sessionId, text);
    assert.equal(found.length, 1, "the prompt is in the Session once");
    assert.equal(model.requests(tag).length, 1, "it ran once");
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
    await proxy.close();
  }
});

test("remote chat: a prompt that never reached the Session comes back to the input line once withdraw fenced it; Enter sends it anew", T, async () => {
  const proxy = await startLossyProxy(origin);
  const agent = `cli-${uniq("a").slice(1, -1)}`;
  const tag = uniq("fenced");
  const text = `never ${tag}`;
  proxy.lose = (r) => (isPrompt(r, tag) ? "request" : undefined);
  const c = chat("fenced", ["--url", proxy.url, "--token", TOKEN, "--agent", agent]);
  try {
    const sessionId = /session (ses_\w+) \(new\)/.exec(await c.waitFor(/session ses_\w+ \(new\)/))[1];
    c.line(text);
    // Restored as the line being typed, after the fence.
    await c.waitFor(new RegExp(`\\[unconfirmed\\] ${esc(text)}[^\\n]*\\n[\\s\\S]*\\[not sent\\] ${esc(text)}\\n> ${esc(text)}\\s*$`));
    assert.equal(proxy.seen.find((r) => r.path.endsWith("/withdraw"))?.status, 200, "after a withdraw answered");
    assert.equal((await copies(agent, sessionId, text)).length, 0);
    // The lost request arriving late is refused: the fence holds.
    const late = JSON.parse(proxy.lost[0].body);
    const replay = await api("POST", `/agents/${agent}/sessions/${sessionId}/commands`, late);
    assert.deepEqual([replay.status, replay.json.error.code], [409, "request_withdrawn"]);
    proxy.lose = () => undefined;
    c.keys("Enter");
    await c.waitFor(new RegExp(`Echo: ${esc(text)}\\n\\[completed\\]`));
    const found = await copies(agent, sessionId, text);
    assert.equal(found.length, 1);
    assert.notEqual(found[0].requestId, late.requestId, "sent again under a new requestId");
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
    await proxy.close();
  }
});

test("--prompt and piped lines: an answer lost is recovered (the answer printed, exit 0, run once); one still unconfirmed at exit is reported with its requestId", T, async () => {
  const proxy = await startLossyProxy(origin);
  try {
    const agent = `cli-${uniq("a").slice(1, -1)}`;
    const tag = uniq("once");
    const text = `lost answer ${tag}`;
    proxy.lose = (r) => (isPrompt(r, tag) ? "answer" : undefined);
    const r = await once(["--url", proxy.url, "--token", TOKEN, "--agent", agent, "--prompt", text]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `Echo: ${text}\n`);
    assert.ok(proxy.lost.length > 0, "the answer was lost");
    const sessionId = /session (ses_\w+) \(new\)/.exec(r.stderr)[1];
    assert.equal((await copies(agent, sessionId, text)).length, 1);
    // Piped lines alike: the lost one is recovered before the next is sent.
    const piped = `piped ${tag}`;
    const p = await once(["--url", proxy.url, "--token", TOKEN, "--agent", agent, "--session", sessionId], { input: `${piped}\nafter it\n` });
    assert.equal(p.code, 0, p.stderr);
    // Its receipt was lost: one notice says so, one says the Session has it.
    // They land anywhere around its answer (it streams while the client
    // asks the Session), but always in that order, before the next line.
    const notices = p.stdout.split("\n").filter((l) => /^\[(?:unconfirmed|sent)\]/.test(l));
    assert.equal(notices.length, 2, p.stdout);
    assert.match(notices[0], new RegExp(`^\\[unconfirmed\\] ${esc(piped)} `));
    assert.match(notices[1], new RegExp(`^\\[sent\\] ${esc(piped)} \\(cmd_\\w+\\)$`));
    const answers = p.stdout.split("\n").filter((l) => !notices.includes(l)).join("\n");
    assert.match(answers, new RegExp(`\\nEcho: ${esc(piped)}\\n\\[completed\\]\\nEcho: after it\\n\\[completed\\]\\n$`));
    assert.ok(p.stdout.indexOf(notices[1]) < p.stdout.indexOf("Echo: after it"), "recovered before the next line was sent");
    assert.equal((await copies(agent, sessionId, piped)).length, 1);

    // The service never comes back: two Ctrl-Cs leave, saying what is unknown.
    const gone = uniq("gone");
    let down = false;
    proxy.lose = (q) => {
      if (down && q.path.startsWith("/agents/")) return "request";
      if (!isPrompt(q, gone)) return undefined;
      down = true;
      proxy.cut(q.socket);
      return "answer";
    };
    let signalled = false;
    const left = await once(["--url", proxy.url, "--token", TOKEN, "--agent", agent, "--prompt", `left ${gone}`], {
      onStderr(stderr, child) {
        if (signalled || !/\[unconfirmed\]/.test(stderr)) return;
        signalled = true;
        child.kill("SIGINT");
        setTimeout(() => child.kill("SIGINT"), 200);
      },
    });
    assert.equal(left.code, 3, left.stderr);
    const [, sid, requestId] = /unconfirmed \(it may or may not have been admitted\): Session (ses_\w+), requestId ([\w-]+): left \S+/.exec(left.stderr) ?? [];
    assert.ok(requestId, left.stderr);
    const lost = JSON.parse(proxy.lost.find((l) => l.body.includes(gone)).body);
    assert.equal(requestId, lost.requestId, "the requestId the service admitted");
    assert.equal((await api("POST", `/agents/${agent}/sessions/${sid}/withdraw`, { requestId })).json.status, "accepted");
  } finally {
    await proxy.close();
  }
});

test("remote chat: at most 8 prompts wait for their outcome; a ninth is refused (arrow-up recalls it) and none is lost", T, async () => {
  const proxy = await startLossyProxy(origin);
  const agent = `cli-${uniq("a").slice(1, -1)}`;
  const tag = uniq("bound");
  let down = false;
  proxy.lose = (r) => (down && r.path.startsWith("/agents/") ? "request" : undefined);
  const c = chat("bound", ["--url", proxy.url, "--token", TOKEN, "--agent", agent]);
  try {
    const sessionId = /session (ses_\w+) \(new\)/.exec(await c.waitFor(/session ses_\w+ \(new\)/))[1];
    down = true;
    for (let i = 1; i <= 8; i++) {
      c.line(`p${i} ${tag}`);
      await c.waitFor(new RegExp(`\\[unconfirmed\\] p${i} ${esc(tag)} `));
    }
    c.line(`p9 ${tag}`);
    await c.waitFor(/error: 8 prompts are still unconfirmed; send this one once the service answers \(arrow-up recalls it\)/);
    down = false;
    // None reached the Session: each is settled by a withdraw that fences it.
    const deadline = Date.now() + 20_000;
    while (proxy.seen.filter((r) => r.path.endsWith("/withdraw") && r.status === 200).length < 8) {
      assert.ok(Date.now() < deadline, "recovery did not settle all eight");
      await sleep(50);
    }
    // One comes back to the input line, the others to the history.
    await c.waitFor(new RegExp(`\\[not sent\\] p\\d ${esc(tag)} \\(arrow-up recalls it\\)\\n[\\s\\S]*> p\\d ${esc(tag)}\\s*$`));
    for (let i = 1; i <= 9; i++) assert.equal((await copies(agent, sessionId, `p${i} ${tag}`)).length, 0);
    c.keys("C-u"); // a restored prompt is on the input line
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0, "nothing left unconfirmed");
  } finally {
    c.close();
    await proxy.close();
  }
});

test("remote chat: a /retry whose answer is lost, then the service unreachable, is kept and recovered by withdraw ([sent]), never sent again: one new answer", T, async () => {
  const proxy = await startLossyProxy(origin);
  const agent = `cli-${uniq("a").slice(1, -1)}`;
  const tag = uniq("lost-retry");
  let down = false;
  proxy.lose = (r) => {
    if (down && r.path.startsWith("/agents/")) return "request";
    if (!(r.method === "POST" && r.path.endsWith("/commands") && r.body.includes('"type":"retry"'))) return undefined;
    // The retry commits and its answer is lost; then the service is out of
    // reach (the watch cut too), so only withdraw can tell.
    down = true;
    proxy.cut(r.socket);
    return "answer";
  };
  const c = chat("lost-retry", ["--url", proxy.url, "--token", TOKEN, "--agent", agent]);
  try {
    const sessionId = /session (ses_\w+) \(new\)/.exec(await c.waitFor(/session ses_\w+ \(new\)/))[1];
    c.line(`ask ${tag}`);
    await c.waitFor(new RegExp(`Echo: ask ${esc(tag)}\\n\\[completed\\]`));
    model.scriptFor(`ask ${tag}`, { text: `again ${tag}` });
    c.line("/retry");
    await c.waitFor(/\[unconfirmed\] regenerate the answer to #1 \(no answer: /);
    const deadline = Date.now() + 10_000;
    while (proxy.lost.filter((l) => l.path.endsWith("/withdraw")).length < 1) {
      assert.ok(Date.now() < deadline, "withdraw was not tried");
      await sleep(50);
    }
    down = false;
    await c.waitFor(/\[sent\] regenerate the answer to #1 \(cmd_\w+\)/);
    assert.ok(proxy.seen.some((r) => r.path.endsWith("/withdraw") && r.status === 200), "settled by withdraw");
    await copies(agent, sessionId, ""); // idle
    assert.equal(model.requests(`ask ${tag}`).length, 2, "the first answer and one regenerate");
    const [user] = (await api("GET", `/agents/${agent}/sessions/${sessionId}`)).json.messages;
    assert.equal((await api("GET", `/agents/${agent}/sessions/${sessionId}/branches?entryId=${user.entryId}`)).json.count, 2, "two answers, not three");
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
    await proxy.close();
  }
});
