//! Pinning an entry directory: how every reader, of kernels and of stored entries alike, opens
//! an entry so that eviction leaves it alone and a replacement can never mix two entries.
//!
//! A reader opens the directory once (`O_DIRECTORY | O_NOFOLLOW`), takes a shared `flock` on it
//! (the pin that eviction respects), checks that the path still names that directory, and reads
//! everything relative to the descriptor. Under the shared protocol the last-use stamp, which
//! other hosts see, is refreshed before the path check (`liveness.rs`).

use crate::base::fstype::Protocol;
use rustix::fd::OwnedFd;
use rustix::fs::{FlockOperation, Mode, OFlags};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why an existing entry cannot be used.
#[derive(Debug)]
pub(crate) enum Unusable {
    /// Nothing there (or it vanished, or it was replaced while opening): a plain miss.
    Absent,
    /// Something is there but wrong: it must be moved aside and rebuilt, with this reason.
    Corrupt(String),
}

/// Opens an entry directory without following symlinks and takes a shared `flock` on it (the
/// pin on this host). The caller then checks that the path still names it ([`still_names`]).
pub(crate) fn lock_dir(dir: &Path) -> std::result::Result<OwnedFd, Unusable> {
    use crate::storage::evict::{open_dir_locked, DirLockError};
    use rustix::io::Errno;
    let fd = match open_dir_locked(rustix::fs::CWD, dir, FlockOperation::LockShared) {
        Ok(fd) => fd,
        Err(DirLockError::Open(Errno::NOENT | Errno::STALE)) => return Err(Unusable::Absent),
        Err(DirLockError::Open(Errno::LOOP | Errno::NOTDIR)) => {
            return Err(Unusable::Corrupt(format!(
                "{} is not a directory (a symlink or file was planted)",
                dir.display()
            )))
        }
        Err(DirLockError::Open(e)) => {
            return Err(Unusable::Corrupt(format!("open {}: {e}", dir.display())))
        }
        Err(DirLockError::Busy | DirLockError::Lock(_)) => return Err(Unusable::Absent),
    };
    Ok(fd)
}

/// Whether `dir` still names the directory held open as `fd` (eviction renames entries aside).
pub(crate) fn still_names(fd: &OwnedFd, dir: &Path) -> bool {
    match (rustix::fs::fstat(fd), std::fs::symlink_metadata(dir)) {
        (Ok(held), Ok(now)) => held.st_ino == now.ino() && held.st_dev == now.dev(),
        _ => false,
    }
}

/// A name that stays inside the entry directory (meta.json is read before it is checked).
pub(crate) fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains('/')
}

/// Whether opening an entry refreshes its last-use stamp: a reader's open does, as its root's
/// protocol says; an inspection (`verify`) never does, or it would pin every entry it checked
/// on every host under the shared protocol and leave `gc` nothing to evict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastUse {
    /// A use: refresh the stamp by the protocol's rule.
    Refresh(Protocol),
    /// A look: leave the stamp as it is.
    Keep,
}

impl LastUse {
    /// Whether this open refreshes the stamp as its pin across hosts, before the path check.
    pub(crate) fn pins_across_hosts(self) -> bool {
        matches!(self, LastUse::Refresh(protocol) if protocol.stamp_pins())
    }
}

/// How often an entry's last-use stamp is refreshed at most: a hit writes nothing more often.
pub(crate) const LAST_USE_INTERVAL_SECS: i64 = 3600;

/// A reader's claim on an entry under the shared protocol, the one other hosts see: refreshes
/// its last-use stamp (on `stamp_file`) when due, unless an eviction marked the entry, and looks
/// for the mark once refreshed (`liveness::mark_evicting` says why in that order). `false`: the
/// entry is being evicted, a miss. A refresh looks for the mark first too, so that readers never
/// keep a mark left by a killed eviction fresh; a hit whose stamp is fresh (the common case)
/// writes nothing and looks once.
pub(crate) fn claim_across_hosts(dir: &OwnedFd, stamp_file: &str) -> bool {
    if refresh_due_by(dir, stamp_file, true) {
        if crate::storage::liveness::is_marked_evicting(dir) {
            return false;
        }
        refresh_last_use(dir, stamp_file);
    }
    !crate::storage::liveness::is_marked_evicting(dir)
}

/// Refreshes the artifact's access time (the last-use stamp eviction orders by) when it is older
/// than [`LAST_USE_INTERVAL_SECS`], or, under the shared protocol, than the pin refresh.
/// Best effort: a read-only cache still serves hits.
pub(crate) fn touch_last_use(dir: &OwnedFd, artifact: &str, protocol: Protocol) {
    if refresh_due(dir, artifact, protocol) {
        refresh_last_use(dir, artifact);
    }
}

