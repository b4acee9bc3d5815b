// Side-by-side benchmark: shiitake against the Cloudflare Agents SDK chat
// agent (AIChatAgent of @cloudflare/ai-chat), both in ONE Miniflare, both
// talking to the SAME loopback streaming model server, measured interleaved
// in the same run. See bench/sdk/README.md for what each figure means.
//
//   npm install --prefix bench/sdk && node bench/sdk/compare.mjs [--n 100]
//
// Options: --n samples per timed figure (100), --warmup (20), --rows-turns
// (10), --full-n samples of the SDK's whole-transcript read (10), --cold
// cold starts per side (3), --sizes transcript sizes (100,10000,100000),
// --only a comma list of figures (admission,turn,rows,read,cold).
// Needs build/demo/ (scripts/build.sh). Prints figures, asserts no
// threshold; exits 1 only if a turn (or a read) fails.

import { existsSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, DEMO_SCRIPT, TOKEN, bundleFixture, workerOptions } from "../../tests/e2e/helpers.mjs";
import { HOLD, startModelThread } from "../model-thread.mjs";
import { bundleSdkWorker, bundleShiitakeWorker } from "./build.mjs";
import { settledFrames } from "../watch.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "../..");

const { values: args } = parseArgs({
  options: {
    n: { type: "string", default: "100" },
    warmup: { type: "string", default: "20" },
    "rows-turns": { type: "string", default: "10" },
    "full-n": { type: "string", default: "10" },
    cold: { type: "string", default: "3" },
    sizes: { type: "string", default: "100,10000,100000" },
    only: { type: "string", default: "admission,turn,rows,read,cold" },
  },
});
const N = Number(args.n);
const WARMUP = Number(args.warmup);
const ROWS_TURNS = Number(args["rows-turns"]);
const FULL_N = Number(args["full-n"]);
const COLD = Number(args.cold);
const SIZES = args.sizes.split(",").map(Number);
const ONLY = new Set(args.only.split(","));
const QUEUE_ROTATE = 25; // queued prompts per busy Session before a fresh one
const TURN_ROTATE = 10; // turns per Session (transcript kept short) before a fresh one

if (!existsSync(DEMO_SCRIPT)) {
  console.error("build/demo/ is missing: run `bash scripts/build.sh` first");
  process.exit(2);
}
if (!existsSync(path.join(HERE, "node_modules/@cloudflare/ai-chat"))) {
  console.error("the SDK is not installed: run `npm install --prefix bench/sdk` first");
  process.exit(2);
}

// ---- the model: one streaming server for both sides --------------------
// On its own thread, as a provider is elsewhere (bench/model-thread.mjs). A
// prompt whose text holds HOLD hangs (a busy turn); every other answer is
// the chunks last set, streamed as fast as the socket takes them.
const model = await startModelThread();
const chunksOf = (n) => Array.from({ length: n }, (_, i) => `w${i} `);

// ---- the Workers ---------------------------------------------------------
const [SDK_SCRIPT, SHIITAKE_BENCH_SCRIPT, FLOOR_SCRIPT] = await Promise.all([
  bundleSdkWorker(),
  bundleShiitakeWorker(),
  bundleFixture(path.join(ROOT, "bench/floor-worker.mjs"), "bench-floor"),
]);
const shiitakeWorker = (name, host) => ({
  name,
  routes: [`${host}/*`],
  ...workerOptions(DEMO_SCRIPT, undefined, { SHIITAKE_MODEL: "openai/bench", OPENAI_BASE_URL: model.url }),
});
const shiitakeBenchWorker = (name, host) => ({
  ...workerOptions(SHIITAKE_BENCH_SCRIPT, undefined, { SHIITAKE_MODEL: "openai/bench", OPENAI_BASE_URL: model.url }),
  name,
  routes: [`${host}/*`],
  durableObjects: { SHIITAKE: { className: "BenchDO", useSQLite: true } },
});
const sdkWorker = (name, host) => ({
  name,
  routes: [`${host}/*`],
  modules: true,
  scriptPath: SDK_SCRIPT,
  compatibilityDate: COMPATIBILITY_DATE,
  compatibilityFlags: ["nodejs_compat"],
  durableObjects: {
    ChatAgent: { className: "ChatAgent", useSQLite: true },
    WS_FLOOR: { className: "WsFloorDO", useSQLite: true },
  },
  bindings: { OPENAI_BASE_URL: model.url },
});
const floorWorker = (name, host) => ({
  name,
  routes: [`${host}/*`],
  modules: true,
  scriptPath: FLOOR_SCRIPT,
  compatibilityDate: COMPATIBILITY_DATE,
  durableObjects: { FLOOR: { className: "FloorDO", useSQLite: true } },
  bindings: { SHIITAKE_TOKEN: TOKEN },
});

