//! Integration tests of the Redis remote tier against a real `redis-server` (each test starts its
//! own on a Unix socket) and the real nvcc. `cargo xtask setup` installs both. The fleet tiers'
//! conformance suite runs here on Redis (`conformance::`); `faults` holds what is Redis's own.

mod support;

mod faults;

jit_cache_remote::conformance_suite!(crate::support::Server);
