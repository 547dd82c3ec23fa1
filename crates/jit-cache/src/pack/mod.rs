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
//! - On xfs and btrfs an import clones the pack's extents into the entries' files
//!   (`FICLONERANGE`) instead of writing their bytes, from a private clone it checked
//!   (`share.rs`); on other filesystems it writes them. Either way it is bound by the
//!   filesystem's creation of the entries' files and directories (a staging directory, three
//!   files and a rename each), not by the pack's read rate (`cargo xtask bench pack`).

mod export;
mod format;
mod import;
mod report;
mod share;

pub use format::PackEntryKind;
pub use report::{ExportReport, ImportReport, PackEntry, PackFilter, PackKind};

use crate::cache::Cache;
use crate::error::Result;
use std::path::Path;

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
        let described =
            match import::check_meta(entry, &meta_json).map_err(|d| format::refused(path, d))? {
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
