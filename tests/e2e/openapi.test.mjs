// docs/openapi.json against the real routes, both ways:
// - the document is well-formed OpenAPI 3.1 (required fields, path templates,
//   every $ref resolves, every schema compiles under Ajv's strict mode);
// - every documented operation is served and answers as documented: its
//   status is listed for the operation, a JSON body validates against the
//   schema documented for that status, the watch stream's events validate
//   against `WatchEvent`; and a request the document allows is not refused
//   (400/413), a request it refuses is (query bounds, closed bodies); the
//   same for the identity-bound answers of the multi-author host (metadata,
//   403 not_owner, invalid_meta) and a misconfigured host's 503; the error
//   code enum covers src/error.rs;
// - every route the Agent serves, at the mount (js/app.mjs) and directly at
//   the Durable Object, is documented, and a documented path answers 405 to
//   the methods it does not list; an operation marked `x-host-only` is
//   served at the Durable Object only, and the mount answers it 405.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import Ajv2020 from "ajv/dist/2020.js";
import { MODEL_NAME, PNG_1X1, ROOT, TOKEN, Watch, bundleFixture, describe, eventually, kind, startWorker, useWorker } from "./helpers.mjs";

const DOC_FILE = path.join(ROOT, "docs/openapi.json");
const doc = JSON.parse(readFileSync(DOC_FILE, "utf8"));
const DOC_ID = "openapi.json";
const HTTP_METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
/** Methods the route discovery tries on every candidate path. */
const PROBE_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"];

const S = "/sessions";
const ONE = "/sessions/{sessionId}";
const COMMANDS = "/sessions/{sessionId}/commands";
const WITHDRAW = "/sessions/{sessionId}/withdraw";
const SETTLEMENT = "/sessions/{sessionId}/settlement";
const WATCH = "/sessions/{sessionId}/watch";
const LATEST = "/sessions/{sessionId}/pending/latest";
const BRANCHES = "/sessions/{sessionId}/branches";
const MODEL = "/sessions/{sessionId}/model";
const BUDGET = "/budget";
const SESSION_BUDGET = "/sessions/{sessionId}/budget";

// ---------------------------------------------------------------- document

/** Every `[method, template, operation, pathItem]` of the document. */
function operations() {
  const ops = [];
  for (const [template, item] of Object.entries(doc.paths)) {
    for (const method of HTTP_METHODS) if (item[method]) ops.push([method, template, item[method], item]);
  }
  return ops;
}

const opKey = (method, template) => `${method.toLowerCase()} ${template}`;

/** The value at a local `#/...` JSON pointer, or undefined. */
function pointer(ref) {
  if (typeof ref !== "string" || !ref.startsWith("#/")) return undefined;
  let node = doc;
  for (const raw of ref.slice(2).split("/")) {
    const key = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
    if (node === null || typeof node !== "object" || !Object.hasOwn(node, key)) return undefined;
    node = node[key];
  }
  return node;
}

/** Follows `$ref`s of an OpenAPI object (a response, parameter, schema). */
function resolve(obj) {
  for (let i = 0; obj && typeof obj === "object" && typeof obj.$ref === "string"; i++) {
    assert.ok(i < 16, "a $ref cycle");
    obj = pointer(obj.$ref);
  }
  return obj;
}

/** Every `$ref` string in the document with where it is. */
function refs(node = doc, at = "#", out = []) {
  if (Array.isArray(node)) node.forEach((v, i) => refs(v, `${at}/${i}`, out));
  else if (node && typeof node === "object") {
    for (const [k, v] of Object.entries(node)) {
      if (k === "$ref" && typeof v === "string") out.push([at, v]);
      else refs(v, `${at}/${k.replaceAll("~", "~0").replaceAll("/", "~1")}`, out);
    }
  }
  return out;
}

const ajv = new Ajv2020({ strict: true, allErrors: true, discriminator: true });
// The OpenAPI document is registered whole so its `#/components/...` refs
// resolve; its top-level fields are annotations, not validation keywords.
ajv.addVocabulary(["openapi", "info", "jsonSchemaDialect", "servers", "paths", "webhooks", "components", "security", "tags", "externalDocs"]);
ajv.addFormat("int64", { type: "number", validate: (n) => Number.isSafeInteger(n) });
ajv.addSchema(doc, DOC_ID);

const compiled = new WeakMap();
/** An Ajv validator for a schema object found in the document. */
function validatorFor(schema) {
  assert.ok(schema && typeof schema === "object", "a schema object");
  let v = compiled.get(schema);
  if (!v) {
    const rebase = (node) => {
      if (Array.isArray(node)) return node.map(rebase);
      if (!node || typeof node !== "object") return node;
      return Object.fromEntries(Object.entries(node).map(([k, x]) => [k, k === "$ref" && typeof x === "string" && x.startsWith("#") ? DOC_ID + x : rebase(x)]));
    };
    v = ajv.compile(rebase(schema));
    compiled.set(schema, v);
  }
  return v;
}

function errorsOf(validate) {
  return ajv.errorsText(validate.errors, { separator: "; ", dataVar: "body" });
}

// ---------------------------------------------------------------- harness

// A short retry delay so a scripted model failure shows a runtime-error
// event and then settles within the test's time.
const h = useWorker({ model: "echo", bindings: { SHIITAKE_RETRY_BASE_MS: 20, SHIITAKE_RETRY_MAX_MS: 40 } });

/** The statuses each operation answered, for the coverage check. */
const answered = new Map();

const isUnrouted = (status, json) => (status === 404 && json?.error?.code === "not_found") || status === 405;

const INVALID_JSON = Symbol("invalid JSON");

/** A query value as the schema's type sees it (query strings are text). */
function coerce(value, schema) {
  const s = resolve(schema);
  return s?.type === "integer" && /^-?\d+$/.test(value) ? Number(value) : value;
}

/** What the document says is wrong with a request: [] when it allows it. */
function requestProblems(op, item, { params = {}, query = {}, body, raw }) {
  const problems = [];
  const declared = [...(item.parameters ?? []), ...(op.parameters ?? [])].map(resolve);
  for (const p of declared) {
    const value = p.in === "path" ? params[p.name] : p.in === "query" ? query[p.name] : undefined;
    if (value === undefined) {
      if (p.required) problems.push(`${p.in} parameter ${p.name} is missing`);
      continue;
    }
    const v = validatorFor(p.schema);
    if (!v(coerce(value, p.schema))) problems.push(`${p.in} parameter ${p.name}: ${errorsOf(v)}`);
  }
  for (const name of Object.keys(query)) {
    if (!declared.some((p) => p.in === "query" && p.name === name)) problems.push(`query parameter ${name} is not documented`);
  }
  const rb = resolve(op.requestBody);
  if (rb) {
    let present = body !== undefined;
    let value = body;
    if (raw !== undefined) {
      present = typeof raw !== "string" || raw.trim() !== "";
      try {
        value = JSON.parse(typeof raw === "string" ? raw : new TextDecoder().decode(raw));
      } catch {
        value = INVALID_JSON;
      }
    }
    if (!present) {
      if (rb.required) problems.push("the body is missing");
    } else if (value === INVALID_JSON) {
      problems.push("the body is not JSON");
    } else {
      const v = validatorFor(rb.content["application/json"].schema);
      if (!v(value)) problems.push(`body: ${errorsOf(v)}`);
    }
  } else if (body !== undefined || raw !== undefined) {
    problems.push("the operation documents no body");
  }
  return problems;
}

