// Host metadata on its way to the core: the one header the Durable Object
// reads it from, and its encoding. Shared by `shiitakeApp` (HTTP) and the
// owner API / RPC methods of `ShiitakeDO`, so both hand the core the same
// bytes; the core alone checks them (schema, 4,096-byte cap).
export const META_HEADER = "x-shiitake-meta";

// Header values must be Latin-1; escaping everything past ASCII keeps the
// JSON text equal in meaning and safe to send.
export function metaHeaderValue(meta) {
  const json = JSON.stringify(meta);
  if (json === undefined) throw new TypeError("shiitakeMeta must be a JSON value");
  return json.replace(/[\u007f-\uffff]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
