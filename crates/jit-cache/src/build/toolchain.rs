//! The compiler's identity, computed once per cache handle.
//!
//! Hashing 100+ MB of toolkit in every process would ruin the hit path, so the content digests go
//! through fingerprint's per-host identity cache (keyed by each file's stat tuple and the boot
//! id), stored in the cache root's `state/` and rewritten only when it changes.

use crate::build::search::{SystemDir, SystemDirs};
use crate::error::{Error, Result};
use fingerprint::{IdentityCache, ToolIdentity};
use nvcc::Nvcc;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The compiler, as it enters keys.
#[derive(Debug)]
pub(crate) struct Toolchain {
    pub(crate) nvcc: Nvcc,
    pub(crate) identity: ToolIdentity,
    pub(crate) version: String,
    /// The default host compiler (no `-ccbin` in the flags).
    pub(crate) host: Arc<HostCompiler>,
    pub(crate) toolkit_root: PathBuf,
    /// The options this release's `nvcc --help` lists (None when it printed no such list: the
    /// table alone then reads commands, as before releases were told apart).
    pub(crate) options: Option<Arc<nvcc::release::ReleaseOptions>>,
    /// Where the identity cache lives (None for an unusable root: nothing is saved).
    state_dir: Option<PathBuf>,
}

/// A host compiler: its identity for keys, and the directories its preprocessor searches last.
#[derive(Debug)]
pub(crate) struct HostCompiler {
    /// `<first line of --version> <digest of the binary>`, or why it could not be identified.
    pub(crate) identity: String,
    /// The toolkit's and this compiler's include directories, for the include model.
    pub(crate) dirs: Arc<SystemDirs>,
}

impl Toolchain {
    /// Identifies the compiler and the host compiler. Both `--version` outputs and all content
    /// digests come from the identity cache when the files' stat tuples are unchanged, so a new
    /// process spawns nothing here.
    /// `state_dir` holds the identity cache; without one (an unusable root) nothing is saved.
    pub(crate) fn probe(nvcc: Nvcc, state_dir: Option<&Path>) -> Result<Toolchain> {
        let cache_file =
            state_dir.map(|d| d.join(format!("identity-{}.json", crate::base::host::name())));
        let mut cache = cache_file
            .as_deref()
            .map(IdentityCache::load)
            .unwrap_or_default();
        // Where the toolkit is, by nvcc's own word: a wrapper script or a symlink named `nvcc`
        // runs a compiler elsewhere, whose directories are the ones the compile searches.
        let toolkit = ToolkitDirs::probe(&nvcc, &mut cache);
        let real = Nvcc::at(toolkit.top.join("bin").join("nvcc")).unwrap_or_else(|_| nvcc.clone());
        let mut companions = nvcc.companion_files();
        if real.path() != nvcc.path() {
            companions.push(real.path().to_path_buf());
            companions.extend(real.companion_files());
        }
        let identity =
            fingerprint::tool_identity(nvcc.path(), &companions, &["--version"], &mut cache)?;
        let toolkit_root =
            std::fs::canonicalize(&toolkit.top).unwrap_or_else(|_| toolkit.top.clone());
        let host = Arc::new(probe_host(None, &toolkit, &toolkit_root, &mut cache));
        // The release's own option list, from the toolkit's nvcc (not a wrapper in front of it),
        // once per identity: the identity cache keeps the output with the binary's digest.
        let options = fingerprint::tool_identity(real.path(), &[], &["--help"], &mut cache)
            .ok()
            .and_then(|help| nvcc::release::ReleaseOptions::from_help(&help.version))
            .map(Arc::new);
        // The identity cache only saves work; a cache that cannot be written is no error.
        if let Some(file) = &cache_file {
            let _ = cache.save_if_changed(file);
        }
        let version = release_of(&identity.version).ok_or_else(|| {
            Error::from(crate::error::ToolchainError::NoRelease {
                path: nvcc.path().to_path_buf(),
                version: identity.version.clone(),
            })
        })?;
        Ok(Toolchain {
            nvcc,
            identity,
            version,
            host,
            toolkit_root,
            options,
            state_dir: state_dir.map(Path::to_path_buf),
        })
    }

