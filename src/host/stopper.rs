//! A live turn's stop switch: the model call's and its tool calls' abort
//! controllers, held by the registry of live turns (`Inner::live`) so a
//! cancel can stop the turn. Its own module so the performers of a turn's
//! actions (`model.rs`, `tools.rs`) and the loop (`runner.rs`) share it
//! without importing each other.

use crate::limits::ADOPTED_CALLS_MAX;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use wasm_bindgen::prelude::*;

/// A live turn's handle: the registry keeps it so a cancel can stop it.
#[derive(Clone)]
pub struct Stopper {
    pub controller: web_sys::AbortController,
    stopped: Rc<Cell<bool>>,
    /// Tool calls' own controllers, aborted with the turn.
    children: Rc<RefCell<Vec<web_sys::AbortController>>>,
}

impl Stopper {
    pub fn new() -> Result<Self, JsValue> {
        Ok(Stopper {
            controller: web_sys::AbortController::new()?,
            stopped: Rc::new(Cell::new(false)),
            children: Rc::default(),
        })
    }

    pub fn stop(&self) {
        self.stopped.set(true);
        self.controller.abort();
        for child in self.children.borrow_mut().drain(..) {
            child.abort();
        }
    }

    /// Ties a tool call's controller to the turn: a stop aborts it too.
    pub fn adopt(&self, child: &web_sys::AbortController) {
        if self.is_stopped() {
            child.abort();
            return;
        }
        let mut children = self.children.borrow_mut();
        children.retain(|c| !c.signal().aborted());
        if children.len() >= ADOPTED_CALLS_MAX {
            children.remove(0);
        }
        children.push(child.clone());
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.get()
    }
}
