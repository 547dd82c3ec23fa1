//! Import: the header and index checked, then the data read in order with `direct-io`, each
//! entry checked (digests, sizes, padding, its `meta.json` against its files) and matched
//! against this host before it is published through the cache's own publication steps.
//!
//! Kernels are published a chunk at a time, under their keys' locks (taken in the lock files'
//! order, so that two importers, or an importer and a build, never wait on each other in a
//! cycle): each entry is staged and passes the first half of `publish.rs`'s step, the chunk's
//! trees are renamed with one `durable_fs::StagingBatch` (two flushes), then each passes the
//! second half, the slot records going into one `durable_fs::Batch` (two more).
//!
//! A reader thread reads (and, where the filesystem shares extents, first clones: `share.rs`)
//! and checks the next chunk while this thread publishes the one before. Chunks are as large as
//! the bounds allow from the first: each costs two flushes, which on a disk that honours them
//! cost more than the first chunk's wait (smaller first chunks were measured slower).
//!
//! Memory is bounded whatever the pack holds: a chunk is read whole only up to [`CHUNK_BYTES`]
//! (two chunks are held at once: the one being read and the one being published); an entry
//! larger than that is streamed alone, [`PIECE`] bytes at a time, each file hashed as it is read
//! and written straight into its staging directory (`meta.json` and the compiler record, which
//! the checks read, are also kept, at most [`MAX_META`] bytes each).

use super::format::refused;
use super::format::{
    check_chunk, check_zeros, files_of, Damage, Header, Index, IndexEntry, PackEntryKind, BLOCK,
    PIECE,
};
use super::report::ImportReport;
use super::share::{SharedChunk, Sharing, Source, SHARE_MIN};
use crate::build::compiler_record::RECORD_FILE;
use crate::build::entry::{variant_of, Meta, META_FILE};
use crate::build::search::{Base, SearchPath};
use crate::build::toolchain::Toolchain;
use crate::cache::Cache;
use crate::error::{Error, Result};
use crate::publication::{after_rename, before_rename, Origin, Owner, Records};
use crate::storage::layout::{variant_dir_name, Layout, Subdir};
use crate::storage::pin::{LastUse, Unusable};
use crate::storage::staging::Staging;
use crate::store::{is_stored_meta, Address, Namespace, StoredMeta, STORE_FORMAT};
use direct_io::DirectFile;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// A chunk ends after this many bytes of entries or this many entries: bounded memory, and a
/// few flushes per thousand entries.
const CHUNK_BYTES: u64 = 64 << 20;
const CHUNK_ENTRIES: usize = 256;

/// A pack whose header and index were read and checked.
pub(super) struct OpenPack {
    file: DirectFile,
    header: Header,
    pub(super) index: Index,
}

impl OpenPack {
    pub(super) fn open(path: &Path) -> Result<OpenPack> {
        let file = DirectFile::open(path).map_err(|e| Error::io("open pack", path, e.into()))?;
        let size = file.size();
        let mut block = vec![0u8; BLOCK.min(size) as usize];
        Source::pack(&file).read(0, &mut block)?;
        let header = Header::decode(&block).map_err(|d| refused(path, d))?;
        if size != header.file_len {
            return Err(refused(
                path,
                Damage::at(
                    size.min(header.file_len),
                    format!(
                        "the pack is {size} bytes; its header says {} (truncated or appended to)",
                        header.file_len
                    ),
                ),
            ));
        }
        let mut index = vec![0u8; header.index_len as usize];
        Source::pack(&file).read(header.index_offset, &mut index)?;
        let decoded = Index::decode(&index, &header).map_err(|d| refused(path, d))?;
        let tail_from = header.index_offset + header.index_len;
        let mut tail = vec![0u8; (header.file_len - tail_from) as usize];
        Source::pack(&file).read(tail_from, &mut tail)?;
        check_zeros(tail_from, &tail, "the padding after the index")
            .map_err(|d| refused(path, d))?;
        Ok(OpenPack {
            file,
            header,
            index: decoded,
        })
    }
}

