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
  inputTokens: number;
  outputTokens: number;
}

export type MessageRole = "user" | "assistant" | "operator" | "tool";

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
 * `toolCalls` and `protocol`; a `tool` message is one call's outcome.
 */
export interface SessionMessage {
  entryId: string;
  role: MessageRole;
  /** On a `tool` message: what the model saw. */
  text: string;
  requestId?: string;
  commandId?: string;
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
  /** Milliseconds since the epoch. */
  createdAt: number;
}

/** A queued prompt. */
export interface PendingPrompt {
  commandId: string;
  requestId: string | null;
  text: string;
  images?: ImageInput[];
  delivery: Delivery;
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
  text: string;
  attempt: number;
  startedAt: number | null;
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

/** An admitted prompt or operator line; `requestId` is the one sent (generated when omitted). */
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
  /** Once at a turn's start: a tool the host configured cannot be offered (e.g. `execute` without `LOADER`, an unavailable MCP server). */
  | { type: "diagnostic"; commandId: string; diagnostic: string };

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
  /** Defaults to `crypto.randomUUID()`. Reuse it to retry an uncertain send. */
  requestId?: string;
  images?: ImageInput[];
  delivery?: Delivery;
}

export interface OperatorOptions extends CallOptions {
  /** Defaults to `crypto.randomUUID()`. */
  requestId?: string;
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
  /** The command admitted under `requestId`, or `unknown` after fencing it. Never cancels. */
  withdraw(requestId: string, options?: CallOptions): Promise<WithdrawOutcome>;
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
  /** The newest pending prompt of the request's principal, or `null`. */
  latestPending(options?: CallOptions): Promise<PendingPrompt | null>;
}

export interface ListSessionsOptions extends CallOptions {
  /** 1..200 (default 50). */
  limit?: number;
  cursor?: string | null;
}

export interface ShiitakeClient {
  listSessions(options?: ListSessionsOptions): Promise<SessionList>;
  /** Creates a Session (an id is generated when omitted). */
  createSession(sessionId?: string, options?: CallOptions): Promise<{ sessionId: string }>;
  /** Deletes a Session (its watches end, its work stops). */
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
  | "not_configured"
  | "invalid_response"
  | "response_too_large"
  | "event_too_large";

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