/**
 * Asserts that an answer is documented for the operation: served (not 404
 * not_found / 405), its status listed, its content type documented for that
 * status and, for JSON, its body valid against the documented schema.
 */
function conforms(method, template, res, label) {
  const op = doc.paths[template]?.[method];
  assert.ok(op, `${label}: ${opKey(method, template)} is not in the document`);
  assert.ok(!isUnrouted(res.status, res.json), `${label}: the route is not served: ${describe(res)}`);
  const documented = op.responses[String(res.status)];
  assert.ok(documented, `${label}: HTTP ${res.status} is not documented for ${opKey(method, template)}: ${describe(res)}`);
  const response = resolve(documented);
  const type = (res.headers.get("content-type") ?? "").split(";")[0].trim().toLowerCase();
  if (!response.content) {
    assert.equal(res.text, "", `${label}: HTTP ${res.status} is documented without a body: ${describe(res)}`);
  } else {
    const media = response.content[type];
    assert.ok(media, `${label}: HTTP ${res.status} answered \`${type}\`; documented: ${Object.keys(response.content).join(", ")}`);
    if (type === "application/json") {
      assert.notEqual(res.json, undefined, `${label}: not JSON: ${describe(res)}`);
      const v = validatorFor(media.schema);
      assert.ok(v(res.json), `${label}: HTTP ${res.status} does not match its documented schema: ${errorsOf(v)}\n${describe(res)}`);
    }
  }
  const key = opKey(method, template);
  if (!answered.has(key)) answered.set(key, new Set());
  answered.get(key).add(res.status);
}

/**
 * Sends one request of a documented operation for `agent` and checks the
 * answer against the document; also checks that the server refuses exactly
 * the requests the document refuses (400/413) among those sent. `status`:
 * the status the scenario expects; `beyondSchema`: why the server refuses a
 * request the schemas allow (a rule no schema states). An `x-host-only`
 * operation is sent to the Durable Object itself, after the mount answered
 * it 405. Returns the answer.
 */
async function call(agent, method, template, { params = {}, query = {}, body, raw, token, status, beyondSchema } = {}) {
  const op = doc.paths[template]?.[method];
  assert.ok(op, `${opKey(method, template)} is not in the document`);
  const p = template.replace(/\{(\w+)\}/g, (_, name) => encodeURIComponent(params[name]));
  const qs = new URLSearchParams(query).toString();
  const label = `${method.toUpperCase()} ${p}${qs ? `?${qs}` : ""}`;
  const mounted = `/agents/${agent.id}${p}${qs ? `?${qs}` : ""}`;
  let res;
  if (op["x-host-only"]) {
    const refused = await agent.h.api(method.toUpperCase(), mounted, raw ?? body, token === undefined ? {} : { token });
    assert.equal(refused.status, 405, `${label}: host-only, yet the mount answered ${describe(refused)}`);
    res = await atObject(agent, method.toUpperCase(), `${p}${qs ? `?${qs}` : ""}`, raw ?? body);
  } else {
    res = await agent.h.api(method.toUpperCase(), mounted, raw ?? body, token === undefined ? {} : { token });
  }
  conforms(method, template, res, label);
  const problems = token === null ? [] : requestProblems(op, doc.paths[template], { params, query, body, raw });
  if (problems.length > 0) {
    assert.ok([400, 413].includes(res.status), `${label}: the document refuses this request (${problems.join("; ")}) but the server answered ${describe(res)}`);
  } else if (beyondSchema === undefined) {
    assert.ok(![400, 413].includes(res.status), `${label}: the document allows this request but the server refused it: ${describe(res)}`);
  }
  if (status !== undefined) assert.equal(res.status, status, `${label}: expected HTTP ${status}, got ${describe(res)}`);
  return res;
}

/** One request to the Durable Object of `agent` itself (what the host's own code reaches, bypassing the mount): `{status, json, text, headers}`. */
async function atObject(agent, method, rel, body) {
  const ns = await agent.h.mf.getDurableObjectNamespace("SHIITAKE");
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    init.headers["content-type"] = "application/json";
  }
  const res = await ns.get(ns.idFromName(agent.id)).fetch(`http://do${rel}`, init);
  const text = await res.text();
  let json;
  try {
    json = text === "" ? null : JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text, headers: res.headers };
}

/** Opens a watch and checks the answer (200 `text/event-stream`) against the document; returns the Watch. */
async function openWatch(agent, sessionId) {
  const controller = new AbortController();
  const p = `/sessions/${encodeURIComponent(sessionId)}/watch`;
  const res = await agent.h.mf.dispatchFetch(`http://localhost/agents/${agent.id}${p}`, {
    headers: { authorization: `Bearer ${TOKEN}`, accept: "text/event-stream" },
    signal: controller.signal,
  });
  const type = (res.headers.get("content-type") ?? "").split(";")[0].trim();
  assert.equal(res.status, 200, `GET ${p}: HTTP ${res.status}`);
  assert.equal(type, "text/event-stream");
  const media = resolve(doc.paths[WATCH].get.responses["200"]).content[type];
  assert.ok(media, "the watch's 200 documents text/event-stream");
  assert.ok(media["x-event-schema"], "the watch's 200 names its event schema (x-event-schema)");
  const key = opKey("get", WATCH);
  if (!answered.has(key)) answered.set(key, new Set());
  answered.get(key).add(200);
  return { watch: new Watch(res, controller, 5000), validate: validatorFor(media["x-event-schema"]) };
}

/** Admits a prompt (asserting the documented Receipt) and returns its commandId. */
async function admit(agent, sessionId, requestId, text, extra = {}) {
  const res = await call(agent, "post", COMMANDS, { params: { sessionId }, body: { type: "prompt", requestId, text, ...extra }, status: 200 });
  assert.equal(res.json.status, "accepted");
  return res.json.commandId;
}

async function settled(agent, sessionId, commandId) {
  const res = await call(agent, "get", SETTLEMENT, { params: { sessionId }, query: { commandId, timeoutMs: "10000" }, status: 200 });
  assert.notEqual(res.json, null, `${commandId} did not settle within 10 s`);
  return res.json;
}

// ---------------------------------------------------------------- tests