/// [`touch_last_use`], judged by `stat`: the artifact's own, taken when this reader opened it
/// (no second `stat`).
pub(crate) fn touch_last_use_by(
    dir: &OwnedFd,
    artifact: &str,
    protocol: Protocol,
    stat: &rustix::fs::Stat,
) {
    if due(stat, protocol.stamp_pins()) {
        refresh_last_use(dir, artifact);
    }
}

/// Whether `artifact`'s last-use stamp is old enough to refresh, by the protocol's rule.
fn refresh_due(dir: &OwnedFd, artifact: &str, protocol: Protocol) -> bool {
    refresh_due_by(dir, artifact, protocol.stamp_pins())
}

/// Whether the stamp is old enough to refresh, where `pins` says whether it is a pin across
/// hosts (refreshed every `PIN_REFRESH`) or only orders eviction (hourly).
fn refresh_due_by(dir: &OwnedFd, artifact: &str, pins: bool) -> bool {
    rustix::fs::statat(dir, artifact, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| due(&stat, pins))
}

/// Whether the last-use stamp `stat` holds is old enough to refresh ([`refresh_due_by`]).
fn due(stat: &rustix::fs::Stat, pins: bool) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let age = now - stat.st_atime;
    // Under the shared protocol the stamp is also the pin other hosts can see (`liveness.rs`):
    // it is refreshed every minute there.
    age >= crate::storage::liveness::pin_refresh_secs() && (age >= LAST_USE_INTERVAL_SECS || pins)
}

/// Sets `artifact`'s last-use stamp to now.
fn refresh_last_use(dir: &OwnedFd, artifact: &str) {
    let stamps = |mtime_nsec| rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: mtime_nsec,
        },
    };
    let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
    // The access time alone ("now": on NFS the server's clock, which every host that ages the
    // stamp reads the same). Only the file's owner may set one time and leave the other; a
    // team member with write permission may set both to now: a kernel's artifact is then
    // touched whole (its mtime says nothing else), so another member's hit refreshes the
    // stamp too. Never `meta.json`, whose mtime is an eviction's mark (`liveness.rs`): a
    // stored entry of another member keeps the stamp its owner's hits set.
    match rustix::fs::utimensat(dir, artifact, &stamps(rustix::fs::UTIME_OMIT), flags) {
        Err(rustix::io::Errno::PERM) if artifact != crate::storage::liveness::MARK_FILE => {
            let _ = rustix::fs::utimensat(dir, artifact, &stamps(rustix::fs::UTIME_NOW), flags);
        }
        _ => {}
    }
}

/// Opens the file `name` of `dir` for reading, never following a symlink.
fn open_file_at(dir: &OwnedFd, name: &str) -> std::io::Result<std::fs::File> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(std::fs::File::from(rustix::fs::openat(
        dir,
        name,
        flags,
        Mode::empty(),
    )?))
}

/// Reads a whole file relative to a directory descriptor, never following a symlink.
pub(crate) fn read_at(dir: &OwnedFd, name: &str) -> std::io::Result<Vec<u8>> {
    read_with_stat_at(dir, name).map(|(bytes, _)| bytes)
}

/// Reads a whole file relative to a directory descriptor, never following a symlink, with its
/// `fstat` taken before the read (an entry's `meta.json`: the stat also says when its last-use
/// stamp is due). An open, an `fstat`, one `read` for a file that stays the size it was, and a
/// close: asked for one byte more than the file holds, a regular file's read returns what it
/// holds, which is its end. A file that grew since, or a short read (a signal, FUSE), reads on
/// to end of file.
pub(crate) fn read_with_stat_at(
    dir: &OwnedFd,
    name: &str,
) -> std::io::Result<(Vec<u8>, rustix::fs::Stat)> {
    let file = open_file_at(dir, name)?;
    let stat = rustix::fs::fstat(&file)?;
    let size = usize::try_from(stat.st_size).unwrap_or(0);
    // The size is the file's own (not a record's claim), and the whole file is read anyway; a
    // size no allocation can hold (a planted sparse file) is an error, not an abort.
    let reserve = |bytes: &mut Vec<u8>, more: usize| {
        bytes.try_reserve_exact(more).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("{name} holds more than can be read into memory"),
            )
        })
    };
    let mut bytes = Vec::new();
    reserve(&mut bytes, size.saturating_add(1))?;
    loop {
        if bytes.len() == bytes.capacity() {
            let more = bytes.len().max(4096);
            reserve(&mut bytes, more)?;
        }
        let asked = bytes.capacity() - bytes.len();
        let n = match rustix::io::read(&file, rustix::buffer::spare_capacity(&mut bytes)) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 || (n < asked && bytes.len() == size) {
            return Ok((bytes, stat));
        }
    }
}

