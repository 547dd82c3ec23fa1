//! Running one [`CompileJob`] and judging its result; running many in parallel.

use crate::depfile::parse_depfile;
use crate::diagnostics::{parse_diagnostics, Diagnostic};
use crate::error::{tail, CompileFailure, Error, STDERR_TAIL_BYTES};
use crate::job::CompileJob;
use crate::runner::{ProcessRunner, RunOptions, Runner};
use crate::toolchain::Nvcc;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A successful compile.
#[derive(Clone, Debug)]
pub struct CompileOutput {
    /// The output file (resolved against the job's working directory), known to exist and be
    /// non-empty.
    pub output: PathBuf,
    /// Every file the compile read besides the source, from its dependency file, in order, with
    /// relative names resolved against the job's working directory. Includes system and toolkit
    /// headers and headers reached only in device passes (see the crate docs).
    pub headers: Vec<PathBuf>,
    /// The same files as the dependency file spells them (relative names kept relative), in the
    /// same order: what the compiler's preprocessor printed, for a caller that writes the
    /// dependency file the same command would.
    pub spelled: Vec<PathBuf>,
    /// The compiler's stderr (warnings), lossily decoded.
    pub stderr: String,
    /// The diagnostics parsed from `stderr` (warnings and notes).
    pub diagnostics: Vec<Diagnostic>,
    /// Wall time of the compiler process.
    pub duration: Duration,
    /// Every path the compile and its children looked up, when [`CompileJob::trace`] asked for
    /// it and the system can trace.
    pub trace: Option<file_trace::Trace>,
    /// Why a compile that asked for a trace has none.
    pub trace_unavailable: Option<crate::TraceUnavailable>,
}

impl Nvcc {
    /// Compiles `job` with real processes ([`ProcessRunner`]).
    ///
    /// # Errors
    /// See [`Nvcc::compile_with`].
    pub fn compile(&self, job: &CompileJob) -> Result<CompileOutput, Error> {
        self.compile_with(job, &ProcessRunner)
    }

    /// Compiles `job` through `runner`.
    ///
    /// Removes any file already at the output path first, so a file found there afterwards was
    /// written by this compile. Success requires all of: exit status 0, not timed out, the output
    /// exists and is non-empty, and the dependency file parses.
    ///
    /// # Errors
    /// [`Error::Spawn`], [`Error::Failed`] (with the command, status, parsed diagnostics and the
    /// tail of stderr), [`Error::Timeout`], [`Error::MissingOutput`], [`Error::EmptyOutput`],
    /// [`Error::Depfile`], or [`Error::Io`] for the output or dependency file.
    pub fn compile_with(
        &self,
        job: &CompileJob,
        runner: &dyn Runner,
    ) -> Result<CompileOutput, Error> {
        let base = match &job.working_dir {
            Some(dir) => dir.clone(),
            None => std::env::current_dir()
                .map_err(|source| Error::io("read current directory", ".", source))?,
        };
        let output = resolve(&base, &job.output);
        let source_path = resolve(&base, &job.source);
        let depfile = depfile_path(&output);
        remove_if_present(&output, "remove stale output")?;
        let args = job.argv(self, &depfile);
        let opts = RunOptions {
            working_dir: job.working_dir.clone(),
            env: job.env.clone(),
            timeout: job.timeout,
            trace: job.trace,
            ..RunOptions::default()
        };
        let result = runner.run(self.path(), &args, &opts);
        let finished = result.and_then(|run| {
            let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
            if run.timed_out || !run.status.success() {
                let mut command = Vec::with_capacity(args.len() + 1);
                command.push(OsString::from(self.path()));
                command.extend(args.iter().cloned());
                let failure = Box::new(CompileFailure {
                    command,
                    status: Some(run.status),
                    diagnostics: parse_diagnostics(&stderr),
                    stderr_tail: tail(&stderr, STDERR_TAIL_BYTES),
                    timed_out: run.timed_out,
                    timeout: job.timeout,
                    // A failed compile often still wrote its dependency file (nvcc writes it
                    // while preprocessing): the headers let a caller tell when an input changed.
                    headers: read_headers(&depfile, &base, &source_path)
                        .ok()
                        .map(|(headers, _)| headers),
                    trace: run.trace.map(Box::new),
                });
                return Err(if run.timed_out {
                    Error::Timeout(failure)
                } else {
                    Error::Failed(failure)
                });
            }
            check_output(&output)?;
            let (headers, spelled) = read_headers(&depfile, &base, &source_path)?;
            Ok(CompileOutput {
                output: output.clone(),
                headers,
                spelled,
                diagnostics: parse_diagnostics(&stderr),
                stderr,
                duration: run.duration,
                trace: run.trace,
                trace_unavailable: run.trace_unavailable,
            })
        });
        // The dependency file is scratch: its content is returned, and a leftover must not be taken
        // for a fresh one by anyone.
        let cleanup = remove_if_present(&depfile, "remove dependency file");
        let compiled = finished?;
        cleanup?;
        Ok(compiled)
    }
}

