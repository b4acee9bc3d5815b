//! The usage ledger (issue 38): one row per model call, written in the
//! same transition as the call's outcome, so each call is counted exactly
//! once whatever crashes or retries: `answered` (the write that records
//! the answer), `failed` (the retry or the failed settlement), `unknown`
//! (a call a crash cut off: no counts, never guessed; written by the claim
//! that resumes its turn). `GET /usage` answers totals over a time range,
//! grouped by Session, model or UTC day.
//!
//! The table is the feature group [`USAGE`] (`store::schema`).

use crate::limits::USAGE_PAGE_GROUPS_MAX;
use crate::model::{Metered, RawUsage};
use crate::sql::{read, write, Sql, SqlError, SqlValue};
use crate::store::schema::USAGE;
use serde::Serialize;

/// How a model call ended, as the ledger counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Answered,
    Failed,
    /// Cut off by a crash, an eviction or a reset: its usage is unknown.
    Unknown,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Failed => "failed",
            Outcome::Unknown => "unknown",
        }
    }
}

/// One model call of a turn's attempt.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub session_id: &'a str,
    /// The turn's head command.
    pub command_id: &'a str,
    pub attempt: u32,
}

const INSERT: &str = "INSERT INTO shiitake_usage (session_id, command_id, attempt, at, model,
    outcome, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
    reasoning_tokens, raw, raw_dropped, charged, charged_day)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// Stages the call's row in the open transition (making the group with
/// its first): call it in the write that records the call's outcome.
/// `metered` is `None` for an `unknown` call.
/// `charged`: the estimate the budget gate charged the call, kept on its
/// row; while the store counts budgets, the row's insert has the reported
/// tokens replace it (the budget group's trigger).
pub fn record(
    sql: &dyn Sql,
    call: Call<'_>,
    outcome: Outcome,
    metered: Option<&Metered>,
    charged: Option<crate::budget::Charge>,
    now_ms: i64,
) -> Result<(), SqlError> {
    USAGE.ensure(sql)?;
    let usage = metered.and_then(|m| m.usage);
    let count = |n: Option<u64>| match n {
        Some(n) => SqlValue::Integer(i64::try_from(n).unwrap_or(i64::MAX)),
        None => SqlValue::Null,
    };
    let (raw, dropped) = match metered.and_then(|m| m.raw.as_ref()) {
        Some(RawUsage::Kept(text)) => (SqlValue::Text(text.clone()), 0),
        Some(RawUsage::Dropped) => (SqlValue::Null, 1),
        None => (SqlValue::Null, 0),
    };
    let model = match metered.and_then(|m| m.model.as_deref()) {
        Some(model) => model.into(),
        None => SqlValue::Null,
    };
    write(
        sql,
        INSERT,
        vec![
            call.session_id.into(),
            call.command_id.into(),
            i64::from(call.attempt).into(),
            now_ms.into(),
            model,
            outcome.as_str().into(),
            count(usage.map(|u| u.input_tokens)),
            count(usage.map(|u| u.output_tokens)),
            count(usage.and_then(|u| u.cache_read_tokens)),
            count(usage.and_then(|u| u.cache_write_tokens)),
            count(usage.and_then(|u| u.reasoning_tokens)),
            raw,
            dropped.into(),
            charged
                .map(|c| count(Some(c.tokens)))
                .unwrap_or(SqlValue::Null),
            charged.map(|c| c.day).into(),
        ],
    )
}

/// What the ledger's groups are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum GroupBy {
    Session,
    /// `provider/model`; `unknown` for calls whose model the ledger does
    /// not know (cut off by a crash).
    Model,
    /// The UTC day of the call, `YYYY-MM-DD`.
    Day,
}

impl GroupBy {
    pub fn parse(value: &str) -> Option<GroupBy> {
        match value {
            "session" => Some(GroupBy::Session),
            "model" => Some(GroupBy::Model),
            "day" => Some(GroupBy::Day),
            _ => None,
        }
    }

    fn key(self) -> &'static str {
        match self {
            GroupBy::Session => "session_id",
            GroupBy::Model => "COALESCE(model, 'unknown')",
            GroupBy::Day => "date(at / 1000, 'unixepoch')",
        }
    }
}

/// A ledger query: calls with `from <= at < to` (ms since the epoch),
/// of one Session when `session_id` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub from: Option<i64>,
    pub to: Option<i64>,
    /// Only this Session's calls (deleted or never made: no calls).
    pub session_id: Option<String>,
    pub group_by: Option<GroupBy>,
    pub limit: usize,
    /// The key after which the page starts.
    pub cursor: Option<String>,
}

