//! The store's handle: opening a root, looking an entry up, and claiming a key to produce it.

use super::address::{check_key, entry_digest, stored_variant, truncated, Address, Namespace};
use super::entry::{self, StoredEntry};
use super::producer::Producer;
use super::remote;
use super::turns::{self, process_turns};
use crate::base::fstype::Sharing;
use crate::error::{Error, Result};
use crate::storage::layout::{Layout, RootMode};
use crate::storage::pin::Unusable;
use fingerprint::Digest;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Options for [`Store::open_with`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct StoreOptions {
    mode: Option<RootMode>,
    sharing: Sharing,
    remote: Option<crate::store::tier::Remote>,
}

impl StoreOptions {
    /// How the root may be shared (private by default; a team root is group-owned, 2770).
    pub fn mode(mut self, mode: RootMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Says whether other hosts may share the root (NFS, Lustre), overriding detection.
    pub fn sharing(mut self, sharing: Sharing) -> Self {
        self.sharing = sharing;
        self
    }

    /// A fleet's remote tier: a missing entry is fetched from it (every file verified) before
    /// this process becomes its producer, and a produced one is uploaded after its commit.
    pub fn remote(mut self, remote: crate::store::tier::Remote) -> Self {
        self.remote = Some(remote);
        self
    }
}

/// What [`Store::begin`] found.
#[derive(Debug)]
#[must_use = "a `Produce` claim holds the key's lock until it is committed or dropped"]
pub enum Claim {
    /// The entry is published and whole; pinned while this value lives.
    Ready(StoredEntry),
    /// Nobody has published the entry: the caller is now its one producer, until it commits
    /// or drops the producer (which publishes nothing and lets the next waiter produce it).
    Produce(Producer),
}

/// What [`Store::lookup`] found at a key.
#[derive(Debug)]
pub enum Lookup {
    /// The entry is published and whole; pinned while this value lives.
    Found(StoredEntry),
    /// Nothing is published at the key (or its entry is being replaced).
    Absent,
    /// An entry is published but fails its check (its metadata or a file's size or digest
    /// differs from what was recorded: a disk's bit rot, a hand edit, a torn copy). A miss: the
    /// key's next producer replaces it, and `verify` moves it aside.
    Damaged(Damage),
}

impl Lookup {
    /// The entry, when one was found whole.
    pub fn found(self) -> Option<StoredEntry> {
        match self {
            Lookup::Found(entry) => Some(entry),
            Lookup::Absent | Lookup::Damaged(_) => None,
        }
    }
}

/// A published entry that fails its check: where it is and why, for a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    path: PathBuf,
    reason: String,
}

impl Damage {
    /// The entry's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What its check found.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the stored entry {} is damaged ({}): a miss, which its next producer replaces",
            self.path.display(),
            self.reason
        )
    }
}

/// A handle on a root's keyed store. Cheap to clone; a [`crate::Cache`] on the same root shares
/// its entries' tree, its maintenance and its protocol ([`crate::Cache::store`]).
#[derive(Debug, Clone)]
pub struct Store {
    layout: Layout,
    remote: Option<crate::store::tier::Remote>,
    /// The root's identity (its `entries/` directory's device and inode): handles on one root
    /// share their threads' turns.
    root_id: (u64, u64),
}

impl Store {
    /// Opens the store at `root` (created, mode 0700, when missing), the same root a
    /// [`crate::Cache`] may use.
    pub fn open(root: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(root, StoreOptions::default())
    }

    /// Opens the store at `root` with options.
    pub fn open_with(root: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        let layout = Layout::open(root.as_ref(), options.mode.unwrap_or(RootMode::Private))?;
        Ok(Store::on(
            layout.with_sharing(options.sharing),
            options.remote,
        ))
    }

    pub(crate) fn on(layout: Layout, remote: Option<crate::store::tier::Remote>) -> Store {
        let root_id = rustix::fs::fstat(layout.dir_fd(crate::storage::layout::Subdir::Entries))
            .map_or((0, 0), |st| (st.st_dev, st.st_ino));
        Store {
            layout,
            remote,
            root_id,
        }
    }

    /// The format directory inside the root.
    pub fn root(&self) -> &Path {
        &self.layout.base
    }

    /// The root's directory of per-host state (the cache's own identity caches live there, one
    /// file per host name): where a caller keeps a state file of its own beside them.
    pub fn state_dir(&self) -> PathBuf {
        self.layout.dir(crate::storage::layout::Subdir::State)
    }

    /// Whether other hosts may share the root (`shared`) or not (`local`).
    pub fn is_shared(&self) -> bool {
        self.layout.protocol.hosts_share()
    }

    pub(crate) fn address(&self, namespace: &Namespace, key: &str) -> Result<Address> {
        check_key(key)?;
        let digest = entry_digest(namespace, key);
        Ok(Address {
            namespace: namespace.clone(),
            key: key.to_string(),
            dir: self.layout.entry_dir(&digest, &stored_variant()),
            digest,
        })
    }

    /// The published entry for `key`, pinned, or `None` when there is none (or it is being
    /// replaced, or it is damaged: [`Store::lookup`] tells these apart). Takes no lock: a reader
    /// never waits for a producer.
    pub fn get(&self, namespace: &Namespace, key: &str) -> Result<Option<StoredEntry>> {
        Ok(self.lookup(namespace, key)?.found())
    }

