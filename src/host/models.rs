//! Models in the Durable Object: the host's `models()` hook (`js/do/hooks.mjs`
//! checks it key by key), the [`Policy`] it and the env make, the model a
//! turn calls (resolved once at the turn's start, `runner.rs`), and the
//! Agent's explicit model as `agents.setModel` and its RPC
//! `fleetSetModel` set it.

use super::bindings::{self, log_error, JsModels};
use super::config::HostConfig;
use super::Inner;
use crate::limits::{MODELS_OFFERED_MAX, MODEL_LAST_SWITCH_TIMEOUT_MS};
use crate::model::preference::{self, Choice, Layers, Policy, Resolved};
use crate::model::{Provider, ProviderConfig};
use crate::model_choice::{self, SetError};
use crate::run::compaction::{ContextWindow, Settings};
use serde::Deserialize;
use serde_json::Value;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// `models()` as the shim describes it.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    offered: Option<Vec<String>>,
    #[serde(default)]
    team_default: Option<String>,
    #[serde(default)]
    key_sources: Option<Vec<String>>,
    #[serde(default)]
    last_switch: bool,
    /// Each model's context window in tokens, by address.
    #[serde(default)]
    context_windows: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    compaction: Option<CompactionSpec>,
    #[serde(default)]
    error: Option<String>,
}

/// `models().compaction`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CompactionSpec {
    #[serde(default)]
    trigger: Option<Value>,
    #[serde(default)]
    prompt: Option<String>,
}

/// The host's model policy, decoded once per instance.
pub struct HostModels {
    js: Option<JsModels>,
    policy: Policy,
    team_default: Option<String>,
    /// The env's, with what `models()` states in their place.
    compaction: Settings,
}

