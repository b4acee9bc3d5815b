export {
  ShiitakeDO,
  createAgentDirectory,
  deliverSessionGrantsToStorage,
  readWatch,
  type ShiitakeOwner,
  type ShiitakeOwnerSession,
  type PromptInput,
  type OperatorInput,
  type CancelInput,
  type ReadQuery,
  type PageQuery,
  type BudgetInput,
  type GrantDelivery,
  type GrantLevel,
  type DirectoryAnswer,
  type DirectoryEntry,
  type DirectoryFact,
  type ShiitakeTools,
  type ShiitakeTelemetry,
  type ToolModule,
  type ToolOperation,
  type ToolContext,
  type ConfirmRequest,
} from "./do.js";
export { ShiitakeSandbox } from "./execute.js";
export {
  shiitakeApp,
  type ShiitakeAppOptions,
  type ShiitakeHttpEnv,
  type ShiitakeMeta,
  type ShiitakeNamespace,
} from "./app.js";
export { ShiitakeError } from "./client.js";
export { sqliteWorkspace, r2Files, type FilesPort, type FileChange, type WorkspaceBounds } from "./files.js";