/// Counts of calls and the tokens providers reported for them. A token
/// count none of the calls reported is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    pub calls: u64,
    pub answered: u64,
    pub failed: u64,
    pub unknown: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// One group of a ledger page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerGroup {
    pub key: String,
    #[serde(flatten)]
    pub figures: Figures,
}

/// `GET /usage`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    pub from: Option<i64>,
    pub to: Option<i64>,
    /// The Session the figures are of; `None`: every call of the Agent.
    pub session_id: Option<String>,
    pub group_by: Option<GroupBy>,
    /// Over the whole range.
    pub totals: Figures,
    /// In key order, at most the query's limit.
    pub groups: Vec<LedgerGroup>,
    /// The next page's `cursor` ([`cursor_of`]); `None`: the last page.
    pub next_cursor: Option<String>,
}

/// The cursor of the page after group `key`: `k` and the key in lowercase
/// hex, so a cursor this API did not return is refused ([`key_of`]).
pub fn cursor_of(key: &str) -> String {
    format!("k{}", crate::text::hex(key.as_bytes()))
}

/// The group key a cursor of [`cursor_of`] carries; `None` for anything else.
pub fn key_of(cursor: &str) -> Option<String> {
    let hex = cursor.strip_prefix('k')?.as_bytes();
    let lowercase_hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    if hex.is_empty()
        || hex.len() % 2 != 0
        || hex.len() > 2 * crate::limits::USAGE_CURSOR_KEY_BYTES_MAX
        || !hex.iter().all(lowercase_hex)
    {
        return None;
    }
    let digit = |b: u8| {
        if b.is_ascii_digit() {
            b - b'0'
        } else {
            b - b'a' + 10
        }
    };
    let bytes = hex
        .chunks(2)
        .map(|p| digit(p[0]) << 4 | digit(p[1]))
        .collect();
    String::from_utf8(bytes).ok()
}

const FIGURES: &str = "COUNT(*), SUM(outcome = 'answered'), SUM(outcome = 'failed'),
    SUM(outcome = 'unknown'), SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens),
    SUM(cache_write_tokens), SUM(reasoning_tokens)";

/// The rows of a query: its range, and its Session when it names one.
fn filter(query: &Query) -> (&'static str, Vec<SqlValue>) {
    let mut params = vec![
        query.from.unwrap_or(i64::MIN).into(),
        query.to.unwrap_or(i64::MAX).into(),
    ];
    match &query.session_id {
        None => ("at >= ? AND at < ?", params),
        Some(id) => {
            params.push(id.as_str().into());
            ("at >= ? AND at < ? AND session_id = ?", params)
        }
    }
}

fn figures(row: &crate::sql::Row, first: usize) -> Result<Figures, SqlError> {
    let n = |i: usize| -> Result<Option<u64>, SqlError> {
        Ok(row
            .opt_int(first + i)?
            .map(|v| u64::try_from(v).unwrap_or(0)))
    };
    Ok(Figures {
        calls: n(0)?.unwrap_or(0),
        answered: n(1)?.unwrap_or(0),
        failed: n(2)?.unwrap_or(0),
        unknown: n(3)?.unwrap_or(0),
        input_tokens: n(4)?.unwrap_or(0),
        output_tokens: n(5)?.unwrap_or(0),
        cache_read_tokens: n(6)?,
        cache_write_tokens: n(7)?,
        reasoning_tokens: n(8)?,
    })
}

