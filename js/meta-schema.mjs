// The host's metadata schema as code (`ShiitakeDO#meta()`, seed "Host
// metadata"): `{ schema?, identityPath? }`, where `schema` is a JSON Schema
// object (the core validates it, as SHIITAKE_META_SCHEMA) or any synchronous
// Standard Schema (Zod 4, Effect, Valibot...), run here on each metadata
// value the core hands over. The core keeps the rest: the 4,096-byte cap and
// strict JSON before the schema, canonical JSON and the cap again on the
// schema's output, which is what is stored (src/meta.rs, src/host/config.rs).
// The schema sees the metadata as JSON.parse gives it (integers beyond 2^53
// lose precision, as anywhere in JS).
import { SCHEMA_INTERNALS } from "./extensions.mjs";

const { isStandardSchema, isPlainObject, isThenable, silence, typeName, runStandard, toJson, refusal } = SCHEMA_INTERNALS;

const META_KEYS = ["schema", "identityPath"];
const INVALID = "host metadata does not match the host's schema";
const WHY = "host metadata is validated synchronously as it arrives";
// Values a schema is tried on at startup, to refuse an asynchronous one then.
const PROBES = [undefined, {}];

const message = (error) => String(error?.message ?? error);

/**
 * The core's metadata host (src/host/bindings.rs `JsMeta`), or undefined
 * when the host defines no meta() (the env's settings apply). A meta() the
 * core cannot use gives `{error}`: every request then answers 503
 * `host_misconfigured` naming it.
 */
export function metaHost(object) {
  if (typeof object.meta !== "function") return undefined;
  let config;
  try {
    config = object.meta();
  } catch (error) {
    return refused(`meta() threw: ${message(error)}`);
  }
  if (config === undefined || config === null) return undefined;
  let checked;
  try {
    checked = check(config);
  } catch (error) {
    return refused(message(error));
  }
  const { standard, ...spec } = checked;
  const text = JSON.stringify({ ...spec, standard: standard !== null });
  return {
    spec: () => text,
    validate(metaJson) {
      try {
        const output = runStandard(standard, JSON.parse(metaJson), INVALID, WHY, "meta().schema");
        return JSON.stringify({ value: toJson(output, "meta().schema's output") });
      } catch (error) {
        return JSON.stringify(error?.invalid === true ? { invalid: message(error) } : { error: message(error) });
      }
    },
  };
}

function refused(error) {
  const text = JSON.stringify({ error });
  return { spec: () => text, validate: () => JSON.stringify({ error }) };
}

// `{ schema?, identityPath?, standard }` from what meta() returned, checked
// key by key; throws why it cannot be used.
function check(config) {
  if (isThenable(config)) {
    silence(config);
    throw refusal("meta() must return { schema?, identityPath? } synchronously, not a promise");
  }
  if (!isPlainObject(config)) throw refusal(`meta() must return an object { schema?, identityPath? }, not ${typeName(config)}`);
  for (const key of Object.keys(config)) {
    if (!META_KEYS.includes(key)) throw refusal(`meta().${key}: unknown key \`${key}\`; known: ${META_KEYS.join(", ")}`);
  }
  const { schema, identityPath } = config;
  if (identityPath !== undefined && typeof identityPath !== "string") {
    throw refusal(`meta().identityPath must be a JSON path string such as $.author.id, not ${typeName(identityPath)}`);
  }
  const out = { standard: null, identityPath };
  if (schema === undefined) return out;
  if (isStandardSchema(schema)) {
    const props = schema["~standard"];
    if (typeof props !== "object" || props === null || props.version !== 1 || typeof props.validate !== "function") {
      throw refusal('meta().schema: the schema\'s "~standard" is not a Standard Schema v1 (version 1 with a validate function)');
    }
    for (const probe of PROBES) {
      let result;
      try {
        result = props.validate(probe);
      } catch {
        continue; // judged when real metadata arrives
      }
      if (isThenable(result)) {
        silence(result);
        throw refusal(`meta().schema: the schema is asynchronous; ${WHY}`);
      }
    }
    return { ...out, standard: schema };
  }
  if (isPlainObject(schema)) return { ...out, schema: toJson(schema, "meta().schema") };
  throw refusal(`meta().schema must be a JSON Schema object or a synchronous Standard Schema (such as Zod 4), not ${typeName(schema)}`);
}
