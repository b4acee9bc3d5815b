//! The host's configuration, read from the Worker's env (wrangler vars and
//! secrets) when the Durable Object starts. Keys live only in this struct:
//! never stored, logged or echoed.

use super::bindings::{env_string, log_warn, JsMeta};
use crate::budget::Limits;
use crate::limits::{
    ATTEMPTS_MAX, BUDGET_TOKENS_MAX, MAX_OUTPUT_TOKENS_DEFAULT, MAX_OUTPUT_TOKENS_MAX,
    RETRY_BASE_MS_MAX, RETRY_MAX_MS_MAX, TOOL_CALL_TIMEOUT_MS, WATCH_HEARTBEAT_MS,
};
use crate::meta::{HostRefusal, MetaPolicy};
use crate::model::{preference, ModelSpec, Provider, ProviderConfig, RetryPolicy};
use crate::redact::Secrets;
use crate::run::compaction::Settings;
use crate::run::Attempts;
use serde::Deserialize;
use wasm_bindgen::{JsCast, JsValue};

/// Keys redacted from diagnostics whichever provider is in use.
const PROVIDER_KEYS: [&str; 2] = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

pub struct HostConfig {
    /// The models this deployment offers (`SHIITAKE_MODELS`, else
    /// `SHIITAKE_MODEL` alone), or why the setting is unusable (every turn
    /// then fails saying so). A host's `models().offered` replaces it.
    pub offered: Result<Vec<ModelSpec>, String>,
    /// `SHIITAKE_MODEL`: the deployment's default, the Team default layer
    /// when the host's `models()` states none.
    pub default_model: Option<String>,
    /// The providers signed in (a key or a base URL set), each with where
    /// and as whom to call it. Keys live only here.
    pub providers: Vec<(Provider, ProviderConfig)>,
    pub instructions: Option<String>,
    pub retry: RetryPolicy,
    /// `SHIITAKE_BUDGET_DAILY_TOKENS`, `SHIITAKE_BUDGET_SESSION_TOKENS`.
    pub budget: Limits,
    pub max_output_tokens: u32,
    /// Fault injection (test builds only): panic when a streamed delta or
    /// a request's path contains it.
    #[cfg(feature = "fault-injection")]
    pub panic_marker: Option<String>,
    /// The host's metadata schema and identity path, or why they are invalid.
    pub meta: Result<MetaPolicy, String>,
    /// Wall time of one tool call (`execute` run or direct tool), at most
    /// `TOOL_CALL_TIMEOUT_MS` (the default).
    pub tool_timeout_ms: u64,
    /// How often an open event stream gets an SSE comment, at most
    /// `WATCH_HEARTBEAT_MS` (the default).
    pub watch_heartbeat_ms: u64,
    /// Every provider key in the env, redacted from model-call failures.
    pub secrets: Secrets,
    /// `SHIITAKE_CONTEXT_WINDOWS`, `SHIITAKE_COMPACTION_TRIGGER` and
    /// `SHIITAKE_COMPACTION_PROMPT`, or why they are unusable (every turn
    /// then fails saying so). A host's `models()` may state each instead.
    pub compaction: Result<Settings, String>,
    /// `SHIITAKE_MCP_ALLOWED_HOSTS`: the host names a browser may reach
    /// `/mcp` at (loopback's by default), or why the setting is refused
    /// (`/mcp` then answers 503 saying so).
    #[cfg(feature = "mcp-server")]
    pub mcp_allowed_hosts: Result<Vec<String>, String>,
}

