//! `jit-cache` builds in the power-loss workload: a deterministic fake nvcc, a ledger of the
//! entries whose publication was reported, and the checks after a cut (durability of every
//! published entry, wholeness of every visible one, nothing left for `verify` or the sweep).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use jit_cache::{Cache, CacheOptions, GcPolicy, KernelSpec, Outcome};

use crate::error::Error;
use crate::mount::PowercutMount;
use crate::rng::SplitMix64;

/// The first line of every artifact the fake compiler writes.
const FAKE_HEADER: &[u8] = b"powercut-fs fake cubin v1\n";

/// How often the fake compiler repeats the source: artifacts of about 16 KiB span many sectors
/// and pages, so torn writes can split them.
const FAKE_REPEAT: usize = 128;

/// Kernel names (each a slot): a new text under an old name is a rebuild.
const KERNEL_NAMES: u64 = 3;

/// Published entries kept before the workload clears the cache, so a check stays cheap.
const MAX_PUBLISHED: usize = 12;

/// Versions per kernel name, reused in turn: a key evicted by a clear is built anew later, and
/// the key directories (which a clear leaves behind, empty) stay few, so a check stays cheap
/// however many cuts a run makes.
const VERSIONS: u64 = 40;

/// The fake nvcc: a shell script. `--version` names CUDA 13.5; a compile writes
/// [`fake_artifact`] of the source (the last argument) to `-o OUT` and `OUT: SOURCE` to the
/// dependency file (`-MF PATH` or `-Xcompiler=-MD,-MF,PATH`).
const FAKE_NVCC: &str = r#"#!/bin/sh
for a in "$@"; do
  if [ "$a" = -dryrun ]; then
    exit 1
  fi
  if [ "$a" = --version ] || [ "$a" = --help ]; then
    echo "nvcc: NVIDIA (R) Cuda compiler driver"
    echo "Cuda compilation tools, release 13.5, V13.5.0"
    exit 0
  fi
done
out=; dep=; prev=; src=
for a in "$@"; do
  case "$prev" in
    -o) out=$a ;;
    -MF) dep=$a ;;
  esac
  case "$a" in
    -Xcompiler=-MD,-MF,*) dep=${a#-Xcompiler=-MD,-MF,} ;;
  esac
  prev=$a
  src=$a
done
if [ -z "$out" ] || [ -z "$dep" ]; then
  echo "fake-nvcc: need -o OUT and a dependency file" >&2
  exit 2
fi
# One read of the source, then shell builtins only: a compile costs one fork, not 128.
body=$(cat "$src" && printf x) || exit 3
body=${body%x}
{
  printf 'powercut-fs fake cubin v1\n'
  i=0
  while [ $i -lt 128 ]; do printf '%s' "$body"; i=$((i+1)); done
} > "$out" || exit 3
printf '%s: %s\n' "$out" "$src" > "$dep" || exit 3
"#;

/// The bytes the fake compiler writes for a source `text`.
pub(crate) fn fake_artifact(text: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(FAKE_HEADER.len() + text.len() * FAKE_REPEAT);
    bytes.extend_from_slice(FAKE_HEADER);
    for _ in 0..FAKE_REPEAT {
        bytes.extend_from_slice(text.as_bytes());
    }
    bytes
}

/// The source text that [`fake_artifact`] turned into `bytes`, if it did.
fn source_of_artifact(bytes: &[u8]) -> Option<String> {
    let body = bytes.strip_prefix(FAKE_HEADER)?;
    if body.is_empty() || body.len() % FAKE_REPEAT != 0 {
        return None;
    }
    let text = std::str::from_utf8(&body[..body.len() / FAKE_REPEAT]).ok()?;
    (fake_artifact(text) == bytes).then(|| text.to_string())
}

/// The text of kernel `name`, version `version`.
fn kernel_text(name: &str, version: u64) -> String {
    format!(
        "// powercut-fs kernel {name}, version {version}\n\
         extern \"C\" __global__ void {name}(float* x) {{ x[threadIdx.x] *= {version}.0f; }}\n"
    )
}

/// What the build checks found after the cuts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildTotals {
    /// Builds that reported a publication (`Ok`, no warning, built or rebuilt).
    pub published: u64,
    /// Published builds checked after a cut (each counted at its first check).
    pub checked: u64,
    /// Checks of a published entry after a cut (every entry is checked after every cut).
    pub entry_checks: u64,
    /// Builds answered by a hit.
    pub hits: u64,
    /// Builds that fell back to an uncached compile (a warning) or failed.
    pub not_published: u64,
    /// Published entries missing (or missed by the cache) after a cut.
    pub lost: u64,
    /// Visible entries that are not whole, or that `verify` found corrupt.
    pub torn: u64,
    /// Staging directories, temps or trash the sweep should have removed but did not.
    pub leftovers: u64,
    /// Leftovers the sweeps after the cuts removed (staging directories, temps, trash).
    pub swept: u64,
    /// Injected fsync errors during a build that the build reported (warning or error).
    pub fsync_errors_returned: u64,
    /// Builds reported published although an injected fsync error hit them (must stay 0).
    pub published_after_fsync_error: u64,
}