// ---- clients ------------------------------------------------------------
const HEADERS = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
let failed = false;
function fail(message) {
  failed = true;
  throw new Error(message);
}

/** A JSON client of shiitake's HTTP contract (docs/http.md) on `host`. */
function shiitakeClient(mf, host) {
  let seq = 0;
  async function call(method, p, body) {
    const res = await mf.dispatchFetch(`http://${host}${p}`, { method, headers: HEADERS, body: body && JSON.stringify(body) });
    const text = await res.text();
    if (res.status >= 300) fail(`shiitake ${method} ${p}: ${res.status} ${text.slice(0, 300)}`);
    return text ? JSON.parse(text) : null;
  }
  return {
    call,
    createSession: (agent, session) => call("POST", `/agents/${agent}/sessions`, { sessionId: session }),
    async prompt(agent, session, text) {
      const receipt = await call("POST", `/agents/${agent}/sessions/${session}/commands`, { type: "prompt", requestId: `r${seq++}`, text });
      if (!receipt?.commandId) fail(`shiitake: no receipt: ${JSON.stringify(receipt)}`);
      return receipt.commandId;
    },
    async settlement(agent, session, commandId) {
      const s = await call("GET", `/agents/${agent}/sessions/${session}/settlement?commandId=${commandId}&timeoutMs=30000`);
      if (s?.terminal !== "completed") fail(`shiitake turn did not complete: ${JSON.stringify(s)}`);
      return s;
    },
    abort: (agent, session) => call("POST", `/agents/${agent}/sessions/${session}/commands`, { type: "abort" }),
    /** An open watch: `settled(commandId)` resolves with the settlement frame. */
    async watch(agent, session) {
      const res = await mf.dispatchFetch(`http://${host}/agents/${agent}/sessions/${session}/watch`, { headers: HEADERS });
      if (res.status !== 200) fail(`shiitake watch: ${res.status}`);
      return settledFrames(res);
    },
  };
}

/** A WebSocket to one AIChatAgent instance, spoken as its React client does. */
async function sdkSocket(mf, host, name) {
  const res = await mf.dispatchFetch(`http://${host}/agents/chat-agent/${name}`, { headers: { Upgrade: "websocket" } });
  if (res.status !== 101) fail(`sdk: websocket upgrade answered ${res.status}`);
  const ws = res.webSocket;
  ws.accept();
  const listeners = new Set();
  ws.addEventListener("message", (event) => {
    const msg = JSON.parse(String(event.data));
    for (const l of [...listeners]) l(msg);
  });
  const ready = new Promise((resolve) => {
    const l = (msg) => {
      if (msg.type === "cf_agent_identity") {
        listeners.delete(l);
        resolve();
      }
    };
    listeners.add(l);
  });
  await ready;
  return {
    ws,
    /** Resolves with the first message `pred` accepts. */
    next(pred) {
      return new Promise((resolve) => {
        const l = (msg) => {
          if (pred(msg)) {
            listeners.delete(l);
            resolve(msg);
          }
        };
        listeners.add(l);
      });
    },
    send: (obj) => ws.send(JSON.stringify(obj)),
    close: () => {
      try {
        ws.close();
      } catch {}
    },
  };
}

