// The chat page the demo Worker serves at `/` (js/demo.mjs; bundled for the
// browser by scripts/chat-page.mjs). Plain DOM over the typed client
// (js/client.mjs): Sessions, the transcript with paging, the live watch,
// queued prompts, branches (edit and resend, regenerate, `< 2/3 >`),
// compaction markers, and the page's own commands offered to the model
// through the browser bridge (js/ui-browser.mjs). Holds nothing the server
// does not (a reload rebuilds everything from the Session read and its
// watch), except the sends whose answer did not arrive: the tab keeps those
// until the Session says what became of them ("uncertain sends" below).
import { bindSessionExtension, createShiitakeClient, isUncertain, readCompacted, ShiitakeError } from "../client.mjs";
import { bindingDispatch, createClientEntryHost, placeCells } from "../client-entry.mjs";
import { READ_PAGE_MESSAGES_MAX } from "../limits.mjs";
import { connectBrowser } from "../ui-browser.mjs";
import { goalClient, goalContract } from "../../examples/extensions/goal.client.mjs";
import { linksClient, linksContract } from "../../examples/extensions/links.client.mjs";

// The client entries this page renders (chips, pinned panel rows, timeline
// cells), each with the contract its extension binding is made from. An
// Agent that does not run one leaves it offline: it shows nothing.
const CLIENT_ENTRIES = [
  { entry: goalClient, contract: goalContract },
  { entry: linksClient, contract: linksContract },
];

// The page's own bounds: Sessions per list page, messages per transcript
// page, settlement reads in flight, characters of a tool summary, the watch's
// reconnect backoff.
const SESSIONS_PAGE = 50;
const MESSAGES_PAGE = 50;
/** Children per branches read when looking for a sibling (the route's largest page). */
const BRANCHES_PAGE = READ_PAGE_MESSAGES_MAX;
const SETTLEMENT_READS_AT_ONCE = 4;
const SUMMARY_CHARS_MAX = 160;
const RECONNECT_MS = [500, 30_000];
const TOKEN_KEY = "shiitake.token";
const AGENT_KEY = "shiitake.agent";
const UNSURE_KEY = "shiitake.unsure";
/** Sends at most kept in the tab while their outcome is unknown; past it the composer keeps the next one. */
const UNSURE_MAX = 8;

const $ = (id) => document.getElementById(id);
const el = (tag, props = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
};

const page = {
  token: sessionStorage.getItem(TOKEN_KEY),
  agent: new URLSearchParams(location.search).get("agent") ?? sessionStorage.getItem(AGENT_KEY) ?? "demo",
  client: null,
  sessionsCursor: null,
  /** The open Session's view; replaced whole on every switch. */
  view: null,
};

// ---- the transport: the token on every request, asked for again on a 401 ----

function authFetch(input, init = {}) {
  const headers = new Headers(init.headers);
  if (page.token) headers.set("authorization", `Bearer ${page.token}`);
  return fetch(input, { ...init, headers }).then((response) => {
    if (response.status === 401) askToken("The service refused the token. Enter it again.");
    return response;
  });
}

function askToken(why) {
  page.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $("token-error").hidden = !why;
  $("token-error").textContent = why ?? "";
  if (!$("token-dialog").open) $("token-dialog").showModal();
  $("token").focus();
}

function say(text) {
  $("notice").hidden = !text;
  $("notice").textContent = text ?? "";
}

function explain(error) {
  if (error instanceof ShiitakeError) return `${error.message} (${error.code})`;
  return error?.message ?? String(error);
}

// ---- Sessions ----

async function loadSessions({ more = false } = {}) {
  if (!page.client) return;
  const list = $("session-list");
  let answer;
  try {
    answer = await page.client.listSessions({ limit: SESSIONS_PAGE, ...(more ? { cursor: page.sessionsCursor } : {}) });
  } catch (error) {
    say(`Could not list Sessions: ${explain(error)}`);
    return;
  }
  if (!more) list.replaceChildren();
  for (const { sessionId } of answer.sessions) list.append(sessionItem(sessionId));
  page.sessionsCursor = answer.cursor;
  $("more-sessions").hidden = answer.cursor === null;
  markCurrent();
}

function sessionItem(sessionId) {
  const open = el("button", { type: "button", className: "open", textContent: sessionId, title: sessionId });
  open.addEventListener("click", () => openSession(sessionId));
  const remove = el("button", { type: "button", className: "quiet danger", textContent: "×", title: `Delete ${sessionId}` });
  remove.setAttribute("aria-label", `Delete Session ${sessionId}`);
  remove.addEventListener("click", async () => {
    if (!confirm(`Delete Session ${sessionId} and its transcript?`)) return;
    try {
      await page.client.deleteSession(sessionId);
    } catch (error) {
      say(`Could not delete ${sessionId}: ${explain(error)}`);
      return;
    }
    if (page.view?.sessionId === sessionId) closeSession();
    await loadSessions();
  });
  const item = el("li", {}, open, remove);
  item.dataset.sessionId = sessionId;
  return item;
}

function markCurrent() {
  for (const item of $("session-list").children) {
    item.setAttribute("aria-current", String(item.dataset.sessionId === page.view?.sessionId));
  }
}

async function newSession() {
  try {
    const { sessionId } = await page.client.createSession();
    await loadSessions();
    await openSession(sessionId);
  } catch (error) {
    say(`Could not create a Session: ${explain(error)}`);
  }
}

function closeSession() {
  const view = page.view;
  if (!view) return;
  view.stop.abort();
  view.bridge?.close();
  view.entries.close();
  page.view = null;
  $("messages").replaceChildren();
  $("pending").replaceChildren();
  $("unsure").replaceChildren();
  $("extensions").replaceChildren();
  $("costs").replaceChildren();
  $("costs").hidden = true;
  $("paused").hidden = true;
  setEditing(null);
  $("live").hidden = true;
  $("older").hidden = true;
  $("abort").hidden = true;
  $("state").textContent = "";
  $("session-title").textContent = "No Session";
  for (const id of ["prompt", "delivery", "send", "compact"]) $(id).disabled = true;
  history.replaceState(null, "", location.pathname + location.search);
  markCurrent();
}

