//! The one SQL seam. The store issues every query through [`Sql`]; the wasm
//! host implements it over the Durable Object's `SqlStorage`, native tests
//! over SQLite (`rusqlite`). Both speak the same SQLite dialect, so the
//! queries tested natively are the queries that run in production.

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

    pub fn opt_int(&self, i: usize) -> Result<Option<i64>, SqlError> {
        match self.column(i)? {
            SqlValue::Null => Ok(None),
            _ => self.int(i).map(Some),
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
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SqlError {
    #[error("sql engine: {0}")]
    Engine(String),
    #[error("sql decode: {0}")]
    Decode(String),
}

/// A write statement and its parameters.
pub type Write = (String, Vec<SqlValue>);

/// Synchronous SQL over one SQLite database.
///
/// A transition reads first and writes last: inside [`atomically`], writes
/// are collected and applied when the body succeeds, as one atomic batch; a
/// body that fails writes nothing. So a refused command can never leave a
/// partial write, and a transition with a single write pays for no
/// savepoint. A read after a write in the same transition is a bug and is
/// refused (it would not see the write).
pub trait Sql {
    /// Runs one statement with positional `?` parameters and returns its rows.
    fn query(&self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>, SqlError>;

    /// Applies `writes` in order, all or none.
    fn apply(&self, writes: Vec<Write>) -> Result<(), SqlError>;

    /// The write set of the transition in progress, if any.
    fn write_set(&self) -> &WriteSet;

    /// What is known of the database's tables ([`holds_group`], [`cached_read`]).
    fn tables(&self) -> &Tables;
}

/// The feature groups the database holds, and the reads kept across
/// transitions ([`cached_read`]). Only this process writes the database,
/// through [`Sql`]: both are caches SQLite can always rebuild. A feature
/// group (`store::schema::Group`) is side tables created in the transition
/// of their first write and recorded in `shiitake_meta`; `schema::open`
/// reads the records, and a transition that created a group adds it once
/// it commits (never a rolled-back one). Readers of a group the database
/// does not hold answer empty without a statement.
#[derive(Default)]
pub struct Tables {
    groups: std::cell::RefCell<std::collections::HashSet<&'static str>>,
    reads: std::cell::RefCell<Vec<CachedRead>>,
    /// Values kept per key ([`kept_for`], [`vouch`]).
    keyed: std::cell::RefCell<Vec<KeptByKey>>,
}

/// A family of values kept per key (a Session id), each what reads of
/// `tables` answered: dropped whole by a write batch naming one of them,
/// unless the batch is a single statement its keeper vouched for
/// ([`vouch`]).
struct KeptByKey {
    family: &'static str,
    tables: &'static [&'static str],
    values: std::collections::HashMap<String, std::rc::Rc<dyn std::any::Any>>,
}

/// A transition's keeper's word ([`vouch`]): its one statement changes
/// `family`'s value for `key` to `value`, and no other value of it.
struct Vouch {
    family: &'static str,
    tables: &'static [&'static str],
    key: String,
    value: std::rc::Rc<dyn std::any::Any>,
}

impl std::fmt::Debug for Vouch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vouch")
            .field("family", &self.family)
            .field("key", &self.key)
            .finish()
    }
}

/// A read of one table, kept until a write batch names the table.
struct CachedRead {
    key: &'static str,
    table: &'static str,
    value: std::rc::Rc<dyn std::any::Any>,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reads: Vec<&str> = self.reads.borrow().iter().map(|r| r.key).collect();
        let keyed: Vec<(&str, usize)> = self
            .keyed
            .borrow()
            .iter()
            .map(|k| (k.family, k.values.len()))
            .collect();
        f.debug_struct("Tables")
            .field("groups", &self.groups)
            .field("reads", &reads)
            .field("keyed", &keyed)
            .finish()
    }
}

impl Tables {
    /// The groups the database holds, as its records say (`schema::open`).
    pub fn hold_groups(&self, groups: impl IntoIterator<Item = &'static str>) {
        *self.groups.borrow_mut() = groups.into_iter().collect();
    }

