//! The whole Agent as one sans-IO machine, in the manner of quinn-proto's
//! `Endpoint`: it owns the schedule ([`Schedule`]: claims, naps, passes,
//! the one alarm), every running turn ([`Turn`], its `Connection`, keyed by
//! a [`TurnId`] that outlives the turn's head changing on
//! [`Action::Next`]), and the turns held to start at the attempt they
//! hold. The host feeds it [`Event`]s ([`Agent::handle`]) and each turn's
//! [`Input`] ([`Agent::handle_turn`], which runs the turn's transition on
//! the store synchronously), performs the one [`Output`] enum that
//! [`Agent::poll`] yields, and wakes it at [`Agent::poll_timeout`]. It
//! decides nothing itself, so the whole Agent runs natively
//! (`tests/driver.rs`, `tests/schedule.rs`).
//!
//! What the host keeps is I/O: a live turn's stop switch, the model it
//! resolved for the turn, the performs in flight. It still checks a turn's
//! stop switch after each perform and feeds [`Input::Stopped`]. A tool
//! call's backend is not in [`Output::RunTool`]: `capability::backend::route`
//! asks the host's handles (a run's files port, live MCP connections,
//! Computers), after the call's gate, which may await the confirm hook.
//!
//! A turn's end reaches the schedule at the next [`Agent::poll`] or event,
//! so the host first tells what the ending transition's settled hooks did
//! ([`Event::Rearm`]: extension timers moved, the next pass claims).
//!
//! Invariants (beside [`Schedule`]'s and [`Turn`]'s):
//! - a turn is held for the trap report from its claim to its end: fresh
//!   ([`Output::Hold`] until it goes live or is dropped, [`Output::Release`])
//!   or live ([`Output::Live`] until [`Output::Ended`]);
//! - after every turn transition the extensions' projections are published
//!   ([`Output::Projections`]: its settled hooks ran in that write), and
//!   after a settling one mail is looked at ([`Output::MailStaged`]);
//! - nothing here is durable: a crash loses it, and a new instance's first
//!   claim rebuilds it from the store.

use super::driver::{Action, Input, ToolRun, Turn, TurnPolicy};
use super::schedule::{self, Schedule};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::extension::Extensions;
use crate::mail::Replies;
use crate::model::{ModelItem, ToolSpec};
use crate::observe::{self, Projections};
use crate::sql::SqlError;
use crate::store::{CommandRow, OnSettled, Store};
use std::collections::{HashMap, VecDeque};

pub use super::schedule::Event;

/// A running turn's name in this instance: stable while the turn hands
/// over to its Session's next command (its head changes, not its id).
pub type TurnId = u64;

/// What the host performs, yielded by [`Agent::poll`] in order.
#[derive(Debug)]
pub enum Output {
    /// Run the due extension timers and replays, then claim
    /// (`run::reconcile`, asking [`Agent::is_fresh`]), and answer
    /// [`Event::Reconciled`].
    Reconcile,
    /// Publish an event of the Session.
    Publish {
        session_id: String,
        event: observe::Event,
    },
    /// A transition may have staged mail (a settlement's reply, a sent
    /// mail): a pass when some is due now, else the alarm.
    MailStaged,
    /// Read the delivery lane's and mail's deadlines and answer
    /// [`Event::Deadlines`].
    ReadDeadlines,
    /// The loop ended; the alarm output for what it left follows at once
    /// ([`Output::SetAlarm`], [`Output::DeleteAlarm`], or none).
    Idle,
    /// Hold a fresh turn for the trap report (it starts here at the attempt
    /// it holds).
    Hold { head: String, session_id: String },
    /// Release a fresh turn that will not start here.
    Release { head: String },
    /// A turn goes live under `head`: register its stop switch (a cancel
    /// stops it) and hold it for the trap report. A failure is told with
    /// [`Input::Stopped`].
    Live {
        turn: TurnId,
        head: String,
        session_id: String,
    },
    /// The turn headed by `head` ended here (or handed over to its next
    /// command): forget its run's state and its stop switch, release it.
    Ended { turn: TurnId, head: String },
    /// Resolve the turn's model (kept for the turn while its head stays)
    /// and the tools to offer, then [`Input::Offered`].
    Offer {
        turn: TurnId,
        session_id: String,
        head: String,
        /// The head command's host metadata.
        meta: Option<String>,
    },
    /// Call the model (see [`Action::CallModel`]), streaming deltas of
    /// `head`; then [`Input::Answered`] or [`Input::Failed`].
    CallModel {
        turn: TurnId,
        session_id: String,
        head: String,
        context: Vec<ModelItem>,
        tools: Vec<ToolSpec>,
        system: Option<String>,
    },
    /// Run one tool call (see [`Action::RunTool`]) on the backend
    /// `capability::backend::route` names once its gate passed; then
    /// [`Input::ToolDone`] or [`Input::ToolStale`].
    RunTool {
        turn: TurnId,
        session_id: String,
        head: String,
        run: Box<ToolRun>,
    },
    /// A turn transition ran the settled hooks: publish the extensions'
    /// projections.
    Projections,
    /// A storage fault or broken invariant of a turn: log it.
    Fault(ApiError),
    /// Run one delivery lane pass, report it with [`Event::LanePassEnded`].
    LanePass,
    /// The lane's passes for this wake ended (whoever waits may go).
    LaneEnded,
    /// Run one mail pass, report it with [`Event::MailPassEnded`].
    MailPass,
    /// A lane's or mail's passes ended: read the deadlines they left and
    /// answer [`Event::PassLeft`]. `everything`: every durable deadline
    /// (no loop runs); else only the lane's and mail's (the running loop
    /// arms the rest when it ends, and the alarm is never put past the
    /// wake a running turn keeps for a crash).
    ReadPassLeft { everything: bool },
    /// Set the one alarm to this time; report a failure with
    /// [`Event::AlarmWriteFailed`].
    SetAlarm(i64),
    /// Delete the alarm: nothing is owed.
    DeleteAlarm,
}

