// Budgets that hold (issue 38 item 3, measured): 16 Sessions of one Agent
// run at once under the Agent's daily budget (SHIITAKE_BUDGET_DAILY_TOKENS),
// each with several prompts queued, while the runtime is killed with
// SIGKILL (Miniflare's restart) in the middle of streamed answers, until
// every Session's turns have completed or its turn is paused with
// `budget_reached`. What the provider would bill is counted on the scripted
// model server's side: input and output of every answer it completed, and
// the input of every request it did not complete (a provider bills a
// cut-off request's input). Overspend, what it billed past the budget, is
// at most one call's worth per Session (src/budget.rs: each Session has one
// call in flight, charged its estimate before it is sent), as long as a
// cut-off call's estimate covers its input: it counts the instructions and
// tools the call sends, so kills in first calls stay within it too. No turn settles
// twice: each completed prompt has one answer, each call is in the usage
// ledger once, and a prompt behind a paused turn never reached the model.
import assert from "node:assert/strict";
import { test } from "node:test";
import { clearOfMidnight, eventually, uniq, useWorker } from "./helpers.mjs";

const SESSIONS = 16;
const PROMPTS = 5;
/** The Agent's daily budget: about half of what the prompts would cost unbounded. */
const BUDGET = 46_000;
/** Instructions of ~300 tokens: in every call's input, which a first call's estimate does not know (src/run/context.rs `estimate`). */
const INSTRUCTIONS = "You are a careful assistant. ".repeat(40);

// A host offering no tools: the scripted server bills a request's messages
// and instructions (characters / 4) and, unlike a provider, not the tools
// offered, which the budget's estimate of a call counts.
const h = useWorker({
  persist: true,
  fixture: "rpc-worker",
  model: "echo",
  bindings: { SHIITAKE_INSTRUCTIONS: INSTRUCTIONS, SHIITAKE_BUDGET_DAILY_TOKENS: BUDGET, SHIITAKE_RETRY_BASE_MS: 50, SHIITAKE_RETRY_MAX_MS: 400 },
});

const T = { timeout: 240_000 };

/** An answer of ~100 tokens (as the server counts them: characters / 4), streamed over ~0.5 s. */
const ANSWER = { chunks: Array.from({ length: 10 }, (_, i) => `chunk ${i} of a streamed answer, forty chars. `), chunkDelayMs: 50 };

/** An answer cut off by a kill: three of its chunks, then nothing until the runtime dies. */
const CUT = { hang: true, chunks: ANSWER.chunks.slice(0, 3), chunkDelayMs: ANSWER.chunkDelayMs };

/** What the provider bills for a request: its usage when it answered in full, else its input (the server's count of it). */
const billed = (r) => (r.usage ? r.usage.prompt_tokens + r.usage.completion_tokens : r.tokens);

/**
 * Runs the Sessions of a fresh Agent to the budget, killing the runtime
 * once in the answers to each prompt `kills` lists (0: the first), and
 * checks what it billed and what it settled.
 */
