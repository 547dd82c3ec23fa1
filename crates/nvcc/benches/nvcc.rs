//! The crate's overhead per compile over invoking nvcc directly.
//!
//! Both contenders compile the same job with the same argv (including `-MD -MF`), interleaved and
//! alternating which goes first, so drift in machine load hits both alike. "direct" is
//! `std::process::Command::status()` on nvcc; "crate" is `Nvcc::compile` (process group,
//! pidfd wait, captured pipes, output checks, depfile parsing). A second table does the same with
//! `/bin/true` to show the absolute per-spawn cost without nvcc's noise.
//!
//! Usage: `cargo bench -p nvcc --bench nvcc -- [--runs N]` with env `NVCC` or a locatable nvcc.

use nvcc::{CompileJob, Nvcc, OutputKind, ProcessRunner, RunOptions, Runner};
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KERNEL: &str = r#"#include <cuda_fp16.h>
template <typename T, int N>
__device__ T scale(T x) { return x * T(N); }
extern "C" __global__ void kernel(__half* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __float2half(scale<float, 3>(in[i]));
}
"#;

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(21), |v| v.parse())?;
    let nvcc = match std::env::var_os("NVCC") {
        Some(path) => Nvcc::at(path)?,
        None => Nvcc::locate()?,
    };
    println!("nvcc {} at {}", nvcc.version()?, nvcc.path().display());
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("kernel.cu");
    std::fs::write(&source, KERNEL)?;
    let output = dir.path().join("kernel.cubin");
    let job = CompileJob::new(&source, &output, OutputKind::Cubin).arch("sm_90");
    let depfile = dir.path().join("direct.d");
    let argv = job.argv(&nvcc, &depfile);

    let direct = |argv: &[OsString]| -> Result<Duration, Box<dyn std::error::Error>> {
        let start = Instant::now();
        let status = Command::new(nvcc.path())
            .args(argv)
            .stdin(Stdio::null())
            .status()?;
        let took = start.elapsed();
        if !status.success() {
            return Err(format!("direct nvcc failed: {status}").into());
        }
        Ok(took)
    };
    let via_crate = || -> Result<Duration, Box<dyn std::error::Error>> {
        let start = Instant::now();
        let compiled = nvcc.compile(&job)?;
        let took = start.elapsed();
        assert!(
            !compiled.headers.is_empty(),
            "the crate returned the headers it parsed"
        );
        Ok(took)
    };
    // Warm the page cache and nvcc's own files once for each.
    direct(&argv)?;
    via_crate()?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..runs {
        if i % 2 == 0 {
            a.push(direct(&argv)?);
            b.push(via_crate()?);
        } else {
            b.push(via_crate()?);
            a.push(direct(&argv)?);
        }
    }
    // Each pair ran back to back, so its ratio cancels the machine's drift; the median of the
    // paired ratios is the headline, the ratio of medians is shown too.
    let mut paired: Vec<f64> = a
        .iter()
        .zip(&b)
        .map(|(x, y)| y.as_secs_f64() / x.as_secs_f64())
        .collect();
    paired.sort_by(f64::total_cmp);
    let paired_median = paired[paired.len() / 2];
    let (da, db) = (median(&mut a), median(&mut b));
    println!("\ncompile sm_90 cubin, {runs} interleaved runs each");
    println!("| contender | median | ratio to direct |");
    println!("| --- | --- | --- |");
    println!(
        "| direct nvcc (Command::status) | {:.1} ms | 1.000 |",
        da.as_secs_f64() * 1e3
    );
    println!(
        "| nvcc crate (Nvcc::compile) | {:.1} ms | {:.3} |",
        db.as_secs_f64() * 1e3,
        db.as_secs_f64() / da.as_secs_f64()
    );
    println!(
        "overhead, ratio of medians: {:+.2} ms ({:+.2}%); median of paired ratios: {:+.2}%",
        (db.as_secs_f64() - da.as_secs_f64()) * 1e3,
        (db.as_secs_f64() / da.as_secs_f64() - 1.0) * 100.0,
        (paired_median - 1.0) * 100.0
    );

    // Per-spawn cost without nvcc: /bin/true through each path, many runs.
    let truth = Path::new("/bin/true");
    let spawn_runs = 200;
    let (mut c, mut d) = (Vec::new(), Vec::new());
    for _ in 0..spawn_runs {
        let start = Instant::now();
        Command::new(truth).stdin(Stdio::null()).output()?;
        c.push(start.elapsed());
        let start = Instant::now();
        ProcessRunner.run(truth, &[], &RunOptions::default())?;
        d.push(start.elapsed());
    }
    let (dc, dd) = (median(&mut c), median(&mut d));
    println!("\nspawn /bin/true, {spawn_runs} interleaved runs each");
    println!("| contender | median | ratio |");
    println!("| --- | --- | --- |");
    println!(
        "| Command::output | {:.3} ms | 1.000 |",
        dc.as_secs_f64() * 1e3
    );
    println!(
        "| ProcessRunner::run | {:.3} ms | {:.3} |",
        dd.as_secs_f64() * 1e3,
        dd.as_secs_f64() / dc.as_secs_f64()
    );
    Ok(())
}
