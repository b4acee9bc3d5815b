//! The one redaction step for text that came from a provider or an MCP
//! server: every configured secret (API keys, MCP header values) is replaced
//! by `<redacted>` before such text reaches a diagnostic, a frame, a
//! settlement, a tool result or a log line.
//!
//! Providers echo keys in several forms: whole ("Incorrect API key provided:
//! sk-…"), after `Bearer `, or cut (a prefix, a masked middle). So a secret
//! token of at least `SECRET_FRAGMENT_BYTES_MIN` bytes is matched by any
//! fragment of that length or longer: every run of text that is a substring
//! of the token goes, which also covers a prefix left by a truncation. A
//! shorter secret is replaced where it occurs whole.

use crate::limits::SECRET_FRAGMENT_BYTES_MIN;
use std::collections::HashMap;
use std::fmt;

/// What a secret is replaced by.
pub const REDACTED: &str = "<redacted>";

/// The secret values of one host. `Debug` shows only how many there are.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Tokens matched by fragment (no whitespace, ≥ the fragment minimum).
    tokens: Vec<Vec<u8>>,
    /// Every window of `SECRET_FRAGMENT_BYTES_MIN` bytes of every token:
    /// where a fragment match may start.
    windows: HashMap<[u8; SECRET_FRAGMENT_BYTES_MIN], Vec<usize>>,
    /// Whole values (trimmed), replaced where they occur whole; longest first.
    whole: Vec<String>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} values)", self.whole.len())
    }
}

impl Secrets {
    /// `values`: header values or keys as configured (`Bearer abc…` gives
    /// the whole value and its token `abc…`).
    pub fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut secrets = Secrets::default();
        for value in values {
            secrets.add(value);
        }
        secrets
    }

    pub fn add(&mut self, value: &str) {
        let value = value.trim();
        if value.is_empty() {
            return;
        }
        if !self.whole.iter().any(|w| w == value) {
            self.whole.push(value.to_owned());
            self.whole.sort_by_key(|w| std::cmp::Reverse(w.len()));
        }
        for word in value.split_whitespace() {
            let word = word.as_bytes();
            if word.len() < SECRET_FRAGMENT_BYTES_MIN || self.tokens.iter().any(|t| t == word) {
                continue;
            }
            let index = self.tokens.len();
            for window in word.windows(SECRET_FRAGMENT_BYTES_MIN) {
                let key: [u8; SECRET_FRAGMENT_BYTES_MIN] =
                    window.try_into().expect("windows have the fragment length");
                let entry = self.windows.entry(key).or_default();
                if !entry.contains(&index) {
                    entry.push(index);
                }
            }
            self.tokens.push(word.to_vec());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.whole.is_empty()
    }

    /// `text` with every secret (whole, or any fragment of a token of at
    /// least the fragment minimum) replaced by [`REDACTED`]. Linear in the
    /// text for the common case (one hash probe per byte).
    pub fn redact(&self, text: &str) -> String {
        if self.is_empty() {
            return text.to_owned();
        }
        let mut text = text.to_owned();
        for value in &self.whole {
            if text.contains(value.as_str()) {
                text = text.replace(value.as_str(), REDACTED);
            }
        }
        if self.tokens.is_empty() || text.len() < SECRET_FRAGMENT_BYTES_MIN {
            return text;
        }
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        let mut at = 0;
        while at + SECRET_FRAGMENT_BYTES_MIN <= bytes.len() {
            let end = self.fragment_end(bytes, at);
            if end == at {
                at += 1;
                continue;
            }
            // Whole characters only (a secret with non-ASCII bytes may
            // match from inside one).
            let start = text.floor_char_boundary(at);
            let end = text.ceil_char_boundary(end);
            if start >= copied {
                out.push_str(&text[copied..start]);
                out.push_str(REDACTED);
                copied = end;
            }
            at = end.max(at + 1);
        }
        out.push_str(&text[copied..]);
        out
    }

    /// The end of the longest run of `bytes` from `at` that is a substring
    /// of one token and at least the fragment minimum long, or `at`.
    fn fragment_end(&self, bytes: &[u8], at: usize) -> usize {
        let window: [u8; SECRET_FRAGMENT_BYTES_MIN] = bytes[at..at + SECRET_FRAGMENT_BYTES_MIN]
            .try_into()
            .expect("the caller checked the length");
        let Some(candidates) = self.windows.get(&window) else {
            return at;
        };
        let mut best = at;
        for &index in candidates {
            let token = &self.tokens[index];
            let mut len = SECRET_FRAGMENT_BYTES_MIN;
            // Grow while the run is still somewhere in the token.
            while at + len < bytes.len() && contains(token, &bytes[at..at + len + 1]) {
                len += 1;
            }
            best = best.max(at + len);
        }
        best
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-proj-Zx81qLm0PaB7uYt3VnC5wR2s";

    #[test]
    fn removes_a_key_whole_bearer_and_cut() {
        let secrets = Secrets::new([KEY]);
        for (text, want) in [
            (
                format!("Incorrect API key provided: {KEY}. See the docs."),
                "Incorrect API key provided: <redacted>. See the docs.".to_owned(),
            ),
            (
                format!("header was: Bearer {KEY}"),
                "header was: Bearer <redacted>".to_owned(),
            ),
            // A long prefix, as a truncated echo leaves it.
            (format!("key {}…", &KEY[..14]), "key <redacted>…".to_owned()),
            // A masked middle: prefix and suffix fragments both go.
            (
                format!("key {}****{}", &KEY[..10], &KEY[KEY.len() - 9..]),
                "key <redacted>****<redacted>".to_owned(),
            ),
            (
                "nothing secret here".to_owned(),
                "nothing secret here".to_owned(),
            ),
        ] {
            assert_eq!(secrets.redact(&text), want);
        }
    }

    #[test]
    fn header_values_give_the_whole_value_and_each_token() {
        let secrets = Secrets::new(["Bearer tok_5f2b9c1d7e", "x1"]);
        assert_eq!(
            secrets.redact("got Bearer tok_5f2b9c1d7e and tok_5f2b9c1d7e and x1"),
            "got <redacted> and <redacted> and <redacted>"
        );
        // `Bearer` alone is not a secret.
        assert_eq!(secrets.redact("use Bearer auth"), "use Bearer auth");
    }

    #[test]
    fn short_fragments_and_unicode_are_safe() {
        let secrets = Secrets::new(["ключ-секрет-42"]);
        let text = "ошибка: ключ-секрет-42 и код";
        assert_eq!(secrets.redact(text), "ошибка: <redacted> и код");
        // A non-ASCII prefix of a token goes too.
        let cut = &"ключ-секрет-42"[..11];
        assert_eq!(secrets.redact(&format!("{cut}!")), "<redacted>!");
        // A fragment shorter than the minimum is left alone.
        assert_eq!(Secrets::new([KEY]).redact("sk-proj"), "sk-proj");
        assert_eq!(Secrets::default().redact(KEY), KEY);
    }

    #[test]
    fn debug_shows_no_value() {
        let shown = format!("{:?}", Secrets::new([KEY]));
        assert!(!shown.contains("sk-"), "{shown}");
    }
}
