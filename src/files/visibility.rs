//! Search visibility (seed files-search): which entries a search or listing
//! shows. One policy per invocation, built from the `.gitignore` texts an
//! adapter supplies; it answers for canonical root-relative paths the way
//! `git check-ignore` would, plus two rules of its own: a `.git` component
//! hides a path, and so does an excluded ancestor directory (git never
//! re-includes below an excluded directory). Exact-path reads do not ask it.
//!
//! The gitignore grammar (globs, `**`, `!` negation, dir-only `/`, anchoring,
//! escapes) is the maintained `ignore` crate's; this module only stacks the
//! per-directory matchers the way git does: the nearest directory's file
//! decides first, then its parents', and within one file the last matching
//! line wins.

use std::cell::RefCell;
use std::collections::HashMap;

#[cfg(feature = "files-search")]
use ignore::gitignore::{Gitignore, GitignoreBuilder};
#[cfg(feature = "files-search")]
use ignore::Match;
/// Without the `files-search` feature no ignore file compiles (a lean build
/// refuses a tree that has one): no matcher is ever made.
#[cfg(not(feature = "files-search"))]
type Gitignore = std::convert::Infallible;

use crate::files::path;
use crate::limits::{IGNORE_BYTES_MAX, IGNORE_FILES_MAX, IGNORE_FILE_BYTES_MAX};

/// Why a search, a glob or an ignore file cannot be used in a build without
/// the `files-search` feature (here, below the search that also says it).
pub const UNAVAILABLE: &str = "this wasm was built without the `files-search` Cargo feature \
    (a lean build, SHIITAKE_LEAN=1), which searches files and applies globs and .gitignore \
    patterns; build with default features";

/// One ignore file's text as an adapter supplies it: `dir` is the canonical
/// root-relative directory holding it (`""` = root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoreFile {
    pub dir: String,
    pub text: String,
}

/// Why the ignore files were refused; the message names the bound or file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VisibilityError {
    #[error("{count} ignore files; a search reads at most {IGNORE_FILES_MAX}")]
    TooManyFiles { count: usize },
    #[error("the .gitignore in {} is {bytes} bytes; at most {IGNORE_FILE_BYTES_MAX}", shown(.dir))]
    FileTooLarge { dir: String, bytes: usize },
    #[error("the ignore files hold {bytes} bytes together; at most {IGNORE_BYTES_MAX}")]
    TooManyBytes { bytes: usize },
    #[error("ignore file directory `{0}` is not a canonical root-relative path")]
    NotCanonical(String),
    #[error("two ignore files for {}", shown(.0))]
    Duplicate(String),
    #[error("the .gitignore in {} cannot be compiled: {reason}", shown(.dir))]
    Compile { dir: String, reason: String },
    #[error("the .gitignore in {} cannot be applied: {}", shown(.0), UNAVAILABLE)]
    Unavailable(String),
}

/// `dir` as an error message names it.
fn shown(dir: &str) -> String {
    if dir.is_empty() {
        "the root".to_owned()
    } else {
        format!("`{}`", crate::text::shorten(dir))
    }
}

/// Why a path is hidden, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hidden {
    /// A component of the path is `.git`.
    GitDir,
    /// `excluded` (the path or one of its ancestor directories) is ignored
    /// by `pattern`, a line of the .gitignore in directory `file_dir`.
    Ignored {
        excluded: String,
        pattern: String,
        file_dir: String,
    },
}

impl std::fmt::Display for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hidden::GitDir => f.write_str("paths with a `.git` component are never shown"),
            Hidden::Ignored {
                excluded,
                pattern,
                file_dir,
            } => write!(
                f,
                "`{}` is excluded by the pattern `{}` of the .gitignore in {}",
                crate::text::shorten(excluded),
                crate::text::shorten(pattern),
                shown(file_dir)
            ),
        }
    }
}

