//! Reading one crate target's module tree from its sources: the files (the graph's nodes), the
//! logical modules they hold, what each module defines and imports, and every path its code names.
//!
//! Test code is left out: an item under a `cfg` that requires `test` (or a `#[test]` function)
//! may reach anything, so it is not part of the graph.

use anyhow::{Context, Result};
use proc_macro2::{Spacing, TokenStream, TokenTree};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use syn::visit::{self, Visit};

/// One source file of the target: a node of the module graph.
#[derive(Debug)]
pub struct FileNode {
    pub path: PathBuf,
    /// The logical path of the first module the file holds (`crate`, `imp::probe`).
    pub module: String,
}

/// A logical module: a file, or an inline `mod name { .. }` within one.
#[derive(Debug, Default)]
pub struct Module {
    /// The file that holds it (an index into `Tree::files`).
    pub file: usize,
    pub parent: Option<usize>,
    /// Child modules by name; a name may repeat when `cfg`s choose between files.
    pub children: Vec<(String, usize)>,
    /// Names of the items defined here, modules aside.
    pub items: HashSet<String>,
    /// Names brought in by `use` (including `pub use` re-exports).
    pub imports: Vec<Import>,
    /// The paths of `use path::*`.
    pub globs: Vec<Vec<String>>,
    /// Every path this module's code names: `use` leaves, paths in code, types, attributes and
    /// macro bodies.
    pub refs: Vec<Ref>,
}

/// A name a `use` binds, and the path it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub name: String,
    pub path: Vec<String>,
}

/// A path named in code, with its line in the module's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ref {
    pub path: Vec<String>,
    pub line: usize,
}

/// A target's module tree: `modules[0]` is the crate root.
#[derive(Debug, Default)]
pub struct Tree {
    pub files: Vec<FileNode>,
    pub modules: Vec<Module>,
}

impl Tree {
    /// Reads the tree of the target whose root file is `root` (`src/lib.rs`, `src/main.rs`).
    pub fn read(root: &Path) -> Result<Tree> {
        let mut tree = Tree::default();
        let dir = root.parent().map(Path::to_path_buf).unwrap_or_default();
        tree.load_file(root, None, "crate", dir)?;
        Ok(tree)
    }

    /// Parses `path` as the module `logical` (a child of `parent`) whose child modules live in
    /// `dir`, and everything below it.
    fn load_file(
        &mut self,
        path: &Path,
        parent: Option<usize>,
        logical: &str,
        dir: PathBuf,
    ) -> Result<usize> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let file = syn::parse_file(&text).with_context(|| format!("parse {}", path.display()))?;
        self.files.push(FileNode {
            path: path.to_path_buf(),
            module: logical.to_string(),
        });
        let file_id = self.files.len() - 1;
        let module = self.new_module(file_id, parent);
        self.load_items(&file.items, module, logical, &dir, path)?;
        Ok(module)
    }

    /// Whether a module is an inline `mod name { .. }` (it shares its parent's file).
    fn is_inline(&self, module: usize) -> bool {
        let module = &self.modules[module];
        module
            .parent
            .is_some_and(|parent| self.modules[parent].file == module.file)
    }

    fn new_module(&mut self, file: usize, parent: Option<usize>) -> usize {
        self.modules.push(Module {
            file,
            parent,
            ..Module::default()
        });
        self.modules.len() - 1
    }

    /// Records a module's items and follows its `mod` declarations. `dir` is where its child
    /// modules' files are; `source` is the file that holds it (for `#[path]`).
    fn load_items(
        &mut self,
        items: &[syn::Item],
        module: usize,
        logical: &str,
        dir: &Path,
        source: &Path,
    ) -> Result<()> {
        for item in items {
            if is_test_only(item_attrs(item)) {
                continue;
            }
            if let syn::Item::Mod(declared) = item {
                self.load_mod(declared, module, logical, dir, source)?;
                continue;
            }
            if let Some(name) = item_name(item) {
                self.modules[module].items.insert(name);
            }
            if let syn::Item::Macro(mac) = item {
                // An exported `macro_rules!` is an item of the crate root, wherever it is written.
                let exported = mac.attrs.iter().any(|a| a.path().is_ident("macro_export"));
                if let (true, Some(name)) = (exported, &mac.ident) {
                    self.modules[0].items.insert(name.to_string());
                }
            }
            let mut collector = Collector {
                module: &mut self.modules[module],
            };
            collector.visit_item(item);
        }
        Ok(())
    }

    /// Follows one `mod` item: an inline module stays in its file, `mod name;` loads the file
    /// Cargo would (`dir/name.rs` or `dir/name/mod.rs`, or the `#[path]`).
    fn load_mod(
        &mut self,
        declared: &syn::ItemMod,
        parent: usize,
        logical: &str,
        dir: &Path,
        source: &Path,
    ) -> Result<()> {
        let name = declared.ident.to_string();
        let child_logical = if logical == "crate" {
            name.clone()
        } else {
            format!("{logical}::{name}")
        };
        for attr in &declared.attrs {
            Collector {
                module: &mut self.modules[parent],
            }
            .visit_attribute(attr);
        }
        let path_attr = path_attribute(&declared.attrs);
        let child = if let Some((_, items)) = &declared.content {
            let file = self.modules[parent].file;
            let child = self.new_module(file, Some(parent));
            let child_dir = match &path_attr {
                Some(path) => dir.join(path),
                None => dir.join(&name),
            };
            self.load_items(items, child, &child_logical, &child_dir, source)?;
            child
        } else {
            let (path, child_dir) = match &path_attr {
                // A file named by `#[path]` keeps its children beside it, as a `mod.rs` does.
                Some(path) => {
                    // Relative to the declaring file's folder, or within an inline module to
                    // the folder its children would have.
                    let base = if self.is_inline(parent) {
                        dir.to_path_buf()
                    } else {
                        source.parent().map(Path::to_path_buf).unwrap_or_default()
                    };
                    let path = base.join(path);
                    let child_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
                    (path, child_dir)
                }
                None => {
                    let flat = dir.join(format!("{name}.rs"));
                    if flat.is_file() {
                        (flat, dir.join(&name))
                    } else {
                        (dir.join(&name).join("mod.rs"), dir.join(&name))
                    }
                }
            };
            self.load_file(&path, Some(parent), &child_logical, child_dir)?
        };
        self.modules[parent].children.push((name, child));
        Ok(())
    }
}

