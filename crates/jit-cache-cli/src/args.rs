//! Command-line arguments.

use clap::{Args, Parser, Subcommand};
use jit_cache::{Error, KernelSpec, OutputKind, PackKind};
use std::path::PathBuf;
use std::time::Duration;

/// A content-keyed, crash-safe cache of compiled CUDA kernels. NVCC selects the compiler.
#[derive(Parser, Debug)]
#[command(name = "jit-cache", version)]
pub(crate) struct Cli {
    /// The cache root (default: $JIT_CACHE_DIR, $XDG_CACHE_HOME/jit-cache, ~/.cache/jit-cache).
    #[arg(long, global = true)]
    pub(crate) cache_dir: Option<PathBuf>,
    /// One JSON document per command, for scripts.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// A team cache: the root is a group-owned setgid directory (chmod 2770) shared by one group.
    #[arg(long, global = true)]
    pub(crate) team: bool,
    /// A fleet's remote tier: redis://host:port/db, redis+unix:///path or s3://bucket/prefix
    /// (endpoint and credentials from AWS_*) (default: $JIT_CACHE_REMOTE). Kernels other hosts
    /// built are fetched, verified and cached here.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) remote: Option<String>,
    /// read-write, read-only or off (default: $JIT_CACHE_REMOTE_MODE, else read-write).
    #[arg(long, global = true, value_name = "MODE")]
    pub(crate) remote_mode: Option<jit_cache::RemoteMode>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Build (or hit) each source; prints hit, built or rebuilt (reason) and the artifact path.
    Build {
        #[command(flatten)]
        spec: SpecArgs,
        /// Compiles at once (default: available parallelism).
        #[arg(short = 'j', long = "jobs")]
        jobs: Option<usize>,
    },
    /// Say what build would do for each source, and why, without compiling.
    Explain {
        #[command(flatten)]
        spec: SpecArgs,
    },
    /// Entries, bytes, builds recorded, failures, staging and trash.
    Stats,
    /// List the entries.
    Ls,
    /// Re-hash every artifact against its meta.json; move corrupt entries aside.
    Verify,
    /// Evict least recently used entries by size and age; sweep leftovers.
    Gc {
        /// Keep at most this much (e.g. 512M, 10G).
        #[arg(long, value_parser = parse_size)]
        max_size: Option<u64>,
        /// Evict entries unused for longer (e.g. 30m, 12h, 7d).
        #[arg(long, value_parser = parse_duration)]
        max_age: Option<Duration>,
    },
    /// Evict every entry not in use; forget slots and failures.
    Clear,
    /// Make DIR a CUDA toolkit whose bin/nvcc runs this launcher over the real nvcc (found now
    /// as the launcher finds it, and recorded), every other entry a link to the real toolkit's;
    /// prints DIR. For pipelines that run $CUDA_HOME/bin/nvcc: CUDA_HOME=$(jit-cache shim DIR).
    Shim {
        /// Absent, empty, or a shim made before (replaced atomically); anything else is refused.
        dir: PathBuf,
    },
    /// Kernel packs: chosen entries in one verified file, imported at disk speed elsewhere.
    Pack {
        #[command(subcommand)]
        command: PackCommand,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum PackCommand {
    /// Write the chosen entries (kernels and stored entries) into one pack file.
    Export {
        /// The pack to write (replaced durably if it exists).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Only entries whose name matches this glob (`*`, `?`; a stored entry's name is
        /// namespace/key).
        #[arg(long)]
        name: Option<String>,
        /// Only kernels built for this architecture (repeat for several).
        #[arg(long = "arch", value_parser = parse_pack_arch)]
        arches: Vec<String>,
        /// Only entries of this kind: cubin, ptx, fatbin, object, shared-library or stored
        /// (repeat for several).
        #[arg(long = "kind", value_parser = parse_pack_kind)]
        kinds: Vec<PackKind>,
    },
    /// Check a pack and publish its entries into the cache; entries whose recorded inputs do not
    /// match this host are skipped and counted.
    Import {
        /// The pack file.
        file: PathBuf,
    },
    /// List a pack's entries without importing them (its header and index are checked).
    Ls {
        /// The pack file.
        file: PathBuf,
    },
}

#[derive(Args, Debug)]
pub(crate) struct SpecArgs {
    /// CUDA source files.
    #[arg(required = true)]
    pub(crate) sources: Vec<PathBuf>,
    /// Target architecture (repeat for a fatbin).
    #[arg(long = "arch")]
    pub(crate) arches: Vec<String>,
    /// Include directory.
    #[arg(short = 'I')]
    pub(crate) include_dirs: Vec<PathBuf>,
    /// Definition NAME or NAME=VALUE.
    #[arg(short = 'D')]
    pub(crate) defines: Vec<String>,
    /// A compiler flag, passed as one argument.
    #[arg(long = "flag", allow_hyphen_values = true)]
    pub(crate) flags: Vec<String>,
    /// Output kind.
    #[arg(long, default_value = "cubin", value_parser = parse_kind)]
    pub(crate) kind: OutputKind,
    /// Kernel name (one source only; default: the file's stem).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Kill a compile (with everything it started) after this many seconds; it then fails with
    /// exit code 1, like any compile failure, and is never recorded.
    #[arg(long, value_parser = parse_seconds)]
    pub(crate) timeout: Option<std::time::Duration>,
}

impl SpecArgs {
    pub(crate) fn specs(&self) -> Result<Vec<KernelSpec>, Error> {
        if self.name.is_some() && self.sources.len() > 1 {
            return Err(Error::InvalidSpec {
                name: self.name.clone().unwrap_or_default(),
                reason: "--name takes one source".into(),
            });
        }
        let arches = if self.arches.is_empty() {
            vec!["sm_90".to_string()]
        } else {
            self.arches.clone()
        };
        Ok(self
            .sources
            .iter()
            .map(|source| {
                let mut spec = KernelSpec::from_file(source)
                    .kind(self.kind)
                    .arches(arches.clone());
                if let Some(name) = &self.name {
                    spec = spec.name(name.clone());
                }
                for dir in &self.include_dirs {
                    spec = spec.include_dir(dir.clone());
                }
                for define in &self.defines {
                    let (name, value) = match define.split_once('=') {
                        Some((n, v)) => (n, Some(v)),
                        None => (define.as_str(), None),
                    };
                    spec = spec.define(name, value);
                }
                for flag in &self.flags {
                    spec = spec.flag(flag.clone());
                }
                if let Some(timeout) = self.timeout {
                    spec = spec.timeout(timeout);
                }
                spec
            })
            .collect())
    }
}

fn parse_seconds(s: &str) -> Result<std::time::Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n > 0.0)
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| format!("`{s}` is not a positive number of seconds"))
}

