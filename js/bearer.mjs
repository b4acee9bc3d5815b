// Bearer-token auth for the demo entry, shared with the benchmark's floor
// Worker so both measure the same request path.
import { bearerAuth } from "hono/bearer-auth";
import { timingSafeEqual } from "hono/utils/buffer";

export const jsonError = (status, code, message, headers = {}) =>
  new Response(JSON.stringify({ error: { code, message } }), {
    status,
    headers: { ...headers, "content-type": "application/json" },
  });

// Every failed credential is a 401 (hono answers a malformed header with 400
// by default); bearerAuth adds the WWW-Authenticate challenge.
const unauthorized = (message) => ({ message: () => jsonError(401, "unauthorized", message) });

/** Middlewares that admit only `Authorization: Bearer <env[tokenVar]>`. */
export function bearerTokenAuth(tokenVar) {
  return [
    async (c, next) => {
      // Refuse rather than run open when the deployment forgot its token.
      if (!c.env[tokenVar]) return jsonError(503, "not_configured", `${tokenVar} is not set`);
      await next();
    },
    bearerAuth({
      verifyToken: (token, c) => timingSafeEqual(c.env[tokenVar], token),
      noAuthenticationHeader: unauthorized("an Authorization: Bearer token is required"),
      invalidAuthenticationHeader: unauthorized("the Authorization header is not a Bearer token"),
      invalidToken: unauthorized("the bearer token is wrong"),
    }),
  ];
}
