//! The packaged-crate check of `cargo xtask test`: `durable-fs` as a downstream user gets it.
//!
//! 1. `cargo package -p durable-fs --no-verify --allow-dirty --offline`: the `.crate` file
//!    crates.io would get (its manifest normalized, path dev-dependencies stripped).
//! 2. Unpack it into a scratch directory outside the workspace and check that its manifest names
//!    no path dependency and carries the README.
//! 3. Build and run, offline, a program whose only path dependency is the unpacked crate (plus
//!    `tempfile`, as a user's would): its `main.rs` is the crate root's example, taken from the
//!    packaged `lib.rs` with its hidden lines, so the front page compiles as a user writes it.
//! 4. Check that a program naming the test seams (`durable_fs::testing`) does not compile
//!    without the `test-seams` feature.
//!
//! Dependencies come from the local registry cache, which the workspace's own build filled, with
//! versions pinned by a copy of the workspace's `Cargo.lock`; nothing is downloaded. The
//! program's target directory stays under the workspace's, so a second run takes seconds.

use crate::util;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

const CRATE: &str = "durable-fs";

pub fn run() -> Result<()> {
    let target = util::target_dir().join("package-check");
    util::run_checked(
        util::cargo()
            .args([
                "package",
                "-p",
                CRATE,
                "--no-verify",
                "--allow-dirty",
                "--offline",
                "--target-dir",
            ])
            .arg(&target),
    )?;
    let packaged = newest_crate_file(&target.join("package"))?;
    let scratch =
        std::env::temp_dir().join(format!("durable-fs-package-check-{}", std::process::id()));
    let result = check_in(&scratch, &packaged, &target);
    // Best effort: the scratch directory holds only copies.
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn check_in(scratch: &Path, packaged: &Path, target: &Path) -> Result<()> {
    std::fs::create_dir_all(scratch).with_context(|| format!("mkdir {}", scratch.display()))?;
    util::run_checked(
        Command::new("tar")
            .arg("-xzf")
            .arg(packaged)
            .arg("-C")
            .arg(scratch),
    )?;
    let stem = packaged
        .file_stem()
        .and_then(|s| s.to_str())
        .context("the .crate file has a UTF-8 name")?;
    let unpacked = scratch.join(stem);
    let manifest = read(&unpacked.join("Cargo.toml"))?;
    if let Some(dep) = path_dependency(&manifest) {
        bail!("the packaged manifest still names a path dependency ({dep}):\n{manifest}");
    }
    if !unpacked.join("README.md").is_file() || !manifest.contains("readme = \"README.md\"") {
        bail!("the package lacks its README");
    }

    let example = crate_example(&read(&unpacked.join("src/lib.rs"))?)?;
    let app = scratch.join("app");
    std::fs::create_dir_all(app.join("src/bin"))?;
    std::fs::write(
        app.join("Cargo.toml"),
        format!(
            "[package]\nname = \"durable-fs-downstream\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             publish = false\n\n[[bin]]\nname = \"durable-fs-downstream\"\npath = \"src/main.rs\"\n\n\
             [workspace]\n\n[dependencies]\ndurable-fs = {{ path = \"../{stem}\" }}\ntempfile = \"3\"\n"
        ),
    )?;
    // The workspace's lock pins versions that are surely in the local registry cache; cargo drops
    // the entries this program does not use.
    std::fs::copy(
        util::workspace_root().join("Cargo.lock"),
        app.join("Cargo.lock"),
    )?;
    std::fs::write(app.join("src/main.rs"), example)?;
    std::fs::write(
        app.join("src/bin/no_seams.rs"),
        "fn main() {\n    durable_fs::testing::with_rename_flags_unsupported(|| ());\n}\n",
    )?;

    let app_target = target.join("downstream-target");
    let cargo = |args: &[&str]| {
        let mut cmd = util::cargo();
        cmd.current_dir(&app)
            .args(args)
            .args(["--offline", "--target-dir"])
            .arg(&app_target);
        cmd
    };
    util::run_checked(&mut cargo(&["run", "--bin", "durable-fs-downstream"]))?;
    let no_seams = cargo(&["check", "--bin", "no_seams"])
        .output()
        .context("run cargo check on the seams program")?;
    let stderr = String::from_utf8_lossy(&no_seams.stderr);
    if no_seams.status.success() || !stderr.contains("testing") {
        bail!(
            "durable_fs::testing must not exist without the test-seams feature; cargo said:\n{stderr}"
        );
    }
    eprintln!("packaged {CRATE}: the front-page example builds and runs from the .crate alone; no test seams without the feature");
    Ok(())
}

/// The first dependency table of a normalized manifest that has a `path` key, if any (target
/// tables such as `[lib]` may name paths; dependency tables must not).
fn path_dependency(manifest: &str) -> Option<String> {
    let mut section = "";
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section.contains("dependencies") && line.starts_with("path =") {
            return Some(section.to_string());
        }
    }
    None
}

/// The newest `durable-fs-*.crate` in `dir`.
fn newest_crate_file(dir: &Path) -> Result<PathBuf> {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with(&format!("{CRATE}-")) && name.ends_with(".crate") {
            found.push((std::fs::metadata(&path)?.modified()?, path));
        }
    }
    found.sort();
    found
        .pop()
        .map(|(_, path)| path)
        .with_context(|| format!("no {CRATE}-*.crate in {}", dir.display()))
}

/// The crate root's `# Example` code block, hidden lines (`# `) shown: a whole program.
fn crate_example(lib_rs: &str) -> Result<String> {
    let docs: Vec<&str> = lib_rs
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| {
            l.trim_start_matches("//!")
                .strip_prefix(' ')
                .unwrap_or(l.trim_start_matches("//!"))
        })
        .collect();
    let start = docs
        .iter()
        .position(|l| *l == "# Example")
        .context("the crate docs have an `# Example` section")?;
    let open = start
        + docs[start..]
            .iter()
            .position(|l| l.starts_with("```"))
            .context("the example has a code block")?;
    let mut code = String::new();
    for line in &docs[open + 1..] {
        if line.starts_with("```") {
            return Ok(code);
        }
        let shown = match *line {
            "#" => "",
            l => l.strip_prefix("# ").unwrap_or(l),
        };
        code.push_str(shown);
        code.push('\n');
    }
    bail!("the example's code block is not closed")
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_keeps_hidden_lines_and_drops_the_fences() {
        let lib = "//! Title.\n//!\n//! # Example\n//! ```\n//! # fn main() {\n//! let x = 1;\n//! #\n//! # }\n//! ```\n#![deny(missing_docs)]\n";
        assert_eq!(
            crate_example(lib).expect("an example"),
            "fn main() {\nlet x = 1;\n\n}\n"
        );
        assert!(
            crate_example("//! no example\n").is_err(),
            "a missing example is an error"
        );
    }

    #[test]
    fn only_dependency_tables_count_as_path_dependencies() {
        let ok = "[lib]\npath = \"src/lib.rs\"\n[dependencies.rustix]\nversion = \"1\"\n";
        assert_eq!(path_dependency(ok), None, "a target's path is fine");
        let bad = "[dev-dependencies.fs-testbed]\npath = \"../fs-testbed\"\n";
        assert_eq!(
            path_dependency(bad).as_deref(),
            Some("[dev-dependencies.fs-testbed]"),
            "a path dependency is caught"
        );
    }
}
