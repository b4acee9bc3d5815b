// The extension authoring library ("shiitake/extensions"). An extension adds
// behaviour (goals, reminders, ...) to the runtime; the Rust core owns every
// durable rule (state tables, transactions, timers, cursors, the revision).
// This module only
//   (a) lets a host declare an extension with a fluent builder,
//   (b) describes it to the core as a plain-JSON manifest (manifestOf), and
//   (c) runs one hook call synchronously (runHook): the core hands in the
//       extension's current state as JSON, the user's callback runs over it,
//       and the writes it made come back. Nothing is stored here.
//
//   import { defineExtension, defineCollection, defineDocument } from "shiitake/extensions";
//   export const goal = defineExtension("goal")
//     .state({ goal: defineDocument(GoalSchema) })
//     .command("set", { input: GoalSchema }, (ctx, input) => ctx.state.update((s) => s.goal.set(input)));
//
// Schemas are JSON Schema objects (validated by the core: `validate: true`) or
// Standard Schemas (https://standardschema.dev; zod, valibot, arktype, ...),
// validated here, synchronously, with their output replacing the value
// (`validate: false` for the core). A Standard Schema's JSON form for the
// manifest is its Standard JSON Schema `input` form when it offers one (zod 4
// does), else `schema.toJSONSchema()`, else `{ "x-standard-vendor": vendor }`.
// With that last form the manifest (and so the revision the core hashes)
// does not change when the schema does: bump the extension's version then.
//
// Runs in Workers: no eval, no Node imports, no dependencies.

import { isPlainObject, isThenable } from "./guards.mjs";
import {
  ATTENTION_ID_BYTES_MAX,
  ATTENTION_KIND_BYTES_MAX,
  ATTENTION_SUMMARY_CHARS_MAX,
  EXTENSION_COLLECTIONS_MAX,
  EXTENSION_COMMANDS_MAX,
  EXTENSION_KEY_BYTES_MAX,
  EXTENSION_STATE_VERSION_MAX,
  EXTENSION_STOP_REASON_BYTES_MAX,
  EXTENSIONS_MAX,
  TEXT_BYTES_MAX,
} from "./limits.mjs";

export {
  ATTENTION_ID_BYTES_MAX,
  ATTENTION_KIND_BYTES_MAX,
  ATTENTION_SUMMARY_CHARS_MAX,
  EXTENSION_COLLECTIONS_MAX,
  EXTENSION_COMMANDS_MAX,
  EXTENSION_KEY_BYTES_MAX,
  EXTENSION_STATE_VERSION_MAX,
  EXTENSIONS_MAX,
};
export const EXTENSION_DESCRIPTION_MAX = 1024;
export const EXTENSION_SEND_TEXT_BYTES_MAX = TEXT_BYTES_MAX;
export const EXTENSION_FEATURE_MAX = 128;
export const EXTENSION_ERROR_MAX = EXTENSION_STOP_REASON_BYTES_MAX;
export const EXTENSION_REQUESTS_MAX = 32;

const ID = /^[a-z][a-z0-9_]{0,31}$/;
const VERSION = /^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/;
const GRANT_KEY = /^[a-z][a-z0-9_.]{0,63}$/;
const TIMER_NAME = /^[A-Za-z0-9_.:-]{1,128}$/;
const SESSION_ID = /^[A-Za-z0-9_.:-]{1,128}$/;
const REQUEST_NAME = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;
const ATTENTION_ID = /^[A-Za-z0-9_.:-]{1,128}$/;
const ATTENTION_KIND = /^[a-z0-9_.-]{1,64}$/;
/** What a roster entry may grant (src/extension/manifest.rs `Grant`). */
const GRANTS = ["attention", "files"];
const SCOPES = ["session", "agent"];
const KINDS = ["settled", "timer", "command", "migrate", "project", "prompt", "tools", "files", "activate"];

// ---------------------------------------------------------------------------
// Errors

/** Errors this module raised; a callback that lets one through is reported with its own message. */
const OWN_ERRORS = new WeakSet();

function refusal(message) {
  const error = new Error(message);
  OWN_ERRORS.add(error);
  return error;
}

function describeThrown(thrown) {
  try {
    if (thrown instanceof Error) return thrown.message || thrown.name || "Error";
    return String(thrown);
  } catch {
    return "(an unprintable value)";
  }
}

/** `text` cut to `max` UTF-16 units without splitting a surrogate pair. */
function cut(text, max = EXTENSION_ERROR_MAX) {
  if (text.length <= max) return text;
  let end = max;
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end -= 1;
  return text.slice(0, end);
}

function label(id) {
  return typeof id === "string" && ID.test(id) ? id : cut(safeJson(id) ?? String(id), 40);
}

/** `value` for a message: JSON, at most 40 characters. */
function quote(value) {
  return cut(safeJson(value) ?? typeName(value), 40);
}

function safeJson(value) {
  try {
    return JSON.stringify(value);
  } catch {
    return undefined;
  }
}

function typeName(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value;
}



/** Keeps an abandoned promise from being reported as an unhandled rejection. */
function silence(thenable) {
  try {
    thenable.then(undefined, () => {});
  } catch {
    // not a real promise; nothing to silence
  }
}

function closedKeys(object, allowed, where) {
  for (const key of Object.keys(object)) {
    if (!allowed.includes(key)) {
      throw refusal(`${where}: unknown key ${JSON.stringify(key)} (allowed: ${allowed.join(", ")})`);
    }
  }
}

// ---------------------------------------------------------------------------
// JSON values

function utf8Length(text) {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        bytes += 4;
        i++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

function wellFormed(text) {
  if (typeof text.isWellFormed === "function") return text.isWellFormed();
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = text.charCodeAt(i + 1);
      if (!(d >= 0xdc00 && d <= 0xdfff)) return false;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) return false;
  }
  return true;
}

function codePoints(text) {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) i++;
    n++;
  }
  return n;
}

/** Orders keys by code point, as the core orders them (by UTF-8 bytes). */
function compareKeys(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) {
      const xs = x >= 0xd800 && x <= 0xdfff;
      const ys = y >= 0xd800 && y <= 0xdfff;
      if (xs !== ys) return xs ? 1 : -1;
      return x - y;
    }
  }
  return a.length - b.length;
}

/**
 * A deep copy of `value` as JSON, or a refusal naming where it is not JSON.
 * Refused: undefined (except as an object property, which is left out, as
 * JSON.stringify does), functions, symbols, bigints, non-finite numbers,
 * strings with lone surrogates, objects other than plain objects and arrays,
 * sparse arrays, and cycles.
 */
