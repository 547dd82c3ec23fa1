//! The crash-test harness's hooks into the build and publication path, in one place. Without the
//! `failpoints` feature every hook is a no-op the compiler removes, and the key lock is plain
//! `durable_fs`'s: the production build runs exactly the protocol, nothing else.
//!
//! With the feature (see `failpoints.rs`) a hook can kill or pause the process at a named point,
//! log lock holders, and inject the protocol bugs the harness must catch.

use crate::error::Result;
use crate::storage::layout::Layout;
use fingerprint::Digest;
use std::path::{Path, PathBuf};

/// The key's lock, held from the re-check through publication.
#[cfg(not(feature = "failpoints"))]
pub(crate) type KeyGuard = durable_fs::LockGuard;
/// The key's lock as the harness sees it (logged, breakable on purpose).
#[cfg(feature = "failpoints")]
pub(crate) type KeyGuard = crate::base::failpoints::KeyLock;

/// Waits for the key's lock.
pub(crate) fn lock_key(layout: &Layout, key: &Digest) -> Result<KeyGuard> {
    lock_key_waiting(layout, key, durable_fs::Wait::Forever)
}

/// Waits for the key's lock at most `wait` (then a `TimedOut` error).
pub(crate) fn lock_key_within(
    layout: &Layout,
    key: &Digest,
    wait: std::time::Duration,
) -> Result<KeyGuard> {
    lock_key_waiting(layout, key, durable_fs::Wait::Timeout(wait))
}

fn lock_key_waiting(layout: &Layout, key: &Digest, wait: durable_fs::Wait) -> Result<KeyGuard> {
    // A key's lock is shared with every child forked while it is held, unless the fork rule
    // closes the child's copy.
    #[cfg(not(loom))]
    crate::base::fork::register();
    #[cfg(feature = "failpoints")]
    {
        // Errors and the log name the lock file as everyone else would (`Layout::lock_key`).
        let path = layout.lock_file(key);
        crate::base::failpoints::KeyLock::acquire(&path, &layout.shown(&path), key, wait)
            .map_err(|e| layout.shown_error(e))
    }
    #[cfg(not(feature = "failpoints"))]
    layout.lock_key(key, wait)
}

crate::base::words::words! {
    /// The named points of the protocol, by the names `JIT_CACHE_FAILPOINT` arms and the crash
    /// harness reads (`crash-harness` takes its table from [`Failpoint::ALL`]).
    pub enum Failpoint {
        /// A builder holds the key's lock.
        Locked = "locked",
        /// The compiler runs.
        Compiling = "compiling",
        /// A kernel's `meta.json` is being written into its staging directory.
        WritingMeta = "writing-meta",
        /// A kernel's staging directory is about to be renamed into place.
        Publishing = "publishing",
        /// A kernel's rename is done; what follows it is not.
        Published = "published",
        /// An eviction is about to mark (or move) an entry.
        Evicting = "evicting",
        /// An eviction marked an entry and is about to look at its stamp again.
        EvictingSecondLook = "evicting-second-look",
        /// A stored entry's producer holds the key's lock.
        StoreLocked = "store-locked",
        /// A stored entry's `meta.json` is being written.
        StoreWritingMeta = "store-writing-meta",
        /// A stored entry is about to be renamed into place.
        StorePublishing = "store-publishing",
        /// A stored entry's rename is done.
        StorePublished = "store-published",
        /// A pack's importer holds a chunk's key locks.
        ImportLocked = "import-locked",
        /// A pack's importer writes an entry's staged tree.
        ImportStaging = "import-staging",
        /// A pack's importer is about to rename a chunk's trees.
        ImportPublishing = "import-publishing",
        /// A pack's importer renamed a chunk's trees; their records follow.
        ImportPublished = "import-published",
        /// `verify` found an entry corrupt and is about to move it aside.
        VerifyFoundCorrupt = "verify-found-corrupt",
    }
}

/// A named point in the protocol.
#[inline]
pub(crate) fn point(point: Failpoint) {
    #[cfg(feature = "failpoints")]
    crate::base::failpoints::hit(point.word());
    #[cfg(not(feature = "failpoints"))]
    let _ = point;
}

/// An entry (or anything at an entry's path) is about to be moved into the trash, or marked
/// for eviction (readers miss it from then on).
#[inline]
pub(crate) fn trashing(path: &Path) {
    #[cfg(feature = "failpoints")]
    crate::base::failpoints::trashing(path, "trash");
    #[cfg(not(feature = "failpoints"))]
    let _ = path;
}

