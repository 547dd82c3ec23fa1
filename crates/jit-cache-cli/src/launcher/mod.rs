//! The nvcc launcher: `jit-cache nvcc ARGS`, `jit-cache /path/to/nvcc ARGS` (what CMake's
//! `CMAKE_CUDA_COMPILER_LAUNCHER` runs), or this binary invoked as `nvcc` through a symlink.
//!
//! A cacheable command (one `.cu` source to an object, cubin, PTX or fatbin; see `parse.rs`)
//! is answered from the library's cache ([`jit_cache::Cache::get_or_build_with_record`]): the
//! output is written atomically (`output.rs`: temp file beside it, rename; as durable as nvcc's
//! own outputs, while the cache entry is fsynced), the dependency file the command asked for is
//! written as nvcc writes it (`depfile.rs`), the compiler's stderr
//! is replayed, and the exit status is 0, on a hit exactly as on a miss. Everything else runs
//! the real nvcc unchanged (`exec`), and the reason is counted for `jit-cache stats`: an
//! uncacheable command, a compile error (nvcc prints its own diagnostics), or a cache that
//! cannot answer exactly.
//!
//! The key is the library's: the source, the headers the compile read, every flag, the
//! environment nvcc reads (`NVCC_PREPEND_FLAGS`, `NVCC_APPEND_FLAGS`, `CPATH`, ...), the
//! toolchain and host compiler. The output path, the `-MT` target and the dependency file's
//! path never enter it, so build directories share entries.
//!
//! nvcc writes nothing to stdout for these commands (its warnings and `-Xptxas -v` reports go
//! to stderr); stdout is not replayed.

mod depfile;
mod log;
mod output;
mod parse;

pub(crate) use log::counts;

use jit_cache::{Cache, CacheOptions, Error, KernelSpec, OutputKind};
use log::{Counted, LogLine};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Set to `1` to run the real nvcc for every command (for comparisons).
const DISABLE_ENV: &str = "JIT_CACHE_DISABLE";

/// When this process is a launcher invocation, runs it and returns its exit code.
pub(crate) fn dispatch() -> Option<ExitCode> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let invoked_as = args
        .first()
        .map(|a| Path::new(a).file_name().unwrap_or(a.as_os_str()).to_owned())
        .unwrap_or_default();
    if invoked_as == "nvcc" {
        return Some(launch(None, &args[1..]));
    }
    let first = args.get(1)?;
    if first == "nvcc" {
        return Some(launch(None, &args[2..]));
    }
    let bytes = first.as_encoded_bytes();
    if bytes.contains(&b'/') && !bytes.starts_with(b"-") {
        return Some(launch(Some(PathBuf::from(first)), &args[2..]));
    }
    // Any other program a build runs through its launcher variable (`FLASHINFER_CXX_LAUNCHER`
    // makes it `jit-cache c++ ...`): not one of the CLI's commands, so it runs unchanged.
    if !bytes.starts_with(b"-") && !is_subcommand(first) {
        return Some(launch(Some(PathBuf::from(first)), &args[2..]));
    }
    None
}

/// Whether `word` names one of the CLI's own commands, read from the command definition
/// (`args.rs`, and clap's `help`) so that a command added there is never launched as a program.
fn is_subcommand(word: &std::ffi::OsStr) -> bool {
    let mut cli = <crate::args::Cli as clap::CommandFactory>::command();
    // Building the definition adds the subcommands clap generates (`help`).
    cli.build();
    let known = cli
        .get_subcommands()
        .any(|c| c.get_name() == word || c.get_all_aliases().any(|alias| alias == word));
    known
}

/// Whether `program` is nvcc (by its file name: `nvcc`, or a wrapper named after it). Another
/// compiler (`c++`, `g++`) runs unchanged: this launcher caches nvcc's commands only.
fn is_nvcc(program: &Path) -> bool {
    program
        .file_name()
        .is_some_and(|n| n.to_string_lossy().contains("nvcc"))
}

fn launch(named: Option<PathBuf>, args: &[OsString]) -> ExitCode {
    if let Some(program) = named.as_ref().filter(|p| !is_nvcc(p)) {
        log(&LogLine::new(
            Counted::Uncacheable,
            format!(
                "{} is not nvcc",
                program.file_name().unwrap_or_default().to_string_lossy()
            ),
        ));
        return run_real(program, args);
    }
    let real = match crate::real_nvcc::find(named) {
        Ok(real) => real,
        Err(why) => {
            eprintln!("jit-cache: {why}");
            return ExitCode::from(127);
        }
    };
    match try_cached(&real, args) {
        Ok(code) => code,
        Err(fallback) => {
            if let Some(line) = fallback.log_line() {
                log(&line);
            }
            run_real(&real, args)
        }
    }
}

/// Why the real nvcc runs instead.
enum Fallback {
    /// Not one cacheable compile: counted as `uncacheable: <reason>`.
    Uncacheable(String),
    /// The compile failed: nvcc prints its own diagnostics and exit status. Not counted.
    CompileFailed,
    /// The cache could not answer exactly: counted as `fallback: <reason>`.
    Cache(String),
}

impl Fallback {
    fn log_line(self) -> Option<LogLine> {
        match self {
            Fallback::Uncacheable(why) => Some(LogLine::new(Counted::Uncacheable, why)),
            Fallback::CompileFailed => None,
            Fallback::Cache(why) => Some(LogLine::new(Counted::Fallback, why)),
        }
    }
}

/// Replaces this process with the real nvcc, arguments unchanged.
fn run_real(real: &Path, args: &[OsString]) -> ExitCode {
    let err = std::process::Command::new(real).args(args).exec();
    eprintln!("jit-cache: run {}: {err}", real.display());
    ExitCode::from(127)
}

