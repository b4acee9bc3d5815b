//! The Files port over the Agent's own SQLite: one table
//! (`shiitake_files`, a feature group: `store::schema::FILES`, made with
//! the first write; without it the workspace reads empty without a
//! statement), each write one transition, so a replace or a whole patch
//! commits atomically or not at all, and a concurrent edit is refused as a
//! conflict.

use super::path::is_within;
use super::port::{Change, Entry, Page, Port, PortError, Replaced, Stat};
use crate::limits::{
    LIST_ENTRIES_MAX, WORKSPACE_BYTES_MAX, WORKSPACE_FILES_MAX, WORKSPACE_FILE_BYTES_MAX,
};
use crate::sql::{atomically, read, write, Sql, SqlError, SqlValue};
use crate::store::schema::FILES;
use serde::Deserialize;

/// The workspace's bounds; a host may set less than the defaults, never more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Bounds {
    #[serde(default = "file_bytes_max")]
    pub file_bytes_max: usize,
    #[serde(default = "workspace_bytes_max")]
    pub workspace_bytes_max: usize,
    #[serde(default = "files_max")]
    pub files_max: usize,
}

fn file_bytes_max() -> usize {
    WORKSPACE_FILE_BYTES_MAX
}
fn workspace_bytes_max() -> usize {
    WORKSPACE_BYTES_MAX
}
fn files_max() -> usize {
    WORKSPACE_FILES_MAX
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            file_bytes_max: WORKSPACE_FILE_BYTES_MAX,
            workspace_bytes_max: WORKSPACE_BYTES_MAX,
            files_max: WORKSPACE_FILES_MAX,
        }
    }
}

/// Why the host's workspace options are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundsError {
    /// serde's message.
    #[error("workspace: {0}")]
    Decode(String),
    /// A bound (by its option name) that is zero or above its maximum.
    #[error("workspace.{name}: {value}; from 1 to {max}")]
    Bound {
        name: &'static str,
        value: usize,
        max: usize,
    },
}

impl Bounds {
    /// Decodes the host's `sqliteWorkspace({...})` options; a bound above
    /// the default or zero is refused by name.
    pub fn parse(json: &str) -> Result<Bounds, BoundsError> {
        let value = serde_json::from_str(json).map_err(|e| BoundsError::Decode(e.to_string()))?;
        let bounds: Bounds = crate::json::decode(value).map_err(BoundsError::Decode)?;
        for (name, value, max) in [
            (
                "fileBytesMax",
                bounds.file_bytes_max,
                WORKSPACE_FILE_BYTES_MAX,
            ),
            (
                "workspaceBytesMax",
                bounds.workspace_bytes_max,
                WORKSPACE_BYTES_MAX,
            ),
            ("filesMax", bounds.files_max, WORKSPACE_FILES_MAX),
        ] {
            if value == 0 || value > max {
                return Err(BoundsError::Bound { name, value, max });
            }
        }
        Ok(bounds)
    }
}

/// The SQLite workspace, borrowed for one call.
pub struct Workspace<'a> {
    sql: &'a dyn Sql,
    bounds: Bounds,
    now_ms: i64,
}

fn port_error(e: SqlError) -> PortError {
    PortError(format!("workspace storage failed: {e}"))
}

