//! JSON decoding whose error names where the input is wrong.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Decodes `value` as `T`. The error is serde's message prefixed with the
/// path to the offending field (`operations[2].access: unknown variant
/// ...`), or serde's message alone when the fault is at the root.
pub fn decode<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })
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

    #[test]
    fn errors_name_the_path() {
        let e = decode::<Outer>(json!({ "items": [{ "n": 1 }, { "n": "x" }] })).unwrap_err();
        assert!(e.starts_with("items[1].n: invalid type: string"), "{e}");
        let e = decode::<Outer>(json!([])).unwrap_err();
        assert!(!e.starts_with('.'), "no path at the root: {e}");
        assert!(decode::<Outer>(json!({ "items": [] })).is_ok());
    }
}
