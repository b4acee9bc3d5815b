//! Listing and searching a port's files, pure (seed files-search). The port
//! supplies a flat listing of files ([`Entry`]: canonical paths, files only;
//! a directory exists as the prefix of the files it holds), the texts of the
//! ignore files [`ignore_files`] names, and file contents on demand. These
//! functions decide what is shown ([`Visibility`]), in which order, and
//! where a bound cut it; results serialize (camelCase) straight to the model.
//! Searching and globs need the `files-search` Cargo feature (default);
//! without it (the lean build) the search's helpers go unused.
#![cfg_attr(not(feature = "files-search"), allow(unused_imports, dead_code))]

use std::collections::BTreeMap;
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::files::path::{is_within, parent};
#[cfg(not(feature = "files-search"))]
use crate::files::visibility::UNAVAILABLE;
use crate::files::visibility::{Hidden, Visibility};
use crate::limits::{
    FILES_SEARCH_QUERY_BYTES_MAX, FILES_SEARCH_REGEX_BYTES_MAX, FILE_PATH_BYTES_MAX,
    IGNORE_FILES_MAX, LIST_ENTRIES_MAX, SEARCH_FILES_MAX, SEARCH_LINE_BYTES_MAX,
    SEARCH_MATCHES_MAX, SEARCH_SCAN_BYTES_MAX,
};
use crate::text;

/// The ignore files a search reads.
pub const IGNORE_FILE_NAME: &str = ".gitignore";

/// One file of a port's listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub path: String,
    pub size: u64,
}

/// Why a listing or search was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    #[error("`{dir}` is excluded from search: {why}")]
    Excluded { dir: String, why: Hidden },
    #[error("`{0}` is a file, not a directory")]
    NotADirectory(String),
    #[error("no directory `{0}`")]
    NoDirectory(String),
    #[error("{0}")]
    Query(String),
    #[error("{0}")]
    Glob(String),
}

/// The ignore files affecting a search under a directory, shallowest first;
/// `omitted` counts those past [`IGNORE_FILES_MAX`] (the deepest), which the
/// search then does not apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IgnorePaths {
    pub paths: Vec<String>,
    pub omitted: usize,
}

/// The `.gitignore` files that affect a search under directory `under`:
/// those in `under`, in its ancestors and in its descendants. Those in a
/// `.git` directory never apply and are left out.
pub fn ignore_files(entries: &[Entry], under: &str) -> IgnorePaths {
    let mut paths: Vec<&str> = entries
        .iter()
        .map(|e| e.path.as_str())
        .filter(|p| {
            let dir = parent(p);
            p.rsplit('/').next() == Some(IGNORE_FILE_NAME)
                && (is_within(dir, under) || is_within(under, dir))
                && !p.split('/').any(|c| c == ".git")
        })
        .collect();
    // Shallow first: past the bound, the deepest (narrowest) are dropped.
    paths.sort_by_key(|p| (p.matches('/').count(), *p));
    paths.dedup();
    let omitted = paths.len().saturating_sub(IGNORE_FILES_MAX);
    paths.truncate(IGNORE_FILES_MAX);
    IgnorePaths {
        paths: paths.into_iter().map(str::to_owned).collect(),
        omitted,
    }
}

/// Whether a listing entry is a file or a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    File,
    Dir,
}

/// One entry of a listing: a file with its size, or a directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListEntry {
    pub path: String,
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// One page of a listing; `next` is the cursor of the following page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listing {
    pub entries: Vec<ListEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Refuses a `dir` the search does not show, a file, or no directory at all.
fn check_dir(entries: &[Entry], dir: &str, visibility: &Visibility) -> Result<(), SearchError> {
    if dir.is_empty() {
        return Ok(());
    }
    if let Some(why) = visibility.hidden(dir, true) {
        return Err(SearchError::Excluded {
            dir: text::shorten(dir).to_owned(),
            why,
        });
    }
    let mut holds = false;
    for entry in entries {
        if entry.path == dir {
            return Err(SearchError::NotADirectory(text::shorten(dir).to_owned()));
        }
        holds |= is_within(&entry.path, dir);
    }
    if holds {
        Ok(())
    } else {
        Err(SearchError::NoDirectory(text::shorten(dir).to_owned()))
    }
}