impl<'a> Workspace<'a> {
    pub fn open(sql: &'a dyn Sql, bounds: Bounds, now_ms: i64) -> Workspace<'a> {
        Workspace {
            sql,
            bounds,
            now_ms,
        }
    }

    fn content(&self, path: &str) -> Result<Option<String>, SqlError> {
        if !FILES.exists(self.sql) {
            return Ok(None);
        }
        let rows = read(
            self.sql,
            "SELECT content FROM shiitake_files WHERE path = ?",
            &[path.into()],
        )?;
        rows.first().map(|r| r.text(0)).transpose()
    }

    /// Checks every change against the stored files and the bounds, then
    /// writes them all in one transition.
    fn commit(&self, changes: &[Change]) -> Result<Replaced, PortError> {
        let result: Result<Result<Replaced, PortError>, SqlError> = atomically(self.sql, || {
            let mut sizes = Vec::with_capacity(changes.len());
            for change in changes {
                let current = self.content(&change.path)?;
                if current != change.expected {
                    return Ok(Ok(Replaced::Conflict {
                        path: change.path.clone(),
                    }));
                }
                sizes.push(current.map_or(0, |c| c.len()));
            }
            let totals = match FILES.exists(self.sql) {
                true => read(
                    self.sql,
                    "SELECT coalesce(sum(bytes), 0), count(*) FROM shiitake_files",
                    &[],
                )?,
                false => Vec::new(),
            };
            let (mut bytes, mut files) = match totals.first() {
                Some(row) => (row.int(0)? as usize, row.int(1)? as usize),
                None => (0, 0),
            };
            for (change, old) in changes.iter().zip(sizes) {
                bytes -= old;
                if change.expected.is_some() {
                    files -= 1;
                }
                if let Some(content) = &change.content {
                    if content.len() > self.bounds.file_bytes_max {
                        return Ok(Err(PortError(format!(
                            "{}: {} bytes; a workspace file holds at most {}",
                            change.path,
                            content.len(),
                            self.bounds.file_bytes_max
                        ))));
                    }
                    bytes += content.len();
                    files += 1;
                }
            }
            if bytes > self.bounds.workspace_bytes_max {
                return Ok(Err(PortError(format!(
                    "the workspace would hold {bytes} bytes; at most {}",
                    self.bounds.workspace_bytes_max
                ))));
            }
            if files > self.bounds.files_max {
                return Ok(Err(PortError(format!(
                    "the workspace would hold {files} files; at most {}",
                    self.bounds.files_max
                ))));
            }
            FILES.ensure(self.sql)?;
            for change in changes {
                match &change.content {
                    Some(content) => write(
                        self.sql,
                        "INSERT INTO shiitake_files (path, content, bytes, modified_at)
                         VALUES (?, ?, ?, ?)
                         ON CONFLICT (path) DO UPDATE SET content = excluded.content,
                           bytes = excluded.bytes, modified_at = excluded.modified_at",
                        vec![
                            change.path.as_str().into(),
                            content.as_str().into(),
                            SqlValue::Integer(content.len() as i64),
                            self.now_ms.into(),
                        ],
                    )?,
                    None => write(
                        self.sql,
                        "DELETE FROM shiitake_files WHERE path = ?",
                        vec![change.path.as_str().into()],
                    )?,
                }
            }
            Ok(Ok(Replaced::Done))
        });
        result.map_err(port_error)?
    }
}

impl Port for Workspace<'_> {
    async fn read(&self, path: &str) -> Result<Option<String>, PortError> {
        self.content(path).map_err(port_error)
    }

    async fn stat(&self, path: &str) -> Result<Stat, PortError> {
        if !FILES.exists(self.sql) {
            return Ok(Stat::Missing);
        }
        let rows = read(
            self.sql,
            "SELECT bytes FROM shiitake_files WHERE path = ?",
            &[path.into()],
        )
        .map_err(port_error)?;
        if let Some(row) = rows.first() {
            let size = row.int(0).map_err(port_error)?;
            return Ok(Stat::File { size: size as u64 });
        }
        let page = self.list(path, None).await?;
        Ok(if page.entries.is_empty() {
            Stat::Missing
        } else {
            Stat::Dir
        })
    }

