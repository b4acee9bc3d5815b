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
// contains `match`, so tests sharing one server keep their scripts apart. A
// message's tool results (OpenAI `tool` content, Anthropic `tool_result`
// content) and tool-call arguments count too, so the follow-up request of a
// tool turn can be routed by a tag its tool returned; `requests(match)` alike.
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
//       Unscripted, the rough count reports the prompt cache as the
//       provider would (promptCache: Anthropic's `cache_control` marks,
//       OpenAI's `prompt_cache_key`); `record.cache` is `{read, written}`.
//       `finishReason` is OpenAI's (stop, length, tool_calls; mapped to
//       end_turn, max_tokens, tool_use for Anthropic, other values verbatim).
//   { toolCalls: [{ id?, name, arguments }], text?|chunks?, ... }  tool calls,
//       after the text if any (no echo without text). `arguments`: a JSON
//       string (sent verbatim, even malformed) or an object (stringified);
//       `id` defaults to `call_<seq>_<i>` (OpenAI) / `toolu_<seq>_<i>`
//       (Anthropic), seq being the request's record seq, i the call's index.
//       `finishReason` defaults to tool_calls (Anthropic: tool_use). Streamed
//       as the APIs do, each call one chunk that starts it plus its arguments
//       in ~3 pieces (each counts as a chunk for dropAfterChunks, chunksSent,
//       chunkDelayMs): OpenAI `delta.tool_calls: [{index, id, type:
//       "function", function: {name, arguments: ""}}]`, then `[{index,
//       function: {arguments: piece}}]`; Anthropic `content_block_start`
//       {type: "tool_use", id, name, input: {}} at index 0, or 1 after a text
//       block, then `input_json_delta` {partial_json: piece} deltas and
//       `content_block_stop`. Unstreamed: OpenAI `message.tool_calls` (content
//       null without text), Anthropic `tool_use` blocks (input parsed, {} if
//       it is not a JSON object).
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
//       the text block's content_block_start unless there are only tool
//       calls, ping), then the answer waits for `release("name")`.
//
// OpenAI requests are checked as OpenAI would: a 400 invalid_request_error
// (OpenAI error body, `param` naming the spot) when `model` or `messages` is
// missing, a message has no role, an assistant message has neither content
// nor `tool_calls`, `tool_calls` is empty or malformed (id, type "function",
// function {name, arguments: a string}), a `tool` message lacks
// `tool_call_id` or string (or text parts) content, a `tool` message answers
// no call of the assistant message right before its run of tool messages (or
// one already answered), an assistant's call is not answered by those tool
// messages (so a call with no result, or a result after a later message, is
// refused), or a `tools` entry
// is not {type: "function", function: {name (^[a-zA-Z0-9_-]{1,64}$),
// description?, parameters? (an object), strict?}}.
//
// Anthropic requests are checked as Anthropic would: a 400
// invalid_request_error (Anthropic error body) when `anthropic-version` is
// missing or unknown, `model` or `max_tokens` is missing, `messages` is empty,
// the first message is not `user`, a role is not user/assistant, a content
// block is an empty text or a malformed image, or a field is unknown; when a
// `tool_use` block (assistant only: id ^[a-zA-Z0-9_-]+$, name, input object)
// or a `tool_result` block (user only: tool_use_id, content a string or
// text/image blocks, is_error?) is malformed, a tool_result answers no
// tool_use of the message right before (or one already answered there), a
// tool_use is not answered by a tool_result in the very next message, or a
// `tools` entry is not {name
// (^[a-zA-Z0-9_-]{1,128}$, unique), description?, input_schema (type
// "object")} (server tools, `type: "<kind>_YYYYMMDD"`, pass). Roles alternate
// as Anthropic counts them: consecutive messages of one role are accepted,
// since the Messages API combines them into one turn (documented), but the
// message after one with tool_use blocks must be the user message answering
// them, so tool turns alternate strictly.
//
// A context limit (`contextLimit` at start, or `setContextLimit(tokens)`):
// a request whose rough size (its messages' text, and Anthropic's `system`,
// in characters / 4, rounded up: the `tokens` of its record, and the input
// usage reported unless scripted) passes it is refused before any script is
// consumed, as each provider refuses a prompt past the model's window:
// OpenAI HTTP 400 `{error: {message: "This model's maximum context length is
// N tokens. However, your messages resulted in M tokens. ...", type:
// "invalid_request_error", param: "messages", code:
// "context_length_exceeded"}}`; Anthropic HTTP 400 `{type: "error", error:
// {type: "invalid_request_error", message: "prompt is too long: M tokens > N
// maximum"}}`. Its record's outcome is `too_long`.
//
// Control API (for the CLI mode): POST /__script (a JSON array of responses,
// or {match, responses}), GET /__requests, POST /__reset,
// POST /__release {gate}.

