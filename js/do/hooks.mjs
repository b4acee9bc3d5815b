// The host hook adapters: each host hook of ShiitakeDO (tools(),
// extensions(), hostJobs(), fleet(), models()) turned into the object the
// core calls (src/host/*.rs), checked first by js/do/config.mjs. They
// carry calls both ways and bound what crosses; nothing here decides.
import { runGuest } from "../execute.mjs";
import { embeddedSandboxFactory } from "../sandbox/registry.mjs";
import { WORKSPACE } from "../files.mjs";
import { readBounded } from "../bounded.mjs";
import { manifestOf, normalizeRoster, runHook } from "../extensions.mjs";
import { EXTENSION_DISPOSE_TIMEOUT_MS, FILE_BYTES_MAX, FLEET_BODY_BYTES_MAX, MCP_RESPONSE_BYTES_MAX, MODEL_LAST_SWITCH_TIMEOUT_MS } from "../limits.mjs";
import { checkComputers, checkDecision, checkFleet, checkHostJobs, checkModels, checkTools } from "./config.mjs";

// The host's announcements of a change of its Computer list, by object:
// `count` (ShiitakeDO#computersChanged, and each list an async iterable
// `tools().computers` yields) moves the digest the core compares, so the
// next tool offer describes the list again; `listed` says whether the open
// core's tools() list Computers; `stop` ends the open core's subscription.
// Live state: a new instance has captured no Computer, so its first offer
// describes the list anyway.
const announcements = new WeakMap();
const announcing = (object) => {
  let state = announcements.get(object);
  if (state === undefined) announcements.set(object, (state = { count: 0, listed: undefined, stop: undefined }));
  return state;
};

// `ShiitakeDO#computersChanged`: the captured Computer modules are stale.
export function announceComputers(object, args) {
  if (args.length > 0) {
    throw new TypeError("computersChanged() takes no argument: tools().computers answers the list (a function, or an async iterable of lists)");
  }
  const state = announcing(object);
  if (state.listed === false) throw new TypeError("computersChanged(): tools() lists no Computers (tools().computers is not set)");
  state.count += 1;
}

// Consumes the host's async iterable of Computer lists for one core, one
// list at a time in order, holding only the latest accepted one (`onList`);
// a list refused is reported and the previous one stays. Ends with the
// iterable, or when the next core subscribes (its iterator's `return`).
function subscribeComputers(object, iterable, onList, report) {
  const state = announcing(object);
  state.stop?.();
  let stopped = false;
  let iterator;
  const stop = () => {
    stopped = true;
    try {
      iterator?.return?.()?.catch?.(() => {});
    } catch {
      // A host iterator whose return throws: it is dropped either way.
    }
  };
  state.stop = stop;
  (async () => {
    iterator = iterable[Symbol.asyncIterator]();
    for (;;) {
      const { value, done } = await iterator.next();
      if (done || stopped) return;
      const refused = checkComputers(value);
      if (refused !== undefined) report(`a list it yielded is refused, the previous one stays: ${refused}`);
      else {
        onList(value);
        state.count += 1;
      }
      // One list per macrotask: an iterable that never waits cannot starve the object.
      await new Promise((resolve) => setTimeout(resolve, 0));
      if (stopped) return;
    }
  })().catch((error) => {
    if (!stopped) report(`its iterable failed, the last list stays: ${String(error?.message ?? error)}`);
  });
}

// The Agent id of the object holding the fleet's directory (reserved;
// src/fleet/directory.rs DIRECTORY_AGENT_ID).
export const DIRECTORY_AGENT_ID = "shiitake.directory";

// How long the host's acceptMail may decide one mail: well within the
// sender's FLEET_CALL_TIMEOUT_MS (10 s), so its delivery gets an answer.
const ACCEPT_MAIL_TIMEOUT_MS = 5_000;

// One extension command through the core; the result parsed.
export function runCommand(core, extensionId, command, { sessionId, requestId, input } = {}) {
  const text = core.extensionCommand(extensionId, command, sessionId, requestId, JSON.stringify(input ?? null));
  return JSON.parse(text);
}