impl HostModels {
    /// From the shim's `models()` (undefined: none) and the env. `Err`:
    /// why the configuration is unusable (every turn fails saying so).
    pub fn new(js: JsValue, config: &HostConfig) -> Result<HostModels, String> {
        let js: Option<JsModels> =
            (!js.is_undefined() && !js.is_null()).then(|| js.unchecked_into());
        let spec: Spec = match &js {
            Some(js) => crate::json::from_text(&js.spec()).map_err(|e| format!("models(): {e}"))?,
            None => Spec::default(),
        };
        if let Some(error) = spec.error {
            return Err(error);
        }
        let offered = match spec.offered {
            Some(list) => {
                if list.len() > MODELS_OFFERED_MAX {
                    return Err(format!(
                        "models().offered: at most {MODELS_OFFERED_MAX} addresses, got {}",
                        list.len()
                    ));
                }
                let mut offered = Vec::with_capacity(list.len());
                for (i, address) in list.iter().enumerate() {
                    let spec = preference::parse_address(address)
                        .map_err(|e| format!("models().offered[{i}]: {e}"))?;
                    if !offered.contains(&spec) {
                        offered.push(spec);
                    }
                }
                offered
            }
            None => config.offered.clone()?,
        };
        let key_sources = match spec.key_sources {
            Some(names) => Some(
                names
                    .iter()
                    .enumerate()
                    .map(|(i, name)| {
                        provider(name).map_err(|e| format!("models().keySources[{i}]: {e}"))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        if let Some(team) = &spec.team_default {
            preference::parse_address(team).map_err(|e| format!("models().teamDefault: {e}"))?;
        }
        let mut compaction = config.compaction.clone()?;
        if let Some(windows) = &spec.context_windows {
            compaction.windows = Settings::windows(
                windows
                    .iter()
                    .map(|(a, t)| (a.as_str(), t.as_u64().unwrap_or(0))),
            )
            .map_err(|e| format!("models().contextWindows: {e}"))?;
        }
        let own = spec.compaction.unwrap_or_default();
        if let Some(trigger) = &own.trigger {
            compaction.trigger_percent =
                Settings::trigger(trigger).map_err(|e| format!("models().compaction: {e}"))?;
        }
        if let Some(prompt) = &own.prompt {
            compaction.prompt =
                Some(Settings::prompt(prompt).map_err(|e| format!("models().compaction: {e}"))?);
        }
        Ok(HostModels {
            compaction,
            js: js.filter(|_| spec.last_switch),
            policy: Policy {
                offered,
                signed_in: config.signed_in(),
                key_sources,
            },
            team_default: spec.team_default.or_else(|| config.default_model.clone()),
        })
    }

    /// The person's last manual switch for a turn of `session` whose head
    /// carries `meta`: the host's answer, or `None` (no callback, no
    /// answer, or a failure, logged: the layer is skipped).
    async fn last_switch(&self, session: &str, meta: Option<String>) -> Option<String> {
        let js = self.js.as_ref()?;
        // The shim bounds the callback by the same deadline; this one only
        // guards against a shim that never answers.
        let controller = web_sys::AbortController::new().ok()?;
        let answer = bindings::within(
            JsFuture::from(js.last_switch(session, meta)),
            MODEL_LAST_SWITCH_TIMEOUT_MS + 1_000,
            &controller,
            0,
        )
        .await;
        let text = match answer {
            Some(Ok(text)) => text.as_string().unwrap_or_default(),
            Some(Err(e)) => {
                log_error(format!(
                    "models().lastSwitch failed: {}",
                    bindings::error_message(&e)
                ));
                return None;
            }
            None => {
                log_error(format!(
                    "models().lastSwitch gave no answer within {MODEL_LAST_SWITCH_TIMEOUT_MS} ms"
                ));
                return None;
            }
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(o)) if o.contains_key("error") => {
                log_error(format!("models().lastSwitch: {}", o["error"]));
                None
            }
            Ok(Value::Object(o)) => o.get("value").and_then(Value::as_str).map(str::to_owned),
            _ => None,
        }
    }
}

/// A provider by its address spelling.
fn provider(name: &str) -> Result<Provider, String> {
    match name {
        "openai" => Ok(Provider::OpenAi),
        "anthropic" => Ok(Provider::Anthropic),
        other => Err(format!(
            "unknown provider `{}`; expected openai or anthropic",
            crate::text::shorten(other)
        )),
    }
}

/// What a turn calls: the resolved model and where to call it, and what
/// the host states of its compaction.
pub struct Target {
    pub resolved: Resolved,
    pub provider: ProviderConfig,
    pub window: Option<ContextWindow>,
    pub compaction_prompt: Option<Rc<str>>,
}

impl Inner {
    fn host_models(&self) -> Result<&HostModels, String> {
        self.models.as_ref().map_err(|why| format!("models: {why}"))
    }

    /// The host's model policy, or why its models configuration is unusable.
    pub(super) fn model_policy(&self) -> Result<&Policy, &str> {
        self.models
            .as_ref()
            .map(|models| &models.policy)
            .map_err(String::as_str)
    }

    /// The model of a turn in `session` whose head carries `meta`: the
    /// stored layers, the host's last switch and Team default, resolved
    /// against the policy. `Err`: the bounded diagnostic the turn fails with.
    pub(super) async fn resolve_model(
        &self,
        session: &str,
        meta: Option<&str>,
    ) -> Result<Target, String> {
        let models = self.host_models()?;
        let stored = model_choice::layers(&self.sql, session).map_err(|e| e.to_string())?;
        // The head's metadata goes only to a host that asks for it; a
        // Session ACP serves never selects a person's saved preference.
        let hosted = model_choice::hosted(&self.sql, session).map_err(|e| e.to_string())?;
        let last_switch = match models.js.is_some() && !hosted {
            true => models.last_switch(session, meta.map(str::to_owned)).await,
            false => None,
        };
        let layers = Layers {
            session: stored.0,
            agent: stored.1,
            last_switch,
            team_default: models.team_default.clone(),
        };
        let resolved = preference::resolve(&layers, &models.policy)?;
        let provider = self
            .config
            .provider(resolved.spec.provider)
            .cloned()
            .ok_or_else(|| {
                format!(
                    "model:unavailable: provider {} is not signed in",
                    resolved.spec.provider.name()
                )
            })?;
        Ok(Target {
            window: models.compaction.window(&resolved.spec),
            compaction_prompt: models.compaction.prompt.clone(),
            resolved,
            provider,
        })
    }

    /// `agents.models`: the offered addresses of signed-in, allowed
    /// providers (at most 200).
    #[cfg(feature = "fleet")]
    pub(super) fn available_models(&self) -> Result<Vec<String>, String> {
        Ok(self.host_models()?.policy.available())
    }

    /// Sets this Agent's explicit model (`agents.setModel` here, or a
    /// peer's `fleetSetModel`, or a directory's create): checked against
    /// this host's policy, then stored; the next turn resolves it.
    pub(super) fn set_agent_model(&self, choice: &Choice) -> Result<Choice, SetError> {
        let models = self.host_models().map_err(SetError::Rejected)?;
        let set =
            self.with_ctx(|ctx| model_choice::set_agent(ctx, &models.policy, Some(choice)))?;
        Ok(set.unwrap_or_else(|| choice.clone()))
    }
}
