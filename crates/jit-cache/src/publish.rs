//! The miss path: lock, look again, compile in a staging directory, record what the compile
//! read, publish with one rename.
//!
//! Order (see ARCHITECTURE.md, "Publication protocol"):
//! 1. take the key's `flock` (one of 256 lock files), held from the re-check through publication;
//! 2. look again: another process may have published (or failed) while we waited;
//! 3. compile into a fresh staging directory (a durable-fs temp name the sweep can reclaim);
//! 4. record the inputs (`inputs.rs`); if the source, a header or a searched directory changed
//!    since the compile started, publish nothing (the caller compiles once more);
//! 5. write `meta.json` last, describing the artifact's size and digest;
//! 6. fsync the staging directory's files and itself, rename it into place without replacing,
//!    fsync the parent (all inside `durable_fs::StagingDir::commit_noreplace`);
//! 7. record the slot's manifest, prune old variants, release the lock.

use crate::cache::{Answer, Cache, Outcome};
use crate::compile::{compile, private_copy, Compiled, NotCompiled};
use crate::entry::{self, Meta, Unusable};
use crate::error::{CompileFailed, Error, FailureCause, Result};
use crate::evict::{evict_unpinned, move_to_trash};
use crate::headers::Inputs;
use crate::hooks;
use crate::inputs::{record, Instant};
use crate::key::Prepared;
use crate::layout::Layout;
use crate::records::{write_record, FailureRecord, SlotRecord};
use crate::request::Request;
use crate::search::Base;
use crate::source_bound::{output_names_source, SourceBinding};
use crate::staging::Staging;
use crate::toolchain::Toolchain;
use crate::unproven::Unproven;
use durable_fs::PublishOutcome;
use fingerprint::Digest;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the miss path produced.
#[derive(Debug, Clone)]
pub(crate) enum Built {
    /// An answer (cached, or uncached with a warning).
    Answer(Answer),
    /// The compile's answer is the compiler's own, but the cache cannot prove what it depended
    /// on (an input moved while it ran, or the compiler read what the include model cannot
    /// account for): nothing was published; these are the bytes of that compile, and what it
    /// printed and read (a launcher answers with them as from an entry).
    Unproven {
        why: Unproven,
        bytes: Arc<[u8]>,
        printed: Arc<Printed>,
    },
}

/// What an unpublished compile printed and read, for its compiler record.
#[derive(Debug)]
pub(crate) struct Printed {
    pub(crate) stderr: String,
    pub(crate) read: Vec<std::path::PathBuf>,
    pub(crate) spelled: Vec<std::path::PathBuf>,
}

/// The miss path, run by one thread per request in this process.
pub(crate) fn lookup_or_build(
    cache: &Cache,
    request: &Request,
    toolchain: &Toolchain,
    prepared: &Prepared,
    asked: Instant,
) -> Result<Built> {
    let spec = &request.spec;
    let layout = match &cache.layout {
        Ok(layout) => layout,
        Err(why) => {
            let warning = format!(
                "cache at {} is unusable ({why}); compiled `{}` uncached",
                cache.root.display(),
                spec.name
            );
            cache
                .counters
                .count(crate::counters::Event::NotCached("cache-unusable"));
            return build_uncached(request, toolchain, warning, asked).map(Built::Answer);
        }
    };
    let first = cache.lookup(layout, prepared, spec.kind);
    if let Some((meta, artifact)) = first.hit {
        return Ok(hit(meta, artifact));
    }
    if let Some(failure) = cache.recorded_failure(layout, prepared) {
        return Err(Error::Compile(Arc::new(failure)));
    }
    let fallback = |reason: String| {
        let warning = format!(
            "cache at {} failed ({reason}); compiled `{}` uncached",
            cache.root.display(),
            spec.name
        );
        cache
            .counters
            .count(crate::counters::Event::NotCached("cache-failed"));
        build_uncached(request, toolchain, warning, asked).map(Built::Answer)
    };
    match locked_build(cache, layout, request, toolchain, prepared, asked) {
        Err(e) if e.is_storage() => fallback(e.to_string()),
        // The compiler could not write into the cache's filesystem (full, failing): compile
        // where it can.
        Err(Error::Compile(failure))
            if matches!(failure.cause, FailureCause::Environment { .. }) =>
        {
            fallback(failure.to_string())
        }
        other => other,
    }
}

