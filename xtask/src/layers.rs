//! `cargo xtask layers` (also a step of `cargo xtask test`): the module graph of every crate
//! target in the workspace, checked for import cycles and, where a crate declares them, for
//! uses up its layers.
//!
//! A node is a module file (`a.rs`, `a/mod.rs`; an inline module belongs to its file). An edge
//! is any path a file names that resolves to an item another file defines: `use crate::a::b`,
//! `super::x`, `self::y`, nested groups, globs, and paths in code, types, attributes and macro
//! bodies alike. A re-export is followed to the module that defines the item (`tree.rs`,
//! `resolve.rs`). Test code (`cfg(test)`, `#[test]`) is no part of the graph. The check fails
//! on any cycle (a strongly connected component of more than one file), naming each as a chain
//! of modules with the file and line of each edge, and on any use of a higher layer (`graph.rs`).

mod graph;
mod resolve;
mod tree;

use crate::util;
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tree::Tree;

/// A crate's layers, lowest first: each a name and its members, the top-level folders and root
/// files (`"base"`, `"lib.rs"`) of its `src`. A module may use only modules of its own layer or
/// lower ones, with no exceptions; every module must be in a layer. Only the library target is
/// held to it. For example, for a crate split into folders:
/// `("jit-cache", &[("base", &["base"]), ("store", &["store"]), ("facade", &["lib.rs", "cache.rs"])])`.
type Layers = &'static [(&'static str, &'static [&'static str])];

/// The crates that declare layers, lowest first (ARCHITECTURE.md says what each knows).
const LAYERS: &[(&str, Layers)] = &[(
    "jit-cache",
    &[
        ("base", &["base", "error"]),
        ("storage", &["storage"]),
        ("store", &["store"]),
        ("build", &["build"]),
        (
            "facade",
            &[
                "lib",
                "context",
                "lookup",
                "publication",
                "fleet",
                "miss",
                "memo",
                "cache",
                "batch",
                "maintenance",
                "pack",
                "cuda",
            ],
        ),
    ],
)];

/// One crate target: the library or a binary.
struct Target {
    krate: String,
    /// `lib`, or `bin <name>`.
    kind: String,
    root: PathBuf,
}

/// One edge of a finding: `from` uses `to`, first at `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    from: String,
    to: String,
    file: PathBuf,
    line: usize,
}

/// A broken rule in one target.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finding {
    /// Modules that use each other: the edges of the chain, in order.
    Cycle(Vec<Step>),
    /// A use of a module in a higher layer.
    Upward {
        step: Step,
        from_layer: String,
        to_layer: String,
    },
    /// A module that no layer of the crate's table names.
    Unlayered { module: String, file: PathBuf },
}

impl Finding {
    /// The finding as the report prints it, with paths shown relative to `base`.
    fn describe(&self, base: &Path) -> String {
        let shown = |file: &Path| {
            file.strip_prefix(base)
                .unwrap_or(file)
                .display()
                .to_string()
        };
        match self {
            Finding::Cycle(steps) => {
                let mut chain: Vec<&str> = steps.iter().map(|s| s.from.as_str()).collect();
                chain.extend(steps.first().map(|s| s.from.as_str()));
                let mut text = format!("import cycle {}", chain.join(" -> "));
                for step in steps {
                    let _ = write!(
                        text,
                        "\n    {} -> {}: {}:{}",
                        step.from,
                        step.to,
                        shown(&step.file),
                        step.line
                    );
                }
                text
            }
            Finding::Upward {
                step,
                from_layer,
                to_layer,
            } => format!(
                "layer `{from_layer}` uses the higher layer `{to_layer}`: {} -> {} at {}:{}",
                step.from,
                step.to,
                shown(&step.file),
                step.line
            ),
            Finding::Unlayered { module, file } => format!(
                "module {module} ({}) is in no layer of the crate's table in xtask/src/layers.rs",
                shown(file)
            ),
        }
    }
}

