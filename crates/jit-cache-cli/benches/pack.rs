//! `cargo xtask bench pack`: kernel packs side by side, in one run.
//!
//! A source root holds 1,000 stored entries of ~500 KB (an artifact of 500,000 bytes and a small
//! JSON file each, through the store's own producer; stored entries need no compile, and their
//! publication is the same batched step as kernels'). Then, each timed `--runs` times (median):
//! 1. export: `Cache::export_pack` of every entry, against `cp -r` of the entries' tree + `sync`;
//! 2. import into a fresh root with the pack out of the page cache (`posix_fadvise(DONTNEED)`
//!    after its data is on disk), against `cat pack > /dev/null` from the same cold state (the
//!    read rate the import aims at: >= 0.8x), and against `cp -r` of the source tree (also
//!    evicted) into a fresh directory + `sync` (the way a tree would be shipped: import should be
//!    faster), and against one file of the pack's size written and fsynced (the disk's durable
//!    write rate: an import writes every byte it reads, so it cannot beat that).
//!
//! Each on its own filesystem, a 4 GiB loop-mounted image read and written with direct I/O (so a
//! cold read comes from the disk), in a private mount namespace: xfs and btrfs, where an import
//! shares the pack's extents rather than writing its bytes, and ext4, where it writes them.
//!
//! Options: `--runs N` (default 3), `--entries N` (default 1000), `--fs LIST` (default
//! `xfs,btrfs,ext4`; also `tmp`, the default temp directory).

use jit_cache::store::{Claim, Namespace, Store};
use jit_cache::{Cache, PackFilter};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const ARTIFACT: usize = 500_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (runs, entries) = (opt("--runs", 3), opt("--entries", 1000));
    let kinds = args
        .iter()
        .position(|a| a == "--fs")
        .and_then(|i| args.get(i + 1))
        .map_or("xfs,btrfs,ext4", String::as_str);
    for name in kinds.split(',') {
        let kind = fs_testbed::FsKind::from_name(name)
            .unwrap_or_else(|| panic!("--fs {name}: not a filesystem fs-testbed mounts"));
        println!("\n== {} ==", kind.name());
        fs_testbed::with_sized_fs(kind, 4096, |mount| bench_on(mount, runs, entries))
            .unwrap_or_else(|skipped| panic!("{skipped}"));
    }
}

