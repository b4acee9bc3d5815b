// Config checking: what the host hooks (tools(), hostJobs(), fleet(),
// models()) and acceptMail return, checked key by key before the core sees
// any of it. Each check answers why the value cannot be used (a message
// naming the key), or undefined; js/do/hooks.mjs hands the message to the
// core, which answers 503 host_misconfigured with it. The core checks
// ranges and names; these check shape, so a typo or a misplaced hook is
// refused by name rather than dropped.
import { WORKSPACE } from "../files.mjs";
import { isPlainObject } from "../guards.mjs";
import { COMPUTERS_MAX, JSON_DEPTH_MAX, MODELS_OFFERED_MAX } from "../limits.mjs";

const HOST_JOBS_KEYS = { deliver: "function", tick: "function", retryBaseMs: "integer", retryMaxMs: "integer", timeoutMs: "integer" };

// Why `config` (what hostJobs() returned) cannot be used, or undefined. The
// core checks the numbers' ranges.
export function checkHostJobs(config) {
  if (typeof config !== "object" || Array.isArray(config)) return "hostJobs() must return an object";
  for (const [key, value] of Object.entries(config)) {
    const kind = HOST_JOBS_KEYS[key];
    if (kind === undefined) return `hostJobs().${key}: unknown key \`${key}\`; known: ${Object.keys(HOST_JOBS_KEYS).join(", ")}`;
    if (value === undefined) continue;
    if (kind === "function" && typeof value !== "function") return `hostJobs().${key} must be a function`;
    if (kind === "integer" && !Number.isSafeInteger(value)) return `hostJobs().${key} must be an integer`;
  }
  if (typeof config.deliver !== "function") return "hostJobs().deliver is required (a function)";
  return undefined;
}

const FLEET_KEYS = { namespace: "namespace", open: "function", deliver: "function", grant: "function", acceptMail: "function", cancellationText: "function", directory: "boolean", archive: "boolean", workingDirectory: "function", models: "boolean", direct: "boolean" };

// Why `config` (what fleet() returned) cannot be used, or undefined.
export function checkFleet(config) {
  if (typeof config !== "object" || Array.isArray(config)) return "fleet() must return an object";
  for (const [key, value] of Object.entries(config)) {
    const kind = FLEET_KEYS[key];
    if (kind === undefined) return `fleet().${key}: unknown key \`${key}\`; known: ${Object.keys(FLEET_KEYS).join(", ")}`;
    if (value === undefined) continue;
    if (kind === "function" && typeof value !== "function") return `fleet().${key} must be a function`;
    if (kind === "boolean" && typeof value !== "boolean") return `fleet().${key} must be a boolean`;
    if (kind === "namespace" && (typeof value?.get !== "function" || typeof value?.idFromName !== "function")) {
      return `fleet().${key} must be a Durable Object namespace binding (with get and idFromName), e.g. this.env.SHIITAKE`;
    }
  }
  if (config.namespace === undefined && config.open === undefined) {
    return "fleet().namespace is required (this Worker's Durable Object namespace, e.g. this.env.SHIITAKE), or fleet().open(agentId) answering each Agent's stub";
  }
  if (config.archive === true && config.directory !== true) return "fleet().archive needs fleet().directory: true (archiving is a directory change)";
  return undefined;
}

const MODELS_KEYS = { offered: "strings", teamDefault: "string", keySources: "strings", lastSwitch: "function", contextWindows: "windows", compaction: "compaction" };

// Why `config` (what models() returned) cannot be used, or undefined.
export function checkModels(config) {
  if (typeof config !== "object" || Array.isArray(config)) return "models() must return an object";
  for (const [key, value] of Object.entries(config)) {
    const kind = MODELS_KEYS[key];
    if (kind === undefined) return `models().${key}: unknown key \`${key}\`; known: ${Object.keys(MODELS_KEYS).join(", ")}`;
    if (value === undefined) continue;
    if (kind === "function" && typeof value !== "function") return `models().${key} must be a function`;
    if (kind === "string" && typeof value !== "string") return `models().${key} must be a provider/model string`;
    if (kind === "strings") {
      if (!Array.isArray(value) || value.some((v) => typeof v !== "string")) return `models().${key} must be an array of strings`;
      if (value.length > MODELS_OFFERED_MAX) return `models().${key}: at most ${MODELS_OFFERED_MAX} entries`;
    }
    // The core checks each address, window, trigger and prompt by name.
    if (kind === "windows" && (!isPlainObject(value) || Object.values(value).some((v) => !Number.isSafeInteger(v)))) {
      return `models().${key} must be an object of provider/model addresses to context windows in tokens (integers)`;
    }
    if (kind === "compaction") {
      if (!isPlainObject(value)) return `models().${key} must be an object { trigger?, prompt? }`;
      for (const k of Object.keys(value)) if (k !== "trigger" && k !== "prompt") return `models().compaction: unknown key \`${k}\`; known: trigger, prompt`;
      if (value.trigger !== undefined && typeof value.trigger !== "number") return "models().compaction.trigger must be a fraction of the window (a number)";
      if (value.prompt !== undefined && typeof value.prompt !== "string") return "models().compaction.prompt must be a string";
    }
  }
  return undefined;
}

