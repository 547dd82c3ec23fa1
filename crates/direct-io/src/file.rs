//! Opening a file for O_DIRECT reads and reading any byte range of it with exact end-of-file
//! semantics.

use crate::cache::{page_cache_residency_of, CachePolicy, Residency};
use crate::{AlignedBuf, Error};
use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest bounce buffer `read_at` allocates; larger reads take several system calls.
const BOUNCE_MAX: usize = 8 << 20;

/// Where the alignment in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AlignmentSource {
    /// `statx` with `STATX_DIOALIGN` (Linux 6.1+; ext4 and xfs report it).
    Statx,
    /// The backing block device's logical block size (the value `BLKSSZGET` returns, read from
    /// `/sys/dev/block/MAJ:MIN/queue/logical_block_size`), raised to at least 4096.
    BlockDevice,
    /// Nothing reported it (btrfs, tmpfs, FUSE): 4096.
    Default,
}

/// The alignment O_DIRECT needs for one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alignment {
    /// Required alignment of buffer addresses.
    pub memory: usize,
    /// Required alignment of file offsets and lengths.
    pub offset: usize,
    /// Where these numbers came from.
    pub source: AlignmentSource,
}

impl Alignment {
    /// The alignment a buffer must have for both address and length: the larger of the two.
    pub fn buffer(&self) -> usize {
        self.memory.max(self.offset)
    }

    /// `x` rounded down to the offset alignment.
    pub fn down(&self, x: u64) -> u64 {
        x - x % self.offset as u64
    }

    /// `x` rounded up to the offset alignment.
    pub fn up(&self, x: u64) -> u64 {
        self.down(x + self.offset as u64 - 1)
    }
}

/// Why a file is read through the page cache instead of with O_DIRECT.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BufferedReason {
    /// `open` with O_DIRECT failed with EINVAL: the filesystem refuses it.
    DirectRefused,
    /// The caller asked for buffered reads ([`CachePolicy::Buffered`]).
    Requested,
    /// The residency probe found the file cached ([`CachePolicy::Probe`]).
    Cached(Residency),
}

/// How reads reach the file.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ReadMode {
    /// O_DIRECT: aligned reads that bypass the page cache.
    Direct,
    /// Through the page cache, and why.
    Buffered(BufferedReason),
}

impl ReadMode {
    /// Whether O_DIRECT is in use.
    pub fn is_direct(&self) -> bool {
        matches!(self, ReadMode::Direct)
    }
}

/// A file opened for reading, with O_DIRECT where the filesystem allows it.
///
/// The size is recorded at open: it is this handle's end of file. Bytes appended later are not
/// read; a file shortened later yields short reads and [`Error::EndOfFile`].
#[derive(Debug)]
pub struct DirectFile {
    fd: OwnedFd,
    path: PathBuf,
    size: u64,
    mode: ReadMode,
    align: Alignment,
    reads: AtomicU64,
}

impl DirectFile {
    /// Opens `path` with O_DIRECT ([`CachePolicy::Direct`]), falling back to buffered reads when
    /// the filesystem refuses O_DIRECT.
    pub fn open(path: impl AsRef<Path>) -> Result<DirectFile, Error> {
        DirectFile::open_with(path, CachePolicy::Direct)
    }

