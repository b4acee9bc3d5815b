//! A simulated fleet: several Agents, each its own SQLite file and its own
//! Agent machine (`run::agent`, the machine the wasm host performs),
//! exchanging mail over one clock. The simulated host performs every
//! output as `src/host/` does: claims with the extension pass before each
//! (timers and replays), turns (the real turn driver, a scripted model),
//! mail passes, delivery lane passes, the durable alarm. A crash after every
//! durable transition of the scenario (the crashed Agent loses everything
//! in memory and reopens its store; the alarm, like the platform's,
//! survives) must lose nothing and settle nothing twice.

mod common;

use common::sim::{Clock, Crashed, Db, Ids};
use serde_json::{json, Value};
use shiitake::ctx::Ctx;
use shiitake::delivery::{self, LanePass, LaneStep};
use shiitake::extension::{Extensions, Host, Roster};
use shiitake::http::{admission_effects, handle, sent_effects, Hosted, HttpRequest};
use shiitake::limits::HOST_DELIVERY_BATCH_MAX;
use shiitake::mail::{self, Acceptance, Address, Outgoing, Replies, SendState};
use shiitake::meta::MetaPolicy;
use shiitake::model::{Answer, ModelItem, RetryPolicy, Role, Usage};
use shiitake::observe::{Event, Frame};
use shiitake::run;
use shiitake::run::agent::{Agent as Machine, Event as Scheduled, Output, Settled, TurnId};
use shiitake::run::driver::{Input, Offer, TurnPolicy};
use shiitake::run::schedule::earliest;
use shiitake::session::admission::ExtensionSends;
use shiitake::session::command::Delivery;
use shiitake::sql::{atomically, Sql, SqlError};
use shiitake::store::{schema, Store};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::rc::Rc;

/// Commits of the whole fleet, counted across Agents: the `crash_at`-th
/// fails, and its Agent's process dies.
/// One Agent: what survives a crash (its file, its alarm, what it
/// published) and its process (everything else).
struct Agent {
    id: String,
    _dir: tempfile::TempDir,
    path: PathBuf,
    db: Db,
    ids: Ids,
    meta: MetaPolicy,
    replies: Replies,
    /// The platform's alarm: durable.
    alarm: Option<i64>,
    /// Published events (observers outlive the process in this test).
    events: Vec<Event>,
    // The process:
    /// The Agent machine (its schedule, turns, turns held fresh).
    machine: Machine,
    /// Heads of the turns live in this process.
    live: HashSet<String>,
    /// Each running turn's input, once its action was performed.
    inputs: VecDeque<(TurnId, Input)>,
    /// Passes the schedule asked for, not yet run.
    lane_pass: bool,
    mail_pass: bool,
    /// The Agent's extensions (the process's: made again by `roster` on
    /// restart), and how to make them.
    extensions: Option<Rc<Extensions>>,
    roster: Option<fn() -> Extensions>,
}