/// The string of a `#[path = "..."]` attribute.
fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// Whether these attributes compile their item only in tests: a `cfg` whose predicate requires
/// `test`, or `#[test]` itself.
pub fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if attr.path().is_ident("test") {
            return true;
        }
        if !attr.path().is_ident("cfg") {
            return false;
        }
        attr.parse_args::<syn::Meta>()
            .is_ok_and(|predicate| requires_test(&predicate))
    })
}

/// Whether a `cfg` predicate can hold only when `test` does.
fn requires_test(predicate: &syn::Meta) -> bool {
    match predicate {
        syn::Meta::Path(path) => path.is_ident("test"),
        syn::Meta::List(list) => {
            let Ok(args) = list.parse_args_with(
                syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
            ) else {
                return false;
            };
            if list.path.is_ident("all") {
                args.iter().any(requires_test)
            } else if list.path.is_ident("any") {
                !args.is_empty() && args.iter().all(requires_test)
            } else {
                false
            }
        }
        syn::Meta::NameValue(_) => false,
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The name an item defines in its module (modules and `use`s aside).
fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::ExternCrate(i) => i.rename.as_ref().map_or(&i.ident, |(_, rename)| rename),
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// Collects a module's imports and the paths its code names.
struct Collector<'a> {
    module: &'a mut Module,
}

impl Collector<'_> {
    fn add_ref(&mut self, path: Vec<String>, line: usize) {
        self.module.refs.push(Ref { path, line });
    }

    /// Every `a::b` path in a token stream (macro bodies, attribute arguments): the compiler sees
    /// them after expansion, so they are uses as much as paths in code.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(group) => {
                    self.scan_tokens(group.stream());
                    i += 1;
                }
                TokenTree::Ident(first) if !follows_path_separator(&tokens, i) => {
                    let mut path = vec![first.to_string()];
                    let mut next = i + 1;
                    while is_path_separator(&tokens, next) {
                        let Some(TokenTree::Ident(segment)) = tokens.get(next + 2) else {
                            break;
                        };
                        path.push(segment.to_string());
                        next += 3;
                    }
                    if path.len() > 1 {
                        self.add_ref(path, first.span().start().line);
                    }
                    i = next;
                }
                _ => i += 1,
            }
        }
    }
}

