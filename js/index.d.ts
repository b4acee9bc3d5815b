export {
  ShiitakeDO,
  deliverSessionGrantsToStorage,
  type GrantDelivery,
  type GrantLevel,
  type ShiitakeTools,
  type ToolModule,
  type ToolOperation,
  type ToolContext,
  type ConfirmRequest,
} from "./do.js";
export {
  shiitakeApp,
  type ShiitakeAppOptions,
  type ShiitakeHttpEnv,
  type ShiitakeMeta,
  type ShiitakeNamespace,
} from "./app.js";
export { sqliteWorkspace, r2Files, type FilesPort, type FileChange, type WorkspaceBounds } from "./files.js";
