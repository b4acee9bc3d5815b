// Transcript branches (issue 35, "Measure"), each figure against a baseline
// measured in the same run, in one Miniflare (bench/branches-worker.mjs):
//
// 1. Rows written (SQLite's rowsWritten, admission to settlement) by a
//    plain prompt (the baseline), a retry, a prompt with `after` and a
//    select, in a Session of 10 messages and in one of `--messages`: the
//    same counts whatever the history (O(1)).
// 2. The newest page of the selected branch of a `--messages` Session with
//    `--branches` branches against the same read of a linear Session of as
//    many messages (target <= 1.2x), for limit 50 (the default) and 200;
//    timed inside the object (the owner API's read: the core's whole read
//    path), interleaved rounds (alternating which goes first): the median
//    of the rounds' ratios.
// 3. A fork of the `--messages` Session at its newest message against
//    creating an empty Session (target <= 2x), timed the same way; and the
//    rows each writes.
//
//   node bench/branches.mjs [--messages 100000] [--branches 1000] [--n 200] [--rounds 11]
//
// Needs `bash scripts/build.sh` first. Prints figures; asserts nothing.

import path from "node:path";
import { parseArgs } from "node:util";
import { ROOT, bundleFixture, startWorker } from "../tests/e2e/helpers.mjs";

const { values: args } = parseArgs({
  options: {
    messages: { type: "string", default: "100000" },
    branches: { type: "string", default: "1000" },
    n: { type: "string", default: "200" },
    rounds: { type: "string", default: "11" },
  },
});
const MESSAGES = Number(args.messages);
const BRANCHES = Number(args.branches);
const N = Number(args.n);
const ROUNDS = Number(args.rounds);

const script = await bundleFixture(path.join(ROOT, "bench/branches-worker.mjs"), "bench-branches");
const h = await startWorker({ scriptPath: script, model: "echo" });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function direct(a, method, rel, body) {
  const res = await h.api(method, `/direct/${a.id}${rel}`, body);
  if (res.status !== 200) throw new Error(`${method} ${rel}: ${res.status} ${res.text}`);
  return res.json;
}

async function seed(a, session, messages, branches = 0) {
  return direct(a, "POST", "/bench/seed", { session, messages, branches });
}

/** Rows (and statements) a command writes, from its admission to its settlement when it runs. */
async function cost(a, session, body) {
  await direct(a, "POST", "/bench/reset");
  const res = await a.command(session, body);
  if (res.status !== 200) throw new Error(`${JSON.stringify(body)}: ${res.status} ${res.text}`);
  if (body.type !== "select") await a.waitSettled(session, res.json.commandId);
  await sleep(200); // the run loop's last writes
  const stats = await direct(a, "GET", "/bench/stats");
  return { rows: stats.rowsWritten, statements: stats.statements };
}

try {
  // 1. Rows per command, by history length.
  console.log(`Rows written, admission to settlement (statements in brackets):`);
  console.log(`  ${"".padEnd(26)} ${"10 messages".padStart(14)} ${`${MESSAGES} messages`.padStart(18)}`);
  const bySize = [];
  for (const size of [10, MESSAGES]) {
    const a = h.agent();
    await seed(a, "s", size);
    // The newest message is an assistant one when `size` is even.
    const user = `m_s_${size - (size % 2 === 0 ? 1 : 0)}`;
    const answer = `m_s_${size - (size % 2 === 0 ? 0 : 1)}`;
    const figures = {};
    figures["plain prompt (baseline)"] = await cost(a, "s", { type: "prompt", requestId: "p", text: "plain" });
    figures["retry"] = await cost(a, "s", { type: "retry", requestId: "r", entryId: user });
    figures["prompt with after"] = await cost(a, "s", { type: "prompt", requestId: "e", text: "edited", after: answer });
    figures["select"] = await cost(a, "s", { type: "select", requestId: "x", entryId: answer });
    bySize.push(figures);
  }
  for (const name of Object.keys(bySize[0])) {
    const cell = (f) => `${f[name].rows} [${f[name].statements}]`;
    console.log(`  ${name.padEnd(26)} ${cell(bySize[0]).padStart(14)} ${cell(bySize[1]).padStart(18)}`);
  }

  // 2. The newest page: branched against linear.
  const a = h.agent();
  const t0 = Date.now();
  const { newest } = await seed(a, "linear", MESSAGES);
  await seed(a, "branched", MESSAGES, BRANCHES);
  console.log(`\nSeeded two Sessions of ${MESSAGES} messages (one with ${BRANCHES} branches) in ${Date.now() - t0} ms.`);
  const time = async (op, session, extra = "") => (await direct(a, "GET", `/bench/time?op=${op}&session=${session}&n=${N}${extra}`)).us;
  // Each round times both, one after the other (alternating which goes
  // first); the figure is the median of the rounds' ratios, which a load
  // change across rounds (a shared machine) moves less than a ratio of
  // medians.
  const pair = async (a, b) => {
    const [as, bs, ratios] = [[], [], []];
    for (let r = 0; r < ROUNDS; r++) {
      let x;
      let y;
      if (r % 2 === 0) {
        x = await a();
        y = await b();
      } else {
        y = await b();
        x = await a();
      }
      as.push(x);
      bs.push(y);
      ratios.push(y / x);
    }
    return { a: median(as), b: median(bs), ratio: median(ratios) };
  };
  for (const limit of [50, 200]) {
    const m = await pair(
      () => time("read", "linear", `&limit=${limit}`),
      () => time("read", "branched", `&limit=${limit}`),
    );
    console.log(
      `Newest page (limit ${limit}): linear ${m.a.toFixed(1)} µs, ${BRANCHES} branches ${m.b.toFixed(1)} µs: ${m.ratio.toFixed(2)}x (target <= 1.2x)`,
    );
  }
  for (const session of ["linear", "branched"]) {
    await direct(a, "POST", "/bench/reset");
    await a.read(session);
    const stats = await direct(a, "GET", "/bench/stats");
    console.log(`  statements of one read of ${session}: ${stats.statements} (rows read ${stats.rowsRead})`);
  }

  // 3. A fork of the long Session against an empty Session.
  const m = await pair(
    () => time("create", "linear"),
    () => time("fork", "linear", `&entryId=${newest}`),
  );
  console.log(`\nCreate an empty Session ${m.a.toFixed(1)} µs, fork the ${MESSAGES}-message one ${m.b.toFixed(1)} µs: ${m.ratio.toFixed(2)}x (target <= 2x)`);
  await direct(a, "POST", "/bench/reset");
  await a.api("POST", "/sessions", { sessionId: "one-more" });
  const createRows = (await direct(a, "GET", "/bench/stats")).rowsWritten;
  await direct(a, "POST", "/bench/reset");
  await a.api("POST", "/sessions", { sessionId: "one-fork", from: { sessionId: "linear", entryId: newest } });
  const forkRows = (await direct(a, "GET", "/bench/stats")).rowsWritten;
  console.log(`  rows written: create ${createRows}, fork ${forkRows}`);
} finally {
  await h.dispose();
}
