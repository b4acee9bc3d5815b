//! Token budgets (issue 38): the most tokens one Session may spend, and
//! the most the Agent's Sessions together may spend in a UTC day. The host
//! configures defaults ([`Limits`]); the host-only routes set either over
//! them (`PUT /budget`, `PUT /sessions/:id/budget`).
//!
//! A token is one the provider reported for a call, input (cached parts
//! included) plus output. Before each model call of a turn ([`gate`], in
//! the driver's `Turn::request`) what is spent, with the calls in flight
//! charged their estimate, is compared against the budgets: a call they
//! cannot cover pauses the turn instead (`shiitake_paused`); one they can
//! is charged its estimated input at once ([`Charge`]), and its outcome's
//! write replaces the estimate with what the provider reported: the call's
//! ledger row carries the charge (the driver hands it over in memory) and
//! the group's trigger corrects the counters as the row is inserted. A call cut off by a crash, an eviction or a cancel keeps its
//! estimate charged: its real usage is unknown (the ledger says `unknown`),
//! and a crash must not make calls free. So no crash, retry or concurrent
//! turn overspends a budget by more than, per Session, one call's output
//! and the error of its input's estimate: each Session has at most one call
//! in flight, every call in flight is charged before it is sent, and the
//! estimate counts the instructions and tools it sends.
//!
//! A paused turn stays `running`; cancel and abort end it as any other. A
//! claim pass ([`run::reconcile`](crate::run)) resumes it, at the attempt
//! it holds, once its budgets cover what it needs: after a raise, or at the
//! next UTC day for the Agent's budget.
//!
//! Counting costs a statement a model call (the gate, which checks and
//! charges at once) and rows (the two counters, charged then corrected),
//! so it starts when the first budget is set or configured ([`open`]: the
//! group is made with its counters summed from the ledger) and then goes
//! on; an Agent with no budget pays nothing.

use crate::limits::BUDGET_TOKENS_MAX;
use crate::sql::{
    atomically, cached_read, read_beside, write, write_returning, Sql, SqlError, SqlValue,
};
use crate::store::schema::{BUDGET, USAGE};
use serde::Serialize;
use std::rc::Rc;

/// Milliseconds of a UTC day.
pub const DAY_MS: i64 = 86_400_000;

/// The budgets the host configures (`SHIITAKE_BUDGET_DAILY_TOKENS`,
/// `SHIITAKE_BUDGET_SESSION_TOKENS`); `None`: none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// The Agent's, per UTC day, all Sessions together.
    pub daily: Option<u64>,
    /// Each Session's, over its whole life, unless set for it.
    pub session: Option<u64>,
}

impl Limits {
    pub const NONE: Limits = Limits {
        daily: None,
        session: None,
    };
}

/// Which budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Session,
    Agent,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Session => "session",
            Scope::Agent => "agent",
        }
    }

    fn parse(text: &str) -> Option<Scope> {
        match text {
            "session" => Some(Scope::Session),
            "agent" => Some(Scope::Agent),
            _ => None,
        }
    }
}

/// A budget a model call did not fit: `spent` (calls in flight charged
/// their estimate) plus `needs` (the call's estimated input) reaches
/// `tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reached {
    pub scope: Scope,
    pub tokens: u64,
    pub spent: u64,
    pub needs: u64,
}

/// A turn paused by a budget, as reads serve it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Paused {
    /// Always `budget_reached`.
    pub reason: &'static str,
    pub budget: Reached,
    pub since: i64,
    #[serde(skip)]
    pub session_id: String,
    #[serde(skip)]
    pub command_id: String,
    #[serde(skip)]
    pub attempt: u32,
}

/// The reason a paused turn carries.
pub const BUDGET_REACHED: &str = "budget_reached";

/// The UTC day number of `now_ms`.
pub fn day_of(now_ms: i64) -> i64 {
    now_ms.div_euclid(DAY_MS)
}

fn session_scope(session_id: &str) -> String {
    format!("session:{session_id}")
}

fn day_scope(day: i64) -> String {
    format!("day:{day}")
}

/// Whether calls are counted against budgets: the group exists.
pub fn counted(sql: &dyn Sql) -> bool {
    BUDGET.exists(sql)
}

/// Whether a model call passes [`gate`]: budgets are configured or counted.
pub fn applies(sql: &dyn Sql, config: &Limits) -> bool {
    *config != Limits::NONE || counted(sql)
}