impl Agent {
    fn new(id: &str, clock: &Rc<Clock>) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sqlite");
        let db = Db::open(&path, clock);
        schema::open(&db).unwrap();
        Agent {
            id: id.into(),
            _dir: dir,
            path,
            db,
            ids: Ids {
                agent: id.into(),
                next: 0,
            },
            meta: MetaPolicy::default(),
            replies: Replies::new(),
            alarm: None,
            events: Vec::new(),
            machine: Machine::new(policy()),
            live: HashSet::new(),
            inputs: VecDeque::new(),
            lane_pass: false,
            mail_pass: false,
            extensions: None,
            roster: None,
        }
    }

    /// A new process over the same file; as the host's start does, it
    /// arms the alarm for whatever is due.
    fn restart(&mut self, now: i64) {
        self.db = Db::open(&self.path, &Rc::clone(&self.db.clock));
        schema::open(&self.db).unwrap();
        self.machine = Machine::new(policy());
        self.live.clear();
        self.inputs.clear();
        self.lane_pass = false;
        self.mail_pass = false;
        self.open_extensions(now);
        let due = self.next_deadline(now);
        self.machine.handle(Scheduled::Deadline(due), now);
    }

    /// The earliest durable deadline, as the host reads it.
    fn next_deadline(&self, now: i64) -> Option<i64> {
        let store = Store::new(&self.db);
        earliest(
            earliest(
                run::next_deadline(store, now, &|_| false).unwrap(),
                self.extension_deadline(now),
            ),
            self.deadlines(now),
        )
    }

    /// The lane's and mail's deadlines, as the host reads them: none for
    /// a performer whose pass runs (it arms the alarm when it ends).
    fn deadlines(&self, now: i64) -> Option<i64> {
        let lane = match self.machine.schedule().lane_running() {
            true => None,
            false => delivery::next_deadline(&self.db, now).unwrap(),
        };
        let mail = match self.machine.schedule().mail_running() {
            true => None,
            false => mail::next_deadline(Store::new(&self.db)).unwrap(),
        };
        earliest(lane, mail)
    }

    /// What a lane or mail pass left, as the host reads it: everything,
    /// or the lane's and mail's (the machine's choice).
    fn read_pass_left(&mut self, everything: bool, now: i64) {
        let left = match everything {
            true => self.next_deadline(now),
            false => self.deadlines(now),
        };
        self.machine.handle(Scheduled::PassLeft(left), now);
    }

    /// After a transition that may have staged mail, as the host does: a
    /// pass when some is due now, else the alarm.
    fn mail_after_transition(&mut self, now: i64) {
        match mail::next_deadline(Store::new(&self.db)).unwrap() {
            Some(at) if at <= now => self.machine.handle(Scheduled::MailWanted, now),
            Some(at) => self.machine.handle(Scheduled::Owed(at), now),
            None => {}
        }
    }

    fn ctx<T>(&mut self, now: i64, f: impl FnOnce(&mut Ctx<'_>) -> T) -> Result<T, Crashed> {
        let settled = Settled {
            extensions: self.extensions.as_deref(),
            replies: Some(&self.replies),
        };
        let mut ctx = Ctx {
            store: Store::observed(&self.db, &settled),
            now_ms: now,
            ids: &mut self.ids,
            meta: &self.meta,
            spans: Vec::new(),
            charged: None,
        };
        let out = f(&mut ctx);
        if self.db.crashed.get() {
            return Err(Crashed);
        }
        Ok(out)
    }

    fn address(&self, session: &str) -> Address {
        Address {
            agent_id: self.id.clone(),
            session_id: session.into(),
        }
    }

    fn http(&mut self, now: i64, method: &str, target: &str, body: Value) -> Value {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let req = HttpRequest {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            meta: None,
            body: if body.is_null() {
                Vec::new()
            } else {
                body.to_string().into_bytes()
            },
            waited: false,
        };
        let extensions = self.extensions.clone();
        let r = self
            .ctx(now, |ctx| {
                handle(ctx, &Hosted::without_models(extensions.as_deref()), &req)
            })
            .expect("no crash in a request");
        let json = r
            .body
            .as_deref()
            .map_or(Value::Null, |b| serde_json::from_str(b).unwrap());
        assert!(r.status < 300, "{method} {target}: {} {json}", r.status);
        json
    }

    /// A request that may have added work: wakes the loop, or starts one
    /// (the schedule sets the alarm to now first).
    fn wake(&mut self, now: i64) {
        self.machine.handle(Scheduled::LaneWanted, now);
        self.machine.handle(Scheduled::MailWanted, now);
        if self.machine.schedule().running() {
            self.machine.handle(Scheduled::Wake, now);
            return;
        }
        self.machine.handle(Scheduled::Start, now);
        self.machine.handle(Scheduled::Begin, now);
    }

    /// The platform's alarm fires: it requests mail and starts the loop.
    fn fire_alarm(&mut self, now: i64) {
        self.alarm = None;
        self.machine.handle(Scheduled::AlarmFired, now);
        self.machine.handle(Scheduled::LaneWanted, now);
        self.machine.handle(Scheduled::MailWanted, now);
        self.machine.handle(Scheduled::Begin, now);
    }

    /// Performs the machine's outputs until it waits for a turn or naps;
    /// a turn's offer and model call are answered at once (the scripted
    /// model echoes the last user text), their inputs fed by
    /// [`Agent::run_turn`].
    fn perform(&mut self, now: i64) -> Result<(), Crashed> {
        while let Some(output) = self.machine.poll() {
            match output {
                Output::Reconcile => {
                    self.extension_pass(now)?;
                    let settled = Settled {
                        extensions: self.extensions.as_deref(),
                        replies: Some(&self.replies),
                    };
                    let mut ctx = Ctx {
                        store: Store::observed(&self.db, &settled),
                        now_ms: now,
                        ids: &mut self.ids,
                        meta: &self.meta,
                        spans: Vec::new(),
                        charged: None,
                    };
                    let (live, machine) = (&self.live, &self.machine);
                    let reconciled = run::reconcile(
                        &mut ctx,
                        &|h| live.contains(h),
                        &|h| machine.is_fresh(h),
                        run::Attempts { max: 5 },
                        &shiitake::budget::Limits::NONE,
                    );
                    if self.db.crashed.get() {
                        return Err(Crashed);
                    }
                    let reconciled = reconciled.unwrap();
                    let event = Scheduled::Reconciled {
                        steps: reconciled.steps,
                        settled: reconciled.settled,
                        later: earliest(reconciled.next_deadline, self.extension_deadline(now)),
                        running: reconciled.running,
                    };
                    self.machine.handle(event, now);
                }
                Output::Live { head, .. } => {
                    self.live.insert(head);
                }
                Output::Ended { head, .. } => {
                    self.live.remove(&head);
                }
                Output::Offer { turn, .. } => {
                    let offer = Offer {
                        toolset: None,
                        unavailable: Vec::new(),
                        window: None,
                        compaction_prompt: None,
                        instructions_bytes: 0,
                    };
                    self.inputs.push_back((turn, Input::Offered(Ok(offer))));
                }
                Output::CallModel { turn, context, .. } => {
                    self.inputs
                        .push_back((turn, Input::Answered(echo(&context))));
                }
                Output::RunTool { .. } => panic!("no tools are offered"),
                Output::Fault(e) => {
                    assert!(self.db.crashed.get(), "a fault without a crash: {e}");
                    return Err(Crashed);
                }
                Output::Projections | Output::Hold { .. } | Output::Release { .. } => {}
                Output::Publish { event, .. } => self.events.push(event),
                Output::MailStaged => self.mail_after_transition(now),
                Output::ReadDeadlines => {
                    let deadlines = self.deadlines(now);
                    self.machine.handle(Scheduled::Deadlines(deadlines), now);
                }
                // Its alarm output follows it.
                Output::Idle => {}
                Output::SetAlarm(at) => self.alarm = Some(at),
                Output::DeleteAlarm => self.alarm = None,
                Output::LanePass => self.lane_pass = true,
                Output::MailPass => self.mail_pass = true,
                Output::LaneEnded => {}
                Output::ReadPassLeft { everything } => self.read_pass_left(everything, now),
            }
        }
        Ok(())
    }

    /// Runs the oldest running turn to its end: its inputs fed one by one,
    /// the machine's outputs performed after each.
    fn run_turn(&mut self, now: i64) -> Result<(), Crashed> {
        let turn = self.inputs.front().expect("a live turn").0;
        while let Some(at) = self.inputs.iter().position(|(t, _)| *t == turn) {
            let (_, input) = self.inputs.remove(at).unwrap();
            let settled = Settled {
                extensions: self.extensions.as_deref(),
                replies: Some(&self.replies),
            };
            let mut ctx = Ctx {
                store: Store::observed(&self.db, &settled),
                now_ms: now,
                ids: &mut self.ids,
                meta: &self.meta,
                spans: Vec::new(),
                charged: None,
            };
            self.machine.handle_turn(&mut ctx, turn, input, now);
            if self.db.crashed.get() {
                return Err(Crashed);
            }
            // A settled hook of that transition that moved timers: told
            // before the turn's end counts (the host does the same).
            self.rearm(now);
            self.perform(now)?;
        }
        Ok(())
    }

    /// One lane pass (`delivery::LanePass`), performed as
    /// `src/host/jobs.rs` does for a host that takes every batch: each
    /// batch recorded in `delivered` (which outlives the process), then
    /// acknowledged. True when entries are left past the pass's bound.
    fn run_lane_pass(&mut self, now: i64, delivered: &mut Vec<String>) -> Result<bool, Crashed> {
        self.lane_pass = false;
        let Some(mut pass) = LanePass::start(&self.db, now, true).unwrap() else {
            return Ok(false);
        };
        let more = loop {
            match pass.next(&self.db).unwrap() {
                LaneStep::Deliver(entries) => {
                    let last = entries.last().unwrap().seq;
                    delivered.extend(entries.into_iter().map(|e| e.key));
                    let acked = pass.delivered(&self.db, last);
                    if self.db.crashed.get() {
                        return Err(Crashed);
                    }
                    acked.unwrap();
                }
                LaneStep::Tick => {}
                LaneStep::Done { more } => break more,
            }
        };
        let succeeded = pass.succeeded(&self.db);
        if self.db.crashed.get() {
            return Err(Crashed);
        }
        succeeded.unwrap();
        Ok(more)
    }

    /// Settled frames per command id.
    fn settled(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for event in &self.events {
            if let Event::Frame(Frame::Settled { settlement }) = event {
                *counts.entry(settlement.command_id.clone()).or_default() += 1;
            }
        }
        counts
    }

    /// Every command of every Session: `(command id, its terminal or state)`.
    fn commands(&self) -> Vec<(String, String)> {
        self.db
            .query(
                "SELECT command_id, coalesce(terminal, state) FROM commands",
                &[],
            )
            .unwrap()
            .into_iter()
            .map(|row| (row.text(0).unwrap(), row.text(1).unwrap()))
            .collect()
    }
}