    fn kept(&self, key: &str) -> Option<std::rc::Rc<dyn std::any::Any>> {
        let reads = self.reads.borrow();
        reads.iter().find(|r| r.key == key).map(|r| r.value.clone())
    }

    fn keep(&self, key: &'static str, table: &'static str, value: std::rc::Rc<dyn std::any::Any>) {
        let mut reads = self.reads.borrow_mut();
        reads.retain(|r| r.key != key);
        reads.push(CachedRead { key, table, value });
    }

    /// Drops the kept reads of every table a statement of `writes` names,
    /// and every family of kept values whose tables they name but
    /// `vouched` (the family a keeper vouched for them).
    fn forget_reads_of(&self, writes: &[Write], vouched: Option<&'static str>) {
        let named = |table: &str| writes.iter().any(|(statement, _)| names(statement, table));
        let mut reads = self.reads.borrow_mut();
        if !reads.is_empty() {
            reads.retain(|r| !named(r.table));
        }
        let mut keyed = self.keyed.borrow_mut();
        if !keyed.is_empty() {
            keyed.retain(|k| Some(k.family) == vouched || !k.tables.iter().any(|t| named(t)));
        }
    }

    /// Drops every kept read and value (a batch that alters tables).
    fn forget_all(&self) {
        self.reads.borrow_mut().clear();
        self.keyed.borrow_mut().clear();
    }

    /// After the vouched batch: its value kept once it committed, its
    /// whole family dropped when it did not (what it left is unknown).
    fn settle(&self, vouch: Vouch, committed: bool) {
        let mut keyed = self.keyed.borrow_mut();
        let at = keyed.iter().position(|k| k.family == vouch.family);
        match (at, committed) {
            (Some(at), false) => drop(keyed.swap_remove(at)),
            (None, false) => {}
            (Some(at), true) => drop(keyed[at].values.insert(vouch.key, vouch.value)),
            (None, true) => keyed.push(KeptByKey {
                family: vouch.family,
                tables: vouch.tables,
                values: [(vouch.key, vouch.value)].into(),
            }),
        }
    }
}

/// Whether `statement` names `table` (as a whole word).
fn names(statement: &str, table: &str) -> bool {
    statement
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|word| word == table)
}

/// Whether the database holds feature group `group`: recorded when
/// `schema::open` read the store, or created by a committed transition
/// since. No statement. A creation the open transition staged does not
/// count: its reads would not see the tables.
pub fn holds_group(sql: &(impl Sql + ?Sized), group: &str) -> bool {
    sql.tables().groups.borrow().contains(group)
}

/// Whether the open transition staged the creation of `group`.
pub fn stages_group(sql: &(impl Sql + ?Sized), group: &str) -> bool {
    sql.write_set().groups.borrow().contains(&group)
}

/// Stages `text`, the creation of feature group `group` with its record,
/// as a write of the open transition: the database holds the group once
/// that transition commits. Refused outside a transition: a group is
/// created with its first write, all or none.
pub fn create_group(
    sql: &(impl Sql + ?Sized),
    group: &'static str,
    text: String,
) -> Result<(), SqlError> {
    let set = sql.write_set();
    if !set.is_open() {
        return Err(SqlError::Engine(format!(
            "feature group {group}: created outside a transition"
        )));
    }
    set.groups.borrow_mut().push(group);
    write(sql, &text, Vec::new())
}

/// Whether one statement of `writes` changes or drops a table (a text may
/// hold several). A `CREATE` only adds one (a feature group's first write,
/// such as the usage ledger's with a store's first model call): it changes
/// no read of another table, and names the table it indexes.
fn alters_tables(writes: &[Write]) -> bool {
    writes
        .iter()
        .flat_map(|(text, _)| text.split(';'))
        .filter_map(|part| part.split_whitespace().next())
        .any(|first| {
            ["DROP", "ALTER"]
                .iter()
                .any(|ddl| first.eq_ignore_ascii_case(ddl))
        })
}