    /// Opens `path` for reading as `policy` says. The mode in use is [`DirectFile::mode`].
    pub fn open_with(path: impl AsRef<Path>, policy: CachePolicy) -> Result<DirectFile, Error> {
        let path = path.as_ref();
        let base = OFlags::RDONLY | OFlags::CLOEXEC;
        let open = |flags| {
            rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::empty())
                .map_err(std::io::Error::from)
        };
        let (fd, mode) = match policy {
            CachePolicy::Buffered => (
                open(base).map_err(|e| Error::io("open", path, e))?,
                ReadMode::Buffered(BufferedReason::Requested),
            ),
            CachePolicy::Direct | CachePolicy::Probe { .. } => match open(base | OFlags::DIRECT) {
                Ok(fd) => (fd, ReadMode::Direct),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                    open(base).map_err(|e| Error::io("open", path, e))?,
                    ReadMode::Buffered(BufferedReason::DirectRefused),
                ),
                Err(e) => return Err(Error::io("open O_DIRECT", path, e)),
            },
        };
        let stx = rustix::fs::statx(
            &fd,
            "",
            AtFlags::EMPTY_PATH,
            StatxFlags::BASIC_STATS | StatxFlags::DIOALIGN,
        )
        .map_err(|e| Error::io("statx", path, e.into()))?;
        let size = stx.stx_size;
        let align = alignment_from(&stx);
        let mut file = DirectFile {
            fd,
            path: path.to_path_buf(),
            size,
            mode,
            align,
            reads: AtomicU64::new(0),
        };
        if let (CachePolicy::Probe { buffered_at }, ReadMode::Direct) = (policy, &file.mode) {
            let residency = page_cache_residency_of(&file.fd, size, path)?;
            if size > 0 && residency.fraction() >= buffered_at {
                // Reopen without O_DIRECT: clearing it with fcntl would work too, but a fresh
                // descriptor keeps the open flags plain for every engine.
                file.fd = open(base).map_err(|e| Error::io("open", path, e))?;
                file.mode = ReadMode::Buffered(BufferedReason::Cached(residency));
            }
        }
        Ok(file)
    }

    /// The path this file was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The size recorded at open: this handle's end of file.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether reads use O_DIRECT, or the page cache and why.
    pub fn mode(&self) -> &ReadMode {
        &self.mode
    }

    /// The alignment reads use (also in buffered mode, where it only shapes request sizes).
    pub fn alignment(&self) -> Alignment {
        self.align
    }

    /// How many read system calls this handle has issued (or submitted to an engine).
    pub fn read_calls(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    pub(crate) fn count_read(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The file's current size, from `fstat` (the recorded size is [`DirectFile::size`]).
    pub fn current_size(&self) -> Result<u64, Error> {
        rustix::fs::fstat(&self.fd)
            .map(|s| s.st_size as u64)
            .map_err(|e| Error::io("fstat", &self.path, e.into()))
    }

    /// Reads bytes at `offset` into `buf`, for any offset and length: reads the aligned span
    /// around them and copies out what the file holds. Returns the number of bytes read, fewer
    /// than `buf.len()` only at end of file, 0 at or past it. Every system call either makes
    /// progress or ends the read, so it never loops.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize, Error> {
        if offset >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.size - offset);
        let end = offset + want;
        if !self.mode.is_direct() {
            return self.read_buffered(offset, &mut buf[..want as usize]);
        }
        let span = self.align.up(end) - self.align.down(offset);
        let cap = (span.min(BOUNCE_MAX as u64)) as usize;
        let mut bounce =
            AlignedBuf::new(cap, self.align.buffer()).ok_or_else(|| Error::Config {
                path: self.path.clone(),
                reason: format!("alignment {} is not a power of two", self.align.buffer()),
            })?;
        let mut pos = offset;
        while pos < end {
            let at = self.align.down(pos);
            let len = (self.align.up(end) - at).min(bounce.len() as u64) as usize;
            let got = self.pread(&mut bounce.as_mut_slice()[..len], at)?;
            let reached = at + got as u64;
            // A read that ends at or before `pos` made no progress: the aligned retry re-read the
            // same tail, so the file ends at `pos` (seed 003). That is end of file, not a failure.
            if reached <= pos {
                break;
            }
            let stop = reached.min(end);
            let from = (pos - at) as usize;
            let to = (stop - at) as usize;
            let dst = (pos - offset) as usize;
            buf[dst..dst + (to - from)].copy_from_slice(&bounce.as_slice()[from..to]);
            pos = stop;
        }
        Ok((pos - offset) as usize)
    }

    /// Reads exactly `buf.len()` bytes at `offset`, or returns [`Error::EndOfFile`] naming the
    /// path, the offset, the bytes wanted and the bytes available.
    pub fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let got = self.read_at(offset, buf)?;
        if got < buf.len() {
            return Err(Error::EndOfFile {
                path: self.path.clone(),
                offset,
                wanted: buf.len() as u64,
                available: got as u64,
            });
        }
        Ok(())
    }

    fn read_buffered(&self, offset: u64, buf: &mut [u8]) -> Result<usize, Error> {
        let mut done = 0;
        while done < buf.len() {
            let got = self.pread(&mut buf[done..], offset + done as u64)?;
            if got == 0 {
                break;
            }
            done += got;
        }
        Ok(done)
    }

    fn pread(&self, buf: &mut [u8], at: u64) -> Result<usize, Error> {
        loop {
            self.count_read();
            match rustix::io::pread(self.fd.as_fd(), &mut *buf, at) {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    let op = if self.mode.is_direct() {
                        "pread O_DIRECT"
                    } else {
                        "pread"
                    };
                    return Err(Error::io(op, &self.path, e.into()));
                }
            }
        }
    }
}

/// The alignment for a file: `STATX_DIOALIGN` when reported, else the block device's logical
/// block size raised to 4096, else 4096.
fn alignment_from(stx: &rustix::fs::Statx) -> Alignment {
    let reported = StatxFlags::from_bits_retain(stx.stx_mask).contains(StatxFlags::DIOALIGN);
    if reported && stx.stx_dio_offset_align > 0 && stx.stx_dio_mem_align > 0 {
        return Alignment {
            memory: stx.stx_dio_mem_align as usize,
            offset: stx.stx_dio_offset_align as usize,
            source: AlignmentSource::Statx,
        };
    }
    match logical_block_size(stx.stx_dev_major, stx.stx_dev_minor) {
        Some(lbs) if lbs.is_power_of_two() => {
            let a = lbs.max(4096);
            Alignment {
                memory: a,
                offset: a,
                source: AlignmentSource::BlockDevice,
            }
        }
        _ => Alignment {
            memory: 4096,
            offset: 4096,
            source: AlignmentSource::Default,
        },
    }
}

/// The logical block size of the block device `major:minor` (a partition reads its disk's).
fn logical_block_size(major: u32, minor: u32) -> Option<usize> {
    let dev = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    for queue in [dev.join("queue"), dev.join("../queue")] {
        if let Ok(s) = std::fs::read_to_string(queue.join("logical_block_size")) {
            return s.trim().parse().ok();
        }
    }
    None
}
