// The chat page (js/chat/, served by the demo Worker at `/`) used as a person
// would, in Debian's headless Chromium driven by playwright-core (no browser
// download): sign in with the token, create a Session, type a prompt and see
// the answer stream in, then settle; queue a prompt behind a running one and
// cancel it (its text comes back to the composer), stop the running one;
// reload and see the same transcript; a send whose answer is lost (through
// tests/support/lossy-proxy.mjs) is recovered, never run twice, and one that
// never arrived comes back as a draft. Branches: edit and resend, regenerate
// and `< i/n >` switching, with the context the scripted model server got;
// a compaction's marker opening to what it summarises (skipped, saying why,
// where the service has no `compact` command). Budgets (a Worker of their
// own, raised through the Durable Object's own route): the lines beside the
// total and the notice of a paused turn, as the routes answer. Screenshots are kept under
// test-artifacts/chat-page/. scripts/test.sh installs chromium when it is
// missing; this file skips only when it still cannot be found.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startLossyProxy } from "../support/lossy-proxy.mjs";
import { ROOT, TOKEN, execute, startWorker, uniq } from "./helpers.mjs";

const CHROMIUM = process.env.SHIITAKE_CHROMIUM ?? "/usr/bin/chromium";
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const skip = existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM} (scripts/test.sh installs Debian's chromium with apt-get)`;
const T = { timeout: 120_000, skip };
const ARTIFACTS = path.join(ROOT, "test-artifacts/chat-page");

let h;
let context;
let userDataDir;
let origin;

before(async () => {
  if (skip) return;
  h = await startWorker({ model: "echo", bindings: { SHIITAKE_DEMO_GOAL: "1", SHIITAKE_DEMO_LINKS: "1" } });
  origin = (await h.mf.ready).origin;
  await mkdir(ARTIFACTS, { recursive: true });
  const { chromium } = await import("playwright-core");
  userDataDir = await mkdtemp(path.join(tmpdir(), "shiitake-chromium-"));
  context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args: FLAGS });
});

after(async () => {
  await context?.close();
  await h?.dispose();
  if (userDataDir) await rm(userDataDir, { recursive: true, force: true });
});

/** A fresh Agent (so a fresh Durable Object) per test; the fleet takes [A-Za-z0-9._:-] ids. */
const newAgent = () => `chat-${randomUUID().slice(0, 8)}`;
const shot = (page, name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });

/** Opens the page (served from `base`) for a fresh Agent, signs in, creates a Session; returns the page and its Session id. */
async function signedIn(agent, base = origin) {
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (error) => errors.push(String(error)));
  await page.goto(`${base}/?agent=${encodeURIComponent(agent)}`);
  await page.getByLabel("Token").fill(TOKEN);
  await page.getByRole("button", { name: "Continue" }).click();
  await page.getByRole("button", { name: "New", exact: true }).click();
  await page.waitForFunction(() => document.getElementById("session-title").textContent.startsWith("ses_"));
  const sessionId = await page.textContent("#session-title");
  return { page, agent, sessionId, errors };
}

const send = async (page, text) => {
  await page.getByLabel("Message", { exact: true }).fill(text);
  await page.getByLabel("Message", { exact: true }).press("Enter");
};

test("the page asks for the token once and refuses a wrong one", T, async () => {
  const page = await context.newPage();
  await page.goto(`${origin}/?agent=${newAgent()}`);
  await page.getByLabel("Token").fill("not-the-token");
  await page.getByRole("button", { name: "Continue" }).click();
  await page.getByText("The service refused the token").waitFor();
  await page.getByLabel("Token").fill(TOKEN);
  await page.getByRole("button", { name: "Continue" }).click();
  await page.getByRole("button", { name: "New", exact: true }).click();
  await page.waitForFunction(() => document.getElementById("session-title").textContent.startsWith("ses_"));
  // Kept for the tab: a reload signs in without asking.
  await page.reload();
  await page.getByRole("listitem").filter({ hasText: "ses_" }).first().waitFor();
  assert.equal(await page.locator("#token-dialog").evaluate((d) => d.open), false);
  await page.close();
});

test("a prompt's answer streams in token by token, then the prompt shows completed", T, async () => {
  const tag = uniq("stream");
  h.model.scriptFor(tag, { chunks: ["Mush", "rooms ", "grow ", "in ", "the ", "dark."], chunkDelayMs: 250 });
  const { page, errors } = await signedIn(newAgent());
  await send(page, `Tell me about mushrooms ${tag}`);
  // Part of the answer is on screen before the rest arrives.
  await page.waitForFunction(() => {
    const live = document.getElementById("live");
    return !live.hidden && live.textContent.startsWith("Mush") && !live.textContent.includes("dark.");
  });
  await shot(page, "streaming");
  await page.locator("li.message.assistant", { hasText: "Mushrooms grow in the dark." }).waitFor();
  await page.locator("li.message.user .settlement.completed").waitFor();
  assert.equal(await page.locator("#live").isHidden(), true);
  await shot(page, "settled");
  assert.deepEqual(errors, []);
  await page.close();
});

test("a queued prompt is cancelled from the page and its text comes back; the running one is stopped", T, async () => {
  const running = uniq("running");
  h.model.scriptFor(running, { hang: true, chunks: ["Thinking"] });
  const { page, sessionId } = await signedIn(newAgent());
  await send(page, `A long task ${running}`);
  await page.getByText(`Running: A long task ${running}`).waitFor();
  const queued = `And then this ${uniq("queued")}`;
  await send(page, queued);
  await page.getByText(`Queued #1: ${queued}`).waitFor();
  await shot(page, "queued");
  await page.getByRole("button", { name: "Cancel queued prompt 1" }).click();
  await page.waitForFunction((text) => !document.getElementById("pending").textContent.includes(text), queued);
  // The cancel's answer puts the text back (its frame may update the queue first).
  await page.waitForFunction((text) => document.getElementById("prompt").value === text, queued);
  await page.getByRole("button", { name: "Stop", exact: true }).click();
  await page.locator("li.message.user .settlement.cancelled").waitFor();
  await page.getByText("Idle").waitFor();
  await shot(page, "cancelled");

  // The server agrees: nothing pending, nothing running, the prompt cancelled.
  const read = await h.api("GET", `/agents/${await page.evaluate(() => sessionStorage.getItem("shiitake.agent"))}/sessions/${sessionId}`);
  assert.equal(read.status, 200);
  assert.deepEqual(read.json.pending, []);
  assert.equal(read.json.running, null);
  await page.close();
});

