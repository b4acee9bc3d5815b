// Client entries v1 ("shiitake/client-entry"; seed shiitake.md "Client
// entries"): how a client presents one extension's state. No wasm, no Node
// imports, no dependencies (but ./guards.mjs): it bundles for the browser.
//
//   import { defineClientEntry } from "shiitake/client-entry";
//   export default defineClientEntry(contract, {
//     contribute: (view) => ({ chips: [], panel: [], timeline: { cells: [], omitted: 0 }, waiting: null }),
//   });
//
// An entry is data plus two optional callbacks; a host (createClientEntryHost)
// admits it, evaluates `contribute` once per changed slot (never per render),
// decodes what it returns at that seam and keeps the rows; it attaches
// `attach` to the selected Session and dispatches actions through the
// extension's own command route (there is no second action registry).
// Its bounds are the core's (src/limits.rs, through js/limits.mjs).

import { isPlainObject, isStandardSchema, isThenable } from "./guards.mjs";
import {
  AGENT_ID_BYTES_MAX,
  CLIENT_CHIPS_MAX,
  CLIENT_LABEL_CHARS_MAX,
  CLIENT_PANEL_ROWS_MAX,
  CLIENT_ROWS_MAX,
  CLIENT_TIMELINE_CELLS_MAX,
  SESSION_ID_BYTES_MAX,
} from "./limits.mjs";

export const CLIENT_PROTOCOL = "shiitake.client/v1";
export { CLIENT_CHIPS_MAX, CLIENT_LABEL_CHARS_MAX, CLIENT_PANEL_ROWS_MAX, CLIENT_ROWS_MAX, CLIENT_TIMELINE_CELLS_MAX };

const ENTRY_KEYS = ["protocol", "id", "attach", "contribute"];
const EXTENSION_ID = /^[a-z][a-z0-9_]{0,31}$/;
const ROW_ID = /^[A-Za-z0-9_.:-]{1,128}$/;
const CELL_ID = /^[1-9][0-9]*$/;
/** Session and Agent ids: the core's alphabet and bounds (ASCII, so characters are bytes). */
const SESSION_ID = new RegExp(`^[A-Za-z0-9._:-]{1,${SESSION_ID_BYTES_MAX}}$`);
const AGENT_ID = new RegExp(`^[A-Za-z0-9._:-]{1,${AGENT_ID_BYTES_MAX}}$`);
const STATUSES = ["running", "stopped", "offline"];
/** Errors a host keeps for `errors` (the newest; `onError` hears every one). A client-side bound only. */
const ERRORS_KEPT = 64;

/** A refusal by this module: an entry's shape, a contribution, an action. `code` names the rule. */
export class ClientEntryError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = "ClientEntryError";
    this.code = code;
  }
}

const refuse = (code, message) => new ClientEntryError(code, message);




function closedKeys(object, allowed, where) {
  const unknown = Object.keys(object).filter((k) => !allowed.includes(k));
  if (unknown.length > 0) throw refuse("invalid_output", `${where}: unknown key ${JSON.stringify(unknown[0])} (allowed: ${allowed.join(", ")})`);
}

