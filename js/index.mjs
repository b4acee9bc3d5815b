export { ShiitakeDO, createAgentDirectory, deliverSessionGrantsToStorage, readWatch } from "./do.mjs";
export { ShiitakeSandbox } from "./execute.mjs";
export { ShiitakeError } from "./client.mjs";
export { shiitakeApp } from "./app.mjs";
export { sqliteWorkspace, r2Files } from "./files.mjs";
