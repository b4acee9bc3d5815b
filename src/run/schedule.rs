//! The Agent's schedule as a sans-IO machine, owned by the Agent machine
//! ([`super::agent::Agent`], which runs the turns it starts): when to claim
//! due turns, how many run, how long the loop naps, when the claim budget
//! hands over to a fresh alarm, and the deadline the alarm is left at. The
//! Agent feeds it [`Event`]s with the time and passes on the [`Output`]s
//! [`Schedule::poll`] yields; it decides nothing itself, so the whole
//! schedule runs natively (its unit tests, `tests/schedule.rs`).
//!
//! A loop runs from a wake (a request, the alarm) until no turn it started
//! is left. Each pass claims (`run::reconcile`, asked for with
//! [`Output::Reconcile`]) only when the store may hold work the last claim
//! did not see ("stale"): a wake, a due deadline, or a turn that ended any
//! other way than [`super::driver::Turn::left_no_work`]. A plain turn's end
//! thus costs no claim. Past [`LOOP_CLAIM_BUDGET_MS`] it claims nothing
//! more, lets the live turns end and leaves the alarm at now, so a fresh
//! alarm invocation continues.
//!
//! Beside the loop, and never blocking it, the delivery lane and mail run
//! passes one at a time ([`Output::LanePass`], [`Output::MailPass`]): a
//! wake during a pass runs one more after it, at most
//! `HOST_PASSES_PER_WAKE_MAX` (lane) or `MAIL_PASSES_PER_WAKE_MAX` (mail)
//! a wake, then the alarm continues ([`Output::ArmAfterPass`]). While a
//! pass runs its deadline is its own to arm, so the loop leaves it out.
//!
//! The one alarm is the schedule's to write ([`Output::SetAlarm`],
//! [`Output::DeleteAlarm`]): it remembers the alarm it asked for, a cache
//! that saves writes (none after a restart, as after the alarm fired), so
//! a request sets the alarm to now only when none is set at or before now,
//! owed work brings it only earlier, and a loop that ends owing nothing
//! deletes a spare one rather than have it run an empty pass.
//!
//! Invariants:
//! - at most one loop at a time, and at most one question ([`Output::Reconcile`],
//!   [`Output::ReadDeadlines`]) open; an answer the machine did not ask for
//!   is a bug of the host and is ignored;
//! - the loop ends only with no turn of its own running, and its end names
//!   the earliest durable deadline it knows (the [`Output::SetAlarm`] after
//!   [`Output::Idle`]): turns' retries, extension timers, the delivery
//!   lane, mail;
//! - nothing here is durable: a crash loses it, and a new instance's first
//!   claim rebuilds everything from the store.

use crate::limits::{
    HOST_PASSES_PER_WAKE_MAX, LOOP_CLAIM_BUDGET_MS, LOOP_NAP_MS_MAX, MAIL_PASSES_PER_WAKE_MAX,
};
use crate::observe;
use crate::run::driver::settled_events;
use crate::run::Step;
use crate::settlement::Settlement;
use std::collections::VecDeque;

