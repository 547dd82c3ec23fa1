//! `cargo xtask crash-test`: kill -9 fault injection against the cache (see issue 7).

use anyhow::{bail, Result};

pub fn run(_args: &[String]) -> Result<()> {
    bail!("crash-test is not wired yet")
}
