#!/usr/bin/env node
// A malformed-request fuzzer over every route of docs/openapi.json, against
// the built demo Worker in Miniflare. Each request starts from a valid one
// generated from the document (method, path and query parameters, request
// body schema) and usually breaks one thing: the body (wrong type, missing
// or extra field, duplicated key, huge or out-of-schema string, bad UTF-8,
// deep nesting, truncated or non-object JSON, over 1 MiB declared or
// chunked), the query (unknown, repeated, missing, out-of-range or malformed
// values), the path (bad, long, percent-encoded ids; unknown routes; other
// methods) or the auth (missing, wrong or malformed tokens).
//
//   node scripts/attack/fuzz.mjs [--requests 20000] [--seed S] [--lanes 4] [--short]
//
// Fails on: any 5xx; a 2xx to a request that breaks the contract; a 4xx that
// is not `{"error": {"code", "message"}}` (401s included; on `/acp` and
// `/mcp`, a JSON-RPC error response); a wrong token not
// answered 401; and any change, across a refused request, of what the read
// routes show (the Agent's Session list; the targeted Session's messages,
// pending queue, running command and newest pending prompt). Lanes run in
// parallel, each on its own Agent and one request at a time, so a change is
// attributed to the one request that caused it.

import { readFileSync } from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { PNG_1X1, ROOT, TOKEN, startWorker } from "../../tests/e2e/helpers.mjs";
import { parseArgs, random, seedOf, table, Violations } from "./lib.mjs";

const USAGE = "node scripts/attack/fuzz.mjs [--requests N] [--seed S] [--lanes L] [--short]";
const args = parseArgs(process.argv.slice(2), { requests: 20000, seed: 0, lanes: 4, short: false }, USAGE);
if (args.short) args.requests = Math.min(args.requests, 3000);
if (args.lanes < 1) {
  console.error(`--lanes must be at least 1\nusage: ${USAGE}`);
  process.exit(2);
}
const seed = seedOf(args);
const v = new Violations("fuzz");
const doc = JSON.parse(readFileSync(path.join(ROOT, "docs/openapi.json"), "utf8"));

/** Answers to a request are awaited at most this long (a valid settlement poll waits at most 30 s). */
const REQUEST_TIMEOUT_MS = 40_000;
const MIB = 1024 * 1024;

// ---- the OpenAPI document ----

