// The Durable Object class a Worker exports: a thin JS shell around the Rust
// core (`ShiitakeCore`, built by scripts/build.sh into build/wasm/).
import { DurableObject } from "cloudflare:workers";
import * as wasm from "../build/wasm/shiitake.js";
import { runGuest } from "./execute.mjs";
import { WORKSPACE } from "./files.mjs";
import { readBounded } from "./bounded.mjs";
import { manifestOf, normalizeRoster, runHook } from "./extensions.mjs";
import { ShiitakeError, SseParser } from "./client.mjs";
import { META_HEADER, metaHeaderValue } from "./meta.mjs";
import { metaHost } from "./meta-schema.mjs";
import { isPlainObject } from "./guards.mjs";

// One wasm instance serves every Durable Object of this isolate. A Rust panic
// (panic=abort) traps it as a WebAssembly.RuntimeError and leaves its memory
// unusable, so the shim swaps in a fresh instance and each object rebuilds its
// core from SQLite on its next call: nothing the core needs lives only in
// memory.
let generation = 0;

// Rejecters of the calls into the core that are still awaited. A trap inside
// a microtask that Rust queued never settles the promise the caller holds; it
// surfaces as a global `error` event instead, which fails them all.
const inflight = new Set();

// The core's panic hook reports, just before the trap, which Agent and
// Session were running and which turns every object held (src/host/blame.rs).
// After the reset each object's fresh core resumes its interrupted turns at
// their current attempt, except the trapping Session's, which counts a new
// one. The first report of an instance names the trap: a call into the dead
// instance before the reset may panic again on its broken state.
let lastReport = null;
// The reset that ended the last generation: `{generation, report, spared}`
// (`spared`: the objects whose turns it spared).
let lastReset = { generation: 0, report: null, spared: new Set() };
// Durable Object id -> its turns to resume without a new attempt (head ->
// Session), until its fresh core takes them. Kept across resets: an object
// whose core was not rebuilt since ran nothing a later trap could blame.
const spared = new Map();
// Objects whose spared turns are kept at most; past it the oldest entry is
// dropped (its turns then count an attempt, as after a crash).
const SPARED_OBJECTS_MAX = 1_024;
// Watch streams to resume with a fresh snapshot after a reset.
const watches = new Set();
// Reads (GET/HEAD, settlement long polls among them) a reset cut off are
// served again by the fresh instance. Resets that may be their own doing (a
// trap in this object outside any turn, or one blamed on no one) count, at
// most this many times each; a turn's trap never does (that turn counts an
// attempt). An alarm a reset cut off is run again at most this many times.
const READ_RETRIES_MAX = 3;
// Consecutive resets a watch stream survives; past it the stream ends and
// the client reconnects (docs/http.md).
const WATCH_RESUMES_MAX = 8;
// The Retry-After (seconds) of a request a reset cut off (503 runtime_restarted).
const RESTART_RETRY_AFTER_S = 1;
// The longest settlement long poll (src/limits.rs; checked like JSON_DEPTH_MAX).
const SETTLEMENT_TIMEOUT_MS_MAX = 30_000;

function listen() {
  const listening = generation;
  wasm.setTrapReporter((json) => {
    if (listening !== generation || lastReport !== null) return;
    try {
      lastReport = JSON.parse(json);
    } catch {
      lastReport = null;
    }
  });
}
listen();

function isTrap(error) {
  return error instanceof WebAssembly.RuntimeError;
}

function recover(error, seenGeneration) {
  // Several callers may report the same trap; reset the instance only once.
  if (seenGeneration !== generation) return;
  const report = lastReport;
  lastReport = null;
  console.error(
    "shiitake: the wasm instance trapped; resetting it",
    report ? `(${report.message}; Agent ${report.agent ?? "unknown"}, Session ${report.session ?? "none"})` : "",
    error,
  );
  generation++;
  lastReset = { generation, report, spared: new Set() };
  // Blame only a trap raised inside a known scope; otherwise every turn
  // counts an attempt, as after a crash.
  if (report?.agent) {
    for (const [agent, head, session] of report.held ?? []) {
      if (agent === report.agent && session === report.session) continue;
      spare(agent, head, session);
      lastReset.spared.add(agent);
    }
  }
  for (const reject of inflight) reject(error);
  inflight.clear();
  wasm.__wbg_reset_state();
  listen();
  for (const watch of watches) watch.interrupt();
}

function spare(agent, head, session) {
  let heads = spared.get(agent);
  if (heads === undefined) {
    if (spared.size >= SPARED_OBJECTS_MAX) spared.delete(spared.keys().next().value);
    heads = new Map();
    spared.set(agent, heads);
  }
  heads.set(head, session);
}

// Whether the reset that ended generation `seen` may be the doing of object
// `id`'s own request: a trap in its code outside any turn, one blamed on no
// one, or one not known (several resets since).
function selfInflicted(seen, id) {
  const report = lastReset.generation === seen + 1 ? lastReset.report : null;
  return !report?.agent || (report.agent === id && !report.session);
}

// Whether the reset that ended generation `seen` spared turns of object `id`.
function sparedAny(seen, id) {
  return lastReset.generation === seen + 1 && lastReset.spared.has(id);
}

if (typeof globalThis.addEventListener === "function") {
  globalThis.addEventListener("error", (event) => {
    if (isTrap(event.error)) recover(event.error, generation);
  });
}

function settleOrTrap(promise) {
  return new Promise((resolve, reject) => {
    inflight.add(reject);
    Promise.resolve(promise)
      .then(resolve, reject)
      .finally(() => inflight.delete(reject));
  });
}

// The answer to a request a reset cut off and not served again: retryable,
// since the request did nothing wrong (a write changed nothing or committed
// whole, so its retry with the same requestId is answered once).
function restarted(write) {
  const message = write
    ? "the runtime restarted while serving this request; send it again (a command with the same requestId is admitted at most once)"
    : "the runtime restarted repeatedly while serving this read; send it again";
  return new Response(JSON.stringify({ error: { code: "runtime_restarted", message } }), {
    status: 503,
    headers: { "content-type": "application/json", "retry-after": String(RESTART_RETRY_AFTER_S) },
  });
}

// A settlement long poll served again waits only what is left of its
// timeout, so a reset never extends the wait the client asked for.
function withTimeLeft(request, elapsedMs) {
  const url = new URL(request.url);
  if (!url.pathname.endsWith("/settlement")) return request;
  const search = url.search.replace(/([?&]timeoutMs=)([0-9]{1,9})(?=&|$)/, (_, key, ms) => `${key}${Math.max(0, Math.min(Number(ms), SETTLEMENT_TIMEOUT_MS_MAX) - elapsedMs)}`);
  if (search === url.search) return request;
  url.search = search;
  return new Request(url, request);
}

function isEventStream(response) {
  return response.status === 200 && response.body !== null && (response.headers.get("content-type") ?? "").startsWith("text/event-stream");
}

export class ShiitakeDO extends DurableObject {
  #core = null;
  #coreGeneration = -1;
  // The host's initialize(extensions) while it runs (a promise), else null.
  #initializing = null;
  // Why the host closed the runtime (`close`), else null: cores built
  // after a reset stay closed.
  #closed = null;
  // Why the host closed the browser bridge (`closeUi`), else null: cores
  // built after a reset keep it closed.
  #uiClosed = null;
  // The fleet transport handed to the current core (fleetHost), if any.
  #fleet = undefined;
  // The directory (only on the object named shiitake.directory).
  #directory = null;
  #directoryGeneration = -1;
  // The owner API (`agent`), built on first use.
  #agent = null;

  /**
   * Host hook, asked first for every request the object receives. Return a
   * Response to answer it yourself, or `undefined` to let the core serve it.
   */
  async hostFetch(_request) {
    return undefined;
  }

  /**
   * Host hook: the capabilities this Agent's model may use, or `undefined`
   * for none. Read once per instance. See `js/do.d.ts` (`ShiitakeTools`):
   * `{ modules: [{ id, operations: [{ name, description, inputSchema,
   * access, confirm?, replaySafe?, direct?, run(args, ctx) }] }], access?:
   * { grants?, required?, confirm? }, mcpServers?, ... }`. `run` and
   * `access.confirm` are called with `this` = the Durable Object.
   */
  tools() {
    return undefined;
  }

  /**
   * Host hook: the extension roster, or `undefined` for none. Read once per
   * instance. Each item is a definition (`defineExtension` from
   * `shiitake/extensions`) or `{ extension, grantKey?, feature?, config? }`.
   */
  extensions() {
    return undefined;
  }

  /**
   * Host hook: the host work lane, or `undefined` for none. Read once per
   * instance. `{ deliver(entries, { signal }), tick?({ signal }),
   * retryBaseMs?, retryMaxMs?, timeoutMs? }`: each pass hands `deliver` the
   * delivery outbox's oldest entries `[{ seq, key, body, at }]` (at most 64
   * a call, in `seq` order; acknowledged once its promise resolves), then
   * calls `tick`. A pass that throws, rejects or outlasts `timeoutMs` (at
   * most and by default 30 s; its signal aborts) is retried after
   * `retryBaseMs` (3 s), doubling up to `retryMaxMs` (60 s), until it
   * succeeds; entries are delivered at least once. Both are called with
   * `this` = the Durable Object. Without it, entries are acknowledged
   * undelivered. See `src/host/jobs.rs`.
   */
  hostJobs() {
    return undefined;
  }

