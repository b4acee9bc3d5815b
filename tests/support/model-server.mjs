// A scripted OpenAI-compatible model server (Chat Completions) for the
// end-to-end tests and for local runs (scripts/run.sh starts it when
// OPENAI_BASE_URL is unset). Loopback only, no API key needed; it records what
// it received, Authorization header included, so a test can assert the key
// arrives.
//
//   import { startModelServer } from "../support/model-server.mjs";
//   const model = await startModelServer();          // port 0: any free port
//   model.url                                        // http://127.0.0.1:PORT/v1
//   model.script({ text: "Hi!", chunkDelayMs: 20 }, { status: 500 });
//   model.requests()                                 // what it received, in order
//
//   node tests/support/model-server.mjs --port 8788 [--hold]   # prints its base URL
//
// Scripted responses are consumed one per chat-completion request, FIFO. A
// response scripted with `scriptFor(match, ...)` is only consumed by a request
// one of whose messages contains `match`, so tests sharing one server keep
// their scripts apart. With nothing queued the fallback answers: "echo"
// (`Echo: <last user text>` in ~8 chunks), "hold" (every request hangs until
// the client aborts or the server closes), or a response of your own.
//
// A response is one of:
//   { text?, chunks?, chunkDelayMs?, usage?, finishReason? }  an answer; neither
//       text nor chunks: the echo answer. `usage` (OpenAI field names) replaces
//       the rough count; `usage: null` sends no usage chunk.
//   { status: 429|500|400|..., body?, headers? }  an HTTP error; `body` defaults
//       to {error: {message, type, param, code}}.
//   { hang: true, text?|chunks? }  streams those chunks, then stays open until
//       the client aborts or close().
//   { dropAfterChunks: n, text?|chunks? }  destroys the socket after n chunks.
//   any of the streaming ones with `gate: "name"`: headers and the role chunk
//       go out, then the answer waits for `release("name")`.
//
// Control API (for the CLI mode): POST /__script (a JSON array of responses,
// or {match, responses}), GET /__requests, POST /__reset,
// POST /__release {gate}.

import { EventEmitter } from "node:events";
import http from "node:http";
import { pathToFileURL } from "node:url";

/** At most this many requests are remembered (the oldest are dropped). */
export const RECORDS_MAX = 1000;
const BODY_BYTES_MAX = 32 * 1024 * 1024;
const ECHO_CHUNKS = 8;

/**
 * @param {{ port?: number, host?: string, fallback?: "echo" | "hold" | object | ((body: any) => object) }} [options]
 */
