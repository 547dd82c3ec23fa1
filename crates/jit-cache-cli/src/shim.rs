//! `jit-cache shim DIR`: a masquerade CUDA toolkit, for pipelines that run `$CUDA_HOME/bin/nvcc`
//! and have no launcher variable (TVM-FFI's `build_inline` and `load`, and so FlashInfer's
//! loader, SGLang's `jit_kernel` and TileLang; torch's `cpp_extension` without `PYTORCH_NVCC`).
//!
//! DIR gets:
//! - `bin/nvcc`, a shell script that runs this binary's launcher over the real nvcc
//!   (`exec /path/to/jit-cache /real/bin/nvcc "$@"`), both paths recorded when the shim is made,
//!   so it works with `NVCC` unset and `CUDA_HOME` naming the shim itself. It is a script, not a
//!   symlink to this binary: a symlink found on `PATH` tells the launcher only its name, never
//!   which shim it belongs to, while the script hands the launcher the real nvcc in its argv.
//! - every other entry of the real toolkit (`include`, `lib`, `nvvm`, `bin/ptxas`,
//!   `bin/nvcc.profile`, ...) as an absolute symlink to it. The real nvcc runs from its own
//!   directory, so it reads its own `nvcc.profile` and runs its own companions.
//! - [`MARKER`], which records the two paths and tells a rerun that DIR is a shim it may replace.
//!
//! The tree is built in a staging directory beside DIR and published with one exchange
//! (`durable_fs::StagingDir::commit_replace`, fsynced before and after), so a reader sees the
//! old shim or the new one. DIR must be absent, empty or a shim: anything else is refused.
//!
//! The real nvcc is found as the launcher finds it (`real_nvcc.rs`: `NVCC`, `CUDA_HOME/bin/nvcc`,
//! ..., `PATH`), and a shim's own `bin/nvcc` found there stands for the nvcc it records
//! (`shim_marker.rs`), so a rerun with `CUDA_HOME` naming the shim records the same real nvcc,
//! never the shim itself.

use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::out::say;
use crate::shim_marker::{recorded_nvcc, Record, MARKER};

/// Exit statuses, as `main.rs` documents them.
const EXIT_USAGE: u8 = 2;
const EXIT_ERROR: u8 = 3;

/// Why a shim was not made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// DIR, or the toolkit found, is not what a shim may be made from or at.
    #[error("make a shim at {}: {refusal}", dir.display())]
    Refused { dir: PathBuf, refusal: Refusal },
    /// No real nvcc was found.
    #[error("make a shim at {}: {why}", dir.display())]
    NoNvcc { dir: PathBuf, why: String },
    /// A file operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Publishing the staged tree failed.
    #[error(transparent)]
    Fs(#[from] durable_fs::Error),
}

/// What makes a DIR or a toolkit unfit for a shim.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// DIR holds entries and no marker: never replaced.
    NotAShim,
    /// DIR is a file, a symlink or a special file.
    NotADirectory,
    /// The nvcc found has no `nvcc.profile` beside it: a wrapper, not a toolkit's nvcc, so there
    /// is no toolkit to mirror.
    NotAToolkitNvcc(PathBuf),
    /// The nvcc found is a shim's whose marker names another shim (a hand-edited marker).
    ShimOfAShim(PathBuf),
    /// A path the marker would hold has a newline in it (the marker is one path per line).
    Newline(PathBuf),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotAShim => write!(
                f,
                "the directory holds other files and no {MARKER} (give an absent or empty directory)"
            ),
            Refusal::NotADirectory => write!(f, "it is not a directory"),
            Refusal::NotAToolkitNvcc(nvcc) => write!(
                f,
                "{} has no nvcc.profile beside it, so it is no toolkit's nvcc (name the toolkit's with NVCC or CUDA_HOME)",
                nvcc.display()
            ),
            Refusal::ShimOfAShim(nvcc) => write!(
                f,
                "{} is a shim's nvcc whose marker names another shim",
                nvcc.display()
            ),
            Refusal::Newline(path) => {
                write!(f, "the path {} has a newline in it", path.display())
            }
        }
    }
}

/// Runs `jit-cache shim DIR`: prints the shim's directory (or a JSON document) and returns the
/// exit status; an error is said on stderr (or as JSON).
pub(crate) fn run(json: bool, dir: &Path) -> u8 {
    match make(dir) {
        Ok(made) => {
            if json {
                say!(
                    "{}",
                    json!({ "shim": made.dir, "nvcc": made.record.nvcc,
                            "launcher": made.record.launcher })
                );
            } else {
                say!("{}", made.dir.display());
            }
            0
        }
        Err(e) => {
            if json {
                say!("{}", json!({ "error": e.to_string() }));
            } else {
                eprintln!("jit-cache: {e}");
            }
            match e {
                Error::Refused { .. } | Error::NoNvcc { .. } => EXIT_USAGE,
                Error::Io { .. } | Error::Fs(_) => EXIT_ERROR,
            }
        }
    }
}

/// A shim made.
struct Made {
    dir: PathBuf,
    record: Record,
}

