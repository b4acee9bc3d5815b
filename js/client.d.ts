// Types of the "shiitake/client" entry: a client for one Agent's session
// routes (docs/http.md) over the host's authorised transport.

/** A JSON value (host metadata). */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/**
 * The transport the client calls. `globalThis.fetch` fits; a host passes its
 * own wrapper to add credentials. Only `method`, `headers`, `body` and
 * `signal` of the init are set.
 */
export type ShiitakeFetch = (input: string, init: RequestInit) => Promise<Response>;

export interface ShiitakeClientOptions {
  /** The host's mount of one Agent, e.g. `https://host/agents/demo` (a trailing `/` is ignored; a path relative to the page works where fetch allows it). */
  baseUrl: string | URL;
  /** Defaults to `globalThis.fetch`. */
  fetch?: ShiitakeFetch;
}

/** Every call takes an optional `signal`; aborting rejects with its reason (an `AbortError` by default) and cancels no host work. */
export interface CallOptions {
  signal?: AbortSignal;
}

export type ImageMediaType = "image/png" | "image/jpeg" | "image/gif" | "image/webp";

export interface ImageInput {
  mediaType: ImageMediaType;
  /** Base64. */
  data: string;
}

export type Delivery = "followUp" | "steer";

export interface SessionSummary {
  sessionId: string;
  /** Milliseconds since the epoch. */
  createdAt: number;
}

export interface SessionList {
  sessions: SessionSummary[];
  /** Pass as `cursor` for the next page; `null`: nothing more. */
  cursor: string | null;
}

export interface TokenUsage {
  /** The whole prompt, cached parts included. */
  inputTokens: number;
  outputTokens: number;
  /** Prompt tokens read from the provider's prompt cache; absent when it reports none. */
  cacheReadTokens?: number;
  /** Prompt tokens written to the provider's prompt cache (Anthropic; OpenAI reports none). */
  cacheWriteTokens?: number;
  /** Output tokens spent reasoning, where the provider reports them apart (OpenAI). */
  reasoningTokens?: number;
}

/**
 * An open attention item an extension set on a Session, its `id`
 * qualified by `extensionId`.
 */
export interface AttentionItem {
  extensionId: string;
  id: string;
  kind: string;
  /** At most 200 characters. */
  summary: string;
  /** Milliseconds since the epoch. */
  since: number;
  /** Milliseconds since the epoch; display metadata only (never enforced). */
  expiresAt?: number;
}

/** `needs_you`: open attention; `running`: a command running or pending; `settled`: everything else. */
export type InboxState = "needs_you" | "running" | "settled";

export interface InboxRow {
  sessionId: string;
  state: InboxState;
  /** The newest open items (at most 8); `attentionCount` counts them all. */
  attention: AttentionItem[];
  attentionCount: number;
  /** The Session's latest activity, milliseconds since the epoch. */
  updatedAt: number;
  /** Its running turn, paused by a budget (the row is `needs_you`). */
  paused?: Paused;
}

export interface Inbox {
  /** needs_you ahead of running ahead of settled; within one, the latest activity first, then by sessionId. */
  sessions: InboxRow[];
  /** Pass as `cursor` for the next page; `null`: nothing more. */
  nextCursor: string | null;
}

/** Calls counted by the usage ledger and the tokens providers reported for them. */
export interface UsageFigures {
  /** Model calls, each counted once: `answered + failed + unknown`. */
  calls: number;
  answered: number;
  /** Failed or retried attempts (with the usage the provider reported, rarely any). */
  failed: number;
  /** Calls cut off by a crash, an eviction, a reset or a cancel: their usage is unknown (no tokens counted). */
  unknown: number;
  inputTokens: number;
  outputTokens: number;
  /** Absent when no call of the range reported it. */
  cacheReadTokens?: number;
  cacheWriteTokens?: number;
  reasoningTokens?: number;
}

/** Which budget: the Session's (its whole life) or the Agent's (per UTC day, all Sessions). */
export type BudgetScope = "session" | "agent";

/** A budget a model call did not fit: `spent + needs` reaches `tokens`. */
export interface BudgetReached {
  scope: BudgetScope;
  /** The budget in force. */
  tokens: number;
  /** Tokens charged to it, calls in flight at their estimate. */
  spent: number;
  /** The call's estimated input. */
  needs: number;
}

/**
 * A turn paused before a model call its budget cannot cover: it stays
 * running with nothing spent, and goes on at the same attempt once the
 * budget covers the call (raised or cleared, or the Agent's next UTC day).
 */
export interface Paused {
  reason: "budget_reached";
  budget: BudgetReached;
  /** Milliseconds since the epoch. */
  since: number;
}

/**
 * A token budget (`GET /budget`, `GET /sessions/:id/budget`): tokens the
 * provider reported, input (cached parts included) plus output.
 */
