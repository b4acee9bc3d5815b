// The Durable Object's SQL as the core's `DoSql` (src/host/sql.rs) runs it:
// parameters go in, and a query's rows come out, as one JSON text each, so
// a query or a batch of writes is one call from wasm into JS instead of one
// per parameter and per cell (admission's facts row alone was 91 calls).
//
// Values as JSON carries them: null, text, and integers that are exact in
// a double (what SQLite's integers are here) as themselves. In a row, every
// other number (a real, or an integer past 2^53) is `{"r": [hi, lo]}`, the
// two halves of its IEEE 754 bits, so the core keeps a real apart from an
// integer and reads it exactly without a float parser (whose tables would
// cost the wasm 14 KiB gzip); a value of no SQL type the core reads (a
// BLOB's ArrayBuffer) is `{"u": "<its kind>"}`, which the core refuses. In
// the parameters, a real is a JSON number, or `{"r": "Infinity"}` (or
// "-Infinity", "NaN"), for which JSON has no number.

function param(p) {
  return typeof p === "object" && p !== null ? Number(p.r) : p;
}

function run(sql, statement, params) {
  return sql.exec(statement, ...params.map(param));
}

const bits = new DataView(new ArrayBuffer(8));

function cell(v) {
  if (typeof v === "number") {
    if (Number.isSafeInteger(v)) return v;
    bits.setFloat64(0, v);
    return { r: [bits.getUint32(0), bits.getUint32(4)] };
  }
  if (typeof v === "object" && v !== null) return { u: Object.prototype.toString.call(v) };
  return v;
}

/**
 * The rows of `statement` with `params` (JSON: an array) as JSON: an array
 * of rows, each an array of its cells. Throws what `sql.exec` throws.
 */
export function query(sql, statement, params) {
  const rows = run(sql, statement, JSON.parse(params)).raw().toArray();
  for (const row of rows) {
    for (let i = 0; i < row.length; i++) {
      const v = row[i];
      if (typeof v !== "string" && v !== null && !Number.isSafeInteger(v)) row[i] = cell(v);
    }
  }
  return JSON.stringify(rows);
}

/**
 * Runs `statements` (each ended by a NUL) with `params` (JSON: an array of
 * each one's parameters) in order, all or none: one statement is atomic by
 * itself, several run in one `transactionSync`, which a throwing statement
 * rolls back. Throws what `sql.exec` throws.
 */
export function apply(storage, sql, statements, params) {
  const texts = statements.split("\0");
  const all = JSON.parse(params);
  if (all.length === 1) {
    run(sql, texts[0], all[0]);
    return;
  }
  storage.transactionSync(() => {
    for (let i = 0; i < all.length; i++) run(sql, texts[i], all[i]);
  });
}
