//! Project automation in the cargo-xtask convention: `cargo xtask <command>`.
//!
//! Commands:
//! - `test`: the one test command (formatting, lints, docs, nextest, doctests, loom models).
//! - `demo`: the main job: build the example kernels through the JIT cache and show hits and rebuilds.
//! - `setup`: install what the tests need (Debian packages when root, a venv with the pip nvcc,
//!   one with maturin and pytest for the Python package).
//! - `bench <crate>`: side-by-side benchmarks of one crate against its peers.
//! - `crash-test`: kill -9 fault injection against the cache.
//! - `gpu-check`: the GPU run (see `gpu_check.rs`).
//! - `layers`: the module graph of every crate checked for import cycles and declared layers
//!   (`layers.rs`; also a step of `test`).
//! - `package-check`: `durable-fs`'s `.crate` built and run outside the workspace (also a step
//!   of `test`).
//! - `wheel`: the Python package's manylinux wheel, in `target/wheels` (see `wheel.rs`).

mod bench;
mod crash_test;
mod demo;
mod gpu_check;
mod layers;
mod package_check;
mod python;
mod selection;
mod setup;
mod test;
mod torch;
mod util;
mod venv;
mod wheel;

use anyhow::{bail, Result};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_else(|| "help".to_string());
    let rest: Vec<String> = args.collect();
    match command.as_str() {
        "test" => test::run(&rest),
        "setup" => setup::run(&rest).map(|paths| println!("nvcc: {}", paths.nvcc.display())),
        "bench" => bench::run(&rest),
        "demo" => demo::run(&rest),
        "crash-test" => crash_test::run(&rest),
        "gpu-check" => gpu_check::run(&rest),
        "package-check" => package_check::run(),
        "layers" => layers::run(&rest),
        "wheel" => wheel::run(&rest),
        "help" | "--help" | "-h" => {
            println!("usage: cargo xtask <test|demo|setup|bench CRATE|crash-test|gpu-check|package-check|layers|wheel>");
            Ok(())
        }
        other => bail!("unknown xtask command `{other}` (try `cargo xtask help`)"),
    }
}
