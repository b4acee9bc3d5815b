import type { FilesPort, sqliteWorkspace } from "./files.js";
import type {
  AbortOutcome,
  BranchList,
  CancelOutcome,
  CommandSettlement,
  Delivery,
  ImageInput,
  Inbox,
  PendingPrompt,
  Receipt,
  SessionList,
  SessionRead,
  UsageLedger,
  UsageQuery,
  WatchEvent,
  WithdrawOutcome,
  Reasoning,
  SessionModel,
  Budget,
} from "./client.js";
import { DurableObject } from "cloudflare:workers";

/**
 * The Agent Durable Object: one instance per Agent, state in its SQLite
 * storage. Export it (or a subclass) from your Worker and bind it with
 * `new_sqlite_classes`.
 *
 * A Rust panic restarts the wasm instance (shared by every object of the
 * isolate); each object rebuilds its core from SQLite. Only the Session whose
 * code trapped counts a new attempt; reads and watches are served again, a
 * write in flight is answered 503 `runtime_restarted` with `Retry-After`
 * (send it again with the same requestId), and so is a read after 3 resets
 * that may be its own doing. A panic in the object's own `alarm()` is
 * rethrown so the runtime retries the alarm.
 */
export class ShiitakeDO<Env = unknown> extends DurableObject<Env> {
  /**
   * Asked first for every request. Return a Response to answer it yourself,
   * or `undefined` to let the Shiitake core serve it, directly or as a
   * promise (only a promise is awaited). Override in a subclass.
   */
  hostFetch(request: Request): Response | undefined | Promise<Response | undefined>;
  /**
   * The capabilities this Agent's model may use, or `undefined` for none.
   * Read once per instance. A throw, an unknown key, or a value of the
   * wrong kind (a function where JSON data is expected, data where a
   * function is) is reported and fails each turn, naming the key.
   * Override in a subclass.
   */
  tools(): ShiitakeTools | undefined;
  fetch(request: Request): Promise<Response>;
  alarm(): Promise<void>;
  /**
   * Host-only (RPC, never a session route): delivers a Session's grants.
   * Versions never move back (an older one throws an Error with
   * `code: "grant_version_refused"`); the same version with other grants
   * replaces the stored ones.
   */
  deliverGrants(sessionId: string, delivery: GrantDelivery): { delivered: "stored" | "replaced" | "unchanged" };
  /** Host-only: the Session's delivered grants, or null. */
  sessionGrants(sessionId: string): GrantDelivery | null;
  /**
   * The owner API, for code inside the object: every call is served by the
   * same core path as the HTTP routes (docs/http.md), bypassing `hostFetch`;
   * refusals throw `ShiitakeError` (`code`, `status`, `message`; the HTTP
   * error table). Unbound: no host metadata (full cancel authority).
   */
  readonly agent: ShiitakeOwner;

  // Workers RPC on the stub (the caller is the host Worker): the owner API
  // as methods. `meta` is the host's metadata, checked like
  // `x-shiitake-meta` (SHIITAKE_META_SCHEMA, 4,096 bytes; 400 invalid_meta)
  // and bound through SHIITAKE_IDENTITY_PATH. Refusals reject with an Error
  // carrying `code` and `status`.