/// Whether `tokens[at..]` starts with `::`.
fn is_path_separator(tokens: &[TokenTree], at: usize) -> bool {
    matches!(
        (tokens.get(at), tokens.get(at + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':'
    )
}

/// Whether the ident at `at` follows a `::` (`::std::x`: an external path).
fn follows_path_separator(tokens: &[TokenTree], at: usize) -> bool {
    at >= 2 && is_path_separator(tokens, at - 2)
}

/// The leaves of a `use` tree: what each binds and the full path it names.
fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, module: &mut Module) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, module);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let line = n.ident.span().start().line;
            let (name, path) = if n.ident == "self" {
                (prefix.last().cloned().unwrap_or_default(), prefix.clone())
            } else {
                let mut path = prefix.clone();
                path.push(n.ident.to_string());
                (n.ident.to_string(), path)
            };
            module.refs.push(Ref {
                path: path.clone(),
                line,
            });
            module.imports.push(Import { name, path });
        }
        syn::UseTree::Rename(r) => {
            let line = r.ident.span().start().line;
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            module.refs.push(Ref {
                path: path.clone(),
                line,
            });
            if r.rename != "_" {
                module.imports.push(Import {
                    name: r.rename.to_string(),
                    path,
                });
            }
        }
        syn::UseTree::Glob(g) => {
            let line = g.star_token.span.start().line;
            module.refs.push(Ref {
                path: prefix.clone(),
                line,
            });
            module.globs.push(prefix.clone());
        }
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_leaves(tree, prefix, module);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test_only(item_attrs(item)) {
            return;
        }
        visit::visit_item(self, item);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        // `use ::name` names an external crate.
        if item.leading_colon.is_none() {
            use_leaves(&item.tree, &mut Vec::new(), self.module);
        }
        for attr in &item.attrs {
            self.visit_attribute(attr);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        // Only reached for a module inside a function body; it counts as part of its module.
        for attr in &item.attrs {
            self.visit_attribute(attr);
        }
        if let Some((_, items)) = &item.content {
            for item in items {
                self.visit_item(item);
            }
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !is_test_only(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs = match item {
            syn::TraitItem::Const(i) => &i.attrs,
            syn::TraitItem::Fn(i) => &i.attrs,
            syn::TraitItem::Type(i) => &i.attrs,
            syn::TraitItem::Macro(i) => &i.attrs,
            _ => return visit::visit_trait_item(self, item),
        };
        if !is_test_only(attrs) {
            visit::visit_trait_item(self, item);
        }
    }

    fn visit_stmt(&mut self, stmt: &'ast syn::Stmt) {
        let test_only = match stmt {
            syn::Stmt::Local(local) => is_test_only(&local.attrs),
            syn::Stmt::Macro(mac) => is_test_only(&mac.attrs),
            _ => false,
        };
        if !test_only {
            visit::visit_stmt(self, stmt);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = path.segments[0].ident.span().start().line;
            self.add_ref(segments, line);
        }
        visit::visit_path(self, path);
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        // Doc comments' links are for rustdoc, not the compiler.
        if attr.path().is_ident("doc") {
            return;
        }
        visit::visit_attribute(self, attr);
        if let syn::Meta::List(list) = &attr.meta {
            self.scan_tokens(list.tokens.clone());
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        visit::visit_macro(self, mac);
        self.scan_tokens(mac.tokens.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree of one file's text, written to a temp dir as `lib.rs`.
    fn tree_of(files: &[(&str, &str)]) -> Tree {
        let dir = tempfile::tempdir().expect("a temp dir for the fixture crate");
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("a fixture path has a parent"))
                .expect("create the fixture's folders");
            std::fs::write(&path, text).expect("write a fixture file");
        }
        Tree::read(&dir.path().join("lib.rs")).expect("the fixture parses")
    }

    fn paths(module: &Module) -> Vec<String> {
        module.refs.iter().map(|r| r.path.join("::")).collect()
    }

    #[test]
    fn use_groups_renames_selfs_and_globs_become_leaves() {
        let tree = tree_of(&[(
            "lib.rs",
            "use crate::{a, b::{c, d as e, self}};\npub use x::*;\nuse ::ext::y;\nuse _f as _;",
        )]);
        let root = &tree.modules[0];
        assert_eq!(
            paths(root),
            [
                "crate::a",
                "crate::b::c",
                "crate::b::d",
                "crate::b",
                "x",
                "_f"
            ],
            "every leaf of a use tree is a path; a leading `::` is external"
        );
        let bound: Vec<&str> = root.imports.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            bound,
            ["a", "c", "e", "b"],
            "each leaf binds its last name or its rename"
        );
        assert_eq!(
            root.globs,
            [vec!["x".to_string()]],
            "a glob is recorded for resolution"
        );
    }

    #[test]
    fn paths_in_code_types_attributes_and_macros_are_refs_with_lines() {
        let text = "fn f() -> crate::a::T {\n    crate::b::g();\n    \
                    format!(\"{}\", super::c::h());\n    x\n}\n\
                    #[derive(crate::d::Derive)]\nstruct S;\n/// [link](crate::e::Doc)\nstruct D;\n\
                    macro_rules! m { () => { $crate::f::k() } }\n";
        let tree = tree_of(&[("lib.rs", text)]);
        let root = &tree.modules[0];
        let lines: Vec<(String, usize)> = root
            .refs
            .iter()
            .map(|r| (r.path.join("::"), r.line))
            .collect();
        let expected = [
            ("crate::a::T", 1),
            ("crate::b::g", 2),
            ("super::c::h", 3),
            ("crate::d::Derive", 6),
            ("crate::f::k", 10),
        ];
        let expected: Vec<(String, usize)> =
            expected.iter().map(|(p, l)| (p.to_string(), *l)).collect();
        assert_eq!(
            lines, expected,
            "code, types, attributes and macro bodies name paths; doc links do not"
        );
        assert!(
            root.items.contains("f") && root.items.contains("S") && root.items.contains("m"),
            "items defined at module level are recorded: {:?}",
            root.items
        );
    }

    #[test]
    fn test_only_items_and_modules_are_left_out() {
        let text = "#[cfg(test)]\nmod tests;\n#[cfg(all(test, not(loom)))]\nmod more { use crate::a::X; }\n\
                    #[cfg(any(test, feature = \"t\"))]\nuse crate::b::Y;\n#[test]\nfn t() { crate::c::z(); }\n\
                    struct S;\nimpl S {\n    #[cfg(test)]\n    fn f() { crate::d::w(); }\n}\n";
        let tree = tree_of(&[("lib.rs", text)]);
        assert_eq!(
            tree.files.len(),
            1,
            "a `#[cfg(test)] mod tests;` file is not read (it does not even exist here)"
        );
        assert_eq!(
            paths(&tree.modules[0]),
            ["crate::b::Y"],
            "only the item that a non-test build may compile counts"
        );
        assert_eq!(
            tree.modules.len(),
            1,
            "the test-only inline module is not a module"
        );
    }

    #[test]
    fn module_files_are_found_as_cargo_finds_them() {
        let tree = tree_of(&[
            (
                "lib.rs",
                "mod a;\nmod b;\nmod inline { pub mod c; }\n#[path = \"other.rs\"]\nmod d;\n",
            ),
            ("a.rs", "mod nested;\n"),
            ("a/nested.rs", ""),
            ("b/mod.rs", "mod deep;\n"),
            ("b/deep.rs", ""),
            ("inline/c.rs", ""),
            ("other.rs", ""),
        ]);
        let files: Vec<(String, String)> = tree
            .files
            .iter()
            .map(|f| {
                let name = f.path.file_name().map(|n| n.to_string_lossy().into_owned());
                let parent = f.path.parent().and_then(Path::file_name);
                let parent = parent.map(|p| p.to_string_lossy().into_owned());
                (
                    format!(
                        "{}/{}",
                        parent.unwrap_or_default(),
                        name.unwrap_or_default()
                    ),
                    f.module.clone(),
                )
            })
            .collect();
        let dir = tree.files[0]
            .path
            .parent()
            .and_then(Path::file_name)
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default();
        let expected = [
            (format!("{dir}/lib.rs"), "crate"),
            (format!("{dir}/a.rs"), "a"),
            ("a/nested.rs".to_string(), "a::nested"),
            ("b/mod.rs".to_string(), "b"),
            ("b/deep.rs".to_string(), "b::deep"),
            ("inline/c.rs".to_string(), "inline::c"),
            (format!("{dir}/other.rs"), "d"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(f, m)| (f.clone(), m.to_string()))
            .collect();
        assert_eq!(files, expected, "each module file, under its logical path");
    }
}
