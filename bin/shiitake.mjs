#!/usr/bin/env node
// `shiitake chat`: a terminal client of one Agent. It talks to a running
// service (`--url`, the demo's `npm start` by default) or, with `--local
// <file>`, runs the Agent itself on Node from a SQLite file (shiitake/node).
// Both go through the typed client (js/client.mjs): the local Agent's
// routes are called in process through the same `fetch` shape.
import readline from "node:readline";
import { Writable } from "node:stream";
import { parseArgs } from "node:util";
import { ShiitakeError, bindSessionExtension, createShiitakeClient, isUncertain, readCompacted } from "../js/client.mjs";
import { bindingDispatch, createClientEntryHost } from "../js/client-entry.mjs";
import { READ_PAGE_MESSAGES_MAX, SETTLEMENT_TIMEOUT_MS_MAX } from "../js/limits.mjs";
import { errorFrom } from "../js/transport.mjs";
import { goalClient, goalContract } from "../examples/extensions/goal.client.mjs";
import { linksClient, linksContract } from "../examples/extensions/links.client.mjs";

const USAGE = `usage: shiitake chat [options]

Talk to an Agent: a prompt at a time, its answer streamed as it comes.

  --url <url>        the service (default http://127.0.0.1:8787, \`npm start\`)
  --token <token>    its bearer token (default: $SHIITAKE_TOKEN)
  --agent <id>       the Agent, served at <url>/agents/<id> (default demo)
  --local <file>     run the Agent here, kept in this SQLite file (its model
                     from $SHIITAKE_MODEL, $OPENAI_BASE_URL, $OPENAI_API_KEY, ...)
  --session <id>     an existing Session (default: a new one, its id printed)
  --prompt <text>    send this one prompt, print the answer, exit
  -h, --help         this text

In a chat: /cancel /abort /history /edit /retry /branches /select /compact
/summary /usage /sessions /new /switch <id> /actions /help /quit (/help says
what each does); Ctrl-C cancels the running prompt, twice (or when idle)
quits. Extension rows show under the prompt; Esc closes a choice, cancels
your newest queued prompt, else the running one, else an extension's
waiting work, else dismisses the notice.

A prompt whose answer did not arrive is not sent again: the client asks the
Session whether it arrived ([sent]) or not ([not sent]: the text comes back
to the input line), retrying while the service cannot be reached.

Exit status: 0 completed (or quit), 1 failed, 2 usage error, 3 cancelled,
4 interrupted, 5 the service could not be used (unreachable, refused
token, unknown Session, a prompt not sent or left unconfirmed).`;

const COMMANDS = `  /cancel             cancel your newest queued prompt, else the running one
  /abort              cancel the running prompt and every queued one
  /history [n]        the newest n messages of this branch (default 10), as #<position>
  /edit [#n] [text]   edit user message #n (default the newest) on a new branch in its
                      place: with text, send it now; without, it comes to the input
                      line and Enter sends it (an empty line drops the edit)
  /retry [#n]         a new answer to user message #n (default the newest), beside
                      the old one
  /branches [#n]      the alternatives to message #n (default the newest that has some)
  /select <k>         go to alternative k of the last /branches list
  /compact [text]     summarise the conversation for the model (text: what to keep);
                      the messages stay readable
  /summary [#n]       compaction #n (default the newest): its summary and the
                      messages it stands for
  /usage              what the model calls cost: this Session's and the Agent's today
                      (UTC), calls by outcome and tokens in, cached and out; and their
                      token budgets: tokens, spent, when the Agent's day resets
  /sessions           list this Agent's Sessions
  /new                start a new Session
  /switch <id>        go to another Session
  /actions            the Row actions palette: the extension rows' actions and Session
                      links (under the prompt), numbered; a number and Enter runs one,
                      Esc or an empty line closes it
  /help               this list
  /quit               leave (Ctrl-D too)`;

/** The client entries whose rows the chat shows under its prompt (as the chat page does). */
const CLIENT_ENTRIES = [
  { entry: goalClient, contract: goalContract },
  { entry: linksClient, contract: linksContract },
];

/** Exit statuses (README "Chat from a terminal"). */
const EXIT = { completed: 0, failed: 1, usage: 2, cancelled: 3, interrupted: 4, service: 5 };
const DEFAULT_URL = "http://127.0.0.1:8787";
/** Lines of input history kept (arrow keys). */
const HISTORY_LINES_MAX = 500;
/** A second Ctrl-C within this many milliseconds quits. */
const QUIT_WINDOW_MS = 2000;
/** Characters of a one-line summary (tool arguments, display data). */
const SUMMARY_CHARS_MAX = 100;
/** A running tool's counters are printed at most once per this many milliseconds. */
const PROGRESS_LINE_MS = 1000;
/** Messages of a Session shown when the client joins it. */
const RECENT_MESSAGES_SHOWN = 6;
/** How long a settlement the long poll brought waits for the watch to show it first. */
const WATCH_GRACE_MS = 1000;
/** Settlements a Session view remembers. */
const SETTLEMENTS_KEPT = 100;
/** The settlement long poll's wait per request: the longest the server grants. */
const SETTLEMENT_WAIT_MS = SETTLEMENT_TIMEOUT_MS_MAX;
/** Messages per read when a command looks along the selected branch (the route's largest page). */
const BRANCH_PAGE = READ_PAGE_MESSAGES_MAX;
/** Pages of the selected branch a command looks through for a message (`#n`, the newest user message). */
const BRANCH_PAGES_MAX = 50;
/** Messages `/history` shows by default, and at most. */
const HISTORY_DEFAULT = 10;
const HISTORY_MAX = 200;
/** Sends at most whose outcome is being recovered; past it a new prompt is refused (arrow-up recalls it). */
const UNCONFIRMED_MAX = 8;
/** The backoff between withdraw attempts while the service cannot be reached: first, longest (ms). */
const RECOVER_MS = [250, 10_000];

class UsageError extends Error {}

/** A refusal or failure, said for a person: what went wrong and what to do. */
function explain(error, where) {
  if (error instanceof ShiitakeError) {
    if (error.status === 401) return `${where} refused the token (401 ${error.code}: ${error.message}); pass --token or set SHIITAKE_TOKEN`;
    if (error.code === "session_not_found") return `no such Session (${error.message})`;
    return `${error.message} (${error.status} ${error.code})`;
  }
  if (error instanceof TypeError && error.cause) return `cannot reach ${where}: ${error.cause.message ?? error.cause} (is the service running? \`npm start\`)`;
  return error?.message ?? String(error);
}

/** One line, at most SUMMARY_CHARS_MAX characters, of a value. */
function summary(value) {
  const s = (typeof value === "string" ? value : JSON.stringify(value) ?? "").replace(/\s+/g, " ").trim();
  return s.length > SUMMARY_CHARS_MAX ? `${s.slice(0, SUMMARY_CHARS_MAX - 1)}…` : s;
}

/** Progress data in one line: an object's fields as `name value`, anything else as JSON. */
function counters(data) {
  if (data === null || typeof data !== "object" || Array.isArray(data)) return summary(data);
  return summary(Object.entries(data).map(([name, value]) => `${name} ${typeof value === "string" ? value : JSON.stringify(value)}`).join(" · "));
}

