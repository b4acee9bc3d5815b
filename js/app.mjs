// Hono routes that forward the session routes of docs/http.md to the Agent's
// Durable Object. Mount with:
//   app.route("/agents/:agentId", shiitakeApp({ binding: "SHIITAKE" }))
// behind the host's own auth middleware, which may set the Hono variable
// `shiitakeMeta` (a JSON value) to pass host metadata to the Agent.
import { Hono } from "hono";
import { BODY_BYTES_MAX } from "./limits.mjs";
import { META_HEADER, metaHeaderValue } from "./meta.mjs";

// Longest `agentId` (UTF-8 bytes) the routes forward. The shim's own bound:
// the id only names the Durable Object (`idFromName`), the core never sees it.
const ROUTE_AGENT_ID_BYTES_MAX = 256;

// DO-relative route -> methods the DO serves there. Only these reach the DO:
// host-only operations are never forwarded, whatever a client asks.
const ROUTES = [
  ["/sessions", ["GET", "POST"]],
  ["/inbox", ["GET"]],
  ["/usage", ["GET"]],
  // Budgets are read here; setting one is host-only (RPC, owner API).
  ["/budget", ["GET"]],
  ["/sessions/:sessionId", ["GET", "DELETE"]],
  ["/sessions/:sessionId/commands", ["POST"]],
  ["/sessions/:sessionId/withdraw", ["POST"]],
  ["/sessions/:sessionId/watch", ["GET"]],
  ["/sessions/:sessionId/settlement", ["GET"]],
  ["/sessions/:sessionId/pending/latest", ["GET"]],
  ["/sessions/:sessionId/branches", ["GET"]],
  ["/sessions/:sessionId/model", ["GET", "PUT", "DELETE"]],
  ["/sessions/:sessionId/budget", ["GET"]],
  ["/sessions/:sessionId/extensions/:extensionId/commands/:command", ["POST"]],
  ["/extensions", ["GET"]],
  ["/extensions/:extensionId", ["GET"]],
  ["/extensions/:extensionId/commands/:command", ["POST"]],
  // The browser bridge (tools().ui): the App in the Session's browser.
  ["/browser/sessions/:sessionId/browser/events", ["GET"]],
  ["/browser/sessions/:sessionId/browser/claims", ["POST"]],
  ["/browser/sessions/:sessionId/browser/results", ["POST"]],
  // ACP (docs/acp.md): one JSON-RPC message per request.
  ["/acp", ["POST"]],
  // The Agent as an MCP server (docs/mcp-server.md): Streamable HTTP, one
  // JSON-RPC message per POST; GET and DELETE reach it for their 405s.
  ["/mcp", ["POST", "GET", "DELETE"]],
];

function errorResponse(c, status, code, message, headers) {
  return c.json({ error: { code, message } }, status, headers);
}

// A refusal before the body is read (an unknown route or method) answers
// after reading and dropping at most 1 MiB of it: answering mid-upload
// makes the runtime reset the connection, and the client would see that
// instead of the 4xx. The largest body a session route reads.
const DRAIN_BYTES_MAX = BODY_BYTES_MAX;

/** Reads and drops the request's unread body, at most `DRAIN_BYTES_MAX` bytes of it (then cancels it). */
export async function drainBody(request) {
  if (request.body === null || request.bodyUsed) return;
  try {
    const reader = request.body.getReader();
    for (let read = 0; read <= DRAIN_BYTES_MAX; ) {
      const { done, value } = await reader.read();
      if (done) return;
      read += value.byteLength;
    }
    await reader.cancel();
  } catch {
    // The sender went away: nothing to answer it.
  }
}

/**
 * Adds the session routes to `app`, each forwarded to the stub that
 * `stubOf(c)` answers (an object with `fetch(request)`), or answered by the
 * Response it returns instead. `segmentsOf` gives the DO-relative path.
 * Shared by `shiitakeApp` (a Durable Object binding) and `shiitake/node`
 * (the in-process object).
 */
export function mountSessionRoutes(app, stubOf) {
  const forward = (segments) => async (c) => {
    const stub = await stubOf(c);
    if (stub instanceof Response) return stub;

    // The DO-relative path is the last `segments` segments of the raw path,
    // so the session id reaches the DO byte for byte (still percent-encoded)
    // whatever the mount prefix is.
    const url = new URL(c.req.url);
    const parts = url.pathname.replace(/(.)\/$/, "$1").split("/"); // a non-strict parent router allows "/x/"
    const target = new URL(`/${parts.slice(-segments).join("/")}${url.search}`, url.origin);

    const raw = c.req.raw;
    const headers = new Headers(raw.headers);
    headers.delete(META_HEADER);
    headers.delete("authorization");
    const meta = c.get("shiitakeMeta");
    if (meta !== undefined) headers.set(META_HEADER, metaHeaderValue(meta));

    let body = null;
    if (raw.method !== "GET" && raw.method !== "HEAD") {
      // Passed through as a stream: the Durable Object counts it as it
      // arrives and cancels it past the body bound, which stops the sender.
      // Middleware that parsed the body (c.req.json()) consumed the stream
      // and Hono holds a copy (buffered by that middleware, not here).
      body = raw.bodyUsed ? await c.req.arrayBuffer() : raw.body;
    }
    return stub.fetch(new Request(target, { method: raw.method, headers, body, redirect: "manual", ...(body !== null ? { duplex: "half" } : {}) }));
  };

  for (const [path, methods] of ROUTES) {
    app.on(methods, path, forward(path.split("/").length - 1));
    app.all(path, async (c) => {
      await drainBody(c.req.raw);
      return errorResponse(c, 405, "method_not_allowed", `${c.req.method} is not allowed here`, {
        allow: methods.join(", "),
      });
    });
  }
  // A mounted app's notFound handler is never consulted by the parent, so a
  // catch-all route gives the mount its JSON 404.
  app.all("*", async (c) => {
    await drainBody(c.req.raw);
    return errorResponse(c, 404, "not_found", "no such route");
  });
  return app;
}

/**
 * @param {{ binding: string | ((c: import("hono").Context) => any) }} options
 */
export function shiitakeApp({ binding } = {}) {
  if (typeof binding !== "string" && typeof binding !== "function") {
    throw new TypeError("shiitakeApp: `binding` must be an env binding name or a function (c) => namespace");
  }
  const namespaceOf = typeof binding === "function" ? binding : (c) => c.env?.[binding];
  return mountSessionRoutes(new Hono(), (c) => {
    const agentId = c.req.param("agentId");
    if (typeof agentId !== "string" || agentId === "") {
      return errorResponse(c, 400, "invalid_request", "the agentId path parameter is missing");
    }
    // A UTF-16 unit is at most 3 UTF-8 bytes: short ids need no encoding.
    if (agentId.length * 3 > ROUTE_AGENT_ID_BYTES_MAX && new TextEncoder().encode(agentId).length > ROUTE_AGENT_ID_BYTES_MAX) {
      return errorResponse(c, 400, "invalid_request", `agentId is longer than ${ROUTE_AGENT_ID_BYTES_MAX} bytes`);
    }
    const ns = namespaceOf(c);
    if (!ns || typeof ns.idFromName !== "function" || typeof ns.get !== "function") {
      console.error("shiitakeApp: no Durable Object namespace for binding", binding);
      return errorResponse(c, 503, "not_configured", "the Shiitake Durable Object binding is missing");
    }
    return ns.get(ns.idFromName(agentId));
  });
}
