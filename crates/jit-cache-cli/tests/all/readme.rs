//! The README's command lines, run as written: a documented command that the binary takes for
//! something else (`jit-cache pack ...` launched a program named `pack`) fails here.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The README's lines that run `jit-cache` itself, in its order: every line of a code block
/// whose first word is `jit-cache`, but for the synopses (`[--cache-dir DIR]`, `... stats | ls`),
/// which name forms rather than commands.
fn documented_lines() -> Vec<String> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&readme)
        .unwrap_or_else(|e| panic!("read {}: {e}", readme.display()));
    let mut in_block = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        let synopsis = line.contains(" [") || line.contains(" ... ") || line.contains(" | ");
        if in_block && line.starts_with("jit-cache ") && !synopsis {
            lines.push(line.to_string());
        }
    }
    lines
}

/// A directory with `jit-cache` (this build's binary) in it, for `PATH`.
fn bin_dir(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("create bin");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_jit-cache"), bin.join("jit-cache"))
        .expect("link jit-cache");
    bin
}

#[test]
fn every_command_line_of_the_readme_runs_as_written() {
    let lines = documented_lines();
    for expected in ["jit-cache pack ls kernels.pack", "jit-cache nvcc "] {
        assert!(
            lines.iter().any(|l| l.starts_with(expected)),
            "the README's `{expected}` line is found: {lines:#?}"
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path().join("work");
    // The files the lines name: the README's kernels and project layout.
    for (path, text) in [
        ("kernels/gemm_f16.cu", kernel_text(80)),
        ("kernels/include/.keep", String::new()),
        ("src/k.cu", kernel_text(81)),
        ("include/.keep", String::new()),
        ("build/.keep", String::new()),
    ] {
        let path = work.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write fixture");
    }
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("mkdir home");
    let path = format!(
        "{}:{}",
        bin_dir(dir.path()).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The README's absolute build directory is put under this test's own.
    let build_root = dir.path().join("build");
    let shell = |line: &str| {
        let line = line.replace(" /build/", &format!(" {}/", build_root.display()));
        let out = Command::new("sh")
            .args(["-c", &line])
            .current_dir(&work)
            .env("PATH", &path)
            .env("HOME", &home)
            .env("JIT_CACHE_DIR", build_root.join("cache"))
            .env("NVCC", real_nvcc())
            .env_remove("JIT_CACHE_REMOTE")
            .output()
            .expect("run sh");
        (line, out)
    };
    // The pack lines export what a build put in the cache: build the README's kernel first.
    let (_, built) = shell("jit-cache build kernels/gemm_f16.cu -I kernels/include");
    assert!(built.status.success(), "the kernel builds: {built:?}");
    for line in &lines {
        let (run, out) = shell(line);
        assert!(
            out.status.success(),
            "`{run}` (README: `{line}`) succeeds: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        if line.contains("pack ls") {
            assert!(
                stdout.contains("gemm_f16"),
                "`{run}` lists the exported kernel: {stdout}"
            );
        }
        if line.contains("pack import") {
            assert!(
                stdout.contains("imported 1"),
                "`{run}` imports the exported kernel: {stdout}"
            );
        }
    }
    assert!(
        work.join("build/k.o").is_file(),
        "the launcher line wrote its object"
    );
}

#[test]
fn every_subcommand_is_the_clis_own_never_a_program_to_launch() {
    // The launcher takes any other first word for a program (`jit-cache c++ ...`): each command
    // `jit-cache --help` lists must reach the CLI, and a new one does so by itself.
    let help = Command::new(env!("CARGO_BIN_EXE_jit-cache"))
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(help.status.success(), "{help:?}");
    let text = String::from_utf8_lossy(&help.stdout);
    let commands: Vec<&str> = text
        .split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("a Commands section")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        commands.contains(&"pack") && commands.contains(&"build"),
        "the commands are read from --help: {commands:?}"
    );
    for command in commands {
        let out = Command::new(env!("CARGO_BIN_EXE_jit-cache"))
            .args([command, "--help"])
            .env("JIT_CACHE_DIR", "/nonexistent/jit-cache")
            .output()
            .expect("run the command's help");
        // clap's answer (usage on stdout, or for `help --help` a usage error on stderr), never
        // the launcher's "run <program>".
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            said.contains("Usage: jit-cache") && !said.contains(&format!("run {command}")),
            "`jit-cache {command} --help` is the CLI's: {out:?}"
        );
    }
}