/** A settlement in one line; `prompt` (its text, when known) names a cancelled one. */
function settlementLine(s, prompt) {
  let extra = "";
  if (s.terminal === "completed" && s.toolCallCount > 0) extra = ` ${s.toolCallCount} tool call(s)`;
  else if (s.diagnostic) extra = ` ${s.diagnostic}`;
  else if (s.terminal === "cancelled" && prompt !== undefined) extra = ` ${summary(prompt)}`;
  return `[${s.terminal}]${extra}`;
}

/** Usage ledger figures of `what`, in two lines: its calls by outcome, then the tokens in, cached and out. */
function usageLines(what, f) {
  return [
    `[usage] ${what}: ${f.calls} call${f.calls === 1 ? "" : "s"} (${f.answered} answered, ${f.failed} failed, ${f.unknown} unknown)`,
    `        tokens: ${f.inputTokens} in · ${f.cacheReadTokens ?? 0} cached · ${f.outputTokens} out`,
  ];
}

const count = (n) => n.toLocaleString("en-US");

/** A budget as its route answers it (`GET /sessions/:id/budget`, `GET /budget`: `resetsAt`), in one line. */
function budgetLine(b) {
  if (b.tokens === null) return "        budget: none";
  const daily = b.resetsAt === undefined ? "" : " a day";
  const spent = b.spent === null ? " (nothing counted yet)" : ` · ${count(b.spent)} spent`;
  const resets = b.resetsAt === undefined ? "" : ` · resets ${new Date(b.resetsAt).toISOString().slice(0, 16).replace("T", " ")} UTC`;
  return `        budget: ${count(b.tokens)} tokens${daily}${spent}${resets}`;
}

/** A turn a budget paused (the `paused` frame's, the read's `running.paused`): why, and what lets it go on. */
function pausedLine({ scope, tokens, spent }) {
  const [whose, until] = scope === "agent" ? ["the Agent's daily token budget", "raised or the day ends (00:00 UTC)"] : ["the Session's token budget", "raised"];
  return `[paused] ${whose} is reached (${count(spent)} of ${count(tokens)}): the turn waits until it is ${until}; /cancel ends it`;
}

/** What a queued or running command does: its prompt's text, else a regenerate or a compaction. */
function workLabel(item) {
  if (item.type === "compact") return item.text ? `compaction: ${item.text}` : "compaction";
  if (item.retry !== undefined || (item.text === "" && item.images === undefined)) return "regenerate an answer";
  return item.text || `${item.images.length} image(s)`;
}

/** A message of a branch on one line, by its position: `#12 [user] text <2/3>`. */
function numbered(m) {
  let what;
  if (m.role === "compaction") what = `${m.compacted?.messages ?? 0} messages summarised`;
  else if (m.role === "tool") what = `${m.toolName ?? ""} ${summary(m.data === undefined ? m.text : m.data)}`;
  else what = summary(m.text || (m.toolCalls ?? []).map((call) => `${call.name} ${JSON.stringify(call.arguments)}`).join("; "));
  return `#${m.sequence} [${m.role}] ${what}${m.branch ? ` <${m.branch.index}/${m.branch.count}>` : ""}`;
}

/** A command's `#n` (a message's position) and the rest of its arguments. */
function parseRef(args) {
  const m = /^#(\d+)(?:\s+([\s\S]*))?$/.exec(args);
  return m ? { seq: Number(m[1]), rest: m[2] ?? "" } : { seq: undefined, rest: args };
}

/**
 * The message at position `seq` of the selected branch, or (without `seq`)
 * the newest for which `test` holds; null when there is none within
 * BRANCH_PAGES_MAX pages. Positions rise along a branch, so a search for
 * `seq` stops below it.
 */
async function findOnBranch(session, seq, test) {
  let before;
  for (let pages = 0; pages < BRANCH_PAGES_MAX; pages++) {
    const read = await session.read({ before, limit: BRANCH_PAGE });
    for (const m of [...read.messages].reverse()) {
      if (seq === undefined ? test(m) : m.sequence === seq) return m;
      if (seq !== undefined && m.sequence < seq) return null;
    }
    if (read.cursor === null) return null;
    before = read.cursor;
  }
  return null;
}