function codePoints(text) {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** Whether `value` is JSON (not: functions, cycles, class instances, non-finite numbers). */
function isJson(value, seen = new Set()) {
  switch (typeof value) {
    case "string":
    case "boolean":
      return true;
    case "number":
      return Number.isFinite(value);
    case "object": {
      if (value === null) return true;
      if (seen.has(value)) return false;
      seen.add(value);
      const ok = Array.isArray(value) ? value.every((v) => isJson(v, seen)) : isPlainObject(value) && Object.values(value).every((v) => isJson(v, seen));
      seen.delete(value);
      return ok;
    }
    default:
      return false;
  }
}

// ---------------------------------------------------------------------------
// Authoring and admission

/** The projection decoder each entry captured, out of the installed shape. */
const DECODERS = new WeakMap();

/**
 * `contract` is the extension's client contract (`{ id, projection?: { schema } }`,
 * as `bindSessionExtension` takes it); its projection schema (a Standard
 * Schema, validated synchronously) becomes the entry's decoder. `callbacks`:
 * `{ attach?, contribute? }`, at least one.
 */
export function defineClientEntry(contract, callbacks) {
  const fn = "defineClientEntry";
  if (typeof contract !== "object" || contract === null) throw new TypeError(`${fn}: the contract must be an object`);
  const id = contract.id;
  if (typeof id !== "string" || !EXTENSION_ID.test(id)) throw new TypeError(`${fn}: the contract's id must be an extension id matching ${EXTENSION_ID}`);
  let schema = null;
  if (contract.projection !== undefined) {
    if (typeof contract.projection !== "object" || contract.projection === null) throw new TypeError(`${fn}: the contract's projection must be an object { schema? }`);
    if (contract.projection.schema !== undefined) {
      if (!isStandardSchema(contract.projection.schema)) throw new TypeError(`${fn}: the contract's projection.schema must be a Standard Schema (v1)`);
      schema = contract.projection.schema;
    }
  }
  if (!isPlainObject(callbacks)) throw new TypeError(`${fn}(${id}): callbacks must be an object { attach?, contribute? }`);
  const unknown = Object.keys(callbacks).filter((k) => k !== "attach" && k !== "contribute");
  if (unknown.length > 0) throw new TypeError(`${fn}(${id}): unknown callback ${JSON.stringify(unknown[0])} (allowed: attach, contribute)`);
  const entry = { protocol: CLIENT_PROTOCOL, id };
  for (const name of ["attach", "contribute"]) {
    const f = callbacks[name];
    if (f === undefined) continue;
    if (typeof f !== "function") throw new TypeError(`${fn}(${id}): ${name} must be a function`);
    entry[name] = f;
  }
  if (entry.attach === undefined && entry.contribute === undefined) throw new TypeError(`${fn}(${id}): at least one of attach and contribute is required`);
  Object.freeze(entry);
  DECODERS.set(entry, schema);
  return entry;
}

/**
 * Admits an installed entry: exactly `{ protocol: "shiitake.client/v1", id,
 * attach?, contribute? }` with at least one callback. Any other shape (a
 * missing or other protocol, a superseded shape, unknown keys) is refused
 * with a ClientEntryError (`code` `entry_refused`) naming the problem.
 * Answers the entry itself.
 */
export function admitClientEntry(entry) {
  const bad = (problem) => refuse("entry_refused", `client entry refused: ${problem}`);
  if (!isPlainObject(entry)) throw bad(`expected an object made by defineClientEntry, not ${entry === null ? "null" : Array.isArray(entry) ? "an array" : typeof entry}`);
  if (!Object.hasOwn(entry, "protocol")) throw bad(`it has no protocol; this host admits exactly ${CLIENT_PROTOCOL}`);
  if (entry.protocol !== CLIENT_PROTOCOL) throw bad(`protocol ${JSON.stringify(entry.protocol)} is not admitted; this host admits exactly ${CLIENT_PROTOCOL}`);
  const id = entry.id;
  if (typeof id !== "string" || !EXTENSION_ID.test(id)) throw bad(`id ${JSON.stringify(id) ?? String(id)} must be an extension id matching ${EXTENSION_ID}`);
  const unknown = Object.keys(entry).filter((k) => !ENTRY_KEYS.includes(k));
  if (unknown.length > 0) throw bad(`entry ${id} has unknown key ${JSON.stringify(unknown[0])} (a ${CLIENT_PROTOCOL} entry has only ${ENTRY_KEYS.join(", ")})`);
  for (const name of ["attach", "contribute"]) {
    if (entry[name] !== undefined && typeof entry[name] !== "function") throw bad(`entry ${id}: ${name} must be a function`);
  }
  if (entry.attach === undefined && entry.contribute === undefined) throw bad(`entry ${id} has neither attach nor contribute`);
  return entry;
}

// ---------------------------------------------------------------------------
// Decoding at the seam: the slot in, the contribution out

function decodeWith(schema, value, where) {
  if (schema === null) return value;
  let result;
  try {
    result = schema["~standard"].validate(value);
  } catch (cause) {
    throw new ClientEntryError("invalid_projection", `${where}: the schema's validate threw: ${cause?.message ?? String(cause)}`, { cause });
  }
  if (isThenable(result)) {
    Promise.resolve(result).catch(() => {});
    throw refuse("invalid_projection", `${where}: the schema validates asynchronously; client entries decode synchronously`);
  }
  if (result?.issues !== undefined) {
    const first = result.issues[0];
    const path = Array.isArray(first?.path) ? first.path.map((p) => `/${String(typeof p === "object" && p !== null ? p.key : p)}`).join("") : "";
    throw refuse("invalid_projection", `${where}${path ? ` at ${path}` : ""}: ${first?.message ?? "refused by the schema"}`);
  }
  return result.value;
}

/**
 * The typed view `contribute` and `attach` see, from one observation of a
 * slot: `{ status, value, history, commands }`. `status` is the extension's
 * (`running`, `stopped`, or `offline`: not observed, or the connection is
 * lost); `value` the decoded projection or null; `history` the producer's
 * retained events, each value decoded; `commands` the running advertised
 * command catalog (names).
 */
function decodeView(schema, observation, id) {
  const where = `extension ${id}`;
  if (!isPlainObject(observation)) throw refuse("invalid_observation", `${where}: an observation is { status, value?, history?, commands? }`);
  const { status } = observation;
  if (!STATUSES.includes(status)) throw refuse("invalid_observation", `${where}: status ${JSON.stringify(status)} is not one of ${STATUSES.join(", ")}`);
  const raw = observation.value ?? null;
  const value = raw === null ? null : decodeWith(schema, raw, `${where}: the projection`);
  const h = observation.history ?? { events: [], omitted: 0 };
  if (!isPlainObject(h) || !Array.isArray(h.events) || !Number.isSafeInteger(h.omitted) || h.omitted < 0) throw refuse("invalid_observation", `${where}: history is { events, omitted }`);
  const events = h.events.map((e, i) => {
    if (!isPlainObject(e) || !Number.isSafeInteger(e.sequence) || e.sequence < 1) throw refuse("invalid_observation", `${where}: history event ${i} needs a positive integer sequence`);
    return Object.freeze({ ...e, value: e.value === null || e.value === undefined ? null : decodeWith(schema, e.value, `${where}: history event ${e.sequence}`) });
  });
  const commands = observation.commands ?? [];
  if (!Array.isArray(commands) || !commands.every((c) => typeof c === "string")) throw refuse("invalid_observation", `${where}: commands is an array of command names`);
  return Object.freeze({
    status,
    value,
    history: Object.freeze({ events: Object.freeze(events), omitted: h.omitted }),
    commands: Object.freeze([...commands]),
  });
}

function label(text, where) {
  if (typeof text !== "string" || text.length === 0) throw refuse("invalid_output", `${where} must be a non-empty string`);
  const n = codePoints(text);
  if (n > CLIENT_LABEL_CHARS_MAX) throw refuse("invalid_output", `${where} is ${n} characters; labels hold at most ${CLIENT_LABEL_CHARS_MAX}`);
  return text;
}

function rowId(id, where, seen) {
  if (typeof id !== "string" || !ROW_ID.test(id)) throw refuse("invalid_output", `${where}: id ${JSON.stringify(id) ?? String(id)} must be 1 to 128 of [A-Za-z0-9_.:-]`);
  if (seen.has(id)) throw refuse("invalid_output", `${where}: id ${JSON.stringify(id)} is used twice`);
  seen.add(id);
  return id;
}

function list(value, max, where) {
  if (!Array.isArray(value)) throw refuse("invalid_output", `${where} must be an array`);
  if (value.length > max) throw refuse("invalid_output", `${where} has ${value.length} items; at most ${max}`);
  return value;
}

/** An action: `{ id, label, input? }` data; `id` a command of the running catalog, `input` a JSON object. */
function action(a, where, catalog) {
  if (!isPlainObject(a)) throw refuse("invalid_output", `${where} must be an action { id, label, input? }`);
  closedKeys(a, ["id", "label", "input"], where);
  if (typeof a.id !== "string" || !catalog.includes(a.id)) {
    throw refuse("invalid_output", `${where}: id ${JSON.stringify(a.id) ?? String(a.id)} is not a command of the running catalog (${catalog.join(", ") || "none"})`);
  }
  const out = { id: a.id, label: label(a.label, `${where}.label`) };
  if (a.input !== undefined) {
    if (!isPlainObject(a.input) || !isJson(a.input)) throw refuse("invalid_output", `${where}: input must be a JSON object`);
    out.input = structuredClone(a.input);
  }
  return Object.freeze(out);
}

/**
 * A typed open target: `{ kind: "session", sessionId, agentId? }` (another
 * Agent's Session when `agentId` is given). Data only: the host's `open`
 * callback authorizes it before any navigation.
 */
function openTarget(o, where) {
  if (!isPlainObject(o)) throw refuse("invalid_output", `${where} must be an open target { kind: "session", sessionId, agentId? }`);
  closedKeys(o, ["kind", "sessionId", "agentId"], where);
  if (o.kind !== "session") throw refuse("invalid_output", `${where}: kind ${JSON.stringify(o.kind) ?? String(o.kind)} is not an open target kind (session)`);
  if (typeof o.sessionId !== "string" || !SESSION_ID.test(o.sessionId)) {
    throw refuse("invalid_output", `${where}: sessionId ${JSON.stringify(o.sessionId) ?? String(o.sessionId)} must be a Session id (1 to ${SESSION_ID_BYTES_MAX} of [A-Za-z0-9._:-])`);
  }
  const out = { kind: "session", sessionId: o.sessionId };
  if (o.agentId !== undefined) {
    if (typeof o.agentId !== "string" || !AGENT_ID.test(o.agentId)) {
      throw refuse("invalid_output", `${where}: agentId ${JSON.stringify(o.agentId) ?? String(o.agentId)} must be an Agent id (1 to ${AGENT_ID_BYTES_MAX} of [A-Za-z0-9._:-])`);
    }
    out.agentId = o.agentId;
  }
  return Object.freeze(out);
}

function cell(c, where, seen) {
  if (!isPlainObject(c)) throw refuse("invalid_output", `${where} must be { id, label, commandId?, afterSequence?, open? }`);
  closedKeys(c, ["id", "label", "commandId", "afterSequence", "open"], where);
  if (typeof c.id !== "string" || !CELL_ID.test(c.id) || !Number.isSafeInteger(Number(c.id))) {
    throw refuse("invalid_output", `${where}: id ${JSON.stringify(c.id) ?? String(c.id)} must be a positive safe integer written as decimal text`);
  }
  if (seen.has(c.id)) throw refuse("invalid_output", `${where}: id ${c.id} is used twice`);
  seen.add(c.id);
  const out = { id: c.id, label: label(c.label, `${where}.label`) };
  const hasCommand = c.commandId !== undefined && c.commandId !== null;
  if (hasCommand && c.afterSequence !== undefined) throw refuse("invalid_output", `${where}: a cell is anchored by commandId or by afterSequence, never both`);
  if (hasCommand) {
    if (typeof c.commandId !== "string" || c.commandId === "") throw refuse("invalid_output", `${where}: commandId must be a command id`);
    out.commandId = c.commandId;
  } else if (c.afterSequence !== undefined) {
    if (c.commandId !== null) throw refuse("invalid_output", `${where}: afterSequence comes with commandId: null`);
    if (!Number.isSafeInteger(c.afterSequence) || c.afterSequence < 0) throw refuse("invalid_output", `${where}: afterSequence must be a committed Session position (an integer >= 0)`);
    out.commandId = null;
    out.afterSequence = c.afterSequence;
  } else if (c.commandId === null) {
    throw refuse("invalid_output", `${where}: commandId: null anchors with afterSequence; leave both out for Extension changes`);
  }
  if (c.open !== undefined) out.open = openTarget(c.open, `${where}.open`);
  return Object.freeze(out);
}

/** What `contribute` returned, checked and copied: the contribution, or a ClientEntryError (`invalid_output`). */
function decodeContribution(out, id, catalog) {
  const where = `extension ${id}: contribute`;
  if (isThenable(out)) {
    Promise.resolve(out).catch(() => {});
    throw refuse("invalid_output", `${where} returned a promise; it is synchronous`);
  }
  if (!isPlainObject(out)) throw refuse("invalid_output", `${where} must return { chips, panel, timeline, waiting }`);
  closedKeys(out, ["chips", "panel", "timeline", "waiting"], where);
  const chipIds = new Set();
  const chips = list(out.chips ?? [], CLIENT_CHIPS_MAX, `${where}: chips`).map((c, i) => {
    const at = `${where}: chips[${i}]`;
    if (!isPlainObject(c)) throw refuse("invalid_output", `${at} must be { id, title, compact? }`);
    // Chips are display only: no actions, no open targets.
    closedKeys(c, ["id", "title", "compact"], at);
    const chip = { id: rowId(c.id, at, chipIds), title: label(c.title, `${at}.title`) };
    if (c.compact !== undefined) chip.compact = label(c.compact, `${at}.compact`);
    return Object.freeze(chip);
  });
  const rowIds = new Set();
  const panel = list(out.panel ?? [], CLIENT_PANEL_ROWS_MAX, `${where}: panel`).map((r, i) => {
    const at = `${where}: panel[${i}]`;
    if (!isPlainObject(r)) throw refuse("invalid_output", `${at} must be { id, title, detail?, actions?, open? }`);
    closedKeys(r, ["id", "title", "detail", "actions", "open"], at);
    const row = { id: rowId(r.id, at, rowIds), title: label(r.title, `${at}.title`) };
    if (r.detail !== undefined) row.detail = label(r.detail, `${at}.detail`);
    if (r.actions !== undefined) {
      if (!Array.isArray(r.actions)) throw refuse("invalid_output", `${at}.actions must be an array`);
      row.actions = Object.freeze(r.actions.map((a, j) => action(a, `${at}.actions[${j}]`, catalog)));
    }
    if (r.open !== undefined) row.open = openTarget(r.open, `${at}.open`);
    return Object.freeze(row);
  });
  const t = out.timeline ?? { cells: [], omitted: 0 };
  if (!isPlainObject(t)) throw refuse("invalid_output", `${where}: timeline must be { cells, omitted }`);
  closedKeys(t, ["cells", "omitted"], `${where}: timeline`);
  const omitted = t.omitted ?? 0;
  if (!Number.isSafeInteger(omitted) || omitted < 0) throw refuse("invalid_output", `${where}: timeline.omitted must be an integer >= 0`);
  const cellIds = new Set();
  const cells = list(t.cells ?? [], CLIENT_TIMELINE_CELLS_MAX, `${where}: timeline.cells`).map((c, i) => cell(c, `${where}: timeline.cells[${i}]`, cellIds));
  let waiting = null;
  if (out.waiting !== undefined && out.waiting !== null) {
    const at = `${where}: waiting`;
    if (!isPlainObject(out.waiting)) throw refuse("invalid_output", `${at} must be { summary, cancel? } or null`);
    closedKeys(out.waiting, ["summary", "cancel"], at);
    waiting = { summary: label(out.waiting.summary, `${at}.summary`) };
    if (out.waiting.cancel !== undefined) waiting.cancel = action(out.waiting.cancel, `${at}.cancel`, catalog);
    waiting = Object.freeze(waiting);
  }
  return Object.freeze({ chips: Object.freeze(chips), panel: Object.freeze(panel), timeline: Object.freeze({ cells: Object.freeze(cells), omitted }), waiting });
}

/** Rows a contribution shows: chips, panel rows, timeline cells and the waiting row. */
const rowCount = (c) => c.chips.length + c.panel.length + c.timeline.cells.length + (c.waiting ? 1 : 0);

/** `value` as JSON text (what tells a changed observation), or null when it has none. */
function jsonText(value) {
  try {
    return JSON.stringify(value) ?? null;
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------
// Activity: one sliding latest-value slot per subscription

/**
 * The `activity` an attachment gets: each `for await` is its own
 * subscription holding one slot that a newer value replaces (a slow consumer
 * sees the latest), starting with the latest value; `end()` ends every
 * iterator and drops what they hold.
 */
class Activity {
  #subscribers = new Set();
  #ended = false;
  #latest = null;

  push(value) {
    this.#latest = { value };
    for (const s of this.#subscribers) {
      s.slot = { value };
      s.wake?.();
    }
  }

  end() {
    this.#ended = true;
    this.#latest = null;
    for (const s of this.#subscribers) {
      s.slot = null;
      s.wake?.();
    }
    this.#subscribers.clear();
  }

  [Symbol.asyncIterator]() {
    const sub = { slot: this.#latest, wake: null, done: this.#ended };
    if (!this.#ended) this.#subscribers.add(sub);
    const finish = () => {
      sub.done = true;
      sub.slot = null;
      this.#subscribers.delete(sub);
      return Promise.resolve({ value: undefined, done: true });
    };
    return {
      next: async () => {
        for (;;) {
          if (sub.done || this.#ended) return finish();
          if (sub.slot !== null) {
            const { value } = sub.slot;
            sub.slot = null;
            return { value, done: false };
          }
          await new Promise((resolve) => {
            sub.wake = resolve;
          });
          sub.wake = null;
        }
      },
      return: finish,
      [Symbol.asyncIterator]() {
        return this;
      },
    };
  }
}

// ---------------------------------------------------------------------------
// The host side

/**
 * Evaluates admitted entries. Options:
 * - `entries`: the host's selection (each admitted; one per extension id);
 * - `dispatch(call)`: runs an action's command through the extension's own
 *   command route; `call` is `{ extensionId, slot, command, input, prompt,
 *   notice }`: `notice(message)` shows a notice, `prompt(question)` asks the
 *   user (rejected at once for a waiting cancellation);
 * - `prompt(question, call)`, `notice(message, call)`: the host's dialogs;
 * - `open(target, { extensionId, slot })`: the host's generic open callback
 *   for a row's typed open target (`{ kind: "session", sessionId,
 *   agentId? }`): it authorizes the target before navigating to it, and
 *   throws (or rejects) to refuse;
 * - `onError(error, { extensionId, slot })`: an entry's error (invalid
 *   output, a throwing callback, a failed attachment);
 * - `onChange({ extensionId, slot })`: a slot's rows changed.
 */
export function createClientEntryHost(options) {
  if (!isPlainObject(options)) throw new TypeError("createClientEntryHost: options must be an object { entries, dispatch?, prompt?, notice?, open?, onError?, onChange? }");
  const { entries = [], dispatch, prompt, notice, open, onError, onChange } = options;
  for (const [name, f] of Object.entries({ dispatch, prompt, notice, open, onError, onChange })) {
    if (f !== undefined && typeof f !== "function") throw new TypeError(`createClientEntryHost: ${name} must be a function`);
  }
  if (!Array.isArray(entries)) throw new TypeError("createClientEntryHost: entries must be an array");
  const installed = new Map();
  for (const e of entries) {
    admitClientEntry(e);
    if (installed.has(e.id)) throw refuse("entry_refused", `client entry refused: two entries for extension ${e.id}`);
    installed.set(e.id, { entry: e, decoder: DECODERS.get(e) ?? null, slots: new Map() });
  }
  const errors = [];
  let attachment = null;
  let closed = false;

  const report = (error, extensionId, slot) => {
    errors.push({ extensionId, slot, error });
    if (errors.length > ERRORS_KEPT) errors.shift();
    if (onError) {
      try {
        onError(error, { extensionId, slot });
        return;
      } catch (e) {
        error = e;
      }
    }
    if (typeof globalThis.reportError === "function") globalThis.reportError(error);
    else console.error(error);
  };
  const changed = (extensionId, slot) => {
    try {
      onChange?.({ extensionId, slot });
    } catch (e) {
      report(e, extensionId, slot);
    }
  };
  const installedOf = (extensionId) => {
    const i = installed.get(extensionId);
    if (i === undefined) throw refuse("entry_not_found", `no client entry for extension ${extensionId}`);
    return i;
  };

  /** Evaluates `contribute` over a changed slot; an invalid result retires that slot's rows. */
  function evaluate(i, key, state) {
    const id = i.entry.id;
    let contribution = null;
    try {
      if (state.view === null) throw state.viewError;
      if (i.entry.contribute !== undefined) {
        let out;
        try {
          out = i.entry.contribute(state.view);
        } catch (cause) {
          throw new ClientEntryError("contribute_threw", `extension ${id}: contribute threw: ${cause?.message ?? String(cause)}`, { cause });
        }
        contribution = decodeContribution(out, id, state.view.commands);
        let total = rowCount(contribution);
        for (const [k, other] of i.slots) if (k !== key && other.contribution) total += rowCount(other.contribution);
        if (total > CLIENT_ROWS_MAX) throw refuse("invalid_output", `extension ${id}: contribute would show ${total} rows across its slots; at most ${CLIENT_ROWS_MAX} per entry`);
      }
      state.contribution = contribution;
      state.error = null;
    } catch (error) {
      state.contribution = null;
      state.error = error;
      report(error, id, key);
    }
    changed(id, key);
  }

  const host = {
    /**
     * Observes `extensionId`'s slot `slot` (a Session id, or "agent"):
     * `{ status, value?, history?, commands? }`. Evaluates `contribute` only
     * when the observation changed; answers whether it did.
     */
    observe(extensionId, slot, observation) {
      if (closed) throw new TypeError("this client entry host is closed");
      const i = installedOf(extensionId);
      if (typeof slot !== "string" || slot === "") throw new TypeError("observe(extensionId, slot, observation): slot must be a non-empty string");
      const prev = i.slots.get(slot);
      const text = jsonText(observation);
      if (prev !== undefined && text !== null && prev.text === text) return false;
      const state = prev ?? { text: null, view: null, viewError: null, contribution: null, error: null };
      state.text = text;
      try {
        state.view = decodeView(i.decoder, observation, extensionId);
        state.viewError = null;
      } catch (error) {
        state.view = null;
        state.viewError = error;
      }
      i.slots.set(slot, state);
      evaluate(i, slot, state);
      if (attachment?.slot === slot && state.view !== null) attachment.activities.get(extensionId)?.push(state.view);
      return true;
    },

    /** Drops every entry's state of `slot` (a Session no longer shown); its rows no longer count. */
    forget(slot) {
      for (const i of installed.values()) i.slots.delete(slot);
      if (attachment?.slot === slot) host.detach();
    },

    /** The slot's current contribution (rows), or null (none yet, retired, or no contribute). */
    contribution(extensionId, slot) {
      return installedOf(extensionId).slots.get(slot)?.contribution ?? null;
    },

    /** The slot's current view, or null. */
    view(extensionId, slot) {
      return installedOf(extensionId).slots.get(slot)?.view ?? null;
    },

    /** The slot's current error (why its rows are retired), or null. */
    error(extensionId, slot) {
      return installedOf(extensionId).slots.get(slot)?.error ?? null;
    },

    /** The newest errors reported (at most 64), oldest first: `{ extensionId, slot, error }`. */
    get errors() {
      return [...errors];
    },

    /**
     * Runs `action` (taken from this slot's current contribution) through
     * `dispatch`. Refused locally, with no request, when the slot is not
     * running (offline) or the action is not in its current rows (stale).
     */
    act(extensionId, slot, chosen) {
      return run(extensionId, slot, chosen, false);
    },

    /**
     * Opens `target` (taken from this slot's current panel rows or cells)
     * through the host's `open` callback, which authorizes it first.
     * Refused locally (`stale_target`, nothing opened) when the target is
     * not among the slot's current rows; `open_refused` when the callback
     * refuses it (its error is the cause).
     */
    async open(extensionId, slot, target) {
      const current = installedOf(extensionId).slots.get(slot)?.contribution ?? null;
      const offered = current === null ? [] : [...current.panel, ...current.timeline.cells].flatMap((r) => (r.open ? [r.open] : []));
      const where = `extension ${extensionId}: open ${target?.kind ?? "target"} ${JSON.stringify(target?.sessionId)}`;
      if (!offered.includes(target)) throw refuse("stale_target", `${where}: not among the slot's current rows; nothing was opened`);
      if (open === undefined) throw refuse("no_open", `${where}: this host has no open callback`);
      try {
        return await open(target, Object.freeze({ extensionId, slot }));
      } catch (cause) {
        throw new ClientEntryError("open_refused", `${where}: refused: ${cause?.message ?? String(cause)}`, { cause });
      }
    },

    /** Runs the slot's waiting cancel action: notices are kept, prompts rejected without a dialog. */
    cancelWaiting(extensionId, slot) {
      const state = installedOf(extensionId).slots.get(slot);
      const cancel = state?.contribution?.waiting?.cancel;
      if (cancel === undefined) return Promise.reject(refuse("stale_action", `extension ${extensionId}: no waiting cancel action in slot ${slot}`));
      return run(extensionId, slot, cancel, true);
    },

    /**
     * Selects the Session `slot`: attaches every entry with `attach` to it
     * (the previous selection is detached first). The view of each change
     * to the entry's slot goes to its `activity`.
     */
    select(slot) {
      if (closed) throw new TypeError("this client entry host is closed");
      host.detach();
      const controller = new AbortController();
      const activities = new Map();
      attachment = { slot, controller, activities };
      for (const i of installed.values()) {
        if (i.entry.attach === undefined) continue;
        const id = i.entry.id;
        const activity = new Activity();
        activities.set(id, activity);
        const view = i.slots.get(slot)?.view;
        if (view) activity.push(view);
        const ctx = Object.freeze({ activity, signal: controller.signal, onError: (error) => report(error, id, slot) });
        try {
          const out = i.entry.attach(ctx);
          if (isThenable(out)) Promise.resolve(out).catch((error) => report(error, id, slot));
        } catch (error) {
          report(error, id, slot);
        }
      }
    },

    /** Detaches the selected Session: aborts the signal and ends every activity iterator. */
    detach() {
      if (attachment === null) return;
      const { controller, activities } = attachment;
      attachment = null;
      for (const a of activities.values()) a.end();
      controller.abort(refuse("detached", "the Session was detached"));
    },

    close() {
      host.detach();
      closed = true;
    },
  };

  async function run(extensionId, slot, chosen, cancelling) {
    const i = installedOf(extensionId);
    const state = i.slots.get(slot);
    const where = `extension ${extensionId}: action ${JSON.stringify(chosen?.id)}`;
    if (state?.view?.status !== "running") throw refuse("offline", `${where}: the extension is ${state?.view?.status ?? "offline"} in slot ${slot}; nothing was sent`);
    const current = state.contribution;
    const offered = current === null ? [] : [...current.panel.flatMap((r) => r.actions ?? []), ...(current.waiting?.cancel ? [current.waiting.cancel] : [])];
    if (!offered.includes(chosen) || !state.view.commands.includes(chosen.id)) throw refuse("stale_action", `${where}: not among the slot's current actions; nothing was sent`);
    if (dispatch === undefined) throw refuse("no_dispatch", `${where}: this host has no dispatch`);
    const call = {
      extensionId,
      slot,
      command: chosen.id,
      input: chosen.input === undefined ? {} : structuredClone(chosen.input),
      notice: (message) => notice?.(message, call),
      prompt: (question) => {
        if (cancelling) return Promise.reject(refuse("prompt_rejected", `${where}: a waiting cancellation answers no prompt`));
        if (prompt === undefined) return Promise.reject(refuse("prompt_rejected", `${where}: this host has no prompt dialog`));
        return Promise.resolve(prompt(question, call));
      },
    };
    return dispatch(Object.freeze(call));
  }

  return Object.freeze(host);
}

/**
 * A `dispatch` over extension bindings (`bindSessionExtension`, from
 * "shiitake/client"): `bindings(extensionId, slot)` answers the binding whose
 * command route runs the action. The command route has no prompts; its
 * result is returned.
 */
export function bindingDispatch(bindings) {
  if (typeof bindings !== "function") throw new TypeError("bindingDispatch(bindings): bindings must be a function (extensionId, slot) => binding");
  return (call) => {
    const binding = bindings(call.extensionId, call.slot);
    if (binding === undefined || binding === null) throw refuse("offline", `extension ${call.extensionId}: no binding for slot ${call.slot}`);
    return binding.command(call.command, call.input);
  };
}

// ---------------------------------------------------------------------------
// Placement: where each timeline cell goes among loaded transcript rows

/**
 * Places cells among the loaded transcript rows. `rows`: the loaded durable
 * rows in order, each `{ sequence, commandId? }` (`sequence` its committed
 * Session position, 1-based); `first`: whether the loaded rows begin at the
 * Session's first entry. Answers `{ start, after, changes, hidden }`:
 * - `start`: cells before the first entry (`afterSequence: 0`, when `first`);
 * - `after`: Map sequence -> cells placed after that row: a `commandId`
 *   anchor after that command's last loaded row, an `afterSequence` anchor
 *   after that position's row;
 * - `changes`: cells without an anchor ("Extension changes");
 * - `hidden`: anchored cells whose row is not loaded (yet).
 * Cells keep their id order (numeric) within each place.
 */
export function placeCells(loaded, cells) {
  const { rows = [], first = false } = loaded ?? {};
  const lastOfCommand = new Map();
  const sequences = new Set();
  for (const r of rows) {
    sequences.add(r.sequence);
    if (typeof r.commandId === "string") lastOfCommand.set(r.commandId, Math.max(lastOfCommand.get(r.commandId) ?? 0, r.sequence));
  }
  const out = { start: [], after: new Map(), changes: [], hidden: [] };
  const sorted = [...cells].sort((a, b) => Number(a.id) - Number(b.id));
  const put = (sequence, c) => {
    const at = out.after.get(sequence);
    if (at) at.push(c);
    else out.after.set(sequence, [c]);
  };
  for (const c of sorted) {
    if (typeof c.commandId === "string") {
      const at = lastOfCommand.get(c.commandId);
      if (at === undefined) out.hidden.push(c);
      else put(at, c);
    } else if (c.afterSequence !== undefined) {
      if (c.afterSequence === 0) (first ? out.start : out.hidden).push(c);
      else if (sequences.has(c.afterSequence)) put(c.afterSequence, c);
      else out.hidden.push(c);
    } else out.changes.push(c);
  }
  return out;
}
