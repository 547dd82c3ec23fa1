//! Integration tests of the `jit-cache` binary, against the real nvcc (`cargo xtask setup`
//! installs it; `NVCC` selects it). Fake compilers appear only to force failures or to hold a
//! builder mid-compile.

mod support;

mod cli;
mod deepgemm;
mod kills;
mod launcher;
mod never_guesses;
mod pack;
mod pipelines;
mod processes;
mod readme;
mod releases;
mod remote;
mod search_props;
mod shim;
mod team_root;
mod traced;
