//! Host-side checks of the GPU run: on a machine without a GPU every entry point must give a clear
//! error, never a panic (`CudaContext::new` panics when libcuda is missing).

use std::process::Command;

#[test]
fn without_a_driver_gpu_check_says_so_and_never_panics() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-check"))
        .arg("--kernels")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/kernels"
        ))
        .arg("--work")
        .arg(dir.path())
        .arg("--checkpoint-gib")
        .arg("0.01")
        .output()
        .expect("run gpu-check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "gpu-check must not panic: {stderr}"
    );
    if jit_cache::cuda::cuda_available() {
        // A GPU machine: the whole run must pass.
        assert!(
            out.status.success(),
            "gpu-check failed on a GPU machine: {stderr}"
        );
    } else {
        assert_eq!(
            out.status.code(),
            Some(2),
            "a clear failure, not success: {stderr}"
        );
        assert!(
            stderr.contains("no CUDA driver here"),
            "the message says why: {stderr}"
        );
    }
}

#[test]
fn without_a_driver_the_library_entry_points_return_errors() {
    if jit_cache::cuda::cuda_available() {
        return;
    }
    let err = jit_cache::cuda::context(0).expect_err("no context without libcuda");
    assert!(err.to_string().contains("libcuda"), "{err}");
    let err = direct_io::CudaSink::new(0, [16u64]).expect_err("no sink without libcuda");
    assert!(err.to_string().contains("libcuda"), "{err}");
}

#[test]
fn usage_errors_are_reported() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-check"))
        .arg("--bogus")
        .output()
        .expect("run gpu-check");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument"));
}
