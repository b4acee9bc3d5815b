//! All or none over a port whose `replace` is atomic for one change only
//! (a *stepwise* port: the R2 port, `js/files.mjs`).
//! [`Journaled::replace`] applies a replace of several files one file at a
//! time, after writing a journal in the Agent's own SQLite (its own
//! committed transition, before the first write): per file, its content
//! before (or absent) and a digest of its content after (or deleted),
//! bounded by `FILES_JOURNAL_BYTES_MAX`. The journal is cleared when every file
//! is written, or once the files are put back after a conflict, a failed
//! write or a stop (cancel, timeout). A crash in between leaves it behind,
//! and the host undoes it when the object starts again ([`recover`]).
//!
//! Undoing rather than finishing: the crashed tool call's outcome is
//! already unknown to the model (it is never run again,
//! `run::tools::recovery`), so leaving its files as they were before is
//! the state it can be told plainly; finishing would apply an edit that
//! may no longer fit files changed since. Undoing is conditional and
//! idempotent: a file is put back only while it holds what this replace
//! wrote (by digest, then the port's own check of that content), a file
//! holding anything else was changed by another writer and is left as it
//! is, and a crash while undoing undoes again (files already put back hold
//! their old content). Every outcome names its files ([`Undone`]).
//!
//! What no journal closes: a port's delete may take no condition (R2's
//! does not), so a write racing a delete, or a put-back that deletes an
//! added file, between its check and the delete is lost.

use super::port::{Change, Port, PortError, Replaced};
use crate::limits::{FILES_JOURNAL_BYTES_MAX, FILES_JOURNAL_PART_BYTES};
use crate::sql::{atomically, read, write, Sql, SqlError, SqlValue};
use crate::store::schema::FILES_JOURNAL;
use sha2::{Digest, Sha256};

/// Whose a journal is: the port it writes through (the host's key for it)
/// and the tool call that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub port: String,
    pub session_id: String,
    /// The turn's head command.
    pub command_id: String,
    pub call_id: String,
}

/// A journal left in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    pub id: i64,
    pub owner: Owner,
    pub created_at: i64,
}

/// One journaled file.
#[derive(Debug, Clone)]
struct File {
    path: String,
    before: Option<String>,
    /// The digest of its content after (`None`: deleted).
    after: Option<String>,
}

fn digest(content: &str) -> String {
    crate::text::hex(&Sha256::digest(content.as_bytes()))
}

/// What undoing a replace left, file by file (in its order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Undone {
    /// Put back to what it held before.
    pub restored: Vec<String>,
    /// Holding what it held before: never written, or put back already.
    pub untouched: Vec<String>,
    /// Holding neither: changed by another writer, left as it is.
    pub theirs: Vec<String>,
    /// Not put back, and why: it may still hold this replace's content.
    pub stuck: Vec<(String, String)>,
}

impl Undone {
    /// Every file holds what it held before.
    pub fn complete(&self) -> bool {
        self.theirs.is_empty() && self.stuck.is_empty()
    }

    pub fn merge(&mut self, other: Undone) {
        self.restored.extend(other.restored);
        self.untouched.extend(other.untouched);
        self.theirs.extend(other.theirs);
        self.stuck.extend(other.stuck);
    }

    /// For the model: `undone: nothing was changed`, or exactly which files
    /// the undo left changed and which hold what they held before.
    pub fn describe(&self) -> String {
        let list = |paths: &[String]| paths.join(", ");
        if self.complete() {
            return if self.restored.is_empty() {
                "undone: nothing was changed".to_owned()
            } else {
                format!(
                    "undone: nothing was changed (put back: {})",
                    list(&self.restored)
                )
            };
        }
        let mut parts: Vec<String> = self
            .stuck
            .iter()
            .map(|(path, why)| {
                format!(
                    "{path} may still hold this patch's content (putting it back failed: {why})"
                )
            })
            .collect();
        parts.extend(
            self.theirs
                .iter()
                .map(|path| format!("{path} was changed by another writer and left as it is")),
        );
        if !self.restored.is_empty() {
            parts.push(format!("put back: {}", list(&self.restored)));
        }
        if !self.untouched.is_empty() {
            parts.push(format!("untouched: {}", list(&self.untouched)));
        }
        format!(
            "undone, but not fully: {}. Read these files before editing them again",
            parts.join("; ")
        )
    }
}

fn storage(e: SqlError) -> PortError {
    PortError(format!("the patch journal: {e}"))
}