/// The piece a streamed file is read in: a file of any size costs this much memory.
pub(crate) const STREAM_PIECE: usize = 1 << 20;

/// Streams the file `name` of `dir` through `sink` a piece at a time, never holding it whole:
/// its size and blake3 (what `fingerprint::Digest::of_bytes` of its bytes would be).
pub(crate) fn stream_at(
    dir: &OwnedFd,
    name: &str,
    mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<(u64, fingerprint::Digest)> {
    let mut file = open_file_at(dir, name)?;
    let mut hasher = blake3::Hasher::new();
    let mut piece = vec![0u8; STREAM_PIECE];
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut piece) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&piece[..n]);
        sink(&piece[..n])?;
        size += n as u64;
    }
    Ok((size, hasher.finalize().into()))
}

/// The most [`read_at_most`] reserves before reading: a recorded size is a claim, not memory.
const PREALLOCATE_AT_MOST: u64 = 1 << 20;

/// Reads the file `name` of `dir` when it holds at most `limit` bytes: the bytes, or as many as
/// `limit + 1` (the caller's size check then refuses them). No `fstat`: a reader that knows the
/// size from `meta.json` spends an open, reads until end of file and a close per file.
pub(crate) fn read_at_most(dir: &OwnedFd, name: &str, limit: u64) -> std::io::Result<Vec<u8>> {
    let file = open_file_at(dir, name)?;
    // `limit` comes from `meta.json`, which may lie: reserve no more than a small read needs,
    // and let the buffer grow with what the file really holds.
    let reserve = usize::try_from(limit.min(PREALLOCATE_AT_MOST)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(reserve.saturating_add(1));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Lists the variant directories under a key directory (names only; nothing is followed).
pub(crate) fn list_variants(key_dir: &Path) -> Vec<String> {
    let Ok(read) = std::fs::read_dir(key_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = read
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.len() == 32 && n.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(path: &Path) -> OwnedFd {
        rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .expect("open the directory")
    }

    #[test]
    fn a_file_is_read_whole_with_the_stat_taken_before_the_read() {
        let tmp = tempfile::tempdir().expect("temp dir");
        for size in [0usize, 1, 4095, 4096, 70_000] {
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            std::fs::write(tmp.path().join("f"), &bytes).expect("write");
            let (read, stat) = read_with_stat_at(&dir(tmp.path()), "f").expect("read");
            assert_eq!(read, bytes, "{size} bytes");
            assert_eq!(stat.st_size as usize, size);
        }
    }

    #[test]
    fn a_file_holding_more_than_its_stat_says_is_read_to_its_end() {
        // `/proc` files stat as empty and hold more: the read goes on past the stat's size.
        let (read, stat) = read_with_stat_at(&dir(Path::new("/proc/self")), "status")
            .expect("read /proc/self/status");
        assert_eq!(stat.st_size, 0, "procfs says nothing of the size");
        let text = String::from_utf8(read).expect("text");
        assert!(
            text.starts_with("Name:") && text.contains("\nPid:") && text.ends_with('\n'),
            "read whole: {text:?}"
        );
    }

    #[test]
    fn a_file_too_large_to_hold_is_an_error_not_an_abort() {
        // tmpfs lets a sparse file claim the largest size there is.
        let tmp = tempfile::tempdir_in("/dev/shm").expect("temp dir on tmpfs");
        let file = std::fs::File::create(tmp.path().join("meta.json")).expect("create");
        file.set_len(i64::MAX as u64)
            .expect("a sparse file of the largest size");
        let err = read_with_stat_at(&dir(tmp.path()), "meta.json").expect_err("refused");
        assert_eq!(err.kind(), std::io::ErrorKind::OutOfMemory);
        assert!(err.to_string().contains("meta.json"), "{err}");
    }

    #[test]
    fn a_symlink_is_never_followed() {
        let tmp = tempfile::tempdir().expect("temp dir");
        std::fs::write(tmp.path().join("target"), b"x").expect("write");
        std::os::unix::fs::symlink("target", tmp.path().join("link")).expect("symlink");
        let err = read_with_stat_at(&dir(tmp.path()), "link").expect_err("a link refused");
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
    }
}
