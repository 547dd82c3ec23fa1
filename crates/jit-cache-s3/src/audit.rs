//! An operator's check of the store (and the crash tests' checker): every manifest parses,
//! which of its variants' blobs exist, and every blob hashes to its name. Reads everything.

use crate::records::{space_prefix, Space};
use crate::store::{Fetched, S3Tier};
use jit_cache::TierError;
use std::collections::HashSet;

/// The largest object the audit reads whole (the cache fetches no artifact above 1 GiB).
const MAX_AUDITED_BYTES: usize = 1 << 30;

/// What [`S3Tier::audit`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Audit {
    /// Manifests under the prefix.
    pub manifests: usize,
    /// Manifests that do not parse (readers treat them as misses).
    pub unreadable_manifests: Vec<String>,
    /// Variants the manifests name.
    pub variants: usize,
    /// Variants whose blob is absent (deleted, lost): misses.
    pub variants_without_blob: usize,
    /// Blobs under the prefix.
    pub blobs: usize,
    /// Blobs whose content does not hash to their name.
    pub corrupt_blobs: Vec<String>,
}

impl S3Tier {
    /// Checks the store; see [`Audit`].
    ///
    /// # Errors
    /// The first failed request.
    pub fn audit(&self) -> Result<Audit, TierError> {
        let mut audit = Audit::default();
        let blob_names = self.list(&space_prefix(&self.prefix, Space::Blob))?;
        let digests: HashSet<&str> = blob_names
            .iter()
            .filter_map(|name| name.rsplit('/').next())
            .collect();
        for name in self.list(&space_prefix(&self.prefix, Space::Manifest))? {
            let bytes = match self.fetch("get manifest", &name, MAX_AUDITED_BYTES)? {
                // Replaced or removed since the listing.
                Fetched::Absent => continue,
                Fetched::Value { bytes, .. } => Some(bytes),
                Fetched::TooLarge { .. } => None,
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
            let digest = name.rsplit('/').next().unwrap_or_default();
            let whole = match self.fetch("get blob", name, MAX_AUDITED_BYTES)? {
                // Removed since the listing (by an operator: the tier never removes a blob).
                Fetched::Absent => continue,
                Fetched::Value { bytes, .. } => {
                    fingerprint::Digest::of_bytes(&bytes).to_hex() == digest
                }
                Fetched::TooLarge { .. } => false,
            };
            audit.blobs += 1;
            if !whole {
                audit.corrupt_blobs.push(name.clone());
            }
        }
        Ok(audit)
    }
}