// The extension host the core calls (src/host/extensions.rs): the roster as
// manifests, and one synchronous callback per call. Nothing here decides.
export function extensionHost(object) {
  let entries;
  try {
    const roster = object.extensions();
    if (roster === undefined || roster === null) return undefined;
    entries = normalizeRoster(roster);
  } catch (error) {
    const message = String(error?.message ?? error);
    return { manifests: () => JSON.stringify({ error: message }), call: () => JSON.stringify({ ok: false, error: message }) };
  }
  const described = entries.map(manifestOf);
  const byId = new Map(described.map((manifest, i) => [manifest.id, entries[i]]));
  const manifests = JSON.stringify(described);
  // The activation resources of this host's instance: extension id ->
  // disposer (or null), in activation order.
  const active = new Map();
  let disposed = null;
  return {
    manifests: () => manifests,
    call(requestText) {
      try {
        const request = JSON.parse(requestText);
        const entry = byId.get(request.ext);
        if (entry === undefined) return JSON.stringify({ ok: false, error: `extension ${request.ext} is not in the roster` });
        if (request.kind === "files") return JSON.stringify(captureFiles(object, request, runHook(entry, request)));
        if (request.kind === "activate") return JSON.stringify(activate(active, disposed !== null, request, entry));
        return JSON.stringify(runHook(entry, request));
      } catch (error) {
        return JSON.stringify({ ok: false, error: String(error?.message ?? error) });
      }
    },
    // Runs the disposers once, newest activation first (see disposeAll).
    dispose() {
      disposed ??= disposeAll(active);
      return disposed;
    },
  };
}

// An activate call: the resource kept for this instance. One already open
// (a resume in the same instance) is kept; a disposed host opens none (its
// instance is closing: no failure, which would stop the extension).
function activate(active, closed, request, entry) {
  if (active.has(request.ext) || closed) return { ok: true };
  const { dispose, ...answer } = runHook(entry, request);
  if (answer.ok) active.set(request.ext, dispose ?? null);
  return answer;
}

// Runs every disposer, newest activation first, each awaited at most
// EXTENSION_DISPOSE_TIMEOUT_MS; one that throws, rejects or is overdue is
// logged and the rest go on. Never rejects.
async function disposeAll(active) {
  const all = [...active].reverse();
  active.clear();
  for (const [id, dispose] of all) {
    if (dispose === null) continue;
    let timer;
    const overdue = new Promise((resolve) => {
      timer = setTimeout(() => resolve("overdue"), EXTENSION_DISPOSE_TIMEOUT_MS);
    });
    try {
      // Called at once: the newest activation's disposer starts before
      // whatever replaces this instance runs.
      const done = Promise.resolve(dispose()).then(() => "done");
      if ((await Promise.race([done, overdue])) === "overdue") {
        silence(done);
        console.error(`shiitake: extension ${id}: its activation disposer did not settle within ${EXTENSION_DISPOSE_TIMEOUT_MS} ms; the close goes on`);
      }
    } catch (error) {
      console.error(`shiitake: extension ${id}: its activation disposer failed:`, String(error?.message ?? error));
    } finally {
      clearTimeout(timer);
    }
  }
}

// A promise whose rejection nobody awaits any more.
function silence(promise) {
  promise.catch((error) => console.error("shiitake: an overdue activation disposer failed later:", String(error?.message ?? error)));
}

// The ports the files grant holder's `files(context, run)` returned, per
// Durable Object, by `files@<commandId>` of the run (src/host/files_grant.rs
// keys its calls the same way); released when the run ends.
const grantPortsOf = new WeakMap();

function grantPorts(object) {
  let ports = grantPortsOf.get(object);
  if (ports === undefined) grantPortsOf.set(object, (ports = new Map()));
  return ports;
}

// A files hook's answer for the core: the port kept here for the run, its
// description (the workspace's bounds, or a JS port's `portKind`) as
// `value`.
function captureFiles(object, request, answer) {
  if (!answer.ok) return answer;
  const { files, ...rest } = answer;
  if (files === null || files === undefined) return { ...rest, value: null };
  if (files[WORKSPACE] !== undefined) return { ...rest, value: { workspace: files[WORKSPACE] } };
  grantPorts(object).set(`files@${request.event.commandId}`, files);
  return { ...rest, value: portKind(files) };
}

