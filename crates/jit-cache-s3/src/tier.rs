//! The [`RemoteTier`] on S3: manifests replaced by compare-and-set on their ETag (`If-Match`),
//! blobs written create-only (`If-None-Match: *`) with a checksum, every read bounded
//! (`Range`), failures and leases carrying their expiry on the server's clock, leases taken
//! create-only, taken over and renewed by `If-Match`, released by a conditional DELETE.

use crate::client::Condition;
use crate::config::S3Config;
use crate::objects::{unexpected, Fetched, Objects, Written};
use crate::probe::Coordination;
use crate::records::{self, decode_failure, encode_failure, object_name, Lease, Space};
use fingerprint::Digest;
use jit_cache::{Expected, RemoteTier, TierError};
use jit_cache_remote::Error;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The most manifest versions remembered (one per key this process touched; past it the memo
/// starts again, and a compare-and-set reads the version first).
const MAX_VERSIONS: usize = 4096;

/// An S3 bucket (under a prefix) as a [`RemoteTier`]. Connects lazily: opening makes no
/// request, so a process that only hits its local cache never touches the network.
pub struct S3Tier {
    pub(crate) objects: Objects,
    /// Whether the server honours conditional writes, probed before the first coordinating
    /// write of the process.
    coordination: Coordination,
    /// The version (ETag) of each manifest as this process last read or wrote it, so that a
    /// compare-and-set needs no second read.
    versions: Mutex<HashMap<String, (Seen, String)>>,
}

impl std::fmt::Debug for S3Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Tier")
            .field("location", &self.objects.where_())
            .field("client", &self.objects.client)
            .finish_non_exhaustive()
    }
}

/// What this process saw of a manifest version.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// A value with this blake3 digest.
    Value(Digest),
    /// A value longer than this many bytes.
    LongerThan(usize),
}

impl S3Tier {
    /// A tier for `config` (checked now; no request is made until the first operation).
    ///
    /// # Errors
    /// When the endpoint cannot be used (an `https://` one without the `tls` feature, ...).
    pub fn open(config: S3Config) -> Result<S3Tier, Error> {
        Ok(S3Tier {
            objects: Objects::open(&config)?,
            coordination: Coordination::default(),
            versions: Mutex::new(HashMap::new()),
        })
    }

    fn remember(&self, name: &str, seen: Seen, etag: Option<String>) {
        let Some(etag) = etag else {
            return;
        };
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        if versions.len() >= MAX_VERSIONS {
            versions.clear();
        }
        versions.insert(name.to_string(), (seen, etag));
    }

    /// The version of `name` that holds what the writer `expected`; None when it holds something
    /// else now.
    fn version_of(&self, name: &str, expected: Expected<'_>) -> Result<Option<String>, TierError> {
        let wanted = match expected {
            Expected::Absent => return Ok(None),
            Expected::Value(bytes) => Seen::Value(Digest::of_bytes(bytes)),
            Expected::LongerThan(n) => Seen::LongerThan(n),
        };
        let remembered = self
            .versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .filter(|(seen, _)| *seen == wanted)
            .map(|(_, etag)| etag.clone());
        if remembered.is_some() {
            return Ok(remembered);
        }
        let op = "read manifest version";
        Ok(
            match (
                expected,
                self.objects.fetch(op, name, expected_limit(expected))?,
            ) {
                (Expected::Value(bytes), Fetched::Value { bytes: now, etag }) if now == bytes => {
                    etag
                }
                (Expected::LongerThan(_), Fetched::TooLarge { etag }) => etag,
                _ => None,
            },
        )
    }

    /// The server's clock now (this host's clock before the first reply).
    fn server_now_ms(&self) -> u64 {
        self.objects.client.server_now_ms().unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis() as u64
        })
    }

    fn lease_for(&self, token: &str, ttl: Duration) -> Lease {
        Lease {
            token: token.to_string(),
            expires_ms: records::lease_expiry(self.server_now_ms(), ttl),
        }
    }

    /// The lease object of `name`, None when absent.
    fn read_lease(&self, op: &'static str, name: &str) -> Result<Option<LeaseObject>, TierError> {
        Ok(
            match self.objects.fetch(op, name, records::MAX_LEASE_BYTES)? {
                Fetched::Absent => None,
                Fetched::Value { bytes, etag } => Some(LeaseObject {
                    lease: Lease::decode(&bytes),
                    etag,
                }),
                Fetched::TooLarge { etag } => Some(LeaseObject { lease: None, etag }),
            },
        )
    }
}