import { createHash } from "node:crypto";
import { EventEmitter } from "node:events";
import http from "node:http";
import { pathToFileURL } from "node:url";

/** At most this many requests are remembered (the oldest are dropped). */
export const RECORDS_MAX = 1000;
const BODY_BYTES_MAX = 32 * 1024 * 1024;
const ECHO_CHUNKS = 8;
/** A scripted tool call's arguments are streamed in about this many pieces. */
const TOOL_ARGUMENT_PIECES = 3;
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
 * @param {{ port?: number, host?: string, fallback?: "echo" | "hold" | object | ((body: any) => object), contextLimit?: number | null }} [options]
 */
export async function startModelServer({ port = 0, host = "127.0.0.1", fallback = "echo", contextLimit = null } = {}) {
  const state = {
    contextLimit,
    queue: [], // unmatched scripted responses
    lanes: [], // [{ match, responses: [] }]
    records: [],
    seq: 0,
    gates: new Map(), // name -> { open, waiters: Set<() => void> }
    closing: false,
    fallback,
    // Prompt-cache entries, as promptCache keeps them: "<api>:<key>:<digest>".
    cached: new Set(),
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
  // Idle connections stay open well past any client's own idle timeout
  // (undici's 4 s), so a client never reuses one the server is closing at
  // that moment (a 1 s timeout raced a test's next request: ECONNRESET);
  // close() ends them all.
  server.keepAliveTimeout = 60_000;
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
    /** Queues responses for requests one of whose messages (tool results and arguments included) contains `match`. */
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
     * chunksSent, scripted, error, tokens, usage?}`. `api`: "openai" | "anthropic";
     * `outcome`: completed | error (an HTTP error or an in-stream error) |
     * hanging | dropped | aborted | invalid | streaming | too_long (past the
     * context limit); `tokens`: its rough size; `usage`: the usage object
     * a streamed answer sent in full (in the API's own naming; Anthropic's
     * `message_start` and `message_delta` counts together), absent when it
     * sent none; `error`: the message
     * of an `invalid` refusal; `aborted`: the client went away before the
     * answer ended (not a drop, not close()). `match`: a string one of the
     * request's messages (tool results and arguments included, or its
     * Anthropic `system`) contains, or a predicate on the record.
     */
    requests(match) {
      return state.records.filter((r) => matches(r, match)).map((r) => structuredClone(r));
    },
    /** Refuses requests whose rough token count passes `tokens` (`null`: none), as the provider does past the model's window. */
    setContextLimit(tokens) {
      if (tokens !== null && !(Number.isSafeInteger(tokens) && tokens > 0)) throw new TypeError("setContextLimit: a positive integer or null");
      state.contextLimit = tokens;
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
  const known = ["text", "chunks", "chunkDelayMs", "usage", "finishReason", "status", "body", "headers", "hang", "dropAfterChunks", "gate", "streamError", "toolCalls"];
  for (const k of Object.keys(r)) if (!known.includes(k)) throw new TypeError(`unknown field \`${k}\` in scripted response ${JSON.stringify(r)}`);
  if (r.chunks !== undefined && (!Array.isArray(r.chunks) || r.chunks.some((c) => typeof c !== "string"))) {
    throw new TypeError("`chunks` is an array of strings");
  }
  if (r.toolCalls !== undefined) checkToolCalls(r.toolCalls);
  if (r.streamError !== undefined) {
    const e = r.streamError;
    const ok =
      (typeof e === "string" && e !== "") ||
      (e !== null && typeof e === "object" && typeof e.type === "string" && e.type !== "" && (e.message === undefined || typeof e.message === "string"));
    if (!ok) throw new TypeError("`streamError` is an error type (e.g. \"overloaded_error\") or {type, message?}");
  }
  const copy = structuredClone(r);
  // Arguments go out as the JSON text the model would write, so an object is serialized once, here.
  for (const c of copy.toolCalls ?? []) if (typeof c.arguments !== "string") c.arguments = JSON.stringify(c.arguments);
  return copy;
}

/** Throws unless `calls` is a non-empty list of `{id?, name, arguments}`. */
function checkToolCalls(calls) {
  // An empty list would still turn the default finish reason into tool_calls, for no call at all.
  if (!Array.isArray(calls) || calls.length === 0) throw new TypeError("`toolCalls` is a non-empty array of {id?, name, arguments}");
  for (const c of calls) {
    if (!isObject(c)) throw new TypeError(`a tool call is an object, got ${JSON.stringify(c)}`);
    for (const k of Object.keys(c)) if (!["id", "name", "arguments"].includes(k)) throw new TypeError(`unknown field \`${k}\` in tool call ${JSON.stringify(c)}`);
    if (c.id !== undefined && (typeof c.id !== "string" || c.id === "")) throw new TypeError("a tool call's `id` is a non-empty string");
    if (typeof c.name !== "string" || c.name === "") throw new TypeError("a tool call's `name` is a non-empty string");
    if (typeof c.arguments !== "string" && !isObject(c.arguments)) throw new TypeError("a tool call's `arguments` is a JSON string or an object");
  }
}

