// Activation resources (fixture tests/e2e/fixtures/activate-worker.mjs) in a
// real SQLite-backed Durable Object: each running extension's `activate`
// runs once when the object's runtime comes up, its disposer (sync or
// async, awaited, newest activation first, a throwing one logged and the
// rest still run) when the runtime closes; a new revision deployed (the
// Worker restarted with another `lamp` version) is activated with its own
// resource in the new instance, and closes the same way; an `activate` that
// throws stops its extension with the reason. A settled hook's
// `context.send` lands once, in the Session it names, after the settlement
// it was staged with. A trap recovery replacing the instance disposes its
// resources once and the new instance activates its own.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { useWorker } from "./helpers.mjs";

const T = { timeout: 60_000 };

describe("extension activation", () => {
  const h = useWorker({ fixture: "activate-worker", model: false, persist: true });
  const host = async (a, rel) => {
    const res = await h.api("GET", `/direct/${a.id}/host/${rel}`);
    assert.equal(res.status, 200, res.text);
    return res.json;
  };

  test("activate when the runtime comes up, dispose when it closes; a new revision activates its own; a throwing activate stops", T, async () => {
    const a = h.agent();
    assert.deepEqual(await host(a, "events"), [], "nothing activates before the runtime comes up");
    const statuses = await host(a, "statuses");
    const status = (id) => statuses.find((s) => s.id === id);
    assert.deepEqual(await host(a, "events"), ["activate lamp@1.0.0", "activate bulb"], "each running extension, once, in roster order");
    assert.equal(status("lamp").stopped, null);
    assert.match(status("fuse").stopped.reason, /the fuse is blown/, "a throwing activate stops its extension");
    // More requests to the same instance activate nothing more.
    await host(a, "statuses");
    assert.equal((await host(a, "events")).length, 2);
    assert.deepEqual(
      await host(a, "close"),
      ["activate lamp@1.0.0", "activate bulb", "dispose bulb", "dispose lamp@1.0.0"],
      "close awaits the disposers, newest first; bulb's throws and lamp's still runs",
    );
    const closed = await a.api("GET", "/extensions");
    assert.equal(closed.status, 503, "a closed runtime serves nothing");

    // A new revision of lamp, deployed: the restarted Worker's instance
    // activates it (the old instance's disposers ran at its close).
    const before = status("lamp").revision;
    h.bindings.LAMP_VERSION = "2.0.0";
    await h.restart();
    const after = await host(a, "statuses");
    assert.notEqual(after.find((s) => s.id === "lamp").revision, before, "lamp has a new revision");
    assert.deepEqual(await host(a, "events"), ["activate lamp@2.0.0", "activate bulb"]);
    assert.deepEqual(await host(a, "close"), ["activate lamp@2.0.0", "activate bulb", "dispose bulb", "dispose lamp@2.0.0"]);
  });
});

describe("a settled hook's send", () => {
  const h = useWorker({ fixture: "activate-worker", model: "echo" });

  test("lands once, after the settlement it was staged with", T, async () => {
    const { a, sid } = await h.session();
    const settled = await a.settle(sid, "r1", "[relay] pass it on");
    assert.equal(settled.terminal, "completed");
    const target = `${sid}-relay`;
    const text = `relayed ${settled.commandId}`;
    const deadline = Date.now() + 20_000;
    let read;
    for (;;) {
      const res = await a.readRaw(target);
      read = res.status === 200 ? res.json : null;
      if (read !== null && read.pending.length === 0 && read.running === null && read.messages.length >= 2) break;
      assert.ok(Date.now() < deadline, `the relayed prompt ran: ${JSON.stringify(read)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const users = read.messages.filter((m) => m.role === "user");
    assert.deepEqual(users.map((m) => m.text ?? m.content), [text], "admitted once, with its text");
    // The relayed settlement itself does not relay (its answer lacks the marker).
    const statuses = (await a.api("GET", "/extensions")).json;
    assert.equal(statuses.extensions.find((e) => e.id === "relay").stopped, null);
  });
});

describe("activation across a trap recovery", () => {
  const PANIC_MARKER = "TRAP-HERE";
  const h = useWorker({ fixture: "activate-worker", model: "echo", bindings: { SHIITAKE_FAULT_PANIC_MARKER: PANIC_MARKER, SHIITAKE_RETRY_BASE_MS: 50 } });

  test("the reset's replaced instance disposes its resources once, and the new one activates its own", T, async () => {
    const { a, sid } = await h.session();
    const events = async () => (await h.api("GET", `/direct/${a.id}/host/events`)).json;
    assert.deepEqual(await events(), ["activate lamp@1.0.0", "activate bulb"]);
    h.model.scriptFor("trap-activate", { chunks: ["so far ", `then ${PANIC_MARKER}`] }, { text: "answered after the trap" });
    const settled = await a.settle(sid, "r1", "trap-activate", { boundMs: 20_000 });
    assert.equal(settled.terminal, "completed", JSON.stringify(settled));
    const deadline = Date.now() + 10_000;
    let seen = await events();
    while (seen.length < 6 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      seen = await events();
    }
    // Disposers start (newest first) before the new core is built; an
    // async one may end after the new activations.
    assert.deepEqual(seen.slice(0, 3), ["activate lamp@1.0.0", "activate bulb", "dispose bulb"], JSON.stringify(seen));
    assert.deepEqual([...seen.slice(3)].sort(), ["activate bulb", "activate lamp@1.0.0", "dispose lamp@1.0.0"], JSON.stringify(seen));
  });
});
