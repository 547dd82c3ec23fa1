//! Export: every chosen entry read pinned, checked against its `meta.json`, and written at
//! aligned offsets, the index last, the header over the first block; one durable put.

use super::format::{
    padded, Header, Index, IndexEntry, IndexFile, PackEntryKind, BLOCK, PACK_FORMAT,
};
use super::report::{ExportReport, PackFilter, PackKind};
use crate::build::entry::{Meta, META_FILE};
use crate::cache::Cache;
use crate::error::Result;
use crate::storage::layout::variant_dir_name;
use crate::storage::pin::{lock_dir, read_at, still_names, stream_at};
use crate::store::{is_stored_meta, StoredMeta};
use fingerprint::Digest;
use std::io::Write;
use std::path::Path;

/// One entry checked for export: its index record (offsets still to be assigned) and its
/// directory, read again (pinned, and checked against the digests taken) while the pack is
/// written, so that no more than one entry is held in memory.
struct Read {
    entry: IndexEntry,
    dir: std::path::PathBuf,
}

pub(super) fn export(cache: &Cache, path: &Path, filter: &PackFilter) -> Result<ExportReport> {
    for arch in &filter.arches {
        crate::KernelSpec::check_arch(arch)
            .map_err(|reason| crate::Error::InvalidPackFilter { reason })?;
    }
    let mut report = ExportReport::default();
    let mut chosen = Vec::new();
    for info in cache.entries()? {
        match read_entry(&info.path, filter) {
            Ok(Some(read)) => chosen.push(read),
            Ok(None) => {}
            Err(why) => report.skipped_damaged.push((info.path.clone(), why)),
        }
    }
    // The same entries give the same bytes, whatever order the directory listing had.
    chosen.sort_by(|a, b| (&a.entry.key, &a.entry.variant).cmp(&(&b.entry.key, &b.entry.variant)));
    let mut offset = BLOCK;
    for read in &mut chosen {
        for file in &mut read.entry.files {
            file.offset = offset;
            offset += padded(file.size);
        }
    }
    let index = Index {
        format: PACK_FORMAT,
        entries: chosen.iter().map(|r| r.entry.clone()).collect(),
    };
    let index_bytes = index.encode();
    let header = Header {
        index_offset: offset,
        index_len: index_bytes.len() as u64,
        file_len: offset + padded(index_bytes.len() as u64),
        index_digest: Digest::of_bytes(&index_bytes),
    };
    durable_fs::put_with(path, |file| {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        out.write_all(&header.encode())?;
        for read in &chosen {
            let fd = lock_dir(&read.dir).map_err(|_| changed(&read.dir))?;
            for file in &read.entry.files {
                // Streamed: an entry of any size costs one piece of memory. Bytes that turn
                // out changed are in the pack's temp, which the error then discards.
                let (size, digest) = stream_at(&fd, &file.name, |piece| out.write_all(piece))?;
                if (size, digest) != (file.size, file.blake3) {
                    return Err(changed(&read.dir));
                }
                out.write_all(&vec![0u8; (padded(file.size) - file.size) as usize])?;
            }
        }
        out.write_all(&index_bytes)?;
        let tail = header.file_len - header.index_offset - header.index_len;
        out.write_all(&vec![0u8; tail as usize])?;
        out.flush()
    })?;
    report.entries = chosen.len();
    report.bytes = header.file_len;
    Ok(report)
}

