// Value guards shared by the client-side modules (client.mjs,
// client-entry.mjs, extensions.mjs). No imports: it bundles anywhere.

/** A `{}` literal or a null-prototype object (not an array, class instance or proxy of one). */
export function isPlainObject(value) {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

export function isThenable(value) {
  return (typeof value === "object" || typeof value === "function") && value !== null && typeof value.then === "function";
}

/** A Standard Schema v1 (`~standard.version` 1 with a `validate` function). */
export function isStandardSchema(schema) {
  const props = (typeof schema === "object" || typeof schema === "function") && schema !== null ? schema["~standard"] : undefined;
  return typeof props === "object" && props !== null && props.version === 1 && typeof props.validate === "function";
}
