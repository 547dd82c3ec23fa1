//! The S3 remote the shared `JIT_CACHE_REMOTE_*` settings describe: the mode, the timeouts and
//! the lease expiry as Redis reads them; the endpoint, region and credentials from `AWS_*`; the
//! Redis-only settings refused, not ignored.

use crate::config::S3Config;
use crate::tier::S3Tier;
use jit_cache::Remote;
use jit_cache_remote::{Error, RemoteSettings, REMOTE_NAMESPACE_ENV, REMOTE_TTL_ENV};

/// The S3 remote `settings` describe (its URL `s3://bucket/prefix`, the rest from the `AWS_*`
/// variables); None without a URL or with mode `off`.
///
/// # Errors
/// A Redis-only setting ([`REMOTE_TTL_ENV`], [`REMOTE_NAMESPACE_ENV`]), as
/// [`S3Config::from_env`], or as [`S3Tier::open`].
pub fn remote_from_settings(settings: &RemoteSettings) -> Result<Option<Remote>, Error> {
    let Some(url) = settings.active_url() else {
        return Ok(None);
    };
    if settings.ttl.is_some() {
        return Err(Error::Setting {
            var: REMOTE_TTL_ENV,
            reason: "S3 objects have no expiry of their own: expire them with a lifecycle rule \
                     on the bucket's prefix"
                .into(),
        });
    }
    if settings.namespace.is_some() {
        return Err(Error::Setting {
            var: REMOTE_NAMESPACE_ENV,
            reason: "an S3 remote's prefix is the URL's path: s3://bucket/prefix".into(),
        });
    }
    let config = S3Config::from_env(url)?;
    let (connect, io) = (config.connect_timeout, config.io_timeout);
    let config = config.timeouts(
        settings.connect_timeout.unwrap_or(connect),
        settings.io_timeout.unwrap_or(io),
    );
    let tier = S3Tier::open(config)?;
    Ok(Some(Remote::new(tier).with_policy(settings.policy())))
}