function parse(argv) {
  const [command, ...rest] = argv;
  if (command === "-h" || command === "--help" || command === "help") return { help: true };
  if (command !== "chat") throw new UsageError(command === undefined ? "say `shiitake chat`" : `unknown command ${JSON.stringify(command)} (the one command is \`chat\`)`);
  let parsed;
  try {
    parsed = parseArgs({
      args: rest,
      strict: true,
      allowPositionals: false,
      options: {
        url: { type: "string" },
        token: { type: "string" },
        agent: { type: "string" },
        local: { type: "string" },
        session: { type: "string" },
        prompt: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    throw new UsageError(error.message);
  }
  const o = parsed.values;
  if (o.help) return { help: true };
  if (o.local !== undefined && (o.url !== undefined || o.token !== undefined || o.agent !== undefined)) {
    throw new UsageError("--local runs the Agent here: it takes no --url, --token or --agent");
  }
  for (const name of ["local", "session", "agent", "url"]) {
    if (o[name] === "") throw new UsageError(`--${name} must not be empty`);
  }
  if (o.prompt !== undefined && o.prompt.trim() === "") throw new UsageError("--prompt must not be empty");
  const url = o.url ?? DEFAULT_URL;
  if (o.local === undefined && !URL.canParse(url)) throw new UsageError(`--url ${JSON.stringify(url)} is not a URL`);
  return { ...o, url, agent: o.agent ?? "demo", token: o.token ?? (process.env.SHIITAKE_TOKEN || undefined) };
}

/**
 * The client of the Agent: remote over HTTP, or a local one in process.
 * `where` names it in messages; `get(path)` reads one of its routes the
 * typed client has no method for (the budgets), as JSON.
 */
async function connect(o) {
  let baseUrl, fetch, where, close;
  if (o.local !== undefined) {
    const { openNodeShiitake } = await import("../js/node.mjs");
    const host = await openNodeShiitake({ path: o.local });
    [baseUrl, where, close] = ["http://local", `the Agent in ${host.path}`, () => host.close("shiitake chat quit")];
    fetch = (input, init) => host.fetch(new Request(input, init));
  } else {
    const auth = o.token === undefined ? {} : { authorization: `Bearer ${o.token}` };
    [baseUrl, where, close] = [`${o.url.replace(/\/+$/, "")}/agents/${encodeURIComponent(o.agent)}`, o.url, async () => {}];
    fetch = (input, init) => globalThis.fetch(input, { ...init, headers: { ...init.headers, ...auth } });
  }
  const get = async (path) => {
    const res = await fetch(`${baseUrl}${path}`, { headers: { accept: "application/json" } });
    if (!res.ok) throw await errorFrom(res);
    return res.json();
  };
  return { client: createShiitakeClient({ baseUrl, fetch }), get, where, close };
}

/**
 * The sends whose answer did not arrive (seed "Recover an uncertain send"),
 * in every Session of the client: each keeps its requestId and exact text
 * until the Session says whether it was admitted. `withdraw(requestId)`
 * answers `accepted` (its commandId) or `unknown` (a committed fence: it
 * never will be); a watch showing the requestId admitted settles it too. A
 * failed withdraw is retried with a bounded backoff for as long as the
 * client runs; what is left at exit is reported.
 */
class Unconfirmed {
  constructor() {
    /** requestId -> {sessionId, text, settle}. */
    this.sends = new Map();
  }

  get size() {
    return this.sends.size;
  }

  /** Resolves `{status: "accepted", commandId}` or `{status: "unknown"}` (also when the Session is gone). */
  recover(session, requestId, text) {
    return new Promise((settle) => {
      const entry = { sessionId: session.id, text, settle };
      this.sends.set(requestId, entry);
      (async () => {
        for (let delay = RECOVER_MS[0]; this.sends.get(requestId) === entry; delay = Math.min(delay * 2, RECOVER_MS[1])) {
          try {
            return this.#settle(requestId, await session.withdraw(requestId));
          } catch (error) {
            // A deleted Session runs nothing: the send will never be admitted.
            if (error instanceof ShiitakeError && error.code === "session_not_found") return this.#settle(requestId, { status: "unknown" });
          }
          await new Promise((resolve) => setTimeout(resolve, delay));
        }
      })();
    });
  }

  /** A watch of `sessionId` showed `requestId` admitted as `commandId`. */
  seen(sessionId, requestId, commandId) {
    if (this.sends.get(requestId)?.sessionId === sessionId) this.#settle(requestId, { status: "accepted", commandId });
  }

  #settle(requestId, outcome) {
    const entry = this.sends.get(requestId);
    if (entry === undefined) return;
    this.sends.delete(requestId);
    entry.settle(outcome);
  }

  /** Says what is still unconfirmed (at exit); whether anything was. */
  report(write) {
    for (const [requestId, { sessionId, text }] of this.sends) {
      write(`unconfirmed (it may or may not have been admitted): Session ${sessionId}, requestId ${requestId}: ${text}`);
    }
    return this.sends.size > 0;
  }
}

/**
 * Prints one Session's watch: answer tokens as they stream, tool calls,
 * other clients' prompts, settlements, the branch it moves to; and keeps
 * what runs and what waits. `out.stream(text, commandId)` writes answer
 * text, `out.line(text)` a whole line. Extension projections go to
 * `onSnapshot(read)` (the watch's snapshot) and `onExtension(extensionId,
 * {value, history?})` (a Session-scoped `extension` frame).
 */
class SessionView {
  constructor(session, out, { showRecent = false, unconfirmed, onDraft = () => "", onSnapshot = () => {}, onExtension = () => {} }) {
    this.session = session;
    this.out = out;
    this.onSnapshot = onSnapshot;
    this.onExtension = onExtension;
    /** Set by close(): a late frame of this watch changes nothing. */
    this.closed = false;
    /** The client's sends whose outcome is being recovered. */
    this.unconfirmed = unconfirmed;
    /** Takes back a prompt that was not sent (`{text, after?}`); what to say of it. */
    this.onDraft = onDraft;
    /**
     * The entryIds the last branch change listed, and per command how many
     * of its model steps (assistant messages) it listed whose frames are
     * still to come: the read may hold what the frames after the `branch`
     * frame bring; those frames (and a listed step's deltas) are not
     * printed again.
     */
    this.listed = new Set();
    this.listedSteps = new Map();
    /** Set by a `branch` frame until the next `message` frame: its `<i/n>` is only in a read. */
    this.branchMoved = false;
    /** The children the last /branches listed, for /select. */
    this.alternatives = [];
    /** Whether joining shows the Session: its id, recent messages, what runs and waits. */
    this.showRecent = showRecent;
    /** The running command, per the watch. */
    this.running = null;
    /** The running command while a budget pauses it. */
    this.paused = null;
    /** Commands this client sent, not yet settled (in order). */
    this.mine = new Set();
    /** The requestIds of the prompts this client sent: their `user` messages are not echoed. */
    this.sent = new Set();
    /** Answer text streamed for the current model step of `running`. */
    this.streamed = "";
    /** Prompt texts by commandId, until they settle. */
    this.texts = new Map();
    /** True once the watch delivered its snapshot. */
    this.joined = false;
    /** The latest settlements (a prompt's can come before its receipt), at most SETTLEMENTS_KEPT. */
    this.settlements = new Map();
    /** Callers of settled(), by commandId. */
    this.waiters = new Map();
    this.watch = session.watch();
    this.#pump();
  }

  async #pump() {
    try {
      for await (const { event, data } of this.watch) {
        if (event === "snapshot") this.#snapshot(data);
        else if (event === "frame") await this.#frame(data);
        else if (event === "runtime-error") {
          this.out.line(`[model error] ${summary(data.diagnostic)}${data.retryInMs === undefined ? "" : ` (retrying in ${data.retryInMs} ms)`}`);
        }
      }
      if (!this.watch.closed) this.out.line(`[the watch of ${this.session.id} ended; /switch ${this.session.id} rejoins it if it still exists]`);
    } catch (error) {
      // A watch refused at its opening is the opener's to report.
      if (this.joined) this.out.line(`[the watch of ${this.session.id} failed: ${explain(error, "the service")}; /switch ${this.session.id} rejoins it]`);
    }
  }

  #snapshot(read) {
    this.joined = true;
    if (!this.closed) this.onSnapshot(read);
    for (const m of [...read.messages, read.running, ...read.pending]) this.#seen(m);
    this.running = read.running?.commandId ?? null;
    this.paused = read.running?.paused ? this.running : null;
    for (const p of [read.running, ...read.pending]) if (p) this.texts.set(p.commandId, p.text);
    if (!this.showRecent) return;
    this.out.line(`session ${this.session.id}`);
    for (const m of read.messages.slice(-RECENT_MESSAGES_SHOWN)) this.#message(m, true);
    if (read.running) this.out.line(`[running] ${summary(workLabel(read.running))}`);
    if (read.running?.paused) this.out.line(pausedLine(read.running.paused.budget));
    for (const p of read.pending) this.out.line(`[queued #${p.position}] ${summary(workLabel(p))}`);
  }

  /** A message or queue item carrying a requestId settles an unconfirmed send of it. */
  #seen(item) {
    if (item?.requestId && item.commandId) this.unconfirmed.seen(this.session.id, item.requestId, item.commandId);
  }

  /** One frame; frames after it wait while it reads the Session. */
  async #frame(f) {
    if (f.type === "branch") {
      this.branchMoved = true;
      await this.#reread();
    } else if (f.type === "admitted") {
      this.#seen(f);
    } else if (f.type === "started") {
      // A paused turn goes on at the same attempt: its budget covers it now.
      if (this.paused === f.commandId) this.out.line("[resumed] the budget covers the turn again");
      this.paused = null;
      this.running = f.commandId;
      this.streamed = "";
    } else if (f.type === "paused") {
      this.paused = f.commandId;
      this.out.line(pausedLine(f.budget));
    } else if (f.type === "delta") {
      if (this.listedSteps.get(f.commandId) > 0) return; // a step the branch change listed whole
      this.streamed += f.text;
      this.out.stream(f.text, f.commandId);
    } else if (f.type === "message") {
      this.#seen(f.message);
      this.#message(f.message, false);
      if (this.branchMoved) {
        this.branchMoved = false;
        if (!this.listed.has(f.message.entryId)) await this.#branchOf(f.message);
      }
    } else if (f.type === "diagnostic") {
      this.out.line(`[diagnostic] ${f.diagnostic}`);
    } else if (f.type === "extension") {
      if (f.scope === "session" && !this.closed) this.onExtension(f.extensionId, { value: f.value, ...(f.history ? { history: f.history } : {}) });
    } else if (f.type === "tool") {
      this.#tool(f);
    } else if (f.type === "settled") {
      const s = f.settlement;
      if (this.running === s.commandId) this.running = null;
      if (this.paused === s.commandId) this.paused = null;
      for (const [id, shown] of this.#toolsRunning) if (shown.commandId === s.commandId) this.#toolsRunning.delete(id);
      this.#settle(s);
    }
  }

  /** Running tool calls by id: their turn, and when their counters were last printed. */
  #toolsRunning = new Map();

  /** A running tool: a line when it starts, then its counters at most once per PROGRESS_LINE_MS. */
  #tool(f) {
    if (f.phase === "started") {
      this.#toolsRunning.set(f.toolCallId, { commandId: f.commandId, at: 0 });
      this.out.line(`[tool running] ${f.name}`);
    } else if (f.phase === "ended") {
      this.#toolsRunning.delete(f.toolCallId);
    } else {
      // A call that started before this client joined shows from its progress.
      const shown = this.#toolsRunning.get(f.toolCallId) ?? { commandId: f.commandId, at: 0 };
      this.#toolsRunning.set(f.toolCallId, shown);
      const now = Date.now();
      if (now - shown.at < PROGRESS_LINE_MS) return;
      shown.at = now;
      this.out.line(`[tool progress] ${f.name} ${counters(f.result.data)}`);
    }
  }

  /** The selected branch changed (a select, an edit, a retry): its newest messages, numbered. */
  async #reread() {
    let read;
    try {
      read = await this.session.read({ limit: RECENT_MESSAGES_SHOWN });
    } catch (error) {
      return this.out.line(`[branch] the Session is on another branch; it could not be read: ${explain(error, "the service")}`);
    }
    this.listed = new Set(read.messages.map((m) => m.entryId));
    this.listedSteps = new Map();
    for (const m of read.messages) if (m.role === "assistant") this.listedSteps.set(m.commandId, (this.listedSteps.get(m.commandId) ?? 0) + 1);
    this.out.line("[branch] the Session is on another branch; its newest messages:");
    for (const m of read.messages) this.out.line(numbered(m));
  }

  /** The first message after a branch change: where it has siblings (a regenerated answer, a prompt after a select), say so. */
  async #branchOf(message) {
    let read;
    try {
      read = await this.session.read({ limit: RECENT_MESSAGES_SHOWN });
    } catch {
      return; // /history shows it
    }
    const m = read.messages.find((r) => r.entryId === message.entryId);
    if (m?.branch) this.out.line(`[branch ${m.branch.index}/${m.branch.count}] #${m.sequence} is one of ${m.branch.count}: /branches #${m.sequence} lists them`);
  }

  #message(m, old) {
    if (!old && this.listed.has(m.entryId)) {
      // Listed at the branch change; the deltas after it are the next step's.
      if (m.role === "assistant") this.listedSteps.set(m.commandId, this.listedSteps.get(m.commandId) - 1);
      return;
    }
    if (m.role === "assistant") {
      // The tokens streamed already; print what the watch did not stream
      // (all of it when the client joined after the step).
      const text = !old && m.text.startsWith(this.streamed) ? m.text.slice(this.streamed.length) : m.text;
      if (old && text) this.out.line(`[assistant] ${summary(text)}`);
      else if (text) this.out.stream(text, m.commandId);
      this.streamed = "";
      for (const call of m.toolCalls ?? []) this.out.line(`[tool] ${call.name} ${summary(call.arguments)}`);
      if (!old) this.out.endStream();
    } else if (m.role === "tool") {
      const shown = m.data === undefined ? m.text : m.data;
      this.out.line(`[tool ${m.isError ? "error" : "result"}] ${m.toolName ?? ""} ${summary(shown)}`);
    } else if (m.role === "compaction") {
      this.out.line(`[compaction] ${m.compacted?.messages ?? 0} messages summarised; /summary shows them`);
    } else if (old || !this.sent.has(m.requestId)) {
      this.out.line(`[${m.role}] ${summary(m.text)}`);
    }
  }

  /** Shows a settlement once: from the watch, or from the long poll when it came first (`settled`). */
  #settle(s) {
    if (this.settlements.has(s.commandId)) return;
    this.out.line(settlementLine(s, this.texts.get(s.commandId)));
    this.texts.delete(s.commandId);
    this.mine.delete(s.commandId);
    this.settlements.set(s.commandId, s);
    if (this.settlements.size > SETTLEMENTS_KEPT) this.settlements.delete(this.settlements.keys().next().value);
    this.waiters.get(s.commandId)?.(s);
  }

  /**
   * Sends a command under a new requestId (`call(requestId)` sends it;
   * `label` names it in lines). Resolves `{receipt}` when its answer came;
   * `{recovered}` when none did (the send is unconfirmed): `recovered`
   * resolves its receipt once the Session shows it admitted, or null once a
   * committed withdrawal says it never will be (a prompt goes to `onDraft`;
   * doing it again is a new request). A refusal throws: nothing was admitted.
   */
  async #send(label, call, draft) {
    if (this.unconfirmed.size >= UNCONFIRMED_MAX) {
      throw new Error(`${UNCONFIRMED_MAX} prompts are still unconfirmed; send this one once the service answers (arrow-up recalls it)`);
    }
    const requestId = crypto.randomUUID();
    this.sent.add(requestId);
    try {
      return { receipt: this.#admitted(label, await call(requestId)) };
    } catch (error) {
      if (!isUncertain(error)) throw error;
      const why = error instanceof ShiitakeError ? `${error.status} ${error.code}` : (error?.cause?.message ?? error?.message ?? String(error));
      this.out.line(`[unconfirmed] ${summary(label)} (no answer: ${why}); asking the Session whether it arrived`);
      const recovered = this.unconfirmed.recover(this.session, requestId, label).then((outcome) => {
        if (outcome.status === "accepted") {
          this.out.line(`[sent] ${summary(label)} (${outcome.commandId})`);
          return this.#admitted(label, { status: "accepted", commandId: outcome.commandId, requestId });
        }
        this.out.line(`[not sent] ${summary(label)}${draft === undefined ? "" : this.onDraft(draft)}`);
        return null;
      });
      return { recovered };
    }
  }

  /** A prompt; `after`: an edit, on a new branch after that entry. */
  prompt(text, { after } = {}) {
    return this.#send(text, (requestId) => this.session.prompt(text, { requestId, after }), { text, after });
  }

  retry(entryId, label) {
    return this.#send(label, (requestId) => this.session.retry(entryId, { requestId }));
  }

  select(entryId, label) {
    return this.#send(label, (requestId) => this.session.select(entryId, { requestId }));
  }

  compact(instructions) {
    const label = instructions ? `compaction: ${instructions}` : "compaction";
    return this.#send(label, (requestId) => this.session.compact({ requestId, instructions: instructions || undefined }));
  }

  #admitted(text, receipt) {
    if (!this.settlements.has(receipt.commandId)) {
      this.mine.add(receipt.commandId);
      this.texts.set(receipt.commandId, text);
    }
    if (this.running !== null && this.running !== receipt.commandId) this.out.line(`[queued] ${summary(text)}`);
    return receipt;
  }

  /**
   * The command's settlement: from the watch, or (should the watch miss it)
   * from the settlement long poll, which is durable.
   */
  async settled(commandId) {
    if (this.settlements.has(commandId)) return this.settlements.get(commandId);
    const fromWatch = new Promise((resolve) => this.waiters.set(commandId, resolve));
    const abort = new AbortController();
    const poll = (async () => {
      for (;;) {
        const s = await this.session.readSettlement(commandId, { timeoutMs: SETTLEMENT_WAIT_MS, signal: abort.signal });
        if (s !== undefined) return s;
      }
    })();
    poll.catch(() => {});
    try {
      const s = await Promise.race([fromWatch, poll]);
      // The watch shows it in order with the answer; should it not within
      // a moment (behind, reconnecting), the poll's is shown.
      if (!this.settlements.has(commandId)) {
        let timer;
        await Promise.race([fromWatch, new Promise((resolve) => (timer = setTimeout(resolve, WATCH_GRACE_MS)))]);
        clearTimeout(timer);
      }
      this.#settle(s);
      return s;
    } finally {
      abort.abort();
      this.waiters.delete(commandId);
    }
  }

  /** The command Ctrl-C cancels: the running one, else the newest this client sent. */
  current() {
    return this.running ?? [...this.mine].at(-1) ?? null;
  }

  close() {
    this.closed = true;
    this.watch.close();
  }
}

