//! Where a run happens: the `--fs` and `--keep-dir` arguments `run` and `race` share, and the
//! directory they provide.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;

/// Where a run happens: a directory on the chosen filesystem.
#[derive(Debug, Clone, clap::Args)]
pub struct FsArgs {
    /// The filesystem: tmp (the default temp dir), ext4, xfs, xfs4k, btrfs or tmpfs (loop
    /// mounts, private to this process and its children; needs root).
    #[arg(long, default_value = "tmp")]
    pub fs: String,
    /// Keep the run directory here instead of a temporary one (tmp only).
    #[arg(long)]
    keep_dir: Option<PathBuf>,
}

impl FsArgs {
    /// Runs `f` in a fresh directory on the chosen filesystem; children spawned inside inherit
    /// the private mount.
    pub fn within<R: Send>(
        &self,
        f: impl FnOnce(&std::path::Path) -> Result<R> + Send,
    ) -> Result<R> {
        if let Some(dir) = &self.keep_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
            return f(dir);
        }
        let Some(kind) = fs_testbed::FsKind::from_name(&self.fs) else {
            bail!(
                "unknown --fs {} (tmp, ext4, xfs, xfs4k, btrfs, tmpfs)",
                self.fs
            )
        };
        match fs_testbed::with_fs(kind, |root| f(root)) {
            Ok(result) => result,
            Err(skipped) => bail!("cannot provide --fs {}: {skipped}", self.fs),
        }
    }
}
