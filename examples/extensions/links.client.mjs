// The `links` extension's client entry (shiitake/client-entry): each pinned
// link is a panel row with a typed Session open target (the client's host
// authorizes it before opening it) and a Remove action (the extension's own
// `remove` command).
//
//   import { linksClient } from "shiitake/examples/links.client"   (this file)
//   const host = createClientEntryHost({ entries: [linksClient], dispatch, open });
import { defineClientEntry } from "../../js/client-entry.mjs";

const isLink = (l) =>
  l !== null && typeof l === "object" && typeof l.id === "string" && typeof l.title === "string" && typeof l.sessionId === "string" && (l.agentId === undefined || typeof l.agentId === "string");

/** The links projection as a Standard Schema (an app would use zod, valibot, ...). */
const Links = {
  "~standard": {
    version: 1,
    vendor: "shiitake-example",
    validate: (v) => (v !== null && typeof v === "object" && Array.isArray(v.links) && v.links.every(isLink) ? { value: v } : { issues: [{ message: "not a links projection" }] }),
  },
};

export const linksContract = { id: "links", projection: { schema: Links } };

export const linksClient = defineClientEntry(linksContract, {
  contribute(view) {
    const list = view.status === "running" ? (view.value?.links ?? []) : [];
    const remove = view.commands.includes("remove");
    return {
      chips: [],
      panel: list.map((l) => ({
        id: l.id,
        title: l.title,
        detail: l.agentId === undefined ? l.sessionId : `${l.agentId}/${l.sessionId}`,
        open: { kind: "session", sessionId: l.sessionId, ...(l.agentId === undefined ? {} : { agentId: l.agentId }) },
        ...(remove ? { actions: [{ id: "remove", label: "Remove", input: { id: l.id } }] } : {}),
      })),
      timeline: { cells: [], omitted: 0 },
      waiting: null,
    };
  },
});
