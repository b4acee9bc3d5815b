//! An HTTP request the core hands the host to make: a model call or an MCP
//! exchange. The host performs it as given (redirects not followed).
//! `Debug` shows no header value but the protocol's own (the others may
//! hold credentials) and no URL query (which may hold a key).

use crate::redact::REDACTED;
use std::fmt;

/// Headers whose values `Debug` may show: they never carry a credential.
const SHOWN_HEADERS: [&str; 4] = [
    "accept",
    "content-type",
    "mcp-protocol-version",
    "anthropic-version",
];

#[derive(Clone, PartialEq, Eq)]
pub struct Outbound {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Outbound {
    /// The value of header `name` (any case), if set.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for Outbound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let shown = SHOWN_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name));
                (name.as_str(), if shown { value.as_str() } else { REDACTED })
            })
            .collect();
        f.debug_struct("Outbound")
            .field("method", &self.method)
            .field("url", &without_query(&self.url))
            .field("headers", &headers)
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

/// The URL up to its query.
pub(crate) fn without_query(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_credential() {
        let request = Outbound {
            method: "POST".into(),
            url: "https://api.example.com/v1/messages?key=sk-url".into(),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("x-api-key".into(), "sk-header".into()),
                ("Authorization".into(), "Bearer sk-bearer".into()),
            ],
            body: "{}".into(),
        };
        let shown = format!("{request:?}");
        assert!(shown.contains("application/json"), "{shown}");
        for secret in ["sk-url", "sk-header", "sk-bearer"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert_eq!(request.header("AUTHORIZATION"), Some("Bearer sk-bearer"));
    }
}
