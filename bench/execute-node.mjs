// `execute` on the Node host (js/node.mjs): an `execute` tool turn against a
// plain turn on the same host, in one run.
//
//   node bench/execute-node.mjs [--n 40] [--dir /dev/shm]
//
// One Agent (a SQLite file in a temporary folder), the scripted model server
// answering at once on its own thread (a provider is elsewhere:
// bench/model-thread.mjs); turns interleaved, each its own Session, timed
// from the prompt to its settlement:
//   plain    the model answers at once;
//   direct   the model calls the host operation `calc.add` as a direct tool;
//   execute  the model calls `execute` with code calling `calc.add` once, in
//            the embedded sandbox (Node's; its engine kept between runs).
// Prints the commits per turn of each kind (counted on the warm-up turns
// by wrapping node:sqlite; `fsynced`: those committed with `synchronous =
// FULL`), the medians, an embedded run's share of an execute turn (the
// sandbox's own time and its guest call's, by wrapping EmbeddedSandbox.run)
// and the ratios to a plain turn (the target: execute at most
// 1.5x). On a disk each fsynced commit is a flush, which a
// durable tool turn has more of than a plain one; `--dir /dev/shm` (tmpfs)
// leaves them out to show the rest. Needs `bash scripts/build.sh`. Asserts
// nothing.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { DatabaseSync, StatementSync } from "node:sqlite";
import { parseArgs } from "node:util";
import { openNodeShiitake } from "../js/node.mjs";
import { EmbeddedSandbox } from "../js/sandbox/embedded.mjs";
import { startModelThread } from "./model-thread.mjs";

// Counts commits while `counting` (the timed turns pay only the check): a
// statement or script after which the connection left a transaction, or a
// write outside one (autocommit). The host restores `synchronous = FULL` in
// the same call that lowers it, so it is FULL whenever counting starts.
const commits = { all: 0, fsynced: 0 };
let counting = false;
let full = true;
const dbOf = new WeakMap();
const counted = (db, inside, write) => {
  if ((inside && !db.isTransaction) || (!inside && write && !db.isTransaction)) {
    commits.all++;
    if (full) commits.fsynced++;
  }
};
const { exec, prepare } = DatabaseSync.prototype;
DatabaseSync.prototype.exec = function (sql) {
  if (!counting) return exec.call(this, sql);
  const inside = this.isTransaction;
  const out = exec.call(this, sql);
  const sync = /^\s*PRAGMA\s+synchronous\s*=\s*(\w+)/i.exec(sql);
  if (sync) full = sync[1].toUpperCase() === "FULL" || sync[1] === "2";
  else counted(this, inside, /^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP)\b/i.test(sql));
  return out;
};
DatabaseSync.prototype.prepare = function (sql) {
  const stmt = prepare.call(this, sql);
  dbOf.set(stmt, this);
  return stmt;
};
for (const name of ["run", "all", "get"]) {
  const method = StatementSync.prototype[name];
  StatementSync.prototype[name] = function (...args) {
    if (!counting) return method.apply(this, args);
    const db = dbOf.get(this);
    const inside = db?.isTransaction;
    const out = method.apply(this, args);
    if (db) counted(db, inside, /^\s*(INSERT|UPDATE|DELETE|REPLACE)\b/i.test(this.sourceSQL));
    return out;
  };
}

const { values: args } = parseArgs({ options: { n: { type: "string", default: "40" }, dir: { type: "string", default: tmpdir() } } });
const N = Number(args.n);

// Each embedded run's time: the sandbox's own (from the run's start to its
// end, less its guest call) and the guest call's (the gate, its commit and
// the operation).
const runs = { sandbox: [], call: [] };
const { run } = EmbeddedSandbox.prototype;
EmbeddedSandbox.prototype.run = async function (options) {
  const start = performance.now();
  let call = 0;
  const dispatch = async (...args) => {
    const at = performance.now();
    try {
      return await options.dispatch(...args);
    } finally {
      call += performance.now() - at;
    }
  };
  const reply = await run.call(this, { ...options, dispatch });
  runs.sandbox.push(performance.now() - start - call);
  runs.call.push(call);
  return reply;
};

