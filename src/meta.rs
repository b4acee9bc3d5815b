//! Host metadata (seed: "Host metadata"): a JSON value the host attaches to
//! every command, checked against the host's schema, capped at 4096 bytes,
//! stored with the entry the command writes and returned with it; and the
//! host's `identityPath`, which names the stable principal inside it.

use crate::error::ApiError;
use crate::json_schema::{SchemaError, Validator};
use crate::limits::META_BYTES_MAX;

/// Why the host's own check (`HostCheck`) did not give a value to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRefusal {
    /// The metadata breaks the host's schema (400 `invalid_meta`); the
    /// message names the field path.
    Invalid(String),
    /// The schema itself failed (threw, went asynchronous, gave a value
    /// that is not JSON): 503 `host_misconfigured`.
    Broken(String),
}

/// The host's own metadata check (the shim runs a Standard Schema, such as
/// Zod 4 or Effect, synchronously): the value to store, or why not. It sees
/// metadata already within the cap and strict JSON; its output is
/// canonicalised and capped again.
pub type HostCheck = Box<dyn Fn(&serde_json::Value) -> Result<serde_json::Value, HostRefusal>>;

/// The host's metadata rules, built once from its configuration.
#[derive(Default)]
pub struct MetaPolicy {
    schema: Option<Validator>,
    host: Option<HostCheck>,
    identity_path: Option<String>,
}

impl std::fmt::Debug for MetaPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaPolicy")
            .field("schema", &self.schema.is_some())
            .field("host", &self.host.is_some())
            .field("identity_path", &self.identity_path)
            .finish()
    }
}

/// Why the host's metadata rules are unusable (a 503
/// `host_misconfigured` where the host states them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    #[error("the metadata schema is not JSON: {0}")]
    NotJson(String),
    #[error("the metadata schema is {0}")]
    Schema(SchemaError),
    #[error("identityPath `{0}` must be a JSON path starting with `$`, at most 256 bytes")]
    IdentityPath(String),
}

impl MetaPolicy {
    /// `schema`: a JSON Schema document (draft 4 to 2020-12, validated by
    /// `boon`, which passes the JSON-Schema-Test-Suite);
    /// `identity_path`: a SQLite JSON path such as `$.author.id`.
    pub fn new(schema: Option<&str>, identity_path: Option<&str>) -> Result<Self, MetaError> {
        let schema = match schema {
            None => None,
            Some(text) => {
                let document: serde_json::Value =
                    serde_json::from_str(text).map_err(|e| MetaError::NotJson(e.to_string()))?;
                // The host's schema is self-contained: no remote `$ref`s.
                let validator = Validator::compile("urn:shiitake:meta-schema", document)
                    .map_err(MetaError::Schema)?;
                Some(validator)
            }
        };
        let identity_path = match identity_path {
            None => None,
            Some(path) if path.starts_with('$') && path.len() <= 256 => Some(path.to_owned()),
            Some(path) => return Err(MetaError::IdentityPath(path.to_owned())),
        };
        Ok(MetaPolicy {
            schema,
            host: None,
            identity_path,
        })
    }

    /// Adds the host's own check, run after the JSON Schema (if any): its
    /// output is what is stored.
    pub fn with_host_check(mut self, check: HostCheck) -> Self {
        self.host = Some(check);
        self
    }

    /// The JSON path of the principal, when the host binds identities.
    pub fn identity_path(&self) -> Option<&str> {
        self.identity_path.as_deref()
    }

