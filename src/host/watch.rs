//! Live observers: SSE watch streams, ACP prompt streams and settlement
//! long polls. In memory only (an observer reconnects after a restart and
//! gets a fresh snapshot); bounded in number and in backlog.

#[cfg(feature = "acp")]
use crate::acp::Follow;
use crate::limits::{
    WAITERS_MAX, WATCHERS_MAX, WATCHERS_PER_SESSION_MAX, WATCH_BACKLOG_BYTES_MAX,
    WATCH_BACKLOG_FRAMES_MAX,
};
use futures::channel::oneshot;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{spawn_local, JsFuture};

/// Builds a fresh snapshot (the Session read) of a Session, if it exists.
pub type SnapshotSource = Rc<dyn Fn(&str) -> Option<String>>;

/// What a watcher makes of the Session's events.
enum Kind {
    /// A Session watch: every event as published; after lag, a fresh
    /// snapshot from this source.
    Watch(SnapshotSource),
    /// An ACP prompt stream: each event through its [`Follow`] (the core's
    /// translation), closed once that is done; lag ends it.
    #[cfg(feature = "acp")]
    Acp(RefCell<Follow>),
}

struct Watcher {
    session_id: String,
    writer: web_sys::WritableStreamDefaultWriter,
    /// Writes the consumer has not taken yet, and their bytes.
    outstanding: Cell<usize>,
    outstanding_bytes: Cell<usize>,
    /// Frames were dropped; once drained it gets a fresh snapshot.
    lagging: Cell<bool>,
    closed: Cell<bool>,
    kind: Kind,
}

impl Watcher {
    fn send(self: &Rc<Self>, text: &str) {
        let bytes = text.len();
        self.outstanding.set(self.outstanding.get() + 1);
        self.outstanding_bytes
            .set(self.outstanding_bytes.get() + bytes);
        let promise = self
            .writer
            .write_with_chunk(&js_sys::Uint8Array::from(text.as_bytes()));
        let me = Rc::clone(self);
        spawn_local(async move {
            match JsFuture::from(promise).await {
                Ok(_) => {
                    me.outstanding.set(me.outstanding.get() - 1);
                    me.outstanding_bytes.set(me.outstanding_bytes.get() - bytes);
                    me.resync_if_drained();
                }
                // The client went away: closing a watch cancels nothing.
                Err(_) => me.closed.set(true),
            }
        });
    }

    /// Past either bound the watcher stops taking frames.
    fn full(&self) -> bool {
        self.outstanding.get() >= WATCH_BACKLOG_FRAMES_MAX
            || self.outstanding_bytes.get() >= WATCH_BACKLOG_BYTES_MAX
    }

    /// A lagging watcher that has taken everything gets a fresh snapshot at
    /// once, so it never sits on stale state waiting for the next change.
    // Without the `acp` feature a watch is the only kind.
    #[cfg_attr(not(feature = "acp"), allow(irrefutable_let_patterns))]
    fn resync_if_drained(self: &Rc<Self>) {
        let Kind::Watch(source) = &self.kind else {
            return;
        };
        if self.lagging.get() && self.outstanding.get() == 0 && !self.closed.get() {
            if let Some(snapshot) = source(&self.session_id) {
                self.lagging.set(false);
                self.send(&event("snapshot", &snapshot));
            }
        }
    }
}

type Watchers = RefCell<HashMap<String, Vec<Rc<Watcher>>>>;

pub struct Observers {
    watchers: Rc<Watchers>,
    waiters: RefCell<HashMap<String, Vec<oneshot::Sender<()>>>>,
    /// How often an open stream gets an SSE comment (`WATCH_HEARTBEAT_MS`
    /// or less).
    heartbeat_ms: u64,
    /// Whether the heartbeat loop runs (while any watcher is open).
    beating: Rc<Cell<bool>>,
}

/// Too many observers: the caller answers 429.
pub struct Full;

