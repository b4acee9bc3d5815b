//! Input schemas: the subset of JSON Schema the core checks arguments
//! against, and the size and depth bounds of every JSON payload crossing the
//! capability boundary.
//!
//! # The subset
//!
//! A schema node (a JSON object) is decoded by these keywords:
//!
//! | keyword | decoded as |
//! |---|---|
//! | `type: "object"` | `properties` (object of schemas), `required` (array of strings), `additionalProperties` (bool; absent means `true`) |
//! | `type: "array"` | `items` (one schema; absent means any items) |
//! | `type: "string"` | `enum` (of strings), `minLength`, `maxLength` (characters, i.e. Unicode scalar values) |
//! | `type: "number"`, `"integer"` | `minimum`, `maximum` (inclusive); an integer is a number with no fraction (`2.0` is one) |
//! | `type: "boolean"`, `"null"` | nothing more |
//! | `enum` of JSON scalars, with any other `type` or none | membership (numbers compare by value: `1` equals `1.0`) |
//! | `nullable: true` (OpenAPI), `type: [X, "null"]` | also accepts `null` |
//! | `description` | kept for display |
//!
//! Everything else is outside the subset and handled so that the check
//! **never refuses arguments the full schema accepts** (it may accept some
//! the full schema refuses; the operation itself stays the judge):
//!
//! - Keywords that only narrow a value (`format`, `pattern`, `minItems`,
//!   `maxItems`, `uniqueItems`, `multipleOf`, `exclusiveMinimum`,
//!   `exclusiveMaximum`, `const`, `minProperties`, `propertyNames`, ...),
//!   annotations (`title`, `default`, `examples`, `$schema`, `$id`, ...) and
//!   unknown keywords are ignored; the node keeps what it does check
//!   (`{"type": "string", "format": "uri"}` accepts any string).
//! - A node carrying a keyword that combines, references or re-routes
//!   schemas (`$ref`, `allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`,
//!   `patternProperties`, `dependentSchemas`, `prefixItems`, `contains`,
//!   `unevaluatedProperties`, ... — see `APPLICATORS`) is [`Kind::Any`]:
//!   any value, not checked further.
//! - So is a node that is not an object (`true`, `false`), a node without
//!   `type` and `enum`, a `type` naming an unknown type or several non-null
//!   types, an `enum` holding arrays or objects, a subset keyword with a value
//!   of the wrong shape (`"required": "id"`, `"minLength": -1`), a
//!   `"nullable"` that is not a bool, and an array-form (tuple) `items`.
//! - `additionalProperties` given as a schema counts as `true`.
//!
//! The top level describes tool arguments, which are always a JSON object:
//! a top level without `type` is read as `type: "object"`; a permissive top
//! level (e.g. `{"oneOf": ...}`, `{}`, `true`) still accepts exactly the JSON
//! objects; a top level whose type is not `object` (`{"type": "string"}`) is
//! refused when decoded.
//!
//! Bounds: a schema is at most `SCHEMA_BYTES_MAX` bytes as compact JSON, at
//! most `JSON_DEPTH_MAX` JSON levels deep and at most `SCHEMA_DEPTH_MAX`
//! schema levels deep (each `properties` or `items` step is a level; the top
//! level is level 1). A checked value is first bounded by [`check_payload`].

use crate::limits::{
    JSON_DEPTH_MAX, LISTED_MAX, SCHEMA_BYTES_MAX, SCHEMA_DEPTH_MAX, SCHEMA_ERRORS_MAX,
    SCHEMA_ERROR_BYTES_MAX, TOOL_PAYLOAD_BYTES_MAX,
};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::io;

/// Keywords that make a node permissive (see the module documentation).
pub const APPLICATORS: &[&str] = &[
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
    "prefixItems",
    "additionalItems",
    "contains",
    "patternProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
];

/// An operation's input schema: the decoded subset the arguments are checked
/// against, and the schema as given, for display.
#[derive(Debug, Clone, PartialEq)]
pub struct InputSchema {
    root: Schema,
    source: Value,
    source_bytes: usize,
}