/// Writes the journal of `changes` in one transition; its id.
fn begin(sql: &dyn Sql, owner: &Owner, changes: &[Change], now_ms: i64) -> Result<i64, PortError> {
    let bytes: usize = changes
        .iter()
        .filter_map(|c| c.expected.as_ref())
        .map(String::len)
        .sum();
    if bytes > FILES_JOURNAL_BYTES_MAX {
        return Err(PortError(format!(
            "this patch rewrites files holding {bytes} bytes; this port writes a patch file by \
             file and keeps what it rewrites in the Agent's SQLite until it is done, at most \
             {FILES_JOURNAL_BYTES_MAX} bytes: patch fewer or smaller files at a time"
        )));
    }
    atomically(sql, || {
        let id = match FILES_JOURNAL.exists(sql) {
            true => read(
                sql,
                "SELECT coalesce(max(id), 0) + 1 FROM shiitake_files_journal",
                &[],
            )?
            .first()
            .map(|r| r.int(0))
            .transpose()?
            .unwrap_or(1),
            false => 1,
        };
        FILES_JOURNAL.ensure(sql)?;
        for (file, change) in changes.iter().enumerate() {
            let after: SqlValue = change.content.as_deref().map(digest).into();
            for (part, before) in parts(change.expected.as_deref()).into_iter().enumerate() {
                write(
                    sql,
                    "INSERT INTO shiitake_files_journal (id, file, part, port, session_id, \
                     command_id, call_id, path, before, after, created_at)
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    vec![
                        id.into(),
                        (file as i64).into(),
                        (part as i64).into(),
                        owner.port.as_str().into(),
                        owner.session_id.as_str().into(),
                        owner.command_id.as_str().into(),
                        owner.call_id.as_str().into(),
                        change.path.as_str().into(),
                        before.into(),
                        after.clone(),
                        now_ms.into(),
                    ],
                )?;
            }
        }
        Ok(id)
    })
    .map_err(storage)
}

/// `content` in parts of at most `FILES_JOURNAL_PART_BYTES`, cut at
/// character boundaries (one `None` part: absent).
fn parts(content: Option<&str>) -> Vec<Option<&str>> {
    let Some(mut rest) = content else {
        return vec![None];
    };
    let mut parts = vec![];
    loop {
        let cut = rest.floor_char_boundary(FILES_JOURNAL_PART_BYTES);
        let (part, tail) = rest.split_at(cut);
        parts.push(Some(part));
        if tail.is_empty() {
            return parts;
        }
        rest = tail;
    }
}

fn clear(sql: &dyn Sql, id: i64) -> Result<(), SqlError> {
    write(
        sql,
        "DELETE FROM shiitake_files_journal WHERE id = ?",
        vec![id.into()],
    )
}

/// The journal's files, in order.
fn files(sql: &dyn Sql, id: i64) -> Result<Vec<File>, SqlError> {
    let rows = read(
        sql,
        "SELECT file, path, before, after FROM shiitake_files_journal WHERE id = ?
         ORDER BY file, part",
        &[id.into()],
    )?;
    let mut files: Vec<(i64, File)> = Vec::new();
    for row in rows {
        let file = row.int(0)?;
        let before = row.opt_text(2)?;
        match files.last_mut() {
            Some((last, f)) if *last == file => {
                if let (Some(have), Some(more)) = (f.before.as_mut(), before) {
                    have.push_str(&more);
                }
            }
            _ => files.push((
                file,
                File {
                    path: row.text(1)?,
                    before,
                    after: row.opt_text(3)?,
                },
            )),
        }
    }
    Ok(files.into_iter().map(|(_, f)| f).collect())
}

/// The journals left in the store (`call`: of that tool call only, by
/// Session, head command and call id), in the order they were written. No
/// statement while the store lacks the table (`store::schema::FILES_JOURNAL`).
pub fn journals(sql: &dyn Sql, call: Option<(&str, &str, &str)>) -> Result<Vec<Journal>, SqlError> {
    if !FILES_JOURNAL.exists(sql) {
        return Ok(Vec::new());
    }
    const ALL: &str = "SELECT id, port, session_id, command_id, call_id, created_at
         FROM shiitake_files_journal WHERE part = 0 AND file = 0";
    let rows = match call {
        None => read(sql, &format!("{ALL} ORDER BY id"), &[])?,
        Some((session, command, call)) => read(
            sql,
            &format!("{ALL} AND session_id = ? AND command_id = ? AND call_id = ? ORDER BY id"),
            &[session.into(), command.into(), call.into()],
        )?,
    };
    rows.iter()
        .map(|r| {
            Ok(Journal {
                id: r.int(0)?,
                owner: Owner {
                    port: r.text(1)?,
                    session_id: r.text(2)?,
                    command_id: r.text(3)?,
                    call_id: r.text(4)?,
                },
                created_at: r.int(5)?,
            })
        })
        .collect()
}

