//! Hashing one regular file by content, with detection of changes made while it is read.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::digest::Digest;
use crate::error::{Error, ErrorKind};

/// Files at least this large are hashed with blake3's multithreaded `update_rayon`.
const RAYON_THRESHOLD: usize = 256 * 1024;
/// Read buffer for large files: large enough that `update_rayon` splits it across threads.
const LARGE_BUFFER: usize = 8 * 1024 * 1024;
/// How many times a file that changes while it is read is re-hashed before giving up.
const ATTEMPTS: usize = 3;

/// The stat tuple that identifies one version of a file in the caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct StatTuple {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl StatTuple {
    pub(crate) fn of(m: &Metadata) -> Self {
        StatTuple {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(m.mtime_nsec()),
            ctime_ns: m
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(m.ctime_nsec()),
        }
    }
}

/// Names a non-regular file type for messages.
pub(crate) fn type_name(ft: std::fs::FileType) -> &'static str {
    if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_file() {
        "regular file"
    } else {
        "special file"
    }
}

/// Nanoseconds since the Unix epoch by the system clock.
pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Hashes the content of the regular file at `path` (symlinks followed).
///
/// The path is `stat`ed first and anything but a regular file (FIFO, socket, device, directory) is
/// reported without being opened. The file is then opened with `O_NONBLOCK` (so that a FIFO swapped
/// in after the `stat` cannot block us) and checked again with `fstat`. It is read to the end and
/// `fstat`ed again: if size, mtime or ctime moved, or the byte count differs from the size, it is
/// re-hashed, and after three such attempts [`ErrorKind::ChangedWhileHashing`] is returned.
/// Files of 256 KiB and more are hashed on all cores with blake3's `update_rayon`. Files are read
/// with `read(2)`, never memory-mapped: a file truncated while mapped would kill the process with
/// `SIGBUS`.
pub fn hash_file(path: &Path) -> Result<Digest, Error> {
    hash_checked(path, Follow::Yes, TypeChecked::No, &mut |_| {}).map(|(d, _, _)| d)
}

/// Whether the final path component may be a symlink.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Follow {
    Yes,
    No,
}

/// Whether the caller already saw, by `stat`, that the path is a regular file.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum TypeChecked {
    Yes,
    No,
}

/// Reports anything but a regular file at `path` without opening it.
fn check_regular(path: &Path, follow: Follow) -> Result<(), Error> {
    let pre = match follow {
        Follow::Yes => std::fs::metadata(path),
        Follow::No => std::fs::symlink_metadata(path),
    }
    .map_err(|e| Error::io("hash file", path, e))?;
    if pre.file_type().is_file() {
        Ok(())
    } else {
        Err(Error::new(
            "hash file",
            path,
            ErrorKind::SpecialFile {
                file_type: type_name(pre.file_type()),
            },
        ))
    }
}

/// A digest, the stat tuple it was computed under, and when reading began (ns since the epoch).
pub(crate) type Hashed = (Digest, StatTuple, i64);

/// Hashes a regular file and returns its digest, the stat tuple it was hashed under, and the
/// system time taken just before reading began (for the racy-timestamp rule).
///
/// `between_reads` is called after each chunk: tests use it to change the file mid-hash.
pub(crate) fn hash_checked(
    path: &Path,
    follow: Follow,
    type_checked: TypeChecked,
    between_reads: &mut dyn FnMut(&Path),
) -> Result<Hashed, Error> {
    let mut file = open_regular(path, follow, type_checked)?;
    hash_opened(&mut file, path, between_reads)
}

/// Opens a regular file for hashing, never blocking on a FIFO: anything but a regular file is
/// reported by `stat` before opening (unless the caller already checked), and the open uses
/// `O_NONBLOCK` so that a FIFO swapped in after the check cannot block.
///
/// Paths are resolved by the calling thread; [`hash_opened`] may then run on any thread. This
/// matters because a thread can have its own view of the filesystem (a private mount namespace
/// or working directory after `unshare`), which rayon's worker threads do not share.
pub(crate) fn open_regular(
    path: &Path,
    follow: Follow,
    type_checked: TypeChecked,
) -> Result<File, Error> {
    if type_checked == TypeChecked::No {
        check_regular(path, follow)?;
    }
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if follow == Follow::No {
        flags |= libc::O_NOFOLLOW;
    }
    OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| Error::io("hash file", path, e))
}

