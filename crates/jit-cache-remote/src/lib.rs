//! The fleet tier a URL names, configured from the shared settings: `s3://bucket/prefix` is the
//! S3 tier (`jit-cache-s3`), anything else Redis (`jit-cache-redis`). The `jit-cache` command
//! and the Python package both open their remote here, so one URL means one thing everywhere.
//!
//! # Guarantees
//! - The settings both tiers share (`JIT_CACHE_REMOTE_MODE`, the connect and I/O timeouts, the
//!   lease expiry) mean the same for either; a Redis-only setting (`JIT_CACHE_REMOTE_TTL`,
//!   `JIT_CACHE_REMOTE_NAMESPACE`) given with an S3 URL is refused, not ignored.
//! - No URL, or mode `off`, is no remote (`Ok(None)`).
//!
//! # Example
//! ```
//! use jit_cache_redis::RemoteSettings;
//!
//! let mut settings = RemoteSettings::default();
//! settings.url = Some("s3://bucket/kernels".into());
//! settings.ttl = Some(std::time::Duration::from_secs(60));
//! let refused = jit_cache_remote::remote(settings).unwrap_err();
//! assert!(refused.to_string().contains("JIT_CACHE_REMOTE_TTL"), "{refused}");
//! assert!(jit_cache_remote::remote(RemoteSettings::default()).unwrap().is_none());
//! ```
#![deny(missing_docs)]

use jit_cache::{Remote, RemoteMode, RemotePolicy};
use jit_cache_redis::RemoteSettings;

/// Why a remote could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Redis remote's setting or connection options.
    #[error(transparent)]
    Redis(#[from] jit_cache_redis::Error),
    /// An S3 remote's URL, credentials or settings.
    #[error(transparent)]
    S3(#[from] jit_cache_s3::Error),
}

/// Whether `url` names the S3 tier.
fn is_s3(url: &str) -> bool {
    url.starts_with("s3://")
}

/// The remote `settings` describe: the S3 tier for an `s3://` URL (endpoint, region and
/// credentials from the `AWS_*` variables), else Redis; `None` without a URL or with mode `off`.
pub fn remote(settings: RemoteSettings) -> Result<Option<Remote>, Error> {
    if settings.url.as_deref().is_some_and(is_s3) {
        s3(settings)
    } else {
        Ok(settings.into_remote()?)
    }
}

fn s3(settings: RemoteSettings) -> Result<Option<Remote>, Error> {
    let (Some(url), mode) = (settings.url, settings.mode.unwrap_or(RemoteMode::ReadWrite)) else {
        return Ok(None);
    };
    if mode == RemoteMode::Off {
        return Ok(None);
    }
    if settings.ttl.is_some() {
        return Err(jit_cache_s3::Error::Setting {
            var: jit_cache_redis::REMOTE_TTL_ENV,
            reason: "S3 objects have no expiry of their own: expire them with a lifecycle rule \
                     on the bucket's prefix"
                .into(),
        }
        .into());
    }
    if settings.namespace.is_some() {
        return Err(jit_cache_s3::Error::Setting {
            var: jit_cache_redis::REMOTE_NAMESPACE_ENV,
            reason: "an S3 remote's prefix is the URL's path: s3://bucket/prefix".into(),
        }
        .into());
    }
    let config = jit_cache_s3::S3Config::from_env(&url)?;
    let (connect, io) = (config.connect_timeout, config.io_timeout);
    let config = config.timeouts(
        settings.connect_timeout.unwrap_or(connect),
        settings.io_timeout.unwrap_or(io),
    );
    let mut policy = RemotePolicy::default().mode(mode);
    if let Some(ttl) = settings.lease_ttl {
        policy = policy.lease_ttl(ttl);
    }
    Ok(Some(
        jit_cache_s3::remote(config, mode)?.with_policy(policy),
    ))
}