fn policy() -> TurnPolicy {
    TurnPolicy::new(RetryPolicy {
        attempts_max: 5,
        base_delay_ms: 1_000,
        max_delay_ms: 4_000,
    })
}

/// Extensions, performed as `src/host/extensions.rs` and `runner.rs` do.
impl Agent {
    /// Gives the Agent extensions (`roster` makes them anew in each
    /// process) and brings them to their definitions.
    fn extend(&mut self, roster: fn() -> Extensions, now: i64) {
        self.roster = Some(roster);
        self.open_extensions(now);
    }

    /// A new process's extensions, opened as the host's start does.
    fn open_extensions(&mut self, now: i64) {
        let Some(roster) = self.roster else { return };
        let extensions = Rc::new(roster());
        self.extensions = Some(Rc::clone(&extensions));
        self.ctx(now, |ctx| extensions.open(ctx))
            .expect("no crash while starting")
            .unwrap();
    }

    /// The extensions' earliest work (timers, replays), as the host reads it.
    fn extension_deadline(&self, now: i64) -> Option<i64> {
        let extensions = self.extensions.as_ref()?;
        extensions.next_deadline(Store::new(&self.db), now).unwrap()
    }

    /// The extension pass that precedes each claim (`Extensions::pass`):
    /// the prompts its sends admitted are published and held fresh (a
    /// claimed one wakes the loop), and its attention changes wake the
    /// lane (each staged its delivery).
    fn extension_pass(&mut self, now: i64) -> Result<(), Crashed> {
        let Some(extensions) = self.extensions.clone() else {
            return Ok(());
        };
        let pass = self.ctx(now, |ctx| extensions.pass(ctx, &ExtensionSends))?;
        pass.replayed.unwrap();
        let effects = sent_effects(&pass.fired.unwrap().sent);
        for (_, frame) in effects.frames {
            self.events.push(Event::Frame(frame));
        }
        self.machine.hold_fresh(effects.fresh_turns);
        if effects.reconcile {
            self.machine.handle(Scheduled::Wake, now);
        }
        if !extensions.take_attention_touched().is_empty() {
            self.machine.handle(Scheduled::LaneWanted, now);
        }
        Ok(())
    }

