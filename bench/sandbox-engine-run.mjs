// One guest run for bench/sandbox-engine.mjs, in Node and in workerd: a fresh
// runtime + context, a global `call(path, argsJson)` whose promise the host
// settles later (`newPromise`, then `executePendingJobs` once the host
// promise settles: the sync build's pattern), the code's promise awaited.

/** Runs `code` (an expression yielding a promise); `host(path, argsJson)` answers a call. Resolves to the dumped value. */
export async function runOnce(QuickJS, code, host) {
  const runtime = QuickJS.newRuntime();
  const context = runtime.newContext();
  const pending = new Set();
  let wake;
  try {
    const call = context.newFunction("call", (pathHandle, argsHandle) => {
      const deferred = context.newPromise();
      pending.add(deferred);
      host(context.getString(pathHandle), context.getString(argsHandle)).then((text) => {
        if (deferred.alive) context.newString(text).consume((value) => deferred.resolve(value));
        pending.delete(deferred);
        deferred.dispose();
        wake?.();
      });
      return deferred.handle;
    });
    context.setProp(context.global, "call", call);
    call.dispose();
    const promise = context.unwrapResult(context.evalCode(code));
    try {
      for (;;) {
        runtime.executePendingJobs().unwrap();
        const state = context.getPromiseState(promise);
        if (state.type === "fulfilled") return state.value.consume((value) => context.dump(value));
        if (state.type === "rejected") throw new Error(state.error.consume((error) => JSON.stringify(context.dump(error))));
        if (pending.size === 0) throw new Error("hung");
        await new Promise((resolve) => (wake = resolve));
      }
    } finally {
      promise.dispose();
    }
  } finally {
    context.dispose();
    runtime.dispose();
  }
}
