//! JSON Schema validation (draft 4 to 2020-12, by `boon`, which passes the
//! JSON-Schema-Test-Suite): the host's metadata schema and the schemas of
//! extension rows, configuration and command input.

/// One compiled, self-contained schema (no remote `$ref`s).
pub struct Validator {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Validator")
    }
}

impl Validator {
    /// Compiles `document`, named `url` (a `urn:` naming what it checks).
    pub fn compile(url: &str, document: serde_json::Value) -> Result<Self, String> {
        let invalid = |e: &dyn std::fmt::Display| format!("not a valid JSON Schema: {e}");
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

    /// Checks `value`; the refusal is one line naming the failing path.
    pub fn check(&self, value: &serde_json::Value) -> Result<(), String> {
        self.schemas
            .validate(value, self.index)
            .map_err(|e| e.to_string().replace('\n', " "))
    }
}
