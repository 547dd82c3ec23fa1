//! Durable writes side by side, in two parts.
//!
//! 1. Single puts: this crate, `atomic-write-file`, `tempfile` persist plus manual fsyncs, and
//!    the bare syscall floor (create, write, fsync, rename, fsync directory). Every contender
//!    replaces its own target once per round, rounds rotate the order, and the table shows
//!    medians with ratios to the floor and to the best peer, in the system temp dir (or `--dir`).
//! 2. Many files: a `durable_fs::Batch` of N files against N single `put`s and N
//!    `atomic-write-file` commits (and the batch forced to per-file fsync), each round replacing
//!    the same N targets, on loop-mounted ext4 and xfs (fs-testbed, private mount namespace; needs
//!    root, skipped with a message otherwise) and the temp dir. 100 files of 4 KiB, and 20 files
//!    of 1 MiB (fs-testbed's ext4 is 64 MiB: 100 MiB would not fit).
//!
//! `cargo bench -p durable-fs --bench durable_fs -- [--iters N] [--dir PATH] [--batch-only]
//! [--fs ext4,xfs,tmp]`, or `cargo xtask bench durable-fs` with the same arguments.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use durable_fs::{Flush, FlushStrategy};
use fs_testbed::FsKind;
use rustix::fs::{Mode, OFlags, CWD};

