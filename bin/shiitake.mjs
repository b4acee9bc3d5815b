#!/usr/bin/env node
// `shiitake chat`: a terminal client of one Agent. It talks to a running
// service (`--url`, the demo's `npm start` by default) or, with `--local
// <file>`, runs the Agent itself on Node from a SQLite file (shiitake/node).
// Both go through the typed client (js/client.mjs): the local Agent's
// routes are called in process through the same `fetch` shape.
import readline from "node:readline";
import { Writable } from "node:stream";
import { parseArgs } from "node:util";
import { ShiitakeError, createShiitakeClient, isUncertain } from "../js/client.mjs";

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

In a chat: /cancel /abort /sessions /new /switch <id> /help /quit;
Ctrl-C cancels the running prompt, twice (or when idle) quits.

A prompt whose answer did not arrive is not sent again: the client asks the
Session whether it arrived ([sent]) or not ([not sent]: the text comes back
to the input line), retrying while the service cannot be reached.

Exit status: 0 completed (or quit), 1 failed, 2 usage error, 3 cancelled,
4 interrupted, 5 the service could not be used (unreachable, refused
token, unknown Session, a prompt not sent or left unconfirmed).`;

const COMMANDS = `  /cancel        cancel your newest queued prompt, else the running one
  /abort         cancel the running prompt and every queued one
  /sessions      list this Agent's Sessions
  /new           start a new Session
  /switch <id>   go to another Session
  /help          this list
  /quit          leave (Ctrl-D too)`;

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
/** Settlements a Session view remembers. */
const SETTLEMENTS_KEPT = 100;
/** The settlement long poll's wait per request: the longest the server grants (src/limits.rs SETTLEMENT_TIMEOUT_MS_MAX). */
const SETTLEMENT_WAIT_MS = 30_000;
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

/** The client of the Agent: remote over HTTP, or a local one in process. `where` names it in messages. */
async function connect(o) {
  if (o.local !== undefined) {
    const { openNodeShiitake } = await import("../js/node.mjs");
    const host = await openNodeShiitake({ path: o.local });
    const client = createShiitakeClient({ baseUrl: "http://local", fetch: (input, init) => host.fetch(new Request(input, init)) });
    return { client, where: `the Agent in ${host.path}`, close: () => host.close("shiitake chat quit") };
  }
  const baseUrl = `${o.url.replace(/\/+$/, "")}/agents/${encodeURIComponent(o.agent)}`;
  const auth = o.token === undefined ? {} : { authorization: `Bearer ${o.token}` };
  const fetch = (input, init) => globalThis.fetch(input, { ...init, headers: { ...init.headers, ...auth } });
  return { client: createShiitakeClient({ baseUrl, fetch }), where: o.url, close: async () => {} };
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
 * other clients' prompts, settlements; and keeps what runs and what waits.
 * `out.stream(text, commandId)` writes answer text, `out.line(text)` a
 * whole line.
 */
class SessionView {
  constructor(session, out, { showRecent = false, unconfirmed, onDraft = () => "" }) {
    this.session = session;
    this.out = out;
    /** The client's sends whose outcome is being recovered. */
    this.unconfirmed = unconfirmed;
    /** Takes back the text of a prompt that was not sent; what to say of it. */
    this.onDraft = onDraft;
    /** Whether joining shows the Session: its id, recent messages, what runs and waits. */
    this.showRecent = showRecent;
    /** The running command, per the watch. */
    this.running = null;
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
        else if (event === "frame") this.#frame(data);
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
    for (const m of [...read.messages, read.running, ...read.pending]) this.#seen(m);
    this.running = read.running?.commandId ?? null;
    for (const p of [read.running, ...read.pending]) if (p) this.texts.set(p.commandId, p.text);
    if (!this.showRecent) return;
    this.out.line(`session ${this.session.id}`);
    for (const m of read.messages.slice(-RECENT_MESSAGES_SHOWN)) this.#message(m, true);
    if (read.running) this.out.line(`[running] ${summary(read.running.text)}`);
    for (const p of read.pending) this.out.line(`[queued #${p.position}] ${summary(p.text)}`);
  }

  /** A message or queue item carrying a requestId settles an unconfirmed send of it. */
  #seen(item) {
    if (item?.requestId && item.commandId) this.unconfirmed.seen(this.session.id, item.requestId, item.commandId);
  }

  #frame(f) {
    if (f.type === "admitted") {
      this.#seen(f);
    } else if (f.type === "started") {
      this.running = f.commandId;
      this.streamed = "";
    } else if (f.type === "delta") {
      this.streamed += f.text;
      this.out.stream(f.text, f.commandId);
    } else if (f.type === "message") {
      this.#seen(f.message);
      this.#message(f.message, false);
    } else if (f.type === "diagnostic") {
      this.out.line(`[diagnostic] ${f.diagnostic}`);
    } else if (f.type === "tool") {
      this.#tool(f);
    } else if (f.type === "settled") {
      const s = f.settlement;
      if (this.running === s.commandId) this.running = null;
      for (const [id, shown] of this.#toolsRunning) if (shown.commandId === s.commandId) this.#toolsRunning.delete(id);
      this.out.line(settlementLine(s, this.texts.get(s.commandId)));
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

  #message(m, old) {
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
    } else if (old || !this.sent.has(m.requestId)) {
      this.out.line(`[${m.role}] ${summary(m.text)}`);
    }
  }

  #settle(s) {
    this.texts.delete(s.commandId);
    this.mine.delete(s.commandId);
    this.settlements.set(s.commandId, s);
    if (this.settlements.size > SETTLEMENTS_KEPT) this.settlements.delete(this.settlements.keys().next().value);
    this.waiters.get(s.commandId)?.(s);
  }

  /**
   * Sends a prompt. Resolves `{receipt}` when its answer came; `{recovered}`
   * when none did (the send is unconfirmed): `recovered` resolves its
   * receipt once the Session shows it admitted, or null once a committed
   * withdrawal says it never will be (its text goes to `onDraft`; sending it
   * again is a new request). A refusal throws: nothing was admitted.
   */
  async prompt(text) {
    if (this.unconfirmed.size >= UNCONFIRMED_MAX) {
      throw new Error(`${UNCONFIRMED_MAX} prompts are still unconfirmed; send this one once the service answers (arrow-up recalls it)`);
    }
    const requestId = crypto.randomUUID();
    this.sent.add(requestId);
    try {
      return { receipt: this.#admitted(text, await this.session.prompt(text, { requestId })) };
    } catch (error) {
      if (!isUncertain(error)) throw error;
      const why = error instanceof ShiitakeError ? `${error.status} ${error.code}` : (error?.cause?.message ?? error?.message ?? String(error));
      this.out.line(`[unconfirmed] ${summary(text)} (no answer: ${why}); asking the Session whether it arrived`);
      const recovered = this.unconfirmed.recover(this.session, requestId, text).then((outcome) => {
        if (outcome.status === "accepted") {
          this.out.line(`[sent] ${summary(text)} (${outcome.commandId})`);
          return this.#admitted(text, { status: "accepted", commandId: outcome.commandId, requestId });
        }
        this.out.line(`[not sent] ${summary(text)}${this.onDraft(text)}`);
        return null;
      });
      return { recovered };
    }
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
      return await Promise.race([fromWatch, poll]);
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
    this.watch.close();
  }
}

