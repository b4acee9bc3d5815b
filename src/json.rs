//! JSON decoding whose error names where the input is wrong.

use crate::error::ApiError;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

/// Decodes `value` as `T`. The error is serde's message prefixed with the
/// path to the offending field (`operations[2].access: unknown variant
/// ...`), or serde's message alone when the fault is at the root.
#[cfg(feature = "error-paths")]
pub fn decode<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(path_error)
}

// Not generic, so not compiled again for each `T` decoded.
#[cfg(feature = "error-paths")]
#[inline(never)]
fn path_error(e: serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path().to_string();
    let inner = e.into_inner();
    if path == "." {
        inner.to_string()
    } else {
        format!("{path}: {inner}")
    }
}

/// Decodes `value` as `T`. Without the `error-paths` feature (the lean
/// build) the error is serde's message alone, which names the problem
/// (`unknown variant `x`, expected ...`, `missing field `n``) but not where
/// it is.
#[cfg(not(feature = "error-paths"))]
pub fn decode<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// Parses JSON text as `T` by way of a [`Value`]. serde_json's text
/// decoder is compiled once per target type (~2 KB of wasm each, and the
/// deployed wasm's size is bounded); its `Value` decoder is smaller and most
/// types have it already. The text is parsed twice, a cost only where it
/// is small next to the I/O around it (stored rows, the host's specs and
/// replies, a provider's stream events). A value of the wrong shape is
/// named by serde's message without a line and column.
pub fn from_text<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    serde_json::from_value(serde_json::from_str(text)?)
}

/// `serde_json::to_value` by way of JSON text, for the same reason as
/// [`from_text`]: a type serialized to a `Value` directly costs the wasm
/// its own copy of the serializer; through text it shares the one its
/// stored and served JSON uses.
pub fn to_value<T: serde::Serialize + ?Sized>(value: &T) -> Result<Value, serde_json::Error> {
    serde_json::from_str(&serde_json::to_string(value)?)
}

/// Parses JSON text, refusing an object with a repeated key (plain
/// `serde_json` keeps the last one silently, so `{"type":"prompt",
/// "type":"operator"}` would be read as an operator line while another
/// reader, SQLite's `json_extract` among them, sees the first).
pub fn strict(text: &[u8]) -> Result<serde_json::Value, serde_json::Error> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_slice(text);
    let value = unique_keys::Value.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

mod unique_keys {
    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Number};
    use std::fmt;

    /// A `serde_json::Value` whose objects have distinct keys.
    pub struct Value;

    impl<'de> DeserializeSeed<'de> for Value {
        type Value = serde_json::Value;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Value {
        type Value = serde_json::Value;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
            Ok(v.into())
        }
        fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
            Ok(v.into())
        }
        fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
            Ok(v.into())
        }
        fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Number::from_f64(v).map_or(serde_json::Value::Null, Into::into))
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.into())
        }
        fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
            Ok(v.into())
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(serde_json::Value::Null)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element_seed(Value)? {
                items.push(item);
            }
            Ok(items.into())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut object = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                if object.contains_key(&key) {
                    return Err(de::Error::custom(format_args!(
                        "duplicate key `{}`",
                        crate::text::shorten(&key)
                    )));
                }
                let value = map.next_value_seed(Value)?;
                object.insert(key, value);
            }
            Ok(object.into())
        }
    }
}

/// Deserialises a request body (a JSON object); the error names the
/// offending field.
pub fn parse_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    // Syntax first, so malformed JSON and schema violations stay distinct.
    let value = crate::json::strict(body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    from_value(value)
}

pub fn from_value<T: for<'de> Deserialize<'de>>(value: serde_json::Value) -> Result<T, ApiError> {
    check_body(&value)?;
    crate::json::decode(value).map_err(ApiError::InvalidRequest)
}

// Not generic, so not compiled again for each body type.
#[inline(never)]
fn check_body(value: &serde_json::Value) -> Result<(), ApiError> {
    // Bodies are JSON objects (serde would also read a struct from an
    // array, positionally), and a field is given or omitted: `null` is not
    // a spelling of "absent".
    let Some(object) = value.as_object() else {
        return Err(ApiError::InvalidRequest(
            "the body must be a JSON object".into(),
        ));
    };
    if let Some(path) = null_field(object, "") {
        return Err(ApiError::InvalidRequest(format!(
            "{path}: null is not allowed; omit the field instead"
        )));
    }
    Ok(())
}

/// The path of the first `null` object member in `object`, nested objects
/// and arrays included (array elements that are `null` are left to the
/// schema).
fn null_field(object: &serde_json::Map<String, serde_json::Value>, at: &str) -> Option<String> {
    use serde_json::Value;
    for (key, value) in object {
        // Built only where it may be needed: most members are scalars.
        let path = || {
            if at.is_empty() {
                crate::text::shorten(key).to_owned()
            } else {
                format!("{at}.{}", crate::text::shorten(key))
            }
        };
        let found = match value {
            Value::Null => Some(path()),
            Value::Object(inner) => null_field(inner, &path()),
            Value::Array(items) => {
                let path = path();
                items.iter().enumerate().find_map(|(i, item)| {
                    item.as_object()
                        .and_then(|inner| null_field(inner, &format!("{path}[{i}]")))
                })
            }
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::decode;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        items: Vec<Inner>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        n: u8,
    }

    #[cfg(feature = "error-paths")]
    #[test]
    fn errors_name_the_path() {
        let e = decode::<Outer>(json!({ "items": [{ "n": 1 }, { "n": "x" }] })).unwrap_err();
        assert!(e.starts_with("items[1].n: invalid type: string"), "{e}");
        let e = decode::<Outer>(json!([])).unwrap_err();
        assert!(!e.starts_with('.'), "no path at the root: {e}");
        assert!(decode::<Outer>(json!({ "items": [] })).is_ok());
    }

    /// The lean build (no `error-paths` feature) names the problem without
    /// the path to it.
    #[cfg(not(feature = "error-paths"))]
    #[test]
    fn a_lean_build_decodes_without_the_field_path() {
        let e = decode::<Outer>(json!({ "items": [{ "n": 1 }, { "n": "x" }] })).unwrap_err();
        assert!(
            e.starts_with("invalid type: string \"x\", expected u8"),
            "{e}"
        );
        let e = decode::<Outer>(json!({ "items": [{}] })).unwrap_err();
        assert_eq!(e, "missing field `n`");
        let e = decode::<Outer>(json!({ "items": [], "extra": 1 })).unwrap_err();
        assert!(e.starts_with("unknown field `extra`"), "{e}");
        assert!(decode::<Outer>(json!({ "items": [] })).is_ok());
    }
}
