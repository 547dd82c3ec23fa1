//! The one configuration error of the fleet tiers: a URL a tier cannot use, or a malformed
//! `JIT_CACHE_REMOTE_*` / `AWS_*` setting. Both tiers return it, so the command and the Python
//! package print the same message whichever tier a URL names.

/// Why a remote could not be configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL (or an S3 endpoint) is not one the client can use.
    #[error("remote cache URL {url}: {reason}")]
    Url {
        /// The URL, without its password.
        url: String,
        /// Why it is refused.
        reason: String,
    },
    /// A setting from the environment is missing or malformed.
    #[error("{var}: {reason}")]
    Setting {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}
