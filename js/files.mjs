// Files ports for `tools().files` (seed knapsack: Knapsack.files({ port })).
// A port only moves bytes: paths arrive canonical and root-relative, and
// every rule (path validation, search visibility, the patch engine) runs in
// the core. See js/files.d.ts for the port interface a host may implement.

import { FILE_BYTES_MAX, LIST_ENTRIES_MAX } from "./limits.mjs";

// The brand the shim recognises on the SQLite workspace (the Agent's own
// SQLite, served by the core itself).
export const WORKSPACE = Symbol.for("shiitake.files.workspace");

/**
 * The Agent's own SQLite as its files: one table in the Durable Object,
 * every replace and every patch one transaction. Bounds (bytes of a file,
 * of the workspace, files in all) default to 1 MiB, 64 MiB and 10,000.
 */
export function sqliteWorkspace(bounds = {}) {
  return { [WORKSPACE]: { ...bounds } };
}

/**
 * An R2 bucket as files, under `prefix` (the port's root: keys are
 * `prefix + path`). A replace is a conditional put on the object's etag, so
 * a concurrent edit is refused, not lost. R2 has no multi-object
 * transaction, so the port is `stepwise`: it takes one change at a time,
 * and the runtime makes a patch all or none (src/files/journal.rs): it
 * journals the patch in the Agent's own SQLite before the first write,
 * writes file by file, puts back what it wrote on a conflict, a failed
 * write or a stop, and after a crash when the Agent starts again; the model
 * is told exactly which files a put-back could not restore.
 *
 * What R2 cannot close: its delete takes no condition. Deleting a file
 * (or putting back a file a patch added) checks its content, then deletes;
 * a write landing between the check and the delete is lost.
 */
export function r2Files(bucket, { prefix = "" } = {}) {
  if (typeof bucket?.get !== "function" || typeof bucket?.put !== "function") {
    throw new TypeError("r2Files: the first argument must be an R2 bucket binding");
  }
  if (prefix !== "" && !prefix.endsWith("/")) prefix += "/";
  const key = (path) => prefix + path;

  async function current(path) {
    const object = await bucket.get(key(path));
    if (object === null) return null;
    if (object.size > FILE_BYTES_MAX) {
      await object.body?.cancel?.();
      throw new Error(`${path}: ${object.size} bytes; the files module reads at most ${FILE_BYTES_MAX}`);
    }
    return { content: await object.text(), etag: object.etag };
  }

  return {
    patches: true,
    stepwise: true,
    async read(path) {
      return (await current(path))?.content ?? null;
    },
    async stat(path) {
      const head = await bucket.head(key(path));
      if (head !== null) return { kind: "file", size: head.size };
      const below = await bucket.list({ prefix: key(path) + "/", limit: 1 });
      return below.objects.length > 0 ? { kind: "dir" } : null;
    },
    async list(dir, cursor) {
      const listed = await bucket.list({
        prefix: dir === "" ? prefix : key(dir) + "/",
        limit: LIST_ENTRIES_MAX,
        ...(cursor ? { cursor } : {}),
      });
      return {
        entries: listed.objects.map((o) => ({ path: o.key.slice(prefix.length), size: o.size })),
        cursor: listed.truncated ? listed.cursor : null,
      };
    },
    async write(path, content) {
      await bucket.put(key(path), content);
      return null;
    },
    async replace(changes) {
      if (changes.length !== 1) {
        throw new Error(`r2Files: replace takes one change at a time (the port is stepwise), not ${changes.length}`);
      }
      const [{ path, expected, content }] = changes;
      const found = await current(path);
      if ((found?.content ?? null) !== expected) return { conflict: path };
      if (content === null) {
        // Unconditional: a write racing this delete since the check is lost.
        await bucket.delete(key(path));
        return null;
      }
      const onlyIf = found === null ? { etagDoesNotMatch: "*" } : { etagMatches: found.etag };
      const written = await bucket.put(key(path), content, { onlyIf });
      return written === null ? { conflict: path } : null;
    },
  };
}
