// The loopback model server of tests/support/model-server.mjs on its own
// thread, for benchmarks: a real provider runs elsewhere, so the bench's
// client must not wait behind the model server's work on one event loop
// (a turn that starts as its admission is answered sends its model request
// at that moment; in-process, the receipt queued behind that request's
// parsing and streaming).
//
//   const model = await startModelThread();
//   model.url                       // OpenAI base URL
//   model.setChunks(["ok"])         // every answer from now on
//   model.script(tag, [r1, r2])     // server.scriptFor(tag, r1, r2)
//   await model.count("[hold]")     // requests whose last user text holds it
//   await model.reset(); await model.close();
//
// A request whose last user message contains HOLD hangs until the client
// aborts (a busy turn); any other is answered with the current chunks,
// streamed as fast as the socket takes them.

import { Worker, isMainThread, parentPort } from "node:worker_threads";
import { startModelServer } from "../tests/support/model-server.mjs";

export const HOLD = "[hold]";

const lastUserText = (body) => {
  const user = [...(body.messages ?? [])].reverse().find((m) => m.role === "user");
  const c = user?.content;
  return typeof c === "string" ? c : Array.isArray(c) ? c.map((p) => p.text ?? "").join("") : "";
};

if (!isMainThread && parentPort) {
  let chunks = ["ok"];
  const server = await startModelServer({
    fallback: (body) => (lastUserText(body).includes(HOLD) ? { hang: true } : { chunks }),
  });
  parentPort.on("message", async ({ id, op, arg }) => {
    let value = null;
    if (op === "chunks") chunks = arg;
    else if (op === "script") server.scriptFor(arg.tag, ...arg.responses);
    else if (op === "count") value = server.requests(arg).length;
    else if (op === "reset") server.reset();
    else if (op === "close") await server.close();
    parentPort.postMessage({ id, value });
    if (op === "close") parentPort.close();
  });
  parentPort.postMessage({ id: 0, value: server.url });
}

/** Starts the server thread; resolves once it listens. */
export async function startModelThread() {
  const worker = new Worker(new URL(import.meta.url));
  const waiting = new Map();
  let next = 1;
  const url = await new Promise((resolve, reject) => {
    worker.once("error", reject);
    waiting.set(0, resolve);
    worker.on("message", ({ id, value }) => {
      waiting.get(id)?.(value);
      waiting.delete(id);
    });
  });
  const ask = (op, arg) =>
    new Promise((resolve) => {
      const id = next++;
      waiting.set(id, resolve);
      worker.postMessage({ id, op, arg });
    });
  return {
    url,
    setChunks: (chunks) => ask("chunks", chunks),
    script: (tag, responses) => ask("script", { tag, responses }),
    count: (tag) => ask("count", tag),
    reset: () => ask("reset"),
    /** Resolves once `count` requests hold `tag` (polled; 30 s bound). */
    async waitFor(tag, count = 1) {
      const deadline = Date.now() + 30_000;
      while ((await ask("count", tag)) < count) {
        if (Date.now() > deadline) throw new Error(`no model request held ${tag} within 30 s`);
        await new Promise((r) => setTimeout(r, 2));
      }
    },
    async close() {
      await ask("close");
      await worker.terminate();
    },
  };
}