function toJson(value, where) {
  const stack = [];
  const walk = (v, at) => {
    switch (typeof v) {
      case "string":
        if (!wellFormed(v)) throw refusal(`${where}: ${at} is a string with a lone surrogate (not UTF-8)`);
        return v;
      case "boolean":
        return v;
      case "number":
        if (!Number.isFinite(v)) throw refusal(`${where}: ${at} is ${v}, not a JSON number`);
        return Object.is(v, -0) ? 0 : v;
      case "undefined":
        throw refusal(`${where}: ${at} is undefined, not JSON`);
      case "object": {
        if (v === null) return null;
        if (stack.includes(v)) throw refusal(`${where}: ${at} is a cycle, not JSON`);
        stack.push(v);
        let out;
        if (Array.isArray(v)) {
          out = new Array(v.length);
          for (let i = 0; i < v.length; i++) {
            if (!(i in v)) throw refusal(`${where}: ${at}[${i}] is a hole in a sparse array, not JSON`);
            out[i] = walk(v[i], `${at}[${i}]`);
          }
        } else if (isPlainObject(v)) {
          out = {};
          for (const key of Object.keys(v)) {
            if (!wellFormed(key)) throw refusal(`${where}: ${at} has a key with a lone surrogate (not UTF-8)`);
            const item = v[key];
            if (item === undefined) continue;
            const copy = walk(item, `${at}${pathPart(key)}`);
            if (key === "__proto__") Object.defineProperty(out, key, { value: copy, enumerable: true, writable: true, configurable: true });
            else out[key] = copy;
          }
        } else {
          throw refusal(`${where}: ${at} is ${describeObject(v)}, not a plain object or array (not JSON)`);
        }
        stack.pop();
        return out;
      }
      default:
        throw refusal(`${where}: ${at} is a ${typeof v}, not JSON`);
    }
  };
  return walk(value, "$");
}

function describeObject(v) {
  try {
    const name = Object.getPrototypeOf(v)?.constructor?.name;
    return name ? `a ${name}` : "an object";
  } catch {
    return "an object";
  }
}

