//! The store as `jit_cache_remote::audit` checks it: manifests and blobs listed by `SCAN` (never
//! `KEYS`, which blocks the server), each value read bounded.

use crate::client::RedisTier;
use jit_cache::{TierError, TierErrorKind};
use jit_cache_remote::{Audit, Inventory, Stored};

impl RedisTier {
    /// Checks the store: every manifest parses, which of its variants' blobs exist, and every
    /// blob hashes to its name. Reads everything (an operator's tool and the crash tests'
    /// checker); see [`Audit`].
    ///
    /// # Errors
    /// The first failed command.
    pub fn audit(&self) -> Result<Audit, TierError> {
        jit_cache_remote::audit(self)
    }
}

impl Inventory for RedisTier {
    fn manifest_names(&self) -> Result<Vec<String>, TierError> {
        self.scan(&self.name('m', "*"))
    }

    fn blob_names(&self) -> Result<Vec<String>, TierError> {
        self.scan(&self.name('b', "*"))
    }

    fn digest_of<'a>(&self, blob_name: &'a str) -> &'a str {
        // `<ns>:b:<digest>`: a digest has no colon, whatever the namespace holds.
        blob_name.rsplit(':').next().unwrap_or_default()
    }

    fn read(&self, op: &'static str, name: &str, limit: usize) -> Result<Stored, TierError> {
        match self.get_bounded(op, name, limit) {
            Ok(Some(bytes)) => Ok(Stored::Value(bytes)),
            Ok(None) => Ok(Stored::Absent),
            Err(e) if e.kind() == TierErrorKind::TooLarge => Ok(Stored::TooLarge),
            Err(e) => Err(e),
        }
    }
}
