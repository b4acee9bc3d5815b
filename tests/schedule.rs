//! A simulated fleet: several Agents, each its own SQLite file and its own
//! Agent machine (`run::agent`, the machine the wasm host performs),
//! exchanging mail over one clock. The simulated host performs every
//! output as `src/host/` does: claims, turns (the real turn driver, a
//! scripted model), mail passes, delivery lane passes, the durable alarm. A crash after every
//! durable transition of the scenario (the crashed Agent loses everything
//! in memory and reopens its store; the alarm, like the platform's,
//! survives) must lose nothing and settle nothing twice.

mod common;

use common::sim::{Clock, Crashed, Db, Ids};
use serde_json::{json, Value};
use shiitake::ctx::Ctx;
use shiitake::delivery::{self, LanePass, LaneStep};
use shiitake::http::{admission_effects, handle, HttpRequest};
use shiitake::limits::HOST_DELIVERY_BATCH_MAX;
use shiitake::mail::{self, Acceptance, Address, Outgoing, Replies, SendState};
use shiitake::meta::MetaPolicy;
use shiitake::model::{Answer, ModelItem, RetryPolicy, Role, Usage};
use shiitake::observe::{Event, Frame};
use shiitake::run;
use shiitake::run::agent::{Agent as Machine, Event as Scheduled, Output, TurnId};
use shiitake::run::driver::{Input, Offer, TurnPolicy};
use shiitake::run::schedule::earliest;
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
        let due = self.next_deadline(now);
        self.machine.handle(Scheduled::Deadline(due), now);
    }

    /// The earliest durable deadline, as the host reads it.
    fn next_deadline(&self, now: i64) -> Option<i64> {
        let store = Store::new(&self.db);
        earliest(
            run::next_deadline(store, now, &|_| false).unwrap(),
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
        let mut ctx = Ctx {
            store: Store::observed(&self.db, &self.replies),
            now_ms: now,
            ids: &mut self.ids,
            meta: &self.meta,
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
        let r = self
            .ctx(now, |ctx| handle(ctx, None, &req))
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
                    let mut ctx = Ctx {
                        store: Store::observed(&self.db, &self.replies),
                        now_ms: now,
                        ids: &mut self.ids,
                        meta: &self.meta,
                    };
                    let (live, machine) = (&self.live, &self.machine);
                    let reconciled = run::reconcile(
                        &mut ctx,
                        &|h| live.contains(h),
                        &|h| machine.is_fresh(h),
                        run::Attempts { max: 5 },
                    );
                    if self.db.crashed.get() {
                        return Err(Crashed);
                    }
                    let reconciled = reconciled.unwrap();
                    let event = Scheduled::Reconciled {
                        steps: reconciled.steps,
                        settled: reconciled.settled,
                        later: reconciled.next_deadline,
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
            let mut ctx = Ctx {
                store: Store::observed(&self.db, &self.replies),
                now_ms: now,
                ids: &mut self.ids,
                meta: &self.meta,
            };
            self.machine.handle_turn(&mut ctx, turn, input, now);
            if self.db.crashed.get() {
                return Err(Crashed);
            }
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
    let mut fleet = Fleet::new(order);
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
    // The parent's prompt and the child's reply line.
    assert_eq!(fleet.agents[parent].commands().len(), 2, "{context}");
    let read = fleet.agents[parent].http(now, "GET", "/sessions/p", Value::Null);
    let texts: Vec<String> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        texts,
        ["keep going", "echo: summarise the notes"],
        "{context}"
    );
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
