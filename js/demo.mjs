// The demo Worker (wrangler.toml's `main`): one Agent Durable Object per
// `agentId`, its session routes behind a bearer token.
import { Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import { drainBody } from "./app.mjs";
import { bearerTokenAuth, jsonError as json } from "./bearer.mjs";
import { ShiitakeDO as Base, shiitakeApp, sqliteWorkspace } from "./index.mjs";
import { goal } from "../examples/extensions/goal.mjs";
import { links } from "../examples/extensions/links.mjs";
// The chat page (js/chat/), bundled by scripts/chat-page.mjs (scripts/build.sh).
import * as chatPage from "../build/chat/assets.mjs";

// `execute` guests run through it: released when each call returns.
export { ShiitakeSandbox } from "./index.mjs";

// The demo notebook's own bounds: characters of a note, notes kept, notes
// listed; the longest `timer.wait` and how often it reports its progress.
const NOTE_CHARS_MAX = 4096;
const NOTES_MAX = 1000;
const NOTES_LISTED_MAX = 100;
const WAIT_MS_MAX = 10_000;
const WAIT_REPORT_MS = 250;

// The demo Agent's tools: files in the object's own SQLite (read, write,
// list, stat, search, replace, apply_patch), and a small notebook in its own
// table, so the model's `execute` door has something to reach
// (`notes.add_note`, `notes.list_notes`, `notes.clock`), and a timer whose
// live progress the chat page and the terminal client show (`timer.wait`).
export class ShiitakeDO extends Base {
  #notes() {
    const sql = this.ctx.storage.sql;
    sql.exec("CREATE TABLE IF NOT EXISTS demo_notes (seq INTEGER PRIMARY KEY, text TEXT NOT NULL)");
    return sql;
  }

  // The fleet over the demo's own namespace: every demo Agent can create,
  // list, archive and delegate to another (`agents.create`, `agents.send`,
  // `agents.wait`, ...) with no host code.
  fleet() {
    return { namespace: this.env.SHIITAKE, directory: true, archive: true, models: true };
  }

  // SHIITAKE_DEMO_GOAL=1 (`npm start` sets it): the `goal` example
  // extension, whose client entry the chat page and the terminal client
  // render (a chip, a pinned row with its end actions, the set and ending
  // lines in the transcript); SHIITAKE_DEMO_LINKS=1 (`npm start` too): the
  // `links` example (pinned rows that open related Sessions).
  extensions() {
    const roster = [...(this.env.SHIITAKE_DEMO_GOAL === "1" ? [goal] : []), ...(this.env.SHIITAKE_DEMO_LINKS === "1" ? [links] : [])];
    return roster.length > 0 ? roster : undefined;
  }

  tools() {
    return {
      files: { port: sqliteWorkspace() },
      // The chat page's own commands (js/chat/app.mjs: set_theme,
      // show_notice, page_state) through the browser bridge, as the module
      // `ui` of each run of a Session the page has open.
      ui: { id: "chat" },
      // SHIITAKE_MCP_SERVERS (a secret): [{name, url, headers?}], each the
      // module mcp.<name>.
      mcpServers: this.env.SHIITAKE_MCP_SERVERS ? JSON.parse(this.env.SHIITAKE_MCP_SERVERS) : [],
      modules: [
        {
          id: "notes",
          operations: [
            {
              name: "add-note",
              description: "Adds a note to this Agent's notebook; returns how many notes there are.",
              inputSchema: { type: "object", properties: { text: { type: "string", maxLength: NOTE_CHARS_MAX } }, required: ["text"] },
              access: "write",
              run({ text }) {
                const sql = this.#notes();
                if (sql.exec("SELECT count(*) AS n FROM demo_notes").one().n >= NOTES_MAX) throw new Error(`the notebook holds at most ${NOTES_MAX} notes`);
                sql.exec("INSERT INTO demo_notes (text) VALUES (?)", text);
                return { count: sql.exec("SELECT count(*) AS n FROM demo_notes").one().n };
              },
            },
            {
              name: "list-notes",
              description: `Lists the notebook's notes, oldest first (at most ${NOTES_LISTED_MAX}).`,
              inputSchema: { type: "object", properties: {} },
              access: "read",
              replaySafe: true,
              run() {
                return this.#notes().exec(`SELECT text FROM demo_notes ORDER BY seq LIMIT ${NOTES_LISTED_MAX}`).toArray().map((r) => r.text);
              },
            },
            {
              name: "clock",
              description: "The current time (ISO 8601, UTC).",
              inputSchema: { type: "object", properties: {} },
              access: "read",
              replaySafe: true,
              run() {
                return new Date().toISOString();
              },
            },
          ],
        },
        {
          id: "timer",
          operations: [
            {
              name: "wait",
              description: `Waits \`ms\` milliseconds (at most ${WAIT_MS_MAX}), reporting how long it has waited as it goes.`,
              inputSchema: { type: "object", properties: { ms: { type: "integer", minimum: 0, maximum: WAIT_MS_MAX } }, required: ["ms"] },
              access: "read",
              replaySafe: true,
              async run({ ms }, ctx) {
                const started = Date.now();
                for (let waited = 0; waited < ms && !ctx.signal.aborted; waited = Date.now() - started) {
                  await new Promise((resolve) => setTimeout(resolve, Math.min(WAIT_REPORT_MS, ms - waited)));
                  ctx.progress({ waitedMs: Math.min(Date.now() - started, ms), ofMs: ms });
                }
                return { waitedMs: Date.now() - started };
              },
            },
          ],
        },
      ],
    };
  }
}

const app = new Hono();

// The chat page: public (it holds no secret; it asks for the token and sends
// it on each API request), same-origin scripts and styles only.
const PAGE_HEADERS = {
  "cache-control": "no-cache",
  "x-content-type-options": "nosniff",
  "content-security-policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  "referrer-policy": "no-referrer",
};
const asset = (body, type) => (c) => c.body(body, 200, { ...PAGE_HEADERS, "content-type": type });
app.get("/", asset(chatPage.html, "text/html; charset=utf-8"));
app.get("/chat/chat.js", asset(chatPage.js, "text/javascript; charset=utf-8"));
app.get("/chat/chat.css", asset(chatPage.css, "text/css; charset=utf-8"));
app.get("/api", (c) =>
  c.json({
    name: "shiitake-demo",
    routes: "/agents/:agentId/sessions... (docs/http.md), with Authorization: Bearer <SHIITAKE_TOKEN>",
  }),
);

app.use("/agents/*", ...bearerTokenAuth("SHIITAKE_TOKEN"));
app.route("/agents/:agentId", shiitakeApp({ binding: "SHIITAKE" }));

app.notFound(async (c) => {
  await drainBody(c.req.raw);
  return json(404, "not_found", "no such route");
});
app.onError((error) => {
  if (error instanceof HTTPException) return error.getResponse();
  console.error("shiitake-demo: unhandled error", error);
  return json(500, "internal_error", "internal error");
});

export default app;
