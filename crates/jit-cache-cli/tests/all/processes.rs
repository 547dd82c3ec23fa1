//! Many processes at once: each artifact is compiled once, and a broken kernel once too.

use crate::support::*;
use std::process::{Child, Stdio};

fn spawn_builders(
    n: usize,
    cache_dir: &std::path::Path,
    nvcc: &std::path::Path,
    sources: &[std::path::PathBuf],
) -> Vec<Child> {
    (0..n)
        .map(|_| {
            cli(cache_dir, nvcc)
                .arg("--json")
                .arg("build")
                .args(sources)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn jit-cache build")
        })
        .collect()
}

#[test]
fn heavy_eight_processes_six_kernels_compile_each_exactly_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let compiler = CountingCompiler::new(dir.path());
    let sources: Vec<_> = (0..6)
        .map(|n| {
            let path = dir.path().join(format!("k{n}.cu"));
            std::fs::write(&path, kernel_text(n)).expect("write kernel");
            path
        })
        .collect();
    let cache_dir = dir.path().join("cache");
    let children = spawn_builders(8, &cache_dir, &compiler.path, &sources);
    let mut per_kernel: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 6];
    for child in children {
        let out = child.wait_with_output().expect("wait for builder");
        assert!(
            out.status.success(),
            "builder failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("one JSON document");
        let results = doc["results"].as_array().expect("results array");
        assert_eq!(results.len(), 6, "six results per process");
        for (i, result) in results.iter().enumerate() {
            let path = result["path"].as_str().expect("artifact path");
            per_kernel[i]
                .push(std::fs::read(path).expect("read the artifact the process was given"));
        }
    }
    assert_eq!(
        compiler.compiles(),
        6,
        "the compiler ran exactly once per kernel across 8 processes"
    );
    for (i, copies) in per_kernel.iter().enumerate() {
        assert_eq!(copies.len(), 8);
        assert!(
            copies.iter().all(|c| c == &copies[0]),
            "kernel {i}: all 8 processes got byte-identical artifacts"
        );
        assert_eq!(&copies[0][..4], b"\x7fELF", "kernel {i} is a cubin");
    }
}

#[test]
fn heavy_a_broken_kernel_asked_for_by_eight_processes_compiles_once_and_all_get_diagnostics() {
    let dir = tempfile::tempdir().expect("temp dir");
    let compiler = CountingCompiler::new(dir.path());
    let broken = dir.path().join("broken.cu");
    std::fs::write(
        &broken,
        "extern \"C\" __global__ void broken(float* x) { x[0] = ; }\n",
    )
    .expect("write broken kernel");
    let cache_dir = dir.path().join("cache");
    let children = spawn_builders(8, &cache_dir, &compiler.path, std::slice::from_ref(&broken));
    for child in children {
        let out = child.wait_with_output().expect("wait for builder");
        assert_eq!(
            out.status.code(),
            Some(1),
            "exit code 1 means a compile failed"
        );
        let doc: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("one JSON document");
        let diagnostics = &doc["results"][0]["diagnostics"];
        let first = &diagnostics[0];
        assert!(
            first["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("broken.cu")),
            "diagnostic names the file: {doc}"
        );
        assert_eq!(first["line"], 1, "diagnostic names the line: {doc}");
    }
    assert_eq!(
        compiler.compiles(),
        1,
        "a broken kernel is compiled once, not once per process"
    );
    // Fixing the source (an input change) retires the recorded failure.
    std::fs::write(&broken, kernel_text(1).replace("k1", "broken")).expect("fix the kernel");
    let out = cli(&cache_dir, &compiler.path)
        .arg("build")
        .arg(&broken)
        .output()
        .expect("run build");
    assert!(
        out.status.success(),
        "fixed kernel builds: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(compiler.compiles(), 2);
}
