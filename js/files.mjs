// Files ports for `tools().files` (seed knapsack: Knapsack.files({ port })).
// A port only moves bytes: paths arrive canonical and root-relative, and
// every rule (path validation, search visibility, the patch engine) runs in
// the core. See js/files.d.ts for the port interface a host may implement.

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

// Bytes of a file the files module handles (src/limits.rs FILE_BYTES_MAX;
// tests/e2e/limits-sync.test.mjs checks the copy).
const FILE_BYTES_MAX = 4_194_304;
// Entries of one listing page (src/limits.rs LIST_ENTRIES_MAX).
const LIST_ENTRIES_MAX = 1_000;

/**
 * An R2 bucket as files, under `prefix` (the port's root: keys are
 * `prefix + path`). A replace is a conditional put on the object's etag, so
 * a concurrent edit is refused, not lost. R2 has no multi-object
 * transaction: a patch checks every file first, writes them one by one with
 * conditional puts, and on a conflict midway puts back what it had written.
 * A delete is not conditional in R2: a write racing it between the check and
 * the delete is lost.
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

  // Writes `content` (or deletes) only if the object still has `etag`
  // (`null`: does not exist). Answers the new etag, or false on a conflict.
  async function put(path, content, etag) {
    if (content === null) {
      await bucket.delete(key(path));
      return null;
    }
    const onlyIf = etag === null ? { etagDoesNotMatch: "*" } : { etagMatches: etag };
    const written = await bucket.put(key(path), content, { onlyIf });
    return written === null ? false : written.etag;
  }

  return {
    patches: true,
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
      const seen = [];
      for (const change of changes) {
        const found = await current(change.path);
        if ((found?.content ?? null) !== change.expected) return { conflict: change.path };
        seen.push(found);
      }
      const done = [];
      for (const [i, change] of changes.entries()) {
        const etag = await put(change.path, change.content, seen[i]?.etag ?? null);
        if (etag === false) {
          // Put back, newest first, what this replace had written.
          for (const { change: undo, before, after } of done.reverse()) {
            await put(undo.path, before?.content ?? null, after).catch(() => {});
          }
          return { conflict: change.path };
        }
        done.push({ change, before: seen[i], after: etag });
      }
      return null;
    },
  };
}
