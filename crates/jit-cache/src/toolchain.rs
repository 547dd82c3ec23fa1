//! The compiler's identity, computed once per cache handle.
//!
//! Hashing 100+ MB of toolkit in every process would ruin the hit path, so the content digests go
//! through fingerprint's per-host identity cache (keyed by each file's stat tuple and the boot
//! id), stored in the cache root's `state/` and rewritten only when it changes.

use crate::error::{Error, Result};
use crate::layout::Layout;
use fingerprint::{IdentityCache, ToolIdentity};
use nvcc::Nvcc;
use std::path::PathBuf;

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
    pub(crate) fn probe(nvcc: Nvcc, layout: &Layout) -> Result<Toolchain> {
        let cache_file = layout.dir("state").join(format!("identity-{}.json", host_name()));
        let mut cache = IdentityCache::load(&cache_file);
        let identity = fingerprint::tool_identity(nvcc.path(), &nvcc.companion_files(), &["--version"], &mut cache)?;
        // The identity cache only saves work; a cache that cannot be written is no error.
        let _ = cache.save_if_changed(&cache_file);
        let version = nvcc.version().map_err(|e| Error::Compiler(e.to_string()))?.to_string();
        let host_compiler = nvcc::host_compiler_version(None)
            .map(|v| v.lines().next().unwrap_or_default().to_string())
            .unwrap_or_else(|e| format!("unknown ({e})"));
        let toolkit_root = crate::headers::normalize(nvcc.toolkit_root());
        Ok(Toolchain { nvcc, identity, version, host_compiler, toolkit_root })
    }
}

/// This host's name, for per-host state files.
pub(crate) fn host_name() -> String {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy();
    let clean: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    if clean.is_empty() {
        "localhost".to_string()
    } else {
        clean
    }
}
