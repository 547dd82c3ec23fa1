//! An operator's check of a tier's store (and the crash tests' checker), written once for every
//! tier: every manifest parses, each variant it names has its blob, and every blob hashes to its
//! name. Reads everything. A tier lends it an [`Inventory`]: its listings and a bounded read.

use jit_cache::TierError;
use std::collections::HashSet;

/// The largest object the audit reads whole (the cache fetches no artifact above 1 GiB).
pub const MAX_AUDITED_BYTES: usize = 1 << 30;

/// What [`audit`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Audit {
    /// Manifests in the store.
    pub manifests: usize,
    /// Manifests that do not parse (readers treat them as misses).
    pub unreadable_manifests: Vec<String>,
    /// Variants the manifests name.
    pub variants: usize,
    /// Variants whose blob is absent (evicted, expired, deleted, lost with the server): misses.
    pub variants_without_blob: usize,
    /// Blobs in the store.
    pub blobs: usize,
    /// Blobs whose content does not hash to their name.
    pub corrupt_blobs: Vec<String>,
}

/// One stored value as the audit reads it.
#[derive(Debug)]
pub enum Stored {
    /// Nothing there (removed since the listing, or empty).
    Absent,
    /// The whole value.
    Value(Vec<u8>),
    /// A value longer than the limit, unread.
    TooLarge,
}

/// What a tier shows the audit of its store.
pub trait Inventory {
    /// The names of every manifest.
    ///
    /// # Errors
    /// The first failed request.
    fn manifest_names(&self) -> Result<Vec<String>, TierError>;

    /// The names of every blob.
    ///
    /// # Errors
    /// The first failed request.
    fn blob_names(&self) -> Result<Vec<String>, TierError>;

    /// The digest a blob's name ends with.
    fn digest_of<'a>(&self, blob_name: &'a str) -> &'a str;

    /// At most `limit` bytes of the value called `name`.
    ///
    /// # Errors
    /// A failed request.
    fn read(&self, op: &'static str, name: &str, limit: usize) -> Result<Stored, TierError>;
}

/// Checks the store `inventory` shows; see [`Audit`]. A value removed between the listing and
/// its read is not counted; one too large to read is unreadable (a manifest) or corrupt (a blob).
///
/// # Errors
/// The first failed request.
pub fn audit(inventory: &impl Inventory) -> Result<Audit, TierError> {
    let mut audit = Audit::default();
    let blob_names = inventory.blob_names()?;
    let digests: HashSet<&str> = blob_names
        .iter()
        .map(|name| inventory.digest_of(name))
        .collect();
    for name in inventory.manifest_names()? {
        let bytes = match inventory.read("get manifest", &name, MAX_AUDITED_BYTES)? {
            Stored::Absent => continue,
            Stored::Value(bytes) => Some(bytes),
            Stored::TooLarge => None,
        };
        audit.manifests += 1;
        let Some(artifacts) = bytes.as_deref().and_then(jit_cache::manifest_artifacts) else {
            audit.unreadable_manifests.push(name);
            continue;
        };
        for (digest, _size) in artifacts {
            audit.variants += 1;
            if !digests.contains(digest.as_str()) {
                audit.variants_without_blob += 1;
            }
        }
    }
    for name in &blob_names {
        let whole = match inventory.read("get blob", name, MAX_AUDITED_BYTES)? {
            // Removed since the listing (evicted, or by an operator).
            Stored::Absent => continue,
            Stored::Value(bytes) => {
                fingerprint::Digest::of_bytes(&bytes).to_hex() == inventory.digest_of(name)
            }
            Stored::TooLarge => false,
        };
        audit.blobs += 1;
        if !whole {
            audit.corrupt_blobs.push(name.clone());
        }
    }
    Ok(audit)
}
