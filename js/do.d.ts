import { DurableObject } from "cloudflare:workers";

/**
 * The Agent Durable Object: one instance per Agent, state in its SQLite
 * storage. Export it (or a subclass) from your Worker and bind it with
 * `new_sqlite_classes`.
 *
 * A Rust panic answers that request 500 `internal_error` (JSON) and restarts
 * the wasm instance; the next call rebuilds the core from SQLite. A panic in
 * `alarm()` is rethrown so the runtime retries the alarm.
 */
export class ShiitakeDO<Env = unknown> extends DurableObject<Env> {
  /**
   * Asked first for every request. Return a Response to answer it yourself,
   * or `undefined` to let the Shiitake core serve it. Override in a subclass.
   */
  hostFetch(request: Request): Promise<Response | undefined>;
  fetch(request: Request): Promise<Response>;
  alarm(): Promise<void>;
}
