//! Integration tests of the S3 remote tier against a real SeaweedFS server (each test starts
//! its own `weed mini` on loopback ports) and the real nvcc. `cargo xtask setup` installs both.
//! The fleet tiers' conformance suite runs here on S3 (`conformance::`); `faults` and
//! `protocol` hold what is S3's own.

mod support;

mod faults;
mod protocol;

jit_cache_remote::conformance_suite!(crate::support::Server);
