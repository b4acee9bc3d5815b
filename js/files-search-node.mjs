// `shiitake/files-search` on Node (the package's `node` condition): the same
// module, its wasm loaded by js/node.mjs's hooks.
import { nodeFilesSearch } from "./node.mjs";

export const { SearchVisibility, searchVisibility } = await nodeFilesSearch();
