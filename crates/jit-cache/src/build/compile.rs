//! Running the compiler for a resolved request, and telling the source's failures from the
//! environment's.
//!
//! nvcc runs in the request's working directory with the source and every directory as the
//! request spelled them, as the caller's own nvcc would (so `__FILE__` and diagnostics name what
//! they would name), and with a private `TMPDIR`, so that nothing it writes or lists on the way is
//! shared.
//!
//! A failure is the source's only when nvcc exited non-zero on its own and the places the compile
//! wrote (the output's directory, its `TMPDIR`) are evidently healthy afterwards: writable, not
//! read-only, with free space and inodes, and a small probe written and fsynced there succeeds.
//! That evidence does not depend on the language the compiler speaks (a German GCC says "Auf dem
//! Gerät ist kein Speicherplatz mehr verfügbar"). A timeout, a signal (the OOM killer), or a
//! failure without that evidence is the environment's and is never recorded or replayed.

use crate::build::entry::{self, Artifact};
use crate::build::inputs::{compile_start, Instant};
use crate::build::request::Request;
use crate::build::spec::Source;
use crate::build::toolchain::Toolchain;
use crate::error::{CompileFailed, Error, FailureCause, Result};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Less free space than this where the compile wrote, after it failed, is evidence that the
/// disk failed it (nvcc removes its temporaries on the way out, so what is left is a floor).
const LOW_SPACE_BYTES: u64 = 64 << 20;

/// What the compiler said (in English, the C locale's words) when the environment failed it:
/// more evidence, never the only evidence.
const ENVIRONMENT_ERRORS: &[&str] = &[
    "No space left on device",
    "Input/output error",
    "Read-only file system",
    "Disk quota exceeded",
    "Cannot allocate memory",
    "Too many open files",
];

/// A successful compile, before publication.
pub(crate) struct Compiled {
    pub(crate) artifact_bytes: Vec<u8>,
    /// Every file the compile read (from its dependency file), resolved against the working
    /// directory.
    pub(crate) read: Vec<PathBuf>,
    /// The same files as the dependency file spells them.
    pub(crate) spelled: Vec<PathBuf>,
    /// The compiler's stderr (warnings), kept in the entry's compiler record.
    pub(crate) stderr: String,
    pub(crate) compile_ms: u64,
    /// When the compile started, on the clock file timestamps use.
    pub(crate) started: Instant,
    /// What the trace of the compile saw (`observed.rs`); None when it ran untraced.
    pub(crate) seen: Option<crate::build::observed::Seen>,
}

/// Set to `0` or `off` to compile untraced: the include model and the dependency-file cross-check
/// alone then vouch for an entry (`observed.rs` says what the trace adds).
pub(crate) const TRACE_ENV: &str = "JIT_CACHE_TRACE";

/// Whether compiles are traced (on unless [`TRACE_ENV`] turns it off).
fn tracing() -> bool {
    !std::env::var(TRACE_ENV).is_ok_and(|v| v == "0" || v.eq_ignore_ascii_case("off"))
}

/// Why [`compile`] has no artifact: the error, when the compile started (if it did), and what
/// its trace saw (a failure is recorded, and replayed, only on proven records too).
pub(crate) struct NotCompiled {
    pub(crate) error: Error,
    pub(crate) started: Option<Instant>,
    pub(crate) seen: Option<Box<crate::build::observed::Seen>>,
}

impl From<Error> for NotCompiled {
    fn from(error: Error) -> Self {
        NotCompiled {
            error,
            started: None,
            seen: None,
        }
    }
}

/// Compiles `request` into `output`, using `scratch` for a text source's private copy. `asked`
/// is when the build was asked for ([`crate::build::inputs::asked_now`]). `trace`: whether to trace the
/// compile (unless [`TRACE_ENV`] says not to), with the directories the caller declares the
/// compile's own ([`crate::build::observed::ignored_paths`]); a compile whose answer is never
/// published needs no trace.
pub(crate) fn compile(
    request: &Request,
    toolchain: &Toolchain,
    scratch: &Path,
    output: &Path,
    asked: Instant,
    trace: Option<&[PathBuf]>,
) -> std::result::Result<Compiled, NotCompiled> {
    let spec = &request.spec;
    let source = match (&spec.source, &request.source_spelled) {
        (Source::File(_), Some(spelled)) => spelled.clone(),
        (Source::Text { file_name, text }, _) => {
            let path = scratch.join(file_name);
            std::fs::write(&path, text).map_err(|e| Error::io("write kernel source", &path, e))?;
            path
        }
        (Source::File(path), None) => {
            return Err(Error::io(
                "resolve kernel source",
                path,
                std::io::Error::other("not resolved"),
            )
            .into())
        }
    };
    // nvcc's temporaries (and its listing of its temporary directory) stay private to this
    // compile; on the local disk, even when the cache root is on NFS.
    let tmp = private_dir()?;
    let mut job = nvcc::CompileJob::new(&source, output, spec.kind)
        .working_dir(&request.working_dir)
        .env("TMPDIR", tmp.path())
        .trace(trace.is_some() && tracing());
    if spec.kind == nvcc::OutputKind::Fatbin {
        for arch in &spec.arches {
            job = job.gencode(&arch.replace("sm_", "compute_"), arch);
        }
    } else if let Some(arch) = spec.arches.first() {
        job = job.arch(arch);
    }
    // An empty arch list leaves the targets to the flags (`-arch`, `-gencode`, ...) or to nvcc's
    // default: the launcher passes a command line's own targets that way. The spec's include
    // directories are among the request's flags, as spelled.
    for (name, value) in &spec.defines {
        job = job.define(name, value.as_deref());
    }
    for flag in &request.nvcc_flags {
        job = job.flag(flag.clone());
    }
    if let Some(timeout) = spec.timeout {
        job = job.timeout(timeout);
    }
    let started = compile_start(asked);
    let clock = std::time::Instant::now();
    let result = toolchain.nvcc.compile(&job);
    let compile_ms = clock.elapsed().as_millis() as u64;
    let written: Vec<&Path> = [output.parent(), Some(tmp.path())]
        .into_iter()
        .flatten()
        .collect();
    // The compile's own places: its output's directory, its text source's copy, its TMPDIR,
    // and those the caller declares. A team root's staging directories are named through
    // their descriptors (`/proc/<pid>/fd/N`), which a compiler's `realpath` turns into the
    // directory's real path: both spellings are its own.
    let own: Vec<PathBuf> = [output.parent(), Some(scratch), Some(tmp.path())]
        .into_iter()
        .flatten()
        .flat_map(|dir| {
            let real = dir
                .starts_with("/proc")
                .then(|| std::fs::read_link(dir).ok())
                .flatten();
            std::iter::once(dir.to_path_buf()).chain(real)
        })
        .chain(crate::build::observed::ignored_paths(
            trace.unwrap_or_default(),
        ))
        .collect();
    let digest = |events: &file_trace::Trace| crate::build::observed::digest(events, &own);
    let out = match result {
        Ok(out) => out,
        Err(e) => {
            let seen = match &e {
                nvcc::Error::Failed(f) | nvcc::Error::Timeout(f) => {
                    f.trace.as_deref().map(|t| Box::new(digest(t)))
                }
                _ => None,
            };
            return Err(NotCompiled {
                error: failure(&spec.name, e, &written),
                started: Some(started),
                seen,
            });
        }
    };
    let artifact_bytes = std::fs::read(output).map_err(|e| NotCompiled {
        error: Error::io("read compiled artifact", output, e),
        started: Some(started),
        seen: None,
    })?;
    let seen = out.trace.as_ref().map(digest);
    Ok(Compiled {
        artifact_bytes,
        read: out.headers,
        spelled: out.spelled,
        stderr: out.stderr,
        compile_ms,
        started,
        seen,
    })
}