/// Starts counting unless it has: makes the group, its counters summed
/// from the usage ledger (each Session's calls, today's calls), in a
/// transition of its own. One scan of the ledger, once per store.
pub fn open(sql: &dyn Sql, now_ms: i64) -> Result<(), SqlError> {
    if counted(sql) {
        return Ok(());
    }
    atomically(sql, || {
        // The trigger that keeps the counters reads the ledger.
        let ledger = USAGE.exists(sql);
        USAGE.ensure(sql)?;
        BUDGET.ensure(sql)?;
        if ledger {
            const TOKENS: &str =
                "coalesce(sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)), 0)";
            write(
                sql,
                &format!(
                    "INSERT INTO shiitake_spend (scope, tokens)
                     SELECT 'session:' || session_id, {TOKENS} FROM shiitake_usage
                     WHERE session_id IN (SELECT session_id FROM sessions) GROUP BY session_id"
                ),
                Vec::new(),
            )?;
            let day = day_of(now_ms);
            write(
                sql,
                &format!(
                    "INSERT INTO shiitake_spend (scope, tokens)
                     SELECT ?, {TOKENS} FROM shiitake_usage WHERE at >= ?"
                ),
                vec![day_scope(day).into(), (day * DAY_MS).into()],
            )?;
        }
        Ok(())
    })
}

/// What one Session's budgets stand at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Standing {
    /// The Session's budget and whether a route set it (else the config).
    session: (Option<u64>, bool),
    /// The Agent's daily budget and whether a route set it.
    daily: (Option<u64>, bool),
    session_spent: u64,
    day_spent: u64,
}

impl Standing {
    /// The first budget a call of `needs` tokens does not fit: a call
    /// spends at least one output token beyond its input, so `spent +
    /// needs` must stay below the budget.
    fn reached(&self, needs: u64) -> Option<Reached> {
        let over = |scope, limit: Option<u64>, spent: u64| {
            limit
                .filter(|&tokens| spent.saturating_add(needs) >= tokens)
                .map(|tokens| Reached {
                    scope,
                    tokens,
                    spent,
                    needs,
                })
        };
        over(Scope::Session, self.session.0, self.session_spent)
            .or_else(|| over(Scope::Agent, self.daily.0, self.day_spent))
    }
}

/// Reads the budgets and counters of `session_id` (`None`: the Agent's
/// only) on `day`: one statement. The group must exist.
fn standing(
    sql: &dyn Sql,
    config: &Limits,
    session_id: Option<&str>,
    day: i64,
) -> Result<Standing, SqlError> {
    let session = session_id.map(session_scope).unwrap_or_default();
    let rows = read_beside(
        sql,
        &["shiitake_budgets", "shiitake_spend"],
        "SELECT 0, scope, tokens FROM shiitake_budgets WHERE scope IN ('agent', ?1)
         UNION ALL SELECT 1, scope, tokens FROM shiitake_spend WHERE scope IN (?1, ?2)",
        &[session.as_str().into(), day_scope(day).into()],
    )?;
    let mut standing = Standing {
        session: (config.session.filter(|_| session_id.is_some()), false),
        daily: (config.daily, false),
        ..Standing::default()
    };
    for row in rows {
        let tokens = row.int(2)?.max(0) as u64;
        match (row.int(0)?, row.text(1)?.starts_with("session:")) {
            (0, true) => standing.session = (Some(tokens), true),
            (0, false) => standing.daily = (Some(tokens), true),
            (_, true) => standing.session_spent = tokens,
            (_, false) => standing.day_spent = tokens,
        }
    }
    Ok(standing)
}

/// The estimate a call was charged ([`gate`]), until its outcome's ledger
/// row replaces it (`usage::record` keeps it on the row; the group's
/// trigger does the arithmetic).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    pub tokens: u64,
    /// The UTC day it was charged to.
    pub day: i64,
}

/// What [`gate`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gated {
    /// The call goes ahead, charged.
    Charged(Charge),
    /// Over a budget: the turn is paused, nothing charged.
    Paused(Reached),
}

