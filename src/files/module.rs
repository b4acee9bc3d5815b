//! The `files` module (seed: "Knapsack.files({ port }) builds a Files module
//! and direct tools from one port"): its operations as the model and guest
//! code see them, and [`call`], which runs one against a [`Port`]. The
//! module's input schemas are the only decoding of arguments: the door and
//! the driver check them (direct tools and guest calls alike), then `call`
//! reads the same fields.

use super::patch::{self, PatchError};
use super::path::{normalize, normalize_file, PathError};
use super::port::{Change, Entry, Port, PortError, Replaced, Stat};
use super::search::{self, Matcher, Matches, PathGlob, SearchError};
use super::visibility::{IgnoreFile, Visibility, VisibilityError};
use crate::capability::{Access, CapabilityError, Module, ModuleSpec, OperationSpec};
use crate::limits::{FILE_BYTES_MAX, FILE_READ_BYTES_MAX, IGNORE_BYTES_MAX, SEARCH_FILES_MAX};
use serde::Deserialize;
use serde_json::{json, Value};

/// The files module's id at the top level; a Computer's is
/// `computers.<name>.files`.
pub const MODULE_ID: &str = crate::capability::backend::own::FILES;
/// The patch operation, offered as the direct tool `apply_patch`.
pub const APPLY_PATCH: &str = "apply_patch";

