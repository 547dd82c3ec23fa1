//! The crate's error type: every error names the operation and the path.

use std::io;
use std::path::{Path, PathBuf};

/// An error from fingerprinting, naming the operation and the path it concerns.
///
/// Its message reads "{operation} {path}: {what went wrong}", for example
/// "hash tree entry /src/pipe: is a FIFO, not a regular file (it was not opened)".
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {kind}", path.display())]
pub struct Error {
    op: &'static str,
    path: PathBuf,
    kind: ErrorKind,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A system call failed.
    #[error("{0}")]
    Io(#[source] io::Error),
    /// A FIFO, socket or device where a regular file was expected; it was never opened.
    #[error("is a {file_type}, not a regular file (it was not opened)")]
    SpecialFile {
        /// "FIFO", "socket", "character device", "block device", "directory", ...
        file_type: &'static str,
    },
    /// A directory was expected.
    #[error("is not a directory")]
    NotADirectory,
    /// The file's size, mtime or ctime differed before and after reading it, on every attempt.
    #[error("changed while it was being hashed (size, mtime or ctime differ before and after); retry once writers are done")]
    ChangedWhileHashing,
    /// Following a symlink led back to a directory that is being walked.
    #[error("symlink loop: it resolves to a directory that contains it")]
    SymlinkLoop,
    /// A `RECORD` line could not be parsed.
    #[error("bad RECORD line {line}: {reason}")]
    BadRecordLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// No (or more than one) `*.dist-info` directory matches the distribution.
    #[error("{reason}")]
    Distribution {
        /// What is wrong.
        reason: String,
    },
    /// Running the Python interpreter or parsing its answer failed.
    #[error("python probe failed: {reason}")]
    PythonProbe {
        /// What failed.
        reason: String,
    },
    /// Running a tool for its version, or reading its output, failed.
    #[error("tool probe failed: {reason}")]
    ToolProbe {
        /// What failed.
        reason: String,
    },
}

impl Error {
    pub(crate) fn new(op: &'static str, path: impl Into<PathBuf>, kind: ErrorKind) -> Self {
        Error {
            op,
            path: path.into(),
            kind,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, err: io::Error) -> Self {
        Error::new(op, path, ErrorKind::Io(err))
    }

    /// The operation that failed ("hash file", "read directory", ...).
    pub fn operation(&self) -> &str {
        self.op
    }

    /// The path the operation concerned.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The underlying I/O error, if a system call failed.
    pub fn io_error(&self) -> Option<&io::Error> {
        match &self.kind {
            ErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e.kind {
            ErrorKind::Io(inner) => inner.kind(),
            ErrorKind::SpecialFile { .. } | ErrorKind::NotADirectory => io::ErrorKind::InvalidInput,
            ErrorKind::BadRecordLine { .. } => io::ErrorKind::InvalidData,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}