/// Reads the entry at `dir` pinned (a shared `flock`: eviction and `verify` leave it alone),
/// checks every file `meta.json` lists, and describes it. `Ok(None)`: the filter does not take
/// it, or it vanished meanwhile; `Err`: why it is damaged.
fn read_entry(dir: &Path, filter: &PackFilter) -> std::result::Result<Option<Read>, String> {
    let Ok(fd) = lock_dir(dir) else {
        return Ok(None);
    };
    let meta_json = read_at(&fd, META_FILE).map_err(|e| format!("{META_FILE} unreadable: {e}"))?;
    let variant = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let key = dir
        .parent()
        .and_then(|k| k.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (mut entry, listed) = if is_stored_meta(&meta_json) {
        let meta: StoredMeta = serde_json::from_slice(&meta_json)
            .map_err(|e| format!("{META_FILE} is corrupt: {e}"))?;
        let entry = describe_stored(&meta);
        if !filter.takes(&entry.name, PackKind::Stored, &[]) {
            return Ok(None);
        }
        let listed: Vec<(String, u64, Digest)> = meta
            .files
            .iter()
            .map(|f| (f.name.clone(), f.size, f.digest))
            .collect();
        (entry, listed)
    } else {
        let meta: Meta = serde_json::from_slice(&meta_json)
            .map_err(|e| format!("{META_FILE} is corrupt: {e}"))?;
        let entry = describe_kernel(&meta);
        if !filter.takes(&meta.name, PackKind::Kernel(meta.kind), &entry.arches) {
            return Ok(None);
        }
        let listed = vec![(
            meta.artifact_file.clone(),
            meta.artifact_size,
            meta.artifact_digest,
        )];
        (entry, listed)
    };
    // The index names the entry by what its `meta.json` records; one found under other names
    // (moved, or relabelled) is not the entry its directory claims.
    if entry.key != key || entry.variant != variant {
        return Err(format!("{META_FILE} describes another entry"));
    }
    // Every regular file of the directory travels (a kernel's compiler record too); those
    // `meta.json` lists must match it.
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("list: {e}"))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    for name in &names {
        let (size, digest) = if name == META_FILE {
            (meta_json.len() as u64, Digest::of_bytes(&meta_json))
        } else {
            stream_at(&fd, name, |_| Ok(())).map_err(|e| format!("`{name}` unreadable: {e}"))?
        };
        if let Some((_, listed_size, want)) = listed.iter().find(|(n, _, _)| n == name) {
            if (*listed_size, *want) != (size, digest) {
                return Err(format!("`{name}` does not match {META_FILE}"));
            }
        }
        entry.files.push(IndexFile {
            name: name.clone(),
            offset: 0,
            size,
            blake3: digest,
        });
    }
    for (name, _, _) in &listed {
        if !names.contains(name) {
            return Err(format!("`{name}` is missing"));
        }
    }
    // Moved aside (evicted) while we read: not an entry any more.
    if !still_names(&fd, dir) {
        return Ok(None);
    }
    Ok(Some(Read {
        entry,
        dir: dir.to_path_buf(),
    }))
}

/// An entry evicted or replaced between its check and its copy into the pack: the export
/// fails rather than write bytes its index does not describe.
fn changed(dir: &Path) -> std::io::Error {
    std::io::Error::other(format!(
        "entry {} changed during the export; export again",
        dir.display()
    ))
}

/// A kernel entry's index record (files still to be added), drawn from its `meta.json` alone:
/// export writes it, and import and `pack ls` check the index's against it.
pub(super) fn describe_kernel(meta: &Meta) -> IndexEntry {
    let mut entry = described(
        PackEntryKind::Kernel,
        meta.name.clone(),
        meta.key.to_hex(),
        variant_dir_name(&meta.variant),
    );
    entry.output = Some(meta.kind.name().to_string());
    entry.arches = arches_of(meta);
    entry.toolchain = Some(toolchain_of(meta));
    entry.headers = meta
        .headers
        .iter()
        .map(|h| format!("{} {}", h.component_name(), h.digest.to_hex()))
        .collect();
    entry
}

/// A stored entry's index record (files still to be added), drawn from its `meta.json` alone.
pub(super) fn describe_stored(meta: &StoredMeta) -> IndexEntry {
    described(
        PackEntryKind::Stored,
        format!("{}/{}", meta.namespace, meta.key),
        meta.digest.to_hex(),
        variant_dir_name(&crate::store::stored_variant()),
    )
}

/// The arches a kernel's key recorded (its manifest's `arch` list).
pub(super) fn arches_of(meta: &Meta) -> Vec<String> {
    meta.manifest
        .get("arch")
        .and_then(|c| c.value.as_deref())
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

fn described(kind: PackEntryKind, name: String, key: String, variant: String) -> IndexEntry {
    IndexEntry {
        kind,
        name,
        key,
        variant,
        output: None,
        arches: Vec::new(),
        toolchain: None,
        headers: Vec::new(),
        files: Vec::new(),
    }
}

/// The compiler identity a kernel's key recorded: nvcc's version and digest, and the host
/// compiler's identity.
pub(super) fn toolchain_of(meta: &Meta) -> String {
    let nvcc = meta.manifest.get("toolchain:nvcc");
    let host = meta
        .manifest
        .get("toolchain:host-compiler")
        .and_then(|c| c.value.clone())
        .unwrap_or_default();
    match nvcc {
        Some(c) => format!(
            "nvcc {} {}; host {host}",
            c.value.as_deref().unwrap_or("?"),
            c.digest.short()
        ),
        None => format!("nvcc ?; host {host}"),
    }
}
