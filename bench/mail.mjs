// Mail benchmark (issue 15): how long a mail takes from one Agent's
// outbox to the other Agent's admission, for a delegation (`agents.send`)
// and for its reply, as a ratio against a plain prompt admission measured in
// the same run, in the same in-process Miniflare; and the rows SQLite
// writes for a delegation round trip beyond the same turns without mail.
//
//   node bench/mail.mjs [--n 60] [--warmup 5] [--rows 5]
//
// One Worker (bench/mail-worker.mjs), three Agents of one namespace:
// `parent` delegates through the model's `agents.send` (the scripted model
// answers its prompt with an `execute` call), `child` runs the work (the
// model echoes) and its reply comes back as a line in `parent`, `plain`
// takes plain prompts. Latencies:
//   send   = child's acceptMail time - the send's `created_at` in parent's outbox
//   reply  = parent's acceptMail time - the reply's `created_at` in child's outbox
//   admit  = POST a prompt to an idle Session of `plain` until its 200 receipt
// All three cross one Durable Object boundary and commit one admission; the
// two mail figures are read from the objects' own clock (one process).
//
// Rows: SQLite's rowsWritten in parent and child over one whole round trip
// (parent's tool turn, child's turn, the reply and parent's reply turn),
// minus what `plain` writes for one `execute` turn and two plain turns.
//
// Needs build/demo/ (and its wasm) from `bash scripts/build.sh`. Prints
// figures; asserts no threshold, but exits 1 if a round trip does not
// complete.

import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Miniflare } from "miniflare";
import { DEMO_SCRIPT, ROOT, TOKEN, bundleFixture, execute, workerOptions } from "../tests/e2e/helpers.mjs";
import { startModelServer } from "../tests/support/model-server.mjs";

const SESSIONS = 4;

const { values: args } = parseArgs({
  options: {
    n: { type: "string", default: "60" },
    warmup: { type: "string", default: "5" },
    rows: { type: "string", default: "5" },
  },
});
const count = (name, min) => {
  const v = Number(args[name]);
  if (!Number.isInteger(v) || v < min) {
    console.error(`--${name} must be an integer >= ${min}`);
    process.exit(2);
  }
  return v;
};
const N = count("n", 1);
const WARMUP = count("warmup", 0);
const ROWS = count("rows", 1);

if (!existsSync(DEMO_SCRIPT)) {
  console.error(`${path.relative(ROOT, DEMO_SCRIPT)} is missing: run \`bash scripts/build.sh\` first`);
  process.exit(2);
}

const model = await startModelServer({ fallback: "echo" });
const SCRIPT = await bundleFixture(path.join(ROOT, "bench/mail-worker.mjs"), "bench-mail");
const persistDir = await mkdtemp(path.join(tmpdir(), "shiitake-bench-mail-"));
const options = workerOptions(SCRIPT, persistDir, { SHIITAKE_MODEL: "openai/bench", OPENAI_BASE_URL: model.url });
const mf = new Miniflare({ ...options, durableObjects: { SHIITAKE: { className: "BenchDO", useSQLite: true } } });

