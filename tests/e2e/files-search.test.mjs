// `shiitake/files-search`: the core's search visibility policy as a package
// export for a host's own Files adapter. On Node (the package's `node`
// condition) and in a Worker (Miniflare, the bundle a host's build makes)
// it answers every row of tests/fixtures/visibility/table.tsv exactly as
// `git check-ignore` did (the table tests/visibility.rs holds the core to),
// and refuses bad input and input over the bounds with an error naming the
// field or the bound.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { Miniflare } from "miniflare";
import ts from "typescript";
import { rustBounds } from "../../scripts/gen-limits.mjs";
import { COMPATIBILITY_DATE, ROOT, bundleFixture } from "./helpers.mjs";

const FIXTURES = path.join(ROOT, "tests/fixtures/visibility");
const bounds = rustBounds(readFileSync(path.join(ROOT, "src/limits.rs"), "utf8"));
const bound = (name) => Number(bounds.get(name).value.replaceAll("_", ""));
const IGNORE_FILES_MAX = bound("IGNORE_FILES_MAX");
const IGNORE_FILE_BYTES_MAX = bound("IGNORE_FILE_BYTES_MAX");
const IGNORE_BYTES_MAX = bound("IGNORE_BYTES_MAX");

// Where the `ignore` crate's grammar is known to differ from git's (as in
// tests/visibility.rs): the policy must still disagree there.
const KNOWN_DEVIATIONS = new Set(["edges\tzrev"]);

/** The table's rows: `{ tree, path, dir, visible }` (git's answer). */
const rows = readFileSync(path.join(FIXTURES, "table.tsv"), "utf8")
  .split("\n")
  .filter((line) => line !== "" && !line.startsWith("#"))
  .map((line) => {
    const [tree, p, isDir, ignored] = line.split("\t");
    return { tree, path: p, dir: isDir === "1", visible: ignored === "0" };
  });
const trees = [...new Set(rows.map((r) => r.tree))];

/** A tree's ignore files as an adapter reads them (`<d>/gitignore` is `<d>/.gitignore`). */
function ignoreFiles(tree) {
  const root = path.join(FIXTURES, tree, "ignores");
  return readdirSync(root, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name === "gitignore")
    .map((e) => ({ dir: path.relative(root, e.parentPath).split(path.sep).join("/"), text: readFileSync(path.join(e.parentPath, e.name), "utf8") }));
}

/** What git says for each row of `tree`, the known deviations flipped. */
function expected(tree) {
  return rows.filter((r) => r.tree === tree).map((r) => (KNOWN_DEVIATIONS.has(`${tree}\t${r.path}`) ? !r.visible : r.visible));
}

test("the table covers several trees, files and directories, shown and hidden", () => {
  assert.ok(trees.length >= 4 && rows.length >= 150, `${trees.length} trees, ${rows.length} rows`);
  const hidden = rows.filter((r) => !r.visible).length;
  assert.ok(hidden > rows.length / 4 && hidden < (rows.length * 3) / 4, `${hidden} of ${rows.length} hidden`);
  assert.ok(rows.some((r) => r.dir) && trees.every((t) => ignoreFiles(t).length > 0));
});

test("on Node, every row is answered as git check-ignore did", async () => {
  const { searchVisibility, SearchVisibility } = await import("shiitake/files-search");
  for (const tree of trees) {
    const policy = searchVisibility(ignoreFiles(tree));
    assert.ok(policy instanceof SearchVisibility);
    const queries = rows.filter((r) => r.tree === tree);
    const visible = queries.map((q) => policy.visible(q.path, { dir: q.dir }));
    assert.deepEqual(visible, expected(tree), tree);
    // `hidden` says why exactly when `visible` says no.
    queries.forEach((q, i) => assert.equal(policy.hidden(q.path, { dir: q.dir }) === null, visible[i], `${tree}: ${q.path}`));
    // `filter` keeps the shown entries, as given and in order.
    const entries = queries.map((q) => (q.dir ? { path: q.path, dir: true, size: 0 } : q.path));
    assert.deepEqual(
      policy.filter(entries),
      entries.filter((_, i) => visible[i]),
    );
  }
});

test("on Node, answers name the pattern, the .git component and the root", async () => {
  const { searchVisibility } = await import("shiitake/files-search");
  const policy = searchVisibility([
    { dir: "", text: "logs/\n*.tmp\n" },
    { dir: "logs", text: "!*\n" },
  ]);
  assert.equal(policy.hidden("logs/keep.txt"), "`logs` is excluded by the pattern `logs/` of the .gitignore in the root");
  assert.equal(policy.hidden("vendor/.git/HEAD"), "paths with a `.git` component are never shown");
  assert.equal(policy.visible(""), true);
  assert.equal(policy.visible("logs"), true, "`logs/` is dir-only");
  assert.equal(policy.visible("logs", { dir: true }), false);
  assert.deepEqual(policy.filter(["a.tmp", "a.rs", { path: "logs", dir: true }, { path: "src", dir: true }]), ["a.rs", { path: "src", dir: true }]);
});