impl BuildTotals {
    /// No violation of durability, atomicity, cleanup or error reporting.
    pub fn is_clean(&self) -> bool {
        self.lost == 0
            && self.torn == 0
            && self.leftovers == 0
            && self.published_after_fsync_error == 0
    }
}

/// A published entry: the spec that built it and the artifact it must hold.
#[derive(Debug, Clone)]
struct PublishedEntry {
    spec: KernelSpec,
    expected: Vec<u8>,
    checked_once: bool,
}

/// What one build step left for the round.
pub(crate) enum BuildStep {
    /// Go on with the round.
    Continue,
    /// The power is out, or an injected fault was reported: end the round.
    RoundOver,
}

/// The build part of the workload, its ledger and its checks.
pub(crate) struct JitBuilds {
    _fake_dir: tempfile::TempDir,
    fake: PathBuf,
    root: PathBuf,
    cache_root: PathBuf,
    cache: Option<Cache>,
    version: u64,
    /// Every text ever attempted, per kernel name: what a visible entry may hold.
    texts: BTreeMap<String, BTreeSet<String>>,
    /// Specs built before, asked again for hits.
    known: Vec<KernelSpec>,
    /// Published entries by directory (relative to the mount's root).
    published: BTreeMap<PathBuf, PublishedEntry>,
}