impl HostConfig {
    /// `meta`: the shim's metadata host (`meta()`), or undefined.
    pub fn from_env(env: &JsValue, meta: JsValue) -> Self {
        let defaults = RetryPolicy::default();
        let (offered, default_model) = offered(env);
        HostConfig {
            offered,
            default_model,
            providers: providers(env),
            instructions: env_string(env, "SHIITAKE_INSTRUCTIONS"),
            retry: RetryPolicy {
                attempts_max: number(env, "SHIITAKE_ATTEMPTS_MAX", 1, ATTEMPTS_MAX)
                    .map_or(defaults.attempts_max, |n| n as u32),
                base_delay_ms: number(env, "SHIITAKE_RETRY_BASE_MS", 1, RETRY_BASE_MS_MAX)
                    .unwrap_or(defaults.base_delay_ms),
                max_delay_ms: number(env, "SHIITAKE_RETRY_MAX_MS", 1, RETRY_MAX_MS_MAX)
                    .unwrap_or(defaults.max_delay_ms),
            },
            budget: Limits {
                daily: budget(env, "SHIITAKE_BUDGET_DAILY_TOKENS"),
                session: budget(env, "SHIITAKE_BUDGET_SESSION_TOKENS"),
            },
            max_output_tokens: number(env, "SHIITAKE_MAX_OUTPUT_TOKENS", 1, MAX_OUTPUT_TOKENS_MAX)
                .map_or(MAX_OUTPUT_TOKENS_DEFAULT, |n| n as u32),
            #[cfg(feature = "fault-injection")]
            panic_marker: env_string(env, "SHIITAKE_FAULT_PANIC_MARKER"),
            tool_timeout_ms: number(env, "SHIITAKE_TOOL_TIMEOUT_MS", 1, TOOL_CALL_TIMEOUT_MS)
                .unwrap_or(TOOL_CALL_TIMEOUT_MS),
            watch_heartbeat_ms: number(env, "SHIITAKE_WATCH_HEARTBEAT_MS", 1, WATCH_HEARTBEAT_MS)
                .unwrap_or(WATCH_HEARTBEAT_MS),
            secrets: Secrets::new(
                PROVIDER_KEYS
                    .iter()
                    .filter_map(|name| env_string(env, name))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str),
            ),
            meta: meta_policy(env, meta),
            compaction: compaction(env),
            #[cfg(feature = "mcp-server")]
            mcp_allowed_hosts: crate::mcp_server::allowed_hosts(
                env_string(env, "SHIITAKE_MCP_ALLOWED_HOSTS").as_deref(),
            ),
        }
    }

    pub fn attempts(&self) -> Attempts {
        Attempts {
            max: self.retry.attempts_max,
        }
    }
}

impl HostConfig {
    /// Where and as whom to call `provider`, when it is signed in.
    pub fn provider(&self, provider: Provider) -> Option<&ProviderConfig> {
        self.providers
            .iter()
            .find(|(p, _)| *p == provider)
            .map(|(_, config)| config)
    }

    /// The providers signed in.
    pub fn signed_in(&self) -> Vec<Provider> {
        self.providers.iter().map(|(p, _)| *p).collect()
    }
}

const META_SCHEMA_VAR: &str = "SHIITAKE_META_SCHEMA";
const IDENTITY_PATH_VAR: &str = "SHIITAKE_IDENTITY_PATH";

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MetaSpec {
    #[serde(default)]
    schema: Option<serde_json::Value>,
    #[serde(default)]
    standard: bool,
    #[serde(default)]
    identity_path: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// The host's metadata rules: from its `meta()` when it defines one, else
/// from `SHIITAKE_META_SCHEMA` and `SHIITAKE_IDENTITY_PATH`. Both at once is
/// refused (one place states the rules; the env would otherwise be silently
/// ignored).
fn meta_policy(env: &JsValue, js: JsValue) -> Result<MetaPolicy, String> {
    let env_schema = env_string(env, META_SCHEMA_VAR);
    let env_path = env_string(env, IDENTITY_PATH_VAR);
    if js.is_undefined() || js.is_null() {
        return MetaPolicy::new(env_schema.as_deref(), env_path.as_deref())
            .map_err(|e| e.to_string());
    }
    let js: JsMeta = js.unchecked_into();
    let spec: MetaSpec = crate::json::from_text(&js.spec()).map_err(|e| format!("meta(): {e}"))?;
    if let Some(error) = spec.error {
        return Err(error);
    }
    let set: Vec<&str> = [
        (META_SCHEMA_VAR, &env_schema),
        (IDENTITY_PATH_VAR, &env_path),
    ]
    .into_iter()
    .filter(|(_, v)| v.is_some())
    .map(|(name, _)| name)
    .collect();
    if !set.is_empty() {
        return Err(format!(
            "the host defines meta() and sets {}: state the metadata schema and identityPath in one place",
            set.join(" and ")
        ));
    }
    let schema = spec.schema.map(|s| s.to_string());
    let policy = MetaPolicy::new(schema.as_deref(), spec.identity_path.as_deref())
        .map_err(|e| format!("meta(): {e}"))?;
    if !spec.standard {
        return Ok(policy);
    }
    Ok(policy.with_host_check(Box::new(move |value| {
        // `{value}` (which may be null), `{invalid}` or `{error}`.
        let mut answer: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&js.validate(&value.to_string()))
                .map_err(|e| HostRefusal::Broken(format!("meta(): the shim answered {e}")))?;
        let text = |v: serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        if let Some(why) = answer.remove("invalid") {
            return Err(HostRefusal::Invalid(text(why)));
        }
        if let Some(why) = answer.remove("error") {
            return Err(HostRefusal::Broken(text(why)));
        }
        answer
            .remove("value")
            .ok_or_else(|| HostRefusal::Broken("meta(): the schema gave no value".into()))
    })))
}