fn locked_build(
    cache: &Cache,
    layout: &Layout,
    request: &Request,
    toolchain: &Toolchain,
    prepared: &Prepared,
    asked: Instant,
) -> Result<Built> {
    let spec = &request.spec;
    let _guard = hooks::lock_key(layout, &prepared.key)?;
    hooks::point("locked");
    // Another process may have published, or failed, while we waited for the lock.
    let lookup = cache.lookup(layout, prepared, spec.kind);
    if let Some((meta, artifact)) = lookup.hit {
        return Ok(hit(meta, artifact));
    }
    if let Some(failure) = cache.recorded_failure(layout, prepared) {
        return Err(Error::Compile(Arc::new(failure)));
    }
    // Under the shared protocol another host may have published while we waited, hidden from
    // us by this host's negative lookup cache: the lock file's note says so (`liveness.rs`).
    if layout.protocol == crate::fstype::Protocol::Shared {
        // Waiting ends early only when the noted variant was opened and judged (an input
        // changed since it was built): one listed but not openable is hidden by this host's
        // negative lookup cache, which expires; a listing sees it sooner than a lookup.
        let examined = std::cell::RefCell::new(Vec::new());
        let noted = crate::liveness::await_noted_entry(
            layout,
            &prepared.key,
            || {
                let lookup = cache.lookup(layout, prepared, spec.kind);
                *examined.borrow_mut() = lookup.examined;
                lookup.hit
            },
            |variant| examined.borrow().iter().any(|v| v == variant),
        );
        if let Some((meta, artifact)) = noted {
            return Ok(hit(meta, artifact));
        }
    }
    let reasons = cache.rebuild_reasons(layout, prepared, &lookup);
    for (dir, why) in &lookup.corrupt {
        hooks::corrupt_found(dir, why);
        move_to_trash(layout, dir)?;
    }
    // The fleet's remote tier: a verified variant another host built, its shared failure, or
    // its lease (held through the upload below) so that one host compiles.
    let lease = match crate::remote::flow::before_compile(cache, layout, request, prepared)? {
        crate::remote::flow::Before::Fetched(built) => return Ok(built),
        crate::remote::flow::Before::Compile(lease) => lease,
    };

    let staging = layout.new_staging_dir()?;
    let scratch = layout.new_staging_dir()?;
    let artifact_name = entry::artifact_file_name(spec.kind);
    // A debug cubin records the name it was written under: the caller's, which is in the key.
    let compile_name = request.embedded_output_name().unwrap_or(&artifact_name);
    let named = staging.path().join(compile_name);
    let mut output = hooks::output_path(
        layout,
        || layout.entry_dir(&prepared.key, &entry::variant_of(&Inputs::default())),
        &artifact_name,
        named.clone(),
    )?;
    hooks::point("compiling");
    let traced = Some(cache.options.ignored_paths.as_slice());
    let compiled = match compile(request, toolchain, scratch.path(), &output, asked, traced) {
        Ok(compiled) => compiled,
        Err(NotCompiled {
            error: Error::Compile(failure),
            started,
            seen,
        }) => {
            record_failure(cache, layout, request, prepared, &failure, started, seen);
            crate::remote::flow::share_failure(cache, layout, prepared, &failure, lease);
            return Err(Error::Compile(failure));
        }
        Err(not) => return Err(not.error),
    };
    drop(scratch);
    if output == named && compile_name != artifact_name {
        // The entry's artifact has the cache's name, whatever name its bytes record; renamed
        // before anything else is written into the staging directory.
        let entry_name = staging.path().join(&artifact_name);
        std::fs::rename(&output, &entry_name)
            .map_err(|e| Error::io("rename compiled artifact", &output, e))?;
        output = entry_name;
    }

    let inputs = match inputs_of(cache, request, prepared, &compiled)? {
        Ok(inputs) => inputs,
        Err(why) => {
            return Ok(Built::Unproven {
                why,
                bytes: compiled.artifact_bytes.into(),
                printed: Arc::new(Printed {
                    stderr: compiled.stderr,
                    read: compiled.read,
                    spelled: compiled.spelled,
                }),
            })
        }
    };
    let meta = Meta::for_kernel(
        spec,
        prepared,
        &inputs,
        (
            compiled.artifact_bytes.len() as u64,
            Digest::of_bytes(&compiled.artifact_bytes),
        ),
        compiled.compile_ms,
        crate::host::name(),
    );
    let variant = meta.variant;
    // What the compiler printed and read, for launchers (inside the entry's one rename).
    crate::compiler_record::write(
        staging.path(),
        &compiled.stderr,
        &compiled.read,
        &compiled.spelled,
        &prepared.search,
    );
    if hooks::finished_in_place(&output, &meta)? {
        return open_published(
            layout, prepared, spec.kind, &variant, None, compiled, inputs,
        );
    }
    let staged = Staged {
        staging,
        meta: &meta,
        bytes: &compiled.artifact_bytes,
        inputs: &inputs,
        origin: Origin::Build,
    };
    let published = match publish_staged(cache, layout, request, prepared, staged)? {
        Publication::Found(answer) => return Ok(Built::Answer(answer)),
        Publication::Published(published) => published,
    };
    crate::remote::flow::share_build(cache, layout, &meta, &compiled.artifact_bytes, lease);
    let outcome = match reasons {
        Some(reasons) => Outcome::Rebuilt { reasons },
        None => Outcome::Built,
    };
    let built = open_published(
        layout,
        prepared,
        spec.kind,
        &variant,
        Some(published),
        compiled,
        inputs,
    )?;
    Ok(match built {
        Built::Answer(answer) => Built::Answer(Answer { outcome, ..answer }),
        moved => moved,
    })
}