impl OpenPack {
    /// The `meta.json` of `entry`, read from the pack and checked against the index's size
    /// and digest (what `pack ls` shows is drawn from it).
    pub(super) fn read_meta(&self, path: &Path, entry: &IndexEntry) -> Result<Vec<u8>> {
        let damage = |offset, why: &str| refused(path, Damage::in_entry(offset, entry, why));
        let file = entry
            .files
            .iter()
            .find(|f| f.name == META_FILE)
            .ok_or_else(|| damage(entry.span().0, "the entry has no meta.json"))?;
        if file.size > MAX_META {
            return Err(damage(file.offset, "its meta.json is implausibly large"));
        }
        // At most MAX_META bytes: the check above.
        let mut bytes = vec![0u8; file.size as usize];
        Source::pack(&self.file).read(file.offset, &mut bytes)?;
        if fingerprint::Digest::of_bytes(&bytes) != file.blake3 {
            return Err(damage(
                file.offset,
                "file `meta.json` does not match its digest",
            ));
        }
        Ok(bytes)
    }
}

/// Checks that the pack holds zeros from `from` to `to`, read from `src` [`PIECE`] bytes at a
/// time; `damage` names the first byte that is not.
fn stream_zeros(
    src: Source<'_>,
    path: &Path,
    from: u64,
    to: u64,
    damage: impl Fn(u64) -> Damage,
) -> Result<()> {
    let mut piece = Vec::new();
    let mut at = from;
    while at < to {
        let n = (to - at).min(PIECE);
        piece.resize(n as usize, 0);
        src.read(at, &mut piece)?;
        if let Some(i) = piece.iter().position(|b| *b != 0) {
            return Err(refused(path, damage(at + i as u64)));
        }
        at += n;
    }
    Ok(())
}

/// What the checks of a streamed entry read: its `meta.json` and its compiler record; and the
/// bytes of its files that were shared rather than written.
struct Streamed {
    meta_json: Vec<u8>,
    record: Option<Vec<u8>>,
    shared: u64,
}

/// Streams an entry's files from the pack into `staging` (all but `meta.json`, which the
/// publication step writes), each checked against its digest as it is read, and the padding
/// after each against zeros: the checks of `check_entry`, a piece at a time. With `shared`
/// (the entry cloned privately: `share.rs`) the pieces are read from that copy, and a large
/// file, once checked, is cloned from it rather than written as it is read.
fn stream_entry(
    pack: &OpenPack,
    path: &Path,
    entry: &IndexEntry,
    staging: &Staging,
    shared: Option<&SharedChunk>,
) -> Result<Streamed> {
    let src = shared.map_or(Source::pack(&pack.file), SharedChunk::source);
    use std::io::Write;
    let damage = |at, why: String| refused(path, Damage::in_entry(at, entry, why));
    let padding = |at| Damage::in_entry(at, entry, "padding after a file is not zero");
    let mut streamed = Streamed {
        meta_json: Vec::new(),
        record: None,
        shared: 0,
    };
    let mut piece = Vec::new();
    let mut cursor = entry.span().0;
    for file in &entry.files {
        // The gap between two files of one entry is padding too.
        stream_zeros(src, path, cursor, file.offset, padding)?;
        let kept = file.name == META_FILE || file.name == RECORD_FILE;
        let cloned = shared.filter(|_| !kept && file.size >= SHARE_MIN);
        if kept && file.size > MAX_META {
            return Err(damage(
                file.offset,
                format!("its {} is implausibly large", file.name),
            ));
        }
        let target = staging.path().join(&file.name);
        let mut out = match file.name == META_FILE || cloned.is_some() {
            true => None,
            false => Some(std::io::BufWriter::with_capacity(
                1 << 20,
                std::fs::File::options()
                    .write(true)
                    .create_new(true)
                    .open(&target)
                    .map_err(|e| Error::io("write imported file", &target, e))?,
            )),
        };
        let mut memory = Vec::new();
        let mut hasher = blake3::Hasher::new();
        // `Index::decode` proved every file's padded end inside the data region: no overflow.
        let end = file.offset + file.size;
        let mut at = file.offset;
        while at < end {
            let n = (end - at).min(PIECE);
            piece.resize(n as usize, 0);
            src.read(at, &mut piece)?;
            hasher.update(&piece);
            if let Some(out) = &mut out {
                out.write_all(&piece)
                    .map_err(|e| Error::io("write imported file", &target, e))?;
            }
            if kept {
                memory.extend_from_slice(&piece);
            }
            at += n;
        }
        if fingerprint::Digest::from(hasher.finalize()) != file.blake3 {
            return Err(damage(
                file.offset,
                format!("file `{}` does not match its digest", file.name),
            ));
        }
        if let Some(out) = out {
            out.into_inner()
                .map_err(|e| Error::io("write imported file", &target, e.into_error()))?;
        }
        if let Some(chunk) = cloned {
            if chunk.write_checked(file, &target)? {
                streamed.shared += file.size;
            }
        }
        cursor = file.offset + super::format::padded(file.size);
        stream_zeros(src, path, end, cursor, padding)?;
        match file.name.as_str() {
            META_FILE => streamed.meta_json = memory,
            RECORD_FILE => streamed.record = Some(memory),
            _ => {}
        }
    }
    Ok(streamed)
}