/// `cargo xtask layers [--edges CRATE]`: the check; `--edges` prints one crate's graph instead
/// (each edge at its first line), to draw its layers from.
pub fn run(args: &[String]) -> Result<()> {
    let root = util::workspace_root();
    match args {
        [] => {}
        [flag, krate] if flag == "--edges" => return print_edges(&root, krate),
        _ => bail!("usage: cargo xtask layers [--edges CRATE] (got {args:?})"),
    }
    let mut failures = 0;
    let targets = targets(&root)?;
    for target in &targets {
        let layers = LAYERS
            .iter()
            .find(|(krate, _)| *krate == target.krate && target.kind == "lib")
            .map(|(_, layers)| *layers);
        let findings = check_target(&target.root, layers)?;
        for finding in &findings {
            eprintln!(
                "{} ({}): {}",
                target.krate,
                target.kind,
                finding.describe(&root)
            );
        }
        failures += findings.len();
    }
    eprintln!("layers: {} targets, {failures} findings", targets.len());
    if failures > 0 {
        bail!("the module graph check failed: {failures} findings");
    }
    Ok(())
}

/// Prints every edge of each target of `krate`.
fn print_edges(root: &Path, krate: &str) -> Result<()> {
    let targets = targets(root)?;
    let mut found = false;
    for target in targets.iter().filter(|t| t.krate == krate) {
        found = true;
        let tree = Tree::read(&target.root)?;
        println!("{krate} ({}):", target.kind);
        for edge in resolve::edges(&tree) {
            let file = &tree.files[edge.from].path;
            println!(
                "    {} -> {}: {}:{}",
                tree.files[edge.from].module,
                tree.files[edge.to].module,
                file.strip_prefix(root).unwrap_or(file).display(),
                edge.line
            );
        }
    }
    if !found {
        bail!("no crate named {krate} in the workspace");
    }
    Ok(())
}

/// The findings of one target, whose root file is `root`, held to `layers` where given.
fn check_target(root: &Path, layers: Option<Layers>) -> Result<Vec<Finding>> {
    let tree = Tree::read(root)?;
    let edges = resolve::edges(&tree);
    let pairs: Vec<(usize, usize)> = edges.iter().map(|e| (e.from, e.to)).collect();
    let step = |from: usize, to: usize| -> Step {
        let edge = edges
            .iter()
            .find(|e| e.from == from && e.to == to)
            .copied()
            .unwrap_or(resolve::Edge { from, to, line: 0 });
        Step {
            from: tree.files[from].module.clone(),
            to: tree.files[to].module.clone(),
            file: tree.files[from].path.clone(),
            line: edge.line,
        }
    };
    let mut findings = Vec::new();
    for component in graph::tangles(tree.files.len(), &pairs) {
        for cycle in graph::cycles(&component, &pairs) {
            let steps = (0..cycle.len())
                .map(|i| step(cycle[i], cycle[(i + 1) % cycle.len()]))
                .collect();
            findings.push(Finding::Cycle(steps));
        }
    }
    if let Some(layers) = layers {
        let src = root.parent().unwrap_or(root);
        let layer_of: Vec<Option<usize>> = tree
            .files
            .iter()
            .map(|file| layer_of(&file.path, src, layers))
            .collect();
        for (file, layer) in tree.files.iter().zip(&layer_of) {
            if layer.is_none() {
                findings.push(Finding::Unlayered {
                    module: file.module.clone(),
                    file: file.path.clone(),
                });
            }
        }
        for index in graph::upward(&pairs, &layer_of) {
            let (from, to) = pairs[index];
            let (Some(from_layer), Some(to_layer)) = (layer_of[from], layer_of[to]) else {
                continue;
            };
            findings.push(Finding::Upward {
                step: step(from, to),
                from_layer: layers[from_layer].0.to_string(),
                to_layer: layers[to_layer].0.to_string(),
            });
        }
    }
    Ok(findings)
}