async function openSession(sessionId) {
  closeSession();
  const session = page.client.session(sessionId);
  const view = {
    sessionId,
    session,
    stop: new AbortController(),
    /** entryId -> its <li>, so a message delivered twice renders once. */
    messages: new Map(),
    /** The newest Session position the page has. */
    newest: 0,
    /** commandId -> CommandSettlement, for the badge on its prompt. */
    settlements: new Map(),
    cursor: null,
    running: null,
    live: { commandId: null, text: "" },
    bridge: null,
    /** extensionId -> { status, commands } from `GET /extensions`, then `{value, history}` as observed. */
    extensions: new Map(),
    entries: null,
    /** Set by a `branch` frame until the next `message` frame: its `< i/n >` is only in a read. */
    branchMoved: false,
    /** While the composer resends an edited message: `{after}` (setEditing). */
    editing: null,
    /** The Session's ledger totals (refreshCosts), once read. */
    usage: null,
    /** The Session's budget `{tokens, set, spent, paused?}` and the Agent's daily one `{..., resetsAt}` (refreshCosts), once read. */
    budget: null,
    daily: null,
    /** While its turn waits for a budget: `{commandId, budget: {scope, tokens, spent, needs}}` (the `paused` frame, the read's `running.paused`). */
    paused: null,
  };
  view.entries = createClientEntryHost({
    entries: CLIENT_ENTRIES.map((c) => c.entry),
    dispatch: bindingDispatch((extensionId) => {
      const known = CLIENT_ENTRIES.find((c) => c.entry.id === extensionId);
      return known && bindSessionExtension(session, known.contract);
    }),
    notice: (message) => page.view === view && say(typeof message === "string" ? message : JSON.stringify(message)),
    open: openTarget,
    onChange: () => page.view === view && renderExtensions(view),
    onError: (error, where) => console.warn(`client entry ${where.extensionId}:`, error),
  });
  page.view = view;
  $("session-title").textContent = sessionId;
  history.replaceState(null, "", `#session=${encodeURIComponent(sessionId)}`);
  for (const id of ["prompt", "delivery", "send", "compact"]) $(id).disabled = false;
  markCurrent();
  say(null);
  showUnsure(view);
  readExtensions(view);
  watchLoop(view);
  view.bridge = connectBrowser({
    baseUrl: `${agentBase()}/browser/sessions/${encodeURIComponent(sessionId)}/browser`,
    whistle,
    fetch: authFetch,
  });
}

function agentBase() {
  return `/agents/${encodeURIComponent(page.agent)}`;
}

// ---- the watch: a snapshot, then frames; reopened after a drop ----

async function watchLoop(view) {
  let delay = RECONNECT_MS[0];
  while (!view.stop.signal.aborted) {
    const watch = view.session.watch({ signal: view.stop.signal });
    try {
      await watch.opened;
      delay = RECONNECT_MS[0];
      recover(); // connected again: settle what is uncertain
      for await (const event of watch) {
        if (event.event === "snapshot") renderSnapshot(view, event.data);
        else if (event.event === "frame") {
          applyFrame(view, event.data);
          // The selected branch changed: what the page shows past its entry
          // is another branch. Read it again (the frames after wait meanwhile);
          // and once more after its next message, whose `< i/n >` (a first
          // message of a branch, such as a regenerated answer) only a read
          // carries.
          const { type } = event.data;
          if (type === "branch" || (type === "message" && view.branchMoved)) {
            view.branchMoved = type === "branch";
            await reread(view);
          }
        } else if (event.event === "runtime-error") {
          const retry = event.data.retryInMs !== undefined ? ` (retrying in ${Math.round(event.data.retryInMs / 1000)} s)` : "";
          say(`The model call failed: ${event.data.diagnostic}${retry}`);
        }
      }
      if (view.stop.signal.aborted) return;
    } catch (error) {
      if (view.stop.signal.aborted) return;
      if (error instanceof ShiitakeError && error.status === 404) {
        say(`Session ${view.sessionId} does not exist any more.`);
        closeSession();
        return;
      }
      say(`The live view dropped (${explain(error)}); reconnecting…`);
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, RECONNECT_MS[1]);
  }
}

function renderSnapshot(view, read) {
  reconcile(view, [...read.messages, read.running, ...read.pending]);
  showPaused(view, read.running?.paused ? { commandId: read.running.commandId, budget: read.running.paused.budget } : null);
  view.messages.clear();
  view.newest = 0;
  $("messages").replaceChildren();
  $("tools").replaceChildren();
  for (const message of read.messages) appendMessage(view, message);
  view.cursor = read.cursor;
  $("older").hidden = read.cursor === null;
  renderQueue(view, read);
  readSettlements(view, read.messages);
  for (const { entry } of CLIENT_ENTRIES) {
    const id = entry.id;
    observeExtension(view, id, { value: read.extensions?.[id] ?? null, history: read.extensionHistory?.[id] });
  }
  renderCells(view);
  refreshCosts(view);
  say(null);
  scrollToEnd();
}

async function reread(view) {
  try {
    const read = await view.session.read({ limit: MESSAGES_PAGE, signal: view.stop.signal });
    if (page.view === view) renderSnapshot(view, read);
  } catch (error) {
    if (page.view === view && !view.stop.signal.aborted) say(`Could not read the Session again: ${explain(error)}`);
  }
}

function applyFrame(view, frame) {
  switch (frame.type) {
    case "message":
      reconcile(view, [frame.message]);
      appendMessage(view, frame.message);
      if (frame.message.role === "assistant" && frame.message.commandId === view.live.commandId) showLive(view, null, "");
      if (frame.message.role === "tool") endTools(`[data-call-id="${CSS.escape(frame.message.toolCallId ?? "")}"]`);
      scrollToEnd();
      break;
    case "tool":
      showTool(frame);
      scrollToEnd();
      break;
    case "delta":
      showLive(view, frame.commandId, (view.live.commandId === frame.commandId ? view.live.text : "") + frame.text);
      scrollToEnd();
      break;
    case "settled": {
      const { settlement } = frame;
      view.settlements.set(settlement.commandId, settlement);
      // A regenerate or a compaction has no prompt of its own to carry the badge.
      if (!badge(view, settlement.commandId) && settlement.terminal !== "completed" && settlement.terminal !== "cancelled") {
        say(`${settlement.terminal}${settlement.diagnostic ? `: ${settlement.diagnostic}` : ""}`);
      }
      if (view.live.commandId === settlement.commandId) showLive(view, null, "");
      if (view.paused?.commandId === settlement.commandId) showPaused(view, null);
      endTools(`[data-command-id="${CSS.escape(settlement.commandId)}"]`);
      refreshQueue(view);
      refreshCosts(view);
      break;
    }
    case "admitted":
      reconcile(view, [frame]);
      refreshQueue(view);
      break;
    case "started":
      // A paused turn goes on at the same attempt: its budget covers it now.
      if (view.paused?.commandId === frame.commandId) {
        showPaused(view, null);
        refreshCosts(view);
      }
      refreshQueue(view);
      break;
    case "paused":
      showPaused(view, { commandId: frame.commandId, budget: frame.budget });
      refreshQueue(view);
      refreshCosts(view);
      break;
    case "diagnostic":
      say(frame.diagnostic);
      break;
    case "extension":
      if (frame.scope === "session") observeExtension(view, frame.extensionId, { value: frame.value, ...(frame.history ? { history: frame.history } : {}) });
      break;
    default:
      break; // attention frames: not shown by this page
  }
}

