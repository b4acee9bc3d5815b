//! [`Sql`] over the Durable Object's `ctx.storage.sql`, with
//! `ctx.storage.transactionSync` for atomic, rolled-back-on-error writes.
//! A query or a batch of writes is one call into `js/do/sql.mjs`, its
//! parameters and rows carried as JSON text (the encoding is described
//! there): a call from wasm into JS per parameter and per cell was most of
//! admission's calls across the boundary (146, 91 of them its facts row).

use super::bindings::DurableObjectStorage;
use crate::sql::{Row, Sql, SqlError, SqlValue, Tables, Write, WriteSet};
use js_sys::Reflect;
use serde_json::{json, Value};
use wasm_bindgen::prelude::*;

#[wasm_bindgen(module = "/js/do/sql.mjs")]
extern "C" {
    #[wasm_bindgen(catch)]
    fn query(sql: &JsValue, statement: &str, params: &str) -> Result<String, JsValue>;

    #[wasm_bindgen(catch)]
    fn apply(
        storage: &DurableObjectStorage,
        sql: &JsValue,
        statements: &str,
        params: &str,
    ) -> Result<(), JsValue>;
}

pub struct DoSql {
    pub storage: DurableObjectStorage,
    sql: JsValue,
    write_set: WriteSet,
    tables: Tables,
}

impl DoSql {
    pub fn from_state(state: &JsValue) -> Result<Self, JsValue> {
        let storage = Reflect::get(state, &"storage".into())?;
        let sql = Reflect::get(&storage, &"sql".into())?;
        Ok(DoSql {
            storage: storage.unchecked_into(),
            sql,
            write_set: WriteSet::default(),
            tables: Tables::default(),
        })
    }
}

/// A statement's parameters as `js/do/sql.mjs` reads them: a JSON array.
/// (Through `serde_json::Value`, whose code the binary holds anyway.)
fn params_json(params: &[SqlValue]) -> Value {
    Value::Array(
        params
            .iter()
            .map(|p| match p {
                SqlValue::Null => Value::Null,
                // JSON.parse rounds past 2^53 as `as f64` would: our
                // integers stay below.
                SqlValue::Integer(i) => Value::from(*i),
                // JSON has no infinities or NaN: a real goes as its digits.
                SqlValue::Real(r) if !r.is_finite() => {
                    json!({"r": r.to_string().replace("inf", "Infinity")})
                }
                SqlValue::Real(r) => Value::from(*r),
                SqlValue::Text(t) => Value::from(t.as_str()),
            })
            .collect(),
    )
}

/// One cell of a row `js/do/sql.mjs` answered.
fn cell(v: Value) -> Result<SqlValue, SqlError> {
    match v {
        Value::Null => Ok(SqlValue::Null),
        Value::String(t) => Ok(SqlValue::Text(t)),
        // Only integers exact in a double come as JSON numbers.
        Value::Number(n) => n
            .as_i64()
            .map(SqlValue::Integer)
            .ok_or_else(|| SqlError::Decode(format!("unexpected number {n}"))),
        Value::Object(o) => match o.get("r").and_then(Value::as_str) {
            Some(r) => r
                .parse()
                .map(SqlValue::Real)
                .map_err(|_| SqlError::Decode(format!("not a real: {r}"))),
            None => Err(SqlError::Decode(format!(
                "unsupported SQL value {}",
                Value::Object(o)
            ))),
        },
        other => Err(SqlError::Decode(format!("unsupported SQL value {other}"))),
    }
}

fn js_error(e: JsValue) -> SqlError {
    SqlError::Engine(super::bindings::error_message(&e))
}

impl Sql for DoSql {
    fn query(&self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>, SqlError> {
        let rows = query(&self.sql, sql, &params_json(params).to_string()).map_err(js_error)?;
        let rows: Value =
            serde_json::from_str(&rows).map_err(|e| SqlError::Decode(e.to_string()))?;
        let Value::Array(rows) = rows else {
            return Err(SqlError::Decode("rows are not an array".into()));
        };
        rows.into_iter()
            .map(|row| match row {
                Value::Array(cells) => cells
                    .into_iter()
                    .map(cell)
                    .collect::<Result<_, _>>()
                    .map(Row),
                _ => Err(SqlError::Decode("a row is not an array".into())),
            })
            .collect()
    }

    fn apply(&self, writes: Vec<Write>) -> Result<(), SqlError> {
        // A single statement is atomic by itself (`apply` runs it without a
        // transaction), and with no await between it and the response the
        // output gate holds the answer until it is durable (admission's hot
        // path); several run in one transactionSync, rolled back by a
        // statement that throws.
        // The statements as one text, each ended by a NUL (SQLite reads a
        // statement only up to its first NUL: none has one).
        let mut statements = String::new();
        for (statement, _) in &writes {
            debug_assert!(!statement.contains('\0'));
            statements.push_str(statement);
            statements.push('\0');
        }
        let params = Value::Array(writes.iter().map(|(_, p)| params_json(p)).collect());
        apply(&self.storage, &self.sql, &statements, &params.to_string()).map_err(js_error)
    }

    fn write_set(&self) -> &WriteSet {
        &self.write_set
    }

    fn tables(&self) -> &Tables {
        &self.tables
    }
}
