//! [`Nvcc`]: one located compiler, its version and the files that make up its identity.

use crate::error::Error;
use crate::locate::{self, LocateError, SearchAttempt};
use crate::runner::{ProcessRunner, RunOptions, Runner};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// How long a `--version` query may take before it is killed.
pub(crate) const VERSION_QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// A located nvcc binary.
///
/// Cloning is cheap enough for per-thread use; the version is queried at most once per value (and
/// the clones made after it was queried).
#[derive(Clone, Debug)]
pub struct Nvcc {
    path: PathBuf,
    version: OnceLock<VersionInfo>,
}

#[derive(Clone, Debug)]
struct VersionInfo {
    output: String,
    release: String,
}

impl Nvcc {
    /// Finds nvcc, trying in order and taking the first executable found:
    ///
    /// 1. `NVCC` (a full path to the binary; if set and unusable, the search stops with an error
    ///    rather than silently picking another compiler);
    /// 2. `$CUDA_HOME/bin/nvcc`, then `$CUDA_PATH/bin/nvcc`;
    /// 3. each `PATH` entry;
    /// 4. `/usr/local/cuda/bin/nvcc`;
    /// 5. the pip layouts (`site-packages/nvidia/cu13/bin/nvcc`, then `cu12`) under every
    ///    `lib/python3.*` of `$VIRTUAL_ENV`, then of `$JIT_NVCC_VENV` or, when that is unset, the
    ///    project's `target/nvcc-venv` in the nearest Cargo workspace above the current directory.
    ///
    /// # Errors
    /// [`LocateError`], whose message lists every place searched and why each was rejected.
    pub fn locate() -> Result<Nvcc, LocateError> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        Nvcc::locate_with(&|name| std::env::var_os(name), &cwd)
    }

    /// [`Nvcc::locate`] with the environment read through `env` and the workspace walk starting at
    /// `cwd`, so a search can be tested or sandboxed.
    ///
    /// # Errors
    /// As [`Nvcc::locate`].
    pub fn locate_with(
        env: &dyn Fn(&str) -> Option<OsString>,
        cwd: &Path,
    ) -> Result<Nvcc, LocateError> {
        let found = locate::search(env, cwd)?;
        Nvcc::at(found)
    }

    /// Uses the nvcc at `path`, as given ([`Nvcc::toolkit_root`] resolves symlinks).
    ///
    /// # Errors
    /// [`LocateError`] with one attempt when `path` is not an executable file.
    pub fn at(path: impl Into<PathBuf>) -> Result<Nvcc, LocateError> {
        let path = path.into();
        let reject = |reason: String| LocateError {
            attempts: vec![SearchAttempt {
                source: "given path".to_owned(),
                path: Some(path.clone()),
                reason,
            }],
        };
        locate::check_executable(&path).map_err(reject)?;
        Ok(Nvcc {
            path,
            version: OnceLock::new(),
        })
    }

    /// The nvcc binary, as given (never resolved: nvcc finds its profile, its tools and the
    /// toolkit's headers through the directory it is run from, so a symlinked toolkit runs as
    /// itself). A relative path is relative to each compile's working directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The toolkit root: the parent of the `bin` directory of the nvcc binary (symlinks
    /// resolved, so a link to nvcc names the toolkit it belongs to).
    pub fn toolkit_root(&self) -> PathBuf {
        let real = std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone());
        real.parent()
            .and_then(Path::parent)
            .unwrap_or_else(|| Path::new("/"))
            .to_path_buf()
    }

    /// The release parsed from `nvcc --version` ("13.5" from "release 13.5, V13.5.37"); queried
    /// once and cached.
    ///
    /// # Errors
    /// [`Error::Spawn`], [`Error::VersionQuery`] or [`Error::Version`] when nvcc cannot say.
    pub fn version(&self) -> Result<&str, Error> {
        Ok(&self.version_info()?.release)
    }

    /// The full stdout of `nvcc --version` (it names the build, so it distinguishes patch builds that
    /// share a release number); queried once and cached.
    ///
    /// # Errors
    /// As [`Nvcc::version`].
    pub fn version_output(&self) -> Result<&str, Error> {
        Ok(&self.version_info()?.output)
    }

    fn version_info(&self) -> Result<&VersionInfo, Error> {
        if let Some(info) = self.version.get() {
            return Ok(info);
        }
        let output = query_version(&self.path)?;
        let release = parse_release(&output).ok_or_else(|| Error::Version {
            program: self.path.clone(),
            output: output.clone(),
        })?;
        // Another thread may have won the race; both computed the same answer.
        let _ = self.version.set(VersionInfo { output, release });
        self.version.get().ok_or_else(|| Error::Version {
            program: self.path.clone(),
            output: String::new(),
        })
    }

    /// The files besides nvcc whose contents decide what it produces, those that exist:
    /// `bin/ptxas`, `bin/fatbinary`, `bin/nvlink`, `bin/nvcc.profile`, `bin/cudafe++`,
    /// `nvvm/bin/cicc` and `nvvm/libdevice/*.bc` (sorted).
    pub fn companion_files(&self) -> Vec<PathBuf> {
        let root = self.toolkit_root();
        let mut files: Vec<PathBuf> = [
            "bin/ptxas",
            "bin/fatbinary",
            "bin/nvlink",
            "bin/nvcc.profile",
            "bin/cudafe++",
            "nvvm/bin/cicc",
        ]
        .iter()
        .map(|rel| root.join(rel))
        .filter(|path| path.is_file())
        .collect();
        if let Ok(entries) = std::fs::read_dir(root.join("nvvm/libdevice")) {
            let mut bitcode: Vec<PathBuf> = entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "bc") && path.is_file())
                .collect();
            bitcode.sort();
            files.extend(bitcode);
        }
        files
    }
}

/// Runs `program --version` and returns its stdout.
pub(crate) fn query_version(program: &Path) -> Result<String, Error> {
    let opts = RunOptions {
        timeout: Some(VERSION_QUERY_TIMEOUT),
        ..RunOptions::default()
    };
    let out = ProcessRunner.run(program, &[OsString::from("--version")], &opts)?;
    if !out.status.success() || out.timed_out {
        return Err(Error::VersionQuery {
            program: program.to_owned(),
            status: out.status,
            stderr: crate::error::tail(&String::from_utf8_lossy(&out.stderr), 2048),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// "13.5" from "Cuda compilation tools, release 13.5, V13.5.37".
pub(crate) fn parse_release(output: &str) -> Option<String> {
    let after = output.split("release ").nth(1)?;
    let release: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let release = release.trim_end_matches('.');
    (!release.is_empty()).then(|| release.to_owned())
}

#[cfg(test)]
mod tests {
    use super::parse_release;

    #[test]
    fn release_is_parsed_from_real_version_output() {
        let output =
            "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2026 NVIDIA Corporation\n\
Built on Mon_Oct_12_19:25:48_PDT_2026\nCuda compilation tools, release 13.5, V13.5.37\n\
Build cuda_13.5.r13.5/compiler.39125733_0\n";
        assert_eq!(
            parse_release(output).as_deref(),
            Some("13.5"),
            "release X.Y is the version"
        );
        assert_eq!(
            parse_release("garbage"),
            None,
            "no release line, no version"
        );
    }
}
