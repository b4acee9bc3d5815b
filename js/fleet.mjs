// The fleet for hosts (seed: "Agent fleet"): another Agent's Sessions and
// delegated work, reached through the host's own open adapter and checked
// under a fleet grant at each call. `open(agentId)` answers the Agent's
// Durable Object stub (e.g. `(id) => env.SHIITAKE.get(env.SHIITAKE.idFromName(id))`)
// or any object with its `fleetSessions` RPC. The target's runtime checks
// the grant (Agent scope, action, expiry) against its own id and clock, and
// serves each operation as the HTTP route that does the same: bounds,
// refusals and requestId replays are the HTTP contract's. Nothing here
// decides a grant or bounds a page; a refusal throws a FleetError.
import { FLEET_BODY_BYTES_MAX } from "./limits.mjs";

/** A refusal: the target's `{code, status, message}`. */
export class FleetError extends Error {
  constructor(code, status, message) {
    super(`${code}: ${message}`);
    this.name = "FleetError";
    this.code = code;
    this.status = status;
  }
}

// One request to Agent `agentId`'s `fleetSessions`: its value, or a throw.
async function call(open, grant, agentId, op, args, meta) {
  if (typeof agentId !== "string" || agentId === "") throw new FleetError("invalid_request", 400, "agentId: a non-empty string");
  const request = JSON.stringify({ grant, op, args, ...(meta !== undefined ? { meta } : {}) });
  if (request.length > FLEET_BODY_BYTES_MAX) throw new FleetError("payload_too_large", 413, `the request is over ${FLEET_BODY_BYTES_MAX} bytes`);
  const agent = await open(agentId);
  if (typeof agent?.fleetSessions !== "function") throw new TypeError(`open(${JSON.stringify(agentId)}) must answer the Agent's stub (with fleetSessions)`);
  const answer = await agent.fleetSessions(request);
  if (typeof answer !== "string") throw new FleetError("agent_unreachable", 502, "the Agent answered something other than JSON text (is it a ShiitakeDO?)");
  if (answer.length > FLEET_BODY_BYTES_MAX) throw new FleetError("agent_unreachable", 502, `the Agent's answer is over ${FLEET_BODY_BYTES_MAX} bytes`);
  const parsed = JSON.parse(answer);
  if (parsed.error !== undefined) throw new FleetError(parsed.error.code, parsed.error.status, parsed.error.message);
  return parsed.value;
}

function message(op, value) {
  if (typeof value !== "object" || value === null) throw new FleetError("invalid_request", 400, `${op}: a message object { requestId, text, delivery? }`);
  const { sessionId, requestId, text, delivery } = value;
  return { sessionId, requestId, text, delivery };
}

/**
 * Another Agent's Sessions under a fleet grant: `list`, `create`, `read`,
 * `delete`, and `send` (admits a prompt under its requestId; an omitted
 * Session is created from the request identity, so a retry finds it).
 */
export function createFleetSessions(open) {
  if (typeof open !== "function") throw new TypeError("createFleetSessions(open): open(agentId) must be a function");
  return {
    list: (grant, agentId, { cursor, limit, meta } = {}) => call(open, grant, agentId, "sessions.list", { cursor, limit }, meta),
    create: (grant, agentId, { sessionId, meta } = {}) => call(open, grant, agentId, "sessions.create", { sessionId }, meta),
    read: (grant, agentId, sessionId, { cursor, limit, meta } = {}) => call(open, grant, agentId, "sessions.read", { sessionId, cursor, limit }, meta),
    delete: (grant, agentId, sessionId, { meta } = {}) => call(open, grant, agentId, "sessions.delete", { sessionId }, meta),
    send: (grant, agentId, sessionId, msg) => call(open, grant, agentId, "send", { ...message("send", msg), sessionId: sessionId ?? undefined }, msg?.meta),
  };
}

/**
 * Delegated work for hosts: `start(grant, task)` answers the admission
 * receipt; `delegate(grant, task)` answers `{status: "pending"}` until the
 * exact command settles, then its terminal, final text, usage and tool-call
 * count. Poll `delegate` with the same task (same requestId): a retry is
 * the same admission. Closing a client never cancels work.
 * `readSettlement(agentId, sessionId, commandId)` reads the exact work rows.
 */
export function createFleetDelegation({ open } = {}) {
  if (typeof open !== "function") throw new TypeError("createFleetDelegation({open}): open(agentId) must be a function");
  const task = (op, t) => [t?.agentId, { ...message(op, t) }, t?.meta];
  return {
    start(grant, t) {
      const [agentId, args, meta] = task("start", t);
      return call(open, grant, agentId, "start", args, meta);
    },
    delegate(grant, t) {
      const [agentId, args, meta] = task("delegate", t);
      return call(open, grant, agentId, "delegate", args, meta);
    },
    // Host-only (no grant): the exact work rows of one command, the final
    // text uncut, independent of transcript pages and branches; undefined
    // while it is not settled (the Agent's own `readSettlement`).
    async readSettlement(agentId, sessionId, commandId) {
      const agent = await open(agentId);
      if (typeof agent?.readSettlement !== "function") throw new TypeError(`open(${JSON.stringify(agentId)}) must answer the Agent's stub (with readSettlement)`);
      return agent.readSettlement(sessionId, commandId);
    },
  };
}