/// The visible entries under `dir`, sorted by path, one page of at most
/// [`LIST_ENTRIES_MAX`] after `cursor` (the last path of the page before).
/// Recursive: every visible file. Otherwise the direct children: files, and
/// each subdirectory that holds a visible file, once.
pub fn list(
    entries: &[Entry],
    dir: &str,
    recursive: bool,
    visibility: &Visibility,
    cursor: Option<&str>,
) -> Result<Listing, SearchError> {
    check_dir(entries, dir, visibility)?;
    let mut shown: BTreeMap<&str, Option<u64>> = BTreeMap::new();
    for entry in entries {
        let path = entry.path.as_str();
        if path == dir || !is_within(path, dir) || !visibility.is_visible(path, false) {
            continue;
        }
        let rest = if dir.is_empty() {
            path
        } else {
            &path[dir.len() + 1..]
        };
        match rest.find('/') {
            Some(at) if !recursive => {
                let child = &path[..path.len() - rest.len() + at];
                shown.insert(child, None);
            }
            _ => {
                shown.insert(path, Some(entry.size));
            }
        }
    }
    let after = cursor.map_or(Bound::Unbounded, Bound::Excluded);
    let mut page = shown.range::<str, _>((after, Bound::Unbounded));
    let entries: Vec<ListEntry> = page
        .by_ref()
        .take(LIST_ENTRIES_MAX)
        .map(|(path, size)| ListEntry {
            path: (*path).to_owned(),
            kind: if size.is_some() {
                Kind::File
            } else {
                Kind::Dir
            },
            size: *size,
        })
        .collect();
    let next = match (page.next(), entries.last()) {
        (Some(_), Some(last)) => Some(last.path.clone()),
        _ => None,
    };
    Ok(Listing { entries, next })
}

/// What a search looks for in each line: a literal (default) or a regex,
/// case-insensitive unless asked otherwise.
#[derive(Debug, Clone)]
pub struct Matcher {
    #[cfg(feature = "files-search")]
    regex: regex::Regex,
    /// Never made without the feature.
    #[cfg(not(feature = "files-search"))]
    regex: std::convert::Infallible,
}

impl Matcher {
    /// Without the `files-search` feature: refused, naming it.
    #[cfg(not(feature = "files-search"))]
    pub fn new(_query: &str, _regex: bool, _case_sensitive: bool) -> Result<Matcher, SearchError> {
        Err(SearchError::Query(format!(
            "files cannot be searched: {UNAVAILABLE}"
        )))
    }

    /// A matcher for `query`, at most [`FILES_SEARCH_QUERY_BYTES_MAX`] bytes.
    /// `^` and `$` match at line ends (`\n` or `\r\n`).
    #[cfg(feature = "files-search")]
    pub fn new(query: &str, regex: bool, case_sensitive: bool) -> Result<Matcher, SearchError> {
        if query.is_empty() {
            return Err(SearchError::Query("the search query is empty".into()));
        }
        if query.len() > FILES_SEARCH_QUERY_BYTES_MAX {
            return Err(SearchError::Query(format!(
                "the search query is {} bytes; at most {FILES_SEARCH_QUERY_BYTES_MAX}",
                query.len()
            )));
        }
        let pattern = if regex {
            query.to_owned()
        } else {
            regex::escape(query)
        };
        let regex = regex::RegexBuilder::new(&pattern)
            .case_insensitive(!case_sensitive)
            .multi_line(true)
            .crlf(true)
            .size_limit(FILES_SEARCH_REGEX_BYTES_MAX)
            .dfa_size_limit(FILES_SEARCH_REGEX_BYTES_MAX)
            .build()
            .map_err(|e| {
                SearchError::Query(match e {
                    regex::Error::CompiledTooBig(limit) => {
                        format!("the search regex compiles to more than {limit} bytes; simplify it")
                    }
                    e => format!("the search query is not a valid regex: {e}"),
                })
            })?;
        Ok(Matcher { regex })
    }
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LineMatch {
    pub path: String,
    /// 1-based.
    pub line: usize,
    /// The line, or a window of at most [`SEARCH_LINE_BYTES_MAX`] bytes of
    /// it around the match, `…` marking a cut.
    pub text: String,
}

/// A search's matches, at most [`SEARCH_MATCHES_MAX`]; `truncated` when
/// more lines matched.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Matches {
    pub matches: Vec<LineMatch>,
    pub truncated: bool,
}

