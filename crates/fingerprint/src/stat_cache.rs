//! A stat cache: revalidating an unchanged file costs one `stat`, safe against racy timestamps.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::Error;
use crate::file::{hash_checked, Follow, StatTuple, TypeChecked};
use crate::path_text::escape_path;
use crate::persist::write_atomically;

/// A file whose mtime is not at least this much older than the moment it was hashed is "racy":
/// it could have been rewritten within the same timestamp tick after we read it, so its entry is
/// never trusted and it is re-hashed next time. Two seconds covers coarse kernel timestamp ticks
/// and modest clock skew between this host and a file server.
pub(crate) const RACY_WINDOW_NS: i64 = 2_000_000_000;

/// On-disk format of the cache; a file of another version loads as empty.
const STAT_CACHE_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    #[serde(flatten)]
    stat: StatTuple,
    digest: Digest,
    hashed_at_ns: i64,
}

impl Entry {
    /// Git's racy rule: trust the entry only if the file's mtime (and ctime) were already
    /// comfortably in the past when its content was read.
    fn trusted(&self) -> bool {
        let newest = self.stat.mtime_ns.max(self.stat.ctime_ns);
        newest < self.hashed_at_ns.saturating_sub(RACY_WINDOW_NS)
    }
}

/// Maps a path to the digest of its content, valid while the file's
/// `(device, inode, size, mtime_ns, ctime_ns)` tuple is unchanged.
///
/// - Keys are the paths as given (use absolute paths; [`crate::hash_tree`] canonicalises its root).
/// - Racy timestamps (git's rule): an entry is trusted only if the file's mtime and ctime were at
///   least two seconds older than the moment its content was read; otherwise the file is re-hashed
///   on every lookup until it ages, so a rewrite within the same timestamp tick is never missed.
/// - ctime and inode are in the tuple, so a same-size rewrite that restores the old mtime (which
///   moves ctime), or a replacement by rename (new inode), is detected.
/// - Entries of files that no longer exist are not pruned; [`StatCache::retain`] does it.
///
/// The cache is an accelerator only: a missing or corrupt cache file loads as empty.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StatCache {
    version: u32,
    entries: BTreeMap<String, Entry>,
    #[serde(skip)]
    dirty: bool,
}

impl Default for StatCache {
    fn default() -> Self {
        StatCache::new()
    }
}

impl StatCache {
    /// An empty cache.
    pub fn new() -> Self {
        StatCache {
            version: STAT_CACHE_VERSION,
            entries: BTreeMap::new(),
            dirty: false,
        }
    }

