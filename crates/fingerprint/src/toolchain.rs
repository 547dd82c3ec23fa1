//! Toolchain identity: the content of a compiler and its companion files, and its version
//! output, with a per-host cache so that the hit path costs a `stat` per file.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::digest::{Digest, Framed};
use crate::error::{Error, ErrorKind};
use crate::path_text::escape_path;
use crate::persist::write_atomically;
use crate::stat_cache::StatCache;

const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
const IDENTITY_CACHE_VERSION: u32 = 1;

/// The identity of a compiler: what the cache key needs from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolIdentity {
    /// The trimmed output of the binary run with the version arguments (empty if none were given).
    pub version: String,
    /// Framed digest of the binary's content, each companion's content, and `version`.
    pub digest: Digest,
    /// The binary and each companion with its content digest, named relative to the binary's
    /// grandparent (`bin/nvcc`, `include/cuda.h`) where possible. For display only.
    pub files: Vec<(String, Digest)>,
    /// Where the binary was found; recorded for display, never hashed.
    pub path: PathBuf,
}

/// A per-host cache of toolchain file digests and version outputs.
///
/// File digests are keyed by path and `(device, inode, size, mtime_ns, ctime_ns)` with the racy
/// rule of [`StatCache`]; version outputs by the binary's content digest and the arguments. The
/// whole cache is tied to the boot id (`/proc/sys/kernel/random/boot_id`): after a reboot, or on
/// another host sharing the file, it starts empty, since inode numbers may be reused.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdentityCache {
    version: u32,
    boot_id: String,
    files: StatCache,
    versions: BTreeMap<String, String>,
    #[serde(skip)]
    versions_dirty: bool,
}

fn boot_id() -> String {
    std::fs::read_to_string(BOOT_ID)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

impl Default for IdentityCache {
    fn default() -> Self {
        IdentityCache::new()
    }
}

impl IdentityCache {
    /// An empty cache for this boot.
    pub fn new() -> Self {
        IdentityCache {
            version: IDENTITY_CACHE_VERSION,
            boot_id: boot_id(),
            files: StatCache::new(),
            versions: BTreeMap::new(),
            versions_dirty: false,
        }
    }

    /// Loads the cache at `path`; missing, corrupt, other-version or other-boot caches load empty.
    pub fn load(path: &Path) -> Self {
        let current = boot_id();
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<IdentityCache>(&b).ok())
            .filter(|c| {
                c.version == IDENTITY_CACHE_VERSION && !current.is_empty() && c.boot_id == current
            })
            .unwrap_or_default()
    }

    /// Whether anything changed since the cache was created or loaded.
    pub fn is_dirty(&self) -> bool {
        self.files.is_dirty() || self.versions_dirty
    }

    /// Saves the cache durably (temp, fsync, rename, fsync directory) if it changed; returns
    /// whether it wrote.
    pub fn save_if_changed(&mut self, path: &Path) -> io::Result<bool> {
        if !self.is_dirty() {
            return Ok(false);
        }
        self.version = IDENTITY_CACHE_VERSION;
        let bytes = serde_json::to_vec(self).map_err(io::Error::other)?;
        write_atomically(path, &bytes)?;
        self.files.mark_clean();
        self.versions_dirty = false;
        Ok(true)
    }
}

/// How a companion or the binary is named for display.
fn display_name(path: &Path, base: Option<&Path>) -> String {
    base.and_then(|b| path.strip_prefix(b).ok())
        .map(escape_path)
        .unwrap_or_else(|| escape_path(path))
}

/// The identity of the tool at `binary`: blake3 of the binary and of each companion (content
/// only, served from `cache` when their stat tuples are unchanged), and the output of
/// `binary version_args...` (run directly, no shell; cached by the binary's digest and the
/// arguments; skipped when `version_args` is empty). The digest frames the binary's digest, each
/// companion's digest in the given order, and the version output; paths are never hashed.
pub fn tool_identity(
    binary: &Path,
    companions: &[PathBuf],
    version_args: &[&str],
    cache: &mut IdentityCache,
) -> Result<ToolIdentity, Error> {
    let base = binary.parent().and_then(Path::parent);
    let bin_digest = cache.files.hash_file(binary)?;
    let mut files = vec![(display_name(binary, base), bin_digest)];
    let mut h = Framed::new("tool");
    h.digest(&bin_digest).u64(companions.len() as u64);
    for c in companions {
        let d = cache.files.hash_file(c)?;
        h.digest(&d);
        files.push((display_name(c, base), d));
    }
    let version = if version_args.is_empty() {
        String::new()
    } else {
        let key = format!(
            "{bin_digest} {}",
            serde_json::to_string(version_args).unwrap_or_default()
        );
        match cache.versions.get(&key) {
            Some(v) => v.clone(),
            None => {
                let v = run_version(binary, version_args)?;
                cache.versions.insert(key, v.clone());
                cache.versions_dirty = true;
                v
            }
        }
    };
    h.bytes(version.as_bytes());
    Ok(ToolIdentity {
        version,
        digest: h.finish(),
        files,
        path: binary.to_path_buf(),
    })
}

/// How long a tool may take to answer its version probe: a wrapper that hangs on an argument
/// it does not know (a test's stand-in compiler) fails the probe instead of the caller.
const PROBE_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

fn run_version(binary: &Path, args: &[&str]) -> Result<String, Error> {
    let op = "run for version";
    let mut child = Command::new(binary)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io(op, binary, e))?;
    // Both pipes drain on their own threads, so a chatty tool never blocks on a full pipe while
    // this thread watches the clock.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = std::time::Instant::now() + PROBE_LIMIT;
    let status = loop {
        match child.try_wait().map_err(|e| Error::io(op, binary, e))? {
            Some(status) => break status,
            None if std::time::Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::new(
                    op,
                    binary,
                    ErrorKind::ToolProbe {
                        reason: format!("{args:?} did not answer within {PROBE_LIMIT:?}"),
                    },
                ));
            }
            // Polling the child's exit: a probe takes milliseconds, a hung one the limit.
            None => std::thread::sleep(std::time::Duration::from_millis(2)),
        }
    };
    let out = std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    if !out.status.success() {
        return Err(Error::new(
            op,
            binary,
            ErrorKind::ToolProbe {
                reason: format!(
                    "{args:?} exited with {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            },
        ));
    }
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    if text.trim().is_empty() {
        text = String::from_utf8_lossy(&out.stderr).into_owned();
    }
    Ok(text.trim().to_owned())
}