// What the core needs to know of a JS Files port: whether it supplies the
// patch engine, and whether its replace is atomic for one change only (the
// core then journals a patch: src/files/journal.rs).
function portKind(port) {
  return { patches: port.patches === true, stepwise: port.stepwise === true };
}

// The host work lane the core calls (src/host/jobs.rs): hostJobs() checked
// key by key, and its callbacks as promises that never throw synchronously.
export function jobsHost(object) {
  let config;
  try {
    config = object.hostJobs();
  } catch (error) {
    return { spec: () => JSON.stringify({ error: `hostJobs() threw: ${String(error?.message ?? error)}` }) };
  }
  if (config === undefined || config === null) return undefined;
  const refused = checkHostJobs(config);
  if (refused !== undefined) return { spec: () => JSON.stringify({ error: refused }) };
  const { deliver, tick, ...settings } = config;
  const spec = JSON.stringify({ ...settings, tick: typeof tick === "function" });
  return {
    spec: () => spec,
    async deliver(entries, signal) {
      await deliver.call(object, JSON.parse(entries), { signal });
    },
    async tick(signal) {
      await tick.call(object, { signal });
    },
  };
}

// The host's telemetry() (or the env's SHIITAKE_OTLP_ENDPOINT) as the JSON
// the core decodes and checks (src/host/traces.rs): `{endpoint, headers?}`,
// `{error}` when it throws or is not an object, undefined for none. The
// headers are secrets: the core keeps them in memory only.
export function telemetryHost(object) {
  let config;
  try {
    config = object.telemetry();
  } catch (error) {
    return JSON.stringify({ error: `telemetry() threw: ${String(error?.message ?? error)}` });
  }
  if (config === undefined || config === null) {
    const endpoint = object.env?.SHIITAKE_OTLP_ENDPOINT;
    return typeof endpoint === "string" && endpoint !== "" ? JSON.stringify({ endpoint }) : undefined;
  }
  if (typeof config !== "object" || Array.isArray(config)) return JSON.stringify({ error: "telemetry() must answer an object `{ endpoint, headers? }` or undefined" });
  return JSON.stringify(config);
}