/// Without the `files-search` feature there is no matcher.
#[cfg(not(feature = "files-search"))]
pub fn search_file(_path: &str, _content: &str, matcher: &Matcher, _out: &mut Matches) {
    match matcher.regex {}
}

/// Appends the lines of `content` that match (one entry per line, where a
/// match starts); marks `out` truncated at [`SEARCH_MATCHES_MAX`].
#[cfg(feature = "files-search")]
pub fn search_file(path: &str, content: &str, matcher: &Matcher, out: &mut Matches) {
    let mut line = 1;
    let mut counted = 0; // newlines before this byte are in `line`
    let mut at = 0;
    while at <= content.len() && !out.truncated {
        let Some(found) = matcher.regex.find_at(content, at) else {
            return;
        };
        let start = content[..found.start()].rfind('\n').map_or(0, |i| i + 1);
        let end = content[found.start()..]
            .find('\n')
            .map_or(content.len(), |i| found.start() + i);
        if out.matches.len() == SEARCH_MATCHES_MAX {
            out.truncated = true;
            return;
        }
        line += content.as_bytes()[counted..start]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        counted = start;
        let text_line = &content[start..end];
        let text_line = text_line.strip_suffix('\r').unwrap_or(text_line);
        out.matches.push(LineMatch {
            path: path.to_owned(),
            line,
            text: excerpt(text_line, found.start() - start),
        });
        at = end + 1;
    }
}

/// `line` if short; else a window of at most [`SEARCH_LINE_BYTES_MAX`] bytes
/// that shows the match starting at byte `from` (a minified file is one
/// line of megabytes).
fn excerpt(line: &str, from: usize) -> String {
    const MARK: &str = "…";
    if line.len() <= SEARCH_LINE_BYTES_MAX {
        return line.to_owned();
    }
    // Some context before the match, when the match is not near the start.
    let begin = if from <= SEARCH_LINE_BYTES_MAX / 2 {
        0
    } else {
        line.floor_char_boundary(from - SEARCH_LINE_BYTES_MAX / 4)
    };
    let mut shown = if begin == 0 {
        String::new()
    } else {
        MARK.to_owned()
    };
    let room = SEARCH_LINE_BYTES_MAX - shown.len();
    // One character past the room, so `truncate` sees the cut and marks it.
    let mut rest = text::prefix(&line[begin..], room + 4).to_owned();
    text::truncate(&mut rest, room);
    shown.push_str(&rest);
    shown
}

/// A filter on file paths: a glob without `/` (`*.rs`) matches file names
/// at any depth; one with `/` (`src/**/*.ts`) matches the whole
/// root-relative path, `*` staying within one component.
#[derive(Debug, Clone)]
pub struct PathGlob {
    #[cfg(feature = "files-search")]
    glob: globset::GlobMatcher,
    /// Never made without the feature.
    #[cfg(not(feature = "files-search"))]
    glob: std::convert::Infallible,
    whole_path: bool,
}

impl PathGlob {
    /// Without the `files-search` feature: refused, naming it.
    #[cfg(not(feature = "files-search"))]
    pub fn new(_glob: &str) -> Result<PathGlob, SearchError> {
        Err(SearchError::Glob(format!(
            "globs cannot be matched: {UNAVAILABLE}"
        )))
    }

    /// Without the `files-search` feature there is no glob.
    #[cfg(not(feature = "files-search"))]
    pub fn matches(&self, _path: &str) -> bool {
        let _ = self.whole_path;
        match self.glob {}
    }

