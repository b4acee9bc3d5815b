//! The patch engine (seed: apply_patch, files-patch), sans-IO: the OpenAI
//! Codex `apply_patch` format, which models are trained to write.
//!
//! [`parse`] reads a patch (grammar and leniencies in `parse.rs`);
//! [`Patch::reads`] names the files whose content applying it needs;
//! [`Patch::apply`] computes every write from that content, all or none
//! (matching in `seek.rs`, editing in `apply.rs`); the host performs the
//! writes through its port. [`applied`] is the tool's output, and
//! [`INPUT_SCHEMA`] and [`OUTPUT_SCHEMA`] its contracts, which browsers get
//! from `js/files-patch.mjs` without the runtime.

mod apply;
mod parse;
mod seek;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::files::path::PathError;
use crate::limits::{
    FILE_BYTES_MAX, PATCH_CHARS_MAX, PATCH_EXCERPT_BYTES_MAX, PATCH_FILES_MAX, PATCH_HUNKS_MAX,
    PATCH_MATCH_STEPS_MAX,
};
use crate::text::{prefix, truncate};

/// The apply_patch tool's input: `{ input: <patch text> }`. It is also the
/// tool's `inputSchema`, so its description teaches models the grammar.
pub const INPUT_SCHEMA: &str = include_str!("../../../schemas/files-patch.input.json");
/// The apply_patch tool's output, [`applied`].
pub const OUTPUT_SCHEMA: &str = include_str!("../../../schemas/files-patch.output.json");

// An added file's content is shorter than the patch text (at most four
// bytes a character), so only an update can outgrow the file bound.
const _: () = assert!(4 * PATCH_CHARS_MAX <= FILE_BYTES_MAX);

/// A parsed patch: its file sections, in patch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub files: Vec<FilePatch>,
}

/// One file section. Paths are canonical (`crate::files::path`), and no
/// two sections of a patch (nor a Move's destination) name the same one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilePatch {
    Add {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
    /// `move_to`: the file is renamed (its edited content lands there).
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

/// One `@@` chunk of an Update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The texts of its `@@ <text>` header lines (a bare `@@` adds none):
    /// each is sought in turn, and the lines after the last one found.
    pub headers: Vec<String>,
    pub lines: Vec<Line>,
    /// `*** End of File`: the old lines must end the file.
    pub end_of_file: bool,
}

/// A line of a chunk, without its ` `, `-` or `+`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Context(String),
    Remove(String),
    Add(String),
}

impl Line {
    /// The text the file holds before the patch, for context and removals.
    fn old(&self) -> Option<&str> {
        match self {
            Line::Context(text) | Line::Remove(text) => Some(text),
            Line::Add(_) => None,
        }
    }
}

/// The patch's writes are the port's changes: each carries the content it
/// was computed from, so a port can refuse a conflicting concurrent edit.
pub use super::port::Change;

/// Reads a patch; its paths are normalised and its bounds enforced
/// ([`PATCH_CHARS_MAX`], [`PATCH_FILES_MAX`], [`PATCH_HUNKS_MAX`]).
pub fn parse(text: &str) -> Result<Patch, PatchError> {
    parse::parse(text)
}

impl Patch {
    /// Every path whose current content `apply` needs (update/delete
    /// sources, add and move destinations), deduplicated, in order.
    pub fn reads(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let mut reads = Vec::new();
        for file in &self.files {
            let (path, to) = match file {
                FilePatch::Add { path, .. } | FilePatch::Delete { path } => (path, None),
                FilePatch::Update { path, move_to, .. } => (path, move_to.as_ref()),
            };
            for path in std::iter::once(path).chain(to) {
                if seen.insert(path) {
                    reads.push(path.clone());
                }
            }
        }
        reads
    }