// The fleet transport the core calls (src/host/fleet.rs): fleet() checked key
// by key, this Agent's own id, and calls into the peers' Durable Objects of
// the same namespace, each answer bounded. Undefined without fleet().
export function fleetHost(object) {
  let config;
  try {
    config = object.fleet();
  } catch (error) {
    return { spec: () => JSON.stringify({ error: `fleet() threw: ${String(error?.message ?? error)}` }) };
  }
  if (config === undefined || config === null) return undefined;
  const refused = checkFleet(config);
  if (refused !== undefined) return { spec: () => JSON.stringify({ error: refused }) };
  const { namespace, open, deliver, grant, acceptMail, cancellationText, directory, archive, workingDirectory, models, direct } = config;
  // workerd names an object addressed by idFromName (`ctx.id.name`).
  const self = typeof object.ctx?.id?.name === "string" && object.ctx.id.name !== "" ? object.ctx.id.name : undefined;
  const spec = JSON.stringify({
    ...(self !== undefined ? { self } : {}),
    cancellationText: typeof cancellationText === "function",
    directory: directory === true,
    archive: archive === true,
    workingDirectory: typeof workingDirectory === "function",
    models: models === true,
    direct: direct === true,
    // agents.send and agents.recall need the callback that carries mail.
    mail: typeof deliver === "function" || namespace !== undefined,
    grant: typeof grant === "function",
  });
  // The host's open adapter, else the namespace's stub of that name.
  const stub = typeof open === "function" ? (agentId) => open.call(object, agentId) : (agentId) => namespace.get(namespace.idFromName(agentId));
  // One call into a peer: its JSON answer, bounded; rejects when the peer
  // is unreachable, the signal aborts, or the answer is malformed.
  const call = async (signal, invoke) => {
    signal?.throwIfAborted();
    const aborted = new Promise((_, reject) => signal?.addEventListener("abort", () => reject(new Error("aborted")), { once: true }));
    aborted.catch(() => {});
    const answer = await Promise.race([invoke(), aborted]);
    if (typeof answer !== "string") throw new Error("the peer answered something other than JSON text (is it a ShiitakeDO?)");
    if (answer.length > FLEET_BODY_BYTES_MAX) throw new Error(`the peer's answer is over ${FLEET_BODY_BYTES_MAX} bytes`);
    return answer;
  };
  return {
    spec: () => spec,
    acceptMail: typeof acceptMail === "function" ? (mail, options) => acceptMail.call(object, mail, options) : undefined,
    send: (agentId, mail, signal) => call(signal, () => (typeof deliver === "function" ? deliver.call(object, agentId, mail, { signal }) : stub(agentId).receiveMail(mail))),
    sessions: (agentId, request, signal) => call(signal, () => stub(agentId).fleetSessions(request)),
    grant(sessionId) {
      try {
        const value = grant.call(object, sessionId);
        if (value instanceof Promise) return JSON.stringify({ error: "must answer synchronously (a grant object or undefined), not a promise" });
        return JSON.stringify({ value: value ?? null });
      } catch (error) {
        return JSON.stringify({ error: `threw: ${String(error?.message ?? error)}` });
      }
    },
    read: (agentId, sessionId, query, signal) => call(signal, () => stub(agentId).fleetRead(sessionId, query)),
    settlement: (agentId, sessionId, commandId, timeoutMs, signal) => call(signal, () => stub(agentId).fleetSettlement(sessionId, commandId, timeoutMs)),
    recall: (agentId, sessionId, key, signal) => call(signal, () => stub(agentId).fleetRecall(sessionId, key)),
    directory: (request, signal) => call(signal, () => stub(DIRECTORY_AGENT_ID).fleetDirectory(request)),
    member: (agentId, request, signal) => call(signal, () => stub(agentId).fleetMember(request)),
    erase: (agentId, signal) => call(signal, () => (agentId === self ? object.fleetErase() : stub(agentId).fleetErase())),
    workingDirectory(agentId) {
      try {
        const path = workingDirectory.call(object, agentId);
        return typeof path === "string" ? path : undefined;
      } catch (error) {
        console.error("shiitake: fleet().workingDirectory threw", error);
        return undefined;
      }
    },
    setModel: (agentId, choice, signal) => call(signal, () => stub(agentId).fleetSetModel(choice)),
    cancellationText(meta) {
      try {
        const text = cancellationText.call(object, JSON.parse(meta));
        return typeof text === "string" && text !== "" ? text : undefined;
      } catch (error) {
        console.error("shiitake: fleet().cancellationText threw", error);
        return undefined;
      }
    },
  };
}

// The model host the core calls (src/host/models.rs): models() checked key
// by key, and the host's lastSwitch bounded in time, never rejecting.
// Undefined without models().
export function modelsHost(object) {
  let config;
  try {
    config = object.models();
  } catch (error) {
    return { spec: () => JSON.stringify({ error: `models() threw: ${String(error?.message ?? error)}` }) };
  }
  if (config === undefined || config === null) return undefined;
  const refused = checkModels(config);
  if (refused !== undefined) return { spec: () => JSON.stringify({ error: refused }) };
  const { offered, teamDefault, keySources, lastSwitch, contextWindows, compaction } = config;
  const spec = JSON.stringify({ offered, teamDefault, keySources, lastSwitch: typeof lastSwitch === "function", contextWindows, compaction });
  return {
    spec: () => spec,
    async lastSwitch(sessionId, meta) {
      const answer = await withinMs(MODEL_LAST_SWITCH_TIMEOUT_MS, () => lastSwitch.call(object, sessionId, meta === undefined ? undefined : JSON.parse(meta)));
      if (answer.error !== undefined) return JSON.stringify({ error: `lastSwitch: ${answer.error}` });
      const value = answer.value;
      if (value === undefined || value === null) return JSON.stringify({ value: null });
      if (typeof value !== "string") return JSON.stringify({ error: "lastSwitch must return a provider/model string or undefined" });
      return JSON.stringify({ value });
    },
  };
}

