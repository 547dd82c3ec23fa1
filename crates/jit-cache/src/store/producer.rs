//! The one producer of a stored entry: a staging directory and the key's lock, committed as one
//! durable rename or dropped with nothing published.

use super::entry::{self, StoredFile, StoredMeta, META_FILE};
use super::{check_name, unusable_reason, Address, Store, StoredEntry};
use crate::error::{Error, Result};
use crate::evict::{evict_unless_pinned, move_to_trash, Evicted};
use crate::fstype::Protocol;
use crate::hooks::KeyGuard;
use crate::pin::Unusable;
use crate::staging::Staging;
use durable_fs::PublishOutcome;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The producer of one stored entry: its files go into a private staging directory, and
/// [`Producer::commit`] publishes them together. While it lives it holds the key's lock, so every
/// other thread, process and host asking for the key waits (bounded) for it; dropped without a
/// commit (an error, a panic) or killed, it publishes nothing and the next waiter produces.
#[must_use = "dropping a producer publishes nothing"]
pub struct Producer {
    parts: Box<Parts>,
}

/// A producer's state, boxed: a [`super::Claim`] stays small.
struct Parts {
    store: Store,
    address: Address,
    staging: Staging,
    /// The key's lock, then this process's turn at the key (released in that order).
    _guard: (KeyGuard, super::turns::Turn<super::TurnKey>),
    /// The files came from the fleet tier (verified): nothing to upload after the commit.
    fetched: bool,
    /// A write failed part of the way: whatever it left is not the caller's file, so the
    /// producer can never commit.
    poisoned: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("namespace", &self.parts.address.namespace)
            .field("key", &self.parts.address.key)
            .field("dir", &self.parts.staging.shown())
            .finish_non_exhaustive()
    }
}