fn io_error(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl JitBuilds {
    /// Writes the fake compiler outside the mount; the cache lives at `<root>/jit-cache`.
    pub(crate) fn new(root: &Path) -> Result<JitBuilds, Error> {
        let dir = tempfile::Builder::new()
            .prefix("powercut-fake-nvcc-")
            .tempdir()
            .map_err(|e| Error::new("create a directory for", Path::new("fake nvcc"), e))?;
        let fake = dir.path().join("nvcc");
        std::fs::write(&fake, FAKE_NVCC).map_err(|e| Error::new("write", &fake, e))?;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::new("chmod", &fake, e))?;
        Ok(JitBuilds {
            _fake_dir: dir,
            fake,
            root: root.to_path_buf(),
            cache_root: root.join("jit-cache"),
            cache: None,
            version: 0,
            texts: BTreeMap::new(),
            known: Vec::new(),
            published: BTreeMap::new(),
        })
    }

    fn open_cache(&self) -> Result<Cache, Error> {
        let nvcc =
            nvcc::Nvcc::at(&self.fake).map_err(|e| Error::new("use", &self.fake, io_error(e)))?;
        let cache = Cache::open_with(&self.cache_root, CacheOptions::default().nvcc(nvcc))
            .map_err(|e| Error::new("open the cache", &self.cache_root, io_error(e)))?;
        // Probe the compiler now, before faults are armed: its identity file is a hint whose
        // failed save the cache ignores, which would blur which fsync a build's error came from.
        let probe = KernelSpec::from_text("probe", "probe.cu", kernel_text("probe", 0));
        cache
            .explain(&probe)
            .map_err(|e| Error::new("probe the compiler of", &self.cache_root, io_error(e)))?;
        Ok(cache)
    }

    /// Opens a fresh cache handle for the next round (after a cut, with the power on).
    pub(crate) fn begin_round(&mut self) -> Result<(), Error> {
        self.cache = Some(self.open_cache()?);
        Ok(())
    }

    /// Drops the cache handle and every pinned artifact before the power is cut.
    pub(crate) fn end_round(&mut self) {
        self.cache = None;
    }

    /// One build (or, when enough entries are published, a cache clear) on the mount.
    /// `eio_at_fsync` is the absolute fsync count that fails with EIO, if one is injected.
    pub(crate) fn step(
        &mut self,
        rng: &mut SplitMix64,
        mount: &PowercutMount,
        eio_at_fsync: Option<u64>,
        totals: &mut BuildTotals,
        violations: &mut Vec<String>,
    ) -> BuildStep {
        let Some(cache) = &self.cache else {
            return BuildStep::RoundOver;
        };
        if self.published.len() >= MAX_PUBLISHED {
            // Any entry may be evicted from here on: none is owed any more.
            self.published.clear();
            self.known.clear();
            return match cache.clear() {
                Ok(_) => BuildStep::Continue,
                Err(_) => BuildStep::RoundOver,
            };
        }
        let spec = if !self.known.is_empty() && rng.below(3) == 0 {
            self.known[rng.below(self.known.len() as u64) as usize].clone()
        } else {
            self.version += 1;
            let name = format!("k{}", rng.below(KERNEL_NAMES));
            let text = kernel_text(&name, 1 + self.version % VERSIONS);
            self.texts
                .entry(name.clone())
                .or_default()
                .insert(text.clone());
            KernelSpec::from_text(name, "k.cu", text)
        };
        let expected = match &spec.source {
            jit_cache::Source::Text { text, .. } => fake_artifact(text),
            jit_cache::Source::File(_) => Vec::new(),
        };
        let fsync_before = mount.counters().fsync;
        let result = cache.get_or_build(&spec);
        let fsync_after = mount.counters().fsync;
        let power_out = mount.power_is_out();
        // The injected EIO fired inside this build while the power was on.
        let eio_fired =
            !power_out && eio_at_fsync.is_some_and(|at| fsync_before < at && at <= fsync_after);
        match result {
            Ok(built) => {
                let fresh = matches!(built.outcome, Outcome::Built | Outcome::Rebuilt { .. });
                if built.warning.is_none() && built.artifact.bytes() != expected.as_slice() {
                    totals.torn += 1;
                    violations.push(format!(
                        "build of {} returned {} bytes that the compiler did not write",
                        spec.name,
                        built.artifact.bytes().len()
                    ));
                }
                if built.warning.is_some() {
                    totals.not_published += 1;
                    if eio_fired {
                        totals.fsync_errors_returned += 1;
                    }
                } else if fresh {
                    totals.published += 1;
                    if eio_fired {
                        totals.published_after_fsync_error += 1;
                        violations.push(format!(
                            "build of {} reported published after an fsync error",
                            spec.name
                        ));
                    }
                    let dir = built
                        .artifact
                        .path()
                        .parent()
                        .and_then(|d| d.strip_prefix(&self.root).ok())
                        .map(Path::to_path_buf);
                    match dir {
                        Some(dir) => {
                            let entry = PublishedEntry {
                                spec: spec.clone(),
                                expected,
                                checked_once: false,
                            };
                            self.published.insert(dir, entry);
                        }
                        None => {
                            totals.torn += 1;
                            violations.push(format!(
                                "build of {} published {} outside the cache",
                                spec.name,
                                built.artifact.path().display()
                            ));
                        }
                    }
                    if !self.known.contains(&spec) {
                        self.known.push(spec);
                    }
                } else {
                    totals.hits += 1;
                }
            }
            Err(_) => {
                totals.not_published += 1;
                if eio_fired {
                    totals.fsync_errors_returned += 1;
                }
            }
        }
        if power_out || eio_fired {
            BuildStep::RoundOver
        } else {
            BuildStep::Continue
        }
    }

    /// After a cut and remount: every visible entry whole, every published entry present and a
    /// hit, `verify` clean, and nothing left once the sweep has run on leftovers made old.
    pub(crate) fn check(
        &mut self,
        totals: &mut BuildTotals,
        violations: &mut Vec<String>,
    ) -> Result<(), Error> {
        let mut torn: BTreeMap<PathBuf, String> = BTreeMap::new();
        let mut lost: BTreeMap<PathBuf, String> = BTreeMap::new();
        // Atomicity first, before the cache's own checks move anything aside.
        let entries = self.cache_root.join(jit_cache::FORMAT_DIR).join("entries");
        for shard in children(&entries)? {
            for key_dir in children(&shard)? {
                for entry in children(&key_dir)? {
                    if is_temp(&entry) {
                        continue;
                    }
                    if let Err(why) = self.whole_entry(&entry) {
                        torn.insert(self.relative(&entry), why);
                    }
                }
            }
        }
        // Durability: every published entry is there, holds what was compiled, and is a hit.
        let cache = self.open_cache()?;
        for (dir, entry) in &mut self.published {
            totals.entry_checks += 1;
            if !entry.checked_once {
                entry.checked_once = true;
                totals.checked += 1;
            }
            let path = self.root.join(dir);
            match read_entry(&path) {
                Ok(None) => {
                    lost.insert(dir.clone(), "the published entry is gone".into());
                    continue;
                }
                Ok(Some(bytes)) if bytes != entry.expected => {
                    torn.insert(
                        dir.clone(),
                        format!("the published artifact holds {} other bytes", bytes.len()),
                    );
                    continue;
                }
                Ok(Some(_)) => {}
                Err(why) => {
                    torn.insert(dir.clone(), why);
                    continue;
                }
            }
            match cache.get_or_build(&entry.spec) {
                Ok(built)
                    if built.outcome == Outcome::Hit
                        && built.warning.is_none()
                        && built.artifact.bytes() == entry.expected.as_slice() => {}
                Ok(built) => {
                    lost.insert(
                        dir.clone(),
                        format!(
                            "the cache answered {} ({:?}) for a published entry",
                            built.outcome, built.warning
                        ),
                    );
                }
                Err(e) => {
                    lost.insert(dir.clone(), format!("the cache failed on it: {e}"));
                }
            }
        }
        // The cache's own view: nothing corrupt, and no leftovers once they are old enough.
        let report = cache
            .verify()
            .map_err(|e| Error::new("verify the cache", &self.cache_root, io_error(e)))?;
        for (dir, why) in report.corrupt {
            torn.insert(self.relative(&dir), format!("verify: {why}"));
        }
        let base = self.cache_root.join(jit_cache::FORMAT_DIR);
        let leftover_dirs = || -> Result<Vec<PathBuf>, Error> {
            let mut dirs: Vec<PathBuf> = ["staging", "slots", "failures", "state"]
                .iter()
                .map(|s| base.join(s))
                .collect();
            for shard in children(&base.join("entries"))? {
                dirs.extend(children(&shard)?);
            }
            Ok(dirs)
        };
        let old = SystemTime::now() - jit_cache::SWEEP_MIN_AGE - Duration::from_secs(3600);
        for dir in leftover_dirs()? {
            for item in children(&dir)? {
                if is_temp(&item) {
                    make_old(&item, old)?;
                }
            }
        }
        let swept = cache
            .sweep()
            .map_err(|e| Error::new("sweep the cache", &self.cache_root, io_error(e)))?;
        let gc = cache
            .gc(GcPolicy::default())
            .map_err(|e| Error::new("gc the cache", &self.cache_root, io_error(e)))?;
        totals.swept += (swept + gc.swept) as u64;
        if gc.evicted > 0 {
            // The default policy evicts nothing: an eviction here would hide lost entries.
            totals.lost += gc.evicted as u64;
            violations.push(format!("gc evicted {} entries", gc.evicted));
        }
        let mut left = Vec::new();
        for dir in leftover_dirs()? {
            left.extend(children(&dir)?.into_iter().filter(|p| is_temp(p)));
        }
        left.extend(children(&base.join("trash"))?);
        totals.leftovers += left.len() as u64;
        for item in left {
            violations.push(format!(
                "{}: left behind after the sweep",
                self.relative(&item).display()
            ));
        }
        // A violation is counted once: the entry is no longer owed after it was reported.
        for dir in lost.keys().chain(torn.keys()) {
            self.published.remove(dir);
        }
        totals.torn += torn.len() as u64;
        totals.lost += lost.len() as u64;
        for (dir, why) in torn {
            violations.push(format!("torn entry {}: {why}", dir.display()));
        }
        for (dir, why) in lost {
            violations.push(format!("lost entry {}: {why}", dir.display()));
        }
        Ok(())
    }

    fn relative(&self, path: &Path) -> PathBuf {
        path.strip_prefix(&self.root).unwrap_or(path).to_path_buf()
    }

    /// A visible entry is whole: `meta.json` parses, names an artifact of its `artifact_size`,
    /// and the artifact is what the fake compiler wrote for a text attempted under its name.
    fn whole_entry(&self, dir: &Path) -> Result<(), String> {
        let meta = read_meta(dir)?;
        let name = meta
            .get("name")
            .and_then(serde_json::Value::as_str)
            .ok_or("meta.json names no kernel")?;
        let artifact = read_artifact(dir, &meta)?;
        let text = source_of_artifact(&artifact).ok_or_else(|| {
            format!(
                "a {}-byte artifact the compiler never wrote whole",
                artifact.len()
            )
        })?;
        if !self.texts.get(name).is_some_and(|t| t.contains(&text)) {
            return Err(format!(
                "kernel {name} holds a text never built under that name"
            ));
        }
        Ok(())
    }
}

