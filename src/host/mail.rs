//! The delivery performer (seed: "Delegated replies"): carries the mail
//! this Agent owes (`crate::mail::due`: sends, and replies its settling
//! transitions staged) to the recipients' Durable Objects through the
//! shim's fleet transport, and records each receipt or failure
//! (`mail::delivered`, `mail::failed`: the core schedules retries).
//!
//! Concurrent with the turns and never blocking them (like `jobs.rs`):
//! one pass at a time, each pass delivering at most
//! `MAIL_DELIVERIES_PER_PASS_MAX` mails at once, each bounded by
//! `FLEET_CALL_TIMEOUT_MS`; at most `MAIL_PASSES_PER_WAKE_MAX` passes per
//! wake, then the alarm continues. Woken by every alarm, by `agents.send`
//! (which first tries its own mail at once), and after every transition
//! that may have staged mail (a settlement, a received mail, a recall, a
//! deleted Session). The alarm's deadline includes `mail::next_deadline`,
//! so owed deliveries survive restart and eviction: a starting instance
//! arms the alarm for them.
//!
//! Nothing here is needed to rebuild the performer: owed mail and its
//! retries are rows; the set of mails in flight only keeps this instance
//! from carrying one mail twice at once (the recipient answers a repeated
//! delivery with the same receipt anyway).

use super::bindings::{self, log_error, log_warn};
use super::fleet::{peer_call, HostFleet, Peer};
use super::{blame, Inner};
use crate::error::ApiError;
use crate::limits::FLEET_CALL_TIMEOUT_MS;
#[cfg(feature = "fleet")]
use crate::limits::MAIL_DELIVERIES_PER_PASS_MAX;
use crate::mail::{self, Mail, Receipt, SendState};
use crate::run::schedule::Event;
use std::cell::RefCell;
use std::collections::HashSet;

/// Due mails `agents.send`'s immediate attempt looks through for its own.
#[cfg(feature = "fleet")]
const MAIL_DUE_SCAN_MAX: usize = 1_024;

/// The performer in this instance (whether a pass runs is the schedule's,
/// `run::schedule`).
#[derive(Default)]
pub struct MailRun {
    /// Keys of the mails being delivered now.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))] // a lean build carries no mail
    in_flight: RefCell<HashSet<String>>,
}

impl Inner {
    /// Whether this instance carries mail (a usable fleet whose host
    /// delivers mail: `fleet().namespace` or `fleet().deliver`).
    fn mail_enabled(&self) -> bool {
        self.fleet().is_some_and(|f| f.offer.mail)
    }

    /// The earliest owed delivery, for the one alarm.
    pub(super) fn mail_deadline(&self) -> Result<Option<i64>, ApiError> {
        if !self.mail_enabled() || self.machine.borrow().schedule().mail_running() {
            // A running pass arms the alarm when it ends.
            return Ok(None);
        }
        mail::next_deadline(self.store())
    }

    /// After a transition that may have staged mail: a pass when some is
    /// due now (the later ones are on the alarm).
    pub(super) fn mail_after_transition(&self) {
        if !self.mail_enabled() {
            return;
        }
        match mail::next_deadline(self.store()) {
            Ok(Some(at)) if at <= bindings::now_ms() => self.request_mail(),
            Ok(Some(at)) => self.schedule_side(Event::Owed(at)),
            Ok(None) => {}
            Err(e) => log_error(format!("mail: {e}")),
        }
    }

    /// Requests a delivery pass: the schedule starts one now or, while one
    /// runs, one more after it.
    pub(super) fn request_mail(&self) {
        if !self.mail_enabled() {
            return;
        }
        self.schedule_side(Event::MailWanted);
    }

    /// Performs [`crate::run::agent::Output::MailPass`]: one pass, its
    /// end told to the schedule.
    pub(super) fn start_mail_pass(&self) {
        let Some(me) = self.me.upgrade() else { return };
        let scope = self.scope(None);
        wasm_bindgen_futures::spawn_local(blame::scoped(scope, async move {
            let carried = me.mail_pass().await;
            me.schedule_side(Event::MailPassEnded { carried });
        }));
    }

    /// A lean build carries no mail: stated with `cfg`, not left to the
    /// optimiser, which kept the delivery code of an unreachable pass.
    #[cfg(not(feature = "fleet"))]
    async fn mail_pass(&self) -> usize {
        0
    }

