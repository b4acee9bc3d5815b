//! The crate's top-level modules form layers: no import circle between
//! them (ARCHITECTURE.md). A module's dependencies are the `crate::<module>`
//! paths its source names outside comments.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The modules `text` names as `crate::<module>`, comments left out.
fn named(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    sources(&src, &mut files);
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let module = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if module == "lib" || module == "host" {
            continue; // the crate root, and the wasm adapter on top of all
        }
        let deps = edges.entry(module.clone()).or_default();
        for dep in named(&fs::read_to_string(&file).unwrap()) {
            if dep != module {
                deps.insert(dep);
            }
        }
    }
    edges
}

/// A cycle through `node`, if the graph has one reachable from it.
fn cycle(
    node: &str,
    edges: &BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|n| n == node) {
        let mut found = path[at..].to_vec();
        found.push(node.to_owned());
        return Some(found);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_owned());
    for next in edges.get(node).into_iter().flatten() {
        if let Some(found) = cycle(next, edges, path, done) {
            return Some(found);
        }
    }
    path.pop();
    done.insert(node.to_owned());
    None
}

#[test]
fn top_level_modules_import_each_other_without_a_circle() {
    let edges = graph();
    assert!(edges.len() > 15, "modules found: {:?}", edges.keys());
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        let found = cycle(node, &edges, &mut Vec::new(), &mut done);
        assert!(
            found.is_none(),
            "import circle: {}",
            found.unwrap().join(" -> ")
        );
    }
}

#[test]
fn the_circle_check_finds_a_circle() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.insert("a".into(), ["b".to_owned()].into());
    edges.insert("b".into(), ["a".to_owned()].into());
    let found = cycle("a", &edges, &mut Vec::new(), &mut BTreeSet::new());
    assert_eq!(found, Some(vec!["a".into(), "b".into(), "a".into()]));
    assert_eq!(
        named("use crate::run::x; // crate::session"),
        ["run".to_owned()].into()
    );
}

/// `extension/` sits below the Sessions and the Agent (ARCHITECTURE.md):
/// sends reach admission through the `extension::Admit` port that
/// `session/` implements, and the Session id check lives in `text.rs`.
#[test]
fn extensions_import_no_module_above_them() {
    let edges = graph();
    let above = [
        "acp", "http", "fleet", "run", "ui", "agent", "mail", "session",
    ];
    let up: Vec<&String> = edges["extension"]
        .iter()
        .filter(|m| above.contains(&m.as_str()))
        .collect();
    assert!(up.is_empty(), "extension/ imports {up:?}");
}