export interface Budget {
  /** The budget in force; `null`: none. */
  tokens: number | null;
  /** Set by the host (RPC, owner API) over its configuration; false: the configuration's. */
  set: boolean;
  /** Tokens charged (the Agent's: today's, UTC); `null` until counting starts (a budget set, or a model call under a configured one). */
  spent: number | null;
  /** The Agent's: when its day ends, ms since the epoch. */
  resetsAt?: number;
  /** A Session's: its paused turn. */
  paused?: Paused;
}

export type UsageGroupBy = "session" | "model" | "day";

export interface UsageGroup extends UsageFigures {
  /** The sessionId; the model `provider/model` (`unknown`: a call cut off before its model was recorded); the UTC day `YYYY-MM-DD`. */
  key: string;
}

export interface UsageLedger {
  from: number | null;
  to: number | null;
  /** The Session the figures are of; `null`: every call of the Agent. */
  sessionId: string | null;
  groupBy: UsageGroupBy | null;
  /** Over the whole range. */
  totals: UsageFigures;
  /** In key order; empty without `groupBy`. */
  groups: UsageGroup[];
  /** Pass as `cursor` for the next page; `null`: nothing more. */
  nextCursor: string | null;
}

export interface UsageQuery {
  /** Calls at or after, ms since the epoch. */
  from?: number;
  /** Calls before, ms since the epoch. */
  to?: number;
  /** Only this Session's calls (a Session with no calls, never created or deleted: zero totals). */
  sessionId?: string;
  groupBy?: UsageGroupBy;
  /** Groups a page, 1..200 (default 50). */
  limit?: number;
  /** A `nextCursor` (needs `groupBy`). */
  cursor?: string | null;
}

export type MessageRole = "user" | "assistant" | "operator" | "tool" | "compaction";

/** Why a compaction ran: a `compact` command, the model's window, or a provider refusing a call as too long. */
export type CompactionTrigger = "command" | "window" | "refusal";

/** On a `compaction` entry: the messages its summary (`text`) stands for. */
export interface Compacted {
  /** Entry ids of the first and the last message summarised (those the model context held). */
  from: string;
  through: string;
  /** How many messages the summary stands for. */
  messages: number;
  /** The compaction entry whose summary the summarised context began with. */
  previous?: string;
  trigger: CompactionTrigger;
}

/** One tool call of a model step, as recorded before it ran. */
export interface ToolCall {
  /** 1..64 bytes. */
  id: string;
  /** `execute` or a direct tool. */
  name: string;
  arguments: { [key: string]: JsonValue };
}

/** The execution protocol of a tool step: the tool names offered (sorted) and their digest. */
export interface ToolProtocol {
  tools: string[];
  /** `fnv1a64:<16 hex digits>`. */
  digest: string;
}

/**
 * A stored message of the transcript. Key messages by `entryId`: a watch can
 * deliver one twice. An `assistant` message of a tool step carries
 * `toolCalls` and `protocol`; a `tool` message is one call's outcome; a
 * `compaction` entry's `text` is a summary that stands for the messages
 * `compacted` names in every later model call (they stay readable).
 */
export interface SessionMessage {
  entryId: string;
  /**
   * On messages of a read page, a watch snapshot or a branches listing: the
   * committed Session position (1-based, in the Session's append order: a
   * branch's messages are numbered after every message before them, a
   * fork's after its base position), what `afterSequence` timeline cells
   * anchor on. A `message` frame carries none: it is the position after the
   * newest the watcher has.
   */
  sequence?: number;
  /**
   * On messages of a read page, a watch snapshot or a branches listing: the
   * entry the message follows on its branch; `null` for the first.
   */
  parentEntryId?: string | null;
  /**
   * Where the parent has several children (an edit, a retry): this
   * message's place among them, oldest first (`index` 1-based). List them
   * with `branches(parentEntryId)`; `select` one.
   */
  branch?: { index: number; count: number };
  role: MessageRole;
  /** On a `tool` message: what the model saw. */
  text: string;
  requestId?: string;
  commandId?: string;
  /** A prompt's images, or on a `tool` message the images the tool returned to the model (at most 4). */
  images?: ImageInput[];
  meta?: JsonValue;
  /** On `assistant` messages. */
  usage?: TokenUsage;
  /** On an `assistant` message of a tool step (at most 64). */
  toolCalls?: ToolCall[];
  /** On an `assistant` message of a tool step. */
  protocol?: ToolProtocol;
  /** On a `tool` message: the call it answers. */
  toolCallId?: string;
  /** On a `tool` message: the tool called. */
  toolName?: string;
  /** On a `tool` message whose call failed or was refused; absent otherwise. */
  isError?: true;
  /** On a `tool` message: the tool's display payload. Never sent to the model; not host metadata. */
  data?: JsonValue;
  /** On a `compaction` entry. */
  compacted?: Compacted;
  /** On a `compaction` entry: its command's instructions. */
  instructions?: string;
  /** Milliseconds since the epoch. */
  createdAt: number;
}

