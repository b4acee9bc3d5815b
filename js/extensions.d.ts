// Types of the "shiitake/extensions" entry: declaring an extension (the
// fluent builder), its manifest for the core, and one hook call.
//
// The builder's types follow what it declares: `ctx.state.read((s) => s.goals.get("x"))`
// is typed from the collection's schema when that schema is a Standard Schema
// (its output type; writes take its input type), and as JSON when it is a
// JSON Schema (the core validates those; no types are derived from them).
// Declarations (.config, .state, .requests) are only offered before the first
// callback, as at run time.

import type { FilesPort, sqliteWorkspace } from "./files.js";

// ---------------------------------------------------------------------------
// JSON and schemas

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** A JSON Schema document, read-only. */
export type JsonSchema = { readonly [keyword: string]: unknown };

/** The Standard Schema v1 interface (https://standardschema.dev), as much of it as is used here. */
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
}

/** What a schema may be: a JSON Schema object (validated by the core) or a Standard Schema (validated here, synchronously). */
export type Schema = JsonSchema | StandardSchemaV1;

/** The values a schema hands out: a Standard Schema's output type; JSON for a JSON Schema or no schema. */
export type SchemaOutput<S> = S extends StandardSchemaV1 ? NonNullable<S["~standard"]["types"]>["output"] : JsonValue;
/** The values a schema accepts: a Standard Schema's input type; JSON for a JSON Schema or no schema. */
export type SchemaInput<S> = S extends StandardSchemaV1 ? NonNullable<S["~standard"]["types"]>["input"] : JsonValue;

// ---------------------------------------------------------------------------
// State declarations

declare const rowTypes: unique symbol;

/** A keyed collection; rows read as `Out`, written as `In` (a Standard Schema's output replaces what is written). */
export interface CollectionDeclaration<Out = JsonValue, In = Out> {
  readonly kind: "collection";
  readonly schema: Schema | undefined;
  /** Types only; absent at run time. */
  readonly [rowTypes]?: { out: Out; in: In };
}

/** One optional row, stored under the key "". */
export interface DocumentDeclaration<Out = JsonValue, In = Out> {
  readonly kind: "document";
  readonly schema: Schema | undefined;
  /** Types only; absent at run time. */
  readonly [rowTypes]?: { out: Out; in: In };
}

export type StateDeclarations = { readonly [name: string]: CollectionDeclaration<any, any> | DocumentDeclaration<any, any> };

export declare function defineCollection(): CollectionDeclaration<JsonValue, JsonValue>;
export declare function defineCollection<S extends Schema>(schema: S): CollectionDeclaration<SchemaOutput<S>, SchemaInput<S>>;
export declare function defineDocument(): DocumentDeclaration<JsonValue, JsonValue>;
export declare function defineDocument<S extends Schema>(schema: S): DocumentDeclaration<SchemaOutput<S>, SchemaInput<S>>;

/** A collection as read: copies of its rows; arrays sorted by key. */
export interface CollectionView<Row> {
  get(key: string): Row | undefined;
  has(key: string): boolean;
  keys(): string[];
  values(): Row[];
  entries(): Array<[key: string, row: Row]>;
  readonly size: number;
}

/** A collection in `state.update`: the view plus writes (validated at once; a refusal throws). */
export interface CollectionDraft<Row, In = Row> extends CollectionView<Row> {
  /** Stores `row` (JSON, not null) under `key` (1..=256 UTF-8 bytes). */
  put(key: string, row: In): void;
  delete(key: string): void;
}

export interface DocumentView<Row> {
  get(): Row | undefined;
}

export interface DocumentDraft<Row, In = Row> extends DocumentView<Row> {
  /** Stores `row` (JSON, not null). */
  set(row: In): void;
  clear(): void;
}

export type StateView<S extends StateDeclarations> = {
  readonly [K in keyof S]: S[K] extends DocumentDeclaration<infer O, any>
    ? DocumentView<O>
    : S[K] extends CollectionDeclaration<infer O, any>
      ? CollectionView<O>
      : never;
};

export type StateDraft<S extends StateDeclarations> = {
  readonly [K in keyof S]: S[K] extends DocumentDeclaration<infer O, infer I>
    ? DocumentDraft<O, I>
    : S[K] extends CollectionDeclaration<infer O, infer I>
      ? CollectionDraft<O, I>
      : never;
};

/**
 * A migration's draft: rows may still have an earlier version's shape, so
 * they read as JSON; writes take the current version's rows.
 */
