//! Looking after a cache: listing, statistics, eviction (`gc`), verification and sweeping.
//!
//! Eviction and verification move entries aside into `trash/` with one rename, under the key's
//! lock (so no builder loses its entry mid-build) and only when no reader pins them, so a reader
//! that holds an entry keeps working. Trash and abandoned staging directories are removed by the
//! sweep, which only removes what no live process holds.

use crate::build::entry::{self, Meta};
use crate::cache::Cache;
use crate::error::{Error, Result};
use crate::storage::counters::Event;
use crate::storage::evict::{
    evict_unless_pinned, evict_unpinned, remove_unpinned, DirIdentity, Evicted,
};
use crate::storage::layout::{open_dir_nofollow, Layout, Subdir};
use crate::store::{is_stored_meta, StoredMeta};
use durable_fs::Wait;
use fingerprint::Digest;
use rustix::fd::{AsFd, OwnedFd};
use serde::Serialize;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use crate::storage::liveness::SWEEP_MIN_AGE;

/// One published entry.
#[derive(Debug, Clone, Serialize)]
pub struct EntryInfo {
    /// The kernel's name.
    pub name: String,
    /// The output kind.
    pub kind: String,
    /// The key (hex).
    pub key: String,
    /// The entry's directory.
    pub path: PathBuf,
    /// The artifact's size in bytes.
    pub bytes: u64,
    /// When it was built (ms since the epoch).
    pub created_unix_ms: u64,
    /// Its last-use stamp (the artifact's access time, refreshed at most hourly; s since the epoch).
    pub last_use_unix: i64,
}

/// Totals for `jit-cache stats`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Published entries.
    pub entries: usize,
    /// Their artifacts' bytes.
    pub bytes: u64,
    /// Builds recorded in the event log (hits are not recorded: a hit writes nothing).
    pub builds_recorded: usize,
    /// Keys with a recorded compile failure.
    pub failures: usize,
    /// Staging directories present (live builds, or leftovers the sweep will remove).
    pub staging: usize,
    /// Items in the trash.
    pub trash: usize,
    /// The root's filesystem type (`statfs`): `ext4`, `nfs`, `lustre`, `fuse`, ...
    pub filesystem: String,
    /// `shared` when other hosts may use the root (network or FUSE filesystem, or said so),
    /// else `local`.
    pub protocol: String,
    /// Requests answered from the cache (or a handle's memory), over every host and process,
    /// as counted when each handle saved its state.
    pub hits: u64,
    /// Requests compiled and published.
    pub built: u64,
    /// Requests fetched from the remote tier and published.
    pub fetched: u64,
    /// Requests answered but not cached, by reason (`side-effect`, `time-macro`, `input-moved`,
    /// `trace-incomplete`, `trace-missed-a-read`, `unaccounted-read`, `computed-lookup`,
    /// `cache-unusable`, ...).
    pub not_cached: std::collections::BTreeMap<String, u64>,
}

/// What to evict.
#[derive(Debug, Clone, Copy, Default)]
pub struct GcPolicy {
    /// Evict least recently used entries until the total is at most this many bytes.
    pub max_bytes: Option<u64>,
    /// Evict entries not used for longer than this.
    pub max_age: Option<Duration>,
}

/// What `gc` or `clear` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    /// Entries moved aside.
    pub evicted: usize,
    /// Bytes freed.
    pub bytes_freed: u64,
    /// Entries skipped because a reader pinned them or a build held their key.
    pub skipped_busy: usize,
    /// Leftovers removed by the sweep (staging, trash, temps).
    pub swept: usize,
}

/// What `verify` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    /// Entries checked.
    pub checked: usize,
    /// Entries found corrupt and moved aside, with the reason.
    pub corrupt: Vec<(PathBuf, String)>,
    /// Entries found corrupt but left in place because a reader holds them (the next verify,
    /// or the next build of the key, moves them aside once released), with the reason.
    pub corrupt_pinned: Vec<(PathBuf, String)>,
}

impl Cache {
    pub(crate) fn usable_layout(&self) -> Result<&Layout> {
        self.cx.layout.as_ref().map_err(|why| Error::UnsafeRoot {
            path: self.cx.root.clone(),
            reason: why.clone(),
        })
    }