/**
 * The extension rows of the chat's Sessions (seed "Client entries"): each
 * client entry's chips, pinned panel rows and waiting control, from the
 * Agent's roster (`GET /extensions`: status and command catalog) and each
 * Session's projections (its watch), one slot per Session id. Actions and
 * opens go through the entry host, which refuses offline and stale ones
 * locally; `open` is the client's authorizing open callback.
 */
class ExtensionRows {
  constructor({ client, notice, open, onChange }) {
    this.host = createClientEntryHost({
      entries: CLIENT_ENTRIES.map((c) => c.entry),
      dispatch: bindingDispatch((extensionId, slot) => {
        const known = CLIENT_ENTRIES.find((c) => c.entry.id === extensionId);
        return known && bindSessionExtension(client.session(slot), known.contract);
      }),
      notice,
      open,
      onChange,
      // Shown as its entry's row (host.error), never printed over the screen.
      onError: onChange,
    });
    /** extensionId -> {status, commands}, from the roster. */
    this.roster = new Map();
    /** Session id -> extensionId -> {value, history?}, from its watch. */
    this.values = new Map();
  }

  /** The Agent's roster (`GET /extensions`'s `extensions`): which run, and their commands. */
  setRoster(statuses) {
    this.roster.clear();
    for (const s of statuses) this.roster.set(s.id, { status: s.stopped === null ? "running" : "stopped", commands: s.commands.map((c) => c.name) });
    for (const slot of this.values.keys()) for (const { entry } of CLIENT_ENTRIES) this.#observe(slot, entry.id);
  }

