//! File paths as the files module accepts them (seed: "Paths are validated,
//! not confined by Knapsack: the captured host port enforces its own root").
//!
//! A path is root-relative and canonical: `/` separated, no empty, `.` or
//! `..` component left, no leading or trailing `/`. The root itself is the
//! empty path. Input may say `./a//b/../c` or `/a/c`; both read `a/c`. A
//! `..` that climbs above the root, a NUL or other control character, a
//! backslash (a separator on some hosts, a name character on others) and a
//! path over [`FILE_PATH_BYTES_MAX`] bytes or [`FILE_PATH_DEPTH_MAX`]
//! components are refused with a message naming the path.

use crate::limits::{FILE_PATH_BYTES_MAX, FILE_PATH_DEPTH_MAX};

/// Why a path was refused; the message quotes (a bounded prefix of) it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PathError(pub String);

/// The canonical form of `raw`, the root being `""`.
pub fn normalize(raw: &str) -> Result<String, PathError> {
    let shown = || crate::text::shorten(raw).to_owned();
    if raw.len() > FILE_PATH_BYTES_MAX {
        return Err(PathError(format!(
            "path `{}…` is {} bytes; at most {FILE_PATH_BYTES_MAX}",
            crate::text::prefix(raw, 64),
            raw.len()
        )));
    }
    if let Some(c) = raw.chars().find(|c| c.is_control()) {
        let what = if c == '\0' {
            "a NUL byte".to_owned()
        } else {
            format!("the control character U+{:04X}", c as u32)
        };
        return Err(PathError(format!(
            "path `{}` contains {what}",
            shown().escape_debug()
        )));
    }
    if raw.contains('\\') {
        return Err(PathError(format!(
            "path `{}` contains a backslash; separate components with `/`",
            shown()
        )));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in raw.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(PathError(format!(
                        "path `{}` climbs above the root with `..`",
                        shown()
                    )));
                }
            }
            part => parts.push(part),
        }
    }
    if parts.len() > FILE_PATH_DEPTH_MAX {
        return Err(PathError(format!(
            "path `{}` has {} components; at most {FILE_PATH_DEPTH_MAX}",
            shown(),
            parts.len()
        )));
    }
    Ok(parts.join("/"))
}

/// The canonical form of a path that must name a file (not the root).
pub fn normalize_file(raw: &str) -> Result<String, PathError> {
    let path = normalize(raw)?;
    if path.is_empty() {
        return Err(PathError(format!(
            "path `{}` names the root, not a file",
            crate::text::shorten(raw)
        )));
    }
    Ok(path)
}

/// The directory holding `path` (`""` for a top-level entry).
pub fn parent(path: &str) -> &str {
    path.rfind('/').map_or("", |at| &path[..at])
}

/// Whether `path` is `dir` or lies under it (`dir` canonical, `""` the root).
pub fn is_within(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        for (raw, want) in [
            ("a/b.txt", "a/b.txt"),
            ("./a//b/../c", "a/c"),
            ("/a/c/", "a/c"),
            ("", ""),
            (".", ""),
            ("/", ""),
            ("a/..", ""),
            ("a/./b/./", "a/b"),
            ("ünï/cödé.rs", "ünï/cödé.rs"),
            ("a b/c d", "a b/c d"),
            ("..a/b..", "..a/b.."),
        ] {
            assert_eq!(normalize(raw).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn refused_paths_name_the_problem() {
        for (raw, says) in [
            ("../x", "climbs above the root"),
            ("a/../../x", "climbs above the root"),
            ("/..", "climbs above the root"),
            ("a\0b", "NUL"),
            ("a\nb", "U+000A"),
            ("a\\b", "backslash"),
        ] {
            let e = normalize(raw).unwrap_err().0;
            assert!(e.contains(says), "{raw:?}: {e}");
        }
        let long = "a".repeat(FILE_PATH_BYTES_MAX + 1);
        assert!(normalize(&long).unwrap_err().0.contains("bytes; at most"));
        assert!(normalize(&"a".repeat(FILE_PATH_BYTES_MAX)).is_ok());
        let deep = vec!["d"; FILE_PATH_DEPTH_MAX + 1].join("/");
        assert!(normalize(&deep)
            .unwrap_err()
            .0
            .contains("components; at most"));
        assert!(normalize(&vec!["d"; FILE_PATH_DEPTH_MAX].join("/")).is_ok());
        assert!(normalize_file("./")
            .unwrap_err()
            .0
            .contains("names the root"));
    }

    #[test]
    fn parents_and_containment() {
        assert_eq!(parent("a/b/c"), "a/b");
        assert_eq!(parent("c"), "");
        assert!(is_within("a/b", "a"));
        assert!(is_within("a", "a"));
        assert!(is_within("a", ""));
        assert!(!is_within("ab", "a"));
        assert!(!is_within("a", "a/b"));
    }
}
