import type { IncomingMessage, ServerResponse } from "node:http";
import type { Hono } from "hono";
import type { ShiitakeHttpEnv } from "./app.js";
import type { HostJobs, ShiitakeDO, ShiitakeModels, ShiitakeTelemetry, ShiitakeTools } from "./do.js";

/** A hook option: the value, or a function called with `this` (and its argument) = the object. */
export type NodeHook<T> = T | ((this: ShiitakeDO, object: ShiitakeDO) => T);

export interface NodeShiitakeOptions {
  /** The SQLite file holding the Agent (created if absent). Held exclusively until `close()`. */
  path: string;
  /** `ctx.id.name`: the Agent's id. Default: the file name without its extension (`agent.db` -> `agent`). */
  agentId?: string;
  /** `SHIITAKE_MODEL` (`provider/model`, e.g. `openai/gpt-4o-mini`); overrides `env`'s. */
  model?: string;
  /** `SHIITAKE_INSTRUCTIONS`; overrides `env`'s. */
  instructions?: string;
  /**
   * The Worker's vars, same names as wrangler's (`SHIITAKE_MODEL`,
   * `SHIITAKE_MODELS`, `OPENAI_BASE_URL`, `OPENAI_API_KEY`,
   * `ANTHROPIC_API_KEY`, `SHIITAKE_RETRY_BASE_MS`, ...). Default: the
   * `SHIITAKE_*`, `OPENAI_*` and `ANTHROPIC_*` variables of `process.env`.
   * There is no `LOADER`: the `execute` tool is not offered on Node.
   */
  env?: Record<string, unknown>;
  /** `ShiitakeDO#tools()`: host modules (`direct: true` to offer one to the model), MCP servers and Computers (`direct: true` to offer their tools: there is no `execute` on Node). */
  tools?: NodeHook<ShiitakeTools | undefined>;
  /** `ShiitakeDO#extensions()`: the extension roster. */
  extensions?: NodeHook<unknown[] | undefined>;
  /** `ShiitakeDO#hostJobs()`: the host work lane. */
  hostJobs?: NodeHook<HostJobs | undefined>;
  /** `ShiitakeDO#telemetry()`: where OpenTelemetry traces go. */
  telemetry?: NodeHook<ShiitakeTelemetry | undefined>;
  /** `ShiitakeDO#models()`: the models this Agent may call. */
  models?: NodeHook<ShiitakeModels | undefined>;
  /** `ShiitakeDO#initialize(extensions)`. */
  initialize?: (this: ShiitakeDO, extensions: { command(extensionId: string, command: string, input: unknown, options?: { sessionId?: string; requestId?: string }): unknown }) => void | Promise<void>;
  /** `ShiitakeDO#hostFetch(request)`: answer a request yourself, or `undefined`. */
  hostFetch?: (this: ShiitakeDO, request: Request) => Response | undefined | Promise<Response | undefined>;
  /** The alarm's retry after a throwing `alarm()`: Cloudflare's 2000 ms doubling, at most 6 retries. */
  alarmRetry?: { retryBaseMs?: number; retriesMax?: number };
}

export interface NodeShiitake {
  /** The in-process owner API (`object.agent`) when this build's ShiitakeDO has one, else undefined. */
  agent: unknown;
  /** The ShiitakeDO instance (host-only methods: `extensionCommand`, `deliverGrants`, ...). */
  object: ShiitakeDO;
  /**
   * The Session routes of docs/http.md at its root (`/sessions`, `/sessions/:id/commands`, ...),
   * served by the object in process. Mount behind your middleware (`app.route("/", shiitake.app)`),
   * which may set `shiitakeMeta`; serve with `nodeListener(app.fetch)` or `@hono/node-server`.
   */
  app: Hono<ShiitakeHttpEnv>;
  /** `app.fetch`. */
  fetch(request: Request): Promise<Response>;
  /** The file's absolute path. */
  path: string;
  /** `ctx.id.name`. */
  agentId: string;
  /**
   * Closes the runtime (live turns are aborted; accepted work waits in the
   * file for the next open), stops the alarm timer and releases the file.
   * Idempotent.
   */
  close(reason?: string): Promise<void>;
}

/** What a second open of a held file throws (`code: "SHIITAKE_LEASE_HELD"`). */
export class NodeStoreLeaseError extends Error {
  code: "SHIITAKE_LEASE_HELD";
  path: string;
}

/**
 * Opens the Agent kept in a SQLite file (Node's built-in `node:sqlite`) and
 * holds the file exclusively until `close()`: a second open, in this process
 * or another, throws `NodeStoreLeaseError`. Reopening resumes accepted work.
 */
export function openNodeShiitake(options: NodeShiitakeOptions): Promise<NodeShiitake>;

/** The exclusive lease on one SQLite file (`acquireNodeStoreLease`). */
export interface NodeStoreLease {
  /** The file's absolute path. */
  path: string;
  /** The open `node:sqlite` database holding the lease. */
  db: import("node:sqlite").DatabaseSync;
  /** Closes the database and frees the file. Idempotent. */
  release(): void;
}

/**
 * Takes the exclusive lease on a SQLite file (created if absent); a second
 * lease on it, in this process or another, throws `NodeStoreLeaseError`
 * until `release()`. For a host that composes its own store.
 */
export function acquireNodeStoreLease(path: string): NodeStoreLease;

/** The Durable Object runtime a `ShiitakeDO` runs on, over a lease. */
export interface NodeRuntimeHost {
  /** What `new ShiitakeDO(ctx, env)` takes: SQL storage, the persisted alarm, `id.name`, `waitUntil`. */
  ctx: unknown;
  agentId: string;
  /** Fires the alarm now, once the object is built: the core resumes accepted work and re-arms the alarm from the store (its writes skip the fsync, so what a crash left of it does not matter). */
  arm(): void;
  /** Stops the alarm and settles `waitUntil` work; the lease stays the caller's. */
  close(): Promise<void>;
}

/** The runtime for `object()` (the ShiitakeDO built on `ctx`) over `lease`. */
export function nodeRuntimeHost(
  lease: NodeStoreLease,
  options: { object: () => ShiitakeDO; agentId?: string; alarmRetry?: { retryBaseMs?: number; retriesMax?: number } },
): NodeRuntimeHost;

/** `ShiitakeDO` loaded for Node (its `cloudflare:workers` import and wasm resolved), to subclass over `nodeRuntimeHost`. */
export function nodeShiitakeDO(): Promise<typeof ShiitakeDO>;

/** `shiitake/files-search` loaded for Node (its wasm resolved); `import "shiitake/files-search"` on Node goes through it. */
export function nodeFilesSearch(): Promise<typeof import("./files-search.js")>;

/** A `node:http` request listener serving a fetch handler: `http.createServer(nodeListener(app.fetch))`. */
export function nodeListener(
  fetch: (request: Request) => Response | Promise<Response>,
): (req: IncomingMessage, res: ServerResponse) => Promise<void>;

/** Splits a SQL script into statements (quotes, comments and trigger bodies respected). */
export function splitStatements(sql: string): string[];
