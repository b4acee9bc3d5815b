// Activation resources (fixture tests/e2e/fixtures/activate-worker.mjs) in a
// real SQLite-backed Durable Object: each running extension's `activate`
// runs once when the object's runtime comes up, its disposer (sync or
// async, awaited, newest activation first, a throwing one logged and the
// rest still run) when the runtime closes; a new revision deployed (the
// Worker restarted with another `lamp` version) is activated with its own
// resource in the new instance, and closes the same way; an `activate` that
// throws stops its extension with the reason.
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