function showLive(view, commandId, text) {
  view.live = { commandId, text };
  $("live").hidden = commandId === null;
  $("live").textContent = text;
}

// A running tool call, from its `tool` frames (live only, like `delta`):
// shown from `started` with its latest progress counters until `ended`,
// its `tool` message, or its turn's settlement.
function showTool(frame) {
  let item = $("tools").querySelector(`li[data-call-id="${CSS.escape(frame.toolCallId)}"]`);
  if (frame.phase === "ended") {
    item?.remove();
    return;
  }
  if (!item) {
    item = el("li", { className: "message running-tool" }, el("span", { className: "who", textContent: `tool · ${frame.name} · running` }), el("div", { className: "counters" }));
    item.dataset.callId = frame.toolCallId;
    item.dataset.commandId = frame.commandId;
    $("tools").append(item);
  }
  if (frame.phase === "progress") item.querySelector(".counters").textContent = counters(frame.result.data);
}

function endTools(selector) {
  for (const item of $("tools").querySelectorAll(`li${selector}`)) item.remove();
}

/** Progress data in one line: an object's fields as `name value`, anything else as JSON. */
function counters(data) {
  if (data === null || typeof data !== "object" || Array.isArray(data)) return summary(data);
  return clip(Object.entries(data).map(([name, value]) => `${name} ${typeof value === "string" ? value : JSON.stringify(value)}`).join(" · "));
}

/**
 * `read(view)` coalesced per view: one in flight; asked again meanwhile, it
 * runs once more after. Failures are quiet (the next refresh tries again).
 */
function coalesced(read) {
  const inFlight = new WeakMap();
  const again = new WeakSet();
  const refresh = (view) => {
    if (inFlight.has(view)) {
      again.add(view);
      return;
    }
    const done = read(view)
      .catch(() => {})
      .finally(() => {
        inFlight.delete(view);
        if (again.delete(view)) refresh(view);
      });
    inFlight.set(view, done);
  };
  return refresh;
}

// A queue read after each admission, start and settlement: the frames carry
// ids, the read carries the texts.
const refreshQueue = coalesced((view) => view.session.read({ limit: 1 }).then((read) => page.view === view && renderQueue(view, read)));

function renderQueue(view, read) {
  view.running = read.running;
  const list = $("pending");
  list.replaceChildren();
  if (read.running) {
    const stop = el("button", { type: "button", className: "danger", textContent: "Stop" });
    stop.addEventListener("click", () => cancel(view, read.running.commandId));
    list.append(el("li", { className: "running" }, el("span", { className: "text", textContent: `${view.paused ? "Paused" : "Running"}: ${workLabel(read.running)}` }), stop));
  }
  for (const item of read.pending) {
    const button = el("button", { type: "button", textContent: "Cancel" });
    button.setAttribute("aria-label", `Cancel queued prompt ${item.position}`);
    button.addEventListener("click", () => cancel(view, item.commandId));
    const label = `${item.delivery === "steer" ? "Steer" : "Queued"} #${item.position}${item.after !== undefined ? " (edit)" : ""}: ${workLabel(item)}`;
    list.append(el("li", { className: "queued" }, el("span", { className: "text", textContent: label }), button));
  }
  const busy = read.running !== null || read.pending.length > 0;
  $("state").textContent = read.running ? (view.paused ? "Paused" : "Running…") : read.pending.length > 0 ? "Queued" : "Idle";
  $("abort").hidden = !busy;
}

// ---- what the Session cost ----

// The Session's running total, from the usage ledger (`GET /usage?sessionId=`,
// each model call of the Session counted once, failed and cut-off ones too),
// and its budgets (`GET /sessions/:id/budget`, `GET /budget`): read with each
// snapshot (opening the Session, a reload, a reconnect), after each
// settlement (the ledger row is written with it), and when its turn pauses
// or goes on.
const refreshCosts = coalesced(async (view) => {
  const { signal } = view.stop;
  const [ledger, budget, daily] = await Promise.all([
    page.client.usage({ sessionId: view.sessionId, signal }),
    readBudget(`/sessions/${encodeURIComponent(view.sessionId)}/budget`, signal),
    readBudget("/budget", signal),
  ]);
  if (page.view !== view) return;
  Object.assign(view, { usage: ledger.totals, budget, daily });
  renderCosts(view);
});

/** A budget as its route answers it; null when it cannot be read (a service without budgets). */
function readBudget(path, signal) {
  return authFetch(`${agentBase()}${path}`, { signal })
    .then((response) => (response.ok ? response.json() : null))
    .catch(() => null);
}

/** The lines under the Session's title, each `<span data-line>`: its running total, its budget, the Agent's daily one (none where no budget applies). */
function renderCosts(view) {
  const lines = [];
  if (view.usage) lines.push(costLine("total", `Session total: ${calls(view.usage)} · ${tokens(view.usage)}`, "This Session's model calls and the tokens their providers reported (the usage ledger)"));
  if (view.budget?.tokens != null) lines.push(costLine("budget", budgetText("budget", view.budget), "This Session's token budget: the input and output tokens its model calls may spend"));
  if (view.daily?.tokens != null) {
    const resets = new Date(view.daily.resetsAt).toISOString().slice(11, 16);
    lines.push(costLine("daily", budgetText("Agent today: budget", view.daily), `The Agent's token budget for the day, all its Sessions together; it starts again at ${resets} UTC`));
  }
  $("costs").replaceChildren(...lines);
  $("costs").hidden = lines.length === 0;
}