/// Whether tool call `call` (Session, head command, call id) left a
/// journal: one that cannot be read counts as left (undoing it says why).
pub fn left_by(sql: &dyn Sql, call: (&str, &str, &str)) -> bool {
    journals(sql, Some(call)).map_or(true, |left| !left.is_empty())
}

/// Undoes journal `id` through `port` (`Err`: why there is none to undo
/// it with; its files are then reported not put back) and clears it. Every
/// file is looked at: a crash leaves no record of how far the replace got.
pub async fn recover<P: Port>(
    sql: &dyn Sql,
    id: i64,
    port: Result<&P, String>,
) -> Result<Undone, SqlError> {
    let files = files(sql, id)?;
    let undone = match port {
        Ok(port) => undo(port, &files).await,
        Err(why) => Undone {
            stuck: files.into_iter().map(|f| (f.path, why.clone())).collect(),
            ..Undone::default()
        },
    };
    clear(sql, id)?;
    Ok(undone)
}

/// Puts back every file of `files` that holds what the replace wrote.
async fn undo<P: Port>(port: &P, files: &[File]) -> Undone {
    let mut undone = Undone::default();
    for file in files {
        let path = file.path.clone();
        let current = match port.read(&file.path).await {
            Ok(current) => current,
            Err(e) => {
                undone.stuck.push((path, e.0));
                continue;
            }
        };
        if current == file.before {
            undone.untouched.push(path);
            continue;
        }
        if current.as_deref().map(digest) != file.after {
            undone.theirs.push(path);
            continue;
        }
        let back = Change {
            path: file.path.clone(),
            expected: current,
            content: file.before.clone(),
        };
        match port.replace(&[back]).await {
            Ok(Replaced::Done) => undone.restored.push(path),
            // Changed since it was read: another writer's now.
            Ok(Replaced::Conflict { .. }) => undone.theirs.push(path),
            Err(e) => undone.stuck.push((path, e.0)),
        }
    }
    undone
}

/// What a replace on a stepwise port is journaled under: a replace of
/// several files is then all or none (above).
pub struct Journaled<'a> {
    pub sql: &'a dyn Sql,
    pub owner: Owner,
    pub now_ms: i64,
    /// Whether the call was stopped (cancelled, or past its time): no file
    /// is written after that, and what was is put back.
    pub stopped: &'a dyn Fn() -> bool,
}

/// Why a journaled replace stopped short.
enum Stop {
    Conflict(String),
    Failed(String, String),
    Stopped,
}

