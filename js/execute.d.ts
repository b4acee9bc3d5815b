/** The Worker code `runGuest` hands the loader (a subset of the runtime's WorkerCode). */
export interface GuestWorkerCode {
  compatibilityDate: string;
  mainModule: string;
  modules: Record<string, string>;
  globalOutbound: null;
  env: Record<string, never>;
}

/** A loaded worker; `runGuest` calls `evaluate` on its default entrypoint. */
export interface GuestWorkerStub {
  getEntrypoint(): { evaluate(host: unknown): Promise<unknown>; [Symbol.dispose]?(): void };
  [Symbol.dispose]?(): void;
}

/**
 * The Worker Loader binding (`env.LOADER`, wrangler `worker_loaders`), as far
 * as `runGuest` uses it: `load` when present, else `get` with a fresh id.
 */
export type WorkerLoaderBinding =
  | { load(code: GuestWorkerCode): GuestWorkerStub }
  | { get(id: string, getCode: () => Promise<GuestWorkerCode>): GuestWorkerStub };

export interface RunGuestOptions {
  /** Model-written JavaScript (a markdown fence is stripped; the last expression is returned). */
  code: string;
  /**
   * Top-level names bound in the guest and in its `env` (e.g. "mcp", "notes"):
   * identifiers, not reserved words, globals, "env" or "forage".
   */
  namespaces: readonly string[];
  /**
   * Answers a tool call: `path` is the dotted call path ("notes.add",
   * "forage.search"), `argsJson` its argument as JSON text. Resolves to
   * `{"result": ...}` or `{"error": "..."}` JSON text; a rejection becomes
   * `{"error": message}`.
   */
  dispatch: (path: string, argsJson: string) => Promise<string>;
  /** Aborting resolves the run at once with `{"error": "aborted: <reason>"}`. */
  signal?: AbortSignal;
  /**
   * A stub of {@link ShiitakeSandbox} (`ctx.exports.ShiitakeSandbox`): the
   * guest is loaded there, in the call's own I/O context, and released when
   * it returns. Without it the guest is loaded with `loader` directly.
   */
  sandbox?: { evaluate(module: string, host: unknown): Promise<string> | string };
}

/**
 * The stateless entrypoint a Durable Object runs `execute` guests through.
 * Export it from the Worker's main module (`export { ShiitakeSandbox } from
 * "shiitake"`): a Durable Object keeps one I/O context for its life, and a
 * guest loaded there stays in memory until garbage collection; loaded here,
 * it is released when the call returns. It runs a guest with no network
 * and an empty env, and needs the `LOADER` binding.
 */
export declare class ShiitakeSandbox {
  evaluate(module: string, host: unknown): Promise<string>;
}

/** The largest result, in JSON bytes, a run hands back (262,144). */
export const RESULT_MAX_BYTES: number;

/**
 * Runs model-written JavaScript in a fresh Worker Loader worker (no network,
 * empty env). Resolves to `{"result": value}` or `{"error": message}` JSON
 * text; never rejects.
 */
export function runGuest(loader: WorkerLoaderBinding, options: RunGuestOptions): Promise<string>;

/**
 * The body of the async function the code runs in, or the acorn parse error
 * as `{error: "SyntaxError: ..."}`.
 */
export function normalizeCode(code: string): { body: string; error?: undefined } | { error: string; body?: undefined };
