// The fleet for hosts (`shiitake/fleet`, js/fleet.mjs): another Agent's
// Sessions and delegated work under a fleet grant, checked by the target at
// each call. See docs/fleet.md.
import type { CommandSettlement, Delivery, SessionList, SessionRead, Terminal, TokenUsage } from "./client.js";

/** An action a fleet grant may allow: the model's `agents` operations and the host API's. */
export type FleetAction =
  | "send"
  | "recall"
  | "wait"
  | "read"
  | "create"
  | "list"
  | "archive"
  | "unarchive"
  | "setModel"
  | "models"
  | "sessions.list"
  | "sessions.create"
  | "sessions.read"
  | "sessions.delete"
  | "start"
  | "delegate";

/**
 * A fleet grant (seed: Agent scope, actions, expiry, provenance), host
 * data checked at each call: an expired grant is refused (403
 * `grant_expired`) by the call that finds it expired, an action or Agent
 * outside it 403 `grant_refused`, a malformed one 400 `invalid_request`.
 * At most 256 Agent ids, 64 KiB of JSON, a provenance of 4 KiB.
 */
export interface FleetGrant {
  /** The Agent ids it reaches, or `"*"` for every Agent of the fleet. */
  agents: string[] | "*";
  actions: FleetAction[];
  /** Ms since the epoch: calls at or after it are refused. */
  expiresAt: number;
  /** Opaque host data naming who granted it: echoed in admission answers, never interpreted. */
  provenance?: unknown;
}

/** The Agent's Durable Object stub (or any object with its `fleetSessions` RPC). */
export interface FleetAgent {
  fleetSessions(requestJson: string): Promise<string>;
}

/** `open(agentId)`: the Agent's stub, e.g. `(id) => env.SHIITAKE.get(env.SHIITAKE.idFromName(id))`. */
export type FleetOpen = (agentId: string) => FleetAgent | Promise<FleetAgent>;

/** A refusal: the target's code (`grant_refused`, `session_not_found`, ...) and HTTP status. */
export declare class FleetError extends Error {
  readonly code: string;
  readonly status: number;
}

/** Host metadata applied to the call's routes (its identity), as `x-shiitake-meta` carries it. */
export interface FleetMeta {
  meta?: unknown;
}

/** A prompt for another Agent's Session, admitted once under its requestId. */
export interface FleetMessage extends FleetMeta {
  requestId: string;
  /** 1 to 65,536 UTF-8 bytes. */
  text: string;
  delivery?: Delivery;
}

/** The admission receipt; `sessionId` is the Session it was admitted in. */
export interface FleetReceipt {
  status: "accepted";
  commandId: string;
  requestId: string;
  sessionId: string;
  provenance?: unknown;
}

export interface FleetSessions {
  /** `limit` 1 to 200 (default 50). */
  list(grant: FleetGrant, agentId: string, options?: { cursor?: string; limit?: number } & FleetMeta): Promise<SessionList>;
  create(grant: FleetGrant, agentId: string, options?: { sessionId?: string } & FleetMeta): Promise<{ sessionId: string }>;
  /** `limit` 1 to 200 messages (default 50); `cursor`: a page's cursor, for older messages. */
  read(grant: FleetGrant, agentId: string, sessionId: string, options?: { cursor?: string; limit?: number } & FleetMeta): Promise<SessionRead>;
  delete(grant: FleetGrant, agentId: string, sessionId: string, options?: FleetMeta): Promise<{ sessionId: string; deleted: true }>;
  /** Admits replayable work; an omitted Session (`undefined`) is created from the request identity, so a retry finds it. */
  send(grant: FleetGrant, agentId: string, sessionId: string | undefined, message: FleetMessage): Promise<FleetReceipt>;
}

/** Another Agent's Sessions under fleet grants. */
export declare function createFleetSessions(open: FleetOpen): FleetSessions;

/** One delegated task: the target Agent, its Session (omitted: created from the request identity) and the prompt. */
export interface FleetTask extends FleetMessage {
  agentId: string;
  sessionId?: string;
}

/** `delegate`'s answer: pending until the exact command settles. */
export type FleetDelegation =
  | { status: "pending"; commandId: string; sessionId: string; provenance?: unknown }
  | {
      status: "settled";
      commandId: string;
      sessionId: string;
      terminal: Terminal;
      /** A completed command's final text (at most 16,384 characters; `truncated` when cut). */
      text?: string;
      truncated?: boolean;
      /** A failed or interrupted command's bounded diagnostic. */
      diagnostic?: string;
      usage: TokenUsage | null;
      toolCallCount: number;
      provenance?: unknown;
    };

export interface FleetDelegationHost {
  /** Admits the task (action `start`): the admission receipt. */
  start(grant: FleetGrant, task: FleetTask): Promise<FleetReceipt>;
  /** Admits the task once (action `delegate`), then reads its settlement; poll with the same task. Closing a client never cancels work. */
  delegate(grant: FleetGrant, task: FleetTask): Promise<FleetDelegation>;
  /**
   * Host-only (no grant): command `commandId`'s exact settlement read from
   * its work rows (the final text uncut, independent of transcript
   * pagination and branch selection), `undefined` while it is not settled
   * (the Agent's `ShiitakeDO#readSettlement`).
   */
  readSettlement(agentId: string, sessionId: string, commandId: string): Promise<CommandSettlement | undefined>;
}

/** The Agent's stub as delegation reaches it: its fleet RPC and its host-only `readSettlement`. */
export interface FleetDelegationAgent extends FleetAgent {
  readSettlement(sessionId: string, commandId: string): Promise<CommandSettlement | undefined>;
}

/** `open(agentId)` for delegation: a Durable Object stub of a ShiitakeDO is one. */
export type FleetDelegationOpen = (agentId: string) => FleetDelegationAgent | Promise<FleetDelegationAgent>;

/** Delegated work for hosts. */
export declare function createFleetDelegation(options: { open: FleetDelegationOpen }): FleetDelegationHost;