  /** A Session's read (the watch's snapshot): every entry's projection and history, absent ones null. */
  snapshot(slot, read) {
    for (const { entry } of CLIENT_ENTRIES) {
      this.update(slot, entry.id, { value: read.extensions?.[entry.id] ?? null, history: read.extensionHistory?.[entry.id] ?? null });
    }
  }

  /** A projection of `slot` changed (an `extension` frame: without `history`, the one known stays). */
  update(slot, extensionId, { value, history }) {
    if (!CLIENT_ENTRIES.some((c) => c.entry.id === extensionId)) return;
    if (!this.values.has(slot)) this.values.set(slot, new Map());
    const was = this.values.get(slot).get(extensionId);
    this.values.get(slot).set(extensionId, { value, history: history === undefined ? was?.history : history });
    this.#observe(slot, extensionId);
  }

  #observe(slot, extensionId) {
    const { status, commands } = this.roster.get(extensionId) ?? { status: "offline", commands: [] };
    const { value = null, history } = this.values.get(slot)?.get(extensionId) ?? {};
    this.host.observe(extensionId, slot, { status, value, commands, ...(history ? { history } : {}) });
  }

  /** A Session no longer shown. */
  forget(slot) {
    this.values.delete(slot);
    this.host.forget(slot);
  }

  #each(slot, f) {
    for (const { entry } of CLIENT_ENTRIES) {
      const contribution = this.host.contribution(entry.id, slot);
      if (contribution !== null) f(entry.id, contribution);
    }
  }

  /** The rows, compactly: the chips on one line, then a line per panel row, entry error and waiting control. */
  lines(slot) {
    const chips = [];
    const rows = [];
    for (const { entry } of CLIENT_ENTRIES) {
      const error = this.host.error(entry.id, slot);
      if (error) rows.push(`[${entry.id}] ${error.message ?? String(error)}`);
    }
    this.#each(slot, (_, c) => {
      chips.push(...c.chips.map((chip) => `[${chip.title}]`));
      for (const row of c.panel) {
        const actions = [...(row.open ? ["open"] : []), ...(row.actions ?? []).map((a) => a.label)];
        rows.push(`${row.title}${row.detail ? ` · ${row.detail}` : ""}${actions.length > 0 ? ` (${actions.join(" | ")})` : ""}`);
      }
      if (c.waiting) rows.push(`[waiting] ${c.waiting.summary}${c.waiting.cancel ? ` (Esc: ${c.waiting.cancel.label})` : ""}`);
    });
    return [...(chips.length > 0 ? [chips.join(" ")] : []), ...rows];
  }

  /** What the Row actions palette offers: each `{label, run}` (an action, a Session open, a waiting cancel). */
  choices(slot) {
    const out = [];
    this.#each(slot, (id, c) => {
      for (const row of c.panel) {
        if (row.open) out.push({ label: `${row.title}: open ${row.open.sessionId}`, run: () => this.host.open(id, slot, row.open) });
        for (const action of row.actions ?? []) out.push({ label: `${row.title}: ${action.label}`, run: () => this.host.act(id, slot, action) });
      }
      for (const cell of c.timeline.cells) if (cell.open) out.push({ label: `${cell.label}: open ${cell.open.sessionId}`, run: () => this.host.open(id, slot, cell.open) });
      if (c.waiting?.cancel) out.push({ label: `${c.waiting.summary}: ${c.waiting.cancel.label}`, run: () => this.host.cancelWaiting(id, slot) });
    });
    return out;
  }

  /** The first waiting control with a cancel action of `slot`, as `{run}`; null when none. */
  waiting(slot) {
    let found = null;
    this.#each(slot, (id, c) => {
      if (found === null && c.waiting?.cancel) found = { label: c.waiting.cancel.label, run: () => this.host.cancelWaiting(id, slot) };
    });
    return found;
  }
}

/**
 * Output to a terminal with a readline prompt below it (or to a pipe). At a
 * terminal, `footer()`'s lines (hints, a notice, extension rows) are drawn
 * under the prompt, each cut to the terminal's width: every line there
 * moves the prompt up. Readline knows nothing of them, so they are drawn
 * again after each of its writes (which may clear them).
 */
