//! The fleet tier a URL names, configured from the shared settings: `s3://bucket/prefix` is the
//! S3 tier (`jit-cache-s3`), anything else Redis (`jit-cache-redis`). The `jit-cache` command
//! and the Python package both open their remote here, so one URL means one thing everywhere.
//! The settings and the error are `jit-cache-remote`'s, which both tiers share; they are
//! re-exported here so that an entry point needs this crate alone.
//!
//! # Guarantees
//! - The settings both tiers share (`JIT_CACHE_REMOTE_MODE`, the connect and I/O timeouts, the
//!   lease expiry) mean the same for either; a Redis-only setting (`JIT_CACHE_REMOTE_TTL`,
//!   `JIT_CACHE_REMOTE_NAMESPACE`) given with an S3 URL is refused, not ignored.
//! - No URL, or mode `off`, is no remote (`Ok(None)`).
//!
//! # Example
//! ```
//! use jit_cache_fleet::RemoteSettings;
//!
//! let mut settings = RemoteSettings::default();
//! settings.url = Some("s3://bucket/kernels".into());
//! settings.ttl = Some(std::time::Duration::from_secs(60));
//! let refused = jit_cache_fleet::remote(settings).unwrap_err();
//! assert!(refused.to_string().contains("JIT_CACHE_REMOTE_TTL"), "{refused}");
//! assert!(jit_cache_fleet::remote(RemoteSettings::default()).unwrap().is_none());
//! ```
#![deny(missing_docs)]

use jit_cache::Remote;
pub use jit_cache_remote::{Error, RemoteSettings};

/// Whether `url` names the S3 tier.
fn is_s3(url: &str) -> bool {
    url.starts_with("s3://")
}

/// The remote `settings` describe: the S3 tier for an `s3://` URL (endpoint, region and
/// credentials from the `AWS_*` variables), else Redis; `None` without a URL or with mode `off`.
///
/// # Errors
/// A URL or setting the tier it names cannot use.
pub fn remote(settings: RemoteSettings) -> Result<Option<Remote>, Error> {
    if settings.url.as_deref().is_some_and(is_s3) {
        jit_cache_s3::remote_from_settings(&settings)
    } else {
        jit_cache_redis::remote_from_settings(&settings)
    }
}
