//! The manifest: named components, each a digest plus an optional human value.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::digest::{Digest, Framed, FORMAT_VERSION};
use crate::error::Error;
use crate::file::hash_file;
use crate::stat_cache::StatCache;
use crate::tree::{hash_tree, TreeComponents, TreeOptions};

/// One named input of a build: its digest and, where short, its human value.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq, Debug)]
pub struct Component {
    /// The digest of the input (see each `insert_*` method for what it covers).
    pub digest: Digest,
    /// The human value, kept for display and diffs: a version, a flag list (as a JSON array),
    /// an environment variable's value (`None` when unset), a file's git mode in a tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Named components of a build fingerprint; what a cache stores in its `meta.json`.
///
/// # Naming convention
/// A name is `kind:rest`, and [`crate::diff`] displays the kind from the prefix before the first
/// `:`: `source:` (a source file), `header:` (a header or include tree), `env:` (an environment
/// variable, see [`Manifest::insert_env`]), `toolchain:` (a compiler identity), `wheel:` (a Python
/// distribution), `python:` (an interpreter). A name without `:` is displayed as is; a list
/// component whose name starts with `flags` is displayed as a "flag list". Tree entries are
/// named `name/relpath` under the tree's name, so `header:include` yields
/// `header:include/tile.cuh`.
///
/// # Digest
/// [`Manifest::digest`] frames every component (name, digest, value) with its length and mixes
/// in [`FORMAT_VERSION`]: change an input, bump the version.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq, Debug)]
pub struct Manifest {
    /// The layout version this manifest was made with; a deserialised manifest from another
    /// version differs, and [`crate::diff`] says so.
    #[serde(default)]
    format_version: u32,
    components: BTreeMap<String, Component>,
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest::new()
    }
}

/// The digest of a flag list: each item framed, so `["-a b"]` and `["-a", "b"]` differ.
pub(crate) fn list_digest(items: &[String]) -> Digest {
    let mut h = Framed::new("list");
    h.u64(items.len() as u64);
    for item in items {
        h.bytes(item.as_bytes());
    }
    h.finish()
}

/// The items of a list component, if it is one (its value is a JSON array whose list digest is
/// the component's digest, which no other kind of component can match by accident).
pub(crate) fn list_items(c: &Component) -> Option<Vec<String>> {
    let items: Vec<String> = serde_json::from_str(c.value.as_deref()?).ok()?;
    (list_digest(&items) == c.digest).then_some(items)
}

impl Manifest {
    /// An empty manifest of the current [`FORMAT_VERSION`].
    pub fn new() -> Self {
        Manifest {
            format_version: FORMAT_VERSION,
            components: BTreeMap::new(),
        }
    }

    /// The layout version the manifest was made with.
    pub fn format_version(&self) -> u32 {
        self.format_version
    }

    /// Inserts (or replaces) a component.
    pub fn insert(&mut self, name: impl Into<String>, component: Component) {
        self.components.insert(name.into(), component);
    }

    /// Inserts the blake3 digest of `bytes`, without a value (for generated sources, rendered
    /// build files and other long inputs).
    pub fn insert_bytes(&mut self, name: impl Into<String>, bytes: &[u8]) {
        self.insert(
            name,
            Component {
                digest: Digest::of_bytes(bytes),
                value: None,
            },
        );
    }

    /// Inserts a short value (a version, an architecture): its digest, and the value for display.
    pub fn insert_value(&mut self, name: impl Into<String>, value: &str) {
        self.insert(
            name,
            Component {
                digest: Digest::of_bytes(value.as_bytes()),
                value: Some(value.to_owned()),
            },
        );
    }

    /// Inserts an ordered list (compiler flags): a framed digest of the items, and the items as
    /// a JSON array for display and for list diffs ("added `-O3`").
    pub fn insert_list(&mut self, name: impl Into<String>, items: &[String]) {
        let value = serde_json::to_string(items).unwrap_or_default();
        self.insert(
            name,
            Component {
                digest: list_digest(items),
                value: Some(value),
            },
        );
    }

    /// Inserts the content digest of a file (see [`crate::hash_file`]); the path is not hashed.
    pub fn insert_file(&mut self, name: impl Into<String>, path: &Path) -> Result<(), Error> {
        let digest = hash_file(path)?;
        self.insert(
            name,
            Component {
                digest,
                value: None,
            },
        );
        Ok(())
    }

    /// Inserts environment variable `var` under `env:VAR`. Unset and empty differ: an unset
    /// variable has no value and a digest of its own domain; a set one keeps its value (lossy
    /// UTF-8 for display; the digest covers the raw bytes).
    pub fn insert_env(&mut self, var: &str) {
        let component = match std::env::var_os(var) {
            None => Component {
                digest: Framed::new("env-unset").finish(),
                value: None,
            },
            Some(v) => Component {
                digest: Framed::new("env-set").bytes(v.as_bytes()).finish(),
                value: Some(v.to_string_lossy().into_owned()),
            },
        };
        self.insert(format!("env:{var}"), component);
    }

    /// Inserts a tree (see [`crate::hash_tree`]): always its digest under `name` (valued with its
    /// entry count), and with [`TreeComponents::PerFile`] (the default) each entry under
    /// `name/relpath`, valued with its git mode ("100644", "100755", "120000") so that an
    /// exec-bit flip shows in the diff.
    pub fn insert_tree(
        &mut self,
        name: impl Into<String>,
        root: &Path,
        options: &TreeOptions,
        cache: Option<&mut StatCache>,
    ) -> Result<(), Error> {
        let name = name.into();
        let tree = hash_tree(root, options, cache)?;
        if options.components == TreeComponents::PerFile {
            for ((rel, digest), kind) in tree.files.iter().zip(&tree.kinds) {
                self.insert(
                    format!("{name}/{rel}"),
                    Component {
                        digest: *digest,
                        value: Some(kind.git_mode().to_owned()),
                    },
                );
            }
        }
        self.insert(
            name,
            Component {
                digest: tree.digest,
                value: Some(format!("{} entries", tree.files.len())),
            },
        );
        Ok(())
    }

    /// The component called `name`.
    pub fn get(&self, name: &str) -> Option<&Component> {
        self.components.get(name)
    }

    /// Removes and returns the component called `name`.
    pub fn remove(&mut self, name: &str) -> Option<Component> {
        self.components.remove(name)
    }

    /// All components, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Component)> {
        self.components.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The number of components.
    pub fn len(&self) -> usize {
        self.components.len()
    }

    /// Whether there are no components.
    pub fn is_empty(&self) -> bool {
        self.components.is_empty()
    }

    /// The manifest's digest: each component framed (name, digest, value), in name order, with
    /// [`FORMAT_VERSION`] mixed in.
    pub fn digest(&self) -> Digest {
        let mut h = Framed::new("manifest");
        h.u64(self.components.len() as u64);
        for (name, c) in &self.components {
            h.bytes(name.as_bytes()).digest(&c.digest);
            match &c.value {
                None => h.u64(0),
                Some(v) => h.u64(1).bytes(v.as_bytes()),
            };
        }
        h.finish()
    }
}
