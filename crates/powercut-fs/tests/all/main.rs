//! Integration tests of powercut-fs: POSIX behaviour through the mount, negative controls that
//! must catch broken durable writes, sweeps of a correct put over every crash point, counters
//! and fault injection.

mod controls;
mod counters;
mod durable;
mod posix;
mod sweep;
mod util;
