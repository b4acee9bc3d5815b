// The typed client's declarations (js/client.d.ts) carry everything the
// server sends: each schema of docs/openapi.json that reaches a client is
// compared, through the TypeScript checker, with the type the client
// declares for it. Every property the schema has must exist with the same
// optionality and nullability, every enum value (roles, frame kinds,
// terminals, error codes) must be present, and every variant of a
// discriminated union (frames, watch events, outcomes) must be declared.
// Extra declarations (client-side fields such as Receipt.requestId) are
// allowed.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import ts from "typescript";
import { ROOT } from "./helpers.mjs";

const DTS = path.join(ROOT, "js/client.d.ts");
const openapi = JSON.parse(readFileSync(path.join(ROOT, "docs/openapi.json"), "utf8"));
const schemas = openapi.components.schemas;

/** Codes the OpenAPI document lists that no client call can receive. */
const CODES_NOT_FOR_CLIENTS = new Map([
  ["grant_version_refused", "raised only by the host-only deliverGrants RPC"],
  ["reply_before_receipt", "raised only to a peer's mail delivery (the fleet RPC), which retries it"],
  ["grant_refused", "raised only by the fleet RPC (fleetSessions, shiitake/fleet's FleetError) and agents.* tool errors"],
  ["grant_expired", "raised only by the fleet RPC (fleetSessions, shiitake/fleet's FleetError) and agents.* tool errors"],
]);

/**
 * What is compared: an OpenAPI schema (by name, or the 200 answer of an
 * operation) against a declared type (by name, or the awaited return type of
 * a client method).
 */
const PAIRS = [
  { schema: "SessionList", type: "SessionList" },
  { operation: "listSessions", method: ["ShiitakeClient", "listSessions"] },
  { operation: "createSession", method: ["ShiitakeClient", "createSession"] },
  { operation: "readSession", method: ["ShiitakeSession", "read"] },
  { schema: "Page", type: "SessionRead" },
  { schema: "Message", type: "SessionMessage" },
  { schema: "PendingItem", type: "PendingPrompt" },
  { operation: "getLatestPending", method: ["ShiitakeSession", "latestPending"] },
  { operation: "listBranches", method: ["ShiitakeSession", "branches"] },
  { schema: "BranchList", type: "BranchList" },
  { schema: "RunningItem", type: "RunningTurn" },
  { schema: "CommandSettlement", type: "CommandSettlement" },
  { schema: "TokenUsage", type: "TokenUsage" },
  { schema: "Receipt", type: "Receipt" },
  { schema: { oneOf: [{ $ref: "#/components/schemas/CancelledResult" }, { $ref: "#/components/schemas/TooLateResult" }] }, type: "CancelOutcome" },
  { schema: "AbortResult", type: "AbortOutcome" },
  { operation: "withdrawRequest", method: ["ShiitakeSession", "withdraw"] },
  { schema: "Frame", type: "Frame" },
  { schema: "RuntimeError", type: "RuntimeErrorEvent" },
  { schema: "WatchEvent", type: "WatchEvent" },
  { schema: "Image", type: "ImageInput" },
  { schema: "Delivery", type: "Delivery" },
  { schema: "ExtensionStatus", type: "ExtensionStatus" },
  { schema: "ExtensionFrame", type: "ExtensionFrame" },
  { schema: "AttentionFrame", type: "AttentionFrame" },
  { schema: "AttentionItem", type: "AttentionItem" },
  { schema: "Inbox", type: "Inbox" },
  { operation: "getInbox", method: ["ShiitakeClient", "inbox"] },
  { schema: "UsageLedger", type: "UsageLedger" },
  { schema: "UsageFigures", type: "UsageFigures" },
  { schema: "UsageGroup", type: "UsageGroup" },
  { operation: "getUsage", method: ["ShiitakeClient", "usage"] },
  { schema: "Budget", type: "Budget" },
  { schema: "BudgetReached", type: "BudgetReached" },
  { schema: "Paused", type: "Paused" },
  { schema: "PausedFrame", type: "PausedFrame" },
  { schema: "InboxRow", type: "InboxRow" },
  { operation: "getBudget", method: ["ShiitakeClient", "budget"] },
  { operation: "getSessionBudget", method: ["ShiitakeSession", "budget"] },
  { schema: { enum: schemas.ErrorCode.enum.filter((c) => !CODES_NOT_FOR_CLIENTS.has(c)) }, type: "ShiitakeErrorCode" },
];

const OPTIONS = { noEmit: true, strict: true, target: ts.ScriptTarget.ES2022, lib: ["lib.es2022.d.ts", "lib.dom.d.ts"], types: [] };
const HOST = ts.createCompilerHost(OPTIONS);
// The standard library's files are parsed once for all the loads below.
const parsed = new Map();
const readSourceFile = HOST.getSourceFile.bind(HOST);

