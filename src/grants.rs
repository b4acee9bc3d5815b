//! Grants (seed: "Shiitake holds no permission logic"): tool authors label
//! each operation read or write (and optionally confirm); the host owns
//! every grant decision and delivers it as versioned data; the runtime
//! decides each call from that data, read at the call.
//!
//! Rules, each tested below:
//! - the host's Agent-wide default (`tools.access.grants`) applies to every
//!   Session; a Session's delivered grants override it key by key;
//! - delivered versions never move back: an older version is refused, the
//!   same version with other grants replaces the stored ones;
//! - grants are keyed by module id (`files` for the Files direct tools);
//! - keys in `required` fail closed: no delivered or default grant, no call;
//! - with no access data at all, every tool keeps full access;
//! - a `confirm` operation is refused unless the host supplies a confirm hook.

use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::limits::{GRANT_KEYS_MAX, GRANT_KEY_BYTES_MAX, GRANT_VERSION_MAX};
use crate::sql::atomically;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a grant allows on one module. `write` includes `read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    None,
    Read,
    Write,
}

/// What an operation needs, as its author labelled it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    pub write: bool,
    pub confirm: bool,
}

/// The host's Agent-wide access data (`tools.access`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AccessConfig {
    /// The default grant of each key, for every Session.
    #[serde(default)]
    pub grants: BTreeMap<String, Level>,
    /// Keys that fail closed without a delivered or default grant.
    #[serde(default)]
    pub required: Vec<String>,
}

/// A Session's delivered grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delivery {
    pub version: u64,
    pub grants: BTreeMap<String, Level>,
}

/// How a delivery changed the Session's grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivered {
    /// A newer version (or the first) was stored.
    Stored,
    /// The same version with other grants replaced the stored ones.
    Replaced,
    /// The same version and grants: nothing changed.
    Unchanged,
}

/// The decision for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(String),
}

/// Why the host's access data or a delivery's grant keys are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// serde's reason the access data does not decode.
    #[error("tools access: {0}")]
    Access(String),
    #[error("grant key `{0}`: a module id of 1..={GRANT_KEY_BYTES_MAX} bytes")]
    Key(String),
    #[error("at most {GRANT_KEYS_MAX} grant keys")]
    TooManyKeys,
}

/// The host's callers still carry errors as text (`src/host/tools.rs`).
impl From<GrantError> for String {
    fn from(e: GrantError) -> String {
        e.to_string()
    }
}

impl AccessConfig {
    /// Parses and checks the host's access data.
    pub fn parse(json: &str) -> Result<Self, GrantError> {
        let config: AccessConfig =
            crate::json::from_text(json).map_err(|e| GrantError::Access(e.to_string()))?;
        check_keys(config.grants.keys().chain(config.required.iter()))?;
        Ok(config)
    }

    fn is_empty(&self) -> bool {
        self.grants.is_empty() && self.required.is_empty()
    }
}

fn check_keys<'a>(keys: impl Iterator<Item = &'a String>) -> Result<(), GrantError> {
    let mut n = 0;
    for key in keys {
        n += 1;
        if key.is_empty() || key.len() > GRANT_KEY_BYTES_MAX {
            return Err(GrantError::Key(key.clone()));
        }
    }
    if n > GRANT_KEYS_MAX * 2 {
        return Err(GrantError::TooManyKeys);
    }
    Ok(())
}

/// Decides one call of an operation of module `key` needing `needs`, from
/// the Agent default and the Session's delivered grants (read at the call).
pub fn decide(
    key: &str,
    needs: Needs,
    config: &AccessConfig,
    delivered: Option<&Delivery>,
    confirm_hook: bool,
) -> Decision {
    if needs.confirm && !confirm_hook {
        return Decision::Deny(format!(
            "`{key}`: this operation asks for confirmation and the host supplies no confirm hook"
        ));
    }
    let no_access_data = config.is_empty() && delivered.is_none_or(|d| d.grants.is_empty());
    if no_access_data {
        return Decision::Allow;
    }
    let level = delivered
        .and_then(|d| d.grants.get(key))
        .or_else(|| config.grants.get(key))
        .copied();
    let level = match level {
        Some(level) => level,
        None if config.required.iter().any(|k| k == key) => {
            return Decision::Deny(format!(
                "`{key}` requires a grant and this Session has none"
            ))
        }
        // Keys the host says nothing about keep full access.
        None => Level::Write,
    };
    let needed = if needs.write {
        Level::Write
    } else {
        Level::Read
    };
    if level >= needed {
        Decision::Allow
    } else {
        Decision::Deny(format!(
            "`{key}` is granted `{}` here; this operation needs `{}`",
            level_name(level),
            level_name(needed)
        ))
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::None => "none",
        Level::Read => "read",
        Level::Write => "write",
    }
}

/// Stores a Session's delivered grants under the version rules.
pub fn deliver(ctx: &mut Ctx<'_>, session_id: &str, json: &str) -> Result<Delivered, ApiError> {
    let delivery: Delivery = crate::json::parse_body(json.as_bytes())?;
    if delivery.version > GRANT_VERSION_MAX {
        return Err(ApiError::InvalidRequest(format!(
            "version: at most {GRANT_VERSION_MAX}"
        )));
    }
    if delivery.grants.len() > GRANT_KEYS_MAX {
        return Err(ApiError::InvalidRequest(format!(
            "grants: at most {GRANT_KEYS_MAX} keys"
        )));
    }
    check_keys(delivery.grants.keys()).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let canonical =
        serde_json::to_string(&delivery.grants).map_err(|e| ApiError::Internal(e.to_string()))?;
    let store = ctx.store;
    let now_ms = ctx.now_ms;
    atomically(store.sql(), || {
        let stored = store.session_grants(session_id)?;
        let outcome = match &stored {
            Some((version, _)) if *version > delivery.version => {
                return Err(ApiError::GrantVersionRefused {
                    stored: *version,
                    delivered: delivery.version,
                })
            }
            Some((version, grants)) if *version == delivery.version && *grants == canonical => {
                return Ok(Delivered::Unchanged)
            }
            Some((version, _)) if *version == delivery.version => Delivered::Replaced,
            _ => Delivered::Stored,
        };
        store.put_session_grants(session_id, delivery.version, &canonical, now_ms)?;
        Ok(outcome)
    })
}

/// The Session's delivered grants, if any.
pub fn delivered(ctx: &Ctx<'_>, session_id: &str) -> Result<Option<Delivery>, ApiError> {
    ctx.store
        .session_grants(session_id)?
        .map(|(version, grants)| {
            Ok(Delivery {
                version,
                grants: crate::json::from_text(&grants)
                    .map_err(|e| ApiError::Internal(format!("stored grants: {e}")))?,
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ: Needs = Needs {
        write: false,
        confirm: false,
    };
    const WRITE: Needs = Needs {
        write: true,
        confirm: false,
    };
    const CONFIRM: Needs = Needs {
        write: true,
        confirm: true,
    };

    fn grants(pairs: &[(&str, Level)]) -> BTreeMap<String, Level> {
        pairs.iter().map(|(k, l)| ((*k).to_owned(), *l)).collect()
    }

    fn allowed(d: Decision) -> bool {
        d == Decision::Allow
    }

    #[test]
    fn with_no_access_data_every_tool_keeps_full_access() {
        let none = AccessConfig::default();
        assert!(allowed(decide("mcp.notes", WRITE, &none, None, false)));
        assert!(allowed(decide("files", READ, &none, None, false)));
    }

    #[test]
    fn confirm_operations_need_the_hosts_hook() {
        let none = AccessConfig::default();
        assert!(!allowed(decide("files", CONFIRM, &none, None, false)));
        assert!(allowed(decide("files", CONFIRM, &none, None, true)));
    }

    #[test]
    fn the_default_applies_and_delivered_grants_override_it_key_by_key() {
        let config = AccessConfig {
            grants: grants(&[("mcp.notes", Level::Read), ("files", Level::Write)]),
            required: vec![],
        };
        assert!(allowed(decide("mcp.notes", READ, &config, None, false)));
        assert!(!allowed(decide("mcp.notes", WRITE, &config, None, false)));
        let delivery = Delivery {
            version: 1,
            grants: grants(&[("mcp.notes", Level::Write)]),
        };
        assert!(allowed(decide(
            "mcp.notes",
            WRITE,
            &config,
            Some(&delivery),
            false
        )));
        // `files` was not delivered: the default still holds for it.
        assert!(allowed(decide(
            "files",
            WRITE,
            &config,
            Some(&delivery),
            false
        )));
        let revoke = Delivery {
            version: 2,
            grants: grants(&[("files", Level::None)]),
        };
        assert!(!allowed(decide(
            "files",
            READ,
            &config,
            Some(&revoke),
            false
        )));
        // A key nobody mentions keeps full access.
        assert!(allowed(decide(
            "computers.laptop",
            WRITE,
            &config,
            Some(&revoke),
            false
        )));
    }

    #[test]
    fn required_keys_fail_closed() {
        let config = AccessConfig {
            grants: BTreeMap::new(),
            required: vec!["files".into()],
        };
        let d = decide("files", READ, &config, None, false);
        assert!(
            matches!(&d, Decision::Deny(why) if why.contains("requires a grant")),
            "{d:?}"
        );
        let delivery = Delivery {
            version: 1,
            grants: grants(&[("files", Level::Read)]),
        };
        assert!(allowed(decide(
            "files",
            READ,
            &config,
            Some(&delivery),
            false
        )));
        assert!(!allowed(decide(
            "files",
            WRITE,
            &config,
            Some(&delivery),
            false
        )));
        // Only the required key is closed.
        assert!(allowed(decide("mcp.notes", WRITE, &config, None, false)));
    }

    #[test]
    fn access_config_is_a_closed_schema() {
        assert!(AccessConfig::parse(r#"{"grants":{"files":"read"},"required":["files"]}"#).is_ok());
        assert!(AccessConfig::parse(r#"{"grants":{"files":"admin"}}"#)
            .unwrap_err()
            .to_string()
            .contains("admin"));
        assert!(AccessConfig::parse(r#"{"grant":{}}"#)
            .unwrap_err()
            .to_string()
            .starts_with("tools access: "));
        assert_eq!(
            AccessConfig::parse(r#"{"grants":{"":"read"}}"#)
                .unwrap_err()
                .to_string(),
            format!("grant key ``: a module id of 1..={GRANT_KEY_BYTES_MAX} bytes")
        );
    }
}
