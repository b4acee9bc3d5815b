// The browser bridge in a real browser: Debian's headless Chromium
// (/usr/bin/chromium, driven by playwright-core; no browser download) opens a
// page that bundles `shiitake/ui/browser` with esbuild and calls
// connectBrowser over its own origin: a tiny node:http server serves the page
// and proxies /agents/* to Miniflare (the host's bearer token added there, as
// a host's cookie would be). The model (the scripted OpenAI-wire server)
// discovers the page's commands and executes them through the real run loop;
// the page's command changes its DOM and its result reaches the transcript;
// a result posted with a claim that is not the request's is refused with 409;
// after closeUi() the page's bridge ends on 410, its own requests answer 410,
// and a run's ui call fails with a clear tool error. scripts/test.sh installs
// chromium when it is missing; this file skips only when it still cannot be
// found. Fixture: tests/e2e/fixtures/ui-worker.mjs.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import * as esbuild from "esbuild";
import { ROOT, TOKEN, execute, uniq, useWorker } from "./helpers.mjs";

const CHROMIUM = process.env.SHIITAKE_CHROMIUM ?? "/usr/bin/chromium";
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const skip = existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM} (scripts/test.sh installs Debian's chromium with apt-get)`;
const T = { timeout: 120_000, skip };

const h = useWorker({ fixture: "ui-worker", model: "echo", bindings: { SHIITAKE_TOOL_TIMEOUT_MS: 20_000 } });

const PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>notebook</title></head>
<body><ol id="cells"></ol>
<script type="module">
import { connectBrowser } from "/ui-browser.js";
const params = new URLSearchParams(location.search);
const base = "/agents/" + params.get("agent") + "/browser/sessions/" + params.get("session") + "/browser";
let release;
const released = new Promise((resolve) => (release = resolve));
window.release = release;
window.claims = [];
window.errors = [];
const whistle = {
  commands: () => [
    { name: "addCell", description: "Appends a cell to the notebook", inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] } },
    { name: "slow", description: "Waits until the test releases it" },
  ],
  async execute(name, input) {
    if (name === "addCell") {
      const li = document.createElement("li");
      li.textContent = input.text;
      document.getElementById("cells").append(li);
      return { cells: document.querySelectorAll("#cells li").length, text: li.textContent, chrome: navigator.userAgent.includes("Chrome") };
    }
    if (name === "slow") {
      await released;
      return { slow: "released" };
    }
    throw new Error("no command " + name);
  },
};
// The page's transport records its claims, so the test can post a result
// with a claim that is not the request's.
const recording = async (url, init) => {
  const res = await fetch(url, init);
  if (String(url).endsWith("/claims") && res.status === 200) window.claims.push(await res.clone().json());
  return res;
};
window.base = base;
window.bridge = connectBrowser({ baseUrl: base, whistle, fetch: recording, onError: (e) => window.errors.push(String(e)) });
window.bridge.closed.then((why) => (window.closedWhy = why));
window.ready = true;
</script></body></html>`;

let server;
let origin;
let context;
let userDataDir;

before(async () => {
  if (skip) return;
  // The browser side, bundled for the browser: no wasm, no Node-only import.
  const bundle = await esbuild.build({
    entryPoints: [path.join(ROOT, "js/ui-browser.mjs")],
    bundle: true,
    format: "esm",
    platform: "browser",
    write: false,
  });
  const script = bundle.outputFiles[0].text;
  server = createServer(async (req, res) => {
    try {
      const url = new URL(req.url, "http://page");
      if (url.pathname === "/ui-browser.js") return res.writeHead(200, { "content-type": "text/javascript" }).end(script);
      if (url.pathname === "/app") return res.writeHead(200, { "content-type": "text/html" }).end(PAGE);
      if (!url.pathname.startsWith("/agents/")) return res.writeHead(404).end();
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      const controller = new AbortController();
      res.on("close", () => controller.abort());
      const answer = await h.mf.dispatchFetch(`http://localhost${req.url}`, {
        method: req.method,
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": req.headers["content-type"] ?? "application/json" },
        body: chunks.length > 0 ? Buffer.concat(chunks) : undefined,
        signal: controller.signal,
      });
      res.writeHead(answer.status, { "content-type": answer.headers.get("content-type") ?? "text/plain", "cache-control": "no-cache" });
      res.flushHeaders();
      if (answer.body) for await (const chunk of answer.body) res.write(chunk);
      res.end();
    } catch (error) {
      if (!res.headersSent) res.writeHead(502);
      res.end(String(error));
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  origin = `http://127.0.0.1:${server.address().port}`;
  const { chromium } = await import("playwright-core");
  userDataDir = await mkdtemp(path.join(tmpdir(), "shiitake-chromium-"));
  context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args: FLAGS });
});

