//! The host's configuration, read from the Worker's env (wrangler vars and
//! secrets) when the Durable Object starts. Keys live only in this struct:
//! never stored, logged or echoed.

use super::bindings::{env_string, log_warn};
use crate::limits::{
    ATTEMPTS_MAX, MAX_OUTPUT_TOKENS_DEFAULT, MAX_OUTPUT_TOKENS_MAX, RETRY_BASE_MS_MAX,
    RETRY_MAX_MS_MAX, TOOL_CALL_TIMEOUT_MS,
};
use crate::meta::MetaPolicy;
use crate::model::{ModelSpec, ProviderConfig, RetryPolicy};
use crate::redact::Secrets;
use crate::run::Attempts;
use wasm_bindgen::JsValue;

/// Keys redacted from diagnostics whichever provider is in use.
const PROVIDER_KEYS: [&str; 2] = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

pub struct HostConfig {
    /// The model, or why none can be called.
    pub model: Result<(ModelSpec, ProviderConfig), String>,
    pub instructions: Option<String>,
    pub retry: RetryPolicy,
    pub max_output_tokens: u32,
    /// Fault injection (test builds only): panic when a streamed delta
    /// contains it.
    #[cfg(feature = "fault-injection")]
    pub panic_marker: Option<String>,
    /// The host's metadata schema and identity path, or why they are invalid.
    pub meta: Result<MetaPolicy, String>,
    /// Wall time of one tool call (`execute` run or direct tool), at most
    /// `TOOL_CALL_TIMEOUT_MS` (the default).
    pub tool_timeout_ms: u64,
    /// Every provider key in the env, redacted from model-call failures.
    pub secrets: Secrets,
}

impl HostConfig {
    pub fn from_env(env: &JsValue) -> Self {
        let defaults = RetryPolicy::default();
        HostConfig {
            model: model(env),
            instructions: env_string(env, "SHIITAKE_INSTRUCTIONS"),
            retry: RetryPolicy {
                attempts_max: number(env, "SHIITAKE_ATTEMPTS_MAX", 1, ATTEMPTS_MAX)
                    .map_or(defaults.attempts_max, |n| n as u32),
                base_delay_ms: number(env, "SHIITAKE_RETRY_BASE_MS", 1, RETRY_BASE_MS_MAX)
                    .unwrap_or(defaults.base_delay_ms),
                max_delay_ms: number(env, "SHIITAKE_RETRY_MAX_MS", 1, RETRY_MAX_MS_MAX)
                    .unwrap_or(defaults.max_delay_ms),
            },
            max_output_tokens: number(env, "SHIITAKE_MAX_OUTPUT_TOKENS", 1, MAX_OUTPUT_TOKENS_MAX)
                .map_or(MAX_OUTPUT_TOKENS_DEFAULT, |n| n as u32),
            #[cfg(feature = "fault-injection")]
            panic_marker: env_string(env, "SHIITAKE_FAULT_PANIC_MARKER"),
            tool_timeout_ms: number(env, "SHIITAKE_TOOL_TIMEOUT_MS", 1, TOOL_CALL_TIMEOUT_MS)
                .unwrap_or(TOOL_CALL_TIMEOUT_MS),
            secrets: Secrets::new(
                PROVIDER_KEYS
                    .iter()
                    .filter_map(|name| env_string(env, name))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str),
            ),
            meta: MetaPolicy::new(
                env_string(env, "SHIITAKE_META_SCHEMA").as_deref(),
                env_string(env, "SHIITAKE_IDENTITY_PATH").as_deref(),
            ),
        }
    }

    pub fn attempts(&self) -> Attempts {
        Attempts {
            max: self.retry.attempts_max,
        }
    }
}

fn model(env: &JsValue) -> Result<(ModelSpec, ProviderConfig), String> {
    let spelling = env_string(env, "SHIITAKE_MODEL")
        .ok_or("no model configured: set SHIITAKE_MODEL to provider/model")?;
    let spec = ModelSpec::parse(&spelling)?;
    let prefix = spec.provider.name().to_ascii_uppercase();
    let config = ProviderConfig::new(
        spec.provider,
        env_string(env, &format!("{prefix}_BASE_URL")),
        env_string(env, &format!("{prefix}_API_KEY")),
    );
    Ok((spec, config))
}

/// A numeric setting within bounds; out of bounds or malformed falls back to
/// the default with a warning naming the setting (never its neighbours).
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
