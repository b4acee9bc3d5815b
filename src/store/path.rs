//! Transcript branches as stored (schema 3): every statement that walks,
//! searches or extends the tree of a Session's messages.
//!
//! A message's parent is the message at `seq - 1` unless its `parent`
//! column names another (`0`: the start): only the first message of a
//! branch holds one, so a linear transcript is what schema 1 wrote and
//! consecutive messages of a branch are a range of the primary key. A
//! Session's selected branch ends at its tip: the newest message, or
//! `sessions.head` while nothing was written since it was selected. A fork
//! records its base (`base_session`, `base_seq`): its own messages are
//! numbered after `base_seq`, and its paths continue into the base's path
//! ending there, so one `seq` names one position of the fork's tree (its
//! *view*: its own messages and that base path). Base seqs fall strictly
//! along a chain of forks, so a position's holder is the first Session of
//! the chain whose base lies below it.
//!
//! [`Store::walk`] is the one path walk (pages, the model context): newest
//! first, bounded in messages and in the bytes of the bodies it loads; a
//! model context's walk ends at the newest compaction entry of the path
//! ([`Store::walk_context`]).

use super::Store;
use crate::sql::{Row, SqlError};

/// Where a walk starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The Session's tip: its selected branch.
    Tip,
    /// The path ending at this position (`0`: the empty path).
    At(i64),
    /// The path after this position's message, older than it: where a page
    /// whose oldest message is at this position left off.
    Below(i64),
}

/// One message of a path.
#[derive(Debug, Clone, PartialEq)]
pub struct PathRow {
    /// The Session holding it: an index into [`Walk::chain`].
    pub holder: usize,
    pub seq: i64,
    /// Its explicit parent (the first message of a branch); `None`: the
    /// message at `seq - 1`.
    pub parent: Option<i64>,
    pub bytes: usize,
    /// Loaded for the newest messages whose bytes sum to at most the walk's
    /// room; `None` past it.
    pub body: Option<String>,
    /// A compaction entry (`messages.kind`).
    pub compaction: bool,
}

impl PathRow {
    /// The position of its parent (`0`: it starts the path).
    pub fn parent_seq(&self) -> i64 {
        self.parent.unwrap_or(self.seq - 1)
    }
}

/// A Session of a fork chain: `base` is where its view continues into the
/// next Session of the chain (`None`: nowhere; not read yet in a walk that
/// did not need it).
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    pub session_id: String,
    pub base: Option<(String, i64)>,
}

impl Level {
    /// The position its own messages are numbered after.
    pub fn base_seq(&self) -> i64 {
        self.base.as_ref().map_or(0, |(_, seq)| *seq)
    }
}

/// A path, newest first, and the Sessions holding it.
#[derive(Debug, Clone, PartialEq)]
pub struct Walk {
    pub rows: Vec<PathRow>,
    /// The walked Session first, then the bases the walk entered.
    pub chain: Vec<Level>,
    /// The walked Session holds the first message of some branch: its view
    /// has forks (a Session without one has none to report).
    pub branched: bool,
}

impl Walk {
    pub fn session_of(&self, row: &PathRow) -> &str {
        &self.chain[row.holder].session_id
    }
}

/// A Session's own facts about its branches, in one read.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    /// The selected tip while it is not the newest message.
    pub head: Option<i64>,
    /// The newest position of the Session's view (its newest message, else
    /// its base's position, else 0).
    pub newest: i64,
    pub base: Option<(String, i64)>,
    /// It holds the first message of some branch.
    pub branched: bool,
}

impl Facts {
    pub fn tip(&self) -> i64 {
        self.head.unwrap_or(self.newest)
    }
}

/// The newest position of Session `?1`'s view (see [`Facts::newest`]).
pub(super) const NEWEST: &str =
    "coalesce((SELECT seq FROM messages WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1),
        (SELECT base_seq FROM sessions WHERE session_id = ?1), 0)";

