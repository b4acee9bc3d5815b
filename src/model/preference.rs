//! The model-preference resolver (seed: "The /model-preference resolver
//! orders explicit Session, explicit Agent, the person's last manual
//! switch, Team default, then available login"), pure and sans-IO.
//!
//! The host gathers the [`Layers`] (the stored explicit Session and Agent
//! choices, the person's last manual switch and the Team default from its
//! own callbacks) and its [`Policy`] (the offered addresses, the providers
//! signed in, the owner's key-source restriction); [`resolve`] picks the
//! first layer whose address is offered, signed in and allowed, or falls
//! back to the first offered address that is. An address that fails a
//! check is skipped, never used: choosing a model never bypasses the key
//! sources. Nothing left is a bounded diagnostic naming every skip.

use super::{ModelSpec, Provider, Refusal};
use crate::limits::{DIAGNOSTIC_BYTES_MAX, MODELS_OFFERED_MAX, MODEL_ADDRESS_BYTES_MAX};
use serde::{Deserialize, Serialize};
use std::fmt;

/// How hard the model should reason (seed: `modelReasoningLevels`, minimal
/// to max). Each provider maps it to its own wire field (`openai.rs`,
/// `anthropic.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reasoning {
    Minimal,
    Low,
    Medium,
    High,
    Max,
}

impl Reasoning {
    /// Every level, lowest first.
    pub const LEVELS: [Reasoning; 5] = [
        Reasoning::Minimal,
        Reasoning::Low,
        Reasoning::Medium,
        Reasoning::High,
        Reasoning::Max,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reasoning::Minimal => "minimal",
            Reasoning::Low => "low",
            Reasoning::Medium => "medium",
            Reasoning::High => "high",
            Reasoning::Max => "max",
        }
    }

    pub fn parse(text: &str) -> Result<Reasoning, Refusal> {
        Reasoning::LEVELS
            .into_iter()
            .find(|level| level.name() == text)
            .ok_or_else(|| Refusal::UnknownReasoning(crate::text::shorten(text).to_owned()))
    }
}

impl fmt::Display for Reasoning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An explicit choice: a `provider/model` address (as stored, unparsed: a
/// stored address the host no longer offers is skipped, not an error) and
/// its reasoning level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Choice {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Reasoning>,
}

/// The layers, highest precedence first. Each is `None` when unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layers {
    /// The Session's explicit model (stored, `crate::model_choice`).
    pub session: Option<Choice>,
    /// The Agent's explicit model (stored, `agents.setModel`).
    pub agent: Option<Choice>,
    /// The person's last manual switch (the host's callback).
    pub last_switch: Option<String>,
    /// The Team default (the host's), else the deployment's `SHIITAKE_MODEL`.
    pub team_default: Option<String>,
}

/// Which layer a resolution came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Layer {
    Session,
    Agent,
    LastSwitch,
    TeamDefault,
    Login,
}

impl Layer {
    fn label(self) -> &'static str {
        match self {
            Layer::Session => "the Session's model",
            Layer::Agent => "the Agent's model",
            Layer::LastSwitch => "the last manual switch",
            Layer::TeamDefault => "the Team default",
            Layer::Login => "available login",
        }
    }
}

/// What the host offers and admits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// The offered addresses, in the host's order (at most
    /// [`MODELS_OFFERED_MAX`]).
    pub offered: Vec<ModelSpec>,
    /// Providers signed in: a key or a base URL configured.
    pub signed_in: Vec<Provider>,
    /// The owner's key-source restriction: only these providers may be
    /// called. `None`: no restriction.
    pub key_sources: Option<Vec<Provider>>,
}

/// The model a turn calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub spec: ModelSpec,
    pub reasoning: Option<Reasoning>,
    pub layer: Layer,
}