    async fn list(&self, dir: &str, cursor: Option<&str>) -> Result<Page, PortError> {
        // `dir/` up to `dir0` (the character after `/`) holds exactly the
        // paths under `dir`, so the primary key serves the range.
        let (low, high) = if dir.is_empty() {
            (String::new(), None)
        } else {
            (format!("{dir}/"), Some(format!("{dir}0")))
        };
        // Canonical paths never end in `/`, so `> "dir/"` is `>= "dir/"`.
        let after = match cursor {
            Some(cursor) if cursor > low.as_str() => cursor.to_owned(),
            _ => low,
        };
        if !FILES.exists(self.sql) {
            return Ok(Page {
                entries: Vec::new(),
                cursor: None,
            });
        }
        let rows = read(
            self.sql,
            "SELECT path, bytes FROM shiitake_files
             WHERE path > ? AND (? IS NULL OR path < ?)
             ORDER BY path LIMIT ?",
            &[
                after.into(),
                high.clone().into(),
                high.into(),
                SqlValue::Integer(LIST_ENTRIES_MAX as i64 + 1),
            ],
        )
        .map_err(port_error)?;
        let mut entries = rows
            .iter()
            .map(|r| {
                Ok(Entry {
                    path: r.text(0)?,
                    size: r.int(1)? as u64,
                })
            })
            .collect::<Result<Vec<_>, SqlError>>()
            .map_err(port_error)?;
        debug_assert!(entries.iter().all(|e| is_within(&e.path, dir)));
        let cursor = if entries.len() > LIST_ENTRIES_MAX {
            entries.truncate(LIST_ENTRIES_MAX);
            entries.last().map(|e| e.path.clone())
        } else {
            None
        };
        Ok(Page { entries, cursor })
    }

    async fn write(&self, path: &str, content: &str) -> Result<(), PortError> {
        let expected = self.content(path).map_err(port_error)?;
        let change = Change {
            path: path.to_owned(),
            expected,
            content: Some(content.to_owned()),
        };
        // Between the read and the commit nothing else runs: the wasm host
        // is single-threaded and the commit re-checks inside its transition.
        match self.commit(&[change])? {
            Replaced::Done => Ok(()),
            Replaced::Conflict { path } => {
                Err(PortError(format!("{path}: changed while being written")))
            }
        }
    }

    async fn replace(&self, changes: &[Change]) -> Result<Replaced, PortError> {
        self.commit(changes)
    }

