// Counts what a Durable Object asks of SQLite, for the bench Workers. The
// Rust core reads `ctx.storage.sql.exec` when it is built (at the first
// request), so wrapping it in the constructor sees every statement.
//
//   const counter = new SqlCounter(ctx.storage.sql);
//   counter.texts = true; ... counter.stats()  // { statements, rowsWritten, rowsRead, texts, rows, read }

export class SqlCounter {
  /** Whether statements are counted now (counting from the start by default). */
  on = true;
  /** Whether each statement's text is kept (`stats().texts`); costs a regex per statement. */
  texts = false;
  #cursors = [];
  #texts = [];

  constructor(sql) {
    const exec = sql.exec.bind(sql);
    sql.exec = (...args) => {
      const cursor = exec(...args);
      if (this.on) {
        this.#cursors.push(cursor);
        if (this.texts) this.#texts.push(shorten(String(args[0])));
      }
      return cursor;
    };
  }

  reset() {
    this.#cursors = [];
    this.#texts = [];
  }

  stats() {
    const sum = (k) => this.#cursors.reduce((n, c) => n + c[k], 0);
    return {
      statements: this.#cursors.length,
      rowsWritten: sum("rowsWritten"),
      rowsRead: sum("rowsRead"),
      // Each statement, shortened to its head and its FROM, and its rows written and read.
      texts: this.#texts,
      rows: this.#cursors.map((c) => c.rowsWritten),
      read: this.#cursors.map((c) => c.rowsRead),
    };
  }
}

function shorten(statement) {
  const t = statement.replace(/\s+/g, " ");
  const from = t.indexOf(" FROM ");
  return t.slice(0, 40) + (from > 40 ? ` ...${t.slice(from, from + 90)}` : "");
}
