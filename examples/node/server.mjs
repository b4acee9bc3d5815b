// One durable Agent on Node: its conversation lives in a SQLite file, its
// Session routes (docs/http.md) are served over node:http behind your own
// middleware. Run (after `bash scripts/build.sh`):
//
//   SHIITAKE_MODEL=openai/gpt-4o-mini OPENAI_API_KEY=sk-... \
//     node examples/node/server.mjs            # SHIITAKE_DB=./agent.db PORT=8787
//
//   curl -X POST localhost:8787/sessions -d '{"sessionId":"s"}'
//   curl -X POST localhost:8787/sessions/s/commands \
//     -d '{"type":"prompt","requestId":"r1","text":"hello"}'
//   curl 'localhost:8787/sessions/s/settlement?commandId=<commandId>&timeoutMs=30000'
//
// The model gets `execute` (its code runs in the embedded sandbox, QuickJS in
// this process) over the `clock` module, and `ui`: a page of your App
// connected with connectBrowser (`shiitake/ui/browser`) to
// localhost:8787/browser/sessions/<sessionId>/browser lends it its commands.
//
// With SHIITAKE_TOKEN set, every request needs `authorization: Bearer <it>`.
// Stop it with Ctrl-C (the lease is released); a kill -9 loses nothing
// accepted: the next start resumes the interrupted turn.
import http from "node:http";
import { Hono } from "hono";
import { nodeListener, openNodeShiitake } from "shiitake/node";

const path = process.env.SHIITAKE_DB ?? "agent.db";
const port = Number(process.env.PORT ?? 8787);
const host = process.env.HOST ?? "127.0.0.1";
const token = process.env.SHIITAKE_TOKEN;

// Model and keys come from the environment (SHIITAKE_MODEL, OPENAI_BASE_URL,
// OPENAI_API_KEY, ANTHROPIC_API_KEY, ...), the names wrangler vars use.
const shiitake = await openNodeShiitake({
  path,
  instructions: process.env.SHIITAKE_INSTRUCTIONS ?? "You are a helpful assistant.",
  tools: {
    modules: [
      {
        id: "clock",
        operations: [
          {
            name: "now",
            description: "The current time (ISO 8601, UTC).",
            inputSchema: { type: "object", properties: {}, additionalProperties: false },
            access: "read",
            replaySafe: true,
            // Offered to the model as a tool of its own too, beside `execute`.
            direct: true,
            run: () => ({ now: new Date().toISOString() }),
          },
        ],
      },
    ],
    // The browser bridge: the App a page connects lends the model `ui`.
    ui: { id: "page" },
  },
});

const app = new Hono();
app.use("*", async (c, next) => {
  if (token !== undefined && c.req.header("authorization") !== `Bearer ${token}`) {
    return c.json({ error: { code: "unauthorized", message: "a bearer token is required" } }, 401);
  }
  // Host metadata the Agent records with each command (optional).
  c.set("shiitakeMeta", { via: "examples/node" });
  await next();
});
app.route("/", shiitake.app);

const server = http.createServer(nodeListener(app.fetch));
server.listen(port, host, () => {
  const { port: bound } = server.address();
  console.log(`shiitake: ${shiitake.path} as Agent ${shiitake.agentId}, listening on http://${host}:${bound}`);
});

const stop = async () => {
  server.close();
  server.closeAllConnections();
  await shiitake.close();
  process.exit(0);
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