/** A queued prompt (or retry). */
export interface PendingPrompt {
  commandId: string;
  requestId: string | null;
  /** `compact` for a queued compaction (absent for a prompt or retry; `latestPending` never answers one). */
  type?: "compact";
  /** A compaction's instructions ("" for none); empty for a retry. */
  text: string;
  images?: ImageInput[];
  delivery: Delivery;
  /** A prompt starting a new branch after this entry (`""`: at the Session's start). */
  after?: string;
  /** A retry: the user message whose answer it generates again. */
  retry?: string;
  /** 1-based place in the Session's FIFO queue. */
  position: number;
  meta?: JsonValue;
  /** Milliseconds since the epoch. */
  acceptedAt: number;
}

/** The Session's running turn. */
export interface RunningTurn {
  commandId: string;
  requestId: string | null;
  /** `compact` for a running compaction. */
  type?: "compact";
  text: string;
  attempt: number;
  startedAt: number | null;
  /** Paused before a model call its budget cannot cover (it goes on at this attempt once covered). */
  paused?: Paused;
}

/** One page of the Session read. */
export interface SessionRead {
  sessionId: string;
  /** The newest messages older than `before`, oldest first. */
  messages: SessionMessage[];
  pending: PendingPrompt[];
  running: RunningTurn | null;
  /** The `before` of the next older page; `null`: none. */
  cursor: string | null;
  /**
   * When the Agent runs extensions: each extension's Session projection of
   * this Session, by extension id (an extension publishing none is absent).
   */
  extensions?: Record<string, unknown>;
  /** When an extension keeps producer history: its history of this Session, by extension id. */
  extensionHistory?: Record<string, ExtensionHistory>;
  /**
   * When the Agent runs extensions: the Session's open attention, newest
   * first (items of stopped or ungranted extensions left out).
   */
  attention?: AttentionItem[];
}

export type Terminal = "completed" | "failed" | "cancelled" | "interrupted";

export interface CommandSettlement {
  commandId: string;
  terminal: Terminal;
  answer: string | null;
  usage: TokenUsage | null;
  toolCallCount: number;
  /** Why the command `failed` or was `interrupted`. */
  diagnostic?: string;
  /** The host metadata of the cancel or abort that ended a `cancelled` command, when it carried any. */
  meta?: JsonValue;
}

/** The children of an entry (`branches(entryId)`). */
export interface BranchList {
  entryId: string;
  /** How many children the entry has. */
  count: number;
  /** Oldest first, each with its `sequence`, `parentEntryId` and (when `count` > 1) `branch`. */
  children: SessionMessage[];
  /** Pass as `cursor` for the next page; `null`: nothing more. */
  cursor: string | null;
}

/** An admitted prompt, operator line, retry, selection or compaction; `requestId` is the one sent (generated when omitted). */
export interface Receipt {
  status: "accepted";
  commandId: string;
  requestId: string;
}

export type WithdrawOutcome = { status: "accepted"; commandId: string } | { status: "unknown" };

/** `too_late` is an ordinary outcome, not an error. */
export type CancelOutcome =
  | { status: "cancelled"; commandId: string; text: string }
  | { status: "too_late"; commandId: string };

export interface AbortOutcome {
  status: "cancelled";
  cancelled: { commandId: string; requestId: string | null; text: string }[];
}

export type Frame =
  | { type: "admitted"; commandId: string; requestId: string | null }
  | { type: "message"; message: SessionMessage }
  | { type: "started"; commandId: string; attempt: number }
  | { type: "delta"; commandId: string; text: string }
  | { type: "settled"; settlement: CommandSettlement }
  /**
   * The selected branch changed (a `select`, or a retry or a prompt with
   * `after` started its turn): it runs through `entryId` now (`null`: from
   * the Session's start). Read the Session again; later `message` frames
   * continue the new branch.
   */
  | { type: "branch"; entryId: string | null }
  /** Once at a turn's start: a tool the host configured cannot be offered (e.g. `execute` without `LOADER`, an unavailable MCP server, a tool left out). */
  | { type: "diagnostic"; commandId: string; diagnostic: string }
  | PausedFrame
  | ToolFrame
  | ExtensionFrame
  | AttentionFrame;

/**
 * The turn paused before a model call its budget cannot cover: it stays
 * running, with nothing spent, and goes on (a `started` frame at the same
 * attempt) once the budget covers the call. Cancel and abort end it as usual.
 */
export interface PausedFrame {
  type: "paused";
  commandId: string;
  reason: "budget_reached";
  budget: BudgetReached;
}

/**
 * A tool call the host runs, live (kept in memory only, like `delta`; the
 * `tool` message is the durable record): `started` before it runs,
 * `progress` with the tool's live counters in `result.data` (at most one
 * per 100 ms per call, the newest kept in between), `ended` with `isError`
 * once its outcome is recorded, just before its `tool` message. A call
 * answered without running (refused arguments, a tool not offered) has
 * none; one whose turn settles while it runs (cancel, a restart) has no
 * `ended`: its `tool` message and the `settled` frame say how it ended.
 */
export interface ToolFrame {
  type: "tool";
  commandId: string;
  toolCallId: string;
  /** The tool the model called (`execute`, or a direct tool). */
  name: string;
  phase: "started" | "progress" | "ended";
  /** On `progress`: the tool's report (at most 4096 bytes of JSON). */
  result?: { data: JsonValue };
  /** On `ended`. */
  isError?: boolean;
}

