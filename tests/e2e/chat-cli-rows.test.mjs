// Extension rows in `shiitake chat` (bin/shiitake.mjs; seed shiitake.md
// "Client entries": "The TUI renders current extension rows compactly below
// its footer hints"), used as a person would under tmux: the demo Worker
// with its `goal` and `links` example extensions (Miniflare on a real port),
// the scripted model server. Rows are drawn under the prompt and follow the
// Session's projections live; the Row actions palette (/actions) runs an
// action through the extension's command route (the server sees it) and
// opens a row's Session target once the client authorized it, a refused one
// reported as a notice; Esc goes to queued and running work first, then
// dismisses the notice, never the rows.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { ROOT, TOKEN, startWorker, uniq } from "./helpers.mjs";

const BIN = path.join(ROOT, "bin/shiitake.mjs");
const T = { timeout: 90_000 };
/** A tmux server of this file's own, so the user's sessions are never touched. */
const SOCKET = `shiitake-rows-test-${process.pid}`;
const dir = mkdtempSync(path.join(tmpdir(), "shiitake-rows-"));

let h;
let origin;

before(async () => {
  h = await startWorker({ model: "echo", bindings: { SHIITAKE_DEMO_GOAL: "1", SHIITAKE_DEMO_LINKS: "1" } });
  origin = (await h.mf.ready).origin;
  // The server would exit with its last session (racing the next test's start).
  tmux("new-session", "-d", "-s", "keep", "sleep 3600");
});

