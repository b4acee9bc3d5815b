//! The crate's top-level modules form the layers of ARCHITECTURE.md's box:
//! each line imports only lines below it or its own, so no arrow points up
//! and no import circle forms. Inside a directory module the files import
//! each other without a circle. A module's dependencies are the
//! `crate::<module>` paths its source names outside comments.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// ARCHITECTURE.md's box, top to bottom: one entry per line, the top-level
/// modules it names. `host` (the wasm adapter over all of it) and `lib` (the
/// crate root) stand above the box and are left out. A new module must be
/// placed here.
const LAYERS: &[&[&str]] = &[
    &["acp", "mcp_server"],
    &["fleet"],
    &["http"],
    &["run"],
    &["ui"],
    &["agent"],
    &["observe"],
    &["mail"],
    &["session"],
    &["extension"],
    &["attention", "delivery", "trace"],
    &["history"],
    &["grants", "mcp"],
    &["computer"],
    &["files"],
    &["capability"],
    &["transcript", "settlement"],
    &["model", "model_choice", "usage"],
    &[
        "ctx",
        "budget",
        "meta",
        "store",
        "sql",
        "sse",
        "outbound",
        "json",
        "text",
        "error",
        "json_schema",
        "redact",
        "rpc",
    ],
    &["limits"],
];

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` without its line comments and its inline test modules
/// (`#[cfg(test)] mod tests { ... }`): a test may set up with any module.
fn code(text: &str) -> Vec<&str> {
    let mut kept = Vec::new();
    let mut lines = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""));
    while let Some(line) = lines.next() {
        if line.trim() != "#[cfg(test)]" {
            kept.push(line);
            continue;
        }
        let Some(next) = lines.next() else { break };
        if !(next.trim_start().starts_with("mod ") && next.trim_end().ends_with('{')) {
            kept.extend([line, next]);
            continue;
        }
        let mut depth = 1i32;
        for inner in lines.by_ref() {
            depth += inner.matches('{').count() as i32 - inner.matches('}').count() as i32;
            if depth <= 0 {
                break;
            }
        }
    }
    kept
}