  /** RPC: admits a prompt; `{status: "accepted", commandId}` after the commit (a replay answers the same). */
  prompt(sessionId: string, input: PromptInput, meta?: unknown): Promise<Receipt>;
  /** RPC: records an operator line. */
  operator(sessionId: string, input: OperatorInput, meta?: unknown): Promise<Receipt>;
  /** RPC: generates the answer to the user message `entryId` again, on a new branch (queued like a prompt). */
  retry(sessionId: string, input: EntryInput, meta?: unknown): Promise<Receipt>;
  /** RPC: selects the branch through `entryId`; 409 `session_busy` while a turn runs. */
  select(sessionId: string, input: EntryInput, meta?: unknown): Promise<Receipt>;
  /** RPC: the children of an entry. */
  readBranches(sessionId: string, query: BranchesQuery, meta?: unknown): Promise<BranchList>;
  /** RPC: admits a compaction of the Session's model context, queued like a prompt. */
  compact(sessionId: string, input: CompactInput, meta?: unknown): Promise<Receipt>;
  /** RPC: cancels a command (`too_late` once it can no longer be withdrawn; 403 `not_owner` across principals). */
  cancel(sessionId: string, input: CancelInput, meta?: unknown): Promise<CancelOutcome>;
  /** RPC: cancels the running turn and the queued prompts (only `meta`'s principal's when bound). */
  abort(sessionId: string, meta?: unknown): Promise<AbortOutcome>;
  /** RPC: withdraws `requestId` (an admitted request wins; otherwise a durable fence). */
  withdraw(sessionId: string, requestId: string, meta?: unknown): Promise<WithdrawOutcome>;
  /** RPC: one page of the Session read. */
  readSession(sessionId: string, query?: ReadQuery, meta?: unknown): Promise<SessionRead>;
  /** RPC: the settlement, or undefined while not settled at `timeoutMs` (default 0, at most 30000). Dropping the call never cancels the command. */
  readSettlement(sessionId: string, commandId: string, options?: { timeoutMs?: number }, meta?: unknown): Promise<CommandSettlement | undefined>;
  /** RPC: the newest pending prompt of `meta`'s principal (anyone's when unbound), or null. */
  latestPending(sessionId: string, meta?: unknown): Promise<PendingPrompt | null>;
  /** RPC: the Session's explicit model (`model` null when none is set). */
  sessionModel(sessionId: string, meta?: unknown): Promise<SessionModel>;
  /** RPC: sets the Session's explicit model; `model_rejected` (422) when the host's policy refuses it. */
  setSessionModel(sessionId: string, input: { model: string; reasoning?: Reasoning }, meta?: unknown): Promise<SessionModel>;
  /** RPC: clears the Session's explicit model; `{model: null}`. */
  clearSessionModel(sessionId: string, meta?: unknown): Promise<SessionModel>;
  /** RPC: the Session's token budget, what it spent and its paused turn. */
  sessionBudget(sessionId: string, meta?: unknown): Promise<Budget>;
  /** RPC: sets the Session's token budget over the host's configuration; a raise resumes its paused turn. */
  setSessionBudget(sessionId: string, input: BudgetInput, meta?: unknown): Promise<Budget>;
  /** RPC: clears the Session's token budget, back to the host's configuration (`SHIITAKE_BUDGET_SESSION_TOKENS`). */
  clearSessionBudget(sessionId: string, meta?: unknown): Promise<Budget>;
  /**
   * RPC: the Session's watch, the bytes of the same `text/event-stream` as
   * GET /sessions/:id/watch (serve it as is, or parse it with
   * `readWatch(stream)`). Cancel the stream to close the watch.
   */
  watchSession(sessionId: string, meta?: unknown): Promise<ReadableStream<Uint8Array>>;
  /** RPC: a page of the Agent's Sessions. */
  listSessions(query?: PageQuery): Promise<SessionList>;
  /** RPC: creates a Session (`ses_…` generated when omitted), or with `from` a fork; 409 `session_exists`. */
  createSession(sessionId?: string, options?: { from?: ForkFrom }): Promise<{ sessionId: string }>;
  /** RPC: deletes a Session and all of its work (not bound to a principal: authorise first); 409 `session_has_forks` while forks share its history. */
  deleteSession(sessionId: string): Promise<void>;
  /** RPC: a page of the inbox. */
  inbox(query?: PageQuery): Promise<Inbox>;
  /** RPC: the usage ledger. */
  usage(query?: UsageQuery): Promise<UsageLedger>;
  /** RPC: the Agent's daily token budget and what today (UTC) spent. */
  budget(meta?: unknown): Promise<Budget>;
  /** RPC: sets the Agent's daily token budget over the host's configuration; a raise resumes the turns it now covers. */
  setBudget(input: BudgetInput, meta?: unknown): Promise<Budget>;
  /** RPC: clears the Agent's daily token budget, back to the host's configuration (`SHIITAKE_BUDGET_DAILY_TOKENS`). */
  clearBudget(meta?: unknown): Promise<Budget>;
  /**
   * The host work lane, or `undefined` for none (then outbox entries are
   * acknowledged undelivered). Read once per instance; an unknown key or a
   * value of the wrong kind is reported and fails every pass, naming it.
   * Override in a subclass.
   */
  hostJobs(): HostJobs | undefined;
  /**
   * Where OpenTelemetry traces go, or `undefined`: then the env's
   * `SHIITAKE_OTLP_ENDPOINT`, else no span is recorded. Read once per
   * instance; a bad value is reported and nothing is recorded. Override in
   * a subclass.
   */
  telemetry(): ShiitakeTelemetry | undefined;
  /**
   * The fleet, or `undefined` for none. Read once per instance; an unknown
   * key or a value of the wrong kind is reported (the `agents` module is
   * then not offered and peers are refused), naming it. Override in a
   * subclass.
   */
  fleet(): ShiitakeFleet | undefined;
  /**
   * Fleet RPC, called by a peer Agent's runtime through the namespace stub:
   * admits one mail after `acceptMail`. Answers JSON text `{value: receipt}`
   * or `{error: {code, status, message}}` (`fleet_disabled` without a
   * fleet).
   */
  receiveMail(mailJson: string): Promise<string>;
  /**
   * Fleet RPC (`shiitake/fleet`'s createFleetSessions / createFleetDelegation,
   * or a peer's `agents.sessions.*`): one request `{grant, op, args, meta?}`
   * on this Agent's Sessions (`op`: `sessions.list`, `sessions.create`,
   * `sessions.read`, `sessions.delete`, `send`, `start`, `delegate`), its
   * grant checked against this Agent's id and clock at this call, served as
   * the HTTP route that does the same. JSON text `{value}` or `{error: {code,
   * status, message}}`. Needs no `fleet()`: the grant is the authority.
   */
  fleetSessions(requestJson: string): Promise<string>;
  /** Fleet RPC: one Session's bounded read (`queryJson`: `{limit?, cursor?}`), as JSON text `{value}` or `{error}`. */
  fleetRead(sessionId: string, queryJson: string): Promise<string>;
  /** Fleet RPC: one command's settlement as `agents.wait` answers it, waiting up to `timeoutMs` (0 to 30000). */
  fleetSettlement(sessionId: string, commandId: string, timeoutMs: number): Promise<string>;
  /** Fleet RPC: recalls the send keyed `key` (cancel if pending, else too_late; nothing admitted: fenced, unknown). */
  fleetRecall(sessionId: string, key: string): Promise<string>;
  /** Fleet RPC, served only by the object named `shiitake.directory`: one directory request (JSON), as JSON text `{value}` or `{error}`. */
  fleetDirectory(requestJson: string): Promise<string>;
  /** Fleet RPC: the creator's archive (`{"archived": true}`) or unarchive of this Agent: `{value: {status: "archived" | "unarchived" | "busy", reason?, message?}}` or `{error}`. */
  fleetMember(requestJson: string): Promise<string>;
  /**
   * Host-only: erases Agent `agentId` (needs `fleet().directory`): its
   * directory entry removed (the id remembered as erased) and its storage
   * deleted. Refusals throw an Error with `code` and `status`.
   */
  eraseAgent(agentId: string): Promise<{ agentId: string; erased: boolean }>;
  /** Fleet RPC, host-only (called by `eraseAgent`): closes the runtime and deletes this object's storage and alarm. */
  fleetErase(): Promise<string>;
  /**
   * The models this Agent may call, or `undefined` for the env's
   * (`SHIITAKE_MODELS`, else `SHIITAKE_MODEL`). Read once per instance; an
   * unknown key or a value of the wrong kind is reported and fails every
   * turn, naming it. Override in a subclass.
   */
  models(): ShiitakeModels | undefined;
  /**
   * The host metadata's schema and identity path as code; `undefined`: the
   * env's `SHIITAKE_META_SCHEMA` / `SHIITAKE_IDENTITY_PATH`. Defining it
   * while either env var is set is refused (503 `host_misconfigured`).
   */
  meta(): ShiitakeMeta | undefined;
  /**
   * Fleet RPC: sets this Agent's explicit model; `choiceJson` is
   * `{model, reasoning?}` (`agents.setModel`, or a directory's create for a
   * new Agent). Checked against this host's offered models, signed-in
   * providers and key sources, stored for the next turns. Answers JSON
   * text `{value: {model, reasoning?}}`, `{error: {code: "model_rejected",
   * status: 422, message}}` or another `{error}`.
   */
  fleetSetModel(choiceJson: string): Promise<string>;
  /**
   * Closes the runtime: requests answer 503 `runtime_closed`, no new work
   * starts in this instance; resolves once the running host work pass and
   * the live turns (both aborted) have ended. Durable work waits for a
   * later open.
   */
  close(reason?: string): Promise<void>;
  /**
   * Closes the browser bridge (`tools().ui`) of this instance: every
   * browser event stream ends, `ui` calls waiting for a browser fail, the
   * `/browser/sessions/:sessionId/browser/*` routes answer 410 `ui_closed`
   * and later runs borrow nothing (their `ui` calls fail with a tool error
   * saying the bridge is closed). Live state: a restarted object opens a
   * new bridge.
   */
  closeUi(reason?: string): void;
  /**
   * Announces that the host's Computer list (`tools().computers`) changed,
   * or a Computer's advertisement behind an unchanged entry: the captured
   * Computer modules are stale at once, so the next tool offer (an idle
   * Agent's next turn) reads the list and describes every Computer again,
   * a dropped one too before its retry interval. A call running keeps the
   * Computer it started on; the change applies at the next offer. Throws a
   * TypeError given an argument (the list is `tools().computers`'s), or
   * when tools() lists no Computers. Live state: a restarted object has
   * captured nothing and describes the list at its first offer anyway.
   */
  computersChanged(): void;
}

