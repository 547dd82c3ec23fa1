//! What a fingerprint of "this compiler" needs: binaries, version texts and environment.

use crate::error::Error;
use crate::toolchain::{query_version, Nvcc};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Environment variables that change what nvcc produces, so they belong in a cache key:
///
/// | variable | why |
/// | --- | --- |
/// | `NVCC_PREPEND_FLAGS`, `NVCC_APPEND_FLAGS` | nvcc splices them into every command line (ccache missed these and served stale cubins) |
/// | `NVCC_CCBIN` | the host compiler when no `-ccbin` is given; it preprocesses device code too |
/// | `CPATH`, `C_INCLUDE_PATH`, `CPLUS_INCLUDE_PATH` | extra include directories read by the host preprocessor |
/// | `LIBRARY_PATH` | where the host linker finds libraries for shared-library outputs |
/// | `GCC_EXEC_PREFIX`, `COMPILER_PATH` | which `cc1plus`/`as`/`ld` the host compiler runs |
/// | `SOURCE_DATE_EPOCH` | the value of `__DATE__` and `__TIME__` |
/// | `LANG`, `LC_ALL`, `LC_MESSAGES` | the language of the diagnostics, which a cache replays |
///
/// Deliberately absent: `PATH` (its effect, which `g++` runs, is captured by the host compiler's
/// version text instead, so keys stay independent of unrelated `PATH` edits), `CUDA_HOME` and
/// `CUDA_PATH` (they only choose which nvcc is found, and the nvcc binary is hashed), `TMPDIR`
/// (where scratch files go).
pub const RELEVANT_ENV: &[&str] = &[
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "NVCC_CCBIN",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "LIBRARY_PATH",
    "GCC_EXEC_PREFIX",
    "COMPILER_PATH",
    "SOURCE_DATE_EPOCH",
    // The language of the diagnostics a cache replays.
    "LANG",
    "LC_ALL",
    "LC_MESSAGES",
];

/// Everything a toolchain fingerprint should cover, gathered but not hashed (the `fingerprint`
/// crate hashes it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityInputs {
    /// The nvcc binary.
    pub nvcc: PathBuf,
    /// [`Nvcc::companion_files`]: hash their contents along with the binary.
    pub companions: Vec<PathBuf>,
    /// The full `nvcc --version` output.
    pub version_output: String,
    /// The parsed release, e.g. "13.5".
    pub version: String,
    /// The host compiler's `--version` output.
    pub host_compiler_version: String,
    /// Each of [`RELEVANT_ENV`] with its value (`None` when unset), in that order.
    pub env: Vec<(String, Option<OsString>)>,
}

impl Nvcc {
    /// [`Nvcc::identity_inputs_for`] with nvcc's default host compiler.
    ///
    /// # Errors
    /// As [`Nvcc::identity_inputs_for`].
    pub fn identity_inputs(&self) -> Result<IdentityInputs, Error> {
        self.identity_inputs_for(None)
    }

    /// Gathers what identifies this compiler for jobs that use host compiler `ccbin` (`None`:
    /// nvcc's default, see [`host_compiler_version`]). Runs `nvcc --version` (cached) and
    /// `<host compiler> --version`.
    ///
    /// # Errors
    /// When either version query fails.
    pub fn identity_inputs_for(&self, ccbin: Option<&Path>) -> Result<IdentityInputs, Error> {
        Ok(IdentityInputs {
            nvcc: self.path().to_owned(),
            companions: self.companion_files(),
            version_output: self.version_output()?.to_owned(),
            version: self.version()?.to_owned(),
            host_compiler_version: host_compiler_version(ccbin)?,
            env: relevant_env_values(),
        })
    }
}

/// The current values of [`RELEVANT_ENV`], in order.
pub fn relevant_env_values() -> Vec<(String, Option<OsString>)> {
    RELEVANT_ENV
        .iter()
        .map(|name| ((*name).to_owned(), std::env::var_os(name)))
        .collect()
}

/// The host compiler nvcc will use: `ccbin` when given (a directory means its `g++`), else
/// `$NVCC_CCBIN`, else `g++` from `PATH`.
pub fn host_compiler(ccbin: Option<&Path>) -> PathBuf {
    let chosen = ccbin.map(Path::to_owned).or_else(|| {
        std::env::var_os("NVCC_CCBIN")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    match chosen {
        Some(path) if path.is_dir() => path.join("g++"),
        Some(path) => path,
        None => PathBuf::from("g++"),
    }
}

/// The `--version` output of the host compiler chosen by [`host_compiler`].
///
/// # Errors
/// [`Error::Spawn`] when it cannot be run, [`Error::VersionQuery`] when it exits unsuccessfully.
pub fn host_compiler_version(ccbin: Option<&Path>) -> Result<String, Error> {
    query_version(&host_compiler(ccbin))
}