test("docs/openapi.json is well-formed OpenAPI 3.1", () => {
  assert.match(doc.openapi, /^3\.1\.\d+$/, "openapi: 3.1.x");
  assert.equal(typeof doc.info?.title, "string");
  assert.equal(typeof doc.info?.version, "string");
  assert.ok(doc.paths && typeof doc.paths === "object", "paths");

  const dangling = refs().filter(([, ref]) => pointer(ref) === undefined);
  assert.deepEqual(dangling, [], "every $ref resolves to a local JSON pointer");

  const operationIds = new Set();
  for (const [template, item] of Object.entries(doc.paths)) {
    assert.match(template, /^\/[A-Za-z0-9{}/_-]*[^/]$/, `path ${template}`);
    for (const key of Object.keys(item)) assert.ok([...HTTP_METHODS, "parameters", "summary", "description", "servers", "$ref"].includes(key), `${template}: unknown field ${key}`);
    const templated = [...template.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
    for (const method of HTTP_METHODS) {
      const op = item[method];
      if (!op) continue;
      const label = opKey(method, template);
      assert.equal(typeof op.operationId, "string", `${label}: operationId`);
      assert.ok(!operationIds.has(op.operationId), `${label}: operationId ${op.operationId} is not unique`);
      operationIds.add(op.operationId);
      const params = [...(item.parameters ?? []), ...(op.parameters ?? [])].map(resolve);
      for (const p of params) {
        assert.equal(typeof p.name, "string", `${label}: a parameter without a name`);
        assert.ok(["path", "query", "header", "cookie"].includes(p.in), `${label}: ${p.name}: in`);
        assert.ok(p.schema, `${label}: ${p.name}: schema`);
        if (p.in === "path") assert.equal(p.required, true, `${label}: path parameter ${p.name} is required`);
      }
      const inPath = params.filter((p) => p.in === "path").map((p) => p.name).sort();
      assert.deepEqual(inPath, templated, `${label}: path parameters match the template`);
      assert.ok(op.responses && Object.keys(op.responses).length > 0, `${label}: responses`);
      for (const [status, r] of Object.entries(op.responses)) {
        assert.match(status, /^([1-5](\d\d|XX)|default)$/, `${label}: response key ${status}`);
        const response = resolve(r);
        assert.equal(typeof response?.description, "string", `${label} ${status}: description`);
        for (const [type, media] of Object.entries(response.content ?? {})) {
          assert.ok(media.schema, `${label} ${status} ${type}: schema`);
          validatorFor(media.schema);
        }
      }
      const rb = resolve(op.requestBody);
      if (rb) validatorFor(rb.content["application/json"].schema);
      for (const requirement of op.security ?? doc.security ?? []) {
        for (const name of Object.keys(requirement)) assert.ok(doc.components?.securitySchemes?.[name], `${label}: security scheme ${name}`);
      }
    }
  }

  // Every component compiles (Ajv strict mode: no unknown keyword, no
  // ambiguous type) and is used somewhere.
  const used = new Set(refs().map(([, ref]) => ref));
  for (const [section, entries] of Object.entries(doc.components ?? {})) {
    for (const [name, value] of Object.entries(entries)) {
      if (section === "schemas") validatorFor(value);
      if (section !== "securitySchemes") assert.ok(used.has(`#/components/${section}/${name}`), `components/${section}/${name} is never referenced`);
    }
  }

  // The error codes are the ones the implementation answers.
  const codes = new Set(resolve({ $ref: "#/components/schemas/ErrorCode" }).enum);
  const rust = readFileSync(path.join(ROOT, "src/error.rs"), "utf8");
  const fromRust = [...rust.matchAll(/=> \d{3}, "([a-z_]+)",/g)].map((m) => m[1]);
  assert.ok(fromRust.length >= 15, "src/error.rs codes found");
  for (const code of fromRust) assert.ok(codes.has(code), `ErrorCode lacks ${code} (src/error.rs)`);
});

test("every documented operation is served and answers as documented", async () => {
  const a = h.agent();
  const sid = { sessionId: "s" };

  // Sessions: create, with every documented kind of body.
  await call(a, "post", S, { body: sid, status: 201 });
  await call(a, "post", S, { body: {}, status: 201 });
  await call(a, "post", S, { raw: "", status: 201 });
  await call(a, "post", S, { body: sid, status: 409 });
  await call(a, "post", S, { body: { sessionId: "no spaces" }, status: 400 });
  await call(a, "post", S, { body: { sessionId: "x".repeat(129) }, status: 400 });
  await call(a, "post", S, { body: { sessionId: "x".repeat(128) }, status: 201 });
  await call(a, "post", S, { body: { sessionId: "ok", extra: true }, status: 400 });
  await call(a, "post", S, { raw: "{", status: 400 });

  // List, at the documented bounds.
  const first = await call(a, "get", S, { query: { limit: "1" }, status: 200 });
  assert.equal(typeof first.json.cursor, "string");
  await call(a, "get", S, { query: { limit: "200", cursor: first.json.cursor }, status: 200 });
  await call(a, "get", S, { status: 200 });
  for (const query of [{ limit: "0" }, { limit: "201" }, { limit: "x" }, { cursor: "" }, { page: "1" }]) await call(a, "get", S, { query, status: 400 });

  // The inbox, at the documented bounds (no extensions: running and settled).
  const inbox = await call(a, "get", "/inbox", { query: { limit: "1" }, status: 200 });
  assert.equal(typeof inbox.json.nextCursor, "string");
  await call(a, "get", "/inbox", { query: { limit: "200", cursor: inbox.json.nextCursor }, status: 200 });
  await call(a, "get", "/inbox", { status: 200 });
  for (const query of [{ limit: "0" }, { limit: "201" }, { limit: "x" }, { cursor: "" }, { page: "1" }]) await call(a, "get", "/inbox", { query, status: 400 });
  await call(a, "get", "/inbox", { query: { cursor: "x" }, status: 400, beyondSchema: "a cursor this API never returned" });

  // The usage ledger (the Session's turns so far), at the documented bounds.
  const ledger = await call(a, "get", "/usage", { query: { groupBy: "session", limit: "1" }, status: 200 });
  for (const groupBy of ["session", "model", "day"]) await call(a, "get", "/usage", { query: { groupBy, limit: "200", from: "0", to: String(Date.now() + 1) }, status: 200 });
  await call(a, "get", "/usage", { status: 200 });
  await call(a, "get", "/usage", { query: { sessionId: "s", groupBy: "day", from: "0" }, status: 200 });
  await call(a, "get", "/usage", { query: { sessionId: "never-made" }, status: 200 });
  if (ledger.json.nextCursor !== null) await call(a, "get", "/usage", { query: { groupBy: "session", cursor: ledger.json.nextCursor }, status: 200 });
  for (const query of [{ limit: "0" }, { limit: "201" }, { groupBy: "week" }, { from: "-1" }, { to: "x" }, { cursor: "" }, { page: "1" }, { sessionId: "" }, { sessionId: "a b" }, { sessionId: "s".repeat(129) }]) await call(a, "get", "/usage", { query, status: 400 });
  await call(a, "get", "/usage", { query: { from: "5", to: "4" }, status: 400, beyondSchema: "to before from" });
  await call(a, "get", "/usage", { query: { cursor: "s" }, status: 400, beyondSchema: "a cursor without groupBy" });

  // Commands: every type, replays, refusals.
  const p1 = await admit(a, "s", "p1", "hello");
  const done = await settled(a, "s", p1);
  assert.equal(done.terminal, "completed");
  await call(a, "get", SETTLEMENT, { params: sid, query: { commandId: p1, timeoutMs: "30000" }, status: 200 });
  await call(a, "get", SETTLEMENT, { params: sid, query: { commandId: p1, timeoutMs: "0" }, status: 200 });
  const p2 = await admit(a, "s", "p2", "", { images: [{ mediaType: "image/png", data: PNG_1X1 }], delivery: "followUp" });
  await settled(a, "s", p2);
  const o1 = await call(a, "post", COMMANDS, { params: sid, body: { type: "operator", requestId: "o1", text: "a note" }, status: 200 });
  assert.equal((await settled(a, "s", o1.json.commandId)).answer, null);
  assert.equal(await admit(a, "s", "p1", "hello"), p1, "a replay answers the original receipt");
  await call(a, "post", COMMANDS, { params: sid, body: { type: "prompt", requestId: "p1", text: "other" }, status: 409 });
  const late = await call(a, "post", COMMANDS, { params: sid, body: { type: "cancel", commandId: p1 }, status: 200 });
  assert.equal(late.json.status, "too_late");
  await call(a, "post", COMMANDS, { params: sid, body: { type: "cancel", commandId: "cmd_never", onlyIfPending: true }, status: 404 });
  await call(a, "post", COMMANDS, { params: sid, body: { type: "abort" }, status: 200 });
  await call(a, "post", COMMANDS, { params: { sessionId: "nobody" }, body: { type: "abort" }, status: 404 });
  const refused = [
    { type: "prompt", requestId: "r", text: "" },
    { type: "prompt", requestId: "", text: "x" },
    { type: "prompt", requestId: "r", text: "x", extra: 1 },
    { type: "prompt", requestId: "r", text: "x", delivery: "later" },
    { type: "prompt", requestId: "r", text: "x", images: Array(5).fill({ mediaType: "image/png", data: PNG_1X1 }) },
    { type: "prompt", requestId: "r", text: "x", images: [{ mediaType: "text/html", data: "AAAA" }] },
    { type: "prompt", requestId: "r", text: "x", images: [{ mediaType: "image/png", data: "A" }] },
    { type: "prompt", requestId: "r", text: "x".repeat(65537) },
    { type: "prompt", requestId: "r".repeat(257), text: "x" },
    { type: "operator", requestId: "r", text: "" },
    { type: "operator", requestId: "r", text: "x", delivery: "steer" },
    { type: "cancel", commandId: "" },
    { type: "cancel", commandId: "c".repeat(257) },
    { type: "cancel", commandId: "c", onlyIfPending: "yes" },
    { type: "abort", force: true },
    { type: "launch" },
    { requestId: "r", text: "x" },
    [],
  ];
  for (const body of refused) await call(a, "post", COMMANDS, { params: sid, body, status: 400 });
  await call(a, "post", COMMANDS, { params: sid, raw: "{", status: 400 });
  await call(a, "post", COMMANDS, { params: sid, raw: "", status: 400 });
  await call(a, "post", COMMANDS, { params: sid, raw: "x".repeat(1_048_577), status: 413 });
  // The largest documented text and the most images are admitted.
  const big = await admit(a, "s", "big", "x".repeat(65536), { images: Array(4).fill({ mediaType: "image/gif", data: PNG_1X1 }) });
  await settled(a, "s", big);

  // Withdraw.
  const w = await call(a, "post", WITHDRAW, { params: sid, body: { requestId: "p1" }, status: 200 });
  assert.deepEqual(w.json, { status: "accepted", commandId: p1 });
  const unknown = await call(a, "post", WITHDRAW, { params: sid, body: { requestId: "never" }, status: 200 });
  assert.deepEqual(unknown.json, { status: "unknown" });
  await call(a, "post", COMMANDS, { params: sid, body: { type: "prompt", requestId: "never", text: "x" }, status: 409 });
  await call(a, "post", WITHDRAW, { params: sid, body: {}, status: 400 });
  await call(a, "post", WITHDRAW, { params: sid, body: { requestId: "" }, status: 400 });
  await call(a, "post", WITHDRAW, { params: sid, body: { requestId: "r", why: "x" }, status: 400 });
  await call(a, "post", WITHDRAW, { params: sid, raw: "[", status: 400 });
  await call(a, "post", WITHDRAW, { params: { sessionId: "nobody" }, body: { requestId: "r" }, status: 404 });

  // A Session with a running turn (the model holds it) and a queue: the
  // read, null settlements, cancel and abort with their real shapes.
  const tag = `openapi-hold-${a.id}`;
  h.model.scriptFor(tag, { hang: true });
  await call(a, "post", S, { body: { sessionId: "held" }, status: 201 });
  const held = { sessionId: "held" };
  const head = await admit(a, "held", "head", `${tag}: never answered`);
  await eventually(async () => (await call(a, "get", ONE, { params: held, status: 200 })).json.running?.commandId === head, { what: "the held turn to run" });
  const q1 = await admit(a, "held", "q1", "first queued");
  await admit(a, "held", "q2", "second queued", { images: [{ mediaType: "image/webp", data: PNG_1X1 }], delivery: "steer" });
  const page = await call(a, "get", ONE, { params: held, status: 200 });
  assert.equal(page.json.running.commandId, head);
  const selectWhileRunning = { type: "select", requestId: "busy", entryId: page.json.messages[0].entryId };
  assert.equal((await call(a, "post", COMMANDS, { params: held, body: selectWhileRunning, status: 409 })).json.error.code, "session_busy");
  assert.deepEqual(page.json.pending.map((p) => p.requestId), ["q1", "q2"]);
  const latest = await call(a, "get", LATEST, { params: held, status: 200 });
  assert.equal(latest.json.requestId, "q2", "an unbound request gets the newest pending prompt");
  await call(a, "get", LATEST, { params: held, query: { principal: "x" }, status: 400 });
  await call(a, "get", LATEST, { params: { sessionId: "nobody" }, status: 404 });
  for (const timeoutMs of ["0", "20"]) {
    const none = await call(a, "get", SETTLEMENT, { params: held, query: { commandId: q1, timeoutMs }, status: 200 });
    assert.equal(none.json, null);
  }
  const cancelled = await call(a, "post", COMMANDS, { params: held, body: { type: "cancel", commandId: q1, onlyIfPending: true }, status: 200 });
  assert.equal(cancelled.json.status, "cancelled");
  await call(a, "post", COMMANDS, { params: held, body: { type: "cancel", commandId: q1 }, status: 200 });
  const running = await call(a, "post", COMMANDS, { params: held, body: { type: "cancel", commandId: head, onlyIfPending: true }, status: 200 });
  assert.equal(running.json.status, "too_late");
  const aborted = await call(a, "post", COMMANDS, { params: held, body: { type: "abort" }, status: 200 });
  assert.deepEqual(aborted.json.cancelled.map((c) => c.requestId), ["head", "q2"]);
  assert.equal((await settled(a, "held", head)).terminal, "cancelled");
  assert.equal((await call(a, "get", LATEST, { params: held, status: 200 })).json, null, "nothing pending");

  // Read, at the documented bounds.
  const full = await call(a, "get", ONE, { params: sid, status: 200 });
  assert.deepEqual(new Set(full.json.messages.map((m) => m.role)), new Set(["user", "assistant", "operator"]));
  const newest = await call(a, "get", ONE, { params: sid, query: { limit: "1" }, status: 200 });
  assert.equal(typeof newest.json.cursor, "string");
  await call(a, "get", ONE, { params: sid, query: { before: newest.json.cursor, limit: "200" }, status: 200 });
  for (const query of [{ limit: "0" }, { limit: "201" }, { after: "1" }]) await call(a, "get", ONE, { params: sid, query, status: 400 });
  await call(a, "get", ONE, { params: sid, query: { before: "x" }, status: 400, beyondSchema: "a cursor this API never returned" });
  await call(a, "get", ONE, { params: { sessionId: "nobody" }, status: 404 });
  await call(a, "get", ONE, { params: { sessionId: "bad!id" }, status: 400 });

  // Settlement refusals.
  for (const query of [{}, { commandId: "" }, { commandId: p1, timeoutMs: "-1" }, { commandId: p1, wait: "1" }]) {
    await call(a, "get", SETTLEMENT, { params: sid, query, status: 400 });
  }
  await call(a, "get", SETTLEMENT, { params: sid, query: { commandId: "cmd_never" }, status: 404 });
  await call(a, "get", SETTLEMENT, { params: { sessionId: "nobody" }, query: { commandId: p1 }, status: 404 });

  // Watch: every event validates against WatchEvent, including a failed
  // model call (runtime-error) that is retried and then answered.
  const { watch, validate } = await openWatch(a, "s");
  try {
    const failing = `openapi-fail-${a.id}`;
    h.model.scriptFor(failing, { status: 500 });
    const c = await admit(a, "s", "watched", `${failing}: fails once, then echoes`);
    await call(a, "post", COMMANDS, { params: sid, body: { type: "operator", requestId: "o2", text: "watched note" }, status: 200 });
    await watch.until((ev) => ev.event === "frame" && ev.data?.type === "settled" && ev.data.settlement.commandId === c);
    // A tool turn through the demo's notes module: tool-step and tool messages.
    const tooled = `openapi-tools-${a.id}`;
    h.model.scriptFor(tooled, { toolCalls: [{ name: "execute", arguments: { code: "return await notes.add_note({ text: 'n' })" } }] }, { text: "noted" });
    const t = await admit(a, "s", "tooled", `${tooled}: uses a tool`);
    await watch.until((ev) => ev.event === "frame" && ev.data?.type === "settled" && ev.data.settlement.commandId === t);
    const page = (await call(a, "get", ONE, { params: sid, query: { limit: "200" }, status: 200 })).json;
    assert.ok(page.messages.some((m) => m.role === "tool" && m.data !== undefined), "a tool message with display data");
    assert.ok(page.messages.some((m) => m.role === "assistant" && m.toolCalls?.length === 1), "a tool-step message");
    // Selecting another branch: the watchers' `branch` frame.
    await call(a, "post", COMMANDS, { params: sid, body: { type: "select", requestId: "watched-select", entryId: page.messages[0].entryId }, status: 200 });
    await watch.until((ev) => ev.event === "frame" && ev.data?.type === "branch");
    for (const ev of watch.events) assert.ok(validate(ev), `watch event ${kind(ev)} does not match WatchEvent: ${errorsOf(validate)}\n${JSON.stringify(ev)}`);
    const kinds = new Set(watch.events.map(kind));
    for (const k of ["snapshot", "admitted", "message", "started", "delta", "settled", "runtime-error", "branch"]) assert.ok(kinds.has(k), `no ${k} event; got ${[...kinds].join(", ")}`);
  } finally {
    await watch.close();
  }
  await call(a, "get", WATCH, { params: sid, query: { since: "1" }, status: 400 });
  await call(a, "get", WATCH, { params: { sessionId: "nobody" }, status: 404 });

  // Branches: an edit, a retry, a select, the children of an entry, a fork.
  await call(a, "post", S, { body: { sessionId: "b" }, status: 201 });
  const bid = { sessionId: "b" };
  await settled(a, "b", await admit(a, "b", "b1", "one"));
  await settled(a, "b", await admit(a, "b", "b2", "two"));
  const [one, reOne, two] = (await call(a, "get", ONE, { params: bid, status: 200 })).json.messages;
  await settled(a, "b", await admit(a, "b", "b3", "TWO", { after: reOne.entryId }));
  const retried = await call(a, "post", COMMANDS, { params: bid, body: { type: "retry", requestId: "b4", entryId: two.entryId }, status: 200 });
  await settled(a, "b", retried.json.commandId);
  await call(a, "post", COMMANDS, { params: bid, body: { type: "select", requestId: "b5", entryId: two.entryId }, status: 200 });
  const branched = (await call(a, "get", ONE, { params: bid, status: 200 })).json.messages;
  assert.deepEqual(branched.map((m) => m.branch?.count ?? 1), [1, 1, 2, 2]);
  const kids = await call(a, "get", BRANCHES, { params: bid, query: { entryId: reOne.entryId, limit: "1" }, status: 200 });
  assert.equal(kids.json.count, 2);
  await call(a, "get", BRANCHES, { params: bid, query: { entryId: reOne.entryId, cursor: kids.json.cursor, limit: "200" }, status: 200 });
  for (const query of [{}, { entryId: one.entryId, limit: "0" }, { entryId: one.entryId, limit: "201" }, { entryId: one.entryId, after: "1" }]) {
    await call(a, "get", BRANCHES, { params: bid, query, status: 400 });
  }
  await call(a, "get", BRANCHES, { params: bid, query: { entryId: "msg_never" }, status: 404 });
  await call(a, "get", BRANCHES, { params: { sessionId: "nobody" }, query: { entryId: one.entryId }, status: 404 });
  await call(a, "get", BRANCHES, { params: sid, query: { entryId: one.entryId }, status: 400, beyondSchema: "which Session holds the entry" });

  // The Session's explicit model (the demo offers SHIITAKE_MODEL alone).
  await call(a, "get", MODEL, { params: sid, status: 200 });
  await call(a, "put", MODEL, { params: sid, body: { model: `openai/${MODEL_NAME}`, reasoning: "low" }, status: 200 });
  await call(a, "put", MODEL, { params: sid, body: { model: "openai/not-offered" }, status: 422 });
  await call(a, "put", MODEL, { params: sid, body: { model: `openai/${MODEL_NAME}`, reasoning: "huge" }, status: 400 });
  await call(a, "put", MODEL, { params: sid, body: { reasoning: "low" }, status: 400 });
  await call(a, "put", MODEL, { params: { sessionId: "nobody" }, body: { model: `openai/${MODEL_NAME}` }, status: 404 });
  await call(a, "delete", MODEL, { params: sid, status: 200 });
  await call(a, "delete", MODEL, { params: { sessionId: "nobody" }, status: 404 });
  await call(a, "get", MODEL, { params: { sessionId: "nobody" }, status: 404 });

  // Budgets: read through the mount, set and cleared at the object (host-only).
  const unbudgeted = await call(a, "get", BUDGET, { status: 200 });
  assert.equal(unbudgeted.json.spent, null, "nothing counted before a budget exists");
  await call(a, "get", BUDGET, { query: { x: "1" }, status: 400 });
  await call(a, "put", BUDGET, { body: { tokens: 1_000_000 }, status: 200 });
  for (const body of [{}, { tokens: -1 }, { tokens: 1.5 }, { tokens: "5" }, { tokens: 1e15 + 1 }, { tokens: 5, day: 1 }]) await call(a, "put", BUDGET, { body, status: 400 });
  await call(a, "delete", BUDGET, { status: 200 });
  await call(a, "get", SESSION_BUDGET, { params: sid, status: 200 });
  await call(a, "get", SESSION_BUDGET, { params: { sessionId: "nobody" }, status: 404 });
  await call(a, "put", SESSION_BUDGET, { params: { sessionId: "nobody" }, body: { tokens: 5 }, status: 404 });
  await call(a, "put", SESSION_BUDGET, { params: sid, body: { tokens: 5, more: true }, status: 400 });
  await call(a, "delete", SESSION_BUDGET, { params: { sessionId: "nobody" }, status: 404 });
  // A turn a budget pauses: its frame, the read, the inbox row and the budget as documented.
  await call(a, "post", S, { body: { sessionId: "bud" }, status: 201 });
  const bud = { sessionId: "bud" };
  await call(a, "put", SESSION_BUDGET, { params: bud, body: { tokens: 1 }, status: 200 });
  {
    const { watch, validate } = await openWatch(a, "bud");
    try {
      const held = await admit(a, "bud", "bud1", "paused by its budget");
      await watch.until((e) => e.event === "frame" && e.data?.type === "paused");
      const running = (await call(a, "get", ONE, { params: bud, status: 200 })).json.running;
      assert.equal(running?.paused?.reason, "budget_reached", JSON.stringify(running));
      const row = (await call(a, "get", "/inbox", { status: 200 })).json.sessions.find((r) => r.sessionId === "bud");
      assert.equal(row?.paused?.budget.scope, "session", JSON.stringify(row));
      assert.equal((await call(a, "get", SESSION_BUDGET, { params: bud, status: 200 })).json.paused?.reason, "budget_reached");
      await call(a, "delete", SESSION_BUDGET, { params: bud, status: 200 });
      assert.equal((await settled(a, "bud", held)).terminal, "completed");
      await watch.until((e) => e.event === "frame" && e.data?.type === "settled");
      for (const ev of watch.events) assert.ok(validate(ev), `watch event ${kind(ev)} does not match WatchEvent: ${errorsOf(validate)}\n${JSON.stringify(ev)}`);
    } finally {
      await watch.close();
    }
  }
  const branchRefusals = [
    [{ type: "retry", requestId: "b6", entryId: reOne.entryId }, 400, "the role of the entry"],
    [{ type: "prompt", requestId: "b6", text: "x", after: one.entryId, delivery: "steer" }, 400, "`after` with a steer"],
    [{ type: "retry", requestId: "b6" }, 400],
    [{ type: "select", requestId: "b6", entryId: "" }, 400],
    [{ type: "select", requestId: "b6", entryId: "msg_never" }, 404],
    [{ type: "prompt", requestId: "b6", text: "x", after: "msg_never" }, 404],
  ];
  for (const [body, status, beyondSchema] of branchRefusals) await call(a, "post", COMMANDS, { params: bid, body, status, beyondSchema });
  await call(a, "post", S, { body: { sessionId: "bf", from: { sessionId: "b", entryId: reOne.entryId } }, status: 201 });
  await call(a, "post", S, { body: { from: { sessionId: "b", entryId: "msg_never" } }, status: 404 });
  await call(a, "post", S, { body: { from: { sessionId: "nobody", entryId: one.entryId } }, status: 404 });
  await call(a, "post", S, { body: { from: { sessionId: "s", entryId: one.entryId } }, status: 400, beyondSchema: "which Session holds the entry" });
  await call(a, "post", S, { body: { from: { sessionId: "b" } }, status: 400 });
  await call(a, "delete", ONE, { params: bid, status: 409 });
  await call(a, "delete", ONE, { params: { sessionId: "bf" }, status: 204 });
  await call(a, "delete", ONE, { params: bid, status: 204 });

  // Delete.
  await call(a, "post", S, { body: { sessionId: "gone" }, status: 201 });
  await call(a, "delete", ONE, { params: { sessionId: "gone" }, status: 204 });
  await call(a, "delete", ONE, { params: { sessionId: "gone" }, status: 404 });
  await call(a, "delete", ONE, { params: { sessionId: "bad!id" }, status: 400 });

  // ACP (docs/acp.md): JSON answers, a prompt's event stream, notifications.
  const rpc = (id, method, params) => ({ jsonrpc: "2.0", id, method, params });
  await call(a, "post", "/acp", { body: rpc(1, "initialize", { protocolVersion: 1 }), status: 200 });
  const acpSid = (await call(a, "post", "/acp", { body: rpc(2, "session/new", { cwd: "/", mcpServers: [] }), status: 200 })).json.result.sessionId;
  const streamed = await call(a, "post", "/acp", { body: rpc(3, "session/prompt", { sessionId: acpSid, prompt: [{ type: "text", text: "hi" }] }), status: 200 });
  assert.match(streamed.headers.get("content-type"), /^text\/event-stream/);
  assert.match(streamed.text, /"stopReason":"end_turn"/);
  assert.equal((await call(a, "post", "/acp", { body: rpc(4, "session/fork", {}), status: 400, beyondSchema: "the methods served" })).json.error.code, -32601);
  await call(a, "post", "/acp", { body: { jsonrpc: "2.0", method: "session/cancel", params: { sessionId: acpSid } }, status: 202 });
  await call(a, "post", "/acp", { body: { jsonrpc: "2.0", method: "session/cancel", params: { sessionId: "nobody" } }, status: 404 });
  await call(a, "post", "/acp", { body: { jsonrpc: "2.0", method: "session/cancel", params: {} }, status: 400, beyondSchema: "the params of session/cancel" });
  await call(a, "post", "/acp", { raw: "x".repeat(1_048_577), status: 413 });

  // MCP (docs/mcp-server.md): JSON answers, a tool call through its route, notifications.
  await call(a, "post", "/mcp", { body: rpc(1, "initialize", { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "openapi", version: "1" } }), status: 200 });
  const tool = await call(a, "post", "/mcp", { body: rpc(2, "tools/call", { name: "read_session", arguments: { sessionId: sid.sessionId } }), status: 200 });
  assert.equal(tool.json.result.structuredContent.sessionId, sid.sessionId);
  assert.equal((await call(a, "post", "/mcp", { body: rpc(3, "tools/call", { name: "nope" }), status: 200 })).json.error.code, -32602);
  await call(a, "post", "/mcp", { body: { jsonrpc: "2.0", method: "notifications/initialized" }, status: 202 });
  await call(a, "post", "/mcp", { raw: "{", status: 400 });
  await call(a, "post", "/mcp", { raw: "x".repeat(1_048_577), status: 413 });

  // The host's authentication.
  await call(a, "get", S, { token: null, status: 401 });

  // Extensions, on a host that runs them (tests/e2e/fixtures/extensions-worker.mjs).
  await extensionOperations();

  // The browser bridge, on a host with tools().ui (tests/e2e/fixtures/ui-worker.mjs).
  await browserOperations();

  // Coverage: every operation was served, and every documented 2xx was seen.
  for (const [method, template, op] of operations()) {
    const key = opKey(method, template);
    const got = answered.get(key) ?? new Set();
    for (const status of Object.keys(op.responses).filter((s) => /^2\d\d$/.test(s))) {
      assert.ok(got.has(Number(status)), `${key}: documented HTTP ${status} never answered (got ${[...got].join(", ") || "nothing"})`);
    }
  }
});

