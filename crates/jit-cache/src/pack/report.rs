//! What a pack's caller chooses and is told: which entries an export takes, what an export and
//! an import did, and a pack's listing.

use super::format::PackEntryKind;
use serde::Serialize;
use std::path::PathBuf;

/// Which entries [`crate::Cache::export_pack`] takes. The default takes every entry.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PackFilter {
    /// A glob (`*`, `?`) the entry's name must match (a stored entry's is `namespace/key`).
    pub name: Option<String>,
    /// Kernels built for at least one of these arches (`sm_90`; an arch not of that form is
    /// refused by [`crate::Cache::export_pack`] with [`crate::Error::InvalidPackFilter`]); stored entries
    /// never match a non-empty list.
    pub arches: Vec<String>,
    /// Kinds to take; empty: every kind.
    pub kinds: Vec<PackKind>,
}

/// A kind of entry [`PackFilter`] takes: kernels of one output kind, or stored entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackKind {
    /// Kernels whose output is this kind.
    Kernel(nvcc::OutputKind),
    /// Entries of the keyed store ([`crate::store`]).
    Stored,
}

impl PackKind {
    /// The kind named `stored` or by [`nvcc::OutputKind::name`] (`cubin`, `ptx`, `fatbin`,
    /// `object`, `shared-library`); `None` for any other name.
    pub fn from_name(name: &str) -> Option<PackKind> {
        match name {
            "stored" => Some(PackKind::Stored),
            other => nvcc::OutputKind::from_name(other).map(PackKind::Kernel),
        }
    }

    /// Every name [`PackKind::from_name`] takes, for messages that list them.
    pub fn names() -> Vec<&'static str> {
        nvcc::OutputKind::ALL
            .iter()
            .map(|k| k.name())
            .chain(["stored"])
            .collect()
    }
}

impl PackFilter {
    /// Only entries whose name matches `glob`.
    pub fn name(mut self, glob: impl Into<String>) -> Self {
        self.name = Some(glob.into());
        self
    }

    /// Also kernels for `arch`.
    pub fn arch(mut self, arch: impl Into<String>) -> Self {
        self.arches.push(arch.into());
        self
    }

    /// Also entries of kind `kind`.
    pub fn kind(mut self, kind: PackKind) -> Self {
        self.kinds.push(kind);
        self
    }

    pub(super) fn takes(&self, name: &str, kind: PackKind, arches: &[String]) -> bool {
        self.name
            .as_deref()
            .is_none_or(|g| fingerprint::glob_match(g.as_bytes(), name.as_bytes()))
            && (self.kinds.is_empty() || self.kinds.contains(&kind))
            && (self.arches.is_empty() || self.arches.iter().any(|a| arches.contains(a)))
    }
}

/// What [`crate::Cache::export_pack`] wrote.
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct ExportReport {
    /// Entries in the pack.
    pub entries: usize,
    /// The pack's size in bytes.
    pub bytes: u64,
    /// Entries left out because they were found damaged (run `verify`), with the reason.
    pub skipped_damaged: Vec<(PathBuf, String)>,
}

/// What [`crate::Cache::import_pack`] did.
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct ImportReport {
    /// Entries in the pack.
    pub entries: usize,
    /// Entries published by this import.
    pub imported: usize,
    /// Entries already present, whole (published before, or by a racing import or build).
    pub present: usize,
    /// Entries skipped because their recorded inputs do not match this host, with the entry and
    /// the reason.
    pub skipped: Vec<(String, String)>,
    /// `syncfs` or `fsync` calls made by the batched publication of kernels.
    pub flushes: usize,
    /// Bytes of the pack read (from the pack, or from the importer's private clone of it).
    pub bytes_read: u64,
    /// Bytes of entries' files shared with the pack by cloning its extents (`FICLONERANGE`)
    /// rather than written.
    pub bytes_shared: u64,
    /// Why files were written rather than shared, when the filesystem refused to share extents
    /// (ext4, tmpfs, the pack on another filesystem).
    pub not_shared: Option<String>,
}

/// One entry of a pack, as [`crate::list_pack`] shows it.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct PackEntry {
    /// A kernel or a stored entry.
    pub kind: PackEntryKind,
    /// The kernel's name, or `namespace/key`.
    pub name: String,
    /// The key directory's name.
    pub key: String,
    /// The variant directory's name.
    pub variant: String,
    /// A kernel's output kind.
    pub output: Option<String>,
    /// A kernel's arches.
    pub arches: Vec<String>,
    /// A kernel's compiler and host compiler identities.
    pub toolchain: Option<String>,
    /// A kernel's headers (`<component> <blake3>`).
    pub headers: Vec<String>,
    /// The entry's files with their sizes.
    pub files: Vec<(String, u64)>,
}
