//! How much slower a durable put is on powercut-fs than on tmpfs and the default temp dir, and
//! what one power cut (unmount, resolve, remount) costs. Prints medians and ratios.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use fs_testbed::FsKind;
use powercut_fs::Options;

const PUTS: usize = 300;
const CUTS: usize = 50;

/// The agreed sequence: temp (O_EXCL), write, fsync, rename, fsync the directory.
fn put(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .expect("create the temp file");
    file.write_all(bytes).expect("write");
    file.sync_all().expect("fsync the file");
    drop(file);
    std::fs::rename(&tmp, dir.join(name)).expect("rename into place");
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("fsync the directory");
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time_puts(dir: &Path) -> Duration {
    let bytes = vec![7u8; 4096];
    let samples = (0..PUTS)
        .map(|i| {
            let start = Instant::now();
            put(dir, &format!("f{}", i % 16), &bytes);
            start.elapsed()
        })
        .collect();
    median(samples)
}

fn main() {
    let on_powercut = powercut_fs::run_or_skip(Options::default(), |mount| {
        let puts = time_puts(mount.root());
        let cuts = (0..CUTS)
            .map(|_| {
                let start = Instant::now();
                mount.power_cut().expect("cut and remount");
                start.elapsed()
            })
            .collect();
        (puts, median(cuts))
    });
    let on_tmpfs = fs_testbed::run_or_skip(FsKind::Tmpfs, time_puts);
    let on_default = fs_testbed::run_or_skip(FsKind::DefaultTmp, time_puts);
    let (Some((powercut, cut)), Some(tmpfs), Some(default)) = (on_powercut, on_tmpfs, on_default)
    else {
        eprintln!("skipped: a filesystem could not be mounted");
        return;
    };
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    println!("durable put of 4 KiB, median of {PUTS}:");
    println!("  {:<22} {:>10.1?}", "powercut-fs", powercut);
    println!(
        "  {:<22} {:>10.1?}  (powercut-fs is {:.1}x)",
        "tmpfs",
        tmpfs,
        ratio(powercut, tmpfs)
    );
    println!(
        "  {:<22} {:>10.1?}  (powercut-fs is {:.1}x)",
        "default temp dir",
        default,
        ratio(powercut, default)
    );
    println!("power cut (unmount, resolve, remount), median of {CUTS}: {cut:.1?}");
}