impl Output {
    /// Whether the host may perform it outside the loop (passes, the
    /// alarm, the trap report's holds, a turn's end), as it comes.
    pub fn is_side(&self) -> bool {
        matches!(
            self,
            Output::LanePass
                | Output::LaneEnded
                | Output::MailPass
                | Output::ReadPassLeft { .. }
                | Output::SetAlarm(_)
                | Output::DeleteAlarm
                | Output::Hold { .. }
                | Output::Release { .. }
                | Output::Ended { .. }
        )
    }

    /// The turn a turn's action belongs to.
    fn turn(&self) -> Option<TurnId> {
        match self {
            Output::Live { turn, .. }
            | Output::Offer { turn, .. }
            | Output::CallModel { turn, .. }
            | Output::RunTool { turn, .. } => Some(*turn),
            _ => None,
        }
    }
}

/// The Agent's one settled-work observer: every settlement runs, inside
/// its settling transition, the extensions' settled hooks, then the
/// staging of the replies this Agent owes (`replies`: `None` without a
/// fleet).
pub struct Settled<'a> {
    pub extensions: Option<&'a Extensions>,
    pub replies: Option<&'a Replies>,
}

impl OnSettled for Settled<'_> {
    fn settled(
        &self,
        store: Store<'_>,
        command: &CommandRow,
        settlement: &str,
        now_ms: i64,
    ) -> Result<(), SqlError> {
        if let Some(extensions) = self.extensions {
            extensions.settled(store, command, settlement, now_ms)?;
        }
        match self.replies {
            Some(replies) => replies.settled(store, command, settlement, now_ms),
            None => Ok(()),
        }
    }
}

/// The Agent in this instance (see the module's documentation).
#[derive(Debug)]
pub struct Agent {
    schedule: Schedule,
    policy: TurnPolicy,
    /// The running turns, oldest first (a few: a list is the least code).
    turns: Vec<(TurnId, Turn)>,
    next_turn: TurnId,
    /// Turns to start at the attempt they hold, head -> Session: claimed by
    /// an admission here and not started yet, or interrupted by a wasm
    /// reset that other code caused (handed over by the shim).
    fresh: HashMap<String, String>,
    /// Why the runtime closed (the host's `initialize` failed, or the host
    /// closed it): it serves nothing and starts no work until replaced.
    closed: Option<String>,
    /// Turns that ended, `(left_no_work, when)`, not yet told to the
    /// schedule: that waits for the next [`Agent::poll`] or event, so the
    /// host can first tell what the ending transition's settled hooks did
    /// ([`Event::Rearm`]).
    ended: VecDeque<(bool, i64)>,
    out: VecDeque<Output>,
    /// The store was opened in this instance (`None`: not yet); `Some(true)`:
    /// this instance created it with nothing to run (no extensions), so no
    /// earlier work exists for the start to arm the alarm for.
    opened: Option<bool>,
    /// The extensions' projections last published.
    projections: Projections,
}

