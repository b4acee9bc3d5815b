/**
 * `shiitake/files-search`: the runtime's search visibility policy for a
 * host's own Files adapter (seed files-search), so its searches and
 * listings hide exactly what the runtime's files module hides. Answers as
 * `git check-ignore` would for canonical root-relative paths, plus: a `.git`
 * component hides a path, and so does an excluded ancestor directory.
 * Exact-path reads do not ask it. Needs the wasm's `files-search` feature
 * (a lean build, SHIITAKE_LEAN=1, throws naming it). In a Worker and on
 * Node (the package's `node` condition loads the wasm as `shiitake/node`
 * does).
 */

/** One `.gitignore` as the adapter read it. */
export interface IgnoreFile {
  /** The canonical root-relative directory holding it (`""` = the root, `src/app`; no leading, trailing or doubled `/`, no `.`/`..`). */
  dir: string;
  /** Its text (a UTF-8 byte order mark and CRLF line ends read as git reads them). */
  text: string;
}

/** A listing entry `filter` keeps or drops, returned as given (a Files port's `list` entries among them). */
export type VisibilityEntry = string | { path: string; dir?: boolean };

/** One invocation's policy: build one per search or listing (it remembers each directory it decided). */
export declare class SearchVisibility {
  /** Use `searchVisibility(files)`. */
  constructor(files: readonly IgnoreFile[]);
  /**
   * Whether a search or listing shows `path` (canonical, root-relative; the
   * root `""` is always shown; `dir: true` for a directory, which dir-only
   * patterns like `build/` match). A path with an empty, `.` or `..`
   * component is a `TypeError`, one over 1,024 bytes a `RangeError`; any other
   * character is a name's, as to git.
   */
  visible(path: string, options?: { dir?: boolean }): boolean;
  /** Why a search or listing leaves `path` out (the `.git` component, or the excluded path, pattern and file), or `null`. */
  hidden(path: string, options?: { dir?: boolean }): string | null;
  /** The entries shown, in order: a string is a file path; an object a file, or a directory with `dir: true`. */
  filter<T extends VisibilityEntry>(entries: readonly T[]): T[];
}

/**
 * The policy for the adapter's ignore files: at most 256 files, 65,536
 * bytes (UTF-8) each and 1,048,576 in all (over a bound: a `RangeError`
 * naming it); a directory that is not canonical or appears twice is a
 * `TypeError`, and so is input of the wrong type (naming the field). A line
 * the gitignore grammar refuses is skipped, as git skips it.
 */
export function searchVisibility(files: readonly IgnoreFile[]): SearchVisibility;
