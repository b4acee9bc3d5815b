//! The patch engine (`shiitake::files::patch`) against fixtures and
//! properties.
//!
//! Fixtures: each folder of `tests/fixtures/patch/` is a scenario: `input/`
//! (the files before; absent: none), `patch` (the patch text) and either
//! `expected/` (the files after; absent: none) or `error` (text the error
//! message must contain). The harness parses and applies the patch to the
//! input tree, checks each change's `expected` against the tree, then
//! compares the tree with `expected/`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use proptest::prelude::*;
use shiitake::files::patch::{applied, parse, Change, Patch};
use similar::{capture_diff_slices, Algorithm, DiffTag};

type Tree = BTreeMap<String, String>;

/// The files under `dir` by `/`-separated relative path (none if absent).
fn read_tree(dir: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let relative = path.strip_prefix(root).unwrap().to_str().unwrap();
                out.insert(
                    relative.replace('\\', "/"),
                    fs::read_to_string(&path).unwrap(),
                );
            }
        }
    }
    let mut tree = Tree::new();
    walk(dir, dir, &mut tree);
    tree
}

/// Parses and applies `text` to `tree`, as a host would: read what the
/// patch names, apply all or nothing, write each change if the file still
/// holds what the change was computed from.
fn run(text: &str, tree: &mut Tree) -> Result<Patch, String> {
    let patch = parse(text).map_err(|e| e.to_string())?;
    let current = patch
        .reads()
        .into_iter()
        .map(|path| {
            let content = tree.get(&path).cloned();
            (path, content)
        })
        .collect();
    let changes = patch.apply(&current).map_err(|e| e.to_string())?;
    for Change {
        path,
        expected,
        content,
    } in changes
    {
        assert_eq!(tree.get(&path), expected.as_ref(), "{path}: expected");
        match content {
            Some(content) => tree.insert(path, content),
            None => tree.remove(&path),
        };
    }
    Ok(patch)
}

#[test]
fn fixtures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/patch");
    let mut scenarios: Vec<_> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    scenarios.sort();
    assert!(scenarios.len() >= 40, "{} scenarios", scenarios.len());
    let mut failed = Vec::new();
    for dir in &scenarios {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(dir.join("patch")).unwrap();
        let mut tree = read_tree(&dir.join("input"));
        let outcome = run(&text, &mut tree);
        let problem = match (outcome, fs::read_to_string(dir.join("error"))) {
            (Err(message), Ok(want)) => {
                let want = want.trim_end_matches('\n');
                (!message.contains(want)).then(|| format!("error `{message}` lacks `{want}`"))
            }
            (Ok(_), Ok(want)) => Some(format!("applied, but should fail with `{want}`")),
            (Err(message), Err(_)) => Some(format!("failed: {message}")),
            (Ok(patch), Err(_)) => {
                let expected = read_tree(&dir.join("expected"));
                consistent(&patch, &expected);
                (tree != expected).then(|| format!("got {tree:#?}\nwant {expected:#?}"))
            }
        };
        if let Some(problem) = problem {
            failed.push(format!("{name}: {problem}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// The tool's output agrees with the files after.
fn consistent(patch: &Patch, after: &Tree) {
    for file in applied(patch)["files"].as_array().unwrap() {
        let path = file["path"].as_str().unwrap();
        let exists = after.contains_key(path);
        match file["action"].as_str().unwrap() {
            "deleted" => assert!(!exists, "{path} deleted"),
            "moved" => {
                assert!(exists, "{path} moved here");
                assert!(!after.contains_key(file["from"].as_str().unwrap()));
            }
            _ => assert!(exists, "{path} written"),
        }
    }
}

/// Lines a file is made of: repeats, whitespace and punctuation variants
/// (which fuzzy matching equates) and text that looks like the grammar.
const ALPHABET: &[&str] = &[
    "a",
    "b",
    "c",
    "",
    "a ",
    "  a",
    "}",
    "x - y",
    "x \u{2013} y",
    "@@ x",
    "*** End Patch",
    "*** End of File",
];

/// A file of `lines`; without a final newline only if the last line has
/// text (else the text would read as one line fewer).
fn text(lines: &[String], final_newline: bool) -> String {
    let mut text = lines.join("\n");
    if lines.last().is_some_and(|l| final_newline || l.is_empty()) {
        text.push('\n');
    }
    text
}

/// A patch turning `a` into `b`, from their line diff. Each chunk's context
/// is widened until its old lines first occur, from the end of the chunk
/// before, where they belong, so that a seek from there finds them.
fn diff_patch(a: &[String], b: &[String], end_of_file: bool) -> String {
    // Changed regions: (old range, new range), adjacent changes merged.
    let mut regions: Vec<(usize, usize, usize, usize)> = Vec::new();
    for op in capture_diff_slices(Algorithm::Myers, a, b) {
        let (tag, old, new) = op.as_tag_tuple();
        if tag == DiffTag::Equal {
            continue;
        }
        match regions.last_mut() {
            Some(last) if last.1 == old.start && last.3 == new.start => {
                last.1 = old.end;
                last.3 = new.end;
            }
            _ => regions.push((old.start, old.end, new.start, new.end)),
        }
    }
    let n = a.len();
    let first_from = |pattern: &[String], cursor: usize| {
        (cursor..=n.saturating_sub(pattern.len()))
            .find(|&at| a.get(at..at + pattern.len()) == Some(pattern))
    };
    let mut out = String::from("*** Begin Patch\n*** Update File: f.txt\n");
    let (mut cursor, mut r) = (0, 0);
    while r < regions.len() {
        let (mut lo, mut hi, mut last) = (regions[r].0, regions[r].1, r);
        loop {
            while last + 1 < regions.len() && regions[last + 1].0 <= hi {
                last += 1;
                hi = hi.max(regions[last].1);
            }
            let placed = if lo == hi {
                lo == n // only additions go to the end
            } else {
                first_from(&a[lo..hi], cursor) == Some(lo)
            };
            if placed {
                break;
            }
            if lo > cursor {
                lo -= 1;
            } else {
                hi += 1; // lo == cursor and hi == n always place
            }
        }
        out.push_str("@@\n");
        let mut at = lo;
        for &(os, oe, ns, ne) in &regions[r..=last] {
            a[at..os]
                .iter()
                .for_each(|l| out.push_str(&format!(" {l}\n")));
            a[os..oe]
                .iter()
                .for_each(|l| out.push_str(&format!("-{l}\n")));
            b[ns..ne]
                .iter()
                .for_each(|l| out.push_str(&format!("+{l}\n")));
            at = oe;
        }
        a[at..hi]
            .iter()
            .for_each(|l| out.push_str(&format!(" {l}\n")));
        if end_of_file && hi == n {
            out.push_str("*** End of File\n");
        }
        cursor = hi;
        r = last + 1;
    }
    out.push_str("*** End Patch\n");
    out
}

fn lines(max: usize) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop::sample::select(ALPHABET).prop_map(str::to_owned),
        0..max,
    )
}

/// `a` with random insertions, deletions and replacements.
fn edited(a: Vec<String>) -> impl Strategy<Value = (Vec<String>, Vec<String>)> {
    let edits = prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, lines(4)), 1..6);
    edits.prop_map(move |edits| {
        let mut b = a.clone();
        for (at, kind, new) in edits {
            let at = at.index(b.len() + 1);
            match kind {
                0 => drop(b.splice(at..at, new)),
                1 => drop(b.splice(at..(at + 2).min(b.len()), [])),
                _ => drop(b.splice(at..(at + 1).min(b.len()), new)),
            }
        }
        (a.clone(), b)
    })
}

