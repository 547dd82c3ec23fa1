//! A stored entry on disk: its `meta.json` (every file's name, size and digest) and how a
//! reader opens, pins and checks it.

use super::address::{Address, Namespace};
use crate::base::fstype::Protocol;
use crate::base::stamp::StatStamp;
use crate::error::{Error, Result};
use crate::storage::pin::{
    claim_across_hosts, is_plain_name, lock_dir, read_at, read_at_most, read_with_stat_at,
    still_names, touch_last_use_by, LastUse, Unusable,
};
pub(crate) use crate::store::tier_stored::StoredFile;
use fingerprint::Digest;
use rustix::fd::OwnedFd;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The name of an entry's metadata file (the same for kernels), written last.
pub(crate) use crate::storage::layout::META_FILE;

/// The stored entries' format, checked at every open.
pub(crate) const STORE_FORMAT: u32 = 1;

/// The `kind` a stored entry's `meta.json` carries; a kernel's names its output kind.
const STORED_KIND: &str = "stored";

/// A stored entry's metadata. Its presence, whole and matching, is what makes the entry valid.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredMeta {
    pub(crate) format: u32,
    pub(crate) kind: String,
    pub(crate) namespace: String,
    pub(crate) key: String,
    /// The key directory's digest (the namespace and key).
    pub(crate) digest: Digest,
    /// Every file of the entry but `meta.json`, sorted by name.
    pub(crate) files: Vec<StoredFile>,
    pub(crate) created_unix_ms: u64,
    pub(crate) host: String,
    /// The files' stat stamps when their digests were taken, each recorded only when settled
    /// (`base::stamp`), on a private root under the local protocol: an open that finds a file
    /// with the very same stamp trusts its digest without reading it. Absent in entries from
    /// earlier releases (each file is then read and hashed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) stamps: Vec<FileStamp>,
}

/// A stored file's settled stat stamp at its entry's commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileStamp {
    pub(crate) name: String,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime_ns: i64,
    pub(crate) ctime_ns: i64,
}

impl FileStamp {
    pub(crate) fn new(name: &str, stamp: &StatStamp) -> FileStamp {
        FileStamp {
            name: name.to_string(),
            dev: stamp.dev,
            ino: stamp.ino,
            size: stamp.size,
            mtime_ns: stamp.mtime_ns,
            ctime_ns: stamp.ctime_ns,
        }
    }

    /// Whether `now` is this very stamp: the same file, unchanged since its digest was taken.
    fn is(&self, now: &StatStamp) -> bool {
        (self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)
            == (now.dev, now.ino, now.size, now.mtime_ns, now.ctime_ns)
    }
}

impl StoredMeta {
    pub(crate) fn new(
        address: &Address,
        files: Vec<StoredFile>,
        stamps: Vec<FileStamp>,
    ) -> StoredMeta {
        StoredMeta {
            format: STORE_FORMAT,
            kind: STORED_KIND.to_string(),
            namespace: address.namespace.as_str().to_string(),
            key: address.key.clone(),
            digest: address.digest,
            files,
            created_unix_ms: crate::base::host::now_ms(),
            host: crate::base::host::name(),
            stamps,
        }
    }

    /// Whether `file` still has the stamp recorded when its digest was taken, and the size
    /// recorded beside its digest.
    fn unchanged_since_commit(&self, dir: &OwnedFd, file: &StoredFile) -> bool {
        self.stamps
            .iter()
            .find(|s| s.name == file.name)
            .is_some_and(|recorded| {
                StatStamp::at(dir, &file.name)
                    .is_some_and(|now| recorded.is(&now) && now.size == file.size)
            })
    }

    /// The bytes of every file.
    pub(crate) fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Whether a `meta.json`'s text describes a stored entry (maintenance reads both kinds).
pub(crate) fn is_stored_meta(json: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(borrow)]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Kind<'_>>(json).is_ok_and(|k| k.kind.as_deref() == Some(STORED_KIND))
}

/// A published stored entry, pinned while any clone of it lives: its files' paths stay valid
/// (eviction, `gc` and `verify` skip a pinned entry, on this host and, under the shared protocol,
/// on others through its last-use stamp).
#[derive(Debug, Clone)]
pub struct StoredEntry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    namespace: Namespace,
    key: String,
    files: Vec<StoredFile>,
    _pin: OwnedFd,
}

impl StoredEntry {
    /// The entry's directory (its files and `meta.json`).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The entry's namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.inner.namespace
    }

    /// The caller's key.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// The names of the entry's files, sorted.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.inner.files.iter().map(|f| f.name.as_str())
    }

    /// The path of the file `name`, valid while this value lives; `None` when the entry has
    /// no such file.
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.file(name).map(|f| self.inner.dir.join(&f.name))
    }

    /// The size of the file `name`.
    pub fn size(&self, name: &str) -> Option<u64> {
        self.file(name).map(|f| f.size)
    }

    /// Reads the file `name`, checked against its recorded size and digest again.
    pub fn read(&self, name: &str) -> Result<Vec<u8>> {
        let path = self.inner.dir.join(name);
        let Some(file) = self.file(name) else {
            return Err(Error::io(
                "read stored file",
                path,
                std::io::ErrorKind::NotFound.into(),
            ));
        };
        let bytes = read_at(&self.inner._pin, &file.name)
            .map_err(|e| Error::io("read stored file", &path, e))?;
        check_file(file, &bytes).map_err(|why| {
            Error::io(
                "read stored file",
                &path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, why),
            )
        })?;
        Ok(bytes)
    }

    fn file(&self, name: &str) -> Option<&StoredFile> {
        self.inner.files.iter().find(|f| f.name == name)
    }
}

