//! Integration tests of the JIT cache, against the real nvcc (`cargo xtask setup` installs it;
//! `NVCC` selects it). The `g++ -E` fake (`gxx.rs`) serves only tests that need control of timing
//! or signals, and the include property test.
//! The command line's tests live with it, in `crates/jit-cache-cli`.

mod gxx;
mod support;

mod corruption;
mod eviction;
mod freshness;
mod full_disk;
mod include_model;
mod include_props;
mod pack;
mod races_and_causes;
mod store;
mod team_root;
mod verify_recheck;