/// An entry's files, by name, as read from the pack.
type Files<'a> = Vec<(&'a str, &'a [u8])>;

/// An entry checked and ready to publish, with its files staged already when it was streamed.
struct Item<'a> {
    ready: Ready<'a>,
    staged: Option<Staging>,
    /// Where its files lie in the pack.
    entry: &'a IndexEntry,
}

/// An entry checked and ready to publish.
enum Ready<'a> {
    Kernel {
        meta: Meta,
        files: Files<'a>,
    },
    Stored {
        meta: StoredMeta,
        namespace: Namespace,
        files: Files<'a>,
    },
}

/// One step of an import: a chunk of entries whose bytes (`base..end`, the gap before the
/// first entry included) are read with one call, or one entry larger than a chunk, streamed.
#[derive(Clone, Copy)]
enum Step {
    Chunk {
        first: usize,
        last: usize,
        base: u64,
        end: u64,
    },
    Streamed {
        index: usize,
        base: u64,
        end: u64,
    },
}

/// The import's steps, in the pack's order.
fn plan(entries: &[IndexEntry]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut cursor = BLOCK;
    let mut first = 0;
    while first < entries.len() {
        let start = entries[first].span().0;
        let mut last = first;
        while last + 1 < entries.len()
            && last + 1 - first < CHUNK_ENTRIES
            && entries[last + 1].span().1 - start <= CHUNK_BYTES
        {
            last += 1;
        }
        let end = entries[last].span().1;
        // One entry (the rule above adds none past CHUNK_BYTES) larger than a chunk.
        steps.push(match end - cursor > CHUNK_BYTES {
            true => Step::Streamed {
                index: first,
                base: cursor,
                end,
            },
            false => Step::Chunk {
                first,
                last,
                base: cursor,
                end,
            },
        });
        cursor = end;
        first = last + 1;
    }
    steps
}

/// A chunk's bytes, and the private clone they were read from when the filesystem shares
/// extents (`share.rs`).
struct Loaded {
    bytes: Vec<u8>,
    shared: Option<SharedChunk>,
}

/// Reads the chunks of `steps` in order, into buffers the importer hands back, and sends each
/// to the importer: the next chunk is read while the importer checks and publishes the one
/// before. Stops at the first error (sent) or when the importer stops listening.
fn read_ahead(
    pack: &OpenPack,
    path: &Path,
    layout: &Layout,
    steps: &[Step],
    loaded: std::sync::mpsc::SyncSender<Result<Loaded>>,
    spare: std::sync::mpsc::Receiver<Vec<u8>>,
) -> Sharing {
    let mut sharing = Sharing::default();
    for step in steps {
        let Step::Chunk {
            first,
            last,
            base,
            end,
        } = *step
        else {
            continue;
        };
        let mut bytes = spare.try_recv().unwrap_or_default();
        bytes.clear();
        bytes.resize((end - base) as usize, 0);
        let read = sharing
            .clone_chunk(layout, &pack.file, base, end)
            .and_then(|shared| {
                match &shared {
                    Some(chunk) => chunk.read(&mut bytes)?,
                    None => Source::pack(&pack.file).read(base, &mut bytes)?,
                }
                check_chunk(&pack.index.entries[first..=last], base, base, &bytes)
                    .map_err(|d| refused(path, d))?;
                Ok(Loaded { bytes, shared })
            });
        let failed = read.is_err();
        if loaded.send(read).is_err() || failed {
            break;
        }
    }
    sharing
}

