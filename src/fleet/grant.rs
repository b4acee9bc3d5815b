//! Fleet grants (seed: "Hosts supply grants containing Agent scope,
//! actions, expiry and provenance"), sans-IO. A grant is host data: which
//! Agents it reaches (`agents`: ids, or `"*"` for every Agent), which fleet
//! operations it allows (`actions`), until when (`expiresAt`, ms since the
//! epoch, exclusive) and who granted it (`provenance`: opaque, echoed in
//! refusals' context by the host API, never interpreted here).
//!
//! A grant is checked at each call it authorizes, against that call's
//! clock: an expired grant is refused by the call that finds it expired
//! (`grant_expired`), an action or Agent outside it by `grant_refused`.
//! Fleet operations read no Team, billing or broker policy.

use crate::error::ApiError;
use crate::limits::{
    FLEET_GRANT_AGENTS_MAX, FLEET_GRANT_BYTES_MAX, FLEET_GRANT_PROVENANCE_BYTES_MAX,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The actions a fleet grant may name: the model's `agents` operations by
/// their module names, and the host API's (`start`, `delegate`).
pub const ACTIONS: &[&str] = &[
    "send",
    "recall",
    "wait",
    "read",
    "create",
    "list",
    "archive",
    "unarchive",
    "setModel",
    "models",
    "sessions.list",
    "sessions.create",
    "sessions.read",
    "sessions.delete",
    "start",
    "delegate",
];

/// Which Agents a grant reaches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Scope {
    /// `"*"`: every Agent of the fleet.
    Every(String),
    Agents(Vec<String>),
}

/// One fleet grant, as the host supplies it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    pub agents: Scope,
    pub actions: Vec<String>,
    /// Ms since the epoch; the grant allows calls strictly before it.
    pub expires_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Value>,
}

/// Why a call is refused under its grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the fleet grant expired at {expires_at} (ms since the epoch); this call ran at {now_ms}"
    )]
    Expired { expires_at: i64, now_ms: i64 },
    #[error("the fleet grant does not allow `{0}`")]
    Action(String),
    #[error("the fleet grant does not reach Agent `{0}`")]
    Agent(String),
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        match r {
            Refusal::Expired { .. } => ApiError::GrantExpired(r.to_string()),
            _ => ApiError::GrantRefused(r.to_string()),
        }
    }
}

impl Grant {
    /// Decodes and bounds a grant (JSON value); `Err` names the problem.
    pub fn parse(value: &Value) -> Result<Grant, String> {
        let bytes = value.to_string().len();
        if bytes > FLEET_GRANT_BYTES_MAX {
            return Err(format!(
                "at most {FLEET_GRANT_BYTES_MAX} bytes, got {bytes}"
            ));
        }
        let grant: Grant = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
        match &grant.agents {
            Scope::Every(all) if all == "*" => {}
            Scope::Every(other) => {
                return Err(format!(
                    "agents: `\"*\"` or a list of Agent ids, got `{}`",
                    crate::text::shorten(other)
                ))
            }
            Scope::Agents(ids) => {
                if ids.len() > FLEET_GRANT_AGENTS_MAX {
                    return Err(format!("agents: at most {FLEET_GRANT_AGENTS_MAX} ids"));
                }
                for id in ids {
                    super::validate_agent_id(id).map_err(|e| format!("agents: {e}"))?;
                }
            }
        }
        if grant.actions.len() > ACTIONS.len() {
            return Err(format!("actions: at most {} entries", ACTIONS.len()));
        }
        if let Some(unknown) = grant
            .actions
            .iter()
            .find(|a| !ACTIONS.contains(&a.as_str()))
        {
            return Err(format!(
                "actions: unknown action `{}`; known: {}",
                crate::text::shorten(unknown),
                ACTIONS.join(", ")
            ));
        }
        if grant.expires_at < 0 || grant.expires_at > crate::limits::GRANT_VERSION_MAX as i64 {
            return Err("expiresAt: ms since the epoch (a safe integer)".to_owned());
        }
        if let Some(p) = &grant.provenance {
            let bytes = p.to_string().len();
            if bytes > FLEET_GRANT_PROVENANCE_BYTES_MAX {
                return Err(format!(
                    "provenance: at most {FLEET_GRANT_PROVENANCE_BYTES_MAX} bytes of JSON, got {bytes}"
                ));
            }
        }
        Ok(grant)
    }

