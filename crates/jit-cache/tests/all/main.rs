//! Integration tests of the JIT cache, against the real nvcc (`cargo xtask setup` installs it;
//! `NVCC` selects it). Fake compilers appear only to force failures.
//! The command line's tests live with it, in `crates/jit-cache-cli`.

mod support;

mod corruption;
mod eviction;
mod freshness;
mod full_disk;
mod team_root;
mod verify_recheck;