/// Appends one line to the launcher log under the default root.
fn log(line: &LogLine) {
    if let Some(root) = jit_cache::default_root() {
        log::append(&root, line);
    }
}

fn try_cached(real: &Path, args: &[OsString]) -> Result<ExitCode, Fallback> {
    if std::env::var_os(DISABLE_ENV).is_some_and(|v| v == "1") {
        return Err(Fallback::Uncacheable(format!("{DISABLE_ENV}=1")));
    }
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_str().map(str::to_string))
        .collect::<Option<_>>()
        .ok_or_else(|| Fallback::Uncacheable("an argument that is not UTF-8".into()))?;
    let command = parse::parse(&args, &|file| std::fs::read_to_string(file))
        .map_err(|parse::Uncacheable(why)| Fallback::Uncacheable(why))?;
    let working_dir = std::env::current_dir()
        .map_err(|e| Fallback::Cache(format!("read the working directory: {e}")))?;
    let root = jit_cache::default_root()
        .ok_or_else(|| Fallback::Cache("no cache directory (set JIT_CACHE_DIR)".into()))?;
    let nvcc = nvcc::Nvcc::at(real).map_err(|e| Fallback::Cache(e.to_string()))?;
    // The fleet's tier from the environment: a build system runs `nvcc` with no flag of ours.
    let mut options = CacheOptions::default().nvcc(nvcc);
    if let Some(remote) = crate::fleet::remote(None, None) {
        options = options.remote(remote);
    }
    let cache = Cache::open_with(&root, options).map_err(|e| Fallback::Cache(e.to_string()))?;

    let spec = spec_for(&command);
    let (answer, record) = match cache.get_or_build_with_record(&spec) {
        Ok(answered) => answered,
        Err(e) if e.compile_failure().is_some() => return Err(Fallback::CompileFailed),
        Err(Error::InvalidSpec { reason, .. }) => return Err(Fallback::Uncacheable(reason)),
        Err(e) => return Err(Fallback::Cache(e.to_string())),
    };
    let record = record.ok_or_else(|| {
        Fallback::Cache(match &answer.warning {
            Some(w) => format!("compiled uncached: {w}"),
            None => "the entry has no compiler record".into(),
        })
    })?;
    let depfile = match &command.deps {
        None => None,
        Some(deps) => {
            let prerequisites = depfile::prerequisites(&record, deps.system_headers)
                .ok_or_else(|| Fallback::Cache("a header name that is not UTF-8".into()))?;
            let target = deps
                .target
                .clone()
                .or_else(|| command.output.clone())
                .unwrap_or_else(|| {
                    depfile::beside_stem(&command.source, "o")
                        .to_string_lossy()
                        .into_owned()
                });
            let path = match (&deps.file, &command.output) {
                (Some(file), _) => PathBuf::from(file),
                (None, Some(output)) => Path::new(output).with_extension("d"),
                (None, None) => depfile::beside_stem(&command.source, "d"),
            };
            let bytes = depfile::render(&target, &command.source, &prerequisites, deps.phony);
            Some((working_dir.join(path), bytes))
        }
    };
    let output = working_dir.join(output_path(&command));
    // Both written before either is renamed, each whole or not at all (`output.rs`).
    let output = output::Staged::write(&output, answer.artifact.bytes())
        .map_err(|e| Fallback::Cache(format!("write output: {e}")))?;
    let depfile = match depfile {
        Some((path, bytes)) => Some(
            output::Staged::write(&path, &bytes)
                .map_err(|e| Fallback::Cache(format!("write dependency file: {e}")))?,
        ),
        None => None,
    };
    output
        .publish()
        .map_err(|e| Fallback::Cache(format!("write output: {e}")))?;
    if let Some(depfile) = depfile {
        depfile
            .publish()
            .map_err(|e| Fallback::Cache(format!("write dependency file: {e}")))?;
    }
    let _ = std::io::stderr().write_all(record.stderr.as_bytes());
    // The process ends now: what it holds (hundreds of parsed records, the handle's memos) is
    // left to the exit instead of freed piece by piece; the state worth keeping is saved.
    cache.save_state();
    if !answer.artifact.is_cached() {
        // A private answer's directory is this process's to remove.
        drop(answer);
    } else {
        std::mem::forget(answer);
    }
    std::mem::forget((cache, record));
    Ok(ExitCode::SUCCESS)
}

fn extension(kind: OutputKind) -> &'static str {
    kind.extension()
}

/// The library's spec for a parsed command: the source as given (the compile spells it so), the
/// kind, no arch list (the flags carry the targets, or nvcc's default applies), every other
/// option as a flag.
fn spec_for(command: &parse::Command) -> KernelSpec {
    let mut spec = KernelSpec::from_file(&command.source)
        .kind(command.kind)
        .arches(Vec::<String>::new());
    // The name names the slot only (never the key); a stem the library refuses as a name
    // (`.x.cu`, `-x.cu`) gets a neutral one.
    if spec.validate().is_err() {
        spec = spec.name("kernel");
    }
    for flag in command.library_flags() {
        spec = spec.flag(flag);
    }
    // The output's file name, which a debug cubin records (the library keys it only then).
    if let Some(name) = output_path(command).file_name().and_then(|n| n.to_str()) {
        spec = spec.output_name(name);
    }
    spec
}

/// Where nvcc would write the command's output, relative to the working directory when the
/// command spells it so.
fn output_path(command: &parse::Command) -> PathBuf {
    match &command.output {
        Some(output) => PathBuf::from(output),
        None => depfile::beside_stem(&command.source, extension(command.kind)),
    }
}
