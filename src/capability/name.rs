//! Names guest code sees: module ids and operation guest identifiers.
//!
//! **Module ids** (`mcp.notes`, `computers.laptop`, `files`) are dot-separated
//! segments of `[a-z][a-z0-9_]*`, at most `MODULE_ID_BYTES_MAX` bytes; no
//! segment may be a [reserved word](is_reserved). Anything else is refused,
//! never rewritten: the host chose the id and should hear about a bad one.
//!
//! **Guest identifiers** are derived from an operation's source name (an MCP
//! tool name, a host function name) by one deterministic mapping, because
//! the source is often not ours to rename:
//!
//! 1. The name is split into words. ASCII letters and digits form words;
//!    every other character (`-`, `.`, space, `_`, `/`, any non-ASCII
//!    character) separates words, and a run of separators counts once.
//!    A camelCase boundary also separates words: an upper-case letter after a
//!    lower-case letter or a digit (`createNote` → `create`, `note`), and the
//!    last upper-case letter of an acronym followed by a lower-case letter
//!    (`HTTPServer` → `http`, `server`).
//! 2. Words are lower-cased and joined with `_` (snake_case).
//! 3. A result starting with a digit gets a leading `_` (`2fa` → `_2fa`).
//! 4. A result that is a reserved word (`delete`, `new`, `then`,
//!    `constructor`, ...) is refused with an error naming the source name:
//!    the guest could not call it as written.
//! 5. A name with no ASCII letter or digit maps to nothing and is refused.
//!
//! So a guest identifier always matches `_?[a-z0-9]+(_[a-z0-9]+)*`: a valid
//! JavaScript identifier that is no reserved word. Two operations of a module
//! whose names map to the same identifier (`a-b`, `a_b`) are refused by the
//! module, naming both.

use crate::limits::{MODULE_ID_BYTES_MAX, OPERATION_NAME_BYTES_MAX};

/// Words a guest identifier or module id segment may not be: JavaScript's
/// reserved words (ES2024, strict mode and module code included: `let`,
/// `static`, `await`, `yield`, `implements`, ...), the literals, the names
/// strict code may not bind (`arguments`, `eval`), `undefined`, the
/// properties that would subvert the object guest code calls through
/// (`constructor`, `prototype`, `__proto__`) and `then`, which would make a
/// module object a thenable that `await` calls by itself.
const RESERVED: &[&str] = &[
    "__proto__",
    "arguments",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "constructor",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "eval",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "implements",
    "import",
    "in",
    "instanceof",
    "interface",
    "let",
    "new",
    "null",
    "package",
    "private",
    "protected",
    "prototype",
    "public",
    "return",
    "static",
    "super",
    "switch",
    "then",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "undefined",
    "var",
    "void",
    "while",
    "with",
    "yield",
];

/// Whether `word` may not be used as a guest identifier or module segment.
pub fn is_reserved(word: &str) -> bool {
    RESERVED.contains(&word)
}

/// Why a module id or an operation name is refused; `Display` names it
/// and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("module id must not be empty")]
    EmptyModuleId,
    /// The id (shortened) and its length.
    #[error("module id `{0}` is {1} bytes; at most {MODULE_ID_BYTES_MAX}")]
    ModuleIdTooLong(String, usize),
    #[error(
        "module id `{id}` is invalid: each dot-separated segment must match \
         [a-z][a-z0-9_]*, got `{segment}`"
    )]
    BadSegment { id: String, segment: String },
    #[error("module id `{id}` is invalid: segment `{segment}` is a reserved word")]
    ReservedSegment { id: String, segment: String },
    #[error("operation name must not be empty")]
    EmptyOperation,
    /// The name (shortened) and its length.
    #[error("operation name `{0}` is {1} bytes; at most {OPERATION_NAME_BYTES_MAX}")]
    OperationTooLong(String, usize),
    #[error("operation name `{0}` has no ASCII letter or digit to form a guest name")]
    NoGuestName(String),
    /// The name (shortened) and the reserved word it maps to.
    #[error(
        "operation name `{0}` maps to `{1}`, a reserved word in guest code; rename the operation"
    )]
    ReservedGuestName(String, String),
}

/// Checks a module id; the error names the id and what is wrong.
pub fn validate_module_id(id: &str) -> Result<(), NameError> {
    if id.is_empty() {
        return Err(NameError::EmptyModuleId);
    }
    if id.len() > MODULE_ID_BYTES_MAX {
        return Err(NameError::ModuleIdTooLong(
            crate::text::shorten(id).to_owned(),
            id.len(),
        ));
    }
    for segment in id.split('.') {
        let mut chars = segment.chars();
        let well_formed = chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !well_formed {
            return Err(NameError::BadSegment {
                id: id.to_owned(),
                segment: segment.to_owned(),
            });
        }
        if is_reserved(segment) {
            return Err(NameError::ReservedSegment {
                id: id.to_owned(),
                segment: segment.to_owned(),
            });
        }
    }
    Ok(())
}