class Screen {
  constructor(stdout) {
    this.stdout = stdout;
    /** The readline interface whose prompt is redrawn below the output (a terminal only). */
    this.rl = null;
    this.midLine = false;
    /** The lines under the prompt. */
    this.footer = () => [];
    /** How many lines the footer had when last drawn. */
    this.drawn = 0;
    this.redrawing = false;
  }

  /**
   * Readline's output: while an answer streams, its echo of what is typed
   * is held back (the typed line shows when the prompt is redrawn).
   */
  echo() {
    const stdout = this.stdout;
    const gate = new Writable({
      write: (chunk, _encoding, done) => {
        if (!this.midLine) {
          stdout.write(chunk);
          this.refresh();
        }
        done();
      },
    });
    Object.defineProperties(gate, {
      isTTY: { get: () => stdout.isTTY },
      columns: { get: () => stdout.columns },
      rows: { get: () => stdout.rows },
    });
    stdout.on("resize", () => gate.emit("resize"));
    return gate;
  }

  get #live() {
    return this.rl !== null && !this.rl.closed && this.stdout.isTTY === true;
  }

  /** Draws the footer again once the current writes are done (not while an answer streams: it goes under the next prompt). */
  refresh() {
    if (!this.#live || this.redrawing) return;
    this.redrawing = true;
    setImmediate(() => {
      this.redrawing = false;
      if (!this.midLine) this.#drawFooter();
    });
  }

  /** The footer, cut to the terminal: lines of at most its width less one (no wrap), at most its height less two. */
  #footerLines() {
    const width = Math.max(1, (this.stdout.columns ?? 80) - 1);
    const height = Math.max(1, (this.stdout.rows ?? 24) - 2);
    let lines = this.footer();
    if (lines.length > height) lines = [...lines.slice(0, height - 1), `… ${lines.length - height + 1} more`];
    return lines.map((line) => {
      const chars = [...line.replace(/\s+/g, " ")];
      return chars.length > width ? `${chars.slice(0, width - 1).join("")}…` : chars.join("");
    });
  }

  // From readline's cursor: down to the input's last row, the footer under
  // it (what was there cleared), back to the cursor.
  #drawFooter() {
    const lines = this.#footerLines();
    if (lines.length === 0 && this.drawn === 0) return;
    const rl = this.rl;
    const cursor = rl.getCursorPos();
    // The input's last row (readline's own measure of the prompt and line).
    const down = rl._getDisplayPos(`${rl.getPrompt()}${rl.line}`).rows - cursor.rows;
    const below = Math.max(lines.length, 1);
    this.stdout.write(`\r${"\n".repeat(down)}\n\x1b[J${lines.join("\n")}\x1b[${down + below}A\x1b[${cursor.cols + 1}G`);
    this.drawn = lines.length;
  }

  /** Clears the prompt (all its rows) and the footer under it; the cursor at the prompt's start. */
  #clearPrompt() {
    if (this.#live && !this.midLine) {
      readline.moveCursor(this.stdout, 0, -this.rl.getCursorPos().rows);
      readline.cursorTo(this.stdout, 0);
      readline.clearScreenDown(this.stdout);
      this.drawn = 0;
    }
  }

  stream(text) {
    this.#clearPrompt();
    this.midLine = true;
    this.stdout.write(text);
  }

  endStream() {
    if (!this.midLine) return;
    this.midLine = false;
    this.stdout.write("\n");
    this.prompt();
  }

  line(text) {
    if (this.midLine) {
      this.midLine = false;
      this.stdout.write("\n");
    } else this.#clearPrompt();
    this.stdout.write(`${text}\n`);
    this.prompt();
  }

  prompt() {
    if (this.#live && !this.midLine) this.rl.prompt(true);
  }

  /** Enter moved the cursor onto the footer's first line: cleared (the footer is drawn again under it). */
  entered() {
    if (this.#live && this.drawn > 0 && !this.midLine) {
      this.stdout.write("\x1b[J");
      this.drawn = 0;
    }
  }

  /** Leaving: a new line, the footer cleared (the terminal's next lines go where it was). */
  leave() {
    if (this.rl !== null && this.stdout.isTTY) this.stdout.write(this.drawn > 0 ? "\n\x1b[J" : "\n");
    this.drawn = 0;
  }
}

/** `--prompt`: one prompt, its answer on stdout, the exit status from its settlement. */
async function runOnce(o, client, where, unconfirmed) {
  const session = await openSession(client, o.session, (line) => process.stderr.write(`${line}\n`));
  // This prompt's streamed tokens go to a terminal; a pipe gets the final
  // answer alone (a retried model call re-streams from the start).
  const tty = process.stdout.isTTY;
  let commandId;
  let midLine = false;
  let streamed = false;
  const out = {
    stream(t, id) {
      if (!tty || id !== commandId) return;
      midLine = streamed = true;
      process.stdout.write(t);
    },
    endStream() {
      if (midLine) process.stdout.write("\n");
      midLine = false;
    },
    line(t) {
      out.endStream();
      process.stderr.write(`${t}\n`);
    },
  };
  const view = new SessionView(session, out, { unconfirmed });
  try {
    await view.watch.opened;
    // Ctrl-C cancels the prompt (once admitted); a second one leaves at once.
    let interrupts = 0;
    const cancel = () => session.cancel(commandId).catch((e) => process.stderr.write(`cancel: ${explain(e, where)}\n`));
    process.on("SIGINT", () => {
      if (++interrupts > 1) {
        unconfirmed.report((line) => process.stderr.write(`shiitake: ${line}\n`));
        process.exit(EXIT.cancelled);
      }
      process.stderr.write("cancelling (Ctrl-C again to leave at once)\n");
      if (commandId !== undefined) cancel();
    });
    const sent = await view.prompt(o.prompt);
    const receipt = sent.receipt ?? (await sent.recovered);
    if (receipt === null) return EXIT.service; // not sent: nothing ran
    ({ commandId } = receipt);
    if (interrupts > 0) cancel();
    const s = await view.settled(commandId);
    // A terminal saw the answer stream, unless it streamed before the receipt came.
    if ((!tty || !streamed) && s.answer !== null) process.stdout.write(`${s.answer}\n`);
    out.endStream();
    return EXIT[s.terminal];
  } finally {
    view.close();
  }
}

/** The Session to use: `id` checked to exist, or a new one (said through `say`). */
async function openSession(client, id, say) {
  if (id === undefined) {
    const { sessionId } = await client.createSession();
    say(`session ${sessionId} (new)`);
    return client.session(sessionId);
  }
  await client.session(id).read({ limit: 1 });
  return client.session(id);
}

