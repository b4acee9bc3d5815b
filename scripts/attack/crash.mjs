#!/usr/bin/env node
// Crash injection: runs the service under `wrangler dev` (the README's run
// command, with scripts/attack/crash-worker.mjs as the Worker so a tool's
// effect is recorded outside the killed processes), drives streamed turns and
// tool turns (the direct tool `record_effect` and `execute` calling it) in a
// few Sessions, and `kill -9`s wrangler's whole process group at random
// moments (on a timer, as a tool call arrives, or as a model call starts),
// then restarts it on the same persisted state. Admissions whose answer was
// lost in a kill are retried with the same requestId, as a client would.
//
//   node scripts/attack/crash.mjs [--cycles 15] [--seed S] [--sessions 4] [--short]
//
// The scripted model server and the effect log live in this process, which
// is never killed. After the last cycle it waits for every command to settle,
// then kills and restarts once more and checks nothing moved. Violations (exit
// 1): an admitted command never settles, or settles differently after a
// restart; a requestId replayed after the crashes answers another command; a
// command holds two answers; a tool call's effect is recorded twice, or a
// call ran that the transcript never recorded, or a call reported a result
// whose effect never happened. The seed fixes the schedule (prompt mix, kill
// moments), not the interleaving of the processes.

import { spawn } from "node:child_process";
import { appendFileSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { ROOT } from "../../tests/e2e/helpers.mjs";
import { startModelServer } from "../../tests/support/model-server.mjs";
import { parseArgs, random, seedOf, sleep, table, Violations } from "./lib.mjs";

const USAGE = "node scripts/attack/crash.mjs [--cycles N] [--seed S] [--sessions K] [--short] [--keep]";
const args = parseArgs(process.argv.slice(2), { cycles: 15, seed: 0, sessions: 4, short: false, keep: false }, USAGE);
if (args.short) args.cycles = Math.min(args.cycles, 4);
if (args.cycles < 1 || args.sessions < 1) {
  console.error(`--cycles and --sessions must be at least 1\nusage: ${USAGE}`);
  process.exit(2);
}
const seed = seedOf(args);
const rand = random(seed);
const v = new Violations("crash");
const TOKEN = "attack-token";
const AGENT = "crash";
/** Bounds: one start of the service, one request, the final wait for settlements. */
const START_MS = 60_000;
const REQUEST_MS = 15_000;
const SETTLE_MS = args.short ? 90_000 : 240_000;

if (!existsSync(path.join(ROOT, "build/wasm/shiitake.js"))) {
  console.error("build/wasm is missing: run `bash scripts/build.sh` first");
  process.exit(2);
}

const work = mkdtempSync(path.join(tmpdir(), "shiitake-crash-"));
const stateDir = path.join(work, "state");
const effectLog = path.join(work, "effects.jsonl");
const serviceLog = path.join(work, "wrangler.log");

// ---- what lives outside the killed processes ----

/** The effect server: appends each tool run to effectLog, then answers after a random delay (a window for kills). */
const effectEvents = [];
const effects = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    appendFileSync(effectLog, `${body.replace(/\n/g, " ")}\n`);
    for (const f of effectEvents.splice(0)) f();
    setTimeout(() => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{}");
    }, rand.int(300));
  });
});
await new Promise((r) => effects.listen(0, "127.0.0.1", r));
const effectUrl = `http://127.0.0.1:${effects.address().port}/effect`;

