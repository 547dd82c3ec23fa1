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

use crate::base::unproven::{NotCached, Unproven};
use crate::build::answer::{Answer, Outcome};
use crate::build::compile::{compile, private_copy, Compiled, NotCompiled};
use crate::build::entry::{self, Meta, Unusable};
use crate::build::headers::Inputs;
use crate::build::inputs::{record, Instant};
use crate::build::key::Prepared;
use crate::build::records::{write_record, FailureRecord};
use crate::build::request::Request;
use crate::build::search::Base;
use crate::build::source_bound::{output_names_source, SourceBinding};
use crate::build::toolchain::Toolchain;
use crate::context::BuildContext;
use crate::error::{CompileFailed, Error, FailureCause, Result};
use crate::publication::{publish_staged, Built, Origin, Printed, Publication, Staged};
use crate::storage::evict::move_to_trash;
use crate::storage::hooks;
use crate::storage::layout::Layout;
use durable_fs::PublishOutcome;
use fingerprint::Digest;
use std::path::PathBuf;
use std::sync::Arc;

/// The miss path, run by one thread per request in this process.
pub(crate) fn lookup_or_build(
    cx: &BuildContext,
    request: &Request,
    toolchain: &Toolchain,
    prepared: &Prepared,
    asked: Instant,
) -> Result<Built> {
    let spec = &request.spec;
    // The cache could not be used or failed: the compile's own answer, counted and warned.
    let uncached = |why: NotCached, what: String| {
        let warning = format!(
            "cache at {} {what}; compiled `{}` uncached",
            cx.root.display(),
            spec.name
        );
        cx.counters
            .count(crate::storage::counters::Event::NotCached(why));
        build_uncached(request, toolchain, warning, asked).map(Built::Answer)
    };
    let layout = match &cx.layout {
        Ok(layout) => layout,
        Err(why) => return uncached(NotCached::CacheUnusable, format!("is unusable ({why})")),
    };
    let first = cx.lookup(layout, prepared, spec.kind);
    if let Some((meta, artifact)) = first.hit {
        return Ok(hit(meta, artifact));
    }
    if let Some(failure) = cx.recorded_failure(layout, prepared) {
        return Err(Error::Compile(Arc::new(failure)));
    }
    let fallback = |reason: String| uncached(NotCached::CacheFailed, format!("failed ({reason})"));
    match locked_build(cx, layout, request, toolchain, prepared, asked) {
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
    cx: &BuildContext,
    layout: &Layout,
    request: &Request,
    toolchain: &Toolchain,
    prepared: &Prepared,
    asked: Instant,
) -> Result<Built> {
    let spec = &request.spec;
    let _guard = hooks::lock_key(layout, &prepared.key)?;
    hooks::point(crate::storage::hooks::Failpoint::Locked);
    // Another process may have published, or failed, while we waited for the lock.
    let lookup = cx.lookup(layout, prepared, spec.kind);
    if let Some((meta, artifact)) = lookup.hit {
        return Ok(hit(meta, artifact));
    }
    if let Some(failure) = cx.recorded_failure(layout, prepared) {
        return Err(Error::Compile(Arc::new(failure)));
    }
    // Under the shared protocol another host may have published while we waited, hidden from
    // us by this host's negative lookup cache: the lock file's note says so (`notes.rs`).
    if layout.protocol.notes_publications() {
        // Waiting ends early only when the noted variant was opened and judged (an input
        // changed since it was built): one listed but not openable is hidden by this host's
        // negative lookup cache, which expires; a listing sees it sooner than a lookup.
        let examined = std::cell::RefCell::new(Vec::new());
        let noted = crate::storage::notes::await_noted_entry(
            layout,
            &prepared.key,
            || {
                let lookup = cx.lookup(layout, prepared, spec.kind);
                *examined.borrow_mut() = lookup.examined;
                lookup.hit
            },
            |variant| examined.borrow().iter().any(|v| v == variant),
        );
        if let Some((meta, artifact)) = noted {
            return Ok(hit(meta, artifact));
        }
    }
    let reasons = cx.rebuild_reasons(layout, prepared, &lookup);
    for (dir, why) in &lookup.corrupt {
        hooks::corrupt_found(dir, why);
        move_to_trash(layout, dir)?;
    }
    // The fleet's remote tier: a verified variant another host built, its shared failure, or
    // its lease (held through the upload below) so that one host compiles.
    let lease = match crate::fleet::before_compile(cx, layout, request, prepared)? {
        crate::fleet::Before::Fetched(built) => return Ok(built),
        crate::fleet::Before::Compile(lease) => lease,
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
    hooks::point(crate::storage::hooks::Failpoint::Compiling);
    let traced = Some(cx.options.ignored_paths.as_slice());
    let compiled = match compile(request, toolchain, scratch.path(), &output, asked, traced) {
        Ok(compiled) => compiled,
        Err(NotCompiled {
            error: Error::Compile(failure),
            started,
            seen,
        }) => {
            record_failure(cx, layout, request, prepared, &failure, started, seen);
            crate::fleet::share_failure(cx, layout, prepared, &failure, lease);
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

    let inputs = match inputs_of(cx, request, prepared, &compiled)? {
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
        crate::base::host::name(),
    );
    let variant = meta.variant;
    // What the compiler printed and read, for launchers (inside the entry's one rename).
    crate::build::compiler_record::write(
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
    let published = match publish_staged(cx, layout, request, prepared, staged)? {
        Publication::Found(answer) => return Ok(Built::Answer(answer)),
        Publication::Published(published) => published,
    };
    crate::fleet::share_build(cx, layout, &meta, &compiled.artifact_bytes, lease);
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
    let dir = crate::build::compile::private_dir()?;
    let artifact_name = entry::artifact_file_name(request.spec.kind);
    let output = dir
        .path()
        .join(request.embedded_output_name().unwrap_or(&artifact_name));
    let compiled =
        compile(request, toolchain, dir.path(), &output, asked, None).map_err(|n| n.error)?;
    let artifact = crate::build::entry::Artifact::private(
        compiled.artifact_bytes,
        output,
        request.spec.kind,
        dir,
    );
    Ok(Answer {
        artifact,
        outcome: Outcome::Built,
        warning: Some(warning),
        inputs: None,
    })
}

/// A hit on an entry found in the cache.
fn hit(meta: Meta, artifact: crate::build::entry::Artifact) -> Built {
    Built::Answer(Answer {
        artifact,
        outcome: Outcome::Hit,
        warning: None,
        inputs: Some(Arc::new(meta.into_inputs())),
    })
}

/// Whether the source the compiler read may differ from the one hashed for the key (before the
/// lock wait, perhaps by an earlier request): its content now is another, or it was changed after
/// the compile started (an edit and its revert would otherwise pass).
fn source_moved(prepared: &Prepared, started: Instant) -> bool {
    let Some(source) = &prepared.source_path else {
        return false;
    };
    crate::build::inputs::changed_since(source, started)
        || fingerprint::hash_file(source).ok() != Some(prepared.source_digest)
}

/// What the compile depended on, or why the cache cannot prove it.
fn inputs_of(
    cx: &BuildContext,
    request: &Request,
    prepared: &Prepared,
    compiled: &Compiled,
) -> Result<std::result::Result<Inputs, Unproven>> {
    if source_moved(prepared, compiled.started) {
        if let Some(source) = &prepared.source_path {
            return Ok(Err(Unproven::Moved(source.clone())));
        }
    }
    let recorded = cx.with_stat_cache(|stat| {
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
    let variant_dir = crate::storage::layout::variant_dir_name(variant);
    let opened = entry::open_entry(
        &target,
        &prepared.key,
        &variant_dir,
        crate::storage::pin::LastUse::Refresh(layout.protocol),
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
    cx: &BuildContext,
    layout: &Layout,
    request: &Request,
    prepared: &Prepared,
    failure: &CompileFailed,
    started: Option<Instant>,
    seen: Option<Box<crate::build::observed::Seen>>,
) {
    if failure.cause != FailureCause::Source {
        return;
    }
    if started.is_some_and(|started| source_moved(prepared, started)) {
        return;
    }
    let recorded = cx.with_stat_cache(|stat| {
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
