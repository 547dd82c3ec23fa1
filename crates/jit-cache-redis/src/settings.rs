//! The Redis remote the shared `JIT_CACHE_REMOTE_*` settings describe: each one Redis honours
//! (all of them) mapped onto [`RedisOptions`] and the policy.

use crate::client::RedisTier;
use crate::options::RedisOptions;
use jit_cache::Remote;
use jit_cache_remote::{Error, RemoteSettings};

/// The Redis remote `settings` describe; None without a URL or with mode `off`.
///
/// # Errors
/// As [`RedisTier::open`].
pub fn remote_from_settings(settings: &RemoteSettings) -> Result<Option<Remote>, Error> {
    let Some(url) = settings.active_url() else {
        return Ok(None);
    };
    let mut options = RedisOptions::default().ttl(settings.ttl);
    if let Some(namespace) = &settings.namespace {
        options = options.namespace(namespace.clone());
    }
    if let Some(timeout) = settings.connect_timeout {
        options.connect_timeout = timeout;
    }
    if let Some(timeout) = settings.io_timeout {
        options.io_timeout = timeout;
    }
    let tier = RedisTier::open(url, options)?;
    Ok(Some(Remote::new(tier).with_policy(settings.policy())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jit_cache::RemoteMode;
    use std::time::Duration;

    #[test]
    fn no_url_or_mode_off_means_no_remote_and_settings_reach_the_policy() {
        let none = remote_from_settings(&RemoteSettings::default()).expect("no URL is no error");
        assert!(none.is_none(), "no URL, no remote");
        let mut settings = RemoteSettings::default();
        settings.url = Some("redis+unix:///nowhere.sock".into());
        settings.mode = Some(RemoteMode::Off);
        assert!(
            remote_from_settings(&settings).expect("valid").is_none(),
            "mode off, no remote"
        );
        settings.mode = Some(RemoteMode::ReadOnly);
        settings.lease_ttl = Some(Duration::from_millis(1500));
        let remote = remote_from_settings(&settings)
            .expect("valid")
            .expect("a remote");
        assert_eq!(remote.policy().mode, RemoteMode::ReadOnly);
        assert_eq!(remote.policy().lease_ttl, Duration::from_millis(1500));
        assert_eq!(remote.location(), "redis+unix:///nowhere.sock");
    }
}
