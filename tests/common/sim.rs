//! What the native simulators share (`tests/driver.rs`, `tests/schedule.rs`,
//! `tests/mail.rs`): an SQLite store whose process dies after a chosen
//! number of durable transitions, and ids unique per Agent.

use shiitake::ctx::IdSource;
use shiitake::sql::native::NativeSql;
use shiitake::sql::{Row, Sql, SqlError, SqlValue, Tables, Write, WriteSet};
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;

/// Durable transitions committed so far, and the count at which the next
/// commit fails as a crash (shared by every Agent of a simulated fleet).
#[derive(Default)]
pub struct Clock {
    pub commits: Cell<usize>,
    pub crash_at: Cell<Option<usize>>,
}

/// One process's store: every commit counted; once a commit crashed,
/// every later one fails too, until a new process opens the file.
pub struct Db {
    inner: NativeSql,
    pub clock: Rc<Clock>,
    pub crashed: Cell<bool>,
}

impl Db {
    pub fn open(path: &Path, clock: &Rc<Clock>) -> Db {
        Db {
            inner: NativeSql::open(path).unwrap(),
            clock: Rc::clone(clock),
            crashed: Cell::new(false),
        }
    }
}

impl Sql for Db {
    fn query(&self, sql: &str, params: &[SqlValue]) -> Result<Vec<Row>, SqlError> {
        self.inner.query(sql, params)
    }

    fn apply(&self, writes: Vec<Write>) -> Result<(), SqlError> {
        if self.crashed.get() || self.clock.crash_at.get() == Some(self.clock.commits.get()) {
            self.crashed.set(true);
            return Err(SqlError::Engine("the process crashed".into()));
        }
        self.inner.apply(writes)?;
        self.clock.commits.set(self.clock.commits.get() + 1);
        Ok(())
    }

    fn write_set(&self) -> &WriteSet {
        self.inner.write_set()
    }

    fn tables(&self) -> &Tables {
        self.inner.tables()
    }
}

/// The process died: everything in memory is gone.
#[derive(Debug)]
pub struct Crashed;

/// Ids unique across the Agents of a test (each has its own prefix).
pub struct Ids {
    pub agent: String,
    pub next: u64,
}

impl IdSource for Ids {
    fn next_id(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}{:06}", self.agent, self.next)
    }
}