after(async () => {
  try {
    execFileSync("tmux", ["-L", SOCKET, "kill-server"], { stdio: "ignore" });
  } catch {
    // no session was left
  }
  await h?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const quote = (s) => `'${String(s).replaceAll("'", "'\\''")}'`;
const tmux = (...args) => execFileSync("tmux", ["-L", SOCKET, ...args], { encoding: "utf8" });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
/** `t` as a RegExp source. */
const esc = (t) => t.replace(/[[\]().|*+?^$\\/]/g, "\\$&");

/** `shiitake chat <args>` in a detached tmux session of `width` columns; its exit status lands in a file. */
function chat(name, args, width = 120) {
  const status = path.join(dir, `${name}.status`);
  const command = `cd ${quote(ROOT)} && env SHIITAKE_TOKEN= ${quote(process.execPath)} ${quote(BIN)} chat ${args.map(quote).join(" ")}; echo $? > ${quote(status)}; sleep 600`;
  tmux("new-session", "-d", "-s", name, "-x", String(width), "-y", "40", command);
  const screen = () => tmux("capture-pane", "-p", "-t", name);
  return {
    keys: (...keys) => tmux("send-keys", "-t", name, ...keys),
    line(text) {
      tmux("send-keys", "-t", name, "-l", text);
      tmux("send-keys", "-t", name, "Enter");
    },
    screen,
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
    close: () => tmux("kill-session", "-t", name),
  };
}

/** A fresh Agent with Session `main`, a goal and links pinned in it; `notes` a Session the first link opens. */
async function agentWithRows() {
  const agent = `rows-${uniq("a").slice(3, 11)}`;
  const api = (method, rel, body) => h.api(method, `/agents/${agent}${rel}`, body);
  for (const sessionId of ["main", "notes"]) assert.equal((await api("POST", "/sessions", { sessionId })).status, 201);
  const command = async (extension, name, input) => {
    const r = await api("POST", `/sessions/main/extensions/${extension}/commands/${name}`, { input });
    assert.equal(r.status, 200, r.text);
    return r.json.result;
  };
  await command("goal", "set", { text: "Ship the notes" });
  await command("links", "add", { title: "Release notes", sessionId: "notes" });
  await command("links", "add", { title: "Gone", sessionId: "ses_missing" });
  return { agent, api, command };
}

/** The palette's number of the choice `label` on the screen `s`. */
function choiceNumber(s, label) {
  const m = new RegExp(`^ {2}(\\d+)\\. ${esc(label)}$`, "m").exec(s.slice(s.lastIndexOf("Row actions:")));
  assert.ok(m, `no row action ${label} in:\n${s}`);
  return m[1];
}

test("rows under the prompt: the hints, the chips on one line, then a line per panel row, each cut to the width; updated live as the projections change", T, async () => {
  const { agent, api, command } = await agentWithRows();
  const c = chat(uniq("rows"), ["--url", origin, "--agent", agent, "--token", TOKEN, "--session", "main"], 80);
  try {
    const rows = [
      "─ /actions: the rows' actions · Esc dismisses a notice",
      "[Goal: Ship the notes]",
      "Ship the notes · 0 turns, 0 completed (Achieved | Abandon)",
      "Release notes · notes (open | Remove)",
      "Gone · ses_missing (open | Remove)",
    ];
    // The prompt, then the footer: each row moved it up.
    let s = await c.waitFor(new RegExp(`\\n> ?\\n${rows.map(esc).join("\\n")}\\n`));
    // A label longer than the terminal is cut to its width (79 columns and an ellipsis).
    const long = `A very long title ${"x".repeat(200)}`;
    await command("links", "add", { title: long.slice(0, 200), sessionId: "notes" });
    s = await c.waitFor(/\nA very long title x+…\n/);
    const cut = s.split("\n").find((l) => l.startsWith("A very long title"));
    assert.equal([...cut].length, 79);
    // Live: the goal counts a turn; the chip and row follow; the typed line stays where it is.
    c.line("hello");
    await c.waitFor(/Echo: hello\n\[completed\]/);
    await c.waitFor(/\nShip the notes · 1 turns, 1 completed \(Achieved \| Abandon\)\n/);
    c.keys("-l", "half typed");
    await c.waitFor(/\n> half typed\n─ \/actions/);
    await command("goal", "end", { status: "abandoned" });
    s = await c.waitFor(/\n> half typed\n─ [^\n]*\nRelease notes · notes \(open \| Remove\)\n/);
    assert.doesNotMatch(s, /\[Goal: Ship the notes\]/, "the chip is gone with the goal");
    // No rows left: no footer at all.
    for (const id of ["l1", "l2", "l3"]) await command("links", "remove", { id });
    s = await c.waitFor(/\n> half typed\n(?![\s\S]*─ \/actions)/);
    assert.equal((await api("GET", "/sessions/main")).json.extensions.links, undefined, "no links: no projection");
    c.keys("C-u");
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
  }
});

test("the Row actions palette: an action runs through the extension's command route (the server sees it); a row's Session target opens once authorized, a refused one is a notice", T, async () => {
  const { agent, api } = await agentWithRows();
  const c = chat(uniq("palette"), ["--url", origin, "--agent", agent, "--token", TOKEN, "--session", "main"]);
  try {
    await c.waitFor(/\nGone · ses_missing \(open \| Remove\)\n/);
    c.line("/actions");
    let s = await c.waitFor(/a number and Enter runs one; Esc or an empty line closes/);
    const listed = s.slice(s.lastIndexOf("Row actions:")).split("\n").slice(1, 7);
    assert.deepEqual(listed, [
      "  1. Ship the notes: Achieved",
      "  2. Ship the notes: Abandon",
      "  3. Release notes: open notes",
      "  4. Release notes: Remove",
      "  5. Gone: open ses_missing",
      "  6. Gone: Remove",
    ]);
    // Esc closes the palette: the next line is a prompt again.
    await sleep(100);
    c.keys("Escape");
    await c.waitFor(/\[row actions closed\]/);
    // An action: the goal's own `end` command, run on the server.
    c.line("/actions");
    s = await c.waitFor(/(Row actions:[\s\S]*){2}a number and Enter/);
    c.line(choiceNumber(s, "Ship the notes: Achieved"));
    await c.waitFor(/\[Ship the notes: Achieved\] \{"endedAfter":0,"status":"achieved"\}/);
    assert.equal((await api("GET", "/sessions/main")).json.extensions.goal.status, "achieved");
    s = await c.waitFor(/\n> ?\n─ [^\n]*\nRelease notes/);
    assert.doesNotMatch(s, /\[Goal: Ship the notes\]/);
    // A refused open: the target's read fails with this client's token; the chat stays where it is.
    c.line("/actions");
    s = await c.waitFor(/(Row actions:[\s\S]*){3}a number and Enter/);
    c.line(choiceNumber(s, "Gone: open ses_missing"));
    await c.waitFor(/\n\[notice\] Gone: open ses_missing: refused: no such Session \([^\n]*\)\n/);
    // The authorized one: the chat is in that Session now (the next prompt goes there).
    c.line("/actions");
    s = await c.waitFor(/(Row actions:[\s\S]*){4}a number and Enter/);
    c.line(choiceNumber(s, "Release notes: open notes"));
    await c.waitFor(/\nsession notes\n/);
    c.line("in the notes");
    await c.waitFor(/Echo: in the notes\n\[completed\]/);
    const notes = (await api("GET", "/sessions/notes")).json.messages.map((m) => m.text);
    assert.deepEqual(notes, ["in the notes", "Echo: in the notes"]);
    assert.equal((await api("GET", "/sessions/main")).json.messages.length, 0, "nothing went to the Session it left");
    // The rows are the open Session's: `notes` has none yet, then one that links another Agent's Session.
    c.line("/actions");
    await c.waitFor(/no row actions: no extension row offers one/);
    const r = await api("POST", "/sessions/notes/extensions/links/commands/add", { input: { title: "Theirs", sessionId: "s1", agentId: "elsewhere" } });
    assert.equal(r.status, 200, r.text);
    await c.waitFor(/\nTheirs · elsewhere\/s1 \(open \| Remove\)\n/);
    c.line("/actions");
    s = await c.waitFor(/ {2}\d\. Theirs: open s1\n[^>]*a number and Enter/);
    c.line(choiceNumber(s, "Theirs: open s1"));
    await c.waitFor(new RegExp(`\\n\\[notice\\] Theirs: open s1: refused: it is Agent elsewhere's; this chat talks to Agent ${agent} only\\n`));
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
  }
});

test("Esc: a queued prompt, then the running one take it first; then it dismisses the notice; the extension rows are live state and stay", T, async () => {
  const { agent, api } = await agentWithRows();
  const hang = uniq("hang");
  h.model.scriptFor(hang, { hang: true });
  const c = chat(uniq("esc"), ["--url", origin, "--agent", agent, "--token", TOKEN, "--session", "main"]);
  try {
    await c.waitFor(/\nGone · ses_missing \(open \| Remove\)\n/);
    // A notice: the refused open.
    c.line("/actions");
    const s = await c.waitFor(/a number and Enter runs one/);
    c.line(choiceNumber(s, "Gone: open ses_missing"));
    await c.waitFor(/\n\[notice\] Gone: open ses_missing: refused: /);
    c.line(`a long task ${hang}`);
    for (let i = 0; i < 100 && (await api("GET", "/sessions/main")).json.running === null; i++) await sleep(100);
    c.line("and then this");
    await c.waitFor(/\[queued\] and then this/);
    c.keys("Escape");
    await c.waitFor(/cancelling and then this/);
    assert.match(c.screen(), /\n\[notice\] Gone: open ses_missing/, "the notice stays while work takes Esc");
    c.keys("Escape");
    await c.waitFor(/\[cancelled\] a long task/);
    assert.match(c.screen(), /\n\[notice\] Gone: open ses_missing/);
    const read = (await api("GET", "/sessions/main")).json;
    assert.equal(read.running, null);
    assert.deepEqual(read.pending, []);
    // Nothing else takes Esc: the notice goes, the rows stay.
    c.keys("Escape");
    await c.waitFor(/^(?![\s\S]*\[notice\])[\s\S]*\nGone · ses_missing \(open \| Remove\)\n/);
    c.keys("Escape");
    await sleep(800);
    const after = c.screen();
    assert.match(after, /\n\[Goal: Ship the notes\]\n/);
    assert.match(after, /\nRelease notes · notes \(open \| Remove\)\n/);
    assert.equal((await api("GET", "/sessions/main")).json.extensions.goal.status, "active", "Esc ran no row action");
    c.line("/quit");
    assert.equal(await c.exitStatus(), 0);
  } finally {
    c.close();
  }
});