/** The browser bridge's routes against the document: a request streamed, claimed and answered, every refusal, then 410 after closeUi. */
async function browserOperations() {
  const script = await bundleFixture(path.join(ROOT, "tests/e2e/fixtures/ui-worker.mjs"), "ui-worker");
  const h5 = await startWorker({ scriptPath: script, model: "echo" });
  try {
    const a = h5.agent();
    const s = { sessionId: "s" };
    await call(a, "post", S, { body: s, status: 201 });
    const EVENTS = "/browser/sessions/{sessionId}/browser/events";
    const CLAIMS = "/browser/sessions/{sessionId}/browser/claims";
    const RESULTS = "/browser/sessions/{sessionId}/browser/results";
    await call(a, "get", EVENTS, { params: { sessionId: "nobody" }, status: 404 });
    await call(a, "get", EVENTS, { params: { sessionId: "bad!id" }, status: 400 });

    const controller = new AbortController();
    const res = await h5.mf.dispatchFetch(`http://localhost/agents/${a.id}/browser/sessions/s/browser/events`, {
      headers: { authorization: `Bearer ${TOKEN}` },
      signal: controller.signal,
    });
    assert.equal(res.status, 200);
    const type = (res.headers.get("content-type") ?? "").split(";")[0].trim();
    const media = resolve(doc.paths[EVENTS].get.responses["200"]).content[type];
    assert.ok(media?.["x-event-schema"], "the browser stream's 200 documents text/event-stream and its event schema");
    answered.set(opKey("get", EVENTS), new Set([200]));
    const validate = validatorFor(media["x-event-schema"]);
    const stream = new Watch(res, controller, 10_000);
    const tag = `openapi-ui-${a.id}`;
    h5.model.scriptFor(tag, { toolCalls: [{ name: "execute", arguments: { code: `return await ui.execute({ name: "greet", input: { who: "Ada" } })` } }] }, { text: "done" });
    const command = await call(a, "post", COMMANDS, { params: s, body: { type: "prompt", requestId: "ui", text: `${tag}: asks the browser` }, status: 200 });
    const request = (await stream.until((ev) => ev.event === "request")).at(-1);
    assert.ok(validate(request), `browser event does not match UiEvent: ${errorsOf(validate)}\n${JSON.stringify(request)}`);
    const requestId = request.data.requestId;

    await call(a, "post", RESULTS, { params: s, body: { requestId, claimId: "uic_none", result: 1 }, status: 409 });
    const claimed = await call(a, "post", CLAIMS, { params: s, body: { requestId }, status: 200 });
    await call(a, "post", CLAIMS, { params: s, body: { requestId }, status: 409 });
    await call(a, "post", CLAIMS, { params: s, body: { requestId: "uir_never" }, status: 404 });
    await call(a, "post", CLAIMS, { params: s, body: { requestId, more: 1 }, status: 400 });
    await call(a, "post", CLAIMS, { params: s, raw: "x".repeat(1_025), status: 413 });
    await call(a, "post", RESULTS, { params: s, body: { requestId, claimId: "uic_forged", result: 1 }, status: 409 });
    await call(a, "post", RESULTS, { params: s, body: { requestId, claimId: claimed.json.claimId, result: 1, error: "x" }, status: 400 });
    await call(a, "post", RESULTS, { params: s, raw: "x".repeat(266_241), status: 413 });
    await call(a, "post", RESULTS, { params: s, body: { requestId, claimId: claimed.json.claimId, result: { greeted: "Ada" } }, status: 200 });
    await call(a, "post", RESULTS, { params: s, body: { requestId, claimId: claimed.json.claimId, error: "late" }, status: 404 });
    await call(a, "get", SETTLEMENT, { params: s, query: { commandId: command.json.commandId, timeoutMs: "10000" }, status: 200 });

    const closed = await h5.api("POST", `/direct/${a.id}/host/close-ui`);
    assert.equal(closed.status, 200);
    await call(a, "get", EVENTS, { params: s, status: 410 });
    await call(a, "post", CLAIMS, { params: s, body: { requestId }, status: 410 });
    await call(a, "post", RESULTS, { params: s, body: { requestId, claimId: "c", result: null }, status: 410 });
    await stream.close();
  } finally {
    await h5.dispose();
  }
}