function pathPart(key) {
  if (typeof key === "number") return `[${key}]`;
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

/** A copy of a value already known to be JSON (rows from the core, stored rows). */
function cloneJson(v) {
  if (typeof v !== "object" || v === null) return v;
  if (Array.isArray(v)) return v.map(cloneJson);
  const out = {};
  for (const key of Object.keys(v)) {
    const copy = cloneJson(v[key]);
    if (key === "__proto__") Object.defineProperty(out, key, { value: copy, enumerable: true, writable: true, configurable: true });
    else out[key] = copy;
  }
  return out;
}

// ---------------------------------------------------------------------------
// Schemas

const COLLECTION = Symbol("shiitake.extension.collection");

/** A keyed collection of rows, each validated by `schema` (absent: any JSON). */
export function defineCollection(schema) {
  return Object.freeze({ kind: "collection", schema, [COLLECTION]: true });
}

/** One optional row (stored under the key ""), validated by `schema` (absent: any JSON). */
export function defineDocument(schema) {
  return Object.freeze({ kind: "document", schema, [COLLECTION]: true });
}

function isCollectionMarker(value) {
  return typeof value === "object" && value !== null && value[COLLECTION] === true;
}

function isStandardSchema(value) {
  return (typeof value === "object" || typeof value === "function") && value !== null && "~standard" in value;
}

/**
 * `{ standard, json, validate }` for a schema: `standard` is the Standard
 * Schema validated here (or null), `json` the JSON form for the manifest (or
 * null when there is no schema), `validate` whether the core validates.
 */
function schemaInfo(schema, where) {
  if (schema === undefined || schema === null) return { standard: null, json: null, validate: false };
  if (isStandardSchema(schema)) {
    const props = schema["~standard"];
    if (typeof props !== "object" || props === null || props.version !== 1 || typeof props.validate !== "function") {
      throw refusal(`${where}: the schema's "~standard" is not a Standard Schema v1 (version 1 with a validate function)`);
    }
    return { standard: schema, json: standardJsonSchema(schema), validate: false };
  }
  if (isPlainObject(schema)) return { standard: null, json: toJson(schema, `${where}: the JSON Schema`), validate: true };
  throw refusal(`${where}: the schema must be a JSON Schema object or a Standard Schema, not ${typeName(schema)}`);
}

function standardJsonSchema(schema) {
  const props = schema["~standard"];
  const attempts = [
    () => props.jsonSchema?.input?.({ target: "draft-2020-12" }),
    () => (typeof schema.toJSONSchema === "function" ? schema.toJSONSchema() : undefined),
  ];
  for (const attempt of attempts) {
    try {
      const form = attempt();
      if (form !== undefined && isPlainObject(form)) return toJson(form, "JSON Schema");
    } catch {
      // this schema has no JSON Schema form (e.g. a date); try the next
    }
  }
  const vendor = typeof props.vendor === "string" ? props.vendor : "unknown";
  return { "x-standard-vendor": vendor };
}

function formatIssues(issues) {
  const list = Array.isArray(issues) ? issues : [];
  const first = list[0];
  if (first === undefined) return "refused by the schema";
  let path = "$";
  if (Array.isArray(first.path)) {
    for (const segment of first.path) {
      const key = typeof segment === "object" && segment !== null && "key" in segment ? segment.key : segment;
      path += typeof key === "number" ? `[${key}]` : pathPart(String(key));
    }
  }
  const message = typeof first.message === "string" && first.message ? first.message : "invalid";
  const more = list.length > 1 ? ` (and ${list.length - 1} more issue${list.length > 2 ? "s" : ""})` : "";
  return `${path}: ${message}${more}`;
}

/**
 * `value` through a Standard Schema: its output, or a refusal `<where>: <path>: <message>`
 * (marked `invalid`, which makes bad command input a refused request). An
 * asynchronous schema is refused as `<schemaWhere>: the schema is asynchronous; <why>`.
 */
function runStandard(standard, value, where, why, schemaWhere = where) {
  let result;
  try {
    result = standard["~standard"].validate(value);
  } catch (e) {
    throw refusal(`${where}: the schema's validate threw: ${describeThrown(e)}`);
  }
  if (isThenable(result)) {
    silence(result);
    throw refusal(`${schemaWhere}: the schema is asynchronous; ${why}`);
  }
  if (typeof result !== "object" || result === null) throw refusal(`${where}: the schema's validate returned ${typeName(result)}, not a result`);
  if (result.issues !== undefined) {
    const error = refusal(`${where}: ${formatIssues(result.issues)}`);
    error.invalid = true;
    throw error;
  }
  return result.value;
}

// ---------------------------------------------------------------------------
// The builder

/** The declared parts of each definition, out of users' reach. */
const DEFINITIONS = new WeakMap();

const DECLARATION_RULE = "must be declared before callbacks (.command, .onSettled, .onTimer, .projection, .prompt, .tools, .files)";

class ExtensionDefinition {
  constructor(record) {
    DEFINITIONS.set(this, record);
    Object.defineProperty(this, "id", { value: record.id, enumerable: true });
    Object.defineProperty(this, "version", { value: record.version, enumerable: true });
  }

  config(schema, options = {}) {
    const r = declaration(this, "config");
    const where = `extension ${r.id}: config`;
    if (!isPlainObject(options)) throw refusal(`${where}: options must be an object`);
    closedKeys(options, ["default"], where);
    const info = schemaInfo(schema, where);
    if (info.json === null) throw refusal(`${where}: a schema is required`);
    r.config = { ...info, hasDefault: options.default !== undefined, default: options.default === undefined ? null : toJson(options.default, `${where}: default`) };
    r.declared.add("config");
    return this;
  }

  state(spec) {
    const r = declaration(this, "state");
    const where = `extension ${r.id}: state`;
    if (!isPlainObject(spec)) throw refusal(`${where}: expected an object of collections or { version, collections, migrations }`);
    let version = 1;
    let collections = spec;
    let migrations = {};
    // The long form { version, collections, migrations } is told from a map of
    // collections by those keys holding something other than a collection.
    const long = ["version", "collections", "migrations"].some((k) => spec[k] !== undefined && !isCollectionMarker(spec[k]));
    if (long) {
      closedKeys(spec, ["version", "collections", "migrations"], where);
      if (spec.version !== undefined) version = spec.version;
      collections = spec.collections ?? {};
      if (!isPlainObject(collections)) throw refusal(`${where}: collections must be an object of defineCollection/defineDocument`);
      if (spec.migrations !== undefined) migrations = spec.migrations;
    }
    if (!Number.isInteger(version) || version < 1 || version > EXTENSION_STATE_VERSION_MAX) {
      throw refusal(`${where}: version must be an integer 1..=${EXTENSION_STATE_VERSION_MAX}, not ${safeJson(version) ?? typeName(version)}`);
    }
    const names = Object.keys(collections);
    if (names.length > EXTENSION_COLLECTIONS_MAX) {
      throw refusal(`${where}: ${names.length} collections, more than ${EXTENSION_COLLECTIONS_MAX} (documents count)`);
    }
    const declared = new Map();
    for (const name of names) {
      if (!ID.test(name)) throw refusal(`extension ${r.id}: collection name ${JSON.stringify(name)} must match ${ID}`);
      const marker = collections[name];
      if (!isCollectionMarker(marker)) throw refusal(`extension ${r.id}: collection ${name}: expected defineCollection(schema) or defineDocument(schema)`);
      const info = schemaInfo(marker.schema, `extension ${r.id}: collection ${name}`);
      declared.set(name, { name, document: marker.kind === "document", ...info });
    }
    if (!isPlainObject(migrations)) throw refusal(`${where}: migrations must be an object keyed by version`);
    const steps = new Map();
    for (const key of Object.keys(migrations)) {
      const v = /^[1-9][0-9]*$/.test(key) ? Number(key) : NaN;
      if (!(v >= 2 && v <= version)) throw refusal(`${where}: migrations[${JSON.stringify(key)}] is outside 2..=${version} (the state version)`);
      if (typeof migrations[key] !== "function") throw refusal(`${where}: migrations[${v}] must be a function (draft, ctx) => void`);
      steps.set(v, migrations[key]);
    }
    for (let v = 2; v <= version; v++) {
      if (!steps.has(v)) throw refusal(`${where}: version ${version} needs migrations[${v}] (turning state ${v - 1} into ${v})`);
    }
    r.state = { version, collections: declared, migrations: steps };
    r.declared.add("state");
    return this;
  }

  requests(requested) {
    const r = declaration(this, "requests");
    const where = `extension ${r.id}: requests`;
    if (!isPlainObject(requested)) throw refusal(`${where}: expected an object of booleans, e.g. { attention: true }`);
    const names = Object.keys(requested);
    if (names.length > EXTENSION_REQUESTS_MAX) throw refusal(`${where}: more than ${EXTENSION_REQUESTS_MAX} capabilities`);
    const out = {};
    for (const name of names) {
      if (!REQUEST_NAME.test(name)) throw refusal(`${where}: capability name ${JSON.stringify(name)} must match ${REQUEST_NAME}`);
      if (typeof requested[name] !== "boolean") throw refusal(`${where}: ${name} must be true or false`);
      out[name] = requested[name];
    }
    r.requests = out;
    r.declared.add("requests");
    return this;
  }

  command(name, options, handler) {
    const r = callback(this);
    if (typeof options === "function" && handler === undefined) {
      handler = options;
      options = {};
    }
    if (typeof name !== "string" || !ID.test(name)) throw refusal(`extension ${r.id}: command name ${quote(name)} must match ${ID}`);
    const where = `extension ${r.id}: command ${name}`;
    if (r.commands.has(name)) throw refusal(`${where} is declared twice`);
    if (r.commands.size >= EXTENSION_COMMANDS_MAX) throw refusal(`extension ${r.id}: more than ${EXTENSION_COMMANDS_MAX} commands (at ${name})`);
    if (options === undefined) options = {};
    if (!isPlainObject(options)) throw refusal(`${where}: options must be an object { scope?, input?, description? }`);
    closedKeys(options, ["scope", "input", "description"], where);
    const scope = options.scope ?? "session";
    if (!SCOPES.includes(scope)) throw refusal(`${where}: scope must be "session" or "agent", not ${safeJson(scope) ?? typeName(scope)}`);
    const description = checkDescription(options.description, where);
    const input = schemaInfo(options.input, `${where}: input`);
    if (typeof handler !== "function") throw refusal(`${where}: the handler must be a function (ctx, input) => result`);
    r.commands.set(name, { name, scope, description, input, handler });
    return this;
  }

  onSettled(fn) {
    return onceCallback(this, "settled", ".onSettled()", fn);
  }

  onTimer(fn) {
    return onceCallback(this, "timer", ".onTimer()", fn);
  }

  /**
   * An activation resource: `fn(context)` runs when the extension comes up
   * in an instance (the object's runtime opens it, or a new revision is
   * deployed) and may return a disposer (a function, sync or async) that
   * runs when that instance closes. Synchronous; it reads state but writes
   * nothing. A throw stops the extension like any failing hook.
   */
  activate(fn) {
    return onceCallback(this, "activate", ".activate()", fn);
  }

  projection(spec) {
    const r = callback(this);
    const where = `extension ${r.id}: projection`;
    if (!isPlainObject(spec)) throw refusal(`${where}: expected { scope, read, history? }`);
    closedKeys(spec, ["scope", "read", "history"], where);
    const scope = spec.scope ?? "session";
    if (!SCOPES.includes(scope)) throw refusal(`${where}: scope must be "session" or "agent", not ${safeJson(scope) ?? typeName(scope)}`);
    if (r.projections[scope]) throw refusal(`${where}: a ${scope} projection is already declared (one per scope)`);
    if (typeof spec.read !== "function") throw refusal(`${where}: read must be a function (ctx) => value | undefined`);
    const history = spec.history ?? false;
    if (typeof history !== "boolean") throw refusal(`${where}: history must be true or false`);
    if (history && scope !== "session") throw refusal(`${where}: history is kept per Session: only a session projection keeps one`);
    r.projections[scope] = spec.read;
    if (history) r.projections.history = true;
    return this;
  }

  prompt(fn) {
    return onceCallback(this, "prompt", ".prompt()", fn);
  }

  tools(fn) {
    return onceCallback(this, "tools", ".tools()", fn);
  }

  /**
   * The run's Files (the exclusive files grant): `fn(context, run)` returns
   * a Files port (`sqliteWorkspace(bounds)`, `r2Files(bucket, { prefix })`
   * or the host's own port object) or undefined. Needs `.requests({ files:
   * true })`, and is called only for the roster's files grant holder, once
   * per run.
   */
  files(fn) {
    const r = record(this);
    if (r.requests.files !== true) throw refusal(`extension ${r.id}: .files() needs .requests({ files: true }) first (the files grant is requested, then granted by the host's roster)`);
    return onceCallback(this, "files", ".files()", fn);
  }
}

function record(definition) {
  const r = DEFINITIONS.get(definition);
  if (r === undefined) throw new TypeError("not an extension definition (use defineExtension)");
  return r;
}

function declaration(definition, what) {
  const r = record(definition);
  if (r.callbacksStarted) throw refusal(`extension ${r.id}: .${what}() ${DECLARATION_RULE}`);
  if (r.declared.has(what)) throw refusal(`extension ${r.id}: .${what}() is declared twice`);
  return r;
}

function callback(definition) {
  const r = record(definition);
  r.callbacksStarted = true;
  return r;
}

function onceCallback(definition, hook, method, fn) {
  const r = callback(definition);
  if (r.hooks[hook]) throw refusal(`extension ${r.id}: ${method} is declared twice`);
  if (typeof fn !== "function") throw refusal(`extension ${r.id}: ${method} takes a function`);
  r.hooks[hook] = fn;
  return definition;
}

function checkDescription(description, where) {
  if (description === undefined || description === null) return null;
  if (typeof description !== "string") throw refusal(`${where}: description must be a string`);
  if (codePoints(description) > EXTENSION_DESCRIPTION_MAX) throw refusal(`${where}: description is longer than ${EXTENSION_DESCRIPTION_MAX} characters`);
  if (!wellFormed(description)) throw refusal(`${where}: description has a lone surrogate (not UTF-8)`);
  return description;
}

/** Starts an extension: `defineExtension("goal")` or `defineExtension({ id: "goal", version: "1.2.0" })`. */
export function defineExtension(spec) {
  let id = spec;
  let version = "0.0.0";
  if (isPlainObject(spec)) {
    id = spec.id;
    closedKeys(spec, ["id", "version"], `extension ${label(id)}`);
    if (spec.version !== undefined) version = spec.version;
  }
  if (typeof id !== "string" || !ID.test(id)) throw refusal(`extension ${label(id)}: the id must be a string matching ${ID}`);
  if (typeof version !== "string" || !VERSION.test(version)) {
    throw refusal(`extension ${id}: version ${quote(version)} must match ${VERSION} (e.g. "1.2.0")`);
  }
  return new ExtensionDefinition({
    id,
    version,
    declared: new Set(),
    callbacksStarted: false,
    config: null,
    state: { version: 1, collections: new Map(), migrations: new Map() },
    requests: {},
    commands: new Map(),
    hooks: { settled: null, timer: null, activate: null, prompt: null, tools: null, files: null },
    projections: { session: null, agent: null, history: false },
  });
}

/** Whether `value` was made by defineExtension. */
/**
 * `context.send` refused by the admission transaction. `reason` `closed`:
 * the send required an existing Session (`requireExistingSession: true`)
 * and it is absent; nothing was created.
 */
export class AdmissionError extends Error {
  constructor(reason, sessionId, message) {
    super(message);
    this.name = "AdmissionError";
    this.reason = reason;
    this.sessionId = sessionId;
  }
}

export function isExtension(value) {
  return typeof value === "object" && value !== null && DEFINITIONS.has(value);
}

// ---------------------------------------------------------------------------
// The roster and the manifest

/** The host's roster (`ShiitakeDO#extensions()`) as `[{ definition, grantKey, feature, config }]`. */
export function normalizeRoster(list) {
  if (!Array.isArray(list)) throw refusal(`extension roster: expected an array of extensions, not ${typeName(list)}`);
  if (list.length > EXTENSIONS_MAX) throw refusal(`extension roster: ${list.length} extensions, more than ${EXTENSIONS_MAX}`);
  const seen = new Set();
  let filesHolder;
  return list.map((item, i) => {
    const entry = normalizeEntry(item, `extension roster[${i}]`);
    const id = record(entry.definition).id;
    if (seen.has(id)) throw refusal(`extension ${id}: listed twice in the roster`);
    seen.add(id);
    if (entry.grants.includes("files")) {
      if (filesHolder !== undefined) throw refusal(`extension ${id}: the files grant is exclusive and extension ${filesHolder} holds it`);
      filesHolder = id;
    }
    return entry;
  });
}

function normalizeEntry(item, where) {
  let spec = { extension: item };
  if (!isExtension(item)) {
    if (!isPlainObject(item)) throw refusal(`${where}: not an extension definition (defineExtension) or { extension, grantKey?, grants?, feature?, config?, direct? }`);
    spec = item;
  }
  if (!isExtension(spec.extension)) throw refusal(`${where}: extension is not an extension definition (defineExtension)`);
  const r = record(spec.extension);
  const at = `extension ${r.id}`;
  closedKeys(spec, ["extension", "grantKey", "grants", "feature", "config", "direct"], at);
  // `direct: true`: the commands its tools hook offers are also direct tools
  // (`<id>_<command>`), so a host without `execute` offers them.
  const direct = spec.direct ?? false;
  if (typeof direct !== "boolean") throw refusal(`${at}: direct must be a boolean`);
  if (direct && r.hooks.tools === null) throw refusal(`${at}: direct: true offers the commands of its tools(...) hook, and the definition has none`);
  const grantKey = spec.grantKey ?? r.id;
  if (typeof grantKey !== "string" || !GRANT_KEY.test(grantKey)) throw refusal(`${at}: grantKey ${quote(grantKey)} must match ${GRANT_KEY}`);
  const grants = spec.grants ?? [];
  if (!Array.isArray(grants)) throw refusal(`${at}: grants must be an array of ${GRANTS.join(" or ")}`);
  for (const [i, g] of grants.entries()) {
    if (!GRANTS.includes(g)) throw refusal(`${at}: grants[${i}] ${quote(g)} is not a grant; the grants are ${GRANTS.join(" and ")}`);
    if (grants.indexOf(g) !== i) throw refusal(`${at}: grants ${g} twice`);
    if (r.requests[g] !== true) throw refusal(`${at}: grants ${g}, which the definition does not request (requests({ ${g}: true }))`);
  }
  const feature = spec.feature ?? null;
  if (feature !== null) {
    if (typeof feature !== "string" || feature.length === 0 || codePoints(feature) > EXTENSION_FEATURE_MAX || !wellFormed(feature)) {
      throw refusal(`${at}: feature must be a non-empty string of at most ${EXTENSION_FEATURE_MAX} characters`);
    }
  }
  const given = spec.config !== undefined;
  let config = given ? toJson(spec.config, `${at}: config`) : r.config?.hasDefault ? cloneJson(r.config.default) : null;
  if (r.config?.standard) {
    const input = given || r.config.hasDefault ? config : undefined;
    const output = runStandard(r.config.standard, input, `${at}: config`, "config is validated synchronously when the roster is read");
    config = output === undefined ? null : toJson(output, `${at}: config`);
  }
  return Object.freeze({ definition: spec.extension, grantKey, grants: Object.freeze([...grants]), feature, config, direct });
}

function entryOf(entry) {
  if (isExtension(entry)) return normalizeEntry(entry, "extension entry");
  if (typeof entry === "object" && entry !== null && isExtension(entry.definition)) return entry;
  throw refusal("extension entry: expected a normalized roster entry (normalizeRoster) or a definition");
}

/** The plain-JSON description of one normalized roster entry, for the core. */
export function manifestOf(entry) {
  const { definition, grantKey, grants, feature, config, direct } = entryOf(entry);
  const r = record(definition);
  const collections = {};
  for (const c of r.state.collections.values()) {
    collections[c.name] = { document: c.document, schema: cloneJson(c.json), validate: c.validate };
  }
  const commands = {};
  for (const c of r.commands.values()) {
    commands[c.name] = { scope: c.scope, inputSchema: cloneJson(c.input.json), validate: c.input.validate, description: c.description };
  }
  return {
    id: r.id,
    version: r.version,
    config: cloneJson(config ?? null),
    configSchema: r.config ? cloneJson(r.config.json) : null,
    configValidate: r.config ? r.config.validate : false,
    state: { version: r.state.version, collections },
    migrations: [...r.state.migrations.keys()].sort((a, b) => a - b),
    commands,
    hooks: { settled: r.hooks.settled !== null, timer: r.hooks.timer !== null, activate: r.hooks.activate !== null },
    projection: { session: r.projections.session !== null, agent: r.projections.agent !== null, history: r.projections.history },
    prompt: r.hooks.prompt !== null,
    tools: r.hooks.tools !== null,
    files: r.hooks.files !== null,
    requests: { ...r.requests },
    grantKey,
    grants: [...grants],
    feature: feature ?? null,
    ...(direct === true ? { direct } : {}),
  };
}

// ---------------------------------------------------------------------------
// Hook calls

/** Where a call runs outside the owner transaction: its name in refusals. */
const READ_ONLY_KINDS = { project: "a projection", prompt: "a prompt hook", tools: "a tools hook", files: "a files hook", activate: "an activate callback" };

/**
 * Runs one hook call: `request` is `{ kind, state, config, now, session, event }`
 * (parsed JSON from the core). Answers `{ ok: true, writes, timers, sends, ... }`
 * or `{ ok: false, error, refused? }`; never throws.
 */
export function runHook(entry, request) {
  let id = "?";
  try {
    const e = entryOf(entry);
    const r = record(e.definition);
    id = r.id;
    return call(e, r, request);
  } catch (error) {
    return failure(OWN_ERRORS.has(error) ? error.message : `extension ${id}: ${describeThrown(error)}`);
  }
}

function failure(message, refused = false) {
  const out = { ok: false, error: cut(message) };
  if (refused) out.refused = true;
  return out;
}

function call(entry, r, request) {
  const bad = (problem) => refusal(`extension ${r.id}: bad hook request: ${problem}`);
  if (!isPlainObject(request)) throw bad("expected an object");
  const { kind, event } = request;
  if (!KINDS.includes(kind)) throw bad(`unknown kind ${quote(kind)}`);
  if (!Number.isFinite(request.now)) throw bad("now must be a number (ms since epoch)");
  let session;
  if (request.session !== undefined && request.session !== null) {
    const s = request.session;
    if (!isPlainObject(s) || typeof s.id !== "string" || !(s.position === null || Number.isSafeInteger(s.position))) throw bad("session must be { id, position } or null");
    session = Object.freeze({ id: s.id, position: s.position });
  }
  if (!isPlainObject(event)) throw bad("event must be an object");
  const readOnly = READ_ONLY_KINDS[kind];
  const config = request.config !== undefined ? request.config : entry.config;
  const closed = request.closed ?? [];
  if (!Array.isArray(closed) || !closed.every((id) => typeof id === "string")) throw bad("closed must be an array of Session ids");
  const call = new HookCall(r, request.state, readOnly, new Set(closed));
  call.attentionRefusal = attentionRefusal(entry, r, kind, readOnly);
  const ctx = call.context({ config, now: request.now, session });
  try {
    return dispatch(r, call, ctx, kind, event, bad);
  } finally {
    // A context or draft kept past the call refuses to be used.
    call.closed = true;
  }
}

function dispatch(r, call, ctx, kind, event, bad) {
  switch (kind) {
    case "settled": {
      if (!r.hooks.settled) return failure(`extension ${r.id} has no settled hook`);
      invoke(call, "the settled hook", () => r.hooks.settled(ctx, cloneJson(event)));
      return call.finish();
    }
    case "timer": {
      if (!r.hooks.timer) return failure(`extension ${r.id} has no timer hook`);
      invoke(call, "the timer hook", () => r.hooks.timer(ctx, cloneJson(event)));
      return call.finish();
    }
    case "command": {
      const command = typeof event.name === "string" ? r.commands.get(event.name) : undefined;
      if (!command) return failure(`extension ${r.id} has no command ${quote(event.name)}`, true);
      // Absent input reaches a Standard Schema as undefined (so optional and
      // default schemas apply), and the handler as null otherwise.
      let input = event.input === undefined ? undefined : cloneJson(event.input);
      if (!command.input.standard && input === undefined) input = null;
      if (command.input.standard) {
        try {
          const why = "command input is validated inside the owner transaction, synchronously";
          input = runStandard(command.input.standard, input, `extension ${r.id}: command ${command.name}: input`, why);
        } catch (error) {
          if (error.invalid) return failure(error.message, true);
          throw error;
        }
      }
      const what = `the command ${command.name}`;
      const result = invoke(call, what, () => command.handler(ctx, input));
      const json = result === undefined ? null : toJson(result, `extension ${r.id}: ${what} returned a value that is not JSON`);
      return { ...call.finish(), result: json };
    }
    case "migrate": {
      const { from, to } = event;
      const max = r.state.version;
      if (!Number.isInteger(from) || !Number.isInteger(to) || from < 1 || to <= from || to > max) {
        throw bad(`migrate from ${safeJson(from)} to ${safeJson(to)} is not within 1..=${max} (the declared state version)`);
      }
      call.openMigration();
      for (let v = from + 1; v <= to; v++) {
        const step = r.state.migrations.get(v);
        invoke(call, `the migration ${v}`, () => step(call.migrationDraft, ctx));
      }
      return call.finish();
    }
    case "project": {
      const scope = event.scope;
      if (!SCOPES.includes(scope)) throw bad(`project scope must be "session" or "agent", not ${quote(scope)}`);
      const read = r.projections[scope];
      if (!read) return failure(`extension ${r.id} has no ${scope} projection`);
      const out = unwrapOption(invoke(call, `the ${scope} projection`, () => read(ctx)));
      const done = call.finish();
      if (out !== undefined) done.value = toJson(out, `extension ${r.id}: the ${scope} projection's value is not JSON`);
      return done;
    }
    case "prompt": {
      if (!r.hooks.prompt) return failure(`extension ${r.id} has no prompt hook`);
      const out = invoke(call, "the prompt hook", () => r.hooks.prompt(ctx, runOf(event)));
      return { ...call.finish(), sections: promptSections(r.id, out) };
    }
    case "tools": {
      if (!r.hooks.tools) return failure(`extension ${r.id} has no tools hook`);
      const made = new WeakSet();
      const commands = Object.freeze({
        tool(name, options = {}) {
          const command = typeof name === "string" ? r.commands.get(name) : undefined;
          if (!command) throw refusal(`extension ${r.id}: commands.tool: no command ${quote(name)} is declared`);
          if (command.scope !== "session") throw refusal(`extension ${r.id}: commands.tool: command ${name} has scope ${command.scope}; only session commands can be tools`);
          if (!isPlainObject(options)) throw refusal(`extension ${r.id}: commands.tool(${name}): options must be { description? }`);
          closedKeys(options, ["description"], `extension ${r.id}: commands.tool(${name})`);
          const description = checkDescription(options.description, `extension ${r.id}: commands.tool(${name})`) ?? command.description;
          const marker = Object.freeze({ command: name, description });
          made.add(marker);
          return marker;
        },
      });
      const out = invoke(call, "the tools hook", () => r.hooks.tools(ctx, runOf(event), commands));
      if (!Array.isArray(out)) throw refusal(`extension ${r.id}: the tools hook must return an array of commands.tool(...) markers, not ${typeName(out)}`);
      const names = new Set();
      const tools = out.map((marker, i) => {
        if (!made.has(marker)) throw refusal(`extension ${r.id}: the tools hook's item ${i} is not a commands.tool(...) marker`);
        if (names.has(marker.command)) throw refusal(`extension ${r.id}: the tools hook lists command ${marker.command} twice`);
        names.add(marker.command);
        return { command: marker.command, description: marker.description };
      });
      return { ...call.finish(), tools };
    }
    case "activate": {
      if (!r.hooks.activate) return failure(`extension ${r.id} has no activate callback`);
      const dispose = invoke(call, "the activate callback", () => r.hooks.activate(ctx));
      if (dispose !== undefined && dispose !== null && typeof dispose !== "function") {
        return failure(`extension ${r.id}: the activate callback must return a disposer function or undefined, not ${typeName(dispose)}`);
      }
      // The disposer is the host's to keep (js/do/hooks.mjs); JSON drops it.
      return { ...call.finish(), dispose: dispose ?? undefined };
    }
    case "files": {
      if (!r.hooks.files) return failure(`extension ${r.id} has no files hook`);
      const out = invoke(call, "the files hook", () => r.hooks.files(ctx, runOf(event)));
      // The port itself, not JSON: the shim keeps it for the run and hands
      // the core its description (js/do/hooks.mjs).
      return { ...call.finish(), files: filesPort(r.id, out) };
    }
  }
  throw bad(`unknown kind ${quote(kind)}`);
}

/**
 * Why `ctx.attention` refuses in this call, or null: it needs the roster's
 * attention grant and runs in commands, settled and timer hooks only.
 */
function attentionRefusal(entry, r, kind, readOnly) {
  if (readOnly) return `extension ${r.id}: attention is not available in ${readOnly} (outside the owner transaction)`;
  if (kind === "migrate") return `extension ${r.id}: attention is not available in a migration; only commands, settled hooks and timer hooks change attention`;
  if (!entry.grants.includes("attention")) {
    const asks = r.requests.attention === true ? "" : " and its definition to request it (.requests({ attention: true }))";
    return `extension ${r.id}: attention needs the attention grant: its roster entry must grant it ({ extension, grants: ["attention"] })${asks}`;
  }
  return null;
}

/** Runs a user callback: its value, or a refusal naming `what` (thrown, or a promise returned). */
function invoke(hookCall, what, fn) {
  let out;
  try {
    out = fn();
  } catch (error) {
    if (OWN_ERRORS.has(error)) throw error;
    throw refusal(`extension ${hookCall.id}: ${what} threw: ${describeThrown(error)}`);
  }
  if (isThenable(out)) {
    silence(out);
    throw refusal(`extension ${hookCall.id}: ${what} returned a promise; commands and hooks run inside the owner transaction and must be synchronous`);
  }
  return out;
}

function unwrapOption(value) {
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    if (value._tag === "None") return undefined;
    if (value._tag === "Some" && "value" in value) return value.value;
  }
  return value;
}