    /// What is published at `key`: the entry, pinned; nothing; or an entry that fails its
    /// check, which is a miss the caller may want to report. Takes no lock.
    pub fn lookup(&self, namespace: &Namespace, key: &str) -> Result<Lookup> {
        let address = self.address(namespace, key)?;
        Ok(match entry::open(&address, self.layout.protocol) {
            Ok(found) => Lookup::Found(found),
            Err(Unusable::Absent) => Lookup::Absent,
            Err(Unusable::Corrupt(reason)) => Lookup::Damaged(Damage {
                path: address.dir,
                reason,
            }),
        })
    }

    /// The published entry for `key`, or the role of its one producer.
    ///
    /// When the entry is missing the call takes the key's lock, waiting at most `wait` for
    /// another thread, process or host that holds it (then [`Error::Busy`]: the caller may
    /// produce its bytes without the store), and looks again. A producer that drops its
    /// [`Producer`] or dies releases the key, and the next waiter becomes the producer.
    pub fn begin(&self, namespace: &Namespace, key: &str, wait: Duration) -> Result<Claim> {
        let address = self.address(namespace, key)?;
        if let Ok(found) = entry::open(&address, self.layout.protocol) {
            return Ok(Claim::Ready(found));
        }
        let busy = || Error::Busy {
            namespace: namespace.to_string(),
            key: truncated(key),
            lock: self.shown_lock_file(&address.digest),
            waited: wait,
        };
        // This process's other threads at the key first (a condition variable), then other
        // processes and hosts (the key's `flock`), within one deadline.
        // A wait too long to add to the clock (`Duration::MAX`, Python's `sys.maxsize`) is a
        // wait without end.
        let deadline = std::time::Instant::now().checked_add(wait);
        let turn = turns::Turns::take(process_turns(), (self.root_id, address.digest), deadline)
            .ok_or_else(busy)?;
        let locked = match deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                crate::storage::hooks::lock_key_within(&self.layout, &address.digest, left)
            }
            None => crate::storage::hooks::lock_key(&self.layout, &address.digest),
        };
        let guard = locked.map_err(|e| match e {
            Error::Fs(e) if e.kind() == std::io::ErrorKind::TimedOut => busy(),
            other => other,
        })?;
        crate::storage::hooks::point(crate::storage::hooks::Failpoint::StoreLocked);
        // Another producer may have published while we waited for the lock.
        if let Ok(found) = entry::open(&address, self.layout.protocol) {
            return Ok(Claim::Ready(found));
        }
        // Under the shared protocol another host may have published while we waited, hidden
        // from this host by its negative lookup cache: the lock file's note says so.
        if self.layout.protocol.notes_publications() {
            // As for kernels (`publish.rs`): waiting ends early only when the entry was opened
            // and judged corrupt, never because a listing shows what a lookup cannot open yet.
            let variant = crate::storage::layout::variant_dir_name(&stored_variant());
            let corrupt = std::cell::Cell::new(false);
            let noted = crate::storage::notes::await_noted_entry(
                &self.layout,
                &address.digest,
                || match entry::open(&address, self.layout.protocol) {
                    Ok(found) => Some(found),
                    Err(why) => {
                        corrupt.set(matches!(why, Unusable::Corrupt(_)));
                        None
                    }
                },
                |noted| noted != variant || corrupt.get(),
            );
            if let Some(found) = noted {
                return Ok(Claim::Ready(found));
            }
        }
        let staging = self.layout.new_staging_dir()?;
        // The fleet may have it: fetched and verified into the staging directory, it is
        // published by the same commit as a produced entry, and not uploaded again.
        let fetched = self.remote.as_ref().is_some_and(|remote| {
            remote::fetch_into(remote, &self.layout, &address, staging.path())
        });
        let producer = Producer::new(
            self.layout.clone(),
            self.remote.clone(),
            address,
            staging,
            (guard, turn),
            fetched,
        );
        if fetched {
            return producer.commit().map(Claim::Ready);
        }
        Ok(Claim::Produce(producer))
    }

    /// The published entry for `key`, produced by `produce` (which writes the entry's files
    /// into the directory it is given) when nobody has. `produce` runs at most once per key at a
    /// time across threads, processes and hosts; an error from it publishes nothing and is
    /// returned as [`Error::Produce`].
    pub fn get_or_insert_with<E>(
        &self,
        namespace: &Namespace,
        key: &str,
        wait: Duration,
        produce: impl FnOnce(&Path) -> std::result::Result<(), E>,
    ) -> Result<StoredEntry>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        match self.begin(namespace, key, wait)? {
            Claim::Ready(entry) => Ok(entry),
            Claim::Produce(producer) => match produce(producer.dir()) {
                Ok(()) => producer.commit(),
                Err(e) => Err(Error::Produce {
                    namespace: namespace.to_string(),
                    key: truncated(key),
                    source: e.into(),
                }),
            },
        }
    }

    /// The key's lock file as messages name it: its path under the root, never the
    /// `/proc/self/fd/N` path this process opens it by (meaningless to anyone else).
    fn shown_lock_file(&self, digest: &Digest) -> PathBuf {
        let locks = self.layout.dir(crate::storage::layout::Subdir::Locks);
        match self.layout.lock_file(digest).file_name() {
            Some(name) => locks.join(name),
            None => locks,
        }
    }
}
