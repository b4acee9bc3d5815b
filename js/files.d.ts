/** The brand `sqliteWorkspace()` carries. */
export declare const WORKSPACE: unique symbol;

export interface WorkspaceBounds {
  /** Bytes of one file: 1 to 1048576 (the default). */
  fileBytesMax?: number;
  /** Bytes of all files: 1 to 67108864 (the default). */
  workspaceBytesMax?: number;
  /** Files in all: 1 to 10000 (the default). */
  filesMax?: number;
}

/** The Agent's own SQLite as its files (one table; replace and patch transactional). */
export function sqliteWorkspace(bounds?: WorkspaceBounds): { [WORKSPACE]: WorkspaceBounds };

/** A change of `replace`: `expected` null = the file must not exist; `content` null = delete it. */
export interface FileChange {
  path: string;
  expected: string | null;
  content: string | null;
}

/**
 * A Files port. Paths are canonical and root-relative (`src/a.rs`, the root
 * is `""`); the port enforces its own root and authority. Methods may throw:
 * the message becomes the tool's error.
 */
export interface FilesPort {
  /** Whether the port supplies the patch engine (`apply_patch` offered): `replace` applies several changes all or none, or the port is `stepwise`. */
  patches?: boolean;
  /**
   * Whether `replace` is atomic for one change only (R2): the runtime then
   * hands it one change at a time and makes a patch all or none itself,
   * journaling it in the Agent's SQLite before the first write and putting
   * back what it wrote on a conflict, a failed write, a stop, or after a
   * crash when the Agent starts again.
   */
  stepwise?: boolean;
  read(path: string, options: { signal: AbortSignal }): Promise<string | null>;
  stat(path: string, options: { signal: AbortSignal }): Promise<{ kind: "file"; size: number } | { kind: "dir" } | null>;
  /**
   * Every file under `dir`, recursively, sorted by path, in pages (`cursor`
   * null at the end); `.gitignore`d and `.git` entries included: the runtime
   * hides them (an adapter listing or searching on its own hides the same
   * with `searchVisibility` from `shiitake/files-search`).
   */
  list(dir: string, cursor: string | null, options: { signal: AbortSignal }): Promise<{ entries: { path: string; size: number }[]; cursor: string | null }>;
  write(path: string, content: string, options: { signal: AbortSignal }): Promise<unknown>;
  /** Applies every change or none; a file no longer holding `expected` refuses them all. A `stepwise` port is handed one change at a time. */
  replace(changes: FileChange[], options: { signal: AbortSignal }): Promise<{ conflict: string } | null | undefined>;
}

/**
 * An R2 bucket as files under `prefix`; replace is a conditional put on the
 * etag. Stepwise: a patch is all or none through the runtime's journal in
 * the Agent's SQLite, across a restart too. R2's delete takes no condition:
 * a write racing a delete (or the put-back of an added file) between its
 * check and the delete is lost.
 */
export function r2Files(bucket: R2Bucket, options?: { prefix?: string }): FilesPort;
