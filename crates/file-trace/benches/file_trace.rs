//! Side by side: bare `nvcc` against the same compile traced, interleaved run by run.
//!
//! `NVCC=/path/to/nvcc cargo bench -p file-trace --bench file_trace` (runs per mode:
//! `FILE_TRACE_BENCH_RUNS`, default 9). Prints each mode's median wall time, the traced/bare
//! ratio, and the events per traced compile. Goal: at most 1.03x with sync wake-up.

use file_trace::{SyncWakeUp, Tracer};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A CUB BlockReduce kernel: ~3 s of nvcc with `-c`, ~10,000 traced calls.
const KERNEL: &str = r#"#include <cub/block/block_reduce.cuh>
#include <cstdio>
__global__ void k(float* out, const float* in) {
  using BR = cub::BlockReduce<float, 128>;
  __shared__ typename BR::TempStorage tmp;
  float v = BR(tmp).Sum(in[threadIdx.x]);
  if (threadIdx.x == 0) { out[0] = v; printf("%f\n", v); }
}
"#;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Trace {
    Bare,
    Sync,
    NoSync,
}

struct Mode {
    name: &'static str,
    args: &'static [&'static str],
    trace: Trace,
    times: Vec<Duration>,
    events: Vec<usize>,
    sync_seen: Vec<bool>,
}

fn main() {
    let Some(nvcc) = std::env::var_os("NVCC").map(PathBuf::from) else {
        eprintln!("file_trace bench: set NVCC to the compiler to measure");
        return;
    };
    let tracer = match Tracer::new() {
        Ok(tracer) => tracer,
        Err(why) => {
            eprintln!("file_trace bench: cannot trace here: {why}");
            return;
        }
    };
    let runs: usize = std::env::var("FILE_TRACE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("k.cu"), KERNEL).expect("write kernel");
    let compile: &[&str] = &["-c", "-arch=sm_90", "k.cu", "-o", "k.o"];
    let cubin: &[&str] = &["-cubin", "-arch=sm_90", "k.cu", "-o", "k.cubin"];
    let mut modes = Vec::new();
    for (label, args) in [("-c", compile), ("-cubin", cubin)] {
        for (trace, suffix) in [
            (Trace::Bare, "bare"),
            (Trace::Sync, "traced"),
            (Trace::NoSync, "traced, sync wake-up off"),
        ] {
            modes.push(Mode {
                name: leak(format!("nvcc {label} {suffix}")),
                args,
                trace,
                times: Vec::new(),
                events: Vec::new(),
                sync_seen: Vec::new(),
            });
        }
    }
    println!(
        "nvcc: {}\nsupport: {:?}\n{runs} runs per mode, interleaved, after one warm-up round",
        nvcc.display(),
        tracer.support()
    );
    for round in 0..=runs {
        for mode in &mut modes {
            let (elapsed, traced) = run(&tracer, &nvcc, dir.path(), mode.args, mode.trace);
            if round > 0 {
                mode.times.push(elapsed);
                if let Some((events, sync)) = traced {
                    mode.events.push(events);
                    mode.sync_seen.push(sync);
                }
            }
        }
    }
    println!(
        "\n{:<36} {:>10} {:>10} {:>10} {:>8} {:>9}",
        "mode", "median", "min", "max", "ratio", "events"
    );
    for chunk in modes.chunks(3) {
        let bare = median(&chunk[0].times);
        for mode in chunk {
            let med = median(&mode.times);
            let events = if mode.events.is_empty() {
                String::new()
            } else {
                median_usize(&mode.events).to_string()
            };
            println!(
                "{:<36} {:>8.3} s {:>8.3} s {:>8.3} s {:>7.3}x {:>9}",
                mode.name,
                med.as_secs_f64(),
                mode.times.iter().min().expect("runs").as_secs_f64(),
                mode.times.iter().max().expect("runs").as_secs_f64(),
                med.as_secs_f64() / bare.as_secs_f64(),
                events
            );
            if mode.trace == Trace::Sync {
                assert!(
                    mode.sync_seen
                        .iter()
                        .all(|&s| s == tracer.support().sync_wake_up),
                    "every traced run had the sync wake-up the probe found"
                );
            }
        }
    }
}

/// One compile; for a traced one also its event count and whether sync wake-up was on.
fn run(
    tracer: &Tracer,
    nvcc: &Path,
    dir: &Path,
    args: &[&str],
    trace: Trace,
) -> (Duration, Option<(usize, bool)>) {
    let mut command = Command::new(nvcc);
    command
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let started = Instant::now();
    let (status, traced) = match trace {
        Trace::Bare => (command.status().expect("run nvcc"), None),
        Trace::Sync | Trace::NoSync => {
            let sync = if trace == Trace::Sync {
                SyncWakeUp::IfSupported
            } else {
                SyncWakeUp::Off
            };
            let (mut child, handle) = tracer
                .clone()
                .sync_wake_up(sync)
                .spawn(&mut command)
                .expect("spawn nvcc traced");
            let status = child.wait().expect("wait for nvcc");
            let trace = handle.finish(Duration::from_secs(5)).expect("finish");
            assert!(trace.is_complete(), "a complete trace");
            (status, Some((trace.events.len(), trace.sync_wake_up)))
        }
    };
    let elapsed = started.elapsed();
    assert!(status.success(), "nvcc {args:?} succeeded");
    (elapsed, traced)
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn median_usize(values: &[usize]) -> usize {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn leak(name: String) -> &'static str {
    Box::leak(name.into_boxed_str())
}