/** One delivery outbox entry (`src/delivery.rs`): the newest change of its `key`. */
export interface DeliveryEntry {
  seq: number;
  key: string;
  body: unknown;
  /** When the transition that staged it ran (ms since epoch). */
  at: number;
}

/**
 * The host work lane (`ShiitakeDO#hostJobs()`). Each pass hands `deliver`
 * the oldest undelivered entries (at most 64 a call, 16 calls a pass, in
 * `seq` order), acknowledging each batch when its promise resolves, then
 * calls `tick`. The lane runs beside the turns, never delaying them. A pass
 * that throws, rejects or outlasts `timeoutMs` (its signal aborts) fails:
 * the batch is not acknowledged, and the pass is retried after
 * `retryBaseMs`, doubling up to `retryMaxMs`, until it succeeds (the retry
 * is durable). Delivery is at least once. `this` = the Durable Object.
 */
export interface HostJobs {
  deliver(entries: DeliveryEntry[], options: { signal: AbortSignal }): void | Promise<void>;
  tick?(options: { signal: AbortSignal }): void | Promise<void>;
  /** The first retry's delay: 100 to 600000 ms, default 3000. */
  retryBaseMs?: number;
  /** The retry delay's cap: retryBaseMs to 600000 ms, default 60000 (or retryBaseMs when larger). */
  retryMaxMs?: number;
  /** Wall time of one pass: 100 to 30000 ms (the default). */
  timeoutMs?: number;
}

/**
 * OpenTelemetry traces (`ShiitakeDO#telemetry()`). Each turn is one trace
 * (trace id: a digest of the turn's head command, so a turn resumed after a
 * crash continues it) named by the GenAI semantic conventions: the root
 * `invoke_agent` span (`gen_ai.conversation.id`, usage, `error.type`), a
 * `chat {model}` span per model call (`gen_ai.provider.name`,
 * `gen_ai.request.model`, `gen_ai.usage.input_tokens`,
 * `gen_ai.usage.output_tokens`, `gen_ai.response.finish_reasons`,
 * `error.type`) and an `execute_tool {tool}` span per tool call run
 * (`gen_ai.tool.name`, `gen_ai.tool.call.id`). No prompt, answer, tool
 * content, header or key is an attribute. Each span is stored by the write
 * that ends it and exported by the host work lane as OTLP/HTTP JSON
 * (`POST {endpoint}/v1/traces`, at most 256 spans or 256 KiB a request)
 * through `fetch`; a failed export is retried with the lane's backoff
 * (`hostJobs()` retryBaseMs/retryMaxMs, default 3 s doubling to 60 s) and
 * its spans dropped, counted in the log, after 8 failures (at most 4096
 * kept meanwhile).
 */
export interface ShiitakeTelemetry {
  /** The OTLP/HTTP base URL (http or https, at most 2048 bytes); spans go to `{endpoint}/v1/traces`. */
  endpoint: string;
  /** Sent with every export (at most 16, 4096 bytes in all): secrets, kept in memory only, never logged. */
  headers?: Record<string, string>;
}

