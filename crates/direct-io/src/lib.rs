//! Aligned O_DIRECT reads with exact end-of-file semantics, io_uring and thread engines, and
//! checkpoint streaming.
//!
//! [`DirectFile`] opens a file with O_DIRECT, using the alignment `statx(STATX_DIOALIGN)`
//! reports (else the block device's logical block size, at least 4096), and reads any byte
//! range with [`DirectFile::read_at`]. An [`Engine`] (io_uring or a pool of `pread` threads,
//! chosen automatically with the reason recorded) streams lists of ranges through a ring of
//! slot buffers into a [`Sink`], such as [`HostSink`] or, with feature `cuda`, `CudaSink`.
//! [`Checkpoint`] validates safetensors headers (one file or a sharded index) and loads the
//! tensors into a sink. [`DirectFile::clone_range_to`] shares a range's extents with another
//! file instead of reading it (`FICLONERANGE`, on xfs and btrfs), and says when it cannot.
//!
//! # Guarantees
//! - End of file is never a failed read: `read_at` returns fewer bytes (0 at or past the end);
//!   `read_exact_at` and streams return [`Error::EndOfFile`] naming the path, the offset, the
//!   bytes wanted and available. An aligned retry that re-reads the same tail ends the read
//!   (seed 003): every system call makes progress or ends it.
//! - The size is recorded at open and is the handle's end of file.
//! - A slot is refilled only after [`Sink::wait`] for it returned, and slots are freed only
//!   after every copy from them was waited for; when a wait fails or a sink panics, the slots
//!   are leaked rather than freed under a device that may still read them.
//! - A safetensors header is validated in full (length bound, JSON, dtype, offsets inside the
//!   data area, no overlaps, no duplicate names, dtype size times shape equal to the byte
//!   length) before any tensor byte is read; a bad one is [`Error::Header`] naming the tensor
//!   and the rule.
//!
//! # Limitations
//! - Linux only. O_DIRECT is refused with EINVAL by some filesystems at open; the file is then
//!   read buffered and [`DirectFile::mode`] says so. O_DIRECT loses to the page cache on a
//!   cached file: use [`CachePolicy::Probe`] (mincore) or choose.
//! - Bytes appended after open are not read. A file shortened during a stream is detected by
//!   the reads; a tensor split over slots may then have had its earlier part copied.
//! - `read_at` copies through a bounce buffer (up to 8 MiB per system call); streams read
//!   straight into their slots.
//!
//! # Example
//! ```
//! use direct_io::{ByteRange, DirectFile, Engine, EngineChoice, EngineConfig, HostSink, RingConfig};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("data");
//! std::fs::write(&path, (0..10_000u32).map(|i| i as u8).collect::<Vec<_>>())?;
//!
//! let file = DirectFile::open(&path)?;
//! let mut buf = vec![0u8; 4096];
//! assert_eq!(file.read_at(8192, &mut buf)?, 1808, "short at the end of the file");
//! assert_eq!(file.read_at(10_000, &mut buf)?, 0, "0 past it");
//! let err = file.read_exact_at(8192, &mut buf).expect_err("the file ends at 10,000");
//! assert!(err.is_end_of_file(), "{err}");
//!
//! let mut engine = Engine::new(EngineChoice::Auto, EngineConfig::default())?;
//! let ranges = [ByteRange { offset: 3, len: 5000 }, ByteRange { offset: 9000, len: 1000 }];
//! let mut sink = HostSink::for_ranges(&ranges);
//! let report = engine.stream(&file, &ranges, RingConfig::default(), &mut sink)?;
//! assert_eq!(report.bytes_delivered, 6000);
//! assert_eq!(sink.buffers()[1][0], (9000u32 % 256) as u8);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod aligned;
mod cache;
mod checkpoint;
mod clone;
#[cfg(feature = "cuda")]
mod cuda;
mod engine;
mod error;
mod file;
mod op;
mod plan;
mod safetensors;
mod stream;
mod threads;
mod tracker;
mod uring;

pub use aligned::AlignedBuf;
pub use cache::{page_cache_residency, page_cache_residency_of, CachePolicy, Residency};
pub use checkpoint::{Checkpoint, LoadReport};
pub use clone::Cloned;
#[cfg(feature = "cuda")]
pub use cuda::{cuda_driver_available, CudaSink};
pub use engine::{Engine, EngineChoice, EngineConfig, EngineKind, EngineReason};
pub use error::{Error, HeaderRule, SinkError};
pub use file::{Alignment, AlignmentSource, BufferedReason, DirectFile, ReadMode};
pub use plan::ByteRange;
pub use safetensors::{
    dtype_size, parse_safetensors_header, read_safetensors_header, SafetensorsHeader, TensorInfo,
    MAX_HEADER_LEN,
};
pub use stream::{HostSink, RegisteredBuffers, RingConfig, Sink, StreamReport};
pub use tracker::CopyTracker;