  /**
   * Host hook: the fleet, or `undefined` for none. Read once per instance.
   * `{ namespace, acceptMail?(mail, { signal }), cancellationText?(meta) }`:
   * `namespace` is this Worker's own Durable Object namespace binding (each
   * Agent is `namespace.idFromName(agentId)`); with it the model gets the
   * `agents` module (`send`, `recall`, `wait`, `read`) and peers may call
   * this object's fleet RPC methods. `acceptMail` decides each received
   * mail: `{ meta? }` admits it with that host metadata (never the
   * sender's), `{ refuse: reason }` refuses it for good (`"left"`: this
   * Agent left the fleet); absent, every mail is admitted without
   * metadata. `cancellationText(meta)` gives the reply text of delegated
   * work a person cancelled (`meta`: the cancellation's metadata). Both are
   * called with `this` = the Durable Object. See `src/host/fleet.rs`.
   *
   * The Agent directory (`src/fleet/directory.rs`), held by the object
   * named `shiitake.directory` (reserved: it runs no Agent): `directory:
   * true` offers `agents.create` and `agents.list` (and registers each
   * Agent as its first request starts; a send to an Agent absent from the
   * directory is undeliverable `recipient_offline` at once); `archive: true`
   * (needs `directory`) offers `agents.archive` and `agents.unarchive`;
   * `workingDirectory(agentId)` names the absolute path an Agent's tools
   * use, as create and list report it (default `/`).
   */
  fleet() {
    return undefined;
  }

  /**
   * Host hook: the models this Agent may call, or `undefined` for the env's
   * (`SHIITAKE_MODELS`, else `SHIITAKE_MODEL`). Read once per instance.
   * `{ offered?, teamDefault?, keySources?, lastSwitch?(sessionId, meta),
   * contextWindows?, compaction? }`:
   * `offered` the `provider/model` addresses offered (at most 200; replaces
   * the env's), `teamDefault` the Team default (else `SHIITAKE_MODEL`),
   * `keySources` the provider names the owner's key-source restriction
   * allows (absent: all), `lastSwitch` the person's last manual switch for
   * a turn (`meta`: the turn's host metadata; answers an address or
   * undefined, at most MODEL_LAST_SWITCH_TIMEOUT_MS; called with `this` =
   * the Durable Object). A turn resolves: explicit Session, explicit Agent,
   * last switch, Team default, then the first offered model of a signed-in
   * provider (key or base URL set), skipping what is not offered, not
   * signed in or excluded by the key sources. `contextWindows` `{address:
   * tokens}` states each model's context window (replaces
   * `SHIITAKE_CONTEXT_WINDOWS`): a turn of a model with one compacts before
   * a call whose estimated input passes `compaction.trigger` (a fraction,
   * default 0.8; replaces `SHIITAKE_COMPACTION_TRIGGER`); `compaction.prompt`
   * is the summary call's system prompt (replaces
   * `SHIITAKE_COMPACTION_PROMPT`). See `src/host/models.rs`, docs/http.md
   * "Compaction".
   */
  models() {
    return undefined;
  }

  /**
   * Host hook: the host metadata's schema and identity path as code, or
   * `undefined` for the env's (`SHIITAKE_META_SCHEMA`,
   * `SHIITAKE_IDENTITY_PATH`). Read once per instance. `{ schema?,
   * identityPath? }`: `schema` a JSON Schema object (validated by the core,
   * as the env's) or any synchronous Standard Schema (Zod 4, Effect,
   * Valibot...), run on each `x-shiitake-meta` value after the core's
   * 4,096-byte cap and strict-JSON check; its output (defaults, stripped
   * keys, transforms) is what is stored, canonical and capped again.
   * Invalid metadata answers 400 `invalid_meta` naming the field path
   * (`$.author.id: ...`). `identityPath` a JSON path (`$.author.id`) into
   * the stored value. Unknown keys, an asynchronous schema (detected at
   * startup by probing, else on first use) and meta() together with either
   * env var are refused: every request answers 503 `host_misconfigured`
   * naming why. See `js/meta-schema.mjs`.
   */
  meta() {
    return undefined;
  }

  /**
   * Fleet RPC: sets this Agent's explicit model, `choiceJson` =
   * `{model, reasoning?}` (what `agents.setModel` sends, and what a
   * directory's create calls for a new Agent's model). Checked against this
   * host's offered models, signed-in providers and key sources; the next
   * turn of every Session resolves it. Answers JSON `{value: {model,
   * reasoning?}}`, `{error: {code: "model_rejected", status: 422,
   * message}}`, or another `{error}` (`fleet_disabled` without a fleet).
   */
  async fleetSetModel(choiceJson) {
    const bad = badText(choiceJson, "choice");
    if (bad !== undefined) return bad;
    await this.#ready();
    return this.#sync((core) => core.fleetSetModel(choiceJson));
  }

  /**
   * Fleet RPC (a peer Agent's runtime calls it through the namespace stub):
   * admits one mail (JSON text, at most FLEET_BODY_BYTES_MAX) after the
   * host's `acceptMail` decision. Answers JSON `{value: receipt}` or
   * `{error: {code, status, message}}`; a runtime without a fleet refuses
   * (`fleet_disabled`).
   */
  async receiveMail(mailJson) {
    const bad = badText(mailJson, "mail");
    if (bad !== undefined) return bad;
    await this.#ready();
    const fleet = this.#fleet;
    let decision = {};
    if (fleet?.acceptMail !== undefined) {
      let mail;
      try {
        mail = JSON.parse(mailJson);
      } catch (error) {
        return peerError("invalid_request", 400, `mail: ${error.message}`);
      }
      const answer = await withinMs(ACCEPT_MAIL_TIMEOUT_MS, (signal) => fleet.acceptMail(mail, { signal }));
      if (answer.error !== undefined) return peerError("accept_mail_failed", 503, `acceptMail: ${answer.error}`);
      const refused = checkDecision(answer.value);
      if (refused !== undefined) return peerError("accept_mail_failed", 503, refused);
      decision = answer.value ?? {};
    }
    return this.#sync((core) => core.receiveMail(mailJson, JSON.stringify(decision)));
  }

  /**
   * Fleet RPC, served only by the object named `shiitake.directory`: one
   * directory request (JSON, `src/fleet/directory.rs` `Request`), answered
   * `{value}` or `{error}`. That object runs no Agent.
   */
  async fleetDirectory(requestJson) {
    const bad = badText(requestJson, "request");
    if (bad !== undefined) return bad;
    if (this.ctx.id.name !== DIRECTORY_AGENT_ID) {
      return peerError("not_directory", 404, `only the object named ${DIRECTORY_AGENT_ID} holds the fleet's directory`);
    }
    const seen = generation;
    try {
      if (this.#directory === null || this.#directoryGeneration !== generation) {
        this.#directory = new wasm.ShiitakeDirectory(this.ctx);
        this.#directoryGeneration = generation;
      }
      return this.#directory.call(requestJson);
    } catch (error) {
      if (isTrap(error)) {
        recover(error, seen);
        return peerError("runtime_restarted", 503, "the directory restarted while serving this call; retry it");
      }
      throw error;
    }
  }

  /**
   * Fleet RPC: the creator's archive (`{archived: true}`) or unarchive
   * (`{archived: false}`) of this Agent, after the directory's check:
   * refused (`busy`: `running` or `pending`) while work runs or waits,
   * else the flag is persisted (an archived Agent answers sends `left`).
   */
  async fleetMember(requestJson) {
    const bad = badText(requestJson, "request");
    if (bad !== undefined) return bad;
    await this.#ready();
    return this.#sync((core) => core.fleetMember(requestJson));
  }