after(async () => {
  await context?.close();
  server?.closeAllConnections();
  await new Promise((resolve) => (server ? server.close(resolve) : resolve()));
  if (userDataDir) await rm(userDataDir, { recursive: true, force: true });
});

async function openPage(a, sid = "s") {
  const page = await context.newPage();
  await page.goto(`${origin}/app?agent=${encodeURIComponent(a.id)}&session=${sid}`);
  await page.waitForFunction(() => window.ready === true);
  return page;
}

const toolTexts = async (a) => (await a.read("s", { limit: 200 })).messages.filter((m) => m.role === "tool").map((m) => m.text);

test("Chromium: the model discovers the page's commands and runs them; a wrong claim is refused; closeUi answers 410", T, async () => {
  const a = h.agent();
  await a.createSession("s");
  const page = await openPage(a);

  const tag = uniq("chromium");
  h.model.scriptFor(
    tag,
    execute("return await ui.discover({});"),
    execute(`return await ui.execute({ name: "addCell", input: { text: "written by the model" } });`),
    execute(`return await ui.execute({ name: "slow" });`),
    { text: "done" },
  );
  const commandId = await a.admit("s", `r-${tag}`, `chromium ${tag}`);

  // While the page runs `slow`, a result with a claim that is not the
  // request's is refused from the page's own origin.
  await page.waitForFunction(() => window.claims.length === 3, null, { timeout: 30_000 });
  const refused = await page.evaluate(async () => {
    const { requestId } = window.claims[2];
    const res = await fetch(`${window.base}/results`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ requestId, claimId: window.claims[0].claimId, result: "forged" }),
    });
    return { status: res.status, body: await res.json() };
  });
  assert.equal(refused.status, 409, JSON.stringify(refused));
  assert.equal(refused.body.error.code, "ui_wrong_claim");
  await page.evaluate(() => window.release());

  const settled = await a.waitSettled("s", commandId, { boundMs: 30_000 });
  assert.equal(settled.terminal, "completed", JSON.stringify(settled));
  const [discovered, added, slow] = (await toolTexts(a)).map((t) => JSON.parse(t));
  assert.deepEqual(discovered.map((c) => c.name), ["addCell", "slow"]);
  assert.deepEqual(discovered[0].inputSchema.required, ["text"]);
  assert.deepEqual(added, { cells: 1, text: "written by the model", chrome: true });
  assert.deepEqual(slow, { slow: "released" });
  assert.deepEqual(await page.locator("#cells li").allTextContents(), ["written by the model"]);
  assert.deepEqual(await page.evaluate(() => window.errors), []);

  // The host closes the bridge: the page's stream ends on 410, its own
  // requests answer 410, and a later run's ui call fails with a tool error.
  const closed = await h.api("POST", `/direct/${a.id}/host/close-ui`);
  assert.equal(closed.status, 200);
  await page.waitForFunction(() => window.closedWhy !== undefined, null, { timeout: 30_000 });
  assert.match(await page.evaluate(() => window.closedWhy), /^HTTP 410: .*ui_closed/);
  const after = await page.evaluate(async () => {
    const events = await fetch(`${window.base}/events`);
    const claim = await fetch(`${window.base}/claims`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ requestId: "uir_x" }) });
    return [events.status, claim.status, (await claim.json()).error.code];
  });
  assert.deepEqual(after, [410, 410, "ui_closed"]);
  const late = uniq("closed");
  h.model.scriptFor(late, execute(`try { return await ui.execute({ name: "addCell", input: { text: "x" } }); } catch (e) { return e.message; }`), { text: "done" });
  assert.equal((await a.settle("s", `r-${late}`, `chromium ${late}`, { boundMs: 30_000 })).terminal, "completed");
  assert.match((await toolTexts(a)).at(-1), /ui\.execute: the browser bridge is closed \(the App was closed\)/);
  assert.deepEqual(await page.locator("#cells li").allTextContents(), ["written by the model"], "nothing ran after the close");
  await page.close();
});