/// The identifier at the start of `rest`.
fn ident(rest: &str) -> String {
    rest.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The names `text` reaches through `prefix`: `prefix name` and, for a
/// group, each item of `prefix{a::x, b, c::{y, z}}`.
fn reached(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let code = code(text).join("\n");
    let mut rest = code.as_str();
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start => {
                        item_start = false;
                        let name = ident(&group[i..]);
                        if !name.is_empty() && name != "self" {
                            found.insert(name);
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// The top-level modules `text` names as `crate::<module>`.
fn named(text: &str) -> BTreeSet<String> {
    reached(text, "crate::")
}

/// The top-level module a file under `src/` belongs to, and its unit inside
/// that module (the file or subdirectory under it; `mod` for the module's
/// own file).
fn place(relative: &Path) -> (String, String) {
    let parts: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect();
    let unit = match parts.len() {
        1 => "mod".to_owned(),
        _ => parts[1].clone(),
    };
    (parts[0].clone(), unit)
}

fn files() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files
        .into_iter()
        .map(|file| {
            let text = fs::read_to_string(&file).unwrap();
            (file.strip_prefix(&src).unwrap().to_owned(), text)
        })
        .collect()
}

/// Top-level module -> the top-level modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (relative, text) in files() {
        let (module, _) = place(&relative);
        if module == "lib" || module == "host" {
            continue; // the crate root, and the wasm adapter on top of all
        }
        let deps = edges.entry(module.clone()).or_default();
        for dep in named(&text) {
            if dep != module {
                deps.insert(dep);
            }
        }
    }
    edges
}

/// `dir/unit` -> the sibling units it names (`super::unit`,
/// `crate::dir::unit`), for every directory module. The module's own file
/// (`mod`) is left out: it declares its children, and they use its items.
fn unit_graph() -> BTreeMap<String, BTreeSet<String>> {
    let all = files();
    let mut units: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (relative, _) in &all {
        let (module, unit) = place(relative);
        if unit != "mod" {
            units.entry(module).or_default().insert(unit);
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (relative, text) in &all {
        let (module, unit) = place(relative);
        let Some(siblings) = units.get(&module) else {
            continue;
        };
        if unit == "mod" {
            continue;
        }
        let mut names = reached(text, &format!("crate::{module}::"));
        if relative.components().count() == 2 {
            names.extend(reached(text, "super::"));
        }
        let deps = edges.entry(format!("{module}/{unit}")).or_default();
        for name in names {
            if name != unit && siblings.contains(&name) {
                deps.insert(format!("{module}/{name}"));
            }
        }
    }
    edges
}

/// The line of the box that places `module`.
fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|line| line.contains(&module))
}

/// Every arrow `from -> to` with `to` on a line above `from`'s.
fn upward(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (from, deps) in edges {
        for to in deps {
            if let (Some(a), Some(b)) = (layer(from), layer(to)) {
                if b < a {
                    found.push((from.clone(), to.clone()));
                }
            }
        }
    }
    found
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

fn assert_no_circle(edges: &BTreeMap<String, BTreeSet<String>>) {
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        let found = cycle(node, edges, &mut Vec::new(), &mut done);
        assert!(
            found.is_none(),
            "import circle: {}",
            found.unwrap().join(" -> ")
        );
    }
}

#[test]
fn every_module_sits_on_one_line_of_the_box() {
    let edges = graph();
    assert!(edges.len() > 15, "modules found: {:?}", edges.keys());
    for module in edges.keys() {
        assert!(
            layer(module).is_some(),
            "module `{module}` is on no line of LAYERS (ARCHITECTURE.md's box): place it"
        );
    }
    let placed: Vec<&str> = LAYERS
        .iter()
        .flat_map(|line| line.iter().copied())
        .collect();
    for module in &placed {
        assert!(
            edges.contains_key(*module),
            "LAYERS names `{module}`, which is no module of src/"
        );
        assert_eq!(
            placed.iter().filter(|m| *m == module).count(),
            1,
            "LAYERS places `{module}` twice"
        );
    }
}

#[test]
fn no_arrow_points_up_the_box() {
    let edges = graph();
    let found = upward(&edges);
    assert!(
        found.is_empty(),
        "imports of a line above (ARCHITECTURE.md's box): {}",
        found
            .iter()
            .map(|(from, to)| format!("{from} -> {to}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

#[test]
fn top_level_modules_import_each_other_without_a_circle() {
    assert_no_circle(&graph());
}

#[test]
fn the_files_of_a_module_import_each_other_without_a_circle() {
    let edges = unit_graph();
    assert!(
        edges
            .get("host/tools")
            .is_some_and(|deps| deps.contains("host/bindings")),
        "the unit graph misses `host/tools -> host/bindings`"
    );
    assert_no_circle(&edges);
}

#[test]
fn the_checks_find_a_circle_an_upward_arrow_and_a_grouped_import() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.insert("a".into(), ["b".to_owned()].into());
    edges.insert("b".into(), ["a".to_owned()].into());
    let found = cycle("a", &edges, &mut Vec::new(), &mut BTreeSet::new());
    assert_eq!(found, Some(vec!["a".into(), "b".into(), "a".into()]));
    assert_eq!(
        named("use crate::run::x; // crate::session"),
        ["run".to_owned()].into()
    );
    assert_eq!(
        named(
            "use crate::a::x;\n#[cfg(test)]\nmod tests {\n    use crate::b::{c};\n}\nuse crate::d;"
        ),
        ["a".to_owned(), "d".to_owned()].into()
    );
    assert_eq!(
        reached("use super::{self, a::X, b,\n c::{d, e}};", "super::"),
        ["a", "b", "c"].map(str::to_owned).into()
    );

    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.insert("limits".into(), ["text".to_owned()].into());
    edges.insert("text".into(), ["limits".to_owned()].into());
    assert_eq!(upward(&edges), vec![("limits".into(), "text".into())]);
}

/// The files of `src/` whose code (comments and test modules left out)
/// contains `needle`.
fn files_naming(needle: &str) -> Vec<String> {
    files()
        .into_iter()
        .filter(|(_, text)| code(text).iter().any(|line| line.contains(needle)))
        .map(|(relative, _)| relative.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn hex_is_written_once() {
    assert_eq!(
        files_naming(":02x}"),
        Vec::<String>::new(),
        "hex-encode with crate::text::hex"
    );
}

#[test]
fn tables_are_made_by_store_schema_alone() {
    assert_eq!(
        files_naming("CREATE TABLE"),
        vec!["store/schema.rs".to_owned()],
        "a table is made by its store::schema::Group (`ensure`) or a migration"
    );
}
