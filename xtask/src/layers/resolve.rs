//! Resolving the paths a module names to the files that define what they name: the edges of the
//! module graph.
//!
//! A path is resolved as the compiler would, through child modules, items and `use`s (globs
//! included); a re-export is followed to the module that defines the item, so `crate::Error`
//! is an edge to `error.rs`, not to the root that re-exports it. A path that stops at one of the
//! crate's modules without naming an item there (a macro-made name) is an edge to that module;
//! one that leaves the crate (`std::`, another crate) is no edge.

use super::tree::Tree;
use std::collections::HashSet;

/// One edge of the graph: the file `from` names something defined in the file `to`, first at
/// `line` of `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub line: usize,
}

/// What a name denotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Binding {
    Module(usize),
    /// An item (or something inside one: a variant, an associated item) defined in this file.
    Item(usize),
}

/// The graph's edges, one per ordered pair of files, at the first line that makes it.
pub fn edges(tree: &Tree) -> Vec<Edge> {
    let resolver = Resolver { tree };
    let mut edges: Vec<Edge> = Vec::new();
    for (id, module) in tree.modules.iter().enumerate() {
        for reference in &module.refs {
            let mut active = HashSet::new();
            for binding in resolver.resolve(id, &reference.path, &mut active) {
                let to = resolver.file_of(binding);
                if to == module.file {
                    continue;
                }
                match edges
                    .iter_mut()
                    .find(|e| e.from == module.file && e.to == to)
                {
                    Some(edge) => edge.line = edge.line.min(reference.line),
                    None => edges.push(Edge {
                        from: module.file,
                        to,
                        line: reference.line,
                    }),
                }
            }
        }
    }
    edges
}

struct Resolver<'a> {
    tree: &'a Tree,
}