/// Before a model call of the turn `command_id` of `session_id` under
/// `attempt`, whose input is estimated at `needs` tokens. Covered, the
/// call is charged `needs` until its outcome's ledger row replaces it: one
/// statement, which checks and charges both counters at once. Over a
/// budget the turn is paused, with nothing charged (a transition of its
/// own). The group must exist ([`open`]).
pub fn gate(
    sql: &dyn Sql,
    config: &Limits,
    call: (&str, &str, u32),
    needs: u64,
    now_ms: i64,
) -> Result<Gated, SqlError> {
    let (session_id, command_id, attempt) = call;
    let day = day_of(now_ms);
    let session = session_scope(session_id);
    let tokens = count(needs);
    let limit = |n: Option<u64>| n.map_or(SqlValue::Null, count);
    // A budget covers the call while `spent + needs < tokens`
    // (`Standing::reached` says the same of a paused turn).
    let charged = write_returning(
        sql,
        "INSERT INTO shiitake_spend (scope, tokens)
         SELECT scope, ?3 FROM (SELECT ?1 AS scope UNION ALL SELECT ?2)
         WHERE NOT EXISTS (SELECT 1 FROM
             (SELECT coalesce((SELECT tokens FROM shiitake_budgets WHERE scope = ?1), ?4) AS b,
                     coalesce((SELECT tokens FROM shiitake_spend WHERE scope = ?1), 0) AS s
              UNION ALL
              SELECT coalesce((SELECT tokens FROM shiitake_budgets WHERE scope = 'agent'), ?5),
                     coalesce((SELECT tokens FROM shiitake_spend WHERE scope = ?2), 0))
             WHERE b IS NOT NULL AND s + ?3 >= b)
         ON CONFLICT (scope) DO UPDATE SET tokens = tokens + excluded.tokens
         RETURNING scope",
        &[
            session.as_str().into(),
            day_scope(day).into(),
            tokens.clone(),
            limit(config.session),
            limit(config.daily),
        ],
    )?;
    if !charged.is_empty() {
        return Ok(Gated::Charged(Charge { tokens: needs, day }));
    }
    atomically(sql, || {
        let standing = standing(sql, config, Some(session_id), day)?;
        let reached = standing.reached(needs).ok_or_else(|| {
            SqlError::Decode("budget: a call not charged that its budgets cover".into())
        })?;
        write(
            sql,
            "INSERT OR REPLACE INTO shiitake_paused
             (session_id, command_id, attempt, scope, tokens, spent, needs, since)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            vec![
                session_id.into(),
                command_id.into(),
                i64::from(attempt).into(),
                reached.scope.as_str().into(),
                count(reached.tokens),
                count(reached.spent),
                tokens.clone(),
                now_ms.into(),
            ],
        )?;
        Ok(Gated::Paused(reached))
    })
}

fn count(n: u64) -> SqlValue {
    SqlValue::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

/// Every paused turn (at most one per Session), for each claim pass: kept
/// between passes until a write names the table (`sql::cached_read`), so
/// a pass costs no statement while nothing pauses or resumes.
pub fn paused(sql: &dyn Sql) -> Result<Rc<Vec<Paused>>, SqlError> {
    if !counted(sql) {
        return Ok(Rc::default());
    }
    cached_read(sql, "budget_paused", "shiitake_paused", || {
        paused_where(sql, "", &[])
    })
}

/// `session_id`'s paused turn.
pub fn paused_of(sql: &dyn Sql, session_id: &str) -> Result<Option<Paused>, SqlError> {
    if !counted(sql) {
        return Ok(None);
    }
    Ok(
        paused_where(sql, "WHERE session_id = ?", &[session_id.into()])?
            .into_iter()
            .next(),
    )
}

fn paused_where(sql: &dyn Sql, filter: &str, params: &[SqlValue]) -> Result<Vec<Paused>, SqlError> {
    let rows = read_beside(
        sql,
        &["shiitake_paused"],
        &format!(
            "SELECT session_id, command_id, attempt, scope, tokens, spent, needs, since
             FROM shiitake_paused {filter}"
        ),
        params,
    )?;
    rows.iter()
        .map(|r| {
            let scope = Scope::parse(&r.text(3)?)
                .ok_or_else(|| SqlError::Decode("budget: a paused turn's scope".into()))?;
            let n = |i| r.int(i).map(|v| v.max(0) as u64);
            Ok(Paused {
                reason: BUDGET_REACHED,
                budget: Reached {
                    scope,
                    tokens: n(4)?,
                    spent: n(5)?,
                    needs: n(6)?,
                },
                since: r.int(7)?,
                session_id: r.text(0)?,
                command_id: r.text(1)?,
                attempt: u32::try_from(r.int(2)?).unwrap_or(u32::MAX),
            })
        })
        .collect()
}

/// Whether `paused` may go on now: its budgets cover what it needs.
pub fn covers(
    sql: &dyn Sql,
    config: &Limits,
    paused: &Paused,
    now_ms: i64,
) -> Result<bool, SqlError> {
    let standing = standing(sql, config, Some(&paused.session_id), day_of(now_ms))?;
    Ok(standing.reached(paused.budget.needs).is_none())
}

/// Ends `session_id`'s pause (its turn resumes, or settles).
pub fn unpause(sql: &dyn Sql, session_id: &str) -> Result<(), SqlError> {
    write(
        sql,
        "DELETE FROM shiitake_paused WHERE session_id = ?",
        vec![session_id.into()],
    )
}

/// A deleted Session's budget, counter and pause go with it (the
/// Agent's day keeps what it spent).
pub fn forget_session(sql: &dyn Sql, session_id: &str) -> Result<(), SqlError> {
    let scope = session_scope(session_id);
    for (table, key, value) in [
        ("shiitake_budgets", "scope", scope.as_str()),
        ("shiitake_spend", "scope", scope.as_str()),
        ("shiitake_paused", "session_id", session_id),
    ] {
        write(
            sql,
            &format!("DELETE FROM {table} WHERE {key} = ?"),
            vec![value.into()],
        )?;
    }
    Ok(())
}

/// A budget as the routes answer it: `tokens` the budget in force (`null`:
/// none), `set` whether a route set it (else the host's configuration),
/// `spent` the tokens charged (`null` while nothing is counted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    pub tokens: Option<u64>,
    pub set: bool,
    pub spent: Option<u64>,
    /// The Agent's: when its day ends (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resets_at: Option<i64>,
    /// A Session's: its paused turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<Paused>,
}

