// The browser side of the browser bridge (`shiitake/ui/browser`; seed
// knapsack: `connectBrowser` of `Knapsack.ui`). It reads the Session's event
// stream, claims each request before it runs it, runs it on the App's command
// registry (`whistle`) and posts the result with the claim. No wasm and no
// Node-only import: it bundles for the browser. It authenticates nothing:
// `fetch` carries the host's own credentials (cookies, headers).
import { SseParser } from "./client.mjs";

// Reconnect delays of the event stream: the first, doubled per failure up to
// the last (a stream that was open starts again from the first). The
// browser side's own bounds, with no core counterpart.
const RECONNECT_MS_MIN = 500;
const RECONNECT_MS_MAX = 30_000;
// One event of the stream: a request holds a command input within the
// core's payload bound (256 KiB) plus its envelope.
const EVENT_BYTES_MAX = 1_048_576;

/**
 * Connects the App open in this browser to one Session's bridge.
 * `baseUrl`: the Session's bridge, `<mount>/agents/<agentId>/browser/sessions/<sessionId>/browser`
 * (relative to the page when relative). `whistle`: the App's command registry,
 * `{ commands(), execute(name, input, { signal }) }`. `fetch`: the transport
 * (default: the global fetch). `onError(error)`: told about each failure the
 * bridge recovers from (a dropped stream, a refused post).
 */
export function connectBrowser({ baseUrl, whistle, fetch: fetchImpl, onError } = {}) {
  if (typeof baseUrl !== "string" && !(baseUrl instanceof URL)) throw new TypeError("connectBrowser: baseUrl must be a string or URL");
  if (typeof whistle?.commands !== "function" || typeof whistle?.execute !== "function") {
    throw new TypeError("connectBrowser: whistle must have commands() and execute(name, input, { signal })");
  }
  const send = fetchImpl ?? globalThis.fetch.bind(globalThis);
  const base = new URL(String(baseUrl).replace(/\/+$/, ""), globalThis.location?.href);
  const route = (name) => `${base.href}/${name}`;
  const report = (error) => {
    try {
      onError?.(error);
    } catch {
      // The App's reporter failing changes nothing here.
    }
  };
  const stop = new AbortController();
  // Requests this browser claimed and runs: requestId -> AbortController.
  const running = new Map();
  let finish;
  const closed = new Promise((resolve) => {
    finish = resolve;
  });

  const post = (name, body) =>
    send(route(name), {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: stop.signal,
    });

  async function run(request) {
    const { requestId } = request;
    if (running.has(requestId)) return;
    const own = new AbortController();
    running.set(requestId, own);
    try {
      const claimed = await post("claims", { requestId });
      // 409: another browser of this Session claimed it; 404: it is over.
      if (claimed.status !== 200) {
        await claimed.body?.cancel();
        if (claimed.status !== 409 && claimed.status !== 404) report(new Error(`claim ${requestId}: HTTP ${claimed.status}`));
        return;
      }
      const { claimId } = await claimed.json();
      let body;
      try {
        const result =
          request.operation === "discover"
            ? await whistle.commands()
            : await whistle.execute(request.name, request.input ?? {}, { signal: AbortSignal.any([own.signal, stop.signal]) });
        body = { requestId, claimId, result: result ?? null };
      } catch (error) {
        body = { requestId, claimId, error: String(error?.message ?? error) };
      }
      const posted = await post("results", body);
      // A withdrawn request (`cancelled`) answers 404: nothing to report.
      if (posted.status !== 200 && !own.signal.aborted) report(new Error(`result ${requestId}: HTTP ${posted.status}: ${await posted.text()}`));
      else await posted.body?.cancel();
    } catch (error) {
      if (!stop.signal.aborted) report(error);
    } finally {
      running.delete(requestId);
    }
  }

  // Reads one event stream until it ends: answers `{ended}` (why the
  // bridge ends for good) or `{connected: true}` (reconnect at once).
  async function listen() {
    const response = await untilStopped(send(route("events"), { headers: { accept: "text/event-stream" }, signal: stop.signal }));
    if (response.status === 410 || response.status === 404) {
      const text = await response.text();
      return { ended: `HTTP ${response.status}: ${text}` };
    }
    if (response.status !== 200 || response.body === null) {
      await response.body?.cancel();
      throw new Error(`events: HTTP ${response.status}`);
    }
    const parser = new SseParser(EVENT_BYTES_MAX);
    const reader = response.body.getReader();
    // A fetch that does not end its body at the abort (a host's own
    // transport may drop the signal) still stops reading at close().
    const cancel = () => reader.cancel().catch(() => {});
    if (stop.signal.aborted) cancel();
    stop.signal.addEventListener("abort", cancel, { once: true });
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return { connected: true };
        for (const { event, data } of parser.push(value)) {
          const message = JSON.parse(data);
          if (event === "request") run(message);
          else if (event === "cancelled") running.get(message.requestId)?.abort();
        }
      }
    } finally {
      stop.signal.removeEventListener("abort", cancel);
    }
  }

  // `promise` (a fetch), or a rejection at close() if that comes first; a
  // response arriving after it is cancelled.
  function untilStopped(promise) {
    if (stop.signal.aborted) {
      promise.then((r) => r.body?.cancel(), () => {});
      return Promise.reject(stop.signal.reason);
    }
    return new Promise((resolve, reject) => {
      const abort = () => {
        promise.then((r) => r.body?.cancel(), () => {});
        reject(stop.signal.reason);
      };
      stop.signal.addEventListener("abort", abort, { once: true });
      promise.then(
        (r) => (stop.signal.removeEventListener("abort", abort), resolve(r)),
        (e) => (stop.signal.removeEventListener("abort", abort), reject(e)),
      );
    });
  }

  (async () => {
    let delay = RECONNECT_MS_MIN;
    while (!stop.signal.aborted) {
      try {
        const outcome = await listen();
        if (outcome.ended !== undefined) return finish(outcome.ended);
        if (outcome.connected) delay = RECONNECT_MS_MIN;
      } catch (error) {
        if (stop.signal.aborted) break;
        report(error);
      }
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, delay);
        stop.signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
      });
      delay = Math.min(delay * 2, RECONNECT_MS_MAX);
    }
    finish("closed by the App");
  })();

  return {
    /** Resolves with why the bridge stopped: `close()`, or the host answering 410 (closed) or 404 (no such Session). */
    closed,
    /** Stops reading, aborts the commands running, and ends the bridge. */
    close() {
      stop.abort();
      for (const own of running.values()) own.abort();
    },
  };
}