/** One end of a mail between Agents. */
export interface MailAddress {
  agentId: string;
  sessionId: string;
}

/** A mail as `acceptMail` sees it (closed; `reply` only on replies). */
export interface FleetMail {
  key: string;
  from: MailAddress;
  to: MailAddress;
  /** `"<agentId>/<sessionId>"` of the sender for a delegation; empty on a reply. */
  replyTo: string;
  text: string;
  delivery: "followUp" | "steer";
  reply?: {
    commandId?: string;
    outcome: "completed" | "failed" | "interrupted" | "cancelled" | "outcome_unknown" | "undeliverable";
    diagnostic?: string;
    reason?: "recipient_offline" | "recipient_left";
  };
}

/**
 * The fleet (`ShiitakeDO#fleet()`): the Agents of one Durable Object
 * namespace reaching each other. With it the model gets the `agents`
 * module through `execute` (`wait`, `read`, and `send`, `recall` when the
 * host carries mail; grant key `agents`; fleet grants from `grant`), and
 * peers may call the fleet RPC methods. Each Agent is
 * `namespace.idFromName(agentId)`; its own id is `ctx.id.name`.
 */
export interface ShiitakeFleet {
  /**
   * This Worker's own Durable Object namespace binding (e.g.
   * `this.env.SHIITAKE`): each peer's stub, and the carrier of mail (its
   * `receiveMail`). Required unless `open` is given.
   */
  namespace?: DurableObjectNamespace;
  /**
   * The host's open adapter: Agent `agentId`'s stub (its fleet RPC
   * methods; answered synchronously), instead of the namespace's; asked
   * for every object the fleet reaches, `shiitake.directory` included. Without `namespace` and
   * `deliver` this Agent carries no mail: `agents.send` and
   * `agents.recall` are absent from its tools, and it takes no
   * delegations (`receiveMail` refuses, `fleet_disabled`).
   */
  open?(agentId: string): unknown;
  /**
   * Carries one mail (JSON text) to Agent `agentId`'s `receiveMail` at the
   * host's own transport edge, answering that JSON text; instead of the
   * namespace's stub. With it (or `namespace`) the model gets
   * `agents.send` and `agents.recall`.
   */
  deliver?(agentId: string, mailJson: string, options: { signal: AbortSignal }): Promise<string>;
  /**
   * The model's fleet grant in Session `sessionId` (see `FleetGrant` in
   * `shiitake/fleet`), read synchronously at each `agents.*` call, which
   * is checked against it (Agent scope, action, expiry); `undefined`: none,
   * every call refused. With it the model also gets `agents.sessions.list`,
   * `.create`, `.read` and `.delete` (guest `agents.sessions_list`, ...),
   * the target checking the grant again. Without it the fleet's operations
   * are not grant-checked (today's behaviour) and `sessions.*` are absent.
   */
  grant?(sessionId: string): import("./fleet.js").FleetGrant | undefined;
  /**
   * Decides one received mail within 5 s: `{ meta }` admits it with that
   * host metadata (never the sender's), `{ refuse: reason }` refuses it for
   * good (`"left"`: this Agent left the fleet). A throw, a rejection or no
   * answer in time makes the sender retry. Absent: every mail is admitted
   * without metadata. `this` = the Durable Object.
   */
  acceptMail?(mail: FleetMail, options: { signal: AbortSignal }): { meta?: unknown } | { refuse: string } | undefined | Promise<{ meta?: unknown } | { refuse: string } | undefined>;
  /** The reply text of delegated work a person cancelled (`meta`: the cancellation's metadata), e.g. `Work cancelled by Ada.`. */
  cancellationText?(meta: unknown): string | undefined;
  /**
   * The Agent directory, held by the object named `shiitake.directory`
   * (reserved: it runs no Agent): offers `agents.create({requestId, name?,
   * model?, reasoning?})` and `agents.list({archived?, cursor?, limit?})`;
   * every Agent registers itself as its first request starts, and a send
   * to an Agent absent from the directory is undeliverable
   * (`recipient_offline`) at once, to an archived or erased one `recipient_left`. The directory
   * holds at most 10,000 Agents; names are at most 128 characters; a list
   * page holds at most 200 Agents (default 50).
   */
  directory?: boolean;
  /** With `directory`: offers `agents.archive({agentId})` and `agents.unarchive({agentId})`, and `agents.list`'s `archived: true`. */
  archive?: boolean;
  /** The absolute path Agent `agentId`'s tools use, as create and list report it (default `/`). `this` = the Durable Object. */
  workingDirectory?(agentId: string): string | undefined;
  /**
   * `true` authorizes the model operations: `agents.setModel({agentId,
   * model, reasoning?})` (guest `agents.set_model`; the target's host
   * checks the model, a refusal throws `model:rejected: <why>`) and
   * `agents.models({})` (at most 200 offered addresses of signed-in
   * providers).
   */
  models?: boolean;
  /**
   * Also offer every `agents` operation as a direct tool named by its module
   * (`agents_send`, `agents_wait`, `agents_set_model`, ...), so a host without
   * `execute` (a Worker without `LOADER`) offers the fleet; refused by name
   * when one model request cannot carry them (`ComputerConnection.direct`).
   */
  direct?: boolean;
}

/** A reasoning level (`agents.setModel`, stored with the Agent's model). */
export type ModelReasoningLevel = Reasoning;