    /// Lists the published entries.
    pub fn entries(&self) -> Result<Vec<EntryInfo>> {
        let layout = self.usable_layout()?;
        Ok(walk_entries(layout)
            .into_iter()
            .filter_map(|(dir, meta)| info(&dir, meta.ok()?))
            .collect())
    }

    /// Counts entries, bytes, failures, staging and trash.
    pub fn stats(&self) -> Result<Stats> {
        let layout = self.usable_layout()?;
        let entries = self.entries()?;
        let count = |sub: Subdir| {
            std::fs::read_dir(layout.pinned(sub))
                .map(|r| r.flatten().count())
                .unwrap_or(0)
        };
        let builds_recorded =
            std::fs::read_to_string(layout.pinned(Subdir::State).join("events.log"))
                .map(|log| crate::base::event_log::builds(&log))
                .unwrap_or(0);
        // This handle's own counts first, so that they are in what it reports.
        self.cx.counters.save(layout);
        let totals = crate::storage::counters::totals(layout);
        let total = |what: Event| totals.get(&what).copied().unwrap_or(0);
        let not_cached = totals
            .iter()
            .filter_map(|(event, n)| match event {
                Event::NotCached(why) => Some((why.to_string(), *n)),
                _ => None,
            })
            .collect();
        Ok(Stats {
            hits: total(Event::Hit),
            built: total(Event::Built),
            fetched: total(Event::Fetched),
            not_cached,
            entries: entries.len(),
            bytes: entries.iter().map(|e| e.bytes).sum(),
            builds_recorded,
            failures: count(Subdir::Failures),
            staging: count(Subdir::Staging),
            trash: count(Subdir::Trash),
            filesystem: match layout.fs.name {
                "unknown" => format!("unknown (0x{:x})", layout.fs.magic),
                name => name.to_string(),
            },
            protocol: layout.protocol.name().into(),
        })
    }

    /// Evicts least recently used entries by size and age, skipping pinned entries and keys being
    /// built, then sweeps leftovers.
    pub fn gc(&self, policy: GcPolicy) -> Result<GcReport> {
        let layout = self.usable_layout()?;
        let mut entries = self.entries()?;
        entries.sort_by_key(|e| e.last_use_unix);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        let mut report = GcReport::default();
        for entry in &entries {
            let too_old = policy
                .max_age
                .is_some_and(|age| now - entry.last_use_unix > age.as_secs() as i64);
            let too_big = policy.max_bytes.is_some_and(|max| total > max);
            if !too_old && !too_big {
                continue;
            }
            if self.evict_entry(layout, entry)? {
                report.evicted += 1;
                report.bytes_freed += entry.bytes;
                total = total.saturating_sub(entry.bytes);
            } else {
                report.skipped_busy += 1;
            }
        }
        report.swept = self.sweep()?;
        Ok(report)
    }

    /// Evicts everything not pinned and not being built, and forgets slots and failures.
    pub fn clear(&self) -> Result<GcReport> {
        let layout = self.usable_layout()?;
        let mut report = GcReport::default();
        for entry in self.entries()? {
            if self.evict_entry(layout, &entry)? {
                report.evicted += 1;
                report.bytes_freed += entry.bytes;
            } else {
                report.skipped_busy += 1;
            }
        }
        // Relative to the descriptors opened at open: a `slots` swapped for a symlink since
        // cannot send these unlinks anywhere else.
        for sub in [Subdir::Slots, Subdir::Failures] {
            if let Ok(read) = std::fs::read_dir(layout.pinned(sub)) {
                for item in read.flatten() {
                    let _ = rustix::fs::unlinkat(
                        layout.dir_fd(sub),
                        item.file_name().as_os_str(),
                        rustix::fs::AtFlags::empty(),
                    );
                }
            }
        }
        report.swept = self.sweep()?;
        Ok(report)
    }

    fn evict_entry(&self, layout: &Layout, entry: &EntryInfo) -> Result<bool> {
        let Ok(key) = entry.key.parse::<Digest>() else {
            return Ok(false);
        };
        // A key being built is skipped, never waited for: gc must not stall behind a compile.
        let Some(_guard) = layout.try_lock_key(&key)? else {
            return Ok(false);
        };
        evict_unpinned(layout, &entry.path)
    }

