//! The one SQL seam. The store issues every query through [`Sql`]; the wasm
//! host implements it over the Durable Object's `SqlStorage`, native tests
//! over SQLite (`rusqlite`). Both speak the same SQLite dialect, so the
//! queries tested natively are the queries that run in production.

use std::fmt;

/// A SQLite value, as bound to a parameter or read from a column.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
}

impl From<i64> for SqlValue {
    fn from(v: i64) -> Self {
        SqlValue::Integer(v)
    }
}

impl From<&str> for SqlValue {
    fn from(v: &str) -> Self {
        SqlValue::Text(v.to_owned())
    }
}

impl From<String> for SqlValue {
    fn from(v: String) -> Self {
        SqlValue::Text(v)
    }
}

impl<T: Into<SqlValue>> From<Option<T>> for SqlValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(SqlValue::Null, Into::into)
    }
}

/// One result row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub Vec<SqlValue>);

impl Row {
    fn column(&self, i: usize) -> Result<&SqlValue, SqlError> {
        self.0
            .get(i)
            .ok_or_else(|| SqlError::Decode(format!("no column {i}")))
    }

    pub fn int(&self, i: usize) -> Result<i64, SqlError> {
        match self.column(i)? {
            SqlValue::Integer(v) => Ok(*v),
            // The DO runtime hands every number to JS as a double; integral
            // doubles come back through the host as Real only if it chose so.
            SqlValue::Real(v) if v.fract() == 0.0 => Ok(*v as i64),
            other => Err(SqlError::Decode(format!(
                "column {i}: expected integer, got {other:?}"
            ))),
        }
    }

    pub fn text(&self, i: usize) -> Result<String, SqlError> {
        match self.column(i)? {
            SqlValue::Text(v) => Ok(v.clone()),
            other => Err(SqlError::Decode(format!(
                "column {i}: expected text, got {other:?}"
            ))),
        }
    }

    pub fn opt_text(&self, i: usize) -> Result<Option<String>, SqlError> {
        match self.column(i)? {
            SqlValue::Null => Ok(None),
            _ => self.text(i).map(Some),
        }
    }
}

/// A failure of the SQL engine or of decoding its answer. These are bugs or
/// infrastructure faults, never the caller's input.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlError {
    Engine(String),
    Decode(String),
    /// The transaction body asked for a rollback; carries no data of its own.
    RolledBack,
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlError::Engine(m) => write!(f, "sql engine: {m}"),
            SqlError::Decode(m) => write!(f, "sql decode: {m}"),
            SqlError::RolledBack => write!(f, "transaction rolled back"),
        }
    }
}

impl std::error::Error for SqlError {}

/// Synchronous SQL over one SQLite database.
pub trait Sql {
    /// Runs one statement with positional `?` parameters and returns its rows.
    fn query(&self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>, SqlError>;

    /// Runs `body` atomically: every write it makes commits together, or, when
    /// it returns an error, none does.
    fn transaction(&self, body: &mut dyn FnMut() -> Result<(), SqlError>) -> Result<(), SqlError>;
}

/// Runs `body` in one transaction and hands back its own result or error.
/// A domain error (for example a full queue) rolls back like a SQL error.
pub fn atomically<S, T, E>(sql: &S, body: impl FnOnce() -> Result<T, E>) -> Result<T, E>
where
    S: Sql + ?Sized,
    E: From<SqlError>,
{
    let mut body = Some(body);
    let mut outcome: Option<Result<T, E>> = None;
    let run = sql.transaction(&mut || {
        let f = body.take().expect("transaction body runs once");
        let result = f();
        let failed = result.is_err();
        outcome = Some(result);
        if failed {
            Err(SqlError::RolledBack)
        } else {
            Ok(())
        }
    });
    match (run, outcome) {
        (_, Some(Err(e))) => Err(e),
        (Err(e), _) => Err(e.into()),
        (Ok(()), Some(Ok(v))) => Ok(v),
        (Ok(()), None) => Err(SqlError::Engine("transaction body did not run".into()).into()),
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub mod native {
    //! SQLite through `rusqlite`, for native tests and tools.
    use super::{Row, Sql, SqlError, SqlValue};
    use rusqlite::types::{Value, ValueRef};

    pub struct NativeSql {
        conn: rusqlite::Connection,
    }

    impl NativeSql {
        pub fn open_in_memory() -> Self {
            Self::from_connection(rusqlite::Connection::open_in_memory().expect("open sqlite"))
        }

        pub fn open(path: &std::path::Path) -> Result<Self, SqlError> {
            rusqlite::Connection::open(path)
                .map(Self::from_connection)
                .map_err(|e| SqlError::Engine(e.to_string()))
        }

        fn from_connection(conn: rusqlite::Connection) -> Self {
            NativeSql { conn }
        }
    }

    fn to_value(v: &SqlValue) -> Value {
        match v {
            SqlValue::Null => Value::Null,
            SqlValue::Integer(i) => Value::Integer(*i),
            SqlValue::Real(r) => Value::Real(*r),
            SqlValue::Text(t) => Value::Text(t.clone()),
        }
    }

    fn engine(e: rusqlite::Error) -> SqlError {
        SqlError::Engine(e.to_string())
    }

    impl Sql for NativeSql {
        fn query(&self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>, SqlError> {
            let mut stmt = self.conn.prepare_cached(sql).map_err(engine)?;
            let columns = stmt.column_count();
            let params: Vec<Value> = params.iter().map(to_value).collect();
            let mut rows = stmt
                .query(rusqlite::params_from_iter(params.iter()))
                .map_err(engine)?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().map_err(engine)? {
                let mut values = Vec::with_capacity(columns);
                for i in 0..columns {
                    values.push(match row.get_ref(i).map_err(engine)? {
                        ValueRef::Null => SqlValue::Null,
                        ValueRef::Integer(v) => SqlValue::Integer(v),
                        ValueRef::Real(v) => SqlValue::Real(v),
                        ValueRef::Text(v) => SqlValue::Text(String::from_utf8_lossy(v).into()),
                        ValueRef::Blob(_) => {
                            return Err(SqlError::Decode("blob columns are not used".into()))
                        }
                    });
                }
                out.push(Row(values));
            }
            Ok(out)
        }

        fn transaction(
            &self,
            body: &mut dyn FnMut() -> Result<(), SqlError>,
        ) -> Result<(), SqlError> {
            self.conn.execute_batch("BEGIN IMMEDIATE").map_err(engine)?;
            match body() {
                Ok(()) => self.conn.execute_batch("COMMIT").map_err(engine),
                Err(e) => {
                    self.conn.execute_batch("ROLLBACK").map_err(engine)?;
                    Err(e)
                }
            }
        }
    }
}
