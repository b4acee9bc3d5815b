// The hosts of the committed fixture stores (tests/fixtures/stores/v<N>/):
// scripts/make-fixtures.mjs writes the stores with them at the release
// before a schema change, and tests/e2e/upgrade.test.mjs opens them with
// every later build. Both import this module, so the Worker bindings, the
// Node host's tools and extension roster (their revisions are derived from
// the definitions: change one and the store sees a new revision) and the
// tags the scripted model server routes by stay the same on both sides.
//
// Two stores:
// - "miniflare": the demo Worker (build/demo/index.mjs, `SHIITAKE_DEMO_GOAL=1`:
//   the `goal` example extension, the fleet with its directory, Files in
//   the Agent's SQLite, the notebook) persisted by Miniflare
//   (`durableObjectsPersist`): one SQLite file per Durable Object under
//   `-ShiitakeDO/` (the unnamed Worker's class `ShiitakeDO`; the file name is
//   the object id, derived from the Agent's name) and `metadata.sqlite`,
//   where workerd keeps the alarms.
// - "node": one Agent in a node:sqlite file (js/node.mjs) with a direct tool,
//   the `reminder` example (state, timers), `flagger` (attention, staged
//   for the host's delivery lane) and `audit` (a settled hook that stops
//   the extension while the generator runs, so its settled-work log fills).
import { readFileSync } from "node:fs";
import { Hono } from "hono";
import { reminder } from "../../examples/extensions/reminder.mjs";
import { defineCollection, defineExtension } from "../../js/extensions.mjs";

/** The schema version this checkout's build writes, as src/store/schema.rs states it. */
export function buildSchemaVersion() {
  const source = readFileSync(new URL("../../src/store/schema.rs", import.meta.url), "utf8");
  const m = /pub const SCHEMA_VERSION: i64 = (\d+);/.exec(source);
  if (m === null) throw new Error("src/store/schema.rs no longer states `pub const SCHEMA_VERSION: i64 = <n>;`");
  return Number(m[1]);
}

/** Messages are read in pages of this many, so a transcript spans several as a client reads it. */
export const PAGE = 4;

/**
 * A Session's whole read through a tests/e2e/helpers.mjs `Agent`: the
 * first page's fields (pending, running, extensions, attention, ...) and
 * every message, oldest first, walking the pages.
 */
export async function readSession(agent, sessionId) {
  const pages = await agent.readAllPages(sessionId, PAGE);
  const { messages: _, cursor: __, ...first } = pages[0];
  return { ...first, messages: pages.toReversed().flatMap((p) => p.messages) };
}

/** The route of an extension command (Session scope when `sessionId` is given). */
export const extensionCommandRoute = ({ sessionId, extensionId, command }) =>
  `${sessionId === undefined ? "" : `/sessions/${encodeURIComponent(sessionId)}`}/extensions/${extensionId}/commands/${command}`;

/**
 * The Node host's app mounted at /agents/<agentId>, with the `api` of a
 * tests/e2e/helpers.mjs `Harness`, so its `Agent` client drives it as it
 * drives Miniflare.
 */
export class NodeApi {
  constructor(app, agentId) {
    this.outer = new Hono();
    this.outer.route(`/agents/${agentId}`, app);
  }
  remember() {}
  async api(method, urlPath, body) {
    const init = { method, headers: {} };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers["content-type"] = "application/json";
    }
    const res = await this.outer.fetch(new Request(`http://node.test${urlPath}`, init));
    const text = await res.text();
    let json;
    try {
      json = text === "" ? null : JSON.parse(text);
    } catch {}
    return { status: res.status, json, text, headers: res.headers };
  }
}

/** The model both stores' Agents call (`openai/<name>`), and the other one the demo offers (Bob's explicit model). */
export const MODEL = "openai/scripted-fixture";
export const BOB_MODEL = "openai/scripted-bob";

/** Bindings of the demo Worker, beside the model server's (OPENAI_BASE_URL, OPENAI_API_KEY). */
export const DEMO_BINDINGS = {
  SHIITAKE_DEMO_GOAL: "1",
  SHIITAKE_MODEL: MODEL,
  SHIITAKE_MODELS: `${MODEL},${BOB_MODEL}`,
  SHIITAKE_RETRY_BASE_MS: "50",
  SHIITAKE_RETRY_MAX_MS: "400",
};

/** The Node host's env, beside the model server's. */
export const NODE_ENV = { SHIITAKE_MODEL: MODEL, SHIITAKE_RETRY_BASE_MS: "50", SHIITAKE_RETRY_MAX_MS: "400" };
export const NODE_AGENT = "node-agent";
export const NODE_FILE = "agent.sqlite";