/**
 * The host's model policy (`ShiitakeDO#models()`). Each turn resolves its
 * model at its start: explicit Session, explicit Agent, `lastSwitch`,
 * `teamDefault`, then the first `offered` address of a signed-in provider
 * (its `<PROVIDER>_API_KEY` or `<PROVIDER>_BASE_URL` set). An address not
 * offered, not signed in or excluded by `keySources` is skipped; with
 * nothing left the turn fails before any model call with a
 * `model:unavailable: …` diagnostic.
 */
/**
 * A Standard Schema v1 (Zod 4, Effect, Valibot...). Its `validate` must
 * answer synchronously (`{value}` or `{issues}`); a promise is refused.
 */
export interface StandardSchemaV1Like {
  readonly "~standard": {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => unknown;
  };
}

/** The host metadata's rules (`ShiitakeDO#meta()`, `js/meta-schema.mjs`). */
export interface ShiitakeMeta {
  /**
   * A JSON Schema object (the core validates it), or a synchronous Standard
   * Schema whose output is what is stored. Absent: any JSON value.
   */
  schema?: Record<string, unknown> | StandardSchemaV1Like;
  /** A JSON path into the stored metadata naming the principal, e.g. `$.author.id`. */
  identityPath?: string;
}

export interface ShiitakeModels {
  /** `provider/model` addresses offered (at most 200); replaces `SHIITAKE_MODELS`. */
  offered?: string[];
  /** The Team default; absent: `SHIITAKE_MODEL`. */
  teamDefault?: string;
  /** The owner's key-source restriction: the provider names (`openai`, `anthropic`) that may be called. Absent: all. */
  keySources?: string[];
  /** The person's last manual switch for a turn (`meta`: its host metadata), within 5 s; `this` = the Durable Object. */
  lastSwitch?(sessionId: string, meta: unknown): string | undefined | Promise<string | undefined>;
  /**
   * Each model's context window in tokens (1,024 to 100,000,000), by
   * `provider/model` address (at most 200); replaces
   * `SHIITAKE_CONTEXT_WINDOWS`. A turn of a model with one compacts before
   * a model call whose estimated input passes the trigger (docs/http.md
   * "Compaction"); a model without one never compacts on its own.
   */
  contextWindows?: Record<string, number>;
  /** Compaction: `trigger` a fraction of the window (0.1 to 1, default 0.8; replaces `SHIITAKE_COMPACTION_TRIGGER`), `prompt` the summary call's system prompt (at most 16,384 bytes; replaces `SHIITAKE_COMPACTION_PROMPT`). */
  compaction?: { trigger?: number; prompt?: string };
}

/** What a grant allows on one module (keyed by module id; `files` for Files). `write` includes `read`. */
export type GrantLevel = "none" | "read" | "write";

export interface GrantDelivery {
  /** Never moves back. */
  version: number;
  grants: Record<string, GrantLevel>;
}

/** One change an Agent directory mutation made (`createAgentDirectory`). */
export interface DirectoryFact {
  kind: "created" | "registered" | "archived" | "unarchived" | "erased";
  agentId: string;
  /** The transition's clock, ms since the epoch. */
  at: number;
  /** The entry after the change (none once erased). */
  entry?: DirectoryEntry;
}

/** One Agent of the directory. */
export interface DirectoryEntry {
  agentId: string;
  name?: string;
  creator?: string;
  createdBy?: string;
  model?: string;
  reasoning?: string;
  archived: boolean;
  createdAt: number;
  updatedAt: number;
}

/** A directory answer and the lifecycle facts it made (none for a replay, a repeat or a read). */
export interface DirectoryAnswer<T> {
  value: T;
  facts: DirectoryFact[];
}

/**
 * The Agent directory inside a host's own Durable Object and its
 * transaction (seed: `createAgentDirectory(sql)`): the rules of the
 * reserved `shiitake.directory` object over `sql` (`this.ctx.storage.sql`;
 * the directory's tables join the versioned schema there). Call it inside
 * `this.ctx.storage.transactionSync(() => ...)` and commit the host's
 * projection of `facts` in the same transaction; a throw rolls back both.
 * Refusals throw an Error with `code` (`create:conflict`,
 * `directory:erased`, `invalid_request`, ...) and `status`.
 */
export function createAgentDirectory(sql: SqlStorage): {
  /** Reserves the Agent id derived from (creator, requestId): a retry answers the same entry, other input `create:conflict`. */
  create(input: { creator: string; requestId: string; name?: string; model?: string; reasoning?: string }): DirectoryAnswer<DirectoryEntry>;
  register(agentId: string): DirectoryAnswer<DirectoryEntry>;
  lookup(agentId: string): DirectoryAnswer<{ entry?: DirectoryEntry; erased: boolean }>;
  /** At most 200 a page (default 50). */
  list(options?: { archived?: boolean; cursor?: string; limit?: number }): DirectoryAnswer<{ agents: DirectoryEntry[]; cursor?: string }>;
  /** The directory's archive flag (its creator only); the target's own flag is `fleetMember`'s. */
  setArchived(input: { caller: string; agentId: string; archived: boolean }): DirectoryAnswer<DirectoryEntry>;
  /** Removes the entry and remembers the id as erased (never reserved again). */
  erase(agentId: string): DirectoryAnswer<{ erased: boolean }>;
};

/** Delivers grants into the object's storage while the Shiitake runtime is cold. */
export function deliverSessionGrantsToStorage(
  state: DurableObjectState,
  sessionId: string,
  delivery: GrantDelivery,
): { delivered: "stored" | "replaced" | "unchanged" };