/// Applies `writes`, dropping the kept reads and values of the tables they
/// name, or all of them when they alter or drop a table (whether the batch
/// commits or not: a failed batch may have been partly seen). A keeper's
/// `vouch` holds for a batch of one statement: its family stays, with the
/// vouched value once the statement commits; for more it is dropped too.
fn apply(
    sql: &(impl Sql + ?Sized),
    writes: Vec<Write>,
    vouch: Option<Vouch>,
) -> Result<(), SqlError> {
    let catalog = sql.tables();
    let vouch = vouch.filter(|_| writes.len() == 1 && !alters_tables(&writes));
    if alters_tables(&writes) {
        catalog.forget_all();
    } else {
        catalog.forget_reads_of(&writes, vouch.as_ref().map(|v| v.family));
    }
    let result = sql.apply(writes);
    if let Some(vouch) = vouch {
        catalog.settle(vouch, result.is_ok());
    }
    result
}

/// `read()`, a read of `table` alone, kept under `key` until a write batch
/// naming `table` (or altering tables) is applied: for small reads a turn repeats
/// while the table rarely changes (the extensions' status rows and
/// timers). Refused, like [`read_beside`], in a transition that wrote
/// `table` already; a transition's deferred writes of other tables leave
/// the kept value what SQLite would answer.
pub fn cached_read<T: 'static>(
    sql: &(impl Sql + ?Sized),
    key: &'static str,
    table: &'static str,
    read: impl FnOnce() -> Result<T, SqlError>,
) -> Result<std::rc::Rc<T>, SqlError> {
    sql.write_set().check_read_beside(&[table], key)?;
    let catalog = sql.tables();
    if let Some(value) = catalog.kept(key).and_then(|v| v.downcast::<T>().ok()) {
        return Ok(value);
    }
    let value = std::rc::Rc::new(read()?);
    catalog.keep(key, table, value.clone());
    Ok(value)
}

/// The value kept for `key` in `family` ([`vouch`]), if any: what reads of
/// the family's tables would answer, since every write batch naming them
/// dropped the family unless its keeper vouched for the batch. None in a
/// transition that wrote one of them already.
pub fn kept_for<T: 'static>(
    sql: &(impl Sql + ?Sized),
    family: &str,
    key: &str,
) -> Option<std::rc::Rc<T>> {
    let keyed = sql.tables().keyed.borrow();
    let kept = keyed.iter().find(|k| k.family == family)?;
    sql.write_set()
        .check_read_beside(kept.tables, family)
        .ok()?;
    kept.values.get(key)?.clone().downcast::<T>().ok()
}

/// A keeper's word for the open transition: if its writes are one
/// statement, they change `family`'s value for `key` to `value` (what reads
/// of `tables` would answer after them) and no other value of the family,
/// which stays kept. Writes of more statements drop the family as any
/// write naming `tables` does. Refused outside a transition.
pub fn vouch<T: 'static>(
    sql: &(impl Sql + ?Sized),
    family: &'static str,
    tables: &'static [&'static str],
    key: &str,
    value: T,
) -> Result<(), SqlError> {
    let set = sql.write_set();
    if !set.is_open() {
        return Err(SqlError::Engine(format!(
            "kept values {family}: vouched for outside a transition"
        )));
    }
    *set.vouched.borrow_mut() = Some(Vouch {
        family,
        tables,
        key: key.to_owned(),
        value: std::rc::Rc::new(value),
    });
    Ok(())
}

/// Collects the writes of one transition.
#[derive(Debug, Default)]
pub struct WriteSet {
    /// `Some` while a transition is open.
    writes: std::cell::RefCell<Option<Vec<Write>>>,
    /// Counts the transitions begun, so a cache of one transition's reads
    /// (`extension`'s) knows it is stale.
    generation: std::cell::Cell<u64>,
    /// The feature groups the open transition creates ([`create_group`]).
    groups: std::cell::RefCell<Vec<&'static str>>,
    /// The open transition's keeper's word ([`vouch`]).
    vouched: std::cell::RefCell<Option<Vouch>>,
}

