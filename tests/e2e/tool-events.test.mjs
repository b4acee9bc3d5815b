// Live tool events and tool images end to end. While a tool runs, the watch
// carries `tool` frames: `started`, `progress` (the tool's live counters in
// `result.data`, paced to one per 100 ms per call, the newest kept), then
// `ended` just before the call's `tool` message; for a direct tool and for
// an operation called inside `execute` (reported on the execute call). A
// tool's images reach the model as image content in its next request, in
// both wire formats (the scripted model server checks each as the provider
// would), and are kept in the `tool` message. An MCP server built with the
// official SDK (tests/support/mcp-server.mjs, `live`) does both too: its
// `notifications/progress` on a call's token become progress frames as its
// response stream arrives, its image content images; a call whose stream
// the server closes is resumed (GET, Last-Event-ID) and its progress and
// result still arrive. Fixture:
// tests/e2e/fixtures/tool-events-worker.mjs.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startMcpServer } from "../support/mcp-server.mjs";
import { PNG_1X1, execute, kind, uniq, useWorker } from "./helpers.mjs";

let mcp;
// Filled before the Worker below starts (hooks run in order).
const bindings = {};
before(async () => {
  // Resumable: every stream primed with an event id (SEP-1699), and `outlive`.
  mcp = await startMcpServer({ mode: "sse", live: true, resumable: true });
  bindings.MCP_SERVERS_JSON = JSON.stringify([{ name: "live", url: mcp.url, direct: true }]);
});
after(() => mcp?.close());
const openai = useWorker({ fixture: "tool-events-worker", model: "echo", bindings });
const anthropic = useWorker({ fixture: "tool-events-worker", model: { provider: "anthropic", fallback: "echo" } });

const T = { timeout: 30_000 };
const call = (name, args, id) => ({ toolCalls: [{ id, name, arguments: args }] });

/** Runs one scripted turn under a watch; answers the frames seen up to its settlement, the transcript and the model's requests. */
async function watched(h, name, ...script) {
  const tag = uniq(name);
  h.model.scriptFor(tag, ...script);
  const { a, sid } = await h.session();
  const watch = await a.watch(sid, { timeoutMs: 20_000 });
  try {
    await watch.until((ev) => ev.event === "snapshot");
    const commandId = await a.admit(sid, "r1", `go ${tag}`);
    const events = await watch.until((ev) => kind(ev) === "settled" && ev.data.settlement.commandId === commandId);
    const frames = events.filter((ev) => ev.event === "frame").map((ev) => ev.data);
    const messages = (await a.read(sid, { limit: 200 })).messages;
    return { commandId, frames, messages, settlement: frames.at(-1).settlement, requests: h.model.requests(tag) };
  } finally {
    await watch.close();
  }
}

/** The `tool` frames of call `id` and its `tool` message frame, in the order they came. */
const lifecycle = (frames, id) =>
  frames.filter((f) => (f.type === "tool" && f.toolCallId === id) || (f.type === "message" && f.message.toolCallId === id));

/** Asserts started, at least one progress, ended, message; answers the progress data in order. */
function assertLifecycle(frames, { commandId, id, name, isError = false }) {
  const seen = lifecycle(frames, id);
  const shape = seen.map((f) => (f.type === "tool" ? f.phase : "message"));
  assert.equal(shape[0], "started", shape.join(","));
  assert.deepEqual(shape.slice(-2), ["ended", "message"], shape.join(","));
  assert.ok(shape.slice(1, -2).every((p) => p === "progress") && shape.length > 3, shape.join(","));
  for (const f of seen.filter((f) => f.type === "tool")) {
    assert.equal(f.commandId, commandId);
    assert.equal(f.name, name);
  }
  assert.deepEqual(seen.at(-2), { type: "tool", commandId, toolCallId: id, name, phase: "ended", isError });
  return seen.filter((f) => f.phase === "progress").map((f) => f.result.data);
}

