//! Integration tests of the Redis remote tier against a real `redis-server` (each test starts its
//! own on a Unix socket) and the real nvcc. `cargo xtask setup` installs both.

mod support;

mod faults;
mod sharing;
mod store;
