// The browser bridge end to end (tools().ui, src/ui/, src/host/ui.rs): a
// browser connected with connectBrowser (shiitake/ui/browser) over the
// routes shiitakeApp() forwards lends each run the `ui` module; the model
// discovers the App's commands and executes one through `execute`, and the
// result reaches the transcript. The claim protocol by hand: a result
// without a claim, a second claim, a claim of another request and a claim
// that is no one's are refused with 409; a call no browser claims ends at
// 90% of the tool timeout saying so, and one with no browser connected
// within about 2 s, while a browser that connects meanwhile still gets it
// (workerd under Miniflare reports no client disconnect, so a browser going
// away mid-call is covered by src/ui/tests.rs only); closeUi() ends the streams, the routes answer
// 410 and later runs' ui calls fail with a clear tool error. With the host's
// hasSession, the host decides which Sessions a browser may open; a restart
// while a claimed ui.execute waits never asks the browser again (the model
// is told its outcome is unknown). Fixture: tests/e2e/fixtures/ui-worker.mjs.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { SseParser } from "../../js/client.mjs";
import { connectBrowser } from "../../js/ui-browser.mjs";
import { TOKEN, execute, uniq, useWorker } from "./helpers.mjs";

const TOOL_TIMEOUT_MS = 3_000;
const h = useWorker({ fixture: "ui-worker", model: "echo", bindings: { SHIITAKE_TOOL_TIMEOUT_MS: TOOL_TIMEOUT_MS } });
const T = { timeout: 60_000 };

const bridge = (a, sid) => `http://localhost/agents/${a.id}/browser/sessions/${sid}/browser`;
// The host's transport for Agent `a`'s harness: its bearer token on every
// request, as a page's cookies would be.
const hostFetch = (a) => (url, init = {}) => a.h.mf.dispatchFetch(url, { ...init, headers: { ...init.headers, authorization: `Bearer ${TOKEN}` } });

const notebook = (log = []) => ({
  commands: () => [
    { name: "greet", description: "Greets someone in the notebook", inputSchema: { type: "object", properties: { who: { type: "string" } } } },
    { name: "fail", description: "Always fails" },
  ],
  async execute(name, input) {
    log.push({ name, input });
    if (name === "fail") throw new Error("the notebook refused");
    return { greeted: input.who, cell: log.length };
  },
});

async function fresh(harness = h, sid = "s") {
  const a = harness.agent();
  await a.createSession(sid);
  return a;
}

async function turn(a, tag, ...steps) {
  a.h.model.scriptFor(tag, ...steps.map((code) => execute(code)), { text: "done" });
  const settled = await a.settle("s", `r-${tag}`, `ui ${tag}`, { boundMs: 30_000 });
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  return toolMessages(a);
}

const toolMessages = async (a, sid = "s") => (await a.read(sid, { limit: 200 })).messages.filter((m) => m.role === "tool");

/** A hand-driven browser: the Session's event stream, its events in order. */
async function events(a, sid = "s") {
  const controller = new AbortController();
  const res = await hostFetch(a)(`${bridge(a, sid)}/events`, { signal: controller.signal });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type"), /text\/event-stream/);
  const reader = res.body.getReader();
  const parser = new SseParser();
  const queue = [];
  let ended = false;
  return {
    /** The next event, `null` once the stream ended, `undefined` when none came within `timeoutMs` (asserted unless `quiet`). */
    async next(timeoutMs = 10_000, { quiet = false } = {}) {
      const deadline = Date.now() + timeoutMs;
      while (queue.length === 0) {
        if (ended) return null;
        const left = deadline - Date.now();
        if (left <= 0 && quiet) return undefined;
        assert.ok(left > 0, "no event in time");
        const read = await Promise.race([reader.read(), new Promise((r) => setTimeout(() => r("timeout"), left))]);
        if (read === "timeout") continue;
        if (read.done) ended = true;
        else queue.push(...parser.push(read.value).map((e) => ({ event: e.event, data: JSON.parse(e.data) })));
      }
      return queue.shift();
    },
    close: () => controller.abort(),
  };
}