pub(super) fn import(cache: &Cache, path: &Path) -> Result<ImportReport> {
    let pack = OpenPack::open(path)?;
    let layout = cache.usable_layout()?;
    let mut report = ImportReport {
        entries: pack.index.entries.len(),
        bytes_read: BLOCK + pack.header.file_len - pack.header.index_offset,
        ..ImportReport::default()
    };
    let entries = &pack.index.entries;
    let steps = plan(entries);
    let pack = &pack;
    let (cursor, not_shared) = std::thread::scope(|scope| -> Result<(u64, Option<String>)> {
        let report = &mut report;
        // A rendezvous: at most the chunk being read and the one being published are held.
        let (loaded_tx, loaded) = std::sync::mpsc::sync_channel(0);
        let (spare, spare_rx) = std::sync::mpsc::channel();
        let reader = scope.spawn(|| read_ahead(pack, path, layout, &steps, loaded_tx, spare_rx));
        let mut host = HostCheck::default();
        // The reader's chunks and this thread's streamed entries each learn on their own
        // whether the filesystem shares extents.
        let mut streamed_sharing = Sharing::default();
        let mut cursor = BLOCK;
        for step in &steps {
            match *step {
                Step::Streamed { index, base, end } => {
                    import_streamed(
                        cache,
                        layout,
                        pack,
                        path,
                        &entries[index],
                        base,
                        &mut host,
                        &mut streamed_sharing,
                        report,
                    )?;
                    report.bytes_read += end - base;
                    cursor = end;
                }
                Step::Chunk {
                    first,
                    last,
                    base,
                    end,
                } => {
                    let Loaded { bytes, shared } = loaded.recv().unwrap_or_else(|_| {
                        Err(Error::io(
                            "read pack",
                            path,
                            std::io::Error::other("the pack's reader stopped"),
                        ))
                    })?;
                    report.bytes_read += end - base;
                    let mut ready = Vec::with_capacity(last + 1 - first);
                    for entry in &entries[first..=last] {
                        // Checked by the reader (`check_chunk`).
                        let (from, to) = entry.span();
                        let files =
                            files_of(entry, &bytes[(from - base) as usize..(to - base) as usize]);
                        cursor = to;
                        match classify(cache, entry, files, &mut host)
                            .map_err(|d| refused(path, d))?
                        {
                            Ok(r) => ready.push(Item {
                                ready: r,
                                staged: None,
                                entry,
                            }),
                            Err(why) => report.skipped.push((entry.label(), why)),
                        }
                    }
                    publish_chunk(cache, layout, ready, shared.as_ref(), report)?;
                    let _ = spare.send(bytes);
                }
            }
        }
        drop(loaded);
        let sharing = reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let not_shared = sharing.refused().or(streamed_sharing.refused());
        Ok((cursor, not_shared.map(str::to_string)))
    })?;
    stream_zeros(
        Source::pack(&pack.file),
        path,
        cursor,
        pack.header.index_offset,
        |at| Damage::at(at, "the gap before the index is not zero"),
    )?;
    cache.cx.save_stat_cache();
    report.not_shared = not_shared;
    Ok(report)
}