/// The position in `layers` of the layer that holds `file`: by its first component below `src`
/// (a folder, or a root file), `.rs` aside on both sides.
fn layer_of(file: &Path, src: &Path, layers: Layers) -> Option<usize> {
    let first = file.strip_prefix(src).ok()?.components().next()?;
    let first = first.as_os_str().to_str()?;
    let first = first.strip_suffix(".rs").unwrap_or(first);
    layers.iter().position(|(_, members)| {
        members
            .iter()
            .any(|m| m.strip_suffix(".rs").unwrap_or(m) == first)
    })
}

/// Every library and binary target of the workspace's members (integration tests, benches and
/// examples are test code, as `cfg(test)` modules are).
fn targets(root: &Path) -> Result<Vec<Target>> {
    let mut targets = Vec::new();
    for package in members(root)? {
        let manifest = package.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest)
            .with_context(|| format!("read {}", manifest.display()))?;
        let krate = package_name(&text)
            .with_context(|| format!("no [package] name in {}", manifest.display()))?;
        let src = package.join("src");
        let mut add = |kind: String, root: PathBuf| {
            if root.is_file() {
                targets.push(Target {
                    krate: krate.clone(),
                    kind,
                    root,
                });
            }
        };
        add("lib".into(), src.join("lib.rs"));
        add("bin".into(), src.join("main.rs"));
        let Ok(bins) = std::fs::read_dir(src.join("bin")) else {
            continue;
        };
        let mut bins: Vec<PathBuf> = bins.filter_map(|e| e.ok().map(|e| e.path())).collect();
        bins.sort();
        for bin in bins {
            let name = bin.file_stem().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            if bin.is_dir() {
                add(format!("bin {name}"), bin.join("main.rs"));
            } else if bin.extension().is_some_and(|e| e == "rs") {
                add(format!("bin {name}"), bin);
            }
        }
    }
    Ok(targets)
}

/// The package folders the root manifest's `members` names (`"crates/*"` expanded).
fn members(root: &Path) -> Result<Vec<PathBuf>> {
    let manifest = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("read {}", manifest.display()))?;
    let list = text
        .find("\nmembers")
        .and_then(|at| text[at..].split_once('['))
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .with_context(|| format!("no workspace members in {}", manifest.display()))?;
    let mut packages = Vec::new();
    for member in list.split(',').map(|m| m.trim().trim_matches('"')) {
        if member.is_empty() {
            continue;
        }
        if let Some(folder) = member.strip_suffix("/*") {
            let folder = root.join(folder);
            let entries =
                std::fs::read_dir(&folder).with_context(|| format!("list {}", folder.display()))?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.join("Cargo.toml").is_file())
                .collect();
            found.sort();
            packages.extend(found);
        } else {
            packages.push(root.join(member));
        }
    }
    Ok(packages)
}

