//! Why a build is stale: the components that changed, appeared or vanished, displayed like
//! cargo's dirty reasons.

use std::fmt;

use crate::digest::Digest;
use crate::manifest::{list_items, Component, Manifest};

/// One difference between two manifests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The component exists in both with a different digest or value.
    Changed {
        /// Component name.
        name: String,
        /// The old component.
        old: Component,
        /// The new component.
        new: Component,
    },
    /// The component exists only in the new manifest.
    Added {
        /// Component name.
        name: String,
        /// The new component.
        new: Component,
    },
    /// The component exists only in the old manifest.
    Removed {
        /// Component name.
        name: String,
        /// The old component.
        old: Component,
    },
}

impl Change {
    /// The component's name.
    pub fn name(&self) -> &str {
        match self {
            Change::Changed { name, .. }
            | Change::Added { name, .. }
            | Change::Removed { name, .. } => name,
        }
    }
}

/// The name of the pseudo-component reported when the manifests' format versions differ.
pub const FORMAT_VERSION_COMPONENT: &str = "format_version";

/// The changes from `old` to `new`, sorted by component name. A difference in the manifests'
/// [`crate::FORMAT_VERSION`] is reported first as a change of [`FORMAT_VERSION_COMPONENT`].
pub fn diff(old: &Manifest, new: &Manifest) -> Vec<Change> {
    let mut out = Vec::new();
    if old.format_version() != new.format_version() {
        let c = |v: u32| Component {
            digest: Digest::of_bytes(&v.to_le_bytes()),
            value: Some(v.to_string()),
        };
        out.push(Change::Changed {
            name: FORMAT_VERSION_COMPONENT.to_owned(),
            old: c(old.format_version()),
            new: c(new.format_version()),
        });
    }
    let mut a = old.iter().peekable();
    let mut b = new.iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((n, c)), None) => {
                out.push(removed(n, c));
                a.next();
            }
            (None, Some((n, c))) => {
                out.push(added(n, c));
                b.next();
            }
            (Some((na, ca)), Some((nb, cb))) => match na.cmp(nb) {
                std::cmp::Ordering::Less => {
                    out.push(removed(na, ca));
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    out.push(added(nb, cb));
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if ca != cb {
                        out.push(Change::Changed {
                            name: (*na).to_owned(),
                            old: (*ca).clone(),
                            new: (*cb).clone(),
                        });
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
    out
}

fn removed(name: &str, c: &Component) -> Change {
    Change::Removed {
        name: name.to_owned(),
        old: c.clone(),
    }
}

fn added(name: &str, c: &Component) -> Change {
    Change::Added {
        name: name.to_owned(),
        new: c.clone(),
    }
}

/// "source `kernels/gemm.cu`", "env `CUDA_HOME`", "flag list `flags`".
struct Label<'a>(&'a str, bool);

impl fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Label(name, is_list) = *self;
        match name.split_once(':') {
            Some(("flags", rest)) => write!(f, "flag list `{rest}`"),
            Some((kind, rest)) => write!(f, "{kind} `{rest}`"),
            None if is_list && name.starts_with("flags") => write!(f, "flag list `{name}`"),
            None if is_list => write!(f, "list `{name}`"),
            None => write!(f, "`{name}`"),
        }
    }
}

fn is_env(name: &str) -> bool {
    name.starts_with("env:")
}

/// A value for a message, shortened to keep reasons on one line.
fn shown(v: &str) -> String {
    const MAX: usize = 80;
    if v.chars().count() <= MAX {
        format!("`{v}`")
    } else {
        let head: String = v.chars().take(MAX).collect();
        format!("`{head}…`")
    }
}

fn shown_opt(name: &str, c: &Component) -> String {
    match &c.value {
        Some(v) => shown(v),
        None if is_env(name) => "unset".to_owned(),
        None => format!("blake3 {}", c.digest.short()),
    }
}