/// Lines of patch-like text, for inputs that get past the first checks.
const SOUP: &[&str] = &[
    "*** Begin Patch",
    "*** End Patch",
    "*** Add File: a",
    "*** Add File: ../a",
    "*** Delete File: a",
    "*** Update File: a",
    "*** Update File: b",
    "*** Move to: b",
    "*** Move to: a",
    "*** End of File",
    "@@",
    "@@ a",
    "@@ -1,2 +1,2 @@",
    "@@@",
    " a",
    " b",
    "-a",
    "-",
    "+a",
    "+",
    "",
    " ",
    "\t",
    "a",
    "junk",
    "\r",
];

/// An Update of `f.txt` with random chunks of the alphabet's lines.
fn random_update() -> impl Strategy<Value = String> {
    let line = (0..3usize, prop::sample::select(ALPHABET));
    let header = prop::sample::select(ALPHABET);
    let chunk = (
        prop::collection::vec(header, 0..3),
        prop::collection::vec(line, 1..6),
        any::<bool>(),
    );
    prop::collection::vec(chunk, 1..5).prop_map(|chunks| {
        let mut out = String::from("*** Begin Patch\n*** Update File: f.txt\n");
        for (headers, lines, end_of_file) in chunks {
            out.push_str("@@\n");
            headers
                .iter()
                .for_each(|h| out.push_str(&format!("@@ {h}\n")));
            for (kind, text) in lines {
                out.push_str(&format!("{}{text}\n", [" ", "-", "+"][kind]));
            }
            if end_of_file {
                out.push_str("*** End of File\n");
            }
        }
        out + "*** End Patch\n"
    })
}

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(SOUP), 0..24).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #[test]
    fn a_diff_as_a_patch_turns_a_into_b(
        (a, b) in lines(40).prop_flat_map(edited),
        final_newline in any::<bool>(),
        end_of_file in any::<bool>(),
    ) {
        if a == b {
            return Ok(()); // an Update needs a chunk
        }
        let patch = diff_patch(&a, &b, end_of_file);
        let mut tree = Tree::from([("f.txt".to_owned(), text(&a, final_newline))]);
        let outcome = run(&patch, &mut tree);
        prop_assert!(outcome.is_ok(), "{outcome:?}\n{patch}");
        prop_assert_eq!(&tree["f.txt"], &text(&b, true), "{}", patch);
    }

    #[test]
    fn parse_never_panics(text in any::<String>()) {
        let _ = parse(&text);
    }

    #[test]
    fn random_chunks_apply_or_fail_cleanly(patch in random_update(), file in lines(30)) {
        let mut tree = Tree::from([("f.txt".to_owned(), text(&file, true))]);
        let _ = run(&patch, &mut tree);
    }

    #[test]
    fn patch_like_text_never_panics(
        text in soup(),
        a in prop::option::of(soup()),
        b in prop::option::of(soup()),
    ) {
        let text = format!("*** Begin Patch\n{text}\n*** End Patch");
        let mut tree: Tree = [("a", a), ("b", b)]
            .into_iter()
            .filter_map(|(path, content)| Some((path.to_owned(), content?)))
            .collect();
        // `run` checks each change against the tree it came from.
        let _ = run(&text, &mut tree);
    }
}