impl Producer {
    pub(crate) fn new(
        store: Store,
        address: Address,
        staging: Staging,
        guard: (KeyGuard, super::turns::Turn<super::TurnKey>),
        fetched: bool,
    ) -> Self {
        Producer {
            parts: Box::new(Parts {
                store,
                address,
                staging,
                _guard: guard,
                fetched,
                poisoned: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// The staging directory. Files written here directly (by a compiler, say) are part of the
    /// entry as [`Producer::write`]'s are: regular files with plain names, no subdirectories.
    pub fn dir(&self) -> &Path {
        self.parts.staging.path()
    }

    /// The caller's key.
    pub fn key(&self) -> &str {
        &self.parts.address.key
    }

    /// Writes the file `name` of the entry (again: replaces it). Plainly: [`Producer::commit`] fsyncs every file
    /// before the rename that publishes them. A write that fails (a full disk) poisons the
    /// producer: its partial file is removed and [`Producer::commit`] refuses to publish.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        check_name(name)?;
        let path = self.parts.staging.path().join(name);
        // Never through a link: the staging directory is this user's alone, but its path passes
        // through `staging/`, which in a team root any member may rename.
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&path)
            .and_then(|mut file| std::io::Write::write_all(&mut file, bytes));
        written.map_err(|e| {
            self.parts
                .poisoned
                .store(true, std::sync::atomic::Ordering::Relaxed);
            // Best effort: the poison alone keeps the partial file from being published.
            let _ = std::fs::remove_file(&path);
            Error::io(
                "write stored file",
                self.parts.staging.shown().join(name),
                e,
            )
        })
    }

    /// Publishes the entry: records every file's size and digest in `meta.json` (written last),
    /// fsyncs the files and the directory, renames it into place without replacing anything
    /// and fsyncs the parent; then answers with the published entry, pinned. An fsync error is
    /// returned, and nothing is published.
    pub fn commit(self) -> Result<StoredEntry> {
        if self
            .parts
            .poisoned
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(Error::io(
                "commit stored entry",
                self.parts.staging.shown(),
                std::io::Error::other(format!(
                    "an earlier write into {}/{} failed; nothing is published (produce it again)",
                    self.parts.address.namespace,
                    super::truncated(&self.parts.address.key)
                )),
            ));
        }
        let layout = self.parts.store.layout();
        let files = self.staged_files()?;
        let meta = StoredMeta::new(&self.parts.address, files);
        if let Some(found) = before_rename(layout, &self.parts.address, &self.parts.staging, &meta)?
        {
            return Ok(found);
        }
        crate::hooks::point("store-publishing");
        let Parts {
            store,
            address,
            staging,
            _guard,
            fetched,
            poisoned: _,
        } = *self.parts;
        let target = address.dir.clone();
        let published = staging.commit_noreplace(&target)?;
        crate::hooks::point("store-published");
        if published == PublishOutcome::AlreadyExisted {
            // Another host published it first (its lock is invisible here): that is the entry.
            return entry::open(&address, store.layout().protocol)
                .map_err(|why| published_error(&target, why));
        }
        let layout = store.layout();
        after_rename(
            layout,
            &address,
            if fetched {
                crate::event_log::Event::StoreFetch
            } else {
                crate::event_log::Event::Store
            },
        );
        let entry = entry::open(&address, store.layout().protocol)
            .map_err(|why| published_error(&target, why))?;
        if let (Some(remote), false) = (store.remote(), fetched) {
            super::remote::upload(remote, layout, &address, &meta.files, |name| {
                entry.read(name).ok()
            });
        }
        Ok(entry)
    }

    /// The staged files, checked and digested, sorted by name.
    fn staged_files(&self) -> Result<Vec<StoredFile>> {
        let (dir, shown) = (self.parts.staging.path(), self.parts.staging.shown());
        let listing = std::fs::read_dir(dir).map_err(|e| Error::io("list staging", shown, e))?;
        let mut files = Vec::new();
        for item in listing {
            let item = item.map_err(|e| Error::io("list staging", shown, e))?;
            let path = item.path();
            let name = item
                .file_name()
                .into_string()
                .map_err(|name| Error::InvalidStoreKey {
                    what: format!("file {name:?}"),
                    reason: "a stored file's name is UTF-8",
                })?;
            check_name(&name)?;
            let kind = item
                .file_type()
                .map_err(|e| Error::io("inspect stored file", &path, e))?;
            if !kind.is_file() {
                return Err(Error::InvalidStoreKey {
                    what: format!("file {name:?}"),
                    reason: "a stored entry holds regular files only",
                });
            }
            let bytes =
                std::fs::read(&path).map_err(|e| Error::io("read stored file", &path, e))?;
            files.push(StoredFile {
                name,
                size: bytes.len() as u64,
                digest: fingerprint::Digest::of_bytes(&bytes),
            });
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    }
}

/// The first half of a stored entry's publication, under the key's lock: `meta.json` (written
/// last), team modes, the target cleared. `Some`: another host's whole entry is there, the
/// answer; publish nothing. Shared by [`Producer::commit`] and a pack's import.
pub(crate) fn before_rename(
    layout: &crate::layout::Layout,
    address: &Address,
    staging: &Staging,
    meta: &StoredMeta,
) -> Result<Option<StoredEntry>> {
    let meta_path = staging.path().join(META_FILE);
    let json = serde_json::to_vec(meta).map_err(|e| {
        Error::io(
            "serialise meta.json",
            &meta_path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })?;
    crate::hooks::point("store-writing-meta");
    std::fs::write(&meta_path, json).map_err(|e| Error::io("write meta.json", &meta_path, e))?;
    layout.share_with_team(staging)?;
    layout.ensure_dir(&layout.key_dir(&address.digest))?;
    if std::fs::symlink_metadata(&address.dir).is_ok() {
        // The locked lookup did not accept what is there: corrupt or planted, or, under the
        // shared protocol, another host's fresh entry hidden from that lookup.
        return adopt_or_clear(layout, address);
    }
    Ok(None)
}

/// The second half, once the rename published the entry: the note for other hosts' waiters
/// (shared protocol) and the event log.
pub(crate) fn after_rename(
    layout: &crate::layout::Layout,
    address: &Address,
    event: crate::event_log::Event,
) {
    if layout.protocol == Protocol::Shared {
        crate::liveness::note_published(layout, &address.digest, &super::stored_variant());
    }
    layout.log_event(
        event,
        &format!("{}/{}", address.namespace, super::truncated(&address.key)),
        0,
    );
}

/// Clears the way for a staged entry. `Some`: another host's whole entry is there, the answer;
/// nothing is published.
fn adopt_or_clear(
    layout: &crate::layout::Layout,
    address: &Address,
) -> Result<Option<StoredEntry>> {
    let target = &address.dir;
    if layout.protocol != Protocol::Shared {
        move_to_trash(layout, target)?;
        return Ok(None);
    }
    match entry::open(address, layout.protocol) {
        Ok(found) => Ok(Some(found)),
        // Marked by an eviction killed before its move: moved aside like a damaged one (a
        // reader that refreshed it just before the kill may hold it).
        Err(Unusable::Absent) if !crate::liveness::is_marked_evicting_at(target) => Ok(None),
        Err(Unusable::Absent) => clear_damaged(layout, target, "marked by an eviction".into()),
        Err(Unusable::Corrupt(why)) => clear_damaged(layout, target, why),
    }
}

/// Moves a damaged (or eviction-marked) entry at `target` aside, or refuses to publish over it
/// while another host may hold it.
fn clear_damaged(
    layout: &crate::layout::Layout,
    target: &Path,
    why: String,
) -> Result<Option<StoredEntry>> {
    match evict_unless_pinned(layout, target, None)? {
        Evicted::Moved | Evicted::Absent => Ok(None),
        Evicted::Pinned | Evicted::Replaced => Err(Error::io(
            "publish stored entry",
            target,
            std::io::Error::other(format!(
                "a damaged entry there ({why}) may be held by another host"
            )),
        )),
    }
}

fn published_error(target: &Path, why: Unusable) -> Error {
    Error::io(
        "open published stored entry",
        target,
        std::io::Error::other(unusable_reason(why)),
    )
}
