//! The layout of a run directory, the fake compiler's script, and helpers every process uses.

use anyhow::{Context, Result};
use jit_cache::{Cache, CacheOptions, KernelSpec};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where a multi-host run's shared data lives (see [`RunDir::at`]).
pub const DATA_ENV: &str = "CRASH_HARNESS_DATA";

/// The places inside one run directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// The run directory.
    pub root: PathBuf,
    /// The cache root.
    pub cache: PathBuf,
    /// Files written with `durable_fs::put`.
    pub puts: PathBuf,
    /// Directories published with `StagingDir::commit_noreplace`.
    pub dirs: PathBuf,
    /// The shared event log (`JIT_CACHE_LOCK_LOG`).
    pub trace: PathBuf,
    /// The workers' ledger of begun and finished puts and commits, and what they saw wrong.
    pub ledger: PathBuf,
    /// Per-worker phase files.
    pub phases: PathBuf,
    /// The fake compiler's script.
    pub nvcc: PathBuf,
    /// The workload's pack, made once per run (see [`make_pack`]), which workers import.
    pub pack: PathBuf,
}

impl RunDir {
    /// The run directory at `root`. In a multi-host run (`--fs nfs-sim`) the shared data (the
    /// cache, puts, staged directories) lives on the simulated export named by
    /// `CRASH_HARNESS_DATA`, and each host's processes log to their host's trace named by
    /// `JIT_CACHE_LOCK_LOG`: the harness's own files stay on the local disk, where `O_APPEND`
    /// is atomic (it is not across NFS clients).
    pub fn at(root: &Path) -> RunDir {
        let data = std::env::var_os(DATA_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| root.to_path_buf());
        RunDir::split(root, &data)
    }