/** The chat: a readline prompt, slash commands, Ctrl-C. Resolves the exit status. */
async function runChat(o, client, where, unconfirmed, get) {
  const session = await openSession(client, o.session, (l) => process.stdout.write(`${l}\n`));
  const tty = process.stdin.isTTY === true;
  const screen = new Screen(process.stdout);
  const rl = readline.createInterface({
    input: process.stdin,
    output: screen.echo(),
    terminal: tty,
    historySize: HISTORY_LINES_MAX,
    removeHistoryDuplicates: true,
    prompt: "> ",
  });
  if (tty) screen.rl = rl;
  /** While `/edit` waits for its text: `{after}`; the next prompt line is sent as the edit. */
  let editing = null;
  // A prompt that was not sent goes back to the input line, still an edit
  // if it was one (into the history, as a plain prompt, when something is
  // being typed).
  const onDraft = ({ text, after }) => {
    if (!tty) return "";
    if (rl.line === "") {
      if (after !== undefined) editing = { after };
      rl.write(text);
      return after === undefined ? "" : " (still an edit: Enter resends it)";
    }
    rl.history.unshift(text);
    return " (arrow-up recalls it)";
  };

  /** The notice under the prompt (a refused action or open, an action's own notice) until Esc dismisses it; a pipe gets it as a line. */
  let notice = null;
  const say = (text) => {
    if (!tty) return screen.line(`[notice] ${text}`);
    notice = text;
    screen.refresh();
  };
  /** While the Row actions palette is open: its choices (`{label, run}`); the next line picks one. */
  let palette = null;
  // The open callback of the rows' Session targets: authorized by reading
  // the Session with this client's credentials, then opened in the chat's
  // place (as /switch does); a refusal throws, and nothing changes.
  const openTarget = async (target) => {
    if (target.agentId !== undefined && (o.local !== undefined || target.agentId !== o.agent)) {
      throw new Error(`it is Agent ${target.agentId}'s; this chat talks to ${o.local === undefined ? `Agent ${o.agent}` : "the local Agent"} only`);
    }
    await client.session(target.sessionId).read({ limit: 1 });
    await switchTo(target.sessionId);
  };
  const rows = new ExtensionRows({ client, notice: (m) => say(typeof m === "string" ? m : JSON.stringify(m)), open: openTarget, onChange: () => screen.refresh() });
  const readRoster = async () => {
    try {
      rows.setRoster((await get("/extensions")).extensions);
    } catch {
      // An Agent without extensions: its entries stay offline and show nothing.
    }
  };

  const viewOf = (s, showRecent) =>
    new SessionView(s, screen, { showRecent, unconfirmed, onDraft, onSnapshot: (read) => rows.snapshot(s.id, read), onExtension: (id, update) => rows.update(s.id, id, update) });
  let view = viewOf(session, o.session !== undefined);
  rows.host.select(session.id);
  screen.footer = () => {
    const lines = rows.lines(view.session.id);
    if (lines.length === 0 && notice === null) return [];
    return ["─ /actions: the rows' actions · Esc dismisses a notice", ...(notice === null ? [] : [`[notice] ${notice}`]), ...lines];
  };
  screen.line("/help lists the commands; Ctrl-C cancels, twice quits.");
  readRoster();

  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const quit = () => {
    if (tty) screen.leave();
    rl.close();
    finish(EXIT.completed);
  };
  const report = (error) => screen.line(`error: ${explain(error, where)}`);

  const switchTo = async (id) => {
    const next = viewOf(client.session(id), true);
    try {
      await next.watch.opened;
    } catch (error) {
      next.close();
      throw error;
    }
    const was = view.session.id;
    view.close();
    view = next;
    if (was !== id) rows.forget(was);
    rows.host.select(id);
    screen.refresh();
    await readRoster();
  };

  /** Cancels the newest queued prompt, else the running one (said); false when there is neither. */
  const cancelNewest = async () => {
    const target = (await view.session.latestPending())?.commandId ?? view.running;
    if (target === null) return false;
    const r = await view.session.cancel(target);
    screen.line(r.status === "too_late" ? `too late to cancel ${target}` : `cancelling ${summary(r.text)}`);
    return true;
  };

  // Esc goes to the first of: the open palette (closed), a queued prompt,
  // else the running one (cancelled), an extension's waiting control (its
  // cancel action); only then does it dismiss the notice. The rows are live
  // state: Esc never hides them.
  const escape = async () => {
    if (palette !== null) {
      palette = null;
      return screen.line("[row actions closed]");
    }
    if (await cancelNewest()) return;
    const waiting = rows.waiting(view.session.id);
    if (waiting !== null) {
      try {
        await waiting.run();
      } catch (error) {
        say(`${waiting.label}: ${explain(error, where)}`);
      }
      return;
    }
    if (notice !== null) {
      notice = null;
      screen.refresh();
    }
  };

  /** Runs the palette's choice; a refusal (offline, stale, an open the host refused) becomes the notice. */
  const runChoice = async (chosen) => {
    try {
      const result = await chosen.run();
      if (result !== undefined) screen.line(`[${summary(chosen.label)}] ${summary(result)}`);
    } catch (error) {
      const why = error?.code === "open_refused" && error.cause ? `refused: ${explain(error.cause, where)}` : explain(error, where);
      say(`${chosen.label}: ${why}`);
    }
  };

  /** A user message of the selected branch: #n, else the newest; null after saying why not. */
  const userMessage = async (seq) => {
    const m = await findOnBranch(view.session, seq, (x) => x.role === "user");
    if (m?.role === "user") return m;
    screen.line(seq === undefined ? "no message of yours on this branch" : `#${seq} is no user message on this branch (/history lists them)`);
    return null;
  };

  const commands = {
    async cancel() {
      if (!(await cancelNewest())) screen.line("nothing to cancel");
    },
    async abort() {
      const r = await view.session.abort();
      screen.line(`aborted ${r.cancelled.length} prompt(s)`);
    },
    async history(args) {
      const n = args === "" ? HISTORY_DEFAULT : Number(args);
      if (!Number.isInteger(n) || n < 1 || n > HISTORY_MAX) return screen.line(`usage: /history [n], n from 1 to ${HISTORY_MAX}`);
      const { messages, cursor } = await view.session.read({ limit: n });
      if (messages.length === 0) return screen.line("no messages yet");
      if (cursor !== null) screen.line("(older messages: /history with a larger n)");
      for (const m of messages) screen.line(numbered(m));
    },
    async edit(args) {
      const { seq, rest } = parseRef(args);
      const m = await userMessage(seq);
      if (m === null) return;
      const after = m.parentEntryId ?? "";
      if (rest !== "") return view.prompt(rest, { after });
      editing = { after };
      screen.line(`[editing #${m.sequence}] Enter sends it as a new branch in its place; an empty line drops the edit`);
      if (tty) rl.write(m.text.replace(/\s*\n\s*/g, " "));
    },
    async retry(args) {
      const { seq, rest } = parseRef(args);
      if (rest !== "") return screen.line("usage: /retry [#n]");
      const m = await userMessage(seq);
      if (m !== null) return view.retry(m.entryId, `regenerate the answer to #${m.sequence}`);
    },
    async branches(args) {
      const { seq, rest } = parseRef(args);
      if (rest !== "") return screen.line("usage: /branches [#n]");
      const m = await findOnBranch(view.session, seq, (x) => x.branch !== undefined);
      if (m === null) return screen.line(seq === undefined ? "no message on this branch has alternatives" : `no #${seq} on this branch (/history lists them)`);
      if (m.branch === undefined) return screen.line(`#${m.sequence} has no alternatives`);
      // `""`: a Session's first messages, the children of its start.
      const list = await view.session.branches(m.parentEntryId ?? "", { limit: BRANCH_PAGE });
      view.alternatives = list.children;
      screen.line(`alternatives to #${m.sequence} (${list.count}):`);
      for (const [i, c] of list.children.entries()) screen.line(`${c.entryId === m.entryId ? "*" : " "} ${i + 1}. ${numbered(c)}`);
      if (list.cursor !== null) screen.line(`  (${list.count - list.children.length} more not listed)`);
    },
    async select(args) {
      const k = Number(args);
      const c = Number.isInteger(k) ? view.alternatives[k - 1] : undefined;
      if (c === undefined) return screen.line("usage: /select <k>, k a number of the last /branches list");
      return view.select(c.entryId, `select #${c.sequence}`);
    },
    compact: (args) => view.compact(args),
    async summary(args) {
      const { seq, rest } = parseRef(args);
      if (rest !== "") return screen.line("usage: /summary [#n]");
      const m = await findOnBranch(view.session, seq, (x) => x.role === "compaction");
      if (m?.role !== "compaction") return screen.line(seq === undefined ? "no compaction on this branch" : `#${seq} is no compaction on this branch`);
      const { messages, complete } = await readCompacted(view.session, m);
      screen.line(`[summary] #${m.sequence} stands for ${m.compacted.messages} messages (${m.compacted.trigger}):`);
      for (const line of m.text.split("\n")) screen.line(`  ${line}`);
      screen.line("[summarised]");
      if (!complete) screen.line("  (older ones not read)");
      for (const x of messages) screen.line(`  ${numbered(x)}`);
    },
    // From the usage ledger: each model call counted once (failed and
    // cut-off ones too). A budget's line goes after each total's.
    async usage(args) {
      if (args !== "") return screen.line("usage: /usage");
      const midnight = new Date().setUTCHours(0, 0, 0, 0);
      const id = view.session.id;
      const [mine, today, budget, daily] = await Promise.all([
        client.usage({ sessionId: id }),
        client.usage({ from: midnight }),
        get(`/sessions/${encodeURIComponent(id)}/budget`),
        get("/budget"),
      ]);
      const day = new Date(midnight).toISOString().slice(0, 10);
      const lines = [...usageLines(`Session ${id}`, mine.totals), budgetLine(budget), ...usageLines(`Agent today (${day} UTC)`, today.totals), budgetLine(daily)];
      for (const line of lines) screen.line(line);
    },
    async sessions() {
      const { sessions, cursor } = await client.listSessions({ limit: 50 });
      for (const s of sessions) screen.line(`${s.sessionId === view.session.id ? "*" : " "} ${s.sessionId}  ${new Date(s.createdAt).toISOString()}`);
      if (cursor !== null) screen.line("  (more not shown)");
    },
    async new() {
      const { sessionId } = await client.createSession();
      await switchTo(sessionId);
    },
    async switch(id) {
      if (!id) return screen.line("usage: /switch <session id>");
      await switchTo(id);
    },
    // The Row actions palette: a numbered choice, answered by the next line.
    actions(args) {
      if (args !== "") return screen.line("usage: /actions");
      const choices = rows.choices(view.session.id);
      if (choices.length === 0) return screen.line("no row actions: no extension row offers one");
      screen.line("Row actions:");
      for (const [i, c] of choices.entries()) screen.line(`  ${i + 1}. ${summary(c.label)}`);
      screen.line("a number and Enter runs one; Esc or an empty line closes");
      palette = choices;
    },
    help: () => screen.line(COMMANDS),
    quit,
  };

  // Piped lines are a script: each prompt (edit, retry, compaction)
  // settles before the next line (an unconfirmed one is recovered first).
  // At a terminal, recovery goes on while the chat does.
  const settleIfPiped = async (sent) => {
    if (tty || (sent?.receipt === undefined && sent?.recovered === undefined)) return;
    const receipt = sent.receipt ?? (await sent.recovered);
    if (receipt !== null) await view.settled(receipt.commandId);
  };

  const handle = async (line) => {
    const text = line.trim();
    if (palette !== null) {
      const choices = palette;
      palette = null;
      if (text === "") return screen.line("[row actions closed]");
      const chosen = /^\d+$/.test(text) ? choices[Number(text) - 1] : undefined;
      if (chosen === undefined) return screen.line(`no row action ${summary(text)}; /actions lists them again`);
      return runChoice(chosen);
    }
    if (text === "") {
      if (editing === null) return screen.prompt();
      editing = null;
      return screen.line("[edit dropped]");
    }
    if (text.startsWith("/")) {
      const [name, ...args] = text.slice(1).split(/\s+/);
      const run = Object.hasOwn(commands, name) ? commands[name] : null;
      if (run === null) return screen.line(`unknown command /${name}; /help lists them`);
      return settleIfPiped(await run(args.join(" ")));
    }
    const edit = editing;
    editing = null;
    return settleIfPiped(await view.prompt(text, edit ?? {}));
  };

  // Lines are handled in order (a pipe delivers them at once).
  let chain = Promise.resolve();
  // At a terminal the prompt comes back after each line (and each Esc),
  // also when it printed nothing (a choice that only set the notice).
  rl.on("line", (line) => {
    screen.entered();
    chain = chain
      .then(() => handle(line))
      .catch(report)
      .finally(() => screen.prompt());
  });

  let lastInterrupt = 0;
  rl.on("SIGINT", () => {
    const target = view.current();
    if (target === null || Date.now() - lastInterrupt < QUIT_WINDOW_MS) return quit();
    lastInterrupt = Date.now();
    screen.line("^C cancelling the running prompt (Ctrl-C again to quit)");
    view.session.cancel(target).catch(report);
  });

  if (tty) {
    process.stdin.on("keypress", (_, key) => {
      if (key?.name === "escape") {
        chain = chain
          .then(escape)
          .catch(report)
          .finally(() => screen.prompt());
      }
    });
  }

  rl.on("close", async () => {
    if (tty && screen.drawn > 0) screen.leave();
    await chain; // piped lines still being answered
    finish(EXIT.completed);
  });

  screen.prompt();
  const status = await finished;
  view.close();
  return status;
}

async function main(argv) {
  let o;
  try {
    o = parse(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`shiitake: ${error.message}\n(shiitake chat --help shows the options)\n`);
    return EXIT.usage;
  }
  if (o.help) {
    process.stdout.write(`${USAGE}\n`);
    return EXIT.completed;
  }
  let conn;
  try {
    conn = await connect(o);
  } catch (error) {
    process.stderr.write(`shiitake: cannot open ${o.local}: ${error.message}\n`);
    return EXIT.service;
  }
  const unconfirmed = new Unconfirmed();
  try {
    const status = await (o.prompt === undefined ? runChat : runOnce)(o, conn.client, conn.where, unconfirmed, conn.get);
    return unconfirmed.report((line) => process.stderr.write(`shiitake: ${line}\n`)) ? EXIT.service : status;
  } catch (error) {
    process.stderr.write(`shiitake: ${explain(error, conn.where)}\n`);
    unconfirmed.report((line) => process.stderr.write(`shiitake: ${line}\n`));
    return EXIT.service;
  } finally {
    conn.client.close();
    await conn.close();
  }
}

process.exitCode = await main(process.argv.slice(2));
// Lingering sockets (a long poll in flight) must not hold the exit.
process.exit();