/// What happened, told to [`Schedule::handle`].
#[derive(Debug)]
pub enum Event {
    /// A request found no loop running: one starts, the durable wake
    /// first (the alarm to now, unless one is set at or before now). The
    /// loop counts as running from here, so a second wake only joins it.
    Start,
    /// The alarm fired: it is spent, and with no loop running one starts.
    AlarmFired,
    /// The earliest durable deadline, read by the host (a starting
    /// instance, a failed loop, a live tool's heartbeat): the alarm is set
    /// to it.
    Deadline(Option<i64>),
    /// Work is owed at this time (mail staged for later): the alarm is
    /// brought earlier, never later.
    Owed(i64),
    /// The answer to [`Output::ArmAfterPass`]: with no loop running, the
    /// earliest durable deadline (as [`Event::Deadline`]); while one runs,
    /// the lane's and mail's (as [`Event::Owed`]: the loop's end arms the
    /// rest, and the alarm is never put past the wake a running turn keeps
    /// for a crash).
    PassLeft(Option<i64>),
    /// An alarm write failed: what is set is unknown.
    AlarmWriteFailed,
    /// The started loop's first pass may run (the host yields first, so
    /// the waking request's answer leaves before any claim).
    Begin,
    /// A request may have added work (an admission, a landed mail, an
    /// extension command that moved timers).
    Wake,
    /// Extension timers moved in a transition (a settled hook): claim at
    /// the next pass, without starting one.
    Rearm,
    /// The claim asked for with [`Output::Reconcile`]: the turns to start,
    /// those it settled with their Session, and the earliest work it left
    /// for later (turns' retries, extension timers and replays).
    Reconciled {
        steps: Vec<Step>,
        settled: Vec<(String, Settlement)>,
        later: Option<i64>,
        /// The head of every turn still running after it
        /// ([`crate::run::Reconciled::running`]): a turn held fresh and
        /// not among them settled meanwhile (the Agent's, not read here).
        running: Vec<String>,
    },
    /// The answer to [`Output::ReadDeadlines`]: the earliest of the
    /// delivery lane's and mail's deadlines.
    Deadlines(Option<i64>),
    /// A turn the loop started ended; `left_no_work`: it added nothing a
    /// claim must look for ([`super::driver::Turn::left_no_work`]).
    TurnEnded { left_no_work: bool },
    /// [`Schedule::poll_timeout`] passed.
    Timeout,
    /// The runtime closed: claim nothing more, let the live turns end
    /// (the host then wakes the loop).
    Close,
    /// The loop failed (a claim could not be read): it ends now, and the
    /// host arms the alarm for whatever is due.
    Failed,
    /// The delivery lane should look at its outbox (every wake, a
    /// transition that staged entries, a live tool's heartbeat).
    LaneWanted,
    /// A lane pass ended; `more`: it left entries past its bound.
    LanePassEnded { more: bool },
    /// Mail may be due (every wake, a transition that may have staged
    /// mail).
    MailWanted,
    /// A mail pass ended having carried `carried` mails.
    MailPassEnded { carried: usize },
}

/// What the schedule asks for, yielded by [`Schedule::poll`] in order: the
/// Agent starts the turns and hands the rest to the host as its own
/// outputs ([`super::agent::Output`]).
#[derive(Debug)]
pub enum Output {
    /// Run the due extension timers and replays, then claim
    /// (`run::reconcile`), and answer [`Event::Reconciled`].
    Reconcile,
    /// Start a claimed turn ([`super::driver::Turn`], the Agent's), its end
    /// reported with [`Event::TurnEnded`].
    StartTurn(Step),
    /// Publish an event of the Session.
    Publish {
        session_id: String,
        event: observe::Event,
    },
    /// Settlements were written: a delegated command's reply may be staged.
    MailStaged,
    /// Read the delivery lane's and mail's deadlines and answer
    /// [`Event::Deadlines`].
    ReadDeadlines,
    /// The loop ended; the alarm output for what it left follows at once
    /// ([`Output::SetAlarm`] its deadline, [`Output::DeleteAlarm`] a spare
    /// alarm, or none).
    Idle,
    /// Run one delivery lane pass, report it with [`Event::LanePassEnded`].
    LanePass,
    /// The lane's passes for this wake ended (whoever waits may go).
    LaneEnded,
    /// Run one mail pass, report it with [`Event::MailPassEnded`].
    MailPass,
    /// A lane's or mail's passes ended: read what they left for the
    /// alarm and answer [`Event::PassLeft`] (the Agent says which
    /// deadlines: [`super::agent::Output::ReadPassLeft`]).
    ArmAfterPass,
    /// Set the one alarm to this time; report a failure with
    /// [`Event::AlarmWriteFailed`].
    SetAlarm(i64),
    /// Delete the alarm: nothing is owed.
    DeleteAlarm,
}

/// A performer that runs one pass at a time (the delivery lane, mail): a
/// wake during a pass runs one more after it, at most `max` a wake.
#[derive(Debug, Default)]
struct Passes {
    running: bool,
    /// A wake arrived during the running pass.
    again: bool,
    /// Passes since the wake that started them.
    count: usize,
}

impl Passes {
    /// A wake: true when a pass starts now.
    fn wanted(&mut self) -> bool {
        if self.running {
            self.again = true;
            return false;
        }
        *self = Passes {
            running: true,
            again: false,
            count: 0,
        };
        true
    }

    /// A pass ended: true when another runs now.
    fn ended(&mut self, more: bool, max: usize, closed: bool) -> bool {
        self.count += 1;
        if (more || self.again) && self.count < max && !closed {
            self.again = false;
            return true;
        }
        self.running = false;
        false
    }
}