impl Agent {
    pub fn new(policy: TurnPolicy) -> Agent {
        Agent {
            schedule: Schedule::new(),
            policy,
            turns: Vec::new(),
            next_turn: 0,
            fresh: HashMap::new(),
            closed: None,
            ended: VecDeque::new(),
            out: VecDeque::new(),
            opened: None,
            projections: Projections::default(),
        }
    }

    /// The schedule: whether a loop or pass runs.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The turns running here.
    pub fn turns(&self) -> usize {
        self.turns.len()
    }

    /// Whether the store was opened in this instance.
    pub fn opened(&self) -> bool {
        self.opened.is_some()
    }

    /// The store is open; `created_empty`: this instance created it and
    /// nothing (no extension) can have written work yet.
    pub fn open(&mut self, created_empty: bool) {
        self.opened = Some(created_empty);
    }

    /// This instance created the store and nothing wrote work before it
    /// (see [`Agent::open`]).
    pub fn created_empty(&self) -> bool {
        self.opened == Some(true)
    }

    /// The extensions' projections last published, to leave out an
    /// unchanged one.
    pub fn projections(&mut self) -> &mut Projections {
        &mut self.projections
    }

    /// Why the runtime closed, if it did.
    pub fn closed(&self) -> Option<&str> {
        self.closed.as_deref()
    }

    /// The runtime closes, saying why ([`Event::Close`]): no claim, no
    /// pass starts; the live turns end (the host stops them).
    pub fn close(&mut self, why: String, now: i64) {
        self.closed = Some(why);
        self.handle(Event::Close, now);
    }

    /// The Session of a running turn.
    pub fn session_id(&self, turn: TurnId) -> Option<&str> {
        self.turn(turn).map(Turn::session_id)
    }

    /// Whether `head` is held to start here at the attempt it holds.
    pub fn is_fresh(&self, head: &str) -> bool {
        self.fresh.contains_key(head)
    }

    pub fn poll(&mut self) -> Option<Output> {
        self.end_turns();
        self.out.pop_front()
    }

    /// The first output the host may perform outside the loop
    /// ([`Output::is_side`]), leaving the loop's in their order.
    pub fn poll_side(&mut self) -> Option<Output> {
        self.end_turns();
        let at = self.out.iter().position(Output::is_side)?;
        self.out.remove(at)
    }

    /// When to tell the machine [`Event::Timeout`] (the loop's nap).
    pub fn poll_timeout(&self) -> Option<i64> {
        self.schedule.poll_timeout()
    }

    /// Holds turns that start at the attempt they hold, `(head, session)`.
    pub fn hold_fresh(&mut self, turns: impl IntoIterator<Item = (String, String)>) {
        for (head, session_id) in turns {
            self.out.push_back(Output::Hold {
                head: head.clone(),
                session_id: session_id.clone(),
            });
            self.fresh.insert(head, session_id);
        }
    }

    /// A fresh turn will not start here (stopped, or settled meanwhile).
    pub fn drop_fresh(&mut self, head: &str) {
        let held = self.fresh.remove(head).is_some();
        if held && !self.is_live(head) {
            self.out.push_back(Output::Release {
                head: head.to_owned(),
            });
        }
    }

    fn is_live(&self, head: &str) -> bool {
        self.turns.iter().any(|(_, t)| t.head() == head)
    }

    /// Tells the machine what happened. [`Event::TurnEnded`] is its own
    /// turns' to tell and is ignored here; [`Event::Rearm`] counts before
    /// the turn ends not yet told to the schedule (the hooks that moved
    /// timers ran in their transitions).
    pub fn handle(&mut self, event: Event, now: i64) {
        if let Event::Rearm = event {
            self.schedule.handle(event, now);
            return;
        }
        self.end_turns();
        match event {
            Event::TurnEnded { .. } => return,
            Event::Reconciled {
                steps,
                settled,
                later,
                running,
            } => {
                if self.schedule.claiming() {
                    // A fresh turn no longer running settled meanwhile.
                    let gone: Vec<String> = self
                        .fresh
                        .keys()
                        .filter(|head| !running.contains(head))
                        .cloned()
                        .collect();
                    for head in gone {
                        self.drop_fresh(&head);
                    }
                }
                let event = Event::Reconciled {
                    steps,
                    settled,
                    later,
                    running,
                };
                self.schedule.handle(event, now);
            }
            Event::Failed => {
                self.schedule.handle(Event::Failed, now);
                // The loop ends with its turns: each is released (its
                // claim is durable: the next claim resumes it), and what
                // it asked for is dropped.
                self.out.retain(|o| o.turn().is_none());
                for (turn, t) in std::mem::take(&mut self.turns) {
                    self.out.push_back(Output::Ended {
                        turn,
                        head: t.head().to_owned(),
                    });
                }
            }
            event => self.schedule.handle(event, now),
        }
        self.drain_schedule(now);
    }