// Why acceptMail's answer cannot be used, or undefined: `{meta?}` or
// `{refuse: reason}` (undefined accepts without metadata).
export function checkDecision(value) {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object" || Array.isArray(value)) return "acceptMail must return { meta? } or { refuse: reason }";
  for (const key of Object.keys(value)) {
    if (key !== "meta" && key !== "refuse") return `acceptMail returned an unknown key \`${key}\`; known: meta, refuse`;
  }
  if (value.refuse !== undefined) {
    if (typeof value.refuse !== "string" || value.refuse === "") return "acceptMail's refuse must be a non-empty string (the reason)";
    if (value.meta !== undefined) return "acceptMail returned both meta and refuse";
  }
  return undefined;
}

// What tools() may hold: each key is data (handed to the core as JSON) or a
// function (called by the shim). Anything else is refused by name rather
// than dropped by JSON.stringify, so a typo or a misplaced hook is not
// silently ignored.
const TOOLS_KEYS = {
  modules: "modules",
  access: "access",
  mcpServers: "mcpServers",
  mcpTimeoutMs: "data",
  mcpRetryMs: "data",
  fetch: "function",
  onUnavailable: "function",
  files: "files",
  computers: "computers",
  computersTimeoutMs: "data",
  ui: "ui",
  sandbox: "sandbox",
};

// `tools().sandbox`: where `execute` runs: "loader" (a Worker Loader guest,
// offered only with the LOADER binding) or "embedded" (QuickJS in wasm in
// this isolate or process, js/sandbox/embedded.mjs; no binding). Unset: the
// loader where LOADER is bound, else the embedded engine where registered.
const SANDBOXES = ["loader", "embedded"];

// `direct: true` (on a Computer, `ui`): its operations are also direct tools
// (`computers_<name>_<operation>`, `ui_execute`), so a host without
// `execute` (Node, a Worker without LOADER) offers them.
const COMPUTER_KEYS = { id: "data", name: "data", computer: "computer", confirmCalls: "data", files: "port", direct: "boolean" };

const FILES_KEYS = { port: "port", direct: "data" };

// `tools().ui` (src/ui/): `id` names the App, `hasSession(sessionId)` says
// whether a browser may open that Session's bridge (default: it is stored).
const UI_KEYS = { id: "data", hasSession: "function", direct: "boolean" };

const PORT_METHODS = ["read", "stat", "list", "write", "replace"];

const ACCESS_KEYS = { grants: "data", required: "data", confirm: "function" };

const MODULE_KEYS = { id: "data", operations: "operations" };

// `direct: true`: every tool of the server is a direct tool of its own
// (no `execute` needed: Node, a Worker without LOADER).
const MCP_SERVER_KEYS = { name: "data", url: "data", headers: "data", direct: "data" };

const OPERATION_KEYS = {
  name: "data",
  description: "data",
  inputSchema: "data",
  access: "data",
  confirm: "data",
  replaySafe: "data",
  direct: "data",
  run: "function",
};

const MOVED = { confirm: "the confirm hook is `access.confirm`" };

