/**
 * The browser side of the browser bridge (`tools().ui` on the host; seed
 * knapsack: `Knapsack.ui`). No wasm, no Node-only import: bundles for the
 * browser.
 */

/** One live command of the App, as `ui.discover` lists it to the model. */
export interface WhistleCommand {
  /** Unique, 1..=128 bytes. */
  name: string;
  description?: string;
  /** A JSON Schema object for the command's input. */
  inputSchema?: Record<string, unknown>;
}

/**
 * The App's command registry the model reaches: `commands()` answers the
 * live commands (at most 128; `ui.discover`), `execute(name, input)` runs one
 * (`ui.execute`) and answers its result as JSON (at most 256 KiB, 64
 * levels deep); a throw is reported to the model as the command's error.
 * `signal` aborts when the run stops waiting (its timeout, a cancel) or the
 * bridge is closed.
 */
export interface Whistle {
  commands(): WhistleCommand[] | Promise<WhistleCommand[]>;
  execute(name: string, input: Record<string, unknown>, options: { signal: AbortSignal }): unknown | Promise<unknown>;
}

export interface BrowserBridge {
  /**
   * Resolves with why the bridge stopped: `close()`, the host answering 410
   * (it closed the bridge: `ShiitakeDO#closeUi`) or 404 (no such Session).
   */
  readonly closed: Promise<string>;
  /** Stops reading the events, aborts the commands running, ends the bridge. */
  close(): void;
}

/**
 * Connects the App to one Session: reads its event stream, claims each
 * request before running it on `whistle`, posts the result with its claim,
 * and reconnects a dropped stream after 0.5 s, doubling up to 30 s.
 */
export function connectBrowser(options: {
  /** The Session's bridge: `<mount>/agents/<agentId>/browser/sessions/<sessionId>/browser` (relative to the page when relative). */
  baseUrl: string | URL;
  whistle: Whistle;
  /** The transport carrying the host's credentials (default: the global fetch). */
  fetch?: typeof fetch;
  /** Told about each failure the bridge recovers from (a dropped stream, a refused result). */
  onError?(error: unknown): void;
}): BrowserBridge;
