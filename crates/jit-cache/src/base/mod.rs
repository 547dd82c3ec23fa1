//! The foundations: what every layer above may use, knowing nothing of entries, kernels or the
//! store. Each module imports nothing of the crate but `error` and its siblings here.

pub(crate) mod event_log;
#[cfg(feature = "failpoints")]
pub(crate) mod failpoints;
#[cfg(not(loom))]
pub(crate) mod fork;
pub(crate) mod fstype;
pub(crate) mod grace;
pub(crate) mod host;
pub(crate) mod pass;
pub(crate) mod redact;
pub(crate) mod scan;
pub(crate) mod stamp;
pub(crate) mod sync;
pub(crate) mod unproven;
pub(crate) mod words;
