//! The error type: every error names the operation and the path.

use std::io;
use std::path::{Path, PathBuf};

/// A failed mount, unmount or check, with the operation and the path it concerned.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}: {source}", path.display())]
pub struct Error {
    op: &'static str,
    path: PathBuf,
    #[source]
    source: io::Error,
}

impl Error {
    pub(crate) fn new(op: &'static str, path: &Path, source: io::Error) -> Self {
        Error {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// The operation that failed ("mount", "unmount", "read", ...).
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// The path it concerned.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The underlying I/O error.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.source.kind(), e.to_string())
    }
}