/** `budget 1,000 · 640 spent` (without the spent figure while nothing is counted yet). */
function budgetText(label, { tokens, spent }) {
  return `${label} ${count(tokens)}${spent === null ? "" : ` · ${count(spent)} spent`}`;
}

const count = (n) => n.toLocaleString("en-US");

// The notice of a turn a budget paused (`paused`: `{commandId, budget}`, or
// null once it goes on, settles, or a read shows it running unpaused).
function showPaused(view, paused) {
  view.paused = paused;
  const notice = $("paused");
  notice.hidden = paused === null;
  if (paused === null) {
    notice.textContent = "";
    return;
  }
  const { scope, tokens, spent } = paused.budget;
  const whose = scope === "agent" ? "the Agent's daily token budget" : "the Session's token budget";
  const until = scope === "agent" ? "the budget is raised or the day ends (00:00 UTC)" : "the budget is raised";
  notice.textContent = `Paused: ${whose} is reached (${count(spent)} of ${count(tokens)}). The turn goes on when ${until}; Stop ends it.`;
}

function costLine(name, text, title) {
  const line = el("span", { className: "cost", textContent: text, title });
  line.dataset.line = name;
  return line;
}

/** Ledger figures' calls: `n calls`, with the failed and cut-off (unknown) ones when there are any. */
function calls(figures) {
  const others = [figures.failed && `${figures.failed} failed`, figures.unknown && `${figures.unknown} unknown`].filter(Boolean);
  return `${figures.calls} call${figures.calls === 1 ? "" : "s"}${others.length ? ` (${others.join(", ")})` : ""}`;
}

/** What a queued or running command does: its prompt's text, else a regenerate or a compaction. */
function workLabel(item) {
  if (item.type === "compact") return item.text ? `compaction (${item.text})` : "compaction";
  if (item.retry !== undefined || (item.text === "" && item.images === undefined)) return "regenerate an answer";
  return item.text || `${item.images.length} image(s)`;
}

async function cancel(view, commandId) {
  try {
    const outcome = await view.session.cancel(commandId);
    if (outcome.status === "cancelled" && outcome.text && $("prompt").value === "") $("prompt").value = outcome.text;
    if (outcome.status === "too_late") say("Too late to cancel: that prompt already ended.");
  } catch (error) {
    say(`Could not cancel: ${explain(error)}`);
  }
  refreshQueue(view);
}

// ---- the transcript ----

function appendMessage(view, message, { before = null } = {}) {
  if (view.messages.has(message.entryId)) return;
  const item = renderMessage(view, message);
  // A read's messages carry their Session position and parent; a live
  // message frame is the next one after the newest the page has, on the
  // branch it shows (after the last message, or first of all).
  const sequence = message.sequence ?? view.newest + 1;
  item.dataset.sequence = String(sequence);
  let parent = message.parentEntryId;
  if (parent === undefined && before === null) parent = lastMessage()?.dataset.entryId ?? (view.cursor === null ? null : undefined);
  if (parent !== undefined) item.dataset.parent = parent ?? "";
  view.newest = Math.max(view.newest, sequence);
  view.messages.set(message.entryId, item);
  $("messages").insertBefore(item, before);
  if (message.role === "user" && message.commandId) badge(view, message.commandId);
  if (before === null) renderCells(view);
}

function lastMessage() {
  const rows = $("messages").querySelectorAll(":scope > li.message");
  return rows[rows.length - 1];
}

/** A message's row; `actions`: with Edit, Regenerate and its `< i/n >` (not inside a compaction's list). */
function renderMessage(view, message, { actions = true } = {}) {
  const who = message.role === "tool" ? `tool · ${message.toolName ?? ""}` : message.role;
  const item = el("li", { className: `message ${message.role}` }, el("span", { className: "who", textContent: who }));
  item.dataset.entryId = message.entryId;
  if (message.commandId) item.dataset.commandId = message.commandId;
  if (message.role === "compaction") {
    item.append(compactionDetails(view, message));
    return item;
  }
  if (message.text) item.append(el("div", { className: "text", textContent: message.text }));
  if (message.role === "assistant" && message.usage) {
    item.append(el("div", { className: "usage", textContent: tokens(message.usage), title: "Tokens the provider reported for this answer" }));
  }
  if (message.toolCalls?.length) {
    item.append(el("ul", { className: "calls" }, ...message.toolCalls.map((call) => el("li", { textContent: `${call.name}(${summary(call.arguments)})` }))));
  }
  if (message.role === "tool") {
    if (message.isError) item.classList.add("failed");
    if (message.data !== undefined) {
      item.append(el("details", {}, el("summary", { textContent: "data" }), el("pre", { textContent: JSON.stringify(message.data, null, 2) })));
    }
  }
  if (actions) {
    const row = el("div", { className: "actions" });
    if (message.branch) row.append(branchNav(view, message));
    if (message.role === "user") row.append(action("Edit", "Edit this message and send it as a new branch", () => startEdit(view, item, message)));
    if (message.role === "assistant" && !message.toolCalls?.length) row.append(action("Regenerate", "Generate this answer again, beside this one", () => regenerate(view, item)));
    if (row.childElementCount > 0) item.append(row);
  }
  return item;
}

/** Tokens as providers reported them (an answer's usage, ledger figures): `in (cached) · out`. */
function tokens(usage) {
  const cached = usage.cacheReadTokens ? ` (${usage.cacheReadTokens} cached)` : "";
  return `${usage.inputTokens} in${cached} · ${usage.outputTokens} out`;
}

function action(label, title, run) {
  const button = el("button", { type: "button", className: "quiet", textContent: label, title });
  button.addEventListener("click", run);
  return button;
}

// ---- branches: edit and resend, regenerate, `< i/n >` ----

/** `< i/n >`: the message's place among its parent's children; the arrows select a sibling. */
function branchNav(view, message) {
  const { index, count } = message.branch;
  const go = (to, label) => {
    const button = el("button", { type: "button", className: "quiet", textContent: to < index ? "<" : ">", disabled: to < 1 || to > count });
    button.setAttribute("aria-label", label);
    button.addEventListener("click", () => switchBranch(view, message.parentEntryId, to));
    return button;
  };
  return el("span", { className: "branch-nav" }, go(index - 1, "Previous branch"), el("span", { className: "branch-at", textContent: `${index}/${count}` }), go(index + 1, "Next branch"));
}

