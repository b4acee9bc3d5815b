// Worker for bench/compaction.mjs: the runtime with one direct tool,
// `read_blob`, whose result is 20 KiB of text (different each call), and
// the session routes of `/agents/:agentId/*` straight to the Agent's
// Durable Object. The context window comes from the env
// (SHIITAKE_CONTEXT_WINDOWS).
import { ShiitakeDO as Base } from "../js/do.mjs";

const BLOB_BYTES = 20 * 1024;

export class ShiitakeDO extends Base {
  #calls = 0;

  tools() {
    return {
      modules: [
        {
          id: "blob",
          operations: [
            {
              name: "read_blob",
              description: "Reads the blob: 20 KiB of text.",
              inputSchema: { type: "object" },
              access: "read",
              replaySafe: true,
              direct: true,
              run: () => {
                const head = `blob ${++this.#calls} `;
                return { text: head + "b".repeat(BLOB_BYTES - head.length) };
              },
            },
          ],
        },
      ],
    };
  }
}

export default {
  fetch(request, env) {
    const url = new URL(request.url);
    const route = url.pathname.match(/^\/agents\/([^/]+)(\/.*)$/);
    if (route === null) return new Response("not found", { status: 404 });
    url.pathname = route[2];
    return env.SHIITAKE.get(env.SHIITAKE.idFromName(route[1])).fetch(new Request(url, request));
  },
};
