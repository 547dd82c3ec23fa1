//! The one producer of a stored entry: a staging directory and the key's lock, committed as one
//! durable rename or dropped with nothing published.

use super::address::{stored_variant, truncated, Address};
use super::entry::{
    self, check_name, unusable_reason, FileStamp, StoredEntry, StoredFile, StoredMeta,
};
use super::turns::{Turn, TurnKey};
use crate::base::event_log::Event;
use crate::base::fstype::Protocol;
use crate::base::stamp::{coarse_past, fine_now, Settling, StatStamp};
use crate::error::{Error, Result};
use crate::storage::hooks::Failpoint;
use crate::storage::hooks::KeyGuard;
use crate::storage::layout::Layout;
use crate::storage::layout::RootMode;
use crate::storage::pin::Unusable;
use crate::storage::publish::{self, Points, Publishable, Published, Target};
use crate::storage::staging::Staging;
use crate::store::tier::Remote;
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
    /// The root's layout and fleet tier, as the store handle that claimed the key has them.
    layout: Layout,
    remote: Option<Remote>,
    address: Address,
    staging: Staging,
    /// The key's lock, then this process's turn at the key (released in that order).
    _guard: (KeyGuard, Turn<TurnKey>),
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
        layout: Layout,
        remote: Option<Remote>,
        address: Address,
        staging: Staging,
        guard: (KeyGuard, Turn<TurnKey>),
        fetched: bool,
    ) -> Self {
        Producer {
            parts: Box::new(Parts {
                layout,
                remote,
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
                    truncated(&self.parts.address.key)
                )),
            ));
        }
        let (files, stamps) = self.staged_files()?;
        let meta = StoredMeta::new(&self.parts.address, files, stamps);
        let Parts {
            layout,
            remote,
            address,
            staging,
            _guard,
            fetched,
            poisoned: _,
        } = *self.parts;
        let target = address.dir.clone();
        let event = if fetched {
            Event::StoreFetch
        } else {
            Event::Store
        };
        let name = logged_name(&address);
        let published = publish::publish(
            &layout,
            staging,
            &StoredPublication {
                address: &address,
                meta: &meta,
            },
            target_of(&address),
            (event, &name, 0),
            || Ok(()),
        )?;
        match published {
            Published::Found(found) => return Ok(found),
            // Another host published it first (its lock is invisible here, or it died between
            // its rename and its note): that is the entry. This host's cached miss may still
            // hide it, so it is waited for as a noted entry would be, not answered as vanished.
            Published::Renamed(PublishOutcome::AlreadyExisted) => {
                let found = if layout.protocol.adopts_found_entries() {
                    crate::storage::notes::await_taken_target(
                        || entry::open(&address, layout.protocol),
                        |why| matches!(why, Unusable::Absent),
                    )
                } else {
                    entry::open(&address, layout.protocol)
                };
                return found.map_err(|why| published_error(&target, why));
            }
            Published::Renamed(PublishOutcome::Published) => {}
        }
        let entry =
            entry::open(&address, layout.protocol).map_err(|why| published_error(&target, why))?;
        if let (Some(remote), false) = (&remote, fetched) {
            super::remote::upload(remote, &layout, &address, &meta.files, |name| {
                entry.read(name).ok()
            });
        }
        Ok(entry)
    }

    /// The staged files, checked and digested, sorted by name; and the stamps of those whose
    /// stamps are settled, where later opens may trust them (a private root under the local
    /// protocol: a team root's files are made the group's after this, which changes their
    /// ctime, and another host's clock is not this one's).
    fn staged_files(&self) -> Result<(Vec<StoredFile>, Vec<FileStamp>)> {
        let (dir, shown) = (self.parts.staging.path(), self.parts.staging.shown());
        let layout = &self.parts.layout;
        // A reading of the coarse clock past every write so far (at most one tick's wait): the
        // stamps of files written just before the commit, as JITs do, are settled too.
        let mut settling = (layout.mode == RootMode::Private && !layout.protocol.hosts_share())
            .then(|| Settling::at(coarse_past(fine_now())));
        let listing = std::fs::read_dir(dir).map_err(|e| Error::io("list staging", shown, e))?;
        let mut files = Vec::new();
        let mut stamps = Vec::new();
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
            let mut file =
                std::fs::File::open(&path).map_err(|e| Error::io("read stored file", &path, e))?;
            // Stamped before it is read: a write after the clock's reading gives another stamp.
            let stamp = StatStamp::of_fd(&file);
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut file, &mut bytes)
                .map_err(|e| Error::io("read stored file", &path, e))?;
            if let (Some(settling), Some(stamp)) = (settling.as_mut(), stamp) {
                if stamp.size == bytes.len() as u64 && settling.settled(&path, &stamp) {
                    stamps.push(FileStamp::new(&name, &stamp));
                }
            }
            files.push(StoredFile {
                name,
                size: bytes.len() as u64,
                digest: fingerprint::Digest::of_bytes(&bytes),
            });
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        stamps.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((files, stamps))
    }
}

/// A stored entry as the publication step (`storage/publish.rs`) takes it.
struct StoredPublication<'a> {
    address: &'a Address,
    meta: &'a StoredMeta,
}

impl Publishable for StoredPublication<'_> {
    type Found = StoredEntry;
    const POINTS: Points = Points {
        writing_meta: Failpoint::StoreWritingMeta,
        publishing: Failpoint::StorePublishing,
        published: Failpoint::StorePublished,
    };

    fn meta_json(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(self.meta)
    }

    fn open_found(
        &self,
        _target: &Path,
        protocol: Protocol,
    ) -> std::result::Result<StoredEntry, Unusable> {
        entry::open(self.address, protocol)
    }

    /// Refused: a stored entry's files are the caller's, not this process's to copy privately.
    fn held_damaged(&self, target: &Path, why: String) -> Result<Option<StoredEntry>> {
        Err(Error::io(
            "publish stored entry",
            target,
            std::io::Error::other(format!(
                "a damaged entry there ({why}) may be held by another host"
            )),
        ))
    }
}

/// A stored entry's place: its key directory is its entry's, with the one variant.
fn target_of(address: &Address) -> Target<'_> {
    Target {
        key: &address.digest,
        variant: stored_variant_digest(),
        dir: &address.dir,
    }
}

/// The one variant's digest, computed once.
fn stored_variant_digest() -> &'static fingerprint::Digest {
    static VARIANT: std::sync::OnceLock<fingerprint::Digest> = std::sync::OnceLock::new();
    VARIANT.get_or_init(stored_variant)
}

/// The name a stored entry's publication logs.
fn logged_name(address: &Address) -> String {
    format!("{}/{}", address.namespace, truncated(&address.key))
}

/// The first half of a stored entry's publication, under the key's lock (a pack's import runs
/// the halves). `Some`: another host's whole entry is there, the answer; publish nothing.
pub(crate) fn before_rename(
    layout: &Layout,
    address: &Address,
    staging: &Staging,
    meta: &StoredMeta,
) -> Result<Option<StoredEntry>> {
    publish::before_rename(
        layout,
        staging,
        &StoredPublication { address, meta },
        target_of(address),
    )
}

/// The second half, once the rename published the entry.
pub(crate) fn after_rename(layout: &Layout, address: &Address, event: Event) -> Result<()> {
    let name = logged_name(address);
    publish::after_rename(layout, target_of(address), (event, &name, 0), || Ok(()))
}

fn published_error(target: &Path, why: Unusable) -> Error {
    Error::io(
        "open published stored entry",
        target,
        std::io::Error::other(unusable_reason(why)),
    )
}