// Selects the `index`-th child of `parent` (null: the Session's start); the
// `branch` frame that follows re-reads the Session.
async function switchBranch(view, parent, index) {
  let sibling;
  try {
    let cursor = null;
    do {
      const page = await view.session.branches(parent ?? "", { limit: BRANCHES_PAGE, cursor });
      sibling = page.children.find((child) => child.branch?.index === index);
      cursor = page.cursor;
    } while (sibling === undefined && cursor !== null);
  } catch (error) {
    say(`Could not list the branches: ${explain(error)}`);
    return;
  }
  if (sibling === undefined) return say("That branch is not there any more.");
  await dispatch(view, { kind: "select", entryId: sibling.entryId, text: clip(sibling.text) }, (requestId) => view.session.select(sibling.entryId, { requestId }));
}

// The composer takes the message's text; Send starts a new branch after the
// message's parent (`after: ""`: a new first message).
function startEdit(view, item, message) {
  if (item.dataset.parent === undefined) return say("Load older messages first: this message's place is not known yet.");
  $("prompt").value = message.text;
  setEditing({ after: item.dataset.parent });
  $("prompt").focus();
}

/** The composer's edit state: `{after}` while Send resends an edited message, else null. */
function setEditing(editing) {
  if (page.view) page.view.editing = editing;
  $("editing").hidden = editing === null;
  $("delivery").disabled = editing !== null || !page.view;
  if (editing !== null) $("delivery").value = "followUp"; // an edit never steers
}

// Regenerates an answer: `retry` of the prompt it answers, the nearest user
// message above it on the branch.
async function regenerate(view, item) {
  let prompt = item.previousElementSibling;
  while (prompt !== null && !prompt.matches("li.message.user")) prompt = prompt.previousElementSibling;
  if (prompt === null) return say("Load older messages first: the prompt this answers is not loaded.");
  const entryId = prompt.dataset.entryId;
  await dispatch(view, { kind: "retry", entryId, text: clip(prompt.querySelector(".text")?.textContent ?? "") }, (requestId) => view.session.retry(entryId, { requestId }));
}

// ---- compaction markers ----

// "N messages summarised", opening to the summary and the messages it
// stands for (read when first opened: they stay in the Session, older than
// the marker).
function compactionDetails(view, message) {
  const n = message.compacted?.messages ?? 0;
  const list = el("ol", { className: "compacted" });
  list.setAttribute("aria-label", "Summarised messages");
  const details = el(
    "details",
    {},
    el("summary", { textContent: `${n} message${n === 1 ? "" : "s"} summarised` }),
    message.instructions ? el("p", { className: "instructions", textContent: `Instructions: ${message.instructions}` }) : null,
    el("div", { className: "text", textContent: message.text }),
    list,
  );
  let loaded = false;
  details.addEventListener("toggle", async () => {
    if (!details.open || loaded) return;
    loaded = true;
    list.replaceChildren(el("li", { className: "state", textContent: "Loading the summarised messages…" }));
    try {
      const { messages, complete } = await readCompacted(view.session, message, { signal: view.stop.signal });
      list.replaceChildren(...messages.map((m) => renderMessage(view, m, { actions: false })));
      if (!complete) list.append(el("li", { className: "state", textContent: "Older ones are further back than this page reads." }));
    } catch (error) {
      loaded = false;
      list.replaceChildren(el("li", { className: "error", textContent: `Could not read them: ${explain(error)}` }));
    }
  });
  return details;
}

function summary(value) {
  return clip(JSON.stringify(value) ?? "");
}

function clip(text) {
  return text.length > SUMMARY_CHARS_MAX ? `${text.slice(0, SUMMARY_CHARS_MAX - 1)}…` : text;
}

/** Shows a command's settlement on its prompt; whether the page shows that prompt. */
function badge(view, commandId) {
  const settlement = view.settlements.get(commandId);
  if (!settlement) return false;
  const prompts = $("messages").querySelectorAll(`li.user[data-command-id="${CSS.escape(commandId)}"]`);
  for (const item of prompts) {
    item.querySelector(".settlement")?.remove();
    const why = settlement.diagnostic ? `: ${settlement.diagnostic}` : "";
    item.append(el("span", { className: `settlement ${settlement.terminal}`, textContent: `${settlement.terminal}${why}` }));
  }
  return prompts.length > 0;
}

// The settlement of each prompt on a page, read a few at a time.
async function readSettlements(view, messages) {
  const ids = messages.filter((m) => m.role === "user" && m.commandId && !view.settlements.has(m.commandId)).map((m) => m.commandId);
  const next = async () => {
    while (ids.length > 0 && page.view === view) {
      const commandId = ids.shift();
      const settlement = await view.session.readSettlement(commandId).catch(() => undefined);
      if (settlement) {
        view.settlements.set(commandId, settlement);
        badge(view, commandId);
      }
    }
  };
  await Promise.all(Array.from({ length: SETTLEMENT_READS_AT_ONCE }, next));
}

async function loadOlder() {
  const view = page.view;
  if (!view || view.cursor === null) return;
  let read;
  try {
    read = await view.session.read({ before: view.cursor, limit: MESSAGES_PAGE });
  } catch (error) {
    say(`Could not load older messages: ${explain(error)}`);
    return;
  }
  if (page.view !== view) return;
  const first = $("messages").firstChild;
  for (const message of read.messages) appendMessage(view, message, { before: first });
  view.cursor = read.cursor;
  $("older").hidden = read.cursor === null;
  readSettlements(view, read.messages);
  renderCells(view);
}

function scrollToEnd() {
  const box = $("transcript");
  box.scrollTop = box.scrollHeight;
}

// A send is kept (requestId, exact text) from before its request leaves
// until its answer comes; if none comes, until the Session says what became
// of it (below). The composer is emptied at once, so the text is never both
// a draft and maybe sent. An edit is a prompt with `after`.
async function send(event) {
  event.preventDefault();
  const view = page.view;
  const text = $("prompt").value.trim();
  if (!view || text === "" || full("this one stays here until the service answers")) return;
  const fields = { kind: "prompt", text, delivery: $("delivery").value, ...(view.editing ? { after: view.editing.after } : {}) };
  $("prompt").value = "";
  setEditing(null);
  $("delivery").value = "followUp";
  await dispatch(view, fields, (requestId) => view.session.prompt(text, { requestId, delivery: fields.delivery, after: fields.after }));
  $("prompt").focus();
}