/// One invocation's search visibility policy.
#[derive(Debug)]
pub struct Visibility {
    /// Compiled ignore files by the directory holding them (none without
    /// the `files-search` feature).
    #[cfg_attr(not(feature = "files-search"), allow(dead_code))]
    matchers: HashMap<String, Gitignore>,
    /// Directories already decided in this invocation: whether the
    /// directory itself is ignored by a pattern (its ancestors are checked
    /// separately), so a listing of thousands of files matches each
    /// directory once.
    ignored_dirs: RefCell<HashMap<String, bool>>,
}

impl Visibility {
    /// Bounded: at most [`IGNORE_FILES_MAX`] files, each at most
    /// [`IGNORE_FILE_BYTES_MAX`] bytes, all at most [`IGNORE_BYTES_MAX`]; over
    /// a bound is an error naming it. A line the grammar refuses (a bad glob)
    /// is skipped, as git skips it.
    pub fn new(files: Vec<IgnoreFile>) -> Result<Visibility, VisibilityError> {
        if files.len() > IGNORE_FILES_MAX {
            return Err(VisibilityError::TooManyFiles { count: files.len() });
        }
        let mut total = 0usize;
        for file in &files {
            if file.text.len() > IGNORE_FILE_BYTES_MAX {
                return Err(VisibilityError::FileTooLarge {
                    dir: file.dir.clone(),
                    bytes: file.text.len(),
                });
            }
            total += file.text.len();
        }
        if total > IGNORE_BYTES_MAX {
            return Err(VisibilityError::TooManyBytes { bytes: total });
        }
        #[cfg_attr(not(feature = "files-search"), allow(unused_mut))]
        let mut matchers = HashMap::with_capacity(files.len());
        for file in files {
            if path::normalize(&file.dir).as_deref() != Ok(file.dir.as_str()) {
                return Err(VisibilityError::NotCanonical(
                    crate::text::shorten(&file.dir).to_owned(),
                ));
            }
            if matchers.contains_key(&file.dir) {
                return Err(VisibilityError::Duplicate(file.dir));
            }
            // A lean build (no `files-search` feature) cannot apply a
            // pattern: an ignore file with one is refused, naming the feature.
            #[cfg(not(feature = "files-search"))]
            {
                let patterns = file.text.lines().any(|line| {
                    let line = line.trim_start_matches('\u{feff}').trim();
                    !line.is_empty() && !line.starts_with('#')
                });
                if patterns {
                    return Err(VisibilityError::Unavailable(file.dir));
                }
            }
            #[cfg(feature = "files-search")]
            {
                // Paths are handed over relative to the file's directory, so
                // the matcher's root is `.` (the crate strips nothing then).
                let mut builder = GitignoreBuilder::new(".");
                // Git skips a UTF-8 byte order mark at the start of the file.
                let text = file.text.strip_prefix('\u{feff}').unwrap_or(&file.text);
                for line in text.lines() {
                    // A line the glob parser refuses is skipped, as git does.
                    let _ = builder.add_line(None, line);
                }
                let matcher = builder.build().map_err(|e| VisibilityError::Compile {
                    dir: file.dir.clone(),
                    reason: e.to_string(),
                })?;
                matchers.insert(file.dir, matcher);
            }
        }
        Ok(Visibility {
            matchers,
            ignored_dirs: RefCell::new(HashMap::new()),
        })
    }

    /// Whether a search or listing shows `path` (canonical, root-relative;
    /// `is_dir` says whether it is a directory). False when a component is
    /// `.git`, when an ancestor directory is excluded, or when the deciding
    /// pattern ignores it, as `git check-ignore` would say. The root is
    /// always visible.
    pub fn is_visible(&self, path: &str, is_dir: bool) -> bool {
        if path.is_empty() {
            return true;
        }
        if path.split('/').any(|c| c == ".git") {
            return false;
        }
        // Ancestors top-down: the first excluded one hides the rest.
        for (at, _) in path.match_indices('/') {
            if self.dir_ignored(&path[..at]) {
                return false;
            }
        }
        if is_dir {
            !self.dir_ignored(path)
        } else {
            self.decide(path, false)
                .is_none_or(|(ignored, _, _)| !ignored)
        }
    }