/** The host's tools: modules of operations, the Agent-wide access default, a confirm hook. */
export interface ShiitakeTools {
  /** At most 64 modules; ids unique (`notes`, `mcp.docs`, `files`). */
  modules: ToolModule[];
  /**
   * Where `execute` runs the model's code. `"loader"`: a fresh Worker Loader
   * guest per run, offered only with the `LOADER` binding. `"embedded"`:
   * QuickJS compiled to wasm, in this isolate or process, one fresh context
   * per run, the same guest API; each run at most 5000 ms of CPU and a 64 KiB
   * stack, the engine's memory at most 32 MiB (shared by the runs in
   * flight). A Worker registers the engine by importing
   * `shiitake/sandbox-engine`; the Node host always has it. Unset: `"loader"`
   * where `LOADER` is bound, else `"embedded"` where the engine is registered.
   */
  sandbox?: "loader" | "embedded";
  /**
   * `tools.access`: default grants by module id, keys that fail closed, and
   * the confirm hook. Omitted: full access (a `confirm` operation is still
   * refused without `access.confirm`).
   */
  access?: {
    grants?: Record<string, GrantLevel>;
    required?: string[];
    /** Asked before each call of a `confirm` operation (`this` = the Durable Object); without it such calls are refused. */
    confirm?(call: ConfirmRequest, options: { signal: AbortSignal }): boolean | Promise<boolean>;
  };
  /**
   * MCP servers (at most 16), each the module `mcp.<name>`. Header values are credentials: kept in memory only.
   * `direct: true` offers every tool of the server as a direct tool of its own (named by its tool name,
   * beside `execute` or without it: on Node, or a Worker without a `LOADER` binding), still granted as
   * `mcp.<name>`, in listing order while one model request carries them (64 tools in all, `execute`
   * and the host's own direct operations first; names of at most 64 bytes, not `execute` or taken):
   * each other tool is no direct tool (`execute` reaches it) and is reported to `onUnavailable`.
   * A server is listed again after it sends `notifications/tools/list_changed` on a response or
   * its session is renewed, and every `mcpRetryMs` when it declares `tools.listChanged`.
   * Protocol 2025-11-25 (2025-06-18 and 2025-03-26 accepted). A tool call's stream the server closes
   * before the result is resumed (a GET with `Last-Event-ID` after its `retry:`, at most 16 times);
   * requests the server sends on it are answered (`ping`; sampling, elicitation, roots: JSON-RPC -32601).
   */
  mcpServers?: { name: string; url: string; headers?: Record<string, string>; direct?: boolean }[];
  /** Carries every MCP request (default: the global fetch). Called with `redirect: "manual"` (a resumption is a GET without body). */
  fetch?: (url: string, init: RequestInit) => Promise<Response>;
  /** Bound on connecting and listing each MCP server, at most and by default 10000 ms. */
  mcpTimeoutMs?: number;
  /**
   * How long before an unavailable MCP server is tried again (at a turn's start), and a server
   * declaring `tools.listChanged` listed again: 1000 to 3600000, default 60000 ms.
   */
  mcpRetryMs?: number;
  /**
   * The `files` module over one port (`sqliteWorkspace()`, `r2Files(bucket)`
   * or your own `FilesPort`): read, write, list, stat, search, replace, and
   * `apply_patch` when the port patches. Its operations are also direct
   * tools unless `direct: false`. Grants key it as `files`. Not beside an
   * extension holding the files grant (`extensions.d.ts`, `.files()`):
   * both would be `files`, so such a host is refused (503
   * host_misconfigured naming both).
   */
  files?: { port: FilesPort | ReturnType<typeof sqliteWorkspace>; direct?: boolean };
  /**
   * The host's Computers (at most 32): a list, a function answering them,
   * read at each tool offer (`this` = the Durable Object), or an async
   * iterable of lists (a subscription: each list it yields replaces the
   * last at once; tools() is called for each core, so return a fresh one,
   * e.g. an async generator's, that yields the current list first). A
   * change of the list is described again at the next offer; so is an
   * unchanged list after `ShiitakeDO#computersChanged` or a yield. The
   * iterable is consumed one list at a time (one per macrotask), only the
   * latest kept; until its first list the Agent has no Computers; a list it
   * yields that is refused (not an array of entries, more than 32) is
   * reported to `onUnavailable` as `{ name: "tools().computers", reason }`
   * and the previous list stays, as it does when the iterable ends or
   * throws. Each becomes the module
   * `computers.<name>` (every call write and unsafe to replay), and with
   * `files` also `computers.<name>.files`; grants key both as
   * `computers.<name>`. One that rejects, hangs or advertises an unusable
   * schema is dropped and reported to `onUnavailable`.
   */
  computers?: ComputerConnection[] | (() => ComputerConnection[]) | AsyncIterable<ComputerConnection[]>;
  /** Bound on describing the Computers, at most and by default 10000 ms. */
  computersTimeoutMs?: number;
  /**
   * The browser bridge (seed knapsack: `Knapsack.ui`): each run of a
   * Session borrows the module `ui` (reached through `execute`):
   * `ui.discover()` lists the live commands of the App open in the
   * Session's browser, `ui.execute({ name, input })` runs one (unsafe to
   * replay). The browser connects with `connectBrowser` from
   * "shiitake/ui/browser" through the routes
   * `/browser/sessions/:sessionId/browser/{events,claims,results}`, which
   * `shiitakeApp()` forwards behind the host's own auth. A call waits for
   * a browser at most 90% of the tool timeout, and about 2000 ms when no
   * browser is connected to the Session (one connecting meanwhile gets it). `id` names the App (at most 128
   * bytes); `hasSession(sessionId)` (`this` = the Durable Object, at most
   * 5000 ms) says whether a browser may open that Session's bridge
   * (default: the Session is stored in this Agent). Close it with
   * `ShiitakeDO#closeUi`. `direct: true` also offers both as direct tools,
   * `ui_discover` and `ui_execute` (no `execute` needed: on Node, or a
   * Worker without `LOADER`), under the same grants (`ui`) and replay rules
   * (see `ComputerConnection.direct` for the request bound).
   */
  ui?: { id: string; hasSession?(sessionId: string, options: { signal: AbortSignal }): boolean | Promise<boolean>; direct?: boolean };
  /**
   * Told about each MCP server or Computer dropped (the reason never holds a credential); a Computer's
   * report has its `id`. A report with `tool` names one tool left out while the rest is offered: of
   * MCP server `name` (a tool its listing could not offer, or that cannot be a direct tool), or an
   * operation of the host's module `name` marked `direct` that one model request cannot carry
   * (at most 8 reports per server, the last counting the rest). Said once, and again at each turn's
   * start as a `diagnostic` frame. A list an async iterable `computers` yields that is refused is
   * reported with `name: "tools().computers"` (said once, not as a frame).
   */
  onUnavailable?(report: { id?: string; name: string; tool?: string; reason: string }): void;
}

