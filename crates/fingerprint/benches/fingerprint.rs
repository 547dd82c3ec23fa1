//! Side-by-side benchmark: full hashing vs stat-cache revalidation of the pip nvcc's CUDA include
//! tree and of a generated 1 GiB tree.
//!
//! `cargo xtask bench fingerprint [-- --size-mib N --runs N --dir PATH --drop-caches]`
//! (env `NVCC` points at nvcc; its grandparent's `include` is hashed). The generated tree is
//! written once under `/var/tmp` and reused. `--drop-caches` (root only) also measures one full
//! hash with the page cache dropped.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fingerprint::{hash_tree, StatCache, TreeOptions};

struct Args {
    size_mib: u64,
    runs: usize,
    dir: Option<PathBuf>,
    drop_caches: bool,
}

fn args() -> Args {
    let mut a = Args {
        size_mib: 1024,
        runs: 5,
        dir: None,
        drop_caches: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--size-mib" => {
                a.size_mib = it.next().and_then(|v| v.parse().ok()).unwrap_or(a.size_mib)
            }
            "--runs" => a.runs = it.next().and_then(|v| v.parse().ok()).unwrap_or(a.runs),
            "--dir" => a.dir = it.next().map(PathBuf::from),
            "--drop-caches" => a.drop_caches = true,
            _ => {} // cargo passes `--bench`; ignore what we do not know.
        }
    }
    a
}

/// Bytes of pseudo-random content (blake3 XOF: fast and incompressible).
fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    blake3::Hasher::new()
        .update(&seed.to_le_bytes())
        .finalize_xof()
        .fill(&mut out);
    out
}

/// A tree of `size_mib` MiB: half in 8 MiB files, a quarter in 1 MiB, an eighth in 128 KiB and
/// an eighth in 16 KiB files, spread over 16 directories. Reused when its marker exists.
fn generated_tree(dir: &Path, size_mib: u64) -> std::io::Result<()> {
    let marker = dir.join(".complete");
    if marker.exists() {
        return Ok(());
    }
    let total = size_mib << 20;
    let plan: [(u64, u64); 4] = [
        (total / 2, 8 << 20),
        (total / 4, 1 << 20),
        (total / 8, 128 << 10),
        (total / 8, 16 << 10),
    ];
    let mut seed = 0u64;
    for (bytes, file_size) in plan {
        for i in 0..(bytes / file_size).max(1) {
            seed += 1;
            let sub = dir.join(format!("d{:02}", seed % 16));
            std::fs::create_dir_all(&sub)?;
            let len = usize::try_from(file_size).unwrap_or(usize::MAX);
            std::fs::write(
                sub.join(format!("f{file_size}_{i}.bin")),
                content(seed, len),
            )?;
        }
    }
    std::fs::write(marker, b"")?;
    Ok(())
}

fn tree_bytes(root: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                t.elapsed()
            })
            .collect(),
    )
}

fn bench(label: &str, root: &Path, runs: usize, drop_caches: bool) {
    let opts = TreeOptions::default();
    let bytes = tree_bytes(root);
    let files = hash_tree(root, &opts, None)
        .map(|t| t.files.len())
        .unwrap_or(0);
    if drop_caches {
        let _ = std::process::Command::new("sync").status();
        match std::fs::write("/proc/sys/vm/drop_caches", b"3") {
            Ok(()) => {
                let t = Instant::now();
                let _ = hash_tree(root, &opts, None);
                let d = t.elapsed();
                println!(
                    "| {label} | full hash, page cache dropped | {:.1} ms | {:.2} GB/s | |",
                    d.as_secs_f64() * 1e3,
                    bytes as f64 / d.as_secs_f64() / 1e9
                );
            }
            Err(e) => eprintln!("drop_caches: {e}"),
        }
    }
    // Warm the page cache so the full-hash rows measure hashing, not the disk.
    let reference = hash_tree(root, &opts, None).map(|t| t.digest);
    let full = time(runs, || hash_tree(root, &opts, None));
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .map(|pool| time(runs, || pool.install(|| hash_tree(root, &opts, None))))
        .ok();
    let mut cache = StatCache::new();
    let _ = hash_tree(root, &opts, Some(&mut cache));
    // Entries of files changed in the last two seconds are racy and re-hashed; a bench tree
    // written just now needs them to age once (a benchmark, not a test: waiting is fine here).
    std::thread::sleep(Duration::from_millis(2100));
    let _ = hash_tree(root, &opts, Some(&mut cache));
    let warm_digest = hash_tree(root, &opts, Some(&mut cache)).map(|t| t.digest);
    assert_eq!(
        warm_digest.as_ref().ok(),
        reference.as_ref().ok(),
        "the warm digest must equal the full one"
    );
    let warm = time(runs.max(10), || hash_tree(root, &opts, Some(&mut cache)));
    let gbps = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e9;
    println!(
        "| {label} ({files} files, {:.1} MiB) | full re-hash (rayon, all cores) | {:.1} ms | {:.2} GB/s | 1.00x |",
        bytes as f64 / (1 << 20) as f64,
        full.as_secs_f64() * 1e3,
        gbps(full)
    );
    if let Some(d) = one_thread {
        println!(
            "| {label} | full re-hash, 1 thread | {:.1} ms | {:.2} GB/s | {:.2}x |",
            d.as_secs_f64() * 1e3,
            gbps(d),
            full.as_secs_f64() / d.as_secs_f64()
        );
    }
    println!(
        "| {label} | warm: revalidate via StatCache | {:.2} ms | {:.1} GB/s equiv. | **{:.1}x faster** |",
        warm.as_secs_f64() * 1e3,
        gbps(warm),
        full.as_secs_f64() / warm.as_secs_f64()
    );
}

fn main() {
    let a = args();
    println!(
        "fingerprint bench: {} cores, {} runs per row (median)\n",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        a.runs
    );
    println!("| tree | contender | median | throughput | vs full re-hash |");
    println!("| --- | --- | --- | --- | --- |");
    // The CPU ceiling on this machine right now: blake3 of 256 MiB already in memory.
    let data = content(42, 256 << 20);
    let seq = time(a.runs, || blake3::hash(&data));
    let par = time(a.runs, || {
        blake3::Hasher::new().update_rayon(&data).finalize()
    });
    for (label, d) in [("1 thread", seq), ("update_rayon", par)] {
        println!(
            "| 256 MiB in memory (ceiling, no I/O) | blake3 {label} | {:.1} ms | {:.2} GB/s | |",
            d.as_secs_f64() * 1e3,
            data.len() as f64 / d.as_secs_f64() / 1e9
        );
    }
    drop(data);
    let nvcc = std::env::var_os("NVCC")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../target/nvcc-venv/lib/python3.11/site-packages/nvidia/cu13/bin/nvcc"
            ))
        });
    match nvcc
        .parent()
        .and_then(Path::parent)
        .map(|p| p.join("include"))
    {
        Some(include) if include.is_dir() => bench("CUDA include", &include, a.runs, a.drop_caches),
        _ => eprintln!("no CUDA include tree next to {} (set NVCC)", nvcc.display()),
    }
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("/var/tmp/fingerprint-bench-{}mib", a.size_mib)));
    if let Err(e) = generated_tree(&dir, a.size_mib) {
        eprintln!("generate {}: {e}", dir.display());
        return;
    }
    bench(
        &format!("generated {} MiB", a.size_mib),
        &dir,
        a.runs,
        a.drop_caches,
    );
}
