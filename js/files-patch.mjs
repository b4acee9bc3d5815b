// The files-patch contracts (seed: "files-patch exposes the same patch
// input/output contracts without loading tool connections or the agent
// runtime"): the apply_patch tool's input and output JSON Schemas, the same
// as schemas/files-patch.*.json (tests/e2e/files-patch.test.mjs checks),
// and validators for them. Browsers and transports import it alone:
//
//   import { validatePatchInput } from "shiitake/files-patch";
//   const checked = validatePatchInput({ input: patchText });
//   if (!checked.ok) showError(checked.error); // "$.input: expected a string"
//
// Imports nothing; the validators are written out for these two schemas.

/** `{ input: <patch text> }`, also the apply_patch tool's inputSchema. */
export const patchInputSchema = deepFreeze({
  "type": "object",
  "description": "Edit files with one patch: add, delete, update or move files, all or none.",
  "properties": {
    "input": {
      "type": "string",
      "maxLength": 262144,
      "description": "The patch text:\n*** Begin Patch\n*** Add File: path/new.txt\n+first line of the new file\n+second line\n*** Delete File: path/old.txt\n*** Update File: path/app.py\n*** Move to: path/main.py\n@@ def greet():\n-    print(\"hi\")\n+    print(\"hello\")\n*** End Patch\n\nPaths are relative to the root. Every line of an added file starts with `+`. `*** Move to:` (optional, right after `*** Update File:`) renames the file. An update has one or more chunks, each starting with `@@`, optionally followed by a line to find first (a function or class line); several `@@` lines in a row narrow it down. Chunk lines start with ` ` (context, unchanged), `-` (removed) or `+` (added). Give 3 lines of context before and after each change, exactly as in the file, and chunks in file order: each is found after the previous one, at the first place its context and removed lines match. End a chunk that must match the end of the file with `*** End of File`. Touch each file in one section only. Nothing is written unless every section applies."
    }
  },
  "required": [
    "input"
  ],
  "additionalProperties": false
});

/** The files an applied patch changed. */
export const patchOutputSchema = deepFreeze({
  "type": "object",
  "description": "The files an applied patch changed, in patch order.",
  "properties": {
    "files": {
      "type": "array",
      "maxItems": 64,
      "items": {
        "type": "object",
        "properties": {
          "path": {
            "type": "string",
            "description": "The file's path (a moved file's new path)."
          },
          "action": {
            "enum": [
              "added",
              "updated",
              "deleted",
              "moved"
            ]
          },
          "from": {
            "type": "string",
            "description": "A moved file's former path."
          }
        },
        "required": [
          "path",
          "action"
        ],
        "additionalProperties": false,
        "if": {
          "properties": {
            "action": {
              "const": "moved"
            }
          }
        },
        "then": {
          "required": [
            "from"
          ]
        },
        "else": {
          "not": {
            "required": [
              "from"
            ]
          }
        }
      }
    }
  },
  "required": [
    "files"
  ],
  "additionalProperties": false
});

const INPUT_CHARS_MAX = patchInputSchema.properties.input.maxLength;
const FILES_MAX = patchOutputSchema.properties.files.maxItems;
const ACTIONS = new Set(patchOutputSchema.properties.files.items.properties.action.enum);

/**
 * Checks a files-patch input. Returns `{ ok: true, value }`, or
 * `{ ok: false, error }` where `error` reads `<path>: <problem>`.
 */
export function validatePatchInput(value) {
  const error =
    shape(value, "$", ["input"], ["input"]) ??
    (typeof value.input !== "string"
      ? "$.input: expected a string"
      : longerThan(value.input, INPUT_CHARS_MAX)
        ? `$.input: longer than ${INPUT_CHARS_MAX} characters`
        : undefined);
  return error === undefined ? { ok: true, value } : { ok: false, error };
}

/** Checks a files-patch output, as `validatePatchInput` does an input. */
export function validatePatchOutput(value) {
  const error = shape(value, "$", ["files"], ["files"]) ?? files(value.files);
  return error === undefined ? { ok: true, value } : { ok: false, error };
}

function files(list) {
  if (!Array.isArray(list)) return "$.files: expected an array";
  if (list.length > FILES_MAX) return `$.files: more than ${FILES_MAX} items`;
  for (const [index, file] of list.entries()) {
    const at = `$.files[${index}]`;
    const error = shape(file, at, ["path", "action", "from"], ["path", "action"]);
    if (error !== undefined) return error;
    if (typeof file.path !== "string") return `${at}.path: expected a string`;
    if (!ACTIONS.has(file.action)) return `${at}.action: expected one of ${[...ACTIONS].join(", ")}`;
    if (file.action === "moved" && !Object.hasOwn(file, "from")) return `${at}.from: required for a moved file`;
    if (file.action !== "moved" && Object.hasOwn(file, "from")) return `${at}.from: only a moved file has one`;
    if (Object.hasOwn(file, "from") && typeof file.from !== "string") return `${at}.from: expected a string`;
  }
  return undefined;
}

/** Why `value` is not a plain object with `required` and only `allowed` keys, if it is not. */
function shape(value, at, allowed, required) {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return `${at}: expected an object`;
  const extra = Object.keys(value).find((key) => !allowed.includes(key));
  if (extra !== undefined) return `${member(at, extra)}: unexpected property`;
  const missing = required.find((key) => !Object.hasOwn(value, key));
  if (missing !== undefined) return `${member(at, missing)}: required`;
  return undefined;
}

function member(at, key) {
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `${at}.${key}` : `${at}[${JSON.stringify(key)}]`;
}

/** Whether `text` has more than `max` code points (JSON Schema's length). */
function longerThan(text, max) {
  if (text.length <= max) return false;
  let count = 0;
  for (const _ of text) if (++count > max) return true;
  return false;
}

function deepFreeze(value) {
  if (typeof value === "object" && value !== null) {
    Object.values(value).forEach(deepFreeze);
    Object.freeze(value);
  }
  return value;
}