    /// A settled hook moved timers: the schedule's next pass claims (the
    /// host tells it before every event).
    fn rearm(&mut self, now: i64) {
        if self.extensions.as_ref().is_some_and(|e| e.take_rearm()) {
            self.machine.handle(Scheduled::Rearm, now);
        }
    }
}

/// The last user text, echoed.
fn echo(context: &[ModelItem]) -> Answer {
    let last = context
        .iter()
        .rev()
        .find_map(|item| match item {
            ModelItem::Message(m) if m.role == Role::User => Some(m.text.clone()),
            _ => None,
        })
        .unwrap_or_default();
    Answer::new(
        format!("echo: {last}"),
        Some(Usage {
            input_tokens: 1,
            output_tokens: 1,
            ..Usage::default()
        }),
        Vec::new(),
    )
}

struct Fleet {
    clock: Rc<Clock>,
    now: i64,
    agents: Vec<Agent>,
    /// Outbox keys the host took, in order (at least once each).
    delivered: Vec<String>,
}

impl Fleet {
    fn new(ids: &[&str]) -> Fleet {
        let clock = Rc::new(Clock::default());
        let agents = ids.iter().map(|id| Agent::new(id, &clock)).collect();
        Fleet {
            clock,
            now: 1_000,
            agents,
            delivered: Vec::new(),
        }
    }

    fn at(&self, id: &str) -> usize {
        self.agents.iter().position(|a| a.id == id).unwrap()
    }

    /// The crashed Agent restarts.
    fn recover(&mut self, agent: usize) {
        self.clock.crash_at.set(None);
        let now = self.now;
        self.agents[agent].restart(now);
    }

    /// One mail pass of `from`: every due mail carried to its recipient,
    /// the receipt or the failure recorded, as `src/host/mail.rs` does.
    fn mail_pass(&mut self, from: usize) -> Result<(), (usize, Crashed)> {
        self.agents[from].mail_pass = false;
        let now = self.now;
        let due = mail::due(Store::new(&self.agents[from].db), now, 100).unwrap();
        let carried = due.len();
        for m in due {
            let to = self.at(&m.to.agent_id);
            let wire: mail::Mail =
                serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
            let acceptance = Acceptance::Accept { meta: None };
            let received = self.agents[to].ctx(now, |ctx| mail::receive(ctx, &wire, &acceptance));
            let outcome = match received {
                Ok(Ok(landing)) => {
                    if let Some(l) = landing.landed {
                        let effects = admission_effects(&l.session_id, &l.request_id, &l.admitted);
                        let recipient = &mut self.agents[to];
                        for (_, frame) in effects.frames {
                            recipient.events.push(Event::Frame(frame));
                        }
                        recipient.machine.hold_fresh(effects.fresh_turns);
                        recipient.wake(now);
                    }
                    Ok(landing.value)
                }
                // Nothing decided (the host answers it as an error, which
                // the sender counts as a failed attempt): retried.
                Ok(Err(e)) if e.status() >= 500 => Err(e.to_string()),
                Ok(Err(e)) => panic!("receive: {e}"),
                // The recipient died during the call: the sender sees a
                // failed call and retries.
                Err(Crashed) => {
                    self.recover(to);
                    Err("the recipient is unreachable".to_owned())
                }
            };
            let sender = &mut self.agents[from];
            let recorded = sender.ctx(now, |ctx| match &outcome {
                Ok(receipt) => mail::delivered(ctx, &m.key, receipt),
                Err(why) => mail::failed(ctx, &m.key, why),
            });
            match recorded {
                Ok(landing) => assert!(landing.is_ok(), "{landing:?}"),
                Err(crashed) => return Err((from, crashed)),
            }
        }
        let sender = &mut self.agents[from];
        sender
            .machine
            .handle(Scheduled::MailPassEnded { carried }, now);
        sender.perform(now).map_err(|c| (from, c))
    }