/// The module over a port; `apply_patch` only when the port supplies the
/// patch engine.
pub fn module(id: &str, patches: bool) -> Result<Module, CapabilityError> {
    let op =
        |name: &str, description: &str, schema: Value, access: Access, replay_safe| OperationSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema: schema,
            access,
            confirm: false,
            replay_safe,
        };
    // The input schemas as JSON text: smaller in the wasm than `json!`
    // (the deployed size is bounded).
    let schema = |text: &str| {
        serde_json::from_str::<Value>(text)
            .map_err(|e| CapabilityError(format!("files input schema: {e}")))
    };
    let mut operations = vec![
        op(
            "read",
            &format!(
                "Reads a text file. Long files come in windows of whole lines (at most \
                 {FILE_READ_BYTES_MAX} bytes): read on from `endLine + 1`."
            ),
            schema(
                r#"{ "type": "object", "additionalProperties": false, "required": ["path"],
                    "properties": { "path": { "type": "string", "description": "Root-relative, `/`-separated." },
                        "startLine": { "type": "integer", "minimum": 1, "description": "First line (1-based); default 1." },
                        "lineCount": { "type": "integer", "minimum": 1, "description": "Lines at most." } } }"#,
            )?,
            Access::Read,
            true,
        ),
        op(
            "write",
            "Creates or overwrites a text file with `content`.",
            schema(
                r#"{ "type": "object", "additionalProperties": false, "required": ["path", "content"],
                    "properties": { "path": { "type": "string", "description": "Root-relative, `/`-separated." }, "content": { "type": "string" } } }"#,
            )?,
            Access::Write,
            true,
        ),
        op(
            "list",
            "Lists a directory (default: the root): files with their size, subdirectories as \
             `dir`. Paths .gitignore excludes, and .git, are left out. Pass `next` back as \
             `cursor` for the next page.",
            schema(
                r#"{ "type": "object", "additionalProperties": false,
                    "properties": { "path": { "type": "string", "description": "Root-relative, `/`-separated." },
                        "recursive": { "type": "boolean", "description": "Every file below, not just the direct entries." },
                        "cursor": { "type": "string" } } }"#,
            )?,
            Access::Read,
            true,
        ),
        op(
            "stat",
            "Whether a path is a file (and its size in bytes), a directory or missing.",
            schema(
                r#"{ "type": "object", "additionalProperties": false, "required": ["path"],
                    "properties": { "path": { "type": "string", "description": "Root-relative, `/`-separated." } } }"#,
            )?,
            Access::Read,
            true,
        ),
        op(
            "search",
            "Finds lines containing `query` (case-insensitive unless `caseSensitive`; a \
             regular expression when `regex`) in the files under `path`, optionally only \
             those matching `glob` (e.g. `**/*.rs`). Paths .gitignore excludes, and .git, \
             are not searched.",
            schema(
                r#"{ "type": "object", "additionalProperties": false, "required": ["query"],
                    "properties": { "query": { "type": "string", "minLength": 1 },
                        "path": { "type": "string", "description": "Root-relative, `/`-separated." },
                        "glob": { "type": "string" },
                        "regex": { "type": "boolean" },
                        "caseSensitive": { "type": "boolean" } } }"#,
            )?,
            Access::Read,
            true,
        ),
        op(
            "replace",
            "Replaces the text `old` with `new` in a file. `old` must occur exactly once \
             (give enough surrounding lines), unless `all` is true. Refused, with nothing \
             changed, when the file changed since it was read.",
            schema(
                r#"{ "type": "object", "additionalProperties": false, "required": ["path", "old", "new"],
                    "properties": { "path": { "type": "string", "description": "Root-relative, `/`-separated." },
                        "old": { "type": "string", "minLength": 1 },
                        "new": { "type": "string" },
                        "all": { "type": "boolean" } } }"#,
            )?,
            Access::Write,
            false,
        ),
    ];
    if patches {
        let schema: Value = serde_json::from_str(patch::INPUT_SCHEMA)
            .map_err(|e| CapabilityError(format!("apply_patch input schema: {e}")))?;
        operations.push(op(
            APPLY_PATCH,
            "Applies a patch (`*** Begin Patch` ... `*** End Patch`: Add File, Delete File, \
             Update File with `@@` chunks, Move to) to every file it names, or to none.",
            schema,
            Access::Write,
            false,
        ));
    }
    Module::from_spec(ModuleSpec {
        id: id.to_owned(),
        operations,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReadArgs {
    path: String,
    start_line: Option<usize>,
    line_count: Option<usize>,
}

#[derive(Deserialize)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
struct ListArgs {
    #[serde(default)]
    path: String,
    #[serde(default)]
    recursive: bool,
    cursor: Option<String>,
}

#[derive(Deserialize)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SearchArgs {
    query: String,
    #[serde(default)]
    path: String,
    glob: Option<String>,
    #[serde(default)]
    regex: bool,
    #[serde(default)]
    case_sensitive: bool,
}

#[derive(Deserialize)]
struct ReplaceArgs {
    path: String,
    old: String,
    new: String,
    #[serde(default)]
    all: bool,
}

#[derive(Deserialize)]
struct PatchArgs {
    input: String,
}

/// Why a files operation failed; its text is the tool's error the model
/// sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilesError {
    /// serde's message (with the path to the field).
    #[error("arguments: {0}")]
    Arguments(String),
    #[error(transparent)]
    Path(#[from] PathError),
    #[error(transparent)]
    Port(#[from] PortError),
    #[error(transparent)]
    Search(#[from] SearchError),
    #[error(transparent)]
    Visibility(#[from] VisibilityError),
    #[error(transparent)]
    Patch(#[from] PatchError),
    #[error("{path}: {bytes} bytes; the files module writes at most {FILE_BYTES_MAX} per file")]
    TooLarge { path: String, bytes: usize },
    #[error("{0}: no such file")]
    NoSuchFile(String),
    #[error("{path}: startLine {start} is past the end ({total} lines)")]
    PastTheEnd {
        path: String,
        start: usize,
        total: usize,
    },
    #[error("the .gitignore files bearing on `{0}` hold more than {IGNORE_BYTES_MAX} bytes")]
    IgnoreFiles(String),
    #[error("{0}: `old` was not found; read the file and copy the text exactly")]
    OldNotFound(String),
    #[error(
        "{path}: `old` occurs {count} times; include more surrounding text so it occurs \
         once, or set `all` to replace every occurrence"
    )]
    OldAmbiguous { path: String, count: usize },
    /// Another writer changed the file: nothing was changed.
    #[error(
        "{0} changed while this edit was being made (another writer); nothing was \
         changed. Read the file again and redo the edit."
    )]
    Conflict(String),
    #[error("files has no operation `{0}`")]
    NoSuchOperation(String),
    /// A result that could not be encoded.
    #[error("{0}")]
    Encode(String),
}

fn args<T: serde::de::DeserializeOwned>(args: &Value) -> Result<T, FilesError> {
    crate::json::decode(args.clone()).map_err(FilesError::Arguments)
}

/// Runs one operation of the files module against `port`: the model sees
/// the `Ok` value as the result and the `Err` text as the tool's error.
pub async fn call(
    port: &impl Port,
    operation: &str,
    arguments: &Value,
) -> Result<Value, FilesError> {
    match operation {
        "read" => read(port, args(arguments)?).await,
        "write" => {
            let WriteArgs { path, content } = args(arguments)?;
            let path = normalize_file(&path)?;
            bounded(&path, content.len())?;
            port.write(&path, &content).await?;
            Ok(json!({ "path": path, "bytes": content.len() }))
        }
        "list" => list(port, args(arguments)?).await,
        "stat" => {
            let PathArgs { path } = args(arguments)?;
            let path = normalize(&path)?;
            Ok(match port.stat(&path).await? {
                Stat::File { size } => json!({ "path": path, "kind": "file", "size": size }),
                Stat::Dir => json!({ "path": path, "kind": "dir" }),
                Stat::Missing => json!({ "path": path, "kind": "missing" }),
            })
        }
        "search" => find(port, args(arguments)?).await,
        "replace" => replace(port, args(arguments)?).await,
        APPLY_PATCH if port.patches() => {
            let PatchArgs { input } = args(arguments)?;
            apply_patch(port, &input).await
        }
        other => Err(FilesError::NoSuchOperation(other.to_owned())),
    }
}

fn bounded(path: &str, bytes: usize) -> Result<(), FilesError> {
    if bytes > FILE_BYTES_MAX {
        return Err(FilesError::TooLarge {
            path: path.to_owned(),
            bytes,
        });
    }
    Ok(())
}

async fn existing(port: &impl Port, path: &str) -> Result<String, FilesError> {
    port.read(path)
        .await?
        .ok_or_else(|| FilesError::NoSuchFile(path.to_owned()))
}

async fn read(port: &impl Port, a: ReadArgs) -> Result<Value, FilesError> {
    let path = normalize_file(&a.path)?;
    let content = existing(port, &path).await?;
    let lines: Vec<&str> = content.split_inclusive('\n').collect();
    let total = lines.len();
    let start = a.start_line.unwrap_or(1);
    if start > total.max(1) {
        return Err(FilesError::PastTheEnd { path, start, total });
    }
    let wanted = a.line_count.unwrap_or(usize::MAX);
    let mut window = String::new();
    let mut end = start - 1;
    for line in lines.iter().skip(start - 1).take(wanted) {
        if window.len() + line.len() > FILE_READ_BYTES_MAX {
            break;
        }
        window.push_str(line);
        end += 1;
    }
    if end < start && start <= total {
        // One line longer than a window: show its beginning.
        window = crate::text::prefix(lines[start - 1], FILE_READ_BYTES_MAX).to_owned();
        end = start;
    }
    Ok(json!({
        "path": path,
        "content": window,
        "startLine": start,
        "endLine": end,
        "totalLines": total,
        "truncated": end < total,
    }))
}

/// Every file under `dir` (all pages), at most `SEARCH_FILES_MAX`: the
/// second value says the listing was cut.
async fn entries(port: &impl Port, dir: &str) -> Result<(Vec<Entry>, bool), FilesError> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = port.list(dir, cursor.as_deref()).await?;
        let progressed = page.entries.last().map(|e| e.path.clone());
        all.extend(page.entries);
        if all.len() > SEARCH_FILES_MAX {
            all.truncate(SEARCH_FILES_MAX);
            return Ok((all, true));
        }
        match page.cursor {
            // A port that hands back the same cursor would loop forever.
            Some(next) if Some(&next) != cursor.as_ref() && progressed.is_some() => {
                cursor = Some(next)
            }
            _ => return Ok((all, false)),
        }
    }
}