test("a reload shows the same transcript and settlements; a phone-sized screen stays readable", T, async () => {
  const tag = uniq("reload");
  const agent = newAgent();
  const { page, sessionId } = await signedIn(agent);
  await send(page, `First ${tag}`);
  await page.locator("li.message.assistant", { hasText: `Echo: First ${tag}` }).waitFor();
  await send(page, `Second ${tag}`);
  await page.locator("li.message.assistant", { hasText: `Echo: Second ${tag}` }).waitFor();
  await page.waitForFunction(() => document.querySelectorAll("li.message.user .settlement.completed").length === 2);
  // Each answer shows the tokens its provider reported, as the read has them.
  const answers = (await h.api("GET", `/agents/${agent}/sessions/${sessionId}`)).json.messages.filter((m) => m.role === "assistant");
  assert.equal(answers.length, 2);
  const tokens = (u) => `${u.inputTokens} in${u.cacheReadTokens ? ` (${u.cacheReadTokens} cached)` : ""} · ${u.outputTokens} out`;
  assert.deepEqual(await page.locator("#messages li.message.assistant .usage").allTextContents(), answers.map((a) => tokens(a.usage)));
  // The Session's running total is the usage ledger's answer for it: two calls, each counted once.
  const ledger = (await h.api("GET", `/agents/${agent}/usage?sessionId=${sessionId}`)).json;
  assert.deepEqual([ledger.sessionId, ledger.totals.calls, ledger.totals.answered], [sessionId, 2, 2]);
  assert.equal(ledger.totals.inputTokens, answers[0].usage.inputTokens + answers[1].usage.inputTokens);
  const total = `Session total: 2 calls · ${tokens(ledger.totals)}`;
  const shownTotal = () => page.evaluate(() => document.querySelector('#costs [data-line="total"]')?.textContent ?? null);
  await page.waitForFunction((want) => document.querySelector('#costs [data-line="total"]')?.textContent === want, total, { timeout: 10_000 }).catch(async () => assert.fail(`the total shows ${await shownTotal()}, the ledger says ${total}`));
  // No budget applies: no budget line.
  assert.deepEqual(await page.locator("#costs [data-line]").evaluateAll((lines) => lines.map((l) => l.dataset.line)), ["total"]);
  const before = await page.locator("#messages li.message").allTextContents();
  await page.reload();
  await page.waitForFunction((id) => document.getElementById("session-title").textContent === id, sessionId);
  await page.locator("li.message.assistant", { hasText: `Echo: Second ${tag}` }).waitFor();
  await page.waitForFunction(() => document.querySelectorAll("li.message.user .settlement.completed").length === 2);
  assert.deepEqual(await page.locator("#messages li.message").allTextContents(), before);
  await page.waitForFunction((want) => document.querySelector('#costs [data-line="total"]')?.textContent === want, total, { timeout: 10_000 }).catch(async () => assert.fail(`after a reload the total shows ${await shownTotal()}, the ledger says ${total}`));
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, "phone");
  // Nothing wider than the screen.
  assert.ok((await page.evaluate(() => document.documentElement.scrollWidth)) <= 390);
  await page.close();
});