test("on Node, input over a bound is a RangeError naming it", async () => {
  const { searchVisibility } = await import("shiitake/files-search");
  const empty = (i) => ({ dir: `d${i}`, text: "" });
  // At each bound: accepted.
  assert.ok(searchVisibility(Array.from({ length: IGNORE_FILES_MAX }, (_, i) => empty(i))));
  assert.ok(searchVisibility([{ dir: "a", text: "#".repeat(IGNORE_FILE_BYTES_MAX) }]));
  const full = IGNORE_BYTES_MAX / IGNORE_FILE_BYTES_MAX;
  assert.ok(searchVisibility(Array.from({ length: full }, (_, i) => ({ dir: `d${i}`, text: "#".repeat(IGNORE_FILE_BYTES_MAX) }))));
  // One past: refused.
  assert.throws(() => searchVisibility(Array.from({ length: IGNORE_FILES_MAX + 1 }, (_, i) => empty(i))), {
    name: "RangeError",
    message: `searchVisibility: ${IGNORE_FILES_MAX + 1} ignore files; a search reads at most ${IGNORE_FILES_MAX}`,
  });
  // Bytes are UTF-8: 2 bytes a character here.
  assert.throws(() => searchVisibility([{ dir: "src/a", text: "é".repeat(IGNORE_FILE_BYTES_MAX / 2) + "x" }]), {
    name: "RangeError",
    message: `searchVisibility: the .gitignore in \`src/a\` is ${IGNORE_FILE_BYTES_MAX + 1} bytes; at most ${IGNORE_FILE_BYTES_MAX}`,
  });
  const over = Array.from({ length: full + 1 }, (_, i) => ({ dir: `d${i}`, text: "#".repeat(IGNORE_FILE_BYTES_MAX) }));
  assert.throws(() => searchVisibility(over), {
    name: "RangeError",
    message: `searchVisibility: the ignore files hold ${IGNORE_BYTES_MAX + IGNORE_FILE_BYTES_MAX} bytes together; at most ${IGNORE_BYTES_MAX}`,
  });
});

test("on Node, bad input is a TypeError naming the field", async () => {
  const { searchVisibility } = await import("shiitake/files-search");
  const refused = (make, message) => assert.throws(make, (e) => e instanceof TypeError && e.message.startsWith("searchVisibility: ") && message.test(e.message), String(message));
  refused(() => searchVisibility(), /`files` must be an array/);
  refused(() => searchVisibility({ dir: "", text: "" }), /`files` must be an array/);
  refused(() => searchVisibility([null]), /files\[0\] must be an object \{ dir, text \}, not null/);
  refused(() => searchVisibility([{ dir: "", text: "" }, { dir: 1, text: "" }]), /files\[1\]\.dir must be a string, not number/);
  refused(() => searchVisibility([{ dir: "" }]), /files\[0\]\.text must be a string, not undefined/);
  for (const dir of ["/a", "a/", "a/../b", "./a", "a//b"]) refused(() => searchVisibility([{ dir, text: "" }]), /is not a canonical root-relative path/);
  refused(() => searchVisibility([{ dir: "a", text: "x" }, { dir: "a", text: "y" }]), /two ignore files for `a`/);

  const policy = searchVisibility([{ dir: "", text: "*.log\n" }]);
  refused(() => policy.visible(7), /path must be a string, not number/);
  refused(() => policy.visible("a", "dir"), /options must be an object \{ dir \}, not string/);
  refused(() => policy.visible("a", { dir: "yes" }), /options\.dir must be a boolean, not string/);
  for (const p of ["/a.log", "a.log/", "src/../a.log", "./a.log", "src//a.log", "..", "."]) {
    refused(() => policy.visible(p), /is not canonical and root-relative \(no empty, `\.` or `\.\.` component\)/);
    refused(() => policy.hidden(p), /is not canonical and root-relative/);
  }
  // Any other character is a name's, as to git.
  assert.equal(policy.visible("end\\"), true);
  assert.equal(policy.visible("tab\t.log"), false);
  refused(() => policy.filter("a.log"), /entries must be an array/);
  refused(() => policy.filter(["a", 3]), /entries\[1\] must be a path or \{ path, dir\? \}, not number/);
  refused(() => policy.filter([{ path: 3 }]), /entries\[0\]\.path must be a string, not number/);
  refused(() => policy.filter([{ path: "x", dir: 1 }]), /entries\[0\]\.dir must be a boolean, not number/);
  refused(() => policy.filter(["ok", "/x"]), /path `\/x` is not canonical/);
  // A path's cost grows with its depth: bounded as the files module's paths.
  const FILE_PATH_BYTES_MAX = bound("FILE_PATH_BYTES_MAX");
  assert.equal(policy.visible("a/".repeat(FILE_PATH_BYTES_MAX / 2 - 1) + "bc"), true);
  assert.throws(() => policy.visible("a/".repeat(FILE_PATH_BYTES_MAX / 2) + "b"), {
    name: "RangeError",
    message: new RegExp(`^searchVisibility: path \`a/a/.*…\` is ${FILE_PATH_BYTES_MAX + 1} bytes; at most ${FILE_PATH_BYTES_MAX}$`),
  });
});

