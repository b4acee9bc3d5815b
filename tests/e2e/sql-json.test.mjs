// js/do/sql.mjs over a real Durable Object's SQLite: the JSON text the
// core's DoSql (src/host/sql.rs) reads for each SQLite type, and the
// parameters it writes. Integers exact in a double are JSON numbers; every
// other number (a real, an integer past 2^53, an infinity) is `{"r": [hi,
// lo]}`, its IEEE 754 bits, so a real never decodes as an integer nor loses
// a bit; a BLOB is `{"u": its kind}`, which the core refuses as it always
// has. Several writes are all or none.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";
import { Miniflare } from "miniflare";
import { COMPATIBILITY_DATE, ROOT, bundleFixture } from "./helpers.mjs";

/** A real as the rows carry it: the high and low halves of its bits. */
function real(v) {
  const bits = new DataView(new ArrayBuffer(8));
  bits.setFloat64(0, v);
  return { r: [bits.getUint32(0), bits.getUint32(4)] };
}

let mf;
before(async () => {
  mf = new Miniflare({
    modules: true,
    scriptPath: await bundleFixture(path.join(ROOT, "tests/e2e/fixtures/sql-json-worker.mjs"), "sql-json"),
    compatibilityDate: COMPATIBILITY_DATE,
    durableObjects: { SQL: { className: "SqlDO", useSQLite: true } },
  });
});
after(() => mf.dispose());

async function call(op, statements, params) {
  const res = await mf.dispatchFetch("http://sql/", { method: "POST", body: JSON.stringify({ op, statements, params }) });
  return { status: res.status, text: await res.text() };
}
const run = (statement, params = []) => call("apply", `${statement}\0`, [params]);
const query = async (statement, params = []) => {
  const res = await call("query", statement, params);
  assert.equal(res.status, 200, res.text);
  return res.text;
};

test("every SQLite type as the JSON text DoSql decodes", async () => {
  assert.equal((await run("CREATE TABLE t (k INTEGER PRIMARY KEY, v)")).text, "applied");
  const values = [
    [1, null],
    [2, 42],
    [3, -7],
    [4, 2 ** 53 - 1],
    [5, 2.5],
    [6, 1e300],
    [7, "text \"quoted\" é 🍄\n"],
    [8, { r: "Infinity" }],
    [9, { r: "-Infinity" }],
    [10, 3.0],
  ];
  for (const [k, v] of values) assert.equal((await run("INSERT INTO t VALUES (?, ?)", [k, v])).text, "applied");
  assert.equal((await run("INSERT INTO t VALUES (11, 9007199254740993)")).text, "applied");
  assert.equal((await run("INSERT INTO t VALUES (12, x'00ff')")).text, "applied");
  const rows = await query("SELECT k, v FROM t ORDER BY k");
  assert.equal(
    rows,
    JSON.stringify([
      [1, null],
      [2, 42],
      [3, -7],
      [4, 2 ** 53 - 1],
      [5, { r: [0x40040000, 0] }],
      [6, real(1e300)],
      [7, "text \"quoted\" é 🍄\n"],
      [8, real(Infinity)],
      [9, real(-Infinity)],
      // An integral number is an integer, as it always decoded.
      [10, 3],
      [11, real(2 ** 53)],
      [12, { u: "[object ArrayBuffer]" }],
    ]),
  );
  assert.equal(await query("SELECT typeof(v) FROM t WHERE k IN (5, 8) ORDER BY k"), JSON.stringify([["real"], ["real"]]));
  assert.equal(await query("SELECT count(*) FROM t WHERE k > ?", [100]), "[[0]]");
});

test("several writes are all or none; an engine error is thrown with its message", async () => {
  await run("CREATE TABLE u (k INTEGER PRIMARY KEY)");
  const failed = await call("apply", "INSERT INTO u VALUES (?)\0INSERT INTO u VALUES (?)\0", [[1], [1]]);
  assert.equal(failed.status, 500);
  assert.match(failed.text, /^threw: .*UNIQUE constraint failed/);
  assert.equal(await query("SELECT count(*) FROM u"), "[[0]]", "the first write was rolled back");
  assert.equal((await call("apply", "INSERT INTO u VALUES (?)\0INSERT INTO u VALUES (?)\0", [[1], [2]])).text, "applied");
  assert.equal(await query("SELECT k FROM u ORDER BY k"), "[[1],[2]]");
});