/** One Computer of the host's list. */
export interface ComputerConnection {
  /** The connection's stable identity, at most 128 bytes. */
  id: string;
  /** The guest name: `computers.<name>`; at most 48 bytes. */
  name: string;
  /** The provider: `serviceComputer(...)` from "shiitake/computer", or your own. */
  computer: {
    describe(options: { signal: AbortSignal }): Promise<string | object>;
    call(operation: string, argsJson: string, ctx: { executionId: string; sessionId: string; commandId: string; deadlineMs: number; signal: AbortSignal }): Promise<string | object>;
  };
  /** Ask the confirm hook before every advertised call (read or write alike). */
  confirmCalls?: boolean;
  /** The Computer's own files: `computers.<name>.files`. */
  files?: FilesPort;
  /**
   * Also offer every operation (and its files') as a direct tool named by
   * its module, `computers_<name>_<operation>` (`computers_laptop_run_command`,
   * `computers_laptop_files_read`), so the model calls them without
   * `execute` (on Node, or a Worker without `LOADER`); grants and replay
   * rules are those of `execute`'s calls. A module offered direct (a
   * Computer, `ui.direct`, `fleet().direct`, an extension roster entry's
   * `direct`) must fit one model request whole (64 tools in all, `execute`,
   * your own direct operations and the others before it; names of at most 64
   * bytes): `ui` and `agents` that do not are refused when the host is
   * configured (503 host_misconfigured naming the tool), a Computer that
   * does not is dropped and reported to `onUnavailable` naming it.
   */
  direct?: boolean;
}

export interface ToolModule {
  /** Dot-separated identifiers, at most 64 bytes. */
  id: string;
  /** At most 256. */
  operations: ToolOperation[];
}

export interface ToolOperation {
  /** The source name; guest code calls its snake_case form (`add-note` is `add_note`). */
  name: string;
  /** At most 4096 bytes are kept. */
  description: string;
  /** A JSON Schema object (a documented subset is checked; the rest is accepted). */
  inputSchema: Record<string, unknown>;
  access: "read" | "write";
  /** Ask the host's confirm hook before each call. Default false. */
  confirm?: boolean;
  /** Safe to run again after a crash left its outcome unknown. Default false. */
  replaySafe?: boolean;
  /**
   * Also offer it to the model as its own tool, named by its guest name. Default false. Taken in
   * order while one model request carries them (64 tools, `execute` among them; names of at most
   * 64 bytes, not `execute` or taken); each other one stays behind `execute` and is reported to
   * `onUnavailable`.
   */
  direct?: boolean;
  /** Runs the operation; `this` is the Durable Object. Returns JSON (at most 256 KiB, 64 levels). */
  run(args: Record<string, unknown>, ctx: ToolContext): unknown | Promise<unknown>;
}

export interface ToolContext {
  /** Names this one call: `<commandId>:<callId>` (a direct tool) or `<commandId>:<callId>:<n>` (the n-th guest call, from 1, of an `execute` run). */
  executionId: string;
  sessionId: string;
  commandId: string;
  /** Milliseconds since the epoch by which the call must end. */
  deadlineMs: number;
  /** Fired when the turn is cancelled or the call times out. */
  signal: AbortSignal;
  /** Sets the call's display payload (the `tool` message's `data`), never sent to the model. */
  display(data: unknown): void;
  /**
   * Reports live progress, e.g. output counters: watchers get a `tool`
   * frame (phase `progress`) whose `result.data` is `data`, at most one per
   * 100 ms per call (the newest report in between goes out when the
   * interval ends). Never stored, never sent to the model. Throws a
   * `TypeError` for data that is not JSON or over 4096 bytes of it.
   * Inside `execute`, it reports on the `execute` call.
   */
  progress(data: unknown): void;
  /**
   * Adds an image to the result: the model sees it as image content in its
   * next request (an `image_url` part of a user message after the results
   * on Chat Completions, an image block of the `tool_result` on
   * Anthropic), and the `tool` message keeps it in `images`. At most 4 per
   * result and 1,048,576 bytes of base64 in all, else the result is an
   * error. Put
   * its display metadata (a caption, a size) in `display`. Inside
   * `execute`, the run's result carries the images its calls returned.
   */
  image(image: ImageInput): void;
}

export interface ConfirmRequest {
  sessionId: string;
  commandId: string;
  callId: string;
  module: string;
  operation: string;
  arguments: Record<string, unknown>;
}

/** `prompt` input (a closed schema: the core refuses other fields). */
export interface PromptInput {
  requestId: string;
  text: string;
  images?: ImageInput[];
  delivery?: Delivery;
  /** Edit and resend: the turn runs on a new branch right after this entry (`""`: the Session's start). Not with `delivery: "steer"`. */
  after?: string;
}

