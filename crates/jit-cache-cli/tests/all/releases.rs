//! The release that runs a command, not the table's (nvcc 13.5's), decides which options exist:
//! run on every CUDA 13 release the suite installs (`cargo xtask test` runs this file with
//! `NVCC` set to 13.0's and 13.3's nvcc too). An option the table knows but the running
//! release's `--help` does not list is refused by name, through the library and the launcher,
//! and the launcher's answer is bare nvcc's.

use crate::launcher::run_ok;
use crate::support::{cli, kernel_text, real_nvcc};
use nvcc::options::{Role, OPTIONS, UNLISTED};
use std::process::Command;

/// The table's keyed options that the running release's `--help` does not list.
fn missing_here(help: &str) -> Vec<&'static nvcc::options::Opt> {
    let release =
        nvcc::release::ReleaseOptions::from_help(help).expect("nvcc --help lists options");
    OPTIONS
        .iter()
        .filter(|o| o.role == Role::Keyed && !UNLISTED.contains(&o.short))
        .filter(|o| !release.has(o))
        .collect()
}

#[test]
fn an_option_the_running_release_lacks_is_refused_by_name() {
    let nvcc = real_nvcc();
    let help = run_ok(Command::new(&nvcc).arg("--help"), "nvcc --help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let version = run_ok(Command::new(&nvcc).arg("--version"), "nvcc --version");
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    let missing = missing_here(&help);
    if version.contains("release 13.5") {
        assert!(
            missing.is_empty(),
            "the table is nvcc 13.5's: every keyed option is listed: {:?}",
            missing
                .iter()
                .map(|o| o.long_or_short())
                .collect::<Vec<_>>()
        );
    } else {
        assert!(
            !missing.is_empty(),
            "an earlier release lacks some of 13.5's options ({version})"
        );
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let source = dir.path().join("k.cu");
    std::fs::write(&source, kernel_text(7)).expect("write kernel");
    for opt in missing {
        let flag = if opt.value {
            format!("{}=1", opt.long_or_short())
        } else {
            opt.long_or_short().to_string()
        };
        let out = cli(&dir.path().join("cache"), &nvcc)
            .arg("build")
            .arg(&source)
            .args(["--arch", "sm_90", "--kind", "cubin"])
            .arg(format!("--flag={flag}"))
            .output()
            .expect("run jit-cache build");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("has no option"),
            "{flag}: refused by name on this release: {stderr}"
        );
    }
}
