//! Bounded text for messages and diagnostics: every cut falls on a
//! character boundary.

use crate::error::ApiError;
use crate::limits::SESSION_ID_BYTES_MAX;

/// Bytes of a name or path quoted in an error message.
const QUOTED_BYTES_MAX: usize = 64;

/// At most `max` bytes of `s`, cut at a character boundary.
/// Whether `id` is 1 to `max` bytes of `[A-Za-z0-9._:-]`: the one alphabet
/// of the runtime's ids (Sessions, Agents, attention items), safe in a URL
/// path segment and in SQL text.
pub fn is_id(id: &str, max: usize) -> bool {
    !id.is_empty()
        && id.len() <= max
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Session ids are path segments: a small, URL-safe alphabet, bounded.
pub fn validate_session_id(id: &str) -> Result<(), ApiError> {
    if is_id(id, SESSION_ID_BYTES_MAX) {
        Ok(())
    } else {
        Err(ApiError::InvalidRequest(format!(
            "sessionId: 1..={SESSION_ID_BYTES_MAX} bytes of [A-Za-z0-9._:-]"
        )))
    }
}

pub fn prefix(s: &str, max: usize) -> &str {
    &s[..s.floor_char_boundary(max)]
}

/// At most 64 bytes of `s`, for quoting a name in an error message.
pub fn shorten(s: &str) -> &str {
    prefix(s, QUOTED_BYTES_MAX)
}

/// Cuts `s` to at most `max` bytes, ending in `…` when it was longer.
pub fn truncate(s: &mut String, max: usize) {
    const MARK: &str = "…";
    if s.len() > max {
        let cut = s.floor_char_boundary(max.saturating_sub(MARK.len()));
        s.truncate(cut);
        s.push_str(MARK);
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        assert_eq!(prefix("héllo", 2), "h");
        assert_eq!(prefix("abc", 10), "abc");
        let mut s = "ééééé".to_owned();
        truncate(&mut s, 7);
        assert_eq!(s, "éé…");
        assert!(s.len() <= 7);
        let mut short = "abc".to_owned();
        truncate(&mut short, 3);
        assert_eq!(short, "abc");
        assert_eq!(shorten(&"x".repeat(100)).len(), 64);
    }
}
