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
  /**
   * Host-only (RPC, never a session route): delivers a Session's grants.
   * Versions never move back (an older one throws an Error with
   * `code: "grant_version_refused"`); the same version with other grants
   * replaces the stored ones.
   */
  deliverGrants(sessionId: string, delivery: GrantDelivery): { delivered: "stored" | "replaced" | "unchanged" };
  /** Host-only: the Session's delivered grants, or null. */
  sessionGrants(sessionId: string): GrantDelivery | null;
}

/** What a grant allows on one module (keyed by module id; `files` for Files). `write` includes `read`. */
export type GrantLevel = "none" | "read" | "write";

export interface GrantDelivery {
  /** Never moves back. */
  version: number;
  grants: Record<string, GrantLevel>;
}

/** Delivers grants into the object's storage while the Shiitake runtime is cold. */
export function deliverSessionGrantsToStorage(
  state: DurableObjectState,
  sessionId: string,
  delivery: GrantDelivery,
): { delivered: "stored" | "replaced" | "unchanged" };