/// The `name` of a manifest's `[package]` table.
fn package_name(manifest: &str) -> Option<String> {
    let package = manifest.split("[package]").nth(1)?;
    let package = package.split("\n[").next()?;
    package.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "name").then(|| value.trim().trim_matches('"').to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a fixture crate's files under a temp dir and checks its `lib.rs`.
    fn check(files: &[(&str, &str)], layers: Option<Layers>) -> Vec<String> {
        let dir = tempfile::tempdir().expect("a temp dir for the fixture crate");
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("a fixture path has a parent"))
                .expect("create the fixture's folders");
            std::fs::write(&path, text).expect("write a fixture file");
        }
        check_target(&dir.path().join("lib.rs"), layers)
            .expect("the fixture parses")
            .iter()
            .map(|f| f.describe(dir.path()))
            .collect()
    }

    const LAYERED: Layers = &[
        ("base", &["base"]),
        ("store", &["store"]),
        ("facade", &["lib.rs", "cache.rs"]),
    ];

    /// A clean layered crate: the facade re-exports, the store uses the base.
    fn clean_layered() -> Vec<(&'static str, &'static str)> {
        vec![
            (
                "lib.rs",
                "mod base;\nmod cache;\nmod store;\npub use cache::Cache;\n",
            ),
            (
                "cache.rs",
                "use crate::store::Store;\npub struct Cache(Store);\n",
            ),
            ("base/mod.rs", "pub mod key;\n"),
            ("base/key.rs", "pub struct Key;\n"),
            (
                "store/mod.rs",
                "use crate::base::key::Key;\npub struct Store(Key);\n",
            ),
        ]
    }

    #[test]
    fn a_clean_layered_crate_passes() {
        assert_eq!(
            check(&clean_layered(), Some(LAYERED)),
            Vec::<String>::new(),
            "no cycle, no upward use, every module in a layer"
        );
    }

    #[test]
    fn an_upward_import_is_reported_with_its_line() {
        let mut files = clean_layered();
        files[3] = (
            "base/key.rs",
            "pub struct Key;\nfn f() { crate::store::extra::g(); }\n",
        );
        files[4] = (
            "store/mod.rs",
            "pub mod extra;\nuse crate::base::key::Key;\npub struct Store(Key);\n",
        );
        files.push(("store/extra.rs", "pub fn g() {}\n"));
        assert_eq!(
            check(&files, Some(LAYERED)),
            ["layer `base` uses the higher layer `store`: base::key -> store::extra at base/key.rs:2"],
            "a path in code up a layer is a violation, though it makes no cycle"
        );
    }

    #[test]
    fn a_module_outside_every_layer_is_reported() {
        let mut files = clean_layered();
        files[0] = (
            "lib.rs",
            "mod base;\nmod cache;\nmod store;\nmod stray;\npub use cache::Cache;\n",
        );
        files.push(("stray.rs", ""));
        assert_eq!(
            check(&files, Some(LAYERED)),
            ["module stray (stray.rs) is in no layer of the crate's table in xtask/src/layers.rs"],
            "a layered crate places every module"
        );
    }

    #[test]
    fn a_super_cycle_is_named_with_each_edge() {
        let files = [
            ("lib.rs", "mod a;\n"),
            (
                "a/mod.rs",
                "mod b;\npub struct Shared;\nuse self::b::helper;\n",
            ),
            ("a/b.rs", "pub fn helper() {}\nfn f(_: super::Shared) {}\n"),
        ];
        assert_eq!(
            check(&files, None),
            ["import cycle a -> a::b -> a\n    a -> a::b: a/mod.rs:3\n    a::b -> a: a/b.rs:2"],
            "`super::` to a parent that uses its child is a cycle"
        );
    }

    #[test]
    fn a_cycle_through_a_root_reexport_is_found() {
        let files = [
            (
                "lib.rs",
                "mod engine;\nmod pool;\npub use engine::Engine;\n",
            ),
            (
                "engine.rs",
                "use crate::pool::Pool;\npub struct Engine(Pool);\n",
            ),
            ("pool.rs", "pub struct Pool;\nfn f(_: &crate::Engine) {}\n"),
        ];
        assert_eq!(
            check(&files, None),
            [
                "import cycle engine -> pool -> engine\n    engine -> pool: engine.rs:1\n    \
              pool -> engine: pool.rs:2"
            ],
            "`crate::Engine` resolves through the root's re-export to engine.rs"
        );
    }

    #[test]
    fn a_package_name_is_read_from_its_manifest() {
        let manifest =
            "[package]\nname = \"direct-io\"\nversion.workspace = true\n\n[lib]\nname = \"x\"\n";
        assert_eq!(package_name(manifest).as_deref(), Some("direct-io"));
    }

    #[test]
    fn this_workspace_lists_its_crates_and_their_binaries() {
        let targets = targets(&util::workspace_root()).expect("the workspace's targets");
        let has =
            |krate: &str, kind: &str| targets.iter().any(|t| t.krate == krate && t.kind == kind);
        assert!(has("durable-fs", "lib"), "a library target");
        assert!(has("xtask", "bin"), "a src/main.rs binary");
        assert!(
            has("crash-harness", "bin crash-harness"),
            "a src/bin/<name>/main.rs binary"
        );
        assert!(
            has("file-trace", "bin file-trace-exerciser"),
            "a src/bin/<name>.rs binary"
        );
        assert!(has("e2e-tests", "lib"), "the root tests package");
    }
}