export type MigrationDraft<S extends StateDeclarations> = {
  readonly [K in keyof S]: S[K] extends DocumentDeclaration<any, infer I>
    ? DocumentDraft<JsonValue, I>
    : S[K] extends CollectionDeclaration<any, infer I>
      ? CollectionDraft<JsonValue, I>
      : never;
};

/** Migration V turns state V-1 into V; every version 2..=V needs one. */
export type Migration<S extends StateDeclarations, C> = (draft: MigrationDraft<S>, ctx: HookContext<S, C>) => void;

export interface VersionedState<S extends StateDeclarations, C> {
  /** 1..=1000; default 1. */
  version?: number;
  collections: S;
  migrations?: { [version: number]: Migration<S, C> };
}

// ---------------------------------------------------------------------------
// Contexts

/** The Session a call is about: its id and committed transcript position. */
export interface SessionRef {
  readonly id: string;
  /**
   * The Session's committed position (its newest entry's sequence), read in
   * the calling transaction; `null` in settled hooks and projections (a
   * settled hook runs inside the settling write, after its own appends).
   */
  readonly position: number | null;
}

/** The run a prompt, tools or files call is for. */
export interface RunRef {
  readonly sessionId: string;
  readonly commandId: string;
}

export interface TimerOptions {
  /** When, in ms since epoch; or give `delayMs`. */
  at?: number;
  /** From `ctx.now`, in ms (>= 0); or give `at`. */
  delayMs?: number;
  sessionId?: string;
  payload?: JsonValue;
}

export interface SendOptions {
  sessionId: string;
  /** 1..=65536 UTF-8 bytes. */
  text: string;
  /**
   * `true`: the admission refuses an absent Session (`send` throws
   * `AdmissionError` reason `closed`, catchable) instead of creating it.
   * Default `false`: the addressed Session is created. Automated
   * continuations (timers) pass `true`, so a deleted Session is never
   * recreated.
   */
  requireExistingSession?: boolean;
}

/** `context.send` refused by the admission transaction. */
export declare class AdmissionError extends Error {
  readonly name: "AdmissionError";
  /** `closed`: the send required an existing Session and it is absent. */
  readonly reason: "closed";
  readonly sessionId: string;
}

/**
 * An attention item (`ctx.attention.set`): closed. Served qualified by the
 * extension's id (`extensionId` beside `id`).
 */
export interface AttentionItem {
  /** 1..=128 of [A-Za-z0-9._:-]; unique per (extension, Session): setting it again replaces it. */
  id: string;
  /** 1..=64 of [a-z0-9_.-]. */
  kind: string;
  /** 1..=200 characters (code points). */
  summary: string;
  /** ms since epoch (an integer). */
  since: number;
  /** ms since epoch (an integer); display metadata only: never enforced, clear it with a timer. */
  expiresAt?: number;
}

export type AttentionOp =
  | { op: "set"; sessionId: string; item: AttentionItem }
  | { op: "clear"; sessionId: string; id: string };

/** What projections, prompts and tools get: they run outside the owner transaction and only read. */
export interface ReadContext<S extends StateDeclarations, C> {
  readonly extensionId: string;
  readonly config: C;
  /** ms since epoch. */
  readonly now: number;
  readonly session: SessionRef | undefined;
  /**
   * `session.position`, by the seed's name: the committed Session position
   * (its newest entry's sequence; 0 before the first) read inside the
   * calling transaction, for a timeline anchor (`afterSequence`) later
   * output cannot move; `null` without a Session and where the read cannot
   * run (settled hooks, projections).
   */
  readonly sessionPosition: number | null;
  readonly state: {
    /** Calls `fn` with a view of the state (this call's writes included) and returns its value. */
    read<R>(fn: (view: StateView<S>) => R): R;
  };
}

/** What commands, hooks and migrations get: they run inside the owner transaction. */
export interface HookContext<S extends StateDeclarations, C> extends ReadContext<S, C> {
  readonly state: ReadContext<S, C>["state"] & {
    /** Calls `fn` with a draft of the state and returns its value; the writes are the call's outcome. */
    update<R>(fn: (draft: StateDraft<S>) => R): R;
  };
  readonly timers: {
    /** Sets (or replaces) the timer `name` ([A-Za-z0-9_.:-], 1..=128). */
    set(name: string, options: TimerOptions): void;
    cancel(name: string): void;
  };
  /**
   * Admits a prompt into a Session with the owner transaction (request
   * identity derived from the cause, so a replayed command or timer replays
   * it). Throws `AdmissionError` (reason `closed`) when
   * `requireExistingSession` is set and the Session is absent. In a settled
   * hook the send is staged with the settlement (all or none) and admitted
   * once by the pass right after; there a required Session that is gone
   * drops it (nothing is created), and another refusal (a full queue) stops
   * the extension. Migrations and activate callbacks cannot send.
   */
  send(message: SendOptions): void;
  /**
   * The Sessions' attention (needs the roster entry's `attention` grant and
   * the definition's `.requests({ attention: true })`; commands, settled and
   * timer hooks only, never migrations). Each Session carries at most 64
   * items, an extension at most 4,096 across Sessions. Committed with the
   * call's other writes; refusals are thrown at the call.
   */
  readonly attention: {
    /** Sets (or replaces) the item `item.id` on an existing Session. */
    set(sessionId: string, item: AttentionItem): void;
    /** Clears the item `id`; clearing an absent item (or in a deleted Session) does nothing. */
    clear(sessionId: string, id: string): void;
  };
}