/// The kinds `build --kind` makes, spelled by [`OutputKind::name`] (objects and shared
/// libraries are the launcher's, from nvcc's own command lines).
const BUILD_KINDS: [OutputKind; 3] = [OutputKind::Cubin, OutputKind::Ptx, OutputKind::Fatbin];

fn parse_kind(s: &str) -> Result<OutputKind, String> {
    BUILD_KINDS
        .into_iter()
        .find(|k| k.name() == s)
        .ok_or_else(|| {
            let names: Vec<&str> = BUILD_KINDS.iter().map(OutputKind::name).collect();
            format!("unknown kind `{s}` ({})", names.join(", "))
        })
}

fn parse_pack_arch(s: &str) -> Result<String, String> {
    jit_cache::KernelSpec::check_arch(s).map(|()| s.to_string())
}

fn parse_pack_kind(s: &str) -> Result<PackKind, String> {
    PackKind::from_name(s)
        .ok_or_else(|| format!("unknown kind `{s}` ({})", PackKind::names().join(", ")))
}

pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a size such as 512M or 10G"))?;
    let shift = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("unknown size unit in `{s}` (K, M, G, T)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("`{s}` is too large"))
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a duration such as 30m, 12h or 7d"))?;
    let secs = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("unknown duration unit in `{s}` (s, m, h, d)")),
    };
    Ok(Duration::from_secs(n.saturating_mul(secs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("1024"), Ok(1024));
        assert!(parse_size("ten").is_err());
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert!(parse_duration("3 weeks").is_err());
    }

    #[test]
    fn build_kinds_parse_by_their_names() {
        for kind in BUILD_KINDS {
            assert_eq!(parse_kind(kind.name()), Ok(kind), "{kind:?} by its name");
        }
        assert!(
            parse_kind("object").is_err(),
            "objects are the launcher's, not build's"
        );
    }
}