export async function startModelServer({ port = 0, host = "127.0.0.1", fallback = "echo" } = {}) {
  const state = {
    queue: [], // unmatched scripted responses
    lanes: [], // [{ match, responses: [] }]
    records: [],
    seq: 0,
    gates: new Map(), // name -> { open, waiters: Set<() => void> }
    closing: false,
    fallback,
  };
  const changes = new EventEmitter();
  changes.setMaxListeners(0);
  const changed = () => changes.emit("change");

  const server = http.createServer((req, res) => {
    handle(state, changed, req, res).catch((error) => {
      if (!res.headersSent) sendJson(res, 500, { error: { message: String(error?.message ?? error), type: "server_error" } });
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  const url = `http://${host}:${address.port}/v1`;

  const api = {
    url,
    port: address.port,
    /** Queues responses for the next requests, FIFO. */
    script(...responses) {
      for (const r of responses) state.queue.push(checkResponse(r));
    },
    /** Queues responses for requests one of whose messages contains `match`. */
    scriptFor(match, ...responses) {
      if (typeof match !== "string" || match === "") throw new TypeError("scriptFor: match must be a non-empty string");
      let lane = state.lanes.find((l) => l.match === match);
      if (!lane) {
        lane = { match, responses: [] };
        state.lanes.push(lane);
      }
      for (const r of responses) lane.responses.push(checkResponse(r));
    },
    /**
     * Copies of the recorded requests, oldest first: `{seq, method, path,
     * headers, body, receivedAt, endedAt, status, outcome, aborted,
     * chunksSent, scripted}`. `outcome`: completed | error | hanging |
     * dropped | aborted | invalid | streaming; `aborted`: the client went
     * away before the answer ended (not a drop, not close()). `match`: a
     * string one of the request's messages contains, or a predicate on the
     * record.
     */
    requests(match) {
      return state.records.filter((r) => matches(r, match)).map((r) => structuredClone(r));
    },
    /** Opens a gate: responses waiting on it (and later ones) go on. */
    release(gate) {
      openGate(state, gate);
    },
    /** Forgets the scripts, the records and the gates (requests in flight go on). */
    reset() {
      state.queue.length = 0;
      state.lanes.length = 0;
      state.records.length = 0;
      for (const [name, g] of state.gates) if (g.waiters.size === 0) state.gates.delete(name);
      changed();
    },
    /** Scripted responses not consumed yet. */
    unconsumed() {
      return state.queue.length + state.lanes.reduce((n, l) => n + l.responses.length, 0);
    },
    /**
     * Resolves with `predicate(requests())` once it is truthy; rejects after
     * `timeoutMs` with what was received.
     */
    waitFor(predicate, { timeoutMs = 5000, what = "the model server's condition" } = {}) {
      return new Promise((resolve, reject) => {
        const check = () => {
          let value;
          try {
            value = predicate(api.requests());
          } catch (error) {
            done();
            reject(error);
            return;
          }
          if (value) {
            done();
            resolve(value);
          }
        };
        const timer = setTimeout(() => {
          done();
          const seen = api.requests().map(summary);
          reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; requests so far: ${JSON.stringify(seen)}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          changes.off("change", check);
        };
        changes.on("change", check);
        check();
      });
    },
    /** Waits until at least `count` requests (matching `match`) arrived; returns them. */
    async waitForRequests(count, { match, timeoutMs = 5000 } = {}) {
      return api.waitFor(
        (all) => {
          const got = all.filter((r) => matches(r, match));
          return got.length >= count ? got : null;
        },
        { timeoutMs, what: `${count} request(s)${match === undefined ? "" : ` matching ${JSON.stringify(String(match))}`}` },
      );
    },
    async close() {
      state.closing = true;
      server.closeAllConnections();
      await new Promise((resolve) => server.close(() => resolve()));
      for (const g of state.gates.values()) for (const w of g.waiters) w();
    },
  };
  return api;
}

function checkResponse(r) {
  if (r === null || typeof r !== "object" || Array.isArray(r)) throw new TypeError(`a scripted response is an object, got ${JSON.stringify(r)}`);
  const known = ["text", "chunks", "chunkDelayMs", "usage", "finishReason", "status", "body", "headers", "hang", "dropAfterChunks", "gate"];
  for (const k of Object.keys(r)) if (!known.includes(k)) throw new TypeError(`unknown field \`${k}\` in scripted response ${JSON.stringify(r)}`);
  if (r.chunks !== undefined && (!Array.isArray(r.chunks) || r.chunks.some((c) => typeof c !== "string"))) {
    throw new TypeError("`chunks` is an array of strings");
  }
  return structuredClone(r);
}

/** The text of a message's content (a string or an array of parts). */
export function contentText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .filter((p) => p && p.type === "text" && typeof p.text === "string")
      .map((p) => p.text)
      .join("");
  }
  return "";
}

function requestText(body) {
  const messages = Array.isArray(body?.messages) ? body.messages : [];
  return messages.map((m) => contentText(m?.content)).join("\n");
}

function matches(record, match) {
  if (match === undefined) return true;
  if (typeof match === "function") return Boolean(match(record));
  return requestText(record.body).includes(match);
}

function summary(r) {
  const messages = Array.isArray(r.body?.messages) ? r.body.messages : [];
  const last = messages.at(-1);
  return {
    seq: r.seq,
    path: r.path,
    outcome: r.outcome,
    aborted: r.aborted,
    chunksSent: r.chunksSent,
    last: last ? `${last.role}: ${contentText(last.content).slice(0, 80)}` : null,
  };
}

function sendJson(res, status, value, headers = {}) {
  const text = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers });
  res.end(text);
}

function openGate(state, name) {
  const g = state.gates.get(name) ?? { open: false, waiters: new Set() };
  g.open = true;
  state.gates.set(name, g);
  for (const w of g.waiters) w();
  g.waiters.clear();
}

function waitGate(state, name, gone) {
  const g = state.gates.get(name) ?? { open: false, waiters: new Set() };
  state.gates.set(name, g);
  if (g.open) return Promise.resolve();
  return new Promise((resolve) => {
    const wake = () => {
      g.waiters.delete(wake);
      resolve();
    };
    g.waiters.add(wake);
    gone.addEventListener("abort", wake, { once: true });
  });
}

function sleep(ms, gone) {
  if (!(ms > 0) || gone.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    gone.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        resolve();
      },
      { once: true },
    );
  });
}

async function readBody(req) {
  const parts = [];
  let n = 0;
  for await (const part of req) {
    n += part.length;
    if (n > BODY_BYTES_MAX) throw new Error("request body too large");
    parts.push(part);
  }
  return Buffer.concat(parts).toString("utf8");
}

