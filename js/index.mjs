export { ShiitakeDO, deliverSessionGrantsToStorage } from "./do.mjs";
export { shiitakeApp } from "./app.mjs";
