//! Running the compiler for a resolved request, and telling the source's failures from the
//! environment's.
//!
//! nvcc runs in the request's working directory (relative paths in the environment's flags and a
//! forced include's first lookup mean what they meant to the caller), with the request's absolute
//! paths. A failure is the source's only when nvcc exited non-zero on its own: a timeout, a signal
//! (the OOM killer) or an error writing outputs or temporaries (`No space left on device`) is not,
//! and is never recorded or replayed.

use crate::cache::{Answer, Outcome};
use crate::entry::{self, Artifact};
use crate::error::{CompileFailed, Error, FailureCause, Result};
use crate::inputs::{compile_start, Instant};
use crate::request::Request;
use crate::spec::Source;
use crate::toolchain::Toolchain;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the compiler said when the environment, not the source, failed it.
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
    /// Every file the compile read (from its dependency file), as the compiler spelled it.
    pub(crate) read: Vec<PathBuf>,
    /// The compiler's stderr (warnings), kept in the entry's compiler record.
    pub(crate) stderr: String,
    pub(crate) compile_ms: u64,
    /// When the compile started, on the clock file timestamps use.
    pub(crate) started: Instant,
}

/// Compiles `request` into `output`, using `scratch` for a text source's private copy. `asked`
/// is when the build was asked for ([`crate::inputs::asked_now`]).
pub(crate) fn compile(
    request: &Request,
    toolchain: &Toolchain,
    scratch: &Path,
    output: &Path,
    asked: Instant,
) -> std::result::Result<Compiled, (Error, Option<Instant>)> {
    let spec = &request.spec;
    let source = match (&spec.source, &request.source_path) {
        (Source::File(_), Some(path)) => path.clone(),
        (Source::Text { file_name, text }, _) => {
            let path = scratch.join(file_name);
            std::fs::write(&path, text)
                .map_err(|e| (Error::io("write kernel source", &path, e), None))?;
            path
        }
        (Source::File(path), None) => {
            return Err((
                Error::io(
                    "resolve kernel source",
                    path,
                    std::io::Error::other("not resolved"),
                ),
                None,
            ))
        }
    };
    let mut job =
        nvcc::CompileJob::new(&source, output, spec.kind).working_dir(&request.working_dir);
    if spec.kind == nvcc::OutputKind::Fatbin {
        for arch in &spec.arches {
            job = job.gencode(&arch.replace("sm_", "compute_"), arch);
        }
    } else if let Some(arch) = spec.arches.first() {
        job = job.arch(arch);
    }
    // An empty arch list leaves the targets to the flags (`-arch`, `-gencode`, ...) or to nvcc's
    // default: the launcher passes a command line's own targets that way.
    for dir in &request.include_dirs {
        job = job.include_dir(dir);
    }
    for (name, value) in &spec.defines {
        job = job.define(name, value.as_deref());
    }
    for flag in &request.flags {
        job = job.flag(flag.clone());
    }
    if let Some(timeout) = spec.timeout {
        job = job.timeout(timeout);
    }
    let started = compile_start(asked);
    let clock = std::time::Instant::now();
    let result = toolchain.nvcc.compile(&job);
    let compile_ms = clock.elapsed().as_millis() as u64;
    let out = result.map_err(|e| (failure(&spec.name, e), Some(started)))?;
    let artifact_bytes = std::fs::read(output).map_err(|e| {
        (
            Error::io("read compiled artifact", output, e),
            Some(started),
        )
    })?;
    Ok(Compiled {
        artifact_bytes,
        read: out.headers,
        stderr: out.stderr,
        compile_ms,
        started,
    })
}

/// The cache's error for a failed compile.
fn failure(name: &str, error: nvcc::Error) -> Error {
    let (failure, timed_out) = match error {
        nvcc::Error::Failed(f) => (f, false),
        nvcc::Error::Timeout(f) => (f, true),
        // Writing or reading the outputs failed: the storage's fault (the caller compiles
        // privately).
        nvcc::Error::Io { op, path, source } => return Error::io(op, path, source),
        other => return Error::Toolchain(other.to_string()),
    };
    let signal = failure.status.and_then(|s| s.signal());
    let environment = ENVIRONMENT_ERRORS
        .iter()
        .find(|e| failure.stderr_tail.contains(*e));
    let cause = if timed_out {
        FailureCause::Timeout {
            after_ms: failure.timeout.map_or(0, |t| t.as_millis() as u64),
        }
    } else if let Some(signal) = signal {
        FailureCause::Signal { signal }
    } else if let Some(reason) = environment {
        FailureCause::Environment {
            reason: (*reason).to_string(),
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

/// Compiles in a private temporary directory, outside the cache: the fallback when the cache is
/// full, read-only or failing, or when inputs moved during a compile. The artifact lives as long
/// as the returned value.
pub(crate) fn build_uncached(
    request: &Request,
    toolchain: &Toolchain,
    warning: String,
    asked: Instant,
) -> Result<Answer> {
    let dir = private_dir()?;
    let output = dir
        .path()
        .join(entry::artifact_file_name(request.spec.kind));
    let compiled = compile(request, toolchain, dir.path(), &output, asked).map_err(|(e, _)| e)?;
    let artifact = Artifact::private(compiled.artifact_bytes, output, request.spec.kind, dir);
    Ok(Answer {
        artifact,
        outcome: Outcome::Built,
        warning: Some(warning),
        inputs: None,
    })
}

/// A private copy of compiled bytes, for an answer that cannot come from the cache.
pub(crate) fn private_copy(kind: nvcc::OutputKind, bytes: Vec<u8>) -> Result<Artifact> {
    let dir = private_dir()?;
    let path = dir.path().join(entry::artifact_file_name(kind));
    std::fs::write(&path, &bytes).map_err(|e| Error::io("write private artifact", &path, e))?;
    Ok(Artifact::private(bytes, path, kind, dir))
}

fn private_dir() -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("jit-cache-private-")
        .tempdir()
        .map_err(|e| Error::io("create private build directory", std::env::temp_dir(), e))
}
