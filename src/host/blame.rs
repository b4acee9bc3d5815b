//! Which Agent and Session a wasm trap belongs to.
//!
//! A Rust panic traps the wasm instance that every Durable Object of the
//! isolate shares; the shim (`js/do/recovery.mjs`) then resets it, which drops every
//! object's turns. So that only the code that trapped pays for it, the host
//! runs each entry point and each turn inside a [`Scope`], and the panic
//! hook, which runs before the trap, reports to the shim the scope that was
//! running and the turns every object held: live, or claimed and about to
//! start at the attempt they hold. The shim hands each object's fresh core
//! its turns to resume at their current attempt, except the trapping
//! Session's: that one counts a new attempt, so a Session whose calls keep
//! trapping settles `interrupted` alone. A trap outside any scope (or one
//! that is not a panic, such as running out of memory) blames no one in
//! particular, and every turn counts an attempt as after a crash.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use wasm_bindgen::prelude::*;

/// The code running now: an Agent (its Durable Object id), and the Session
/// whose turn it is, if any.
#[derive(Clone, Debug)]
pub struct Scope {
    pub agent: Rc<str>,
    pub session: Option<Rc<str>>,
}

/// The turns one object holds (live, or to start at the attempt they hold):
/// head -> (Session, its model call in flight).
type Heads = HashMap<String, (String, bool)>;

thread_local! {
    static CURRENT: RefCell<Option<Scope>> = const { RefCell::new(None) };
    static HELD: RefCell<HashMap<Rc<str>, Heads>> = RefCell::default();
    static REPORTER: RefCell<Option<js_sys::Function>> = const { RefCell::new(None) };
    static HOOKED: Cell<bool> = const { Cell::new(false) };
}

/// Registers the shim's trap reporter (called again after each reset) and
/// installs the panic hook that calls it with
/// `{message, agent, session, held: [[agent, head, session, calling], ...]}`
/// (`calling`: the turn's model call was in flight, so the reset cut it off).
#[wasm_bindgen(js_name = setTrapReporter)]
pub fn set_trap_reporter(reporter: js_sys::Function) {
    REPORTER.with(|r| *r.borrow_mut() = Some(reporter));
    if !HOOKED.with(|h| h.replace(true)) {
        std::panic::set_hook(Box::new(report));
    }
}

fn report(info: &std::panic::PanicHookInfo<'_>) {
    // Nothing here may panic again or wait on a borrow: `try_*` everywhere.
    let scope = CURRENT
        .try_with(|c| c.try_borrow().ok().and_then(|c| c.clone()))
        .ok()
        .flatten();
    let held: Vec<(String, String, String, bool)> = HELD
        .try_with(|l| {
            l.try_borrow()
                .map(|l| {
                    l.iter()
                        .flat_map(|(agent, heads)| {
                            heads.iter().map(move |(head, (session, calling))| {
                                (agent.to_string(), head.clone(), session.clone(), *calling)
                            })
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let report = serde_json::json!({
        "message": info.to_string(),
        "agent": scope.as_ref().map(|s| s.agent.to_string()),
        "session": scope.as_ref().and_then(|s| s.session.as_deref().map(str::to_owned)),
        "held": held,
    });
    let _ = REPORTER.try_with(|r| {
        if let Ok(reporter) = r.try_borrow() {
            if let Some(reporter) = reporter.as_ref() {
                let _ = reporter.call1(&JsValue::NULL, &JsValue::from_str(&report.to_string()));
            }
        }
    });
}

/// `agent` holds the turn of its Session `session` headed by `head`: it runs
/// here, or starts here at the attempt it holds.
pub fn hold(agent: &Rc<str>, head: &str, session: &str) {
    HELD.with(|l| {
        l.borrow_mut()
            .entry(Rc::clone(agent))
            .or_default()
            .insert(head.to_owned(), (session.to_owned(), false));
    });
}

/// The held turn `head` of `agent` has its model call in flight until the
/// returned guard drops (answered, failed, or the call's future dropped).
pub fn calling(agent: &Rc<str>, head: &str) -> Calling {
    set_calling(agent, head, true);
    Calling {
        agent: Rc::clone(agent),
        head: head.to_owned(),
    }
}

pub struct Calling {
    agent: Rc<str>,
    head: String,
}

impl Drop for Calling {
    fn drop(&mut self) {
        set_calling(&self.agent, &self.head, false);
    }
}

fn set_calling(agent: &Rc<str>, head: &str, on: bool) {
    HELD.with(|l| {
        if let Some((_, calling)) = l
            .borrow_mut()
            .get_mut(agent)
            .and_then(|heads| heads.get_mut(head))
        {
            *calling = on;
        }
    });
}

/// ... and no longer does (settled, stopped, stale, or handed to the next
/// turn).
pub fn release(agent: &Rc<str>, head: &str) {
    HELD.with(|l| {
        let mut held = l.borrow_mut();
        if let Some(heads) = held.get_mut(agent) {
            heads.remove(head);
            if heads.is_empty() {
                held.remove(agent);
            }
        }
    });
}

/// Makes `scope` current while this guard lives (a synchronous entry point).
pub struct Entered(Option<Scope>);

pub fn enter(scope: Scope) -> Entered {
    Entered(CURRENT.with(|c| c.replace(Some(scope))))
}

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// A future whose every poll runs in `scope`.
pub struct InScope<F> {
    scope: Scope,
    inner: Pin<Box<F>>,
}

pub fn scoped<F: Future>(scope: Scope, inner: F) -> InScope<F> {
    InScope {
        scope,
        inner: Box::pin(inner),
    }
}

impl<F: Future> Future for InScope<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _entered = enter(self.scope.clone());
        self.inner.as_mut().poll(cx)
    }
}