/** The scripted tool calls of a response with their ids: `call_<seq>_<i>` (OpenAI) or `toolu_<seq>_<i>` (Anthropic) unless scripted. */
function toolCallsOf(response, seq, anthropic) {
  return (response.toolCalls ?? []).map((c, i) => ({ id: c.id ?? `${anthropic ? "toolu" : "call"}_${seq}_${i}`, name: c.name, arguments: c.arguments }));
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

/**
 * What a message offers to a `match`: its text, and also its tool results
 * and tool-call arguments, so the follow-up request of a tool turn can be
 * routed by a tag a tool returned.
 */
function messageText(m) {
  const texts = [contentText(m?.content)];
  if (Array.isArray(m?.content)) {
    for (const b of m.content) {
      if (b?.type === "tool_result") texts.push(contentText(b.content));
      else if (b?.type === "tool_use") texts.push(JSON.stringify(b.input ?? {}));
    }
  }
  if (Array.isArray(m?.tool_calls)) for (const c of m.tool_calls) texts.push(String(c?.function?.arguments ?? ""));
  return texts.filter((t) => t !== "").join("\n");
}

function requestText(body) {
  const messages = Array.isArray(body?.messages) ? body.messages : [];
  const texts = messages.map(messageText);
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
  const fail = (status, message, param = null) => {
    record.error = message;
    record.status = status;
    end("invalid");
    if (anthropic) sendJson(res, status, anthropicError(anthropicErrorType(status), message), { "request-id": `req_scripted_${record.seq}` });
    else sendJson(res, status, { error: { message, type: "invalid_request_error", param, code: null } });
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
    const refusal = checkOpenAiRequest(body);
    if (refusal !== null) return fail(400, refusal.message, refusal.param);
  }

  const text = requestText(body);
  const roughIn = Math.max(1, Math.ceil(text.length / 4));
  record.tokens = roughIn;
  if (state.contextLimit !== null && roughIn > state.contextLimit) {
    record.status = 400;
    end("too_long");
    changed();
    const limit = state.contextLimit;
    if (anthropic) return sendJson(res, 400, anthropicError("invalid_request_error", `prompt is too long: ${roughIn} tokens > ${limit} maximum`), { "request-id": `req_scripted_${record.seq}` });
    const message = `This model's maximum context length is ${limit} tokens. However, your messages resulted in ${roughIn} tokens. Please reduce the length of the messages.`;
    return sendJson(res, 400, { error: { message, type: "invalid_request_error", param: "messages", code: "context_length_exceeded" } });
  }

  // Pick the response: a matching lane first, then the FIFO queue, then the fallback.
  let response;
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

  const calls = toolCallsOf(response, record.seq, anthropic);
  const answer = response.text ?? (response.chunks ? response.chunks.join("") : calls.length > 0 ? "" : `Echo: ${lastUserText(body)}`);
  // A hang, a stream error or tool calls with neither text nor chunks stream no text at all.
  const silent = response.text === undefined && (response.hang || response.streamError !== undefined || calls.length > 0);
  const pieces = response.chunks ?? (silent ? [] : split(answer, ECHO_CHUNKS));
  const steps = [...pieces.map((text) => ({ text })), ...toolCallSteps(calls)];
  const roughOut = Math.max(1, Math.ceil((answer.length + calls.reduce((n, c) => n + c.name.length + c.arguments.length, 0)) / 4));
  const delay = response.chunkDelayMs ?? 0;
  const finishReason = response.finishReason ?? (calls.length > 0 ? "tool_calls" : "stop");
  record.status = 200;

  const opts = { state, changed, req, res, record, end, gone: gone.signal, body, response, answer, pieces, calls, steps, delay, finishReason };
  // Unscripted usage reports the prompt cache as the provider would.
  const cache = response.usage === undefined ? promptCache(state, body, anthropic, roughIn) : undefined;
  record.cache = cache;
  if (anthropic) return answerAnthropic({ ...opts, usage: anthropicUsage(response.usage, roughIn, roughOut, cache) });
  return answerOpenAi({ ...opts, usage: openAiUsage(response.usage, roughIn, roughOut, cache) });
}

/**
 * The chunks of the tool calls, after the text: per call, one that starts it
 * (id and name) and one per piece of its arguments (about
 * TOOL_ARGUMENT_PIECES, so a client must join them), as both APIs stream them.
 */
function toolCallSteps(calls) {
  return calls.flatMap((call, index) => [
    { index, call, start: true },
    ...(call.arguments === "" ? [] : split(call.arguments, TOOL_ARGUMENT_PIECES)).map((args) => ({ index, call, args })),
  ]);
}

/** Sleeps through the gate and the pacing of an unstreamed answer; false when the client went away or it hangs or drops. */
async function unstreamed({ state, changed, req, record, end, gone, response, steps, delay }) {
  if (response.gate !== undefined) await waitGate(state, response.gate, gone);
  await sleep(delay * steps.length, gone);
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
 * Streams the steps (text pieces, then tool-call chunks; after the gate),
 * each after `delay`; `onStep(step, i)` sends one. Returns "gone" (the client
 * went away), "dropped", "hanging" or "done".
 */
async function streamPieces({ state, changed, req, res, record, end, gone, response, steps, delay }, onStep) {
  if (response.gate !== undefined) {
    await waitGate(state, response.gate, gone);
    if (gone.aborted) return "gone";
  }
  const limit = response.dropAfterChunks ?? steps.length;
  for (let i = 0; i < Math.min(limit, steps.length); i++) {
    await sleep(delay, gone);
    if (gone.aborted) return "gone";
    onStep(steps[i], i);
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
  const { changed, res, record, end, body, response, answer, calls, usage, finishReason } = o;
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
      choices: [{ index: 0, message: openAiMessage(answer, calls), logprobs: null, finish_reason: finishReason }],
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

  if ((await streamPieces(o, (step) => send(chunk(openAiDelta(step), null)))) !== "done") return;
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
    record.usage = usage;
  }
  res.write("data: [DONE]\n\n");
  end("completed");
  res.end();
  changed();
}

/** The message of an unstreamed chat.completion: like OpenAI's, content null when there are only tool calls. */
function openAiMessage(answer, calls) {
  if (calls.length === 0) return { role: "assistant", content: answer, refusal: null };
  return {
    role: "assistant",
    content: answer === "" ? null : answer,
    refusal: null,
    tool_calls: calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })),
  };
}