/// Maps an operation's source name to its guest identifier (see the module
/// documentation); the error names the source name.
pub fn guest_name(source: &str) -> Result<String, NameError> {
    if source.is_empty() {
        return Err(NameError::EmptyOperation);
    }
    if source.len() > OPERATION_NAME_BYTES_MAX {
        return Err(NameError::OperationTooLong(
            crate::text::shorten(source).to_owned(),
            source.len(),
        ));
    }
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len() + 2);
    let mut in_word = false;
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_ascii_alphanumeric() {
            in_word = false;
            continue;
        }
        let boundary = in_word
            && c.is_ascii_uppercase()
            && (chars[i - 1].is_ascii_lowercase()
                || chars[i - 1].is_ascii_digit()
                || (chars[i - 1].is_ascii_uppercase()
                    && chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase())));
        if (!in_word || boundary) && !out.is_empty() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
        in_word = true;
    }
    if out.is_empty() {
        return Err(NameError::NoGuestName(source.to_owned()));
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if is_reserved(&out) {
        return Err(NameError::ReservedGuestName(
            crate::text::shorten(source).to_owned(),
            out,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_name_mapping_table() {
        let table = [
            ("create-note", "create_note"),
            ("create_note", "create_note"),
            ("Create Note", "create_note"),
            ("createNote", "create_note"),
            ("CreateNote", "create_note"),
            ("HTTPServer", "http_server"),
            ("getURL", "get_url"),
            ("v2Api", "v2_api"),
            ("base64Encode", "base64_encode"),
            ("sha256", "sha256"),
            ("files.read", "files_read"),
            ("a--b__c  d", "a_b_c_d"),
            ("-leading-and-trailing-", "leading_and_trailing"),
            ("café au lait", "caf_au_lait"),
            ("list/all", "list_all"),
            ("2fa", "_2fa"),
            ("2FA-verify", "_2_fa_verify"),
            ("__proto__", "proto"),
            ("delete-note", "delete_note"),
            ("x", "x"),
        ];
        for (source, guest) in table {
            assert_eq!(guest_name(source).as_deref(), Ok(guest), "{source}");
        }
    }

    #[test]
    fn guest_names_are_identifiers_and_never_reserved() {
        for source in ["2fa", "a b", "__proto__", "X", "9", "_"] {
            let Ok(name) = guest_name(source) else {
                continue;
            };
            assert!(!is_reserved(&name), "{source} -> {name}");
            let mut chars = name.chars();
            let first = chars.next().unwrap();
            assert!(first == '_' || first.is_ascii_lowercase(), "{name}");
            assert!(
                chars.all(|c| c == '_' || c.is_ascii_alphanumeric()),
                "{name}"
            );
        }
    }

    #[test]
    fn reserved_words_are_refused() {
        for source in [
            "delete",
            "Delete",
            "new",
            "then",
            "constructor",
            "prototype",
            "class",
        ] {
            let e = guest_name(source).unwrap_err().to_string();
            assert!(e.contains("reserved word") && e.contains(source), "{e}");
        }
    }

    #[test]
    fn guest_name_refusals_name_the_source() {
        let e = guest_name("---").unwrap_err().to_string();
        assert!(e.contains("`---`"), "{e}");
        let e = guest_name("日本語").unwrap_err().to_string();
        assert!(e.contains("日本語"), "{e}");
        assert!(guest_name("").unwrap_err().to_string().contains("empty"));
        let long = "a".repeat(OPERATION_NAME_BYTES_MAX + 1);
        assert!(guest_name(&long)
            .unwrap_err()
            .to_string()
            .contains("129 bytes"));
        assert!(guest_name(&"a".repeat(OPERATION_NAME_BYTES_MAX)).is_ok());
    }

    #[test]
    fn module_ids() {
        for ok in ["files", "mcp.notes", "computers.laptop", "a.b_2.c", "x9"] {
            assert_eq!(validate_module_id(ok), Ok(()), "{ok}");
        }
        let at_max = format!("a.{}", "b".repeat(MODULE_ID_BYTES_MAX - 2));
        assert_eq!(validate_module_id(&at_max), Ok(()));
        let e = validate_module_id(&format!("{at_max}c"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("65 bytes"), "{e}");
        for bad in [
            "Mcp.notes",
            "mcp..notes",
            ".mcp",
            "mcp.",
            "mcp.2notes",
            "mcp-notes",
            "mcp._x",
            "mcp notes",
            "mcp.nötes",
        ] {
            let e = validate_module_id(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
        }
        let e = validate_module_id("mcp.delete").unwrap_err().to_string();
        assert!(e.contains("`delete` is a reserved word"), "{e}");
        assert_eq!(
            validate_module_id("").unwrap_err().to_string(),
            "module id must not be empty"
        );
    }
}