const deref = (x) => {
  if (!x || typeof x !== "object" || !("$ref" in x)) return x;
  const parts = x.$ref.replace(/^#\//, "").split("/");
  let node = doc;
  for (const p of parts) node = node[p];
  // A $ref with siblings (`{$ref, type, minLength}`) narrows the target.
  const { $ref, ...rest } = x;
  return { ...deref(node), ...rest };
};

/** `[{method, template, params: [{name, in, required, schema}], body: schema|undefined, bodyRequired}]` */
const OPERATIONS = [];
for (const [template, item] of Object.entries(doc.paths)) {
  const shared = (item.parameters ?? []).map(deref);
  for (const [method, op] of Object.entries(item)) {
    // A host-only operation is never forwarded by the mount the fuzzer attacks (405).
    if (method === "parameters" || op["x-host-only"]) continue;
    const params = [...shared, ...(op.parameters ?? []).map(deref)].map((p) => ({ ...p, schema: deref(p.schema) }));
    const media = op.requestBody?.content?.["application/json"];
    OPERATIONS.push({ method: method.toUpperCase(), template, params, body: media ? deref(media.schema) : undefined, bodyRequired: !!op.requestBody?.required });
  }
}
const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

// ---- one lane: an Agent, its Sessions and commands ----

class Lane {
  constructor(h, index, rand) {
    this.h = h;
    this.rand = rand;
    this.a = h.agent(`fuzz-lane-${index}-${seed}`);
    /** Sessions a valid request may name; `base` ones are kept in existence. */
    this.base = ["s0", "s1", "s2"];
    this.pool = [...this.base, "new-0", "new-1", "new-2", "gone"];
    this.commands = new Map(); // sessionId -> [commandId]
    this.requestIds = 0;
  }

  async setup() {
    for (const sid of this.base) await this.ensure(sid);
    // s1: a running turn (the model holds it) with prompts queued behind it.
    for (let i = 0; i < 3; i++) this.remember("s1", await this.a.admit("s1", `setup-${i}`, `queued ${i}`));
    this.remember("s2", await this.a.admitOperator("s2", "setup-op", "an operator line"));
  }

  remember(sid, commandId) {
    if (!this.commands.has(sid)) this.commands.set(sid, []);
    const list = this.commands.get(sid);
    if (!list.includes(commandId)) list.push(commandId);
  }

  async ensure(sid) {
    const res = await this.a.readRaw(sid);
    if (res.status === 404) await this.a.createSession(sid);
  }

  // -- valid values, by name --
  string(name, schema) {
    const r = this.rand;
    switch (name) {
      case "sessionId":
        return r.pick(this.pool);
      case "requestId":
        return `rq-${r.int(40)}`;
      case "commandId": {
        const known = [...this.commands.values()].flat();
        return known.length > 0 && r.chance(0.8) ? r.pick(known) : `cmd_${r.int(1e6)}`;
      }
      case "text":
        return r.pick(["hello", "a longer prompt text with ünïcödé ✓", "x"]);
      case "mediaType":
        return r.pick(schema.enum);
      case "data":
        return PNG_1X1;
      default:
        if (schema.enum) return r.pick(schema.enum);
        if ("const" in schema) return schema.const;
        return "v";
    }
  }

  /** A valid instance of `schema` (named `name` in its parent). */
  gen(schema, name = "") {
    schema = deref(schema);
    const r = this.rand;
    if (schema.oneOf) return this.gen(r.pick(schema.oneOf), name);
    if ("const" in schema) return schema.const;
    if (schema.enum) return r.pick(schema.enum);
    const type = schema.type ?? (schema.properties ? "object" : "string");
    switch (type) {
      case "object": {
        const out = {};
        for (const [k, s] of Object.entries(schema.properties ?? {})) {
          if ((schema.required ?? []).includes(k) || r.chance(0.3)) out[k] = this.gen(s, k);
        }
        return out;
      }
      case "array": {
        const n = Math.max(schema.minItems ?? 0, 1);
        return Array.from({ length: n }, () => this.gen(schema.items, name));
      }
      case "integer": {
        const lo = schema.minimum ?? 0;
        const hi = Math.min(schema.maximum ?? lo + 100, lo + 100);
        return lo + r.int(hi - lo + 1);
      }
      case "boolean":
        return r.chance(0.5);
      default:
        return this.string(name, schema);
    }
  }

  /** A valid query value of a parameter; settlement polls wait briefly. */
  queryValue(p) {
    if (p.name === "timeoutMs") return String(this.rand.int(20));
    if (p.name === "cursor" || p.name === "before") return undefined; // opaque: only from a read
    return String(this.gen(p.schema, p.name));
  }

  /**
   * One request: `{method, path, headers, body, refuse, kind, sessionId}`.
   * `refuse`: the request breaks the contract, so it must get a 4xx.
   */
  request() {
    const r = this.rand;
    const op = r.pick(OPERATIONS);
    const req = { method: op.method, kind: "valid", refuse: false, headers: { authorization: `Bearer ${TOKEN}` }, agentId: this.a.id };
    let sessionId;
    const query = [];
    for (const p of op.params) {
      if (p.in === "path") sessionId = this.gen(p.schema, p.name);
      else if (p.in === "query" && (p.required || r.chance(0.4))) {
        const value = this.queryValue(p);
        if (value !== undefined) query.push([p.name, value]);
      }
    }
    let body;
    if (op.body && (op.bodyRequired || r.chance(0.5))) body = this.gen(op.body);
    const parts = { op, sessionId, query, body, raw: undefined };

    const family = r.next();
    if (family < 0.1) {
      // valid: lets state move, so refusals are tried against varied state
    } else if (family < 0.45 && op.body) this.mutateBody(req, parts);
    else if (family < 0.65) this.mutateQuery(req, parts);
    else if (family < 0.85) this.mutatePath(req, parts);
    else if (family < 0.92) this.mutateMethod(req, parts);
    else this.mutateAuth(req, parts);

    if (req.path === undefined) {
      const rel = op.template.replace("{sessionId}", encodeURIComponent(parts.sessionId ?? ""));
      const qs = parts.query.map(([k, x]) => `${encodeURIComponent(k)}=${encodeURIComponent(x)}`).join("&");
      req.path = `/agents/${encodeURIComponent(req.agentId)}${rel}${qs ? `?${qs}` : ""}`;
    }
    if (req.body === undefined && parts.raw !== undefined) req.body = parts.raw;
    else if (req.body === undefined && parts.body !== undefined) req.body = JSON.stringify(parts.body);
    if (req.body !== undefined && !req.headers["content-type"]) req.headers["content-type"] = "application/json";
    req.sessionId = this.pool.includes(parts.sessionId) && req.path.includes(`/sessions/${parts.sessionId}`) ? parts.sessionId : undefined;
    req.template = `${op.method} ${op.template}`;
    return req;
  }

  mutateBody(req, parts) {
    const r = this.rand;
    const body = parts.body ?? this.gen(parts.op.body);
    const schema = variantOf(parts.op.body, body);
    const props = Object.keys(schema.properties ?? {});
    const present = Object.keys(body);
    const required = (schema.required ?? []).filter((k) => k in body);
    const kinds = ["extra", "wrongType", "hugeString", "badString", "duplicateKey", "badUtf8", "deep", "truncated", "notObject", "oversized", "chunked", "empty", "contentType"];
    const kind = r.pick(required.length > 0 ? [...kinds, "missing"] : kinds);
    req.kind = `body.${kind}`;
    req.refuse = true;
    const strings = present.filter((k) => typeof body[k] === "string");
    switch (kind) {
      case "missing":
        delete body[r.pick(required)];
        break;
      case "extra":
        body[r.pick(["extra", "meta", "__proto__x", "Type", "sessionid", "ü"])] = r.pick([1, "x", null, {}]);
        break;
      case "wrongType": {
        if (present.length === 0) {
          const k = r.pick(props.length ? props : ["x"]);
          body[k] = r.pick([1, true, null, [], {}]);
          req.mutated = { key: k, value: body[k] };
          break;
        }
        const k = r.pick(present);
        body[k] = r.pick([42, -1.5, true, null, [], ["a"], {}, { a: 1 }, "str"].filter((x) => jsonType(x) !== jsonType(body[k])));
        req.mutated = { key: k, value: body[k] };
        break;
      }
      case "hugeString": {
        const bounded = strings.filter((k) => deref(schema.properties[k] ?? {}).maxLength !== undefined);
        if (bounded.length === 0) {
          req.refuse = false;
          break;
        }
        const k = r.pick(bounded);
        const max = deref(schema.properties[k]).maxLength;
        body[k] = "é".repeat(Math.ceil((max + 1 + r.int(max * 4)) / 2)); // over the bound in UTF-8 bytes
        break;
      }
      case "badString": {
        const constrained = strings.filter((k) => {
          const s = deref(schema.properties[k] ?? {});
          return s.enum || "const" in s || s.pattern || s.minLength;
        });
        if (constrained.length === 0) {
          req.refuse = false;
          break;
        }
        const k = r.pick(constrained);
        const s = deref(schema.properties[k]);
        const breaks = (x) => (s.pattern ? !new RegExp(s.pattern, "u").test(x) : true) && (!s.enum || !s.enum.includes(x)) && (!("const" in s) || s.const !== x);
        const candidates = ["", "no such value", "Prompt", "bad/id with spaces", "\u0000", "ü"].filter(breaks);
        body[k] = s.minLength && !s.pattern && !s.enum && !("const" in s) ? "" : r.pick(candidates);
        break;
      }
      case "duplicateKey": {
        // The same key twice with different values: which one counts must not be guessed.
        if (present.length === 0) {
          parts.raw = '{"sessionId":"dup-a","sessionId":"dup-b"}';
          break;
        }
        const k = r.pick(present);
        const other = typeof body[k] === "string" ? JSON.stringify(`${body[k]}-other`) : JSON.stringify(r.pick(["x", 1]));
        parts.raw = JSON.stringify(body).replace(/^\{/, `{${JSON.stringify(k)}:${other},`);
        break;
      }
      case "badUtf8": {
        const json = Buffer.from(JSON.stringify({ ...body, [strings[0] ?? "text"]: "AAAA" }));
        const i = json.indexOf("AAAA");
        json[i] = 0xff;
        json[i + 1] = 0xfe;
        json[i + 2] = 0xc3; // a lead byte with no continuation
        parts.raw = json;
        break;
      }
      case "deep": {
        const depth = r.pick([65, 129, 1000, 100_000]);
        const k = present.length > 0 ? r.pick(present) : "sessionId";
        const json = JSON.stringify({ ...body, [k]: "DEEP" });
        parts.raw = json.replace('"DEEP"', `${"[".repeat(depth)}1${"]".repeat(depth)}`);
        break;
      }
      case "truncated": {
        const json = JSON.stringify(body);
        parts.raw = json.slice(0, 1 + r.int(json.length - 1));
        break;
      }
      case "notObject":
        // A body is a JSON object; an array must not be read as its fields in order.
        parts.raw = r.pick(["[]", "null", "42", '"prompt"', "true", "[{}]", "{}{}", "NaN", "{'a':1}", `[${JSON.stringify(Object.values(this.gen(parts.op.body))[0] ?? `arr-${r.int(1e6)}`)}]`]);
        break;
      case "oversized": {
        const n = MIB + 1 + r.int(2 * MIB);
        parts.raw = JSON.stringify({ ...body, [strings[0] ?? "text"]: "x".repeat(n) });
        req.expectStatus = 413;
        break;
      }
      case "chunked": {
        // No content-length: the body is a stream of 64 KiB chunks past 1 MiB.
        const total = MIB + 64 * 1024 + r.int(MIB);
        const chunk = new TextEncoder().encode("x".repeat(64 * 1024));
        const head = new TextEncoder().encode('{"type":"prompt","requestId":"chunked","text":"');
        // A factory: a stream is read once, and a send the reset overtook
        // is made again with a fresh one (see runLane).
        req.stream = () => {
          let sent = 0;
          return new ReadableStream({
            pull(controller) {
              if (sent === 0) controller.enqueue(head);
              if (sent >= total) {
                controller.enqueue(new TextEncoder().encode('"}'));
                controller.close();
                return;
              }
              controller.enqueue(chunk);
              sent += chunk.length;
            },
          });
        };
        parts.raw = req.stream();
        req.expectStatus = 413;
        break;
      }
      case "empty":
        parts.raw = "";
        // POST /sessions takes no body at all as "generate an id".
        if (!parts.op.bodyRequired) req.refuse = false;
        break;
      case "contentType":
        req.headers["content-type"] = r.pick(["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json; charset=latin1"]);
        req.refuse = false; // the body is valid JSON; a host may accept any media type
        break;
    }
    parts.body = body;
  }

  mutateQuery(req, parts) {
    const r = this.rand;
    const q = parts.op.params.filter((p) => p.in === "query");
    const kind = r.pick(q.length > 0 ? ["unknown", "repeated", "range", "malformed", "missing", "cursor", "emptyKey"] : ["unknown", "emptyKey"]);
    req.kind = `query.${kind}`;
    req.refuse = true;
    const p = q.length > 0 ? r.pick(q) : undefined;
    switch (kind) {
      case "unknown":
        parts.query.push([r.pick(["foo", "LIMIT", "commandid", "limit ", "sessionId", "a[b]", "%00"]), "1"]);
        break;
      case "repeated": {
        const value = this.queryValue(p) ?? "x";
        parts.query = parts.query.filter(([k]) => k !== p.name);
        parts.query.push([p.name, value], [p.name, value]);
        break;
      }
      case "range": {
        const s = p.schema;
        if (s.type !== "integer") {
          req.refuse = false;
          break;
        }
        parts.query = parts.query.filter(([k]) => k !== p.name);
        const bad = [s.minimum - 1, (s.maximum ?? 0) + 1, -1, 2 ** 31, 2 ** 53 + 1, 1e30].filter((x) => x < s.minimum || (s.maximum !== undefined && x > s.maximum));
        parts.query.push([p.name, String(r.pick(bad))]);
        // Settlement timeoutMs above 30,000 is clamped per the seed, not refused.
        if (p.name === "timeoutMs" && Number(parts.query.at(-1)[1]) > 0) {
          req.refuse = false;
          req.kind = "query.timeoutClamp";
          // Name no command of this Session, so a clamped poll answers at once.
          parts.query = parts.query.map(([k, x]) => (k === "commandId" ? [k, `cmd_none_${r.int(1e6)}`] : [k, x]));
        }
        break;
      }
      case "malformed": {
        parts.query = parts.query.filter(([k]) => k !== p.name);
        const value = p.schema.type === "integer" ? r.pick(["", "abc", "1.5", "1e2", "0x10", " 5", "5 ", "٣", "10abc"]) : "";
        if (p.schema.type !== "integer" && p.name !== "commandId") req.refuse = false;
        parts.query.push([p.name, value]);
        break;
      }
      case "missing": {
        const required = q.filter((x) => x.required);
        if (required.length === 0) {
          req.refuse = false;
          break;
        }
        parts.query = parts.query.filter(([k]) => k !== r.pick(required).name);
        break;
      }
      case "cursor": {
        const c = q.find((x) => x.name === "cursor" || x.name === "before");
        if (!c) {
          req.refuse = false;
          break;
        }
        parts.query.push([c.name, r.pick(["garbage", "", "-1", "99999999999999999999", "eyJhIjoxfQ", "%ff", "a".repeat(5000)])]);
        break;
      }
      case "emptyKey":
        parts.rawQuery = r.pick(["&&", "=", "=1", "&", "a&a", "%zz=1", "limit=1&&"]);
        // Empty pairs are no parameter at all; `limit=1` is valid where `limit` is.
        if (["&&", "&"].includes(parts.rawQuery) || (parts.rawQuery === "limit=1&&" && q.some((x) => x.name === "limit") && !parts.query.some(([k]) => k === "limit"))) req.refuse = false;
        break;
    }
    if (parts.rawQuery !== undefined) {
      const rel = parts.op.template.replace("{sessionId}", encodeURIComponent(parts.sessionId ?? ""));
      const qs = parts.query.map(([k, x]) => `${encodeURIComponent(k)}=${encodeURIComponent(x)}`).join("&");
      req.path = `/agents/${encodeURIComponent(req.agentId)}${rel}?${qs}${qs ? "&" : ""}${parts.rawQuery}`;
    }
  }

  mutatePath(req, parts) {
    const r = this.rand;
    const hasSession = parts.op.template.includes("{sessionId}");
    const kind = r.pick(hasSession ? ["badSession", "longSession", "unknownSession", "encodedSession", "extraSegment", "agentId"] : ["extraSegment", "agentId"]);
    req.kind = `path.${kind}`;
    req.refuse = true;
    let sessionSegment = encodeURIComponent(parts.sessionId ?? "");
    switch (kind) {
      case "badSession":
        sessionSegment = r.pick(["a%20b", "%00", "%2F", "a%2Fb", "..", "%2e%2e", "ü", "%C3%BC", "%ff", "a*b", "<script>", "%E2%80%8B", "a%0Ab", "'or'1'='1"]);
        // A dot segment is normalised away: `/sessions/../budget` is `GET /budget`, a route of its own.
        if (["..", "%2e%2e"].includes(sessionSegment)) {
          const rest = parts.op.template.replace("/sessions/{sessionId}", "");
          req.refuse = !OPERATIONS.some((o) => o.template === rest && o.method === req.method);
        }
        break;
      case "longSession":
        sessionSegment = "s".repeat(r.pick([129, 256, 4096, 60_000]));
        break;
      case "unknownSession":
        // Valid-shaped, never created (POST /sessions/{id}/... routes all need it to exist).
        sessionSegment = `nosuch-${r.int(1e6)}`;
        break;
      case "encodedSession":
        // A percent-encoded spelling of a real id: may reach that Session, may be refused.
        sessionSegment = parts.sessionId.replace(/./, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
        req.refuse = false;
        break;
      case "extraSegment":
        parts.tail = r.pick(["/x", "/", "//", "/../sessions", "/commands/1", "/%2e%2e", "/settlement/extra"]);
        req.refuse = !["/", "/../sessions"].includes(parts.tail); // a trailing slash or a dot segment may be normalised away
        break;
      case "agentId":
        req.agentId = r.pick(["a".repeat(257), "é".repeat(200)]);
        break;
    }
    const rel = parts.op.template.replace("{sessionId}", sessionSegment);
    const qs = parts.query.map(([k, x]) => `${encodeURIComponent(k)}=${encodeURIComponent(x)}`).join("&");
    req.path = `/agents/${encodeURIComponent(req.agentId)}${rel}${parts.tail ?? ""}${qs ? `?${qs}` : ""}`;
    if (kind === "unknownSession" || kind === "encodedSession") req.targetsSession = decodeURIComponent(sessionSegment);
  }

  mutateMethod(req, parts) {
    const allowed = OPERATIONS.filter((o) => o.template === parts.op.template).map((o) => o.method);
    const others = METHODS.filter((m) => !allowed.includes(m) && !(m === "HEAD" && allowed.includes("GET")));
    req.method = this.rand.pick(others);
    req.kind = "method";
    req.refuse = req.method !== "OPTIONS"; // a host may answer CORS preflights
  }

  mutateAuth(req) {
    req.kind = "auth";
    req.refuse = true;
    req.expectStatus = 401;
    const bad = [null, "", "Bearer", "Bearer ", `Bearer ${TOKEN}x`, `Bearer ${TOKEN.slice(0, -1)}`, `Basic ${Buffer.from(`u:${TOKEN}`).toString("base64")}`, `Token ${TOKEN}`, `Bearer  ${TOKEN} extra`, `Bearer ${"a".repeat(10_000)}`, "Bearer \u00e9"];
    const value = this.rand.pick(bad);
    if (value === null) delete req.headers.authorization;
    else req.headers.authorization = value;
  }
}

const jsonType = (x) => (x === null ? "null" : Array.isArray(x) ? "array" : typeof x);

/** The variant of a oneOf body schema a generated body instance belongs to. */
function variantOf(schema, body) {
  schema = deref(schema);
  if (!schema.oneOf) return schema;
  return schema.oneOf.map(deref).find((s) => s.properties?.type?.const === body.type) ?? deref(schema.oneOf[0]);
}

// ---- state snapshots through the read routes ----

async function snapshot(lane, sessionIds) {
  const out = {};
  const list = await lane.a.api("GET", "/sessions?limit=200");
  out.sessions = list.status === 200 ? list.json.sessions.map((s) => s.sessionId).sort() : `HTTP ${list.status}`;
  for (const sid of sessionIds) {
    const read = await lane.a.readRaw(sid, { limit: "200" });
    if (read.status !== 200) {
      out[sid] = `HTTP ${read.status}`;
      continue;
    }
    const latest = await lane.a.api("GET", `/sessions/${encodeURIComponent(sid)}/pending/latest`);
    const page = read.json;
    out[sid] = {
      // `attempt` and timestamps may move on their own (a held model call times out and is retried).
      messages: page.messages.map((m) => [m.entryId, m.role, m.text, m.requestId, m.commandId, m.toolCallId]),
      pending: page.pending.map((p) => [p.commandId, p.requestId, p.text, p.delivery, p.position]),
      running: page.running?.commandId ?? null,
      latest: latest.status === 200 ? (latest.json?.commandId ?? null) : `HTTP ${latest.status}`,
    };
  }
  return out;
}

// ---- the run ----

async function send(h, req) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
  try {
    const init = { method: req.method, headers: req.headers, signal: controller.signal };
    if (req.body !== undefined && !["GET", "HEAD"].includes(req.method)) {
      init.body = req.body;
      if (req.body instanceof ReadableStream) init.duplex = "half";
    }
    const res = await h.mf.dispatchFetch(`http://localhost${req.path}`, init);
    let text = "";
    if ((res.headers.get("content-type") ?? "").startsWith("text/event-stream")) await res.body?.cancel();
    else text = await res.text();
    return { status: res.status, text };
  } catch (error) {
    return { status: 0, text: controller.signal.aborted ? `no answer within ${REQUEST_TIMEOUT_MS} ms` : String(error) };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Known runtime bugs, skipped only in
 * --short so the test command stays green until they are fixed; a long run
 * fails on them. Each names the request family it excuses.
 */

const byStatus = new Map();
const byKind = new Map();
let sent = 0;
let stateChecks = 0;
const examples = [];

function count(map, key) {
  map.set(key, (map.get(key) ?? 0) + 1);
}

async function runLane(h, lane, n) {
  await lane.setup();
  for (let i = 0; i < n; i++) {
    if (i % 100 === 0) for (const sid of lane.base) await lane.ensure(sid);
    const req = lane.request();
    const targets = [...new Set([req.sessionId, req.targetsSession].filter((x) => x !== undefined && /^[A-Za-z0-9._:-]{1,128}$/.test(x)))];
    const before = await snapshot(lane, targets);
    let res = await send(h, req);
    // A body refused at its bound leaves the rest unread: the connection's
    // reset can reach the client before the 413 it was sent (TCP, not the
    // server), and the client then sees no answer at all. Such a send is
    // repeated, at most twice (a stream body with a fresh stream).
    for (let again = 0; again < 2 && res.status === 0 && req.expectStatus === 413 && /fetch failed/.test(res.text); again++) {
      if (req.stream) req.body = req.stream();
      res = await send(h, req);
    }
    sent++;
    count(byStatus, res.status);
    count(byKind, `${req.kind} ${res.status}`);
    const label = `${req.method} ${req.path.length > 160 ? `${req.path.slice(0, 160)}…` : req.path} [${req.kind}]`;
    const answer = `HTTP ${res.status} ${res.text.slice(0, 300)}`;
    if (res.status === 0 || res.status >= 500) {
      v.add(`${label}: ${answer}`);
      continue;
    }
    if (req.refuse && res.status < 300) v.add(`accepted a request that breaks the contract: ${label}: ${answer}`);
    if (req.expectStatus && res.status !== req.expectStatus) v.add(`${label}: expected HTTP ${req.expectStatus}, got ${answer}`);
    if (res.status >= 400 && req.method !== "HEAD") {
      let body;
      try {
        body = JSON.parse(res.text);
      } catch {}
      const err = body?.error;
      // ACP's and MCP's routes answer a refused JSON-RPC request with a
      // JSON-RPC error response (docs/acp.md, docs/mcp-server.md): an
      // integer code.
      const rpc = /\/(acp|mcp)$/.test(req.path) && body?.jsonrpc === "2.0" && Number.isInteger(err?.code);
      v.check((typeof err?.code === "string" || rpc) && typeof err?.message === "string", () => `${label}: a ${res.status} without {"error": {code, message}}: ${answer}`);
    }
    if (res.status >= 200 && res.status < 300) {
      let json;
      try {
        json = JSON.parse(res.text);
      } catch {}
      if (typeof json?.commandId === "string" && req.sessionId) lane.remember(req.sessionId, json.commandId);
      continue;
    }
    const after = await snapshot(lane, targets);
    stateChecks++;
    const a = JSON.stringify(before);
    const b = JSON.stringify(after);
    v.check(a === b, () => `a refused request changed state: ${label}: ${answer}\n  before ${a.slice(0, 600)}\n  after  ${b.slice(0, 600)}`);
    const telling = !res.text.includes("session_not_found") || req.kind === "path.unknownSession";
    if (telling && examples.length < 16 && !examples.some((e) => e.startsWith(`${req.kind}:`))) examples.push(`${req.kind}: ${answer.slice(0, 140)}`);
  }
}

console.log(`fuzz: ${args.requests} requests, ${args.lanes} lanes, seed ${seed}, ${OPERATIONS.length} operations from docs/openapi.json`);
const h = await startWorker({ model: "hold" });
const t0 = performance.now();
try {
  const lanes = Array.from({ length: args.lanes }, (_, i) => new Lane(h, i, random(seed + i * 7919)));
  const per = Math.ceil(args.requests / args.lanes);
  await Promise.all(lanes.map((lane, i) => runLane(h, lane, Math.min(per, args.requests - i * per))));
  // Still serving after all that.
  const a = h.agent();
  const sid = await a.createSession("after-fuzz");
  await a.admitOperator(sid, "after", "still serving");
} catch (error) {
  v.add(`aborted by an error: ${error.stack ?? error}`);
} finally {
  await h.dispose();
}

const secs = (performance.now() - t0) / 1000;
table(`fuzz: ${sent} requests in ${secs.toFixed(1)} s (seed ${seed})`, [
  ...[...byStatus].sort(([x], [y]) => x - y).map(([status, n]) => [`HTTP ${status || "none"}`, n]),
  ["refusals checked for state change", stateChecks],
  ["violations", v.list.length],
]);
if (process.env.FUZZ_VERBOSE) table("by mutation and status", [...byKind].sort());
table("a refusal of each kind", examples.map((e) => ["", e]));
v.finish(`node scripts/attack/fuzz.mjs --requests ${args.requests} --lanes ${args.lanes} --seed ${seed}`);