    /// Re-hashes every artifact against its `meta.json`; moves corrupt entries aside.
    ///
    /// A corrupt entry is moved only under its key's lock, and only if, once the lock is held,
    /// the path still names the very directory found corrupt, it is still corrupt, and no
    /// reader pins it: while verify waited, a builder may have replaced it with a good entry,
    /// and a reader that holds an artifact keeps its path valid.
    pub fn verify(&self) -> Result<VerifyReport> {
        let layout = self.usable_layout()?;
        let mut report = VerifyReport::default();
        for (dir, meta) in walk_entries(layout) {
            report.checked += 1;
            let seen = DirIdentity::of_path(&dir);
            if seen.is_none() || problem(&dir, meta).is_none() {
                continue;
            }
            // Corrupt entries are moved aside under their key's lock when the key is known.
            let key = dir
                .parent()
                .and_then(|k| k.file_name())
                .and_then(|k| k.to_str())
                .and_then(|k| k.parse::<Digest>().ok());
            crate::storage::hooks::point(crate::storage::hooks::Failpoint::VerifyFoundCorrupt);
            let _guard = match key {
                Some(key) => Some(layout.lock_key(&key, Wait::Forever)?),
                None => None,
            };
            // Look again now that no builder can be at work on this key.
            if DirIdentity::of_path(&dir) != seen {
                continue;
            }
            let Some(why) = problem(&dir, read_described(&dir)) else {
                continue;
            };
            match evict_unless_pinned(layout, &dir, seen)? {
                Evicted::Moved => report.corrupt.push((dir, why)),
                Evicted::Pinned => report.corrupt_pinned.push((dir, why)),
                Evicted::Absent | Evicted::Replaced => {}
            }
        }
        self.sweep()?;
        Ok(report)
    }