/// Compiles `jobs` with at most `parallelism` compilers at once (default: the available
/// parallelism; 0 is treated as 1). Each job's result is at the job's index; one failure does not
/// stop the others.
pub fn compile_many(
    nvcc: &Nvcc,
    jobs: &[CompileJob],
    parallelism: Option<usize>,
) -> Vec<Result<CompileOutput, Error>> {
    compile_many_with(nvcc, jobs, parallelism, &ProcessRunner)
}

/// [`compile_many`] through `runner`.
pub fn compile_many_with(
    nvcc: &Nvcc,
    jobs: &[CompileJob],
    parallelism: Option<usize>,
    runner: &dyn Runner,
) -> Vec<Result<CompileOutput, Error>> {
    let workers = parallelism
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, jobs.len().max(1));
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<CompileOutput, Error>>>> =
        jobs.iter().map(|_| Mutex::new(None)).collect();
    // Each worker thread waits for the compilers it spawns, so PR_SET_PDEATHSIG (which fires when
    // the spawning thread exits) only fires if the whole process dies.
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = jobs.get(index) else { break };
                let result = nvcc.compile_with(job, runner);
                if let Ok(mut slot) = slots[index].lock() {
                    *slot = Some(result);
                }
            });
        }
    });
    slots
        .into_iter()
        .zip(jobs)
        .map(|(slot, job)| {
            slot.into_inner().ok().flatten().unwrap_or_else(|| {
                Err(Error::io(
                    "compile (worker thread panicked)",
                    &job.source,
                    std::io::Error::other("no result recorded"),
                ))
            })
        })
        .collect()
}

fn resolve(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        base.join(path)
    }
}

/// A dependency file name beside the output, unique per process and call.
fn depfile_path(output: &Path) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = output
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    let dir = output.parent().unwrap_or_else(|| Path::new("."));
    dir.join(format!(".{name}.{}.{n}.d", std::process::id()))
}

fn remove_if_present(path: &Path, op: &'static str) -> Result<(), Error> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(Error::io(op, path, err)),
    }
}

fn check_output(output: &Path) -> Result<(), Error> {
    match std::fs::metadata(output) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(Error::MissingOutput {
            path: output.to_owned(),
        }),
        Err(err) => Err(Error::io("stat output", output, err)),
        Ok(meta) if !meta.is_file() => Err(Error::io(
            "check output",
            output,
            std::io::Error::other("not a regular file"),
        )),
        Ok(meta) if meta.len() == 0 => Err(Error::EmptyOutput {
            path: output.to_owned(),
        }),
        Ok(_) => Ok(()),
    }
}

/// The dependency file's prerequisites besides the source: resolved against `base`, and as
/// spelled.
fn read_headers(
    depfile: &Path,
    base: &Path,
    source: &Path,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), Error> {
    // Bytes, not a string: header names need not be UTF-8.
    let text =
        std::fs::read(depfile).map_err(|err| Error::io("read dependency file", depfile, err))?;
    let prerequisites = parse_depfile(&text).map_err(|source| Error::Depfile {
        path: depfile.to_owned(),
        source,
    })?;
    Ok(prerequisites
        .into_iter()
        .map(|p| (resolve(base, &p), p))
        .filter(|(p, _)| p != source)
        .unzip())
}