/** The model: streams answers slowly; `[tool]`/`[execute]` prompts call the tool first. */
const modelEvents = [];
let modelSeq = 0;
const model = await startModelServer({
  fallback(body) {
    for (const f of modelEvents.splice(0)) f();
    const seq = ++modelSeq;
    const messages = body.messages ?? [];
    const lastUser = [...messages].reverse().find((m) => m.role === "user");
    const userText = typeof lastUser?.content === "string" ? lastUser.content : JSON.stringify(lastUser?.content ?? "");
    const tag = /prompt (\S+)/.exec(userText)?.[1] ?? "unknown";
    const answer = (word) => ({ chunks: Array.from({ length: 8 }, (_, i) => (i === 0 ? `${word} ${tag} #${seq}` : ` part${i}`)), chunkDelayMs: 40 });
    if (messages.at(-1)?.role === "tool") return answer("Done");
    const offered = new Set((body.tools ?? []).map((t) => t.function?.name));
    const keys = Array.from({ length: 1 + (seq % 2) }, (_, i) => `fx-${tag}-${seq}-${i}`);
    if (userText.includes("[execute]") && offered.has("execute")) {
      const code = keys.map((k) => `await effects.record_effect({ key: "${k}" });`).join("\n");
      return { toolCalls: [{ name: "execute", arguments: { code: `${code}\nreturn "ok";` } }] };
    }
    if (userText.includes("[tool]") || userText.includes("[execute]")) {
      return { toolCalls: keys.map((key) => ({ name: "record_effect", arguments: { key } })) };
    }
    return answer("Answer");
  },
});

// ---- the service ----

async function freePort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

const port = await freePort();
const inspectorPort = await freePort();
const base = `http://127.0.0.1:${port}`;
let service; // {child, exited}

async function startService() {
  const log = openSync(serviceLog, "a");
  const wranglerArgs = [
    "dev", "--config", "scripts/attack/wrangler.toml", "--local", "--ip", "127.0.0.1", "--port", String(port),
    "--inspector-port", String(inspectorPort), "--persist-to", stateDir, "--show-interactive-dev-session=false",
    "--var", `SHIITAKE_TOKEN:${TOKEN}`, "--var", "SHIITAKE_MODEL:openai/scripted", "--var", `OPENAI_BASE_URL:${model.url}`,
    "--var", `EFFECT_URL:${effectUrl}`, "--var", "SHIITAKE_RETRY_BASE_MS:100", "--var", "SHIITAKE_RETRY_MAX_MS:1000",
  ];
  // Its own process group, so one kill -9 takes wrangler and workerd together.
  const child = spawn(path.join(ROOT, "node_modules/.bin/wrangler"), wranglerArgs, {
    cwd: ROOT, detached: true, stdio: ["ignore", log, log], env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
  });
  const exited = new Promise((r) => child.once("exit", r));
  service = { child, exited };
  const deadline = Date.now() + START_MS;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`wrangler exited (${child.exitCode}) during start; see ${serviceLog}`);
    try {
      const res = await fetch(`${base}/`, { signal: AbortSignal.timeout(2000) });
      if (res.ok) return;
    } catch {}
    if (Date.now() > deadline) throw new Error(`the service did not answer within ${START_MS} ms; see ${serviceLog}`);
    await sleep(100);
  }
}

// Stopped from outside (Ctrl-C, all.mjs's time bound): take the service down too.
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.once(signal, () => {
    if (service) {
      try {
        process.kill(-service.child.pid, "SIGKILL");
      } catch {}
    }
    console.error(`crash: stopped by ${signal}; state kept in ${work}`);
    process.exit(130);
  });
}

async function killService() {
  if (!service) return;
  try {
    process.kill(-service.child.pid, "SIGKILL");
  } catch {}
  await service.exited;
  service = undefined;
}