    /// One step of the fleet: some Agent performs something, or the clock
    /// jumps to the earliest alarm, which fires. False once nothing is
    /// due anywhere.
    fn step(&mut self) -> Result<bool, (usize, Crashed)> {
        let now = self.now;
        for i in 0..self.agents.len() {
            let agent = &mut self.agents[i];
            if !agent.machine.schedule().running() && agent.alarm.is_some_and(|at| at <= now) {
                agent.fire_alarm(now);
                return Ok(true);
            }
            agent.perform(now).map_err(|c| (i, c))?;
            if !agent.inputs.is_empty() {
                agent.run_turn(now).map_err(|c| (i, c))?;
                return Ok(true);
            }
            if agent.lane_pass {
                let more = agent
                    .run_lane_pass(now, &mut self.delivered)
                    .map_err(|c| (i, c))?;
                agent.machine.handle(Scheduled::LanePassEnded { more }, now);
                agent.perform(now).map_err(|c| (i, c))?;
                return Ok(true);
            }
            if agent.mail_pass {
                self.mail_pass(i)?;
                return Ok(true);
            }
            if let Some(until) = agent.machine.poll_timeout() {
                if until <= now {
                    agent.machine.handle(Scheduled::Timeout, now);
                    return Ok(true);
                }
            }
        }
        // Everything waits: the earliest alarm (or nap) fires.
        let next = self
            .agents
            .iter()
            .enumerate()
            .filter_map(|(i, a)| earliest(a.alarm, a.machine.poll_timeout()).map(|at| (at, i)))
            .min();
        let Some((at, i)) = next else {
            return Ok(false);
        };
        self.now = self.now.max(at) + 1;
        let now = self.now;
        let agent = &mut self.agents[i];
        if agent.machine.schedule().running() {
            agent.machine.handle(Scheduled::Timeout, now);
        } else {
            agent.fire_alarm(now);
        }
        Ok(true)
    }

    /// Runs until nothing is due, recovering each crashed Agent.
    fn run(&mut self) {
        for _ in 0..10_000 {
            match self.step() {
                Ok(true) => {}
                Ok(false) => return,
                Err((i, Crashed)) => self.recover(i),
            }
            self.now += 1;
        }
        panic!("the fleet did not go idle in 10,000 steps");
    }
}

/// Entries the parent stages for its host's delivery lane: more than one
/// batch (a pass's own bound is `delivery`'s unit test's).
const OUTBOX_ENTRIES: usize = HOST_DELIVERY_BATCH_MAX + 3;

/// Parent `p` delegates to child `c` and prompts its own Session; the
/// child's turn answers, its reply lands as a line in `p`, which runs.
/// `order` is the order the fleet runs its Agents' due work in.
fn delegation(order: &[&str], crash_at: Option<usize>) -> Fleet {
    delegation_in(Fleet::new(order), crash_at)
}

fn delegation_in(mut fleet: Fleet, crash_at: Option<usize>) -> Fleet {
    let now = fleet.now;
    let parent = fleet.at("parent");
    let child = fleet.at("child");
    let to = fleet.agents[child].address("c");
    let p = &mut fleet.agents[parent];
    p.http(now, "POST", "/sessions", json!({ "sessionId": "p" }));
    // Outbox entries for the host, staged in one transition.
    atomically(&p.db, || {
        for n in 0..OUTBOX_ENTRIES {
            delivery::stage(&p.db, &format!("k{n}"), &json!({ "n": n }), now)?;
        }
        Ok::<_, SqlError>(())
    })
    .unwrap();
    let from = p.address("p");
    let sent = p
        .ctx(now, |ctx| {
            mail::send(
                ctx,
                &Outgoing {
                    from,
                    to,
                    request_id: "r1",
                    text: "summarise the notes",
                    delivery: Delivery::FollowUp,
                },
            )
        })
        .unwrap()
        .unwrap();
    assert!(matches!(sent, SendState::Pending { .. }), "{sent:?}");
    let admitted = p.http(
        now,
        "POST",
        "/sessions/p/commands",
        json!({ "type": "prompt", "requestId": "own", "text": "keep going" }),
    );
    let head = admitted["commandId"].as_str().unwrap().to_owned();
    p.machine.hold_fresh([(head, "p".to_owned())]);
    p.wake(now);
    fleet
        .clock
        .crash_at
        .set(crash_at.map(|n| fleet.clock.commits.get() + n));
    fleet.run();
    fleet
}