  /**
   * Host-only (no model operation reaches it): erases Agent `agentId` of
   * this fleet: its directory entry is removed (its id remembered as
   * erased) and its Durable Object's storage deleted (`fleetErase`). Call
   * it on any object of the namespace whose fleet() has `directory: true`.
   * Resolves `{ agentId, erased }` (`erased`: an entry was removed; erasing
   * twice is no error); refusals throw an Error with `code` and `status`.
   */
  async eraseAgent(agentId) {
    const bad = badText(agentId, "agentId");
    if (bad !== undefined) throw answerError(bad);
    await this.#ready();
    const seen = generation;
    let answer;
    try {
      answer = await settleOrTrap(this.#coreNow().eraseAgent(agentId));
    } catch (error) {
      if (!isTrap(error)) throw error;
      recover(error, seen);
      throw answerError(peerError("runtime_restarted", 503, "the runtime restarted while erasing; retry it"));
    }
    const parsed = JSON.parse(answer);
    if (parsed.error !== undefined) throw answerError(answer);
    return parsed.value;
  }

  /**
   * Fleet RPC, host-only (`eraseAgent` calls it after the directory
   * forgot this Agent): closes the runtime and deletes this object's
   * storage (`ctx.storage.deleteAll()`) and alarm. A later request finds
   * an empty Agent.
   */
  async fleetErase() {
    const core = this.#core;
    this.#core = null;
    if (core !== null) {
      try {
        await core.close("this Agent was erased");
      } catch (error) {
        console.error("shiitake: closing an erased Agent", error);
      }
    }
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    return JSON.stringify({ value: { erased: true } });
  }

  /** Fleet RPC: one Session's bounded read (`queryJson`: `{limit?, cursor?}`). */
  async fleetRead(sessionId, queryJson) {
    const bad = badText(sessionId, "sessionId") ?? badText(queryJson, "query");
    if (bad !== undefined) return bad;
    await this.#ready();
    return this.#sync((core) => core.fleetRead(sessionId, queryJson));
  }

  /**
   * Fleet RPC: one command's settlement as `agents.wait` answers it,
   * waiting up to `timeoutMs` (0..=30000) for it to settle.
   */
  async fleetSettlement(sessionId, commandId, timeoutMs) {
    const bad = badText(sessionId, "sessionId") ?? badText(commandId, "commandId");
    if (bad !== undefined) return bad;
    if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > FLEET_WAIT_TIMEOUT_MS_MAX) {
      return peerError("invalid_request", 400, `timeoutMs: an integer in 0..=${FLEET_WAIT_TIMEOUT_MS_MAX}`);
    }
    await this.#ready();
    const seen = generation;
    try {
      return await settleOrTrap(this.#coreNow().fleetSettlement(sessionId, commandId, timeoutMs));
    } catch (error) {
      if (!isTrap(error)) throw error;
      recover(error, seen);
      return peerError("runtime_restarted", 503, "the runtime restarted while serving this call; retry it");
    }
  }

  /**
   * Fleet RPC: the recall of the send keyed `key` (its mail's requestId
   * here): pending work is cancelled, running or settled work is left
   * alone, and with nothing admitted a fence refuses a late delivery.
   */
  async fleetRecall(sessionId, key) {
    const bad = badText(sessionId, "sessionId") ?? badText(key, "key");
    if (bad !== undefined) return bad;
    await this.#ready();
    return this.#sync((core) => core.fleetRecall(sessionId, key));
  }

  /**
   * Closes the runtime: every request then answers 503 `runtime_closed` and
   * no new work starts in this instance (the durable work waits for a later
   * open). Aborts the running host work pass and the live turns, and
   * resolves once both have ended.
   */
  async close(reason = "the host closed the runtime") {
    this.#closed = String(reason);
    await this.#coreNow().close(this.#closed);
  }

  /**
   * Host-only (never a route): closes the browser bridge (`tools().ui`,
   * src/ui/) of this instance: every browser event stream ends, `ui` calls
   * waiting for a browser fail, the `/browser/...` routes answer 410
   * `ui_closed` and later runs borrow nothing (their `ui` calls fail with a
   * tool error saying the bridge is closed). Live state, like watches: a
   * restarted object (eviction, deploy) opens a new bridge.
   */
  closeUi(reason = "the host closed the browser bridge") {
    this.#uiClosed = String(reason);
    this.#sync((core) => core.closeUi(this.#uiClosed));
  }

  /**
   * Test builds only (`SHIITAKE_TEST_BUILD=1`): stages a delivery outbox
   * entry as an attention write would; `wake: false` leaves it for the next
   * wake (the alarm, a live tool's heartbeat).
   */
  testStageDelivery(key, body, { wake = true } = {}) {
    return this.#sync((core) => {
      if (typeof core.stageDelivery !== "function") throw new Error("testStageDelivery exists in test builds only");
      core.stageDelivery(key, JSON.stringify(body), wake);
    });
  }

  /**
   * Host hook, optional: `initialize(extensions)` runs when an instance
   * starts, before any queued or host work, to commit Agent-scope extension
   * commands (`extensions.command(id, name, input, { requestId })`). If it
   * throws (or its promise rejects), this instance stays closed: every
   * request answers 503 `runtime_closed` and the durable work waits for a
   * later open.
   */

  /**
   * Host-only: runs an extension command in process. `options`:
   * `{ sessionId?, requestId?, input? }` (no sessionId: an Agent-scope
   * command). Returns its result; refusals throw an Error with `code` and
   * `status`.
   */
  async extensionCommand(extensionId, command, options = {}) {
    await this.#ready();
    return this.#sync((core) => runCommand(core, extensionId, command, options));
  }

  /** Host-only: resumes a stopped extension; returns its status. */
  async resumeExtension(extensionId) {
    await this.#ready();
    return this.#sync((core) => JSON.parse(core.resumeExtension(extensionId)));
  }

  /** Host-only: every roster extension's status. */
  async extensionStatuses() {
    await this.#ready();
    return this.#sync((core) => JSON.parse(core.extensionStatuses()));
  }

  /**
   * The owner API (in-process, for code inside the object): `this.agent`
   * is the unbound owner; `this.agent.withMeta(meta)` binds host metadata.
   * Every call is served by the same core path as the HTTP routes of
   * docs/http.md (a request built here, never through `hostFetch`); answers
   * are return values, refusals throw `ShiitakeError` (`code`, `status`).
   */
  get agent() {
    this.#agent ??= new OwnerAgent((method, path, options) => this.#owner(method, path, options), this);
    return this.#agent;
  }

  // ---- Workers RPC: the owner API on the stub (the caller is the host
  // Worker, so `meta` is the host's metadata, checked like x-shiitake-meta).
  // Refusals throw Errors with `code` and `status`.

  /** RPC: admits a prompt (`{requestId, text, images?, delivery?}`); the Receipt. */
  prompt(sessionId, input, meta) {
    return this.#bound(meta).session(sessionId).prompt(input);
  }

  /** RPC: records an operator line (`{requestId, text}`); the Receipt. */
  operator(sessionId, input, meta) {
    return this.#bound(meta).session(sessionId).operator(input);
  }

  /** RPC: generates the answer to a user message again (`{requestId, entryId}`); the Receipt. */
  retry(sessionId, input, meta) {
    return this.#bound(meta).session(sessionId).retry(input);
  }

  /** RPC: selects the branch through an entry (`{requestId, entryId}`); the Receipt. */
  select(sessionId, input, meta) {
    return this.#bound(meta).session(sessionId).select(input);
  }

  /** RPC: the children of an entry (`{entryId, limit?, cursor?}`). */
  readBranches(sessionId, query, meta) {
    return this.#bound(meta).session(sessionId).branches(query);
  }

  /** RPC: admits a compaction of the Session's model context (`{requestId, instructions?}`); the Receipt. */
  compact(sessionId, input, meta) {
    return this.#bound(meta).session(sessionId).compact(input);
  }

  /** RPC: cancels a command (`{commandId, onlyIfPending?}`); the Receipt. */
  cancel(sessionId, input, meta) {
    return this.#bound(meta).session(sessionId).cancel(input);
  }

  /** RPC: cancels the running turn and the queued prompts (of `meta`'s principal when bound). */
  abort(sessionId, meta) {
    return this.#bound(meta).session(sessionId).abort();
  }

  /** RPC: the withdraw answer for `requestId`. */
  withdraw(sessionId, requestId, meta) {
    return this.#bound(meta).session(sessionId).withdraw(requestId);
  }

  /** RPC: one page of the Session read (`{limit?, cursor?}`). */
  readSession(sessionId, query, meta) {
    return this.#bound(meta).session(sessionId).read(query);
  }

  /** RPC: the command's CommandSettlement, or undefined while it is not settled at `timeoutMs` (0..30000). */
  readSettlement(sessionId, commandId, options, meta) {
    return this.#bound(meta).session(sessionId).readSettlement(commandId, { timeoutMs: options?.timeoutMs });
  }

  /** RPC: the newest pending prompt of `meta`'s principal (of anyone when unbound), or null. */
  latestPending(sessionId, meta) {
    return this.#bound(meta).session(sessionId).latestPending();
  }

  /**
   * RPC: the Session's watch as the bytes of its `text/event-stream`
   * (the same stream as GET /sessions/:id/watch; parse it with
   * `readWatch(stream)`). Cancel the stream to close the watch.
   */
  async watchSession(sessionId, meta) {
    return (await this.#bound(meta).session(sessionId).watchStream()).body;
  }

  /** RPC: a page of the Agent's Sessions (`{limit?, cursor?}`). */
  listSessions(query) {
    return this.agent.listSessions(query);
  }

  /** RPC: creates a Session (`sessionId` generated when omitted; `{from: {sessionId, entryId}}` forks); `{sessionId}`. */
  createSession(sessionId, options) {
    return this.agent.createSession(sessionId, options);
  }

  /** RPC: deletes a Session and all its work. */
  deleteSession(sessionId) {
    return this.agent.deleteSession(sessionId);
  }

  /** RPC: a page of the inbox (`{limit?, cursor?}`). */
  inbox(query) {
    return this.agent.inbox(query);
  }

  #bound(meta) {
    return meta === undefined ? this.agent : this.agent.withMeta(meta);
  }

  // One owner call through the serving path: `{request, response}`.
  async #owner(method, path, { query, body, meta } = {}) {
    if (this.ctx.id.name === DIRECTORY_AGENT_ID) {
      throw new ShiitakeError(404, "agent_reserved", `${DIRECTORY_AGENT_ID} is the fleet's directory, not an Agent`);
    }
    let target = path;
    const params = Object.entries(query ?? {}).filter(([, v]) => v !== undefined && v !== null);
    if (params.length > 0) target += `?${params.map(([k, v]) => `${k}=${encodeURIComponent(String(v))}`).join("&")}`;
    const headers = new Headers();
    if (meta !== undefined) {
      let value;
      try {
        value = metaHeaderValue(meta);
      } catch (error) {
        throw new ShiitakeError(400, "invalid_meta", `the host's metadata is not a JSON value: ${error.message}`);
      }
      headers.set(META_HEADER, value);
    }
    const init = { method, headers };
    if (body !== undefined) {
      headers.set("content-type", "application/json");
      init.body = JSON.stringify(body);
    }
    const request = new Request(new URL(target, OWNER_ORIGIN), init);
    await this.#ready();
    const response = await this.#serve(request);
    if (isEventStream(response)) return { request, response: this.#resumable(request, response) };
    return { request, response };
  }

  // The core, once the host's initialize (if any) has run on it.
  async #ready() {
    this.#coreNow();
    if (this.#initializing !== null) await this.#initializing;
  }

  async fetch(request) {
    // hostFetch may answer synchronously; only a promise is awaited, so the
    // common fall-through costs no extra turn of the event loop.
    let answer = this.hostFetch(request);
    if (typeof answer?.then === "function") answer = await answer;
    if (answer !== undefined) return answer;
    if (this.ctx.id.name === DIRECTORY_AGENT_ID) {
      const body = { error: { code: "agent_reserved", message: `${DIRECTORY_AGENT_ID} is the fleet's directory, not an Agent` } };
      return new Response(JSON.stringify(body), { status: 404, headers: { "content-type": "application/json" } });
    }
    await this.#ready();
    const response = await this.#serve(request);
    // A watch resumes after a reset; an ACP prompt stream (a POST) cannot
    // be sent again: its client retries with the same requestId.
    return isEventStream(response) && request.method === "GET" ? this.#resumable(request, response) : response;
  }

  // The core's answer, with trap recovery: a read a reset cut off is served
  // again (it changes nothing); a write is answered 503 and sent again by
  // its caller with the same requestId. A core built before the reset is
  // replaced by #coreNow (by generation), never dropped here: a sibling
  // call may already have built this generation's core.
  async #serve(request) {
    const read = request.method === "GET" || request.method === "HEAD";
    const started = Date.now();
    for (let own = 0; ; ) {
      const seen = generation;
      try {
        return await settleOrTrap(this.#coreNow().fetch(request));
      } catch (error) {
        if (!isTrap(error)) throw error;
        recover(error, seen);
        if (!read) return restarted(true);
        if (selfInflicted(seen, this.ctx.id.toString()) && ++own > READ_RETRIES_MAX) return restarted(false);
        request = withTimeLeft(request, Date.now() - started);
      }
    }
  }

  // A watch whose stream outlives a reset: the dead instance's stream is
  // dropped and the fresh core's is spliced in, starting with a `snapshot`
  // (as after lag), so the client never sits on a silent stream.
  #resumable(request, response) {
    const { readable, writable } = new TransformStream();
    const writer = writable.getWriter();
    const url = request.url;
    const headers = new Headers(request.headers);
    let interrupt = () => {};
    let reader;
    const watch = { interrupt: () => interrupt() };
    watches.add(watch);
    const pump = async (body) => {
      for (let resumes = 0; ; resumes++) {
        const current = body.getReader();
        reader = current;
        // The dead instance's stream never ends by itself: a reset cancels
        // it, which ends the pending read (no race set up per chunk).
        let reset = false;
        interrupt = () => {
          reset = true;
          current.cancel().catch(() => {});
        };
        for (;;) {
          const next = await current.read();
          if (reset || next.done) break; // reset, or the core ended it (Session deleted)
          await writer.write(next.value); // throws once the client went away
        }
        if (!reset || resumes >= WATCH_RESUMES_MAX) break;
        const fresh = await this.#serve(new Request(url, { method: "GET", headers }));
        if (!isEventStream(fresh)) {
          await fresh.body?.cancel().catch(() => {});
          break;
        }
        body = fresh.body;
      }
      await writer.close();
    };
    // A write fails once the client went away: the core's stream is
    // cancelled, which closes its watcher (src/host/watch.rs).
    pump(response.body)
      .catch(() => reader?.cancel().catch(() => {}))
      .finally(() => watches.delete(watch));
    return new Response(readable, { status: response.status, headers: response.headers });
  }

  async alarm() {
    await this.#ready();
    for (let attempt = 0; ; attempt++) {
      const seen = generation;
      try {
        return await settleOrTrap(this.#coreNow().alarm());
      } catch (error) {
        if (!isTrap(error)) throw error;
        recover(error, seen);
        // An object whose turns the reset spared resumes them at once; one
        // with nothing spared (its own code trapped) leaves the retry to
        // the runtime's alarm backoff.
        if (attempt >= READ_RETRIES_MAX || !sparedAny(seen, this.ctx.id.toString())) throw error;
      }
    }
  }

  /**
   * Host-only (an RPC method, never a session route): delivers a Session's
   * grants `{version, grants}`. Versions never move back: an older version
   * throws (`code: "grant_version_refused"`); the same version with other
   * grants replaces the stored ones. Answers `{delivered}`: "stored",
   * "replaced" or "unchanged".
   */
  deliverGrants(sessionId, delivery) {
    return this.#sync((core) => JSON.parse(core.deliverGrants(sessionId, JSON.stringify(delivery))));
  }

  /** Host-only: the Session's delivered grants `{version, grants}`, or null. */
  sessionGrants(sessionId) {
    return this.#sync((core) => JSON.parse(core.sessionGrants(sessionId)));
  }

  // A synchronous call into the core, with the same trap recovery as fetch.
  #sync(call) {
    const seen = generation;
    try {
      return call(this.#coreNow());
    } catch (error) {
      if (isTrap(error)) recover(error, seen);
      throw error;
    }
  }

  #coreNow() {
    // A core built before a reset points into the dropped instance.
    if (this.#core === null || this.#coreGeneration !== generation) {
      const id = this.ctx.id.toString();
      const heads = spared.get(id);
      spared.delete(id);
      const fleet = fleetHost(this);
      this.#fleet = fleet;
      const core = new wasm.ShiitakeCore(
        this.ctx,
        this.env,
        toolHost(this, fleet !== undefined),
        extensionHost(this),
        heads ? JSON.stringify([...heads]) : undefined,
        jobsHost(this),
        fleet,
        modelsHost(this),
        metaHost(this),
      );
      this.#core = core;
      this.#coreGeneration = generation;
      this.#initializing = null;
      if (this.#uiClosed !== null) core.closeUi(this.#uiClosed);
      if (this.#closed !== null) {
        core.close(this.#closed);
        return core;
      }
      if (typeof this.initialize === "function") this.#initialize(core);
    }
    return this.#core;
  }

  // Runs the host's initialize on a fresh core; a failure closes it.
  #initialize(core) {
    const handle = {
      command: (extensionId, command, input, options = {}) => runCommand(core, extensionId, command, { ...options, input }),
    };
    const fail = (error) => {
      const reason = String(error?.message ?? error);
      console.error("shiitake: initialize(extensions) failed; this instance stays closed:", reason);
      core.close(reason);
    };
    try {
      const done = this.initialize(handle);
      if (typeof done?.then === "function") {
        this.#initializing = Promise.resolve(done).then(
          () => {},
          (error) => fail(error),
        );
      }
    } catch (error) {
      fail(error);
    }
  }
}