/** Output to a terminal with a readline prompt below it (or to a pipe). */
class Screen {
  constructor(stdout) {
    this.stdout = stdout;
    /** The readline interface whose prompt is redrawn below the output (a terminal only). */
    this.rl = null;
    this.midLine = false;
  }

  /**
   * Readline's output: while an answer streams, its echo of what is typed
   * is held back (the typed line shows when the prompt is redrawn).
   */
  echo() {
    const stdout = this.stdout;
    const gate = new Writable({
      write: (chunk, _encoding, done) => {
        if (!this.midLine) stdout.write(chunk);
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

  #clearPrompt() {
    if (this.rl && this.stdout.isTTY && !this.midLine) {
      readline.cursorTo(this.stdout, 0);
      readline.clearLine(this.stdout, 0);
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
    if (this.rl && this.stdout.isTTY && !this.midLine) this.rl.prompt(true);
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
async function runChat(o, client, where, unconfirmed) {
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
  // A prompt that was not sent goes back to the input line (into the
  // history instead when something is being typed).
  const onDraft = (text) => {
    if (!tty) return "";
    if (rl.line === "") {
      rl.write(text);
      return "";
    }
    rl.history.unshift(text);
    return " (arrow-up recalls it)";
  };
  const viewOf = (s, showRecent) => new SessionView(s, screen, { showRecent, unconfirmed, onDraft });
  let view = viewOf(session, o.session !== undefined);
  screen.line("/help lists the commands; Ctrl-C cancels, twice quits.");

  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const quit = () => {
    if (tty) process.stdout.write("\n");
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
    view.close();
    view = next;
  };

  const commands = {
    async cancel() {
      const target = (await view.session.latestPending())?.commandId ?? view.running;
      if (target === null) return screen.line("nothing to cancel");
      const r = await view.session.cancel(target);
      screen.line(r.status === "too_late" ? `too late to cancel ${target}` : `cancelling ${summary(r.text)}`);
    },
    async abort() {
      const r = await view.session.abort();
      screen.line(`aborted ${r.cancelled.length} prompt(s)`);
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
    help: () => screen.line(COMMANDS),
    quit,
  };

  const handle = async (line) => {
    const text = line.trim();
    if (text === "") return screen.prompt();
    if (text.startsWith("/")) {
      const [name, ...args] = text.slice(1).split(/\s+/);
      const run = Object.hasOwn(commands, name) ? commands[name] : null;
      if (run === null) return screen.line(`unknown command /${name}; /help lists them`);
      return run(args.join(" "));
    }
    const sent = await view.prompt(text);
    // Piped lines are a script: each prompt settles before the next line
    // (an unconfirmed one is recovered first). At a terminal, recovery goes
    // on while the chat does.
    if (tty) return;
    const receipt = sent.receipt ?? (await sent.recovered);
    if (receipt !== null) await view.settled(receipt.commandId);
  };

  // Lines are handled in order (a pipe delivers them at once).
  let chain = Promise.resolve();
  rl.on("line", (line) => {
    chain = chain.then(() => handle(line)).catch(report);
  });

  let lastInterrupt = 0;
  rl.on("SIGINT", () => {
    const target = view.current();
    if (target === null || Date.now() - lastInterrupt < QUIT_WINDOW_MS) return quit();
    lastInterrupt = Date.now();
    screen.line("^C cancelling the running prompt (Ctrl-C again to quit)");
    view.session.cancel(target).catch(report);
  });

  rl.on("close", async () => {
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
    const status = await (o.prompt === undefined ? runChat : runOnce)(o, conn.client, conn.where, unconfirmed);
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