/** The delta of one streamed step: a text piece, the start of a tool call, or a piece of its arguments. */
function openAiDelta(step) {
  if (step.text !== undefined) return { content: step.text };
  const { index, call } = step;
  if (step.start) return { tool_calls: [{ index, id: call.id, type: "function", function: { name: call.name, arguments: "" } }] };
  return { tool_calls: [{ index, function: { arguments: step.args } }] };
}

async function answerAnthropic(o) {
  const { changed, res, record, end, body, response, answer, pieces, calls, usage, finishReason } = o;
  const id = `msg_scripted_${record.seq}_${Date.now().toString(36)}`;
  const model = body.model;
  const stopReason = ANTHROPIC_STOP_REASONS[finishReason] ?? finishReason;
  const headers = { "request-id": `req_scripted_${record.seq}` };
  // Tool calls alone come without a text block, as Anthropic sends them; tool_use blocks follow any text block.
  const textBlock = calls.length === 0 || pieces.length > 0;
  const firstToolBlock = textBlock ? 1 : 0;

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
        content: [
          ...(textBlock ? [{ type: "text", text: answer }] : []),
          ...calls.map((c) => ({ type: "tool_use", id: c.id, name: c.name, input: toolInput(c.arguments) })),
        ],
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
  let open = null; // the index of the content block not stopped yet
  if (textBlock) {
    send("content_block_start", { index: 0, content_block: { type: "text", text: "" } });
    open = 0;
  }
  send("ping", {});
  changed();

  const sent = await streamPieces(o, (step, i) => {
    if (step.text !== undefined) {
      send("content_block_delta", { index: 0, delta: { type: "text_delta", text: step.text } });
    } else if (step.start) {
      // One block at a time: the previous one stops before the next starts.
      if (open !== null) send("content_block_stop", { index: open });
      open = firstToolBlock + step.index;
      send("content_block_start", { index: open, content_block: { type: "tool_use", id: step.call.id, name: step.call.name, input: {} } });
    } else {
      send("content_block_delta", { index: open, delta: { type: "input_json_delta", partial_json: step.args } });
    }
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
  if (open !== null) send("content_block_stop", { index: open });
  send("message_delta", { delta: { stop_reason: stopReason, stop_sequence: null }, ...(usage ? { usage: { output_tokens: outputTokens } } : {}) });
  if (usage) record.usage = usage;
  send("message_stop", {});
  end("completed");
  res.end();
  changed();
}

/** An unstreamed tool_use block's `input`: the arguments parsed, {} when they are not a JSON object. */
function toolInput(args) {
  try {
    const input = JSON.parse(args);
    return isObject(input) ? input : {};
  } catch {
    return {};
  }
}

const ANTHROPIC_STOP_REASONS = { stop: "end_turn", length: "max_tokens", tool_calls: "tool_use", content_filter: "refusal" };

/**
 * Prompt caching as the providers report it, for an unscripted answer:
 * `{read, written}` in rough tokens (a prefix counts the characters of its
 * text as `requestText` does, 4 a token; tools count none, as in the rough
 * prompt count).
 * - Anthropic caches the prefix (tools, system, messages, block by block)
 *   up to each block marked `cache_control` (at most 4; the request is
 *   refused past that) and reads, for each mark, the longest prefix cached
 *   before that ends at the mark or at one of the 19 blocks before it;
 *   `written` is what the longest marked prefix adds to what was read.
 * - OpenAI caches every request's prefixes (tools, then message by message)
 *   under its `prompt_cache_key` (requests without one share ""), and
 *   reads the longest cached before, in steps of 128 tokens; it reports no
 *   writes.
 * Neither caches a prefix under CACHE_MIN_TOKENS (1024, both providers' minimum).
 */
function promptCache(state, body, anthropic, roughIn) {
  const hash = createHash("sha256");
  let chars = 0;
  const ends = []; // per block: { digest, tokens, marked }
  // A block's identity leaves its mark out: a prefix reads the same whether or not it was marked.
  const unmark = (block) => {
    if (!isObject(block)) return block;
    const { cache_control: _, ...rest } = block;
    return rest;
  };
  const add = (block, text, marked) => {
    hash.update(JSON.stringify(block));
    chars += text.length;
    ends.push({ digest: hash.copy().digest("hex"), tokens: Math.min(roughIn, Math.ceil(chars / 4)), marked });
  };
  const marked = (block) => isObject(block) && block.cache_control !== undefined;
  for (const tool of body.tools ?? []) add(unmark(tool), "", marked(tool));
  if (anthropic) {
    for (const block of Array.isArray(body.system) ? body.system : body.system === undefined ? [] : [body.system]) add(unmark(block), contentText([block].flat()), marked(block));
    for (const m of body.messages) {
      for (const block of Array.isArray(m.content) ? m.content : [m.content]) add({ role: m.role, block: unmark(block) }, messageText({ content: [block].flat() }), marked(block));
    }
  } else {
    for (const m of body.messages) add(m, messageText(m), false);
  }
  const key = anthropic ? "anthropic:" : `openai:${body.prompt_cache_key ?? ""}:`;
  const hit = (at) => ends[at].tokens >= CACHE_MIN_TOKENS && state.cached.has(key + ends[at].digest);
  let read = 0;
  if (anthropic) {
    ends.forEach((end, at) => {
      if (!end.marked) return;
      for (let back = at; back >= 0 && back > at - ANTHROPIC_CACHE_LOOKBACK; back--) {
        if (hit(back)) {
          read = Math.max(read, ends[back].tokens);
          break;
        }
      }
    });
  } else {
    for (let at = ends.length - 1; at >= 0; at--) {
      if (hit(at)) {
        read = Math.floor((ends[at].tokens - CACHE_MIN_TOKENS) / 128) * 128 + CACHE_MIN_TOKENS;
        break;
      }
    }
  }
  let longest = 0;
  for (const end of ends) {
    if ((anthropic && !end.marked) || end.tokens < CACHE_MIN_TOKENS) continue;
    state.cached.add(key + end.digest);
    longest = Math.max(longest, end.tokens);
  }
  return { read, written: anthropic ? Math.max(0, longest - read) : 0 };
}

const CACHE_MIN_TOKENS = 1024;
const ANTHROPIC_CACHE_LOOKBACK = 20;
const ANTHROPIC_CACHE_MARKS_MAX = 4;

/** OpenAI usage from a scripted one (either naming) or the rough counts; null for `usage: null`. */
function openAiUsage(u, roughIn, roughOut, cache) {
  if (u === null) return null;
  if (u === undefined) {
    return {
      prompt_tokens: roughIn,
      completion_tokens: roughOut,
      total_tokens: roughIn + roughOut,
      prompt_tokens_details: { cached_tokens: cache?.read ?? 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    };
  }
  if ("input_tokens" in u || "output_tokens" in u) {
    const p = (u.input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0);
    const c = u.output_tokens ?? 0;
    return { prompt_tokens: p, completion_tokens: c, total_tokens: p + c };
  }
  return u;
}

/**
 * Anthropic usage from a scripted one (either naming) or the rough counts
 * (`input_tokens` then leaves out what the cache read and wrote, as the
 * API's does); null for `usage: null`.
 */
function anthropicUsage(u, roughIn, roughOut, cache) {
  if (u === null) return null;
  if (u === undefined) {
    const { read = 0, written = 0 } = cache ?? {};
    return { input_tokens: Math.max(0, roughIn - read - written), cache_creation_input_tokens: written, cache_read_input_tokens: read, output_tokens: roughOut };
  }
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
  const marks = [...(Array.isArray(body.tools) ? body.tools : []), ...(Array.isArray(body.system) ? body.system : []), ...body.messages.flatMap((m) => (Array.isArray(m?.content) ? m.content : []))].filter((b) => isObject(b) && b.cache_control !== undefined);
  if (marks.length > ANTHROPIC_CACHE_MARKS_MAX) return `A maximum of ${ANTHROPIC_CACHE_MARKS_MAX} blocks with cache_control may be provided. Found ${marks.length}.`;
  for (const b of marks) {
    const c = b.cache_control;
    if (!isObject(c) || c.type !== "ephemeral" || Object.keys(c).some((k) => k !== "type" && k !== "ttl")) return "cache_control: Input should be {type: 'ephemeral', ttl?}";
  }
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
      } else if (b.type === "tool_use") {
        const bad = checkToolUseBlock(b, at, m.role);
        if (bad) return bad;
      } else if (b.type === "tool_result") {
        const bad = checkToolResultBlock(b, at, m.role);
        if (bad) return bad;
      } else if (!["document", "thinking", "redacted_thinking"].includes(b.type)) {
        return `${at}.type: Input tag ${JSON.stringify(b.type)} does not match any of the expected tags`;
      }
    }
  }
  if (body.messages[0].role !== "user") return 'messages: first message must use the "user" role';
  return checkAnthropicTools(body.tools) ?? checkAnthropicToolTurns(body.messages);
}

