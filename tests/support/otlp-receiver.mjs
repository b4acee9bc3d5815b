// An OTLP/HTTP trace receiver for the tests: a real HTTP server accepting
// `POST /v1/traces` with `content-type: application/json`, decoding each
// body as an `ExportTraceServiceRequest` by the protobuf JSON mapping of the
// published proto (opentelemetry-proto, `collector/trace/v1` and
// `trace/v1`), strictly: an unknown field, a wrong type, an id of the
// wrong length or a non-decimal time is a 400 and a recorded rejection.
// (`@opentelemetry/otlp-transformer` only serializes requests, and is not
// installed here; this decoder asserts the same field names.)
//
// `failNext(n)` answers the next n requests 503, as a receiver that is down.
import assert from "node:assert/strict";
import http from "node:http";

const HEX = (n) => new RegExp(`^[0-9a-f]{${n}}$`);
const DECIMAL = /^[0-9]+$/;

function only(object, fields, what) {
  assert.equal(typeof object, "object", `${what} is an object`);
  assert.ok(object !== null && !Array.isArray(object), `${what} is an object`);
  for (const key of Object.keys(object)) assert.ok(fields.includes(key), `${what}: unknown field ${key} (proto fields: ${fields.join(", ")})`);
}

function uint64(value, what) {
  if (typeof value === "number") {
    assert.ok(Number.isSafeInteger(value) && value >= 0, `${what}: a uint64`);
    return BigInt(value);
  }
  assert.ok(typeof value === "string" && DECIMAL.test(value), `${what}: a decimal uint64, not ${JSON.stringify(value)}`);
  return BigInt(value);
}

/** `AnyValue` (common/v1): exactly one of its oneof fields. */
function anyValue(value, what) {
  only(value, ["stringValue", "boolValue", "intValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue"], what);
  const keys = Object.keys(value);
  assert.equal(keys.length, 1, `${what}: one value`);
  const [key] = keys;
  const v = value[key];
  switch (key) {
    case "stringValue":
      assert.equal(typeof v, "string", what);
      return v;
    case "boolValue":
      assert.equal(typeof v, "boolean", what);
      return v;
    case "intValue":
      if (typeof v === "number") return v;
      assert.ok(typeof v === "string" && /^-?[0-9]+$/.test(v), `${what}: an int64`);
      return Number(v);
    case "doubleValue":
      return Number(v);
    case "arrayValue":
      only(v, ["values"], `${what}.arrayValue`);
      return (v.values ?? []).map((x, i) => anyValue(x, `${what}.arrayValue.values[${i}]`));
    default:
      throw new assert.AssertionError({ message: `${what}: ${key} not expected here` });
  }
}

/** `repeated KeyValue` as a plain object. */
function attributes(list, what) {
  const out = {};
  for (const [i, kv] of (list ?? []).entries()) {
    only(kv, ["key", "value"], `${what}[${i}]`);
    assert.equal(typeof kv.key, "string");
    assert.ok(!(kv.key in out), `${what}: ${kv.key} repeated`);
    out[kv.key] = anyValue(kv.value, `${what}.${kv.key}`);
  }
  return out;
}

const SPAN_FIELDS = ["traceId", "spanId", "traceState", "parentSpanId", "flags", "name", "kind", "startTimeUnixNano", "endTimeUnixNano", "attributes", "droppedAttributesCount", "events", "droppedEventsCount", "links", "droppedLinksCount", "status"];

function span(s, what) {
  only(s, SPAN_FIELDS, what);
  assert.match(s.traceId, HEX(32), `${what}.traceId: 16 bytes, hex`);
  assert.notEqual(s.traceId, "0".repeat(32), `${what}.traceId: not all zero`);
  assert.match(s.spanId, HEX(16), `${what}.spanId: 8 bytes, hex`);
  if (s.parentSpanId !== undefined && s.parentSpanId !== "") assert.match(s.parentSpanId, HEX(16), `${what}.parentSpanId`);
  assert.equal(typeof s.name, "string");
  assert.ok(Number.isInteger(s.kind) && s.kind >= 0 && s.kind <= 5, `${what}.kind: a SpanKind`);
  const start = uint64(s.startTimeUnixNano, `${what}.startTimeUnixNano`);
  const end = uint64(s.endTimeUnixNano, `${what}.endTimeUnixNano`);
  assert.ok(end >= start, `${what}: ends after it starts`);
  let status;
  if (s.status !== undefined) {
    only(s.status, ["message", "code"], `${what}.status`);
    assert.ok([0, 1, 2].includes(s.status.code), `${what}.status.code: a StatusCode`);
    status = s.status;
  }
  return {
    traceId: s.traceId,
    spanId: s.spanId,
    parentSpanId: s.parentSpanId || undefined,
    name: s.name,
    kind: s.kind,
    start,
    end,
    attributes: attributes(s.attributes, `${what}.attributes`),
    status,
  };
}

/** Decodes an `ExportTraceServiceRequest` (JSON mapping) into its spans, each with its resource and scope. */
export function decodeTraces(text) {
  const request = JSON.parse(text);
  only(request, ["resourceSpans"], "ExportTraceServiceRequest");
  const spans = [];
  for (const [r, rs] of (request.resourceSpans ?? []).entries()) {
    only(rs, ["resource", "scopeSpans", "schemaUrl"], `resourceSpans[${r}]`);
    only(rs.resource ?? {}, ["attributes", "droppedAttributesCount"], `resourceSpans[${r}].resource`);
    const resource = attributes(rs.resource?.attributes, "resource.attributes");
    for (const [i, ss] of (rs.scopeSpans ?? []).entries()) {
      only(ss, ["scope", "spans", "schemaUrl"], `scopeSpans[${i}]`);
      only(ss.scope ?? {}, ["name", "version", "attributes", "droppedAttributesCount"], `scopeSpans[${i}].scope`);
      for (const [j, s] of (ss.spans ?? []).entries()) spans.push({ ...span(s, `spans[${j}]`), resource, scope: ss.scope });
    }
  }
  return spans;
}

export async function startOtlpReceiver() {
  const state = { requests: [], rejected: [], failures: 0 };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks).toString("utf8");
      const record = { method: req.method, path: req.url, headers: req.headers, raw, at: Date.now() };
      if (state.failures > 0) {
        state.failures--;
        record.status = 503;
        state.requests.push(record);
        res.writeHead(503).end("down");
        return;
      }
      try {
        assert.equal(req.method, "POST");
        assert.equal(req.url, "/v1/traces");
        assert.match(req.headers["content-type"] ?? "", /^application\/json/);
        record.spans = decodeTraces(raw);
        record.status = 200;
        state.requests.push(record);
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      } catch (error) {
        record.status = 400;
        record.error = String(error?.message ?? error);
        state.requests.push(record);
        state.rejected.push(record);
        res.writeHead(400).end(record.error);
      }
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${server.address().port}`;
  return {
    origin,
    /** Every request received, accepted or not. */
    requests: () => state.requests,
    /** Requests the decoder refused (must stay empty). */
    rejected: () => state.rejected,
    /** Spans of accepted requests, in arrival order. */
    spans: () => state.requests.filter((r) => r.status === 200).flatMap((r) => r.spans),
    failNext(n) {
      state.failures = n;
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}