// The origin of the requests the owner API builds (never leaves the object).
const OWNER_ORIGIN = "https://shiitake.owner";

// A Session's path. The core reads path segments as they are (docs/http.md):
// an id is passed byte for byte, except what would change the path's shape
// (`/`, `?`, `#`, `%`, ...), which is escaped so the core refuses it.
function sessionPath(sessionId, rest = "") {
  if (typeof sessionId !== "string") throw new ShiitakeError(400, "invalid_request", "sessionId: a string");
  return `/sessions/${encodeURIComponent(sessionId).replaceAll("%3A", ":")}${rest}`;
}

// The answer's value: parsed JSON (undefined for 204), or its error thrown.
async function answerOf({ response }) {
  const text = await response.text();
  if (response.status >= 400) {
    let error;
    try {
      error = JSON.parse(text)?.error;
    } catch {
      error = undefined;
    }
    throw new ShiitakeError(response.status, error?.code ?? `http_${response.status}`, error?.message ?? `HTTP ${response.status}`);
  }
  return text === "" ? undefined : JSON.parse(text);
}

// Rejects with the signal's reason when it aborts first (the work goes on).
function unlessAborted(promise, signal) {
  if (signal === undefined) return promise;
  signal.throwIfAborted();
  let onAbort;
  const aborted = new Promise((_, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
  });
  return Promise.race([promise, aborted]).finally(() => signal.removeEventListener("abort", onAbort));
}