/**
 * One SDK conversation: a sender socket (the chat client, which sends the
 * whole message list with every prompt, as useAgentChat does) and an
 * observer socket (another tab) whose `cf_agent_chat_messages` broadcasts
 * are the persist acknowledgement and keep the client's list in sync with
 * what the server stored.
 */
async function sdkChat(mf, host, name, { observe = false } = {}) {
  const sender = await sdkSocket(mf, host, name);
  const observer = observe ? await sdkSocket(mf, host, name) : null;
  let messages = [];
  let seq = 0;
  observer?.next((msg) => {
    if (msg.type === "cf_agent_chat_messages") messages = msg.messages;
    return false;
  });
  /** Sends one prompt; `persisted` resolves when the observer sees it stored, `done` at the final response frame. */
  function prompt(text) {
    const id = `u_${name}_${seq}`;
    const requestId = `req_${name}_${seq++}`;
    const user = { id, role: "user", parts: [{ type: "text", text }] };
    const list = [...messages, user];
    messages = list;
    // The observer sees the new list twice: broadcast before the write, and
    // again by persistMessages after it. The second is the acknowledgement.
    let sightings = 0;
    const persisted = observer?.next((msg) => msg.type === "cf_agent_chat_messages" && msg.messages.some((m) => m.id === id) && ++sightings === 2);
    const done = sender.next((msg) => msg.type === "cf_agent_use_chat_response" && msg.id === requestId && (msg.done || msg.error));
    sender.send({ type: "cf_agent_use_chat_request", id: requestId, init: { method: "POST", body: JSON.stringify({ messages: list, trigger: "submit-message" }) } });
    return {
      requestId,
      persisted,
      done: done.then((msg) => {
        if (msg.error || (msg.outcome && msg.outcome !== "completed")) fail(`sdk turn failed: ${JSON.stringify(msg).slice(0, 300)}`);
        return msg;
      }),
    };
  }
  /**
   * Brings the client's list up to the stored one after a turn, untimed: the
   * observer's copy, or (with no observer) a GET of get-messages.
   */
  async function synced() {
    if (!observer) {
      messages = JSON.parse(await sdkHttp(mf, host, `/agents/chat-agent/${name}/get-messages`));
      return;
    }
    for (let i = 0; i < 2000 && messages.at(-1)?.role !== "assistant"; i++) await sleep(1);
  }
  return {
    name,
    prompt,
    synced,
    /** Clears the transcript (the client's "clear" frame), untimed; resolves once it is empty. */
    async clear() {
      messages = [];
      sender.send({ type: "cf_agent_chat_clear" });
      for (let i = 0; i < 500; i++) {
        if ((await sdkHttp(mf, host, `/agents/chat-agent/${name}/get-messages`)) === "[]") return;
        await sleep(2);
      }
      fail(`sdk: ${name} was not cleared`);
    },
    close() {
      sender.close();
      observer?.close();
    },
  };
}

async function sdkHttp(mf, host, p) {
  const res = await mf.dispatchFetch(`http://${host}${p}`);
  const text = await res.text();
  if (res.status >= 300) fail(`sdk GET ${p}: ${res.status} ${text.slice(0, 300)}`);
  return text;
}