/// Imports one entry larger than a chunk: streamed into its staging directory with every check
/// (`stream_entry`), then published alone.
#[allow(clippy::too_many_arguments)]
fn import_streamed(
    cache: &Cache,
    layout: &Layout,
    pack: &OpenPack,
    path: &Path,
    entry: &IndexEntry,
    cursor: u64,
    host: &mut HostCheck,
    sharing: &mut Sharing,
    report: &mut ImportReport,
) -> Result<()> {
    let (from, to) = entry.span();
    let shared = sharing.clone_chunk(layout, &pack.file, cursor, to)?;
    let src = shared
        .as_ref()
        .map_or(Source::pack(&pack.file), SharedChunk::source);
    stream_zeros(src, path, cursor, from, |at| {
        Damage::at(at, "the gap between entries is not zero")
    })?;
    let staging = layout.new_staging_dir()?;
    crate::storage::hooks::point(crate::storage::hooks::Failpoint::ImportStaging);
    let streamed = stream_entry(pack, path, entry, &staging, shared.as_ref())?;
    report.bytes_shared += streamed.shared;
    let mut files: Files<'_> = vec![(META_FILE, &streamed.meta_json[..])];
    if let Some(record) = &streamed.record {
        files.push((RECORD_FILE, &record[..]));
    }
    match classify(cache, entry, files, host).map_err(|d| refused(path, d))? {
        Ok(ready) => {
            if let Ready::Kernel { files, .. } = &ready {
                // The record `classify` did not keep is not published either.
                if streamed.record.is_some() && !files.iter().any(|(n, _)| *n == RECORD_FILE) {
                    let record = staging.path().join(RECORD_FILE);
                    std::fs::remove_file(&record)
                        .map_err(|e| Error::io("remove imported file", &record, e))?;
                }
            }
            let item = Item {
                ready,
                staged: Some(staging),
                entry,
            };
            publish_chunk(cache, layout, vec![item], None, report)
        }
        Err(why) => {
            report.skipped.push((entry.label(), why));
            Ok(())
        }
    }
}

/// This host's toolchain, asked for once, when the first kernel needs it.
#[derive(Default)]
struct HostCheck {
    toolchain: Option<std::result::Result<(Arc<Toolchain>, SearchPath), String>>,
}

impl HostCheck {
    fn get(&mut self, cache: &Cache) -> std::result::Result<&(Arc<Toolchain>, SearchPath), String> {
        let found = self.toolchain.get_or_insert_with(|| {
            let toolchain = cache
                .cx
                .toolchain()
                .map_err(|e| format!("no toolchain here: {e}"))?;
            let cwd = std::env::current_dir().unwrap_or_default();
            let search = SearchPath::new(
                &cwd,
                None,
                &crate::build::request::UserSearch::default(),
                Arc::clone(&toolchain.host.dirs),
            );
            Ok((toolchain, search))
        });
        found.as_ref().map_err(Clone::clone)
    }
}

/// An entry's `meta.json`, checked against the index and against itself: every address it
/// names (key directory, variant, slot) is the one its content derives.
pub(super) enum Checked {
    Kernel(Meta),
    Stored(StoredMeta, Namespace),
}

/// The largest `meta.json` `pack ls` reads (a kernel's lists its headers; far below this).
pub(super) const MAX_META: u64 = 16 << 20;