// ---------------------------------------------------------------------------
// Events

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

export interface SettledEvent {
  sessionId: string;
  commandId: string;
  terminal: "completed" | "failed" | "cancelled" | "interrupted";
  answer: string | null;
  usage: TokenUsage | null;
  toolCallCount: number;
  diagnostic?: string;
}

export interface TimerEvent {
  name: string;
  sessionId: string | null;
  payload: JsonValue;
  /** ms since epoch. */
  dueAt: number;
}

/** An Effect-style Option, accepted from projections. */
export type OptionLike<T> = { readonly _tag: "Some"; readonly value: T } | { readonly _tag: "None" };

/** A tool offered to the model: made by `commands.tool` only. */
export interface ToolMarker<Name extends string = string> {
  readonly command: Name;
  readonly description: string | null;
}

export interface ToolCommands<Names extends string> {
  /** Offers the session-scope command `name` as a tool; another name throws. */
  tool<N extends Names>(name: N, options?: { description?: string }): ToolMarker<N>;
}

// ---------------------------------------------------------------------------
// The builder

export type Scope = "session" | "agent";

export interface CommandOptions<I extends Schema | undefined, Sc extends Scope> {
  /** Default "session". */
  scope?: Sc;
  /** Absent: any JSON. */
  input?: I;
  /** At most 1024 characters. */
  description?: string;
}

/** What the types remember of a command: its scope (for `commands.tool`). */
export type CommandDeclarations = { readonly [name: string]: Scope };

type SessionCommandNames<Cm extends CommandDeclarations> = { [K in keyof Cm]: Cm[K] extends "session" ? K : never }[keyof Cm] & string;

type InputOf<I> = [I] extends [undefined] ? JsonValue : SchemaOutput<I>;

/** Requested capabilities, e.g. `{ attention: true }`. */
export type Requests = { readonly [capability: string]: boolean };

/** A declared extension: callbacks may still be added. */
export interface ExtensionDefinition<
  S extends StateDeclarations = {},
  C = JsonValue,
  Cm extends CommandDeclarations = {},