/** The extension routes' answers against the document, on a host with extensions. */
async function extensionOperations() {
  const script = await bundleFixture(path.join(ROOT, "tests/e2e/fixtures/extensions-worker.mjs"), "extensions-worker");
  const h4 = await startWorker({ scriptPath: script, model: "echo", bindings: { INIT: "ok" } });
  try {
    const a = h4.agent();
    const s = { sessionId: "s" };
    const goal = { ...s, extensionId: "goal", command: "set" };
    await call(a, "post", S, { body: s, status: 201 });
    const list = await call(a, "get", "/extensions", { status: 200 });
    assert.deepEqual(list.json.extensions.map((e) => e.id), ["goal", "reminder", "tally", "followup", "links"]);
    await call(a, "get", "/extensions", { query: { x: "1" }, status: 400 });
    await call(a, "get", "/extensions/{extensionId}", { params: { extensionId: "tally" }, status: 200 });
    await call(a, "get", "/extensions/{extensionId}", { params: { extensionId: "nope" }, status: 404 });
    const SCMD = "/sessions/{sessionId}/extensions/{extensionId}/commands/{command}";
    const ACMD = "/extensions/{extensionId}/commands/{command}";
    await call(a, "post", SCMD, { params: goal, body: { requestId: "g", input: { text: "a goal" } }, status: 200 });
    await call(a, "post", SCMD, { params: goal, body: { requestId: "g", input: { text: "a goal" } }, status: 200 });
    await call(a, "post", SCMD, { params: goal, body: { requestId: "g", input: { text: "other" } }, status: 409 });
    await call(a, "post", SCMD, { params: goal, body: { input: { text: 5 } }, status: 400, beyondSchema: true });
    await call(a, "post", SCMD, { params: goal, body: { input: {}, extra: 1 }, status: 400 });
    await call(a, "post", SCMD, { params: goal, raw: "{", status: 400 });
    await call(a, "post", SCMD, { params: { ...goal, command: "nope" }, body: {}, status: 404 });
    await call(a, "post", SCMD, { params: { ...goal, sessionId: "nobody" }, body: { input: { text: "x" } }, status: 404 });
    await call(a, "post", SCMD, { params: { ...goal, command: "end" }, body: { input: { status: "achieved" } }, status: 200 });
    await call(a, "post", SCMD, { params: { ...goal, command: "end" }, body: { input: { status: "achieved" } }, status: 422 });
    await call(a, "post", ACMD, { params: { extensionId: "tally", command: "mark" }, body: { input: "m" }, status: 200 });
    await call(a, "post", ACMD, { params: { extensionId: "tally", command: "mark" }, raw: "x".repeat(1_048_577), status: 413 });
    // The read carries the projections; a watch carries them as frames.
    const page = await call(a, "get", ONE, { params: s, status: 200 });
    assert.equal(page.json.extensions.goal.status, "achieved");
    const { watch, validate } = await openWatch(a, "s");
    try {
      await call(a, "post", SCMD, { params: goal, body: { input: { text: "next" } }, status: 200 });
      await watch.until((e) => e.event === "frame" && e.data?.type === "extension");
      for (const ev of watch.events) assert.ok(validate(ev), `watch event ${kind(ev)} does not match WatchEvent: ${errorsOf(validate)}\n${JSON.stringify(ev)}`);
    } finally {
      await watch.close();
    }
  } finally {
    await h4.dispose();
  }
}