// A fleet RPC answer refusing the call.
export function peerError(code, status, message) {
  return JSON.stringify({ error: { code, status, message } });
}

// An Error carrying a fleet answer's `{error: {code, status, message}}`.
export function answerError(answerJson) {
  const { error } = JSON.parse(answerJson);
  return Object.assign(new Error(`${error.code}: ${error.message}`), { code: error.code, status: error.status });
}

// A refusal when a fleet RPC argument is not a string within the bound.
export function badText(value, name) {
  if (typeof value !== "string") return peerError("invalid_request", 400, `${name}: a string`);
  if (value.length > FLEET_BODY_BYTES_MAX) return peerError("payload_too_large", 413, `${name}: over ${FLEET_BODY_BYTES_MAX} bytes`);
  return undefined;
}

// Runs `work(signal)` for at most `ms`: `{value}` or `{error}` (a message),
// never rejecting; the signal aborts at the deadline.
async function withinMs(ms, work) {
  const controller = new AbortController();
  let timer;
  const deadline = new Promise((resolve) => {
    timer = setTimeout(() => {
      controller.abort();
      resolve({ error: `no answer within ${ms} ms` });
    }, ms);
  });
  try {
    const done = Promise.resolve()
      .then(() => work(controller.signal))
      .then(
        (value) => ({ value }),
        (error) => ({ error: String(error?.message ?? error) }),
      );
    return await Promise.race([done, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

// The tool host the core calls (src/host/tools.rs): the Agent's capabilities
// as data, and the calls the core decides to make. Nothing here decides a
// grant or bounds a payload; the core does both. With the fleet and no
// tools(), the host offers the `agents` module alone.
const EMBEDDED = Symbol("shiitake.embeddedSandbox");

/**
 * The object's embedded sandbox (`tools().sandbox: "embedded"`), kept for
 * its life, on the registered engine (js/sandbox/engine-wasm.mjs; Node's):
 * its runs each get a fresh context; one Agent's engine is never another's.
 */
function embeddedSandbox(object) {
  object[EMBEDDED] ??= embeddedSandboxFactory()();
  return object[EMBEDDED];
}

export function toolHost(object, fleet = false) {
  let config;
  try {
    config = object.tools();
  } catch (error) {
    return { spec: () => JSON.stringify({ modules: [], error: String(error?.message ?? error) }) };
  }
  if ((config === undefined || config === null) && !fleet) return undefined;
  config ??= {};
  const refused = checkTools(config);
  if (refused !== undefined) return { spec: () => JSON.stringify({ modules: [], error: refused }) };
  const { confirm, ...accessData } = config.access ?? {};
  // A fresh core: the runs whose ports were kept are gone.
  const grantPortsNow = grantPorts(object);
  grantPortsNow.clear();
  const runs = new Map();
  const modules = [];
  const direct = [];
  let problem;
  for (const module of config.modules ?? []) {
    const operations = [];
    for (const { run, direct: isDirect, ...spec } of module?.operations ?? []) {
      if (typeof run !== "function") problem ??= `${module.id}.${spec.name}: run must be a function`;
      runs.set(`${module.id}\u0000${spec.name}`, run);
      if (isDirect) direct.push(`${module.id}.${spec.name}`);
      operations.push(spec);
    }
    modules.push({ ...module, operations });
  }
  // Files ports by the id of the module over each (`files`).
  const ports = new Map();
  let files;
  if (config.files !== undefined) {
    const { port, direct } = config.files;
    if (port[WORKSPACE] !== undefined) {
      files = { workspace: port[WORKSPACE], ...(direct !== undefined ? { direct } : {}) };
    } else {
      ports.set("files", port);
      files = { ...portKind(port), ...(direct !== undefined ? { direct } : {}) };
    }
  }
  // The Computers of the host's list as last read, by name.
  const computers = new Map();
  const announced = announcing(object);
  announced.listed = config.computers !== undefined;
  // An async iterable list (a subscription): its latest accepted list,
  // read at each tool offer like a function's.
  let yielded;
  if (typeof config.computers?.[Symbol.asyncIterator] === "function") {
    subscribeComputers(
      object,
      config.computers,
      (list) => {
        yielded = list;
      },
      (reason) => {
        console.error(`shiitake: tools().computers: ${reason}`);
        try {
          config.onUnavailable?.call(object, { name: "tools().computers", reason });
        } catch (error) {
          console.error("shiitake: onUnavailable threw", error);
        }
      },
    );
  } else {
    announced.stop?.();
  }
  const loader = object.env?.LOADER;
  // The default: the Worker Loader where it is bound, else the embedded
  // engine where it is registered (Node; a Worker importing it).
  const engine = embeddedSandboxFactory() !== undefined;
  const embedded = config.sandbox === "embedded" || (config.sandbox === undefined && loader === undefined && engine);
  const noEngine =
    embedded && !engine
      ? 'tools().sandbox "embedded" needs the engine: import "shiitake/sandbox-engine" in the Worker (js/sandbox/engine-wasm.mjs)'
      : undefined;
  const spec = JSON.stringify({
    modules,
    direct,
    access: config.access === undefined ? null : accessData,
    confirm: typeof confirm === "function",
    // `execute` is offered where it can run.
    loader: embedded || loader !== undefined,
    ...(config.mcpTimeoutMs !== undefined ? { mcpTimeoutMs: config.mcpTimeoutMs } : {}),
    ...(config.mcpRetryMs !== undefined ? { mcpRetryMs: config.mcpRetryMs } : {}),
    ...(files !== undefined ? { files } : {}),
    ...(config.computers !== undefined ? { computers: true } : {}),
    ...(config.computersTimeoutMs !== undefined ? { computersTimeoutMs: config.computersTimeoutMs } : {}),
    ...(config.ui !== undefined ? { ui: { id: config.ui.id, hasSession: config.ui.hasSession !== undefined, direct: config.ui.direct === true } } : {}),
    ...((problem ?? noEngine) ? { error: problem ?? noEngine } : {}),
  });
  // MCP requests go through the host's fetch (credentials in its headers).
  const mcpFetch = config.fetch ?? ((input, init) => fetch(input, init));
  return {
    spec: () => spec,
    mcpServers: () => JSON.stringify(config.mcpServers ?? []),
    // `onChunk` sees an event stream as it arrives (a tool call's progress);
    // its `true` ends the read. A GET (a stream resumed) has no body.
    async mcpFetch(method, url, headers, body, signal, onChunk) {
      const init = { method, headers, body: method === "GET" ? undefined : body, redirect: "manual", signal };
      const response = await mcpFetch(url, init);
      const contentType = response.headers.get("content-type");
      const stream = onChunk !== undefined && /^text\/event-stream/i.test(contentType ?? "");
      return {
        status: response.status,
        contentType,
        headers: [...response.headers],
        body: await readBounded(response, MCP_RESPONSE_BYTES_MAX + 1, stream ? onChunk : undefined),
      };
    },
    onUnavailable(report) {
      try {
        config.onUnavailable?.call(object, JSON.parse(report));
      } catch (error) {
        console.error("shiitake: onUnavailable threw", error);
      }
    },
    async invoke(moduleId, name, args, invocation, signal, progress) {
      let data;
      const images = [];
      let ended = false;
      const ctx = {
        ...JSON.parse(invocation),
        signal,
        display(value) {
          data = value;
        },
        // Live counters for the watch (`tool` frames): the core bounds
        // and paces them. A report after the call ended is dropped.
        progress(value) {
          if (ended || signal.aborted) return;
          const json = JSON.stringify(value);
          const refused = json === undefined ? "progress: the data is not JSON" : progress(json);
          if (refused !== undefined) throw new TypeError(refused);
        },
        image(image) {
          images.push(image);
        },
      };
      try {
        const result = await runs.get(`${moduleId}\u0000${name}`).call(object, JSON.parse(args), ctx);
        return JSON.stringify({
          result: result ?? null,
          ...(data === undefined ? {} : { data }),
          ...(images.length === 0 ? {} : { images }),
        });
      } catch (error) {
        return JSON.stringify({ error: String(error?.message ?? error) });
      } finally {
        ended = true;
      }
    },
    computersList() {
      try {
        const subscribed = typeof config.computers?.[Symbol.asyncIterator] === "function";
        if (subscribed && yielded === undefined) return JSON.stringify({ error: "the async iterable has yielded no list yet" });
        const list = subscribed ? yielded : typeof config.computers === "function" ? config.computers.call(object) : config.computers;
        const refused = checkComputers(list);
        if (refused !== undefined) return JSON.stringify({ error: refused });
        computers.clear();
        for (const key of [...ports.keys()]) if (key.startsWith("computers.")) ports.delete(key);
        const described = list.map(({ computer, files, ...data }) => {
          computers.set(data.name, computer);
          if (files !== undefined) ports.set(`computers.${data.name}.files`, files);
          return { ...data, files: files !== undefined, ...(files !== undefined ? portKind(files) : {}) };
        });
        return JSON.stringify({ list: described, announced: announced.count });
      } catch (error) {
        return JSON.stringify({ error: String(error?.message ?? error) });
      }
    },
    async computerDescribe(name, signal) {
      const advertised = await computers.get(name).describe({ signal });
      return typeof advertised === "string" ? advertised : JSON.stringify(advertised);
    },
    async computerCall(name, operation, args, invocation, signal) {
      try {
        const computer = computers.get(name);
        if (computer === undefined) return JSON.stringify({ error: `no Computer named ${name} in the host's list` });
        const reply = await computer.call(operation, args, { ...JSON.parse(invocation), signal });
        return typeof reply === "string" ? reply : JSON.stringify(reply);
      } catch (error) {
        return JSON.stringify({ error: String(error?.message ?? error) });
      }
    },
    async filesCall(id, method, args, signal) {
      try {
        const port = ports.get(id) ?? grantPortsNow.get(id);
        if (port === undefined) return JSON.stringify({ error: `no files port ${id} (its run ended)` });
        const value = await port[method].call(port, ...JSON.parse(args), { signal });
        if (method === "read" && typeof value === "string" && value.length > FILE_BYTES_MAX) {
          return JSON.stringify({ error: `the file is over ${FILE_BYTES_MAX} bytes, the most the files module reads` });
        }
        return JSON.stringify({ value: value ?? null });
      } catch (error) {
        return JSON.stringify({ error: String(error?.message ?? error) });
      }
    },
    filesRelease(id) {
      grantPortsNow.delete(id);
    },
    async uiHasSession(sessionId, signal) {
      return (await config.ui.hasSession.call(object, sessionId, { signal })) === true;
    },
    async confirm(request, signal) {
      try {
        return (await confirm.call(object, JSON.parse(request), { signal })) === true;
      } catch {
        return false;
      }
    },
    execute(code, namespaces, dispatch, signal) {
      if (embedded) return embeddedSandbox(object).run({ code, namespaces: [...namespaces], dispatch, signal });
      // Through the Worker's exported ShiitakeSandbox when there is one: the
      // guest worker is then released when the call returns, not when this
      // object's isolate next collects garbage (see js/execute.mjs).
      const sandbox = object.ctx?.exports?.ShiitakeSandbox;
      return runGuest(loader, { code, namespaces: [...namespaces], dispatch, signal, sandbox });
    },
  };
}

/**
 * The host's decision on one received mail (`fleet().acceptMail`, bounded
 * in time), as the core takes it: `{decision}` (JSON), or `{refusal}` (a
 * fleet answer refusing the call). Without acceptMail every mail is admitted
 * without metadata.
 */
export async function mailDecision(fleet, mailJson) {
  if (fleet?.acceptMail === undefined) return { decision: "{}" };
  let mail;
  try {
    mail = JSON.parse(mailJson);
  } catch (error) {
    return { refusal: peerError("invalid_request", 400, `mail: ${error.message}`) };
  }
  const answer = await withinMs(ACCEPT_MAIL_TIMEOUT_MS, (signal) => fleet.acceptMail(mail, { signal }));
  if (answer.error !== undefined) return { refusal: peerError("accept_mail_failed", 503, `acceptMail: ${answer.error}`) };
  const refused = checkDecision(answer.value);
  if (refused !== undefined) return { refusal: peerError("accept_mail_failed", 503, refused) };
  return { decision: JSON.stringify(answer.value ?? {}) };
}
