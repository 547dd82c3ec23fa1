//! A Redis remote tier for `jit-cache`: the hosts of a fleet share compiled kernels, and one host
//! compiles each kernel while the others wait for it.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use jit_cache::{Cache, CacheOptions, RemoteMode};
//! let remote = jit_cache_redis::remote(
//!     "redis+unix:///run/redis/redis.sock",
//!     RemoteMode::ReadWrite,
//!     jit_cache_redis::RedisOptions::default(),
//! )?;
//! let cache = Cache::open_with("/var/cache/kernels", CacheOptions::default().remote(remote))?;
//! # let _ = cache; Ok(()) }
//! ```
//!
//! Store layout, under a namespace prefix (default `jit-cache`): `<ns>:m:<key>` a key's manifest
//! (JSON, replaced by a compare-and-set script), `<ns>:b:<blake3>` an artifact (`SET NX`: never
//! overwritten), `<ns>:f:<key>` a shared compile failure (short expiry), `<ns>:l:<key>` the
//! compile lease (`SET NX PX` with a token; renewed and released by compare-and-* scripts).
//!
//! # Guarantees
//! - Every read is bounded: `GETRANGE 0 <limit>` reads at most one byte past what the caller
//!   accepts, so an oversized value is refused without being transferred whole.
//! - Connect timeout (default 100 ms, covering the handshake) and per-read/write I/O timeout
//!   (default 500 ms) on every connection; nothing is retried here (the cache skips a failing
//!   tier for the rest of the process).
//! - A read-only ACL user works: reads need only `GETRANGE` (and `PING` for [`RedisTier`]'s
//!   health); its refused writes (`NOPERM`) stop writes, never reads or builds.
//!
//! The settings (`JIT_CACHE_REMOTE_*`), the configuration [`Error`] and the [`Audit`] are
//! `jit-cache-remote`'s, shared with the S3 tier; [`remote_from_settings`] maps the settings onto
//! this tier.
//!
//! # Limitations
//! - No TLS: `rediss://` URLs are refused with a message (the client is built without a TLS
//!   stack). Use a Unix socket or a TLS tunnel.
//! - With a TTL, a blob uploaded earlier keeps its first expiry (`SET NX` does not extend it), so
//!   a manifest may outlive its blob: the cache treats that as a miss.
//! - Redis Cluster is not supported (the keys of one kernel are not hash-tagged together).
#![deny(missing_docs)]

mod audit;
mod client;
mod options;
mod settings;
mod tier;

#[cfg(feature = "test-server")]
pub mod test_server;

pub use client::RedisTier;
pub use jit_cache_remote::{Audit, Error};
pub use options::RedisOptions;
pub use settings::remote_from_settings;

use jit_cache::{Remote, RemoteMode, RemotePolicy};

/// A [`Remote`] on the Redis server at `url`, in `mode`, with the default policy.
///
/// # Errors
/// As [`RedisTier::open`].
pub fn remote(url: &str, mode: RemoteMode, options: RedisOptions) -> Result<Remote, Error> {
    let tier = RedisTier::open(url, options)?;
    Ok(Remote::new(tier).with_policy(RemotePolicy::default().mode(mode)))
}