/**
 * An extension's projection, published after the commit that changed it
 * (only when its value changed): its Session projection (`scope:
 * "session"`) on that Session's watch, its Agent projection (`scope:
 * "agent"`) on every watched Session.
 */
export interface ExtensionFrame {
  type: "extension";
  extensionId: string;
  scope: "session" | "agent";
  value: unknown;
  /** With `scope: "session"`, when the extension keeps producer history. */
  history?: ExtensionHistory;
}

/** An attention item set (`item`) or cleared (`item` null) on the watched Session, after the commit. */
export interface AttentionFrame {
  type: "attention";
  sessionId: string;
  extensionId: string;
  id: string;
  item: AttentionItem | null;
}

export interface RuntimeErrorEvent {
  commandId: string;
  diagnostic: string;
  /** Present when the call will be retried. */
  retryInMs?: number;
}

/** A watch event. Events of other names (from a newer server) are skipped. */
export type WatchEvent =
  | { event: "snapshot"; data: SessionRead }
  | { event: "frame"; data: Frame }
  | { event: "runtime-error"; data: RuntimeErrorEvent };

/**
 * A live watch of one Session: the request starts when `watch()` is called;
 * the first event is a `snapshot`. Iterate it with `for await`; leaving the
 * loop (break, return, throw) closes it. Ends (done) when the server closes
 * the stream (e.g. the Session was deleted). An event larger than
 * `WATCH_EVENT_BYTES_MAX` fails the watch with a `ShiitakeError`
 * (`event_too_large`).
 */
export interface ShiitakeWatch extends AsyncIterator<WatchEvent, undefined> {
  /** Resolves once the server answered 200 text/event-stream; rejects with the refusal (e.g. a `ShiitakeError` 404 or 429). */
  readonly opened: Promise<void>;
  /** True once closed, aborted or failed (not merely ended by the server). */
  readonly closed: boolean;
  /** Closes the stream. Idempotent; cancels nothing on the host. Events not yet taken are dropped. */
  close(): void;
  next(): Promise<IteratorResult<WatchEvent, undefined>>;
  return(): Promise<IteratorReturnResult<undefined>>;
  [Symbol.asyncIterator](): ShiitakeWatch;
}

export interface PromptOptions extends CallOptions {
  /** Defaults to `crypto.randomUUID()`. Keep it: when no answer came (`isUncertain`), `withdraw(requestId)` tells whether it was admitted. */
  requestId?: string;
  images?: ImageInput[];
  delivery?: Delivery;
  /**
   * Edit and resend: the prompt's turn runs on a new branch continuing right
   * after this entry (the one before the edited message; `""`: the
   * Session's start). Not with `delivery: "steer"`.
   */
  after?: string;
}

export interface OperatorOptions extends CallOptions {
  /** Defaults to `crypto.randomUUID()`. */
  requestId?: string;
}

export interface CompactOptions extends CallOptions {
  /** Defaults to `crypto.randomUUID()`. */
  requestId?: string;
  /** Added to the summary request (at most 65,536 bytes). */
  instructions?: string;
}

/** `cancel`'s target in the seed's form: `cancel({ commandId, onlyIfPending: true })`. */
export interface CancelInput {
  commandId: string;
  /** Answer `too_late` instead of cancelling a running turn. */
  onlyIfPending?: boolean;
}

export interface CancelOptions extends CallOptions {
  /** Answer `too_late` instead of cancelling a running turn. */
  onlyIfPending?: boolean;
}

export interface ReadOptions extends CallOptions {
  /** A `cursor` of an earlier page. */
  before?: string | null;
  /** 1..200 (default 50). */
  limit?: number;
}

export interface ReadSettlementOptions extends CallOptions {
  /** Milliseconds (default 0: answer at once); a longer wait than 30000 is clamped to 30000. */
  timeoutMs?: number;
}

export interface BranchesOptions extends CallOptions {
  /** 1..200 (default 50). */
  limit?: number;
  cursor?: string | null;
}

export interface CreateSessionOptions extends CallOptions {
  /**
   * Fork: the new Session continues the path of Session `sessionId` ending
   * at `entryId` (the history is shared, not copied).
   */
  from?: { sessionId: string; entryId: string };
}

export interface WatchOptions {
  /** Aborting it closes the watch; `next()` then rejects with its reason. */
  signal?: AbortSignal;
}