// ---- statistics and printing ---------------------------------------------
function quantile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}
function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: quantile(s, 0.5), p99: quantile(s, 0.99), n: s.length };
}
const ms = (v) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
const ratio = (a, b) => (b > 0 ? (a / b).toFixed(2) : "-");
const table = [];
function row(figure, sh, sdk, extra = "") {
  const a = stats(sh);
  const b = stats(sdk);
  const line = {
    figure,
    shiitake: `${ms(a.p50)} / ${ms(a.p99)}`,
    sdk: `${ms(b.p50)} / ${ms(b.p99)}`,
    ratio: `${ratio(a.p50, b.p50)} / ${ratio(a.p99, b.p99)}`,
    extra,
  };
  table.push(line);
  console.log(`  ${figure.padEnd(44)} shiitake ${line.shiitake.padStart(15)}   sdk ${line.sdk.padStart(15)}   ratio ${line.ratio.padStart(11)}${extra ? `   ${extra}` : ""}`);
}
function note(figure, shiitake, sdk, r, extra = "") {
  table.push({ figure, shiitake, sdk, ratio: r, extra });
  console.log(`  ${figure.padEnd(44)} shiitake ${String(shiitake).padStart(15)}   sdk ${String(sdk).padStart(15)}   ratio ${String(r).padStart(11)}${extra ? `   ${extra}` : ""}`);
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// Before each timed sample that needs an idle object, a pause (untimed) lets
// the previous turn's trailing work finish on both sides.
const PAUSE_MS = 10;
const time = async (fn) => {
  const t = performance.now();
  await fn();
  return performance.now() - t;
};
const waitHold = (tag, count = 1) => model.waitFor(tag, count);

// ---- the shared Miniflare -------------------------------------------------
const started = performance.now();
const mf = new Miniflare({
  workers: [
    shiitakeWorker("shiitake", "shiitake.bench"),
    shiitakeBenchWorker("shiitake-bench", "count.bench"),
    sdkWorker("sdk", "sdk.bench"),
    floorWorker("floor", "floor.bench"),
  ],
});
await mf.ready;
const sh = shiitakeClient(mf, "shiitake.bench");
const shCount = shiitakeClient(mf, "count.bench");
const SDK = "sdk.bench";
let uid = 0;
const fresh = (p) => `${p}${uid++}`;

console.log(
  `shiitake vs Cloudflare Agents SDK (agents 0.32.0, @cloudflare/ai-chat 0.12.2, ai 6.0.326), one Miniflare, ` +
    `n=${N}, warm-up ${WARMUP}; times in ms as p50 / p99, ratio = shiitake / SDK`,
);

try {
  // ---- 1. admission -------------------------------------------------------
  if (ONLY.has("admission")) {
    await model.setChunks(["ok"]);
    // Busy sides: a Session (shiitake) / an agent instance (SDK) whose turn
    // holds the model; every QUEUE_ROTATE prompts a fresh one (set up untimed).
    const shBusy = { left: 0 };
    const sdkBusy = { left: 0 };
    async function shQueued() {
      if (shBusy.left === 0) {
        if (shBusy.session) await sh.abort("adm", shBusy.session);
        shBusy.session = fresh("busy");
        await sh.createSession("adm", shBusy.session);
        const tag = `${HOLD}${shBusy.session}`;
        await sh.prompt("adm", shBusy.session, tag);
        await waitHold(tag);
        shBusy.left = QUEUE_ROTATE;
      }
      shBusy.left--;
      return time(() => sh.prompt("adm", shBusy.session, "a queued prompt: summarise the day's notes"));
    }
    async function sdkQueued() {
      if (sdkBusy.left === 0) {
        sdkBusy.chat?.close();
        sdkBusy.chat = await sdkChat(mf, SDK, fresh("busy"), { observe: true });
        const tag = `${HOLD}${sdkBusy.chat.name}`;
        await sdkBusy.chat.prompt(tag).persisted;
        await waitHold(tag);
        sdkBusy.left = QUEUE_ROTATE;
      }
      sdkBusy.left--;
      const p = sdkBusy.chat.prompt("a queued prompt: summarise the day's notes");
      return time(() => p.persisted);
    }
    // Idle sides: the prompt also starts a turn; it is finished (untimed)
    // before the next sample.
    await sh.createSession("adm", "idle");
    const sdkIdle = await sdkChat(mf, SDK, "idle", { observe: true });
    let shIdleTurns = 0;
    async function shIdle() {
      if (shIdleTurns++ % TURN_ROTATE === 0) {
        sh.idleSession = fresh("idle");
        await sh.createSession("adm", sh.idleSession);
      }
      await sleep(PAUSE_MS);
      let id;
      const t = await time(async () => {
        id = await sh.prompt("adm", sh.idleSession, "an idle prompt: summarise the day's notes");
      });
      await sh.settlement("adm", sh.idleSession, id);
      return t;
    }
    let sdkIdleTurns = 0;
    async function sdkIdleOne() {
      if (sdkIdleTurns++ % TURN_ROTATE === 0) await sdkIdle.clear();
      await sleep(PAUSE_MS);
      let p;
      const t = await time(async () => {
        p = sdkIdle.prompt("an idle prompt: summarise the day's notes");
        await p.persisted;
      });
      await p.done;
      await sdkIdle.synced();
      return t;
    }
    let floorSeq = 0;
    async function floorOne() {
      return time(async () => {
        const res = await mf.dispatchFetch("http://floor.bench/agents/floor/sessions/s/commands", {
          method: "POST",
          headers: HEADERS,
          body: JSON.stringify({ type: "prompt", requestId: `f${floorSeq++}`, text: "a queued prompt: summarise the day's notes" }),
        });
        await res.text();
      });
    }
    // The WebSocket floor: a prompt frame on one socket, one row inserted,
    // the acknowledgement read on a second socket (the SDK's path, bare).
    const wsOpen = async () => {
      const res = await mf.dispatchFetch(`http://${SDK}/ws-floor/adm`, { headers: { Upgrade: "websocket" } });
      if (res.status !== 101) fail(`ws floor: ${res.status}`);
      res.webSocket.accept();
      return res.webSocket;
    };
    const wsSender = await wsOpen();
    const wsObserver = await wsOpen();
    let wsSeq = 0;
    async function wsFloorOne() {
      const id = `p${wsSeq++}`;
      return time(
        () =>
          new Promise((resolve) => {
            const l = (event) => {
              if (JSON.parse(String(event.data)).id === id) {
                wsObserver.removeEventListener("message", l);
                resolve();
              }
            };
            wsObserver.addEventListener("message", l);
            wsSender.send(JSON.stringify({ id, text: "a queued prompt: summarise the day's notes" }));
          }),
      );
    }
    // The floor of an idle prompt: the same insert after the same pause (an
    // idle object and event loop answer slower than a busy one).
    async function floorIdle() {
      await sleep(PAUSE_MS);
      return floorOne();
    }
    // A queued prompt after the same pause: what the idle one costs without
    // the turn it starts.
    async function shQueuedPaused() {
      await sleep(PAUSE_MS);
      return shQueued();
    }
    const kinds = { shQueued, sdkQueued, floorOne, wsFloorOne, shIdle, sdkIdleOne, floorIdle, shQueuedPaused };
    const samples = Object.fromEntries(Object.keys(kinds).map((k) => [k, []]));
    const order = Object.keys(kinds);
    for (let i = 0; i < WARMUP + N; i++) {
      for (const k of i % 2 ? [...order].reverse() : order) {
        const v = await kinds[k]();
        if (i >= WARMUP) samples[k].push(v);
      }
    }
    sdkBusy.chat?.close();
    sdkIdle.close();
    wsSender.close();
    wsObserver.close();
    console.log("1. admission (prompt to receipt; SDK: to its persist broadcast)");
    row("admission, queued (turn busy)", samples.shQueued, samples.sdkQueued);
    row("admission, idle (starts a turn)", samples.shIdle, samples.sdkIdleOne);
    const fl = stats(samples.floorOne);
    const wf = stats(samples.wsFloorOne);
    const q = (xs) => stats(xs).p50;
    note(
      "  floor: one-row insert DO (HTTP | WebSocket)",
      `${ms(fl.p50)} / ${ms(fl.p99)}`,
      `${ms(wf.p50)} / ${ms(wf.p99)}`,
      "",
      "each side's own transport: shiitake HTTP (bench/floor-worker.mjs), SDK WebSocket (WsFloorDO)",
    );
    const fi = stats(samples.floorIdle);
    note("  floor after the idle pause (HTTP)", `${ms(fi.p50)} / ${ms(fi.p99)}`, "", "", `the same insert after the ${PAUSE_MS} ms pause an idle sample takes`);
    note(
      "  idle admission p50 / the paused floor p50",
      ratio(q(samples.shIdle), fi.p50),
      "",
      "",
      "target <= 1.2",
    );
    const qp = stats(samples.shQueuedPaused);
    note(
      "  queued admission after the idle pause",
      `${ms(qp.p50)} / ${ms(qp.p99)}`,
      "",
      "",
      `idle p50 / this p50: ${ratio(q(samples.shIdle), qp.p50)} (what starting the turn adds); this p50 / the paused floor p50: ${ratio(qp.p50, fi.p50)}`,
    );
    note(
      "  admission p50 / its transport's floor p50",
      `${ratio(q(samples.shQueued), fl.p50)} | ${ratio(q(samples.shIdle), fl.p50)}`,
      `${ratio(q(samples.sdkQueued), wf.p50)} | ${ratio(q(samples.sdkIdleOne), wf.p50)}`,
      "",
      "queued | idle",
    );
  }

  // ---- 2. a turn, prompt to settled ----------------------------------------
  if (ONLY.has("turn")) {
    console.log("2. turn, prompt to settled (shiitake: `settled` frame on an open watch; SDK: the final response frame, done)");
    for (const size of [25, 250, 1000]) {
      await model.setChunks(chunksOf(size));
      await model.reset();
      const shState = { turns: 0 };
      const sdkChatT = await sdkChat(mf, SDK, fresh("turn"));
      let sdkTurns = 0;
      async function shTurn() {
        if (shState.turns++ % TURN_ROTATE === 0) {
          shState.watch?.close();
          shState.session = fresh("turn");
          await sh.createSession("turn", shState.session);
          shState.watch = await sh.watch("turn", shState.session);
        }
        await sleep(PAUSE_MS);
        let settlement;
        const t = await time(async () => {
          const id = await sh.prompt("turn", shState.session, "go");
          settlement = await shState.watch.settled(id);
        });
        if (settlement.terminal !== "completed") fail(`shiitake turn: ${JSON.stringify(settlement)}`);
        return t;
      }
      async function sdkTurn() {
        if (sdkTurns++ % TURN_ROTATE === 0) await sdkChatT.clear();
        await sleep(PAUSE_MS);
        const t = await time(() => sdkChatT.prompt("go").done);
        await sdkChatT.synced();
        return t;
      }
      const a = [];
      const b = [];
      const reps = WARMUP + N;
      for (let i = 0; i < reps; i++) {
        const pair = i % 2 ? [[sdkTurn, b], [shTurn, a]] : [[shTurn, a], [sdkTurn, b]];
        for (const [fn, xs] of pair) {
          const v = await fn();
          if (i >= WARMUP) xs.push(v);
        }
      }
      shState.watch?.close();
      sdkChatT.close();
      row(`turn, ${size}-chunk answer`, a, b);
    }
  }

  // ---- 3. rows written and statements per turn ------------------------------
  if (ONLY.has("rows")) {
    console.log(`3. storage per plain turn (average of ${ROWS_TURNS} turns, counted from the prompt request to settlement)`);
    for (const size of [25, 250]) {
      await model.setChunks(chunksOf(size));
      const agent = fresh("rows");
      await shCount.createSession(agent, "s");
      const watch = await shCount.watch(agent, "s");
      const sdkName = fresh("rows");
      const chat = await sdkChat(mf, SDK, sdkName);
      const shStats = () => shCount.call("GET", `/agents/${agent}/bench/stats`);
      const sdkStats = async () => JSON.parse(await sdkHttp(mf, SDK, `/agents/chat-agent/${sdkName}/bench/stats`));
      // One warm turn each, untimed and uncounted.
      await watch.settled(await shCount.prompt(agent, "s", "go"));
      await chat.prompt("go").done;
      await chat.synced();
      const shAt = [];
      const shAfter = [];
      const sdkAt = [];
      const sdkAfter = [];
      for (let i = 0; i < ROWS_TURNS; i++) {
        await shCount.call("POST", `/agents/${agent}/bench/reset`);
        const id = await shCount.prompt(agent, "s", "go");
        await watch.settled(id);
        shAt.push(await shStats());
        await sleep(200);
        shAfter.push(await shStats());
        await sdkHttp(mf, SDK, `/agents/chat-agent/${sdkName}/bench/reset`);
        await chat.prompt("go").done;
        sdkAt.push(await sdkStats());
        await sleep(200);
        sdkAfter.push(await sdkStats());
        await chat.synced(); // a read: after the counts
      }
      watch.close();
      chat.close();
      const avg = (xs, k) => xs.reduce((n, s) => n + s[k], 0) / xs.length;
      const f = (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1));
      for (const [label, k] of [["rows written (SQLite rowsWritten)", "rowsWritten"], ["sql.exec calls", "statements"]]) {
        note(
          `${label}, ${size}-chunk turn`,
          f(avg(shAt, k)),
          f(avg(sdkAt, k)),
          ratio(avg(shAt, k), avg(sdkAt, k)),
          `200 ms after settling: shiitake ${f(avg(shAfter, k))}, sdk ${f(avg(sdkAfter, k))}`,
        );
      }
      note(
        `KV entries + alarm writes, ${size}-chunk turn`,
        `${f(avg(shAt, "kvWrites"))} + ${f(avg(shAt, "alarmWrites"))}`,
        `${f(avg(sdkAt, "kvWrites"))} + ${f(avg(sdkAt, "alarmWrites"))}`,
        "",
      );
    }
  }

  // ---- 4. reading the newest 50 messages --------------------------------------
  if (ONLY.has("read")) {
    console.log("4. read of the newest 50 messages (shiitake: GET /sessions/:id?limit=50; SDK: its Sessions API, newest first)");
    // Seed every size first (one object per size and side), then read them
    // all interleaved, so the ratios across sizes share the machine's noise.
    const targets = [];
    for (const size of SIZES) {
      const agent = `read${size}`;
      await shCount.createSession(agent, "s");
      let t = performance.now();
      const seeded = await shCount.call("POST", `/agents/${agent}/bench/seed?session=s&count=${size}`);
      const shSeedMs = performance.now() - t;
      const sdkName = `read${size}`;
      await sdkHttp(mf, SDK, `/agents/chat-agent/${sdkName}/bench/stats`); // wake it: tables created
      t = performance.now();
      const sdkSeeded = JSON.parse(await sdkHttp(mf, SDK, `/agents/chat-agent/${sdkName}/bench/seed?count=${size}`));
      const sdkSeedMs = performance.now() - t;
      // Reset the SDK object so its caches (tail, hydrated messages) see the seed.
      await mf.dispatchFetch(`http://${SDK}/agents/chat-agent/${sdkName}/bench/abort`).then((r) => r.text()).catch(() => {});
      if (seeded.messages !== size || sdkSeeded.messages !== size) fail(`seed: ${JSON.stringify({ seeded, sdkSeeded })}`);
      // Both reads must serve the newest 50.
      const page = await shCount.call("GET", `/agents/${agent}/sessions/s?limit=50`);
      const sdkPage = JSON.parse(await sdkHttp(mf, SDK, `/agents/chat-agent/${sdkName}/bench/newest?limit=50`));
      const want = Math.min(50, size);
      if (page.messages.length !== want || !page.messages.at(-1).text.includes(`number ${size}:`)) fail(`shiitake read: ${page.messages.length} messages`);
      if (sdkPage.messages.length !== want || !sdkPage.messages.at(-1).parts.at(-1).text.includes(`number ${size}:`)) fail(`sdk read: ${sdkPage.messages.length} messages`);
      targets.push({
        size,
        seeded: `seeded in ${ms(shSeedMs)} / ${ms(sdkSeedMs)} ms`,
        sh: { fn: () => shCount.call("GET", `/agents/${agent}/sessions/s?limit=50`), xs: [] },
        sdk: { fn: () => sdkHttp(mf, SDK, `/agents/chat-agent/${sdkName}/bench/newest?limit=50`), xs: [] },
        full: `/agents/chat-agent/${sdkName}/get-messages`,
      });
    }
    for (let i = 0; i < WARMUP + N; i++) {
      for (const target of i % 2 ? [...targets].reverse() : targets) {
        for (const side of i % 2 ? [target.sdk, target.sh] : [target.sh, target.sdk]) {
          const v = await time(side.fn);
          if (i >= WARMUP) side.xs.push(v);
        }
      }
    }
    for (const target of targets) {
      row(`read newest 50 of ${target.size.toLocaleString("en")}`, target.sh.xs, target.sdk.xs, target.seeded);
      // The SDK's own HTTP read (what its client fetches on load): the whole path.
      let full = 0;
      const c = [];
      for (let i = 0; i < FULL_N + 2; i++) {
        let text;
        const v = await time(async () => {
          text = await sdkHttp(mf, SDK, target.full);
        });
        if (i >= 2) c.push(v);
        full = JSON.parse(text).length;
      }
      const fc = stats(c);
      note(
        "  sdk GET get-messages (whole transcript)",
        "",
        `${ms(fc.p50)} / ${ms(fc.p99)}`,
        "",
        `returns ${full.toLocaleString("en")} of ${target.size.toLocaleString("en")} messages (n=${FULL_N})`,
      );
    }
    const [small, ...large] = targets;
    for (const target of large) {
      const r = (side) => ratio(stats(target[side].xs).p50, stats(small[side].xs).p50);
      note(`  read p50 at ${target.size.toLocaleString("en")} / at ${small.size.toLocaleString("en")}`, r("sh"), r("sdk"), "", "each side against its own small read");
    }
  }
} finally {
  await mf.dispose();
}