test("on Node, a policy outlives a reset of the wasm instance (a trap elsewhere)", async () => {
  const { searchVisibility } = await import("shiitake/files-search");
  const { generation: before, guardSync } = await import("../../js/do/recovery.mjs");
  const policies = trees.map((tree) => searchVisibility(ignoreFiles(tree)));
  // A trap as the shim meets one (js/do/recovery.mjs): the instance is
  // replaced, and the old policies point into the dropped one.
  assert.throws(() => guardSync(() => { throw new WebAssembly.RuntimeError("a trap in another call"); }), WebAssembly.RuntimeError);
  const { generation: after } = await import("../../js/do/recovery.mjs");
  assert.equal(after, before + 1);
  trees.forEach((tree, i) => {
    const queries = rows.filter((r) => r.tree === tree);
    assert.deepEqual(
      queries.map((q) => policies[i].visible(q.path, { dir: q.dir })),
      expected(tree),
      tree,
    );
  });
});

test("the declarations type-check a consumer through the package name", () => {
  // A virtual file inside the package, so "shiitake/files-search" resolves
  // through package.json "exports" to js/files-search.d.ts.
  const file = path.join(ROOT, "tests/e2e/files-search-consumer.ts");
  const text = `
import { SearchVisibility, searchVisibility, type IgnoreFile } from "shiitake/files-search";
const files: IgnoreFile[] = [{ dir: "", text: "*.log\\n" }];
const policy: SearchVisibility = searchVisibility(files);
export const shown: boolean = policy.visible("a.log") && policy.visible("dist", { dir: true });
export const why: string | null = policy.hidden("a.log");
const entries: { path: string; size: number }[] = [{ path: "a.rs", size: 1 }];
export const kept: { path: string; size: number }[] = policy.filter(entries);
export const paths: string[] = policy.filter(["a.rs", "b.log"]);
// @ts-expect-error a file names its directory
searchVisibility([{ text: "" }]);
// @ts-expect-error dir is a boolean
policy.visible("a", { dir: "yes" });
// @ts-expect-error entries are paths or { path }
policy.filter([1]);
`;
  const options = {
    noEmit: true,
    strict: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ["lib.es2022.d.ts"],
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  const fileExists = host.fileExists.bind(host);
  const program = ts.createProgram([file], options, {
    ...host,
    fileExists: (name) => path.resolve(name) === file || fileExists(name),
    getSourceFile: (name, ...rest) =>
      path.resolve(name) === file ? ts.createSourceFile(name, text, ts.ScriptTarget.ES2022, true) : getSourceFile(name, ...rest),
  });
  const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  assert.deepEqual(diagnostics, []);
  const resolved = program.getSourceFiles().map((s) => path.relative(ROOT, s.fileName));
  assert.ok(resolved.includes("js/files-search.d.ts"), resolved.join(", "));
});

// ---------------------------------------------------------------- Worker

let mf;
before(async () => {
  const scriptPath = await bundleFixture(path.join(ROOT, "tests/e2e/fixtures/files-search-worker.mjs"), "files-search-worker");
  mf = new Miniflare({
    modules: true,
    scriptPath,
    modulesRules: [{ type: "CompiledWasm", include: ["**/*.wasm"] }],
    compatibilityDate: COMPATIBILITY_DATE,
  });
});
after(() => mf?.dispose());

async function ask(body) {
  const response = await mf.dispatchFetch("http://worker/", { method: "POST", body: JSON.stringify(body) });
  assert.equal(response.status, 200);
  return response.json();
}

test("in a Worker, every row is answered as git check-ignore did", async () => {
  for (const tree of trees) {
    const queries = rows.filter((r) => r.tree === tree).map(({ path: p, dir }) => ({ path: p, dir }));
    const entries = queries.map((q) => (q.dir ? { path: q.path, dir: true } : q.path));
    const answer = await ask({ files: ignoreFiles(tree), queries, entries });
    assert.deepEqual(answer.visible, expected(tree), tree);
    assert.deepEqual(
      answer.hidden.map((why) => why === null),
      answer.visible,
    );
    assert.deepEqual(
      answer.filtered,
      entries.filter((_, i) => answer.visible[i]),
    );
  }
});

test("in a Worker, bounds and bad input are refused by name", async () => {
  const many = Array.from({ length: IGNORE_FILES_MAX + 1 }, (_, i) => ({ dir: `d${i}`, text: "" }));
  assert.deepEqual(await ask({ files: many, queries: [] }), {
    error: { name: "RangeError", message: `searchVisibility: ${IGNORE_FILES_MAX + 1} ignore files; a search reads at most ${IGNORE_FILES_MAX}` },
  });
  assert.deepEqual(await ask({ files: [{ dir: "", text: 1 }], queries: [] }), {
    error: { name: "TypeError", message: "searchVisibility: files[0].text must be a string, not number" },
  });
  assert.deepEqual(await ask({ files: [], queries: [{ path: "a/./b", dir: false }] }), {
    error: { name: "TypeError", message: "searchVisibility: path `a/./b` is not canonical and root-relative (no empty, `.` or `..` component)" },
  });
});