async function handle(state, changed, req, res) {
  const path = (req.url ?? "/").split("?")[0];

  // Control API.
  if (path.startsWith("/__")) {
    const text = req.method === "POST" ? await readBody(req) : "";
    const body = text === "" ? null : JSON.parse(text);
    if (req.method === "POST" && path === "/__script") {
      const list = Array.isArray(body) ? body : body?.responses;
      if (!Array.isArray(list)) return sendJson(res, 400, { error: { message: "POST /__script takes an array of responses or {match, responses}" } });
      const checked = list.map(checkResponse);
      if (Array.isArray(body) || body.match === undefined) state.queue.push(...checked);
      else {
        let lane = state.lanes.find((l) => l.match === body.match);
        if (!lane) state.lanes.push((lane = { match: String(body.match), responses: [] }));
        lane.responses.push(...checked);
      }
      return sendJson(res, 200, { queued: checked.length });
    }
    if (req.method === "GET" && path === "/__requests") return sendJson(res, 200, state.records);
    if (req.method === "POST" && path === "/__reset") {
      state.queue.length = 0;
      state.lanes.length = 0;
      state.records.length = 0;
      changed();
      return sendJson(res, 200, { ok: true });
    }
    if (req.method === "POST" && path === "/__release" && typeof body?.gate === "string") {
      openGate(state, body.gate);
      return sendJson(res, 200, { ok: true });
    }
    return sendJson(res, 404, { error: { message: `no control route ${req.method} ${path}` } });
  }

  if (req.method === "GET" && path === "/v1/models") {
    return sendJson(res, 200, { object: "list", data: [{ id: "scripted", object: "model", created: 0, owned_by: "shiitake-tests" }] });
  }
  if (path !== "/v1/chat/completions") {
    return sendJson(res, 404, { error: { message: `no route ${req.method} ${path}`, type: "invalid_request_error", param: null, code: "not_found" } });
  }

  const record = {
    seq: ++state.seq,
    method: req.method,
    path,
    headers: { ...req.headers },
    body: null,
    receivedAt: Date.now(),
    endedAt: null,
    outcome: "receiving",
    aborted: false,
    chunksSent: 0,
    scripted: false,
  };
  state.records.push(record);
  if (state.records.length > RECORDS_MAX) state.records.shift();

  const gone = new AbortController();
  let serverEnded = false;
  const end = (outcome) => {
    record.outcome = outcome;
    record.endedAt = Date.now();
    serverEnded = true;
  };
  res.on("close", () => {
    if (!res.writableFinished && !serverEnded && !state.closing) record.aborted = true;
    if (record.endedAt === null) record.endedAt = Date.now();
    if (record.aborted && (record.outcome === "streaming" || record.outcome === "hanging" || record.outcome === "receiving")) {
      record.outcome = "aborted";
    }
    gone.abort();
    changed();
  });
  req.socket.setNoDelay(true);

  const raw = await readBody(req);
  const fail = (status, message) => {
    end("invalid");
    sendJson(res, status, { error: { message, type: "invalid_request_error", param: null, code: null } });
  };
  if (req.method !== "POST") return fail(405, `use POST for ${path}`);
  let body;
  try {
    body = JSON.parse(raw);
  } catch {
    record.body = raw;
    return fail(400, "the body is not JSON");
  }
  record.body = body;
  changed();
  if (body === null || typeof body !== "object" || Array.isArray(body)) return fail(400, "the body is not a JSON object");
  if (typeof body.model !== "string" || body.model === "") return fail(400, "`model` is required");
  if (!Array.isArray(body.messages) || body.messages.length === 0) return fail(400, "`messages` must be a non-empty array");
  if (body.messages.some((m) => m === null || typeof m !== "object" || typeof m.role !== "string")) {
    return fail(400, "every message needs a `role`");
  }

  // Pick the response: a matching lane first, then the FIFO queue, then the fallback.
  let response;
  const text = requestText(body);
  const lane = state.lanes.find((l) => l.responses.length > 0 && text.includes(l.match));
  if (lane) response = lane.responses.shift();
  else if (state.queue.length > 0) response = state.queue.shift();
  if (response) record.scripted = true;
  else if (state.fallback === "hold") response = { hang: true };
  else if (state.fallback === "echo" || state.fallback === undefined) response = {};
  else if (typeof state.fallback === "function") response = checkResponse(state.fallback(body));
  else response = checkResponse(state.fallback);

  const id = `chatcmpl-${record.seq}-${Date.now().toString(36)}`;
  const created = Math.floor(Date.now() / 1000);
  const model = body.model;

  if (response.status !== undefined && response.status !== 200) {
    record.status = response.status;
    const errBody = response.body ?? {
      error: { message: `scripted failure (HTTP ${response.status})`, type: errorType(response.status), param: null, code: null },
    };
    end("error");
    return sendJson(res, response.status, errBody, response.headers ?? {});
  }

  const answer = response.text ?? (response.chunks ? response.chunks.join("") : `Echo: ${lastUserText(body)}`);
  // A hang with neither text nor chunks streams no content at all.
  const pieces = response.chunks ?? (response.text === undefined && response.hang ? [] : split(answer, ECHO_CHUNKS));
  const usage =
    response.usage === null
      ? null
      : (response.usage ?? {
          prompt_tokens: Math.max(1, Math.ceil(text.length / 4)),
          completion_tokens: Math.max(1, Math.ceil(answer.length / 4)),
          total_tokens: Math.max(1, Math.ceil(text.length / 4)) + Math.max(1, Math.ceil(answer.length / 4)),
        });
  const delay = response.chunkDelayMs ?? 0;
  const finishReason = response.finishReason ?? "stop";
  record.status = 200;

  if (body.stream !== true) {
    // A plain chat.completion; hang and drop apply to it too.
    if (response.gate !== undefined) await waitGate(state, response.gate, gone.signal);
    await sleep(delay * pieces.length, gone.signal);
    if (gone.signal.aborted) return;
    if (response.hang) {
      record.outcome = "hanging";
      changed();
      return; // never answered
    }
    if (response.dropAfterChunks !== undefined) {
      end("dropped");
      req.socket.destroy();
      return;
    }
    end("completed");
    return sendJson(res, 200, {
      id,
      object: "chat.completion",
      created,
      model,
      choices: [{ index: 0, message: { role: "assistant", content: answer, refusal: null }, logprobs: null, finish_reason: finishReason }],
      ...(usage ? { usage } : {}),
      system_fingerprint: "fp_scripted",
    });
  }

  const includeUsage = body.stream_options?.include_usage === true;
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", connection: "keep-alive" });
  record.outcome = "streaming";
  const send = (obj) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
  const chunk = (delta, finish) => ({
    id,
    object: "chat.completion.chunk",
    created,
    model,
    system_fingerprint: "fp_scripted",
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    ...(includeUsage ? { usage: null } : {}),
  });
  send(chunk({ role: "assistant", content: "", refusal: null }, null));
  changed();

  if (response.gate !== undefined) {
    await waitGate(state, response.gate, gone.signal);
    if (gone.signal.aborted) return;
  }

  const limit = response.dropAfterChunks ?? pieces.length;
  for (let i = 0; i < Math.min(limit, pieces.length); i++) {
    await sleep(delay, gone.signal);
    if (gone.signal.aborted) return;
    send(chunk({ content: pieces[i] }, null));
    record.chunksSent++;
    changed();
  }
  if (response.dropAfterChunks !== undefined) {
    // Let the chunks leave before the connection is cut mid-stream.
    await new Promise((resolve) => res.write("", resolve));
    end("dropped");
    req.socket.destroy();
    return;
  }
  if (response.hang) {
    record.outcome = "hanging";
    changed();
    return; // open until the client aborts or close()
  }
  send(chunk({}, finishReason));
  if (includeUsage && usage) {
    send({ id, object: "chat.completion.chunk", created, model, system_fingerprint: "fp_scripted", choices: [], usage });
  }
  res.write("data: [DONE]\n\n");
  end("completed");
  res.end();
  changed();
}

