//! Integration tests of the JIT cache, against the real nvcc (`cargo xtask setup` installs it;
//! `NVCC` selects it). Fake compilers appear only to force failures.

mod support;

mod cli;
mod corruption;
mod eviction;
mod freshness;
mod full_disk;
mod kills;
mod processes;
