// Types of the "shiitake/client-entry" entry: client entries v1 (seed
// shiitake.md "Client entries"): an extension's presentation as data, and
// the host side that admits, evaluates and dispatches it. No wasm.

import type { JsonValue, StandardSchemaV1 } from "./extensions.js";

export declare const CLIENT_PROTOCOL: "shiitake.client/v1";
export declare const CLIENT_CHIPS_MAX: 4;
export declare const CLIENT_PANEL_ROWS_MAX: 16;
export declare const CLIENT_TIMELINE_CELLS_MAX: 32;
export declare const CLIENT_ROWS_MAX: 200;
export declare const CLIENT_LABEL_CHARS_MAX: 4096;

/** The part of an extension's client contract an entry reads (the same object `bindSessionExtension` takes). */
export interface ClientContract {
  /** The extension id: [a-z][a-z0-9_]{0,31}. */
  readonly id: string;
  /** The projection's decoder: a synchronous Standard Schema; absent: the value as JSON. */
  readonly projection?: { readonly schema?: StandardSchemaV1 };
  readonly commands?: unknown;
}

type ProjectionOf<C> = C extends { projection: { schema: infer S } } ? (S extends StandardSchemaV1 ? NonNullable<S["~standard"]["types"]>["output"] : JsonValue) : JsonValue;

/** One retained producer history event (see the extension's `.projection({ history: true })`). */
export interface HistoryEvent<T> {
  /** The producer-local event sequence (1, 2, ...): not a Session position. */
  readonly sequence: number;
  /** ms since epoch, when it committed. */
  readonly at: number;
  /** The projection after that commit (decoded), or null when it published none. */
  readonly value: T | null;
}

/** What `contribute` and `attach` see of one slot. */
export interface ClientView<T> {
  /** `offline`: not observed yet, or the connection is lost. */
  readonly status: "running" | "stopped" | "offline";
  /** The decoded projection, or null when it publishes none. */
  readonly value: T | null;
  /** The newest events (at most 32 and 32 KiB), `omitted` how many older ones were dropped. */
  readonly history: { readonly events: readonly HistoryEvent<T>[]; readonly omitted: number };
  /** The running advertised command catalog (names): action ids must be among them. */
  readonly commands: readonly string[];
}

/** An action: data, never a closure. `id` names a command of the running catalog. */
export interface ClientActionV1 {
  id: string;
  /** At most 4,096 characters. */
  label: string;
  /** A JSON object: the command's input (absent: `{}`). */
  input?: { [key: string]: JsonValue };
}

/** A display-only chip: no actions, no open targets. */
export interface ClientChipV1 {
  /** 1..128 of [A-Za-z0-9_.:-], unique among the chips. */
  id: string;
  title: string;
  /** Optional label data; browser and TUI renderers show `title`. */
  compact?: string;
}

/**
 * A typed Session open target: a panel row's or a cell's (never a chip's).
 * `sessionId` and `agentId` (another Agent's Session when given) are 1..128
 * of [A-Za-z0-9._:-]. Data only: the host's `open` callback authorizes it
 * before navigating.
 */
export interface ClientOpenTargetV1 {
  kind: "session";
  sessionId: string;
  agentId?: string;
}

export interface ClientPanelRowV1 {
  /** 1..128 of [A-Za-z0-9_.:-], unique among the panel rows. */
  id: string;
  title: string;
  detail?: string;
  actions?: ClientActionV1[];
  open?: ClientOpenTargetV1;
}

/**
 * A committed timeline cell. Anchors: a real `commandId` (after that
 * command's last loaded row), or `afterSequence` (a committed Session
 * position, 0 = before the first entry) with `commandId: null`, never both;
 * neither: under "Extension changes".
 */
export type ClientCellV1 = {
  /** A positive safe integer as decimal text, unique among the cells. */
  id: string;
  label: string;
  open?: ClientOpenTargetV1;
} & ({ commandId?: undefined; afterSequence?: undefined } | { commandId: string; afterSequence?: undefined } | { commandId: null; afterSequence: number });

export interface ClientContributionV1 {
  /** At most 4. */
  chips: ClientChipV1[];
  /** At most 16. */
  panel: ClientPanelRowV1[];
  /** At most 32 cells. */
  timeline: { cells: ClientCellV1[]; omitted: number };
  waiting: { summary: string; cancel?: ClientActionV1 } | null;
}

export interface AttachContext<T> {
  /** Each `for await` is an independent subscription with one sliding latest-value slot; all end at detach. */
  readonly activity: AsyncIterable<ClientView<T>>;
  /** Aborted when the selected Session is detached. */
  readonly signal: AbortSignal;
  readonly onError: (error: unknown) => void;
}

export interface ClientCallbacks<T> {
  /** Synchronous and pure over the view. */
  contribute?: (view: ClientView<T>) => ClientContributionV1;
  attach?: (ctx: AttachContext<T>) => void | Promise<void>;
}

