//! The search for nvcc, with the environment and working directory substituted.

use crate::support::script;
use nvcc::Nvcc;
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::Path;

fn env_of(pairs: &[(&str, &Path)]) -> impl Fn(&str) -> Option<OsString> {
    let map: HashMap<String, OsString> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.as_os_str().to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn missing_nvcc_error_names_every_place_searched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let env = env_of(&[
        ("CUDA_HOME", &root.join("cuda-home")),
        ("PATH", &root.join("bin")),
        ("VIRTUAL_ENV", &root.join("venv")),
    ]);
    let err = Nvcc::locate_with(&env, root).expect_err("nothing to find");
    let shown = err.to_string();
    for place in [
        "NVCC (not set)".to_owned(),
        format!(
            "CUDA_HOME: {}/cuda-home/bin/nvcc (does not exist)",
            root.display()
        ),
        "CUDA_PATH (not set)".to_owned(),
        format!("PATH: {}/bin/nvcc (does not exist)", root.display()),
        "/usr/local/cuda/bin/nvcc".to_owned(),
        format!("VIRTUAL_ENV: {}/venv", root.display()),
        "project venv".to_owned(),
    ] {
        assert!(
            shown.contains(&place),
            "the error names {place:?}:\n{shown}"
        );
    }
}

#[test]
fn pip_layouts_are_found_in_virtual_env_and_the_project_venv() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let site = "lib/python3.11/site-packages/nvidia/cu13/bin";
    let venv_bin = root.join("venv").join(site);
    std::fs::create_dir_all(&venv_bin).expect("make venv layout");
    let venv_nvcc = script(&venv_bin, "nvcc", "exit 0\n");
    let found = Nvcc::locate_with(&env_of(&[("VIRTUAL_ENV", &root.join("venv"))]), root)
        .expect("found in $VIRTUAL_ENV");
    assert_eq!(found.path(), venv_nvcc, "the active venv's pip nvcc");

    let workspace = root.join("ws");
    let project_bin = workspace
        .join("target/nvcc-venv")
        .join(site.replace("cu13", "cu12"));
    std::fs::create_dir_all(&project_bin).expect("make project venv layout");
    std::fs::create_dir_all(workspace.join("crates/x/src")).expect("make a crate dir");
    std::fs::write(workspace.join("Cargo.toml"), "[workspace]\nmembers = []\n").expect("manifest");
    std::fs::write(
        workspace.join("crates/x/Cargo.toml"),
        "[package]\nname = \"x\"\n",
    )
    .expect("crate manifest");
    let project_nvcc = script(&project_bin, "nvcc", "exit 0\n");
    let found = Nvcc::locate_with(&env_of(&[]), &workspace.join("crates/x/src"))
        .expect("found by walking up to the workspace root");
    assert_eq!(found.path(), project_nvcc, "the project's cu12 pip nvcc");
    assert_eq!(
        found.toolkit_root(),
        project_bin.parent().expect("bin has a parent"),
        "bin/.."
    );
}

#[test]
fn an_unusable_explicit_nvcc_is_an_error_not_a_fallback() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    script(&root.join("."), "nvcc", "exit 0\n");
    let not_executable = root.join("plain");
    std::fs::write(&not_executable, "").expect("write plain file");
    let env = env_of(&[("NVCC", &not_executable), ("PATH", root)]);
    let err = Nvcc::locate_with(&env, root).expect_err("NVCC is set and unusable");
    assert!(
        err.to_string().contains("not executable"),
        "the reason is given, and the nvcc on PATH was not silently used: {err}"
    );
}