/// What the scenario must come to, however often it crashed: every
/// command settled `completed` with at most one `settled` frame, the
/// delegated prompt admitted once, its reply line once, nothing owed,
/// every outbox entry taken by the host (at least once) and acknowledged.
fn check(fleet: &mut Fleet, context: &str) {
    check_lines(fleet, context, &["keep going", "echo: summarise the notes"]);
}

/// [`check`], with `lines` the user lines `p` must hold, in order.
fn check_lines(fleet: &mut Fleet, context: &str, lines: &[&str]) {
    let now = fleet.now;
    let taken: HashSet<&str> = fleet.delivered.iter().map(String::as_str).collect();
    for n in 0..OUTBOX_ENTRIES {
        assert!(taken.contains(format!("k{n}").as_str()), "{context}: k{n}");
    }
    for agent in &fleet.agents {
        let commands = agent.commands();
        for (command, state) in &commands {
            assert_eq!(state, "completed", "{context}: {} {command}", agent.id);
        }
        for (command, n) in agent.settled() {
            assert_eq!(n, 1, "{context}: {} settled {command} {n} times", agent.id);
        }
        assert_eq!(
            agent.deadlines(now),
            None,
            "{context}: {} owes nothing",
            agent.id
        );
    }
    let parent = fleet.at("parent");
    let child = fleet.at("child");
    assert_eq!(fleet.agents[child].commands().len(), 1, "{context}");
    // The parent's prompts and the child's reply line.
    assert_eq!(
        fleet.agents[parent].commands().len(),
        lines.len(),
        "{context}"
    );
    let read = fleet.agents[parent].http(now, "GET", "/sessions/p", Value::Null);
    let texts: Vec<String> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts, lines, "{context}");
}

#[test]
fn a_delegation_between_two_agents_runs_through_their_schedules() {
    for order in ORDERS {
        let mut fleet = delegation(order, None);
        check(&mut fleet, &format!("no crash, {order:?}"));
    }
}

/// Either Agent's due work first: with the child first, a crash of the
/// parent after the child accepted its mail but before the receipt was
/// recorded lets the child reply before the parent's retry records it.
const ORDERS: [&[&str]; 2] = [&["parent", "child"], &["child", "parent"]];

#[test]
fn a_crash_after_every_durable_transition_of_a_delegation_loses_nothing_and_settles_once() {
    for order in ORDERS {
        let total = {
            let fleet = delegation(order, None);
            fleet.clock.commits.get()
        };
        assert!(total > 5, "the scenario has {total} transitions");
        for n in 0..total {
            let mut fleet = delegation(order, Some(n));
            check(
                &mut fleet,
                &format!("crash after {n} transitions, {order:?}"),
            );
        }
    }
}

/// When the `nudge` extension's timer fires after the delegation's last
/// settlement in `p`.
const NUDGE_AFTER_MS: i64 = 60_000;

/// The parent's `nudge` extension (its callbacks speak the JSON protocol
/// of `js/extensions.mjs`): the settled hook counts `p`'s settlements and
/// arms a timer at the second (the delegation's last work, so only the
/// schedule's `Rearm` brings the alarm to it); when it fires, the timer
/// hook counts it, sends a prompt into `p` and sets an attention item
/// there (a delivery outbox entry for the lane).
fn nudge() -> Extensions {
    nudge_with(Nudge {
        throws: false,
        sends: false,
    })
}

fn nudge_with(host: Nudge) -> Extensions {
    let manifest = json!({
        "id": "nudge", "version": "0.0.0",
        "config": null, "configSchema": null, "configValidate": false,
        "state": {"version": 1, "collections": {
            "settled": {"document": true, "schema": null, "validate": false},
            "fired": {"document": true, "schema": null, "validate": false}
        }},
        "migrations": [],
        "commands": {},
        "hooks": {"settled": true, "timer": true},
        "projection": {"session": false, "agent": false},
        "prompt": false, "tools": false,
        "requests": {"attention": true},
        "grants": ["attention"],
        "grantKey": "nudge", "feature": null
    });
    let roster = Roster::parse(&json!([manifest]).to_string()).unwrap();
    Extensions::new(roster, Box::new(host))
}

/// `nudge` whose timer hook throws.
fn throwing_nudge() -> Extensions {
    nudge_with(Nudge {
        throws: true,
        sends: false,
    })
}

/// `nudge` whose settled hook sends its prompt itself (staged with the
/// settlement, admitted by the next pass) instead of arming a timer.
fn sending_nudge() -> Extensions {
    nudge_with(Nudge {
        throws: false,
        sends: true,
    })
}

struct Nudge {
    throws: bool,
    sends: bool,
}