impl WriteSet {
    fn begin(&self) {
        let mut w = self.writes.borrow_mut();
        assert!(w.is_none(), "transitions do not nest");
        *w = Some(Vec::new());
        self.groups.borrow_mut().clear();
        *self.vouched.borrow_mut() = None;
        self.generation.set(self.generation.get() + 1);
    }

    /// The open transition's number (the last one's when none is open).
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    /// Whether a transition is open.
    pub fn is_open(&self) -> bool {
        self.writes.borrow().is_some()
    }

    /// Whether a read of `tables` may run now: no write of the open
    /// transition names any of them.
    fn check_read_beside(&self, tables: &[&str], sql: &str) -> Result<(), SqlError> {
        let writes = self.writes.borrow();
        let Some(writes) = &*writes else {
            return Ok(());
        };
        let touches = |statement: &str| tables.iter().any(|t| names(statement, t));
        match writes.iter().find(|(statement, _)| touches(statement)) {
            Some((statement, _)) => Err(SqlError::Engine(format!(
                "read of a table this transition wrote ({statement}): {sql}"
            ))),
            None => Ok(()),
        }
    }

    /// Ends the open transition: its writes, the groups they create and
    /// its keeper's word.
    fn take(&self) -> (Vec<Write>, Vec<&'static str>, Option<Vouch>) {
        let writes = self.writes.borrow_mut().take().unwrap_or_default();
        (
            writes,
            std::mem::take(&mut *self.groups.borrow_mut()),
            self.vouched.borrow_mut().take(),
        )
    }

    /// Whether a read may run now: not after a write of the open transition.
    fn check_read(&self, sql: &str) -> Result<(), SqlError> {
        match &*self.writes.borrow() {
            Some(w) if !w.is_empty() => Err(SqlError::Engine(format!(
                "read after write in one transition: {sql}"
            ))),
            _ => Ok(()),
        }
    }

    /// Queues the write when a transition is open; hands it back otherwise.
    fn defer(&self, write: Write) -> Option<Write> {
        match &mut *self.writes.borrow_mut() {
            Some(w) => {
                w.push(write);
                None
            }
            None => Some(write),
        }
    }
}

/// Reads through `sql`, refusing a read after a write of the open transition.
pub fn read(
    sql: &(impl Sql + ?Sized),
    query: &str,
    params: &[SqlValue],
) -> Result<Vec<Row>, SqlError> {
    sql.write_set().check_read(query)?;
    sql.query(query, params)
}

/// Reads `tables` through `sql` in a transition that may already have
/// written others: refused only when one of its writes names one of
/// `tables` (the read would not see it). For tables a transition writes
/// last, after caching what it read (extension state, `src/extension/`).
pub fn read_beside(
    sql: &(impl Sql + ?Sized),
    tables: &[&str],
    query: &str,
    params: &[SqlValue],
) -> Result<Vec<Row>, SqlError> {
    sql.write_set().check_read_beside(tables, query)?;
    sql.query(query, params)
}

/// Writes through `sql`: deferred to the end of the open transition, or
/// applied at once outside one.
pub fn write(
    sql: &(impl Sql + ?Sized),
    statement: &str,
    params: Vec<SqlValue>,
) -> Result<(), SqlError> {
    match sql.write_set().defer((statement.to_owned(), params)) {
        None => Ok(()),
        Some(w) => apply(sql, vec![w], None),
    }
}

/// One write that answers rows (`RETURNING`), applied at once as a
/// transition of its own (a statement is atomic by itself): refused while
/// a transition is open, whose writes wait for its end. Drops the kept
/// reads of the tables it names, as [`apply`] does.
pub fn write_returning(
    sql: &(impl Sql + ?Sized),
    statement: &str,
    params: &[SqlValue],
) -> Result<Vec<Row>, SqlError> {
    if sql.write_set().is_open() {
        return Err(SqlError::Engine(format!(
            "a returning write inside a transition: {statement}"
        )));
    }
    sql.tables()
        .forget_reads_of(&[(statement.to_owned(), Vec::new())], None);
    sql.query(statement, params)
}