/// Items added and removed between two lists, as a multiset difference in list order.
fn list_delta(old: &[String], new: &[String]) -> (Vec<String>, Vec<String>) {
    let mut pool: Vec<Option<&String>> = old.iter().map(Some).collect();
    let mut added = Vec::new();
    for item in new {
        match pool.iter_mut().find(|p| **p == Some(item)) {
            Some(slot) => *slot = None,
            None => added.push(item.clone()),
        }
    }
    let removed = pool.into_iter().flatten().cloned().collect();
    (added, removed)
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Added { name, new } => {
                write!(f, "{} added", Label(name, list_items(new).is_some()))?;
                if new.value.is_some() {
                    write!(f, " ({})", shown_opt(name, new))?;
                }
                Ok(())
            }
            Change::Removed { name, old } => {
                write!(f, "{} removed", Label(name, list_items(old).is_some()))
            }
            Change::Changed { name, old, new } => {
                if let (Some(o), Some(n)) = (list_items(old), list_items(new)) {
                    write!(f, "{} changed: ", Label(name, true))?;
                    let (added, removed) = list_delta(&o, &n);
                    let mut parts = Vec::new();
                    if !added.is_empty() {
                        let items: Vec<String> = added.iter().map(|s| shown(s)).collect();
                        parts.push(format!("added {}", items.join(", ")));
                    }
                    if !removed.is_empty() {
                        let items: Vec<String> = removed.iter().map(|s| shown(s)).collect();
                        parts.push(format!("removed {}", items.join(", ")));
                    }
                    if parts.is_empty() {
                        parts.push("same items in a different order".to_owned());
                    }
                    return f.write_str(&parts.join("; "));
                }
                let label = Label(name, false);
                if old.value != new.value
                    && (old.value.is_some() || new.value.is_some() || is_env(name))
                {
                    if old.digest != new.digest && old.value.as_deref().is_some_and(is_git_mode) {
                        // A tree entry whose kind and content both changed.
                        return write!(
                            f,
                            "{label} changed ({} -> {}, blake3 {} -> {})",
                            shown_opt(name, old),
                            shown_opt(name, new),
                            old.digest.short(),
                            new.digest.short()
                        );
                    }
                    write!(
                        f,
                        "{label} changed ({} -> {})",
                        shown_opt(name, old),
                        shown_opt(name, new)
                    )
                } else {
                    write!(
                        f,
                        "{label} changed (blake3 {} -> {})",
                        old.digest.short(),
                        new.digest.short()
                    )
                }
            }
        }
    }
}

fn is_git_mode(v: &str) -> bool {
    matches!(v, "100644" | "100755" | "120000")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn reasons_read_like_cargo() {
        let mut old = Manifest::new();
        let mut new = Manifest::new();
        old.insert_bytes("source:include/tile.cuh", b"a");
        new.insert_bytes("source:include/tile.cuh", b"b");
        old.insert_list("flags", &strings(&["-O2", "-g"]));
        new.insert_list("flags", &strings(&["-O2", "-g", "-O3"]));
        old.insert(
            "env:NVCC_APPEND_FLAGS",
            Component {
                digest: Digest::of_bytes(b"u"),
                value: None,
            },
        );
        new.insert_value("env:NVCC_APPEND_FLAGS", "-lineinfo");
        new.insert_value("toolchain:nvcc", "13.5");
        old.insert_value("wheel:flashinfer", "0.5");
        let text: Vec<String> = diff(&old, &new).iter().map(|c| c.to_string()).collect();
        let a = Digest::of_bytes(b"a").short();
        let b = Digest::of_bytes(b"b").short();
        assert_eq!(
            text,
            vec![
                "env `NVCC_APPEND_FLAGS` changed (unset -> `-lineinfo`)".to_owned(),
                "flag list `flags` changed: added `-O3`".to_owned(),
                format!("source `include/tile.cuh` changed (blake3 {a} -> {b})"),
                "toolchain `nvcc` added (`13.5`)".to_owned(),
                "wheel `flashinfer` removed".to_owned(),
            ],
            "each kind of change has its cargo-like reason"
        );
    }

    #[test]
    fn list_delta_counts_duplicates() {
        let (added, removed) =
            list_delta(&strings(&["-I", "a", "-I", "b"]), &strings(&["-I", "a"]));
        assert!(added.is_empty(), "nothing was added");
        assert_eq!(
            removed,
            strings(&["-I", "b"]),
            "one `-I` and `b` were removed"
        );
    }
}