/// The whole comparison in `dir`.
fn bench_on(dir: &Path, runs: usize, entries: usize) {
    let source = dir.join("source");
    let started = Instant::now();
    fill(&source, entries);
    println!(
        "pack bench: {entries} stored entries of ~{} KB, {runs} runs (filled in {:.1} s)",
        ARTIFACT / 1000,
        started.elapsed().as_secs_f64()
    );
    let cache = Cache::open(&source).expect("open source");
    let pack = dir.join("all.pack");
    let tree = source.join(jit_cache::FORMAT_DIR).join("entries");

    let mut export = Vec::new();
    let mut cp_export = Vec::new();
    for run in 0..runs {
        let t = Instant::now();
        let report = cache
            .export_pack(&pack, &PackFilter::default())
            .expect("export");
        export.push(t.elapsed());
        assert_eq!(report.entries, entries, "every entry exported");
        let copy = dir.join(format!("cp-export-{run}"));
        cp_export.push(cp_and_sync(&tree, &copy));
        remove(&copy);
    }
    let bytes = std::fs::metadata(&pack).expect("stat pack").len();
    let (e, c) = (median(export), median(cp_export));
    println!("\nexport ({} MB pack, warm entries)", bytes / 1_000_000);
    println!(
        "  jit-cache pack export     {:>8.0} ms  {:>6.0} MB/s",
        ms(e),
        mbps(bytes, e)
    );
    println!(
        "  cp -r tree + sync         {:>8.0} ms  {:>6.0} MB/s",
        ms(c),
        mbps(bytes, c)
    );
    println!("  export / cp               {:>8.2}x the time", ratio(e, c));

    // The disk's durable write rate, the floor of any import: the pack's bytes written to one
    // new file and fsynced.
    let mut floor = Vec::new();
    let data = std::fs::read(&pack).expect("read pack");
    for run in 0..runs {
        let path = dir.join(format!("floor-{run}"));
        let t = Instant::now();
        durable_fs::put(&path, &data).expect("write floor");
        floor.push(t.elapsed());
        let _ = std::fs::remove_file(&path);
    }
    drop(data);

    let mut cat = Vec::new();
    let mut import = Vec::new();
    let mut cp_import = Vec::new();
    let mut flushes = 0;
    let (mut shared, mut not_shared) = (0, None);
    for run in 0..runs {
        evict(&pack);
        let t = Instant::now();
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!("cat '{}' > /dev/null", pack.display()))
            .status()
            .expect("cat");
        cat.push(t.elapsed());
        assert!(status.success(), "cat");
        evict(&pack);
        let root = dir.join(format!("import-{run}"));
        let fresh = Cache::open(&root).expect("open fresh root");
        let t = Instant::now();
        let report = fresh.import_pack(&pack).expect("import");
        import.push(t.elapsed());
        assert_eq!(report.imported, entries, "every entry imported: {report:?}");
        flushes = report.flushes;
        shared = report.bytes_shared;
        not_shared = report.not_shared;
        drop(fresh);
        remove(&root);
        evict_tree(&tree);
        let copy = dir.join(format!("cp-import-{run}"));
        cp_import.push(cp_and_sync(&tree, &copy));
        remove(&copy);
    }
    let (k, i, c) = (median(cat), median(import), median(cp_import));
    println!("\nimport into a fresh root (cold page cache)");
    println!(
        "  cat pack > /dev/null      {:>8.0} ms  {:>6.0} MB/s",
        ms(k),
        mbps(bytes, k)
    );
    println!(
        "  jit-cache pack import     {:>8.0} ms  {:>6.0} MB/s  ({flushes} flushes for {entries} entries, {} MB shared)",
        ms(i),
        mbps(bytes, i),
        shared / 1_000_000
    );
    if let Some(why) = &not_shared {
        println!("    files written, not shared: {why}");
    }
    println!(
        "  cp -r tree + sync         {:>8.0} ms  {:>6.0} MB/s",
        ms(c),
        mbps(bytes, c)
    );
    let f = median(floor);
    println!(
        "  one file, write + fsync   {:>8.0} ms  {:>6.0} MB/s  (the disk's durable write rate)",
        ms(f),
        mbps(bytes, f)
    );
    println!(
        "  import rate / cat rate    {:>8.2}x (goal >= 0.8x)",
        k.as_secs_f64() / i.as_secs_f64()
    );
    println!(
        "  import / cp               {:>8.2}x the time (goal < 1)",
        ratio(i, c)
    );
    println!(
        "  import rate / write rate  {:>8.2}x (an import writes every byte it reads)",
        f.as_secs_f64() / i.as_secs_f64()
    );
}

/// `entries` stored entries, through the store's producer.
fn fill(root: &Path, entries: usize) {
    let store = Store::open(root).expect("open store");
    let ns = Namespace::new("bench").expect("namespace");
    for i in 0..entries {
        let key = format!("entry-{i:04}");
        let Claim::Produce(producer) = store
            .begin(&ns, &key, Duration::from_secs(60))
            .expect("begin")
        else {
            panic!("{key} existed");
        };
        // Bytes that differ per entry and do not compress to nothing.
        let mut state = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let artifact: Vec<u8> = (0..ARTIFACT)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        producer.write("kernel.cubin", &artifact).expect("write");
        producer
            .write("kernel.json", format!("{{\"entry\": {i}}}").as_bytes())
            .expect("write");
        producer.commit().expect("commit");
    }
}

fn cp_and_sync(from: &Path, to: &Path) -> Duration {
    let t = Instant::now();
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cp -r '{}' '{}' && sync",
            from.display(),
            to.display()
        ))
        .status()
        .expect("cp");
    assert!(status.success(), "cp -r + sync");
    t.elapsed()
}

/// Drops a file's pages from the page cache (its data is on disk first).
fn evict(path: &Path) {
    let file = std::fs::File::open(path).expect("open to evict");
    file.sync_all().expect("fsync before eviction");
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).expect("fadvise");
}

fn evict_tree(dir: &Path) {
    for item in std::fs::read_dir(dir).expect("list").flatten() {
        let path = item.path();
        if path.is_dir() {
            evict_tree(&path);
        } else {
            evict(&path);
        }
    }
}

fn remove(path: &Path) {
    let _ = std::fs::remove_dir_all(path);
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}