impl Resolver<'_> {
    fn file_of(&self, binding: Binding) -> usize {
        match binding {
            Binding::Module(module) => self.tree.modules[module].file,
            Binding::Item(file) => file,
        }
    }

    /// What `path`, named in `module`, denotes; empty when it leaves the crate. `active` holds
    /// the lookups in progress, so a `use` that names itself (or glob re-exports that reach
    /// each other) ends instead of recursing.
    fn resolve(
        &self,
        module: usize,
        path: &[String],
        active: &mut HashSet<(usize, String)>,
    ) -> Vec<Binding> {
        let Some((first, rest)) = path.split_first() else {
            return vec![Binding::Module(module)];
        };
        let mut current = match first.as_str() {
            "crate" => vec![Binding::Module(0)],
            "self" => vec![Binding::Module(module)],
            "super" => match self.tree.modules[module].parent {
                Some(parent) => vec![Binding::Module(parent)],
                None => return Vec::new(),
            },
            "Self" => return Vec::new(),
            name => self.lookup(module, name, active),
        };
        for segment in rest {
            let mut next = Vec::new();
            for binding in current {
                let found = match binding {
                    // `super::super::x`
                    Binding::Module(m) if segment == "super" => self.tree.modules[m]
                        .parent
                        .map(Binding::Module)
                        .into_iter()
                        .collect(),
                    Binding::Module(m) => {
                        let found = self.lookup(m, segment, active);
                        if found.is_empty() {
                            vec![Binding::Item(self.tree.modules[m].file)]
                        } else {
                            found
                        }
                    }
                    // Past an item: a variant, an associated item; the item's file is the target.
                    item @ Binding::Item(_) => vec![item],
                };
                for binding in found {
                    if !next.contains(&binding) {
                        next.push(binding);
                    }
                }
            }
            current = next;
        }
        current
    }

    /// What `name` denotes in `module`'s namespace: its child modules, its items, the names its
    /// `use`s bind and, failing those, what its globs bring in.
    fn lookup(
        &self,
        module: usize,
        name: &str,
        active: &mut HashSet<(usize, String)>,
    ) -> Vec<Binding> {
        if !active.insert((module, name.to_string())) {
            return Vec::new();
        }
        let m = &self.tree.modules[module];
        let mut found: Vec<Binding> = m
            .children
            .iter()
            .filter(|(child, _)| child == name)
            .map(|(_, id)| Binding::Module(*id))
            .collect();
        if m.items.contains(name) {
            found.push(Binding::Item(m.file));
        }
        for import in m.imports.iter().filter(|i| i.name == name) {
            found.extend(self.resolve(module, &import.path, active));
        }
        if found.is_empty() {
            for glob in &m.globs {
                for source in self.resolve(module, glob, active) {
                    if let Binding::Module(source) = source {
                        found.extend(self.lookup(source, name, active));
                    }
                }
            }
        }
        active.remove(&(module, name.to_string()));
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The edges of a fixture crate, as `from.rs -> to.rs` names, sorted.
    fn edges_of(files: &[(&str, &str)]) -> Vec<String> {
        let dir = tempfile::tempdir().expect("a temp dir for the fixture crate");
        for (path, text) in files {
            std::fs::write(dir.path().join(path), text).expect("write a fixture file");
        }
        let tree = Tree::read(&dir.path().join("lib.rs")).expect("the fixture parses");
        let name = |file: usize| {
            tree.files[file]
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let mut edges: Vec<String> = edges(&tree)
            .iter()
            .map(|e| format!("{} -> {}:{}", name(e.from), name(e.to), e.line))
            .collect();
        edges.sort();
        edges
    }

    #[test]
    fn a_root_reexport_resolves_to_the_defining_module() {
        let edges = edges_of(&[
            ("lib.rs", "mod error;\nmod user;\npub use error::Error;\n"),
            ("error.rs", "pub struct Error;\n"),
            ("user.rs", "\nfn f() -> crate::Error { todo!() }\n"),
        ]);
        assert_eq!(
            edges,
            ["lib.rs -> error.rs:3", "user.rs -> error.rs:2"],
            "`crate::Error` is an edge to error.rs, not to the root; `mod` itself is no edge"
        );
    }

    #[test]
    fn super_self_nested_groups_and_globs_resolve() {
        let edges = edges_of(&[
            (
                "lib.rs",
                "mod a;\nmod b;\nmod c;\nmod d;\npub struct Root;\n",
            ),
            ("a.rs", "use super::Root;\n"),
            (
                "b.rs",
                "use crate::{c::{self, C}, d::*};\nfn f() { c::g(); D; }\n",
            ),
            ("c.rs", "pub struct C;\npub fn g() {}\n"),
            ("d.rs", "pub struct D;\n"),
        ]);
        assert_eq!(
            edges,
            ["a.rs -> lib.rs:1", "b.rs -> c.rs:1", "b.rs -> d.rs:1"],
            "a parent's item is an edge to the parent; groups, `self` and globs reach their modules"
        );
    }

    #[test]
    fn external_paths_variants_and_unknown_names() {
        let edges = edges_of(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            (
                "a.rs",
                "use std::fmt;\nuse serde::Serialize;\npub enum E { V }\nmacro_rules! m { () => {} }\n",
            ),
            (
                "b.rs",
                "fn f() {\n    let _ = crate::a::E::V;\n    crate::a::made_by_a_macro();\n    \
                 std::mem::drop(1);\n}\n",
            ),
        ]);
        assert_eq!(
            edges,
            ["b.rs -> a.rs:2"],
            "a variant is its enum's module, an unknown name its module; std and serde are no edge"
        );
    }

    #[test]
    fn glob_reexports_that_reach_each_other_end() {
        let edges = edges_of(&[
            ("lib.rs", "mod a;\nmod b;\npub use a::*;\n"),
            ("a.rs", "pub use crate::b::*;\n"),
            ("b.rs", "pub use crate::a::*;\nfn f() { crate::Missing; }\n"),
        ]);
        assert_eq!(
            edges,
            [
                "a.rs -> b.rs:1",
                "b.rs -> a.rs:1",
                "b.rs -> lib.rs:2",
                "lib.rs -> a.rs:3"
            ],
            "the lookup ends; a name found nowhere is an edge to the module it was sought in"
        );
    }
}