    /// Feeds a turn the outcome of its action; its transition runs on
    /// `ctx`. An input for a turn that ended is dropped.
    pub fn handle_turn(&mut self, ctx: &mut Ctx<'_>, turn: TurnId, input: Input, now: i64) {
        self.end_turns();
        let Some(t) = self.turn_mut(turn) else {
            return;
        };
        t.handle(ctx, input);
        // Settled hooks ran in that write.
        self.out.push_back(Output::Projections);
        self.drain_turn(turn, now);
    }

    fn turn(&self, turn: TurnId) -> Option<&Turn> {
        self.turns
            .iter()
            .find(|(id, _)| *id == turn)
            .map(|(_, t)| t)
    }

    fn turn_mut(&mut self, turn: TurnId) -> Option<&mut Turn> {
        self.turns
            .iter_mut()
            .find(|(id, _)| *id == turn)
            .map(|(_, t)| t)
    }

    /// Tells the schedule the turns that ended.
    fn end_turns(&mut self) {
        while let Some((left_no_work, now)) = self.ended.pop_front() {
            self.schedule.handle(Event::TurnEnded { left_no_work }, now);
            self.drain_schedule(now);
        }
    }

    /// The schedule's outputs, in order; a turn it starts goes live.
    fn drain_schedule(&mut self, now: i64) {
        while let Some(output) = self.schedule.poll() {
            let output = match output {
                schedule::Output::StartTurn(step) => {
                    let turn = self.next_turn;
                    self.next_turn += 1;
                    self.fresh.remove(&step.command_id);
                    self.out.push_back(Output::Live {
                        turn,
                        head: step.command_id.clone(),
                        session_id: step.session_id.clone(),
                    });
                    self.turns.push((turn, Turn::new(step, self.policy)));
                    self.drain_turn(turn, now);
                    continue;
                }
                schedule::Output::Reconcile => Output::Reconcile,
                schedule::Output::Publish { session_id, event } => {
                    Output::Publish { session_id, event }
                }
                schedule::Output::MailStaged => Output::MailStaged,
                schedule::Output::ReadDeadlines => Output::ReadDeadlines,
                schedule::Output::Idle => Output::Idle,
                schedule::Output::LanePass => Output::LanePass,
                schedule::Output::LaneEnded => Output::LaneEnded,
                schedule::Output::MailPass => Output::MailPass,
                schedule::Output::ArmAfterPass => Output::ReadPassLeft {
                    everything: !self.schedule.running(),
                },
                schedule::Output::SetAlarm(at) => Output::SetAlarm(at),
                schedule::Output::DeleteAlarm => Output::DeleteAlarm,
            };
            self.out.push_back(output);
        }
    }

