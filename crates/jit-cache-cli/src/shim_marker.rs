//! A shim's marker (`.jit-cache-shim`): the one codec of the file that says a directory is a
//! shim and records the real nvcc its `bin/nvcc` runs and the launcher it runs it through.
//! `jit-cache shim` writes it; the real nvcc search reads it back.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The file in a shim's directory that says it is one and what its `bin/nvcc` runs.
pub(crate) const MARKER: &str = ".jit-cache-shim";

/// The marker's first line; a later format gets another.
const MARKER_HEADER: &[u8] = b"jit-cache shim 1";

/// What a marker records.
#[derive(Debug, PartialEq)]
pub(crate) struct Record {
    /// The real nvcc, canonical.
    pub(crate) nvcc: PathBuf,
    /// This binary when the shim was made.
    pub(crate) launcher: PathBuf,
}

impl Record {
    /// The marker's bytes: the header, then one `name path` line per field.
    pub(crate) fn render(&self) -> Vec<u8> {
        let mut text = MARKER_HEADER.to_vec();
        for (name, path) in [("nvcc", &self.nvcc), ("launcher", &self.launcher)] {
            text.push(b'\n');
            text.extend_from_slice(name.as_bytes());
            text.push(b' ');
            text.extend_from_slice(path.as_os_str().as_bytes());
        }
        text.push(b'\n');
        text
    }

    /// The record a marker holds, or `None` for a file of another shape.
    pub(crate) fn parse(text: &[u8]) -> Option<Record> {
        let mut lines = text.split(|&b| b == b'\n');
        if lines.next()? != MARKER_HEADER {
            return None;
        }
        let mut field = |name: &str| -> Option<PathBuf> {
            let line = lines.next()?;
            let value = line.strip_prefix(name.as_bytes())?.strip_prefix(b" ")?;
            (!value.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(value)))
        };
        Some(Record {
            nvcc: field("nvcc")?,
            launcher: field("launcher")?,
        })
    }
}

/// When `nvcc` is a shim's `bin/nvcc` (through any symlinks), the real nvcc its marker records.
/// The real nvcc search asks this of the nvcc it found, so that a shim on `PATH` or as
/// `$CUDA_HOME/bin/nvcc` never runs the launcher over itself.
pub(crate) fn recorded_nvcc(nvcc: &Path) -> Option<PathBuf> {
    let nvcc = std::fs::canonicalize(nvcc).ok()?;
    let bin = nvcc.parent()?;
    if nvcc.file_name()? != "nvcc" || bin.file_name()? != "bin" {
        return None;
    }
    let root = bin.parent()?;
    let text = std::fs::read(root.join(MARKER)).ok()?;
    Record::parse(&text).map(|record| record.nvcc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_reads_back_what_it_records() {
        let record = Record {
            nvcc: PathBuf::from("/opt/cuda/bin/nvcc"),
            launcher: PathBuf::from("/venv/bin/jit-cache"),
        };
        assert_eq!(
            Record::parse(&record.render()),
            Some(record),
            "the marker round-trips"
        );
        assert_eq!(
            Record::parse(b"something else\nnvcc /x\n"),
            None,
            "a file of another shape is no marker"
        );
    }
}