/** The demo's Agents. */
export const ALICE = "alice";
export const BOB = "bob";

/**
 * Tags in prompt texts: the scripted model server answers by them. `held`
 * turns were running (the model holding their call open) when the runtime
 * stopped; the upgrade test gates their resumed attempts on the same tags.
 */
export const TAGS = {
  plain: "[fx-plain]",
  files: "[fx-files]",
  notes: "[fx-notes]",
  held: "[fx-held]",
  pending: "[fx-pending]",
  create: "[fx-create]",
  list: "[fx-list]",
  setModel: "[fx-set-model]",
  mailDone: "[fx-mail-done]",
  childDone: "[fx-child-done]",
  mailHeld: "[fx-mail-held]",
  childHeld: "[fx-child-held]",
  bobOwn: "[fx-bob-own]",
  nodePlain: "[nx-plain]",
  nodeTool: "[nx-tool]",
  nodeHeld: "[nx-held]",
  nodePending: "[nx-pending]",
};

/** The file Alice's model wrote with the direct `write` tool, and its content. */
export const PLAN_PATH = "docs/plan.md";
export const PLAN_CONTENT = "# Plan\n\n1. write the fixture stores\n2. open them with every later build\n";

/** The Node host's direct tool: `lookup` of the module `probe`. */
export function probeTools() {
  return {
    modules: [
      {
        id: "probe",
        operations: [
          {
            name: "lookup",
            description: "Looks a key up in a fixed table.",
            inputSchema: { type: "object", properties: { key: { type: "string" } }, required: ["key"] },
            access: "read",
            replaySafe: true,
            direct: true,
            run({ key }) {
              return { key, value: `value of ${key}` };
            },
          },
        ],
      },
    ],
  };
}

const Flag = {
  type: "object",
  additionalProperties: false,
  required: ["id", "summary"],
  properties: { id: { type: "string" }, summary: { type: "string" } },
};

/** Sets and clears attention items of its Session (granted `attention` in the roster). */
export const flagger = defineExtension({ id: "flagger", version: "1.0.0" })
  .requests({ attention: true })
  .command("flag", { input: Flag }, (ctx, input) => {
    ctx.attention.set(ctx.session.id, { id: input.id, kind: "review", summary: input.summary, since: ctx.now });
    return { flagged: input.id };
  })
  .command("unflag", { input: { type: "object", required: ["id"], properties: { id: { type: "string" } } } }, (ctx, { id }) => {
    ctx.attention.clear(ctx.session.id, id);
    return { cleared: id };
  });

const Seen = { type: "object", additionalProperties: false, required: ["sessionId", "terminal"], properties: { sessionId: { type: "string" }, terminal: { type: "string" } } };
const Note = { type: "object", additionalProperties: false, required: ["sessionId", "text"], properties: { sessionId: { type: "string" }, text: { type: "string" } } };

/**
 * Records every settlement (keyed by commandId) and notes. `failing`: its
 * settled hook throws, which stops the extension; the settlements it then
 * misses go to the settled-work log and are replayed once the host resumes
 * it. Not part of the revision (a callback's behaviour), so the generator's
 * failing `audit` and the test's working one are the same revision.
 */
export function audit({ failing }) {
  return defineExtension({ id: "audit", version: "1.0.0" })
    .state({ seen: defineCollection(Seen), notes: defineCollection(Note) })
    .command("note", { input: { type: "object", additionalProperties: false, required: ["text"], properties: { text: { type: "string" } } } }, (ctx, { text }) =>
      ctx.state.update((s) => {
        s.notes.put(`${ctx.session.id}:${s.notes.size}`, { sessionId: ctx.session.id, text });
        return { notes: s.notes.size };
      }),
    )
    .onSettled((ctx, event) => {
      if (failing) throw new Error("audit: the fixture generator stops this extension");
      ctx.state.update((s) => s.seen.put(event.commandId, { sessionId: event.sessionId, terminal: event.terminal }));
    })
    .projection({
      scope: "session",
      read: (ctx) =>
        ctx.state.read((s) => ({
          seen: s.seen
            .entries()
            .filter(([, v]) => v.sessionId === ctx.session.id)
            .map(([k, v]) => `${k}:${v.terminal}`),
          notes: s.notes.values().filter((n) => n.sessionId === ctx.session.id).map((n) => n.text),
        })),
    });
}

/** The Node host's roster. */
export function nodeExtensions({ failing }) {
  return [reminder, { extension: flagger, grants: ["attention"] }, audit({ failing })];
}