/** A `retry` (the user message whose answer is generated again) or a `select` (the entry whose branch is selected). */
export interface EntryInput {
  requestId: string;
  entryId: string;
}

/** The children of an entry, a page: `cursor` is the previous page's `cursor`. */
export interface BranchesQuery {
  entryId: string;
  limit?: number;
  cursor?: string;
}

/** Where a fork starts: the path of `sessionId` ending at `entryId` (shared, not copied). */
export interface ForkFrom {
  sessionId: string;
  entryId: string;
}

export interface OperatorInput {
  requestId: string;
  text: string;
}

/**
 * `compact` input (a closed schema): a summary of the Session's model
 * context, stored as a `compaction` entry, stands for the messages before
 * it in every later model call. `instructions` (at most 65,536 bytes) are
 * added to the summary request.
 */
export interface CompactInput {
  requestId: string;
  instructions?: string;
}

export interface CancelInput {
  commandId: string;
  onlyIfPending?: boolean;
}

/** A token budget to set: `tokens` an integer 0..1,000,000,000,000,000 (tokens the provider reports, input plus output). */
export interface BudgetInput {
  tokens: number;
}

/** A Session read page: `cursor` is the previous page's `cursor` (the HTTP `before`). */
export interface ReadQuery {
  limit?: number;
  cursor?: string;
}

export interface PageQuery {
  limit?: number;
  cursor?: string;
}

/** `ShiitakeDO#agent`: the owner API. */
export interface ShiitakeOwner {
  /** The same owner, its calls bound to host metadata `meta` (checked at each call like `x-shiitake-meta`). */
  withMeta(meta: unknown): ShiitakeOwner;
  /** Addresses a Session; no I/O. */
  session(sessionId: string): ShiitakeOwnerSession;
  listSessions(query?: PageQuery): Promise<SessionList>;
  /** With `from`: a fork continuing that Session's path ending at the entry. */
  createSession(sessionId?: string, options?: { from?: ForkFrom }): Promise<{ sessionId: string }>;
  deleteSession(sessionId: string): Promise<void>;
  inbox(query?: PageQuery): Promise<Inbox>;
  /** The usage ledger (GET /usage). */
  usage(query?: UsageQuery): Promise<UsageLedger>;
  /** The Agent's daily token budget (GET /budget). */
  budget(): Promise<Budget>;
  /** Sets it over the host's configuration (PUT /budget, host-only); a raise resumes the turns it now covers. */
  setBudget(input: BudgetInput): Promise<Budget>;
  /** Clears it, back to the host's configuration (DELETE /budget). */
  clearBudget(): Promise<Budget>;
  grants: {
    /** `ShiitakeDO#deliverGrants`. */
    deliver(sessionId: string, delivery: GrantDelivery): { delivered: "stored" | "replaced" | "unchanged" };
  };
}

export interface ShiitakeOwnerSession {
  prompt(input: PromptInput): Promise<Receipt>;
  /** `prompt` with `delivery: "steer"`. */
  steer(input: Omit<PromptInput, "delivery">): Promise<Receipt>;
  /** `prompt` with `delivery: "followUp"`. */
  followUp(input: Omit<PromptInput, "delivery">): Promise<Receipt>;
  operator(input: OperatorInput): Promise<Receipt>;
  /** Queues a compaction of the model context (never returned by `latestPending`, never joined by a steer). */
  compact(input: CompactInput): Promise<Receipt>;
  cancel(input: CancelInput): Promise<CancelOutcome>;
  /** Generates the answer to the user message `entryId` again, on a new branch. */
  retry(input: EntryInput): Promise<Receipt>;
  /** Selects the branch through `entryId`. */
  select(input: EntryInput): Promise<Receipt>;
  /** The children of an entry. */
  branches(query: BranchesQuery): Promise<BranchList>;
  /** The Session's explicit model (`model` null when none is set). */
  model(): Promise<SessionModel>;
  /** Sets the Session's explicit model (`model_rejected` when the host's policy refuses it). */
  setModel(input: { model: string; reasoning?: Reasoning }): Promise<SessionModel>;
  /** Clears the Session's explicit model; `{model: null}`. */
  clearModel(): Promise<SessionModel>;
  /** The Session's token budget (GET /sessions/:id/budget). */
  budget(): Promise<Budget>;
  /** Sets it over the host's configuration (PUT, host-only); a raise resumes its paused turn. */
  setBudget(input: BudgetInput): Promise<Budget>;
  /** Clears it, back to the host's configuration (DELETE). */
  clearBudget(): Promise<Budget>;
  abort(): Promise<AbortOutcome>;
  withdraw(requestId: string): Promise<WithdrawOutcome>;
  read(query?: ReadQuery): Promise<SessionRead>;
  /** The settlement, or undefined while not settled at `timeoutMs` (the HTTP route's null); aborting `signal` rejects the read and never cancels the command. */
  readSettlement(commandId: string, options?: { timeoutMs?: number; signal?: AbortSignal }): Promise<CommandSettlement | undefined>;
  latestPending(): Promise<PendingPrompt | null>;
  /** The watch's events (a `snapshot` first, then `frame`s); aborting `signal` or leaving the loop closes it. */
  watch(options?: { signal?: AbortSignal }): AsyncGenerator<WatchEvent, void, undefined>;
}

/** Parses a watch's `text/event-stream` bytes (`watchSession`) into its events; aborting `signal` or leaving the loop cancels the stream. */
export function readWatch(stream: ReadableStream<Uint8Array>, options?: { signal?: AbortSignal }): AsyncGenerator<WatchEvent, void, undefined>;