const post = async (a, route, body, sid = "s") => {
  const res = await hostFetch(a)(`${bridge(a, sid)}/${route}`, { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
};

test("the model discovers the App's commands and executes one; its result reaches the transcript", T, async () => {
  const a = await fresh();
  const log = [];
  const browser = connectBrowser({ baseUrl: bridge(a, "s"), whistle: notebook(log), fetch: hostFetch(a) });
  try {
    const tag = uniq("discover");
    const tools = await turn(
      a,
      tag,
      "return await ui.discover({});",
      `return await ui.execute({ name: "greet", input: { who: "Ada" } });`,
      `try { await ui.execute({ name: "fail" }); } catch (e) { return e.message; }`,
    );
    const discovered = JSON.parse(tools[0].text);
    assert.deepEqual(discovered.map((c) => c.name), ["greet", "fail"]);
    assert.equal(discovered[0].description, "Greets someone in the notebook");
    assert.deepEqual(discovered[1].inputSchema, { type: "object" });
    assert.deepEqual(JSON.parse(tools[1].text), { greeted: "Ada", cell: 1 });
    assert.match(tools[2].text, /ui\.execute: the App failed: the notebook refused/);
    assert.deepEqual(log.map((c) => c.name), ["greet", "fail"]);
    // The execute door describes the module to the model.
    const offered = h.model.requests(tag)[0].body.tools.find((t) => t.function.name === "execute").function.description;
    assert.match(offered, /ui\.discover/);
    assert.match(offered, /ui\.execute/);
  } finally {
    browser.close();
  }
  assert.equal(await browser.closed, "closed by the App");
});

test("close() ends the bridge at once, even over a host transport that drops the abort signal", T, async () => {
  const a = await fresh();
  // A host's own transport that never passes the signal on: its streams
  // end only when the bridge cancels them.
  const deaf = (url, { signal: _signal, ...init } = {}) => hostFetch(a)(url, init);
  const browser = connectBrowser({ baseUrl: bridge(a, "s"), whistle: notebook(), fetch: deaf });
  const tools = await turn(a, uniq("deaf"), "return await ui.discover({});");
  assert.deepEqual(JSON.parse(tools[0].text).map((c) => c.name), ["greet", "fail"], "connected");
  browser.close();
  const why = await Promise.race([browser.closed, new Promise((resolve) => setTimeout(() => resolve("still open 5 s after close()"), 5_000))]);
  assert.equal(why, "closed by the App");
});

test("only the result of the request's own claim is taken: every other post is refused with 409", T, async () => {
  const a = await fresh();
  const stream = await events(a);
  const tag = uniq("claims");
  h.model.scriptFor(tag, execute(`return await Promise.all([ui.execute({ name: "one" }), ui.execute({ name: "two", input: { n: 2 } })]);`), { text: "done" });
  const commandId = await a.admit("s", `r-${tag}`, `ui ${tag}`);
  const first = await stream.next();
  const second = await stream.next();
  assert.deepEqual([first.event, second.event], ["request", "request"]);
  const [one, two] = [first.data, second.data].sort((x, y) => x.name.localeCompare(y.name));
  assert.deepEqual({ ...two, requestId: undefined }, { requestId: undefined, operation: "execute", name: "two", input: { n: 2 } });

  let res = await post(a, "results", { requestId: one.requestId, claimId: "uic_none", result: 1 });
  assert.equal(res.status, 409);
  assert.equal(res.json.error.code, "ui_not_claimed");
  assert.match(res.json.error.message, /not claimed/);

  res = await post(a, "claims", { requestId: one.requestId });
  assert.equal(res.status, 200, JSON.stringify(res.json));
  const claimOne = res.json.claimId;
  res = await post(a, "claims", { requestId: one.requestId });
  assert.equal(res.status, 409);
  assert.equal(res.json.error.code, "ui_claimed");

  res = await post(a, "results", { requestId: two.requestId, claimId: claimOne, result: "stolen" });
  assert.equal(res.status, 409);
  assert.equal(res.json.error.code, "ui_other_request");
  assert.match(res.json.error.message, /another request/);

  res = await post(a, "claims", { requestId: two.requestId });
  assert.equal(res.status, 200);
  const claimTwo = res.json.claimId;
  res = await post(a, "results", { requestId: two.requestId, claimId: "uic_forged", result: "forged" });
  assert.equal(res.status, 409);
  assert.equal(res.json.error.code, "ui_wrong_claim");

  assert.equal((await post(a, "results", { requestId: one.requestId, claimId: claimOne, result: { ran: "one" } })).status, 200);
  assert.equal((await post(a, "results", { requestId: two.requestId, claimId: claimTwo, result: { ran: "two" } })).status, 200);
  res = await post(a, "results", { requestId: two.requestId, claimId: claimTwo, result: "again" });
  assert.equal(res.status, 404);
  assert.equal(res.json.error.code, "ui_request_not_found");

  const settled = await a.waitSettled("s", commandId);
  assert.equal(settled.terminal, "completed");
  const tool = (await a.read("s", { limit: 200 })).messages.filter((m) => m.role === "tool").at(-1);
  assert.deepEqual(JSON.parse(tool.text), [{ ran: "one" }, { ran: "two" }]);
  stream.close();
});

test("bad requests are refused naming the problem: unknown Session, method, body, size", T, async () => {
  const a = await fresh();
  let res = await hostFetch(a)(`${bridge(a, "nope")}/events`);
  assert.equal(res.status, 404);
  assert.equal((await res.json()).error.code, "session_not_found");
  res = await hostFetch(a)(`${bridge(a, "s")}/claims`);
  assert.equal(res.status, 405);
  await res.body.cancel();
  let posted = await post(a, "claims", "not json");
  assert.equal(posted.status, 400);
  posted = await post(a, "claims", { requestId: "r", more: 1 });
  assert.equal(posted.status, 400);
  assert.match(posted.json.error.message, /more/);
  posted = await post(a, "claims", { requestId: "x".repeat(2_000) });
  assert.equal(posted.status, 413);
  posted = await post(a, "claims", { requestId: "uir_unknown" });
  assert.equal(posted.status, 404);
  posted = await post(a, "claims", { requestId: "r" }, "bad id!");
  assert.equal(posted.status, 400);
});

test("deleting the Session ends its browser streams; it cannot be opened again", T, async () => {
  const a = await fresh();
  const stream = await events(a);
  const deleted = await a.api("DELETE", "/sessions/s");
  assert.equal(deleted.status, 204);
  assert.equal(await stream.next(), null, "the stream ended");
  const res = await hostFetch(a)(`${bridge(a, "s")}/events`);
  assert.equal(res.status, 404);
  await res.body.cancel();
});

test("a call a connected browser never claims ends at its share of the tool timeout, saying so", T, async () => {
  const a = await fresh();
  const stream = await events(a);
  const tag = uniq("unclaimed");
  const started = Date.now();
  const tools = await turn(a, tag, `try { return await ui.discover({}); } catch (e) { return e.message; }`);
  assert.match(tools[0].text, /ui\.discover: no browser claimed the call within 2700 ms/);
  assert.ok(Date.now() - started >= TOOL_TIMEOUT_MS * 0.9 - 500, "waited 90% of the tool timeout");
  stream.close();
});

describe("with no browser, under a 30 s tool timeout (a call would wait 27 s for one)", () => {
  const hw = useWorker({ fixture: "ui-worker", model: "echo", bindings: { SHIITAKE_TOOL_TIMEOUT_MS: 30_000 } });
  // UI_NO_BROWSER_MS (2 s) and then some: far below the 27 s wait.
  const FAST_MS = 10_000;
  const noBrowser = /^ui\.discover: no browser is connected to this Session$/;

  test("a call with no browser connected fails within about 2 s, saying no browser is connected", T, async () => {
    const a = await fresh(hw);
    const started = Date.now();
    const tools = await turn(a, uniq("nobody"), `try { return await ui.discover({}); } catch (e) { return e.message; }`);
    const took = Date.now() - started;
    assert.match(JSON.parse(tools[0].text), noBrowser);
    assert.ok(took < FAST_MS, `the turn took ${took} ms`);
  });

  test("a browser that connects 1 s into the wait is sent the request, and the call succeeds", T, async () => {
    const a = await fresh(hw);
    const tag = uniq("late");
    hw.model.scriptFor(tag, execute(`return await ui.execute({ name: "greet", input: { who: "Grace" } });`), { text: "done" });
    const commandId = await a.admit("s", `r-${tag}`, `ui ${tag}`);
    // The model was asked: the call starts a few ms later, with no browser.
    while (hw.model.requests(tag).length === 0) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 1_000));
    const log = [];
    const browser = connectBrowser({ baseUrl: bridge(a, "s"), whistle: notebook(log), fetch: hostFetch(a) });
    try {
      const settled = await a.waitSettled("s", commandId, { boundMs: 30_000 });
      assert.equal(settled.terminal, "completed");
      const [tool] = await toolMessages(a);
      assert.deepEqual(JSON.parse(tool.text), { greeted: "Grace", cell: 1 });
      assert.deepEqual(log.map((c) => c.name), ["greet"]);
    } finally {
      browser.close();
    }
  });
});