/// Runs `body` as one transition and hands back its own result or error.
/// Its writes apply together when it succeeds; a domain error (for example a
/// full queue) writes nothing. The groups it created are held once its
/// writes committed.
pub fn atomically<S, T, E>(sql: &S, body: impl FnOnce() -> Result<T, E>) -> Result<T, E>
where
    S: Sql + ?Sized,
    E: From<SqlError>,
{
    sql.write_set().begin();
    let result = body();
    let (writes, groups, vouch) = sql.write_set().take();
    let value = result?;
    if !writes.is_empty() {
        apply(sql, writes, vouch)?;
    }
    sql.tables().groups.borrow_mut().extend(groups);
    Ok(value)
}

#[cfg(not(target_arch = "wasm32"))]
pub mod native {
    //! SQLite through `rusqlite`, for native tests and tools.
    use super::{Row, Sql, SqlError, SqlValue, Tables, Write, WriteSet};
    use rusqlite::types::{Value, ValueRef};

    pub struct NativeSql {
        conn: rusqlite::Connection,
        write_set: WriteSet,
        tables: Tables,
        statements: std::cell::Cell<u64>,
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

        /// Rows inserted, updated or deleted on this connection since it
        /// was opened (SQLite's `total_changes`), for benchmarks.
        pub fn total_changes(&self) -> u64 {
            self.conn.total_changes()
        }

        /// Statements run through [`Sql`] since it was opened (a read, or
        /// one write of a batch), as a Durable Object counts `sql.exec`
        /// calls: for tests and benchmarks.
        pub fn statements(&self) -> u64 {
            self.statements.get()
        }

        fn from_connection(conn: rusqlite::Connection) -> Self {
            NativeSql {
                conn,
                write_set: WriteSet::default(),
                tables: Tables::default(),
                statements: std::cell::Cell::new(0),
            }
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
            self.statements.set(self.statements.get() + 1);
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

        fn apply(&self, writes: Vec<Write>) -> Result<(), SqlError> {
            self.conn.execute_batch("BEGIN IMMEDIATE").map_err(engine)?;
            for (statement, params) in &writes {
                self.statements.set(self.statements.get() + 1);
                let params: Vec<Value> = params.iter().map(to_value).collect();
                // A text without parameters may hold several statements (the
                // schema), as the Durable Object's `exec` allows.
                let done = if params.is_empty() {
                    self.conn.execute_batch(statement).map(|()| 0)
                } else {
                    self.conn
                        .prepare_cached(statement)
                        .and_then(|mut s| s.execute(rusqlite::params_from_iter(params.iter())))
                };
                if let Err(e) = done {
                    self.conn.execute_batch("ROLLBACK").map_err(engine)?;
                    return Err(engine(e));
                }
            }
            self.conn.execute_batch("COMMIT").map_err(engine)
        }

        fn write_set(&self) -> &WriteSet {
            &self.write_set
        }

        fn tables(&self) -> &Tables {
            &self.tables
        }
    }
}

#[cfg(test)]
mod tests {
    use super::native::NativeSql;
    use super::*;

    fn count(sql: &NativeSql) -> i64 {
        read(sql, "SELECT count(*) FROM t", &[]).unwrap()[0]
            .int(0)
            .unwrap()
    }

    #[test]
    fn a_transition_applies_all_writes_or_none() {
        let sql = NativeSql::open_in_memory();
        write(&sql, "CREATE TABLE t (x INTEGER UNIQUE)", vec![]).unwrap();
        let ok: Result<(), SqlError> = atomically(&sql, || {
            write(&sql, "INSERT INTO t VALUES (?)", vec![1.into()])?;
            write(&sql, "INSERT INTO t VALUES (?)", vec![2.into()])
        });
        ok.unwrap();
        assert_eq!(count(&sql), 2);
        // A failing body writes nothing, even after queuing writes.
        let refused: Result<(), SqlError> = atomically(&sql, || {
            write(&sql, "INSERT INTO t VALUES (?)", vec![3.into()])?;
            Err(SqlError::Engine("refused".into()))
        });
        assert!(refused.is_err());
        assert_eq!(count(&sql), 2);
        // A failing statement rolls back the statements before it.
        let clash: Result<(), SqlError> = atomically(&sql, || {
            write(&sql, "INSERT INTO t VALUES (?)", vec![4.into()])?;
            write(&sql, "INSERT INTO t VALUES (?)", vec![1.into()])
        });
        assert!(clash.is_err());
        assert_eq!(count(&sql), 2);
    }

