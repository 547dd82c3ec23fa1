//! Kernel packs: chosen entries of a cache, kernels and stored entries alike, in one verified
//! file that another cache imports at disk speed.
//!
//! A pack holds, for each entry, its key, its recorded inputs (in its `meta.json`: headers by
//! place and digest, the toolchain's identity in the key's manifest), its files and their blake3
//! digests; a format version and the index's digest sit in the header (`format.rs`). Export
//! reads each entry pinned and checked, and writes the pack with one durable put. Import checks
//! the header, the index and each entry's bytes before publishing it through the cache's own
//! publication steps, under the key's lock, no-replace, many entries at a time with a batch's
//! flushes (`import.rs`).
//!
//! # Guarantees
//! - A truncated or corrupt pack is refused with [`crate::Error::Pack`], naming the offset and
//!   the entry; no entry whose bytes are damaged is published (entries before the damage, each
//!   whole and verified, may have been).
//! - An imported entry is an ordinary entry: a hit revalidates it as any other, `verify` and
//!   `gc` see it, and it was published as a build publishes (one no-replace rename of a whole
//!   entry; durable before [`Cache::import_pack`] returns).
//! - Nothing a pack claims is trusted: every address an entry is published at (key directory,
//!   variant, slot) is derived from its checked `meta.json` (a kernel's key is its manifest's
//!   digest), and [`list_pack`] shows only what it derived.
//! - A kernel compiled by another toolchain (nvcc or host compiler) or against toolkit or
//!   installed headers that differ here is skipped and counted, never published.
//!
//! # Limitations
//! - Headers under the project's directories (`-I`, the source's directory) are named relative
//!   to directories a pack does not know; they are checked at every hit, as for any entry, not
//!   at import.
//! - A chunk (up to 256 entries or 64 MiB) holds its keys' locks until it is published: a build
//!   of one of those keys waits that long.
//! - An import is bound by the filesystem's creation of the entries' files and directories, not
//!   by the pack's read rate (`cargo xtask bench pack`).

mod export;
mod format;
mod import;

pub use format::PackEntryKind;

use crate::cache::Cache;
use crate::error::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Which entries [`Cache::export_pack`] takes. The default takes every entry.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PackFilter {
    /// A glob (`*`, `?`) the entry's name must match (a stored entry's is `namespace/key`).
    pub name: Option<String>,
    /// Kernels built for at least one of these arches (`sm_90`; an arch not of that form is
    /// refused by [`Cache::export_pack`] with [`Error::InvalidPackFilter`]); stored entries
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

    fn takes(&self, name: &str, kind: PackKind, arches: &[String]) -> bool {
        self.name
            .as_deref()
            .is_none_or(|g| fingerprint::glob_match(g.as_bytes(), name.as_bytes()))
            && (self.kinds.is_empty() || self.kinds.contains(&kind))
            && (self.arches.is_empty() || self.arches.iter().any(|a| arches.contains(a)))
    }
}

/// What [`Cache::export_pack`] wrote.
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

/// What [`Cache::import_pack`] did.
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
    /// Bytes of the pack read.
    pub bytes_read: u64,
}

/// One entry of a pack, as [`list_pack`] shows it.
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

/// Lists a pack without importing it: its header and index are checked (digests, format,
/// layout), and each entry's `meta.json` is read, checked against its digest and checked as an
/// import checks it (every address derived from its content); what is shown is drawn from it.
/// An entry of another cache format (an import skips it) shows only its kind, name and files.
/// The other files' data is not read.
pub fn list_pack(path: impl AsRef<Path>) -> Result<Vec<PackEntry>> {
    let path = path.as_ref();
    let opened = import::OpenPack::open(path)?;
    let mut listed = Vec::with_capacity(opened.index.entries.len());
    for entry in &opened.index.entries {
        let meta_json = opened.read_meta(path, entry)?;
        let described = match import::check_meta(entry, &meta_json).map_err(|d| refused(path, d))? {
            Ok(import::Checked::Kernel(meta)) => export::describe_kernel(&meta),
            Ok(import::Checked::Stored(meta, _)) => export::describe_stored(&meta),
            Err(_) => format::IndexEntry {
                output: None,
                arches: Vec::new(),
                toolchain: None,
                headers: Vec::new(),
                ..entry.clone()
            },
        };
        listed.push(PackEntry {
            files: entry
                .files
                .iter()
                .map(|f| (f.name.clone(), f.size))
                .collect(),
            kind: described.kind,
            name: described.name,
            key: described.key,
            variant: described.variant,
            output: described.output,
            arches: described.arches,
            toolchain: described.toolchain,
            headers: described.headers,
        });
    }
    Ok(listed)
}

impl Cache {
    /// Writes the entries `filter` takes into a pack at `path` (replaced durably if it
    /// exists). Each entry is read pinned and checked against its `meta.json`; a damaged one is
    /// left out and reported. The same entries give the same bytes.
    pub fn export_pack(&self, path: impl AsRef<Path>, filter: &PackFilter) -> Result<ExportReport> {
        export::export(self, path.as_ref(), filter)
    }

    /// Imports the pack at `path`: every entry is checked (digests, sizes, format) and matched
    /// against this host (toolchain, toolkit and installed headers) before it is published
    /// through the cache's own publication step, under its key's lock, never replacing an entry.
    /// Safe against concurrent imports of the same pack and builds of the same kernels.
    pub fn import_pack(&self, path: impl AsRef<Path>) -> Result<ImportReport> {
        import::import(self, path.as_ref())
    }
}

/// The refusal of a damaged pack.
fn refused(path: &Path, damage: format::Damage) -> Error {
    Error::Pack {
        path: path.to_path_buf(),
        offset: damage.offset,
        entry: damage.entry,
        reason: damage.reason,
    }
}
