//! A file's stat stamp, and when a stamp may be trusted later to prove the same content without
//! hashing it again.
//!
//! A stamp taken when a file was hashed proves later, by being unchanged, that the content is
//! unchanged, unless a write after the hash left the file with the very same stamp: one within
//! the same timestamp tick, with the same size (git's "racy" problem). The stamp is *settled*
//! when no such write is possible any more, and only a settled stamp is recorded.
//!
//! - On a local filesystem that keeps nanosecond timestamps (ext4, XFS, btrfs, tmpfs, ZFS, f2fs,
//!   overlayfs) every timestamp comes from this kernel's coarse realtime clock (or a finer
//!   reading of it). A write after a reading `R` of that clock gets a ctime at or after `R`; a
//!   file whose mtime and ctime are before `R`, read after `R`, is settled at once. A compile
//!   reads its files after its start on that clock, and a file changed since fails the compile
//!   (`inputs.rs`), so the stamps of what it read are settled when it is recorded.
//! - A stamp whose nanoseconds are zero may come from a filesystem with whole-second timestamps
//!   (ext4 with 128-byte inodes): it is settled once a whole second lies between it and `R`.
//! - Elsewhere (NFS, Lustre, CIFS, FUSE, FAT, an unknown type) timestamps may come from another
//!   clock, a server's, at any granularity: the stamp is settled once it is two seconds older
//!   than this host's clock, the margin of modest clock skew that the whole cache assumes.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;

use crate::base::fstype::FsType;

/// A point on a realtime clock, as file timestamps carry it (ordered as time is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Instant {
    pub(crate) secs: i64,
    pub(crate) nanos: i64,
}

impl Instant {
    /// The clock `id`'s reading now.
    pub(crate) fn now(id: rustix::time::ClockId) -> Instant {
        let ts = rustix::time::clock_gettime(id);
        Instant {
            secs: ts.tv_sec,
            nanos: ts.tv_nsec,
        }
    }

    fn as_nanos(self) -> i64 {
        self.secs * NS_PER_S + self.nanos
    }
}

/// Now, on the kernel's coarse realtime clock, the one file timestamps are taken from: a file
/// changed after this call has a ctime at or after the value returned (it may share the tick of
/// a change made just before).
pub(crate) fn coarse_now() -> Instant {
    Instant::now(rustix::time::ClockId::RealtimeCoarse)
}

/// Now, on the fine realtime clock: every file written before this call has a ctime at or before
/// the value returned (with multigrain timestamps, Linux 6.13+, a ctime may be finer than, and
/// past, the coarse clock's reading).
pub(crate) fn fine_now() -> Instant {
    Instant::now(rustix::time::ClockId::Realtime)
}

/// A reading of the coarse clock past `after` (a [`fine_now`] reading): a file changed after the
/// return has a ctime at or after the value, one changed before `after` an earlier ctime. Waits
/// for the clock's next tick (1 to 10 ms by the kernel's HZ) when it has not moved past yet.
pub(crate) fn coarse_past(after: Instant) -> Instant {
    loop {
        let tick = coarse_now();
        if tick > after {
            return tick;
        }
        // Waiting for the clock to move, not for another thread or process.
        std::thread::sleep(std::time::Duration::from_micros(250));
    }
}

/// A file's identity for revalidation: device, inode, size, mtime and ctime in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatStamp {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime_ns: i64,
    pub(crate) ctime_ns: i64,
}

const NS_PER_S: i64 = 1_000_000_000;

/// Where timestamps may come from another clock: how far in the past a stamp must be, on this
/// host's clock, to be trusted.
const FOREIGN_CLOCK_MARGIN_NS: i64 = 2 * NS_PER_S;

/// How a hit looks at what it revalidates.
///
/// A plain `stat` may be answered by an NFS client from its attribute cache, for up to
/// `acregmax` (60 s by default), while the compiler's `open` revalidates with the server
/// (close-to-open): a header edited on another host would pass a plain `stat` unchanged. Under
/// the shared protocol a hit asks the server, as the compiler would (`statx` with
/// `AT_STATX_FORCE_SYNC`; a directory's fresh attributes also make the client look up its names
/// again rather than trust cached misses). On a local filesystem both are one `stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// A plain `stat`: local filesystems.
    Cached,
    /// The server's attributes: the shared protocol.
    Fresh,
}

impl Look {
    /// The stamp of `path` now, looked at this way.
    pub(crate) fn stamp(self, path: &Path) -> Option<StatStamp> {
        match self {
            Look::Cached => StatStamp::of(path),
            Look::Fresh => StatStamp::of_fresh(rustix::fs::CWD, path),
        }
    }