/// The invocation's search visibility from the ignore files that bear on
/// `dir`: those listed under it and those of its ancestors (seed
/// files-search: bounded ignore-file text from the adapter).
async fn visibility(
    port: &impl Port,
    entries: &[Entry],
    dir: &str,
) -> Result<Visibility, FilesError> {
    let mut paths: Vec<String> = Vec::new();
    let mut ancestor = dir;
    while !ancestor.is_empty() {
        ancestor = super::path::parent(ancestor);
        paths.push(join(ancestor, search::IGNORE_FILE_NAME));
    }
    paths.reverse();
    paths.extend(search::ignore_files(entries, dir).paths);
    let mut files = Vec::new();
    let mut bytes = 0;
    for path in paths {
        let Some(text) = port.read(&path).await? else {
            continue;
        };
        bytes += text.len();
        if bytes > IGNORE_BYTES_MAX {
            return Err(FilesError::IgnoreFiles(dir.to_owned()));
        }
        files.push(IgnoreFile {
            dir: super::path::parent(&path).to_owned(),
            text,
        });
    }
    Ok(Visibility::new(files)?)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

async fn list(port: &impl Port, a: ListArgs) -> Result<Value, FilesError> {
    let dir = normalize(&a.path)?;
    let (entries, cut) = entries(port, &dir).await?;
    let visible = visibility(port, &entries, &dir).await?;
    let listing = search::list(&entries, &dir, a.recursive, &visible, a.cursor.as_deref())?;
    let mut value =
        crate::json::to_value(&listing).map_err(|e| FilesError::Encode(e.to_string()))?;
    if cut {
        value["cut"] = json!(format!(
            "only the first {SEARCH_FILES_MAX} files under `{dir}` were looked at"
        ));
    }
    Ok(value)
}

async fn find(port: &impl Port, a: SearchArgs) -> Result<Value, FilesError> {
    let dir = normalize(&a.path)?;
    let matcher = Matcher::new(&a.query, a.regex, a.case_sensitive)?;
    let glob = a.glob.as_deref().map(PathGlob::new).transpose()?;
    let (entries, cut) = entries(port, &dir).await?;
    let visible = visibility(port, &entries, &dir).await?;
    let candidates = search::candidates(&entries, &dir, glob.as_ref(), &visible)?;
    let mut matches = Matches::default();
    let mut searched = 0usize;
    for entry in candidates.files {
        if matches.truncated {
            break;
        }
        // Read what was listed; a file removed since is skipped.
        let Some(content) = port.read(&entry.path).await? else {
            continue;
        };
        searched += 1;
        search::search_file(&entry.path, &content, &matcher, &mut matches);
    }
    let mut value = json!({ "matches": matches.matches, "filesSearched": searched });
    if matches.truncated {
        value["truncated"] = json!(true);
    }
    if let Some(why) = candidates.cut {
        value["cut"] = json!(why.to_string());
    } else if cut {
        value["cut"] = json!(format!(
            "only the first {SEARCH_FILES_MAX} files were looked at"
        ));
    }
    Ok(value)
}

async fn replace(port: &impl Port, a: ReplaceArgs) -> Result<Value, FilesError> {
    let path = normalize_file(&a.path)?;
    let current = existing(port, &path).await?;
    let count = current.matches(a.old.as_str()).count();
    let next = match count {
        0 => return Err(FilesError::OldNotFound(path)),
        1 => current.replacen(a.old.as_str(), &a.new, 1),
        _ if a.all => current.replace(a.old.as_str(), &a.new),
        count => return Err(FilesError::OldAmbiguous { path, count }),
    };
    bounded(&path, next.len())?;
    let change = Change {
        path: path.clone(),
        expected: Some(current),
        content: Some(next),
    };
    match port.replace(&[change]).await? {
        Replaced::Done => Ok(json!({ "path": path, "replaced": if a.all { count } else { 1 } })),
        Replaced::Conflict { path } => Err(FilesError::Conflict(path)),
    }
}

async fn apply_patch(port: &impl Port, input: &str) -> Result<Value, FilesError> {
    let patch = patch::parse(input)?;
    let mut current = std::collections::BTreeMap::new();
    for path in patch.reads() {
        let content = port.read(&path).await?;
        current.insert(path, content);
    }
    let changes = patch.apply(&current)?;
    match port.replace(&changes).await? {
        Replaced::Done => Ok(patch::applied(&patch)),
        Replaced::Conflict { path } => Err(FilesError::Conflict(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::block_on;
    use crate::files::workspace::{Bounds, Workspace};
    use crate::sql::native::NativeSql;

    /// The result, or the error's text (what the model sees).
    fn run(ws: &Workspace<'_>, op: &str, args: Value) -> Result<Value, String> {
        block_on(call(ws, op, &args)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_module_offers_apply_patch_only_with_a_patch_engine() {
        let names = |m: Module| m.operations.into_iter().map(|o| o.name).collect::<Vec<_>>();
        assert_eq!(
            names(module(MODULE_ID, false).unwrap()),
            ["read", "write", "list", "stat", "search", "replace"]
        );
        assert!(names(module("computers.laptop.files", true).unwrap())
            .contains(&APPLY_PATCH.to_owned()));
    }

    #[test]
    fn reads_come_in_windows_of_whole_lines() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let ws = Workspace::open(&sql, Bounds::default(), 1);
        let line = format!("{}\n", "x".repeat(1_000));
        let content = line.repeat(300); // 300,300 bytes: over one window
        run(&ws, "write", json!({ "path": "big", "content": content })).unwrap();
        let first = run(&ws, "read", json!({ "path": "big" })).unwrap();
        let end = first["endLine"].as_u64().unwrap() as usize;
        assert_eq!(first["content"].as_str().unwrap().len(), end * line.len());
        assert!(
            end * line.len() <= FILE_READ_BYTES_MAX && (end + 1) * line.len() > FILE_READ_BYTES_MAX
        );
        assert_eq!(first["truncated"], true);
        let next = run(
            &ws,
            "read",
            json!({ "path": "big", "startLine": end + 1, "lineCount": 2 }),
        )
        .unwrap();
        assert_eq!(next["startLine"], end + 1);
        assert_eq!(next["endLine"], end + 2);
        let past = run(&ws, "read", json!({ "path": "big", "startLine": 301 })).unwrap_err();
        assert!(past.contains("past the end (300 lines)"), "{past}");
        assert!(run(&ws, "read", json!({ "path": "nope" }))
            .unwrap_err()
            .contains("no such file"));
    }

    #[test]
    fn replace_needs_one_occurrence_unless_all() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let ws = Workspace::open(&sql, Bounds::default(), 1);
        run(&ws, "write", json!({ "path": "f", "content": "a b a" })).unwrap();
        let e = run(
            &ws,
            "replace",
            json!({ "path": "f", "old": "a", "new": "c" }),
        )
        .unwrap_err();
        assert!(e.contains("occurs 2 times"), "{e}");
        let e = run(
            &ws,
            "replace",
            json!({ "path": "f", "old": "z", "new": "c" }),
        )
        .unwrap_err();
        assert!(e.contains("was not found"), "{e}");
        let done = run(
            &ws,
            "replace",
            json!({ "path": "f", "old": "a", "new": "c", "all": true }),
        )
        .unwrap();
        assert_eq!(done["replaced"], 2);
        let done = run(
            &ws,
            "replace",
            json!({ "path": "f", "old": "b", "new": "B" }),
        )
        .unwrap();
        assert_eq!(done["replaced"], 1);
        assert_eq!(
            run(&ws, "read", json!({ "path": "f" })).unwrap()["content"],
            "c B c"
        );
    }

    #[test]
    fn search_reads_the_gitignore_of_ancestors_of_the_searched_directory() {
        let sql = NativeSql::open_in_memory();
        crate::store::schema::open(&sql).unwrap();
        let ws = Workspace::open(&sql, Bounds::default(), 1);
        for (path, content) in [
            (".gitignore", "*.tmp\n"),
            ("a/b/x.tmp", "hit"),
            ("a/b/y.txt", "hit"),
        ] {
            run(&ws, "write", json!({ "path": path, "content": content })).unwrap();
        }
        let found = run(&ws, "search", json!({ "query": "hit", "path": "a/b" })).unwrap();
        let paths: Vec<&str> = found["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["a/b/y.txt"], "the root's *.tmp applies under a/b");
    }
}