    #[test]
    fn a_read_after_a_write_in_one_transition_is_refused() {
        let sql = NativeSql::open_in_memory();
        write(&sql, "CREATE TABLE t (x INTEGER)", vec![]).unwrap();
        let r: Result<(), SqlError> = atomically(&sql, || {
            write(&sql, "INSERT INTO t VALUES (1)", vec![])?;
            read(&sql, "SELECT x FROM t", &[]).map(drop)
        });
        assert!(matches!(r, Err(SqlError::Engine(m)) if m.contains("read after write")));
        assert_eq!(count(&sql), 0);
    }

    #[test]
    fn a_read_beside_the_written_tables_is_allowed_and_of_them_refused() {
        let sql = NativeSql::open_in_memory();
        write(&sql, "CREATE TABLE t (x INTEGER)", vec![]).unwrap();
        write(&sql, "CREATE TABLE t_2 (x INTEGER)", vec![]).unwrap();
        let before = sql.write_set().generation();
        let r: Result<(), SqlError> = atomically(&sql, || {
            write(&sql, "INSERT INTO t_2 VALUES (1)", vec![])?;
            // `t` is not `t_2`: whole identifiers are compared.
            assert!(read_beside(&sql, &["t"], "SELECT x FROM t", &[]).is_ok());
            read_beside(&sql, &["t_2"], "SELECT x FROM t_2", &[]).map(drop)
        });
        assert!(matches!(r, Err(SqlError::Engine(m)) if m.contains("table this transition wrote")));
        assert_eq!(sql.write_set().generation(), before + 1);
    }

    const GROUP_T: &str = "CREATE TABLE t (x INTEGER UNIQUE)";

    fn table_exists(sql: &NativeSql, table: &str) -> bool {
        !sql.query(
            "SELECT 1 FROM sqlite_master WHERE name = ?",
            &[table.into()],
        )
        .unwrap()
        .is_empty()
    }

    #[test]
    fn a_group_is_held_once_the_transition_creating_it_commits() {
        let sql = NativeSql::open_in_memory();
        // Only with its first write, in a transition.
        let outside = create_group(&sql, "g", GROUP_T.into());
        assert!(matches!(outside, Err(SqlError::Engine(m)) if m.contains("outside a transition")));
        // A refused transition and a failed batch create nothing, and the
        // group is not held; within the transition it is staged, not held.
        let refused: Result<(), SqlError> = atomically(&sql, || {
            create_group(&sql, "g", GROUP_T.into())?;
            assert!(stages_group(&sql, "g") && !holds_group(&sql, "g"));
            write(&sql, "INSERT INTO t VALUES (1)", vec![])?;
            Err(SqlError::Engine("refused".into()))
        });
        assert!(refused.is_err());
        let failed = atomically(&sql, || {
            create_group(&sql, "g", GROUP_T.into())?;
            write(&sql, "INSERT INTO t VALUES (1)", vec![])?;
            write(&sql, "INSERT INTO t VALUES (1)", vec![])
        });
        assert!(failed.is_err());
        assert!(!holds_group(&sql, "g") && !stages_group(&sql, "g"));
        assert!(!table_exists(&sql, "t"));
        atomically(&sql, || {
            create_group(&sql, "g", GROUP_T.into())?;
            write(&sql, "INSERT INTO t VALUES (1)", vec![])
        })
        .unwrap();
        assert!(holds_group(&sql, "g") && !stages_group(&sql, "g"));
        assert_eq!(count(&sql), 1);
        // What the store's records say replaces what was held.
        sql.tables().hold_groups(["h"]);
        assert!(!holds_group(&sql, "g") && holds_group(&sql, "h"));
    }

