export { ShiitakeDO, deliverSessionGrantsToStorage } from "./do.mjs";
export { shiitakeApp } from "./app.mjs";
export { sqliteWorkspace, r2Files } from "./files.mjs";