/** Whether UNSURE_MAX sends wait for their outcome (then says so, and `then`). */
function full(then) {
  if (unsure.list().length < UNSURE_MAX) return false;
  say(`${UNSURE_MAX} sends are still unconfirmed; ${then}.`);
  return true;
}

// Sends one command (`fields.kind`: prompt, retry, select, compact) under a
// new requestId (`call(requestId)` sends it), kept as uncertain until its
// answer comes; a refusal is said, and a missing answer left to recovery.
async function dispatch(view, fields, call) {
  if (full("try again once the service answers")) return;
  const sent = { agent: page.agent, sessionId: view.sessionId, requestId: crypto.randomUUID(), ...fields };
  unsure.add(sent);
  unsure.inFlight.add(sent.requestId);
  showUnsure(view);
  try {
    await call(sent.requestId);
    unsure.drop(sent.requestId);
    say(null);
  } catch (error) {
    // A refusal admitted nothing; no answer (a dropped connection, a 5xx)
    // leaves it to recovery.
    if (!isUncertain(error) && unsure.drop(sent.requestId)) {
      if (kindOf(sent) === "prompt") {
        restoreDraft(sent);
        say(`Not sent: ${explain(error)}`);
      } else say(`Could not ${VERBS[sent.kind]}: ${explain(error)}`);
    } else if (unsure.has(sent.requestId)) {
      say(`No answer to the ${NOUNS[kindOf(sent)]} (${explain(error)}); asking the Session whether it arrived…`);
    }
  } finally {
    unsure.inFlight.delete(sent.requestId);
    if (page.view === view) showUnsure(view);
    recover();
  }
}

// ---- uncertain sends (seed "Recover an uncertain send") ----
//
// A send whose answer did not arrive may or may not have been admitted. Its
// requestId and exact text stay in the tab's sessionStorage (a reload keeps
// them) until the Session says which: `withdraw(requestId)` answers
// `accepted` (it was sent: its commandId) or `unknown` (a committed fence:
// it never will be, so the text goes back to the composer, and a retry is a
// new send with a new requestId); a watch frame or read that carries the
// requestId settles it too. A failed withdraw is retried with the watch's
// backoff, and at once when the watch reconnects or the browser is online.
// Regenerates, branch switches and compactions are kept alike; one that
// never arrived is said so (nothing goes back to the composer), and doing
// it again is a new request.

/** A kept send's kind (sends kept before kinds existed are prompts). */
const kindOf = (sent) => sent.kind ?? "prompt";
const NOUNS = { prompt: "prompt", retry: "regenerate request", select: "branch switch", compact: "compaction request" };
const VERBS = { retry: "regenerate", select: "switch branches", compact: "compact" };

/** What the page shows of a kept send. */
function sentLabel(sent) {
  switch (kindOf(sent)) {
    case "retry":
      return `regenerate the answer to: ${sent.text}`;
    case "select":
      return `switch to the branch of: ${sent.text}`;
    case "compact":
      return "compact the conversation";
    default:
      return sent.text;
  }
}

const unsure = {
  /** requestIds whose request is still awaiting its answer in this page. */
  inFlight: new Set(),
  /** Every kept send `{agent, sessionId, requestId, kind?, text, delivery?, after?, entryId?, fenced?}`, oldest first. */
  list() {
    try {
      const list = JSON.parse(sessionStorage.getItem(UNSURE_KEY) ?? "[]");
      return Array.isArray(list) ? list : [];
    } catch {
      return [];
    }
  },
  save(list) {
    if (list.length === 0) sessionStorage.removeItem(UNSURE_KEY);
    else sessionStorage.setItem(UNSURE_KEY, JSON.stringify(list));
  },
  add(sent) {
    this.save([...this.list(), sent]);
  },
  has(requestId) {
    return this.list().some((s) => s.requestId === requestId);
  },
  /** Forgets a send; returns it (undefined when it was not kept). */
  drop(requestId) {
    const list = this.list();
    const at = list.findIndex((s) => s.requestId === requestId);
    if (at < 0) return undefined;
    const [sent] = list.splice(at, 1);
    this.save(list);
    return sent;
  },
  update(sent) {
    this.save(this.list().map((s) => (s.requestId === sent.requestId ? sent : s)));
  },
};

// The open Session's uncertain sends, under the queue; a fenced one (its
// Session was not open when the answer came) goes back to the composer now.
function showUnsure(view) {
  for (const sent of unsure.list()) {
    if (sent.fenced && sent.agent === page.agent && sent.sessionId === view.sessionId) {
      unsure.drop(sent.requestId);
      restoreDraft(sent);
      say("A prompt that never reached the Session is back in the composer.");
    }
  }
  const mine = unsure.list().filter((s) => s.agent === page.agent && s.sessionId === view.sessionId);
  $("unsure").replaceChildren(
    ...mine.map((s) => {
      const state = unsure.inFlight.has(s.requestId) ? "Sending" : "Not confirmed yet, checking";
      const item = el("li", { className: "unsure" }, el("span", { className: "text", textContent: `${state}: ${sentLabel(s)}` }));
      item.dataset.requestId = s.requestId;
      return item;
    }),
  );
}

function restoreDraft(sent) {
  const box = $("prompt");
  // Whatever was typed since stays, the restored text after it.
  box.value = box.value.trim() === "" ? sent.text : `${box.value}\n\n${sent.text}`;
  // An edit is still one: Send resends it after the same entry.
  if (sent.after !== undefined) setEditing({ after: sent.after });
  else $("delivery").value = sent.delivery;
}

// Settles the uncertain sends of `view`'s Session that `items` (messages,
// queue items, `admitted` frames) show admitted.
function reconcile(view, items) {
  for (const item of items) {
    if (!item?.requestId || !item.commandId) continue;
    const sent = unsure.list().find((s) => s.requestId === item.requestId && s.agent === page.agent && s.sessionId === view.sessionId);
    if (sent) settle(sent, { status: "accepted", commandId: item.commandId });
  }
}

