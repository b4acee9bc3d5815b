//! Inside one folder of `src/`, a file imports its siblings without a
//! circle: a file's dependencies are the siblings its source names as
//! `super::<file>` or `crate::<folder>::<file>` outside comments (the
//! folder's `mod.rs`, which declares them all, is left out).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The identifiers a `super::` or `crate::<folder>::` path starts with in
/// `rest`: one, or each item of a `{...}` group.
fn heads(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = rest.strip_prefix('{') else {
        return vec![ident(rest)];
    };
    let (mut depth, mut items, mut item) = (0, Vec::new(), String::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    items
        .iter()
        .map(|i| ident(i.trim_start_matches(',')))
        .collect()
}

/// The folder's files (stems, `mod` left out) and the siblings each names.
fn graph(folder: &str) -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(folder);
    let mut texts = BTreeMap::new();
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.extension().is_some_and(|e| e == "rs") && stem != "mod" {
            let text: String = fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            texts.insert(stem, text);
        }
    }
    let own = format!("crate::{folder}::");
    let mut edges = BTreeMap::new();
    for (stem, text) in &texts {
        let mut deps = BTreeSet::new();
        for prefix in ["super::", own.as_str()] {
            for (at, _) in text.match_indices(prefix) {
                for head in heads(&text[at + prefix.len()..]) {
                    if texts.contains_key(&head) && head != *stem {
                        deps.insert(head);
                    }
                }
            }
        }
        edges.insert(stem.clone(), deps);
    }
    edges
}

/// Every file of `folder` that lies on an import circle.
fn on_circles(folder: &str) -> BTreeSet<String> {
    let edges = graph(folder);
    let reaches = |from: &str, to: &str| {
        let (mut seen, mut next) = (BTreeSet::new(), vec![from.to_owned()]);
        while let Some(node) = next.pop() {
            for dep in &edges[&node] {
                if dep == to {
                    return true;
                }
                if seen.insert(dep.clone()) {
                    next.push(dep.clone());
                }
            }
        }
        false
    };
    edges.keys().filter(|f| reaches(f, f)).cloned().collect()
}

#[test]
fn no_file_of_files_capability_or_fleet_is_on_an_import_circle() {
    for folder in ["files", "capability", "fleet"] {
        assert_eq!(on_circles(folder), BTreeSet::new(), "src/{folder}/");
    }
}

/// The tool performers sit below `tools.rs` (which decides nothing:
/// `capability::backend::route` does): none of them imports it.
#[test]
fn no_host_tool_performer_is_on_an_import_circle() {
    let performers = [
        "tools",
        "toolbox",
        "computers",
        "files",
        "files_grant",
        "files_journal",
        "mcp",
        "ui",
        "fleet",
    ];
    let found = on_circles("host");
    let tied: Vec<_> = performers.iter().filter(|f| found.contains(**f)).collect();
    assert!(tied.is_empty(), "on a circle in src/host/: {tied:?}");
}

#[test]
fn the_circle_finder_sees_grouped_and_nested_imports() {
    assert_eq!(heads("tools::HostTools;"), ["tools"]);
    assert_eq!(
        heads("{bindings::{self, X}, mcp, Inner};"),
        ["bindings", "mcp", "Inner"]
    );
}