/// Where the loop is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// No loop runs.
    Idle,
    /// Started, first pass not begun.
    Starting,
    /// A claim was asked for.
    Claiming,
    /// Deadlines were asked for; `later`: what the loop knew so far.
    Ending { later: Option<i64> },
    /// Waiting for a turn to end, a wake, or `until`.
    Napping { until: i64 },
}

/// The Agent's schedule in this instance (see the module's documentation).
#[derive(Debug)]
pub struct Schedule {
    phase: Phase,
    /// When the running loop began: the claim budget counts from here.
    started: i64,
    /// The store may hold work the last claim did not see.
    stale: bool,
    /// The earliest work the last claim left for later.
    known_later: Option<i64>,
    /// A wake arrived while the loop was not napping.
    wake_requested: bool,
    /// Turns the loop started that have not ended.
    turns: usize,
    closed: bool,
    lane: Passes,
    mail: Passes,
    /// The alarm this instance asked for and that has not fired: a cache
    /// that saves writes, none after a restart.
    alarm: Option<i64>,
    out: VecDeque<Output>,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule::new()
    }
}

impl Schedule {
    pub fn new() -> Self {
        Schedule {
            phase: Phase::Idle,
            started: 0,
            stale: true,
            known_later: None,
            wake_requested: false,
            turns: 0,
            closed: false,
            lane: Passes::default(),
            mail: Passes::default(),
            alarm: None,
            out: VecDeque::new(),
        }
    }

