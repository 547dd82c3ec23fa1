//! Sharing a range of a file's extents with another file (`FICLONERANGE`, a reflink): the
//! destination holds the bytes without them being read or written; a later write to either
//! file copies the blocks it touches first.

use crate::{DirectFile, Error};
use std::os::fd::AsFd;
use std::path::Path;

/// What [`DirectFile::clone_range_to`] did.
#[derive(Debug)]
pub enum Cloned {
    /// The range is shared: the destination holds its bytes.
    Shared,
    /// The filesystem cannot share these ranges (no reflinks, as on ext4 and tmpfs; the two
    /// files on different filesystems; ranges not aligned to its blocks): nothing was changed,
    /// copy the bytes instead. The operating system's answer, for a report.
    Refused(std::io::Error),
}

/// `struct file_clone_range` of `<linux/fs.h>`.
#[repr(C)]
struct FileCloneRange {
    src_fd: i64,
    src_offset: u64,
    src_length: u64,
    dest_offset: u64,
}

/// `FICLONERANGE`: `_IOW(0x94, 13, struct file_clone_range)`.
const FICLONERANGE: rustix::ioctl::Opcode =
    rustix::ioctl::opcode::write::<FileCloneRange>(0x94, 13);

impl DirectFile {
    /// Shares `len` bytes of this file at `offset` with `dest` at `dest_offset`
    /// (`FICLONERANGE`). The filesystem checks the ranges: `offset`, `dest_offset` and `len`
    /// must be multiples of its block size, except that a range may end at this file's end.
    /// `dest` must be open for writing; `dest_path` names it in errors.
    ///
    /// [`Cloned::Refused`] when the filesystem cannot share the ranges (`EOPNOTSUPP`,
    /// `EXDEV`, `EINVAL`, `ENOTTY`); any other failure (`EIO`, `ENOSPC`) is an error.
    pub fn clone_range_to(
        &self,
        offset: u64,
        len: u64,
        dest: impl AsFd,
        dest_offset: u64,
        dest_path: &Path,
    ) -> Result<Cloned, Error> {
        let range = FileCloneRange {
            src_fd: i64::from(self.raw_fd()),
            src_offset: offset,
            src_length: len,
            dest_offset,
        };
        // SAFETY: FICLONERANGE is a write ioctl whose argument is a pointer to a
        // `struct file_clone_range`, which `FileCloneRange` lays out field for field (`repr(C)`,
        // four 64-bit fields); `Setter` passes a pointer to `range`, which outlives the call.
        let shared = unsafe {
            rustix::ioctl::ioctl(
                dest,
                rustix::ioctl::Setter::<FICLONERANGE, FileCloneRange>::new(range),
            )
        };
        use rustix::io::Errno;
        match shared {
            Ok(()) => Ok(Cloned::Shared),
            Err(e @ (Errno::OPNOTSUPP | Errno::XDEV | Errno::INVAL | Errno::NOTTY)) => {
                Ok(Cloned::Refused(e.into()))
            }
            Err(e) => Err(Error::Io {
                op: "share a range (FICLONERANGE) into",
                path: dest_path.to_path_buf(),
                source: e.into(),
            }),
        }
    }
}
