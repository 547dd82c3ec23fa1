//! The crate's error type and the report of a failed compile.

use crate::depfile::DepfileError;
use crate::diagnostics::Diagnostic;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Everything that can go wrong driving nvcc.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The compiler could not be started.
    #[error("spawn {}: {source}", program.display())]
    Spawn {
        /// The program that failed to start.
        program: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The compiler ran and exited unsuccessfully (or was killed by a signal).
    #[error("{0}")]
    Failed(Box<CompileFailure>),
    /// The compiler ran past the job's timeout; its whole process group was killed.
    #[error("{0}")]
    Timeout(Box<CompileFailure>),
    /// The compiler exited 0 but the output file does not exist.
    #[error("compile exited successfully but wrote no output at {}; check the flags for -E, -M or --dryrun", path.display())]
    MissingOutput {
        /// The expected output.
        path: PathBuf,
    },
    /// The compiler exited 0 but the output file is empty.
    #[error("compile exited successfully but its output {} is empty", path.display())]
    EmptyOutput {
        /// The empty output.
        path: PathBuf,
    },
    /// The dependency file could not be parsed.
    #[error("parse dependency file {}: {source}", path.display())]
    Depfile {
        /// The dependency file.
        path: PathBuf,
        /// What was wrong with it.
        #[source]
        source: DepfileError,
    },
    /// `nvcc --version` printed nothing that names a release.
    #[error("parse the output of {} --version: no \"release X.Y\" in {output:?}", program.display())]
    Version {
        /// The nvcc binary.
        program: PathBuf,
        /// What it printed.
        output: String,
    },
    /// A version query (`nvcc --version`, `g++ --version`) exited unsuccessfully.
    #[error("{} --version failed ({status}): {stderr}", program.display())]
    VersionQuery {
        /// The program queried.
        program: PathBuf,
        /// Its exit status.
        status: ExitStatus,
        /// The end of its stderr.
        stderr: String,
    },
    /// A filesystem operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation, e.g. "remove stale output" or "read dependency file".
        op: &'static str,
        /// The path it was applied to.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// The failure report when the compile ran and failed or timed out.
    pub fn failure(&self) -> Option<&CompileFailure> {
        match self {
            Error::Failed(failure) | Error::Timeout(failure) => Some(failure),
            _ => None,
        }
    }
}

/// What a failed compile left behind: enough to show the user and to reproduce it.
#[derive(Debug, Clone)]
pub struct CompileFailure {
    /// The program and its arguments, exactly as executed (no shell).
    pub command: Vec<OsString>,
    /// The exit status; `None` when the process was killed at the timeout and could not be reaped
    /// normally.
    pub status: Option<ExitStatus>,
    /// The diagnostics parsed from stderr.
    pub diagnostics: Vec<Diagnostic>,
    /// The last lines of stderr (at most [`STDERR_TAIL_BYTES`] bytes).
    pub stderr_tail: String,
    /// Whether the compile was killed at its timeout.
    pub timed_out: bool,
    /// The timeout that applied, if any.
    pub timeout: Option<Duration>,
    /// The headers the failed compile read, from its dependency file when it wrote one (a failure
    /// in preprocessing, such as a missing header, leaves none).
    pub headers: Option<Vec<PathBuf>>,
    /// Every path the failed compile looked up, when the job asked for a trace.
    pub trace: Option<Box<file_trace::Trace>>,
}

/// How much of stderr a [`CompileFailure`] keeps.
pub const STDERR_TAIL_BYTES: usize = 8 * 1024;

impl CompileFailure {
    /// The command line in a form a person can paste into a POSIX shell.
    pub fn command_line(&self) -> String {
        self.command
            .iter()
            .map(|arg| shell_quote(&arg.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=,+:@%".contains(&b));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

impl fmt::Display for CompileFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.timed_out, self.timeout, self.status) {
            (true, Some(limit), _) => write!(f, "compile killed after the {limit:?} timeout")?,
            (true, None, _) => write!(f, "compile killed at its timeout")?,
            (false, _, Some(status)) => write!(f, "compile failed ({status})")?,
            (false, _, None) => write!(f, "compile failed")?,
        }
        write!(f, ": {}", self.command_line())?;
        if self.diagnostics.is_empty() {
            if !self.stderr_tail.trim().is_empty() {
                write!(f, "\n{}", self.stderr_tail.trim_end())?;
            }
        } else {
            for diagnostic in &self.diagnostics {
                write!(f, "\n{diagnostic}")?;
            }
        }
        Ok(())
    }
}

/// Returns the end of `text`, at most `max` bytes, cut at a line start when possible.
pub(crate) fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = &text[start..];
    match cut.find('\n') {
        Some(newline) if newline + 1 < cut.len() => cut[newline + 1..].to_owned(),
        _ => cut.to_owned(),
    }
}