test("a direct tool's run is watched live: started, paced progress with its counters, ended, then its message", T, async () => {
  const t = await watched(openai, "direct", call("count", { steps: 8, everyMs: 40 }, "count_1"), { text: "counted" });
  assert.equal(t.settlement.terminal, "completed");
  const progress = assertLifecycle(t.frames, { commandId: t.commandId, id: "count_1", name: "count" });
  // Reports every 40 ms, published at most every 100 ms: fewer frames than
  // reports, counters only growing, the newest (the last report) last.
  assert.ok(progress.length < 8, JSON.stringify(progress));
  assert.deepEqual(progress.at(-1), { lines: 8, bytes: 80 });
  const lines = progress.map((d) => d.lines);
  assert.deepEqual(lines, [...lines].sort((x, y) => x - y), "in order");
  // The frames are live only: the transcript holds the call's outcome.
  const tool = t.messages.find((m) => m.role === "tool");
  assert.deepEqual([tool.toolCallId, JSON.parse(tool.text), tool.data], ["count_1", { lines: 8 }, { counted: 8 }]);
  assert.ok(!JSON.stringify(t.messages).includes('"bytes"'), "no progress report is stored");
});

test("an operation inside execute reports on the execute call", T, async () => {
  const t = await watched(openai, "execute", execute("return await work.count({ steps: 4 });", "exec_1"), { text: "done" });
  assert.equal(t.settlement.terminal, "completed");
  const progress = assertLifecycle(t.frames, { commandId: t.commandId, id: "exec_1", name: "execute" });
  assert.deepEqual(progress.at(-1), { lines: 4, bytes: 40 });
});

test("progress past 4096 bytes is refused to the tool, and a call answered without running has no tool frames", T, async () => {
  const t = await watched(openai, "loud", { toolCalls: [{ id: "loud_1", name: "loud", arguments: {} }, { id: "none_1", name: "no_such_tool", arguments: {} }] }, { text: "ok" });
  const tools = t.messages.filter((m) => m.role === "tool");
  assert.match(tools[0].text, /^"TypeError: progress: the data is 50\d\d bytes of JSON; at most 4096"$/);
  assert.deepEqual(lifecycle(t.frames, "loud_1").map((f) => f.phase ?? f.type), ["started", "ended", "message"]);
  assert.deepEqual(lifecycle(t.frames, "none_1").map((f) => f.phase ?? f.type), ["message"]);
});

test("a tool's images reach the next Chat Completions request after the results, and stay in its message", T, async () => {
  const t = await watched(openai, "snap", call("snap", { count: 2 }, "snap_1"), { text: "nice pictures" });
  assert.equal(t.settlement.terminal, "completed");
  const tool = t.messages.find((m) => m.role === "tool");
  const image = { mediaType: "image/png", data: PNG_1X1 };
  assert.deepEqual([tool.text, tool.images, tool.data], ['"took 2 picture(s)"', [image, image], { caption: "2 picture(s), 1x1" }]);
  assert.equal(t.requests.length, 2);
  const next = t.requests[1];
  assert.equal(next.outcome === "invalid" ? next.error : null, null, "the model server took the request");
  const tail = next.body.messages.slice(-2);
  const url = { type: "image_url", image_url: { url: `data:image/png;base64,${PNG_1X1}` } };
  assert.deepEqual(tail, [
    { role: "tool", tool_call_id: "snap_1", content: '"took 2 picture(s)"' },
    { role: "user", content: [{ type: "text", text: "The images tool call snap_1 returned:" }, url, url] },
  ]);
  assert.ok(!JSON.stringify(next.body).includes("caption"), "display data never reaches the model");
});

