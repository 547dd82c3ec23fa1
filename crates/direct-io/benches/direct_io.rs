//! Cold-cache read throughput and CPU: this crate's engines vs fio's best O_DIRECT setting vs
//! `std` buffered reads vs mmap-and-copy on one large file, and a generated safetensors
//! checkpoint loaded into host memory vs the `safetensors` crate.
//!
//! Run: `cargo xtask bench direct-io` (or `cargo bench -p direct-io --bench direct_io`).
//! Settings (environment): `DIRECT_IO_BENCH_FILE_MIB` (default 4096), `DIRECT_IO_BENCH_CKPT_MIB`
//! (default 2048), `DIRECT_IO_BENCH_ROUNDS` (default 3), `DIRECT_IO_BENCH_DIR` (default
//! /var/tmp/direct-io-bench, removed at the end). As root the page cache is dropped
//! (`echo 3 > /proc/sys/vm/drop_caches`) before every measured read; otherwise the table says
//! the cache was warm.

use direct_io::{
    ByteRange, CachePolicy, Checkpoint, DirectFile, Engine, EngineChoice, EngineConfig, HostSink,
    RingConfig, Sink, SinkError,
};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds (user + system) of this process, or of its waited-for children.
fn cpu_seconds(who: i32) -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct.
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn drop_caches() -> bool {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

#[derive(Clone, Copy)]
struct Sample {
    gbps: f64,
    cpu_pct: f64,
}

/// Runs `f` (which returns the bytes it read) cold, measuring wall time and this process's CPU.
fn measure(f: &mut dyn FnMut() -> u64) -> Sample {
    drop_caches();
    let cpu0 = cpu_seconds(libc::RUSAGE_SELF);
    let t0 = Instant::now();
    let bytes = f();
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(libc::RUSAGE_SELF) - cpu0;
    Sample {
        gbps: bytes as f64 / wall / 1e9,
        cpu_pct: 100.0 * cpu / wall,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// A sink that takes the bytes and drops them, as fio does.
struct Discard(u64);

impl Sink for Discard {
    fn copy(&mut self, _: usize, _: usize, _: u64, bytes: &[u8]) -> Result<(), SinkError> {
        self.0 += bytes.len() as u64;
        Ok(())
    }
    fn wait(&mut self, _: usize) -> Result<(), SinkError> {
        Ok(())
    }
}

fn write_file(path: &Path, mib: u64) {
    let mut f = std::fs::File::create(path).expect("create the bench file");
    let mut block = vec![0u8; 1 << 20];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for mib_i in 0..mib {
        for chunk in block.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&(x ^ mib_i).to_le_bytes()[..chunk.len()]);
        }
        f.write_all(&block).expect("write the bench file");
    }
    f.sync_all().expect("fsync the bench file");
}

/// Writes a safetensors checkpoint of about `mib` MiB: F16 tensors of varied sizes.
fn write_checkpoint(path: &Path, mib: u64) -> u64 {
    let mut entries = Vec::new();
    let mut off = 0u64;
    let total = mib << 20;
    let mut i = 0u64;
    while off < total {
        let elems = ((8 << 20) + (i * 1_234_567) % (24 << 20)) / 2;
        let elems = elems.min((total - off) / 2).max(1);
        entries.push(format!(
            "\"layer.{i}.weight\":{{\"dtype\":\"F16\",\"shape\":[{elems}],\"data_offsets\":[{off},{}]}}",
            off + elems * 2
        ));
        off += elems * 2;
        i += 1;
    }
    let header = format!("{{{}}}", entries.join(","));
    let mut f = std::fs::File::create(path).expect("create the checkpoint");
    f.write_all(&(header.len() as u64).to_le_bytes())
        .and_then(|_| f.write_all(header.as_bytes()))
        .expect("write the header");
    drop(f);
    let data = path.with_extension("data");
    write_file(&data, off.div_ceil(1 << 20));
    // Append the data (truncated to `off`) after the header.
    let mut src = std::fs::File::open(&data).expect("open data");
    let mut dst = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open checkpoint");
    std::io::copy(&mut (&mut src).take(off), &mut dst).expect("append data");
    dst.sync_all().expect("fsync checkpoint");
    std::fs::remove_file(&data).expect("remove temp data");
    i
}

struct Fio {
    engine: &'static str,
    bs: &'static str,
    depth: u32,
}

/// Runs fio once; returns (GB/s, CPU%) from its JSON report.
fn run_fio(path: &Path, f: &Fio, size: Option<&str>) -> Option<Sample> {
    drop_caches();
    let mut cmd = Command::new("fio");
    cmd.args([
        "--name=read",
        "--rw=read",
        "--direct=1",
        "--output-format=json",
        &format!("--ioengine={}", f.engine),
        &format!("--bs={}", f.bs),
        &format!("--iodepth={}", f.depth),
        &format!("--filename={}", path.display()),
    ]);
    if let Some(s) = size {
        cmd.arg(format!("--size={s}"));
    }
    let out = cmd.output().ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let job = &v["jobs"][0];
    let bw = job["read"]["bw_bytes"].as_f64()?;
    let cpu = job["usr_cpu"].as_f64()? + job["sys_cpu"].as_f64()?;
    Some(Sample {
        gbps: bw / 1e9,
        cpu_pct: cpu,
    })
}

fn main() {
    let file_mib = env_u64("DIRECT_IO_BENCH_FILE_MIB", 4096);
    let ckpt_mib = env_u64("DIRECT_IO_BENCH_CKPT_MIB", 2048);
    let rounds = env_u64("DIRECT_IO_BENCH_ROUNDS", 3).max(1);
    let dir = PathBuf::from(
        std::env::var("DIRECT_IO_BENCH_DIR").unwrap_or_else(|_| "/var/tmp/direct-io-bench".into()),
    );
    std::fs::create_dir_all(&dir).expect("create the bench directory");
    let cold = drop_caches();
    println!(
        "direct-io bench: {file_mib} MiB file, {ckpt_mib} MiB checkpoint, {rounds} rounds, cache {}",
        if cold { "dropped before every read (cold)" } else { "NOT dropped (not root): warm numbers" }
    );

    let big = dir.join("big.bin");
    write_file(&big, file_mib);
    let size = file_mib << 20;

    // fio's best O_DIRECT setting, picked on a 512 MiB prefix.
    let candidates = [
        Fio {
            engine: "io_uring",
            bs: "1M",
            depth: 8,
        },
        Fio {
            engine: "io_uring",
            bs: "1M",
            depth: 32,
        },
        Fio {
            engine: "io_uring",
            bs: "4M",
            depth: 8,
        },
        Fio {
            engine: "libaio",
            bs: "1M",
            depth: 32,
        },
        Fio {
            engine: "libaio",
            bs: "4M",
            depth: 8,
        },
        Fio {
            engine: "psync",
            bs: "1M",
            depth: 1,
        },
    ];
    let probe = format!("{}M", file_mib.min(512));
    let best = candidates
        .iter()
        .filter_map(|c| run_fio(&big, c, Some(&probe)).map(|s| (c, s)))
        .max_by(|a, b| a.1.gbps.total_cmp(&b.1.gbps));
    let engine_cfg = EngineConfig {
        queue_depth: 64,
        threads: 32,
        registered_buffers: true,
    };
    let ring = RingConfig {
        slots: 16,
        slot_size: 1 << 20,
    };

    let mut names: Vec<String> = Vec::new();
    let mut results: Vec<Vec<Sample>> = Vec::new();
    let mut record = |name: String, s: Sample| {
        eprintln!("  {name}: {:.3} GB/s, {:.1}% CPU", s.gbps, s.cpu_pct);
        if let Some(i) = names.iter().position(|n| *n == name) {
            results[i].push(s);
        } else {
            names.push(name);
            results.push(vec![s]);
        }
    };
    for round in 0..rounds {
        eprintln!("round {}/{rounds}", round + 1);
        if let Some((c, _)) = &best {
            if let Some(s) = run_fio(&big, c, None) {
                record(
                    format!("fio {} bs={} iodepth={} O_DIRECT", c.engine, c.bs, c.depth),
                    s,
                );
            }
        }
        let big_slots = RingConfig {
            slots: 8,
            slot_size: 4 << 20,
        };
        let mut contenders = vec![
            (EngineChoice::IoUring, ring),
            (EngineChoice::IoUring, big_slots),
            (EngineChoice::Threads, ring),
        ];
        // Extra ring shapes to compare, as "SLOTSxMIB,SLOTSxMIB" (io_uring).
        if let Ok(extra) = std::env::var("DIRECT_IO_BENCH_RINGS") {
            for shape in extra.split(',') {
                if let Some((n, m)) = shape.split_once('x') {
                    if let (Ok(n), Ok(m)) = (n.parse::<usize>(), m.parse::<usize>()) {
                        let r = RingConfig {
                            slots: n,
                            slot_size: m << 20,
                        };
                        contenders.push((EngineChoice::IoUring, r));
                    }
                }
            }
        }
        for (choice, ring) in contenders {
            let mut engine = Engine::new(choice, engine_cfg).expect("engine");
            let name = format!(
                "direct-io {} ({} x {} MiB slots)",
                engine.kind().name(),
                ring.slots,
                ring.slot_size >> 20
            );
            let s = measure(&mut || {
                let file = DirectFile::open(&big).expect("open");
                let mut sink = Discard(0);
                engine
                    .stream(
                        &file,
                        &[ByteRange {
                            offset: 0,
                            len: size,
                        }],
                        ring,
                        &mut sink,
                    )
                    .expect("stream");
                sink.0
            });
            record(name, s);
        }
        let s = measure(&mut || {
            let mut f = std::fs::File::open(&big).expect("open");
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                let got = f.read(&mut buf).expect("read");
                if got == 0 {
                    break n;
                }
                n += got as u64;
            }
        });
        record("std buffered read, 1 MiB".into(), s);
        let s = measure(&mut || {
            let f = std::fs::File::open(&big).expect("open");
            // SAFETY: the bench file is not modified while mapped.
            let map = unsafe { memmap2::Mmap::map(&f) }.expect("mmap");
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            for chunk in map.chunks(1 << 20) {
                buf[..chunk.len()].copy_from_slice(chunk);
                n += chunk.len() as u64;
            }
            std::hint::black_box(&buf);
            n
        });
        record("mmap + copy, 1 MiB".into(), s);
    }
    std::fs::remove_file(&big).expect("remove the bench file");

    // The checkpoint.
    let ckpt = dir.join("model.safetensors");
    let tensors = write_checkpoint(&ckpt, ckpt_mib);
    eprintln!("checkpoint: {tensors} tensors");
    for round in 0..rounds {
        eprintln!("checkpoint round {}/{rounds}", round + 1);
        let mut engine = Engine::new(EngineChoice::Auto, engine_cfg).expect("engine");
        let name = format!("ckpt: direct-io {} into host Vecs", engine.kind().name());
        let s = measure(&mut || {
            let c = Checkpoint::open(&ckpt).expect("open checkpoint");
            let mut sink = HostSink::with_lengths(c.tensor_lengths());
            let r = c
                .load(&mut engine, CachePolicy::Direct, ring, &mut sink)
                .expect("load");
            std::hint::black_box(sink.buffers());
            r.bytes
        });
        record(name, s);
        let s = measure(&mut || {
            let f = std::fs::File::open(&ckpt).expect("open");
            // SAFETY: the checkpoint is not modified while mapped.
            let map = unsafe { memmap2::Mmap::map(&f) }.expect("mmap");
            let st = safetensors::SafeTensors::deserialize(&map).expect("deserialize");
            let mut n = 0u64;
            let owned: Vec<Vec<u8>> = st
                .tensors()
                .into_iter()
                .map(|(_, v)| {
                    n += v.data().len() as u64;
                    v.data().to_vec()
                })
                .collect();
            std::hint::black_box(&owned);
            n
        });
        record("ckpt: safetensors crate, mmap + to_vec".into(), s);
        let s = measure(&mut || {
            let bytes = std::fs::read(&ckpt).expect("read");
            let st = safetensors::SafeTensors::deserialize(&bytes).expect("deserialize");
            let n: u64 = st
                .tensors()
                .iter()
                .map(|(_, v)| v.data().len() as u64)
                .sum();
            std::hint::black_box(&st);
            n
        });
        record("ckpt: safetensors crate, fs::read".into(), s);
    }
    std::fs::remove_file(&ckpt).expect("remove the checkpoint");
    let _ = std::fs::remove_dir(&dir);

    let fio_gbps = names
        .iter()
        .position(|n| n.starts_with("fio"))
        .map(|i| median(results[i].iter().map(|s| s.gbps).collect()));
    let st_gbps = names
        .iter()
        .position(|n| n.starts_with("ckpt: safetensors crate, mmap"))
        .map(|i| median(results[i].iter().map(|s| s.gbps).collect()));
    println!();
    println!("| contender | median GB/s | median CPU % of a core | vs fio | vs safetensors mmap |");
    println!("| --- | --- | --- | --- | --- |");
    for (name, samples) in names.iter().zip(&results) {
        let g = median(samples.iter().map(|s| s.gbps).collect());
        let c = median(samples.iter().map(|s| s.cpu_pct).collect());
        let ratio = |base: Option<f64>| base.map_or("-".to_string(), |b| format!("{:.2}x", g / b));
        let (vs_fio, vs_st) = if name.starts_with("ckpt") {
            ("-".to_string(), ratio(st_gbps))
        } else {
            (ratio(fio_gbps), "-".to_string())
        };
        println!("| {name} | {g:.3} | {c:.1} | {vs_fio} | {vs_st} |");
    }
}