// What became of an uncertain send: `accepted` (sent after all), `unknown`
// (fenced: the text becomes a draft again, now if its Session is open),
// `gone` (its Session was deleted: nothing of it can run).
function settle(sent, outcome) {
  if (!unsure.has(sent.requestId)) return; // settled already (the watch and withdraw both told)
  const open = page.view?.sessionId === sent.sessionId && sent.agent === page.agent;
  const prompt = kindOf(sent) === "prompt";
  if (outcome.status === "accepted") {
    unsure.drop(sent.requestId);
    // (While its request is in flight, its answer is what the user sees.)
    if (open && !unsure.inFlight.has(sent.requestId)) say(`Sent: the Session has your ${NOUNS[kindOf(sent)]} (${outcome.commandId}).`);
  } else if (outcome.status === "unknown" && !open && prompt) {
    unsure.update({ ...sent, fenced: true });
  } else {
    unsure.drop(sent.requestId);
    if (outcome.status === "unknown" && prompt) {
      restoreDraft(sent);
      say("Not sent: the Session never received it; it is back in the composer.");
    } else if (outcome.status === "unknown") {
      if (open) say(`Not done: the Session never received the ${NOUNS[kindOf(sent)]}; do it again if you still want it.`);
    } else {
      say(`Not sent (Session ${sent.sessionId} no longer exists): ${sentLabel(sent)}`);
    }
  }
  if (page.view) showUnsure(page.view);
}

const recovery = { running: null, again: false, timer: undefined, delay: RECONNECT_MS[0] };

// Asks the Session about every uncertain send of this Agent whose request
// is no longer in flight. One pass at a time; a failure schedules the next,
// each later than the one before (`retry`), until something happens that
// may have changed it (a send, a reconnected watch, the browser online).
function recover(retry = false) {
  if (!retry) recovery.delay = RECONNECT_MS[0];
  if (recovery.running) {
    recovery.again = true;
    return;
  }
  clearTimeout(recovery.timer);
  recovery.running = (async () => {
    // Sessions whose older send is still unsettled this pass: their newer
    // ones wait, so texts come back to the composer oldest first even when
    // the service returns in the middle of a pass.
    const waiting = new Set();
    for (const sent of unsure.list()) {
      if (sent.agent !== page.agent || sent.fenced || unsure.inFlight.has(sent.requestId) || !page.client || !page.token) continue;
      if (waiting.has(sent.sessionId)) continue;
      try {
        settle(sent, await page.client.session(sent.sessionId).withdraw(sent.requestId));
      } catch (error) {
        if (error instanceof ShiitakeError && error.code === "session_not_found") settle(sent, { status: "gone" });
        else waiting.add(sent.sessionId); // kept: retried when connected
      }
    }
    return waiting.size > 0;
  })().then((failed) => {
    recovery.running = null;
    if (recovery.again) {
      recovery.again = false;
      recover();
    } else if (failed) {
      recovery.timer = setTimeout(() => recover(true), recovery.delay);
      recovery.delay = Math.min(recovery.delay * 2, RECONNECT_MS[1]);
    }
  });
}

// ---- client entries: extension chips, pinned rows and timeline cells ----

// The Agent's roster: each extension's status and running command catalog.
async function readExtensions(view) {
  let list;
  try {
    const response = await authFetch(`${agentBase()}/extensions`);
    if (!response.ok) return; // an Agent without extensions, or none served
    list = (await response.json()).extensions;
  } catch {
    return;
  }
  if (page.view !== view) return;
  for (const status of list) {
    const running = status.stopped === null ? "running" : "stopped";
    observeExtension(view, status.id, { status: running, commands: status.commands.map((c) => c.name) });
  }
}

// Merges what is known of one extension in this Session and feeds the client
// entry host, which calls `contribute` only when the observation changed.
function observeExtension(view, extensionId, update) {
  if (!CLIENT_ENTRIES.some((c) => c.entry.id === extensionId)) return;
  const known = { status: "offline", commands: [], value: null, ...view.extensions.get(extensionId), ...update };
  view.extensions.set(extensionId, known);
  view.entries.observe(extensionId, view.sessionId, {
    status: known.status,
    value: known.value,
    commands: known.commands,
    ...(known.history ? { history: known.history } : {}),
  });
}

function renderExtensions(view) {
  const box = $("extensions");
  box.replaceChildren();
  for (const { entry } of CLIENT_ENTRIES) {
    const error = view.entries.error(entry.id, view.sessionId);
    if (error) box.append(el("p", { className: "entry-error", textContent: `${entry.id}: ${error.message ?? error}` }));
    const contribution = view.entries.contribution(entry.id, view.sessionId);
    if (!contribution) continue;
    if (contribution.chips.length > 0) {
      box.append(el("ul", { className: "chips" }, ...contribution.chips.map((chip) => el("li", { className: "chip", textContent: chip.title }))));
    }
    for (const row of contribution.panel) {
      const actions = (row.actions ?? []).map((action) => {
        const button = el("button", { type: "button", textContent: action.label });
        button.addEventListener("click", async () => {
          button.disabled = true;
          try {
            await view.entries.act(entry.id, view.sessionId, action);
          } catch (error) {
            say(`${action.label}: ${explain(error)}`);
          } finally {
            button.disabled = false;
          }
        });
        return button;
      });
      const open = row.open ? openButton(view, entry.id, row.open, row.title) : null;
      box.append(el("div", { className: "panel-row" }, el("strong", { textContent: row.title }), row.detail ? el("span", { className: "detail", textContent: row.detail }) : null, open, ...actions));
    }
    if (contribution.waiting) box.append(el("p", { className: "state", textContent: contribution.waiting.summary }));
  }
  renderCells(view);
}

// Timeline cells among the loaded rows: after their anchor when its row is
// loaded (hidden until then), under "Extension changes" without one.
function renderCells(view) {
  for (const old of $("transcript").querySelectorAll(".cell, .changes")) old.remove();
  const cells = [];
  const owner = new Map();
  for (const { entry } of CLIENT_ENTRIES) {
    for (const c of view.entries.contribution(entry.id, view.sessionId)?.timeline.cells ?? []) {
      cells.push(c);
      owner.set(c, entry.id);
    }
  }
  if (cells.length === 0) return;
  const items = [...$("messages").children].filter((li) => li.dataset.sequence);
  const rows = items.map((li) => ({ sequence: Number(li.dataset.sequence), commandId: li.dataset.commandId ?? null }));
  const placed = placeCells({ rows, first: view.cursor === null }, cells);
  const cellItem = (c) => el("li", { className: "cell" }, el("span", { textContent: c.label }), c.open ? openButton(view, owner.get(c), c.open, c.label) : null);
  $("messages").prepend(...placed.start.map(cellItem));
  for (const [sequence, list] of placed.after) {
    const row = items.find((li) => Number(li.dataset.sequence) === sequence);
    row?.after(...list.map(cellItem));
  }
  if (placed.changes.length > 0) {
    $("live").before(el("div", { className: "changes" }, el("h3", { textContent: "Extension changes" }), el("ul", {}, ...placed.changes.map(cellItem))));
  }
}