/// One decoded schema node.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub kind: Kind,
    /// Also accepts `null` (`nullable: true` or `type: [X, "null"]`).
    pub nullable: bool,
    pub description: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Outside the subset: any value (at the top level: any JSON object).
    Any,
    Object {
        properties: BTreeMap<String, Schema>,
        required: Vec<String>,
        additional_properties: bool,
    },
    Array {
        items: Option<Box<Schema>>,
    },
    String {
        enumeration: Option<Vec<String>>,
        min_length: Option<u64>,
        max_length: Option<u64>,
    },
    Number {
        minimum: Option<f64>,
        maximum: Option<f64>,
    },
    Integer {
        minimum: Option<f64>,
        maximum: Option<f64>,
    },
    Boolean,
    Null,
    /// One of these JSON scalars.
    Enum(Vec<Value>),
}

impl InputSchema {
    /// Decodes a JSON Schema through the subset. Refused only for its bounds
    /// or a top level that does not describe an object; the error names the
    /// JSON pointer where it applies.
    pub fn decode(schema: &Value) -> Result<InputSchema, String> {
        if depth_exceeds(schema, JSON_DEPTH_MAX) {
            return Err(format!("nested deeper than {JSON_DEPTH_MAX} JSON levels"));
        }
        let source_bytes = compact_len(schema, SCHEMA_BYTES_MAX);
        if source_bytes > SCHEMA_BYTES_MAX {
            return Err(format!(
                "larger than {SCHEMA_BYTES_MAX} bytes as compact JSON"
            ));
        }
        let root = node(schema, &mut String::new(), 1, Some("object"))?;
        let type_name = match &root.kind {
            Kind::Any | Kind::Object { .. } => None,
            Kind::Array { .. } => Some("array"),
            Kind::String { .. } => Some("string"),
            Kind::Number { .. } => Some("number"),
            Kind::Integer { .. } => Some("integer"),
            Kind::Boolean => Some("boolean"),
            Kind::Null => Some("null"),
            Kind::Enum(_) => Some("enum"),
        };
        if let Some(type_name) = type_name {
            return Err(format!(
                "/type: the top level must describe a JSON object (\"type\": \"object\"), \
                 got {type_name}"
            ));
        }
        Ok(InputSchema {
            root,
            source: schema.clone(),
            source_bytes,
        })
    }

    /// The schema that accepts any JSON object (`{"type": "object"}`).
    pub fn any_object() -> InputSchema {
        let source = serde_json::json!({ "type": "object" });
        InputSchema::decode(&source).expect("a plain object schema decodes")
    }

    /// The decoded top-level node.
    pub fn root(&self) -> &Schema {
        &self.root
    }

    /// The schema exactly as given.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Bytes of the schema as compact JSON.
    pub fn source_bytes(&self) -> usize {
        self.source_bytes
    }

    /// Whether nothing below "a JSON object" is checked (the top level is
    /// outside the subset, or an object schema without constraints).
    pub fn is_permissive(&self) -> bool {
        match &self.root.kind {
            Kind::Any => true,
            Kind::Object {
                properties,
                required,
                additional_properties,
            } => properties.is_empty() && required.is_empty() && *additional_properties,
            _ => false,
        }
    }