test("identity-bound answers match the document (the multi-author host)", async () => {
  // tests/e2e/fixtures/multi-author-worker.mjs: the host sets `shiitakeMeta`
  // from the bearer token; a metadata schema and an identity path are bound.
  const script = await bundleFixture(path.join(ROOT, "tests/e2e/fixtures/multi-author-worker.mjs"), "multi-author-worker");
  const users = { "token-ada": { id: "ada", name: "Ada" }, "token-bob": { id: "bob", name: "Bob" }, "token-eve": { id: 7, name: "Eve" } };
  const schema = { type: "object", properties: { author: { type: "object", properties: { id: { type: "string" } } } } };
  const h2 = await startWorker({
    scriptPath: script,
    bindings: { SHIITAKE_META_SCHEMA: JSON.stringify(schema), SHIITAKE_IDENTITY_PATH: "$.author.id", SHIITAKE_USERS: JSON.stringify(users) },
  });
  try {
    const a = h2.agent();
    const s = { sessionId: "s" };
    const ada = { token: "token-ada" };
    const bob = { token: "token-bob" };
    await call(a, "post", S, { body: s, status: 201, ...ada });
    // The held model keeps the first prompt running; the others queue.
    await admitAs(a, ada, "occupier", "runs");
    const a1 = await admitAs(a, ada, "a1", "Ada's");
    await admitAs(a, bob, "b1", "Bob's", { delivery: "steer" });
    const mine = await call(a, "get", LATEST, { params: s, status: 200, ...ada });
    assert.equal(mine.json.requestId, "a1");
    assert.deepEqual(mine.json.meta, { author: { id: "ada", name: "Ada" } });
    assert.equal((await call(a, "get", LATEST, { params: s, status: 200, ...bob })).json.requestId, "b1");
    const page = await call(a, "get", ONE, { params: s, status: 200, ...ada });
    assert.ok(page.json.messages.every((m) => m.meta?.author), "messages carry the author's metadata");
    await call(a, "post", COMMANDS, { params: s, body: { type: "cancel", commandId: a1 }, status: 403, ...bob });
    await call(a, "post", COMMANDS, { params: s, body: { type: "cancel", commandId: a1 }, status: 200, ...ada });
    const cancelled = await call(a, "get", SETTLEMENT, { params: s, query: { commandId: a1 }, status: 200, ...ada });
    assert.deepEqual(cancelled.json.meta, { author: { id: "ada", name: "Ada" } }, "the canceller's metadata");
    // Eve's metadata breaks the host's schema (a numeric id).
    await call(a, "post", COMMANDS, { params: s, body: { type: "prompt", requestId: "e1", text: "x" }, status: 400, token: "token-eve", beyondSchema: "the host's metadata schema" });
    await call(a, "get", LATEST, { params: s, status: 400, token: "token-eve", beyondSchema: "the host's metadata schema" });
    await call(a, "post", COMMANDS, { params: s, body: { type: "abort" }, status: 200, ...ada });
  } finally {
    await h2.dispose();
  }

  // A host whose identity path is invalid: every request is refused, as documented.
  const h3 = await startWorker({ model: false, bindings: { SHIITAKE_IDENTITY_PATH: "author.id" } });
  try {
    const a = h3.agent();
    await call(a, "get", S, { status: 503 });
    await call(a, "post", S, { body: {}, status: 503 });
  } finally {
    await h3.dispose();
  }
});