> {
  readonly id: string;
  readonly version: string;

  /** A command (name: [a-z][a-z0-9_]{0,31}, unique; at most 32); its return value (JSON) is the result. */
  command<N extends string, I extends Schema | undefined = undefined, Sc extends Scope = "session">(
    name: N,
    options: CommandOptions<I, Sc>,
    handler: (ctx: HookContext<S, C>, input: InputOf<I>) => unknown,
  ): ExtensionDefinition<S, C, Cm & { readonly [K in N]: Sc }>;
  command<N extends string>(
    name: N,
    handler: (ctx: HookContext<S, C>, input: JsonValue) => unknown,
  ): ExtensionDefinition<S, C, Cm & { readonly [K in N]: "session" }>;

  /** Called when a command of a Session settles. */
  onSettled(fn: (ctx: HookContext<S, C>, event: SettledEvent) => void): ExtensionDefinition<S, C, Cm>;
  /** Called when one of the extension's timers is due. */
  onTimer(fn: (ctx: HookContext<S, C>, timer: TimerEvent) => void): ExtensionDefinition<S, C, Cm>;
  /**
   * An activation resource (the seed's Effect scope): `fn` runs once each
   * time the extension comes up in an instance (the object's runtime opens
   * it, a new revision is deployed, the host resumes it after a stop) and
   * may return a disposer. The disposer (sync or async) runs when that
   * instance closes (`close()`, the Node host's close, a failed
   * `initialize`, a trap recovery replacing the instance; eviction is not
   * observable), newest activation first, each awaited at most
   * `EXTENSION_DISPOSE_TIMEOUT_MS` (5 s); one that throws or is overdue is
   * logged and the close goes on. `fn` is synchronous and only reads
   * state; a throw stops the extension like any failing hook (the settled
   * work it misses replays once it is resumed). A stopped extension keeps
   * the resource it opened until its instance closes.
   */
  activate(fn: (ctx: ReadContext<S, C>) => void | (() => void | Promise<void>)): ExtensionDefinition<S, C, Cm>;
  /**
   * What the extension publishes for a scope (one per scope); `undefined` or
   * `None` publishes nothing. `history: true` (session scope only) keeps the
   * producer history: each command or hook that changes the state records
   * the new Session projection (unless unchanged) in its own transaction,
   * the newest 32 events and 32 KiB per Session, older ones counted as
   * `omitted`. It is served beside the projection (`extensionHistory` of the
   * Session read, `history` of its `extension` frames) as `{ events:
   * [{ sequence, at, value }], omitted }`; `sequence` is the producer's
   * own (1, 2, ...), not a Session position.
   */
  projection(spec: { scope?: Scope; read: (ctx: ReadContext<S, C>) => unknown; history?: boolean }): ExtensionDefinition<S, C, Cm>;
  /** Sections added to a run's prompt. */
  prompt(fn: (ctx: ReadContext<S, C>, run: RunRef) => string | readonly string[] | undefined | null | void): ExtensionDefinition<S, C, Cm>;
  /** The session commands offered to the model as tools in a run. */
  tools(
    fn: (ctx: ReadContext<S, C>, run: RunRef, commands: ToolCommands<SessionCommandNames<Cm>>) => ReadonlyArray<ToolMarker>,
  ): ExtensionDefinition<S, C, Cm>;
  /**
   * The run's Files, for the exclusive files grant. Needs
   * `.requests({ files: true })` first (refused by name otherwise); called
   * only when the roster grants this extension `files` (`{ extension,
   * grants: ["files"] }`, one holder per roster) and it is running, once at
   * the start of each run (turn), with a read-only context. The port
   * returned is kept for that whole run: its operations are offered to the
   * model as direct tools beside `execute` (`read`, `write`, `list`, `stat`,
   * `search`, `replace`, and `apply_patch` when the port patches), never as
   * a module `execute` reaches; grants key them as `files`. `undefined`:
   * no files tools this run. A builder that throws is logged and the run
   * goes on without them. The host must offer a tool runtime (`tools()`,
   * at least `{}`) and must not configure its own `tools().files` beside a
   * holder: either is refused as host_misconfigured.
   */
  files(fn: (ctx: ReadContext<S, C>, run: RunRef) => FileTools | undefined | null | void): ExtensionDefinition<S, C, Cm>;
}

/**
 * What a files hook returns: one Files port (seed knapsack:
 * `Knapsack.files({ port })`): `sqliteWorkspace(bounds)` (the Agent's own
 * SQLite), `r2Files(bucket, { prefix })`, or the host's own `FilesPort`.
 * The port enforces its own root and authority.
 */
export type FileTools = FilesPort | ReturnType<typeof sqliteWorkspace>;

/** An extension before its first callback: declarations are offered too, each once. */
export interface ExtensionBuilder<S extends StateDeclarations = {}, C = JsonValue, Cm extends CommandDeclarations = {}>
  extends ExtensionDefinition<S, C, Cm> {
  /** The roster's config, checked by `schema`; `default` when the roster gives none. */
  config<CS extends Schema>(schema: CS, options?: { default?: SchemaInput<CS> }): ExtensionBuilder<S, SchemaOutput<CS>, Cm>;
  /** The state at version 1: a map of collections and documents (at most 16). */
  state<NS extends StateDeclarations>(collections: NS): ExtensionBuilder<NS, C, Cm>;
  /** The state at `version`, with a migration for every version 2..=version. */
  state<NS extends StateDeclarations>(spec: VersionedState<NS, C>): ExtensionBuilder<NS, C, Cm>;
  /** Capabilities the extension asks the host for. */
  requests(requested: Requests): ExtensionBuilder<S, C, Cm>;
}

/** Starts an extension; `version` defaults to "0.0.0". */
export declare function defineExtension(spec: string | { id: string; version?: string }): ExtensionBuilder;

/** Whether `value` was made by `defineExtension`. */
export declare function isExtension(value: unknown): value is ExtensionDefinition<any, any, any>;

// ---------------------------------------------------------------------------
// The roster, the manifest, hook calls (used by the runtime)

export type AnyExtension = ExtensionDefinition<any, any, any>;