/** One Session of the Agent. Addressing it performs no I/O. */
export interface ShiitakeSession {
  readonly id: string;
  /** Admits a prompt (after the durable commit). A replay with the same input answers the same receipt. */
  prompt(text: string, options?: PromptOptions): Promise<Receipt>;
  /** Records an operator line at once. */
  operator(text: string, options?: OperatorOptions): Promise<Receipt>;
  /**
   * Queues a compaction of the Session's model context, FIFO with its
   * prompts: the model summarises it into a `compaction` entry, which stands
   * for the messages before it in every later model call. Settles like a
   * turn (`answer` null, the summary call's `usage`); cancel it while queued.
   */
  compact(options?: CompactOptions): Promise<Receipt>;
  /** The command admitted under `requestId`, or `unknown` after fencing it. Never cancels. */
  withdraw(requestId: string, options?: CallOptions): Promise<WithdrawOutcome>;
  /** Cancels an accepted command: `cancel({ commandId, onlyIfPending })` (as the owner API's), the options carrying only `signal`. */
  cancel(input: CancelInput, options?: CallOptions): Promise<CancelOutcome>;
  /** The same, the commandId first and `onlyIfPending` among the options. */
  cancel(commandId: string, options?: CancelOptions): Promise<CancelOutcome>;
  /** Cancels the running turn and every queued prompt, in one write. */
  abort(options?: CallOptions): Promise<AbortOutcome>;
  read(options?: ReadOptions): Promise<SessionRead>;
  watch(options?: WatchOptions): ShiitakeWatch;
  /**
   * The command's settlement, or `undefined` while it is not settled at the
   * deadline. A long poll; aborting `signal` rejects with its reason and
   * never cancels the command. An unknown command: `ShiitakeError` not_found.
   */
  readSettlement(commandId: string, options?: ReadSettlementOptions): Promise<CommandSettlement | undefined>;
  /** The newest pending prompt of the request's principal, or `null` (a retry is none). */
  latestPending(options?: CallOptions): Promise<PendingPrompt | null>;
  /**
   * Generates the answer to the user message `entryId` again on a new branch
   * beside the old answer: queued work like a prompt, settling like a turn.
   * Refusals: `entry_not_found` (404), `entry_not_user`, `entry_not_on_path`
   * (400), `too_many_branches` (429).
   */
  retry(entryId: string, options?: OperatorOptions): Promise<Receipt>;
  /**
   * Selects the branch through `entryId`, ending at its newest descendant;
   * watchers get a `branch` frame. `session_busy` (409) while a turn runs.
   */
  select(entryId: string, options?: OperatorOptions): Promise<Receipt>;
  /** The children of `entryId`, oldest first (bounded pages). */
  branches(entryId: string, options?: BranchesOptions): Promise<BranchList>;
  /** The Session's explicit model (`model` null when none is set). */
  model(options?: CallOptions): Promise<SessionModel>;
  /**
   * Sets the Session's explicit model (`"provider/model"`, with `reasoning`);
   * its next turn resolves it before the Agent's model and the host's
   * defaults. Refusals: `model_rejected` (422: not offered, its provider not
   * signed in or not allowed), `session_not_found`.
   */
  setModel(model: string, options?: CallOptions & { reasoning?: Reasoning }): Promise<SessionModel>;
  /** Clears the Session's explicit model: `{model: null}`. */
  clearModel(options?: CallOptions): Promise<SessionModel>;
  /** The Session's token budget, what it spent and its paused turn. Setting one is the host's (RPC, owner API). */
  budget(options?: CallOptions): Promise<Budget>;
}

/** A reasoning level; each provider maps it to its own field. */
export type Reasoning = "minimal" | "low" | "medium" | "high" | "max";

/** A Session's explicit model: `PUT`/`GET /sessions/:id/model`. */
export interface SessionModel {
  /** `provider/model` in its canonical spelling, or null. */
  model: string | null;
  reasoning?: Reasoning;
}

export interface ListSessionsOptions extends CallOptions {
  /** 1..200 (default 50). */
  limit?: number;
  cursor?: string | null;
}

export interface InboxOptions extends CallOptions {
  /** 1..200 (default 50). */
  limit?: number;
  cursor?: string | null;
}

export interface UsageOptions extends UsageQuery, CallOptions {}

export interface ShiitakeClient {
  listSessions(options?: ListSessionsOptions): Promise<SessionList>;
  /** The Agent's Sessions by what they need: needs_you, running, settled. */
  inbox(options?: InboxOptions): Promise<Inbox>;
  /** The Agent's usage ledger: each model call counted once, by the provider's figures. */
  usage(options?: UsageOptions): Promise<UsageLedger>;
  /** The Agent's daily token budget and what today (UTC) spent. Setting one is the host's (RPC, owner API). */
  budget(options?: CallOptions): Promise<Budget>;
  /** Creates a Session (an id is generated when omitted), or with `from` a fork of another's path. */
  createSession(sessionId?: string, options?: CreateSessionOptions): Promise<{ sessionId: string }>;
  /** Deletes a Session (its watches end, its work stops); `session_has_forks` (409) while forks share its history. */
  deleteSession(sessionId: string, options?: CallOptions): Promise<void>;
  /** Addresses a Session: no I/O. */
  session(sessionId: string): ShiitakeSession;
  /**
   * Closes the watches this client opened; later calls throw. Calls in
   * flight (long polls included) go on, and no host work is cancelled.
   */
  close(): void;
}

export function createShiitakeClient(options: ShiitakeClientOptions): ShiitakeClient;

