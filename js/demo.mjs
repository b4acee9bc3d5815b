// The demo Worker (wrangler.toml's `main`): one Agent Durable Object per
// `agentId`, its session routes behind a bearer token.
import { Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import { bearerTokenAuth, jsonError as json } from "./bearer.mjs";
import { ShiitakeDO, shiitakeApp } from "./index.mjs";

export { ShiitakeDO };

const app = new Hono();

app.get("/", (c) =>
  c.json({
    name: "shiitake-demo",
    routes: "/agents/:agentId/sessions... (docs/http.md), with Authorization: Bearer <SHIITAKE_TOKEN>",
  }),
);

app.use("/agents/*", ...bearerTokenAuth("SHIITAKE_TOKEN"));
app.route("/agents/:agentId", shiitakeApp({ binding: "SHIITAKE" }));

app.notFound(() => json(404, "not_found", "no such route"));
app.onError((error) => {
  if (error instanceof HTTPException) return error.getResponse();
  console.error("shiitake-demo: unhandled error", error);
  return json(500, "internal_error", "internal error");
});

export default app;
