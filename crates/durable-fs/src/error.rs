//! The crate's one error type: an operation, the path it acted on, and the OS error.

use std::io;
use std::path::{Path, PathBuf};

/// A failed filesystem operation: what was done, to which path, and what the OS answered.
///
/// The message reads like `fsync directory /x/y: Input/output error (os error 5)`; a two-path
/// operation reads `rename /x/a to /x/b: ...`. `From<Error> for io::Error` keeps [`Error::kind`],
/// so `?` works in functions that return `io::Result`.
#[derive(Debug, thiserror::Error)]
#[error("{op} {}{}: {source}", path.display(), other.as_ref().map(|o| format!(" to {}", o.display())).unwrap_or_default())]
pub struct Error {
    op: &'static str,
    path: PathBuf,
    other: Option<PathBuf>,
    #[source]
    source: io::Error,
}

impl Error {
    pub(crate) fn new(
        op: &'static str,
        path: impl Into<PathBuf>,
        source: impl Into<io::Error>,
    ) -> Self {
        Error {
            op,
            path: path.into(),
            other: None,
            source: source.into(),
        }
    }

    pub(crate) fn two(
        op: &'static str,
        from: impl Into<PathBuf>,
        to: impl Into<PathBuf>,
        source: impl Into<io::Error>,
    ) -> Self {
        Error {
            op,
            path: from.into(),
            other: Some(to.into()),
            source: source.into(),
        }
    }

    /// The operation that failed, for example `"fsync directory"`.
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// The path the operation acted on (the source of a rename).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The second path of a two-path operation (the destination of a rename or link).
    pub fn other_path(&self) -> Option<&Path> {
        self.other.as_deref()
    }

    /// The underlying OS error.
    pub fn io_error(&self) -> &io::Error {
        &self.source
    }

    /// The kind of the underlying OS error.
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }

    /// The raw OS error number, when there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// The same error naming other paths: for a caller that passed a path only it can use (a
    /// `/proc/self/fd/N/...` path to a directory it holds open) and names that directory by
    /// its own path in what it reports.
    pub fn map_paths(self, mut map: impl FnMut(&Path) -> PathBuf) -> Error {
        Error {
            path: map(&self.path),
            other: self.other.as_deref().map(&mut map),
            ..self
        }
    }
}

impl From<Error> for io::Error {
    fn from(err: Error) -> io::Error {
        io::Error::new(err.kind(), err)
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn mapped_paths_replace_both_and_keep_the_rest() {
        let err = Error::two(
            "rename",
            "/proc/self/fd/7/a",
            "/proc/self/fd/8/b",
            io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error()),
        );
        let mapped = err
            .map_paths(|p| Path::new("/root").join(p.strip_prefix("/proc/self/fd").unwrap_or(p)));
        assert_eq!(mapped.path(), Path::new("/root/7/a"));
        assert_eq!(mapped.other_path(), Some(Path::new("/root/8/b")));
        assert_eq!(mapped.op(), "rename");
        assert_eq!(
            mapped.raw_os_error(),
            Some(rustix::io::Errno::NOSPC.raw_os_error())
        );
    }

    #[test]
    fn message_names_operation_and_path_and_keeps_kind() {
        let err = Error::new(
            "fsync directory",
            "/x/y",
            io::Error::from_raw_os_error(rustix::io::Errno::IO.raw_os_error()),
        );
        let text = err.to_string();
        assert!(
            text.starts_with("fsync directory /x/y: Input/output error"),
            "message names op and path: {text}"
        );
        assert_eq!(err.op(), "fsync directory");
        assert_eq!(err.path(), Path::new("/x/y"));
        let kind = err.kind();
        let io: io::Error = err.into();
        assert_eq!(io.kind(), kind, "the conversion keeps the kind");
        let two = Error::two(
            "rename",
            "/a",
            "/b",
            io::Error::from(io::ErrorKind::NotFound),
        );
        assert!(
            two.to_string().starts_with("rename /a to /b: "),
            "two-path message: {two}"
        );
        let io: io::Error = two.into();
        assert_eq!(
            io.kind(),
            io::ErrorKind::NotFound,
            "kind survives the conversion"
        );
    }
}
