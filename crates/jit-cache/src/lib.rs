//! A content-keyed, crash-safe, single-flight cache of compiled GPU kernels.
#![deny(missing_docs)]
