// `shiitake/files-search` (seed: files-search supplies SearchVisibility to
// Local and hosted Files adapters): the core's search visibility policy
// (src/files/visibility.rs, through src/host/files/search.rs) for a host's
// own Files adapter, so its searches and listings hide what the runtime's
// own files module hides. This module checks the input's types; the bounds,
// the canonical paths and every answer are the core's. On Node the package
// resolves this entry to js/files-search-node.mjs, which loads the wasm as
// js/node.mjs does.
import * as wasm from "../build/wasm/shiitake.js";
import { generation, guardSync } from "./do/recovery.mjs";

const UNAVAILABLE =
  "searchVisibility: this wasm was built without the `files-search` Cargo feature (a lean build, SHIITAKE_LEAN=1); build with default features";

/** One invocation's search visibility: build one per search or listing. */
export class SearchVisibility {
  #dirs;
  #texts;
  #core;
  #generation;

  /** Use `searchVisibility(files)`. */
  constructor(files) {
    if (typeof wasm.SearchVisibilityCore !== "function") throw new Error(UNAVAILABLE);
    if (!Array.isArray(files)) throw new TypeError("searchVisibility: `files` must be an array of { dir, text } (each a .gitignore's directory and text)");
    this.#dirs = [];
    this.#texts = [];
    files.forEach((file, i) => {
      if (typeof file !== "object" || file === null) throw new TypeError(`searchVisibility: files[${i}] must be an object { dir, text }, not ${describe(file)}`);
      for (const field of ["dir", "text"]) {
        if (typeof file[field] !== "string") throw new TypeError(`searchVisibility: files[${i}].${field} must be a string, not ${describe(file[field])}`);
      }
      this.#dirs.push(file.dir);
      this.#texts.push(file.text);
    });
    this.#policy();
  }

  // The core's policy in the current wasm instance: after a reset (a trap
  // elsewhere, js/do/recovery.mjs) the old one points into a dropped
  // instance, so it is built again from the same files.
  #policy() {
    if (this.#core === undefined || this.#generation !== generation) {
      this.#core = guardSync(() => new wasm.SearchVisibilityCore(this.#dirs, this.#texts));
      this.#generation = generation;
    }
    return this.#core;
  }

  /** Whether a search or listing shows `path` (canonical, root-relative; `dir: true` for a directory). */
  visible(path, options) {
    return this.#ask("visible", path, "path", isDir(options, "options"));
  }

  /** Why a search or listing leaves `path` out, or `null` when it shows it. */
  hidden(path, options) {
    return this.#ask("hidden", path, "path", isDir(options, "options")) ?? null;
  }

  /**
   * The entries a search or listing shows, in their order: each a file path,
   * or an object with `path` (and `dir: true` for a directory), returned as
   * given (a Files port's `list` entries among them).
   */
  filter(entries) {
    if (!Array.isArray(entries)) throw new TypeError(`searchVisibility: filter(entries): entries must be an array of paths or { path, dir? }, not ${describe(entries)}`);
    return entries.filter((entry, i) => {
      if (typeof entry === "string") return this.#ask("visible", entry, `entries[${i}]`, false);
      if (typeof entry !== "object" || entry === null) throw new TypeError(`searchVisibility: entries[${i}] must be a path or { path, dir? }, not ${describe(entry)}`);
      return this.#ask("visible", entry.path, `entries[${i}].path`, isDir(entry, `entries[${i}]`));
    });
  }

  #ask(method, path, field, dir) {
    if (typeof path !== "string") throw new TypeError(`searchVisibility: ${field} must be a string, not ${describe(path)}`);
    return guardSync(() => this.#policy()[method](path, dir));
  }
}

/** The policy for the ignore files `[{ dir, text }]` (`dir` canonical, root-relative, `""` the root). */
export function searchVisibility(files) {
  return new SearchVisibility(files);
}

// `holder.dir` (absent: a file); `field` names the holder in errors.
function isDir(holder, field) {
  if (holder === undefined) return false;
  if (typeof holder !== "object" || holder === null) throw new TypeError(`searchVisibility: ${field} must be an object { dir }, not ${describe(holder)}`);
  if (holder.dir === undefined) return false;
  if (typeof holder.dir !== "boolean") throw new TypeError(`searchVisibility: ${field}.dir must be a boolean, not ${describe(holder.dir)}`);
  return holder.dir;
}

function describe(value) {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}
