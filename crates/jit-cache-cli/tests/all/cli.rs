//! The CLI's contract: exit codes, JSON documents, team roots.

use crate::support::*;
use std::os::unix::fs::PermissionsExt;

#[test]
fn usage_errors_exit_2_and_cache_errors_exit_3() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = cli(&dir.path().join("c"), &real_nvcc())
        .arg("build")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "no source is a usage error");
    let open = dir.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod 777");
    let out = cli(&open, &real_nvcc()).arg("stats").output().expect("run");
    assert_eq!(
        out.status.code(),
        Some(3),
        "an unsafe root is a cache error"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("writable by every user"));
}

#[test]
fn a_team_root_needs_the_team_flag_and_setgid_2770() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("team");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2770)).expect("chmod 2770");
    let out = cli(&root, &real_nvcc()).arg("stats").output().expect("run");
    assert_eq!(
        out.status.code(),
        Some(3),
        "a group-writable root is refused as a private cache"
    );
    let out = cli(&root, &real_nvcc())
        .args(["--team", "stats"])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sub = std::fs::metadata(root.join(jit_cache::FORMAT_DIR).join("entries"))
        .expect("entries dir")
        .permissions()
        .mode();
    assert_eq!(
        sub & 0o7777,
        0o2770,
        "team directories are created setgid 2770"
    );
}

#[test]
fn explain_ls_stats_and_gc_speak_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("k.cu");
    std::fs::write(&source, kernel_text(8)).expect("write kernel");
    let cache_dir = dir.path().join("cache");
    let json = |args: &[&str]| -> serde_json::Value {
        let out = cli(&cache_dir, &real_nvcc())
            .arg("--json")
            .args(args)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON document")
    };
    let source = source.to_str().expect("utf-8 path");
    assert_eq!(json(&["explain", source])["explain"][0]["action"], "build");
    assert_eq!(json(&["build", source])["results"][0]["outcome"], "built");
    assert_eq!(json(&["explain", source])["explain"][0]["action"], "hit");
    assert_eq!(json(&["ls"])["entries"].as_array().map(Vec::len), Some(1));
    assert_eq!(json(&["stats"])["stats"]["entries"], 1);
    assert_eq!(json(&["gc", "--max-size", "0"])["gc"]["evicted"], 1);
    assert_eq!(json(&["stats"])["stats"]["entries"], 0);
}

#[test]
fn a_compile_timeout_exits_1_with_a_structured_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let hanging = dir.path().join("bin/nvcc");
    std::fs::create_dir_all(hanging.parent().expect("parent")).expect("mkdir");
    write_executable(
        &hanging,
        "#!/bin/sh\ncase \" $* \" in *\" --version \"*|*\" --help \"*) echo 'Cuda compilation tools, release 13.5, V13.5.0' ;; *\" -dryrun \"*) exit 1 ;; *) exec sleep 600 ;; esac\n",
    );
    let source = dir.path().join("k.cu");
    std::fs::write(&source, kernel_text(1)).expect("write kernel");
    for _ in 0..2 {
        let out = cli(&dir.path().join("cache"), &hanging)
            .args(["--json", "build"])
            .arg(&source)
            .args(["--timeout", "0.3"])
            .output()
            .expect("run build");
        assert_eq!(
            out.status.code(),
            Some(1),
            "a timeout is a compile failure: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("one JSON document");
        assert_eq!(
            doc["results"][0]["cause"]["timeout"]["after_ms"], 300,
            "the cause says timeout: {doc}"
        );
    }
}

#[test]
fn stats_into_a_closed_pipe_ends_quietly_and_counts_hits_and_builds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path().join("cache");
    let source = dir.path().join("k.cu");
    std::fs::write(&source, kernel_text(70)).expect("write kernel");
    for _ in 0..3 {
        let out = cli(&cache, &real_nvcc())
            .arg("build")
            .arg(&source)
            .output()
            .expect("run build");
        assert!(out.status.success(), "{out:?}");
    }
    let out = cli(&cache, &real_nvcc())
        .args(["--json", "stats"])
        .output()
        .expect("run stats");
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    assert_eq!(stats["stats"]["built"], 1, "one build: {stats}");
    assert_eq!(stats["stats"]["hits"], 2, "two hits, counted: {stats}");
    // `jit-cache stats | head -1`: the reader goes away after one line. Before, the second
    // line panicked ("failed printing to stdout: Broken pipe") with exit status 101.
    let mut child = cli(&cache, &real_nvcc())
        .arg("stats")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn stats");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait for stats");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stats ends quietly on a closed pipe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_uncached_answer_names_a_path_that_outlives_the_command() {
    // A cache root on a full filesystem compiles privately, with a warning; the path the
    // command prints must name the artifact after it exits (before, the private copy was
    // removed with the process).
    fs_testbed::run_or_skip(fs_testbed::FsKind::TinyTmpfs, |mount| {
        let source = mount.join("k.cu");
        std::fs::write(&source, kernel_text(71)).expect("write kernel");
        let filler = mount.join("filler");
        let mut fill = std::fs::File::create(&filler).expect("create filler");
        let chunk = vec![0u8; 64 << 10];
        while std::io::Write::write_all(&mut fill, &chunk).is_ok() {}
        drop(fill);
        let out = cli(&mount.join("cache"), &real_nvcc())
            .args(["--json", "build"])
            .arg(&source)
            .output()
            .expect("run build");
        assert!(out.status.success(), "{out:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("build JSON");
        let result = &doc["results"][0];
        assert!(
            result["warning"].is_string(),
            "uncached, with a warning: {doc}"
        );
        let path = std::path::PathBuf::from(result["path"].as_str().expect("a path"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "the printed path {} names the artifact: {e}",
                path.display()
            )
        });
        assert_eq!(&bytes[..4], b"\x7fELF", "a cubin");
        let _ = std::fs::remove_dir_all(path.parent().expect("kept dir"));
        // The text form prints the same lasting path (before, the private copy's, gone by the
        // time the command returned).
        let out = cli(&mount.join("cache"), &real_nvcc())
            .arg("build")
            .arg(&source)
            .output()
            .expect("run build");
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let printed = stdout
            .trim_end()
            .rsplit_once(' ')
            .map(|(_, path)| std::path::PathBuf::from(path))
            .expect("`k: built PATH`");
        let bytes = std::fs::read(&printed).unwrap_or_else(|e| {
            panic!(
                "the printed path {} names the artifact: {e}",
                printed.display()
            )
        });
        assert_eq!(&bytes[..4], b"\x7fELF", "a cubin");
        let _ = std::fs::remove_dir_all(printed.parent().expect("kept dir"));
    });
}

