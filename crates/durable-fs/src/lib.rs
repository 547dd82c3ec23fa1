//! Crash-safe file writes: put, fsync, atomic rename, staged directory commits, temp sweeps and file locks.
#![deny(missing_docs)]