function runOf(event) {
  return Object.freeze({ sessionId: event.sessionId, commandId: event.commandId });
}

/** The brand of `sqliteWorkspace()` (js/files.mjs `WORKSPACE`, a registered symbol). */
const WORKSPACE = Symbol.for("shiitake.files.workspace");
/** The Files port methods (js/files.d.ts `FilesPort`). */
const PORT_METHODS = ["read", "stat", "list", "write", "replace"];

/** What a files hook returned: a Files port, or null for none this run. */
function filesPort(id, out) {
  if (out === undefined || out === null) return null;
  const what = "the files hook must return a Files port (sqliteWorkspace(), r2Files(bucket) or an object with read, stat, list, write and replace) or undefined";
  if (typeof out !== "object") throw refusal(`extension ${id}: ${what}, not ${typeName(out)}`);
  if (out[WORKSPACE] !== undefined) return out;
  const missing = PORT_METHODS.filter((m) => typeof out[m] !== "function");
  if (missing.length > 0) throw refusal(`extension ${id}: ${what}; this one has no ${missing.join(", ")}`);
  return out;
}

function promptSections(id, out) {
  if (out === undefined || out === null) return [];
  const list = typeof out === "string" ? [out] : out;
  if (!Array.isArray(list)) throw refusal(`extension ${id}: the prompt hook must return a string, an array of strings or undefined, not ${typeName(out)}`);
  const sections = [];
  for (const [i, section] of list.entries()) {
    if (typeof section !== "string") throw refusal(`extension ${id}: the prompt hook's section ${i} is ${typeName(section)}, not a string`);
    if (!wellFormed(section)) throw refusal(`extension ${id}: the prompt hook's section ${i} has a lone surrogate (not UTF-8)`);
    if (section !== "") sections.push(section);
  }
  return sections;
}

