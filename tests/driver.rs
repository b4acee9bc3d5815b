//! Whole turns through the turn driver (`run::driver::Turn`) under a
//! simulated host, as quinn tests a connection pair: one clock, the store
//! over real SQLite (a crash drops everything in memory and reopens the
//! file), a scripted model and scripted tools. The simulated host performs
//! the driver's actions exactly as the wasm host does and decides nothing.
//! A crash can be injected after any durable transition: every commit past
//! the chosen one fails, the process "dies", and a fresh one recovers from
//! the file alone.

mod common;

use common::sim::{Clock, Crashed, Db};
use serde_json::{json, Value};
use shiitake::budget::{self, Limits};
use shiitake::capability::door::Toolset;
use shiitake::capability::Catalog;
use shiitake::ctx::{CounterIds, Ctx};
use shiitake::files::journal::{self, Journaled, Owner};
use shiitake::files::port::{Change, Page, Port, PortError, Replaced, Stat};
use shiitake::grants::AccessConfig;
use shiitake::http::{handle, Hosted, HttpRequest};
use shiitake::meta::MetaPolicy;
use shiitake::model::{
    classify_status, Answer, ModelError, ModelItem, RetryPolicy, Role, ToolCall, Usage,
};
use shiitake::observe::{Event, Frame};
use shiitake::run;
use shiitake::run::agent::{Agent, Event as Scheduled, Output, TurnId};
use shiitake::run::compaction::ContextWindow;
use shiitake::run::driver::{Input, Offer, ToolWork, TurnPolicy};
use shiitake::run::operation::{result_output, Gate, OperationCall, Rules};
use shiitake::run::tools::undone_output;
use shiitake::run::tools::ToolOutput;
use shiitake::sql::Sql;
use shiitake::store::{schema, Store};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::rc::Rc;

/// A request the host receives while it performs an action.
#[derive(Clone, Copy)]
enum When {
    /// During the model call with this number (1-based, over the whole run).
    ModelCall(usize),
    /// During the tool call with this number.
    ToolCall(usize),
}

/// What happened outside the process (survives crashes).
#[derive(Default)]
struct World {
    model_calls: usize,
    tool_calls: usize,
    /// Model calls that fail (retryably) before any answers.
    failing_model_calls: usize,
    /// Model calls (by number) the provider refuses as too long.
    too_long_calls: Vec<usize>,
    /// Summary calls made.
    summary_calls: usize,
    /// What each model call that was no summary call saw.
    contexts: Vec<Vec<ModelItem>>,
    /// Call ids under which the unsafe operation took effect.
    effects: Vec<String>,
    events: Vec<Event>,
    /// Requests to make during an action: when, and the command body.
    interjections: Vec<(When, Value)>,
    /// Files of a stepwise port `add` patches (both files), when set; the
    /// process dies right after the put with this number.
    files: RefCell<BTreeMap<String, String>>,
    patch: Option<usize>,
    puts: Cell<usize>,
}

/// A stepwise files port over `World::files`: one change at a time, each
/// conditional; nothing answers once the process died.
struct Files<'a> {
    world: &'a World,
    db: &'a Db,
}

impl Files<'_> {
    fn alive(&self) -> Result<(), PortError> {
        match self.db.crashed.get() {
            true => Err(PortError("the process crashed".into())),
            false => Ok(()),
        }
    }
}

impl Port for Files<'_> {
    async fn read(&self, path: &str) -> Result<Option<String>, PortError> {
        self.alive()?;
        Ok(self.world.files.borrow().get(path).cloned())
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
        self.alive()?;
        let [change] = changes else {
            panic!("stepwise")
        };
        let mut files = self.world.files.borrow_mut();
        if files.get(&change.path) != change.expected.as_ref() {
            return Ok(Replaced::Conflict {
                path: change.path.clone(),
            });
        }
        match &change.content {
            Some(content) => files.insert(change.path.clone(), content.clone()),
            None => files.remove(&change.path),
        };
        self.world.puts.set(self.world.puts.get() + 1);
        if self.world.patch == Some(self.world.puts.get()) {
            self.db.crashed.set(true);
        }
        Ok(Replaced::Done)
    }
    fn patches(&self) -> bool {
        true
    }
}

struct Sim {
    _dir: tempfile::TempDir,
    path: PathBuf,
    db: Db,
    ids: CounterIds,
    now_ms: i64,
    meta: MetaPolicy,
    /// The Agent machine (its schedule, turns, turns held fresh): in
    /// memory, lost at a crash.
    machine: Agent,
    /// Heads of the turns live in this process.
    live: HashSet<String>,
    /// Each running turn's input, once its action was performed.
    inputs: VecDeque<(TurnId, Input)>,
    toolset: Rc<Toolset>,
    access: AccessConfig,
    policy: TurnPolicy,
    world: World,
    /// Command ids by request id.
    commands: HashMap<String, String>,
    /// The model's stated window (automatic compaction), if any.
    window: Option<ContextWindow>,
    /// The scripted model reports this many input tokens a byte of its
    /// context's text (0: 3 tokens a call).
    tokens_per_byte: u64,
}

/// Module `notes`: `add` writes and is unsafe to replay, `list` reads and
/// is safe to replay; both offered as direct tools.
fn toolset() -> Rc<Toolset> {
    toolset_of(&["notes.add", "notes.list"])
}