impl Policy {
    /// Whether `spec` may be called: offered, its provider signed in and
    /// not excluded by the key sources. `Err`: why not.
    pub fn admits(&self, spec: &ModelSpec) -> Result<(), Refusal> {
        let address = address(spec);
        let provider = spec.provider.name();
        if !self.offered.contains(spec) {
            return Err(Refusal::NotOffered(address));
        }
        if !self.signed_in.contains(&spec.provider) {
            return Err(Refusal::NotSignedIn { address, provider });
        }
        if let Some(allowed) = &self.key_sources {
            if !allowed.contains(&spec.provider) {
                return Err(Refusal::KeyExcluded { address, provider });
            }
        }
        Ok(())
    }

    /// Parses and admits an address (what `agents.setModel` checks).
    pub fn check(&self, spelling: &str) -> Result<ModelSpec, Refusal> {
        let spec = parse_address(spelling)?;
        self.admits(&spec)?;
        Ok(spec)
    }

    /// The offered addresses a caller may choose (`agents.models`): signed
    /// in, allowed, at most [`MODELS_OFFERED_MAX`], in the host's order.
    pub fn available(&self) -> Vec<String> {
        self.offered
            .iter()
            .filter(|spec| self.admits(spec).is_ok())
            .take(MODELS_OFFERED_MAX)
            .map(address)
            .collect()
    }
}

/// `provider/model`.
pub fn address(spec: &ModelSpec) -> String {
    format!("{}/{}", spec.provider.name(), spec.model)
}

/// [`ModelSpec::parse`] bounded: at most [`MODEL_ADDRESS_BYTES_MAX`] bytes,
/// no whitespace or control characters.
pub fn parse_address(spelling: &str) -> Result<ModelSpec, Refusal> {
    if spelling.len() > MODEL_ADDRESS_BYTES_MAX {
        return Err(Refusal::AddressTooLong(spelling.len()));
    }
    if spelling
        .chars()
        .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(Refusal::AddressSpaces(
            crate::text::shorten(spelling).to_owned(),
        ));
    }
    ModelSpec::parse(spelling)
}

/// A comma-separated list of addresses (`SHIITAKE_MODELS`): at most
/// [`MODELS_OFFERED_MAX`], each parsed; empty items and repeats dropped.
pub fn parse_offered(list: &str) -> Result<Vec<ModelSpec>, Refusal> {
    let mut out: Vec<ModelSpec> = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let spec = parse_address(item)?;
        if !out.contains(&spec) {
            out.push(spec);
        }
        if out.len() > MODELS_OFFERED_MAX {
            return Err(Refusal::TooManyOffered);
        }
    }
    Ok(out)
}

/// The model of a turn: the first layer whose address the policy admits,
/// else the first admitted offered address (available login). `Err`: a
/// bounded diagnostic naming each layer skipped and why.
pub fn resolve(layers: &Layers, policy: &Policy) -> Result<Resolved, Refusal> {
    let mut skipped: Vec<String> = Vec::new();
    let candidates = [
        (
            Layer::Session,
            layers
                .session
                .as_ref()
                .map(|c| (c.model.as_str(), c.reasoning)),
        ),
        (
            Layer::Agent,
            layers
                .agent
                .as_ref()
                .map(|c| (c.model.as_str(), c.reasoning)),
        ),
        (
            Layer::LastSwitch,
            layers.last_switch.as_deref().map(|m| (m, None)),
        ),
        (
            Layer::TeamDefault,
            layers.team_default.as_deref().map(|m| (m, None)),
        ),
    ];
    for (layer, candidate) in candidates {
        let Some((spelling, reasoning)) = candidate else {
            continue;
        };
        match policy.check(spelling) {
            Ok(spec) => {
                return Ok(Resolved {
                    spec,
                    reasoning,
                    layer,
                })
            }
            Err(why) => skipped.push(format!("{} skipped: {why}", layer.label())),
        }
    }
    if let Some(spec) = policy.offered.iter().find(|s| policy.admits(s).is_ok()) {
        return Ok(Resolved {
            spec: spec.clone(),
            reasoning: None,
            layer: Layer::Login,
        });
    }
    let login = if policy.offered.is_empty() {
        "this host offers no model (set SHIITAKE_MODEL or SHIITAKE_MODELS to provider/model)"
            .to_owned()
    } else {
        let providers: Vec<&str> = policy.signed_in.iter().map(|p| p.name()).collect();
        let allowed = match &policy.key_sources {
            Some(allowed) => {
                let names: Vec<&str> = allowed.iter().map(|p| p.name()).collect();
                format!("; key sources allow: {}", or_none(&names))
            }
            None => String::new(),
        };
        format!(
            "no offered model is of a signed-in, allowed provider (signed in: {}{allowed})",
            or_none(&providers)
        )
    };
    skipped.push(login);
    let mut diagnostic = format!("model:unavailable: {}", skipped.join("; "));
    crate::text::truncate(&mut diagnostic, DIAGNOSTIC_BYTES_MAX);
    Err(Refusal::Unavailable(diagnostic))
}

