//! The Rust library's peer of `Cache.get_or_build` for `cargo xtask bench python`: repeated
//! hits of one request, timed one by one.
//!
//! `hit_loop ROOT SOURCE INCLUDE_DIR ROUNDS` prints one line per hit: its time in nanoseconds.

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [root, source, include, rounds] = args.as_slice() else {
        return Err("usage: hit_loop ROOT SOURCE INCLUDE_DIR ROUNDS".into());
    };
    let rounds: usize = rounds.parse()?;
    let cache = jit_cache::Cache::open(root)?;
    let spec = jit_cache::KernelSpec::from_file(source).include_dir(include);
    // The first answer may be a build; every later one must be a hit.
    cache.get_or_build(&spec)?;
    for _ in 0..rounds {
        let started = Instant::now();
        let answer = cache.get_or_build(&spec)?;
        let took = started.elapsed();
        if answer.outcome != jit_cache::Outcome::Hit {
            return Err(format!("expected a hit, got {}", answer.outcome).into());
        }
        println!("{}", took.as_nanos());
    }
    Ok(())
}
