//! JSON Schema validation (draft 4 to 2020-12, by `boon`, which passes the
//! JSON-Schema-Test-Suite): the host's metadata schema and the schemas of
//! extension rows, configuration and command input.
//!
//! Behind the Cargo feature `json-schema` (default). Without it (the lean
//! build) no schema compiles: the host's metadata schema is then a
//! configuration error (503 `host_misconfigured`) and an extension whose
//! manifest asks for validation is refused, each naming the missing feature.

/// Why a schema cannot be used in a build without the `json-schema` feature.
pub const UNAVAILABLE: &str = "unusable: this wasm was built without the `json-schema` Cargo \
    feature (a lean build, SHIITAKE_LEAN=1), so it validates no JSON Schema; \
    build with default features, or check the value in the host (meta() with a Standard Schema)";

/// Why a schema does not compile, or a value does not match it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// `boon`'s reason the document is no schema.
    #[error("not a valid JSON Schema: {0}")]
    Invalid(String),
    /// The value breaks the schema: `boon`'s report, on one line.
    #[error("{0}")]
    Mismatch(String),
    /// A build without the `json-schema` feature.
    #[error("{UNAVAILABLE}")]
    Unavailable,
}

/// One compiled, self-contained schema (no remote `$ref`s).
pub struct Validator {
    #[cfg(feature = "json-schema")]
    schemas: boon::Schemas,
    #[cfg(feature = "json-schema")]
    index: boon::SchemaIndex,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Validator")
    }
}

impl Validator {
    /// Compiles `document`, named `url` (a `urn:` naming what it checks).
    #[cfg(feature = "json-schema")]
    pub fn compile(url: &str, document: serde_json::Value) -> Result<Self, SchemaError> {
        let invalid = |e: &dyn std::fmt::Display| SchemaError::Invalid(e.to_string());
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler
            .add_resource(url, document)
            .map_err(|e| invalid(&e))?;
        let index = compiler
            .compile(url, &mut schemas)
            .map_err(|e| invalid(&e))?;
        Ok(Validator { schemas, index })
    }

    /// Without the `json-schema` feature: refused, naming it.
    #[cfg(not(feature = "json-schema"))]
    pub fn compile(_url: &str, _document: serde_json::Value) -> Result<Self, SchemaError> {
        Err(SchemaError::Unavailable)
    }

    /// Checks `value`; the refusal is one line naming the failing path.
    #[cfg(feature = "json-schema")]
    pub fn check(&self, value: &serde_json::Value) -> Result<(), SchemaError> {
        self.schemas
            .validate(value, self.index)
            .map_err(|e| SchemaError::Mismatch(e.to_string().replace('\n', " ")))
    }

    /// Never reached: without the feature no `Validator` is made.
    #[cfg(not(feature = "json-schema"))]
    pub fn check(&self, _value: &serde_json::Value) -> Result<(), SchemaError> {
        Err(SchemaError::Unavailable)
    }
}

#[cfg(all(test, feature = "json-schema"))]
mod tests {
    use super::Validator;
    use serde_json::json;

    /// The IDNA step links no Unicode tables (`idna_adapter` 1.0, Cargo.toml):
    /// `idn-hostname` accepts ASCII hostnames, A-labels included, and refuses
    /// a U-label hostname with a clear message; every other format and the
    /// schema's own URLs behave as before.
    #[test]
    fn idn_hostnames_are_checked_in_their_ascii_form() {
        let v = Validator::compile(
            "urn:idn",
            json!({"$schema": "http://json-schema.org/draft-07/schema#", "format": "idn-hostname"}),
        )
        .unwrap();
        assert_eq!(v.check(&json!("example.com")), Ok(()));
        assert_eq!(v.check(&json!("xn--bcher-kva.example")), Ok(()));
        let refused = v.check(&json!("bücher.example")).unwrap_err().to_string();
        assert!(refused.contains("is not valid idn-hostname"), "{refused}");
        let uri = Validator::compile(
            "urn:uri",
            json!({"$id": "https://schemas.example/meta", "format": "uri"}),
        )
        .unwrap();
        assert_eq!(uri.check(&json!("https://example.com/x")), Ok(()));
    }
}