fn io_error<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn make(dir: &Path) -> Result<Made, Error> {
    let dir = std::path::absolute(dir).map_err(io_error("make absolute", dir))?;
    let refused = |refusal| Error::Refused {
        dir: dir.clone(),
        refusal,
    };
    check_target(&dir).map_err(refused)?;

    let found = crate::real_nvcc::find(None).map_err(|why| Error::NoNvcc {
        dir: dir.clone(),
        why,
    })?;
    let nvcc = std::fs::canonicalize(&found).map_err(io_error("resolve", &found))?;
    if recorded_nvcc(&nvcc).is_some() {
        return Err(refused(Refusal::ShimOfAShim(nvcc)));
    }
    let bin = nvcc.parent().unwrap_or(Path::new("/")).to_path_buf();
    if !bin.join("nvcc.profile").is_file() {
        return Err(refused(Refusal::NotAToolkitNvcc(nvcc)));
    }
    let root = bin.parent().unwrap_or(Path::new("/")).to_path_buf();
    let launcher =
        std::env::current_exe().map_err(io_error("find", Path::new("/proc/self/exe")))?;
    for path in [&nvcc, &launcher] {
        if path.as_os_str().as_bytes().contains(&b'\n') {
            return Err(refused(Refusal::Newline(path.clone())));
        }
    }
    let record = Record { nvcc, launcher };

    let parent = dir.parent().unwrap_or(Path::new("/"));
    durable_fs::create_dir_all_durable(parent, durable_fs::DirMode::DEFAULT)?;
    let staging = durable_fs::StagingDir::new_in(parent)?;
    mirror(&root, staging.path(), &["bin", MARKER])?;
    let staged_bin = staging.path().join("bin");
    std::fs::create_dir(&staged_bin).map_err(io_error("create directory", &staged_bin))?;
    mirror(&bin, &staged_bin, &["nvcc"])?;
    write_file(&staged_bin.join("nvcc"), &script(&record), 0o755)?;
    write_file(&staging.path().join(MARKER), &record.render(), 0o644)?;
    // The staging directory is 0777 less the umask, as `mkdir DIR` would make it.
    //
    // DIR was checked above; a process that fills an empty DIR between that check and this
    // exchange loses what it wrote (the old tree is removed after the exchange), a race only
    // with someone writing into the directory they are making a shim of.
    staging.commit_replace(&dir)?;
    Ok(Made { dir, record })
}

/// Whether `dir` may become a shim: absent, an empty directory, or a shim.
fn check_target(dir: &Path) -> Result<(), Refusal> {
    // Absent (or unreadable: the publication then names the error with its operation).
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Ok(());
    };
    if !meta.is_dir() {
        return Err(Refusal::NotADirectory);
    }
    let marked = std::fs::read(dir.join(MARKER))
        .ok()
        .is_some_and(|text| Record::parse(&text).is_some());
    let empty = std::fs::read_dir(dir)
        .map(|mut entries| entries.next().is_none())
        .unwrap_or(false);
    if marked || empty {
        Ok(())
    } else {
        Err(Refusal::NotAShim)
    }
}

/// Symlinks every entry of `from` (but `except`) into `to`, by absolute path.
fn mirror(from: &Path, to: &Path, except: &[&str]) -> Result<(), Error> {
    let entries = std::fs::read_dir(from).map_err(io_error("read directory", from))?;
    for entry in entries {
        let entry = entry.map_err(io_error("read directory", from))?;
        let name = entry.file_name();
        if except.iter().any(|e| name == *e) {
            continue;
        }
        let link = to.join(&name);
        std::os::unix::fs::symlink(entry.path(), &link)
            .map_err(io_error("create symlink", &link))?;
    }
    Ok(())
}

/// Writes a new file in the staging directory; its commit fsyncs the tree.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), Error> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io_error("create", path))?;
    file.write_all(bytes).map_err(io_error("write", path))?;
    // The mode asked for, whatever the umask: the script must be executable by whoever may run
    // the shim.
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io_error("set the mode of", path))
}

/// `bin/nvcc`: the launcher over the real nvcc, arguments unchanged.
fn script(record: &Record) -> Vec<u8> {
    let mut text = b"#!/bin/sh\n# A jit-cache shim's nvcc (jit-cache shim): the launcher over the real nvcc.\nexec ".to_vec();
    text.extend_from_slice(&quote(&record.launcher));
    text.push(b' ');
    text.extend_from_slice(&quote(&record.nvcc));
    text.extend_from_slice(b" \"$@\"\n");
    text
}

/// A path as one shell word: single-quoted, each `'` closed, escaped and reopened.
fn quote(path: &Path) -> Vec<u8> {
    let mut word = vec![b'\''];
    for &b in path.as_os_str().as_bytes() {
        if b == b'\'' {
            word.extend_from_slice(b"'\\''");
        } else {
            word.push(b);
        }
    }
    word.push(b'\'');
    word
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_path_is_one_shell_word() {
        assert_eq!(quote(Path::new("/a b/it's")), b"'/a b/it'\\''s'".to_vec());
    }
}