/// Compiles in a private temporary directory, outside the cache: the fallback when the cache is
/// full, read-only or failing, or when inputs moved during a compile. The artifact lives as long
/// as the returned value.
pub(crate) fn build_uncached(
    request: &Request,
    toolchain: &Toolchain,
    warning: String,
    asked: Instant,
) -> Result<Answer> {
    let dir = crate::compile::private_dir()?;
    let artifact_name = entry::artifact_file_name(request.spec.kind);
    let output = dir
        .path()
        .join(request.embedded_output_name().unwrap_or(&artifact_name));
    let compiled =
        compile(request, toolchain, dir.path(), &output, asked, None).map_err(|n| n.error)?;
    let artifact =
        crate::entry::Artifact::private(compiled.artifact_bytes, output, request.spec.kind, dir);
    Ok(Answer {
        artifact,
        outcome: Outcome::Built,
        warning: Some(warning),
        inputs: None,
    })
}

/// What a publication puts in place: the staging directory holding the artifact (and, for a
/// build, the compiler record), the entry's metadata, and what it depended on.
pub(crate) struct Staged<'a> {
    pub(crate) staging: Staging,
    pub(crate) meta: &'a Meta,
    pub(crate) bytes: &'a [u8],
    pub(crate) inputs: &'a Inputs,
    pub(crate) origin: Origin,
}

/// How an entry came to be published, as the event log says it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Origin {
    Build,
    Fetch,
    Import,
}

impl Origin {
    fn event(self) -> crate::event_log::Event {
        use crate::event_log::Event;
        match self {
            Origin::Build => Event::Build,
            Origin::Fetch => Event::Fetch,
            Origin::Import => Event::Import,
        }
    }
}

/// What [`publish_staged`] did.
pub(crate) enum Publication {
    /// The staged entry was renamed into place (or another writer's took the name first).
    Published(PublishOutcome),
    /// Another host's whole entry was already there (shared protocol): the answer, nothing
    /// published.
    Found(Answer),
}

/// Whom an entry is published for: the kernel's name and output kind, its key, slot and key
/// manifest. Built from a request (build, fetch) or from an entry's own `meta.json` (import).
pub(crate) struct Owner<'a> {
    pub(crate) name: &'a str,
    pub(crate) kind: nvcc::OutputKind,
    pub(crate) key: Digest,
    pub(crate) slot: Digest,
    pub(crate) manifest: &'a fingerprint::Manifest,
}

impl<'a> Owner<'a> {
    pub(crate) fn of(request: &'a Request, prepared: &'a Prepared) -> Owner<'a> {
        Owner {
            name: &request.spec.name,
            kind: request.spec.kind,
            key: prepared.key,
            slot: prepared.slot,
            manifest: &prepared.manifest,
        }
    }

    pub(crate) fn of_meta(meta: &'a Meta) -> Owner<'a> {
        Owner {
            name: &meta.name,
            kind: meta.kind,
            key: meta.key,
            slot: meta.slot,
            manifest: &meta.manifest,
        }
    }
}

/// Where the slot records of a publication go: written at once (one durable put each), or into
/// a batch the caller commits with its other files (an import of many entries).
pub(crate) enum Records<'b> {
    Now,
    Into(&'b mut durable_fs::Batch),
}

