//! Integration tests of the S3 remote tier against a real SeaweedFS server (each test starts
//! its own `weed mini` on loopback ports) and the real nvcc. `cargo xtask setup` installs both.

mod support;

mod faults;
mod protocol;
mod sharing;