/// Checks an entry's `meta.json` (its bytes already checked against the index's digest) against
/// the index and against itself, deriving every address from the content, never from the pack's
/// claims: a kernel's key is its recorded manifest's digest and its slot that of its recorded
/// name, kind and arches; a stored entry's key directory is blake3(namespace, key). `Err`:
/// damage; `Ok(Err(why))`: an entry of another format, skipped.
pub(super) fn check_meta(
    entry: &IndexEntry,
    meta_json: &[u8],
) -> std::result::Result<std::result::Result<Checked, String>, Damage> {
    let meta_at = entry
        .files
        .iter()
        .find(|f| f.name == META_FILE)
        .map_or(entry.span().0, |f| f.offset);
    let bad = |why: &str| Damage::in_entry(meta_at, entry, why.to_string());
    // Each file's size and digest as the index gives them: `check_entry` proved its bytes hash
    // to that digest, so `meta.json` is compared with it rather than hashing the bytes again.
    let recorded = |name: &str| {
        entry
            .files
            .iter()
            .find(|f| f.name == name)
            .map(|f| (f.size, f.blake3))
    };
    // What the index says beside the files must be what `meta.json` says (`pack ls` shows it).
    let described = |mut derived: IndexEntry| {
        derived.files.clone_from(&entry.files);
        derived == *entry
    };
    if is_stored_meta(meta_json) {
        let meta: StoredMeta =
            serde_json::from_slice(meta_json).map_err(|e| bad(&format!("meta.json: {e}")))?;
        if meta.format != STORE_FORMAT {
            return Ok(Err(format!("stored entry format {}", meta.format)));
        }
        let namespace = Namespace::new(&meta.namespace).map_err(|e| bad(&e.to_string()))?;
        crate::store::check_key(&meta.key).map_err(|e| bad(&e.to_string()))?;
        if meta.digest != crate::store::entry_digest(&namespace, &meta.key) {
            return Err(bad(
                "meta.json's digest is not that of its namespace and key",
            ));
        }
        let whole = described(super::export::describe_stored(&meta))
            && entry.files.len() == meta.files.len() + 1
            && meta.files.iter().all(|f| {
                crate::store::check_name(&f.name).is_ok()
                    && recorded(&f.name) == Some((f.size, f.digest))
            });
        if !whole {
            return Err(bad("meta.json does not describe the entry's files"));
        }
        return Ok(Ok(Checked::Stored(meta, namespace)));
    }
    let meta: Meta =
        serde_json::from_slice(meta_json).map_err(|e| bad(&format!("meta.json: {e}")))?;
    if meta.format != crate::build::key::CACHE_FORMAT {
        return Ok(Err(format!(
            "cache format {}; this cache's is {}",
            meta.format,
            crate::build::key::CACHE_FORMAT
        )));
    }
    if crate::build::key::key_of(&meta.manifest) != meta.key
        || meta.manifest.get("kind").and_then(|c| c.value.as_deref()) != Some(meta.kind.name())
    {
        return Err(bad("meta.json's key is not the digest of its manifest"));
    }
    let arches = super::export::arches_of(&meta);
    if crate::build::key::slot_of_parts(&meta.name, meta.kind, &arches) != meta.slot {
        return Err(bad(
            "meta.json's slot is not that of its name, kind and arches",
        ));
    }
    let whole = entry.kind == PackEntryKind::Kernel
        && described(super::export::describe_kernel(&meta))
        && variant_of(&meta.inputs()) == meta.variant
        && crate::storage::pin::is_plain_name(&meta.artifact_file)
        && meta.artifact_file == crate::build::entry::artifact_file_name(meta.kind)
        && recorded(&meta.artifact_file) == Some((meta.artifact_size, meta.artifact_digest))
        // A kernel entry holds its artifact, its compiler record and `meta.json`, nothing else.
        && entry.files.iter().all(|f| {
            [META_FILE, meta.artifact_file.as_str(), crate::build::compiler_record::RECORD_FILE]
                .contains(&f.name.as_str())
        });
    if !whole {
        return Err(bad("meta.json does not describe the entry's files"));
    }
    Ok(Ok(Checked::Kernel(meta)))
}

/// Checks an entry's `meta.json` ([`check_meta`]: damage is `Err`), then this host against its
/// recorded inputs (`Ok(Err(why))`: skipped).
fn classify<'a>(
    cache: &Cache,
    entry: &IndexEntry,
    files: Files<'a>,
    host: &mut HostCheck,
) -> std::result::Result<std::result::Result<Ready<'a>, String>, Damage> {
    let meta_json = files
        .iter()
        .find(|(n, _)| *n == META_FILE)
        .map(|(_, b)| *b)
        .ok_or_else(|| Damage::in_entry(entry.span().0, entry, "the entry has no meta.json"))?;
    let meta = match check_meta(entry, meta_json)? {
        Ok(Checked::Kernel(meta)) => meta,
        Ok(Checked::Stored(meta, namespace)) => {
            return Ok(Ok(Ready::Stored {
                meta,
                namespace,
                files,
            }))
        }
        Err(why) => return Ok(Err(why)),
    };
    let (toolchain, search) = match host.get(cache) {
        Ok(found) => found,
        Err(why) => return Ok(Err(why)),
    };
    if let Some(why) = other_toolchain(&meta, toolchain) {
        return Ok(Err(why));
    }
    // Headers of the toolkit and the installation, and absolute ones, are named the same way on
    // every host: checked now. The project's are relative to directories only a request knows,
    // and are checked at every hit.
    let fixed = |b: Base| matches!(b, Base::Toolkit | Base::Installed | Base::Absolute);
    let headers: Vec<_> = meta
        .headers
        .iter()
        .filter(|h| fixed(h.base))
        .cloned()
        .collect();
    let absent: Vec<_> = meta
        .absent
        .iter()
        .filter(|a| fixed(a.base))
        .cloned()
        .collect();
    if let Err(mismatch) = cache.cx.revalidate(&headers, &absent, search) {
        return Ok(Err(format!("inputs differ here: {mismatch}")));
    }
    // The compiler record (the launcher's dependency file) is kept only when it names the
    // entry's own headers; without it the launcher runs nvcc for the entry.
    let cwd = std::env::current_dir().unwrap_or_default();
    let mut files = files;
    files.retain(|(name, bytes)| {
        *name != crate::build::compiler_record::RECORD_FILE
            || crate::build::compiler_record::names_only(bytes, &meta.headers, search, &cwd)
    });
    Ok(Ok(Ready::Kernel { meta, files }))
}