    /// The host compiler a `-ccbin` names, identified through the identity cache.
    pub(crate) fn host_named(&self, ccbin: &Path) -> HostCompiler {
        let cache_file = self.identity_file();
        let mut cache = cache_file
            .as_deref()
            .map(IdentityCache::load)
            .unwrap_or_default();
        let toolkit = ToolkitDirs::probe(&self.nvcc, &mut cache);
        let host = probe_host(Some(ccbin), &toolkit, &self.toolkit_root, &mut cache);
        if let Some(file) = &cache_file {
            let _ = cache.save_if_changed(file);
        }
        host
    }

    fn identity_file(&self) -> Option<PathBuf> {
        self.state_dir
            .as_ref()
            .map(|d| d.join(format!("identity-{}.json", crate::base::host::name())))
    }
}

/// Identifies a host compiler (`ccbin`, else nvcc's default) and lists its include directories.
/// A compiler that cannot be run still gets an identity that says so (its compiles will fail with
/// nvcc's own message), and no installed directories: its headers are then project headers,
/// checked on every hit, which is slower but never stale.
fn probe_host(
    ccbin: Option<&Path>,
    toolkit: &ToolkitDirs,
    toolkit_root: &Path,
    cache: &mut IdentityCache,
) -> HostCompiler {
    let host = nvcc::host_compiler(ccbin);
    let (identity, installed) = match find_program(&host) {
        Some(path) => {
            let identity = fingerprint::tool_identity(&path, &[], &["--version"], cache)
                .map(|id| {
                    format!(
                        "{} {}",
                        id.version.lines().next().unwrap_or_default(),
                        id.digest.short()
                    )
                })
                .unwrap_or_else(|e| format!("unknown ({e})"));
            // `-v` lists the search directories on stderr; with `-o /dev/null` stdout is empty,
            // so the identity cache keeps stderr.
            let installed = fingerprint::tool_identity(
                &path,
                &[],
                &["-xc++", "-E", "-v", "/dev/null", "-o", "/dev/null"],
                cache,
            )
            .map(|id| installed_dirs(&id.version))
            .unwrap_or_default();
            (identity, installed)
        }
        None => (format!("{} not found", host.display()), Vec::new()),
    };
    HostCompiler {
        identity,
        dirs: Arc::new(SystemDirs {
            toolkit_root: toolkit_root.to_path_buf(),
            toolkit_top: toolkit.top.clone(),
            toolkit_system: toolkit.system.iter().cloned().map(SystemDir::new).collect(),
            toolkit_include: toolkit
                .include
                .iter()
                .cloned()
                .map(SystemDir::new)
                .collect(),
            installed: installed.into_iter().map(SystemDir::new).collect(),
            forced: vec![PathBuf::from("cuda_runtime.h")],
        }),
    }
}

/// The toolkit's directories as nvcc spells them to the host compiler: from its own `-dryrun`
/// (`TOP`, `INCLUDES`, `SYSTEM_INCLUDES`, expanded from `nvcc.profile` for the directory nvcc
/// runs from), through the identity cache, so a new process spawns nothing.
#[derive(Debug, Clone)]
struct ToolkitDirs {
    /// `$(_HERE_)/..`, as nvcc spells it.
    top: PathBuf,
    /// nvcc's `-I` directories.
    include: Vec<PathBuf>,
    /// nvcc's `-isystem` directories.
    system: Vec<PathBuf>,
}

