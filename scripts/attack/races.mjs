#!/usr/bin/env node
// Concurrency races against the built demo Worker in Miniflare (a real
// SQLite-backed Durable Object, persisted so fences are checked again after
// a restart). Each race is `--rounds` rounds; `--width` requests race at once.
//
//   node scripts/attack/races.mjs [--rounds 20] [--width 200] [--seed S] [--short]
//
// 1. duplicates: `width` identical admissions (same requestId, same body):
//    every answer is the same receipt and the Session holds one command.
// 2. conflicts: `width` admissions under one requestId with 2..5 distinct
//    texts: the copies of exactly one text are admitted (all the same
//    receipt), every other answer is 409 request_conflict.
// 3. withdraw/admit: per requestId, admits and withdraws in random order: it
//    ends either admitted (every withdraw answers `accepted` with its
//    commandId) or fenced (every admit 409 request_withdrawn, every withdraw
//    `unknown`), never both; after a restart a fenced one is still refused
//    and an admitted one still replays.
// 4. cancel vs claim: A runs, B waits; `cancel A` (whose settling write claims
//    B) races `cancel B {onlyIfPending}`: either B is cancelled and never
//    starts, or the cancel is `too_late` and B is running.
// Exits 1 on any violation.

import { performance } from "node:perf_hooks";
import { describe, startWorker } from "../../tests/e2e/helpers.mjs";
import { parseArgs, random, seedOf, sleep, table, Violations } from "./lib.mjs";

const USAGE = "node scripts/attack/races.mjs [--rounds N] [--width W] [--seed S] [--short]";
const args = parseArgs(process.argv.slice(2), { rounds: 20, width: 200, seed: 0, short: false }, USAGE);
if (args.short) args.rounds = Math.min(args.rounds, 3);
if (args.rounds < 1 || args.width < 2) {
  console.error(`--rounds must be at least 1 and --width at least 2\nusage: ${USAGE}`);
  process.exit(2);
}
const seed = seedOf(args);
const rand = random(seed);
const v = new Violations("races");
const figures = { duplicates: 0, conflicts: 0, withdrawAdmitted: 0, withdrawFenced: 0, cancelWon: 0, claimWon: 0, requests: 0 };
console.log(`races: rounds ${args.rounds}, width ${args.width}, seed ${seed}`);

/** Every command of the Session under `requestId`, as commandIds seen in running, pending and user/operator messages. */
async function commandsOf(a, sid, requestId) {
  const page = await a.read(sid, { limit: "200" });
  const ids = [];
  if (page.running?.requestId === requestId) ids.push(["running", page.running.commandId]);
  for (const p of page.pending) if (p.requestId === requestId) ids.push(["pending", p.commandId]);
  for (const m of page.messages) if (m.requestId === requestId && (m.role === "user" || m.role === "operator")) ids.push([m.role, m.commandId]);
  return ids;
}

/** Fires all `thunks` at once (after one tick, so none gets a head start). */
async function all(thunks) {
  figures.requests += thunks.length;
  await sleep(0);
  return Promise.all(thunks.map((f) => f()));
}