    /// The stamp of `name` under the open directory `dir` now (following a final symlink, as
    /// [`Look::stamp`] does), looked at this way.
    pub(crate) fn stamp_at(self, dir: &impl rustix::fd::AsFd, name: &OsStr) -> Option<StatStamp> {
        match self {
            Look::Cached => StatStamp::of_under(dir, name),
            Look::Fresh => StatStamp::of_fresh(dir, name),
        }
    }
}

impl StatStamp {
    /// Stats `path` (following symlinks, as the compiler did).
    pub(crate) fn of(path: &Path) -> Option<StatStamp> {
        StatStamp::of_under(rustix::fs::CWD, path)
    }

    /// [`StatStamp::of`] of `path` under `dir`.
    fn of_under(dir: impl rustix::fd::AsFd, path: impl rustix::path::Arg) -> Option<StatStamp> {
        let st = rustix::fs::statat(dir, path, rustix::fs::AtFlags::empty()).ok()?;
        Some(StatStamp::from_stat(&st))
    }

    /// Stats the entry `name` of the directory `dir` (not following a symlink).
    pub(crate) fn at(dir: &impl rustix::fd::AsFd, name: &str) -> Option<StatStamp> {
        let st = rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok()?;
        Some(StatStamp::from_stat(&st))
    }

    /// The stamp of an open file.
    pub(crate) fn of_fd(fd: &impl rustix::fd::AsFd) -> Option<StatStamp> {
        Some(StatStamp::from_stat(&rustix::fs::fstat(fd).ok()?))
    }

    fn from_stat(st: &rustix::fs::Stat) -> StatStamp {
        StatStamp {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime_ns: st.st_mtime * NS_PER_S + st.st_mtime_nsec as i64,
            ctime_ns: st.st_ctime * NS_PER_S + st.st_ctime_nsec as i64,
        }
    }

    /// Like [`StatStamp::of`] (of `path` under `dir`), with the attributes the file's server
    /// holds now (`statx` with `AT_STATX_FORCE_SYNC`), not a client's cached ones.
    fn of_fresh(dir: impl rustix::fd::AsFd, path: impl rustix::path::Arg) -> Option<StatStamp> {
        use rustix::fs::{AtFlags, StatxFlags};
        let st = rustix::fs::statx(
            dir,
            path,
            AtFlags::STATX_FORCE_SYNC,
            StatxFlags::BASIC_STATS,
        )
        .ok()?;
        let dev = rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor);
        Some(StatStamp {
            dev,
            ino: st.stx_ino,
            size: st.stx_size,
            mtime_ns: st.stx_mtime.tv_sec * NS_PER_S + i64::from(st.stx_mtime.tv_nsec),
            ctime_ns: st.stx_ctime.tv_sec * NS_PER_S + i64::from(st.stx_ctime.tv_nsec),
        })
    }

    fn newest(&self) -> i64 {
        self.mtime_ns.max(self.ctime_ns)
    }

    fn whole_seconds(&self) -> bool {
        self.mtime_ns.rem_euclid(NS_PER_S) == 0 || self.ctime_ns.rem_euclid(NS_PER_S) == 0
    }
}

/// The filesystems whose timestamps come from this kernel's clock, at nanosecond granularity
/// (or whole seconds, which [`StatStamp::whole_seconds`] catches).
const KERNEL_CLOCK_FILESYSTEMS: &[&str] =
    &["ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlayfs"];

/// Decides whether stamps are settled, for files read after it was made: it holds the coarse
/// clock's reading at its creation, and each device's filesystem type once looked up.
pub(crate) struct Settling {
    started: i64,
    kernel_clock: HashMap<u64, bool>,
}

impl Settling {
    /// Reads the coarse clock: make it *before* the files whose stamps it judges are read.
    pub(crate) fn start() -> Settling {
        Settling::at(coarse_now())
    }

    /// Judges by the coarse clock's reading `started`, made before the files are read.
    pub(crate) fn at(started: Instant) -> Settling {
        Settling {
            started: started.as_nanos(),
            kernel_clock: HashMap::new(),
        }
    }

    /// Stats `path` now and returns its stamp if settled.
    pub(crate) fn stamp(&mut self, path: &Path) -> Option<StatStamp> {
        StatStamp::of(path).filter(|stamp| self.settled(path, stamp))
    }