test("closeUi ends every stream; the routes answer 410 and later runs fail to borrow with a clear tool error", T, async () => {
  const a = await fresh();
  const browser = connectBrowser({ baseUrl: bridge(a, "s"), whistle: notebook(), fetch: hostFetch(a) });
  const stream = await events(a);
  const closed = await h.api("POST", `/direct/${a.id}/host/close-ui`);
  assert.equal(closed.status, 200);
  assert.equal(await stream.next(), null, "the stream ended");
  assert.match(await browser.closed, /^HTTP 410: .*ui_closed/);
  const res = await hostFetch(a)(`${bridge(a, "s")}/events`);
  assert.equal(res.status, 410);
  const body = await res.json();
  assert.equal(body.error.code, "ui_closed");
  assert.match(body.error.message, /the App was closed/);
  const posted = await post(a, "claims", { requestId: "uir_x" });
  assert.equal(posted.status, 410);
  const tools = await turn(a, uniq("closed"), `try { return await ui.execute({ name: "greet" }); } catch (e) { return e.message; }`);
  assert.match(tools[0].text, /ui\.execute: the browser bridge is closed \(the App was closed\)/);
});

describe("with the host's hasSession, across a restart", () => {
  const hr = useWorker({ fixture: "ui-worker", model: "echo", persist: true, bindings: { UI_HAS_SESSION: "host", SHIITAKE_TOOL_TIMEOUT_MS: 20_000 } });

  test("the host's hasSession decides which Sessions a browser may open", T, async () => {
    const a = await fresh(hr);
    const stored = await hostFetch(a)(`${bridge(a, "s")}/events`);
    assert.equal(stored.status, 404, "stored, but not one of the App's Sessions");
    assert.equal((await stored.json()).error.code, "session_not_found");
    const stream = await events(a, "app-unstored");
    stream.close();
  });

  test("a restart while a claimed ui.execute waits never asks the browser again: its outcome is unknown", T, async () => {
    const sid = "app-1";
    const a = await fresh(hr, sid);
    const stream = await events(a, sid);
    const tag = uniq("restart");
    hr.model.scriptFor(tag, execute(`return await ui.execute({ name: "once" });`), { text: "checked" });
    const commandId = await a.admit(sid, `r-${tag}`, `ui ${tag}`);
    const { event, data } = await stream.next();
    assert.equal(event, "request");
    assert.equal((await post(a, "claims", { requestId: data.requestId }, sid)).status, 200);
    stream.close();

    await hr.restart();

    const settled = await a.waitSettled(sid, commandId, { boundMs: 30_000 });
    assert.equal(settled.terminal, "completed");
    const tools = await toolMessages(a, sid);
    assert.equal(tools.length, 1, "one outcome for the one call");
    assert.match(tools[0].text, /^outcome unknown/);
    // The bridge was live state: the result of the old claim finds nothing,
    // and a browser connecting now is asked nothing.
    const late = await post(a, "results", { requestId: data.requestId, claimId: "uic_old", result: 1 }, sid);
    assert.equal(late.status, 404);
    const after = await events(a, sid);
    assert.equal(await after.next(1_000, { quiet: true }), undefined, "nothing asked again");
    after.close();
  });
});