/** One item of `ShiitakeDO#extensions()`. */
export type RosterItem =
  | AnyExtension
  | {
      extension: AnyExtension;
      grantKey?: string;
      /** The host's grants; each must be requested by the definition. The files grant has one holder per roster. */
      grants?: readonly Grant[];
      feature?: string;
      config?: JsonValue;
      /**
       * Also offer the commands its `tools(...)` hook offers as direct tools
       * named `<id>_<command>` (`goal_end`), so a host without `execute`
       * offers them; needs a tools hook. An extension whose tools one model
       * request cannot carry beside the others is left out of that run (logged).
       */
      direct?: boolean;
    };

/** A capability a roster entry grants. */
export type Grant = "attention" | "files";

export interface RosterEntry {
  readonly definition: AnyExtension;
  readonly grantKey: string;
  readonly grants: readonly Grant[];
  readonly feature: string | null;
  readonly config: JsonValue;
  readonly direct: boolean;
}

export interface ExtensionManifest {
  id: string;
  version: string;
  config: JsonValue;
  configSchema: JsonValue | null;
  configValidate: boolean;
  state: {
    version: number;
    collections: { [name: string]: { document: boolean; schema: JsonValue | null; validate: boolean } };
  };
  migrations: number[];
  commands: { [name: string]: { scope: Scope; inputSchema: JsonValue | null; validate: boolean; description: string | null } };
  hooks: { settled: boolean; timer: boolean; activate: boolean };
  projection: { session: boolean; agent: boolean; history: boolean };
  prompt: boolean;
  tools: boolean;
  /** Whether the definition has a files hook (`.files()`). */
  files: boolean;
  requests: { [capability: string]: boolean };
  grantKey: string;
  grants: Grant[];
  feature: string | null;
  /** The roster entry's `direct: true` (absent otherwise). */
  direct?: true;
}

export type HookRequest = {
  state?: { [collection: string]: { [key: string]: JsonValue } };
  config?: JsonValue;
  now: number;
  session?: SessionRef | null;
  /** Sessions a send of this call found absent (`send` to them throws `AdmissionError`). */
  closed?: string[];
} & (
  | { kind: "settled"; event: SettledEvent }
  | { kind: "timer"; event: TimerEvent }
  | { kind: "command"; event: { name: string; input?: JsonValue; requestId?: string } }
  | { kind: "migrate"; event: { from: number; to: number } }
  | { kind: "project"; event: { scope: Scope } }
  | { kind: "prompt"; event: RunRef }
  | { kind: "tools"; event: RunRef }
  | { kind: "files"; event: RunRef }
);

export type TimerWrite =
  | { name: string; at: number; sessionId: string | null; payload: JsonValue }
  | { name: string; cancel: true };

export type HookResponse =
  | {
      ok: true;
      /** One per touched (collection, key), first-touch order, final value; null deletes; a document's key is "". */
      writes: Array<{ collection: string; key: string; value: JsonValue }>;
      timers: TimerWrite[];
      sends: Array<{ sessionId: string; text: string; requireExistingSession: boolean }>;
      /** `ctx.attention.set/clear`, in call order (absent when none). */
      attention?: AttentionOp[];
      result?: JsonValue;
      value?: JsonValue;
      sections?: string[];
      tools?: Array<{ command: string; description: string | null }>;
      /** A files call's port itself (not JSON; the runtime keeps it for the run), or null. */
      files?: FileTools | null;
    }
  | { ok: false; error: string; refused?: true };

export declare function normalizeRoster(list: readonly RosterItem[]): RosterEntry[];
export declare function manifestOf(entry: RosterEntry | AnyExtension): ExtensionManifest;
export declare function runHook(entry: RosterEntry | AnyExtension, request: HookRequest): HookResponse;

export declare const EXTENSIONS_MAX: 16;
export declare const EXTENSION_COLLECTIONS_MAX: 16;
export declare const EXTENSION_COMMANDS_MAX: 32;
export declare const EXTENSION_STATE_VERSION_MAX: 1000;
export declare const EXTENSION_DESCRIPTION_MAX: 1024;
export declare const EXTENSION_KEY_BYTES_MAX: 256;
export declare const EXTENSION_SEND_TEXT_BYTES_MAX: 65536;
export declare const EXTENSION_FEATURE_MAX: 128;
export declare const EXTENSION_ERROR_MAX: 1024;
export declare const EXTENSION_REQUESTS_MAX: 32;
export declare const ATTENTION_SUMMARY_CHARS_MAX: 200;
export declare const ATTENTION_ID_BYTES_MAX: 128;
export declare const ATTENTION_KIND_BYTES_MAX: 64;