/**
 * A Session watch's event stream (what `GET /sessions/:id/watch` and the
 * RPC `watchSession` serve) as an async iterator of `{event, data}`
 * (`data` parsed). Ends when the stream ends or `signal` aborts (then it
 * throws the signal's reason); leaving the loop cancels the stream.
 */
export async function* readWatch(stream, { signal } = {}) {
  const reader = stream.getReader();
  const parser = new SseParser();
  const onAbort = () => reader.cancel(signal.reason).catch(() => {});
  signal?.throwIfAborted();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (signal?.aborted) throw signal.reason;
      if (done) return;
      for (const { event, data } of parser.push(value)) yield { event, data: JSON.parse(data) };
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    reader.cancel().catch(() => {});
  }
}

// The owner API (`ShiitakeDO#agent`): each call one request through the
// object's serving path; nothing here decides.
class OwnerAgent {
  #call;
  #object;
  #meta;

  constructor(call, object, meta) {
    this.#call = call;
    this.#object = object;
    this.#meta = meta;
    this.grants = {
      deliver: (sessionId, delivery) => object.deliverGrants(sessionId, delivery),
    };
  }

  /** The same owner, its calls bound to the host metadata `meta`. */
  withMeta(meta) {
    return new OwnerAgent(this.#call, this.#object, meta);
  }

  /** Addresses a Session (no I/O). */
  session(sessionId) {
    return new OwnerSession((method, rest, options) => this.#call(method, sessionPath(sessionId, rest), { ...options, meta: this.#meta }));
  }

  async listSessions({ limit, cursor } = {}) {
    return answerOf(await this.#call("GET", "/sessions", { query: { limit, cursor }, meta: this.#meta }));
  }

  async createSession(sessionId, { from } = {}) {
    const body = {};
    if (sessionId !== undefined) body.sessionId = sessionId;
    if (from !== undefined) body.from = from;
    return answerOf(await this.#call("POST", "/sessions", { body, meta: this.#meta }));
  }

  async deleteSession(sessionId) {
    await answerOf(await this.#call("DELETE", sessionPath(sessionId), { meta: this.#meta }));
  }

  async inbox({ limit, cursor } = {}) {
    return answerOf(await this.#call("GET", "/inbox", { query: { limit, cursor }, meta: this.#meta }));
  }
}

class OwnerSession {
  #call;

  constructor(call) {
    this.#call = call;
  }

  async #command(body) {
    return answerOf(await this.#call("POST", "/commands", { body }));
  }

  prompt(input) {
    return this.#command({ ...input, type: "prompt" });
  }

  steer(input) {
    return this.prompt({ ...input, delivery: "steer" });
  }

  followUp(input) {
    return this.prompt({ ...input, delivery: "followUp" });
  }

  operator(input) {
    return this.#command({ ...input, type: "operator" });
  }

  compact(input) {
    return this.#command({ ...input, type: "compact" });
  }

  cancel(input) {
    return this.#command({ ...input, type: "cancel" });
  }

  retry(input) {
    return this.#command({ ...input, type: "retry" });
  }

  select(input) {
    return this.#command({ ...input, type: "select" });
  }

  async branches({ entryId, limit, cursor } = {}) {
    return answerOf(await this.#call("GET", "/branches", { query: { entryId, limit, cursor } }));
  }

  abort() {
    return this.#command({ type: "abort" });
  }

  async withdraw(requestId) {
    return answerOf(await this.#call("POST", "/withdraw", { body: { requestId } }));
  }

  async read({ limit, cursor, before } = {}) {
    return answerOf(await this.#call("GET", "", { query: { before: cursor ?? before, limit } }));
  }

  /** undefined while the command is not settled at the deadline (the route's null); aborting never cancels the command. */
  async readSettlement(commandId, { timeoutMs, signal } = {}) {
    const answer = await unlessAborted(this.#call("GET", "/settlement", { query: { commandId, timeoutMs } }), signal);
    return (await answerOf(answer)) ?? undefined;
  }

  async latestPending() {
    return (await answerOf(await this.#call("GET", "/pending/latest"))) ?? null;
  }

  // The watch's Response (its body the event stream), or its refusal thrown.
  async watchStream() {
    const answer = await this.#call("GET", "/watch");
    if (!isEventStream(answer.response)) await answerOf(answer);
    return answer.response;
  }

  /** The watch as an async iterator of `{event, data}`; abort `signal` (or leave the loop) to close it. */
  async *watch({ signal } = {}) {
    signal?.throwIfAborted();
    const opening = this.watchStream();
    let response;
    try {
      response = await unlessAborted(opening, signal);
    } catch (error) {
      // Aborted while it opened: the stream that still comes is closed.
      opening.then((r) => r.body?.cancel().catch(() => {}), () => {});
      throw error;
    }
    yield* readWatch(response.body, { signal });
  }
}

// One extension command through the core; the result parsed.
function runCommand(core, extensionId, command, { sessionId, requestId, input } = {}) {
  const text = core.extensionCommand(extensionId, command, sessionId, requestId, JSON.stringify(input ?? null));
  return JSON.parse(text);
}

// The extension host the core calls (src/host/extensions.rs): the roster as
// manifests, and one synchronous callback per call. Nothing here decides.
function extensionHost(object) {
  let entries;
  try {
    const roster = object.extensions();
    if (roster === undefined || roster === null) return undefined;
    entries = normalizeRoster(roster);
  } catch (error) {
    const message = String(error?.message ?? error);
    return { manifests: () => JSON.stringify({ error: message }), call: () => JSON.stringify({ ok: false, error: message }) };
  }
  const described = entries.map(manifestOf);
  const byId = new Map(described.map((manifest, i) => [manifest.id, entries[i]]));
  const manifests = JSON.stringify(described);
  return {
    manifests: () => manifests,
    call(requestText) {
      try {
        const request = JSON.parse(requestText);
        const entry = byId.get(request.ext);
        if (entry === undefined) return JSON.stringify({ ok: false, error: `extension ${request.ext} is not in the roster` });
        if (request.kind === "files") return JSON.stringify(captureFiles(object, request, runHook(entry, request)));
        return JSON.stringify(runHook(entry, request));
      } catch (error) {
        return JSON.stringify({ ok: false, error: String(error?.message ?? error) });
      }
    },
  };
}

// The ports the files grant holder's `files(context, run)` returned, per
// Durable Object, by `files@<commandId>` of the run (src/host/files_grant.rs
// keys its calls the same way); released when the run ends.
const grantPortsOf = new WeakMap();

function grantPorts(object) {
  let ports = grantPortsOf.get(object);
  if (ports === undefined) grantPortsOf.set(object, (ports = new Map()));
  return ports;
}

// A files hook's answer for the core: the port kept here for the run, its
// description (the workspace's bounds, or a JS port's `portKind`) as
// `value`.
function captureFiles(object, request, answer) {
  if (!answer.ok) return answer;
  const { files, ...rest } = answer;
  if (files === null || files === undefined) return { ...rest, value: null };
  if (files[WORKSPACE] !== undefined) return { ...rest, value: { workspace: files[WORKSPACE] } };
  grantPorts(object).set(`files@${request.event.commandId}`, files);
  return { ...rest, value: portKind(files) };
}

// What the core needs to know of a JS Files port: whether it supplies the
// patch engine, and whether its replace is atomic for one change only (the
// core then journals a patch: src/files/journal.rs).
function portKind(port) {
  return { patches: port.patches === true, stepwise: port.stepwise === true };
}

/**
 * Delivers a Session's grants straight into a Shiitake Durable Object's
 * storage, without starting its runtime: for host code that runs in the
 * object while Shiitake is cold. `state` is the DurableObjectState (`this.ctx`).
 * Same rules and answer as `ShiitakeDO#deliverGrants`.
 */
export function deliverSessionGrantsToStorage(state, sessionId, delivery) {
  return JSON.parse(wasm.deliverSessionGrantsToStorage(state, sessionId, JSON.stringify(delivery)));
}

// The host work lane the core calls (src/host/jobs.rs): hostJobs() checked
// key by key, and its callbacks as promises that never throw synchronously.
function jobsHost(object) {
  let config;
  try {
    config = object.hostJobs();
  } catch (error) {
    return { spec: () => JSON.stringify({ error: `hostJobs() threw: ${String(error?.message ?? error)}` }) };
  }
  if (config === undefined || config === null) return undefined;
  const refused = checkHostJobs(config);
  if (refused !== undefined) return { spec: () => JSON.stringify({ error: refused }) };
  const { deliver, tick, ...settings } = config;
  const spec = JSON.stringify({ ...settings, tick: typeof tick === "function" });
  return {
    spec: () => spec,
    async deliver(entries, signal) {
      await deliver.call(object, JSON.parse(entries), { signal });
    },
    async tick(signal) {
      await tick.call(object, { signal });
    },
  };
}

const HOST_JOBS_KEYS = { deliver: "function", tick: "function", retryBaseMs: "integer", retryMaxMs: "integer", timeoutMs: "integer" };

// Why `config` (what hostJobs() returned) cannot be used, or undefined. The
// core checks the numbers' ranges.
function checkHostJobs(config) {
  if (typeof config !== "object" || Array.isArray(config)) return "hostJobs() must return an object";
  for (const [key, value] of Object.entries(config)) {
    const kind = HOST_JOBS_KEYS[key];
    if (kind === undefined) return `hostJobs().${key}: unknown key \`${key}\`; known: ${Object.keys(HOST_JOBS_KEYS).join(", ")}`;
    if (value === undefined) continue;
    if (kind === "function" && typeof value !== "function") return `hostJobs().${key} must be a function`;
    if (kind === "integer" && !Number.isSafeInteger(value)) return `hostJobs().${key} must be an integer`;
  }
  if (typeof config.deliver !== "function") return "hostJobs().deliver is required (a function)";
  return undefined;
}

// The fleet transport the core calls (src/host/fleet.rs): fleet() checked key
// by key, this Agent's own id, and calls into the peers' Durable Objects of
// the same namespace, each answer bounded. Undefined without fleet().
function fleetHost(object) {
  let config;
  try {
    config = object.fleet();
  } catch (error) {
    return { spec: () => JSON.stringify({ error: `fleet() threw: ${String(error?.message ?? error)}` }) };
  }
  if (config === undefined || config === null) return undefined;
  const refused = checkFleet(config);
  if (refused !== undefined) return { spec: () => JSON.stringify({ error: refused }) };
  const { namespace, acceptMail, cancellationText, directory, archive, workingDirectory, models } = config;
  // workerd names an object addressed by idFromName (`ctx.id.name`).
  const self = typeof object.ctx?.id?.name === "string" && object.ctx.id.name !== "" ? object.ctx.id.name : undefined;
  const spec = JSON.stringify({
    ...(self !== undefined ? { self } : {}),
    cancellationText: typeof cancellationText === "function",
    directory: directory === true,
    archive: archive === true,
    workingDirectory: typeof workingDirectory === "function",
    models: models === true,
  });
  const stub = (agentId) => namespace.get(namespace.idFromName(agentId));
  // One call into a peer: its JSON answer, bounded; rejects when the peer
  // is unreachable, the signal aborts, or the answer is malformed.
  const call = async (signal, invoke) => {
    signal?.throwIfAborted();
    const aborted = new Promise((_, reject) => signal?.addEventListener("abort", () => reject(new Error("aborted")), { once: true }));
    aborted.catch(() => {});
    const answer = await Promise.race([invoke(), aborted]);
    if (typeof answer !== "string") throw new Error("the peer answered something other than JSON text (is it a ShiitakeDO?)");
    if (answer.length > FLEET_BODY_BYTES_MAX) throw new Error(`the peer's answer is over ${FLEET_BODY_BYTES_MAX} bytes`);
    return answer;
  };
  return {
    spec: () => spec,
    acceptMail: typeof acceptMail === "function" ? (mail, options) => acceptMail.call(object, mail, options) : undefined,
    send: (agentId, mail, signal) => call(signal, () => stub(agentId).receiveMail(mail)),
    read: (agentId, sessionId, query, signal) => call(signal, () => stub(agentId).fleetRead(sessionId, query)),
    settlement: (agentId, sessionId, commandId, timeoutMs, signal) => call(signal, () => stub(agentId).fleetSettlement(sessionId, commandId, timeoutMs)),
    recall: (agentId, sessionId, key, signal) => call(signal, () => stub(agentId).fleetRecall(sessionId, key)),
    directory: (request, signal) => call(signal, () => stub(DIRECTORY_AGENT_ID).fleetDirectory(request)),
    member: (agentId, request, signal) => call(signal, () => stub(agentId).fleetMember(request)),
    erase: (agentId, signal) => call(signal, () => (agentId === self ? object.fleetErase() : stub(agentId).fleetErase())),
    workingDirectory(agentId) {
      try {
        const path = workingDirectory.call(object, agentId);
        return typeof path === "string" ? path : undefined;
      } catch (error) {
        console.error("shiitake: fleet().workingDirectory threw", error);
        return undefined;
      }
    },
    setModel: (agentId, choice, signal) => call(signal, () => stub(agentId).fleetSetModel(choice)),
    cancellationText(meta) {
      try {
        const text = cancellationText.call(object, JSON.parse(meta));
        return typeof text === "string" && text !== "" ? text : undefined;
      } catch (error) {
        console.error("shiitake: fleet().cancellationText threw", error);
        return undefined;
      }
    },
  };
}

const FLEET_KEYS = { namespace: "namespace", acceptMail: "function", cancellationText: "function", directory: "boolean", archive: "boolean", workingDirectory: "function", models: "boolean" };

// The Agent id of the object holding the fleet's directory (reserved;
// src/fleet/directory.rs DIRECTORY_AGENT_ID).
const DIRECTORY_AGENT_ID = "shiitake.directory";

// Why `config` (what fleet() returned) cannot be used, or undefined.
function checkFleet(config) {
  if (typeof config !== "object" || Array.isArray(config)) return "fleet() must return an object";
  for (const [key, value] of Object.entries(config)) {
    const kind = FLEET_KEYS[key];
    if (kind === undefined) return `fleet().${key}: unknown key \`${key}\`; known: ${Object.keys(FLEET_KEYS).join(", ")}`;
    if (value === undefined) continue;
    if (kind === "function" && typeof value !== "function") return `fleet().${key} must be a function`;
    if (kind === "boolean" && typeof value !== "boolean") return `fleet().${key} must be a boolean`;
    if (kind === "namespace" && (typeof value?.get !== "function" || typeof value?.idFromName !== "function")) {
      return `fleet().${key} must be a Durable Object namespace binding (with get and idFromName), e.g. this.env.SHIITAKE`;
    }
  }
  if (config.namespace === undefined) return "fleet().namespace is required (this Worker's Durable Object namespace, e.g. this.env.SHIITAKE)";
  if (config.archive === true && config.directory !== true) return "fleet().archive needs fleet().directory: true (archiving is a directory change)";
  return undefined;
}

// The model host the core calls (src/host/models.rs): models() checked key
// by key, and the host's lastSwitch bounded in time, never rejecting.
// Undefined without models().
function modelsHost(object) {
  let config;
  try {
    config = object.models();
  } catch (error) {
    return { spec: () => JSON.stringify({ error: `models() threw: ${String(error?.message ?? error)}` }) };
  }
  if (config === undefined || config === null) return undefined;
  const refused = checkModels(config);
  if (refused !== undefined) return { spec: () => JSON.stringify({ error: refused }) };
  const { offered, teamDefault, keySources, lastSwitch, contextWindows, compaction } = config;
  const spec = JSON.stringify({ offered, teamDefault, keySources, lastSwitch: typeof lastSwitch === "function", contextWindows, compaction });
  return {
    spec: () => spec,
    async lastSwitch(sessionId, meta) {
      const answer = await withinMs(MODEL_LAST_SWITCH_TIMEOUT_MS, () => lastSwitch.call(object, sessionId, meta === undefined ? undefined : JSON.parse(meta)));
      if (answer.error !== undefined) return JSON.stringify({ error: `lastSwitch: ${answer.error}` });
      const value = answer.value;
      if (value === undefined || value === null) return JSON.stringify({ value: null });
      if (typeof value !== "string") return JSON.stringify({ error: "lastSwitch must return a provider/model string or undefined" });
      return JSON.stringify({ value });
    },
  };
}

const MODELS_KEYS = { offered: "strings", teamDefault: "string", keySources: "strings", lastSwitch: "function", contextWindows: "windows", compaction: "compaction" };

// Why `config` (what models() returned) cannot be used, or undefined.
function checkModels(config) {
  if (typeof config !== "object" || Array.isArray(config)) return "models() must return an object";
  for (const [key, value] of Object.entries(config)) {
    const kind = MODELS_KEYS[key];
    if (kind === undefined) return `models().${key}: unknown key \`${key}\`; known: ${Object.keys(MODELS_KEYS).join(", ")}`;
    if (value === undefined) continue;
    if (kind === "function" && typeof value !== "function") return `models().${key} must be a function`;
    if (kind === "string" && typeof value !== "string") return `models().${key} must be a provider/model string`;
    if (kind === "strings") {
      if (!Array.isArray(value) || value.some((v) => typeof v !== "string")) return `models().${key} must be an array of strings`;
      if (value.length > MODELS_OFFERED_MAX) return `models().${key}: at most ${MODELS_OFFERED_MAX} entries`;
    }
    // The core checks each address, window, trigger and prompt by name.
    if (kind === "windows" && (!isPlainObject(value) || Object.values(value).some((v) => !Number.isSafeInteger(v)))) {
      return `models().${key} must be an object of provider/model addresses to context windows in tokens (integers)`;
    }
    if (kind === "compaction") {
      if (!isPlainObject(value)) return `models().${key} must be an object { trigger?, prompt? }`;
      for (const k of Object.keys(value)) if (k !== "trigger" && k !== "prompt") return `models().compaction: unknown key \`${k}\`; known: trigger, prompt`;
      if (value.trigger !== undefined && typeof value.trigger !== "number") return "models().compaction.trigger must be a fraction of the window (a number)";
      if (value.prompt !== undefined && typeof value.prompt !== "string") return "models().compaction.prompt must be a string";
    }
  }
  return undefined;
}

// Why acceptMail's answer cannot be used, or undefined: `{meta?}` or
// `{refuse: reason}` (undefined accepts without metadata).
function checkDecision(value) {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object" || Array.isArray(value)) return "acceptMail must return { meta? } or { refuse: reason }";
  for (const key of Object.keys(value)) {
    if (key !== "meta" && key !== "refuse") return `acceptMail returned an unknown key \`${key}\`; known: meta, refuse`;
  }
  if (value.refuse !== undefined) {
    if (typeof value.refuse !== "string" || value.refuse === "") return "acceptMail's refuse must be a non-empty string (the reason)";
    if (value.meta !== undefined) return "acceptMail returned both meta and refuse";
  }
  return undefined;
}

// A fleet RPC answer refusing the call.
function peerError(code, status, message) {
  return JSON.stringify({ error: { code, status, message } });
}

// An Error carrying a fleet answer's `{error: {code, status, message}}`.
function answerError(answerJson) {
  const { error } = JSON.parse(answerJson);
  return Object.assign(new Error(`${error.code}: ${error.message}`), { code: error.code, status: error.status });
}

// A refusal when a fleet RPC argument is not a string within the bound.
function badText(value, name) {
  if (typeof value !== "string") return peerError("invalid_request", 400, `${name}: a string`);
  if (value.length > FLEET_BODY_BYTES_MAX) return peerError("payload_too_large", 413, `${name}: over ${FLEET_BODY_BYTES_MAX} bytes`);
  return undefined;
}

// Runs `work(signal)` for at most `ms`: `{value}` or `{error}` (a message),
// never rejecting; the signal aborts at the deadline.
async function withinMs(ms, work) {
  const controller = new AbortController();
  let timer;
  const deadline = new Promise((resolve) => {
    timer = setTimeout(() => {
      controller.abort();
      resolve({ error: `no answer within ${ms} ms` });
    }, ms);
  });
  try {
    const done = Promise.resolve()
      .then(() => work(controller.signal))
      .then(
        (value) => ({ value }),
        (error) => ({ error: String(error?.message ?? error) }),
      );
    return await Promise.race([done, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

// The tool host the core calls (src/host/tools.rs): the Agent's capabilities
// as data, and the calls the core decides to make. Nothing here decides a
// grant or bounds a payload; the core does both. With the fleet and no
// tools(), the host offers the `agents` module alone.
function toolHost(object, fleet = false) {
  let config;
  try {
    config = object.tools();
  } catch (error) {
    return { spec: () => JSON.stringify({ modules: [], error: String(error?.message ?? error) }) };
  }
  if ((config === undefined || config === null) && !fleet) return undefined;
  config ??= {};
  const refused = checkTools(config);
  if (refused !== undefined) return { spec: () => JSON.stringify({ modules: [], error: refused }) };
  const { confirm, ...accessData } = config.access ?? {};
  // A fresh core: the runs whose ports were kept are gone.
  const grantPortsNow = grantPorts(object);
  grantPortsNow.clear();
  const runs = new Map();
  const modules = [];
  const direct = [];
  let problem;
  for (const module of config.modules ?? []) {
    const operations = [];
    for (const { run, direct: isDirect, ...spec } of module?.operations ?? []) {
      if (typeof run !== "function") problem ??= `${module.id}.${spec.name}: run must be a function`;
      runs.set(`${module.id}\u0000${spec.name}`, run);
      if (isDirect) direct.push(`${module.id}.${spec.name}`);
      operations.push(spec);
    }
    modules.push({ ...module, operations });
  }
  // Files ports by the id of the module over each (`files`).
  const ports = new Map();
  let files;
  if (config.files !== undefined) {
    const { port, direct } = config.files;
    if (port[WORKSPACE] !== undefined) {
      files = { workspace: port[WORKSPACE], ...(direct !== undefined ? { direct } : {}) };
    } else {
      ports.set("files", port);
      files = { ...portKind(port), ...(direct !== undefined ? { direct } : {}) };
    }
  }
  // The Computers of the host's list as last read, by name.
  const computers = new Map();
  const loader = object.env?.LOADER;
  const spec = JSON.stringify({
    modules,
    direct,
    access: config.access === undefined ? null : accessData,
    confirm: typeof confirm === "function",
    loader: loader !== undefined,
    ...(config.mcpTimeoutMs !== undefined ? { mcpTimeoutMs: config.mcpTimeoutMs } : {}),
    ...(config.mcpRetryMs !== undefined ? { mcpRetryMs: config.mcpRetryMs } : {}),
    ...(files !== undefined ? { files } : {}),
    ...(config.computers !== undefined ? { computers: true } : {}),
    ...(config.computersTimeoutMs !== undefined ? { computersTimeoutMs: config.computersTimeoutMs } : {}),
    ...(config.ui !== undefined ? { ui: { id: config.ui.id, hasSession: config.ui.hasSession !== undefined } } : {}),
    ...(problem ? { error: problem } : {}),
  });
  // MCP requests go through the host's fetch (credentials in its headers).
  const mcpFetch = config.fetch ?? ((input, init) => fetch(input, init));
  return {
    spec: () => spec,
    mcpServers: () => JSON.stringify(config.mcpServers ?? []),
    // `onChunk` sees an event stream as it arrives (a tool call's progress).
    async mcpFetch(method, url, headers, body, signal, onChunk) {
      const response = await mcpFetch(url, { method, headers, body, redirect: "manual", signal });
      const contentType = response.headers.get("content-type");
      const stream = onChunk !== undefined && /^text\/event-stream/i.test(contentType ?? "");
      return {
        status: response.status,
        contentType,
        headers: [...response.headers],
        body: await readBounded(response, MCP_RESPONSE_BYTES_MAX + 1, stream ? onChunk : undefined),
      };
    },
    onUnavailable(report) {
      try {
        config.onUnavailable?.call(object, JSON.parse(report));
      } catch (error) {
        console.error("shiitake: onUnavailable threw", error);
      }
    },
    async invoke(moduleId, name, args, invocation, signal, progress) {
      let data;
      const images = [];
      let ended = false;
      const ctx = {
        ...JSON.parse(invocation),
        signal,
        display(value) {
          data = value;
        },
        // Live counters for the watch (`tool` frames): the core bounds
        // and paces them. A report after the call ended is dropped.
        progress(value) {
          if (ended || signal.aborted) return;
          const json = JSON.stringify(value);
          const refused = json === undefined ? "progress: the data is not JSON" : progress(json);
          if (refused !== undefined) throw new TypeError(refused);
        },
        image(image) {
          images.push(image);
        },
      };
      try {
        const result = await runs.get(`${moduleId}\u0000${name}`).call(object, JSON.parse(args), ctx);
        return JSON.stringify({
          result: result ?? null,
          ...(data === undefined ? {} : { data }),
          ...(images.length === 0 ? {} : { images }),
        });
      } catch (error) {
        return JSON.stringify({ error: String(error?.message ?? error) });
      } finally {
        ended = true;
      }
    },
    computersList() {
      try {
        const list = typeof config.computers === "function" ? config.computers.call(object) : config.computers;
        const refused = checkComputers(list);
        if (refused !== undefined) return JSON.stringify({ error: refused });
        computers.clear();
        for (const key of [...ports.keys()]) if (key.startsWith("computers.")) ports.delete(key);
        const described = list.map(({ computer, files, ...data }) => {
          computers.set(data.name, computer);
          if (files !== undefined) ports.set(`computers.${data.name}.files`, files);
          return { ...data, files: files !== undefined, ...(files !== undefined ? portKind(files) : {}) };
        });
        return JSON.stringify({ list: described });
      } catch (error) {
        return JSON.stringify({ error: String(error?.message ?? error) });
      }
    },
    async computerDescribe(name, signal) {
      const advertised = await computers.get(name).describe({ signal });
      return typeof advertised === "string" ? advertised : JSON.stringify(advertised);
    },
    async computerCall(name, operation, args, invocation, signal) {
      try {
        const computer = computers.get(name);
        if (computer === undefined) return JSON.stringify({ error: `no Computer named ${name} in the host's list` });
        const reply = await computer.call(operation, args, { ...JSON.parse(invocation), signal });
        return typeof reply === "string" ? reply : JSON.stringify(reply);
      } catch (error) {
        return JSON.stringify({ error: String(error?.message ?? error) });
      }
    },
    async filesCall(id, method, args, signal) {
      try {
        const port = ports.get(id) ?? grantPortsNow.get(id);
        if (port === undefined) return JSON.stringify({ error: `no files port ${id} (its run ended)` });
        const value = await port[method].call(port, ...JSON.parse(args), { signal });
        if (method === "read" && typeof value === "string" && value.length > FILE_BYTES_MAX) {
          return JSON.stringify({ error: `the file is over ${FILE_BYTES_MAX} bytes, the most the files module reads` });
        }
        return JSON.stringify({ value: value ?? null });
      } catch (error) {
        return JSON.stringify({ error: String(error?.message ?? error) });
      }
    },
    filesRelease(id) {
      grantPortsNow.delete(id);
    },
    async uiHasSession(sessionId, signal) {
      return (await config.ui.hasSession.call(object, sessionId, { signal })) === true;
    },
    async confirm(request, signal) {
      try {
        return (await confirm.call(object, JSON.parse(request), { signal })) === true;
      } catch {
        return false;
      }
    },
    execute(code, namespaces, dispatch, signal) {
      // Through the Worker's exported ShiitakeSandbox when there is one: the
      // guest worker is then released when the call returns, not when this
      // object's isolate next collects garbage (see js/execute.mjs).
      const sandbox = object.ctx?.exports?.ShiitakeSandbox;
      return runGuest(loader, { code, namespaces: [...namespaces], dispatch, signal, sandbox });
    },
  };
}

// What tools() may hold: each key is data (handed to the core as JSON) or a
// function (called by the shim). Anything else is refused by name rather
// than dropped by JSON.stringify, so a typo or a misplaced hook is not
// silently ignored.
const TOOLS_KEYS = {
  modules: "modules",
  access: "access",
  mcpServers: "mcpServers",
  mcpTimeoutMs: "data",
  mcpRetryMs: "data",
  fetch: "function",
  onUnavailable: "function",
  files: "files",
  computers: "computers",
  computersTimeoutMs: "data",
  ui: "ui",
};
const COMPUTER_KEYS = { id: "data", name: "data", computer: "computer", confirmCalls: "data", files: "port" };
const FILES_KEYS = { port: "port", direct: "data" };
// `tools().ui` (src/ui/): `id` names the App, `hasSession(sessionId)` says
// whether a browser may open that Session's bridge (default: it is stored).
const UI_KEYS = { id: "data", hasSession: "function" };
const PORT_METHODS = ["read", "stat", "list", "write", "replace"];
const ACCESS_KEYS = { grants: "data", required: "data", confirm: "function" };
const MODULE_KEYS = { id: "data", operations: "operations" };
// `direct: true`: every tool of the server is a direct tool of its own
// (no `execute` needed: Node, a Worker without LOADER).
const MCP_SERVER_KEYS = { name: "data", url: "data", headers: "data", direct: "data" };
const OPERATION_KEYS = {
  name: "data",
  description: "data",
  inputSchema: "data",
  access: "data",
  confirm: "data",
  replaySafe: "data",
  direct: "data",
  run: "function",
};
const MOVED = { confirm: "the confirm hook is `access.confirm`" };

// Why `config` (what tools() returned) cannot be used, or undefined.
function checkTools(config) {
  const where = (path) => `tools()${path}`;
  const object = (value, path, keys) => {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return `${where(path)} must be an object`;
    for (const [key, item] of Object.entries(value)) {
      const kind = keys[key];
      const at = `${path}.${key}`;
      if (kind === undefined) {
        const hint = path === "" && MOVED[key] ? ` (${MOVED[key]})` : "";
        return `${where(at)}: unknown key \`${key}\`${hint}; known: ${Object.keys(keys).join(", ")}`;
      }
      if (item === undefined) continue;
      const problem = check(item, at, kind);
      if (problem !== undefined) return problem;
    }
    return undefined;
  };
  const list = (value, path, each) => {
    if (!Array.isArray(value)) return `${where(path)} must be an array`;
    for (const [i, item] of value.entries()) {
      const problem = each(item, `${path}[${i}]`);
      if (problem !== undefined) return problem;
    }
    return undefined;
  };
  const check = (value, path, kind) => {
    switch (kind) {
      case "function":
        return typeof value === "function" ? undefined : `${where(path)} must be a function`;
      case "data":
        return plainData(value, path, where);
      case "access":
        return object(value, path, ACCESS_KEYS);
      case "modules":
        return list(value, path, (m, at) => object(m, at, MODULE_KEYS));
      case "mcpServers":
        return list(value, path, (server, at) => {
          const problem = object(server, at, MCP_SERVER_KEYS);
          if (problem !== undefined) return problem;
          if (server.direct !== undefined && typeof server.direct !== "boolean") return `${where(`${at}.direct`)} must be a boolean`;
          return undefined;
        });
      case "operations":
        return list(value, path, (op, at) => object(op, at, OPERATION_KEYS));
      case "ui":
        if (typeof value?.id !== "string") return `${where(path)}.id must be a string naming the App`;
        return object(value, path, UI_KEYS);
      case "files":
        if (value?.port === undefined) return `${where(path)}.port is required (sqliteWorkspace(), r2Files(bucket) or your own port)`;
        return object(value, path, FILES_KEYS);
      case "computers":
        return typeof value === "function" ? undefined : list(value, path, (c, at) => object(c, at, COMPUTER_KEYS));
      case "computer":
        for (const method of ["describe", "call"]) {
          if (typeof value?.[method] !== "function") return `${where(path)}.${method} must be a function (a Computer has describe and call; see serviceComputer)`;
        }
        return undefined;
      case "port":
        if (value === null || typeof value !== "object") return `${where(path)} must be a Files port`;
        if (value[WORKSPACE] !== undefined) return plainData(value[WORKSPACE], path, where);
        for (const method of PORT_METHODS) {
          if (typeof value[method] !== "function") return `${where(path)}.${method} must be a function (a Files port has ${PORT_METHODS.join(", ")})`;
        }
        return undefined;
    }
    return undefined;
  };
  return object(config, "", TOOLS_KEYS);
}

// Why the Computer list `tools().computers` gave (an array, or what its
// function returned) cannot be used, or undefined.
function checkComputers(list) {
  return Array.isArray(list) ? checkTools({ computers: list }) : "tools().computers must be an array or a function returning one";
}

// Why `value` is not plain JSON data (a function, symbol or bigint inside it
// would be dropped or throw in JSON.stringify), or undefined. Bounded by the
// core's own JSON depth bound.
function plainData(value, path, where, depth = 0) {
  if (depth > JSON_DEPTH_MAX) return `${where(path)} nests deeper than ${JSON_DEPTH_MAX} levels`;
  const type = typeof value;
  if (type === "function" || type === "symbol" || type === "bigint") {
    return `${where(path)} is a ${type}, which cannot be passed to the core (JSON data expected)`;
  }
  if (value === null || type !== "object") return undefined;
  for (const [key, item] of Object.entries(value)) {
    const problem = plainData(item, Array.isArray(value) ? `${path}[${key}]` : `${path}.${key}`, where, depth + 1);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

// Bytes of one answer or mail crossing between two Agents (src/limits.rs;
// checked like JSON_DEPTH_MAX). JS string length counts UTF-16 units, at
// most the UTF-8 bytes.
const FLEET_BODY_BYTES_MAX = 2_097_152;

// The longest agents.wait (src/limits.rs; checked like JSON_DEPTH_MAX).
const FLEET_WAIT_TIMEOUT_MS_MAX = 30_000;

// How long the host's acceptMail may decide one mail: well within the
// sender's FLEET_CALL_TIMEOUT_MS (10 s), so its delivery gets an answer.
const ACCEPT_MAIL_TIMEOUT_MS = 5_000;

// Offered model addresses models() may state (src/limits.rs; checked like
// JSON_DEPTH_MAX).
const MODELS_OFFERED_MAX = 200;

// How long the host's models().lastSwitch may take at a turn's start
// (src/limits.rs; checked like JSON_DEPTH_MAX).
const MODEL_LAST_SWITCH_TIMEOUT_MS = 5_000;

// Nesting of a JSON value crossing the capability boundary (src/limits.rs
// JSON_DEPTH_MAX; tests/e2e/limits-sync.test.mjs checks the copies).
const JSON_DEPTH_MAX = 64;

// Bytes of one file the files module handles (src/limits.rs FILE_BYTES_MAX;
// checked like JSON_DEPTH_MAX). JS string length counts UTF-16 units, at
// most the UTF-8 bytes; the core checks bytes again.
const FILE_BYTES_MAX = 4_194_304;

// Bytes of one MCP response body the core accepts (src/limits.rs; checked
// like JSON_DEPTH_MAX); one more is read so the core can tell an oversized
// body from a full one.
const MCP_RESPONSE_BYTES_MAX = 4_194_304;
