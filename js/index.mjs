export { ShiitakeDO } from "./do.mjs";
export { shiitakeApp } from "./app.mjs";