// ---- 5. cold start ----------------------------------------------------------
if (ONLY.has("cold")) {
  await model.setChunks(["ok"]);
  console.log(`5. cold start to the first answer (fresh Miniflare holding one side's Worker; median of ${COLD})`);
  async function coldShiitake() {
    const t0 = performance.now();
    const m = new Miniflare({ ...shiitakeWorker("shiitake", "shiitake.bench"), routes: undefined });
    await m.ready;
    const t1 = performance.now();
    try {
      const c = shiitakeClient(m, "cold.bench");
      await c.createSession("cold", "s");
      const id = await c.prompt("cold", "s", "hello");
      await c.settlement("cold", "s", id);
      const t2 = performance.now();
      return { total: t2 - t0, afterReady: t2 - t1 };
    } finally {
      await m.dispose();
    }
  }
  async function coldSdk() {
    const t0 = performance.now();
    const m = new Miniflare({ ...sdkWorker("sdk", "sdk.bench"), routes: undefined });
    await m.ready;
    const t1 = performance.now();
    try {
      const chat = await sdkChat(m, "cold.bench", "cold");
      await chat.prompt("hello").done;
      const t2 = performance.now();
      chat.close();
      return { total: t2 - t0, afterReady: t2 - t1 };
    } finally {
      await m.dispose();
    }
  }
  const a = [];
  const b = [];
  for (let i = 0; i < COLD; i++) {
    if (i % 2) {
      b.push(await coldSdk());
      a.push(await coldShiitake());
    } else {
      a.push(await coldShiitake());
      b.push(await coldSdk());
    }
  }
  const med = (xs, k) => stats(xs.map((x) => x[k])).p50;
  for (const [label, k] of [["cold start: new Miniflare to first answer", "total"], ["cold start: first request to answer", "afterReady"]]) {
    note(label, ms(med(a, k)), ms(med(b, k)), ratio(med(a, k), med(b, k)), `runs: shiitake ${a.map((x) => ms(x[k])).join(", ")}; sdk ${b.map((x) => ms(x[k])).join(", ")}`);
  }
}

await model.close();
console.log(`wall time ${((performance.now() - started) / 1000).toFixed(1)} s`);

// A markdown table of the figures, for README.md.
console.log("\n| figure | shiitake | Agents SDK | ratio shiitake/SDK | note |\n|---|---|---|---|---|");
const cell = (v) => String(v).trim().replaceAll("|", "\\|");
for (const t of table) console.log(`| ${[t.figure, t.shiitake, t.sdk, t.ratio, t.extra].map(cell).join(" | ")} |`);
process.exit(failed ? 1 : 0);
