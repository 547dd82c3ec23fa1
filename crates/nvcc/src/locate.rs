//! Finding nvcc: the search order, and an error that lists every place searched.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// One place searched for nvcc and why it was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchAttempt {
    /// Where the candidate came from, e.g. "NVCC", "CUDA_HOME", "PATH", "project venv".
    pub source: String,
    /// The path tried, when the source produced one.
    pub path: Option<PathBuf>,
    /// Why it was rejected ("not set", "does not exist", "not executable", ...).
    pub reason: String,
}

/// nvcc was not found (or the path given is not a usable nvcc).
#[derive(Clone, Debug, thiserror::Error)]
pub struct LocateError {
    /// Every place searched, in order.
    pub attempts: Vec<SearchAttempt>,
}

impl fmt::Display for LocateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "nvcc not found; run `cargo xtask setup` or set NVCC to the nvcc binary. Searched:"
        )?;
        for attempt in &self.attempts {
            write!(f, "\n  {}", attempt.source)?;
            if let Some(path) = &attempt.path {
                write!(f, ": {}", path.display())?;
            }
            write!(f, " ({})", attempt.reason)?;
        }
        Ok(())
    }
}

/// The pip package layouts, newest first, relative to a `site-packages` directory.
const PIP_LAYOUTS: &[&str] = &[
    "nvidia/cu13/bin/nvcc",
    "nvidia/cu12/bin/nvcc",
    "nvidia/cuda_nvcc/bin/nvcc",
];

/// The project's venv, relative to the Cargo workspace root (created by `cargo xtask setup`).
const PROJECT_VENV: &str = "target/nvcc-venv";

/// Searches for nvcc in the documented order; `env` reads environment variables and `cwd` is where
/// the walk up to the Cargo workspace root starts. Returns the first usable candidate.
pub(crate) fn search(
    env: &dyn Fn(&str) -> Option<OsString>,
    cwd: &Path,
) -> Result<PathBuf, LocateError> {
    let mut attempts = Vec::new();
    let try_path =
        |source: &str, path: PathBuf, attempts: &mut Vec<SearchAttempt>| -> Option<PathBuf> {
            match check_executable(&path) {
                Ok(()) => Some(path),
                Err(reason) => {
                    attempts.push(SearchAttempt {
                        source: source.to_owned(),
                        path: Some(path),
                        reason,
                    });
                    None
                }
            }
        };
    let not_set = |source: &str, attempts: &mut Vec<SearchAttempt>| {
        attempts.push(SearchAttempt {
            source: source.to_owned(),
            path: None,
            reason: "not set".to_owned(),
        });
    };

    // An explicit NVCC is a decision, not a hint: if it is wrong, say so instead of silently
    // using some other compiler.
    match env("NVCC").filter(|v| !v.is_empty()) {
        Some(value) => {
            return match try_path("NVCC", PathBuf::from(value), &mut attempts) {
                Some(found) => Ok(found),
                None => Err(LocateError { attempts }),
            };
        }
        None => not_set("NVCC", &mut attempts),
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        match env(var).filter(|v| !v.is_empty()) {
            Some(root) => {
                if let Some(found) = try_path(var, Path::new(&root).join("bin/nvcc"), &mut attempts)
                {
                    return Ok(found);
                }
            }
            None => not_set(var, &mut attempts),
        }
    }
    match env("PATH").filter(|v| !v.is_empty()) {
        Some(path) => {
            let mut any = false;
            for dir in std::env::split_paths(&path) {
                if dir.as_os_str().is_empty() {
                    continue;
                }
                any = true;
                if let Some(found) = try_path("PATH", dir.join("nvcc"), &mut attempts) {
                    return Ok(found);
                }
            }
            if !any {
                not_set("PATH", &mut attempts);
            }
        }
        None => not_set("PATH", &mut attempts),
    }
    if let Some(found) = try_path(
        "default",
        PathBuf::from("/usr/local/cuda/bin/nvcc"),
        &mut attempts,
    ) {
        return Ok(found);
    }
    let mut venvs: Vec<(&str, Option<PathBuf>)> = vec![(
        "VIRTUAL_ENV",
        env("VIRTUAL_ENV")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
    )];
    match env("JIT_NVCC_VENV").filter(|v| !v.is_empty()) {
        Some(venv) => venvs.push(("JIT_NVCC_VENV", Some(PathBuf::from(venv)))),
        None => {
            let root = workspace_root(cwd);
            if root.is_none() {
                attempts.push(SearchAttempt {
                    source: "project venv".to_owned(),
                    path: None,
                    reason: format!("no Cargo workspace root above {}", cwd.display()),
                });
            }
            venvs.push(("project venv", root.map(|r| r.join(PROJECT_VENV))));
        }
    }
    for (source, venv) in venvs {
        let Some(venv) = venv else {
            if source == "VIRTUAL_ENV" {
                not_set(source, &mut attempts);
            }
            continue;
        };
        let site_packages = site_packages_dirs(&venv);
        if site_packages.is_empty() {
            attempts.push(SearchAttempt {
                source: source.to_owned(),
                path: Some(venv.join("lib/python3.*/site-packages")),
                reason: "no such directory".to_owned(),
            });
        }
        for site in site_packages {
            for layout in PIP_LAYOUTS {
                if let Some(found) = try_path(source, site.join(layout), &mut attempts) {
                    return Ok(found);
                }
            }
        }
    }
    Err(LocateError { attempts })
}

/// `<venv>/lib/python3.*/site-packages`, newest Python first.
fn site_packages_dirs(venv: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(venv.join("lib")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("python3"))
        .map(|entry| entry.path().join("site-packages"))
        .filter(|dir| dir.is_dir())
        .collect();
    dirs.sort();
    dirs.reverse();
    dirs
}

/// The nearest ancestor of `start` (itself included) whose `Cargo.toml` declares `[workspace]`.
fn workspace_root(start: &Path) -> Option<PathBuf> {
    start.ancestors().find_map(|dir| {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
        manifest
            .lines()
            .any(|line| line.trim() == "[workspace]")
            .then(|| dir.to_owned())
    })
}

/// Ok when `path` is a regular file (after symlinks) with an execute bit; else the reason.
pub(crate) fn check_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err("does not exist".to_owned()),
        Err(err) => Err(format!("cannot stat: {err}")),
        Ok(meta) if !meta.is_file() => Err("not a regular file".to_owned()),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => Err("not executable".to_owned()),
        Ok(_) => Ok(()),
    }
}