    /// Whether `stamp`, of `path`, taken after [`Settling::start`], can be trusted later.
    pub(crate) fn settled(&mut self, path: &Path, stamp: &StatStamp) -> bool {
        let kernel_clock = *self.kernel_clock.entry(stamp.dev).or_insert_with(|| {
            // The device's type, read through this path (a statfs per device, not per file).
            KERNEL_CLOCK_FILESYSTEMS.contains(&FsType::of(path).name)
        });
        let wall_now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as i64)
                .unwrap_or(0)
        };
        let clock = if kernel_clock {
            Clock::Kernel {
                started: self.started,
            }
        } else {
            Clock::Foreign { now: wall_now() }
        };
        settled(stamp, clock)
    }
}

/// The clock a stamp's timestamps came from, with the reading that judges it.
#[derive(Debug, Clone, Copy)]
enum Clock {
    /// This kernel's: the coarse clock's reading made before the file was read.
    Kernel { started: i64 },
    /// Another's, or unknown: this host's clock now.
    Foreign { now: i64 },
}

fn settled(stamp: &StatStamp, clock: Clock) -> bool {
    let newest = stamp.newest();
    match clock {
        Clock::Foreign { now } => newest < now - FOREIGN_CLOCK_MARGIN_NS,
        Clock::Kernel { started } if stamp.whole_seconds() => {
            newest < started - started.rem_euclid(NS_PER_S)
        }
        Clock::Kernel { started } => newest < started,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_700_000_000 * NS_PER_S;

    fn stamp(mtime: i64, ctime: i64) -> StatStamp {
        StatStamp {
            dev: 1,
            ino: 2,
            size: 3,
            mtime_ns: mtime,
            ctime_ns: ctime,
        }
    }

    #[test]
    fn on_the_kernel_clock_a_change_before_the_reading_is_settled_and_one_on_its_tick_is_not() {
        let started = T + 500_000_123;
        let clock = Clock::Kernel { started };
        assert!(settled(&stamp(started - 1, started - 1), clock));
        assert!(
            !settled(&stamp(started - 1, started), clock),
            "ctime on the reading's tick"
        );
        assert!(
            !settled(&stamp(started, started - 1), clock),
            "mtime on the reading's tick"
        );
        assert!(
            !settled(&stamp(started + 7, started + 7), clock),
            "after the reading"
        );
    }

    #[test]
    fn whole_second_stamps_need_a_second_boundary_before_the_reading() {
        let clock = Clock::Kernel {
            started: T + 500_000_000,
        };
        assert!(!settled(&stamp(T, T), clock), "the reading's own second");
        assert!(settled(&stamp(T - NS_PER_S, T - NS_PER_S), clock));
        assert!(
            !settled(&stamp(T, T - NS_PER_S + 5), clock),
            "one whole-second timestamp makes the stamp judged by seconds"
        );
    }

    #[test]
    fn stamps_from_another_clock_need_two_seconds() {
        let clock = Clock::Foreign { now: T };
        assert!(!settled(&stamp(T - NS_PER_S, T - NS_PER_S), clock));
        assert!(!settled(&stamp(T - 3 * NS_PER_S, T - NS_PER_S), clock));
        assert!(settled(&stamp(T - 3 * NS_PER_S, T - 3 * NS_PER_S), clock));
    }

    #[test]
    fn a_real_file_written_after_the_reading_is_never_settled_by_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("h.cuh");
        std::fs::write(&path, "#define A 1\n").expect("write");
        // The coarse clock past the file's stamps, then a reading: the file predates it. One
        // tick is not always enough: with multigrain timestamps the file's ctime is fine-grained
        // and may lie past the coarse clock's next tick when a VM handles that tick late.
        let written = StatStamp::of(&path).expect("stat").newest();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while coarse_now().as_nanos() <= written {
            assert!(
                std::time::Instant::now() < deadline,
                "the coarse clock stood still"
            );
            // Waiting for the clock to move, not for another thread.
            std::thread::sleep(std::time::Duration::from_micros(250));
        }
        let mut settling = Settling::start();
        let on_kernel_clock = KERNEL_CLOCK_FILESYSTEMS.contains(&FsType::of(dir.path()).name);
        assert_eq!(
            settling.stamp(&path).is_some(),
            on_kernel_clock,
            "a file last changed a tick before the reading is settled on a kernel-clock \
             filesystem ({}), and only there",
            FsType::of(dir.path()).name
        );
        std::fs::write(&path, "#define A 2\n").expect("rewrite");
        assert!(
            settling.stamp(&path).is_none(),
            "a file changed after the reading must never be settled by it"
        );
    }
}
