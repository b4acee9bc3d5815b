//! Files (seed knapsack: `Knapsack.files`, apply_patch, files-patch,
//! files-search), sans-IO: path validation, the patch engine, search
//! visibility and the `files` module's operations. The host performs the
//! reads and writes through a port.

pub mod path;
pub mod search;
pub mod visibility;
