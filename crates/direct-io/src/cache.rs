//! Page-cache residency: O_DIRECT loses to buffered reads (about 5x here) on a cached file.

use crate::Error;
use std::os::fd::AsFd;
use std::path::Path;

/// How a file is to be read, given that O_DIRECT bypasses (and loses to) the page cache.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum CachePolicy {
    /// Always try O_DIRECT (falls back to buffered only where O_DIRECT is refused).
    Direct,
    /// Always read through the page cache.
    Buffered,
    /// Probe residency with `mincore` on a mapping of the file and read buffered when at least
    /// this fraction (0.0..=1.0) of its pages is already cached.
    Probe {
        /// The resident fraction at or above which buffered reads are chosen.
        buffered_at: f64,
    },
}

impl Default for CachePolicy {
    /// Probe, choosing buffered reads when half the file or more is cached.
    fn default() -> Self {
        CachePolicy::Probe { buffered_at: 0.5 }
    }
}

/// How much of a file is in the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Residency {
    /// Pages resident.
    pub resident_pages: u64,
    /// Pages the file spans.
    pub total_pages: u64,
}

impl Residency {
    /// The resident fraction (1.0 for an empty file).
    pub fn fraction(&self) -> f64 {
        if self.total_pages == 0 {
            1.0
        } else {
            self.resident_pages as f64 / self.total_pages as f64
        }
    }
}

/// Measures how much of `file` (of `size` bytes) is in the page cache: `mmap` it shared and
/// read-only, call `mincore(2)`, unmap. Reads no data, so it changes no residency.
pub fn page_cache_residency_of(
    file: impl AsFd,
    size: u64,
    path: &Path,
) -> Result<Residency, Error> {
    let page = rustix::param::page_size() as u64;
    if size == 0 {
        return Ok(Residency {
            resident_pages: 0,
            total_pages: 0,
        });
    }
    let len = usize::try_from(size).map_err(|_| {
        Error::io(
            "mmap for mincore",
            path,
            std::io::Error::from(std::io::ErrorKind::FileTooLarge),
        )
    })?;
    let total = size.div_ceil(page);
    // SAFETY: a fresh shared read-only mapping of a file we hold open; it is only passed to
    // mincore and unmapped below, never dereferenced, so a concurrent truncation cannot fault.
    let addr = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::SHARED,
            file,
            0,
        )
    }
    .map_err(|e| Error::io("mmap for mincore", path, e.into()))?;
    let mut vec = vec![0u8; total as usize];
    // SAFETY: addr..addr+len is our mapping and vec has one byte per page of it.
    let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: unmapping exactly the mapping created above.
    let unmapped = unsafe { rustix::mm::munmap(addr, len) };
    if rc != 0 {
        return Err(Error::io("mincore", path, err));
    }
    unmapped.map_err(|e| Error::io("munmap", path, e.into()))?;
    let resident = vec.iter().filter(|&&b| b & 1 == 1).count() as u64;
    Ok(Residency {
        resident_pages: resident,
        total_pages: total,
    })
}

/// Measures how much of the file at `path` is in the page cache (see [`page_cache_residency_of`]).
pub fn page_cache_residency(path: &Path) -> Result<Residency, Error> {
    let file = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
    let size = file
        .metadata()
        .map_err(|e| Error::io("fstat", path, e))?
        .len();
    page_cache_residency_of(&file, size, path)
}
