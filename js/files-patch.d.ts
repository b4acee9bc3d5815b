// Types of the "shiitake/files-patch" entry: the apply_patch tool's input
// and output contracts (schemas/files-patch.*.json) and their validators.

/** The tool's input: the patch text (`*** Begin Patch` ... `*** End Patch`), at most 262,144 characters. */
export interface PatchInput {
  input: string;
}

/** One file an applied patch changed; a moved file names its former path in `from`. */
export type PatchFileChange =
  | { path: string; action: "added" | "updated" | "deleted"; from?: never }
  | { path: string; action: "moved"; from: string };

/** The tool's output: the files the patch changed, in patch order (at most 64). */
export interface PatchOutput {
  files: PatchFileChange[];
}

/** A JSON Schema document, read-only. */
export type JsonSchema = { readonly [keyword: string]: unknown };

/** A validation's outcome; `error` reads `<path>: <problem>`, e.g. `$.files[0].action: expected one of ...`. */
export type PatchValidation<T> = { ok: true; value: T } | { ok: false; error: string };

export declare const patchInputSchema: JsonSchema;
export declare const patchOutputSchema: JsonSchema;

export declare function validatePatchInput(value: unknown): PatchValidation<PatchInput>;
export declare function validatePatchOutput(value: unknown): PatchValidation<PatchOutput>;