fn or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> ModelSpec {
        ModelSpec::parse(s).unwrap()
    }

    fn choice(model: &str, reasoning: Option<Reasoning>) -> Choice {
        Choice {
            model: model.to_owned(),
            reasoning,
        }
    }

    /// Two providers signed in, four offered addresses, no restriction.
    fn policy() -> Policy {
        Policy {
            offered: ["openai/a", "anthropic/b", "openai/c", "anthropic/d"]
                .map(spec)
                .to_vec(),
            signed_in: vec![Provider::OpenAi, Provider::Anthropic],
            key_sources: None,
        }
    }

    fn all_layers() -> Layers {
        Layers {
            session: Some(choice("openai/a", Some(Reasoning::Low))),
            agent: Some(choice("anthropic/b", Some(Reasoning::High))),
            last_switch: Some("openai/c".into()),
            team_default: Some("anthropic/d".into()),
        }
    }

    #[test]
    fn each_layer_wins_over_the_ones_below_it() {
        let p = policy();
        let mut layers = all_layers();
        let r = resolve(&layers, &p).unwrap();
        assert_eq!(
            (r.layer, address(&r.spec)),
            (Layer::Session, "openai/a".into())
        );
        assert_eq!(r.reasoning, Some(Reasoning::Low));
        layers.session = None;
        let r = resolve(&layers, &p).unwrap();
        assert_eq!(
            (r.layer, address(&r.spec)),
            (Layer::Agent, "anthropic/b".into())
        );
        assert_eq!(r.reasoning, Some(Reasoning::High));
        layers.agent = None;
        let r = resolve(&layers, &p).unwrap();
        assert_eq!(
            (r.layer, address(&r.spec)),
            (Layer::LastSwitch, "openai/c".into())
        );
        assert_eq!(r.reasoning, None);
        layers.last_switch = None;
        let r = resolve(&layers, &p).unwrap();
        assert_eq!(
            (r.layer, address(&r.spec)),
            (Layer::TeamDefault, "anthropic/d".into())
        );
        layers.team_default = None;
        let r = resolve(&layers, &p).unwrap();
        assert_eq!(
            (r.layer, address(&r.spec)),
            (Layer::Login, "openai/a".into())
        );
    }

    #[test]
    fn the_key_source_restriction_is_never_bypassed() {
        let mut p = policy();
        p.key_sources = Some(vec![Provider::OpenAi]);
        // Every anthropic layer is skipped, whatever its precedence.
        let layers = Layers {
            session: Some(choice("anthropic/b", None)),
            agent: Some(choice("anthropic/d", Some(Reasoning::Max))),
            last_switch: Some("anthropic/b".into()),
            team_default: Some("openai/c".into()),
        };
        let r = resolve(&layers, &p).unwrap();
        assert_eq!(
            (r.layer, address(&r.spec)),
            (Layer::TeamDefault, "openai/c".into())
        );
        // Login too skips the excluded provider: the first offered is
        // anthropic's only when openai is excluded.
        p.key_sources = Some(vec![Provider::Anthropic]);
        let r = resolve(&Layers::default(), &p).unwrap();
        assert_eq!(
            (r.layer, address(&r.spec)),
            (Layer::Login, "anthropic/b".into())
        );
        assert!(p
            .check("openai/a")
            .unwrap_err()
            .to_string()
            .contains("key sources exclude"));
        assert_eq!(p.available(), ["anthropic/b", "anthropic/d"]);
        // An empty restriction allows nothing.
        p.key_sources = Some(vec![]);
        let e = resolve(&all_layers(), &p).unwrap_err().to_string();
        assert!(e.contains("key sources allow: none"), "{e}");
        assert!(p.available().is_empty());
    }

    #[test]
    fn unoffered_and_signed_out_addresses_are_skipped() {
        let mut p = policy();
        let layers = Layers {
            session: Some(choice("openai/not-offered", None)),
            agent: Some(choice("not an address", None)),
            last_switch: Some("anthropic/b".into()),
            team_default: None,
        };
        let r = resolve(&layers, &p).unwrap();
        assert_eq!(
            (r.layer, address(&r.spec)),
            (Layer::LastSwitch, "anthropic/b".into())
        );
        // anthropic signs out: its offered addresses are skipped too.
        p.signed_in = vec![Provider::OpenAi];
        let r = resolve(&layers, &p).unwrap();
        assert_eq!(
            (r.layer, address(&r.spec)),
            (Layer::Login, "openai/a".into())
        );
        assert!(p
            .check("anthropic/b")
            .unwrap_err()
            .to_string()
            .contains("not signed in"));
        assert!(p
            .check("openai/zzz")
            .unwrap_err()
            .to_string()
            .contains("not offered"));
        assert_eq!(p.available(), ["openai/a", "openai/c"]);
    }

    #[test]
    fn nothing_available_is_a_bounded_clear_failure() {
        let p = Policy {
            signed_in: vec![],
            ..policy()
        };
        let e = resolve(&all_layers(), &p).unwrap_err().to_string();
        assert!(e.starts_with("model:unavailable: "), "{e}");
        for part in [
            "the Session's model skipped",
            "the Agent's model skipped",
            "the last manual switch skipped",
            "the Team default skipped",
            "signed in: none",
        ] {
            assert!(e.contains(part), "{part} in {e}");
        }
        let none = resolve(&Layers::default(), &Policy::default())
            .unwrap_err()
            .to_string();
        assert!(none.contains("offers no model"), "{none}");
        // Bounded even with huge stored addresses.
        let huge = Layers {
            session: Some(choice(&format!("openai/{}", "x".repeat(100_000)), None)),
            ..Layers::default()
        };
        let e = resolve(&huge, &p).unwrap_err().to_string();
        assert!(e.len() <= DIAGNOSTIC_BYTES_MAX, "{}", e.len());
    }

    #[test]
    fn offered_lists_parse_bounded() {
        let list = parse_offered(" openai/a, anthropic/b,,openai/a ").unwrap();
        assert_eq!(list, vec![spec("openai/a"), spec("anthropic/b")]);
        assert!(parse_offered("openai/a,mistral/x")
            .unwrap_err()
            .to_string()
            .contains("unknown provider"));
        let many: Vec<String> = (0..=MODELS_OFFERED_MAX)
            .map(|i| format!("openai/m{i}"))
            .collect();
        assert!(parse_offered(&many.join(",")).is_err());
        assert_eq!(
            parse_offered(&many[..MODELS_OFFERED_MAX].join(","))
                .unwrap()
                .len(),
            MODELS_OFFERED_MAX
        );
        assert!(parse_address("openai/a\nb").is_err());
        assert!(parse_address(&format!("openai/{}", "x".repeat(MODEL_ADDRESS_BYTES_MAX))).is_err());
    }

    #[test]
    fn reasoning_levels_parse_and_serialise_by_name() {
        for level in Reasoning::LEVELS {
            assert_eq!(Reasoning::parse(level.name()), Ok(level));
            assert_eq!(serde_json::to_value(level).unwrap(), level.name());
        }
        assert!(Reasoning::parse("extreme").is_err());
        let c: Choice = serde_json::from_str(r#"{"model":"openai/a","reasoning":"max"}"#).unwrap();
        assert_eq!(c.reasoning, Some(Reasoning::Max));
        assert!(serde_json::from_str::<Choice>(r#"{"model":"openai/a","x":1}"#).is_err());
    }
}