/// Hashes an open file from offset 0 with the before/after `fstat` check and retries.
pub(crate) fn hash_opened(
    file: &mut File,
    path: &Path,
    between_reads: &mut dyn FnMut(&Path),
) -> Result<Hashed, Error> {
    const OP: &str = "hash file";
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            use std::io::Seek;
            file.seek(io::SeekFrom::Start(0))
                .map_err(|e| Error::io(OP, path, e))?;
        }
        let before = file.metadata().map_err(|e| Error::io(OP, path, e))?;
        if !before.file_type().is_file() {
            return Err(Error::new(
                OP,
                path,
                ErrorKind::SpecialFile {
                    file_type: type_name(before.file_type()),
                },
            ));
        }
        let started = now_ns();
        let (digest, read) = hash_open(file, before.size(), path, between_reads)
            .map_err(|e| Error::io(OP, path, e))?;
        let after = file.metadata().map_err(|e| Error::io(OP, path, e))?;
        let tuple = StatTuple::of(&before);
        if tuple == StatTuple::of(&after) && read == before.size() {
            return Ok((digest, tuple, started));
        }
    }
    Err(Error::new(OP, path, ErrorKind::ChangedWhileHashing))
}

/// Reads `file` from offset 0 to its end and returns the digest and the byte count.
fn hash_open(
    file: &mut File,
    size: u64,
    path: &Path,
    between_reads: &mut dyn FnMut(&Path),
) -> io::Result<(Digest, u64)> {
    let mut hasher = blake3::Hasher::new();
    // Read through a per-thread buffer, allocated once: zeroing a fresh 8 MiB buffer for every
    // file costs more than hashing a small one. One byte more than the size lets a single read
    // see end of file.
    let want = usize::try_from(size)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    let cap = want.clamp(4096, LARGE_BUFFER);
    // Take the buffer out rather than borrowing it: while `update_rayon` waits, rayon may run
    // another file's hash job on this thread, which then simply allocates its own.
    let mut buf = BUFFER.take();
    if buf.len() < cap {
        buf.resize(cap, 0);
    }
    let result = read_loop(file, &mut buf[..cap], &mut hasher, path, between_reads);
    BUFFER.set(buf);
    result.map(|total| (Digest::from(hasher.finalize()), total))
}

thread_local! {
    static BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

fn read_loop(
    file: &mut File,
    buf: &mut [u8],
    hasher: &mut blake3::Hasher,
    path: &Path,
    between_reads: &mut dyn FnMut(&Path),
) -> io::Result<u64> {
    let mut total = 0u64;
    loop {
        // Fill the buffer as far as possible so that `update_rayon` gets big slices.
        let mut filled = 0;
        while filled < buf.len() {
            match file.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if filled == 0 {
            break;
        }
        if filled >= RAYON_THRESHOLD {
            hasher.update_rayon(&buf[..filled]);
        } else {
            hasher.update(&buf[..filled]);
        }
        total += filled as u64;
        between_reads(path);
        if filled < buf.len() {
            break;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn change_during_hash_is_reported_after_retries() {
        let dir = tempfile::tempdir().expect("create temp dir");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 1000]).expect("write file");
        let mut n = 0u8;
        let result = hash_checked(&path, Follow::Yes, TypeChecked::No, &mut |p| {
            n += 1;
            let mut f = OpenOptions::new()
                .append(true)
                .open(p)
                .expect("open for append");
            f.write_all(&[n]).expect("append a byte");
        });
        match result {
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::ChangedWhileHashing),
                "a file growing on every read must be reported as changing, got {e}"
            ),
            Ok(_) => panic!("a file growing on every read must not hash successfully"),
        }
        // Control: the same file, left alone, hashes fine.
        hash_checked(&path, Follow::Yes, TypeChecked::No, &mut |_| {})
            .expect("a quiet file hashes");
    }

    #[test]
    fn one_change_is_absorbed_by_a_rehash() {
        let dir = tempfile::tempdir().expect("create temp dir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"old").expect("write file");
        let mut first = true;
        let (d, _, _) = hash_checked(&path, Follow::Yes, TypeChecked::No, &mut |p| {
            if std::mem::take(&mut first) {
                std::fs::write(p, b"new content").expect("rewrite file");
            }
        })
        .expect("a single change is retried");
        assert_eq!(
            d,
            Digest::of_bytes(b"new content"),
            "the retry hashes the new content"
        );
    }
}
