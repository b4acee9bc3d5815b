//! The fleet's directory object (`crate::fleet::directory`): the Durable
//! Object named `shiitake.directory` of the fleet's namespace answers its
//! peers' directory requests over its own SQLite. It runs no Agent: the
//! shim (`ShiitakeDO#fleetDirectory`) builds this class instead of a
//! `ShiitakeCore` there.

use super::bindings;
use super::sql::DoSql;
use crate::error::ApiError;
use crate::store::schema;
use std::cell::Cell;
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
pub struct ShiitakeDirectory {
    sql: DoSql,
    /// The store's schema was checked (created, or migrated) once.
    opened: Cell<bool>,
}

#[wasm_bindgen]
impl ShiitakeDirectory {
    /// `ctx`: the DurableObjectState of the directory's object.
    #[wasm_bindgen(constructor)]
    pub fn new(ctx: JsValue) -> Result<ShiitakeDirectory, JsValue> {
        Ok(ShiitakeDirectory {
            sql: DoSql::from_state(&ctx)?,
            opened: Cell::new(false),
        })
    }

    /// One request (JSON, `crate::fleet::directory::Request`): the answer
    /// `{value}` or `{error: {code, status, message}}` as JSON. The first
    /// opens the store (`schema::open`: the directory's tables are in the
    /// versioned schema like an Agent's).
    pub fn call(&self, request: &str) -> String {
        let refused = |e: ApiError| {
            serde_json::json!({
                "error": { "code": e.code(), "status": e.status(), "message": e.to_string() }
            })
            .to_string()
        };
        if let Err(e) = crate::fleet::available() {
            return refused(e);
        }
        if !self.opened.get() {
            match schema::open(&self.sql) {
                Ok(opened) => super::report_opened(opened),
                Err(e) => return refused(e),
            }
            self.opened.set(true);
        }
        crate::fleet::directory::handle_json(&self.sql, bindings::now_ms(), request)
    }
}
