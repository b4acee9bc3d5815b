//! The fleet's directory object (`crate::fleet::directory`): the Durable
//! Object named `shiitake.directory` of the fleet's namespace answers its
//! peers' directory requests over its own SQLite. It runs no Agent: the
//! shim (`ShiitakeDO#fleetDirectory`) builds this class instead of a
//! `ShiitakeCore` there.

use super::bindings;
use super::sql::DoSql;
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
pub struct ShiitakeDirectory {
    sql: DoSql,
}

#[wasm_bindgen]
impl ShiitakeDirectory {
    /// `ctx`: the DurableObjectState of the directory's object.
    #[wasm_bindgen(constructor)]
    pub fn new(ctx: JsValue) -> Result<ShiitakeDirectory, JsValue> {
        Ok(ShiitakeDirectory {
            sql: DoSql::from_state(&ctx)?,
        })
    }

    /// One request (JSON, `crate::fleet::directory::Request`): the answer
    /// `{value}` or `{error: {code, status, message}}` as JSON.
    pub fn call(&self, request: &str) -> String {
        crate::fleet::directory::handle_json(&self.sql, bindings::now_ms(), request)
    }
}
