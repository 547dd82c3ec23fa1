//! Side by side: bare `nvcc` against the same compile traced, interleaved run by run.
//!
//! `NVCC=/path/to/nvcc cargo bench -p file-trace --bench file_trace` (runs per mode:
//! `FILE_TRACE_BENCH_RUNS`, default 9). Prints each mode's median and minimum wall time, its
//! median CPU time (the compiler's processes plus this process, which holds the supervisor),
//! the traced/bare ratios, and the events per traced compile. Goal: at most 1.03x with sync
//! wake-up. On a machine shared with other work the minimum and the CPU time are the steadier
//! measures: other load stretches wall times at random.

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
    cpu: Vec<Duration>,
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
    per_call(&tracer);
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
                cpu: Vec::new(),
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
            let cpu_before = cpu_time();
            let (elapsed, traced) = run(&tracer, &nvcc, dir.path(), mode.args, mode.trace);
            let cpu = cpu_time().saturating_sub(cpu_before);
            if round > 0 {
                mode.times.push(elapsed);
                mode.cpu.push(cpu);
                if let Some((events, sync)) = traced {
                    mode.events.push(events);
                    mode.sync_seen.push(sync);
                }
            }
        }
    }
    println!(
        "\n{:<36} {:>9} {:>9} {:>9} {:>9} | {:>7} {:>7} {:>7} | {:>6}",
        "mode", "wall med", "wall min", "wall max", "cpu med", "med", "min", "cpu", "events"
    );
    for chunk in modes.chunks(3) {
        let bare = &chunk[0];
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        for mode in chunk {
            let events = if mode.events.is_empty() {
                String::new()
            } else {
                median_usize(&mode.events).to_string()
            };
            println!(
                "{:<36} {:>7.3} s {:>7.3} s {:>7.3} s {:>7.3} s | {:>6.3}x {:>6.3}x {:>6.3}x | {:>6}",
                mode.name,
                median(&mode.times).as_secs_f64(),
                min(&mode.times).as_secs_f64(),
                mode.times.iter().max().expect("runs").as_secs_f64(),
                median(&mode.cpu).as_secs_f64(),
                ratio(median(&mode.times), median(&bare.times)),
                ratio(min(&mode.times), min(&bare.times)),
                ratio(median(&mode.cpu), median(&bare.cpu)),
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

/// The cost of one traced call: a program making 50,000 `stat`s, bare and traced.
fn per_call(tracer: &Tracer) {
    const CALLS: u32 = 50_000;
    let exerciser = env!("CARGO_BIN_EXE_file-trace-exerciser");
    let time = |trace: Option<SyncWakeUp>| -> Duration {
        let mut best = Duration::MAX;
        for _ in 0..5 {
            let mut command = Command::new(exerciser);
            command.args(["stat-loop", &CALLS.to_string(), "/usr/include/stdio.h"]);
            let started = Instant::now();
            match trace {
                None => {
                    assert!(command.status().expect("run").success());
                }
                Some(sync) => {
                    let (mut child, handle) = tracer
                        .clone()
                        .sync_wake_up(sync)
                        .spawn(&mut command)
                        .expect("spawn traced");
                    assert!(child.wait().expect("wait").success());
                    let trace = handle.finish(Duration::from_secs(5)).expect("finish");
                    assert!(trace.events.len() >= CALLS as usize);
                }
            }
            best = best.min(started.elapsed());
        }
        best
    };
    let bare = time(None);
    let sync = time(Some(SyncWakeUp::IfSupported));
    let no_sync = time(Some(SyncWakeUp::Off));
    let per = |t: Duration| (t.saturating_sub(bare)).as_secs_f64() * 1e6 / f64::from(CALLS);
    println!(
        "per traced call ({CALLS} stats, best of 5): bare {:.1} ms; traced {:.1} ms = +{:.2} us \
         per call; sync wake-up off {:.1} ms = +{:.2} us per call",
        bare.as_secs_f64() * 1e3,
        sync.as_secs_f64() * 1e3,
        per(sync),
        no_sync.as_secs_f64() * 1e3,
        per(no_sync),
    );
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

/// User and system time of this process (the supervisor thread's work included) and of its
/// reaped children (the compiler and everything it waited for).
fn cpu_time() -> Duration {
    let of = |who: libc::c_int| {
        // SAFETY: rusage is plain data; getrusage fills it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: usage is a valid rusage for the call.
        unsafe { libc::getrusage(who, &mut usage) };
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        tv(usage.ru_utime) + tv(usage.ru_stime)
    };
    of(libc::RUSAGE_SELF) + of(libc::RUSAGE_CHILDREN)
}

fn min(times: &[Duration]) -> Duration {
    *times.iter().min().expect("runs")
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