/// `GET /budget`: the Agent's daily budget.
pub fn agent_view(sql: &dyn Sql, config: &Limits, now_ms: i64) -> Result<View, SqlError> {
    let day = day_of(now_ms);
    let (tokens, set, spent) = if counted(sql) {
        let s = standing(sql, config, None, day)?;
        (s.daily.0, s.daily.1, Some(s.day_spent))
    } else {
        (config.daily, false, None)
    };
    Ok(View {
        tokens,
        set,
        spent,
        resets_at: Some((day + 1) * DAY_MS),
        paused: None,
    })
}

/// `GET /sessions/:id/budget`: the Session's budget.
pub fn session_view(
    sql: &dyn Sql,
    config: &Limits,
    session_id: &str,
    now_ms: i64,
) -> Result<View, SqlError> {
    if !counted(sql) {
        return Ok(View {
            tokens: config.session,
            set: false,
            spent: None,
            resets_at: None,
            paused: None,
        });
    }
    let s = standing(sql, config, Some(session_id), day_of(now_ms))?;
    Ok(View {
        tokens: s.session.0,
        set: s.session.1,
        spent: Some(s.session_spent),
        resets_at: None,
        paused: paused_of(sql, session_id)?,
    })
}

/// Sets (`None`: clears, back to the configuration) the Agent's daily
/// budget (`session_id` `None`) or `session_id`'s, starting to count if it
/// had not.
pub fn set(
    sql: &dyn Sql,
    session_id: Option<&str>,
    tokens: Option<u64>,
    now_ms: i64,
) -> Result<(), SqlError> {
    debug_assert!(tokens.is_none_or(|t| t <= BUDGET_TOKENS_MAX));
    open(sql, now_ms)?;
    let scope = session_id.map_or_else(|| "agent".to_owned(), session_scope);
    atomically(sql, || match tokens {
        Some(tokens) => write(
            sql,
            "INSERT OR REPLACE INTO shiitake_budgets (scope, tokens) VALUES (?, ?)",
            vec![scope.as_str().into(), count(tokens)],
        ),
        None => write(
            sql,
            "DELETE FROM shiitake_budgets WHERE scope = ?",
            vec![scope.as_str().into()],
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_must_leave_room_for_its_output() {
        let standing = Standing {
            session: (Some(100), false),
            daily: (Some(1_000), true),
            session_spent: 40,
            day_spent: 900,
        };
        assert_eq!(standing.reached(59), None);
        assert_eq!(
            standing.reached(60).map(|r| r.scope),
            Some(Scope::Session),
            "spent + needs reaching the budget leaves no output"
        );
        let agent = Standing {
            session: (None, false),
            ..standing
        };
        assert_eq!(
            agent.reached(100),
            Some(Reached {
                scope: Scope::Agent,
                tokens: 1_000,
                spent: 900,
                needs: 100
            })
        );
        assert_eq!(
            Standing::default().reached(u64::MAX),
            None,
            "no budget, no limit"
        );
    }

    #[test]
    fn days_are_utc_day_numbers() {
        assert_eq!(day_of(0), 0);
        assert_eq!(day_of(DAY_MS - 1), 0);
        assert_eq!(day_of(DAY_MS), 1);
        assert_eq!(day_of(-1), -1);
    }
}