    /// A filter for `glob`, at most [`FILE_PATH_BYTES_MAX`] bytes.
    #[cfg(feature = "files-search")]
    pub fn new(glob: &str) -> Result<PathGlob, SearchError> {
        if glob.len() > FILE_PATH_BYTES_MAX {
            return Err(SearchError::Glob(format!(
                "glob is {} bytes; at most {FILE_PATH_BYTES_MAX}",
                glob.len()
            )));
        }
        let compiled = globset::GlobBuilder::new(glob)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| {
                SearchError::Glob(format!(
                    "glob `{}` is invalid: {}",
                    text::shorten(glob),
                    e.kind()
                ))
            })?;
        Ok(PathGlob {
            glob: compiled.compile_matcher(),
            whole_path: glob.contains('/'),
        })
    }

    /// Whether `path` (canonical) passes.
    #[cfg(feature = "files-search")]
    pub fn matches(&self, path: &str) -> bool {
        if self.whole_path {
            self.glob.is_match(path)
        } else {
            self.glob.is_match(path.rsplit('/').next().unwrap_or(path))
        }
    }
}

/// The bound that cut a search short; `omitted` files were not searched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "bound", rename_all = "camelCase")]
pub enum Cut {
    /// [`SEARCH_FILES_MAX`] files were searched.
    Files { omitted: usize },
    /// The next file, `next`, would pass [`SEARCH_SCAN_BYTES_MAX`] bytes.
    ScanBytes { omitted: usize, next: String },
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::Files { omitted } => write!(
                f,
                "a search reads at most {SEARCH_FILES_MAX} files; {omitted} more were not searched (narrow `dir` or `glob`)"
            ),
            Cut::ScanBytes { omitted, next } => write!(
                f,
                "a search reads at most {SEARCH_SCAN_BYTES_MAX} bytes; stopped before `{}`, {omitted} files not searched (narrow `dir` or `glob`)",
                text::shorten(next)
            ),
        }
    }
}

/// The files a search reads, in path order, and the bound that cut them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidates<'a> {
    pub files: Vec<&'a Entry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
}

/// The visible files under `dir` that `glob` passes, sorted by path, at most
/// [`SEARCH_FILES_MAX`] of them and [`SEARCH_SCAN_BYTES_MAX`] bytes together.
pub fn candidates<'a>(
    entries: &'a [Entry],
    dir: &str,
    glob: Option<&PathGlob>,
    visibility: &Visibility,
) -> Result<Candidates<'a>, SearchError> {
    check_dir(entries, dir, visibility)?;
    let mut files: Vec<&Entry> = entries
        .iter()
        .filter(|e| {
            e.path != dir
                && is_within(&e.path, dir)
                && glob.is_none_or(|g| g.matches(&e.path))
                && visibility.is_visible(&e.path, false)
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let mut bytes = 0u64;
    let mut cut = None;
    for (i, file) in files.iter().enumerate() {
        if i == SEARCH_FILES_MAX {
            cut = Some((
                i,
                Cut::Files {
                    omitted: files.len() - i,
                },
            ));
            break;
        }
        bytes = bytes.saturating_add(file.size);
        if bytes > SEARCH_SCAN_BYTES_MAX as u64 {
            cut = Some((
                i,
                Cut::ScanBytes {
                    omitted: files.len() - i,
                    next: file.path.clone(),
                },
            ));
            break;
        }
    }
    let cut = cut.map(|(searched, cut)| {
        files.truncate(searched);
        cut
    });
    Ok(Candidates { files, cut })
}

/// The lean build (no `files-search` feature): a search, a glob or an ignore
/// file with a pattern is refused naming the feature; a tree whose ignore
/// files hold no pattern lists as before.
#[cfg(all(test, not(feature = "files-search")))]
mod lean_tests {
    use super::*;
    use crate::files::visibility::IgnoreFile;

    #[test]
    fn a_lean_build_names_the_missing_feature() {
        let named = |e: String| assert!(e.contains("`files-search` Cargo feature"), "{e}");
        named(Matcher::new("x", false, false).unwrap_err().to_string());
        named(PathGlob::new("*.rs").unwrap_err().to_string());
        let file = |text: &str| IgnoreFile {
            dir: "src".into(),
            text: text.into(),
        };
        named(
            Visibility::new(vec![file("target/\n")])
                .unwrap_err()
                .to_string(),
        );
        let policy = Visibility::new(vec![file("\u{feff}# nothing\n\n  \n")]).unwrap();
        assert!(policy.is_visible("src/target/a.rs", false));
        assert!(!policy.is_visible("src/.git/config", false));
        let entries = [Entry {
            path: "src/a.rs".into(),
            size: 1,
        }];
        let listing = list(&entries, "", true, &policy, None).unwrap();
        let paths: Vec<&str> = listing.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["src/a.rs"]);
    }
}