const h = await startWorker({ persist: true, model: "hold" });
const t0 = performance.now();
try {
  // 1. duplicates
  for (let r = 0; r < args.rounds; r++) {
    const a = h.agent();
    const sid = await a.createSession("dup");
    if (r % 2 === 1) await a.occupy(sid); // odd rounds: the prompt queues instead of starting
    const body = { type: "prompt", requestId: "same", text: `duplicate admission, round ${r}` };
    const answers = await all(Array.from({ length: args.width }, () => () => a.command(sid, body)));
    const first = answers[0];
    v.check(first.status === 200 && first.json?.status === "accepted", () => `duplicates round ${r}: first answer ${describe(first)}`);
    const differing = answers.filter((x) => x.status !== first.status || x.text !== first.text);
    v.check(differing.length === 0, () => `duplicates round ${r}: ${differing.length} answers differ from ${describe(first)}, e.g. ${describe(differing[0])}`);
    const held = await commandsOf(a, sid, "same");
    const distinct = new Set(held.map(([, id]) => id));
    v.check(distinct.size === 1 && distinct.has(first.json?.commandId), () => `duplicates round ${r}: Session holds ${JSON.stringify(held)}, receipt ${first.text}`);
    v.check(held.filter(([k]) => k !== "user").length <= 1, () => `duplicates round ${r}: queued more than once: ${JSON.stringify(held)}`);
    await a.abort(sid);
    figures.duplicates++;
  }

  // 2. conflicts
  for (let r = 0; r < args.rounds; r++) {
    const a = h.agent();
    const sid = await a.createSession("conflict");
    if (r % 2 === 1) await a.occupy(sid);
    const texts = Array.from({ length: 2 + rand.int(4) }, (_, i) => `conflicting text ${i}, round ${r}`);
    const order = Array.from({ length: args.width }, (_, i) => texts[i % texts.length]);
    const sent = rand.shuffle(order);
    const answers = await all(sent.map((text) => () => a.prompt(sid, "contested", text)));
    const admitted = answers.map((x, i) => [x, sent[i]]).filter(([x]) => x.status === 200);
    const winners = new Set(admitted.map(([, t]) => t));
    const receipts = new Set(admitted.map(([x]) => x.text));
    v.check(winners.size === 1 && receipts.size === 1, () => `conflicts round ${r}: admitted texts ${JSON.stringify([...winners])}, receipts ${JSON.stringify([...receipts])}`);
    const [winner] = winners;
    for (const [i, x] of answers.entries()) {
      if (sent[i] === winner) v.check(x.status === 200, () => `conflicts round ${r}: a copy of the admitted text answered ${describe(x)}`);
      else v.check(x.status === 409 && x.json?.error?.code === "request_conflict", () => `conflicts round ${r}: other text answered ${describe(x)}`);
    }
    const held = await commandsOf(a, sid, "contested");
    v.check(new Set(held.map(([, id]) => id)).size === 1, () => `conflicts round ${r}: Session holds ${JSON.stringify(held)}`);
    const page = await a.read(sid);
    const where = [page.running, ...page.pending, ...page.messages].find((x) => x?.requestId === "contested");
    v.check(where?.text === winner, () => `conflicts round ${r}: Session holds text ${JSON.stringify(where?.text)}, admitted ${JSON.stringify(winner)}`);
    await a.abort(sid);
    figures.conflicts++;
  }

  // 3. withdraw/admit
  // One Session per round: a Session queues at most 64 prompts.
  const fenceA = h.agent();
  const ends = new Map(); // requestId -> {sid, commandId} | {sid, fenced: true}
  for (let r = 0; r < args.rounds; r++) {
    const fenceSid = await fenceA.createSession(`fences-${r}`);
    await fenceA.occupy(fenceSid);
    const perRound = 10;
    const jobs = [];
    const answersOf = new Map();
    for (let k = 0; k < perRound; k++) {
      const requestId = `wa-${r}-${k}`;
      const text = `withdraw race ${requestId}`;
      answersOf.set(requestId, { admits: [], withdraws: [], text });
      const n = Math.max(2, Math.floor(args.width / perRound));
      for (let j = 0; j < n; j++) {
        const admit = rand.chance(0.5);
        jobs.push(async () => {
          await sleep(rand.int(3));
          const res = admit ? await fenceA.prompt(fenceSid, requestId, text) : await fenceA.withdraw(fenceSid, requestId);
          answersOf.get(requestId)[admit ? "admits" : "withdraws"].push(res);
        });
      }
    }
    await all(rand.shuffle(jobs));
    for (const [requestId, { admits, withdraws }] of answersOf) {
      const ok = admits.filter((x) => x.status === 200);
      const fenced = admits.filter((x) => x.status === 409 && x.json?.error?.code === "request_withdrawn");
      const odd = admits.filter((x) => !ok.includes(x) && !fenced.includes(x));
      v.check(odd.length === 0, () => `withdraw/admit ${requestId}: admit answered ${describe(odd[0])}`);
      const unknown = withdraws.filter((x) => x.status === 200 && x.json?.status === "unknown");
      const accepted = withdraws.filter((x) => x.status === 200 && x.json?.status === "accepted");
      v.check(unknown.length + accepted.length === withdraws.length, () => `withdraw/admit ${requestId}: withdraw answered ${describe(withdraws.find((x) => !unknown.includes(x) && !accepted.includes(x)))}`);
      if (ok.length > 0) {
        const ids = new Set([...ok.map((x) => x.json.commandId), ...accepted.map((x) => x.json.commandId)]);
        v.check(fenced.length === 0 && unknown.length === 0 && ids.size === 1, () => `withdraw/admit ${requestId}: both admitted (${ok.length}) and fenced (${fenced.length} refused admits, ${unknown.length} "unknown" withdraws), commandIds ${[...ids]}`);
        ends.set(requestId, { sid: fenceSid, commandId: ok[0].json.commandId });
        figures.withdrawAdmitted++;
      } else {
        v.check(accepted.length === 0, () => `withdraw/admit ${requestId}: withdraw says accepted but no admit succeeded`);
        ends.set(requestId, { sid: fenceSid, fenced: true });
        figures.withdrawFenced++;
      }
    }
  }
  // The fences and admissions hold after a restart.
  await h.restart();
  for (const [requestId, end] of ends) {
    const res = await fenceA.prompt(end.sid, requestId, `withdraw race ${requestId}`);
    if (end.fenced) v.check(res.status === 409 && res.json?.error?.code === "request_withdrawn", () => `after restart, fenced ${requestId} answered ${describe(res)}`);
    else v.check(res.status === 200 && res.json?.commandId === end.commandId, () => `after restart, admitted ${requestId} answered ${describe(res)} (was ${end.commandId})`);
    const held = await commandsOf(fenceA, end.sid, requestId);
    if (end.fenced) v.check(held.length === 0, () => `fenced ${requestId} is in the Session: ${JSON.stringify(held)}`);
    else v.check(held.length === 1 && held[0][1] === end.commandId, () => `admitted ${requestId}: Session holds ${JSON.stringify(held)}`);
  }
  for (const sid of new Set([...ends.values()].map((e) => e.sid))) await fenceA.abort(sid);

  // 4. cancel vs claim
  for (let r = 0; r < args.rounds; r++) {
    const a = h.agent();
    const sid = await a.createSession("claim");
    const A = await a.occupy(sid);
    const B = await a.admit(sid, "b", "the prompt behind");
    const [, cb] = await all(
      rand.shuffle([
        async () => ["a", await (sleep(rand.int(8)).then(() => a.cancel(sid, A)))],
        async () => ["b", await (sleep(rand.int(8)).then(() => a.cancel(sid, B, { onlyIfPending: true })))],
      ]),
    ).then((xs) => [xs.find(([k]) => k === "a")[1], xs.find(([k]) => k === "b")[1]]);
    const settledA = await a.waitSettled(sid, A, { boundMs: 10_000 });
    v.check(settledA.terminal === "cancelled", () => `cancel/claim round ${r}: A settled ${JSON.stringify(settledA)}`);
    const page = await a.read(sid);
    const bStarted = page.messages.some((m) => m.commandId === B && m.role === "user");
    const bSettlement = (await a.settlement(sid, B)).json;
    if (cb.status === 200 && cb.json?.status === "cancelled") {
      v.check(bSettlement?.terminal === "cancelled", () => `cancel/claim round ${r}: B cancelled but settlement ${JSON.stringify(bSettlement)}`);
      v.check(!bStarted && page.running?.commandId !== B, () => `cancel/claim round ${r}: B was cancelled while pending yet it started`);
      figures.cancelWon++;
    } else if (cb.status === 200 && cb.json?.status === "too_late") {
      v.check(bStarted && page.running?.commandId === B && bSettlement === null, () => `cancel/claim round ${r}: too_late but B is not running: ${JSON.stringify({ running: page.running, bSettlement })}`);
      figures.claimWon++;
      const aborted = await a.abort(sid);
      v.check(aborted.status === 200, () => `cancel/claim round ${r}: abort answered ${describe(aborted)}`);
      const after = await a.waitSettled(sid, B, { boundMs: 10_000 });
      v.check(after.terminal === "cancelled", () => `cancel/claim round ${r}: B after abort ${JSON.stringify(after)}`);
    } else {
      v.add(`cancel/claim round ${r}: cancel B answered ${describe(cb)}`);
    }
  }
} catch (error) {
  v.add(`aborted by an error: ${error.stack ?? error}`);
} finally {
  await h.dispose();
}

table(`races: ${((performance.now() - t0) / 1000).toFixed(1)} s, seed ${seed}`, [
  ["requests raced", figures.requests],
  ["duplicate rounds (one command each)", figures.duplicates],
  ["conflict rounds (one text admitted)", figures.conflicts],
  ["withdraw/admit: ended admitted", figures.withdrawAdmitted],
  ["withdraw/admit: ended fenced", figures.withdrawFenced],
  ["cancel vs claim: cancel won", figures.cancelWon],
  ["cancel vs claim: claim won (too_late)", figures.claimWon],
  ["violations", v.list.length],
]);
v.finish(`node scripts/attack/races.mjs --rounds ${args.rounds} --width ${args.width} --seed ${seed}`);
