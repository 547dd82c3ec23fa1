//! kill -9 of a builder mid-compile and mid-publish: the next call builds or hits, nothing waits
//! on a dead lock, and the sweep removes the leftovers. The kills at named publication steps need
//! jit-cache's failpoints (`--features failpoints`); the kill mid-compile runs on the production
//! build.

use crate::support::*;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

fn staging_count(cache_dir: &std::path::Path) -> usize {
    std::fs::read_dir(cache_dir.join(jit_cache::FORMAT_DIR).join("staging"))
        .map(|r| r.count())
        .unwrap_or(0)
}

/// Ages the leftovers in staging past the sweep's minimum age, instead of waiting for it.
fn age_staging(cache_dir: &std::path::Path) {
    for entry in std::fs::read_dir(cache_dir.join(jit_cache::FORMAT_DIR).join("staging"))
        .expect("staging")
        .flatten()
    {
        set_mtime(&entry.path(), 1_000_000_000);
    }
}

#[test]
fn heavy_a_builder_killed_mid_compile_blocks_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A compiler that announces itself on a FIFO and then blocks reading another: the builder is
    // provably inside the compile when it is killed, with no sleep involved.
    let started = dir.path().join("started.fifo");
    let hold = dir.path().join("hold.fifo");
    for fifo in [&started, &hold] {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
    }
    let stuck = dir.path().join("stuck-bin/nvcc");
    std::fs::create_dir_all(stuck.parent().expect("parent")).expect("mkdir");
    write_executable(
        &stuck,
        &format!(
            "#!/bin/sh\ncase \" $* \" in *\" --version \"*|*\" -dryrun \"*) exec '{}' \"$@\" ;; esac\necho started > '{}'\nread x < '{}'\n",
            real_nvcc().display(),
            started.display(),
            hold.display()
        ),
    );
    let source = dir.path().join("k.cu");
    std::fs::write(&source, kernel_text(7)).expect("write kernel");
    let cache_dir = dir.path().join("cache");
    let mut builder = cli(&cache_dir, &stuck)
        .arg("build")
        .arg(&source)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    std::fs::File::open(&started)
        .expect("open started fifo")
        .read_to_string(&mut line)
        .expect("wait for the compile");
    assert_eq!(line.trim(), "started");
    builder.kill().expect("kill -9 the builder");
    let status = builder.wait().expect("reap");
    assert_eq!(status.signal(), Some(9), "the builder died of SIGKILL");
    // The lock died with the builder: the next build (real compiler) neither waits nor fails.
    let out = cli(&cache_dir, &real_nvcc())
        .arg("build")
        .arg(&source)
        .output()
        .expect("rebuild");
    assert!(
        out.status.success(),
        "next build works: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("built"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        staging_count(&cache_dir) > 0,
        "the dead builder left its staging directories (entry and scratch)"
    );
    age_staging(&cache_dir);
    let out = cli(&cache_dir, &real_nvcc())
        .arg("gc")
        .output()
        .expect("gc sweeps");
    assert!(out.status.success());
    assert_eq!(
        staging_count(&cache_dir),
        0,
        "the dead builder's staging directory was swept"
    );
    // Release the stub if it somehow outlived its parent (PDEATHSIG should have killed it).
    use std::os::unix::fs::OpenOptionsExt;
    let nonblock = rustix::fs::OFlags::NONBLOCK.bits() as i32;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nonblock)
        .open(&hold);
}

#[cfg(feature = "failpoints")]
#[test]
fn heavy_a_builder_killed_at_each_publication_failpoint_leaves_nothing_visible_or_blocking() {
    for point in ["compiling", "writing-meta", "publishing", "published"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let source = dir.path().join("k.cu");
        std::fs::write(&source, kernel_text(5)).expect("write kernel");
        let cache_dir = dir.path().join("cache");
        let status = cli(&cache_dir, &real_nvcc())
            .env("JIT_CACHE_FAILPOINT", format!("{point}:abort"))
            .arg("build")
            .arg(&source)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run builder");
        assert_eq!(
            status.signal(),
            Some(9),
            "{point}: the builder was killed there (failpoints compiled in)"
        );
        let out = cli(&cache_dir, &real_nvcc())
            .arg("build")
            .arg(&source)
            .output()
            .expect("next build");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{point}: next build works: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expected = if point == "published" { "hit" } else { "built" };
        assert!(
            stdout.contains(expected),
            "{point}: expected {expected}, got {stdout}"
        );
        age_staging(&cache_dir);
        let verify = cli(&cache_dir, &real_nvcc())
            .args(["--json", "verify"])
            .output()
            .expect("verify");
        let doc: serde_json::Value = serde_json::from_slice(&verify.stdout).expect("verify JSON");
        assert_eq!(
            doc["verify"]["corrupt"].as_array().map(Vec::len),
            Some(0),
            "{point}: nothing corrupt: {doc}"
        );
        assert_eq!(staging_count(&cache_dir), 0, "{point}: leftovers swept");
    }
}