#[cfg(all(test, feature = "files-search"))]
mod tests {
    use super::*;
    use crate::files::visibility::tests::policy;

    fn entries(paths: &[&str]) -> Vec<Entry> {
        paths
            .iter()
            .map(|p| Entry {
                path: (*p).to_owned(),
                size: p.len() as u64,
            })
            .collect()
    }

    const TREE: &[&str] = &[
        ".gitignore",
        "README.md",
        "src/.gitignore",
        "src/main.rs",
        "src/gen/out.rs",
        "src/lib/a.rs",
        "build/app.js",
        "logs/x.log",
        ".git/config",
        "vendor/.git/.gitignore",
        "vendor/x/.gitignore",
        "docs/guide.md",
    ];

    fn tree_policy() -> Visibility {
        policy(&[("", "build/\n*.log\n"), ("src", "gen/\n")])
    }

    #[test]
    fn ignore_files_are_those_above_at_and_below_the_directory() {
        let all = entries(TREE);
        let found = ignore_files(&all, "");
        assert_eq!(
            found.paths,
            [".gitignore", "src/.gitignore", "vendor/x/.gitignore"]
        );
        assert_eq!(found.omitted, 0);
        assert_eq!(
            ignore_files(&all, "src/lib").paths,
            [".gitignore", "src/.gitignore"]
        );
        assert_eq!(ignore_files(&all, "docs").paths, [".gitignore"]);
        let many: Vec<Entry> = (0..IGNORE_FILES_MAX + 3)
            .map(|i| Entry {
                path: format!("d/{i:04}/.gitignore"),
                size: 1,
            })
            .chain(entries(&[".gitignore"]))
            .collect();
        let found = ignore_files(&many, "");
        assert_eq!(found.paths.len(), IGNORE_FILES_MAX);
        assert_eq!(found.paths[0], ".gitignore", "shallowest kept");
        assert_eq!(found.omitted, 4);
    }