    /// Whether the grant allows `action` on `target` (`None`: an action
    /// that reaches no one Agent, e.g. `list`) at `now_ms`. Expiry first:
    /// an expired grant allows nothing.
    pub fn allows(&self, action: &str, target: Option<&str>, now_ms: i64) -> Result<(), Refusal> {
        if now_ms >= self.expires_at {
            return Err(Refusal::Expired {
                expires_at: self.expires_at,
                now_ms,
            });
        }
        if !self.actions.iter().any(|a| a == action) {
            return Err(Refusal::Action(action.to_owned()));
        }
        match (target, &self.agents) {
            (None, _) | (Some(_), Scope::Every(_)) => Ok(()),
            (Some(id), Scope::Agents(ids)) if ids.iter().any(|a| a == id) => Ok(()),
            (Some(id), Scope::Agents(_)) => Err(Refusal::Agent(id.to_owned())),
        }
    }
}

/// Parses the grant a request carries and checks it for `action` on
/// `target` at `now_ms`: 400 `invalid_request` naming the problem, 403
/// `grant_expired` or `grant_refused`.
pub fn check(
    grant: &Value,
    action: &str,
    target: Option<&str>,
    now_ms: i64,
) -> Result<Grant, ApiError> {
    let grant = Grant::parse(grant).map_err(|e| ApiError::InvalidRequest(format!("grant: {e}")))?;
    grant.allows(action, target, now_ms)?;
    Ok(grant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grant(v: Value) -> Grant {
        Grant::parse(&v).unwrap()
    }

    #[test]
    fn a_grant_allows_its_actions_on_its_agents_until_it_expires() {
        let g = grant(
            json!({"agents": ["b"], "actions": ["read", "sessions.list"], "expiresAt": 1000, "provenance": {"by": "ada"}}),
        );
        assert_eq!(g.allows("read", Some("b"), 999), Ok(()));
        assert_eq!(g.allows("sessions.list", Some("b"), 0), Ok(()));
        assert_eq!(
            g.allows("read", Some("b"), 1000),
            Err(Refusal::Expired {
                expires_at: 1000,
                now_ms: 1000
            }),
            "expiry is exclusive"
        );
        assert_eq!(
            g.allows("send", Some("b"), 1),
            Err(Refusal::Action("send".into()))
        );
        assert_eq!(
            g.allows("read", Some("c"), 1),
            Err(Refusal::Agent("c".into()))
        );
        // Expiry is checked first: an expired grant allows nothing.
        assert!(matches!(
            g.allows("send", Some("c"), 5000),
            Err(Refusal::Expired { .. })
        ));
        let every = grant(json!({"agents": "*", "actions": ["list"], "expiresAt": 10}));
        assert_eq!(every.allows("list", None, 1), Ok(()));
        assert_eq!(every.allows("list", Some("anyone"), 1), Ok(()));
    }

    #[test]
    fn refusals_are_403_with_their_own_codes() {
        let g = grant(json!({"agents": ["b"], "actions": ["read"], "expiresAt": 5}));
        let e = check(&json!(g), "read", Some("b"), 9).unwrap_err();
        assert_eq!((e.status(), e.code()), (403, "grant_expired"));
        let e = check(&json!(g), "sessions.delete", Some("b"), 1).unwrap_err();
        assert_eq!((e.status(), e.code()), (403, "grant_refused"));
        assert!(e.to_string().contains("sessions.delete"), "{e}");
        let e = check(&json!(g), "read", Some("c"), 1).unwrap_err();
        assert!(e.to_string().contains("Agent `c`"), "{e}");
    }

    #[test]
    fn malformed_grants_are_refused_naming_the_problem() {
        let bad = |v: Value, needle: &str| {
            let e = check(&v, "read", None, 0).unwrap_err();
            assert_eq!(e.status(), 400, "{e}");
            assert!(e.to_string().contains(needle), "{needle}: {e}");
        };
        bad(
            json!({"agents": "all", "actions": [], "expiresAt": 1}),
            "agents",
        );
        bad(
            json!({"agents": ["a b"], "actions": [], "expiresAt": 1}),
            "agents",
        );
        bad(
            json!({"agents": ["shiitake.directory"], "actions": [], "expiresAt": 1}),
            "reserved",
        );
        bad(
            json!({"agents": "*", "actions": ["fly"], "expiresAt": 1}),
            "fly",
        );
        bad(json!({"agents": "*", "actions": []}), "expiresAt");
        bad(
            json!({"agents": "*", "actions": [], "expiresAt": -1}),
            "expiresAt",
        );
        bad(
            json!({"agents": "*", "actions": [], "expiresAt": 1, "scope": 1}),
            "scope",
        );
        let ids: Vec<String> = (0..=FLEET_GRANT_AGENTS_MAX)
            .map(|i| format!("a{i}"))
            .collect();
        bad(
            json!({"agents": ids, "actions": [], "expiresAt": 1}),
            "at most",
        );
        let big = "x".repeat(FLEET_GRANT_PROVENANCE_BYTES_MAX);
        bad(
            json!({"agents": "*", "actions": [], "expiresAt": 1, "provenance": big}),
            "provenance",
        );
    }
}
