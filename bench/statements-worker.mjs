// Worker for bench/statements.mjs: the demo Agent with every SQL text it
// hands `ctx.storage.sql.exec` recorded (the Rust core reads `exec` when it
// is built, so wrapping it after super() sees every statement); `GET
// /texts` answers them with their counts, for all objects of the isolate.
import app, { ShiitakeDO } from "../js/demo.mjs";
export { ShiitakeSandbox } from "../js/demo.mjs";

const TEXTS = new Map();

export class TextsDO extends ShiitakeDO {
  constructor(ctx, env) {
    super(ctx, env);
    const sql = ctx.storage.sql;
    const exec = sql.exec.bind(sql);
    sql.exec = (text, ...bindings) => {
      TEXTS.set(text, (TEXTS.get(text) ?? 0) + 1);
      return exec(text, ...bindings);
    };
  }
}

export default {
  fetch(request, env, ctx) {
    if (new URL(request.url).pathname === "/texts") return Response.json([...TEXTS]);
    return app.fetch(request, env, ctx);
  },
};