fn read_meta(dir: &Path) -> Result<serde_json::Value, String> {
    let path = dir.join("meta.json");
    let bytes = std::fs::read(&path).map_err(|e| format!("meta.json unreadable: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("meta.json does not parse: {e}"))
}

/// The artifact `meta` names, checked against its recorded size.
fn read_artifact(dir: &Path, meta: &serde_json::Value) -> Result<Vec<u8>, String> {
    let file = meta
        .get("artifact_file")
        .and_then(serde_json::Value::as_str)
        .ok_or("meta.json names no artifact")?;
    let size = meta
        .get("artifact_size")
        .and_then(serde_json::Value::as_u64)
        .ok_or("meta.json has no artifact_size")?;
    let bytes =
        std::fs::read(dir.join(file)).map_err(|e| format!("artifact {file} unreadable: {e}"))?;
    if bytes.len() as u64 != size {
        return Err(format!(
            "artifact is {} bytes, meta.json says {size}",
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// A published entry's artifact; `None` when the directory or its meta.json is gone.
fn read_entry(dir: &Path) -> Result<Option<Vec<u8>>, String> {
    match std::fs::symlink_metadata(dir.join("meta.json")) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("meta.json: {e}")),
        Ok(_) => {}
    }
    let meta = read_meta(dir)?;
    read_artifact(dir, &meta).map(Some)
}

/// The entries of `dir`, sorted; empty when it does not exist.
fn children(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let read = match std::fs::read_dir(dir) {
        Ok(read) => read,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::new("read directory", dir, e)),
    };
    let mut out = Vec::new();
    for entry in read {
        out.push(
            entry
                .map_err(|e| Error::new("read directory", dir, e))?
                .path(),
        );
    }
    out.sort();
    Ok(out)
}

fn is_temp(path: &Path) -> bool {
    path.file_name().is_some_and(durable_fs::is_temp_name)
}

/// Sets `path`'s times to `when`, so an age-limited sweep treats it as abandoned long ago.
fn make_old(path: &Path, when: SystemTime) -> Result<(), Error> {
    let since = when
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|e| Error::new("forge the mtime of", path, io_error(e)))?;
    let stamp = rustix::fs::Timespec {
        tv_sec: since.as_secs() as i64,
        tv_nsec: 0,
    };
    let times = rustix::fs::Timestamps {
        last_access: stamp,
        last_modification: stamp,
    };
    match rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    ) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(Error::new("forge the mtime of", path, e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_artifact_gives_back_its_source_and_a_torn_one_does_not() {
        let text = kernel_text("k0", 7);
        let bytes = fake_artifact(&text);
        assert!(bytes.len() > 8 * 1024, "artifacts span many sectors");
        assert_eq!(source_of_artifact(&bytes).as_deref(), Some(text.as_str()));
        let mut torn = bytes.clone();
        torn[4096] ^= 1;
        assert_eq!(source_of_artifact(&torn), None, "a flipped byte is torn");
        assert_eq!(
            source_of_artifact(&bytes[..bytes.len() - 512]),
            None,
            "a short artifact is torn"
        );
    }
}