/// One run of a walk: the newest `?3` messages of Session `?1` at or below
/// `?2` (its tip when `?2` is null: the selected head while the newest
/// position is still `head_at`), with the bodies of those whose bytes,
/// summed with every newer one's in this read, are at most `?4` (and, when
/// `?5`, that no compaction entry newer in this read hides: a model
/// context reads nothing older than one), whether each is a compaction
/// entry, and on its first row (the only one whose running sum is its own
/// size; an uncorrelated `EXISTS` column is read again for every row)
/// whether the Session holds the first message of any branch. The window
/// runs over the primary key newest first and stops at the limit (no sort,
/// no temporary B-tree; both sums share one window); the join reads a body
/// only where it fits. In a linear stretch every row is on the path, so a
/// walk is this one read. A compaction entry of another branch newer in the
/// read hides the bodies of the path's rows below it too: the walk reads
/// again from the first such row ([`Store::walk`]).
const PATH_RUN: &str = "SELECT w.seq, w.parent, w.bytes, m.body,
        CASE WHEN w.run = w.bytes THEN EXISTS (SELECT 1 FROM messages
            INDEXED BY messages_children WHERE session_id = ?1 AND parent IS NOT NULL) END,
        w.kind
    FROM (
        SELECT seq, parent, bytes, kind,
            sum(bytes) OVER newer AS run, count(kind) OVER newer AS summaries
        FROM messages WHERE session_id = ?1 AND seq <= coalesce(?2,
            (SELECT CASE WHEN s.head_at >= coalesce((SELECT seq FROM messages
                    WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1), s.base_seq, 0)
                THEN s.head END FROM sessions s WHERE s.session_id = ?1),
            9223372036854775807)
        WINDOW newer AS (ORDER BY seq DESC ROWS UNBOUNDED PRECEDING)
        ORDER BY seq DESC LIMIT ?3
    ) w
    LEFT JOIN messages m ON m.session_id = ?1 AND m.seq = w.seq AND w.run <= ?4
        AND (?5 = 0 OR w.summaries = (w.kind IS NOT NULL))";

/// A message appended to Session `?1`'s selected branch: numbered after
/// its view's newest position, its parent `?4` when given (a new branch),
/// else the selected head while it is valid, else the newest message
/// (`NULL`, as is a parent equal to `seq - 1`); `?5` its `kind`.
const INSERT_MESSAGE: &str = "INSERT INTO messages (session_id, seq, body, bytes, parent, kind)
    SELECT ?1, n.seq, ?2, ?3,
        nullif(coalesce(?4, CASE WHEN s.head_at = n.seq - 1 THEN s.head END), n.seq - 1), ?5
    FROM sessions s, (SELECT coalesce((SELECT seq FROM messages WHERE session_id = ?1
            ORDER BY seq DESC LIMIT 1), (SELECT base_seq FROM sessions WHERE session_id = ?1), 0)
        + 1 AS seq) n
    WHERE s.session_id = ?1";

/// How many positions [`Store::find_on_path`] walks per read.
const SEARCH_ROWS: usize = 1_000;

/// The first messages of branches of Session `?1` whose parent is one of the
/// JSON array `?2`. `CROSS JOIN` keeps the list the outer loop, so each
/// parent is one seek of `messages_children` (the planner would otherwise
/// scan the Session's index entries once per parent).
const EXPLICIT_CHILDREN: &str = "SELECT c.parent, c.seq, EXISTS (SELECT 1 FROM messages l
        WHERE l.session_id = ?1 AND l.seq = c.parent + 1 AND l.parent IS NULL)
    FROM json_each(?2) j
    CROSS JOIN messages c INDEXED BY messages_children
        ON c.session_id = ?1 AND c.parent = j.value";

/// The bodies of Session `?1`'s messages at the positions of JSON array `?2`.
const BODIES_AT: &str = "SELECT seq, body FROM messages
    WHERE session_id = ?1 AND seq IN (SELECT value FROM json_each(?2))";