/**
 * How a failure is classed: `conflict` 409; `refused` 401, 403, 413, 429;
 * `not_found` 404; `invalid` 400 and any other 4xx; `unavailable` 5xx and
 * anything else (including an unusable 2xx answer).
 */
export type ShiitakeErrorKind = "conflict" | "refused" | "not_found" | "invalid" | "unavailable";

/** The codes docs/http.md names; the `code` of a ShiitakeError may also be another host's, or `http_<status>`. */
export type ShiitakeErrorCode =
  | "invalid_json"
  | "invalid_request"
  | "invalid_query"
  | "invalid_meta"
  | "unauthorized"
  | "not_owner"
  | "not_found"
  | "session_not_found"
  | "command_not_found"
  | "method_not_allowed"
  | "session_exists"
  | "session_busy"
  | "session_has_forks"
  | "entry_not_found"
  | "entry_not_on_path"
  | "entry_not_user"
  | "fork_too_deep"
  | "too_many_branches"
  | "request_conflict"
  | "request_withdrawn"
  | "payload_too_large"
  | "queue_full"
  | "too_many_sessions"
  | "too_many_fences"
  | "too_many_observers"
  | "internal_error"
  | "storage_incompatible"
  | "host_misconfigured"
  | "model_rejected"
  | "not_configured"
  | "invalid_response"
  | "response_too_large"
  | "event_too_large"
  | "runtime_closed"
  | "runtime_restarted"
  | "extension_not_found"
  | "extension_command_not_found"
  | "extension_stopped"
  | "extension_command_failed"
  | "extension_limit"
  /** A projection an extension binding observed failed the contract's schema (client-side; see ShiitakeSchemaError). */
  | "invalid_projection"
  /** A binding's watch ended (client-side; reported when the binding gives up reopening it). */
  | "watch_ended"
  /** The browser bridge's routes (`shiitake/ui/browser` speaks them; docs/http.md "Browser bridge"). */
  | "ui_not_configured"
  | "ui_request_not_found"
  | "ui_claimed"
  | "ui_not_claimed"
  | "ui_other_request"
  | "ui_wrong_claim"
  | "ui_closed";

/**
 * A refusal (a non-2xx answer, `code` from its `{error: {code, message}}`
 * body, or `http_<status>` when it has none), or an answer the client could
 * not use (`invalid_response`, `response_too_large`, `event_too_large`).
 * Network failures are not wrapped.
 */
export class ShiitakeError extends Error {
  constructor(status: number, code: string, message: string, options?: { cause?: unknown });
  readonly name: "ShiitakeError";
  readonly status: number;
  readonly code: ShiitakeErrorCode | (string & {});
  readonly kind: ShiitakeErrorKind;
}

/**
 * Whether a failed send (`prompt`, `operator`) may still have been admitted:
 * true when no answer came (a dropped connection, an abort), for a 5xx and
 * for an answer the client could not use; false for a refusal the service
 * answered (4xx), which admitted nothing. When true, keep the requestId and
 * text and learn the outcome with `withdraw(requestId)` before sending the
 * text again (under a new requestId, after `unknown`).
 */
export function isUncertain(error: unknown): boolean;

/**
 * The messages a `compaction` entry stands for (`compacted.from` through
 * `compacted.through`), oldest first: they stay in the Session, older than
 * the entry on its path. Reads the pages before the entry's `sequence` (or,
 * for an entry from a `message` frame, from the selected branch's newest
 * page), at most `maxPages` (default 10) pages of 200; `complete` is false
 * when the first of them was not reached. A TypeError for an entry without
 * `compacted`.
 */
export function readCompacted(
  session: ShiitakeSession,
  entry: SessionMessage,
  options?: CallOptions & { maxPages?: number },
): Promise<{ messages: SessionMessage[]; complete: boolean }>;

/** Largest watch event (the bytes of its lines) a watch accepts: 8 MiB. */
export const WATCH_EVENT_BYTES_MAX: number;
/** Largest JSON answer the client reads: 16 MiB. */
export const RESPONSE_BYTES_MAX: number;

/** A raw Server-Sent Event. */
export interface SseEvent {
  /** "message" when the event names none. */
  event: string;
  data: string;
}

/**
 * The bounded event-stream parser the watch uses. `push` takes any split of
 * the bytes; an event over `maxBytes` throws a `ShiitakeError`
 * (`event_too_large`); `end()` drops an unterminated event.
 */
export class SseParser {
  constructor(maxBytes?: number);
  push(chunk: Uint8Array, out?: SseEvent[]): SseEvent[];
  end(): void;
}

// ---------------------------------------------------------------------------
// Extension bindings

/** The Standard Schema v1 interface (https://standardschema.dev), as much of it as is used here. Zod 4, Valibot and ArkType schemas are ones. */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly "~standard": StandardSchemaV1.Props<Input, Output>;
}