impl Journaled<'_> {
    /// `port.replace(changes)`, all or none: one change as it is (atomic
    /// on its own), several one at a time under a journal.
    pub async fn replace<P: Port>(
        &self,
        port: &P,
        changes: &[Change],
    ) -> Result<Replaced, PortError> {
        if changes.len() < 2 {
            return port.replace(changes).await;
        }
        let id = begin(self.sql, &self.owner, changes, self.now_ms)?;
        // Files 0..written may hold this replace's content (a write that
        // failed may have landed; a refused one did not).
        let mut written = 0;
        let mut stop = None;
        for change in changes {
            if (self.stopped)() {
                stop = Some(Stop::Stopped);
                break;
            }
            written += 1;
            match port.replace(std::slice::from_ref(change)).await {
                Ok(Replaced::Done) => {}
                Ok(Replaced::Conflict { path }) => {
                    written -= 1;
                    stop = Some(Stop::Conflict(path));
                    break;
                }
                Err(e) => {
                    stop = Some(Stop::Failed(change.path.clone(), e.0));
                    break;
                }
            }
        }
        let Some(stop) = stop else {
            return clear(self.sql, id).map(|()| Replaced::Done).map_err(|e| {
                PortError(format!(
                    "every file of this patch was written, but clearing its journal failed \
                         ({e}); a restart would undo it"
                ))
            });
        };
        let files: Vec<File> = changes[..written]
            .iter()
            .map(|c| File {
                path: c.path.clone(),
                before: c.expected.clone(),
                after: c.content.as_deref().map(digest),
            })
            .collect();
        let undone = undo(port, &files).await;
        let cleared = clear(self.sql, id);
        let cause = match stop {
            Stop::Conflict(path) if undone.complete() && cleared.is_ok() => {
                return Ok(Replaced::Conflict { path });
            }
            Stop::Conflict(path) => {
                format!("{path} changed while this edit was being made (another writer)")
            }
            Stop::Failed(path, why) => format!("writing {path} failed: {why}"),
            Stop::Stopped => {
                "the call was stopped (cancelled, or past its time) before every file was written"
                    .to_owned()
            }
        };
        let mut message = format!("{cause}; this patch was {}.", undone.describe());
        if let Err(e) = cleared {
            message.push_str(&format!(
                " Clearing its journal failed ({e}): the runtime undoes it again when it restarts."
            ));
        }
        Err(PortError(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::block_on;
    use crate::files::port::{Page, Stat};
    use crate::sql::native::NativeSql;
    use std::cell::{Cell, RefCell};
    use std::collections::BTreeMap;

    /// A stepwise port over a map: each replace is one conditional write.
    /// `conflict`: a write to it meets another writer first; `fail`: a
    /// path's writes fail after this many; with `sql`, each write checks
    /// that the journal is already in the store.
    #[derive(Default)]
    struct Stepwise<'a> {
        files: RefCell<BTreeMap<String, String>>,
        conflict: Option<&'a str>,
        fail: RefCell<BTreeMap<String, usize>>,
        sql: Option<&'a NativeSql>,
        writes: Cell<usize>,
    }

    impl Stepwise<'_> {
        fn with(files: &[(&str, &str)]) -> Self {
            let port = Stepwise::default();
            for (path, content) in files {
                port.files
                    .borrow_mut()
                    .insert((*path).into(), (*content).into());
            }
            port
        }

        fn get(&self, path: &str) -> Option<String> {
            self.files.borrow().get(path).cloned()
        }
    }

    impl Port for Stepwise<'_> {
        async fn read(&self, path: &str) -> Result<Option<String>, PortError> {
            Ok(self.get(path))
        }
        async fn stat(&self, _: &str) -> Result<Stat, PortError> {
            unreachable!()
        }
        async fn list(&self, _: &str, _: Option<&str>) -> Result<Page, PortError> {
            unreachable!()
        }
        async fn write(&self, _: &str, _: &str) -> Result<(), PortError> {
            unreachable!()
        }
        async fn replace(&self, changes: &[Change]) -> Result<Replaced, PortError> {
            let [change] = changes else {
                panic!("a stepwise port is handed one change at a time");
            };
            if let Some(sql) = self.sql {
                assert!(!journals(sql, None).unwrap().is_empty(), "journaled first");
            }
            self.writes.set(self.writes.get() + 1);
            if let Some(left) = self.fail.borrow_mut().get_mut(&change.path) {
                if *left == 0 {
                    return Err(PortError("storage unavailable".into()));
                }
                *left -= 1;
            }
            if self.conflict == Some(change.path.as_str()) {
                self.files
                    .borrow_mut()
                    .insert(change.path.clone(), "theirs".into());
            }
            if self.get(&change.path) != change.expected {
                return Ok(Replaced::Conflict {
                    path: change.path.clone(),
                });
            }
            let mut files = self.files.borrow_mut();
            match &change.content {
                Some(content) => files.insert(change.path.clone(), content.clone()),
                None => files.remove(&change.path),
            };
            Ok(Replaced::Done)
        }
        fn patches(&self) -> bool {
            true
        }
    }

    fn change(path: &str, expected: Option<&str>, content: Option<&str>) -> Change {
        Change {
            path: path.into(),
            expected: expected.map(Into::into),
            content: content.map(Into::into),
        }
    }

    fn owner() -> Owner {
        Owner {
            port: "files".into(),
            session_id: "s".into(),
            command_id: "cmd_1".into(),
            call_id: "call_1".into(),
        }
    }

    fn journaled(sql: &NativeSql) -> Journaled<'_> {
        Journaled {
            sql,
            owner: owner(),
            now_ms: 1,
            stopped: &|| false,
        }
    }

    const ORIGINAL: [(&str, &str); 3] = [("a", "a1"), ("b", "b1"), ("c", "c1")];

    /// Updates `a` and `b`, deletes `c`, adds `d`.
    fn patch() -> Vec<Change> {
        vec![
            change("a", Some("a1"), Some("a2")),
            change("b", Some("b1"), Some("b2")),
            change("c", Some("c1"), None),
            change("d", None, Some("d2")),
        ]
    }

    fn contents(port: &Stepwise<'_>) -> Vec<(String, String)> {
        port.files.borrow().clone().into_iter().collect()
    }

    fn original() -> Vec<(String, String)> {
        ORIGINAL
            .iter()
            .map(|(p, c)| ((*p).into(), (*c).into()))
            .collect()
    }

    #[test]
    fn a_patch_is_journaled_before_its_first_write_and_cleared_once_written() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let mut port = Stepwise::with(&ORIGINAL);
        port.sql = Some(&sql);
        let done = block_on(journaled(&sql).replace(&port, &patch())).unwrap();
        assert_eq!(done, Replaced::Done);
        assert_eq!(port.writes.get(), 4, "one write a file");
        let now: Vec<_> = contents(&port);
        assert_eq!(
            now,
            [("a", "a2"), ("b", "b2"), ("d", "d2")].map(|(p, c)| (p.to_owned(), c.to_owned()))
        );
        assert!(journals(&sql, None).unwrap().is_empty(), "cleared");
        // One change is atomic on its own: no journal.
        let port = Stepwise::with(&[("a", "a1")]);
        let one = [change("a", Some("a1"), Some("a2"))];
        block_on(journaled(&sql).replace(&port, &one)).unwrap();
        assert!(journals(&sql, None).unwrap().is_empty());
    }

    #[test]
    fn a_conflict_midway_puts_back_what_was_written() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let mut port = Stepwise::with(&ORIGINAL);
        port.conflict = Some("c");
        let outcome = block_on(journaled(&sql).replace(&port, &patch())).unwrap();
        assert_eq!(outcome, Replaced::Conflict { path: "c".into() });
        let mut expected = original();
        expected[2].1 = "theirs".into();
        assert_eq!(contents(&port), expected, "a and b put back, c is theirs");
        assert!(journals(&sql, None).unwrap().is_empty());
    }

    #[test]
    fn a_put_back_that_fails_is_reported_with_exactly_the_files_it_left_changed() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let mut port = Stepwise::with(&ORIGINAL);
        port.conflict = Some("c");
        // `a`'s first write lands, its put-back fails.
        port.fail.borrow_mut().insert("a".into(), 1);
        let e = block_on(journaled(&sql).replace(&port, &patch()))
            .unwrap_err()
            .0;
        assert_eq!(
            e,
            "c changed while this edit was being made (another writer); this patch was undone, \
             but not fully: a may still hold this patch's content (putting it back failed: \
             storage unavailable); put back: b. Read these files before editing them again."
        );
        assert_eq!(port.get("a").as_deref(), Some("a2"));
        assert_eq!(port.get("b").as_deref(), Some("b1"));
        assert!(journals(&sql, None).unwrap().is_empty());
    }

    #[test]
    fn a_failed_write_or_a_stop_undoes_the_patch_and_says_so() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let port = Stepwise::with(&ORIGINAL);
        port.fail.borrow_mut().insert("b".into(), 0);
        let e = block_on(journaled(&sql).replace(&port, &patch()))
            .unwrap_err()
            .0;
        assert_eq!(
            e,
            "writing b failed: storage unavailable; this patch was undone: nothing was changed \
             (put back: a)."
        );
        assert_eq!(contents(&port), original());

        let port = Stepwise::with(&ORIGINAL);
        let stopped = || port.writes.get() == 2;
        let stopping = Journaled {
            stopped: &stopped,
            ..journaled(&sql)
        };
        let e = block_on(stopping.replace(&port, &patch())).unwrap_err().0;
        assert!(e.starts_with("the call was stopped"), "{e}");
        assert!(
            e.ends_with("undone: nothing was changed (put back: a, b)."),
            "{e}"
        );
        assert_eq!(contents(&port), original());
        assert!(journals(&sql, None).unwrap().is_empty());
    }

    /// A crash after each write, then recovery: every file holds what it
    /// held before; a crash while recovering recovers again.
    #[test]
    fn recovery_after_a_crash_puts_every_file_back_and_is_idempotent() {
        for crashed_after in 0..=4 {
            let sql = NativeSql::open_in_memory();
            crate::store::schema::open(&sql).unwrap();
            let port = Stepwise::with(&ORIGINAL);
            let changes = patch();
            let id = begin(&sql, &owner(), &changes, 1).unwrap();
            for c in &changes[..crashed_after] {
                block_on(port.replace(std::slice::from_ref(c))).unwrap();
            }
            // The host finds the journal by its call.
            let left = journals(&sql, Some(("s", "cmd_1", "call_1"))).unwrap();
            assert_eq!(left.len(), 1);
            assert_eq!(left[0].owner, owner());
            let undone = block_on(recover(&sql, id, Ok(&port))).unwrap();
            assert!(undone.complete(), "{undone:?}");
            assert_eq!(undone.restored.len(), crashed_after);
            assert_eq!(contents(&port), original(), "after write {crashed_after}");
            assert!(journals(&sql, None).unwrap().is_empty());
        }
        // A crash midway through recovering (`a` put back, the journal
        // still there): recovering again finishes it.
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let port = Stepwise::with(&ORIGINAL);
        let changes = patch();
        let id = begin(&sql, &owner(), &changes, 1).unwrap();
        for c in &changes {
            block_on(port.replace(std::slice::from_ref(c))).unwrap();
        }
        block_on(port.replace(&[change("a", Some("a2"), Some("a1"))])).unwrap();
        let undone = block_on(recover(&sql, id, Ok(&port))).unwrap();
        assert_eq!(undone.untouched, ["a"]);
        assert_eq!(undone.restored, ["b", "c", "d"]);
        assert_eq!(contents(&port), original());
    }

    #[test]
    fn recovery_leaves_another_writers_file_and_names_it() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let port = Stepwise::with(&ORIGINAL);
        let changes = patch();
        let id = begin(&sql, &owner(), &changes, 1).unwrap();
        for c in &changes[..2] {
            block_on(port.replace(std::slice::from_ref(c))).unwrap();
        }
        port.files.borrow_mut().insert("b".into(), "edited".into());
        let undone = block_on(recover(&sql, id, Ok(&port))).unwrap();
        assert_eq!(undone.theirs, ["b"]);
        assert_eq!(
            undone.describe(),
            "undone, but not fully: b was changed by another writer and left as it is; put \
             back: a; untouched: c, d. Read these files before editing them again"
        );
        assert_eq!(port.get("b").as_deref(), Some("edited"));
        // With no port to undo it through, its files are named, and the
        // journal is cleared all the same.
        let id = begin(&sql, &owner(), &changes, 1).unwrap();
        let gone = block_on(recover::<Stepwise<'_>>(&sql, id, Err("gone".into()))).unwrap();
        assert_eq!(gone.stuck.len(), 4);
        assert!(journals(&sql, None).unwrap().is_empty());
    }

    #[test]
    fn large_files_are_journaled_in_parts_and_the_journal_is_bounded() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        // 2.5 MiB of two-byte characters: parts cut at character boundaries.
        let big = "é".repeat(1_310_720);
        let port = Stepwise::with(&[("big", big.as_str()), ("small", "s")]);
        let changes = [
            change("big", Some(&big), Some("shrunk")),
            change("small", Some("s"), Some("t")),
        ];
        let id = begin(&sql, &owner(), &changes, 1).unwrap();
        let rows = read(&sql, "SELECT count(*) FROM shiitake_files_journal", &[]).unwrap();
        assert_eq!(rows[0].int(0).unwrap(), 4, "three parts and one");
        for c in &changes {
            block_on(port.replace(std::slice::from_ref(c))).unwrap();
        }
        block_on(recover(&sql, id, Ok(&port))).unwrap();
        assert_eq!(port.get("big").as_deref(), Some(big.as_str()));

        let huge = "x".repeat(FILES_JOURNAL_BYTES_MAX / 2 + 1);
        let port = Stepwise::with(&[("x", huge.as_str()), ("y", huge.as_str())]);
        let changes = [
            change("x", Some(&huge), Some("x")),
            change("y", Some(&huge), Some("y")),
        ];
        let e = block_on(journaled(&sql).replace(&port, &changes))
            .unwrap_err()
            .0;
        assert!(
            e.contains(&format!("at most {FILES_JOURNAL_BYTES_MAX} bytes")),
            "{e}"
        );
        assert_eq!(port.writes.get(), 0, "refused before any write");
    }
}
