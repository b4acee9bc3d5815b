import type { Context, Hono } from "hono";

/** A JSON value: what `shiitakeMeta` may hold. */
export type ShiitakeMeta =
  | null
  | boolean
  | number
  | string
  | ShiitakeMeta[]
  | { [key: string]: ShiitakeMeta };

/**
 * Hono env variables the routes read. The host's auth middleware sets
 * `c.set("shiitakeMeta", meta)`; the routes send it to the Agent as the
 * `x-shiitake-meta` header (JSON, non-ASCII escaped as `\uXXXX`; at most
 * 4,096 bytes, else the Agent answers 400 `invalid_meta`). A client-sent
 * header of that name is always dropped.
 */
export type ShiitakeHttpEnv = {
  Variables: {
    shiitakeMeta?: ShiitakeMeta;
  };
};

/** The part of a Durable Object namespace binding the routes use. */
export interface ShiitakeNamespace {
  idFromName(name: string): unknown;
  get(id: any): { fetch(request: Request): Promise<Response> };
}

export interface ShiitakeAppOptions<E extends ShiitakeHttpEnv = ShiitakeHttpEnv> {
  /** The env binding name of the `ShiitakeDO` namespace, or a function returning it. */
  binding: string | ((c: Context<E>) => ShiitakeNamespace | undefined);
}

/**
 * Routes forwarding the session routes of the HTTP contract (docs/http.md),
 * `POST /acp` (ACP over HTTP, docs/acp.md) and `/mcp` (the Agent as an MCP
 * server, docs/mcp-server.md) to the Agent's Durable Object
 * `ns.get(ns.idFromName(agentId))`. Mount with
 * `app.route("/agents/:agentId", shiitakeApp({ binding: "SHIITAKE" }))`
 * behind your auth middleware. The `authorization` header is not forwarded.
 * Any other path under the mount answers 404 `not_found` (JSON), another
 * method on a session route 405 `method_not_allowed`; an empty or
 * over-256-byte `agentId` 400 `invalid_request`; a missing binding 503
 * `not_configured`.
 */
export function shiitakeApp<E extends ShiitakeHttpEnv = ShiitakeHttpEnv>(
  options: ShiitakeAppOptions<E>,
): Hono<E>;
