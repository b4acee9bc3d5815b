// An OTLP/HTTP trace receiver for the tests: a real HTTP server accepting
// `POST /v1/traces` with `content-type: application/json`. No OpenTelemetry
// package decodes a request (the JS SDK's `@opentelemetry/otlp-transformer`
// only encodes them), so each body is decoded with the official definitions
// in three steps, any failure a 400 and a recorded rejection:
//  1. the OTLP/JSON rules that differ from the protobuf JSON mapping
//     (`otlpJson`): ids are hex, enums are integers, keys are lowerCamelCase;
//  2. the published proto (opentelemetry-proto v1.11.0, 790608c, copied
//     unchanged in `otlp-proto/`) by protobufjs' ProtoJSON parser: an
//     unknown field, a wrong type or an out-of-range number fails (stricter
//     than a collector, which drops unknown fields: a misspelt field must
//     fail here, not vanish);
//  3. a round trip through the official encoder: the decoded spans, as the
//     JS SDK's `ReadableSpan`s, serialized by otlp-transformer's
//     `JsonTraceSerializer`, decode to the same request.
//
// `failNext(n)` answers the next n requests 503, as a receiver that is down.
import assert from "node:assert/strict";
import http from "node:http";
import { fileURLToPath } from "node:url";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import protobuf from "protobufjs";
import protojson from "protobufjs/ext/protojson.js";

const PROTOS = fileURLToPath(new URL("./otlp-proto/", import.meta.url));
const root = new protobuf.Root();
root.resolvePath = (_origin, target) => PROTOS + target;
root.loadSync("opentelemetry/proto/collector/trace/v1/trace_service.proto").resolveAll();
const REQUEST = root.lookupType("opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest");

/** The bytes fields OTLP/JSON spells in hex (Span, Span.Link), by length. */
const HEX_IDS = { traceId: 16, spanId: 8, parentSpanId: 8 };
/** `SpanFlags`: the bit saying whether the parent's remoteness is known, which the SDK always sets. */
const HAS_IS_REMOTE = 0x100;
const IS_REMOTE = 0x200;

/**
 * `value`, an OTLP/JSON `type`, as protobuf JSON: hex ids to base64, after
 * checking the rules OTLP adds (specification, "JSON Protobuf Encoding").
 * What the ProtoJSON parser judges (unknown fields, types) passes unchanged.
 */
function otlpJson(type, value, what) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  const out = {};
  for (const [key, v] of Object.entries(value)) {
    const field = type.fields[key];
    const original = field === undefined && type.fieldsArray.find((f) => f.protoName === key);
    assert.ok(!original, `${what}.${key}: OTLP/JSON keys are lowerCamelCase (${original?.name})`);
    const one = (x, at) => {
      if (field?.resolvedType instanceof protobuf.Type) return otlpJson(field.resolvedType, x, at);
      if (field?.resolvedType instanceof protobuf.Enum) {
        assert.ok(Number.isInteger(x) && x in field.resolvedType.valuesById, `${at}: an integer of ${field.resolvedType.name}, not ${JSON.stringify(x)}`);
      } else if (field?.type === "bytes" && key in HEX_IDS && x !== "") {
        assert.ok(typeof x === "string" && new RegExp(`^[0-9a-f]{${2 * HEX_IDS[key]}}$`, "i").test(x), `${at}: ${HEX_IDS[key]} bytes in hex, not ${JSON.stringify(x)}`);
        return Buffer.from(x, "hex").toString("base64");
      }
      return x;
    };
    out[key] = field?.repeated && Array.isArray(v) ? v.map((x, i) => one(x, `${what}.${key}[${i}]`)) : one(v, `${what}.${key}`);
  }
  return out;
}

/** An OTLP/JSON `ExportTraceServiceRequest` as a protobufjs message object. */
function decodeRequest(text) {
  return protojson.fromJson(REQUEST, otlpJson(REQUEST, JSON.parse(text), "ExportTraceServiceRequest"));
}

const hex = (bytes) => Buffer.from(bytes ?? []).toString("hex");
const nanos = (n) => BigInt(String(n ?? 0));
const hrTime = (n) => [Number(nanos(n) / 1_000_000_000n), Number(nanos(n) % 1_000_000_000n)];

/** An `AnyValue` as the SDK's attribute value (a JS number holds no int64 beyond 2^53). */
function anyValue(v, what) {
  const [key, ...more] = Object.keys(v ?? {});
  assert.equal(more.length, 0, what);
  const x = v?.[key];
  switch (key) {
    case undefined:
      return undefined;
    case "intValue":
      assert.ok(Number.isSafeInteger(Number(nanos(x))), `${what}: an int64 a JS number holds`);
      return Number(nanos(x));
    case "arrayValue":
      return (x.values ?? []).map((y, i) => anyValue(y, `${what}[${i}]`));
    case "kvlistValue":
      return attributes(x.values, what);
    case "bytesValue":
      return new Uint8Array(x);
    case "stringValue":
    case "boolValue":
    case "doubleValue":
      return x;
    default:
      throw new assert.AssertionError({ message: `${what}: ${key} has no SDK attribute value` });
  }
}

const attributes = (list, what) => Object.fromEntries((list ?? []).map((kv) => [kv.key, anyValue(kv.value, `${what}.${kv.key}`)]));

/** The SDK's `SpanContext` of OTLP ids and flags. */
const spanContext = (traceId, spanId, flags, traceState) => ({
  traceId: hex(traceId),
  spanId: hex(spanId),
  traceFlags: (flags ?? 0) & 0xff,
  isRemote: ((flags ?? 0) & IS_REMOTE) !== 0,
  traceState: traceState ? { serialize: () => traceState } : undefined,
});