test("a tool's images reach the next Messages request inside its tool_result", T, async () => {
  const t = await watched(anthropic, "snap-a", call("snap", { count: 1 }, "toolu_snap"), { text: "nice picture" });
  assert.equal(t.settlement.terminal, "completed");
  const next = t.requests[1];
  assert.equal(next.outcome === "invalid" ? next.error : null, null, "the model server took the request");
  assert.deepEqual(next.body.messages.at(-1), {
    role: "user",
    content: [
      {
        type: "tool_result",
        tool_use_id: "toolu_snap",
        content: [
          { type: "text", text: '"took 1 picture(s)"' },
          { type: "image", source: { type: "base64", media_type: "image/png", data: PNG_1X1 } },
        ],
        // The last message's last block: a prompt-cache breakpoint.
        cache_control: { type: "ephemeral" },
      },
    ],
  });
});

test("more than 4 images make an error result; an execute run carries its calls' images, the ones past the bound left out and said", T, async () => {
  const t = await watched(
    openai,
    "snaps",
    call("snap", { count: 5 }, "snap_5"),
    execute("await work.snap({ count: 3 }); await work.snap({ count: 3 }); return 'six';", "exec_snaps"),
    { text: "ok" },
  );
  const [five, run] = t.messages.filter((m) => m.role === "tool");
  assert.equal(five.isError, true);
  assert.match(five.text, /images: at most 4 per tool result, got 5/);
  assert.equal(five.images, undefined);
  assert.equal(run.images.length, 4);
  assert.match(run.text, /^"six"\n\[2 image\(s\) the calls returned were left out: a result carries at most 4 images/);
  const last = t.requests.at(-1).body.messages.at(-1);
  assert.equal(last.role, "user");
  assert.equal(last.content.filter((p) => p.type === "image_url").length, 4);
});

test("an MCP server's progress notifications are progress frames as they arrive, and its image content reaches the model", T, async () => {
  const t = await watched(openai, "mcp", call("count_slowly", { steps: 4, everyMs: 150 }, "mcp_count"), call("picture", { count: 1 }, "mcp_snap"), { text: "ok" });
  assert.equal(t.settlement.terminal, "completed");
  const progress = assertLifecycle(t.frames, { commandId: t.commandId, id: "mcp_count", name: "count_slowly" });
  // Reported 150 ms apart and read as the stream arrives, so (nearly) each
  // is its own frame; read only at the end, the first and the last would be.
  assert.ok(progress.length >= 3, JSON.stringify(progress));
  assert.deepEqual(progress.at(-1), { progress: 4, total: 4 });
  assert.deepEqual(progress.map((p) => p.total), progress.map(() => 4));
  const [, snap] = t.messages.filter((m) => m.role === "tool");
  // The model sees the image itself; the result's block loses its data.
  assert.deepEqual(snap.images, [{ mediaType: "image/png", data: PNG_1X1 }]);
  assert.deepEqual(JSON.parse(snap.text), { isError: false, content: [{ type: "text", text: "1 picture(s)" }, { type: "image", mimeType: "image/png" }] });
  const url = { type: "image_url", image_url: { url: `data:image/png;base64,${PNG_1X1}` } };
  assert.deepEqual(t.requests.at(-1).body.messages.at(-1), { role: "user", content: [{ type: "text", text: "The images tool call mcp_snap returned:" }, url] });
});

test("an MCP call whose stream the server closes is resumed: its progress is a frame, its result the tool's", T, async () => {
  const t = await watched(openai, "mcp-resume", call("outlive", {}, "mcp_outlive"), { text: "ok" });
  assert.equal(t.settlement.terminal, "completed");
  const progress = assertLifecycle(t.frames, { commandId: t.commandId, id: "mcp_outlive", name: "outlive" });
  assert.deepEqual(progress, [{ progress: 1, total: 1 }]);
  const tool = t.messages.find((m) => m.role === "tool");
  assert.deepEqual(JSON.parse(tool.text), { isError: false, content: [{ type: "text", text: "outlived" }] });
  const gets = mcp.requests().filter((r) => r.method === "GET");
  assert.equal(gets.length, 1);
  assert.ok(gets[0].headers["last-event-id"]);
});