fn check_file(file: &StoredFile, bytes: &[u8]) -> std::result::Result<(), String> {
    if bytes.len() as u64 != file.size {
        return Err(format!(
            "`{}` is {} bytes, {META_FILE} says {}",
            file.name,
            bytes.len(),
            file.size
        ));
    }
    if Digest::of_bytes(bytes) != file.digest {
        return Err(format!(
            "`{}`'s content does not match its digest",
            file.name
        ));
    }
    Ok(())
}

/// Opens the stored entry at `address`, pins it, and checks `meta.json` and every file's size
/// and digest (a file whose settled stamp from the commit is unchanged was hashed then and not
/// written since: it is not read again, on a root no other host shares): a reader sees the
/// entry whole or not at all.
pub(crate) fn open(
    address: &Address,
    protocol: Protocol,
) -> std::result::Result<StoredEntry, Unusable> {
    let (fd, meta) = open_checked(
        &address.dir,
        Some(&address.digest),
        LastUse::Refresh(protocol),
    )?;
    if meta.key != address.key || meta.namespace != address.namespace.as_str() {
        return Err(Unusable::Corrupt(format!(
            "{META_FILE} describes another entry"
        )));
    }
    Ok(StoredEntry {
        inner: Arc::new(Inner {
            dir: address.dir.clone(),
            namespace: address.namespace.clone(),
            key: meta.key,
            files: meta.files,
            _pin: fd,
        }),
    })
}

/// Checks the stored entry at `dir` whole (maintenance: `verify`). `Ok` when whole.
pub(crate) fn verify_dir(dir: &Path) -> std::result::Result<StoredMeta, Unusable> {
    open_checked(dir, None, LastUse::Keep).map(|(_, meta)| meta)
}

fn open_checked(
    dir: &Path,
    digest: Option<&Digest>,
    last_use: LastUse,
) -> std::result::Result<(OwnedFd, StoredMeta), Unusable> {
    let fd = lock_dir(dir)?;
    // `meta.json`'s stat, taken as it is read, also says when its last-use stamp is due.
    let (meta, meta_stat) = match read_with_stat_at(&fd, META_FILE) {
        Ok((bytes, stat)) => (
            serde_json::from_slice::<StoredMeta>(&bytes)
                .map_err(|e| Unusable::Corrupt(format!("{META_FILE} is corrupt or foreign: {e}"))),
            Some(stat),
        ),
        Err(e) if e.raw_os_error() == Some(libc::ESTALE) => (Err(Unusable::Absent), None),
        Err(e) => (
            Err(Unusable::Corrupt(format!("{META_FILE} unreadable: {e}"))),
            None,
        ),
    };
    // A use on a root no other host shares may trust a settled stamp; a look (`verify`) reads
    // and hashes every file, and under the shared protocol another host's writes carry another
    // clock's timestamps.
    let trust_stamps = matches!(last_use, LastUse::Refresh(protocol) if !protocol.hosts_share());
    // The last-use stamp (on `meta.json`) is refreshed before the path check under the shared
    // protocol, as for kernels (`entry.rs`): another host's eviction looks at it twice.
    let shared = last_use.pins_across_hosts();
    if shared && meta.is_ok() && !claim_across_hosts(&fd, META_FILE) {
        return Err(Unusable::Absent);
    }
    if !still_names(&fd, dir) {
        return Err(Unusable::Absent);
    }
    let meta = meta?;
    if meta.format != STORE_FORMAT
        || meta.kind != STORED_KIND
        || digest.is_some_and(|d| *d != meta.digest)
    {
        return Err(Unusable::Corrupt(format!(
            "{META_FILE} describes another entry"
        )));
    }
    for file in &meta.files {
        if !is_plain_name(&file.name) || file.name == META_FILE {
            return Err(Unusable::Corrupt(format!(
                "{META_FILE} names file {:?}",
                file.name
            )));
        }
        if trust_stamps && meta.unchanged_since_commit(&fd, file) {
            continue;
        }
        let bytes = read_at_most(&fd, &file.name, file.size)
            .map_err(|e| Unusable::Corrupt(format!("`{}` unreadable: {e}", file.name)))?;
        check_file(file, &bytes).map_err(Unusable::Corrupt)?;
    }
    if let (false, LastUse::Refresh(protocol), Some(stat)) = (shared, last_use, &meta_stat) {
        touch_last_use_by(&fd, META_FILE, protocol, stat);
    }
    Ok((fd, meta))
}
/// A stored file's name: one plain path component, never `meta.json`.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let invalid = |reason| Error::InvalidStoreKey {
        what: format!("file {name:?}"),
        reason,
    };
    if !crate::storage::pin::is_plain_name(name) || name == ".." {
        return Err(invalid(
            "a stored file's name is one path component, not starting with `.`",
        ));
    }
    if name == META_FILE {
        return Err(invalid("`meta.json` is the entry's own"));
    }
    if name.len() > 255 || name.contains('\0') {
        return Err(invalid("a stored file's name is at most 255 bytes, no NUL"));
    }
    Ok(())
}

/// Why a stored entry at its path could not be used, for messages.
pub(crate) fn unusable_reason(why: Unusable) -> String {
    match why {
        Unusable::Absent => "vanished".to_string(),
        Unusable::Corrupt(why) => why,
    }
}

/// Whether a whole stored entry is published at `address` (a pack's import, under the key's
/// lock, looks before staging).
pub(crate) fn is_whole(address: &Address, protocol: Protocol) -> bool {
    open(address, protocol).is_ok()
}