impl Observers {
    pub fn new(heartbeat_ms: u64) -> Self {
        Observers {
            watchers: Rc::default(),
            waiters: RefCell::default(),
            heartbeat_ms,
            beating: Rc::default(),
        }
    }

    /// The Sessions someone watches now.
    pub fn watched_sessions(&self) -> Vec<String> {
        self.prune();
        self.watchers.borrow().keys().cloned().collect()
    }

    /// Opens a watch of `session_id` whose first event is `snapshot`.
    pub fn watch(
        &self,
        session_id: &str,
        snapshot: &str,
        source: SnapshotSource,
    ) -> Result<Result<web_sys::Response, Full>, JsValue> {
        self.open(
            session_id,
            Kind::Watch(source),
            &[event("snapshot", snapshot)],
        )
    }

    /// Opens an ACP prompt stream of `follow`'s Session (a watcher under the
    /// same bounds) whose first events are `first`.
    #[cfg(feature = "acp")]
    pub fn follow(
        &self,
        follow: Follow,
        first: &[String],
    ) -> Result<Result<web_sys::Response, Full>, JsValue> {
        let session_id = follow.session_id().to_owned();
        let first: Vec<String> = first.iter().map(|m| acp_event(m)).collect();
        self.open(&session_id, Kind::Acp(RefCell::new(follow)), &first)
    }

    fn open(
        &self,
        session_id: &str,
        kind: Kind,
        first: &[String],
    ) -> Result<Result<web_sys::Response, Full>, JsValue> {
        self.prune();
        let mut all = self.watchers.borrow_mut();
        let total: usize = all.values().map(Vec::len).sum();
        let here = all.get(session_id).map_or(0, Vec::len);
        if total >= WATCHERS_MAX || here >= WATCHERS_PER_SESSION_MAX {
            return Ok(Err(Full));
        }
        let pipe = web_sys::TransformStream::new()?;
        let watcher = Rc::new(Watcher {
            session_id: session_id.to_owned(),
            writer: pipe.writable().get_writer()?,
            outstanding: Cell::new(0),
            outstanding_bytes: Cell::new(0),
            lagging: Cell::new(false),
            closed: Cell::new(false),
            kind,
        });
        for text in first {
            watcher.send(text);
        }
        // The reader cancelling (the client went away, or the shim dropped
        // the stream) closes the watcher at once, not at its next frame.
        let closing = JsFuture::from(watcher.writer.closed());
        let gone = Rc::clone(&watcher);
        spawn_local(async move {
            let _ = closing.await;
            gone.closed.set(true);
        });
        all.entry(session_id.to_owned()).or_default().push(watcher);
        drop(all);
        self.beat();
        let init = event_stream_init()?;
        Ok(Ok(
            web_sys::Response::new_with_opt_readable_stream_and_init(
                Some(&pipe.readable()),
                &init,
            )?,
        ))
    }

    /// An ACP stream that is answered whole at once (`first`, then the end).
    #[cfg(feature = "acp")]
    pub fn answered(first: &[String]) -> Result<web_sys::Response, JsValue> {
        let body: String = first.iter().map(|m| acp_event(m)).collect();
        let init = event_stream_init()?;
        web_sys::Response::new_with_opt_str_and_init(Some(&body), &init)
    }

    /// Sends one event to every watcher of the Session. A watcher more than
    /// `WATCH_BACKLOG_FRAMES_MAX` frames or `WATCH_BACKLOG_BYTES_MAX` bytes
    /// behind stops receiving frames and, once drained, gets a fresh
    /// snapshot instead of the backlog.
    /// Whether `session_id` has a watch or follow open (a frame nobody
    /// watches is not serialised).
    pub fn watched(&self, session_id: &str) -> bool {
        self.watchers.borrow().contains_key(session_id)
    }

