export {
  ShiitakeDO,
  deliverSessionGrantsToStorage,
  type GrantDelivery,
  type GrantLevel,
} from "./do.js";
export {
  shiitakeApp,
  type ShiitakeAppOptions,
  type ShiitakeHttpEnv,
  type ShiitakeMeta,
  type ShiitakeNamespace,
} from "./app.js";