    /// Checks arguments. The error lists up to `SCHEMA_ERRORS_MAX` problems,
    /// `; `-separated, each led by its JSON pointer (`(root)` for the top):
    /// `/items/2/title: expected string, got number`. Depth and size are
    /// [`check_payload`]'s concern; call it first on untrusted values.
    pub fn check(&self, args: &Value) -> Result<(), String> {
        let mut errors = Vec::new();
        let mut at = String::new();
        if self.root.kind == Kind::Any {
            if !args.is_object() {
                mismatch(&self.root, "object", args, &at, &mut errors);
            }
        } else {
            check_node(&self.root, args, &mut at, &mut errors);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

impl Schema {
    fn any(description: Option<String>) -> Schema {
        Schema {
            kind: Kind::Any,
            nullable: false,
            description,
        }
    }
}

fn node(
    value: &Value,
    at: &mut String,
    level: usize,
    default_type: Option<&str>,
) -> Result<Schema, String> {
    if level > SCHEMA_DEPTH_MAX {
        return Err(format!(
            "{}: nested deeper than {SCHEMA_DEPTH_MAX} schema levels",
            pointer(at)
        ));
    }
    let Value::Object(m) = value else {
        return Ok(Schema::any(None));
    };
    let description = m
        .get("description")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if APPLICATORS.iter().any(|k| m.contains_key(*k)) {
        return Ok(Schema::any(description));
    }
    let mut nullable = match m.get("nullable") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Ok(Schema::any(description)),
    };
    let ty: Option<&str> = match m.get("type") {
        None => default_type,
        Some(Value::String(t)) => Some(t),
        Some(Value::Array(types)) if !types.is_empty() => {
            let mut named = None;
            for t in types {
                match t.as_str() {
                    Some("null") => nullable = true,
                    Some(t) if named.is_none() => named = Some(t),
                    _ => return Ok(Schema::any(description)),
                }
            }
            Some(named.unwrap_or("null"))
        }
        Some(_) => return Ok(Schema::any(description)),
    };
    let enumeration = match m.get("enum") {
        None => None,
        Some(Value::Array(values)) if values.iter().all(is_scalar) => Some(values),
        Some(_) => return Ok(Schema::any(description)),
    };
    let kind = match (ty, enumeration) {
        (Some("string"), Some(values)) if values.iter().all(Value::is_string) => {
            string_kind(m, Some(values))
        }
        (_, Some(values)) => Some(Kind::Enum(values.clone())),
        (Some("object"), None) => object_kind(m, at, level)?,
        (Some("array"), None) => match m.get("items") {
            None => Some(Kind::Array { items: None }),
            Some(items @ (Value::Object(_) | Value::Bool(_))) => {
                let len = at.len();
                at.push_str("/items");
                let items = node(items, at, level + 1, None)?;
                at.truncate(len);
                Some(Kind::Array {
                    items: Some(Box::new(items)),
                })
            }
            Some(_) => None,
        },
        (Some("string"), None) => string_kind(m, None),
        (Some("number"), None) => {
            bounds(m).map(|(minimum, maximum)| Kind::Number { minimum, maximum })
        }
        (Some("integer"), None) => {
            bounds(m).map(|(minimum, maximum)| Kind::Integer { minimum, maximum })
        }
        (Some("boolean"), None) => Some(Kind::Boolean),
        (Some("null"), None) => Some(Kind::Null),
        (_, None) => None,
    };
    Ok(match kind {
        Some(kind) => Schema {
            kind,
            nullable,
            description,
        },
        None => Schema::any(description),
    })
}

/// `None`: a keyword of the subset is malformed, so the node is permissive.
fn object_kind(
    m: &Map<String, Value>,
    at: &mut String,
    level: usize,
) -> Result<Option<Kind>, String> {
    let mut properties = BTreeMap::new();
    match m.get("properties") {
        None => {}
        Some(Value::Object(given)) => {
            for (name, schema) in given {
                let len = at.len();
                at.push_str("/properties/");
                push_escaped(at, name);
                properties.insert(name.clone(), node(schema, at, level + 1, None)?);
                at.truncate(len);
            }
        }
        Some(_) => return Ok(None),
    }
    let required = match m.get("required") {
        None => Vec::new(),
        Some(Value::Array(names)) => {
            let Some(names) = names
                .iter()
                .map(|n| n.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
            else {
                return Ok(None);
            };
            names
        }
        Some(_) => return Ok(None),
    };
    let additional_properties = match m.get("additionalProperties") {
        None | Some(Value::Object(_)) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Ok(None),
    };
    Ok(Some(Kind::Object {
        properties,
        required,
        additional_properties,
    }))
}

fn string_kind(m: &Map<String, Value>, enumeration: Option<&Vec<Value>>) -> Option<Kind> {
    Some(Kind::String {
        enumeration: enumeration.map(|values| {
            values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        }),
        min_length: count(m, "minLength")?,
        max_length: count(m, "maxLength")?,
    })
}

/// `Some(None)`: absent; `None`: malformed.
fn count(m: &Map<String, Value>, key: &str) -> Option<Option<u64>> {
    match m.get(key) {
        None => Some(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f <= u64::MAX as f64)
                    .map(|f| f as u64)
            })
            .map(Some),
    }
}

fn bounds(m: &Map<String, Value>) -> Option<(Option<f64>, Option<f64>)> {
    let bound = |key: &str| match m.get(key) {
        None => Some(None),
        Some(v) => v.as_f64().map(Some),
    };
    Some((bound("minimum")?, bound("maximum")?))
}

fn is_scalar(v: &Value) -> bool {
    !(v.is_array() || v.is_object())
}

fn check_node(schema: &Schema, value: &Value, at: &mut String, errors: &mut Vec<String>) {
    if errors.len() >= SCHEMA_ERRORS_MAX || (value.is_null() && schema.nullable) {
        return;
    }
    match &schema.kind {
        Kind::Any => {}
        Kind::Object {
            properties,
            required,
            additional_properties,
        } => {
            let Value::Object(map) = value else {
                return mismatch(schema, "object", value, at, errors);
            };
            for (name, v) in map {
                let len = at.len();
                at.push('/');
                push_escaped(at, name);
                match properties.get(name) {
                    Some(sub) => check_node(sub, v, at, errors),
                    None if !additional_properties => {
                        let known = list(properties.keys().map(|k| k.as_str()));
                        let expected = if known.is_empty() {
                            "this object takes no properties".to_owned()
                        } else {
                            format!("known properties: {known}")
                        };
                        push_error(errors, at, format!("unexpected property; {expected}"));
                    }
                    None => {}
                }
                at.truncate(len);
            }
            for name in required {
                if !map.contains_key(name) {
                    let len = at.len();
                    at.push('/');
                    push_escaped(at, name);
                    push_error(errors, at, "missing required property".into());
                    at.truncate(len);
                }
            }
        }
        Kind::Array { items } => {
            let Value::Array(values) = value else {
                return mismatch(schema, "array", value, at, errors);
            };
            if let Some(items) = items {
                for (i, v) in values.iter().enumerate() {
                    let len = at.len();
                    at.push('/');
                    at.push_str(&i.to_string());
                    check_node(items, v, at, errors);
                    at.truncate(len);
                }
            }
        }
        Kind::String {
            enumeration,
            min_length,
            max_length,
        } => {
            let Value::String(s) = value else {
                return mismatch(schema, "string", value, at, errors);
            };
            if let Some(allowed) = enumeration {
                if !allowed.contains(s) {
                    let listed = list(allowed.iter().map(|a| Value::from(a.as_str()).to_string()));
                    push_error(errors, at, format!("expected one of {listed}"));
                }
                return;
            }
            let chars = s.chars().count() as u64;
            if let Some(min) = min_length.filter(|min| chars < *min) {
                push_error(
                    errors,
                    at,
                    format!("expected at least {min} characters, got {chars}"),
                );
            }
            if let Some(max) = max_length.filter(|max| chars > *max) {
                push_error(
                    errors,
                    at,
                    format!("expected at most {max} characters, got {chars}"),
                );
            }
        }
        Kind::Number { minimum, maximum } | Kind::Integer { minimum, maximum } => {
            let integer = matches!(schema.kind, Kind::Integer { .. });
            let Some(x) = value.as_f64() else {
                let what = if integer { "integer" } else { "number" };
                return mismatch(schema, what, value, at, errors);
            };
            if integer && !(value.is_i64() || value.is_u64() || x.fract() == 0.0) {
                return mismatch(schema, "integer", value, at, errors);
            }
            if let Some(min) = minimum.filter(|min| x < *min) {
                push_error(errors, at, format!("expected at least {min}, got {value}"));
            }
            if let Some(max) = maximum.filter(|max| x > *max) {
                push_error(errors, at, format!("expected at most {max}, got {value}"));
            }
        }
        Kind::Boolean if !value.is_boolean() => mismatch(schema, "boolean", value, at, errors),
        Kind::Null if !value.is_null() => mismatch(schema, "null", value, at, errors),
        Kind::Boolean | Kind::Null => {}
        Kind::Enum(allowed) => {
            if !allowed.iter().any(|a| scalar_eq(a, value)) {
                let listed = list(allowed.iter().map(Value::to_string));
                push_error(errors, at, format!("expected one of {listed}"));
            }
        }
    }
}

fn mismatch(schema: &Schema, expected: &str, got: &Value, at: &str, errors: &mut Vec<String>) {
    let or_null = if schema.nullable { " or null" } else { "" };
    let got = match got {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    push_error(
        errors,
        at,
        format!("expected {expected}{or_null}, got {got}"),
    );
}

fn push_error(errors: &mut Vec<String>, at: &str, message: String) {
    if errors.len() < SCHEMA_ERRORS_MAX {
        let mut error = format!("{}: {message}", pointer(at));
        crate::text::truncate(&mut error, SCHEMA_ERROR_BYTES_MAX);
        errors.push(error);
    }
}

fn pointer(at: &str) -> &str {
    if at.is_empty() {
        "(root)"
    } else {
        at
    }
}

/// One JSON Pointer reference token (RFC 6901: `~` → `~0`, `/` → `~1`).
fn push_escaped(at: &mut String, token: &str) {
    for c in token.chars() {
        match c {
            '~' => at.push_str("~0"),
            '/' => at.push_str("~1"),
            c => at.push(c),
        }
    }
}

fn list<S: AsRef<str>>(items: impl Iterator<Item = S>) -> String {
    let mut out = String::new();
    for (i, item) in items.enumerate() {
        if i == LISTED_MAX {
            out.push_str(", …");
            break;
        }
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(item.as_ref());
    }
    out
}

/// JSON equality of scalars, numbers by value (`1` equals `1.0`).
fn scalar_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        _ => a == b,
    }
}