    pub fn publish(&self, session_id: &str, name: &str, data: &str) {
        let watchers = match self.watchers.borrow().get(session_id) {
            Some(w) => w.clone(),
            None => return,
        };
        let text = event(name, data);
        for w in watchers
            .iter()
            .filter(|w| !w.closed.get() && !w.lagging.get())
        {
            match &w.kind {
                Kind::Watch(_) if w.full() => w.lagging.set(true),
                Kind::Watch(_) => w.send(&text),
                #[cfg(feature = "acp")]
                Kind::Acp(follow) => {
                    let mut follow = follow.borrow_mut();
                    let out = match w.full() {
                        true => vec![follow.overrun()],
                        false => follow.event(name, data),
                    };
                    for message in &out {
                        w.send(&acp_event(message));
                    }
                    if follow.done() {
                        // Queued writes go out before the close.
                        w.closed.set(true);
                        let _ = w.writer.close();
                    }
                }
            }
        }
    }

    /// Ends the watches of a deleted Session.
    pub fn close_session(&self, session_id: &str) {
        if let Some(watchers) = self.watchers.borrow_mut().remove(session_id) {
            for w in watchers {
                let _ = w.writer.close();
            }
        }
    }

    fn prune(&self) {
        prune(&self.watchers);
    }

    /// While any watcher is open, every `heartbeat_ms` sends an SSE comment
    /// to each one keeping up: a client that went away fails that write, so
    /// its place is freed within one beat, and no proxy sees a silent stream.
    fn beat(&self) {
        if self.beating.replace(true) {
            return;
        }
        let watchers = Rc::downgrade(&self.watchers);
        let beating = Rc::clone(&self.beating);
        let ms = self.heartbeat_ms;
        spawn_local(async move {
            loop {
                super::bindings::sleep(ms).await;
                let Some(watchers) = watchers.upgrade() else {
                    break;
                };
                prune(&watchers);
                let open: Vec<Rc<Watcher>> =
                    watchers.borrow().values().flatten().cloned().collect();
                if open.is_empty() {
                    break;
                }
                for w in open.iter().filter(|w| !w.lagging.get() && !w.full()) {
                    w.send(HEARTBEAT);
                }
            }
            beating.set(false);
        });
    }

    /// Registers a long poll for `command_id`'s settlement.
    pub fn wait(&self, command_id: &str) -> Result<oneshot::Receiver<()>, Full> {
        let mut waiters = self.waiters.borrow_mut();
        waiters.retain(|_, list| {
            list.retain(|tx| !tx.is_canceled());
            !list.is_empty()
        });
        if waiters.values().map(Vec::len).sum::<usize>() >= WAITERS_MAX {
            return Err(Full);
        }
        let (tx, rx) = oneshot::channel();
        waiters.entry(command_id.to_owned()).or_default().push(tx);
        Ok(rx)
    }

    /// Wakes the long polls of a settled command.
    pub fn settled(&self, command_id: &str) {
        if let Some(list) = self.waiters.borrow_mut().remove(command_id) {
            for tx in list {
                let _ = tx.send(());
            }
        }
    }
}

/// An SSE comment: every event-stream parser skips it.
const HEARTBEAT: &str = ": heartbeat\n\n";

fn prune(watchers: &Watchers) {
    watchers.borrow_mut().retain(|_, list| {
        list.retain(|w| !w.closed.get());
        !list.is_empty()
    });
}

fn event(name: &str, data: &str) -> String {
    // `data` is compact JSON: one line.
    format!("event: {name}\ndata: {data}\n\n")
}

/// One JSON-RPC message of an ACP stream (compact JSON: one line).
#[cfg(feature = "acp")]
fn acp_event(message: &str) -> String {
    format!("data: {message}\n\n")
}

/// The head of every event stream served: 200, `text/event-stream`, not
/// cached.
pub(super) fn event_stream_init() -> Result<web_sys::ResponseInit, JsValue> {
    let headers = web_sys::Headers::new()?;
    headers.set("content-type", "text/event-stream; charset=utf-8")?;
    headers.set("cache-control", "no-cache")?;
    let init = web_sys::ResponseInit::new();
    init.set_status(200);
    init.set_headers(&headers);
    Ok(init)
}
