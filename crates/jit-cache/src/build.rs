//! The miss path: lock, re-check, compile in a staging directory, publish with one rename.
//!
//! Order (see ARCHITECTURE.md, "Publication protocol"):
//! 1. take the key's `flock` (one of 256 lock files), held from the re-check through publication;
//! 2. look again: another process may have published while we waited;
//! 3. compile into a fresh staging directory (a durable-fs temp name the sweep can reclaim);
//! 4. write `meta.json` last, describing the artifact's size and digest;
//! 5. fsync the staging directory's files and itself, rename it into place without replacing,
//!    fsync the parent (all inside `durable_fs::StagingDir::commit_noreplace`);
//! 6. record the slot's manifest, prune old variants, release the lock.

use crate::cache::{Built, Cache, Outcome};
use crate::entry::{self, Artifact, Meta, Unusable};
use crate::error::{CompileFailed, Error, Result};
use crate::evict::{move_to_trash, prune_variants};
use crate::headers::HeaderRecord;
use crate::key::{self, Prepared};
use crate::layout::Layout;
use crate::records::{write_record, FailureInputs, FailureRecord, SlotRecord};
use crate::spec::{KernelSpec, Source};
use crate::toolchain::Toolchain;
use durable_fs::PublishOutcome;
use fingerprint::Digest;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Named points in the protocol where the crash-test harness can kill or pause a builder.
/// Compiled to nothing without the `failpoints` feature.
#[inline]
pub(crate) fn failpoint(name: &str) {
    #[cfg(feature = "failpoints")]
    crate::failpoints::hit(name);
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// The compiled output, before publication.
struct Compiled {
    artifact_bytes: Vec<u8>,
    headers: Vec<PathBuf>,
    compile_ms: u64,
}

pub(crate) fn locked_build(
    cache: &Cache,
    layout: &Layout,
    spec: &KernelSpec,
    toolchain: &Toolchain,
    prepared: &Prepared,
) -> Result<Built> {
    let lock_path = layout.lock_file(&prepared.key);
    #[cfg(not(feature = "failpoints"))]
    let _guard = durable_fs::lock(
        &lock_path,
        durable_fs::LockMode::Exclusive,
        durable_fs::Wait::Forever,
    )?;
    // The crash-test harness logs every holder and can break the lock on purpose.
    #[cfg(feature = "failpoints")]
    let _guard = crate::failpoints::KeyLock::acquire(&lock_path, &prepared.key)?;
    failpoint("locked");
    // Another process may have published, or failed, while we waited for the lock.
    let lookup = cache.lookup(layout, prepared, spec.kind);
    if let Some((meta, artifact)) = lookup.hit {
        return Ok(Built {
            artifact,
            outcome: Outcome::Hit,
            warning: None,
            headers: Some(meta.headers.into()),
        });
    }
    if let Some(failure) = cache.recorded_failure(layout, prepared) {
        return Err(Error::Compile(Arc::new(failure)));
    }
    let reasons = cache.rebuild_reasons(layout, prepared, &lookup);
    for (dir, _why) in &lookup.corrupt {
        // The crash-test harness counts these: a correct protocol never leaves one.
        #[cfg(feature = "failpoints")]
        crate::failpoints::corrupt_found(dir, _why);
        move_to_trash(layout, dir)?;
    }

    let staging = layout.new_staging_dir()?;
    let scratch = layout.new_staging_dir()?;
    let artifact_name = entry::artifact_file_name(spec.kind);
    let output = staging.path().join(&artifact_name);
    // Injected bug `in-place`: compile straight into the final entry directory.
    #[cfg(feature = "failpoints")]
    let in_place = crate::failpoints::in_place_dir(
        layout.entry_dir(&prepared.key, &entry::variant_of(&[])),
        layout.dir_mode(),
    )?;
    #[cfg(feature = "failpoints")]
    let output = in_place
        .as_ref()
        .map_or(output, |dir| dir.join(&artifact_name));
    failpoint("compiling");
    let compiled = match compile(spec, toolchain, scratch.path(), &output) {
        Ok(compiled) => compiled,
        Err(Error::Compile(failure)) => {
            record_failure(cache, layout, prepared, &failure);
            return Err(Error::Compile(failure));
        }
        Err(e) => return Err(e),
    };
    drop(scratch);

    let records = classify_headers(cache, prepared, &compiled.headers)?;
    let variant = entry::variant_of(&records);
    // The manifest holds the key's components; the headers are listed beside it and enter
    // manifests (for rebuild reasons) only when two variants are compared.
    let manifest = prepared.manifest.clone();
    let meta = Meta {
        format: key::CACHE_FORMAT,
        name: spec.name.clone(),
        key: prepared.key,
        variant,
        slot: prepared.slot,
        kind: key::kind_name(spec.kind),
        artifact_file: artifact_name,
        artifact_size: compiled.artifact_bytes.len() as u64,
        artifact_digest: Digest::of_bytes(&compiled.artifact_bytes),
        headers: records.clone(),
        manifest: manifest.clone(),
        created_unix_ms: now_ms(),
        compile_ms: compiled.compile_ms,
        host: crate::toolchain::host_name(),
    };
    failpoint("writing-meta");
    write_record(&staging.path().join(entry::META_FILE), &meta)?;
    #[cfg(feature = "failpoints")]
    if let Some(dir) = &in_place {
        write_record(&dir.join(entry::META_FILE), &meta)?;
        return open_in_place(dir, prepared, spec, &variant);
    }

    let key_dir = layout.key_dir(&prepared.key);
    layout.ensure_dir(&key_dir)?;
    let target = layout.entry_dir(&prepared.key, &variant);
    if std::fs::symlink_metadata(&target).is_ok() {
        // Under the lock, an existing directory for this variant that the lookup did not accept
        // is corrupt or planted: move it aside (readers that hold it keep their copy).
        move_to_trash(layout, &target)?;
    }
    failpoint("publishing");
    // Injected bug `meta-first`: the entry goes public with meta.json, the artifact follows.
    #[cfg(feature = "failpoints")]
    let deferred = crate::failpoints::bug("meta-first").then(|| std::fs::remove_file(&output));
    let published = staging.commit_noreplace(&target)?;
    failpoint("published");
    #[cfg(feature = "failpoints")]
    if deferred.is_some() {
        let path = target.join(&meta.artifact_file);
        std::fs::write(&path, &compiled.artifact_bytes)
            .map_err(|e| Error::io("write artifact (meta-first bug)", &path, e))?;
    }
    cache.save_stat_cache();
    write_record(
        &layout.slot_file(&prepared.slot),
        &SlotRecord {
            name: spec.name.clone(),
            key: prepared.key,
            variant,
            headers: records.clone(),
            manifest,
        },
    )?;
    prune_variants(layout, &key_dir, cache.options.max_variants)?;
    let _ = std::fs::remove_file(layout.failure_file(&prepared.key));
    log_event(layout, "build", &spec.name, compiled.compile_ms);

    let variant_dir = crate::layout::variant_dir_name(&variant);
    let opened = entry::open_entry(&target, &prepared.key, &variant_dir)
        .and_then(|open| open.load(spec.kind));
    let outcome = match reasons {
        Some(reasons) => Outcome::Rebuilt { reasons },
        None => Outcome::Built,
    };
    match opened {
        Ok((_, artifact)) => Ok(Built {
            artifact,
            outcome,
            warning: None,
            headers: Some(records.into()),
        }),
        // The winner's entry (or ours) is not visible yet, as on NFS with a negative lookup
        // cache: hand out a private copy of what we compiled, which is byte-identical.
        Err(Unusable::Absent)
            if matches!(published, PublishOutcome::AlreadyExisted | PublishOutcome::Published) =>
        {
            let artifact = private_copy(spec, compiled.artifact_bytes)?;
            let warning = Some(format!(
                "entry {} not visible yet; using a private copy",
                target.display()
            ));
            Ok(Built {
                artifact,
                outcome,
                warning,
                headers: None,
            })
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

/// Opens the entry the `in-place` bug wrote, without a rename or a slot record.
#[cfg(feature = "failpoints")]
fn open_in_place(
    dir: &Path,
    prepared: &Prepared,
    spec: &KernelSpec,
    variant: &Digest,
) -> Result<Built> {
    let variant_dir = crate::layout::variant_dir_name(variant);
    match entry::open_entry(dir, &prepared.key, &variant_dir).and_then(|open| open.load(spec.kind))
    {
        Ok((meta, artifact)) => Ok(Built {
            artifact,
            outcome: Outcome::Built,
            warning: None,
            headers: Some(meta.headers.into()),
        }),
        Err(_) => Err(Error::io(
            "open in-place entry",
            dir,
            std::io::ErrorKind::NotFound.into(),
        )),
    }
}

/// Compiles `spec` into `output`, using `scratch` for the source text and the dependency file.
fn compile(
    spec: &KernelSpec,
    toolchain: &Toolchain,
    scratch: &Path,
    output: &Path,
) -> Result<Compiled> {
    let source = match &spec.source {
        Source::File(path) => crate::headers::normalize(path),
        Source::Text { file_name, text } => {
            let path = scratch.join(file_name);
            std::fs::write(&path, text).map_err(|e| Error::io("write kernel source", &path, e))?;
            path
        }
    };
    let mut job = nvcc::CompileJob::new(&source, output, spec.kind);
    if spec.kind == nvcc::OutputKind::Fatbin {
        for arch in &spec.arches {
            let compute = arch.replace("sm_", "compute_");
            job = job.gencode(&compute, arch);
        }
    } else if let Some(arch) = spec.arches.first() {
        job = job.arch(arch);
    }
    for dir in &spec.include_dirs {
        job = job.include_dir(crate::headers::normalize(dir));
    }
    for (name, value) in &spec.defines {
        job = job.define(name, value.as_deref());
    }
    for flag in &spec.flags {
        job = job.flag(flag.clone());
    }
    if let Some(timeout) = spec.timeout {
        job = job.timeout(timeout);
    }
    let start = Instant::now();
    let result = toolchain.nvcc.compile(&job);
    let compile_ms = start.elapsed().as_millis() as u64;
    let out = match result {
        Ok(out) => out,
        Err(nvcc::Error::Failed(failure)) => {
            return Err(Error::Compile(Arc::new(CompileFailed {
                name: spec.name.clone(),
                command: failure
                    .command
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
                exit_code: failure.status.and_then(|s| s.code()),
                diagnostics: failure.diagnostics.clone(),
                stderr_tail: failure.stderr_tail.clone(),
                from_record: false,
                headers_read: failure.headers.clone(),
            })))
        }
        Err(e) => return Err(Error::Compiler(e.to_string())),
    };
    let artifact_bytes =
        std::fs::read(output).map_err(|e| Error::io("read compiled artifact", output, e))?;
    if artifact_bytes.is_empty() {
        return Err(Error::Compiler(format!(
            "nvcc reported success but {} is empty",
            output.display()
        )));
    }
    Ok(Compiled {
        artifact_bytes,
        headers: out.headers,
        compile_ms,
    })
}

/// Compiles in a private temporary directory, outside the cache: the fallback when the cache is
/// full, read-only or failing. The artifact lives as long as the returned value.
pub(crate) fn build_uncached(
    spec: &KernelSpec,
    toolchain: &Toolchain,
    warning: String,
) -> Result<Built> {
    let dir = tempfile::Builder::new()
        .prefix("jit-cache-uncached-")
        .tempdir()
        .map_err(|e| Error::io("create private build directory", std::env::temp_dir(), e))?;
    let output = dir.path().join(entry::artifact_file_name(spec.kind));
    let compiled = compile(spec, toolchain, dir.path(), &output)?;
    let artifact = Artifact::private(compiled.artifact_bytes, output, spec.kind, dir);
    Ok(Built {
        artifact,
        outcome: Outcome::Built,
        warning: Some(warning),
        headers: None,
    })
}

fn private_copy(spec: &KernelSpec, bytes: Vec<u8>) -> Result<Artifact> {
    let dir = tempfile::Builder::new()
        .prefix("jit-cache-private-")
        .tempdir()
        .map_err(|e| Error::io("create private directory", std::env::temp_dir(), e))?;
    let path = dir.path().join(entry::artifact_file_name(spec.kind));
    std::fs::write(&path, &bytes).map_err(|e| Error::io("write private artifact", &path, e))?;
    Ok(Artifact::private(bytes, path, spec.kind, dir))
}

/// Records the headers a compile read (the source itself excluded) against the search path.
fn classify_headers(
    cache: &Cache,
    prepared: &Prepared,
    headers: &[PathBuf],
) -> Result<Vec<HeaderRecord>> {
    let mut stat = cache.stat();
    headers
        .iter()
        .filter(|h| Some(crate::headers::normalize(h)) != prepared.source_path)
        .map(|h| prepared.search.classify(h, &mut stat))
        .collect()
}

fn record_failure(cache: &Cache, layout: &Layout, prepared: &Prepared, failure: &CompileFailed) {
    // A failure is recorded only with what it depended on; without that it would outlive the fix.
    // Recording is best effort: the caller gets the diagnostics either way.
    let inputs = match &failure.headers_read {
        Some(headers) => classify_headers(cache, prepared, headers)
            .ok()
            .map(FailureInputs::Headers),
        None => cache
            .include_trees_snapshot(prepared)
            .map(FailureInputs::IncludeTrees),
    };
    if let Some(inputs) = inputs {
        let record = FailureRecord {
            key: prepared.key,
            inputs,
            failure: failure.clone(),
        };
        let _ = write_record(&layout.failure_file(&prepared.key), &record);
    }
}

/// Appends one line to the event log (builds only; hits are never written).
fn log_event(layout: &Layout, what: &str, name: &str, ms: u64) {
    use std::io::Write;
    if let Ok(mut file) = layout.open_append(crate::layout::Subdir::State, "events.log") {
        let _ = writeln!(file, "{} {what} {name} {ms}", now_ms());
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