/// Evidence that the places a failed compile wrote could not take its writes: they are read-only,
/// short of space or inodes, or a small probe written and fsynced there fails. `None` when each
/// is evidently healthy.
fn environment_evidence(dirs: &[&Path]) -> Option<String> {
    for dir in dirs {
        let stat = match rustix::fs::statvfs(*dir) {
            Ok(stat) => stat,
            Err(e) => return Some(format!("statvfs {}: {e}", dir.display())),
        };
        if stat.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
            return Some(format!("{} is on a read-only filesystem", dir.display()));
        }
        if stat.f_files > 0 && stat.f_favail == 0 {
            return Some(format!("{} has no free inodes", dir.display()));
        }
        match fs4::available_space(dir) {
            Ok(free) if free < LOW_SPACE_BYTES => {
                return Some(format!("{} has {free} bytes free", dir.display()))
            }
            Ok(_) => {}
            Err(e) => return Some(format!("free space of {}: {e}", dir.display())),
        }
        if let Err(e) = probe_write(dir) {
            return Some(format!("a probe write in {} failed: {e}", dir.display()));
        }
    }
    None
}

/// Writes 64 KiB to a new file in `dir`, fsyncs it and removes it.
fn probe_write(dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = tempfile::Builder::new()
        .prefix(".jit-cache-probe-")
        .tempfile_in(dir)?;
    file.write_all(&[0u8; 64 << 10])?;
    file.as_file().sync_all()?;
    Ok(())
}

/// The cache's error for a failed compile; `written` are the directories the compile wrote.
fn failure(name: &str, error: nvcc::Error, written: &[&Path]) -> Error {
    let (failure, timed_out) = match error {
        nvcc::Error::Failed(f) => (f, false),
        nvcc::Error::Timeout(f) => (f, true),
        // Writing or reading the outputs failed: the storage's fault (the caller compiles
        // privately).
        nvcc::Error::Io { op, path, source } => return Error::io(op, path, source),
        other => return crate::error::ToolchainError::Nvcc(other).into(),
    };
    let signal = failure.status.and_then(|s| s.signal());
    let cause = if timed_out {
        FailureCause::Timeout {
            after_ms: failure.timeout.map_or(0, |t| t.as_millis() as u64),
        }
    } else if let Some(signal) = signal {
        FailureCause::Signal { signal }
    } else if let Some(reason) = environment_evidence(written) {
        FailureCause::Environment { reason }
    } else if let Some(said) = ENVIRONMENT_ERRORS
        .iter()
        .find(|e| failure.stderr_tail.contains(*e))
    {
        FailureCause::Environment {
            reason: (*said).to_string(),
        }
    } else {
        FailureCause::Source
    };
    Error::Compile(Arc::new(CompileFailed {
        name: name.to_string(),
        command: failure
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        exit_code: failure.status.and_then(|s| s.code()),
        diagnostics: failure.diagnostics.clone(),
        stderr_tail: failure.stderr_tail.clone(),
        from_record: false,
        cause,
        headers_read: failure.headers.clone(),
    }))
}

/// A private copy of compiled bytes, for an answer that cannot come from the cache.
pub(crate) fn private_copy(kind: nvcc::OutputKind, bytes: Vec<u8>) -> Result<Artifact> {
    let dir = private_dir()?;
    let path = dir.path().join(entry::artifact_file_name(kind));
    std::fs::write(&path, &bytes).map_err(|e| Error::io("write private artifact", &path, e))?;
    Ok(Artifact::private(bytes, path, kind, dir))
}

pub(crate) fn private_dir() -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("jit-cache-private-")
        .tempdir()
        .map_err(|e| Error::io("create private build directory", std::env::temp_dir(), e))
}