/** Anthropic's rules for tool names and for tool_use ids. */
const ANTHROPIC_TOOL_NAME = /^[a-zA-Z0-9_-]{1,128}$/;
const ANTHROPIC_TOOL_USE_ID = /^[a-zA-Z0-9_-]+$/;

/** A tool_use block: in an assistant message, with an id, a name and an object `input`. */
function checkToolUseBlock(b, at, role) {
  for (const k of Object.keys(b)) if (!["type", "id", "name", "input", "cache_control"].includes(k)) return `${at}.tool_use.${k}: Extra inputs are not permitted`;
  if (typeof b.id !== "string") return `${at}.tool_use.id: Field required`;
  if (!ANTHROPIC_TOOL_USE_ID.test(b.id)) return `${at}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'`;
  if (typeof b.name !== "string" || b.name === "") return `${at}.tool_use.name: Field required`;
  if (!isObject(b.input)) return `${at}.tool_use.input: Input should be a valid dictionary`;
  if (role !== "assistant") return `${at}: tool_use blocks are only allowed in assistant messages`;
  return null;
}

/** A tool_result block: in a user message, naming its tool_use, its content a string or text/image blocks. */
function checkToolResultBlock(b, at, role) {
  for (const k of Object.keys(b)) {
    if (!["type", "tool_use_id", "content", "is_error", "cache_control"].includes(k)) return `${at}.tool_result.${k}: Extra inputs are not permitted`;
  }
  if (typeof b.tool_use_id !== "string") return `${at}.tool_result.tool_use_id: Field required`;
  if (!ANTHROPIC_TOOL_USE_ID.test(b.tool_use_id)) return `${at}.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'`;
  if (b.is_error !== undefined && typeof b.is_error !== "boolean") return `${at}.tool_result.is_error: Input should be a valid boolean`;
  if (Array.isArray(b.content)) {
    for (const [k, c] of b.content.entries()) {
      if (!isObject(c) || (c.type !== "text" && c.type !== "image")) return `${at}.tool_result.content.${k}: Input should be a text or image block`;
      if (c.type === "text" && typeof c.text !== "string") return `${at}.tool_result.content.${k}.text: Field required`;
      if (c.type === "text" && c.text === "") return "messages: text content blocks must be non-empty";
    }
  } else if (b.content !== undefined && typeof b.content !== "string") {
    return `${at}.tool_result.content: Input should be a valid string or list of content blocks`;
  }
  if (role !== "user") return `${at}: tool_result blocks are only allowed in user messages`;
  return null;
}