/// The notes module with these operations offered as direct tools.
fn toolset_of(direct: &[&str]) -> Rc<Toolset> {
    let catalog = Catalog::from_json(
        &json!([{
            "id": "notes",
            "operations": [
                {"name": "add", "description": "Adds a note.", "access": "write",
                 "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
                {"name": "list", "description": "Lists notes.", "access": "read", "replaySafe": true,
                 "inputSchema": {"type": "object"}}
            ]
        }])
        .to_string(),
    )
    .unwrap();
    let direct: Vec<String> = direct.iter().map(|d| d.to_string()).collect();
    Rc::new(Toolset::new(catalog, &direct, Err("no sandbox here".into())).unwrap())
}

/// Text bytes of a context, by which the scripted model may report its
/// input tokens (`Sim::tokens_per_byte`).
fn text_bytes(context: &[ModelItem]) -> u64 {
    context
        .iter()
        .map(|i| match i {
            ModelItem::Message(m) => m.text.len(),
            ModelItem::ToolCalls { text, calls } => {
                text.len() + calls.iter().map(|c| c.arguments.len()).sum::<usize>()
            }
            ModelItem::ToolResult { content, .. } => content.len(),
        } as u64)
        .sum()
}

/// The scripted model, a function of what it sees. A summary call (its own
/// system prompt) answers `summary`, saying whether the transcript it got
/// called tools. Otherwise the current turn is everything after the last
/// plain assistant answer: a turn that already called tools (or whose
/// summary says so) is answered `done`; a turn whose last prompt is `go`
/// calls `add` and `list`; anything else is answered `ok`. It reports 3
/// input tokens a call, or `tokens_per_byte` tokens a byte of text.
fn model(context: &[ModelItem], system: Option<&str>, tokens_per_byte: u64) -> Answer {
    let usage = Some(Usage {
        input_tokens: match tokens_per_byte {
            0 => 3,
            n => n * text_bytes(context),
        },
        output_tokens: 1,
        ..Usage::default()
    });
    if system.is_some() {
        let [ModelItem::Message(request)] = context else {
            panic!("a summary call is one message: {context:?}")
        };
        let text = match request.text.contains("[tool call ") {
            true => "summary: tools were called",
            false => "summary",
        };
        return Answer::new(text, usage, Vec::new());
    }
    let start = context
        .iter()
        .rposition(|i| matches!(i, ModelItem::Message(m) if m.role == Role::Assistant))
        .map_or(0, |at| at + 1);
    let turn = &context[start..];
    if turn
        .iter()
        .any(|i| matches!(i, ModelItem::ToolCalls { .. }))
    {
        return Answer::new("done", usage, Vec::new());
    }
    let last_prompt = turn.iter().rev().find_map(|i| match i {
        ModelItem::Message(m) if m.role == Role::User => Some(m.text.as_str()),
        _ => None,
    });
    let summarised_calls = turn.iter().any(
        |i| matches!(i, ModelItem::Message(m) if m.text.contains("<summary>\nsummary: tools were called")),
    );
    if last_prompt == Some("go") && summarised_calls {
        return Answer::new("done", usage, Vec::new());
    }
    if last_prompt == Some("go") {
        let call = |id: &str, name: &str, arguments: &str| ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        };
        return Answer::new(
            "calling",
            usage,
            vec![
                call("c1", "add", r#"{"text":"x"}"#),
                call("c2", "list", "{}"),
            ],
        );
    }
    Answer::new("ok", usage, Vec::new())
}

fn policy() -> TurnPolicy {
    TurnPolicy::new(RetryPolicy {
        attempts_max: 5,
        base_delay_ms: 1_000,
        max_delay_ms: 4_000,
    })
}

impl Sim {
    fn new() -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sqlite");
        let db = Db::open(&path, &Rc::new(Clock::default()));
        schema::open(&db).unwrap();
        Sim {
            _dir: dir,
            path,
            db,
            ids: CounterIds::default(),
            now_ms: 1_000,
            meta: MetaPolicy::default(),
            machine: Agent::new(policy()),
            live: HashSet::new(),
            inputs: VecDeque::new(),
            toolset: toolset(),
            access: AccessConfig::default(),
            policy: policy(),
            world: World::default(),
            commands: HashMap::new(),
            window: None,
            tokens_per_byte: 0,
        }
    }

    /// Fails every commit after `transitions` more.
    fn crash_after(&mut self, transitions: usize) {
        let clock = &self.db.clock;
        clock.crash_at.set(Some(clock.commits.get() + transitions));
    }

    /// A new process over the same file: nothing of the old one's memory.
    fn restart(&mut self) {
        let clock = Rc::clone(&self.db.clock);
        clock.crash_at.set(None);
        self.db = Db::open(&self.path, &clock);
        schema::open(&self.db).unwrap();
        self.machine = Agent::new(self.policy);
        self.live.clear();
        self.inputs.clear();
    }

    fn with_ctx<T>(&mut self, f: impl FnOnce(&mut Ctx<'_>) -> T) -> Result<T, Crashed> {
        self.now_ms += 1;
        let mut ctx = Ctx {
            store: Store::new(&self.db),
            now_ms: self.now_ms,
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

    /// One HTTP request; its effects are carried out as the wasm host does.
    /// Answers the status, the body and the turns it stopped.
    fn request(&mut self, method: &str, path: &str, body: Value) -> (u16, Value, Vec<String>) {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
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
        let budget = self.policy.budget;
        let response = self
            .with_ctx(|ctx| {
                let mut hosted = Hosted::without_models(None);
                hosted.budget = budget;
                handle(ctx, &hosted, &req)
            })
            .expect("no crash in a request");
        let effects = response.effects;
        for (_, frame) in effects.frames {
            self.world.events.push(Event::Frame(frame));
        }
        self.machine.hold_fresh(effects.fresh_turns);
        let json = response
            .body
            .as_deref()
            .map_or(Value::Null, |b| serde_json::from_str(b).unwrap());
        (response.status, json, effects.stop_turns)
    }

    fn command(&mut self, body: Value) -> (u16, Value, Vec<String>) {
        let (status, json, stopped) = self.request("POST", "/sessions/s/commands", body.clone());
        if let (Some(request), Some(command)) =
            (body["requestId"].as_str(), json["commandId"].as_str())
        {
            self.commands.insert(request.into(), command.into());
        }
        (status, json, stopped)
    }

    fn prompt(&mut self, request_id: &str, text: &str, delivery: &str) {
        let (status, json, _) = self.command(json!({
            "type": "prompt", "requestId": request_id, "text": text, "delivery": delivery
        }));
        assert_eq!(status, 200, "{json}");
    }

    /// Makes the requests due `now`; answers whether one stopped `head`.
    fn interject(&mut self, now: When, head: &str) -> bool {
        let due: Vec<Value> = self
            .world
            .interjections
            .iter()
            .filter(|(when, _)| match (when, now) {
                (When::ModelCall(a), When::ModelCall(b))
                | (When::ToolCall(a), When::ToolCall(b)) => *a == b,
                _ => false,
            })
            .map(|(_, body)| body.clone())
            .collect();
        let mut stopped = false;
        for body in due {
            let (status, json, stops) = self.command(body);
            assert!(status < 300, "{json}");
            stopped |= stops.iter().any(|s| s == head);
        }
        stopped
    }

    /// Runs the Agent machine (`run::agent`, the machine the wasm host
    /// performs) until no work is due: every output performed as the host
    /// does, the oldest running turn's input fed first (each live until it
    /// ends), and the clock jumps to the alarm an idle loop leaves (the
    /// machine writes it), which then starts the next loop.
    fn run_until_idle(&mut self) -> Result<(), Crashed> {
        let mut loops = 0;
        // The platform's alarm, as the machine set it.
        let mut alarm: Option<i64> = None;
        self.machine.handle(Scheduled::Start, self.now_ms);
        self.machine.handle(Scheduled::Begin, self.now_ms);
        loop {
            while let Some(output) = self.machine.poll() {
                match output {
                    Output::Reconcile => {
                        let (attempts, budget) = (self.policy.attempts, self.policy.budget);
                        self.now_ms += 1;
                        let mut ctx = Ctx {
                            store: Store::new(&self.db),
                            now_ms: self.now_ms,
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
                            attempts,
                            &budget,
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
                        self.machine.handle(event, self.now_ms);
                    }
                    Output::Live { head, .. } => {
                        self.live.insert(head);
                    }
                    Output::Ended { head, .. } => {
                        self.live.remove(&head);
                    }
                    Output::Offer { turn, head, .. } => {
                        assert!(self.live.contains(&head), "an offer for {head}, not live");
                        let offer = Offer {
                            toolset: Some(Rc::clone(&self.toolset)),
                            unavailable: Vec::new(),
                            window: self.window,
                            compaction_prompt: None,
                            instructions_bytes: 0,
                        };
                        self.inputs.push_back((turn, Input::Offered(Ok(offer))));
                    }
                    Output::CallModel {
                        turn,
                        head,
                        context,
                        tools,
                        system,
                        ..
                    } => {
                        assert!(
                            self.live.contains(&head),
                            "a model call for {head}, not live"
                        );
                        let input = self.call_model(&head, context, tools, system);
                        self.inputs.push_back((turn, input));
                    }
                    Output::RunTool {
                        turn, head, run, ..
                    } => {
                        assert!(self.live.contains(&head), "a tool run for {head}, not live");
                        self.world.tool_calls += 1;
                        let n = self.world.tool_calls;
                        let op = match run.work {
                            ToolWork::Operation(op) => op,
                            ToolWork::Undo { of, execute } => {
                                let undone = self.undo(of.journal_key());
                                let output = undone_output(&run.call, execute, &undone);
                                self.inputs.push_back((turn, Input::ToolDone(output)));
                                continue;
                            }
                            ToolWork::Execute { .. } => {
                                panic!("no sandbox: execute is never offered")
                            }
                        };
                        // The tool reports three counters at once: the first
                        // goes out, the newest is held to the call's end.
                        let mut progress = run.progress;
                        for count in 1..=3 {
                            let report =
                                progress.report(self.now_ms, &format!(r#"{{"n":{count}}}"#));
                            self.world.events.extend(report.unwrap().map(Event::Frame));
                        }
                        let input = self.operation(&op)?;
                        self.world.events.extend(progress.end().map(Event::Frame));
                        let input = match self.interject(When::ToolCall(n), &head) {
                            true => Input::Stopped,
                            false => input,
                        };
                        self.inputs.push_back((turn, input));
                    }
                    Output::Fault(e) => {
                        assert!(self.db.crashed.get(), "a fault without a crash: {e}");
                        return Err(Crashed);
                    }
                    // No lane or mail pass is asked for here (`tests/schedule.rs`).
                    Output::LanePass
                    | Output::LaneEnded
                    | Output::MailPass
                    | Output::ReadPassLeft { .. } => panic!("a pass nobody asked for"),
                    Output::Publish { event, .. } => self.world.events.push(event),
                    Output::MailStaged
                    | Output::Projections
                    | Output::Hold { .. }
                    | Output::Release { .. } => {}
                    Output::ReadDeadlines => {
                        self.machine.handle(Scheduled::Deadlines(None), self.now_ms)
                    }
                    Output::SetAlarm(at) => alarm = Some(at),
                    Output::DeleteAlarm => alarm = None,
                    // Its alarm output follows it.
                    Output::Idle => {}
                }
            }
            if !self.machine.schedule().running() {
                assert!(self.inputs.is_empty(), "a turn outlived its loop");
                assert!(self.live.is_empty(), "a turn live past its end");
                let Some(at) = alarm.take() else {
                    return Ok(());
                };
                loops += 1;
                assert!(loops < 100, "the run loop did not go idle in 100 alarms");
                // The alarm fires at its deadline.
                self.now_ms = self.now_ms.max(at);
                self.machine.handle(Scheduled::AlarmFired, self.now_ms);
                self.machine.handle(Scheduled::Begin, self.now_ms);
                continue;
            }
            match self.inputs.pop_front() {
                Some((turn, input)) => {
                    self.now_ms += 1;
                    let mut ctx = Ctx {
                        store: Store::new(&self.db),
                        now_ms: self.now_ms,
                        ids: &mut self.ids,
                        meta: &self.meta,
                        spans: Vec::new(),
                        charged: None,
                    };
                    self.machine.handle_turn(&mut ctx, turn, input, self.now_ms);
                    if self.db.crashed.get() {
                        return Err(Crashed);
                    }
                }
                None => {
                    let at = self.machine.poll_timeout().expect("a running loop naps");
                    self.now_ms = self.now_ms.max(at);
                    self.machine.handle(Scheduled::Timeout, self.now_ms);
                }
            }
        }
    }

    /// Performs a model call of the turn headed by `head` with the scripted
    /// model: a request may stop the turn meanwhile.
    fn call_model(
        &mut self,
        head: &str,
        context: Vec<ModelItem>,
        tools: Vec<shiitake::model::ToolSpec>,
        system: Option<String>,
    ) -> Input {
        match &system {
            Some(_) => {
                assert!(tools.is_empty(), "a summary call offers no tools");
                self.world.summary_calls += 1;
            }
            None => {
                assert_eq!(
                    tools.len(),
                    self.toolset.specs().len(),
                    "the direct tools are offered"
                );
                self.world.contexts.push(context.clone());
            }
        }
        self.world.model_calls += 1;
        let n = self.world.model_calls;
        if self.interject(When::ModelCall(n), head) {
            Input::Stopped
        } else if n <= self.world.failing_model_calls {
            Input::Failed(ModelError::new(true, "HTTP 503: overloaded"))
        } else if self.world.too_long_calls.contains(&n) {
            Input::Failed(classify_status(
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 9 tokens > 8 maximum"}}"#,
            ))
        } else {
            Input::Answered(model(&context, system.as_deref(), self.tokens_per_byte))
        }
    }

    /// Performs an operation through its gate, as the wasm host does.
    fn operation(&mut self, op: &OperationCall) -> Result<Input, Crashed> {
        let access = self.access.clone();
        let rules = Rules {
            config: &access,
            confirm_hook: false,
        };
        let gate = self.with_ctx(|ctx| op.begin(ctx, rules))?;
        Ok(match gate {
            Gate::Invoke => {
                if !op.replay_safe {
                    self.world.effects.push(op.of.call_id.clone());
                }
                if op.guest_name == "add" && self.world.patch.is_some() {
                    self.patch(op)?;
                }
                Input::ToolDone(result_output(json!({"ran": op.guest_name}).into()))
            }
            Gate::Refused(why) => Input::ToolDone(ToolOutput::error(why)),
            Gate::Confirm(_) => panic!("no operation here asks for confirmation"),
            Gate::Stale => Input::ToolStale,
        })
    }

    /// Patches both files of the stepwise port, journaled, as the wasm host
    /// does for a patch over R2.
    fn patch(&mut self, op: &OperationCall) -> Result<(), Crashed> {
        let port = Files {
            world: &self.world,
            db: &self.db,
        };
        let patch = Journaled {
            sql: &self.db,
            owner: Owner {
                port: "notes".into(),
                session_id: op.of.session_id.clone(),
                command_id: op.of.command_id.clone(),
                call_id: op.of.call_id.clone(),
            },
            now_ms: self.now_ms,
            stopped: &|| false,
        };
        let changes: Vec<Change> = ["a", "b"]
            .map(|path| Change {
                path: path.into(),
                expected: Some("old".into()),
                content: Some("new".into()),
            })
            .into();
        let done = shiitake::files::block_on(patch.replace(&port, &changes));
        if self.db.crashed.get() {
            return Err(Crashed);
        }
        assert_eq!(done, Ok(Replaced::Done));
        Ok(())
    }

    /// Undoes the journals a call left, as the wasm host does.
    fn undo(&self, call: (&str, &str, &str)) -> String {
        let port = Files {
            world: &self.world,
            db: &self.db,
        };
        let mut undone = journal::Undone::default();
        for left in journal::journals(&self.db, Some(call)).unwrap() {
            let one = journal::recover(&self.db, left.id, Ok(&port));
            undone.merge(shiitake::files::block_on(one).unwrap());
        }
        undone.describe()
    }

    /// Runs until idle, restarting after each crash (at most `crashes_max`).
    fn run_with_recovery(&mut self, crashes_max: usize) -> usize {
        let mut crashes = 0;
        while self.run_until_idle().is_err() {
            crashes += 1;
            assert!(crashes <= crashes_max, "crashed {crashes} times");
            self.restart();
        }
        crashes
    }

    fn messages(&mut self) -> Vec<Value> {
        let (status, json, _) = self.request("GET", "/sessions/s", Value::Null);
        assert_eq!(status, 200, "{json}");
        json["messages"].as_array().unwrap().clone()
    }

    fn settlement(&mut self, request_id: &str) -> Value {
        let command = self.commands[request_id].clone();
        let (status, json, _) = self.request(
            "GET",
            &format!("/sessions/s/settlement?commandId={command}"),
            Value::Null,
        );
        assert_eq!(status, 200, "{json}");
        json
    }

    /// The `tool` frames and `tool` messages published, in order, each as
    /// one line.
    fn tool_events(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for event in &self.world.events {
            match event {
                Event::Frame(Frame::Tool {
                    tool_call_id,
                    name,
                    phase,
                    result,
                    is_error,
                    ..
                }) => lines.push(format!(
                    "{phase:?} {tool_call_id} {name}{}{}",
                    result
                        .as_ref()
                        .map(|r| format!(" {}", r.data.get()))
                        .unwrap_or_default(),
                    is_error.map(|e| format!(" error={e}")).unwrap_or_default()
                )),
                Event::Frame(Frame::Message { message }) => {
                    let message: Value = serde_json::from_str(message.get()).unwrap();
                    if message["role"] == "tool" {
                        lines.push(format!(
                            "message {}",
                            message["toolCallId"].as_str().unwrap()
                        ));
                    }
                }
                _ => {}
            }
        }
        lines
    }

    /// `settled` frames published per command id.
    fn settled_frames(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for event in &self.world.events {
            if let Event::Frame(Frame::Settled { settlement }) = event {
                *counts.entry(settlement.command_id.clone()).or_default() += 1;
            }
        }
        counts
    }
}

/// `(role, text)` of each message.
fn transcript(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn roles(messages: &[Value]) -> Vec<String> {
    transcript(messages)
        .into_iter()
        .map(|(role, _)| role)
        .collect()
}

/// A Session with a tool turn (`go`) and a plain turn queued behind it.
fn two_turns() -> Sim {
    let mut sim = Sim::new();
    let (status, json, _) = sim.request("POST", "/sessions", json!({"sessionId": "s"}));
    assert_eq!(status, 201, "{json}");
    sim.prompt("p1", "go", "followUp");
    sim.prompt("p2", "next", "followUp");
    sim
}

const TWO_TURNS: [&str; 7] = [
    "user",
    "assistant",
    "tool",
    "tool",
    "assistant",
    "user",
    "assistant",
];

#[test]
fn a_tool_turn_then_the_queued_turn_run_to_one_settlement_each() {
    let mut sim = two_turns();
    assert_eq!(sim.run_with_recovery(0), 0);
    let messages = sim.messages();
    assert_eq!(roles(&messages), TWO_TURNS);
    let texts = transcript(&messages);
    assert_eq!(texts[2].1, r#"{"ran":"add"}"#);
    assert_eq!(texts[3].1, r#"{"ran":"list"}"#);
    assert_eq!(texts[4].1, "done");
    assert_eq!(texts[6].1, "ok");
    let first = sim.settlement("p1");
    assert_eq!(first["terminal"], "completed");
    assert_eq!(first["answer"], "done");
    assert_eq!(first["toolCallCount"], 2);
    assert_eq!(first["usage"], json!({"inputTokens": 6, "outputTokens": 2}));
    assert_eq!(sim.settlement("p2")["answer"], "ok");
    assert_eq!(sim.world.effects, ["c1"], "the unsafe operation ran once");
    assert_eq!(sim.world.model_calls, 3);
    assert!(sim.settled_frames().values().all(|n| *n == 1));
    // The second turn was claimed by the first one's settling write: no
    // reconciliation pass between them, one `started` frame each.
    let started: Vec<u32> = sim
        .world
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Frame(Frame::Started { attempt, .. }) => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(started, [1, 1]);
}

#[test]
fn a_crash_after_every_durable_transition_settles_each_command_once_and_duplicates_nothing() {
    let clean = {
        let mut sim = two_turns();
        let before = sim.db.clock.commits.get();
        sim.run_with_recovery(0);
        sim.db.clock.commits.get() - before
    };
    assert!(
        clean >= 6,
        "a tool turn and a plain turn take {clean} transitions"
    );
    let mut unknown = 0;
    for at in 0..=clean {
        let mut sim = two_turns();
        sim.crash_after(at);
        let crashes = sim.run_with_recovery(1);
        let context = format!("crash after transition {at} of {clean}");
        assert_eq!(crashes, usize::from(at < clean), "{context}");
        let messages = sim.messages();
        assert_eq!(roles(&messages), TWO_TURNS, "{context}");
        let ids: HashSet<&str> = messages
            .iter()
            .map(|m| m["entryId"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), messages.len(), "{context}: a message repeats");
        let results: Vec<&str> = messages
            .iter()
            .filter_map(|m| m["toolCallId"].as_str())
            .collect();
        assert_eq!(results, ["c1", "c2"], "{context}: one result per call");
        for request in ["p1", "p2"] {
            assert_eq!(
                sim.settlement(request)["terminal"],
                "completed",
                "{context}"
            );
        }
        let settled = sim.settled_frames();
        assert_eq!(settled.len(), 2, "{context}");
        assert!(settled.values().all(|n| *n == 1), "{context}: {settled:?}");
        // The unsafe operation never runs twice; when the crash fell between
        // its start and its recorded result, the model is told its outcome
        // is unknown instead of seeing it run again.
        assert!(sim.world.effects.len() <= 1, "{context}");
        let add = messages[2]["text"].as_str().unwrap();
        if add != r#"{"ran":"add"}"# {
            assert!(add.starts_with("outcome unknown"), "{context}: {add}");
            unknown += 1;
        }
    }
    // Exactly one crash point falls between the unsafe operation's start
    // (its own transition) and its recorded result.
    assert_eq!(unknown, 1, "of {clean} crash points");
}

/// A crash right after each put of a journaled patch (the R2 port's): the
/// resumed call is not run again, its patch is undone, and the model is
/// told exactly that; a call that left no journal is outcome unknown.
#[test]
fn a_crash_mid_patch_undoes_it_when_the_call_resumes_and_says_so() {
    for crash_after_put in [1, 2] {
        let mut sim = two_turns();
        for path in ["a", "b"] {
            sim.world
                .files
                .borrow_mut()
                .insert(path.into(), "old".into());
        }
        sim.world.patch = Some(crash_after_put);
        assert_eq!(sim.run_with_recovery(1), 1);
        let files: Vec<(String, String)> = sim.world.files.borrow().clone().into_iter().collect();
        assert_eq!(
            files,
            [("a".into(), "old".into()), ("b".into(), "old".into())],
            "after put {crash_after_put}: all or none"
        );
        let put_back = ["a", "a, b"][crash_after_put - 1];
        let texts = transcript(&sim.messages());
        assert_eq!(
            texts[2].1,
            format!(
                "the runtime restarted while tool call `c1` (`add`) was writing its files; it \
                 was not run again, and its patch was undone: nothing was changed (put back: \
                 {put_back})."
            )
        );
        assert_eq!(sim.world.effects, ["c1"], "not run again");
        assert!(journal::journals(&sim.db, None).unwrap().is_empty());
        assert_eq!(sim.settlement("p1")["terminal"], "completed");
        assert_eq!(sim.settlement("p2")["answer"], "ok");
    }
}

#[test]
fn a_failed_model_call_retries_on_the_durable_timer_then_completes() {
    let mut sim = two_turns();
    sim.world.failing_model_calls = 1;
    let start = sim.now_ms;
    sim.run_with_recovery(0);
    let retry: Vec<i64> = sim
        .world
        .events
        .iter()
        .filter_map(|e| match e {
            Event::RuntimeError(r) => r.retry_in_ms,
            _ => None,
        })
        .collect();
    assert_eq!(retry.len(), 1, "one retryable failure reported");
    assert!(
        (990..=1_000).contains(&retry[0]),
        "the base delay: {retry:?}"
    );
    assert!(
        sim.now_ms >= start + 1_000,
        "the clock waited for the timer"
    );
    let started: Vec<u32> = sim
        .world
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Frame(Frame::Started { attempt, .. }) => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        [1, 2, 1],
        "the retry is attempt 2; the next turn starts at 1"
    );
    assert_eq!(sim.settlement("p1")["terminal"], "completed");
    assert_eq!(roles(&sim.messages()), TWO_TURNS);
}

#[test]
fn model_failures_past_the_attempt_limit_settle_failed_once() {
    let mut sim = two_turns();
    sim.world.failing_model_calls = usize::MAX;
    sim.run_with_recovery(0);
    let first = sim.settlement("p1");
    assert_eq!(first["terminal"], "failed");
    assert!(first["diagnostic"]
        .as_str()
        .unwrap()
        .contains("attempt 5 of 5"));
    assert_eq!(
        sim.world.model_calls, 10,
        "5 attempts for each of the two turns"
    );
    assert!(sim.settled_frames().values().all(|n| *n == 1));
}

#[test]
fn a_cancel_during_the_model_call_drops_its_answer_and_the_next_turn_runs() {
    let mut sim = two_turns();
    let head = sim.commands["p1"].clone();
    sim.world.interjections.push((
        When::ModelCall(1),
        json!({"type": "cancel", "commandId": head}),
    ));
    sim.run_with_recovery(0);
    assert_eq!(sim.settlement("p1")["terminal"], "cancelled");
    assert_eq!(sim.settlement("p2")["answer"], "ok");
    let texts = transcript(&sim.messages());
    assert_eq!(
        texts,
        [
            ("user".to_owned(), "go".to_owned()),
            ("user".to_owned(), "next".to_owned()),
            ("assistant".to_owned(), "ok".to_owned()),
        ],
        "the cancelled turn appended nothing after its prompt"
    );
    assert!(sim.world.effects.is_empty());
    assert!(sim.settled_frames().values().all(|n| *n == 1));
}

#[test]
fn a_cancel_during_a_tool_call_closes_every_open_call_and_runs_nothing_more() {
    let mut sim = two_turns();
    let head = sim.commands["p1"].clone();
    sim.world.interjections.push((
        When::ToolCall(1),
        json!({"type": "cancel", "commandId": head}),
    ));
    sim.run_with_recovery(0);
    assert_eq!(sim.settlement("p1")["terminal"], "cancelled");
    let messages = sim.messages();
    let texts = transcript(&messages);
    assert_eq!(
        roles(&messages),
        ["user", "assistant", "tool", "tool", "user", "assistant"]
    );
    assert!(
        texts[2].1.starts_with("outcome unknown"),
        "the unsafe call had started: {}",
        texts[2].1
    );
    assert!(texts[3].1.starts_with("cancelled"), "{}", texts[3].1);
    assert_eq!(sim.world.effects, ["c1"]);
    assert_eq!(sim.world.tool_calls, 1, "the second call never ran");
}

#[test]
fn a_steer_sent_during_a_tool_step_joins_the_turn_after_its_results() {
    let mut sim = two_turns();
    sim.world.interjections.push((
        When::ToolCall(1),
        json!({"type": "prompt", "requestId": "st", "text": "also this", "delivery": "steer"}),
    ));
    sim.run_with_recovery(0);
    let texts = transcript(&sim.messages());
    let roles: Vec<&str> = texts.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "tool",
            "user",
            "assistant",
            "user",
            "assistant"
        ]
    );
    assert_eq!(
        texts[4].1, "also this",
        "the steer follows the step's results"
    );
    assert_eq!(texts[5].1, "done");
    let steer = sim.settlement("st");
    assert_eq!(steer["terminal"], "completed");
    assert_eq!(steer["answer"], "done", "the steer settles with its turn");
    assert_eq!(
        sim.world.model_calls, 3,
        "no extra model step for the steer"
    );
}

#[test]
fn the_gate_reads_the_grants_at_each_call_and_a_refusal_runs_nothing() {
    let mut sim = two_turns();
    sim.access = AccessConfig::parse(r#"{"grants": {"notes": "read"}}"#).unwrap();
    sim.run_with_recovery(0);
    let texts = transcript(&sim.messages());
    assert!(
        texts[2].1.starts_with("notes.add refused:") && texts[2].1.contains("needs `write`"),
        "{}",
        texts[2].1
    );
    assert_eq!(
        texts[3].1, r#"{"ran":"list"}"#,
        "read access lets `list` run"
    );
    assert!(sim.world.effects.is_empty(), "the refused write never ran");
    assert_eq!(sim.settlement("p1")["terminal"], "completed");
}

#[test]
fn a_tool_call_answered_without_running_ends_a_failed_span_when_traced() {
    let spans = |sim: &Sim| -> Vec<Value> {
        let table = sim
            .db
            .query(
                "SELECT 1 FROM sqlite_master WHERE name = 'shiitake_spans'",
                &[],
            )
            .unwrap();
        if table.is_empty() {
            return Vec::new();
        }
        sim.db
            .query("SELECT body FROM shiitake_spans ORDER BY seq", &[])
            .unwrap()
            .iter()
            .map(|r| serde_json::from_str(&r.text(0).unwrap()).unwrap())
            .collect()
    };
    for traced in [false, true] {
        let mut sim = two_turns();
        sim.policy = policy().with_traces(traced);
        sim.machine = Agent::new(sim.policy);
        // Only `list` is offered: the model's `add` is answered unrun.
        sim.toolset = toolset_of(&["notes.list"]);
        sim.run_with_recovery(0);
        assert!(sim.world.effects.is_empty(), "nothing was added");
        let names: Vec<String> = spans(&sim)
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect();
        if !traced {
            assert!(names.is_empty(), "untraced: no span");
            continue;
        }
        // The host times what runs (here nothing does: the simulated host
        // hands no spans); the driver writes the unrun call's.
        assert_eq!(names, ["execute_tool add"], "{names:?}");
        let span = &spans(&sim)[0];
        assert_eq!(span["status"]["code"], 2, "{span}");
        assert_eq!(sim.settlement("p1")["terminal"], "completed");
    }
}

#[test]
fn a_running_call_is_published_started_then_its_paced_progress_then_ended_before_its_message() {
    let mut sim = two_turns();
    sim.access = AccessConfig::parse(r#"{"grants": {"notes": "read"}}"#).unwrap();
    sim.run_with_recovery(0);
    // `add` is refused by its gate (run by the host, so still started and
    // ended, as an error); `list` runs.
    assert_eq!(
        sim.tool_events(),
        [
            "Started c1 add",
            r#"Progress c1 add {"n":1}"#,
            r#"Progress c1 add {"n":3}"#,
            "Ended c1 add error=true",
            "message c1",
            "Started c2 list",
            r#"Progress c2 list {"n":1}"#,
            r#"Progress c2 list {"n":3}"#,
            "Ended c2 list error=false",
            "message c2",
        ]
    );
}

#[test]
fn a_call_cancelled_while_it_runs_has_no_ended_frame() {
    let mut sim = two_turns();
    let head = sim.commands["p1"].clone();
    sim.world.interjections.push((
        When::ToolCall(1),
        json!({"type": "cancel", "commandId": head}),
    ));
    sim.run_with_recovery(0);
    // The cancel's closing messages say how both calls ended; the second
    // never started.
    assert_eq!(
        sim.tool_events(),
        [
            "Started c1 add",
            r#"Progress c1 add {"n":1}"#,
            r#"Progress c1 add {"n":3}"#,
            "message c1",
            "message c2",
        ]
    );
}

/// A Session whose tool turn (`go`) and a plain turn (`next`, admitted
/// into the idle Session: its turn is claimed) came before a retry of
/// `go`, queued behind `next`: the settling write of `next` claims it.
fn a_retry_behind_a_turn() -> (Sim, String) {
    let mut sim = Sim::new();
    let (status, json, _) = sim.request("POST", "/sessions", json!({"sessionId": "s"}));
    assert_eq!(status, 201, "{json}");
    sim.prompt("p1", "go", "followUp");
    assert_eq!(sim.run_with_recovery(0), 0);
    let go = sim.messages()[0]["entryId"].as_str().unwrap().to_owned();
    sim.prompt("p2", "next", "followUp");
    let (status, json, _) = sim.command(json!({"type": "retry", "requestId": "r1", "entryId": go}));
    assert_eq!(status, 200, "{json}");
    (sim, go)
}

#[test]
fn a_retry_crashed_after_every_durable_transition_answers_once_on_its_own_branch() {
    let clean = {
        let (mut sim, _) = a_retry_behind_a_turn();
        let before = sim.db.clock.commits.get();
        sim.run_with_recovery(0);
        sim.db.clock.commits.get() - before
    };
    assert!(
        clean >= 5,
        "a plain turn and a retried tool turn take {clean} transitions"
    );
    for at in 0..=clean {
        let (mut sim, go) = a_retry_behind_a_turn();
        sim.crash_after(at);
        let crashes = sim.run_with_recovery(1);
        let context = format!("crash after transition {at} of {clean}");
        assert_eq!(crashes, usize::from(at < clean), "{context}");
        // The selected branch is the retry's: the retried prompt, then the
        // tool turn its model call ran again from the prompt alone (a
        // context holding the old turn would have been answered `done`).
        let messages = sim.messages();
        assert_eq!(roles(&messages), TWO_TURNS[..5], "{context}");
        assert_eq!(messages[0]["entryId"], go.as_str(), "{context}");
        assert_eq!(messages[1]["parentEntryId"], go.as_str(), "{context}");
        assert_eq!(
            messages[1]["branch"],
            json!({"index": 2, "count": 2}),
            "{context}"
        );
        assert_eq!(
            messages[1]["commandId"],
            sim.commands["r1"].as_str(),
            "{context}"
        );
        let ids: HashSet<&str> = messages
            .iter()
            .map(|m| m["entryId"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), messages.len(), "{context}: a message repeats");
        let results: Vec<&str> = messages
            .iter()
            .filter_map(|m| m["toolCallId"].as_str())
            .collect();
        assert_eq!(results, ["c1", "c2"], "{context}: one result per call");
        // The old answer stays, beside it: the prompt's two children.
        let (status, children, _) = sim.request(
            "GET",
            &format!("/sessions/s/branches?entryId={go}"),
            Value::Null,
        );
        assert_eq!(status, 200, "{children}");
        assert_eq!(children["count"], 2, "{context}");
        for request in ["p2", "r1"] {
            assert_eq!(
                sim.settlement(request)["terminal"],
                "completed",
                "{context}"
            );
        }
        let settled = sim.settled_frames();
        assert!(settled.values().all(|n| *n == 1), "{context}: {settled:?}");
        let branch_frames = sim
            .world
            .events
            .iter()
            .filter(|e| matches!(e, Event::Frame(Frame::Branch { entry_id }) if entry_id.as_deref() == Some(go.as_str())))
            .count();
        assert_eq!(
            branch_frames, 1,
            "{context}: one branch frame, at the claim"
        );
        // `add` ran once per turn at most (outcome unknown on a resumed call).
        assert!(sim.world.effects.len() <= 2, "{context}");
    }
}

// Compaction (`run::compaction`): a `compact` command, automatic compaction
// at the model's stated window, and a provider's refusal as too long.

/// The compaction entries of the transcript.
fn compactions(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["role"] == "compaction")
        .cloned()
        .collect()
}

/// Whether a model context leads with a summary saying `summary`.
fn leads_with_summary(context: &[ModelItem], summary: &str) -> bool {
    matches!(context.first(), Some(ModelItem::Message(m))
        if m.role == Role::User && m.text.contains(&format!("<summary>\n{summary}\n</summary>")))
}

/// A tool turn (`go`), a `compact` command and a plain turn, queued.
fn compact_between() -> Sim {
    let mut sim = Sim::new();
    let (status, json, _) = sim.request("POST", "/sessions", json!({"sessionId": "s"}));
    assert_eq!(status, 201, "{json}");
    sim.prompt("p1", "go", "followUp");
    let (status, json, _) = sim.command(json!({
        "type": "compact", "requestId": "c1", "instructions": "keep the notes"
    }));
    assert_eq!(status, 200, "{json}");
    sim.prompt("p2", "next", "followUp");
    sim
}

const COMPACT_BETWEEN: [&str; 8] = [
    "user",
    "assistant",
    "tool",
    "tool",
    "assistant",
    "compaction",
    "user",
    "assistant",
];

/// Checks a run of [`compact_between`]: one summary standing for the first
/// turn, the last turn seeing it and not the first turn's messages, every
/// command settled once.
fn check_compact_between(sim: &mut Sim, context: &str) {
    let messages = sim.messages();
    assert_eq!(roles(&messages), COMPACT_BETWEEN, "{context}");
    let entry = &compactions(&messages)[0];
    assert_eq!(entry["text"], "summary: tools were called", "{context}");
    assert_eq!(entry["instructions"], "keep the notes", "{context}");
    assert_eq!(
        entry["commandId"].as_str(),
        Some(sim.commands["c1"].as_str())
    );
    assert_eq!(
        entry["compacted"],
        json!({
            "from": messages[0]["entryId"], "through": messages[4]["entryId"],
            "messages": 5, "trigger": "command"
        }),
        "{context}"
    );
    for request in ["p1", "c1", "p2"] {
        assert_eq!(
            sim.settlement(request)["terminal"],
            "completed",
            "{context}"
        );
    }
    let settled = sim.settled_frames();
    assert_eq!(settled.len(), 3, "{context}");
    assert!(settled.values().all(|n| *n == 1), "{context}: {settled:?}");
    // The last turn sees the summary, then its prompt: none of the
    // summarised messages.
    let last = sim.world.contexts.last().unwrap();
    assert!(
        leads_with_summary(last, "summary: tools were called"),
        "{context}: {last:?}"
    );
    assert_eq!(last.len(), 2, "{context}: {last:?}");
    assert!(matches!(&last[1], ModelItem::Message(m) if m.text == "next"));
}

#[test]
fn a_compact_command_runs_in_its_place_and_later_turns_see_its_summary() {
    let mut sim = compact_between();
    assert_eq!(sim.run_with_recovery(0), 0);
    check_compact_between(&mut sim, "no crash");
    assert_eq!(sim.world.summary_calls, 1);
    let compact = sim.settlement("c1");
    assert_eq!(
        compact["answer"],
        Value::Null,
        "the entry holds the summary"
    );
    assert_eq!(
        compact["usage"],
        json!({"inputTokens": 3, "outputTokens": 1})
    );
    // The older messages stay stored and readable.
    let texts = transcript(&sim.messages());
    assert_eq!(texts[0].1, "go");
    assert_eq!(texts[4].1, "done");
}

#[test]
fn a_crash_after_every_transition_of_a_compaction_compacts_once_and_settles_each_command_once() {
    let clean = {
        let mut sim = compact_between();
        let before = sim.db.clock.commits.get();
        sim.run_with_recovery(0);
        sim.db.clock.commits.get() - before
    };
    for at in 0..=clean {
        let mut sim = compact_between();
        sim.crash_after(at);
        let crashes = sim.run_with_recovery(1);
        let context = format!("crash after transition {at} of {clean}");
        assert_eq!(crashes, usize::from(at < clean), "{context}");
        check_compact_between(&mut sim, &context);
        assert!(sim.world.summary_calls <= 2, "{context}");
    }
}

/// A tool turn (`go`) and a plain turn, with a window so small that the
/// tool turn's second call and the plain turn's call each compact first
/// (the model reports 64 tokens a byte).
fn windowed_turns() -> Sim {
    let mut sim = two_turns();
    sim.tokens_per_byte = 64;
    // Compact past 102 tokens: the tool turn's first call estimates 0 (its
    // prompt's 2 bytes), its second 135 (128 reported, 1 answered, 6 of
    // results), after its summary 6 (its 26 bytes); the plain turn's call
    // thousands (the tool turn's last answer reported).
    sim.window = Some(ContextWindow {
        tokens: 1_024,
        trigger_percent: 10,
    });
    sim
}

const WINDOWED_TURNS: [&str; 9] = [
    "user",
    "assistant",
    "tool",
    "tool",
    "compaction",
    "assistant",
    "user",
    "compaction",
    "assistant",
];

fn check_windowed_turns(sim: &mut Sim, context: &str) {
    let messages = sim.messages();
    assert_eq!(roles(&messages), WINDOWED_TURNS, "{context}");
    let entries = compactions(&messages);
    assert_eq!(entries.len(), 2, "{context}: compacted once per call due");
    assert_eq!(
        entries[0]["compacted"],
        json!({
            "from": messages[0]["entryId"], "through": messages[3]["entryId"],
            "messages": 4, "trigger": "window"
        }),
        "{context}"
    );
    assert_eq!(
        entries[1]["compacted"],
        json!({
            "from": messages[5]["entryId"], "through": messages[6]["entryId"],
            "messages": 2, "previous": entries[0]["entryId"], "trigger": "window"
        }),
        "{context}"
    );
    assert_eq!(transcript(&messages)[5].1, "done", "{context}");
    for request in ["p1", "p2"] {
        assert_eq!(
            sim.settlement(request)["terminal"],
            "completed",
            "{context}"
        );
    }
    assert!(sim.settled_frames().values().all(|n| *n == 1), "{context}");
    assert!(sim.world.effects.len() <= 1, "{context}");
    // After its mid-turn compaction the tool turn still sees its prompt,
    // after the summary; the plain turn sees the second summary and its own.
    let seen: Vec<&Vec<ModelItem>> = sim
        .world
        .contexts
        .iter()
        .filter(|c| leads_with_summary(c, "summary: tools were called"))
        .collect();
    let go = seen
        .last()
        .unwrap_or_else(|| panic!("{context}: no call after the summary"));
    assert!(
        matches!(&go[1..], [ModelItem::Message(m)] if m.text == "go"),
        "{context}: {go:?}"
    );
    let last = sim.world.contexts.last().unwrap();
    assert!(leads_with_summary(last, "summary"), "{context}: {last:?}");
    assert!(
        matches!(&last[1..], [ModelItem::Message(m)] if m.text == "next"),
        "{context}"
    );
}

#[test]
fn past_the_windows_trigger_a_turn_compacts_before_its_call_and_keeps_its_prompt() {
    let mut sim = windowed_turns();
    assert_eq!(sim.run_with_recovery(0), 0);
    check_windowed_turns(&mut sim, "no crash");
    assert_eq!(sim.world.summary_calls, 2);
    // The turn's usage counts its summary call.
    let usage = &sim.settlement("p1")["usage"];
    assert_eq!(usage["outputTokens"], 3, "{usage}");
    // Without a window stated, nothing compacts.
    let mut plain = two_turns();
    plain.tokens_per_byte = 64;
    plain.run_with_recovery(0);
    assert_eq!(roles(&plain.messages()), TWO_TURNS);
    assert_eq!(plain.world.summary_calls, 0);
}

#[test]
fn a_crash_after_every_transition_of_an_automatic_compaction_never_compacts_twice() {
    let clean = {
        let mut sim = windowed_turns();
        let before = sim.db.clock.commits.get();
        sim.run_with_recovery(0);
        sim.db.clock.commits.get() - before
    };
    for at in 0..=clean {
        let mut sim = windowed_turns();
        sim.crash_after(at);
        let crashes = sim.run_with_recovery(1);
        let context = format!("crash after transition {at} of {clean}");
        assert_eq!(crashes, usize::from(at < clean), "{context}");
        check_windowed_turns(&mut sim, &context);
    }
}

/// Two plain turns; the provider refuses the model calls numbered `refused`
/// as too long (Anthropic's body).
fn refused(refused: &[usize]) -> Sim {
    let mut sim = Sim::new();
    let (status, json, _) = sim.request("POST", "/sessions", json!({"sessionId": "s"}));
    assert_eq!(status, 201, "{json}");
    sim.prompt("p1", "hello", "followUp");
    sim.prompt("p2", "again", "followUp");
    sim.world.too_long_calls = refused.to_vec();
    sim
}

#[test]
fn a_refusal_as_too_long_compacts_and_retries_once() {
    let mut sim = refused(&[2]);
    sim.run_with_recovery(0);
    assert_eq!(sim.settlement("p2")["terminal"], "completed");
    let messages = sim.messages();
    assert_eq!(
        roles(&messages),
        ["user", "assistant", "user", "compaction", "assistant"]
    );
    assert_eq!(compactions(&messages)[0]["compacted"]["trigger"], "refusal");
    assert_eq!(sim.world.summary_calls, 1);
    let last = sim.world.contexts.last().unwrap();
    assert!(leads_with_summary(last, "summary"), "{last:?}");
    assert!(matches!(&last[1..], [ModelItem::Message(m)] if m.text == "again"));
    // The refused call counted in a write of its own, the summary call in
    // the compaction's.
    let totals = sim.usage_totals();
    assert_eq!(sim.world.model_calls, 4);
    assert_eq!(
        (&totals["calls"], &totals["failed"]),
        (&json!(4), &json!(1))
    );
}

#[test]
fn a_second_refusal_fails_the_turn_as_before() {
    let mut sim = refused(&[2, 4]);
    sim.run_with_recovery(0);
    let failed = sim.settlement("p2");
    assert_eq!(failed["terminal"], "failed");
    assert!(
        failed["diagnostic"]
            .as_str()
            .unwrap()
            .contains("prompt is too long"),
        "{failed}"
    );
    assert_eq!(sim.world.model_calls, 4, "one compaction, one retry");
    assert_eq!(compactions(&sim.messages()).len(), 1);
    let totals = sim.usage_totals();
    assert_eq!(
        (&totals["calls"], &totals["failed"]),
        (&json!(4), &json!(2))
    );
}

#[test]
fn a_compaction_with_nothing_to_compact_settles_without_a_model_call() {
    let mut sim = Sim::new();
    sim.request("POST", "/sessions", json!({"sessionId": "s"}));
    let (status, json, _) = sim.command(json!({"type": "compact", "requestId": "c1"}));
    assert_eq!(status, 200, "{json}");
    sim.run_with_recovery(0);
    assert_eq!(sim.settlement("c1")["terminal"], "completed");
    assert_eq!(sim.world.model_calls, 0);
    // A second compaction right after a first has only the summary.
    sim.prompt("p1", "hello", "followUp");
    for request in ["c2", "c3"] {
        sim.command(json!({"type": "compact", "requestId": request}));
    }
    sim.run_with_recovery(0);
    assert_eq!(sim.world.summary_calls, 1);
    assert_eq!(roles(&sim.messages()), ["user", "assistant", "compaction"]);
    assert_eq!(sim.settlement("c3")["terminal"], "completed");
}

#[test]
fn a_queued_compaction_is_no_latest_pending_prompt_and_is_cancelled_like_one() {
    let mut sim = Sim::new();
    sim.request("POST", "/sessions", json!({"sessionId": "s"}));
    sim.prompt("p1", "hello", "followUp"); // claimed at admission: running
    sim.command(json!({"type": "compact", "requestId": "c1", "instructions": "short"}));
    let latest = |sim: &mut Sim| {
        sim.request("GET", "/sessions/s/pending/latest", Value::Null)
            .1
    };
    assert_eq!(
        latest(&mut sim),
        Value::Null,
        "a compaction is never returned"
    );
    let (_, page, _) = sim.request("GET", "/sessions/s", Value::Null);
    assert_eq!(page["pending"][0]["type"], "compact");
    assert_eq!(page["pending"][0]["text"], "short");
    sim.prompt("p2", "steer me", "steer");
    assert_eq!(latest(&mut sim)["requestId"], "p2");
    // A steer never joins a compaction; the compaction is cancelled as
    // queued work is, answering its instructions.
    let c1 = sim.commands["c1"].clone();
    let (status, json, _) = sim.command(json!({"type": "cancel", "commandId": c1}));
    assert_eq!(status, 200, "{json}");
    assert_eq!(
        json,
        json!({"status": "cancelled", "commandId": c1, "text": "short"})
    );
    sim.run_with_recovery(0);
    assert_eq!(sim.settlement("c1")["terminal"], "cancelled");
    assert_eq!(sim.world.summary_calls, 0);
    assert!(compactions(&sim.messages()).is_empty());
}

impl Sim {
    /// `GET /usage`'s totals.
    fn usage_totals(&mut self) -> Value {
        let (status, json, _) = self.request("GET", "/usage", Value::Null);
        assert_eq!(status, 200, "{json}");
        json["totals"].clone()
    }
}

/// The usage ledger counts each model call once whatever the crash point:
/// a call whose outcome was recorded with its tokens, a call a crash cut
/// off as `unknown` (no tokens) by the claim that resumes its turn.
#[test]
fn the_usage_ledger_counts_each_model_call_once_at_every_crash_point() {
    let clean = {
        let mut sim = two_turns();
        let before = sim.db.clock.commits.get();
        sim.run_with_recovery(0);
        let totals = sim.usage_totals();
        assert_eq!(sim.world.model_calls, 3);
        assert_eq!(totals["calls"], 3);
        assert_eq!(totals["answered"], 3);
        assert_eq!(totals["inputTokens"], 9, "3 a call, as the model reported");
        assert_eq!(totals["outputTokens"], 3);
        sim.db.clock.commits.get() - before
    };
    let mut cut = 0;
    for at in 0..=clean {
        let mut sim = two_turns();
        sim.crash_after(at);
        sim.run_with_recovery(1);
        let context = format!("crash after transition {at} of {clean}");
        let totals = sim.usage_totals();
        let calls = sim.world.model_calls as u64;
        assert_eq!(totals["calls"], calls, "{context}: {totals}");
        let unknown = totals["unknown"].as_u64().unwrap();
        assert!(unknown <= 1, "{context}: {totals}");
        assert_eq!(totals["answered"], calls - unknown, "{context}");
        assert_eq!(totals["inputTokens"], 3 * (calls - unknown), "{context}");
        cut += unknown;
    }
    assert!(
        cut >= 3,
        "the crash cut each of the 3 calls somewhere: {cut}"
    );
}

#[test]
fn the_usage_ledger_counts_failed_attempts_and_a_cancelled_call() {
    let mut sim = two_turns();
    sim.world.failing_model_calls = 1;
    sim.run_with_recovery(0);
    let totals = sim.usage_totals();
    assert_eq!(sim.world.model_calls, 4);
    assert_eq!(
        (&totals["calls"], &totals["failed"]),
        (&json!(4), &json!(1))
    );
    assert_eq!(totals["inputTokens"], 9, "the failed call reported none");

    let mut sim = two_turns();
    let head = sim.commands["p1"].clone();
    sim.world.interjections.push((
        When::ModelCall(1),
        json!({"type": "cancel", "commandId": head}),
    ));
    sim.run_with_recovery(0);
    let totals = sim.usage_totals();
    assert_eq!(sim.world.model_calls, 2);
    assert_eq!(
        (&totals["calls"], &totals["unknown"]),
        (&json!(2), &json!(1))
    );
    let (status, json, _) = sim.request("GET", "/usage?groupBy=session", Value::Null);
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["groups"][0]["key"], "s");
    assert_eq!(json["groups"][0]["calls"], 2);
    for bad in [
        "groupBy=week",
        "from=x",
        "from=5&to=4",
        "limit=0",
        "cursor=s",
        "since=1",
        "sessionId=",
        "sessionId=a%20b",
        &format!("sessionId={}", "s".repeat(129)),
    ] {
        let (status, json, _) = sim.request("GET", &format!("/usage?{bad}"), Value::Null);
        let code = &json["error"]["code"];
        assert_eq!((status, code), (400, &json!("invalid_query")), "{bad}");
        let named = bad.split('=').next().unwrap();
        let message = json["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{bad}: {message}");
    }
}

// Budgets (`budget.rs`): a call its budget cannot cover pauses the turn.

/// Two turns (`two_turns`) under these configured budgets.
fn budgeted(limits: Limits) -> Sim {
    let mut sim = budgeted_tool_turn(limits);
    sim.prompt("p2", "next", "followUp");
    sim
}

/// One tool turn (two model calls: 26 tokens estimated for the first, its
/// tools' text included; 4 reported a call) under these budgets.
fn budgeted_tool_turn(limits: Limits) -> Sim {
    let mut sim = Sim::new();
    sim.policy = policy().with_budget(limits);
    sim.machine = Agent::new(sim.policy);
    let (status, json, _) = sim.request("POST", "/sessions", json!({"sessionId": "s"}));
    assert_eq!(status, 201, "{json}");
    sim.prompt("p1", "go", "followUp");
    sim
}

impl Sim {
    fn get(&mut self, path: &str) -> Value {
        let (status, json, _) = self.request("GET", path, Value::Null);
        assert_eq!(status, 200, "{path}: {json}");
        json
    }

    /// Tokens the provider reported for the Agent's calls (the ledger).
    fn reported(&mut self) -> u64 {
        let totals = self.usage_totals();
        totals["inputTokens"].as_u64().unwrap() + totals["outputTokens"].as_u64().unwrap()
    }

    fn paused_frames(&self) -> Vec<Value> {
        self.world
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Frame(f @ Frame::Paused { .. }) => Some(serde_json::to_value(f).unwrap()),
                _ => None,
            })
            .collect()
    }
}

#[test]
fn a_session_budget_pauses_a_turn_before_the_call_it_cannot_cover_and_a_raise_resumes_it() {
    let mut sim = budgeted(Limits {
        daily: None,
        session: Some(30),
    });
    sim.run_with_recovery(0);
    // The first call (26 estimated, 4 reported) ran; the next would not
    // fit in the 26 left.
    assert_eq!(sim.world.model_calls, 1);
    let paused = sim.paused_frames();
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert_eq!(paused[0]["reason"], "budget_reached");
    assert_eq!(paused[0]["budget"]["scope"], "session");
    assert_eq!(paused[0]["budget"]["tokens"], 30);
    assert_eq!(paused[0]["budget"]["spent"], 4);
    let needs = paused[0]["budget"]["needs"].as_u64().unwrap();
    assert!(
        needs >= 26,
        "the tools and the tool step's results: {needs}"
    );
    let read = sim.get("/sessions/s");
    let running = &read["running"];
    assert_eq!(running["commandId"], json!(sim.commands["p1"]));
    assert_eq!(running["paused"]["reason"], "budget_reached");
    assert_eq!(running["paused"]["budget"], paused[0]["budget"]);
    let inbox = sim.get("/inbox");
    assert_eq!(inbox["sessions"][0]["state"], "needs_you", "{inbox}");
    assert_eq!(inbox["sessions"][0]["paused"]["budget"]["scope"], "session");
    let budget = sim.get("/sessions/s/budget");
    assert_eq!(
        (&budget["tokens"], &budget["set"], &budget["spent"]),
        (&json!(30), &json!(false), &json!(4)),
        "{budget}"
    );
    assert_eq!(sim.reported(), 4, "the ledger agrees: nothing in flight");

    // Nothing runs while it stays paused, however often the loop wakes.
    sim.run_with_recovery(0);
    assert_eq!(sim.world.model_calls, 1);

    let (status, json, _) = sim.request("PUT", "/sessions/s/budget", json!({"tokens": 1000}));
    assert_eq!(status, 200, "{json}");
    assert_eq!(
        (&json["tokens"], &json["set"]),
        (&json!(1000), &json!(true))
    );
    sim.run_with_recovery(0);
    assert_eq!(
        sim.world.model_calls, 3,
        "the paused call, then the next turn's"
    );
    for request in ["p1", "p2"] {
        let settlement = sim.settlement(request);
        assert_eq!(settlement["terminal"], "completed", "{settlement}");
    }
    let started: Vec<u32> = sim
        .world
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Frame(Frame::Started {
                command_id,
                attempt,
            }) if *command_id == sim.commands["p1"] => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(started, [1, 1], "resumed at the attempt it held");
    assert_eq!(sim.usage_totals()["unknown"], 0, "a pause is no call");
    let spent = sim.get("/sessions/s/budget")["spent"].as_u64().unwrap();
    assert_eq!(spent, sim.reported(), "each call charged what it reported");
    assert!(sim.get("/sessions/s")["running"].is_null());
    assert_ne!(sim.get("/inbox")["sessions"][0]["state"], "needs_you");
}

#[test]
fn a_paused_turn_is_cancelled_like_any_other_and_charges_nothing() {
    let mut sim = budgeted(Limits {
        daily: None,
        session: Some(30),
    });
    sim.run_with_recovery(0);
    assert_eq!(sim.paused_frames().len(), 1);
    let head = sim.commands["p1"].clone();
    let (status, json, _) = sim.command(json!({"type": "cancel", "commandId": head}));
    assert_eq!(status, 200, "{json}");
    sim.run_with_recovery(0);
    assert_eq!(sim.settlement("p1")["terminal"], "cancelled");
    // The next turn pauses at its first call in turn: 4 spent + its
    // estimate reach 30.
    assert_eq!(sim.paused_frames().len(), 2);
    assert_eq!(sim.world.model_calls, 1);
    let (status, json, _) = sim.command(json!({"type": "abort"}));
    assert_eq!(status, 200, "{json}");
    sim.run_with_recovery(0);
    assert_eq!(sim.settlement("p2")["terminal"], "cancelled");
    assert_eq!(sim.usage_totals()["unknown"], 0, "no call was cut off");
    assert_eq!(sim.get("/sessions/s/budget")["spent"], 4);
    assert!(sim.get("/sessions/s/budget")["paused"].is_null());
    assert_ne!(sim.get("/inbox")["sessions"][0]["state"], "needs_you");
}

#[test]
fn the_agents_daily_budget_resumes_a_paused_turn_the_next_utc_day() {
    // What the tool step's call needs (it pauses with a budget just over
    // the first call's 26).
    let mut probe = budgeted_tool_turn(Limits {
        daily: None,
        session: Some(27),
    });
    probe.run_with_recovery(0);
    let needs = probe.paused_frames()[0]["budget"]["needs"]
        .as_u64()
        .unwrap();
    // A day's budget that holds either call alone, not both.
    let daily = needs + 2;
    let mut sim = budgeted_tool_turn(Limits {
        daily: Some(daily),
        session: None,
    });
    sim.run_with_recovery(0);
    let paused = sim.paused_frames();
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert_eq!(paused[0]["budget"]["scope"], "agent");
    assert_eq!(paused[0]["budget"]["spent"], 4);
    assert!(
        sim.now_ms >= budget::DAY_MS,
        "the alarm woke the turn at midnight"
    );
    assert_eq!(sim.settlement("p1")["terminal"], "completed");
    assert_eq!(sim.world.model_calls, 2);
    let agent = sim.get("/budget");
    assert_eq!(
        (&agent["tokens"], &agent["set"], &agent["spent"]),
        (&json!(daily), &json!(false), &json!(4)),
        "today's spend: the second call's"
    );
    assert_eq!(
        agent["resetsAt"],
        (budget::day_of(sim.now_ms) + 1) * budget::DAY_MS
    );
}

/// With a budget, a crash after any durable transition settles each
/// command once and never charges less than the provider reported: a call
/// a crash cut off keeps its estimate charged.
#[test]
fn a_crash_after_every_durable_transition_keeps_the_budget_counters_whole() {
    let limits = Limits {
        daily: Some(1_000),
        session: Some(1_000),
    };
    let clean = {
        let mut sim = budgeted(limits);
        let before = sim.db.clock.commits.get();
        sim.run_with_recovery(0);
        let spent = sim.get("/sessions/s/budget")["spent"].as_u64().unwrap();
        assert_eq!(spent, sim.reported());
        assert_eq!(sim.get("/budget")["spent"], spent);
        sim.db.clock.commits.get() - before
    };
    for at in 0..=clean {
        let mut sim = budgeted(limits);
        sim.crash_after(at);
        sim.run_with_recovery(1);
        let context = format!("crash after transition {at} of {clean}");
        for request in ["p1", "p2"] {
            let settlement = sim.settlement(request);
            assert_eq!(
                settlement["terminal"], "completed",
                "{context}: {settlement}"
            );
        }
        let reported = sim.reported();
        let spent = sim.get("/sessions/s/budget")["spent"].as_u64().unwrap();
        let unknown = sim.usage_totals()["unknown"].as_u64().unwrap();
        assert!(spent >= reported, "{context}: {spent} < {reported}");
        if unknown == 0 {
            assert_eq!(spent, reported, "{context}");
        }
        assert_eq!(sim.get("/budget")["spent"], spent, "{context}");
    }
}

#[test]
fn budget_routes_refuse_what_is_not_a_budget() {
    let mut sim = two_turns();
    for body in [
        json!({}),
        json!({"tokens": -1}),
        json!({"tokens": 1.5}),
        json!({"tokens": "10"}),
        json!({"tokens": 1_000_000_000_000_001u64}),
        json!({"tokens": 5, "day": 1}),
        json!({"tokens": null}),
    ] {
        let (status, json, _) = sim.request("PUT", "/budget", body.clone());
        assert_eq!(
            (status, &json["error"]["code"]),
            (400, &json!("invalid_request")),
            "{body}"
        );
    }
    let (status, json, _) = sim.request("PUT", "/sessions/nope/budget", json!({"tokens": 5}));
    assert_eq!(
        (status, &json["error"]["code"]),
        (404, &json!("session_not_found"))
    );
    let (status, _, _) = sim.request("POST", "/budget", json!({"tokens": 5}));
    assert_eq!(status, 405);
    // Nothing counted until a budget exists; then the ledger's calls are.
    sim.run_with_recovery(0);
    assert!(sim.get("/budget")["spent"].is_null());
    let (status, json, _) = sim.request("PUT", "/budget", json!({"tokens": 1_000_000}));
    assert_eq!(status, 200, "{json}");
    assert_eq!(
        (&json["tokens"], &json["set"], &json["spent"]),
        (&json!(1_000_000), &json!(true), &json!(sim.reported()))
    );
    assert_eq!(
        sim.get("/sessions/s/budget")["spent"],
        json!(sim.reported())
    );
    let (status, json, _) = sim.request("DELETE", "/budget", Value::Null);
    assert_eq!((status, &json["set"]), (200, &json!(false)));
}

/// `GET /usage?sessionId=`: the figures of one Session's calls, with its
/// groups and range; the ledger outlives the Session.
#[test]
fn the_usage_ledger_answers_for_one_session() {
    let mut sim = two_turns();
    sim.run_with_recovery(0);
    let all = sim.usage_totals();
    assert_eq!(all["calls"], 3);
    let mut of = |query: &str| {
        let (status, json, _) = sim.request("GET", &format!("/usage?{query}"), Value::Null);
        assert_eq!(status, 200, "{query}: {json}");
        json
    };
    let s = of("sessionId=s&groupBy=session");
    assert_eq!((&s["sessionId"], &s["totals"]), (&json!("s"), &all));
    assert_eq!(s["groups"][0]["key"], "s");
    assert_eq!(s["groups"].as_array().unwrap().len(), 1);
    let later = of("sessionId=s&from=9999999999999");
    assert_eq!(later["totals"]["calls"], 0, "with its range: {later}");
    let unknown = of("sessionId=t&groupBy=day");
    assert_eq!(unknown["totals"]["calls"], 0, "{unknown}");
    assert_eq!(unknown["groups"], json!([]));
    let (status, json, _) = sim.request("DELETE", "/sessions/s", Value::Null);
    assert!(status < 300, "{status}: {json}");
    let (status, json, _) = sim.request("GET", "/usage?sessionId=s", Value::Null);
    assert_eq!(
        (status, &json["totals"]),
        (200, &all),
        "the ledger outlives its Sessions"
    );
}
