//! The compiler's identity, computed once per cache handle.
//!
//! Hashing 100+ MB of toolkit in every process would ruin the hit path, so the content digests go
//! through fingerprint's per-host identity cache (keyed by each file's stat tuple and the boot
//! id), stored in the cache root's `state/` and rewritten only when it changes.

use crate::error::{Error, Result};
use fingerprint::{IdentityCache, ToolIdentity};
use nvcc::Nvcc;
use std::path::{Path, PathBuf};

/// The compiler, as it enters keys.
#[derive(Debug)]
pub(crate) struct Toolchain {
    pub(crate) nvcc: Nvcc,
    pub(crate) identity: ToolIdentity,
    pub(crate) version: String,
    pub(crate) host_compiler: String,
    pub(crate) toolkit_root: PathBuf,
}

impl Toolchain {
    /// Identifies the compiler and the host compiler. Both `--version` outputs and all content
    /// digests come from the identity cache when the files' stat tuples are unchanged, so a new
    /// process spawns nothing here.
    /// `state_dir` holds the identity cache; without one (an unusable root) nothing is saved.
    pub(crate) fn probe(nvcc: Nvcc, state_dir: Option<&Path>) -> Result<Toolchain> {
        let cache_file = state_dir.map(|d| d.join(format!("identity-{}.json", host_name())));
        let mut cache = cache_file
            .as_deref()
            .map(IdentityCache::load)
            .unwrap_or_default();
        let identity = fingerprint::tool_identity(
            nvcc.path(),
            &nvcc.companion_files(),
            &["--version"],
            &mut cache,
        )?;
        let host = nvcc::host_compiler(None);
        let host_compiler = match find_program(&host) {
            Some(path) => fingerprint::tool_identity(&path, &[], &["--version"], &mut cache)
                .map(|id| {
                    format!(
                        "{} {}",
                        id.version.lines().next().unwrap_or_default(),
                        id.digest.short()
                    )
                })
                .unwrap_or_else(|e| format!("unknown ({e})")),
            None => format!("{} not found", host.display()),
        };
        // The identity cache only saves work; a cache that cannot be written is no error.
        if let Some(file) = &cache_file {
            let _ = cache.save_if_changed(file);
        }
        let version = release_of(&identity.version).ok_or_else(|| {
            Error::Compiler(format!(
                "no `release X.Y` in {} --version: {}",
                nvcc.path().display(),
                identity.version
            ))
        })?;
        let toolkit_root = crate::headers::normalize(nvcc.toolkit_root());
        Ok(Toolchain {
            nvcc,
            identity,
            version,
            host_compiler,
            toolkit_root,
        })
    }
}

/// The `X.Y` of nvcc's "Cuda compilation tools, release X.Y, VX.Y.Z" line.
fn release_of(version_output: &str) -> Option<String> {
    let rest = &version_output[version_output.find("release ")? + "release ".len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    (end > 0).then(|| rest[..end].to_string())
}

/// Resolves a program name through `PATH` (a path with a `/` is taken as is).
fn find_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// This host's name, for per-host state files.
pub(crate) fn host_name() -> String {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy();
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "localhost".to_string()
    } else {
        clean
    }
}