/** `tools`: custom tools `{name, description?, input_schema}` with unique names; server tools (`type: "<kind>_YYYYMMDD"`) pass. */
function checkAnthropicTools(tools) {
  if (tools === undefined) return null;
  if (!Array.isArray(tools)) return "tools: Input should be a valid list";
  const names = new Set();
  for (const [i, t] of tools.entries()) {
    if (!isObject(t)) return `tools.${i}: Input should be a valid dictionary`;
    if (t.type !== undefined && t.type !== "custom") {
      if (!/_\d{8}$/.test(String(t.type))) return `tools.${i}: Input tag ${JSON.stringify(t.type)} does not match any of the expected tags`;
    } else {
      const at = `tools.${i}.custom`;
      for (const k of Object.keys(t)) {
        if (!["type", "name", "description", "input_schema", "cache_control", "strict"].includes(k)) return `${at}.${k}: Extra inputs are not permitted`;
      }
      if (typeof t.name !== "string") return `${at}.name: Field required`;
      if (!ANTHROPIC_TOOL_NAME.test(t.name)) return `${at}.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'`;
      if (t.description !== undefined && typeof t.description !== "string") return `${at}.description: Input should be a valid string`;
      if (t.input_schema === undefined) return `${at}.input_schema: Field required`;
      if (!isObject(t.input_schema)) return `${at}.input_schema: Input should be a valid dictionary`;
      if (t.input_schema.type !== "object") return `${at}.input_schema.type: Input should be 'object'`;
    }
    if (names.has(t.name)) return "tools: Tool names must be unique.";
    names.add(t.name);
  }
  return null;
}

