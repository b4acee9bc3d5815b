//! The fleet's directory object (`crate::fleet::directory`): the Durable
//! Object named `shiitake.directory` of the fleet's namespace answers its
//! peers' directory requests over its own SQLite. It runs no Agent: the
//! shim (`ShiitakeDO#fleetDirectory`) builds this class instead of a
//! `ShiitakeCore` there.

#[cfg(feature = "fleet")]
use super::bindings;
use super::sql::DoSql;
use crate::error::ApiError;
use std::cell::Cell;
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
#[cfg_attr(not(feature = "fleet"), allow(dead_code))] // a lean build serves no directory
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
        self.answer(request, false)
    }

    /// Like `call`, answering `{value, facts}`: the lifecycle facts the
    /// mutation made (`crate::fleet::directory::Fact`), for a host running
    /// the directory inside its own object's transaction
    /// (`createAgentDirectory(sql)`, `js/do.mjs`).
    #[wasm_bindgen(js_name = callWithFacts)]
    pub fn call_with_facts(&self, request: &str) -> String {
        self.answer(request, true)
    }
}

impl ShiitakeDirectory {
    fn answer(&self, request: &str, facts: bool) -> String {
        self.serve(request, facts).unwrap_or_else(|e| {
            serde_json::json!({
                "error": { "code": e.code(), "status": e.status(), "message": e.to_string() }
            })
            .to_string()
        })
    }

    #[cfg(feature = "fleet")]
    fn serve(&self, request: &str, facts: bool) -> Result<String, ApiError> {
        if !self.opened.get() {
            super::report_opened(crate::store::schema::open(&self.sql)?);
            self.opened.set(true);
        }
        Ok(crate::fleet::directory::handle_json(
            &self.sql,
            bindings::now_ms(),
            request,
            facts,
        ))
    }

    /// A build without the fleet refuses every request, naming the feature,
    /// and carries none of the directory's code.
    #[cfg(not(feature = "fleet"))]
    fn serve(&self, _: &str, _: bool) -> Result<String, ApiError> {
        crate::fleet::available()?;
        Err(ApiError::Internal("the fleet feature is not built".into()))
    }
}