/**
 * One hook call's working state: the rows (from the request, then with this
 * call's writes), the writes, timers and sends in first-touch order.
 */
class HookCall {
  constructor(r, state, readOnly, closedSessions = new Set()) {
    this.r = r;
    this.id = r.id;
    this.readOnly = readOnly;
    this.closed = false;
    // Sessions the admission found absent for a send requiring one (the
    // core runs the callback again with them, so `send` throws).
    this.closedSessions = closedSessions;
    this.rows = new Map();
    this.sorted = new Map();
    this.writes = new Map();
    this.timers = new Map();
    this.sends = [];
    this.attention = [];
    this.attentionRefusal = null;
    if (state !== undefined && state !== null && !isPlainObject(state)) throw refusal(`extension ${r.id}: bad hook request: state must be an object`);
    for (const [name, c] of r.state.collections) {
      const given = state?.[name];
      if (given !== undefined && given !== null && !isPlainObject(given)) throw refusal(`extension ${r.id}: bad hook request: state.${name} must be an object of rows`);
      const rows = new Map();
      for (const key of Object.keys(given ?? {})) {
        if (c.document && key !== "") continue;
        if (given[key] !== null && given[key] !== undefined) rows.set(key, given[key]);
      }
      this.rows.set(name, rows);
    }
    this.view = this.makeView(false, () => true);
  }

