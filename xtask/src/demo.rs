//! `cargo xtask demo`: the main job. Builds the example kernels through the JIT cache into a fresh
//! demo cache (cold), builds them again (hits), edits a copy of the shared header and shows the
//! rebuild with its reason, then prints a table of cold and warm times and `jit-cache stats`.

use crate::util;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub fn run(_args: &[String]) -> Result<()> {
    // The demo needs no pipeline packages (torch, FlashInfer: gigabytes).
    let nvcc = crate::setup::run(&["--no-pipelines".into()])?.nvcc;
    util::run_checked(util::cargo().args([
        "build",
        "--release",
        "-q",
        "-p",
        "jit-cache-cli",
        "--bin",
        "jit-cache",
    ]))?;
    let root = util::workspace_root();
    let cli = util::target_dir().join("release/jit-cache");
    let cache = root.join("target/demo/cache");
    let work = root.join("target/demo/kernels");
    for dir in [&cache, &work] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("remove {}", dir.display()))?;
        }
    }
    copy_dir(&root.join("examples/kernels"), &work)?;
    let mut kernels: Vec<PathBuf> = std::fs::read_dir(&work)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    kernels.sort();
    let include = work.join("include");
    println!(
        "demo cache: {}\ncompiler:   {}\n",
        cache.display(),
        nvcc.display()
    );

    let build = |source: &Path| -> Result<(String, f64)> {
        let start = Instant::now();
        let out = Command::new(&cli)
            .arg("--cache-dir")
            .arg(&cache)
            .arg("build")
            .arg(source)
            .arg("-I")
            .arg(&include)
            .env("NVCC", &nvcc)
            .output()
            .with_context(|| format!("run {}", cli.display()))?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if !out.status.success() {
            bail!(
                "jit-cache build {} failed: {}",
                source.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        println!("  {line}");
        Ok((line, ms))
    };

    println!("1. cold cache: every kernel is compiled and published");
    let cold: Vec<(String, f64)> = kernels.iter().map(|k| build(k)).collect::<Result<_>>()?;
    println!("2. warm cache: every kernel is a hit");
    let warm: Vec<(String, f64)> = kernels.iter().map(|k| build(k)).collect::<Result<_>>()?;
    for (line, _) in &warm {
        if !line.contains(": hit ") {
            bail!("expected a hit on the second build, got `{line}`");
        }
    }
    println!(
        "3. edit the shared header include/tile.cuh: only the kernel that includes it is rebuilt"
    );
    let header = include.join("tile.cuh");
    let text = std::fs::read_to_string(&header)?;
    std::fs::write(&header, text.replace("#define TILE 16", "#define TILE 32"))?;
    let after: Vec<(String, f64)> = kernels.iter().map(|k| build(k)).collect::<Result<_>>()?;
    if !after
        .iter()
        .any(|(line, _)| line.contains("rebuilt (header `tile.cuh` changed"))
    {
        bail!("the header edit did not produce a rebuild naming the header");
    }

    println!(
        "\n{:<14} {:>10} {:>10} {:>9}   after header edit",
        "kernel", "cold ms", "warm ms", "speedup"
    );
    for (i, kernel) in kernels.iter().enumerate() {
        let name = kernel
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let outcome = after[i]
            .0
            .split(": ")
            .nth(1)
            .unwrap_or("")
            .split(" /")
            .next()
            .unwrap_or("");
        println!(
            "{:<14} {:>10.1} {:>10.1} {:>8.0}x   {}",
            name,
            cold[i].1,
            warm[i].1,
            cold[i].1 / warm[i].1,
            outcome
        );
    }
    println!("(each time is a whole `jit-cache build` process; the library's own hit costs microseconds: `cargo xtask bench jit-cache`)\n");
    println!("$ jit-cache stats");
    util::run_checked(
        Command::new(&cli)
            .arg("--cache-dir")
            .arg(&cache)
            .arg("stats"),
    )?;
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("read {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