/** The installed entry: only these keys. */
export interface ClientEntryV1<T = JsonValue> {
  readonly protocol: "shiitake.client/v1";
  readonly id: string;
  readonly attach?: (ctx: AttachContext<T>) => void | Promise<void>;
  readonly contribute?: (view: ClientView<T>) => ClientContributionV1;
}

/** Refusals: `entry_refused`, `invalid_output`, `invalid_projection`, `invalid_observation`, `contribute_threw`, `offline`, `stale_action`, `stale_target`, `open_refused`, `prompt_rejected`, `detached`, `entry_not_found`, `no_dispatch`, `no_open`. */
export declare class ClientEntryError extends Error {
  readonly name: "ClientEntryError";
  readonly code: string;
}

export declare function defineClientEntry<C extends ClientContract>(
  contract: C,
  callbacks: ClientCallbacks<ProjectionOf<C>> & ({ contribute: NonNullable<ClientCallbacks<ProjectionOf<C>>["contribute"]> } | { attach: NonNullable<ClientCallbacks<ProjectionOf<C>>["attach"]> }),
): ClientEntryV1<ProjectionOf<C>>;

/** Admits exactly a `shiitake.client/v1` entry; throws ClientEntryError `entry_refused` otherwise. */
export declare function admitClientEntry<E>(entry: E): E;

/** One observation of a slot, as the host feeds it (from a binding's slot and the extension's status). */
export interface ClientObservation {
  status: "running" | "stopped" | "offline";
  value?: unknown;
  history?: { events: Array<{ sequence: number; at?: number; value: unknown }>; omitted: number };
  commands?: string[];
}

export interface DispatchCall {
  readonly extensionId: string;
  readonly slot: string;
  readonly command: string;
  readonly input: { [key: string]: JsonValue };
  notice(message: unknown): void;
  /** Rejected at once for a waiting cancellation. */
  prompt(question: unknown): Promise<unknown>;
}

export interface ClientEntryHostOptions {
  entries: readonly ClientEntryV1<any>[];
  /** Runs an action through the extension's own command route (see `bindingDispatch`). */
  dispatch?: (call: DispatchCall) => unknown;
  prompt?: (question: unknown, call: DispatchCall) => unknown;
  notice?: (message: unknown, call: DispatchCall) => void;
  /** The generic open callback: authorizes `target`, then navigates to it; throws (or rejects) to refuse. */
  open?: (target: ClientOpenTargetV1, where: { extensionId: string; slot: string }) => unknown;
  onError?: (error: unknown, where: { extensionId: string; slot: string }) => void;
  onChange?: (where: { extensionId: string; slot: string }) => void;
}

export interface ClientEntryHost {
  /** Evaluates `contribute` when the observation changed; answers whether it did. */
  observe(extensionId: string, slot: string, observation: ClientObservation): boolean;
  /** Drops every entry's state of `slot` (detaching it when selected); its rows no longer count toward the 200. */
  forget(slot: string): void;
  contribution(extensionId: string, slot: string): Readonly<ClientContributionV1> | null;
  view(extensionId: string, slot: string): ClientView<unknown> | null;
  error(extensionId: string, slot: string): unknown;
  /** The newest errors reported (at most 64), oldest first; `onError` hears every one. */
  readonly errors: ReadonlyArray<{ extensionId: string; slot: string; error: unknown }>;
  /** Refuses locally (no request) when offline or stale. */
  act(extensionId: string, slot: string, action: ClientActionV1): Promise<unknown>;
  cancelWaiting(extensionId: string, slot: string): Promise<unknown>;
  /** Opens a target of the slot's current rows through `open`: `stale_target` (locally) when it is not among them, `open_refused` when `open` refuses. */
  open(extensionId: string, slot: string, target: ClientOpenTargetV1): Promise<unknown>;
  select(slot: string): void;
  detach(): void;
  close(): void;
}

export declare function createClientEntryHost(options: ClientEntryHostOptions): ClientEntryHost;

/** A dispatch over `bindSessionExtension` bindings: `binding.command(name, input)`. */
export declare function bindingDispatch(
  bindings: (extensionId: string, slot: string) => { command(name: string, input: unknown): Promise<unknown> } | undefined | null,
): (call: DispatchCall) => Promise<unknown>;

export interface Placement<Cell> {
  start: Cell[];
  after: Map<number, Cell[]>;
  changes: Cell[];
  hidden: Cell[];
}

/** Where each cell goes among loaded rows (`sequence`: committed Session position); `first`: the rows begin at the first entry. */
export declare function placeCells<Cell extends ClientCellV1>(loaded: { rows: ReadonlyArray<{ sequence: number; commandId?: string | null }>; first?: boolean }, cells: readonly Cell[]): Placement<Cell>;