/** The checker over `js/client.d.ts`, or over `text` in its place. */
function load(text = readFileSync(DTS, "utf8")) {
  const host = {
    ...HOST,
    getSourceFile(name, ...rest) {
      if (path.resolve(name) === DTS) return ts.createSourceFile(name, text, ts.ScriptTarget.ES2022, true);
      if (!parsed.has(name)) parsed.set(name, readSourceFile(name, ...rest));
      return parsed.get(name);
    },
  };
  const program = ts.createProgram([DTS], OPTIONS, host);
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(DTS);
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  const exported = new Map(checker.getExportsOfModule(checker.getSymbolAtLocation(source)).map((s) => [s.name, s]));
  return { checker, exported, diagnostics };
}

/** A schema with `$ref` replaced by its target (sibling keywords kept). */
function deref(schema) {
  if (schema?.$ref === undefined) return schema;
  const { $ref, ...rest } = schema;
  return { ...deref(schemas[$ref.split("/").pop()]), ...rest };
}

/** `{nullable, schema}`: whether `null` is allowed, and the schema for the rest (undefined: any value). */
function splitNull(raw) {
  const schema = deref(raw);
  if (Array.isArray(schema.type) && schema.type.includes("null")) {
    const rest = schema.type.filter((t) => t !== "null");
    return { nullable: true, schema: { ...schema, type: rest.length === 1 ? rest[0] : rest } };
  }
  if (schema.oneOf?.some((b) => deref(b).type === "null")) {
    const { oneOf, ...outer } = schema;
    const rest = oneOf.filter((b) => deref(b).type !== "null");
    return { nullable: true, schema: rest.length === 1 ? { ...outer, ...deref(rest[0]) } : { ...outer, oneOf: rest } };
  }
  const constrained = ["type", "enum", "const", "oneOf", "properties", "items"].some((k) => k in schema);
  return { nullable: !constrained || schema.type === "null", schema: constrained ? schema : undefined };
}

/**
 * Compares a schema with a declared type given as its union members
 * (`undefined` from optionality removed); pushes what differs to `problems`.
 */
function compare(checker, raw, members, where, problems, depth = 0) {
  assert.ok(depth < 16, `${where}: schemas nest too deep`);
  const { nullable, schema } = splitNull(raw);
  const F = ts.TypeFlags;
  const parts = members.filter((t) => !(t.flags & (F.Undefined | F.Void)));
  const hasNull = parts.some((t) => t.flags & F.Null);
  const rest = parts.filter((t) => !(t.flags & F.Null));
  const shown = () => parts.map((t) => checker.typeToString(t)).join(" | ");
  if (schema === undefined) return; // any JSON value: whatever the declaration says
  if (nullable !== hasNull) {
    problems.push(`${where}: the server ${nullable ? "may send" : "never sends"} null, the declared type is ${shown()}`);
  }
  const literal = (t) => (t.isLiteral() ? t.value : t.flags & F.BooleanLiteral ? checker.typeToString(t) === "true" : undefined);
  if (schema.enum !== undefined) {
    const declared = new Set(rest.map(literal));
    for (const value of schema.enum) {
      if (!declared.has(value)) problems.push(`${where}: lacks the value ${JSON.stringify(value)} (declared: ${shown()})`);
    }
    return;
  }
  if (schema.const !== undefined) {
    if (rest.length !== 1 || literal(rest[0]) !== schema.const) {
      problems.push(`${where}: must be exactly ${JSON.stringify(schema.const)}, is ${shown()}`);
    }
    return;
  }
  if (schema.oneOf !== undefined) {
    const branches = schema.oneOf.map(deref);
    const key =
      schema.discriminator?.propertyName ??
      Object.keys(branches[0].properties ?? {}).find((k) => branches.every((b) => deref(b.properties?.[k] ?? {}).const !== undefined));
    assert.ok(key, `${where}: a oneOf without a discriminating const property`);
    for (const branch of branches) {
      const value = deref(branch.properties[key]).const;
      const member = rest.find((t) => {
        const prop = checker.getPropertyOfType(t, key);
        return prop !== undefined && literal(checker.getTypeOfSymbol(prop)) === value;
      });
      if (member === undefined) problems.push(`${where}: lacks the variant ${key}: ${JSON.stringify(value)}`);
      else compare(checker, branch, [member], `${where}[${key}=${JSON.stringify(value)}]`, problems, depth + 1);
    }
    return;
  }
  const type = schema.type ?? (schema.properties ? "object" : undefined);
  if (type === "array") {
    if (rest.length !== 1 || !checker.isArrayType(rest[0])) return void problems.push(`${where}: must be an array, is ${shown()}`);
    const [element] = checker.getTypeArguments(rest[0]);
    compare(checker, schema.items ?? {}, element.isUnion() ? element.types : [element], `${where}[]`, problems, depth + 1);
    return;
  }
  if (type === "object") {
    if (rest.length !== 1 || !(rest[0].flags & F.Object)) return void problems.push(`${where}: must be an object type, is ${shown()}`);
    const required = new Set(schema.required ?? []);
    for (const [name, sub] of Object.entries(schema.properties ?? {})) {
      const prop = checker.getPropertyOfType(rest[0], name);
      if (prop === undefined) {
        problems.push(`${where}.${name}: missing (the server sends it${required.has(name) ? " always" : " sometimes"})`);
        continue;
      }
      const optional = (prop.flags & ts.SymbolFlags.Optional) !== 0;
      if (required.has(name) && optional) problems.push(`${where}.${name}: always sent, declared optional`);
      if (!required.has(name) && !optional) problems.push(`${where}.${name}: not always sent, declared required`);
      const propType = checker.getTypeOfSymbol(prop);
      compare(checker, sub, propType.isUnion() ? propType.types : [propType], `${where}.${name}`, problems, depth + 1);
    }
    return;
  }
  const fits = { string: F.StringLike, integer: F.NumberLike, number: F.NumberLike, boolean: F.BooleanLike }[type];
  assert.ok(fits !== undefined, `${where}: schema type ${JSON.stringify(type)} is not handled by this test`);
  if (rest.length === 0 || !rest.every((t) => t.flags & fits)) problems.push(`${where}: must be ${type}, is ${shown()}`);
}

