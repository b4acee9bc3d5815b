// A scripted model server for the end-to-end tests and for local runs
// (scripts/run.sh starts it when OPENAI_BASE_URL is unset). It speaks two
// wire formats on one port: OpenAI Chat Completions (`POST /v1/chat/completions`,
// base URL `model.url` = http://127.0.0.1:PORT/v1) and Anthropic Messages
// (`POST /v1/messages`, base URL `model.origin` = http://127.0.0.1:PORT, the
// client appends /v1/messages). Loopback only, no API key needed; it records
// what it received, headers included (Authorization, x-api-key), so a test can
// assert the key arrives.
//
//   import { startModelServer } from "../support/model-server.mjs";
//   const model = await startModelServer();          // port 0: any free port
//   model.url                                        // http://127.0.0.1:PORT/v1  (OpenAI)
//   model.origin                                     // http://127.0.0.1:PORT     (Anthropic)
//   model.script({ text: "Hi!", chunkDelayMs: 20 }, { status: 500 });
//   model.requests()                                 // what it received, in order
//
//   node tests/support/model-server.mjs --port 8788 [--hold]   # prints its (OpenAI) base URL
//
// Scripted responses are consumed one per model request (either format),
// FIFO. A response scripted with `scriptFor(match, ...)` is only consumed by
// a request one of whose messages (or, for Anthropic, whose `system`)
// contains `match`, so tests sharing one server keep their scripts apart.
// With nothing queued the fallback answers: "echo" (`Echo: <last user text>`
// in ~8 chunks), "hold" (every request hangs until the client aborts or the
// server closes), or a response of your own.
//
// A response is one of:
//   { text?, chunks?, chunkDelayMs?, usage?, finishReason? }  an answer; neither
//       text nor chunks: the echo answer. `usage` replaces the rough count:
//       OpenAI field names (`prompt_tokens`, `completion_tokens`) or Anthropic
//       ones (`input_tokens`, `output_tokens`, `cache_*_input_tokens`), either
//       is translated for the other format; `usage: null` sends no usage.
//       `finishReason` is OpenAI's (stop, length, tool_calls; mapped to
//       end_turn, max_tokens, tool_use for Anthropic, other values verbatim).
//   { status: 429|500|529|400|..., body?, headers? }  an HTTP error; `body`
//       defaults to {error: {message, type, param, code}} (OpenAI) or
//       {type: "error", error: {type, message}} (Anthropic).
//   { hang: true, text?|chunks? }  streams those chunks, then stays open until
//       the client aborts or close().
//   { dropAfterChunks: n, text?|chunks? }  destroys the socket after n chunks.
//   { streamError: "overloaded_error" | {type, message?}, text?|chunks? }
//       streams those chunks, then an in-stream error and ends the stream:
//       Anthropic `event: error` {type: "error", error: {type, message}},
//       OpenAI `data: {error: {message, type, param, code}}`. Unstreamed, it
//       is the matching HTTP error (529, 500, 429 or 400).
//   any of the streaming ones with `gate: "name"`: headers and the first
//       event(s) go out (OpenAI: the role chunk; Anthropic: message_start,
//       content_block_start, ping), then the answer waits for `release("name")`.
//
// Anthropic requests are checked as Anthropic would: a 400
// invalid_request_error (Anthropic error body) when `anthropic-version` is
// missing or unknown, `model` or `max_tokens` is missing, `messages` is empty,
// the first message is not `user`, a role is not user/assistant, a content
// block is an empty text or a malformed image, or a field is unknown.
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
/** `anthropic-version` values the Messages API accepts. */
const ANTHROPIC_VERSIONS = ["2023-06-01", "2023-01-01"];
const ANTHROPIC_IMAGE_TYPES = ["image/jpeg", "image/png", "image/gif", "image/webp"];
/** Top-level Messages request fields; anything else is refused, as Anthropic does. */
const ANTHROPIC_FIELDS = [
  "model",
  "messages",
  "max_tokens",
  "system",
  "stream",
  "metadata",
  "stop_sequences",
  "temperature",
  "top_p",
  "top_k",
  "tools",
  "tool_choice",
  "thinking",
  "service_tier",
];

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
  const origin = `http://${host}:${address.port}`;
  const url = `${origin}/v1`;

  const api = {
    /** The OpenAI base URL (`…/v1`; the client appends /chat/completions). */
    url,
    /** The Anthropic base URL (the server root; the client appends /v1/messages). */
    origin,
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
     * Copies of the recorded requests, oldest first: `{seq, api, method,
     * path, headers, body, receivedAt, endedAt, status, outcome, aborted,
     * chunksSent, scripted, error}`. `api`: "openai" | "anthropic";
     * `outcome`: completed | error (an HTTP error or an in-stream error) |
     * hanging | dropped | aborted | invalid | streaming; `error`: the message
     * of an `invalid` refusal; `aborted`: the client went away before the
     * answer ended (not a drop, not close()). `match`: a string one of the
     * request's messages (or its Anthropic `system`) contains, or a predicate
     * on the record.
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
  const known = ["text", "chunks", "chunkDelayMs", "usage", "finishReason", "status", "body", "headers", "hang", "dropAfterChunks", "gate", "streamError"];
  for (const k of Object.keys(r)) if (!known.includes(k)) throw new TypeError(`unknown field \`${k}\` in scripted response ${JSON.stringify(r)}`);
  if (r.chunks !== undefined && (!Array.isArray(r.chunks) || r.chunks.some((c) => typeof c !== "string"))) {
    throw new TypeError("`chunks` is an array of strings");
  }
  if (r.streamError !== undefined) {
    const e = r.streamError;
    const ok =
      (typeof e === "string" && e !== "") ||
      (e !== null && typeof e === "object" && typeof e.type === "string" && e.type !== "" && (e.message === undefined || typeof e.message === "string"));
    if (!ok) throw new TypeError("`streamError` is an error type (e.g. \"overloaded_error\") or {type, message?}");
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
  const texts = messages.map((m) => contentText(m?.content));
  // Anthropic's system prompt is a field, not a message (OpenAI's is a message).
  if (body?.system !== undefined) texts.unshift(contentText(body.system));
  return texts.join("\n");
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
    api: r.api,
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
  if (path !== "/v1/chat/completions" && path !== "/v1/messages") {
    return sendJson(res, 404, { error: { message: `no route ${req.method} ${path}`, type: "invalid_request_error", param: null, code: "not_found" } });
  }
  const anthropic = path === "/v1/messages";

  const record = {
    seq: ++state.seq,
    api: anthropic ? "anthropic" : "openai",
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
    record.error = message;
    record.status = status;
    end("invalid");
    if (anthropic) sendJson(res, status, anthropicError(anthropicErrorType(status), message), { "request-id": `req_scripted_${record.seq}` });
    else sendJson(res, status, { error: { message, type: "invalid_request_error", param: null, code: null } });
    changed();
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
  if (anthropic) {
    const refusal = checkAnthropicRequest(req.headers, body);
    if (refusal !== null) return fail(400, refusal);
  } else {
    if (body === null || typeof body !== "object" || Array.isArray(body)) return fail(400, "the body is not a JSON object");
    if (typeof body.model !== "string" || body.model === "") return fail(400, "`model` is required");
    if (!Array.isArray(body.messages) || body.messages.length === 0) return fail(400, "`messages` must be a non-empty array");
    if (body.messages.some((m) => m === null || typeof m !== "object" || typeof m.role !== "string")) {
      return fail(400, "every message needs a `role`");
    }
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

  // Unstreamed, an in-stream error is the HTTP error it stands for.
  if (response.streamError !== undefined && body.stream !== true && (response.status === undefined || response.status === 200)) {
    const { type, message } = streamErrorOf(response.streamError);
    const status = statusOfErrorType(type);
    response = {
      ...response,
      status,
      body: anthropic ? anthropicError(type, message) : { error: { message, type, param: null, code: null } },
    };
  }

  if (response.status !== undefined && response.status !== 200) {
    record.status = response.status;
    const errBody =
      response.body ??
      (anthropic
        ? anthropicError(anthropicErrorType(response.status), response.status === 529 ? "Overloaded" : `scripted failure (HTTP ${response.status})`)
        : { error: { message: `scripted failure (HTTP ${response.status})`, type: errorType(response.status), param: null, code: null } });
    end("error");
    return sendJson(res, response.status, errBody, { ...(anthropic ? { "request-id": `req_scripted_${record.seq}` } : {}), ...(response.headers ?? {}) });
  }

  const answer = response.text ?? (response.chunks ? response.chunks.join("") : `Echo: ${lastUserText(body)}`);
  // A hang or a stream error with neither text nor chunks streams no content at all.
  const pieces = response.chunks ?? (response.text === undefined && (response.hang || response.streamError !== undefined) ? [] : split(answer, ECHO_CHUNKS));
  const roughIn = Math.max(1, Math.ceil(text.length / 4));
  const roughOut = Math.max(1, Math.ceil(answer.length / 4));
  const delay = response.chunkDelayMs ?? 0;
  const finishReason = response.finishReason ?? "stop";
  record.status = 200;

  const opts = { state, changed, req, res, record, end, gone: gone.signal, body, response, answer, pieces, delay, finishReason };
  if (anthropic) return answerAnthropic({ ...opts, usage: anthropicUsage(response.usage, roughIn, roughOut) });
  return answerOpenAi({ ...opts, usage: openAiUsage(response.usage, roughIn, roughOut) });
}

/** Sleeps through the gate and the pacing of an unstreamed answer; false when the client went away or it hangs or drops. */
async function unstreamed({ state, changed, req, record, end, gone, response, pieces, delay }) {
  if (response.gate !== undefined) await waitGate(state, response.gate, gone);
  await sleep(delay * pieces.length, gone);
  if (gone.aborted) return false;
  if (response.hang) {
    record.outcome = "hanging";
    changed();
    return false; // never answered
  }
  if (response.dropAfterChunks !== undefined) {
    end("dropped");
    req.socket.destroy();
    return false;
  }
  return true;
}

/**
 * Streams the pieces (after the gate), each after `delay`; `onPiece(i)` sends
 * one. Returns "gone" (the client went away), "dropped", "hanging" or "done".
 */
async function streamPieces({ state, changed, req, res, record, end, gone, response, pieces, delay }, onPiece) {
  if (response.gate !== undefined) {
    await waitGate(state, response.gate, gone);
    if (gone.aborted) return "gone";
  }
  const limit = response.dropAfterChunks ?? pieces.length;
  for (let i = 0; i < Math.min(limit, pieces.length); i++) {
    await sleep(delay, gone);
    if (gone.aborted) return "gone";
    onPiece(i);
    record.chunksSent++;
    changed();
  }
  if (response.dropAfterChunks !== undefined) {
    // Let the chunks leave before the connection is cut mid-stream.
    await new Promise((resolve) => res.write("", resolve));
    end("dropped");
    req.socket.destroy();
    return "dropped";
  }
  if (response.hang) {
    record.outcome = "hanging";
    changed();
    return "hanging"; // open until the client aborts or close()
  }
  return "done";
}

async function answerOpenAi(o) {
  const { changed, res, record, end, body, response, answer, pieces, usage, finishReason } = o;
  const id = `chatcmpl-${record.seq}-${Date.now().toString(36)}`;
  const created = Math.floor(Date.now() / 1000);
  const model = body.model;

  if (body.stream !== true) {
    // A plain chat.completion; hang and drop apply to it too.
    if (!(await unstreamed(o))) return;
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

  if ((await streamPieces(o, (i) => send(chunk({ content: pieces[i] }, null)))) !== "done") return;
  if (response.streamError !== undefined) {
    const { type, message } = streamErrorOf(response.streamError);
    send({ error: { message, type, param: null, code: null } });
    end("error");
    res.end();
    changed();
    return;
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

async function answerAnthropic(o) {
  const { changed, res, record, end, body, response, answer, pieces, usage, finishReason } = o;
  const id = `msg_scripted_${record.seq}_${Date.now().toString(36)}`;
  const model = body.model;
  const stopReason = ANTHROPIC_STOP_REASONS[finishReason] ?? finishReason;
  const headers = { "request-id": `req_scripted_${record.seq}` };

  if (body.stream !== true) {
    if (!(await unstreamed(o))) return;
    end("completed");
    return sendJson(
      res,
      200,
      {
        id,
        type: "message",
        role: "assistant",
        model,
        content: [{ type: "text", text: answer }],
        stop_reason: stopReason,
        stop_sequence: null,
        usage: usage ?? { input_tokens: 0, output_tokens: 0 },
      },
      headers,
    );
  }

  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", connection: "keep-alive", ...headers });
  record.outcome = "streaming";
  const send = (event, obj) => res.write(`event: ${event}\ndata: ${JSON.stringify({ type: event, ...obj })}\n\n`);
  const { output_tokens: outputTokens, ...inputUsage } = usage ?? {};
  send("message_start", {
    message: {
      id,
      type: "message",
      role: "assistant",
      model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      ...(usage ? { usage: { ...inputUsage, output_tokens: Math.min(1, outputTokens) } } : {}),
    },
  });
  send("content_block_start", { index: 0, content_block: { type: "text", text: "" } });
  send("ping", {});
  changed();

  const sent = await streamPieces(o, (i) => {
    send("content_block_delta", { index: 0, delta: { type: "text_delta", text: pieces[i] } });
    if (i % 4 === 3) send("ping", {});
  });
  if (sent !== "done") return;
  if (response.streamError !== undefined) {
    send("error", { error: streamErrorOf(response.streamError) });
    end("error");
    res.end();
    changed();
    return;
  }
  send("content_block_stop", { index: 0 });
  send("message_delta", { delta: { stop_reason: stopReason, stop_sequence: null }, ...(usage ? { usage: { output_tokens: outputTokens } } : {}) });
  send("message_stop", {});
  end("completed");
  res.end();
  changed();
}

const ANTHROPIC_STOP_REASONS = { stop: "end_turn", length: "max_tokens", tool_calls: "tool_use", content_filter: "refusal" };

/** OpenAI usage from a scripted one (either naming) or the rough counts; null for `usage: null`. */
function openAiUsage(u, roughIn, roughOut) {
  if (u === null) return null;
  if (u === undefined) return { prompt_tokens: roughIn, completion_tokens: roughOut, total_tokens: roughIn + roughOut };
  if ("input_tokens" in u || "output_tokens" in u) {
    const p = (u.input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0);
    const c = u.output_tokens ?? 0;
    return { prompt_tokens: p, completion_tokens: c, total_tokens: p + c };
  }
  return u;
}

/** Anthropic usage from a scripted one (either naming) or the rough counts; null for `usage: null`. */
function anthropicUsage(u, roughIn, roughOut) {
  if (u === null) return null;
  if (u === undefined) return { input_tokens: roughIn, output_tokens: roughOut };
  if ("prompt_tokens" in u || "completion_tokens" in u) return { input_tokens: u.prompt_tokens ?? 0, output_tokens: u.completion_tokens ?? 0 };
  return { input_tokens: 0, output_tokens: 0, ...u };
}

function streamErrorOf(e) {
  const type = typeof e === "string" ? e : e.type;
  const message = (typeof e === "object" ? e.message : undefined) ?? (type === "overloaded_error" ? "Overloaded" : `scripted ${type}`);
  return { type, message };
}

/** The HTTP status an error type stands for (Anthropic's and OpenAI's spellings). */
function statusOfErrorType(type) {
  const statuses = {
    overloaded_error: 529,
    api_error: 500,
    server_error: 500,
    rate_limit_error: 429,
    rate_limit_exceeded: 429,
    authentication_error: 401,
    permission_error: 403,
    not_found_error: 404,
    request_too_large: 413,
    timeout_error: 504,
  };
  return statuses[type] ?? 400;
}

function anthropicError(type, message) {
  return { type: "error", error: { type, message } };
}

function anthropicErrorType(status) {
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 413) return "request_too_large";
  if (status === 429) return "rate_limit_error";
  if (status === 529) return "overloaded_error";
  if (status >= 500) return "api_error";
  return "invalid_request_error";
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/** Why Anthropic would refuse this Messages request (400), or null. */
function checkAnthropicRequest(headers, body) {
  const version = headers["anthropic-version"];
  if (version === undefined || version === "") return "anthropic-version: header is required";
  if (!ANTHROPIC_VERSIONS.includes(version)) return `anthropic-version: invalid version ${JSON.stringify(version)}`;
  if (!isObject(body)) return "the body is not a JSON object";
  for (const k of Object.keys(body)) if (!ANTHROPIC_FIELDS.includes(k)) return `${k}: Extra inputs are not permitted`;
  if (body.model === undefined) return "model: Field required";
  if (typeof body.model !== "string" || body.model === "") return "model: Input should be a non-empty string";
  if (body.max_tokens === undefined) return "max_tokens: Field required";
  if (!Number.isInteger(body.max_tokens) || body.max_tokens < 1) return "max_tokens: Input should be an integer >= 1";
  if (body.stream !== undefined && typeof body.stream !== "boolean") return "stream: Input should be a valid boolean";
  if (body.system !== undefined) {
    if (Array.isArray(body.system)) {
      for (const [j, b] of body.system.entries()) {
        if (!isObject(b) || b.type !== "text" || typeof b.text !== "string") return `system.${j}: Input should be a text block`;
        if (b.text === "") return "system: text content blocks must be non-empty";
      }
    } else if (typeof body.system !== "string") return "system: Input should be a valid string or list of text blocks";
  }
  if (body.messages === undefined) return "messages: Field required";
  if (!Array.isArray(body.messages)) return "messages: Input should be a valid list";
  if (body.messages.length === 0) return "messages: at least one message is required";
  for (const [i, m] of body.messages.entries()) {
    if (!isObject(m)) return `messages.${i}: Input should be a valid dictionary`;
    for (const k of Object.keys(m)) if (k !== "role" && k !== "content") return `messages.${i}.${k}: Extra inputs are not permitted`;
    if (m.role !== "user" && m.role !== "assistant") return `messages.${i}.role: Input should be 'user' or 'assistant'`;
    if (typeof m.content === "string") {
      if (m.content === "") return "messages: text content blocks must be non-empty";
      continue;
    }
    if (!Array.isArray(m.content)) return `messages.${i}.content: Input should be a valid string or list of content blocks`;
    if (m.content.length === 0) return `messages.${i}.content: List should have at least 1 item`;
    for (const [j, b] of m.content.entries()) {
      const at = `messages.${i}.content.${j}`;
      if (!isObject(b) || typeof b.type !== "string") return `${at}: Input should be a content block with a \`type\``;
      if (b.type === "text") {
        if (typeof b.text !== "string") return `${at}.text: Field required`;
        if (b.text === "") return "messages: text content blocks must be non-empty";
      } else if (b.type === "image") {
        const src = b.source;
        if (!isObject(src)) return `${at}.source: Field required`;
        if (src.type === "base64") {
          if (!ANTHROPIC_IMAGE_TYPES.includes(src.media_type)) return `${at}.source.base64.media_type: Input should be ${ANTHROPIC_IMAGE_TYPES.map((t) => `'${t}'`).join(", ")}`;
          if (typeof src.data !== "string" || src.data === "") return `${at}.source.base64.data: Field required`;
          if (!/^[A-Za-z0-9+/]*={0,2}$/.test(src.data) || src.data.length % 4 !== 0) return `${at}.source.base64: invalid base64 data`;
        } else if (src.type === "url") {
          if (typeof src.url !== "string" || src.url === "") return `${at}.source.url.url: Field required`;
        } else return `${at}.source: Input tag ${JSON.stringify(src.type)} does not match 'base64', 'url'`;
        if (m.role !== "user") return `${at}: image blocks are only allowed in user messages`;
      } else if (!["tool_use", "tool_result", "document", "thinking", "redacted_thinking"].includes(b.type)) {
        return `${at}.type: Input tag ${JSON.stringify(b.type)} does not match any of the expected tags`;
      }
    }
  }
  if (body.messages[0].role !== "user") return 'messages: first message must use the "user" role';
  return null;
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