    /// Loads a cache saved by [`StatCache::save`]; a missing, unreadable, corrupt or
    /// other-version file gives an empty cache (it is only an accelerator).
    pub fn load(path: &Path) -> Self {
        std::fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<StatCache>(&bytes).ok())
            .filter(|c| c.version == STAT_CACHE_VERSION)
            .unwrap_or_default()
    }

    /// Saves the cache durably: temp file beside `path`, fsync, rename, fsync the directory.
    /// Concurrent savers do not corrupt it; the last rename wins.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        let mut me = self.clone();
        me.version = STAT_CACHE_VERSION;
        let bytes = serde_json::to_vec(&me).map_err(io::Error::other)?;
        write_atomically(path, &bytes)
    }

    /// Whether entries changed since the cache was created or loaded.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Forgets that entries changed (after the caller saved them as part of something larger).
    pub(crate) fn mark_clean(&mut self) {
        self.dirty = false;
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Keeps only the entries whose path satisfies `keep` (for example, still exists).
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let before = self.entries.len();
        self.entries.retain(|k, _| keep(k));
        self.dirty |= self.entries.len() != before;
    }

    /// The content digest of the regular file at `path` (symlinks followed): from the cache when
    /// the file's stat tuple matches a trusted entry, else by hashing it (see [`crate::hash_file`])
    /// and recording the result.
    pub fn hash_file(&mut self, path: &Path) -> Result<Digest, Error> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
        let key = escape_path(path);
        let checked = if meta.file_type().is_file() {
            if let Some(d) = self.lookup(&key, &StatTuple::of(&meta)) {
                return Ok(d);
            }
            TypeChecked::Yes
        } else {
            TypeChecked::No
        };
        let (digest, stat, started) = hash_checked(path, Follow::Yes, checked, &mut |_| {})?;
        self.record(key, stat, digest, started);
        Ok(digest)
    }

    /// The cached digest for `key` if its entry matches `stat` and is trusted.
    pub(crate) fn lookup(&self, key: &str, stat: &StatTuple) -> Option<Digest> {
        self.entries
            .get(key)
            .filter(|e| e.stat == *stat && e.trusted())
            .map(|e| e.digest)
    }

    /// Records a freshly computed digest.
    pub(crate) fn record(
        &mut self,
        key: String,
        stat: StatTuple,
        digest: Digest,
        hashed_at_ns: i64,
    ) {
        let entry = Entry {
            stat,
            digest,
            hashed_at_ns,
        };
        if self.entries.get(&key) != Some(&entry) {
            self.entries.insert(key, entry);
            self.dirty = true;
        }
    }

    #[cfg(test)]
    fn forge(&mut self, key: &str, f: impl FnOnce(&mut StatTuple, &mut i64)) {
        if let Some(e) = self.entries.get_mut(key) {
            f(&mut e.stat, &mut e.hashed_at_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{File, FileTimes};
    use std::time::{Duration, SystemTime};

    fn set_mtime(path: &Path, t: SystemTime) {
        let f = File::options()
            .write(true)
            .open(path)
            .expect("open to set times");
        f.set_times(FileTimes::new().set_modified(t).set_accessed(t))
            .expect("utimensat forges the mtime");
    }

    /// A rewrite within the same timestamp tick leaves the whole stat tuple unchanged. We model
    /// it exactly: the cache entry is forged to hold the file's *current* tuple with the old
    /// content's digest. The racy rule must still catch it when the mtime is recent relative to
    /// the hashing moment; the control shows the same forged entry is trusted once it is old,
    /// proving that the rule, not the tuple, is what detects the rewrite.
    #[test]
    fn racy_same_tick_rewrite_is_detected_and_control_is_trusted() {
        let dir = tempfile::tempdir().expect("create temp dir");
        let path = dir.path().join("tile.cuh");
        std::fs::write(&path, b"old body").expect("write old content");
        let tick = SystemTime::now() - Duration::from_secs(100);
        set_mtime(&path, tick);
        let mut cache = StatCache::new();
        let old = cache.hash_file(&path).expect("hash old content");
        let key = escape_path(&path);

        // Same size rewrite, mtime forged back to the same tick.
        std::fs::write(&path, b"new body").expect("rewrite same size");
        set_mtime(&path, tick);
        let now_tuple = StatTuple::of(&std::fs::metadata(&path).expect("stat"));
        // The rewrite happened in the tick of the hashing: hashed_at is just after the mtime,
        // and the stored tuple is identical to the current one.
        cache.forge(&key, |stat, hashed_at| {
            *stat = now_tuple;
            *hashed_at = now_tuple.mtime_ns.max(now_tuple.ctime_ns) + 1_000_000;
        });
        let seen = cache.hash_file(&path).expect("rehash racy entry");
        assert_ne!(
            seen, old,
            "a racy entry must be re-hashed, revealing the new content"
        );
        assert_eq!(
            seen,
            Digest::of_bytes(b"new body"),
            "the re-hash is of the new content"
        );

        // Negative control: the same forged identical tuple with an old, trusted hashing time
        // returns the stale digest, i.e. without the racy rule the rewrite would be missed.
        cache.forge(&key, |stat, hashed_at| {
            *stat = now_tuple;
            *hashed_at = now_tuple.mtime_ns.max(now_tuple.ctime_ns) + 10 * RACY_WINDOW_NS;
        });
        if let Some(e) = cache.entries.get_mut(&key) {
            e.digest = old;
        }
        assert_eq!(
            cache.hash_file(&path).expect("lookup"),
            old,
            "control: a trusted entry with an identical tuple is believed (this is what racy entries must avoid)"
        );
    }

    #[test]
    fn fresh_file_stays_racy_until_it_ages() {
        let dir = tempfile::tempdir().expect("create temp dir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").expect("write");
        let mut cache = StatCache::new();
        cache.hash_file(&path).expect("hash");
        let stat = StatTuple::of(&std::fs::metadata(&path).expect("stat"));
        assert_eq!(
            cache.lookup(&escape_path(&path), &stat),
            None,
            "a file written just now is racy and must not be served from the cache"
        );
    }

    #[test]
    fn load_of_garbage_is_empty() {
        let dir = tempfile::tempdir().expect("create temp dir");
        let path = dir.path().join("cache.json");
        std::fs::write(&path, b"{not json").expect("write garbage");
        assert!(
            StatCache::load(&path).is_empty(),
            "a corrupt cache loads as empty"
        );
        assert!(
            StatCache::load(&dir.path().join("missing")).is_empty(),
            "a missing cache loads as empty"
        );
    }
}

#[cfg(test)]
mod tuple_tests {
    use super::*;
    use std::fs::{File, FileTimes};
    use std::time::{Duration, SystemTime};

    /// A same-size rewrite that restores the old mtime still moves ctime; with the entry forged
    /// to be trusted (as an old entry would be), the tuple alone must reveal the rewrite.
    #[test]
    fn same_size_rewrite_with_old_mtime_is_detected_by_ctime() {
        let dir = tempfile::tempdir().expect("create temp dir");
        let path = dir.path().join("kernel.cu");
        std::fs::write(&path, b"AAAA").expect("write");
        let old_mtime = SystemTime::now() - Duration::from_secs(3600);
        let set = |t| {
            File::options()
                .write(true)
                .open(&path)
                .expect("open")
                .set_times(FileTimes::new().set_modified(t))
                .expect("utimensat")
        };
        set(old_mtime);
        let mut cache = StatCache::new();
        let old = cache.hash_file(&path).expect("hash");
        // Make the entry trusted, as it would be after the racy window passed.
        cache.forge(&escape_path(&path), |_, at| *at = i64::MAX);
        assert_eq!(
            cache.hash_file(&path).expect("lookup"),
            old,
            "trusted entry is served"
        );
        let before = StatTuple::of(&std::fs::metadata(&path).expect("stat"));
        std::fs::write(&path, b"BBBB").expect("same-size rewrite");
        set(old_mtime);
        let after = StatTuple::of(&std::fs::metadata(&path).expect("stat"));
        assert_eq!(
            (before.size, before.mtime_ns),
            (after.size, after.mtime_ns),
            "size and mtime are restored: only ctime can tell"
        );
        let new = cache.hash_file(&path).expect("rehash");
        assert_eq!(
            new,
            Digest::of_bytes(b"BBBB"),
            "the ctime change forces a re-hash"
        );
    }
}