  context({ config, now, session }) {
    const self = this;
    const live = (what) => {
      if (self.closed) throw refusal(`extension ${self.id}: ${what} was called after the hook call returned`);
    };
    const writable = (what) => {
      live(what);
      if (self.readOnly) throw refusal(`extension ${self.id}: ${what} is not available in ${self.readOnly} (outside the owner transaction)`);
    };
    const state = Object.freeze({
      read(fn) {
        live("state.read");
        if (typeof fn !== "function") throw refusal(`extension ${self.id}: state.read takes a function (view) => value`);
        return synchronous(self.id, "state.read", fn(self.view));
      },
      update(fn) {
        writable("state.update");
        if (typeof fn !== "function") throw refusal(`extension ${self.id}: state.update takes a function (draft) => value`);
        let open = true;
        const draft = self.makeView(true, () => open);
        try {
          return synchronous(self.id, "state.update", fn(draft));
        } finally {
          open = false;
        }
      },
    });
    const timers = Object.freeze({
      set(name, options) {
        writable("timers.set");
        self.setTimer(name, options, now);
      },
      cancel(name) {
        writable("timers.cancel");
        if (typeof name !== "string" || !TIMER_NAME.test(name)) throw refusal(`extension ${self.id}: timers.cancel: name ${quote(name)} must match ${TIMER_NAME}`);
        self.timers.set(name, { name, cancel: true });
      },
    });
    return Object.freeze({
      extensionId: this.id,
      config: config === undefined ? null : cloneJson(config),
      now,
      session,
      // The seed's name for session.position: the committed Session
      // position read inside the calling transaction (null where none is).
      sessionPosition: session?.position ?? null,
      state,
      timers,
      send(message) {
        writable("send");
        self.send(message);
      },
      attention: Object.freeze({
        set(sessionId, item) {
          live("attention.set");
          self.setAttention(sessionId, item);
        },
        clear(sessionId, id) {
          live("attention.clear");
          self.clearAttention(sessionId, id);
        },
      }),
    });
  }