/// The offered models and the default: `SHIITAKE_MODELS` (comma-separated
/// `provider/model`, at most 200) when set, else `SHIITAKE_MODEL` alone.
fn offered(env: &JsValue) -> (Result<Vec<ModelSpec>, String>, Option<String>) {
    let default = env_string(env, "SHIITAKE_MODEL");
    let default_spec = default
        .as_deref()
        .map(|spelling| ModelSpec::parse(spelling).map_err(|e| format!("SHIITAKE_MODEL: {e}")))
        .transpose();
    let offered = match (env_string(env, "SHIITAKE_MODELS"), default_spec) {
        (_, Err(e)) => Err(e),
        (Some(list), Ok(_)) => {
            preference::parse_offered(&list).map_err(|e| format!("SHIITAKE_MODELS: {e}"))
        }
        (None, Ok(spec)) => Ok(spec.into_iter().collect()),
    };
    (offered, default)
}

/// The compaction settings of the env (see [`HostConfig::compaction`]).
fn compaction(env: &JsValue) -> Result<Settings, String> {
    let mut settings = Settings::default();
    if let Some(list) = env_string(env, "SHIITAKE_CONTEXT_WINDOWS") {
        settings.windows =
            Settings::parse_windows(&list).map_err(|e| format!("SHIITAKE_CONTEXT_WINDOWS: {e}"))?;
    }
    if let Some(trigger) = env_string(env, "SHIITAKE_COMPACTION_TRIGGER") {
        let fraction =
            serde_json::from_str(trigger.trim()).unwrap_or(serde_json::Value::String(trigger));
        settings.trigger_percent = Settings::trigger(&fraction)
            .map_err(|e| format!("SHIITAKE_COMPACTION_TRIGGER: {e}"))?;
    }
    if let Some(prompt) = env_string(env, "SHIITAKE_COMPACTION_PROMPT") {
        settings.prompt = Some(
            Settings::prompt(&prompt).map_err(|e| format!("SHIITAKE_COMPACTION_PROMPT: {e}"))?,
        );
    }
    Ok(settings)
}

/// Every provider whose key or base URL is set: signed in (an available
/// login). A keyless compatible server counts by its base URL.
fn providers(env: &JsValue) -> Vec<(Provider, ProviderConfig)> {
    [Provider::OpenAi, Provider::Anthropic]
        .into_iter()
        .filter_map(|provider| {
            let prefix = provider.name().to_ascii_uppercase();
            let base_url = env_string(env, &format!("{prefix}_BASE_URL"));
            let key = env_string(env, &format!("{prefix}_API_KEY"));
            (base_url.is_some() || key.is_some())
                .then(|| (provider, ProviderConfig::new(provider, base_url, key)))
        })
        .collect()
}

/// A numeric setting within bounds; out of bounds or malformed falls back to
/// the default with a warning naming the setting (never its neighbours).
/// A configured budget. One that is not a number in range counts as 0: a
/// typo stops spending, it never lifts the limit.
fn budget(env: &JsValue, name: &str) -> Option<u64> {
    let raw = env_string(env, name)?;
    match raw.parse::<u64>() {
        Ok(n) if n <= BUDGET_TOKENS_MAX => Some(n),
        _ => {
            log_warn(format!(
                "{name} must be an integer in 0..={BUDGET_TOKENS_MAX}; counting it as 0 (no model call runs)"
            ));
            Some(0)
        }
    }
}

fn number(env: &JsValue, name: &str, min: u64, max: u64) -> Option<u64> {
    let raw = env_string(env, name)?;
    match raw.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Some(n),
        _ => {
            log_warn(format!(
                "{name} must be an integer in {min}..={max}; using the default"
            ));
            None
        }
    }
}