test("budgets: the Session's line beside its total; a turn its budget pauses shows why (also after a reload) until a raise lets it go on; so does the Agent's day, until cleared", T, async () => {
  // A Worker of its own, whose Sessions each have 5,000 tokens.
  const b = await startWorker({ model: "echo", bindings: { SHIITAKE_BUDGET_SESSION_TOKENS: 5000 } });
  let page;
  try {
    const first = uniq("budget-first");
    // The first call's estimate (its prompt, the instructions and the demo's tools) fits; the answer spends
    // 3,040 tokens, and the next call's input alone is estimated at more than the 1,960 left (at least what
    // the first reported).
    b.model.scriptFor(first, { usage: { prompt_tokens: 3000, completion_tokens: 40 } });
    const agent = newAgent();
    let errors;
    let sessionId;
    ({ page, sessionId, errors } = await signedIn(agent, (await b.mf.ready).origin));
    const route = async (p) => {
      const res = await b.api("GET", `/agents/${agent}${p}`);
      assert.equal(res.status, 200);
      return res.json;
    };
    const shown = (name) => page.evaluate((n) => document.querySelector(`#costs [data-line="${n}"]`)?.textContent ?? null, name);
    const showsLine = (name, want, why) => page.waitForFunction(([n, w]) => document.querySelector(`#costs [data-line="${n}"]`)?.textContent === w, [name, want], { timeout: 10_000 }).catch(async () => assert.fail(`${why}: the page shows ${await shown(name)}, wanted ${want}`));
    const count = (n) => n.toLocaleString("en-US");

    await send(page, `First ${first}`);
    await page.locator("li.message.user .settlement.completed").waitFor();
    const spentOnce = await route(`/sessions/${sessionId}/budget`);
    assert.deepEqual(spentOnce, { tokens: 5000, set: false, spent: 3040 });
    await showsLine("budget", `budget ${count(spentOnce.tokens)} · ${count(spentOnce.spent)} spent`, "after the first answer");
    assert.equal(await page.locator("#paused").isHidden(), true);
    // No daily budget: no line for it.
    assert.equal((await route("/budget")).tokens, null);
    assert.equal(await shown("daily"), null);

    const second = uniq("budget-second");
    await send(page, `Second ${second}`);
    const notice = page.locator("#paused");
    await notice.waitFor();
    const { paused } = await route(`/sessions/${sessionId}/budget`);
    assert.equal(paused.reason, "budget_reached");
    assert.deepEqual([paused.budget.scope, paused.budget.tokens, paused.budget.spent], ["session", 5000, 3040]);
    assert.ok(paused.budget.spent + paused.budget.needs >= paused.budget.tokens, JSON.stringify(paused));
    const want = `Paused: the Session's token budget is reached (${count(paused.budget.spent)} of ${count(paused.budget.tokens)}).`;
    assert.ok((await notice.textContent()).startsWith(want), await notice.textContent());
    await page.getByText("Paused", { exact: true }).waitFor();
    // The Session's read says the same of its running turn.
    const read = await route(`/sessions/${sessionId}`);
    assert.deepEqual(read.running.paused.budget, paused.budget);
    await shot(page, "budget-paused");

    // A reload shows it again, from the read.
    await page.reload();
    await page.waitForFunction((id) => document.getElementById("session-title").textContent === id, sessionId);
    await notice.waitFor();
    assert.ok((await notice.textContent()).startsWith(want), await notice.textContent());
    await showsLine("budget", "budget 5,000 · 3,040 spent", "after a reload");

    // The host raises the budget, through the Durable Object's own route: the turn goes on.
    const namespace = await b.mf.getDurableObjectNamespace("SHIITAKE");
    const host = async (method, p, body) => {
      const init = { method, headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" } };
      const res = await namespace.get(namespace.idFromName(agent)).fetch(`http://do${p}`, body === undefined ? init : { ...init, body: JSON.stringify(body) });
      assert.equal(res.status, 200, await res.text());
    };
    await host("PUT", `/sessions/${sessionId}/budget`, { tokens: 100_000 });
    await page.waitForFunction(() => document.getElementById("paused").hidden);
    await page.locator("li.message.assistant", { hasText: `Echo: Second ${second}` }).waitFor();
    await page.waitForFunction(() => document.querySelectorAll("li.message.user .settlement.completed").length === 2);
    const raised = await route(`/sessions/${sessionId}/budget`);
    assert.deepEqual([raised.tokens, raised.set, raised.paused], [100_000, true, undefined]);
    assert.ok(raised.spent > 3040);
    await showsLine("budget", `budget 100,000 · ${count(raised.spent)} spent`, "after the raise");
    await shot(page, "budget-raised");

    // The Agent's day, set below what the Session's next call needs: that one pauses it, said so, with its line.
    await host("PUT", "/budget", { tokens: raised.spent + 1 });
    const third = uniq("budget-third");
    await send(page, `Third ${third}`);
    await notice.waitFor();
    const day = await route("/budget");
    assert.deepEqual([day.tokens, day.set, day.spent], [raised.spent + 1, true, raised.spent]);
    const byDay = (await route(`/sessions/${sessionId}/budget`)).paused.budget;
    assert.deepEqual([byDay.scope, byDay.tokens, byDay.spent], ["agent", day.tokens, day.spent]);
    assert.ok((await notice.textContent()).startsWith(`Paused: the Agent's daily token budget is reached (${count(day.spent)} of ${count(day.tokens)}).`), await notice.textContent());
    await showsLine("daily", `Agent today: budget ${count(day.tokens)} · ${count(day.spent)} spent`, "paused by the Agent's day");
    // Cleared, back to the configuration (none a day): the turn goes on, and the line goes.
    await host("DELETE", "/budget");
    await page.waitForFunction(() => document.getElementById("paused").hidden);
    await page.locator("li.message.assistant", { hasText: `Echo: Third ${third}` }).waitFor();
    await page.waitForFunction(() => document.querySelector('#costs [data-line="daily"]') === null);
    assert.deepEqual(errors, []);
  } finally {
    await page?.close();
    await b.dispose();
  }
});

test("a tool call shows with its arguments and its display data", T, async () => {
  const tag = uniq("tool");
  h.model.scriptFor(tag, execute("return await notes.add_note({ text: 'from the page' });"), { text: "Noted." });
  const { page, errors } = await signedIn(newAgent());
  await send(page, `Take a note ${tag}`);
  await page.locator("li.message.assistant", { hasText: "Noted." }).waitFor();
  // The model's call, then its outcome with the data the host displays.
  assert.match(await page.locator("li.message.assistant .calls").first().textContent(), /^execute\(\{"code":"return await notes\.add_note/);
  const tool = page.locator("li.message.tool").first();
  assert.match(await tool.locator(".who").textContent(), /tool · execute/);
  await tool.locator("summary").click();
  const data = JSON.parse(await tool.locator("pre").textContent());
  assert.equal(data.calls[0].path, "notes.add_note");
  await page.locator("li.message.user .settlement.completed").waitFor();
  await shot(page, "tool");
  assert.deepEqual(errors, []);
  await page.close();
});

test("a running tool shows with its live counters until its result arrives", T, async () => {
  const tag = uniq("timer");
  h.model.scriptFor(tag, execute("return await timer.wait({ ms: 2500 });"), { text: "Waited." });
  const { page, errors } = await signedIn(newAgent());
  await send(page, `Wait a little ${tag}`);
  // The call runs: shown as running, its counters moving with the progress frames.
  const running = page.locator("#tools li.running-tool", { hasText: "execute · running" });
  await running.waitFor();
  await page.waitForFunction(() => /^waitedMs (\d+) · ofMs 2500$/.test(document.querySelector("#tools .counters")?.textContent ?? ""));
  const first = Number(/waitedMs (\d+)/.exec(await running.locator(".counters").textContent())[1]);
  await page.waitForFunction((n) => Number(/waitedMs (\d+)/.exec(document.querySelector("#tools .counters")?.textContent ?? "")?.[1]) > n, first);
  await shot(page, "tool-running");
  // Ended: the running line is gone, the outcome is in the transcript.
  await page.locator("li.message.assistant", { hasText: "Waited." }).waitFor();
  assert.equal(await running.count(), 0);
  assert.match(await page.locator("#messages li.message.tool .text").textContent(), /^\{"waitedMs":\d+\}$/);
  assert.deepEqual(errors, []);
  await page.close();
});

test("the goal extension's client entry: a chip and a pinned row whose action ends it, lines at fixed positions", T, async () => {
  const { page, agent, sessionId, errors } = await signedIn(newAgent());
  await send(page, "Hello");
  await page.locator("li.message.assistant", { hasText: "Echo: Hello" }).waitFor();
  const set = await h.api("POST", `/agents/${agent}/sessions/${sessionId}/extensions/goal/commands/set`, { input: { text: "Ship the notes" } });
  assert.equal(set.status, 200, set.text);
  // The projection reaches the page over the watch: a chip, a pinned row, the line.
  await page.locator(".chip", { hasText: "Goal: Ship the notes" }).waitFor();
  await page.locator(".panel-row", { hasText: "Ship the notes" }).waitFor();
  // A cell's place: the Session position of the nearest message row above
  // it. Renders settle over a few tasks (a read, the watch's frames, the
  // extension's observation), so the place is awaited, not sampled once; a
  // cell that never reaches it fails with the transcript as it stood.
  const placedAfter = async (label, sequence, why) => {
    const where = ([text, at]) => {
      const li = [...document.querySelectorAll("li.cell")].find((c) => c.textContent.includes(text));
      if (li === undefined) return false;
      let row = li.previousElementSibling;
      while (row && row.dataset.sequence === undefined) row = row.previousElementSibling;
      return row?.dataset.sequence === at;
    };
    const ok = await page.waitForFunction(where, [label, sequence], { timeout: 10_000 }).then(() => true, () => false);
    if (!ok) assert.fail(`${why}: "${label}" is not after position ${sequence}; the transcript: ${await page.locator("#transcript").evaluate((t) => t.outerHTML)}`);
  };
  await page.locator("li.cell", { hasText: "Goal set: Ship the notes" }).waitFor();
  await placedAfter("Goal set", "2", "after the Session's two entries at the time");
  await shot(page, "goal-active");
  // The row's action runs the extension's own command.
  await page.locator(".panel-row").getByRole("button", { name: "Achieved" }).click();
  await page.locator("li.cell", { hasText: "Goal achieved: Ship the notes" }).waitFor();
  await page.waitForFunction(() => document.querySelector(".chip") === null);
  assert.equal((await h.api("GET", `/agents/${agent}/sessions/${sessionId}`)).json.extensions.goal.status, "achieved");
  // Later work does not move the ending line.
  await send(page, "After the goal");
  await page.locator("li.message.assistant", { hasText: "Echo: After the goal" }).waitFor();
  await placedAfter("Goal achieved", "2", "where its transaction read, not after later work");
  await page.reload();
  // The read's messages and the extension's lines may arrive in either order:
  // the placement is checked once both are on the page.
  await page.locator("li.cell", { hasText: "Goal achieved: Ship the notes" }).waitFor();
  await page.locator("li.message.assistant", { hasText: "Echo: After the goal" }).waitFor();
  await placedAfter("Goal achieved", "2", "placed the same from a fresh read");
  await shot(page, "goal-ended");
  assert.deepEqual(errors, []);
  await page.close();
});

test("a pinned row's Session open target: a refused one leaves the page where it is with a notice; an authorized one opens the Session (another Agent's too)", T, async () => {
  const { page, agent, sessionId, errors } = await signedIn(newAgent());
  const other = newAgent();
  const mine = (await h.api("POST", `/agents/${agent}/sessions`, { sessionId: "notes" })).json.sessionId;
  const theirs = (await h.api("POST", `/agents/${other}/sessions`, { sessionId: "handed-over" })).json.sessionId;
  const add = (input) => h.api("POST", `/agents/${agent}/sessions/${sessionId}/extensions/links/commands/add`, { input });
  for (const input of [{ title: "Release notes", sessionId: mine }, { title: "Gone", sessionId: "ses_missing" }, { title: "Handed over", sessionId: theirs, agentId: other }]) {
    const r = await add(input);
    assert.equal(r.status, 200, r.text);
  }
  // The rows reach the page over the watch, each with an Open button.
  const row = (title) => page.locator(".panel-row", { hasText: title });
  await row("Handed over").waitFor();
  await shot(page, "links");
  // Refused: the target's read fails with this tab's token; nothing changes but the notice.
  await row("Gone").getByRole("button", { name: "Open Gone" }).click();
  await page.locator("#notice", { hasText: "Could not open ses_missing" }).waitFor();
  assert.match(await page.textContent("#notice"), /session_not_found/);
  assert.equal(await page.textContent("#session-title"), sessionId);
  // Authorized: the page opens it (its own Session list, the URL).
  await row("Release notes").getByRole("button", { name: "Open Release notes" }).click();
  await page.waitForFunction((id) => document.getElementById("session-title").textContent === id, mine);
  assert.equal(new URL(page.url()).hash, `#session=${mine}`);
  assert.equal(await page.locator("#notice").isHidden(), true);
  // Another Agent's Session: the page switches to that Agent, then opens it.
  await page.locator("#session-list button.open", { hasText: sessionId }).click();
  await row("Handed over").getByRole("button", { name: "Open Handed over" }).click();
  await page.waitForFunction((id) => document.getElementById("session-title").textContent === id, theirs);
  assert.equal(await page.inputValue("#agent-id"), other);
  assert.deepEqual(errors, []);
  await page.close();
});

test("Esc: the running turn and the queued prompt take it first; then it dismisses the notice; extension rows stay", T, async () => {
  const hang = uniq("hang");
  h.model.scriptFor(hang, { hang: true, chunks: ["Thinking"] });
  const { page, agent, sessionId, errors } = await signedIn(newAgent());
  const set = await h.api("POST", `/agents/${agent}/sessions/${sessionId}/extensions/goal/commands/set`, { input: { text: "Ship the notes" } });
  assert.equal(set.status, 200, set.text);
  await page.locator(".panel-row", { hasText: "Ship the notes" }).waitFor();
  await send(page, `A long task ${hang}`);
  await page.getByText(`Running: A long task ${hang}`).waitFor();
  const queued = `And then this ${uniq("queued")}`;
  await send(page, queued);
  await page.getByText(`Queued #1: ${queued}`).waitFor();
  // A notice (the model's own `show_notice` command would do the same).
  await page.evaluate(() => {
    const notice = document.getElementById("notice");
    notice.hidden = false;
    notice.textContent = "Something to read";
  });
  // Esc cancels the queued prompt first (its text comes back), then stops the running one; the notice stays.
  await page.keyboard.press("Escape");
  await page.waitForFunction((text) => !document.getElementById("pending").textContent.includes(text), queued);
  await page.waitForFunction((text) => document.getElementById("prompt").value === text, queued);
  assert.equal(await page.locator("#notice").isVisible(), true);
  await page.keyboard.press("Escape");
  await page.locator("li.message.user .settlement.cancelled").waitFor();
  await page.getByText("Idle").waitFor();
  assert.equal(await page.locator("#notice").isVisible(), true);
  // Nothing else takes it: Esc dismisses the notice; the goal's chip and row are live state and stay.
  await page.keyboard.press("Escape");
  await page.locator("#notice").waitFor({ state: "hidden" });
  await page.keyboard.press("Escape");
  assert.equal(await page.locator(".panel-row", { hasText: "Ship the notes" }).count(), 1);
  assert.equal(await page.locator(".chip", { hasText: "Goal: Ship the notes" }).count(), 1);
  const read = await h.api("GET", `/agents/${agent}/sessions/${sessionId}`);
  assert.deepEqual(read.json.pending, []);
  assert.equal(read.json.running, null);
  assert.equal(read.json.extensions.goal.status, "active", "Esc ran no extension action");
  assert.deepEqual(errors, []);
  await page.close();
});

test("the model reaches the page's own commands through the browser bridge", T, async () => {
  const tag = uniq("ui");
  h.model.scriptFor(
    tag,
    execute("const found = await ui.discover({}); return found;"),
    execute(`return await ui.execute({ name: "set_theme", input: { theme: "dark" } });`),
    execute(`return await ui.execute({ name: "show_notice", input: { text: "Hello from the model" } });`),
    { text: "Done." },
  );
  const { page, errors } = await signedIn(newAgent());
  await send(page, `Make it dark ${tag}`);
  await page.locator("li.message.assistant", { hasText: "Done." }).waitFor();
  // The page listed its commands to the model and ran the ones it called.
  const tools = await page.locator("li.message.tool .text").allTextContents();
  for (const name of ["set_theme", "show_notice", "page_state"]) assert.ok(tools[0].includes(name), tools[0]);
  assert.match(tools[1], /"theme":"dark"/);
  assert.equal(await page.evaluate(() => document.documentElement.classList.contains("dark")), true);
  assert.equal(await page.textContent("#notice"), "Hello from the model");
  await shot(page, "ui-dark");
  assert.deepEqual(errors, []);
  await page.close();
});

test("a steer while a turn runs is queued as a steer; Stop all cancels the turn and the queue", T, async () => {
  const running = uniq("busy");
  h.model.scriptFor(running, { hang: true, chunks: ["Working"] });
  const { page, agent, sessionId } = await signedIn(newAgent());
  await send(page, `Do the long thing ${running}`);
  await page.getByText(`Running: Do the long thing ${running}`).waitFor();
  await page.getByLabel("Delivery").selectOption("steer");
  const steer = `Actually, shorter ${uniq("steer")}`;
  await send(page, steer);
  await page.getByText(`Steer #1: ${steer}`).waitFor();
  // The composer goes back to queueing after a send.
  assert.equal(await page.getByLabel("Delivery").inputValue(), "followUp");
  const pending = (await h.api("GET", `/agents/${agent}/sessions/${sessionId}`)).json.pending;
  assert.deepEqual(pending.map((p) => [p.text, p.delivery]), [[steer, "steer"]]);
  await page.getByRole("button", { name: "Stop all" }).click();
  await page.getByText("Stopped 2 prompt(s).").waitFor();
  await page.getByText("Idle").waitFor();
  await page.locator("li.message.user .settlement.cancelled").first().waitFor();
  const read = (await h.api("GET", `/agents/${agent}/sessions/${sessionId}`)).json;
  assert.deepEqual([read.pending, read.running], [[], null]);
  await page.close();
});

test("older messages load a page at a time; a Session is deleted from the list", T, async () => {
  const a = h.agent(newAgent());
  const sid = await a.createSession("long-one");
  for (let i = 1; i <= 60; i++) await a.admitOperator(sid, `line-${i}`, `line ${i}`);
  const page = await context.newPage();
  page.on("dialog", (dialog) => dialog.accept()); // the delete confirmation
  await page.goto(`${origin}/?agent=${encodeURIComponent(a.id)}#session=${sid}`);
  await page.getByLabel("Token").fill(TOKEN);
  await page.getByRole("button", { name: "Continue" }).click();
  await page.locator("li.message", { hasText: "line 60" }).waitFor();
  // The newest page (50 messages), then the rest on demand.
  assert.equal(await page.locator("li.message").count(), 50);
  assert.equal(await page.locator("li.message").first().textContent(), "operatorline 11");
  await page.getByRole("button", { name: "Load older messages" }).click();
  await page.waitForFunction(() => document.querySelectorAll("li.message").length === 60);
  assert.equal(await page.locator("li.message").first().textContent(), "operatorline 1");
  assert.equal(await page.getByRole("button", { name: "Load older messages" }).isHidden(), true);
  await shot(page, "paged");
  // Deleting it empties the view and the list; the server agrees.
  await page.getByRole("button", { name: `Delete Session ${sid}` }).click();
  await page.waitForFunction(() => document.getElementById("session-title").textContent === "No Session");
  await page.waitForFunction(() => document.querySelectorAll("#session-list li").length === 0);
  assert.equal((await a.api("GET", `/sessions/${sid}`)).status, 404);
  await page.close();
});

// ---- branches and compaction (docs/http.md "Branches", "Compaction") ----

/** `role:text` of each message a model request carried (the instructions left out). */
const seen = (record) => record.body.messages.filter((m) => m.role !== "system").map((m) => `${m.role}:${typeof m.content === "string" ? m.content : m.content.map((p) => p.text ?? "").join("")}`);
const userRow = (page, text) => page.locator("li.message.user", { hasText: text });
const answerRow = (page, text) => page.locator("li.message.assistant", { hasText: text });
/** The texts of the Session's selected branch, as the service reads it. */
const serverTexts = async (agent, sessionId) => (await h.api("GET", `/agents/${agent}/sessions/${sessionId}?limit=200`)).json.messages.map((m) => m.text);

/** Sends `text` and waits for its echo. */
async function turn(page, text) {
  await send(page, text);
  await answerRow(page, `Echo: ${text}`).waitFor();
}

test("edit and resend: the edited message runs on a new branch shown as < 2/2 >; < goes back to the old messages, > forward again", T, async () => {
  const tag = uniq("edit");
  const { page, agent, sessionId, errors } = await signedIn(newAgent());
  await turn(page, `First ${tag}`);
  await turn(page, `Second ${tag}`);
  await userRow(page, `Second ${tag}`).getByRole("button", { name: "Edit" }).click();
  assert.equal(await page.inputValue("#prompt"), `Second ${tag}`);
  await page.getByText("Editing a message").waitFor();
  await send(page, `Second, edited ${tag}`);
  const edited = userRow(page, `Second, edited ${tag}`);
  await edited.locator(".branch-at", { hasText: "2/2" }).waitFor();
  await answerRow(page, `Echo: Second, edited ${tag}`).waitFor();
  assert.equal(await page.getByText("Editing a message").isHidden(), true);
  // The old message and its answer are another branch now, not shown.
  assert.equal(await userRow(page, `Second ${tag}`).count(), 0);
  assert.equal(await answerRow(page, `Echo: Second ${tag}`).count(), 0);
  // The model saw the path: the first turn, then the edited message.
  assert.deepEqual(seen(h.model.requests(`Second, edited ${tag}`).at(-1)), [`user:First ${tag}`, `assistant:Echo: First ${tag}`, `user:Second, edited ${tag}`]);
  await shot(page, "branch-edited");

  await edited.getByRole("button", { name: "Previous branch" }).click();
  await userRow(page, `Second ${tag}`).locator(".branch-at", { hasText: "1/2" }).waitFor();
  await answerRow(page, `Echo: Second ${tag}`).waitFor();
  assert.equal(await edited.count(), 0);
  assert.deepEqual(await serverTexts(agent, sessionId), [`First ${tag}`, `Echo: First ${tag}`, `Second ${tag}`, `Echo: Second ${tag}`]);
  await shot(page, "branch-back");
  await userRow(page, `Second ${tag}`).getByRole("button", { name: "Next branch" }).click();
  await answerRow(page, `Echo: Second, edited ${tag}`).waitFor();
  assert.equal(await userRow(page, `Second ${tag}`).count(), 0);

  // The first message: `after: ""`, a new start.
  await userRow(page, `First ${tag}`).getByRole("button", { name: "Edit" }).click();
  await send(page, `Start over ${tag}`);
  await userRow(page, `Start over ${tag}`).locator(".branch-at", { hasText: "2/2" }).waitFor();
  await answerRow(page, `Echo: Start over ${tag}`).waitFor();
  assert.deepEqual(seen(h.model.requests(`Start over ${tag}`).at(-1)), [`user:Start over ${tag}`]);
  assert.equal(await userRow(page, `First ${tag}`).count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

test("regenerate: a new answer beside the old one, shown as < 2/2 >; the model got the context up to its prompt; < shows the old answer", T, async () => {
  const tag = uniq("regen");
  const { page, agent, sessionId, errors } = await signedIn(newAgent());
  await turn(page, `Before ${tag}`);
  await turn(page, `Question ${tag}`);
  h.model.scriptFor(`Question ${tag}`, { chunks: ["Another ", "answer ", tag], chunkDelayMs: 50 });
  await answerRow(page, `Echo: Question ${tag}`).getByRole("button", { name: "Regenerate" }).click();
  const fresh = answerRow(page, `Another answer ${tag}`);
  await fresh.locator(".branch-at", { hasText: "2/2" }).waitFor();
  assert.equal(await answerRow(page, `Echo: Question ${tag}`).count(), 0);
  // Its prompt once, not repeated; the old answer not in its context.
  assert.equal(await userRow(page, `Question ${tag}`).count(), 1);
  const requests = h.model.requests(`Question ${tag}`);
  assert.equal(requests.length, 2, "the first answer and the regenerated one");
  assert.deepEqual(seen(requests[1]), [`user:Before ${tag}`, `assistant:Echo: Before ${tag}`, `user:Question ${tag}`]);
  assert.deepEqual(await serverTexts(agent, sessionId), [`Before ${tag}`, `Echo: Before ${tag}`, `Question ${tag}`, `Another answer ${tag}`]);
  await shot(page, "regenerated");

  await fresh.getByRole("button", { name: "Previous branch" }).click();
  await answerRow(page, `Echo: Question ${tag}`).locator(".branch-at", { hasText: "1/2" }).waitFor();
  assert.equal(await fresh.count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

test("a branch change read after its turn already answered shows the answer once, with its < 2/2 >", T, async () => {
  const proxy = await startLossyProxy(origin);
  try {
    const tag = uniq("late-read");
    const { page, agent, sessionId, errors } = await signedIn(newAgent(), proxy.url);
    await turn(page, `Ask ${tag}`);
    h.model.scriptFor(`Ask ${tag}`, { chunks: ["Later ", "answer"], chunkDelayMs: 50 });
    // The read the `branch` frame makes goes on only once the regenerated
    // answer is stored: it holds what the frames after it bring.
    let armed = true;
    proxy.hold = (r) => {
      if (!armed || !(r.method === "GET" && r.path.endsWith(`/sessions/${sessionId}?limit=50`))) return undefined;
      armed = false;
      return until(async () => (await serverTexts(agent, sessionId)).at(-1) === "Later answer", "the regenerated answer");
    };
    await answerRow(page, `Echo: Ask ${tag}`).getByRole("button", { name: "Regenerate" }).click();
    await answerRow(page, "Later answer").locator(".branch-at", { hasText: "2/2" }).waitFor();
    await page.waitForFunction(() => document.getElementById("live").hidden);
    assert.equal(armed, false, "the read was held");
    assert.deepEqual(await page.locator("#messages li.message .text").allTextContents(), [`Ask ${tag}`, "Later answer"]);
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await proxy.close();
  }
});

/** Whether the service has the `compact` command (the compact helper's server side, issue 35 item 3). */
async function compactSupported() {
  const probe = h.agent(newAgent());
  const sid = await probe.createSession("probe");
  const res = await probe.command(sid, { type: "compact", requestId: "probe" });
  return res.status === 200;
}
const NO_COMPACT = "the service has no `compact` command: the compaction server side (docs/http.md \"Compaction\") is not in this build";

test("compact: the marker 'N messages summarised' opens to the summary and the messages it stands for, also after a reload [needs the compaction server side]", T, async (t) => {
  if (!(await compactSupported())) return t.skip(NO_COMPACT);
  const tag = uniq("compact");
  const { page, errors } = await signedIn(newAgent());
  await turn(page, `One ${tag}`);
  await turn(page, `Two ${tag}`);
  h.model.scriptFor(tag, { text: `The summary ${tag}` });
  await page.getByRole("button", { name: "Compact" }).click();
  const marker = page.locator("li.message.compaction");
  await marker.locator("summary", { hasText: "4 messages summarised" }).waitFor();
  // The messages stay readable, older than the marker.
  assert.equal(await answerRow(page, `Echo: Two ${tag}`).count(), 1);
  const opened = async () => {
    await marker.locator("summary").click();
    await marker.locator(".text", { hasText: `The summary ${tag}` }).waitFor();
    await page.waitForFunction(() => document.querySelectorAll("li.compaction .compacted li.message").length === 4);
    return marker.locator(".compacted li.message .text").allTextContents();
  };
  const summarised = [`One ${tag}`, `Echo: One ${tag}`, `Two ${tag}`, `Echo: Two ${tag}`];
  assert.deepEqual(await opened(), summarised);
  await shot(page, "compaction");
  // Later turns go on after it; a reload shows it where it was written.
  await turn(page, `Three ${tag}`);
  await page.reload();
  await answerRow(page, `Echo: Three ${tag}`).waitFor();
  assert.deepEqual(await opened(), summarised);
  assert.deepEqual(errors, []);
  await page.close();
});

// ---- uncertain sends (seed "Recover an uncertain send"), through a proxy that loses what it is told ----

const isPrompt = (r, tag) => r.method === "POST" && r.path.endsWith("/commands") && r.body.includes(tag);
const isApi = (r) => r.path.startsWith("/agents/");
/** The Session's `user` messages and queued prompts whose text is `text`. */
async function copies(agent, sessionId, text) {
  const read = (await h.api("GET", `/agents/${agent}/sessions/${sessionId}?limit=200`)).json;
  return [...read.messages.filter((m) => m.role === "user"), ...read.pending, ...(read.running ? [read.running] : [])].filter((m) => m.text === text).length;
}
const kept = (page) => page.evaluate(() => JSON.parse(sessionStorage.getItem("shiitake.unsure") ?? "[]"));

/** Resolves once `predicate()` holds (polled). */
async function until(predicate, what, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test("a send whose answer is lost is not sent again: the Session has the prompt once, and the composer stays empty", T, async () => {
  const proxy = await startLossyProxy(origin);
  try {
    const tag = uniq("lost-answer");
    const text = `Only once ${tag}`;
    const { page, agent, sessionId, errors } = await signedIn(newAgent(), proxy.url);
    // The service admits it; its answer never reaches the page.
    proxy.lose = (r) => (isPrompt(r, tag) ? "answer" : undefined);
    await send(page, text);
    await until(() => proxy.lost.length > 0, "the lost answer");
    assert.ok(proxy.lost.every((l) => l.what === "answer" && l.status === 200), "the service answered and the answer was lost");
    // The page is done with it (no request in flight, nothing kept to recover)...
    await page.waitForFunction(() => !document.getElementById("send").disabled && sessionStorage.getItem("shiitake.unsure") === null);
    await page.locator("li.message.assistant", { hasText: `Echo: ${text}` }).waitFor();
    // ... and offers nothing to send again: a person sends what the composer holds.
    const offered = await page.inputValue("#prompt");
    await page.getByLabel("Message", { exact: true }).press("Enter");
    await until(async () => {
      const read = (await h.api("GET", `/agents/${agent}/sessions/${sessionId}`)).json;
      return read.running === null && read.pending.length === 0;
    }, "an idle Session");
    assert.equal(await copies(agent, sessionId, text), 1, "the prompt is in the Session once");
    assert.equal(offered, "", "not restored as a draft: it was sent");
    assert.equal(h.model.requests(tag).length, 1, "it ran once");
    assert.equal(await page.locator("li.message.user", { hasText: text }).count(), 1);
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await proxy.close();
  }
});

test("a send that never reached the Session comes back as a draft once withdraw fenced it; sending it again is a new request", T, async () => {
  const proxy = await startLossyProxy(origin);
  try {
    const tag = uniq("lost-request");
    const text = `Never arrived ${tag}`;
    const { page, agent, sessionId } = await signedIn(newAgent(), proxy.url);
    proxy.lose = (r) => (isPrompt(r, tag) ? "request" : undefined);
    await send(page, text);
    await page.waitForFunction((t) => document.getElementById("prompt").value === t, text);
    await page.getByText("Not sent: the Session never received it; it is back in the composer.").waitFor();
    await shot(page, "fenced-draft");
    const fence = proxy.seen.find((r) => r.path.endsWith("/withdraw"));
    assert.equal(fence?.status, 200, "the draft came back after a withdraw answered");
    assert.deepEqual(await kept(page), []);
    assert.equal(await copies(agent, sessionId, text), 0);
    // The lost request, arriving late, is refused: the fence is durable.
    const late = JSON.parse(proxy.lost[0].body);
    const replay = await h.api("POST", `/agents/${agent}/sessions/${sessionId}/commands`, late);
    assert.equal(replay.status, 409);
    assert.equal(replay.json.error.code, "request_withdrawn");
    // The user sends it again: a new requestId, admitted.
    proxy.lose = () => undefined;
    await page.getByLabel("Message", { exact: true }).press("Enter");
    await page.locator("li.message.assistant", { hasText: `Echo: ${text}` }).waitFor();
    const read = (await h.api("GET", `/agents/${agent}/sessions/${sessionId}`)).json;
    const user = read.messages.filter((m) => m.role === "user" && m.text === text);
    assert.equal(user.length, 1);
    assert.notEqual(user[0].requestId, late.requestId);
    await page.close();
  } finally {
    await proxy.close();
  }
});

test("uncertain sends survive a reload while the service is unreachable; when it returns, the sent one shows as sent and the other comes back", T, async () => {
  const proxy = await startLossyProxy(origin);
  try {
    const a = uniq("before-reload");
    const b = uniq("while-down");
    const first = `Admitted ${a}`;
    const second = `Lost ${b}`;
    const { page, agent, sessionId } = await signedIn(newAgent(), proxy.url);
    let down = false;
    let allow = () => false;
    proxy.lose = (r) => {
      if (down && isApi(r) && !allow(r)) return "request";
      if (!isPrompt(r, a)) return undefined;
      // The first prompt commits; then the service is unreachable (the watch too).
      down = true;
      proxy.cut(r.socket);
      return "answer";
    };
    await send(page, first);
    await page.locator("#unsure li", { hasText: `Not confirmed yet, checking: ${first}` }).waitFor();
    // Sent while the first is uncertain: neither is lost.
    await send(page, second);
    await page.locator("#unsure li", { hasText: `Not confirmed yet, checking: ${second}` }).waitFor();
    await shot(page, "unconfirmed");
    const before = await kept(page);
    assert.deepEqual(before.map((k) => k.text), [first, second]);

    await page.reload();
    await page.waitForFunction((id) => document.getElementById("session-title").textContent === id, sessionId);
    await page.waitForFunction(() => document.getElementById("unsure").children.length === 2);
    assert.deepEqual(await kept(page), before, "the tab kept both, with their requestIds");
    assert.equal(await page.inputValue("#prompt"), "", "nothing restored while the outcome is unknown");

    // The service comes back for withdraw alone (no watch yet): recovery settles both.
    allow = (r) => r.path.endsWith("/withdraw");
    await page.waitForFunction((t) => document.getElementById("prompt").value === t, second);
    assert.deepEqual(await kept(page), []);
    const withdrawn = proxy.seen.filter((r) => r.path.endsWith("/withdraw") && r.status === 200);
    assert.ok(withdrawn.length >= 2, "both settled by withdraw");
    assert.equal(await copies(agent, sessionId, first), 1, "the first is in the Session once");
    assert.equal(await copies(agent, sessionId, second), 0, "the second never arrived");

    down = false;
    await page.locator("li.message.assistant", { hasText: `Echo: ${first}` }).waitFor();
    await shot(page, "recovered");
    assert.equal(await page.locator("li.message.user", { hasText: first }).count(), 1);
    assert.equal(h.model.requests(a).length, 1, "it ran once");
    assert.equal(await page.inputValue("#prompt"), second);
    await page.close();
  } finally {
    await proxy.close();
  }
});

test("at most 8 sends wait for their outcome: a ninth stays in the composer, and none is lost", T, async () => {
  const proxy = await startLossyProxy(origin);
  try {
    const tag = uniq("bound");
    const { page, agent, sessionId } = await signedIn(newAgent(), proxy.url);
    let down = true;
    proxy.lose = (r) => (down && isApi(r) ? "request" : undefined);
    const texts = Array.from({ length: 9 }, (_, i) => `Prompt ${i + 1} ${tag}`);
    for (const [i, text] of texts.slice(0, 8).entries()) {
      await send(page, text);
      await page.waitForFunction((n) => document.getElementById("unsure").children.length === n, i + 1);
    }
    await send(page, texts[8]);
    await page.getByText("8 sends are still unconfirmed; this one stays here until the service answers.").waitFor();
    assert.equal(await page.inputValue("#prompt"), texts[8]);
    assert.equal((await kept(page)).length, 8);
    down = false;
    // None arrived: each comes back, oldest first, after what was typed.
    await page.waitForFunction(() => document.getElementById("unsure").children.length === 0);
    assert.equal(await page.inputValue("#prompt"), [texts[8], ...texts.slice(0, 8)].join("\n\n"));
    for (const text of texts) assert.equal(await copies(agent, sessionId, text), 0);
    await page.close();
  } finally {
    await proxy.close();
  }
});

test("a regenerate whose answer is lost, the service then out of reach, is kept and confirmed by withdraw; it runs once", T, async () => {
  const proxy = await startLossyProxy(origin);
  try {
    const tag = uniq("lost-retry");
    const { page, agent, sessionId, errors } = await signedIn(newAgent(), proxy.url);
    await turn(page, `Ask ${tag}`);
    h.model.scriptFor(`Ask ${tag}`, { text: `Again ${tag}` });
    let down = false;
    let allow = () => false;
    proxy.lose = (r) => {
      if (down && isApi(r) && !allow(r)) return "request";
      if (!(r.method === "POST" && r.path.endsWith("/commands") && r.body.includes('"type":"retry"'))) return undefined;
      // The retry commits, its answer is lost, and the service (the watch
      // too) is out of reach: only withdraw can tell.
      down = true;
      proxy.cut(r.socket);
      return "answer";
    };
    await answerRow(page, `Echo: Ask ${tag}`).getByRole("button", { name: "Regenerate" }).click();
    await page.locator("#unsure li", { hasText: `Not confirmed yet, checking: regenerate the answer to: Ask ${tag}` }).waitFor();
    assert.deepEqual((await kept(page)).map((k) => [k.kind, k.entryId]), [["retry", (await h.api("GET", `/agents/${agent}/sessions/${sessionId}`)).json.messages[0].entryId]]);
    allow = (r) => r.path.endsWith("/withdraw");
    await page.getByText(/^Sent: the Session has your regenerate request \(cmd_\w+\)\.$/).waitFor();
    assert.ok(proxy.seen.some((r) => r.path.endsWith("/withdraw") && r.status === 200), "settled by withdraw");
    assert.deepEqual(await kept(page), []);
    down = false;
    await answerRow(page, `Again ${tag}`).locator(".branch-at", { hasText: "2/2" }).waitFor();
    assert.equal(h.model.requests(`Ask ${tag}`).length, 2, "the first answer and one regenerate");
    const user = (await h.api("GET", `/agents/${agent}/sessions/${sessionId}`)).json.messages[0];
    assert.equal((await h.api("GET", `/agents/${agent}/sessions/${sessionId}/branches?entryId=${user.entryId}`)).json.count, 2, "two answers, not three");
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await proxy.close();
  }
});

test("a branch switch that never reached the Session is said not done once withdraw fenced it; arriving late, it is refused", T, async () => {
  const proxy = await startLossyProxy(origin);
  try {
    const tag = uniq("lost-select");
    const { page, agent, sessionId } = await signedIn(newAgent(), proxy.url);
    await turn(page, `Hello ${tag}`);
    h.model.scriptFor(`Hello ${tag}`, { text: `Hi again ${tag}` });
    await answerRow(page, `Echo: Hello ${tag}`).getByRole("button", { name: "Regenerate" }).click();
    const fresh = answerRow(page, `Hi again ${tag}`);
    await fresh.locator(".branch-at", { hasText: "2/2" }).waitFor();
    proxy.lose = (r) => (r.method === "POST" && r.path.endsWith("/commands") && r.body.includes('"type":"select"') ? "request" : undefined);
    await fresh.getByRole("button", { name: "Previous branch" }).click();
    await page.getByText("Not done: the Session never received the branch switch; do it again if you still want it.").waitFor();
    assert.deepEqual(await kept(page), []);
    const late = JSON.parse(proxy.lost[0].body);
    assert.equal((await h.api("POST", `/agents/${agent}/sessions/${sessionId}/commands`, late)).json.error.code, "request_withdrawn");
    assert.deepEqual(await serverTexts(agent, sessionId), [`Hello ${tag}`, `Hi again ${tag}`]);
    // Done again: a new request.
    proxy.lose = () => undefined;
    await fresh.getByRole("button", { name: "Previous branch" }).click();
    await answerRow(page, `Echo: Hello ${tag}`).locator(".branch-at", { hasText: "1/2" }).waitFor();
    await page.close();
  } finally {
    await proxy.close();
  }
});

test("an edit that never reached the Session comes back to the composer still an edit; Send resends it after the same message", T, async () => {
  const proxy = await startLossyProxy(origin);
  try {
    const tag = uniq("lost-edit");
    const { page, agent, sessionId } = await signedIn(newAgent(), proxy.url);
    await turn(page, `Keep ${tag}`);
    await turn(page, `Change ${tag}`);
    proxy.lose = (r) => (isPrompt(r, `Changed ${tag}`) ? "request" : undefined);
    await userRow(page, `Change ${tag}`).getByRole("button", { name: "Edit" }).click();
    await send(page, `Changed ${tag}`);
    await page.getByText("Not sent: the Session never received it; it is back in the composer.").waitFor();
    assert.equal(await page.inputValue("#prompt"), `Changed ${tag}`);
    assert.equal(await page.getByText("Editing a message").isVisible(), true);
    const late = JSON.parse(proxy.lost[0].body);
    assert.equal(late.after, (await h.api("GET", `/agents/${agent}/sessions/${sessionId}`)).json.messages[1].entryId, "sent after the answer before the edited message");
    assert.deepEqual((await h.api("POST", `/agents/${agent}/sessions/${sessionId}/commands`, late)).json.error.code, "request_withdrawn");
    proxy.lose = () => undefined;
    await page.getByLabel("Message", { exact: true }).press("Enter");
    await userRow(page, `Changed ${tag}`).locator(".branch-at", { hasText: "2/2" }).waitFor();
    await answerRow(page, `Echo: Changed ${tag}`).waitFor();
    assert.deepEqual(await serverTexts(agent, sessionId), [`Keep ${tag}`, `Echo: Keep ${tag}`, `Changed ${tag}`, `Echo: Changed ${tag}`]);
    await page.close();
  } finally {
    await proxy.close();
  }
});
