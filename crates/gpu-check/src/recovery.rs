//! kill -9 of a builder mid-compile, and the next run's recovery.
//!
//! The child (this binary with [`CHILD_FLAG`]) builds a kernel with the failpoint `compiling`
//! armed to pause: it stops itself inside the build, holding the key's lock and its staging
//! directory. The parent waits for its announcement, kills it with SIGKILL, and builds the same
//! kernel: it must neither wait on the dead lock nor fail.

use crate::args::Args;
use crate::table::Table;
use anyhow::{bail, Context, Result};
use jit_cache::{Cache, CacheOptions, KernelSpec, Outcome};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The argument that makes this binary the victim builder.
pub const CHILD_FLAG: &str = "--recovery-child";

fn spec(dir: &std::path::Path) -> KernelSpec {
    KernelSpec::from_text(
        "recovery",
        "recovery.cu",
        "extern \"C\" __global__ void recovery(float* x) { x[threadIdx.x] += 1.0f; }",
    )
    .define("RECOVERY_DIR", Some(&dir.display().to_string()))
}

/// The victim: build once and (if the failpoint is armed) stop inside the build.
pub fn child_main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(2);
    let (Some(root), Some(dir)) = (args.next(), args.next()) else {
        return std::process::ExitCode::from(2);
    };
    let result = Cache::open(&root).and_then(|c| c.get_or_build(&spec(std::path::Path::new(&dir))));
    match result {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("child: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

pub fn run(args: &Args, nvcc: &nvcc::Nvcc, table: &mut Table) -> Result<bool> {
    let root = args.work.join("recovery-cache");
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg(CHILD_FLAG)
        .arg(&root)
        .arg(&args.work)
        .env("NVCC", nvcc.path())
        .env("JIT_CACHE_FAILPOINT", "compiling:pause")
        .stderr(Stdio::piped())
        .spawn()
        .context("spawn the victim builder")?;
    let stderr = child.stderr.take().context("victim stderr")?;
    let mut line = String::new();
    BufReader::new(stderr).read_line(&mut line)?;
    if !line.contains("failpoint compiling") {
        bail!("the victim did not reach the compile: {line}");
    }
    child.kill()?;
    child.wait()?;
    let start = Instant::now();
    let built = Cache::open_with(&root, CacheOptions::default().nvcc(nvcc.clone()))?
        .get_or_build(&spec(&args.work))?;
    let took = start.elapsed();
    let ok = matches!(built.outcome, Outcome::Built | Outcome::Rebuilt { .. })
        && built.warning.is_none();
    table.row(
        "builder killed mid-compile, next run",
        format!("{:.0} ms", took.as_secs_f64() * 1e3),
        if ok { "recovered" } else { "NOT RECOVERED" },
    );
    Ok(ok)
}