/// Why the toolchain a kernel was compiled with is not this host's, if it is not.
fn other_toolchain(meta: &Meta, toolchain: &Toolchain) -> Option<String> {
    let recorded = meta.manifest.get("toolchain:nvcc");
    if recorded.map(|c| c.digest) != Some(toolchain.identity.digest) {
        return Some(format!(
            "compiled by another nvcc ({}); this host's is {} {}",
            super::export::toolchain_of(meta),
            toolchain.version,
            toolchain.identity.digest.short()
        ));
    }
    let host = meta
        .manifest
        .get("toolchain:host-compiler")
        .and_then(|c| c.value.as_deref());
    if host != Some(toolchain.host.identity.as_str()) {
        return Some(format!(
            "compiled with another host compiler ({}); this host's is {}",
            host.unwrap_or("?"),
            toolchain.host.identity
        ));
    }
    None
}

/// What a staged tree of the chunk will be once renamed: a kernel (its index in `ready`) or a
/// stored entry (its address).
enum Pushed {
    Kernel(usize),
    Stored(Address),
}

/// A chunk's entries, kernels and stored entries alike, through both halves of their
/// publication step around one batched rename, under their keys' locks. Files not staged yet
/// are cloned from `shared`, the chunk's checked copy, where they can be (`share.rs`).
fn publish_chunk(
    cache: &Cache,
    layout: &Layout,
    mut items: Vec<Item<'_>>,
    shared: Option<&SharedChunk>,
    report: &mut ImportReport,
) -> Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let store = cache.store()?;
    let mut addresses = Vec::with_capacity(items.len());
    for Item { ready: r, .. } in &items {
        addresses.push(match r {
            Ready::Kernel { .. } => None,
            Ready::Stored {
                meta, namespace, ..
            } => Some(store.address(namespace, &meta.key)?),
        });
    }
    // One lock per lock file (keys share 256 of them), taken in the files' order: two importers,
    // or an importer and a batch of builds, never wait on each other in a cycle.
    let mut locks = BTreeMap::new();
    for (Item { ready: r, .. }, address) in items.iter().zip(&addresses) {
        let key = match (r, address) {
            (Ready::Kernel { meta, .. }, _) => meta.key,
            (Ready::Stored { .. }, Some(address)) => address.digest,
            (Ready::Stored { .. }, None) => continue,
        };
        locks.entry(layout.lock_file(&key)).or_insert(key);
    }
    let mut guards = Vec::with_capacity(locks.len());
    for key in locks.values() {
        guards.push(crate::storage::hooks::lock_key(layout, key)?);
    }
    crate::storage::hooks::point(crate::storage::hooks::Failpoint::ImportLocked);
    let mut batch =
        durable_fs::StagingBatch::new(layout.dir(Subdir::Staging), durable_fs::Flush::Auto)?;
    let mut beats = Vec::new();
    let mut pushed = Vec::new();
    for (i, (item, address)) in items.iter_mut().zip(addresses).enumerate() {
        let Item {
            ready: r,
            staged,
            entry,
        } = item;
        let (r, entry) = (&*r, *entry);
        let (target, whole, files) = match (r, &address) {
            (Ready::Kernel { meta, files }, _) => {
                let target = layout.entry_dir(&meta.key, &meta.variant);
                (target.clone(), whole_at(&target, meta), files)
            }
            (Ready::Stored { files, .. }, Some(address)) => (
                address.dir.clone(),
                crate::store::is_whole(address, layout.protocol),
                files,
            ),
            (Ready::Stored { .. }, None) => continue,
        };
        // Published already (by an earlier import, a racing one, or a build): never replaced.
        if whole {
            report.present += 1;
            continue;
        }
        // The key's directory, when new, is made durable by the batch's flush, not by two
        // fsyncs of its own (`before_rename` then finds it there).
        if let Some(key_dir) = target.parent() {
            for dir in layout.ensure_dir_unflushed(key_dir)? {
                batch.flush_dir(dir);
            }
            batch.flush_dir(key_dir);
        }
        let staging = match staged.take() {
            Some(staging) => staging,
            None => {
                let staging = layout.new_staging_dir()?;
                crate::storage::hooks::point(crate::storage::hooks::Failpoint::ImportStaging);
                for (name, bytes) in files.iter().filter(|(n, _)| *n != META_FILE) {
                    let path = staging.path().join(name);
                    let in_pack = entry.files.iter().find(|f| f.name == *name);
                    match (shared, in_pack) {
                        (Some(chunk), Some(file)) => {
                            if chunk.write(file, bytes, &path)? {
                                report.bytes_shared += file.size;
                            }
                        }
                        _ => std::fs::write(&path, bytes)
                            .map_err(|e| Error::io("write imported file", &path, e))?,
                    }
                }
                staging
            }
        };
        let found = match (r, &address) {
            (Ready::Kernel { meta, files }, _) => {
                // A streamed kernel's artifact is in its staging directory only.
                let artifact = match files.iter().find(|(n, _)| *n == meta.artifact_file) {
                    Some((_, bytes)) => std::borrow::Cow::Borrowed(*bytes),
                    None => {
                        let staged = staging.path().join(&meta.artifact_file);
                        std::borrow::Cow::Owned(
                            std::fs::read(&staged)
                                .map_err(|e| Error::io("read imported file", &staged, e))?,
                        )
                    }
                };
                let owner = Owner::of_meta(meta);
                before_rename(layout, &owner, &staging, meta, &artifact, &meta.inputs())?.is_some()
            }
            (Ready::Stored { meta, .. }, Some(address)) => {
                crate::store::before_rename(layout, address, &staging, meta)?.is_some()
            }
            (Ready::Stored { .. }, None) => continue,
        };
        if found {
            // Another host's whole entry is there (shared protocol).
            report.present += 1;
            continue;
        }
        let (dir, beat) = staging.into_parts();
        beats.push(beat);
        batch.push(dir, target);
        pushed.push(match address {
            Some(address) => Pushed::Stored(address),
            None => Pushed::Kernel(i),
        });
    }
    crate::storage::hooks::point(crate::storage::hooks::Failpoint::ImportPublishing);
    let committed = batch.commit()?;
    crate::storage::hooks::point(crate::storage::hooks::Failpoint::ImportPublished);
    drop(beats);
    report.flushes += committed.flushes;
    let mut records = durable_fs::Batch::new();
    for (item, outcome) in pushed.into_iter().zip(committed.outcomes) {
        if outcome == durable_fs::PublishOutcome::AlreadyExisted {
            report.present += 1;
            continue;
        }
        match item {
            Pushed::Kernel(i) => {
                if let Ready::Kernel { meta, .. } = &items[i].ready {
                    after_rename(
                        &cache.cx,
                        layout,
                        &Owner::of_meta(meta),
                        meta,
                        &meta.inputs(),
                        Origin::Import,
                        Records::Into(&mut records),
                    )?;
                }
            }
            Pushed::Stored(address) => crate::store::after_rename(
                layout,
                &address,
                crate::base::event_log::Event::StoreImport,
            )?,
        }
        report.imported += 1;
    }
    report.flushes += records.commit()?.flushes;
    drop(guards);
    Ok(())
}

/// Whether a whole entry of this variant is already published at `target`.
fn whole_at(target: &Path, meta: &Meta) -> bool {
    let variant = variant_dir_name(&meta.variant);
    match crate::build::entry::open_entry(target, &meta.key, &variant, LastUse::Keep)
        .and_then(|open| open.load(meta.kind))
    {
        Ok(_) => true,
        Err(Unusable::Absent | Unusable::Corrupt(_)) => false,
    }
}