/// The one publication step of a kernel entry, for builds and fetches alike, under the key's
/// lock: `meta.json` written last, team modes, the target cleared, one no-replace rename (its
/// fsyncs inside), then the stat cache saved, the note for other hosts, the slot record, old
/// variants pruned, the key's failure record removed, the event logged.
pub(crate) fn publish_staged(
    cache: &Cache,
    layout: &Layout,
    request: &Request,
    prepared: &Prepared,
    staged: Staged<'_>,
) -> Result<Publication> {
    let owner = Owner::of(request, prepared);
    let Staged {
        staging,
        meta,
        bytes,
        inputs,
        origin,
    } = staged;
    if let Some(answer) = before_rename(layout, &owner, &staging, meta, bytes, inputs)? {
        return Ok(Publication::Found(answer));
    }
    let target = layout.entry_dir(&owner.key, &meta.variant);
    hooks::point("publishing");
    let deferred = hooks::defer_artifact(&staging.path().join(&meta.artifact_file));
    let published = staging.commit_noreplace(&target)?;
    hooks::point("published");
    hooks::write_deferred(deferred, &target.join(&meta.artifact_file), bytes)?;
    cache.save_stat_cache();
    after_rename(cache, layout, &owner, meta, inputs, origin, Records::Now)?;
    Ok(Publication::Published(published))
}

/// The publication step's first half, under the key's lock: `meta.json` written last into the
/// staging directory, team modes, the target cleared. `Some`: another host's whole entry is
/// there (shared protocol), the answer; publish nothing.
pub(crate) fn before_rename(
    layout: &Layout,
    owner: &Owner<'_>,
    staging: &Staging,
    meta: &Meta,
    bytes: &[u8],
    inputs: &Inputs,
) -> Result<Option<Answer>> {
    hooks::point("writing-meta");
    entry::write_meta(staging.path(), meta)?;
    layout.share_with_team(staging)?;
    let target = layout.entry_dir(&owner.key, &meta.variant);
    clear_target(layout, &owner.key, owner.kind, &target, bytes, inputs)
}

/// The publication step's second half, once the rename published the entry, still under the
/// key's lock: the note for other hosts, the slot record, old variants pruned, the key's failure
/// record removed, the event logged.
pub(crate) fn after_rename(
    cache: &Cache,
    layout: &Layout,
    owner: &Owner<'_>,
    meta: &Meta,
    inputs: &Inputs,
    origin: Origin,
    records: Records<'_>,
) -> Result<()> {
    record_published(cache, layout, owner, &meta.variant, inputs, records)?;
    let _ = std::fs::remove_file(layout.failure_file(&owner.key));
    layout.log_event(origin.event(), owner.name, meta.compile_ms);
    Ok(())
}

/// A hit on an entry found in the cache.
fn hit(meta: Meta, artifact: crate::entry::Artifact) -> Built {
    Built::Answer(Answer {
        artifact,
        outcome: Outcome::Hit,
        warning: None,
        inputs: Some(Arc::new(meta.into_inputs())),
    })
}

/// Clears the way for a staged entry at `target`, under the key's lock. An existing directory
/// there that the locked lookup did not accept is corrupt or planted: it is moved aside (readers
/// that hold it keep their copy). Under the shared protocol it may instead be another host's
/// fresh entry, hidden from our lookup by the negative lookup cache or unguarded by an invisible
/// key lock: a whole one is the answer, and nothing another host may hold is moved aside
/// (`liveness::adopt_existing`). `Some`: answer with that, publish nothing.
pub(crate) fn clear_target(
    layout: &Layout,
    key: &Digest,
    kind: nvcc::OutputKind,
    target: &std::path::Path,
    bytes: &[u8],
    inputs: &Inputs,
) -> Result<Option<Answer>> {
    layout.ensure_dir(&layout.key_dir(key))?;
    if std::fs::symlink_metadata(target).is_err() {
        return Ok(None);
    }
    if layout.protocol == crate::fstype::Protocol::Shared {
        return adopt_existing(layout, key, kind, target, bytes, inputs);
    }
    move_to_trash(layout, target)?;
    Ok(None)
}