/**
 * The tool turns: each tool_use of an assistant message must be answered by a
 * tool_result in the very next (user) message, and a tool_result must answer
 * a tool_use of the message right before, as Anthropic insists.
 */
function checkAnthropicToolTurns(messages) {
  const idsOf = (m, type, key) => (Array.isArray(m?.content) ? m.content.filter((b) => b.type === type).map((b) => b[key]) : []);
  for (const [i, m] of messages.entries()) {
    if (m.role === "user" && Array.isArray(m.content)) {
      const offered = messages[i - 1]?.role === "assistant" ? idsOf(messages[i - 1], "tool_use", "id") : [];
      const answered = new Set();
      for (const [j, b] of m.content.entries()) {
        if (b.type !== "tool_result") continue;
        if (!offered.includes(b.tool_use_id)) {
          return `messages.${i}.content.${j}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${b.tool_use_id}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`;
        }
        if (answered.has(b.tool_use_id)) {
          return `messages.${i}.content.${j}: each \`tool_use\` must have a single result. Found multiple \`tool_result\` blocks with id: ${b.tool_use_id}`;
        }
        answered.add(b.tool_use_id);
      }
    }
    const uses = m.role === "assistant" ? idsOf(m, "tool_use", "id") : [];
    if (uses.length > 0) {
      const next = messages[i + 1];
      const answered = next?.role === "user" ? idsOf(next, "tool_result", "tool_use_id") : [];
      const missing = uses.filter((id) => !answered.includes(id));
      if (missing.length > 0) {
        return `messages.${i}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(", ")}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`;
      }
    }
  }
  return null;
}

/** OpenAI's rule for function names. */
const OPENAI_TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** A refusal of an OpenAI request: the message, and the `param` OpenAI names. */
const openAiRefusal = (message, param = null) => ({ message, param });

/** Why OpenAI would refuse this Chat Completions request (400), or null. */
function checkOpenAiRequest(body) {
  if (!isObject(body)) return openAiRefusal("the body is not a JSON object");
  if (typeof body.model !== "string" || body.model === "") return openAiRefusal("`model` is required", "model");
  if (!Array.isArray(body.messages) || body.messages.length === 0) return openAiRefusal("`messages` must be a non-empty array", "messages");
  if (body.messages.some((m) => !isObject(m) || typeof m.role !== "string")) return openAiRefusal("every message needs a `role`", "messages");
  return checkOpenAiTools(body.tools) ?? checkOpenAiToolTurns(body.messages);
}

/** `tools`: a list of `{type: "function", function: {name, description?, parameters?, strict?}}`. */
function checkOpenAiTools(tools) {
  if (tools === undefined) return null;
  if (!Array.isArray(tools)) return openAiRefusal("Invalid type for 'tools': expected an array of objects.", "tools");
  for (const [i, t] of tools.entries()) {
    const at = `tools[${i}]`;
    if (!isObject(t)) return openAiRefusal(`Invalid type for '${at}': expected an object.`, at);
    for (const k of Object.keys(t)) if (k !== "type" && k !== "function") return openAiRefusal(`Unknown parameter: '${at}.${k}'.`, `${at}.${k}`);
    if (t.type !== "function") return openAiRefusal(`Invalid value for '${at}.type': expected 'function'.`, `${at}.type`);
    const f = t.function;
    if (!isObject(f)) return openAiRefusal(`Missing required parameter: '${at}.function'.`, `${at}.function`);
    for (const k of Object.keys(f)) {
      if (!["name", "description", "parameters", "strict"].includes(k)) return openAiRefusal(`Unknown parameter: '${at}.function.${k}'.`, `${at}.function.${k}`);
    }
    if (typeof f.name !== "string") return openAiRefusal(`Missing required parameter: '${at}.function.name'.`, `${at}.function.name`);
    if (!OPENAI_TOOL_NAME.test(f.name)) {
      return openAiRefusal(`Invalid '${at}.function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.`, `${at}.function.name`);
    }
    if (f.description !== undefined && typeof f.description !== "string") return openAiRefusal(`Invalid type for '${at}.function.description': expected a string.`, `${at}.function.description`);
    // OpenAI lets `parameters` be left out (no arguments); when given it is a JSON Schema object.
    if (f.parameters !== undefined && !isObject(f.parameters)) return openAiRefusal(`Invalid type for '${at}.function.parameters': expected an object.`, `${at}.function.parameters`);
    if (f.strict !== undefined && f.strict !== null && typeof f.strict !== "boolean") return openAiRefusal(`Invalid type for '${at}.function.strict': expected a boolean.`, `${at}.function.strict`);
  }
  return null;
}

