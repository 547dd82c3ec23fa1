//! An S3 remote tier for `jit-cache`: the hosts of a fleet share compiled kernels through a
//! bucket, and one host compiles each kernel while the others wait for it. For fleets whose
//! kernels outgrow a Redis server's memory.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use jit_cache::{Cache, CacheOptions, RemoteMode};
//! // AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN.
//! let config = jit_cache_s3::S3Config::from_env("s3://kernels/fleet-a")?;
//! let remote = jit_cache_s3::remote(config, RemoteMode::ReadWrite)?;
//! let cache = Cache::open_with("/var/cache/kernels", CacheOptions::default().remote(remote))?;
//! # let _ = cache; Ok(()) }
//! ```
//!
//! Store layout, under the URL's prefix (default `jit-cache`): `<p>/m/<k0k1>/<key>` a key's
//! manifest (JSON, replaced by compare-and-set on its ETag), `<p>/b/<d0d1>/<blake3>` an artifact
//! (create-only: never overwritten but to repair a corrupt one), `<p>/f/<key>` a shared compile
//! failure, `<p>/l/<key>` the compile lease, `<p>/probe/` the conditional-write probe's
//! short-lived objects. Blobs and manifests fan out under 256 prefixes.
//!
//! # Guarantees
//! - Every read is bounded: `Range: bytes=0-<limit>` asks for at most one byte past what the
//!   caller accepts, and no more than that is read even from a server that ignores the range.
//! - Every upload carries `x-amz-checksum-sha256`: a body changed on the way is refused by the
//!   server (`BadDigest`), never stored. (SeaweedFS does not check `x-amz-content-sha256`
//!   against the body; the checksum header it does.)
//! - Manifests are replaced only if the version read is still there (`If-Match: <etag>`); blobs,
//!   leases are created only if absent (`If-None-Match: *`); a lease is taken over (`If-Match`)
//!   only once its expiry, written on the server's clock, has passed by the server's `Date`,
//!   and released by a DELETE of that version only.
//! - Before its first lease or manifest update a process checks that the server honours
//!   conditional writes (a second create-only PUT, a PUT and a DELETE of a wrong version must
//!   each fail). If one does not, coordination is refused: the cache warns once and writes
//!   nothing from that process; reads go on.
//! - Connect timeout (default 100 ms) also bounds a process's whole first request, so a server
//!   that accepts connections and never answers (stopped) costs one such timeout; later requests
//!   each get the I/O timeout (default 1 s). Nothing is retried here.
//! - A missing bucket, a refused signature or access key, a wrong region are errors whose
//!   message says what to fix (and [`jit_cache::Remote::health`] reports them), never a quiet
//!   miss; a refused write (a read-only identity) stops writes only.
//!
//! The settings (`JIT_CACHE_REMOTE_*`), the configuration [`Error`] and the [`Audit`] are
//! `jit-cache-remote`'s, shared with the Redis tier; [`remote_from_settings`] maps the settings
//! onto this tier.
//!
//! # Limitations
//! - Credentials come from the `AWS_*` variables or [`Credentials`] only: no configuration
//!   file, profile, SSO or instance role. No TLS unless the `tls` feature is on (AWS itself
//!   needs it). No multipart uploads: an artifact is one PUT (S3's limit is 5 GB; the cache's
//!   1 GiB).
//! - S3 has no per-object expiry: a lease or failure record carries its own and is ignored once
//!   it passed, but stays until replaced. Expire old objects with a lifecycle rule on the
//!   bucket (`<p>/f/`, `<p>/l/`, `<p>/probe/` after a day; manifests and blobs as the fleet
//!   wants).
//! - `Date` has whole seconds: a dead holder's lease delays the fleet by its expiry plus up to
//!   two seconds.
//! - A compare-and-set needs the server to change the ETag when the content changes (every S3
//!   server does for a single PUT).
#![deny(missing_docs)]

mod audit;
mod client;
mod config;
mod date;
mod objects;
mod probe;
mod records;
mod settings;
mod sigv4;
mod tier;

#[cfg(feature = "test-server")]
pub mod test_server;

pub use config::{
    Addressing, S3Config, ACCESS_KEY_ENV, DEFAULT_PREFIX, DEFAULT_REGION_ENV, ENDPOINT_ENV,
    REGION_ENV, S3_ENDPOINT_ENV, SECRET_KEY_ENV, SESSION_TOKEN_ENV,
};
pub use jit_cache_remote::{Audit, Error};
pub use settings::remote_from_settings;
pub use sigv4::Credentials;
pub use tier::S3Tier;

use jit_cache::{Remote, RemoteMode, RemotePolicy};

/// A [`Remote`] on the bucket `config` names, in `mode`, with the default policy.
///
/// # Errors
/// As [`S3Tier::open`].
pub fn remote(config: S3Config, mode: RemoteMode) -> Result<Remote, Error> {
    let tier = S3Tier::open(config)?;
    Ok(Remote::new(tier).with_policy(RemotePolicy::default().mode(mode)))
}