    /// Why `path` is hidden, or `None` when it is visible; the same answer
    /// as [`Visibility::is_visible`], uncached, for error messages.
    pub fn hidden(&self, path: &str, is_dir: bool) -> Option<Hidden> {
        if path.split('/').any(|c| c == ".git") {
            return Some(Hidden::GitDir);
        }
        let ancestors = path.match_indices('/').map(|(at, _)| (&path[..at], true));
        let whole = (!path.is_empty()).then_some((path, is_dir));
        ancestors
            .chain(whole)
            .find_map(|(at, is_dir)| match self.decide(at, is_dir)? {
                (true, pattern, file_dir) => Some(Hidden::Ignored {
                    excluded: at.to_owned(),
                    pattern: pattern.to_owned(),
                    file_dir: file_dir.to_owned(),
                }),
                (false, _, _) => None,
            })
    }

    /// Whether directory `dir` itself is ignored by a pattern, remembered.
    fn dir_ignored(&self, dir: &str) -> bool {
        let cached = self.ignored_dirs.borrow().get(dir).copied();
        cached.unwrap_or_else(|| {
            let ignored = self
                .decide(dir, true)
                .is_some_and(|(ignored, _, _)| ignored);
            self.ignored_dirs
                .borrow_mut()
                .insert(dir.to_owned(), ignored);
            ignored
        })
    }

    /// Without the `files-search` feature there is no pattern (`new`
    /// refused every ignore file that has one).
    #[cfg(not(feature = "files-search"))]
    fn decide(&self, _path: &str, _is_dir: bool) -> Option<(bool, &str, &str)> {
        None
    }

    /// The deciding pattern for `path` alone (ancestors not considered):
    /// the ignore files of its directory and then of each parent, the first
    /// that matches decides. `Some((ignored, pattern, file's directory))`.
    #[cfg(feature = "files-search")]
    fn decide(&self, path: &str, is_dir: bool) -> Option<(bool, &str, &str)> {
        let mut dir = path::parent(path);
        loop {
            if let Some((file_dir, matcher)) = self.matchers.get_key_value(dir) {
                let relative = if dir.is_empty() {
                    path
                } else {
                    &path[dir.len() + 1..]
                };
                match matcher.matched(relative, is_dir) {
                    Match::None => {}
                    Match::Ignore(glob) => return Some((true, glob.original(), file_dir)),
                    Match::Whitelist(glob) => return Some((false, glob.original(), file_dir)),
                }
            }
            if dir.is_empty() {
                return None;
            }
            dir = path::parent(dir);
        }
    }
}

#[cfg(all(test, feature = "files-search"))]
pub(crate) mod tests {
    use super::*;