// Why `config` (what tools() returned) cannot be used, or undefined.
export function checkTools(config) {
  const where = (path) => `tools()${path}`;
  const object = (value, path, keys) => {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return `${where(path)} must be an object`;
    for (const [key, item] of Object.entries(value)) {
      const kind = keys[key];
      const at = `${path}.${key}`;
      if (kind === undefined) {
        const hint = path === "" && MOVED[key] ? ` (${MOVED[key]})` : "";
        return `${where(at)}: unknown key \`${key}\`${hint}; known: ${Object.keys(keys).join(", ")}`;
      }
      if (item === undefined) continue;
      const problem = check(item, at, kind);
      if (problem !== undefined) return problem;
    }
    return undefined;
  };
  const list = (value, path, each) => {
    if (!Array.isArray(value)) return `${where(path)} must be an array`;
    for (const [i, item] of value.entries()) {
      const problem = each(item, `${path}[${i}]`);
      if (problem !== undefined) return problem;
    }
    return undefined;
  };
  const check = (value, path, kind) => {
    switch (kind) {
      case "function":
        return typeof value === "function" ? undefined : `${where(path)} must be a function`;
      case "data":
        return plainData(value, path, where);
      case "boolean":
        return typeof value === "boolean" ? undefined : `${where(path)} must be a boolean`;
      case "access":
        return object(value, path, ACCESS_KEYS);
      case "modules":
        return list(value, path, (m, at) => object(m, at, MODULE_KEYS));
      case "mcpServers":
        return list(value, path, (server, at) => {
          const problem = object(server, at, MCP_SERVER_KEYS);
          if (problem !== undefined) return problem;
          if (server.direct !== undefined && typeof server.direct !== "boolean") return `${where(`${at}.direct`)} must be a boolean`;
          return undefined;
        });
      case "operations":
        return list(value, path, (op, at) => object(op, at, OPERATION_KEYS));
      case "sandbox":
        return SANDBOXES.includes(value) ? undefined : `${where(path)} must be ${SANDBOXES.map((name) => JSON.stringify(name)).join(" or ")}`;
      case "ui":
        if (typeof value?.id !== "string") return `${where(path)}.id must be a string naming the App`;
        return object(value, path, UI_KEYS);
      case "files":
        if (value?.port === undefined) return `${where(path)}.port is required (sqliteWorkspace(), r2Files(bucket) or your own port)`;
        return object(value, path, FILES_KEYS);
      case "computers":
        if (typeof value === "function" || typeof value?.[Symbol.asyncIterator] === "function") return undefined;
        if (Array.isArray(value) && value.length > COMPUTERS_MAX) return `${where(path)} lists ${value.length} Computers, more than ${COMPUTERS_MAX}`;
        return list(value, path, (c, at) => object(c, at, COMPUTER_KEYS));
      case "computer":
        for (const method of ["describe", "call"]) {
          if (typeof value?.[method] !== "function") return `${where(path)}.${method} must be a function (a Computer has describe and call; see serviceComputer)`;
        }
        return undefined;
      case "port":
        if (value === null || typeof value !== "object") return `${where(path)} must be a Files port`;
        if (value[WORKSPACE] !== undefined) return plainData(value[WORKSPACE], path, where);
        for (const method of PORT_METHODS) {
          if (typeof value[method] !== "function") return `${where(path)}.${method} must be a function (a Files port has ${PORT_METHODS.join(", ")})`;
        }
        return undefined;
    }
    return undefined;
  };
  return object(config, "", TOOLS_KEYS);
}

// Why the Computer list `tools().computers` gave (an array, or what its
// function returned, or its async iterable yielded) cannot be used, or
// undefined.
export function checkComputers(list) {
  if (!Array.isArray(list)) return "tools().computers must be an array, a function returning one, or an async iterable of them";
  const refused = checkTools({ computers: list });
  if (refused !== undefined) return refused;
  const missing = list.findIndex((c) => typeof c.id !== "string" || typeof c.name !== "string" || c.computer === undefined);
  return missing < 0 ? undefined : `tools().computers[${missing}] needs an id, a name and a computer`;
}

// Why `value` is not plain JSON data (a function, symbol or bigint inside it
// would be dropped or throw in JSON.stringify), or undefined. Bounded by the
// core's own JSON depth bound.
function plainData(value, path, where, depth = 0) {
  if (depth > JSON_DEPTH_MAX) return `${where(path)} nests deeper than ${JSON_DEPTH_MAX} levels`;
  const type = typeof value;
  if (type === "function" || type === "symbol" || type === "bigint") {
    return `${where(path)} is a ${type}, which cannot be passed to the core (JSON data expected)`;
  }
  if (value === null || type !== "object") return undefined;
  for (const [key, item] of Object.entries(value)) {
    const problem = plainData(item, Array.isArray(value) ? `${path}[${key}]` : `${path}.${key}`, where, depth + 1);
    if (problem !== undefined) return problem;
  }
  return undefined;
}
