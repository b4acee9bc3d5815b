//! [`Sql`] over the Durable Object's `ctx.storage.sql`, with
//! `ctx.storage.transactionSync` for atomic, rolled-back-on-error writes.

use super::bindings::DurableObjectStorage;
use crate::sql::{Row, Sql, SqlError, SqlValue, Tables, Write, WriteSet};
use js_sys::{Array, Function, Reflect};
use wasm_bindgen::prelude::*;

pub struct DoSql {
    pub storage: DurableObjectStorage,
    sql: JsValue,
    exec: Function,
    write_set: WriteSet,
    tables: Tables,
}

impl DoSql {
    pub fn from_state(state: &JsValue) -> Result<Self, JsValue> {
        let storage = Reflect::get(state, &"storage".into())?;
        let sql = Reflect::get(&storage, &"sql".into())?;
        let exec: Function = Reflect::get(&sql, &"exec".into())?.dyn_into()?;
        Ok(DoSql {
            storage: storage.unchecked_into(),
            sql,
            exec,
            write_set: WriteSet::default(),
            tables: Tables::default(),
        })
    }
}

fn to_js(v: &SqlValue) -> JsValue {
    match v {
        SqlValue::Null => JsValue::NULL,
        SqlValue::Integer(i) => JsValue::from_f64(*i as f64),
        SqlValue::Real(r) => JsValue::from_f64(*r),
        SqlValue::Text(t) => JsValue::from_str(t),
    }
}

fn from_js(v: JsValue) -> Result<SqlValue, SqlError> {
    // Each test is a call into JS: the commonest types first.
    if let Some(s) = v.as_string() {
        Ok(SqlValue::Text(s))
    } else if let Some(n) = v.as_f64() {
        // SQLite integers arrive as JS numbers; our integers stay below 2^53.
        if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
            Ok(SqlValue::Integer(n as i64))
        } else {
            Ok(SqlValue::Real(n))
        }
    } else if v.is_null_or_undefined() {
        Ok(SqlValue::Null)
    } else {
        Err(SqlError::Decode(format!("unsupported SQL value {v:?}")))
    }
}

fn js_error(e: JsValue) -> SqlError {
    SqlError::Engine(super::bindings::error_message(&e))
}

impl DoSql {
    fn exec(&self, sql: &str, params: &[SqlValue]) -> Result<JsValue, SqlError> {
        let args = Array::new_with_length(params.len() as u32 + 1);
        args.set(0, JsValue::from_str(sql));
        for (i, p) in params.iter().enumerate() {
            args.set(i as u32 + 1, to_js(p));
        }
        self.exec.apply(&self.sql, &args).map_err(js_error)
    }
}

impl Sql for DoSql {
    fn query(&self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>, SqlError> {
        let cursor = self.exec(sql, params)?;
        let raw: Function = Reflect::get(&cursor, &"raw".into())
            .map_err(js_error)?
            .dyn_into()
            .map_err(js_error)?;
        let rows = Array::from(&raw.call0(&cursor).map_err(js_error)?);
        let mut out = Vec::with_capacity(rows.length() as usize);
        for row in rows.iter() {
            // raw() yields each row as an Array: no copy of it.
            let row: Array = row.unchecked_into();
            out.push(Row(row.iter().map(from_js).collect::<Result<_, _>>()?));
        }
        Ok(out)
    }

    fn apply(&self, writes: Vec<Write>) -> Result<(), SqlError> {
        // A single statement is atomic by itself, and with no await between
        // it and the response the output gate holds the answer until it is
        // durable: no savepoint needed (admission's hot path).
        if let [(statement, params)] = writes.as_slice() {
            return self.exec(statement, params).map(drop);
        }
        let mut failure: Option<SqlError> = None;
        let result = self.storage.transaction_sync(&mut || {
            for (statement, params) in &writes {
                if let Err(e) = self.exec(statement, params) {
                    failure = Some(e);
                    // Throwing makes transactionSync roll back every write.
                    return Err(JsValue::from_str("shiitake: rollback"));
                }
            }
            Ok(())
        });
        match (result, failure) {
            (_, Some(e)) => Err(e),
            (Err(e), None) => Err(js_error(e)),
            (Ok(_), None) => Ok(()),
        }
    }

    fn write_set(&self) -> &WriteSet {
        &self.write_set
    }

    fn tables(&self) -> &Tables {
        &self.tables
    }
}