impl Host for Nudge {
    fn call(&self, request: &str) -> String {
        let r: Value = serde_json::from_str(request).unwrap();
        if self.throws && r["kind"] == "timer" {
            return json!({"ok": false, "error": "nudge: down"}).to_string();
        }
        let now = r["now"].as_i64().unwrap();
        let count = |collection: &str| r["state"][collection][""].as_i64().unwrap_or(0);
        let answer = match r["kind"].as_str().unwrap() {
            "settled" if r["event"]["sessionId"] == "p" && self.sends => {
                let n = count("settled") + 1;
                let sends = match n {
                    2 => json!([{"sessionId": "p", "text": "nudged"}]),
                    _ => json!([]),
                };
                json!({
                    "ok": true,
                    "writes": [{"collection": "settled", "key": "", "value": n}],
                    "sends": sends
                })
            }
            "settled" if r["event"]["sessionId"] == "p" => {
                let n = count("settled") + 1;
                let timers = match n {
                    2 => json!([{"name": "nudge", "at": now + NUDGE_AFTER_MS, "sessionId": "p"}]),
                    _ => json!([]),
                };
                json!({
                    "ok": true,
                    "writes": [{"collection": "settled", "key": "", "value": n}],
                    "timers": timers
                })
            }
            "timer" => json!({
                "ok": true,
                "writes": [{"collection": "fired", "key": "", "value": count("fired") + 1}],
                "sends": [{"sessionId": "p", "text": "nudged"}],
                "attention": [{"op": "set", "sessionId": "p",
                    "item": {"id": "nudge", "kind": "reminder", "summary": "nudged", "since": now}}]
            }),
            _ => json!({"ok": true}),
        };
        answer.to_string()
    }
}

/// The delegation, the parent carrying `nudge`: its timer, set by a
/// settled hook inside a turn's settling transition, rides the parent's
/// alarm and fires once the delegation is done.
fn nudged_delegation(order: &[&str], crash_at: Option<usize>) -> Fleet {
    delegation_with(nudge, order, crash_at)
}

fn delegation_with(roster: fn() -> Extensions, order: &[&str], crash_at: Option<usize>) -> Fleet {
    let mut fleet = Fleet::new(order);
    let (parent, now) = (fleet.at("parent"), fleet.now);
    fleet.agents[parent].extend(roster, now);
    delegation_in(fleet, crash_at)
}

/// [`check`], and the timer fired exactly once: its hook's write
/// committed once, its prompt ran once in `p` (after the reply line), its
/// attention item was delivered, and nothing of it is left or stopped.
fn check_nudged(fleet: &mut Fleet, context: &str) {
    check_lines(
        fleet,
        context,
        &["keep going", "echo: summarise the notes", "nudged"],
    );
    let now = fleet.now;
    let p = &fleet.agents[fleet.at("parent")];
    let one = |query: &str| {
        let rows = p.db.query(query, &[]).unwrap();
        assert_eq!(rows.len(), 1, "{context}: {query}");
        rows[0].text(0).unwrap()
    };
    assert_eq!(
        one("SELECT value FROM shiitake_state_nudge WHERE collection = 'fired'"),
        "1",
        "{context}: the timer hook committed once"
    );
    assert_eq!(
        one("SELECT coalesce(stopped, 'running') FROM shiitake_extensions"),
        "running",
        "{context}"
    );
    assert_eq!(
        one("SELECT summary FROM shiitake_attention WHERE ext = 'nudge' AND id = 'nudge'"),
        "nudged",
        "{context}"
    );
    assert_eq!(p.extension_deadline(now), None, "{context}: no timer left");
    assert!(
        fleet
            .delivered
            .iter()
            .any(|k| k == "attention:nudge:p:nudge"),
        "{context}: the attention change was delivered"
    );
}

#[test]
fn an_extension_timer_set_by_a_settled_hook_fires_once_through_the_schedule() {
    for order in ORDERS {
        let mut fleet = nudged_delegation(order, None);
        check_nudged(&mut fleet, &format!("no crash, {order:?}"));
    }
}

#[test]
fn a_crash_after_every_durable_transition_of_a_nudged_delegation_fires_the_timer_once() {
    for order in ORDERS {
        let total = {
            let fleet = nudged_delegation(order, None);
            fleet.clock.commits.get()
        };
        for n in 0..total {
            let mut fleet = nudged_delegation(order, Some(n));
            check_nudged(
                &mut fleet,
                &format!("crash after {n} transitions, {order:?}"),
            );
        }
    }
}