const dir = mkdtempSync(path.join(args.dir, "shiitake-bench-node-"));
const model = await startModelThread();
const host = await openNodeShiitake({
  path: path.join(dir, "agent.db"),
  env: { SHIITAKE_MODEL: "openai/bench-node", OPENAI_BASE_URL: model.url, OPENAI_API_KEY: "sk-bench" },
  tools: {
    access: { grants: { calc: "read" } },
    modules: [
      {
        id: "calc",
        operations: [
          {
            name: "add",
            description: "Adds two numbers.",
            inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } } },
            access: "read",
            direct: true,
            run: ({ a, b }) => ({ sum: a + b }),
          },
        ],
      },
    ],
  },
});

const kinds = {
  plain: () => ({ text: "ok" }),
  direct: () => ({ toolCalls: [{ name: "add", arguments: { a: 2, b: 3 } }] }),
  execute: () => ({ toolCalls: [{ name: "execute", arguments: { code: "return await calc.add({ a: 2, b: 3 });" } }] }),
};

const api = async (method, rel, body) => {
  const res = await host.fetch(new Request(`http://node.bench${rel}`, { method, headers: { "content-type": "application/json" }, body: body && JSON.stringify(body) }));
  return res.json();
};

let seq = 0;
async function turn(kind, count = false) {
  const tag = `[bench-node-${kind}-${seq++}]`;
  await model.script(tag, [kinds[kind](), { text: "ok" }]);
  const sid = `s${seq}`;
  await api("POST", "/sessions", { sessionId: sid });
  counting = count;
  const start = performance.now();
  const { commandId } = await api("POST", `/sessions/${sid}/commands`, { type: "prompt", requestId: "r", text: `go ${tag}` });
  let s = null;
  while (s === null) s = await api("GET", `/sessions/${sid}/settlement?commandId=${commandId}&timeoutMs=10000`);
  const ms = performance.now() - start;
  const calls = kind === "plain" ? 0 : 1;
  if (s.terminal !== "completed" || s.toolCallCount !== calls) throw new Error(`${kind}: ${JSON.stringify(s)}`);
  return ms;
}

const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
try {
  const perTurn = {};
  for (const kind of Object.keys(kinds)) {
    for (let i = 0; i < 2; i++) await turn(kind);
    Object.assign(commits, { all: 0, fsynced: 0 });
    await turn(kind, true);
    // What the turn's end left (the loop's alarm write) lands just after its settlement.
    await new Promise((resolve) => setTimeout(resolve, 20));
    counting = false;
    perTurn[kind] = { ...commits };
  }
  const times = { plain: [], direct: [], execute: [] };
  runs.sandbox.length = runs.call.length = 0;
  for (let i = 0; i < N; i++) for (const kind of Object.keys(kinds)) times[kind].push(await turn(kind));
  const m = Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)]));
  const f = (x) => x.toFixed(2);
  console.log(`Node host (store in ${args.dir}), turns per kind: ${N} (interleaved), medians from prompt to settlement; execute in the embedded sandbox`);
  const c = (kind) => `${perTurn[kind].all} commits (${perTurn[kind].fsynced} fsynced)`;
  console.log(`  plain turn (no tool)  ${f(m.plain)} ms   ${c("plain")}`);
  console.log(`  direct tool turn      ${f(m.direct)} ms   ${c("direct")}`);
  console.log(`  execute turn          ${f(m.execute)} ms   ${c("execute")}`);
  console.log(`    of which the embedded run: sandbox ${f(median(runs.sandbox))} ms, its guest call ${f(median(runs.call))} ms`);
  console.log(`tool turn / plain turn: direct ${f(m.direct / m.plain)}, execute ${f(m.execute / m.plain)} (target <= 1.5)`);
} finally {
  await host.close();
  await model.close();
  rmSync(dir, { recursive: true, force: true });
}
