//! What the fleet tiers share: the `JIT_CACHE_REMOTE_*` settings ([`RemoteSettings`]), the one
//! configuration error ([`Error`]), the store audit written once over an [`Inventory`], and, for
//! tests, a server process of a test's own (feature `test-server`) and the conformance suite
//! every tier runs over its own real server (feature `conformance`, a dev-dependency only).
//!
//! `jit-cache-redis` and `jit-cache-s3` sit on this crate and know nothing of each other;
//! `jit-cache-fleet`, above both, chooses the tier a URL names.
//!
//! # Guarantees
//! - Every setting is read by one function, [`RemoteSettings::from_env`]: unset and empty
//!   variables mean the defaults; a malformed one is an [`Error::Setting`] that names it.
//! - No URL, or mode `off`, is no remote ([`RemoteSettings::active_url`] is None).
//!
//! # Example
//! ```
//! use jit_cache::RemoteMode;
//! use jit_cache_remote::RemoteSettings;
//!
//! let mut settings = RemoteSettings::default();
//! assert_eq!(settings.active_url(), None, "no URL, no remote");
//! settings.url = Some("s3://bucket/kernels".into());
//! settings.mode = Some(RemoteMode::ReadOnly);
//! assert_eq!(settings.active_url(), Some("s3://bucket/kernels"));
//! assert_eq!(settings.policy().mode, RemoteMode::ReadOnly);
//! ```
#![deny(missing_docs)]

mod audit;
mod error;
mod settings;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "test-server")]
pub mod test_server;

pub use audit::{audit, Audit, Inventory, Stored, MAX_AUDITED_BYTES};
pub use error::Error;
pub use settings::{
    RemoteSettings, REMOTE_CONNECT_TIMEOUT_ENV, REMOTE_ENV, REMOTE_IO_TIMEOUT_ENV,
    REMOTE_LEASE_TTL_ENV, REMOTE_MODE_ENV, REMOTE_NAMESPACE_ENV, REMOTE_TTL_ENV,
};