async function scenario(kills) {
  // The daily budget's day must not end mid-scenario (about 10 s).
  await clearOfMidnight(30_000);
  const a = h.agent();
  let before = h.model.requests().length;
  const sessions = Array.from({ length: SESSIONS }, (_, i) => ({ id: `s${String(i).padStart(2, "0")}`, tag: uniq(`budget-${i}`), prompts: [] }));
  for (const s of sessions) {
    await a.createSession(s.id);
    // A call for a prompt a kill falls in is cut off mid-stream (it hangs there until the kill); the call after it answers.
    h.model.scriptFor(s.tag, ...Array.from({ length: PROMPTS }, (_, k) => [...kills.filter((w) => w === k).map(() => CUT), ANSWER]).flat());
  }
  const ours = (r) => sessions.some((s) => JSON.stringify(r.body).includes(s.tag));
  for (let k = 0; k < PROMPTS; k++) {
    for (const s of sessions) {
      const text = `${s.tag} prompt ${k}: say something`;
      s.prompts.push({ text, commandId: await a.admit(s.id, `p${k}`, text) });
    }
  }

  // Kill -9 while every Session is in the middle of a streamed answer to
  // prompt k (a context of k answers).
  const answersIn = (r) => r.body.messages.filter((m) => m.role === "assistant").length;
  for (const k of kills) {
    await h.model.waitFor((all) => all.slice(before).filter((r) => ours(r) && answersIn(r) === k && r.outcome === "hanging").length === SESSIONS, {
      timeoutMs: 30_000,
      what: `a kill in the answers to prompt ${k}`,
    });
    before = h.model.requests().length;
    await h.restart();
    assert.equal((await a.api("GET", "/inbox")).status, 200, "wakes the Agent");
  }

  // Every Session settles down: its turns completed, or its turn paused by the budget.
  const quiet = async () => {
    if (h.model.requests(ours).some((r) => ["receiving", "streaming", "hanging"].includes(r.outcome))) return null;
    const reads = [];
    for (const s of sessions) {
      const read = await a.read(s.id, { limit: "100" });
      if (read.running ? read.running.paused?.reason !== "budget_reached" : read.pending.length > 0) return null;
      reads.push(read);
    }
    return reads;
  };
  const reads = await eventually(quiet, { timeoutMs: 120_000, intervalMs: 200, what: "every Session's turns completed or paused by the budget" });

  // What the provider would bill, by the model server's records, and what the budget charged.
  const records = h.model.requests(ours);
  const cutOff = records.filter((r) => !r.usage);
  assert.ok(
    cutOff.every((r) => r.aborted),
    `a call not answered in full was cut off by a kill: ${JSON.stringify(cutOff.map((r) => [r.seq, r.outcome]))}`,
  );
  assert.equal(cutOff.length, kills.length * SESSIONS, "each kill cut every Session's call off");
  const total = records.reduce((n, r) => n + billed(r), 0);
  const largest = Math.max(...records.map(billed));
  const overspend = total - BUDGET;
  const cutInput = cutOff.reduce((n, r) => n + r.tokens, 0);
  const paused = reads.filter((r) => r.running).length;
  const ledger = (await a.api("GET", "/usage?groupBy=session&limit=100")).json;
  const budget = (await a.api("GET", "/budget")).json;
  // The counter holds the answers' reported tokens and each cut-off call's estimate (nothing is in flight).
  const reported = ledger.totals.inputTokens + ledger.totals.outputTokens;
  const estimates = budget.spent - reported;
  console.log(
    `# kills in the answers to prompts ${kills.join(", ")}: budget ${BUDGET}; billed ${total} (${records.length} calls: ` +
      `${records.length - cutOff.length} answered, ${cutOff.length} cut off, their input ${cutInput}); ` +
      `overspend ${overspend} = ${(overspend / largest).toFixed(2)} calls' worth (largest call ${largest}; bound ${SESSIONS} x ${largest} = ${SESSIONS * largest}); ` +
      `the budget's counter ${budget.spent} = reported ${reported} + cut-off calls' estimates ${estimates} (${cutInput - estimates} below their input); ` +
      `${paused} of ${SESSIONS} Sessions paused; the tools offered, which neither counts: ~${Math.ceil(JSON.stringify(records[0].body.tools ?? []).length / 4)} tokens a call`,
  );
  assert.equal(budget.tokens, BUDGET);
  assert.ok(estimates >= 0, JSON.stringify(budget));
  assert.ok(paused > 0, "the budget was reached");

  // Each turn completed once or is paused; a prompt behind a paused turn never reached the model.
  const inbox = (await a.api("GET", "/inbox?limit=100")).json;
  for (const [i, s] of sessions.entries()) {
    const read = reads[i];
    const settled = [];
    for (const p of s.prompts) {
      const res = await a.settlement(s.id, p.commandId, 0);
      assert.equal(res.status, 200, res.text);
      settled.push(res.json?.terminal ?? null);
    }
    const done = settled.filter((t) => t === "completed").length;
    assert.deepEqual(settled, [...Array(done).fill("completed"), ...Array(PROMPTS - done).fill(null)], `${s.id}: its prompts complete in order`);
    const answers = read.messages.filter((m) => m.role === "assistant");
    assert.equal(answers.length, done, `${s.id}: one answer per completed prompt`);
    for (const m of answers) assert.equal(m.text, ANSWER.chunks.join(""), `${s.id}: an answer whole`);
    const asked = records.filter((r) => JSON.stringify(r.body).includes(s.tag));
    if (read.running) {
      const p = s.prompts[done];
      assert.equal(read.running.commandId, p.commandId, `${s.id}: the turn after its completed ones is paused`);
      assert.equal(read.running.paused.budget.scope, "agent", JSON.stringify(read.running));
      assert.equal(read.running.paused.budget.tokens, BUDGET);
      const row = inbox.sessions.find((r) => r.sessionId === s.id);
      assert.equal(row?.state, "needs_you", `${s.id} in the inbox: ${JSON.stringify(row)}`);
      assert.equal(row.paused.reason, "budget_reached");
      assert.equal(row.paused.commandId, undefined, "served as the read serves it");
      for (const later of s.prompts.slice(done + 1)) {
        assert.ok(!asked.some((r) => JSON.stringify(r.body).includes(later.text)), `${s.id}: a prompt behind the paused turn reached the model`);
      }
    } else assert.equal(done, PROMPTS, `${s.id}: idle with every prompt completed`);
    // The usage ledger counts each call the server saw once.
    const group = ledger.groups.find((g) => g.key === s.id);
    const answered = asked.filter((r) => r.usage);
    assert.deepEqual(
      [group?.calls, group?.answered, group?.unknown, group?.inputTokens, group?.outputTokens],
      [
        asked.length,
        answered.length,
        asked.length - answered.length,
        answered.reduce((n, r) => n + r.usage.prompt_tokens, 0),
        answered.reduce((n, r) => n + r.usage.completion_tokens, 0),
      ],
      `${s.id}: the ledger is what the server saw`,
    );
  }

  // Nothing moves at one more restart: no call, no settlement.
  const seen = h.model.requests().length;
  await h.restart();
  assert.deepEqual(await eventually(quiet, { timeoutMs: 10_000, what: "still quiet" }), reads);
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(h.model.requests().length, seen, "no call after the last restart");
  assert.deepEqual((await a.api("GET", "/usage?groupBy=session&limit=100")).json, ledger);

  assert.ok(overspend <= SESSIONS * largest, `overspend ${overspend} > ${SESSIONS} x the largest call (${largest})`);
}

test(`${SESSIONS} Sessions under one daily budget, killed in the answers to their first three prompts: overspend at most one call's worth per Session, no turn settled twice`, T, () => scenario([0, 1, 2]));

// A call with no answer before it to go by (a Session's first, or the
// first after a summary) is estimated with the instructions and the tools
// it sends (src/run/driver.rs `estimate`): before, its context's bytes
// alone, and each kill in first calls left the instructions uncharged for
// every Session (48 cut-off calls' input 14466 against estimates of 498;
// overspend 14942, past the bound of 14176).
test(
  `${SESSIONS} Sessions under one daily budget, killed three times in the answers to their first prompt: overspend at most one call's worth per Session`,
  T,
  () => scenario([0, 0, 0]),
);