impl ToolkitDirs {
    fn probe(nvcc: &Nvcc, cache: &mut IdentityCache) -> ToolkitDirs {
        // The answer depends on the path nvcc is run by (and, for a relative one, on the working
        // directory), which the identity cache's key (the binary's content and the arguments)
        // does not hold: a define nvcc ignores here names them.
        let mut run_as = nvcc.path().as_os_str().as_encoded_bytes().to_vec();
        if nvcc.path().is_relative() {
            if let Ok(cwd) = std::env::current_dir() {
                run_as.push(0);
                run_as.extend_from_slice(cwd.as_os_str().as_encoded_bytes());
            }
        }
        let named = format!(
            "-DJIT_CACHE_PROBE_{}",
            fingerprint::Digest::of_bytes(&run_as).short()
        );
        let dryrun = fingerprint::tool_identity(
            nvcc.path(),
            &[],
            &["-dryrun", "-cubin", &named, "jit-cache-probe.cu"],
            cache,
        );
        match dryrun.ok().and_then(|id| ToolkitDirs::parse(&id.version)) {
            Some(dirs) => dirs,
            None => {
                // An nvcc that cannot say: where its own path says (`bin/..`).
                let top = nvcc
                    .path()
                    .parent()
                    .unwrap_or_else(|| Path::new("."))
                    .join("..");
                let include = top.join("include");
                let cccl = include.join("cccl");
                ToolkitDirs {
                    top,
                    system: if cccl.is_dir() {
                        vec![cccl]
                    } else {
                        Vec::new()
                    },
                    include: vec![include],
                }
            }
        }
    }

    /// Reads the `#$ TOP=`, `#$ INCLUDES=` and `#$ SYSTEM_INCLUDES=` lines of `nvcc -dryrun`.
    fn parse(dryrun: &str) -> Option<ToolkitDirs> {
        let value = |name: &str| {
            dryrun
                .lines()
                .find_map(|l| l.strip_prefix("#$ ")?.strip_prefix(name)?.strip_prefix('='))
        };
        let top = PathBuf::from(value("TOP")?.trim());
        // nvcc quotes these lines as it reads an options file.
        let words = |text: &str| nvcc::cmdline::split_options_file(text).ok();
        let mut include = Vec::new();
        for word in words(value("INCLUDES").unwrap_or_default())? {
            include.push(PathBuf::from(word.strip_prefix("-I")?));
        }
        let mut system = Vec::new();
        let listed = words(value("SYSTEM_INCLUDES").unwrap_or_default())?;
        let mut items = listed.iter();
        while let Some(word) = items.next() {
            if word != "-isystem" {
                return None;
            }
            system.push(PathBuf::from(items.next()?));
        }
        Some(ToolkitDirs {
            top,
            include,
            system,
        })
    }
}

/// The directories between `#include <...> search starts here:` and `End of search list.` in a
/// GCC `-v` listing, as listed.
fn installed_dirs(listing: &str) -> Vec<PathBuf> {
    listing
        .lines()
        .skip_while(|l| !l.starts_with("#include <...> search starts here:"))
        .skip(1)
        .take_while(|l| !l.starts_with("End of search list."))
        .map(|l| PathBuf::from(l.trim()))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_toolkits_directories_are_read_from_nvccs_dryrun_lines() {
        let dryrun = "#$ _HERE_=/tk/bin\n#$ TOP=/tk/bin/..\n\
                      #$ INCLUDES=\"-I/tk/bin/../include\"  \n\
                      #$ SYSTEM_INCLUDES=\"-isystem\" \"/tk/bin/../include/cccl\"  \n\
                      #$ cicc ...\n";
        let dirs = ToolkitDirs::parse(dryrun).expect("parses");
        assert_eq!(dirs.top, PathBuf::from("/tk/bin/.."));
        assert_eq!(dirs.include, vec![PathBuf::from("/tk/bin/../include")]);
        assert_eq!(dirs.system, vec![PathBuf::from("/tk/bin/../include/cccl")]);
        assert!(
            ToolkitDirs::parse("#$ TOP=/tk\n#$ SYSTEM_INCLUDES=\"-I\" \"/x\"\n").is_none(),
            "a form the cache does not know is no toolkit"
        );
    }
}