    /// `SELECT count(*) FROM t` through `cached_read`, and how many times
    /// it reached SQLite.
    fn kept_count(sql: &NativeSql, reads: &std::cell::Cell<u32>) -> Result<i64, SqlError> {
        let n = cached_read(sql, "count of t", "t", || {
            reads.set(reads.get() + 1);
            Ok(count(sql))
        })?;
        Ok(*n)
    }

    #[test]
    fn a_kept_read_lasts_until_a_batch_names_its_table() {
        let sql = NativeSql::open_in_memory();
        write(&sql, "CREATE TABLE t (x INTEGER)", vec![]).unwrap();
        write(&sql, "CREATE TABLE t_2 (x INTEGER)", vec![]).unwrap();
        let reads = std::cell::Cell::new(0);
        assert_eq!(kept_count(&sql, &reads).unwrap(), 0);
        assert_eq!(kept_count(&sql, &reads).unwrap(), 0);
        assert_eq!(reads.get(), 1, "the second read is kept");
        // Another table (`t_2` is not `t`) leaves it.
        write(&sql, "INSERT INTO t_2 VALUES (1)", vec![]).unwrap();
        assert_eq!(kept_count(&sql, &reads).unwrap(), 0);
        assert_eq!(reads.get(), 1);
        // A committed write of `t` drops it: the next read sees the row.
        atomically(&sql, || write(&sql, "INSERT INTO t VALUES (1)", vec![])).unwrap();
        assert_eq!(kept_count(&sql, &reads).unwrap(), 1);
        assert_eq!(reads.get(), 2);
        // A refused transition wrote nothing: the kept value stands.
        let refused: Result<(), SqlError> = atomically(&sql, || {
            write(&sql, "INSERT INTO t VALUES (2)", vec![])?;
            Err(SqlError::Engine("refused".into()))
        });
        assert!(refused.is_err());
        assert_eq!(kept_count(&sql, &reads).unwrap(), 1);
        assert_eq!(reads.get(), 2);
        // A failed batch naming `t` drops it (whatever it did is re-read).
        let failed = atomically(&sql, || {
            write(&sql, "INSERT INTO t VALUES (3)", vec![])?;
            write(&sql, "INSERT INTO no_such_table VALUES (3)", vec![])
        });
        assert!(failed.is_err());
        assert_eq!(kept_count(&sql, &reads).unwrap(), 1);
        assert_eq!(reads.get(), 3);
        // Creating another table leaves it; altering one drops every kept read.
        write(&sql, "CREATE TABLE t_3 (x INTEGER)", vec![]).unwrap();
        assert_eq!(kept_count(&sql, &reads).unwrap(), 1);
        assert_eq!(reads.get(), 3);
        write(&sql, "ALTER TABLE t_3 ADD COLUMN y INTEGER", vec![]).unwrap();
        assert_eq!(kept_count(&sql, &reads).unwrap(), 1);
        assert_eq!(reads.get(), 4);
    }

    #[test]
    fn a_kept_read_is_refused_after_its_table_is_written_in_the_transition() {
        let sql = NativeSql::open_in_memory();
        write(&sql, "CREATE TABLE t (x INTEGER)", vec![]).unwrap();
        write(&sql, "CREATE TABLE t_2 (x INTEGER)", vec![]).unwrap();
        let reads = std::cell::Cell::new(0);
        kept_count(&sql, &reads).unwrap();
        let r: Result<(), SqlError> = atomically(&sql, || {
            write(&sql, "INSERT INTO t_2 VALUES (1)", vec![])?;
            assert_eq!(kept_count(&sql, &reads)?, 0, "beside another table's write");
            write(&sql, "INSERT INTO t VALUES (1)", vec![])?;
            kept_count(&sql, &reads).map(drop)
        });
        assert!(matches!(r, Err(SqlError::Engine(m)) if m.contains("table this transition wrote")));
        assert_eq!(reads.get(), 1);
    }