/** The schema of an operation's 200/201 JSON answer. */
function answerSchema(operationId) {
  for (const ops of Object.values(openapi.paths)) {
    for (const op of Object.values(ops)) {
      if (op?.operationId !== operationId) continue;
      const ok = op.responses["200"] ?? op.responses["201"];
      return ok.content["application/json"].schema;
    }
  }
  throw new Error(`docs/openapi.json has no operation ${operationId}`);
}

/** Every difference between docs/openapi.json and the declarations of `load(text)`. */
function differences(text) {
  const { checker, exported, diagnostics } = load(text);
  const problems = diagnostics.map((d) => `js/client.d.ts does not compile: ${d}`);
  const declared = (name) => {
    const symbol = exported.get(name);
    assert.ok(symbol, `js/client.d.ts exports no ${name}`);
    return checker.getDeclaredTypeOfSymbol(symbol);
  };
  for (const pair of PAIRS) {
    let type;
    let where;
    let schema;
    if (pair.method) {
      const [owner, name] = pair.method;
      const method = checker.getPropertyOfType(declared(owner), name);
      assert.ok(method, `${owner} declares no ${name}`);
      const [signature] = checker.getTypeOfSymbol(method).getCallSignatures();
      type = checker.getAwaitedType(signature.getReturnType());
      where = `${owner}.${name}()`;
      schema = answerSchema(pair.operation);
    } else {
      type = declared(pair.type);
      where = pair.type;
      schema = typeof pair.schema === "string" ? { $ref: `#/components/schemas/${pair.schema}` } : pair.schema;
    }
    compare(checker, schema, type.isUnion() ? type.types : [type], where, problems);
  }
  return problems;
}

test("js/client.d.ts declares every property, enum value and variant docs/openapi.json says the server sends", () => {
  assert.deepEqual(differences(), []);
});

// The comparison must catch what it is for: each edit below removes one thing
// the server sends, and the difference must name it.
const MUTATIONS = [
  ["SessionMessage.data", /^ {2}data\?: JsonValue;\n/m, "", /SessionMessage\.data: missing/],
  ["the tool role", /"operator" \| "tool"/, '"operator"', /lacks the value "tool"/],
  ["the diagnostic frame", /^ {2}\| \{ type: "diagnostic";.*\n/m, "", /Frame: lacks the variant type: "diagnostic"/],
  ["SessionMessage.toolCalls", /^ {2}toolCalls\?: ToolCall\[\];\n/m, "", /SessionMessage\.toolCalls: missing/],
  ["ToolCall.arguments", /^ {2}arguments: .*\n/m, "", /toolCalls\[\]\.arguments: missing/],
  ["an optional field made required", /^ {2}diagnostic\?: string;/m, "  diagnostic: string;", /CommandSettlement\.diagnostic: not always sent, declared required/],
  ["null of a settlement answer", /answer: string \| null;/, "answer: string;", /CommandSettlement\.answer: the server may send null/],
  ["a terminal", /"completed" \| "failed"/, '"failed"', /lacks the value "completed"/],
  ["an error code", /^ {2}\| "payload_too_large"\n/m, "", /ShiitakeErrorCode: lacks the value "payload_too_large"/],
];

for (const [what, pattern, replacement, expected] of MUTATIONS) {
  test(`the comparison fails without ${what}`, () => {
    const original = readFileSync(DTS, "utf8");
    assert.match(original, pattern, `this test's edit no longer applies to js/client.d.ts: update MUTATIONS`);
    const problems = differences(original.replace(pattern, replacement));
    assert.ok(
      problems.some((p) => expected.test(p)),
      `expected a difference matching ${expected}, got:\n${problems.join("\n")}`,
    );
  });
}