    /// A turn's actions, tagged; its end is told to the schedule.
    fn drain_turn(&mut self, turn: TurnId, now: i64) {
        let Some((_, t)) = self.turns.iter_mut().find(|(id, _)| *id == turn) else {
            return;
        };
        let session_id = t.session_id().to_owned();
        while let Some(action) = t.poll() {
            let output = match action {
                Action::Publish(event) => Output::Publish {
                    session_id: session_id.clone(),
                    event,
                },
                Action::Offer => Output::Offer {
                    turn,
                    session_id: session_id.clone(),
                    head: t.head().to_owned(),
                    meta: t.head_meta().map(str::to_owned),
                },
                Action::CallModel {
                    context,
                    tools,
                    system,
                } => Output::CallModel {
                    turn,
                    session_id: session_id.clone(),
                    head: t.head().to_owned(),
                    context,
                    tools,
                    system,
                },
                Action::RunTool(run) => Output::RunTool {
                    turn,
                    session_id: session_id.clone(),
                    head: t.head().to_owned(),
                    run,
                },
                Action::Next { ended, started } => {
                    // The settling write may have staged a reply.
                    self.out.push_back(Output::MailStaged);
                    self.out.push_back(Output::Ended { turn, head: ended });
                    self.fresh.remove(&started);
                    Output::Live {
                        turn,
                        head: started,
                        session_id: session_id.clone(),
                    }
                }
                Action::Fault(e) => Output::Fault(e),
                Action::Done => {
                    let left_no_work = t.left_no_work();
                    let head = t.head().to_owned();
                    self.turns.retain(|(id, _)| *id != turn);
                    // The settling write may have staged a reply.
                    self.out.push_back(Output::MailStaged);
                    self.out.push_back(Output::Ended { turn, head });
                    self.ended.push_back((left_no_work, now));
                    return;
                }
            };
            self.out.push_back(output);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctx::CounterIds;
    use crate::meta::MetaPolicy;
    use crate::model::RetryPolicy;
    use crate::observe::Frame;
    use crate::run::schedule::tests::step;
    use crate::sql::native::NativeSql;
    use crate::store::Store;

    fn agent() -> Agent {
        Agent::new(TurnPolicy::new(RetryPolicy {
            attempts_max: 5,
            base_delay_ms: 1_000,
            max_delay_ms: 4_000,
        }))
    }

    fn outputs(a: &mut Agent) -> Vec<String> {
        std::iter::from_fn(|| a.poll())
            .map(|o| match o {
                Output::Live { turn, head, .. } => format!("live {turn} {head}"),
                Output::Ended { turn, head } => format!("ended {turn} {head}"),
                Output::Offer { turn, head, .. } => format!("offer {turn} {head}"),
                Output::Hold { head, .. } => format!("hold {head}"),
                Output::Release { head } => format!("release {head}"),
                Output::Publish {
                    event: observe::Event::Frame(Frame::Started { command_id, .. }),
                    ..
                } => format!("started {command_id}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    /// A loop begun at 0 that asked for a claim.
    fn claiming(a: &mut Agent) {
        a.handle(Event::Start, 0);
        a.handle(Event::Begin, 0);
        assert_eq!(outputs(a), ["SetAlarm(0)", "Reconcile"]);
    }

    fn claimed(a: &mut Agent, heads: &[&str], running: &[&str]) {
        a.handle(
            Event::Reconciled {
                steps: heads.iter().map(|h| step(h)).collect(),
                settled: Vec::new(),
                later: None,
                running: running.iter().map(|h| h.to_string()).collect(),
            },
            1,
        );
    }

    /// Feeds `input` to `turn` over an empty store (a stop writes nothing).
    fn feed(a: &mut Agent, turn: TurnId, input: Input) {
        let sql = NativeSql::open_in_memory();
        let mut ids = CounterIds::default();
        let meta = MetaPolicy::default();
        let mut ctx = Ctx {
            store: Store::new(&sql),
            now_ms: 2,
            ids: &mut ids,
            meta: &meta,
            spans: Vec::new(),
            charged: None,
        };
        a.handle_turn(&mut ctx, turn, input, 2);
    }

    #[test]
    fn claimed_turns_run_at_once_each_action_tagged_by_its_turn() {
        let mut a = agent();
        claiming(&mut a);
        claimed(&mut a, &["a", "b"], &["a", "b"]);
        assert_eq!(
            outputs(&mut a),
            [
                "live 0 a",
                "started a",
                "offer 0 a",
                "live 1 b",
                "started b",
                "offer 1 b"
            ]
        );
        assert_eq!(a.turns(), 2);
        // The second ends first (stopped): it may have left work, so the
        // loop claims; the first still runs.
        feed(&mut a, 1, Input::Stopped);
        assert_eq!(
            outputs(&mut a),
            ["Projections", "MailStaged", "ended 1 b", "Reconcile"]
        );
        assert_eq!(a.session_id(0), Some("s"));
        assert_eq!(a.session_id(1), None);
        // An input for a turn that ended is dropped.
        feed(&mut a, 1, Input::Stopped);
        assert_eq!(outputs(&mut a), Vec::<String>::new());
    }

    #[test]
    fn a_fresh_turn_is_held_until_it_goes_live_or_no_longer_runs() {
        let mut a = agent();
        a.hold_fresh([("a".into(), "s".into()), ("b".into(), "t".into())]);
        assert_eq!(outputs(&mut a), ["hold a", "hold b"]);
        assert!(a.is_fresh("a") && a.is_fresh("b"));
        claiming(&mut a);
        // `b` settled meanwhile: released; `a` goes live, still held.
        claimed(&mut a, &["a"], &["a"]);
        assert_eq!(
            outputs(&mut a),
            ["release b", "live 0 a", "started a", "offer 0 a"]
        );
        assert!(!a.is_fresh("a") && !a.is_fresh("b"));
        // Dropping a live turn releases nothing: its end does.
        a.hold_fresh([("a".into(), "s".into())]);
        a.drop_fresh("a");
        assert_eq!(outputs(&mut a), ["hold a"]);
    }

    #[test]
    fn a_pass_left_reads_everything_only_with_no_loop_running() {
        let mut a = agent();
        a.handle(Event::MailWanted, 0);
        a.handle(Event::MailPassEnded { carried: 0 }, 1);
        assert_eq!(
            outputs(&mut a),
            ["MailPass", "ReadPassLeft { everything: true }"]
        );
        claiming(&mut a);
        a.handle(Event::LaneWanted, 2);
        a.handle(Event::LanePassEnded { more: false }, 3);
        assert_eq!(
            outputs(&mut a),
            [
                "LanePass",
                "LaneEnded",
                "ReadPassLeft { everything: false }"
            ]
        );
    }

    #[test]
    fn a_failed_loop_ends_its_turns_and_drops_what_they_asked_for() {
        let mut a = agent();
        claiming(&mut a);
        claimed(&mut a, &["a"], &["a"]);
        a.handle(Event::Failed, 2);
        // What was committed is still published; the turn is released.
        assert_eq!(outputs(&mut a), ["started a", "ended 0 a"]);
        assert_eq!(a.turns(), 0);
        assert!(!a.schedule().running());
    }

    #[test]
    fn a_turns_end_reaches_the_schedule_after_what_its_hooks_moved() {
        let mut a = agent();
        claiming(&mut a);
        claimed(&mut a, &["a"], &["a"]);
        outputs(&mut a);
        feed(&mut a, 0, Input::Stopped);
        // Not told yet: the host tells the transition's rearm first.
        assert_eq!(a.schedule().turns(), 1);
        a.handle(Event::Rearm, 3);
        assert_eq!(a.schedule().turns(), 1);
        assert_eq!(
            outputs(&mut a),
            ["Projections", "MailStaged", "ended 0 a", "Reconcile"]
        );
        assert_eq!(a.schedule().turns(), 0);
    }

    #[test]
    fn closed_it_says_why_and_starts_no_pass() {
        let mut a = agent();
        assert_eq!(a.closed(), None);
        a.close("initialize failed".into(), 0);
        assert_eq!(a.closed(), Some("initialize failed"));
        a.handle(Event::MailWanted, 1);
        a.handle(Event::LaneWanted, 1);
        assert_eq!(outputs(&mut a), Vec::<String>::new());
    }

    #[test]
    fn side_outputs_are_polled_apart_from_the_loops() {
        let mut a = agent();
        a.handle(Event::Start, 0);
        a.handle(Event::Begin, 0);
        a.handle(Event::MailWanted, 0);
        a.hold_fresh([("a".into(), "s".into())]);
        let side = |a: &mut Agent| a.poll_side().map(|o| format!("{o:?}"));
        assert_eq!(side(&mut a).as_deref(), Some("SetAlarm(0)"));
        assert_eq!(side(&mut a).as_deref(), Some("MailPass"));
        assert!(side(&mut a).is_some_and(|o| o.starts_with("Hold")));
        assert_eq!(side(&mut a), None);
        // The loop's own output stays for the loop.
        assert_eq!(outputs(&mut a), ["Reconcile"]);
    }

    #[test]
    fn the_turn_ended_event_is_the_machines_own() {
        let mut a = agent();
        claiming(&mut a);
        claimed(&mut a, &["a"], &["a"]);
        outputs(&mut a);
        a.handle(
            Event::TurnEnded {
                left_no_work: false,
            },
            2,
        );
        assert_eq!(outputs(&mut a), Vec::<String>::new());
        assert_eq!(a.schedule().turns(), 1);
    }
}
