//! The store as `jit_cache_remote::audit` checks it: manifests and blobs listed (ListObjectsV2,
//! page by page), each object read bounded.

use crate::objects::Fetched;
use crate::records::{space_prefix, Space};
use crate::tier::S3Tier;
use jit_cache::TierError;
use jit_cache_remote::{Audit, Inventory, Stored};

impl S3Tier {
    /// Checks the store: every manifest parses, which of its variants' blobs exist, and every
    /// blob hashes to its name. Reads everything (an operator's tool and the crash tests'
    /// checker); see [`Audit`].
    ///
    /// # Errors
    /// The first failed request.
    pub fn audit(&self) -> Result<Audit, TierError> {
        jit_cache_remote::audit(self)
    }
}

impl Inventory for S3Tier {
    fn manifest_names(&self) -> Result<Vec<String>, TierError> {
        self.objects
            .list(&space_prefix(&self.objects.prefix, Space::Manifest))
    }

    fn blob_names(&self) -> Result<Vec<String>, TierError> {
        self.objects
            .list(&space_prefix(&self.objects.prefix, Space::Blob))
    }

    fn digest_of<'a>(&self, blob_name: &'a str) -> &'a str {
        // `<prefix>/b/<d0d1>/<digest>`.
        blob_name.rsplit('/').next().unwrap_or_default()
    }

    fn read(&self, op: &'static str, name: &str, limit: usize) -> Result<Stored, TierError> {
        Ok(match self.objects.fetch(op, name, limit)? {
            Fetched::Absent => Stored::Absent,
            Fetched::Value { bytes, .. } => Stored::Value(bytes),
            Fetched::TooLarge { .. } => Stored::TooLarge,
        })
    }
}