type Contender = (&'static str, fn(&Path, &OwnedFd, &[u8]));

fn durable_fs_put(path: &Path, _dir: &OwnedFd, bytes: &[u8]) {
    durable_fs::put(path, bytes).expect("durable_fs::put");
}

fn atomic_write_file(path: &Path, _dir: &OwnedFd, bytes: &[u8]) {
    let mut f = atomic_write_file::AtomicWriteFile::open(path).expect("open");
    f.write_all(bytes).expect("write");
    f.commit().expect("commit");
}

fn tempfile_persist_fsync(path: &Path, _dir: &OwnedFd, bytes: &[u8]) {
    let parent = path.parent().expect("parent");
    let mut t = tempfile::NamedTempFile::new_in(parent).expect("temp");
    t.write_all(bytes).expect("write");
    t.as_file().sync_all().expect("fsync file");
    t.persist(path).expect("persist");
    File::open(parent)
        .expect("open dir")
        .sync_all()
        .expect("fsync dir");
}

/// The floor: the five syscalls with a directory descriptor opened once.
fn syscall_floor(path: &Path, dir: &OwnedFd, bytes: &[u8]) {
    let name = path.file_name().expect("name");
    let mut temp = name.to_os_string();
    temp.push(".floor-tmp");
    let fd = rustix::fs::openat(
        dir,
        &temp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .expect("create");
    let mut f = File::from(fd);
    f.write_all(bytes).expect("write");
    rustix::fs::fsync(f.as_fd()).expect("fsync");
    rustix::fs::renameat(dir, &temp, dir, name).expect("rename");
    rustix::fs::fsync(dir).expect("fsync dir");
}

type ManyContender = (&'static str, fn(&[PathBuf], &[u8]) -> Option<FlushStrategy>);

fn many_batch(targets: &[PathBuf], bytes: &[u8]) -> Option<FlushStrategy> {
    let mut batch = durable_fs::Batch::new();
    for t in targets {
        batch.put(t, bytes).expect("stage");
    }
    Some(batch.commit().expect("commit").strategy)
}

fn many_batch_per_file(targets: &[PathBuf], bytes: &[u8]) -> Option<FlushStrategy> {
    let mut batch = durable_fs::Batch::with_flush(Flush::PerFile);
    for t in targets {
        batch.put(t, bytes).expect("stage");
    }
    Some(batch.commit().expect("commit").strategy)
}

fn many_puts(targets: &[PathBuf], bytes: &[u8]) -> Option<FlushStrategy> {
    for t in targets {
        durable_fs::put(t, bytes).expect("put");
    }
    None
}

fn many_atomic_write_file(targets: &[PathBuf], bytes: &[u8]) -> Option<FlushStrategy> {
    for t in targets {
        let mut f = atomic_write_file::AtomicWriteFile::open(t).expect("open");
        f.write_all(bytes).expect("write");
        f.commit().expect("commit");
    }
    None
}

/// Part 2 on one directory: every contender replaces the same targets each round.
fn bench_many(fs: &str, base: &Path, iters: Option<usize>) {
    let contenders: [ManyContender; 4] = [
        ("Batch (auto)", many_batch),
        ("N x put", many_puts),
        ("N x atomic-write-file", many_atomic_write_file),
        ("Batch (per-file)", many_batch_per_file),
    ];
    for (label, size, files, default_iters) in [
        ("4 KiB", 4usize << 10, 100usize, 15usize),
        ("1 MiB", 1 << 20, 20, 8),
    ] {
        let n = iters.map_or(default_iters, |i| i.clamp(1, default_iters * 4));
        let bytes: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        let dir = base.join(format!("many-{size}"));
        std::fs::create_dir_all(&dir).expect("bench dir");
        let targets: Vec<PathBuf> = (0..files).map(|i| dir.join(format!("f{i:03}"))).collect();
        let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); contenders.len()];
        let mut strategy = None;
        for round in 0..n + 2 {
            for k in 0..contenders.len() {
                let i = (round + k) % contenders.len();
                let start = Instant::now();
                let used = (contenders[i].1)(&targets, &bytes);
                let took = start.elapsed();
                if i == 0 {
                    strategy = used;
                }
                // The first rounds create the targets and warm the journal; not counted.
                if round >= 2 {
                    samples[i].push(took);
                }
            }
        }
        let medians: Vec<Duration> = samples.iter_mut().map(|s| median(s)).collect();
        for (i, (name, _)) in contenders.iter().enumerate() {
            println!(
                "{:<8} {:>6} x{:<4} {:<22} {:>9.2} ms {:>9.2}x",
                fs,
                label,
                files,
                name,
                medians[i].as_secs_f64() * 1e3,
                medians[i].as_secs_f64() / medians[0].as_secs_f64(),
            );
        }
        println!(
            "         ({n} rounds, rotating order; Batch (auto) chose {:?})",
            strategy.expect("the batch ran")
        );
        std::fs::remove_dir_all(&dir).expect("clean the bench dir");
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let iters: Option<usize> = arg("--iters").map(|s| s.parse().expect("--iters N"));
    let base: PathBuf = arg("--dir").map_or_else(std::env::temp_dir, PathBuf::from);
    if !args.iter().any(|a| a == "--batch-only") {
        bench_single(&base, iters);
    }
    println!();
    println!("many files: a Batch against single puts and atomic-write-file, same targets");
    println!(
        "{:<8} {:>6} {:<5} {:<22} {:>12} {:>10}",
        "fs", "size", "files", "contender", "median", "vs Batch"
    );
    let kinds = arg("--fs").unwrap_or_else(|| "ext4,xfs,tmp".to_string());
    for name in kinds.split(',') {
        let kind = FsKind::from_name(name).unwrap_or_else(|| panic!("unknown --fs `{name}`"));
        if kind == FsKind::DefaultTmp {
            let dir = tempfile::Builder::new()
                .prefix("durable-fs-bench-")
                .tempdir_in(&base)
                .expect("bench dir");
            bench_many(kind.name(), dir.path(), iters);
        } else if let Err(skipped) =
            fs_testbed::with_fs(kind, |root| bench_many(kind.name(), root, iters))
        {
            println!("{skipped}");
        }
    }
}

/// Part 1: single puts in `base`.
fn bench_single(base: &Path, iters: Option<usize>) {
    let dir = tempfile::Builder::new()
        .prefix("durable-fs-bench-")
        .tempdir_in(base)
        .expect("bench dir");
    let dirfd = rustix::fs::openat(
        CWD,
        dir.path(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("open bench dir");
    let contenders: [Contender; 4] = [
        ("syscall floor", syscall_floor),
        ("durable-fs put", durable_fs_put),
        ("atomic-write-file", atomic_write_file),
        ("tempfile+fsyncs", tempfile_persist_fsync),
    ];
    println!("durable put benchmark in {}", dir.path().display());
    println!(
        "{:>6}  {:<18} {:>12} {:>9} {:>11}",
        "size", "contender", "median", "vs floor", "vs best peer"
    );
    for (label, size, default_iters) in [("4 KiB", 4usize << 10, 300usize), ("1 MiB", 1 << 20, 60)]
    {
        let n = iters.unwrap_or(default_iters);
        let bytes: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); contenders.len()];
        let targets: Vec<PathBuf> = contenders
            .iter()
            .enumerate()
            .map(|(i, _)| dir.path().join(format!("target-{i}")))
            .collect();
        for round in 0..n + 5 {
            for k in 0..contenders.len() {
                let i = (round + k) % contenders.len();
                let start = Instant::now();
                (contenders[i].1)(&targets[i], &dirfd, &bytes);
                let took = start.elapsed();
                // The first rounds warm the page cache and the journal; they are not counted.
                if round >= 5 {
                    samples[i].push(took);
                }
            }
        }
        let medians: Vec<Duration> = samples.iter_mut().map(|s| median(s)).collect();
        let floor = medians[0];
        let best_peer = medians[2].min(medians[3]);
        for (i, (name, _)) in contenders.iter().enumerate() {
            println!(
                "{:>6}  {:<18} {:>9.1} us {:>8.2}x {:>11.2}x",
                label,
                name,
                medians[i].as_secs_f64() * 1e6,
                medians[i].as_secs_f64() / floor.as_secs_f64(),
                medians[i].as_secs_f64() / best_peer.as_secs_f64(),
            );
        }
        println!("        ({n} rounds per contender, rotating order)");
    }
}