    const FAMILY: &str = "test family";
    const FAMILY_TABLES: &[&str] = &["t"];

    fn kept(sql: &NativeSql, key: &str) -> Option<i64> {
        kept_for::<i64>(sql, FAMILY, key).map(|v| *v)
    }

    /// One insert into `t` vouched to set `key`'s kept value to `value`.
    fn vouched_insert(sql: &NativeSql, key: &str, value: i64, x: i64) -> Result<(), SqlError> {
        atomically(sql, || {
            write(sql, "INSERT INTO t VALUES (?)", vec![x.into()])?;
            vouch(sql, FAMILY, FAMILY_TABLES, key, value)
        })
    }

    #[test]
    fn a_vouched_single_write_keeps_its_family_and_sets_its_value() {
        let sql = NativeSql::open_in_memory();
        write(&sql, "CREATE TABLE t (x INTEGER UNIQUE)", vec![]).unwrap();
        write(&sql, "CREATE TABLE t_2 (x INTEGER)", vec![]).unwrap();
        assert_eq!(kept(&sql, "a"), None);
        vouched_insert(&sql, "a", 1, 1).unwrap();
        vouched_insert(&sql, "b", 2, 2).unwrap();
        assert_eq!((kept(&sql, "a"), kept(&sql, "b")), (Some(1), Some(2)));
        // A write of another table leaves the family.
        write(&sql, "INSERT INTO t_2 VALUES (1)", vec![]).unwrap();
        assert_eq!(kept(&sql, "a"), Some(1));
        // A vouched write that fails drops the whole family: what it left is
        // not known.
        assert!(vouched_insert(&sql, "a", 3, 1).is_err(), "x is unique");
        assert_eq!((kept(&sql, "a"), kept(&sql, "b")), (None, None));
    }

    #[test]
    fn any_unvouched_write_of_its_tables_drops_the_family() {
        let sql = NativeSql::open_in_memory();
        write(&sql, "CREATE TABLE t (x INTEGER)", vec![]).unwrap();
        write(&sql, "CREATE TABLE t_2 (x INTEGER)", vec![]).unwrap();
        let fill = |sql: &NativeSql| {
            vouched_insert(sql, "a", 1, 1).unwrap();
            assert_eq!(kept(sql, "a"), Some(1));
        };
        fill(&sql);
        write(&sql, "DELETE FROM t WHERE x = 5", vec![]).unwrap();
        assert_eq!(kept(&sql, "a"), None, "a write outside a transition");
        fill(&sql);
        // Vouched, but two statements: the word holds for one only.
        atomically(&sql, || {
            write(&sql, "INSERT INTO t VALUES (2)", vec![])?;
            write(&sql, "INSERT INTO t_2 VALUES (2)", vec![])?;
            vouch(&sql, FAMILY, FAMILY_TABLES, "a", 9_i64)
        })
        .unwrap();
        assert_eq!(kept(&sql, "a"), None, "a batch of two");
        fill(&sql);
        write_returning(&sql, "DELETE FROM t WHERE x = 7 RETURNING x", &[]).unwrap();
        assert_eq!(kept(&sql, "a"), None, "a returning write");
        fill(&sql);
        write(&sql, "ALTER TABLE t_2 ADD COLUMN y INTEGER", vec![]).unwrap();
        assert_eq!(kept(&sql, "a"), None, "altering any table");
        // Inside a transition that wrote its table, nothing is kept (a
        // read would not see the write either); beside another, it is.
        fill(&sql);
        let r: Result<(), SqlError> = atomically(&sql, || {
            write(&sql, "INSERT INTO t_2 (x) VALUES (3)", vec![])?;
            assert_eq!(kept(&sql, "a"), Some(1));
            write(&sql, "INSERT INTO t VALUES (3)", vec![])?;
            assert_eq!(kept(&sql, "a"), None);
            Ok(())
        });
        r.unwrap();
        assert!(
            vouch(&sql, FAMILY, FAMILY_TABLES, "a", 1_i64).is_err(),
            "outside a transition"
        );
    }
}