/// Under the shared protocol, a builder that finds an entry directory at its target (another
/// host published it since this one looked, hidden by a negative lookup cache or unguarded by an
/// invisible key lock) answers with it when it is whole. A damaged one is moved aside only when
/// no host can hold it; otherwise this builder answers with a private copy of its own output,
/// which is the same artifact (DeepEP #684: a loser must not insist on seeing the winner).
/// `None`: nothing usable is there any more; publish as usual.
fn adopt_existing(
    layout: &Layout,
    key: &Digest,
    kind: nvcc::OutputKind,
    target: &Path,
    bytes: &[u8],
    inputs: &Inputs,
) -> Result<Option<Answer>> {
    use crate::entry::open_entry;
    use crate::evict::{evict_unless_pinned, Evicted};
    let variant_dir = target
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    match open_entry(
        target,
        key,
        variant_dir,
        crate::pin::LastUse::Refresh(layout.protocol),
    )
    .and_then(|o| o.load(kind))
    {
        Ok((_, artifact)) => Ok(Some(Answer {
            artifact,
            outcome: Outcome::Built,
            warning: None,
            inputs: Some(Arc::new(inputs.clone())),
        })),
        // Marked by an eviction killed before its move: moved aside like a damaged one (a
        // reader that refreshed it just before the kill may hold it).
        Err(Unusable::Absent) if !crate::liveness::is_marked_evicting_at(target) => Ok(None),
        Err(Unusable::Absent | Unusable::Corrupt(_)) => {
            match evict_unless_pinned(layout, target, None)? {
                Evicted::Moved | Evicted::Absent => Ok(None),
                Evicted::Pinned | Evicted::Replaced => {
                    let artifact = crate::compile::private_copy(kind, bytes.to_vec())?;
                    Ok(Some(Answer {
                        artifact,
                        outcome: Outcome::Built,
                        warning: Some(format!(
                        "entry {} is damaged or being evicted and may be held by another host; \
                         using a private copy",
                        target.display()
                    )),
                        inputs: None,
                    }))
                }
            }
        }
    }
}

/// Keeps at most `max` variants under a key, moving the oldest-built aside.
fn prune_variants(layout: &Layout, key_dir: &Path, max: usize) -> Result<()> {
    let variants = entry::list_variants(key_dir);
    if variants.len() <= max {
        return Ok(());
    }
    let mut aged: Vec<(u64, PathBuf)> = variants
        .iter()
        .map(|v| {
            let dir = key_dir.join(v);
            let created = entry::read_meta(&dir)
                .map(|m| m.created_unix_ms)
                .unwrap_or(0);
            (created, dir)
        })
        .collect();
    aged.sort();
    for (_, dir) in aged.iter().take(variants.len() - max) {
        evict_unpinned(layout, dir)?;
    }
    Ok(())
}

/// What follows the rename that published a variant, under the key's lock: the note for other
/// hosts' waiters (shared protocol), the slot record, and pruning of the key's old variants.
pub(crate) fn record_published(
    cache: &Cache,
    layout: &Layout,
    owner: &Owner<'_>,
    variant: &Digest,
    inputs: &Inputs,
    records: Records<'_>,
) -> Result<()> {
    if layout.protocol == crate::fstype::Protocol::Shared {
        crate::liveness::note_published(layout, &owner.key, variant);
    }
    let record = SlotRecord {
        name: owner.name.to_string(),
        key: owner.key,
        variant: *variant,
        headers: inputs.headers.clone(),
        manifest: owner.manifest.clone(),
    };
    let path = layout.slot_file(&owner.slot);
    match records {
        Records::Now => write_record(&path, &record)?,
        Records::Into(batch) => crate::records::stage_record(batch, &path, &record)?,
    }
    prune_variants(
        layout,
        &layout.key_dir(&owner.key),
        cache.options.max_variants,
    )
}

/// Whether the source the compiler read may differ from the one hashed for the key (before the
/// lock wait, perhaps by an earlier request): its content now is another, or it was changed after
/// the compile started (an edit and its revert would otherwise pass).
fn source_moved(prepared: &Prepared, started: Instant) -> bool {
    let Some(source) = &prepared.source_path else {
        return false;
    };
    crate::inputs::changed_since(source, started)
        || fingerprint::hash_file(source).ok() != Some(prepared.source_digest)
}

/// What the compile depended on, or why the cache cannot prove it.
fn inputs_of(
    cache: &Cache,
    request: &Request,
    prepared: &Prepared,
    compiled: &Compiled,
) -> Result<std::result::Result<Inputs, Unproven>> {
    if source_moved(prepared, compiled.started) {
        if let Some(source) = &prepared.source_path {
            return Ok(Err(Unproven::Moved(source.clone())));
        }
    }
    let recorded = cache.with_stat_cache(|stat| {
        record(
            &prepared.search,
            request.source_ref(),
            Some(&compiled.read),
            compiled.seen.as_ref(),
            stat,
            Some(compiled.started),
        )
    })?;
    Ok(recorded.map(|recorded| {
        let mut inputs = recorded.inputs;
        inputs.source = binding_of(prepared, &recorded.names_source_in, &inputs, compiled);
        inputs
    }))
}