    /// `current`: each path of [`Patch::reads`] -> its content (`None`: no
    /// such file). All files or none: `Ok` holds every change, in patch
    /// order; a move writes its destination before it deletes its source,
    /// so a port that stops halfway loses nothing.
    pub fn apply(
        &self,
        current: &BTreeMap<String, Option<String>>,
    ) -> Result<Vec<Change>, PatchError> {
        let content = |path: &str| match current.get(path) {
            Some(content) => Ok(content.as_ref()),
            None => Err(in_file(path, PatchErrorKind::NotRead)),
        };
        let mut budget = seek::Budget::new();
        let mut changes = Vec::with_capacity(self.files.len());
        for file in &self.files {
            match file {
                FilePatch::Add { path, content: new } => {
                    if content(path)?.is_some() {
                        return Err(in_file(path, PatchErrorKind::Exists));
                    }
                    changes.push(Change {
                        path: path.clone(),
                        expected: None,
                        content: Some(new.clone()),
                    });
                }
                FilePatch::Delete { path } => {
                    let old =
                        content(path)?.ok_or_else(|| in_file(path, PatchErrorKind::Missing))?;
                    changes.push(Change {
                        path: path.clone(),
                        expected: Some(old.clone()),
                        content: None,
                    });
                }
                FilePatch::Update {
                    path,
                    move_to,
                    chunks,
                } => {
                    let old =
                        content(path)?.ok_or_else(|| in_file(path, PatchErrorKind::Missing))?;
                    if let Some(to) = move_to {
                        if content(to)?.is_some() {
                            return Err(in_file(
                                path,
                                PatchErrorKind::MoveExists { to: to.clone() },
                            ));
                        }
                    }
                    let new = apply::update(path, old, chunks, &mut budget)?;
                    let (written, expected, deleted) = match move_to {
                        Some(to) => (to, None, true),
                        None => (path, Some(old.clone()), false),
                    };
                    changes.push(Change {
                        path: written.clone(),
                        expected,
                        content: Some(new),
                    });
                    if deleted {
                        changes.push(Change {
                            path: path.clone(),
                            expected: Some(old.clone()),
                            content: None,
                        });
                    }
                }
            }
        }
        Ok(changes)
    }
}

/// The tool's output, [`OUTPUT_SCHEMA`]: each file section's path and
/// action, in patch order (a move names its destination, `from` its source).
pub fn applied(patch: &Patch) -> Value {
    let files: Vec<Value> = patch
        .files
        .iter()
        .map(|file| match file {
            FilePatch::Add { path, .. } => json!({ "path": path, "action": "added" }),
            FilePatch::Delete { path } => json!({ "path": path, "action": "deleted" }),
            FilePatch::Update {
                path,
                move_to: None,
                ..
            } => json!({ "path": path, "action": "updated" }),
            FilePatch::Update {
                path,
                move_to: Some(to),
                ..
            } => json!({ "path": to, "action": "moved", "from": path }),
        })
        .collect();
    json!({ "files": files })
}

/// Why a patch was refused: where (the file, the 1-based chunk of an
/// Update) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{kind}", location(.file, .chunk))]
pub struct PatchError {
    pub file: Option<String>,
    pub chunk: Option<usize>,
    pub kind: PatchErrorKind,
}

fn location(file: &Option<String>, chunk: &Option<usize>) -> String {
    match (file, chunk) {
        (Some(file), Some(chunk)) => format!("{file}, chunk {chunk}: "),
        (Some(file), None) => format!("{file}: "),
        (None, Some(chunk)) => format!("chunk {chunk}: "),
        (None, None) => String::new(),
    }
}

/// What was wrong. Line numbers are the patch text's (1-based) for the
/// grammar, the file's for matching; quoted text is cut short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchErrorKind {
    #[error("the patch is longer than {PATCH_CHARS_MAX} characters")]
    TooLong,
    #[error("the patch must start with a `*** Begin Patch` line{}", shown(.found))]
    NoBegin { found: String },
    #[error("the patch must end with a `*** End Patch` line{}", shown(.found))]
    NoEnd { found: String },
    #[error(
        "line {line}: expected a file section (`*** Add File: <path>`, \
         `*** Delete File: <path>` or `*** Update File: <path>`){}",
        shown(.found)
    )]
    Unexpected { line: usize, found: String },
    #[error(
        "the patch has no file section (`*** Add File: <path>`, \
         `*** Delete File: <path>` or `*** Update File: <path>`)"
    )]
    NoFile,
    #[error(
        "line {line}: every line of an added file starts with `+` \
         (`+` alone for an empty line){}",
        shown(.found)
    )]
    AddLine { line: usize, found: String },
    #[error(
        "line {line}: the update has no chunk: give `@@` and lines starting \
         with ` ` (context), `-` (removed) or `+` (added)"
    )]
    NoChunk { line: usize },
    #[error(
        "line {line}: a chunk line starts with ` ` (context), `-` (removed) \
         or `+` (added){}",
        shown(.found)
    )]
    ChunkLine { line: usize, found: String },
    #[error("line {line}: the chunk has no lines")]
    EmptyChunk { line: usize },
    #[error("line {line}: {error}")]
    Path { line: usize, error: PathError },
    #[error("line {line}: the patch already touches this file; change each file in one section")]
    Twice { line: usize },
    #[error("more than {PATCH_FILES_MAX} file sections in one patch")]
    TooManyFiles,
    #[error("more than {PATCH_HUNKS_MAX} chunks in one patch")]
    TooManyChunks,
    #[error("no such file")]
    Missing,
    #[error("the file already exists; change it with `*** Update File:`")]
    Exists,
    #[error("cannot move to `{to}`: that file already exists")]
    MoveExists { to: String },
    #[error("header `@@ {header}` not found from line {from}")]
    HeaderNotFound { header: String, from: usize },
    #[error("context not found from line {from}: {excerpt}")]
    ContextNotFound { from: usize, excerpt: String },
    #[error(
        "the `*** End of File` chunk must match the end of the file, but its \
         lines are at line {line}: {excerpt}"
    )]
    NotAtEnd { line: usize, excerpt: String },
    #[error("the result is {bytes} bytes; a file holds at most {FILE_BYTES_MAX}")]
    TooLarge { bytes: usize },
    #[error(
        "matching the context took more than {PATCH_MATCH_STEPS_MAX} steps; \
         give more distinctive context lines or `@@` headers"
    )]
    TooCostly,
    #[error("the file's content was not given (apply needs every path of reads)")]
    NotRead,
}