  attentionSession(what, sessionId) {
    if (this.attentionRefusal !== null) throw refusal(this.attentionRefusal.replace(": attention ", `: ${what} `));
    if (typeof sessionId !== "string" || !SESSION_ID.test(sessionId)) throw refusal(`extension ${this.id}: ${what}: sessionId ${quote(sessionId)} must match ${SESSION_ID}`);
  }

  setAttention(sessionId, item) {
    this.attentionSession("attention.set", sessionId);
    const where = `extension ${this.id}: attention.set(${sessionId})`;
    if (!isPlainObject(item)) throw refusal(`${where}: item must be { id, kind, summary, since, expiresAt? }`);
    closedKeys(item, ["id", "kind", "summary", "since", "expiresAt"], where);
    const { id, kind, summary, since } = item;
    if (typeof id !== "string" || !ATTENTION_ID.test(id)) throw refusal(`${where}: id ${quote(id)} must be 1 to ${ATTENTION_ID_BYTES_MAX} of [A-Za-z0-9._:-]`);
    if (typeof kind !== "string" || !ATTENTION_KIND.test(kind)) throw refusal(`${where}: kind ${quote(kind)} must be 1 to ${ATTENTION_KIND_BYTES_MAX} of [a-z0-9_.-]`);
    if (typeof summary !== "string" || summary.length === 0) throw refusal(`${where}: summary must be a non-empty string`);
    if (!wellFormed(summary)) throw refusal(`${where}: summary has a lone surrogate (not UTF-8)`);
    const chars = codePoints(summary);
    if (chars > ATTENTION_SUMMARY_CHARS_MAX) throw refusal(`${where}: summary is ${chars} characters; at most ${ATTENTION_SUMMARY_CHARS_MAX}`);
    if (!Number.isSafeInteger(since) || since < 0) throw refusal(`${where}: since must be an integer ms since epoch, not ${quote(since)}`);
    const out = { id, kind, summary, since };
    if (item.expiresAt !== undefined) {
      if (!Number.isSafeInteger(item.expiresAt) || item.expiresAt < 0) throw refusal(`${where}: expiresAt must be an integer ms since epoch, not ${quote(item.expiresAt)}`);
      out.expiresAt = item.expiresAt;
    }
    this.attention.push({ op: "set", sessionId, item: out });
  }

  clearAttention(sessionId, id) {
    this.attentionSession("attention.clear", sessionId);
    const where = `extension ${this.id}: attention.clear(${sessionId})`;
    if (typeof id !== "string" || !ATTENTION_ID.test(id)) throw refusal(`${where}: id ${quote(id)} must be 1 to ${ATTENTION_ID_BYTES_MAX} of [A-Za-z0-9._:-]`);
    this.attention.push({ op: "clear", sessionId, id });
  }

  setTimer(name, options, now) {
    const where = `extension ${this.id}: timers.set`;
    if (typeof name !== "string" || !TIMER_NAME.test(name)) throw refusal(`${where}: name ${quote(name)} must match ${TIMER_NAME}`);
    const at0 = `${where}(${name})`;
    if (!isPlainObject(options)) throw refusal(`${at0}: options must be { at } or { delayMs }, with sessionId? and payload?`);
    closedKeys(options, ["at", "delayMs", "sessionId", "payload"], at0);
    const hasAt = options.at !== undefined;
    const hasDelay = options.delayMs !== undefined;
    if (hasAt === hasDelay) throw refusal(`${at0}: give exactly one of at (ms since epoch) and delayMs`);
    let at;
    if (hasAt) {
      if (!Number.isSafeInteger(options.at) || options.at < 0) throw refusal(`${at0}: at must be an integer ms since epoch, not ${quote(options.at)}`);
      at = options.at;
    } else {
      if (!Number.isSafeInteger(options.delayMs) || options.delayMs < 0) throw refusal(`${at0}: delayMs must be an integer >= 0, not ${quote(options.delayMs)}`);
      at = Math.floor(now) + options.delayMs;
    }
    const sessionId = options.sessionId ?? null;
    if (sessionId !== null && (typeof sessionId !== "string" || !SESSION_ID.test(sessionId))) {
      throw refusal(`${at0}: sessionId must match ${SESSION_ID}`);
    }
    const payload = options.payload === undefined ? null : toJson(options.payload, `${at0}: payload`);
    this.timers.set(name, { name, at, sessionId, payload });
  }