// A row's typed Session open target: an Open button; the entry host hands
// the target to openTarget (the page's generic open callback) and a refusal
// becomes a notice.
function openButton(view, extensionId, target, title) {
  const button = el("button", { type: "button", className: "quiet", textContent: "Open" });
  button.setAttribute("aria-label", `Open ${title}`);
  button.addEventListener("click", async () => {
    try {
      await view.entries.open(extensionId, view.sessionId, target);
    } catch (error) {
      if (page.view === view) say(`Could not open ${target.sessionId}: ${error.cause ? explain(error.cause) : explain(error)}`);
    }
  });
  return button;
}

// The open callback: authorizes a Session target before navigating to it,
// by reading it with this tab's token (another Agent's through a client of
// that Agent); a refused read refuses the open and nothing changes.
async function openTarget(target) {
  const agent = target.agentId ?? page.agent;
  const client = agent === page.agent ? page.client : createShiitakeClient({ baseUrl: `/agents/${encodeURIComponent(agent)}`, fetch: authFetch });
  try {
    await client.session(target.sessionId).read({ limit: 1 });
  } finally {
    if (client !== page.client) client.close();
  }
  if (agent !== page.agent) {
    useAgent(agent);
    await loadSessions();
  }
  await openSession(target.sessionId);
}

// ---- the page's own commands, offered to the model as `ui.*` ----

const whistle = {
  commands: () => [
    {
      name: "set_theme",
      description: "Switches this chat page between its light and dark colours.",
      inputSchema: { type: "object", properties: { theme: { enum: ["light", "dark"] } }, required: ["theme"] },
    },
    {
      name: "show_notice",
      description: "Shows a short notice above the conversation on the person's screen.",
      inputSchema: { type: "object", properties: { text: { type: "string", maxLength: 500 } }, required: ["text"] },
    },
    {
      name: "page_state",
      description: "What the page shows: the Agent, the open Session, how many messages are loaded, the theme.",
      inputSchema: { type: "object", properties: {} },
    },
  ],
  execute(name, input) {
    switch (name) {
      case "set_theme":
        if (input.theme !== "light" && input.theme !== "dark") throw new Error('theme must be "light" or "dark"');
        document.documentElement.classList.toggle("dark", input.theme === "dark");
        return { theme: input.theme };
      case "show_notice":
        if (typeof input.text !== "string" || input.text.length > 500) throw new Error("text must be a string of at most 500 characters");
        say(input.text);
        return { shown: true };
      case "page_state":
        return {
          agent: page.agent,
          sessionId: page.view?.sessionId ?? null,
          messagesLoaded: page.view?.messages.size ?? 0,
          theme: document.documentElement.classList.contains("dark") ? "dark" : "light",
        };
      default:
        throw new Error(`no command ${name}`);
    }
  },
};

// ---- Esc ----

// Esc goes to the first of: an open dialog (it takes Esc itself), the
// newest queued prompt (cancelled, its text back in the composer), the
// running one (stopped), an extension's waiting control (its cancel
// action); only then does it dismiss the notice. Live state (extension
// rows, the paused notice, entry errors) is not dismissible.
function escape() {
  if (document.querySelector("dialog[open]")) return;
  const view = page.view;
  const queued = $("pending").querySelectorAll("li.queued button");
  const stop = queued.length > 0 ? queued[queued.length - 1] : $("pending").querySelector("li.running button");
  if (stop) {
    stop.click();
    return;
  }
  const waiting = view && CLIENT_ENTRIES.find(({ entry }) => view.entries.contribution(entry.id, view.sessionId)?.waiting?.cancel);
  if (waiting) {
    view.entries.cancelWaiting(waiting.entry.id, view.sessionId).catch((error) => page.view === view && say(`${waiting.entry.id}: ${explain(error)}`));
    return;
  }
  say(null);
}

// ---- start ----

function useAgent(agent) {
  closeSession();
  page.agent = agent;
  sessionStorage.setItem(AGENT_KEY, agent);
  $("agent-id").value = agent;
  page.client?.close();
  page.client = createShiitakeClient({ baseUrl: agentBase(), fetch: authFetch });
  recover(); // this Agent's uncertain sends, kept from before
}

async function start() {
  useAgent(page.agent);
  $("token-form").addEventListener("submit", async () => {
    page.token = $("token").value;
    sessionStorage.setItem(TOKEN_KEY, page.token);
    $("token").value = "";
    await begin();
  });
  $("forget-token").addEventListener("click", () => {
    closeSession();
    askToken(null);
  });
  $("agent-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const agent = $("agent-id").value.trim();
    if (agent === "") return;
    useAgent(agent);
    await loadSessions();
  });
  $("new-session").addEventListener("click", newSession);
  $("more-sessions").addEventListener("click", () => loadSessions({ more: true }));
  $("older").addEventListener("click", loadOlder);
  $("abort").addEventListener("click", async () => {
    const view = page.view;
    if (!view) return;
    try {
      const { cancelled } = await view.session.abort();
      say(cancelled.length > 0 ? `Stopped ${cancelled.length} prompt(s).` : "Nothing to stop.");
    } catch (error) {
      say(`Could not stop: ${explain(error)}`);
    }
    refreshQueue(view);
  });
  $("composer").addEventListener("submit", send);
  $("cancel-edit").addEventListener("click", () => {
    setEditing(null);
    $("prompt").value = "";
  });
  $("compact").addEventListener("click", async () => {
    const view = page.view;
    if (view) await dispatch(view, { kind: "compact", text: "" }, (requestId) => view.session.compact({ requestId }));
  });
  window.addEventListener("online", () => recover());
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !event.isComposing && !event.defaultPrevented) escape();
  });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  if (page.token) await begin();
  else askToken(null);
}

async function begin() {
  await loadSessions();
  const wanted = new URLSearchParams(location.hash.slice(1)).get("session");
  if (wanted && page.token) await openSession(wanted);
  recover();
}

start();