async function admitAs(agent, as, requestId, text, extra = {}) {
  const res = await call(agent, "post", COMMANDS, { params: { sessionId: "s" }, body: { type: "prompt", requestId, text, ...extra }, status: 200, ...as });
  return res.json.commandId;
}

// ---------------------------------------------------------------- discovery

/**
 * Sends every probe method to `path` at a target: "mount" (the demo's
 * `/agents/{agentId}` through shiitakeApp) or "do" (the Durable Object
 * directly). Returns `[[method, {status, json, text}]]`; event streams are
 * cancelled unread.
 */
let namespace;
async function probe(target, agentId, p) {
  namespace ??= await h.mf.getDurableObjectNamespace("SHIITAKE");
  const stub = target === "do" ? namespace.get(namespace.idFromName(agentId)) : undefined;
  return Promise.all(
    PROBE_METHODS.map(async (method) => {
    const init = { method, headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" } };
    if (method !== "GET" && method !== "DELETE") init.body = "{}";
    const res = target === "do" ? await stub.fetch(`http://do${p}`, init) : await h.mf.dispatchFetch(`http://localhost/agents/${agentId}${p}`, init);
    let text = "";
    if ((res.headers.get("content-type") ?? "").startsWith("text/event-stream")) await res.body.cancel();
    else text = await res.text();
    let json;
    try {
      json = text === "" ? null : JSON.parse(text);
    } catch {
      json = undefined;
    }
    return [method, { status: res.status, json, text }];
    }),
  );
}

/** The documented template a concrete path matches, if any. */
function templateOf(p) {
  for (const template of Object.keys(doc.paths)) {
    const re = new RegExp(`^${template.replace(/\{\w+\}/g, "[^/]+")}$`);
    if (re.test(p)) return template;
  }
  return undefined;
}

test("every route the Agent serves is documented, at the mount and at the Durable Object", async () => {
  const a = h.agent();
  const SID = "probe";
  const fill = (template) => template.replace(/\{\w+\}/g, SID);
  // Path shapes: the documented ones, and every known segment after `/`,
  // after a Session and after the Session sub-resources that could nest.
  // Segments come from the document, from docs/http.md, from the routers
  // themselves (src/http.rs, js/app.mjs) and from a list of plausible names,
  // so a route missing from the document is still tried.
  const segments = (paths) => paths.flatMap((t) => t.split("/").filter((s) => s && !/^[{:]/.test(s)));
  const read = (file) => readFileSync(path.join(ROOT, file), "utf8");
  const router = read("src/http.rs").match(/\nfn route\([\s\S]*?\n\}\n/)?.[0] ?? "";
  assert.match(router, /"sessions"/, "src/http.rs: the route table was found");
  const vocabulary = [
    ...new Set([
      ...segments(Object.keys(doc.paths)),
      ...segments([...read("docs/http.md").matchAll(/`(\/sessions[^`?]*)`/g)].map((m) => m[1])),
      ...segments([...read("js/app.mjs").matchAll(/\["(\/sessions[^"]*)"/g)].map((m) => m[1])),
      ...[...router.matchAll(/"([a-z][a-z_-]*)"/g)].map((m) => m[1]),
      ...["agents", "session", "messages", "message", "pending", "latest", "running", "queue", "cancel", "abort", "prompt"],
      ...["events", "stream", "settlements", "status", "health", "meta", "principal", "identity", "transcript", "v1"],
    ]),
  ];
  const candidates = new Set(["/", ...Object.keys(doc.paths).map(fill), `/sessions/${SID}`]);
  for (const v of vocabulary) {
    candidates.add(`/${v}`);
    candidates.add(`/sessions/${SID}/${v}`);
  }
  for (const parent of ["pending", "messages"]) {
    for (const v of vocabulary) candidates.add(`/sessions/${SID}/${parent}/${v}`);
  }

  const check = async (target) => {
    const agentId = `${a.id}-${target}`;
    // A real Session, so Session routes answer their own way.
    await h.api("POST", `/agents/${agentId}/sessions`, { sessionId: SID });
    const undocumented = [];
    const unserved = [];
    const notRefused = [];
    for (const p of candidates) {
      const template = templateOf(p);
      for (const [method, res] of await probe(target, agentId, p)) {
        const key = template && opKey(method, template);
        const op = template && doc.paths[template][method.toLowerCase()];
        // A host-only operation is the mount's 405.
        const documented = Boolean(op) && !(target === "mount" && op["x-host-only"]);
        if (!isUnrouted(res.status, res.json)) {
          if (!documented) undocumented.push(`${method} ${p}: ${describe(res)}`);
        } else if (documented) {
          unserved.push(`${method} ${p} (${key}): ${describe(res)}`);
        } else if (template) {
          // A documented path answers 405 to the methods it does not list.
          if (res.status !== 405) notRefused.push(`${method} ${p}: ${describe(res)}`);
        }
      }
    }
    assert.deepEqual(undocumented, [], `${target}: routes served but not in docs/openapi.json`);
    assert.deepEqual(unserved, [], `${target}: documented routes not served`);
    assert.deepEqual(notRefused, [], `${target}: documented paths that do not answer 405 to other methods`);
  };
  await Promise.all([check("mount"), check("do")]);
});