async function call(method, urlPath, body) {
  const res = await mf.dispatchFetch(`http://localhost${urlPath}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {}
  return { status: res.status, text, json };
}

function fail(what, res) {
  console.error(`bench: ${what}: HTTP ${res?.status} ${String(res?.text ?? res).slice(0, 300)}`);
  process.exitCode = 1;
  throw new Error("benchmark aborted");
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, fn, timeoutMs = 30_000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== null && v !== undefined) return v;
    if (Date.now() > end) fail(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

let seq = 0;

/** Admits a prompt and long-polls its settlement; returns the receipt's latency in ms. */
async function turn(agent, session, text) {
  const i = seq++;
  const t0 = performance.now();
  const res = await call("POST", `/agents/${agent}/sessions/${session}/commands`, { type: "prompt", requestId: `q${i}`, text });
  const ms = performance.now() - t0;
  if (res.status !== 200) fail(`prompt to ${agent}/${session}`, res);
  const settled = await call("GET", `/agents/${agent}/sessions/${session}/settlement?commandId=${res.json.commandId}&timeoutMs=30000`);
  if (settled.status !== 200 || settled.json?.terminal !== "completed") fail(`settlement in ${agent}/${session}`, settled);
  return ms;
}

const bench = async (agent, what, query = "") => {
  const res = await call("GET", `/agents/${agent}/bench/${what}${query}`);
  if (res.status !== 200) fail(`bench/${what} of ${agent}`, res);
  return res.json;
};
const counting = async (agent, on) => {
  const res = await call("POST", `/agents/${agent}/bench/count?on=${on ? 1 : 0}`);
  if (res.status !== 200) fail(`count on ${agent}`, res);
};

/** One delegation round trip; its two mail latencies (ms, objects' clock). */
async function delegation(i) {
  const tag = `deleg-${i}-${Math.random().toString(36).slice(2, 8)}`;
  const send = { agentId: "child", sessionId: `c${i % SESSIONS}`, requestId: `r${i}`, text: `work item ${i}` };
  model.scriptFor(tag, execute(`return await agents.send(${JSON.stringify(send)});`), { text: `sent ${tag}` });
  const parentSession = `p${i % SESSIONS}`;
  await turn("parent", parentSession, `delegate ${tag}`);
  const read = await call("GET", `/agents/parent/sessions/${parentSession}?limit=200`);
  const result = JSON.parse(read.json.messages.filter((m) => m.role === "tool").at(-1).text);
  if (result.status !== "accepted") fail("agents.send", { status: 200, text: JSON.stringify(result) });
  const key = result.key;
  const replyKey = `${key}:reply:0`;
  const sentAt = (await bench("parent", "outbox", `?key=${encodeURIComponent(key)}`)).at;
  const receivedAt = (await bench("child", "accepted", `?key=${encodeURIComponent(key)}`)).at;
  const repliedAt = await until("the reply's freeze", async () => (await bench("child", "outbox", `?key=${encodeURIComponent(replyKey)}`)).at);
  const answeredAt = await until("the reply's acceptance", async () => (await bench("parent", "accepted", `?key=${encodeURIComponent(replyKey)}`)).at);
  // The reply line's own turn in parent, so the next round trip starts idle.
  await until("parent's reply turn", async () => {
    const r = await call("GET", `/agents/parent/sessions/${parentSession}?limit=200`);
    const last = r.json.messages.at(-1);
    return r.json.running === null && r.json.pending.length === 0 && last?.role === "assistant" ? r : null;
  });
  return { send: receivedAt - sentAt, reply: answeredAt - repliedAt };
}

function quantile(sorted, q) {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}
const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: quantile(s, 0.5), p90: quantile(s, 0.9), mean: s.reduce((a, b) => a + b, 0) / s.length };
};
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

const started = performance.now();
try {
  await mf.ready;
  for (const agent of ["parent", "child", "plain"]) {
    for (let s = 0; s < SESSIONS; s++) {
      const prefix = { parent: "p", child: "c", plain: "s" }[agent];
      const res = await call("POST", `/agents/${agent}/sessions`, { sessionId: `${prefix}${s}` });
      if (res.status !== 201) fail(`create ${agent}/${prefix}${s}`, res);
    }
  }
  for (let i = 0; i < WARMUP; i++) {
    await delegation(i);
    await turn("plain", `s${i % SESSIONS}`, `warm-up ${i}`);
  }

  // Rows (untimed): a whole round trip in both objects, against the same turns without mail.
  const mailRows = [];
  const plainRows = [];
  for (let i = 0; i < ROWS; i++) {
    await counting("parent", true);
    await counting("child", true);
    await delegation(WARMUP + i);
    const p = await bench("parent", "stats");
    const c = await bench("child", "stats");
    await counting("parent", false);
    await counting("child", false);
    mailRows.push(p.rowsWritten + c.rowsWritten);
    await counting("plain", true);
    const tag = `tool-${i}-${Math.random().toString(36).slice(2, 8)}`;
    model.scriptFor(tag, execute("return { status: 'accepted' };"), { text: `done ${tag}` });
    await turn("plain", `s${i % SESSIONS}`, `tool ${tag}`);
    await turn("plain", `s${(i + 1) % SESSIONS}`, `plain one ${i}`);
    await turn("plain", `s${(i + 2) % SESSIONS}`, `plain two ${i}`);
    plainRows.push((await bench("plain", "stats")).rowsWritten);
    await counting("plain", false);
  }

  // Latencies, interleaved: a round trip, then a plain admission.
  const send = [];
  const reply = [];
  const admit = [];
  for (let i = 0; i < N; i++) {
    const d = await delegation(WARMUP + ROWS + i);
    send.push(d.send);
    reply.push(d.reply);
    admit.push(await turn("plain", `s${i % SESSIONS}`, `plain prompt ${i}`));
  }

  const [s, r, a] = [stats(send), stats(reply), stats(admit)];
  const f = (v) => v.toFixed(2).padStart(9);
  console.log(`mail (Miniflare): ${N} delegation round trips (after ${WARMUP} warm-up) interleaved with ${N} plain prompts, ${SESSIONS} Sessions per Agent, echo model, DO storage on disk`);
  console.log(`${"".padEnd(8)}${"p50 ms".padStart(9)}${"p90 ms".padStart(9)}${"mean ms".padStart(9)}${"p50/admit".padStart(11)}`);
  for (const [name, x] of [["send", s], ["reply", r], ["admit", a]]) {
    console.log(`${name.padEnd(8)}${f(x.p50)}${f(x.p90)}${f(x.mean)}${(x.p50 / a.p50).toFixed(2).padStart(11)}`);
  }
  const extra = mean(mailRows) - mean(plainRows);
  console.log(
    `rows: a round trip writes ${mean(mailRows).toFixed(1)} rows in parent and child; the same three turns without mail ${mean(plainRows).toFixed(1)}; ` +
      `mail adds ${extra.toFixed(1)} rows per delivered send and reply (${ROWS} counted round trips)`,
  );
  console.log(`wall time ${((performance.now() - started) / 1000).toFixed(1)} s`);
} finally {
  await mf.dispose();
  await model.close();
  await rm(persistDir, { recursive: true, force: true });
}
