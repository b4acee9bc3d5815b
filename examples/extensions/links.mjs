// The `links` extension: a Session's pinned links to related Sessions (the
// one a piece of work continued in, another Agent's Session it was handed
// to). Its client entry (links.client.mjs) shows each as a pinned row whose
// typed open target the client opens once its host authorizes it, with a
// Remove action.
//
//   import { links } from "shiitake/examples/links"   (this file)
//   class Agent extends ShiitakeDO { extensions() { return [links]; } }
//
//   POST /sessions/:id/extensions/links/commands/add     {"input": {"title": "Release notes", "sessionId": "ses_..."}}
//   POST /sessions/:id/extensions/links/commands/remove  {"input": {"id": "l1"}}
import { defineCollection, defineExtension } from "../../js/extensions.mjs";

/** Links one Session pins: a client shows each as a panel row (at most 16). */
export const LINKS_PER_SESSION_MAX = 16;

// Ids of the Session alphabet (`[A-Za-z0-9._:-]`, at most 128).
const ID = { type: "string", pattern: "^[A-Za-z0-9._:-]{1,128}$" };
const TITLE = { type: "string", minLength: 1, maxLength: 200 };

// JSON Schemas: the core validates every row and input against them.
const Link = {
  type: "object",
  additionalProperties: false,
  required: ["sessionId", "id", "title", "target"],
  properties: { sessionId: ID, id: { type: "string" }, title: TITLE, target: ID, agentId: ID },
};

export const links = defineExtension({ id: "links", version: "1.0.0" })
  .state({ links: defineCollection(Link) }) // keyed by `<Session id>/<link id>`
  .command(
    "add",
    {
      description: "Pin a link to a related Session (agentId: another Agent's) in this conversation.",
      input: { type: "object", additionalProperties: false, required: ["title", "sessionId"], properties: { title: TITLE, sessionId: ID, agentId: ID } },
    },
    (ctx, { title, sessionId, agentId }) =>
      ctx.state.update((s) => {
        const mine = s.links.values().filter((l) => l.sessionId === ctx.session.id);
        if (mine.length >= LINKS_PER_SESSION_MAX) throw new Error(`a Session pins at most ${LINKS_PER_SESSION_MAX} links`);
        const id = `l${Math.max(0, ...mine.map((l) => Number(l.id.slice(1)))) + 1}`;
        s.links.put(`${ctx.session.id}/${id}`, { sessionId: ctx.session.id, id, title, target: sessionId, ...(agentId === undefined ? {} : { agentId }) });
        return { id };
      }),
  )
  .command(
    "remove",
    {
      description: "Unpin a link of this conversation.",
      input: { type: "object", additionalProperties: false, required: ["id"], properties: { id: { type: "string" } } },
    },
    (ctx, { id }) =>
      ctx.state.update((s) => {
        const key = `${ctx.session.id}/${id}`;
        if (s.links.get(key) === undefined) throw new Error(`this conversation has no link ${id}`);
        s.links.delete(key);
        return { removed: id };
      }),
  )
  .projection({
    scope: "session",
    read: (ctx) =>
      ctx.state.read((s) => {
        // None pinned: no projection (a watch gets a frame with value null).
        const mine = s.links.values().filter((l) => l.sessionId === ctx.session.id);
        if (mine.length === 0) return undefined;
        const sorted = mine.sort((a, b) => Number(a.id.slice(1)) - Number(b.id.slice(1)));
        return { links: sorted.map(({ id, title, target, agentId }) => ({ id, title, sessionId: target, ...(agentId === undefined ? {} : { agentId }) })) };
      }),
  });
