//! A published entry: its `meta.json`, how a reader opens it, and the artifact handed out.
//!
//! Readers open the entry directory once (`O_DIRECTORY | O_NOFOLLOW`), take a shared `flock` on
//! it (the pin that eviction respects), check that the path still names that directory, and read
//! `meta.json` and the artifact relative to the descriptor. A concurrent replacement can never
//! mix two entries, and nothing is reached through a symlink.

use crate::base::fstype::Protocol;
use crate::build::headers::{AbsenceGroup, HeaderRecord, Inputs};
use crate::build::source_bound::SourceBinding;
use crate::error::{Error, Result};
use crate::storage::layout::variant_dir_name;
use crate::storage::pin::{
    claim_across_hosts, is_plain_name, lock_dir, read_at, still_names, touch_last_use,
};
pub(crate) use crate::storage::pin::{list_variants, LastUse, Unusable};
use fingerprint::{Digest, Manifest};
use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The name of an entry's metadata file, written last.
pub(crate) use crate::storage::layout::META_FILE;

/// An entry's metadata. Its presence, whole and matching, is what makes an entry valid.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub(crate) format: u32,
    pub(crate) name: String,
    pub(crate) key: Digest,
    pub(crate) variant: Digest,
    pub(crate) slot: Digest,
    /// The output kind, by its name (`cubin`, `ptx`, ...); another name is a corrupt entry.
    #[serde(with = "kind_name")]
    pub(crate) kind: nvcc::OutputKind,
    pub(crate) artifact_file: String,
    pub(crate) artifact_size: u64,
    pub(crate) artifact_digest: Digest,
    pub(crate) headers: Vec<HeaderRecord>,
    /// Where the compile looked for a header and found none (a header added there would be read).
    #[serde(default)]
    pub(crate) absent: Vec<AbsenceGroup>,
    /// The source the output names, when it may (`source_bound.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) source: Option<SourceBinding>,
    /// The key's components plus one per header: what `explain` and rebuild reasons diff.
    pub(crate) manifest: Manifest,
    pub(crate) created_unix_ms: u64,
    pub(crate) compile_ms: u64,
    pub(crate) host: String,
}

/// `meta.json` names the output kind as nvcc's option does.
mod kind_name {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        kind: &nvcc::OutputKind,
        to: S,
    ) -> Result<S::Ok, S::Error> {
        to.serialize_str(kind.name())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        from: D,
    ) -> Result<nvcc::OutputKind, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(from)?;
        nvcc::OutputKind::from_name(&name)
            .ok_or_else(|| D::Error::custom(format!("unknown kind `{name}`")))
    }
}

/// The artifact's file name inside an entry.
pub(crate) fn artifact_file_name(kind: nvcc::OutputKind) -> String {
    format!("artifact.{}", kind.extension())
}

/// The variant's digest: the headers the compile read, by place and content, the places where
/// it found none, and the source when the output names it. Stat stamps are host-specific hints
/// and stay out.
pub(crate) fn variant_of(inputs: &Inputs) -> Digest {
    let mut text = b"jit-cache variant 2\0".to_vec();
    let mut headers: Vec<_> = inputs
        .headers
        .iter()
        .map(|h| (h.base, h.rel.as_os_str(), h.digest))
        .collect();
    headers.sort();
    for (base, rel, digest) in headers {
        text.extend_from_slice(format!("h {base:?} {} ", digest.to_hex()).as_bytes());
        text.extend_from_slice(rel.as_encoded_bytes());
        text.push(0);
    }
    let mut absent: Vec<_> = inputs
        .absent
        .iter()
        .flat_map(|g| {
            g.names
                .iter()
                .map(move |n| (g.base, g.dir.as_os_str(), n.as_os_str()))
        })
        .collect();
    absent.sort();
    for (base, dir, name) in absent {
        text.extend_from_slice(format!("a {base:?} ").as_bytes());
        text.extend_from_slice(dir.as_encoded_bytes());
        text.push(b'/');
        text.extend_from_slice(name.as_encoded_bytes());
        text.push(0);
    }
    if let Some(source) = &inputs.source {
        text.extend_from_slice(b"s ");
        text.extend_from_slice(source.spelled.as_bytes());
        text.push(0);
        text.extend_from_slice(source.absolute.as_bytes());
        text.push(0);
    }
    Digest::of_bytes(&text)
}