impl From<PatchErrorKind> for PatchError {
    fn from(kind: PatchErrorKind) -> Self {
        PatchError {
            file: None,
            chunk: None,
            kind,
        }
    }
}

fn in_file(path: &str, kind: PatchErrorKind) -> PatchError {
    PatchError {
        file: Some(path.to_owned()),
        chunk: None,
        kind,
    }
}

fn shown(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(", found `{text}`")
    }
}

/// Lines quoted for a message, at most [`PATCH_EXCERPT_BYTES_MAX`] bytes.
fn excerpt(lines: &[&str]) -> String {
    let mut out = String::new();
    for line in lines {
        if out.len() > PATCH_EXCERPT_BYTES_MAX {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push('`');
        out.push_str(prefix(line, PATCH_EXCERPT_BYTES_MAX));
        out.push('`');
    }
    truncate(&mut out, PATCH_EXCERPT_BYTES_MAX);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "json-schema")]
    fn validator(schema: &str) -> impl Fn(&Value) -> bool {
        let schema = serde_json::from_str(schema).unwrap();
        let validator =
            crate::json_schema::Validator::compile("urn:shiitake:test", schema).unwrap();
        move |value| validator.check(value).is_ok()
    }

    fn tree(files: &[(&str, &str)]) -> BTreeMap<String, Option<String>> {
        files
            .iter()
            .map(|(p, c)| (p.to_string(), Some(c.to_string())))
            .collect()
    }

    const EVERY_ACTION: &str = "*** Begin Patch