/// A lease object as read: its lease (None for garbage, which anyone may take over) and its
/// version.
struct LeaseObject {
    lease: Option<Lease>,
    etag: Option<String>,
}

/// How much of a manifest to read to compare it with `expected`.
fn expected_limit(expected: Expected<'_>) -> usize {
    match expected {
        Expected::Absent => 0,
        Expected::Value(bytes) => bytes.len(),
        Expected::LongerThan(n) => n,
    }
}

impl RemoteTier for S3Tier {
    fn location(&self) -> String {
        self.objects.where_().to_string()
    }

    fn get_manifest(&self, key: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError> {
        let op = "get manifest";
        let name = object_name(&self.objects.prefix, Space::Manifest, key);
        match self.objects.fetch(op, &name, limit)? {
            Fetched::Absent => Ok(None),
            Fetched::Value { bytes, etag } => {
                self.remember(&name, Seen::Value(Digest::of_bytes(&bytes)), etag);
                Ok(Some(bytes))
            }
            Fetched::TooLarge { etag } => {
                self.remember(&name, Seen::LongerThan(limit), etag);
                Err(too_large(op, &name, limit))
            }
        }
    }

    fn replace_manifest(
        &self,
        key: &str,
        expected: Expected<'_>,
        new: &[u8],
    ) -> Result<bool, TierError> {
        let op = "replace manifest";
        let name = object_name(&self.objects.prefix, Space::Manifest, key);
        self.coordination.check(&self.objects, op, &name)?;
        let condition = match expected {
            Expected::Absent => Condition::Absent,
            _ => match self.version_of(&name, expected)? {
                Some(etag) => Condition::Version(etag),
                // Another writer replaced it since: the caller reads again.
                None => return Ok(false),
            },
        };
        match self.objects.put(op, &name, new, condition)? {
            Written::Stored(etag) => {
                self.remember(&name, Seen::Value(Digest::of_bytes(new)), etag);
                Ok(true)
            }
            Written::ConditionFailed => Ok(false),
        }
    }

    fn get_blob(&self, digest: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError> {
        let op = "get blob";
        let name = object_name(&self.objects.prefix, Space::Blob, digest);
        match self.objects.fetch(op, &name, limit)? {
            Fetched::Absent => Ok(None),
            Fetched::Value { bytes, .. } => Ok(Some(bytes)),
            Fetched::TooLarge { .. } => Err(too_large(op, &name, limit)),
        }
    }

    fn put_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), TierError> {
        let name = object_name(&self.objects.prefix, Space::Blob, digest);
        // Create-only: a blob already there is the same content (or one that a reader will find
        // corrupt and repair); a refused condition is success.
        self.objects
            .put("put blob", &name, bytes, Condition::Absent)?;
        Ok(())
    }

    fn repair_blob(&self, digest: &str, bytes: &[u8]) -> Result<(), TierError> {
        let name = object_name(&self.objects.prefix, Space::Blob, digest);
        match self
            .objects
            .put("repair blob", &name, bytes, Condition::None)?
        {
            Written::Stored(_) => Ok(()),
            Written::ConditionFailed => Err(unexpected(
                "repair blob",
                &name,
                "a precondition failure to an unconditional PUT",
            )),
        }
    }

    fn get_failure(&self, key: &str, limit: usize) -> Result<Option<Vec<u8>>, TierError> {
        let op = "get failure";
        let name = object_name(&self.objects.prefix, Space::Failure, key);
        let bytes = match self
            .objects
            .fetch(op, &name, limit + records::MAX_FAILURE_HEADER)?
        {
            Fetched::Absent => return Ok(None),
            Fetched::Value { bytes, .. } => bytes,
            Fetched::TooLarge { .. } => return Err(too_large(op, &name, limit)),
        };
        // Garbage is no failure; an expired one is gone (S3 keeps it until it is replaced).
        let Some((expires_ms, record)) = decode_failure(&bytes) else {
            return Ok(None);
        };
        if self.server_now_ms() > expires_ms {
            return Ok(None);
        }
        if record.len() > limit {
            return Err(too_large(op, &name, limit));
        }
        Ok(Some(record.to_vec()))
    }

    fn put_failure(&self, key: &str, record: &[u8], ttl: Duration) -> Result<(), TierError> {
        let name = object_name(&self.objects.prefix, Space::Failure, key);
        let expires_ms = self.server_now_ms() + ttl.as_millis() as u64;
        self.objects.put(
            "put failure",
            &name,
            &encode_failure(record, expires_ms),
            Condition::None,
        )?;
        Ok(())
    }

    fn acquire_lease(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, TierError> {
        let op = "acquire lease";
        let name = object_name(&self.objects.prefix, Space::Lease, key);
        self.coordination.check(&self.objects, op, &name)?;
        let body = self.lease_for(token, ttl).encode();
        if let Written::Stored(_) = self.objects.put(op, &name, &body, Condition::Absent)? {
            return Ok(true);
        }
        // Someone's lease is there: taken over only once it expired on the server's clock (the
        // reply's `Date`, never ahead of it), and only if it is still that version.
        let Some(LeaseObject { lease, etag }) = self.read_lease(op, &name)? else {
            // Released meanwhile: the caller's next look takes it.
            return Ok(false);
        };
        let now = self.server_now_ms();
        if lease.is_some_and(|lease| lease.live_at(now)) {
            return Ok(false);
        }
        let Some(etag) = etag else {
            return Ok(false);
        };
        let body = self.lease_for(token, ttl).encode();
        Ok(matches!(
            self.objects
                .put(op, &name, &body, Condition::Version(etag))?,
            Written::Stored(_)
        ))
    }

    fn renew_lease(&self, key: &str, token: &str, ttl: Duration) -> Result<bool, TierError> {
        let op = "renew lease";
        let name = object_name(&self.objects.prefix, Space::Lease, key);
        let Some(LeaseObject {
            lease: Some(lease),
            etag: Some(etag),
        }) = self.read_lease(op, &name)?
        else {
            return Ok(false);
        };
        if lease.token != token {
            return Ok(false);
        }
        let body = self.lease_for(token, ttl).encode();
        Ok(matches!(
            self.objects
                .put(op, &name, &body, Condition::Version(etag))?,
            Written::Stored(_)
        ))
    }

    fn release_lease(&self, key: &str, token: &str) -> Result<(), TierError> {
        let op = "release lease";
        let name = object_name(&self.objects.prefix, Space::Lease, key);
        if let Some(LeaseObject {
            lease: Some(lease),
            etag: Some(etag),
        }) = self.read_lease(op, &name)?
        {
            if lease.token == token {
                // Only that version: a lease another host took over meanwhile stays.
                self.objects.delete(op, &name, Condition::Version(etag))?;
            }
        }
        Ok(())
    }

    fn lease_held(&self, key: &str) -> Result<bool, TierError> {
        let name = object_name(&self.objects.prefix, Space::Lease, key);
        Ok(match self.read_lease("look at lease", &name)? {
            Some(LeaseObject {
                lease: Some(lease), ..
            }) => lease.live_at(self.server_now_ms()),
            _ => false,
        })
    }

    fn health(&self) -> Result<(), TierError> {
        // A bounded read of a name nobody writes: absent is healthy; a missing bucket, a refused
        // signature or credential is an error with its reason, never a quiet miss.
        let name = format!("{}/health", self.objects.prefix);
        self.objects.fetch("health", &name, 0)?;
        Ok(())
    }
}

fn too_large(op: &'static str, name: &str, limit: usize) -> TierError {
    TierError::new(
        op,
        name,
        jit_cache::TierErrorKind::TooLarge,
        format!("longer than the {limit} bytes accepted"),
    )
}
