//! The keyed store: durable, single-flight groups of files under a key the caller computed.
//!
//! A JIT that has its own key and its own bytes (Triton's cache manager, Inductor, an NVRTC
//! path, downloaded cubins) needs only a store. This one gives every stored entry what the
//! kernel cache gives a compiled kernel: one durable rename publishes the whole group (never a
//! partial one), one producer per key however many threads, processes and hosts ask, readers
//! pinned against eviction, kill -9 leaving nothing behind, and `gc`, `verify`, `stats`, the
//! team root and the shared-filesystem protocol, since stored entries live in the same tree.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use jit_cache::store::{Claim, Namespace, Store};
//! use std::time::Duration;
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path().join("cache"))?;
//! let triton = Namespace::new("triton")?;
//! let entry = match store.begin(&triton, "4f1c9a", Duration::from_secs(60))? {
//!     Claim::Ready(entry) => entry, // another producer finished it: nothing to do
//!     Claim::Produce(producer) => {
//!         // This thread is the key's one producer until it commits or drops `producer`.
//!         producer.write("add.cubin", b"\x7fELF...")?;
//!         producer.write("add.json", b"{}")?;
//!         producer.commit()? // fsynced, then published with one rename
//!     }
//! };
//! assert_eq!(entry.read("add.json")?, b"{}");
//! let again = store.get(&triton, "4f1c9a")?.expect("published");
//! assert!(again.path("add.cubin").is_some_and(|p| p.exists())); // valid while `again` lives
//! # Ok(()) }
//! ```

mod entry;
mod producer;
mod remote;
mod turns;

pub use entry::StoredEntry;
pub use producer::Producer;

use crate::error::{Error, Result};
use crate::fstype::{Protocol, Sharing};
use crate::layout::{Layout, RootMode};
use crate::pin::Unusable;
use fingerprint::Digest;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest caller's key the store accepts, in bytes.
pub const MAX_KEY_LEN: usize = 4096;

/// A namespace of keys: what keeps one JIT's keys from ever meeting another's (a Triton key
/// never names an nvcc kernel, nor an Inductor graph).
///
/// 1 to 64 bytes of lowercase ASCII letters, digits, `-`, `_` and `.`, starting with a letter
/// or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Namespace(String);

impl Namespace {
    /// Checks and wraps a namespace name.
    pub fn new(name: &str) -> Result<Namespace> {
        let invalid = |reason| Error::InvalidStoreKey {
            what: format!("namespace {name:?}"),
            reason,
        };
        if name.is_empty() || name.len() > 64 {
            return Err(invalid("a namespace is 1 to 64 bytes"));
        }
        let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b);
        if !name.bytes().all(allowed) {
            return Err(invalid(
                "a namespace is lowercase ASCII letters, digits, `-`, `_` and `.`",
            ));
        }
        if !name.as_bytes()[0].is_ascii_alphanumeric() {
            return Err(invalid("a namespace starts with a letter or digit"));
        }
        Ok(Namespace(name.to_string()))
    }

    /// The namespace's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Options for [`Store::open_with`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct StoreOptions {
    mode: Option<RootMode>,
    sharing: Sharing,
    remote: Option<crate::remote::Remote>,
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
    pub fn remote(mut self, remote: crate::remote::Remote) -> Self {
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

/// A handle on a root's keyed store. Cheap to clone; a [`crate::Cache`] on the same root shares
/// its entries' tree, its maintenance and its protocol ([`crate::Cache::store`]).
#[derive(Debug, Clone)]
pub struct Store {
    layout: Layout,
    remote: Option<crate::remote::Remote>,
    /// The root's identity (its `entries/` directory's device and inode): handles on one root
    /// share their threads' turns.
    root_id: (u64, u64),
}

/// A stored key of a root, as this process's threads take turns at it.
type TurnKey = ((u64, u64), Digest);

/// This process's turns at stored keys (`turns.rs`).
fn process_turns() -> &'static crate::sync::Arc<turns::Turns<TurnKey>> {
    static TURNS: std::sync::OnceLock<crate::sync::Arc<turns::Turns<TurnKey>>> =
        std::sync::OnceLock::new();
    TURNS.get_or_init(|| {
        #[cfg(not(loom))]
        crate::fork::rule(|| Box::new(process_turns().hold_for_fork()));
        crate::sync::Arc::new(turns::Turns::new())
    })
}

/// The key directory's digest of a stored entry: the namespace and the caller's key, in a
/// preimage no kernel key has (those begin with another domain string).
pub(crate) fn entry_digest(namespace: &Namespace, key: &str) -> Digest {
    let mut text = b"jit-cache stored entry 1\0".to_vec();
    text.extend_from_slice(namespace.0.as_bytes());
    text.push(0);
    text.extend_from_slice(key.as_bytes());
    Digest::of_bytes(&text)
}

