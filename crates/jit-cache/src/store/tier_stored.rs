//! A stored entry as the fleet tier holds it (`jit_cache::store`): its files by name, size and
//! digest, the list its `meta.json` keeps too. A leaf: the store and the tier's audit read it.

use fingerprint::Digest;
use serde::{Deserialize, Serialize};

/// One file of a stored entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredFile {
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) digest: Digest,
}

/// The format a stored entry's remote manifest carries (a kernel's carries another).
pub(crate) const STORED_MANIFEST_FORMAT: &str = "jit-cache stored manifest 1";

/// A stored entry in the fleet tier, under its key directory's digest: which blobs make it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoredManifest {
    pub(crate) format: String,
    pub(crate) namespace: String,
    pub(crate) key: String,
    pub(crate) files: Vec<StoredFile>,
    pub(crate) host: String,
    pub(crate) created_unix_ms: u64,
}

impl StoredManifest {
    /// Parses a manifest, `None` unless it is one of this format.
    pub(crate) fn parse(bytes: &[u8]) -> Option<StoredManifest> {
        serde_json::from_slice::<StoredManifest>(bytes)
            .ok()
            .filter(|m| m.format == STORED_MANIFEST_FORMAT)
    }
}