/// Whether `value` nests arrays and objects deeper than `max` (a scalar is
/// depth 0, `[]` depth 1). Recurses at most `max + 1` levels.
fn depth_exceeds(value: &Value, max: usize) -> bool {
    match value {
        Value::Array(items) => max == 0 || items.iter().any(|v| depth_exceeds(v, max - 1)),
        Value::Object(map) => max == 0 || map.values().any(|v| depth_exceeds(v, max - 1)),
        _ => false,
    }
}

/// Bytes of `value` as compact JSON, counted up to `max + 1` (serialisation
/// stops there). Call only on a value of bounded depth.
fn compact_len(value: &Value, max: usize) -> usize {
    struct Counter {
        bytes: usize,
        max: usize,
    }
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.bytes += buf.len();
            if self.bytes > self.max {
                return Err(io::Error::other("over the cap"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { bytes: 0, max };
    // The only error is the counter's own stop.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.bytes
}

/// Why a payload crossing the capability boundary is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("payload nests arrays and objects deeper than {JSON_DEPTH_MAX} levels")]
    TooDeep,
    #[error("payload is larger than {TOOL_PAYLOAD_BYTES_MAX} bytes as JSON")]
    TooLarge,
    /// The text's length in bytes.
    #[error("payload is {0} bytes; at most {TOOL_PAYLOAD_BYTES_MAX}")]
    TextTooLarge(usize),
    /// serde's reason.
    #[error("payload is not valid JSON: {0}")]
    NotJson(String),
}

/// Bounds a JSON value crossing the capability boundary (tool arguments or
/// a tool result): at most `JSON_DEPTH_MAX` levels of arrays and objects and
/// at most `TOOL_PAYLOAD_BYTES_MAX` bytes as compact JSON.
pub fn check_payload(value: &Value) -> Result<(), PayloadError> {
    if depth_exceeds(value, JSON_DEPTH_MAX) {
        return Err(PayloadError::TooDeep);
    }
    if compact_len(value, TOOL_PAYLOAD_BYTES_MAX) > TOOL_PAYLOAD_BYTES_MAX {
        return Err(PayloadError::TooLarge);
    }
    Ok(())
}

/// Parses a JSON payload given as text under the same bounds as
/// [`check_payload`] (the size is the text's, whitespace included), refusing
/// an oversized or too deep text before parsing it.
pub fn parse_payload(text: &str) -> Result<Value, PayloadError> {
    if text.len() > TOOL_PAYLOAD_BYTES_MAX {
        return Err(PayloadError::TextTooLarge(text.len()));
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > JSON_DEPTH_MAX {
                    return Err(PayloadError::TooDeep);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    serde_json::from_str(text).map_err(|e| PayloadError::NotJson(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(schema: Value) -> InputSchema {
        InputSchema::decode(&schema).unwrap()
    }

    fn nested_arrays(depth: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..depth {
            v = json!([v]);
        }
        v
    }

    /// A realistic MCP tool schema: nested objects, arrays of objects,
    /// enums, nullable fields (both spellings), required lists.
    fn notes_schema() -> Value {
        json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "description": "Create a note",
            "properties": {
                "title": { "type": "string", "minLength": 1, "maxLength": 10 },
                "body": { "type": ["string", "null"], "description": "Markdown" },
                "folder": { "type": "string", "nullable": true, "format": "uri" },
                "priority": { "type": "integer", "minimum": 1, "maximum": 5 },
                "score": { "type": "number", "minimum": 0.5 },
                "pinned": { "type": "boolean" },
                "color": { "type": "string", "enum": ["red", "green"] },
                "level": { "enum": [1, 2, "max", null] },
                "meta": {
                    "type": "object",
                    "properties": { "author": { "type": "string" } },
                    "required": ["author"],
                    "additionalProperties": false
                },
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "title": { "type": "string" },
                            "done": { "type": "boolean" }
                        },
                        "required": ["title"]
                    }
                },
                "tags": { "type": "array", "items": { "type": "string" }, "minItems": 1 }
            },
            "required": ["title"],
            "additionalProperties": false
        })
    }

    #[test]
    fn decodes_a_realistic_mcp_schema() {
        let schema = decode(notes_schema());
        let Kind::Object {
            properties,
            required,
            additional_properties,
        } = &schema.root().kind
        else {
            panic!("{schema:?}")
        };
        assert_eq!(required, &["title"]);
        assert!(!additional_properties);
        assert_eq!(schema.root().description.as_deref(), Some("Create a note"));
        assert_eq!(
            properties["title"].kind,
            Kind::String {
                enumeration: None,
                min_length: Some(1),
                max_length: Some(10)
            }
        );
        assert!(properties["body"].nullable);
        assert_eq!(properties["body"].description.as_deref(), Some("Markdown"));
        assert!(properties["folder"].nullable);
        assert!(matches!(properties["folder"].kind, Kind::String { .. }));
        assert_eq!(
            properties["priority"].kind,
            Kind::Integer {
                minimum: Some(1.0),
                maximum: Some(5.0)
            }
        );
        assert_eq!(
            properties["color"].kind,
            Kind::String {
                enumeration: Some(vec!["red".into(), "green".into()]),
                min_length: None,
                max_length: None
            }
        );
        assert_eq!(
            properties["level"].kind,
            Kind::Enum(vec![json!(1), json!(2), json!("max"), Value::Null])
        );
        let Kind::Array { items: Some(item) } = &properties["items"].kind else {
            panic!()
        };
        assert!(matches!(&item.kind, Kind::Object { required, .. } if required == &["title"]));
        assert_eq!(schema.source(), &notes_schema());
        assert!(!schema.is_permissive());
    }

    #[test]
    fn checks_arguments_with_precise_paths() {
        let schema = decode(notes_schema());
        let ok = json!({
            "title": "hello",
            "body": null,
            "folder": null,
            "priority": 3.0,
            "score": 0.5,
            "pinned": true,
            "color": "red",
            "level": 1.0,
            "meta": { "author": "ann" },
            "items": [{ "title": "a" }, { "title": "b", "done": false, "extra": 1 }],
            "tags": []
        });
        assert_eq!(schema.check(&ok), Ok(()));
        assert_eq!(
            schema.check(&json!({ "title": "x", "level": null })),
            Ok(())
        );

        let cases = [
            (json!({}), "/title: missing required property"),
            (json!({ "title": 5 }), "/title: expected string, got number"),
            (json!({ "title": "" }), "/title: expected at least 1 characters, got 0"),
            (
                json!({ "title": "ééééééééééé" }),
                "/title: expected at most 10 characters, got 11",
            ),
            (
                json!({ "title": "t", "body": 1 }),
                "/body: expected string or null, got number",
            ),
            (
                json!({ "title": "t", "priority": 2.5 }),
                "/priority: expected integer, got number",
            ),
            (
                json!({ "title": "t", "priority": 6 }),
                "/priority: expected at most 5, got 6",
            ),
            (
                json!({ "title": "t", "score": 0.25 }),
                "/score: expected at least 0.5, got 0.25",
            ),
            (
                json!({ "title": "t", "pinned": "yes" }),
                "/pinned: expected boolean, got string",
            ),
            (
                json!({ "title": "t", "color": "blue" }),
                "/color: expected one of \"red\", \"green\"",
            ),
            (
                json!({ "title": "t", "level": 3 }),
                "/level: expected one of 1, 2, \"max\", null",
            ),
            (
                json!({ "title": "t", "meta": {} }),
                "/meta/author: missing required property",
            ),
            (
                json!({ "title": "t", "meta": { "author": "a", "x": 1 } }),
                "/meta/x: unexpected property; known properties: author",
            ),
            (
                json!({ "title": "t", "items": [{ "title": "a" }, {}, { "title": 2 }] }),
                "/items/1/title: missing required property; /items/2/title: expected string, got number",
            ),
            (
                json!({ "title": "t", "tags": ["a", null] }),
                "/tags/1: expected string, got null",
            ),
            (
                json!({ "title": "t", "a/b~c": 1 }),
                "/a~1b~0c: unexpected property; known properties: body, color, folder, items, \
                 level, meta, pinned, priority, score, tags, title",
            ),
            (json!([1]), "(root): expected object, got array"),
            (json!(null), "(root): expected object, got null"),
        ];
        for (args, error) in cases {
            assert_eq!(schema.check(&args), Err(error.to_owned()), "{args}");
        }
    }

    #[test]
    fn reports_at_most_the_first_errors() {
        let schema = decode(json!({
            "type": "object",
            "properties": { "xs": { "type": "array", "items": { "type": "string" } } }
        }));
        let error = schema.check(&json!({ "xs": vec![1; 20] })).unwrap_err();
        assert_eq!(error.matches("expected string").count(), SCHEMA_ERRORS_MAX);
        assert!(error.starts_with("/xs/0: expected string, got number; /xs/1:"));
        let long_key = "k".repeat(10_000);
        let strict = decode(json!({ "type": "object", "additionalProperties": false }));
        let error = strict.check(&json!({ long_key: 1 })).unwrap_err();
        assert!(
            error.len() <= SCHEMA_ERROR_BYTES_MAX && error.ends_with('…'),
            "{error}"
        );
    }

    #[test]
    fn outside_the_subset_is_permissive() {
        // The top level: still exactly the JSON objects.
        for top in [
            json!({ "oneOf": [{ "type": "object" }] }),
            json!({ "$ref": "#/definitions/x", "definitions": {} }),
            json!({ "type": "object", "patternProperties": { "^x": {} }, "additionalProperties": false }),
            json!({}),
            json!(true),
            json!({ "type": "objekt" }),
            json!({ "type": "object", "required": "title" }),
            json!({ "type": ["object", "string"] }),
        ] {
            let schema = decode(top.clone());
            assert!(schema.is_permissive(), "{top}");
            assert_eq!(
                schema.check(&json!({ "anything": [1, { "x": null }] })),
                Ok(())
            );
            assert_eq!(
                schema.check(&json!("text")),
                Err("(root): expected object, got string".into()),
                "{top}"
            );
        }
        // Nested: any value at that node, the rest still checked.
        let schema = decode(json!({
            "type": "object",
            "properties": {
                "union": { "anyOf": [{ "type": "string" }, { "type": "number" }] },
                "tuple": { "type": "array", "items": [{ "type": "string" }] },
                "typo": { "type": "string", "minLength": "3" },
                "untyped": { "properties": { "a": { "type": "string" } } },
                "open": { "type": "object", "additionalProperties": { "type": "string" } },
                "uri": { "type": "string", "format": "uri", "pattern": "^https" },
                "never": false
            },
            "required": ["union"]
        }));
        let Kind::Object { properties, .. } = &schema.root().kind else {
            panic!()
        };
        for name in ["union", "tuple", "typo", "untyped", "never"] {
            assert_eq!(properties[name].kind, Kind::Any, "{name}");
        }
        let args = json!({
            "union": [true], "tuple": {}, "typo": 1, "untyped": 2, "never": 3,
            "open": { "n": 1 }, "uri": "ftp://x"
        });
        assert_eq!(schema.check(&args), Ok(()));
        assert_eq!(
            schema.check(&json!({ "union": 1, "uri": 5 })),
            Err("/uri: expected string, got number".into())
        );
        assert_eq!(
            schema.check(&json!({})),
            Err("/union: missing required property".into())
        );
    }

    #[test]
    fn top_level_must_describe_an_object() {
        // No `type` at the top: read as an object.
        let schema = decode(json!({ "properties": { "n": { "type": "integer" } } }));
        assert_eq!(
            schema.check(&json!({ "n": "1" })),
            Err("/n: expected integer, got string".into())
        );
        for top in [
            json!({ "type": "string" }),
            json!({ "type": "array", "items": {} }),
            json!({ "enum": ["a"] }),
        ] {
            let e = InputSchema::decode(&top).unwrap_err();
            assert!(e.contains("must describe a JSON object"), "{e}");
        }
        // Nullable arguments object.
        let schema = decode(json!({ "type": ["object", "null"] }));
        assert_eq!(schema.check(&Value::Null), Ok(()));
        assert_eq!(InputSchema::any_object().check(&json!({ "a": 1 })), Ok(()));
        assert!(InputSchema::any_object().check(&json!(1)).is_err());
    }

    #[test]
    fn schema_bounds() {
        // SCHEMA_DEPTH_MAX levels of items decode; one more is refused.
        let nested_items = |levels: usize| {
            let mut s = json!({ "type": "string" });
            for _ in 1..levels {
                s = json!({ "type": "array", "items": s });
            }
            json!({ "type": "object", "properties": { "x": s } })
        };
        assert!(InputSchema::decode(&nested_items(SCHEMA_DEPTH_MAX - 1)).is_ok());
        let e = InputSchema::decode(&nested_items(SCHEMA_DEPTH_MAX)).unwrap_err();
        assert!(
            e.starts_with("/properties/x/items/items/")
                && e.ends_with("nested deeper than 32 schema levels"),
            "{e}"
        );
        // Deep nested objects hit the JSON depth bound.
        let mut deep = json!({ "type": "string" });
        for _ in 0..40 {
            deep = json!({ "type": "object", "properties": { "a": deep } });
        }
        assert_eq!(
            InputSchema::decode(&deep).unwrap_err(),
            "nested deeper than 64 JSON levels"
        );
        let big = json!({ "type": "object", "description": "d".repeat(SCHEMA_BYTES_MAX) });
        assert_eq!(
            InputSchema::decode(&big).unwrap_err(),
            "larger than 65536 bytes as compact JSON"
        );
    }

    #[test]
    fn payload_depth_at_the_boundary() {
        assert_eq!(check_payload(&nested_arrays(JSON_DEPTH_MAX)), Ok(()));
        let e = check_payload(&nested_arrays(JSON_DEPTH_MAX + 1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "payload nests arrays and objects deeper than 64 levels"
        );
        let text = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(parse_payload(&text(JSON_DEPTH_MAX)).is_ok());
        assert_eq!(
            parse_payload(&text(JSON_DEPTH_MAX + 1)),
            Err(PayloadError::TooDeep)
        );
        // Brackets inside strings do not count.
        let in_string = format!("{{\"a\": \"{}\\\"{}\"}}", "[".repeat(100), "{".repeat(100));
        assert!(parse_payload(&in_string).is_ok());
        // A scalar is depth 0; objects count like arrays.
        assert_eq!(check_payload(&json!("x")), Ok(()));
        let mut objects = json!(null);
        for _ in 0..=JSON_DEPTH_MAX {
            objects = json!({ "k": objects });
        }
        assert!(check_payload(&objects).is_err());
    }

    #[test]
    fn payload_size_at_the_boundary() {
        // A JSON string of n bytes: its quotes and n - 2 letters.
        let string = |bytes: usize| Value::String("a".repeat(bytes - 2));
        assert_eq!(check_payload(&string(TOOL_PAYLOAD_BYTES_MAX)), Ok(()));
        assert_eq!(
            check_payload(&string(TOOL_PAYLOAD_BYTES_MAX + 1))
                .unwrap_err()
                .to_string(),
            "payload is larger than 262144 bytes as JSON"
        );
        let text = string(TOOL_PAYLOAD_BYTES_MAX).to_string();
        assert_eq!(text.len(), TOOL_PAYLOAD_BYTES_MAX);
        assert_eq!(parse_payload(&text), Ok(string(TOOL_PAYLOAD_BYTES_MAX)));
        let text = string(TOOL_PAYLOAD_BYTES_MAX + 1).to_string();
        assert_eq!(
            parse_payload(&text).unwrap_err().to_string(),
            "payload is 262145 bytes; at most 262144"
        );
        assert!(parse_payload("{")
            .unwrap_err()
            .to_string()
            .starts_with("payload is not valid JSON"));
    }

    #[test]
    fn numbers_compare_by_value() {
        let schema = decode(json!({ "type": "object", "properties": {
            "n": { "type": "number", "enum": [1, 2.5] },
            "big": { "type": "integer", "minimum": 0 }
        }}));
        assert_eq!(schema.check(&json!({ "n": 1.0, "big": u64::MAX })), Ok(()));
        assert_eq!(schema.check(&json!({ "n": 2.5, "big": 0 })), Ok(()));
        assert_eq!(
            schema.check(&json!({ "big": -1 })),
            Err("/big: expected at least 0, got -1".into())
        );
    }
}