    fn patches(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::block_on;
    use crate::sql::native::NativeSql;

    fn change(path: &str, expected: Option<&str>, content: Option<&str>) -> Change {
        Change {
            path: path.into(),
            expected: expected.map(Into::into),
            content: content.map(Into::into),
        }
    }

    #[test]
    fn a_workspace_never_written_reads_without_its_table_until_the_first_write() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let bounds = Bounds::parse(r#"{"fileBytesMax":10}"#).unwrap();
        let ws = Workspace::open(&sql, bounds, 1);
        // No table: a statement would fail.
        assert_eq!(block_on(ws.read("a")).unwrap(), None);
        assert_eq!(block_on(ws.stat("a")).unwrap(), Stat::Missing);
        assert!(block_on(ws.list("", None)).unwrap().entries.is_empty());
        block_on(ws.write("big", &"x".repeat(11))).unwrap_err();
        assert!(!FILES.exists(&sql));
        block_on(ws.write("a", "one")).unwrap();
        assert!(FILES.exists(&sql));
        assert_eq!(block_on(ws.read("a")).unwrap().as_deref(), Some("one"));
    }

    #[test]
    fn writes_reads_lists_and_stats() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let ws = Workspace::open(&sql, Bounds::default(), 1);
        for path in ["a/x.txt", "a/b/y.txt", "a0.txt", "a.txt", "z.txt"] {
            block_on(ws.write(path, path)).unwrap();
        }
        assert_eq!(
            block_on(ws.read("a/x.txt")).unwrap().as_deref(),
            Some("a/x.txt")
        );
        assert_eq!(block_on(ws.read("nope")).unwrap(), None);
        let page = block_on(ws.list("a", None)).unwrap();
        let paths: Vec<_> = page.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["a/b/y.txt", "a/x.txt"], "only what lies under `a/`");
        assert_eq!(block_on(ws.list("", None)).unwrap().entries.len(), 5);
        assert_eq!(block_on(ws.stat("a")).unwrap(), Stat::Dir);
        assert_eq!(
            block_on(ws.stat("a/x.txt")).unwrap(),
            Stat::File { size: 7 }
        );
        assert_eq!(block_on(ws.stat("a/x")).unwrap(), Stat::Missing);
        // A cursor before the directory does not widen the listing.
        let page = block_on(ws.list("a", Some("0"))).unwrap();
        assert_eq!(page.entries.len(), 2);
    }

    #[test]
    fn listing_pages_through_every_file_once() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let ws = Workspace::open(&sql, Bounds::default(), 1);
        let total = LIST_ENTRIES_MAX * 2 + 7;
        let changes: Vec<_> = (0..total)
            .map(|i| change(&format!("d/{i:05}"), None, Some("x")))
            .collect();
        assert_eq!(block_on(ws.replace(&changes)).unwrap(), Replaced::Done);
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = block_on(ws.list("d", cursor.as_deref())).unwrap();
            assert!(page.entries.len() <= LIST_ENTRIES_MAX);
            seen.extend(page.entries.into_iter().map(|e| e.path));
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen.len(), total);
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_replace_applies_all_or_nothing_and_refuses_a_stale_expectation() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let ws = Workspace::open(&sql, Bounds::default(), 1);
        block_on(ws.write("a", "one")).unwrap();
        block_on(ws.write("b", "two")).unwrap();
        // Another writer changed `b` since the patch read it.
        let stale = [
            change("a", Some("one"), Some("ONE")),
            change("b", Some("old two"), None),
            change("c", None, Some("three")),
        ];
        assert_eq!(
            block_on(ws.replace(&stale)).unwrap(),
            Replaced::Conflict { path: "b".into() }
        );
        assert_eq!(block_on(ws.read("a")).unwrap().as_deref(), Some("one"));
        assert_eq!(block_on(ws.read("c")).unwrap(), None);
        // Creating over an existing file is a conflict too.
        assert_eq!(
            block_on(ws.replace(&[change("a", None, Some("x"))])).unwrap(),
            Replaced::Conflict { path: "a".into() }
        );
        let fresh = [
            change("a", Some("one"), Some("ONE")),
            change("b", Some("two"), None),
            change("c", None, Some("three")),
        ];
        assert_eq!(block_on(ws.replace(&fresh)).unwrap(), Replaced::Done);
        assert_eq!(block_on(ws.read("a")).unwrap().as_deref(), Some("ONE"));
        assert_eq!(block_on(ws.read("b")).unwrap(), None);
        assert_eq!(block_on(ws.read("c")).unwrap().as_deref(), Some("three"));
    }

    #[test]
    fn bounds_per_file_per_workspace_and_in_files() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let bounds =
            Bounds::parse(r#"{"fileBytesMax":10,"workspaceBytesMax":25,"filesMax":3}"#).unwrap();
        let ws = Workspace::open(&sql, bounds, 1);
        let e = block_on(ws.write("big", &"x".repeat(11))).unwrap_err().0;
        assert!(
            e.contains("11 bytes; a workspace file holds at most 10"),
            "{e}"
        );
        block_on(ws.write("a", &"x".repeat(10))).unwrap();
        block_on(ws.write("b", &"x".repeat(10))).unwrap();
        let e = block_on(ws.write("c", &"x".repeat(6))).unwrap_err().0;
        assert!(e.contains("26 bytes; at most 25"), "{e}");
        // Overwriting counts the file once.
        block_on(ws.write("b", &"y".repeat(10))).unwrap();
        block_on(ws.write("c", "z")).unwrap();
        let e = block_on(ws.write("d", "z")).unwrap_err().0;
        assert!(e.contains("4 files; at most 3"), "{e}");
        block_on(ws.replace(&[change("c", Some("z"), None)])).unwrap();
        block_on(ws.write("d", "z")).unwrap();
        for bad in [
            r#"{"fileBytesMax":0}"#,
            r#"{"filesMax":10001}"#,
            r#"{"fileBytes":1}"#,
        ] {
            assert!(Bounds::parse(bad).is_err(), "{bad}");
        }
    }
}
