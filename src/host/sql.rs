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
                // JSON has no number for an infinity or NaN: its JS name.
                SqlValue::Real(r) if r.is_nan() => json!({"r": "NaN"}),
                SqlValue::Real(r) if r.is_infinite() => {
                    json!({"r": if *r > 0.0 { "Infinity" } else { "-Infinity" }})
                }
                SqlValue::Real(r) => Value::from(*r),
                SqlValue::Text(t) => Value::from(t.as_str()),
            })
            .collect(),
    )
}

/// One cell of a row `js/do/sql.mjs` answered.
fn cell(v: Value) -> Result<SqlValue, SqlError> {
    let unsupported = |what: &str| SqlError::Decode(format!("unsupported SQL value {what}"));
    match v {
        Value::Null => Ok(SqlValue::Null),
        Value::String(t) => Ok(SqlValue::Text(t)),
        // Only integers exact in a double come as JSON numbers.
        Value::Number(n) => n
            .as_i64()
            .map(SqlValue::Integer)
            .ok_or_else(|| unsupported("number")),
        Value::Object(o) => match (o.get("r"), o.get("u")) {
            // Its IEEE 754 bits, high and low: exact, with no float parser.
            (Some(Value::Array(bits)), _) => match bits.as_slice() {
                [Value::Number(hi), Value::Number(lo)] => match (hi.as_u64(), lo.as_u64()) {
                    (Some(hi), Some(lo)) => Ok(SqlValue::Real(f64::from_bits(hi << 32 | lo))),
                    _ => Err(unsupported("real")),
                },
                _ => Err(unsupported("real")),
            },
            (_, Some(Value::String(u))) => Err(unsupported(u)),
            _ => Err(unsupported("object")),
        },
        _ => Err(unsupported("of another JSON type")),
    }
}

/// JSON text of a value built here (it has string keys only: cannot fail).
fn text(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn js_error(e: JsValue) -> SqlError {
    SqlError::Engine(super::bindings::error_message(&e))
}

impl Sql for DoSql {
    fn query(&self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>, SqlError> {
        let rows = query(&self.sql, sql, &text(&params_json(params))).map_err(js_error)?;
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
        apply(&self.storage, &self.sql, &statements, &text(&params)).map_err(js_error)
    }

    fn write_set(&self) -> &WriteSet {
        &self.write_set
    }

    fn tables(&self) -> &Tables {
        &self.tables
    }
}
