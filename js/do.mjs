// The Durable Object class a Worker exports: a thin JS shell around the Rust
// core (`ShiitakeCore`, built by scripts/build.sh into build/wasm/). It only
// routes: requests, the alarm and RPC calls go to the core through the trap
// recovery of js/do/recovery.mjs; the host hooks reach the core through the
// adapters of js/do/hooks.mjs (checked by js/do/config.mjs); the owner API
// is js/do/owner.mjs, the typed client's transport over this object's own
// serving path.
import { DurableObject } from "cloudflare:workers";
import * as wasm from "../build/wasm/shiitake.js";
import { ShiitakeError } from "./transport.mjs";
import { META_HEADER, metaHeaderValue } from "./meta.mjs";
import { metaHost } from "./meta-schema.mjs";
import { FLEET_WAIT_TIMEOUT_MS_MAX } from "./limits.mjs";
import { generation, guard, guardSync, isEventStream, resumable, runAlarm, serve, takeSpared } from "./do/recovery.mjs";
import { DIRECTORY_AGENT_ID, announceComputers, answerError, badText, extensionHost, fleetHost, jobsHost, mailDecision, modelsHost, peerError, runCommand, telemetryHost, toolHost } from "./do/hooks.mjs";
import { OwnerAgent, unlessAborted } from "./do/owner.mjs";