    /// The harness's files under `root`, the shared data under `data`.
    pub fn split(root: &Path, data: &Path) -> RunDir {
        RunDir {
            root: root.to_path_buf(),
            cache: data.join("cache"),
            puts: data.join("data/puts"),
            dirs: data.join("data/dirs"),
            trace: std::env::var_os("JIT_CACHE_LOCK_LOG")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("logs/trace.log")),
            ledger: root.join("logs/ledger.log"),
            phases: root.join("logs/phases"),
            nvcc: root.join("fake-cuda/bin/nvcc"),
            pack: root.join("pack/workload.pack"),
        }
    }

    /// Creates the directories and the fake compiler's script (which runs this binary).
    pub fn create(&self) -> Result<()> {
        self.create_data()?;
        for dir in [&self.phases, &self.root.join("fake-cuda/bin")] {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let exe = std::env::current_exe().context("locate crash-harness")?;
        let script = format!("#!/bin/sh\nexec '{}' fake-nvcc \"$@\"\n", exe.display());
        std::fs::write(&self.nvcc, script)
            .with_context(|| format!("write {}", self.nvcc.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&self.nvcc, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("chmod {}", self.nvcc.display()))?;
        Ok(())
    }

    /// Creates the shared data directories (on a host, in a multi-host run).
    pub fn create_data(&self) -> Result<()> {
        for dir in [&self.puts, &self.dirs] {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        Ok(())
    }

    pub fn phase_file(&self, slot: usize) -> PathBuf {
        self.phases.join(format!("worker-{slot}"))
    }

    /// Opens the cache with the fake compiler (and the run's remote tier, if it has one).
    pub fn open_cache(&self) -> Result<Cache> {
        self.open_root(&self.cache, crate::remote::from_env()?)
    }

    /// Opens the cache at `root` with the fake compiler and `remote`.
    pub fn open_root(&self, root: &Path, remote: Option<jit_cache::Remote>) -> Result<Cache> {
        let nvcc = nvcc::Nvcc::at(&self.nvcc)
            .with_context(|| format!("fake nvcc at {}", self.nvcc.display()))?;
        let mut options = CacheOptions::default().nvcc(nvcc);
        if let Some(remote) = remote {
            options = options.remote(remote);
        }
        Cache::open_with(root, options).with_context(|| format!("open cache {}", root.display()))
    }
}

/// Kernels and stored entries in the workload's pack: the first few of each, enough for an
/// import to take several locks and publish both kinds, few enough to make quickly.
const PACK_KERNELS: usize = 6;
const PACK_STORED: usize = 4;

/// Makes the workload's pack at `run.pack`: the first kernels built and the first stored entries
/// produced in a private root (`pack-source`, outside the cache root, so its compiles are not
/// the workers'), then exported. Every byte in it is the workload's, so whatever the workers
/// read of an imported entry is checked as if they had built it.
pub fn make_pack(run: &RunDir, kernels: usize, store_keys: usize) -> Result<()> {
    // No remote: the pack is made from this root alone.
    let cache = run.open_root(&run.root.join("pack-source"), None)?;
    for i in 0..kernels.min(PACK_KERNELS) {
        cache
            .get_or_build(&spec(i))
            .with_context(|| format!("build kernel {i} for the pack"))?;
    }
    let store = cache.store()?;
    for i in 0..store_keys.min(PACK_STORED) {
        let key = crash_harness::store_key(i);
        let claim = store
            .begin(&namespace(), &key, std::time::Duration::from_secs(5))
            .with_context(|| format!("begin {key} for the pack"))?;
        if let jit_cache::store::Claim::Produce(producer) = claim {
            produce(producer, i).with_context(|| format!("produce {key} for the pack"))?;
        }
    }
    if let Some(dir) = run.pack.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    cache
        .export_pack(&run.pack, &jit_cache::PackFilter::default())
        .with_context(|| format!("export {}", run.pack.display()))?;
    Ok(())
}

/// Writes stored entry `index`'s files (the workload's) through `producer` and commits them, at
/// once (the worker's own producer paces itself and has a failpoint between two files).
pub fn produce(
    producer: jit_cache::store::Producer,
    index: usize,
) -> jit_cache::Result<jit_cache::store::StoredEntry> {
    crash_harness::stored_files(index)
        .iter()
        .try_for_each(|(name, bytes)| producer.write(name, bytes))?;
    producer.commit()
}

/// The spec of kernel `index`.
pub fn spec(index: usize) -> KernelSpec {
    let name = crash_harness::kernel_name(index);
    KernelSpec::from_text(
        name.clone(),
        format!("{name}.cu"),
        crash_harness::kernel_text(index),
    )
}

/// The workload's store namespace.
pub fn namespace() -> jit_cache::store::Namespace {
    jit_cache::store::Namespace::new(crash_harness::STORE_NAMESPACE)
        .expect("the workload's namespace is a valid name")
}

/// The key directory's digest (hex) of stored entry `index`, as `jit_cache::store` computes it
/// (its preimage, restated here so the event log can name the key before anything is published;
/// the checker compares it with the published entries' directories, so a drift is caught).
pub fn store_digest(index: usize) -> String {
    let mut text = b"jit-cache stored entry 1\0".to_vec();
    text.extend_from_slice(crash_harness::STORE_NAMESPACE.as_bytes());
    text.push(0);
    text.extend_from_slice(crash_harness::store_key(index).as_bytes());
    fingerprint::Digest::of_bytes(&text).to_hex()
}

/// What is wrong with a stored entry the store handed out as stored entry `index`: its
/// directory is not the key's, its files are not exactly the workload's, or a file's bytes
/// (read through the store, which checks them against `meta.json`) are not the workload's.
pub fn stored_entry_problems(entry: &jit_cache::store::StoredEntry, index: usize) -> Vec<String> {
    let mut problems = Vec::new();
    let key_dir = entry
        .dir()
        .parent()
        .and_then(|k| k.file_name())
        .and_then(|k| k.to_str());
    if key_dir != Some(store_digest(index).as_str()) {
        problems.push(format!(
            "{} is not in the key's directory {}",
            entry.dir().display(),
            store_digest(index)
        ));
    }
    let expected = crash_harness::stored_files(index);
    let names: Vec<&str> = entry.files().collect();
    let mut wanted: Vec<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
    wanted.sort_unstable();
    if names != wanted {
        problems.push(format!("files {names:?}, expected {wanted:?}"));
    }
    for (name, bytes) in &expected {
        match entry.read(name) {
            Ok(read) if read == *bytes => {}
            Ok(read) => problems.push(format!(
                "{name}: {} bytes that are not the producer's",
                read.len()
            )),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    problems
}

/// Kernel names to key hex, as the cache computes them, for the kernels `indices`.
pub fn keys(
    cache: &Cache,
    indices: impl IntoIterator<Item = usize>,
) -> Result<HashMap<String, String>> {
    indices
        .into_iter()
        .map(|i| {
            let explained = cache
                .explain(&spec(i))
                .with_context(|| format!("explain kernel {i}"))?;
            Ok((explained.name, explained.key))
        })
        .collect()
}

/// What is wrong with the cache's answer for kernel `index` (its bytes are not what the
/// compiler makes of the kernel's text, or there is none), if anything.
pub fn answer_problem(cache: &Cache, index: usize) -> Option<String> {
    match cache.get_or_build(&spec(index)) {
        Ok(built)
            if built.artifact.bytes()
                == crash_harness::expected_artifact(&crash_harness::kernel_text(index))
                    .as_slice() =>
        {
            None
        }
        Ok(built) => Some(format!(
            "k{index}: wrong bytes ({} bytes, {})",
            built.artifact.bytes().len(),
            built.outcome
        )),
        Err(e) => Some(format!("k{index}: {e}")),
    }
}

/// Appends one line to an `O_APPEND` log with a single write.
pub fn append(path: &Path, pid: u32, event: &str, key: &str, detail: &str) {
    let line = format!(
        "{} {} {pid} {event} {key} {detail}\n",
        crate::fake_nvcc::setup_clock::mono(),
        crate::fake_nvcc::setup_clock::real()
    );
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Writes a phase name into a phase file (the same 32-byte record jit-cache's failpoints write).
pub fn set_phase(file: Option<&std::fs::File>, name: &str) {
    use std::os::unix::fs::FileExt;
    let Some(file) = file else { return };
    let mut record = [b' '; 32];
    let len = name.len().min(31);
    record[..len].copy_from_slice(&name.as_bytes()[..len]);
    record[31] = b'\n';
    let _ = file.write_at(&record, 0);
}

/// Reads a phase file.
pub fn read_phase(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_else(|_| "starting".into())
}

/// The phase a point or a worker's phase name belongs to, for the report.
pub fn phase_class(name: &str) -> &'static str {
    use jit_cache::Failpoint as F;
    // jit-cache's points by its own table, each given a phase (a new point must be).
    if let Ok(point) = name.parse::<F>() {
        return match point {
            F::Locked => "locked",
            F::Compiling => "compiling",
            F::WritingMeta => "writing",
            F::Publishing => "publishing",
            F::Published => "published",
            F::Evicting | F::EvictingSecondLook => "evicting",
            F::StoreLocked => "store-locked",
            F::StoreWritingMeta => "store-writing-meta",
            F::StorePublishing => "store-publishing",
            F::StorePublished => "store-published",
            F::ImportLocked => "import-locked",
            F::ImportStaging => "import-staging",
            F::ImportPublishing => "import-publishing",
            F::ImportPublished => "import-published",
            F::VerifyFoundCorrupt => "other",
        };
    }
    match name {
        "store-writing" => "store-writing",
        "store-begin" | "store-checking" => "store-lookup",
        "importing" => "import-reading",
        "put-writing" | "commit-writing" => "writing",
        "put-fsyncing" | "commit-fsyncing" => "fsyncing",
        "gc" => "gc",
        "verifying" => "verifying",
        "get" | "checking" => "lookup",
        "" | "starting" => "starting",
        _ => "other",
    }
}

/// The phases every run must kill in; a run that misses one fails. The `store-` ones are a
/// stored entry's producer (`jit_cache::store`): holding the key, between two of its files, writing
/// `meta.json`, renaming, and just after. The `import-` ones are a pack's importer
/// (`Cache::import_pack`): holding a chunk's locks, writing an entry's staged tree, renaming the
/// chunk's trees, and writing their records after.
pub const REQUIRED_PHASES: [&str; 14] = [
    "compiling",
    "writing",
    "fsyncing",
    "publishing",
    "evicting",
    "store-locked",
    "store-writing",
    "store-writing-meta",
    "store-publishing",
    "store-published",
    "import-locked",
    "import-staging",
    "import-publishing",
    "import-published",
];

/// Sets an old mtime on `path` (without following symlinks), so the sweep's age rule is met
/// without waiting.
pub fn age(path: &Path) {
    let stamp = rustix::fs::Timespec {
        tv_sec: 1_000_000_000,
        tv_nsec: 0,
    };
    let times = rustix::fs::Timestamps {
        last_access: stamp,
        last_modification: stamp,
    };
    let _ = rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    );
}