function errorType(status) {
  if (status === 401) return "authentication_error";
  if (status === 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

function lastUserText(body) {
  const user = body.messages.filter((m) => m.role === "user").at(-1);
  return user ? contentText(user.content) : "";
}

/** Splits text into about `n` pieces (by code point, never inside a surrogate pair). */
function split(text, n) {
  const cps = Array.from(text);
  if (cps.length === 0) return [""];
  const size = Math.max(1, Math.ceil(cps.length / n));
  const out = [];
  for (let i = 0; i < cps.length; i += size) out.push(cps.slice(i, i + size).join(""));
  return out;
}

// CLI: node tests/support/model-server.mjs [--port N] [--host H] [--hold]
if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const args = process.argv.slice(2);
  const opts = {};
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--port") opts.port = Number(args[++i]);
    else if (a === "--host") opts.host = args[++i];
    else if (a === "--hold") opts.fallback = "hold";
    else {
      console.error(`usage: node tests/support/model-server.mjs [--port N] [--host 127.0.0.1] [--hold]  (unknown: ${a})`);
      process.exit(2);
    }
  }
  if (opts.port !== undefined && !(Number.isInteger(opts.port) && opts.port >= 0 && opts.port < 65536)) {
    console.error("model-server: --port takes 0..65535");
    process.exit(2);
  }
  const server = await startModelServer(opts);
  console.log(server.url);
  const stop = () => server.close().then(() => process.exit(0));
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}