async function api(method, rel, body, { timeoutMs = REQUEST_MS } = {}) {
  try {
    const res = await fetch(`${base}/agents/${AGENT}${rel}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {}
    return { status: res.status, json, text };
  } catch (error) {
    return { status: 0, json: undefined, text: String(error.cause?.code ?? error.name ?? error) };
  }
}

// ---- the driver ----

const sessions = Array.from({ length: args.sessions }, (_, i) => `s${i}`);
/** requestId -> {sid, body, kind, commandId?} */
const admissions = new Map();
let admitSeq = 0;
const counts = { kills: 0, lostAnswers: 0, replays: 0 };

async function admit(entry) {
  const res = await api("POST", `/sessions/${entry.sid}/commands`, entry.body);
  if (res.status === 0) {
    counts.lostAnswers++; // killed mid-request: retried after the restart
    return;
  }
  if (res.status === 200 && res.json?.status === "accepted") {
    if (entry.commandId !== undefined && entry.commandId !== res.json.commandId) {
      v.add(`requestId ${entry.body.requestId} answered ${res.json.commandId}, earlier ${entry.commandId}`);
    }
    entry.commandId = res.json.commandId;
    return;
  }
  if (res.status === 429) {
    entry.full = true; // queue full: dropped, never admitted
    return;
  }
  if (res.status >= 500 && res.status !== 503) v.add(`admission ${entry.body.requestId} answered HTTP ${res.status} ${res.text.slice(0, 200)}`);
  // 500/503 while a killed instance restarts: retried.
}

function newAdmission(sid) {
  const kind = rand.pick(["stream", "stream", "tool", "tool", "execute"]);
  const requestId = `c${admitSeq++}`;
  const mark = kind === "tool" ? "[tool] " : kind === "execute" ? "[execute] " : "";
  const entry = { sid, kind, body: { type: "prompt", requestId, text: `${mark}prompt ${requestId}` } };
  admissions.set(requestId, entry);
  return entry;
}

/** Retries every admission whose answer a kill lost (same requestId, same body). */
async function retryUnanswered() {
  for (const entry of admissions.values()) {
    if (entry.commandId === undefined && !entry.full) await admit(entry);
  }
}

/** Resolves at a random moment of this cycle: a timer, or just after a tool call or model call arrives. */
function killMoment() {
  const mode = rand.pick(["timer", "effect", "model"]);
  const latest = 300 + rand.int(2700);
  const after = rand.int(120);
  return {
    mode,
    promise: new Promise((resolve) => {
      const timer = setTimeout(() => resolve("timer"), latest);
      if (mode === "timer") return;
      const queue = mode === "effect" ? effectEvents : modelEvents;
      setTimeout(() => queue.push(() => setTimeout(() => (clearTimeout(timer), resolve(mode)), after)), 150);
    }),
  };
}

const t0 = performance.now();
console.log(`crash: ${args.cycles} cycles, ${args.sessions} Sessions, seed ${seed}, state ${stateDir}`);
const killModes = new Map();
try {
  await startService();
  for (const sid of sessions) {
    const res = await api("POST", "/sessions", { sessionId: sid });
    if (res.status !== 201) throw new Error(`create ${sid}: HTTP ${res.status} ${res.text}`);
  }
  for (let cycle = 0; cycle < args.cycles; cycle++) {
    await retryUnanswered();
    const moment = killMoment();
    const inflight = [];
    let stop = false;
    // Each Session admits a few prompts at random moments until the kill.
    for (const sid of sessions) {
      inflight.push(
        (async () => {
          for (let k = 2 + rand.int(5); k > 0 && !stop; k--) {
            await sleep(rand.int(300));
            if (!stop) await admit(newAdmission(sid));
          }
        })(),
      );
    }
    const how = await moment.promise;
    stop = true;
    await killService();
    counts.kills++;
    killModes.set(how, (killModes.get(how) ?? 0) + 1);
    await Promise.all(inflight);
    process.stdout.write(`  cycle ${cycle + 1}/${args.cycles}: killed (${how}) after ${admissions.size} admissions\n`);
    await startService();
  }
  await retryUnanswered();
  await retryUnanswered();

  // Every admitted command settles.
  const settled = await settleAll(SETTLE_MS);
  const pages = await transcripts();
  // Once more: kill -9, restart, nothing may move.
  await killService();
  await startService();
  const again = await settleAll(10_000);
  for (const [requestId, s] of settled) {
    v.check(JSON.stringify(again.get(requestId)) === JSON.stringify(s), () => `${requestId}: settlement changed across a restart: ${JSON.stringify(s)} then ${JSON.stringify(again.get(requestId))}`);
  }
  const pagesAgain = await transcripts();
  for (const sid of sessions) {
    v.check(JSON.stringify(pagesAgain.get(sid).messages) === JSON.stringify(pages.get(sid).messages), () => `${sid}: transcript changed across a restart after everything settled`);
  }
  // Replays after the crashes answer the original receipt.
  for (const entry of admissions.values()) {
    if (entry.commandId === undefined) continue;
    const res = await api("POST", `/sessions/${entry.sid}/commands`, entry.body);
    counts.replays++;
    v.check(res.status === 200 && res.json?.commandId === entry.commandId, () => `replay of ${entry.body.requestId}: HTTP ${res.status} ${res.text.slice(0, 200)} (receipt was ${entry.commandId})`);
  }
  report(settled, pages);
} catch (error) {
  v.add(`aborted by an error: ${error.stack ?? error}`);
} finally {
  await killService();
  await model.close();
  effects.close();
  if (v.list.length > 0 || args.keep) console.log(`kept for inspection: ${work} (wrangler.log, effects.jsonl, state/)`);
  else rmSync(work, { recursive: true, force: true });
}

/** Long-polls every admitted command's settlement; returns requestId -> settlement. */
async function settleAll(boundMs) {
  const deadline = Date.now() + boundMs;
  const out = new Map();
  const entries = [...admissions.values()].filter((e) => e.commandId !== undefined);
  for (const entry of entries) {
    for (;;) {
      const left = deadline - Date.now();
      const q = `commandId=${encodeURIComponent(entry.commandId)}&timeoutMs=${Math.max(0, Math.min(30_000, left))}`;
      const res = await api("GET", `/sessions/${entry.sid}/settlement?${q}`, undefined, { timeoutMs: 35_000 });
      if (res.status === 200 && res.json) {
        out.set(entry.body.requestId, res.json);
        break;
      }
      if (res.status !== 200 && res.status !== 0) v.add(`settlement of ${entry.body.requestId}: HTTP ${res.status} ${res.text.slice(0, 200)}`);
      if (Date.now() >= deadline) {
        v.add(`${entry.body.requestId} (${entry.commandId}, ${entry.kind}) not settled within ${boundMs} ms: lost`);
        break;
      }
      if (res.status !== 200) await sleep(200);
    }
  }
  return out;
}

/** Every Session's whole transcript (all pages, oldest first) with its final pending/running. */
async function transcripts() {
  const out = new Map();
  for (const sid of sessions) {
    const messages = [];
    let before;
    let head;
    for (let i = 0; i < 10_000; i++) {
      const res = await api("GET", `/sessions/${sid}?limit=200${before ? `&before=${encodeURIComponent(before)}` : ""}`);
      if (res.status !== 200) throw new Error(`read ${sid}: HTTP ${res.status} ${res.text.slice(0, 200)}`);
      head ??= res.json;
      messages.unshift(...res.json.messages);
      if (res.json.cursor === null) break;
      before = res.json.cursor;
    }
    out.set(sid, { messages, pending: head.pending, running: head.running });
  }
  return out;
}

function report(settled, pages) {
  const byTerminal = new Map();
  for (const s of settled.values()) byTerminal.set(s.terminal, (byTerminal.get(s.terminal) ?? 0) + 1);
  // Effects recorded outside the killed processes, by key.
  const effectRuns = new Map();
  if (existsSync(effectLog)) {
    for (const line of readFileSync(effectLog, "utf8").split("\n").filter(Boolean)) {
      const { key } = JSON.parse(line);
      effectRuns.set(key, (effectRuns.get(key) ?? 0) + 1);
    }
  }
  const calls = { runOnce: 0, notRun: 0, unknownRan: 0, unknownNotRun: 0, endedRan: 0, direct: 0, execute: 0 };
  const recordedKeys = new Set();
  const answersOf = new Map(); // requestId -> [text]
  for (const [sid, page] of pages) {
    v.check(page.running === null && page.pending.length === 0, () => `${sid}: still has work after everything settled: ${JSON.stringify({ running: page.running, pending: page.pending })}`);
    const outcomes = new Map(page.messages.filter((m) => m.role === "tool").map((m) => [m.toolCallId, m]));
    const userCount = new Map();
    for (const m of page.messages) {
      if (m.role === "user") userCount.set(m.requestId, (userCount.get(m.requestId) ?? 0) + 1);
      if (m.role !== "assistant") continue;
      if (!m.toolCalls?.length) {
        const tag = /^(?:Answer|Done) (\S+) #/.exec(m.text)?.[1];
        if (tag) answersOf.set(tag, [...(answersOf.get(tag) ?? []), m.text]);
        continue;
      }
      for (const call of m.toolCalls) {
        const keys = JSON.stringify(call.arguments).match(/fx-[A-Za-z0-9]+-\d+-\d+/g) ?? [];
        const outcome = outcomes.get(call.id);
        const unknown = outcome?.text?.startsWith("outcome unknown");
        if (call.name === "execute") calls.execute++;
        else calls.direct++;
        for (const key of keys) {
          recordedKeys.add(key);
          const runs = effectRuns.get(key) ?? 0;
          v.check(runs <= 1, () => `tool effect ${key} (${call.name}, call ${call.id}) ran ${runs} times`);
          if (unknown) runs > 0 ? calls.unknownRan++ : calls.unknownNotRun++;
          else if (outcome && !outcome.isError) {
            v.check(runs === 1, () => `call ${call.id} (${key}) reported a result but its effect was never recorded`);
            calls.runOnce++;
          } else if (runs > 0) calls.endedRan++;
          else calls.notRun++;
        }
      }
    }
    for (const [requestId, n] of userCount) v.check(n === 1, () => `${sid}: ${n} user messages for ${requestId}`);
  }
  for (const key of effectRuns.keys()) v.check(recordedKeys.has(key), () => `tool effect ${key} ran but no recorded call asked for it`);
  let answered = 0;
  for (const [requestId, s] of settled) {
    const texts = answersOf.get(requestId) ?? [];
    v.check(texts.length <= 1, () => `${requestId}: ${texts.length} answers in the transcript: ${JSON.stringify(texts)}`);
    if (s.terminal === "completed") {
      v.check(texts.length === 1 && texts[0] === s.answer, () => `${requestId}: completed with answer ${JSON.stringify(s.answer)}, transcript holds ${JSON.stringify(texts)}`);
      answered++;
    }
  }
  const entries = [...admissions.values()];
  const secs = ((performance.now() - t0) / 1000).toFixed(1);
  table(`crash: ${args.cycles} cycles in ${secs} s (seed ${seed})`, [
    ["kill -9 of the process group", `${counts.kills + 1} (${[...killModes].map(([k, n]) => `${n} ${k}`).join(", ")}, 1 after settling)`],
    ["prompts sent", `${entries.length} (${entries.filter((e) => e.kind === "stream").length} streamed, ${entries.filter((e) => e.kind === "tool").length} direct tool, ${entries.filter((e) => e.kind === "execute").length} execute)`],
    ["answers lost in a kill (retried)", counts.lostAnswers],
    ["commands admitted", entries.filter((e) => e.commandId !== undefined).length],
    ["refused queue_full (never admitted)", entries.filter((e) => e.full).length],
    ["settled", `${settled.size}: ${[...byTerminal].map(([k, n]) => `${n} ${k}`).join(", ")}`],
    ["completed with exactly one answer", answered],
    ["replays after the crashes (same receipt)", counts.replays],
    ["tool calls recorded", `${calls.direct} record_effect, ${calls.execute} execute (each key below is one operation call)`],
    ["tool calls run once", calls.runOnce],
    ["tool calls not run", calls.notRun],
    ['tool calls "outcome unknown" (effect happened)', calls.unknownRan],
    ['tool calls "outcome unknown" (never reached)', calls.unknownNotRun],
    ["tool calls run, turn ended without outcome", calls.endedRan],
    ["tool effects recorded (run more than once: violation)", [...effectRuns.values()].reduce((a, b) => a + b, 0)],
    ["violations", v.list.length],
  ]);
}

v.finish(`node scripts/attack/crash.mjs --cycles ${args.cycles} --sessions ${args.sessions} --seed ${seed}`);