export declare namespace StandardSchemaV1 {
  interface Props<Input = unknown, Output = Input> {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => Result<Output> | Promise<Result<Output>>;
    readonly types?: Types<Input, Output> | undefined;
  }
  type Result<Output> = { readonly value: Output; readonly issues?: undefined } | { readonly issues: ReadonlyArray<Issue> };
  interface Issue {
    readonly message: string;
    readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined;
  }
  interface Types<Input = unknown, Output = Input> {
    readonly input: Input;
    readonly output: Output;
  }
  type InferInput<S extends StandardSchemaV1> = NonNullable<S["~standard"]["types"]>["input"];
  type InferOutput<S extends StandardSchemaV1> = NonNullable<S["~standard"]["types"]>["output"];
}

/** One command of an extension contract: its input schema, checked before any request. */
export interface ExtensionCommandContract {
  input?: StandardSchemaV1;
}

/**
 * What a client knows of an extension: its id, the schema of its
 * projection, and its commands with their input schemas. Schemas are
 * Standard Schemas validated synchronously (an asynchronous one is an
 * error). The server validates too; these are the client's own view.
 */
export interface ExtensionContract {
  id: string;
  projection?: { schema?: StandardSchemaV1 };
  /** When given, `command` takes only these names. */
  commands?: { [name: string]: ExtensionCommandContract };
}

/** The projection's type: the projection schema's output, or any JSON when the contract has none. */
export type ProjectionOf<C extends ExtensionContract> = C extends { projection: { schema: infer S extends StandardSchemaV1 } }
  ? StandardSchemaV1.InferOutput<S>
  : JsonValue;

/** The command names a contract allows (any string when it lists none). */
export type CommandNameOf<C extends ExtensionContract> = C extends { commands: infer M } ? Extract<keyof M, string> : string;

/** A command's input: its schema's input type, or any JSON-serialisable value when it has none. */
export type CommandInputOf<C extends ExtensionContract, N extends string> = C extends { commands: infer M }
  ? N extends keyof M
    ? M[N] extends { input: infer S extends StandardSchemaV1 }
      ? StandardSchemaV1.InferInput<S>
      : unknown
    : never
  : unknown;

/** `command`'s arguments after the name: the input may be left out when its type admits `undefined`. */
export type CommandArgs<C extends ExtensionContract, N extends string> = undefined extends CommandInputOf<C, N>
  ? [input?: CommandInputOf<C, N>, options?: ExtensionCommandOptions]
  : [input: CommandInputOf<C, N>, options?: ExtensionCommandOptions];

/**
 * What a binding last *observed* of a projection; never what a command is
 * assumed to have done: a command's success leaves the slot as it is, a
 * read or a watch frame changes it. `observedAt` is `Date.now()` at the
 * observation.
 * - `unknown`: nothing observed yet;
 * - `absent`: the last observation carried no value (the extension publishes none);
 * - `observed`: the value (the projection schema's output);
 * - `invalid`: the value failed the projection schema (`error.issues` say how); the binding keeps working.
 */
export type ProjectionSlot<T> =
  | { readonly status: "unknown" }
  | { readonly status: "absent"; readonly observedAt: number; readonly history?: ExtensionHistory }
  | { readonly status: "observed"; readonly value: T; readonly observedAt: number; readonly history?: ExtensionHistory }
  | { readonly status: "invalid"; readonly error: ShiitakeSchemaError; readonly observedAt: number };

/**
 * Called with the new slot after every observation (a read, a snapshot, a
 * frame; the same value observed again is an observation too). Called with
 * `error` too, and the slot unchanged, when the binding gave up reopening a
 * watch. It is not called at subscribe time: read `binding.slot`.
 */
export type ProjectionListener<T> = (slot: ProjectionSlot<T>, error?: unknown) => void;

/**
 * How a binding reopens a watch that ended or failed: after `initialDelayMs`,
 * doubling up to `maxDelayMs`, until `maxFailures` consecutive failures (a
 * watch that delivered its snapshot resets the count); a 4xx refusal other
 * than 408 and 429 (e.g. `session_not_found`) ends the attempts at once.
 * Giving up leaves the slot as it is and reports the last error.
 */
export interface ReconnectOptions {
  /** Default 500. */
  initialDelayMs?: number;
  /** Default 10000. */
  maxDelayMs?: number;
  /** Default 8. */
  maxFailures?: number;
}

export interface ExtensionBindingOptions {
  /** Hears why a watch was given up (as the listeners' second argument does) and what a listener threw. Without it, a listener's throw goes to `reportError` (or `console.error`). */
  onError?: (error: unknown) => void;
  reconnect?: ReconnectOptions;
}

export interface ExtensionCommandOptions extends CallOptions {
  /** Defaults to `crypto.randomUUID()`. The same id with the same input answers the same result: reuse it to retry an uncertain call. */
  requestId?: string;
}