/**
 * The tool turns: an assistant message's `tool_calls` must be answered, each,
 * by the `tool` messages right after it, and a `tool` message must answer a
 * call of that assistant message, as OpenAI insists.
 */
function checkOpenAiToolTurns(messages) {
  let pending = null; // the last assistant message with tool_calls: { at, ids, answered }
  const unanswered = () => {
    const missing = pending.ids.filter((id) => !pending.answered.has(id));
    if (missing.length === 0) return null;
    return openAiRefusal(
      `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${missing.join(", ")}`,
      `messages.[${pending.at}].role`,
    );
  };
  for (const [i, m] of messages.entries()) {
    if (m.role === "tool") {
      const bad = checkOpenAiToolMessage(m, i);
      if (bad) return bad;
      if (pending === null) return openAiRefusal("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.", `messages.[${i}].role`);
      if (!pending.ids.includes(m.tool_call_id)) {
        return openAiRefusal(`Invalid parameter: 'tool_call_id' of '${m.tool_call_id}' not found in 'tool_calls' of previous message.`, `messages.[${i}].tool_call_id`);
      }
      if (pending.answered.has(m.tool_call_id)) {
        return openAiRefusal(`Invalid parameter: 'tool_call_id' of '${m.tool_call_id}' has more than one response message.`, `messages.[${i}].tool_call_id`);
      }
      pending.answered.add(m.tool_call_id);
      continue;
    }
    if (pending !== null) {
      const bad = unanswered();
      if (bad) return bad;
      pending = null;
    }
    if (m.role === "assistant") {
      const bad = checkOpenAiAssistantMessage(m, i);
      if (bad) return bad;
      if (Array.isArray(m.tool_calls)) pending = { at: i, ids: m.tool_calls.map((c) => c.id), answered: new Set() };
    }
  }
  return pending === null ? null : unanswered();
}

/** An assistant message: well-formed `tool_calls` if any; content only optional with them. */
function checkOpenAiAssistantMessage(m, i) {
  const at = `messages[${i}]`;
  if (m.tool_calls === undefined || m.tool_calls === null) {
    if (m.content === undefined || m.content === null) return openAiRefusal("Invalid value for 'content': expected a string, got null.", `messages.[${i}].content`);
    return null;
  }
  if (!Array.isArray(m.tool_calls)) return openAiRefusal(`Invalid type for '${at}.tool_calls': expected an array of objects.`, `${at}.tool_calls`);
  if (m.tool_calls.length === 0) {
    return openAiRefusal(`Invalid '${at}.tool_calls': empty array. Expected an array with minimum length 1, but got an empty array instead.`, `${at}.tool_calls`);
  }
  for (const [j, c] of m.tool_calls.entries()) {
    const ct = `${at}.tool_calls[${j}]`;
    if (!isObject(c)) return openAiRefusal(`Invalid type for '${ct}': expected an object.`, ct);
    if (typeof c.id !== "string" || c.id === "") return openAiRefusal(`Missing required parameter: '${ct}.id'.`, `${ct}.id`);
    if (c.type !== "function") return openAiRefusal(`Invalid value for '${ct}.type': expected 'function'.`, `${ct}.type`);
    if (!isObject(c.function)) return openAiRefusal(`Missing required parameter: '${ct}.function'.`, `${ct}.function`);
    if (typeof c.function.name !== "string" || c.function.name === "") return openAiRefusal(`Missing required parameter: '${ct}.function.name'.`, `${ct}.function.name`);
    if (typeof c.function.arguments !== "string") {
      return openAiRefusal(`Invalid type for '${ct}.function.arguments': expected a string, but got ${jsonType(c.function.arguments)} instead.`, `${ct}.function.arguments`);
    }
  }
  if (m.content !== undefined && m.content !== null && typeof m.content !== "string" && !Array.isArray(m.content)) {
    return openAiRefusal(`Invalid type for '${at}.content': expected one of a string or array of objects.`, `${at}.content`);
  }
  return null;
}

/** A `tool` message: the call it answers, and its result as a string (or text parts). */
function checkOpenAiToolMessage(m, i) {
  const at = `messages[${i}]`;
  if (typeof m.tool_call_id !== "string" || m.tool_call_id === "") return openAiRefusal(`Missing required parameter: '${at}.tool_call_id'.`, `${at}.tool_call_id`);
  const textParts = Array.isArray(m.content) && m.content.every((p) => isObject(p) && p.type === "text" && typeof p.text === "string");
  if (typeof m.content !== "string" && !textParts) {
    return openAiRefusal(`Invalid type for '${at}.content': expected one of a string or array of text parts, but got ${jsonType(m.content)} instead.`, `${at}.content`);
  }
  return null;
}

/** How OpenAI names a JSON value's type in its refusals. */
function jsonType(v) {
  if (v === null) return "null";
  if (v === undefined) return "nothing";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "object") return "an object";
  return `a ${typeof v}`;
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
