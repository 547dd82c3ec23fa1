//! Integration tests of powercut-fs: POSIX behaviour through the mount, negative controls that
//! must catch broken durable writes and broken jit-cache publications, sweeps of a correct put
//! over every crash point, counters and fault injection.

mod batch;
mod controls;
mod counters;
mod durable;
mod jit_builds;
mod pack_import;
mod posix;
mod sweep;
mod util;
