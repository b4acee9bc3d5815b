//! Search visibility against git itself: `tests/fixtures/visibility/table.tsv`
//! holds `git check-ignore`'s answers (with excluded ancestors and `.git`
//! components hiding too) for every file and directory of the fixture trees,
//! written by `scripts/gen-ignore-table.sh`. The policy must agree on every
//! row, and the committed table must be what the script writes today.
//! Needs the `files-search` feature (the lean build applies no pattern).
#![cfg(feature = "files-search")]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use shiitake::files::visibility::{IgnoreFile, Visibility};

/// Rows where the `ignore` crate's grammar is known to differ from git's, with
/// why; the policy must still disagree there (so a fix in the crate is seen).
const KNOWN_DEVIATIONS: &[(&str, &str, &str)] = &[(
    "edges",
    "zrev",
    "git matches a reversed range `[z-a]` by its first character; globset refuses the glob, so the line is skipped",
)];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/visibility")
}

/// The ignore files under `dir` (each `<d>/gitignore` is `<d>/.gitignore`).
fn ignore_files(ignores: &Path, dir: &Path, out: &mut Vec<IgnoreFile>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            ignore_files(ignores, &path, out);
        } else if path.file_name().is_some_and(|n| n == "gitignore") {
            let rel = path.parent().unwrap().strip_prefix(ignores).unwrap();
            out.push(IgnoreFile {
                dir: rel.to_str().unwrap().to_owned(),
                text: fs::read_to_string(&path).unwrap(),
            });
        }
    }
}

fn policy(tree: &str) -> Visibility {
    let ignores = fixtures().join(tree).join("ignores");
    let mut files = Vec::new();
    ignore_files(&ignores, &ignores, &mut files);
    Visibility::new(files).unwrap()
}

#[test]
fn visibility_agrees_with_git_check_ignore() {
    let table = fs::read_to_string(fixtures().join("table.tsv")).unwrap();
    let mut policies: BTreeMap<&str, Visibility> = BTreeMap::new();
    let mut rows = 0;
    let mut hidden = 0;
    let mut mismatches = Vec::new();
    for row in table.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = row.split('\t').collect();
        let [tree, path, is_dir, ignored, git] = cols[..] else {
            panic!("malformed row {row:?}");
        };
        let is_dir = is_dir == "1";
        let want_visible = ignored == "0";
        let visibility = policies.entry(tree).or_insert_with(|| policy(tree));
        rows += 1;
        hidden += usize::from(!want_visible);
        let known = KNOWN_DEVIATIONS
            .iter()
            .any(|(t, p, _)| (*t, *p) == (tree, path));
        if (visibility.is_visible(path, is_dir) != want_visible) != known {
            mismatches.push(format!(
                "{tree}: {path:?} ({}) git says {} ({git}), policy {:?}{}",
                if is_dir { "dir" } else { "file" },
                if want_visible { "visible" } else { "hidden" },
                visibility.hidden(path, is_dir),
                if known {
                    " (a known deviation that is gone)"
                } else {
                    ""
                }
            ));
        }
    }
    assert!(
        policies.len() >= 4 && rows >= 150,
        "{} trees, {rows} rows",
        policies.len()
    );
    assert!(
        hidden > rows / 4 && hidden < rows * 3 / 4,
        "{hidden} of {rows} hidden"
    );
    assert!(
        mismatches.is_empty(),
        "{} of {rows} rows disagree with git:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn the_committed_table_is_what_git_says_today() {
    if Command::new("git").arg("--version").output().is_err() {
        println!("git is not on PATH; the table was not regenerated");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("table.tsv");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gen-ignore-table.sh");
    let run = Command::new("bash")
        .arg(&script)
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let fresh = fs::read_to_string(&out).unwrap();
    let committed = fs::read_to_string(fixtures().join("table.tsv")).unwrap();
    assert!(
        fresh == committed,
        "tests/fixtures/visibility/table.tsv is stale: run scripts/gen-ignore-table.sh"
    );
}