    /// Checks the metadata a request carries and returns its canonical JSON
    /// (object keys sorted), so a replay compares values, not spellings.
    pub fn check(&self, header: Option<&str>) -> Result<Option<String>, ApiError> {
        let Some(raw) = header else { return Ok(None) };
        let too_big = || {
            ApiError::InvalidMeta(format!(
                "host metadata: at most {META_BYTES_MAX} bytes of JSON"
            ))
        };
        if raw.len() > META_BYTES_MAX {
            return Err(too_big());
        }
        // A repeated key would let the stored (last-wins) value and SQLite's
        // `json_extract` of the principal disagree.
        let mut value = crate::json::strict(raw.as_bytes())
            .map_err(|e| ApiError::InvalidMeta(format!("host metadata is not JSON: {e}")))?;
        if let Some(validator) = &self.schema {
            if let Err(error) = validator.check(&value) {
                return Err(ApiError::InvalidMeta(format!(
                    "host metadata does not match the host's schema: {error}"
                )));
            }
        }
        if let Some(check) = &self.host {
            value = check(&value).map_err(|refusal| match refusal {
                HostRefusal::Invalid(why) => ApiError::InvalidMeta(why),
                HostRefusal::Broken(why) => ApiError::HostMisconfigured(why),
            })?;
        }
        let canonical = value.to_string();
        if canonical.len() > META_BYTES_MAX {
            return Err(too_big());
        }
        Ok(Some(canonical))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "json-schema")]
    #[test]
    fn metadata_is_capped_validated_and_canonical() {
        let policy = MetaPolicy::new(
            Some(r#"{"type":"object","required":["author"],"properties":{"author":{"type":"object","required":["id"],"properties":{"id":{"type":"string"}}}}}"#),
            Some("$.author.id"),
        )
        .unwrap();
        assert_eq!(
            policy
                .check(Some(r#"{ "author": {"name":"Ada","id":"u1"} }"#))
                .unwrap()
                .as_deref(),
            Some(r#"{"author":{"id":"u1","name":"Ada"}}"#)
        );
        assert_eq!(policy.check(None).unwrap(), None);
        let e = policy.check(Some(r#"{"author":{"id":5}}"#)).unwrap_err();
        assert_eq!(e.code(), "invalid_meta");
        assert!(e.to_string().contains("/author/id"), "{e}");
        assert!(policy.check(Some(r#"{"who":"x"}"#)).is_err());
        assert!(policy.check(Some("{nope")).is_err());
        // 4096 bytes pass, 4097 do not.
        let open = MetaPolicy::default();
        let fill = |n: usize| format!(r#"{{"x":"{}"}}"#, "a".repeat(n - 8));
        assert_eq!(fill(4096).len(), 4096);
        assert!(open.check(Some(&fill(4096))).is_ok());
        assert!(open.check(Some(&fill(4097))).is_err());
    }

    #[test]
    fn the_hosts_check_output_is_stored_canonical_and_capped() {
        let policy = MetaPolicy::new(None, Some("$.author.id"))
            .unwrap()
            .with_host_check(Box::new(|value| {
                match value.pointer("/author/id").and_then(|v| v.as_str()) {
                    Some("broken") => Err(HostRefusal::Broken("the schema threw".into())),
                    Some("big") => Ok(serde_json::json!({ "x": "a".repeat(5000) })),
                    Some(id) => Ok(serde_json::json!({ "author": { "id": id }, "b": 1 })),
                    None => Err(HostRefusal::Invalid("$.author.id: required".into())),
                }
            }));
        assert_eq!(
            policy
                .check(Some(r#"{"author":{"id":"u1","drop":true}}"#))
                .unwrap()
                .as_deref(),
            Some(r#"{"author":{"id":"u1"},"b":1}"#)
        );
        let e = policy.check(Some(r#"{"author":{}}"#)).unwrap_err();
        assert_eq!(e.code(), "invalid_meta");
        assert!(e.to_string().contains("$.author.id"), "{e}");
        let e = policy
            .check(Some(r#"{"author":{"id":"broken"}}"#))
            .unwrap_err();
        assert_eq!(e.code(), "host_misconfigured");
        let e = policy
            .check(Some(r#"{"author":{"id":"big"}}"#))
            .unwrap_err();
        assert_eq!(e.code(), "invalid_meta");
        // Not strict JSON never reaches the host's check.
        assert!(policy
            .check(Some(r#"{"author":{"id":"u1"},"author":{}}"#))
            .is_err());
    }

    /// The lean build (no `json-schema` feature) refuses a metadata schema
    /// as configuration (503 `host_misconfigured`), naming the feature; a
    /// host without a schema, or with its own check, works as before.
    #[cfg(not(feature = "json-schema"))]
    #[test]
    fn a_lean_build_names_the_missing_feature() {
        let e = MetaPolicy::new(Some(r#"{"type":"object"}"#), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`json-schema` Cargo feature"), "{e}");
        assert!(e.starts_with("the metadata schema is unusable"), "{e}");
        let policy = MetaPolicy::new(None, Some("$.author.id")).unwrap();
        assert_eq!(
            policy
                .check(Some(r#"{"author":{"id":"u1"}}"#))
                .unwrap()
                .as_deref(),
            Some(r#"{"author":{"id":"u1"}}"#)
        );
    }

    #[cfg(feature = "json-schema")]
    #[test]
    fn bad_configuration_is_named() {
        assert!(MetaPolicy::new(Some("{"), None)
            .unwrap_err()
            .to_string()
            .starts_with("the metadata schema is not JSON: "));
        assert!(MetaPolicy::new(Some(r#"{"type":"nonsense"}"#), None)
            .unwrap_err()
            .to_string()
            .starts_with("the metadata schema is not a valid JSON Schema: "));
        assert_eq!(
            MetaPolicy::new(None, Some("author.id"))
                .unwrap_err()
                .to_string(),
            "identityPath `author.id` must be a JSON path starting with `$`, at most 256 bytes"
        );
    }
}