#[test]
fn another_compiler_through_the_launcher_runs_unchanged() {
    // FlashInfer's `FLASHINFER_CXX_LAUNCHER=jit-cache` runs `jit-cache c++ ...` for its .cpp
    // units: before, that was "unrecognized subcommand" (exit 2) and the build failed.
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("h.cpp"), "int f() { return 1; }\n").expect("write");
    for compiler in ["c++", "/usr/bin/c++"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_jit-cache"))
            .args([compiler, "-fPIC", "-O2", "-c", "h.cpp", "-o", "h.o"])
            .current_dir(dir.path())
            .env("JIT_CACHE_DIR", dir.path().join("cache"))
            .output()
            .expect("run the launcher");
        assert!(out.status.success(), "{compiler}: {out:?}");
        assert!(dir.path().join("h.o").exists(), "{compiler} compiled");
        std::fs::remove_file(dir.path().join("h.o")).expect("remove");
    }
    let log = std::fs::read_to_string(dir.path().join("cache/launcher.log")).expect("log");
    assert_eq!(
        log.lines()
            .filter(|l| *l == "uncacheable: c++ is not nvcc")
            .count(),
        2,
        "counted by its reason: {log}"
    );
}

#[test]
fn an_empty_nvcc_append_flags_is_the_same_command_as_none() {
    // nvcc reads NVCC_APPEND_FLAGS= as no flags; the key did not, so a CMake rebuild with the
    // variable set empty compiled everything again.
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("k.cu"), kernel_text(72)).expect("write kernel");
    let counter = CountingCompiler::new(dir.path());
    for value in [None, Some(""), Some("  ")] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_jit-cache"));
        cmd.arg(&counter.path)
            .args(["-arch=sm_90", "-cubin", "k.cu", "-o", "k.cubin"])
            .current_dir(dir.path())
            .env("JIT_CACHE_DIR", dir.path().join("cache"));
        match value {
            Some(v) => cmd.env("NVCC_APPEND_FLAGS", v),
            None => cmd.env_remove("NVCC_APPEND_FLAGS"),
        };
        let out = cmd.output().expect("run the launcher");
        assert!(out.status.success(), "{out:?}");
    }
    assert_eq!(
        counter.compiles(),
        1,
        "one compile for unset, empty and blank"
    );
}

#[test]
fn ls_prints_a_stored_key_with_control_characters_as_escapes_on_one_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("cache");
    let store = jit_cache::store::Store::open(&root).expect("open store");
    let ns = jit_cache::store::Namespace::new("triton").expect("namespace");
    store
        .get_or_insert_with(
            &ns,
            "k\n17 forged-line\u{1b}[2J",
            std::time::Duration::from_secs(30),
            |dir| std::fs::write(dir.join("x"), b"bytes"),
        )
        .expect("stored entry");
    let out = crate::support::cli(&root, &crate::support::real_nvcc())
        .arg("ls")
        .output()
        .expect("run ls");
    assert!(out.status.success(), "ls: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "one entry, one line: {text:?}");
    assert!(
        !text.contains('\u{1b}'),
        "no escape sequence reaches the terminal: {text:?}"
    );
}

#[test]
fn a_relative_cache_root_caches_a_ptx_build() {
    // `--cache-dir rel` and `JIT_CACHE_DIR=rel`: before, the compile's own places were spelled
    // relative while the trace's were absolute, so every PTX build was a side effect, compiled
    // again at every request.
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("k.cu"), kernel_text(73)).expect("write kernel");
    let counter = CountingCompiler::new(dir.path());
    for _ in 0..2 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_jit-cache"))
            .args([
                "--json",
                "--cache-dir",
                "rel-cli",
                "build",
                "k.cu",
                "--kind",
                "ptx",
            ])
            .current_dir(dir.path())
            .env("NVCC", &counter.path)
            .output()
            .expect("run build");
        assert!(out.status.success(), "{out:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("build JSON");
        assert!(
            doc["results"][0]["warning"].is_null(),
            "cached, no warning: {doc}"
        );
    }
    assert_eq!(counter.compiles(), 1, "the CLI compiled once, then hit");
    for _ in 0..2 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_jit-cache"))
            .arg(&counter.path)
            .args(["-arch=sm_90", "-ptx", "k.cu", "-o", "k.ptx"])
            .current_dir(dir.path())
            .env("JIT_CACHE_DIR", "rel-launcher")
            .output()
            .expect("run the launcher");
        assert!(out.status.success(), "{out:?}");
    }
    assert_eq!(
        counter.compiles(),
        2,
        "the launcher compiled once, then hit"
    );
}