    /// A policy from `(dir, text)` pairs (the search tests build theirs so).
    pub(crate) fn policy(files: &[(&str, &str)]) -> Visibility {
        Visibility::new(
            files
                .iter()
                .map(|(dir, text)| IgnoreFile {
                    dir: (*dir).to_owned(),
                    text: (*text).to_owned(),
                })
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn nearest_file_decides_and_negation_reincludes() {
        let v = policy(&[("", "*.log\nbuild/\n"), ("keep", "!*.log\n")]);
        assert!(!v.is_visible("a.log", false));
        assert!(!v.is_visible("deep/er/a.log", false));
        assert!(v.is_visible("keep/a.log", false));
        assert!(v.is_visible("keep/sub/a.log", false));
        assert!(!v.is_visible("build", true));
        assert!(v.is_visible("build", false), "`build/` is dir-only");
        assert!(v.is_visible("", true));
        assert!(v.is_visible("src/main.rs", false));
    }

    #[test]
    fn an_excluded_directory_hides_everything_below_it() {
        let v = policy(&[("", "logs/\n!logs/keep.log\n"), ("logs", "!*\n")]);
        assert!(!v.is_visible("logs/keep.log", false));
        assert!(!v.is_visible("logs/a/b.txt", false));
        assert!(!v.is_visible("logs/a", true));
        assert_eq!(
            v.hidden("logs/a/b.txt", false),
            Some(Hidden::Ignored {
                excluded: "logs".into(),
                pattern: "logs/".into(),
                file_dir: "".into()
            })
        );
        // `dir/*` leaves the directory itself unexcluded: negation works.
        let v = policy(&[("", "out/*\n!out/keep.txt\n")]);
        assert!(v.is_visible("out/keep.txt", false));
        assert!(!v.is_visible("out/other.txt", false));
        assert_eq!(v.hidden("out/keep.txt", false), None);
    }

    #[test]
    fn git_components_are_hidden() {
        let v = policy(&[]);
        for path in [".git", ".git/config", "vendor/.git/HEAD", "a/.git"] {
            assert!(!v.is_visible(path, false), "{path}");
            assert_eq!(v.hidden(path, false), Some(Hidden::GitDir));
        }
        for path in [".github/ci.yml", "a.git", ".gitignore", "x/.gitkeep"] {
            assert!(v.is_visible(path, false), "{path}");
        }
    }

    #[test]
    fn bad_lines_are_skipped_and_crlf_and_bom_are_read_as_git_does() {
        let v = policy(&[("", "\u{feff}*.tmp\r\n{a,b\r\nz[\r\nlast\r\n")]);
        assert!(!v.is_visible("x.tmp", false));
        assert!(!v.is_visible("last", false));
        assert!(v.is_visible("x.rs", false));
    }

    #[test]
    fn anchored_patterns_are_relative_to_their_file() {
        let v = policy(&[("sub", "/x\n"), ("", "/y\n")]);
        assert!(!v.is_visible("sub/x", false));
        assert!(v.is_visible("sub/deeper/x", false));
        assert!(v.is_visible("x", false));
        assert!(!v.is_visible("y", false));
        assert!(v.is_visible("sub/y", false));
    }

    #[test]
    fn bounds_are_named() {
        let many = (0..=IGNORE_FILES_MAX)
            .map(|i| IgnoreFile {
                dir: format!("d{i}"),
                text: String::new(),
            })
            .collect();
        assert_eq!(
            Visibility::new(many).unwrap_err(),
            VisibilityError::TooManyFiles {
                count: IGNORE_FILES_MAX + 1
            }
        );
        let big = vec![IgnoreFile {
            dir: "a".into(),
            text: "x".repeat(IGNORE_FILE_BYTES_MAX + 1),
        }];
        let e = Visibility::new(big).unwrap_err().to_string();
        assert!(e.contains("`a` is 65537 bytes; at most 65536"), "{e}");
        let all = (0..=IGNORE_BYTES_MAX / IGNORE_FILE_BYTES_MAX)
            .map(|i| IgnoreFile {
                dir: format!("d{i}"),
                text: "#".repeat(IGNORE_FILE_BYTES_MAX),
            })
            .collect();
        let e = Visibility::new(all).unwrap_err().to_string();
        assert!(e.contains("bytes together; at most 1048576"), "{e}");
        for dir in ["/a", "a/", "a/../b", "./a"] {
            let odd = vec![IgnoreFile {
                dir: dir.into(),
                text: String::new(),
            }];
            assert!(matches!(
                Visibility::new(odd),
                Err(VisibilityError::NotCanonical(_))
            ));
        }
        let twice = vec![
            IgnoreFile {
                dir: String::new(),
                text: "a".into(),
            },
            IgnoreFile {
                dir: String::new(),
                text: "b".into(),
            },
        ];
        assert_eq!(
            Visibility::new(twice).unwrap_err().to_string(),
            "two ignore files for the root"
        );
    }
}
