//! The lean build's `files` module (no `files` Cargo feature): the same API
//! as `module.rs`, every use refused naming the feature. The host's
//! `tools().files` is a configuration error (503 `host_misconfigured`), a
//! Computer that offers files is reported unavailable, and an extension
//! holding the files grant is refused.

use super::port::Port;
use crate::capability::{CapabilityError, Module};
use serde_json::Value;

/// The files module's id at the top level; a Computer's is
/// `computers.<name>.files`.
pub const MODULE_ID: &str = crate::capability::backend::own::FILES;
/// The patch operation, offered as the direct tool `apply_patch`.
pub const APPLY_PATCH: &str = "apply_patch";

/// Why the files module is refused in a build without the `files` feature.
pub const UNAVAILABLE: &str = "this wasm was built without the `files` Cargo feature (a lean \
    build, SHIITAKE_LEAN=1), which offers the files module (tools().files, a Computer's files, \
    the files grant); build with default features";

/// Refused: this build has no files module.
pub fn module(_id: &str, _patches: bool) -> Result<Module, CapabilityError> {
    Err(CapabilityError(UNAVAILABLE.to_owned()))
}

/// Why a files operation failed: in this build, always that it has no
/// files module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{UNAVAILABLE}")]
pub struct FilesError;

/// Refused: this build has no files module.
pub async fn call(
    _port: &impl Port,
    _operation: &str,
    _arguments: &Value,
) -> Result<Value, FilesError> {
    Err(FilesError)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::block_on;
    use crate::files::workspace::{Bounds, Workspace};

    /// The lean build (no `files` feature) refuses the files module, naming
    /// the feature: the host's own (tools().files) and a Computer's, and any
    /// operation on a port (the files grant's: `extension::files_grant`).
    #[test]
    fn a_lean_build_refuses_the_files_module_naming_the_feature() {
        let named = |e: String| assert!(e.contains("`files` Cargo feature"), "{e}");
        named(module(MODULE_ID, true).unwrap_err().0);
        named(module("computers.laptop.files", false).unwrap_err().0);
        let sql = crate::sql::native::NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let workspace = Workspace::open(&sql, Bounds::default(), 0);
        let read = serde_json::json!({ "path": "a.txt" });
        named(
            block_on(call(&workspace, "read", &read))
                .unwrap_err()
                .to_string(),
        );
    }
}