/// The ledger's totals over the query's range and one page of its groups
/// (at most `USAGE_PAGE_GROUPS_MAX`), of one Session when the query names
/// one. Two statements (one without `group_by`); none while the store
/// holds no ledger (no model call recorded yet).
pub fn ledger(sql: &dyn Sql, query: &Query) -> Result<Ledger, SqlError> {
    let mut ledger = Ledger {
        from: query.from,
        to: query.to,
        session_id: query.session_id.clone(),
        group_by: query.group_by,
        totals: Figures::default(),
        groups: Vec::new(),
        next_cursor: None,
    };
    if !USAGE.exists(sql) {
        return Ok(ledger);
    }
    let (rows, mut params) = filter(query);
    let totals = read(
        sql,
        &format!("SELECT {FIGURES} FROM shiitake_usage WHERE {rows}"),
        &params,
    )?;
    if let Some(row) = totals.first() {
        ledger.totals = figures(row, 0)?;
    }
    let Some(group_by) = query.group_by else {
        return Ok(ledger);
    };
    let limit = query.limit.min(USAGE_PAGE_GROUPS_MAX);
    params.push(query.cursor.clone().unwrap_or_default().into());
    params.push(i64::try_from(limit + 1).unwrap_or(i64::MAX).into());
    let rows = read(
        sql,
        &format!(
            "SELECT {key} AS k, {FIGURES} FROM shiitake_usage WHERE {rows}
             GROUP BY k HAVING k > ? ORDER BY k LIMIT ?",
            key = group_by.key()
        ),
        &params,
    )?;
    for row in rows.iter().take(limit) {
        ledger.groups.push(LedgerGroup {
            key: row.text(0)?,
            figures: figures(row, 1)?,
        });
    }
    if rows.len() > limit {
        ledger.next_cursor = ledger.groups.last().map(|g| cursor_of(&g.key));
    }
    Ok(ledger)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Usage;
    use crate::sql::{atomically, native::NativeSql};
    use crate::store::schema;

    fn metered(input: u64, output: u64, raw: Option<RawUsage>) -> Metered {
        Metered {
            model: Some("openai/m".into()),
            usage: Some(Usage {
                input_tokens: input,
                output_tokens: output,
                cache_read_tokens: Some(1),
                ..Usage::default()
            }),
            raw,
        }
    }

    fn query(group_by: Option<GroupBy>, limit: usize, cursor: Option<&str>) -> Query {
        Query {
            from: None,
            to: None,
            session_id: None,
            group_by,
            limit,
            cursor: cursor.map(str::to_owned),
        }
    }

    /// With budgets counted, a call's row replaces the estimate the gate
    /// charged (on the day it was charged, here the day before) with the
    /// reported tokens; a call cut off keeps its estimate.
    #[test]
    fn a_budgeted_calls_row_replaces_its_estimate_where_it_was_charged() {
        use crate::budget::{self, Gated, Limits, DAY_MS};
        let sql = NativeSql::open_in_memory();
        schema::open(&sql).unwrap();
        budget::open(&sql, 0).unwrap();
        let limits = Limits {
            daily: Some(1_000),
            session: Some(1_000),
        };
        let spent = |now| {
            let day = budget::agent_view(&sql, &limits, now).unwrap().spent;
            let session = budget::session_view(&sql, &limits, "s", now).unwrap().spent;
            (day, session)
        };
        let charge = |needs, now| match budget::gate(&sql, &limits, ("s", "c1", 1), needs, now) {
            Ok(Gated::Charged(charge)) => charge,
            other => panic!("{other:?}"),
        };
        let first = charge(100, DAY_MS - 1);
        assert_eq!(spent(DAY_MS - 1), (Some(100), Some(100)), "charged at once");
        let call = Call {
            session_id: "s",
            command_id: "c1",
            attempt: 1,
        };
        let m = metered(30, 5, None);
        atomically(&sql, || {
            record(
                &sql,
                call,
                Outcome::Answered,
                Some(&m),
                Some(first),
                DAY_MS + 1,
            )
        })
        .unwrap();
        assert_eq!(
            spent(DAY_MS - 1),
            (Some(0), Some(35)),
            "refunded where charged"
        );
        assert_eq!(spent(DAY_MS + 1), (Some(35), Some(35)), "reported today");
        let cut = charge(200, DAY_MS + 2);
        atomically(&sql, || {
            record(&sql, call, Outcome::Unknown, None, Some(cut), DAY_MS + 3)
        })
        .unwrap();
        assert_eq!(
            spent(DAY_MS + 3),
            (Some(235), Some(235)),
            "cut off: its estimate stays"
        );
        let rows = read(
            &sql,
            "SELECT charged, charged_day FROM shiitake_usage ORDER BY seq",
            &[],
        )
        .unwrap();
        assert_eq!(
            rows[0].0,
            vec![SqlValue::Integer(100), SqlValue::Integer(0)]
        );
        assert_eq!(
            rows[1].0,
            vec![SqlValue::Integer(200), SqlValue::Integer(1)]
        );
        // Over a budget: paused, nothing charged.
        assert!(matches!(
            budget::gate(&sql, &limits, ("s", "c1", 1), 765, DAY_MS + 4),
            Ok(Gated::Paused(_))
        ));
        assert_eq!(spent(DAY_MS + 4), (Some(235), Some(235)));
        assert_eq!(budget::paused(&sql).unwrap().len(), 1);
    }

    #[test]
    fn rows_sum_by_group_in_pages_and_unknown_calls_count_without_tokens() {
        let sql = NativeSql::open_in_memory();
        schema::open(&sql).unwrap();
        assert_eq!(
            ledger(&sql, &query(Some(GroupBy::Session), 10, None))
                .unwrap()
                .totals,
            Figures::default(),
            "no ledger yet: empty, no statement"
        );
        let day = 86_400_000;
        let rows = [
            ("a", Outcome::Answered, Some(metered(10, 2, None)), 0),
            ("a", Outcome::Failed, None, 1),
            ("b", Outcome::Unknown, None, day),
            (
                "c",
                Outcome::Answered,
                Some(metered(5, 1, Some(RawUsage::Dropped))),
                day,
            ),
        ];
        for (session, outcome, m, at) in &rows {
            let call = Call {
                session_id: session,
                command_id: "c1",
                attempt: 1,
            };
            atomically(&sql, || record(&sql, call, *outcome, m.as_ref(), None, *at)).unwrap();
        }
        let all = ledger(&sql, &query(Some(GroupBy::Session), 2, None)).unwrap();
        assert_eq!(
            all.totals,
            Figures {
                calls: 4,
                answered: 2,
                failed: 1,
                unknown: 1,
                input_tokens: 15,
                output_tokens: 3,
                cache_read_tokens: Some(2),
                ..Figures::default()
            }
        );
        let keys: Vec<&str> = all.groups.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(all.next_cursor.as_deref(), Some("k62"));
        assert_eq!(key_of("k62").as_deref(), Some("b"));
        assert_eq!(all.groups[1].figures.unknown, 1);
        assert_eq!(all.groups[1].figures.cache_read_tokens, None);
        let rest = ledger(&sql, &query(Some(GroupBy::Session), 2, Some("b"))).unwrap();
        assert_eq!(rest.groups.len(), 1);
        assert_eq!(rest.next_cursor, None);
        let days = ledger(&sql, &query(Some(GroupBy::Day), 10, None)).unwrap();
        let keys: Vec<&str> = days.groups.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["1970-01-01", "1970-01-02"]);
        let models = ledger(&sql, &query(Some(GroupBy::Model), 10, None)).unwrap();
        let keys: Vec<(&str, u64)> = models
            .groups
            .iter()
            .map(|g| (g.key.as_str(), g.figures.calls))
            .collect();
        assert_eq!(keys, [("openai/m", 2), ("unknown", 2)]);
        let ranged = Query {
            from: Some(1),
            to: Some(day),
            ..query(None, 10, None)
        };
        let ranged = ledger(&sql, &ranged).unwrap();
        assert_eq!((ranged.totals.calls, ranged.totals.failed), (1, 1));
        assert!(ranged.groups.is_empty());
        let of = |session: &str, from: Option<i64>, group_by| {
            let q = Query {
                session_id: Some(session.into()),
                from,
                ..query(group_by, 10, None)
            };
            ledger(&sql, &q).unwrap()
        };
        let a = of("a", None, Some(GroupBy::Day));
        assert_eq!(a.session_id.as_deref(), Some("a"));
        assert_eq!(
            a.totals,
            Figures {
                calls: 2,
                answered: 1,
                failed: 1,
                input_tokens: 10,
                output_tokens: 2,
                cache_read_tokens: Some(1),
                ..Figures::default()
            },
            "the Session's calls only"
        );
        let keys: Vec<(&str, u64)> = a
            .groups
            .iter()
            .map(|g| (g.key.as_str(), g.figures.calls))
            .collect();
        assert_eq!(keys, [("1970-01-01", 2)], "its groups too");
        assert_eq!(of("a", Some(1), None).totals.calls, 1, "and its range");
        let none = of("gone", None, Some(GroupBy::Session));
        assert_eq!(
            (none.totals, none.groups.len()),
            (Figures::default(), 0),
            "a Session without calls has none"
        );
        let dropped = sql
            .query(
                "SELECT raw, raw_dropped FROM shiitake_usage WHERE session_id = 'c'",
                &[],
            )
            .unwrap();
        assert_eq!(dropped[0].opt_text(0).unwrap(), None);
        assert_eq!(dropped[0].int(1).unwrap(), 1);
    }

    /// A cursor is what `cursor_of` made: anything else is refused.
    #[test]
    fn a_cursor_not_made_here_is_refused() {
        for key in ["s1", "openai/gpt-5-mini", "1970-01-01", "é"] {
            assert_eq!(key_of(&cursor_of(key)).as_deref(), Some(key));
        }
        let too_long = format!(
            "k{}",
            "61".repeat(crate::limits::USAGE_CURSOR_KEY_BYTES_MAX + 1)
        );
        for bad in [
            "",
            "k",
            "garbage",
            "62",
            "k6",
            "k6G",
            "kAB",
            "kff",
            too_long.as_str(),
        ] {
            assert_eq!(key_of(bad), None, "{bad}");
        }
    }
}