    /// Whether a loop runs (from [`Event::Start`] or [`Event::AlarmFired`]
    /// until [`Output::Idle`]).
    pub fn running(&self) -> bool {
        self.phase != Phase::Idle
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Whether a lane pass runs (it arms the alarm when it ends, so the
    /// lane has no deadline meanwhile).
    pub fn lane_running(&self) -> bool {
        self.lane.running
    }

    /// Whether a mail pass runs (likewise).
    pub fn mail_running(&self) -> bool {
        self.mail.running
    }

    /// Whether the loop waits for the claim it asked for.
    pub fn claiming(&self) -> bool {
        self.phase == Phase::Claiming
    }

    /// Turns the running loop started that have not ended.
    pub fn turns(&self) -> usize {
        self.turns
    }

    pub fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The alarm this instance asked for (see [`Schedule`]'s `alarm`).
    pub fn alarm(&self) -> Option<i64> {
        self.alarm
    }

    /// When to tell the machine [`Event::Timeout`]: the end of the loop's
    /// nap. None while no loop naps (an idle Agent's deadline is on the
    /// alarm, [`Output::SetAlarm`]).
    pub fn poll_timeout(&self) -> Option<i64> {
        match self.phase {
            Phase::Napping { until } => Some(until),
            _ => None,
        }
    }

    pub fn handle(&mut self, event: Event, now: i64) {
        match event {
            Event::Start => {
                if self.alarm.is_none_or(|at| at > now) {
                    self.set_alarm(now);
                }
                self.start();
            }
            Event::AlarmFired => {
                self.alarm = None;
                self.start();
            }
            Event::Deadline(at) => {
                if let Some(at) = at {
                    self.set_alarm(at);
                }
            }
            Event::Owed(at) => self.owed(at),
            Event::PassLeft(at) => match at {
                Some(at) if self.running() => self.owed(at),
                Some(at) => self.set_alarm(at),
                None => {}
            },
            Event::AlarmWriteFailed => self.alarm = None,
            Event::Begin => {
                if self.phase == Phase::Starting {
                    self.started = now;
                    self.pass(now);
                }
            }
            Event::Wake => match self.phase {
                Phase::Napping { .. } => {
                    self.stale = true;
                    self.pass(now);
                }
                _ => self.wake_requested = true,
            },
            Event::Rearm => self.stale = true,
            Event::Reconciled {
                steps,
                settled,
                later,
                ..
            } => {
                if self.phase != Phase::Claiming {
                    return;
                }
                self.known_later = later;
                let any_settled = !settled.is_empty();
                for (session_id, settlement) in settled {
                    for event in settled_events(vec![settlement]) {
                        self.out.push_back(Output::Publish {
                            session_id: session_id.clone(),
                            event,
                        });
                    }
                }
                if any_settled {
                    self.out.push_back(Output::MailStaged);
                }
                self.turns += steps.len();
                self.out.extend(steps.into_iter().map(Output::StartTurn));
                self.after_claim(later, now);
            }
            Event::Deadlines(deadline) => {
                if let Phase::Ending { later } = self.phase {
                    self.end(earliest(later, deadline));
                }
            }
            Event::TurnEnded { left_no_work } => {
                self.turns = self.turns.saturating_sub(1);
                if !left_no_work {
                    self.stale = true;
                }
                if matches!(self.phase, Phase::Napping { .. }) {
                    self.pass(now);
                }
            }
            Event::Timeout => {
                if matches!(self.phase, Phase::Napping { until } if until <= now) {
                    self.stale = true;
                    self.pass(now);
                }
            }
            Event::Close => self.closed = true,
            Event::Failed => {
                self.phase = Phase::Idle;
                self.turns = 0;
            }
            Event::LaneWanted => {
                if !self.closed && self.lane.wanted() {
                    self.out.push_back(Output::LanePass);
                }
            }
            Event::LanePassEnded { more } => {
                if !self.lane.running {
                    return;
                }
                if self.lane.ended(more, HOST_PASSES_PER_WAKE_MAX, self.closed) {
                    self.out.push_back(Output::LanePass);
                    return;
                }
                self.out.push_back(Output::LaneEnded);
                if !self.closed {
                    self.out.push_back(Output::ArmAfterPass);
                }
            }
            Event::MailWanted => {
                if !self.closed && self.mail.wanted() {
                    self.out.push_back(Output::MailPass);
                }
            }
            Event::MailPassEnded { carried } => {
                if !self.mail.running {
                    return;
                }
                if self
                    .mail
                    .ended(carried > 0, MAIL_PASSES_PER_WAKE_MAX, self.closed)
                {
                    self.out.push_back(Output::MailPass);
                } else if !self.closed {
                    self.out.push_back(Output::ArmAfterPass);
                }
            }
        }
    }

    /// A loop starts unless one runs.
    fn start(&mut self) {
        if self.phase == Phase::Idle {
            self.phase = Phase::Starting;
            self.stale = true;
            self.known_later = None;
            self.turns = 0;
        }
    }

    fn set_alarm(&mut self, at: i64) {
        self.alarm = Some(at);
        self.out.push_back(Output::SetAlarm(at));
    }

    /// Brings the alarm earlier to `at`, never later.
    fn owed(&mut self, at: i64) {
        if self.alarm.is_none_or(|set| at < set) {
            self.set_alarm(at);
        }
    }

    /// One pass of the loop: claim if the store may hold new work, else
    /// nap or end.
    fn pass(&mut self, now: i64) {
        if std::mem::take(&mut self.wake_requested) || self.known_later.is_some_and(|at| at <= now)
        {
            self.stale = true;
        }
        let claiming = !self.closed && now - self.started < LOOP_CLAIM_BUDGET_MS;
        if claiming && self.stale {
            self.stale = false;
            self.phase = Phase::Claiming;
            self.out.push_back(Output::Reconcile);
            return;
        }
        // Past the budget, the work left is due now (a fresh alarm
        // continues); closed, none is.
        let later = match (claiming, self.closed) {
            (true, _) => self.known_later,
            (false, true) => None,
            (false, false) => Some(now),
        };
        self.after_claim(later, now);
    }

    /// Naps while turns run; otherwise asks for the remaining deadlines.
    fn after_claim(&mut self, later: Option<i64>, now: i64) {
        if self.turns == 0 {
            if self.closed {
                self.end(later);
            } else {
                self.phase = Phase::Ending { later };
                self.out.push_back(Output::ReadDeadlines);
            }
            return;
        }
        let nap = match later {
            Some(at) if now - self.started < LOOP_CLAIM_BUDGET_MS => {
                (at - now).clamp(0, LOOP_NAP_MS_MAX)
            }
            _ => LOOP_NAP_MS_MAX,
        };
        self.phase = Phase::Napping { until: now + nap };
    }

    /// The loop ends, leaving the alarm at `alarm`. Owing nothing, a
    /// spare alarm (set before this loop started, or by a heartbeat) goes
    /// rather than run an empty pass; kept while a lane or mail pass runs:
    /// each arms its own follow-up when it ends.
    fn end(&mut self, alarm: Option<i64>) {
        self.phase = Phase::Idle;
        self.out.push_back(Output::Idle);
        match alarm {
            Some(at) => self.set_alarm(at),
            None if self.alarm.is_some() && !self.lane.running && !self.mail.running => {
                self.alarm = None;
                self.out.push_back(Output::DeleteAlarm);
            }
            None => {}
        }
    }
}

/// The earlier of two optional deadlines.
pub fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::run::{Window, Work};

    /// A fresh turn's claim of `head` in Session `s`.
    pub(in crate::run) fn step(head: &str) -> Step {
        Step {
            session_id: "s".into(),
            command_id: head.into(),
            attempt: 1,
            context: Vec::new(),
            window: Window::default(),
            work: Work::Turn,
            tool_calls: Vec::new(),
            appended: Vec::new(),
            meta: None,
            branch: None,
        }
    }

    fn outputs(s: &mut Schedule) -> Vec<String> {
        std::iter::from_fn(|| s.poll())
            .map(|o| match o {
                Output::StartTurn(step) => format!("start {}", step.command_id),
                other => format!("{other:?}"),
            })
            .collect()
    }

    /// A loop begun at `now` that claimed `heads`, the claim leaving
    /// `later`.
    fn claimed(now: i64, heads: &[&str], later: Option<i64>) -> Schedule {
        let mut s = Schedule::new();
        s.handle(Event::Start, now);
        s.handle(Event::Begin, now);
        // The durable wake first.
        assert_eq!(
            outputs(&mut s),
            [format!("SetAlarm({now})"), "Reconcile".into()]
        );
        let steps = heads.iter().map(|h| step(h)).collect();
        s.handle(
            Event::Reconciled {
                steps,
                settled: Vec::new(),
                later,
                running: Vec::new(),
            },
            now,
        );
        s
    }

    #[test]
    fn a_plain_turns_end_costs_no_claim_and_any_other_end_claims_again() {
        let mut s = claimed(0, &["a", "b"], None);
        assert_eq!(outputs(&mut s), ["start a", "start b"]);
        s.handle(Event::TurnEnded { left_no_work: true }, 10);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        s.handle(
            Event::TurnEnded {
                left_no_work: false,
            },
            20,
        );
        assert_eq!(outputs(&mut s), ["Reconcile"]);
        s.handle(
            Event::Reconciled {
                steps: Vec::new(),
                settled: Vec::new(),
                later: Some(5_000),
                running: Vec::new(),
            },
            20,
        );
        // The loop ends: the lane's and mail's deadlines join the claim's.
        assert_eq!(outputs(&mut s), ["ReadDeadlines"]);
        s.handle(Event::Deadlines(Some(3_000)), 21);
        assert_eq!(outputs(&mut s), ["Idle", "SetAlarm(3000)"]);
        assert!(!s.running());
    }

    #[test]
    fn the_loop_naps_until_its_earliest_deadline_at_most_the_nap_bound() {
        let mut s = claimed(0, &["a"], Some(5_000));
        outputs(&mut s);
        assert_eq!(s.poll_timeout(), Some(5_000));
        // Due: the store may hold work the claim left, so it claims.
        s.handle(Event::Timeout, 5_000);
        assert_eq!(outputs(&mut s), ["Reconcile"]);
        s.handle(
            Event::Reconciled {
                steps: Vec::new(),
                settled: Vec::new(),
                later: Some(10 * LOOP_NAP_MS_MAX),
                running: Vec::new(),
            },
            5_000,
        );
        assert_eq!(s.poll_timeout(), Some(5_000 + LOOP_NAP_MS_MAX));
        // A timeout before the nap ends is not one.
        s.handle(Event::Timeout, 5_001);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
    }

    #[test]
    fn a_wake_claims_at_once_while_napping_and_at_the_next_pass_otherwise() {
        let mut s = claimed(0, &["a"], None);
        outputs(&mut s);
        s.handle(Event::Wake, 1);
        assert_eq!(outputs(&mut s), ["Reconcile"]);
        // A wake while the claim is open is kept for the next pass.
        s.handle(Event::Wake, 2);
        s.handle(
            Event::Reconciled {
                steps: Vec::new(),
                settled: Vec::new(),
                later: None,
                running: Vec::new(),
            },
            3,
        );
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        s.handle(Event::TurnEnded { left_no_work: true }, 4);
        assert_eq!(outputs(&mut s), ["Reconcile"]);
        // A settled hook that moved timers: the next pass claims.
        s.handle(
            Event::Reconciled {
                steps: vec![step("b")],
                settled: Vec::new(),
                later: None,
                running: Vec::new(),
            },
            5,
        );
        outputs(&mut s);
        s.handle(Event::Rearm, 6);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        s.handle(Event::TurnEnded { left_no_work: true }, 7);
        assert_eq!(outputs(&mut s), ["Reconcile"]);
    }

    #[test]
    fn past_the_claim_budget_it_claims_nothing_and_leaves_the_alarm_at_now() {
        let mut s = claimed(0, &["a", "b"], None);
        outputs(&mut s);
        let late = LOOP_CLAIM_BUDGET_MS + 1;
        s.handle(
            Event::TurnEnded {
                left_no_work: false,
            },
            late,
        );
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        assert_eq!(s.poll_timeout(), Some(late + LOOP_NAP_MS_MAX));
        s.handle(Event::Wake, late + 1);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        s.handle(
            Event::TurnEnded {
                left_no_work: false,
            },
            late + 2,
        );
        assert_eq!(outputs(&mut s), ["ReadDeadlines"]);
        s.handle(Event::Deadlines(Some(late + 50_000)), late + 2);
        assert_eq!(
            outputs(&mut s),
            ["Idle".to_string(), format!("SetAlarm({})", late + 2)]
        );
    }

    #[test]
    fn closed_it_claims_nothing_more_and_leaves_no_alarm() {
        let mut s = claimed(0, &["a"], Some(100));
        outputs(&mut s);
        s.handle(Event::Close, 1);
        s.handle(Event::Wake, 1);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        s.handle(
            Event::TurnEnded {
                left_no_work: false,
            },
            2,
        );
        // The request's alarm is spare: it goes.
        assert_eq!(outputs(&mut s), ["Idle", "DeleteAlarm"]);
    }

    #[test]
    fn an_answer_not_asked_for_is_ignored_and_a_second_start_joins() {
        let mut s = Schedule::new();
        s.handle(Event::Deadlines(Some(1)), 0);
        s.handle(
            Event::Reconciled {
                steps: vec![step("a")],
                settled: Vec::new(),
                later: None,
                running: Vec::new(),
            },
            0,
        );
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        s.handle(Event::Start, 0);
        s.handle(Event::Wake, 0);
        s.handle(Event::Start, 0);
        assert!(s.running());
        s.handle(Event::Begin, 0);
        assert_eq!(outputs(&mut s), ["SetAlarm(0)", "Reconcile"]);
    }

    #[test]
    fn a_wake_during_a_pass_runs_one_more_after_it_bounded_a_wake() {
        let mut s = Schedule::new();
        s.handle(Event::MailWanted, 0);
        assert_eq!(outputs(&mut s), ["MailPass"]);
        assert!(s.mail_running());
        s.handle(Event::MailWanted, 1);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        // It carried nothing, but a wake came during it.
        s.handle(Event::MailPassEnded { carried: 0 }, 2);
        assert_eq!(outputs(&mut s), ["MailPass"]);
        s.handle(Event::MailPassEnded { carried: 0 }, 3);
        assert_eq!(outputs(&mut s), ["ArmAfterPass"]);
        assert!(!s.mail_running());
        // Entries left past each pass's bound: at most the bound a wake.
        s.handle(Event::LaneWanted, 4);
        assert_eq!(outputs(&mut s), ["LanePass"]);
        for _ in 1..HOST_PASSES_PER_WAKE_MAX {
            s.handle(Event::LanePassEnded { more: true }, 5);
            assert_eq!(outputs(&mut s), ["LanePass"]);
        }
        s.handle(Event::LanePassEnded { more: true }, 6);
        assert_eq!(outputs(&mut s), ["LaneEnded", "ArmAfterPass"]);
        assert!(!s.lane_running());
    }

    #[test]
    fn a_request_sets_the_alarm_to_now_unless_one_is_set_at_or_before_now() {
        let mut s = Schedule::new();
        s.handle(Event::Deadline(Some(100)), 0);
        assert_eq!(outputs(&mut s), ["SetAlarm(100)"]);
        // Set at or before now: the wake is durable already.
        s.handle(Event::Start, 100);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        assert_eq!(s.alarm(), Some(100));
        // A second request joins the running loop: it writes nothing.
        s.handle(Event::Start, 150);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        // Set later than now: brought to now.
        let mut s = Schedule::new();
        s.handle(Event::Deadline(Some(500)), 0);
        outputs(&mut s);
        s.handle(Event::Start, 10);
        assert_eq!(outputs(&mut s), ["SetAlarm(10)"]);
    }

    #[test]
    fn the_fired_alarm_is_spent_and_starts_a_loop_without_a_write() {
        let mut s = Schedule::new();
        s.handle(Event::Deadline(Some(100)), 0);
        outputs(&mut s);
        s.handle(Event::AlarmFired, 100);
        assert!(s.running());
        assert_eq!(s.alarm(), None);
        s.handle(Event::Begin, 100);
        assert_eq!(outputs(&mut s), ["Reconcile"]);
        s.handle(
            Event::Reconciled {
                steps: Vec::new(),
                settled: Vec::new(),
                later: None,
                running: Vec::new(),
            },
            101,
        );
        s.handle(Event::Deadlines(None), 101);
        // Nothing owed and no alarm left: nothing to delete.
        assert_eq!(outputs(&mut s), ["ReadDeadlines", "Idle"]);
        // Owed work brings a spent alarm back.
        s.handle(Event::Owed(900), 102);
        assert_eq!(outputs(&mut s), ["SetAlarm(900)"]);
    }

    #[test]
    fn owed_work_brings_the_alarm_only_earlier() {
        let mut s = Schedule::new();
        s.handle(Event::Owed(500), 0);
        assert_eq!(outputs(&mut s), ["SetAlarm(500)"]);
        s.handle(Event::Owed(500), 1);
        s.handle(Event::Owed(800), 1);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        s.handle(Event::Owed(300), 2);
        assert_eq!(outputs(&mut s), ["SetAlarm(300)"]);
        // A failed write leaves nothing known: the next owed work writes.
        s.handle(Event::AlarmWriteFailed, 3);
        s.handle(Event::Owed(800), 3);
        assert_eq!(outputs(&mut s), ["SetAlarm(800)"]);
        // A durable deadline read sets the alarm, later or not.
        s.handle(Event::Deadline(Some(2_000)), 4);
        s.handle(Event::Deadline(None), 4);
        assert_eq!(outputs(&mut s), ["SetAlarm(2000)"]);
    }

    #[test]
    fn a_pass_end_sets_the_deadline_idle_and_only_brings_it_earlier_in_a_loop() {
        let mut s = Schedule::new();
        s.handle(Event::Deadline(Some(100)), 0);
        outputs(&mut s);
        // No loop: what the pass left is the whole deadline.
        s.handle(Event::PassLeft(Some(700)), 1);
        assert_eq!(outputs(&mut s), ["SetAlarm(700)"]);
        // A loop runs (it arms the rest when it ends): only earlier.
        let mut s = claimed(10, &["a"], None);
        outputs(&mut s);
        s.handle(Event::PassLeft(Some(5_000)), 11);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        s.handle(Event::PassLeft(Some(5)), 12);
        assert_eq!(outputs(&mut s), ["SetAlarm(5)"]);
        s.handle(Event::PassLeft(None), 13);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
    }

    #[test]
    fn a_spare_alarm_is_deleted_when_nothing_is_owed_but_kept_while_a_pass_runs() {
        // The request's alarm (now) outlived the loop: nothing is owed.
        let mut s = claimed(0, &[], None);
        s.handle(Event::Deadlines(None), 1);
        assert_eq!(outputs(&mut s), ["ReadDeadlines", "Idle", "DeleteAlarm"]);
        assert_eq!(s.alarm(), None);
        // A mail pass runs: it arms its own follow-up when it ends.
        let mut s = claimed(0, &[], None);
        s.handle(Event::MailWanted, 1);
        s.handle(Event::Deadlines(None), 1);
        assert_eq!(outputs(&mut s), ["ReadDeadlines", "MailPass", "Idle"]);
        assert_eq!(s.alarm(), Some(0));
    }

    #[test]
    fn closed_no_pass_starts_and_the_running_one_ends_without_arming() {
        let mut s = Schedule::new();
        s.handle(Event::LaneWanted, 0);
        outputs(&mut s);
        s.handle(Event::Close, 1);
        s.handle(Event::LaneWanted, 1);
        s.handle(Event::MailWanted, 1);
        assert_eq!(outputs(&mut s), Vec::<String>::new());
        s.handle(Event::LanePassEnded { more: true }, 2);
        assert_eq!(outputs(&mut s), ["LaneEnded"]);
    }
}