/**
 * Each span of `request` as the SDK's `ReadableSpan` (`sdk`, for the round
 * trip) and as the tests read it (`span`), after the checks OTLP makes of
 * a span that its proto cannot: non-zero ids of their size, an end after
 * the start.
 */
function spansOf(request) {
  const out = [];
  for (const [r, rs] of (request.resourceSpans ?? []).entries()) {
    const resource = { attributes: attributes(rs.resource?.attributes, `resourceSpans[${r}].resource`), schemaUrl: rs.schemaUrl };
    for (const [i, ss] of (rs.scopeSpans ?? []).entries()) {
      const scope = { name: ss.scope?.name ?? "", version: ss.scope?.version, schemaUrl: ss.schemaUrl, attributes: attributes(ss.scope?.attributes, `resourceSpans[${r}].scopeSpans[${i}].scope`), droppedAttributesCount: ss.scope?.droppedAttributesCount };
      for (const [j, s] of (ss.spans ?? []).entries()) {
        const what = `resourceSpans[${r}].scopeSpans[${i}].spans[${j}]`;
        assert.ok(s.traceId?.length === 16 && s.traceId.some((b) => b !== 0), `${what}.traceId: 16 bytes, not all zero`);
        assert.ok(s.spanId?.length === 8 && s.spanId.some((b) => b !== 0), `${what}.spanId: 8 bytes, not all zero`);
        assert.ok(nanos(s.endTimeUnixNano) >= nanos(s.startTimeUnixNano), `${what}: ends after it starts`);
        const context = spanContext(s.traceId, s.spanId, s.flags, s.traceState);
        const attrs = attributes(s.attributes, `${what}.attributes`);
        const sdk = {
          name: s.name ?? "",
          kind: s.kind ? s.kind - 1 : undefined, // the API's SpanKind has no UNSPECIFIED
          spanContext: () => context,
          parentSpanContext: s.parentSpanId?.length ? { ...context, spanId: hex(s.parentSpanId) } : undefined,
          startTime: hrTime(s.startTimeUnixNano),
          endTime: hrTime(s.endTimeUnixNano),
          attributes: attrs,
          droppedAttributesCount: s.droppedAttributesCount ?? 0,
          events: (s.events ?? []).map((e) => ({ name: e.name ?? "", time: hrTime(e.timeUnixNano), attributes: attributes(e.attributes, `${what}.events`), droppedAttributesCount: e.droppedAttributesCount })),
          droppedEventsCount: s.droppedEventsCount ?? 0,
          links: (s.links ?? []).map((l) => ({ context: spanContext(l.traceId, l.spanId, l.flags, l.traceState), attributes: attributes(l.attributes, `${what}.links`), droppedAttributesCount: l.droppedAttributesCount })),
          droppedLinksCount: s.droppedLinksCount ?? 0,
          status: { code: s.status?.code ?? 0, message: s.status?.message },
          resource,
          instrumentationScope: scope,
        };
        const span = {
          traceId: context.traceId,
          spanId: context.spanId,
          parentSpanId: sdk.parentSpanContext?.spanId,
          name: sdk.name,
          kind: s.kind ?? 0,
          start: nanos(s.startTimeUnixNano),
          end: nanos(s.endTimeUnixNano),
          attributes: attrs,
          status: s.status,
          resource: resource.attributes,
          scope: { name: scope.name, version: scope.version },
        };
        out.push({ sdk, span });
      }
    }
  }
  return out;
}

/**
 * `request` as canonical protobuf JSON, less what the SDK always writes and
 * OTLP leaves optional: the `HAS_IS_REMOTE` flag and an empty status.
 */
function canonical(request) {
  const json = protojson.toJson(REQUEST, request);
  const unflag = (x) => {
    if (x.flags !== undefined) x.flags &= ~HAS_IS_REMOTE;
    if (x.flags === 0) delete x.flags;
  };
  for (const rs of json.resourceSpans ?? []) {
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        unflag(s);
        for (const l of s.links ?? []) unflag(l);
        if (s.status !== undefined && Object.keys(s.status).length === 0) delete s.status;
      }
    }
  }
  return json;
}

/** Where JSON values `ours` and `theirs` first differ, if they do. */
function difference(ours, theirs, at) {
  if (JSON.stringify(ours) === JSON.stringify(theirs)) return undefined;
  if (typeof ours !== "object" || typeof theirs !== "object" || ours === null || theirs === null) return `${at}: ${JSON.stringify(ours)}, the serializer's ${JSON.stringify(theirs)}`;
  for (const key of new Set([...Object.keys(ours), ...Object.keys(theirs)])) {
    const found = difference(ours[key], theirs[key], `${at}.${key}`);
    if (found !== undefined) return found;
  }
}

/** Decodes an OTLP/JSON `ExportTraceServiceRequest` into its spans, each with its resource's attributes and its scope. */
export function decodeTraces(text) {
  const request = decodeRequest(text);
  const spans = spansOf(request);
  const official = new TextDecoder().decode(JsonTraceSerializer.serializeRequest(spans.map((s) => s.sdk)));
  const differs = difference(canonical(request), canonical(decodeRequest(official)), "ExportTraceServiceRequest");
  if (differs !== undefined) assert.fail(`the official serializer sends another request for these spans: ${differs}`);
  return spans.map((s) => s.span);
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