impl Meta {
    /// The metadata of a kernel entry for `prepared` whose compile depended on `inputs` and
    /// produced an artifact of this size and digest: one constructor for builds and fetches.
    pub(crate) fn for_kernel(
        spec: &crate::build::spec::KernelSpec,
        prepared: &crate::build::key::Prepared,
        inputs: &Inputs,
        artifact: (u64, Digest),
        compile_ms: u64,
        host: String,
    ) -> Meta {
        Meta {
            format: crate::build::key::CACHE_FORMAT,
            name: spec.name.clone(),
            key: prepared.key,
            variant: variant_of(inputs),
            slot: prepared.slot,
            kind: spec.kind,
            artifact_file: artifact_file_name(spec.kind),
            artifact_size: artifact.0,
            artifact_digest: artifact.1,
            headers: inputs.headers.clone(),
            absent: inputs.absent.clone(),
            source: inputs.source.clone(),
            // The key's components; headers enter manifests only when two variants are compared.
            manifest: prepared.manifest.clone(),
            created_unix_ms: crate::base::host::now_ms(),
            compile_ms,
            host,
        }
    }

    /// The recorded inputs, taken out of the record.
    pub(crate) fn into_inputs(self) -> Inputs {
        Inputs {
            headers: self.headers,
            absent: self.absent,
            source: self.source,
        }
    }

    /// The recorded inputs.
    pub(crate) fn inputs(&self) -> Inputs {
        Inputs {
            headers: self.headers.clone(),
            absent: self.absent.clone(),
            source: self.source.clone(),
        }
    }
}

/// A compiled kernel, pinned in the cache while any clone of it lives.
#[derive(Debug, Clone)]
pub struct Artifact {
    inner: Arc<ArtifactInner>,
}

#[derive(Debug)]
struct ArtifactInner {
    bytes: Arc<[u8]>,
    path: PathBuf,
    kind: nvcc::OutputKind,
    _pin: Pin,
}