/// An eviction marked an entry and called itself off: the entry is in place again.
#[inline]
pub(crate) fn untrashed(path: &Path) {
    #[cfg(feature = "failpoints")]
    crate::base::failpoints::trashing(path, "untrash");
    #[cfg(not(feature = "failpoints"))]
    let _ = path;
}

/// A builder found a corrupt entry under its lock (a correct protocol never leaves one).
#[inline]
pub(crate) fn corrupt_found(dir: &Path, why: &str) {
    #[cfg(feature = "failpoints")]
    crate::base::failpoints::corrupt_found(dir, why);
    #[cfg(not(feature = "failpoints"))]
    let _ = (dir, why);
}

/// Where the compiler writes the artifact: the staging directory, or, with the injected bug
/// `in-place`, straight into the final entry directory (`in_place`, asked only then).
pub(crate) fn output_path(
    layout: &Layout,
    in_place: impl FnOnce() -> PathBuf,
    artifact_name: &str,
    staged: PathBuf,
) -> Result<PathBuf> {
    #[cfg(feature = "failpoints")]
    if crate::base::failpoints::bug("in-place") {
        if let Some(dir) = crate::base::failpoints::in_place_dir(in_place(), layout.dir_mode())? {
            return Ok(dir.join(artifact_name));
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = (layout, in_place, artifact_name);
    Ok(staged)
}

/// With the `in-place` bug, writes `meta.json` (`meta`'s JSON) beside the artifact in place and
/// says so: the caller then opens that entry instead of publishing.
pub(crate) fn finished_in_place(output: &Path, meta: &impl serde::Serialize) -> Result<bool> {
    #[cfg(feature = "failpoints")]
    if crate::base::failpoints::bug("in-place") {
        if let Some(dir) = output.parent() {
            let path = dir.join(crate::storage::layout::META_FILE);
            let json = serde_json::to_vec(meta).map_err(|e| {
                crate::error::Error::io("serialise meta.json (in-place bug)", &path, e.into())
            })?;
            durable_fs::put(&path, &json)?;
            return Ok(true);
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = (output, meta);
    Ok(false)
}

/// With the `meta-first` bug, removes the artifact before the commit (it is written into the
/// published entry afterwards by [`write_deferred`]).
pub(crate) fn defer_artifact(output: &Path) -> bool {
    #[cfg(feature = "failpoints")]
    if crate::base::failpoints::bug("meta-first") {
        return std::fs::remove_file(output).is_ok();
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = output;
    false
}

/// The second half of the `meta-first` bug: the artifact arrives after publication.
pub(crate) fn write_deferred(deferred: bool, path: &Path, bytes: &[u8]) -> Result<()> {
    #[cfg(feature = "failpoints")]
    if deferred {
        std::fs::write(path, bytes)
            .map_err(|e| crate::error::Error::io("write artifact (meta-first bug)", path, e))?;
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = (deferred, path, bytes);
    Ok(())
}

/// The injected bug `loser-asserts` (a negative control of the multi-host tests): a publish-race
/// loser that insists on seeing the winner's entry, as DeepEP's did, instead of answering with
/// its own output.
pub(crate) fn loser_asserts() -> bool {
    injected("loser-asserts")
}

/// The injected bug `sweep-2s` (a negative control of the multi-host tests): the sweep rule from
/// before multi-host support, 2 s and an unheld `flock`, applied to every host's leftovers.
pub(crate) fn sweep_two_seconds() -> bool {
    injected("sweep-2s")
}

/// The injected bug `pin-flock-only` (a negative control of the multi-host tests): pins by
/// directory `flock` alone, so eviction ignores the last-use stamp other hosts refresh.
pub(crate) fn pin_flock_only() -> bool {
    injected("pin-flock-only")
}

/// The bytes a build uploads as its blob. The injected bug `remote-corrupt-upload` (a negative
/// control of the remote crash test) flips the last byte, so that the blob no longer hashes to
/// its name: the audit must find it and every reader must refuse it.
pub(crate) fn uploaded_blob(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if injected("remote-corrupt-upload") {
        let mut bad = bytes.to_vec();
        if let Some(last) = bad.last_mut() {
            *last ^= 0xff;
        }
        return std::borrow::Cow::Owned(bad);
    }
    std::borrow::Cow::Borrowed(bytes)
}

/// The injected bug `evict-one-look` (a negative control of the multi-host tests): an eviction
/// that does not look at the stamp a second time (after its mark), so a hit on another host
/// between its first look and its move loses its path.
pub(crate) fn evict_with_one_look() -> bool {
    injected("evict-one-look")
}

/// Whether this process runs with the injected bug `name` (never, without the feature).
#[inline]
fn injected(name: &str) -> bool {
    #[cfg(feature = "failpoints")]
    return crate::base::failpoints::bug(name);
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        false
    }
}
