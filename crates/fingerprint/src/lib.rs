//! Content identity (blake3) of files, trees, toolchains, environment and Python wheels, with a manifest whose diff explains staleness.
#![deny(missing_docs)]