/// The JSON text that starts the stored body of entry `entry_id`: every
/// message body starts with its `entryId`.
fn entry_prefix(entry_id: &str) -> String {
    format!("{{\"entryId\":{},", serde_json::Value::from(entry_id))
}

/// The entry id a stored message body starts with.
pub fn entry_id_of(body: &str) -> Option<&str> {
    body.strip_prefix("{\"entryId\":\"")?.split('"').next()
}

fn seqs_json(seqs: impl Iterator<Item = i64>) -> String {
    let list: Vec<String> = seqs.map(|s| s.to_string()).collect();
    format!("[{}]", list.join(","))
}

fn path_row(holder: usize, row: &Row) -> Result<PathRow, SqlError> {
    Ok(PathRow {
        holder,
        seq: row.int(0)?,
        parent: row.opt_int(1)?,
        bytes: usize::try_from(row.int(2)?).unwrap_or(usize::MAX),
        body: row.opt_text(3)?,
        compaction: row.opt_text(5)?.is_some(),
    })
}

impl Store<'_> {
    /// Appends a message at the tip of the Session's selected branch.
    pub fn insert_message(&self, session_id: &str, body: &str) -> Result<(), SqlError> {
        self.insert_message_after(session_id, body, None)
    }

    /// Appends a compaction entry at the tip of the selected branch: model
    /// contexts of that path read no message before it.
    pub fn insert_compaction(&self, session_id: &str, body: &str) -> Result<(), SqlError> {
        self.insert_entry(session_id, body, None, Some("compaction"))
    }

    /// Appends a message as the child of position `parent` (`None`: at the
    /// selected tip); a new branch becomes the selected one, being the
    /// newest.
    pub fn insert_message_after(
        &self,
        session_id: &str,
        body: &str,
        parent: Option<i64>,
    ) -> Result<(), SqlError> {
        self.insert_entry(session_id, body, parent, None)
    }

    fn insert_entry(
        &self,
        session_id: &str,
        body: &str,
        parent: Option<i64>,
        kind: Option<&str>,
    ) -> Result<(), SqlError> {
        self.write(
            INSERT_MESSAGE,
            vec![
                session_id.into(),
                body.into(),
                (body.len() as i64).into(),
                parent.into(),
                kind.into(),
            ],
        )
    }

    /// Selects the branch ending at position `tip` (`None`: the newest),
    /// valid until the next message is written there.
    pub fn set_head(&self, session_id: &str, tip: Option<i64>) -> Result<(), SqlError> {
        self.write(
            &format!(
                "UPDATE sessions SET head = nullif(?2, {NEWEST}), head_at = {NEWEST}
                 WHERE session_id = ?1"
            ),
            vec![session_id.into(), tip.into()],
        )
    }

    /// The Session's branch facts (`None`: no such Session).
    pub fn facts(&self, session_id: &str) -> Result<Option<Facts>, SqlError> {
        let rows = self.query(
            &format!(
                "SELECT s.head, s.head_at, s.base_session, s.base_seq, {NEWEST},
                    EXISTS (SELECT 1 FROM messages INDEXED BY messages_children
                        WHERE session_id = ?1 AND parent IS NOT NULL)
                 FROM sessions s WHERE s.session_id = ?1"
            ),
            &[session_id.into()],
        )?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let newest = row.int(4)?;
        // A head is valid while nothing was written after it was selected.
        let valid = row.opt_int(1)?.is_some_and(|at| at >= newest);
        Ok(Some(Facts {
            head: row.opt_int(0)?.filter(|_| valid),
            newest,
            base: match (row.opt_text(2)?, row.opt_int(3)?) {
                (Some(session), Some(seq)) => Some((session, seq)),
                _ => None,
            },
            branched: row.int(5)? == 1,
        }))
    }

    /// The Session and every base its view continues into, in order.
    pub fn chain(&self, session_id: &str) -> Result<Vec<Level>, SqlError> {
        let rows = self.query(
            "WITH RECURSIVE c(session_id, base_session, base_seq, n) AS (
                SELECT session_id, base_session, base_seq, 0 FROM sessions WHERE session_id = ?1
                UNION ALL
                SELECT s.session_id, s.base_session, s.base_seq, c.n + 1
                FROM c JOIN sessions s ON s.session_id = c.base_session
                LIMIT 64)
             SELECT session_id, base_session, base_seq FROM c",
            &[session_id.into()],
        )?;
        rows.iter()
            .map(|r| {
                Ok(Level {
                    session_id: r.text(0)?,
                    base: match (r.opt_text(1)?, r.opt_int(2)?) {
                        (Some(session), Some(seq)) => Some((session, seq)),
                        _ => None,
                    },
                })
            })
            .collect()
    }

    /// The path from `start`, newest first: at most `limit` messages, with
    /// the bodies of the newest whose bytes sum to at most `room` (none past
    /// the first that does not fit). A linear stretch is one read
    /// ([`PATH_RUN`]); each jump to an explicit parent further back than the
    /// rows read, and each step into a base, reads again. A read past a jump
    /// passes over messages of other branches (at most `limit` per read).
    pub fn walk(
        &self,
        session_id: &str,
        start: Start,
        limit: usize,
        room: usize,
    ) -> Result<Walk, SqlError> {
        self.walk_until(session_id, start, limit, room, false)
    }

    /// [`Store::walk`] for a model context: it ends at the newest
    /// compaction entry of the path (included), and loads no body older
    /// than it.
    pub fn walk_context(
        &self,
        session_id: &str,
        start: Start,
        limit: usize,
        room: usize,
    ) -> Result<Walk, SqlError> {
        self.walk_until(session_id, start, limit, room, true)
    }

    fn walk_until(
        &self,
        session_id: &str,
        start: Start,
        limit: usize,
        room: usize,
        summary: bool,
    ) -> Result<Walk, SqlError> {
        let mut walk = Walk {
            rows: Vec::new(),
            chain: vec![Level {
                session_id: session_id.to_owned(),
                base: None,
            }],
            branched: false,
        };
        // Levels whose base was read.
        let mut based = vec![false];
        let mut level = 0;
        let (mut want, mut skip) = match start {
            Start::Tip => (None, false),
            Start::At(seq) => (Some(seq), false),
            Start::Below(seq) => (Some(seq), true),
        };
        let mut used = 0usize;
        let mut loading = true;
        let mut first = true;
        let mut ended = false;
        while !ended && walk.rows.len() < limit && want.is_none_or(|w| w > 0) {
            let ask = limit - walk.rows.len() + usize::from(skip);
            let room_left = if loading { room - used } else { 0 };
            let rows = self.query(
                PATH_RUN,
                &[
                    walk.chain[level].session_id.as_str().into(),
                    want.into(),
                    (ask as i64).into(),
                    i64::try_from(room_left).unwrap_or(i64::MAX).into(),
                    i64::from(summary).into(),
                ],
            )?;
            // The join keeps the window's order (its plan's outer loop);
            // without an ORDER BY SQLite does not promise it, so it is checked.
            if rows
                .windows(2)
                .any(|w| w[0].int(0).ok() <= w[1].int(0).ok())
            {
                return Err(SqlError::Decode(
                    "a path read's rows came out of order".into(),
                ));
            }
            let found = rows.first().map(|r| r.int(0)).transpose()?;
            if first && found.is_some() {
                walk.branched = rows[0].int(4)? == 1;
                first = false;
            }
            let target = match (want, found) {
                (Some(w), _) => w,
                (None, Some(tip)) => tip,
                (None, None) => {
                    // No message at or below the tip here: the tip is the
                    // empty path or lies in the base.
                    let Some(facts) = self.facts(session_id)? else {
                        break;
                    };
                    walk.branched = facts.branched;
                    first = false;
                    walk.chain[0].base = facts.base.clone();
                    based[0] = true;
                    want = Some(facts.tip());
                    continue;
                }
            };
            if found != Some(target) {
                // Not held here: by the base, if it lies below it.
                if !based[level] {
                    let facts = self.facts(&walk.chain[level].session_id)?;
                    if first {
                        walk.branched = facts.as_ref().is_some_and(|f| f.branched);
                        first = false;
                    }
                    walk.chain[level].base = facts.and_then(|f| f.base);
                    based[level] = true;
                }
                match walk.chain[level].base.clone() {
                    Some((base, seq)) if target <= seq => {
                        if level + 1 == walk.chain.len() {
                            walk.chain.push(Level {
                                session_id: base,
                                base: None,
                            });
                            based.push(false);
                        }
                        level += 1;
                        continue;
                    }
                    // A position no message holds: the path ends.
                    _ => break,
                }
            }
            let mut expect = target;
            for row in &rows {
                let mut row = path_row(level, row)?;
                if row.seq > expect {
                    continue; // another branch's
                }
                if row.seq < expect {
                    break; // the path jumped past what this read holds
                }
                expect = row.parent_seq();
                if skip {
                    skip = false;
                    continue;
                }
                let fits = loading && used + row.bytes <= room;
                if fits && row.body.is_none() {
                    // Other branches' bytes (or compaction entry) in this
                    // read left it out.
                    expect = row.seq;
                    break;
                }
                if fits {
                    used += row.bytes;
                } else {
                    loading = false;
                    row.body = None;
                }
                ended = summary && row.compaction;
                walk.rows.push(row);
                if ended || walk.rows.len() == limit {
                    break;
                }
            }
            want = Some(expect);
        }
        Ok(walk)
    }

    /// `query` (Session `?1`, the JSON array `?2` of positions, then
    /// `extra`) run for the rows `walk.rows[at]` that `wanted` keeps, once
    /// per Session holding some, newer holders first; `found(index, row)`
    /// for each answer row, by the index of its position (column 0) in
    /// `walk.rows`; stops at the first holder where `found` says so.
    fn per_holder(
        &self,
        walk: &Walk,
        at: std::ops::Range<usize>,
        wanted: &dyn Fn(&PathRow) -> bool,
        query: &str,
        extra: Option<&str>,
        found: &mut dyn FnMut(usize, &Row) -> Result<bool, SqlError>,
    ) -> Result<(), SqlError> {
        for holder in 0..walk.chain.len() {
            let mine: Vec<usize> = at
                .clone()
                .filter(|&i| walk.rows[i].holder == holder && wanted(&walk.rows[i]))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let mut params = vec![
                walk.chain[holder].session_id.as_str().into(),
                seqs_json(mine.iter().map(|&i| walk.rows[i].seq)).into(),
            ];
            params.extend(extra.map(Into::into));
            let mut stop = false;
            for row in &self.query(query, &params)? {
                let seq = row.opt_int(0)?;
                if let Some(&i) = mine.iter().find(|&&i| Some(walk.rows[i].seq) == seq) {
                    stop |= found(i, row)?;
                }
            }
            if stop {
                break;
            }
        }
        Ok(())
    }

    /// Loads the bodies of `walk.rows[at]` that the walk left without.
    pub fn load_bodies(&self, walk: &mut Walk, at: std::ops::Range<usize>) -> Result<(), SqlError> {
        let mut bodies = Vec::new();
        self.per_holder(
            walk,
            at,
            &|r| r.body.is_none(),
            BODIES_AT,
            None,
            &mut |i, row| {
                bodies.push((i, row.text(1)?));
                Ok(false)
            },
        )?;
        for (i, body) in bodies {
            walk.rows[i].body = Some(body);
        }
        Ok(())
    }

    /// The entry id of `walk.rows[at]` (SQLite reads its body; only the id
    /// crosses).
    pub fn entry_id(&self, walk: &Walk, at: usize) -> Result<Option<String>, SqlError> {
        let mut id = None;
        self.per_holder(
            walk,
            at..at + 1,
            &|_| true,
            "SELECT seq, json_extract(body, '$.entryId') FROM messages
             WHERE session_id = ?1 AND seq IN (SELECT value FROM json_each(?2))",
            None,
            &mut |_, row| {
                id = row.opt_text(1)?;
                Ok(true)
            },
        )?;
        Ok(id)
    }

    /// The first of `walk.rows[at]` whose entry id is `entry_id`. SQLite
    /// compares the start of each body; none crosses.
    pub fn entry_in_walk(
        &self,
        walk: &Walk,
        at: std::ops::Range<usize>,
        entry_id: &str,
    ) -> Result<Option<usize>, SqlError> {
        let mut found = None;
        self.per_holder(
            walk,
            at,
            &|_| true,
            "SELECT seq FROM messages WHERE session_id = ?1
               AND seq IN (SELECT value FROM json_each(?2)) AND substr(body, 1, length(?3)) = ?3",
            Some(&entry_prefix(entry_id)),
            &mut |i, _| {
                found = Some(i);
                Ok(true)
            },
        )?;
        Ok(found)
    }

    /// The body of the message `entry_id` on the path from `start`: walked
    /// [`SEARCH_ROWS`] positions at a time without bodies, each run
    /// searched by [`Store::entry_in_walk`]. Its cost grows with the path's
    /// messages newer than the entry, never with other branches'.
    pub fn find_on_path(
        &self,
        session_id: &str,
        mut start: Start,
        entry_id: &str,
    ) -> Result<Option<String>, SqlError> {
        loop {
            let mut walk = self.walk(session_id, start, SEARCH_ROWS, 0)?;
            let Some(last) = walk.rows.last() else {
                return Ok(None);
            };
            start = Start::Below(last.seq);
            if let Some(at) = self.entry_in_walk(&walk, 0..walk.rows.len(), entry_id)? {
                self.load_bodies(&mut walk, at..at + 1)?;
                return Ok(walk.rows.swap_remove(at).body);
            }
        }
    }

    /// The first of `walk.rows[at]` (the newest) whose `role` is `role`.
    /// SQLite reads the bodies; none crosses.
    pub fn newest_with_role(
        &self,
        walk: &Walk,
        at: std::ops::Range<usize>,
        role: &str,
    ) -> Result<Option<usize>, SqlError> {
        let mut newest = None;
        self.per_holder(
            walk,
            at,
            &|_| true,
            "SELECT max(seq) FROM messages WHERE session_id = ?1
               AND seq IN (SELECT value FROM json_each(?2))
               AND json_extract(body, '$.role') = ?3",
            Some(role),
            &mut |i, _| {
                newest = Some(i);
                Ok(true)
            },
        )?;
        Ok(newest)
    }

    /// The first messages of branches held by the Session whose parent is
    /// one of `parents`: `(parent, seq, whether the message at parent + 1
    /// in this Session continues the parent linearly)`. One index seek per
    /// parent ([`EXPLICIT_CHILDREN`]).
    pub fn explicit_children(
        &self,
        session_id: &str,
        parents: &[i64],
    ) -> Result<Vec<(i64, i64, bool)>, SqlError> {
        self.query(
            EXPLICIT_CHILDREN,
            &[session_id.into(), seqs_json(parents.iter().copied()).into()],
        )?
        .iter()
        .map(|r| Ok((r.int(0)?, r.int(1)?, r.int(2)? == 1)))
        .collect()
    }

    /// The first messages of the Session's branches with `seq > after`, as
    /// `(seq, parent)`, in `seq` order (`by_parent`: in `(parent, seq)`
    /// order, its index's): every fork point of the Session, read through
    /// its partial index (one entry per branch, bounded by
    /// `BRANCHES_PER_SESSION_MAX`).
    pub fn branch_starts(
        &self,
        session_id: &str,
        after: i64,
        by_parent: bool,
    ) -> Result<Vec<(i64, i64)>, SqlError> {
        let text = if by_parent {
            "SELECT seq, parent FROM messages INDEXED BY messages_children
             WHERE session_id = ?1 AND parent IS NOT NULL AND seq > ?2 ORDER BY parent, seq"
        } else {
            "SELECT seq, parent FROM messages INDEXED BY messages_children
             WHERE session_id = ?1 AND parent IS NOT NULL AND seq > ?2 ORDER BY seq"
        };
        self.query(text, &[session_id.into(), after.into()])?
            .iter()
            .map(|r| Ok((r.int(0)?, r.int(1)?)))
            .collect()
    }

    /// How many branches the Session's own messages start.
    pub fn branch_count(&self, session_id: &str) -> Result<usize, SqlError> {
        super::count(self.query(
            "SELECT count(*) FROM messages INDEXED BY messages_children
             WHERE session_id = ?1 AND parent IS NOT NULL",
            &[session_id.into()],
        )?)
    }

    /// The Session's explicit children of position `parent` with
    /// `seq > after`, oldest first, at most `limit`; how many it holds in
    /// all, and how many of them at or before `after`.
    pub fn children_page(
        &self,
        session_id: &str,
        parent: i64,
        after: i64,
        limit: usize,
    ) -> Result<(Vec<i64>, usize, usize), SqlError> {
        let seqs = self
            .query(
                "SELECT seq FROM messages INDEXED BY messages_children
                 WHERE session_id = ?1 AND parent = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4",
                &[
                    session_id.into(),
                    parent.into(),
                    after.into(),
                    (limit as i64).into(),
                ],
            )?
            .iter()
            .map(|r| r.int(0))
            .collect::<Result<_, _>>()?;
        let rows = self.query(
            "SELECT count(*), coalesce(sum(seq <= ?3), 0) FROM messages INDEXED BY messages_children
             WHERE session_id = ?1 AND parent = ?2",
            &[session_id.into(), parent.into(), after.into()],
        )?;
        let count = |i| -> Result<usize, SqlError> {
            let n = rows.first().map(|r| r.int(i)).transpose()?.unwrap_or(0);
            Ok(usize::try_from(n).unwrap_or(0))
        };
        Ok((seqs, count(0)?, count(1)?))
    }

    /// Whether the Session holds a message at `seq` that continues
    /// `seq - 1` linearly.
    pub fn continues(&self, session_id: &str, seq: i64) -> Result<bool, SqlError> {
        Ok(!self
            .query(
                "SELECT 1 FROM messages WHERE session_id = ?1 AND seq = ?2 AND parent IS NULL",
                &[session_id.into(), seq.into()],
            )?
            .is_empty())
    }

    /// `(seq, body)` of the Session's messages at `seqs`.
    pub fn bodies_at(
        &self,
        session_id: &str,
        seqs: &[i64],
    ) -> Result<Vec<(i64, String)>, SqlError> {
        self.query(
            BODIES_AT,
            &[session_id.into(), seqs_json(seqs.iter().copied()).into()],
        )?
        .iter()
        .map(|r| Ok((r.int(0)?, r.text(1)?)))
        .collect()
    }

    /// The newest message of the Session at or below `below` whose entry
    /// id is `entry_id`: `(seq, role)`. A scan newest first that stops at
    /// the match (no index: one would cost a row per message written), so
    /// its cost grows with the bytes of the messages newer than the entry.
    pub fn find_entry(
        &self,
        session_id: &str,
        entry_id: &str,
        below: i64,
    ) -> Result<Option<(i64, Option<String>)>, SqlError> {
        let prefix = entry_prefix(entry_id);
        let rows = self.query(
            "SELECT seq, json_extract(body, '$.role') FROM messages
             WHERE session_id = ?1 AND seq <= ?2 AND substr(body, 1, length(?3)) = ?3
             ORDER BY seq DESC LIMIT 1",
            &[session_id.into(), below.into(), prefix.into()],
        )?;
        rows.first()
            .map(|r| Ok((r.int(0)?, r.opt_text(1)?)))
            .transpose()
    }

    /// The Session holding entry `entry_id`, of all the Agent's: a scan of
    /// every message, for a refusal to name where the entry is.
    pub fn entry_holder(&self, entry_id: &str) -> Result<Option<String>, SqlError> {
        let rows = self.query(
            "SELECT session_id FROM messages WHERE substr(body, 1, length(?1)) = ?1 LIMIT 1",
            &[entry_prefix(entry_id).into()],
        )?;
        rows.first().map(|r| r.text(0)).transpose()
    }

    /// A Session whose view continues into `session_id` (one of its forks).
    pub fn fork_of(&self, session_id: &str) -> Result<Option<String>, SqlError> {
        let rows = self.query(
            "SELECT session_id FROM sessions WHERE base_session = ? LIMIT 1",
            &[session_id.into()],
        )?;
        rows.first().map(|r| r.text(0)).transpose()
    }

    /// A new Session whose view continues into `base` at position `seq`.
    pub fn insert_fork(
        &self,
        session_id: &str,
        base: &str,
        seq: i64,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        self.write(
            "INSERT INTO sessions (session_id, created_at, base_session, base_seq) VALUES (?, ?, ?, ?)",
            vec![session_id.into(), now_ms.into(), base.into(), seq.into()],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::native::NativeSql;
    use crate::sql::SqlValue;

    fn plan(sql: &NativeSql, text: &str, params: &[crate::sql::SqlValue]) -> Vec<String> {
        crate::sql::read(sql, &format!("EXPLAIN QUERY PLAN {text}"), params)
            .unwrap()
            .iter()
            .map(|r| r.text(3).unwrap())
            .collect()
    }

    /// A walk's run is read on every model call and page: SQLite must walk
    /// the primary key newest first and stop at the limit, with no sort (two
    /// temporary B-trees cost ~6% of a turn's CPU in workerd before), and
    /// find the tip and the Session's forks through their keys.
    #[test]
    fn a_walk_run_needs_no_sort() {
        let sql = NativeSql::open_in_memory();
        super::super::schema::open(&sql).unwrap();
        let steps = plan(
            &sql,
            PATH_RUN,
            &[
                "s".into(),
                SqlValue::Null,
                200.into(),
                1000.into(),
                1.into(),
            ],
        );
        assert!(
            steps.iter().all(|step| !step.contains("TEMP B-TREE")),
            "{steps:?}"
        );
        assert!(steps.iter().any(|step| step.contains("USING PRIMARY KEY")));
        assert!(
            steps.iter().any(|step| step.contains("messages_children")),
            "{steps:?}"
        );
        assert!(steps.iter().all(|step| !step.starts_with("SCAN messages")));
        // The window streams (a co-routine) as the outer loop.
        assert!(steps.iter().any(|step| step == "CO-ROUTINE w"), "{steps:?}");
    }

    /// A page's fork points: one seek per parent, never a scan of the
    /// Session's branches per parent.
    #[test]
    fn fork_points_are_one_seek_per_parent() {
        let sql = NativeSql::open_in_memory();
        super::super::schema::open(&sql).unwrap();
        let steps = plan(&sql, EXPLICIT_CHILDREN, &["s".into(), "[1,2]".into()]);
        assert!(steps[0].starts_with("SCAN j"), "{steps:?}");
        assert!(
            steps
                .iter()
                .any(|s| s.contains("messages_children (session_id=? AND parent=?)")),
            "{steps:?}"
        );
    }
}