    #[test]
    fn a_listing_shows_visible_children_and_directories_once() {
        let all = entries(TREE);
        let v = tree_policy();
        let top = list(&all, "", false, &v, None).unwrap();
        let shown: Vec<(&str, Kind)> = top
            .entries
            .iter()
            .map(|e| (e.path.as_str(), e.kind))
            .collect();
        assert_eq!(
            shown,
            [
                (".gitignore", Kind::File),
                ("README.md", Kind::File),
                ("docs", Kind::Dir),
                ("src", Kind::Dir),
                ("vendor", Kind::Dir),
            ]
        );
        assert_eq!(top.next, None);
        let src = list(&all, "src", false, &v, None).unwrap();
        let paths: Vec<&str> = src.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["src/.gitignore", "src/lib", "src/main.rs"]);
        let deep = list(&all, "", true, &v, None).unwrap();
        let paths: Vec<&str> = deep.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                ".gitignore",
                "README.md",
                "docs/guide.md",
                "src/.gitignore",
                "src/lib/a.rs",
                "src/main.rs",
                "vendor/x/.gitignore"
            ]
        );
        let json = serde_json::to_value(list(&all, "docs", false, &v, None).unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"entries": [{"path": "docs/guide.md", "kind": "file", "size": 13}]})
        );
        let json = serde_json::to_value(&top.entries[2]).unwrap();
        assert_eq!(json, serde_json::json!({"path": "docs", "kind": "dir"}));
    }

    #[test]
    fn listings_page_by_cursor() {
        let many: Vec<Entry> = (0..LIST_ENTRIES_MAX * 2 + 5)
            .map(|i| Entry {
                path: format!("f{i:05}"),
                size: 0,
            })
            .collect();
        let v = policy(&[]);
        let mut cursor = None;
        let mut seen = 0;
        let mut pages = 0;
        loop {
            let page = list(&many, "", false, &v, cursor.as_deref()).unwrap();
            seen += page.entries.len();
            pages += 1;
            match page.next {
                Some(next) => {
                    assert_eq!(Some(&next), page.entries.last().map(|e| &e.path));
                    cursor = Some(next);
                }
                None => break,
            }
        }
        assert_eq!((seen, pages), (many.len(), 3));
        // An exactly full last page has no `next`.
        let exact = &many[..LIST_ENTRIES_MAX];
        assert_eq!(list(exact, "", true, &v, None).unwrap().next, None);
    }

    #[test]
    fn the_directory_must_be_shown_and_exist() {
        let all = entries(TREE);
        let v = tree_policy();
        let e = list(&all, "build", false, &v, None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "`build` is excluded from search: `build` is excluded by the pattern `build/` of the .gitignore in the root"
        );
        let e = list(&all, "src/gen/deeper", true, &v, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`src/gen` is excluded by the pattern `gen/` of the .gitignore in `src`"),
            "{e}"
        );
        let e = candidates(&all, "vendor/.git", None, &v)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`.git` component"), "{e}");
        assert_eq!(
            list(&all, "README.md", false, &v, None).unwrap_err(),
            SearchError::NotADirectory("README.md".into())
        );
        assert_eq!(
            list(&all, "nope", false, &v, None).unwrap_err(),
            SearchError::NoDirectory("nope".into())
        );
        assert_eq!(list(&[], "", false, &v, None).unwrap().entries, []);
    }

    fn search(
        content: &str,
        query: &str,
        regex: bool,
        case_sensitive: bool,
    ) -> Vec<(usize, String)> {
        let matcher = Matcher::new(query, regex, case_sensitive).unwrap();
        let mut out = Matches::default();
        search_file("f", content, &matcher, &mut out);
        out.matches.into_iter().map(|m| (m.line, m.text)).collect()
    }

    #[test]
    fn lines_match_once_with_their_numbers() {
        let content = "fn main() {\r\n    Main(); main()\n}\n\nlast main";
        assert_eq!(
            search(content, "main", false, false),
            [
                (1, "fn main() {".to_owned()),
                (2, "    Main(); main()".to_owned()),
                (5, "last main".to_owned())
            ]
        );
        assert_eq!(search(content, "Main", false, true).len(), 1);
        assert_eq!(search(content, "a.n", false, false), []);
        assert_eq!(search(content, "^}$", true, true), [(3, "}".to_owned())]);
        assert_eq!(search(content, "^$", true, true), [(4, String::new())]);
        assert_eq!(
            search(content, "\\{$", true, true),
            [(1, "fn main() {".to_owned())]
        );
        assert_eq!(search("", "x*", true, false), [(1, String::new())]);
        assert_eq!(search("ÉTÉ été", "été", false, false).len(), 1);
    }

    #[test]
    fn matches_are_bounded_and_long_lines_cut_around_the_match() {
        let many = "hit\n".repeat(SEARCH_MATCHES_MAX + 1);
        let matcher = Matcher::new("hit", false, false).unwrap();
        let mut out = Matches::default();
        search_file("a", &many, &matcher, &mut out);
        assert_eq!(out.matches.len(), SEARCH_MATCHES_MAX);
        assert!(out.truncated);
        search_file("b", "hit", &matcher, &mut out);
        assert_eq!(
            out.matches.len(),
            SEARCH_MATCHES_MAX,
            "a full result takes no more"
        );
        let mut out = Matches::default();
        search_file("a", &"hit\n".repeat(SEARCH_MATCHES_MAX), &matcher, &mut out);
        assert!(!out.truncated, "exactly full is not truncated");

        let long = format!("{}needle{}", "é".repeat(5_000), "x".repeat(5_000));
        let got = search(&long, "needle", false, false);
        let text = &got[0].1;
        assert!(text.len() <= SEARCH_LINE_BYTES_MAX, "{}", text.len());
        assert!(text.starts_with('…') && text.ends_with('…') && text.contains("needle"));
        let early = format!("needle{}", "x".repeat(5_000));
        let text = &search(&early, "needle", false, false)[0].1;
        assert!(text.starts_with("needle") && text.ends_with('…'));
        assert!(text.len() <= SEARCH_LINE_BYTES_MAX);
    }

    #[test]
    fn queries_are_checked() {
        for (query, regex, says) in [
            ("", false, "empty"),
            ("(", true, "not a valid regex"),
            (
                &"x".repeat(FILES_SEARCH_QUERY_BYTES_MAX + 1) as &str,
                false,
                "bytes; at most 1024",
            ),
            (
                "\\w{1000}\\w{1000}",
                true,
                "compiles to more than 1048576 bytes",
            ),
        ] {
            let e = Matcher::new(query, regex, false).unwrap_err().to_string();
            assert!(e.contains(says), "{query:.20}: {e}");
        }
        assert!(
            Matcher::new("(", false, false).is_ok(),
            "a literal is escaped"
        );
    }

    #[test]
    fn globs_filter_names_or_whole_paths() {
        let rs = PathGlob::new("*.rs").unwrap();
        assert!(rs.matches("src/lib/a.rs") && rs.matches("a.rs") && !rs.matches("a.rsx"));
        let deep = PathGlob::new("src/**/*.ts").unwrap();
        assert!(deep.matches("src/a.ts") && deep.matches("src/x/y/a.ts"));
        assert!(!deep.matches("lib/src/a.ts"));
        let one = PathGlob::new("src/*.ts").unwrap();
        assert!(!one.matches("src/x/a.ts"), "`*` stays in one component");
        let alt = PathGlob::new("*.{md,txt}").unwrap();
        assert!(alt.matches("docs/a.md") && alt.matches("b.txt"));
        assert!(PathGlob::new("a[")
            .unwrap_err()
            .to_string()
            .contains("invalid"));
        assert!(PathGlob::new(&"a".repeat(FILE_PATH_BYTES_MAX + 1)).is_err());
    }

    #[test]
    fn candidates_are_visible_filtered_sorted_and_bounded() {
        let all = entries(TREE);
        let v = tree_policy();
        let rs = PathGlob::new("*.rs").unwrap();
        let found = candidates(&all, "", Some(&rs), &v).unwrap();
        let paths: Vec<&str> = found.files.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["src/lib/a.rs", "src/main.rs"]);
        assert_eq!(found.cut, None);
        let under = candidates(&all, "docs", None, &v).unwrap();
        assert_eq!(under.files.len(), 1);

        let many: Vec<Entry> = (0..SEARCH_FILES_MAX + 2)
            .map(|i| Entry {
                path: format!("f{i:05}"),
                size: 1,
            })
            .collect();
        let found = candidates(&many, "", None, &v).unwrap();
        assert_eq!(found.files.len(), SEARCH_FILES_MAX);
        assert_eq!(found.cut, Some(Cut::Files { omitted: 2 }));
        let said = found.cut.unwrap().to_string();
        assert!(said.contains("at most 10000 files; 2 more"), "{said}");

        let big = vec![
            Entry {
                path: "a".into(),
                size: SEARCH_SCAN_BYTES_MAX as u64 - 1,
            },
            Entry {
                path: "b".into(),
                size: 2,
            },
            Entry {
                path: "c".into(),
                size: u64::MAX,
            },
        ];
        let found = candidates(&big, "", None, &v).unwrap();
        assert_eq!(found.files.len(), 1);
        let cut = found.cut.unwrap();
        assert_eq!(
            serde_json::to_value(&cut).unwrap(),
            serde_json::json!({"bound": "scanBytes", "omitted": 2, "next": "b"})
        );
        assert!(cut.to_string().contains("stopped before `b`"));
    }
}