/// The source a variant must be bound to: none where the key holds the source's path or the
/// compile proved its output independent of it (`source_bound.rs`), else the request's.
fn binding_of(
    prepared: &Prepared,
    names_source_in: &Option<PathBuf>,
    inputs: &Inputs,
    compiled: &Compiled,
) -> Option<SourceBinding> {
    let binding = prepared.binding.as_ref()?;
    let bound = names_source_in.is_some()
        // Diagnostics replayed on a hit name the source as spelled (and nvcc's module id where
        // they name an entity), and a dependency file names the headers beside it.
        || output_names_source(compiled.stderr.as_bytes(), binding)
        || inputs.headers.iter().any(|h| h.base == Base::SourceDir)
        || output_names_source(&compiled.artifact_bytes, binding);
    bound.then(|| binding.clone())
}

/// Opens the entry just published and answers with it. When it is not visible (the winner's
/// entry, or ours, hidden by an NFS client's negative lookup cache), answers with a private copy
/// of what was compiled, which is the same artifact.
fn open_published(
    layout: &Layout,
    prepared: &Prepared,
    kind: nvcc::OutputKind,
    variant: &Digest,
    published: Option<PublishOutcome>,
    compiled: Compiled,
    inputs: Inputs,
) -> Result<Built> {
    let target = layout.entry_dir(&prepared.key, variant);
    let variant_dir = crate::layout::variant_dir_name(variant);
    let opened = entry::open_entry(
        &target,
        &prepared.key,
        &variant_dir,
        crate::pin::LastUse::Refresh(layout.protocol),
    )
    .and_then(|o| o.load(kind));
    match opened {
        Ok((_, artifact)) => Ok(Built::Answer(Answer {
            artifact,
            outcome: Outcome::Built,
            warning: None,
            inputs: Some(Arc::new(inputs)),
        })),
        // Injected bug `loser-asserts` (negative control): a loser that insists on seeing the
        // winner's entry, as DeepEP's did.
        Err(Unusable::Absent) if published.is_some() && !hooks::loser_asserts() => {
            let artifact = private_copy(kind, compiled.artifact_bytes)?;
            Ok(Built::Answer(Answer {
                artifact,
                outcome: Outcome::Built,
                warning: Some(format!(
                    "entry {} not visible yet; using a private copy",
                    target.display()
                )),
                inputs: None,
            }))
        }
        Err(Unusable::Absent) => Err(Error::io(
            "open published entry",
            &target,
            std::io::ErrorKind::NotFound.into(),
        )),
        Err(Unusable::Corrupt(why)) => Err(Error::io(
            "open published entry",
            &target,
            std::io::Error::other(why),
        )),
    }
}

/// Records a failure of the source's own with what it depended on, so the other waiters and
/// later callers get its diagnostics at once until an input changes. Timeouts, signals and
/// environment failures are never recorded, nor a failure whose inputs moved while it compiled.
/// Best effort: the caller gets the diagnostics either way.
fn record_failure(
    cache: &Cache,
    layout: &Layout,
    request: &Request,
    prepared: &Prepared,
    failure: &CompileFailed,
    started: Option<Instant>,
    seen: Option<Box<crate::observed::Seen>>,
) {
    if failure.cause != FailureCause::Source {
        return;
    }
    if started.is_some_and(|started| source_moved(prepared, started)) {
        return;
    }
    let recorded = cache.with_stat_cache(|stat| {
        record(
            &prepared.search,
            request.source_ref(),
            failure.headers_read.as_deref(),
            seen.as_deref(),
            stat,
            started,
        )
    });
    // A failure is replayed only on records that account for every lookup, and, since its
    // diagnostics name the source, only for the same source.
    let Ok(Ok(recorded)) = recorded else { return };
    let mut inputs = recorded.inputs;
    inputs.source = prepared.binding.clone();
    let record = FailureRecord {
        key: prepared.key,
        inputs,
        failure: failure.clone(),
    };
    let _ = write_record(&layout.failure_file(&prepared.key), &record);
}
