// The demo Worker (wrangler.toml's `main`): one Agent Durable Object per
// `agentId`, its session routes behind a bearer token.
import { Hono } from "hono";
import { bearerAuth } from "hono/bearer-auth";
import { HTTPException } from "hono/http-exception";
import { timingSafeEqual } from "hono/utils/buffer";
import { ShiitakeDO, shiitakeApp } from "./index.mjs";

export { ShiitakeDO };

const json = (status, code, message, headers = {}) =>
  new Response(JSON.stringify({ error: { code, message } }), {
    status,
    headers: { ...headers, "content-type": "application/json" },
  });

// Every failed credential is a 401 (hono answers a malformed header with 400
// by default); bearerAuth adds the WWW-Authenticate challenge.
const unauthorized = (message) => ({ message: () => json(401, "unauthorized", message) });

const app = new Hono();

app.get("/", (c) =>
  c.json({
    name: "shiitake-demo",
    routes: "/agents/:agentId/sessions... (docs/http.md), with Authorization: Bearer <SHIITAKE_TOKEN>",
  }),
);

app.use("/agents/*", async (c, next) => {
  // Refuse rather than run open when the deployment forgot its token.
  if (!c.env.SHIITAKE_TOKEN) return json(503, "not_configured", "SHIITAKE_TOKEN is not set");
  await next();
});
app.use(
  "/agents/*",
  bearerAuth({
    verifyToken: (token, c) => timingSafeEqual(c.env.SHIITAKE_TOKEN, token),
    noAuthenticationHeader: unauthorized("an Authorization: Bearer token is required"),
    invalidAuthenticationHeader: unauthorized("the Authorization header is not a Bearer token"),
    invalidToken: unauthorized("the bearer token is wrong"),
  }),
);
app.route("/agents/:agentId", shiitakeApp({ binding: "SHIITAKE" }));

app.notFound(() => json(404, "not_found", "no such route"));
app.onError((error) => {
  if (error instanceof HTTPException) return error.getResponse();
  console.error("shiitake-demo: unhandled error", error);
  return json(500, "internal_error", "internal error");
});

export default app;