    /// Removes what dead processes left: abandoned staging directories and temps (only those no
    /// live process holds, via durable-fs's sweep), and everything in the trash that no reader
    /// pins. Returns how many items were removed.
    ///
    /// Under the shared protocol (NFS, Lustre, ...) another host's leftovers are removed only
    /// when their heartbeat is older than [`crate::FOREIGN_GRACE`]: that host's locks are
    /// invisible here (`liveness.rs`).
    pub fn sweep(&self) -> Result<usize> {
        let layout = self.usable_layout()?;
        let protocol = layout.protocol;
        let mut removed = 0;
        // Every directory is named through a descriptor opened at open (or, for key
        // directories, opened from `entries/` without following symlinks): a member who swaps
        // one for a symlink cannot point this sweep outside the root.
        for sub in [
            Subdir::Staging,
            Subdir::Slots,
            Subdir::Failures,
            Subdir::State,
        ] {
            let shown = layout.dir(sub);
            removed += crate::storage::liveness::sweep_dir(&layout.pinned(sub), &shown, protocol)?;
        }
        let mut failed = None;
        for_each_key_dir(
            layout,
            |shown, fd| match crate::storage::liveness::sweep_dir(
                &layout.fd_path(fd.as_fd(), shown),
                shown,
                protocol,
            ) {
                Ok(count) => removed += count,
                Err(e) => failed = failed.take().or(Some(e)),
            },
        );
        if let Some(e) = failed {
            return Err(e);
        }
        if let Ok(read) = std::fs::read_dir(layout.pinned(Subdir::Trash)) {
            for item in read.flatten() {
                if remove_unpinned(layout, &item.file_name()) {
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}

/// Why an entry is unusable, or None when it is whole (or vanished: moved aside by a concurrent
/// gc or builder since the listing, which is not corruption).
fn problem(dir: &Path, meta: Result<Described>) -> Option<String> {
    match meta {
        Err(Error::Io { ref source, .. })
            if source.kind() == std::io::ErrorKind::NotFound && !dir.exists() =>
        {
            None
        }
        Err(e) => Some(format!("meta.json unusable: {e}")),
        Ok(Described::Stored(meta)) => {
            let named = dir
                .parent()
                .and_then(|k| k.file_name())
                .and_then(|k| k.to_str());
            if named != Some(meta.digest.to_hex().as_str()) {
                return Some("meta.json describes another entry".to_string());
            }
            match crate::store::verify_dir(dir) {
                Ok(_) | Err(entry::Unusable::Absent) => None,
                Err(entry::Unusable::Corrupt(why)) => Some(why),
            }
        }
        Ok(Described::Kernel(meta)) => {
            let variant = crate::storage::layout::variant_dir_name(&meta.variant);
            match entry::open_entry(dir, &meta.key, &variant, entry::LastUse::Keep)
                .and_then(|open| open.load(meta.kind))
            {
                Ok(_) | Err(entry::Unusable::Absent) => None,
                Err(entry::Unusable::Corrupt(why)) => Some(why),
            }
        }
    }
}

/// Calls `visit` with each key directory (its path, for messages, and its descriptor), opened
/// from the `entries/` descriptor without following symlinks. One key directory is open at a
/// time.
fn for_each_key_dir(layout: &Layout, mut visit: impl FnMut(&Path, &OwnedFd)) {
    let entries = layout.dir(Subdir::Entries);
    let Ok(shards) = std::fs::read_dir(layout.pinned(Subdir::Entries)) else {
        return;
    };
    for shard in shards.flatten() {
        if !shard.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let shard_name = shard.file_name();
        let Ok(shard_fd) =
            open_dir_nofollow(layout.dir_fd(Subdir::Entries), Path::new(&shard_name))
        else {
            continue;
        };
        let shown_shard = entries.join(&shard_name);
        let Ok(keys) = std::fs::read_dir(layout.fd_path(shard_fd.as_fd(), &shown_shard)) else {
            continue;
        };
        for key in keys.flatten() {
            if !key.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if let Ok(key_fd) = open_dir_nofollow(&shard_fd, Path::new(&key.file_name())) {
                visit(&shown_shard.join(key.file_name()), &key_fd);
            }
        }
    }
}

fn key_dirs(layout: &Layout) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let Ok(shards) = std::fs::read_dir(layout.dir(Subdir::Entries)) else {
        return dirs;
    };
    for shard in shards.flatten() {
        if !shard.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if let Ok(keys) = std::fs::read_dir(shard.path()) {
            dirs.extend(
                keys.flatten()
                    .filter(|k| k.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|k| k.path()),
            );
        }
    }
    dirs
}

/// What an entry's `meta.json` describes: a compiled kernel or a stored entry.
enum Described {
    Kernel(Meta),
    Stored(StoredMeta),
}

/// Reads the `meta.json` at `dir` as the kind of entry it says it is.
fn read_described(dir: &Path) -> Result<Described> {
    let json = entry::read_meta_json(dir)?;
    if is_stored_meta(&json) {
        entry::parse_meta(dir, &json).map(Described::Stored)
    } else {
        entry::parse_meta(dir, &json).map(Described::Kernel)
    }
}

/// Every variant directory under `entries/`, with its meta (or why it is unreadable). Nothing is
/// followed: a symlink planted among the entries is listed (and reported) but never entered.
fn walk_entries(layout: &Layout) -> Vec<(PathBuf, Result<Described>)> {
    let mut out = Vec::new();
    for key_dir in key_dirs(layout) {
        for variant in entry::list_variants(&key_dir) {
            let dir = key_dir.join(variant);
            let meta = read_described(&dir);
            out.push((dir, meta));
        }
    }
    out
}

fn info(dir: &Path, meta: Described) -> Option<EntryInfo> {
    match meta {
        Described::Kernel(meta) => {
            let stat = std::fs::symlink_metadata(dir.join(&meta.artifact_file)).ok()?;
            Some(EntryInfo {
                name: meta.name,
                kind: meta.kind.name().to_string(),
                key: meta.key.to_hex(),
                path: dir.to_path_buf(),
                bytes: stat.len(),
                created_unix_ms: meta.created_unix_ms,
                last_use_unix: stat.atime(),
            })
        }
        // A stored entry's last-use stamp is its `meta.json`'s access time.
        Described::Stored(meta) => {
            let stat = std::fs::symlink_metadata(dir.join(entry::META_FILE)).ok()?;
            Some(EntryInfo {
                name: format!("{}/{}", meta.namespace, meta.key),
                kind: "stored".to_string(),
                key: meta.digest.to_hex(),
                path: dir.to_path_buf(),
                bytes: meta.bytes(),
                created_unix_ms: meta.created_unix_ms,
                last_use_unix: stat.atime(),
            })
        }
    }
}