/// [`check`], and the settled hook's send landed once: its prompt ran once
/// in `p` (after the reply line), with the hook's count of `p`'s
/// settlements (one more: the nudge's own), nothing staged left, nothing
/// stopped.
fn check_sent(fleet: &mut Fleet, context: &str) {
    check_lines(
        fleet,
        context,
        &["keep going", "echo: summarise the notes", "nudged"],
    );
    let now = fleet.now;
    let p = &fleet.agents[fleet.at("parent")];
    let one = |query: &str| {
        let rows = p.db.query(query, &[]).unwrap();
        assert_eq!(rows.len(), 1, "{context}: {query}");
        rows[0].text(0).unwrap()
    };
    assert_eq!(
        one("SELECT value FROM shiitake_state_nudge WHERE collection = 'settled'"),
        "3",
        "{context}: each settlement of p once, the nudge's among them"
    );
    assert_eq!(
        one("SELECT coalesce(stopped, 'running') FROM shiitake_extensions"),
        "running",
        "{context}"
    );
    assert_eq!(
        one("SELECT CAST(count(*) AS TEXT) FROM shiitake_ext_timers"),
        "0",
        "{context}: nothing staged is left"
    );
    assert_eq!(p.extension_deadline(now), None, "{context}");
}

#[test]
fn a_crash_after_every_durable_transition_lands_a_settled_hooks_send_once_with_its_settlement() {
    for order in ORDERS {
        let total = {
            let mut fleet = delegation_with(sending_nudge, order, None);
            check_sent(&mut fleet, &format!("no crash, {order:?}"));
            fleet.clock.commits.get()
        };
        for n in 0..total {
            let mut fleet = delegation_with(sending_nudge, order, Some(n));
            check_sent(
                &mut fleet,
                &format!("crash after {n} transitions, {order:?}"),
            );
        }
    }
}

/// [`check`], and the throwing timer hook's failure was committed as its
/// outcome, whole: the extension stopped with the hook's reason, the timer
/// kept for after a resume (it no longer rides the alarm), and nothing of
/// the hook's effects (no write, prompt or attention).
fn check_stopped(fleet: &mut Fleet, context: &str) {
    check(fleet, context);
    let now = fleet.now;
    let p = &fleet.agents[fleet.at("parent")];
    let count = |query: &str| p.db.query(query, &[]).unwrap()[0].int(0).unwrap();
    let reason =
        p.db.query("SELECT stopped FROM shiitake_extensions", &[])
            .unwrap()[0]
            .text(0)
            .unwrap();
    assert_eq!(reason, "nudge: down", "{context}");
    assert_eq!(
        count("SELECT count(*) FROM shiitake_ext_timers"),
        1,
        "{context}"
    );
    assert_eq!(
        count("SELECT count(*) FROM shiitake_state_nudge WHERE collection = 'fired'"),
        0,
        "{context}"
    );
    assert_eq!(
        p.extension_deadline(now),
        None,
        "{context}: a stopped timer rides no alarm"
    );
    assert!(
        !fleet.delivered.iter().any(|k| k.starts_with("attention:")),
        "{context}"
    );
}

#[test]
fn a_crash_after_every_durable_transition_commits_a_throwing_timer_hooks_stop_whole() {
    for order in ORDERS {
        let total = {
            let fleet = delegation_with(throwing_nudge, order, None);
            fleet.clock.commits.get()
        };
        for n in 0..total {
            let mut fleet = delegation_with(throwing_nudge, order, Some(n));
            check_stopped(
                &mut fleet,
                &format!("crash after {n} transitions, {order:?}"),
            );
        }
    }
}

/// One Agent alone, no mail and no outbox of its own: the timer its
/// settled hook sets in the queue's last settlement rides the alarm and
/// fires once. (It does not single out `Rearm`: the loop's own claim and
/// the lane pass every wake asks for read the extensions' deadline too;
/// `tests/e2e/extensions.test.mjs` covers that ordering.)
#[test]
fn a_timer_set_in_the_last_settlement_of_an_idle_agent_rides_the_alarm() {
    let mut fleet = Fleet::new(&["parent"]);
    let (parent, now) = (fleet.at("parent"), fleet.now);
    let p = &mut fleet.agents[parent];
    p.extend(nudge, now);
    p.http(now, "POST", "/sessions", json!({ "sessionId": "p" }));
    for text in ["one", "two"] {
        let admitted = p.http(
            now,
            "POST",
            "/sessions/p/commands",
            json!({ "type": "prompt", "requestId": text, "text": text }),
        );
        assert_eq!(admitted["status"], "accepted", "{admitted}");
        if text == "one" {
            let head = admitted["commandId"].as_str().unwrap().to_owned();
            p.machine.hold_fresh([(head, "p".to_owned())]);
        }
    }
    p.wake(now);
    fleet.run();
    let now = fleet.now;
    let read = fleet.agents[parent].http(now, "GET", "/sessions/p", Value::Null);
    let p = &fleet.agents[parent];
    let texts: Vec<&str> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["one", "two", "nudged"]);
    let fired =
        p.db.query(
            "SELECT value FROM shiitake_state_nudge WHERE collection = 'fired'",
            &[],
        )
        .unwrap();
    assert_eq!(fired[0].text(0).unwrap(), "1", "the timer fired once");
    assert_eq!(p.deadlines(now), None, "nothing owed");
}