/// What keeps an artifact's path valid.
#[derive(Debug)]
enum Pin {
    /// The entry directory, open with a shared `flock`: eviction skips it.
    Entry(#[allow(dead_code)] OwnedFd),
    /// A private directory for an uncached build, removed when the artifact is dropped.
    Private(#[allow(dead_code)] tempfile::TempDir),
}

impl Artifact {
    /// The artifact's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.inner.bytes
    }

    /// A path to the artifact that stays valid while this value (or a clone) is alive, for APIs
    /// such as `cuModuleLoad` that want a file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The output kind.
    pub fn kind(&self) -> nvcc::OutputKind {
        self.inner.kind
    }

    /// Whether the path names a cache entry, which outlives this value (unpinned, it may be
    /// evicted later), rather than a private directory removed when the last clone is dropped.
    pub fn is_cached(&self) -> bool {
        matches!(self.inner._pin, Pin::Entry(_))
    }

    pub(crate) fn private(
        bytes: Vec<u8>,
        path: PathBuf,
        kind: nvcc::OutputKind,
        dir: tempfile::TempDir,
    ) -> Artifact {
        Artifact {
            inner: Arc::new(ArtifactInner {
                bytes: bytes.into(),
                path,
                kind,
                _pin: Pin::Private(dir),
            }),
        }
    }

    /// The shared bytes, for the in-process memo (which keeps bytes, never a pin).
    pub(crate) fn shared_bytes(&self) -> Arc<[u8]> {
        Arc::clone(&self.inner.bytes)
    }

    /// Re-pins a published entry for a memo hit: opens its directory, takes the shared lock and
    /// checks the path still names it. None when it was evicted or replaced meanwhile.
    pub(crate) fn repin(
        bytes: Arc<[u8]>,
        path: &Path,
        kind: nvcc::OutputKind,
        protocol: Protocol,
    ) -> Option<Artifact> {
        let dir = path.parent()?;
        let fd = lock_dir(dir).ok()?;
        // Under the shared protocol the memo's re-pin refreshes the stamp too, before the path
        // check (see `open_entry`): another host's eviction sees only that.
        if protocol.stamp_pins() {
            let name = path.file_name().and_then(|n| n.to_str())?;
            if !claim_across_hosts(&fd, name) {
                return None;
            }
        }
        if !still_names(&fd, dir) {
            return None;
        }
        Some(Artifact {
            inner: Arc::new(ArtifactInner {
                bytes,
                path: path.to_path_buf(),
                kind,
                _pin: Pin::Entry(fd),
            }),
        })
    }
}

/// An entry directory, open and pinned with a shared `flock`, whose `meta.json` was read.
#[derive(Debug)]
pub(crate) struct OpenEntry {
    pub(crate) meta: Meta,
    dir: PathBuf,
    fd: OwnedFd,
    /// Whether the last-use stamp was refreshed at open (shared protocol) rather than at load.
    stamped: bool,
    last_use: LastUse,
}

/// Opens the entry at `dir`, pins it, and reads and checks its `meta.json` against the key and
/// variant the caller expects. The artifact is read later, once the headers are revalidated.
pub(crate) fn open_entry(
    dir: &Path,
    key: &Digest,
    variant_dir: &str,
    last_use: LastUse,
) -> std::result::Result<OpenEntry, Unusable> {
    let fd = lock_dir(dir)?;
    let meta = match read_at(&fd, META_FILE) {
        Ok(bytes) => serde_json::from_slice::<Meta>(&bytes)
            .map_err(|e| Unusable::Corrupt(format!("{META_FILE} is corrupt or foreign: {e}"))),
        // Another host removed the entry after we opened it (NFS): a plain miss.
        Err(e) if e.raw_os_error() == Some(libc::ESTALE) => Err(Unusable::Absent),
        // A directory without meta.json is a half-deleted or foreign entry (publication puts
        // meta.json in before the one rename that makes an entry visible).
        Err(e) => Err(Unusable::Corrupt(format!("{META_FILE} unreadable: {e}"))),
    };
    // Under the shared protocol the last-use stamp is the pin other hosts see, so it is
    // refreshed before the path is checked: an eviction there checks it, moves the entry aside,
    // then checks it again and puts the entry back if it moved (`evict.rs`), so a stamp refreshed
    // here before our check is seen by that second look, and a move before our check fails it.
    // Elsewhere it only orders eviction, and is refreshed once the artifact proved whole.
    let stamped = last_use.pins_across_hosts()
        && meta
            .as_ref()
            .is_ok_and(|meta| is_plain_name(&meta.artifact_file));
    if let (true, Ok(meta)) = (stamped, &meta) {
        if !claim_across_hosts(&fd, &meta.artifact_file) {
            return Err(Unusable::Absent);
        }
    }
    // Eviction renames an entry aside under an exclusive lock; if that happened between our open
    // and our lock, the path now names something else (or nothing): a miss, whatever was read.
    if !still_names(&fd, dir) {
        return Err(Unusable::Absent);
    }
    let meta = meta?;
    if meta.format != crate::build::key::CACHE_FORMAT
        || meta.key != *key
        || variant_dir_name(&meta.variant) != variant_dir
    {
        return Err(Unusable::Corrupt(format!(
            "{META_FILE} describes another entry"
        )));
    }
    Ok(OpenEntry {
        meta,
        dir: dir.to_path_buf(),
        fd,
        stamped,
        last_use,
    })
}

impl OpenEntry {
    /// Reads the artifact and checks its size and digest against `meta.json`.
    pub(crate) fn load(
        self,
        kind: nvcc::OutputKind,
    ) -> std::result::Result<(Meta, Artifact), Unusable> {
        let expected_file = artifact_file_name(kind);
        if self.meta.artifact_file != expected_file {
            return Err(Unusable::Corrupt(format!(
                "{META_FILE} names artifact `{}`",
                self.meta.artifact_file
            )));
        }
        let bytes = read_at(&self.fd, &expected_file)
            .map_err(|e| Unusable::Corrupt(format!("artifact unreadable: {e}")))?;
        if bytes.len() as u64 != self.meta.artifact_size {
            return Err(Unusable::Corrupt(format!(
                "artifact is {} bytes, {META_FILE} says {}",
                bytes.len(),
                self.meta.artifact_size
            )));
        }
        if Digest::of_bytes(&bytes) != self.meta.artifact_digest {
            return Err(Unusable::Corrupt(
                "artifact content does not match its digest".into(),
            ));
        }
        if let (false, LastUse::Refresh(protocol)) = (self.stamped, self.last_use) {
            touch_last_use(&self.fd, &expected_file, protocol);
        }
        let path = self.dir.join(&expected_file);
        let artifact = Artifact {
            inner: Arc::new(ArtifactInner {
                bytes: bytes.into(),
                path,
                kind,
                _pin: Pin::Entry(self.fd),
            }),
        };
        Ok((self.meta, artifact))
    }
}

/// Reads an entry's `meta.json` without pinning it (maintenance: gc, verify, ls).
pub(crate) fn read_meta_json(dir: &Path) -> Result<Vec<u8>> {
    let path = dir.join(META_FILE);
    let fd = rustix::fs::open(
        &path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("open meta.json", &path, e.into()))?;
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read meta.json", &path, e))?;
    Ok(bytes)
}

/// Parses an entry's `meta.json` (read by [`read_meta_json`]) of the type `T` expected there.
pub(crate) fn parse_meta<T: serde::de::DeserializeOwned>(dir: &Path, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::io(
            "parse meta.json",
            dir.join(META_FILE),
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })
}

/// Reads a kernel entry's meta without pinning it.
pub(crate) fn read_meta(dir: &Path) -> Result<Meta> {
    parse_meta(dir, &read_meta_json(dir)?)
}