/// The one variant a stored entry has: the caller's key names its content.
pub(crate) fn stored_variant() -> Digest {
    Digest::of_bytes(b"jit-cache stored entry variant")
}

pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidStoreKey {
            what: format!("key {:?}", truncated(key)),
            reason: "a key is 1 to 4096 bytes",
        });
    }
    Ok(())
}

/// A key as messages show it: at most 80 characters.
fn truncated(key: &str) -> String {
    match key.char_indices().nth(80) {
        Some((end, _)) => format!("{}...", &key[..end]),
        None => key.to_string(),
    }
}

/// One stored entry's address: what every step needs to name it.
#[derive(Debug, Clone)]
pub(crate) struct Address {
    pub(crate) namespace: Namespace,
    pub(crate) key: String,
    pub(crate) digest: Digest,
    pub(crate) dir: PathBuf,
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

    pub(crate) fn on(layout: Layout, remote: Option<crate::remote::Remote>) -> Store {
        let root_id = rustix::fs::fstat(layout.dir_fd(crate::layout::Subdir::Entries))
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
        self.layout.dir(crate::layout::Subdir::State)
    }

    /// Whether other hosts may share the root (`shared`) or not (`local`).
    pub fn is_shared(&self) -> bool {
        self.layout.protocol == Protocol::Shared
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
    /// replaced). Takes no lock: a reader never waits for a producer.
    pub fn get(&self, namespace: &Namespace, key: &str) -> Result<Option<StoredEntry>> {
        let address = self.address(namespace, key)?;
        Ok(entry::open(&address, self.layout.protocol).ok())
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
                crate::hooks::lock_key_within(&self.layout, &address.digest, left)
            }
            None => crate::hooks::lock_key(&self.layout, &address.digest),
        };
        let guard = locked.map_err(|e| match e {
            Error::Fs(e) if e.kind() == std::io::ErrorKind::TimedOut => busy(),
            other => other,
        })?;
        crate::hooks::point("store-locked");
        // Another producer may have published while we waited for the lock.
        if let Ok(found) = entry::open(&address, self.layout.protocol) {
            return Ok(Claim::Ready(found));
        }
        // Under the shared protocol another host may have published while we waited, hidden
        // from this host by its negative lookup cache: the lock file's note says so.
        if self.layout.protocol == Protocol::Shared {
            // As for kernels (`publish.rs`): waiting ends early only when the entry was opened
            // and judged corrupt, never because a listing shows what a lookup cannot open yet.
            let variant = crate::layout::variant_dir_name(&stored_variant());
            let corrupt = std::cell::Cell::new(false);
            let noted = crate::liveness::await_noted_entry(
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
        let producer = Producer::new(self.clone(), address, staging, (guard, turn), fetched);
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

    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The key's lock file as messages name it: its path under the root, never the
    /// `/proc/self/fd/N` path this process opens it by (meaningless to anyone else).
    fn shown_lock_file(&self, digest: &Digest) -> PathBuf {
        let locks = self.layout.dir(crate::layout::Subdir::Locks);
        match self.layout.lock_file(digest).file_name() {
            Some(name) => locks.join(name),
            None => locks,
        }
    }

    pub(crate) fn remote(&self) -> Option<&crate::remote::Remote> {
        self.remote.as_ref()
    }
}

/// A stored file's name: one plain path component, never `meta.json`.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let invalid = |reason| Error::InvalidStoreKey {
        what: format!("file {name:?}"),
        reason,
    };
    if !crate::pin::is_plain_name(name) || name == ".." {
        return Err(invalid(
            "a stored file's name is one path component, not starting with `.`",
        ));
    }
    if name == entry::META_FILE {
        return Err(invalid("`meta.json` is the entry's own"));
    }
    if name.len() > 255 || name.contains('\0') {
        return Err(invalid("a stored file's name is at most 255 bytes, no NUL"));
    }
    Ok(())
}

/// Why a stored entry at its path could not be used, for messages.
fn unusable_reason(why: Unusable) -> String {
    match why {
        Unusable::Absent => "vanished".to_string(),
        Unusable::Corrupt(why) => why,
    }
}

pub(crate) use entry::{is_stored_meta, verify_dir, StoredMeta, STORE_FORMAT};
pub(crate) use producer::{after_rename, before_rename};

/// Whether a whole stored entry is published at `address` (a pack's import, under the key's
/// lock, looks before staging).
pub(crate) fn is_whole(address: &Address, protocol: Protocol) -> bool {
    entry::open(address, protocol).is_ok()
}