  send(message) {
    const where = `extension ${this.id}: send`;
    if (!isPlainObject(message)) throw refusal(`${where}: expected { sessionId, text, requireExistingSession? }`);
    closedKeys(message, ["sessionId", "text", "requireExistingSession"], where);
    const { sessionId, text } = message;
    if (typeof sessionId !== "string" || !SESSION_ID.test(sessionId)) throw refusal(`${where}: sessionId must match ${SESSION_ID}`);
    if (typeof text !== "string" || text.length === 0) throw refusal(`${where}: text must be a non-empty string`);
    if (!wellFormed(text)) throw refusal(`${where}: text has a lone surrogate (not UTF-8)`);
    if (utf8Length(text) > EXTENSION_SEND_TEXT_BYTES_MAX) throw refusal(`${where}: text is longer than ${EXTENSION_SEND_TEXT_BYTES_MAX} UTF-8 bytes`);
    const requireExistingSession = message.requireExistingSession ?? false;
    if (typeof requireExistingSession !== "boolean") throw refusal(`${where}: requireExistingSession must be true or false`);
    if (requireExistingSession && this.closedSessions.has(sessionId)) throw new AdmissionError("closed", sessionId, `${where}: Session ${sessionId} does not exist, and the send requires an existing Session`);
    this.sends.push({ sessionId, text, requireExistingSession });
  }

  /** A migration's draft stays open for every step of the call. */
  openMigration() {
    this.migrationDraft = this.makeView(true, () => !this.closed);
  }

  /** The view (`writable` false) or a draft over the collections; `open()` tells whether it may still be used. */
  makeView(writable, open) {
    const view = Object.create(null);
    for (const [name, c] of this.r.state.collections) {
      view[name] = c.document ? this.documentHandle(c, writable, open) : this.collectionHandle(c, writable, open);
    }
    return Object.freeze(view);
  }

  collectionHandle(c, writable, open) {
    const self = this;
    const rows = this.rows.get(c.name);
    const usable = (what) => {
      if (!open() || self.closed) throw refusal(`extension ${self.id}: collection ${c.name}: ${what} on a view or draft used after its state.read/state.update returned`);
    };
    const keys = () => {
      let sorted = self.sorted.get(c.name);
      if (sorted === undefined) {
        sorted = [...rows.keys()].sort(compareKeys);
        self.sorted.set(c.name, sorted);
      }
      return sorted;
    };
    const handle = {
      get(key) {
        usable("get");
        return typeof key === "string" && rows.has(key) ? cloneJson(rows.get(key)) : undefined;
      },
      has(key) {
        usable("has");
        return typeof key === "string" && rows.has(key);
      },
      keys() {
        usable("keys");
        return [...keys()];
      },
      values() {
        usable("values");
        return keys().map((k) => cloneJson(rows.get(k)));
      },
      entries() {
        usable("entries");
        return keys().map((k) => [k, cloneJson(rows.get(k))]);
      },
      get size() {
        usable("size");
        return rows.size;
      },
    };
    if (writable) {
      handle.put = (key, row) => {
        usable("put");
        self.checkKey(c, key);
        self.write(c, key, self.checkRow(c, key, row));
      };
      handle.delete = (key) => {
        usable("delete");
        self.checkKey(c, key);
        self.write(c, key, null);
      };
    }
    return Object.freeze(handle);
  }

  documentHandle(c, writable, open) {
    const self = this;
    const rows = this.rows.get(c.name);
    const usable = (what) => {
      if (!open() || self.closed) throw refusal(`extension ${self.id}: document ${c.name}: ${what} on a view or draft used after its state.read/state.update returned`);
    };
    const handle = {
      get() {
        usable("get");
        return rows.has("") ? cloneJson(rows.get("")) : undefined;
      },
    };
    if (writable) {
      handle.set = (row) => {
        usable("set");
        self.write(c, "", self.checkRow(c, "", row));
      };
      handle.clear = () => {
        usable("clear");
        self.write(c, "", null);
      };
    }
    return Object.freeze(handle);
  }

  checkKey(c, key) {
    const where = `extension ${this.id}: collection ${c.name}`;
    if (typeof key !== "string" || key.length === 0) throw refusal(`${where}: key ${quote(key)}: keys are non-empty strings`);
    if (!wellFormed(key)) throw refusal(`${where}: key ${quote(key)} has a lone surrogate (not UTF-8)`);
    if (utf8Length(key) > EXTENSION_KEY_BYTES_MAX) throw refusal(`${where}: key ${JSON.stringify(cut(key, 20))}...: longer than ${EXTENSION_KEY_BYTES_MAX} UTF-8 bytes`);
  }

  checkRow(c, key, row) {
    const where = c.document ? `extension ${this.id}: document ${c.name}` : `extension ${this.id}: collection ${c.name}, key ${JSON.stringify(key)}`;
    let value = row;
    if (value === null) throw refusal(`${where}: a row cannot be null (${c.document ? "clear()" : "delete(key)"} removes it)`);
    if (c.standard) {
      const why = "extension state is validated inside the owner transaction, synchronously";
      value = runStandard(c.standard, value, where, why, `extension ${this.id}: ${c.document ? "document" : "collection"} ${c.name}`);
    }
    if (value === undefined) throw refusal(`${where}: the row is undefined, not JSON`);
    if (value === null) throw refusal(`${where}: the schema's output is null; a row cannot be null`);
    return toJson(value, where);
  }

  write(c, key, value) {
    const rows = this.rows.get(c.name);
    if (value === null) rows.delete(key);
    else rows.set(key, value);
    this.sorted.delete(c.name);
    const id = `${c.name}\u0000${key}`;
    const existing = this.writes.get(id);
    if (existing) existing.value = value;
    else this.writes.set(id, { collection: c.name, key, value });
  }

  /** Closes the call: the success answer with its writes, timers, sends and attention changes. */
  finish() {
    this.closed = true;
    const out = {
      ok: true,
      writes: [...this.writes.values()].map((w) => ({ collection: w.collection, key: w.key, value: cloneJson(w.value) })),
      timers: [...this.timers.values()],
      sends: this.sends,
    };
    // Only when used: `attention` changes, in call order.
    if (this.attention.length > 0) out.attention = this.attention;
    return out;
  }
}

function synchronous(id, what, out) {
  if (isThenable(out)) {
    silence(out);
    throw refusal(`extension ${id}: ${what}'s function returned a promise; state is read and written synchronously`);
  }
  return out;
}

// ---------------------------------------------------------------------------
// For the shim only (js/meta-schema.mjs runs the host's metadata schema the same
// way); not part of the documented API.
export const SCHEMA_INTERNALS = Object.freeze({ isStandardSchema, isPlainObject, isThenable, silence, typeName, runStandard, toJson, refusal });
