// js/meta-schema.mjs alone (no Worker): what the core reads from a host's meta()
// (`spec()`) and what it gets back for one metadata value (`validate()`).
import assert from "node:assert/strict";
import { test } from "node:test";
import * as z from "zod";
import { metaHost } from "../../js/meta-schema.mjs";

const host = (meta) => metaHost({ meta });
const spec = (meta) => JSON.parse(host(meta).spec());
const validate = (meta, value) => JSON.parse(host(meta).validate(JSON.stringify(value)));

test("no meta() or undefined: the env's rules (no host)", () => {
  assert.equal(metaHost({}), undefined);
  assert.equal(host(() => undefined), undefined);
});

test("a Zod 4 schema: validated here, its output returned, its issues named by path", () => {
  const schema = z.object({ author: z.object({ id: z.string() }), tags: z.array(z.string()).default([]) });
  const meta = () => ({ schema, identityPath: "$.author.id" });
  assert.deepEqual(spec(meta), { identityPath: "$.author.id", standard: true });
  assert.deepEqual(validate(meta, { author: { id: "ada", x: 1 } }), { value: { author: { id: "ada" }, tags: [] } });
  const { invalid } = validate(meta, { author: { id: 7 } });
  assert.match(invalid, /^host metadata does not match the host's schema: \$\.author\.id: /, invalid);
});

test("a JSON Schema object goes to the core", () => {
  assert.deepEqual(spec(() => ({ schema: { type: "object" } })), { schema: { type: "object" }, standard: false });
});

test("a schema whose output is not JSON is the host's error, not the metadata's", () => {
  const meta = () => ({ schema: z.object({}).transform(() => new Date(0)) });
  assert.match(validate(meta, {}).error, /meta\(\)\.schema's output: \$ is a Date, not a plain object/);
});

test("refusals name the key", () => {
  const refused = (meta) => spec(meta).error;
  assert.match(refused(() => ({ schema: { type: "object" }, extra: 1 })), /^meta\(\)\.extra: unknown key `extra`; known: schema, identityPath$/);
  assert.match(refused(() => ({ identityPath: 5 })), /^meta\(\)\.identityPath must be a JSON path string/);
  assert.match(refused(() => ({ schema: "string" })), /^meta\(\)\.schema must be a JSON Schema object or a synchronous Standard Schema/);
  assert.match(refused(() => ({ schema: { "~standard": { version: 2, validate() {} } } })), /not a Standard Schema v1/);
  assert.match(refused(() => ({ schema: { "~standard": { version: 1, vendor: "x", validate: async (value) => ({ value }) } } })), /meta\(\)\.schema: the schema is asynchronous/);
  assert.match(refused(() => Promise.resolve({})), /synchronously, not a promise/);
  assert.match(refused(() => [1]), /must return an object/);
  assert.match(
    refused(() => {
      throw new Error("boom");
    }),
    /^meta\(\) threw: boom$/,
  );
});