export interface ExtensionBindingBase<C extends ExtensionContract> {
  /** The contract's extension id. */
  readonly id: string;
  readonly slot: ProjectionSlot<ProjectionOf<C>>;
  readonly closed: boolean;
  /**
   * `listener(slot)` on every observation; returns the unsubscribe function
   * (idempotent). Throws once the binding is closed.
   */
  subscribe(listener: ProjectionListener<ProjectionOf<C>>): () => void;
  /**
   * Sends a command; resolves its `result`. An input the contract's schema
   * refuses rejects with a `ShiitakeSchemaError` (`invalid_request`, status
   * 400) and sends nothing. Server refusals reject with a `ShiitakeError`:
   * `invalid_request` 400, `extension_not_found` / `extension_command_not_found`
   * / `session_not_found` 404, `extension_stopped` / `request_conflict` 409,
   * `extension_command_failed` / `extension_limit` 422, `runtime_closed` 503.
   * The slot does not change: the effect shows when a read or a frame observes it.
   */
  command<N extends CommandNameOf<C>>(name: N, ...args: CommandArgs<C, N>): Promise<JsonValue>;
  /** Closes the binding's watches and drops its listeners. Idempotent; later calls throw (or reject). Host work goes on. */
  close(): void;
}

/** An extension's Session scope on one Session. */
export interface SessionExtensionBinding<C extends ExtensionContract = ExtensionContract> extends ExtensionBindingBase<C> {
  readonly session: ShiitakeSession;
  /** Reads the Session (`read({limit: 1})`) and observes its `extensions[id]`; resolves the slot. A watch observation made while the read was in flight wins. */
  refresh(options?: CallOptions): Promise<ProjectionSlot<ProjectionOf<C>>>;
  /**
   * The first subscriber opens one watch of the Session (its snapshot and
   * its `extension` frames of this id with `scope: "session"` are
   * observations), reopened as `ReconnectOptions` says; the last
   * unsubscribe closes it. A subscriber added after the binding gave up
   * opens it again.
   */
  subscribe(listener: ProjectionListener<ProjectionOf<C>>): () => void;
}

/** Status of one extension of the Agent (`GET /extensions/:id`). */
export interface ExtensionStatus {
  id: string;
  version: string;
  revision: string;
  stateVersion: number;
  grantKey: string;
  feature: string | null;
  /** Why and when (milliseconds since the epoch, when known) it stopped; `null`: running. */
  stopped: { reason: string; at: number | null } | null;
  /** Settled work it has missed and not yet replayed. */
  behind: boolean;
  /** The Agent projection; absent when it publishes none. */
  projection?: unknown;
  /** The advertised command catalog (a client entry's actions name these). */
  commands: Array<{ name: string; scope: "session" | "agent"; description: string | null }>;
}

/**
 * An extension's producer history of one Session (`.projection({ history:
 * true })`): the values its Session projection took, oldest first, at most
 * 32 events and 32,768 bytes; `omitted` counts the dropped ones. A Session
 * binding's slot carries it (`history`) when the observation did.
 */
export interface ExtensionHistory {
  events: Array<{ sequence: number; at: number; value: unknown }>;
  omitted: number;
}

/** An extension's Agent scope. */
export interface AgentExtensionBinding<C extends ExtensionContract = ExtensionContract> extends ExtensionBindingBase<C> {
  /** The last Status read (by `refresh` or a followed watch's (re)opening); `undefined` before. */
  readonly status: ExtensionStatus | undefined;
  /** Reads the Status (`GET /extensions/:id`) and observes its `projection`; resolves the slot. */
  refresh(options?: CallOptions): Promise<ProjectionSlot<ProjectionOf<C>>>;
  /**
   * Follows the `scope: "agent"` frames of this id on `session`'s watch
   * (a Session handle of the same client): opened now, reopened as
   * `ReconnectOptions` says, and each (re)opening reads the Status once (a
   * snapshot carries Session projections only). Returns the function that
   * stops following. Listeners are added with `subscribe`, which opens no watch.
   */
  follow(session: ShiitakeSession): () => void;
}

/** Binds an extension's Session scope on a Session handle (`client.session(id)`). No I/O until `refresh`, `subscribe` or `command`. */
export function bindSessionExtension<const C extends ExtensionContract>(
  session: ShiitakeSession,
  contract: C,
  options?: ExtensionBindingOptions,
): SessionExtensionBinding<C>;

/** Binds an extension's Agent scope on a client. No I/O until `refresh`, `follow` or `command`. */
export function bindAgentExtension<const C extends ExtensionContract>(
  client: ShiitakeClient,
  contract: C,
  options?: ExtensionBindingOptions,
): AgentExtensionBinding<C>;

/**
 * A value a contract's schema refused: a command's input (`invalid_request`,
 * status 400, as the server would answer; nothing was sent) or an observed
 * projection (`invalid_projection`, status 200). A projection schema that
 * validates asynchronously, or whose validate throws, makes the slot
 * `invalid` with this error (`cause`: what was thrown); a command input
 * schema doing so rejects the call with a TypeError (or what it threw).
 */
export class ShiitakeSchemaError extends ShiitakeError {
  constructor(status: number, code: string, message: string, issues?: ReadonlyArray<StandardSchemaV1.Issue>, options?: { cause?: unknown });
  readonly issues: ReadonlyArray<StandardSchemaV1.Issue>;
}