    /// One pass: every due mail not in flight, at once. Answers how many
    /// were carried.
    #[cfg(feature = "fleet")]
    async fn mail_pass(&self) -> usize {
        let Some(fleet) = self.fleet().filter(|f| f.offer.mail) else {
            return 0;
        };
        if self.ready().is_err() {
            return 0;
        }
        let due = match mail::due(
            self.store(),
            bindings::now_ms(),
            MAIL_DELIVERIES_PER_PASS_MAX,
        ) {
            Ok(due) => due,
            Err(e) => {
                log_error(format!("mail: {e}"));
                return 0;
            }
        };
        let due: Vec<Mail> = due
            .into_iter()
            .filter(|m| !self.mail.in_flight.borrow().contains(&m.key))
            .collect();
        let n = due.len();
        futures::future::join_all(due.iter().map(|m| self.deliver(fleet, m))).await;
        n
    }

    /// `agents.send`'s immediate attempt for the mail keyed `key`: its
    /// state after the attempt, or `None` when it is not due (in flight,
    /// waiting for a retry).
    #[cfg(feature = "fleet")]
    pub(super) async fn deliver_now(&self, fleet: &HostFleet, key: &str) -> Option<SendState> {
        if !self.mail_enabled() || self.mail.in_flight.borrow().contains(key) {
            return None;
        }
        // `due` is oldest first: the fresh send is among the newest.
        let due = mail::due(self.store(), bindings::now_ms(), MAIL_DUE_SCAN_MAX).ok()?;
        let mail = due.into_iter().find(|m| m.key == key)?;
        self.deliver(fleet, &mail).await
    }

    /// Publishes and runs an admission a mail transition made.
    pub(super) fn land(&self, landed: Option<mail::Landed>) {
        if let Some(l) = landed {
            self.apply(crate::http::admission_effects(
                &l.session_id,
                &l.request_id,
                &l.admitted,
            ));
        }
    }

    /// Carries one mail and records the outcome. `None`: nothing recorded.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))] // a lean build carries no mail
    async fn deliver(&self, fleet: &HostFleet, mail: &Mail) -> Option<SendState> {
        if !self.mail.in_flight.borrow_mut().insert(mail.key.clone()) {
            return None;
        }
        // A send's recipient is looked up first when the fleet has a
        // directory: absent, archived or erased makes it undeliverable now.
        let verdict = match mail.reply {
            None => self.directory_verdict(fleet, &mail.to.agent_id).await,
            Some(_) => Ok(None),
        };
        let outcome = match verdict {
            Ok(None) => self.carry(fleet, mail).await.map(Ok),
            Ok(Some(reason)) => Ok(Err(reason)),
            Err(why) => Err(why),
        };
        let recorded = self.with_ctx(|ctx| match &outcome {
            Ok(Ok(receipt)) => mail::delivered(ctx, &mail.key, receipt),
            Ok(Err(reason)) => mail::undeliverable_now(
                ctx,
                &mail.key,
                *reason,
                "the fleet's directory: the recipient is absent, archived or erased",
            ),
            Err(why) => mail::failed(ctx, &mail.key, why),
        });
        self.mail.in_flight.borrow_mut().remove(&mail.key);
        match recorded {
            Ok(landing) => {
                // An undeliverable reply line, admitted into one of this
                // Agent's Sessions.
                self.land(landing.landed);
                Some(landing.value)
            }
            Err(e) => {
                log_error(format!("mail {}: {e}", crate::text::shorten(&mail.key)));
                None
            }
        }
    }

    /// One delivery attempt: the recipient's receipt, or why it failed (to
    /// retry). A recipient's refusal that is about its own state (closed,
    /// storage, no mail core yet) is a failure to retry; any other is its
    /// receipt `refused`.
    async fn carry(&self, fleet: &HostFleet, mail: &Mail) -> Result<Receipt, String> {
        let json = serde_json::to_string(mail).map_err(|e| e.to_string())?;
        let controller =
            web_sys::AbortController::new().map_err(|e| bindings::error_message(&e))?;
        let promise = fleet
            .js
            .send(&mail.to.agent_id, &json, &controller.signal());
        match peer_call(promise, &controller, FLEET_CALL_TIMEOUT_MS).await {
            Peer::Value(v) => serde_json::from_value::<Receipt>(v)
                .map_err(|e| format!("the recipient's receipt is malformed: {e}")),
            Peer::Refused(e) if e.status.unwrap_or(500) >= 500 => {
                log_warn(format!(
                    "mail to `{}`: {}: {}",
                    mail.to.agent_id, e.code, e.message
                ));
                Err(format!("{}: {}", e.code, e.message))
            }
            Peer::Refused(e) => Ok(Receipt::Refused {
                reason: format!("{}: {}", e.code, e.message),
            }),
            Peer::Failed(why) => Err(why),
        }
    }
}
