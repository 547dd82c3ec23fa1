//! A deliberately slow, deterministic stand-in for nvcc.
//!
//! It honours the argv shape the `nvcc` crate produces (`--version`; `-MD -MF DEPFILE` or
//! `-Xcompiler=-MD,-MF,DEPFILE`, `-o OUT`
//! and the source last), writes the bytes `expected_artifact(source)` in 16 KiB chunks with a
//! pause after each (`CRASH_FAKE_NVCC_PAUSE_US`, default 1500), so a compile lasts long enough
//! to be killed inside, writes a valid dependency file, and logs `compile-start` and
//! `compile-end` to `JIT_CACHE_LOCK_LOG` so the harness can count compiles per key.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

pub fn main(args: &[String]) -> ExitCode {
    // The cache's probe of the toolkit's directories: a fake has none to tell.
    if args.iter().any(|a| a == "-dryrun") {
        return ExitCode::FAILURE;
    }
    // The version probe, and the release's option list (`nvcc --help`): a fake lists none, and
    // answering at once keeps the probe out of every worker's start.
    if args.iter().any(|a| a == "--version" || a == "--help") {
        println!(
            "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.5, V13.5.0"
        );
        return ExitCode::SUCCESS;
    }
    match compile(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("fake-nvcc: error: {why}");
            ExitCode::FAILURE
        }
    }
}

fn value_after(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn compile(args: &[String]) -> Result<(), String> {
    let output = value_after(args, "-o").ok_or("no -o OUT")?;
    let os_args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    let depfile = nvcc::requested_depfile(&os_args)
        .ok_or("no dependency file requested (-MF or -Xcompiler=-MD,-MF,)")?;
    let source = args.last().ok_or("no source")?;
    let text = std::fs::read_to_string(source).map_err(|e| format!("read {source}: {e}"))?;
    let kernel = crash_harness::kernel_index_of_text(&text)
        .map(crash_harness::kernel_name)
        .unwrap_or("-".into());
    let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
    log("compile-start", &kernel, &format!("{parent} {output}"));
    let bytes = crash_harness::expected_artifact(&text);
    let pause = std::env::var("CRASH_FAKE_NVCC_PAUSE_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500u64);
    let mut file = std::fs::File::create(&output).map_err(|e| format!("create {output}: {e}"))?;
    for chunk in bytes.chunks(16 << 10) {
        file.write_all(chunk)
            .map_err(|e| format!("write {output}: {e}"))?;
        // A compile whose builder died has no one to answer; stop at once.
        if rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()) != parent {
            return Err("builder died".into());
        }
        // Slowness on purpose, so kills land inside the compile (not synchronisation).
        std::thread::sleep(Duration::from_micros(pause));
    }
    drop(file);
    std::fs::write(&depfile, format!("{output} : {source}\n"))
        .map_err(|e| format!("write {}: {e}", depfile.display()))?;
    log("compile-end", &kernel, &format!("{parent} {output}"));
    Ok(())
}

fn log(event: &str, kernel: &str, detail: &str) {
    let Some(path) = std::env::var_os("JIT_CACHE_LOCK_LOG") else {
        return;
    };
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let line = format!(
            "{} {} {} {event} {kernel} {detail}\n",
            setup_clock::mono(),
            setup_clock::real(),
            std::process::id()
        );
        let _ = file.write_all(line.as_bytes());
    }
}

/// Clocks for log lines (the rules use the file's order; the times are for people).
pub mod setup_clock {
    fn ns(clock: libc::clockid_t) -> u128 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec and the clock ids used are always supported.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
    }

    /// CLOCK_MONOTONIC in ns.
    pub fn mono() -> u128 {
        ns(libc::CLOCK_MONOTONIC)
    }

    /// CLOCK_REALTIME in ns.
    pub fn real() -> u128 {
        ns(libc::CLOCK_REALTIME)
    }
}
