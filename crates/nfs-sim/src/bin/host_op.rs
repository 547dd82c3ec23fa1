//! One cache operation as a process on a simulated host (`nfs-sim`'s tests start it through
//! `Cluster::spawn`, which sets the host's identity). Prints one JSON line.
//!
//! ```text
//! nfs-sim-host-op build <root> <nvcc> <name> [--hold <ready-file> <release-file>]
//! nfs-sim-host-op build-file <root> <nvcc> <source> <include-dir>
//! nfs-sim-host-op clear|sweep|stats <root>
//! nfs-sim-host-op store|store-get <root> <key>
//! ```
//! `build-file` builds a source file with one include directory and reports, besides the
//! outcome, the text the artifact embeds after `VAL=` (up to `;`), if any.
//! `build --hold` keeps the artifact, writes its path to `<ready-file>`, waits (at most 120 s)
//! for `<release-file>` to exist, and reports whether the path still reads the same bytes.
//! `store` asks the keyed store for `<key>` (its one file, `data`, holds the key) and produces
//! it when nobody has; `store-get` only looks it up. Both report the bytes they were answered.

use anyhow::{bail, Context, Result};
use jit_cache::{Cache, CacheOptions, KernelSpec};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The kernel text of a name: one key per name.
fn kernel_text(name: &str) -> String {
    format!(
        "// nfs-sim kernel {name}\nextern \"C\" __global__ void {name}(float* x) {{ x[threadIdx.x] *= 2.0f; }}\n"
    )
}

fn open(root: &Path, nvcc: Option<&Path>) -> Result<Cache> {
    let mut options = CacheOptions::default();
    if let Some(nvcc) = nvcc {
        options = options.nvcc(nvcc::Nvcc::at(nvcc).context("use the fake nvcc")?);
    }
    Cache::open_with(root, options).with_context(|| format!("open cache {}", root.display()))
}

/// Waits for `path` to exist, polling a condition with a bound (not a sleep as a barrier).
fn wait_for(path: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        bail!("usage: nfs-sim-host-op build|clear|sweep|stats <root> ...");
    };
    let root = PathBuf::from(rest.first().context("need <root>")?);
    match command.as_str() {
        "build" => {
            let nvcc = PathBuf::from(rest.get(1).context("need <nvcc>")?);
            let name = rest.get(2).context("need <name>")?;
            let cache = open(&root, Some(&nvcc))?;
            let spec = KernelSpec::from_text(name, format!("{name}.cu"), kernel_text(name));
            let answer = match cache.get_or_build(&spec) {
                Ok(answer) => answer,
                Err(e) => {
                    println!("{}", json!({ "error": e.to_string() }));
                    std::process::exit(3);
                }
            };
            let path = answer.artifact.path().to_path_buf();
            let mut held_ok = None;
            if rest.get(3).map(String::as_str) == Some("--hold") {
                let ready = PathBuf::from(rest.get(4).context("need <ready-file>")?);
                let release = PathBuf::from(rest.get(5).context("need <release-file>")?);
                std::fs::write(&ready, path.as_os_str().as_encoded_bytes())
                    .with_context(|| format!("write {}", ready.display()))?;
                if !wait_for(&release, Duration::from_secs(120)) {
                    bail!("{} never appeared", release.display());
                }
                held_ok =
                    Some(std::fs::read(&path).is_ok_and(|bytes| bytes == answer.artifact.bytes()));
            }
            println!(
                "{}",
                json!({
                    "outcome": answer.outcome.to_string(),
                    "warning": answer.warning,
                    "path": path,
                    "held_ok": held_ok,
                    "cached": answer.warning.is_none(),
                })
            );
        }
        "build-file" => {
            let nvcc = PathBuf::from(rest.get(1).context("need <nvcc>")?);
            let source = PathBuf::from(rest.get(2).context("need <source>")?);
            let include = PathBuf::from(rest.get(3).context("need <include-dir>")?);
            let cache = open(&root, Some(&nvcc))?;
            let spec = KernelSpec::from_file(&source).include_dir(&include);
            match cache.get_or_build(&spec) {
                Ok(answer) => {
                    let bytes = answer.artifact.bytes();
                    let marker = b"VAL=";
                    let value = bytes
                        .windows(marker.len())
                        .position(|w| w == marker)
                        .map(|at| {
                            let rest = &bytes[at + marker.len()..];
                            let end = rest.iter().position(|&b| b == b';').unwrap_or(0);
                            String::from_utf8_lossy(&rest[..end]).into_owned()
                        });
                    println!(
                        "{}",
                        json!({
                            "outcome": answer.outcome.to_string(),
                            "warning": answer.warning,
                            "value": value,
                        })
                    );
                }
                Err(e) => {
                    println!("{}", json!({ "error": e.to_string() }));
                    std::process::exit(3);
                }
            }
        }
        "store" | "store-get" => {
            let key = rest.get(1).context("need <key>")?;
            let store = jit_cache::store::Store::open(&root)
                .with_context(|| format!("open store {}", root.display()))?;
            let namespace = jit_cache::store::Namespace::new("nfs-sim")?;
            let answered = if command == "store-get" {
                store.get(&namespace, key).map(|found| ("looked up", found))
            } else {
                store
                    .get_or_insert_with(&namespace, key, Duration::from_secs(60), |dir| {
                        std::fs::write(dir.join("data"), key)
                    })
                    .map(|entry| ("answered", Some(entry)))
            };
            match answered {
                Ok((outcome, entry)) => {
                    let data = entry
                        .map(|entry| {
                            entry
                                .read("data")
                                .map(|b| String::from_utf8_lossy(&b).into_owned())
                        })
                        .transpose()
                        .context("read the stored file")?;
                    println!("{}", json!({ "outcome": outcome, "data": data }));
                }
                Err(e) => {
                    println!("{}", json!({ "error": e.to_string() }));
                    std::process::exit(3);
                }
            }
        }
        "clear" => {
            let report = open(&root, None)?.clear().context("clear")?;
            println!(
                "{}",
                json!({ "evicted": report.evicted, "skipped_busy": report.skipped_busy, "swept": report.swept })
            );
        }
        "sweep" => {
            let swept = open(&root, None)?.sweep().context("sweep")?;
            println!("{}", json!({ "swept": swept }));
        }
        "stats" => {
            let stats = open(&root, None)?.stats().context("stats")?;
            println!("{}", json!({ "stats": stats }));
        }
        other => bail!("unknown command {other}"),
    }
    Ok(())
}
