// Host-only grant delivery (seed: "the host owns every grant decision and
// delivers it down as versioned data"): the Durable Object's RPC method and
// the cold-storage helper, the version rules, and that no session route
// reaches either.
import assert from "node:assert/strict";
import { test } from "node:test";
import { expectStatus, useWorker } from "./helpers.mjs";

const h = useWorker({ fixture: "host-fetch-worker", model: "echo" });

let n = 0;
const fresh = () => `grants-${n++}`;

test("delivery over RPC: versions never move back, the same version replaces, and it persists across a restart of the core", async () => {
  const agent = fresh();
  const deliver = (body) => h.api("POST", `/host-grants/${agent}/s`, body);
  const read = async () => (await h.api("GET", `/host-grants/${agent}/s`)).json;
  assert.equal(await read(), null);
  assert.deepEqual((await deliver({ version: 2, grants: { "mcp.notes": "read" } })).json, { delivered: "stored" });
  assert.deepEqual((await deliver({ version: 2, grants: { "mcp.notes": "read" } })).json, { delivered: "unchanged" });
  const older = await deliver({ version: 1, grants: { "mcp.notes": "write" } });
  assert.equal(older.status, 409);
  assert.equal(older.json.error.code, "grant_version_refused");
  assert.deepEqual((await deliver({ version: 2, grants: { files: "write" } })).json, { delivered: "replaced" });
  assert.deepEqual(await read(), { version: 2, grants: { files: "write" } });
  const bad = await deliver({ version: 3, grants: { files: "admin" } });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.code, "invalid_request");
});

test("the cold helper writes the same rows under the same rules", async () => {
  const agent = fresh();
  const cold = (body) => h.api("POST", `/direct/${agent}/host/cold-grants/s`, body);
  assert.deepEqual((await cold({ version: 5, grants: { files: "read" } })).json, { delivered: "stored" });
  const older = await cold({ version: 4, grants: {} });
  assert.equal(older.status, 409);
  assert.equal(older.json.error.code, "grant_version_refused");
  // The running core reads what the cold helper stored.
  assert.deepEqual((await h.api("GET", `/host-grants/${agent}/s`)).json, { version: 5, grants: { files: "read" } });
  const rpcOlder = await h.api("POST", `/host-grants/${agent}/s`, { version: 4, grants: {} });
  assert.equal(rpcOlder.status, 409);
});

test("no session route delivers grants", async () => {
  const agent = fresh();
  expectStatus(await h.api("POST", `/agents/${agent}/sessions`, { sessionId: "s" }), 201);
  for (const p of [`/agents/${agent}/grants`, `/agents/${agent}/sessions/s/grants`]) {
    const res = await h.api("POST", p, { version: 1, grants: { files: "write" } });
    assert.equal(res.status, 404, `${p} must not exist`);
  }
  assert.equal((await h.api("GET", `/host-grants/${agent}/s`)).json, null);
});