*** Add File: new.txt
+hello
*** Delete File: gone.txt
*** Update File: a.rs
@@ fn main() {
-    old();
+    new();
*** Update File: b.rs
*** Move to: c/d.rs
@@
 x
+y
*** End of File
*** End Patch
";

    #[test]
    fn parses_every_section_kind() {
        let patch = parse(EVERY_ACTION).unwrap();
        assert_eq!(
            patch.files,
            vec![
                FilePatch::Add {
                    path: "new.txt".into(),
                    content: "hello\n".into()
                },
                FilePatch::Delete {
                    path: "gone.txt".into()
                },
                FilePatch::Update {
                    path: "a.rs".into(),
                    move_to: None,
                    chunks: vec![Chunk {
                        headers: vec!["fn main() {".into()],
                        lines: vec![
                            Line::Remove("    old();".into()),
                            Line::Add("    new();".into())
                        ],
                        end_of_file: false,
                    }],
                },
                FilePatch::Update {
                    path: "b.rs".into(),
                    move_to: Some("c/d.rs".into()),
                    chunks: vec![Chunk {
                        headers: vec![],
                        lines: vec![Line::Context("x".into()), Line::Add("y".into())],
                        end_of_file: true,
                    }],
                },
            ]
        );
        assert_eq!(
            patch.reads(),
            ["new.txt", "gone.txt", "a.rs", "b.rs", "c/d.rs"]
        );
    }

    #[test]
    fn applies_all_or_nothing_with_expected_contents() {
        let patch = parse(EVERY_ACTION).unwrap();
        let mut current = tree(&[
            ("gone.txt", "bye\n"),
            ("a.rs", "fn main() {\n    old();\n}\n"),
            ("b.rs", "x\n"),
        ]);
        current.insert("new.txt".into(), None);
        current.insert("c/d.rs".into(), None);
        let change = |path: &str, expected: Option<&str>, content: Option<&str>| Change {
            path: path.into(),
            expected: expected.map(Into::into),
            content: content.map(Into::into),
        };
        assert_eq!(
            patch.apply(&current).unwrap(),
            vec![
                change("new.txt", None, Some("hello\n")),
                change("gone.txt", Some("bye\n"), None),
                change(
                    "a.rs",
                    Some("fn main() {\n    old();\n}\n"),
                    Some("fn main() {\n    new();\n}\n")
                ),
                // The destination is written before the source goes.
                change("c/d.rs", None, Some("x\ny\n")),
                change("b.rs", Some("x\n"), None),
            ]
        );
        current.remove("c/d.rs");
        let e = patch.apply(&current).unwrap_err();
        assert_eq!(e.kind, PatchErrorKind::NotRead);
        assert_eq!(e.file.as_deref(), Some("c/d.rs"));
    }

    #[test]
    fn errors_name_the_file_and_the_chunk() {
        let patch = parse(
            "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n+b\n@@\n-   let x = 1;\n+y\n*** End Patch",
        )
        .unwrap();
        let e = patch.apply(&tree(&[("src/a.rs", "a\nc\n")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "src/a.rs, chunk 2: context not found from line 2: `   let x = 1;`"
        );
        let e = parse("*** Begin Patch\n*** Frobnicate File: x\n*** End Patch").unwrap_err();
        assert!(
            e.to_string().starts_with("line 2: expected a file section"),
            "{e}"
        );
        assert!(
            e.to_string().ends_with("found `*** Frobnicate File: x`"),
            "{e}"
        );
        assert_eq!(
            parse("").unwrap_err().to_string(),
            "the patch must start with a `*** Begin Patch` line"
        );
    }

    #[test]
    fn excerpts_are_bounded() {
        let long = "x".repeat(10_000);
        let lines = vec![long.as_str(); 100];
        let shown = excerpt(&lines);
        assert!(shown.len() <= PATCH_EXCERPT_BYTES_MAX);
        assert!(shown.starts_with("`xxx") && shown.ends_with('…'));
        assert_eq!(excerpt(&["a", "b"]), "`a` `b`");
    }

    #[test]
    fn the_patch_text_is_bounded_in_characters() {
        let head = "*** Begin Patch\n*** Add File: a\n+";
        let tail = "\n*** End Patch";
        let fill = |chars: usize| "é".repeat(chars - head.len() - tail.len());
        let at_bound = format!("{head}{}{tail}", fill(PATCH_CHARS_MAX));
        assert_eq!(at_bound.chars().count(), PATCH_CHARS_MAX);
        assert!(parse(&at_bound).is_ok());
        let over = format!("{head}{}{tail}", fill(PATCH_CHARS_MAX + 1));
        assert_eq!(parse(&over).unwrap_err().kind, PatchErrorKind::TooLong);
    }

    #[cfg(feature = "json-schema")]
    #[test]
    fn the_output_matches_its_schema() {
        let valid = validator(OUTPUT_SCHEMA);
        let output = applied(&parse(EVERY_ACTION).unwrap());
        assert_eq!(
            output,
            json!({ "files": [
                { "path": "new.txt", "action": "added" },
                { "path": "gone.txt", "action": "deleted" },
                { "path": "a.rs", "action": "updated" },
                { "path": "c/d.rs", "action": "moved", "from": "b.rs" },
            ]})
        );
        assert!(valid(&output));
        for bad in [
            json!({ "files": [{ "path": "a", "action": "moved" }] }),
            json!({ "files": [{ "path": "a", "action": "updated", "from": "b" }] }),
            json!({ "files": [{ "path": "a", "action": "renamed" }] }),
            json!({ "files": [{ "action": "added" }] }),
            json!({ "files": [], "extra": 1 }),
            json!({}),
        ] {
            assert!(!valid(&bad), "{bad}");
        }
    }

    #[cfg(feature = "json-schema")]
    #[test]
    fn the_schemas_state_the_bounds() {
        let input: Value = serde_json::from_str(INPUT_SCHEMA).unwrap();
        let output: Value = serde_json::from_str(OUTPUT_SCHEMA).unwrap();
        let text = &input["properties"]["input"];
        assert_eq!(text["maxLength"], json!(PATCH_CHARS_MAX));
        assert!(text["description"].as_str().unwrap().len() <= 2_048);
        assert_eq!(
            output["properties"]["files"]["maxItems"],
            json!(PATCH_FILES_MAX)
        );
        let valid = validator(INPUT_SCHEMA);
        assert!(valid(&json!({ "input": EVERY_ACTION })));
        assert!(!valid(&json!({ "input": 1 })));
        assert!(!valid(&json!({ "input": "", "path": "x" })));
        assert!(!valid(&json!({})));
        assert!(!valid(&json!({ "input": "x".repeat(PATCH_CHARS_MAX + 1) })));
    }
}