export { readWatch } from "./do/owner.mjs";

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
  // The extension host handed to the current core (extensionHost), if any:
  // it holds the core's activation resources until it is disposed.
  #extensions = undefined;
  // The directory (only on the object named shiitake.directory).
  #directory = null;
  #directoryGeneration = -1;
  // The owner API (`agent`), built on first use.
  #agent = null;
  // This object's id (hex), read once: every request names it.
  #id = null;

  /**
   * Host hook, asked first for every request the object receives. Return a
   * Response (or a promise of one) to answer it yourself, or `undefined` to
   * let the core serve it. Not async here: the default costs no await.
   */
  hostFetch(_request) {
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
   * Host hook: where OpenTelemetry traces go, or `undefined` (then the env's
   * `SHIITAKE_OTLP_ENDPOINT`, else none). Read once per instance. `{
   * endpoint, headers? }`: each turn is a trace (GenAI semantic
   * conventions: `invoke_agent`, `chat {model}`, `execute_tool {tool}`),
   * exported as OTLP/HTTP JSON to `{endpoint}/v1/traces` through `fetch` by
   * the host work lane, retried with its backoff. `headers` (an API key)
   * are secrets: never stored, redacted from logs. See
   * `src/host/traces.rs`.
   */
  telemetry() {
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
    const { decision, refusal } = await mailDecision(this.#fleet, mailJson);
    if (refusal !== undefined) return refusal;
    return this.#sync((core) => core.receiveMail(mailJson, decision));
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
    return guard(
      () => {
        if (this.#directory === null || this.#directoryGeneration !== generation) {
          this.#directory = new wasm.ShiitakeDirectory(this.ctx);
          this.#directoryGeneration = generation;
        }
        return this.#directory.call(requestJson);
      },
      () => peerError("runtime_restarted", 503, "the directory restarted while serving this call; retry it"),
    );
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
   * Fleet RPC (`js/fleet.mjs`'s createFleetSessions / createFleetDelegation,
   * or a peer's `agents.sessions.*`): one request `{grant, op, args,
   * meta?}` on this Agent's Sessions, its grant checked at this call.
   * Answers JSON `{value}` or `{error: {code, status, message}}`.
   */
  async fleetSessions(requestJson) {
    const bad = badText(requestJson, "request");
    if (bad !== undefined) return bad;
    await this.#ready();
    const self = typeof this.ctx?.id?.name === "string" ? this.ctx.id.name : "";
    return this.#sync((core) => core.fleetSessions(self, requestJson));
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
    const answer = await guard(
      () => this.#coreNow().eraseAgent(agentId),
      () => {
        throw answerError(peerError("runtime_restarted", 503, "the runtime restarted while erasing; retry it"));
      },
    );
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
    return guard(
      () => this.#coreNow().fleetSettlement(sessionId, commandId, timeoutMs),
      () => peerError("runtime_restarted", 503, "the runtime restarted while serving this call; retry it"),
    );
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
    await this.#extensions?.dispose?.();
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
   * Host-only (never a route): announces that the host's Computer list
   * (`tools().computers`) changed, or a Computer's advertisement behind an
   * unchanged entry: the captured Computer modules are stale at once, so
   * the next tool offer reads the list and describes every Computer again
   * (a dropped one too, before its retry interval). A call running keeps
   * the Computer it started on. Throws a TypeError given an argument, or
   * when tools() lists no Computers. Live state: a restarted object has
   * captured nothing and describes the list at its first offer anyway.
   */
  computersChanged(...args) {
    announceComputers(this, args);
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
    this.#agent ??= new OwnerAgent((url, init, meta) => this.#owner(url, init, meta), this);
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

  /** RPC: the Session's explicit model, `{model, reasoning?}` (`model` null when none is set). */
  sessionModel(sessionId, meta) {
    return this.#bound(meta).session(sessionId).model();
  }

  /** RPC: sets the Session's explicit model (`{model, reasoning?}`); what is stored. */
  setSessionModel(sessionId, input, meta) {
    return this.#bound(meta).session(sessionId).setModel(input);
  }

  /** RPC: clears the Session's explicit model; `{model: null}`. */
  clearSessionModel(sessionId, meta) {
    return this.#bound(meta).session(sessionId).clearModel();
  }

  /** RPC: the Session's token budget, `{tokens, set, spent, paused?}`. */
  sessionBudget(sessionId, meta) {
    return this.#bound(meta).session(sessionId).budget();
  }

  /** RPC: sets the Session's token budget (`{tokens}`) over the host's configuration; a raise resumes its paused turn. */
  setSessionBudget(sessionId, input, meta) {
    return this.#bound(meta).session(sessionId).setBudget(input);
  }

  /** RPC: clears the Session's token budget, back to the host's configuration. */
  clearSessionBudget(sessionId, meta) {
    return this.#bound(meta).session(sessionId).clearBudget();
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

  /** RPC: the usage ledger (`{from?, to?, sessionId?, groupBy?, limit?, cursor?}`). */
  usage(query) {
    return this.agent.usage(query);
  }

  /** RPC: the Agent's daily token budget, `{tokens, set, spent, resetsAt}`. */
  budget(meta) {
    return this.#bound(meta).budget();
  }

  /** RPC: sets the Agent's daily token budget (`{tokens}`) over the host's configuration; a raise resumes the turns it now covers. */
  setBudget(input, meta) {
    return this.#bound(meta).setBudget(input);
  }

  /** RPC: clears the Agent's daily token budget, back to the host's configuration. */
  clearBudget(meta) {
    return this.#bound(meta).clearBudget();
  }

  #bound(meta) {
    return meta === undefined ? this.agent : this.agent.withMeta(meta);
  }

  // One owner request (the owner API's fetch), served like a route but never
  // through hostFetch; a signal abandons the answer, never the work.
  async #owner(url, { signal, ...init }, meta) {
    if (this.ctx.id.name === DIRECTORY_AGENT_ID) {
      throw new ShiitakeError(404, "agent_reserved", `${DIRECTORY_AGENT_ID} is the fleet's directory, not an Agent`);
    }
    if (meta !== undefined) {
      let value;
      try {
        value = metaHeaderValue(meta);
      } catch (error) {
        throw new ShiitakeError(400, "invalid_meta", `the host's metadata is not a JSON value: ${error.message}`);
      }
      init.headers = { ...init.headers, [META_HEADER]: value };
    }
    const request = new Request(url, init);
    return unlessAborted(this.#respond(request), signal);
  }

  // The core's answer to a request; a watch's stream outlives a reset.
  async #respond(request) {
    // Awaited only while the host's initialize runs.
    const initializing = this.#ready();
    if (initializing !== null) await initializing;
    const response = await this.#serve(request);
    return request.method === "GET" && isEventStream(response) ? resumable((again) => this.#serve(again), request, response) : response;
  }

  // The core; to await before using it: the host's initialize while it
  // runs (a promise), else null.
  #ready() {
    this.#coreNow();
    return this.#initializing;
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
    // A watch resumes after a reset; an ACP prompt stream (a POST) cannot
    // be sent again: its client retries with the same requestId.
    return this.#respond(request);
  }

  // The core's answer, with trap recovery (js/do/recovery.mjs).
  #serve(request) {
    this.#id ??= this.ctx.id.toString();
    return serve(() => this.#coreNow(), this.#id, request);
  }

  async alarm() {
    await this.#ready();
    return runAlarm(() => this.#coreNow(), this.ctx.id.toString());
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
    return guardSync(() => call(this.#coreNow()));
  }

  #coreNow() {
    // A core built before a reset points into the dropped instance.
    if (this.#core === null || this.#coreGeneration !== generation) {
      const fleet = fleetHost(this);
      this.#fleet = fleet;
      // The replaced core's activation resources are disposed (the new
      // core activates its own when it opens).
      this.#extensions?.dispose?.();
      const extensions = extensionHost(this);
      this.#extensions = extensions;
      const core = new wasm.ShiitakeCore(
        this.ctx,
        this.env,
        toolHost(this, fleet !== undefined),
        extensions,
        takeSpared(this.ctx.id.toString()),
        jobsHost(this),
        fleet,
        modelsHost(this),
        metaHost(this),
        telemetryHost(this),
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
      this.#extensions?.dispose?.();
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

/**
 * The Agent directory inside a host's own Durable Object and its
 * transaction (seed: `createAgentDirectory(sql)`): the same rules as the
 * reserved `shiitake.directory` object (src/fleet/directory.rs), run over
 * `sql` (`this.ctx.storage.sql`; the directory's tables join the versioned
 * schema there). Call its methods inside `this.ctx.storage.transactionSync`:
 * each answers `{value, facts}` — the directory's answer and the lifecycle
 * facts the mutation made (`created`, `registered`, `archived`,
 * `unarchived`, `erased`; none for a replay, a repeat or a read) — so the
 * host's projection commits with the directory change; a throw rolls back
 * both. Refusals throw an Error with `code` and `status`.
 */
export function createAgentDirectory(sql) {
  if (typeof sql?.exec !== "function") throw new TypeError("createAgentDirectory(sql): sql must be a Durable Object's ctx.storage.sql");
  // Writes run inside the caller's transaction, which commits or rolls back
  // all of them with the host's own.
  const storage = { sql, transactionSync: (work) => work() };
  const run = (request) => {
    const json = JSON.stringify(request);
    const bad = badText(json, "request");
    if (bad !== undefined) throw answerError(bad);
    // A fresh directory a call: its table cache never outlives a
    // transaction the caller rolls back.
    const directory = new wasm.ShiitakeDirectory({ storage });
    try {
      const answer = guardSync(() => directory.callWithFacts(json));
      const parsed = JSON.parse(answer);
      if (parsed.error !== undefined) throw answerError(answer);
      return parsed;
    } finally {
      directory.free();
    }
  };
  return {
    create: ({ creator, requestId, name, model, reasoning }) => run({ op: "create", creator, requestId, name, model, reasoning }),
    register: (agentId) => run({ op: "register", agentId }),
    lookup: (agentId) => run({ op: "lookup", agentId }),
    list: ({ archived, cursor, limit } = {}) => run({ op: "list", archived, cursor, limit }),
    setArchived: ({ caller, agentId, archived }) => run({ op: "setArchived", caller, agentId, archived }),
    erase: (agentId) => run({ op: "erase", agentId }),
  };
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

